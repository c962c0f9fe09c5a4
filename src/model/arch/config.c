// mf_model_config: reading config.json's fields (HF's names and class
// defaults, every value range-checked) for the family files, and the checks
// that tie the fields together. The family table (arch.c) drives the parse.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/error.h"
#include "model/arch/config.h"

#define NAME_FMT MF_CFG_FN
#define JSON_INT_MAX 9007199254740992.0 // 2^53: integers a double holds exactly
#define SIZE_MAX32 MF_CFG_MAX32

const char *mf_hidden_act_name(mf_hidden_act a) {
    switch (a) {
    case MF_HIDDEN_ACT_GELU_TANH: return "gelu_tanh";
    case MF_HIDDEN_ACT_GELU: return "gelu";
    case MF_HIDDEN_ACT_SILU: return "silu";
    case MF_HIDDEN_ACT_RELU: return "relu";
    }
    return "?";
}

// ---- field access --------------------------------------------------------------------

// The first of names present with a non-null value (NULL when none); *which
// is set to its name, or to names[0].
const cJSON *mf_cfg_field(const mf_cfg *c, const char *const *names, const char **which) {
    *which = names[0];
    for (int i = 0; names[i]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->obj, names[i]);
        if (v && !cJSON_IsNull(v)) {
            *which = names[i];
            return v;
        }
    }
    return NULL;
}

static mf_status missing(const mf_cfg *c, const char *const *names) {
    char alt[160] = "";
    size_t k = 0;
    for (int i = 1; names[i] && k < sizeof alt; i++)
        k += (size_t)snprintf(alt + k, sizeof alt - k, "%s'%s%s'", i == 1 ? " (or " : " or ", c->prefix, names[i]);
    if (names[1] && k < sizeof alt) snprintf(alt + k, sizeof alt - k, ")");
    return mf_fail(MF_ERR_FORMAT, NAME_FMT ": missing required field '%s%s'%s", c->fn, c->prefix, names[0], alt);
}

// An integer field in [lo, hi]; def when absent or null (or an error when required).
mf_status mf_cfg_int(const mf_cfg *c, const char *const *names, bool required, int64_t def, int64_t lo,
                         int64_t hi, int64_t *out) {
    const char *w;
    const cJSON *v = mf_cfg_field(c, names, &w);
    int64_t i = def; // a default out of range (GPT-2's 4 * n_embd) is refused too
    if (!v) {
        if (required) return missing(c, names);
    } else {
        double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        if (!(fabs(d) <= JSON_INT_MAX) || (double)(int64_t)d != d)
            return mf_fail(MF_ERR_FORMAT, NAME_FMT ": field '%s%s' is not an integer", c->fn, c->prefix, w);
        i = (int64_t)d;
    }
    if (i < lo || i > hi)
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": %s%s = %lld is out of range [%lld, %lld]", c->fn, c->prefix, w,
                       (long long)i, (long long)lo, (long long)hi);
    *out = i;
    return MF_OK;
}

// A finite number; def when absent or null (or an error when required).
mf_status mf_cfg_num(const mf_cfg *c, const char *const *names, bool required, double def, double *out,
                         const char **which) {
    const cJSON *v = mf_cfg_field(c, names, which);
    if (!v) {
        if (required) return missing(c, names);
        *out = def;
        return MF_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": field '%s%s' is not a finite number", c->fn, c->prefix, *which);
    *out = v->valuedouble;
    return MF_OK;
}

// A number > 0 (epsilons, theta, scaling factors).
mf_status mf_cfg_pos(const mf_cfg *c, const char *const *names, bool required, double def, double *out) {
    const char *w;
    MF_TRY(mf_cfg_num(c, names, required, def, out, &w));
    if (!(*out > 0))
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": %s%s = %g must be > 0", c->fn, c->prefix, w, *out);
    return MF_OK;
}

mf_status mf_cfg_bool(const mf_cfg *c, const char *name, bool def, bool *out) {
    const char *w;
    const cJSON *v = mf_cfg_field(c, MF_CFG_NAMES(name), &w);
    if (!v) {
        *out = def;
        return MF_OK;
    }
    if (!cJSON_IsBool(v))
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": field '%s%s' is not true/false", c->fn, c->prefix, name);
    *out = cJSON_IsTrue(v);
    return MF_OK;
}

