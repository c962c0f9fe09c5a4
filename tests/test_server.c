// test_server: the parts of `minfer serve` that need no engine and no
// network: the OpenAI request parser (fields, types, ranges, the messages
// that name them), the response and SSE builders (parsed back as JSON),
// UTF-8 repair, Prometheus metrics, API keys and the serve options.
// The server end to end (real binary, openai client, curl): tests/python/test_server.py.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/auth.h"
#include "server/metrics.h"
#include "server/oai_request.h"
#include "server/oai_response.h"
#include "server/opts.h"
#include "server/utf8.h"

static int g_checks, g_fails;

#define CHECK(cond, ...)                                \
    do {                                                \
        g_checks++;                                     \
        if (!(cond)) {                                  \
            g_fails++;                                  \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
        }                                               \
    } while (0)

static void section(const char *name, int before) {
    if (g_fails == before)
        printf("%s: ok\n", name);
    else
        printf("%s: %d failed\n", name, g_fails - before);
}

// ---- UTF-8 ---------------------------------------------------------------------------------

// Expected outputs are Python's bytes.decode("utf-8", errors="replace").encode().
static void check_repair_n(const char *in, size_t n, const char *want, size_t n_want) {
    mf_sbuf b = {0};
    mf_srv_utf8_append(&b, in, n);
    CHECK(b.len == n_want && !memcmp(b.p, want, b.len), "repair of %zu bytes: got %zu bytes \"%s\", want \"%s\"", n,
          b.len, b.p ? b.p : "", want);
    CHECK(mf_srv_utf8_valid(b.p ? b.p : "", b.len, NULL), "repaired text is valid");
    mf_sbuf_free(&b);
}

static void check_repair(const char *in, size_t n, const char *want) { check_repair_n(in, n, want, strlen(want)); }

#define R "\xEF\xBF\xBD" // U+FFFD

static void test_utf8(void) {
    int before = g_fails;
    size_t at = 99;
    const char *valid = "abc \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80";
    CHECK(mf_srv_utf8_valid(valid, strlen(valid), NULL), "valid text");
    CHECK(!mf_srv_utf8_valid("ab\xFF", 3, &at) && at == 2, "0xff at 2: %zu", at);
    CHECK(!mf_srv_utf8_valid("\xE2\x82", 2, &at) && at == 0, "truncated at the end");
    check_repair("abc", 3, "abc");
    check_repair("\x80", 1, R);
    check_repair("\xE2\x82" "A", 3, R "A");                      // one maximal subpart
    check_repair("\xE2\x82", 2, R);                              // cut at the end
    check_repair("\xC0\x80", 2, R R);                            // overlong: C0 never starts a character
    check_repair("\xED\xA0\x80", 3, R R R);                      // a surrogate
    check_repair("\xF4\x90\x80\x80", 4, R R R R);                // above U+10FFFF
    check_repair("\xF0\x9F\x98" "x\xF0\x9F\x98\x80", 8, R "x\xF0\x9F\x98\x80");
    check_repair_n("a\0b", 3, "a\0b", 3);
    CHECK(mf_srv_utf8_count("a\xC3\xA9\xE2\x82", 5) == 3, "count: a, e-acute, one U+FFFD");
    section("utf8", before);
}

// ---- request parsing --------------------------------------------------------------------------

static bool parse(mf_oai_kind kind, const char *body, mf_oai_request *r, mf_oai_error *e) {
    return mf_oai_request_parse(kind, body, strlen(body), r, e);
}

// The body is refused with `status`, the message holds every needle, param is `param`.
static void refused(mf_oai_kind kind, const char *body, int status, const char *param, const char *n1, const char *n2) {
    mf_oai_request r;
    mf_oai_error e;
    bool ok = parse(kind, body, &r, &e);
    CHECK(!ok, "%s: accepted", body);
    if (ok) {
        mf_oai_request_free(&r);
        return;
    }
    CHECK(e.status == status, "%s: status %d, want %d (%s)", body, e.status, status, e.message);
    CHECK(!param || !strcmp(e.param, param), "%s: param \"%s\", want \"%s\"", body, e.param, param);
    CHECK(!n1 || strstr(e.message, n1), "%s: message \"%s\" lacks \"%s\"", body, e.message, n1);
    CHECK(!n2 || strstr(e.message, n2), "%s: message \"%s\" lacks \"%s\"", body, e.message, n2);
    CHECK(r.prompts == NULL && r.model == NULL, "%s: request not emptied", body);
}

