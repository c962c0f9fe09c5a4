// The generation loop: tokenize the prompts, prefill them in one forward
// call, then decode steps over the sequences still running; sample, apply
// the stop rules (EOS, stop strings, length) and stream the text.
//
// Stop strings are matched on the generated text, across token boundaries.
// Each sequence's text buffer holds everything generated; text[0, emitted)
// has gone to the callback. The rest is held back because it could be the
// start of a stop string; invariant: no stop string starts before `emitted`,
// so a match is only looked for from there.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/sampler.h"

typedef struct {
    int32_t *ctx;                // (n_prompt + max_gen) the prompt's ids, then the generated ones
    int64_t n_prompt;            // prompt tokens
    int64_t max_gen;             // tokens this sequence may generate (max_new_tokens, max_seq)
    int64_t n_gen;               // generated so far
    char *text;                  // (cap) generated text; text[0, emitted) streamed, the rest held
    size_t len, cap, emitted;
    mf_tokenizer_stream *stream; // NULL without a tokenizer
    mf_rng rng;
    mf_finish_reason finish;
} gen_seq;

typedef struct {
    const mf_gen_source *src;
    const mf_generate_params *p;
    int32_t n;
    gen_seq *seqs;          // (n)
    size_t *stop_len;       // (n_stop)
    mf_sampler *sampler;    // scratch shared by the sequences; each draws with its own rng
    float *logits;          // (n, vocab); NULL when the argmax comes from the source (device greedy)
    int32_t *am_ids;        // (n) a greedy step's argmax ids (device greedy)
    float *am_vals;         // (n) and their logits
    int32_t cand_k;         // > 0: decode steps come back as this many top-k candidates per row
    float cand_scale;       // mf_topk's scale (1 / temperature)
    int32_t *c_ids;         // (n, cand_k) a candidate step's ids
    float *c_vals;          // (n, cand_k) and logits
    float *c_stats;         // (n, 2) and row (max, sum)
    float *row;             // (vocab) a candidate row's logits, read when they do not decide
    bool step_cand;         // the last forward call returned candidates
    int64_t device_picks, logit_reads;
    int32_t *step_ids;      // (n) a step's rows: sequence i runs in session slot i
    int32_t *step_tokens;   // (max(n, prompt tokens)) a step's input ids
    int64_t *offsets;       // (n + 1)
} gen_state;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *mf_finish_reason_str(mf_finish_reason r) {
    switch (r) {
    case MF_FINISH_NONE: return "none";
    case MF_FINISH_EOS: return "eos";
    case MF_FINISH_STOP: return "stop";
    case MF_FINISH_LENGTH: return "length";
    case MF_FINISH_ABORT: return "abort";
    }
    return "unknown";
}

mf_generate_params mf_generate_params_default(void) {
    mf_generate_params p;
    memset(&p, 0, sizeof p);
    p.max_new_tokens = 128;
    return p;
}

void mf_generate_result_free(mf_generate_result *r) {
    if (!r) return;
    for (int32_t i = 0; r->seqs && i < r->n; i++) {
        free(r->seqs[i].prompt);
        free(r->seqs[i].tokens);
        free(r->seqs[i].text);
    }
    free(r->seqs);
    memset(r, 0, sizeof *r);
}

static void state_free(gen_state *g) {
    for (int32_t i = 0; g->seqs && i < g->n; i++) {
        free(g->seqs[i].ctx);
        free(g->seqs[i].text);
        mf_tokenizer_stream_free(g->seqs[i].stream);
    }
    free(g->seqs);
    free(g->stop_len);
    mf_sampler_free(g->sampler);
    free(g->logits);
    free(g->am_ids);
    free(g->am_vals);
    free(g->c_ids);
    free(g->c_vals);
    free(g->c_stats);
    free(g->row);
    free(g->step_ids);
    free(g->step_tokens);
    free(g->offsets);
}

