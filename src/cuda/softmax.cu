// Fused scale + mask + softmax (mf_softmax) on CUDA, f32 math:
//   u_j = scale * x_j + bias_j,   y_j = exp(u_j - max u) / sum_k exp(u_k - max u)
// with keys j >= lim(row) masked, lim = min(k_len, i + k_len - q_len + 1 if
// causal, key_lens[b]). Masks come from indices (never materialised); masked
// keys are not loaded (a causal row reads only its visible prefix) and are
// written as 0. exp is ex2.approx of (u - max) * log2(e): the difference is
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
//   warp     <= 128 chunks (~1024 cols): G = 1..32 lanes per row (32/G rows
//            per warp), kC = 1, 2 or 4 chunks per lane held in registers.
//   smem     <= kSmemMaxChunks (~32K cols): one block per row; each thread
//            parks its chunks' logits in shared memory between the passes
//            (the row is read from device memory once).
//   online   longer rows: pass 1 keeps a running (max, sum) per thread,
//            combined over the block; pass 2 re-reads the row (from L2 while
//            the rows in flight fit there) and writes y.
//   split    long rows but too few of them to fill the chip: each row is cut
//            into splits, a stats launch writes (max, sum) per split into the
//            backend's workspace, a normalise launch combines and writes.
//   generic  layouts that cannot be vectorised: scalar, online, any length.
// Every kernel loops grid-stride over its rows (or row splits), its grid sized
// to the blocks the chip holds at once.
//
// In place (y == x): every element is read by the thread that writes it, and
// before it writes it; no thread reads an element another one writes.
#include <algorithm>
#include <climits>

#include "core/alloc.h"
#include "cuda/common.cuh"
#include "ops/softmax_geom.h"

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kWarpThreads = 128;           // warp kernel: 4 warps per block
constexpr int kWarpMaxChunks = 32 * 4;      // kC = 4: rows up to ~1024 columns
constexpr int kSmemUnroll = 2;              // smem/online kernels: chunks in flight per thread (~30 registers each)
constexpr int kSmemMinThreads = 64, kSmemMaxThreads = 512;
constexpr int kSmemMaxChunks = 4096;        // 128 KB of f32 logits: rows up to ~32K columns
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

// Starts the loads of the chunk at column c0. A chunk wholly at or past
// row.lim is not read; an inner chunk that straddles lim is loaded whole (its
// masked columns, inside the row, are discarded by chunk_logits); head and
// tail chunks read only columns in [0, lim).
__device__ __forceinline__ void chunk_issue(const SmParams &p, const Row &row, int c0, Chunk &ck) {
    ck.kind = 0;
    if (c0 >= row.lim) return;
    if (c0 >= 0 && c0 + kMfVec <= p.cols) {
        ck.kind = 1;
        ld_raw(row.x + c0 * dt_size(p.x_dt), p.x_dt, ck.x);
        if (p.bcol) ld_raw(row.b + c0 * dt_size(p.b_dt), p.b_dt, ck.b);
        return;
    }
    ck.kind = 2;
    const F8 xv = ld_partial(row.x, p.x_dt, c0, row.lim);
    const F8 bv = p.bcol ? ld_partial(row.b, p.b_dt, c0, row.lim) : F8{};
#pragma unroll
    for (int e = 0; e < kMfVec; e++) ck.x[e] = xv.v[e], ck.b[e] = bv.v[e];
}