static void test_request(void) {
    int before = g_fails;
    mf_oai_request r;
    mf_oai_error e;
    // Defaults.
    CHECK(parse(MF_OAI_COMPLETIONS, "{\"prompt\": \"Hi\"}", &r, &e), "minimal: %s", e.message);
    CHECK(r.n_prompts == 1 && !strcmp(r.prompts[0].text, "Hi") && r.max_tokens == -1 && r.temperature == 1.0 &&
              r.top_p == 1.0 && r.top_k == 0 && r.n == 1 && !r.stream && !r.logprobs && !r.seed_given &&
              r.add_special_tokens == -1 && r.model == NULL,
          "defaults");
    mf_oai_request_free(&r);
    // Every field, null fields absent, unknown fields ignored, 1e2 an integer.
    const char *full = "{\"model\": \"m\", \"prompt\": [[1, 2, 3], [4]], \"max_tokens\": 1e2, \"temperature\": 0.5,"
                       " \"top_p\": 0.9, \"top_k\": -1, \"min_p\": 0.1, \"repetition_penalty\": 1.2, \"seed\": -7,"
                       " \"stop\": [\"a\", \"bc\"], \"stop_token_ids\": [5], \"n\": 3, \"logprobs\": 2,"
                       " \"ignore_eos\": true, \"stream\": true, \"stream_options\": {\"include_usage\": true},"
                       " \"user\": \"x\", \"frequency_penalty\": 0, \"presence_penalty\": null, \"echo\": false,"
                       " \"best_of\": 3, \"logit_bias\": {}, \"suffix\": null, \"future_field\": {\"a\": [1]}}";
    CHECK(parse(MF_OAI_COMPLETIONS, full, &r, &e), "full: %s", e.message);
    CHECK(!strcmp(r.model, "m") && r.n_prompts == 2 && r.prompts[0].n_ids == 3 && r.prompts[0].ids[2] == 3 &&
              r.prompts[1].n_ids == 1 && r.prompts[1].ids[0] == 4 && !r.prompts[0].text,
          "full: prompts");
    CHECK(r.max_tokens == 100 && r.temperature == 0.5 && r.top_p == 0.9 && r.top_k == 0 && r.min_p == 0.1 &&
              fabs(r.repetition_penalty - 1.2) < 1e-12 && r.seed_given && r.seed == (uint64_t)-7 && r.n_stop == 2 &&
              !strcmp(r.stop[1], "bc") && r.n_stop_ids == 1 && r.stop_ids[0] == 5 && r.n == 3 && r.logprobs &&
              r.top_logprobs == 2 && r.ignore_eos && r.stream && r.include_usage,
          "full: fields");
    mf_oai_request_free(&r);
    CHECK(parse(MF_OAI_COMPLETIONS, "{\"prompt\": [\"a\", \"b\"], \"stop\": \"x\", \"logprobs\": 0, \"max_tokens\": null}",
                &r, &e),
          "texts: %s", e.message);
    CHECK(r.n_prompts == 2 && !strcmp(r.prompts[1].text, "b") && r.n_stop == 1 && r.logprobs && r.top_logprobs == 0 &&
              r.max_tokens == -1,
          "texts: fields");
    mf_oai_request_free(&r);
    CHECK(parse(MF_OAI_COMPLETIONS, "{\"prompt\": [7, 8]}", &r, &e) && r.n_prompts == 1 && r.prompts[0].n_ids == 2,
          "one id prompt");
    mf_oai_request_free(&r);

    // Chat.
    const char *chat = "{\"messages\": [{\"role\": \"developer\", \"content\": \"Be brief.\"},"
                       " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]},"
                       " {\"role\": \"assistant\", \"content\": null}, {\"role\": \"user\", \"content\": \"c\", \"name\": \"u\"}],"
                       " \"logprobs\": true, \"top_logprobs\": 3, \"max_completion_tokens\": 9, \"max_tokens\": 4}";
    CHECK(parse(MF_OAI_CHAT, chat, &r, &e), "chat: %s", e.message);
    CHECK(r.n_messages == 4 && !strcmp(r.messages[0].role, "system") && !strcmp(r.messages[1].content, "a\nb") &&
              !strcmp(r.messages[2].content, "") && r.logprobs && r.top_logprobs == 3 && r.max_tokens == 9 &&
              r.add_generation_prompt,
          "chat: fields");
    mf_oai_request_free(&r);

    // Tokenize / detokenize.
    CHECK(parse(MF_OAI_TOKENIZE, "{\"prompt\": \"x\", \"add_special_tokens\": false, \"return_token_strs\": true}", &r, &e) &&
              r.add_special_tokens == 0 && r.return_token_strs,
          "tokenize");
    mf_oai_request_free(&r);
    CHECK(parse(MF_OAI_DETOKENIZE, "{\"tokens\": [1, 2]}", &r, &e) && r.n_tokens == 2 && r.tokens[1] == 2, "detokenize");
    mf_oai_request_free(&r);
    CHECK(parse(MF_OAI_DETOKENIZE, "{\"tokens\": []}", &r, &e) && r.n_tokens == 0, "detokenize nothing");
    mf_oai_request_free(&r);

    // The body itself.
    refused(MF_OAI_COMPLETIONS, "", 400, "", "empty", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\"", 400, "", "malformed JSON", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\"} x", 400, "", "after the JSON value", NULL);
    refused(MF_OAI_COMPLETIONS, "[1]", 400, "", "expected a JSON object", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"\xFF\"}", 400, "", "not valid UTF-8", "0xff at offset 12");
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"\\ud800\"}", 400, "", "malformed JSON", NULL);
    // Fields: the name and the value in the message.
    refused(MF_OAI_COMPLETIONS, "{}", 400, "prompt", "prompt: missing", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": 5}", 400, "prompt", "got 5", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": []}", 400, "prompt", "empty list", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": [\"a\", 1]}", 400, "prompt[1]", "prompt[1]: expected a string", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": [[1], []]}", 400, "prompt[1]", "empty list of token ids", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": [1, -2]}", 400, "prompt[1]", "-2", "[0, 2147483647]");
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": [1, 2.5]}", 400, "prompt[1]", "expected an integer", "2.5");
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"max_tokens\": -5}", 400, "max_tokens", "max_tokens: -5", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"max_tokens\": 0}", 400, "max_tokens", "0 is not in [1,", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"max_tokens\": \"abc\"}", 400, "max_tokens",
            "max_tokens: expected an integer, got \"abc\"", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"max_tokens\": 1.5}", 400, "max_tokens", "got 1.5", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"max_tokens\": true}", 400, "max_tokens", "got true", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"temperature\": \"hot\"}", 400, "temperature", "expected a number", "\"hot\"");
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"temperature\": -1}", 400, "temperature", "-1 is not in", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"temperature\": 1e999}", 400, "temperature", "expected a number", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"top_p\": 0}", 400, "top_p", "(0, 1]", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"top_k\": -2}", 400, "top_k", "-2", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"min_p\": 1.5}", 400, "min_p", "1.5", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"repetition_penalty\": 0}", 400, "repetition_penalty", "(0,", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"seed\": \"1\"}", 400, "seed", "expected an integer", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"n\": 17}", 400, "n", "17 is not in [1, 16]", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": [\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\"], \"n\": 16}",
            400, "n", "more than 256", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"stop\": 5}", 400, "stop", "a string or a list of strings", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"stop\": [\"x\", \"\"]}", 400, "stop[1]", "empty string", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"stop\": [\"x\", 2]}", 400, "stop[1]", "expected a string", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"logprobs\": 21}", 400, "logprobs", "21", "[0, 20]");
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"logprobs\": true}", 400, "logprobs", "expected an integer", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"stream\": \"yes\"}", 400, "stream", "expected a boolean", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"stream_options\": {\"include_usage\": true}}", 400,
            "stream_options", "only allowed with stream: true", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"stream\": true, \"stream_options\": {\"include_usage\": 1}}", 400,
            "stream_options.include_usage", "expected a boolean", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"frequency_penalty\": 0.5}", 400, "frequency_penalty",
            "0.5 is not supported", "repetition_penalty");
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"presence_penalty\": 3}", 400, "presence_penalty", "3 is not in", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"echo\": true}", 400, "echo", "not supported", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"best_of\": 2}", 400, "best_of", "not supported", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"logit_bias\": {\"5\": 1}}", 400, "logit_bias", "not supported", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"min_tokens\": 3}", 400, "min_tokens", "not supported", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"model\": 3}", 400, "model", "expected a string", NULL);
    refused(MF_OAI_CHAT, "{}", 400, "messages", "messages: missing", NULL);
    refused(MF_OAI_CHAT, "{\"messages\": []}", 400, "messages", "empty list", NULL);
    refused(MF_OAI_CHAT, "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", 400, "messages[0].role",
            "\"tool\" is not supported", NULL);
    refused(MF_OAI_CHAT, "{\"messages\": [{\"content\": \"x\"}]}", 400, "messages[0].role", "missing", NULL);
    refused(MF_OAI_CHAT, "{\"messages\": [{\"role\": \"user\"}]}", 400, "messages[0].content", "missing", NULL);
    refused(MF_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 3}]}", 400, "messages[0].content",
            "expected a string or a list", NULL);
    refused(MF_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", 400,
            "messages[0].content", "\"image_url\" is not supported", NULL);
    refused(MF_OAI_CHAT, "{\"messages\": [\"hi\"]}", 400, "messages[0]", "expected a message object", NULL);
    refused(MF_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}", 400,
            "top_logprobs", "needs logprobs: true", NULL);
    refused(MF_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": 1}", 400, "logprobs",
            "expected a boolean", NULL);
    refused(MF_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{}]}", 400, "tools",
            "no tool calls", NULL);
    refused(MF_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"json_object\"}}",
            400, "response_format.type", "not supported", NULL);
    refused(MF_OAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_completion_tokens\": -1}", 400,
            "max_completion_tokens", "-1", NULL);
    refused(MF_OAI_DETOKENIZE, "{}", 400, "tokens", "missing", NULL);
    refused(MF_OAI_DETOKENIZE, "{\"tokens\": [1, \"a\"]}", 400, "tokens[1]", "expected an integer", NULL);
    refused(MF_OAI_TOKENIZE, "{\"prompt\": [\"a\"]}", 400, "prompt", "a string or token ids", NULL);
    // A long string value is cut in the message (whole characters) and its size given.
    char big[200];
    snprintf(big, sizeof big, "{\"prompt\": \"a\", \"stop\": [%s]}",
             "\"\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\", 1");
    refused(MF_OAI_COMPLETIONS, big, 400, "stop[1]", "got 1", NULL);
    refused(MF_OAI_COMPLETIONS, "{\"prompt\": \"a\", \"model\": \"0123456789012345678901234567890123456789xyz\", \"n\": \"0123456789012345678901234567890123456789xyz\"}",
            400, "n", "...\" (43 bytes)", NULL);
    section("request", before);
}

