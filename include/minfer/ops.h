// Kernel-level ops on caller-owned tensors. Each op takes one args struct,
// validates it (shapes, dtypes, devices, aliasing) and returns
// MF_ERR_INVALID_ARG / MF_ERR_UNSUPPORTED with a message before touching
// memory. Tensors must live on the backend's device. Ops are asynchronous on
// the CUDA backend (ordered on its stream); mf_backend_sync waits.
#ifndef MINFER_OPS_H
#define MINFER_OPS_H

#include "minfer/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------
// GEMM: c = act(alpha * a @ b + beta * c + bias)
//   a: (m, k) or (batch, m, k)   any strides with a unit stride in one of the
//   b: (k, n) or (batch, k, n)   last two dims (transposed views are free:
//                                a torch Linear weight (n, k) is passed as
//                                its transpose)
//   c: (m, n) or (batch, m, n)   row-major: stride[-1] == 1
//   bias: (n) or NULL, contiguous, dtype of c
//   a and b share a dtype (f32, f16, bf16); c is that dtype or f32. On the
//   CPU, b (a weight) may also be f16/bf16 with a and c f32: it is read in
//   its dtype and widened in registers (half the bytes of an f32 weight).
//   Batched: a or b may have batch 1 or batch stride 0 (broadcast).
//   Accumulation is f32. With beta == 0, c is not read (may hold NaN).
typedef enum {
    MF_EPILOGUE_NONE = 0,
    MF_EPILOGUE_GELU = 1, // tanh-approximate GELU (GPT-2's gelu_new)
} mf_epilogue;

typedef struct {
    mf_tensor a, b, c;
    const mf_tensor *bias;  // NULL: no bias
    float alpha, beta;
    mf_epilogue epilogue;   // applied after bias
} mf_gemm_args;

mf_status mf_gemm(mf_backend *be, const mf_gemm_args *args);

// ---------------------------------------------------------------------------
// Fused residual add + norm, one pass over each row:
//   s = x + residual            (s = x when residual is NULL)
//   sum_out = s                 (if sum_out != NULL; may alias x or residual)
//   y = norm(s) * weight (+ bias)
//   RMSNorm:   norm(s) = s / sqrt(mean(s^2) + eps)
//   LayerNorm: norm(s) = (s - mean(s)) / sqrt(var(s) + eps)   (biased var)
//   x, residual, sum_out, y: (rows, dim) with stride[1] == 1; y may alias x.
//   weight, bias: (dim), contiguous. Statistics in f32.
typedef enum {
    MF_NORM_RMS = 0,
    MF_NORM_LAYER = 1,
} mf_norm_kind;

typedef struct {
    mf_tensor x;
    const mf_tensor *residual; // NULL: no add
    const mf_tensor *sum_out;  // NULL: the sum is not written
    mf_tensor y;
    mf_tensor weight;
    const mf_tensor *bias;     // NULL: no bias (LayerNorm only)
    mf_norm_kind kind;
    float eps;
} mf_norm_args;

mf_status mf_add_norm(mf_backend *be, const mf_norm_args *args);

// ---------------------------------------------------------------------------
// Embedding lookup: y[t, :] = table[ids[t], :]
//   ids: (n) i32 on the backend's device; table: (vocab, dim), stride[1] == 1;
//   y: (n, dim), stride[1] == 1, dtype may differ from table's.
//   An id outside [0, vocab) is an error: at once on the CPU; on CUDA the row
//   is zero-filled and the next mf_backend_sync returns MF_ERR_INVALID_ARG.
typedef struct {
    mf_tensor ids, table, y;
} mf_embed_args;

mf_status mf_embed(mf_backend *be, const mf_embed_args *args);

// ---------------------------------------------------------------------------
// Elementwise: y = alpha * a + beta * b
//   a, y: contiguous, same numel; y may alias a or b.
//   b: NULL (then y = alpha * a: a scale), or contiguous with numel dividing
//   a's, broadcast over a's leading elements (a bias row added to each row).
typedef struct {
    mf_tensor a;
    const mf_tensor *b;
    mf_tensor y;
    float alpha, beta;
} mf_add_args;

