// Internal: a Hugging Face config.json, parsed and validated.
//
// The family table (arch.c) finds the family from "architectures" (or
// model_type); the family's file reads its own fields through the readers
// below; mf_model_config_check then checks the shapes. Fields take HF's names in either spelling (GPT-2's n_embd or hidden_size)
// and HF's class defaults where a key is absent or null. Failures:
// MF_ERR_UNSUPPORTED for an architecture (or rope scaling, activation) minfer
// does not run, naming it and what is supported; MF_ERR_FORMAT for a missing
// or malformed field, naming the field and the file; MF_ERR_IO when the file
// cannot be read.
#ifndef MF_MODEL_CONFIG_H
#define MF_MODEL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "minfer/status.h"
#include "minfer/tensor.h"
#include "model/arch/spec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MF_ARCH_GPT2 = 0,      // GPT2LMHeadModel (model_type gpt2)
    MF_ARCH_LLAMA = 1,     // LlamaForCausalLM (llama)
    MF_ARCH_MISTRAL = 2,   // MistralForCausalLM (mistral): Llama + sliding window
    MF_ARCH_MIXTRAL = 3,   // MixtralForCausalLM (mixtral): Llama attention + top-k MoE MLP
    MF_ARCH_QWEN2_MOE = 4, // Qwen2MoeForCausalLM (qwen2_moe): qkv bias, MoE + gated shared expert
    MF_ARCH_QWEN2 = 5,     // Qwen2ForCausalLM (qwen2): Llama + q/k/v biases (Qwen2, Qwen2.5)
} mf_arch;             // which family reads which class: arch.h

typedef enum {
    MF_HIDDEN_ACT_GELU_TANH = 0, // gelu_new, gelu_pytorch_tanh, gelu_fast: 0.5x(1+tanh(√(2/π)(x+0.044715x³)))
    MF_HIDDEN_ACT_GELU = 1,      // gelu: exact, 0.5x(1+erf(x/√2))
    MF_HIDDEN_ACT_SILU = 2,      // silu / swish: x·sigmoid(x)
    MF_HIDDEN_ACT_RELU = 3,
} mf_hidden_act;

typedef enum {
    MF_NORM_LAYERNORM = 0, // (x-mean)/sqrt(var+eps)·w + b   (GPT-2)
    MF_NORM_RMSNORM = 1,   // x/sqrt(mean(x²)+eps)·w           (Llama family)
} mf_norm_type;

#define MF_MAX_EOS 16

typedef struct {
    mf_arch arch;
    char arch_name[64];       // "architectures"[0] as written, or the canonical name from model_type
    char model_type[32];      // "gpt2", "llama", ... ("" when absent)

    // sizes (all >= 1 and <= INT32_MAX)
    int64_t vocab_size;       // rows of the token embedding and of the LM head
    int64_t hidden;           // model width d_model (n_embd / hidden_size)
    int64_t n_layers;         // decoder blocks (n_layer / num_hidden_layers)
    int64_t n_heads;          // query heads (n_head / num_attention_heads)
    int64_t n_kv_heads;       // key/value heads (num_key_value_heads; = n_heads without GQA);
                              // n_heads % n_kv_heads == 0
    int64_t head_dim;         // per-head width: config "head_dim", else hidden / n_heads
                              // (q width n_heads*head_dim need not equal hidden then)
    int64_t ffn;              // MLP inner width (n_inner, default 4*hidden, / intermediate_size);
                              // per expert for MoE (qwen2_moe: moe_intermediate_size)
    int64_t max_pos;          // trained context (n_positions / max_position_embeddings);
                              // GPT-2: rows of the learned position table

    // layer structure (implied by the architecture, refined by flags)
    mf_norm_type norm;        // LayerNorm (GPT-2) or RMSNorm
    double norm_eps;          // layer_norm_epsilon / rms_norm_eps, > 0
    bool learned_pos;         // GPT-2: learned position embeddings (wpe); else RoPE
    bool gated_mlp;           // down(act(gate(x)) * up(x)) (SwiGLU); else proj(act(fc(x)))
    mf_hidden_act act;               // activation_function / hidden_act
    bool qkv_bias;            // q/k/v projections have biases (GPT-2, Qwen2, Llama attention_bias)
    bool o_bias;              // output projection has a bias (GPT-2, Llama attention_bias)
    bool mlp_bias;            // MLP projections have biases (GPT-2, Llama mlp_bias)
    bool tie_word_embeddings; // LM head = token embedding (no lm_head.weight); GPT-2 default true,
                              // Llama family default false

    // RoPE (learned_pos == false)
    double rope_theta;        // base of the rotary frequencies (default 10000; Mixtral 1e6)
    mf_rope_scaling rope_scaling;
    int64_t sliding_window;   // attend to the last sliding_window keys only; 0 = full attention

    // Mixture of experts (n_experts == 0: dense MLP)
    int64_t n_experts;          // num_local_experts (Mixtral) / num_experts (Qwen2-MoE)
    int64_t n_experts_per_tok;  // top-k, 1 <= k <= n_experts
    bool norm_topk_prob;        // renormalise the k routing weights to sum 1 (Mixtral: always)
    int64_t shared_expert_ffn;  // Qwen2-MoE: inner width of the sigmoid-gated shared expert; 0 = none

    // special tokens (from config.json; generation_config.json may override)
    int32_t bos_id;             // -1 when absent
    int32_t n_eos;              // 0 .. MF_MAX_EOS
    int32_t eos_ids[MF_MAX_EOS];// eos_token_id: an int or a list in the file

    bool has_torch_dtype;       // torch_dtype (or dtype) was float32/float16/bfloat16
    mf_dtype torch_dtype;       // dtype the checkpoint was saved in, when has_torch_dtype

    int64_t n_params;           // parameter count implied by the config (embeddings, all
                                // layers, final norm, LM head unless tied)
} mf_model_config;

