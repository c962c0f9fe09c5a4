// The Mixtral family (MixtralForCausalLM): Llama attention (with Mistral's
// sliding window) and a top-k mixture-of-experts MLP on every layer: the
// router (block_sparse_moe.gate) softmax over all experts, top-k, the k
// weights renormalised to sum 1 (HF MixtralSparseMoeBlock), SwiGLU experts
// w1 (gate), w3 (up), w2 (down), no shared expert.
#include "core/error.h"
#include "model/arch/arch.h"

#define N MF_CFG_NAMES

static mf_status mixtral_parse(const mf_cfg *c, mf_model_config *m) {
    const mf_llama_defaults d = {.max_pos = 131072, .norm_eps = 1e-5, .rope_theta = 1e6, .bos = 1, .eos = 2};
    MF_TRY(mf_llama_parse_block(c, m, &d));
    MF_TRY(mf_cfg_int(c, N("sliding_window"), false, 0, 0, MF_CFG_MAX32, &m->sliding_window));
    MF_TRY(mf_cfg_int(c, N("num_local_experts"), false, 8, 1, MF_CFG_MAX32, &m->n_experts));
    MF_TRY(mf_cfg_int(c, N("num_experts_per_tok"), false, 2, 1, MF_CFG_MAX32, &m->n_experts_per_tok));
    m->norm_topk_prob = true;
    if (m->n_experts_per_tok > m->n_experts)
        return mf_fail(MF_ERR_FORMAT, MF_CFG_FN ": num_experts_per_tok %lld exceeds the %lld experts", c->fn,
                       (long long)m->n_experts_per_tok, (long long)m->n_experts);
    return MF_OK;
}

// Layer l's MLP: experts.E.w1 | w3 packed into (E, 2I, H), w2 into (E, H, I).
static void mixtral_moe(const mf_dec_spec *sp, mf_layer_weights *L, mf_wplan *p, int32_t l) {
    static const char *const names[3] = {"w1", "w3", "w2"};
    mf_moe_map_experts(sp, L, p, l, "block_sparse_moe.gate", "block_sparse_moe.experts", names);
}

static void mixtral_map(const mf_dec_spec *sp, mf_weights *w, mf_wplan *p) { mf_llama_map(sp, w, p, mixtral_moe); }

static const mf_arch_class classes[] = {{"MixtralForCausalLM", "mixtral", MF_ARCH_MIXTRAL}};

const mf_family mf_family_mixtral = {
    .name = "mixtral",
    .about = "Mixtral (Llama attention, top-k mixture-of-experts MLP)",
    .classes = classes,
    .n_classes = 1,
    .parse_config = mixtral_parse,
    .weight_map = mixtral_map,
};
