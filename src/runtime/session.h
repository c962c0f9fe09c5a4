// Internal: struct mf_session, the state the runtime's files share, in parts
// by concern: sizes, device scratch, host staging, recorded graphs, and the
// last call's statistics with the profiler.
//
// A forward call is split into steps of at most dims.step_tokens token rows
// (a sequence may straddle two steps: its first part goes into the KV cache,
// the second attends to it). Each step runs every layer over its rows; the
// rows of one sequence form a segment. Per layer, one mf_kv_write puts every
// segment's new keys and values into the cache's block pool (RoPE fused,
// through the slot mapping), and one mf_attention runs all segments over
// their keys: a slot's run of blocks (mf_session_forward), or the blocks a
// block table names (the serving engine's runs, mf_session_runner); the
// per-step index arrays (ids, positions, slot mapping, segment offsets and
// lengths, block tables) go to the device in one copy. All device scratch is
// carved from one arena when the session is created; a call allocates nothing.
//
// session.c creates it (sizes, scratch, workspaces) and holds the settings;
// step.c runs a forward call (checks, staging, the step loop, graphs, the LM
// head and read-back); forward.c runs one step through the layers.
#ifndef MF_RUNTIME_SESSION_H
#define MF_RUNTIME_SESSION_H

#include "backend.h"
#include "model/load/model.h"
#include "runtime/graph.h"
#include "runtime/kv_cache.h"

