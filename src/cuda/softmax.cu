// Fused scale + mask + softmax (mf_softmax) on CUDA, f32 math:
//   u_j = scale * x_j + bias_j,   y_j = exp(u_j - max u) / sum_k exp(u_k - max u)
// with keys j >= lim(row) masked, lim = min(k_len, i + k_len - q_len + 1 if
// causal, key_lens[b]). Masks come from indices (never materialised); chunks
// wholly past lim are not loaded (a causal row reads its visible prefix and
// at most 7 masked columns of the chunk that straddles lim, discarded), and
// masked keys are written as 0. exp is ex2.approx of (u - max) * log2(e): the difference is
// taken first, in natural units, so that logits of magnitude 1e4 keep their
// relative accuracy (folding log2(e) into the scale would round each logit
// by ~1e-3 there), at one FMUL per element.
//
// Chunks. A row is cut into chunks of kMfVec = 8 columns, chunk k covering
// columns [base + 8k, base + 8k + 8). base = 0 when the row starts on a
// 16-byte boundary in x, y and bias; otherwise base = h - 8 where column h is
// the first at which they all are, so chunk 0 is a partial "head". Chunks
// inside the row are one 16-byte access (two for f32); the head and the tail
// use scalar accesses. A layout whose x, y and bias can never be 16-byte
// aligned at one column (e.g. f32 x and bf16 y whose rows drift apart) runs
// the generic kernel instead: scalar, one block per row.
//
// Variants, picked by plan() from the row length; plan() also answers
// "supported?" (every variant takes any row count; columns < 2^31):
//   rows     <= kRowsMaxChunks (~8K cols): the row in registers, 2 chunks per
//            thread over G = 1..512 threads (G <= 32: several rows per
//            128-thread block). One load, one exp and one store per element.
//   cluster  (sm_90) rows up to 16 blocks long (~128K cols): the rows kernel
//            with the row spread over a cluster of blocks that exchange their
//            (max, sum) partials through distributed shared memory.
//   online   longer rows (or long rows without clusters): pass 1 keeps a
//            running (max, sum) per thread, combined over the block; pass 2
//            re-reads the row (from L2 while the rows in flight fit there)
//            and writes y.
//   split    long rows but too few of them to fill the chip: each row is cut
//            into splits, a stats launch writes (max, sum) per split into the
//            backend's workspace, a normalise launch combines and writes.
//   generic  layouts that cannot be vectorised: scalar, online, any length.
// The rows and cluster grids cover every row (the scheduler overlaps blocks'
// phases); the others loop grid-stride over rows (or row splits), their grid
// sized to the blocks the chip holds at once.
//
// In place (y == x): every element is read by the thread that writes it, and
// before it writes it; no thread reads an element another one writes.
#include <algorithm>
#include <climits>

#include <cooperative_groups.h>

#include "core/alloc.h"
#include "cuda/common.cuh"
#include "cuda/cuda_query.h"
#include "kernels/softmax_geom.h"

namespace cg = cooperative_groups;

