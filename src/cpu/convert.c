// CPU dtype conversion, in one place: f16 / bf16 / f32 runs widened to f32
// (exact) and f32 narrowed back (round to nearest even), 8 lanes at a time.
// Every CPU op loads and stores its non-f32 operands through these (cpu.h).
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/v8.h"
#include "cpu/vmath.h"

MF_CPU_HOT void mf_cpu_widen(float *dst, const char *src, mf_dtype dt, int64_t n) {
    const int64_t es = (int64_t)mf_dtype_size(dt);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f v;
        v8_load8(&v, src + i * es, dt);
        memcpy(dst + i, &v, 32);
    }
    for (; i < n; i++) dst[i] = v8_load1(src, dt, i);
}

void mf_cpu_to_f32(float *dst, const void *src, mf_dtype dt, int64_t off, int64_t n) {
    if (dt == MF_DTYPE_F32)
        memcpy(dst, (const float *)src + off, (size_t)n * sizeof(float));
    else
        mf_cpu_widen(dst, (const char *)src + off * (int64_t)mf_dtype_size(dt), dt, n);
}

// src[0 .. n) as bf16 / f16 at dst, 8 lanes at a time: the bits of
// mf_f32_to_bf16 / mf_f32_to_f16 (round to nearest even, NaN quiet, past
// the f16 range inf), branch-free so that both clones vectorise it.
MF_CPU_HOT static void narrow16(char *dst, const float *src, mf_dtype dt, int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        v8u x, h;
        memcpy(&x, src + j, 32);
        const v8u ax = x & 0x7fffffffu, nan = (v8u)(ax > 0x7f800000u);
        if (dt == MF_DTYPE_BF16) {
            h = (((x >> 16) | 0x40u) & nan) | (((x + 0x7fffu + ((x >> 16) & 1u)) >> 16) & ~nan);
        } else {
            // Normal halves (|x| >= 2^-14): rebias the exponent, round the 13
            // dropped bits to even (a carry may bump the exponent). Below:
            // |x| + 0.5 rounds |x| to a multiple of 2^-24, the subnormal step,
            // in the FPU's round-to-nearest-even; its low bits are the half.
            const v8u normal = (ax - 0x38000000u + 0xfffu + ((ax >> 13) & 1u)) >> 13;
            v8f f;
            memcpy(&f, &ax, 32);
            f += 0.5f;
            v8u sub;
            memcpy(&sub, &f, 32);
            const v8u is_normal = (v8u)(ax >= 0x38800000u), is_inf = (v8u)(ax >= 0x477ff000u);
            h = (normal & is_normal) | ((sub - 0x3f000000u) & ~is_normal);
            h = (0x7c00u & is_inf) | (h & ~is_inf);
            h = ((0x7e00u | ((ax >> 13) & 0x3ffu)) & nan) | (h & ~nan);
            h |= (x >> 16) & 0x8000u;
        }
        const v8h o = __builtin_convertvector(h, v8h);
        memcpy(dst + j * 2, &o, 16);
    }
    for (; j < n; j++) {
        const uint16_t o = dt == MF_DTYPE_BF16 ? mf_f32_to_bf16(src[j]) : mf_f32_to_f16(src[j]);
        memcpy(dst + j * 2, &o, 2);
    }
}

void mf_cpu_from_f32(void *dst, mf_dtype dt, int64_t off, const float *src, int64_t n) {
    if (dt == MF_DTYPE_F32)
        memcpy((float *)dst + off, src, (size_t)n * sizeof(float));
    else if (dt == MF_DTYPE_F16 || dt == MF_DTYPE_BF16)
        narrow16((char *)dst + off * 2, src, dt, n);
    else
        for (int64_t j = 0; j < n; j++) mf_store_f32(dst, dt, off + j, src[j]);
}
