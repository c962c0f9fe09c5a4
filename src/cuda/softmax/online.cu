// The online and split variants of the CUDA softmax (see softmax.cu): rows
// too long for the rows / cluster kernels, two passes over memory (a running
// (max, sum), then the normalised row); split: a row's chunks over several
// blocks, (max, sum) per split through the backend's workspace.
#include "cuda/softmax/softmax.cuh"

namespace softmax {

// Work item w = (row, split j) covers the row's chunks [j * split_chunks,
// (j + 1) * split_chunks); kOnlineWhole has splits = 1 and split_chunks >=
// any row's chunk count. Threads take kSmemUnroll chunks at a time, T apart.
__global__ void __launch_bounds__(kOnlineThreads) softmax_online_kernel(SmParams p, int mode, int splits,
                                                                        int split_chunks, float2 *ws) {
    MF_SHARED(float, red_m, [32]);
    MF_SHARED(float, red_s, [32]);
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

mf_status launch_online(const mf_cuda_ctx *c, const SmParams &p, unsigned grid, int threads, OnlineMode mode,
                        int splits, int split_chunks, float2 *ws) {
    MF_LAUNCH(softmax_online_kernel, grid, threads, 0, c->stream, p, mode, splits, split_chunks, ws);
    return MF_OK;
}

int online_resident(mf_cuda_softmax_state *s) {
    return resident_blocks(softmax_online_kernel, kOnlineThreads, 0, s->occ_online);
}

} // namespace softmax