namespace {

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
__device__ __noinline__ F8 ld_partial(const char *row, int dt, int c0, int lim) {
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

__device__ __noinline__ void st_partial(char *row, int dt, int c0, int cols, F8 o) {
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

__device__ __forceinline__ float ex2(float v) { // 2^v, ~2 ulp; ex2(-inf) = 0, NaN stays NaN
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}

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

// ---- rows: a whole row in registers -------------------------------------------------------

// A row's chunks are spread over a group of G threads and, for rows longer
// than one block holds, over a cluster of cs blocks (sm_90; cs = 1
// elsewhere). G <= 32: a power of two, kRowsBlock / G rows per block,
// reductions by shuffles. G > 32: the whole block (a multiple of 32 threads)
// is one row's group. Block q of a cluster holds the row's chunks
// [q G kC, (q + 1) G kC); thread t of a group holds chunks t, t + G, ... of
// that range (kC of them), so a warp's accesses are consecutive 16-byte
// pieces. Each element is loaded once, exponentiated once and written by the
// thread that read it (y == x works). The grid covers every row (no
// persistent loop over rows): the scheduler overlaps one block's reductions
// and stores with other blocks' loads.

// The row's max (kMax) or sum of v over its group (G <= 32) or its block
// (G > 32); every thread of the group gets the same value (xor butterflies
// give every lane the same sum: float addition is commutative). red: 32
// floats of shared memory, used by one kind of reduction only (see the
// kernel for why no further barriers are needed).
template <bool kMax> __device__ __forceinline__ float row_reduce(float v, int G, float *red) {
    if (G <= 32) return kMax ? group_max(v, G) : group_sum(v, G);
    v = kMax ? group_max(v, 32) : group_sum(v, 32);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nwarps ? red[lane] : (kMax ? -INFINITY : 0.0f);
    return kMax ? group_max(v, 32) : group_sum(v, 32);
}

// The row's (max, sum) over a cluster of cs blocks from each block's (m, s)
// (s relative to the block's own max): one cluster barrier per row. cl: this
// row's slot of a double buffer (a block writes the slot again two rows on,
// after the next row's barrier, which every block passes only after it read
// this row's slots). Lane q reads rank q (cs <= 16 < 32): one round of remote
// latency; the butterfly gives every lane of every block the same bits.
__device__ __forceinline__ void cluster_ms(float &m, float &s, int cs, float2 *cl) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) *cl = make_float2(m, s);
    cluster.sync(); // release/acquire: every block's slot is visible to the cluster
    const int lane = threadIdx.x & 31;
    const float2 t = lane < cs ? *cluster.map_shared_rank(cl, lane) : make_float2(-INFINITY, 0.0f);
    m = t.x, s = t.y;
    warp_ms(m, s);
#else
    (void)m, (void)s, (void)cl;
    if (cs > 1) __trap(); // no cluster exchange in this image (max_cluster never plans one)
#endif
}

// Barriers: red_m is written again only in the next row's max step, which
// every thread reaches after the sum step's barrier, i.e. after the last
// read of this row's max partials; red_s likewise after the next max step's
// barrier. Clusters: see cluster_ms; a cluster syncs once more before
// exiting so that no block leaves while its last slot is read.
template <bool kBcol>
__global__ void __launch_bounds__(kRowsMaxThreads, kBcol ? 1 : 2)
    softmax_rows_kernel(SmParams p, int G, int cs) {
    constexpr int kC = kRowsChunks;
    __shared__ float red_m[32], red_s[32];
    __shared__ float2 cl[2]; // clusters: (max, sum) of this block for even / odd rows
    const bool wide = G > 32;
    const int gl = wide ? (int)threadIdx.x : (int)threadIdx.x & (G - 1);
    const int rows_per_block = wide ? 1 : (int)blockDim.x / G;
    const int rank = cs > 1 ? (int)(blockIdx.x % cs) : 0; // 1-D clusters: the block's rank in its cluster
    const int64_t nblk = (p.rows + rows_per_block - 1) / rows_per_block;
    int parity = 0; // clusters: the row's slot of cl
    for (int64_t blk = blockIdx.x / cs; blk < nblk; blk += gridDim.x / cs, parity ^= 1) {
        const int64_t r = blk * rows_per_block + (wide ? 0 : (int)threadIdx.x / G);
        Row row = row_setup(p, r < p.rows ? r : p.rows - 1);
        if (r >= p.rows) row.nchunks = 0, row.lim = 0; // its lanes still join the shuffles
        const int c_beg = rank * G * kC + gl;
        float v[kC][kMfVec];                 // raw loads, then logits, then exp
        float b[kBcol ? kC : 1][kMfVec];     // bias along keys
        unsigned kinds = 0; // chunk k's kind in bits 2k, 2k + 1
#pragma unroll
        for (int k = 0; k < kC; k++) {
            const int c = c_beg + k * G;
            if (c < row.nchunks)
                kinds |= (unsigned)chunk_load(p, row, row.base + c * kMfVec, kBcol, v[k], b[kBcol ? k : 0]) << (2 * k);
        }
        float m = -INFINITY;
#pragma unroll
        for (int k = 0; k < kC; k++) {
            chunk_u(p, row, row.base + (c_beg + k * G) * kMfVec, (kinds >> (2 * k)) & 3u, kBcol, v[k],
                    b[kBcol ? k : 0]);
#pragma unroll
            for (int e = 0; e < kMfVec; e++) m = fmaxf(m, v[k][e]);
        }
        // The block's max (the row's without clusters); the exponentials are
        // taken against it, and a cluster rescales once it knows the row's.
        const float mb = row_reduce<true>(m, G, red_m), me = me_of(mb);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < kC; k++)
#pragma unroll
            for (int e = 0; e < kMfVec; e++) {
                v[k][e] = ex2((v[k][e] - me) * kLog2e);
                s += v[k][e];
            }
        const float sb = row_reduce<false>(s, G, red_s);
        float inv = inv_of(sb);
        if (cs > 1) { // y = e^(x - mb) e^(mb - M) / S
            float M = mb, S = sb;
            cluster_ms(M, S, cs, &cl[parity]);
            // A block whose logits are all -inf (sb = 0) takes factor 0 (e^(0 - M) may
            // overflow: 0 inf would be NaN), but still S's 1 / S: 0 for a fully
            // masked row, NaN when a NaN elsewhere in the row made S NaN.
            const float f = sb == 0.0f ? 0.0f : ex2((me - me_of(M)) * kLog2e);
            inv = f * inv_of(S);
        }
#pragma unroll
        for (int k = 0; k < kC; k++) {
            const int c = c_beg + k * G;
            if (c < row.nchunks) chunk_store(p, row, row.base + c * kMfVec, v[k], inv);
        }
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (cs > 1) cg::this_cluster().sync();
#endif
}

// ---- online: long rows, two passes over memory ------------------------------------------

enum OnlineMode {
    kOnlineWhole = 0, // one block per row: both passes
    kOnlineStats = 1, // one block per (row, split): the split's (max, sum) -> ws
    kOnlineNorm = 2,  // one block per (row, split): combine the row's ws entries, write the split
};

// Work item w = (row, split j) covers the row's chunks [j * split_chunks,
// (j + 1) * split_chunks); kOnlineWhole has splits = 1 and split_chunks >=
// any row's chunk count. Threads take kSmemUnroll chunks at a time, T apart.
__global__ void __launch_bounds__(kOnlineThreads) softmax_online_kernel(SmParams p, int mode, int splits,
                                                                        int split_chunks, float2 *ws) {
    __shared__ float red_m[32], red_s[32];
    const int nt = blockDim.x;
    const int64_t items = p.rows * splits;
    for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
        const int64_t r = w / splits;
        const int j = (int)(w - r * splits);
        const Row row = row_setup(p, r);
        const int k_beg = j * split_chunks, k_end = min(row.nchunks, k_beg + split_chunks);
        float m = -INFINITY, s = 0.0f;
        if (mode != kOnlineNorm) {
            const int k_vis = min(k_end, (row.lim - row.base + kMfVec - 1) / kMfVec);
            for (int k0 = k_beg + threadIdx.x; k0 < k_vis; k0 += nt * kSmemUnroll) {
                Chunk ck[kSmemUnroll];
#pragma unroll
                for (int q = 0; q < kSmemUnroll; q++) {
                    const int k = k0 + q * nt;
                    ck[q].kind = 0;
                    if (k < k_vis) chunk_issue(p, row, row.base + k * kMfVec, ck[q]);
                }
                float u[kSmemUnroll][kMfVec];
#pragma unroll
                for (int q = 0; q < kSmemUnroll; q++) chunk_logits(p, row, row.base + (k0 + q * nt) * kMfVec, ck[q], u[q]);
                ms_update<kSmemUnroll>(m, s, u);
            }
            block_ms(m, s, red_m, red_s);
            if (mode == kOnlineStats) {
                if (threadIdx.x == 0) ws[w] = make_float2(m, s);
                continue;
            }
        } else {
            for (int q = threadIdx.x; q < splits; q += nt) {
                const float2 t = ws[r * splits + q];
                ms_combine(m, s, t.x, t.y);
            }
            block_ms(m, s, red_m, red_s);
        }
        const float me = me_of(m), inv = inv_of(s);
        // Pass 2 over every chunk of the range (masked ones: no loads, written as 0).
        for (int k0 = k_beg + threadIdx.x; k0 < k_end; k0 += nt * kSmemUnroll) {
            Chunk ck[kSmemUnroll];
#pragma unroll
            for (int q = 0; q < kSmemUnroll; q++) {
                const int k = k0 + q * nt;
                ck[q].kind = 0;
                if (k < k_end) chunk_issue(p, row, row.base + k * kMfVec, ck[q]);
            }
#pragma unroll
            for (int q = 0; q < kSmemUnroll; q++) {
                const int k = k0 + q * nt;
                if (k < k_end) {
                    float u[kMfVec];
                    chunk_logits(p, row, row.base + k * kMfVec, ck[q], u);
#pragma unroll
                    for (int e = 0; e < kMfVec; e++) u[e] = ex2((u[e] - me) * kLog2e);
                    chunk_store(p, row, row.base + k * kMfVec, u, inv);
                }
            }
        }
    }
}

