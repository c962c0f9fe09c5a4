// Sessions: slots with a KV cache, scratch carved once, and mf_session_forward
// (argument checks, splitting into steps, the LM head for the rows asked for).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "backend.h"
#include "core/error.h"
#include "runtime/session.h"

enum {
    kMaxStepTokens = 8192,  // token rows per step: bounds the activations (longer inputs are split)
    kMaxLogitRows = 64,     // LM-head rows per GEMM in MF_LOGITS_ALL mode (bounds the f32 logits buffer)
    kMaxBatch = 1 << 16,
};
static const int64_t kScoresBudget = (int64_t)256 << 20; // bytes of S (+ P) per attention block

typedef struct {
    int64_t T, q_block, ld, n_rows, logit_rows;
} mf_session_dims;

static void session_dims(const mf_model *m, int32_t B, int64_t S, mf_session_dims *d) {
    const int64_t bs = (int64_t)B * S;
    d->T = bs < kMaxStepTokens ? bs : kMaxStepTokens;
    d->q_block = 0, d->ld = 0;
    if (m->attn == MF_ATTN_CLASSIC) { // the scores buffer: H x q_block x ld, within kScoresBudget
        d->ld = (S + 7) / 8 * 8;
        const int64_t probs_es = m->dtype == MF_DTYPE_F32 ? 0 : (int64_t)mf_dtype_size(m->dtype);
        const int64_t per_row = (int64_t)m->spec.n_heads * d->ld * (4 + probs_es);
        int64_t qb = kScoresBudget / per_row;
        const int64_t qmax = d->T < S ? d->T : S;
        if (qb > 64) qb = qb / 64 * 64; // whole 64-row tiles for the GEMMs
        d->q_block = qb < 1 ? 1 : qb > qmax ? qmax : qb;
    }
    d->n_rows = B < d->T ? B : d->T;
    d->logit_rows = d->T < kMaxLogitRows ? d->T : kMaxLogitRows;
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

// A 1-D i32 view of n elements at element e of buffer b.
static mf_tensor i32_part(const mf_tensor *b, int64_t e, int64_t n) {
    mf_tensor t = *b;
    t.data = (int32_t *)b->data + e;
    t.ndim = 1, t.shape[0] = n, t.stride[0] = 1;
    return t;
}

// Points the step's device index views into s->step_i32 for a step of T
// rows and n_segs segments (the packing of mf_session_forward).
static void step_views(mf_session *s, int64_t T, int32_t n_segs) {
    s->ids = i32_part(&s->step_i32, 0, T);
    s->pos = i32_part(&s->step_i32, T, T);
    s->tok_slot = i32_part(&s->step_i32, 2 * T, T);
    s->seg_cu = i32_part(&s->step_i32, 3 * T, n_segs + 1);
    s->seg_slot = i32_part(&s->step_i32, 3 * T + n_segs + 1, n_segs);
    s->seg_klen = i32_part(&s->step_i32, 3 * T + 2 * (int64_t)n_segs + 1, n_segs);
}

static mf_status carve(mf_session *s, const mf_model *m, const mf_session_dims *d, carver *c) {
    const mf_dec_spec *sp = &m->spec;
    const mf_dtype dt = m->dtype;
    const int64_t T = d->T, R = d->n_rows, H = sp->n_heads, G = sp->n_kv_heads, D = sp->head_dim;
    // an MoE layer's inner activations are in its workspace (alloc_moe_workspace)
    const int64_t ff = sp->n_experts > 0 ? 0 : sp->gated_mlp ? 2 * (int64_t)sp->ffn : sp->ffn;
    MF_TRY(take(c, &s->h, dt, T, sp->hidden));
    MF_TRY(take(c, &s->n, dt, T, sp->hidden));
    MF_TRY(take(c, &s->a, dt, T, sp->hidden));
    MF_TRY(take(c, &s->qkv, dt, T, (H + 2 * G) * D));
    MF_TRY(take(c, &s->ctx, dt, T, H * D));
    if (ff > 0) MF_TRY(take(c, &s->ff, dt, T, ff));
    if (d->q_block > 0) { // classic attention's scratch
        const int64_t nsc = H * d->q_block * d->ld;
        if (G != H) MF_TRY(take(c, &s->q_hm, dt, H * d->q_block * D, 0));
        MF_TRY(take(c, &s->scores, MF_DTYPE_F32, nsc, 0));
        if (dt == MF_DTYPE_F32)
            s->probs = s->scores;
        else
            MF_TRY(take(c, &s->probs, dt, nsc, 0));
        if (G != H) MF_TRY(take(c, &s->ctx_hm, dt, H * d->q_block * D, 0));
    }
    MF_TRY(take(c, &s->step_i32, MF_DTYPE_I32, 3 * T + 3 * R + 1, 0));
    if (c->a) step_views(s, T, (int32_t)R);
    MF_TRY(take(c, &s->rows, MF_DTYPE_I32, R, 0));
    MF_TRY(take(c, &s->gathered, dt, R, sp->hidden));
    MF_TRY(take(c, &s->logits, MF_DTYPE_F32, d->logit_rows, sp->vocab));
    MF_TRY(take(c, &s->argmax_out, MF_DTYPE_I32, 2 * R, 0));
    MF_TRY(take(c, &s->topk_out, MF_DTYPE_I32, R * (2 * MF_TOPK_MAX + 2), 0));
    return MF_OK;
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

static void graph_drop(mf_session *s, int i);
static mf_status moe_ws_bytes(const mf_model *m, int64_t T, size_t *bytes);

// Graphs need a backend that records them and an attention whose launches do
// not depend on the sequence lengths: the flash path reads them from device
// memory; the classic path sizes its GEMMs by them on the host. A
// mixture-of-experts model is recorded only for decode steps of at most
// s->moe_graph_rows sequences (see moe_graph_rows).
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
    if (m->spec.n_experts == 0 || !s->be->graph_begin || !s->moe_ws) return 0;
    int32_t best = 0;
    for (int64_t T = 1; T <= s->step_tokens && T <= s->max_batch && T <= MF_MOE_DECODE_MAX_ROWS; T++) {
        const int64_t shape[2] = {T, m->spec.hidden};
        const int64_t span = T * m->spec.hidden * (int64_t)mf_dtype_size(m->dtype) + 256;
        for (int32_t l = 0; l < m->spec.n_layers; l++) {
            mf_moe_layer ml;
            mf_moe_routing r;
            mf_forward_moe_layer(m, l, &ml, &r);
            mf_tensor x, out; // placeholders: only the shapes matter (as in moe_ws_bytes)
            if (mf_tensor_make(&x, (void *)(uintptr_t)256, m->dtype, ml.router.device, 2, shape) != MF_OK ||
                mf_tensor_make(&out, (void *)(uintptr_t)(256 + span), m->dtype, ml.router.device, 2, shape) != MF_OK ||
                !mf_moe_block_capturable(s->be, &ml, &r, &x, &out, s->moe_ws, s->moe_ws_bytes))
                return best;
        }
        best = (int32_t)T;
    }
    return best;
}

// Scratch bytes for a session of this size (arena capacity).
static int64_t scratch_bytes(const mf_model *m, int32_t B, int64_t S) {
    mf_session_dims d;
    session_dims(m, B, S, &d);
    mf_session tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.max_seq = S;
    carver c = {0};
    (void)carve(&tmp, m, &d, &c);
    return c.bytes;
}

mf_status mf_session_plan_memory(const mf_model *m, int32_t max_batch, int64_t max_seq, mf_session_plan *out) {
    static const char fn[] = "session_plan_memory";
    if (!m) return mf_fail(MF_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "%s: out is NULL", fn);
    MF_TRY(check_size(fn, m, max_batch, max_seq));
    const mf_dec_spec *sp = &m->spec;
    mf_session_dims d;
    session_dims(m, max_batch, max_seq, &d);
    out->kv_bytes = mf_kv_cache_bytes(sp->n_layers, max_batch, max_seq, sp->n_kv_heads, sp->head_dim, m->dtype);
    out->scratch_bytes = scratch_bytes(m, max_batch, max_seq);
    size_t moe = 0;
    MF_TRY(moe_ws_bytes(m, d.T, &moe));
    out->scratch_bytes += (int64_t)moe;
    out->step_tokens = d.T;
    return MF_OK;
}

// The split-KV workspace of the flash path: the most mf_attention could use
// for a step of up to R segments of a few queries each over up to max_seq
// keys (prefill steps need none; a smaller one only means fewer splits).
static mf_status alloc_attn_workspace(mf_session *s, const mf_session_dims *d) {
    const mf_dec_spec *sp = &s->m->spec;
    const int64_t H = sp->n_heads, G = sp->n_kv_heads, D = sp->head_dim, R = d->n_rows;
    size_t most = 0;
    for (int64_t nq = 1; nq <= 16 && nq * R <= d->T; nq *= 2) {
        mf_tensor q = s->qkv, o = s->ctx;
        q.ndim = o.ndim = 3;
        q.shape[0] = o.shape[0] = nq * R;
        q.shape[1] = o.shape[1] = H, q.shape[2] = o.shape[2] = D;
        q.stride[1] = o.stride[1] = D, q.stride[2] = o.stride[2] = 1;
        const mf_tensor cu = s->seg_cu, slot = s->seg_slot, klen = s->seg_klen;
        mf_attention_args a = {.q = q, .k = mf_kv_cache_layer(&s->kv, 0, 0), .v = mf_kv_cache_layer(&s->kv, 0, 1),
                               .o = o, .cu_seqlens_q = &cu, .k_lens = &klen, .slots = &slot, .batch = (int32_t)R,
                               .max_q_len = nq, .max_k_len = s->max_seq, .scale = 1.0f / sqrtf((float)D),
                               .causal = true, .window = sp->sliding_window};
        size_t bytes = 0;
        MF_TRY(mf_attention_workspace(s->be, &a, &bytes));
        if (bytes > most) most = bytes;
    }
    (void)G;
    if (most == 0) return MF_OK;
    mf_status st = mf_backend_alloc(s->be, most, &s->attn_ws);
    if (st != MF_OK) return st;
    s->attn_ws_bytes = most;
    return MF_OK;
}

// Bytes of mf_moe's workspace for a step of T rows (the most any step uses:
// a smaller one fits in it), for layer 0's shapes (every layer has the same);
// 0 for a dense model. The size depends on shapes and dtypes only: x and out
// are described at two placeholder addresses, never dereferenced.
static mf_status moe_ws_bytes(const mf_model *m, int64_t T, size_t *bytes) {
    *bytes = 0;
    if (m->spec.n_experts == 0) return MF_OK;
    mf_moe_layer ml;
    mf_moe_routing r;
    mf_forward_moe_layer(m, 0, &ml, &r);
    const int64_t shape[2] = {T, m->spec.hidden};
    const int64_t span = T * m->spec.hidden * (int64_t)mf_dtype_size(m->dtype) + 256;
    mf_tensor x, out;
    MF_TRY(mf_tensor_make(&x, (void *)(uintptr_t)256, m->dtype, ml.router.device, 2, shape));
    MF_TRY(mf_tensor_make(&out, (void *)(uintptr_t)(256 + span), m->dtype, ml.router.device, 2, shape));
    return mf_moe_block_workspace(m->be, &ml, &r, &x, &out, bytes);
}

static mf_status alloc_moe_workspace(mf_session *s, const mf_session_dims *d) {
    size_t bytes = 0;
    MF_TRY(moe_ws_bytes(s->m, d->T, &bytes));
    if (bytes == 0) return MF_OK;
    MF_TRY(mf_backend_alloc(s->be, bytes, &s->moe_ws));
    s->moe_ws_bytes = bytes;
    return MF_OK;
}

mf_status mf_session_create(mf_model *m, int32_t max_batch, int64_t max_seq, mf_session **out) {
    static const char fn[] = "session_create";
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!m) return mf_fail(MF_ERR_INVALID_ARG, "%s: model is NULL", fn);
    MF_TRY(check_size(fn, m, max_batch, max_seq));
    mf_session *s = mf_calloc(1, sizeof *s);
    if (!s) return mf_fail(MF_ERR_OOM, "%s: out of host memory", fn);
    const mf_dec_spec *sp = &m->spec;
    mf_session_dims d;
    session_dims(m, max_batch, max_seq, &d);
    s->m = m;
    s->be = m->be;
    s->max_batch = max_batch;
    s->max_seq = max_seq;
    s->step_tokens = d.T;
    s->q_block = d.q_block;
    s->logit_rows = d.logit_rows;
    s->scores_ld = d.ld;
    s->attention = m->attn == MF_ATTN_CLASSIC ? mf_attention_classic : mf_attention_flash;
    s->graphs = graphs_possible(s);

    mf_status st = MF_OK;
    const int64_t T = d.T, R = d.n_rows;
    s->len = mf_calloc((size_t)max_batch, sizeof *s->len);
    s->seen = mf_calloc((size_t)max_batch, 1);
    s->h_step = mf_malloc((size_t)(3 * T + 3 * R + 1) * sizeof *s->h_step);
    s->h_rows = mf_malloc((size_t)R * sizeof *s->h_rows);
    s->h_argmax = mf_malloc((size_t)(2 * R) * sizeof *s->h_argmax);
    s->h_topk = mf_malloc((size_t)(R * (2 * MF_TOPK_MAX + 2)) * sizeof *s->h_topk);
    s->segs = mf_malloc((size_t)R * sizeof *s->segs);
    if (!s->len || !s->seen || !s->h_step || !s->h_rows || !s->h_argmax || !s->h_topk || !s->segs)
        st = mf_fail(MF_ERR_OOM, "%s: out of host memory for %d slots", fn, max_batch);

    if (st == MF_OK)
        st = mf_kv_cache_init(&s->kv, s->be, m->dtype, sp->n_layers, max_batch, max_seq, sp->n_kv_heads, sp->head_dim);
    if (st == MF_OK) {
        const int64_t bytes = scratch_bytes(m, max_batch, max_seq);
        st = mf_arena_init(s->be, (size_t)bytes, &s->arena);
        if (st != MF_OK) {
            char why[256]; // mf_fail writes the buffer mf_last_error() points to
            snprintf(why, sizeof why, "%s", mf_last_error());
            st = mf_fail(st, "%s: cannot allocate %.1f MB of scratch (max_batch %d, max_seq %lld): %s", fn,
                         (double)bytes / 1e6, max_batch, (long long)max_seq, why);
        }
    }
    if (st == MF_OK) {
        carver c = {.a = s->arena};
        st = carve(s, m, &d, &c);
    }
    if (st == MF_OK && m->attn == MF_ATTN_FLASH) st = alloc_attn_workspace(s, &d);
    if (st == MF_OK) st = alloc_moe_workspace(s, &d);
    if (st == MF_OK) s->moe_graph_rows = moe_graph_rows(s);
    if (st != MF_OK) {
        mf_session_free(s);
        return st;
    }
    *out = s;
    return MF_OK;
}

