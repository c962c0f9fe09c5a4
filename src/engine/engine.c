// The serving engine (minfer/engine.h): requests, one step = schedule (sched.c)
// -> one run over every scheduled sequence -> sample each output row -> stop
// rules and text -> events; finished sequences free their blocks.
//
// Output of a step: every row comes back in the cheapest form that decides
// all of them: the argmax when every row is greedy, top-k candidates when
// the rest sample with one temperature the candidates can decide, else the
// logits (logprobs, a repetition penalty, mixed temperatures).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/engine_int.h"

double mf_engine_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ---- queues --------------------------------------------------------------------------------

void mf_seq_queue_push(seq_queue *q, eng_seq *s) {
    s->next = NULL, s->prev = q->tail;
    if (q->tail) q->tail->next = s;
    else q->head = s;
    q->tail = s;
    q->n++;
}

void mf_seq_queue_front(seq_queue *q, eng_seq *s) {
    s->prev = NULL, s->next = q->head;
    if (q->head) q->head->prev = s;
    else q->tail = s;
    q->head = s;
    q->n++;
}

void mf_seq_queue_remove(seq_queue *q, eng_seq *s) {
    if (s->prev) s->prev->next = s->next;
    else q->head = s->next;
    if (s->next) s->next->prev = s->prev;
    else q->tail = s->prev;
    s->prev = s->next = NULL;
    q->n--;
}

// ---- requests ------------------------------------------------------------------------------

static void seq_free(eng_seq *s) {
    free(s->toks);
    free(s->blocks);
    free(s->lp);
    free(s->top_ids);
    free(s->top_lp);
    mf_textout_free(&s->text);
}

static void req_free(eng_req *q) {
    if (!q) return;
    for (int32_t i = 0; q->seqs && i < q->n; i++) seq_free(&q->seqs[i]);
    free(q->seqs);
    for (int32_t k = 0; q->stop && k < q->n_stop; k++) free(q->stop[k]);
    free(q->stop);
    free(q->stop_len);
    free(q->stop_ids);
    free(q->prompt);
    free(q);
}

// Every sequence has ended (or the request was aborted).
static bool req_finished(const eng_req *q) { return q->n_done == (q->forked ? q->n : 1) && (q->forked || q->n == 1); }

static eng_req *find(const mf_engine *e, uint64_t id) {
    for (int32_t i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->id == id) return e->reqs[i];
    return NULL;
}

// Allocations of sequence i of q (everything its decode steps use).
static mf_status seq_init(mf_engine *e, eng_req *q, int32_t i, bool text) {
    eng_seq *s = &q->seqs[i];
    s->req = q, s->index = i, s->state = i == 0 ? SEQ_WAITING : SEQ_UNBORN, s->step_row = -1;
    s->toks = mf_malloc((size_t)(q->n_prompt + q->max_gen) * sizeof *s->toks);
    s->blocks = mf_malloc((size_t)e->r.table_width * sizeof *s->blocks);
    if (!s->toks || !s->blocks) return mf_fail(MF_ERR_OOM, "engine: out of memory for a sequence");
    memcpy(s->toks, q->prompt, (size_t)q->n_prompt * sizeof *s->toks);
    s->n_tok = q->n_prompt;
    mf_rng_seed(&s->rng, q->sampler.seed + (uint64_t)i);
    if (q->logprobs) {
        s->lp = mf_malloc((size_t)q->max_gen * sizeof *s->lp);
        if (!s->lp) return mf_fail(MF_ERR_OOM, "engine: out of memory for logprobs");
        if (q->top_n > 0) {
            s->top_ids = mf_malloc((size_t)(q->max_gen * q->top_n) * sizeof *s->top_ids);
            s->top_lp = mf_malloc((size_t)(q->max_gen * q->top_n) * sizeof *s->top_lp);
            if (!s->top_ids || !s->top_lp) return mf_fail(MF_ERR_OOM, "engine: out of memory for logprobs");
        }
    }
    if (!text) return MF_OK;
    const size_t cap = (size_t)(q->max_gen < 256 ? q->max_gen : 256) * 8 + 64; // grows when short
    return mf_textout_init(&s->text, e->r.tok, q->prompt, q->n_prompt, cap, (const char *const *)q->stop,
                           q->stop_len, q->n_stop);
}

