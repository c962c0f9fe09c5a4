// Internal: one sequence's text as it is generated: the tokenizer's stream
// decoder, the stop strings and the text that is final.
//
// Stop strings are matched on the generated text, across token boundaries.
// text[0, emitted) is final (no stop string can start there); the rest is
// held back because it could be the start of one. A match cuts the text
// before the stop string (and before a partial character just ahead of it).
#ifndef MF_ENGINE_TEXTOUT_H
#define MF_ENGINE_TEXTOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "minfer/tokenizer.h"

typedef struct {
    mf_tokenizer_stream *stream; // the decoder (NULL: no text at all)
    char *text;                  // (cap) generated text, NUL-terminated
    size_t len, cap, emitted;
    const char *const *stop;     // (n_stop) borrowed
    const size_t *stop_len;      // (n_stop) borrowed
    int32_t n_stop;
} mf_textout;

// A text for a sequence whose context (prompt) is ctx[0 .. n_ctx); cap: the
// buffer's first size (it grows when needed). tok NULL: no text (every call
// below then does nothing).
mf_status mf_textout_init(mf_textout *t, const mf_tokenizer *tok, const int32_t *ctx, int64_t n_ctx, size_t cap,
                          const char *const *stop, const size_t *stop_len, int32_t n_stop);
void mf_textout_free(mf_textout *t);

// Token id joins the text; *stopped: a stop string matched (the text now ends before it).
mf_status mf_textout_push(mf_textout *t, int32_t id, bool *stopped);
// The sequence ends: the decoder's held bytes come out (a stop string may
// still complete with them) and all the text becomes final.
mf_status mf_textout_finish(mf_textout *t, bool *stopped);

// A longest spelling of a token in bytes, for a first buffer size.
size_t mf_textout_token_bytes(const mf_tokenizer *tok);

#endif // MF_ENGINE_TEXTOUT_H
