// Normalizers: Prepend, Replace and NFC (a Sequence is flattened at load).
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/tok.h"

static mf_status dup_str(const char *s, const char *what, char **out, int64_t *len) {
    size_t n = strlen(s);
    *out = mf_malloc(n + 1);
    if (!*out) return mf_fail(MF_ERR_OOM, "tokenizer: out of memory copying %s", what);
    memcpy(*out, s, n + 1);
    *len = (int64_t)n;
    return MF_OK;
}

// {"String": "..."} or {"Regex": "..."} -> a compiled pattern.
static mf_status parse_pattern(const cJSON *pat, const char *what, pcre2_code **re) {
    const char *lit = tk_json_str(pat, "String"), *rx = tk_json_str(pat, "Regex");
    if (!lit && !rx) return mf_fail(MF_ERR_FORMAT, "tokenizer: %s: \"pattern\" must be {\"String\": ...} or {\"Regex\": ...}", what);
    const char *p = lit ? lit : rx;
    return tk_regex_compile(p, (int64_t)strlen(p), lit != NULL, what, re);
}

static mf_status grow(tk_norm **v, int32_t *n) {
    tk_norm *p = tk_realloc(*v, (size_t)(*n + 1) * sizeof *p);
    if (!p) return mf_fail(MF_ERR_OOM, "tokenizer: out of memory for normalizers");
    *v = p;
    memset(&p[*n], 0, sizeof p[*n]);
    return MF_OK;
}

mf_status tk_norm_parse(const cJSON *j, tk_norm **v, int32_t *n) {
    if (!j || cJSON_IsNull(j)) return MF_OK;
    const char *type = tk_json_str(j, "type");
    if (!type) return mf_fail(MF_ERR_FORMAT, "tokenizer: normalizer has no \"type\"");
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "normalizers"), *e;
        if (!cJSON_IsArray(list)) return mf_fail(MF_ERR_FORMAT, "tokenizer: Sequence normalizer has no \"normalizers\" list");
        cJSON_ArrayForEach(e, list) MF_TRY(tk_norm_parse(e, v, n));
        return MF_OK;
    }
    if (strcmp(type, "Prepend") == 0) {
        const char *s = tk_json_str(j, "prepend");
        if (!s) return mf_fail(MF_ERR_FORMAT, "tokenizer: Prepend normalizer has no \"prepend\" string");
        MF_TRY(grow(v, n));
        tk_norm *t = &(*v)[*n];
        t->kind = TK_NORM_PREPEND;
        MF_TRY(dup_str(s, "Prepend normalizer", &t->text, &t->text_len));
        (*n)++;
        return MF_OK;
    }
    if (strcmp(type, "Replace") == 0) {
        const char *s = tk_json_str(j, "content");
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        if (!s || !cJSON_IsObject(pat))
            return mf_fail(MF_ERR_FORMAT, "tokenizer: Replace normalizer needs \"pattern\" and \"content\"");
        MF_TRY(grow(v, n));
        tk_norm *t = &(*v)[*n];
        t->kind = TK_NORM_REPLACE;
        (*n)++; // counted now so that tk_norms_free releases what follows on failure
        MF_TRY(dup_str(s, "Replace normalizer", &t->text, &t->text_len));
        return parse_pattern(pat, "Replace normalizer", &t->re);
    }
    if (strcmp(type, "NFC") == 0) {
        MF_TRY(grow(v, n));
        (*v)[*n].kind = TK_NORM_NFC;
        (*n)++;
        return MF_OK;
    }
    return mf_fail(MF_ERR_UNSUPPORTED,
                   "tokenizer: normalizer type \"%s\" is not supported (supported: Sequence, Prepend, Replace, NFC)", type);
}

void tk_norms_free(tk_norm *v, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        free(v[i].text);
        pcre2_code_free(v[i].re);
    }
    free(v);
}

mf_status tk_normalize(const tk_norm *v, int32_t count, pcre2_match_data *md, const char *s, int64_t n, tk_buf *out) {
    out->len = 0;
    MF_TRY(tk_buf_put(out, s, n));
    tk_buf tmp = {0};
    mf_status st = MF_OK;
    for (int32_t k = 0; k < count && st == MF_OK; k++) {
        const tk_norm *t = &v[k];
        if (out->len == 0) continue; // HF: Prepend leaves an empty string empty; Replace has nothing to do
        tmp.len = 0;
        if (t->kind == TK_NORM_NFC) {
            st = tk_nfc(out->p, out->len, &tmp);
        } else if (t->kind == TK_NORM_PREPEND) {
            st = tk_buf_put(&tmp, t->text, t->text_len);
            if (st == MF_OK) st = tk_buf_put(&tmp, out->p, out->len);
        } else {
            int64_t pos = 0, ms, me;
            while (st == MF_OK && tk_regex_next(t->re, md, out->p, out->len, pos, &ms, &me, &st)) {
                st = tk_buf_put(&tmp, out->p + pos, ms - pos);
                if (st == MF_OK) st = tk_buf_put(&tmp, t->text, t->text_len);
                pos = me;
            }
            if (st == MF_OK) st = tk_buf_put(&tmp, out->p + pos, out->len - pos);
        }
        if (st == MF_OK) st = tk_check_growth(n, tmp.len, "normalizers");
        if (st == MF_OK) {
            tk_buf sw = *out;
            *out = tmp;
            tmp = sw;
        }
    }
    free(tmp.p);
    return st;
}
