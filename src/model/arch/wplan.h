// Internal: a model's weights as tensor views (mf_weights), and the planner a
// family's weight map (arch.h) fills them through: one slot per view, named
// after the checkpoint's tensors, which the loader (load/weights.c) checks
// against the checkpoint, places and fills. No backend and no file here, so
// that the config parser's fuzz target links the family table alone.
//
// Every matrix is seen as the GEMM `b` operand it is used as, (in, out):
// a torch Linear weight (out, in) is seen transposed (free), GPT-2's Conv1D
// weight is already (in, out) (the CPU stores a copied one as (out, in)
// too: the decode GEMV streams a Linear's rows, load/weights.c). Where weights are copied anyway (CUDA, or a
// CPU checkpoint in f16/bf16), Llama's q|k|v and gate|up are stacked into one
// matrix each so that one GEMM computes them; f32 weights used in place from
// the mmap keep them separate (n_qkv == 3, n_up == 2), and the forward writes
// the separate GEMMs side by side into the same output.
#ifndef MF_MODEL_WPLAN_H
#define MF_MODEL_WPLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "minfer/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mf_st_file;
struct mf_st_tensor;

typedef struct {
    mf_tensor w;    // (in, out) GEMM b operand
    mf_tensor bias; // (out); bias.data == NULL: none
} mf_linear;

typedef struct {
    mf_tensor norm1_w, norm1_b; // (hidden): the attention's norm (GPT-2 ln_1, Llama input_layernorm);
                                // norm*_b.data NULL for RMSNorm
    mf_tensor norm2_w, norm2_b; // (hidden): the MLP's (ln_2, post_attention_layernorm)
    mf_linear qkv[3];           // fused (hidden, (H + 2G) * D), or q (hidden, H*D), k, v (hidden, G*D)
    int32_t n_qkv;              // 1 or 3
    mf_linear o;                // (H*D, hidden)
    mf_linear up[2];            // gated: gate|up (hidden, 2*ffn) or gate, up (hidden, ffn); dense: fc (hidden, ffn)
    int32_t n_up;               // 1 or 2
    mf_linear down;             // (ffn, hidden): down_proj / mlp.c_proj
    // Mixture of experts (spec n_experts > 0; up and down are then unused).
    // Torch Linear layouts (out, in), as mf_moe takes them; always copied
    // (the experts are packed at load: one tensor for all E).
    mf_tensor router;           // (E, hidden): router logits = x . router^T
    mf_tensor experts_w1;       // (E, 2 ffn, hidden) gated: per expert gate rows | up rows; (E, ffn, hidden) GELU
    mf_tensor experts_w2;       // (E, hidden, ffn): per expert down
    mf_tensor shared_w1;        // (2 shared_ffn, hidden) gate | up; data NULL: no shared expert
    mf_tensor shared_w2;        // (hidden, shared_ffn)
    mf_tensor shared_gate;      // (1, hidden); data NULL: ungated shared expert
} mf_layer_weights;

typedef struct {
    mf_tensor tok_emb;          // (vocab, hidden)
    mf_tensor pos_emb;          // (max_pos, hidden) learned positions; data NULL for RoPE
    mf_layer_weights *layers;   // (n_layers), host array of views
    mf_tensor final_w, final_b; // (hidden) final norm; data NULL when the model has none
    mf_linear lm_head;          // (hidden, vocab): lm_head.weight^T, or tok_emb^T when tied
    mf_tensor inv_freq;         // (head_dim / 2) f32 RoPE frequencies; data NULL without RoPE
    void *block;                // the one backend allocation
    int64_t block_bytes;
    int64_t weight_bytes;       // bytes of weights on the backend (block + used in place)
    mf_dtype mat_dtype;         // the dtype of most of the matrices' bytes
    struct mf_st_file *st;      // the checkpoint, kept mapped while views point into it (load/safetensors.h)
    mf_backend *be;
} mf_weights;

// ---- the planner a family's weight map calls (wplan.c) ------------------------------------
// One call per destination view, in any order; names are printf formats.
// Sizes are what the spec implies: a checkpoint tensor of another shape or
// dtype, or a missing one, fails the load naming the tensor and its file.
typedef struct mf_wplan mf_wplan;

