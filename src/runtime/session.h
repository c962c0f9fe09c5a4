// Internal: struct mf_session and the forward pass over it.
//
// A forward call is split into steps of at most `step_tokens` token rows (a
// sequence may straddle two steps: its first part goes into the KV cache,
// the second attends to it). Each step runs every layer over its rows; the
// rows of one sequence form a segment. Per layer, one mf_kv_write puts every
// segment's new keys and values into its slot of the cache (RoPE fused), and
// one mf_attention runs all segments over their caches; the per-step index
// arrays (ids, positions, slots, segment offsets and lengths) go to the
// device in one copy. All device scratch is carved from one arena when the
// session is created; a forward call allocates nothing.
#ifndef MF_RUNTIME_SESSION_H
#define MF_RUNTIME_SESSION_H

#include "backend.h"
#include "runtime/kv_cache.h"
#include "runtime/moe_block.h"
#include "model/load/model.h"

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

enum { MF_SESSION_GRAPHS = 8 }; // decode graphs kept per session (batch sizes in use)

struct mf_session;
// The attention of one layer over the step's n_segs segments (T rows): reads
// the queries from the q part of s->qkv (rotated already), keys and values
// from the cache (each segment's tokens [0, pos0 + n), the new ones written
// already), writes s->ctx's rows [0, T).
typedef mf_status (*mf_attention_fn)(struct mf_session *s, int32_t layer, int32_t n_segs, int64_t T);

struct mf_session {
    mf_model *m;
    mf_backend *be;
    int32_t max_batch;
    int64_t max_seq;
    int64_t step_tokens;     // T: token rows per step
    int64_t q_block;         // classic attention: query rows per scores block (0: flash)
    int64_t scores_ld;       // classic attention: row stride of scores / probs (max_seq rounded up to 8)
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
    // classic attention only (flash: unused, not allocated)
    mf_tensor q_hm;          // (H * q_block * D) act: a block's queries, head-major (GQA)
    mf_tensor scores;        // (H * q_block * scores_ld) f32: QK^T
    mf_tensor probs;         // (H * q_block * scores_ld) act: softmax output (CPU: scores itself)
    mf_tensor ctx_hm;        // (H * q_block * D) act: P.V, head-major (GQA)
    void *attn_ws;           // flash: split-KV workspace (NULL: none needed)
    size_t attn_ws_bytes;
    void *moe_ws;            // mixture of experts: mf_moe's workspace for T rows (NULL: dense model)
    size_t moe_ws_bytes;
    // The step's i32 index arrays: one device buffer, one upload per step,
    // mirrored by s->h_step on the host. R = min(max_batch, T) segments at most.
    mf_tensor step_i32;      // (3 T + 3 R + 1) i32: ids | pos | tok_slot | seg_cu | seg_slot | seg_klen
    mf_tensor ids, pos;      // (T) i32 views: token ids, positions
    mf_tensor tok_slot;      // (T) i32 view: each row's KV-cache slot
    mf_tensor seg_cu;        // (R + 1) i32 view: segment row offsets in the step
    mf_tensor seg_slot;      // (R) i32 view: each segment's slot
    mf_tensor seg_klen;      // (R) i32 view: keys each segment attends to (pos0 + n)
    mf_tensor rows;          // (min(max_batch, T)) i32: rows gathered for the LM head
    mf_tensor gathered;      // (min(max_batch, T), hidden) act
    mf_tensor logits;        // (logit_rows, vocab) f32
    mf_tensor argmax_out;    // (2 R) i32: for k LM-head rows, ids [0, k) | max values (f32) [k, 2k)
    mf_tensor topk_out;      // (R (2 MF_TOPK_MAX + 2)) i32: for k rows of K candidates, ids (k, K) |
                             // values (k, K) f32 | stats (k, 2) f32, packed for one read-back

    // host
    int64_t *len;            // (max_batch) tokens in each slot's cache
    int64_t *work_len;       // (max_batch) the same during a call, committed at its end
    int32_t *h_step;         // (3 T + 3 R + 1) staging for step_i32
    int32_t *h_ids, *h_pos, *h_tok_slot, *h_seg_cu, *h_seg_slot, *h_seg_klen; // views into h_step
    int64_t step_max_q, step_max_k; // host bounds of the step's segment lengths (for mf_attention)
    int32_t *h_rows;         // (min(max_batch, T)) staging for rows
    int32_t *h_argmax;       // (2 R) staging for argmax_out
    int32_t *h_topk;         // (R (2 MF_TOPK_MAX + 2)) staging for topk_out
    int64_t kept_first, kept_rows; // the last call's output rows [first, first + rows) whose logits
                                   // are still in s->logits rows [0, rows) (mf_session_read_logits)
    mf_fwd_seg *segs;        // (min(max_batch, T)) segments of a step
    uint8_t *seen;           // (max_batch) duplicate-slot check

