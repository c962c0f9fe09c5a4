// CPU row argmax (mf_argmax): one pass per row in index order, so "the first
// NaN / +inf" and "the lowest index of the maximum" fall out of the scan.
#include <math.h>

#include "cpu/cpu.h"

mf_status mf_cpu_argmax(mf_backend *be, const mf_argmax_args *p) {
    (void)be;
    const int64_t rows = p->x.shape[0], n = p->x.shape[1], rs = p->x.stride[0];
    int32_t *ids = p->ids.data;
    float *vals = p->vals.data;
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t best = -1;
        float vmax = -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            const float v = mf_load_f32(p->x.data, p->x.dtype, r * rs + i);
            if (isnan(v) || v == INFINITY) { // poisoned row: name the first bad value
                best = i, vmax = NAN;
                break;
            }
            if (v > vmax) best = i, vmax = v; // strict: ties keep the lower index
        }
        ids[r] = (int32_t)best;
        vals[r] = vmax == 0.0f ? 0.0f : vmax; // -0.0 as +0.0, as the CUDA kernel's ordered keys give it
    }
    return MF_OK;
}
