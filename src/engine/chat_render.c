// Rendering a conversation with a chat template: the checks every template
// shares, then one function per family that produces what the published
// Jinja template produces (whose lines are quoted beside the code that
// mirrors them). Whitespace trimming is Python's str.strip() (Jinja's trim
// filter is the same): the 29 code points Python counts as whitespace.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/sbuf.h"
#include "engine/chat.h"

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT } chat_role;

static const char *const role_names[] = {"system", "user", "assistant"};

// A message after the checks: its role, and its content (NUL-terminated) with its length.
typedef struct {
    chat_role role;
    const char *text;
    size_t len;
} msg;

// ---- output ------------------------------------------------------------------------------------


// ---- text --------------------------------------------------------------------------------------

int64_t mf_chat_utf8_bad_at(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        const unsigned c = s[i];
        size_t n;
        unsigned cp, min;
        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xe0) == 0xc0) n = 1, cp = c & 0x1f, min = 0x80;
        else if ((c & 0xf0) == 0xe0) n = 2, cp = c & 0x0f, min = 0x800;
        else if ((c & 0xf8) == 0xf0) n = 3, cp = c & 0x07, min = 0x10000;
        else return (int64_t)i;
        if (i + n >= len) return (int64_t)i; // truncated
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return (int64_t)i;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return (int64_t)i;
        i += n + 1;
    }
    return -1;
}

// Python's str.isspace(): \t \n \v \f \r, U+001C..U+001F, space, U+0085,
// U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
static bool py_space(unsigned cp) {
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
           cp == 0x3000;
}

// The code point at s[i] (valid UTF-8) and its byte count.
static unsigned cp_at(const unsigned char *s, size_t i, size_t *n) {
    const unsigned c = s[i];
    if (c < 0x80) return *n = 1, c;
    if ((c & 0xe0) == 0xc0) return *n = 2, (c & 0x1f) << 6 | (s[i + 1] & 0x3f);
    if ((c & 0xf0) == 0xe0) return *n = 3, (c & 0x0f) << 12 | (s[i + 1] & 0x3f) << 6 | (s[i + 2] & 0x3f);
    return *n = 4, (c & 0x07) << 18 | (s[i + 1] & 0x3f) << 12 | (s[i + 2] & 0x3f) << 6 | (s[i + 3] & 0x3f);
}

// Appends s[0..len) with Python's strip() applied (s is valid UTF-8).
static void put_strip(mf_sbuf *b, const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t start = 0, end = len, n;
    while (start < end && py_space(cp_at(u, start, &n))) start += n;
    while (end > start) {
        size_t k = end - 1;
        while (k > start && (u[k] & 0xc0) == 0x80) k--;
        if (!py_space(cp_at(u, k, &n))) break;
        end = k;
    }
    mf_sbuf_put(b, s + start, end - start);
}

// ---- what every template shares ----------------------------------------------------------------

typedef struct {
    const mf_chat_template *t;
    const char *name; // the kind's name, for messages
    mf_sbuf out;
} render_ctx;

// The template's raise_exception(...): the conversation breaks its rules.
static mf_status refuse(const render_ctx *c, int64_t i, const msg *m, const char *why) {
    return mf_fail(MF_ERR_INVALID_ARG, "chat_render: the %s template refuses messages[%lld] (%s): %s", c->name,
                   (long long)i, role_names[m->role], why);
}

// `bos_token + ...` (or eos): Jinja fails on an undefined token in an
// expression, so do we; printed alone ({{ bos_token }}) it renders empty.
static mf_status put_token_expr(render_ctx *c, const char *tok, const char *which) {
    if (!tok)
        return mf_fail(MF_ERR_UNSUPPORTED, "chat_render: the %s template inserts %s, which the checkpoint does not "
                                           "define (tokenizer_config.json)",
                       c->name, which);
    mf_sbuf_puts(&c->out, tok);
    return MF_OK;
}

static void put_token_print(render_ctx *c, const char *tok) {
    if (tok) mf_sbuf_puts(&c->out, tok);
}

// ---- Llama-2 -----------------------------------------------------------------------------------