// Random damage to valid bodies: every result is a clean accept or a 400/413
// with a message (ASan and UBSan watch the rest; fuzz/fuzz_server_request.c goes further).
static void test_request_mutations(void) {
    int before = g_fails;
    static const char *const seeds[] = {
        "{\"model\": \"m\", \"prompt\": [[1, 2, 3], [4]], \"max_tokens\": 8, \"stop\": [\"a\"], \"n\": 2, \"logprobs\": 3}",
        "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}], \"stream\": true,"
        " \"stream_options\": {\"include_usage\": true}, \"logprobs\": true, \"top_logprobs\": 2}",
    };
    uint64_t x = 88172645463325252ull;
    char buf[512];
    int accepted = 0, refused_n = 0;
    for (int it = 0; it < 4000; it++) {
        const char *s = seeds[it % 2];
        size_t n = strlen(s);
        memcpy(buf, s, n);
        int edits = 1 + it % 4;
        for (int k = 0; k < edits; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            size_t at = (size_t)(x % n);
            switch ((x >> 32) % 3) {
            case 0: buf[at] = (char)(x >> 40); break;                                     // flip a byte
            case 1: memmove(buf + at, buf + at + 1, n - at - 1); n--; break;              // drop one
            default: if (n < sizeof buf - 1) { memmove(buf + at + 1, buf + at, n - at); buf[at] = "[]{}\",:0-e"[(x >> 48) % 10]; n++; }
            }
        }
        mf_oai_request r;
        mf_oai_error e;
        mf_oai_kind kind = it % 2 ? MF_OAI_CHAT : MF_OAI_COMPLETIONS;
        if (mf_oai_request_parse(kind, buf, n, &r, &e)) {
            accepted++;
            mf_oai_request_free(&r);
        } else {
            refused_n++;
            CHECK(e.status == 400 && e.message[0], "mutation %d: status %d, message \"%s\"", it, e.status, e.message);
        }
    }
    CHECK(accepted > 50 && refused_n > 1000, "mutations: %d accepted, %d refused", accepted, refused_n);
    printf("request mutations: %d accepted, %d refused\n", accepted, refused_n);
    section("request_mutations", before);
}

