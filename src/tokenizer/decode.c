// The decoder chain (ids -> token texts -> decoders -> bytes) and the
// streaming decoder.
//
// As in HF, each decoder maps a list of token strings to a list of strings;
// the result is their concatenation. Unlike HF, bytes that are not UTF-8
// stay raw (HF's ByteLevel and ByteFallback decoders turn them into U+FFFD).
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/tok.h"

// ---- parsing -------------------------------------------------------------------------------

static mf_status dup_str(const char *s, char **out, int64_t *len) {
    size_t n = strlen(s);
    *out = mf_malloc(n + 1);
    if (!*out) return mf_fail(MF_ERR_OOM, "tokenizer: out of memory copying a decoder string");
    memcpy(*out, s, n + 1);
    *len = (int64_t)n;
    return MF_OK;
}

static mf_status grow(tk_dec **v, int32_t *n, tk_dec_kind kind) {
    tk_dec *p = tk_realloc(*v, (size_t)(*n + 1) * sizeof *p);
    if (!p) return mf_fail(MF_ERR_OOM, "tokenizer: out of memory for decoders");
    *v = p;
    memset(&p[*n], 0, sizeof p[*n]);
    p[*n].kind = kind;
    (*n)++;
    return MF_OK;
}

static mf_status json_count(const cJSON *j, const char *key, const char *what, int32_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) {
        *out = 0;
        return MF_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e6 || v->valuedouble != (double)(int32_t)v->valuedouble)
        return mf_fail(MF_ERR_FORMAT, "tokenizer: %s: \"%s\" must be a count", what, key);
    *out = (int32_t)v->valuedouble;
    return MF_OK;
}

mf_status tk_dec_parse(const cJSON *j, tk_dec **v, int32_t *n) {
    if (!j || cJSON_IsNull(j)) return MF_OK;
    const char *type = tk_json_str(j, "type");
    if (!type) return mf_fail(MF_ERR_FORMAT, "tokenizer: decoder has no \"type\"");
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "decoders"), *e;
        if (!cJSON_IsArray(list)) return mf_fail(MF_ERR_FORMAT, "tokenizer: Sequence decoder has no \"decoders\" list");
        cJSON_ArrayForEach(e, list) MF_TRY(tk_dec_parse(e, v, n));
        return MF_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) return grow(v, n, TK_DEC_BYTE_LEVEL);
    if (strcmp(type, "ByteFallback") == 0) return grow(v, n, TK_DEC_BYTE_FALLBACK);
    if (strcmp(type, "Fuse") == 0) return grow(v, n, TK_DEC_FUSE);
    if (strcmp(type, "Replace") == 0) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        const char *from = tk_json_str(pat, "String"), *to = tk_json_str(j, "content");
        if (tk_json_str(pat, "Regex")) return mf_fail(MF_ERR_UNSUPPORTED, "tokenizer: Replace decoder with a Regex pattern is not supported");
        if (!from || !to) return mf_fail(MF_ERR_FORMAT, "tokenizer: Replace decoder needs \"pattern\": {\"String\": ...} and \"content\"");
        if (!from[0]) return mf_fail(MF_ERR_FORMAT, "tokenizer: Replace decoder: empty pattern");
        MF_TRY(grow(v, n, TK_DEC_REPLACE));
        tk_dec *d = &(*v)[*n - 1];
        MF_TRY(dup_str(from, &d->from, &d->from_len));
        return dup_str(to, &d->to, &d->to_len);
    }
    if (strcmp(type, "Strip") == 0) {
        MF_TRY(grow(v, n, TK_DEC_STRIP));
        tk_dec *d = &(*v)[*n - 1];
        MF_TRY(tk_parse_char(j, "content", " ", "Strip decoder", d->strip_ch, &d->strip_ch_len));
        MF_TRY(json_count(j, "start", "Strip decoder", &d->strip_start));
        return json_count(j, "stop", "Strip decoder", &d->strip_stop);
    }
    if (strcmp(type, "Metaspace") == 0) {
        MF_TRY(grow(v, n, TK_DEC_METASPACE));
        tk_dec *d = &(*v)[*n - 1];
        MF_TRY(tk_parse_char(j, "replacement", "\xE2\x96\x81", "Metaspace decoder", d->repl, &d->repl_len));
        const char *scheme = tk_json_str(j, "prepend_scheme");
        const cJSON *aps = cJSON_GetObjectItemCaseSensitive(j, "add_prefix_space");
        d->strip_first = scheme ? strcmp(scheme, "never") != 0 : !cJSON_IsFalse(aps);
        return MF_OK;
    }
    return mf_fail(MF_ERR_UNSUPPORTED,
                   "tokenizer: decoder type \"%s\" is not supported (supported: Sequence, ByteLevel, Replace, "
                   "ByteFallback, Fuse, Strip, Metaspace)",
                   type);
}

