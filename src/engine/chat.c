// Chat templates: kind names, recognising a published template, and loading
// one from a checkpoint folder as transformers finds it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "core/alloc.h"
#include "core/error.h"
#include "engine/chat.h"
#include "core/fileio.h"
#include "core/sbuf.h"
#include "model/load/model.h"

// Index = mf_chat_kind.
static const char *const kind_names[MF_CHAT_KIND_COUNT] = {
    "none",           "llama2",           "llama3",     "llama3.1", "llama3.2", "mistral-v1",
    "mistral-v1-old", "mistral-v0.1-old", "mistral-v3", "chatml",   "qwen2",    "qwen2.5",
};
#define MF_CHAT_CHOICES                                                                                     \
    "llama2, llama3, llama3.1, llama3.2, mistral-v1, mistral-v1-old, mistral-v0.1-old, mistral-v3, chatml, " \
    "qwen2, qwen2.5"

// The published templates, by the hash of their canonical form. Each has a
// copy under tests/fixtures/chat_templates/ (its README says where it came
// from); test_chat checks that every fixture is recognised as its kind. A
// new revision of a template: add its fixture, then its hash here (test_chat
// prints the hash of a fixture it does not recognise).
typedef struct {
    uint64_t hash;
    mf_chat_kind kind;
    const char *what; // the checkpoint(s) that publish it
} known_template;

static const known_template known[] = {
    {0x9a5a118bcd77c789ull, MF_CHAT_LLAMA2, "meta-llama/Llama-2-7b-chat-hf (13b, 70b)"},
    {0x768dc1687f9293a8ull, MF_CHAT_LLAMA3, "meta-llama/Meta-Llama-3-8B-Instruct"},
    {0xa13d1923b66e33bbull, MF_CHAT_LLAMA3_1, "meta-llama/Llama-3.1-8B-Instruct, Llama-3.3-70B-Instruct"},
    {0x6f731bfff9f39039ull, MF_CHAT_LLAMA3_2, "meta-llama/Llama-3.2-3B-Instruct"},
    {0xfbb4d157cd6cd15dull, MF_CHAT_MISTRAL_V1, "mistralai/Mistral-7B-Instruct-v0.2, Mixtral-8x7B-Instruct-v0.1"},
    {0xdd39f833422aa4a9ull, MF_CHAT_MISTRAL_V1_OLD, "mistralai/Mistral-7B-Instruct-v0.2 (first revision)"},
    {0xbb4524ed7672ee76ull, MF_CHAT_MISTRAL_V01_OLD, "mistralai/Mistral-7B-Instruct-v0.1 (first revision)"},
    {0x119955a2e6e83084ull, MF_CHAT_MISTRAL_V3, "mistralai/Mistral-7B-Instruct-v0.3"},
    {0x91f23f711e68df08ull, MF_CHAT_CHATML, "teknium/OpenHermes-2.5-Mistral-7B"},
    {0x5053950e79b104ddull, MF_CHAT_QWEN2, "Qwen/Qwen2-7B-Instruct (Qwen1.5-*-Chat)"},
    {0x0a6a0575dd881e83ull, MF_CHAT_QWEN2_5, "Qwen/Qwen2.5-7B-Instruct"},
};

const char *mf_chat_kind_name(mf_chat_kind kind) {
    return kind >= 0 && kind < MF_CHAT_KIND_COUNT ? kind_names[kind] : "?";
}

static bool kind_from_name(const char *name, mf_chat_kind *out) {
    for (int k = MF_CHAT_NONE + 1; k < MF_CHAT_KIND_COUNT; k++) {
        if (strcmp(name, kind_names[k]) == 0) {
            *out = (mf_chat_kind)k;
            return true;
        }
    }
    return false;
}

mf_chat_kind mf_chat_recognise(uint64_t hash) {
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (known[i].hash == hash) return known[i].kind;
    return MF_CHAT_NONE;
}

// ---- the canonical form ------------------------------------------------------------------------

static void cb_chr(mf_sbuf *b, char c) { mf_sbuf_put(b, &c, 1); }

