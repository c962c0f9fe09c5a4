// CPU flash attention (mf_attention): the CUDA kernels' semantics, computed
// tile by tile with an online softmax so that no (q_len, k_len) buffer exists.
//
// Work split: one OpenMP work item per (sequence b, kv head g, block of BM
// query rows); the item stacks the grp = n_heads / n_kv_heads query heads of
// g under each other, so its Q tile is M = BM * grp rows (row r = query
// (i0 + r / grp), head g * grp + r % grp) and every K/V byte it reads serves
// all grp heads. For each block of BN visible keys:
//     S = scale * Q K^T            (M x BN, cblas_sgemm)
//     mask (causal / window) -> -inf; per row m' = max(m, max S),
//     P = exp(S - m'), l = l exp(m - m') + sum P, O *= exp(m - m')
//     O += P V                     (M x D, cblas_sgemm)
// then o = O / l and lse = m + log l (blind rows: o = 0, lse = -inf).
// Only the key range that some row of the tile sees is visited (causal and
// window skip the rest), and only keys below the sequence's length are read,
// so NaN past k_len in a cache never reaches anything. f16/bf16 tiles are
// widened to f32 (f32 K/V with a usable row stride are passed to BLAS in
// place); all math is f32. OpenBLAS runs single-threaded inside the
// parallel region (its own threads would fight OpenMP's for the cores).
//
// Decode (a sequence of at most kDecodeRows query rows per kv head: q_len *
// grp) takes a second path, key-major, without BLAS: see "Decode path"
// below; in a call that mixes both (a serving step: decode rows beside a
// prompt chunk) each sequence takes its own path. Its q.k and p.v run in
// 8-lane tiles where the CPU has AVX2 or AVX-512 (attention_tiles.h; f32,
// f16 or bf16 cache).
//
// A paged cache (block_table) is read through the table: a tile that spans
// blocks is gathered into scratch, decode panels stop at block ends.
//
// Index arrays are host memory here: their values are checked before
// anything is written.
#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/alloc.h"
#include "core/error.h"
#include "cpu/cpu.h"
#include "cpu/skinny.h"
#include "cpu/team.h"
#include "cpu/vmath.h"

// Keys per block: 128 keeps the S tile (M x BN floats) in L2 for prefill
// tiles (M ~ 128); tiles of at most 32 rows (short chunks over a cache with
// more rows than the decode path takes) use 512, so that each sgemm call
// does 4x the work (OpenBLAS's per-call cost dominates at small M).
enum { kBlockN = 128, kBlockNDecode = 512 };

// Query rows per tile: about 128 (query x head) rows, at least 8 queries, at
// most 64 (a larger causal tile wastes more of its diagonal block).
static int64_t block_m(int64_t grp) {
    int64_t bm = 128 / grp;
    return bm < 8 ? 8 : bm > 64 ? 64 : bm;
}

typedef struct {
    int64_t qrow;  // row index of its first query: into (total_q) or b * q_len (fixed)
    int64_t q_len, k_len;
    int64_t kbase, vbase; // element offset of key 0, kv head 0 (paged: unused)
    const int32_t *table; // paged cache: its row of the block table; NULL: keys are rows of one run
} att_seq;

typedef struct {
    int32_t b, g;
    int64_t i0;
} att_item;

typedef struct {
    const mf_attention_args *p;
    const att_seq *seq;
    int64_t H, KVH, grp, D, BM, BN;
    int64_t q_rs, q_hs, o_rs, o_hs; // q/o: row (query) and head strides, per qrow index
    bool fixed;                     // (batch, q_len, ...) q/o: row (b, i) at b * q_bs + i * q_rs
    int64_t q_bs, o_bs;
    int64_t k_rs, k_hs, v_rs, v_hs; // k/v: key-position and head strides
    int64_t bs, k_bs, v_bs;         // paged cache: keys per block, k/v block strides
    float scale;
} att_geom;

// Element offsets of key j's row (kv head 0) in k and v.
static inline int64_t key_off(const att_geom *G, const att_seq *s, int64_t j) {
    if (!s->table) return s->kbase + j * G->k_rs;
    return s->table[j / G->bs] * G->k_bs + (j % G->bs) * G->k_rs;
}
static inline int64_t val_off(const att_geom *G, const att_seq *s, int64_t j) {
    if (!s->table) return s->vbase + j * G->v_rs;
    return s->table[j / G->bs] * G->v_bs + (j % G->bs) * G->v_rs;
}

// Keys from j on that lie in one run of rows (paged: up to the end of j's block), at most n.
static inline int64_t run_len(const att_geom *G, const att_seq *s, int64_t j, int64_t n) {
    if (!s->table) return n;
    const int64_t left = G->bs - j % G->bs;
    return left < n ? left : n;
}

// Element offset of query row (b, i) in q (or o) from the per-sequence row index.
static inline int64_t row_off(const att_geom *G, const att_seq *s, int64_t b, int64_t i, int64_t rs, int64_t bs) {
    if (G->fixed) return b * bs + i * rs;
    return (s->qrow + i) * rs;
}

