// OpenAI request bodies: parsing and validation (see oai_request.h).
#include "server/oai_request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/utf8.h"

#define MAX_BODY ((size_t)64 << 20)
#define INVALID "invalid_request_error"

bool mf_oai_error_set(mf_oai_error *err, int status, const char *type, const char *param, const char *fmt, ...) {
    err->status = status;
    snprintf(err->type, sizeof err->type, "%s", type ? type : INVALID);
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return false;
}

// A parse in progress: the JSON, the request being filled, the error.
typedef struct {
    mf_oai_request *r;
    mf_oai_error *err;
} ctx;

static bool oom(ctx *c) { return mf_oai_error_set(c->err, 500, "internal_error", NULL, "out of memory parsing the request"); }

// A short description of a JSON value for messages: the value itself when
// it is short (strings cut at 40 bytes), else its kind.
static const char *show(const cJSON *v, char buf[80]) {
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        size_t n = strlen(s);
        if (n <= 40) {
            snprintf(buf, 80, "\"%s\"", s);
        } else {
            size_t cut = 40;
            while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80) cut--; // whole characters
            snprintf(buf, 80, "\"%.*s...\" (%zu bytes)", (int)cut, s, n);
        }
    } else if (cJSON_IsNumber(v)) {
        snprintf(buf, 80, "%.10g", v->valuedouble);
    } else if (cJSON_IsBool(v)) {
        snprintf(buf, 80, "%s", cJSON_IsTrue(v) ? "true" : "false");
    } else if (cJSON_IsNull(v)) {
        snprintf(buf, 80, "null");
    } else if (cJSON_IsArray(v)) {
        snprintf(buf, 80, "an array of %d", cJSON_GetArraySize(v));
    } else if (cJSON_IsObject(v)) {
        snprintf(buf, 80, "an object");
    } else {
        snprintf(buf, 80, "an invalid value");
    }
    return buf;
}

static bool type_error(ctx *c, const char *name, const char *want, const cJSON *v) {
    char b[80];
    return mf_oai_error_set(c->err, 400, INVALID, name, "%s: expected %s, got %s", name, want, show(v, b));
}

// A field; JSON null counts as absent (OpenAI's fields are nullable).
static const cJSON *field(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool get_bool(ctx *c, const cJSON *obj, const char *name, bool *out) {
    const cJSON *v = field(obj, name);
    if (!v) return true;
    if (!cJSON_IsBool(v)) return type_error(c, name, "a boolean", v);
    *out = cJSON_IsTrue(v);
    return true;
}

// An integral JSON number in [lo, hi] (1e3 and 2.0 are integers; 1.5 is not).
static bool as_int(ctx *c, const char *name, const cJSON *v, double lo, double hi, int64_t *out) {
    if (!cJSON_IsNumber(v)) return type_error(c, name, "an integer", v);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d)) return type_error(c, name, "an integer", v);
    if (d < lo || d > hi) {
        char b[80];
        return mf_oai_error_set(c->err, 400, INVALID, name, "%s: %s is not in [%.0f, %.0f]", name, show(v, b), lo, hi);
    }
    *out = (int64_t)d;
    return true;
}

static bool get_int(ctx *c, const cJSON *obj, const char *name, double lo, double hi, int64_t *out, bool *given) {
    const cJSON *v = field(obj, name);
    if (given) *given = v != NULL;
    return !v || as_int(c, name, v, lo, hi, out);
}

// A finite number in [lo, hi]; lo_open: lo itself is refused.
static bool get_num(ctx *c, const cJSON *obj, const char *name, double lo, bool lo_open, double hi, double *out) {
    const cJSON *v = field(obj, name);
    if (!v) return true;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return type_error(c, name, "a number", v);
    double d = v->valuedouble;
    if (d < lo || (lo_open && d == lo) || d > hi) {
        char b[80];
        return mf_oai_error_set(c->err, 400, INVALID, name, "%s: %s is not in %s%g, %g]", name, show(v, b),
                                lo_open ? "(" : "[", lo, hi);
    }
    *out = d;
    return true;
}

