// Tokenizer tests: ids compared token for token with HF `tokenizers`
// (tests/fixtures/tokenizers/expected.json, made by
// tests/fixtures/make_tokenizer_fixtures.py), decoding, streaming, invalid
// UTF-8, bad inputs, and allocation failures.
//
//   test_tokenizer <fixtures dir: tests/fixtures/tokenizers> [--filter SUBSTRING]
//
// Every check that fails prints why; the last line is "N passed, N failed".
#include <cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "minfer/backend.h" // mf_fault_alloc_fail_after
#include "minfer/tokenizer.h"

static int n_passed, n_failed;
static const char *fixtures;
static const char *filter;
static char tmpdir[1024];

// A test "case" is a group of checks that passes when all of them do.
static bool case_ok;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("  FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    case_ok = false;
}

#define CHECK(cond, ...)                  \
    do {                                  \
        if (!(cond)) fail(__VA_ARGS__);   \
    } while (0)

static void case_begin(void) { case_ok = true; }
static void case_end(const char *name) {
    if (case_ok) n_passed++;
    else {
        n_failed++;
        printf("FAILED %s\n", name);
    }
}

// ---- helpers ---------------------------------------------------------------------------------

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    if (p) p[n] = '\0';
    if (size) *size = (size_t)n;
    fclose(f);
    return p;
}

static void write_all(const char *path, const char *s, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(s, 1, n, f) != n) {
        printf("cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

static cJSON *parse_file(const char *path) {
    char *s = read_all(path, NULL);
    if (!s) {
        printf("cannot read %s\n", path);
        exit(2);
    }
    cJSON *j = cJSON_Parse(s);
    free(s);
    if (!j) {
        printf("%s is not JSON\n", path);
        exit(2);
    }
    return j;
}

// 0 when s[0..n) is valid UTF-8, else 1 + the offset of the first bad byte.
static size_t utf8_bad(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (k == 0 || i + k > n) return i + 1;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return i + 1;
        if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F) || (c == 0xF0 && s[i + 1] < 0x90) ||
            (c == 0xF4 && s[i + 1] > 0x8F))
            return i + 1;
        i += k;
    }
    return 0;
}

// Prints bytes readably: "Hello\n\xff".
static void print_bytes(const char *s, size_t n, size_t max) {
    putchar('"');
    for (size_t i = 0; i < n && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') printf("\\n");
        else if (c == '\t') printf("\\t");
        else if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    printf(n > max ? "\"..." : "\"");
}

static void print_ids(const mf_tokenizer *tok, const int32_t *ids, int64_t n, int64_t from, int64_t to) {
    if (from < 0) from = 0;
    if (to > n) to = n;
    printf("[");
    for (int64_t i = from; i < to; i++) {
        const char *t = tok ? mf_tokenizer_token_text(tok, ids[i]) : NULL;
        printf("%s%d", i > from ? ", " : "", ids[i]);
        if (t) {
            printf(" ");
            print_bytes(t, strlen(t), 24);
        }
    }
    printf("]");
}

// Compares ids with the expected ones; prints the first mismatch with context.
static bool same_ids(const mf_tokenizer *tok, const char *what, const int32_t *got, int64_t n_got, const int32_t *want,
                     int64_t n_want) {
    int64_t i = 0;
    while (i < n_got && i < n_want && got[i] == want[i]) i++;
    if (i == n_got && i == n_want) return true;
    fail("%s: first mismatch at token %lld (got %lld tokens, want %lld)", what, (long long)i, (long long)n_got,
         (long long)n_want);
    printf("    got  ");
    print_ids(tok, got, n_got, i - 3, i + 5);
    printf("\n    want ");
    print_ids(tok, want, n_want, i - 3, i + 5);
    printf("\n");
    return false;
}

static int32_t *json_ids(const cJSON *arr, int64_t *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *v = malloc((size_t)(*n + 1) * sizeof *v);
    int64_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) v[i++] = (int32_t)e->valuedouble;
    return v;
}

static int32_t *json_rle_ids(const cJSON *arr, int64_t total, int64_t *n) {
    int32_t *v = malloc((size_t)(total + 1) * sizeof *v);
    int64_t k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        int32_t id = (int32_t)cJSON_GetArrayItem(e, 0)->valuedouble;
        int64_t times = (int64_t)cJSON_GetArrayItem(e, 1)->valuedouble;
        for (int64_t t = 0; t < times && k < total; t++) v[k++] = id;
    }
    *n = k;
    return v;
}

static char *from_hex(const char *hex, size_t *n) {
    size_t len = strlen(hex) / 2;
    char *s = malloc(len + 1);
    for (size_t i = 0; i < len; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        s[i] = (char)v;
    }
    s[len] = '\0';
    *n = len;
    return s;
}

// ---- tokenizers under test (real files and patched variants) ---------------------------------

typedef struct {
    char name[64];
    mf_tokenizer *tok;
} loaded;

static loaded toks[64];
static int n_toks;

// Applies a variant's patch (see make_tokenizer_fixtures.py) to its base
// file and writes the result into tmpdir.
static void write_variant(const char *name, const cJSON *spec, char *path, size_t cap) {
    char base[4096];
    snprintf(base, sizeof base, "%s/%s/tokenizer.json", fixtures, cJSON_GetObjectItem(spec, "base")->valuestring);
    cJSON *t = parse_file(base);
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(spec, "set")) {
        cJSON_DeleteItemFromObjectCaseSensitive(t, e->string);
        cJSON_AddItemToObject(t, e->string, cJSON_Duplicate(e, true));
    }
    cJSON *model = cJSON_GetObjectItem(t, "model");
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(spec, "model_set")) {
        cJSON_DeleteItemFromObjectCaseSensitive(model, e->string);
        cJSON_AddItemToObject(model, e->string, cJSON_Duplicate(e, true));
    }
    cJSON *added = cJSON_GetObjectItem(t, "added_tokens");
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(spec, "add_tokens")) cJSON_AddItemToArray(added, cJSON_Duplicate(e, true));
    if (cJSON_IsTrue(cJSON_GetObjectItem(spec, "merges_as_pairs"))) {
        cJSON *merges = cJSON_GetObjectItem(model, "merges"), *pairs = cJSON_CreateArray();
        cJSON_ArrayForEach(e, merges) {
            const char *s = e->valuestring, *sp = strchr(s, ' ');
            char a[512];
            snprintf(a, sizeof a, "%.*s", (int)(sp - s), s);
            cJSON *pair = cJSON_CreateArray();
            cJSON_AddItemToArray(pair, cJSON_CreateString(a));
            cJSON_AddItemToArray(pair, cJSON_CreateString(sp + 1));
            cJSON_AddItemToArray(pairs, pair);
        }
        cJSON_ReplaceItemInObjectCaseSensitive(model, "merges", pairs);
    }
    char *text = cJSON_PrintUnformatted(t);
    snprintf(path, cap, "%s/%s.json", tmpdir, name);
    write_all(path, text, strlen(text));
    free(text);
    cJSON_Delete(t);
}

