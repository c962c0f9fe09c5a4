// Models: loading a Hugging Face checkpoint directory (config.json ->
// mf_dec_spec, safetensors -> weights, tokenizer.json), info and free.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "core/alloc.h"
#include "core/error.h"
#include "model/config.h"
#include "model/fileio.h"
#include "model/model_internal.h"

mf_status mf_dec_spec_check(const mf_dec_spec *s, const char *who) {
    if (s->n_layers < 1 || s->hidden < 1 || s->n_heads < 1 || s->n_kv_heads < 1 || s->head_dim < 1 || s->ffn < 1 ||
        s->vocab < 1 || s->max_pos < 1)
        return mf_fail(MF_ERR_FORMAT,
                       "%s: sizes must be >= 1 (layers %d, hidden %d, heads %d, kv heads %d, head_dim %d, ffn %d, "
                       "vocab %d, max_pos %lld)",
                       who, s->n_layers, s->hidden, s->n_heads, s->n_kv_heads, s->head_dim, s->ffn, s->vocab,
                       (long long)s->max_pos);
    if (s->n_heads % s->n_kv_heads != 0)
        return mf_fail(MF_ERR_FORMAT, "%s: n_heads %d not divisible by n_kv_heads %d", who, s->n_heads, s->n_kv_heads);
    if (!s->learned_pos && s->head_dim % 2 != 0)
        return mf_fail(MF_ERR_FORMAT, "%s: head_dim %d must be even for rotary embeddings", who, s->head_dim);
    if (!(s->norm_eps >= 0.0f) || !isfinite(s->norm_eps))
        return mf_fail(MF_ERR_FORMAT, "%s: norm eps %g invalid", who, (double)s->norm_eps);
    if (!s->learned_pos && !(s->rope_theta > 0.0))
        return mf_fail(MF_ERR_FORMAT, "%s: rope_theta %g must be > 0", who, s->rope_theta);
    if (!s->post_norm && !s->final_norm)
        return mf_fail(MF_ERR_FORMAT, "%s: a pre-norm decoder needs a final norm", who);
    if (s->post_norm && s->gated_mlp)
        return mf_fail(MF_ERR_UNSUPPORTED, "%s: post-norm with a gated MLP is not a layout minfer knows", who);
    return MF_OK;
}

int64_t mf_dec_spec_params(const mf_dec_spec *s) {
    const int64_t h = s->hidden, q = (int64_t)s->n_heads * s->head_dim, kv = (int64_t)s->n_kv_heads * s->head_dim;
    const int64_t f = s->ffn, nb = s->layernorm ? 2 : 1; // norm: weight (+ bias)
    int64_t layer = h * (q + 2 * kv) + q * h + nb * h * 2;
    if (s->qkv_bias) layer += q + 2 * kv;
    if (s->o_bias) layer += h;
    layer += (s->gated_mlp ? 3 : 2) * h * f;
    if (s->mlp_bias) layer += (s->gated_mlp ? 2 * f : f) + h;
    int64_t n = (int64_t)s->vocab * h + layer * s->n_layers;
    if (s->learned_pos) n += s->max_pos * h;
    if (s->final_norm) n += nb * h;
    if (!s->tied) n += (int64_t)s->vocab * h;
    return n;
}

// HF's _compute_default_rope_parameters (+ linear / llama3 scaling), in f32
// as torch computes it, so that the angles match the reference bit for bit
// as far as possible.
void mf_dec_spec_inv_freq(const mf_dec_spec *s, float *out) {
    const int32_t half = s->head_dim / 2;
    for (int32_t i = 0; i < half; i++) {
        const float e = (float)(2 * i) / (float)s->head_dim;
        float f = (float)(1.0 / pow(s->rope_theta, (double)e));
        if (s->rope_scaling == MF_DEC_ROPE_LINEAR) f = f / (float)s->rope_factor;
        if (s->rope_scaling == MF_DEC_ROPE_LLAMA3) {
            const float factor = (float)s->rope_factor, lo = (float)s->rope_low_freq, hi = (float)s->rope_high_freq;
            const float old = (float)s->rope_orig_max_pos;
            const float lo_wavelen = old / lo, hi_wavelen = old / hi;
            const float wavelen = (1.0f / f) * 6.2831853071795864f; // torch: 2*pi / t is t.reciprocal() * 2*pi
            float g = wavelen > lo_wavelen ? f / factor : f; // long wavelengths: scaled down
            if (!(wavelen < hi_wavelen) && !(wavelen > lo_wavelen)) { // between: smooth
                const float smooth = (old / wavelen - lo) / (hi - lo);
                g = (1.0f - smooth) * g / factor + smooth * g;
            }
            f = g;
        }
        out[i] = f;
    }
}

