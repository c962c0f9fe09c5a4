// Loading tokenizer.json (+ tokenizer_config.json), the public API, and the
// encode pipeline:
//   text -> split on added tokens (normalized=false, on the raw text)
//        -> each gap: normalizers -> split on added tokens (normalized=true)
//        -> each gap: pre-tokenizers -> pieces -> BPE -> ids
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/fileio.h"
#include "tokenizer/tok.h"

// A token id: a JSON integer in [0, INT32_MAX).
static bool json_id(const cJSON *v, int32_t *id) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d < (double)INT32_MAX) || d != (double)(int32_t)d) return false;
    *id = (int32_t)d;
    return true;
}

// The largest tokenizer.json read (Gemma 3's is 33 MB) and tokenizer_config.json
// (chat templates; as the model loader reads it).
#define TK_MAX_JSON_BYTES ((size_t)256 << 20)
#define TK_MAX_CONFIG_BYTES ((size_t)64 << 20)

// data[0..size) (need not be NUL-terminated) -> a JSON object; the file `name`
// and `what` it holds name it in messages.
static mf_status parse_json(const char *data, size_t size, const char *name, const char *what, cJSON **out) {
    MF_TRY(mf_json_parse(data, size, name, what, out));
    if (cJSON_IsObject(*out)) return MF_OK;
    cJSON_Delete(*out);
    *out = NULL;
    return mf_fail(MF_ERR_FORMAT, "tokenizer: \"%s\": the top level is not a JSON object", name);
}

static mf_status parse_json_file(const char *path, size_t max_bytes, const char *what, cJSON **out) {
    char *data = NULL;
    size_t size = 0;
    *out = NULL;
    MF_TRY(mf_file_read_all(path, max_bytes, &data, &size));
    mf_status st = parse_json(data, size, path, what, out);
    free(data);
    return st;
}

// ---- loading: vocabulary, added tokens, merges ---------------------------------------------------