// Keys query i of a sequence sees: [lo, hi) (empty when hi <= lo).
static inline void visible(const mf_attention_args *p, int64_t q_len, int64_t k_len, int64_t i, int64_t *lo,
                           int64_t *hi) {
    int64_t l = 0, h = k_len;
    if (p->causal) {
        const int64_t last = i + k_len - q_len; // last visible key
        if (last + 1 < h) h = last + 1;
        if (p->window > 0 && last - p->window + 1 > l) l = last - p->window + 1;
    }
    *lo = l, *hi = h;
}

// Keys some query of [i0, i1] sees: [lo, hi) (visible's lower bound and
// upper bound both grow with i).
static inline void visible_span(const mf_attention_args *p, int64_t q_len, int64_t k_len, int64_t i0, int64_t i1,
                                int64_t *lo, int64_t *hi) {
    int64_t l, h;
    visible(p, q_len, k_len, i0, lo, &h);
    visible(p, q_len, k_len, i1, &l, hi);
}

typedef struct {
    float *q, *o, *s, *k, *v, *m, *l;
} att_scratch;

// Whether a parallel region is worth it: more than one thread and `work`.
static bool use_threads(bool work) {
#ifdef _OPENMP
    return work && omp_get_max_threads() > 1;
#else
    (void)work;
    return false;
#endif
}

// A thread's scratch inside a parallel region (NULL and *oom set when out
// of memory: the thread then skips its items and the op fails after).
static float *thread_scratch(size_t floats, int *oom) {
    float *buf = mf_malloc(floats * sizeof(float));
    if (!buf) {
#pragma omp atomic write
        *oom = 1;
    }
    return buf;
}

// s[c] = exp(s[c] - m) for s[c] <= m (masked: -inf -> 0) with the
// vectorising exp of src/cpu/vmath.h (libm's expf is one call per score).
// A NaN score gives 0: NaN in visible q or k is not propagated by the CPU
// twin.
MF_CPU_HOT static void exp_row(float *s, int64_t n, float m) {
#pragma omp simd
    for (int64_t c = 0; c < n; c++) {
        const float e = mf_exp_nonpos(s[c] - m);
        s[c] = mf_sel(mf_mask((mf_fbits(e) & 0x7fffffffu) > 0x7f800000u), 0.0f, e);
    }
}

static void run_item(const att_geom *G, const att_item *it, const att_scratch *w) {
    const mf_attention_args *p = G->p;
    const att_seq *s = &G->seq[it->b];
    const int64_t D = G->D, grp = G->grp, b = it->b, g = it->g, i0 = it->i0;
    const int64_t ni = s->q_len - i0 < G->BM ? s->q_len - i0 : G->BM, M = ni * grp;
    const mf_dtype dt = p->k.dtype; // K and V (q and o: p->q.dtype, the same or f32)

    for (int64_t ii = 0; ii < ni; ii++) {
        const int64_t qo = row_off(G, s, b, i0 + ii, G->q_rs, G->q_bs) + g * grp * G->q_hs;
        for (int64_t hh = 0; hh < grp; hh++)
            mf_cpu_to_f32(w->q + (ii * grp + hh) * D, p->q.data, p->q.dtype, qo + hh * G->q_hs, D);
    }
    memset(w->o, 0, (size_t)(M * D) * sizeof(float));
    for (int64_t r = 0; r < M; r++) w->m[r] = -INFINITY, w->l[r] = 0.0f;

    int64_t jlo, jhi;
    visible_span(p, s->q_len, s->k_len, i0, i0 + ni - 1, &jlo, &jhi);
    // f32 rows go to BLAS in place when their stride is a valid leading dimension.
    // (A paged tile that spans blocks is gathered, as f16/bf16 tiles are widened.)
    const int64_t BN = G->BN;
    for (int64_t j0 = jlo; j0 < jhi; j0 += BN) {
        const int64_t nb = jhi - j0 < BN ? jhi - j0 : BN;
        const bool one_run = run_len(G, s, j0, nb) == nb;
        const bool kdirect = one_run && dt == MF_DTYPE_F32 && G->k_rs >= D && G->k_rs <= INT32_MAX;
        const bool vdirect = one_run && dt == MF_DTYPE_F32 && G->v_rs >= D && G->v_rs <= INT32_MAX;
        const float *kb = w->k, *vb = w->v;
        int64_t ldk = D, ldv = D;
        if (kdirect) {
            kb = (const float *)p->k.data + key_off(G, s, j0) + g * G->k_hs, ldk = G->k_rs;
        } else {
            for (int64_t j = 0; j < nb; j++)
                mf_cpu_to_f32(w->k + j * D, p->k.data, dt, key_off(G, s, j0 + j) + g * G->k_hs, D);
        }
        if (vdirect) {
            vb = (const float *)p->v.data + val_off(G, s, j0) + g * G->v_hs, ldv = G->v_rs;
        } else {
            for (int64_t j = 0; j < nb; j++)
                mf_cpu_to_f32(w->v + j * D, p->v.data, dt, val_off(G, s, j0 + j) + g * G->v_hs, D);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)M, (blasint)nb, (blasint)D, G->scale, w->q,
                    (blasint)D, kb, (blasint)ldk, 0.0f, w->s, (blasint)BN);
        for (int64_t r = 0; r < M; r++) {
            float *sr = w->s + r * BN;
            int64_t lo, hi;
            visible(p, s->q_len, s->k_len, i0 + r / grp, &lo, &hi);
            const int64_t c0 = lo - j0, c1 = hi - j0; // visible columns [c0, c1) of this block
            for (int64_t c = 0; c < nb && c < c0; c++) sr[c] = -INFINITY;
            for (int64_t c = c1 > 0 ? c1 : 0; c < nb; c++) sr[c] = -INFINITY;
            const float mx = mf_row_max(sr, nb);
            const float mnew = mx > w->m[r] ? mx : w->m[r];
            if (mnew == -INFINITY) { // nothing visible yet: P row 0
                memset(sr, 0, (size_t)nb * sizeof(float));
                continue;
            }
            exp_row(sr, nb, mnew);
            const float sum = mf_row_sum(sr, nb);
            if (mnew != w->m[r]) {
                const float a = expf(w->m[r] - mnew); // 0 when m was -inf
                float *orow = w->o + r * D;
                for (int64_t d = 0; d < D; d++) orow[d] *= a;
                w->l[r] *= a;
                w->m[r] = mnew;
            }
            w->l[r] += sum;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)M, (blasint)D, (blasint)nb, 1.0f, w->s,
                    (blasint)BN, vb, (blasint)ldv, 1.0f, w->o, (blasint)D);
    }

    float *lse = p->lse ? (float *)p->lse->data : NULL;
    for (int64_t ii = 0; ii < ni; ii++) {
        const int64_t oo = row_off(G, s, b, i0 + ii, G->o_rs, G->o_bs) + g * grp * G->o_hs;
        const int64_t lrow = s->qrow + i0 + ii; // lse is contiguous: (rows, H)
        for (int64_t hh = 0; hh < grp; hh++) {
            const int64_t r = ii * grp + hh;
            const float L = w->l[r], inv = L > 0.0f ? 1.0f / L : 0.0f;
            float *orow = w->o + r * D;
            for (int64_t d = 0; d < D; d++) orow[d] *= inv;
            mf_cpu_from_f32(p->o.data, p->o.dtype, oo + hh * G->o_hs, orow, D);
            if (lse) lse[lrow * G->H + g * grp + hh] = L > 0.0f ? w->m[r] + logf(L) : -INFINITY;
        }
    }
}

