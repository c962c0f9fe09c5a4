// Internal: the one thing the serving engine (src/engine) needs from a
// model, a "runner" over a paged KV cache: run one step over a batch of
// sequences (each with its new tokens, its cache length and its block table)
// and hand back an output for the rows asked for. A session is one
// (mf_session_runner); tests drive the engine with scripted fakes.
#ifndef MF_RUNTIME_RUNNER_H
#define MF_RUNTIME_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include "minfer/model.h"
#include "minfer/tokenizer.h"

// What a step's output rows come back as.
typedef enum {
    MF_RUN_LOGITS = 0, // (n_out, vocab) f32 logits
    MF_RUN_ARGMAX = 1, // each row's argmax id and logit (as mf_argmax: NaN/+inf and all -inf rows marked)
    MF_RUN_TOPK = 2,   // each row's mf_topk candidates (k, scale) and statistics; read_logits gives a
                       // row's full logits afterwards, until the next run
} mf_run_kind;

typedef struct {
    int32_t n_seqs;          // sequences in the step (1 .. runner max_seqs)
    const int32_t *tokens;   // (cu[n_seqs]) their new tokens, sequence after sequence
    const int32_t *cu;       // (n_seqs + 1) offsets into tokens; cu[0] = 0, each sequence >= 1 token
    const int32_t *pos0;     // (n_seqs) tokens of each already in its cache (its new ones go at pos0 ..)
    const int32_t *tables;   // (n_seqs, table_width) block ids; sequence i's first
                             // ceil((pos0[i] + its new tokens) / block_size) entries are valid
    const uint8_t *out;      // (n_seqs) 1: an output row for the sequence's last new token
    int32_t n_out;           // rows asked for (the number of 1s)
    mf_run_kind kind;
    int32_t k;               // MF_RUN_TOPK: candidates per row
    float scale;             // MF_RUN_TOPK: mf_topk's scale
    float *logits;           // MF_RUN_LOGITS: (n_out, vocab), host
    int32_t *ids;            // MF_RUN_ARGMAX: (n_out); MF_RUN_TOPK: (n_out, k), host
    float *vals;             // likewise
    float *stats;            // MF_RUN_TOPK: (n_out, 2), host
} mf_run_batch;

typedef struct {
    void *ctx;
    // One step (tokens written into the blocks the tables name, then the
    // outputs). A failure leaves no token counted as cached: the engine
    // recomputes the step's tokens.
    mf_status (*run)(void *ctx, const mf_run_batch *b);
    // After an MF_RUN_TOPK run: output row `row`'s full logits (vocab f32, host).
    // NULL: the runner only gives logits (every run is MF_RUN_LOGITS).
    mf_status (*read_logits)(void *ctx, int32_t row, float *logits);
    // Copies block src's KV (every layer, K and V) to block dst (copy on write).
    mf_status (*copy_block)(void *ctx, int32_t src, int32_t dst);
    // Optional: frees ctx when the engine made on the runner is freed (NULL: the caller owns it);
    // set, ctx belongs to the engine from mf_engine_create_runner on, also when that fails.
    void (*destroy)(void *ctx);
    mf_model *model;         // what mf_engine_model answers (NULL for fakes)
    int64_t vocab;           // logits per row
    int32_t n_blocks;        // KV pool
    int32_t block_size;      // tokens per block
    int32_t table_width;     // block table entries per sequence (max_model_len / block_size, rounded up)
    int32_t max_seqs;        // sequences per step at most
    int64_t max_tokens;      // token rows per step at most
    int64_t kv_bytes;        // bytes of the pool (for stats)
    const mf_tokenizer *tok; // NULL: ids only
    int32_t n_eos;
    int32_t eos_ids[MF_MODEL_MAX_EOS];
} mf_runner;

// A session for an engine: a KV pool of n_blocks blocks of block_size tokens
// handed out through block tables, up to max_seqs sequences and max_tokens
// token rows a step, sequences of up to max_model_len tokens; flash attention.
mf_status mf_session_create_paged(mf_model *m, int32_t max_seqs, int64_t max_model_len, int64_t max_tokens,
                                  int32_t n_blocks, int32_t block_size, mf_session **out);

// The runner of a session: its KV pool, max_batch sequences and step_tokens
// rows a step. Runs on a session of slots change what the slots hold: they
// are emptied here (mf_generate empties them anyway). MF_ERR_UNSUPPORTED for
// a model loaded with classic attention (the engine needs flash).
mf_status mf_session_runner(mf_session *s, mf_runner *out);

#endif // MF_RUNTIME_RUNNER_H
