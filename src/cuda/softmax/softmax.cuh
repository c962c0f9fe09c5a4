// Internal: what the variants of the CUDA softmax share (softmax.cu: the
// dispatch, see it for the design; rows.cu, online.cu, generic.cu: the
// kernels): the launch parameters, a row's geometry, the chunk loads and
// stores, the exp2 math and the (max, sum) reductions, the backend's softmax
// state and each variant's launcher.
#ifndef MF_CUDA_SOFTMAX_SOFTMAX_CUH
#define MF_CUDA_SOFTMAX_SOFTMAX_CUH

#include "cuda/common.cuh"

// What the dispatch asks the runtime, asked once per backend and kept here
// (mf_cuda_ctx::softmax, freed by mf_cuda_softmax_release): occupancy of the
// persistent kernels, whether clusters of the rows kernel can run, and the L2
// size. Launches then make no occupancy or attribute queries.
struct mf_cuda_softmax_state {
    int occ_online, occ_generic; // resident blocks per SM; 0: not asked yet
    int max_cs[2];               // largest cluster of rows<bcol> blocks that can run (1: none); 0: not asked yet
    int l2_bytes;                // 0 when unknown
};

namespace softmax {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kRowsBlock = 128;             // rows kernel, G <= 32: threads per block (128 / G rows)
constexpr int kRowsMaxThreads = 512;        // rows kernel: threads per row and block at most
constexpr int kRowsChunks = 2;              // rows kernel: chunks per thread (two 16-byte loads in flight)
constexpr int kRowsMaxChunks = kRowsMaxThreads * kRowsChunks; // one block holds rows up to ~8K columns
constexpr int kClusterMax = 16;             // H100's largest (non-portable) cluster: rows up to ~128K columns
constexpr int kSmemUnroll = 2;              // online kernel: chunks in flight per thread (~30 registers each)
constexpr int kOnlineThreads = 256;
constexpr int kSplitMinChunks = 1024;       // a split of a long row covers >= 8192 columns
constexpr int kGenericThreads = 256;
static_assert(kMfVec == 8, "chunks are 8 columns: one 16-byte access for f16/bf16, two for f32");

struct SmParams {
    const void *x;           // row r at x + xo(r): cols elements, unit column stride
    void *y;                 // row r at y + yo(r)
    const void *bias;        // NULL, or row r at bias + bo(r) with column stride 1 (bcol) or 0
    const int32_t *key_lens; // NULL, or (batch) with stride kls
    int x_dt, y_dt, b_dt;    // mf_dtype values
    int head_src;            // whose 16-byte phase fixes a row's head: 0 x, 1 y, 2 bias
    int cols;                // k_len
    int64_t rows;            // batch * heads * q_len
    int64_t heads, q_len;
    int64_t xs[3], ys[3], bs[3]; // element strides of the batch, head and query dims (0: broadcast)
    int64_t kls;             // key_lens stride
    float scale;
    bool causal;
    bool bcol;               // bias varies along keys (else one value per row, or none)
    bool rows_aligned;       // every row starts 16-byte aligned in x, y (and bias): base = 0
};

// One row: where it lives and what of it is visible. Computed by every thread of the row.
struct Row {
    const char *x;  // first element of the row in x
    char *y;
    const char *b;  // bias row (NULL if no bias)
    int lim;        // keys j >= lim are masked
    int base;       // column of chunk 0 (<= 0)
    int nchunks;    // chunks covering [base, cols)
    float c;        // a one-per-row bias, kept only if +-inf or NaN (a finite one cancels)
};

__device__ __forceinline__ int dt_size(int dt) { return dt == MF_DTYPE_F32 ? 4 : 2; }

__device__ __forceinline__ Row row_setup(const SmParams &p, int64_t r) {
    int64_t i, h, b;
    if (p.rows <= 0xffffffffll) { // 32-bit divisions are several times cheaper
        const uint32_t rr = (uint32_t)r, q = (uint32_t)p.q_len, nh = (uint32_t)p.heads;
        const uint32_t t = rr / q, bb = t / nh;
        i = rr - t * q;
        b = bb;
        h = t - bb * nh;
    } else {
        const int64_t t = r / p.q_len;
        i = r - t * p.q_len;
        b = t / p.heads;
        h = t - b * p.heads;
    }
    Row row;
    row.x = static_cast<const char *>(p.x) + (b * p.xs[0] + h * p.xs[1] + i * p.xs[2]) * dt_size(p.x_dt);
    row.y = static_cast<char *>(p.y) + (b * p.ys[0] + h * p.ys[1] + i * p.ys[2]) * dt_size(p.y_dt);
    row.b = p.bias ? static_cast<const char *>(p.bias) + (b * p.bs[0] + h * p.bs[1] + i * p.bs[2]) * dt_size(p.b_dt)
                   : nullptr;
    int64_t lim = p.cols;
    if (p.causal) lim = min(lim, i + p.cols - p.q_len + 1);
    if (p.key_lens) lim = min(lim, (int64_t)p.key_lens[b * p.kls]);
    row.lim = (int)max(lim, (int64_t)0);
    row.c = 0.0f;
    if (p.bias && !p.bcol) {
        const float c = mf_ld(row.b, p.b_dt, 0);
        row.c = isfinite(c) ? 0.0f : c;
    }
    int head = 0;
    if (!p.rows_aligned) { // plan() made sure one column aligns x, y and bias at once
        const char *s = p.head_src == 0 ? row.x : p.head_src == 1 ? row.y : row.b;
        const int ds = dt_size(p.head_src == 0 ? p.x_dt : p.head_src == 1 ? p.y_dt : p.b_dt);
        head = (int)((16u - ((uintptr_t)s & 15u)) & 15u) / ds;
    }
    row.base = head > 0 ? head - kMfVec : 0;
    row.nchunks = (p.cols - row.base + kMfVec - 1) / kMfVec;
    return row;
}

// ---- chunks: issue the loads of several chunks, then convert them -------------------
// Split in two so that a thread's loads are all in flight before the first
// use (dtype branches between a load and its use would serialise them).

struct Chunk {
    float x[kMfVec]; // raw: f32 values, or 16-bit pairs packed in x[0..3] (vector f16/bf16)
    float b[kMfVec]; // bias along keys, same layout
    int kind;        // 0: nothing loaded (masked, or outside the row); 1: raw vector; 2: scalar, f32
};

__device__ __forceinline__ void ld_raw(const char *ptr, int dt, float (&r)[kMfVec]) {
    if (dt == MF_DTYPE_F32) {
        const float4 a = reinterpret_cast<const float4 *>(ptr)[0], c = reinterpret_cast<const float4 *>(ptr)[1];
        r[0] = a.x, r[1] = a.y, r[2] = a.z, r[3] = a.w;
        r[4] = c.x, r[5] = c.y, r[6] = c.z, r[7] = c.w;
    } else {
        const uint4 u = *reinterpret_cast<const uint4 *>(ptr);
        r[0] = __uint_as_float(u.x), r[1] = __uint_as_float(u.y);
        r[2] = __uint_as_float(u.z), r[3] = __uint_as_float(u.w);
    }
}

// The 16-bit pairs of ld_raw as 8 floats (f32: nothing to do).
__device__ __forceinline__ void unpack(float (&r)[kMfVec], int dt) {
    if (dt == MF_DTYPE_F32) return;
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; j++) w[j] = __float_as_uint(r[j]);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (dt == MF_DTYPE_BF16) {
            r[2 * j] = __uint_as_float(w[j] << 16);
            r[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
        } else {
            __half2 hv;
            memcpy(&hv, &w[j], 4);
            const float2 f = __half22float2(hv);
            r[2 * j] = f.x, r[2 * j + 1] = f.y;
        }
    }
}

