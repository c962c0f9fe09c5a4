// Internal: struct mf_model (a spec, its family, weights, tokenizer).
//
// model.c loads one from a checkpoint (config.json through the family table,
// arch.h), synthetic.c from a preset; spec.h is the decoder they describe.
#ifndef MF_MODEL_LOAD_MODEL_H
#define MF_MODEL_LOAD_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "minfer/model.h"
#include "minfer/ops.h"
#include "model/arch/arch.h"
#include "model/arch/spec.h"
#include "model/load/weights.h"

#ifdef __cplusplus
extern "C" {
#endif

// The CPU's KV cache dtype when none is asked (mf_model_opts.kv_dtype
// "auto"): chosen by measurement, docs/notes/cpu.md.
#define MF_CPU_KV_DEFAULT MF_DTYPE_F32

typedef enum {
    MF_ATTN_FLASH = 0,        // mf_attention: online softmax, no scores buffer (the default)
    MF_ATTN_CLASSIC = 1,      // QK^T GEMM -> mf_softmax -> P.V GEMM (the "before", and a reference)
} mf_attn_kind;

struct mf_model {
    mf_backend *be;           // not owned
    mf_dec_spec spec;
    const mf_family *fam;     // the architecture family (arch.h)
    mf_dtype dtype;           // activations (and the KV cache on CUDA); CUDA: every weight too (CPU: f32)
    mf_dtype kv_dtype;        // the KV cache (mf_model_opts.kv_dtype; CUDA: dtype)
    mf_dtype mat_dtype;       // the weight matrices asked for (CUDA: dtype; CPU: f32, f16 or bf16)
    bool mat_auto;            // CPU: matrices keep their checkpoint's f16/bf16 (opts NULL or dtype_auto)
    bool mmap;                // CPU: matrices used in place from the file mapping (opts->mmap)
    mf_attn_kind attn;        // what its sessions run (mf_model_opts.attn)
    mf_weights w;
    mf_tokenizer *tok;        // NULL: none
    int64_t n_params;
    char source[256];         // checkpoint directory or "synthetic:PRESET"
    char hf_class[64];        // config.json "architectures"[0] ("" for synthetic)
    bool chat_template;       // tokenizer_config.json chat_template or chat_template.jinja present
    char *dir;                // the checkpoint folder (mf_model_chat_template reads it); NULL: synthetic
};

// A zeroed model on be with the dtypes opts ask for (CPU: activations f32);
// validates opts. `fn` names the caller in messages.
mf_status mf_model_alloc(mf_backend *be, const mf_model_opts *opts, const char *fn, mf_model **out);
// What m's weights are loaded for: its spec, family, backend and dtypes.
mf_weights_target mf_model_wtarget(const mf_model *m, bool verbose);
// Layer l's experts and the spec's routing as mf_moe takes them (spec
// n_experts > 0); x, out, residual and the workspace are left to the caller.
void mf_model_moe_args(const mf_model *m, int32_t l, mf_moe_args *a);

#ifdef __cplusplus
}
#endif
#endif // MF_MODEL_LOAD_MODEL_H
