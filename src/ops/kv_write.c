// mf_kv_write: argument validation, then the backend's KV-cache scatter with
// fused RoPE. Slot and position values live on the device: the backends
// check them (CPU: before writing anything; CUDA: bad rows are skipped and
// reported at the next sync).
#include "ops/check.h"
#include "ops/overlap.h"

static const char op[] = "kv_write";

static mf_status check_rows(const mf_backend *be, const mf_tensor *t, const char *name, int nd, const char *dims) {
    MF_TRY(mf_check_on(be, t, op, name));
    MF_TRY(mf_check_float(t, op, name));
    if (t->ndim != nd)
        return mf_fail(MF_ERR_INVALID_ARG, "kv_write: %s has %d dims (want %d: %s)", name, t->ndim, nd, dims);
    if (t->shape[nd - 1] > 1 && t->stride[nd - 1] != 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "kv_write: %s stride[-1] = %lld (want 1: head_dim must be contiguous)",
                       name, (long long)t->stride[nd - 1]);
    return MF_OK;
}

static mf_status check_index(const mf_backend *be, const mf_tensor *t, const char *name, int64_t n) {
    MF_TRY(mf_check_on(be, t, op, name));
    if (t->dtype != MF_DTYPE_I32)
        return mf_fail(MF_ERR_INVALID_ARG, "kv_write: %s dtype %s (want i32)", name, mf_dtype_name(t->dtype));
    if (t->ndim != 1)
        return mf_fail(MF_ERR_INVALID_ARG, "kv_write: %s has %d dims (want 1: (n_tokens))", name, t->ndim);
    if (t->shape[0] != n)
        return mf_fail(MF_ERR_INVALID_ARG, "kv_write: %s has %lld entries (want n_tokens = %lld)", name,
                       (long long)t->shape[0], (long long)n);
    if (n > 1 && t->stride[0] != 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "kv_write: %s stride[0] = %lld (want 1: contiguous)", name,
                       (long long)t->stride[0]);
    return MF_OK;
}

