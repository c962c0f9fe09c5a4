// The family table, and through it config.json -> mf_model_config (the
// family reads its fields) -> mf_dec_spec (the shared part, then the family's).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/fileio.h"
#include "model/arch/arch.h"

static const size_t kMaxConfigBytes = (size_t)16 << 20;

// One line per family; messages list classes in this order.
const mf_family *const mf_families[] = {
    &mf_family_gpt2, &mf_family_llama, &mf_family_qwen2, &mf_family_mixtral, &mf_family_qwen2_moe,
};
const int mf_n_families = (int)(sizeof mf_families / sizeof mf_families[0]);

const mf_arch_class *mf_arch_class_find(const char *hf_class, const char *model_type, const mf_family **fam) {
    for (int f = 0; f < mf_n_families; f++)
        for (int i = 0; i < mf_families[f]->n_classes; i++) {
            const mf_arch_class *k = &mf_families[f]->classes[i];
            if (hf_class ? strcmp(hf_class, k->hf_class) == 0 : model_type && strcmp(model_type, k->model_type) == 0) {
                if (fam) *fam = mf_families[f];
                return k;
            }
        }
    return NULL;
}

const mf_arch_class *mf_arch_class_of(mf_arch a) {
    for (int f = 0; f < mf_n_families; f++)
        for (int i = 0; i < mf_families[f]->n_classes; i++)
            if (mf_families[f]->classes[i].arch == a) return &mf_families[f]->classes[i];
    return NULL;
}

const mf_family *mf_family_of(mf_arch a) {
    for (int f = 0; f < mf_n_families; f++)
        for (int i = 0; i < mf_families[f]->n_classes; i++)
            if (mf_families[f]->classes[i].arch == a) return mf_families[f];
    return NULL;
}

const char *mf_arch_list(char *buf, size_t n, bool by_type, bool runnable_only) {
    size_t k = 0;
    buf[0] = '\0';
    for (int f = 0; f < mf_n_families; f++) {
        if (runnable_only && !mf_families[f]->weight_map) continue;
        for (int i = 0; i < mf_families[f]->n_classes && k < n; i++) {
            const mf_arch_class *c = &mf_families[f]->classes[i];
            k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? ", " : "", by_type ? c->model_type : c->hf_class);
        }
    }
    return buf;
}

const mf_arch_preset *mf_preset_find(const char *name, const mf_family **fam) {
    for (int f = 0; f < mf_n_families; f++)
        for (int i = 0; i < mf_families[f]->n_presets; i++)
            if (strcmp(name, mf_families[f]->presets[i].name) == 0) {
                if (fam) *fam = mf_families[f];
                return &mf_families[f]->presets[i];
            }
    return NULL;
}

const char *mf_preset_list(char *buf, size_t n) {
    size_t k = 0;
    buf[0] = '\0';
    for (int f = 0; f < mf_n_families; f++)
        for (int i = 0; i < mf_families[f]->n_presets && k < n; i++)
            k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? ", " : "", mf_families[f]->presets[i].name);
    return buf;
}