void tk_decs_free(tk_dec *v, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        free(v[i].from);
        free(v[i].to);
    }
    free(v);
}

// ---- the chain ------------------------------------------------------------------------------

#define PIECE(list, i) ((list)->buf.p + (list)->off[i])

// "<0xNN>" (either case of hex digit) -> the byte, else -1.
static int byte_token(const char *s, int64_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

// Appends to the last piece of out (which ends its buffer).
static mf_status extend_last(tk_pieces *out, const char *s, int64_t n) {
    MF_TRY(tk_buf_put(&out->buf, s, n));
    out->len[out->n - 1] += n;
    return MF_OK;
}

// Decoders keep empty tokens (a token's index matters to Metaspace).
static mf_status start_piece(tk_pieces *out) { return tk_pieces_start(out, false); }

// One token's characters mapped back to bytes into out[0..n) (never longer
// than the token); a token with a character outside the byte map stays as it is.
static int64_t byte_level_token(const char *tok_text, int64_t n, char *out) {
    const unsigned char *s = (const unsigned char *)tok_text;
    int64_t w = 0;
    for (int64_t k = 0; k < n;) {
        int b = tk_cp_byte(tk_utf8_cp(s + k, n - k));
        if (b < 0) {
            memcpy(out, tok_text, (size_t)n);
            return n;
        }
        out[w++] = (char)b;
        k += tk_utf8_len(s + k, n - k);
    }
    return w;
}

// Every token through byte_level_token, all fused into one piece.
static mf_status dec_byte_level(const tk_pieces *in, tk_pieces *out) {
    MF_TRY(start_piece(out));
    for (int64_t i = 0; i < in->n; i++) {
        MF_TRY(tk_buf_reserve(&out->buf, in->len[i]));
        int64_t w = byte_level_token(PIECE(in, i), in->len[i], out->buf.p + out->buf.len);
        out->buf.len += w;
        out->buf.p[out->buf.len] = '\0';
        out->len[out->n - 1] += w;
    }
    return MF_OK;
}

// Whether the text a token adds in the middle of a sequence can be had from
// a window that starts at the previous token, decoded as if it began the
// sequence: true when what a decoder does at the start of a sequence stays
// inside the window's first token and no step matches text across tokens
// (patterns of one UTF-8 character are fine: the stream never cuts inside a
// character). GPT-2/Llama-3/Qwen (ByteLevel), Llama-2/Mistral (Replace,
// ByteFallback, Fuse, Strip start=1) and Metaspace chains are; e.g. Strip
// with start=2 after Fuse is not ("a", " ", " ", "a" would stream "a a").
static bool stream_local(const mf_tokenizer *tok) {
    bool multi = false;     // a piece may span tokens (after ByteLevel, ByteFallback or Fuse)
    bool fused = false;     // one piece holds all the text (after ByteLevel or Fuse)
    bool may_empty = false; // a token may decode to nothing, letting a Strip reach past it
    for (int64_t id = 0; id < tok->n_ids && !may_empty; id++) may_empty = tok->id_text[id] && tok->id_len[id] == 0;
    for (int32_t k = 0; k < tok->n_decs; k++) {
        const tk_dec *d = &tok->decs[k];
        const unsigned char *from = (const unsigned char *)d->from;
        switch (d->kind) {
        case TK_DEC_BYTE_LEVEL: // a piece with a character outside the byte map stays as it is
            if (multi) return false;
            multi = fused = true;
            break;
        case TK_DEC_BYTE_FALLBACK: // "<0xNN>" could be spelled across tokens
            if (multi) return false;
            multi = true;
            break;
        case TK_DEC_FUSE: multi = fused = true; break;
        case TK_DEC_REPLACE:
            if (multi && (tk_utf8_len(from, d->from_len) != d->from_len || tk_utf8_cp(from, d->from_len) < 0)) return false;
            may_empty |= d->to_len == 0;
            break;
        case TK_DEC_STRIP:
            if (multi && (d->strip_start > (may_empty ? 0 : 1) || d->strip_stop > 1)) return false;
            may_empty |= d->strip_start > 0 || d->strip_stop > 0;
            break;
        case TK_DEC_METASPACE: // drops the replacement in piece 0: a byte run could reach past the first token
            if (multi && !fused) return false;
            may_empty |= d->strip_first;
            break;
        }
    }
    return true;
}

mf_status tk_dec_prepare(mf_tokenizer *tok) {
    tok->stream_local = stream_local(tok);
    if (tok->n_decs == 0 || tok->decs[0].kind != TK_DEC_BYTE_LEVEL) return MF_OK;
    int64_t bytes = 0;
    for (int64_t id = 0; id < tok->n_ids; id++) bytes += tok->id_text[id] ? tok->id_len[id] : 0;
    tok->bl_pool = mf_malloc((size_t)bytes + 1);
    tok->bl_off = mf_calloc((size_t)tok->n_ids, sizeof *tok->bl_off);
    tok->bl_len = mf_calloc((size_t)tok->n_ids, sizeof *tok->bl_len);
    if (!tok->bl_pool || !tok->bl_off || !tok->bl_len)
        return mf_fail(MF_ERR_OOM, "tokenizer: out of memory for the byte-level decode table (%lld bytes)", (long long)bytes);
    int64_t w = 0;
    for (int64_t id = 0; id < tok->n_ids; id++) {
        if (!tok->id_text[id]) continue;
        tok->bl_off[id] = w;
        tok->bl_len[id] = (int32_t)byte_level_token(tok->id_text[id], tok->id_len[id], tok->bl_pool + w);
        w += tok->bl_len[id];
    }
    return MF_OK;
}

static mf_status dec_replace(const tk_dec *d, const tk_pieces *in, tk_pieces *out) {
    for (int64_t i = 0; i < in->n; i++) {
        const char *s = PIECE(in, i);
        int64_t n = in->len[i];
        MF_TRY(start_piece(out));
        for (int64_t k = 0; k < n;) {
            if (n - k >= d->from_len && memcmp(s + k, d->from, (size_t)d->from_len) == 0) {
                MF_TRY(extend_last(out, d->to, d->to_len));
                k += d->from_len;
            } else {
                MF_TRY(extend_last(out, s + k, 1));
                k++;
            }
        }
    }
    return MF_OK;
}

// A run of <0xNN> tokens becomes one piece of those bytes.
static mf_status dec_byte_fallback(const tk_pieces *in, tk_pieces *out) {
    bool in_run = false;
    for (int64_t i = 0; i < in->n; i++) {
        int b = byte_token(PIECE(in, i), in->len[i]);
        if (b < 0) {
            MF_TRY(start_piece(out));
            MF_TRY(extend_last(out, PIECE(in, i), in->len[i]));
            in_run = false;
            continue;
        }
        if (!in_run) MF_TRY(start_piece(out));
        char c = (char)b;
        MF_TRY(extend_last(out, &c, 1));
        in_run = true;
    }
    return MF_OK;
}

static mf_status dec_fuse(const tk_pieces *in, tk_pieces *out) {
    MF_TRY(start_piece(out));
    for (int64_t i = 0; i < in->n; i++) MF_TRY(extend_last(out, PIECE(in, i), in->len[i]));
    return MF_OK;
}

// Up to strip_start leading and strip_stop trailing copies of the character, per token.
static mf_status dec_strip(const tk_dec *d, const tk_pieces *in, tk_pieces *out) {
    int64_t c = d->strip_ch_len;
    for (int64_t i = 0; i < in->n; i++) {
        const char *s = PIECE(in, i);
        int64_t a = 0, b = in->len[i];
        for (int32_t k = 0; k < d->strip_start && b - a >= c && memcmp(s + a, d->strip_ch, (size_t)c) == 0; k++) a += c;
        for (int32_t k = 0; k < d->strip_stop && b - a >= c && memcmp(s + b - c, d->strip_ch, (size_t)c) == 0; k++) b -= c;
        MF_TRY(start_piece(out));
        MF_TRY(extend_last(out, s + a, b - a));
    }
    return MF_OK;
}

// The replacement -> ' ', except in the first token where HF drops it
// altogether (unless prepend_scheme is "never").
static mf_status dec_metaspace(const tk_dec *d, const tk_pieces *in, tk_pieces *out) {
    int64_t r = d->repl_len;
    for (int64_t i = 0; i < in->n; i++) {
        const char *s = PIECE(in, i);
        int64_t n = in->len[i];
        MF_TRY(start_piece(out));
        for (int64_t k = 0; k < n;) {
            if (n - k >= r && memcmp(s + k, d->repl, (size_t)r) == 0) {
                if (!(i == 0 && d->strip_first)) MF_TRY(extend_last(out, " ", 1));
                k += r;
            } else {
                MF_TRY(extend_last(out, s + k, 1));
                k++;
            }
        }
    }
    return MF_OK;
}

mf_status tk_decode_into(const mf_tokenizer *tok, const int32_t *ids, int64_t n, tk_buf *out) {
    tk_pieces a = {0}, b = {0};
    mf_status st = MF_OK;
    int32_t k0 = 0; // first decoder still to run
    if (tok->bl_len) { // ByteLevel first: its output is the tokens' precomputed bytes, fused
        k0 = 1;
        st = start_piece(&a);
        for (int64_t i = 0; i < n && st == MF_OK; i++)
            st = extend_last(&a, tok->bl_pool + tok->bl_off[ids[i]], tok->bl_len[ids[i]]);
    }
    for (int64_t i = 0; i < n && st == MF_OK && k0 == 0; i++) {
        st = start_piece(&a);
        if (st == MF_OK) st = extend_last(&a, tok->id_text[ids[i]], tok->id_len[ids[i]]);
    }
    int64_t bytes = a.buf.len; // the tokens' text (after ByteLevel when k0 == 1)
    for (int32_t k = k0; k < tok->n_decs && st == MF_OK; k++) {
        const tk_dec *d = &tok->decs[k];
        tk_pieces_clear(&b);
        switch (d->kind) {
        case TK_DEC_BYTE_LEVEL: st = dec_byte_level(&a, &b); break;
        case TK_DEC_REPLACE: st = dec_replace(d, &a, &b); break;
        case TK_DEC_BYTE_FALLBACK: st = dec_byte_fallback(&a, &b); break;
        case TK_DEC_FUSE: st = dec_fuse(&a, &b); break;
        case TK_DEC_STRIP: st = dec_strip(d, &a, &b); break;
        case TK_DEC_METASPACE: st = dec_metaspace(d, &a, &b); break;
        }
        if (st == MF_OK) st = tk_check_growth(bytes, b.buf.len, "decoders");
        tk_pieces t = a;
        a = b;
        b = t;
    }
    out->len = 0;
    if (st == MF_OK) st = tk_buf_put(out, "", 0); // allocated and NUL-terminated even when empty
    for (int64_t i = 0; i < a.n && st == MF_OK; i++) st = tk_buf_put(out, PIECE(&a, i), a.len[i]);
    tk_pieces_free(&a);
    tk_pieces_free(&b);
    return st;
}

// ---- streaming ------------------------------------------------------------------------------

struct mf_tokenizer_stream {
    const mf_tokenizer *tok;
    tk_ids win;   // ids since the last point where all text was complete (first: one id of context);
                  // every id since the start when !tok->stream_local
    tk_buf prev;  // decode(win) before the latest push
    tk_buf text;  // decode(win)
    int64_t done; // bytes of decode(win) already emitted (or belonging to the context)
    tk_buf out;   // what the last call returned
};

// Bytes at the end of s[0..n) that begin a UTF-8 character still missing
// bytes (0 when the text ends on a complete character or on bytes that can
// never become one).
static int64_t incomplete_tail(const unsigned char *s, int64_t n) {
    for (int64_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = s[n - k];
        if ((c & 0xC0) == 0x80) continue; // a continuation byte: look further back
        int need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (need <= k) return 0;
        // A prefix that can still complete: check the second byte's range too.
        if (k >= 2) {
            unsigned char d = s[n - k + 1];
            if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F) || (c == 0xF0 && d < 0x90) || (c == 0xF4 && d > 0x8F))
                return 0;
        }
        return k;
    }
    return 0;
}