    bool prof_on;
    mf_session_profiler prof;
    mf_op_hook hook;         // on s->be during a forward call: counts the call's ops, brackets them for prof

    // decode-step graphs, one per batch size (mf_session_set_graphs)
    bool graphs;             // use them (default: when the backend records graphs)
    int32_t moe_graph_rows;  // MoE models: decode steps of up to this many sequences are recorded (0: none)
    bool recording;          // forward ops are being recorded into a graph
    struct {
        int32_t n_seqs;      // 0: empty entry
        int kind;            // what the step ends with: logits, their argmax, or top-k (fwd_kind)
        int32_t k;           // top-k: candidates per row
        float scale;         // top-k: the scale of the row sums
        void *exec;          // the backend's executable graph
        uint64_t used;       // graph_clock at the last use (least recently used goes first)
        int64_t ops;         // ops it recorded
    } graph[MF_SESSION_GRAPHS];
    uint64_t graph_clock;

    // statistics of the last forward call (mf_session_get_stats)
    int64_t call_launches;   // (the call's ops: hook.ops)
    double call_t0, call_host_us; // call_host_us < 0: not yet marked in this call
    bool call_graph;
    int64_t graphs_recorded, graphs_replayed;
    char graphs_off[192]; // the error that turned graphs off ("" if none)
};

// The backend, with `what` as the role of the ops queued next (the
// profiler's second name): forward code calls mf_gemm(mf_role(s, "qkv"), ...).
static inline mf_backend *mf_role(struct mf_session *s, const char *what) {
    s->hook.what = what;
    return s->be;
}

// forward.c: one step over rows [0, T) (s->step_i32 already uploaded),
// segments s->segs[0 .. n_segs). *out: the final hidden rows (T, hidden).
mf_status mf_forward_step(struct mf_session *s, int32_t n_segs, int64_t T, mf_tensor *out);
// The LM head over x (k, hidden) into host rows out[0 .. k) (vocab f32 each),
// in blocks of s->logit_rows.
mf_status mf_forward_lm_head(struct mf_session *s, const mf_tensor *x, float *out);
// The LM head's GEMM alone: x (k <= s->logit_rows rows) into s->logits (what
// a recorded decode step ends with; the read-back follows the replay).
mf_status mf_forward_lm_head_gemm(struct mf_session *s, const mf_tensor *x);
// The argmax of s->logits' rows [0, k) into s->argmax_out (ids | values).
mf_status mf_forward_lm_head_argmax(struct mf_session *s, int64_t k);
// The top-k candidates (k per row, mf_topk with `scale`) of s->logits' rows
// [0, rows) into s->topk_out (ids | values | stats).
mf_status mf_forward_lm_head_topk(struct mf_session *s, int64_t rows, int32_t k, float scale);
// session.c: notes the host time of the current forward call once its work is
// all queued (called before the first blocking read-back).
void mf_session_mark_queued(struct mf_session *s);
// Rows `rows` (k <= rows.shape[0], device ids already uploaded) of x gathered into s->gathered.
mf_status mf_forward_gather(struct mf_session *s, const mf_tensor *x, int64_t k, mf_tensor *out);

// Layer l's experts and routing (forward.c) as mf_moe_block takes them.
void mf_forward_moe_layer(const mf_model *m, int32_t l, mf_moe_layer *ml, mf_moe_routing *r);

// attention_classic.c: per segment, QK^T (batched GEMM) -> mf_softmax (scale, causal) -> P.V.
mf_status mf_attention_classic(struct mf_session *s, int32_t layer, int32_t n_segs, int64_t T);
// forward.c: one mf_attention over all segments (online softmax; no scores buffer).
mf_status mf_attention_flash(struct mf_session *s, int32_t layer, int32_t n_segs, int64_t T);

#ifdef __cplusplus
}
#endif
#endif // MF_RUNTIME_SESSION_H
