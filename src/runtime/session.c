// Sessions: a KV block pool (slots, or an engine's), scratch carved once
// (sizes, device scratch, workspaces, host staging), settings and
// statistics. A call over a session is step.c's.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "ops/moe.h"
#include "runtime/session.h"

enum {
    kMaxStepTokens = 8192,  // token rows per step: bounds the activations (longer inputs are split)
    kMaxLogitRows = 64,     // LM-head rows per GEMM in MF_LOGITS_ALL mode (bounds the f32 logits buffer)
    kMaxBatch = 1 << 16,
    kSlotBlock = 64,        // a slot session's block size (docs/notes/engine.md): slots round up to it
};
static const int64_t kScoresBudget = (int64_t)256 << 20; // bytes of S (+ P) per attention block

// Sizes of a session of B slots (or an engine's B sequences a step) of S
// tokens, T token rows a step (0: min(B S, kMaxStepTokens)), blocks of bs tokens.
static void session_dims(const mf_model *m, int32_t B, int64_t S, int64_t T, int32_t bs, bool engine,
                         mf_session_dims *d) {
    if (T == 0) T = (int64_t)B * S < kMaxStepTokens ? (int64_t)B * S : kMaxStepTokens;
    *d = (mf_session_dims){.step_tokens = T, .n_rows = B < T ? B : T, .block_size = bs,
                           .table_w = (int32_t)((S + bs - 1) / bs)};
    d->slot_len = engine ? 0 : (int64_t)d->table_w * bs;
    if (m->attn == MF_ATTN_CLASSIC) { // the scores buffer: H x q_block x ld, within kScoresBudget
        d->scores_ld = (S + 7) / 8 * 8;
        const int64_t probs_es = m->dtype == MF_DTYPE_F32 ? 0 : (int64_t)mf_dtype_size(m->dtype);
        const int64_t per_row = (int64_t)m->spec.n_heads * d->scores_ld * (4 + probs_es);
        int64_t qb = kScoresBudget / per_row;
        const int64_t qmax = T < S ? T : S;
        if (qb > 64) qb = qb / 64 * 64; // whole 64-row tiles for the GEMMs
        d->q_block = qb < 1 ? 1 : qb > qmax ? qmax : qb;
    }
    d->logit_rows = T < kMaxLogitRows ? T : kMaxLogitRows;
    if (d->logit_rows < d->n_rows) d->logit_rows = d->n_rows;
}

// Carves s's scratch tensors from arena a, or (a NULL) only adds up their
// bytes: one list for both, so that the plan and the arena always agree.
typedef struct {
    mf_arena *a;
    int64_t bytes;
} carver;

static mf_status take(carver *c, mf_tensor *t, mf_dtype dt, int64_t rows, int64_t cols) {
    const int64_t shape[2] = {rows, cols};
    if (!c->a) {
        c->bytes += (rows * (cols ? cols : 1) * (int64_t)mf_dtype_size(dt) + 255) / 256 * 256;
        return MF_OK;
    }
    return mf_arena_tensor(c->a, dt, cols ? 2 : 1, shape, t);
}