static mf_status check_id(const mf_tokenizer *tok, int32_t id, const char *what) {
    if (id < 0 || id >= tok->n_ids || !tok->id_text[id])
        return mf_fail(MF_ERR_INVALID_ARG, "tokenizer: %s: id %d is not a token (vocab_size %lld)", what, (int)id,
                       (long long)tok->n_ids);
    return MF_OK;
}

// All text so far counts as emitted: the window restarts at its last id
// (when the chain is not stream_local it keeps every id instead).
static mf_status settle(mf_tokenizer_stream *s) {
    if (s->tok->stream_local) {
        s->win.p[0] = s->win.p[s->win.len - 1];
        s->win.len = 1;
    }
    MF_TRY(tk_decode_into(s->tok, s->win.p, s->win.len, &s->prev));
    s->done = s->prev.len;
    return MF_OK;
}

mf_status mf_tokenizer_stream_new(const mf_tokenizer *tok, const int32_t *context, int64_t n_context,
                                  mf_tokenizer_stream **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_stream_new: out is NULL");
    *out = NULL;
    if (!tok) return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_stream_new: tok is NULL");
    if (n_context < 0 || (n_context > 0 && !context))
        return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_stream_new: n_context %lld with context %p", (long long)n_context,
                       (const void *)context);
    for (int64_t i = 0; i < n_context; i++) MF_TRY(check_id(tok, context[i], "tokenizer_stream_new: context"));
    mf_tokenizer_stream *s = mf_calloc(1, sizeof *s);
    if (!s) return mf_fail(MF_ERR_OOM, "tokenizer_stream_new: out of memory");
    s->tok = tok;
    mf_status st = tk_buf_put(&s->out, "", 0);
    for (int64_t i = tok->stream_local && n_context > 0 ? n_context - 1 : 0; i < n_context && st == MF_OK; i++)
        st = tk_ids_push(&s->win, context[i]);
    if (st == MF_OK && n_context > 0) st = settle(s);
    if (st != MF_OK) {
        mf_tokenizer_stream_free(s);
        return st;
    }
    *out = s;
    return MF_OK;
}