// Puts `prefix` in front of the current error message.
static mf_status fail_prefixed(mf_status st, const char *prefix) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", mf_last_error()); // mf_fail writes where the message lives
    return mf_fail(st, "%s%s", prefix, msg);
}

// ---- checks ------------------------------------------------------------------------------

static mf_status check_args(const mf_gen_source *src, const mf_prompts *pr, const mf_generate_params *p) {
    if (!pr || !p) return mf_fail(MF_ERR_INVALID_ARG, "generate: %s is NULL", !pr ? "prompts" : "params");
    if (pr->n < 1 || pr->n > src->max_batch)
        return mf_fail(MF_ERR_INVALID_ARG, "generate: %d prompts not in [1, %d] (the session's max_batch)", (int)pr->n,
                       (int)src->max_batch);
    if (p->max_new_tokens < 0)
        return mf_fail(MF_ERR_INVALID_ARG, "generate: max_new_tokens %lld < 0", (long long)p->max_new_tokens);
    mf_status st = mf_sampler_params_check(&p->sampler);
    if (st != MF_OK) return fail_prefixed(st, "generate: ");
    if (p->n_stop < 0 || (p->n_stop > 0 && !p->stop))
        return mf_fail(MF_ERR_INVALID_ARG, "generate: n_stop %d with stop %p", (int)p->n_stop, (const void *)p->stop);
    if (p->n_stop > 0 && !src->tok)
        return mf_fail(MF_ERR_INVALID_ARG, "generate: stop strings need a tokenizer (the model has none)");
    for (int32_t k = 0; k < p->n_stop; k++)
        if (!p->stop[k] || !p->stop[k][0])
            return mf_fail(MF_ERR_INVALID_ARG, "generate: stop string %d is %s", (int)k, !p->stop[k] ? "NULL" : "empty");
    if (p->bos != MF_BOS_AUTO && p->bos != MF_BOS_ADD && p->bos != MF_BOS_NONE)
        return mf_fail(MF_ERR_INVALID_ARG, "generate: bos mode %d unknown", (int)p->bos);
    if (pr->texts) {
        if (!src->tok) return mf_fail(MF_ERR_INVALID_ARG, "generate: text prompts need a tokenizer (the model has none)");
        for (int32_t i = 0; i < pr->n; i++)
            if (!pr->texts[i]) return mf_fail(MF_ERR_INVALID_ARG, "generate: prompt %d is NULL", (int)i);
    } else {
        if (!pr->tokens || !pr->n_tokens)
            return mf_fail(MF_ERR_INVALID_ARG, "generate: prompts have neither texts nor tokens with n_tokens");
        for (int32_t i = 0; i < pr->n; i++) {
            if (pr->n_tokens[i] < 1)
                return mf_fail(MF_ERR_INVALID_ARG, "generate: prompt %d has %lld tokens (at least 1 needed)", (int)i,
                               (long long)pr->n_tokens[i]);
            if (!pr->tokens[i]) return mf_fail(MF_ERR_INVALID_ARG, "generate: prompt %d's tokens are NULL", (int)i);
        }
    }
    return MF_OK;
}

// ---- text: streaming and stop strings ----------------------------------------------------

static void emit(gen_state *g, int32_t i, size_t upto) {
    gen_seq *q = &g->seqs[i];
    if (upto > q->emitted && g->p->on_text) g->p->on_text(i, q->text + q->emitted, upto - q->emitted, g->p->user);
    if (upto > q->emitted) q->emitted = upto;
}

static mf_status append_text(gen_seq *q, const char *s, size_t n) {
    if (q->len + n + 1 > q->cap) { // only when the estimate made at the start was short
        size_t cap = q->cap * 2 > q->len + n + 1 ? q->cap * 2 : q->len + n + 1;
        char *t = realloc(q->text, cap);
        if (!t) return mf_fail(MF_ERR_OOM, "generate: out of memory for %zu bytes of text", cap);
        q->text = t;
        q->cap = cap;
    }
    memcpy(q->text + q->len, s, n);
    q->len += n;
    q->text[q->len] = '\0';
    return MF_OK;
}

