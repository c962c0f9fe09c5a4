// Growable buffers, UTF-8, and the GPT-2 byte <-> unicode map.
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