// config.json -> spec. Refuses what the decoder cannot run (MoE for now).
static mf_status spec_from_config(const mf_model_config *c, const char *path, mf_dec_spec *s) {
    memset(s, 0, sizeof *s);
    switch (c->arch) {
    case MF_ARCH_GPT2: snprintf(s->arch, sizeof s->arch, "gpt2"); break;
    case MF_ARCH_LLAMA: snprintf(s->arch, sizeof s->arch, "llama"); break;
    case MF_ARCH_MISTRAL: snprintf(s->arch, sizeof s->arch, "mistral"); break;
    default:
        return mf_fail(MF_ERR_UNSUPPORTED,
                       "%s: architecture %s (%s) is not supported by the decoder yet: its mixture-of-experts MLP "
                       "is not implemented (supported: gpt2, llama, mistral)",
                       path, c->arch_name, mf_arch_name(c->arch));
    }
    if (c->n_experts > 0)
        return mf_fail(MF_ERR_UNSUPPORTED, "%s: %lld experts: the mixture-of-experts MLP is not implemented yet", path,
                       (long long)c->n_experts);
    s->n_layers = (int32_t)c->n_layers;
    s->hidden = (int32_t)c->hidden;
    s->n_heads = (int32_t)c->n_heads;
    s->n_kv_heads = (int32_t)c->n_kv_heads;
    s->head_dim = (int32_t)c->head_dim;
    s->ffn = (int32_t)c->ffn;
    s->vocab = (int32_t)c->vocab_size;
    s->max_pos = c->max_pos;
    s->layernorm = c->norm == MF_NORM_LAYERNORM;
    s->norm_eps = (float)c->norm_eps;
    s->post_norm = false; // both real architectures are pre-norm
    s->final_norm = true;
    s->learned_pos = c->learned_pos;
    s->gated_mlp = c->gated_mlp;
    switch (c->act) {
    case MF_HIDDEN_ACT_GELU_TANH: s->act = MF_DEC_ACT_GELU_TANH; break;
    case MF_HIDDEN_ACT_GELU: s->act = MF_DEC_ACT_GELU_ERF; break;
    case MF_HIDDEN_ACT_SILU: s->act = MF_DEC_ACT_SILU; break;
    default:
        return mf_fail(MF_ERR_UNSUPPORTED, "%s: activation %s is not supported by the decoder (gelu_new, gelu, silu)",
                       path, mf_hidden_act_name(c->act));
    }
    s->qkv_bias = c->qkv_bias;
    s->o_bias = c->o_bias;
    s->mlp_bias = c->mlp_bias;
    s->tied = c->tie_word_embeddings;
    s->rope_theta = c->rope_theta;
    switch (c->rope_scaling.type) {
    case MF_ROPE_SCALING_NONE: s->rope_scaling = MF_DEC_ROPE_NONE; break;
    case MF_ROPE_SCALING_LINEAR: s->rope_scaling = MF_DEC_ROPE_LINEAR; break;
    case MF_ROPE_SCALING_LLAMA3: s->rope_scaling = MF_DEC_ROPE_LLAMA3; break;
    }
    s->rope_factor = c->rope_scaling.factor;
    s->rope_low_freq = c->rope_scaling.low_freq_factor;
    s->rope_high_freq = c->rope_scaling.high_freq_factor;
    s->rope_orig_max_pos = c->rope_scaling.original_max_pos;
    s->sliding_window = c->sliding_window;
    s->bos_id = c->bos_id;
    s->n_eos = c->n_eos < MF_MODEL_MAX_EOS ? c->n_eos : MF_MODEL_MAX_EOS;
    for (int32_t i = 0; i < s->n_eos; i++) s->eos_ids[i] = c->eos_ids[i];
    return mf_dec_spec_check(s, path);
}