static mf_status check_params(const mf_engine *e, const mf_request_params *p) {
    static const char fn[] = "engine_add_request";
    if (!p) return mf_fail(MF_ERR_INVALID_ARG, "%s: params is NULL", fn);
    if (p->n_prompt < 1 || !p->prompt)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: prompt has %lld tokens%s (at least 1 needed)", fn,
                       (long long)p->n_prompt, p->prompt ? "" : " (NULL)");
    for (int64_t j = 0; j < p->n_prompt; j++)
        if (p->prompt[j] < 0 || p->prompt[j] >= e->r.vocab)
            return mf_fail(MF_ERR_INVALID_ARG, "%s: prompt token %lld = %d not in [0, vocab %lld)", fn, (long long)j,
                           p->prompt[j], (long long)e->r.vocab);
    if (p->max_tokens < 1)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: max_tokens %lld (want >= 1)", fn, (long long)p->max_tokens);
    if (p->n < 0 || p->n > MF_ENGINE_MAX_N || p->n > e->r.max_seqs)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: n %d not in [1, %d] (max_seqs %d)", fn, p->n,
                       MF_ENGINE_MAX_N < e->r.max_seqs ? MF_ENGINE_MAX_N : e->r.max_seqs, e->r.max_seqs);
    mf_status st = mf_sampler_params_check(&p->sampler);
    if (st != MF_OK) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", mf_last_error());
        return mf_fail(st, "%s: %s", fn, msg);
    }
    if (p->n_stop < 0 || (p->n_stop > 0 && !p->stop))
        return mf_fail(MF_ERR_INVALID_ARG, "%s: n_stop %d with stop %p", fn, p->n_stop, (const void *)p->stop);
    for (int32_t k = 0; k < p->n_stop; k++)
        if (!p->stop[k] || !p->stop[k][0])
            return mf_fail(MF_ERR_INVALID_ARG, "%s: stop string %d is %s", fn, k, !p->stop[k] ? "NULL" : "empty");
    if (p->n_stop > 0 && (!e->r.tok || p->no_text))
        return mf_fail(MF_ERR_INVALID_ARG, "%s: stop strings need text (%s)", fn,
                       e->r.tok ? "no_text is set" : "the model has no tokenizer");
    if (p->n_stop_ids < 0 || (p->n_stop_ids > 0 && !p->stop_ids))
        return mf_fail(MF_ERR_INVALID_ARG, "%s: n_stop_ids %d with stop_ids %p", fn, p->n_stop_ids,
                       (const void *)p->stop_ids);
    for (int32_t k = 0; k < p->n_stop_ids; k++)
        if (p->stop_ids[k] < 0 || p->stop_ids[k] >= e->r.vocab)
            return mf_fail(MF_ERR_INVALID_ARG, "%s: stop_ids[%d] = %d not in [0, vocab %lld)", fn, k, p->stop_ids[k],
                           (long long)e->r.vocab);
    if (p->top_logprobs < 0 || p->top_logprobs > MF_ENGINE_MAX_TOP_LOGPROBS)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: top_logprobs %d not in [0, %d]", fn, p->top_logprobs,
                       MF_ENGINE_MAX_TOP_LOGPROBS);
    if (p->top_logprobs > 0 && !p->logprobs)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: top_logprobs %d without logprobs", fn, p->top_logprobs);
    // Room: prompt + generated <= max_model_len; the prompt and all but the last
    // generated token live in the cache.
    const int64_t max_len = e->o.max_model_len, bs = e->r.block_size, gen = p->max_tokens;
    if (p->n_prompt > max_len - gen)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: prompt of %lld tokens + max_tokens %lld exceed max_model_len %lld", fn,
                       (long long)p->n_prompt, (long long)gen, (long long)max_len);
    const int64_t n = p->n > 0 ? p->n : 1, prompt_blocks = p->n_prompt / bs;
    const int64_t per_seq = (p->n_prompt + gen - 1 + bs - 1) / bs - prompt_blocks; // a sequence's own blocks
    const int64_t need = prompt_blocks + n * per_seq;
    if (need > e->pool.n_blocks)
        return mf_fail(MF_ERR_INVALID_ARG,
                       "%s: %lld prompt + %lld new tokens x %lld sequences need %lld KV blocks of %lld tokens; the "
                       "pool has %d",
                       fn, (long long)p->n_prompt, (long long)gen, (long long)n, (long long)need, (long long)bs,
                       e->pool.n_blocks);
    return MF_OK;
}

