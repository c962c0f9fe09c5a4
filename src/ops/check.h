// Internal: argument checks shared by the public ops (src/ops/*.c) and the
// matrix-layout helper shared by the GEMM backends.
#ifndef MF_OPS_CHECK_H
#define MF_OPS_CHECK_H

#include "backend.h"
#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

// be non-NULL, args non-NULL.
mf_status mf_check_call(const mf_backend *be, const void *args, const char *op);
// A valid view with data on be's device; `name` names it in messages.
mf_status mf_check_on(const mf_backend *be, const mf_tensor *t, const char *op, const char *name);
// dtype is f32, f16 or bf16.
mf_status mf_check_float(const mf_tensor *t, const char *op, const char *name);
// ndim equals want.
mf_status mf_check_ndim(const mf_tensor *t, int32_t want, const char *op, const char *name);
// Two views either do not overlap in memory or are the same view
// (same data, dtype, shape and strides): in-place is fine, partial overlap is not.
mf_status mf_check_alias(const mf_tensor *a, const mf_tensor *b, const char *op, const char *na,
                         const char *nb);
// Two views must not overlap at all.
mf_status mf_check_disjoint(const mf_tensor *a, const mf_tensor *b, const char *op, const char *na,
                            const char *nb);

// A matrix view's last two dims (rows, cols) in BLAS terms.
typedef struct {
    bool col_major; // false: rows are contiguous (stride[-1] == 1); true: stride[-2] == 1
    int64_t ld;     // leading dimension (elements between rows, or between cols when col_major)
    int64_t batch_stride; // stride of dim 0 for a 3-D view, 0 if it has batch 1 or is 2-D
} mf_mat_layout;

// Fails with MF_ERR_UNSUPPORTED when neither of the last two dims has unit
// stride or when ld would be smaller than the contiguous extent.
mf_status mf_mat_layout_of(const mf_tensor *t, const char *op, const char *name, mf_mat_layout *out);

#ifdef __cplusplus
}
#endif
#endif // MF_OPS_CHECK_H
