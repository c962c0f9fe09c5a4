// Internal: the decoder a model runs (mf_dec_spec), its checks and the
// numbers it implies.
//
// The spec is the one place where an architecture becomes numbers and flags:
// each family's file (arch_<family>.c) derives it from config.json or from a
// synthetic preset; the forward pass (forward.c) reads nothing else. HF's
// names stay in the family files (config.h, which takes its RoPE scaling
// from here); the activation is the op's (mf_act_kind).
#ifndef MF_MODEL_SPEC_H
#define MF_MODEL_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "minfer/model.h"
#include "minfer/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MF_ROPE_SCALING_NONE = 0,
    MF_ROPE_SCALING_LINEAR = 1, // positions divided by factor
    MF_ROPE_SCALING_LLAMA3 = 2, // per-frequency: wavelengths above original_max_pos/low_freq_factor
                                // divided by factor, below .../high_freq_factor kept, smooth between
} mf_rope_scaling_type;

typedef struct {
    mf_rope_scaling_type type;
    double factor;             // linear, llama3: > 0
    double low_freq_factor;    // llama3: > 0
    double high_freq_factor;   // llama3: > low_freq_factor
    int64_t original_max_pos;  // llama3: original_max_position_embeddings (>= 1)
} mf_rope_scaling;

typedef struct {
    char arch[16];            // "gpt2" | "llama" | "mistral" | "qwen2" (what mf_model_info reports)
    int32_t n_layers;
    int32_t hidden;           // residual stream width
    int32_t n_heads;          // query heads
    int32_t n_kv_heads;       // key/value heads; n_heads % n_kv_heads == 0 (GQA)
    int32_t head_dim;         // D; q width n_heads * D need not equal hidden
    int32_t ffn;              // MLP inner width (an MoE layer: each expert's)
    int32_t vocab;
    int64_t max_pos;          // learned positions: rows of wpe (a hard limit); RoPE: trained context

    bool layernorm;           // LayerNorm with bias (GPT-2); false: RMSNorm
    float norm_eps;
    bool post_norm;           // norm after each residual add (x = norm(x + f(x))); false: pre-norm
    bool final_norm;          // a norm before the LM head (always with pre-norm)
    bool learned_pos;         // position table added to the token embedding; false: RoPE
    bool gated_mlp;           // down(act(gate(x)) * up(x)); false: proj(act(fc(x)))
    mf_act_kind act;          // the MLP's (mf_act): SwiGLU's silu; GPT-2's gelu_tanh (fused into the fc GEMM)
    bool qkv_bias, o_bias, mlp_bias;
    bool tied;                // LM head = token embedding, transposed

    // Mixture of experts: n_experts > 0 makes every layer's MLP a routed one
    // (mf_moe): the router's softmax over all experts, the top_k largest,
    // optionally renormalised to sum 1; each expert the MLP that gated_mlp /
    // act describe (SwiGLU, or GELU-tanh ungated) of width ffn, no biases.
    int32_t n_experts;        // E (0: dense MLP)
    int32_t top_k;            // experts per token, 1..min(E, 8)
    bool moe_renorm;          // divide the k weights by their sum (Mixtral; Qwen2-MoE norm_topk_prob)
    int32_t shared_ffn;       // width of a shared expert every token goes through; 0: none
    bool shared_gated;        // the shared expert's output times sigmoid(x . w_gate)

    double rope_theta;        // RoPE base
    mf_rope_scaling rope_scaling;
    int64_t sliding_window;   // 0: full attention; else each query sees its last sliding_window keys

    int32_t bos_id;           // -1 when unknown
    int32_t n_eos;
    int32_t eos_ids[MF_MODEL_MAX_EOS];
} mf_dec_spec;

// Checks a spec's sizes and flags (the synthetic presets and config.json both
// go through it); `who` names the source in messages.
mf_status mf_dec_spec_check(const mf_dec_spec *s, const char *who);
// Parameters the spec implies (tied embeddings once); with experts, all of them.
int64_t mf_dec_spec_params(const mf_dec_spec *s);
// Parameters one token runs through: as mf_dec_spec_params, but top_k of the
// n_experts experts (the router and the shared expert count in full).
int64_t mf_dec_spec_active_params(const mf_dec_spec *s);
// The weights of all layers that one token multiplies by (the router, top_k
// experts and the shared one; no embeddings, norms, biases or LM head).
int64_t mf_dec_spec_matmul_params(const mf_dec_spec *s);
// RoPE inverse frequencies (head_dim / 2 of them) as HF computes them in f32,
// with linear or llama3 scaling applied.
void mf_dec_spec_inv_freq(const mf_dec_spec *s, float *out);

#ifdef __cplusplus
}
#endif
#endif // MF_MODEL_SPEC_H
