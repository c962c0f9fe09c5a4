// mf_generate: a batch of prompts run to the end on an engine made for the
// call (minfer/engine.h): every prompt is one request (sequence i with seed
// sampler.seed + i); the engine prefills them together (in one step when the
// budget allows) and decodes those still running, one step per token; the
// text comes from its events, in order, to the streaming callback.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_int.h"

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

static mf_status check_args(const mf_runner *r, const mf_prompts *pr, const mf_generate_params *p) {
    if (!pr || !p) return mf_fail(MF_ERR_INVALID_ARG, "generate: %s is NULL", !pr ? "prompts" : "params");
    if (pr->n < 1 || pr->n > r->max_seqs)
        return mf_fail(MF_ERR_INVALID_ARG, "generate: %d prompts not in [1, %d] (the session's max_batch)", (int)pr->n,
                       (int)r->max_seqs);
    if (p->max_new_tokens < 0)
        return mf_fail(MF_ERR_INVALID_ARG, "generate: max_new_tokens %lld < 0", (long long)p->max_new_tokens);
    if (p->bos != MF_BOS_AUTO && p->bos != MF_BOS_ADD && p->bos != MF_BOS_NONE)
        return mf_fail(MF_ERR_INVALID_ARG, "generate: bos mode %d unknown", (int)p->bos);
    if (p->n_stop > 0 && !r->tok)
        return mf_fail(MF_ERR_INVALID_ARG, "generate: stop strings need a tokenizer (the model has none)");
    if (pr->texts) {
        if (!r->tok) return mf_fail(MF_ERR_INVALID_ARG, "generate: text prompts need a tokenizer (the model has none)");
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

// Puts `prefix` in front of the current error message.
static mf_status fail_prefixed(mf_status st, const char *prefix) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", mf_last_error());
    return mf_fail(st, "%s%s", prefix, msg);
}

typedef struct {
    mf_engine *e;
    int32_t n;
    int32_t **ids;      // (n) prompt ids (encoded texts, or the caller's)
    int64_t *n_ids;     // (n)
    bool *encoded;      // (n) ids[i] is ours to free
    uint64_t *req;      // (n) request ids
} gen_call;

static void call_free(gen_call *g) {
    for (int32_t i = 0; g->ids && g->encoded && i < g->n; i++)
        if (g->encoded[i]) mf_tokenizer_free_buffer(g->ids[i]);
    free(g->ids);
    free(g->n_ids);
    free(g->encoded);
    free(g->req);
    mf_engine_free(g->e);
}

// Prompts -> ids, checked against the vocabulary and max_seq.
static mf_status prompts_of(gen_call *g, const mf_runner *r, int64_t max_seq, const mf_prompts *pr,
                            const mf_generate_params *p) {
    for (int32_t i = 0; i < pr->n; i++) {
        if (pr->texts) {
            MF_TRY(mf_generate_encode_prompt(r->tok, pr->texts[i], p->bos, i, &g->ids[i], &g->n_ids[i]));
            g->encoded[i] = true;
        } else {
            g->ids[i] = (int32_t *)pr->tokens[i];
            g->n_ids[i] = pr->n_tokens[i];
        }
        for (int64_t j = 0; j < g->n_ids[i]; j++)
            if (g->ids[i][j] < 0 || g->ids[i][j] >= r->vocab)
                return mf_fail(MF_ERR_INVALID_ARG, "generate: prompt %d token %lld = %d not in [0, %lld)", (int)i,
                               (long long)j, (int)g->ids[i][j], (long long)r->vocab);
        if (g->n_ids[i] > max_seq)
            return mf_fail(MF_ERR_INVALID_ARG, "generate: prompt %d has %lld tokens, more than the session's max_seq %lld",
                           (int)i, (long long)g->n_ids[i], (long long)max_seq);
    }
    return MF_OK;
}

// Every request to its end; the stats of the call's phases.
static mf_status run(gen_call *g, const mf_generate_params *p, mf_generate_stats *stats, double t0) {
    int32_t left = g->n, prefilled = 0;
    double t_prefill = mf_engine_now(), t_first = 0;
    while (left > 0) {
        mf_engine_step_result r;
        mf_status st = mf_engine_step(g->e, &r);
        if (st != MF_OK) { // a sequence that could not be sampled: named as the prompt it is
            for (int32_t k = 0; k < r.n_events; k++)
                for (int32_t i = 0; i < g->n; i++)
                    if (g->req[i] == r.events[k].id && r.events[k].token < 0) {
                        char msg[512];
                        snprintf(msg, sizeof msg, "%s", mf_last_error());
                        const char *rest = strstr(msg, "token ");
                        return mf_fail(st, "generate: sequence %d, %s", (int)i, rest ? rest : msg);
                    }
            return st;
        }
        if (prefilled == g->n) stats->decode_steps++, stats->decode_tokens += r.n_decode;
        for (int32_t k = 0; k < r.n_events; k++) {
            const mf_engine_event *ev = &r.events[k];
            int32_t i = 0;
            while (g->req[i] != ev->id) i++;
            if (ev->text_len > 0 && p->on_text) p->on_text(i, ev->text, ev->text_len, p->user);
            if (ev->finish != MF_FINISH_NONE) left--;
        }
        if (prefilled < g->n) { // the prompts' steps: until each has its first token
            prefilled = 0;
            for (int32_t i = 0; i < g->n; i++) {
                mf_request_info info;
                MF_TRY(mf_engine_request_info(g->e, g->req[i], &info));
                prefilled += info.t_first > 0;
            }
            if (prefilled == g->n) {
                t_first = mf_engine_now();
                stats->prefill_s = t_first - t_prefill;
                stats->ttft_s = t_first - t0;
            }
        }
    }
    stats->decode_s = t_first > 0 ? mf_engine_now() - t_first : 0;
    return MF_OK;
}

static mf_status collect(gen_call *g, mf_generate_result *out) {
    out->seqs = mf_calloc((size_t)g->n, sizeof *out->seqs);
    if (!out->seqs) return mf_fail(MF_ERR_OOM, "generate: out of memory for the result");
    out->n = g->n;
    for (int32_t i = 0; i < g->n; i++) {
        mf_generation *r = &out->seqs[i];
        mf_seq_info si = {0};
        if (g->req[i]) MF_TRY(mf_engine_seq_info(g->e, g->req[i], 0, &si));
        r->n_prompt = g->n_ids[i];
        r->n_tokens = si.n_tokens;
        r->finish = g->req[i] ? si.finish : MF_FINISH_LENGTH;
        r->prompt = mf_malloc((size_t)(r->n_prompt > 0 ? r->n_prompt : 1) * sizeof *r->prompt);
        r->tokens = mf_malloc((size_t)(r->n_tokens > 0 ? r->n_tokens : 1) * sizeof *r->tokens);
        r->text = mf_malloc(si.text_len + 1);
        if (!r->prompt || !r->tokens || !r->text) return mf_fail(MF_ERR_OOM, "generate: out of memory for the result");
        memcpy(r->prompt, g->ids[i], (size_t)r->n_prompt * sizeof *r->prompt);
        if (r->n_tokens) memcpy(r->tokens, si.tokens, (size_t)r->n_tokens * sizeof *r->tokens);
        if (si.text_len) memcpy(r->text, si.text, si.text_len);
        r->text[si.text_len] = '\0';
        r->text_len = si.text_len;
        out->stats.generated_tokens += r->n_tokens;
    }
    return MF_OK;
}

mf_status mf_generate_runner(const mf_runner *r, int64_t max_seq, const mf_prompts *prompts,
                             const mf_generate_params *p, mf_generate_result *out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "generate: out is NULL");
    memset(out, 0, sizeof *out);
    const double t0 = mf_engine_now();
    MF_TRY(check_args(r, prompts, p));
    mf_status st = mf_sampler_params_check(&p->sampler);
    if (st != MF_OK) return fail_prefixed(st, "generate: ");
    gen_call g = {.n = prompts->n};
    g.ids = mf_calloc((size_t)g.n, sizeof *g.ids);
    g.n_ids = mf_calloc((size_t)g.n, sizeof *g.n_ids);
    g.encoded = mf_calloc((size_t)g.n, sizeof *g.encoded);
    g.req = mf_calloc((size_t)g.n, sizeof *g.req);
    if (!g.ids || !g.n_ids || !g.encoded || !g.req) st = mf_fail(MF_ERR_OOM, "generate: out of memory");
    if (st == MF_OK) st = prompts_of(&g, r, max_seq, prompts, p);
    // the session holds max_seq tokens: a sequence ends at max_seq + 1 (its last token is never cached)
    const mf_engine_opts eo = {.max_model_len = max_seq + 1};
    if (st == MF_OK) st = mf_engine_create_runner(r, &eo, &g.e);
    mf_generate_stats stats = {0};
    for (int32_t i = 0; i < g.n && st == MF_OK && p->max_new_tokens > 0; i++) {
        const int64_t room = max_seq + 1 - g.n_ids[i];
        mf_request_params rp = {.prompt = g.ids[i], .n_prompt = g.n_ids[i],
                                .max_tokens = p->max_new_tokens < room ? p->max_new_tokens : room,
                                .sampler = p->sampler, .stop = p->stop, .n_stop = p->n_stop,
                                .ignore_eos = p->ignore_eos, .host_sampling = p->host_sampling};
        rp.sampler.seed = p->sampler.seed + (uint64_t)i;
        st = mf_engine_add_request(g.e, &rp, &g.req[i]);
        if (st != MF_OK) {
            char where[48];
            snprintf(where, sizeof where, "prompt %d: ", (int)i);
            st = fail_prefixed(st, where);
        }
    }
    for (int32_t i = 0; i < g.n && st == MF_OK; i++) stats.prompt_tokens += g.n_ids[i];
    if (st == MF_OK && p->max_new_tokens > 0) st = run(&g, p, &stats, t0);
    if (st == MF_OK) st = collect(&g, out);
    if (st == MF_OK) {
        mf_engine_stats es;
        mf_engine_get_stats(g.e, &es);
        stats.generated_tokens = out->stats.generated_tokens;
        stats.device_picks = es.device_picks, stats.logit_reads = es.logit_reads;
        stats.total_s = mf_engine_now() - t0;
        if (stats.prefill_s > 0) stats.prefill_tok_s = (double)stats.prompt_tokens / stats.prefill_s;
        if (stats.decode_s > 0) stats.decode_tok_s = (double)stats.decode_tokens / stats.decode_s;
        out->stats = stats;
    } else {
        mf_generate_result_free(out);
    }
    call_free(&g);
    return st;
}

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
    mf_runner r;
    MF_TRY(mf_session_runner(s, &r));
    return mf_generate_runner(&r, mf_session_max_seq(s), prompts, p, out);
}
