// Pre-tokenizers (Split, ByteLevel, Metaspace): every pre-tokenizer maps
// each piece to zero or more pieces, as HF's do (regexes: text.c).
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/tok.h"

// GPT-2's pre-tokenizer regex (HF ByteLevel with use_regex).
static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// Appends bytes to the last piece (which must exist and end the buffer).
static mf_status pieces_extend(tk_pieces *p, const char *s, int64_t n) {
    MF_TRY(tk_buf_put(&p->buf, s, n));
    p->len[p->n - 1] += n;
    return MF_OK;
}

// ---- Split --------------------------------------------------------------------------------

// Splits s[0..n) at the matches of re. The text is cut into spans, matches
// and the gaps between them; a span is a delimiter when it is a match (with
// invert: when it is not), and the behavior says where delimiters go:
//   Removed              dropped
//   Isolated             a piece of its own
//   MergedWithPrevious   appended to the piece before it, if that is not a delimiter
//   MergedWithNext       prepended to the piece after it, if that is not a delimiter
//   Contiguous           adjacent spans of the same kind form one piece
static mf_status split_piece(const tk_pre *pre, pcre2_match_data *md, const char *s, int64_t n, bool first,
                             tk_pieces *out) {
    int64_t acc = 0;        // start of the piece being built
    bool open = false;      // a piece is being built
    bool can_join = false;  // the next span may join it (see the behaviors)
    bool acc_delim = false; // Contiguous: the open piece is made of delimiters
    int64_t pos = 0;
#define EMIT(end) MF_TRY(tk_pieces_add(out, s + acc, (end) - acc, first && acc == 0))
    while (pos < n) {
        int64_t ms = n, me = n;
        mf_status st = MF_OK;
        bool found = tk_regex_next(pre->re, md, s, n, pos, &ms, &me, &st);
        if (st != MF_OK) return st;
        if (!found) ms = me = n;
        // Up to two spans: the gap [pos, ms) and the match [ms, me).
        for (int k = 0; k < 2; k++) {
            int64_t a = k == 0 ? pos : ms, b = k == 0 ? ms : me;
            if (b <= a) continue;
            bool delim = (k == 1) != pre->invert;
            switch (pre->behavior) {
            case TK_SPLIT_REMOVED:
                if (!delim) MF_TRY(tk_pieces_add(out, s + a, b - a, first && a == 0));
                break;
            case TK_SPLIT_ISOLATED: MF_TRY(tk_pieces_add(out, s + a, b - a, first && a == 0)); break;
            case TK_SPLIT_MERGED_WITH_PREVIOUS:
                if (delim && open && can_join) {
                    EMIT(b);
                    open = false;
                } else {
                    if (open) EMIT(a);
                    acc = a;
                    open = !delim; // a lone delimiter is complete at once
                    can_join = !delim;
                    if (delim) EMIT(b);
                }
                break;
            case TK_SPLIT_MERGED_WITH_NEXT:
                if (!delim && open && can_join) {
                    can_join = false;
                } else {
                    if (open) EMIT(a);
                    acc = a;
                    open = true;
                    can_join = delim;
                }
                break;
            case TK_SPLIT_CONTIGUOUS:
                if (open && acc_delim == delim) break;
                if (open) EMIT(a);
                acc = a;
                acc_delim = delim;
                open = true;
                break;
            }
        }
        pos = me;
    }
    if (open) EMIT(n);
#undef EMIT
    return MF_OK;
}

// ---- ByteLevel ------------------------------------------------------------------------------

// Appends s[0..n) with every byte replaced by its code point of the byte map.
static mf_status put_byte_mapped(tk_pieces *out, const char *s, int64_t n) {
    MF_TRY(tk_buf_reserve(&out->buf, 2 * n));
    for (int64_t i = 0; i < n; i++) {
        char u[4];
        int k = tk_utf8_put((uint32_t)tk_byte_cp((uint8_t)s[i]), u);
        memcpy(out->buf.p + out->buf.len, u, (size_t)k);
        out->buf.len += k;
    }
    out->buf.p[out->buf.len] = '\0';
    return MF_OK;
}

static mf_status byte_level_piece(const tk_pre *pre, pcre2_match_data *md, const char *s, int64_t n, bool first,
                                  tk_pieces *tmp, tk_pieces *out) {
    const char *src = s;
    int64_t len = n;
    if (pre->add_prefix_space && (n == 0 || s[0] != ' ')) {
        tk_pieces_clear(tmp);
        MF_TRY(tk_pieces_add(tmp, " ", 1, first));
        MF_TRY(pieces_extend(tmp, s, n));
        src = tmp->buf.p;
        len = tmp->buf.len;
    }
    int64_t pos = 0;
    while (pos < len) {
        int64_t ms = len, me = len;
        mf_status st = MF_OK;
        if (pre->re) {
            bool found = tk_regex_next(pre->re, md, src, len, pos, &ms, &me, &st);
            if (st != MF_OK) return st;
            if (!found) ms = me = len;
        } else {
            ms = me = len;
        }
        // Isolated: the gap and the match are pieces of their own.
        int64_t cut[3] = {pos, ms, me};
        for (int k = 0; k < 2; k++) {
            if (cut[k + 1] <= cut[k]) continue;
            MF_TRY(tk_pieces_start(out, first && cut[k] == 0));
            MF_TRY(put_byte_mapped(out, src + cut[k], cut[k + 1] - cut[k]));
            out->len[out->n - 1] = out->buf.len - out->off[out->n - 1];
        }
        pos = me;
    }
    return MF_OK;
}

