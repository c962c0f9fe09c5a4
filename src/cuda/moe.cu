// Mixture-of-Experts parts on CUDA: the fused router (softmax / sigmoid +
// top-k + renorm + scale), the stable counting-sort permutation, the gather of
// x into expert-contiguous rows, the combine (+ residual, + gated shared
// expert), and the expert FFNs on one of three paths (mf_cuda_moe_experts):
//   "decode"  at most MF_MOE_DECODE_MAX_ROWS (32) routed rows (T * k): two kernels that
//             read the expert offsets on the device (no host read-back, so
//             the layer can be recorded in a CUDA Graph) and stream each
//             selected expert's weights once (moe_decode_kernel);
//   "loop"    otherwise: the per-expert cuBLASLt loop of src/ops/moe.c, sized
//             by one device-to-host read of the E + 1 offsets per layer;
//   "wgmma"   MINFER_MOE_GEMM=wgmma (f16/bf16 on sm_90a): our grouped GEMMs
//             (src/cuda/moe_gemm.cu), offsets read on the device, no sync;
//             opt-in until an H100 has checked and timed it;
//   "grouped" MINFER_MOE_GEMM=grouped: cublasGemmGroupedBatchedEx (same read-back).
// UNVERIFIED on a GPU (compile-checked for sm_80, sm_90a).
//
// Every formula matches src/cpu/moe.c: selection compares the logits
// (NaN ranks as -inf; equal keys go to the lower expert), softmax is
// exp(l - max) / sum with precise expf, weights in f32. Only the order of the
// softmax denominator's sum differs (a warp tree here, index order there).
#include <climits>
#include <cstdlib>
#include <cstring>

#include <cublas_v2.h>

#include "cuda/common.cuh"
#include "cuda/moe_gemm.cuh"
#include "kernels/act_math.h"
#include "kernels/moe_offsets.h"
#include "cuda/cuda_query.h"

namespace {

constexpr unsigned kFull = 0xffffffffu;

// ---- router ------------------------------------------------------------------------

constexpr int kRouterWarps = 4;   // tokens per block
constexpr int kRouterPerLane = 8; // E <= 32 * 8 = 256 logits per token
static_assert(kRouterPerLane * 32 == 256, "the router holds up to 256 experts in registers");

struct RouterParams {
    const void *logits; // (T, E), row stride ls
    int64_t ls;
    int ldt;            // mf_dtype of logits
    int32_t *ids;       // (T, k) out
    float *w;           // (T, k) out
    int64_t T;
    int E, k;
    int score, order;   // mf_moe_score, mf_moe_order
    bool renorm;
    float scale;
};

__device__ __forceinline__ float rank_key(float v) { return isnan(v) ? -INFINITY : v; }

// One warp per token (grid-stride over tokens): lane holds logits lane + 32 j,
// j < 8. k rounds of a warp argmax over (key, index) pairs pick the experts
// (larger key first, equal keys to the lower index); the owner lane marks
// its pick taken and broadcasts the raw logit. Lane 0 writes the k weights.
__global__ void __launch_bounds__(kRouterWarps * 32) moe_router_kernel(RouterParams p) {
    const int lane = threadIdx.x & 31;
    const int64_t step = (int64_t)gridDim.x * kRouterWarps;
    for (int64_t t = (int64_t)blockIdx.x * kRouterWarps + (threadIdx.x >> 5); t < p.T; t += step) {
        float l[kRouterPerLane];
        unsigned taken = 0; // bit j: expert lane + 32 j chosen already, or absent
#pragma unroll
        for (int j = 0; j < kRouterPerLane; j++) {
            const int e = lane + 32 * j;
            l[j] = e < p.E ? mf_ld(p.logits, p.ldt, t * p.ls + e) : -INFINITY;
            if (e >= p.E) taken |= 1u << j;
        }
        int sel[8];
        float sl[8];
        for (int r = 0; r < p.k; r++) {
            float bk = -INFINITY;
            int bi = INT_MAX; // INT_MAX: no candidate (ranks below everything)
#pragma unroll
            for (int j = 0; j < kRouterPerLane; j++) {
                if ((taken >> j) & 1u) continue;
                const float key = rank_key(l[j]);
                if (bi == INT_MAX || key > bk) bk = key, bi = lane + 32 * j;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ok = __shfl_xor_sync(kFull, bk, o);
                const int oi = __shfl_xor_sync(kFull, bi, o);
                if (oi != INT_MAX && (bi == INT_MAX || ok > bk || (ok == bk && oi < bi))) bk = ok, bi = oi;
            }
            const int owner = bi & 31, slot = bi >> 5; // bi is the same in every lane now
            float raw = 0.0f;
#pragma unroll
            for (int j = 0; j < kRouterPerLane; j++)
                if (j == slot) raw = l[j];
            raw = __shfl_sync(kFull, raw, owner);
            if (lane == owner) taken |= 1u << slot;
            sel[r] = bi, sl[r] = raw;
        }
        const bool first = p.order == MF_MOE_SCORE_THEN_TOPK;
        float m = -INFINITY, z = 0.0f;
        if (p.score == MF_MOE_SCORE_SOFTMAX) {
            if (first) {
#pragma unroll
                for (int j = 0; j < kRouterPerLane; j++)
                    if (lane + 32 * j < p.E) m = fmaxf(m, l[j]);
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(kFull, m, o));
#pragma unroll
                for (int j = 0; j < kRouterPerLane; j++)
                    if (lane + 32 * j < p.E) z += m == -INFINITY ? 0.0f : expf(l[j] - m);
                z = mf_warp_sum(z);
            } else {
                for (int r = 0; r < p.k; r++) m = fmaxf(m, sl[r]);
                for (int r = 0; r < p.k; r++) z += m == -INFINITY ? 0.0f : expf(sl[r] - m);
            }
        }
        if (lane == 0) {
            float wt[8], sum = 0.0f;
            for (int r = 0; r < p.k; r++) {
                if (p.score == MF_MOE_SCORE_SOFTMAX)
                    wt[r] = m == -INFINITY ? 0.0f : expf(sl[r] - m) / z;
                else
                    wt[r] = mf_act_sigmoid(sl[r]);
            }
            if (p.renorm) {
                for (int r = 0; r < p.k; r++) sum += wt[r];
                if (sum > 0.0f)
                    for (int r = 0; r < p.k; r++) wt[r] /= sum;
            }
            for (int r = 0; r < p.k; r++) {
                p.ids[t * p.k + r] = sel[r];
                p.w[t * p.k + r] = wt[r] * p.scale;
            }
        }
    }
}