// ---------------------------------------------------------------------------
// Decode path. A work item is one chunk of kDecodeChunk keys of one sequence,
// for all its queries and heads: it reads each K row and then each V row
// whole and in order (all kv heads of a key lie side by side in a KV cache)
// and leaves, per (query, head) row, the chunk's max m, sum l = sum_j
// exp(s_j - m) and unnormalised O = sum_j exp(s_j - m) v_j. A second pass
// merges a row's chunks in key order. Per-head tiles would read a 128-256
// byte slice of every row, one head per thread; on the 2-core dev VM such
// strided reads ran at 2-3 GB/s against 13-16 GB/s for whole rows (notes:
// docs/notes/cpu.md). Chunk bounds are fixed key positions, so the result
// does not depend on the thread count. Row r of an item or partial is query
// r / H, head r % H. 64 keys: one sequence at context 128-192 makes 2-3
// items for 2 threads, not 1-2 of unequal size (SmolLM2 geometry, batch 1:
// attention 4.0 -> 3.0 ms a step; 32 keys: no better there, and slower at 32
// sequences of the default model; docs/notes/cpu.md).
enum { kDecodeRows = 8, kDecodeChunk = 64, kDecodePanel = 8 };

typedef struct {
    int32_t b;
    int64_t j0, j1; // keys [j0, j1) of sequence b
} dec_item;

typedef struct {
    float *q, *s, *t; // q: (R, D) widened; s: (R, kDecodeChunk) scores; t: (D) a row in sk order or out of it
    int32_t *rows;    // (R): the rows of each kv head in turn (the 8-lane tiles)
} dec_scratch;

// A row of D f32 into sk order (to_sk) or back: only for bf16 K/V, whose
// 16-blocks v8_load16 delivers even elements first.
static void dec_sk(float *dst, const float *src, int64_t D, bool to_sk) {
    for (int64_t e = 0; e < D; e++) {
        const int64_t at = e < D / 16 * 16 ? v8_pos(e) : e;
        if (to_sk)
            dst[at] = src[e];
        else
            dst[e] = src[at];
    }
}

// Row r of a chunk is query r / H, head r % H, kv head (r % H) / grp: a kv
// head's grp rows of a query are adjacent and share each load of K / V
// (the skinny kernels of src/cpu/skinny.h, in passes of up to SK_ROWS rows,
// instantiated per pass height and dtype).
#define DEC_PASSES(CALL)                                                                                     \
    for (int64_t i = 0, r = 0; i < nq; i++)                                                                  \
        for (int64_t g = 0; g < KVH; g++)                                                                    \
            for (int64_t n, h0 = 0; h0 < grp; h0 += n, r += n) {                                             \
                n = grp - h0 < SK_ROWS ? grp - h0 : SK_ROWS;                                                 \
                switch (n) {                                                                                 \
                case 1: CALL(1); break;                                                                      \
                case 2: CALL(2); break;                                                                      \
                case 3: CALL(3); break;                                                                      \
                default: CALL(4); break;                                                                     \
                }                                                                                            \
            }

