// Synthetic models: a preset spec and seeded random weights, so that
// benchmarks and tests need no download.
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/model_internal.h"

// GPT-2-shaped: LayerNorm, learned positions (16384 rows, so that the
// benchmark's longest sequences fit with room to decode), tanh GELU, biases, tied embeddings.
static mf_dec_spec gpt2_shaped(int32_t layers, int32_t hidden, int32_t heads) {
    mf_dec_spec s;
    memset(&s, 0, sizeof s);
    snprintf(s.arch, sizeof s.arch, "gpt2");
    s.n_layers = layers, s.hidden = hidden, s.n_heads = heads, s.n_kv_heads = heads;
    s.head_dim = hidden / heads, s.ffn = 4 * hidden, s.vocab = 50257, s.max_pos = 16384;
    s.layernorm = true, s.norm_eps = 1e-5f, s.final_norm = true, s.learned_pos = true;
    s.act = MF_DEC_ACT_GELU_TANH, s.qkv_bias = s.o_bias = s.mlp_bias = true, s.tied = true;
    s.bos_id = 50256, s.n_eos = 1, s.eos_ids[0] = 50256;
    return s;
}

// Llama-shaped: RMSNorm, RoPE, SwiGLU, GQA when kv_heads < heads, untied.
static mf_dec_spec llama_shaped(int32_t layers, int32_t hidden, int32_t heads, int32_t kv_heads, int32_t ffn,
                                int32_t vocab, int64_t max_pos) {
    mf_dec_spec s;
    memset(&s, 0, sizeof s);
    snprintf(s.arch, sizeof s.arch, "llama");
    s.n_layers = layers, s.hidden = hidden, s.n_heads = heads, s.n_kv_heads = kv_heads;
    s.head_dim = hidden / heads, s.ffn = ffn, s.vocab = vocab, s.max_pos = max_pos;
    s.layernorm = false, s.norm_eps = 1e-5f, s.final_norm = true, s.learned_pos = false, s.gated_mlp = true;
    s.act = MF_DEC_ACT_SILU, s.rope_theta = 10000.0;
    s.bos_id = 1, s.n_eos = 1, s.eos_ids[0] = 2;
    return s;
}

static const char *const presets = "small, medium, large, llama-7b, tiny, tiny-gpt2, tiny-postnorm";

static bool preset_spec(const char *name, mf_dec_spec *s) {
    if (!strcmp(name, "small")) *s = gpt2_shaped(12, 768, 12);
    else if (!strcmp(name, "medium")) *s = gpt2_shaped(24, 1024, 16);
    else if (!strcmp(name, "large")) *s = gpt2_shaped(32, 4096, 32);
    else if (!strcmp(name, "llama-7b")) *s = llama_shaped(32, 4096, 32, 32, 11008, 32000, 4096);
    else if (!strcmp(name, "tiny")) *s = llama_shaped(2, 64, 4, 2, 128, 512, 1024);
    else if (!strcmp(name, "tiny-gpt2") || !strcmp(name, "tiny-postnorm")) {
        *s = gpt2_shaped(2, 64, 4);
        s->vocab = 512, s->max_pos = 1024, s->bos_id = 511, s->eos_ids[0] = 511;
        if (!strcmp(name, "tiny-postnorm")) s->post_norm = true, s->final_norm = false;
    } else return false;
    return true;
}

mf_status mf_model_synthetic(const char *preset, uint64_t seed, mf_backend *be, const mf_model_opts *opts,
                             mf_model **out) {
    static const char fn[] = "model_synthetic";
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!preset) return mf_fail(MF_ERR_INVALID_ARG, "%s: preset is NULL (want one of: %s)", fn, presets);
    if (!be) return mf_fail(MF_ERR_INVALID_ARG, "%s: backend is NULL", fn);
    mf_dec_spec spec;
    if (!preset_spec(preset, &spec))
        return mf_fail(MF_ERR_INVALID_ARG, "%s: unknown preset '%s' (want one of: %s)", fn, preset, presets);
    MF_TRY(mf_dec_spec_check(&spec, fn));
    mf_model *m = NULL;
    MF_TRY(mf_model_alloc(be, opts, fn, &m));
    m->spec = spec;
    snprintf(m->source, sizeof m->source, "synthetic:%s", preset);
    mf_status s = mf_weights_random(m, seed, opts && opts->verbose);
    if (s != MF_OK) {
        mf_model_free(m);
        return s;
    }
    m->n_params = mf_dec_spec_params(&m->spec);
    *out = m;
    return MF_OK;
}
