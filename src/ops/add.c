// mf_add: argument validation, then the backend's elementwise add/scale.
#include "ops/check.h"

mf_status mf_add(mf_backend *be, const mf_add_args *p) {
    static const char op[] = "add";
    MF_TRY(mf_check_call(be, p, op));
    MF_TRY(mf_check_on(be, &p->a, op, "a"));
    MF_TRY(mf_check_on(be, &p->y, op, "y"));
    MF_TRY(mf_check_float(&p->a, op, "a"));
    MF_TRY(mf_check_float(&p->y, op, "y"));
    if (!mf_tensor_is_contiguous(&p->a))
        return mf_fail(MF_ERR_UNSUPPORTED, "add: a must be contiguous (stride[0]=%lld)", (long long)p->a.stride[0]);
    if (!mf_tensor_is_contiguous(&p->y))
        return mf_fail(MF_ERR_UNSUPPORTED, "add: y must be contiguous (stride[0]=%lld)", (long long)p->y.stride[0]);
    int64_t n = mf_tensor_numel(&p->a);
    if (mf_tensor_numel(&p->y) != n)
        return mf_fail(MF_ERR_INVALID_ARG, "add: y has %lld elements, a has %lld", (long long)mf_tensor_numel(&p->y),
                       (long long)n);
    MF_TRY(mf_check_alias(&p->y, &p->a, op, "y", "a"));
    if (p->b) {
        MF_TRY(mf_check_on(be, p->b, op, "b"));
        MF_TRY(mf_check_float(p->b, op, "b"));
        if (!mf_tensor_is_contiguous(p->b))
            return mf_fail(MF_ERR_UNSUPPORTED, "add: b must be contiguous (stride[0]=%lld)", (long long)p->b->stride[0]);
        int64_t nb = mf_tensor_numel(p->b);
        if (nb == 0 ? n != 0 : n % nb != 0)
            return mf_fail(MF_ERR_INVALID_ARG, "add: b has %lld elements, which does not divide a's %lld",
                           (long long)nb, (long long)n);
        if (nb == n) {
            MF_TRY(mf_check_alias(&p->y, p->b, op, "y", "b"));
        } else {
            MF_TRY(mf_check_disjoint(&p->y, p->b, op, "y", "b (broadcast)"));
        }
    }
    if (n == 0) return MF_OK;
    return mf_dispatch_add(be, p);
}
