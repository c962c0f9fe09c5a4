// Flash attention cases (mf_attention): fixed, packed (varlen) and cache
// modes, GQA/MQA, causal (bottom-right) with q_len < k_len and q_len > k_len,
// sliding windows, lse, strided q/k/v (columns of one fused q|k|v buffer),
// permuted cache slots with NaN everywhere a sequence must not read.
//
// Inputs: q and k uniform in [-2, 2) (logits of std ~1.3 after the 1/sqrt(D)
// scale, so the weights vary), v uniform in [-1, 1) with one element in 512
// multiplied by 100; "outliers" cases multiply one q/k element in 256 by 20
// (peaked rows whose max moves between key blocks: the rescaling must be
// right). Everything a sequence must not see is NaN: the output buffer
// (poisoned by the harness), cache slots no sequence uses, and cache
// positions at and past k_lens[b].
//
// Reference in double from the stored (already rounded) inputs:
//   s_j = scale q.k_j over the visible keys, m = max s, p_j = exp(s_j - m),
//   l = sum p, o = sum p_j v_j / l, lse = m + log l; a row that sees no key:
//   o = 0 and lse = -inf, exactly.
//
// Tolerance: FlashAttention's rule, 2x the error of a same-precision
// computation, with that error bounded from the arithmetic (u = 2^-24 the f32
// unit roundoff, u_in = th_eps(dtype), n the visible keys, A_j = |scale|
// sum_d |q_d k_jd|, nblk = ceil(n / 64) key blocks):
//   logit error   D_j = (2 sqrt(D) + 4) u A_j      f32 dot product (random-walk
//                       growth, as the softmax test; products of stored bf16/f16
//                       values are exact in f32), scale (and log2 e) folded in:
//                     + 3 u |s_j|  + 2 u |s_j - m|  exp's argument rounded
//                     + (8 + 2 nblk) u             exp itself and one rescale
//                       of the running max per block (a relative error of p_j
//                       acts like a logit error of the same size)
//   weights       p'_j / p_j lies in [e^-t_j, e^t_j] with t_j = D_j + log sum_k
//                 p_k e^(D_k) (Jensen), so since sum (p' - p) = 0:
//                 |d o_d| <= sum_j p_j expm1(t_j) |v_jd - o_d|
//   P rounding    tensor-core kernels round P to the input dtype before P.V,
//                 while l sums the unrounded f32 values (P unnormalised, <= 1):
//                     + u_in sum_j p_j |v_jd| + tiny_in sum_j |v_jd| / l
//   P.V and l     f32 sums of n terms: (2 sqrt(n) + 8) u (sum_j p_j |v_jd| + |o_d|)
//   output        one rounding to the dtype: u_in |o_d| + tiny
//   bound_d = 2 x (the sum of the above). lse (f32):
//     2 x (log sum_k p_k e^(D_k) + (2 sqrt(n) + 8) u + 2 u |lse|).
// A wrong mask edge, a lost rescale, a stale max or a read past k_len shows
// as an O(p_j) error on rows with few visible keys; f32 bounds are ~1e-6
// relative, so an extra or missing key is caught on every row there.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "cuda/cuda_query.h"

typedef enum { AM_FIXED = 0, AM_PACKED = 1, AM_CACHE = 2, AM_PAGED = 3 } at_mode;
static const char *const mode_names[] = {"fixed", "packed", "cache", "paged"};

enum { AT_MAX_SEQ = 8, AT_MAX_BLOCKS = 64 };

typedef struct {
    mf_dtype dt;
    at_mode mode;
    int nseq;                                  // fixed: batch (all sequences ql[0] x kl[0])
    int64_t ql[AT_MAX_SEQ], kl[AT_MAX_SEQ];    // per-sequence lengths
    int64_t H, KVH, D;
    bool causal;
    int64_t window;
    bool lse;
    bool fused;     // q, k, v: columns of one (rows, (H + 2 KVH) D) buffer (needs ql == kl)
    bool permute;   // cache: slots given (a permutation into n_slots = nseq + 2); else slot b
    int64_t bs;     // paged: keys per block; blocks are a random permutation of a pool with 3 spare
    bool share;     // paged: sequence 1 reads sequence 0's full leading blocks (a shared prefix)
    bool outliers;
    bool gpu_only;  // reference for a subset of rows; skipped on the CPU
    float scale;    // 0: 1 / sqrt(D)
    int32_t num_splits;
    bool kv16;      // k and v in kvt (f16/bf16) under f32 q and o: a 16-bit KV cache (CPU; CUDA refuses)
    mf_dtype kvt;
} at_p;

// Element offset of (row, head, d) in a 3-D view, or (b, i, head, d) in a 4-D one.
static inline int64_t off3(const mf_tensor *t, int64_t r, int64_t h, int64_t d) {
    return r * t->stride[0] + h * t->stride[1] + d * t->stride[2];
}
static inline int64_t off4(const mf_tensor *t, int64_t b, int64_t i, int64_t h, int64_t d) {
    return b * t->stride[0] + i * t->stride[1] + h * t->stride[2] + d * t->stride[3];
}

// Paged: element offset of key j (kv head g) of sequence b through its table row.
static inline int64_t paged_off(const mf_tensor *t, const int32_t *tab, int64_t bs, int64_t j, int64_t g) {
    return off4(t, tab[j / bs], j % bs, g, 0);
}

// All elements of b as doubles (th_get once per element).
static double *to_double(th_ctx *ctx, const th_buf *b) {
    double *x = th_scratch(ctx, (size_t)(b->n ? b->n : 1) * sizeof(double));
    for (int64_t e = 0; e < b->n; e++) x[e] = th_get(b, e);
    return x;
}

static void fill_view(th_ctx *ctx, th_buf *b, const mf_tensor *t, double lo, double hi, double outlier,
                      int64_t every) {
    th_fill_opts o = {.lo = lo, .hi = hi, .outlier = outlier, .outlier_every = every, .neginf_every = 0};
    th_fill(ctx, b, t, &o);
}

// On CUDA, MINFER_ATTN=wgmma must take the sm_90a kernel for every f16/bf16
// prefill (q rows per KV head = max_q_len * grp past the decode kernel's 16)
// with head dim 64, 128 or 256 on a compute capability 9.0 device (where the
// build must have it: a missing sm_90a image fails here). Other paths are
// printed, not checked.
static bool expect_path(th_ctx *ctx, mf_dtype dt, int64_t D, int64_t rows_per_kv) {
#ifdef MF_HAVE_CUDA
    if (mf_backend_device(ctx->be) != MF_DEVICE_CUDA) return true;
    const char *got = mf_cuda_attn_last_path(ctx->be), *env = getenv("MINFER_ATTN");
    printf("  .. [cuda] %s: attention path %s\n", ctx->case_name, got);
    int cc = 0;
    (void)mf_cuda_attn_sm90(ctx->be, &cc);
    const bool want = env && !strcmp(env, "wgmma") && cc == 90 && dt != MF_DTYPE_F32 &&
                      (D == 64 || D == 128 || D == 256) && rows_per_kv > 16;
    if (want && strcmp(got, "wgmma") != 0) {
        th_fail(ctx, "attention path %s, want wgmma (MINFER_ATTN=wgmma, D %lld)", got, (long long)D);
        return false;
    }
#else
    (void)ctx, (void)dt, (void)D, (void)rows_per_kv;
#endif
    return true;
}