// u = scale * x + bias for the chunk's visible columns, -inf elsewhere.
__device__ __forceinline__ void chunk_logits(const SmParams &p, const Row &row, int c0, Chunk &ck,
                                             float (&u)[kMfVec]) {
    if (ck.kind == 1) {
        unpack(ck.x, p.x_dt);
        if (p.bcol) unpack(ck.b, p.b_dt);
    }
#pragma unroll
    for (int e = 0; e < kMfVec; e++) {
        const bool in = ck.kind != 0 && c0 + e >= 0 && c0 + e < row.lim;
        u[e] = in ? fmaf(ck.x[e], p.scale, p.bcol ? ck.b[e] : row.c) : -INFINITY;
    }
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
    const float a = s == 0.0f ? 0.0f : s * ex2((me_of(m) - ME) * kLog2e);
    const float b = s2 == 0.0f ? 0.0f : s2 * ex2((me_of(m2) - ME) * kLog2e);
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

// ---- warp: short rows in registers -----------------------------------------------------

// Rows of <= 32 * kC chunks. A group of G lanes owns a row; lane l of the group
// holds chunks l, l + G, ... (kC of them), so the group's lanes touch
// consecutive 16-byte pieces. 32 / G rows per warp, grid-stride over rows;
// lanes whose row is past the end still join the shuffles.
template <int kC>
__global__ void __launch_bounds__(kWarpThreads, 4) softmax_warp_kernel(SmParams p, int G) {
    const int lane = threadIdx.x & 31, gl = lane & (G - 1);
    const int64_t rows_per_warp = 32 / G;
    const int64_t warp = (int64_t)blockIdx.x * (kWarpThreads / 32) + (threadIdx.x >> 5);
    const int64_t step = (int64_t)gridDim.x * (kWarpThreads / 32) * rows_per_warp;
    for (int64_t r0 = warp * rows_per_warp; r0 < p.rows; r0 += step) {
        const int64_t r = r0 + lane / G;
        Row row = row_setup(p, r < p.rows ? r : p.rows - 1);
        if (r >= p.rows) row.nchunks = 0, row.lim = 0;
        Chunk ck[kC];
#pragma unroll
        for (int k = 0; k < kC; k++) {
            const int c = k * G + gl;
            ck[k].kind = 0;
            if (c < row.nchunks) chunk_issue(p, row, row.base + c * kMfVec, ck[k]);
        }
        float u[kC][kMfVec], m = -INFINITY;
#pragma unroll
        for (int k = 0; k < kC; k++) {
            chunk_logits(p, row, row.base + (k * G + gl) * kMfVec, ck[k], u[k]);
#pragma unroll
            for (int e = 0; e < kMfVec; e++) m = fmaxf(m, u[k][e]);
        }
        const float me = me_of(group_max(m, G));
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < kC; k++)
#pragma unroll
            for (int e = 0; e < kMfVec; e++) {
                u[k][e] = ex2((u[k][e] - me) * kLog2e);
                s += u[k][e];
            }
        const float inv = inv_of(group_sum(s, G));
#pragma unroll
        for (int k = 0; k < kC; k++) {
            const int c = k * G + gl;
            if (c < row.nchunks) chunk_store(p, row, row.base + c * kMfVec, u[k], inv);
        }
    }
}

// ---- smem: medium rows, logits parked in shared memory --------------------------------

// One block per row (grid-stride). Thread t owns chunks t, t + T, ...; it
// keeps their logits in shared memory (a float4 pair per chunk: slot k and
// nchunks_max + k, so a warp's accesses are consecutive 16-byte words) and is
// the only thread that reads them back, so the passes need no barrier beyond
// the two reductions. Chunks past lim touch neither memory nor shared memory.
__global__ void __launch_bounds__(kSmemMaxThreads) softmax_smem_kernel(SmParams p, int nchunks_max) {
    extern __shared__ float4 park[]; // (2, nchunks_max)
    __shared__ float red_m[32], red_s[32];
    const int nt = blockDim.x;
    for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
        const Row row = row_setup(p, r);
        const int k_vis = min(row.nchunks, (row.lim - row.base + kMfVec - 1) / kMfVec);
        // Pass 1: load, logits to shared memory, running max and sum.
        float m = -INFINITY, s = 0.0f;
        for (int k0 = threadIdx.x; k0 < k_vis; k0 += nt * kSmemUnroll) {
            Chunk ck[kSmemUnroll];
#pragma unroll
            for (int q = 0; q < kSmemUnroll; q++) {
                const int k = k0 + q * nt;
                ck[q].kind = 0;
                if (k < k_vis) chunk_issue(p, row, row.base + k * kMfVec, ck[q]);
            }
            float u[kSmemUnroll][kMfVec];
#pragma unroll
            for (int q = 0; q < kSmemUnroll; q++) {
                const int k = k0 + q * nt;
                chunk_logits(p, row, row.base + k * kMfVec, ck[q], u[q]);
                if (k < k_vis) {
                    park[k] = make_float4(u[q][0], u[q][1], u[q][2], u[q][3]);
                    park[nchunks_max + k] = make_float4(u[q][4], u[q][5], u[q][6], u[q][7]);
                }
            }
            ms_update<kSmemUnroll>(m, s, u);
        }
        block_ms(m, s, red_m, red_s);
        const float me = me_of(m), inv = inv_of(s);
        // Pass 2: y from the parked logits; masked chunks are written as 0.
        for (int k = threadIdx.x; k < row.nchunks; k += nt) {
            float e[kMfVec] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
            if (k < k_vis) {
                const float4 a = park[k], b = park[nchunks_max + k];
                e[0] = a.x, e[1] = a.y, e[2] = a.z, e[3] = a.w, e[4] = b.x, e[5] = b.y, e[6] = b.z, e[7] = b.w;
            }
#pragma unroll
            for (int j = 0; j < kMfVec; j++) e[j] = ex2((e[j] - me) * kLog2e);
            chunk_store(p, row, row.base + k * kMfVec, e, inv);
        }
    }
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
        for (int j = threadIdx.x; j < row.lim; j += blockDim.x) {
            const float u = fmaf(mf_ld(row.x, p.x_dt, j), p.scale, p.bcol ? mf_ld(row.b, p.b_dt, j) : row.c);
            ms_combine(m, s, u, u == -INFINITY ? 0.0f : 1.0f); // one logit is (max u, sum 1); NaN stays NaN
        }
        block_ms(m, s, red_m, red_s);
        const float me = me_of(m), inv = inv_of(s);
        for (int j = threadIdx.x; j < p.cols; j += blockDim.x) {
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

enum Variant { kVarWarp1, kVarWarp2, kVarWarp4, kVarSmem, kVarOnline, kVarSplit, kVarGeneric };

const char *variant_name(Variant v) {
    switch (v) {
    case kVarWarp1: return "warp1";
    case kVarWarp2: return "warp2";
    case kVarWarp4: return "warp4";
    case kVarSmem: return "smem";
    case kVarOnline: return "online";
    case kVarSplit: return "split";
    case kVarGeneric: return "generic";
    }
    return "?";
}

struct Plan {
    Variant var;
    int G;                        // warp: lanes per row
    int threads;                  // per block
    unsigned grid;
    size_t smem;                  // dynamic shared memory (smem variant)
    int nchunks;                  // chunks per row at most
    int splits, split_chunks;     // split variant
};

} // namespace