// Eight values passed by value (so that the out-of-line helpers below keep
// their caller's arrays in registers).
struct F8 {
    float v[kMfVec];
};

// Scalar loads of columns [c0, c0 + 8) that lie in [0, lim) (others 0): the
// head and tail chunks. Out of line: one copy instead of one per chunk slot.
static __device__ __noinline__ F8 ld_partial(const char *row, int dt, int c0, int lim) {
    F8 r;
#pragma unroll
    for (int e = 0; e < kMfVec; e++) r.v[e] = c0 + e >= 0 && c0 + e < lim ? mf_ld(row, dt, c0 + e) : 0.0f;
    return r;
}

// Starts the loads of the chunk at column c0 into x (and the bias along keys
// into b when bcol; callers pass a constant where they can, so the unused
// registers fold away) and returns its kind (see Chunk). A chunk wholly at
// or past row.lim is not read; an inner chunk that straddles lim is loaded
// whole (its masked columns, inside the row, are discarded by chunk_u); head
// and tail chunks read only columns in [0, lim).
__device__ __forceinline__ int chunk_load(const SmParams &p, const Row &row, int c0, bool bcol, float (&x)[kMfVec],
                                          float (&b)[kMfVec]) {
    if (c0 >= row.lim) return 0;
    if (c0 >= 0 && c0 + kMfVec <= p.cols) {
        // 64-bit byte offsets: a row of 2^29 f32 columns (2 GiB) takes the online or split kernel
        ld_raw(row.x + (int64_t)c0 * dt_size(p.x_dt), p.x_dt, x);
        if (bcol) ld_raw(row.b + (int64_t)c0 * dt_size(p.b_dt), p.b_dt, b);
        return 1;
    }
    const F8 xv = ld_partial(row.x, p.x_dt, c0, row.lim);
    const F8 bv = bcol ? ld_partial(row.b, p.b_dt, c0, row.lim) : F8{};
#pragma unroll
    for (int e = 0; e < kMfVec; e++) x[e] = xv.v[e], b[e] = bv.v[e];
    return 2;
}

