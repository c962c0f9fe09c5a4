// The Qwen2-MoE family (Qwen2MoeForCausalLM): Qwen2 attention (q/k/v biases)
// and a top-k mixture-of-experts MLP with a sigmoid-gated shared expert. The
// config is read; the decoder is not written yet (no weight map), so loading
// is refused.
#include "core/error.h"
#include "model/arch.h"

#define N MF_CFG_NAMES

static mf_status qwen2_moe_parse(const mf_cfg *c, mf_model_config *m) {
    const mf_llama_defaults d = {.max_pos = 32768, .norm_eps = 1e-6, .rope_theta = 1e4, .bos = -1, .eos = -1,
                                 .ffn_key = "moe_intermediate_size"};
    MF_TRY(mf_llama_parse_block(c, m, &d));
    m->qkv_bias = true; // Qwen2: q/k/v biases, none on o
    MF_TRY(mf_cfg_int(c, N("shared_expert_intermediate_size"), false, 0, 0, MF_CFG_MAX32, &m->shared_expert_ffn));
    bool use = false;
    MF_TRY(mf_cfg_bool(c, "use_sliding_window", false, &use));
    if (use) MF_TRY(mf_cfg_int(c, N("sliding_window"), false, 0, 0, MF_CFG_MAX32, &m->sliding_window));
    MF_TRY(mf_cfg_int(c, N("num_experts"), false, 60, 1, MF_CFG_MAX32, &m->n_experts));
    MF_TRY(mf_cfg_int(c, N("num_experts_per_tok"), false, 4, 1, MF_CFG_MAX32, &m->n_experts_per_tok));
    MF_TRY(mf_cfg_bool(c, "norm_topk_prob", false, &m->norm_topk_prob));
    int64_t step = 1;
    MF_TRY(mf_cfg_int(c, N("decoder_sparse_step"), false, 1, 1, MF_CFG_MAX32, &step));
    const char *w;
    const cJSON *only = mf_cfg_field(c, N("mlp_only_layers"), &w);
    if (step != 1 || (cJSON_IsArray(only) && only->child))
        return mf_fail(MF_ERR_UNSUPPORTED,
                       MF_CFG_FN ": Qwen2-MoE with dense layers (decoder_sparse_step %lld, mlp_only_layers) unsupported",
                       c->fn, (long long)step);
    if (m->n_experts_per_tok > m->n_experts)
        return mf_fail(MF_ERR_FORMAT, MF_CFG_FN ": num_experts_per_tok %lld exceeds the %lld experts", c->fn,
                       (long long)m->n_experts_per_tok, (long long)m->n_experts);
    return MF_OK;
}

static const mf_arch_class classes[] = {{"Qwen2MoeForCausalLM", "qwen2_moe", MF_ARCH_QWEN2_MOE}};

const mf_family mf_family_qwen2_moe = {
    .name = "qwen2_moe",
    .about = "Qwen2-MoE (Qwen2 attention, mixture of experts with a shared expert)",
    .classes = classes,
    .n_classes = 1,
    .parse_config = qwen2_moe_parse,
    .missing = "its mixture-of-experts MLP is not implemented",
};