// ---- permutation ------------------------------------------------------------------------

constexpr int kPermThreads = 1024; // 32 warps
constexpr int kPermWarps = kPermThreads / 32;
constexpr int kPermBuckets = 257;  // E <= 256 experts + 1 bucket for out-of-range ids
constexpr int64_t kPermMinChunk = 4096;

struct PermParams {
    const int32_t *ids; // (N) = (T, k) flattened
    int32_t *offsets;   // (E + 1) out
    int32_t *sorted;    // (N) out
    int32_t *inv;       // (N) out
    int64_t N, chunk;   // assignments; per block
    int E;
};

__device__ __forceinline__ int bucket_of(int32_t id, int E) { return id >= 0 && id < E ? id : E; }

// Warp-aggregated count of key b (-1: none) into hist: one shared atomic per
// distinct key in the warp. Integer adds, so the counts do not depend on the
// order in which they land.
__device__ __forceinline__ void warp_count(int *hist, int b, int lane) {
    const unsigned peers = __match_any_sync(kFull, b);
    if (b >= 0 && lane == __ffs(peers) - 1) atomicAdd(&hist[b], __popc(peers));
}

// A deterministic, stable counting sort without global scratch. Block b owns
// assignments [b * chunk, (b + 1) * chunk). It (1) counts every assignment by
// bucket and those before its chunk (a second read of ids, which sit in L2:
// 4 N bytes per block, blocks <= 2 per SM), (2) scans the totals into the
// bucket starts (block 0 writes them as offsets), (3) walks its chunk in
// tiles of 1024 in order: within a warp, __match_any_sync gives each lane
// its rank among equal buckets; per-warp counts in shared memory give the
// ranks across warps; a running cursor per bucket carries over tiles. So the
// sorted row of assignment a = start[e] + (# of e before a): stable.
__global__ void __launch_bounds__(kPermThreads) moe_permute_kernel(PermParams p) {
    __shared__ int total[kPermBuckets], cursor[kPermBuckets];
    __shared__ int wcount[kPermWarps][kPermBuckets];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nb = p.E + 1;
    const int64_t c0 = (int64_t)blockIdx.x * p.chunk, c1 = min(p.N, c0 + p.chunk);
    for (int i = tid; i < nb; i += kPermThreads) total[i] = 0, cursor[i] = 0;
    __syncthreads();
    // 1. Histograms: all assignments (total) and those before the chunk (cursor).
    for (int64_t base = 0; base < p.N; base += kPermThreads) {
        const int64_t a = base + tid;
        const int b = a < p.N ? bucket_of(p.ids[a], p.E) : -1;
        warp_count(total, b, lane);
        warp_count(cursor, a < c0 ? b : -1, lane);
    }
    __syncthreads();
    // 2. Exclusive scan of the totals by warp 0: lane i sums buckets [9i, 9i + 9).
    if (warp == 0) {
        constexpr int kPer = (kPermBuckets + 31) / 32;
        int loc[kPer], s = 0;
#pragma unroll
        for (int j = 0; j < kPer; j++) {
            const int e = lane * kPer + j;
            loc[j] = e < nb ? total[e] : 0;
            s += loc[j];
        }
        int incl = s;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int v = __shfl_up_sync(kFull, incl, o);
            if (lane >= o) incl += v;
        }
        int run = incl - s;
#pragma unroll
        for (int j = 0; j < kPer; j++) {
            const int e = lane * kPer + j;
            if (e < nb) {
                if (blockIdx.x == 0) p.offsets[e] = run; // offsets[E] = rows of valid ids
                cursor[e] += run;
            }
            run += loc[j];
        }
    }
    __syncthreads();
    // 3. Stable scatter of this block's chunk, one tile of 1024 at a time.
    for (int64_t s = c0; s < c1; s += kPermThreads) {
        for (int i = tid; i < kPermWarps * kPermBuckets; i += kPermThreads) (&wcount[0][0])[i] = 0;
        __syncthreads();
        const int64_t a = s + tid;
        const int b = a < c1 ? bucket_of(p.ids[a], p.E) : -1;
        const unsigned peers = __match_any_sync(kFull, b);
        const int rank = __popc(peers & ((1u << lane) - 1u));
        if (b >= 0 && lane == __ffs(peers) - 1) wcount[warp][b] = __popc(peers);
        __syncthreads();
        if (b >= 0) {
            int row = cursor[b] + rank;
            for (int w = 0; w < warp; w++) row += wcount[w][b];
            p.sorted[row] = (int32_t)a;
            p.inv[a] = b == p.E ? -1 : row; // an out-of-range id: the combine skips it
        }
        __syncthreads();
        for (int e = tid; e < nb; e += kPermThreads) {
            int c = 0;
            for (int w = 0; w < kPermWarps; w++) c += wcount[w][e];
            cursor[e] += c;
        }
        __syncthreads();
    }
}