// {% if messages[0]['role'] == 'system' %} loop_messages = messages[1:], system_message = its content
// {% else %} system_message = false; then per message, index k in loop_messages:
//   roles must alternate user/assistant from k = 0 (raise_exception otherwise);
//   k == 0 and system_message != false: content = '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + content
//   user:      bos_token + '[INST] ' + content.strip() + ' [/INST]'
//   assistant: ' ' + content.strip() + ' ' + eos_token
//   (a system message at an odd k renders nothing). add_generation_prompt is not used.
static mf_status render_llama2(render_ctx *c, const msg *ms, int64_t n) {
    const bool has_sys = ms[0].role == ROLE_SYSTEM; // an empty system message still counts ('' != false)
    const int64_t first = has_sys ? 1 : 0;
    for (int64_t i = first; i < n; i++) {
        const int64_t k = i - first;
        const msg *m = &ms[i];
        if ((m->role == ROLE_USER) != (k % 2 == 0))
            return refuse(c, i, m, "Conversation roles must alternate user/assistant/user/assistant/...");
        if (m->role == ROLE_SYSTEM) continue;
        if (m->role == ROLE_USER) {
            MF_TRY(put_token_expr(c, c->t->bos, "bos_token"));
            mf_sbuf_puts(&c->out, "[INST] ");
        } else {
            mf_sbuf_puts(&c->out, " ");
        }
        if (k == 0 && has_sys) { // strip() applies to the whole concatenation
            mf_sbuf tmp = {0};
            mf_sbuf_puts(&tmp, "<<SYS>>\n");
            mf_sbuf_put(&tmp, ms[0].text, ms[0].len);
            mf_sbuf_puts(&tmp, "\n<</SYS>>\n\n");
            mf_sbuf_put(&tmp, m->text, m->len);
            if (tmp.oom) {
                free(tmp.p);
                return mf_fail(MF_ERR_OOM, "chat_render: out of host memory");
            }
            put_strip(&c->out, tmp.p, tmp.len);
            free(tmp.p);
        } else {
            put_strip(&c->out, m->text, m->len);
        }
        if (m->role == ROLE_USER) {
            mf_sbuf_puts(&c->out, " [/INST]");
        } else {
            mf_sbuf_puts(&c->out, " ");
            MF_TRY(put_token_expr(c, c->t->eos, "eos_token"));
        }
    }
    return MF_OK;
}

// ---- Llama-3 -----------------------------------------------------------------------------------

static void put_llama3_turn(render_ctx *c, const char *role, const char *text, size_t len) {
    mf_sbuf_puts(&c->out, "<|start_header_id|>");
    mf_sbuf_puts(&c->out, role);
    mf_sbuf_puts(&c->out, "<|end_header_id|>\n\n");
    put_strip(&c->out, text, len);
    mf_sbuf_puts(&c->out, "<|eot_id|>");
}

// 3.0: per message: (bos_token + on the first) '<|start_header_id|>' + role +
// '<|end_header_id|>\n\n' + content | trim + '<|eot_id|>'; then the generation prompt.
static mf_status render_llama3(render_ctx *c, const msg *ms, int64_t n, bool gen) {
    for (int64_t i = 0; i < n; i++) {
        if (i == 0) MF_TRY(put_token_expr(c, c->t->bos, "bos_token"));
        put_llama3_turn(c, role_names[ms[i].role], ms[i].text, ms[i].len);
    }
    if (gen) mf_sbuf_puts(&c->out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return MF_OK;
}

// strftime("%d %b %Y") in the C locale, as Python's datetime gives it.
static void today(char *buf, size_t size) {
    static const char *const mon[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    const time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm)) {
        snprintf(buf, size, "26 Jul 2024"); // the template's own fallback
        return;
    }
    snprintf(buf, size, "%02d %s %d", tm.tm_mday, mon[tm.tm_mon % 12], tm.tm_year + 1900);
}

