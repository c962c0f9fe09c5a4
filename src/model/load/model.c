// Models: loading a Hugging Face checkpoint directory (config.json ->
// mf_dec_spec through the family table, safetensors -> weights,
// tokenizer.json), info and free.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/fileio.h"
#include "model/arch/config.h"
#include "model/load/model.h"

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

// Whether the checkpoint carries a chat template: tokenizer_config.json's
// chat_template (a string or a list of named ones), or chat_template.jinja
// (where newer transformers save it). Only reported; a malformed
// tokenizer_config.json is the tokenizer's error, not this one's.
static bool has_chat_template(const char *dir) {
    bool yes = false;
    struct stat sb;
    char *path = mf_path_join(dir, "chat_template.jinja");
    if (path && stat(path, &sb) == 0) yes = true;
    free(path);
    path = yes ? NULL : mf_path_join(dir, "tokenizer_config.json");
    char *text = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    if (path && stat(path, &sb) == 0 && mf_file_read_all(path, 64 << 20, &text, &len) == MF_OK &&
        mf_json_parse(text, len, path, "tokenizer config", &root) == MF_OK) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
        yes = (cJSON_IsString(t) && t->valuestring[0]) || (cJSON_IsArray(t) && t->child);
    }
    cJSON_Delete(root);
    free(text);
    free(path);
    mf_clear_error();
    return yes;
}

static mf_status check_opts(const char *fn, mf_backend *be, const mf_model_opts *opts, mf_model *m) {
    m->dtype = MF_DTYPE_BF16;
    m->attn = MF_ATTN_FLASH;
    const bool dtype_auto = !opts || opts->dtype_auto;
    if (opts) {
        if (!dtype_auto && opts->dtype != MF_DTYPE_F32 && opts->dtype != MF_DTYPE_F16 && opts->dtype != MF_DTYPE_BF16)
            return mf_fail(MF_ERR_INVALID_ARG, "%s: opts->dtype %s (want f32, f16 or bf16)", fn,
                           mf_dtype_name(opts->dtype));
        if (!dtype_auto) m->dtype = opts->dtype;
        if (opts->attn && strcmp(opts->attn, "classic") == 0)
            m->attn = MF_ATTN_CLASSIC;
        else if (opts->attn && strcmp(opts->attn, "flash") != 0)
            return mf_fail(MF_ERR_UNSUPPORTED, "%s: attention '%s' unknown (available: flash, classic)", fn,
                           opts->attn);
    }
    m->mat_dtype = m->dtype;
    const bool cpu = mf_backend_device(be) == MF_DEVICE_CPU;
    if (cpu) { // the CPU computes in f32; its GEMM reads 16-bit weights
        m->mat_auto = dtype_auto;
        m->mmap = opts && opts->mmap;
        if (dtype_auto) m->mat_dtype = MF_DTYPE_F32; // for matrices that are not all f16 or all bf16
        m->dtype = MF_DTYPE_F32;
    }
    // The KV cache: the activations' dtype unless asked (the CPU's attention
    // also reads an f16/bf16 cache with f32 q and o; CUDA's does not).
    m->kv_dtype = cpu ? MF_CPU_KV_DEFAULT : m->dtype;
    const char *kv = opts ? opts->kv_dtype : NULL;
    if (kv && strcmp(kv, "auto") != 0) {
        if (!strcmp(kv, "f32"))
            m->kv_dtype = MF_DTYPE_F32;
        else if (!strcmp(kv, "f16"))
            m->kv_dtype = MF_DTYPE_F16;
        else if (!strcmp(kv, "bf16"))
            m->kv_dtype = MF_DTYPE_BF16;
        else
            return mf_fail(MF_ERR_INVALID_ARG, "%s: opts->kv_dtype '%s' (want auto, f32, f16 or bf16)", fn, kv);
        if (!cpu && m->kv_dtype != m->dtype)
            return mf_fail(MF_ERR_UNSUPPORTED, "%s: kv_dtype %s with %s activations: the %s backend keeps the KV cache "
                           "in the activation dtype", fn, kv, mf_dtype_name(m->dtype), mf_backend_name(be));
    }
    return MF_OK;
}

mf_status mf_model_alloc(mf_backend *be, const mf_model_opts *opts, const char *fn, mf_model **out) {
    mf_model *m = mf_calloc(1, sizeof *m);
    if (!m) return mf_fail(MF_ERR_OOM, "%s: out of host memory", fn);
    m->be = be;
    const mf_status s = check_opts(fn, be, opts, m);
    if (s != MF_OK) {
        free(m);
        return s;
    }
    *out = m;
    return MF_OK;
}