// A cut at `pos` of the text, moved back to the first byte of the character
// it falls in (a stop string that is not valid UTF-8 can start inside one),
// but not before `floor`.
static size_t char_start(const gen_seq *q, size_t pos, size_t floor) {
    for (int back = 0; back < 3 && pos > floor && pos < q->len && (q->text[pos] & 0xC0) == 0x80; back++) pos--;
    return pos;
}

// After new text: ends the sequence at the first stop string (dropping it,
// what follows and a partial character before it), else streams all but a
// tail that may begin a stop string.
static void scan_stops(gen_state *g, int32_t i) {
    gen_seq *q = &g->seqs[i];
    const mf_generate_params *p = g->p;
    for (size_t pos = q->emitted; pos < q->len; pos++)
        for (int32_t k = 0; k < p->n_stop; k++)
            if (q->len - pos >= g->stop_len[k] && !memcmp(q->text + pos, p->stop[k], g->stop_len[k])) {
                size_t cut = char_start(q, pos, q->emitted);
                q->len = cut;
                q->text[cut] = '\0';
                emit(g, i, cut);
                q->finish = MF_FINISH_STOP;
                return;
            }
    size_t hold = q->len;
    for (size_t pos = q->emitted; pos < q->len && hold == q->len; pos++)
        for (int32_t k = 0; k < p->n_stop; k++)
            if (g->stop_len[k] > q->len - pos && !memcmp(q->text + pos, p->stop[k], q->len - pos)) {
                hold = pos;
                break;
            }
    emit(g, i, char_start(q, hold, q->emitted));
}

// Ends sequence i: the stream's held bytes come out, a stop string may still
// complete with them, and everything held is streamed.
static mf_status finish_seq(gen_state *g, int32_t i, mf_finish_reason why) {
    gen_seq *q = &g->seqs[i];
    q->finish = why;
    if (!q->stream) return MF_OK;
    const char *t;
    size_t n;
    MF_TRY(mf_tokenizer_stream_flush(q->stream, &t, &n));
    MF_TRY(append_text(q, t, n));
    scan_stops(g, i); // may turn the reason into "stop"
    emit(g, i, q->len);
    return MF_OK;
}

// Token `id` joins sequence i: the stop rules and the stream see it.
static mf_status accept_token(gen_state *g, int32_t i, int32_t id) {
    gen_seq *q = &g->seqs[i];
    const mf_generate_params *p = g->p;
    q->ctx[q->n_prompt + q->n_gen++] = id;
    if (!p->ignore_eos)
        for (int32_t e = 0; e < g->src->n_eos; e++)
            if (id == g->src->eos_ids[e]) return finish_seq(g, i, MF_FINISH_EOS);
    if (q->stream) {
        const char *t;
        size_t n;
        MF_TRY(mf_tokenizer_stream_push(q->stream, id, &t, &n));
        MF_TRY(append_text(q, t, n));
        scan_stops(g, i);
        if (q->finish != MF_FINISH_NONE) return MF_OK;
    }
    if (q->n_gen == q->max_gen) return finish_seq(g, i, MF_FINISH_LENGTH);
    return MF_OK;
}

// A new token for sequence i, drawn from `logits` (vocab).
static mf_status take_token(gen_state *g, int32_t i, const float *logits) {
    gen_seq *q = &g->seqs[i];
    int32_t id;
    mf_status st = mf_sampler_sample_rng(g->sampler, &q->rng, logits, q->ctx, q->n_prompt + q->n_gen, &id);
    if (st != MF_OK) {
        char where[64];
        snprintf(where, sizeof where, "generate: sequence %d, token %lld: ", (int)i, (long long)q->n_gen);
        return fail_prefixed(st, where);
    }
    return accept_token(g, i, id);
}