mf_status mf_spec_from_config(const mf_model_config *c, const char *path, mf_dec_spec *s, const mf_family **out) {
    memset(s, 0, sizeof *s);
    const mf_family *fam = mf_family_of(c->arch);
    const mf_arch_class *k = mf_arch_class_of(c->arch);
    if (!fam || !k) return mf_fail(MF_ERR_UNSUPPORTED, "%s: architecture id %d unknown", path, (int)c->arch);
    if (!fam->weight_map) {
        char known[512];
        return mf_fail(MF_ERR_UNSUPPORTED,
                       "%s: architecture %s (%s) is not supported by the decoder yet: %s (supported: %s)", path,
                       c->arch_name, k->model_type, fam->missing ? fam->missing : "no decoder",
                       mf_arch_list(known, sizeof known, false, true));
    }
    // every checkpoint family is pre-norm with a final norm
    *s = (mf_dec_spec){.n_layers = (int32_t)c->n_layers, .hidden = (int32_t)c->hidden, .n_heads = (int32_t)c->n_heads,
                       .n_kv_heads = (int32_t)c->n_kv_heads, .head_dim = (int32_t)c->head_dim, .ffn = (int32_t)c->ffn,
                       .vocab = (int32_t)c->vocab_size, .max_pos = c->max_pos,
                       .layernorm = c->norm == MF_NORM_LAYERNORM, .norm_eps = (float)c->norm_eps,
                       .final_norm = true, .learned_pos = c->learned_pos, .gated_mlp = c->gated_mlp,
                       .qkv_bias = c->qkv_bias, .o_bias = c->o_bias, .mlp_bias = c->mlp_bias,
                       .tied = c->tie_word_embeddings, .n_experts = (int32_t)c->n_experts,
                       .top_k = (int32_t)c->n_experts_per_tok, .moe_renorm = c->norm_topk_prob,
                       .shared_ffn = (int32_t)c->shared_expert_ffn, .rope_theta = c->rope_theta,
                       .rope_scaling = c->rope_scaling, .sliding_window = c->sliding_window, .bos_id = c->bos_id};
    snprintf(s->arch, sizeof s->arch, "%s", k->model_type);
    switch (c->act) {
    case MF_HIDDEN_ACT_GELU_TANH: s->act = MF_ACT_GELU_TANH; break;
    case MF_HIDDEN_ACT_GELU: s->act = MF_ACT_GELU_ERF; break;
    case MF_HIDDEN_ACT_SILU: s->act = MF_ACT_SILU; break;
    default:
        return mf_fail(MF_ERR_UNSUPPORTED, "%s: activation %s is not supported by the decoder (gelu_new, gelu, silu)",
                       path, mf_hidden_act_name(c->act));
    }
    if (c->n_experts > 256 || c->n_experts_per_tok > 8)
        return mf_fail(MF_ERR_UNSUPPORTED, "%s: %lld experts, top-%lld: minfer runs up to 256 experts, top-8", path,
                       (long long)c->n_experts, (long long)c->n_experts_per_tok);
    s->n_eos = c->n_eos < MF_MODEL_MAX_EOS ? c->n_eos : MF_MODEL_MAX_EOS;
    for (int32_t i = 0; i < s->n_eos; i++) s->eos_ids[i] = c->eos_ids[i];
    if (fam->to_spec) MF_TRY(fam->to_spec(c, path, s));
    MF_TRY(mf_dec_spec_check(s, path));
    if (out) *out = fam;
    return MF_OK;
}

const char *mf_arch_name(mf_arch a) {
    const mf_arch_class *k = mf_arch_class_of(a);
    return k ? k->model_type : "?";
}

// ---- config.json ----------------------------------------------------------------------

// "architectures"[0] (else model_type) -> the family and class that read the rest.
static mf_status parse_arch(const mf_cfg *c, mf_model_config *m, const mf_family **fam) {
    const char *mt = NULL;
    MF_TRY(mf_cfg_str(c, MF_CFG_NAMES("model_type"), NULL, &mt));
    if (mt) snprintf(m->model_type, sizeof m->model_type, "%s", mt);
    char known[512];
    const mf_arch_class *k = NULL;
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(c->obj, "architectures");
    if (archs && !cJSON_IsNull(archs)) {
        if (!cJSON_IsArray(archs))
            return mf_fail(MF_ERR_FORMAT, MF_CFG_FN ": field 'architectures' is not a list", c->fn);
        if (archs->child) {
            if (!cJSON_IsString(archs->child))
                return mf_fail(MF_ERR_FORMAT, MF_CFG_FN ": 'architectures'[0] is not a string", c->fn);
            const char *a = archs->child->valuestring;
            k = mf_arch_class_find(a, NULL, fam);
            if (!k)
                return mf_fail(MF_ERR_UNSUPPORTED, MF_CFG_FN ": architecture '%.64s' unsupported (supported: %s)", c->fn,
                               a, mf_arch_list(known, sizeof known, false, false));
            m->arch = k->arch;
            snprintf(m->arch_name, sizeof m->arch_name, "%s", a);
            return MF_OK;
        }
    }
    if (!mt) return mf_fail(MF_ERR_FORMAT, MF_CFG_FN ": missing required field 'architectures' (or 'model_type')", c->fn);
    k = mf_arch_class_find(NULL, mt, fam);
    if (!k)
        return mf_fail(MF_ERR_UNSUPPORTED, MF_CFG_FN ": model_type '%.64s' unsupported (supported: %s)", c->fn, mt,
                       mf_arch_list(known, sizeof known, true, false));
    m->arch = k->arch;
    snprintf(m->arch_name, sizeof m->arch_name, "%s", k->hf_class);
    return MF_OK;
}