// Sorts added tokens by first byte, then longest first: the first that
// matches at a position is the longest one.
static int added_cmp(const void *pa, const void *pb) {
    const tk_added *a = pa, *b = pb;
    unsigned ca = (unsigned char)a->match[0], cb = (unsigned char)b->match[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    if (a->match_len != b->match_len) return a->match_len > b->match_len ? -1 : 1;
    return memcmp(a->match, b->match, (size_t)a->match_len);
}

// Tokens with normalized=true are matched in normalized text, so their
// content is normalized too (as HF does); then the lookup index is built.
static mf_status index_added(mf_tokenizer *tok) {
    pcre2_match_data *md = NULL;
    tk_buf buf = {0};
    mf_status st = MF_OK;
    for (int32_t i = 0; i < tok->n_added && st == MF_OK; i++) {
        tk_added *a = &tok->added[i];
        if (!a->normalized || tok->n_norms == 0) continue;
        if (!md && !(md = pcre2_match_data_create(16, NULL))) st = mf_fail(MF_ERR_OOM, "tokenizer: out of memory");
        if (st == MF_OK) st = tk_normalize(tok->norms, tok->n_norms, md, a->text, a->len, &buf);
        if (st == MF_OK && buf.len == 0) st = mf_fail(MF_ERR_FORMAT, "tokenizer: added token \"%s\" normalizes to nothing", a->text);
        if (st == MF_OK && buf.len > INT32_MAX) st = mf_fail(MF_ERR_FORMAT, "tokenizer: added token too long");
        if (st != MF_OK) break;
        a->match_owned = buf.p; // the buffer moves to the token
        a->match = buf.p;
        a->match_len = (int32_t)buf.len;
        tok->id_text[a->id] = a->match; // HF decodes such a token from its normalized form too
        tok->id_len[a->id] = a->match_len;
        memset(&buf, 0, sizeof buf);
    }
    pcre2_match_data_free(md);
    free(buf.p);
    MF_TRY(st);
    qsort(tok->added, (size_t)tok->n_added, sizeof *tok->added, added_cmp);
    for (int b = 0, i = 0; b <= 256; b++) {
        while (i < tok->n_added && (unsigned char)tok->added[i].match[0] < b) i++;
        tok->added_first[b] = i;
    }
    return MF_OK;
}

// Sizes the id tables from the model vocabulary and the added tokens, and
// copies every token text into one pool.
static mf_status load_tables(mf_tokenizer *tok, const cJSON *vocab, const cJSON *added) {
    int64_t n_vocab = 0, bytes = 0, max_id = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id;
        if (!json_id(e, &id))
            return mf_fail(MF_ERR_FORMAT, "tokenizer: model.vocab[\"%s\"] is not a token id (an integer in [0, 2^31-1))",
                           e->string);
        if (id > max_id) max_id = id;
        bytes += (int64_t)strlen(e->string) + 1;
        n_vocab++;
    }
    int64_t n_added = 0;
    cJSON_ArrayForEach(e, added) {
        int32_t id;
        const char *content = tk_json_str(e, "content");
        if (!json_id(cJSON_GetObjectItemCaseSensitive(e, "id"), &id) || !content || !content[0])
            return mf_fail(MF_ERR_FORMAT, "tokenizer: added_tokens[%lld] needs an integer \"id\" and a non-empty \"content\"",
                           (long long)n_added);
        if (id > max_id) max_id = id;
        bytes += (int64_t)strlen(content) + 1;
        n_added++;
    }
    if (max_id < 0) return mf_fail(MF_ERR_FORMAT, "tokenizer: the vocabulary is empty");
    // Ids are dense in practice; refuse tables mostly made of holes.
    if (max_id >= 16 * (n_vocab + n_added) + 1024)
        return mf_fail(MF_ERR_FORMAT, "tokenizer: token id %lld is far beyond the %lld tokens", (long long)max_id,
                       (long long)(n_vocab + n_added));
    tok->n_ids = max_id + 1;
    int64_t n = tok->n_ids;
    tok->pool = mf_malloc((size_t)bytes + 1);
    tok->model_text = mf_calloc((size_t)n, sizeof *tok->model_text);
    tok->model_len = mf_calloc((size_t)n, sizeof *tok->model_len);
    tok->id_text = mf_calloc((size_t)n, sizeof *tok->id_text);
    tok->id_len = mf_calloc((size_t)n, sizeof *tok->id_len);
    tok->id_flags = mf_calloc((size_t)n, sizeof *tok->id_flags);
    tok->added = mf_calloc((size_t)n_added, sizeof *tok->added);
    if (!tok->pool || !tok->model_text || !tok->model_len || !tok->id_text || !tok->id_len || !tok->id_flags || !tok->added)
        return mf_fail(MF_ERR_OOM, "tokenizer: out of memory for %lld tokens (%lld bytes of text)", (long long)n,
                       (long long)bytes);

    char *w = tok->pool;
    MF_TRY(tk_strmap_init(&tok->bpe.vocab, n_vocab, tok->model_text, tok->model_len));
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = (int32_t)e->valuedouble;
        size_t len = strlen(e->string);
        if (tok->model_text[id])
            return mf_fail(MF_ERR_FORMAT, "tokenizer: model.vocab gives id %d to both \"%s\" and \"%s\"", (int)id,
                           tok->model_text[id], e->string);
        memcpy(w, e->string, len + 1);
        tok->model_text[id] = tok->id_text[id] = w;
        tok->model_len[id] = tok->id_len[id] = (int32_t)len;
        w += len + 1;
        if (!tk_strmap_insert(&tok->bpe.vocab, id))
            return mf_fail(MF_ERR_FORMAT, "tokenizer: model.vocab has \"%s\" twice", e->string);
    }
    cJSON_ArrayForEach(e, added) {
        tk_added *a = &tok->added[tok->n_added];
        const char *content = tk_json_str(e, "content");
        bool single_word = false;
        size_t len = strlen(content);
        a->id = (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
        memcpy(w, content, len + 1);
        a->text = w;
        a->match = w;
        a->len = a->match_len = (int32_t)len;
        w += len + 1;
        MF_TRY(tk_json_bool(e, "special", false, "added_tokens", &a->special));
        MF_TRY(tk_json_bool(e, "normalized", !a->special, "added_tokens", &a->normalized));
        MF_TRY(tk_json_bool(e, "lstrip", false, "added_tokens", &a->lstrip));
        MF_TRY(tk_json_bool(e, "rstrip", false, "added_tokens", &a->rstrip));
        MF_TRY(tk_json_bool(e, "single_word", false, "added_tokens", &single_word));
        if (single_word)
            return mf_fail(MF_ERR_UNSUPPORTED, "tokenizer: added token \"%s\" has single_word=true (not supported)", content);
        tok->n_added++;
        tok->id_text[a->id] = a->text; // an added token decodes from its content
        tok->id_len[a->id] = a->len;
        tok->id_flags[a->id] |= TK_ID_ADDED | (a->special ? TK_ID_SPECIAL : 0);
        if (a->normalized) tok->any_normalized_added = true;
    }
    return MF_OK;
}