static void load_all(const cJSON *specs) {
    const cJSON *e;
    cJSON_ArrayForEach(e, specs) {
        char path[4096];
        const cJSON *file = cJSON_GetObjectItem(e, "file");
        if (file) snprintf(path, sizeof path, "%s/%s", fixtures, file->valuestring);
        else write_variant(e->string, cJSON_GetObjectItem(e, "variant"), path, sizeof path);
        loaded *l = &toks[n_toks++];
        snprintf(l->name, sizeof l->name, "%s", e->string);
        double t0 = now_s();
        mf_status st = mf_tokenizer_load(path, &l->tok);
        case_begin();
        CHECK(st == MF_OK, "load %s: %s: %s", path, mf_status_str(st), mf_last_error());
        char name[128];
        snprintf(name, sizeof name, "load(%s)", l->name);
        case_end(name);
        if (st == MF_OK) printf("ok   %s (%.0f ms)\n", name, 1e3 * (now_s() - t0));
        if (!file) remove(path);
    }
}

static mf_tokenizer *find_tok(const char *name) {
    for (int i = 0; i < n_toks; i++)
        if (strcmp(toks[i].name, name) == 0) return toks[i].tok;
    return NULL;
}

// ---- checks shared by the fixture cases ------------------------------------------------------------

// Streams ids (after `k` ids of context) and checks that the pieces join
// into decode(ids)[len(decode(ids[:k])):] and, when the whole text is
// UTF-8, that no piece splits a character.
static void check_stream(const mf_tokenizer *tok, const int32_t *ids, int64_t n, int64_t k) {
    char *full = NULL, *pre = NULL;
    size_t n_full = 0, n_pre = 0;
    if (mf_tokenizer_decode(tok, ids, n, &full, &n_full) != MF_OK || mf_tokenizer_decode(tok, ids, k, &pre, &n_pre) != MF_OK) {
        fail("stream: decode failed: %s", mf_last_error());
        goto done;
    }
    if (n_pre > n_full || memcmp(full, pre, n_pre) != 0) {
        fail("stream: decode(ids[:%lld]) is not a prefix of decode(ids)", (long long)k);
        goto done;
    }
    mf_tokenizer_stream *s = NULL;
    mf_status st = mf_tokenizer_stream_new(tok, ids, k, &s);
    if (st != MF_OK) {
        fail("stream_new: %s", mf_last_error());
        goto done;
    }
    // (A context that ends inside a character leaves its continuation bytes to the stream.)
    bool utf8 = utf8_bad((const unsigned char *)full, n_full) == 0 && utf8_bad((const unsigned char *)pre, n_pre) == 0;
    char *acc = malloc(n_full + 1);
    size_t n_acc = 0;
    bool ok = true;
    for (int64_t i = k; i <= n && ok; i++) {
        const char *piece;
        size_t len;
        st = i < n ? mf_tokenizer_stream_push(s, ids[i], &piece, &len) : mf_tokenizer_stream_flush(s, &piece, &len);
        if (st != MF_OK) {
            fail("stream: push of token %lld: %s", (long long)i, mf_last_error());
            ok = false;
        } else if (n_acc + len > n_full - n_pre) {
            fail("stream: more text than decode gives (at token %lld)", (long long)i);
            ok = false;
        } else {
            if (utf8 && utf8_bad((const unsigned char *)piece, len)) {
                fail("stream: the piece after token %lld splits a UTF-8 character: ", (long long)i);
                print_bytes(piece, len, 40);
                printf("\n");
                ok = false;
            }
            memcpy(acc + n_acc, piece, len);
            n_acc += len;
        }
    }
    if (ok && (n_acc != n_full - n_pre || memcmp(acc, full + n_pre, n_acc) != 0)) {
        fail("stream (context %lld): joined pieces differ from decode: ", (long long)k);
        print_bytes(acc, n_acc, 80);
        printf(" vs ");
        print_bytes(full + n_pre, n_full - n_pre, 80);
        printf("\n");
    }
    free(acc);
    mf_tokenizer_stream_free(s);
done:
    mf_tokenizer_free_buffer(full);
    mf_tokenizer_free_buffer(pre);
}

static void check_decode(const mf_tokenizer *tok, const int32_t *ids, int64_t n, const char *want, size_t n_want,
                         const char *what) {
    char *text = NULL;
    size_t len = 0;
    mf_status st = mf_tokenizer_decode(tok, ids, n, &text, &len);
    if (st != MF_OK) {
        fail("%s: decode: %s", what, mf_last_error());
        return;
    }
    if (len != n_want || memcmp(text, want, len) != 0) {
        size_t i = 0;
        while (i < len && i < n_want && text[i] == want[i]) i++;
        fail("%s: differs at byte %zu (got %zu bytes, want %zu):", what, i, len, n_want);
        printf("    got  ");
        print_bytes(text + (i > 10 ? i - 10 : 0), len - (i > 10 ? i - 10 : 0), 60);
        printf("\n    want ");
        print_bytes(want + (i > 10 ? i - 10 : 0), n_want - (i > 10 ? i - 10 : 0), 60);
        printf("\n");
    }
    if (text[len] != '\0') fail("%s: decoded text is not NUL-terminated", what);
    mf_tokenizer_free_buffer(text);
}