mf_status mf_model_config_parse(const char *json, size_t len, const char *name, mf_model_config *out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "config parse: out is NULL");
    if (!json && len) return mf_fail(MF_ERR_INVALID_ARG, "config parse: json is NULL, len %zu", len);
    if (!name) name = "config.json";
    cJSON *root = NULL;
    MF_TRY(mf_json_parse(json, len, name, "config", &root));
    mf_status s = MF_OK;
    mf_model_config m;
    memset(&m, 0, sizeof m);
    mf_cfg c = {root, name, ""};
    if (!cJSON_IsObject(root)) s = mf_fail(MF_ERR_FORMAT, MF_CFG_FN ": not a JSON object", name);
    const mf_family *fam = NULL;
    if (s == MF_OK) s = parse_arch(&c, &m, &fam);
    if (s == MF_OK) s = fam->parse_config(&c, &m);
    if (s == MF_OK) s = mf_model_config_check(&c, &m);
    cJSON_Delete(root);
    if (s == MF_OK) *out = m;
    return s;
}

mf_status mf_model_config_load(const char *path, mf_model_config *out) {
    if (!path || !out) return mf_fail(MF_ERR_INVALID_ARG, "config load: NULL argument");
    struct stat st;
    char *joined = NULL;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        joined = mf_path_join(path, "config.json");
        if (!joined) return mf_fail(MF_ERR_OOM, MF_CFG_FN ": cannot allocate a path", path);
        path = joined;
    }
    char *text = NULL;
    size_t len = 0;
    mf_status s = mf_file_read_all(path, kMaxConfigBytes, &text, &len);
    if (s == MF_OK) s = mf_model_config_parse(text, len, path, out);
    free(text);
    free(joined);
    return s;
}

const char *mf_model_config_describe(const mf_model_config *c, char *buf, size_t n) {
    if (!buf || n == 0) return buf;
    if (!c) {
        snprintf(buf, n, "(null)");
        return buf;
    }
    size_t k = (size_t)snprintf(buf, n,
                                "%s: %lld layers, hidden %lld, heads %lld (kv %lld, head_dim %lld), ffn %lld, "
                                "vocab %lld, max_pos %lld, %s eps %g, %s",
                                mf_arch_name(c->arch), (long long)c->n_layers, (long long)c->hidden,
                                (long long)c->n_heads, (long long)c->n_kv_heads, (long long)c->head_dim,
                                (long long)c->ffn, (long long)c->vocab_size, (long long)c->max_pos,
                                c->norm == MF_NORM_LAYERNORM ? "layernorm" : "rmsnorm", c->norm_eps,
                                mf_hidden_act_name(c->act));
    if (k < n && !c->learned_pos) {
        k += (size_t)snprintf(buf + k, n - k, ", rope theta %g", c->rope_theta);
        if (k < n && c->rope_scaling.type == MF_ROPE_SCALING_LINEAR)
            k += (size_t)snprintf(buf + k, n - k, " (linear x%g)", c->rope_scaling.factor);
        if (k < n && c->rope_scaling.type == MF_ROPE_SCALING_LLAMA3)
            k += (size_t)snprintf(buf + k, n - k, " (llama3 x%g, orig %lld)", c->rope_scaling.factor,
                                  (long long)c->rope_scaling.original_max_pos);
    }
    if (k < n && c->n_experts)
        k += (size_t)snprintf(buf + k, n - k, ", experts %lld top-%lld", (long long)c->n_experts,
                              (long long)c->n_experts_per_tok);
    if (k < n && c->tie_word_embeddings) k += (size_t)snprintf(buf + k, n - k, ", tied embeddings");
    if (k < n) snprintf(buf + k, n - k, ", %.2fM params", (double)c->n_params / 1e6);
    return buf;
}