static mf_status carve(mf_session_scratch *x, const mf_model *m, const mf_session_dims *d, carver *c) {
    const mf_dec_spec *sp = &m->spec;
    const mf_dtype dt = m->dtype;
    const int64_t T = d->step_tokens, R = d->n_rows, H = sp->n_heads, G = sp->n_kv_heads, D = sp->head_dim;
    // an MoE layer's inner activations are in its workspace (alloc_moe_workspace)
    const int64_t ff = sp->n_experts > 0 ? 0 : sp->gated_mlp ? 2 * (int64_t)sp->ffn : sp->ffn;
    MF_TRY(take(c, &x->h, dt, T, sp->hidden));
    MF_TRY(take(c, &x->n, dt, T, sp->hidden));
    MF_TRY(take(c, &x->a, dt, T, sp->hidden));
    MF_TRY(take(c, &x->qkv, dt, T, (H + 2 * G) * D));
    MF_TRY(take(c, &x->ctx, dt, T, H * D));
    if (ff > 0) MF_TRY(take(c, &x->ff, dt, T, ff));
    if (d->q_block > 0) { // classic attention's scratch
        const int64_t nsc = H * d->q_block * d->scores_ld;
        if (G != H) MF_TRY(take(c, &x->q_hm, dt, H * d->q_block * D, 0));
        MF_TRY(take(c, &x->scores, MF_DTYPE_F32, nsc, 0));
        if (dt == MF_DTYPE_F32)
            x->probs = x->scores;
        else
            MF_TRY(take(c, &x->probs, dt, nsc, 0));
        if (G != H) MF_TRY(take(c, &x->ctx_hm, dt, H * d->q_block * D, 0));
    }
    MF_TRY(take(c, &x->step_i32, MF_DTYPE_I32, 3 * T + 3 * R + 1 + R * d->table_w, 0));
    MF_TRY(take(c, &x->rows, MF_DTYPE_I32, R, 0));
    MF_TRY(take(c, &x->gathered, dt, R, sp->hidden));
    MF_TRY(take(c, &x->logits, MF_DTYPE_F32, d->logit_rows, sp->vocab));
    MF_TRY(take(c, &x->argmax_out, MF_DTYPE_I32, 2 * R, 0));
    MF_TRY(take(c, &x->topk_out, MF_DTYPE_I32, R * (2 * MF_TOPK_MAX + 2), 0));
    return MF_OK;
}

// Scratch bytes for a session of this size (arena capacity).
static int64_t scratch_bytes(const mf_model *m, const mf_session_dims *d) {
    mf_session_scratch tmp;
    memset(&tmp, 0, sizeof tmp);
    carver c = {0};
    (void)carve(&tmp, m, d, &c);
    return c.bytes;
}

static mf_status check_size(const char *fn, const mf_model *m, int32_t max_batch, int64_t max_seq) {
    if (max_batch < 1 || max_batch > kMaxBatch)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: max_batch %d not in [1, %d]", fn, max_batch, kMaxBatch);
    if (max_seq < 1 || max_seq > INT32_MAX)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: max_seq %lld not in [1, %d]", fn, (long long)max_seq, INT32_MAX);
    const mf_dec_spec *sp = &m->spec;
    if (sp->learned_pos && max_seq > sp->max_pos)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: max_seq %lld exceeds the model's %lld learned positions", fn,
                       (long long)max_seq, (long long)sp->max_pos);
    // The KV cache's byte count (and the scratch sized from the same
    // dimensions) must fit in int64: 2^62 bytes is far beyond any device.
    double kv = 2.0 * sp->n_layers * (double)max_batch * (double)max_seq * sp->n_kv_heads * sp->head_dim * 4.0;
    if (kv > 4611686018427387904.0) // 2^62
        return mf_fail(MF_ERR_INVALID_ARG, "%s: max_batch %d x max_seq %lld needs a %.3g-byte KV cache (over 2^62)",
                       fn, max_batch, (long long)max_seq, kv);
    return MF_OK;
}

// ---- workspaces ---------------------------------------------------------------------------------

