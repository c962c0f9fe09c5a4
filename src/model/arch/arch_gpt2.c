// The GPT-2 family (GPT2LMHeadModel): LayerNorm with biases, learned
// positions, gelu_new MLP, Conv1D weights stored (in, out), tied embeddings.
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/arch/arch.h"

#define N MF_CFG_NAMES

// GPT2Config: names and defaults.
static mf_status gpt2_parse(const mf_cfg *c, mf_model_config *m) {
    MF_TRY(mf_cfg_int(c, N("vocab_size"), true, 0, 1, MF_CFG_MAX32, &m->vocab_size));
    MF_TRY(mf_cfg_int(c, N("n_embd", "hidden_size"), true, 0, 1, MF_CFG_MAX32, &m->hidden));
    MF_TRY(mf_cfg_int(c, N("n_layer", "num_hidden_layers"), true, 0, 1, MF_CFG_MAX32, &m->n_layers));
    MF_TRY(mf_cfg_int(c, N("n_head", "num_attention_heads"), true, 0, 1, MF_CFG_MAX32, &m->n_heads));
    m->n_kv_heads = m->n_heads;
    m->head_dim = 0; // hidden / n_heads, checked by config.c
    MF_TRY(mf_cfg_int(c, N("n_inner"), false, 4 * m->hidden, 1, MF_CFG_MAX32, &m->ffn));
    MF_TRY(mf_cfg_int(c, N("n_positions", "max_position_embeddings", "n_ctx"), false, 1024, 1, MF_CFG_MAX32,
                      &m->max_pos));
    MF_TRY(mf_cfg_pos(c, N("layer_norm_epsilon"), false, 1e-5, &m->norm_eps));
    MF_TRY(mf_cfg_act(c, N("activation_function"), "gelu_new", &m->act));
    m->norm = MF_NORM_LAYERNORM;
    m->learned_pos = true;
    m->gated_mlp = false;
    m->qkv_bias = m->o_bias = m->mlp_bias = true;
    MF_TRY(mf_cfg_bool(c, "tie_word_embeddings", true, &m->tie_word_embeddings));
    bool scale = true, by_layer = false;
    MF_TRY(mf_cfg_bool(c, "scale_attn_weights", true, &scale));
    MF_TRY(mf_cfg_bool(c, "scale_attn_by_inverse_layer_idx", false, &by_layer));
    if (!scale || by_layer)
        return mf_fail(MF_ERR_UNSUPPORTED,
                       MF_CFG_FN ": GPT-2 attention scaling other than 1/sqrt(head_dim) unsupported "
                                 "(scale_attn_weights=%s, scale_attn_by_inverse_layer_idx=%s)",
                       c->fn, scale ? "true" : "false", by_layer ? "true" : "false");
    m->rope_theta = 0;
    return mf_cfg_token_ids(c, m, 50256, 50256);
}

// Tensor names: "transformer." + wte, wpe, h.L.{ln_1, attn.c_attn, attn.c_proj,
// ln_2, mlp.c_fc, mlp.c_proj}, ln_f; the original OpenAI files have no prefix.
static void gpt2_weights(const mf_dec_spec *sp, mf_weights *w, mf_wplan *p) {
    const int64_t h = sp->hidden, q = (int64_t)sp->n_heads * sp->head_dim, kv = (int64_t)sp->n_kv_heads * sp->head_dim;
    const int64_t f = sp->ffn;
    const char *pre = mf_wplan_has(p, "wte.weight") && !mf_wplan_has(p, "transformer.wte.weight") ? "" : "transformer.";
    mf_wplan_mat(p, &w->tok_emb, false, sp->vocab, h, "%swte.weight", pre);
    if (sp->learned_pos) mf_wplan_mat(p, &w->pos_emb, false, sp->max_pos, h, "%swpe.weight", pre);
    for (int32_t l = 0; l < sp->n_layers; l++) {
        mf_layer_weights *L = &w->layers[l];
        mf_wplan_vec(p, &L->norm1_w, h, 1.0f, "%sh.%d.ln_1.weight", pre, l);
        mf_wplan_vec(p, &L->norm1_b, h, 0.0f, "%sh.%d.ln_1.bias", pre, l);
        mf_wplan_conv1d(p, &L->qkv[0], h, q + 2 * kv, "%sh.%d.attn.c_attn", pre, l);
        L->n_qkv = 1;
        mf_wplan_conv1d(p, &L->o, q, h, "%sh.%d.attn.c_proj", pre, l);
        mf_wplan_vec(p, &L->norm2_w, h, 1.0f, "%sh.%d.ln_2.weight", pre, l);
        mf_wplan_vec(p, &L->norm2_b, h, 0.0f, "%sh.%d.ln_2.bias", pre, l);
        if (sp->n_experts > 0) { // the synthetic MoE presets only (no GPT-2 checkpoint has experts)
            static const char *const names[3] = {"fc1", "fc1", "fc2"}; // ungated: names[1] unused
            mf_moe_map_experts(sp, L, p, l, "moe.gate", "moe.experts", names);
            continue;
        }
        mf_wplan_conv1d(p, &L->up[0], h, f, "%sh.%d.mlp.c_fc", pre, l);
        L->n_up = 1;
        mf_wplan_conv1d(p, &L->down, f, h, "%sh.%d.mlp.c_proj", pre, l);
    }
    if (sp->final_norm) {
        mf_wplan_vec(p, &w->final_w, h, 1.0f, "%sln_f.weight", pre);
        mf_wplan_vec(p, &w->final_b, h, 0.0f, "%sln_f.bias", pre);
    }
    if (!sp->tied) mf_wplan_mat(p, &w->lm_head.w, true, sp->vocab, h, "lm_head.weight");
}