// ---- responses --------------------------------------------------------------------------------

// Token texts for the tests: "<id>" after an even previous token, "[id]" after an odd one.
static void fake_piece(void *user, int32_t prev, int32_t id, mf_sbuf *out) {
    (void)user;
    if (id == 99) {
        mf_sbuf_put(out, "\xE2\x82", 2); // half a character
        return;
    }
    mf_sbuf_printf(out, prev >= 0 && prev % 2 ? "[%d]" : "<%d>", (int)id);
}

static cJSON *parse_json(const char *s, size_t n) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, n, &end, false);
    CHECK(j && end == s + n, "not one JSON value: %.*s", (int)n, s);
    CHECK(mf_srv_utf8_valid(s, n, NULL), "not UTF-8: %.*s", (int)n, s);
    return j;
}

static const char *jstr_at(const cJSON *o, const char *path) {
    const cJSON *v = o;
    char key[64];
    while (*path && v) {
        size_t n = strcspn(path, ".");
        snprintf(key, sizeof key, "%.*s", (int)n, path);
        v = (key[0] >= '0' && key[0] <= '9') ? cJSON_GetArrayItem(v, atoi(key)) : cJSON_GetObjectItemCaseSensitive(v, key);
        path += n + (path[n] == '.');
    }
    if (!v) return "<missing>";
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsNull(v)) return "<null>";
    static char num[64];
    if (cJSON_IsNumber(v)) {
        snprintf(num, sizeof num, "%g", v->valuedouble);
        return num;
    }
    return "<other>";
}