mf_status mf_add(mf_backend *be, const mf_add_args *args);

// ---------------------------------------------------------------------------
// Fused scale + mask + softmax along the last dim, in one pass over memory
// (CUDA: rows up to ~8K columns in one block, up to ~128K over a thread-block
// cluster on sm_90; longer rows, or rows over ~8K before sm_90, are read twice):
//   y = softmax(scale * x + bias + mask)
//   x, y: (rows, cols) or (batch, heads, q_len, k_len); stride[-1] == 1, other
//         strides free; dtypes f32/f16/bf16 and may differ; y may be x
//         (in place, same view). A 2-D input is batch = heads = 1, q_len = rows.
//   causal: query i sees key j iff j <= i + k_len - q_len (bottom-right
//         aligned, as decode with a KV cache needs).
//   key_lens: (batch) i32 on the backend's device, or NULL: keys j >= key_lens[b]
//         are masked (padding). Values <= 0 mask the whole row, >= k_len none.
//   bias: additive, (batch|1, heads|1, q_len|1, k_len|1) (2-D: (rows|1,
//         cols|1)), stride 0 or size 1 on a dim broadcasts it; the last dim has
//         stride 1 or 0; f32/f16/bf16; may hold -inf (ALiBi, user masks); must
//         not overlap y. NULL: none.
//   scale: finite (any sign).
//   Keys masked by causal/key_lens are ignored (x and bias may hold anything
//   there, NaN included; the kernels skip loading them) and come out as 0.
//   A row whose visible logits are all -inf gives all zeros, never NaN; a NaN
//   (or +inf) logit makes its row's visible outputs NaN and touches no other
//   row. Math in f32. CUDA: k_len < 2^31 - 16.
typedef struct {
    mf_tensor x, y;
    float scale;
    bool causal;
    const mf_tensor *key_lens; // NULL: no padding mask
    const mf_tensor *bias;     // NULL: no additive bias
} mf_softmax_args;

mf_status mf_softmax(mf_backend *be, const mf_softmax_args *args);

// ---------------------------------------------------------------------------
// Rotary position embedding (RoPE), in place on q and k, HF "rotate_half"
// layout: for i < rot_dim/2 the pair (v[i], v[i + rot_dim/2]) is rotated by
// angle = (float)pos[t] * inv_freq[i] (the product in f32, as HF computes it):
//   v[i]           = v[i] * cos - v[i + h] * sin
//   v[i + h]       = v[i + h] * cos + v[i] * sin        (h = rot_dim / 2)
// Dims >= rot_dim are left alone (partial rotary).
//   q: (n_tokens, n_heads, head_dim), stride[2] == 1, other strides free
//   k: (n_tokens, n_kv_heads, head_dim) or NULL, same layout rules
//   pos: (n_tokens) i32 on the backend's device (token positions)
//   inv_freq: (rot_dim / 2) f32 on the backend's device; the caller computes
//      it (rope_theta and any llama3 / linear scaling); rot_dim <= head_dim, even.
typedef struct {
    mf_tensor q;
    const mf_tensor *k; // NULL: q only
    mf_tensor pos;
    mf_tensor inv_freq;
} mf_rope_args;

mf_status mf_rope(mf_backend *be, const mf_rope_args *args);

// ---------------------------------------------------------------------------
// Activations, optionally gated: y = act(x) * up   (up NULL: y = act(x))
//   x, up, y: (rows, n), stride[1] == 1, row strides free (x and up may be the
//   two halves of one fused gate|up GEMM output); y may alias x. Math in f32.
typedef enum {
    MF_ACT_SILU = 0,      // x * sigmoid(x)          (Llama's SwiGLU with up)
    MF_ACT_GELU_TANH = 1, // tanh approximation      (GPT-2's gelu_new)
    MF_ACT_GELU_ERF = 2,  // exact erf GELU
} mf_act_kind;

typedef struct {
    mf_tensor x;
    const mf_tensor *up; // NULL: no gate product
    mf_tensor y;
    mf_act_kind kind;
} mf_act_args;