void mf_session_free(mf_session *s) {
    if (!s) return;
    mf_kv_cache_free(&s->kv);
    mf_arena_free(s->arena);
    for (int i = 0; i < MF_SESSION_GRAPHS; i++) graph_drop(s, i);
    if (s->attn_ws) mf_backend_dealloc(s->be, s->attn_ws);
    if (s->moe_ws) mf_backend_dealloc(s->be, s->moe_ws);
    free(s->len);
    free(s->seen);
    free(s->h_step);
    free(s->h_rows);
    free(s->h_argmax);
    free(s->h_topk);
    free(s->segs);
    free(s);
}

mf_status mf_session_reset(mf_session *s, int32_t seq) {
    if (!s) return mf_fail(MF_ERR_INVALID_ARG, "session_reset: session is NULL");
    if (seq < -1 || seq >= s->max_batch)
        return mf_fail(MF_ERR_INVALID_ARG, "session_reset: slot %d not in [0, %d) (or -1 for all)", seq, s->max_batch);
    if (seq == -1)
        memset(s->len, 0, (size_t)s->max_batch * sizeof *s->len);
    else
        s->len[seq] = 0;
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
    return s->len[seq];
}

int64_t mf_session_bytes(const mf_session *s) {
    if (!s) return 0;
    return s->kv.bytes + (int64_t)mf_arena_peak(s->arena) + (int64_t)s->moe_ws_bytes;
}