static void run_case(const cJSON *c) {
    const char *tname = cJSON_GetObjectItem(c, "tokenizer")->valuestring;
    const char *cname = cJSON_GetObjectItem(c, "name")->valuestring;
    char name[256];
    snprintf(name, sizeof name, "encode(%s, %s)", tname, cname);
    if (filter && !strstr(name, filter)) return;
    mf_tokenizer *tok = find_tok(tname);
    if (!tok) return; // its load already failed

    case_begin();
    const cJSON *rep = cJSON_GetObjectItem(c, "repeat");
    char *text;
    size_t n_text;
    int32_t *want;
    int64_t n_want;
    if (rep) {
        size_t unit = strlen(rep->valuestring), count = (size_t)cJSON_GetObjectItem(c, "count")->valuedouble;
        n_text = unit * count;
        text = malloc(n_text + 1);
        for (size_t i = 0; i < count; i++) memcpy(text + i * unit, rep->valuestring, unit);
        text[n_text] = '\0';
        want = json_rle_ids(cJSON_GetObjectItem(c, "ids_rle"), (int64_t)cJSON_GetObjectItem(c, "n_ids")->valuedouble, &n_want);
    } else {
        const char *t = cJSON_GetObjectItem(c, "text")->valuestring;
        n_text = strlen(t);
        text = malloc(n_text + 1);
        memcpy(text, t, n_text + 1);
        // JSON cannot carry a NUL through cJSON: the fixture's "a\u0000b" arrives cut at the NUL.
        if (strcmp(cname, "nul byte") == 0) {
            n_text = 3;
            text = realloc(text, 4);
            memcpy(text, "a\0b", 4);
        }
        want = json_ids(cJSON_GetObjectItem(c, "ids"), &n_want);
    }

    int32_t *ids = NULL;
    int64_t n = 0;
    double t0 = now_s();
    mf_status st = mf_tokenizer_encode(tok, text, n_text, false, &ids, &n);
    double dt = now_s() - t0;
    if (st != MF_OK) {
        fail("encode: %s: %s", mf_status_str(st), mf_last_error());
    } else {
        if (!same_ids(tok, "ids", ids, n, want, n_want)) {
            printf("    text ");
            print_bytes(text, n_text, 120);
            printf("\n");
        }
        if (rep) printf("     %s: %zu bytes -> %lld ids in %.1f ms\n", name, n_text, (long long)n, 1e3 * dt);
        // Linearithmic is a few hundred ms even unoptimized; quadratic would be minutes.
        if (rep) CHECK(dt < 30.0, "%zu bytes took %.2f s to encode", n_text, dt);
    }

    const cJSON *bos = cJSON_GetObjectItem(c, "ids_bos");
    if (bos && st == MF_OK) {
        int64_t nb = 0, nw = 0;
        int32_t *ib = NULL, *wb = json_ids(bos, &nw);
        st = mf_tokenizer_encode(tok, text, n_text, true, &ib, &nb);
        if (st != MF_OK) fail("encode(add_bos): %s", mf_last_error());
        else same_ids(tok, "ids with add_bos", ib, nb, wb, nw);
        mf_tokenizer_free_buffer(ib);
        free(wb);
    }

    const cJSON *dec = cJSON_GetObjectItem(c, "decoded");
    if (dec && strcmp(cname, "nul byte") != 0)
        check_decode(tok, want, n_want, dec->valuestring, strlen(dec->valuestring), "decode(HF ids) vs HF decode");
    if (cJSON_IsTrue(cJSON_GetObjectItem(c, "roundtrip")) && st == MF_OK)
        check_decode(tok, ids, n, text, n_text, "decode(encode(text)) vs text");
    if (!rep) {
        check_stream(tok, want, n_want, 0);
        check_stream(tok, want, n_want, n_want / 2);
    }
    mf_tokenizer_free_buffer(ids);
    free(want);
    free(text);
    case_end(name);
}

// Text that is not UTF-8: byte-level tokenizers must give the bytes back
// exactly; SentencePiece-style ones must use <0xNN> tokens for the bad bytes
// (in order) and give the bytes back too.
static void run_invalid(const cJSON *c, const char *tname) {
    const char *cname = cJSON_GetObjectItem(c, "name")->valuestring;
    char name[256];
    snprintf(name, sizeof name, "invalid_utf8(%s, %s)", tname, cname);
    if (filter && !strstr(name, filter)) return;
    mf_tokenizer *tok = find_tok(tname);
    if (!tok) return;
    case_begin();
    size_t n_text;
    char *text = from_hex(cJSON_GetObjectItem(c, "hex")->valuestring, &n_text);
    int32_t *ids = NULL;
    int64_t n = 0;
    mf_status st = mf_tokenizer_encode(tok, text, n_text, false, &ids, &n);
    CHECK(st == MF_OK, "encode: %s", mf_last_error());
    if (st == MF_OK) {
        check_decode(tok, ids, n, text, n_text, "decode(encode(bytes)) vs bytes");
        if (strncmp(tname, "llama2", 6) == 0) {
            // The invalid bytes, in order, must be a subsequence of the byte tokens' bytes.
            const unsigned char *u = (const unsigned char *)text;
            int64_t j = 0;
            for (size_t i = 0; i < n_text;) {
                size_t bad = utf8_bad(u + i, n_text - i);
                if (bad != 1) { // valid character at i: skip it
                    size_t k = u[i] < 0x80 ? 1 : u[i] < 0xE0 ? 2 : u[i] < 0xF0 ? 3 : 4;
                    i += k;
                    continue;
                }
                bool found = false;
                for (; j < n && !found; j++) {
                    const char *t = mf_tokenizer_token_text(tok, ids[j]);
                    unsigned v;
                    found = t && strlen(t) == 6 && sscanf(t, "<0x%2X>", &v) == 1 && v == u[i];
                }
                CHECK(found, "invalid byte 0x%02x at %zu has no <0x%02X> token in order", u[i], i, u[i]);
                i++;
            }
        }
        check_stream(tok, ids, n, 0);
        check_stream(tok, ids, n, n / 2);
    }
    mf_tokenizer_free_buffer(ids);
    free(text);
    case_end(name);
}

// ---- unit tests ----------------------------------------------------------------------------------

static int n_bad_inputs; // want_status calls that want an error (printed for scripts/reliability-report.sh)

