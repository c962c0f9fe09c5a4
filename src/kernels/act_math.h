// Internal: the activation functions of mf_act in f32, one definition for
// src/cpu/act.c and src/cuda/elementwise/act.cu (plain C, also compiled as CUDA C++ for
// host and device). Written to stay finite and accurate for any finite x:
//   sigmoid(v) = 1 / (1 + e) for v >= 0, e / (1 + e) for v < 0, e = exp(-|v|)
//                (exp never overflows; silu(-1e4) = -1e4 * 0 = -0, not NaN);
//   silu(x)      = x * sigmoid(x)
//   gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u),
//                  u = sqrt(2/pi) (x + 0.044715 x^3)   (no 1 + tanh cancellation
//                  for x < 0; x^3 overflowing to inf gives sigmoid 0 or 1);
//   gelu_erf(x)  = 0.5 x (1 + erf(x / sqrt 2)) = x * (0.5 erfc(-x / sqrt 2))
//                  (erfc keeps its relative accuracy in the left tail; the
//                  0.5 goes on erfc so that x * 2 never overflows).
// Precise expf / erfcf on both sides (no __expf): they agree to a few ulp.
#ifndef MF_KERNELS_ACT_MATH_H
#define MF_KERNELS_ACT_MATH_H

#include <math.h>

#include "minfer/ops.h"

#ifdef __CUDACC__
#define MF_ACT_FN static inline __host__ __device__
#else
#define MF_ACT_FN static inline
#endif

MF_ACT_FN float mf_act_sigmoid(float v) {
    const float e = expf(-fabsf(v));
    return (v >= 0.0f ? 1.0f : e) / (1.0f + e);
}

// act(x) for kind (an mf_act_kind value, validated by the caller).
MF_ACT_FN float mf_act_apply(int kind, float x) {
    if (kind == MF_ACT_SILU) return x * mf_act_sigmoid(x);
    if (kind == MF_ACT_GELU_TANH) return x * mf_act_sigmoid(1.5957691216057308f * x * (1.0f + 0.044715f * x * x));
    return x * (0.5f * erfcf(-0.70710678118654752f * x));
}

#endif // MF_KERNELS_ACT_MATH_H
