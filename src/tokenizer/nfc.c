// Unicode NFC for the "NFC" normalizer (Qwen2, Qwen-MoE tokenizers).
//
// Quick check first: text with no code point of tk_nfc_unsafe is already NFC
// and is copied as is (ASCII, most CJK, precomposed Latin). Otherwise the
// whole text goes through the three steps of UAX #15: full canonical
// decomposition (Hangul algorithmically), canonical ordering of combining
// marks (stable, by combining class), canonical composition. Bytes that are
// not UTF-8 pass through unchanged: they act as starters that never compose.
#include <stdlib.h>
#include <string.h>

#include "tokenizer/nfc.h"
#include "tokenizer/tok.h"

enum {
    HANGUL_S = 0xAC00, HANGUL_L = 0x1100, HANGUL_V = 0x1161, HANGUL_T = 0x11A7,
    HANGUL_LN = 19, HANGUL_VN = 21, HANGUL_TN = 28, HANGUL_NN = 21 * 28, HANGUL_SN = 19 * 21 * 28,
};

static const tk_nfc_range *find_range(const tk_nfc_range *v, int32_t n, int32_t cp) {
    int32_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        int32_t mid = (lo + hi) / 2;
        if (cp < v[mid].first) hi = mid - 1;
        else if (cp > v[mid].last) lo = mid + 1;
        else return &v[mid];
    }
    return NULL;
}

// Canonical combining class; 0 for starters and for raw bytes (< 0).
static int ccc(int32_t cp) {
    if (cp < 0x300) return 0;
    const tk_nfc_range *r = find_range(tk_nfc_ccc, tk_nfc_n_ccc, cp);
    return r ? r->value : 0;
}

static const tk_nfc_decomp_entry *find_decomp(int32_t cp) {
    int32_t lo = 0, hi = tk_nfc_n_decomp - 1;
    while (lo <= hi) {
        int32_t mid = (lo + hi) / 2;
        if (cp < tk_nfc_decomp[mid].cp) hi = mid - 1;
        else if (cp > tk_nfc_decomp[mid].cp) lo = mid + 1;
        else return &tk_nfc_decomp[mid];
    }
    return NULL;
}

// Primary composite of (a, b), or -1.
static int32_t compose(int32_t a, int32_t b) {
    if (a >= HANGUL_L && a < HANGUL_L + HANGUL_LN && b >= HANGUL_V && b < HANGUL_V + HANGUL_VN)
        return HANGUL_S + ((a - HANGUL_L) * HANGUL_VN + (b - HANGUL_V)) * HANGUL_TN;
    if (a >= HANGUL_S && a < HANGUL_S + HANGUL_SN && (a - HANGUL_S) % HANGUL_TN == 0 && b > HANGUL_T &&
        b < HANGUL_T + HANGUL_TN)
        return a + (b - HANGUL_T);
    int32_t lo = 0, hi = tk_nfc_n_comp - 1;
    while (lo <= hi) {
        int32_t mid = (lo + hi) / 2;
        const tk_nfc_comp_entry *e = &tk_nfc_comp[mid];
        if (a < e->first || (a == e->first && b < e->second)) hi = mid - 1;
        else if (a > e->first || b > e->second) lo = mid + 1;
        else return e->composite;
    }
    return -1;
}

typedef struct {
    int32_t *p;
    int64_t len, cap;
} cps;

static mf_status cps_push(cps *v, int32_t cp) {
    if (v->len == v->cap) {
        int64_t cap = v->cap ? 2 * v->cap : 256;
        int32_t *p = tk_realloc(v->p, (size_t)cap * sizeof *p);
        if (!p) return mf_fail(MF_ERR_OOM, "tokenizer: NFC: out of memory for %lld code points", (long long)cap);
        v->p = p;
        v->cap = cap;
    }
    v->p[v->len++] = cp;
    return MF_OK;
}

// Appends the full canonical decomposition of cp (canonical decompositions
// nest at most a few levels deep).
static mf_status decompose(int32_t cp, cps *out) {
    if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_SN) {
        int32_t s = cp - HANGUL_S, t = s % HANGUL_TN;
        MF_TRY(cps_push(out, HANGUL_L + s / HANGUL_NN));
        MF_TRY(cps_push(out, HANGUL_V + (s % HANGUL_NN) / HANGUL_TN));
        return t ? cps_push(out, HANGUL_T + t) : MF_OK;
    }
    const tk_nfc_decomp_entry *d = cp >= 0xC0 ? find_decomp(cp) : NULL;
    if (!d) return cps_push(out, cp);
    MF_TRY(decompose(d->first, out));
    return d->second ? decompose(d->second, out) : MF_OK;
}