mf_status mf_kv_write(mf_backend *be, const mf_kv_write_args *p) {
    MF_TRY(mf_check_call(be, p, op));
    static const char kd[] = "(n_tokens, n_kv_heads, head_dim)";
    const char *cd = p->slot_mapping ? "(n_blocks, block_size, n_kv_heads, head_dim)" : "(n_slots, max_len, n_kv_heads, head_dim)";
    MF_TRY(check_rows(be, &p->k, "k", 3, kd));
    MF_TRY(check_rows(be, &p->v, "v", 3, kd));
    MF_TRY(check_rows(be, &p->k_cache, "k_cache", 4, cd));
    MF_TRY(check_rows(be, &p->v_cache, "v_cache", 4, cd));
    for (int d = 0; d < 3; d++)
        if (p->v.shape[d] != p->k.shape[d])
            return mf_fail(MF_ERR_INVALID_ARG, "kv_write: v shape[%d] = %lld != k's %lld", d, (long long)p->v.shape[d],
                           (long long)p->k.shape[d]);
    for (int d = 0; d < 4; d++)
        if (p->v_cache.shape[d] != p->k_cache.shape[d])
            return mf_fail(MF_ERR_INVALID_ARG, "kv_write: v_cache shape[%d] = %lld != k_cache's %lld", d,
                           (long long)p->v_cache.shape[d], (long long)p->k_cache.shape[d]);
    if (p->v_cache.dtype != p->k_cache.dtype)
        return mf_fail(MF_ERR_INVALID_ARG, "kv_write: v_cache dtype %s != k_cache dtype %s (want one cache dtype)",
                       mf_dtype_name(p->v_cache.dtype), mf_dtype_name(p->k_cache.dtype));
    const int64_t n = p->k.shape[0], KVH = p->k.shape[1], D = p->k.shape[2];
    if (p->k_cache.shape[2] != KVH)
        return mf_fail(MF_ERR_INVALID_ARG, "kv_write: k_cache n_kv_heads %lld != k's %lld",
                       (long long)p->k_cache.shape[2], (long long)KVH);
    if (p->k_cache.shape[3] != D)
        return mf_fail(MF_ERR_INVALID_ARG, "kv_write: k_cache head_dim %lld != k's %lld", (long long)p->k_cache.shape[3],
                       (long long)D);
    if (p->slot_mapping) {
        if (p->slot.data)
            return mf_fail(MF_ERR_INVALID_ARG, "kv_write: both slot and slot_mapping given (paged: slot_mapping only)");
        MF_TRY(check_index(be, p->slot_mapping, "slot_mapping", n));
    } else {
        MF_TRY(check_index(be, &p->slot, "slot", n));
    }
    MF_TRY(check_index(be, &p->pos, "pos", n));

    const mf_tensor *caches[2] = {&p->k_cache, &p->v_cache};
    static const char *const cn[2] = {"k_cache", "v_cache"};
    for (int c = 0; c < 2; c++) MF_TRY(mf_check_no_self_overlap(caches[c], op, cn[c]));
    if (!mf_views_disjoint(&p->k_cache, &p->v_cache))
        return mf_fail(MF_ERR_INVALID_ARG, "kv_write: k_cache and v_cache overlap in memory");
    // Everything read must be apart from everything written.
    const mf_tensor *reads[5] = {&p->k, &p->v, p->slot_mapping ? p->slot_mapping : &p->slot, &p->pos, p->inv_freq};
    static const char *const rn[5] = {"k", "v", "slot", "pos", "inv_freq"};
    for (int c = 0; c < 2; c++)
        for (int r = 0; r < 5; r++)
            if (reads[r] && !mf_views_disjoint(caches[c], reads[r]))
                return mf_fail(MF_ERR_INVALID_ARG, "kv_write: %s and %s overlap in memory", cn[c], rn[r]);

    if (p->inv_freq) {
        const mf_tensor *f = p->inv_freq;
        MF_TRY(mf_check_on(be, f, op, "inv_freq"));
        if (f->dtype != MF_DTYPE_F32)
            return mf_fail(MF_ERR_INVALID_ARG, "kv_write: inv_freq dtype %s (want f32)", mf_dtype_name(f->dtype));
        if (f->ndim != 1)
            return mf_fail(MF_ERR_INVALID_ARG, "kv_write: inv_freq has %d dims (want 1: (rot_dim / 2))", f->ndim);
        const int64_t half = f->shape[0];
        if (half < 1) return mf_fail(MF_ERR_INVALID_ARG, "kv_write: inv_freq is empty (rot_dim 0)");
        if (half > 1 && f->stride[0] != 1)
            return mf_fail(MF_ERR_UNSUPPORTED, "kv_write: inv_freq stride[0] = %lld (want 1: contiguous)",
                           (long long)f->stride[0]);
        if (2 * half > D)
            return mf_fail(MF_ERR_INVALID_ARG, "kv_write: rot_dim %lld (2 x inv_freq's %lld entries) > head_dim %lld",
                           (long long)(2 * half), (long long)half, (long long)D);
    }
    if (p->q) {
        const mf_tensor *q = p->q;
        if (!p->inv_freq)
            return mf_fail(MF_ERR_INVALID_ARG, "kv_write: q given without inv_freq (q is only rotated: pass NULL)");
        MF_TRY(check_rows(be, q, "q", 3, "(n_tokens, n_heads, head_dim)"));
        if (q->shape[0] != n)
            return mf_fail(MF_ERR_INVALID_ARG, "kv_write: q has n_tokens = %lld, k has %lld", (long long)q->shape[0],
                           (long long)n);
        if (q->shape[2] != D)
            return mf_fail(MF_ERR_INVALID_ARG, "kv_write: q head_dim %lld != k head_dim %lld", (long long)q->shape[2],
                           (long long)D);
        MF_TRY(mf_check_no_self_overlap(q, op, "q"));
        for (int r = 0; r < 5; r++)
            if (reads[r] && !mf_views_disjoint(q, reads[r]))
                return mf_fail(MF_ERR_INVALID_ARG, "kv_write: q and %s overlap in memory (q is rotated in place)",
                               rn[r]);
        for (int c = 0; c < 2; c++)
            if (!mf_views_disjoint(q, caches[c]))
                return mf_fail(MF_ERR_INVALID_ARG, "kv_write: q and %s overlap in memory", cn[c]);
    }
    if (n == 0 || (KVH == 0 && (!p->q || p->q->shape[1] == 0))) return MF_OK;
    return mf_dispatch_kv_write(be, p);
}
