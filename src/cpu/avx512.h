// Shared pieces of the AVX-512 kernels (gemm_avx512.c, attention_avx512.c),
// compiled only into their target("avx512f,avx512bw") functions.
#ifndef MF_CPU_AVX512_H
#define MF_CPU_AVX512_H

#include <immintrin.h>

#define MF_AVX512_FN __attribute__((target("avx512f,avx512bw")))
#define MF_AVX512_INLINE static inline __attribute__((always_inline, target("avx512f,avx512bw")))

// Sums of 16 accumulators, sum of v[t] at lane t: pairs, then quads within
// 128-bit lanes, then across the lanes; every lane takes the same tree (15
// adds for 16 dot products instead of 16 horizontal sums).
MF_AVX512_INLINE __m512 mf_sum16(const __m512 v[16]) {
    __m512 x[8], y[4];
    for (int i = 0; i < 8; i++)
        x[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++) {
        const __m512d a = _mm512_castps_pd(x[2 * i]), b = _mm512_castps_pd(x[2 * i + 1]);
        y[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    const __m512 u0 = _mm512_add_ps(_mm512_shuffle_f32x4(y[0], y[1], 0x88), _mm512_shuffle_f32x4(y[0], y[1], 0xdd));
    const __m512 u1 = _mm512_add_ps(_mm512_shuffle_f32x4(y[2], y[3], 0x88), _mm512_shuffle_f32x4(y[2], y[3], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, 0x88), _mm512_shuffle_f32x4(u0, u1, 0xdd));
}

// e^x for x <= 0 (src/cpu/vmath.h's mf_exp_nonpos with FMA: the same
// reduction and polynomial, each multiply-add rounded once), 16 lanes:
// below -87.33 (and -inf) 0, NaN 0 (avx2.h's mf_exp8_nonpos is the 8-lane
// twin, which keeps NaN).
MF_AVX512_INLINE __m512 mf_exp16_nonpos(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.33f), magic = _mm512_set1_ps(12582912.0f); // 1.5 * 2^23
    const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ); // false for NaN and below -87.33
    const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_setzero_ps());
    const __m512 k = _mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504f), magic); // n in the low bits
    const __m512 n = _mm512_sub_ps(k, magic);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i e =
        _mm512_slli_epi32(_mm512_sub_epi32(_mm512_castps_si512(k), _mm512_set1_epi32(0x4B400000 - 127)), 23);
    return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(e)); // p 2^n, n in [-126, 0]
}

#endif // MF_CPU_AVX512_H