// What plan() asks the runtime, asked once per backend and kept here
// (mf_cuda_ctx::softmax): occupancy per variant, the smem variant's dynamic
// shared memory per block count, the opt-in limit and the L2 size. Launches
// then make no occupancy or attribute queries.
constexpr int kSmemThreadSlots = (kSmemMaxThreads - kSmemMinThreads) / 32 + 1; // 64, 96, ..., 512 threads
constexpr int kMaxBlocksPerSm = 32;

struct mf_cuda_softmax_launch {
    int occ_warp[3], occ_online, occ_generic; // resident blocks per SM; 0: not asked yet
    int smem_optin;                           // dynamic shared memory a block may use; -1: not asked yet
    int l2_bytes;                             // 0 when unknown
    // smem variant: avail[t][b - 1] = dynamic shared memory per block with
    // which b blocks of 64 + 32 t threads are resident per SM (-1: cannot be);
    // smem_slots[t] says whether row t was filled.
    int smem_avail[kSmemThreadSlots][kMaxBlocksPerSm];
    bool smem_slots[kSmemThreadSlots];
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
        s->smem_optin = -1;
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

// Resident blocks per SM of the smem kernel with `threads` threads and
// `bytes` of dynamic shared memory: the most b whose per-block share of the
// SM still holds `bytes` (the occupancy calculator's numbers, asked once per
// block size). At least 1.
int smem_resident(mf_cuda_softmax_launch *s, int threads, size_t bytes) {
    const int t = (threads - kSmemMinThreads) / 32;
    if (!s->smem_slots[t]) {
        int most = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&most, softmax_smem_kernel, threads, 0) != cudaSuccess) {
            (void)cudaGetLastError();
            most = 1;
        }
        most = std::max(1, std::min(most, kMaxBlocksPerSm));
        for (int b = 1; b <= kMaxBlocksPerSm; b++) {
            size_t avail = 0;
            if (b > most ||
                cudaOccupancyAvailableDynamicSMemPerBlock(&avail, softmax_smem_kernel, b, threads) != cudaSuccess) {
                (void)cudaGetLastError();
                s->smem_avail[t][b - 1] = -1;
                continue;
            }
            s->smem_avail[t][b - 1] = (int)std::min(avail, (size_t)INT_MAX);
        }
        s->smem_slots[t] = true;
    }
    int occ = 1;
    for (int b = 2; b <= kMaxBlocksPerSm; b++)
        if (s->smem_avail[t][b - 1] >= 0 && bytes <= (size_t)s->smem_avail[t][b - 1]) occ = b;
    return occ;
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

