// Models and sessions: a Hugging Face checkpoint (or a synthetic one) loaded
// onto a backend, and sessions that run it over batches of sequences with a
// KV cache. Generation (sampling, stop rules, streaming) is in generate.h.
#ifndef MINFER_MODEL_H
#define MINFER_MODEL_H

#include "minfer/backend.h"
#include "minfer/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mf_model mf_model;

#define MF_MODEL_MAX_EOS 8
typedef struct mf_session mf_session;

typedef struct {
    mf_dtype dtype;      // CUDA: weights, activations and KV cache in BF16, F16 or F32.
                         // CPU (which computes in f32, activations and KV cache f32): the
                         // weight matrices' storage: F32 (widened at load), F16 or BF16
                         // (half the memory and bytes per decode step; widened in registers).
    bool dtype_auto;     // ignore dtype (opts NULL: the same): CUDA BF16; CPU each matrix in
                         // its checkpoint's dtype (f16/bf16 kept, f32 stays f32),
                         // synthetic weights f32
    const char *attn;    // "flash" (mf_attention: online softmax over the KV cache, no
                         // scores buffer; the default, NULL) or "classic" (QK^T GEMM ->
                         // mf_softmax -> P.V GEMM: the reference and the "before")
    bool verbose;        // progress on stderr while loading
    const char *kv_dtype; // the KV cache's dtype: NULL or "auto" (the default: CUDA the activation
                          // dtype; CPU f32), "f32", "f16" or "bf16". CPU: any of them (attention
                          // reads a 16-bit cache in place and computes in f32: half the cache's
                          // memory and bytes a step; accuracy in docs/notes/cpu.md); CUDA: only
                          // the activation dtype (else MF_ERR_UNSUPPORTED).
    bool mmap;           // CPU: use the checkpoint's matrices in place from its file mapping where
                         // their dtype allows (instant load, pages shared with other processes)
                         // instead of copying every weight at load (the default: q|k|v and
                         // gate|up stacked into one GEMM each, memory advised for huge pages;
                         // SmolLM2-geometry bf16 decode 5-10% faster; docs/notes/cpu.md). CUDA: unused.
} mf_model_opts;

// Loads <dir>/config.json, model.safetensors (or the sharded index) and, when
// present, tokenizer.json (+ tokenizer_config.json). The model keeps `be`
// (not owned: free the model first). Errors name the file/tensor/field.
mf_status mf_model_load(const char *dir, mf_backend *be, const mf_model_opts *opts, mf_model **out);

// A model with seeded random weights (no files): preset "small" (12 layers,
// 768 hidden, 12 heads, GPT-2 shaped), "medium" (24, 1024, 16), "large"
// (32, 4096, 32), "llama-7b" (Llama-2-7B shapes), "tiny" (2 layers, 64
// hidden: tests; Llama-shaped with GQA, vocab 512). Also for tests:
// "tiny-gpt2" (GPT-2-shaped tiny), "tiny-postnorm" (GPT-2-shaped with the
// norms after the residual adds) and "tiny-geglu" ("tiny" with a GELU-tanh
// gated MLP). Mixture of experts (the brief's end-to-end model, post-norm:
// attention -> add & norm -> MoE -> add & norm, GPT-2-shaped attention, 8
// GELU-tanh experts of width 4 hidden, top-2, renormalised): "moe-small" (Small's
// 12 layers, 768 hidden, 12 heads; 533 M parameters, 193 M active per token)
// and "tiny-moe-postnorm" (tests). The GPT-2-shaped presets have vocab 50257
// and 16384 learned positions. Values: N(0, 0.02) (norm gains 1 + that),
// the same for a seed on every backend (rounded to the dtype). No tokenizer.
mf_status mf_model_synthetic(const char *preset, uint64_t seed, mf_backend *be, const mf_model_opts *opts,
                             mf_model **out);
void mf_model_free(mf_model *m); // NULL is fine