#ifdef __cplusplus
extern "C" {
#endif

// One sequence's run of token rows within a step.
typedef struct {
    int32_t seq;   // index of the sequence in the forward call (a runner's batch: its output row)
    int32_t slot;  // its KV-cache slot (a runner's batch: -1)
    int64_t row0;  // first row in the step
    int64_t n;     // rows (new tokens) in this step
    int64_t pos0;  // position of the first: tokens already in the slot's cache
    bool last;     // holds the sequence's last new token
} mf_fwd_seg;

// Sizes fixed when the session is created.
typedef struct {
    int64_t step_tokens;     // T: token rows per step
    int64_t n_rows;          // R = min(max_batch, T): segments, and LM-head rows, of a step at most
    int64_t logit_rows;      // LM head: rows per GEMM (MF_LOGITS_ALL)
    int64_t q_block;         // classic attention: query rows per scores block (0: flash)
    int64_t scores_ld;       // classic attention: row stride of scores / probs (max_seq rounded up to 8)
    int32_t block_size;      // tokens per KV block
    int32_t table_w;         // W: blocks a sequence can hold (a block table's width)
    int64_t slot_len;        // slot sessions: each slot's W block_size tokens (0: an engine's pool)
} mf_session_dims;

// Device scratch (act = the model dtype), carved from `arena`.
typedef struct {
    mf_arena *arena;
    mf_tensor h;             // (T, hidden) act: the residual stream
    mf_tensor n;             // (T, hidden) act: normed input of a block; the final hidden
    mf_tensor a;             // (T, hidden) act: a block's output (o / down projection), positions
    mf_tensor qkv;           // (T, (H + 2G) * D) act: q | k | v per row
    mf_tensor ctx;           // (T, H * D) act: attention output, heads side by side
    mf_tensor ff;            // (T, ffn or 2 * ffn) act: MLP inner activations (gate | up); MoE: unused
    // classic attention only (flash: unused, not allocated)
    mf_tensor q_hm;          // (H * q_block * D) act: a block's queries, head-major (GQA)
    mf_tensor scores;        // (H * q_block * scores_ld) f32: QK^T
    mf_tensor probs;         // (H * q_block * scores_ld) act: softmax output (CPU: scores itself)
    mf_tensor ctx_hm;        // (H * q_block * D) act: P.V, head-major (GQA)
    // The step's i32 index arrays: one buffer, one upload per step from host.step.
    mf_tensor step_i32;      // (3 T + 3 R + 1 + R W) i32: ids | pos | slot_map | seg_cu | seg_slot | seg_klen | tables
    mf_tensor ids, pos;      // (T) i32 views: token ids, positions
    mf_tensor slot_map;      // (T) i32 view: each row's row of the KV block pool
    mf_tensor seg_cu;        // (R + 1) i32 view: segment row offsets in the step
    mf_tensor seg_slot;      // (R) i32 view: each segment's slot
    mf_tensor seg_klen;      // (R) i32 view: keys each segment attends to (pos0 + n)
    mf_tensor tables;        // (R, W) i32 view: each segment's block table (runner steps only)
    // the LM head
    mf_tensor rows;          // (R) i32: rows gathered for the LM head
    mf_tensor gathered;      // (R, hidden) act
    mf_tensor logits;        // (logit_rows, vocab) f32
    mf_tensor argmax_out;    // (2 R) i32: for k rows, ids [0, k) | max values (f32) [k, 2k)
    mf_tensor topk_out;      // (R (2 MF_TOPK_MAX + 2)) i32: for k rows of K candidates, ids (k, K) |
                             // values (k, K) f32 | stats (k, 2) f32, packed for one read-back
    // separate allocations
    void *attn_ws;           // flash: split-KV workspace (NULL: none needed)
    size_t attn_ws_bytes;
    void *moe_ws;            // mixture of experts: mf_moe's workspace for T rows (NULL: dense model)
    size_t moe_ws_bytes;
} mf_session_scratch;

// Host state and staging.
typedef struct {
    int64_t *len;            // (max_batch) tokens in each slot's cache
    int32_t *step;           // (3 T + 3 R + 1 + R W) staging for step_i32
    int32_t *ids, *pos, *slot_map, *seg_cu, *seg_slot, *seg_klen, *tables; // views into step
    int64_t max_q, max_k;    // bounds of the step's segment lengths (for mf_attention)
    mf_fwd_seg *segs;        // (R) segments of a step
    int32_t *rows;           // (R) staging for rows
    int32_t *argmax;         // (2 R) staging for argmax_out
    int32_t *topk;           // (R (2 MF_TOPK_MAX + 2)) staging for topk_out
    int64_t kept_first, kept_rows; // the last call's rows [first, first + rows) whose logits are
                                   // still in logits rows [0, rows) (mf_session_read_logits)
    uint8_t *seen;           // (max_batch) duplicate-slot check
} mf_session_staging;

// The last forward call (mf_session_get_stats) and the profiler.
typedef struct {
    bool prof_on;
    mf_session_profiler prof;
    mf_op_hook hook;         // on the backend during a call: counts its ops (hook.ops), brackets them for prof
    int64_t launches;        // host-side launches (-1 while the call runs: then hook.ops)
    double t0, host_us;      // host_us < 0: not yet marked in this call
    bool graph;              // the call replayed a graph
    bool paged;              // the call reads keys through block tables (a runner's step)
} mf_session_calls;

struct mf_session {
    mf_model *m;
    mf_backend *be;
    int32_t max_batch;       // slots (an engine's session: sequences per step)
    int64_t max_seq;         // tokens per slot (an engine's session: per sequence)
    bool engine;             // made for an engine (mf_session_create_paged): no slots
    mf_session_dims dims;
    mf_kv_cache kv;
    mf_session_scratch dev;
    mf_session_staging host;
    mf_graph_cache graphs;
    mf_session_calls call;
};

// The backend, with `what` as the role of the ops queued next (the
// profiler's second name): mf_gemm(mf_role(s, "qkv"), &args).
static inline mf_backend *mf_role(struct mf_session *s, const char *what) {
    s->call.hook.what = what;
    return s->be;
}

// Rows [r0, r0 + n) of a tensor (its first dim).
static inline mf_tensor mf_rows_of(const mf_tensor *t, int64_t r0, int64_t n) {
    mf_tensor v = *t;
    v.data = (char *)t->data + r0 * t->stride[0] * (int64_t)mf_dtype_size(t->dtype);
    v.shape[0] = n;
    return v;
}

// Points the step's index views into dev.step_i32 (and host.step) for a step
// of T rows and n_segs segments: ids | pos | slot_map (T each) | seg_cu
// (n_segs + 1) | seg_slot | seg_klen (n_segs each) | tables (n_segs, W).
// Returns the i32 count before the tables (a slot step uploads only those).
static inline int64_t mf_step_views(struct mf_session *s, int64_t T, int32_t n_segs) {
    const int64_t off[7] = {0, T, 2 * T, 3 * T, 3 * T + n_segs + 1, 3 * T + 2 * (int64_t)n_segs + 1,
                            3 * T + 3 * (int64_t)n_segs + 1};
    mf_tensor *const v[7] = {&s->dev.ids,      &s->dev.pos,      &s->dev.slot_map, &s->dev.seg_cu,
                             &s->dev.seg_slot, &s->dev.seg_klen, &s->dev.tables};
    int32_t **const h[7] = {&s->host.ids,      &s->host.pos,      &s->host.slot_map, &s->host.seg_cu,
                            &s->host.seg_slot, &s->host.seg_klen, &s->host.tables};
    for (int i = 0; i < 7; i++) {
        *v[i] = s->dev.step_i32;
        v[i]->data = (int32_t *)s->dev.step_i32.data + off[i];
        v[i]->ndim = 1, v[i]->shape[0] = i < 3 ? T : i == 3 ? n_segs + 1 : n_segs, v[i]->stride[0] = 1;
        *h[i] = s->host.step + off[i];
    }
    s->dev.tables.ndim = 2, s->dev.tables.shape[1] = s->dims.table_w, s->dev.tables.stride[0] = s->dims.table_w;
    s->dev.tables.stride[1] = 1;
    return off[6];
}

#ifdef __cplusplus
}
#endif
#endif // MF_RUNTIME_SESSION_H