// ---- generic: any layout, scalar ----------------------------------------------------------

// One block per row (grid-stride), thread t takes columns t, t + T, ...:
// pass 1 an online (max, sum) per thread, pass 2 re-reads and writes. For
// layouts whose x, y and bias never share a 16-byte boundary.
__global__ void __launch_bounds__(kGenericThreads) softmax_generic_kernel(SmParams p) {
    __shared__ float red_m[32], red_s[32];
    for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
        const Row row = row_setup(p, r);
        float m = -INFINITY, s = 0.0f;
        for (int64_t j = threadIdx.x; j < row.lim; j += blockDim.x) { // 64-bit: cols may be near 2^31
            const float u = fmaf(mf_ld(row.x, p.x_dt, j), p.scale, p.bcol ? mf_ld(row.b, p.b_dt, j) : row.c);
            ms_combine(m, s, u, u == -INFINITY ? 0.0f : 1.0f); // one logit is (max u, sum 1); NaN stays NaN
        }
        block_ms(m, s, red_m, red_s);
        const float me = me_of(m), inv = inv_of(s);
        for (int64_t j = threadIdx.x; j < p.cols; j += blockDim.x) {
            float o = 0.0f;
            if (j < row.lim) {
                const float u = fmaf(mf_ld(row.x, p.x_dt, j), p.scale, p.bcol ? mf_ld(row.b, p.b_dt, j) : row.c);
                o = ex2((u - me) * kLog2e) * inv;
            }
            mf_st(row.y, p.y_dt, j, o);
        }
    }
}

