// The routes: matching, and what each does with a complete request.
#include "server/routes.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "minfer/generate.h"
#include "minfer/minfer.h"
#include "minfer/tokenizer.h"
#include "server/chat_prompt.h"
#include "server/http.h"
#include "server/oai_response.h"
#include "server/stream.h"

#define INVALID "invalid_request_error"

typedef struct {
    const char *method, *path;
    mf_route route;
} route_def;

static const route_def k_routes[] = {
    {"GET", "/health", MF_ROUTE_HEALTH},
    {"GET", "/metrics", MF_ROUTE_METRICS},
    {"GET", "/version", MF_ROUTE_VERSION},
    {"GET", "/v1/models", MF_ROUTE_MODELS},
    {"POST", "/v1/completions", MF_ROUTE_COMPLETIONS},
    {"POST", "/v1/chat/completions", MF_ROUTE_CHAT},
    {"POST", "/tokenize", MF_ROUTE_TOKENIZE},
    {"POST", "/detokenize", MF_ROUTE_DETOKENIZE},
};

bool mf_route_match(const char *method, const char *url, mf_route *route, mf_oai_error *err) {
    size_t n = strcspn(url, "?"); // a query string does not change the route
    bool path_known = false;
    for (size_t i = 0; i < sizeof k_routes / sizeof k_routes[0]; i++) {
        const route_def *d = &k_routes[i];
        if (strlen(d->path) != n || strncmp(d->path, url, n) != 0) continue;
        path_known = true;
        if (!strcmp(method, d->method) || (!strcmp(method, "HEAD") && !strcmp(d->method, "GET"))) {
            *route = d->route;
            return true;
        }
    }
    if (path_known)
        return mf_oai_error_set(err, 405, INVALID, NULL, "method %.16s is not allowed on %.*s", method, (int)(n < 200 ? n : 200), url);
    return mf_oai_error_set(err, 404, "not_found_error", NULL, "no route %.16s %.*s", method, (int)(n < 200 ? n : 200), url);
}

bool mf_route_needs_key(mf_route r) {
    return r != MF_ROUTE_HEALTH && r != MF_ROUTE_METRICS && r != MF_ROUTE_VERSION;
}

static enum MHD_Result reply_json(mf_srv *s, struct MHD_Connection *conn, unsigned status, mf_sbuf *b) {
    enum MHD_Result rc;
    if (b->oom) {
        mf_oai_error err;
        mf_oai_error_set(&err, 500, "internal_error", NULL, "out of memory building the response");
        rc = mf_http_reply_error(s, conn, &err);
    } else {
        rc = mf_http_reply(s, conn, status, "application/json", b->p ? b->p : "", b->len);
    }
    mf_sbuf_free(b);
    return rc;
}

static enum MHD_Result reply_err(mf_srv *s, struct MHD_Connection *conn, int status, const char *type,
                                 const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static enum MHD_Result reply_err(mf_srv *s, struct MHD_Connection *conn, int status, const char *type,
                                 const char *param, const char *fmt, ...) {
    mf_oai_error err = {.status = status};
    snprintf(err.type, sizeof err.type, "%s", type);
    snprintf(err.param, sizeof err.param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err.message, sizeof err.message, fmt, ap);
    va_end(ap);
    return mf_http_reply_error(s, conn, &err);
}

// 503 unless the model is loaded and the server is not shutting down.
static bool ready(mf_srv *s, mf_oai_error *err) {
    int st = atomic_load(&s->state);
    if (st == MF_SRV_READY) return true;
    return mf_oai_error_set(err, 503, "service_unavailable", NULL, "%s",
                            st == MF_SRV_LOADING ? "the model is still loading" : "the server is shutting down");
}

// The model field names the served model, or is absent.
static bool model_ok(mf_srv *s, const mf_oai_request *r, mf_oai_error *err) {
    if (!r->model || !strcmp(r->model, s->opts->served_name)) return true;
    return mf_oai_error_set(err, 404, "not_found_error", "model", "model: the model `%.200s` does not exist (this server has `%.200s`)",
                            r->model, s->opts->served_name);
}

// Token ids given by the client lie in the vocabulary.
static bool ids_ok(mf_srv *s, const char *name, const int32_t *ids, int64_t n, mf_oai_error *err) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= s->vocab)
            return mf_oai_error_set(err, 400, INVALID, name, "%s[%lld]: token id %d is not in the vocabulary (size %lld)",
                                    name, (long long)i, (int)ids[i], (long long)s->vocab);
    return true;
}

