// mf_embed: argument validation, then the backend's embedding lookup.
#include "ops/check.h"

mf_status mf_embed(mf_backend *be, const mf_embed_args *p) {
    static const char op[] = "embed";
    MF_TRY(mf_check_call(be, p, op));
    MF_TRY(mf_check_on(be, &p->ids, op, "ids"));
    MF_TRY(mf_check_on(be, &p->table, op, "table"));
    MF_TRY(mf_check_on(be, &p->y, op, "y"));
    if (p->ids.dtype != MF_DTYPE_I32)
        return mf_fail(MF_ERR_INVALID_ARG, "embed: ids dtype %s (want i32)", mf_dtype_name(p->ids.dtype));
    if (p->ids.ndim != 1 || !mf_tensor_is_contiguous(&p->ids))
        return mf_fail(MF_ERR_INVALID_ARG, "embed: ids must be 1-D contiguous (got %d dims, stride[0]=%lld)",
                       p->ids.ndim, (long long)p->ids.stride[0]);
    MF_TRY(mf_check_float(&p->table, op, "table"));
    MF_TRY(mf_check_float(&p->y, op, "y"));
    MF_TRY(mf_check_ndim(&p->table, 2, op, "table"));
    MF_TRY(mf_check_ndim(&p->y, 2, op, "y"));
    int64_t n = p->ids.shape[0], vocab = p->table.shape[0], dim = p->table.shape[1];
    if (vocab < 1 || dim < 1)
        return mf_fail(MF_ERR_INVALID_ARG, "embed: table shape (%lld, %lld) is empty", (long long)vocab,
                       (long long)dim);
    if (p->y.shape[0] != n || p->y.shape[1] != dim)
        return mf_fail(MF_ERR_INVALID_ARG, "embed: y shape (%lld, %lld) != (n=%lld, dim=%lld)",
                       (long long)p->y.shape[0], (long long)p->y.shape[1], (long long)n, (long long)dim);
    if (p->table.stride[1] != 1 && dim > 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "embed: table rows must be contiguous (stride[1]=%lld)",
                       (long long)p->table.stride[1]);
    if (p->y.stride[1] != 1 && dim > 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "embed: y rows must be contiguous (stride[1]=%lld)",
                       (long long)p->y.stride[1]);
    MF_TRY(mf_check_disjoint(&p->y, &p->table, op, "y", "table"));
    MF_TRY(mf_check_disjoint(&p->y, &p->ids, op, "y", "ids"));
    if (n == 0) return MF_OK;
    return mf_dispatch_embed(be, p);
}
