// The rows and cluster variants of the CUDA softmax (see softmax.cu for the
// design and when the dispatch picks them): a whole row in registers, over a
// group of threads of one block, or over a cluster of blocks (sm_90) that
// exchange their (max, sum) partials through distributed shared memory.
#include <cooperative_groups.h>

#include "cuda/softmax/softmax.cuh"

namespace cg = cooperative_groups;

namespace softmax {

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
#if MF_DEVICE_ARCH >= 900
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
    MF_SHARED(float, red_m, [32]);
    MF_SHARED(float, red_s, [32]);
    MF_SHARED(float2, cl, [2]); // clusters: (max, sum) of this block for even / odd rows
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
#if MF_DEVICE_ARCH >= 900
    if (cs > 1) cg::this_cluster().sync();
#endif
}

namespace {

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

} // namespace

// The largest cluster (blocks per row) of kRowsMaxThreads-thread rows<bcol>
// blocks that can run: 16, 8, 4 or 2 where the occupancy calculator finds
// room for one (sm_90 and later), else 1. Asked once per bias kind.
int max_cluster(mf_cuda_ctx *c, mf_cuda_softmax_state *s, bool bcol) {
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

// The rows kernel, with or without the bias along keys; a cluster launch when
// the plan spreads a row over several blocks.
mf_status launch_rows(const mf_cuda_ctx *c, const SmParams &p, unsigned grid, int threads, int G, int cs) {
    void (*kernel)(SmParams, int, int) = p.bcol ? softmax_rows_kernel<true> : softmax_rows_kernel<false>;
    if (cs == 1) {
        MF_LAUNCH(kernel, grid, threads, 0, c->stream, p, G, 1);
        return MF_OK;
    }
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = rows_config(grid, threads, cs, c->stream, &attr);
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, p, G, cs);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return mf_fail(MF_ERR_CUDA, "softmax: cluster launch of %d blocks per row failed: %s", cs,
                       cudaGetErrorString(e));
    }
    return MF_OK;
}

} // namespace softmax