static void test_response(void) {
    int before = g_fails;
    mf_oai_tokstr ts = {fake_piece, NULL};
    mf_sbuf b = {0};
    // Errors.
    mf_oai_error err;
    mf_oai_error_set(&err, 400, "invalid_request_error", "max_tokens", "max_tokens: -5 \"quoted\"\n\xFF");
    mf_oai_error_json(&b, &err);
    cJSON *j = parse_json(b.p, b.len);
    CHECK(!strcmp(jstr_at(j, "error.message"), "max_tokens: -5 \"quoted\"\n" R) &&
              !strcmp(jstr_at(j, "error.param"), "max_tokens") && !strcmp(jstr_at(j, "error.code"), "400") &&
              !strcmp(jstr_at(j, "error.type"), "invalid_request_error"),
          "error json: %s", b.p);
    cJSON_Delete(j);
    b.len = 0;

    // A completion with logprobs: text offsets, token texts in context, -inf written as -9999.
    int32_t toks[3] = {5, 7, 99};
    float lps[3] = {-0.5f, -1.25f, -INFINITY};
    int32_t top_ids[6] = {5, 6, 7, 8, 99, 1};
    float top_lps[6] = {-0.5f, -2.0f, -1.25f, -3.0f, -0.1f, -0.2f};
    int64_t off = 10;
    mf_oai_choice c = {.index = 1, .text = "ok \x01 \xF0\x9F", .text_len = 8, .tokens = toks, .n_tokens = 3,
                       .logprobs = lps, .top_ids = top_ids, .top_logprobs = top_lps, .n_top = 2, .prev_token = 2,
                       .text_offset = &off, .finish = "length"};
    mf_oai_head h = {.kind = MF_OAI_COMPLETIONS, .id = "cmpl-1", .model = "m\"x", .created = 17, .logprobs = true};
    mf_oai_usage u = {.prompt_tokens = 4, .completion_tokens = 3, .cached_tokens = 2};
    mf_oai_response_json(&b, &h, &c, 1, &u, &ts);
    j = parse_json(b.p, b.len);
    CHECK(!strcmp(jstr_at(j, "object"), "text_completion") && !strcmp(jstr_at(j, "model"), "m\"x") &&
              !strcmp(jstr_at(j, "choices.0.text"), "ok \x01 " R) && !strcmp(jstr_at(j, "choices.0.index"), "1") &&
              !strcmp(jstr_at(j, "choices.0.finish_reason"), "length") && !strcmp(jstr_at(j, "usage.total_tokens"), "7") &&
              !strcmp(jstr_at(j, "usage.prompt_tokens_details.cached_tokens"), "2"),
          "completion json: %s", b.p);
    CHECK(!strcmp(jstr_at(j, "choices.0.logprobs.tokens.0"), "<5>") &&
              !strcmp(jstr_at(j, "choices.0.logprobs.tokens.1"), "[7]") &&
              !strcmp(jstr_at(j, "choices.0.logprobs.tokens.2"), R) &&
              !strcmp(jstr_at(j, "choices.0.logprobs.token_logprobs.1"), "-1.25") &&
              !strcmp(jstr_at(j, "choices.0.logprobs.token_logprobs.2"), "-9999") &&
              !strcmp(jstr_at(j, "choices.0.logprobs.text_offset.0"), "10") &&
              !strcmp(jstr_at(j, "choices.0.logprobs.text_offset.1"), "13") &&
              !strcmp(jstr_at(j, "choices.0.logprobs.text_offset.2"), "16") &&
              !strcmp(jstr_at(j, "choices.0.logprobs.top_logprobs.1.[8]"), "-3"),
          "completion logprobs: %s", b.p);
    CHECK(off == 17, "text_offset advanced to %lld", (long long)off);
    cJSON_Delete(j);
    b.len = 0;

    // Chat: message, logprobs with bytes and top entries.
    h.kind = MF_OAI_CHAT;
    h.id = "chatcmpl-1";
    c.text = "hi";
    c.text_len = 2;
    mf_oai_response_json(&b, &h, &c, 1, &u, &ts);
    j = parse_json(b.p, b.len);
    CHECK(!strcmp(jstr_at(j, "object"), "chat.completion") && !strcmp(jstr_at(j, "choices.0.message.role"), "assistant") &&
              !strcmp(jstr_at(j, "choices.0.message.content"), "hi") &&
              !strcmp(jstr_at(j, "choices.0.logprobs.content.0.token"), "<5>") &&
              !strcmp(jstr_at(j, "choices.0.logprobs.content.0.bytes.0"), "60") &&
              !strcmp(jstr_at(j, "choices.0.logprobs.content.2.token"), R) &&
              !strcmp(jstr_at(j, "choices.0.logprobs.content.2.bytes.0"), "226") &&
              !strcmp(jstr_at(j, "choices.0.logprobs.content.2.bytes.1"), "130") &&
              !strcmp(jstr_at(j, "choices.0.logprobs.content.1.top_logprobs.1.token"), "[8]") &&
              !strcmp(jstr_at(j, "choices.0.logprobs.content.1.top_logprobs.1.logprob"), "-3") &&
              !strcmp(jstr_at(j, "choices.0.logprobs.refusal"), "<null>"),
          "chat json: %s", b.p);
    cJSON_Delete(j);
    b.len = 0;

    // SSE: a chat chunk with the role, then one without logprobs, the usage chunk, [DONE].
    h.logprobs = false;
    mf_oai_choice c1 = {.index = 0, .text = "", .text_len = 0, .role = true};
    mf_oai_chunk_sse(&b, &h, &c1, 1, true, &ts);
    mf_oai_choice c2 = {.index = 0, .text = "a\"b", .text_len = 3, .finish = "stop"};
    mf_oai_chunk_sse(&b, &h, &c2, 1, true, &ts);
    mf_oai_usage_sse(&b, &h, &u);
    mf_oai_done_sse(&b);
    const char *p = b.p;
    int events = 0;
    while (*p) {
        CHECK(!strncmp(p, "data: ", 6), "event %d does not start with 'data: ': %s", events, p);
        const char *end = strstr(p, "\n\n");
        CHECK(end != NULL, "event %d not ended by a blank line", events);
        if (!end) break;
        if (strncmp(p + 6, "[DONE]", 6) != 0) {
            cJSON *e = parse_json(p + 6, (size_t)(end - p - 6));
            if (events == 0)
                CHECK(!strcmp(jstr_at(e, "choices.0.delta.role"), "assistant") &&
                          !strcmp(jstr_at(e, "choices.0.delta.content"), "") &&
                          !strcmp(jstr_at(e, "choices.0.finish_reason"), "<null>") && !strcmp(jstr_at(e, "usage"), "<null>") &&
                          !strcmp(jstr_at(e, "object"), "chat.completion.chunk"),
                      "role chunk: %.*s", (int)(end - p), p);
            if (events == 1)
                CHECK(!strcmp(jstr_at(e, "choices.0.delta.content"), "a\"b") &&
                          !strcmp(jstr_at(e, "choices.0.delta.role"), "<missing>") &&
                          !strcmp(jstr_at(e, "choices.0.finish_reason"), "stop") &&
                          !strcmp(jstr_at(e, "choices.0.logprobs"), "<null>"),
                      "content chunk: %.*s", (int)(end - p), p);
            if (events == 2)
                CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(e, "choices")) == 0 &&
                          !strcmp(jstr_at(e, "usage.completion_tokens"), "3"),
                      "usage chunk: %.*s", (int)(end - p), p);
            cJSON_Delete(e);
        } else {
            CHECK(events == 3 && end[2] == '\0', "[DONE] is last");
        }
        events++;
        p = end + 2;
    }
    CHECK(events == 4, "%d events, want 4", events);
    b.len = 0;

    // A completions chunk: text, no usage field when include_usage is off.
    h.kind = MF_OAI_COMPLETIONS;
    mf_oai_choice c3 = {.index = 2, .text = "x", .text_len = 1};
    mf_oai_chunk_sse(&b, &h, &c3, 1, false, &ts);
    CHECK(b.len > 8 && !strcmp(b.p + b.len - 2, "\n\n"), "chunk framing");
    j = parse_json(b.p + 6, b.len - 8);
    CHECK(!strcmp(jstr_at(j, "choices.0.text"), "x") && !strcmp(jstr_at(j, "usage"), "<missing>") &&
              !strcmp(jstr_at(j, "choices.0.index"), "2"),
          "completions chunk: %s", b.p);
    cJSON_Delete(j);
    b.len = 0;

    // Models, tokenize, detokenize.
    mf_oai_models_json(&b, "models/x", "models/x", 5, 256);
    j = parse_json(b.p, b.len);
    CHECK(!strcmp(jstr_at(j, "data.0.id"), "models/x") && !strcmp(jstr_at(j, "data.0.max_model_len"), "256") &&
              !strcmp(jstr_at(j, "object"), "list"),
          "models: %s", b.p);
    cJSON_Delete(j);
    b.len = 0;
    int32_t ids[2] = {3, 99};
    mf_oai_tokenize_json(&b, ids, 2, 256, &ts);
    j = parse_json(b.p, b.len);
    CHECK(!strcmp(jstr_at(j, "count"), "2") && !strcmp(jstr_at(j, "tokens.1"), "99") &&
              !strcmp(jstr_at(j, "token_strs.0"), "<3>") && !strcmp(jstr_at(j, "token_strs.1"), R),
          "tokenize: %s", b.p);
    cJSON_Delete(j);
    b.len = 0;
    mf_oai_detokenize_json(&b, "a\xC3", 2);
    j = parse_json(b.p, b.len);
    CHECK(!strcmp(jstr_at(j, "prompt"), "a" R), "detokenize: %s", b.p);
    cJSON_Delete(j);
    CHECK(!b.oom, "no allocation failed");
    mf_sbuf_free(&b);
    section("response", before);
}

