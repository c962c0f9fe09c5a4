// mf_rope: argument validation, then the backend's in-place rotary embedding.
#include "ops/check.h"
#include "ops/overlap.h"

// q or k: (n_tokens, heads, head_dim), float, unit stride along head_dim,
// elements that do not alias each other (the rotation is in place).
static mf_status check_qk(const mf_backend *be, const mf_tensor *t, const char *name) {
    static const char op[] = "rope";
    MF_TRY(mf_check_on(be, t, op, name));
    MF_TRY(mf_check_float(t, op, name));
    if (t->ndim != 3)
        return mf_fail(MF_ERR_INVALID_ARG, "rope: %s has %d dims (want 3: (n_tokens, heads, head_dim))", name,
                       t->ndim);
    if (t->stride[2] != 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "rope: %s stride[2] = %lld (want 1: head_dim must be contiguous)", name,
                       (long long)t->stride[2]);
    MF_TRY(mf_check_no_self_overlap(t, op, name));
    return MF_OK;
}

mf_status mf_rope(mf_backend *be, const mf_rope_args *p) {
    static const char op[] = "rope";
    MF_TRY(mf_check_call(be, p, op));
    MF_TRY(mf_check_on(be, &p->q, op, "q"));
    MF_TRY(check_qk(be, &p->q, "q"));
    const int64_t n_tokens = p->q.shape[0], head_dim = p->q.shape[2];
    if (head_dim % 2 != 0 || head_dim < 2)
        return mf_fail(MF_ERR_INVALID_ARG, "rope: head_dim %lld (want even, >= 2)", (long long)head_dim);

    const mf_tensor *f = &p->inv_freq;
    MF_TRY(mf_check_on(be, f, op, "inv_freq"));
    if (f->dtype != MF_DTYPE_F32)
        return mf_fail(MF_ERR_INVALID_ARG, "rope: inv_freq dtype %s (want f32)", mf_dtype_name(f->dtype));
    if (f->ndim != 1)
        return mf_fail(MF_ERR_INVALID_ARG, "rope: inv_freq has %d dims (want 1: (rot_dim / 2))", f->ndim);
    const int64_t half = f->shape[0], rot_dim = 2 * half;
    if (half < 1) return mf_fail(MF_ERR_INVALID_ARG, "rope: inv_freq is empty (rot_dim 0)");
    if (half > 1 && f->stride[0] != 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "rope: inv_freq stride[0] = %lld (want 1: contiguous)",
                       (long long)f->stride[0]);
    if (rot_dim > head_dim)
        return mf_fail(MF_ERR_INVALID_ARG, "rope: rot_dim %lld (2 x inv_freq's %lld entries) > head_dim %lld",
                       (long long)rot_dim, (long long)half, (long long)head_dim);

    const mf_tensor *pos = &p->pos;
    MF_TRY(mf_check_on(be, pos, op, "pos"));
    if (pos->dtype != MF_DTYPE_I32)
        return mf_fail(MF_ERR_INVALID_ARG, "rope: pos dtype %s (want i32)", mf_dtype_name(pos->dtype));
    if (pos->ndim != 1)
        return mf_fail(MF_ERR_INVALID_ARG, "rope: pos has %d dims (want 1: (n_tokens))", pos->ndim);
    if (pos->shape[0] != n_tokens)
        return mf_fail(MF_ERR_INVALID_ARG, "rope: pos has %lld entries, q has n_tokens = %lld",
                       (long long)pos->shape[0], (long long)n_tokens);
    if (n_tokens > 1 && pos->stride[0] != 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "rope: pos stride[0] = %lld (want 1: contiguous)",
                       (long long)pos->stride[0]);
    MF_TRY(mf_check_disjoint(&p->q, pos, op, "q", "pos"));
    MF_TRY(mf_check_disjoint(&p->q, f, op, "q", "inv_freq"));

    if (p->k) {
        MF_TRY(check_qk(be, p->k, "k"));
        if (p->k->shape[0] != n_tokens)
            return mf_fail(MF_ERR_INVALID_ARG, "rope: k has n_tokens = %lld, q has %lld", (long long)p->k->shape[0],
                           (long long)n_tokens);
        if (p->k->shape[2] != head_dim)
            return mf_fail(MF_ERR_INVALID_ARG, "rope: k head_dim %lld != q head_dim %lld", (long long)p->k->shape[2],
                           (long long)head_dim);
        // Not even the same view: it would be rotated twice.
        if (!mf_views_disjoint(&p->q, p->k))
            return mf_fail(MF_ERR_INVALID_ARG, "rope: q and k overlap in memory (both are rotated in place)");
        MF_TRY(mf_check_disjoint(p->k, pos, op, "k", "pos"));
        MF_TRY(mf_check_disjoint(p->k, f, op, "k", "inv_freq"));
    }
    const int64_t heads = p->q.shape[1] + (p->k ? p->k->shape[1] : 0);
    if (n_tokens == 0 || heads == 0) return MF_OK;
    return mf_dispatch_rope(be, p);
}