// Text -> a malloc'ed id array (BOS by `bos`).
static bool encode(mf_srv *s, const char *what, const char *text, mf_bos_mode bos, int32_t index, int32_t **ids,
                   int64_t *n, mf_oai_error *err) {
    *ids = NULL;
    *n = 0;
    if (!s->tok)
        return mf_oai_error_set(err, 400, INVALID, what, "%s: the model has no tokenizer: send token ids", what);
    int32_t *t = NULL;
    int64_t nt = 0;
    if (mf_generate_encode_prompt(s->tok, text, bos, index, &t, &nt) != MF_OK)
        return mf_oai_error_set(err, 400, INVALID, what, "%s: %s", what, mf_last_error());
    *ids = malloc((size_t)(nt > 0 ? nt : 1) * sizeof **ids);
    if (*ids) memcpy(*ids, t, (size_t)nt * sizeof **ids);
    mf_tokenizer_free_buffer(t);
    if (!*ids) return mf_oai_error_set(err, 500, "internal_error", NULL, "out of memory tokenizing");
    *n = nt;
    return true;
}

static bool render_chat(mf_srv *s, const mf_oai_request *r, int32_t **ids, int64_t *n, mf_oai_error *err) {
    char *text = NULL;
    size_t len = 0;
    if (!mf_srv_chat_render(s, r->messages, r->n_messages, r->add_generation_prompt, &text, &len, err)) return false;
    // The template writes the BOS it wants as text: no second one unless asked.
    bool ok = encode(s, "messages", text, r->add_special_tokens == 1 ? MF_BOS_AUTO : MF_BOS_NONE, 0, ids, n, err);
    free(text);
    return ok;
}

// The job's prompts as ids: tokenized texts, given ids, or the rendered conversation.
static bool prompts_of(mf_srv *s, mf_job *j, mf_oai_error *err) {
    const mf_oai_request *r = &j->req;
    int32_t n = r->kind == MF_OAI_CHAT ? 1 : r->n_prompts;
    j->prompt_ids = calloc((size_t)n, sizeof *j->prompt_ids);
    j->n_prompt_ids = calloc((size_t)n, sizeof *j->n_prompt_ids);
    if (!j->prompt_ids || !j->n_prompt_ids) return mf_oai_error_set(err, 500, "internal_error", NULL, "out of memory");
    j->n_prompts = n;
    if (r->kind == MF_OAI_CHAT) return render_chat(s, r, &j->prompt_ids[0], &j->n_prompt_ids[0], err);
    for (int32_t p = 0; p < n; p++) {
        const mf_oai_prompt *pr = &r->prompts[p];
        char name[32];
        snprintf(name, sizeof name, n > 1 ? "prompt[%d]" : "prompt", (int)p);
        if (pr->text) {
            mf_bos_mode bos = r->add_special_tokens == 0 ? MF_BOS_NONE : MF_BOS_AUTO;
            if (!encode(s, name, pr->text, bos, p, &j->prompt_ids[p], &j->n_prompt_ids[p], err)) return false;
        } else {
            if (!ids_ok(s, name, pr->ids, pr->n_ids, err)) return false;
            j->prompt_ids[p] = malloc((size_t)pr->n_ids * sizeof *j->prompt_ids[p]);
            if (!j->prompt_ids[p]) return mf_oai_error_set(err, 500, "internal_error", NULL, "out of memory");
            memcpy(j->prompt_ids[p], pr->ids, (size_t)pr->n_ids * sizeof *pr->ids);
            j->n_prompt_ids[p] = pr->n_ids;
        }
    }
    return true;
}