static bool want_status(mf_status got, mf_status want, const char *call, const char *must_mention) {
    n_bad_inputs += want != MF_OK;
    if (got != want) {
        fail("%s: got %s, want %s (%s)", call, mf_status_str(got), mf_status_str(want), mf_last_error());
        return false;
    }
    if (must_mention && !strstr(mf_last_error(), must_mention)) {
        fail("%s: message \"%s\" does not mention \"%s\"", call, mf_last_error(), must_mention);
        return false;
    }
    return true;
}

static bool test_selected(const char *name) { return !filter || strstr(name, filter); }

static void test_queries(void) {
    if (!test_selected("queries")) return;
    mf_tokenizer *g = find_tok("gpt2"), *l = find_tok("llama2");
    if (!g || !l) return;
    case_begin();
    CHECK(mf_tokenizer_vocab_size(g) == 50257, "gpt2 vocab_size %lld", (long long)mf_tokenizer_vocab_size(g));
    CHECK(mf_tokenizer_vocab_size(l) == 32000, "llama2 vocab_size %lld", (long long)mf_tokenizer_vocab_size(l));
    CHECK(mf_tokenizer_token_id(g, "<|endoftext|>") == 50256, "gpt2 <|endoftext|>");
    CHECK(mf_tokenizer_token_id(g, "\xC4\xA0the") == 262, "gpt2 \"Ġthe\" -> %d", mf_tokenizer_token_id(g, "\xC4\xA0the"));
    CHECK(mf_tokenizer_token_id(l, "<s>") == 1 && mf_tokenizer_token_id(l, "</s>") == 2, "llama2 <s> </s>");
    CHECK(mf_tokenizer_token_id(l, "<0x0A>") == 13, "llama2 <0x0A>");
    CHECK(mf_tokenizer_token_id(l, "no such token") == -1, "absent token");
    CHECK(mf_tokenizer_token_id(NULL, "<s>") == -1 && mf_tokenizer_token_id(l, NULL) == -1, "NULL token_id");
    CHECK(mf_tokenizer_token_text(l, 1) && strcmp(mf_tokenizer_token_text(l, 1), "<s>") == 0, "token_text(1)");
    CHECK(mf_tokenizer_token_text(l, 32000) == NULL && mf_tokenizer_token_text(l, -1) == NULL, "token_text out of range");
    CHECK(mf_tokenizer_bos_id(g) == 50256 && mf_tokenizer_eos_id(g) == 50256, "gpt2 bos/eos from tokenizer_config.json");
    CHECK(mf_tokenizer_bos_id(l) == 1 && mf_tokenizer_eos_id(l) == 2, "llama2 bos/eos");
    CHECK(!mf_tokenizer_default_add_bos(g) && mf_tokenizer_default_add_bos(l), "add_bos_token defaults");
    CHECK(mf_tokenizer_is_special(l, 1) && !mf_tokenizer_is_special(l, 100) && !mf_tokenizer_is_special(l, -5),
          "is_special");
    CHECK(mf_tokenizer_vocab_size(NULL) == 0 && mf_tokenizer_bos_id(NULL) == -1, "NULL queries");
    mf_tokenizer *v = find_tok("llama2_metaspace_first");
    if (v) CHECK(mf_tokenizer_bos_id(v) == 1, "BOS from the TemplateProcessing post_processor (no tokenizer_config.json)");
    case_end("queries");
}

// Streaming details: context, held bytes, flush.
static void test_stream(void) {
    if (!test_selected("stream")) return;
    mf_tokenizer *l = find_tok("llama2");
    if (!l) return;
    case_begin();
    const char *piece;
    size_t len;
    mf_tokenizer_stream *s = NULL;
    int32_t hello = mf_tokenizer_token_id(l, "\xE2\x96\x81Hello"), world = mf_tokenizer_token_id(l, "\xE2\x96\x81world");
    // At the start of a sequence the SentencePiece space is stripped; after context it is not.
    CHECK(mf_tokenizer_stream_new(l, NULL, 0, &s) == MF_OK, "stream_new: %s", mf_last_error());
    CHECK(mf_tokenizer_stream_push(s, hello, &piece, &len) == MF_OK && len == 5 && memcmp(piece, "Hello", 5) == 0,
          "first piece \"Hello\"");
    CHECK(mf_tokenizer_stream_push(s, world, &piece, &len) == MF_OK && len == 6 && memcmp(piece, " world", 6) == 0,
          "second piece \" world\"");
    mf_tokenizer_stream_free(s);
    int32_t ctx[2] = {1, hello};
    CHECK(mf_tokenizer_stream_new(l, ctx, 2, &s) == MF_OK, "stream_new with context");
    CHECK(mf_tokenizer_stream_push(s, world, &piece, &len) == MF_OK && len == 6 && memcmp(piece, " world", 6) == 0,
          "after context: \" world\"");
    // "€" as three byte-fallback tokens: nothing until the character is complete.
    int32_t e2 = mf_tokenizer_token_id(l, "<0xE2>"), x82 = mf_tokenizer_token_id(l, "<0x82>"),
            xac = mf_tokenizer_token_id(l, "<0xAC>");
    CHECK(mf_tokenizer_stream_push(s, e2, &piece, &len) == MF_OK && len == 0, "<0xE2> held (len %zu)", len);
    CHECK(mf_tokenizer_stream_push(s, x82, &piece, &len) == MF_OK && len == 0, "<0x82> held (len %zu)", len);
    CHECK(mf_tokenizer_stream_push(s, xac, &piece, &len) == MF_OK && len == 3 && memcmp(piece, "\xE2\x82\xAC", 3) == 0,
          "<0xAC> completes \"€\" (len %zu)", len);
    // A lead byte then a token that cannot continue it: the byte goes out raw with it.
    CHECK(mf_tokenizer_stream_push(s, e2, &piece, &len) == MF_OK && len == 0, "<0xE2> held again");
    CHECK(mf_tokenizer_stream_push(s, world, &piece, &len) == MF_OK && len == 7 && memcmp(piece, "\xE2 world", 7) == 0,
          "\\xE2 released by \" world\" (len %zu)", len);
    // flush hands out held bytes.
    CHECK(mf_tokenizer_stream_push(s, e2, &piece, &len) == MF_OK && len == 0, "<0xE2> held for flush");
    CHECK(mf_tokenizer_stream_flush(s, &piece, &len) == MF_OK && len == 1 && (unsigned char)piece[0] == 0xE2,
          "flush gives \\xE2 (len %zu)", len);
    CHECK(mf_tokenizer_stream_flush(s, &piece, &len) == MF_OK && len == 0, "second flush is empty");
    CHECK(mf_tokenizer_stream_push(s, world, &piece, &len) == MF_OK && len == 6, "push after flush");
    // Bad arguments.
    want_status(mf_tokenizer_stream_push(s, 32000, &piece, &len), MF_ERR_INVALID_ARG, "stream_push(id 32000)", "32000");
    want_status(mf_tokenizer_stream_push(s, -1, &piece, &len), MF_ERR_INVALID_ARG, "stream_push(id -1)", "-1");
    want_status(mf_tokenizer_stream_push(NULL, 1, &piece, &len), MF_ERR_INVALID_ARG, "stream_push(NULL)", NULL);
    want_status(mf_tokenizer_stream_push(s, 1, NULL, &len), MF_ERR_INVALID_ARG, "stream_push(text NULL)", NULL);
    want_status(mf_tokenizer_stream_flush(s, &piece, NULL), MF_ERR_INVALID_ARG, "stream_flush(len NULL)", NULL);
    mf_tokenizer_stream_free(s);
    mf_tokenizer_stream *s2 = (mf_tokenizer_stream *)&len;
    want_status(mf_tokenizer_stream_new(NULL, NULL, 0, &s2), MF_ERR_INVALID_ARG, "stream_new(tok NULL)", NULL);
    CHECK(s2 == NULL, "stream_new clears *out on failure");
    want_status(mf_tokenizer_stream_new(l, NULL, 3, &s2), MF_ERR_INVALID_ARG, "stream_new(context NULL, n 3)", NULL);
    int32_t bad_ctx[1] = {99999};
    want_status(mf_tokenizer_stream_new(l, bad_ctx, 1, &s2), MF_ERR_INVALID_ARG, "stream_new(bad context)", "99999");
    want_status(mf_tokenizer_stream_new(l, NULL, 0, NULL), MF_ERR_INVALID_ARG, "stream_new(out NULL)", NULL);
    mf_tokenizer_stream_free(NULL);
    case_end("stream");
}