// The split-KV workspace of the flash path: the most mf_attention could use
// for a step of up to R segments of a few queries each over up to max_seq
// keys (prefill steps need none; a smaller one only means fewer splits).
static mf_status alloc_attn_workspace(mf_session *s) {
    const mf_dec_spec *sp = &s->m->spec;
    const int64_t H = sp->n_heads, D = sp->head_dim, R = s->dims.n_rows;
    mf_step_views(s, s->dims.step_tokens, (int32_t)R);
    size_t most = 0;
    for (int64_t nq = 1; nq <= 16 && nq * R <= s->dims.step_tokens; nq *= 2) {
        mf_tensor q = s->dev.qkv, o = s->dev.ctx;
        q.ndim = o.ndim = 3;
        q.shape[0] = o.shape[0] = nq * R;
        q.shape[1] = o.shape[1] = H, q.shape[2] = o.shape[2] = D;
        q.stride[1] = o.stride[1] = D, q.stride[2] = o.stride[2] = 1;
        const mf_tensor cu = s->dev.seg_cu, slot = s->dev.seg_slot, klen = s->dev.seg_klen, tab = s->dev.tables;
        mf_attention_args a = {.o = o, .q = q, .cu_seqlens_q = &cu, .k_lens = &klen, .batch = (int32_t)R,
                               .max_q_len = nq, .max_k_len = s->max_seq, .scale = 1.0f / sqrtf((float)D),
                               .causal = true, .window = sp->sliding_window};
        if (s->engine) // the pool through block tables (the split-KV work is the same either way)
            a.k = mf_kv_cache_pool(&s->kv, 0, 0), a.v = mf_kv_cache_pool(&s->kv, 0, 1), a.block_table = &tab;
        else
            a.k = mf_kv_cache_slots(&s->kv, 0, 0, s->dims.slot_len), a.v = mf_kv_cache_slots(&s->kv, 0, 1, s->dims.slot_len),
            a.slots = &slot;
        size_t bytes = 0;
        MF_TRY(mf_attention_workspace(s->be, &a, &bytes));
        if (bytes > most) most = bytes;
    }
    if (most == 0) return MF_OK;
    MF_TRY(mf_backend_alloc(s->be, most, &s->dev.attn_ws));
    s->dev.attn_ws_bytes = most;
    return MF_OK;
}

// Layer l's mf_moe arguments for a step of T rows, x and out described at
// two placeholder addresses (never dereferenced): the workspace size and
// whether a graph can record the layer depend on shapes and dtypes only.
static mf_status moe_args_for(const mf_model *m, int32_t l, int64_t T, mf_moe_args *a) {
    mf_model_moe_args(m, l, a);
    const int64_t shape[2] = {T, m->spec.hidden};
    const int64_t span = T * m->spec.hidden * (int64_t)mf_dtype_size(m->dtype) + 256;
    const mf_device dev = a->w_router.device;
    MF_TRY(mf_tensor_make(&a->x, (void *)(uintptr_t)256, m->dtype, dev, 2, shape));
    return mf_tensor_make(&a->out, (void *)(uintptr_t)(256 + span), m->dtype, dev, 2, shape);
}

// Bytes of mf_moe's workspace for a step of T rows (the most any step uses:
// a smaller one fits in it), for layer 0's shapes (every layer has the same);
// 0 for a dense model.
static mf_status moe_ws_bytes(const mf_model *m, int64_t T, size_t *bytes) {
    *bytes = 0;
    if (m->spec.n_experts == 0) return MF_OK;
    mf_moe_args a;
    MF_TRY(moe_args_for(m, 0, T, &a));
    return mf_moe_workspace(m->be, &a, bytes);
}

static mf_status alloc_moe_workspace(mf_session *s) {
    size_t bytes = 0;
    MF_TRY(moe_ws_bytes(s->m, s->dims.step_tokens, &bytes));
    if (bytes == 0) return MF_OK;
    MF_TRY(mf_backend_alloc(s->be, bytes, &s->dev.moe_ws));
    s->dev.moe_ws_bytes = bytes;
    return MF_OK;
}

// ---- graphs -----------------------------------------------------------------------------------

// Graphs need a backend that records them and an attention whose launches do
// not depend on the sequence lengths: the flash path reads them from device
// memory; the classic path sizes its GEMMs by them on the host. A
// mixture-of-experts model is recorded only for decode steps of at most
// graphs.moe_rows sequences (see moe_graph_rows).
static bool graphs_possible(const mf_session *s) {
    return s->be->graph_begin != NULL && s->m->attn == MF_ATTN_FLASH;
}