static bool get_str(ctx *c, const cJSON *obj, const char *name, const char **out) {
    const cJSON *v = field(obj, name);
    if (!v) return true;
    if (!cJSON_IsString(v)) return type_error(c, name, "a string", v);
    *out = v->valuestring;
    return true;
}

static bool dup(ctx *c, const char *s, char **out) {
    *out = strdup(s);
    return *out ? true : oom(c);
}

// A list of token ids: integers in [0, 2^31 - 1], at least one.
static bool id_list(ctx *c, const char *name, const cJSON *arr, int32_t **ids, int64_t *n) {
    int64_t len = cJSON_GetArraySize(arr);
    if (len == 0) return mf_oai_error_set(c->err, 400, INVALID, name, "%s: an empty list of token ids", name);
    *ids = malloc((size_t)len * sizeof **ids);
    if (!*ids) return oom(c);
    *n = len;
    int64_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        int64_t v = 0;
        char nm[48];
        snprintf(nm, sizeof nm, "%s[%lld]", name, (long long)i);
        if (!as_int(c, nm, e, 0, 2147483647.0, &v)) return false;
        (*ids)[i++] = (int32_t)v;
    }
    return true;
}

// prompt: a string, a list of strings, a list of ids or a list of lists of ids.
static bool parse_prompt(ctx *c, const cJSON *root) {
    mf_oai_request *r = c->r;
    const cJSON *p = field(root, "prompt");
    if (!p) return mf_oai_error_set(c->err, 400, INVALID, "prompt", "prompt: missing (a string, a list of strings, or token ids)");
    if (cJSON_IsString(p)) {
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) return oom(c);
        r->n_prompts = 1;
        return dup(c, p->valuestring, &r->prompts[0].text);
    }
    if (!cJSON_IsArray(p)) return type_error(c, "prompt", "a string, a list of strings, or token ids", p);
    int n = cJSON_GetArraySize(p);
    if (n == 0) return mf_oai_error_set(c->err, 400, INVALID, "prompt", "prompt: an empty list");
    const cJSON *first = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsNumber(first) || c->r->kind == MF_OAI_TOKENIZE) { // one prompt of ids
        if (c->r->kind == MF_OAI_TOKENIZE && !cJSON_IsNumber(first))
            return type_error(c, "prompt", "a string or token ids", p);
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) return oom(c);
        r->n_prompts = 1;
        return id_list(c, "prompt", p, &r->prompts[0].ids, &r->prompts[0].n_ids);
    }
    if (n > MF_OAI_MAX_PROMPTS)
        return mf_oai_error_set(c->err, 400, INVALID, "prompt", "prompt: %d prompts, more than %d", n, MF_OAI_MAX_PROMPTS);
    r->prompts = calloc((size_t)n, sizeof *r->prompts);
    if (!r->prompts) return oom(c);
    r->n_prompts = n;
    bool texts = cJSON_IsString(first);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, p) {
        char nm[48];
        snprintf(nm, sizeof nm, "prompt[%d]", i);
        if (texts) {
            if (!cJSON_IsString(e)) return type_error(c, nm, "a string (as prompt[0])", e);
            if (!dup(c, e->valuestring, &r->prompts[i].text)) return false;
        } else {
            if (!cJSON_IsArray(e)) return type_error(c, nm, "a list of token ids (as prompt[0])", e);
            if (!id_list(c, nm, e, &r->prompts[i].ids, &r->prompts[i].n_ids)) return false;
        }
        i++;
    }
    return true;
}

