// mf_attention / mf_attention_workspace: argument validation (shapes, dtypes,
// modes, aliasing), then the backend's flash attention. The values of the
// index arrays live on the device: the backends check them (CPU: before
// writing anything; CUDA: in the kernels, reported at the next sync).
#include <math.h>

#include "ops/check.h"
#include "ops/overlap.h"

static const char op[] = "attention";

typedef enum { MODE_FIXED = 0, MODE_PACKED = 1, MODE_CACHE = 2 } att_mode;
static const char *const mode_names[] = {"fixed", "packed", "cache"};

// An index array: i32, 1-D, contiguous, `want` entries, on be's device, not
// overlapping what the op writes.
static mf_status check_index(const mf_backend *be, const mf_attention_args *p, const mf_tensor *t,
                             const char *name, int64_t want, const char *what) {
    MF_TRY(mf_check_on(be, t, op, name));
    if (t->dtype != MF_DTYPE_I32)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: %s dtype %s (want i32)", name, mf_dtype_name(t->dtype));
    if (t->ndim != 1)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: %s has %d dims (want 1: (%s))", name, t->ndim, what);
    if (t->shape[0] != want)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: %s has %lld entries (want %s = %lld)", name,
                       (long long)t->shape[0], what, (long long)want);
    if (t->shape[0] > 1 && t->stride[0] != 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "attention: %s stride[0] = %lld (want 1: contiguous)", name,
                       (long long)t->stride[0]);
    MF_TRY(mf_check_disjoint(&p->o, t, op, "o", name));
    if (p->lse) MF_TRY(mf_check_disjoint(p->lse, t, op, "lse", name));
    return MF_OK;
}

// block_table: (batch, max_blocks) i32, stride[1] == 1, on be's device, apart from what the op writes.
static mf_status check_table(const mf_backend *be, const mf_attention_args *p) {
    const mf_tensor *t = p->block_table;
    MF_TRY(mf_check_on(be, t, op, "block_table"));
    if (t->dtype != MF_DTYPE_I32)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: block_table dtype %s (want i32)", mf_dtype_name(t->dtype));
    if (t->ndim != 2)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: block_table has %d dims (want 2: (batch, max_blocks))", t->ndim);
    if (t->shape[0] != p->batch)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: block_table has %lld rows (want batch = %d)",
                       (long long)t->shape[0], (int)p->batch);
    if (t->shape[1] < 1)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: block_table has %lld columns (want >= 1)", (long long)t->shape[1]);
    if (t->shape[1] > 1 && t->stride[1] != 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "attention: block_table stride[1] = %lld (want 1)", (long long)t->stride[1]);
    if (t->shape[0] > 1 && t->stride[0] < t->shape[1])
        return mf_fail(MF_ERR_INVALID_ARG, "attention: block_table stride[0] = %lld < its %lld columns (rows overlap)",
                       (long long)t->stride[0], (long long)t->shape[1]);
    MF_TRY(mf_check_disjoint(&p->o, t, op, "o", "block_table"));
    if (p->lse) MF_TRY(mf_check_disjoint(p->lse, t, op, "lse", "block_table"));
    return MF_OK;
}

// q, k, v, o: float, ndim dims, unit stride along head_dim.
static mf_status check_qkvo(const mf_backend *be, const mf_tensor *t, const char *name, int nd, const char *dims) {
    MF_TRY(mf_check_on(be, t, op, name));
    MF_TRY(mf_check_float(t, op, name));
    if (t->ndim != nd)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: %s has %d dims (want %d: %s)", name, t->ndim, nd, dims);
    if (t->shape[nd - 1] > 1 && t->stride[nd - 1] != 1)
        return mf_fail(MF_ERR_UNSUPPORTED, "attention: %s stride[-1] = %lld (want 1: head_dim must be contiguous)",
                       name, (long long)t->stride[nd - 1]);
    return MF_OK;
}

