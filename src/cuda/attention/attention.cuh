// Internal: what the attention kernels share (attn_prefill.cu, attn_decode.cu,
// attention.cu): the launch parameters, the per-sequence view that resolves
// the three modes of mf_attention_args (fixed, packed, cache) from device
// memory, and the mask rule. See include/minfer/ops.h for the contract.
#ifndef MF_CUDA_ATTENTION_CUH
#define MF_CUDA_ATTENTION_CUH

#include "cuda/common.cuh"

// All strides in elements. "row" is a token (q row or key row), "h" a head.
struct AttnParams {
    const void *q, *k, *v; // q (rows, n_heads, D); k, v (rows or slots x max_len, n_kv_heads, D)
    void *o;               // like q
    float *lse;            // NULL or (rows, n_heads) f32
    int64_t q_sb, q_sr, q_sh; // q: batch (fixed mode), row, head strides
    int64_t k_sb, k_sr, k_sh; // k: batch (fixed) / slot (cache), row, head
    int64_t v_sb, v_sr, v_sh;
    int64_t o_sb, o_sr, o_sh;
    int64_t l_sb, l_sr, l_sh;    // lse strides (fixed: batch, row, head; else 0, row, head)
    const int32_t *cu_q, *cu_k;  // (batch + 1) or NULL
    const int32_t *k_lens, *slots; // (batch) or NULL
    const int32_t *table;        // paged cache: (batch, table_w) block ids at row stride table_sr; else NULL
    int64_t table_sr;
    int table_w, bs_log2;        // paged: blocks per table row, log2 of the block size (k_sb: block stride)
    int mode;                    // kModeFixed | kModePacked | kModeCache
    int batch, n_heads, n_kv_heads, grp, head_dim;
    int q_len_fixed, k_len_fixed; // fixed mode lengths
    int64_t total_q;             // q rows (packed/cache: q.shape[0]; fixed: batch * q_len)
    int64_t total_k;             // packed: k.shape[0]; cache: max_len (paged: table_w x block size)
    int64_t n_slots;             // cache mode (paged: blocks in the pool)
    int max_q_len, max_k_len;    // grid bounds (fixed mode: the fixed lengths)
    float scale_log2;            // scale * log2(e): scores live in the exp2 domain
    int causal, window;
    int dt;                      // mf_dtype of q, k, v, o
    unsigned int *err;           // device counter of sequences with bad lengths
};

enum { kModeFixed = 0, kModePacked = 1, kModeCache = 2 };

// One sequence resolved: element offsets of its first q/o row and first key
// row (head 0), its lengths, and the flat q row index of its first row (for
// lse, split-KV partials). ok == false: the device lengths are invalid; the
// q rows [row0, row0 + q_len) are still safe to zero-fill when q_len >= 0.
struct SeqView {
    int64_t q_off, o_off, k_off, v_off, l_off, row0;
    int q_len, k_len;
    bool ok;
    const int32_t *tbl; // paged: the sequence's block table row (k_off = v_off = 0); else NULL
};

// Element offset of key row j from a sequence's k (or v) base: j rows of
// `sr` in one run, or, paged, row j % block_size of block tbl[j / block_size]
// (blocks `sb` apart): one table lookup per key row, from L1.
struct KeyRows {
    const int32_t *tbl;
    int64_t sr, sb;
    int bs_log2;
    __device__ __forceinline__ int64_t operator()(int j) const {
        if (!tbl) return (int64_t)j * sr;
        return (int64_t)__ldg(tbl + (j >> bs_log2)) * sb + (int64_t)(j & ((1 << bs_log2) - 1)) * sr;
    }
};
__device__ __forceinline__ KeyRows attn_k_rows(const AttnParams &p, const SeqView &s) {
    return KeyRows{s.tbl, p.k_sr, p.k_sb, p.bs_log2};
}
__device__ __forceinline__ KeyRows attn_v_rows(const AttnParams &p, const SeqView &s) {
    return KeyRows{s.tbl, p.v_sr, p.v_sb, p.bs_log2};
}

