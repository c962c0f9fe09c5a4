// mf_argmax: argument validation, then the backend's row argmax.
#include "ops/check.h"

// A 1-D contiguous view of `rows` elements of dtype want.
static mf_status check_out(const mf_tensor *t, mf_dtype want, int64_t rows, const char *name) {
    if (t->dtype != want)
        return mf_fail(MF_ERR_INVALID_ARG, "argmax: %s dtype %s (want %s)", name, mf_dtype_name(t->dtype),
                       mf_dtype_name(want));
    if (t->ndim != 1 || t->shape[0] != rows)
        return mf_fail(MF_ERR_INVALID_ARG, "argmax: %s must be 1-D of x's %lld rows (got %d dims, shape[0]=%lld)", name,
                       (long long)rows, t->ndim, (long long)(t->ndim > 0 ? t->shape[0] : 0));
    if (rows > 1 && t->stride[0] != 1)
        return mf_fail(MF_ERR_INVALID_ARG, "argmax: %s must be contiguous (stride[0]=%lld)", name,
                       (long long)t->stride[0]);
    return MF_OK;
}

mf_status mf_argmax(mf_backend *be, const mf_argmax_args *p) {
    static const char op[] = "argmax";
    MF_TRY(mf_check_call(be, p, op));
    MF_TRY(mf_check_on(be, &p->x, op, "x"));
    MF_TRY(mf_check_on(be, &p->ids, op, "ids"));
    MF_TRY(mf_check_on(be, &p->vals, op, "vals"));
    MF_TRY(mf_check_float(&p->x, op, "x"));
    MF_TRY(mf_check_ndim(&p->x, 2, op, "x"));
    const int64_t rows = p->x.shape[0], n = p->x.shape[1];
    if (n < 1 || n > INT32_MAX)
        return mf_fail(MF_ERR_INVALID_ARG, "argmax: x has %lld columns (want 1 .. %d: ids are i32)", (long long)n,
                       INT32_MAX);
    if (p->x.stride[1] != 1 && n > 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "argmax: x rows must be contiguous (stride[1]=%lld)",
                       (long long)p->x.stride[1]);
    MF_TRY(check_out(&p->ids, MF_DTYPE_I32, rows, "ids"));
    MF_TRY(check_out(&p->vals, MF_DTYPE_F32, rows, "vals"));
    MF_TRY(mf_check_disjoint(&p->ids, &p->x, op, "ids", "x"));
    MF_TRY(mf_check_disjoint(&p->vals, &p->x, op, "vals", "x"));
    MF_TRY(mf_check_disjoint(&p->ids, &p->vals, op, "ids", "vals"));
    if (rows == 0) return MF_OK;
    return mf_dispatch_argmax(be, p);
}
