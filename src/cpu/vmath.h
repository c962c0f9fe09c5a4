// Internal: branch-free f32 math for the CPU backend's inner loops. libm's
// expf is one call per element and GCC will not if-convert float selects
// under -ftrapping-math, so loops over these helpers are written with bit
// masks and vectorise (SSE2 on the baseline x86-64 build).
#ifndef MF_CPU_VMATH_H
#define MF_CPU_VMATH_H

#include <stdint.h>
#include <string.h>

// MF_CPU_HOT on a function with such a loop: on x86-64 it is also compiled
// for x86-64-v3 (AVX2 + FMA: 8 lanes instead of SSE2's 4) and the loader
// picks the clone the CPU runs (an ifunc). The helpers below are inlined
// into either clone. -DMF_CPU_NO_CLONES builds the baseline only (CI's
// sanitizer build does, so that CI tests both).
#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__) && !defined(MF_CPU_NO_CLONES)
#define MF_CPU_HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MF_CPU_HOT
#endif

static inline uint32_t mf_fbits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float mf_bitsf(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}
// All ones when c is true, else zero.
static inline uint32_t mf_mask(int c) { return 0u - (uint32_t)c; }
// m ? a : b for a mask m of all ones or zeros.
static inline float mf_sel(uint32_t m, float a, float b) { return mf_bitsf((mf_fbits(a) & m) | (mf_fbits(b) & ~m)); }

// e^x for x <= 0, in f32, about 1 ulp: Cody-Waite reduction x = n ln2 + r,
// |r| <= ln2/2, then a degree-7 Taylor polynomial (remainder < 6e-9
// relative); the integer n comes from the round-to-nearest "magic number"
// trick (no float-to-int conversion). Results below 2^-126 (x < -87.33)
// flush to 0 (an absolute error under 2^-126); NaN stays NaN. The range
// tests look at the bits: x < -87.33 is "bits > those of -87.33" among
// negative floats, and a positive x (never passed) is treated as 0.
static inline float mf_exp_nonpos(float x) {
    const uint32_t ux = mf_fbits(x);
    const uint32_t below = mf_mask(ux > 0xC2AEA8F6u); // -87.33f
    const uint32_t pos = mf_mask(ux < 0x80000000u), nan = mf_mask((ux & 0x7fffffffu) > 0x7f800000u);
    const float xc = mf_sel(below, -87.33f, mf_sel(pos, 0.0f, x));
    const float magic = 12582912.0f; // 1.5 * 2^23: adding it rounds to an integer in the low bits
    const float k = xc * 1.44269504f + magic;
    const float n = k - magic;
    float r = xc - n * 0.693145752f; // ln2 split: hi has 15 significant bits, n * hi is exact
    r = r - n * 1.42860677e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const float e = p * mf_bitsf((mf_fbits(k) - 0x4B400000u + 127u) << 23); // p * 2^n, n in [-126, 0]
    return mf_sel(nan, x, mf_sel(below, 0.0f, e));
}

// sigmoid(v) = 1 / (1 + e) for v >= 0, e / (1 + e) for v < 0, e = exp(-|v|):
// src/kernels/act_math.h's formula (never overflows) with the exp above.
// The sign tests are on the bits (v = -0 gives e = 1 either way).
static inline float mf_sigmoid_v(float v) {
    const uint32_t b = mf_fbits(v);
    const float e = mf_exp_nonpos(mf_bitsf(b | 0x80000000u)); // exp(-|v|)
    return mf_sel(mf_mask(b < 0x80000000u), 1.0f, e) / (1.0f + e);
}

// Largest non-NaN value of u[0..n) (-inf if none), and the sum of u[0..n):
// eight lanes, so that the loops vectorise without -ffast-math (the sum's
// order is fixed: lanes, then a pairwise tree).
static inline float mf_row_max(const float *u, int64_t n) {
    float m[8];
    for (int l = 0; l < 8; l++) m[l] = -__builtin_inff();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) m[l] = u[j + l] > m[l] ? u[j + l] : m[l];
    for (; j < n; j++) m[0] = u[j] > m[0] ? u[j] : m[0];
    float r = m[0];
    for (int l = 1; l < 8; l++) r = m[l] > r ? m[l] : r;
    return r;
}
static inline float mf_row_sum(const float *u, int64_t n) {
    float s[8] = {0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) s[l] += u[j + l];
    for (; j < n; j++) s[0] += u[j];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// silu and tanh GELU with src/kernels/act_math.h's formulas (gelu_tanh(x) =
// x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)).
static inline float mf_silu_v(float x) { return x * mf_sigmoid_v(x); }
static inline float mf_gelu_tanh_v(float x) {
    return x * mf_sigmoid_v(1.5957691216057308f * x * (1.0f + 0.044715f * x * x));
}

#endif // MF_CPU_VMATH_H
