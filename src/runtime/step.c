// A call over a session: the argument checks, the input split into steps
// (each staged and uploaded in one copy, then run through the layers by
// forward.c), decode steps recorded and replayed as graphs, and the LM head
// with its read-back. One entry (forward) takes an output request; the public
// mf_session_forward, _greedy and _topk only build it. The serving engine's
// runner (mf_session_runner) runs batches of sequences whose keys live in
// the blocks of their block tables through the same steps.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "runtime/forward.h"
#include "runtime/runner.h"
#include "runtime/session.h"

// What a call returns for its LM-head rows: each sequence's last new token
// (MF_LOGITS_LAST), or every new token in input order (MF_LOGITS_ALL, logits only).
typedef enum { OUT_LOGITS = 0, OUT_ARGMAX = 1, OUT_TOPK = 2 } out_kind;
typedef struct {
    out_kind kind;
    mf_logits_mode rows;
    float *logits;  // (rows, vocab) host: OUT_LOGITS
    int32_t *ids;   // (rows) host: OUT_ARGMAX; (rows, k): OUT_TOPK
    float *vals;    // (rows) host or NULL: OUT_ARGMAX; (rows, k): OUT_TOPK
    float *stats;   // (rows, 2) host: OUT_TOPK
    int32_t k;      // OUT_TOPK: candidates per row (else 0)
    float scale;    // OUT_TOPK: mf_topk's scale (else 0)
} fwd_out;

// ---- checks and staging -------------------------------------------------------------------------