mf_model *mf_session_model(const mf_session *s) { return s ? s->m : NULL; }
int32_t mf_session_max_batch(const mf_session *s) { return s ? s->max_batch : 0; }
int64_t mf_session_max_seq(const mf_session *s) { return s ? s->max_seq : 0; }

mf_status mf_session_set_profiler(mf_session *s, const mf_session_profiler *p) {
    if (!s) return mf_fail(MF_ERR_INVALID_ARG, "session_set_profiler: session is NULL");
    if (p && (!p->begin) != (!p->end))
        return mf_fail(MF_ERR_INVALID_ARG, "session_set_profiler: give both begin and end (or neither)");
    if (p && p->begin) {
        s->prof = *p;
        s->prof_on = true;
    } else {
        memset(&s->prof, 0, sizeof s->prof);
        s->prof_on = false;
    }
    return MF_OK;
}

// Every argument, before anything runs (so that errors leave the caches as they were).
static mf_status check_forward(const char *fn, mf_session *s, int32_t n_seqs, const int32_t *seq_ids,
                               const int32_t *tokens, const int64_t *offsets, mf_logits_mode mode) {
    if (!s) return mf_fail(MF_ERR_INVALID_ARG, "%s: session is NULL", fn);
    if (n_seqs < 1 || n_seqs > s->max_batch)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: n_seqs %d not in [1, max_batch %d]", fn, n_seqs, s->max_batch);
    if (!seq_ids || !tokens || !offsets)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: %s is NULL", fn, !seq_ids ? "seq_ids" : !tokens ? "tokens" : "offsets");
    if (mode != MF_LOGITS_LAST && mode != MF_LOGITS_ALL)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: invalid logits mode %d", fn, (int)mode);
    if (offsets[0] != 0) return mf_fail(MF_ERR_INVALID_ARG, "%s: offsets[0] = %lld (want 0)", fn, (long long)offsets[0]);
    mf_status st = MF_OK;
    memset(s->seen, 0, (size_t)s->max_batch);
    for (int32_t i = 0; i < n_seqs && st == MF_OK; i++) {
        const int32_t slot = seq_ids[i];
        const int64_t n = offsets[i + 1] - offsets[i];
        if (slot < 0 || slot >= s->max_batch)
            st = mf_fail(MF_ERR_INVALID_ARG, "%s: seq_ids[%d] = %d: slot out of range [0, %d)", fn, i, slot, s->max_batch);
        else if (s->seen[slot])
            st = mf_fail(MF_ERR_INVALID_ARG, "%s: slot %d given twice (seq_ids[%d])", fn, slot, i);
        else if (n < 1)
            st = mf_fail(MF_ERR_INVALID_ARG, "%s: sequence %d (slot %d) has no new tokens (offsets[%d] = %lld, offsets[%d] = %lld)",
                         fn, i, slot, i, (long long)offsets[i], i + 1, (long long)offsets[i + 1]);
        else if (n > s->max_seq - s->len[slot])
            st = mf_fail(MF_ERR_INVALID_ARG,
                         "%s: sequence %d (slot %d): %lld cached + %lld new tokens exceed max_seq %lld", fn, i, slot,
                         (long long)s->len[slot], (long long)n, (long long)s->max_seq);
        if (st == MF_OK) s->seen[slot] = 1;
    }
    if (st != MF_OK) return st;
    const int64_t vocab = s->m->spec.vocab;
    for (int32_t i = 0; i < n_seqs; i++)
        for (int64_t j = offsets[i]; j < offsets[i + 1]; j++)
            if (tokens[j] < 0 || tokens[j] >= vocab)
                return mf_fail(MF_ERR_INVALID_ARG, "%s: token id %d at tokens[%lld] (sequence %d) is outside [0, vocab %lld)",
                               fn, tokens[j], (long long)j, i, (long long)vocab);
    return MF_OK;
}