mf_status mf_engine_add_request(mf_engine *e, const mf_request_params *p, uint64_t *id) {
    if (!e || !id) return mf_fail(MF_ERR_INVALID_ARG, "engine_add_request: %s is NULL", !e ? "engine" : "id");
    *id = 0;
    MF_TRY(check_params(e, p));
    if (e->n_reqs == e->cap_reqs) {
        const int32_t cap = e->cap_reqs ? 2 * e->cap_reqs : 64;
        eng_req **r = realloc(e->reqs, (size_t)cap * sizeof *r);
        if (!r) return mf_fail(MF_ERR_OOM, "engine_add_request: out of memory for %d requests", cap);
        e->reqs = r, e->cap_reqs = cap;
    }
    eng_req *q = mf_calloc(1, sizeof *q);
    if (!q) return mf_fail(MF_ERR_OOM, "engine_add_request: out of memory");
    q->n = p->n > 0 ? p->n : 1;
    q->n_prompt = p->n_prompt;
    q->max_gen = p->max_tokens;
    q->sampler = p->sampler;
    q->ignore_eos = p->ignore_eos, q->logprobs = p->logprobs, q->top_n = p->top_logprobs;
    const mf_sampler_params *sp = &p->sampler;
    const bool penalty = sp->repetition_penalty != 0.0f && sp->repetition_penalty != 1.0f;
    q->greedy = (sp->temperature == 0.0f || sp->top_k == 1) && !penalty;
    q->cand_k = q->greedy ? 0 : mf_sampler_candidates_k(sp, e->r.vocab);
    q->need_logits = q->logprobs || p->host_sampling || (!q->greedy && q->cand_k == 0);
    q->t_queued = mf_engine_now();
    mf_status st = MF_OK;
    q->prompt = mf_malloc((size_t)p->n_prompt * sizeof *q->prompt);
    q->seqs = mf_calloc((size_t)q->n, sizeof *q->seqs);
    if (!q->prompt || !q->seqs) st = mf_fail(MF_ERR_OOM, "engine_add_request: out of memory");
    else memcpy(q->prompt, p->prompt, (size_t)p->n_prompt * sizeof *q->prompt);
    const bool text = e->r.tok && !p->no_text;
    if (st == MF_OK && text) { // stop strings (and a non-NULL stop_len marks "text on")
        q->n_stop = p->n_stop;
        q->stop = mf_calloc((size_t)(p->n_stop > 0 ? p->n_stop : 1), sizeof *q->stop);
        q->stop_len = mf_calloc((size_t)(p->n_stop > 0 ? p->n_stop : 1), sizeof *q->stop_len);
        if (!q->stop || !q->stop_len) st = mf_fail(MF_ERR_OOM, "engine_add_request: out of memory");
        for (int32_t k = 0; k < p->n_stop && st == MF_OK; k++) {
            q->stop_len[k] = strlen(p->stop[k]);
            q->stop[k] = mf_malloc(q->stop_len[k] + 1);
            if (!q->stop[k]) st = mf_fail(MF_ERR_OOM, "engine_add_request: out of memory");
            else memcpy(q->stop[k], p->stop[k], q->stop_len[k] + 1);
        }
    }
    if (st == MF_OK && p->n_stop_ids > 0) {
        q->stop_ids = mf_malloc((size_t)p->n_stop_ids * sizeof *q->stop_ids);
        if (!q->stop_ids) st = mf_fail(MF_ERR_OOM, "engine_add_request: out of memory");
        else memcpy(q->stop_ids, p->stop_ids, (size_t)p->n_stop_ids * sizeof *q->stop_ids);
        q->n_stop_ids = p->n_stop_ids;
    }
    for (int32_t i = 0; i < q->n && st == MF_OK; i++) st = seq_init(e, q, i, text);
    if (st != MF_OK) {
        req_free(q);
        return st;
    }
    q->id = ++e->next_id;
    q->order = q->id;
    e->reqs[e->n_reqs++] = q;
    mf_seq_queue_push(&e->waiting, &q->seqs[0]);
    *id = q->id;
    return MF_OK;
}

// ---- ending sequences ---------------------------------------------------------------------

static void seq_end(mf_engine *e, eng_seq *s, mf_finish_reason why) {
    if (s->state == SEQ_RUNNING) {
        mf_sched_register(e, s);
        mf_seq_queue_remove(&e->running, s);
        if (s->index == 0 && !s->req->forked) e->reserved -= s->req->n - 1;
    } else if (s->state == SEQ_WAITING) {
        mf_seq_queue_remove(&e->waiting, s);
    }
    mf_sched_release_blocks(e, s);
    if (s->state != SEQ_DONE && s->state != SEQ_UNBORN) s->req->n_done++;
    s->state = SEQ_DONE;
    s->finish = why;
}