// ---- dispatch ------------------------------------------------------------------------------

enum Variant { kVarRows, kVarCluster, kVarOnline, kVarSplit, kVarGeneric };

const char *variant_name(Variant v) {
    switch (v) {
    case kVarRows: return "rows";
    case kVarCluster: return "cluster";
    case kVarOnline: return "online";
    case kVarSplit: return "split";
    case kVarGeneric: return "generic";
    }
    return "?";
}

struct Plan {
    Variant var;
    int G;                        // rows/cluster: threads per row in a block
    int cs;                       // cluster: blocks per row (1 otherwise)
    int threads;                  // per block
    unsigned grid;
    int nchunks;                  // chunks per row at most
    int splits, split_chunks;     // split variant
};

} // namespace

// What plan() asks the runtime, asked once per backend and kept here
// (mf_cuda_ctx::softmax): occupancy of the persistent kernels, whether
// clusters of the rows kernel can run, and the L2 size. Launches then make no
// occupancy or attribute queries.
struct mf_cuda_softmax_launch {
    int occ_online, occ_generic; // resident blocks per SM; 0: not asked yet
    int max_cs[2];               // largest cluster of rows<bcol> blocks that can run (1: none); 0: not asked yet
    int l2_bytes;                // 0 when unknown
};

extern "C" void mf_cuda_softmax_release(mf_cuda_ctx *ctx) {
    free(ctx->softmax);
    ctx->softmax = nullptr;
}

