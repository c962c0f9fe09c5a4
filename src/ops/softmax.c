// mf_softmax: argument validation, then the backend's fused scale + mask + softmax.
#include <math.h>

#include "ops/check.h"
#include "ops/overlap.h"
#include "kernels/softmax_geom.h"

static const char *dim_name(int nd, int d) {
    static const char *n4[4] = {"batch", "heads", "q_len", "k_len"};
    static const char *n2[2] = {"rows", "cols"};
    return nd == 4 ? n4[d] : n2[d];
}

static mf_status check_key_lens(const mf_backend *be, const mf_softmax_args *p, int64_t batch) {
    static const char op[] = "softmax";
    const mf_tensor *kl = p->key_lens;
    MF_TRY(mf_check_on(be, kl, op, "key_lens"));
    if (kl->dtype != MF_DTYPE_I32)
        return mf_fail(MF_ERR_INVALID_ARG, "softmax: key_lens dtype %s (want i32)", mf_dtype_name(kl->dtype));
    if (kl->ndim != 1)
        return mf_fail(MF_ERR_INVALID_ARG, "softmax: key_lens has %d dims (want 1: (batch))", kl->ndim);
    if (kl->shape[0] != batch) {
        if (p->x.ndim == 2)
            return mf_fail(MF_ERR_INVALID_ARG,
                           "softmax: key_lens has %lld entries but x is 2-D (batch 1); pass x as a 4-D "
                           "(batch, heads, q_len, k_len) view for per-batch key lengths",
                           (long long)kl->shape[0]);
        return mf_fail(MF_ERR_INVALID_ARG, "softmax: key_lens has %lld entries (want batch = %lld)",
                       (long long)kl->shape[0], (long long)batch);
    }
    MF_TRY(mf_check_disjoint(&p->y, kl, op, "y", "key_lens"));
    return MF_OK;
}

static mf_status check_bias(const mf_backend *be, const mf_softmax_args *p) {
    static const char op[] = "softmax";
    const mf_tensor *b = p->bias;
    int nd = p->x.ndim;
    MF_TRY(mf_check_on(be, b, op, "bias"));
    MF_TRY(mf_check_float(b, op, "bias"));
    if (b->ndim != nd)
        return mf_fail(MF_ERR_INVALID_ARG, "softmax: bias has %d dims (want %d, like x; size-1 dims broadcast)",
                       b->ndim, nd);
    for (int d = 0; d < nd; d++)
        if (b->shape[d] != p->x.shape[d] && b->shape[d] != 1)
            return mf_fail(MF_ERR_INVALID_ARG,
                           "softmax: bias shape[%d] (%s) = %lld is not broadcastable to x's %lld (want %lld or 1)", d,
                           dim_name(nd, d), (long long)b->shape[d], (long long)p->x.shape[d],
                           (long long)p->x.shape[d]);
    if (b->shape[nd - 1] > 1 && b->stride[nd - 1] > 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "softmax: bias stride[-1] = %lld (want 1, or 0 to broadcast along keys)",
                       (long long)b->stride[nd - 1]);
    MF_TRY(mf_check_disjoint(&p->y, b, op, "y", "bias"));
    return MF_OK;
}

mf_status mf_softmax(mf_backend *be, const mf_softmax_args *p) {
    static const char op[] = "softmax";
    MF_TRY(mf_check_call(be, p, op));
    MF_TRY(mf_check_on(be, &p->x, op, "x"));
    MF_TRY(mf_check_on(be, &p->y, op, "y"));
    MF_TRY(mf_check_float(&p->x, op, "x"));
    MF_TRY(mf_check_float(&p->y, op, "y"));
    int nd = p->x.ndim;
    if (nd != 2 && nd != 4)
        return mf_fail(MF_ERR_INVALID_ARG, "softmax: x has %d dims (want 2: (rows, cols) or 4: (batch, heads, q_len, k_len))",
                       nd);
    MF_TRY(mf_check_ndim(&p->y, nd, op, "y"));
    for (int d = 0; d < nd; d++)
        if (p->y.shape[d] != p->x.shape[d])
            return mf_fail(MF_ERR_INVALID_ARG, "softmax: y shape[%d] (%s) = %lld != x's %lld", d, dim_name(nd, d),
                           (long long)p->y.shape[d], (long long)p->x.shape[d]);
    int64_t cols = p->x.shape[nd - 1];
    if (cols > 1 && p->x.stride[nd - 1] != 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "softmax: x stride[-1] = %lld (want 1: rows must be contiguous)",
                       (long long)p->x.stride[nd - 1]);
    if (cols > 1 && p->y.stride[nd - 1] != 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "softmax: y stride[-1] = %lld (want 1: rows must be contiguous)",
                       (long long)p->y.stride[nd - 1]);
    if (!mf_view_no_self_overlap(&p->y))
        return mf_fail(MF_ERR_INVALID_ARG, "softmax: y's strides make its rows overlap (writes would race)");
    MF_TRY(mf_check_alias(&p->y, &p->x, op, "y", "x"));
    if (!isfinite(p->scale))
        return mf_fail(MF_ERR_INVALID_ARG, "softmax: scale %g is not finite", (double)p->scale);
    int64_t batch = nd == 4 ? p->x.shape[0] : 1;
    if (p->key_lens) MF_TRY(check_key_lens(be, p, batch));
    if (p->bias) MF_TRY(check_bias(be, p));
    if (mf_tensor_numel(&p->x) == 0) return MF_OK;
    return mf_dispatch_softmax(be, p);
}