// content: a string, a list of {"type": "text", "text": ...} parts (joined
// with "\n", as vLLM does for templates that take a string), or null for an
// assistant message.
static bool parse_content(ctx *c, int i, const cJSON *m, const char *role, char **out) {
    char nm[48];
    snprintf(nm, sizeof nm, "messages[%d].content", i);
    const cJSON *v = field(m, "content");
    if (!v) {
        if (!strcmp(role, "assistant")) return dup(c, "", out);
        return mf_oai_error_set(c->err, 400, INVALID, nm, "%s: missing", nm);
    }
    if (cJSON_IsString(v)) return dup(c, v->valuestring, out);
    if (!cJSON_IsArray(v)) return type_error(c, nm, "a string or a list of content parts", v);
    size_t total = 1;
    int j = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, v) {
        char pn[64];
        snprintf(pn, sizeof pn, "%s[%d]", nm, j);
        if (!cJSON_IsObject(part)) return type_error(c, pn, "a content part object", part);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type)) return type_error(c, pn, "a \"type\" string", type ? type : part);
        if (strcmp(type->valuestring, "text") != 0) {
            char b[80];
            return mf_oai_error_set(c->err, 400, INVALID, nm, "%s.type: %s is not supported (text parts only)", pn,
                                    show(type, b));
        }
        if (!cJSON_IsString(text)) return type_error(c, pn, "a \"text\" string", text ? text : part);
        total += strlen(text->valuestring) + 1;
        j++;
    }
    char *s = malloc(total);
    if (!s) return oom(c);
    size_t w = 0;
    j = 0;
    cJSON_ArrayForEach(part, v) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        if (j++) s[w++] = '\n';
        size_t n = strlen(t);
        memcpy(s + w, t, n);
        w += n;
    }
    s[w] = '\0';
    *out = s;
    return true;
}

static bool parse_messages(ctx *c, const cJSON *root) {
    mf_oai_request *r = c->r;
    const cJSON *ms = field(root, "messages");
    if (!ms) return mf_oai_error_set(c->err, 400, INVALID, "messages", "messages: missing");
    if (!cJSON_IsArray(ms)) return type_error(c, "messages", "a list of messages", ms);
    int n = cJSON_GetArraySize(ms);
    if (n == 0) return mf_oai_error_set(c->err, 400, INVALID, "messages", "messages: an empty list");
    if (n > MF_OAI_MAX_MESSAGES)
        return mf_oai_error_set(c->err, 400, INVALID, "messages", "messages: %d messages, more than %d", n,
                                MF_OAI_MAX_MESSAGES);
    r->messages = calloc((size_t)n, sizeof *r->messages);
    if (!r->messages) return oom(c);
    r->n_messages = n;
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, ms) {
        char nm[48];
        snprintf(nm, sizeof nm, "messages[%d]", i);
        if (!cJSON_IsObject(m)) return type_error(c, nm, "a message object", m);
        snprintf(nm, sizeof nm, "messages[%d].role", i);
        const cJSON *role = field(m, "role");
        if (!role) return mf_oai_error_set(c->err, 400, INVALID, nm, "%s: missing", nm);
        if (!cJSON_IsString(role)) return type_error(c, nm, "a string", role);
        const char *rs = role->valuestring;
        if (!strcmp(rs, "developer")) rs = "system"; // OpenAI's newer name for the system role
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant")) {
            char b[80];
            return mf_oai_error_set(c->err, 400, INVALID, nm, "%s: %s is not supported (system, user, assistant)", nm,
                                    show(role, b));
        }
        if (!dup(c, rs, &r->messages[i].role)) return false;
        if (!parse_content(c, i, m, rs, &r->messages[i].content)) return false;
        i++;
    }
    return true;
}