// Rows the LM head needs in this step (MF_LOGITS_LAST): the last new token of
// each sequence that ends here. Returns the count; *first: that first sequence.
static int32_t last_rows(mf_session *s, int32_t n_segs, int32_t *first) {
    int32_t k = 0;
    *first = -1;
    for (int32_t i = 0; i < n_segs; i++) {
        const mf_fwd_seg *g = &s->segs[i];
        if (!g->last) continue;
        if (*first < 0) *first = g->seq;
        s->h_rows[k++] = (int32_t)(g->row0 + g->n - 1);
    }
    return k;
}

// The segments of the step over input tokens [c0, c1) (sequences from i0 on)
// into s->segs, and its index arrays packed into s->h_step, uploaded in one
// copy: ids | pos | tok_slot (T each) | seg_cu (n_segs + 1) | seg_slot |
// seg_klen (n_segs each). Returns the segment count in *n_segs.
static mf_status stage_step(mf_session *s, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                            const int64_t *offsets, int32_t i0, int64_t c0, int64_t c1, int32_t *n_segs_out) {
    const int64_t T = c1 - c0;
    s->h_ids = s->h_step, s->h_pos = s->h_step + T, s->h_tok_slot = s->h_step + 2 * T;
    int32_t n_segs = 0;
    s->step_max_q = 0, s->step_max_k = 0;
    for (int32_t i = i0; i < n_seqs && offsets[i] < c1; i++) {
        const int64_t a = offsets[i] > c0 ? offsets[i] : c0, b = offsets[i + 1] < c1 ? offsets[i + 1] : c1;
        if (b <= a) continue;
        mf_fwd_seg *g = &s->segs[n_segs++];
        g->seq = i, g->slot = seq_ids[i], g->row0 = a - c0, g->n = b - a;
        g->pos0 = s->len[g->slot] + (a - offsets[i]);
        g->last = b == offsets[i + 1];
        for (int64_t r = a; r < b; r++) {
            s->h_ids[r - c0] = tokens[r];
            s->h_pos[r - c0] = (int32_t)(g->pos0 + (r - a));
            s->h_tok_slot[r - c0] = g->slot;
        }
        if (g->n > s->step_max_q) s->step_max_q = g->n;
        if (g->pos0 + g->n > s->step_max_k) s->step_max_k = g->pos0 + g->n;
    }
    s->h_seg_cu = s->h_step + 3 * T, s->h_seg_slot = s->h_seg_cu + n_segs + 1;
    s->h_seg_klen = s->h_seg_slot + n_segs;
    s->h_seg_cu[0] = 0;
    for (int32_t i = 0; i < n_segs; i++) {
        const mf_fwd_seg *g = &s->segs[i];
        s->h_seg_cu[i + 1] = (int32_t)(g->row0 + g->n);
        s->h_seg_slot[i] = g->slot;
        s->h_seg_klen[i] = (int32_t)(g->pos0 + g->n);
    }
    step_views(s, T, n_segs);
    *n_segs_out = n_segs;
    const size_t n_i32 = (size_t)(3 * T + 3 * (int64_t)n_segs + 1);
    mf_op_begin(mf_role(s, "step"), "h2d");
    mf_status st = mf_backend_copy(s->be, s->step_i32.data, s->h_step, n_i32 * sizeof(int32_t), MF_COPY_H2D);
    mf_op_end(s->be, "h2d");
    return st;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

// The host time of this call up to now, the first time it is asked: all of
// the call's work is queued, what follows waits for the device.
void mf_session_mark_queued(mf_session *s) {
    if (s->call_host_us < 0) s->call_host_us = now_us() - s->call_t0;
}

// ---- what comes back: logits, their argmax, or top-k candidates ----------------------------------

typedef enum { FWD_LOGITS = 0, FWD_ARGMAX = 1, FWD_TOPK = 2 } fwd_kind;

// What a forward call hands to the host for the LM head's rows (each
// sequence's last new token in MF_LOGITS_LAST mode).
typedef struct {
    fwd_kind kind;
    float *logits;  // (rows, vocab) host, FWD_LOGITS
    int32_t *ids;   // (rows) host, FWD_ARGMAX; (rows, k) FWD_TOPK
    float *vals;    // (rows) host or NULL, FWD_ARGMAX; (rows, k) FWD_TOPK
    float *stats;   // (rows, 2) host, FWD_TOPK
    int32_t k;      // FWD_TOPK: candidates per row
    float scale;    // FWD_TOPK: mf_topk's scale
} fwd_out;

// Queues the LM head over x (k <= s->logit_rows rows): logits into s->logits,
// and for an argmax or top-k output that reduction into s->argmax_out / s->topk_out.
static mf_status head_queue(mf_session *s, const mf_tensor *x, const fwd_out *out) {
    MF_TRY(mf_forward_lm_head_gemm(s, x));
    if (out->kind == FWD_ARGMAX) return mf_forward_lm_head_argmax(s, x->shape[0]);
    if (out->kind == FWD_TOPK) return mf_forward_lm_head_topk(s, x->shape[0], out->k, out->scale);
    return MF_OK;
}

// Reads what head_queue left for k rows into out's rows [r0, r0 + k): k x
// vocab f32 logits, or the argmax / top-k outputs in one copy. Those rows'
// logits stay in s->logits until the next call (mf_session_read_logits).
static mf_status head_read(mf_session *s, int64_t k, const fwd_out *out, int64_t r0) {
    static const char *const what_of[] = {"logits", "argmax", "topk"};
    const char *what = what_of[out->kind];
    mf_session_mark_queued(s);
    mf_op_begin(mf_role(s, what), "d2h");
    mf_status st;
    if (out->kind == FWD_LOGITS) {
        const int64_t vocab = s->m->spec.vocab;
        st = mf_backend_copy(s->be, out->logits + r0 * vocab, s->logits.data, (size_t)(k * vocab) * sizeof(float),
                             MF_COPY_D2H);
    } else if (out->kind == FWD_ARGMAX) {
        st = mf_backend_copy(s->be, s->h_argmax, s->argmax_out.data, (size_t)(2 * k) * sizeof(int32_t), MF_COPY_D2H);
        if (st == MF_OK) {
            memcpy(out->ids + r0, s->h_argmax, (size_t)k * sizeof(int32_t));
            if (out->vals) memcpy(out->vals + r0, s->h_argmax + k, (size_t)k * sizeof(float));
        }
    } else {
        const int64_t K = out->k;
        st = mf_backend_copy(s->be, s->h_topk, s->topk_out.data, (size_t)(2 * k * K + 2 * k) * sizeof(int32_t),
                             MF_COPY_D2H);
        if (st == MF_OK) {
            memcpy(out->ids + r0 * K, s->h_topk, (size_t)(k * K) * sizeof(int32_t));
            memcpy(out->vals + r0 * K, s->h_topk + k * K, (size_t)(k * K) * sizeof(float));
            memcpy(out->stats + 2 * r0, s->h_topk + 2 * k * K, (size_t)(2 * k) * sizeof(float));
        }
    }
    mf_op_end(s->be, "d2h");
    if (st == MF_OK) s->kept_first = r0, s->kept_rows = k;
    return st;
}

// ---- decode-step graphs -----------------------------------------------------------------------

static void graph_drop(mf_session *s, int i) {
    if (s->graph[i].exec) s->be->graph_free(s->be, s->graph[i].exec);
    memset(&s->graph[i], 0, sizeof s->graph[i]);
}

// A decode step of n_seqs sequences (one token each, staged already) as a
// graph: replays the one recorded for (n_seqs, output kind), or records it
// first (the least recently used entry makes room). The attention's key
// bound is max_seq so that one recording serves every later length. Output:
// n_seqs rows of `out` (logits, or argmax ids and values). A recording that
// fails (the capture cannot start, or an op cannot be recorded) turns graphs
// off for the session, keeps the error for mf_session_get_stats and returns
// MF_ERR_UNSUPPORTED: the caller runs the step plainly.
static mf_status graph_step(mf_session *s, int32_t n_segs, const fwd_out *out) {
    const int64_t T = n_segs;
    int e = -1, victim = 0;
    for (int i = 0; i < MF_SESSION_GRAPHS; i++) {
        if (s->graph[i].n_seqs == n_segs && s->graph[i].kind == (int)out->kind &&
            (out->kind != FWD_TOPK || (s->graph[i].k == out->k && s->graph[i].scale == out->scale)))
            e = i;
        if (s->graph[i].used < s->graph[victim].used) victim = i;
    }
    s->step_max_q = 1, s->step_max_k = s->max_seq;
    const int64_t ops0 = s->hook.ops;
    if (e < 0) {
        e = victim;
        graph_drop(s, e);
        mf_status st = s->be->graph_begin(s->be), se = MF_OK;
        void *exec = NULL;
        if (st == MF_OK) {
            s->recording = true;
            mf_tensor hid;
            st = mf_forward_step(s, n_segs, T, &hid);
            if (st == MF_OK) st = head_queue(s, &hid, out);
            se = s->be->graph_end(s->be, &exec);
            s->recording = false;
        }
        if (st != MF_OK || se != MF_OK) { // not recordable: plain steps from now on (they report real errors)
            snprintf(s->graphs_off, sizeof s->graphs_off, "recording a decode step of %d sequences: %s", n_segs,
                     mf_last_error());
            if (exec) s->be->graph_free(s->be, exec);
            s->graphs = false;
            for (int i = 0; i < MF_SESSION_GRAPHS; i++) graph_drop(s, i);
            s->hook.ops = ops0;
            return MF_ERR_UNSUPPORTED;
        }
        s->graph[e].n_seqs = n_segs, s->graph[e].kind = (int)out->kind, s->graph[e].exec = exec;
        s->graph[e].k = out->k, s->graph[e].scale = out->scale;
        s->graph[e].ops = s->hook.ops - ops0;
        s->graphs_recorded++;
    }
    s->graph[e].used = ++s->graph_clock;
    s->hook.ops = ops0 + s->graph[e].ops;
    s->call_launches = 1; // the step's upload, then one graph
    MF_TRY(s->be->graph_launch(s->be, s->graph[e].exec));
    s->graphs_replayed++;
    s->call_graph = true;
    return head_read(s, T, out, 0);
}

mf_status mf_session_set_graphs(mf_session *s, bool on) {
    if (!s) return mf_fail(MF_ERR_INVALID_ARG, "session_set_graphs: session is NULL");
    if (!on)
        for (int i = 0; i < MF_SESSION_GRAPHS; i++) graph_drop(s, i);
    s->graphs = on && graphs_possible(s);
    if (on) s->graphs_off[0] = '\0';
    return MF_OK;
}

mf_status mf_session_get_stats(const mf_session *s, mf_session_stats *out) {
    if (!s) return mf_fail(MF_ERR_INVALID_ARG, "session_get_stats: session is NULL");
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "session_get_stats: out is NULL");
    *out = (mf_session_stats){.ops = s->hook.ops, .launches = s->call_launches,
                              .host_us = s->call_host_us < 0 ? 0 : s->call_host_us, .graph = s->call_graph,
                              .graphs_recorded = s->graphs_recorded, .graphs_replayed = s->graphs_replayed};
    memcpy(out->graphs_off, s->graphs_off, sizeof out->graphs_off);
    return MF_OK;
}