static void write_tmp(const char *name, const char *content, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", tmpdir, name);
    write_all(path, content, strlen(content));
}

// Streams ids after k ids of context: 1 when the pieces join into
// decode(ids) minus decode(ids[:k]), 0 when they do not, -1 when the stream
// refused (MF_ERR_UNSUPPORTED: the decoder rewrote earlier text), -2 when it
// refused and decode(ids[:j]) is no prefix of decode(ids[:j+1]) for some j >= k
// (text was rewritten), 2 when decode(ids[:k]) is no prefix of decode(ids)
// (the contract says nothing then).
static int stream_joins(const mf_tokenizer *tok, const int32_t *ids, int64_t n, int64_t k) {
    char *full = NULL, *pre = NULL, acc[256];
    size_t n_full = 0, n_pre = 0, n_acc = 0;
    int result = 1;
    mf_tokenizer_stream *s = NULL;
    if (mf_tokenizer_decode(tok, ids, n, &full, &n_full) != MF_OK || mf_tokenizer_decode(tok, ids, k, &pre, &n_pre) != MF_OK ||
        mf_tokenizer_stream_new(tok, ids, k, &s) != MF_OK)
        result = 0;
    for (int64_t i = k; i <= n && result == 1; i++) {
        const char *piece;
        size_t len;
        mf_status st = i < n ? mf_tokenizer_stream_push(s, ids[i], &piece, &len) : mf_tokenizer_stream_flush(s, &piece, &len);
        if (st == MF_ERR_UNSUPPORTED) result = -1;
        else if (st != MF_OK || n_acc + len > sizeof acc) result = 0;
        else {
            memcpy(acc + n_acc, piece, len);
            n_acc += len;
        }
    }
    bool prefix = full && pre && n_pre <= n_full && memcmp(full, pre, n_pre) == 0;
    if (result == 1 && (n_acc != n_full - n_pre || memcmp(acc, full + n_pre, n_acc) != 0)) result = 0;
    for (int64_t j = k; j < n && result == -1; j++) {
        char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if (mf_tokenizer_decode(tok, ids, j, &a, &na) == MF_OK && mf_tokenizer_decode(tok, ids, j + 1, &b, &nb) == MF_OK &&
            (na > nb || memcmp(a, b, na) != 0))
            result = -2;
        mf_tokenizer_free_buffer(a);
        mf_tokenizer_free_buffer(b);
    }
    if (!prefix) result = 2;
    mf_tokenizer_stream_free(s);
    mf_tokenizer_free_buffer(full);
    mf_tokenizer_free_buffer(pre);
    return result;
}