static bool parse_stop(ctx *c, const cJSON *root) {
    mf_oai_request *r = c->r;
    const cJSON *s = field(root, "stop");
    if (!s) return true;
    if (cJSON_IsString(s)) {
        if (!s->valuestring[0]) return mf_oai_error_set(c->err, 400, INVALID, "stop", "stop: an empty string");
        r->stop = calloc(1, sizeof *r->stop);
        if (!r->stop) return oom(c);
        r->n_stop = 1;
        return dup(c, s->valuestring, &r->stop[0]);
    }
    if (!cJSON_IsArray(s)) return type_error(c, "stop", "a string or a list of strings", s);
    int n = cJSON_GetArraySize(s);
    if (n > MF_OAI_MAX_STOP)
        return mf_oai_error_set(c->err, 400, INVALID, "stop", "stop: %d strings, more than %d", n, MF_OAI_MAX_STOP);
    if (n == 0) return true;
    r->stop = calloc((size_t)n, sizeof *r->stop);
    if (!r->stop) return oom(c);
    r->n_stop = n;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, s) {
        char nm[48];
        snprintf(nm, sizeof nm, "stop[%d]", i);
        if (!cJSON_IsString(e)) return type_error(c, nm, "a string", e);
        if (!e->valuestring[0]) return mf_oai_error_set(c->err, 400, INVALID, nm, "%s: an empty string", nm);
        if (!dup(c, e->valuestring, &r->stop[i])) return false;
        i++;
    }
    return true;
}

// A field we know but do not implement: refused unless it has its neutral value.
static bool unsupported(ctx *c, const char *name, const cJSON *v, const char *why) {
    char b[80];
    return mf_oai_error_set(c->err, 400, INVALID, name, "%s: %s is not supported%s", name, show(v, b), why);
}

static bool parse_unsupported(ctx *c, const cJSON *root) {
    static const char *const penalties[] = {"frequency_penalty", "presence_penalty"};
    for (int i = 0; i < 2; i++) {
        double d = 0;
        if (!get_num(c, root, penalties[i], -2.0, false, 2.0, &d)) return false;
        if (d != 0) return unsupported(c, penalties[i], field(root, penalties[i]), " (only 0; repetition_penalty is)");
    }
    const cJSON *v;
    if ((v = field(root, "echo")) && (!cJSON_IsBool(v) || cJSON_IsTrue(v)))
        return cJSON_IsBool(v) ? unsupported(c, "echo", v, "") : type_error(c, "echo", "a boolean", v);
    if ((v = field(root, "best_of"))) {
        int64_t b;
        if (!as_int(c, "best_of", v, 1, 1e9, &b)) return false;
        if (b != 1 && b != c->r->n) return unsupported(c, "best_of", v, " (only 1 or n)");
    }
    if ((v = field(root, "suffix")) && !(cJSON_IsString(v) && !v->valuestring[0]))
        return cJSON_IsString(v) ? unsupported(c, "suffix", v, "") : type_error(c, "suffix", "a string", v);
    if ((v = field(root, "logit_bias")) && !(cJSON_IsObject(v) && !v->child))
        return cJSON_IsObject(v) ? unsupported(c, "logit_bias", v, "") : type_error(c, "logit_bias", "an object", v);
    static const char *const lists[] = {"tools", "functions"};
    for (int i = 0; i < 2; i++)
        if ((v = field(root, lists[i])) && !(cJSON_IsArray(v) && !v->child))
            return cJSON_IsArray(v) ? unsupported(c, lists[i], v, " (no tool calls)") : type_error(c, lists[i], "a list", v);
    if ((v = field(root, "response_format"))) {
        const cJSON *t = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "type") : NULL;
        if (!cJSON_IsString(t)) return type_error(c, "response_format", "an object with a \"type\" string", v);
        if (strcmp(t->valuestring, "text") != 0)
            return unsupported(c, "response_format.type", t, " (only \"text\")");
    }
    int64_t min_tokens = 0;
    if (!get_int(c, root, "min_tokens", 0, 2147483647.0, &min_tokens, NULL)) return false;
    if (min_tokens != 0) return unsupported(c, "min_tokens", field(root, "min_tokens"), " (only 0)");
    return true;
}

