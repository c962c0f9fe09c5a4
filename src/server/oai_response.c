// OpenAI response bodies and SSE chunks (see oai_response.h).
#include "server/oai_response.h"

#include <math.h>
#include <string.h>

#include "server/utf8.h"

void mf_oai_json_str(mf_sbuf *b, const char *s, size_t n) {
    mf_sbuf clean = {0};
    mf_srv_utf8_append(&clean, s, n);
    if (clean.oom) b->oom = true;
    mf_sbuf_put(b, "\"", 1);
    const char *p = clean.p ? clean.p : "";
    size_t run = 0;
    for (size_t i = 0; i < clean.len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        mf_sbuf_put(b, p + run, i - run);
        run = i + 1;
        switch (c) {
        case '"': mf_sbuf_puts(b, "\\\""); break;
        case '\\': mf_sbuf_puts(b, "\\\\"); break;
        case '\n': mf_sbuf_puts(b, "\\n"); break;
        case '\r': mf_sbuf_puts(b, "\\r"); break;
        case '\t': mf_sbuf_puts(b, "\\t"); break;
        default: mf_sbuf_printf(b, "\\u%04x", c); break;
        }
    }
    mf_sbuf_put(b, p + run, clean.len - run);
    mf_sbuf_put(b, "\"", 1);
    mf_sbuf_free(&clean);
}

static void jstr(mf_sbuf *b, const char *s) { mf_oai_json_str(b, s, strlen(s)); }

static void jnum(mf_sbuf *b, float v) {
    if (!isfinite(v)) v = -9999.0f;
    mf_sbuf_printf(b, "%.9g", (double)v);
}

void mf_oai_error_json(mf_sbuf *b, const mf_oai_error *e) {
    mf_sbuf_puts(b, "{\"error\":{\"message\":");
    jstr(b, e->message);
    mf_sbuf_puts(b, ",\"type\":");
    jstr(b, e->type[0] ? e->type : "invalid_request_error");
    mf_sbuf_puts(b, ",\"param\":");
    if (e->param[0])
        jstr(b, e->param);
    else
        mf_sbuf_puts(b, "null");
    mf_sbuf_printf(b, ",\"code\":%d}}", e->status);
}

static void usage_json(mf_sbuf *b, const mf_oai_usage *u) {
    mf_sbuf_printf(b,
                   "{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"total_tokens\":%lld,"
                   "\"prompt_tokens_details\":{\"cached_tokens\":%lld}}",
                   (long long)u->prompt_tokens, (long long)u->completion_tokens,
                   (long long)(u->prompt_tokens + u->completion_tokens), (long long)u->cached_tokens);
}

static void head_json(mf_sbuf *b, const mf_oai_head *h, const char *object) {
    mf_sbuf_puts(b, "{\"id\":");
    jstr(b, h->id);
    mf_sbuf_printf(b, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object, (long long)h->created);
    jstr(b, h->model);
}

// A token's text: piece bytes into tmp (cleared first).
static void piece(const mf_oai_tokstr *ts, int32_t prev, int32_t id, mf_sbuf *tmp) {
    tmp->len = 0;
    if (tmp->p) tmp->p[0] = '\0';
    if (ts && ts->piece) ts->piece(ts->user, prev, id, tmp);
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}, ...], "refusal": null}
static void chat_logprobs(mf_sbuf *b, const mf_oai_choice *c, const mf_oai_tokstr *ts) {
    mf_sbuf tmp = {0};
    mf_sbuf_puts(b, "{\"content\":[");
    for (int64_t t = 0; t < c->n_tokens; t++) {
        int32_t prev = t ? c->tokens[t - 1] : c->prev_token;
        for (int32_t k = -1; k < c->n_top; k++) {
            int32_t id = k < 0 ? c->tokens[t] : c->top_ids[t * c->n_top + k];
            float lp = k < 0 ? c->logprobs[t] : c->top_logprobs[t * c->n_top + k];
            piece(ts, prev, id, &tmp);
            if (k < 0)
                mf_sbuf_puts(b, t ? ",{\"token\":" : "{\"token\":");
            else
                mf_sbuf_puts(b, k ? ",{\"token\":" : "{\"token\":");
            mf_oai_json_str(b, tmp.p ? tmp.p : "", tmp.len);
            mf_sbuf_puts(b, ",\"logprob\":");
            jnum(b, lp);
            mf_sbuf_puts(b, ",\"bytes\":[");
            for (size_t i = 0; i < tmp.len; i++) mf_sbuf_printf(b, i ? ",%u" : "%u", (unsigned char)tmp.p[i]);
            mf_sbuf_puts(b, k < 0 ? "],\"top_logprobs\":[" : "]}");
        }
        mf_sbuf_puts(b, "]}");
    }
    mf_sbuf_puts(b, "],\"refusal\":null}");
    if (tmp.oom) b->oom = true;
    mf_sbuf_free(&tmp);
}

