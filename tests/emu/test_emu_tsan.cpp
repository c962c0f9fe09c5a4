// ThreadSanitizer mode (built with -fsanitize=thread -DMF_EMU_TSAN, the
// emulator's runtime uninstrumented): each kernel thread is a TSan fiber and
// barriers, warp barriers and mbarriers are happens-before edges, so a
// shared-memory access pair that no barrier orders is reported even when the
// random order happened to run it right. Two kernels, each with and without
// its barrier:
//   tile:  a reversal through shared memory (plain loads and stores);
//   gemm:  cp.async into a tile, ldmatrix + mma.sync out of it (the FA2
//          prefill's pattern), the barrier between them removed.
// `test_emu_tsan clean` must exit 0 with no report; `test_emu_tsan race-tile`
// and `race-gemm` must make TSan report a data race (CTest matches its text).
#include <string>

#include "cuda/portable.cuh"
#include "cuda/ptx.cuh"
#include "emu_test.h"

namespace {

template <bool kBarrier> __global__ void tile_kernel(const float *in, float *out) {
    MF_SHARED(float, tile, [64]);
    const int t = threadIdx.x;
    tile[t] = in[t];
    if (kBarrier) __syncthreads();
    out[t] = tile[63 - t];
}

// C (16 x 8 per warp tile) = A (16 x 16) B (16 x 8): A and B through shared
// memory by cp.async, then ldmatrix; one warp, one mma.
template <bool kBarrier> __global__ void gemm_kernel(const uint16_t *a, const uint16_t *bt, float *c) {
    MF_SHARED_ALIGNED(16, uint16_t, sa, [16 * 16]);
    MF_SHARED_ALIGNED(16, uint16_t, sb, [8 * 16]);
    const int l = threadIdx.x;
    ptx::cp_async_cg16(ptx::smem_u32(&sa[l * 8]), a + l * 8, 16); // 32 chunks of A
    if (l < 16) ptx::cp_async_cg16(ptx::smem_u32(&sb[l * 8]), bt + l * 8, 16);
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
    if (kBarrier) __syncwarp();
    uint32_t ra[4], rb[4];
    ptx::ldmatrix_x4(ra, ptx::smem_u32(&sa[(l % 16) * 16 + (l / 16) * 8]));
    ptx::ldmatrix_x4(rb, ptx::smem_u32(&sb[(l % 8) * 16 + (l / 8 % 2) * 8]));
    float acc[4] = {0, 0, 0, 0};
    ptx::mma_m16n8k16<false>(acc, ra, rb[0], rb[1]);
    for (int i = 0; i < 4; i++) c[l * 4 + i] = acc[i];
}

} // namespace

int main(int argc, char **argv) {
    const std::string mode = argc > 1 ? argv[1] : "clean";
    Dev<float> in(std::vector<float>(64, 1.0f)), out(64);
    Dev<uint16_t> a(std::vector<uint16_t>(256, 0x3c00)), b(std::vector<uint16_t>(128, 0x3c00)); // f16 1.0
    Dev<float> c(128);
    if (mode == "clean" || mode == "race-tile") {
        if (mode == "clean") MF_LAUNCH(tile_kernel<true>, 2, 64, 0, 0, in.p, out.p);
        else MF_LAUNCH(tile_kernel<false>, 2, 64, 0, 0, in.p, out.p);
        CUDA_OK(cudaDeviceSynchronize());
    }
    if (mode == "clean" || mode == "race-gemm") {
        if (mode == "clean") MF_LAUNCH(gemm_kernel<true>, 2, 32, 0, 0, a.p, b.p, c.p);
        else MF_LAUNCH(gemm_kernel<false>, 2, 32, 0, 0, a.p, b.p, c.p);
        CUDA_OK(cudaDeviceSynchronize());
        if (mode == "clean") CHECK(c.get()[5] == 16.0f, "mma of ones: %g", c.get()[5]);
    }
    return finish(("test_emu_tsan " + mode).c_str());
}
