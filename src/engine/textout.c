// One sequence's text: stream decoding, stop strings, what is final (textout.h).
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/textout.h"

mf_status mf_textout_init(mf_textout *t, const mf_tokenizer *tok, const int32_t *ctx, int64_t n_ctx, size_t cap,
                          const char *const *stop, const size_t *stop_len, int32_t n_stop) {
    memset(t, 0, sizeof *t);
    if (!tok) return MF_OK;
    t->stop = stop, t->stop_len = stop_len, t->n_stop = n_stop;
    t->cap = cap > 0 ? cap : 64;
    t->text = mf_malloc(t->cap);
    if (!t->text) return mf_fail(MF_ERR_OOM, "textout: out of memory for %zu bytes of text", t->cap);
    t->text[0] = '\0';
    mf_status st = mf_tokenizer_stream_new(tok, ctx, n_ctx, &t->stream);
    if (st != MF_OK) mf_textout_free(t);
    return st;
}

void mf_textout_free(mf_textout *t) {
    if (!t) return;
    mf_tokenizer_stream_free(t->stream);
    free(t->text);
    memset(t, 0, sizeof *t);
}

static mf_status append(mf_textout *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) { // only when the first estimate was short
        const size_t cap = t->cap * 2 > t->len + n + 1 ? t->cap * 2 : t->len + n + 1;
        char *x = realloc(t->text, cap);
        if (!x) return mf_fail(MF_ERR_OOM, "textout: out of memory for %zu bytes of text", cap);
        t->text = x, t->cap = cap;
    }
    memcpy(t->text + t->len, s, n);
    t->len += n;
    t->text[t->len] = '\0';
    return MF_OK;
}

// A cut at `pos` moved back to the first byte of the character it falls in (a
// stop string that is not valid UTF-8 can start inside one), not before `floor`.
static size_t char_start(const mf_textout *t, size_t pos, size_t floor) {
    for (int back = 0; back < 3 && pos > floor && pos < t->len && (t->text[pos] & 0xC0) == 0x80; back++) pos--;
    return pos;
}

// After new text: ends the text at the first stop string (dropping it, what
// follows and a partial character before it), else makes final all but a
// tail that may begin one.
static void scan(mf_textout *t, bool *stopped) {
    for (size_t pos = t->emitted; pos < t->len; pos++)
        for (int32_t k = 0; k < t->n_stop; k++)
            if (t->len - pos >= t->stop_len[k] && !memcmp(t->text + pos, t->stop[k], t->stop_len[k])) {
                const size_t cut = char_start(t, pos, t->emitted);
                t->len = cut, t->text[cut] = '\0';
                t->emitted = cut;
                *stopped = true;
                return;
            }
    size_t hold = t->len;
    for (size_t pos = t->emitted; pos < t->len && hold == t->len; pos++)
        for (int32_t k = 0; k < t->n_stop; k++)
            if (t->stop_len[k] > t->len - pos && !memcmp(t->text + pos, t->stop[k], t->len - pos)) {
                hold = pos;
                break;
            }
    const size_t upto = char_start(t, hold, t->emitted);
    if (upto > t->emitted) t->emitted = upto;
}

mf_status mf_textout_push(mf_textout *t, int32_t id, bool *stopped) {
    *stopped = false;
    if (!t->stream) return MF_OK;
    const char *s;
    size_t n;
    MF_TRY(mf_tokenizer_stream_push(t->stream, id, &s, &n));
    MF_TRY(append(t, s, n));
    scan(t, stopped);
    return MF_OK;
}

mf_status mf_textout_finish(mf_textout *t, bool *stopped) {
    *stopped = false;
    if (!t->stream) return MF_OK;
    const char *s;
    size_t n;
    MF_TRY(mf_tokenizer_stream_flush(t->stream, &s, &n));
    MF_TRY(append(t, s, n));
    scan(t, stopped);
    t->emitted = t->len;
    return MF_OK;
}

size_t mf_textout_token_bytes(const mf_tokenizer *tok) {
    size_t m = 0;
    const int64_t v = tok ? mf_tokenizer_vocab_size(tok) : 0;
    for (int64_t id = 0; id < v; id++) {
        const char *s = mf_tokenizer_token_text(tok, (int32_t)id);
        const size_t n = s ? strlen(s) : 0;
        if (n > m) m = n;
    }
    return m;
}
