// CPU activations (mf_act): y = act(x) (* up), f32 math with src/kernels/act_math.h's
// formulas (silu and tanh GELU through the vectorising exp of
// src/cpu/vmath.h, or with the AVX2 kernels on, its FMA twin in avx2.h; erf
// GELU through libm's erfcf). One row per OpenMP iteration, in blocks of
// kBlk columns converted to f32 (f32 rows under the AVX2 kernels: in place);
// a block is read before it is written, so y may be x's or up's view.
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/skinny.h"
#include "cpu/vmath.h"
#include "kernels/act_math.h"

enum { kBlk = 256 };

// x[0..n) = act(x) (* up).
MF_CPU_HOT static void act_block(int kind, float *x, const float *up, int64_t n) {
    if (kind == MF_ACT_SILU)
        for (int64_t j = 0; j < n; j++) x[j] = mf_silu_v(x[j]);
    else if (kind == MF_ACT_GELU_TANH)
        for (int64_t j = 0; j < n; j++) x[j] = mf_gelu_tanh_v(x[j]);
    else
        for (int64_t j = 0; j < n; j++) x[j] = mf_act_apply(kind, x[j]);
    if (up)
        for (int64_t j = 0; j < n; j++) x[j] *= up[j];
}

#if MF_CPU_AVX2_KERNELS
#include "cpu/avx2.h"

// act_block's silu and tanh GELU with the FMA exp of avx2.h (~2x faster:
// the decode step's act is one row of the intermediate size, on one thread).
// y[0..n) = act(x) (* up); y may be x or up.
AVX2_FN static void act_block_avx2(int kind, float *y, const float *x, const float *up, int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 v = _mm256_loadu_ps(x + j);
        __m256 r;
        if (kind == MF_ACT_SILU) {
            r = _mm256_mul_ps(v, mf_sigmoid8(v));
        } else { // x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), as mf_gelu_tanh_v
            const __m256 t = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), v), v, _mm256_set1_ps(1.0f));
            r = _mm256_mul_ps(v, mf_sigmoid8(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(1.5957691216057308f), v), t)));
        }
        if (up) r = _mm256_mul_ps(r, _mm256_loadu_ps(up + j));
        _mm256_storeu_ps(y + j, r);
    }
    if (j < n) { // the tail
        float t[8], u[8];
        memcpy(t, x + j, (size_t)(n - j) * sizeof(float));
        if (up) memcpy(u, up + j, (size_t)(n - j) * sizeof(float));
        act_block(kind, t, up ? u : NULL, n - j);
        memcpy(y + j, t, (size_t)(n - j) * sizeof(float));
    }
}
#endif

// Whether act_block_avx2 runs here (not for erf GELU).
static bool act_avx2(int kind) {
#if MF_CPU_AVX2_KERNELS
    return kind != MF_ACT_GELU_ERF && mf_cpu_avx2();
#else
    (void)kind;
    return false;
#endif
}

// x[0..n) = act(x) (* up) in the kernel set that runs here (fast: act_avx2).
static void act_run(bool fast, int kind, float *x, const float *up, int64_t n) {
#if MF_CPU_AVX2_KERNELS
    if (fast) {
        act_block_avx2(kind, x, x, up, n);
        return;
    }
#else
    (void)fast;
#endif
    act_block(kind, x, up, n);
}

mf_status mf_cpu_act(mf_backend *be, const mf_act_args *p) {
    (void)be;
    const int64_t rows = p->x.shape[0], n = p->x.shape[1];
    const mf_tensor *up = p->up;
    const int kind = (int)p->kind;
    const bool fast = act_avx2(kind);
#if MF_CPU_AVX2_KERNELS
    const bool direct = fast && p->x.dtype == MF_DTYPE_F32 && p->y.dtype == MF_DTYPE_F32 &&
                        (!up || up->dtype == MF_DTYPE_F32); // rows read and written in place, no staging
#endif
#pragma omp parallel for schedule(static) if (rows > 1 && rows * n >= MF_CPU_PAR_ELEMS)
    for (int64_t r = 0; r < rows; r++) {
        float xb[kBlk], ub[kBlk];
#if MF_CPU_AVX2_KERNELS
        if (direct) {
            float *y = (float *)p->y.data + r * p->y.stride[0];
            act_block_avx2(kind, y, (const float *)p->x.data + r * p->x.stride[0],
                           up ? (const float *)up->data + r * up->stride[0] : NULL, n);
            continue;
        }
#endif
        const int64_t xo = r * p->x.stride[0], yo = r * p->y.stride[0], uo = up ? r * up->stride[0] : 0;
        for (int64_t j0 = 0; j0 < n; j0 += kBlk) {
            const int64_t nb = n - j0 < kBlk ? n - j0 : kBlk;
            mf_cpu_to_f32(xb, p->x.data, p->x.dtype, xo + j0, nb);
            if (up) mf_cpu_to_f32(ub, up->data, up->dtype, uo + j0, nb);
            act_run(fast, kind, xb, up ? ub : NULL, nb);
            mf_cpu_from_f32(p->y.data, p->y.dtype, yo + j0, xb, nb);
        }
    }
    return MF_OK;
}