// One key (kv head g at k + g * khs bytes): s[r * kDecodeChunk] = scale q_r . k_{head(r)}.
V8_INLINE void dec_qk_t(mf_dtype dt, const float *q, int64_t nq, int64_t KVH, int64_t grp, int64_t D, const char *k,
                        int64_t khs, float scale, float *s) {
#define QK(NR) sk_nt(NR, dt, D, q + r * D, D, k + g * khs, 0, scale, 0.0f, s + r * kDecodeChunk, kDecodeChunk, 0, 1)
    DEC_PASSES(QK)
#undef QK
}

// nk <= kDecodePanel keys (key i's kv head g at v + i * vrs elements + g * vhs bytes):
// o_r += sum_i p[r * kDecodeChunk + i] v_{i, head(r)}, SK_NB columns at a time
// in registers, the columns past the last SK_NB one by one.
V8_INLINE void dec_pv_t(mf_dtype dt, const float *p, int64_t nq, int64_t KVH, int64_t grp, int64_t D, const char *v,
                        int64_t vrs, int64_t vhs, int64_t nk, float *o) {
#define PV(NR)                                                                                                 \
    for (int64_t d = 0; d + SK_NB <= D; d += SK_NB)                                                          \
        sk_nn_tile(NR, dt, 0, nk, p + r * kDecodeChunk, kDecodeChunk, v + g * vhs, vrs, o + r * D, D, d);   \
    for (int64_t d = D / SK_NB * SK_NB; d < D; d++)                                                          \
        for (int64_t c = 0; c < nk; c++)                                                                     \
            for (int64_t e = 0; e < NR; e++)                                                                 \
                o[(r + e) * D + d] += p[(r + e) * kDecodeChunk + c] * v8_load1(v + g * vhs, dt, c * vrs + d)
    DEC_PASSES(PV)
#undef PV
}
#undef DEC_PASSES

MF_CPU_HOT static void dec_qk(mf_dtype dt, const float *q, int64_t nq, int64_t KVH, int64_t grp, int64_t D,
                              const char *k, int64_t khs, float scale, float *s) {
    if (dt == MF_DTYPE_BF16)
        dec_qk_t(MF_DTYPE_BF16, q, nq, KVH, grp, D, k, khs, scale, s);
    else if (dt == MF_DTYPE_F16)
        dec_qk_t(MF_DTYPE_F16, q, nq, KVH, grp, D, k, khs, scale, s);
    else
        dec_qk_t(MF_DTYPE_F32, q, nq, KVH, grp, D, k, khs, scale, s);
}
MF_CPU_HOT static void dec_pv(mf_dtype dt, const float *p, int64_t nq, int64_t KVH, int64_t grp, int64_t D,
                              const char *v, int64_t vrs, int64_t vhs, int64_t nk, float *o) {
    if (dt == MF_DTYPE_BF16)
        dec_pv_t(MF_DTYPE_BF16, p, nq, KVH, grp, D, v, vrs, vhs, nk, o);
    else if (dt == MF_DTYPE_F16)
        dec_pv_t(MF_DTYPE_F16, p, nq, KVH, grp, D, v, vrs, vhs, nk, o);
    else
        dec_pv_t(MF_DTYPE_F32, p, nq, KVH, grp, D, v, vrs, vhs, nk, o);
}

// The rows of each kv head g (query i, head g grp + e) at rows[g n ..], in
// order; n, their count per kv head.
static int64_t dec_rows(const att_geom *G, const att_seq *s, int32_t *rows) {
    const int64_t n = s->q_len * G->grp;
    for (int64_t g = 0; g < G->KVH; g++)
        for (int64_t i = 0; i < s->q_len; i++)
            for (int64_t e = 0; e < G->grp; e++) rows[g * n + i * G->grp + e] = (int32_t)(i * G->H + g * G->grp + e);
    return n;
}

// The 8-lane decode kernels (attention_tiles.h) of one instantiation.
typedef struct {
    void (*qk)(mf_dtype, const float *, int64_t, const int32_t *, int64_t, int64_t, const char *const *, int64_t,
               int64_t, float, float *, int64_t);
    void (*pv)(mf_dtype, const float *, int64_t, const int32_t *, int64_t, int64_t, const char *const *, int64_t,
               int64_t, int64_t, float *);
    void (*softmax)(float *, int64_t, float *, float *);
} dec_kernels;
static const dec_kernels k_avx512 = {mf_cpu_dec_qk_avx512, mf_cpu_dec_pv_avx512, mf_cpu_dec_softmax_avx512},
                         k_avx2 = {mf_cpu_dec_qk_avx2, mf_cpu_dec_pv_avx2, mf_cpu_dec_softmax_avx2};