// MoE models: the largest decode step (T sequences, one token each) whose
// every MoE layer queues no host sync, so that a graph can record it. On
// CUDA that is the experts' decode path (T * top_k <= MF_MOE_DECODE_MAX_ROWS
// assignments and shapes it takes, docs/notes/moe.md); above it the expert
// loop reads the expert offsets back to the host every layer and sizes each
// expert's GEMMs by them, which a replayed graph would freeze, so those
// steps run plainly. 0: no step is recorded (dense models do not ask).
static int32_t moe_graph_rows(const mf_session *s) {
    const mf_model *m = s->m;
    if (m->spec.n_experts == 0 || !s->be->graph_begin || !s->dev.moe_ws) return 0;
    int32_t best = 0;
    for (int64_t T = 1; T <= s->dims.step_tokens && T <= s->max_batch && T <= MF_MOE_DECODE_MAX_ROWS; T++) {
        for (int32_t l = 0; l < m->spec.n_layers; l++) {
            mf_moe_args a;
            if (moe_args_for(m, l, T, &a) != MF_OK) return best;
            a.workspace = s->dev.moe_ws, a.workspace_bytes = s->dev.moe_ws_bytes;
            if (!mf_moe_capturable(s->be, &a)) return best;
        }
        best = (int32_t)T;
    }
    return best;
}

// ---- create, free ---------------------------------------------------------------------------

mf_status mf_session_plan_memory(const mf_model *m, int32_t max_batch, int64_t max_seq, mf_session_plan *out) {
    static const char fn[] = "session_plan_memory";
    if (!m) return mf_fail(MF_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "%s: out is NULL", fn);
    MF_TRY(check_size(fn, m, max_batch, max_seq));
    const mf_dec_spec *sp = &m->spec;
    mf_session_dims d;
    session_dims(m, max_batch, max_seq, 0, kSlotBlock, false, &d);
    out->kv_bytes = mf_kv_cache_bytes(sp->n_layers, (int64_t)max_batch * d.table_w, d.block_size, sp->n_kv_heads,
                                      sp->head_dim, m->kv_dtype);
    out->scratch_bytes = scratch_bytes(m, &d);
    size_t moe = 0;
    MF_TRY(moe_ws_bytes(m, d.step_tokens, &moe));
    out->scratch_bytes += (int64_t)moe;
    out->step_tokens = d.step_tokens;
    return MF_OK;
}

// The host side: slot lengths and the staging buffers of a step.
static mf_status alloc_host(mf_session_staging *h, int32_t max_batch, const mf_session_dims *d) {
    const int64_t T = d->step_tokens, R = d->n_rows;
    h->len = mf_calloc((size_t)max_batch, sizeof *h->len);
    h->seen = mf_calloc((size_t)max_batch, 1);
    h->step = mf_malloc((size_t)(3 * T + 3 * R + 1 + R * d->table_w) * sizeof *h->step);
    h->rows = mf_malloc((size_t)R * sizeof *h->rows);
    h->argmax = mf_malloc((size_t)(2 * R) * sizeof *h->argmax);
    h->topk = mf_malloc((size_t)(R * (2 * MF_TOPK_MAX + 2)) * sizeof *h->topk);
    h->segs = mf_malloc((size_t)R * sizeof *h->segs);
    if (!h->len || !h->seen || !h->step || !h->rows || !h->argmax || !h->topk || !h->segs)
        return mf_fail(MF_ERR_OOM, "session_create: out of host memory for %d slots", max_batch);
    return MF_OK;
}

static mf_status alloc_scratch(mf_session *s) {
    const int64_t bytes = scratch_bytes(s->m, &s->dims);
    mf_status st = mf_arena_init(s->be, (size_t)bytes, &s->dev.arena);
    if (st != MF_OK) {
        char why[256]; // mf_fail writes the buffer mf_last_error() points to
        snprintf(why, sizeof why, "%s", mf_last_error());
        return mf_fail(st, "session_create: cannot allocate %.1f MB of scratch (max_batch %d, max_seq %lld): %s",
                       (double)bytes / 1e6, s->max_batch, (long long)s->max_seq, why);
    }
    carver c = {.a = s->dev.arena};
    return carve(&s->dev, s->m, &s->dims, &c);
}

