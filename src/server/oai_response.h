// Internal (server): OpenAI response bodies and server-sent events.
//
// Pure builders: they append to an mf_sbuf what they are given. Text is
// passed as raw bytes and written as JSON strings with invalid UTF-8
// replaced (server/utf8.h); non-finite log-probabilities are written as
// -9999.0 (JSON has no -inf; vLLM does the same).
#ifndef MF_SERVER_OAI_RESPONSE_H
#define MF_SERVER_OAI_RESPONSE_H

#include <stdbool.h>
#include <stdint.h>

#include "server/oai_request.h"
#include "core/sbuf.h"

// The bytes of token `id` as it reads after token `prev` (-1: at the
// start), appended to out: the texts of logprobs entries.
typedef struct {
    void (*piece)(void *user, int32_t prev, int32_t id, mf_sbuf *out);
    void *user;
} mf_oai_tokstr;

// What a response is about.
typedef struct {
    mf_oai_kind kind;      // MF_OAI_COMPLETIONS or MF_OAI_CHAT
    const char *id;        // "cmpl-..." / "chatcmpl-..."
    const char *model;     // the served model's name
    int64_t created;       // Unix seconds
    bool logprobs;         // the request asked for them: choices carry a "logprobs" object, else null
} mf_oai_head;

// One choice, or the part of it a stream chunk carries.
typedef struct {
    int32_t index;                // choice index (prompt * n + sequence)
    const char *text;             // (text_len) raw bytes of generated text
    size_t text_len;
    const int32_t *tokens;        // (n_tokens) tokens covered (logprobs only)
    int64_t n_tokens;
    const float *logprobs;        // (n_tokens) chosen tokens' log-probabilities
    const int32_t *top_ids;       // (n_tokens, n_top)
    const float *top_logprobs;    // (n_tokens, n_top)
    int32_t n_top;
    int32_t prev_token;           // the token before tokens[0] (-1: none)
    int64_t *text_offset;         // completions logprobs: in: characters before this piece; out: after it
    const char *finish;           // NULL while running, else "stop" | "length" | "abort"
    bool role;                    // chat stream: the first chunk (delta carries the role)
} mf_oai_choice;

typedef struct {
    int64_t prompt_tokens, completion_tokens, cached_tokens;
} mf_oai_usage;

// A JSON string of s[0 .. n) (quotes included; control characters escaped).
void mf_oai_json_str(mf_sbuf *b, const char *s, size_t n);

// {"error": {"message", "type", "param", "code"}}
void mf_oai_error_json(mf_sbuf *b, const mf_oai_error *e);
// The whole body of a finished completion / chat completion.
void mf_oai_response_json(mf_sbuf *b, const mf_oai_head *h, mf_oai_choice *choices, int32_t n,
                          const mf_oai_usage *u, const mf_oai_tokstr *ts);
// "data: {chunk}\n\n" carrying choices[0 .. n); usage_null: "usage": null
// in it (stream_options.include_usage asked for a last usage chunk).
void mf_oai_chunk_sse(mf_sbuf *b, const mf_oai_head *h, mf_oai_choice *choices, int32_t n, bool usage_null,
                      const mf_oai_tokstr *ts);
// The last chunk of include_usage: no choices, the usage.
void mf_oai_usage_sse(mf_sbuf *b, const mf_oai_head *h, const mf_oai_usage *u);
// "data: {error}\n\n" (a stream that fails after it started).
void mf_oai_error_sse(mf_sbuf *b, const mf_oai_error *e);
// "data: [DONE]\n\n"
void mf_oai_done_sse(mf_sbuf *b);

// GET /v1/models
void mf_oai_models_json(mf_sbuf *b, const char *model, const char *root, int64_t created, int64_t max_model_len);
// POST /tokenize: {"count", "max_model_len", "tokens"[, "token_strs"]}
void mf_oai_tokenize_json(mf_sbuf *b, const int32_t *ids, int64_t n, int64_t max_model_len, const mf_oai_tokstr *strs);
// POST /detokenize: {"prompt": text}
void mf_oai_detokenize_json(mf_sbuf *b, const char *text, size_t len);

#endif // MF_SERVER_OAI_RESPONSE_H