mf_status mf_engine_abort(mf_engine *e, uint64_t id) {
    if (!e) return mf_fail(MF_ERR_INVALID_ARG, "engine_abort: engine is NULL");
    eng_req *q = find(e, id);
    if (!q) return mf_fail(MF_ERR_INVALID_ARG, "engine_abort: no request %llu", (unsigned long long)id);
    if (req_finished(q))
        return mf_fail(MF_ERR_INVALID_ARG, "engine_abort: request %llu has finished already", (unsigned long long)id);
    for (int32_t i = 0; i < q->n; i++) {
        eng_seq *s = &q->seqs[i];
        if (s->state == SEQ_UNBORN) s->finish = MF_FINISH_ABORT;
        else if (s->state != SEQ_DONE) seq_end(e, s, MF_FINISH_ABORT);
    }
    q->forked = true; // no sibling is born any more
    q->n_done = q->n;
    return MF_OK;
}


mf_status mf_engine_release(mf_engine *e, uint64_t id) {
    if (!e) return mf_fail(MF_ERR_INVALID_ARG, "engine_release: engine is NULL");
    for (int32_t i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->id == id) {
            if (!req_finished(e->reqs[i]))
                return mf_fail(MF_ERR_INVALID_ARG, "engine_release: request %llu still runs (abort it first)",
                               (unsigned long long)id);
            req_free(e->reqs[i]);
            e->reqs[i] = e->reqs[--e->n_reqs];
            return MF_OK;
        }
    return mf_fail(MF_ERR_INVALID_ARG, "engine_release: no request %llu", (unsigned long long)id);
}

// ---- one step ------------------------------------------------------------------------------

// The output kind of this step and, for candidates, (k, scale): the argmax
// when every row is greedy; candidates when the others all sample with one
// scale (a greedy row takes its first candidate); else the logits.
static mf_run_kind step_kind(const mf_engine *e, int32_t *k, float *scale) {
    bool logits = false, cand = false;
    *k = 0, *scale = 0.0f;
    if (!e->r.read_logits) return MF_RUN_LOGITS; // a runner without device reductions
    for (int32_t i = 0; i < e->n_sched; i++) {
        const eng_req *q = e->sched[i]->req;
        if (e->sched[i]->step_row < 0 || (q->greedy && !q->need_logits)) continue;
        if (q->need_logits) {
            logits = true;
            continue;
        }
        const float sc = mf_sampler_candidates_scale(&q->sampler);
        if (cand && sc != *scale) logits = true;
        cand = true, *scale = sc;
        if (q->cand_k > *k) *k = q->cand_k;
    }
    if (logits) return MF_RUN_LOGITS;
    return cand ? MF_RUN_TOPK : MF_RUN_ARGMAX;
}

// The log-probabilities of row x (vocab logits): the chosen id's and the top n.
static void logprobs_of(const mf_engine *e, const float *x, int32_t id, int32_t n, float *lp, int32_t *top_ids,
                        float *top_lp) {
    const int64_t V = e->r.vocab;
    float m = -INFINITY;
    for (int64_t v = 0; v < V; v++) m = x[v] > m ? x[v] : m;
    double sum = 0;
    for (int64_t v = 0; v < V; v++) sum += exp((double)x[v] - (double)m);
    const double lse = (double)m + log(sum);
    *lp = (float)((double)x[id] - lse);
    for (int32_t j = 0; j < n; j++) top_ids[j] = -1, top_lp[j] = -INFINITY;
    for (int64_t v = 0; v < V && n > 0; v++) { // insertion into the n best (larger first, lower id on ties)
        if (top_ids[n - 1] >= 0 && !(x[v] > x[top_ids[n - 1]])) continue;
        int32_t j = n - 1;
        while (j > 0 && (top_ids[j - 1] < 0 || x[v] > x[top_ids[j - 1]])) {
            top_ids[j] = top_ids[j - 1];
            j--;
        }
        top_ids[j] = (int32_t)v;
    }
    for (int32_t j = 0; j < n; j++) top_lp[j] = top_ids[j] >= 0 ? (float)((double)x[top_ids[j]] - lse) : -INFINITY;
}

static mf_status fail_at(mf_status st, const eng_seq *s) {
    char msg[400];
    snprintf(msg, sizeof msg, "%s", mf_last_error());
    return mf_fail(st, "engine: request %llu sequence %d, token %lld: %s", (unsigned long long)s->req->id, s->index,
                   (long long)(s->n_tok - s->req->n_prompt), msg);
}