// A session of max_batch slots of max_seq tokens (engine: a pool of
// n_blocks blocks for max_batch sequences a step), T rows a step (0: the default).
static mf_status create(const char *fn, mf_model *m, int32_t max_batch, int64_t max_seq, int64_t T, int32_t n_blocks,
                        int32_t bs, bool engine, mf_session **out) {
    mf_session *s = mf_calloc(1, sizeof *s);
    if (!s) return mf_fail(MF_ERR_OOM, "%s: out of host memory", fn);
    const mf_dec_spec *sp = &m->spec;
    s->m = m;
    s->be = m->be;
    s->max_batch = max_batch;
    s->max_seq = max_seq;
    s->engine = engine;
    session_dims(m, max_batch, max_seq, T, bs, engine, &s->dims);
    s->graphs.on = graphs_possible(s);
    const int64_t blocks = engine ? n_blocks : (int64_t)max_batch * s->dims.table_w;
    // the KV cache first: it is the allocation a size fails on, and its message says so
    mf_status st = MF_OK;
    if (blocks > INT32_MAX) // beyond any memory (2^31 blocks of 64 tokens)
        st = mf_fail(MF_ERR_OOM, "%s: cannot allocate the KV cache (%.3g bytes: %d layers x %lld blocks of %d tokens)", fn,
                     (double)mf_kv_cache_bytes(sp->n_layers, blocks, bs, sp->n_kv_heads, sp->head_dim, m->kv_dtype),
                     sp->n_layers, (long long)blocks, bs);
    if (st == MF_OK)
        st = mf_kv_cache_init(&s->kv, s->be, m->kv_dtype, sp->n_layers, (int32_t)blocks, bs, sp->n_kv_heads, sp->head_dim);
    if (st == MF_OK) st = alloc_host(&s->host, max_batch, &s->dims);
    if (st == MF_OK) st = alloc_scratch(s);
    if (st == MF_OK && m->attn == MF_ATTN_FLASH) st = alloc_attn_workspace(s);
    if (st == MF_OK) st = alloc_moe_workspace(s);
    if (st == MF_OK) s->graphs.moe_rows = moe_graph_rows(s);
    if (st != MF_OK) {
        mf_session_free(s);
        return st;
    }
    *out = s;
    return MF_OK;
}

mf_status mf_session_create(mf_model *m, int32_t max_batch, int64_t max_seq, mf_session **out) {
    static const char fn[] = "session_create";
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!m) return mf_fail(MF_ERR_INVALID_ARG, "%s: model is NULL", fn);
    MF_TRY(check_size(fn, m, max_batch, max_seq));
    return create(fn, m, max_batch, max_seq, 0, 0, kSlotBlock, false, out);
}

mf_status mf_session_create_paged(mf_model *m, int32_t max_seqs, int64_t max_model_len, int64_t max_tokens,
                                  int32_t n_blocks, int32_t block_size, mf_session **out) {
    static const char fn[] = "session_create_paged";
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!m) return mf_fail(MF_ERR_INVALID_ARG, "%s: model is NULL", fn);
    MF_TRY(check_size(fn, m, max_seqs, max_model_len));
    if (m->attn != MF_ATTN_FLASH)
        return mf_fail(MF_ERR_UNSUPPORTED, "%s: the serving engine runs flash attention (the model was loaded with attn "
                       "classic)", fn);
    if (max_tokens < 1 || max_tokens > (1 << 20) || n_blocks < 1 || block_size < 1 ||
        (int64_t)n_blocks * block_size > INT32_MAX)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: max_tokens %lld, %d blocks of %d tokens", fn, (long long)max_tokens,
                       n_blocks, block_size);
    return create(fn, m, max_seqs, max_model_len, max_tokens, n_blocks, block_size, true, out);
}