// One string literal starting at s[i] (a quote); returns the index after it.
static size_t canon_literal(mf_sbuf *b, const char *s, size_t len, size_t i) {
    const char q = s[i++];
    cb_chr(b, '\'');
    while (i < len && s[i] != q) {
        char c = s[i++];
        if (c == '\\' && i < len) {
            const char e = s[i++];
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case '\\': case '\'': case '"': c = e; break;
            default: // kept as written: \uXXXX and the like do not occur in the templates we know
                cb_chr(b, '\\');
                c = e;
            }
        }
        if (c == '\'' || c == '\\') cb_chr(b, '\\');
        cb_chr(b, c);
    }
    cb_chr(b, '\'');
    return i < len ? i + 1 : len;
}

mf_status mf_chat_canonical(const char *text, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    size_t len = strlen(text);
    if (len >= 2 && text[len - 2] == '\r' && text[len - 1] == '\n') len -= 2; // Jinja drops one trailing
    else if (len && (text[len - 1] == '\n' || text[len - 1] == '\r')) len--;  // newline
    mf_sbuf b = {0};
    size_t i = 0;
    while (i < len) {
        const char c = text[i];
        if (c != '{' || i + 1 >= len || (text[i + 1] != '{' && text[i + 1] != '%' && text[i + 1] != '#')) {
            cb_chr(&b, c);
            i++;
            continue;
        }
        const char open = text[i + 1];
        if (open == '#') { // a comment renders nothing: only its whitespace control stays
            const bool trim_before = i + 2 < len && text[i + 2] == '-';
            i += 2;
            while (i + 1 < len && !(text[i] == '#' && text[i + 1] == '}')) i++;
            const bool trim_after = i + 1 < len && text[i - 1] == '-';
            if (trim_before) mf_sbuf_put(&b, "{#-#}", 5);
            if (trim_after) mf_sbuf_put(&b, "{#--#}", 6);
            i = i + 1 < len ? i + 2 : len;
            continue;
        }
        const char close = open == '{' ? '}' : '%'; // "}}" or "%}"
        cb_chr(&b, '{');
        cb_chr(&b, open);
        i += 2;
        if (i < len && (text[i] == '-' || text[i] == '+')) cb_chr(&b, text[i++]);
        while (i < len) {
            const char d = text[i];
            if (d == ' ' || d == '\t' || d == '\n' || d == '\r') {
                i++;
            } else if (d == '\'' || d == '"') {
                i = canon_literal(&b, text, len, i);
            } else if ((d == '-' || d == '+') && i + 2 < len && text[i + 1] == close && text[i + 2] == '}') {
                cb_chr(&b, d);
                cb_chr(&b, close);
                cb_chr(&b, '}');
                i += 3;
                break;
            } else if (d == close && i + 1 < len && text[i + 1] == '}') {
                cb_chr(&b, close);
                cb_chr(&b, '}');
                i += 2;
                break;
            } else {
                cb_chr(&b, d);
                i++;
            }
        }
    }
    if (!b.oom && !b.p) mf_sbuf_put(&b, "", 0);
    if (b.oom) {
        free(b.p);
        return mf_fail(MF_ERR_OOM, "chat template: out of host memory");
    }
    *out = b.p;
    *out_len = b.len;
    return MF_OK;
}

mf_status mf_chat_template_hash(const char *text, uint64_t *out) {
    char *c = NULL;
    size_t n = 0;
    MF_TRY(mf_chat_canonical(text, &c, &n));
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)c[i];
        h *= 0x100000001b3ull;
    }
    free(c);
    *out = h;
    return MF_OK;
}

// ---- creating one ------------------------------------------------------------------------------

// For the message about a template we do not know: the family it resembles.
static const char *family_guess(const char *text) {
    if (strstr(text, "<|im_start|>")) return " (it looks like ChatML, but is not one of the published templates)";
    if (strstr(text, "<|start_header_id|>"))
        return " (it looks like a Llama-3 template, but is not one of the published ones)";
    if (strstr(text, "<<SYS>>")) return " (it looks like a Llama-2 template, but is not the published one)";
    if (strstr(text, "[INST]")) return " (it looks like a Mistral template, but is not one of the published ones)";
    return "";
}