// 3.1 / 3.2 (no tools): {{- bos_token }}; a first system message is taken out
// (its content | trim); '<|start_header_id|>system<|end_header_id|>\n\n' +
// 'Cutting Knowledge Date: December 2023\n' + 'Today Date: ' + date_string +
// '\n\n' + system_message + '<|eot_id|>'; then every other message as in 3.0
// (no BOS); then the generation prompt.
static mf_status render_llama31(render_ctx *c, const msg *ms, int64_t n, const mf_chat_opts *o) {
    char buf[64];
    const char *date = o->date_string;
    if (!date && c->t->kind == MF_CHAT_LLAMA3_2) { // strftime_now("%d %b %Y")
        today(buf, sizeof buf);
        date = buf;
    } else if (!date) {
        date = "26 Jul 2024";
    }
    put_token_print(c, c->t->bos);
    mf_sbuf_puts(&c->out, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n");
    mf_sbuf_puts(&c->out, "Today Date: ");
    mf_sbuf_puts(&c->out, date);
    mf_sbuf_puts(&c->out, "\n\n");
    int64_t first = 0;
    if (ms[0].role == ROLE_SYSTEM) {
        put_strip(&c->out, ms[0].text, ms[0].len);
        first = 1;
    }
    mf_sbuf_puts(&c->out, "<|eot_id|>");
    for (int64_t i = first; i < n; i++) put_llama3_turn(c, role_names[ms[i].role], ms[i].text, ms[i].len);
    if (o->add_generation_prompt) mf_sbuf_puts(&c->out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return MF_OK;
}

// ---- Mistral -----------------------------------------------------------------------------------

// The first templates (no system role): {{ bos_token }}; per message i: roles
// must alternate from i = 0; user: '[INST] ' + content + ' [/INST]';
// assistant: content + eos_token (v0.1: + ' '); anything else raises.
static mf_status render_mistral_old(render_ctx *c, const msg *ms, int64_t n, bool eos_space) {
    put_token_print(c, c->t->bos);
    for (int64_t i = 0; i < n; i++) {
        const msg *m = &ms[i];
        if ((m->role == ROLE_USER) != (i % 2 == 0))
            return refuse(c, i, m, "Conversation roles must alternate user/assistant/user/assistant/...");
        if (m->role == ROLE_USER) {
            mf_sbuf_puts(&c->out, "[INST] ");
            mf_sbuf_put(&c->out, m->text, m->len);
            mf_sbuf_puts(&c->out, " [/INST]");
        } else if (m->role == ROLE_ASSISTANT) {
            mf_sbuf_put(&c->out, m->text, m->len);
            MF_TRY(put_token_expr(c, c->t->eos, "eos_token"));
            if (eos_space) mf_sbuf_puts(&c->out, " ");
        } else {
            return refuse(c, i, m, "Only user and assistant roles are supported!");
        }
    }
    return MF_OK;
}

static const char mistral_alternate[] =
    "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...";
static const char mistral_roles[] =
    "Only user and assistant roles are supported, with the exception of an initial optional system message!";

// v1 (mid-2024) and v3. A first system message is taken out (as is: no trim);
// {{- bos_token }}; per message k of the rest, roles must alternate from k = 0
// (v3 checks them all before rendering anything, v1 as it goes, which only
// changes which message an error names):
//   v1 user:      ' [INST] ' + (k == 0 and a system message: system + '\n\n') + content + ' [/INST]'
//   v1 assistant: ' ' + content + eos_token
//   v3 user:      '[INST] ' + (k is the last and a system message: system + '\n\n') + content + '[/INST]'
//   v3 assistant: ' ' + content | trim + eos_token
//   anything else raises. No generation prompt.
static mf_status render_mistral(render_ctx *c, const msg *ms, int64_t n, bool v3) {
    const bool has_sys = ms[0].role == ROLE_SYSTEM;
    const int64_t first = has_sys ? 1 : 0;
    if (v3) {
        for (int64_t i = first; i < n; i++)
            if ((ms[i].role == ROLE_USER) != ((i - first) % 2 == 0)) return refuse(c, i, &ms[i], mistral_alternate);
    }
    put_token_print(c, c->t->bos);
    for (int64_t i = first; i < n; i++) {
        const msg *m = &ms[i];
        const int64_t k = i - first;
        if (!v3 && (m->role == ROLE_USER) != (k % 2 == 0)) return refuse(c, i, m, mistral_alternate);
        if (m->role == ROLE_USER) {
            mf_sbuf_puts(&c->out, v3 ? "[INST] " : " [INST] ");
            if (has_sys && (v3 ? i == n - 1 : k == 0)) {
                mf_sbuf_put(&c->out, ms[0].text, ms[0].len);
                mf_sbuf_puts(&c->out, "\n\n");
            }
            mf_sbuf_put(&c->out, m->text, m->len);
            mf_sbuf_puts(&c->out, v3 ? "[/INST]" : " [/INST]");
        } else if (m->role == ROLE_ASSISTANT) {
            mf_sbuf_puts(&c->out, " ");
            if (v3) put_strip(&c->out, m->text, m->len);
            else mf_sbuf_put(&c->out, m->text, m->len);
            MF_TRY(put_token_expr(c, c->t->eos, "eos_token"));
        } else {
            return refuse(c, i, m, mistral_roles);
        }
    }
    return MF_OK;
}

// ---- ChatML ------------------------------------------------------------------------------------

// Per message: '<|im_start|>' + role + '\n' + content + '<|im_end|>' + '\n';
// Qwen's templates first add a system message when the conversation does not
// open with one; then '<|im_start|>assistant\n' as the generation prompt.
static mf_status render_chatml(render_ctx *c, const msg *ms, int64_t n, const char *default_system, bool gen) {
    if (default_system && ms[0].role != ROLE_SYSTEM) {
        mf_sbuf_puts(&c->out, "<|im_start|>system\n");
        mf_sbuf_puts(&c->out, default_system);
        mf_sbuf_puts(&c->out, "<|im_end|>\n");
    }
    for (int64_t i = 0; i < n; i++) {
        mf_sbuf_puts(&c->out, "<|im_start|>");
        mf_sbuf_puts(&c->out, role_names[ms[i].role]);
        mf_sbuf_puts(&c->out, "\n");
        mf_sbuf_put(&c->out, ms[i].text, ms[i].len);
        mf_sbuf_puts(&c->out, "<|im_end|>\n");
    }
    if (gen) mf_sbuf_puts(&c->out, "<|im_start|>assistant\n");
    return MF_OK;
}

// ---- the entry point ---------------------------------------------------------------------------

// Checks one message; fills *m.
static mf_status check_message(const mf_chat_message *in, int64_t i, msg *m) {
    if (!in->role) return mf_fail(MF_ERR_INVALID_ARG, "chat_render: messages[%lld].role is NULL", (long long)i);
    if (!in->content)
        return mf_fail(MF_ERR_INVALID_ARG, "chat_render: messages[%lld].content is NULL", (long long)i);
    if (strcmp(in->role, "system") == 0) m->role = ROLE_SYSTEM;
    else if (strcmp(in->role, "user") == 0) m->role = ROLE_USER;
    else if (strcmp(in->role, "assistant") == 0) m->role = ROLE_ASSISTANT;
    else if (strcmp(in->role, "tool") == 0 || strcmp(in->role, "ipython") == 0 ||
             strcmp(in->role, "tool_results") == 0 || strcmp(in->role, "function") == 0)
        return mf_fail(MF_ERR_UNSUPPORTED,
                       "chat_render: messages[%lld] has role '%s': tool messages and tool calls are not supported",
                       (long long)i, in->role);
    else {
        const size_t rl = strlen(in->role);
        const int64_t bad = mf_chat_utf8_bad_at(in->role, rl);
        return mf_fail(MF_ERR_INVALID_ARG, "chat_render: messages[%lld] has role '%.64s' (want system, user or "
                                           "assistant)",
                       (long long)i, bad < 0 ? in->role : "<not UTF-8>");
    }
    m->text = in->content;
    m->len = strlen(in->content);
    const int64_t bad = mf_chat_utf8_bad_at(m->text, m->len);
    if (bad >= 0)
        return mf_fail(MF_ERR_INVALID_ARG,
                       "chat_render: messages[%lld].content is not valid UTF-8 (byte %lld is 0x%02x)", (long long)i,
                       (long long)bad, (unsigned char)m->text[bad]);
    return MF_OK;
}

void mf_chat_free_buffer(void *p) { free(p); }

mf_status mf_chat_render(const mf_chat_template *t, const mf_chat_message *msgs, int64_t n,
                         const mf_chat_opts *opts, char **text, size_t *len) {
    static const char fn[] = "chat_render";
    if (!text || !len) return mf_fail(MF_ERR_INVALID_ARG, "%s: %s is NULL", fn, !text ? "text" : "len");
    *text = NULL;
    *len = 0;
    if (!t) return mf_fail(MF_ERR_INVALID_ARG, "%s: template is NULL", fn);
    if (t->kind <= MF_CHAT_NONE || t->kind >= MF_CHAT_KIND_COUNT)
        return mf_fail(MF_ERR_UNSUPPORTED, "%s: the template has no kind minfer renders", fn);
    if (n <= 0)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: n is %lld: a conversation needs at least one message", fn,
                       (long long)n);
    if (!msgs) return mf_fail(MF_ERR_INVALID_ARG, "%s: msgs is NULL", fn);
    const mf_chat_opts o = opts ? *opts : (mf_chat_opts){0};
    if (o.date_string && mf_chat_utf8_bad_at(o.date_string, strlen(o.date_string)) >= 0)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: opts->date_string is not valid UTF-8", fn);
    if ((uint64_t)n > SIZE_MAX / sizeof(msg))
        return mf_fail(MF_ERR_INVALID_ARG, "%s: n %lld is too large", fn, (long long)n);
    msg *ms = mf_malloc((size_t)n * sizeof *ms);
    if (!ms) return mf_fail(MF_ERR_OOM, "%s: out of host memory for %lld messages", fn, (long long)n);
    mf_status st = MF_OK;
    for (int64_t i = 0; i < n && st == MF_OK; i++) st = check_message(&msgs[i], i, &ms[i]);
    render_ctx c = {.t = t, .name = mf_chat_kind_name(t->kind)};
    if (st == MF_OK) {
        switch (t->kind) {
        case MF_CHAT_LLAMA2: st = render_llama2(&c, ms, n); break;
        case MF_CHAT_LLAMA3: st = render_llama3(&c, ms, n, o.add_generation_prompt); break;
        case MF_CHAT_LLAMA3_1:
        case MF_CHAT_LLAMA3_2: st = render_llama31(&c, ms, n, &o); break;
        case MF_CHAT_MISTRAL_V1: st = render_mistral(&c, ms, n, false); break;
        case MF_CHAT_MISTRAL_V3: st = render_mistral(&c, ms, n, true); break;
        case MF_CHAT_MISTRAL_V1_OLD: st = render_mistral_old(&c, ms, n, false); break;
        case MF_CHAT_MISTRAL_V01_OLD: st = render_mistral_old(&c, ms, n, true); break;
        case MF_CHAT_CHATML: st = render_chatml(&c, ms, n, NULL, o.add_generation_prompt); break;
        case MF_CHAT_QWEN2:
            st = render_chatml(&c, ms, n, "You are a helpful assistant.", o.add_generation_prompt);
            break;
        case MF_CHAT_QWEN2_5:
            st = render_chatml(&c, ms, n, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
                               o.add_generation_prompt);
            break;
        default: st = mf_fail(MF_ERR_INTERNAL, "%s: kind %d has no renderer", fn, (int)t->kind);
        }
    }
    free(ms);
    if (st == MF_OK && !c.out.oom && !c.out.p) mf_sbuf_put(&c.out, "", 0); // an empty rendering is still a buffer
    if (st == MF_OK && c.out.oom) st = mf_fail(MF_ERR_OOM, "%s: out of host memory", fn);
    if (st != MF_OK) {
        free(c.out.p);
        return st;
    }
    *text = c.out.p;
    *len = c.out.len;
    return MF_OK;
}