// One chunk: partial m, l (R floats each) and O (R x D) at pm, pl, po. fast:
// q.k, softmax and p.v in those kernels (dec_attention decides), rows in
// order (no sk order); NULL: the portable loops.
static void dec_run(const att_geom *G, const dec_item *it, const dec_scratch *w, const dec_kernels *fast, float *pm,
                    float *pl, float *po) {
    const mf_attention_args *p = G->p;
    const att_seq *s = &G->seq[it->b];
    const int64_t H = G->H, D = G->D, grp = G->grp, R = s->q_len * H, nb = it->j1 - it->j0;
    const mf_dtype dt = p->k.dtype; // K and V; q in its own (the same, or f32 over a 16-bit cache)
    const bool sk = v8_sk(dt) && !fast;
    for (int64_t i = 0; i < s->q_len; i++)
        for (int64_t h = 0; h < H; h++) {
            float *qr = w->q + (i * H + h) * D;
            mf_cpu_to_f32(sk ? w->t : qr, p->q.data, p->q.dtype,
                          row_off(G, s, it->b, i, G->q_rs, G->q_bs) + h * G->q_hs, D);
            if (sk) dec_sk(qr, w->t, D, true);
        }
    const int64_t es = (int64_t)mf_dtype_size(dt);
    const char *kb = (const char *)p->k.data, *vb = (const char *)p->v.data;
    const char *kp[kDecodeChunk], *vp[kDecodeChunk];
    int32_t *rows = w->rows; // each kv head's query rows
    if (fast) {
        for (int64_t j = 0; j < nb; j++) {
            kp[j] = kb + key_off(G, s, it->j0 + j) * es;
            vp[j] = vb + val_off(G, s, it->j0 + j) * es;
        }
        fast->qk(dt, w->q, D, rows, dec_rows(G, s, rows), G->KVH, kp, G->k_hs, nb, G->scale, w->s, kDecodeChunk);
    } else {
        for (int64_t j = 0; j < nb; j++)
            dec_qk(dt, w->q, s->q_len, G->KVH, grp, D, kb + key_off(G, s, it->j0 + j) * es, G->k_hs * es, G->scale,
                   w->s + j);
    }
    for (int64_t r = 0; r < R; r++) {
        float *sr = w->s + r * kDecodeChunk;
        int64_t lo, hi;
        visible(p, s->q_len, s->k_len, r / H, &lo, &hi);
        const int64_t c0 = lo - it->j0, c1 = hi - it->j0;
        for (int64_t c = 0; c < nb && c < c0; c++) sr[c] = -INFINITY;
        for (int64_t c = c1 > 0 ? c1 : 0; c < nb; c++) sr[c] = -INFINITY;
        if (fast) {
            fast->softmax(sr, nb, &pm[r], &pl[r]);
            continue;
        }
        pm[r] = mf_row_max(sr, nb);
        if (pm[r] == -INFINITY) {
            memset(sr, 0, (size_t)nb * sizeof(float));
            pl[r] = 0.0f;
        } else {
            exp_row(sr, nb, pm[r]);
            pl[r] = mf_row_sum(sr, nb);
        }
    }
    if (fast) {
        fast->pv(dt, w->s, kDecodeChunk, rows, s->q_len * grp, G->KVH, vp, G->v_hs, nb, D, po);
        return;
    }
    memset(po, 0, (size_t)(R * D) * sizeof(float));
    for (int64_t j = 0, nk; j < nb; j += nk) { // panels of whole rows of V (all kv heads), within a block
        nk = run_len(G, s, it->j0 + j, nb - j < kDecodePanel ? nb - j : kDecodePanel);
        dec_pv(dt, w->s + j, s->q_len, G->KVH, grp, D, vb + val_off(G, s, it->j0 + j) * es, G->v_rs, G->v_hs * es,
               nk, po);
    }
}

// Merges the chunks [t0, t1) of sequence b (partials of Rmax rows each) into
// o and lse (fast: the partials' rows are in order, not in sk order).
static void dec_merge(const att_geom *G, int32_t b, int64_t t0, int64_t t1, int64_t Rmax, const float *pm,
                      const float *pl, const float *po, const dec_scratch *w, bool fast) {
    float *orow = w->q;
    const mf_attention_args *p = G->p;
    const bool sk = v8_sk(p->v.dtype) && !fast;
    const att_seq *s = &G->seq[b];
    const int64_t H = G->H, D = G->D;
    float *lse = p->lse ? (float *)p->lse->data : NULL;
    for (int64_t r = 0; r < s->q_len * H; r++) {
        const int64_t i = r / H, h = r % H;
        float m = -INFINITY, L = 0.0f;
        for (int64_t t = t0; t < t1; t++) m = pm[t * Rmax + r] > m ? pm[t * Rmax + r] : m;
        memset(orow, 0, (size_t)D * sizeof(float));
        if (m != -INFINITY)
            for (int64_t t = t0; t < t1; t++) {
                const float a = expf(pm[t * Rmax + r] - m); // 0 for a chunk the row sees nothing of
                const float *o = po + (t * Rmax + r) * D;
                for (int64_t d = 0; d < D; d++) orow[d] += a * o[d];
                L += a * pl[t * Rmax + r];
            }
        const float inv = L > 0.0f ? 1.0f / L : 0.0f;
        for (int64_t d = 0; d < D; d++) orow[d] *= inv;
        if (sk) dec_sk(w->t, orow, D, false);
        mf_cpu_from_f32(p->o.data, p->o.dtype, row_off(G, s, b, i, G->o_rs, G->o_bs) + h * G->o_hs, sk ? w->t : orow,
                        D);
        if (lse) lse[(s->qrow + i) * H + h] = L > 0.0f ? m + logf(L) : -INFINITY;
    }
}

