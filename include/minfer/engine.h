// The serving engine: continuous batching over a paged KV cache with prefix
// caching, the core that `minfer serve`, mf_generate and the CLI run on.
//
// Requests come and go while the engine runs: mf_engine_add_request queues
// one, each mf_engine_step runs one iteration over everything running (every
// decoding sequence gets one token, the rest of the step's token budget goes
// to prompt chunks) and returns the new tokens and the sequences that
// finished; mf_engine_abort ends one at once. The KV cache is a pool of
// fixed-size blocks: a sequence holds ceil(length / block_size) of them, so
// its memory follows its length, and full blocks of prompts are kept in a
// prefix cache (found again by their token ids) after their request ends.
// When a step needs a block and none is free, the newest sequence is
// preempted (its blocks freed, recomputed later): a request that fit the pool
// when it was added always finishes. Greedy output does not depend on what
// else runs, nor on preemption or a prefix-cache hit (on the CPU backend; on
// CUDA the split-KV decode picks its split count by the batch, which can
// change the last bits of a logit and, at a near tie, a token).
//
// One thread drives an engine (none of these calls is thread-safe); the
// server's engine thread does, and hands the events to its HTTP threads.
#ifndef MINFER_ENGINE_H
#define MINFER_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "minfer/generate.h"
#include "minfer/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mf_engine mf_engine;

// Sizes; a zero-initialised struct takes every default.
typedef struct {
    int64_t kv_blocks;          // blocks in the KV pool; 0: from kv_bytes
    int64_t kv_bytes;           // or a byte budget for it (all layers, K and V); both 0: room for
                                // max_seqs sequences of max_model_len tokens, at most 4 GiB
    int32_t block_size;         // tokens per block: a power of two in [16, 1024]; 0: 64
    int64_t max_batched_tokens; // token rows one step computes at most (decodes + prompt chunks);
                                // 0: 2048. At least max_seqs.
    int32_t max_seqs;           // sequences one step runs at most; 0: 64
    int64_t max_model_len;      // prompt + generated tokens of one sequence at most; 0: the
                                // model's positions (GPT-2) or 8192, never more than the pool
    bool no_prefix_cache;       // true: every prompt is computed (no block is shared between requests)
} mf_engine_opts;

// Creates an engine over a loaded model (the model must outlive it). The pool
// and all scratch are allocated here; steps allocate nothing on the device.
mf_status mf_engine_create(mf_model *m, const mf_engine_opts *opts, mf_engine **out);
void mf_engine_free(mf_engine *e); // NULL is fine; aborts whatever runs

#define MF_ENGINE_MAX_N 16        // sequences per request
#define MF_ENGINE_MAX_TOP_LOGPROBS 20

// One request: a prompt and how to continue it. Zero-initialised fields are
// off (greedy, no stop strings, text on when the model has a tokenizer).
typedef struct {
    const int32_t *prompt;      // (n_prompt) token ids, used as given (BOS is the caller's:
                                // mf_generate_encode_prompt adds it as the tokenizer does)
    int64_t n_prompt;           // >= 1
    int64_t max_tokens;         // >= 1: tokens each sequence generates at most; prompt +
                                // max_tokens may not exceed the engine's max_model_len
    int32_t n;                  // sequences sampled from the prompt, 0 or 1: one; up to
                                // MF_ENGINE_MAX_N. They share the prompt's KV blocks; sequence i
                                // draws with seed sampler.seed + i
    mf_sampler_params sampler;
    const char *const *stop;    // (n_stop) stop strings: the text ends before the first one
    int32_t n_stop;             // (needs the model's tokenizer)
    const int32_t *stop_ids;    // (n_stop_ids) token ids that end a sequence besides EOS
    int32_t n_stop_ids;         //   (the token is kept, as EOS is)
    bool ignore_eos;            // EOS ids do not end a sequence
    bool logprobs;              // report the chosen token's log-probability (of the model's raw
                                // logits: log_softmax, before any sampling transform)
    int32_t top_logprobs;       // and the N most likely tokens' (0 .. MF_ENGINE_MAX_TOP_LOGPROBS)
    bool no_text;               // true: token ids only (no detokenizing); stop strings need text
    bool host_sampling;         // true: always draw from the full logits on the host (the same
                                // tokens as the device's argmax / top-k candidates; for tests)
} mf_request_params;

// Queues a request; *id names it from then on (ids are never reused). A
// request whose prompt + max_tokens exceed max_model_len, or cannot fit the
// whole KV pool, is refused here with a message naming the sizes, as are
// bad sampling fields, an empty prompt, ids outside the vocabulary.
mf_status mf_engine_add_request(mf_engine *e, const mf_request_params *p, uint64_t *id);