// Picks the variant for these parameters, or says why they are unsupported.
// Thresholds, with the reasoning in docs/notes/softmax.md: the warp kernel
// holds up to 32 values per lane in registers; the smem kernel up to 128 KB of
// f32 logits per block; longer rows stream twice. A long row is split over
// several blocks only when the rows alone cannot fill the chip.
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
    pl->smem = 0;
    pl->splits = 1;
    if (!alignable(p)) {
        pl->var = kVarGeneric;
        pl->threads = kGenericThreads;
        const int occ = resident_blocks(softmax_generic_kernel, kGenericThreads, 0, ls->occ_generic);
        pl->grid = grid_of(p.rows, resident_sm * occ);
        return MF_OK;
    }
    const int nchunks = (p.cols + kMfVec - 1) / kMfVec + (p.rows_aligned ? 0 : 1);
    pl->nchunks = pl->split_chunks = nchunks;
    if (nchunks <= kWarpMaxChunks) {
        int G = 32, occ;
        if (nchunks <= 32) {
            pl->var = kVarWarp1;
            G = 1;
            while (G < nchunks) G *= 2;
            occ = resident_blocks(softmax_warp_kernel<1>, kWarpThreads, 0, ls->occ_warp[0]);
        } else if (nchunks <= 64) {
            pl->var = kVarWarp2;
            occ = resident_blocks(softmax_warp_kernel<2>, kWarpThreads, 0, ls->occ_warp[1]);
        } else {
            pl->var = kVarWarp4;
            occ = resident_blocks(softmax_warp_kernel<4>, kWarpThreads, 0, ls->occ_warp[2]);
        }
        pl->G = G;
        pl->threads = kWarpThreads;
        const int64_t rows_per_block = (kWarpThreads / 32) * (32 / G);
        pl->grid = grid_of((p.rows + rows_per_block - 1) / rows_per_block, resident_sm * occ);
        return MF_OK;
    }
    if (nchunks <= kSmemMaxChunks) {
        int optin = ls->smem_optin;
        if (optin < 0) {
            if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device) != cudaSuccess) {
                (void)cudaGetLastError();
                optin = 48 << 10;
            }
            // Static shared memory (the reduction scratch) comes out of the same budget.
            optin -= 1024;
            if (optin > (48 << 10) &&
                cudaFuncSetAttribute(softmax_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin) !=
                    cudaSuccess) {
                (void)cudaGetLastError();
                optin = 48 << 10;
            }
            ls->smem_optin = optin;
        }
        const size_t bytes = (size_t)nchunks * 2 * sizeof(float4);
        if (bytes <= (size_t)optin) {
            pl->var = kVarSmem;
            pl->smem = bytes;
            // About kSmemUnroll chunks per thread: one round of loads in flight per row.
            int t = (nchunks + kSmemUnroll - 1) / kSmemUnroll;
            t = std::min(kSmemMaxThreads, std::max(kSmemMinThreads, (t + 31) / 32 * 32));
            pl->threads = t;
            const int occ = smem_resident(ls, t, bytes);
            pl->grid = grid_of(p.rows, resident_sm * occ);
            return MF_OK;
        }
    }
    pl->threads = kOnlineThreads;
    const int occ = resident_blocks(softmax_online_kernel, kOnlineThreads, 0, ls->occ_online);
    const int64_t resident = resident_sm * occ;
    if (p.rows < resident && c->workspace) {
        int64_t splits = (resident + p.rows - 1) / p.rows;
        splits = std::min(splits, (int64_t)(nchunks / kSplitMinChunks));
        splits = std::min(splits, (int64_t)(c->workspace_bytes / sizeof(float2)) / p.rows);
        if (splits >= 2) {
            pl->var = kVarSplit;
            pl->splits = (int)splits;
            pl->split_chunks = (int)((nchunks + splits - 1) / splits);
            pl->grid = grid_of(p.rows * splits, resident);
            return MF_OK;
        }
    }
    pl->var = kVarOnline;
    // Pass 2 re-reads the row: keep the rows in flight within half the L2 so
    // that it hits there (but at least one block per SM).
    const int l2 = ls->l2_bytes;
    const int64_t row_bytes = (int64_t)p.cols * (ex + (p.bcol ? eb : 0));
    const int64_t cap = l2 > 0 ? std::max(resident_sm, std::min(resident, (int64_t)l2 / 2 / row_bytes)) : resident;
    pl->grid = grid_of(p.rows, cap);
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

extern "C" mf_status mf_cuda_softmax(mf_backend *be, const mf_softmax_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    SmParams p;
    Plan pl;
    MF_TRY(params_of(a, &p));
    MF_TRY(plan(c, p, &pl));
    switch (pl.var) {
    case kVarWarp1: softmax_warp_kernel<1><<<pl.grid, pl.threads, 0, c->stream>>>(p, pl.G); break;
    case kVarWarp2: softmax_warp_kernel<2><<<pl.grid, pl.threads, 0, c->stream>>>(p, pl.G); break;
    case kVarWarp4: softmax_warp_kernel<4><<<pl.grid, pl.threads, 0, c->stream>>>(p, pl.G); break;
    case kVarSmem: softmax_smem_kernel<<<pl.grid, pl.threads, pl.smem, c->stream>>>(p, pl.nchunks); break;
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