static char *dup_str(const char *s) {
    if (!s) return NULL;
    const size_t n = strlen(s) + 1;
    char *d = mf_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void mf_chat_template_free(mf_chat_template *t) {
    if (!t) return;
    free(t->text);
    free(t->bos);
    free(t->eos);
    free(t);
}

// `where` prefixes messages (the function, or the folder).
static mf_status template_new(const char *where, const char *text, const char *name, const char *bos,
                              const char *eos, mf_chat_template **out) {
    mf_chat_kind kind = MF_CHAT_NONE;
    if (name) {
        if (!kind_from_name(name, &kind))
            return mf_fail(MF_ERR_UNSUPPORTED, "%s: unknown template name '%s' (choices: " MF_CHAT_CHOICES ")",
                           where, name);
    } else if (!text) {
        return mf_fail(MF_ERR_UNSUPPORTED,
                       "%s: no chat template (the checkpoint has none); name one to use it anyway: " MF_CHAT_CHOICES,
                       where);
    } else {
        uint64_t h = 0;
        MF_TRY(mf_chat_template_hash(text, &h));
        kind = mf_chat_recognise(h);
        if (kind == MF_CHAT_NONE)
            return mf_fail(MF_ERR_UNSUPPORTED,
                           "%s: chat template not recognised%s (hash %016llx); minfer renders the published "
                           "templates of: " MF_CHAT_CHOICES "; name one to force it",
                           where, family_guess(text), (unsigned long long)h);
    }
    if (bos && mf_chat_utf8_bad_at(bos, strlen(bos)) >= 0)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: bos_token is not valid UTF-8", where);
    if (eos && mf_chat_utf8_bad_at(eos, strlen(eos)) >= 0)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: eos_token is not valid UTF-8", where);
    mf_chat_template *t = mf_calloc(1, sizeof *t);
    if (!t) return mf_fail(MF_ERR_OOM, "%s: out of host memory", where);
    t->kind = kind;
    t->text = dup_str(text);
    t->bos = dup_str(bos);
    t->eos = dup_str(eos);
    if ((text && !t->text) || (bos && !t->bos) || (eos && !t->eos)) {
        mf_chat_template_free(t);
        return mf_fail(MF_ERR_OOM, "%s: out of host memory", where);
    }
    *out = t;
    return MF_OK;
}

mf_status mf_chat_template_new(const char *text, const char *name, const char *bos, const char *eos,
                               mf_chat_template **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "chat_template_new: out is NULL");
    *out = NULL;
    return template_new("chat_template_new", text, name, bos, eos, out);
}

mf_chat_kind mf_chat_template_kind(const mf_chat_template *t) { return t ? t->kind : MF_CHAT_NONE; }
const char *mf_chat_template_text(const mf_chat_template *t) { return t ? t->text : NULL; }

// ---- from a checkpoint folder ------------------------------------------------------------------

#define CHAT_MAX_FILE ((size_t)64 << 20)

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

// A JSON file of the folder as an object; *root NULL when the file is absent.
static mf_status read_json(const char *dir, const char *name, cJSON **root) {
    *root = NULL;
    char *path = mf_path_join(dir, name);
    if (!path) return mf_fail(MF_ERR_OOM, "chat template: out of host memory");
    mf_status st = MF_OK;
    if (file_exists(path)) {
        char *text = NULL;
        size_t len = 0;
        st = mf_file_read_all(path, CHAT_MAX_FILE, &text, &len);
        if (st == MF_OK) st = mf_json_parse(text, len, path, name, root);
        if (st == MF_OK && !cJSON_IsObject(*root)) st = mf_fail(MF_ERR_FORMAT, "%s: not a JSON object", path);
        if (st != MF_OK) {
            cJSON_Delete(*root);
            *root = NULL;
        }
        free(text);
    }
    free(path);
    return st;
}

// key: "<s>", {"content": "<s>", ...} or null. *present: the key is there.
static mf_status json_token(const cJSON *root, const char *key, const char *dir, const char *file, bool *present,
                            const char **out) {
    const cJSON *v = root ? cJSON_GetObjectItemCaseSensitive(root, key) : NULL;
    *present = v != NULL;
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return MF_OK;
    if (cJSON_IsString(v)) {
        *out = v->valuestring;
        return MF_OK;
    }
    const cJSON *c = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "content") : NULL;
    if (cJSON_IsString(c)) {
        *out = c->valuestring;
        return MF_OK;
    }
    return mf_fail(MF_ERR_FORMAT, "%s/%s: %s is neither a string nor {\"content\": string}", dir, file, key);
}