// In place: x <- u = scale * x + bias for the chunk's visible columns, -inf
// elsewhere (kind from chunk_load).
__device__ __forceinline__ void chunk_u(const SmParams &p, const Row &row, int c0, int kind, bool bcol,
                                        float (&x)[kMfVec], float (&b)[kMfVec]) {
    if (kind == 1) {
        unpack(x, p.x_dt);
        if (bcol) unpack(b, p.b_dt);
    }
#pragma unroll
    for (int e = 0; e < kMfVec; e++) {
        const bool in = kind != 0 && c0 + e >= 0 && c0 + e < row.lim;
        x[e] = in ? fmaf(x[e], p.scale, bcol ? b[e] : row.c) : -INFINITY;
    }
}

__device__ __forceinline__ void chunk_issue(const SmParams &p, const Row &row, int c0, Chunk &ck) {
    ck.kind = chunk_load(p, row, c0, p.bcol, ck.x, ck.b);
}

// u = scale * x + bias for the chunk's visible columns, -inf elsewhere.
__device__ __forceinline__ void chunk_logits(const SmParams &p, const Row &row, int c0, Chunk &ck,
                                             float (&u)[kMfVec]) {
    chunk_u(p, row, c0, ck.kind, p.bcol, ck.x, ck.b);
#pragma unroll
    for (int e = 0; e < kMfVec; e++) u[e] = ck.x[e];
}

static __device__ __noinline__ void st_partial(char *row, int dt, int c0, int cols, F8 o) {
#pragma unroll
    for (int e = 0; e < kMfVec; e++)
        if (c0 + e >= 0 && c0 + e < cols) mf_st(row, dt, c0 + e, o.v[e]);
}

// y for the chunk: e * inv on visible columns, 0 on masked ones.
__device__ __forceinline__ void chunk_store(const SmParams &p, const Row &row, int c0, const float (&e)[kMfVec],
                                            float inv) {
    F8 o;
#pragma unroll
    for (int j = 0; j < kMfVec; j++) o.v[j] = c0 + j < row.lim ? e[j] * inv : 0.0f;
    if (c0 >= 0 && c0 + kMfVec <= p.cols)
        mf_st8(row.y, p.y_dt, (int64_t)c0, o.v);
    else
        st_partial(row.y, p.y_dt, c0, p.cols, o);
}

// ---- math ---------------------------------------------------------------------------

// 2^v, ~2 ulp; ex2(-inf) = 0, NaN stays NaN
__device__ __forceinline__ float ex2(float v) { return ptx::ex2_approx_ftz(v); }

// A row's sum is kept relative to me(max): the max itself, or 0 while every
// logit seen is -inf (so -inf - -inf never makes a NaN, while a NaN logit
// still turns the sum into NaN).
__device__ __forceinline__ float me_of(float m) { return m == -INFINITY ? 0.0f : m; }

// 1 / sum: 0 for a fully masked row (sum 0); NaN stays NaN (NaN == 0 is false).
__device__ __forceinline__ float inv_of(float s) { return s == 0.0f ? 0.0f : 1.0f / s; }

