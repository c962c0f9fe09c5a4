// Internal: the generation loop runs over a "logits source", the one thing
// it needs from a session. mf_generate wraps a session; tests also drive the
// loop with scripted fakes.
#ifndef MF_ENGINE_ENGINE_H
#define MF_ENGINE_ENGINE_H

#include "minfer/generate.h"

typedef struct {
    void *ctx;
    // As mf_session_forward in MF_LOGITS_LAST mode: sequence i appends
    // tokens[offsets[i] .. offsets[i+1]) to slot seq_ids[i]; logits: (n_seqs, vocab).
    mf_status (*forward)(void *ctx, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                         const int64_t *offsets, float *logits);
    // Optional (NULL: none): as forward, but only each sequence's argmax comes
    // back, as mf_session_forward_greedy gives it: ids (n_seqs) the lowest
    // index of the largest logit (that of the first NaN / +inf when there is
    // one, then vals[i] is NaN; -1 when all are -inf), vals (n_seqs) that logit.
    // Used for greedy sampling without a repetition penalty.
    mf_status (*forward_greedy)(void *ctx, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                                const int64_t *offsets, int32_t *ids, float *vals);
    // Optional (NULL: none; both or neither): as forward, but each sequence's
    // row comes back as mf_topk gives it (k candidates in rank order, and the
    // row's max and sum of expf((logit - max) * scale)): ids, vals (n_seqs, k),
    // stats (n_seqs, 2), as mf_session_forward_topk. read_logits then gives
    // row `row`'s full logits of that call (vocab) when the candidates do not
    // decide a draw. Used for decode steps of sampling that the candidates can
    // make exact (mf_sampler_candidates_k > 0).
    mf_status (*forward_topk)(void *ctx, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                              const int64_t *offsets, int32_t k, float scale, int32_t *ids, float *vals, float *stats);
    mf_status (*read_logits)(void *ctx, int32_t row, float *logits);
    mf_status (*reset)(void *ctx, int32_t seq); // empties one slot
    int64_t vocab;           // logits per token (the model's vocabulary, maybe padded)
    int32_t max_batch;       // slots
    int64_t max_seq;         // tokens per slot
    const mf_tokenizer *tok; // NULL: token prompts only, no text
    int32_t n_eos;           // EOS ids (generation_config.json may list several); 0: none
    int32_t eos_ids[MF_MODEL_MAX_EOS];
} mf_gen_source;

// mf_generate over any source.
mf_status mf_generate_source(const mf_gen_source *src, const mf_prompts *prompts, const mf_generate_params *p,
                             mf_generate_result *out);

#endif // MF_ENGINE_ENGINE_H
