// libFuzzer target: arbitrary bytes through the GPT-2 (byte-level BPE) and
// Llama-2 (SentencePiece-style BPE with byte fallback) tokenizers, loaded once
// from tests/fixtures/tokenizers/{gpt2,llama2} (or $MF_FUZZ_TOKENIZERS/...).
// Checks, for every input x:
//   - encode succeeds and every id is a token;
//   - GPT-2: decode(encode(x)) == x, byte for byte, whatever x is;
//   - Llama-2: decode(encode(x)) == what HF's pipeline implies: each gap
//     between special tokens gets "▁" in front and its spaces become "▁";
//     every "▁" decodes to a space, and the decoder strips one leading space;
//   - special-token ids appear exactly where the text spells them;
//   - the streaming decoder's pieces (after 0..n-1 ids of context, picked
//     by the input's length) join into the decode.
// A mismatch aborts, so that libFuzzer saves the input.
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer/tokenizer.h"

#ifndef MF_FUZZ_TOKENIZERS_DIR
#define MF_FUZZ_TOKENIZERS_DIR "tests/fixtures/tokenizers"
#endif

#define REQUIRE(c)                                                                       \
    do {                                                                                 \
        if (!(c)) {                                                                      \
            fprintf(stderr, "fuzz_tokenizer_encode: %s:%d: %s\n", __FILE__, __LINE__, #c); \
            abort();                                                                     \
        }                                                                                \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static mf_tokenizer *gpt2, *llama2;

static mf_tokenizer *load(const char *name) {
    const char *dir = getenv("MF_FUZZ_TOKENIZERS");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir ? dir : MF_FUZZ_TOKENIZERS_DIR, name);
    mf_tokenizer *t = NULL;
    if (mf_tokenizer_load_dir(path, &t) != MF_OK) {
        fprintf(stderr, "fuzz_tokenizer_encode: %s (set MF_FUZZ_TOKENIZERS to tests/fixtures/tokenizers)\n", mf_last_error());
        exit(2);
    }
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    gpt2 = load("gpt2");
    llama2 = load("llama2");
    return 0;
}

// A growable byte string for the expected text.
typedef struct {
    char *p;
    size_t len, cap;
} str;

static void put(str *s, const void *p, size_t n) {
    if (!s->p || s->len + n > s->cap) {
        s->cap = 2 * (s->len + n) + 16;
        s->p = realloc(s->p, s->cap);
        REQUIRE(s->p);
    }
    memcpy(s->p + s->len, p, n);
    s->len += n;
}

// Length of the special token spelled at s[0..n) (leftmost-longest among
// specials), 0 if none.
static size_t special_at(const char *const *specials, const char *s, size_t n) {
    size_t best = 0;
    for (int k = 0; specials[k]; k++) {
        size_t l = strlen(specials[k]);
        if (l <= n && l > best && memcmp(s, specials[k], l) == 0) best = l;
    }
    return best;
}

static int64_t count_specials(const char *const *specials, const char *s, size_t n) {
    int64_t count = 0;
    for (size_t i = 0; i < n;) {
        size_t l = special_at(specials, s + i, n - i);
        count += l > 0;
        i += l ? l : 1;
    }
    return count;
}

// What Llama-2's decode(encode(x)) must give: gaps between special tokens
// get a space in front (the Prepend normalizer: "▁", decoded to " "), "▁"
// decodes to " ", special tokens to their text, and Strip drops one leading space.
static void llama2_expected(const char *const *specials, const char *x, size_t n, str *out) {
    static const char meta[] = "\xE2\x96\x81";
    out->len = 0;
    size_t gap = 0;
    for (size_t i = 0; i <= n;) {
        size_t l = i < n ? special_at(specials, x + i, n - i) : 0;
        if (i < n && l == 0) {
            i++;
            continue;
        }
        if (i > gap) { // the gap x[gap..i)
            put(out, " ", 1);
            for (size_t k = gap; k < i;) {
                if (i - k >= 3 && memcmp(x + k, meta, 3) == 0) {
                    put(out, " ", 1);
                    k += 3;
                } else {
                    put(out, x + k, 1);
                    k++;
                }
            }
        }
        if (i == n) break;
        put(out, x + i, l);
        i += l;
        gap = i;
    }
    if (out->len && out->p[0] == ' ') {
        memmove(out->p, out->p + 1, out->len - 1);
        out->len--;
    }
}

// The stream's pieces after k ids of context join into decode(ids) minus decode(ids[:k]).
static void check_stream(const mf_tokenizer *tok, const int32_t *ids, int64_t n, int64_t k, const char *full,
                         size_t full_len) {
    char *pre = NULL;
    size_t pre_len = 0;
    REQUIRE(mf_tokenizer_decode(tok, ids, k, &pre, &pre_len) == MF_OK);
    REQUIRE(pre_len <= full_len && memcmp(pre, full, pre_len) == 0);
    mf_tokenizer_stream *s = NULL;
    REQUIRE(mf_tokenizer_stream_new(tok, ids, k, &s) == MF_OK);
    size_t at = pre_len;
    for (int64_t i = k; i <= n; i++) {
        const char *piece = NULL;
        size_t len = 0;
        mf_status st = i < n ? mf_tokenizer_stream_push(s, ids[i], &piece, &len) : mf_tokenizer_stream_flush(s, &piece, &len);
        if (st != MF_OK) fprintf(stderr, "stream at id %lld of %lld: %s\n", (long long)i, (long long)n, mf_last_error());
        REQUIRE(st == MF_OK && piece);
        REQUIRE(len <= full_len - at && memcmp(piece, full + at, len) == 0);
        at += len;
    }
    REQUIRE(at == full_len);
    mf_tokenizer_stream_free(s);
    mf_tokenizer_free_buffer(pre);
}

static void check(const mf_tokenizer *tok, const char *const *specials, const char *x, size_t n, const char *want,
                  size_t want_len) {
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    mf_status st = mf_tokenizer_encode(tok, x, n, false, &ids, &n_ids);
    if (st != MF_OK) fprintf(stderr, "encode: %s\n", mf_last_error());
    REQUIRE(st == MF_OK && ids);
    int64_t n_special = 0;
    for (int64_t i = 0; i < n_ids; i++) {
        REQUIRE(ids[i] >= 0 && ids[i] < mf_tokenizer_vocab_size(tok));
        n_special += mf_tokenizer_is_special(tok, ids[i]);
    }
    REQUIRE(n_special == count_specials(specials, x, n));
    char *text = NULL;
    size_t len = 0;
    REQUIRE(mf_tokenizer_decode(tok, ids, n_ids, &text, &len) == MF_OK);
    if (len != want_len || memcmp(text, want, len) != 0) {
        fprintf(stderr, "decode(encode(x)) differs: got %zu bytes, want %zu\n", len, want_len);
        abort();
    }
    check_stream(tok, ids, n_ids, n_ids ? (int64_t)(n % (size_t)n_ids) : 0, text, len); // context: 0..n_ids-1 ids
    mf_tokenizer_free_buffer(text);
    mf_tokenizer_free_buffer(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const gpt2_specials[] = {"<|endoftext|>", NULL};
    static const char *const llama2_specials[] = {"<unk>", "<s>", "</s>", NULL};
    const char *x = (const char *)data;
    check(gpt2, gpt2_specials, x, size, x, size);
    str want = {0};
    put(&want, "", 0);
    llama2_expected(llama2_specials, x, size, &want);
    check(llama2, llama2_specials, x, size, want.p, want.len);
    free(want.p);
    return 0;
}