// ---- Metaspace ------------------------------------------------------------------------------

static mf_status metaspace_piece(const tk_pre *pre, const char *s, int64_t n, bool first, tk_pieces *tmp,
                                 tk_pieces *out) {
    // Spaces -> the replacement, then maybe the replacement in front.
    tk_pieces_clear(tmp);
    tk_buf *b = &tmp->buf;
    bool starts = n >= pre->repl_len && memcmp(s, pre->repl, (size_t)pre->repl_len) == 0;
    if (!starts && n > 0 && s[0] == ' ') starts = true; // the space becomes the replacement
    bool prepend = !starts && (pre->scheme == TK_PREPEND_ALWAYS || (pre->scheme == TK_PREPEND_FIRST && first));
    if (prepend) MF_TRY(tk_buf_put(b, pre->repl, pre->repl_len));
    for (int64_t i = 0; i < n; i++) {
        if (s[i] == ' ') MF_TRY(tk_buf_put(b, pre->repl, pre->repl_len));
        else MF_TRY(tk_buf_put(b, s + i, 1));
    }
    if (!pre->split) return tk_pieces_add(out, b->p, b->len, first);
    // MergedWithNext on the replacement: every piece but maybe the first starts with it.
    int64_t acc = 0, rl = pre->repl_len;
    for (int64_t i = 0; i < b->len;) {
        if (b->len - i >= rl && memcmp(b->p + i, pre->repl, (size_t)rl) == 0) {
            if (i > acc) MF_TRY(tk_pieces_add(out, b->p + acc, i - acc, first && acc == 0));
            if (i > acc) acc = i;
            i += rl;
        } else {
            i++;
        }
    }
    return tk_pieces_add(out, b->p + acc, b->len - acc, first && acc == 0);
}

// ---- the chain --------------------------------------------------------------------------------

mf_status tk_pretokenize(const tk_pre *v, int32_t count, pcre2_match_data *md, tk_pieces *in, tk_pieces *out,
                         tk_pieces *scratch) {
    int64_t bytes = 0; // text in the pieces at the start
    for (int64_t i = 0; i < in->n; i++) bytes += in->len[i];
    for (int32_t k = 0; k < count; k++) {
        tk_pieces_clear(out);
        for (int64_t i = 0; i < in->n; i++) {
            const char *s = in->buf.p + in->off[i];
            int64_t n = in->len[i];
            bool first = in->first[i];
            switch (v[k].kind) {
            case TK_PRE_SPLIT: MF_TRY(split_piece(&v[k], md, s, n, first, out)); break;
            case TK_PRE_BYTE_LEVEL: MF_TRY(byte_level_piece(&v[k], md, s, n, first, scratch, out)); break;
            case TK_PRE_METASPACE: MF_TRY(metaspace_piece(&v[k], s, n, first, scratch, out)); break;
            }
        }
        MF_TRY(tk_check_growth(bytes, out->buf.len, "pre-tokenizers"));
        tk_pieces t = *in;
        *in = *out;
        *out = t;
    }
    return MF_OK;
}

// ---- parsing ------------------------------------------------------------------------------------

static mf_status grow(tk_pre **v, int32_t *n) {
    tk_pre *p = tk_realloc(*v, (size_t)(*n + 1) * sizeof *p);
    if (!p) return mf_fail(MF_ERR_OOM, "tokenizer: out of memory for pre-tokenizers");
    *v = p;
    memset(&p[*n], 0, sizeof p[*n]);
    (*n)++; // counted at once so that tk_pres_free releases a half-parsed one
    return MF_OK;
}

static const struct {
    const char *name;
    tk_split_behavior b;
} behaviors[] = {
    {"Removed", TK_SPLIT_REMOVED},
    {"Isolated", TK_SPLIT_ISOLATED},
    {"MergedWithPrevious", TK_SPLIT_MERGED_WITH_PREVIOUS},
    {"MergedWithNext", TK_SPLIT_MERGED_WITH_NEXT},
    {"Contiguous", TK_SPLIT_CONTIGUOUS},
};

