// CPU activations (mf_act): y = act(x) (* up), f32 math from
// src/ops/act_math.h (the same formulas as the CUDA kernel). One row per
// OpenMP iteration; each element is read before it is written, so y may be
// x's or up's view.
#include "cpu/cpu.h"
#include "ops/act_math.h"

mf_status mf_cpu_act(mf_backend *be, const mf_act_args *p) {
    (void)be;
    const int64_t rows = p->x.shape[0], n = p->x.shape[1];
    const mf_tensor *up = p->up;
    const int kind = (int)p->kind;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t xo = r * p->x.stride[0], yo = r * p->y.stride[0], uo = up ? r * up->stride[0] : 0;
        for (int64_t i = 0; i < n; i++) {
            float v = mf_act_apply(kind, mf_load_f32(p->x.data, p->x.dtype, xo + i));
            if (up) v *= mf_load_f32(up->data, up->dtype, uo + i);
            mf_store_f32(p->y.data, p->y.dtype, yo + i, v);
        }
    }
    return MF_OK;
}