// ---- gather -----------------------------------------------------------------------------

struct GatherParams {
    const char *x;          // (T, H), row stride x_rs bytes
    char *xs;               // (N, H), row stride xs_rs bytes
    int64_t x_rs, xs_rs;
    const int32_t *sorted;  // (N)
    int64_t N, row_bytes;   // H * element size
    int k;
    int piece;              // bytes per copy: 16, 4 or 2, the widest that divides the row and aligns every row
};

// Grid-stride over (row, 16-byte piece) pairs (2- or 4-byte pieces when not
// aligned): xs[r] = x[sorted[r] / k]. A pure copy, so dtype-free.
__global__ void moe_gather_kernel(GatherParams p) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x, tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t piece = p.piece;
    const int64_t ppr = p.row_bytes / piece, total = p.N * ppr;
    for (int64_t i = tid; i < total; i += step) {
        const int64_t r = i / ppr, c = (i - r * ppr) * piece;
        const char *src = p.x + (int64_t)(p.sorted[r] / p.k) * p.x_rs + c;
        char *dst = p.xs + r * p.xs_rs + c;
        if (piece == 16)
            *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
        else if (piece == 4)
            *reinterpret_cast<uint32_t *>(dst) = *reinterpret_cast<const uint32_t *>(src);
        else
            *reinterpret_cast<uint16_t *>(dst) = *reinterpret_cast<const uint16_t *>(src);
    }
}

// ---- combine ----------------------------------------------------------------------------

struct CombineParams {
    const void *ys;       // (N, H), row stride ys_rs
    const int32_t *inv;   // (T * k)
    const float *w;       // (T, k)
    const void *sh;       // (T, H) or NULL
    const void *sg;       // (T, 1) or NULL
    const void *res;      // (T, H) or NULL; may be out
    void *out;            // (T, H)
    int64_t ys_rs, sh_rs, sg_rs, res_rs, out_rs;
    int ydt, shdt, sgdt, rdt, odt;
    int64_t T, H, N;
    int k;
    bool vec;             // 8-element chunks: H % 8 == 0, every row 16-byte aligned
};

// Grid-stride over (token, 8-element chunk) pairs (single elements when not
// vec): out = residual + sum_j w_j ys[inv[t, j]] + sigmoid(g_t) shared, in
// that order, in f32. Each output element has one writer: no atomics.
__global__ void moe_combine_kernel(CombineParams p) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x, tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t width = p.vec ? kMfVec : 1, cpr = p.H / width, total = p.T * cpr;
    for (int64_t i = tid; i < total; i += step) {
        const int64_t t = i / cpr, c = (i - t * cpr) * width;
        float acc[kMfVec], v[kMfVec];
        if (p.vec) {
            if (p.res) {
                mf_ld8(p.res, p.rdt, t * p.res_rs + c, acc);
            } else {
#pragma unroll
                for (int e = 0; e < kMfVec; e++) acc[e] = 0.0f;
            }
        } else {
            acc[0] = p.res ? mf_ld(p.res, p.rdt, t * p.res_rs + c) : 0.0f;
        }
        for (int j = 0; j < p.k; j++) {
            const int32_t r = p.inv[t * p.k + j];
            if (r < 0 || r >= p.N) continue;
            const float wj = p.w[t * p.k + j];
            if (p.vec) {
                mf_ld8(p.ys, p.ydt, r * p.ys_rs + c, v);
#pragma unroll
                for (int e = 0; e < kMfVec; e++) acc[e] += wj * v[e];
            } else {
                acc[0] += wj * mf_ld(p.ys, p.ydt, r * p.ys_rs + c);
            }
        }
        if (p.sh) {
            const float g = p.sg ? mf_act_sigmoid(mf_ld(p.sg, p.sgdt, t * p.sg_rs)) : 1.0f;
            if (p.vec) {
                mf_ld8(p.sh, p.shdt, t * p.sh_rs + c, v);
#pragma unroll
                for (int e = 0; e < kMfVec; e++) acc[e] += g * v[e];
            } else {
                acc[0] += g * mf_ld(p.sh, p.shdt, t * p.sh_rs + c);
            }
        }
        if (p.vec)
            mf_st8(p.out, p.odt, t * p.out_rs + c, acc);
        else
            mf_st(p.out, p.odt, t * p.out_rs + c, acc[0]);
    }
}

// Rows of a 2-D view can be read in 16-byte pieces.
bool rows_aligned16(const mf_tensor *t) {
    const int64_t esz = (int64_t)mf_dtype_size(t->dtype);
    return mf_aligned16(t->data) && (t->shape[0] <= 1 || (t->stride[0] * esz) % 16 == 0);
}

} // namespace

extern "C" mf_status mf_cuda_moe_router(mf_backend *be, const mf_moe_router_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    RouterParams p = {};
    p.logits = a->logits.data, p.ls = a->logits.stride[0], p.ldt = a->logits.dtype;
    p.ids = static_cast<int32_t *>(a->ids.data), p.w = static_cast<float *>(a->weights.data);
    p.T = a->logits.shape[0], p.E = (int)a->logits.shape[1], p.k = (int)a->ids.shape[1];
    p.score = a->score, p.order = a->order, p.renorm = a->renorm, p.scale = a->routed_scale;
    const unsigned grid = mf_cuda_grid(c, (p.T + kRouterWarps - 1) / kRouterWarps);
    moe_router_kernel<<<grid, kRouterWarps * 32, 0, c->stream>>>(p);
    MF_CUDA_CHECK_LAUNCH("moe_router_kernel");
    return MF_OK;
}

