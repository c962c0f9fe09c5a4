// Internal: struct mf_session and the forward pass over it.
//
// A forward call is split into steps of at most `step_tokens` token rows (a
// sequence may straddle two steps: its first part goes into the KV cache,
// the second attends to it). Each step runs every layer over its rows; the
// rows of one sequence form a segment, and attention runs per segment over
// that slot's cache. All device scratch is carved from one arena when the
// session is created; a forward call allocates nothing.
#ifndef MF_MODEL_SESSION_H
#define MF_MODEL_SESSION_H

#include "minfer/ops.h"
#include "model/kv_cache.h"
#include "model/model_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

// One sequence's run of token rows within a step.
typedef struct {
    int32_t seq;   // index of the sequence in the forward call
    int32_t slot;  // its KV-cache slot
    int64_t row0;  // first row in the step
    int64_t n;     // rows (new tokens) in this step
    int64_t pos0;  // position of the first: tokens already in the slot's cache
    bool last;     // holds the sequence's last new token
} mf_fwd_seg;

struct mf_session;
// The attention of one layer for one segment: reads its queries from the q
// part of s->qkv (rows seg->row0 ..), keys and values from the cache (tokens
// [0, pos0 + n), the new ones already written), writes s->ctx's rows.
typedef mf_status (*mf_attention_fn)(struct mf_session *s, int32_t layer, const mf_fwd_seg *seg);

struct mf_session {
    mf_model *m;
    mf_backend *be;
    int32_t max_batch;
    int64_t max_seq;
    int64_t step_tokens;     // T: token rows per step
    int64_t q_block;         // attention: query rows per scores block
    int64_t logit_rows;      // LM head: rows per GEMM (ALL mode)
    mf_attention_fn attention;
    mf_kv_cache kv;
    mf_arena *arena;

    // device scratch (act = the model dtype), carved from `arena`
    mf_tensor h;             // (T, hidden) act: the residual stream
    mf_tensor n;             // (T, hidden) act: normed input of a block; the final hidden
    mf_tensor a;             // (T, hidden) act: a block's output (o / down projection), positions
    mf_tensor qkv;           // (T, (H + 2G) * D) act: q | k | v per row
    mf_tensor ctx;           // (T, H * D) act: attention output, heads side by side
    mf_tensor ff;            // (T, ffn or 2 * ffn) act: MLP inner activations (gate | up)
    mf_tensor q_hm;          // (H * q_block * D) act: a block's queries, head-major
    mf_tensor scores;        // (H * q_block * max_seq) f32: QK^T
    mf_tensor probs;         // (H * q_block * max_seq) act: softmax output (CPU: scores itself)
    mf_tensor ctx_hm;        // (H * q_block * D) act: P.V, head-major
    mf_tensor ids, pos;      // (T) i32: token ids, positions
    mf_tensor rows;          // (min(max_batch, T)) i32: rows gathered for the LM head
    mf_tensor gathered;      // (min(max_batch, T), hidden) act
    mf_tensor logits;        // (logit_rows, vocab) f32

    // host
    int64_t *len;            // (max_batch) tokens in each slot's cache
    int64_t *work_len;       // (max_batch) the same during a call, committed at its end
    int32_t *h_ids, *h_pos;  // (T) staging for ids, pos
    int32_t *h_rows;         // (min(max_batch, T)) staging for rows
    mf_fwd_seg *segs;        // (min(max_batch, T)) segments of a step
    uint8_t *seen;           // (max_batch) duplicate-slot check

    bool prof_on;
    mf_session_profiler prof;
};

// Profiling brackets (one branch when off).
static inline void mf_prof_begin(struct mf_session *s, const char *op, const char *what) {
    if (s->prof_on && s->prof.begin) s->prof.begin(s->prof.user, op, what);
}
static inline void mf_prof_end(struct mf_session *s, const char *op, const char *what) {
    if (s->prof_on && s->prof.end) s->prof.end(s->prof.user, op, what);
}

// The ops as the forward calls them: bracketed by the profiler; `what` names the role.
mf_status mf_fw_gemm(struct mf_session *s, const char *what, const mf_gemm_args *a);
mf_status mf_fw_softmax(struct mf_session *s, const char *what, const mf_softmax_args *a);
mf_status mf_fw_copy(struct mf_session *s, const char *what, const mf_copy_args *a);

// forward.c: one step over rows [0, T) of s->ids / s->pos (already uploaded),
// segments segs[0 .. n_segs). *out: the final hidden rows (T, hidden).
mf_status mf_forward_step(struct mf_session *s, const mf_fwd_seg *segs, int32_t n_segs, int64_t T, mf_tensor *out);
// The LM head over x (k, hidden) into host rows out[0 .. k) (vocab f32 each),
// in blocks of s->logit_rows.
mf_status mf_forward_lm_head(struct mf_session *s, const mf_tensor *x, float *out);
// Rows `rows` (k <= rows.shape[0], device ids already uploaded) of x gathered into s->gathered.
mf_status mf_forward_gather(struct mf_session *s, const mf_tensor *x, int64_t k, mf_tensor *out);

// attention_classic.c: QK^T (batched GEMM) -> mf_softmax (scale, causal) -> P.V.
mf_status mf_attention_classic(struct mf_session *s, int32_t layer, const mf_fwd_seg *seg);

#ifdef __cplusplus
}
#endif
#endif // MF_MODEL_SESSION_H