// A sequence the decode path takes: at most kDecodeRows query rows a kv head.
static inline bool dec_seq(const att_geom *G, const att_seq *s) { return s->q_len * G->grp <= kDecodeRows; }

// Decode chunks of sequence s: keys [lo, hi) cut at multiples of kDecodeChunk.
static int64_t dec_chunks(const att_geom *G, const att_seq *s, int64_t *lo, int64_t *hi) {
    const mf_attention_args *p = G->p;
    if (s->q_len == 0 || !dec_seq(G, s)) return 0;
    visible_span(p, s->q_len, s->k_len, 0, s->q_len - 1, lo, hi);
    return *hi > *lo ? (*hi - 1) / kDecodeChunk - *lo / kDecodeChunk + 1 : 0;
}

// One of dec_attention's two sections: its chunks (merge false) or its
// sequences' merges, dealt out one at a time (a chunk's partial, or a
// sequence's output, does not depend on which thread computes it).
typedef struct {
    const att_geom *G;
    const dec_item *items;
    const int64_t *first;          // (batch + 1): sequence b's items are [first[b], first[b + 1])
    float *pm, *pl, *po;           // partials: (items, Rmax) max and sum, (items, Rmax, D) output
    float *scratch;                // (threads, per_thread)
    int64_t per_thread, Rmax;
    const dec_kernels *fast; // the 8-lane kernels, or NULL: the portable loops
    bool merge;
    _Atomic int64_t next;          // the next chunk (or sequence) to take
    int64_t n;                     // chunks (or sequences)
} dec_job;

static void dec_part(void *arg, int t, int nt) {
    (void)nt;
    dec_job *j = arg;
    const att_geom *G = j->G;
    const int64_t Rmax = j->Rmax, D = G->D;
    dec_scratch w = {.q = j->scratch + t * j->per_thread};
    w.s = w.q + Rmax * D, w.t = w.s + Rmax * kDecodeChunk, w.rows = (int32_t *)(w.t + D);
    for (int64_t i; (i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n;)
        if (!j->merge)
            dec_run(G, &j->items[i], &w, j->fast, j->pm + i * Rmax, j->pl + i * Rmax, j->po + i * Rmax * D);
        else if (dec_seq(G, &G->seq[i]))
            dec_merge(G, (int32_t)i, j->first[i], j->first[i + 1], Rmax, j->pm, j->pl, j->po, &w, j->fast != NULL);
}

static mf_status dec_attention(const att_geom *G, int64_t qmax) {
    const mf_attention_args *p = G->p;
    const int64_t H = G->H, D = G->D, Rmax = qmax * H;
    int64_t n_items = 0, lo, hi;
    for (int32_t b = 0; b < p->batch; b++) n_items += dec_chunks(G, &G->seq[b], &lo, &hi);
    // One block per call: first[b] (sequence b's items: [first[b], first[b + 1])),
    // the items, their partials (m, l: Rmax floats each; O: Rmax x D) and each
    // thread's scratch (rounded to 64 bytes: no shared cache lines).
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    const int64_t per_thread = (Rmax * D + Rmax * kDecodeChunk + D + Rmax + 15) / 16 * 16; // rows: Rmax int32
    const size_t bytes = (size_t)(p->batch + 1) * sizeof(int64_t) + (size_t)n_items * sizeof(dec_item) +
                         ((size_t)(n_items * Rmax * (D + 2)) + (size_t)(threads * per_thread)) * sizeof(float) + 64;
    int64_t *first = mf_malloc(bytes);
    if (!first)
        return mf_fail(MF_ERR_OOM, "attention: out of host memory for %lld decode chunks of %lld rows (head_dim %lld)",
                       (long long)n_items, (long long)Rmax, (long long)D);
    dec_item *items = (dec_item *)(first + p->batch + 1);
    float *pm = (float *)(items + n_items), *pl = pm + n_items * Rmax, *po = pl + n_items * Rmax;
    float *scratch = (float *)(((uintptr_t)(po + n_items * Rmax * D) + 63) / 64 * 64);
    int64_t t = 0;
    for (int32_t b = 0; b < p->batch; b++) {
        first[b] = t;
        if (dec_chunks(G, &G->seq[b], &lo, &hi) == 0) continue;
        for (int64_t j0 = lo; j0 < hi; j0 = (j0 / kDecodeChunk + 1) * kDecodeChunk) {
            const int64_t j1 = (j0 / kDecodeChunk + 1) * kDecodeChunk;
            items[t++] = (dec_item){.b = b, .j0 = j0, .j1 = j1 < hi ? j1 : hi};
        }
    }
    first[p->batch] = t;
    const mf_dtype kt = p->k.dtype;
    const bool shapes = (kt == MF_DTYPE_F32 || kt == MF_DTYPE_F16 || kt == MF_DTYPE_BF16) && p->v.dtype == kt &&
                        D % 16 == 0 && D <= 256;
    const dec_kernels *fast = !shapes ? NULL : mf_cpu_avx512() ? &k_avx512 : mf_cpu_avx2() ? &k_avx2 : NULL;
    dec_job j = {.G = G, .items = items, .first = first, .pm = pm, .pl = pl, .po = po, .scratch = scratch,
                 .per_thread = per_thread, .Rmax = Rmax, .fast = fast, .n = n_items};
    const bool par = use_threads(n_items > 1 || p->batch > 1); // on the hot team (team.h)
    for (int merge = 0; merge < 2; merge++) { // the chunks, then the merges
        j.merge = merge, j.n = merge ? p->batch : n_items;
        atomic_store(&j.next, 0);
        if (par && (!merge || p->batch > 1)) // one sequence's merge: the caller alone
            mf_cpu_team_run(dec_part, &j);
        else
            dec_part(&j, 0, 1);
    }
    free(first);
    return MF_OK;
}

// Host checks of the index arrays (their values; shapes were checked in src/ops).
static mf_status check_cu(const int32_t *cu, const char *name, int32_t batch, int64_t total, int64_t max_len,
                          const char *max_name, const char *rows_of) {
    if (cu[0] < 0) return mf_fail(MF_ERR_INVALID_ARG, "attention: %s[0] = %d (want >= 0)", name, cu[0]);
    for (int32_t b = 0; b < batch; b++) {
        if (cu[b + 1] < cu[b])
            return mf_fail(MF_ERR_INVALID_ARG, "attention: %s[%d] = %d < %s[%d] = %d (must not decrease)", name,
                           b + 1, cu[b + 1], name, b, cu[b]);
        if ((int64_t)cu[b + 1] - cu[b] > max_len)
            return mf_fail(MF_ERR_INVALID_ARG, "attention: sequence %d has length %d in %s, past %s = %lld", b,
                           cu[b + 1] - cu[b], name, max_name, (long long)max_len);
    }
    if (cu[batch] > total)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: %s[%d] = %d past the %lld rows of %s", name, batch, cu[batch],
                       (long long)total, rows_of);
    return MF_OK;
}

