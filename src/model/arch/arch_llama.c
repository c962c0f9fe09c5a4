// The Llama family (LlamaForCausalLM; MistralForCausalLM = Llama + a sliding
// window): RMSNorm, RoPE (plain, linear or llama3 scaling), SwiGLU, GQA,
// optional attention/MLP biases, untied LM head by default. Its config
// reading and weight names are shared with the families built on the same
// block (arch.h: mf_llama_parse_block, mf_llama_weight_map).
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/arch/arch.h"

#define N MF_CFG_NAMES

mf_status mf_llama_parse_block(const mf_cfg *c, mf_model_config *m, const mf_llama_defaults *d) {
    MF_TRY(mf_cfg_int(c, N("vocab_size"), true, 0, 1, MF_CFG_MAX32, &m->vocab_size));
    MF_TRY(mf_cfg_int(c, N("hidden_size"), true, 0, 1, MF_CFG_MAX32, &m->hidden));
    MF_TRY(mf_cfg_int(c, N("num_hidden_layers"), true, 0, 1, MF_CFG_MAX32, &m->n_layers));
    MF_TRY(mf_cfg_int(c, N("num_attention_heads"), true, 0, 1, MF_CFG_MAX32, &m->n_heads));
    MF_TRY(mf_cfg_int(c, N("num_key_value_heads"), false, m->n_heads, 1, MF_CFG_MAX32, &m->n_kv_heads));
    const char *w;
    m->head_dim = 0; // absent or null: hidden / n_heads, set by config.c
    if (mf_cfg_field(c, N("head_dim"), &w)) MF_TRY(mf_cfg_int(c, N("head_dim"), true, 0, 1, MF_CFG_MAX32, &m->head_dim));
    MF_TRY(mf_cfg_int(c, N(d->ffn_key ? d->ffn_key : "intermediate_size"), true, 0, 1, MF_CFG_MAX32, &m->ffn));
    MF_TRY(mf_cfg_int(c, N("max_position_embeddings"), false, d->max_pos, 1, MF_CFG_MAX32, &m->max_pos));
    MF_TRY(mf_cfg_pos(c, N("rms_norm_eps"), false, d->norm_eps, &m->norm_eps));
    MF_TRY(mf_cfg_act(c, N("hidden_act"), "silu", &m->act));
    MF_TRY(mf_cfg_pos(c, N("rope_theta"), false, d->rope_theta, &m->rope_theta));
    MF_TRY(mf_cfg_rope(c, &m->rope_theta, &m->rope_scaling));
    // Phi-3 / Gemma-style details the decoder does not have: refused by name.
    MF_TRY(mf_cfg_refuse_num(c, "partial_rotary_factor", 1.0, "RoPE on part of each head is not implemented"));
    MF_TRY(mf_cfg_bool(c, "tie_word_embeddings", false, &m->tie_word_embeddings));
    m->norm = MF_NORM_RMSNORM;
    m->learned_pos = false;
    m->gated_mlp = true;
    bool attn_bias = false;
    MF_TRY(mf_cfg_bool(c, "attention_bias", false, &attn_bias));
    MF_TRY(mf_cfg_bool(c, "mlp_bias", false, &m->mlp_bias));
    m->qkv_bias = m->o_bias = attn_bias;
    m->sliding_window = 0;
    return mf_cfg_token_ids(c, m, d->bos, d->eos);
}

// LlamaConfig and MistralConfig defaults; Mistral reads sliding_window
// (absent or null: full attention).
static mf_status llama_parse(const mf_cfg *c, mf_model_config *m) {
    const bool mistral = m->arch == MF_ARCH_MISTRAL;
    const mf_llama_defaults d = {.max_pos = mistral ? 131072 : 2048, .norm_eps = 1e-6, .rope_theta = 1e4, .bos = 1,
                                 .eos = 2};
    MF_TRY(mf_llama_parse_block(c, m, &d));
    if (mistral) MF_TRY(mf_cfg_int(c, N("sliding_window"), false, 0, 0, MF_CFG_MAX32, &m->sliding_window));
    return MF_OK;
}