// Sequence s's next token from output row `row` of a step of kind k.
static mf_status draw(mf_engine *e, eng_seq *s, int32_t row, mf_run_kind kind, int32_t k, int32_t *id) {
    const eng_req *q = s->req;
    const int64_t V = e->r.vocab;
    mf_sampler_set_params(e->sampler, &q->sampler);
    if (kind == MF_RUN_LOGITS) {
        mf_status st = mf_sampler_sample_rng(e->sampler, &s->rng, e->b_logits + (size_t)row * (size_t)V, s->toks,
                                             s->n_tok, id);
        return st == MF_OK ? MF_OK : fail_at(st, s);
    }
    if (kind == MF_RUN_ARGMAX || q->greedy) {
        const int32_t g = kind == MF_RUN_ARGMAX ? e->b_ids[row] : e->b_ids[(size_t)row * (size_t)k];
        const float val = kind == MF_RUN_ARGMAX ? e->b_vals[row] : e->b_vals[(size_t)row * (size_t)k];
        if (g == -1)
            return fail_at(mf_fail(MF_ERR_INVALID_ARG, "sampler_sample: all %lld logits are -inf", (long long)V), s);
        if (g < 0 || g >= V || isnan(val) || val == INFINITY)
            return fail_at(
                mf_fail(MF_ERR_INVALID_ARG, "sampler_sample: logit %d is NaN or +inf (argmax on the device)", g), s);
        *id = g;
        e->st.device_picks++;
        return MF_OK;
    }
    if (e->b_read[row]) { // the candidates did not decide a draw of this row: its logits, read back already
        const mf_status st = mf_sampler_sample_rng(e->sampler, &s->rng, e->b_logits + (size_t)row * (size_t)V, s->toks,
                                                   s->n_tok, id);
        return st == MF_OK ? MF_OK : fail_at(st, s);
    }
    mf_status st = mf_sampler_sample_candidates(e->sampler, &s->rng, e->b_ids + (size_t)row * (size_t)k,
                                                e->b_vals + (size_t)row * (size_t)k, k, e->b_stats + 2 * (size_t)row, id);
    if (st == MF_ERR_UNSUPPORTED) { // (read_back asked the same question with the same state: not reached)
        MF_TRY(e->r.read_logits(e->r.ctx, row, e->row));
        e->st.logit_reads++;
        st = mf_sampler_sample_rng(e->sampler, &s->rng, e->row, s->toks, s->n_tok, id);
    } else if (st == MF_OK) {
        e->st.device_picks++;
    }
    return st == MF_OK ? MF_OK : fail_at(st, s);
}

// Token id joins sequence s: logprobs, stop rules, text, the event.
static mf_status accept(mf_engine *e, eng_seq *s, int32_t id, int32_t row, mf_run_kind kind, double now) {
    eng_req *q = s->req;
    const int64_t g = s->n_tok - q->n_prompt; // index of this generated token
    s->toks[s->n_tok++] = id;
    mf_engine_event *ev = &e->events[e->n_events++];
    *ev = (mf_engine_event){.id = q->id, .seq = s->index, .token = id, .logprob = NAN};
    if (q->logprobs) {
        const float *x = kind == MF_RUN_LOGITS ? e->b_logits + (size_t)row * (size_t)e->r.vocab : NULL;
        if (!x) return mf_fail(MF_ERR_INTERNAL, "engine: logprobs asked but the step returned no logits");
        logprobs_of(e, x, id, q->top_n, &s->lp[g], s->top_ids ? s->top_ids + g * q->top_n : NULL,
                    s->top_lp ? s->top_lp + g * q->top_n : NULL);
        ev->logprob = s->lp[g];
        ev->n_top = q->top_n;
        if (q->top_n > 0) ev->top_ids = s->top_ids + g * q->top_n, ev->top_logprobs = s->top_lp + g * q->top_n;
    }
    if (q->t_first == 0) q->t_first = now;
    q->t_last = now;
    e->st.generated_tokens++;
    mf_finish_reason why = MF_FINISH_NONE;
    if (!q->ignore_eos)
        for (int32_t k = 0; k < e->r.n_eos && !why; k++)
            if (id == e->r.eos_ids[k]) why = MF_FINISH_EOS;
    for (int32_t k = 0; k < q->n_stop_ids && !why; k++)
        if (id == q->stop_ids[k]) why = MF_FINISH_STOP;
    bool stopped = false;
    if (!why) MF_TRY(mf_textout_push(&s->text, id, &stopped));
    if (stopped) why = MF_FINISH_STOP;
    if (!why && g + 1 == q->max_gen) why = MF_FINISH_LENGTH;
    if (why && !stopped) { // the decoder's held bytes come out; a stop string may still complete
        MF_TRY(mf_textout_finish(&s->text, &stopped));
        if (stopped) why = MF_FINISH_STOP;
    }
    ev->text = s->text.text ? s->text.text + s->text_sent : NULL;
    ev->text_len = s->text.emitted - s->text_sent;
    s->text_sent = s->text.emitted;
    if (why) {
        seq_end(e, s, why);
        ev->finish = why;
    }
    return MF_OK;
}