// A string field; def when absent or null.
mf_status mf_cfg_str(const mf_cfg *c, const char *const *names, const char *def, const char **out) {
    const char *w;
    const cJSON *v = mf_cfg_field(c, names, &w);
    if (!v) {
        *out = def;
        return MF_OK;
    }
    if (!cJSON_IsString(v))
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": field '%s%s' is not a string", c->fn, c->prefix, w);
    *out = v->valuestring;
    return MF_OK;
}

mf_status mf_cfg_refuse_num(const mf_cfg *c, const char *name, double ok, const char *why) {
    const char *w;
    const cJSON *v = mf_cfg_field(c, MF_CFG_NAMES(name), &w);
    if (!v || (cJSON_IsNumber(v) && v->valuedouble == ok)) return MF_OK;
    if (cJSON_IsNumber(v))
        return mf_fail(MF_ERR_UNSUPPORTED, NAME_FMT ": %s%s %g is not supported (%s)", c->fn, c->prefix, name,
                       v->valuedouble, why);
    return mf_fail(MF_ERR_FORMAT, NAME_FMT ": field '%s%s' is not a number", c->fn, c->prefix, name);
}

// ---- the parts -----------------------------------------------------------------------

mf_status mf_cfg_act(const mf_cfg *c, const char *const *names, const char *def, mf_hidden_act *out) {
    const char *a = NULL;
    MF_TRY(mf_cfg_str(c, names, def, &a));
    static const struct {
        const char *name;
        mf_hidden_act act;
    } acts[] = {
        {"gelu_new", MF_HIDDEN_ACT_GELU_TANH}, {"gelu_pytorch_tanh", MF_HIDDEN_ACT_GELU_TANH}, {"gelu_fast", MF_HIDDEN_ACT_GELU_TANH},
        {"gelu", MF_HIDDEN_ACT_GELU},          {"silu", MF_HIDDEN_ACT_SILU},                   {"swish", MF_HIDDEN_ACT_SILU},
        {"relu", MF_HIDDEN_ACT_RELU},
    };
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        if (strcmp(a, acts[i].name) == 0) {
            *out = acts[i].act;
            return MF_OK;
        }
    }
    return mf_fail(MF_ERR_UNSUPPORTED,
                   NAME_FMT ": activation '%.64s' unsupported (supported: gelu_new, gelu_pytorch_tanh, gelu_fast, "
                            "gelu, silu, swish, relu)",
                   c->fn, a);
}

// The scaling described by object sc (rope_scaling, or transformers 5's
// rope_parameters, whose "default" type means none).
static mf_status parse_rope_scaling_obj(const mf_cfg *c, const mf_cfg *scp, mf_rope_scaling *rs) {
    const mf_cfg sc = *scp;
    const char *type = NULL;
    MF_TRY(mf_cfg_str(&sc, MF_CFG_NAMES("rope_type", "type"), NULL, &type));
    if (!type) return missing(&sc, MF_CFG_NAMES("rope_type", "type"));
    if (strcmp(type, "default") == 0) return MF_OK;
    if (strcmp(type, "linear") == 0) {
        rs->type = MF_ROPE_SCALING_LINEAR;
        return mf_cfg_pos(&sc, MF_CFG_NAMES("factor"), true, 0, &rs->factor);
    }
    if (strcmp(type, "llama3") == 0) {
        rs->type = MF_ROPE_SCALING_LLAMA3;
        MF_TRY(mf_cfg_pos(&sc, MF_CFG_NAMES("factor"), true, 0, &rs->factor));
        MF_TRY(mf_cfg_pos(&sc, MF_CFG_NAMES("low_freq_factor"), true, 0, &rs->low_freq_factor));
        MF_TRY(mf_cfg_pos(&sc, MF_CFG_NAMES("high_freq_factor"), true, 0, &rs->high_freq_factor));
        MF_TRY(mf_cfg_int(&sc, MF_CFG_NAMES("original_max_position_embeddings"), true, 0, 1, SIZE_MAX32,
                       &rs->original_max_pos));
        if (!(rs->high_freq_factor > rs->low_freq_factor))
            return mf_fail(MF_ERR_FORMAT, NAME_FMT ": %shigh_freq_factor %g must exceed low_freq_factor %g", c->fn,
                           sc.prefix, rs->high_freq_factor, rs->low_freq_factor);
        return MF_OK;
    }
    return mf_fail(MF_ERR_UNSUPPORTED, NAME_FMT ": %srope_type '%.64s' unsupported (supported: linear, llama3)",
                   c->fn, sc.prefix, type);
}