extern "C" mf_status mf_cuda_moe_permute(mf_backend *be, const mf_moe_permute_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    const int64_t N = a->ids.shape[0] * a->ids.shape[1];
    if (N == 0) { // no assignment: every expert starts (and ends) at row 0
        MF_CUDA_TRY(cudaMemsetAsync(a->offsets.data, 0, (size_t)(a->n_experts + 1) * sizeof(int32_t), c->stream));
        return MF_OK;
    }
    PermParams p = {};
    p.ids = static_cast<const int32_t *>(a->ids.data), p.offsets = static_cast<int32_t *>(a->offsets.data);
    p.sorted = static_cast<int32_t *>(a->sorted.data), p.inv = static_cast<int32_t *>(a->inv.data);
    p.N = N, p.E = a->n_experts;
    // At most two blocks per SM: each block reads all N ids once more.
    const int64_t max_blocks = 2 * (int64_t)c->sm_count;
    p.chunk = (N + max_blocks - 1) / max_blocks;
    if (p.chunk < kPermMinChunk) p.chunk = kPermMinChunk;
    const unsigned grid = (unsigned)((N + p.chunk - 1) / p.chunk);
    moe_permute_kernel<<<grid, kPermThreads, 0, c->stream>>>(p);
    MF_CUDA_CHECK_LAUNCH("moe_permute_kernel");
    if (!a->x) return MF_OK;
    GatherParams g = {};
    const int64_t esz = (int64_t)mf_dtype_size(a->x->dtype);
    g.x = static_cast<const char *>(a->x->data), g.xs = static_cast<char *>(a->xs->data);
    g.x_rs = a->x->stride[0] * esz, g.xs_rs = a->xs->stride[0] * esz;
    g.sorted = p.sorted, g.N = N, g.row_bytes = a->x->shape[1] * esz, g.k = (int)a->ids.shape[1];
    // A 16-bit view may start at an odd element or have an odd row stride:
    // 4-byte pieces only when every row of x and xs is 4-byte aligned too.
    const bool v16 = g.row_bytes % 16 == 0 && rows_aligned16(a->x) && rows_aligned16(a->xs);
    const bool v4 = g.row_bytes % 4 == 0 && (uintptr_t)g.x % 4 == 0 && (uintptr_t)g.xs % 4 == 0 && g.x_rs % 4 == 0 &&
                    g.xs_rs % 4 == 0;
    g.piece = v16 ? 16 : v4 ? 4 : 2;
    if (g.row_bytes == 0) return MF_OK;
    const int64_t piece = g.piece;
    moe_gather_kernel<<<mf_cuda_grid(c, (N * (g.row_bytes / piece) + 255) / 256), 256, 0, c->stream>>>(g);
    MF_CUDA_CHECK_LAUNCH("moe_gather_kernel");
    return MF_OK;
}

extern "C" mf_status mf_cuda_moe_combine(mf_backend *be, const mf_moe_combine_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    CombineParams p = {};
    p.ys = a->ys.data, p.ys_rs = a->ys.stride[0], p.ydt = a->ys.dtype;
    p.inv = static_cast<const int32_t *>(a->inv.data), p.w = static_cast<const float *>(a->weights.data);
    p.out = a->out.data, p.out_rs = a->out.stride[0], p.odt = a->out.dtype;
    p.T = a->out.shape[0], p.H = a->out.shape[1], p.N = a->ys.shape[0], p.k = (int)a->weights.shape[1];
    p.vec = p.H % kMfVec == 0 && rows_aligned16(&a->ys) && rows_aligned16(&a->out);
    if (a->shared) {
        p.sh = a->shared->data, p.sh_rs = a->shared->stride[0], p.shdt = a->shared->dtype;
        p.vec = p.vec && rows_aligned16(a->shared);
    }
    if (a->shared_gate) p.sg = a->shared_gate->data, p.sg_rs = a->shared_gate->stride[0], p.sgdt = a->shared_gate->dtype;
    if (a->residual) {
        p.res = a->residual->data, p.res_rs = a->residual->stride[0], p.rdt = a->residual->dtype;
        p.vec = p.vec && rows_aligned16(a->residual);
    }
    const int64_t items = p.T * (p.vec ? p.H / kMfVec : p.H);
    moe_combine_kernel<<<mf_cuda_grid(c, (items + 255) / 256), 256, 0, c->stream>>>(p);
    MF_CUDA_CHECK_LAUNCH("moe_combine_kernel");
    return MF_OK;
}

// ---- experts: the small-batch decode path ----------------------------------------------