static th_result run_attention(th_ctx *ctx, const void *params) {
    const at_p *p = params;
    if (p->gpu_only && mf_backend_device(ctx->be) == MF_DEVICE_CPU) {
        snprintf(ctx->msg, sizeof ctx->msg, "CUDA-only size (the CPU twin would take minutes)");
        return TH_SKIP;
    }
    const int64_t H = p->H, KVH = p->KVH, D = p->D, grp = H / KVH, B = p->nseq;
    const mf_dtype dt = p->dt, kdt = p->kv16 ? p->kvt : dt; // q and o; k and v
    const bool fixed = p->mode == AM_FIXED;
    int64_t cq[AT_MAX_SEQ + 1] = {0}, ck[AT_MAX_SEQ + 1] = {0}, maxq = 0, maxk = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t qb = fixed ? p->ql[0] : p->ql[b], kb = fixed ? p->kl[0] : p->kl[b];
        cq[b + 1] = cq[b] + qb, ck[b + 1] = ck[b] + kb;
        if (qb > maxq) maxq = qb;
        if (kb > maxk) maxk = kb;
    }
    const int64_t TQ = cq[B], TK = ck[B];
    mf_attention_args a = {.batch = (int32_t)B, .causal = p->causal, .window = p->window,
                           .num_splits = p->num_splits};
    a.scale = p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)D));
    const double qk_out = p->outliers ? 20.0 : 0.0;

    // q, k, v
    th_buf *bq, *bk, *bv;
    int64_t n_slots = 0, max_len = 0;
    int32_t slot_of[AT_MAX_SEQ];
    int32_t(*tab)[AT_MAX_BLOCKS] = th_scratch(ctx, sizeof(int32_t[AT_MAX_SEQ][AT_MAX_BLOCKS])); // paged: blocks of each
    int64_t nblk[AT_MAX_SEQ] = {0}, width = 1;
    if (p->fused) { // one (rows, H + 2 KVH, D) buffer; q, k, v are head ranges of it
        const int64_t W = H + 2 * KVH;
        if (fixed) {
            const int64_t S = p->ql[0], qs[4] = {B, S, H, D}, ks[4] = {B, S, KVH, D}, st[4] = {S * W * D, W * D, D, 1};
            bq = th_buf_new(ctx, dt, B * S * W * D);
            a.q = th_view(ctx, bq, 4, qs, st);
            a.k = th_view(ctx, bq, 4, ks, st);
            a.v = a.k;
        } else {
            const int64_t qs[3] = {TQ, H, D}, ks[3] = {TQ, KVH, D}, st[3] = {W * D, D, 1};
            bq = th_buf_new(ctx, dt, TQ * W * D);
            a.q = th_view(ctx, bq, 3, qs, st);
            a.k = th_view(ctx, bq, 3, ks, st);
            a.v = a.k;
        }
        a.k.data = (char *)bq->dev + (size_t)(H * D) * mf_dtype_size(dt);
        a.v.data = (char *)bq->dev + (size_t)((H + KVH) * D) * mf_dtype_size(dt);
        bk = bv = bq;
    } else if (fixed) {
        const int64_t qs[4] = {B, p->ql[0], H, D}, ks[4] = {B, p->kl[0], KVH, D};
        bq = th_tensor(ctx, dt, 4, qs, NULL, &a.q);
        bk = th_tensor(ctx, kdt, 4, ks, NULL, &a.k);
        bv = th_tensor(ctx, kdt, 4, ks, NULL, &a.v);
    } else if (p->mode == AM_PACKED) {
        const int64_t qs[3] = {TQ, H, D}, ks[3] = {TK, KVH, D};
        bq = th_tensor(ctx, dt, 3, qs, NULL, &a.q);
        bk = th_tensor(ctx, kdt, 3, ks, NULL, &a.k);
        bv = th_tensor(ctx, kdt, 3, ks, NULL, &a.v);
    } else if (p->mode == AM_PAGED) { // (n_blocks, bs, KVH, D): every sequence's blocks + 3 unused, shuffled
        int64_t nb = 3;
        for (int64_t b = 0; b < B; b++) {
            nblk[b] = (p->kl[b] + p->bs - 1) / p->bs;
            nb += nblk[b];
            if (nblk[b] + 1 > width) width = nblk[b] + 1; // one column past the longest: never read
        }
        const int64_t qs[3] = {TQ, H, D}, cs[4] = {nb, p->bs, KVH, D};
        bq = th_tensor(ctx, dt, 3, qs, NULL, &a.q);
        bk = th_tensor(ctx, kdt, 4, cs, NULL, &a.k);
        bv = th_tensor(ctx, kdt, 4, cs, NULL, &a.v);
        int32_t *perm = th_scratch(ctx, (size_t)nb * sizeof *perm);
        for (int64_t i = 0; i < nb; i++) perm[i] = (int32_t)i;
        for (int64_t i = nb - 1; i > 0; i--) { // Fisher-Yates
            const int64_t r = th_rng_int(&ctx->rng, i + 1);
            const int32_t t = perm[i];
            perm[i] = perm[r], perm[r] = t;
        }
        int64_t next = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < nblk[b]; i++) tab[b][i] = perm[next++];
        if (p->share && B > 1) // sequence 1's full leading blocks are sequence 0's
            for (int64_t i = 0; i < nblk[0] && i < nblk[1] && (i + 1) * p->bs <= p->kl[0] && (i + 1) * p->bs <= p->kl[1];
                 i++)
                tab[1][i] = tab[0][i];
    } else { // cache: (n_slots, max_len, KVH, D); unused slots and positions stay NaN
        n_slots = B + 2, max_len = maxk + 3;
        const int64_t qs[3] = {TQ, H, D}, cs[4] = {n_slots, max_len, KVH, D};
        bq = th_tensor(ctx, dt, 3, qs, NULL, &a.q);
        bk = th_tensor(ctx, kdt, 4, cs, NULL, &a.k);
        bv = th_tensor(ctx, kdt, 4, cs, NULL, &a.v);
        int32_t perm[AT_MAX_SEQ + 2];
        for (int64_t s = 0; s < n_slots; s++) perm[s] = (int32_t)s;
        if (p->permute)
            for (int64_t s = n_slots - 1; s > 0; s--) { // Fisher-Yates
                const int64_t r = th_rng_int(&ctx->rng, s + 1);
                const int32_t t = perm[s];
                perm[s] = perm[r], perm[r] = t;
            }
        for (int64_t b = 0; b < B; b++) slot_of[b] = perm[b];
    }

    // Values (fused: the whole buffer; views may be unfilled elsewhere).
    if (p->fused) {
        mf_tensor all = th_view(ctx, bq, 1, &bq->n, NULL);
        fill_view(ctx, bq, &all, -2, 2, 0, 0);
        if (qk_out != 0) fill_view(ctx, bq, &a.q, -2, 2, qk_out, 256);
        fill_view(ctx, bq, &a.v, -1, 1, 100, 512);
    } else if (p->mode == AM_PAGED) { // each sequence's keys, through its table (shared blocks: written twice)
        fill_view(ctx, bq, &a.q, -2, 2, qk_out, 256);
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < p->kl[b]; j++)
                for (int64_t e = 0; e < KVH * D; e++) {
                    double x = th_rng_unif(&ctx->rng, -2, 2), y = th_rng_unif(&ctx->rng, -1, 1);
                    if (qk_out != 0 && th_rng_int(&ctx->rng, 256) == 0) x *= qk_out;
                    if (th_rng_int(&ctx->rng, 512) == 0) y *= 100;
                    th_set(bk, paged_off(&a.k, tab[b], p->bs, j, 0) + e, x);
                    th_set(bv, paged_off(&a.v, tab[b], p->bs, j, 0) + e, y);
                }
    } else if (p->mode != AM_CACHE) {
        fill_view(ctx, bq, &a.q, -2, 2, qk_out, 256);
        fill_view(ctx, bk, &a.k, -2, 2, qk_out, 256);
        fill_view(ctx, bv, &a.v, -1, 1, 100, 512);
    } else {
        fill_view(ctx, bq, &a.q, -2, 2, qk_out, 256);
        for (int64_t b = 0; b < B; b++) { // positions [0, kl[b]) of the slot: contiguous from off
            const int64_t off = (int64_t)slot_of[b] * a.k.stride[0], n = p->kl[b] * KVH * D;
            for (int64_t e = 0; e < n; e++) {
                double x = th_rng_unif(&ctx->rng, -2, 2), y = th_rng_unif(&ctx->rng, -1, 1);
                if (qk_out != 0 && th_rng_int(&ctx->rng, 256) == 0) x *= qk_out;
                if (th_rng_int(&ctx->rng, 512) == 0) y *= 100;
                th_set(bk, off + e, x);
                th_set(bv, off + e, y);
            }
        }
    }

    // o, lse, index arrays
    mf_tensor lse, cuq, cuk, kls, sls, tbl;
    th_buf *bo, *bl = NULL;
    if (fixed) {
        const int64_t os[4] = {B, p->ql[0], H, D}, ls[3] = {B, p->ql[0], H};
        bo = th_tensor(ctx, dt, 4, os, NULL, &a.o);
        if (p->lse) bl = th_tensor(ctx, MF_DTYPE_F32, 3, ls, NULL, &lse);
    } else {
        const int64_t os[3] = {TQ, H, D}, ls[2] = {TQ, H}, n1 = B + 1;
        bo = th_tensor(ctx, dt, 3, os, NULL, &a.o);
        if (p->lse) bl = th_tensor(ctx, MF_DTYPE_F32, 2, ls, NULL, &lse);
        th_buf *bcq = th_tensor(ctx, MF_DTYPE_I32, 1, &n1, NULL, &cuq);
        for (int64_t b = 0; b <= B; b++) th_set(bcq, b, (double)cq[b]);
        a.cu_seqlens_q = &cuq;
        a.max_q_len = maxq + (p->mode >= AM_CACHE ? 5 : 0); // a loose bound is fine
        if (p->mode == AM_PACKED) {
            th_buf *bck = th_tensor(ctx, MF_DTYPE_I32, 1, &n1, NULL, &cuk);
            for (int64_t b = 0; b <= B; b++) th_set(bck, b, (double)ck[b]);
            a.cu_seqlens_k = &cuk;
            a.max_k_len = maxk;
        } else {
            th_buf *bkl = th_tensor(ctx, MF_DTYPE_I32, 1, &B, NULL, &kls);
            for (int64_t b = 0; b < B; b++) th_set(bkl, b, (double)p->kl[b]);
            a.k_lens = &kls;
            a.max_k_len = maxk + 1;
            if (p->mode == AM_PAGED) { // entries past a sequence's blocks hold a wild id: never read
                const int64_t ts[2] = {B, width}, tst[2] = {width + 2, 1}; // a row stride past the width
                th_buf *bt = th_buf_new(ctx, MF_DTYPE_I32, B * (width + 2));
                tbl = th_view(ctx, bt, 2, ts, tst);
                for (int64_t b = 0; b < B; b++)
                    for (int64_t i = 0; i < width + 2; i++) th_set(bt, b * (width + 2) + i, i < nblk[b] ? tab[b][i] : 1 << 30);
                a.block_table = &tbl;
            }
            if (p->permute) {
                th_buf *bsl = th_tensor(ctx, MF_DTYPE_I32, 1, &B, NULL, &sls);
                for (int64_t b = 0; b < B; b++) th_set(bsl, b, (double)slot_of[b]);
                a.slots = &sls;
            }
        }
    }
    if (p->lse) a.lse = &lse;

    // Reference and bounds, in the views' logical order.
    const double *qd = to_double(ctx, bq), *kd = bk == bq ? qd : to_double(ctx, bk), *vd = bv == bq ? qd : to_double(ctx, bv);
    const int64_t on = mf_tensor_numel(&a.o), ln = p->lse ? mf_tensor_numel(&lse) : 1;
    double *oref = th_scratch(ctx, (size_t)on * sizeof(double)), *obnd = th_scratch(ctx, (size_t)on * sizeof(double));
    double *lref = th_scratch(ctx, (size_t)ln * sizeof(double)), *lbnd = th_scratch(ctx, (size_t)ln * sizeof(double));
    double *s = th_scratch(ctx, (size_t)(maxk ? maxk : 1) * sizeof(double));
    double *dj = th_scratch(ctx, (size_t)(maxk ? maxk : 1) * sizeof(double));
    double *acc = th_scratch(ctx, (size_t)D * sizeof(double)), *absacc = th_scratch(ctx, (size_t)D * sizeof(double));
    double *bscr = th_scratch(ctx, (size_t)(2 * D) * sizeof(double));
    const double u = 0x1.0p-24, uin = th_eps(dt), tin = th_tiny(dt), sc = a.scale;
    for (int64_t b = 0; b < B; b++) {
        const int64_t qlen = cq[b + 1] - cq[b], klen = ck[b + 1] - ck[b];
        for (int64_t i = 0; i < qlen; i++) {
            int64_t lo = 0, hi = klen;
            if (p->causal) {
                const int64_t last = i + klen - qlen;
                if (last + 1 < hi) hi = last + 1;
                if (p->window > 0 && last - p->window + 1 > lo) lo = last - p->window + 1;
            }
            const int64_t row = cq[b] + i; // logical row (fixed: b * q_len + i)
            const bool check = !p->gpu_only || i % 7 == 0 || i >= qlen - 64;
            for (int64_t h = 0; h < H; h++) {
                const int64_t g = h / grp, ob = (row * H + h) * D;
                if (!check || hi <= lo) {
                    for (int64_t d = 0; d < D; d++) oref[ob + d] = 0.0, obnd[ob + d] = check ? 0.0 : INFINITY;
                    if (p->lse) lref[row * H + h] = check ? -INFINITY : 0.0, lbnd[row * H + h] = check ? 0 : INFINITY;
                    continue;
                }
                const int64_t qo = fixed ? off4(&a.q, b, i, h, 0) : off3(&a.q, row, h, 0);
                const int64_t qbase = qo; // view offsets are from the buffer start (fused: k, v shifted below)
                double m = -INFINITY;
                for (int64_t j = lo; j < hi; j++) {
                    const int64_t ko = fixed ? off4(&a.k, b, j, g, 0)
                                       : p->mode == AM_PACKED ? off3(&a.k, ck[b] + j, g, 0)
                                       : p->mode == AM_PAGED  ? paged_off(&a.k, tab[b], p->bs, j, g)
                                                              : off4(&a.k, slot_of[b], j, g, 0);
                    const int64_t kbase = ko + (p->fused ? H * D : 0);
                    double dot = 0, ab = 0;
                    for (int64_t d = 0; d < D; d++) {
                        const double x = qd[qbase + d] * kd[kbase + d];
                        dot += x, ab += fabs(x);
                    }
                    s[j - lo] = sc * dot;
                    dj[j - lo] = (2 * sqrt((double)D) + 4) * u * fabs(sc) * ab;
                    if (s[j - lo] > m) m = s[j - lo];
                }
                const int64_t n = hi - lo, nblk = (n + 63) / 64;
                double l = 0, le = 0;
                for (int64_t j = 0; j < n; j++) {
                    dj[j] += 3 * u * fabs(s[j]) + 2 * u * fabs(s[j] - m) + (8 + 2 * (double)nblk) * u;
                    s[j] = exp(s[j] - m); // p_j
                    l += s[j];
                }
                for (int64_t j = 0; j < n; j++) le += s[j] / l * exp(dj[j]);
                const double logle = log(le);
                memset(acc, 0, (size_t)D * sizeof(double));
                memset(absacc, 0, (size_t)D * sizeof(double));
                for (int64_t j = 0; j < n; j++) {
                    const int64_t vo = fixed ? off4(&a.v, b, lo + j, g, 0)
                                       : p->mode == AM_PACKED ? off3(&a.v, ck[b] + lo + j, g, 0)
                                       : p->mode == AM_PAGED  ? paged_off(&a.v, tab[b], p->bs, lo + j, g)
                                                              : off4(&a.v, slot_of[b], lo + j, g, 0);
                    const int64_t vbase = vo + (p->fused ? (H + KVH) * D : 0);
                    const double pj = s[j] / l;
                    for (int64_t d = 0; d < D; d++) {
                        acc[d] += pj * vd[vbase + d];
                        absacc[d] += pj * fabs(vd[vbase + d]);
                    }
                }
                const double walk = (2 * sqrt((double)n) + 8) * u;
                double *wsum = bscr, *vsum = bscr + D; // per d
                memset(wsum, 0, (size_t)(2 * D) * sizeof(double));
                for (int64_t j = 0; j < n; j++) {
                    const int64_t vo = fixed ? off4(&a.v, b, lo + j, g, 0)
                                       : p->mode == AM_PACKED ? off3(&a.v, ck[b] + lo + j, g, 0)
                                       : p->mode == AM_PAGED  ? paged_off(&a.v, tab[b], p->bs, lo + j, g)
                                                              : off4(&a.v, slot_of[b], lo + j, g, 0);
                    const double *vj = vd + vo + (p->fused ? (H + KVH) * D : 0);
                    const double wj = s[j] / l * expm1(dj[j] + logle);
                    for (int64_t d = 0; d < D; d++) {
                        wsum[d] += wj * fabs(vj[d] - acc[d]);
                        vsum[d] += fabs(vj[d]);
                    }
                }
                for (int64_t d = 0; d < D; d++) {
                    const double o = acc[d];
                    // tin vsum / l: unnormalised P entries (<= 1) rounded to f16 subnormals, divided by l at the end
                    const double bd = wsum[d] + uin * absacc[d] + tin * vsum[d] / l + walk * (absacc[d] + fabs(o)) +
                                      uin * fabs(o) + tin;
                    oref[ob + d] = o;
                    obnd[ob + d] = 2 * bd;
                }
                if (p->lse) {
                    const double L = m + log(l);
                    lref[row * H + h] = L;
                    lbnd[row * H + h] = 2 * (logle + walk + 2 * u * fabs(L)) + 1e-30;
                }
            }
        }
    }

    if (p->kv16 && mf_backend_device(ctx->be) != MF_DEVICE_CPU) // a 16-bit cache under f32 q: the CPU's only
        return th_expect(ctx, mf_attention(ctx->be, &a), MF_ERR_UNSUPPORTED, "the CPU's", "f32 q, 16-bit k/v") ? TH_PASS
                                                                                                          : TH_FAIL;
    TH_CALL(ctx, mf_attention(ctx->be, &a));
    if (!expect_path(ctx, dt, D, (fixed ? maxq : a.max_q_len) * grp)) return TH_FAIL;
    bool ok = th_check(ctx, bo, &a.o, oref, obnd, "o");
    if (p->lse) ok &= th_check(ctx, bl, &lse, lref, lbnd, "lse");
    return ok ? TH_PASS : TH_FAIL;
}