// Every argument, before anything runs (so that errors leave the caches as they were).
static mf_status check_forward(const char *fn, mf_session *s, int32_t n_seqs, const int32_t *seq_ids,
                               const int32_t *tokens, const int64_t *offsets, mf_logits_mode mode) {
    if (!s) return mf_fail(MF_ERR_INVALID_ARG, "%s: session is NULL", fn);
    if (s->engine)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: this session is a serving engine's block pool (it has no slots)", fn);
    if (n_seqs < 1 || n_seqs > s->max_batch)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: n_seqs %d not in [1, max_batch %d]", fn, n_seqs, s->max_batch);
    if (!seq_ids || !tokens || !offsets)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: %s is NULL", fn, !seq_ids ? "seq_ids" : !tokens ? "tokens" : "offsets");
    if (mode != MF_LOGITS_LAST && mode != MF_LOGITS_ALL)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: invalid logits mode %d", fn, (int)mode);
    if (offsets[0] != 0) return mf_fail(MF_ERR_INVALID_ARG, "%s: offsets[0] = %lld (want 0)", fn, (long long)offsets[0]);
    mf_status st = MF_OK;
    const int64_t *len = s->host.len;
    uint8_t *seen = s->host.seen;
    memset(seen, 0, (size_t)s->max_batch);
    for (int32_t i = 0; i < n_seqs && st == MF_OK; i++) {
        const int32_t slot = seq_ids[i];
        const int64_t n = offsets[i + 1] - offsets[i];
        if (slot < 0 || slot >= s->max_batch)
            st = mf_fail(MF_ERR_INVALID_ARG, "%s: seq_ids[%d] = %d: slot out of range [0, %d)", fn, i, slot, s->max_batch);
        else if (seen[slot])
            st = mf_fail(MF_ERR_INVALID_ARG, "%s: slot %d given twice (seq_ids[%d])", fn, slot, i);
        else if (n < 1)
            st = mf_fail(MF_ERR_INVALID_ARG, "%s: sequence %d (slot %d) has no new tokens (offsets[%d] = %lld, offsets[%d] = %lld)",
                         fn, i, slot, i, (long long)offsets[i], i + 1, (long long)offsets[i + 1]);
        else if (n > s->max_seq - len[slot])
            st = mf_fail(MF_ERR_INVALID_ARG,
                         "%s: sequence %d (slot %d): %lld cached + %lld new tokens exceed max_seq %lld", fn, i, slot,
                         (long long)len[slot], (long long)n, (long long)s->max_seq);
        if (st == MF_OK) seen[slot] = 1;
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

// The segments of the step over input tokens [c0, c1) (sequences from i0 on)
// into host.segs, and its index arrays packed into host.step, uploaded in one
// copy (the layout of mf_step_views). Returns the segment count in *n_segs.
static mf_status stage_step(mf_session *s, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                            const int64_t *offsets, int32_t i0, int64_t c0, int64_t c1, int32_t *n_segs_out) {
    mf_session_staging *h = &s->host;
    const int64_t T = c1 - c0;
    int32_t *ids = h->step, *pos = h->step + T, *slot_map = h->step + 2 * T;
    int32_t n_segs = 0;
    h->max_q = 0, h->max_k = 0;
    for (int32_t i = i0; i < n_seqs && offsets[i] < c1; i++) {
        const int64_t a = offsets[i] > c0 ? offsets[i] : c0, b = offsets[i + 1] < c1 ? offsets[i + 1] : c1;
        if (b <= a) continue;
        mf_fwd_seg *g = &h->segs[n_segs++];
        g->seq = i, g->slot = seq_ids[i], g->row0 = a - c0, g->n = b - a;
        g->pos0 = h->len[g->slot] + (a - offsets[i]);
        g->last = b == offsets[i + 1];
        for (int64_t r = a; r < b; r++) {
            ids[r - c0] = tokens[r];
            pos[r - c0] = (int32_t)(g->pos0 + (r - a));
            slot_map[r - c0] = (int32_t)(g->slot * s->dims.slot_len + pos[r - c0]); // a slot's run of rows
        }
        if (g->n > h->max_q) h->max_q = g->n;
        if (g->pos0 + g->n > h->max_k) h->max_k = g->pos0 + g->n;
    }
    const size_t n_i32 = (size_t)mf_step_views(s, T, n_segs); // no block tables: slots
    h->seg_cu[0] = 0;
    for (int32_t i = 0; i < n_segs; i++) {
        const mf_fwd_seg *g = &h->segs[i];
        h->seg_cu[i + 1] = (int32_t)(g->row0 + g->n);
        h->seg_slot[i] = g->slot;
        h->seg_klen[i] = (int32_t)(g->pos0 + g->n);
    }
    *n_segs_out = n_segs;
    mf_op_begin(mf_role(s, "step"), "h2d");
    const mf_status st = mf_backend_copy(s->be, s->dev.step_i32.data, h->step, n_i32 * sizeof(int32_t), MF_COPY_H2D);
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
static void mark_queued(mf_session *s) {
    if (s->call.host_us < 0) s->call.host_us = now_us() - s->call.t0;
}

// ---- the LM head ---------------------------------------------------------------------------------

// Queues the LM head over x (k <= logit_rows rows): logits into dev.logits,
// and for an argmax or top-k output that reduction into dev.argmax_out /
// dev.topk_out.
static mf_status head_queue(mf_session *s, const mf_tensor *x, const fwd_out *out) {
    const mf_linear *lm = &s->m->w.lm_head;
    const int64_t k = x->shape[0];
    const mf_tensor logits = mf_rows_of(&s->dev.logits, 0, k);
    mf_gemm_args g = {.a = *x, .b = lm->w, .c = logits, .bias = lm->bias.data ? &lm->bias : NULL, .alpha = 1.0f};
    MF_TRY(mf_gemm(mf_role(s, "lm_head"), &g));
    if (out->kind == OUT_ARGMAX) {
        mf_argmax_args a = {.x = logits, .ids = s->dev.argmax_out, .vals = s->dev.argmax_out};
        a.ids.shape[0] = k;
        a.vals.shape[0] = k, a.vals.dtype = MF_DTYPE_F32, a.vals.data = (int32_t *)s->dev.argmax_out.data + k;
        return mf_argmax(mf_role(s, "greedy"), &a);
    }
    if (out->kind == OUT_TOPK) {
        int32_t *base = s->dev.topk_out.data;
        const mf_device dev = s->dev.topk_out.device;
        const int64_t os[2] = {k, out->k}, ss[2] = {k, 2};
        mf_topk_args a = {.x = logits, .k = out->k, .scale = out->scale};
        MF_TRY(mf_tensor_make(&a.ids, base, MF_DTYPE_I32, dev, 2, os));
        MF_TRY(mf_tensor_make(&a.vals, base + k * out->k, MF_DTYPE_F32, dev, 2, os));
        MF_TRY(mf_tensor_make(&a.stats, base + 2 * k * out->k, MF_DTYPE_F32, dev, 2, ss));
        return mf_topk(mf_role(s, "sampling"), &a);
    }
    return MF_OK;
}

// Reads what head_queue left for k rows into out's rows [r0, r0 + k): k x
// vocab f32 logits, or the argmax / top-k outputs in one copy. keep: those
// rows' logits stay readable until the next call (mf_session_read_logits).
static mf_status head_read(mf_session *s, int64_t k, const fwd_out *out, int64_t r0, bool keep) {
    static const char *const what_of[] = {"logits", "argmax", "topk"};
    mf_session_staging *h = &s->host;
    mark_queued(s);
    mf_op_begin(mf_role(s, what_of[out->kind]), "d2h");
    mf_status st;
    if (out->kind == OUT_LOGITS) {
        const int64_t vocab = s->m->spec.vocab;
        st = mf_backend_copy(s->be, out->logits + r0 * vocab, s->dev.logits.data, (size_t)(k * vocab) * sizeof(float),
                             MF_COPY_D2H);
    } else if (out->kind == OUT_ARGMAX) {
        st = mf_backend_copy(s->be, h->argmax, s->dev.argmax_out.data, (size_t)(2 * k) * sizeof(int32_t), MF_COPY_D2H);
        if (st == MF_OK) {
            memcpy(out->ids + r0, h->argmax, (size_t)k * sizeof(int32_t));
            if (out->vals) memcpy(out->vals + r0, h->argmax + k, (size_t)k * sizeof(float));
        }
    } else {
        const int64_t K = out->k;
        st = mf_backend_copy(s->be, h->topk, s->dev.topk_out.data, (size_t)(2 * k * K + 2 * k) * sizeof(int32_t),
                             MF_COPY_D2H);
        if (st == MF_OK) {
            memcpy(out->ids + r0 * K, h->topk, (size_t)(k * K) * sizeof(int32_t));
            memcpy(out->vals + r0 * K, h->topk + k * K, (size_t)(k * K) * sizeof(float));
            memcpy(out->stats + 2 * r0, h->topk + 2 * k * K, (size_t)(2 * k) * sizeof(float));
        }
    }
    mf_op_end(s->be, "d2h");
    if (st == MF_OK && keep) h->kept_first = r0, h->kept_rows = k;
    return st;
}

// The LM head after a step over the T rows of hid (input rows from c0 on):
// every row, in blocks of logit_rows (MF_LOGITS_ALL), or the last new token
// of each sequence that ends in this step, gathered when the step has others.
static mf_status head_step(mf_session *s, const mf_tensor *hid, int32_t n_segs, int64_t c0, const fwd_out *out) {
    const int64_t T = hid->shape[0];
    if (out->rows == MF_LOGITS_ALL) {
        for (int64_t r0 = 0; r0 < T; r0 += s->dims.logit_rows) {
            const int64_t nb = T - r0 < s->dims.logit_rows ? T - r0 : s->dims.logit_rows;
            const mf_tensor x = mf_rows_of(hid, r0, nb);
            MF_TRY(head_queue(s, &x, out));
            MF_TRY(head_read(s, nb, out, c0 + r0, false));
        }
        return MF_OK;
    }
    int32_t k = 0, first = -1;
    for (int32_t i = 0; i < n_segs; i++) {
        const mf_fwd_seg *g = &s->host.segs[i];
        if (!g->last) continue;
        if (first < 0) first = g->seq;
        s->host.rows[k++] = (int32_t)(g->row0 + g->n - 1);
    }
    if (k == 0) return MF_OK;
    mf_tensor x = *hid; // k <= min(max_batch, T) <= logit_rows: one block
    if (k != T) {       // not every row is a last one (prefill): gather them
        MF_TRY(mf_backend_copy(s->be, s->dev.rows.data, s->host.rows, (size_t)k * sizeof(int32_t), MF_COPY_H2D));
        mf_embed_args e = {.ids = mf_rows_of(&s->dev.rows, 0, k), .table = *hid, .y = mf_rows_of(&s->dev.gathered, 0, k)};
        MF_TRY(mf_embed(mf_role(s, "gather_last"), &e));
        x = e.y;
    }
    MF_TRY(head_queue(s, &x, out));
    return head_read(s, k, out, first, true);
}

// ---- decode steps as graphs ----------------------------------------------------------------------

// A decode step of n_seqs sequences (one token each, staged already) as a
// graph: replays the one recorded for (n_seqs, output), or records it first
// (the least recently used entry makes room). The attention's key bound is
// max_seq so that one recording serves every later length. A recording that
// fails (the capture cannot start, or an op cannot be recorded) turns graphs
// off for the session, keeps the error for mf_session_get_stats and returns
// MF_ERR_UNSUPPORTED: the caller runs the step plainly.
static mf_status graph_step(mf_session *s, int32_t n_segs, const fwd_out *out) {
    mf_graph_cache *c = &s->graphs;
    const mf_graph_key key = {.n_seqs = n_segs, .kind = (int)out->kind, .k = out->k, .scale = out->scale,
                              .paged = s->call.paged};
    s->host.max_q = 1, s->host.max_k = s->max_seq;
    const int64_t ops0 = s->call.hook.ops;
    mf_graph *g = mf_graph_find(c, &key);
    if (!g) {
        g = mf_graph_evict(c, s->be);
        mf_status st = s->be->graph_begin(s->be), se = MF_OK;
        void *exec = NULL;
        if (st == MF_OK) {
            mf_tensor hid;
            st = mf_forward_step(s, n_segs, n_segs, &hid);
            if (st == MF_OK) st = head_queue(s, &hid, out);
            se = s->be->graph_end(s->be, &exec);
        }
        if (st != MF_OK || se != MF_OK) { // not recordable: plain steps from now on (they report real errors)
            snprintf(c->off, sizeof c->off, "recording a decode step of %d sequences: %s", n_segs, mf_last_error());
            if (exec) s->be->graph_free(s->be, exec);
            c->on = false;
            mf_graph_drop_all(c, s->be);
            s->call.hook.ops = ops0;
            return MF_ERR_UNSUPPORTED;
        }
        *g = (mf_graph){.key = key, .exec = exec, .ops = s->call.hook.ops - ops0};
        c->recorded++;
    }
    s->call.hook.ops = ops0 + g->ops;
    s->call.launches = 1; // the step's upload, then one graph
    MF_TRY(mf_graph_replay(c, s->be, g));
    s->call.graph = true;
    return head_read(s, n_segs, out, 0, true);
}

// ---- the one forward entry -----------------------------------------------------------------------

// Input tokens split into steps of at most step_tokens rows; after each step
// the LM head runs over the rows `out` asks for (out NULL: no LM head). A
// one-token-each call that fits one step is a decode step: replayed as a
// graph when possible.
static mf_status forward_run(mf_session *s, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                             const int64_t *offsets, const fwd_out *out) {
    mf_session_calls *c = &s->call;
    c->t0 = now_us(), c->host_us = -1, c->launches = -1, c->graph = false, c->paged = false;
    s->host.kept_first = 0, s->host.kept_rows = 0;
    const int64_t total = offsets[n_seqs];
    if (s->graphs.on && !c->prof_on && out && total == n_seqs && total <= s->dims.step_tokens &&
        (s->m->spec.n_experts == 0 || total <= s->graphs.moe_rows)) {
        int32_t n_segs;
        MF_TRY(stage_step(s, n_seqs, seq_ids, tokens, offsets, 0, 0, total, &n_segs));
        const mf_status st = graph_step(s, n_segs, out);
        if (st == MF_OK) {
            MF_TRY(mf_backend_sync(s->be));
            for (int32_t i = 0; i < n_seqs; i++) s->host.len[seq_ids[i]] += 1;
            return MF_OK;
        }
        if (st != MF_ERR_UNSUPPORTED) return st;
        c->t0 = now_us(); // not recordable: the plain path below
    }
    int32_t i0 = 0; // first sequence with tokens at or after c0
    for (int64_t c0 = 0; c0 < total;) {
        const int64_t c1 = total - c0 < s->dims.step_tokens ? total : c0 + s->dims.step_tokens;
        int32_t n_segs;
        MF_TRY(stage_step(s, n_seqs, seq_ids, tokens, offsets, i0, c0, c1, &n_segs));
        mf_tensor hid;
        MF_TRY(mf_forward_step(s, n_segs, c1 - c0, &hid));
        if (out) MF_TRY(head_step(s, &hid, n_segs, c0, out));
        while (i0 < n_seqs && offsets[i0 + 1] <= c1) i0++;
        c0 = c1;
    }
    mark_queued(s);
    if (c->launches < 0) c->launches = c->hook.ops;
    MF_TRY(mf_backend_sync(s->be));
    for (int32_t i = 0; i < n_seqs; i++) s->host.len[seq_ids[i]] += offsets[i + 1] - offsets[i];
    return MF_OK;
}

// The session's op hook on the backend for a call (counting its ops,
// bracketing them for the profiler); hook_off after it.
static void hook_on(mf_session *s) {
    const mf_session_calls *c = &s->call;
    s->call.hook = (mf_op_hook){.begin = c->prof_on ? c->prof.begin : NULL, .end = c->prof_on ? c->prof.end : NULL,
                                .user = c->prof.user};
    s->be->hook = &s->call.hook;
}
static void hook_off(mf_session *s) { s->be->hook = NULL; }

static mf_status forward(mf_session *s, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                         const int64_t *offsets, const fwd_out *out) {
    hook_on(s);
    const mf_status st = forward_run(s, n_seqs, seq_ids, tokens, offsets, out);
    hook_off(s);
    return st;
}

mf_status mf_session_forward(mf_session *s, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                             const int64_t *offsets, mf_logits_mode mode, float *logits) {
    MF_TRY(check_forward("session_forward", s, n_seqs, seq_ids, tokens, offsets, mode));
    const fwd_out out = {.kind = OUT_LOGITS, .rows = mode, .logits = logits};
    return forward(s, n_seqs, seq_ids, tokens, offsets, logits ? &out : NULL);
}

mf_status mf_session_forward_greedy(mf_session *s, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                                    const int64_t *offsets, int32_t *ids, float *vals) {
    static const char fn[] = "session_forward_greedy";
    MF_TRY(check_forward(fn, s, n_seqs, seq_ids, tokens, offsets, MF_LOGITS_LAST));
    if (!ids) return mf_fail(MF_ERR_INVALID_ARG, "%s: ids is NULL", fn);
    const fwd_out out = {.kind = OUT_ARGMAX, .rows = MF_LOGITS_LAST, .ids = ids, .vals = vals};
    return forward(s, n_seqs, seq_ids, tokens, offsets, &out);
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
    const fwd_out out = {.kind = OUT_TOPK, .rows = MF_LOGITS_LAST, .ids = ids, .vals = vals, .stats = stats, .k = k,
                         .scale = scale};
    return forward(s, n_seqs, seq_ids, tokens, offsets, &out);
}

mf_status mf_session_read_logits(mf_session *s, int32_t row, float *logits) {
    static const char fn[] = "session_read_logits";
    if (!s || !logits) return mf_fail(MF_ERR_INVALID_ARG, "%s: %s is NULL", fn, !s ? "session" : "logits");
    const mf_session_staging *h = &s->host;
    if (row < h->kept_first || row >= h->kept_first + h->kept_rows)
        return mf_fail(MF_ERR_UNSUPPORTED, "%s: row %d's logits are not on the device (the last call kept rows [%lld, %lld))",
                       fn, (int)row, (long long)h->kept_first, (long long)(h->kept_first + h->kept_rows));
    const int64_t vocab = s->m->spec.vocab; // the hook is off between calls: this read is no op of the last call
    return mf_backend_copy(s->be, logits, (const float *)s->dev.logits.data + (row - h->kept_first) * vocab,
                           (size_t)vocab * sizeof(float), MF_COPY_D2H);
}

// ---- the serving engine's runner ------------------------------------------------------------------

// Every field of a runner batch the session relies on (the engine is the
// caller, but a wrong table would write into another sequence's blocks).
static mf_status check_batch(const mf_session *s, const mf_run_batch *b) {
    static const char fn[] = "session runner";
    const int32_t n = b->n_seqs, W = s->dims.table_w, bs = s->dims.block_size;
    if (n < 1 || n > s->dims.n_rows || !b->tokens || !b->cu || !b->pos0 || !b->tables || !b->out)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: %d sequences (want 1 .. %lld, every array given)", fn, n,
                       (long long)s->dims.n_rows);
    if (b->cu[0] != 0 || b->cu[n] > s->dims.step_tokens)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: %d tokens in a step of at most %lld", fn, b->cu[n],
                       (long long)s->dims.step_tokens);
    int32_t outs = 0;
    for (int32_t i = 0; i < n; i++) {
        const int64_t len = b->cu[i + 1] - b->cu[i], end = (int64_t)b->pos0[i] + len;
        if (len < 1 || b->pos0[i] < 0 || end > s->max_seq)
            return mf_fail(MF_ERR_INVALID_ARG, "%s: sequence %d: %lld new tokens at %d (max_model_len %lld)", fn, i,
                           (long long)len, b->pos0[i], (long long)s->max_seq);
        const int32_t *tab = b->tables + (int64_t)i * W;
        for (int64_t j = 0; j < (end + bs - 1) / bs; j++)
            if (tab[j] < 0 || tab[j] >= s->kv.n_blocks)
                return mf_fail(MF_ERR_INVALID_ARG, "%s: sequence %d: block %lld = %d not in [0, %d)", fn, i,
                               (long long)j, tab[j], s->kv.n_blocks);
        for (int64_t t = b->cu[i]; t < b->cu[i + 1]; t++)
            if (b->tokens[t] < 0 || b->tokens[t] >= s->m->spec.vocab)
                return mf_fail(MF_ERR_INVALID_ARG, "%s: token %d not in [0, vocab %lld)", fn, b->tokens[t],
                               (long long)s->m->spec.vocab);
        outs += b->out[i] != 0;
    }
    if (outs != b->n_out) return mf_fail(MF_ERR_INVALID_ARG, "%s: n_out %d, %d rows marked", fn, b->n_out, outs);
    if (b->kind == MF_RUN_TOPK &&
        (b->k < 1 || b->k > MF_TOPK_MAX || b->k > s->m->spec.vocab || !(b->scale > 0.0f) || isinf(b->scale)))
        return mf_fail(MF_ERR_INVALID_ARG, "%s: top-k %d with scale %g", fn, b->k, (double)b->scale);
    const bool outs_ok = b->kind == MF_RUN_LOGITS   ? b->logits != NULL
                         : b->kind == MF_RUN_ARGMAX ? b->ids && b->vals
                         : b->kind == MF_RUN_TOPK   ? b->ids && b->vals && b->stats
                                                    : false;
    if (!outs_ok && b->n_out > 0) return mf_fail(MF_ERR_INVALID_ARG, "%s: output kind %d without its buffers", fn, b->kind);
    return MF_OK;
}

// A batch's step arrays: each sequence a segment (output rows numbered in
// order through mf_fwd_seg.seq), its rows' pool rows through its table, the
// tables themselves; one upload.
static mf_status stage_batch(mf_session *s, const mf_run_batch *b) {
    mf_session_staging *h = &s->host;
    const int32_t n = b->n_seqs, W = s->dims.table_w, bs = s->dims.block_size;
    const int64_t n_i32 = mf_step_views(s, b->cu[n], n) + (int64_t)n * W;
    h->max_q = 0, h->max_k = 0;
    h->seg_cu[0] = 0;
    for (int32_t i = 0, rows = 0; i < n; i++) {
        const int32_t *tab = b->tables + (int64_t)i * W;
        mf_fwd_seg *g = &h->segs[i];
        *g = (mf_fwd_seg){.seq = b->out[i] ? rows++ : -1, .slot = -1, .row0 = b->cu[i], .n = b->cu[i + 1] - b->cu[i],
                          .pos0 = b->pos0[i], .last = b->out[i] != 0};
        for (int64_t r = 0; r < g->n; r++) {
            const int64_t p = g->pos0 + r;
            h->ids[g->row0 + r] = b->tokens[g->row0 + r];
            h->pos[g->row0 + r] = (int32_t)p;
            h->slot_map[g->row0 + r] = tab[p / bs] * bs + (int32_t)(p % bs);
        }
        h->seg_cu[i + 1] = b->cu[i + 1];
        h->seg_slot[i] = -1;
        h->seg_klen[i] = (int32_t)(g->pos0 + g->n);
        memcpy(h->tables + (int64_t)i * W, tab, (size_t)W * sizeof *tab);
        if (g->n > h->max_q) h->max_q = g->n;
        if (g->pos0 + g->n > h->max_k) h->max_k = g->pos0 + g->n;
    }
    mf_op_begin(mf_role(s, "step"), "h2d");
    const mf_status st = mf_backend_copy(s->be, s->dev.step_i32.data, h->step, (size_t)n_i32 * sizeof(int32_t), MF_COPY_H2D);
    mf_op_end(s->be, "h2d");
    return st;
}

// One engine step: staged, then a decode step (one token each, all output)
// as a graph when possible, else the layers and the LM head over the rows
// asked for.
static mf_status run_batch(mf_session *s, const mf_run_batch *b) {
    mf_session_calls *c = &s->call;
    c->t0 = now_us(), c->host_us = -1, c->launches = -1, c->graph = false, c->paged = true;
    s->host.kept_first = 0, s->host.kept_rows = 0;
    const int32_t n = b->n_seqs;
    const fwd_out out = {.kind = (out_kind)b->kind, .rows = MF_LOGITS_LAST, .logits = b->logits, .ids = b->ids,
                         .vals = b->vals, .stats = b->stats, .k = b->kind == MF_RUN_TOPK ? b->k : 0,
                         .scale = b->kind == MF_RUN_TOPK ? b->scale : 0.0f};
    MF_TRY(stage_batch(s, b));
    if (s->graphs.on && !c->prof_on && b->cu[n] == n && b->n_out == n &&
        (s->m->spec.n_experts == 0 || n <= s->graphs.moe_rows)) {
        const mf_status st = graph_step(s, n, &out);
        if (st == MF_OK) return mf_backend_sync(s->be);
        if (st != MF_ERR_UNSUPPORTED) return st;
        c->t0 = now_us(); // not recordable: the plain path below
    }
    mf_tensor hid;
    MF_TRY(mf_forward_step(s, n, b->cu[n], &hid));
    if (b->n_out > 0) MF_TRY(head_step(s, &hid, n, 0, &out));
    mark_queued(s);
    if (c->launches < 0) c->launches = c->hook.ops;
    return mf_backend_sync(s->be);
}

static mf_status runner_run(void *ctx, const mf_run_batch *b) {
    mf_session *s = ctx;
    MF_TRY(check_batch(s, b));
    hook_on(s);
    const mf_status st = run_batch(s, b);
    hook_off(s);
    return st;
}

static mf_status runner_read_logits(void *ctx, int32_t row, float *logits) {
    return mf_session_read_logits(ctx, row, logits);
}

static mf_status runner_copy_block(void *ctx, int32_t src, int32_t dst) {
    mf_session *s = ctx;
    if (src < 0 || src >= s->kv.n_blocks || dst < 0 || dst >= s->kv.n_blocks || src == dst)
        return mf_fail(MF_ERR_INVALID_ARG, "session runner: copy block %d to %d (%d blocks)", src, dst, s->kv.n_blocks);
    return mf_kv_cache_copy_block(&s->kv, src, dst);
}

mf_status mf_session_runner(mf_session *s, mf_runner *out) {
    if (!s || !out) return mf_fail(MF_ERR_INVALID_ARG, "session_runner: %s is NULL", !s ? "session" : "out");
    if (s->m->attn != MF_ATTN_FLASH)
        return mf_fail(MF_ERR_UNSUPPORTED, "session_runner: the serving engine runs flash attention (the model was "
                       "loaded with attn classic)");
    mf_model_info info;
    MF_TRY(mf_model_get_info(s->m, &info));
    memset(s->host.len, 0, (size_t)s->max_batch * sizeof *s->host.len); // the engine takes the whole pool
    *out = (mf_runner){.ctx = s, .run = runner_run, .read_logits = runner_read_logits, .copy_block = runner_copy_block,
                       .vocab = s->m->spec.vocab, .n_blocks = s->kv.n_blocks, .block_size = s->dims.block_size,
                       .table_width = s->dims.table_w, .max_seqs = (int32_t)s->dims.n_rows,
                       .max_tokens = s->dims.step_tokens, .kv_bytes = s->kv.bytes, .tok = mf_model_tokenizer(s->m),
                       .model = s->m};
    out->n_eos = info.n_eos < MF_MODEL_MAX_EOS ? info.n_eos : MF_MODEL_MAX_EOS;
    for (int32_t e = 0; e < out->n_eos; e++) out->eos_ids[e] = info.eos_ids[e];
    return MF_OK;
}
