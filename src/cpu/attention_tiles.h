// Decode attention's two products and its softmax in 8-lane vectors, for a
// KV cache in f32, f16 or bf16 (widened in registers: vcvtph2ps, or a shift
// of the zero-extended halves) and head_dim a multiple of 16 (up to 256):
// the inner loops of a work item of src/cpu/attention.c (one sequence, a
// chunk of <= 64 keys, all heads). Included twice, as a template:
// attention_avx2.c (AVX2 + FMA + F16C, 16 registers: tiles of up to 2 query
// rows) and attention_avx512.c (AVX-512VL's 32 registers: up to 4). The
// includer defines ATT_TARGET (the target attribute's string), ATT_ROWS (2
// or 4) and ATT_NAME(f) (the public name of f); a build without the x86
// kernels (MF_CPU_AVX2_KERNELS 0) gets stubs that are never called. Each
// row's sums are the same in both (a tile's rows do not share sums): the
// same bits. No include guard: one inclusion per translation unit.
//
// Why not 16 lanes on an AVX-512 CPU: a decode step's attention is a
// 30-40 us burst between GEMVs that use 256-bit FMAs; 512-bit multiply-adds
// there took the cores to AVX-512's lower frequency license and back each
// layer: the next layer's q|k|v GEMV ran ~16 us slower and SmolLM2's step
// lost ~0.6 ms net (docs/notes/cpu.md).
//
// q.k: tiles of up to ATT_ROWS query rows x 4 keys, one 8-lane accumulator
// per pair over head_dim, the dot products summed by transposing trees
// (lane 4 r + c of a tree's result: row r, key c), so each row's 4 scores
// are one 16-byte piece. p.v: rows x 32 columns of o in accumulators over
// the keys, a broadcast of p per row and key. A kv head's rows go in tiles
// of ATT_ROWS and one of the rest (GQA's 3 rows a kv head: no padding row);
// keys are padded to a multiple of 4 by repeating the last key: it computes
// the same bits again, so the stores need no masks. Each row's scores then
// go through one softmax pass (max, FMA exp, sum). Sums in a fixed order
// (head_dim in 8-lane steps, then the tree; keys in order): the same bits
// for any thread count or batch.
#if MF_CPU_AVX2_KERNELS
#include "cpu/avx2.h"

#define ATT_FN __attribute__((target(ATT_TARGET)))
#define ATT_INLINE static inline __attribute__((always_inline, target(ATT_TARGET)))

// 8 elements of a K or V row at p (dt: f32, f16 or bf16) as f32.
ATT_INLINE __m256 ld8(const mf_dtype dt, const char *p) {
    if (dt == MF_DTYPE_F32) return _mm256_loadu_ps((const float *)p);
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (dt == MF_DTYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); // bf16: the high half of an f32
}

// Sums of 8 accumulators, sum of v[t] at lane t: pairs, then quads within
// 128-bit lanes, then across the lanes; every lane takes the same tree.
ATT_INLINE __m256 sum8(const __m256 *v) {
    __m256 x[4], y[2];
    for (int i = 0; i < 4; i++)
        x[i] = _mm256_add_ps(_mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 2; i++) {
        const __m256d a = _mm256_castps_pd(x[2 * i]), b = _mm256_castps_pd(x[2 * i + 1]);
        y[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)), _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
    }
    return _mm256_add_ps(_mm256_permute2f128_ps(y[0], y[1], 0x20), _mm256_permute2f128_ps(y[0], y[1], 0x31));
}