// Everything mf_attention and mf_attention_workspace check; *empty: nothing to compute.
static mf_status check_args(mf_backend *be, const mf_attention_args *p, bool *empty) {
    MF_TRY(mf_check_call(be, p, op));
    att_mode mode;
    if (p->k_lens) {
        mode = MODE_CACHE;
        if (!p->cu_seqlens_q)
            return mf_fail(MF_ERR_INVALID_ARG, "attention: k_lens given (cache mode) but cu_seqlens_q is NULL");
        if (p->cu_seqlens_k)
            return mf_fail(MF_ERR_INVALID_ARG,
                           "attention: both k_lens (cache mode) and cu_seqlens_k (packed mode) given; pass one");
    } else if (p->cu_seqlens_q || p->cu_seqlens_k) {
        mode = MODE_PACKED;
        if (!p->cu_seqlens_q || !p->cu_seqlens_k)
            return mf_fail(MF_ERR_INVALID_ARG,
                           "attention: cu_seqlens_%s given without cu_seqlens_%s (packed mode needs both; cache "
                           "mode: cu_seqlens_q with k_lens)",
                           p->cu_seqlens_q ? "q" : "k", p->cu_seqlens_q ? "k" : "q");
        if (p->slots)
            return mf_fail(MF_ERR_INVALID_ARG, "attention: slots given in packed mode (slots need k_lens: cache mode)");
    } else {
        mode = MODE_FIXED;
        if (p->slots)
            return mf_fail(MF_ERR_INVALID_ARG, "attention: slots given without k_lens and cu_seqlens_q (cache mode)");
    }
    if (p->block_table && mode != MODE_CACHE)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: block_table given in %s mode (a paged cache needs k_lens: cache mode)",
                       mode_names[mode]);
    if (p->block_table && p->slots)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: both slots and block_table given (a paged cache has no slots)");
    const char *mn = mode_names[mode];
    const bool fixed = mode == MODE_FIXED;
    const int qnd = fixed ? 4 : 3, knd = mode == MODE_PACKED ? 3 : 4;
    const char *qdims = fixed ? "(batch, q_len, n_heads, head_dim)" : "(total_q, n_heads, head_dim)";
    const char *kdims = fixed              ? "(batch, k_len, n_kv_heads, head_dim)"
                        : mode == MODE_PACKED ? "(total_k, n_kv_heads, head_dim)"
                        : p->block_table      ? "(n_blocks, block_size, n_kv_heads, head_dim)"
                                              : "(n_slots, max_len, n_kv_heads, head_dim)";
    MF_TRY(check_qkvo(be, &p->q, "q", qnd, qdims));
    MF_TRY(check_qkvo(be, &p->o, "o", qnd, qdims));
    MF_TRY(check_qkvo(be, &p->k, "k", knd, kdims));
    MF_TRY(check_qkvo(be, &p->v, "v", knd, kdims));
    // One dtype for all four, or (CPU) f32 q and o over an f16/bf16 K/V (a 16-bit KV cache).
    const mf_dtype dt = p->q.dtype, kdt = p->k.dtype;
    if (p->o.dtype != dt || p->v.dtype != kdt || (kdt != dt && dt != MF_DTYPE_F32))
        return mf_fail(MF_ERR_INVALID_ARG,
                       "attention: dtypes q %s, k %s, v %s, o %s (want one dtype for all four, or f32 q and o with "
                       "f16/bf16 k and v)",
                       mf_dtype_name(dt), mf_dtype_name(kdt), mf_dtype_name(p->v.dtype), mf_dtype_name(p->o.dtype));
    if (kdt != dt && mf_backend_device(be) != MF_DEVICE_CPU)
        return mf_fail(MF_ERR_UNSUPPORTED,
                       "attention: f32 q and o with %s k and v: the %s backend takes one dtype for all four (a "
                       "16-bit KV cache with f32 activations is the CPU's)", mf_dtype_name(kdt), be->name);
    for (int d = 0; d < qnd; d++)
        if (p->o.shape[d] != p->q.shape[d])
            return mf_fail(MF_ERR_INVALID_ARG, "attention: o shape[%d] = %lld != q's %lld", d, (long long)p->o.shape[d],
                           (long long)p->q.shape[d]);
    for (int d = 0; d < knd; d++)
        if (p->v.shape[d] != p->k.shape[d])
            return mf_fail(MF_ERR_INVALID_ARG, "attention: v shape[%d] = %lld != k's %lld", d, (long long)p->v.shape[d],
                           (long long)p->k.shape[d]);
    const int64_t H = p->q.shape[qnd - 2], D = p->q.shape[qnd - 1];
    const int64_t KVH = p->k.shape[knd - 2], Dk = p->k.shape[knd - 1];
    if (Dk != D)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: k head_dim %lld != q head_dim %lld", (long long)Dk, (long long)D);
    if (D < 1) return mf_fail(MF_ERR_INVALID_ARG, "attention: head_dim %lld (want >= 1)", (long long)D);
    if (KVH < 1) return mf_fail(MF_ERR_INVALID_ARG, "attention: n_kv_heads %lld (want >= 1)", (long long)KVH);
    if (H % KVH != 0)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: n_heads %lld not divisible by n_kv_heads %lld", (long long)H,
                       (long long)KVH);

    // Sequences.
    int64_t total_q = fixed ? p->q.shape[0] * p->q.shape[1] : p->q.shape[0];
    if (fixed) {
        if (p->batch != p->q.shape[0])
            return mf_fail(MF_ERR_INVALID_ARG, "attention: batch %d != q.shape[0] = %lld (fixed mode)", (int)p->batch,
                           (long long)p->q.shape[0]);
        if (p->k.shape[0] != p->q.shape[0])
            return mf_fail(MF_ERR_INVALID_ARG, "attention: k batch %lld != q batch %lld (fixed mode)",
                           (long long)p->k.shape[0], (long long)p->q.shape[0]);
    } else {
        if (p->batch < 0) return mf_fail(MF_ERR_INVALID_ARG, "attention: batch %d (want >= 0)", (int)p->batch);
        if (p->max_q_len < 0)
            return mf_fail(MF_ERR_INVALID_ARG, "attention: max_q_len %lld (want >= 0, %s mode)",
                           (long long)p->max_q_len, mn);
        if (p->max_k_len < 0)
            return mf_fail(MF_ERR_INVALID_ARG, "attention: max_k_len %lld (want >= 0, %s mode)",
                           (long long)p->max_k_len, mn);
        MF_TRY(check_index(be, p, p->cu_seqlens_q, "cu_seqlens_q", (int64_t)p->batch + 1, "batch + 1"));
        if (mode == MODE_PACKED) {
            MF_TRY(check_index(be, p, p->cu_seqlens_k, "cu_seqlens_k", (int64_t)p->batch + 1, "batch + 1"));
        } else {
            MF_TRY(check_index(be, p, p->k_lens, "k_lens", p->batch, "batch"));
            if (p->slots) MF_TRY(check_index(be, p, p->slots, "slots", p->batch, "batch"));
            if (p->block_table) MF_TRY(check_table(be, p));
        }
    }

    // Masks and scalars.
    if (!isfinite(p->scale)) return mf_fail(MF_ERR_INVALID_ARG, "attention: scale %g is not finite", (double)p->scale);
    if (p->window < 0) return mf_fail(MF_ERR_INVALID_ARG, "attention: window %lld (want >= 0)", (long long)p->window);
    if (p->window > 0 && !p->causal)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: window %lld without causal (a sliding window needs causal)",
                       (long long)p->window);
    if (p->num_splits < 0)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: num_splits %d (want >= 0; 0: auto)", (int)p->num_splits);
    if (p->workspace_bytes > 0 && !p->workspace)
        return mf_fail(MF_ERR_INVALID_ARG, "attention: workspace is NULL with workspace_bytes %zu",
                       p->workspace_bytes);

    // lse: (total_q, n_heads) f32 (fixed: (batch, q_len, n_heads)), contiguous.
    if (p->lse) {
        const mf_tensor *l = p->lse;
        MF_TRY(mf_check_on(be, l, op, "lse"));
        if (l->dtype != MF_DTYPE_F32)
            return mf_fail(MF_ERR_INVALID_ARG, "attention: lse dtype %s (want f32)", mf_dtype_name(l->dtype));
        if (l->ndim != qnd - 1)
            return mf_fail(MF_ERR_INVALID_ARG, "attention: lse has %d dims (want %d: %s)", l->ndim, qnd - 1,
                           fixed ? "(batch, q_len, n_heads)" : "(total_q, n_heads)");
        for (int d = 0; d < qnd - 1; d++)
            if (l->shape[d] != p->q.shape[d])
                return mf_fail(MF_ERR_INVALID_ARG, "attention: lse shape[%d] = %lld != q's %lld", d,
                               (long long)l->shape[d], (long long)p->q.shape[d]);
        if (!mf_tensor_is_contiguous(l))
            return mf_fail(MF_ERR_UNSUPPORTED, "attention: lse must be contiguous (row-major)");
    }

    // Aliasing: o is written, so it may share no byte with an input; neither may lse.
    MF_TRY(mf_check_no_self_overlap(&p->o, op, "o"));
    const mf_tensor *ins[3] = {&p->q, &p->k, &p->v};
    static const char *const in_names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        if (!mf_views_disjoint(&p->o, ins[i]))
            return mf_fail(MF_ERR_INVALID_ARG, "attention: o and %s overlap in memory (o must not alias an input)",
                           in_names[i]);
        if (p->lse && !mf_views_disjoint(p->lse, ins[i]))
            return mf_fail(MF_ERR_INVALID_ARG, "attention: lse and %s overlap in memory", in_names[i]);
    }
    if (p->lse) MF_TRY(mf_check_disjoint(&p->o, p->lse, op, "o", "lse"));

    *empty = total_q == 0 || H == 0 || (!fixed && p->batch == 0);
    return MF_OK;
}

mf_status mf_attention(mf_backend *be, const mf_attention_args *p) {
    bool empty = false;
    MF_TRY(check_args(be, p, &empty));
    if (empty) return MF_OK;
    return mf_dispatch_attention(be, p);
}

mf_status mf_attention_workspace(mf_backend *be, const mf_attention_args *p, size_t *bytes) {
    if (!bytes) return mf_fail(MF_ERR_INVALID_ARG, "attention_workspace: bytes is NULL");
    *bytes = 0;
    bool empty = false;
    MF_TRY(check_args(be, p, &empty));
    if (empty || !be->attention_workspace) return MF_OK;
    return be->attention_workspace(be, p, bytes);
}