// max_tokens: given, else 16 (completions, as OpenAI and vLLM) or what the
// context leaves (chat); prompt + max_tokens must fit the context.
static bool max_tokens_of(mf_srv *s, mf_job *j, mf_oai_error *err) {
    int64_t longest = 0;
    for (int32_t p = 0; p < j->n_prompts; p++)
        if (j->n_prompt_ids[p] > longest) longest = j->n_prompt_ids[p];
    const char *param = j->req.kind == MF_OAI_CHAT ? "messages" : "prompt";
    if (longest >= s->max_model_len)
        return mf_oai_error_set(err, 400, INVALID, param,
                                "%s: %lld tokens, but this model's maximum context length is %lld tokens", param,
                                (long long)longest, (long long)s->max_model_len);
    int64_t mt = j->req.max_tokens;
    if (mt < 0) mt = j->req.kind == MF_OAI_CHAT ? s->max_model_len - longest : 16;
    if (longest + mt > s->max_model_len)
        return mf_oai_error_set(err, 400, INVALID, "max_tokens",
                                "max_tokens: this model's maximum context length is %lld tokens, but %lld were requested "
                                "(%lld in the prompt, %lld for the completion)",
                                (long long)s->max_model_len, (long long)(longest + mt), (long long)longest, (long long)mt);
    j->max_tokens = mt;
    return true;
}

// A completion's job from its body: parsed, validated, tokenized, ids and seed resolved.
static bool prepare_completion(mf_srv *s, mf_job *j, const char *body, size_t len, mf_oai_error *err) {
    mf_oai_kind kind = j->route == MF_ROUTE_CHAT ? MF_OAI_CHAT : MF_OAI_COMPLETIONS;
    if (!mf_oai_request_parse(kind, body, len, &j->req, err) || !model_ok(s, &j->req, err) || !prompts_of(s, j, err) ||
        !max_tokens_of(s, j, err))
        return false;
    if (!mf_job_alloc_choices(j)) return mf_oai_error_set(err, 500, "internal_error", NULL, "out of memory");
    j->seed = j->req.seed_given ? j->req.seed : mf_srv_random_seed(s);
    j->n_top = j->req.logprobs ? j->req.top_logprobs : 0;
    j->created = (int64_t)time(NULL);
    pthread_mutex_lock(&s->mu);
    uint64_t n = ++s->next_id;
    uint64_t z = s->id_salt ^ (n * 0x9E3779B97F4A7C15ull);
    pthread_mutex_unlock(&s->mu);
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    snprintf(j->id, sizeof j->id, "%s-%016llx%llu", kind == MF_OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)(z ^ (z >> 29)), (unsigned long long)n);
    return true;
}

// HTTP thread: a body whose work is heavy (parsing, templating, tokenizing)
// becomes a job for a prep worker; the connection is suspended until the
// worker answers (or the engine thread admits the completion).
static enum MHD_Result queue_prep(mf_srv *s, struct MHD_Connection *conn, mf_route route, mf_sbuf *body,
                                  mf_job **job_out) {
    mf_oai_error err = {0};
    if (!ready(s, &err)) return mf_http_reply_error(s, conn, &err);
    mf_job *j = mf_job_new(s);
    if (!j) return reply_err(s, conn, 500, "internal_error", NULL, "out of memory");
    j->t_arrival = mf_srv_now(); // TTFT and e2e count the time in the prep queue
    j->route = (int)route;
    j->body = *body; // the job owns the body now: MHD frees the request (q) when the connection ends
    *body = (mf_sbuf){0};
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    pthread_mutex_lock(&j->mu);
    j->conn = conn;
    j->fd = ci ? ci->connect_fd : -1;
    j->suspended = true; // until the prep worker answers or the engine thread admits it
    MHD_suspend_connection(conn);
    pthread_mutex_unlock(&j->mu);
    *job_out = j;
    mf_srv_prep_queue(s, j);
    return MHD_YES;
}