// (m, s) <- the max and sum of two partial rows. A zero sum contributes
// nothing (its scale factor may overflow: 0 * inf would be NaN).
__device__ __forceinline__ void ms_combine(float &m, float &s, float m2, float s2) {
    const float M = fmaxf(m, m2), ME = me_of(M);
    // __fmul_rn: never contracted into an FMA with the sum, so both lanes of a
    // butterfly (and every block of a cluster) round alike: the same bits.
    const float a = s == 0.0f ? 0.0f : __fmul_rn(s, ex2((me_of(m) - ME) * kLog2e));
    const float b = s2 == 0.0f ? 0.0f : __fmul_rn(s2, ex2((me_of(m2) - ME) * kLog2e));
    m = M;
    s = a + b;
}

// Folds a batch of logits whose max is bm into the running (m, s).
template <int kN>
__device__ __forceinline__ void ms_update(float &m, float &s, const float (&u)[kN][kMfVec]) {
    float bm = -INFINITY;
#pragma unroll
    for (int k = 0; k < kN; k++)
#pragma unroll
        for (int e = 0; e < kMfVec; e++) bm = fmaxf(bm, u[k][e]);
    if (bm > m) {
        if (s != 0.0f) s *= ex2((me_of(m) - bm) * kLog2e);
        m = bm;
    }
    const float me = me_of(m);
#pragma unroll
    for (int k = 0; k < kN; k++)
#pragma unroll
        for (int e = 0; e < kMfVec; e++) s += ex2((u[k][e] - me) * kLog2e);
}

// Reductions over G lanes (a power of two) of a warp.
__device__ __forceinline__ float group_max(float v, int g) {
    for (int o = g >> 1; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float group_sum(float v, int g) {
    for (int o = g >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ void warp_ms(float &m, float &s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ms_combine(m, s, m2, s2);
    }
}

// (max, sum) over the block (blockDim.x a multiple of 32); every thread gets
// the result. red_m, red_s: 32 floats of shared memory each. The leading
// barrier lets the previous reduction's readers finish with them.
__device__ __forceinline__ void block_ms(float &m, float &s, float *red_m, float *red_s) {
    warp_ms(m, s);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) red_m[warp] = m, red_s[warp] = s;
    __syncthreads();
    m = lane < nwarps ? red_m[lane] : -INFINITY;
    s = lane < nwarps ? red_s[lane] : 0.0f;
    warp_ms(m, s);
}

// Resident blocks per SM of a kernel at a block size and dynamic shared
// memory, asked once per slot and kept.
template <typename K>
int resident_blocks(K kernel, int threads, size_t smem, int &slot) {
    int n = slot;
    if (n > 0) return n;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem) != cudaSuccess || n < 1) {
        (void)cudaGetLastError();
        n = 1;
    }
    slot = n;
    return n;
}

// ---- the variants' launchers (plan() in softmax.cu picks one) ----------------------------

// rows.cu: the rows kernel, with or without the bias along keys (p.bcol);
// a cluster launch of cs blocks per row when cs > 1 (G threads of a row per block).
mf_status launch_rows(const mf_cuda_ctx *c, const SmParams &p, unsigned grid, int threads, int G, int cs);
// The largest cluster (blocks per row) of rows<bcol> blocks that can run here (1: none).
int max_cluster(mf_cuda_ctx *c, mf_cuda_softmax_state *s, bool bcol);

// online.cu: the online kernel in one of three modes.
enum OnlineMode {
    kOnlineWhole = 0, // one block per row: both passes
    kOnlineStats = 1, // one block per (row, split): the split's (max, sum) -> ws
    kOnlineNorm = 2,  // one block per (row, split): combine the row's ws entries, write the split
};
mf_status launch_online(const mf_cuda_ctx *c, const SmParams &p, unsigned grid, int threads, OnlineMode mode,
                        int splits, int split_chunks, float2 *ws);
int online_resident(mf_cuda_softmax_state *s); // resident blocks per SM

// generic.cu: scalar, one block per row.
mf_status launch_generic(const mf_cuda_ctx *c, const SmParams &p, unsigned grid, int threads);
int generic_resident(mf_cuda_softmax_state *s); // resident blocks per SM

} // namespace softmax

#endif // MF_CUDA_SOFTMAX_SOFTMAX_CUH