namespace {

constexpr int kDecWarps = 4;                 // warps per block
constexpr int kDecThreads = kDecWarps * 32;
constexpr int kDecWRows = 4;                 // weight rows a warp streams (SwiGLU: gate j, j + 1 and up j, j + 1)
constexpr int kDecUnroll = 4;                // 16-byte chunks per weight row per iteration
constexpr int kDecRows = 8;                  // routed rows one block computes (all of one expert's, or 8 of them)
constexpr int64_t kDecMaxTiles = 65535;      // column tiles are grid y
static_assert(kDecRows * kDecWRows == 32, "after the reduction each lane holds exactly one (row, weight row) sum");
static_assert(kDecWRows == 4, "the SwiGLU epilogue pairs lane c with lane c + 2 (gate with up)");

enum { kDecDown = 0, kDecSwiglu = 1, kDecGelu = 2 }; // what the block does with its sums

struct DecodeParams {
    const void *x;          // (N, K) expert-contiguous routed rows, row stride ldx elements, 16-byte aligned rows
    const void *w;          // (E, rows, K): expert e's weight row j at w + e * wse + j * ldw elements
    void *out;              // (N, n_out), row stride ldo elements: act(x . w^T), or silu(gate) * up
    const int32_t *offsets; // (E + 1) expert e owns rows [offsets[e], offsets[e + 1]) (clamped to [0, N])
    int64_t K, n_out;       // reduction length; output columns (SwiGLU: I, the up rows start at row I)
    int64_t ldx, ldw, wse, ldo;
    int N, E;
    int dt;                 // mf_dtype of x, w and out
    int mode;               // kDecDown | kDecSwiglu | kDecGelu
};

// The 16-byte chunk u as kElems f32 values (4 f32, or 8 f16 / bf16).
template <int kElems>
__device__ __forceinline__ void unpack_chunk(const uint4 &u, int dt, float (&v)[kElems]) {
    if constexpr (kElems == 4) {
        v[0] = __uint_as_float(u.x), v[1] = __uint_as_float(u.y), v[2] = __uint_as_float(u.z),
        v[3] = __uint_as_float(u.w);
    } else {
        const uint32_t q[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float2 f = mf_unpack2(q[j], dt);
            v[2 * j] = f.x, v[2 * j + 1] = f.y;
        }
    }
}

// The block's work item: item `slot` of the list, in expert order, of
// (expert, group of up to kDecRows of its rows) pairs; its rows [r0, r1).
// Offsets are clamped to [0, N] (a decreasing pair is an empty expert), so
// no offsets can make a block touch rows outside x or out. Returns the
// expert, or -1 when the list is shorter than slot + 1. Every lane of the
// warp gets the same answer (a warp scan over 32 experts at a time).
__device__ __forceinline__ int decode_item(const int32_t *offsets, int E, int N, int slot, int lane, int &r0,
                                           int &r1) {
    for (int base = 0; base < E; base += 32) {
        const int e = base + lane;
        int a = 0, b = 0;
        if (e < E) {
            a = min(max(offsets[e], 0), N);
            b = max(min(max(offsets[e + 1], 0), N), a);
        }
        const int groups = (b - a + kDecRows - 1) / kDecRows;
        int incl = groups;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int v = __shfl_up_sync(kFull, incl, o);
            if (lane >= o) incl += v;
        }
        const int total = __shfl_sync(kFull, incl, 31);
        if (slot < total) { // exactly one lane's [incl - groups, incl) holds slot
            const unsigned pick = __ballot_sync(kFull, slot >= incl - groups && slot < incl);
            const int src = __ffs(pick) - 1;
            const int first = __shfl_sync(kFull, a, src), last = __shfl_sync(kFull, b, src);
            const int before = __shfl_sync(kFull, incl - groups, src);
            r0 = first + (slot - before) * kDecRows;
            r1 = min(last, r0 + kDecRows);
            return base + src;
        }
        slot -= total;
    }
    return -1;
}

