// The KV cache: one allocation holding every layer's K and V block pools,
// and views of it (kv_cache.h).
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "minfer/ops.h"
#include "runtime/kv_cache.h"

int64_t mf_kv_cache_bytes(int32_t n_layers, int64_t n_blocks, int32_t block_size, int32_t n_kv_heads,
                          int32_t head_dim, mf_dtype dt) {
    return 2 * (int64_t)n_layers * n_blocks * block_size * n_kv_heads * head_dim * (int64_t)mf_dtype_size(dt);
}

mf_status mf_kv_cache_init(mf_kv_cache *kv, mf_backend *be, mf_dtype dt, int32_t n_layers, int32_t n_blocks,
                           int32_t block_size, int32_t n_kv_heads, int32_t head_dim) {
    memset(kv, 0, sizeof *kv);
    kv->be = be;
    kv->dtype = dt;
    kv->n_layers = n_layers, kv->n_blocks = n_blocks, kv->block_size = block_size;
    kv->n_kv_heads = n_kv_heads, kv->head_dim = head_dim;
    kv->bytes = mf_kv_cache_bytes(n_layers, n_blocks, block_size, n_kv_heads, head_dim, dt);
    mf_status s = mf_backend_alloc(be, (size_t)kv->bytes, &kv->data);
    if (s != MF_OK) {
        char why[256]; // mf_fail writes the buffer mf_last_error() points to
        snprintf(why, sizeof why, "%s", mf_last_error());
        return mf_fail(s, "session: cannot allocate the KV cache (%.1f MB: %d layers x %d blocks of %d tokens): %s",
                       (double)kv->bytes / 1e6, n_layers, n_blocks, block_size, why);
    }
    return MF_OK;
}

void mf_kv_cache_free(mf_kv_cache *kv) {
    if (!kv) return;
    if (kv->be) mf_backend_dealloc(kv->be, kv->data);
    memset(kv, 0, sizeof *kv);
}

// Elements of one token (row) and of one layer's K or V pool.
static int64_t row_elems(const mf_kv_cache *kv) { return (int64_t)kv->n_kv_heads * kv->head_dim; }
static int64_t half_elems(const mf_kv_cache *kv) { return (int64_t)kv->n_blocks * kv->block_size * row_elems(kv); }

mf_tensor mf_kv_cache_rows(const mf_kv_cache *kv, int32_t layer, int which, int64_t row0, int64_t n) {
    const int64_t off = ((int64_t)layer * 2 + which) * half_elems(kv) + row0 * row_elems(kv);
    mf_tensor t;
    memset(&t, 0, sizeof t);
    t.data = (char *)kv->data + off * (int64_t)mf_dtype_size(kv->dtype);
    t.dtype = kv->dtype;
    t.device = mf_backend_device(kv->be);
    t.ndim = 3;
    t.shape[0] = n, t.shape[1] = kv->n_kv_heads, t.shape[2] = kv->head_dim, t.shape[3] = 1;
    t.stride[0] = row_elems(kv), t.stride[1] = kv->head_dim, t.stride[2] = 1;
    return t;
}

mf_tensor mf_kv_cache_slots(const mf_kv_cache *kv, int32_t layer, int which, int64_t slot_len) {
    mf_tensor t = mf_kv_cache_rows(kv, layer, which, 0, slot_len);
    t.ndim = 4;
    t.shape[0] = (int64_t)kv->n_blocks * kv->block_size / slot_len, t.shape[1] = slot_len;
    t.shape[2] = kv->n_kv_heads, t.shape[3] = kv->head_dim;
    t.stride[0] = slot_len * row_elems(kv), t.stride[1] = row_elems(kv);
    t.stride[2] = kv->head_dim, t.stride[3] = 1;
    return t;
}

mf_tensor mf_kv_cache_pool(const mf_kv_cache *kv, int32_t layer, int which) {
    return mf_kv_cache_slots(kv, layer, which, kv->block_size);
}

mf_status mf_kv_cache_copy_block(const mf_kv_cache *kv, int32_t src, int32_t dst) {
    // (2 n_layers, block elements) with the K|V pools half_elems apart
    mf_copy_args a;
    const int64_t blk = (int64_t)kv->block_size * row_elems(kv), shape[2] = {2 * (int64_t)kv->n_layers, blk};
    const int64_t es = (int64_t)mf_dtype_size(kv->dtype);
    MF_TRY(mf_tensor_make(&a.src, (char *)kv->data + (int64_t)src * blk * es, kv->dtype, mf_backend_device(kv->be), 2,
                          shape));
    a.dst = a.src;
    a.dst.data = (char *)kv->data + (int64_t)dst * blk * es;
    a.src.stride[0] = a.dst.stride[0] = half_elems(kv);
    return mf_copy(kv->be, &a);
}
