// Decode attention's two products on x86-64 CPUs with AVX-512 F, for an f32
// KV cache and head_dim a multiple of 16 (up to 256): the inner loops of a
// work item of src/cpu/attention.c (one sequence, a chunk of <= 64 keys,
// all heads). The portable loops score one key at a time (a horizontal sum
// per query row and key) and ran ~1 multiply-add a cycle at the default
// model's 32 sequences (docs/notes/cpu.md).
//
// q.k: tiles of 4 query rows x 4 keys, one 16-lane accumulator per pair
// over head_dim, the 16 dot products summed together by a transposing tree
// (lane 4 r + c: row r, key c), so each row's 4 scores are one 16-byte
// store. p.v: 4 rows x 64 columns of o in 16 accumulators over the keys, a
// broadcast of p per row and key. Rows of a kv head are padded to a multiple
// of 4 by repeating the last one and keys by repeating the last key: a
// repeated row or key computes the same bits again, so the stores need no
// masks. Sums in a fixed order (head_dim in 16-lane steps, then the tree;
// keys in order): the same bits for any thread count or batch.
#include "cpu/cpu.h"
#include "cpu/skinny.h"

#if MF_CPU_AVX2_KERNELS
#include "cpu/avx512.h"

// Query rows rows[t] (t < nr) of one kv head x keys [j, j + 4) at kr[0..3]:
// s[row][j + c] = scale q_row . k_c, rows in tiles of 4.
MF_AVX512_INLINE void qk_keys(const float *q, int64_t D, const int32_t *rows, int64_t nr, const float *const kr[4],
                              __m512 sc, float *s, int64_t lds, int64_t j) {
    for (int64_t t = 0; t < nr; t += 4) {
        const float *qr[4];
        for (int e = 0; e < 4; e++) qr[e] = q + (int64_t)rows[t + e < nr ? t + e : nr - 1] * D;
        __m512 acc[16];
        for (int a = 0; a < 16; a++) acc[a] = _mm512_setzero_ps();
        for (int64_t d = 0; d < D; d += 16) {
            const __m512 k0 = _mm512_loadu_ps(kr[0] + d), k1 = _mm512_loadu_ps(kr[1] + d);
            const __m512 k2 = _mm512_loadu_ps(kr[2] + d), k3 = _mm512_loadu_ps(kr[3] + d);
            for (int e = 0; e < 4; e++) {
                const __m512 qv = _mm512_loadu_ps(qr[e] + d);
                acc[4 * e] = _mm512_fmadd_ps(qv, k0, acc[4 * e]);
                acc[4 * e + 1] = _mm512_fmadd_ps(qv, k1, acc[4 * e + 1]);
                acc[4 * e + 2] = _mm512_fmadd_ps(qv, k2, acc[4 * e + 2]);
                acc[4 * e + 3] = _mm512_fmadd_ps(qv, k3, acc[4 * e + 3]);
            }
        }
        float o[16];
        _mm512_storeu_ps(o, _mm512_mul_ps(mf_sum16(acc), sc));
        for (int e = 0; e < 4; e++) {
            float *dst = s + (int64_t)rows[t + e < nr ? t + e : nr - 1] * lds + j;
            for (int c = 0; c < 4; c++) dst[c] = o[4 * e + c]; // past nk: scratch columns (< lds)
        }
    }
}

MF_AVX512_FN void mf_cpu_dec_qk_avx512(const float *q, int64_t D, const int32_t *rows, int64_t nr, int64_t kvh,
                                       const float *const *kp, int64_t hs, int64_t nk, float scale, float *s,
                                       int64_t lds) {
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t j = 0; j < nk; j += 4) // 4 keys' whole rows (every kv head), read in order
        for (int64_t g = 0; g < kvh; g++) {
            const float *kr[4];
            for (int c = 0; c < 4; c++) kr[c] = kp[j + c < nk ? j + c : nk - 1] + g * hs;
            qk_keys(q, D, rows + g * nr, nr, kr, sc, s, lds, j);
        }
}

// 4 rows x nv 16-column vectors of o from column d0: o (+)= the keys [j0, j1).
MF_AVX512_INLINE void pv_block(const int nv, const float *const pr[4], float *const orow[4], const float *const *vp,
                               int64_t voff, int64_t j0, int64_t j1, int64_t d0) {
    __m512 acc[4][4];
    for (int e = 0; e < 4; e++)
        for (int v = 0; v < nv; v++) acc[e][v] = j0 ? _mm512_loadu_ps(orow[e] + d0 + 16 * v) : _mm512_setzero_ps();
    for (int64_t j = j0; j < j1; j++) {
        const float *vr = vp[j] + voff + d0;
        __m512 vv[4];
        for (int v = 0; v < nv; v++) vv[v] = _mm512_loadu_ps(vr + 16 * v);
        for (int e = 0; e < 4; e++) {
            const __m512 pe = _mm512_set1_ps(pr[e][j]);
            for (int v = 0; v < nv; v++) acc[e][v] = _mm512_fmadd_ps(pe, vv[v], acc[e][v]);
        }
    }
    for (int e = 0; e < 4; e++)
        for (int v = 0; v < nv; v++) _mm512_storeu_ps(orow[e] + d0 + 16 * v, acc[e][v]);
}

enum { PV_PANEL = 16 }; // keys whose whole V rows (every kv head) are read in order, then used per head

MF_AVX512_FN void mf_cpu_dec_pv_avx512(const float *p, int64_t ldp, const int32_t *rows, int64_t nr, int64_t kvh,
                                       const float *const *vp, int64_t hs, int64_t nk, int64_t D, float *o) {
    for (int64_t j0 = 0; j0 < nk; j0 += PV_PANEL) {
        const int64_t j1 = j0 + PV_PANEL < nk ? j0 + PV_PANEL : nk;
        for (int64_t g = 0; g < kvh; g++)
            for (int64_t t = 0; t < nr; t += 4) {
                const float *pr[4];
                float *orow[4];
                for (int e = 0; e < 4; e++) {
                    const int64_t r = rows[g * nr + (t + e < nr ? t + e : nr - 1)];
                    pr[e] = p + r * ldp, orow[e] = o + r * D;
                }
                for (int64_t d0 = 0; d0 < D; d0 += 64) {
                    switch (D - d0 >= 64 ? 4 : (int)((D - d0) / 16)) {
                    case 1: pv_block(1, pr, orow, vp, g * hs, j0, j1, d0); break;
                    case 2: pv_block(2, pr, orow, vp, g * hs, j0, j1, d0); break;
                    case 3: pv_block(3, pr, orow, vp, g * hs, j0, j1, d0); break;
                    default: pv_block(4, pr, orow, vp, g * hs, j0, j1, d0); break;
                    }
                }
            }
    }
}

#else
void mf_cpu_dec_qk_avx512(const float *q, int64_t D, const int32_t *rows, int64_t nr, int64_t kvh,
                          const float *const *kp, int64_t hs, int64_t nk, float scale, float *s, int64_t lds) {
    (void)q, (void)D, (void)rows, (void)nr, (void)kvh, (void)kp, (void)hs, (void)nk, (void)scale, (void)s, (void)lds;
}
void mf_cpu_dec_pv_avx512(const float *p, int64_t ldp, const int32_t *rows, int64_t nr, int64_t kvh,
                          const float *const *vp, int64_t hs, int64_t nk, int64_t D, float *o) {
    (void)p, (void)ldp, (void)rows, (void)nr, (void)kvh, (void)vp, (void)hs, (void)nk, (void)D, (void)o;
}
#endif