// A new token for sequence i from the argmax the source computed (id, and
// the logit there), refused as the sampler refuses its logits: a NaN / +inf
// logit (named by index) or all logits -inf.
static mf_status take_greedy(gen_state *g, int32_t i, int32_t id, float val) {
    const gen_seq *q = &g->seqs[i];
    if (id < 0 || id >= g->src->vocab || isnan(val) || val == INFINITY) {
        if (id == -1)
            return mf_fail(MF_ERR_INVALID_ARG, "generate: sequence %d, token %lld: sampler_sample: all %lld logits are -inf",
                           (int)i, (long long)q->n_gen, (long long)g->src->vocab);
        if (id >= 0 && id < g->src->vocab)
            return mf_fail(MF_ERR_INVALID_ARG,
                           "generate: sequence %d, token %lld: sampler_sample: logit %lld is NaN or +inf (argmax on the "
                           "device)",
                           (int)i, (long long)q->n_gen, (long long)id);
        return mf_fail(MF_ERR_INVALID_ARG, "generate: sequence %d, token %lld: the device argmax returned id %d, not in [0, %lld)",
                       (int)i, (long long)q->n_gen, (int)id, (long long)g->src->vocab);
    }
    g->device_picks++;
    return accept_token(g, i, id);
}

// A new token for sequence i from the candidates of the last step's row j:
// drawn from them when they decide the draw, else from that row's logits.
static mf_status take_candidate(gen_state *g, int32_t i, int32_t j) {
    gen_seq *q = &g->seqs[i];
    const int32_t K = g->cand_k;
    int32_t id;
    mf_status st = mf_sampler_sample_candidates(g->sampler, &q->rng, g->c_ids + (size_t)j * (size_t)K,
                                                g->c_vals + (size_t)j * (size_t)K, K, g->c_stats + 2 * (size_t)j, &id);
    if (st == MF_ERR_UNSUPPORTED) {
        MF_TRY(g->src->read_logits(g->src->ctx, j, g->row));
        g->logit_reads++;
        return take_token(g, i, g->row);
    }
    if (st != MF_OK) {
        char where[64];
        snprintf(where, sizeof where, "generate: sequence %d, token %lld: ", (int)i, (long long)q->n_gen);
        return fail_prefixed(st, where);
    }
    g->device_picks++;
    return accept_token(g, i, id);
}

// Greedy sampling whose answer an argmax on the source can give: the
// sampler's greedy rule with no repetition penalty changing logits first.
static bool device_greedy(const mf_gen_source *src, const mf_generate_params *p) {
    const mf_sampler_params *sp = &p->sampler;
    const bool greedy = sp->temperature == 0.0f || sp->top_k == 1;
    const bool penalty = sp->repetition_penalty != 0.0f && sp->repetition_penalty != 1.0f;
    return src->forward_greedy && !p->host_sampling && greedy && !penalty;
}

// Sampling that the device's top-k candidates can make exact: how many to
// ask for (0: none; the argmax path or host sampling).
static int32_t device_candidates(const mf_gen_source *src, const mf_generate_params *p) {
    if (!src->forward_topk || !src->read_logits || p->host_sampling || device_greedy(src, p)) return 0;
    return mf_sampler_candidates_k(&p->sampler, src->vocab);
}

// One forward call of the loop over rows [0, n_seqs) of the step arrays:
// logits, or (device greedy, no logits buffer) each row's argmax, or (a
// decode step with candidates) each row's top-k candidates. The prefill
// returns logits when candidates are used: a long prompt batch runs in
// several steps, and an earlier step's logits could not be read back.
static mf_status step_forward(gen_state *g, int32_t n_seqs, bool decode) {
    const mf_gen_source *src = g->src;
    g->step_cand = decode && g->cand_k > 0;
    if (g->step_cand)
        return src->forward_topk(src->ctx, n_seqs, g->step_ids, g->step_tokens, g->offsets, g->cand_k, g->cand_scale,
                                 g->c_ids, g->c_vals, g->c_stats);
    if (!g->logits)
        return src->forward_greedy(src->ctx, n_seqs, g->step_ids, g->step_tokens, g->offsets, g->am_ids, g->am_vals);
    return src->forward(src->ctx, n_seqs, g->step_ids, g->step_tokens, g->offsets, g->logits);
}

