// CPU fused residual add + RMSNorm / LayerNorm: one row per OpenMP iteration;
// the row's sum is kept in f32 scratch so that x, residual, sum_out and y may
// alias. Statistics accumulate in double (cheap here, exact enough to be the
// reference the CUDA kernels are compared against). Rows are converted to
// f32 whole (src/cpu/copy.c) so that the loops are plain and vectorise.
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
    // wb: weight and bias as f32 (dim each); then two rows (sum, residual) per thread.
    float *wb = mf_malloc((size_t)(2 + 2 * (int64_t)nthreads) * (size_t)dim * sizeof(float));
    if (!wb) return mf_fail(MF_ERR_OOM, "add_norm: out of host memory for row scratch (dim=%lld)", (long long)dim);
    float *w = wb, *bias = p->bias ? wb + dim : NULL;
    mf_cpu_to_f32(w, p->weight.data, p->weight.dtype, 0, dim);
    if (bias) mf_cpu_to_f32(bias, p->bias->data, p->bias->dtype, 0, dim);
    const bool layer = p->kind == MF_NORM_LAYER;
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        float *s = wb + (size_t)(2 + 2 * tid) * (size_t)dim, *t = s + dim;
        mf_cpu_to_f32(s, p->x.data, p->x.dtype, r * p->x.stride[0], dim);
        if (p->residual) {
            mf_cpu_to_f32(t, p->residual->data, p->residual->dtype, r * p->residual->stride[0], dim);
            for (int64_t i = 0; i < dim; i++) s[i] += t[i];
        }
        double sum = 0.0, sq = 0.0;
#pragma omp simd reduction(+ : sum, sq)
        for (int64_t i = 0; i < dim; i++) sum += s[i], sq += (double)s[i] * s[i];
        double mean = 0.0, var = 0.0;
        if (layer) {
            mean = sum / (double)dim; // two-pass variance: robust when |mean| >> std
#pragma omp simd reduction(+ : var)
            for (int64_t i = 0; i < dim; i++) var += ((double)s[i] - mean) * ((double)s[i] - mean);
            var /= (double)dim;
        } else {
            var = sq / (double)dim;
        }
        const double inv = 1.0 / sqrt(var + (double)p->eps);
        if (p->sum_out) mf_cpu_from_f32(p->sum_out->data, p->sum_out->dtype, r * p->sum_out->stride[0], s, dim);
        if (bias)
            for (int64_t i = 0; i < dim; i++) t[i] = (float)(((double)s[i] - mean) * inv * w[i] + bias[i]);
        else
            for (int64_t i = 0; i < dim; i++) t[i] = (float)(((double)s[i] - mean) * inv * w[i]);
        mf_cpu_from_f32(p->y.data, p->y.dtype, r * p->y.stride[0], t, dim);
    }
    free(wb);
    return MF_OK;
}