static mf_status fill_seqs(const mf_attention_args *p, att_seq *seq) {
    const int32_t batch = p->batch;
    if (!p->cu_seqlens_q) { // fixed
        for (int32_t b = 0; b < batch; b++) {
            seq[b].table = NULL;
            seq[b].qrow = (int64_t)b * p->q.shape[1];
            seq[b].q_len = p->q.shape[1], seq[b].k_len = p->k.shape[1];
            seq[b].kbase = b * p->k.stride[0], seq[b].vbase = b * p->v.stride[0];
        }
        return MF_OK;
    }
    const int32_t *cuq = p->cu_seqlens_q->data;
    MF_TRY(check_cu(cuq, "cu_seqlens_q", batch, p->q.shape[0], p->max_q_len, "max_q_len", "q"));
    if (p->cu_seqlens_k) { // packed
        const int32_t *cuk = p->cu_seqlens_k->data;
        MF_TRY(check_cu(cuk, "cu_seqlens_k", batch, p->k.shape[0], p->max_k_len, "max_k_len", "k"));
        for (int32_t b = 0; b < batch; b++) {
            seq[b].qrow = cuq[b], seq[b].q_len = cuq[b + 1] - cuq[b], seq[b].table = NULL;
            seq[b].k_len = cuk[b + 1] - cuk[b];
            seq[b].kbase = (int64_t)cuk[b] * p->k.stride[0], seq[b].vbase = (int64_t)cuk[b] * p->v.stride[0];
        }
        return MF_OK;
    }
    const int32_t *kl = p->k_lens->data, *slots = p->slots ? p->slots->data : NULL;
    const int64_t n_slots = p->k.shape[0], max_len = p->k.shape[1];
    const mf_tensor *bt = p->block_table;
    const int64_t width = bt ? bt->shape[1] : 1, max_keys = bt ? width * max_len : max_len;
    for (int32_t b = 0; b < batch; b++) {
        const int64_t slot = slots ? slots[b] : b;
        if (!bt && (slot < 0 || slot >= n_slots))
            return mf_fail(MF_ERR_INVALID_ARG, "attention: slots[%d] = %lld out of range [0, n_slots = %lld)", b,
                           (long long)slot, (long long)n_slots);
        if (kl[b] < 0 || kl[b] > max_keys)
            return mf_fail(MF_ERR_INVALID_ARG, "attention: k_lens[%d] = %d out of range [0, %s = %lld]", b, kl[b],
                           bt ? "max_blocks x block_size" : "max_len", (long long)max_keys);
        seq[b].table = NULL;
        if (bt) {
            const int32_t *row = (const int32_t *)bt->data + b * bt->stride[0];
            for (int64_t i = 0; i < (kl[b] + max_len - 1) / max_len; i++)
                if (row[i] < 0 || row[i] >= n_slots)
                    return mf_fail(MF_ERR_INVALID_ARG,
                                   "attention: block_table[%d, %lld] = %d out of range [0, n_blocks = %lld)", b,
                                   (long long)i, row[i], (long long)n_slots);
            seq[b].table = row;
        }
        if (kl[b] > p->max_k_len)
            return mf_fail(MF_ERR_INVALID_ARG, "attention: k_lens[%d] = %d past max_k_len = %lld", b, kl[b],
                           (long long)p->max_k_len);
        seq[b].qrow = cuq[b], seq[b].q_len = cuq[b + 1] - cuq[b], seq[b].k_len = kl[b];
        seq[b].kbase = slot * p->k.stride[0], seq[b].vbase = slot * p->v.stride[0];
    }
    return MF_OK;
}