// Each row's new token goes to sequence step_ids[row].
static mf_status step_take(gen_state *g, int32_t n_seqs) {
    for (int32_t j = 0; j < n_seqs; j++)
        MF_TRY(g->step_cand ? take_candidate(g, g->step_ids[j], j)
               : g->logits  ? take_token(g, g->step_ids[j], g->logits + (size_t)j * (size_t)g->src->vocab)
                         : take_greedy(g, g->step_ids[j], g->am_ids[j], g->am_vals[j]));
    return MF_OK;
}

// ---- setup -------------------------------------------------------------------------------

// Longest spelling of a token in bytes: a bound on the text one token decodes
// to for the decoders minfer supports (byte-level, ▁ and <0xNN> all shrink),
// used to size the text buffers once.
static size_t max_token_bytes(const mf_tokenizer *tok) {
    size_t m = 0;
    int64_t v = mf_tokenizer_vocab_size(tok);
    for (int64_t id = 0; id < v; id++) {
        const char *t = mf_tokenizer_token_text(tok, (int32_t)id);
        size_t n = t ? strlen(t) : 0;
        if (n > m) m = n;
    }
    return m;
}

static mf_status setup(gen_state *g, const mf_prompts *pr) {
    const mf_gen_source *src = g->src;
    const mf_generate_params *p = g->p;
    const int32_t n = pr->n;
    g->n = n;
    g->seqs = mf_calloc((size_t)n, sizeof *g->seqs);
    g->stop_len = mf_calloc((size_t)(p->n_stop > 0 ? p->n_stop : 1), sizeof *g->stop_len);
    if (!g->seqs || !g->stop_len) return mf_fail(MF_ERR_OOM, "generate: out of memory");
    for (int32_t k = 0; k < p->n_stop; k++) g->stop_len[k] = strlen(p->stop[k]);

    // Prompts -> ids, checked against the vocabulary and max_seq.
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        gen_seq *q = &g->seqs[i];
        const int32_t *ids;
        int32_t *enc = NULL;
        int64_t n_ids;
        if (pr->texts) {
            MF_TRY(mf_generate_encode_prompt(src->tok, pr->texts[i], p->bos, i, &enc, &n_ids));
            ids = enc;
        } else {
            ids = pr->tokens[i];
            n_ids = pr->n_tokens[i];
        }
        mf_status st = MF_OK;
        for (int64_t j = 0; j < n_ids && st == MF_OK; j++)
            if (ids[j] < 0 || ids[j] >= src->vocab)
                st = mf_fail(MF_ERR_INVALID_ARG, "generate: prompt %d token %lld = %d not in [0, %lld)", (int)i,
                             (long long)j, (int)ids[j], (long long)src->vocab);
        if (st == MF_OK && n_ids > src->max_seq)
            st = mf_fail(MF_ERR_INVALID_ARG, "generate: prompt %d has %lld tokens, more than the session's max_seq %lld",
                         (int)i, (long long)n_ids, (long long)src->max_seq);
        if (st == MF_OK) {
            q->n_prompt = n_ids;
            // Generating token k needs the prompt and k - 1 tokens in the cache.
            q->max_gen = src->max_seq - n_ids + 1;
            if (p->max_new_tokens < q->max_gen) q->max_gen = p->max_new_tokens;
            q->ctx = mf_malloc((size_t)(n_ids + q->max_gen) * sizeof *q->ctx);
            if (!q->ctx) st = mf_fail(MF_ERR_OOM, "generate: out of memory for prompt %d", (int)i);
            else memcpy(q->ctx, ids, (size_t)n_ids * sizeof *ids);
        }
        mf_tokenizer_free_buffer(enc);
        MF_TRY(st);
        total += n_ids;
        mf_rng_seed(&q->rng, p->sampler.seed + (uint64_t)i);
    }

    // Text buffers and streams.
    if (src->tok) {
        size_t per_token = max_token_bytes(src->tok);
        for (int32_t i = 0; i < n; i++) {
            gen_seq *q = &g->seqs[i];
            q->cap = (size_t)q->max_gen * per_token + 64;
            q->text = mf_malloc(q->cap);
            if (!q->text) return mf_fail(MF_ERR_OOM, "generate: out of memory for %zu bytes of text", q->cap);
            q->text[0] = '\0';
            MF_TRY(mf_tokenizer_stream_new(src->tok, q->ctx, q->n_prompt, &q->stream));
        }
    }

    // Step buffers: the prefill's concatenated prompts are the biggest input.
    int64_t max_tokens = total > n ? total : n;
    // Device greedy: no logits buffer (the loop tells the two paths apart by it).
    if (device_greedy(src, p)) {
        g->am_ids = mf_malloc((size_t)n * sizeof *g->am_ids);
        g->am_vals = mf_malloc((size_t)n * sizeof *g->am_vals);
    } else {
        g->logits = mf_malloc((size_t)n * (size_t)src->vocab * sizeof *g->logits);
        g->cand_k = device_candidates(src, p);
        if (g->cand_k > 0) {
            g->cand_scale = mf_sampler_candidates_scale(&p->sampler);
            g->c_ids = mf_malloc((size_t)n * (size_t)g->cand_k * sizeof *g->c_ids);
            g->c_vals = mf_malloc((size_t)n * (size_t)g->cand_k * sizeof *g->c_vals);
            g->c_stats = mf_malloc((size_t)n * 2 * sizeof *g->c_stats);
            g->row = mf_malloc((size_t)src->vocab * sizeof *g->row);
            if (!g->c_ids || !g->c_vals || !g->c_stats || !g->row)
                return mf_fail(MF_ERR_OOM, "generate: out of memory for %d x %d candidates", (int)n, (int)g->cand_k);
        }
    }
    g->step_ids = mf_malloc((size_t)n * sizeof *g->step_ids);
    g->step_tokens = mf_malloc((size_t)max_tokens * sizeof *g->step_tokens);
    g->offsets = mf_malloc((size_t)(n + 1) * sizeof *g->offsets);
    if ((!g->logits && !(g->am_ids && g->am_vals)) || !g->step_ids || !g->step_tokens || !g->offsets)
        return mf_fail(MF_ERR_OOM, "generate: out of memory for the step buffers (%d sequences, vocab %lld)", (int)n,
                       (long long)src->vocab);
    return mf_sampler_create(&p->sampler, src->vocab, &g->sampler);
}