namespace {

mf_status launch_state(mf_cuda_ctx *c, mf_cuda_softmax_launch **out) {
    if (!c->softmax) {
        mf_cuda_softmax_launch *s = static_cast<mf_cuda_softmax_launch *>(mf_calloc(1, sizeof *s));
        if (!s) return mf_fail(MF_ERR_OOM, "softmax: out of host memory (%zu bytes of launch cache)", sizeof *s);
        if (cudaDeviceGetAttribute(&s->l2_bytes, cudaDevAttrL2CacheSize, c->device) != cudaSuccess) {
            (void)cudaGetLastError();
            s->l2_bytes = 0;
        }
        c->softmax = s;
    }
    *out = c->softmax;
    return MF_OK;
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

// The launch configuration of a rows kernel: a cluster of cs blocks per row
// when cs > 1 (the attribute lives in `attr`, which must outlive the launch).
cudaLaunchConfig_t rows_config(unsigned grid, int threads, int cs, cudaStream_t stream, cudaLaunchAttribute *attr) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = (unsigned)cs;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = cs > 1 ? 1 : 0;
    return cfg;
}

// The largest cluster (blocks per row) of kRowsMaxThreads-thread rows<bcol>
// blocks that can run: 16, 8, 4 or 2 where the occupancy calculator finds
// room for one (sm_90 and later), else 1. Asked once per bias kind.
int max_cluster(mf_cuda_ctx *c, mf_cuda_softmax_launch *s, bool bcol) {
    int &best = s->max_cs[bcol];
    if (best > 0) return best;
    best = 1;
    if (c->cc_major < 9) return best;
    void (*kernel)(SmParams, int, int) = bcol ? softmax_rows_kernel<true> : softmax_rows_kernel<false>;
    // The cluster exchange exists only in code compiled for sm_90+: a kernel
    // JIT-compiled from compute_80 PTX (a newer GPU than the build's SASS, or
    // an sm_80-only build on an H100) would normalise each block's slice alone.
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess || fa.ptxVersion < 90) {
        (void)cudaGetLastError();
        return best;
    }
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)
        (void)cudaGetLastError(); // then only portable sizes (<= 8) can pass below
    for (int cs = kClusterMax; cs >= 2; cs /= 2) {
        cudaLaunchAttribute attr;
        const cudaLaunchConfig_t cfg = rows_config((unsigned)cs, kRowsMaxThreads, cs, c->stream, &attr);
        int n = 0;
        if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
            (void)cudaGetLastError();
            n = 0;
        }
        if (n > 0) {
            best = cs;
            break;
        }
    }
    return best;
}

unsigned grid_of(int64_t work, int64_t cap) {
    work = std::min(work, cap);
    return (unsigned)std::max(work, (int64_t)1);
}

int esize(int dt) { return dt == MF_DTYPE_F32 ? 4 : 2; }