// generation_config.json, when present, overrides bos/eos (as transformers'
// generate() does). A malformed file is an error; absent keys are not.
static mf_status read_generation_config(const char *dir, mf_dec_spec *s) {
    char *path = mf_path_join(dir, "generation_config.json");
    if (!path) return mf_fail(MF_ERR_OOM, "model: out of host memory");
    struct stat sb;
    if (stat(path, &sb) != 0) {
        free(path);
        return MF_OK;
    }
    char *text = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    mf_status st = mf_file_read_all(path, 1 << 20, &text, &len);
    if (st == MF_OK) st = mf_json_parse(text, len, path, "generation config", &root);
    if (st == MF_OK && !cJSON_IsObject(root)) st = mf_fail(MF_ERR_FORMAT, "%s: not a JSON object", path);
    if (st == MF_OK) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "bos_token_id");
        if (cJSON_IsNumber(b) && b->valuedouble >= 0 && b->valuedouble < 2147483647.0) s->bos_id = (int32_t)b->valuedouble;
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
        if (cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble < 2147483647.0) {
            s->n_eos = 1;
            s->eos_ids[0] = (int32_t)e->valuedouble;
        } else if (cJSON_IsArray(e)) {
            int32_t n = 0;
            const cJSON *it;
            cJSON_ArrayForEach(it, e) {
                if (cJSON_IsNumber(it) && it->valuedouble >= 0 && it->valuedouble < 2147483647.0 && n < MF_MODEL_MAX_EOS)
                    s->eos_ids[n++] = (int32_t)it->valuedouble;
            }
            if (n > 0) s->n_eos = n;
        }
    }
    cJSON_Delete(root);
    free(text);
    free(path);
    return st;
}

static mf_status check_opts(const char *fn, mf_backend *be, const mf_model_opts *opts, mf_dtype *dt,
                            mf_attn_kind *attn) {
    *dt = MF_DTYPE_BF16;
    *attn = MF_ATTN_FLASH;
    if (opts) {
        if (opts->dtype != MF_DTYPE_F32 && opts->dtype != MF_DTYPE_F16 && opts->dtype != MF_DTYPE_BF16)
            return mf_fail(MF_ERR_INVALID_ARG, "%s: opts->dtype %s (want f32, f16 or bf16)", fn,
                           mf_dtype_name(opts->dtype));
        *dt = opts->dtype;
        if (opts->attn && strcmp(opts->attn, "classic") == 0)
            *attn = MF_ATTN_CLASSIC;
        else if (opts->attn && strcmp(opts->attn, "flash") != 0)
            return mf_fail(MF_ERR_UNSUPPORTED, "%s: attention '%s' unknown (available: flash, classic)", fn,
                           opts->attn);
    }
    if (mf_backend_device(be) == MF_DEVICE_CPU) *dt = MF_DTYPE_F32; // the CPU computes in f32
    return MF_OK;
}

mf_status mf_model_alloc(mf_backend *be, const mf_model_opts *opts, const char *fn, mf_model **out) {
    mf_dtype dt;
    mf_attn_kind attn;
    MF_TRY(check_opts(fn, be, opts, &dt, &attn));
    mf_model *m = mf_calloc(1, sizeof *m);
    if (!m) return mf_fail(MF_ERR_OOM, "%s: out of host memory", fn);
    m->be = be;
    m->dtype = dt;
    m->attn = attn;
    *out = m;
    return MF_OK;
}

