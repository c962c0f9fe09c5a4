// CPU fused residual add + RMSNorm / LayerNorm: one row per OpenMP iteration;
// the row's sum is kept in f32 scratch so that x, residual, sum_out and y may
// alias. Statistics accumulate in double (cheap here, exact enough to be the
// reference the CUDA kernels are compared against). Rows are converted to
// f32 whole (src/cpu/copy.c) so that the loops are plain and vectorise.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/alloc.h"
#include "cpu/cpu.h"
#include "cpu/vmath.h"
#include "core/error.h"

// Sums of (s - mean) and of its squares over the row, in double, 8 lanes
// (two 4-double vectors: GCC does not vectorise 8 scalar lanes of double
// here) then a fixed tree: the same bits in both clones (an `omp simd`
// reduction's order follows the vector width).
typedef double v4d __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
MF_CPU_HOT static void row_stats(const float *s, int64_t n, double mean, double *sum, double *sq) {
    const v4d m = {mean, mean, mean, mean};
    v4d a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v4f f0, f1;
        memcpy(&f0, s + i, sizeof f0);
        memcpy(&f1, s + i + 4, sizeof f1);
        const v4d v0 = __builtin_convertvector(f0, v4d) - m, v1 = __builtin_convertvector(f1, v4d) - m;
        a0 += v0, a1 += v1, b0 += v0 * v0, b1 += v1 * v1;
    }
    double a[8], b[8];
    memcpy(a, &a0, sizeof a0), memcpy(a + 4, &a1, sizeof a1);
    memcpy(b, &b0, sizeof b0), memcpy(b + 4, &b1, sizeof b1);
    for (; i < n; i++) {
        const double v = (double)s[i] - mean;
        a[0] += v, b[0] += v * v;
    }
    *sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    *sq = ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
}

// t = (s - mean) inv w (+ bias), in double, rounded once to f32.
MF_CPU_HOT static void row_scale(float *t, const float *s, const float *w, const float *bias, double mean, double inv,
                                 int64_t n) {
    if (bias)
        for (int64_t i = 0; i < n; i++) t[i] = (float)(((double)s[i] - mean) * inv * w[i] + bias[i]);
    else
        for (int64_t i = 0; i < n; i++) t[i] = (float)(((double)s[i] - mean) * inv * w[i]);
}

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
#pragma omp parallel for schedule(static) if (rows > 1 && rows * dim >= MF_CPU_PAR_ELEMS)
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
        double sum, sq, mean = 0.0, var;
        row_stats(s, dim, 0.0, &sum, &sq);
        if (layer) {
            mean = sum / (double)dim; // two-pass variance: robust when |mean| >> std
            row_stats(s, dim, mean, &sum, &var);
            var /= (double)dim;
        } else {
            var = sq / (double)dim;
        }
        const double inv = 1.0 / sqrt(var + (double)p->eps);
        if (p->sum_out) mf_cpu_from_f32(p->sum_out->data, p->sum_out->dtype, r * p->sum_out->stride[0], s, dim);
        row_scale(t, s, w, bias, mean, inv, dim);
        mf_cpu_from_f32(p->y.data, p->y.dtype, r * p->y.stride[0], t, dim);
    }
    free(wb);
    return MF_OK;
}