__device__ __forceinline__ SeqView attn_seq(const AttnParams &p, int b) {
    SeqView s;
    s.ok = true;
    s.tbl = nullptr;
    if (p.mode == kModeFixed) {
        s.q_len = p.q_len_fixed, s.k_len = p.k_len_fixed, s.row0 = (int64_t)b * p.q_len_fixed;
        s.q_off = b * p.q_sb, s.o_off = b * p.o_sb, s.l_off = b * p.l_sb;
        s.k_off = b * p.k_sb, s.v_off = b * p.v_sb;
        return s;
    }
    const int64_t q0 = p.cu_q[b], q1 = p.cu_q[b + 1];
    s.row0 = q0, s.q_len = (int)(q1 - q0);
    if (q0 < 0 || q1 < q0 || q1 > p.total_q) { // the q rows themselves are unknown: write nothing
        s.ok = false, s.q_len = -1, s.row0 = 0, s.k_len = 0;
        s.q_off = s.o_off = s.l_off = s.k_off = s.v_off = 0;
        return s;
    }
    s.q_off = q0 * p.q_sr, s.o_off = q0 * p.o_sr, s.l_off = q0 * p.l_sr;
    if (q1 - q0 > p.max_q_len) s.ok = false;
    if (p.mode == kModePacked) {
        const int64_t k0 = p.cu_k[b], k1 = p.cu_k[b + 1];
        if (k0 < 0 || k1 < k0 || k1 > p.total_k || k1 - k0 > p.max_k_len) s.ok = false;
        s.k_len = s.ok ? (int)(k1 - k0) : 0;
        s.k_off = s.ok ? k0 * p.k_sr : 0, s.v_off = s.ok ? k0 * p.v_sr : 0;
    } else if (p.table) { // paged: every block the keys use must be in the pool
        const int64_t kl = p.k_lens[b];
        if (kl < 0 || kl > p.max_k_len || kl > p.total_k) s.ok = false;
        const int32_t *t = p.table + (int64_t)b * p.table_sr;
        for (int64_t i = 0; s.ok && i < (kl + (1 << p.bs_log2) - 1) >> p.bs_log2; i++)
            if (t[i] < 0 || t[i] >= p.n_slots) s.ok = false;
        s.k_len = s.ok ? (int)kl : 0;
        s.k_off = s.v_off = 0;
        s.tbl = t;
    } else {
        const int64_t kl = p.k_lens[b], slot = p.slots ? p.slots[b] : b;
        if (kl < 0 || kl > p.max_k_len || kl > p.total_k || slot < 0 || slot >= p.n_slots) s.ok = false;
        s.k_len = s.ok ? (int)kl : 0;
        s.k_off = s.ok ? slot * p.k_sb : 0, s.v_off = s.ok ? slot * p.v_sb : 0;
    }
    return s;
}

// Is key j visible from query row i (both within the sequence)? off = k_len - q_len
// aligns causal bottom-right; window > 0 keeps the last `window` keys up to the diagonal.
__device__ __forceinline__ bool attn_visible(const AttnParams &p, int i, int j, int k_len, int off) {
    if (j >= k_len) return false;
    if (!p.causal) return true;
    const int d = i + off; // last visible key of row i
    return j <= d && (p.window <= 0 || j > d - p.window);
}

__device__ __forceinline__ float attn_exp2(float x) { return ptx::ex2_approx_ftz(x); }

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Error path of every kernel: rows [r0, r1) of head h of sequence s become 0
// (lse -inf). The block's threads stride over the elements.
__device__ __forceinline__ void attn_zero_rows(const AttnParams &p, const SeqView &s, int h, int r0, int r1) {
    for (int r = r0; r < r1; r++) // 32-bit indices: a 64-bit division here made ptxas spill
        for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
            mf_st(p.o, p.dt, s.o_off + (int64_t)r * p.o_sr + (int64_t)h * p.o_sh + d, 0.0f);
            if (p.lse && d == 0) p.lse[s.l_off + (int64_t)r * p.l_sr + (int64_t)h * p.l_sh] = -INFINITY;
        }
}

// The rows of one prefill block: q rows [m0, m0 + bm) of sequence s, head h.
struct PrefillRows {
    int m0, m_end;     // real rows [m0, m_end)
    int off;           // k_len - q_len: causal masks align bottom-right
    int n_lo, n_hi;    // keys [n_lo, n_hi) are visible from at least one real row
};

// The prologue both prefill kernels share. A bad sequence is counted once
// (block x 0 of head 0) and its rows zero-filled, also those past the grid
// (q_len > max_q_len); returns false then, and when the block has no real
// row; otherwise fills r.
__device__ __forceinline__ bool attn_prefill_rows(const AttnParams &p, const SeqView &s, int h, int m0, int bm,
                                                  PrefillRows &r) {
    if (!s.ok && blockIdx.x == 0 && h == 0 && threadIdx.x == 0) atomicAdd(p.err, 1u);
    if (s.q_len <= m0) return false;
    if (!s.ok) {
        for (int64_t r0 = m0; r0 < s.q_len; r0 += (int64_t)gridDim.x * bm) // int64: q_len near INT_MAX
            attn_zero_rows(p, s, h, (int)r0, (int)min((int64_t)s.q_len, r0 + bm));
        return false;
    }
    r.m0 = m0, r.m_end = min(s.q_len, m0 + bm), r.off = s.k_len - s.q_len;
    r.n_lo = 0, r.n_hi = s.k_len;
    if (p.causal) {
        r.n_hi = max(0, min(r.n_hi, r.m_end - 1 + r.off + 1));
        if (p.window > 0) // int64: window up to INT_MAX
            r.n_lo = (int)max((int64_t)0, (int64_t)m0 + r.off - p.window + 1);
    }
    return true;
}