typedef struct {
    const char *arch;          // "gpt2" | "llama" | ...
    int64_t n_params;          // parameters (tied embeddings counted once)
    int32_t n_layers, hidden, n_heads, n_kv_heads, head_dim, ffn, vocab;
    int64_t max_pos;           // longest sequence the model was trained for
    mf_dtype dtype;            // weights as loaded (the dtype of most matrix bytes; CPU norms and biases are f32)
    mf_dtype act_dtype;        // activations (CPU: f32)
    mf_dtype kv_dtype;         // the KV cache (mf_model_opts.kv_dtype)
    int64_t weight_bytes;      // bytes of weights on the backend
    int64_t kv_bytes_per_token;// K and V, all layers
    int32_t bos_id, eos_id;    // -1 when unknown (eos_id: the first of eos_ids)
    int32_t n_eos;             // every EOS id (generation_config.json may list several)
    int32_t eos_ids[MF_MODEL_MAX_EOS];
    const char *backend;       // "cpu" | "cuda"
    const char *source;        // the checkpoint directory, or "synthetic:PRESET"
    const char *family;        // the architecture family: "gpt2" | "llama" (Llama, Mistral) | "qwen2" | ...
    const char *family_about;  // one line: what the family covers
    const char *hf_class;      // config.json "architectures"[0] as known ("" for synthetic models)
    bool chat_template;        // the checkpoint has a chat template (tokenizer_config.json's
                               // chat_template, or chat_template.jinja); minfer does not apply it
    int64_t sliding_window;    // attention window in tokens; 0: full attention
    int32_t n_experts;         // mixture of experts: routed experts per layer (0: dense; ffn: each expert's width)
    int32_t top_k;             // experts each token goes through
    int32_t shared_ffn;        // width of the shared expert every token also goes through (0: none)
    int64_t n_active_params;   // parameters one token runs through (top_k of the experts); n_params when dense
    int64_t layer_matmul_params; // weights of all layers one token multiplies by (2 FLOP each; the router,
                                 // top_k experts, no embeddings, norms, biases or LM head)
} mf_model_info;

mf_status mf_model_get_info(const mf_model *m, mf_model_info *out);
// The model's tokenizer, or NULL when it has none (synthetic models).
const mf_tokenizer *mf_model_tokenizer(const mf_model *m);

// A session: max_batch sequence slots of up to max_seq tokens each; the KV
// cache and all scratch are allocated here (nothing is allocated per step).
// max_seq may not exceed a GPT-2 model's learned positions; a model with a
// sliding window (Mistral) attends to its last sliding_window keys per
// token; mf_session_plan_memory says what a size costs.
mf_status mf_session_create(mf_model *m, int32_t max_batch, int64_t max_seq, mf_session **out);
void mf_session_free(mf_session *s); // NULL is fine
// Empties sequence slot `seq` (-1: all slots).
mf_status mf_session_reset(mf_session *s, int32_t seq);
// Tokens already in slot seq's KV cache.
int64_t mf_session_seq_len(const mf_session *s, int32_t seq);

typedef enum {
    MF_LOGITS_LAST = 0, // (n_seqs, vocab): each sequence's last new token
    MF_LOGITS_ALL = 1,  // (total new tokens, vocab), in input order
} mf_logits_mode;

// Appends new tokens to n_seqs sequences and runs them through the model
// (prefill when many tokens, a decode step when one each): sequence i
// appends tokens[offsets[i] .. offsets[i+1]) to slot seq_ids[i] (distinct
// slots; offsets has n_seqs + 1 entries, offsets[0] = 0). logits is a host
// f32 buffer of the size `mode` says, or NULL: the tokens only go into the
// KV cache (no LM head runs). Errors leave the caches unchanged
// (e.g. a sequence longer than max_seq: MF_ERR_INVALID_ARG naming it); every
// argument is checked before anything runs. A token id outside [0, vocab),
// a slot outside [0, max_batch), a slot given twice, or a sequence with no
// new tokens is MF_ERR_INVALID_ARG naming it.
mf_status mf_session_forward(mf_session *s, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                             const int64_t *offsets, mf_logits_mode mode, float *logits);

// Greedy decoding with the logits kept on the device: as mf_session_forward
// in MF_LOGITS_LAST mode, but the LM head's logits stay where they are
// computed and only each sequence's argmax comes back: ids[i] (n_seqs, host)
// = the lowest index of sequence i's largest logit, vals[i] (n_seqs, host, or
// NULL: not written) = that logit. A NaN or +inf logit gives vals[i] = NaN
// and ids[i] = the index of the first one; all logits -inf gives ids[i] = -1
// and vals[i] = -inf (the caller decides how to report them; the engine
// fails as the sampler does). Arguments are checked as mf_session_forward's;
// ids NULL is MF_ERR_INVALID_ARG. Decode steps are recorded and replayed as
// graphs as mf_session_forward's are (one graph per batch size and output).
mf_status mf_session_forward_greedy(mf_session *s, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                                    const int64_t *offsets, int32_t *ids, float *vals);

