// Chat templates (include/minfer/chat.h), without Python:
//
//   recognise   every real template in tests/fixtures/chat_templates/ is
//               recognised as its kind (an unrecognised one prints its hash);
//               layout changes (escapes, quotes, whitespace in tags, a
//               trailing newline) keep the kind, any change to what the
//               template outputs loses it
//   render      one conversation per kind against the text transformers gives
//               (written down from apply_chat_template; the pytest
//               test_chat_templates.py compares many more live)
//   forcing     by name, unknown names and "none" refused naming the choices
//   folders     chat_template.jinja over tokenizer_config.json, the list form
//               ("default"), special_tokens_map.json, malformed files
//   bad input   NULLs, an empty conversation, unknown and tool roles, invalid
//               UTF-8 (refused: see chat.h), a BOS the template needs but the
//               checkpoint lacks; the library stays usable after each
//   model       mf_model_chat_template on fixture and synthetic models
//   faults      every allocation of load and render made to fail in turn:
//               MF_ERR_OOM, no leak (ASan), then the same call succeeds
//
//   test_chat <tests/fixtures>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/chat.h"
#include "minfer/minfer.h"

static int n_pass, n_fail;

static void report(bool ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(bool ok, const char *name, const char *fmt, ...) {
    char detail[1024] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(detail, sizeof detail, fmt, ap);
        va_end(ap);
    }
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", name, detail[0] ? ": " : "", detail);
    fflush(stdout);
    if (ok) n_pass++;
    else n_fail++;
}

static char fixtures[4096];

static const struct {
    const char *dir;
    mf_chat_kind kind;
} real[] = {
    {"meta-llama-Llama-2-7b-chat-hf", MF_CHAT_LLAMA2},
    {"meta-llama-Meta-Llama-3-8B-Instruct", MF_CHAT_LLAMA3},
    {"meta-llama-Llama-3.1-8B-Instruct", MF_CHAT_LLAMA3_1},
    {"meta-llama-Llama-3.2-3B-Instruct", MF_CHAT_LLAMA3_2},
    {"mistralai-Mistral-7B-Instruct-v0.1-first", MF_CHAT_MISTRAL_V01_OLD},
    {"mistralai-Mistral-7B-Instruct-v0.2-first", MF_CHAT_MISTRAL_V1_OLD},
    {"mistralai-Mistral-7B-Instruct-v0.2", MF_CHAT_MISTRAL_V1},
    {"mistralai-Mistral-7B-Instruct-v0.3", MF_CHAT_MISTRAL_V3},
    {"Qwen-Qwen2-7B-Instruct", MF_CHAT_QWEN2},
    {"Qwen-Qwen2.5-7B-Instruct", MF_CHAT_QWEN2_5},
    {"teknium-OpenHermes-2.5-Mistral-7B", MF_CHAT_CHATML},
};
#define N_REAL ((int)(sizeof real / sizeof real[0]))

static void real_path(char *buf, size_t size, const char *dir) {
    snprintf(buf, size, "%s/chat_templates/%s", fixtures, dir);
}

static mf_chat_template *load_real(const char *dir) {
    char path[4200];
    real_path(path, sizeof path, dir);
    mf_chat_template *t = NULL;
    if (mf_chat_template_load(path, NULL, &t) != MF_OK) return NULL;
    return t;
}

// ---- recognise ---------------------------------------------------------------------------------

static void test_recognise(void) {
    for (int i = 0; i < N_REAL; i++) {
        char path[4200];
        real_path(path, sizeof path, real[i].dir);
        mf_chat_template *t = NULL;
        const mf_status st = mf_chat_template_load(path, NULL, &t);
        char name[256];
        snprintf(name, sizeof name, "recognise(%s)", real[i].dir);
        if (st != MF_OK) {
            report(false, name, "%s: %s", mf_status_str(st), mf_last_error());
            continue;
        }
        report(mf_chat_template_kind(t) == real[i].kind && mf_chat_template_text(t) != NULL, name, "kind %s, want %s",
               mf_chat_kind_name(mf_chat_template_kind(t)), mf_chat_kind_name(real[i].kind));
        mf_chat_template_free(t);
    }
}

// Replaces every `from` in s by `to` (a fresh buffer).
static char *replace_all(const char *s, const char *from, const char *to) {
    size_t n = 0;
    for (const char *p = strstr(s, from); p; p = strstr(p + strlen(from), from)) n++;
    char *out = malloc(strlen(s) + n * strlen(to) + 1);
    char *o = out;
    const char *p;
    while ((p = strstr(s, from))) {
        memcpy(o, s, (size_t)(p - s));
        o += p - s;
        memcpy(o, to, strlen(to));
        o += strlen(to);
        s = p + strlen(from);
    }
    strcpy(o, s);
    return out;
}