enum MHD_Result mf_route_continue(mf_srv *s, struct MHD_Connection *conn, mf_job *j) {
    pthread_mutex_lock(&j->mu);
    if (j->gone) {
        pthread_mutex_unlock(&j->mu);
        return MHD_NO;
    }
    mf_job_state st = j->state;
    if (st == MF_JOB_FAILED) {
        mf_oai_error err = j->err;
        pthread_mutex_unlock(&j->mu);
        return mf_http_reply_error(s, conn, &err);
    }
    const bool prep_answer = j->route == MF_ROUTE_TOKENIZE || j->route == MF_ROUTE_DETOKENIZE;
    if (st == MF_JOB_DONE && prep_answer) { // a prep worker's answer: j->reply
        mf_sbuf b = j->reply;
        j->reply = (mf_sbuf){0};
        pthread_mutex_unlock(&j->mu);
        return reply_json(s, conn, 200, &b);
    }
    if (st == MF_JOB_PREP) { // woken early: a prep worker is still writing j->req
        j->suspended = true;
        MHD_suspend_connection(conn);
        pthread_mutex_unlock(&j->mu);
        return MHD_YES;
    }
    if (st != MF_JOB_QUEUED && j->req.stream) {
        j->streaming = true;
        j->t_last_write = mf_srv_now();
        pthread_mutex_unlock(&j->mu);
        return mf_http_reply_stream(s, conn, j);
    }
    if (st == MF_JOB_DONE) {
        pthread_mutex_unlock(&j->mu); // DONE: the engine thread no longer writes the job
        mf_sbuf b = {0};
        mf_stream_final_json(j, &b);
        return reply_json(s, conn, 200, &b);
    }
    j->suspended = true; // woken early (not done yet): wait again
    MHD_suspend_connection(conn);
    pthread_mutex_unlock(&j->mu);
    return MHD_YES;
}

// The spelling of a token in tokenizer.json (token_strs of /tokenize, as vLLM's convert_ids_to_tokens).
static void token_spelling(void *user, int32_t prev, int32_t id, mf_sbuf *out) {
    (void)prev;
    const char *t = mf_tokenizer_token_text(user, id);
    if (t) mf_sbuf_puts(out, t);
}

// /tokenize's answer into *b.
static bool tokenize_json(mf_srv *s, const char *body, size_t len, mf_sbuf *b, mf_oai_error *err) {
    mf_oai_request r;
    if (!mf_oai_request_parse(MF_OAI_TOKENIZE, body, len, &r, err)) return false;
    int32_t *ids = NULL;
    int64_t n = 0;
    bool ok = model_ok(s, &r, err);
    if (ok && r.n_messages > 0) {
        ok = render_chat(s, &r, &ids, &n, err);
    } else if (ok && r.prompts[0].text) {
        ok = encode(s, "prompt", r.prompts[0].text, r.add_special_tokens == 0 ? MF_BOS_NONE : MF_BOS_AUTO, 0, &ids, &n,
                    err);
    } else if (ok) { // ids: echoed back after the vocabulary check, as vLLM does
        ok = ids_ok(s, "prompt", r.prompts[0].ids, r.prompts[0].n_ids, err);
        if (ok) {
            ids = r.prompts[0].ids;
            n = r.prompts[0].n_ids;
            r.prompts[0].ids = NULL;
        }
    }
    if (ok) {
        mf_oai_tokstr ts = {token_spelling, (void *)s->tok};
        mf_oai_tokenize_json(b, ids, n, s->max_model_len, r.return_token_strs && s->tok ? &ts : NULL);
    }
    free(ids);
    mf_oai_request_free(&r);
    return ok;
}

// /detokenize's answer into *b.
static bool detokenize_json(mf_srv *s, const char *body, size_t len, mf_sbuf *b, mf_oai_error *err) {
    mf_oai_request r;
    if (!mf_oai_request_parse(MF_OAI_DETOKENIZE, body, len, &r, err)) return false;
    char *text = NULL;
    size_t n = 0;
    bool ok = model_ok(s, &r, err) && ids_ok(s, "tokens", r.tokens, r.n_tokens, err);
    if (ok && !s->tok) {
        ok = mf_oai_error_set(err, 400, INVALID, NULL, "the model has no tokenizer");
    } else if (ok && r.n_tokens > 0 && mf_tokenizer_decode(s->tok, r.tokens, r.n_tokens, &text, &n) != MF_OK) {
        ok = mf_oai_error_set(err, 400, INVALID, "tokens", "tokens: %s", mf_last_error());
    }
    if (ok) mf_oai_detokenize_json(b, text ? text : "", n);
    mf_tokenizer_free_buffer(text);
    mf_oai_request_free(&r);
    return ok;
}