// Sampling with the logits kept on the device: as mf_session_forward_greedy,
// but what comes back for each sequence i is mf_topk of its logits row (see
// minfer/ops.h): ids[i k .. i k + k) and vals[..] (n_seqs x k, host), its k
// best logits and their ids in rank order, and stats[2 i], stats[2 i + 1]
// (n_seqs x 2, host) = the row's max and sum of expf((logit - max) * scale).
// k in [1, min(MF_TOPK_MAX, vocab)], scale finite > 0. n_seqs x (8 k + 8)
// bytes cross to the host instead of n_seqs x vocab x 4. Decode steps are
// recorded and replayed as graphs (one per batch size, k and scale).
mf_status mf_session_forward_topk(mf_session *s, int32_t n_seqs, const int32_t *seq_ids, const int32_t *tokens,
                                  const int64_t *offsets, int32_t k, float scale, int32_t *ids, float *vals,
                                  float *stats);
// The full logits (vocab f32, host) of row `row` (the call's sequence index)
// of the last forward call, while they are still on the device: the rows of
// the call's last LM-head step (every row of a decode step). For a sampler
// that finds the candidates of mf_session_forward_topk are not enough.
// MF_ERR_UNSUPPORTED when that row's logits are gone (rows of an earlier
// step of a long prefill, or no forward call since an error).
mf_status mf_session_read_logits(mf_session *s, int32_t row, float *logits);

// Graphs: on a backend that records them (CUDA Graphs), a decode step (one
// new token for each of n_seqs sequences) is recorded once per n_seqs and
// replayed for every later step of that size, so a step costs one launch
// instead of ~10 per layer. On by default where supported (the flash
// attention path; the classic one sizes its launches by the sequence lengths
// on the host, so it never records); skipped while a profiler is set.
// Outputs are identical either way. Turning them off frees the recorded graphs.
mf_status mf_session_set_graphs(mf_session *s, bool on);

// What the last mf_session_forward call did (for benchmarks and tests).
typedef struct {
    int64_t ops;           // ops queued by the last call (a replayed graph counts the ops it recorded)
    int64_t launches;      // host-side launches by the last call (a replayed graph is 1)
    double host_us;        // host time of the last call until its work was all queued (before the first wait)
    bool graph;            // the last call replayed (or recorded then replayed) a graph
    int64_t graphs_recorded;  // since the session was created
    int64_t graphs_replayed;
    char graphs_off[192];     // why a failed recording turned graphs off for the session ("" if none did)
} mf_session_stats;
mf_status mf_session_get_stats(const mf_session *s, mf_session_stats *out);

// Bytes the session holds on the backend (KV cache + scratch peak).
int64_t mf_session_bytes(const mf_session *s);

// What a session is for (0 / NULL for a NULL session).
mf_model *mf_session_model(const mf_session *s);
int32_t mf_session_max_batch(const mf_session *s);
int64_t mf_session_max_seq(const mf_session *s);

// The memory a session of this size would take, without creating it.
typedef struct {
    int64_t kv_bytes;      // K and V caches, all layers and slots
    int64_t scratch_bytes; // activations, attention scores, logits staging
    int64_t step_tokens;   // tokens one pass over the layers takes (longer inputs are split)
} mf_session_plan;
mf_status mf_session_plan_memory(const mf_model *m, int32_t max_batch, int64_t max_seq, mf_session_plan *out);

// Profiling: while set, each forward call brackets every op it launches with
// begin(user, op, what) and end(user, op, what): `op` is the op family
// ("gemm", "softmax", "add_norm", "rope", "act", "copy", "embed", "add", "argmax", ...) and
// `what` its role ("qkv", "o", "up", "down", "lm_head", "scores", "kv_write",
// ...); both static strings. The caller times them (wall clock on the CPU,
// where ops are synchronous; CUDA events on the backend's stream). Off
// (NULL, the default) costs one branch per op.
typedef struct {
    void (*begin)(void *user, const char *op, const char *what);
    void (*end)(void *user, const char *op, const char *what);
    void *user;
} mf_session_profiler;
// p NULL (or with NULL begin and end) turns profiling off. p is copied.
mf_status mf_session_set_profiler(mf_session *s, const mf_session_profiler *p);

#ifdef __cplusplus
}
#endif
#endif // MINFER_MODEL_H
