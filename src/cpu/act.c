// CPU activations (mf_act): y = act(x) (* up), f32 math with src/kernels/act_math.h's
// formulas (silu and tanh GELU through the vectorising exp of
// src/cpu/vmath.h, erf GELU through libm's erfcf). One row per OpenMP
// iteration, in blocks of kBlk columns converted to f32; a block is read
// before it is written, so y may be x's or up's view.
#include "cpu/cpu.h"
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

mf_status mf_cpu_act(mf_backend *be, const mf_act_args *p) {
    (void)be;
    const int64_t rows = p->x.shape[0], n = p->x.shape[1];
    const mf_tensor *up = p->up;
    const int kind = (int)p->kind;
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        float xb[kBlk], ub[kBlk];
        const int64_t xo = r * p->x.stride[0], yo = r * p->y.stride[0], uo = up ? r * up->stride[0] : 0;
        for (int64_t j0 = 0; j0 < n; j0 += kBlk) {
            const int64_t nb = n - j0 < kBlk ? n - j0 : kBlk;
            mf_cpu_to_f32(xb, p->x.data, p->x.dtype, xo + j0, nb);
            if (up) mf_cpu_to_f32(ub, up->data, up->dtype, uo + j0, nb);
            act_block(kind, xb, up ? ub : NULL, nb);
            mf_cpu_from_f32(p->y.data, p->y.dtype, yo + j0, xb, nb);
        }
    }
    return MF_OK;
}