// One merge: "a b" or ["a", "b"] -> the two parts (a is copied into buf).
static mf_status merge_parts(const cJSON *m, int64_t rank, tk_buf *buf, int64_t *a_len, const char **b) {
    const char *s = NULL;
    buf->len = 0;
    if (cJSON_IsString(m)) {
        s = m->valuestring;
        const char *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return mf_fail(MF_ERR_FORMAT, "tokenizer: model.merges[%lld] \"%s\" is not two tokens separated by one space",
                           (long long)rank, s);
        MF_TRY(tk_buf_put(buf, s, sp - s));
        *b = sp + 1;
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
               cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
        s = cJSON_GetArrayItem(m, 0)->valuestring;
        MF_TRY(tk_buf_put(buf, s, (int64_t)strlen(s)));
        *b = cJSON_GetArrayItem(m, 1)->valuestring;
    } else {
        return mf_fail(MF_ERR_FORMAT, "tokenizer: model.merges[%lld] is neither \"a b\" nor [\"a\", \"b\"]", (long long)rank);
    }
    *a_len = buf->len;
    return MF_OK;
}

static mf_status load_merges(mf_tokenizer *tok, const cJSON *merges) {
    int64_t count = cJSON_GetArraySize(merges);
    MF_TRY(tk_pairmap_init(&tok->bpe.merges, count));
    tk_buf buf = {0};
    mf_status st = MF_OK;
    int64_t rank = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        int64_t a_len = 0;
        const char *b = NULL;
        st = merge_parts(m, rank, &buf, &a_len, &b);
        if (st != MF_OK) break;
        int32_t ia = tk_strmap_get(&tok->bpe.vocab, buf.p, a_len);
        int32_t ib = tk_strmap_get(&tok->bpe.vocab, b, (int64_t)strlen(b));
        st = tk_buf_put(&buf, b, (int64_t)strlen(b));
        if (st != MF_OK) break;
        int32_t im = tk_strmap_get(&tok->bpe.vocab, buf.p, buf.len);
        if (ia < 0 || ib < 0 || im < 0) {
            const char *what = ia < 0 ? "left part" : ib < 0 ? "right part" : "merged token";
            st = mf_fail(MF_ERR_FORMAT, "tokenizer: model.merges[%lld] (\"%.*s\", \"%s\"): the %s is not in the vocabulary",
                         (long long)rank, (int)a_len, buf.p, b, what);
            break;
        }
        tk_pairmap_insert(&tok->bpe.merges, ia, ib, (int32_t)rank, im);
        rank++;
    }
    free(buf.p);
    return st;
}