// ---- the loop ----------------------------------------------------------------------------

static mf_status run(gen_state *g, mf_generate_stats *stats, double t0) {
    const mf_gen_source *src = g->src;
    const int32_t n = g->n;
    for (int32_t i = 0; i < n; i++) MF_TRY(src->reset(src->ctx, i));
    for (int32_t i = 0; i < n; i++) stats->prompt_tokens += g->seqs[i].n_prompt;
    if (g->p->max_new_tokens == 0) {
        for (int32_t i = 0; i < n; i++) g->seqs[i].finish = MF_FINISH_LENGTH;
        return MF_OK;
    }

    // Prefill: every prompt in one call.
    g->offsets[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        gen_seq *q = &g->seqs[i];
        g->step_ids[i] = i;
        memcpy(g->step_tokens + g->offsets[i], q->ctx, (size_t)q->n_prompt * sizeof *q->ctx);
        g->offsets[i + 1] = g->offsets[i] + q->n_prompt;
    }
    double t = now_s();
    MF_TRY(step_forward(g, n, false));
    stats->prefill_s = now_s() - t;
    MF_TRY(step_take(g, n));
    double t_first = now_s();
    stats->ttft_s = t_first - t0;

    // Decode steps: one token for each sequence still running.
    for (;;) {
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++)
            if (g->seqs[i].finish == MF_FINISH_NONE) {
                gen_seq *q = &g->seqs[i];
                g->step_ids[m] = i;
                g->step_tokens[m] = q->ctx[q->n_prompt + q->n_gen - 1];
                g->offsets[m + 1] = m + 1;
                m++;
            }
        if (m == 0) break;
        MF_TRY(step_forward(g, m, true));
        stats->decode_steps++;
        stats->decode_tokens += m;
        MF_TRY(step_take(g, m));
    }
    stats->decode_s = now_s() - t_first;
    return MF_OK;
}

