#include <stdio.h>

#include "ops/check.h"
#include "ops/overlap.h"

mf_status mf_check_call(const mf_backend *be, const void *args, const char *op) {
    if (!be) return mf_fail(MF_ERR_INVALID_ARG, "%s: backend is NULL", op);
    if (!args) return mf_fail(MF_ERR_INVALID_ARG, "%s: args is NULL", op);
    return MF_OK;
}

mf_status mf_check_on(const mf_backend *be, const mf_tensor *t, const char *op, const char *name) {
    // "op: name" is formatted only for a failure's message: this runs for
    // every tensor of every op (a decode step of the default model: ~300
    // snprintf calls, 1.5% of its time in `perf`).
    if (mf_tensor_check(t, name) != MF_OK) {
        char what[96];
        snprintf(what, sizeof what, "%s: %s", op, name);
        return mf_tensor_check(t, what);
    }
    if (t->device != be->device)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: %s is on %s but the backend is %s", op, name,
                       mf_device_name(t->device), be->name);
    return MF_OK;
}

mf_status mf_check_float(const mf_tensor *t, const char *op, const char *name) {
    if (t->dtype != MF_DTYPE_F32 && t->dtype != MF_DTYPE_F16 && t->dtype != MF_DTYPE_BF16)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: %s dtype %s (want f32, f16 or bf16)", op, name,
                       mf_dtype_name(t->dtype));
    return MF_OK;
}

mf_status mf_check_ndim(const mf_tensor *t, int32_t want, const char *op, const char *name) {
    if (t->ndim != want)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: %s has %d dims (want %d)", op, name, t->ndim, want);
    return MF_OK;
}

static bool overlaps(const mf_tensor *a, const mf_tensor *b) {
    int64_t na = mf_tensor_span_bytes(a), nb = mf_tensor_span_bytes(b);
    if (na == 0 || nb == 0) return false;
    const char *pa = a->data, *pb = b->data;
    return pa < pb + nb && pb < pa + na;
}

mf_status mf_check_alias(const mf_tensor *a, const mf_tensor *b, const char *op, const char *na,
                         const char *nb) {
    if (overlaps(a, b) && !mf_views_same(a, b))
        return mf_fail(MF_ERR_INVALID_ARG, "%s: %s and %s overlap in memory without being the same view", op,
                       na, nb);
    return MF_OK;
}

mf_status mf_check_disjoint(const mf_tensor *a, const mf_tensor *b, const char *op, const char *na,
                            const char *nb) {
    if (overlaps(a, b)) return mf_fail(MF_ERR_INVALID_ARG, "%s: %s and %s overlap in memory", op, na, nb);
    return MF_OK;
}
