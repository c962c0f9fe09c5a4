// Internal: the backend interface. Every op goes through one of these entries;
// the public mf_* functions in src/ops/ validate arguments first, so entries
// only check what their backend supports (returning MF_ERR_UNSUPPORTED with
// the reason). A NULL op entry means "not implemented on this backend".
#ifndef MF_BACKEND_INTERNAL_H
#define MF_BACKEND_INTERNAL_H

#include "minfer/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mf_backend {
    const char *name;  // "cpu" | "cuda"
    mf_device device;
    void *ctx;         // backend-private state
    bool mixed_weights; // gemm / moe take f16 or bf16 weights (b, w*) with f32 activations (the CPU)

    void (*destroy)(mf_backend *be);
    mf_status (*alloc)(mf_backend *be, size_t bytes, void **out);
    void (*dealloc)(mf_backend *be, void *p);
    mf_status (*copy)(mf_backend *be, void *dst, const void *src, size_t bytes, mf_copy_kind kind);
    mf_status (*memset)(mf_backend *be, void *dst, int value, size_t bytes);
    mf_status (*sync)(mf_backend *be);
    mf_status (*set_stream)(mf_backend *be, void *stream);

    // ops (arguments already validated by src/ops/)
    mf_status (*gemm)(mf_backend *be, const mf_gemm_args *args);
    mf_status (*add_norm)(mf_backend *be, const mf_norm_args *args);
    mf_status (*embed)(mf_backend *be, const mf_embed_args *args);
    mf_status (*add)(mf_backend *be, const mf_add_args *args);
    mf_status (*softmax)(mf_backend *be, const mf_softmax_args *args);
    mf_status (*rope)(mf_backend *be, const mf_rope_args *args);
    mf_status (*act)(mf_backend *be, const mf_act_args *args);
    mf_status (*copy_tensor)(mf_backend *be, const mf_copy_args *args);
    mf_status (*attention)(mf_backend *be, const mf_attention_args *args);
    // bytes of split-KV workspace attention could use for args (NULL entry: 0)
    mf_status (*attention_workspace)(mf_backend *be, const mf_attention_args *args, size_t *bytes);
    mf_status (*kv_write)(mf_backend *be, const mf_kv_write_args *args);

    // Graphs (CUDA Graphs; NULL entries: not supported, e.g. the CPU): the ops
    // queued between graph_begin and graph_end are recorded, not run, into an
    // executable graph; graph_launch queues one replay of it. Between begin and
    // end nothing may synchronise (no D2H copy, no sync). graph_end always
    // ends the recording, also when an op failed during it (then it returns
    // that failure's status and no graph).
    mf_status (*graph_begin)(mf_backend *be);
    mf_status (*graph_end)(mf_backend *be, void **graph);
    mf_status (*graph_launch)(mf_backend *be, void *graph);
    void (*graph_free)(mf_backend *be, void *graph);

    mf_status (*argmax)(mf_backend *be, const mf_argmax_args *args);
    mf_status (*topk)(mf_backend *be, const mf_topk_args *args);
    // MoE parts (mf_moe composes them in src/ops/moe.c); moe_experts NULL, or
    // returning MF_ERR_UNSUPPORTED (it declines these shapes): src/ops/moe.c
    // runs its generic loop of mf_gemm / mf_act per expert
    mf_status (*moe_router)(mf_backend *be, const mf_moe_router_args *args);
    mf_status (*moe_permute)(mf_backend *be, const mf_moe_permute_args *args);
    mf_status (*moe_experts)(mf_backend *be, const mf_moe_experts_args *args);
    // Whether moe_experts with these (validated) args queues no host read-back
    // or sync, so that a graph can record it (NULL: never; the generic loop reads
    // the offsets back).
    // At most MF_MOE_DECODE_MAX_ROWS routed rows (assignments T * top_k) take
    // such a path on CUDA (its decode kernels, src/cuda/moe.cu): 32 = a decode
    // batch of 16 x top-2 (derivation: docs/notes/moe.md).
    bool (*moe_experts_capturable)(mf_backend *be, const mf_moe_experts_args *args);
    mf_status (*moe_combine)(mf_backend *be, const mf_moe_combine_args *args);
};

#define MF_MOE_DECODE_MAX_ROWS 32

mf_status mf_backend_cpu_create(mf_backend **out);

#ifdef MF_HAVE_CUDA
// In src/cuda/backend_cuda.cu. MF_ERR_UNSUPPORTED "no CUDA device" when none.
mf_status mf_backend_cuda_create(mf_backend **out);
bool mf_backend_cuda_usable(void);
const char *mf_backend_cuda_info(void); // "cuda 13.0 runtime, 1 device(s)"
#endif

#ifdef __cplusplus
}
#endif
#endif // MF_BACKEND_INTERNAL_H