// Whether the checkpoint has tensor `name` (false for random weights): for
// layouts that differ by prefix (GPT-2's "transformer.").
bool mf_wplan_has(const mf_wplan *p, const char *name);
// A vector (n) NAME; random init: mean + 0.02 N(0, 1) (mean 1 for norm gains, 0 for biases).
void mf_wplan_vec(mf_wplan *p, mf_tensor *dst, int64_t n, float mean, const char *fmt, ...) MF_PRINTF(5, 6);
// A matrix NAME stored (rows, cols); transposed: seen as (cols, rows) (a torch
// Linear weight seen as the GEMM b operand (in, out)).
void mf_wplan_mat(mf_wplan *p, mf_tensor *dst, bool transposed, int64_t rows, int64_t cols, const char *fmt, ...)
    MF_PRINTF(6, 7);
// n torch Linear layers base[i].weight (out[i], in) (+ base[i].bias when
// bias): stacked into lin[0] when the load copies weights anyway (*n_out = 1),
// else lin[0..n) (*n_out = n); n_out may be NULL when n == 1.
void mf_wplan_linears(mf_wplan *p, mf_linear *lin, int32_t *n_out, int n, const char *const *base,
                      const int64_t *out, int64_t in, bool bias);
// n_src (1..3) torch-layout matrices stacked along dim 0 into one (sum rows,
// cols) view, never transposed, always copied (the shared expert's gate|up).
// With n_rep > 0 (experts), n_rep groups of those: source j of group e is
// named prefix[j] + e + suffix[j] (".experts.3.w1.weight"), and the view is
// (n_rep, sum rows, cols).
void mf_wplan_stack(mf_wplan *p, mf_tensor *dst, int32_t n_rep, int n_src, const char *const *prefix,
                    const char *const *suffix, const int64_t *rows, int64_t cols);
// GPT-2's Conv1D NAME.weight stored (in, out) + NAME.bias (out). A CPU load
// that copies it keeps it as (out, in), a Linear's rows (load/weights.c).
void mf_wplan_conv1d(mf_wplan *p, mf_linear *lin, int64_t in, int64_t out, const char *fmt, ...) MF_PRINTF(5, 6);

// ---- the plan (wplan.c fills it, load/weights.c reads it) ------------------------------------

#define MF_W_NAME 128

typedef struct {
    mf_tensor *dst;            // the view this slot sets
    int32_t n_src;             // 1..3 sources stacked along dim 0
    char name[3][MF_W_NAME];   // their names in the checkpoint (n_rep > 0: prefixes)
    int32_t n_rep;             // 0: one group of sources; > 0: n_rep groups (experts), source j of
                               // group e named name[j] + e + suffix[j]; the view is 3-D
    char suffix[3][32];        // n_rep > 0: the name after the group index
    int64_t rows[3];           // dim 0 of each source
    int64_t cols;              // dim 1 of every source; 0: the sources are vectors
    bool transposed;           // a torch Linear (out, in): the view is its transpose (in, out)
    bool conv1d;               // a GPT-2 Conv1D (in, out): the CPU may store it as (out, in) (flip)
    bool flip;                 // stored transposed, (cols, rows), seen as (rows, cols) (load/weights.c)
    float mean, std;           // synthetic values: mean + std * N(0, 1)
    const struct mf_st_tensor *src[3]; // the sources found (n_rep > 0: group 0's; the others are looked up when filled)
    mf_dtype src_dt;           // the sources' dtype when every one has it (src_same), from check_sources
    bool src_same;
    mf_dtype dt;               // the view's dtype (weights.c: slot_dtype)
    int64_t offset;            // bytes into the block; -1: a view into the mmap
} wslot;

struct mf_wplan {
    wslot *v;
    int32_t n, cap;
    bool oom;
    bool fuse;               // stack q|k|v and gate|up (the weights are copied anyway)
    const struct mf_st_file *st; // the checkpoint; NULL: random weights
    bool (*has)(const struct mf_st_file *st, const char *name); // the loader's lookup (mf_wplan_has)
};

#ifdef __cplusplus
}
#endif
#endif // MF_MODEL_WPLAN_H