// ---- metrics, keys, options ---------------------------------------------------------------------

static void test_metrics(void) {
    int before = g_fails;
    mf_metrics m;
    CHECK(mf_metrics_init(&m, "models/a\"b"), "init");
    m.running = 3;
    m.waiting = 2;
    m.kv_blocks = 8;
    m.kv_blocks_used = 2;
    m.prompt_tokens = 11;
    mf_metrics_hist_observe(&m.ttft, 0.003);
    mf_metrics_hist_observe(&m.ttft, 0.3);
    mf_metrics_hist_observe(&m.ttft, 5000);
    mf_sbuf b = {0};
    mf_metrics_render(&m, &b);
    const char *want[] = {
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"models/a\\\"b\"} 3\n",
        "vllm:num_requests_waiting{model_name=\"models/a\\\"b\"} 2\n",
        "vllm:kv_cache_usage_perc{model_name=\"models/a\\\"b\"} 0.25\n",
        "vllm:gpu_cache_usage_perc{model_name=\"models/a\\\"b\"} 0.25\n",
        "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{model_name=\"models/a\\\"b\"} 11\n",
        "vllm:time_to_first_token_seconds_bucket{le=\"0.001\",model_name=\"models/a\\\"b\"} 0\n",
        "vllm:time_to_first_token_seconds_bucket{le=\"0.005\",model_name=\"models/a\\\"b\"} 1\n",
        "vllm:time_to_first_token_seconds_bucket{le=\"0.25\",model_name=\"models/a\\\"b\"} 1\n",
        "vllm:time_to_first_token_seconds_bucket{le=\"0.5\",model_name=\"models/a\\\"b\"} 2\n",
        "vllm:time_to_first_token_seconds_bucket{le=\"2560\",model_name=\"models/a\\\"b\"} 2\n",
        "vllm:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"models/a\\\"b\"} 3\n",
        "vllm:time_to_first_token_seconds_count{model_name=\"models/a\\\"b\"} 3\n",
        "# TYPE vllm:inter_token_latency_seconds histogram\n",
        "vllm:request_success_total{finished_reason=\"abort\",model_name=\"models/a\\\"b\"} 0\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(b.p && strstr(b.p, want[i]), "metrics lack: %s", want[i]);
    mf_sbuf_free(&b);
    mf_metrics_free(&m);
    section("metrics", before);
}

static void test_auth(void) {
    int before = g_fails;
    mf_srv_opts o = {0};
    CHECK(mf_srv_auth_ok(&o, NULL), "no keys: open");
    o.api_keys[0] = "sk-one";
    o.api_keys[1] = "two";
    o.n_api_keys = 2;
    CHECK(mf_srv_auth_ok(&o, "Bearer sk-one"), "first key");
    CHECK(mf_srv_auth_ok(&o, "bearer  two "), "second key, scheme in any case, spaces");
    CHECK(!mf_srv_auth_ok(&o, NULL), "no header");
    CHECK(!mf_srv_auth_ok(&o, "Bearer sk-on"), "a prefix of a key");
    CHECK(!mf_srv_auth_ok(&o, "Bearer sk-onee"), "a key plus a byte");
    CHECK(!mf_srv_auth_ok(&o, "Bearer "), "empty key");
    CHECK(!mf_srv_auth_ok(&o, "Basic sk-one"), "another scheme");
    CHECK(!mf_srv_auth_ok(&o, "sk-one"), "no scheme");
    section("auth", before);
}

static mf_srv_opts_result opts(const char *line, mf_srv_opts *o, char *err) {
    static char copy[512];
    static char *argv[64];
    snprintf(copy, sizeof copy, "%s", line);
    int argc = 0;
    for (char *t = strtok(copy, " "); t && argc < 64; t = strtok(NULL, " ")) argv[argc++] = t;
    return mf_srv_opts_parse(argc, argv, o, err);
}

static void test_opts(void) {
    int before = g_fails;
    mf_srv_opts o;
    char err[MF_SRV_ERR_CAP];
    CHECK(opts("-m models/x", &o, err) == MF_SRV_OPTS_OK, "minimal: %s", err);
    CHECK(!strcmp(o.dir, "models/x") && !strcmp(o.served_name, "models/x") && !strcmp(o.host, "127.0.0.1") &&
              o.port == 8000 && o.n_api_keys == 0 && o.max_queue == 1024 && o.dtype_auto && o.max_body == 8 << 20 &&
              o.shutdown_timeout == 30 && o.ping_interval == 5 && o.http_threads == 4 && !o.mmap,
          "defaults");
    CHECK(opts("--model d --host 0.0.0.0 --port 0 --api-key a --api-key b --kv-blocks 64 --block-size 16 "
               "--max-batched-tokens 512 --max-seqs 8 --max-model-len 128 --max-queue 3 --backend cpu --dtype f32 "
               "--chat-template chatml --max-body-mb 0.5 --shutdown-timeout 2 --ping-interval 0.5 "
               "--served-model-name kjv --no-prefix-cache --http-threads 1 --mmap",
               &o, err) == MF_SRV_OPTS_OK,
          "all: %s", err);
    CHECK(o.port == 0 && o.n_api_keys == 2 && !strcmp(o.api_keys[1], "b") && o.kv_blocks == 64 && o.block_size == 16 &&
              o.max_batched_tokens == 512 && o.max_seqs == 8 && o.max_model_len == 128 && o.max_queue == 3 &&
              !strcmp(o.backend, "cpu") && !o.dtype_auto && o.dtype == MF_DTYPE_F32 && !strcmp(o.chat_template, "chatml") &&
              o.max_body == 512 * 1024 && o.shutdown_timeout == 2 && o.ping_interval == 0.5 &&
              !strcmp(o.served_name, "kjv") && o.no_prefix_cache && o.http_threads == 1 && o.mmap,
          "all: values: port %d keys %d kv %lld bs %d mbt %lld seqs %d mml %lld q %lld body %lld st %g pi %g",
          o.port, o.n_api_keys, (long long)o.kv_blocks, o.block_size, (long long)o.max_batched_tokens, o.max_seqs,
          (long long)o.max_model_len, (long long)o.max_queue, (long long)o.max_body, o.shutdown_timeout,
          o.ping_interval);
    CHECK(opts("-m d --help", &o, err) == MF_SRV_OPTS_HELP, "help");
    static const struct {
        const char *line, *needle;
    } bad[] = {
        {"", "-m DIR is required"},
        {"-m d --port 70000", "--port 70000"},
        {"-m d --port x", "--port x"},
        {"-m d --kv-mem 2 --kv-blocks 4", "give one of them"},
        {"-m d --kv-mem -1", "--kv-mem -1"},
        {"-m d --block-size 48", "power of two"},
        {"-m d --dtype f8", "--dtype f8"},
        {"-m d --backend tpu", "--backend tpu"},
        {"-m d --frobnicate", "unknown option '--frobnicate'"},
        {"-m d --port", "--port needs a value"},
        {"-m d --ping-interval 0", "--ping-interval 0"},
        {"-m d --max-body-mb 0", "--max-body-mb 0"},
        {"-m d --http-threads 0", "--http-threads 0: not an integer in [1, 256]"},
        {"-m d --http-threads 257", "--http-threads 257"},
        {"-m d --http-threads 2x", "--http-threads 2x"},
        {"-m d --http-threads", "--http-threads needs a value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mf_srv_opts_result r = opts(bad[i].line, &o, err);
        CHECK(r == MF_SRV_OPTS_BAD && strstr(err, bad[i].needle), "'%s': %d \"%s\", want \"%s\"", bad[i].line, (int)r, err,
              bad[i].needle);
    }
    section("opts", before);
}

int main(void) {
    test_utf8();
    test_request();
    test_request_mutations();
    test_response();
    test_metrics();
    test_auth();
    test_opts();
    printf("%d checks, %d failed\n", g_checks, g_fails);
    return g_fails ? 1 : 0;
}