static mf_status load_model(mf_tokenizer *tok, const cJSON *model, const cJSON *added) {
    if (!cJSON_IsObject(model)) return mf_fail(MF_ERR_FORMAT, "tokenizer: no \"model\" object");
    const char *type = tk_json_str(model, "type");
    if (type && strcmp(type, "BPE") != 0)
        return mf_fail(MF_ERR_UNSUPPORTED, "tokenizer: model type \"%s\" is not supported (only BPE)", type);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsObject(vocab)) return mf_fail(MF_ERR_FORMAT, "tokenizer: model.vocab is not an object of token -> id");
    if (!cJSON_IsArray(merges)) return mf_fail(MF_ERR_FORMAT, "tokenizer: model.merges is not a list");
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        return mf_fail(MF_ERR_FORMAT, "tokenizer: \"added_tokens\" is not a list");
    const char *prefix = tk_json_str(model, "continuing_subword_prefix"), *suffix = tk_json_str(model, "end_of_word_suffix");
    if ((prefix && prefix[0]) || (suffix && suffix[0]))
        return mf_fail(MF_ERR_UNSUPPORTED, "tokenizer: BPE continuing_subword_prefix \"%s\" / end_of_word_suffix \"%s\" are not supported",
                       prefix ? prefix : "", suffix ? suffix : "");
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble != 0.0)
        return mf_fail(MF_ERR_UNSUPPORTED, "tokenizer: BPE dropout %g is not supported (encoding must be deterministic)",
                       dropout->valuedouble);

    MF_TRY(load_tables(tok, vocab, cJSON_IsArray(added) ? added : NULL));
    MF_TRY(load_merges(tok, merges));
    tk_bpe *m = &tok->bpe;
    MF_TRY(tk_json_bool(model, "byte_fallback", false, "model", &m->byte_fallback));
    MF_TRY(tk_json_bool(model, "fuse_unk", false, "model", &m->fuse_unk));
    MF_TRY(tk_json_bool(model, "ignore_merges", false, "model", &m->ignore_merges));
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_id[b] = tk_strmap_get(&m->vocab, name, 6);
    }
    for (int32_t cp = 0; cp < 0x800; cp++) {
        char c[4];
        int k = tk_utf8_put((uint32_t)cp, c);
        m->char_id[cp] = tk_strmap_get(&m->vocab, c, k);
    }
    m->cut_before_meta = !m->ignore_merges && tk_strmap_get(&m->vocab, "\xE2\x96\x81", 3) >= 0;
    for (int64_t id = 0; id < tok->n_ids && m->cut_before_meta; id++) {
        const char *t = tok->model_text[id];
        for (int32_t i = 3; t && i + 3 <= tok->model_len[id]; i++)
            if (memcmp(t + i, "\xE2\x96\x81", 3) == 0 && memcmp(t + i - 3, "\xE2\x96\x81", 3) != 0) {
                m->cut_before_meta = false;
                break;
            }
    }
    m->unk_id = -1;
    const char *unk = tk_json_str(model, "unk_token");
    if (unk) {
        m->unk_id = tk_strmap_get(&m->vocab, unk, (int64_t)strlen(unk));
        if (m->unk_id < 0) return mf_fail(MF_ERR_FORMAT, "tokenizer: model.unk_token \"%s\" is not in the vocabulary", unk);
    }
    return MF_OK;
}

// ---- loading: BOS / EOS ------------------------------------------------------------------------

int32_t mf_tokenizer_token_id(const mf_tokenizer *tok, const char *token) {
    if (!tok || !token) return -1;
    int32_t len = (int32_t)strlen(token);
    for (int32_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].len == len && memcmp(tok->added[i].text, token, (size_t)len) == 0) return tok->added[i].id;
    return tk_strmap_get(&tok->bpe.vocab, token, len);
}

// "bos_token": "<s>" or {"content": "<s>", ...} or null.
static mf_status config_token(const mf_tokenizer *tok, const cJSON *cfg, const char *key, const char *path, int32_t *id) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    const char *s = cJSON_IsString(v) ? v->valuestring : tk_json_str(v, "content");
    if (!s) return MF_OK;
    *id = mf_tokenizer_token_id(tok, s);
    if (*id < 0) return mf_fail(MF_ERR_FORMAT, "tokenizer: \"%s\": %s \"%s\" is not a token", path, key, s);
    return MF_OK;
}

// BOS from a TemplateProcessing post-processor whose "single" starts with a special token.
static void bos_from_post_processor(mf_tokenizer *tok, const cJSON *pp) {
    if (!pp || strcmp(tk_json_str(pp, "type") ? tk_json_str(pp, "type") : "", "TemplateProcessing") != 0) return;
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
    const cJSON *first = cJSON_IsArray(single) ? cJSON_GetArrayItem(single, 0) : NULL;
    const char *name = tk_json_str(cJSON_GetObjectItemCaseSensitive(first, "SpecialToken"), "id");
    if (name) tok->bos_id = mf_tokenizer_token_id(tok, name);
}