// "gelu_tanh", "gelu", "silu", "relu".
const char *mf_hidden_act_name(mf_hidden_act a);

// ---- reading config.json's fields (the family files; config.c) ----------------------
// Every reader takes HF's names (the first present, non-null one wins), a
// default for absent or null keys (or an error naming the field when
// required), range-checks the value, and writes *out only on success.

typedef struct {
    const cJSON *obj;   // the object fields are read from
    const char *fn;     // file name for messages
    const char *prefix; // "" or "rope_scaling." for messages
} mf_cfg;

// A NULL-terminated list of alternative names: MF_CFG_NAMES("n_embd", "hidden_size").
#define MF_CFG_NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define MF_CFG_FN "%.200s"                 // how messages print the file name
#define MF_CFG_MAX32 ((int64_t)INT32_MAX)  // the upper bound of every size

// The first of names present with a non-null value (NULL when none); *which
// is set to its name, or to names[0].
const cJSON *mf_cfg_field(const mf_cfg *c, const char *const *names, const char **which);
// An integer in [lo, hi]; def when absent or null (or an error when required).
mf_status mf_cfg_int(const mf_cfg *c, const char *const *names, bool required, int64_t def, int64_t lo, int64_t hi,
                     int64_t *out);
// A finite number; *which: the name it came from.
mf_status mf_cfg_num(const mf_cfg *c, const char *const *names, bool required, double def, double *out,
                     const char **which);
// A number > 0 (epsilons, theta, scaling factors).
mf_status mf_cfg_pos(const mf_cfg *c, const char *const *names, bool required, double def, double *out);
mf_status mf_cfg_bool(const mf_cfg *c, const char *name, bool def, bool *out);
// A string; def when absent or null. *out points into the JSON.
mf_status mf_cfg_str(const mf_cfg *c, const char *const *names, const char *def, const char **out);
// An activation name (gelu_new, gelu_pytorch_tanh, gelu_fast, gelu, silu, swish, relu).
mf_status mf_cfg_act(const mf_cfg *c, const char *const *names, const char *def, mf_hidden_act *out);
// rope_theta (already read into *theta, overridden by rope_parameters) and
// rope_scaling / rope_parameters (none, linear, llama3).
mf_status mf_cfg_rope(const mf_cfg *c, double *theta, mf_rope_scaling *rs);
// bos_token_id / eos_token_id with the class defaults (-1: none).
mf_status mf_cfg_token_ids(const mf_cfg *c, mf_model_config *m, int32_t def_bos, int32_t def_eos);
// MF_ERR_UNSUPPORTED naming `name` when the field is present and not equal
// to `ok` (a number): a detail the decoder does not implement.
mf_status mf_cfg_refuse_num(const mf_cfg *c, const char *name, double ok, const char *why);

// The checks that tie a family's fields together (GQA, head_dim, widths that
// kernels index with 32 bits, the parameter count) and torch_dtype; after
// the family's parse_config.
mf_status mf_model_config_check(const mf_cfg *c, mf_model_config *m);

#ifdef __cplusplus
}
#endif
#endif // MF_MODEL_CONFIG_H