// NR query rows rows[0..NR) of one kv head x keys [j, j + 4) at kr[0..3]
// (bytes): s[row][j + c] = scale q_row . k_c.
ATT_INLINE void qk_tile(const mf_dtype dt, const int NR, const float *q, int64_t D, const int32_t *rows,
                        const char *const kr[4], __m256 sc, float *s, int64_t lds, int64_t j) {
    const int64_t es = dt == MF_DTYPE_F32 ? 4 : 2;
    const float *qr[4];
    for (int e = 0; e < NR; e++) qr[e] = q + (int64_t)rows[e] * D;
    __m256 acc[16];
    for (int a = 0; a < 16; a++) acc[a] = _mm256_setzero_ps(); // rows past NR: 0 (their lanes go unstored)
    for (int64_t d = 0; d < D; d += 8) {
        const __m256 k0 = ld8(dt, kr[0] + d * es), k1 = ld8(dt, kr[1] + d * es);
        const __m256 k2 = ld8(dt, kr[2] + d * es), k3 = ld8(dt, kr[3] + d * es);
        for (int e = 0; e < NR; e++) {
            const __m256 qv = _mm256_loadu_ps(qr[e] + d);
            acc[4 * e] = _mm256_fmadd_ps(qv, k0, acc[4 * e]);
            acc[4 * e + 1] = _mm256_fmadd_ps(qv, k1, acc[4 * e + 1]);
            acc[4 * e + 2] = _mm256_fmadd_ps(qv, k2, acc[4 * e + 2]);
            acc[4 * e + 3] = _mm256_fmadd_ps(qv, k3, acc[4 * e + 3]);
        }
    }
    float o[16];
    _mm256_storeu_ps(o, _mm256_mul_ps(sum8(acc), sc));
    if (NR > 2) _mm256_storeu_ps(o + 8, _mm256_mul_ps(sum8(acc + 8), sc));
    for (int e = 0; e < NR; e++) // columns past nk: scratch (< lds)
        for (int c = 0; c < 4; c++) s[(int64_t)rows[e] * lds + j + c] = o[4 * e + c];
}

// Query rows rows[t] (t < nr) of one kv head x keys [j, j + 4): tiles of
// ATT_ROWS rows and one of the rest (GQA's 3 rows a kv head: no padding row).
ATT_INLINE void qk_keys(const mf_dtype dt, const float *q, int64_t D, const int32_t *rows, int64_t nr,
                        const char *const kr[4], __m256 sc, float *s, int64_t lds, int64_t j) {
    for (int64_t t = 0; t < nr; t += ATT_ROWS) switch (nr - t >= ATT_ROWS ? ATT_ROWS : (int)(nr - t)) {
        case 1: qk_tile(dt, 1, q, D, rows + t, kr, sc, s, lds, j); break;
        case 2: qk_tile(dt, 2, q, D, rows + t, kr, sc, s, lds, j); break;
        case 3: qk_tile(dt, 3, q, D, rows + t, kr, sc, s, lds, j); break;
        default: qk_tile(dt, 4, q, D, rows + t, kr, sc, s, lds, j); break;
        }
}

// Keys ahead whose rows qk_all prefetches (1024 keys of SmolLM2's geometry,
// K/V from memory: 218 -> 169 us a call; 16 ahead: 175).
enum { QK_AHEAD = 8 };

ATT_INLINE void qk_all(const mf_dtype dt, const float *q, int64_t D, const int32_t *rows, int64_t nr, int64_t kvh,
                       const char *const *kp, int64_t hs, int64_t nk, float scale, float *s, int64_t lds) {
    const __m256 sc = _mm256_set1_ps(scale);
    const int64_t es = dt == MF_DTYPE_F32 ? 4 : 2;
    for (int64_t j = 0; j < nk; j += 4) // 4 keys' whole rows (every kv head), read in order
        for (int64_t g = 0; g < kvh; g++) {
            const char *kr[4];
            for (int c = 0; c < 4; c++) kr[c] = kp[j + c < nk ? j + c : nk - 1] + g * hs * es;
            if (j + QK_AHEAD + 4 <= nk) // the same kv head of 4 keys further on
                for (int c = 0; c < 4; c++)
                    for (int64_t b = 0; b < D * es; b += 64)
                        _mm_prefetch(kp[j + QK_AHEAD + c] + g * hs * es + b, _MM_HINT_T0);
            qk_keys(dt, q, D, rows + g * nr, nr, kr, sc, s, lds, j);
        }
}

ATT_FN void ATT_NAME(mf_cpu_dec_qk)(mf_dtype dt, const float *q, int64_t D, const int32_t *rows, int64_t nr,
                                    int64_t kvh, const char *const *kp, int64_t hs, int64_t nk, float scale, float *s,
                                    int64_t lds) {
    if (dt == MF_DTYPE_F32)
        qk_all(MF_DTYPE_F32, q, D, rows, nr, kvh, kp, hs, nk, scale, s, lds);
    else if (dt == MF_DTYPE_F16)
        qk_all(MF_DTYPE_F16, q, D, rows, nr, kvh, kp, hs, nk, scale, s, lds);
    else
        qk_all(MF_DTYPE_BF16, q, D, rows, nr, kvh, kp, hs, nk, scale, s, lds);
}