// ---- forward ------------------------------------------------------------------------------------

// The step loop behind both entry points: input tokens split into steps of
// at most step_tokens rows; after each step the LM head runs over the rows
// `mode` asks for and `out` takes them (NULL: no LM head). A one-token-each
// call that fits one step is a decode step: replayed as a graph when possible.
static mf_status forward_run(mf_session *s, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                             const int64_t *offsets, mf_logits_mode mode, const fwd_out *out) {
    s->call_t0 = now_us(), s->call_host_us = -1, s->call_launches = -1, s->call_graph = false;
    s->kept_first = 0, s->kept_rows = 0;
    const int64_t total = offsets[n_seqs], vocab = s->m->spec.vocab;
    if (s->graphs && !s->prof_on && out && total == n_seqs && total <= s->step_tokens &&
        (s->m->spec.n_experts == 0 || total <= s->moe_graph_rows)) {
        int32_t n_segs;
        MF_TRY(stage_step(s, n_seqs, seq_ids, tokens, offsets, 0, 0, total, &n_segs));
        mf_status st = graph_step(s, n_segs, out);
        if (st == MF_OK) {
            MF_TRY(mf_backend_sync(s->be));
            for (int32_t i = 0; i < n_seqs; i++) s->len[seq_ids[i]] += 1;
            return MF_OK;
        }
        if (st != MF_ERR_UNSUPPORTED) return st;
        s->call_t0 = now_us(); // not recordable: the plain path below
    }
    int32_t i0 = 0; // first sequence with tokens at or after c0
    for (int64_t c0 = 0; c0 < total;) {
        const int64_t c1 = total - c0 < s->step_tokens ? total : c0 + s->step_tokens, T = c1 - c0;
        int32_t n_segs;
        MF_TRY(stage_step(s, n_seqs, seq_ids, tokens, offsets, i0, c0, c1, &n_segs));
        mf_tensor hid;
        MF_TRY(mf_forward_step(s, n_segs, T, &hid));
        if (out && mode == MF_LOGITS_ALL) {
            MF_TRY(mf_forward_lm_head(s, &hid, out->logits + c0 * vocab));
        } else if (out) {
            int32_t first;
            const int32_t k = last_rows(s, n_segs, &first);
            if (k > 0) { // k <= min(max_batch, T) <= logit_rows: one block
                mf_tensor x = hid;
                bool all = k == T; // every row is a last one (decode): no gather
                if (!all) {
                    MF_TRY(mf_backend_copy(s->be, s->rows.data, s->h_rows, (size_t)k * sizeof(int32_t), MF_COPY_H2D));
                    MF_TRY(mf_forward_gather(s, &hid, k, &x));
                }
                MF_TRY(head_queue(s, &x, out));
                MF_TRY(head_read(s, k, out, first));
            }
        }
        while (i0 < n_seqs && offsets[i0 + 1] <= c1) i0++;
        c0 = c1;
    }
    mf_session_mark_queued(s);
    if (s->call_launches < 0) s->call_launches = s->hook.ops;
    MF_TRY(mf_backend_sync(s->be));
    for (int32_t i = 0; i < n_seqs; i++) s->len[seq_ids[i]] += offsets[i + 1] - offsets[i];
    return MF_OK;
}