// rope_scaling (transformers 4) or rope_parameters (transformers 5, which
// also moves rope_theta there). *theta keeps its value unless given.
mf_status mf_cfg_rope(const mf_cfg *c, double *theta, mf_rope_scaling *rs) {
    memset(rs, 0, sizeof *rs);
    const char *w;
    const cJSON *o = mf_cfg_field(c, MF_CFG_NAMES("rope_scaling"), &w);
    if (o) {
        if (!cJSON_IsObject(o)) return mf_fail(MF_ERR_FORMAT, NAME_FMT ": field 'rope_scaling' is not an object", c->fn);
        mf_cfg sc = {o, c->fn, "rope_scaling."};
        return parse_rope_scaling_obj(c, &sc, rs);
    }
    o = mf_cfg_field(c, MF_CFG_NAMES("rope_parameters"), &w);
    if (!o) return MF_OK;
    if (!cJSON_IsObject(o)) return mf_fail(MF_ERR_FORMAT, NAME_FMT ": field 'rope_parameters' is not an object", c->fn);
    mf_cfg sc = {o, c->fn, "rope_parameters."};
    MF_TRY(mf_cfg_pos(&sc, MF_CFG_NAMES("rope_theta"), false, *theta, theta));
    return parse_rope_scaling_obj(c, &sc, rs);
}

mf_status mf_cfg_token_ids(const mf_cfg *c, mf_model_config *m, int32_t def_bos, int32_t def_eos) {
    // Absent: the class default; an explicit null: none.
    int64_t bos = 0;
    const char *w;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(c->obj, "bos_token_id");
    if (cJSON_IsNull(b) || (!b && def_bos < 0)) {
        m->bos_id = -1;
    } else {
        MF_TRY(mf_cfg_int(c, MF_CFG_NAMES("bos_token_id"), false, def_bos, 0, SIZE_MAX32, &bos));
        m->bos_id = (int32_t)bos;
    }
    m->n_eos = 0;
    const cJSON *e = mf_cfg_field(c, MF_CFG_NAMES("eos_token_id"), &w);
    if (!e) {
        if (def_eos >= 0 && !cJSON_GetObjectItemCaseSensitive(c->obj, "eos_token_id")) m->eos_ids[m->n_eos++] = def_eos;
        return MF_OK;
    }
    if (cJSON_IsNumber(e)) {
        int64_t id = 0;
        MF_TRY(mf_cfg_int(c, MF_CFG_NAMES("eos_token_id"), true, 0, 0, SIZE_MAX32, &id));
        m->eos_ids[m->n_eos++] = (int32_t)id;
        return MF_OK;
    }
    if (!cJSON_IsArray(e))
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": field 'eos_token_id' is neither an integer nor a list", c->fn);
    for (const cJSON *x = e->child; x; x = x->next) {
        double d = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (!(d >= 0 && d <= (double)INT32_MAX) || (double)(int32_t)d != d)
            return mf_fail(MF_ERR_FORMAT, NAME_FMT ": eos_token_id[%d] is not a token id in [0, %d]", c->fn, m->n_eos,
                           INT32_MAX);
        if (m->n_eos == MF_MAX_EOS)
            return mf_fail(MF_ERR_FORMAT, NAME_FMT ": eos_token_id lists more than %d ids", c->fn, MF_MAX_EOS);
        m->eos_ids[m->n_eos++] = (int32_t)d;
    }
    return MF_OK;
}

static int64_t mul64(bool *ovf, int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) *ovf = true;
    return r;
}

static int64_t add64(bool *ovf, int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) *ovf = true;
    return r;
}