static void add_case(th_list *l, const at_p *p) {
    char lens[200] = "", ext[96] = "";
    size_t n = 0;
    if (p->mode == AM_FIXED) {
        snprintf(lens, sizeof lens, "batch=%d,q_len=%lld,k_len=%lld", p->nseq, (long long)p->ql[0],
                 (long long)p->kl[0]);
    } else {
        n += (size_t)snprintf(lens, sizeof lens, "lens=");
        for (int b = 0; b < p->nseq; b++)
            n += (size_t)snprintf(lens + n, sizeof lens - n, "%s%lldx%lld", b ? ":" : "", (long long)p->ql[b],
                                  (long long)p->kl[b]);
    }
    n = 0;
    if (p->window) n += (size_t)snprintf(ext + n, sizeof ext - n, ",window=%lld", (long long)p->window);
    if (p->lse) n += (size_t)snprintf(ext + n, sizeof ext - n, ",lse=1");
    if (p->fused) n += (size_t)snprintf(ext + n, sizeof ext - n, ",layout=fused_qkv");
    if (p->permute) n += (size_t)snprintf(ext + n, sizeof ext - n, ",slots=permuted");
    if (p->mode == AM_PAGED)
        n += (size_t)snprintf(ext + n, sizeof ext - n, ",block_size=%lld%s", (long long)p->bs, p->share ? ",shared" : "");
    if (p->outliers) n += (size_t)snprintf(ext + n, sizeof ext - n, ",outliers=1");
    if (p->scale != 0.0f) n += (size_t)snprintf(ext + n, sizeof ext - n, ",scale=%g", (double)p->scale);
    if (p->num_splits) n += (size_t)snprintf(ext + n, sizeof ext - n, ",splits=%d", (int)p->num_splits);
    if (p->kv16) n += (size_t)snprintf(ext + n, sizeof ext - n, ",kv=%s", mf_dtype_name(p->kvt));
    th_add(l, run_attention, p, sizeof *p, "attention(dtype=%s,mode=%s,%s,heads=%lld/%lld,head_dim=%lld,causal=%d%s)",
           mf_dtype_name(p->dt), mode_names[p->mode], lens, (long long)p->H, (long long)p->KVH, (long long)p->D,
           th_b(p->causal), ext);
}

