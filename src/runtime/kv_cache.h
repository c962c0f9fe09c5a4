// Internal: the KV cache of a session, a pool of fixed-size blocks.
//
// Per layer, K and V: (n_blocks, block_size, n_kv_heads, head_dim) in the
// model's KV dtype (the activations' unless mf_model_opts.kv_dtype asks
// for f16/bf16 on the CPU), row-major, all in one backend allocation (vLLM's
// layout). An engine's session hands blocks out through block tables; a
// session of slots gives slot b the run of blocks [b W, b W + W), so that
// its tokens are one contiguous (slot_len = W block_size, n_kv_heads,
// head_dim) run: the (max_batch, slot_len, ...) view. New keys and values go
// in with mf_kv_write through the slot mapping (pool row of each token).
#ifndef MF_RUNTIME_KV_CACHE_H
#define MF_RUNTIME_KV_CACHE_H

#include "minfer/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    mf_backend *be;
    mf_dtype dtype;
    int32_t n_layers, n_kv_heads, head_dim;
    int32_t n_blocks, block_size;
    void *data;          // (n_layers, 2, n_blocks, block_size, n_kv_heads, head_dim)
    int64_t bytes;
} mf_kv_cache;

// Bytes a pool of these sizes takes (for memory plans).
int64_t mf_kv_cache_bytes(int32_t n_layers, int64_t n_blocks, int32_t block_size, int32_t n_kv_heads,
                          int32_t head_dim, mf_dtype dt);
mf_status mf_kv_cache_init(mf_kv_cache *kv, mf_backend *be, mf_dtype dt, int32_t n_layers, int32_t n_blocks,
                           int32_t block_size, int32_t n_kv_heads, int32_t head_dim);
void mf_kv_cache_free(mf_kv_cache *kv);

// K (which = 0) or V (1) of `layer`: the pool, (n_blocks, block_size,
// n_kv_heads, head_dim) (what mf_kv_write and a paged mf_attention take).
mf_tensor mf_kv_cache_pool(const mf_kv_cache *kv, int32_t layer, int which);

// The same memory as slots of slot_len tokens (a multiple of block_size):
// (n_blocks x block_size / slot_len, slot_len, n_kv_heads, head_dim).
mf_tensor mf_kv_cache_slots(const mf_kv_cache *kv, int32_t layer, int which, int64_t slot_len);

// Rows [row0, row0 + n) of the pool (row = block x block_size + offset) of
// `layer`'s K or V: a (n, n_kv_heads, head_dim) view (one slot's tokens).
mf_tensor mf_kv_cache_rows(const mf_kv_cache *kv, int32_t layer, int which, int64_t row0, int64_t n);

// Copies block src to block dst in every layer, K and V (one mf_copy).
mf_status mf_kv_cache_copy_block(const mf_kv_cache *kv, int32_t src, int32_t dst);

#ifdef __cplusplus
}
#endif
#endif // MF_RUNTIME_KV_CACHE_H
