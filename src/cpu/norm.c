// CPU fused residual add + RMSNorm / LayerNorm: one row per OpenMP iteration;
// the row's sum is kept in f32 scratch so that x, residual, sum_out and y may
// alias. Statistics accumulate in double (cheap here, exact enough to be the
// reference the CUDA kernels are compared against).
#include <math.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/alloc.h"
#include "cpu/cpu.h"
#include "core/error.h"

mf_status mf_cpu_add_norm(mf_backend *be, const mf_norm_args *p) {
    (void)be;
    int64_t rows = p->x.shape[0], dim = p->x.shape[1];
    int nthreads = 1;
#ifdef _OPENMP
    nthreads = omp_get_max_threads();
#endif
    float *scratch = mf_malloc((size_t)nthreads * (size_t)dim * sizeof(float));
    if (!scratch) return mf_fail(MF_ERR_OOM, "add_norm: out of host memory for row scratch (dim=%lld)", (long long)dim);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        float *s = scratch + (size_t)tid * (size_t)dim;
        int64_t xo = r * p->x.stride[0];
        double sum = 0.0, sq = 0.0;
        for (int64_t i = 0; i < dim; i++) {
            float v = mf_load_f32(p->x.data, p->x.dtype, xo + i);
            if (p->residual) v += mf_load_f32(p->residual->data, p->residual->dtype, r * p->residual->stride[0] + i);
            s[i] = v;
            sum += v;
            sq += (double)v * v;
        }
        double mean = 0.0, var;
        if (p->kind == MF_NORM_LAYER) {
            mean = sum / (double)dim;
            var = 0.0; // two-pass variance: robust when |mean| >> std
            for (int64_t i = 0; i < dim; i++) var += ((double)s[i] - mean) * ((double)s[i] - mean);
            var /= (double)dim;
        } else {
            var = sq / (double)dim;
        }
        double inv = 1.0 / sqrt(var + (double)p->eps);
        if (p->sum_out)
            for (int64_t i = 0; i < dim; i++)
                mf_store_f32(p->sum_out->data, p->sum_out->dtype, r * p->sum_out->stride[0] + i, s[i]);
        for (int64_t i = 0; i < dim; i++) {
            double v = ((double)s[i] - mean) * inv * mf_load_f32(p->weight.data, p->weight.dtype, i);
            if (p->bias) v += mf_load_f32(p->bias->data, p->bias->dtype, i);
            mf_store_f32(p->y.data, p->y.dtype, r * p->y.stride[0] + i, (float)v);
        }
    }
    free(scratch);
    return MF_OK;
}
