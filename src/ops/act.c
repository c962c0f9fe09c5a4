// mf_act: argument validation, then the backend's (gated) activation.
#include "ops/check.h"
#include "ops/overlap.h"

static mf_status check_rows(const mf_backend *be, const mf_tensor *t, const char *name, int64_t rows, int64_t n) {
    static const char op[] = "act";
    MF_TRY(mf_check_on(be, t, op, name));
    MF_TRY(mf_check_float(t, op, name));
    MF_TRY(mf_check_ndim(t, 2, op, name));
    if (t->shape[0] != rows || t->shape[1] != n)
        return mf_fail(MF_ERR_INVALID_ARG, "act: %s shape (%lld, %lld) != x shape (%lld, %lld)", name,
                       (long long)t->shape[0], (long long)t->shape[1], (long long)rows, (long long)n);
    if (n > 1 && t->stride[1] != 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "act: %s rows must be contiguous (stride[1]=%lld)", name,
                       (long long)t->stride[1]);
    return MF_OK;
}

mf_status mf_act(mf_backend *be, const mf_act_args *p) {
    static const char op[] = "act";
    MF_TRY(mf_check_call(be, p, op));
    MF_TRY(mf_check_on(be, &p->x, op, "x"));
    MF_TRY(mf_check_ndim(&p->x, 2, op, "x"));
    const int64_t rows = p->x.shape[0], n = p->x.shape[1];
    MF_TRY(check_rows(be, &p->x, "x", rows, n));
    MF_TRY(check_rows(be, &p->y, "y", rows, n));
    if (p->kind != MF_ACT_SILU && p->kind != MF_ACT_GELU_TANH && p->kind != MF_ACT_GELU_ERF)
        return mf_fail(MF_ERR_INVALID_ARG, "act: invalid activation kind %d", (int)p->kind);
    MF_TRY(mf_check_no_self_overlap(&p->y, op, "y"));
    // y may be x's (or up's) view: each element is read before it is written,
    // by the same thread. x and up are only read: they may overlap at will.
    MF_TRY(mf_check_apart(&p->y, &p->x, op, "y", "x"));
    if (p->up) {
        MF_TRY(check_rows(be, p->up, "up", rows, n));
        MF_TRY(mf_check_apart(&p->y, p->up, op, "y", "up"));
    }
    if (rows == 0 || n == 0) return MF_OK;
    return mf_dispatch_act(be, p);
}