// out[r, j] for the <= kDecRows routed rows r of one expert and a tile of
// output columns j, with each weight byte of the tile read once:
//   grid (slots, column tiles): x = the work item (expert, row group; slot-
//   major so that the row groups of one expert run side by side and share
//   the weight tile in L2), y = kDecWarps * (4, or 2 for SwiGLU) columns.
//   A block whose item does not exist (fewer selected experts than slots)
//   returns at once.
//   Warp: kDecWRows weight rows (SwiGLU: gate rows j, j + 1 and up rows
//   I + j, I + j + 1, so the gate product needs no other warp). Lane l reads
//   the 16-byte chunks l, l + 32, ... of each row, kDecUnroll per row per
//   iteration (16 loads in flight before the first FMA), unpacks each once
//   and multiplies it with the same chunk of every routed row (L1-resident:
//   the block's 4 warps read the same x rows). acc[row][wrow] in f32; a
//   butterfly gives every lane every sum, lane row * 4 + wrow keeps its own.
//   Epilogue in f32, one rounding to out's dtype: the plain sum (down),
//   gelu_tanh(sum), or silu(gate) * up with up from lane + 2.
// Deterministic: one writer per output, a fixed summation order, no atomics.
template <int kElems>
__global__ void __launch_bounds__(kDecThreads) moe_decode_kernel(DecodeParams p) {
    constexpr int kEsz = 16 / kElems;             // bytes per element
    constexpr int kWarpStep = 32 * kElems;        // k elements one load instruction covers per row
    constexpr int kIterK = kWarpStep * kDecUnroll;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const bool glu = p.mode == kDecSwiglu;
    const int per_warp = glu ? kDecWRows / 2 : kDecWRows;
    const int64_t col0 = ((int64_t)blockIdx.y * kDecWarps + warp) * per_warp;
    if (col0 >= p.n_out) return; // no block-wide barrier below
    int r0 = 0, r1 = 0;
    const int ex = decode_item(p.offsets, p.E, p.N, (int)blockIdx.x, lane, r0, r1);
    if (ex < 0) return;
    const int m = r1 - r0; // 1..kDecRows, the same in every lane

    // Columns past n_out read column n_out - 1 (valid memory, results dropped): loads stay unconditional.
    const char *we = static_cast<const char *>(p.w) + (int64_t)ex * p.wse * kEsz;
    const char *wrow[kDecWRows];
#pragma unroll
    for (int c = 0; c < kDecWRows; c++) {
        const int64_t oc = min(col0 + (glu ? c % 2 : c), p.n_out - 1);
        wrow[c] = we + (glu && c >= 2 ? p.n_out + oc : oc) * p.ldw * kEsz;
    }
    const char *xr = static_cast<const char *>(p.x) + (int64_t)r0 * p.ldx * kEsz;

    float acc[kDecRows][kDecWRows];
#pragma unroll
    for (int r = 0; r < kDecRows; r++)
#pragma unroll
        for (int c = 0; c < kDecWRows; c++) acc[r][c] = 0.0f;

    for (int64_t kk = (int64_t)lane * kElems; kk < p.K; kk += kIterK) {
        uint4 w[kDecUnroll][kDecWRows];
#pragma unroll
        for (int u = 0; u < kDecUnroll; u++) {
            const int64_t k = kk + (int64_t)u * kWarpStep;
#pragma unroll
            for (int c = 0; c < kDecWRows; c++)
                w[u][c] = k < p.K ? __ldcs(reinterpret_cast<const uint4 *>(wrow[c] + k * kEsz)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kDecUnroll; u++) {
            const int64_t k = kk + (int64_t)u * kWarpStep;
            if (k >= p.K) break;
            float wf[kDecWRows][kElems];
#pragma unroll
            for (int c = 0; c < kDecWRows; c++) unpack_chunk<kElems>(w[u][c], p.dt, wf[c]);
#pragma unroll
            for (int r = 0; r < kDecRows; r++) {
                if (r >= m) break;
                float xv[kElems];
                unpack_chunk<kElems>(__ldg(reinterpret_cast<const uint4 *>(xr + (r * p.ldx + k) * kEsz)), p.dt, xv);
#pragma unroll
                for (int c = 0; c < kDecWRows; c++)
#pragma unroll
                    for (int i = 0; i < kElems; i++) acc[r][c] = fmaf(wf[c][i], xv[i], acc[r][c]);
            }
        }
    }

    float mine = 0.0f; // lane r * kDecWRows + c: the sum of (row r, weight row c)
#pragma unroll
    for (int r = 0; r < kDecRows; r++) {
        if (r >= m) break;
#pragma unroll
        for (int c = 0; c < kDecWRows; c++) {
            const float s = mf_warp_sum(acc[r][c]);
            if (lane == r * kDecWRows + c) mine = s;
        }
    }
    const int r = lane / kDecWRows, c = lane % kDecWRows;
    const float up = __shfl_down_sync(kFull, mine, 2); // SwiGLU: lane c + 2 holds the up row of column c
    if (r >= m) return;
    float v;
    int64_t j;
    if (glu) {
        if (c >= 2) return;
        j = col0 + c;
        v = mf_act_apply(MF_ACT_SILU, mine) * up;
    } else {
        j = col0 + c;
        v = p.mode == kDecGelu ? mf_act_apply(MF_ACT_GELU_TANH, mine) : mine;
    }
    if (j < p.n_out) mf_st(p.out, p.dt, (int64_t)(r0 + r) * p.ldo + j, v);
}

// Elements per 16-byte load for x's dtype.
int64_t decode_elems(const mf_tensor *x) { return x->dtype == MF_DTYPE_F32 ? 4 : 8; }

// Rows of t (n of them) start 16-byte aligned for loads of v elements.
bool decode_rows_ok(const mf_tensor *t, int64_t n, int64_t v) {
    return mf_aligned16(t->data) && (n <= 1 || t->stride[0] % v == 0);
}

// Weights (E, rows, K) of unit stride along K: every row 16-byte aligned.
bool decode_weights_ok(const mf_tensor *w, int64_t v) {
    return mf_aligned16(w->data) && (w->shape[1] <= 1 || w->stride[1] % v == 0) &&
           (w->shape[0] <= 1 || w->stride[0] % v == 0);
}

// Whether the decode kernels take these (validated) arguments: 1..MF_MOE_DECODE_MAX_ROWS
// routed rows, H and I multiples of the 16-byte chunk, every row of x, h,
// w1 and w2 16-byte aligned, column tiles within grid y.
bool decode_fits(const mf_moe_experts_args *p) {
    const int64_t N = p->x.shape[0], H = p->x.shape[1], rows1 = p->h.shape[1];
    const int64_t I = p->ffn == MF_MOE_FFN_SWIGLU ? rows1 / 2 : rows1, v = decode_elems(&p->x);
    const int64_t up_cols = kDecWarps * (p->ffn == MF_MOE_FFN_SWIGLU ? kDecWRows / 2 : kDecWRows);
    const int64_t down_cols = kDecWarps * kDecWRows;
    return N >= 1 && N <= MF_MOE_DECODE_MAX_ROWS && H % v == 0 && I % v == 0 && decode_rows_ok(&p->x, N, v) &&
           decode_rows_ok(&p->h, N, v) && decode_weights_ok(&p->w1, v) && decode_weights_ok(&p->w2, v) &&
           (I + up_cols - 1) / up_cols <= kDecMaxTiles && (H + down_cols - 1) / down_cols <= kDecMaxTiles;
}

mf_status decode_launch(mf_cuda_ctx *c, const DecodeParams &p, int slots) {
    const int64_t per_block = kDecWarps * (p.mode == kDecSwiglu ? kDecWRows / 2 : kDecWRows);
    const dim3 grid((unsigned)slots, (unsigned)((p.n_out + per_block - 1) / per_block));
    if (p.dt == MF_DTYPE_F32)
        moe_decode_kernel<4><<<grid, kDecThreads, 0, c->stream>>>(p);
    else
        moe_decode_kernel<8><<<grid, kDecThreads, 0, c->stream>>>(p);
    MF_CUDA_CHECK_LAUNCH("moe_decode_kernel");
    return MF_OK;
}

// The two launches: h[:, :I] = act(xs . W1_e^T) (SwiGLU's gate product fused),
// then y = h[:, :I] . W2_e^T, each expert's rows found on the device.
mf_status decode_run(mf_backend *be, const mf_moe_experts_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be); // host_offsets, when given, were checked at dispatch; the kernels clamp
    const int64_t N = a->x.shape[0], H = a->x.shape[1], E = a->w1.shape[0], rows1 = a->h.shape[1];
    const bool glu = a->ffn == MF_MOE_FFN_SWIGLU;
    const int64_t I = glu ? rows1 / 2 : rows1;
    // Work items: sum over experts of ceil(n_e / kDecRows) <= D + (N - D) / kDecRows, D = min(E, N) experts.
    const int64_t D = E < N ? E : N;
    const int slots = (int)(D + (N - D) / kDecRows);
    DecodeParams p = {};
    p.offsets = static_cast<const int32_t *>(a->offsets.data);
    p.N = (int)N, p.E = (int)E, p.dt = a->x.dtype;
    p.x = a->x.data, p.ldx = a->x.stride[0], p.K = H;
    p.w = a->w1.data, p.ldw = a->w1.stride[1], p.wse = a->w1.stride[0];
    p.out = a->h.data, p.ldo = a->h.stride[0], p.n_out = I;
    p.mode = glu ? kDecSwiglu : kDecGelu;
    MF_TRY(decode_launch(c, p, slots));
    p.x = a->h.data, p.ldx = a->h.stride[0], p.K = I;
    p.w = a->w2.data, p.ldw = a->w2.stride[1], p.wse = a->w2.stride[0];
    p.out = a->y.data, p.ldo = a->y.stride[0], p.n_out = H;
    p.mode = kDecDown;
    return decode_launch(c, p, slots);
}