// Can one column of every row align x, y and bias to 16 bytes together? Each
// tensor's row start has a phase (in elements) modulo v = 16 / element size;
// two tensors agree at some column iff their phases are congruent modulo the
// smaller v, which holds for all rows when the base pointers and every stride
// are. (v is 4 or 8, so pairwise agreement is enough.)
bool alignable(const SmParams &p) {
    struct T { uintptr_t addr; int e; const int64_t *st; } t[3] = {
        {(uintptr_t)p.x, esize(p.x_dt), p.xs}, {(uintptr_t)p.y, esize(p.y_dt), p.ys}, {(uintptr_t)p.bias, esize(p.b_dt), p.bs}};
    const int n = p.bcol ? 3 : 2;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            const int64_t g = 16 / std::max(t[a].e, t[b].e); // the smaller v
            const int64_t pa = (int64_t)(t[a].addr / t[a].e), pb = (int64_t)(t[b].addr / t[b].e);
            if ((pa - pb) % g != 0) return false;
            for (int d = 0; d < 3; d++)
                if ((t[a].st[d] - t[b].st[d]) % g != 0) return false;
        }
    return true;
}

// Rows of `blocks_per_row`-block groups over `rows_per_block` rows each: the
// grid, a multiple of blocks_per_row within the grid limit (the kernels loop
// over what does not fit).
unsigned rows_grid(int64_t rows, int rows_per_block, int blocks_per_row) {
    const int64_t groups = (rows + rows_per_block - 1) / rows_per_block;
    return (unsigned)(std::max((int64_t)1, std::min(groups, (int64_t)INT_MAX / blocks_per_row)) * blocks_per_row);
}

int round32(int n) { return (n + 31) / 32 * 32; }