mf_status mf_act(mf_backend *be, const mf_act_args *args);

// ---------------------------------------------------------------------------
// Strided copy with dtype conversion: dst = src, element by element.
//   src, dst: same shape (up to 4 dims), any strides, f32/f16/bf16 (i32 only
//   to i32); must not overlap unless they are the same view. Used for KV
//   cache writes, layout changes and casts.
typedef struct {
    mf_tensor src, dst;
} mf_copy_args;

mf_status mf_copy(mf_backend *be, const mf_copy_args *args);

// ---------------------------------------------------------------------------
// Attention, FlashAttention-style: an online softmax over key blocks, so the
// (q_len, k_len) scores are never materialised and memory grows linearly
// with the sequence:
//   o[t, h, :] = sum_j p_j v[j, h / grp, :],
//   p = softmax_j(scale * q[t, h, :] . k[j, h / grp, :])  over the visible keys j
//   grp = n_heads / n_kv_heads (GQA; MQA when n_kv_heads == 1); n_heads %
//   n_kv_heads != 0 is MF_ERR_INVALID_ARG.
// Three ways to give the `batch` sequences (b in [0, batch)):
//   fixed:  q, o (batch, q_len, n_heads, D); k, v (batch, k_len, n_kv_heads, D);
//           cu_seqlens_q, cu_seqlens_k, k_lens all NULL.
//   packed (varlen): q, o (total_q, n_heads, D); k, v (total_k, n_kv_heads, D);
//           sequence b is q rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) against
//           k/v rows [cu_seqlens_k[b], cu_seqlens_k[b+1]); zero-length
//           sequences are allowed (no rows, or rows that see no key).
//   cache:  q, o (total_q, n_heads, D) with cu_seqlens_q; k, v (n_slots,
//           max_len, n_kv_heads, D), the KV cache; sequence b reads keys
//           [0, k_lens[b]) of slot slots[b] (slots NULL: slot b). Values past
//           k_lens[b] (even NaN) never reach the output.
//   paged:  cache mode with block_table: k, v (n_blocks, block_size,
//           n_kv_heads, D), a pool of fixed-size blocks; block_table (batch,
//           max_blocks) i32, stride[1] == 1: key j of sequence b is row
//           j % block_size of block block_table[b, j / block_size] (vLLM's
//           layout). Entries past a sequence's ceil(k_lens[b] / block_size)
//           are not read; a block may appear in several rows (shared prefix).
//           A slot cache (n_slots, max_len, ...) is the pool with block_size =
//           max_len and a table of one column. slots must be NULL.
//   The index arrays are i32 on the backend's device, so that a decode step
//   can be captured once (CUDA Graphs) and replayed with new lengths.
//   max_q_len / max_k_len: host upper bounds of every q_len_b / k_len_b
//   (packed and cache modes; size the launch and the KV split). A length
//   past its bound, a decreasing cu_seqlens, a k_len past max_len (paged:
//   max_blocks x block_size), a slot outside [0, n_slots) or a block id outside
//   [0, n_blocks) is an error: at once on the CPU; on CUDA the
//   sequence's rows are zero-filled and the next mf_backend_sync returns
//   MF_ERR_INVALID_ARG.
// Strides: the last dim (D) has stride 1; other strides are free (q may be
//   the q columns of a fused q|k|v GEMM output). o must not overlap q, k, v.
// Masks (i: query row within its sequence, j: key index, off = k_len - q_len):
//   causal: key j is visible iff j <= i + off (bottom-right aligned, as decode
//           over a KV cache needs; q_len > k_len leaves the first rows blind).
//   window > 0 (causal only): also j > i + off - window, i.e. each query sees
//           at most `window` keys ending at its own position (HF's
//           sliding_window). 0: no window.
//   A query that sees no key gives o = 0 (and lse = -inf), never NaN.
// lse: NULL, or (total_q, n_heads) f32 (fixed: (batch, q_len, n_heads)),
//   contiguous: the natural log of sum_j exp(scale * q . k_j) over the
//   visible keys. Packed/cache: q rows outside [cu_seqlens_q[0],
//   cu_seqlens_q[batch]) are not written (o nor lse).
// Dtypes: q, k, v, o share one of f32, f16, bf16; or, on the CPU only, q and
//   o f32 with k and v in f16 or bf16 (a 16-bit KV cache under f32
//   activations; CUDA returns MF_ERR_UNSUPPORTED for it). Math and
//   accumulation f32.
// head_dim D: the CPU takes any; CUDA takes 64 and 128 (and those its
//   dispatch lists), anything else is MF_ERR_UNSUPPORTED naming D.
// Split-KV (decode): partial results go to `workspace` (device memory of
//   workspace_bytes; mf_attention_workspace says how much the widest split
//   needs). With less (or none) the op uses fewer splits, never fails for
//   it. num_splits > 0 fixes the split count (deterministic across devices
//   and runs, capped by the workspace); 0 lets the dispatch choose.
typedef struct {
    mf_tensor q, k, v, o;
    const mf_tensor *lse;          // NULL: not written
    const mf_tensor *cu_seqlens_q; // (batch + 1) i32, packed and cache modes
    const mf_tensor *cu_seqlens_k; // (batch + 1) i32, packed mode
    const mf_tensor *k_lens;       // (batch) i32, cache mode
    const mf_tensor *slots;        // (batch) i32, cache mode; NULL: slot b
    const mf_tensor *block_table;  // (batch, max_blocks) i32, paged cache mode; NULL: slots
    int32_t batch;                 // sequences (fixed mode: q.shape[0])
    int64_t max_q_len, max_k_len;  // host bounds (packed and cache modes)
    float scale;                   // finite; usually 1 / sqrt(D)
    bool causal;
    int64_t window;                // 0: none; > 0 with causal only
    int32_t num_splits;            // 0: auto; > 0: fixed
    void *workspace;               // device scratch for split-KV partials, or NULL
    size_t workspace_bytes;
} mf_attention_args;