// MINFER_MOE_GEMM: "grouped" or "loop" force that path (measurements);
// "wgmma" takes our sm_90a grouped GEMMs wherever they fit (any number of
// rows), else what unset takes; unset or anything else: decode when it fits,
// else the loop.
const char *forced_path() {
    const char *mode = getenv("MINFER_MOE_GEMM");
    if (mode && strcmp(mode, "grouped") == 0) return "grouped";
    if (mode && strcmp(mode, "loop") == 0) return "loop";
    if (mode && strcmp(mode, "wgmma") == 0) return "wgmma";
    return nullptr;
}

// The path mf_cuda_moe_experts takes for p (given valid arguments).
const char *experts_path(mf_cuda_ctx *c, const mf_moe_experts_args *p) {
    const char *forced = forced_path();
    if (forced && strcmp(forced, "wgmma") == 0) {
        if (mf_moe_sm90_fits(c, p)) return "wgmma";
        forced = nullptr;
    }
    if (forced) return forced;
    return decode_fits(p) ? "decode" : "loop";
}

} // namespace

extern "C" bool mf_cuda_moe_experts_capturable(mf_backend *be, const mf_moe_experts_args *p) {
    const char *path = experts_path(mf_cuda_ctx_of(be), p);
    return strcmp(path, "decode") == 0 || strcmp(path, "wgmma") == 0;
}

extern "C" int mf_cuda_moe_sm90(mf_backend *be, int *cc) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    if (cc) *cc = 10 * c->cc_major + c->cc_minor;
    return mf_moe_sm90_available(c);
}

extern "C" const char *mf_cuda_moe_last_path(mf_backend *be) {
    const char *s = mf_cuda_ctx_of(be)->moe_path;
    return s ? s : "";
}

// ---- experts: cublasGemmGroupedBatchedEx ------------------------------------------------