mf_status mf_cpu_attention(mf_backend *be, const mf_attention_args *p) {
    (void)be;
    const bool fixed = !p->cu_seqlens_q, cache = p->k_lens != NULL;
    const int qnd = fixed ? 4 : 3, knd = cache || fixed ? 4 : 3;
    att_geom G = {.p = p, .scale = p->scale};
    G.H = p->q.shape[qnd - 2], G.D = p->q.shape[qnd - 1], G.KVH = p->k.shape[knd - 2];
    G.grp = G.H / G.KVH, G.BM = block_m(G.grp);
    G.q_rs = p->q.stride[qnd - 3], G.q_hs = p->q.stride[qnd - 2];
    G.o_rs = p->o.stride[qnd - 3], G.o_hs = p->o.stride[qnd - 2];
    G.fixed = fixed, G.q_bs = p->q.stride[0], G.o_bs = p->o.stride[0];
    G.k_rs = p->k.stride[knd - 3], G.k_hs = p->k.stride[knd - 2];
    G.v_rs = p->v.stride[knd - 3], G.v_hs = p->v.stride[knd - 2];
    G.bs = p->k.shape[1], G.k_bs = p->k.stride[0], G.v_bs = p->v.stride[0]; // paged cache only

    att_seq *seq = mf_malloc((size_t)(p->batch > 0 ? p->batch : 1) * sizeof *seq);
    if (!seq) return mf_fail(MF_ERR_OOM, "attention: out of host memory for %d sequences", (int)p->batch);
    mf_status st = fill_seqs(p, seq);
    if (st != MF_OK) {
        free(seq);
        return st;
    }
    G.seq = seq;
    // Sequences of at most kDecodeRows query rows a kv head take the decode
    // path, the others the tiles below, in the same call: a decode row of a
    // serving step gets the same path (and bits) whether or not another
    // sequence's prompt chunk shares the step.
    int64_t qmax = 0, qdec = 0;
    bool any_dec = false;
    for (int32_t b = 0; b < p->batch; b++)
        if (dec_seq(&G, &seq[b]))
            qdec = seq[b].q_len > qdec ? seq[b].q_len : qdec, any_dec = true;
        else
            qmax = seq[b].q_len > qmax ? seq[b].q_len : qmax;
    if (any_dec) st = dec_attention(&G, qdec > 0 ? qdec : 1);
    if (st != MF_OK || qmax == 0) {
        free(seq);
        return st;
    }
    int64_t n_items = 0;
    for (int32_t b = 0; b < p->batch; b++)
        if (!dec_seq(&G, &seq[b])) n_items += G.KVH * ((seq[b].q_len + G.BM - 1) / G.BM);
    att_item *items = mf_malloc((size_t)(n_items > 0 ? n_items : 1) * sizeof *items);
    if (!items) {
        free(seq);
        return mf_fail(MF_ERR_OOM, "attention: out of host memory for %lld work items", (long long)n_items);
    }
    // Later query blocks first: under causal they are the longest (dynamic schedule balances the tail).
    int64_t n = 0;
    for (int32_t b = 0; b < p->batch; b++)
        for (int64_t i0 = !dec_seq(&G, &seq[b]) ? (seq[b].q_len - 1) / G.BM * G.BM : -1; i0 >= 0; i0 -= G.BM)
            for (int64_t g = 0; g < G.KVH; g++) items[n++] = (att_item){.b = b, .g = (int32_t)g, .i0 = i0};

    int64_t Mmax = G.BM * G.grp;
    if (qmax < G.BM) Mmax = (qmax > 0 ? qmax : 1) * G.grp; // decode: tiles of a few rows
    G.BN = Mmax <= 32 ? kBlockNDecode : kBlockN;
    const int64_t D = G.D, BN = G.BN;
    const size_t floats = (size_t)(2 * Mmax * D + Mmax * BN + 2 * BN * D + 2 * Mmax);
    const bool par = use_threads(n_items > 1);
    const int blas_threads = mf_cpu_blas_serial(par);
    int oom = 0;
#pragma omp parallel if (par)
    {
        float *buf = thread_scratch(floats, &oom);
        att_scratch w = {0};
        if (buf) {
            w.q = buf, w.o = w.q + Mmax * D, w.s = w.o + Mmax * D, w.k = w.s + Mmax * BN;
            w.v = w.k + BN * D, w.m = w.v + BN * D, w.l = w.m + Mmax;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < n_items; i++)
            if (buf) run_item(&G, &items[i], &w);
        free(buf);
    }
    mf_cpu_blas_restore(blas_threads);
    free(items);
    free(seq);
    if (oom)
        return mf_fail(MF_ERR_OOM, "attention: out of host memory for a %lld x %lld tile (head_dim %lld)",
                       (long long)Mmax, (long long)BN, (long long)D);
    return MF_OK;
}