// NR <= 4 rows x nv 8-column vectors of o from column d0: o (+)= the keys
// [j0, j1) (value j's kv head at vp[j] + voff bytes).
ATT_INLINE void pv_block(const mf_dtype dt, const int NR, const int nv, const float *const pr[4], float *const orow[4],
                         const char *const *vp, int64_t voff, int64_t j0, int64_t j1, int64_t d0) {
    const int64_t es = dt == MF_DTYPE_F32 ? 4 : 2;
    __m256 acc[4][4];
    for (int e = 0; e < NR; e++)
        for (int v = 0; v < nv; v++) acc[e][v] = j0 ? _mm256_loadu_ps(orow[e] + d0 + 8 * v) : _mm256_setzero_ps();
    for (int64_t j = j0; j < j1; j++) {
        const char *vr = vp[j] + voff + d0 * es;
        __m256 vv[4];
        for (int v = 0; v < nv; v++) vv[v] = ld8(dt, vr + 8 * v * es);
        for (int e = 0; e < NR; e++) {
            const __m256 pe = _mm256_set1_ps(pr[e][j]);
            for (int v = 0; v < nv; v++) acc[e][v] = _mm256_fmadd_ps(pe, vv[v], acc[e][v]);
        }
    }
    for (int e = 0; e < NR; e++)
        for (int v = 0; v < nv; v++) _mm256_storeu_ps(orow[e] + d0 + 8 * v, acc[e][v]);
}

// NR rows: o's columns in blocks of 32 (4 vectors), then the 1-3 vectors left.
ATT_INLINE void pv_rows(const mf_dtype dt, const int NR, const float *const pr[4], float *const orow[4],
                        const char *const *vp, int64_t voff, int64_t j0, int64_t j1, int64_t D) {
    for (int64_t d0 = 0; d0 < D; d0 += 32) switch (D - d0 >= 32 ? 4 : (int)((D - d0) / 8)) {
        case 1: pv_block(dt, NR, 1, pr, orow, vp, voff, j0, j1, d0); break;
        case 2: pv_block(dt, NR, 2, pr, orow, vp, voff, j0, j1, d0); break;
        case 3: pv_block(dt, NR, 3, pr, orow, vp, voff, j0, j1, d0); break;
        default: pv_block(dt, NR, 4, pr, orow, vp, voff, j0, j1, d0); break;
        }
}

enum { PV_PANEL = 16 }; // keys whose whole V rows (every kv head) are read in order, then used per head

ATT_INLINE void pv_all(const mf_dtype dt, const float *p, int64_t ldp, const int32_t *rows, int64_t nr, int64_t kvh,
                       const char *const *vp, int64_t hs, int64_t nk, int64_t D, float *o) {
    const int64_t es = dt == MF_DTYPE_F32 ? 4 : 2;
    for (int64_t j0 = 0; j0 < nk; j0 += PV_PANEL) {
        const int64_t j1 = j0 + PV_PANEL < nk ? j0 + PV_PANEL : nk;
        for (int64_t g = 0; g < kvh; g++)
            for (int64_t t = 0; t < nr; t += ATT_ROWS) { // tiles of ATT_ROWS rows and one of the rest
                const int NR = nr - t >= ATT_ROWS ? ATT_ROWS : (int)(nr - t);
                const float *pr[4];
                float *orow[4];
                for (int e = 0; e < NR; e++) {
                    const int64_t r = rows[g * nr + t + e];
                    pr[e] = p + r * ldp, orow[e] = o + r * D;
                }
                const int64_t voff = g * hs * es;
                switch (NR) {
                case 1: pv_rows(dt, 1, pr, orow, vp, voff, j0, j1, D); break;
                case 2: pv_rows(dt, 2, pr, orow, vp, voff, j0, j1, D); break;
                case 3: pv_rows(dt, 3, pr, orow, vp, voff, j0, j1, D); break;
                default: pv_rows(dt, 4, pr, orow, vp, voff, j0, j1, D); break;
                }
            }
    }
}