// Picks the variant for these parameters, or says why they are unsupported.
// Thresholds, with the reasoning in docs/notes/softmax.md: a row is held in
// registers at 2 chunks (16 values) per thread over up to 512 threads (~8K
// columns), over a cluster of up to 16 blocks on sm_90 (~128K columns);
// longer rows, and long rows on older GPUs, stream twice (online).
// A long row is split over several blocks when the rows alone cannot fill
// the chip.
mf_status plan(mf_cuda_ctx *c, const SmParams &p, Plan *pl) {
    const int ex = esize(p.x_dt), ey = esize(p.y_dt), eb = esize(p.b_dt);
    if ((uintptr_t)p.x % ex || (uintptr_t)p.y % ey || (p.bias && (uintptr_t)p.bias % eb) ||
        (p.key_lens && (uintptr_t)p.key_lens % 4))
        return mf_fail(MF_ERR_UNSUPPORTED,
                       "softmax: a pointer is not aligned to its element size (x %p, y %p, bias %p, key_lens %p)",
                       p.x, p.y, p.bias, static_cast<const void *>(p.key_lens));
    mf_cuda_softmax_launch *ls = nullptr;
    MF_TRY(launch_state(c, &ls));
    const int64_t resident_sm = c->sm_count;
    pl->splits = 1;
    pl->cs = 1;
    pl->G = 0;
    if (!alignable(p)) {
        pl->var = kVarGeneric;
        pl->threads = kGenericThreads;
        const int occ = resident_blocks(softmax_generic_kernel, kGenericThreads, 0, ls->occ_generic);
        pl->grid = grid_of(p.rows, resident_sm * occ);
        return MF_OK;
    }
    const int nchunks = (p.cols + kMfVec - 1) / kMfVec + (p.rows_aligned ? 0 : 1);
    pl->nchunks = pl->split_chunks = nchunks;
    // In one block: G threads of kRowsChunks chunks each (G a power of two
    // up to 32, else a multiple of 32).
    if (nchunks <= kRowsMaxChunks) {
        const int g = (nchunks + kRowsChunks - 1) / kRowsChunks;
        int G = 1;
        if (g <= 32)
            while (G < g) G *= 2;
        else
            G = round32(g);
        pl->var = kVarRows;
        pl->G = G;
        pl->threads = G <= 32 ? kRowsBlock : G;
        pl->grid = rows_grid(p.rows, G <= 32 ? kRowsBlock / G : 1, 1);
        return MF_OK;
    }
    // Long rows: a cluster of cs blocks per row if the GPU has clusters and
    // the row fits in the largest one; the chunks are spread evenly.
    const int cs = (nchunks + kRowsMaxChunks - 1) / kRowsMaxChunks;
    const bool cluster = cs <= max_cluster(c, ls, p.bcol);
    const int occ = resident_blocks(softmax_online_kernel, kOnlineThreads, 0, ls->occ_online);
    const int64_t resident = resident_sm * occ;
    // Few rows: split them over blocks (three passes over memory instead of
    // two, but the whole chip works), unless clusters already fill it.
    if ((!cluster || p.rows * cs < resident_sm) && p.rows > 0 && p.rows < resident && c->workspace) {
        int64_t splits = (resident + p.rows - 1) / p.rows;
        splits = std::min(splits, (int64_t)(nchunks / kSplitMinChunks));
        splits = std::min(splits, (int64_t)(c->workspace_bytes / sizeof(float2)) / p.rows);
        if (splits >= 2) {
            pl->var = kVarSplit;
            pl->threads = kOnlineThreads;
            pl->splits = (int)splits;
            pl->split_chunks = (int)((nchunks + splits - 1) / splits);
            pl->grid = grid_of(p.rows * splits, resident);
            return MF_OK;
        }
    }
    if (cluster) {
        const int per_block = (nchunks + cs - 1) / cs;
        pl->var = kVarCluster;
        pl->cs = cs;
        pl->G = pl->threads = round32((per_block + kRowsChunks - 1) / kRowsChunks);
        // cluster_ms exchanges one (max, sum) per block: one row per block (G > 32),
        // true for every cluster row (per_block > kRowsMaxChunks / 2 chunks); kept true here.
        if (pl->G <= 32)
            return mf_fail(MF_ERR_INTERNAL, "softmax: cluster plan with %d threads per block", pl->G);
        pl->grid = rows_grid(p.rows, 1, cs);
        return MF_OK;
    }
    pl->var = kVarOnline;
    pl->threads = kOnlineThreads;
    // Pass 2 re-reads the row: keep the rows in flight within half the L2 so
    // that it hits there (but at least one block per SM).
    const int l2 = ls->l2_bytes;
    const int64_t row_bytes = (int64_t)p.cols * (ex + (p.bcol ? eb : 0));
    const int64_t cap = l2 > 0 ? std::max(resident_sm, std::min(resident, (int64_t)l2 / 2 / row_bytes)) : resident;
    pl->grid = grid_of(p.rows, cap);
    return MF_OK;
}

// The rows kernel, with or without the bias along keys; a cluster launch when
// the plan spreads a row over several blocks.
mf_status launch_rows(const mf_cuda_ctx *c, const Plan &pl, const SmParams &p) {
    void (*kernel)(SmParams, int, int) = p.bcol ? softmax_rows_kernel<true> : softmax_rows_kernel<false>;
    if (pl.cs == 1) {
        kernel<<<pl.grid, pl.threads, 0, c->stream>>>(p, pl.G, 1);
        return MF_OK;
    }
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = rows_config(pl.grid, pl.threads, pl.cs, c->stream, &attr);
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, p, pl.G, pl.cs);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return mf_fail(MF_ERR_CUDA, "softmax: cluster launch of %d blocks per row failed: %s", pl.cs,
                       cudaGetErrorString(e));
    }
    return MF_OK;
}

