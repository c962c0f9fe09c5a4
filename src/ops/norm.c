// mf_add_norm: argument validation, then the backend's fused add + norm.
#include <math.h>

#include "ops/check.h"

static mf_status check_rows(const mf_backend *be, const mf_tensor *t, const char *name, int64_t rows,
                            int64_t dim) {
    static const char op[] = "add_norm";
    MF_TRY(mf_check_on(be, t, op, name));
    MF_TRY(mf_check_float(t, op, name));
    MF_TRY(mf_check_ndim(t, 2, op, name));
    if (t->shape[0] != rows || t->shape[1] != dim)
        return mf_fail(MF_ERR_INVALID_ARG, "add_norm: %s shape (%lld, %lld) != x shape (%lld, %lld)", name,
                       (long long)t->shape[0], (long long)t->shape[1], (long long)rows, (long long)dim);
    if (t->stride[1] != 1 && dim > 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "add_norm: %s rows must be contiguous (stride[1]=%lld)", name,
                       (long long)t->stride[1]);
    return MF_OK;
}

static mf_status check_vec(const mf_backend *be, const mf_tensor *t, const char *name, int64_t dim) {
    static const char op[] = "add_norm";
    MF_TRY(mf_check_on(be, t, op, name));
    MF_TRY(mf_check_float(t, op, name));
    if (t->ndim != 1 || t->shape[0] != dim || !mf_tensor_is_contiguous(t))
        return mf_fail(MF_ERR_INVALID_ARG, "add_norm: %s must be contiguous (dim=%lld), got %d dims, shape[0]=%lld, stride[0]=%lld",
                       name, (long long)dim, t->ndim, (long long)t->shape[0], (long long)t->stride[0]);
    return MF_OK;
}

mf_status mf_add_norm(mf_backend *be, const mf_norm_args *p) {
    static const char op[] = "add_norm";
    MF_TRY(mf_check_call(be, p, op));
    MF_TRY(mf_check_on(be, &p->x, op, "x"));
    MF_TRY(mf_check_ndim(&p->x, 2, op, "x"));
    int64_t rows = p->x.shape[0], dim = p->x.shape[1];
    if (dim < 1) return mf_fail(MF_ERR_INVALID_ARG, "add_norm: dim %lld < 1", (long long)dim);
    MF_TRY(check_rows(be, &p->x, "x", rows, dim));
    MF_TRY(check_rows(be, &p->y, "y", rows, dim));
    MF_TRY(mf_check_alias(&p->y, &p->x, op, "y", "x"));
    if (p->residual) {
        MF_TRY(check_rows(be, p->residual, "residual", rows, dim));
        MF_TRY(mf_check_alias(p->residual, &p->x, op, "residual", "x"));
        MF_TRY(mf_check_alias(&p->y, p->residual, op, "y", "residual"));
    }
    if (p->sum_out) {
        MF_TRY(check_rows(be, p->sum_out, "sum_out", rows, dim));
        MF_TRY(mf_check_alias(p->sum_out, &p->x, op, "sum_out", "x"));
        MF_TRY(mf_check_alias(p->sum_out, &p->y, op, "sum_out", "y"));
        if (p->residual) MF_TRY(mf_check_alias(p->sum_out, p->residual, op, "sum_out", "residual"));
    }
    if (p->kind != MF_NORM_RMS && p->kind != MF_NORM_LAYER)
        return mf_fail(MF_ERR_INVALID_ARG, "add_norm: invalid norm kind %d", (int)p->kind);
    MF_TRY(check_vec(be, &p->weight, "weight", dim));
    if (p->bias) {
        if (p->kind != MF_NORM_LAYER)
            return mf_fail(MF_ERR_INVALID_ARG, "add_norm: bias given for RMSNorm (LayerNorm only)");
        MF_TRY(check_vec(be, p->bias, "bias", dim));
    }
    if (!(p->eps >= 0.0f) || !isfinite(p->eps))
        return mf_fail(MF_ERR_INVALID_ARG, "add_norm: eps %g must be finite and >= 0", (double)p->eps);
    if (rows == 0) return MF_OK;
    return mf_dispatch_add_norm(be, p);
}