mf_status mf_attention(mf_backend *be, const mf_attention_args *args);
// Workspace bytes the op could use for these arguments (0 on the CPU).
mf_status mf_attention_workspace(mf_backend *be, const mf_attention_args *args, size_t *bytes);

// ---------------------------------------------------------------------------
// KV-cache write (a scatter over all sequences of a step), with RoPE fused:
//   k_cache[slot[t], pos[t]] = rope(k[t], pos[t]);  v_cache[slot[t], pos[t]] = v[t]
//   q[t] = rope(q[t], pos[t]) in place, when q is given
//   k, v: (n_tokens, n_kv_heads, D); q: (n_tokens, n_heads, D); stride[-1] == 1,
//         other strides free (the columns of a q|k|v GEMM output)
//   k_cache, v_cache: (n_slots, max_len, n_kv_heads, D), stride[-1] == 1
//   slot, pos: (n_tokens) i32 on the device. A slot or position out of range is
//         an error (CPU: at once; CUDA: the row is skipped and the next
//         mf_backend_sync returns MF_ERR_INVALID_ARG).
//   slot_mapping: NULL, or (n_tokens) i32 on the device (vLLM's slot mapping)
//         for a paged cache: the caches are (n_blocks, block_size, n_kv_heads,
//         D) and token t goes to row slot_mapping[t] of the pool, i.e. row
//         r % block_size of block r / block_size; `slot` is then unused (leave
//         it zeroed) and pos only rotates. r outside [0, n_blocks x block_size)
//         is an error as a bad slot is.
//   inv_freq: (rot_dim / 2) f32, the rotation of mf_rope (HF rotate_half, dims
//         >= rot_dim untouched); NULL: no RoPE (q must then be NULL).
//   Dtypes: k, v any float; the caches share one float dtype; math in f32.
typedef struct {
    mf_tensor k, v;
    mf_tensor k_cache, v_cache;
    mf_tensor slot, pos;
    const mf_tensor *slot_mapping; // (n_tokens) i32, or NULL: (slot, pos) as above
    const mf_tensor *q;        // NULL: none
    const mf_tensor *inv_freq; // NULL: no RoPE
} mf_kv_write_args;