// Moves the sequences' ids and text into the result.
static mf_status collect(gen_state *g, mf_generate_result *out) {
    out->seqs = mf_calloc((size_t)g->n, sizeof *out->seqs);
    if (!out->seqs) return mf_fail(MF_ERR_OOM, "generate: out of memory for the result");
    out->n = g->n;
    for (int32_t i = 0; i < g->n; i++) {
        gen_seq *q = &g->seqs[i];
        mf_generation *r = &out->seqs[i];
        r->n_prompt = q->n_prompt;
        r->n_tokens = q->n_gen;
        r->finish = q->finish;
        r->prompt = mf_malloc((size_t)(q->n_prompt > 0 ? q->n_prompt : 1) * sizeof *r->prompt);
        r->tokens = mf_malloc((size_t)(q->n_gen > 0 ? q->n_gen : 1) * sizeof *r->tokens);
        if (!r->prompt || !r->tokens) return mf_fail(MF_ERR_OOM, "generate: out of memory for the result");
        memcpy(r->prompt, q->ctx, (size_t)q->n_prompt * sizeof *r->prompt);
        memcpy(r->tokens, q->ctx + q->n_prompt, (size_t)q->n_gen * sizeof *r->tokens);
        if (q->text) {
            r->text = q->text; // taken over
            r->text_len = q->len;
            q->text = NULL;
        } else {
            r->text = mf_calloc(1, 1);
            if (!r->text) return mf_fail(MF_ERR_OOM, "generate: out of memory for the result");
        }
        out->stats.generated_tokens += q->n_gen;
    }
    return MF_OK;
}

mf_status mf_generate_source(const mf_gen_source *src, const mf_prompts *prompts, const mf_generate_params *p,
                             mf_generate_result *out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "generate: out is NULL");
    memset(out, 0, sizeof *out);
    if (!src) return mf_fail(MF_ERR_INVALID_ARG, "generate: source is NULL");
    double t0 = now_s();
    MF_TRY(check_args(src, prompts, p));

    gen_state g;
    memset(&g, 0, sizeof g);
    g.src = src;
    g.p = p;
    mf_generate_stats stats;
    memset(&stats, 0, sizeof stats);
    mf_status st = setup(&g, prompts);
    bool touched = st == MF_OK; // the session's slots are reset from here on
    if (st == MF_OK) st = run(&g, &stats, t0);
    if (st == MF_OK) st = collect(&g, out);
    if (st != MF_OK) {
        mf_generate_result_free(out);
        if (touched) { // leave the slots empty, and the first error's message
            char msg[512];
            snprintf(msg, sizeof msg, "%s", mf_last_error());
            for (int32_t i = 0; i < prompts->n; i++) (void)src->reset(src->ctx, i);
            mf_fail(st, "%s", msg);
        }
    } else {
        stats.generated_tokens = out->stats.generated_tokens;
        stats.device_picks = g.device_picks, stats.logit_reads = g.logit_reads;
        stats.total_s = now_s() - t0;
        if (stats.prefill_s > 0) stats.prefill_tok_s = (double)stats.prompt_tokens / stats.prefill_s;
        if (stats.decode_s > 0) stats.decode_tok_s = (double)stats.decode_tokens / stats.decode_s;
        out->stats = stats;
    }
    state_free(&g);
    return st;
}

