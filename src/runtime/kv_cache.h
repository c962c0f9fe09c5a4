// Internal: the KV cache of a session.
//
// Per layer, K and V: (max_batch, max_seq, n_kv_heads, head_dim) in the
// activation dtype, row-major, all in one backend allocation. Slot b's
// tokens [0, len) are valid; the lengths live in the session (host). New
// keys/values are scattered in with mf_kv_write (RoPE fused) from the
// strided q|k|v GEMM output.
#ifndef MF_RUNTIME_KV_CACHE_H
#define MF_RUNTIME_KV_CACHE_H

#include "minfer/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    mf_backend *be;
    mf_dtype dtype;
    int32_t n_layers, max_batch, n_kv_heads, head_dim;
    int64_t max_seq;
    void *data;          // (n_layers, 2, max_batch, max_seq, n_kv_heads, head_dim)
    int64_t bytes;
} mf_kv_cache;

// Bytes the cache of these sizes takes (for memory plans).
int64_t mf_kv_cache_bytes(int32_t n_layers, int32_t max_batch, int64_t max_seq, int32_t n_kv_heads,
                          int32_t head_dim, mf_dtype dt);
mf_status mf_kv_cache_init(mf_kv_cache *kv, mf_backend *be, mf_dtype dt, int32_t n_layers, int32_t max_batch,
                           int64_t max_seq, int32_t n_kv_heads, int32_t head_dim);
void mf_kv_cache_free(mf_kv_cache *kv);

// K (which = 0) or V (1) of `layer`, slot `slot`, tokens [pos0, pos0 + n):
// a (n, n_kv_heads, head_dim) view.
mf_tensor mf_kv_cache_view(const mf_kv_cache *kv, int32_t layer, int which, int32_t slot, int64_t pos0, int64_t n);

// K (which = 0) or V (1) of `layer`, every slot: a (max_batch, max_seq,
// n_kv_heads, head_dim) view (what mf_kv_write and mf_attention take).
mf_tensor mf_kv_cache_layer(const mf_kv_cache *kv, int32_t layer, int which);

#ifdef __cplusplus
}
#endif
#endif // MF_RUNTIME_KV_CACHE_H