static bool parse_sampling(ctx *c, const cJSON *root) {
    mf_oai_request *r = c->r;
    bool chat = r->kind == MF_OAI_CHAT;
    int64_t v;
    bool given;
    if (!get_int(c, root, "max_tokens", 1, 2147483647.0, &r->max_tokens, NULL)) return false;
    if (chat && !get_int(c, root, "max_completion_tokens", 1, 2147483647.0, &r->max_tokens, NULL)) return false;
    if (!get_num(c, root, "temperature", 0, false, 1e4, &r->temperature)) return false;
    if (!get_num(c, root, "top_p", 0, true, 1, &r->top_p)) return false;
    if (!get_int(c, root, "top_k", -1, 2147483647.0, &v, &given)) return false;
    if (given) r->top_k = v < 0 ? 0 : (int32_t)v;
    if (!get_num(c, root, "min_p", 0, false, 1, &r->min_p)) return false;
    if (!get_num(c, root, "repetition_penalty", 0, true, 1e4, &r->repetition_penalty)) return false;
    if (!get_int(c, root, "seed", -9223372036854775808.0, 9223372036854775807.0, &v, &r->seed_given)) return false;
    if (r->seed_given) r->seed = (uint64_t)v;
    if (!get_int(c, root, "n", 1, MF_OAI_MAX_N, &v, &given)) return false;
    if (given) r->n = (int32_t)v;
    if ((int64_t)r->n * (r->n_prompts > 0 ? r->n_prompts : 1) > MF_OAI_MAX_CHOICES)
        return mf_oai_error_set(c->err, 400, INVALID, "n", "n: %d choices for each of %d prompts, more than %d in all",
                                r->n, r->n_prompts, MF_OAI_MAX_CHOICES);
    if (!parse_stop(c, root)) return false;
    const cJSON *ids = field(root, "stop_token_ids");
    if (ids) {
        if (!cJSON_IsArray(ids)) return type_error(c, "stop_token_ids", "a list of token ids", ids);
        int n = cJSON_GetArraySize(ids);
        if (n > MF_OAI_MAX_STOP_IDS)
            return mf_oai_error_set(c->err, 400, INVALID, "stop_token_ids", "stop_token_ids: %d ids, more than %d", n,
                                    MF_OAI_MAX_STOP_IDS);
        if (n > 0) {
            int64_t len;
            if (!id_list(c, "stop_token_ids", ids, &r->stop_ids, &len)) return false;
            r->n_stop_ids = (int32_t)len;
        }
    }
    const cJSON *lp = field(root, "logprobs");
    if (chat) {
        if (!get_bool(c, root, "logprobs", &r->logprobs)) return false;
        bool tg;
        if (!get_int(c, root, "top_logprobs", 0, MF_OAI_MAX_TOP_LOGPROBS, &v, &tg)) return false;
        if (tg) {
            r->top_logprobs = (int32_t)v;
            if (v > 0 && !r->logprobs)
                return mf_oai_error_set(c->err, 400, INVALID, "top_logprobs",
                                        "top_logprobs: %lld needs logprobs: true", (long long)v);
        }
    } else if (lp) {
        if (!as_int(c, "logprobs", lp, 0, MF_OAI_MAX_TOP_LOGPROBS, &v)) return false;
        r->logprobs = true;
        r->top_logprobs = (int32_t)v;
    }
    if (!get_bool(c, root, "ignore_eos", &r->ignore_eos)) return false;
    if (!get_bool(c, root, "stream", &r->stream)) return false;
    const cJSON *so = field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return type_error(c, "stream_options", "an object", so);
        if (!r->stream)
            return mf_oai_error_set(c->err, 400, INVALID, "stream_options", "stream_options: only allowed with stream: true");
        if (!get_bool(c, so, "include_usage", &r->include_usage)) {
            snprintf(c->err->param, sizeof c->err->param, "stream_options.include_usage");
            return false;
        }
    }
    return parse_unsupported(c, root);
}