// A top-k step's rows whose candidates cannot decide a draw (top-p reaching
// past them): their logits read back into b_logits before anything of the
// step is taken, so that a failed read-back fails the step as a whole. The
// question is asked of each sequence that draws from the row (a request's
// siblings, at its fork) with a copy of its PRNG state.
static mf_status read_back(mf_engine *e, int32_t k) {
    const int64_t V = e->r.vocab;
    for (int32_t i = 0; i < e->n_sched; i++) {
        const eng_seq *s = e->sched[i];
        const int32_t row = s->step_row;
        const eng_req *q = s->req;
        if (row < 0) continue;
        e->b_read[row] = 0;
        if (q->greedy || q->need_logits || s->state != SEQ_RUNNING) continue;
        mf_sampler_set_params(e->sampler, &q->sampler);
        const bool fork = s->index == 0 && !q->forked && q->n > 1;
        for (int32_t j = fork ? 0 : s->index; j < (fork ? q->n : s->index + 1) && !e->b_read[row]; j++) {
            mf_rng rng = q->seqs[j].rng;
            int32_t id;
            if (mf_sampler_sample_candidates(e->sampler, &rng, e->b_ids + (size_t)row * (size_t)k,
                                             e->b_vals + (size_t)row * (size_t)k, k, e->b_stats + 2 * (size_t)row,
                                             &id) != MF_ERR_UNSUPPORTED)
                continue;
            MF_TRY(e->r.read_logits(e->r.ctx, row, e->b_logits + (size_t)row * (size_t)V));
            e->b_read[row] = 1;
            e->st.logit_reads++;
        }
    }
    return MF_OK;
}

// Sequence 0 of q has computed the prompt: its siblings start from the same blocks.
static void fork_siblings(mf_engine *e, eng_req *q) {
    eng_seq *p = &q->seqs[0];
    for (int32_t i = 1; i < q->n; i++) {
        eng_seq *s = &q->seqs[i];
        memcpy(s->blocks, p->blocks, (size_t)p->n_blocks * sizeof *s->blocks);
        for (int32_t b = 0; b < p->n_blocks; b++) mf_kv_pool_ref(&e->pool, p->blocks[b]);
        s->n_blocks = p->n_blocks, s->n_seen = p->n_seen, s->n_computed = p->n_computed;
        s->state = SEQ_RUNNING;
        mf_seq_queue_push(&e->running, s);
    }
    q->forked = true;
    e->reserved -= q->n - 1;
}

// The run batch of the scheduled sequences; output rows numbered in order.
static int32_t stage(mf_engine *e) {
    const int32_t W = e->r.table_width;
    int32_t rows = 0, t = 0;
    e->b_cu[0] = 0;
    for (int32_t i = 0; i < e->n_sched; i++) {
        eng_seq *s = e->sched[i];
        memcpy(e->b_tokens + t, s->toks + s->n_computed, (size_t)s->step_n * sizeof *e->b_tokens);
        t += (int32_t)s->step_n;
        e->b_cu[i + 1] = t;
        e->b_pos0[i] = (int32_t)s->n_computed;
        memcpy(e->b_tables + (size_t)i * (size_t)W, s->blocks, (size_t)s->n_blocks * sizeof *e->b_tables);
        const bool out = s->n_computed + s->step_n == s->n_tok;
        e->b_out[i] = out;
        s->step_row = out ? rows++ : -1;
    }
    return rows;
}

