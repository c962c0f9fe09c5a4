#include "server/utf8.h"

// Unicode Table 3-7 (well-formed UTF-8 byte sequences): the range of the
// second byte depends on the first; later bytes are 80..BF.
size_t mf_srv_utf8_char(const unsigned char *s, size_t n, size_t *bad) {
    size_t dummy;
    if (!bad) bad = &dummy;
    *bad = 1;
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0; // 80..C1, F5..FF never start a character
    }
    for (size_t k = 1; k < need; k++) {
        unsigned d = k < n ? s[k] : 0x100;
        unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (d < l || d > h) {
            *bad = k;
            return 0;
        }
    }
    return need;
}

bool mf_srv_utf8_valid(const char *s, size_t n, size_t *bad_at) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = mf_srv_utf8_char(u + i, n - i, NULL);
        if (!k) {
            if (bad_at) *bad_at = i;
            return false;
        }
        i += k;
    }
    return true;
}

void mf_srv_utf8_append(mf_sbuf *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t run = 0; // start of the current well-formed run
    for (size_t i = 0; i < n;) {
        size_t bad;
        size_t k = mf_srv_utf8_char(u + i, n - i, &bad);
        if (k) {
            i += k;
            continue;
        }
        mf_sbuf_put(b, s + run, i - run);
        mf_sbuf_put(b, "\xEF\xBF\xBD", 3);
        i += bad;
        run = i;
    }
    mf_sbuf_put(b, s + run, n - run);
}

size_t mf_srv_utf8_count(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t count = 0;
    for (size_t i = 0; i < n; count++) {
        size_t bad;
        size_t k = mf_srv_utf8_char(u + i, n - i, &bad);
        i += k ? k : bad;
    }
    return count;
}