namespace {

cudaDataType_t cu_type(int dt) {
    return dt == MF_DTYPE_F16 ? CUDA_R_16F : dt == MF_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

#define MF_CUBLAS_V2_TRY(call)                                                                        \
    do {                                                                                              \
        cublasStatus_t mf_cb_s_ = (call);                                                             \
        if (mf_cb_s_ != CUBLAS_STATUS_SUCCESS) {                                                      \
            (void)cudaGetLastError();                                                                 \
            return mf_fail(MF_ERR_CUDA, "cublas: %s failed: %s", #call, cublasGetStatusString(mf_cb_s_)); \
        }                                                                                             \
    } while (0)

// One grouped GEMM over the G non-empty experts, row-major
//   C_g (n_g, N) = A_g (n_g, K) . W_g^T,  W_g (N, K) rows of stride ldw
// as cuBLAS column-major C_g^T (N, n_g) = op_T(W_g as (K, N)) . A_g^T (K, n_g).
// The 3 G pointers go through `ptrs` (device, 3 * 256 entries), copied from
// the host on the stream (pageable: staged before the call returns).
mf_status grouped_gemm(mf_cuda_ctx *c, int G, const int *rows, const void *const *a, int lda, const void *const *w,
                       int ldw, void *const *cc, int ldc, int N, int K, cudaDataType_t type, void **ptrs) {
    const void *host[3 * 256] = {}; // unused entries copied too (one 6 KB copy)
    for (int g = 0; g < G; g++) host[g] = w[g], host[256 + g] = a[g], host[512 + g] = cc[g];
    MF_CUDA_TRY(cudaMemcpyAsync(ptrs, host, sizeof host, cudaMemcpyHostToDevice, c->stream));
    cublasOperation_t ta[256], tb[256];
    int m[256], n[256], k[256], la[256], lb[256], lc[256], gs[256];
    float alpha[256], beta[256];
    for (int g = 0; g < G; g++) {
        ta[g] = CUBLAS_OP_T, tb[g] = CUBLAS_OP_N;
        m[g] = N, n[g] = rows[g], k[g] = K;
        la[g] = ldw, lb[g] = lda, lc[g] = ldc, gs[g] = 1;
        alpha[g] = 1.0f, beta[g] = 0.0f;
    }
    cublasHandle_t h = static_cast<cublasHandle_t>(c->cublas);
    MF_CUBLAS_V2_TRY(cublasGemmGroupedBatchedEx(h, ta, tb, m, n, k, alpha, (const void *const *)ptrs, type, la,
                                                (const void *const *)(ptrs + 256), type, lb, beta,
                                                (void *const *)(ptrs + 512), type, lc, G, gs, CUBLAS_COMPUTE_32F));
    return MF_OK;
}

} // namespace

extern "C" void mf_cuda_moe_release(mf_cuda_ctx *c) {
    if (c && c->cublas) cublasDestroy(static_cast<cublasHandle_t>(c->cublas));
    if (c) c->cublas = nullptr;
}

// Declines (MF_ERR_UNSUPPORTED): src/ops/moe.c then runs its generic
// per-expert loop of mf_gemm / mf_act (cuBLASLt), the offsets read back.
static mf_status decline(mf_cuda_ctx *c, const char *why) {
    c->moe_path = "loop";
    return mf_fail(MF_ERR_UNSUPPORTED, "moe_experts: %s (the generic expert loop runs them)", why);
}

// The expert FFNs: the decode kernels when they fit (no read-back), else a
// decline (the per-expert loop of src/ops/moe.c); our sm_90a grouped GEMMs or
// cuBLAS's grouped GEMM when MINFER_MOE_GEMM asks.
extern "C" mf_status mf_cuda_moe_experts(mf_backend *be, const mf_moe_experts_args *p) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    const char *path = experts_path(c, p);
    c->moe_path = path;
    if (strcmp(path, "decode") == 0) return decode_run(be, p);
    if (strcmp(path, "loop") == 0) return decline(c, "no device path for these rows and shapes");
    if (strcmp(path, "wgmma") == 0) return mf_moe_sm90_run(c, p); // host_offsets were checked at dispatch
    // Pointer arrays live at the start of the cuBLASLt workspace: stream-ordered
    // between GEMMs, so no Lt call is using it meanwhile.
    if (c->workspace_bytes < 3 * 256 * sizeof(void *)) return decline(c, "the grouped GEMM's pointer arrays do not fit");
    if (!c->cublas) {
        cublasHandle_t h = nullptr;
        MF_CUBLAS_V2_TRY(cublasCreate(&h));
        c->cublas = h;
    }
    cublasHandle_t h = static_cast<cublasHandle_t>(c->cublas);
    MF_CUBLAS_V2_TRY(cublasSetStream(h, c->stream));
    const int E = (int)p->w1.shape[0];
    int32_t buf[257];
    const int32_t *o = p->host_offsets;
    if (!o) { // one read-back sizes the grouped GEMM
        MF_TRY(be->copy(be, buf, p->offsets.data, (size_t)(E + 1) * sizeof(int32_t), MF_COPY_D2H));
        MF_TRY(mf_moe_offsets_check(buf, E, p->x.shape[0]));
        o = buf;
    }
    const int64_t H = p->x.shape[1], rows1 = p->h.shape[1];
    const bool glu = p->ffn == MF_MOE_FFN_SWIGLU;
    const int64_t I = glu ? rows1 / 2 : rows1;
    const size_t es = mf_dtype_size(p->x.dtype);
    const cudaDataType_t type = cu_type(p->x.dtype);
    int G = 0, rows[256];
    const void *xa[256], *w1[256], *ha[256], *w2[256];
    void *hc[256], *yc[256];
    for (int e = 0; e < E; e++) {
        const int n = o[e + 1] - o[e];
        if (n == 0) continue;
        rows[G] = n;
        xa[G] = static_cast<const char *>(p->x.data) + (size_t)(o[e] * p->x.stride[0]) * es;
        hc[G] = static_cast<char *>(p->h.data) + (size_t)(o[e] * p->h.stride[0]) * es;
        ha[G] = hc[G];
        yc[G] = static_cast<char *>(p->y.data) + (size_t)(o[e] * p->y.stride[0]) * es;
        w1[G] = static_cast<const char *>(p->w1.data) + (size_t)(e * p->w1.stride[0]) * es;
        w2[G] = static_cast<const char *>(p->w2.data) + (size_t)(e * p->w2.stride[0]) * es;
        G++;
    }
    if (G == 0) return MF_OK;
    const int64_t lim = INT_MAX;
    if (p->x.stride[0] > lim || p->h.stride[0] > lim || p->y.stride[0] > lim || p->w1.stride[1] > lim ||
        p->w2.stride[1] > lim || rows1 > lim || H > lim)
        return decline(c, "the grouped GEMM takes 32-bit sizes and strides");
    void **ptrs = static_cast<void **>(c->workspace);
    MF_TRY(grouped_gemm(c, G, rows, xa, (int)p->x.stride[0], w1, (int)p->w1.stride[1], hc, (int)p->h.stride[0],
                        (int)rows1, (int)H, type, ptrs));
    // The activation over every routed row at once (GELU too: no grouped epilogue).
    mf_tensor hv = p->h;
    hv.data = static_cast<char *>(p->h.data) + (size_t)(o[0] * p->h.stride[0]) * es;
    hv.shape[0] = o[E] - o[0];
    mf_tensor gate = hv, up = hv;
    gate.shape[1] = I, up.shape[1] = I;
    up.data = static_cast<char *>(hv.data) + (size_t)I * es;
    mf_act_args act = {};
    act.x = gate, act.y = gate, act.up = glu ? &up : nullptr, act.kind = glu ? MF_ACT_SILU : MF_ACT_GELU_TANH;
    MF_TRY(mf_cuda_act(be, &act));
    MF_TRY(grouped_gemm(c, G, rows, ha, (int)p->h.stride[0], w2, (int)p->w2.stride[1], yc, (int)p->y.stride[0],
                        (int)H, (int)I, type, ptrs));
    return MF_OK;
}