mf_status mf_engine_step(mf_engine *e, mf_engine_step_result *out) {
    if (!e || !out) return mf_fail(MF_ERR_INVALID_ARG, "engine_step: %s is NULL", !e ? "engine" : "out");
    memset(out, 0, sizeof *out);
    e->n_events = 0;
    out->events = e->events;
    if (!e->running.n && !e->waiting.n) return MF_OK;
    MF_TRY(mf_sched_step(e));
    out->n_preempted = e->n_preempted;
    if (e->n_sched == 0) return MF_OK; // everything waits (a request ahead is being preempted away)
    const int32_t rows = stage(e);
    int32_t k = 0;
    float scale = 0.0f;
    const mf_run_kind kind = rows > 0 ? step_kind(e, &k, &scale) : MF_RUN_LOGITS;
    mf_run_batch b = {.n_seqs = e->n_sched, .tokens = e->b_tokens, .cu = e->b_cu, .pos0 = e->b_pos0,
                      .tables = e->b_tables, .out = e->b_out, .n_out = rows, .kind = kind, .k = k, .scale = scale,
                      .logits = e->b_logits, .ids = e->b_ids, .vals = e->b_vals, .stats = e->b_stats};
    MF_TRY(e->r.run(e->r.ctx, &b));
    if (kind == MF_RUN_TOPK) MF_TRY(read_back(e, k));
    const double now = mf_engine_now();
    e->st.steps++;
    // The step's tokens are cached now; then each output row's draw.
    for (int32_t i = 0; i < e->n_sched; i++) {
        eng_seq *s = e->sched[i];
        s->n_computed += s->step_n;
        out->n_tokens += s->step_n;
        if (s->step_n == 1 && s->step_row >= 0 && s->n_tok > s->req->n_prompt) out->n_decode++;
        else out->n_prefill++;
        if (s->n_tok > s->req->n_prompt || s->index > 0) continue;
        e->st.prompt_tokens += s->step_n; // prompt tokens (sequence 0 computes a request's prompt)
    }
    // A row that cannot be sampled (NaN logits, ...) ends its sequence with an
    // abort event; the step returns the first such error after every row.
    mf_status first = MF_OK;
    char msg[512] = "";
    for (int32_t i = 0; i < e->n_sched; i++) {
        eng_seq *s = e->sched[i];
        const int32_t row = s->step_row;
        if (s->state != SEQ_RUNNING) continue;
        mf_sched_register(e, s);
        if (row < 0) continue;
        eng_req *q = s->req;
        const bool fork = s->index == 0 && !q->forked && q->n > 1;
        if (fork) fork_siblings(e, q);
        for (int32_t j = fork ? 0 : s->index; j < (fork ? q->n : s->index + 1); j++) {
            eng_seq *x = &q->seqs[j];
            int32_t id;
            const int32_t n_ev = e->n_events;
            mf_status st = draw(e, x, row, kind, k, &id);
            if (st == MF_OK) st = accept(e, x, id, row, kind, now);
            if (st == MF_OK) continue;
            if (first == MF_OK) first = st, snprintf(msg, sizeof msg, "%s", mf_last_error());
            e->n_events = n_ev; // no half-made event
            if (x->state != SEQ_DONE) seq_end(e, x, MF_FINISH_ABORT);
            e->events[e->n_events++] = (mf_engine_event){.id = q->id, .seq = x->index, .token = -1, .logprob = NAN,
                                                         .finish = MF_FINISH_ABORT};
        }
    }
    out->n_events = e->n_events;
    return first == MF_OK ? MF_OK : mf_fail(first, "%s", msg);
}

// ---- info ----------------------------------------------------------------------------------

mf_status mf_engine_request_info(const mf_engine *e, uint64_t id, mf_request_info *out) {
    if (!e || !out) return mf_fail(MF_ERR_INVALID_ARG, "engine_request_info: %s is NULL", !e ? "engine" : "out");
    const eng_req *q = find(e, id);
    if (!q) return mf_fail(MF_ERR_INVALID_ARG, "engine_request_info: no request %llu", (unsigned long long)id);
    *out = (mf_request_info){.n = q->n, .n_prompt = q->n_prompt, .n_cached = q->n_cached, .finished = req_finished(q),
                             .n_preempted = q->n_preempted, .t_queued = q->t_queued, .t_first = q->t_first,
                             .t_last = q->t_last};
    return MF_OK;
}

mf_status mf_engine_seq_info(const mf_engine *e, uint64_t id, int32_t seq, mf_seq_info *out) {
    if (!e || !out) return mf_fail(MF_ERR_INVALID_ARG, "engine_seq_info: %s is NULL", !e ? "engine" : "out");
    const eng_req *q = find(e, id);
    if (!q) return mf_fail(MF_ERR_INVALID_ARG, "engine_seq_info: no request %llu", (unsigned long long)id);
    if (seq < 0 || seq >= q->n)
        return mf_fail(MF_ERR_INVALID_ARG, "engine_seq_info: sequence %d not in [0, %d)", seq, q->n);
    const eng_seq *s = &q->seqs[seq];
    *out = (mf_seq_info){.tokens = s->toks + q->n_prompt, .n_tokens = s->n_tok - q->n_prompt, .logprobs = s->lp,
                         .top_ids = s->top_ids, .top_logprobs = s->top_lp, .n_top = q->top_n,
                         .text = s->text.text ? s->text.text : "", .text_len = s->text.text ? s->text.emitted : 0,
                         .finish = s->finish};
    return MF_OK;
}