// Stable sort of a run of combining marks by class: insertion sort for the
// usual short runs, counting sort for long ones (no quadratic worst case).
static mf_status order_run(int32_t *v, int64_t n) {
    if (n <= 32) {
        for (int64_t i = 1; i < n; i++) {
            int32_t x = v[i];
            int c = ccc(x);
            int64_t j = i;
            for (; j > 0 && ccc(v[j - 1]) > c; j--) v[j] = v[j - 1];
            v[j] = x;
        }
        return MF_OK;
    }
    int32_t *tmp = tk_realloc(NULL, (size_t)n * sizeof *tmp);
    if (!tmp) return mf_fail(MF_ERR_OOM, "tokenizer: NFC: out of memory ordering %lld marks", (long long)n);
    int64_t start[257] = {0};
    for (int64_t i = 0; i < n; i++) start[ccc(v[i]) + 1]++;
    for (int c = 1; c <= 256; c++) start[c] += start[c - 1];
    for (int64_t i = 0; i < n; i++) tmp[start[ccc(v[i])]++] = v[i];
    memcpy(v, tmp, (size_t)n * sizeof *v);
    free(tmp);
    return MF_OK;
}

static bool is_nfc_quick(const unsigned char *s, int64_t n) {
    for (int64_t i = 0; i < n;) {
        if (s[i] < 0xCC) { // below U+0300 nothing is unsafe (0xCC leads U+0300..U+033F)
            i += s[i] < 0x80 ? 1 : tk_utf8_len(s + i, n - i);
            continue;
        }
        int k = tk_utf8_len(s + i, n - i);
        int32_t cp = tk_utf8_cp(s + i, n - i);
        if (cp >= 0 && find_range(tk_nfc_unsafe, tk_nfc_n_unsafe, cp)) return false;
        i += k;
    }
    return true;
}

mf_status tk_nfc(const char *s, int64_t n, tk_buf *out) {
    out->len = 0;
    const unsigned char *u = (const unsigned char *)s;
    if (is_nfc_quick(u, n)) return tk_buf_put(out, s, n);

    cps d = {0};
    mf_status st = MF_OK;
    // 1. Decompose; a byte b that is not UTF-8 becomes -1 - b.
    for (int64_t i = 0; i < n && st == MF_OK;) {
        int k = tk_utf8_len(u + i, n - i);
        int32_t cp = tk_utf8_cp(u + i, n - i);
        st = cp < 0 ? cps_push(&d, -1 - u[i]) : decompose(cp, &d);
        i += k;
    }
    // 2. Order each run of non-starters.
    for (int64_t i = 0; i < d.len && st == MF_OK;) {
        if (ccc(d.p[i]) == 0) {
            i++;
            continue;
        }
        int64_t j = i;
        while (j < d.len && ccc(d.p[j]) != 0) j++;
        st = order_run(d.p + i, j - i);
        i = j;
    }
    // 3. Compose in place: a mark joins the last starter unless a mark of the
    // same or higher class (or a starter) stands between them.
    int64_t w = 0, starter = -1;
    int last_cc = 0;
    for (int64_t i = 0; i < d.len && st == MF_OK; i++) {
        int32_t c = d.p[i];
        int cc = ccc(c);
        if (starter >= 0 && c >= 0 && (w - 1 == starter || (last_cc != 0 && last_cc < cc))) {
            int32_t comp = compose(d.p[starter], c);
            if (comp >= 0) {
                d.p[starter] = comp;
                continue;
            }
        }
        if (cc == 0) starter = c >= 0 ? w : -1;
        last_cc = cc;
        d.p[w++] = c;
    }
    for (int64_t i = 0; i < w && st == MF_OK; i++) {
        char b[4];
        int k = d.p[i] < 0 ? (b[0] = (char)(-1 - d.p[i]), 1) : tk_utf8_put((uint32_t)d.p[i], b);
        st = tk_buf_put(out, b, k);
    }
    free(d.p);
    return st;
}
