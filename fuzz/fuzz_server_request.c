// libFuzzer target: an HTTP request body through the server's OpenAI
// request parser (src/server/oai_request.c). The first byte picks the route
// (completions, chat, tokenize, detokenize); the rest is the body. An
// accepted request must satisfy what the routes and the engine rely on; a
// refused one must carry a 4xx status and a message. Then the parsed texts
// go through the JSON string writer, whose output must be valid UTF-8.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/oai_request.h"
#include "server/oai_response.h"
#include "server/utf8.h"

#define REQUIRE(c)         \
    do {                   \
        if (!(c)) abort(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void json_roundtrip(const char *s) {
    mf_sbuf b = {0};
    mf_oai_json_str(&b, s, strlen(s));
    REQUIRE(!b.oom && b.len >= 2 && b.p[0] == '"' && b.p[b.len - 1] == '"');
    REQUIRE(mf_srv_utf8_valid(b.p, b.len, NULL));
    for (size_t i = 0; i < b.len; i++) REQUIRE((unsigned char)b.p[i] >= 0x20);
    mf_sbuf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    mf_oai_kind kind = (mf_oai_kind)(data[0] % 4);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    mf_oai_request r;
    mf_oai_error e;
    if (!mf_oai_request_parse(kind, body, len, &r, &e)) {
        REQUIRE(e.status >= 400 && e.status < 600 && e.message[0]);
        REQUIRE(r.prompts == NULL && r.messages == NULL && r.stop == NULL && r.tokens == NULL);
        mf_sbuf b = {0};
        mf_oai_error_json(&b, &e);
        REQUIRE(!b.oom && mf_srv_utf8_valid(b.p, b.len, NULL));
        mf_sbuf_free(&b);
        return 0;
    }
    REQUIRE(r.kind == kind);
    REQUIRE(r.n >= 1 && r.n <= MF_OAI_MAX_N);
    REQUIRE(r.top_logprobs >= 0 && r.top_logprobs <= MF_OAI_MAX_TOP_LOGPROBS);
    REQUIRE(r.max_tokens == -1 || r.max_tokens >= 1);
    REQUIRE(r.temperature >= 0 && r.top_p > 0 && r.top_p <= 1 && r.min_p >= 0 && r.min_p <= 1);
    REQUIRE(r.repetition_penalty > 0 && r.top_k >= 0);
    REQUIRE(r.n_stop >= 0 && r.n_stop <= MF_OAI_MAX_STOP);
    REQUIRE(!r.include_usage || r.stream);
    for (int32_t i = 0; i < r.n_stop; i++) REQUIRE(r.stop[i][0] != '\0');
    if (kind == MF_OAI_COMPLETIONS) {
        REQUIRE(r.n_prompts >= 1 && r.n_prompts * r.n <= MF_OAI_MAX_CHOICES);
        for (int32_t p = 0; p < r.n_prompts; p++) {
            REQUIRE((r.prompts[p].text != NULL) != (r.prompts[p].ids != NULL));
            if (r.prompts[p].ids) REQUIRE(r.prompts[p].n_ids >= 1);
            for (int64_t i = 0; i < r.prompts[p].n_ids; i++) REQUIRE(r.prompts[p].ids[i] >= 0);
            if (r.prompts[p].text) json_roundtrip(r.prompts[p].text);
        }
    }
    if (kind == MF_OAI_CHAT) {
        REQUIRE(r.n_messages >= 1 && r.n_messages <= MF_OAI_MAX_MESSAGES);
        for (int32_t i = 0; i < r.n_messages; i++) {
            const char *role = r.messages[i].role;
            REQUIRE(!strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant"));
            json_roundtrip(r.messages[i].content);
        }
    }
    if (kind == MF_OAI_DETOKENIZE)
        for (int64_t i = 0; i < r.n_tokens; i++) REQUIRE(r.tokens[i] >= 0);
    mf_oai_request_free(&r);
    return 0;
}