void mf_session_free(mf_session *s) {
    if (!s) return;
    mf_kv_cache_free(&s->kv);
    mf_arena_free(s->dev.arena);
    mf_graph_drop_all(&s->graphs, s->be);
    if (s->dev.attn_ws) mf_backend_dealloc(s->be, s->dev.attn_ws);
    if (s->dev.moe_ws) mf_backend_dealloc(s->be, s->dev.moe_ws);
    mf_session_staging *h = &s->host;
    free(h->len), free(h->seen), free(h->step), free(h->rows), free(h->argmax), free(h->topk), free(h->segs);
    free(s);
}

// ---- slots, settings, statistics ------------------------------------------------------------

mf_status mf_session_reset(mf_session *s, int32_t seq) {
    if (!s) return mf_fail(MF_ERR_INVALID_ARG, "session_reset: session is NULL");
    if (seq < -1 || seq >= s->max_batch)
        return mf_fail(MF_ERR_INVALID_ARG, "session_reset: slot %d not in [0, %d) (or -1 for all)", seq, s->max_batch);
    if (seq == -1)
        memset(s->host.len, 0, (size_t)s->max_batch * sizeof *s->host.len);
    else
        s->host.len[seq] = 0;
    return MF_OK;
}

int64_t mf_session_seq_len(const mf_session *s, int32_t seq) {
    if (!s) {
        mf_fail(MF_ERR_INVALID_ARG, "session_seq_len: session is NULL");
        return -1;
    }
    if (seq < 0 || seq >= s->max_batch) {
        mf_fail(MF_ERR_INVALID_ARG, "session_seq_len: slot %d not in [0, %d)", seq, s->max_batch);
        return -1;
    }
    return s->host.len[seq];
}

int64_t mf_session_bytes(const mf_session *s) {
    if (!s) return 0;
    return s->kv.bytes + (int64_t)mf_arena_peak(s->dev.arena) + (int64_t)s->dev.moe_ws_bytes;
}

mf_model *mf_session_model(const mf_session *s) { return s ? s->m : NULL; }
int32_t mf_session_max_batch(const mf_session *s) { return s ? s->max_batch : 0; }
int64_t mf_session_max_seq(const mf_session *s) { return s ? s->max_seq : 0; }

mf_status mf_session_set_profiler(mf_session *s, const mf_session_profiler *p) {
    if (!s) return mf_fail(MF_ERR_INVALID_ARG, "session_set_profiler: session is NULL");
    if (p && (!p->begin) != (!p->end))
        return mf_fail(MF_ERR_INVALID_ARG, "session_set_profiler: give both begin and end (or neither)");
    if (p && p->begin) {
        s->call.prof = *p;
        s->call.prof_on = true;
    } else {
        memset(&s->call.prof, 0, sizeof s->call.prof);
        s->call.prof_on = false;
    }
    return MF_OK;
}

mf_status mf_session_set_graphs(mf_session *s, bool on) {
    if (!s) return mf_fail(MF_ERR_INVALID_ARG, "session_set_graphs: session is NULL");
    if (!on) mf_graph_drop_all(&s->graphs, s->be);
    s->graphs.on = on && graphs_possible(s);
    if (on) s->graphs.off[0] = '\0';
    return MF_OK;
}

mf_status mf_session_get_stats(const mf_session *s, mf_session_stats *out) {
    if (!s) return mf_fail(MF_ERR_INVALID_ARG, "session_get_stats: session is NULL");
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "session_get_stats: out is NULL");
    const mf_session_calls *c = &s->call;
    *out = (mf_session_stats){.ops = c->hook.ops, .launches = c->launches, .host_us = c->host_us < 0 ? 0 : c->host_us,
                              .graph = c->graph, .graphs_recorded = s->graphs.recorded,
                              .graphs_replayed = s->graphs.replayed};
    memcpy(out->graphs_off, s->graphs.off, sizeof out->graphs_off);
    return MF_OK;
}