// model.embed_tokens, model.layers.L.{input_layernorm, self_attn.{q,k,v,o}_proj,
// post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm, lm_head.
void mf_llama_map(const mf_dec_spec *sp, mf_weights *w, mf_wplan *p, mf_moe_map moe) {
    const int64_t h = sp->hidden, q = (int64_t)sp->n_heads * sp->head_dim, kv = (int64_t)sp->n_kv_heads * sp->head_dim;
    const int64_t f = sp->ffn;
    char base[3][128];
    const char *const b[3] = {base[0], base[1], base[2]};
    mf_wplan_mat(p, &w->tok_emb, false, sp->vocab, h, "model.embed_tokens.weight");
    for (int32_t l = 0; l < sp->n_layers; l++) {
        mf_layer_weights *L = &w->layers[l];
        mf_wplan_vec(p, &L->norm1_w, h, 1.0f, "model.layers.%d.input_layernorm.weight", l);
        if (sp->layernorm) mf_wplan_vec(p, &L->norm1_b, h, 0.0f, "model.layers.%d.input_layernorm.bias", l);
        snprintf(base[0], sizeof base[0], "model.layers.%d.self_attn.q_proj", l);
        snprintf(base[1], sizeof base[1], "model.layers.%d.self_attn.k_proj", l);
        snprintf(base[2], sizeof base[2], "model.layers.%d.self_attn.v_proj", l);
        const int64_t outs[3] = {q, kv, kv};
        mf_wplan_linears(p, L->qkv, &L->n_qkv, 3, b, outs, h, sp->qkv_bias);
        snprintf(base[0], sizeof base[0], "model.layers.%d.self_attn.o_proj", l);
        mf_wplan_linears(p, &L->o, NULL, 1, b, &h, q, sp->o_bias);
        mf_wplan_vec(p, &L->norm2_w, h, 1.0f, "model.layers.%d.post_attention_layernorm.weight", l);
        if (sp->layernorm) mf_wplan_vec(p, &L->norm2_b, h, 0.0f, "model.layers.%d.post_attention_layernorm.bias", l);
        if (moe) {
            moe(sp, L, p, l);
        } else if (sp->gated_mlp) {
            snprintf(base[0], sizeof base[0], "model.layers.%d.mlp.gate_proj", l);
            snprintf(base[1], sizeof base[1], "model.layers.%d.mlp.up_proj", l);
            const int64_t fo[2] = {f, f};
            mf_wplan_linears(p, L->up, &L->n_up, 2, b, fo, h, sp->mlp_bias);
        } else {
            snprintf(base[0], sizeof base[0], "model.layers.%d.mlp.up_proj", l);
            mf_wplan_linears(p, L->up, &L->n_up, 1, b, &f, h, sp->mlp_bias);
        }
        if (!moe) {
            snprintf(base[0], sizeof base[0], "model.layers.%d.mlp.down_proj", l);
            mf_wplan_linears(p, &L->down, NULL, 1, b, &h, f, sp->mlp_bias);
        }
    }
    if (sp->final_norm) {
        mf_wplan_vec(p, &w->final_w, h, 1.0f, "model.norm.weight");
        if (sp->layernorm) mf_wplan_vec(p, &w->final_b, h, 0.0f, "model.norm.bias");
    }
    if (!sp->tied) mf_wplan_mat(p, &w->lm_head.w, true, sp->vocab, h, "lm_head.weight");
}

void mf_llama_weight_map(const mf_dec_spec *sp, mf_weights *w, mf_wplan *p) { mf_llama_map(sp, w, p, NULL); }

void mf_moe_map_experts(const mf_dec_spec *sp, mf_layer_weights *L, mf_wplan *p, int32_t l, const char *router,
                        const char *experts, const char *const *names) {
    const int64_t h = sp->hidden, f = sp->ffn;
    char pre[3][128];
    snprintf(pre[0], sizeof pre[0], "model.layers.%d.%s.weight", l, router);
    const char *const r[1] = {pre[0]};
    const int64_t e_rows = sp->n_experts;
    mf_wplan_stack(p, &L->router, 0, 1, r, NULL, &e_rows, h);
    snprintf(pre[0], sizeof pre[0], "model.layers.%d.%s.", l, experts);
    const char *const pp[2] = {pre[0], pre[0]};
    char suf[3][32];
    for (int i = 0; i < 3; i++) snprintf(suf[i], sizeof suf[i], ".%s.weight", names[i]);
    const char *const s1[2] = {suf[0], suf[1]};
    const int64_t rows1[2] = {f, f};
    mf_wplan_stack(p, &L->experts_w1, sp->n_experts, sp->gated_mlp ? 2 : 1, pp, s1, rows1, h);
    const char *const s2[1] = {suf[2]};
    mf_wplan_stack(p, &L->experts_w2, sp->n_experts, 1, pp, s2, &h, f);
}

// ---- synthetic presets: Llama-shaped (RMSNorm, RoPE, SwiGLU, GQA when
// kv_heads < heads, untied) --------------------------------------------------------

static void llama_shaped(mf_dec_spec *s, int32_t layers, int32_t hidden, int32_t heads, int32_t kv_heads, int32_t ffn,
                         int32_t vocab, int64_t max_pos) {
    snprintf(s->arch, sizeof s->arch, "llama");
    s->n_layers = layers, s->hidden = hidden, s->n_heads = heads, s->n_kv_heads = kv_heads;
    s->head_dim = hidden / heads, s->ffn = ffn, s->vocab = vocab, s->max_pos = max_pos;
    s->layernorm = false, s->norm_eps = 1e-5f, s->final_norm = true, s->learned_pos = false, s->gated_mlp = true;
    s->act = MF_ACT_SILU, s->rope_theta = 10000.0;
    s->bos_id = 1, s->n_eos = 1, s->eos_ids[0] = 2;
}

static void llama_7b(mf_dec_spec *s) { llama_shaped(s, 32, 4096, 32, 32, 11008, 32000, 4096); }
static void tiny(mf_dec_spec *s) { llama_shaped(s, 2, 64, 4, 2, 128, 512, 1024); }
static void tiny_geglu(mf_dec_spec *s) { // hidden_act gelu_pytorch_tanh (Gemma-style gated GELU): tests
    tiny(s);
    s->act = MF_ACT_GELU_TANH;
}

static const mf_arch_class classes[] = {
    {"LlamaForCausalLM", "llama", MF_ARCH_LLAMA},
    {"MistralForCausalLM", "mistral", MF_ARCH_MISTRAL},
};
static const mf_arch_preset presets[] = {{"llama-7b", llama_7b}, {"tiny", tiny}, {"tiny-geglu", tiny_geglu}};

const mf_family mf_family_llama = {
    .name = "llama",
    .about = "Llama 1-3, Mistral (RMSNorm, RoPE, SwiGLU, GQA)",
    .classes = classes,
    .n_classes = (int)(sizeof classes / sizeof classes[0]),
    .parse_config = llama_parse,
    .weight_map = mf_llama_weight_map,
    .presets = presets,
    .n_presets = (int)(sizeof presets / sizeof presets[0]),
};