mf_status mf_kv_write(mf_backend *be, const mf_kv_write_args *args);

// ---------------------------------------------------------------------------
// Argmax per row (greedy decoding on the device: only B ids and B values
// cross to the host instead of B x vocab logits):
//   ids[r]  = the lowest index of row r's maximum (ties go to the lowest id,
//             as the sampler's greedy rule does); vals[r] = that maximum
//             (as f32; a -0.0 maximum comes back as +0.0, equal to it)
//   A row holding NaN or +inf: vals[r] = NaN, ids[r] = the index of the first
//   such value (so that the host can name it). A row of all -inf: ids[r] = -1,
//   vals[r] = -inf.
//   x: (rows, n) f32/f16/bf16, stride[1] == 1, row stride free; 1 <= n < 2^31.
//   ids: (rows) i32, contiguous; vals: (rows) f32, contiguous; on the
//   backend's device; neither overlaps x or the other.
typedef struct {
    mf_tensor x;
    mf_tensor ids;
    mf_tensor vals;
} mf_argmax_args;

mf_status mf_argmax(mf_backend *be, const mf_argmax_args *args);

// ---------------------------------------------------------------------------
// Top-k candidates per row, with the row's softmax statistics (sampling on
// the device: B x k ids and values and 2 B statistics cross to the host
// instead of B x vocab logits; the sampler draws from them when that is exact,
// see src/engine/sampler.c).
//   x: (rows, n) f32/f16/bf16, stride[1] == 1, row stride free; 1 <= n < 2^31.
//   k: 1 .. min(n, MF_TOPK_MAX).
//   scale: finite, > 0 (the sampler's 1 / temperature).
//   ids: (rows, k) i32, vals: (rows, k) f32, both contiguous: row r's k largest
//        values (as f32) and their indices, best first: the larger value
//        first, equal values to the lower index (-0.0 equals +0.0 and comes
//        back as +0.0), the sampler's ranking. -inf is never a candidate: a
//        row with m < k values above -inf fills slots [m, k) with (-1, -inf).
//   stats: (rows, 2) f32, contiguous: (max, sum) with max the row's largest
//        value and sum = sum over the whole row of expf((x_i - max) * scale),
//        each term in f32 as the host sampler computes its weights, summed in
//        double (in no fixed order across backends), rounded to f32.
//   A row holding NaN or +inf (which the sampler refuses): slot 0 = the index
//   of the first such value and that value (NaN or +inf), slots [1, k) =
//   (-1, -inf), stats = (NaN, NaN). A row of all -inf: every slot (-1, -inf),
//   stats = (-inf, 0).
//   The outputs are on the backend's device and overlap neither x nor each
//   other. No workspace: on CUDA the op can be recorded in a graph.
// The cap: 1024 candidates hold the top-p set of an LLM's next-token
// distribution in all but flat cases (then the sampler falls back to the
// logits), cost 8 KiB per row to cross (vs 4 x vocab), and fit one CUDA block's
// shared-memory sort (1024 threads, one candidate each).
#define MF_TOPK_MAX 1024

typedef struct {
    mf_tensor x;
    mf_tensor ids, vals, stats;
    int32_t k;
    float scale;
} mf_topk_args;

mf_status mf_topk(mf_backend *be, const mf_topk_args *args);
// Mixture-of-Experts (dropless: no capacity factor, no token dropped).
// T tokens of width H, E experts (1..256) of FFN width I, top_k (1..8) experts
// per token. The parts below are what mf_moe runs; each is public so that it
// can be tested and reused alone. i32 index tensors live on the device.
typedef enum {
    MF_MOE_SCORE_SOFTMAX = 0, // softmax over the experts (Mixtral, Qwen-MoE)
    MF_MOE_SCORE_SIGMOID = 1, // sigmoid of each logit (DeepSeek-V3 style)
} mf_moe_score;

