// Shared pieces of the AVX2 + FMA + F16C kernels (skinny_avx2.c, act.c),
// compiled only into their target("avx2,fma,f16c") functions, which run
// where mf_cpu_avx2() says so (skinny.h).
#ifndef MF_CPU_AVX2_H
#define MF_CPU_AVX2_H

#include <immintrin.h>

#define AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

// e^x for x <= 0, 8 lanes: src/cpu/vmath.h's mf_exp_nonpos (the same
// reduction and polynomial) with FMA, each multiply-add rounded once, so
// about half the dependent steps (the portable loop runs ~2.5 ns an element
// here, latency-bound). Below -87.33 (and -inf) 0; NaN stays NaN.
AVX2_INLINE __m256 mf_exp8_nonpos(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.33f), magic = _mm256_set1_ps(12582912.0f); // 1.5 * 2^23
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q), below = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_setzero_ps());
    const __m256 k = _mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504f), magic); // n in the low bits
    const __m256 n = _mm256_sub_ps(k, magic);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e =
        _mm256_slli_epi32(_mm256_sub_epi32(_mm256_castps_si256(k), _mm256_set1_epi32(0x4B400000 - 127)), 23);
    const __m256 y = _mm256_andnot_ps(below, _mm256_mul_ps(p, _mm256_castsi256_ps(e))); // p 2^n, n in [-126, 0]
    return _mm256_blendv_ps(y, x, nan);
}

// sigmoid(v) = (v >= 0 ? 1 : e) / (1 + e), e = exp(-|v|): vmath.h's
// mf_sigmoid_v (never overflows), 8 lanes.
AVX2_INLINE __m256 mf_sigmoid8(__m256 v) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = mf_exp8_nonpos(_mm256_or_ps(v, _mm256_set1_ps(-0.0f))); // exp(-|v|)
    const __m256 neg = _mm256_castsi256_ps(_mm256_srai_epi32(_mm256_castps_si256(v), 31)); // sign bit set
    return _mm256_div_ps(_mm256_blendv_ps(one, e, neg), _mm256_add_ps(one, e));
}

#endif // MF_CPU_AVX2_H
