// The MoE permutation on CUDA (mf_moe_permute): a stable counting sort of
// the (token, k) assignments by expert (offsets, sorted rows, their inverse)
// and the gather of x into expert-contiguous rows.
#include "cuda/moe/moe.cuh"

namespace {

constexpr unsigned kFull = 0xffffffffu;

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
    MF_SHARED(int, total, [kPermBuckets]);
    MF_SHARED(int, cursor, [kPermBuckets]);
    MF_SHARED(int, wcount, [kPermWarps][kPermBuckets]);
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

} // namespace

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
    MF_LAUNCH(moe_permute_kernel, grid, kPermThreads, 0, c->stream, p);
    MF_CUDA_CHECK_LAUNCH("moe_permute_kernel");
    if (!a->x) return MF_OK;
    GatherParams g = {};
    const int64_t esz = (int64_t)mf_dtype_size(a->x->dtype);
    g.x = static_cast<const char *>(a->x->data), g.xs = static_cast<char *>(a->xs->data);
    g.x_rs = a->x->stride[0] * esz, g.xs_rs = a->xs->stride[0] * esz;
    g.sorted = p.sorted, g.N = N, g.row_bytes = a->x->shape[1] * esz, g.k = (int)a->ids.shape[1];
    // A 16-bit view may start at an odd element or have an odd row stride:
    // 4-byte pieces only when every row of x and xs is 4-byte aligned too.
    const bool v16 = g.row_bytes % 16 == 0 && mf_moe_rows_aligned16(a->x) && mf_moe_rows_aligned16(a->xs);
    const bool v4 = g.row_bytes % 4 == 0 && (uintptr_t)g.x % 4 == 0 && (uintptr_t)g.xs % 4 == 0 && g.x_rs % 4 == 0 &&
                    g.xs_rs % 4 == 0;
    g.piece = v16 ? 16 : v4 ? 4 : 2;
    if (g.row_bytes == 0) return MF_OK;
    const int64_t piece = g.piece;
    MF_LAUNCH(moe_gather_kernel, mf_cuda_grid(c, (N * (g.row_bytes / piece) + 255) / 256), 256, 0, c->stream, g);
    MF_CUDA_CHECK_LAUNCH("moe_gather_kernel");
    return MF_OK;
}