// ---- argument validation -----------------------------------------------------------

static th_result run_validation(th_ctx *ctx, const void *params) {
    (void)params;
    // packed: 2 sequences, total_q 6, total_k 12, H 4, KVH 2, D 64 (a head dim every backend takes)
    const int64_t qs[3] = {6, 4, 64}, ks[3] = {12, 2, 64}, three = 3, two = 2, ls[2] = {6, 4};
    const int64_t cs[4] = {3, 16, 2, 64};
    mf_tensor q, k, v, o, lse, cuq, cuk, kc, vc, kl, sl, cuf;
    th_buf *bq = th_tensor(ctx, MF_DTYPE_BF16, 3, qs, NULL, &q);
    th_buf *bk = th_tensor(ctx, MF_DTYPE_BF16, 3, ks, NULL, &k);
    th_buf *bv = th_tensor(ctx, MF_DTYPE_BF16, 3, ks, NULL, &v);
    th_tensor(ctx, MF_DTYPE_BF16, 3, qs, NULL, &o);
    th_tensor(ctx, MF_DTYPE_F32, 2, ls, NULL, &lse);
    th_buf *bcq = th_tensor(ctx, MF_DTYPE_I32, 1, &three, NULL, &cuq);
    th_buf *bck = th_tensor(ctx, MF_DTYPE_I32, 1, &three, NULL, &cuk);
    th_tensor(ctx, MF_DTYPE_F32, 1, &three, NULL, &cuf);
    th_buf *bkc = th_tensor(ctx, MF_DTYPE_BF16, 4, cs, NULL, &kc);
    th_buf *bvc = th_tensor(ctx, MF_DTYPE_BF16, 4, cs, NULL, &vc);
    th_buf *bkl = th_tensor(ctx, MF_DTYPE_I32, 1, &two, NULL, &kl);
    th_buf *bsl = th_tensor(ctx, MF_DTYPE_I32, 1, &two, NULL, &sl);
    th_fill(ctx, bq, &q, NULL);
    th_fill(ctx, bk, &k, NULL);
    th_fill(ctx, bv, &v, NULL);
    th_fill(ctx, bkc, &kc, NULL);
    th_fill(ctx, bvc, &vc, NULL);
    const int32_t cqv[3] = {0, 2, 6}, ckv[3] = {0, 7, 12}, klv[2] = {5, 16}, slv[2] = {2, 0};
    for (int i = 0; i < 3; i++) th_set(bcq, i, cqv[i]), th_set(bck, i, ckv[i]);
    for (int i = 0; i < 2; i++) th_set(bkl, i, klv[i]), th_set(bsl, i, slv[i]);
    th_upload_all(ctx);
    const bool cpu = mf_backend_device(ctx->be) == MF_DEVICE_CPU;
    bool ok = true;
    const mf_attention_args a = {.q = q, .k = k, .v = v, .o = o, .lse = &lse, .cu_seqlens_q = &cuq,
                                 .cu_seqlens_k = &cuk, .batch = 2, .max_q_len = 4, .max_k_len = 7,
                                 .scale = 0.35f, .causal = true};
    mf_attention_args c = a; // cache mode
    c.k = kc, c.v = vc, c.cu_seqlens_k = NULL, c.k_lens = &kl, c.slots = &sl, c.max_k_len = 16;
    mf_attention_args t;
    mf_tensor x, y; // scratch views the modifications point at
#define TRY(base, mod, want, needle, what)                                     \
    do {                                                                       \
        t = base;                                                              \
        mod;                                                                   \
        ok &= th_expect(ctx, mf_attention(ctx->be, &t), want, needle, what);      \
        ok &= th_expect(ctx, mf_attention(ctx->be, &a), MF_OK, NULL, "valid after " what); \
    } while (0)
    ok &= th_expect(ctx, mf_attention(ctx->be, NULL), MF_ERR_INVALID_ARG, "args is NULL", "NULL args");
    ok &= th_expect(ctx, mf_attention(NULL, &a), MF_ERR_INVALID_ARG, "backend is NULL", "NULL backend");
    ok &= th_expect(ctx, mf_attention(ctx->be, &a), MF_OK, NULL, "valid packed");
    ok &= th_expect(ctx, mf_attention(ctx->be, &c), MF_OK, NULL, "valid cache");
    TRY(a, t.q.shape[1] = 3; t.o.shape[1] = 3; t.lse = NULL, MF_ERR_INVALID_ARG,
        "n_heads 3 not divisible by n_kv_heads 2", "heads % kv_heads");
    TRY(a, t.k.shape[2] = 4; t.v.shape[2] = 4, MF_ERR_INVALID_ARG, "k head_dim 4 != q head_dim 64", "head_dim mismatch");
    TRY(a, t.v.shape[2] = 4, MF_ERR_INVALID_ARG, "v shape[2] = 4 != k's 64", "v head_dim");
    TRY(a, t.k.dtype = MF_DTYPE_F16, MF_ERR_INVALID_ARG, "k f16", "mixed dtypes");
    TRY(a, t.k.dtype = t.v.dtype = MF_DTYPE_F16, MF_ERR_INVALID_ARG, "k f16, v f16", "16-bit k/v under bf16 q");
    TRY(a, t.k.dtype = t.v.dtype = MF_DTYPE_F32, MF_ERR_INVALID_ARG, "k f32, v f32", "f32 k/v under bf16 q");
    TRY(a, t.o.dtype = MF_DTYPE_F32, MF_ERR_INVALID_ARG, "o f32", "o dtype");
    TRY(a, t.q.dtype = MF_DTYPE_I32; t.k.dtype = t.v.dtype = t.o.dtype = MF_DTYPE_I32, MF_ERR_INVALID_ARG,
        "q dtype i32", "i32 q");
    TRY(a, t.q.ndim = 4; t.q.shape[3] = 1, MF_ERR_INVALID_ARG, "q has 4 dims (want 3", "q ndim");
    TRY(a, t.o.shape[0] = 5, MF_ERR_INVALID_ARG, "o shape[0] = 5 != q's 6", "o rows");
    TRY(a, t.q.stride[2] = 2; t.q.shape[2] = 4; t.o.shape[2] = 4, MF_ERR_UNSUPPORTED, "q stride[-1] = 2",
        "strided head_dim");
    x = cuq, x.shape[0] = 2;
    TRY(a, t.cu_seqlens_q = &x, MF_ERR_INVALID_ARG, "cu_seqlens_q has 2 entries (want batch + 1 = 3)",
        "cu_seqlens_q length");
    y = kl, y.shape[0] = 1;
    TRY(c, t.k_lens = &y, MF_ERR_INVALID_ARG, "k_lens has 1 entries (want batch = 2)", "k_lens length");
    TRY(c, t.slots = &y, MF_ERR_INVALID_ARG, "slots has 1 entries (want batch = 2)", "slots length");
    TRY(a, t.cu_seqlens_k = &cuf, MF_ERR_INVALID_ARG, "cu_seqlens_k dtype f32", "f32 cu_seqlens_k");
    TRY(a, t.cu_seqlens_k = NULL, MF_ERR_INVALID_ARG, "cu_seqlens_q given without cu_seqlens_k", "half packed");
    TRY(c, t.cu_seqlens_k = &cuk, MF_ERR_INVALID_ARG, "both k_lens", "cache + packed");
    TRY(c, t.cu_seqlens_q = NULL, MF_ERR_INVALID_ARG, "k_lens given (cache mode) but cu_seqlens_q is NULL",
        "cache without cu_seqlens_q");
    TRY(a, t.slots = &sl, MF_ERR_INVALID_ARG, "slots given in packed mode", "slots in packed mode");
    TRY(a, t.window = 3; t.causal = false, MF_ERR_INVALID_ARG, "window 3 without causal", "window without causal");
    TRY(a, t.window = -1, MF_ERR_INVALID_ARG, "window -1", "negative window");
    TRY(a, t.scale = NAN, MF_ERR_INVALID_ARG, "scale nan is not finite", "NaN scale");
    TRY(a, t.scale = INFINITY, MF_ERR_INVALID_ARG, "scale inf is not finite", "inf scale");
    TRY(a, t.max_q_len = -1, MF_ERR_INVALID_ARG, "max_q_len -1", "negative max_q_len");
    TRY(a, t.max_k_len = -2, MF_ERR_INVALID_ARG, "max_k_len -2", "negative max_k_len");
    TRY(a, t.num_splits = -1, MF_ERR_INVALID_ARG, "num_splits -1", "negative num_splits");
    TRY(a, t.workspace_bytes = 64, MF_ERR_INVALID_ARG, "workspace is NULL with workspace_bytes 64", "NULL workspace");
    TRY(a, t.batch = -1, MF_ERR_INVALID_ARG, "batch -1", "negative batch");
    x = lse, x.dtype = MF_DTYPE_BF16;
    TRY(a, t.lse = &x, MF_ERR_INVALID_ARG, "lse dtype bf16", "bf16 lse");
    x = lse, x.shape[1] = 2;
    TRY(a, t.lse = &x, MF_ERR_INVALID_ARG, "lse shape[1] = 2 != q's 4", "lse shape");
    TRY(a, t.o = q, MF_ERR_INVALID_ARG, "o and q overlap", "o is q");
    y = k, y.dtype = MF_DTYPE_BF16, y.shape[0] = 6, y.shape[1] = 4; // o over k's memory
    y.stride[0] = 256, y.stride[1] = 64;
    TRY(a, t.o = y, MF_ERR_INVALID_ARG, "o and k overlap", "o over k");
    x = o, x.dtype = MF_DTYPE_F32, x.ndim = 2, x.shape[0] = 6, x.shape[1] = 4, x.stride[0] = 4, x.stride[1] = 1;
    TRY(a, t.lse = &x, MF_ERR_INVALID_ARG, "o and lse overlap", "lse over o");
    y = o, y.stride[1] = 4;
    TRY(a, t.o = y, MF_ERR_INVALID_ARG, "o's elements overlap", "o overlapping itself");
    // fixed mode: batch must be q.shape[0]
    {
        mf_attention_args f = {.q = q, .k = k, .v = v, .o = o, .batch = 6, .scale = 1.0f};
        f.q.ndim = f.o.ndim = f.k.ndim = f.v.ndim = 4;
        f.q.shape[0] = f.o.shape[0] = f.k.shape[0] = f.v.shape[0] = 1;
        f.q.shape[1] = f.o.shape[1] = 6, f.k.shape[1] = f.v.shape[1] = 12;
        f.q.shape[2] = f.o.shape[2] = 4, f.k.shape[2] = f.v.shape[2] = 2;
        f.q.shape[3] = f.o.shape[3] = f.k.shape[3] = f.v.shape[3] = 64;
        f.q.stride[0] = f.o.stride[0] = 1536, f.k.stride[0] = f.v.stride[0] = 1536;
        f.q.stride[1] = f.o.stride[1] = 256, f.k.stride[1] = f.v.stride[1] = 128;
        f.q.stride[2] = f.o.stride[2] = 64, f.k.stride[2] = f.v.stride[2] = 64;
        f.q.stride[3] = f.o.stride[3] = f.k.stride[3] = f.v.stride[3] = 1;
        ok &= th_expect(ctx, mf_attention(ctx->be, &f), MF_ERR_INVALID_ARG, "batch 6 != q.shape[0] = 1", "fixed batch");
        f.batch = 1;
        ok &= th_expect(ctx, mf_attention(ctx->be, &f), MF_OK, NULL, "valid fixed");
    }
    // Values of the index arrays: the CPU checks them at once (CUDA at the next sync, not tested here).
    if (cpu) {
        int32_t *cqh = (int32_t *)cuq.data, *klh = (int32_t *)kl.data, *slh = (int32_t *)sl.data;
        cqh[1] = 3, cqh[2] = 2;
        ok &= th_expect(ctx, mf_attention(ctx->be, &a), MF_ERR_INVALID_ARG, "cu_seqlens_q[2] = 2 < cu_seqlens_q[1] = 3",
                     "decreasing cu_seqlens_q");
        cqh[1] = 1, cqh[2] = 6;
        ok &= th_expect(ctx, mf_attention(ctx->be, &a), MF_ERR_INVALID_ARG,
                     "sequence 1 has length 5 in cu_seqlens_q, past max_q_len = 4", "q_len past max_q_len");
        cqh[1] = 3, cqh[2] = 7;
        ok &= th_expect(ctx, mf_attention(ctx->be, &a), MF_ERR_INVALID_ARG, "cu_seqlens_q[2] = 7 past the 6 rows of q",
                     "cu_seqlens_q past q");
        cqh[1] = 2, cqh[2] = 6;
        klh[1] = 17;
        ok &= th_expect(ctx, mf_attention(ctx->be, &c), MF_ERR_INVALID_ARG, "k_lens[1] = 17 out of range [0, max_len = 16]",
                     "k_len past max_len");
        klh[1] = 16;
        mf_attention_args c2 = c;
        c2.max_k_len = 15;
        ok &= th_expect(ctx, mf_attention(ctx->be, &c2), MF_ERR_INVALID_ARG, "k_lens[1] = 16 past max_k_len = 15",
                     "k_len past max_k_len");
        slh[0] = 3;
        ok &= th_expect(ctx, mf_attention(ctx->be, &c), MF_ERR_INVALID_ARG, "slots[0] = 3 out of range [0, n_slots = 3)",
                     "slot out of range");
        slh[0] = 2;
        ok &= th_expect(ctx, mf_attention(ctx->be, &c), MF_OK, NULL, "valid cache again");
        int32_t *ckh = (int32_t *)cuk.data;
        ckh[1] = 8;
        ok &= th_expect(ctx, mf_attention(ctx->be, &a), MF_ERR_INVALID_ARG,
                     "sequence 0 has length 8 in cu_seqlens_k, past max_k_len = 7", "k_len past max_k_len (packed)");
        ckh[1] = 7;
    }
    // Empty: no sequences, no rows.
    TRY(a, t.batch = 0; t.cu_seqlens_q = &y; t.cu_seqlens_k = &y; y = cuq; y.shape[0] = 1, MF_OK, NULL, "batch 0");
    size_t ws = 123;
    ok &= th_expect(ctx, mf_attention_workspace(ctx->be, &a, &ws), MF_OK, NULL, "workspace query");
    if (cpu && ws != 0) ok &= th_fail(ctx, "cpu workspace %zu (want 0)", ws) == TH_PASS;
    ok &= th_expect(ctx, mf_attention_workspace(ctx->be, &a, NULL), MF_ERR_INVALID_ARG, "bytes is NULL", "NULL bytes");
    t = a, t.window = 2, t.causal = false;
    ok &= th_expect(ctx, mf_attention_workspace(ctx->be, &t, &ws), MF_ERR_INVALID_ARG, "window 2 without causal",
                 "workspace validates");
#undef TRY
    for (int i = 0; i < ctx->nbufs; i++) ctx->bufs[i]->checked = true; // o and lse were written
    return ok ? TH_PASS : TH_FAIL;
}