// The streaming decoder against whole-sequence decoding, for decoder chains
// whose output at the start of a sequence reaches past the first token
// (Strip start/stop > 1 after Fuse, tokens that decode to nothing, Metaspace
// after Fuse) or that rewrite across tokens: every sequence of up to 4 ids
// over a 7-token vocabulary, with 0, 1 and n-1 ids of context. Found by
// fuzz_tokenizer_load (Fuse + Strip start=2 streamed "a a" for "a  a").
static void test_stream_chains(void) {
    if (!test_selected("stream_chains")) return;
    static const char *const vocab[] = {"a", "\xE2\x96\x81", " ", "", "<0xE2>", "<0x96>", "<0x81>"};
    enum { V = 7 };
    static const struct {
        const char *decoder;
        bool may_refuse; // the chain can rewrite text across tokens: refusing is right
    } chains[] = {
        {"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\u2581\"},\"content\":\" \"},"
         "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}", false},
        {"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
         "{\"type\":\"Strip\",\"content\":\" \",\"start\":2,\"stop\":0}]}", false},
        {"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":0,\"stop\":2}]}", false},
        {"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\u2581\"},\"content\":\" \"},"
         "{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":1}]}", false},
        {"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\u2581\"},\"content\":\"\"},"
         "{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}", false},
        {"{\"type\":\"Metaspace\",\"replacement\":\"\u2581\",\"prepend_scheme\":\"first\",\"split\":false}", false},
        {"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},{\"type\":\"Metaspace\"}]}", false},
        {"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":\"Metaspace\"}]}", false},
        {"{\"type\":\"ByteLevel\"}", false},
        {"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":\"ByteLevel\"}]}", true},
        {"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\"a\u2581\"},\"content\":\"X\"}]}", true},
        {"{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\"\u2581\"},\"content\":\"Y\"}]}", true},
    };
    char json[2048], path[4096];
    for (size_t c = 0; c < sizeof chains / sizeof chains[0]; c++) {
        case_begin();
        int w = snprintf(json, sizeof json, "{\"decoder\": %s, \"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {",
                         chains[c].decoder);
        for (int i = 0; i < V; i++) w += snprintf(json + w, sizeof json - (size_t)w, "%s\"%s\": %d", i ? ", " : "", vocab[i], i);
        snprintf(json + w, sizeof json - (size_t)w, "}}}");
        write_tmp("stream_chain.json", json, path, sizeof path);
        mf_tokenizer *t = NULL;
        if (!want_status(mf_tokenizer_load(path, &t), MF_OK, "load(stream chain)", NULL)) {
            case_end(chains[c].decoder);
            continue;
        }
        int64_t checked = 0, refused = 0;
        int32_t ids[4];
        for (int n = 1; n <= 4 && case_ok; n++) {
            int64_t count = 1;
            for (int i = 0; i < n; i++) count *= V;
            for (int64_t code = 0; code < count && case_ok; code++) {
                for (int i = 0, r = (int)code; i < n; i++, r /= V) ids[i] = r % V;
                int64_t ks[3] = {0, 1, n - 1};
                for (int j = 0; j < 3 && case_ok; j++) {
                    if (ks[j] >= n || (j > 0 && ks[j] == ks[j - 1])) continue;
                    int got = stream_joins(t, ids, n, ks[j]);
                    checked++;
                    refused += got < 0 || got == 2;
                    if (got == 0 || (got == -1 && !chains[c].may_refuse))
                        fail("decoder %s: ids [%d %d %d %d][:%d], context %lld: stream %s (%s)", chains[c].decoder, ids[0],
                             n > 1 ? ids[1] : -1, n > 2 ? ids[2] : -1, n > 3 ? ids[3] : -1, n, (long long)ks[j],
                             got ? "refused" : "differs from decode", mf_last_error());
                }
            }
        }
        printf("     stream_chains: %lld streams, %lld refused or undefined: %s\n", (long long)checked, (long long)refused, chains[c].decoder);
        mf_tokenizer_free(t);
        remove(path);
        case_end("stream_chains");
    }
}

// A tokenizer.json whose normalizers, pre-tokenizers or decoders each double
// the text 40 times over must be refused at encode / decode with
// MF_ERR_UNSUPPORTED naming the stage, not exhaust memory (fuzz_tokenizer_load
// found a 110-fold Replace normalizer; 40 doublings ran for minutes).
static void test_growth(void) {
    if (!test_selected("growth")) return;
    case_begin();
    static const struct {
        const char *member, *list, *step, *stage;
    } chains[] = {
        {"normalizer", "normalizers", "{\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"aa\"}", "normalizers"},
        {"pre_tokenizer", "pretokenizers", "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}", "pre-tokenizers"},
        {"decoder", "decoders", "{\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"aa\"}", "decoders"},
    };
    char json[8192], path[4096];
    for (size_t c = 0; c < sizeof chains / sizeof chains[0]; c++) {
        int w = snprintf(json, sizeof json, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"aa\": 1, \"\\u00c3\": 2}, "
                         "\"merges\": [\"a a\"]}, \"%s\": {\"type\": \"Sequence\", \"%s\": [", chains[c].member, chains[c].list);
        for (int i = 0; i < 40; i++) w += snprintf(json + w, sizeof json - (size_t)w, "%s%s", i ? ", " : "", chains[c].step);
        snprintf(json + w, sizeof json - (size_t)w, "]}}");
        write_tmp("growth.json", json, path, sizeof path);
        mf_tokenizer *t = NULL;
        char call[64];
        snprintf(call, sizeof call, "load(40 doubling %s)", chains[c].stage);
        if (!want_status(mf_tokenizer_load(path, &t), MF_OK, call, NULL)) continue;
        int32_t *ids = (int32_t *)json, two[2] = {0, 1};
        int64_t n = 5;
        char *text = json;
        size_t len = 5;
        double t0 = now_s();
        if (c < 2) {
            want_status(mf_tokenizer_encode(t, "aa\xc3\xa9", 4, false, &ids, &n), MF_ERR_UNSUPPORTED, chains[c].stage, chains[c].stage);
            CHECK(ids == NULL && n == 0, "%s: a refused encode clears its outputs", chains[c].stage);
        } else {
            want_status(mf_tokenizer_decode(t, two, 2, &text, &len), MF_ERR_UNSUPPORTED, chains[c].stage, chains[c].stage);
            CHECK(text == NULL && len == 0, "%s: a refused decode clears its outputs", chains[c].stage);
        }
        CHECK(now_s() - t0 < 1.0, "%s: refusing took %.1f s", chains[c].stage, now_s() - t0);
        // The tokenizer still works on text that does not grow (nothing to double).
        if (c < 2 && want_status(mf_tokenizer_encode(t, "", 0, false, &ids, &n), MF_OK, "encode(\"\") after a refusal", NULL))
            mf_tokenizer_free_buffer(ids);
        mf_tokenizer_free(t);
        remove(path);
    }
    case_end("growth");
}

// A tokenizer.json with the tiny model and `extra` members (JSON text after the model).
static const char tiny_model[] =
    "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}";

static void expect_load(const char *file_name, const char *json, mf_status want, const char *mention) {
    char path[4096], call[256];
    write_tmp(file_name, json, path, sizeof path);
    mf_tokenizer *t = (mf_tokenizer *)path; // a failed load must set it to NULL
    snprintf(call, sizeof call, "load(%s)", file_name);
    mf_status st = mf_tokenizer_load(path, &t);
    if (want_status(st, want, call, mention)) CHECK(t == NULL, "%s: *out not NULL", call);
    if (st == MF_OK) mf_tokenizer_free(t);
    remove(path);
}