typedef enum {
    MF_MOE_SCORE_THEN_TOPK = 0, // scores over all E, then top-k of them (Mixtral, Qwen-MoE)
    MF_MOE_TOPK_THEN_SCORE = 1, // top-k of the logits, then scores over those k only
} mf_moe_order;

typedef enum {
    MF_MOE_FFN_SWIGLU = 0, // y = (silu(x W_gate^T) * (x W_up^T)) W_down^T, w1 = gate|up (2I, H)
    MF_MOE_FFN_GELU = 1,   // y = gelu_tanh(x W_fc1^T) W_fc2^T,             w1 = fc1 (I, H)
} mf_moe_ffn;

// Router, one fused pass per token over its E logits (the logits GEMM
// x . W_r^T is NOT in this op: mf_moe runs it with mf_gemm into f32):
//   logits: (T, E), f32/f16/bf16, stride[1] == 1
//   ids:    (T, k) i32 out, contiguous: the chosen experts, best first
//   weights:(T, k) f32 out, contiguous: their combine weights
// Selection compares the logits (softmax and sigmoid are monotone, so this is
// the top-k of the scores without ties made by rounding): larger first, equal
// values to the lower expert index; NaN ranks below -inf. Then
//   SCORE_THEN_TOPK: w_j = score(logits)[ids_j], the score over all E
//   TOPK_THEN_SCORE: w = softmax (or sigmoid) of the k chosen logits
//   renorm: w_j /= sum_j w_j (skipped when the sum is 0)
//   w_j *= routed_scale (1: none; any finite value)
// A softmax row whose logits are all -inf gives weights 0. Math in f32.
typedef struct {
    mf_tensor logits;
    mf_tensor ids, weights;
    mf_moe_score score;
    mf_moe_order order;
    bool renorm;
    float routed_scale;
} mf_moe_router_args;

mf_status mf_moe_router(mf_backend *be, const mf_moe_router_args *args);

// Permutation: a stable counting sort of the N = T * k assignments by expert.
//   ids:     (T, k) i32, contiguous; assignment a = t * k + j goes to ids[t, j]
//   offsets: (E + 1) i32 out: expert e owns sorted rows [offsets[e], offsets[e+1])
//   sorted:  (N) i32 out: sorted[r] = the assignment a at sorted row r; within
//            an expert rows keep the order of a (stable; so deterministic)
//   inv:     (N) i32 out: inv[a] = the sorted row of assignment a
//   x, xs:   NULL, or x (T, H) and xs (N, H), stride[1] == 1, same float dtype:
//            the gather xs[r] = x[sorted[r] / k] (expert-contiguous rows)
// An id outside [0, E): CPU MF_ERR_INVALID_ARG at once; CUDA the assignment is
// sorted after the last expert (rows [offsets[E], N)), so no expert sees it,
// and its inv is -1, so mf_moe_combine skips it. (mf_moe_router's ids are
// always in range.)
typedef struct {
    mf_tensor ids;
    mf_tensor offsets, sorted, inv;
    const mf_tensor *x, *xs; // both or neither
    int32_t n_experts;
} mf_moe_permute_args;

mf_status mf_moe_permute(mf_backend *be, const mf_moe_permute_args *args);

// Experts: each expert's FFN on its rows of an expert-contiguous matrix.
//   x:  (N, H) rows of expert e at [offsets[e], offsets[e+1]), stride[1] == 1
//   offsets: (E + 1) i32 on the device, non-decreasing, offsets[E] <= N
//   host_offsets: NULL, or the same E + 1 values in host memory; NULL on CUDA
//       costs one device-to-host read (a sync) to size the per-expert GEMMs,
//       except on the small-batch decode path (N <= 32 rows, shapes that allow
//       16-byte loads), whose kernels read the device offsets themselves
//       (clamped to [0, N]; host_offsets, when given, are checked on the host)
//   w1: (E, 2I, H) SwiGLU gate rows [0, I) | up rows [I, 2I); (E, I, H) GELU.
//       Torch Linear layout: stride[2] == 1, stride[1] >= H, stride[0] free.
//   w2: (E, H, I), stride[2] == 1
//   h:  (N, 2I) SwiGLU / (N, I) GELU scratch, stride[1] == 1, x's dtype
//   y:  (N, H) out, x's dtype, stride[1] == 1; may be x's view (x is dead once
//       the first GEMMs ran). Rows of no expert (>= offsets[E]) are not written.
// Dtypes: x, w1, w2 share one float dtype (on the CPU, w1 and w2 may also be
// f16/bf16 with f32 x, as mf_gemm's b); accumulation f32.
typedef struct {
    mf_tensor x, offsets;
    const int32_t *host_offsets;
    mf_tensor w1, w2;
    mf_tensor h, y;
    mf_moe_ffn ffn;
} mf_moe_experts_args;