mf_status mf_engine_get_stats(const mf_engine *e, mf_engine_stats *out) {
    if (!e || !out) return mf_fail(MF_ERR_INVALID_ARG, "engine_get_stats: %s is NULL", !e ? "engine" : "out");
    *out = e->st;
    int32_t running = 0, waiting = 0; // a request runs while one of its sequences does
    for (int32_t i = 0; i < e->n_reqs; i++) {
        const eng_req *q = e->reqs[i];
        if (req_finished(q)) continue;
        bool any = false;
        for (int32_t j = 0; j < q->n && !any; j++) any = q->seqs[j].state == SEQ_RUNNING;
        running += any, waiting += !any;
    }
    out->n_running = running, out->n_waiting = waiting;
    out->kv_blocks = e->pool.n_blocks;
    out->kv_blocks_cached = e->pool.n_lru;
    out->kv_blocks_used = e->pool.n_blocks - e->pool.n_free - e->pool.n_lru;
    out->block_size = e->r.block_size;
    out->max_model_len = e->o.max_model_len, out->max_batched_tokens = e->r.max_tokens, out->max_seqs = e->r.max_seqs;
    out->kv_bytes = e->r.kv_bytes;
    return MF_OK;
}

mf_model *mf_engine_model(const mf_engine *e) { return e ? e->r.model : NULL; }

// ---- create / free -------------------------------------------------------------------------

void mf_engine_free(mf_engine *e) {
    if (!e) return;
    for (int32_t i = 0; i < e->n_reqs; i++) req_free(e->reqs[i]);
    free(e->reqs);
    mf_kv_pool_free(&e->pool);
    mf_sampler_free(e->sampler);
    free(e->row);
    free(e->sched);
    free(e->b_tokens);
    free(e->b_cu);
    free(e->b_pos0);
    free(e->b_tables);
    free(e->b_out);
    free(e->b_logits);
    free(e->b_ids);
    free(e->b_vals);
    free(e->b_stats);
    free(e->b_read);
    free(e->events);
    if (e->r.destroy) e->r.destroy(e->r.ctx);
    free(e);
}

mf_status mf_engine_create_runner(const mf_runner *r, const mf_engine_opts *o, mf_engine **out) {
    static const char fn[] = "engine_create";
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    mf_engine *e = mf_calloc(1, sizeof *e);
    if (!e) return mf_fail(MF_ERR_OOM, "%s: out of memory", fn);
    e->r = *r;
    e->o = *o;
    const size_t S = (size_t)r->max_seqs, V = (size_t)r->vocab;
    mf_status st = mf_kv_pool_init(&e->pool, r->n_blocks, r->block_size, !o->no_prefix_cache);
    if (st == MF_OK) {
        const mf_sampler_params greedy = {0};
        st = mf_sampler_create(&greedy, r->vocab, &e->sampler);
    }
    if (st == MF_OK) {
        e->row = mf_malloc(V * sizeof *e->row);
        e->sched = mf_malloc(S * sizeof *e->sched);
        e->b_tokens = mf_malloc((size_t)r->max_tokens * sizeof *e->b_tokens);
        e->b_cu = mf_malloc((S + 1) * sizeof *e->b_cu);
        e->b_pos0 = mf_malloc(S * sizeof *e->b_pos0);
        e->b_tables = mf_calloc(S * (size_t)r->table_width, sizeof *e->b_tables);
        e->b_out = mf_malloc(S * sizeof *e->b_out);
        e->b_logits = mf_malloc(S * V * sizeof *e->b_logits);
        e->b_ids = mf_malloc(S * MF_TOPK_MAX * sizeof *e->b_ids);
        e->b_vals = mf_malloc(S * MF_TOPK_MAX * sizeof *e->b_vals);
        e->b_stats = mf_malloc(S * 2 * sizeof *e->b_stats);
        e->b_read = mf_calloc(S, sizeof *e->b_read);
        e->events = mf_malloc(S * sizeof *e->events);
        if (!e->row || !e->sched || !e->b_tokens || !e->b_cu || !e->b_pos0 || !e->b_tables || !e->b_out ||
            !e->b_logits || !e->b_ids || !e->b_vals || !e->b_stats || !e->b_read || !e->events)
            st = mf_fail(MF_ERR_OOM, "%s: out of host memory for %d sequences x vocab %lld", fn, r->max_seqs,
                         (long long)r->vocab);
    }
    if (st != MF_OK) {
        mf_engine_free(e);
        return st;
    }
    *out = e;
    return MF_OK;
}