// Completions: {"text_offset", "token_logprobs", "tokens", "top_logprobs"}
static void completion_logprobs(mf_sbuf *b, mf_oai_choice *c, const mf_oai_tokstr *ts) {
    mf_sbuf tmp = {0};
    int64_t off = c->text_offset ? *c->text_offset : 0;
    mf_sbuf_puts(b, "{\"text_offset\":[");
    for (int64_t t = 0; t < c->n_tokens; t++) {
        piece(ts, t ? c->tokens[t - 1] : c->prev_token, c->tokens[t], &tmp);
        mf_sbuf_printf(b, t ? ",%lld" : "%lld", (long long)off);
        off += (int64_t)mf_srv_utf8_count(tmp.p ? tmp.p : "", tmp.len);
    }
    if (c->text_offset) *c->text_offset = off;
    mf_sbuf_puts(b, "],\"token_logprobs\":[");
    for (int64_t t = 0; t < c->n_tokens; t++) {
        if (t) mf_sbuf_puts(b, ",");
        jnum(b, c->logprobs[t]);
    }
    mf_sbuf_puts(b, "],\"tokens\":[");
    for (int64_t t = 0; t < c->n_tokens; t++) {
        piece(ts, t ? c->tokens[t - 1] : c->prev_token, c->tokens[t], &tmp);
        if (t) mf_sbuf_puts(b, ",");
        mf_oai_json_str(b, tmp.p ? tmp.p : "", tmp.len);
    }
    mf_sbuf_puts(b, "],\"top_logprobs\":[");
    for (int64_t t = 0; t < c->n_tokens; t++) {
        int32_t prev = t ? c->tokens[t - 1] : c->prev_token;
        mf_sbuf_puts(b, t ? ",{" : "{");
        for (int32_t k = 0; k < c->n_top; k++) {
            piece(ts, prev, c->top_ids[t * c->n_top + k], &tmp);
            if (k) mf_sbuf_puts(b, ",");
            mf_oai_json_str(b, tmp.p ? tmp.p : "", tmp.len);
            mf_sbuf_puts(b, ":");
            jnum(b, c->top_logprobs[t * c->n_top + k]);
        }
        mf_sbuf_puts(b, "}");
    }
    mf_sbuf_puts(b, "]}");
    if (tmp.oom) b->oom = true;
    mf_sbuf_free(&tmp);
}

static void logprobs_json(mf_sbuf *b, const mf_oai_head *h, mf_oai_choice *c, const mf_oai_tokstr *ts) {
    if (!h->logprobs || !c->logprobs) {
        mf_sbuf_puts(b, "null");
    } else if (h->kind == MF_OAI_CHAT) {
        chat_logprobs(b, c, ts);
    } else {
        completion_logprobs(b, c, ts);
    }
}

static void finish_json(mf_sbuf *b, const char *finish) {
    mf_sbuf_puts(b, ",\"finish_reason\":");
    if (finish)
        jstr(b, finish);
    else
        mf_sbuf_puts(b, "null");
}

void mf_oai_response_json(mf_sbuf *b, const mf_oai_head *h, mf_oai_choice *choices, int32_t n,
                          const mf_oai_usage *u, const mf_oai_tokstr *ts) {
    bool chat = h->kind == MF_OAI_CHAT;
    head_json(b, h, chat ? "chat.completion" : "text_completion");
    mf_sbuf_puts(b, ",\"choices\":[");
    for (int32_t i = 0; i < n; i++) {
        mf_oai_choice *c = &choices[i];
        mf_sbuf_printf(b, "%s{\"index\":%d,", i ? "," : "", (int)c->index);
        if (chat) {
            mf_sbuf_puts(b, "\"message\":{\"role\":\"assistant\",\"content\":");
            mf_oai_json_str(b, c->text ? c->text : "", c->text_len);
            mf_sbuf_puts(b, "}");
        } else {
            mf_sbuf_puts(b, "\"text\":");
            mf_oai_json_str(b, c->text ? c->text : "", c->text_len);
        }
        mf_sbuf_puts(b, ",\"logprobs\":");
        logprobs_json(b, h, c, ts);
        finish_json(b, c->finish);
        mf_sbuf_puts(b, "}");
    }
    mf_sbuf_puts(b, "],\"usage\":");
    usage_json(b, u);
    mf_sbuf_puts(b, "}");
}