// ---- the case list -------------------------------------------------------------------

static at_p fixed_case(mf_dtype dt, int64_t batch, int64_t q, int64_t k, int64_t H, int64_t KVH, int64_t D,
                       bool causal) {
    at_p p = {.dt = dt, .mode = AM_FIXED, .nseq = (int)batch, .H = H, .KVH = KVH, .D = D, .causal = causal};
    p.ql[0] = q, p.kl[0] = k;
    return p;
}

static at_p var_case(mf_dtype dt, at_mode mode, int nseq, const int64_t *ql, const int64_t *kl, int64_t H,
                     int64_t KVH, int64_t D, bool causal) {
    at_p p = {.dt = dt, .mode = mode, .nseq = nseq, .H = H, .KVH = KVH, .D = D, .causal = causal};
    for (int b = 0; b < nseq; b++) p.ql[b] = ql[b], p.kl[b] = kl[b];
    return p;
}

void th_cases_attention(th_list *l) {
    static const mf_dtype dts[3] = {MF_DTYPE_BF16, MF_DTYPE_F16, MF_DTYPE_F32};
    // 1. The (q_len, k_len) list, fixed mode, causal and not, cycling
    //    dtypes and head dims 64 / 128; heads shrink as the sizes grow (CPU time).
    static const int64_t qk[11][2] = {{1, 1},     {1, 1000},   {113, 203},   {128, 217},   {113, 211},  {108, 256},
                                      {256, 512}, {512, 256},  {1023, 1024}, {1024, 1023}, {2048, 2048}};
    for (int s = 0; s < 11; s++)
        for (int c = 0; c < 2; c++) {
            const int64_t q = qk[s][0], k = qk[s][1], work = q * k;
            const int64_t B = work <= 300000 ? 2 : 1, H = work <= 300000 ? 4 : work <= 1100000 ? 2 : 1;
            const int64_t KVH = H == 4 ? (s % 2 ? 1 : 2) : 1;
            at_p p = fixed_case(dts[(s + c) % 3], B, q, k, H, KVH, (s + c) % 2 ? 128 : 64, c == 1);
            p.lse = s % 3 == 0;
            p.outliers = s % 4 == 1;
            if (work > 1100000 && c == 0) continue; // (2048, 2048) non-causal: the CPU reference alone is 3 s
            add_case(l, &p);
        }
    {
        at_p p = fixed_case(MF_DTYPE_BF16, 1, 8192, 8192, 2, 1, 128, true);
        p.gpu_only = true;
        p.lse = true;
        add_case(l, &p);
    }
    // 2. GQA ratios 1, 4, 8 and MQA, both head dims, causal q_len < k_len (decode-like chunks) and q_len > k_len.
    static const int64_t gq[4][2] = {{4, 4}, {8, 2}, {16, 2}, {8, 1}};
    for (int g = 0; g < 4; g++)
        for (int c = 0; c < 2; c++) {
            at_p p = fixed_case(dts[(g + c) % 3], 2, c ? 77 : 33, c ? 40 : 150, gq[g][0], gq[g][1], c ? 128 : 64, true);
            p.lse = true;
            add_case(l, &p);
        }
    // 3. Varlen (packed) batches with zero-length sequences on either side.
    {
        const int64_t ql[6] = {17, 0, 64, 1, 0, 130}, kl[6] = {17, 5, 64, 0, 0, 200};
        for (int c = 0; c < 2; c++)
            for (int t = 0; t < 3; t++) {
                at_p p = var_case(dts[t], AM_PACKED, 6, ql, kl, 8, 2, t == 2 ? 128 : 64, c == 1);
                p.lse = t != 1;
                add_case(l, &p);
            }
        const int64_t qf[4] = {40, 0, 129, 7};
        for (int t = 0; t < 3; t++) { // self-attention prefill: q, k, v from one fused buffer
            at_p p = var_case(dts[t], AM_PACKED, 4, qf, qf, 4, t == 1 ? 4 : 1, t == 0 ? 128 : 64, true);
            p.fused = true;
            p.outliers = t == 2;
            add_case(l, &p);
        }
        at_p f = fixed_case(MF_DTYPE_BF16, 2, 70, 70, 6, 2, 64, true);
        f.fused = true, f.lse = true;
        add_case(l, &f);
        f.causal = false, f.dt = MF_DTYPE_F32, f.D = 128;
        add_case(l, &f);
    }
    // 4. Cache mode: decode steps (q_len 1) and chunked prefill over a cache,
    //    slots permuted, NaN in unused slots and past each length; split counts.
    {
        const int64_t qd[5] = {1, 1, 1, 1, 1}, kd[5] = {1, 700, 0, 129, 64};
        const int64_t qc[4] = {5, 16, 0, 64}, kc[4] = {300, 16, 9, 64};
        const int64_t gh[3][2] = {{32, 8}, {8, 8}, {16, 1}};
        for (int g = 0; g < 3; g++)
            for (int t = 0; t < 3; t++) {
                at_p p = var_case(dts[(g + t) % 3], AM_CACHE, 5, qd, kd, gh[g][0], gh[g][1], t == 1 ? 64 : 128, true);
                p.permute = t != 0;
                p.lse = true;
                p.num_splits = t == 2 ? 3 : 0;
                add_case(l, &p);
            }
        for (int t = 0; t < 3; t++) {
            at_p p = var_case(dts[t], AM_CACHE, 4, qc, kc, 8, 2, t == 0 ? 128 : 64, t != 2);
            p.permute = true;
            p.lse = t == 0;
            p.outliers = t == 1;
            add_case(l, &p);
        }
        // q_len > k_len in the cache (blind first rows) and a window.
        const int64_t qb[2] = {20, 3}, kb[2] = {12, 3};
        at_p p = var_case(MF_DTYPE_BF16, AM_CACHE, 2, qb, kb, 4, 2, 64, true);
        p.permute = true, p.lse = true;
        add_case(l, &p);
        p.window = 5;
        add_case(l, &p);
    }
    // 4b. A 16-bit KV cache under f32 q and o (the CPU's --kv-dtype f16/bf16):
    //     decode steps and a chunked prefill over slots, a paged pool, fixed
    //     mode; GQA. CUDA must refuse it (MF_ERR_UNSUPPORTED).
    {
        const int64_t qd[4] = {1, 1, 1, 1}, kd[4] = {1, 700, 129, 64};
        const int64_t qc[3] = {5, 40, 64}, kc[3] = {300, 40, 64};
        for (int t = 0; t < 2; t++) {
            const mf_dtype kv = t ? MF_DTYPE_BF16 : MF_DTYPE_F16;
            at_p p = var_case(MF_DTYPE_F32, AM_CACHE, 4, qd, kd, 8, 2, 64, true);
            p.kv16 = true, p.kvt = kv, p.permute = true, p.lse = true, p.outliers = t == 1;
            add_case(l, &p);
            p = var_case(MF_DTYPE_F32, AM_CACHE, 3, qc, kc, 4, 1, t ? 128 : 64, true);
            p.kv16 = true, p.kvt = kv, p.permute = true, p.window = t ? 50 : 0;
            add_case(l, &p);
            p = var_case(MF_DTYPE_F32, AM_PAGED, 3, qc, kc, 8, 2, 64, true);
            p.kv16 = true, p.kvt = kv, p.bs = 16, p.lse = true;
            add_case(l, &p);
            p = fixed_case(MF_DTYPE_F32, 2, 33, 150, 8, 2, 64, true);
            p.kv16 = true, p.kvt = kv;
            add_case(l, &p);
        }
    }
    // 5. Sliding windows (fixed and packed), window 1, and longer than the sequence.
    {
        static const int64_t wins[4] = {1, 16, 100, 5000};
        for (int w = 0; w < 4; w++) {
            at_p p = fixed_case(dts[w % 3], 1, w == 3 ? 300 : 200, 300, 4, 2, w % 2 ? 128 : 64, true);
            p.window = wins[w];
            p.lse = true;
            add_case(l, &p);
        }
        const int64_t ql[3] = {50, 0, 300}, kl[3] = {80, 4, 300};
        at_p p = var_case(MF_DTYPE_BF16, AM_PACKED, 3, ql, kl, 8, 1, 128, true);
        p.window = 64, p.outliers = true;
        add_case(l, &p);
        // A window of INT_MAX with q_len > k_len (blind first rows): the first
        // visible key, i + k_len - q_len - window + 1, must not wrap in int
        // (it did in the CUDA kernels: rows that see keys came out as 0).
        p = fixed_case(MF_DTYPE_F16, 1, 200, 100, 4, 2, 64, true);
        p.window = 2147483647, p.lse = true;
        add_case(l, &p);
        const int64_t qd[2] = {8, 1}, kd[2] = {4, 6};
        p = var_case(MF_DTYPE_BF16, AM_CACHE, 2, qd, kd, 4, 4, 128, true);
        p.window = 2147483647, p.lse = true;
        add_case(l, &p);
    }
    // 6. Other head dims (the CPU takes any; CUDA may answer UNSUPPORTED: skipped),
    //    an odd one, scales other than 1/sqrt(D), outliers.
    {
        static const int64_t hds[5] = {32, 80, 96, 256, 40};
        for (int d = 0; d < 5; d++)
            for (int c = 0; c < 2; c++) {
                at_p p = fixed_case(dts[(d + c) % 3], 2, c ? 65 : 1, c ? 65 : 300, 4, 2, hds[d], c == 1);
                p.lse = true;
                p.outliers = d % 2 == 0;
                add_case(l, &p);
            }
        // Head dim 256 prefills (the sm_90a kernel's 64-key tiles): several
        // q blocks and key tiles, a k_len tail, GQA, varlen with an empty sequence.
        at_p p = fixed_case(MF_DTYPE_BF16, 1, 200, 333, 4, 2, 256, true);
        p.lse = true, p.outliers = true;
        add_case(l, &p);
        p = fixed_case(MF_DTYPE_F16, 1, 150, 150, 2, 1, 256, false);
        add_case(l, &p);
        const int64_t q2[3] = {70, 0, 131}, k2[3] = {90, 3, 131};
        p = var_case(MF_DTYPE_BF16, AM_PACKED, 3, q2, k2, 4, 1, 256, true);
        p.lse = true;
        add_case(l, &p);
        p = fixed_case(MF_DTYPE_F32, 1, 33, 57, 2, 1, 13, false);
        p.scale = -0.7f, p.outliers = true;
        add_case(l, &p);
        p = fixed_case(MF_DTYPE_BF16, 2, 100, 100, 4, 4, 64, true);
        p.scale = 1.0f, p.outliers = true, p.lse = true;
        add_case(l, &p);
    }
    // 7. The CPU's decode path (q_len x grp <= 8 rows per kv head): chunks of
    //    128 keys read key by key for all heads, merged per row afterwards;
    //    passes of up to 4 rows of a kv head (grp 3, 5, 8 leave short
    //    passes); head dims with a 16-block tail (40 = 2 x 16 + 8, 24, 13:
    //    scalar only); chunks a window or a causal edge cuts; q, k, v as
    //    columns of one fused buffer (k/v row stride past the heads).
    {
        const int64_t qd[4] = {1, 1, 1, 1}, kd[4] = {700, 1000, 129, 128};
        at_p p = var_case(MF_DTYPE_BF16, AM_CACHE, 4, qd, kd, 8, 1, 128, true);
        p.window = 100, p.permute = true, p.lse = true, p.outliers = true;
        add_case(l, &p);
        p = fixed_case(MF_DTYPE_F32, 2, 2, 257, 6, 2, 13, true);
        p.scale = -0.7f, p.lse = true, p.outliers = true;
        add_case(l, &p);
        const int64_t qv[4] = {1, 0, 1, 1}, kv[4] = {300, 5, 0, 129};
        p = var_case(MF_DTYPE_F16, AM_PACKED, 4, qv, kv, 10, 2, 40, false);
        p.lse = true;
        add_case(l, &p);
        const int64_t qs[3] = {8, 8, 3}, ks[3] = {1000, 5, 130};
        p = var_case(MF_DTYPE_BF16, AM_CACHE, 3, qs, ks, 3, 3, 24, true);
        p.permute = true, p.lse = true;
        add_case(l, &p);
        const int64_t qf[3] = {4, 0, 3};
        for (int t = 0; t < 2; t++) {
            p = var_case(t ? MF_DTYPE_BF16 : MF_DTYPE_F32, AM_PACKED, 3, qf, qf, 4, 2, 64, true);
            p.fused = true, p.lse = true;
            add_case(l, &p);
        }
    }
    // 8. Paged caches: shuffled blocks (3 unused, NaN), block sizes 16 / 64 and
    //    one that is no multiple of a tile (48: tiles span blocks), decode and
    //    chunked prefill, a sliding window, a shared prefix (two table rows
    //    naming the same blocks), GQA/MQA, lengths on and off block edges.
    {
        const int64_t qd[5] = {1, 1, 1, 1, 1}, kd[5] = {1, 700, 64, 129, 63};
        const int64_t qc[4] = {5, 16, 70, 64}, kc[4] = {300, 16, 200, 64};
        static const int64_t bss[3] = {16, 64, 48};
        for (int t = 0; t < 3; t++) {
            at_p p = var_case(dts[t], AM_PAGED, 5, qd, kd, t == 1 ? 16 : 8, t == 1 ? 1 : 2, t == 2 ? 64 : 128, true);
            p.bs = bss[t], p.lse = true, p.share = t == 1, p.outliers = t == 0;
            add_case(l, &p);
            p = var_case(dts[(t + 1) % 3], AM_PAGED, 4, qc, kc, 8, 2, t == 0 ? 128 : 64, true);
            p.bs = bss[t], p.lse = t != 1, p.share = t != 0, p.window = t == 2 ? 100 : 0;
            add_case(l, &p);
        }
        const int64_t qs[2] = {40, 1}, ks[2] = {256, 257};
        at_p p = var_case(MF_DTYPE_F32, AM_PAGED, 2, qs, ks, 4, 4, 64, true);
        p.bs = 64, p.share = true, p.lse = true;
        add_case(l, &p);
    }
    // 9. Decode over an f32 cache at the shapes of the CPU's AVX-512 products
    //    (src/cpu/attention_avx512.c; elsewhere the portable loops): head_dim
    //    16, 32 (the default model's 6/2 heads), 64, 80 (a 64-column block
    //    and one of 16) and 256; 3, 5 and 6 query rows a kv head (a tile of
    //    3; 4 + 1; 4 + 2: two queries of a sequence), key counts off multiples
    //    of 4 (a chunk of 63 or 1), paged and slotted caches, a window.
    {
        const int64_t q1[4] = {1, 1, 1, 1}, k1[4] = {160, 63, 129, 1};
        at_p p = var_case(MF_DTYPE_F32, AM_PAGED, 4, q1, k1, 6, 2, 32, true);
        p.bs = 64, p.lse = true, p.outliers = true;
        add_case(l, &p);
        const int64_t q2[4] = {2, 1, 2, 1}, k2[4] = {100, 65, 64, 9};
        p = var_case(MF_DTYPE_F32, AM_CACHE, 4, q2, k2, 15, 5, 64, true);
        p.permute = true, p.lse = true;
        add_case(l, &p);
        const int64_t q3[3] = {1, 1, 1}, k3[3] = {300, 47, 1};
        p = var_case(MF_DTYPE_F32, AM_PAGED, 3, q3, k3, 10, 2, 16, true);
        p.bs = 16, p.window = 40, p.lse = true;
        add_case(l, &p);
        // a serving step: decode rows beside a prompt chunk (decode path and
        // tiles in one call), f32 and a 16-bit cache
        const int64_t q4[4] = {1, 40, 1, 2}, k4[4] = {300, 40, 129, 66};
        for (int t = 0; t < 2; t++) {
            p = var_case(MF_DTYPE_F32, AM_PAGED, 4, q4, k4, 6, 2, 32, true);
            p.bs = 16, p.lse = true, p.kv16 = t == 1, p.kvt = MF_DTYPE_F16;
            add_case(l, &p);
        }
        p = fixed_case(MF_DTYPE_F32, 2, 1, 77, 4, 4, 80, true);
        p.outliers = true;
        add_case(l, &p);
        p = fixed_case(MF_DTYPE_F32, 2, 2, 130, 2, 1, 256, true);
        p.lse = true;
        add_case(l, &p);
    }
    // 10. The same products over f32, f16 and bf16 caches at the head_dims
    //     whose 32-column blocks of p.v leave a 16-column tail (48, 112,
    //     240) or none (16, 256), with 8, 4, 1 and 3 query rows a kv head
    //     (tiles of 4 + 4, 4, 1, 3) and key counts off multiples of 4.
    {
        const int64_t q1[3] = {1, 1, 1}, k1[3] = {70, 5, 131};
        const int64_t geo[5][3] = {{8, 1, 16}, {12, 3, 48}, {4, 4, 112}, {6, 2, 240}, {3, 1, 256}};
        for (int t = 0; t < 3; t++)
            for (int g = 0; g < 5; g++) {
                at_p p = var_case(MF_DTYPE_F32, AM_PAGED, 3, q1, k1, geo[g][0], geo[g][1], geo[g][2], true);
                p.bs = 16, p.lse = g % 2 == 0, p.outliers = g % 2 == 1;
                p.kv16 = t > 0, p.kvt = t == 1 ? MF_DTYPE_F16 : MF_DTYPE_BF16;
                add_case(l, &p);
            }
    }
    at_p none = {0};
    th_add(l, run_validation, &none, sizeof none, "attention(validation)");
}