// forward_run with s's op hook on the backend for the call (counting its
// ops, bracketing them for the profiler).
static mf_status forward(mf_session *s, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                         const int64_t *offsets, mf_logits_mode mode, const fwd_out *out) {
    s->hook = (mf_op_hook){.begin = s->prof_on ? s->prof.begin : NULL, .end = s->prof_on ? s->prof.end : NULL,
                           .user = s->prof.user};
    s->be->hook = &s->hook;
    const mf_status st = forward_run(s, n_seqs, seq_ids, tokens, offsets, mode, out);
    s->be->hook = NULL;
    return st;
}

mf_status mf_session_forward(mf_session *s, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                             const int64_t *offsets, mf_logits_mode mode, float *logits) {
    MF_TRY(check_forward("session_forward", s, n_seqs, seq_ids, tokens, offsets, mode));
    const fwd_out out = {.logits = logits};
    return forward(s, n_seqs, seq_ids, tokens, offsets, mode, logits ? &out : NULL);
}

mf_status mf_session_forward_greedy(mf_session *s, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                                    const int64_t *offsets, int32_t *ids, float *vals) {
    static const char fn[] = "session_forward_greedy";
    MF_TRY(check_forward(fn, s, n_seqs, seq_ids, tokens, offsets, MF_LOGITS_LAST));
    if (!ids) return mf_fail(MF_ERR_INVALID_ARG, "%s: ids is NULL", fn);
    const fwd_out out = {.kind = FWD_ARGMAX, .ids = ids, .vals = vals};
    return forward(s, n_seqs, seq_ids, tokens, offsets, MF_LOGITS_LAST, &out);
}