static mf_status load_config(mf_tokenizer *tok, const char *json_path) {
    const char *slash = strrchr(json_path, '/');
    size_t dir_len = slash ? (size_t)(slash - json_path + 1) : 0;
    static const char name[] = "tokenizer_config.json";
    char *path = mf_malloc(dir_len + sizeof name);
    if (!path) return mf_fail(MF_ERR_OOM, "tokenizer: out of memory");
    memcpy(path, json_path, dir_len);
    memcpy(path + dir_len, name, sizeof name);
    if (access(path, R_OK) != 0) { // optional
        free(path);
        return MF_OK;
    }
    cJSON *cfg = NULL;
    mf_status st = parse_json_file(path, TK_MAX_CONFIG_BYTES, "tokenizer config", &cfg);
    if (st == MF_OK) st = config_token(tok, cfg, "bos_token", path, &tok->bos_id);
    if (st == MF_OK) st = config_token(tok, cfg, "eos_token", path, &tok->eos_id);
    if (st == MF_OK) st = tk_json_bool(cfg, "add_bos_token", false, "tokenizer_config.json", &tok->add_bos_default);
    cJSON_Delete(cfg);
    free(path);
    return st;
}

// ---- public: load / free -------------------------------------------------------------------------

void mf_tokenizer_free(mf_tokenizer *tok) {
    if (!tok) return;
    free(tok->pool);
    free(tok->model_text);
    free(tok->model_len);
    free(tok->id_text);
    free(tok->id_len);
    free(tok->id_flags);
    for (int32_t i = 0; i < tok->n_added; i++) free(tok->added[i].match_owned);
    free(tok->added);
    tk_strmap_free(&tok->bpe.vocab);
    tk_pairmap_free(&tok->bpe.merges);
    tk_norms_free(tok->norms, tok->n_norms);
    tk_pres_free(tok->pres, tok->n_pres);
    tk_decs_free(tok->decs, tok->n_decs);
    free(tok->bl_pool);
    free(tok->bl_off);
    free(tok->bl_len);
    free(tok);
}

static mf_status load_root(mf_tokenizer *tok, const cJSON *root) {
    MF_TRY(load_model(tok, cJSON_GetObjectItemCaseSensitive(root, "model"),
                      cJSON_GetObjectItemCaseSensitive(root, "added_tokens")));
    MF_TRY(tk_norm_parse(cJSON_GetObjectItemCaseSensitive(root, "normalizer"), &tok->norms, &tok->n_norms));
    MF_TRY(tk_pre_parse(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), &tok->pres, &tok->n_pres));
    MF_TRY(tk_dec_parse(cJSON_GetObjectItemCaseSensitive(root, "decoder"), &tok->decs, &tok->n_decs));
    MF_TRY(index_added(tok));
    MF_TRY(tk_dec_prepare(tok));
    bos_from_post_processor(tok, cJSON_GetObjectItemCaseSensitive(root, "post_processor"));
    return MF_OK;
}

