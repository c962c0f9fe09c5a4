// Shared pieces of the AVX-512 kernels (gemm_avx512.c),
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

#endif // MF_CPU_AVX512_H
