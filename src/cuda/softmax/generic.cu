// The generic variant of the CUDA softmax (see softmax.cu): layouts whose x,
// y and bias never share a 16-byte boundary; scalar loads and stores, one
// block per row, two passes.
#include "cuda/softmax/softmax.cuh"

namespace softmax {

// One block per row (grid-stride), thread t takes columns t, t + T, ...:
// pass 1 an online (max, sum) per thread, pass 2 re-reads and writes. For
// layouts whose x, y and bias never share a 16-byte boundary.
__global__ void __launch_bounds__(kGenericThreads) softmax_generic_kernel(SmParams p) {
    MF_SHARED(float, red_m, [32]);
    MF_SHARED(float, red_s, [32]);
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

mf_status launch_generic(const mf_cuda_ctx *c, const SmParams &p, unsigned grid, int threads) {
    MF_LAUNCH(softmax_generic_kernel, grid, threads, 0, c->stream, p);
    return MF_OK;
}

int generic_resident(mf_cuda_softmax_state *s) {
    return resident_blocks(softmax_generic_kernel, kGenericThreads, 0, s->occ_generic);
}

} // namespace softmax
