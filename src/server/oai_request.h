// Internal (server): an OpenAI request body -> a validated request.
//
// mf_oai_request_parse is a pure function of its bytes (no model, no I/O;
// fuzzed by fuzz/fuzz_server_request.c). It follows OpenAI's API reference
// and vLLM's extensions (top_k, min_p, repetition_penalty, ignore_eos,
// stop_token_ids, add_special_tokens, add_generation_prompt): unknown
// fields are ignored as OpenAI does; a known field of the wrong type or out
// of range is refused with 400 and a message that names the field and its
// value; fields we know but do not implement (frequency/presence penalty
// other than 0, echo, best_of, suffix, logit_bias, tools, response_format
// other than text, ...) are refused by name rather than silently ignored.
// What needs the model (token ids < vocab, prompt + max_tokens <= context,
// the model name) is checked by the caller.
#ifndef MF_SERVER_OAI_REQUEST_H
#define MF_SERVER_OAI_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    MF_OAI_MAX_N = 16,            // choices per prompt (MF_ENGINE_MAX_N)
    MF_OAI_MAX_TOP_LOGPROBS = 20, // MF_ENGINE_MAX_TOP_LOGPROBS
    MF_OAI_MAX_STOP = 16,         // stop strings
    MF_OAI_MAX_STOP_IDS = 64,     // stop_token_ids
    MF_OAI_MAX_PROMPTS = 64,      // prompts in one completions request (x n choices <= 256)
    MF_OAI_MAX_CHOICES = 256,     // prompts x n
    MF_OAI_MAX_MESSAGES = 1024,
};

typedef enum {
    MF_OAI_COMPLETIONS = 0,  // POST /v1/completions
    MF_OAI_CHAT = 1,         // POST /v1/chat/completions
    MF_OAI_TOKENIZE = 2,     // POST /tokenize: prompt or messages (+ add_special_tokens, add_generation_prompt)
    MF_OAI_DETOKENIZE = 3,   // POST /detokenize: tokens
} mf_oai_kind;

// An error for the client: the HTTP status, OpenAI's error type, the field.
typedef struct {
    int status;            // 400, ...
    char type[32];         // "invalid_request_error", "authentication_error", ...
    char param[48];        // the field ("max_tokens", "messages[2].role"), "" for none
    char message[512];
} mf_oai_error;

typedef struct {
    char *text;            // NULL: the prompt is token ids
    int32_t *ids;          // (n_ids) ids in [0, 2^31), or NULL
    int64_t n_ids;
} mf_oai_prompt;

typedef struct {
    char *role;            // "system" | "user" | "assistant"
    char *content;         // text ("" for an assistant message with null content); parts joined by "\n"
} mf_oai_message;

typedef struct {
    mf_oai_kind kind;
    char *model;                  // NULL: not given (the served model)
    mf_oai_prompt *prompts;       // (n_prompts) completions, tokenize with "prompt"
    int32_t n_prompts;
    mf_oai_message *messages;     // (n_messages) chat, tokenize with "messages"
    int32_t n_messages;
    bool add_generation_prompt;   // chat/tokenize: (true)
    int add_special_tokens;       // -1: not given (completions: BOS as the tokenizer does; chat: none)
    int64_t max_tokens;           // -1: not given (completions: 16; chat: what the context leaves)
    double temperature;           // [0, 1e4] (1)
    double top_p;                 // (0, 1] (1)
    int32_t top_k;                // -1 or 0: off (0)
    double min_p;                 // [0, 1] (0)
    double repetition_penalty;    // (0, 1e4] (1)
    bool seed_given;
    uint64_t seed;                // the int64 seed's bits
    char **stop;                  // (n_stop) non-empty
    int32_t n_stop;
    int32_t *stop_ids;            // (n_stop_ids) stop_token_ids
    int32_t n_stop_ids;
    int32_t n;                    // [1, MF_OAI_MAX_N] (1)
    bool logprobs;                // completions: "logprobs" is an integer; chat: logprobs true
    int32_t top_logprobs;         // [0, MF_OAI_MAX_TOP_LOGPROBS]
    bool ignore_eos;
    bool stream;
    bool include_usage;           // stream_options.include_usage
    bool return_token_strs;       // tokenize: also the tokens' texts
    int32_t *tokens;              // (n_tokens) detokenize
    int64_t n_tokens;
} mf_oai_request;

// Parses body[0 .. len) (need not be NUL-terminated) for route `kind`.
// true: *out is filled (release with mf_oai_request_free). false: *err
// says why (400 for everything the body can get wrong; 500 "out of
// memory") and *out is empty. len > 64 MiB is refused (the HTTP layer
// refuses much less with 413).
bool mf_oai_request_parse(mf_oai_kind kind, const char *body, size_t len, mf_oai_request *out, mf_oai_error *err);
void mf_oai_request_free(mf_oai_request *r); // zeroes *r; NULL is fine

// *err = {status, type, param, printf(fmt...)}; returns false (for `return mf_oai_error_set(...)`).
bool mf_oai_error_set(mf_oai_error *err, int status, const char *type, const char *param, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

#endif // MF_SERVER_OAI_REQUEST_H