static bool parse_root(ctx *c, const cJSON *root) {
    mf_oai_request *r = c->r;
    const char *model = NULL;
    if (!get_str(c, root, "model", &model)) return false;
    if (model && !dup(c, model, &r->model)) return false;
    bool b = false;
    if (!get_bool(c, root, "add_special_tokens", &b)) return false;
    if (field(root, "add_special_tokens")) r->add_special_tokens = b;
    if (!get_bool(c, root, "add_generation_prompt", &r->add_generation_prompt)) return false;
    switch (r->kind) {
    case MF_OAI_COMPLETIONS:
        return parse_prompt(c, root) && parse_sampling(c, root);
    case MF_OAI_CHAT:
        return parse_messages(c, root) && parse_sampling(c, root);
    case MF_OAI_TOKENIZE:
        if (!get_bool(c, root, "return_token_strs", &r->return_token_strs)) return false;
        if (field(root, "messages")) {
            if (field(root, "prompt"))
                return mf_oai_error_set(c->err, 400, INVALID, "prompt", "prompt: give prompt or messages, not both");
            return parse_messages(c, root);
        }
        return parse_prompt(c, root);
    case MF_OAI_DETOKENIZE: {
        const cJSON *t = field(root, "tokens");
        if (!t) return mf_oai_error_set(c->err, 400, INVALID, "tokens", "tokens: missing (a list of token ids)");
        if (!cJSON_IsArray(t)) return type_error(c, "tokens", "a list of token ids", t);
        if (!t->child) return true; // nothing to decode: ""
        return id_list(c, "tokens", t, &r->tokens, &r->n_tokens);
    }
    }
    return mf_oai_error_set(c->err, 500, "internal_error", NULL, "unknown request kind %d", (int)r->kind);
}

bool mf_oai_request_parse(mf_oai_kind kind, const char *body, size_t len, mf_oai_request *out, mf_oai_error *err) {
    *out = (mf_oai_request){.kind = kind, .add_generation_prompt = true, .add_special_tokens = -1, .max_tokens = -1,
                            .temperature = 1.0, .top_p = 1.0, .repetition_penalty = 1.0, .n = 1};
    *err = (mf_oai_error){0};
    if (!body && len) return mf_oai_error_set(err, 400, INVALID, NULL, "request body: NULL with %zu bytes", len);
    if (len > MAX_BODY) return mf_oai_error_set(err, 413, INVALID, NULL, "request body: %zu bytes, more than %zu", len, MAX_BODY);
    size_t bad;
    if (!mf_srv_utf8_valid(body, len, &bad))
        return mf_oai_error_set(err, 400, INVALID, NULL, "request body: not valid UTF-8 (byte 0x%02x at offset %zu)",
                                (unsigned char)body[bad], bad);
    if (len == 0) return mf_oai_error_set(err, 400, INVALID, NULL, "request body: empty (expected a JSON object)");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        return mf_oai_error_set(err, 400, INVALID, NULL, "request body: malformed JSON at offset %zu", at);
    }
    size_t at = (size_t)(end - body);
    while (at < len && (body[at] == ' ' || body[at] == '\t' || body[at] == '\n' || body[at] == '\r')) at++;
    bool ok;
    ctx c = {.r = out, .err = err};
    if (at < len) {
        ok = mf_oai_error_set(err, 400, INVALID, NULL, "request body: data after the JSON value at offset %zu", at);
    } else if (!cJSON_IsObject(root)) {
        ok = type_error(&c, "request body", "a JSON object", root);
        err->param[0] = '\0';
    } else {
        ok = parse_root(&c, root);
    }
    cJSON_Delete(root);
    if (!ok) mf_oai_request_free(out);
    return ok;
}

void mf_oai_request_free(mf_oai_request *r) {
    if (!r) return;
    free(r->model);
    for (int32_t i = 0; r->prompts && i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].ids);
    }
    free(r->prompts);
    for (int32_t i = 0; r->messages && i < r->n_messages; i++) {
        free(r->messages[i].role);
        free(r->messages[i].content);
    }
    free(r->messages);
    for (int32_t i = 0; r->stop && i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->stop_ids);
    free(r->tokens);
    *r = (mf_oai_request){0};
}