// ---- synthetic presets: GPT-2-shaped (16384 learned positions, so that the
// benchmark's longest sequences fit with room to decode) --------------------------

static void gpt2_shaped(mf_dec_spec *s, int32_t layers, int32_t hidden, int32_t heads) {
    snprintf(s->arch, sizeof s->arch, "gpt2");
    s->n_layers = layers, s->hidden = hidden, s->n_heads = heads, s->n_kv_heads = heads;
    s->head_dim = hidden / heads, s->ffn = 4 * hidden, s->vocab = 50257, s->max_pos = 16384;
    s->layernorm = true, s->norm_eps = 1e-5f, s->final_norm = true, s->learned_pos = true;
    s->act = MF_ACT_GELU_TANH, s->qkv_bias = s->o_bias = s->mlp_bias = true, s->tied = true;
    s->bos_id = 50256, s->n_eos = 1, s->eos_ids[0] = 50256;
}

static void small(mf_dec_spec *s) { gpt2_shaped(s, 12, 768, 12); }
static void medium(mf_dec_spec *s) { gpt2_shaped(s, 24, 1024, 16); }
static void large(mf_dec_spec *s) { gpt2_shaped(s, 32, 4096, 32); }
static void tiny_gpt2(mf_dec_spec *s) {
    gpt2_shaped(s, 2, 64, 4);
    s->vocab = 512, s->max_pos = 1024, s->bos_id = 511, s->eos_ids[0] = 511;
}
static void tiny_postnorm(mf_dec_spec *s) { // the norms after the residual adds
    tiny_gpt2(s);
    s->post_norm = true, s->final_norm = false;
}

// The brief's end-to-end model: attention -> add & norm -> MoE -> add & norm
// (post-norm, GPT-2's attention, LayerNorm and learned positions), each MLP
// a top-2 mixture of 8 ungated tanh-GELU experts of width 4 hidden (no
// biases: mf_moe's experts have none), softmax routing renormalised over the
// two (Mixtral's convention). "moe-small": the brief's Small (12 layers, 768
// hidden, 12 heads) with those experts, for `minfer bench model`.
static void moe_postnorm(mf_dec_spec *s) {
    s->post_norm = true, s->final_norm = false;
    s->mlp_bias = false;
    s->n_experts = 8, s->top_k = 2, s->moe_renorm = true;
}
static void tiny_moe_postnorm(mf_dec_spec *s) {
    tiny_gpt2(s);
    moe_postnorm(s);
}
static void moe_small(mf_dec_spec *s) {
    small(s);
    moe_postnorm(s);
}

static const mf_arch_class classes[] = {{"GPT2LMHeadModel", "gpt2", MF_ARCH_GPT2}};
static const mf_arch_preset presets[] = {
    {"small", small},         {"medium", medium},       {"large", large}, {"tiny-gpt2", tiny_gpt2},
    {"tiny-postnorm", tiny_postnorm}, {"tiny-moe-postnorm", tiny_moe_postnorm}, {"moe-small", moe_small},
};

const mf_family mf_family_gpt2 = {
    .name = "gpt2",
    .about = "GPT-2 (LayerNorm, learned positions, gelu_new, Conv1D weights)",
    .classes = classes,
    .n_classes = 1,
    .parse_config = gpt2_parse,
    .weight_map = gpt2_weights,
    .presets = presets,
    .n_presets = (int)(sizeof presets / sizeof presets[0]),
};
