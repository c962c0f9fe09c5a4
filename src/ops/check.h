// Internal: argument checks shared by the public ops (src/ops/*.c).
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

#ifdef __cplusplus
}
#endif
#endif // MF_OPS_CHECK_H