mf_status mf_tokenizer_load_buffer(const char *json, size_t size, const char *name, mf_tokenizer **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_load_buffer: out is NULL");
    *out = NULL;
    if (!json && size > 0) return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_load_buffer: json is NULL with size %zu", size);
    if (!name) name = "tokenizer.json";
    cJSON *root = NULL;
    MF_TRY(parse_json(json, size, name, "tokenizer", &root));
    mf_tokenizer *tok = mf_calloc(1, sizeof *tok);
    if (!tok) {
        cJSON_Delete(root);
        return mf_fail(MF_ERR_OOM, "tokenizer_load: out of memory");
    }
    tok->bos_id = tok->eos_id = -1;
    mf_status st = load_root(tok, root);
    cJSON_Delete(root);
    if (st != MF_OK) {
        mf_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return MF_OK;
}

mf_status mf_tokenizer_load(const char *path, mf_tokenizer **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_load: out is NULL");
    *out = NULL;
    if (!path) return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_load: path is NULL");
    char *data = NULL;
    size_t size = 0;
    MF_TRY(mf_file_read_all(path, TK_MAX_JSON_BYTES, &data, &size));
    mf_tokenizer *tok = NULL;
    mf_status st = mf_tokenizer_load_buffer(data, size, path, &tok);
    free(data);
    if (st == MF_OK) st = load_config(tok, path);
    if (st != MF_OK) {
        mf_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return MF_OK;
}

mf_status mf_tokenizer_load_dir(const char *dir, mf_tokenizer **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_load_dir: out is NULL");
    *out = NULL;
    if (!dir) return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_load_dir: dir is NULL");
    char *path = mf_path_join(dir, "tokenizer.json");
    if (!path) return mf_fail(MF_ERR_OOM, "tokenizer_load_dir: out of memory");
    mf_status st = mf_tokenizer_load(path, out);
    free(path);
    return st;
}

// ---- encode -----------------------------------------------------------------------------------------

// Work space for one encode call (the tokenizer itself is read-only).
typedef struct {
    const mf_tokenizer *tok;
    pcre2_match_data *md;
    tk_buf norm;
    tk_pieces pieces, out, scratch;
    tk_bpe_scratch bpe;
    tk_ids ids;
} enc_ctx;

// Start of the character that ends at s[i - 1] (s[0..i) is the text before).
static int64_t prev_char(const unsigned char *s, int64_t i) {
    int64_t j = i - 1;
    while (j > 0 && i - j < 4 && (s[j] & 0xC0) == 0x80) j--;
    return tk_utf8_len(s + j, i - j) == i - j ? j : i - 1;
}

// Leftmost, then longest, added token in s[from..n) with normalized == norm:
// [*ms, *me) (whitespace included per lstrip / rstrip, never before `from`)
// and its index in tok->added. False when there is none.
static bool next_added(const mf_tokenizer *tok, bool norm, const char *s, int64_t n, int64_t from, int64_t *ms,
                       int64_t *me, int32_t *which) {
    const unsigned char *u = (const unsigned char *)s;
    for (int64_t i = from; i < n; i++) {
        for (int32_t k = tok->added_first[u[i]]; k < tok->added_first[u[i] + 1]; k++) {
            const tk_added *a = &tok->added[k];
            if (a->normalized != norm || a->match_len > n - i || memcmp(s + i, a->match, (size_t)a->match_len) != 0)
                continue;
            int64_t a0 = i, a1 = i + a->match_len;
            while (a->lstrip && a0 > from) {
                int64_t p = prev_char(u, a0);
                if (!tk_is_white_space(tk_utf8_cp(u + p, a0 - p))) break;
                a0 = p;
            }
            while (a->rstrip && a1 < n) {
                int l = tk_utf8_len(u + a1, n - a1);
                if (!tk_is_white_space(tk_utf8_cp(u + a1, n - a1))) break;
                a1 += l;
            }
            *ms = a0;
            *me = a1;
            *which = k;
            return true;
        }
    }
    return false;
}

// Pre-tokenizers and BPE on one normalized gap.
static mf_status encode_gap(enc_ctx *c, const char *s, int64_t n, bool first) {
    const mf_tokenizer *tok = c->tok;
    if (n == 0) return MF_OK;
    tk_pieces_clear(&c->pieces);
    MF_TRY(tk_pieces_add(&c->pieces, s, n, first));
    MF_TRY(tk_pretokenize(tok->pres, tok->n_pres, c->md, &c->pieces, &c->out, &c->scratch));
    for (int64_t i = 0; i < c->pieces.n; i++)
        MF_TRY(tk_bpe_encode(&tok->bpe, &c->bpe, c->pieces.buf.p + c->pieces.off[i], c->pieces.len[i], &c->ids));
    return MF_OK;
}

// Normalizers, then added tokens matched on normalized text, on one raw gap.
static mf_status encode_raw_gap(enc_ctx *c, const char *s, int64_t n, bool first) {
    const mf_tokenizer *tok = c->tok;
    if (n == 0) return MF_OK;
    MF_TRY(tk_normalize(tok->norms, tok->n_norms, c->md, s, n, &c->norm));
    const char *t = c->norm.p;
    int64_t len = c->norm.len, pos = 0, ms, me;
    int32_t k;
    if (!tok->any_normalized_added) return encode_gap(c, t, len, first);
    // The gaps are pre-tokenized from c->norm, which encode_gap leaves alone.
    while (next_added(tok, true, t, len, pos, &ms, &me, &k)) {
        MF_TRY(encode_gap(c, t + pos, ms - pos, first && pos == 0));
        MF_TRY(tk_ids_push(&c->ids, tok->added[k].id));
        pos = me;
    }
    return encode_gap(c, t + pos, len - pos, first && pos == 0);
}

mf_status mf_tokenizer_encode(const mf_tokenizer *tok, const char *text, size_t len, bool add_bos, int32_t **ids,
                              int64_t *n) {
    if (!ids || !n)
        return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_encode: NULL output (ids %p, n %p)", (void *)ids, (void *)n);
    *ids = NULL;
    *n = 0;
    if (!tok) return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_encode: tok is NULL");
    if (!text && len > 0) return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_encode: text is NULL with len %zu", len);
    if (len > (size_t)INT64_MAX / 4) return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_encode: len %zu is too large", len);
    if (add_bos && tok->bos_id < 0)
        return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_encode: add_bos, but the tokenizer has no BOS token");

    enc_ctx c = {.tok = tok};
    mf_status st = MF_OK;
    c.md = pcre2_match_data_create(16, NULL);
    if (!c.md) st = mf_fail(MF_ERR_OOM, "tokenizer_encode: out of memory for regex match data");
    if (st == MF_OK) { // allocated even when nothing is pushed
        c.ids.p = mf_malloc(64 * sizeof *c.ids.p);
        c.ids.cap = 64;
        if (!c.ids.p) st = mf_fail(MF_ERR_OOM, "tokenizer_encode: out of memory for ids");
    }
    if (st == MF_OK && add_bos) st = tk_ids_push(&c.ids, tok->bos_id);
    int64_t pos = 0, ms, me, total = (int64_t)len;
    int32_t k;
    while (st == MF_OK && next_added(tok, false, text, total, pos, &ms, &me, &k)) {
        st = encode_raw_gap(&c, text + pos, ms - pos, pos == 0);
        if (st == MF_OK) st = tk_ids_push(&c.ids, tok->added[k].id);
        pos = me;
    }
    if (st == MF_OK) st = encode_raw_gap(&c, text + pos, total - pos, pos == 0);

    pcre2_match_data_free(c.md);
    free(c.norm.p);
    tk_pieces_free(&c.pieces);
    tk_pieces_free(&c.out);
    tk_pieces_free(&c.scratch);
    tk_bpe_scratch_free(&c.bpe);
    if (st != MF_OK) {
        free(c.ids.p);
        return st;
    }
    *ids = c.ids.p;
    *n = c.ids.len;
    return MF_OK;
}

// ---- decode and queries ------------------------------------------------------------------------------

mf_status mf_tokenizer_decode(const mf_tokenizer *tok, const int32_t *ids, int64_t n, char **text, size_t *len) {
    if (!text || !len)
        return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_decode: NULL output (text %p, len %p)", (void *)text, (void *)len);
    *text = NULL;
    *len = 0;
    if (!tok) return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_decode: tok is NULL");
    if (n < 0 || (n > 0 && !ids))
        return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_decode: n %lld with ids %p", (long long)n, (const void *)ids);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok->n_ids || !tok->id_text[ids[i]])
            return mf_fail(MF_ERR_INVALID_ARG, "tokenizer_decode: ids[%lld] = %d is not a token (vocab_size %lld)",
                           (long long)i, (int)ids[i], (long long)tok->n_ids);
    tk_buf out = {0};
    mf_status st = tk_decode_into(tok, ids, n, &out);
    if (st != MF_OK) {
        free(out.p);
        return st;
    }
    *text = out.p;
    *len = (size_t)out.len;
    return MF_OK;
}

void mf_tokenizer_free_buffer(void *p) { free(p); }

int64_t mf_tokenizer_vocab_size(const mf_tokenizer *tok) { return tok ? tok->n_ids : 0; }

const char *mf_tokenizer_token_text(const mf_tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->n_ids) return NULL;
    return tok->id_text[id];
}

int32_t mf_tokenizer_bos_id(const mf_tokenizer *tok) { return tok ? tok->bos_id : -1; }
int32_t mf_tokenizer_eos_id(const mf_tokenizer *tok) { return tok ? tok->eos_id : -1; }
bool mf_tokenizer_default_add_bos(const mf_tokenizer *tok) { return tok && tok->add_bos_default; }

bool mf_tokenizer_is_special(const mf_tokenizer *tok, int32_t id) {
    return tok && id >= 0 && id < tok->n_ids && (tok->id_flags[id] & TK_ID_SPECIAL);
}