ATT_FN void ATT_NAME(mf_cpu_dec_pv)(mf_dtype dt, const float *p, int64_t ldp, const int32_t *rows, int64_t nr,
                                    int64_t kvh, const char *const *vp, int64_t hs, int64_t nk, int64_t D, float *o) {
    if (dt == MF_DTYPE_F32)
        pv_all(MF_DTYPE_F32, p, ldp, rows, nr, kvh, vp, hs, nk, D, o);
    else if (dt == MF_DTYPE_F16)
        pv_all(MF_DTYPE_F16, p, ldp, rows, nr, kvh, vp, hs, nk, D, o);
    else
        pv_all(MF_DTYPE_BF16, p, ldp, rows, nr, kvh, vp, hs, nk, D, o);
}

// The 8 lanes of v folded: halves, then pairs, then the last two.
ATT_INLINE float max8(__m256 v) {
    const __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 q = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(q, _mm_shuffle_ps(q, q, 1)));
}
ATT_INLINE float add8(__m256 v) {
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));
}

// One row of a chunk's scores: *m = the largest non-NaN of s[0..n) (-inf if
// none), s = exp(s - m) (NaN and -inf give 0; all 0 when m is -inf), *l =
// their sum (8 lanes, then a fixed tree). The portable loops took ~30% of
// a SmolLM2 decode chunk's time here (three passes, 8 lanes, no FMA).
ATT_FN void ATT_NAME(mf_cpu_dec_softmax)(float *s, int64_t n, float *m, float *l) {
    const __m256 ninf = _mm256_set1_ps(-__builtin_inff());
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 mx = ninf;
    for (int64_t c = 0; c < n; c += 8) { // lanes past n: -inf (maskload gives 0 there)
        const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - c < 8 ? n - c : 8)), lane);
        const __m256 x = _mm256_blendv_ps(ninf, _mm256_maskload_ps(s + c, k), _mm256_castsi256_ps(k));
        mx = _mm256_max_ps(x, mx); // a NaN lane keeps mx
    }
    *m = max8(mx);
    const __m256 mv = _mm256_set1_ps(*m == -__builtin_inff() ? 0.0f : *m); // all -inf: every exp is 0
    __m256 sum = _mm256_setzero_ps();
    for (int64_t c = 0; c < n; c += 8) {
        const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - c < 8 ? n - c : 8)), lane);
        const __m256 x =
            _mm256_sub_ps(_mm256_blendv_ps(ninf, _mm256_maskload_ps(s + c, k), _mm256_castsi256_ps(k)), mv);
        const __m256 e = _mm256_and_ps(mf_exp8_nonpos(x), _mm256_cmp_ps(x, x, _CMP_ORD_Q)); // NaN: 0
        _mm256_maskstore_ps(s + c, k, e);
        sum = _mm256_add_ps(sum, e);
    }
    *l = add8(sum);
}

#undef ATT_FN
#undef ATT_INLINE

#else
void ATT_NAME(mf_cpu_dec_softmax)(float *s, int64_t n, float *m, float *l) { (void)s, (void)n, (void)m, (void)l; }
void ATT_NAME(mf_cpu_dec_qk)(mf_dtype dt, const float *q, int64_t D, const int32_t *rows, int64_t nr, int64_t kvh,
                             const char *const *kp, int64_t hs, int64_t nk, float scale, float *s, int64_t lds) {
    (void)dt, (void)q, (void)D, (void)rows, (void)nr, (void)kvh, (void)kp, (void)hs, (void)nk, (void)scale, (void)s,
        (void)lds;
}
void ATT_NAME(mf_cpu_dec_pv)(mf_dtype dt, const float *p, int64_t ldp, const int32_t *rows, int64_t nr, int64_t kvh,
                             const char *const *vp, int64_t hs, int64_t nk, int64_t D, float *o) {
    (void)dt, (void)p, (void)ldp, (void)rows, (void)nr, (void)kvh, (void)vp, (void)hs, (void)nk, (void)D, (void)o;
}
#endif
