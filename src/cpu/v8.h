// Internal: 8-lane f32 vectors (GCC/clang vector extensions) and exact loads
// of f32 / f16 / bf16 runs into them, for the CPU backend's hot loops (the
// skinny GEMM, widening, decode attention). In the x86-64-v3 clone of an
// MF_CPU_HOT function they are AVX2 registers; in the baseline clone, two
// SSE halves doing the same operations in the same order: the same bits.
#ifndef MF_CPU_V8_H
#define MF_CPU_V8_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "minfer/tensor.h"
#include "cpu/vmath.h"

typedef float v8f __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));
typedef float v8f_un __attribute__((vector_size(32), aligned(4), may_alias)); // 8 floats at any float address
#define V8_INLINE static inline __attribute__((always_inline))

// f16 bit patterns (one per 32-bit lane) as f32 bits: exponent and mantissa
// moved to the f32 position and scaled by 2^112 (exact for normals and
// subnormals alike); Inf/NaN then get the all-ones exponent, and the sign
// goes back on. (Vectors pass by pointer: by value, the baseline clone's ABI
// differs.)
V8_INLINE void v8_f16_bits(v8u *u) {
    const v8u h = *u, o = (h & 0x7fffu) << 13;
    v8f f;
    memcpy(&f, &o, 32);
    f *= 0x1p112f;
    v8u r;
    memcpy(&r, &f, 32);
    const v8u special = (v8u)((o & 0x0f800000u) == 0x0f800000u); // half exponent 31
    *u = r | (special & 0x7f800000u) | ((h & 0x8000u) << 16);
}

// 8 elements at p (dtype dt) as f32, in order.
V8_INLINE void v8_load8(v8f *out, const char *p, mf_dtype dt) {
    if (dt == MF_DTYPE_F32) {
        memcpy(out, p, 32);
        return;
    }
    v8h h;
    memcpy(&h, p, 16);
    v8u u = __builtin_convertvector(h, v8u);
    if (dt == MF_DTYPE_BF16)
        u <<= 16;
    else
        v8_f16_bits(&u);
    memcpy(out, &u, 32);
}

// Element i of the run at p (dtype dt) as f32 (the tails).
V8_INLINE float v8_load1(const char *p, mf_dtype dt, int64_t i) {
    if (dt == MF_DTYPE_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return dt == MF_DTYPE_BF16 ? mf_bitsf((uint32_t)h << 16) : mf_f16_to_f32(h);
}

// 16 elements at p (dtype dt) as f32 in two vectors. f32 and f16:
// elements 0..7, then 8..15. bf16: the even elements, then the odd ones
// ("sk order"): one 32-byte load split by a mask and a shift, where widening
// 8 elements in order costs GCC 4 shuffles (2 loads, 2 pmovzx, an insert).
// The loops lay out the other operand, or their sums, to match (v8_pos,
// mf_cpu_sk_order). (f16 stays in order: the AVX2 kernels widen it with
// F16C's vcvtph2ps, which takes 8 halves in order.)
V8_INLINE void v8_load16(v8f out[2], const char *p, mf_dtype dt) {
    if (dt == MF_DTYPE_F16) {
        v8_load8(&out[0], p, dt);
        v8_load8(&out[1], p + 16, dt);
        return;
    }
    if (dt == MF_DTYPE_F32) {
        memcpy(&out[0], p, 32);
        memcpy(&out[1], p + 32, 32);
        return;
    }
    v8u u, lo, hi;
    memcpy(&u, p, 32);
    lo = u << 16, hi = u & 0xffff0000u;
    memcpy(&out[0], &lo, 32);
    memcpy(&out[1], &hi, 32);
}

// Whether 16-blocks of dtype dt come out of v8_load16 in sk order (bf16 only).
V8_INLINE bool v8_sk(mf_dtype dt) { return dt == MF_DTYPE_BF16; }

// Where element j of a run of 16-blocks sits in sk order (elements past the
// last whole block stay in place).
V8_INLINE int64_t v8_pos(int64_t j) {
    const int64_t t = j & 15;
    return (j - t) + (t & 1 ? 8 : 0) + (t >> 1);
}

V8_INLINE float v8_hsum(const v8f *p) {
    const v8f v = *p;
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

#endif // MF_CPU_V8_H