static void test_bad_inputs(void) {
    if (!test_selected("bad_inputs")) return;
    case_begin();
    mf_tokenizer *t = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/no/such/tokenizer.json", tmpdir);
    want_status(mf_tokenizer_load(path, &t), MF_ERR_IO, "load(missing file)", path);
    CHECK(t == NULL, "missing file: *out not NULL");
    want_status(mf_tokenizer_load_dir(tmpdir, &t), MF_ERR_IO, "load_dir(no tokenizer.json)", "tokenizer.json");
    want_status(mf_tokenizer_load(NULL, &t), MF_ERR_INVALID_ARG, "load(NULL path)", NULL);
    want_status(mf_tokenizer_load(path, NULL), MF_ERR_INVALID_ARG, "load(NULL out)", NULL);
    want_status(mf_tokenizer_load_dir(NULL, &t), MF_ERR_INVALID_ARG, "load_dir(NULL)", NULL);

    expect_load("malformed.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,", MF_ERR_FORMAT, "not valid JSON");
    expect_load("empty.json", "", MF_ERR_FORMAT, "not valid JSON");
    expect_load("array.json", "[1, 2]", MF_ERR_FORMAT, "not a JSON object");
    expect_load("unigram.json", "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}", MF_ERR_UNSUPPORTED, "Unigram");
    expect_load("wordpiece.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", MF_ERR_UNSUPPORTED, "WordPiece");
    expect_load("no_model.json", "{\"normalizer\": null}", MF_ERR_FORMAT, "model");
    char buf[1024];
    snprintf(buf, sizeof buf, "{%s, \"normalizer\": {\"type\": \"NFKC\"}}", tiny_model);
    expect_load("nfkc.json", buf, MF_ERR_UNSUPPORTED, "NFKC");
    snprintf(buf, sizeof buf, "{%s, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Whitespace\"}]}}", tiny_model);
    expect_load("whitespace.json", buf, MF_ERR_UNSUPPORTED, "Whitespace");
    snprintf(buf, sizeof buf, "{%s, \"decoder\": {\"type\": \"WordPiece\", \"prefix\": \"##\"}}", tiny_model);
    expect_load("wp_decoder.json", buf, MF_ERR_UNSUPPORTED, "WordPiece");
    snprintf(buf, sizeof buf, "{%s, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}", tiny_model);
    expect_load("bad_regex.json", buf, MF_ERR_FORMAT, "regex");
    snprintf(buf, sizeof buf, "{%s, \"added_tokens\": [{\"id\": 3, \"content\": \"x\", \"single_word\": true}]}", tiny_model);
    expect_load("single_word.json", buf, MF_ERR_UNSUPPORTED, "single_word");
    expect_load("bad_merge.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
                MF_ERR_FORMAT, "merged token");
    expect_load("bad_merge2.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a  b\"]}}",
                MF_ERR_FORMAT, "merges[0]");
    expect_load("bad_id.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0.5}, \"merges\": []}}", MF_ERR_FORMAT, "\"a\"");
    expect_load("neg_id.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}", MF_ERR_FORMAT, "\"a\"");
    expect_load("dup_id.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", MF_ERR_FORMAT, "id 0");
    expect_load("sparse.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 2000000000}, \"merges\": []}}", MF_ERR_FORMAT, "2000000000");
    expect_load("no_unk.json", "{\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                MF_ERR_FORMAT, "<unk>");
    expect_load("prefix.json", "{\"model\": {\"type\": \"BPE\", \"continuing_subword_prefix\": \"##\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                MF_ERR_UNSUPPORTED, "##");

    // A tokenizer_config.json beside it that is broken / names a missing token.
    char dir[4096], cfg[4096 + 32], tj[4096 + 32];
    snprintf(dir, sizeof dir, "%s/cfgdir", tmpdir);
    mkdir(dir, 0700);
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    snprintf(buf, sizeof buf, "{%s}", tiny_model);
    write_all(tj, buf, strlen(buf));
    write_all(cfg, "{\"bos_token\": ", 14);
    want_status(mf_tokenizer_load_dir(dir, &t), MF_ERR_FORMAT, "load_dir(broken tokenizer_config.json)", "tokenizer_config.json");
    CHECK(t == NULL, "broken config: *out not NULL");
    const char *missing = "{\"bos_token\": {\"content\": \"<s>\"}}";
    write_all(cfg, missing, strlen(missing));
    want_status(mf_tokenizer_load_dir(dir, &t), MF_ERR_FORMAT, "load_dir(config names a missing token)", "<s>");
    const char *good = "{\"bos_token\": \"ab\", \"eos_token\": {\"content\": \"b\"}, \"add_bos_token\": true}";
    write_all(cfg, good, strlen(good));
    if (want_status(mf_tokenizer_load_dir(dir, &t), MF_OK, "load_dir(good config)", NULL)) {
        CHECK(mf_tokenizer_bos_id(t) == 2 && mf_tokenizer_eos_id(t) == 1 && mf_tokenizer_default_add_bos(t),
              "config: bos %d eos %d", mf_tokenizer_bos_id(t), mf_tokenizer_eos_id(t));
        mf_tokenizer_free(t);
    }
    remove(cfg);
    remove(tj);
    rmdir(dir);

    // encode / decode argument checks (tiny tokenizer: no BOS).
    mf_tokenizer *tiny = find_tok("tiny"), *g = find_tok("gpt2");
    int32_t *ids = (int32_t *)buf;
    int64_t n = 7;
    char *text = buf;
    size_t len = 7;
    if (tiny && g) {
        want_status(mf_tokenizer_encode(NULL, "a", 1, false, &ids, &n), MF_ERR_INVALID_ARG, "encode(tok NULL)", NULL);
        CHECK(ids == NULL && n == 0, "encode failure clears the outputs");
        want_status(mf_tokenizer_encode(g, NULL, 5, false, &ids, &n), MF_ERR_INVALID_ARG, "encode(text NULL, len 5)", "5");
        want_status(mf_tokenizer_encode(g, "a", 1, false, NULL, &n), MF_ERR_INVALID_ARG, "encode(ids NULL)", NULL);
        want_status(mf_tokenizer_encode(g, "a", 1, false, &ids, NULL), MF_ERR_INVALID_ARG, "encode(n NULL)", NULL);
        want_status(mf_tokenizer_encode(tiny, "a", 1, true, &ids, &n), MF_ERR_INVALID_ARG, "encode(add_bos, no BOS)", "BOS");
        if (want_status(mf_tokenizer_encode(g, NULL, 0, false, &ids, &n), MF_OK, "encode(NULL, 0)", NULL)) {
            CHECK(ids != NULL && n == 0, "empty encode: ids %p n %lld", (void *)ids, (long long)n);
            mf_tokenizer_free_buffer(ids);
        }
        if (want_status(mf_tokenizer_encode(g, NULL, 0, true, &ids, &n), MF_OK, "encode(NULL, 0, add_bos)", NULL)) {
            CHECK(n == 1 && ids[0] == 50256, "empty encode with BOS");
            mf_tokenizer_free_buffer(ids);
        }
        int32_t bad[3] = {15496, 50257, 0};
        want_status(mf_tokenizer_decode(g, bad, 3, &text, &len), MF_ERR_INVALID_ARG, "decode(id 50257)", "ids[1] = 50257");
        CHECK(text == NULL && len == 0, "decode failure clears the outputs");
        bad[1] = -3;
        want_status(mf_tokenizer_decode(g, bad, 3, &text, &len), MF_ERR_INVALID_ARG, "decode(id -3)", "-3");
        want_status(mf_tokenizer_decode(g, NULL, 2, &text, &len), MF_ERR_INVALID_ARG, "decode(ids NULL, n 2)", NULL);
        want_status(mf_tokenizer_decode(g, bad, -1, &text, &len), MF_ERR_INVALID_ARG, "decode(n -1)", "-1");
        want_status(mf_tokenizer_decode(NULL, bad, 1, &text, &len), MF_ERR_INVALID_ARG, "decode(tok NULL)", NULL);
        want_status(mf_tokenizer_decode(g, bad, 1, NULL, &len), MF_ERR_INVALID_ARG, "decode(text NULL)", NULL);
        if (want_status(mf_tokenizer_decode(g, NULL, 0, &text, &len), MF_OK, "decode(nothing)", NULL)) {
            CHECK(text && len == 0 && text[0] == '\0', "empty decode gives \"\"");
            mf_tokenizer_free_buffer(text);
        }
    }
    mf_tokenizer_free(NULL);
    mf_tokenizer_free_buffer(NULL);
    case_end("bad_inputs");
}

// Every allocation of load + encode + decode + stream made to fail in turn:
// each call must fail cleanly with MF_ERR_OOM (valgrind / ASan see the leaks).
static void test_alloc_failures(void) {
    if (!test_selected("alloc_failures")) return;
    case_begin();
    char path[4096];
    snprintf(path, sizeof path, "%s/tiny/tokenizer.json", fixtures);
    const char text[] = "abc aaaa <s>xyz \xff\xc3\xa9" "a";
    int64_t k = 1;
    for (; k < 100000; k++) {
        mf_fault_alloc_fail_after(k);
        mf_tokenizer *t = NULL;
        int32_t *ids = NULL;
        int64_t n = 0;
        char *out = NULL;
        size_t len = 0;
        mf_tokenizer_stream *s = NULL;
        mf_status st = mf_tokenizer_load(path, &t);
        if (st == MF_OK) st = mf_tokenizer_encode(t, text, sizeof text - 1, false, &ids, &n);
        if (st == MF_OK) st = mf_tokenizer_decode(t, ids, n, &out, &len);
        if (st == MF_OK) st = mf_tokenizer_stream_new(t, ids, 1, &s);
        for (int64_t i = 1; i < n && st == MF_OK; i++) {
            const char *piece;
            size_t pl;
            st = mf_tokenizer_stream_push(s, ids[i], &piece, &pl);
        }
        mf_fault_alloc_fail_after(0);
        bool done = st == MF_OK;
        if (!done && st != MF_ERR_OOM) fail("allocation %lld failing gave %s: %s", (long long)k, mf_status_str(st), mf_last_error());
        if (done && (n == 0 || len == 0)) fail("no-failure run produced nothing (n %lld, len %zu)", (long long)n, len);
        mf_tokenizer_stream_free(s);
        mf_tokenizer_free_buffer(out);
        mf_tokenizer_free_buffer(ids);
        mf_tokenizer_free(t);
        if (done || !case_ok) break;
    }
    printf("     alloc_failures: %lld allocation points tried\n", (long long)k - 1);
    case_end("alloc_failures");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s <tests/fixtures/tokenizers> [--filter SUBSTRING]\n", argv[0]);
        return 2;
    }
    fixtures = argv[1];
    for (int i = 2; i + 1 < argc; i++)
        if (strcmp(argv[i], "--filter") == 0) filter = argv[i + 1];
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/mf_tokenizer_test_XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        printf("cannot make a temporary folder in %s\n", base);
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/expected.json", fixtures);
    cJSON *exp = parse_file(path);

    load_all(cJSON_GetObjectItem(exp, "tokenizers"));
    const cJSON *c;
    int before = n_passed + n_failed;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(exp, "cases")) run_case(c);
    static const char *byte_tokenizers[] = {"gpt2", "llama2", "gpt2_llama3_pretok", "llama2_metaspace_split"};
    for (size_t i = 0; i < sizeof byte_tokenizers / sizeof byte_tokenizers[0]; i++) {
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(exp, "invalid_utf8")) run_invalid(c, byte_tokenizers[i]);
    }
    printf("ok   %d fixture cases (failures listed above)\n", n_passed + n_failed - before);
    test_queries();
    test_stream();
    test_stream_chains();
    test_growth();
    test_bad_inputs();
    test_alloc_failures();

    for (int i = 0; i < n_toks; i++) mf_tokenizer_free(toks[i].tok);
    cJSON_Delete(exp);
    rmdir(tmpdir);
    printf("bad-input cases: %d\n", n_bad_inputs);
    printf("%d passed, %d failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}
