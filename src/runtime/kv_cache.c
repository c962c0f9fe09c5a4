// The KV cache: one allocation, views per (layer, K|V, slot) and per layer.
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "minfer/ops.h"
#include "runtime/kv_cache.h"

int64_t mf_kv_cache_bytes(int32_t n_layers, int32_t max_batch, int64_t max_seq, int32_t n_kv_heads,
                          int32_t head_dim, mf_dtype dt) {
    return 2 * (int64_t)n_layers * max_batch * max_seq * n_kv_heads * head_dim * (int64_t)mf_dtype_size(dt);
}

mf_status mf_kv_cache_init(mf_kv_cache *kv, mf_backend *be, mf_dtype dt, int32_t n_layers, int32_t max_batch,
                           int64_t max_seq, int32_t n_kv_heads, int32_t head_dim) {
    memset(kv, 0, sizeof *kv);
    kv->be = be;
    kv->dtype = dt;
    kv->n_layers = n_layers, kv->max_batch = max_batch, kv->max_seq = max_seq;
    kv->n_kv_heads = n_kv_heads, kv->head_dim = head_dim;
    kv->bytes = mf_kv_cache_bytes(n_layers, max_batch, max_seq, n_kv_heads, head_dim, dt);
    mf_status s = mf_backend_alloc(be, (size_t)kv->bytes, &kv->data);
    if (s != MF_OK) {
        char why[256]; // mf_fail writes the buffer mf_last_error() points to
        snprintf(why, sizeof why, "%s", mf_last_error());
        return mf_fail(s, "session: cannot allocate the KV cache (%.1f MB: %d layers x %d slots x %lld tokens): %s",
                       (double)kv->bytes / 1e6, n_layers, max_batch, (long long)max_seq, why);
    }
    return MF_OK;
}

void mf_kv_cache_free(mf_kv_cache *kv) {
    if (!kv) return;
    if (kv->be) mf_backend_dealloc(kv->be, kv->data);
    memset(kv, 0, sizeof *kv);
}

mf_tensor mf_kv_cache_view(const mf_kv_cache *kv, int32_t layer, int which, int32_t slot, int64_t pos0, int64_t n) {
    const int64_t row = (int64_t)kv->n_kv_heads * kv->head_dim;       // one token
    const int64_t per_slot = kv->max_seq * row;
    const int64_t per_half = (int64_t)kv->max_batch * per_slot;
    const int64_t off = ((int64_t)layer * 2 + which) * per_half + (int64_t)slot * per_slot + pos0 * row;
    mf_tensor t;
    memset(&t, 0, sizeof t);
    t.data = (char *)kv->data + off * (int64_t)mf_dtype_size(kv->dtype);
    t.dtype = kv->dtype;
    t.device = mf_backend_device(kv->be);
    t.ndim = 3;
    t.shape[0] = n, t.shape[1] = kv->n_kv_heads, t.shape[2] = kv->head_dim, t.shape[3] = 1;
    t.stride[0] = row, t.stride[1] = kv->head_dim, t.stride[2] = 1;
    return t;
}

mf_tensor mf_kv_cache_layer(const mf_kv_cache *kv, int32_t layer, int which) {
    mf_tensor t = mf_kv_cache_view(kv, layer, which, 0, 0, kv->max_seq);
    t.ndim = 4;
    t.shape[0] = kv->max_batch, t.shape[1] = kv->max_seq, t.shape[2] = kv->n_kv_heads, t.shape[3] = kv->head_dim;
    t.stride[0] = kv->max_seq * t.stride[0], t.stride[1] = (int64_t)kv->n_kv_heads * kv->head_dim;
    t.stride[2] = kv->head_dim, t.stride[3] = 1;
    return t;
}