mf_status mf_tokenizer_stream_push(mf_tokenizer_stream *s, int32_t id, const char **text, size_t *len) {
    if (!s || !text || !len)
        return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_stream_push: NULL argument (s %p, text %p, len %p)", (void *)s,
                       (void *)text, (void *)len);
    *text = "";
    *len = 0;
    MF_TRY(check_id(s->tok, id, "tokenizer_stream_push"));
    MF_TRY(tk_ids_push(&s->win, id));
    MF_TRY(tk_decode_into(s->tok, s->win.p, s->win.len, &s->text));
    if (s->text.len < s->done || (s->done > 0 && memcmp(s->text.p, s->prev.p, (size_t)s->done) != 0)) {
        s->win.len--;
        return mf_fail(MF_ERR_UNSUPPORTED, "tokenizer_stream_push: the decoder rewrote earlier text at id %d; decode whole sequences instead", (int)id);
    }
    int64_t cut = s->text.len - incomplete_tail((const unsigned char *)s->text.p, s->text.len);
    if (cut < s->done) cut = s->done;
    s->out.len = 0;
    MF_TRY(tk_buf_put(&s->out, s->text.p + s->done, cut - s->done));
    if (cut == s->text.len) {
        MF_TRY(settle(s));
    } else {
        tk_buf t = s->prev;
        s->prev = s->text;
        s->text = t;
        s->done = cut;
    }
    *text = s->out.p;
    *len = (size_t)s->out.len;
    return MF_OK;
}

mf_status mf_tokenizer_stream_flush(mf_tokenizer_stream *s, const char **text, size_t *len) {
    if (!s || !text || !len)
        return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_stream_flush: NULL argument (s %p, text %p, len %p)", (void *)s,
                       (void *)text, (void *)len);
    *text = "";
    *len = 0;
    s->out.len = 0;
    if (s->win.len) { // prev = decode(win); what follows `done` is held
        MF_TRY(tk_buf_put(&s->out, s->prev.p + s->done, s->prev.len - s->done));
        MF_TRY(settle(s));
    }
    *text = s->out.p;
    *len = (size_t)s->out.len;
    return MF_OK;
}

void mf_tokenizer_stream_free(mf_tokenizer_stream *s) {
    if (!s) return;
    free(s->win.p);
    free(s->prev.p);
    free(s->text.p);
    free(s->out.p);
    free(s);
}