// Whether keys [n0, n0 + bn) need the mask for some real row of the block
// (past k_len, or crossing the causal / window edge); other visited tiles
// are wholly visible to every real row.
__device__ __forceinline__ bool attn_edge_tile(const AttnParams &p, const SeqView &s, const PrefillRows &r, int n0,
                                               int bn) {
    return n0 + bn > s.k_len ||
           (p.causal && (n0 + bn - 1 > r.m0 + r.off || (p.window > 0 && n0 <= r.m_end - 1 + r.off - p.window)));
}

// One key tile of the prefill kernels' online softmax, on accumulators in
// the m16n8 / m64nN layout: a thread holds rows g and g + 8 (r = 0, 1) of
// `ns` 8-column groups of scores, sc(i, 2r) and sc(i, 2r + 1), and the same
// of `no` groups of O; the 4 lanes of a quad share a row (shuffles 1, 2).
// Scores are in the exp2 domain and become P (unnormalised); O is rescaled;
// mrow / lrow are the running max and the thread's partial sum of each row.
template <int ns, int no, typename Sc, typename Ov>
__device__ __forceinline__ void attn_softmax_tile(Sc sc, Ov o, float (&mrow)[2], float (&lrow)[2]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < ns; i++) mx = fmaxf(mx, fmaxf(sc(i, 2 * r), sc(i, 2 * r + 1)));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(mrow[r], mx);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new; // a row blind so far: no inf - inf
        const float alpha = attn_exp2(mrow[r] - m_use);
        mrow[r] = m_new;
        float rs = 0.0f;
#pragma unroll
        for (int i = 0; i < ns; i++) {
            sc(i, 2 * r) = attn_exp2(sc(i, 2 * r) - m_use);
            sc(i, 2 * r + 1) = attn_exp2(sc(i, 2 * r + 1) - m_use);
            rs += sc(i, 2 * r) + sc(i, 2 * r + 1);
        }
        lrow[r] = lrow[r] * alpha + rs; // the thread's partial; the quad sums at the end
#pragma unroll
        for (int i = 0; i < no; i++) o(i, 2 * r) *= alpha, o(i, 2 * r + 1) *= alpha;
    }
}

// After the last tile: O divided by the row sums (quad-reduced) and each
// row's lse; a row that saw no key (l = 0) gives 0 and lse -inf.
template <int no, typename Ov>
__device__ __forceinline__ void attn_softmax_finish(Ov o, const float (&mrow)[2], const float (&lrow)[2],
                                                    float (&lse)[2]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float l = lrow[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        lse[r] = l > 0.0f ? (mrow[r] + __log2f(l)) * kLn2 : -INFINITY;
#pragma unroll
        for (int i = 0; i < no; i++) o(i, 2 * r) *= inv, o(i, 2 * r + 1) *= inv;
    }
}

// What the family keeps per backend (mf_cuda_ctx::attention), made by its
// first use (attention.cu) and freed by mf_cuda_attention_release.
struct mf_cuda_attention_state {
    const char *path; // how the last mf_attention ran: "decode" | "wgmma" | "prefill" | "fallback" | ""
    int sm90;         // the sm_90a prefill kernel runs here: 1 yes, -1 no, 0 not asked yet
};
// The backend's state, made on first use; NULL (with mf_fail's message) when
// out of host memory.
mf_cuda_attention_state *mf_cuda_attention_state_of(mf_cuda_ctx *c);

// Entries of the three kernels (argument checks done by the dispatch).
mf_status mf_cuda_attn_prefill(mf_cuda_ctx *c, const AttnParams &p);     // attn_prefill.cu
bool mf_cuda_attn_prefill_fits(const AttnParams &p);                     // tensor-core shapes
bool mf_cuda_attn_sm90_available(mf_cuda_ctx *c);                       // attn_prefill_sm90.cu
bool mf_cuda_attn_sm90_fits(mf_cuda_ctx *c, const AttnParams &p);        // f16/bf16, D 64/128/256, sm_90a
mf_status mf_cuda_attn_prefill_sm90(mf_cuda_ctx *c, const AttnParams &p);
mf_status mf_cuda_attn_decode(mf_cuda_ctx *c, const AttnParams &p, int num_splits, void *ws,
                              size_t ws_bytes);                           // attn_decode.cu
bool mf_cuda_attn_decode_fits(const AttnParams &p);
int mf_cuda_attn_decode_splits(const mf_cuda_ctx *c, const AttnParams &p, int num_splits);
size_t mf_cuda_attn_decode_ws_bytes(const AttnParams &p, int splits);
mf_status mf_cuda_attn_fallback(mf_cuda_ctx *c, const AttnParams &p);    // attention.cu

#endif // MF_CUDA_ATTENTION_CUH