// Parameter count implied by the config; false when it overflows int64.
static bool count_params(const mf_model_config *m, int64_t *out) {
    bool o = false;
    int64_t H = m->hidden, F = m->ffn, q = mul64(&o, m->n_heads, m->head_dim);
    int64_t kv = mul64(&o, m->n_kv_heads, m->head_dim);
    int64_t qkv = add64(&o, q, mul64(&o, 2, kv));
    int64_t norm = m->norm == MF_NORM_LAYERNORM ? 2 * H : H;
    int64_t attn = add64(&o, mul64(&o, H, qkv), mul64(&o, q, H));
    if (m->qkv_bias) attn = add64(&o, attn, qkv);
    if (m->o_bias) attn = add64(&o, attn, H);
    int64_t mats = m->gated_mlp ? 3 : 2;
    int64_t mlp = mul64(&o, mats, mul64(&o, H, F));
    if (m->mlp_bias) mlp = add64(&o, mlp, add64(&o, mul64(&o, mats - 1, F), H));
    if (m->n_experts) {
        mlp = add64(&o, mul64(&o, m->n_experts, mlp), mul64(&o, H, m->n_experts)); // experts + router
        if (m->shared_expert_ffn)
            mlp = add64(&o, mlp, add64(&o, mul64(&o, 3, mul64(&o, H, m->shared_expert_ffn)), H));
    }
    int64_t layer = add64(&o, add64(&o, attn, mlp), 2 * norm);
    int64_t total = add64(&o, mul64(&o, m->vocab_size, H), mul64(&o, m->n_layers, layer));
    total = add64(&o, total, norm);
    if (m->learned_pos) total = add64(&o, total, mul64(&o, m->max_pos, H));
    if (!m->tie_word_embeddings) total = add64(&o, total, mul64(&o, m->vocab_size, H));
    *out = total;
    return !o;
}

static void parse_torch_dtype(const mf_cfg *c, mf_model_config *m) {
    const char *w;
    const cJSON *v = mf_cfg_field(c, MF_CFG_NAMES("torch_dtype", "dtype"), &w);
    m->has_torch_dtype = false;
    if (!cJSON_IsString(v)) return; // informational only: anything else is ignored
    static const struct {
        const char *name;
        mf_dtype dt;
    } names[] = {{"float32", MF_DTYPE_F32}, {"float16", MF_DTYPE_F16}, {"bfloat16", MF_DTYPE_BF16}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(v->valuestring, names[i].name) == 0) {
            m->has_torch_dtype = true;
            m->torch_dtype = names[i].dt;
        }
    }
}

mf_status mf_model_config_check(const mf_cfg *c, mf_model_config *m) {
    parse_torch_dtype(c, m);
    if (m->n_kv_heads > m->n_heads)
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": n_kv_heads %lld exceeds n_heads %lld", c->fn,
                       (long long)m->n_kv_heads, (long long)m->n_heads);
    if (m->n_heads % m->n_kv_heads != 0)
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": n_heads %lld not divisible by n_kv_heads %lld", c->fn,
                       (long long)m->n_heads, (long long)m->n_kv_heads);
    if (m->head_dim == 0) {
        if (m->hidden % m->n_heads != 0)
            return mf_fail(MF_ERR_FORMAT, NAME_FMT ": hidden size %lld not divisible by n_heads %lld", c->fn,
                           (long long)m->hidden, (long long)m->n_heads);
        m->head_dim = m->hidden / m->n_heads;
    }
    if (!m->learned_pos && m->head_dim % 2 != 0)
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": head_dim %lld must be even for rotary embeddings", c->fn,
                       (long long)m->head_dim);
    // Row widths (q, and q|k|v fused) are indexed with 32-bit ints in kernels.
    int64_t qkv = (m->n_heads + 2 * m->n_kv_heads) * m->head_dim; // each factor < 2^31: no int64 overflow
    if (qkv > SIZE_MAX32)
        return mf_fail(MF_ERR_FORMAT,
                       NAME_FMT ": (n_heads %lld + 2 * n_kv_heads %lld) * head_dim %lld = %lld overflows 32 bits", c->fn,
                       (long long)m->n_heads, (long long)m->n_kv_heads, (long long)m->head_dim, (long long)qkv);
    if (!count_params(m, &m->n_params))
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": the parameter count of these sizes overflows int64", c->fn);
    return MF_OK;
}