// ---- on a session ------------------------------------------------------------------------

static mf_status session_forward(void *ctx, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                                 const int64_t *offsets, float *logits) {
    return mf_session_forward(ctx, n_seqs, seq_ids, tokens, offsets, MF_LOGITS_LAST, logits);
}

static mf_status session_forward_greedy(void *ctx, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                                        const int64_t *offsets, int32_t *ids, float *vals) {
    return mf_session_forward_greedy(ctx, n_seqs, seq_ids, tokens, offsets, ids, vals);
}

static mf_status session_forward_topk(void *ctx, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                                      const int64_t *offsets, int32_t k, float scale, int32_t *ids, float *vals,
                                      float *stats) {
    return mf_session_forward_topk(ctx, n_seqs, seq_ids, tokens, offsets, k, scale, ids, vals, stats);
}

static mf_status session_read_logits(void *ctx, int32_t row, float *logits) {
    return mf_session_read_logits(ctx, row, logits);
}

static mf_status session_reset(void *ctx, int32_t seq) { return mf_session_reset(ctx, seq); }

mf_status mf_generate_encode_prompt(const mf_tokenizer *tok, const char *text, mf_bos_mode bos, int32_t index,
                                   int32_t **ids, int64_t *n_ids) {
    if (!ids || !n_ids) return mf_fail(MF_ERR_INVALID_ARG, "generate: encode_prompt: ids or n_ids is NULL");
    *ids = NULL, *n_ids = 0;
    if (!tok || !text) return mf_fail(MF_ERR_INVALID_ARG, "generate: encode_prompt: tokenizer or text is NULL");
    if (bos != MF_BOS_AUTO && bos != MF_BOS_ADD && bos != MF_BOS_NONE)
        return mf_fail(MF_ERR_INVALID_ARG, "generate: bos mode %d unknown", (int)bos);
    const bool has_bos = mf_tokenizer_bos_id(tok) >= 0;
    const bool empty = text[0] == '\0';
    const bool add_bos = bos == MF_BOS_ADD || (bos == MF_BOS_AUTO && has_bos && (mf_tokenizer_default_add_bos(tok) || empty));
    if (add_bos && !has_bos)
        return mf_fail(MF_ERR_INVALID_ARG, "generate: BOS requested but the tokenizer has no BOS token");
    if (empty && !add_bos)
        return mf_fail(MF_ERR_INVALID_ARG, "generate: prompt %d is empty and no BOS is added (%s)", (int)index,
                       bos == MF_BOS_NONE ? "bos mode NONE" : "the tokenizer has no BOS token");
    return mf_tokenizer_encode(tok, text, strlen(text), add_bos, ids, n_ids);
}

mf_status mf_generate(mf_session *s, const mf_prompts *prompts, const mf_generate_params *p,
                      mf_generate_result *out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "generate: out is NULL");
    memset(out, 0, sizeof *out);
    if (!s) return mf_fail(MF_ERR_INVALID_ARG, "generate: session is NULL");
    const mf_model *m = mf_session_model(s);
    mf_model_info info;
    MF_TRY(mf_model_get_info(m, &info));
    mf_gen_source src = {
        .ctx = s,
        .forward = session_forward,
        .forward_greedy = session_forward_greedy,
        .forward_topk = session_forward_topk,
        .read_logits = session_read_logits,
        .reset = session_reset,
        .vocab = info.vocab,
        .max_batch = mf_session_max_batch(s),
        .max_seq = mf_session_max_seq(s),
        .tok = mf_model_tokenizer(m),
        .n_eos = info.n_eos < MF_MODEL_MAX_EOS ? info.n_eos : MF_MODEL_MAX_EOS,
    };
    for (int32_t e = 0; e < src.n_eos; e++) src.eos_ids[e] = info.eos_ids[e];
    return mf_generate_source(&src, prompts, p, out);
}