void mf_route_prepare(mf_srv *s, mf_job *j) {
    pthread_mutex_lock(&j->mu);
    bool gone = j->gone;
    pthread_mutex_unlock(&j->mu);
    if (gone) { // the client left while the job was queued: nobody to answer
        mf_job_unref(j);
        return;
    }
    mf_oai_error err = {0};
    mf_sbuf b = {0};
    const char *body = j->body.p ? j->body.p : "";
    size_t len = j->body.len;
    bool completion = j->route == MF_ROUTE_COMPLETIONS || j->route == MF_ROUTE_CHAT;
    bool ok = ready(s, &err);
    if (ok && completion) ok = prepare_completion(s, j, body, len, &err);
    else if (ok && j->route == MF_ROUTE_TOKENIZE) ok = tokenize_json(s, body, len, &b, &err);
    else if (ok && j->route == MF_ROUTE_DETOKENIZE) ok = detokenize_json(s, body, len, &b, &err);
    else if (ok) ok = mf_oai_error_set(&err, 500, "internal_error", NULL, "route %d has no prep work", j->route);
    mf_sbuf_free(&j->body);
    if (ok && completion) {
        pthread_mutex_lock(&j->mu);
        j->state = MF_JOB_QUEUED; // before the engine thread can see it (it sets RUNNING)
        pthread_mutex_unlock(&j->mu);
        if (mf_srv_submit(s, j)) {
            mf_job_unref(j); // the engine thread holds its own; it resumes the connection
            return;
        }
        ok = mf_oai_error_set(&err, 500, "internal_error", NULL, "out of memory queueing the request");
    }
    pthread_mutex_lock(&j->mu);
    if (ok) {
        j->state = MF_JOB_DONE;
        j->reply = b;
    } else {
        j->state = MF_JOB_FAILED;
        j->err = err;
        mf_sbuf_free(&b);
    }
    mf_job_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
    mf_job_unref(j);
}

enum MHD_Result mf_route_handle(mf_srv *s, struct MHD_Connection *conn, mf_route r, mf_sbuf *body, mf_job **job) {
    mf_oai_error err = {0};
    switch (r) {
    case MF_ROUTE_HEALTH:
        if (!ready(s, &err)) return mf_http_reply_error(s, conn, &err);
        return mf_http_reply(s, conn, 200, "text/plain", "", 0);
    case MF_ROUTE_METRICS: {
        mf_sbuf b = {0};
        mf_metrics_render(&s->metrics, &b);
        enum MHD_Result rc = b.oom ? MHD_NO : mf_http_reply(s, conn, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.len);
        mf_sbuf_free(&b);
        return rc;
    }
    case MF_ROUTE_VERSION: {
        mf_sbuf b = {0};
        mf_sbuf_puts(&b, "{\"version\":");
        mf_oai_json_str(&b, mf_version(), strlen(mf_version()));
        mf_sbuf_puts(&b, "}");
        return reply_json(s, conn, 200, &b);
    }
    case MF_ROUTE_MODELS: {
        if (atomic_load(&s->state) == MF_SRV_LOADING) {
            ready(s, &err);
            return mf_http_reply_error(s, conn, &err);
        }
        mf_sbuf b = {0};
        mf_oai_models_json(&b, s->opts->served_name, s->opts->dir, s->created, s->max_model_len);
        return reply_json(s, conn, 200, &b);
    }
    case MF_ROUTE_COMPLETIONS:
    case MF_ROUTE_CHAT:
    case MF_ROUTE_TOKENIZE:
    case MF_ROUTE_DETOKENIZE: return queue_prep(s, conn, r, body, job);
    }
    return reply_err(s, conn, 500, "internal_error", NULL, "unknown route %d", (int)r);
}