mf_status mf_session_forward_topk(mf_session *s, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                                  const int64_t *offsets, int32_t k, float scale, int32_t *ids, float *vals,
                                  float *stats) {
    static const char fn[] = "session_forward_topk";
    MF_TRY(check_forward(fn, s, n_seqs, seq_ids, tokens, offsets, MF_LOGITS_LAST));
    if (!ids || !vals || !stats)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: %s is NULL", fn, !ids ? "ids" : !vals ? "vals" : "stats");
    const int64_t vocab = s->m->spec.vocab;
    if (k < 1 || k > MF_TOPK_MAX || k > vocab)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: k %d not in [1, %lld] (MF_TOPK_MAX %d, vocab %lld)", fn, (int)k,
                       (long long)(vocab < MF_TOPK_MAX ? vocab : MF_TOPK_MAX), MF_TOPK_MAX, (long long)vocab);
    if (!(scale > 0.0f) || isinf(scale))
        return mf_fail(MF_ERR_INVALID_ARG, "%s: scale %g not a finite value > 0", fn, (double)scale);
    const fwd_out out = {.kind = FWD_TOPK, .ids = ids, .vals = vals, .stats = stats, .k = k, .scale = scale};
    return forward(s, n_seqs, seq_ids, tokens, offsets, MF_LOGITS_LAST, &out);
}

mf_status mf_session_read_logits(mf_session *s, int32_t row, float *logits) {
    static const char fn[] = "session_read_logits";
    if (!s || !logits) return mf_fail(MF_ERR_INVALID_ARG, "%s: %s is NULL", fn, !s ? "session" : "logits");
    if (row < s->kept_first || row >= s->kept_first + s->kept_rows)
        return mf_fail(MF_ERR_UNSUPPORTED, "%s: row %d's logits are not on the device (the last call kept rows [%lld, %lld))",
                       fn, (int)row, (long long)s->kept_first, (long long)(s->kept_first + s->kept_rows));
    const int64_t vocab = s->m->spec.vocab; // no profiler bracket: it would count as an op of the last call
    return mf_backend_copy(s->be, logits, (const float *)s->logits.data + (row - s->kept_first) * vocab,
                           (size_t)vocab * sizeof(float), MF_COPY_D2H);
}
