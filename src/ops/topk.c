// mf_topk: argument validation, then the backend's row top-k with statistics.
#include <math.h>

#include "ops/check.h"

// A contiguous (rows, cols) view of dtype want.
static mf_status check_out(const mf_tensor *t, mf_dtype want, int64_t rows, int64_t cols, const char *name) {
    if (t->dtype != want)
        return mf_fail(MF_ERR_INVALID_ARG, "topk: %s dtype %s (want %s)", name, mf_dtype_name(t->dtype),
                       mf_dtype_name(want));
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
        return mf_fail(MF_ERR_INVALID_ARG, "topk: %s must be (%lld, %lld) (got %d dims, shape %lld x %lld)", name,
                       (long long)rows, (long long)cols, t->ndim, (long long)(t->ndim > 0 ? t->shape[0] : 0),
                       (long long)(t->ndim > 1 ? t->shape[1] : 0));
    if ((cols > 1 && t->stride[1] != 1) || (rows > 1 && t->stride[0] != cols))
        return mf_fail(MF_ERR_INVALID_ARG, "topk: %s must be contiguous (strides %lld, %lld)", name,
                       (long long)t->stride[0], (long long)t->stride[1]);
    return MF_OK;
}

mf_status mf_topk(mf_backend *be, const mf_topk_args *p) {
    static const char op[] = "topk";
    MF_TRY(mf_check_call(be, p, op));
    MF_TRY(mf_check_on(be, &p->x, op, "x"));
    MF_TRY(mf_check_on(be, &p->ids, op, "ids"));
    MF_TRY(mf_check_on(be, &p->vals, op, "vals"));
    MF_TRY(mf_check_on(be, &p->stats, op, "stats"));
    MF_TRY(mf_check_float(&p->x, op, "x"));
    MF_TRY(mf_check_ndim(&p->x, 2, op, "x"));
    const int64_t rows = p->x.shape[0], n = p->x.shape[1];
    if (n < 1 || n > INT32_MAX)
        return mf_fail(MF_ERR_INVALID_ARG, "topk: x has %lld columns (want 1 .. %d: ids are i32)", (long long)n,
                       INT32_MAX);
    if (p->x.stride[1] != 1 && n > 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "topk: x rows must be contiguous (stride[1]=%lld)",
                       (long long)p->x.stride[1]);
    if (p->k < 1 || p->k > MF_TOPK_MAX)
        return mf_fail(MF_ERR_INVALID_ARG, "topk: k %d not in [1, %d] (MF_TOPK_MAX)", (int)p->k, MF_TOPK_MAX);
    if (p->k > n)
        return mf_fail(MF_ERR_INVALID_ARG, "topk: k %d > the %lld columns of x", (int)p->k, (long long)n);
    if (!(p->scale > 0.0f) || isinf(p->scale))
        return mf_fail(MF_ERR_INVALID_ARG, "topk: scale %g not a finite value > 0", (double)p->scale);
    MF_TRY(check_out(&p->ids, MF_DTYPE_I32, rows, p->k, "ids"));
    MF_TRY(check_out(&p->vals, MF_DTYPE_F32, rows, p->k, "vals"));
    MF_TRY(check_out(&p->stats, MF_DTYPE_F32, rows, 2, "stats"));
    MF_TRY(mf_check_disjoint(&p->ids, &p->x, op, "ids", "x"));
    MF_TRY(mf_check_disjoint(&p->vals, &p->x, op, "vals", "x"));
    MF_TRY(mf_check_disjoint(&p->stats, &p->x, op, "stats", "x"));
    MF_TRY(mf_check_disjoint(&p->ids, &p->vals, op, "ids", "vals"));
    MF_TRY(mf_check_disjoint(&p->ids, &p->stats, op, "ids", "stats"));
    MF_TRY(mf_check_disjoint(&p->vals, &p->stats, op, "vals", "stats"));
    if (rows == 0) return MF_OK;
    return mf_dispatch_topk(be, p);
}
