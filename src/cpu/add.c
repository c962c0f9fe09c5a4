// CPU elementwise y = alpha * a + beta * b (b broadcast over leading elements).
#include "cpu/cpu.h"

mf_status mf_cpu_add(mf_backend *be, const mf_add_args *p) {
    (void)be;
    int64_t n = mf_tensor_numel(&p->a);
    int64_t nb = p->b ? mf_tensor_numel(p->b) : 1;
#pragma omp parallel for schedule(static) if (n >= 32768)
    for (int64_t i = 0; i < n; i++) {
        float v = p->alpha * mf_load_f32(p->a.data, p->a.dtype, i);
        if (p->b) v += p->beta * mf_load_f32(p->b->data, p->b->dtype, i % nb);
        mf_store_f32(p->y.data, p->y.dtype, i, v);
    }
    return MF_OK;
}