static void expect_kind(const char *name, const char *text, mf_chat_kind want) {
    mf_chat_template *t = NULL;
    const mf_status st = mf_chat_template_new(text, NULL, "<s>", "</s>", &t);
    const mf_chat_kind got = st == MF_OK ? mf_chat_template_kind(t) : MF_CHAT_NONE;
    if (want == MF_CHAT_NONE)
        report(st == MF_ERR_UNSUPPORTED && strstr(mf_last_error(), "not recognised") &&
                   strstr(mf_last_error(), "qwen2.5") && !t,
               name, "status %s: %s", mf_status_str(st), mf_last_error());
    else
        report(st == MF_OK && got == want, name, "status %s, kind %s: %s", mf_status_str(st), mf_chat_kind_name(got),
               st ? mf_last_error() : "");
    mf_chat_template_free(t);
}

// Qwen2's template (as published: newlines inside its string literals).
static const char qwen2_text[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n"
    "' }}{% endif %}";

static void test_layout(void) {
    expect_kind("layout(published)", qwen2_text, MF_CHAT_QWEN2);
    char *a = replace_all(qwen2_text, "\n", "\\n"); // "\n" written as an escape
    expect_kind("layout(escaped newlines)", a, MF_CHAT_QWEN2);
    char *b = replace_all(a, "'", "\""); // double quotes
    expect_kind("layout(double quotes)", b, MF_CHAT_QWEN2);
    char *c = replace_all(b, " + ", "\n    +  "); // code laid out over lines
    expect_kind("layout(whitespace in tags)", c, MF_CHAT_QWEN2);
    char *d = replace_all(c, "{% endfor %}", "{# one per message #}{% endfor %}\n");
    expect_kind("layout(comment)", d, MF_CHAT_NONE); // the "\n" after endfor is output text: a change
    char *e = replace_all(c, "{% endfor %}", "{# one per message #}{% endfor %}");
    expect_kind("layout(comment, no text)", e, MF_CHAT_QWEN2);
    char *f = malloc(strlen(qwen2_text) + 2);
    sprintf(f, "%s\n", qwen2_text); // one trailing newline (Jinja drops it)
    expect_kind("layout(trailing newline)", f, MF_CHAT_QWEN2);
    char *g = replace_all(qwen2_text, "You are a helpful assistant.", "You are a helpful assistant!");
    expect_kind("layout(other default system prompt)", g, MF_CHAT_NONE);
    char *h = replace_all(qwen2_text, "'<|im_end|>' + '\n'", "'<|im_end|>'");
    expect_kind("layout(no newline after <|im_end|>)", h, MF_CHAT_NONE);
    char *k = replace_all(qwen2_text, "{% for", "{%- for");
    expect_kind("layout(whitespace control added)", k, MF_CHAT_NONE);
    expect_kind("layout(empty)", "", MF_CHAT_NONE);
    expect_kind("layout(unclosed tag)", "{{ 'a", MF_CHAT_NONE);
    expect_kind("layout(unclosed literal)", "{{ 'a }}", MF_CHAT_NONE);
    free(a), free(b), free(c), free(d), free(e), free(f), free(g), free(h), free(k);

    // Mistral v1 and v3 differ in the spaces inside their literals: never confused.
    mf_chat_template *v1 = load_real("mistralai-Mistral-7B-Instruct-v0.2");
    if (v1) {
        char *x = replace_all(mf_chat_template_text(v1), "' [INST] '", "'[INST] '");
        expect_kind("layout(mistral-v1 without the space before [INST])", x, MF_CHAT_NONE);
        free(x);
    } else {
        report(false, "layout(mistral-v1)", "fixture: %s", mf_last_error());
    }
    mf_chat_template_free(v1);
}

// ---- render ------------------------------------------------------------------------------------

// A system prompt, two user turns and an answer, with whitespace to trim
// (U+3000 is whitespace to Python's strip()).
static const mf_chat_message conv_sys[] = {
    {"system", " Be brief. "},
    {"user", "\xe3\x80\x80Hi there\n"},
    {"assistant", " Hello! "},
    {"user", "Bye"},
};

// What transformers' apply_chat_template gives (add_generation_prompt True,
// date_string "05 Mar 2025"); NULL: the template refuses the conversation,
// then `without` is the rendering of conv_sys[1..] with add_generation_prompt False.
static const struct {
    mf_chat_kind kind;
    const char *bos, *eos;
    const char *with_sys, *without;
} expected[] = {
    {MF_CHAT_LLAMA2, "<s>", "</s>",
     "<s>[INST] <<SYS>>\n Be brief. \n<</SYS>>\n\n\xe3\x80\x80Hi there [/INST] Hello! </s><s>[INST] Bye [/INST]",
     "<s>[INST] Hi there [/INST] Hello! </s><s>[INST] Bye [/INST]"},
    {MF_CHAT_LLAMA3, "<|begin_of_text|>", "<|eot_id|>",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
     "<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant"
     "<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"},
    {MF_CHAT_LLAMA3_1, "<|begin_of_text|>", "<|eot_id|>",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday "
     "Date: 05 Mar 2025\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
     "Bye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday "
     "Date: 05 Mar 2025\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
     "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
     "Bye<|eot_id|>"},
    {MF_CHAT_MISTRAL_V01_OLD, "<s>", "</s>", NULL,
     "<s>[INST] \xe3\x80\x80Hi there\n [/INST] Hello! </s> [INST] Bye [/INST]"},
    {MF_CHAT_MISTRAL_V1_OLD, "<s>", "</s>", NULL,
     "<s>[INST] \xe3\x80\x80Hi there\n [/INST] Hello! </s>[INST] Bye [/INST]"},
    {MF_CHAT_MISTRAL_V1, "<s>", "</s>",
     "<s> [INST]  Be brief. \n\n\xe3\x80\x80Hi there\n [/INST]  Hello! </s> [INST] Bye [/INST]",
     "<s> [INST] \xe3\x80\x80Hi there\n [/INST]  Hello! </s> [INST] Bye [/INST]"},
    {MF_CHAT_MISTRAL_V3, "<s>", "</s>",
     "<s>[INST] \xe3\x80\x80Hi there\n[/INST] Hello!</s>[INST]  Be brief. \n\nBye[/INST]",
     "<s>[INST] \xe3\x80\x80Hi there\n[/INST] Hello!</s>[INST] Bye[/INST]"},
    {MF_CHAT_CHATML, "<s>", "<|im_end|>",
     "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\n\xe3\x80\x80Hi there\n<|im_end|>\n<|im_start|>"
     "assistant\n Hello! <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n",
     "<|im_start|>user\n\xe3\x80\x80Hi there\n<|im_end|>\n<|im_start|>assistant\n Hello! <|im_end|>\n<|im_start|>user\n"
     "Bye<|im_end|>\n"},
    {MF_CHAT_QWEN2, NULL, "<|im_end|>",
     "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\n\xe3\x80\x80Hi there\n<|im_end|>\n<|im_start|>"
     "assistant\n Hello! <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n",
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n\xe3\x80\x80Hi there\n<|im_end|>"
     "\n<|im_start|>assistant\n Hello! <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"},
    {MF_CHAT_QWEN2_5, NULL, "<|im_end|>",
     "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\n\xe3\x80\x80Hi there\n<|im_end|>\n<|im_start|>"
     "assistant\n Hello! <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
     "<|im_start|>user\n\xe3\x80\x80Hi there\n<|im_end|>\n<|im_start|>assistant\n Hello! <|im_end|>\n"
     "<|im_start|>user\nBye<|im_end|>\n"},
};

// Renders and compares with want (NULL: must be refused with MF_ERR_INVALID_ARG).
static void expect_render(const char *name, const mf_chat_template *t, const mf_chat_message *m, int64_t n,
                          const mf_chat_opts *o, const char *want) {
    char *text = NULL;
    size_t len = 0;
    const mf_status st = mf_chat_render(t, m, n, o, &text, &len);
    if (!want) {
        report(st == MF_ERR_INVALID_ARG && !text && len == 0 && strstr(mf_last_error(), "must alternate"), name,
               "status %s: %s", mf_status_str(st), mf_last_error());
    } else {
        const bool ok = st == MF_OK && text && len == strlen(want) && memcmp(text, want, len) == 0 && text[len] == 0;
        if (ok) report(true, name, NULL);
        else report(false, name, "status %s%s%s; got \"%s\"", mf_status_str(st), st ? ": " : "",
                    st ? mf_last_error() : "", text ? text : "(null)");
    }
    mf_chat_free_buffer(text);
}

static void test_render(void) {
    const mf_chat_opts gen = {.add_generation_prompt = true, .date_string = "05 Mar 2025"};
    const mf_chat_opts plain = {.add_generation_prompt = false, .date_string = "05 Mar 2025"};
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
        mf_chat_template *t = NULL;
        char name[128];
        const char *kn = mf_chat_kind_name(expected[i].kind);
        const mf_status st = mf_chat_template_new(NULL, kn, expected[i].bos, expected[i].eos, &t);
        if (st != MF_OK) {
            report(false, "render", "%s: %s", kn, mf_last_error());
            continue;
        }
        snprintf(name, sizeof name, "render(%s, system, add_generation_prompt)", kn);
        expect_render(name, t, conv_sys, 4, &gen, expected[i].with_sys);
        snprintf(name, sizeof name, "render(%s, no system)", kn);
        expect_render(name, t, conv_sys + 1, 3, &plain, expected[i].without);
        mf_chat_template_free(t);
    }
    // Llama-2: strip() applies to the system block and the user text together.
    mf_chat_template *t = NULL;
    if (mf_chat_template_new(NULL, "llama2", "<s>", "</s>", &t) == MF_OK) {
        const mf_chat_message m[] = {{"system", "S"}, {"user", " \t"}};
        expect_render("render(llama2, empty user after a system prompt)", t, m, 2, NULL,
                      "<s>[INST] <<SYS>>\nS\n<</SYS>> [/INST]");
        const mf_chat_message only_sys[] = {{"system", "S"}};
        expect_render("render(llama2, only a system prompt)", t, only_sys, 1, NULL, "");
        const mf_chat_message mid_sys[] = {{"user", "a"}, {"system", "b"}, {"user", "c"}};
        expect_render("render(llama2, system at an odd position is dropped)", t, mid_sys, 3, NULL,
                      "<s>[INST] a [/INST]<s>[INST] c [/INST]");
        const mf_chat_message two_users[] = {{"user", "a"}, {"user", "b"}};
        expect_render("render(llama2, two user turns refused)", t, two_users, 2, NULL, NULL);
    }
    mf_chat_template_free(t);
    // Llama 3.1 default date and 3.2's today; a trim of every Python whitespace.
    t = NULL;
    if (mf_chat_template_new(NULL, "llama3.1", NULL, NULL, &t) == MF_OK) {
        const mf_chat_message m[] = {
            {"user", "\t\n\v\f\r\x1c\x1d\x1e\x1f \xc2\x85\xc2\xa0\xe1\x9a\x80\xe2\x80\x80\xe2\x80\x8a\xe2\x80\xa8"
                     "\xe2\x80\xa9\xe2\x80\xaf\xe2\x81\x9f\xe3\x80\x80x\xe2\x80\x8b"}}; // U+200B is not whitespace
        expect_render("render(llama3.1, default date, no BOS string, Python's whitespace)", t, m, 1, NULL,
                      "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                      "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nx\xe2\x80\x8b<|eot_id|>");
    }
    mf_chat_template_free(t);
    t = NULL;
    if (mf_chat_template_new(NULL, "llama3.2", "<|begin_of_text|>", NULL, &t) == MF_OK) {
        const mf_chat_message m[] = {{"user", "x"}};
        char *text = NULL;
        size_t len = 0;
        const mf_status st = mf_chat_render(t, m, 1, NULL, &text, &len);
        const char *d = text ? strstr(text, "Today Date: ") : NULL;
        // "05 Mar 2025": two digits, a space, a capitalised month, a space, a year
        const bool shape = d && strlen(d) > 24 && d[12] >= '0' && d[12] <= '3' && d[14] == ' ' && d[15] >= 'A' &&
                           d[15] <= 'Z' && d[18] == ' ' && d[19] == '2' && d[23] == '\n';
        report(st == MF_OK && shape, "render(llama3.2, today's date)", "%s",
               shape ? "" : text ? text : mf_last_error());
        mf_chat_free_buffer(text);
    }
    mf_chat_template_free(t);
}

// ---- forcing and names --------------------------------------------------------------------------

static void test_names(void) {
    for (int k = MF_CHAT_NONE + 1; k < MF_CHAT_KIND_COUNT; k++) {
        mf_chat_template *t = NULL;
        const mf_status st = mf_chat_template_new(NULL, mf_chat_kind_name((mf_chat_kind)k), NULL, NULL, &t);
        char name[96];
        snprintf(name, sizeof name, "force(%s)", mf_chat_kind_name((mf_chat_kind)k));
        report(st == MF_OK && mf_chat_template_kind(t) == (mf_chat_kind)k && !mf_chat_template_text(t), name, "%s",
               st ? mf_last_error() : "");
        mf_chat_template_free(t);
    }
    const char *bad[] = {"vicuna", "none", "", "Llama3", "llama3 "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mf_chat_template *t = (mf_chat_template *)1;
        const mf_status st = mf_chat_template_new("{{ x }}", bad[i], NULL, NULL, &t);
        bool all = true;
        for (int k = MF_CHAT_NONE + 1; k < MF_CHAT_KIND_COUNT; k++)
            all = all && strstr(mf_last_error(), mf_chat_kind_name((mf_chat_kind)k));
        char name[96];
        snprintf(name, sizeof name, "force(unknown name '%s')", bad[i]);
        report(st == MF_ERR_UNSUPPORTED && !t && all, name, "%s", mf_last_error());
    }
    mf_chat_template *t = NULL;
    mf_status st = mf_chat_template_new(NULL, NULL, NULL, NULL, &t);
    report(st == MF_ERR_UNSUPPORTED && strstr(mf_last_error(), "no chat template") &&
               strstr(mf_last_error(), "mistral-v3"),
           "force(no template, no name)", "%s", mf_last_error());
    report(strcmp(mf_chat_kind_name(MF_CHAT_NONE), "none") == 0 &&
               strcmp(mf_chat_kind_name(MF_CHAT_KIND_COUNT), "?") == 0 &&
               strcmp(mf_chat_kind_name((mf_chat_kind)-1), "?") == 0,
           "kind_name(out of range)", NULL);
    st = mf_chat_template_new(NULL, "llama2", "\xff", NULL, &t);
    report(st == MF_ERR_INVALID_ARG && !t && strstr(mf_last_error(), "bos_token"), "new(bos not UTF-8)", "%s",
           mf_last_error());
    st = mf_chat_template_new(NULL, "llama2", NULL, NULL, NULL);
    report(st == MF_ERR_INVALID_ARG, "new(out NULL)", "%s", mf_last_error());
}

// ---- folders -----------------------------------------------------------------------------------

static char tmpdir[256];

static void write_file(const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void remove_file(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    unlink(path);
}

// Loads tmpdir; checks status, kind, and BOS/EOS by rendering llama2 style.
static void expect_load(const char *name, const char *force, mf_status want, mf_chat_kind kind, const char *msg_part) {
    mf_chat_template *t = NULL;
    const mf_status st = mf_chat_template_load(tmpdir, force, &t);
    if (want != MF_OK) {
        report(st == want && !t && (!msg_part || strstr(mf_last_error(), msg_part)), name, "status %s: %s",
               mf_status_str(st), mf_last_error());
        mf_chat_template_free(t);
        return;
    }
    report(st == MF_OK && mf_chat_template_kind(t) == kind, name, "status %s, kind %s: %s", mf_status_str(st),
           mf_chat_kind_name(mf_chat_template_kind(t)), st ? mf_last_error() : "");
    mf_chat_template_free(t);
}

static const char chatml_json[] = // OpenHermes' template, JSON-escaped
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\\\n' + message['content'] + '<|im_end|>' "
    "+ '\\\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\\\n' }}{% endif %}";

static void test_folders(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/minfer_test_chat_%d", (int)getpid());
    mkdir(tmpdir, 0700);
    char cfg[2048];

    expect_load("load(empty folder)", NULL, MF_ERR_UNSUPPORTED, MF_CHAT_NONE, "no chat template");
    expect_load("load(empty folder, forced)", "chatml", MF_OK, MF_CHAT_CHATML, NULL);

    snprintf(cfg, sizeof cfg, "{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": \"</s>\", "
                              "\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"{{ x }}\"}, "
                              "{\"name\": \"default\", \"template\": \"%s\"}]}",
             chatml_json);
    write_file("tokenizer_config.json", cfg);
    expect_load("load(list of named templates: default)", NULL, MF_OK, MF_CHAT_CHATML, NULL);
    {
        mf_chat_template *t = NULL;
        if (mf_chat_template_load(tmpdir, "llama2", &t) == MF_OK) { // {"content": ...} BOS, forced kind
            const mf_chat_message m[] = {{"user", "u"}, {"assistant", "a"}};
            expect_render("load(bos_token as {\"content\"}), forced llama2", t, m, 2, NULL,
                          "<s>[INST] u [/INST] a </s>");
            report(mf_chat_template_text(t) && strstr(mf_chat_template_text(t), "<|im_start|>"),
                   "load(forced keeps the folder's text)", NULL);
        } else {
            report(false, "load(bos_token as {\"content\"})", "%s", mf_last_error());
        }
        mf_chat_template_free(t);
    }

    write_file("tokenizer_config.json", "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"a\"}, "
                                        "{\"name\": \"rag\", \"template\": \"b\"}]}");
    expect_load("load(named templates, no default)", NULL, MF_ERR_UNSUPPORTED, MF_CHAT_NONE, "tool_use, rag");
    write_file("tokenizer_config.json", "{\"chat_template\": [{\"name\": \"default\"}]}");
    expect_load("load(list entry without template)", NULL, MF_ERR_FORMAT, MF_CHAT_NONE, "\"template\"");
    write_file("tokenizer_config.json", "{\"chat_template\": 42}");
    expect_load("load(chat_template a number)", NULL, MF_ERR_FORMAT, MF_CHAT_NONE, "chat_template");
    write_file("tokenizer_config.json", "{\"bos_token\": 1, \"chat_template\": null}");
    expect_load("load(bos_token a number)", "chatml", MF_ERR_FORMAT, MF_CHAT_NONE, "bos_token");
    write_file("tokenizer_config.json", "{\"chat_template\": \"{{ x }}\",");
    expect_load("load(malformed JSON)", NULL, MF_ERR_FORMAT, MF_CHAT_NONE, "tokenizer_config.json");
    write_file("tokenizer_config.json", "[1, 2]");
    expect_load("load(not an object)", NULL, MF_ERR_FORMAT, MF_CHAT_NONE, "not a JSON object");
    write_file("tokenizer_config.json", "{\"chat_template\": \"{% for m in messages %}{{ m.content }}{% endfor %}\"}");
    expect_load("load(unknown template)", NULL, MF_ERR_UNSUPPORTED, MF_CHAT_NONE, "llama2, llama3, llama3.1");

    // chat_template.jinja wins over tokenizer_config.json's; special_tokens_map.json fills in BOS/EOS.
    write_file("tokenizer_config.json", "{\"chat_template\": \"{{ x }}\"}");
    mf_chat_template *q2 = NULL;
    char path[4200];
    real_path(path, sizeof path, "Qwen-Qwen2-7B-Instruct");
    mf_chat_template_load(path, NULL, &q2);
    write_file("chat_template.jinja", q2 ? mf_chat_template_text(q2) : "");
    mf_chat_template_free(q2);
    write_file("special_tokens_map.json", "{\"bos_token\": \"<B>\", \"eos_token\": {\"content\": \"<E>\"}}");
    expect_load("load(chat_template.jinja over tokenizer_config.json)", NULL, MF_OK, MF_CHAT_QWEN2, NULL);
    {
        mf_chat_template *t = NULL;
        if (mf_chat_template_load(tmpdir, "mistral-v1", &t) == MF_OK) {
            const mf_chat_message m[] = {{"user", "u"}, {"assistant", "a"}};
            expect_render("load(special_tokens_map.json BOS/EOS)", t, m, 2, NULL, "<B> [INST] u [/INST] a<E>");
        } else {
            report(false, "load(special_tokens_map.json)", "%s", mf_last_error());
        }
        mf_chat_template_free(t);
    }
    write_file("chat_template.jinja", "{{ 'a' }}\n");
    expect_load("load(unknown chat_template.jinja)", NULL, MF_ERR_UNSUPPORTED, MF_CHAT_NONE, "not recognised");
    write_file("special_tokens_map.json", "{");
    expect_load("load(malformed special_tokens_map.json)", NULL, MF_ERR_FORMAT, MF_CHAT_NONE, "special_tokens_map");
    remove_file("special_tokens_map.json");
    remove_file("chat_template.jinja");
    remove_file("tokenizer_config.json");
    rmdir(tmpdir);

    mf_chat_template *t = (mf_chat_template *)1;
    mf_status st = mf_chat_template_load("/nonexistent/minfer", NULL, &t);
    report(st == MF_ERR_IO && !t && strstr(mf_last_error(), "not a folder"), "load(missing folder)", "%s",
           mf_last_error());
    st = mf_chat_template_load(NULL, NULL, &t);
    report(st == MF_ERR_INVALID_ARG && !t, "load(dir NULL)", "%s", mf_last_error());
    st = mf_chat_template_load(tmpdir, NULL, NULL);
    report(st == MF_ERR_INVALID_ARG, "load(out NULL)", "%s", mf_last_error());
}

// ---- bad input ---------------------------------------------------------------------------------

static void expect_refused(const char *name, const mf_chat_template *t, const mf_chat_message *m, int64_t n,
                           mf_status want, const char *part) {
    char *text = (char *)1;
    size_t len = 7;
    const mf_status st = mf_chat_render(t, m, n, NULL, &text, &len);
    report(st == want && !text && len == 0 && (!part || strstr(mf_last_error(), part)), name, "status %s: %s",
           mf_status_str(st), mf_last_error());
}

static void test_bad_input(void) {
    mf_chat_template *t = NULL;
    if (mf_chat_template_new(NULL, "chatml", NULL, NULL, &t) != MF_OK) {
        report(false, "bad input", "%s", mf_last_error());
        return;
    }
    const mf_chat_message ok[] = {{"user", "hi"}};
    expect_refused("render(template NULL)", NULL, ok, 1, MF_ERR_INVALID_ARG, "template is NULL");
    expect_refused("render(n = 0)", t, ok, 0, MF_ERR_INVALID_ARG, "at least one message");
    expect_refused("render(n < 0)", t, ok, -3, MF_ERR_INVALID_ARG, "-3");
    expect_refused("render(msgs NULL)", t, NULL, 2, MF_ERR_INVALID_ARG, "msgs is NULL");
    const mf_chat_message no_role[] = {{"user", "a"}, {NULL, "b"}};
    expect_refused("render(role NULL)", t, no_role, 2, MF_ERR_INVALID_ARG, "messages[1].role is NULL");
    const mf_chat_message no_content[] = {{"user", NULL}};
    expect_refused("render(content NULL)", t, no_content, 1, MF_ERR_INVALID_ARG, "messages[0].content is NULL");
    const mf_chat_message unknown[] = {{"user", "a"}, {"developer", "b"}};
    expect_refused("render(unknown role)", t, unknown, 2, MF_ERR_INVALID_ARG, "'developer'");
    const mf_chat_message upper[] = {{"User", "a"}};
    expect_refused("render(role is case-sensitive)", t, upper, 1, MF_ERR_INVALID_ARG, "'User'");
    const char *tools[] = {"tool", "ipython", "tool_results", "function"};
    for (int i = 0; i < 4; i++) {
        const mf_chat_message m[] = {{"user", "a"}, {tools[i], "42"}};
        char name[64];
        snprintf(name, sizeof name, "render(role '%s')", tools[i]);
        expect_refused(name, t, m, 2, MF_ERR_UNSUPPORTED, "tool");
    }
    const struct {
        const char *what, *bytes;
    } bad_utf8[] = {
        {"lone continuation byte", "a\x80"},
        {"Latin-1 e-acute", "caf\xe9"},
        {"overlong slash", "\xc0\xaf"},
        {"overlong NUL", "\xe0\x80\x80"},
        {"surrogate U+D800", "\xed\xa0\x80"},
        {"past U+10FFFF", "\xf4\x90\x80\x80"},
        {"F5 lead byte", "\xf5\x80\x80\x80"},
        {"truncated at the end", "ok\xe2\x82"},
        {"truncated before ASCII", "\xe2\x82z"},
    };
    for (size_t i = 0; i < sizeof bad_utf8 / sizeof bad_utf8[0]; i++) {
        const mf_chat_message m[] = {{"system", "fine"}, {"user", bad_utf8[i].bytes}};
        char name[96];
        snprintf(name, sizeof name, "render(invalid UTF-8: %s)", bad_utf8[i].what);
        expect_refused(name, t, m, 2, MF_ERR_INVALID_ARG, "messages[1].content is not valid UTF-8");
    }
    const mf_chat_message bad_role_bytes[] = {{"\xff", "x"}};
    expect_refused("render(role not UTF-8)", t, bad_role_bytes, 1, MF_ERR_INVALID_ARG, "<not UTF-8>");
    // U+10FFFF, a llama emoji, U+FFFF
    const mf_chat_message edge[] = {{"user", "\xf4\x8f\xbf\xbf \xf0\x9f\xa6\x99 \xef\xbf\xbf"}};
    expect_render("render(valid 4-byte and edge code points pass)", t, edge, 1, NULL,
                  "<|im_start|>user\n\xf4\x8f\xbf\xbf \xf0\x9f\xa6\x99 \xef\xbf\xbf<|im_end|>\n");
    mf_chat_opts o = {.add_generation_prompt = false, .date_string = "\xff"};
    char *text = NULL;
    size_t len = 0;
    mf_status st = mf_chat_render(t, ok, 1, &o, &text, &len);
    report(st == MF_ERR_INVALID_ARG && !text, "render(date_string not UTF-8)", "%s", mf_last_error());
    st = mf_chat_render(t, ok, 1, NULL, NULL, &len);
    report(st == MF_ERR_INVALID_ARG, "render(text NULL)", "%s", mf_last_error());
    st = mf_chat_render(t, ok, 1, NULL, &text, NULL);
    report(st == MF_ERR_INVALID_ARG, "render(len NULL)", "%s", mf_last_error());
    expect_render("render(usable after the errors above)", t, ok, 1, NULL, "<|im_start|>user\nhi<|im_end|>\n");
    mf_chat_template_free(t);

    // A token the template needs in an expression but the checkpoint lacks.
    t = NULL;
    if (mf_chat_template_new(NULL, "llama2", NULL, "</s>", &t) == MF_OK)
        expect_refused("render(llama2 without a BOS string)", t, ok, 1, MF_ERR_UNSUPPORTED, "bos_token");
    mf_chat_template_free(t);
    t = NULL;
    if (mf_chat_template_new(NULL, "mistral-v3", "<s>", NULL, &t) == MF_OK) {
        expect_render("render(mistral-v3 without EOS, no answer: fine)", t, ok, 1, NULL, "<s>[INST] hi[/INST]");
        const mf_chat_message ua[] = {{"user", "u"}, {"assistant", "a"}};
        expect_refused("render(mistral-v3 without an EOS string, an answer)", t, ua, 2, MF_ERR_UNSUPPORTED,
                       "eos_token");
    }
    mf_chat_template_free(t);
    mf_chat_template_free(NULL);
    mf_chat_free_buffer(NULL);
    report(mf_chat_template_kind(NULL) == MF_CHAT_NONE && !mf_chat_template_text(NULL), "accessors(NULL)", NULL);
}

// ---- models ------------------------------------------------------------------------------------

static void test_model(void) {
    mf_backend *be = NULL;
    if (mf_backend_init("cpu", &be) != MF_OK) {
        report(false, "model", "cpu backend: %s", mf_last_error());
        return;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/models/qwen2-tiny", fixtures);
    mf_model *m = NULL;
    mf_status st = mf_model_load(path, be, NULL, &m);
    if (st == MF_OK) {
        mf_chat_template *t = NULL;
        st = mf_model_chat_template(m, NULL, &t);
        report(st == MF_OK && mf_chat_template_kind(t) == MF_CHAT_CHATML, "model_chat_template(qwen2-tiny: chatml)",
               "%s", st ? mf_last_error() : "");
        mf_chat_template_free(t);
        t = NULL;
        st = mf_model_chat_template(m, "qwen2", &t);
        report(st == MF_OK && mf_chat_template_kind(t) == MF_CHAT_QWEN2, "model_chat_template(qwen2-tiny, forced)",
               "%s", st ? mf_last_error() : "");
        mf_chat_template_free(t);
        mf_model_free(m);
    } else {
        report(false, "model_chat_template(qwen2-tiny)", "load: %s", mf_last_error());
    }
    snprintf(path, sizeof path, "%s/models/gpt2-tiny", fixtures);
    m = NULL;
    if (mf_model_load(path, be, NULL, &m) == MF_OK) {
        mf_chat_template *t = NULL;
        st = mf_model_chat_template(m, NULL, &t);
        report(st == MF_ERR_UNSUPPORTED && !t && strstr(mf_last_error(), "no chat template"),
               "model_chat_template(gpt2-tiny: none)", "%s", mf_last_error());
        mf_model_free(m);
    } else {
        report(false, "model_chat_template(gpt2-tiny)", "load: %s", mf_last_error());
    }
    m = NULL;
    if (mf_model_synthetic("tiny", 1, be, NULL, &m) == MF_OK) {
        mf_chat_template *t = NULL;
        st = mf_model_chat_template(m, NULL, &t);
        report(st == MF_ERR_UNSUPPORTED && !t, "model_chat_template(synthetic, no name)", "%s", mf_last_error());
        st = mf_model_chat_template(m, "llama3", &t);
        const mf_chat_message msg1[] = {{"user", "x"}};
        char *text = NULL;
        size_t len = 0;
        const mf_status r = t ? mf_chat_render(t, msg1, 1, NULL, &text, &len) : MF_ERR_INTERNAL;
        report(st == MF_OK && r == MF_ERR_UNSUPPORTED, "model_chat_template(synthetic, llama3: no BOS string)", "%s",
               mf_last_error());
        mf_chat_free_buffer(text);
        mf_chat_template_free(t);
        mf_model_free(m);
    }
    mf_chat_template *t = (mf_chat_template *)1;
    st = mf_model_chat_template(NULL, NULL, &t);
    report(st == MF_ERR_INVALID_ARG && !t, "model_chat_template(model NULL)", "%s", mf_last_error());
    mf_backend_free(be);
}

// ---- faults ------------------------------------------------------------------------------------

static void test_faults(void) {
    char path[4200];
    real_path(path, sizeof path, "meta-llama-Llama-3.1-8B-Instruct");
    int points = 0;
    bool ok = true;
    for (int k = 1; k < 200; k++) { // load: fail the k-th allocation
        mf_chat_template *t = NULL;
        mf_fault_alloc_fail_after(k);
        const mf_status st = mf_chat_template_load(path, NULL, &t);
        mf_fault_alloc_fail_after(0);
        if (st == MF_OK) {
            mf_chat_template_free(t);
            break;
        }
        points++;
        if (st != MF_ERR_OOM || t || !mf_last_error()[0]) {
            printf("     allocation %d: %s: %s\n", k, mf_status_str(st), mf_last_error());
            ok = false;
        }
    }
    report(ok && points > 0, "faults(load)", "%d allocation points", points);

    mf_chat_template *t = NULL;
    if (mf_chat_template_load(path, NULL, &t) != MF_OK) {
        report(false, "faults(render)", "%s", mf_last_error());
        return;
    }
    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    const mf_chat_message m[] = {{"system", "s"}, {"user", big}, {"assistant", big}, {"user", "u"}};
    points = 0;
    ok = true;
    for (int k = 1; k < 200; k++) {
        char *text = NULL;
        size_t len = 0;
        mf_fault_alloc_fail_after(k);
        const mf_status st = mf_chat_render(t, m, 4, NULL, &text, &len);
        mf_fault_alloc_fail_after(0);
        if (st == MF_OK) {
            ok = ok && len > 2 * sizeof big;
            mf_chat_free_buffer(text);
            break;
        }
        points++;
        ok = ok && st == MF_ERR_OOM && !text && len == 0;
    }
    report(ok && points > 1, "faults(render)", "%d allocation points", points);
    mf_chat_template_free(t);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_chat <tests/fixtures>\n");
        return 2;
    }
    snprintf(fixtures, sizeof fixtures, "%s", argv[1]);
    test_recognise();
    test_layout();
    test_render();
    test_names();
    test_folders();
    test_bad_input();
    test_model();
    test_faults();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
