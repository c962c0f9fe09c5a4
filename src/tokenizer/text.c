// What every stage of the tokenizer shares (tok.h): growable buffers and piece
// lists, UTF-8, the GPT-2 byte <-> unicode map, PCRE2 regexes and
// tokenizer.json field readers. Uses nothing of the stages or the driver.
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/tok.h"

void *tk_realloc(void *p, size_t bytes) {
    if (mf_fault_should_fail()) return NULL;
    return realloc(p, bytes ? bytes : 1);
}

mf_status tk_check_growth(int64_t in, int64_t out, const char *what) {
    if (out <= TK_MAX_GROWTH * in + TK_GROWTH_SLACK) return MF_OK;
    return mf_fail(MF_ERR_UNSUPPORTED, "tokenizer: the %s grow %lld bytes of text to %lld (more than %dx + %d): refused",
                   what, (long long)in, (long long)out, TK_MAX_GROWTH, TK_GROWTH_SLACK);
}

// Buffers keep TK_BUF_SLACK initialized bytes past the end: PCRE2's JIT reads
// a little beyond a subject with vector loads, and every regex subject is a
// tk_buf, so those reads see zeros (and valgrind sees defined memory).
#define TK_BUF_SLACK 64

mf_status tk_buf_reserve(tk_buf *b, int64_t extra) {
    int64_t need = b->len + extra + 1 + TK_BUF_SLACK;
    if (need <= b->cap) return MF_OK;
    int64_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    char *p = tk_realloc(b->p, (size_t)cap);
    if (!p) return mf_fail(MF_ERR_OOM, "tokenizer: out of memory growing a text buffer to %lld bytes", (long long)cap);
    memset(p + b->cap, 0, (size_t)(cap - b->cap));
    b->p = p;
    b->cap = cap;
    return MF_OK;
}

mf_status tk_buf_put(tk_buf *b, const void *s, int64_t n) {
    MF_TRY(tk_buf_reserve(b, n));
    if (n) memcpy(b->p + b->len, s, (size_t)n);
    b->len += n;
    b->p[b->len] = '\0';
    return MF_OK;
}

mf_status tk_ids_push(tk_ids *v, int32_t id) {
    if (v->len == v->cap) {
        int64_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = tk_realloc(v->p, (size_t)cap * sizeof *p);
        if (!p) return mf_fail(MF_ERR_OOM, "tokenizer: out of memory growing an id list to %lld ids", (long long)cap);
        v->p = p;
        v->cap = cap;
    }
    v->p[v->len++] = id;
    return MF_OK;
}

// Sequence length from the lead byte, 0 for a byte that cannot lead.
static int lead_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

int tk_utf8_len(const unsigned char *s, int64_t n) {
    int k = lead_len(s[0]);
    if (k <= 1 || k > n) return 1;
    for (int i = 1; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) return 1;
    // Overlong 3/4-byte forms, surrogates and code points above U+10FFFF.
    if (s[0] == 0xE0 && s[1] < 0xA0) return 1;
    if (s[0] == 0xED && s[1] > 0x9F) return 1;
    if (s[0] == 0xF0 && s[1] < 0x90) return 1;
    if (s[0] == 0xF4 && s[1] > 0x8F) return 1;
    return k;
}

int32_t tk_utf8_cp(const unsigned char *s, int64_t n) {
    int k = tk_utf8_len(s, n);
    if (k == 1) return s[0] < 0x80 ? s[0] : -1;
    int32_t cp = s[0] & (0x7F >> k);
    for (int i = 1; i < k; i++) cp = (cp << 6) | (s[i] & 0x3F);
    return cp;
}

