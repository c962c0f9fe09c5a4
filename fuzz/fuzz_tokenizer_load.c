// libFuzzer target: a tokenizer.json image through mf_tokenizer_load_buffer.
// Input: JSON, optionally followed by a NUL and a text; a tokenizer that
// loads then encodes that text (or a fixed probe when there is none; at most
// 256 bytes, so that a fuzzed regex cannot make one run slow) and the text of
// each of its added tokens. Every id must be a token, decoding must succeed
// (or refuse a decoder chain that grows the text too much, MF_ERR_UNSUPPORTED)
// and the streaming decoder's pieces over the first 256 ids (a chain that is
// not stream_local costs O(n^2)) must join into their decode (or the stream
// must refuse with MF_ERR_UNSUPPORTED, as documented). A rejected file must
// leave nothing allocated (ASan reports leaks).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok.h"

#define REQUIRE(c) \
    do {           \
        if (!(c)) abort(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// decode(ids) either works or refuses a decoder chain that grows the text.
static bool decodes(const mf_tokenizer *tok, const int32_t *ids, int64_t n, char **text, size_t *len) {
    mf_status st = mf_tokenizer_decode(tok, ids, n, text, len);
    REQUIRE(st == MF_OK || (st == MF_ERR_UNSUPPORTED && strstr(mf_last_error(), "grow") && *text == NULL));
    REQUIRE(st != MF_OK || (*text && (*text)[*len] == '\0'));
    return st == MF_OK;
}

static const char probe[] = "Hello world, it's 2024!  123\t\n caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x99\x82 \xe2\x96\x81x <s> \xff";

// The stream's pieces, after `k` ids of context, must join into
// decode(ids)[len(decode(ids[:k])):].
static void check_stream(const mf_tokenizer *tok, const int32_t *ids, int64_t n, int64_t k, const char *full,
                         size_t full_len) {
    char *pre = NULL;
    size_t pre_len = 0;
    if (!decodes(tok, ids, k, &pre, &pre_len)) return;
    if (pre_len > full_len || memcmp(full, pre, pre_len) != 0) { // e.g. the context ends inside a
        free(pre);                                                 // character that a decoder then
        return;                                                    // rewrites: the contract says nothing
    }
    mf_tokenizer_stream *s = NULL;
    mf_status st0 = mf_tokenizer_stream_new(tok, ids, k, &s);
    if (st0 == MF_ERR_UNSUPPORTED && strstr(mf_last_error(), "grow")) {
        free(pre);
        return;
    }
    REQUIRE(st0 == MF_OK);
    char *got = malloc(full_len + 1);
    REQUIRE(got);
    size_t got_len = 0;
    bool refused = false;
    for (int64_t i = k; i <= n && !refused; i++) {
        const char *piece = NULL;
        size_t len = 0;
        mf_status st = i < n ? mf_tokenizer_stream_push(s, ids[i], &piece, &len) : mf_tokenizer_stream_flush(s, &piece, &len);
        if (st == MF_ERR_UNSUPPORTED) { // the decoder rewrote earlier text or grew it too much (documented)
            refused = true;
            break;
        }
        REQUIRE(st == MF_OK && piece);
        REQUIRE(got_len + len <= full_len);
        memcpy(got + got_len, piece, len);
        got_len += len;
    }
    if (!refused) REQUIRE(got_len == full_len - pre_len && memcmp(got, full + pre_len, got_len) == 0);
    free(got);
    free(pre);
    mf_tokenizer_stream_free(s);
}

static void check_text(const mf_tokenizer *tok, const char *text, size_t len) {
    int32_t *ids = NULL;
    int64_t n = -1;
    mf_status st = mf_tokenizer_encode(tok, text, len, false, &ids, &n);
    if (st != MF_OK) { // e.g. a fuzzed regex that exceeds PCRE2's match limit
        REQUIRE(ids == NULL && n == 0);
        return;
    }
    REQUIRE(ids && n >= 0);
    for (int64_t i = 0; i < n; i++) REQUIRE(mf_tokenizer_token_text(tok, ids[i]) != NULL);
    char *full = NULL;
    size_t full_len = 0;
    int64_t m = n < 256 ? n : 256; // ids to stream
    if (decodes(tok, ids, m, &full, &full_len)) {
        check_stream(tok, ids, m, 0, full, full_len);
        if (m > 1) check_stream(tok, ids, m, 1 + (int64_t)(len % (size_t)(m - 1)), full, full_len);
    }
    mf_tokenizer_free_buffer(full);
    mf_tokenizer_free_buffer(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *json = (const char *)data;
    const char *nul = memchr(data, 0, size);
    size_t json_len = nul ? (size_t)(nul - json) : size;
    mf_tokenizer *tok = NULL;
    if (mf_tokenizer_load_buffer(json, json_len, "fuzz/tokenizer.json", &tok) != MF_OK) {
        REQUIRE(tok == NULL);
        return 0;
    }
    int64_t vocab = mf_tokenizer_vocab_size(tok);
    REQUIRE(vocab >= 1 && vocab <= INT32_MAX);
    REQUIRE(mf_tokenizer_eos_id(tok) == -1); // nothing but the buffer was read
    int32_t bos = mf_tokenizer_bos_id(tok);
    REQUIRE(bos == -1 || (bos >= 0 && bos < vocab && mf_tokenizer_token_text(tok, bos)));

    // Every token, in id order, decodes.
    int32_t *all = malloc((size_t)vocab * sizeof *all);
    REQUIRE(all);
    int64_t n_all = 0;
    for (int32_t id = 0; id < vocab; id++) {
        const char *t = mf_tokenizer_token_text(tok, id);
        if (t) {
            all[n_all++] = id;
            if (!(tok->id_flags[id] & TK_ID_ADDED)) REQUIRE(mf_tokenizer_token_id(tok, t) >= 0);
        }
    }
    REQUIRE(n_all >= 1);
    char *text = NULL;
    size_t len = 0;
    (void)decodes(tok, all, n_all, &text, &len);
    mf_tokenizer_free_buffer(text);

    // Encode: the text after the NUL (or the probe), then each added token's text.
    const char *t = nul ? nul + 1 : probe;
    size_t t_len = nul ? size - json_len - 1 : sizeof probe - 1;
    check_text(tok, t, t_len < 256 ? t_len : 256);
    for (int32_t i = 0; i < tok->n_added && i < 8; i++) check_text(tok, tok->added[i].text, (size_t)tok->added[i].len);
    free(all);
    mf_tokenizer_free(tok);
    return 0;
}
