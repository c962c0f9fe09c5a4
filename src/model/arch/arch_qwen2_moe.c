// The Qwen2-MoE family (Qwen2MoeForCausalLM): Qwen2 attention (q/k/v biases
// per config.json qkv_bias, none on o) and a mixture-of-experts MLP on every
// layer (HF Qwen2MoeSparseMoeBlock): the router (mlp.gate) softmax over all
// experts, top-k, renormalised only when norm_topk_prob; SwiGLU experts
// (gate_proj, up_proj, down_proj of width moe_intermediate_size), plus a
// shared expert (width shared_expert_intermediate_size) on every token whose
// output is scaled by sigmoid(x . shared_expert_gate). Checkpoints with dense
// layers (decoder_sparse_step > 1, mlp_only_layers) are refused naming the field.
#include <stdio.h>

#include "core/error.h"
#include "model/arch/arch.h"

#define N MF_CFG_NAMES

static mf_status qwen2_moe_parse(const mf_cfg *c, mf_model_config *m) {
    const mf_llama_defaults d = {.max_pos = 32768, .norm_eps = 1e-6, .rope_theta = 1e4, .bos = -1, .eos = -1,
                                 .ffn_key = "moe_intermediate_size"};
    MF_TRY(mf_llama_parse_block(c, m, &d));
    MF_TRY(mf_cfg_bool(c, "qkv_bias", true, &m->qkv_bias)); // Qwen2MoeConfig.qkv_bias (default true); none on o
    m->o_bias = false;
    MF_TRY(mf_cfg_int(c, N("shared_expert_intermediate_size"), false, 0, 0, MF_CFG_MAX32, &m->shared_expert_ffn));
    bool use = false;
    MF_TRY(mf_cfg_bool(c, "use_sliding_window", false, &use));
    if (use) MF_TRY(mf_cfg_int(c, N("sliding_window"), false, 0, 0, MF_CFG_MAX32, &m->sliding_window));
    MF_TRY(mf_cfg_int(c, N("num_experts"), false, 60, 1, MF_CFG_MAX32, &m->n_experts));
    MF_TRY(mf_cfg_int(c, N("num_experts_per_tok"), false, 4, 1, MF_CFG_MAX32, &m->n_experts_per_tok));
    MF_TRY(mf_cfg_bool(c, "norm_topk_prob", false, &m->norm_topk_prob));
    // HF: layer i is sparse when i is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0.
    // minfer runs every layer sparse or none.
    int64_t step = 1;
    MF_TRY(mf_cfg_int(c, N("decoder_sparse_step"), false, 1, 1, MF_CFG_MAX32, &step));
    if (step != 1)
        return mf_fail(MF_ERR_UNSUPPORTED,
                       MF_CFG_FN ": decoder_sparse_step %lld: only layers i with (i + 1) %% %lld == 0 are "
                       "mixture-of-experts, the others dense; minfer runs every layer sparse (decoder_sparse_step 1)",
                       c->fn, (long long)step, (long long)step);
    const char *w;
    const cJSON *only = mf_cfg_field(c, N("mlp_only_layers"), &w);
    if (cJSON_IsArray(only) && only->child)
        return mf_fail(MF_ERR_UNSUPPORTED,
                       MF_CFG_FN ": mlp_only_layers lists %d dense layers; minfer runs every layer "
                       "mixture-of-experts (mlp_only_layers empty)",
                       c->fn, cJSON_GetArraySize(only));
    if (only && !cJSON_IsArray(only) && !cJSON_IsNull(only))
        return mf_fail(MF_ERR_FORMAT, MF_CFG_FN ": mlp_only_layers must be a list of layer indices", c->fn);
    if (m->n_experts_per_tok > m->n_experts)
        return mf_fail(MF_ERR_FORMAT, MF_CFG_FN ": num_experts_per_tok %lld exceeds the %lld experts", c->fn,
                       (long long)m->n_experts_per_tok, (long long)m->n_experts);
    return MF_OK;
}

// The shared expert always has its sigmoid gate (HF builds shared_expert_gate with it).
static mf_status qwen2_moe_to_spec(const mf_model_config *c, const char *path, mf_dec_spec *s) {
    (void)c, (void)path;
    s->shared_gated = s->shared_ffn > 0;
    return MF_OK;
}

// Layer l's MLP: mlp.gate (E, H); mlp.experts.E.gate_proj | up_proj packed
// into (E, 2I, H), down_proj into (E, H, I); mlp.shared_expert.gate_proj |
// up_proj stacked (2Is, H), down_proj (H, Is); mlp.shared_expert_gate (1, H).
static void qwen2_moe_mlp(const mf_dec_spec *sp, mf_layer_weights *L, mf_wplan *p, int32_t l) {
    static const char *const names[3] = {"gate_proj", "up_proj", "down_proj"};
    mf_moe_map_experts(sp, L, p, l, "mlp.gate", "mlp.experts", names);
    if (sp->shared_ffn <= 0) return;
    const int64_t h = sp->hidden, is = sp->shared_ffn, one = 1;
    char n[3][128];
    snprintf(n[0], sizeof n[0], "model.layers.%d.mlp.shared_expert.gate_proj.weight", l);
    snprintf(n[1], sizeof n[1], "model.layers.%d.mlp.shared_expert.up_proj.weight", l);
    snprintf(n[2], sizeof n[2], "model.layers.%d.mlp.shared_expert.down_proj.weight", l);
    const char *const gu[2] = {n[0], n[1]}, *const dn[1] = {n[2]};
    const int64_t rows[2] = {is, is};
    mf_wplan_stack(p, &L->shared_w1, 0, 2, gu, NULL, rows, h);
    mf_wplan_stack(p, &L->shared_w2, 0, 1, dn, NULL, &h, is);
    if (!sp->shared_gated) return;
    snprintf(n[0], sizeof n[0], "model.layers.%d.mlp.shared_expert_gate.weight", l);
    const char *const g[1] = {n[0]};
    mf_wplan_stack(p, &L->shared_gate, 0, 1, g, NULL, &one, h);
}

static void qwen2_moe_map(const mf_dec_spec *sp, mf_weights *w, mf_wplan *p) { mf_llama_map(sp, w, p, qwen2_moe_mlp); }

static const mf_arch_class classes[] = {{"Qwen2MoeForCausalLM", "qwen2_moe", MF_ARCH_QWEN2_MOE}};

const mf_family mf_family_qwen2_moe = {
    .name = "qwen2_moe",
    .about = "Qwen2-MoE, Qwen1.5-MoE (Qwen2 attention, mixture of experts with a sigmoid-gated shared expert)",
    .classes = classes,
    .n_classes = 1,
    .parse_config = qwen2_moe_parse,
    .to_spec = qwen2_moe_to_spec,
    .weight_map = qwen2_moe_map,
};