int tk_utf8_put(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

bool tk_is_white_space(int32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

// Printable bytes keep their code point: '!'..'~', U+00A1..U+00AC, U+00AE..U+00FF.
static bool printable(int32_t b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

// The others, in byte order: 0x00..0x20 (33), 0x7F..0xA0 (34), 0xAD (1) -> U+0100..U+0143.
int32_t tk_byte_cp(uint8_t b) {
    if (printable(b)) return b;
    if (b <= 0x20) return 0x100 + b;
    if (b <= 0xA0) return 0x100 + 33 + (b - 0x7F);
    return 0x100 + 67; // 0xAD
}

int tk_cp_byte(int32_t cp) {
    if (cp < 0x100) return printable(cp) ? cp : -1;
    int32_t k = cp - 0x100;
    if (k <= 32) return k;
    if (k <= 66) return 0x7F + (k - 33);
    if (k == 67) return 0xAD;
    return -1;
}

// ---- piece lists ------------------------------------------------------------------------

void tk_pieces_clear(tk_pieces *p) {
    p->n = 0;
    p->buf.len = 0;
}

void tk_pieces_free(tk_pieces *p) {
    free(p->buf.p);
    free(p->off);
    free(p->len);
    free(p->first);
    memset(p, 0, sizeof *p);
}

static mf_status pieces_grow(tk_pieces *p) {
    if (p->n < p->cap) return MF_OK;
    int64_t cap = p->cap ? p->cap * 2 : 64;
    int64_t *off = tk_realloc(p->off, (size_t)cap * sizeof *off);
    if (off) p->off = off;
    int64_t *len = tk_realloc(p->len, (size_t)cap * sizeof *len);
    if (len) p->len = len;
    bool *first = tk_realloc(p->first, (size_t)cap * sizeof *first);
    if (first) p->first = first;
    if (!off || !len || !first) return mf_fail(MF_ERR_OOM, "tokenizer: out of memory for %lld pieces", (long long)cap);
    p->cap = cap;
    return MF_OK;
}

mf_status tk_pieces_start(tk_pieces *p, bool first) {
    MF_TRY(pieces_grow(p));
    MF_TRY(tk_buf_reserve(&p->buf, 0));
    p->buf.p[p->buf.len] = '\0';
    p->off[p->n] = p->buf.len;
    p->len[p->n] = 0;
    p->first[p->n] = first;
    p->n++;
    return MF_OK;
}

mf_status tk_pieces_add(tk_pieces *p, const char *s, int64_t n, bool first) {
    if (n == 0) return MF_OK;
    MF_TRY(pieces_grow(p));
    p->off[p->n] = p->buf.len;
    p->len[p->n] = n;
    p->first[p->n] = first;
    MF_TRY(tk_buf_put(&p->buf, s, n));
    p->n++;
    return MF_OK;
}

// ---- regexes ----------------------------------------------------------------------------------
// Regexes run with UTF + UCP, so \s, \w, \p{L}, \p{N} are Unicode-aware as
// in HF's Oniguruma, and with MATCH_INVALID_UTF so that text that is not
// UTF-8 is matched around (invalid bytes never match and end up in the gaps).
// HF's regexes run on Oniguruma, whose Unicode \s is the White_Space property
// and \w is Letter | Mark | Decimal_Number | Connector_Punctuation. PCRE2's
// UCP classes differ at the edges (its \s takes U+180E, its \w no marks), so
// \s \S \w \W are spelled out; inside a [...] class \s and \w are (\S and
// \W there stay PCRE2's own).
#define WS_SET "\\t-\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define WORD_SET "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"

static mf_status rewrite_classes(const char *pat, int64_t len, tk_buf *out) {
    bool in_class = false;
    for (int64_t i = 0; i < len; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < len) {
            char e = pat[i + 1];
            const char *set = e == 's' || e == 'S' ? WS_SET : e == 'w' || e == 'W' ? WORD_SET : NULL;
            bool neg = e == 'S' || e == 'W';
            if (e == 'Q') { // \Q...\E: copied as is
                int64_t j = i + 2;
                while (j + 1 < len && !(pat[j] == '\\' && pat[j + 1] == 'E')) j++;
                j = j + 1 < len ? j + 2 : len;
                MF_TRY(tk_buf_put(out, pat + i, j - i));
                i = j - 1;
            } else if (set && !in_class) {
                MF_TRY(tk_buf_put(out, neg ? "[^" : "[", neg ? 2 : 1));
                MF_TRY(tk_buf_put(out, set, (int64_t)strlen(set)));
                MF_TRY(tk_buf_put(out, "]", 1));
                i++;
            } else if (set && !neg) {
                MF_TRY(tk_buf_put(out, set, (int64_t)strlen(set)));
                i++;
            } else {
                MF_TRY(tk_buf_put(out, pat + i, 2));
                i++;
            }
            continue;
        }
        if (!in_class && c == '[') {
            // A ']' right after "[" or "[^" is a literal member.
            int64_t j = i + 1;
            if (j < len && pat[j] == '^') j++;
            if (j < len && pat[j] == ']') j++;
            MF_TRY(tk_buf_put(out, pat + i, j - i));
            i = j - 1;
            in_class = true;
            continue;
        }
        if (in_class && c == '[' && i + 1 < len && pat[i + 1] == ':') { // [:alpha:]
            const char *end = strstr(pat + i + 2, ":]");
            int64_t j = end && end - pat < len ? (int64_t)(end - pat) + 2 : i + 1;
            MF_TRY(tk_buf_put(out, pat + i, j - i));
            i = j - 1;
            continue;
        }
        if (in_class && c == ']') in_class = false;
        MF_TRY(tk_buf_put(out, &c, 1));
    }
    return MF_OK;
}

mf_status tk_regex_compile(const char *pat, int64_t len, bool literal, const char *what, pcre2_code **out) {
    int err = 0;
    PCRE2_SIZE at = 0;
    *out = NULL;
    uint32_t flags = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP); // LITERAL refuses UCP
    tk_buf rw = {0};
    if (!literal) {
        mf_status st = rewrite_classes(pat, len, &rw);
        if (st != MF_OK) {
            free(rw.p);
            return st;
        }
    }
    const char *p = literal ? pat : rw.p;
    *out = pcre2_compile((PCRE2_SPTR)(p ? p : ""), (PCRE2_SIZE)(literal ? len : rw.len), flags, &err, &at, NULL);
    free(rw.p);
    if (!*out) {
        if (err == PCRE2_ERROR_NOMEMORY) return mf_fail(MF_ERR_OOM, "tokenizer: out of memory compiling %s", what);
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        (void)at; // an offset into the rewritten pattern would mislead
        return mf_fail(MF_ERR_FORMAT, "tokenizer: %s: regex /%.*s/ does not compile: %s", what,
                       (int)(len < 200 ? len : 200), pat, (const char *)msg);
    }
    pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE); // optional: the interpreter runs when JIT is unavailable
    return MF_OK;
}