mf_status params_of(const mf_softmax_args *a, SmParams *p) {
    mf_softmax_geom g;
    mf_softmax_geom_of(a, &g);
    if (g.k_len > INT_MAX - 2 * kMfVec)
        return mf_fail(MF_ERR_UNSUPPORTED, "softmax: k_len %lld exceeds the CUDA kernels' 2^31 - 17 columns",
                       (long long)g.k_len);
    p->x = a->x.data;
    p->y = a->y.data;
    p->bias = a->bias ? a->bias->data : nullptr;
    p->key_lens = a->key_lens ? static_cast<const int32_t *>(a->key_lens->data) : nullptr;
    p->x_dt = a->x.dtype;
    p->y_dt = a->y.dtype;
    p->b_dt = a->bias ? (int)a->bias->dtype : (int)MF_DTYPE_F32;
    p->rows = g.rows;
    p->cols = (int)g.k_len;
    p->heads = g.heads;
    p->q_len = g.q_len;
    for (int d = 0; d < 3; d++) {
        p->xs[d] = g.xs[d];
        p->ys[d] = g.ys[d];
        p->bs[d] = g.bs[d];
    }
    p->kls = g.kls;
    p->scale = a->scale;
    p->causal = a->causal;
    p->bcol = a->bias && g.bs[3] != 0;
    // The head of a row is fixed by a tensor with 2-byte elements if any (its
    // phase is the finer one), else by x.
    p->head_src = p->x_dt != MF_DTYPE_F32 ? 0 : p->y_dt != MF_DTYPE_F32 ? 1 : (p->bcol && p->b_dt != MF_DTYPE_F32) ? 2 : 0;
    bool al = mf_aligned16(p->x) && mf_aligned16(p->y);
    for (int d = 0; d < 3; d++) al = al && (p->xs[d] * esize(p->x_dt)) % 16 == 0 && (p->ys[d] * esize(p->y_dt)) % 16 == 0;
    if (p->bcol) {
        al = al && mf_aligned16(p->bias);
        for (int d = 0; d < 3; d++) al = al && (p->bs[d] * esize(p->b_dt)) % 16 == 0;
    }
    p->rows_aligned = al;
    return MF_OK;
}

} // namespace

extern "C" const char *mf_cuda_softmax_variant(mf_backend *be, const mf_softmax_args *a) {
    SmParams p;
    Plan pl;
    if (params_of(a, &p) != MF_OK || plan(mf_cuda_ctx_of(be), p, &pl) != MF_OK) return nullptr;
    return variant_name(pl.var);
}

extern "C" int mf_cuda_softmax_clusters(mf_backend *be, int bias_along_keys, int *cc) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    if (cc) *cc = c->cc_major * 10 + c->cc_minor;
    mf_cuda_softmax_launch *ls = nullptr;
    if (launch_state(c, &ls) != MF_OK) return 1;
    return max_cluster(c, ls, bias_along_keys != 0);
}

extern "C" mf_status mf_cuda_softmax(mf_backend *be, const mf_softmax_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    SmParams p;
    Plan pl;
    MF_TRY(params_of(a, &p));
    MF_TRY(plan(c, p, &pl));
    switch (pl.var) {
    case kVarRows:
    case kVarCluster: MF_TRY(launch_rows(c, pl, p)); break;
    case kVarOnline:
        softmax_online_kernel<<<pl.grid, pl.threads, 0, c->stream>>>(p, kOnlineWhole, 1, pl.split_chunks, nullptr);
        break;
    case kVarSplit: {
        // (rows, splits) partial (max, sum) pairs in the backend's workspace:
        // ordered on the stream like every other user of it.
        float2 *ws = static_cast<float2 *>(c->workspace);
        softmax_online_kernel<<<pl.grid, pl.threads, 0, c->stream>>>(p, kOnlineStats, pl.splits, pl.split_chunks, ws);
        MF_CUDA_CHECK_LAUNCH("softmax (split stats)");
        softmax_online_kernel<<<pl.grid, pl.threads, 0, c->stream>>>(p, kOnlineNorm, pl.splits, pl.split_chunks, ws);
        break;
    }
    case kVarGeneric: softmax_generic_kernel<<<pl.grid, pl.threads, 0, c->stream>>>(p); break;
    }
    MF_CUDA_CHECK_LAUNCH("softmax");
    return MF_OK;
}
