// Internal: the MoE MLP of one decoder layer (Mixtral, Qwen2-MoE, the
// synthetic post-norm MoE model), as one call that mlp_block in forward.c
// can make instead of its dense FFN. It owns no weights and allocates
// nothing: the layer's tensors and the scratch come from the caller.
#ifndef MF_RUNTIME_MOE_BLOCK_H
#define MF_RUNTIME_MOE_BLOCK_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// One layer's MoE weights, torch Linear layouts, all in the model dtype.
typedef struct {
    mf_tensor router;          // (E, H)          Mixtral block_sparse_moe.gate / Qwen2-MoE mlp.gate
    mf_tensor w1;              // (E, 2I, H)      per expert gate rows | up rows (Mixtral w1 | w3)
    mf_tensor w2;              // (E, H, I)       per expert down (Mixtral w2)
    mf_tensor shared_w1;       // (2Is, H) or data NULL: no shared expert (Qwen2-MoE shared_expert gate|up)
    mf_tensor shared_w2;       // (H, Is)
    mf_tensor shared_gate;     // (1, H) or data NULL: ungated (Qwen2-MoE shared_expert_gate)
} mf_moe_layer;

// How a family routes (from config.json).
typedef struct {
    int32_t top_k;             // num_experts_per_tok
    bool renorm;               // Mixtral: true; Qwen2-MoE: norm_topk_prob
    mf_moe_score score;        // softmax for both families
    mf_moe_order order;        // score then top-k for both families
    float routed_scale;        // 1 unless the family scales (DeepSeek's routed_scaling_factor)
    mf_moe_ffn ffn;            // SwiGLU for Mixtral / Qwen2-MoE; GELU for the synthetic GPT-style model
} mf_moe_routing;

// out = MoE(x) for T = x.shape[0] tokens (x, out: (T, H)); residual NULL or
// (T, H) (then out = residual + MoE(x); out may be residual's view).
// workspace: workspace_bytes >= mf_moe_block_workspace(...) of the largest T.
mf_status mf_moe_block(mf_backend *be, const mf_moe_layer *L, const mf_moe_routing *r, const mf_tensor *x,
                       const mf_tensor *residual, const mf_tensor *out, void *workspace, size_t workspace_bytes);
// Whether mf_moe_block with these shapes (and this workspace) queues no host
// sync on be, so that a CUDA Graph can record it (mf_moe_capturable).
bool mf_moe_block_capturable(mf_backend *be, const mf_moe_layer *L, const mf_moe_routing *r, const mf_tensor *x,
                             const mf_tensor *out, void *workspace, size_t workspace_bytes);

mf_status mf_moe_block_workspace(mf_backend *be, const mf_moe_layer *L, const mf_moe_routing *r, const mf_tensor *x,
                                 const mf_tensor *out, size_t *bytes);

#ifdef __cplusplus
}
#endif
#endif // MF_RUNTIME_MOE_BLOCK_H