bool tk_regex_next(const pcre2_code *re, pcre2_match_data *md, const char *s, int64_t n, int64_t start,
                   int64_t *ms, int64_t *me, mf_status *st) {
    *st = MF_OK;
    while (start <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, (PCRE2_SIZE)n, (PCRE2_SIZE)start, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) return false;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            *st = mf_fail(rc == PCRE2_ERROR_NOMEMORY ? MF_ERR_OOM : MF_ERR_UNSUPPORTED,
                          "tokenizer: regex match failed at byte %lld of a %lld-byte piece: %s", (long long)start,
                          (long long)n, (const char *)msg);
            return false;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] > ov[0]) {
            *ms = (int64_t)ov[0];
            *me = (int64_t)ov[1];
            return true;
        }
        // An empty match splits nothing: look again one character further on.
        if ((int64_t)ov[0] >= n) return false;
        start = (int64_t)ov[0] + tk_utf8_len((const unsigned char *)s + ov[0], n - (int64_t)ov[0]);
    }
    return false;
}

// ---- tokenizer.json fields ----------------------------------------------------------------------

const char *tk_json_str(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

mf_status tk_json_bool(const cJSON *obj, const char *key, bool dflt, const char *what, bool *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return MF_OK;
    }
    if (!cJSON_IsBool(v)) return mf_fail(MF_ERR_FORMAT, "tokenizer: %s: \"%s\" must be true or false", what, key);
    *out = cJSON_IsTrue(v);
    return MF_OK;
}

// One UTF-8 character (Metaspace replacement, Strip content) into out[8].
mf_status tk_parse_char(const cJSON *obj, const char *key, const char *dflt, const char *what, char out[8], int *len) {
    const char *s = tk_json_str(obj, key);
    if (!s) s = dflt;
    int64_t n = (int64_t)strlen(s);
    if (n == 0 || n > 4 || tk_utf8_len((const unsigned char *)s, n) != n)
        return mf_fail(MF_ERR_FORMAT, "tokenizer: %s: \"%s\" must be one character, got \"%s\"", what, key, s);
    memcpy(out, s, (size_t)n);
    *len = (int)n;
    return MF_OK;
}