// What a step produced for one sequence: at most one new token, and/or its end.
typedef struct {
    uint64_t id;                // the request
    int32_t seq;                // which of its n sequences
    int32_t token;              // the new token, or -1 (the event only ends the sequence)
    float logprob;              // its log-probability (NaN unless the request asked)
    int32_t n_top;              // top_logprobs entries below (0 unless asked)
    const int32_t *top_ids;     // (n_top) the most likely tokens, best first
    const float *top_logprobs;  // (n_top) and their log-probabilities
    const char *text;           // text that became final with it (len bytes, not NUL-terminated):
    size_t text_len;            //   whole UTF-8 characters; a possible stop string is held back
    mf_finish_reason finish;    // MF_FINISH_NONE while the sequence goes on
} mf_engine_event;

typedef struct {
    int32_t n_events;
    const mf_engine_event *events; // valid until the next step, abort, release or free
    int32_t n_decode;           // sequences that decoded one token this step
    int32_t n_prefill;          // prompt chunks computed (a long prompt takes several steps)
    int64_t n_tokens;           // token rows the step computed
    int32_t n_preempted;        // sequences preempted to make room (they are recomputed later)
} mf_engine_step_result;

// One iteration. With nothing queued it returns at once (n_events 0). A
// failure of the step itself (the backend, an injected fault) leaves every
// request as it was before the step; the engine keeps serving. A sequence
// whose logits cannot be sampled (a NaN or +inf logit, all -inf) ends with an
// MF_FINISH_ABORT event; the step then returns that error, after every other
// row is done (*out is filled either way).
mf_status mf_engine_step(mf_engine *e, mf_engine_step_result *out);

// Ends a request now: its blocks are freed (prompt blocks stay in the
// prefix cache), its sequences finish with MF_FINISH_ABORT and produce no
// more events. An unknown, released or finished id is MF_ERR_INVALID_ARG.
mf_status mf_engine_abort(mf_engine *e, uint64_t id);
// Forgets a finished (or aborted) request's record; it still runs: abort first.
mf_status mf_engine_release(mf_engine *e, uint64_t id);

typedef struct {
    int32_t n;                  // sequences
    int64_t n_prompt;
    int64_t n_cached;           // prompt tokens whose KV came from the prefix cache
    bool finished;              // every sequence has finished (or the request was aborted)
    int32_t n_preempted;        // times one of its sequences was preempted
    double t_queued;            // CLOCK_MONOTONIC seconds: added,
    double t_first;             //   its first token (0: none yet),
    double t_last;              //   its latest token (0: none yet)
} mf_request_info;
mf_status mf_engine_request_info(const mf_engine *e, uint64_t id, mf_request_info *out);

// Sequence `seq` of a request so far: its generated ids, their logprobs when
// asked (NaN otherwise), its final text. Pointers stay valid until the next
// step, abort, release or free.
typedef struct {
    const int32_t *tokens;      // (n_tokens) generated ids (the prompt not included)
    int64_t n_tokens;
    const float *logprobs;      // (n_tokens), or NULL unless asked
    const int32_t *top_ids;     // (n_tokens, n_top), or NULL
    const float *top_logprobs;  // (n_tokens, n_top), or NULL
    int32_t n_top;
    const char *text;           // (text_len bytes, not NUL-terminated) the text so far: what the
    size_t text_len;            //   events gave (bytes held back for a stop string follow it)
    mf_finish_reason finish;
} mf_seq_info;
mf_status mf_engine_seq_info(const mf_engine *e, uint64_t id, int32_t seq, mf_seq_info *out);

typedef struct {
    int32_t n_running;          // requests with a sequence holding KV blocks (vLLM's "running")
    int32_t n_waiting;          // the other unfinished ones: not yet admitted, or preempted
    int64_t kv_blocks;          // blocks in the pool
    int64_t kv_blocks_used;     // held by running sequences
    int64_t kv_blocks_cached;   // free but holding a cached prefix (evicted first come, first go)
    int32_t block_size;
    int64_t max_model_len, max_batched_tokens;
    int32_t max_seqs;
    int64_t prompt_tokens;      // since create: prompt tokens computed
    int64_t cached_tokens;      //   prompt tokens the prefix cache served instead
    int64_t generated_tokens;
    int64_t preemptions;
    int64_t steps;
    int64_t device_picks;       // tokens chosen from what the device reduced logits to (argmax, top-k)
    int64_t logit_reads;        // candidate rows that did not decide a draw: their logits read back
    int64_t kv_bytes;           // bytes of the pool
} mf_engine_stats;
mf_status mf_engine_get_stats(const mf_engine *e, mf_engine_stats *out);

// The model the engine runs (its tokenizer: mf_model_tokenizer).
mf_model *mf_engine_model(const mf_engine *e);

#ifdef __cplusplus
}
#endif
#endif // MINFER_ENGINE_H