mf_status mf_model_load(const char *dir, mf_backend *be, const mf_model_opts *opts, mf_model **out) {
    static const char fn[] = "model_load";
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!dir) return mf_fail(MF_ERR_INVALID_ARG, "%s: dir is NULL", fn);
    if (!be) return mf_fail(MF_ERR_INVALID_ARG, "%s: backend is NULL", fn);
    mf_model *m = NULL;
    MF_TRY(mf_model_alloc(be, opts, fn, &m));
    snprintf(m->source, sizeof m->source, "%s", dir);
    const bool verbose = opts && opts->verbose;

    mf_model_config cfg;
    mf_st_file *st = NULL;
    char *cfg_path = mf_path_join(dir, "config.json");
    mf_status s = cfg_path ? mf_model_config_load(cfg_path, &cfg) : mf_fail(MF_ERR_OOM, "%s: out of host memory", fn);
    if (s == MF_OK) s = spec_from_config(&cfg, cfg_path, &m->spec);
    free(cfg_path);
    if (s == MF_OK) s = read_generation_config(dir, &m->spec);
    if (s == MF_OK) s = mf_st_open_dir(dir, &st);
    if (s == MF_OK) {
        if (verbose) {
            char desc[256];
            fprintf(stderr, "minfer: %s: %s\n", dir, mf_model_config_describe(&cfg, desc, sizeof desc));
        }
        s = mf_weights_load(m, st, verbose); // owns st from here
    }
    if (s == MF_OK) {
        char *tj = mf_path_join(dir, "tokenizer.json");
        struct stat sb;
        if (!tj) {
            s = mf_fail(MF_ERR_OOM, "%s: out of host memory", fn);
        } else if (stat(tj, &sb) == 0) {
            s = mf_tokenizer_load(tj, &m->tok);
        }
        free(tj);
    }
    if (s != MF_OK) {
        mf_model_free(m);
        return s;
    }
    if (m->tok && m->spec.bos_id < 0) m->spec.bos_id = mf_tokenizer_bos_id(m->tok);
    if (m->tok && m->spec.n_eos == 0 && mf_tokenizer_eos_id(m->tok) >= 0) {
        m->spec.n_eos = 1;
        m->spec.eos_ids[0] = mf_tokenizer_eos_id(m->tok);
    }
    m->n_params = mf_dec_spec_params(&m->spec);
    *out = m;
    return MF_OK;
}

void mf_model_free(mf_model *m) {
    if (!m) return;
    mf_weights_free(&m->w);
    mf_tokenizer_free(m->tok);
    free(m);
}

mf_status mf_model_get_info(const mf_model *m, mf_model_info *out) {
    if (!m) return mf_fail(MF_ERR_INVALID_ARG, "model_get_info: model is NULL");
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "model_get_info: out is NULL");
    const mf_dec_spec *s = &m->spec;
    memset(out, 0, sizeof *out);
    out->arch = s->arch;
    out->n_params = m->n_params;
    out->n_layers = s->n_layers;
    out->hidden = s->hidden;
    out->n_heads = s->n_heads;
    out->n_kv_heads = s->n_kv_heads;
    out->head_dim = s->head_dim;
    out->ffn = s->ffn;
    out->vocab = s->vocab;
    out->max_pos = s->max_pos;
    out->dtype = m->dtype;
    out->weight_bytes = m->w.weight_bytes;
    out->kv_bytes_per_token =
        2 * (int64_t)s->n_layers * s->n_kv_heads * s->head_dim * (int64_t)mf_dtype_size(m->dtype);
    out->bos_id = s->bos_id;
    out->eos_id = s->n_eos > 0 ? s->eos_ids[0] : -1;
    out->n_eos = s->n_eos;
    for (int32_t i = 0; i < s->n_eos; i++) out->eos_ids[i] = s->eos_ids[i];
    out->backend = mf_backend_name(m->be);
    out->source = m->source;
    return MF_OK;
}

const mf_tokenizer *mf_model_tokenizer(const mf_model *m) { return m ? m->tok : NULL; }