void mf_oai_chunk_sse(mf_sbuf *b, const mf_oai_head *h, mf_oai_choice *choices, int32_t n, bool usage_null,
                      const mf_oai_tokstr *ts) {
    bool chat = h->kind == MF_OAI_CHAT;
    mf_sbuf_puts(b, "data: ");
    head_json(b, h, chat ? "chat.completion.chunk" : "text_completion");
    mf_sbuf_puts(b, ",\"choices\":[");
    for (int32_t i = 0; i < n; i++) {
        mf_oai_choice *c = &choices[i];
        mf_sbuf_printf(b, "%s{\"index\":%d,", i ? "," : "", (int)c->index);
        if (chat) {
            mf_sbuf_puts(b, "\"delta\":{");
            if (c->role) mf_sbuf_puts(b, "\"role\":\"assistant\"");
            if (c->role || c->text_len) {
                mf_sbuf_puts(b, c->role ? ",\"content\":" : "\"content\":");
                mf_oai_json_str(b, c->text ? c->text : "", c->text_len);
            }
            mf_sbuf_puts(b, "}");
        } else {
            mf_sbuf_puts(b, "\"text\":");
            mf_oai_json_str(b, c->text ? c->text : "", c->text_len);
        }
        mf_sbuf_puts(b, ",\"logprobs\":");
        if (c->n_tokens > 0)
            logprobs_json(b, h, c, ts);
        else
            mf_sbuf_puts(b, "null");
        finish_json(b, c->finish);
        mf_sbuf_puts(b, "}");
    }
    mf_sbuf_puts(b, usage_null ? "],\"usage\":null}\n\n" : "]}\n\n");
}

void mf_oai_usage_sse(mf_sbuf *b, const mf_oai_head *h, const mf_oai_usage *u) {
    mf_sbuf_puts(b, "data: ");
    head_json(b, h, h->kind == MF_OAI_CHAT ? "chat.completion.chunk" : "text_completion");
    mf_sbuf_puts(b, ",\"choices\":[],\"usage\":");
    usage_json(b, u);
    mf_sbuf_puts(b, "}\n\n");
}

void mf_oai_error_sse(mf_sbuf *b, const mf_oai_error *e) {
    mf_sbuf_puts(b, "data: ");
    mf_oai_error_json(b, e);
    mf_sbuf_puts(b, "\n\n");
}

void mf_oai_done_sse(mf_sbuf *b) { mf_sbuf_puts(b, "data: [DONE]\n\n"); }

void mf_oai_models_json(mf_sbuf *b, const char *model, const char *root, int64_t created, int64_t max_model_len) {
    mf_sbuf_puts(b, "{\"object\":\"list\",\"data\":[{\"id\":");
    jstr(b, model);
    mf_sbuf_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"minfer\",\"root\":", (long long)created);
    jstr(b, root);
    mf_sbuf_printf(b, ",\"parent\":null,\"max_model_len\":%lld}]}", (long long)max_model_len);
}

void mf_oai_tokenize_json(mf_sbuf *b, const int32_t *ids, int64_t n, int64_t max_model_len, const mf_oai_tokstr *strs) {
    mf_sbuf_printf(b, "{\"count\":%lld,\"max_model_len\":%lld,\"tokens\":[", (long long)n, (long long)max_model_len);
    for (int64_t i = 0; i < n; i++) mf_sbuf_printf(b, i ? ",%d" : "%d", (int)ids[i]);
    mf_sbuf_puts(b, "]");
    if (strs) {
        mf_sbuf tmp = {0};
        mf_sbuf_puts(b, ",\"token_strs\":[");
        for (int64_t i = 0; i < n; i++) {
            piece(strs, -1, ids[i], &tmp);
            if (i) mf_sbuf_puts(b, ",");
            mf_oai_json_str(b, tmp.p ? tmp.p : "", tmp.len);
        }
        mf_sbuf_puts(b, "]");
        if (tmp.oom) b->oom = true;
        mf_sbuf_free(&tmp);
    }
    mf_sbuf_puts(b, "}");
}

void mf_oai_detokenize_json(mf_sbuf *b, const char *text, size_t len) {
    mf_sbuf_puts(b, "{\"prompt\":");
    mf_oai_json_str(b, text, len);
    mf_sbuf_puts(b, "}");
}