mf_status mf_moe_experts(mf_backend *be, const mf_moe_experts_args *args);

// Combine: each token's k expert outputs summed back in token order,
//   out[t] = residual[t] + sum_{j<k} weights[t,j] * ys[inv[t*k+j]]
//            + g_t * shared[t],   g_t = sigmoid(shared_gate[t]) (1 without a gate)
// in that order, in f32, with no atomics: deterministic.
//   ys: (N, H) sorted expert outputs, stride[1] == 1, N >= 1
//   weights: (T, k) f32 (T and k come from its shape); inv: (T * k) i32
//   shared: NULL or (T, H); shared_gate: NULL or (T, 1) logits (f32/f16/bf16)
//   residual: NULL or (T, H); out: (T, H), stride[1] == 1; out may be
//   residual's view (in-place residual add), must not overlap ys or shared.
//   An inv entry outside [0, N) contributes nothing.
typedef struct {
    mf_tensor ys, inv, weights;
    const mf_tensor *shared;
    const mf_tensor *shared_gate;
    const mf_tensor *residual;
    mf_tensor out;
} mf_moe_combine_args;

mf_status mf_moe_combine(mf_backend *be, const mf_moe_combine_args *args);

// The whole layer: out = residual + moe(x) (+ gated shared expert):
//   logits = x . w_router^T (mf_gemm, f32) -> mf_moe_router -> mf_moe_permute
//   (with the gather) -> mf_moe_experts -> [shared FFN on x] -> mf_moe_combine.
//   x: (T, H), stride[1] == 1, f32/f16/bf16; w_router: (E, H), stride[1] == 1,
//   x's dtype; w1, w2, ffn: as mf_moe_experts, x's dtype (CPU: every weight
//   may also be f16/bf16 with f32 x).
//   shared_w1: NULL or (2Is, H) SwiGLU / (Is, H) GELU (same ffn kind);
//   shared_w2: (H, Is); shared_gate: NULL or (1, H) (Qwen-MoE's
//   shared_expert_gate). residual, out: as mf_moe_combine.
//   workspace: device scratch of workspace_bytes >= mf_moe_workspace(); the op
//   allocates nothing. CUDA reads the E + 1 expert offsets back once per call
//   (one sync) to size the per-expert GEMMs, except at T * top_k <= 32
//   assignments (the decode path of mf_moe_experts: no sync, so a CUDA Graph
//   can record the layer).
typedef struct {
    mf_tensor x, w_router, w1, w2;
    mf_moe_ffn ffn;
    int32_t top_k;
    mf_moe_score score;
    mf_moe_order order;
    bool renorm;
    float routed_scale;            // 1: none
    const mf_tensor *shared_w1;    // NULL: no shared expert
    const mf_tensor *shared_w2;
    const mf_tensor *shared_gate;  // NULL: ungated shared expert
    const mf_tensor *residual;     // NULL: no residual add
    mf_tensor out;
    void *workspace;
    size_t workspace_bytes;
} mf_moe_args;

mf_status mf_moe(mf_backend *be, const mf_moe_args *args);
// Workspace bytes mf_moe needs for these arguments (validates them first).
mf_status mf_moe_workspace(mf_backend *be, const mf_moe_args *args, size_t *bytes);

#ifdef __cplusplus
}
#endif
#endif // MINFER_OPS_H