// tokenizer_config.json's chat_template: a string, null, or [{name, template}] ("default").
static mf_status config_template(const cJSON *cfg, const char *dir, const char **out) {
    *out = NULL;
    const cJSON *v = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "chat_template") : NULL;
    if (!v || cJSON_IsNull(v)) return MF_OK;
    if (cJSON_IsString(v)) {
        *out = v->valuestring;
        return MF_OK;
    }
    if (!cJSON_IsArray(v))
        return mf_fail(MF_ERR_FORMAT, "%s/tokenizer_config.json: chat_template is neither a string nor a list",
                       dir);
    char names[256] = "";
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(it, "template");
        if (!cJSON_IsString(n) || !cJSON_IsString(tpl))
            return mf_fail(MF_ERR_FORMAT,
                           "%s/tokenizer_config.json: a chat_template entry is not {\"name\": string, "
                           "\"template\": string}",
                           dir);
        if (strcmp(n->valuestring, "default") == 0) {
            *out = tpl->valuestring;
            return MF_OK;
        }
        const size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", n->valuestring);
    }
    return mf_fail(MF_ERR_UNSUPPORTED,
                   "%s/tokenizer_config.json: chat_template lists named templates (%s) but none named \"default\"",
                   dir, names);
}

mf_status mf_chat_template_load(const char *dir, const char *name, mf_chat_template **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "chat_template_load: out is NULL");
    *out = NULL;
    if (!dir) return mf_fail(MF_ERR_INVALID_ARG, "chat_template_load: dir is NULL");
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return mf_fail(MF_ERR_IO, "chat_template_load: %s is not a folder", dir);
    cJSON *cfg = NULL, *map = NULL;
    char *jinja = NULL;
    const char *text = NULL, *bos = NULL, *eos = NULL;
    bool bos_set = false, eos_set = false;
    mf_status st = read_json(dir, "tokenizer_config.json", &cfg);
    if (st == MF_OK) st = config_template(cfg, dir, &text);
    if (st == MF_OK) st = json_token(cfg, "bos_token", dir, "tokenizer_config.json", &bos_set, &bos);
    if (st == MF_OK) st = json_token(cfg, "eos_token", dir, "tokenizer_config.json", &eos_set, &eos);
    if (st == MF_OK && (!bos_set || !eos_set)) { // transformers also reads the older special_tokens_map.json
        st = read_json(dir, "special_tokens_map.json", &map);
        bool dummy;
        if (st == MF_OK && !bos_set) st = json_token(map, "bos_token", dir, "special_tokens_map.json", &dummy, &bos);
        if (st == MF_OK && !eos_set) st = json_token(map, "eos_token", dir, "special_tokens_map.json", &dummy, &eos);
    }
    char *jpath = st == MF_OK ? mf_path_join(dir, "chat_template.jinja") : NULL;
    if (st == MF_OK && !jpath) st = mf_fail(MF_ERR_OOM, "chat template: out of host memory");
    if (st == MF_OK && file_exists(jpath)) { // it wins over tokenizer_config.json's, as in transformers
        size_t len = 0;
        st = mf_file_read_all(jpath, CHAT_MAX_FILE, &jinja, &len);
        if (st == MF_OK && strlen(jinja) != len) st = mf_fail(MF_ERR_FORMAT, "%s: holds a NUL byte", jpath);
        if (st == MF_OK) text = jinja;
    }
    if (st == MF_OK) st = template_new(dir, text, name, bos, eos, out);
    free(jpath);
    free(jinja);
    cJSON_Delete(map);
    cJSON_Delete(cfg);
    return st;
}

mf_status mf_model_chat_template(const mf_model *m, const char *name, mf_chat_template **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "model_chat_template: out is NULL");
    *out = NULL;
    if (!m) return mf_fail(MF_ERR_INVALID_ARG, "model_chat_template: model is NULL");
    if (m->dir) return mf_chat_template_load(m->dir, name, out);
    return template_new(m->source, NULL, name, NULL, NULL, out); // synthetic: no files, no BOS/EOS strings
}