mf_weights_target mf_model_wtarget(const mf_model *m, bool verbose) {
    return (mf_weights_target){.spec = &m->spec, .map = m->fam ? m->fam->weight_map : NULL, .be = m->be, .dtype = m->dtype,
                               .mat_dtype = m->mat_dtype, .mat_auto = m->mat_auto, .mmap = m->mmap, .verbose = verbose};
}

void mf_model_moe_args(const mf_model *m, int32_t l, mf_moe_args *a) {
    const mf_dec_spec *sp = &m->spec;
    const mf_layer_weights *L = &m->w.layers[l];
    *a = (mf_moe_args){.w_router = L->router, .w1 = L->experts_w1, .w2 = L->experts_w2,
                       .ffn = sp->gated_mlp ? MF_MOE_FFN_SWIGLU : MF_MOE_FFN_GELU, .top_k = sp->top_k,
                       .score = MF_MOE_SCORE_SOFTMAX, .order = MF_MOE_SCORE_THEN_TOPK, .renorm = sp->moe_renorm,
                       .routed_scale = 1.0f};
    if (L->shared_w1.data) {
        a->shared_w1 = &L->shared_w1, a->shared_w2 = &L->shared_w2;
        if (L->shared_gate.data) a->shared_gate = &L->shared_gate;
    }
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
    m->dir = mf_malloc(strlen(dir) + 1);
    if (!m->dir) {
        mf_model_free(m);
        return mf_fail(MF_ERR_OOM, "%s: out of host memory", fn);
    }
    memcpy(m->dir, dir, strlen(dir) + 1);
    const bool verbose = opts && opts->verbose;

    mf_model_config cfg;
    mf_st_file *st = NULL;
    char *cfg_path = mf_path_join(dir, "config.json");
    mf_status s = cfg_path ? mf_model_config_load(cfg_path, &cfg) : mf_fail(MF_ERR_OOM, "%s: out of host memory", fn);
    if (s == MF_OK) s = mf_spec_from_config(&cfg, cfg_path, &m->spec, &m->fam);
    if (s == MF_OK) snprintf(m->hf_class, sizeof m->hf_class, "%s", cfg.arch_name);
    free(cfg_path);
    if (s == MF_OK) s = read_generation_config(dir, &m->spec);
    if (s == MF_OK) s = mf_st_open_dir(dir, &st);
    if (s == MF_OK) {
        if (verbose) {
            char desc[256];
            fprintf(stderr, "minfer: %s: %s\n", dir, mf_model_config_describe(&cfg, desc, sizeof desc));
        }
        const mf_weights_target t = mf_model_wtarget(m, verbose);
        s = mf_weights_load(&m->w, &t, st); // owns st from here
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
    m->chat_template = has_chat_template(dir);
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
    free(m->dir);
    free(m);
}

mf_status mf_model_get_info(const mf_model *m, mf_model_info *out) {
    if (!m) return mf_fail(MF_ERR_INVALID_ARG, "model_get_info: model is NULL");
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "model_get_info: out is NULL");
    const mf_dec_spec *s = &m->spec;
    *out = (mf_model_info){
        .arch = s->arch, .n_params = m->n_params, .n_layers = s->n_layers, .hidden = s->hidden,
        .n_heads = s->n_heads, .n_kv_heads = s->n_kv_heads, .head_dim = s->head_dim, .ffn = s->ffn,
        .vocab = s->vocab, .max_pos = s->max_pos, .dtype = m->w.mat_dtype, .act_dtype = m->dtype,
        .kv_dtype = m->kv_dtype, .weight_bytes = m->w.weight_bytes,
        .kv_bytes_per_token = 2 * (int64_t)s->n_layers * s->n_kv_heads * s->head_dim * (int64_t)mf_dtype_size(m->kv_dtype),
        .bos_id = s->bos_id, .eos_id = s->n_eos > 0 ? s->eos_ids[0] : -1, .n_eos = s->n_eos,
        .backend = mf_backend_name(m->be), .source = m->source, .family = m->fam ? m->fam->name : s->arch,
        .family_about = m->fam ? m->fam->about : "", .hf_class = m->hf_class, .chat_template = m->chat_template,
        .sliding_window = s->sliding_window, .n_experts = s->n_experts, .top_k = s->top_k,
        .shared_ffn = s->shared_ffn, .n_active_params = mf_dec_spec_active_params(s),
        .layer_matmul_params = mf_dec_spec_matmul_params(s)};
    memcpy(out->eos_ids, s->eos_ids, (size_t)s->n_eos * sizeof *s->eos_ids);
    return MF_OK;
}

const mf_tokenizer *mf_model_tokenizer(const mf_model *m) { return m ? m->tok : NULL; }
