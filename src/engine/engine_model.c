// mf_engine_create: an engine over a loaded model, i.e. a paged session
// sized from the options (src/runtime) behind the runner interface.
#include <stdio.h>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_int.h"

enum {
    kDefaultBlock = 64,       // docs/notes/engine.md: the FA2 prefill's key tile
    kDefaultSeqs = 64,
    kDefaultBatchedTokens = 2048,
    kDefaultModelLen = 8192,  // when the config names no limit
};
static const int64_t kDefaultKvCap = (int64_t)4 << 30; // bytes, when no budget is given

static void destroy_session(void *ctx) { mf_session_free(ctx); }

mf_status mf_engine_create(mf_model *m, const mf_engine_opts *opts, mf_engine **out) {
    static const char fn[] = "engine_create";
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!m) return mf_fail(MF_ERR_INVALID_ARG, "%s: model is NULL", fn);
    mf_engine_opts o = opts ? *opts : (mf_engine_opts){0};
    if (o.kv_blocks < 0 || o.kv_bytes < 0 || o.block_size < 0 || o.max_batched_tokens < 0 || o.max_seqs < 0 ||
        o.max_model_len < 0)
        return mf_fail(MF_ERR_INVALID_ARG,
                       "%s: negative size (kv_blocks %lld, kv_bytes %lld, block_size %d, max_batched_tokens %lld, "
                       "max_seqs %d, max_model_len %lld)",
                       fn, (long long)o.kv_blocks, (long long)o.kv_bytes, o.block_size, (long long)o.max_batched_tokens,
                       o.max_seqs, (long long)o.max_model_len);
    if (o.kv_blocks > 0 && o.kv_bytes > 0)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: give kv_blocks (%lld) or kv_bytes (%lld), not both", fn,
                       (long long)o.kv_blocks, (long long)o.kv_bytes);
    if (o.block_size == 0) o.block_size = kDefaultBlock;
    if (o.block_size < 16 || o.block_size > 1024 || (o.block_size & (o.block_size - 1)))
        return mf_fail(MF_ERR_INVALID_ARG, "%s: block_size %d (want a power of two in [16, 1024])", fn, o.block_size);
    if (o.max_seqs == 0) o.max_seqs = kDefaultSeqs;
    if (o.max_seqs > 65536) return mf_fail(MF_ERR_INVALID_ARG, "%s: max_seqs %d (at most 65536)", fn, o.max_seqs);
    if (o.max_batched_tokens == 0) o.max_batched_tokens = kDefaultBatchedTokens > o.max_seqs ? kDefaultBatchedTokens : o.max_seqs;
    if (o.max_batched_tokens < o.max_seqs)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: max_batched_tokens %lld < max_seqs %d (every decode must fit a step)", fn,
                       (long long)o.max_batched_tokens, o.max_seqs);
    if (o.max_batched_tokens > (1 << 20))
        return mf_fail(MF_ERR_INVALID_ARG, "%s: max_batched_tokens %lld (at most 2^20)", fn, (long long)o.max_batched_tokens);
    mf_model_info info;
    MF_TRY(mf_model_get_info(m, &info));
    if (o.max_model_len == 0) o.max_model_len = info.max_pos > 0 ? info.max_pos : kDefaultModelLen;
    if (o.max_model_len > INT32_MAX)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: max_model_len %lld (at most 2^31 - 1)", fn, (long long)o.max_model_len);
    const int64_t per_block = (int64_t)o.block_size * info.kv_bytes_per_token;
    int64_t n_blocks = o.kv_blocks;
    if (n_blocks == 0 && o.kv_bytes > 0) n_blocks = o.kv_bytes / per_block;
    if (n_blocks == 0 && o.kv_bytes == 0) {
        n_blocks = (int64_t)o.max_seqs * ((o.max_model_len + o.block_size - 1) / o.block_size);
        if (n_blocks > kDefaultKvCap / per_block) n_blocks = kDefaultKvCap / per_block;
    }
    if (n_blocks < 1)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: a KV budget of %lld bytes holds no block (%d tokens x %lld bytes)", fn,
                       (long long)o.kv_bytes, o.block_size, (long long)info.kv_bytes_per_token);
    if (n_blocks > (1 << 28)) return mf_fail(MF_ERR_INVALID_ARG, "%s: %lld KV blocks (at most 2^28)", fn, (long long)n_blocks);
    if (o.max_model_len > n_blocks * o.block_size) o.max_model_len = n_blocks * o.block_size;

    mf_session *s = NULL;
    MF_TRY(mf_session_create_paged(m, o.max_seqs, o.max_model_len, o.max_batched_tokens, (int32_t)n_blocks,
                                   o.block_size, &s));
    mf_runner r;
    mf_status st = mf_session_runner(s, &r);
    if (st != MF_OK) {
        mf_session_free(s);
        return st;
    }
    r.destroy = destroy_session; // the engine owns the session from here on
    r.model = m;
    return mf_engine_create_runner(&r, &o, out);
}
