// Internal: a matrix view's last two dims in BLAS terms, for src/ops/gemm.c
// (validation) and both GEMM backends (src/cpu/gemm.c, src/cuda/gemm/gemm.cu).
// Plain C, also compiled as CUDA C++ (host side).
#ifndef MF_KERNELS_MAT_LAYOUT_H
#define MF_KERNELS_MAT_LAYOUT_H

#include <stdbool.h>
#include <string.h>

#include "core/error.h"
#include "minfer/tensor.h"

typedef struct {
    bool col_major; // false: rows are contiguous (stride[-1] == 1); true: stride[-2] == 1
    int64_t ld;     // leading dimension (elements between rows, or between cols when col_major)
    int64_t batch_stride; // stride of dim 0 for a 3-D view, 0 if it has batch 1 or is 2-D
} mf_mat_layout;

// Fails with MF_ERR_UNSUPPORTED when neither of the last two dims has unit
// stride or when ld would be smaller than the contiguous extent.
static inline mf_status mf_mat_layout_of(const mf_tensor *t, const char *op, const char *name, mf_mat_layout *out) {
    int r = t->ndim - 2, c = t->ndim - 1;
    int64_t rows = t->shape[r], cols = t->shape[c];
    memset(out, 0, sizeof *out);
    if (t->ndim == 3 && t->shape[0] > 1) out->batch_stride = t->stride[0];
    // A size-1 dim's stride is meaningless: prefer row-major when it fits.
    if (t->stride[c] == 1 || cols == 1) {
        out->col_major = false;
        out->ld = rows > 1 ? t->stride[r] : (cols > 1 ? cols : 1);
        if (out->ld >= (cols > 1 ? cols : 1)) return MF_OK;
    }
    if (t->stride[r] == 1 || rows == 1) {
        out->col_major = true;
        out->ld = cols > 1 ? t->stride[c] : (rows > 1 ? rows : 1);
        if (out->ld >= (rows > 1 ? rows : 1)) return MF_OK;
    }
    return mf_fail(MF_ERR_UNSUPPORTED,
                   "%s: %s strides (%lld, %lld) for shape (%lld, %lld): need a unit stride in one of the last "
                   "two dims and non-overlapping rows/cols",
                   op, name, (long long)t->stride[r], (long long)t->stride[c], (long long)rows, (long long)cols);
}

#endif // MF_KERNELS_MAT_LAYOUT_H