static mf_status parse_split(const cJSON *j, tk_pre *t) {
    t->kind = TK_PRE_SPLIT;
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
    const char *lit = tk_json_str(pat, "String"), *rx = tk_json_str(pat, "Regex"), *beh = tk_json_str(j, "behavior");
    if (!lit && !rx)
        return mf_fail(MF_ERR_FORMAT, "tokenizer: Split pre-tokenizer: \"pattern\" must be {\"String\": ...} or {\"Regex\": ...}");
    if (!beh) return mf_fail(MF_ERR_FORMAT, "tokenizer: Split pre-tokenizer has no \"behavior\"");
    size_t k = 0;
    while (k < sizeof behaviors / sizeof behaviors[0] && strcmp(beh, behaviors[k].name) != 0) k++;
    if (k == sizeof behaviors / sizeof behaviors[0])
        return mf_fail(MF_ERR_UNSUPPORTED, "tokenizer: Split pre-tokenizer behavior \"%s\" is not supported", beh);
    t->behavior = behaviors[k].b;
    MF_TRY(tk_json_bool(j, "invert", false, "Split pre-tokenizer", &t->invert));
    const char *p = lit ? lit : rx;
    return tk_regex_compile(p, (int64_t)strlen(p), lit != NULL, "Split pre-tokenizer", &t->re);
}

static mf_status parse_metaspace(const cJSON *j, tk_pre *t) {
    t->kind = TK_PRE_METASPACE;
    MF_TRY(tk_parse_char(j, "replacement", "\xE2\x96\x81", "Metaspace pre-tokenizer", t->repl, &t->repl_len));
    MF_TRY(tk_json_bool(j, "split", true, "Metaspace pre-tokenizer", &t->split));
    const char *scheme = tk_json_str(j, "prepend_scheme");
    if (scheme) {
        if (strcmp(scheme, "always") == 0) t->scheme = TK_PREPEND_ALWAYS;
        else if (strcmp(scheme, "first") == 0) t->scheme = TK_PREPEND_FIRST;
        else if (strcmp(scheme, "never") == 0) t->scheme = TK_PREPEND_NEVER;
        else return mf_fail(MF_ERR_FORMAT, "tokenizer: Metaspace pre-tokenizer: unknown prepend_scheme \"%s\"", scheme);
    } else {
        bool add = true; // older files: "add_prefix_space"
        MF_TRY(tk_json_bool(j, "add_prefix_space", true, "Metaspace pre-tokenizer", &add));
        t->scheme = add ? TK_PREPEND_ALWAYS : TK_PREPEND_NEVER;
    }
    return MF_OK;
}

mf_status tk_pre_parse(const cJSON *j, tk_pre **v, int32_t *n) {
    if (!j || cJSON_IsNull(j)) return MF_OK;
    const char *type = tk_json_str(j, "type");
    if (!type) return mf_fail(MF_ERR_FORMAT, "tokenizer: pre_tokenizer has no \"type\"");
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers"), *e;
        if (!cJSON_IsArray(list)) return mf_fail(MF_ERR_FORMAT, "tokenizer: Sequence pre_tokenizer has no \"pretokenizers\" list");
        cJSON_ArrayForEach(e, list) MF_TRY(tk_pre_parse(e, v, n));
        return MF_OK;
    }
    if (strcmp(type, "Split") == 0) {
        MF_TRY(grow(v, n));
        return parse_split(j, &(*v)[*n - 1]);
    }
    if (strcmp(type, "Digits") == 0) { // = Split on \p{N}: each digit alone, or runs of digits
        MF_TRY(grow(v, n));
        tk_pre *t = &(*v)[*n - 1];
        bool individual = false;
        MF_TRY(tk_json_bool(j, "individual_digits", false, "Digits pre-tokenizer", &individual));
        t->kind = TK_PRE_SPLIT;
        t->behavior = individual ? TK_SPLIT_ISOLATED : TK_SPLIT_CONTIGUOUS;
        return tk_regex_compile("\\p{N}", 5, false, "Digits pre-tokenizer", &t->re);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        MF_TRY(grow(v, n));
        tk_pre *t = &(*v)[*n - 1];
        t->kind = TK_PRE_BYTE_LEVEL;
        bool use_regex = true;
        MF_TRY(tk_json_bool(j, "add_prefix_space", true, "ByteLevel pre-tokenizer", &t->add_prefix_space));
        MF_TRY(tk_json_bool(j, "use_regex", true, "ByteLevel pre-tokenizer", &use_regex));
        if (use_regex)
            MF_TRY(tk_regex_compile(gpt2_regex, (int64_t)strlen(gpt2_regex), false, "ByteLevel pre-tokenizer", &t->re));
        return MF_OK;
    }
    if (strcmp(type, "Metaspace") == 0) {
        MF_TRY(grow(v, n));
        return parse_metaspace(j, &(*v)[*n - 1]);
    }
    return mf_fail(MF_ERR_UNSUPPORTED,
                   "tokenizer: pre_tokenizer type \"%s\" is not supported (supported: Sequence, Split, ByteLevel, Metaspace, Digits)",
                   type);
}

void tk_pres_free(tk_pre *v, int32_t n) {
    for (int32_t i = 0; i < n; i++) pcre2_code_free(v[i].re);
    free(v);
}
