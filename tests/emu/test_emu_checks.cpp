// What the emulator catches: small kernels with planted bugs, each of which
// must fail with the report that names it, beside the same kernel without
// the bug, which must pass:
//   a __syncthreads removed (wrong results under the random thread order),
//   threads at different __syncthreads, a deadlock (a warp barrier a lane
//   never reaches), a lane leaving before a shuffle, a shuffle reading a lane
//   outside its mask, a mask naming lanes a partial warp lacks;
//   a block reading another block's shared memory outside a cluster (through
//   map_shared_rank, and through a pointer left in global memory: the fault
//   handler, in a child process), a cluster exchange with and without its
//   cluster.sync;
//   a wrong mbarrier expect_tx byte count (too few and too many: deadlock
//   with the tx-count left over), an uninitialised mbarrier, more arrivals
//   than the count, a cp.async read before its wait;
//   wgmma accumulators read before the wait (NaN) and written during flight;
//   an out-of-bounds global write in a tail tile (the guard zones, or
//   AddressSanitizer, in a child process); __trap and the sticky error;
//   launch configurations the runtime refuses; sm_90 instructions on an
//   emulated compute capability 8.0 device.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <string>

#include <cooperative_groups.h>

#include "cuda/portable.cuh"
#include "cuda/ptx.cuh"
#include "emu_test.h"

namespace {

// The launch must fail with `err` and a report containing `what`; the emulator is reset after.
void expect_failure(const char *name, cudaError_t err, const char *what) {
    const cudaError_t e = cudaDeviceSynchronize();
    const std::string r = mf_emu_last_report();
    CHECK(e == err, "%s: cudaDeviceSynchronize gave %s, want %s", name, cudaGetErrorName(e), cudaGetErrorName(err));
    CHECK(r.find(what) != std::string::npos, "%s: the report lacks \"%s\": %s", name, what, r.c_str());
    mf_emu_reset();
}

void expect_success(const char *name) {
    const cudaError_t e = cudaDeviceSynchronize();
    CHECK(e == cudaSuccess, "%s: %s: %s", name, cudaGetErrorName(e), mf_emu_last_report());
    mf_emu_reset();
}

// Runs fn in a child process; returns its stderr and whether it failed (exit != 0 or a signal).
bool child_fails(const std::function<void()> &fn, std::string *err) {
    int fd[2];
    if (pipe(fd) != 0) return false;
    fflush(stdout), fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fn();
        _exit(0);
    }
    close(fd[1]);
    char buf[4096];
    ssize_t n;
    while ((n = read(fd[0], buf, sizeof buf)) > 0) err->append(buf, (size_t)n);
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

// ---- a removed __syncthreads ------------------------------------------------------------------------

template <bool kBarrier> __global__ void reverse_kernel(const float *in, float *out) {
    MF_SHARED(float, tile, [128]);
    const int t = threadIdx.x;
    tile[t] = in[blockIdx.x * 128 + t];
    if (kBarrier) __syncthreads();
    out[blockIdx.x * 128 + t] = tile[127 - t];
}

void test_missing_barrier() {
    std::vector<float> h(8 * 128);
    for (size_t i = 0; i < h.size(); i++) h[i] = (float)i;
    Dev<float> in(h), out(h.size());
    auto wrong = [&]() {
        const auto o = out.get();
        int bad = 0;
        for (int b = 0; b < 8; b++)
            for (int t = 0; t < 128; t++) bad += o[b * 128 + t] != h[b * 128 + 127 - t];
        return bad;
    };
    MF_LAUNCH(reverse_kernel<true>, 8, 128, 0, 0, in.p, out.p);
    CHECK(wrong() == 0, "the reversal with its barrier must be right under any thread order");
    MF_LAUNCH(reverse_kernel<false>, 8, 128, 0, 0, in.p, out.p);
    const int bad = wrong();
    CHECK(bad > 0, "the reversal without its __syncthreads must read unwritten (poison) shared memory");
    expect_success("missing barrier (no report: a race is not an error the emulator can name)");
}

// ---- barriers and collectives ------------------------------------------------------------------------

__global__ void divergent_barrier_kernel(float *o) {
    if (threadIdx.x < 64) {
        o[threadIdx.x] = 1;
        __syncthreads();
    } else {
        __syncthreads();
        o[threadIdx.x] = 2;
    }
}

__global__ void deadlock_kernel(float *o) { // lane 0 waits for lane 1 at a warp barrier; lane 1 is at __syncthreads
    if (threadIdx.x == 0) __syncwarp(0x3u);
    else __syncthreads();
    o[threadIdx.x] = 1;
}

template <bool kEarlyExit> __global__ void early_exit_kernel(float *o) {
    float s = (float)threadIdx.x;
    if (kEarlyExit && threadIdx.x == 31) return;
    for (int k = 16; k; k >>= 1) s += __shfl_xor_sync(0xffffffffu, s, k);
    o[threadIdx.x] = s;
}

__global__ void shfl_outside_mask_kernel(int *o) {
    if (threadIdx.x < 16) o[threadIdx.x] = __shfl_sync(0x0000ffffu, (int)threadIdx.x, 20);
}

__global__ void partial_warp_kernel(int *o) { // 48 threads: warp 1 has lanes 0-15 only
    o[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

void test_collectives() {
    Dev<float> o(256);
    Dev<int> oi(64);
    MF_LAUNCH(divergent_barrier_kernel, 1, 128, 0, 0, o.p);
    expect_failure("threads at different barriers", cudaErrorLaunchFailure, "different __syncthreads");
    MF_LAUNCH(deadlock_kernel, 2, 64, 0, 0, o.p);
    expect_failure("deadlock", cudaErrorLaunchTimeout, "deadlock");
    MF_LAUNCH(early_exit_kernel<true>, 1, 32, 0, 0, o.p);
    expect_failure("a lane leaving before a shuffle", cudaErrorLaunchFailure, "left the kernel");
    MF_LAUNCH(early_exit_kernel<false>, 1, 32, 0, 0, o.p);
    expect_success("the butterfly with every lane");
    CHECK(o.get()[5] == 496.0f, "butterfly sum");
    MF_LAUNCH(shfl_outside_mask_kernel, 1, 32, 0, 0, oi.p);
    expect_failure("a shuffle reading outside its mask", cudaErrorLaunchFailure, "not in the mask");
    MF_LAUNCH(partial_warp_kernel, 1, 48, 0, 0, oi.p);
    expect_failure("a mask naming lanes a partial warp lacks", cudaErrorLaunchFailure, "which this warp does not have");
}

// ---- shared memory between blocks -------------------------------------------------------------------------

__global__ void map_rank_kernel(int *o) {
    MF_SHARED(int, v);
    v = (int)blockIdx.x;
    __syncthreads();
    cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
    o[blockIdx.x] = *cl.map_shared_rank(&v, 1); // rank 1 exists only in a cluster of 2 or more
}

template <bool kSync> __global__ void cluster_kernel(int *o) {
    MF_SHARED(int, v, [4]);
    cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
    const unsigned r = cl.block_rank();
    if (threadIdx.x < 4) v[threadIdx.x] = (int)(100 * blockIdx.x + threadIdx.x);
    if (kSync) cl.sync();
    if (threadIdx.x < 4) {
        const int peer = (int)((r + 1) % cl.num_blocks());
        o[blockIdx.x * 4 + threadIdx.x] = cl.map_shared_rank(v, (unsigned)peer)[threadIdx.x];
    }
    if (kSync) cl.sync(); // nobody leaves while its shared memory is read
}

__global__ void leak_kernel(int **slot, int *o, int read) {
    MF_SHARED(int, v);
    v = 7;
    __syncthreads();
    if (!read) *slot = &v; // publishes a pointer to its shared memory
    else o[0] = **slot;    // a later block reads through it
}

void cluster_launch(void (*k)(int *), unsigned grid, unsigned cs, int *o) {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cs, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid), cfg.blockDim = dim3(64), cfg.attrs = &attr, cfg.numAttrs = 1;
    CUDA_OK(cudaLaunchKernelEx(&cfg, k, o));
}

void test_shared_between_blocks() {
    Dev<int> o(64);
    MF_LAUNCH(map_rank_kernel, 2, 32, 0, 0, o.p);
    expect_failure("map_shared_rank outside a cluster", cudaErrorIllegalAddress, "outside its cluster");
    cluster_launch(cluster_kernel<true>, 8, 4, o.p);
    expect_success("a cluster exchange with cluster.sync");
    const auto v = o.get();
    int bad = 0;
    for (int b = 0; b < 8; b++)
        for (int t = 0; t < 4; t++) bad += v[b * 4 + t] != 100 * ((b / 4) * 4 + (b % 4 + 1) % 4) + t;
    CHECK(bad == 0, "cluster exchange: %d values wrong", bad);
    int poisoned = 0;
    for (int rep = 0; rep < 4; rep++) {
        cluster_launch(cluster_kernel<false>, 8, 4, o.p);
        expect_success("a cluster exchange without cluster.sync (no report: a race)");
        for (int x : o.get()) poisoned += x == -1; // 0xffffffff: a peer's shared memory before its write
    }
    CHECK(poisoned > 0, "without cluster.sync some block must read a peer's unwritten (poison) shared memory");
    std::string err;
    Dev<int *> slot(1);
    const bool failed = child_fails([&] {
        MF_LAUNCH(leak_kernel, 1, 32, 0, 0, slot.p, o.p, 0);
        MF_LAUNCH(leak_kernel, 1, 32, 0, 0, slot.p, o.p, 1);
        cudaDeviceSynchronize();
    }, &err);
    CHECK(failed && err.find("not running") != std::string::npos,
          "a block reading another block's shared memory through a leaked pointer must fault and be named: %s",
          err.c_str());
}

// ---- mbarriers and async copies --------------------------------------------------------------------------------

__global__ void tma_tx_kernel(const __grid_constant__ CUtensorMap map, int tx_delta, float *o) {
    MF_DYN_SHARED(uint8_t, raw);
    MF_SHARED(uint64_t, bar);
    uint8_t *tile = raw + (((ptx::smem_u32(raw) + 1023u) & ~1023u) - ptx::smem_u32(raw));
    const uint32_t b = ptx::smem_u32(&bar);
    if (threadIdx.x == 0) {
        ptx::mbarrier_init(b, 1), ptx::fence_mbarrier_init();
        ptx::mbarrier_arrive_expect_tx(b, (uint32_t)(64 * 16 * 2 + tx_delta)); // the box is 2048 bytes
        ptx::tma_load_2d(ptx::smem_u32(tile), &map, 0, 0, b);
    }
    __syncthreads();
    ptx::mbarrier_try_wait_parity(b, 0);
    o[threadIdx.x] = (float)tile[threadIdx.x];
}

__global__ void uninit_mbar_kernel(int *o) {
    MF_SHARED(uint64_t, bar);
    o[0] = ptx::mbarrier_try_wait_parity(ptx::smem_u32(&bar), 0);
}

__global__ void extra_arrive_kernel(int *o) {
    MF_SHARED(uint64_t, bar);
    const uint32_t b = ptx::smem_u32(&bar);
    if (threadIdx.x == 0) ptx::mbarrier_init(b, 1), ptx::mbarrier_arrive_expect_tx(b, 64);
    __syncthreads();
    ptx::mbarrier_arrive(b); // the count is 1, already used by the expect_tx arrival
    o[0] = 1;
}

template <bool kWait> __global__ void cp_wait_kernel(const float *src, float *o) {
    MF_SHARED_ALIGNED(16, float, buf, [128]);
    const int t = threadIdx.x;
    ptx::cp_async_cg16(ptx::smem_u32(&buf[4 * t]), src + 4 * t, 16);
    ptx::cp_async_commit();
    if (kWait) ptx::cp_async_wait<0>();
    __syncthreads();
    o[t] = buf[(4 * t + 4) % 128]; // another thread's copy
}

void test_async() {
    std::vector<uint16_t> g(64 * 16);
    for (size_t i = 0; i < g.size(); i++) g[i] = (uint16_t)i;
    Dev<uint16_t> dg(g);
    CUtensorMap map;
    const cuuint64_t dims[2] = {64, 16}, strides[1] = {128};
    const cuuint32_t box[2] = {64, 16}, es[2] = {1, 1};
    CHECK(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dg.p, dims, strides, box, es,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS,
          "tensor map");
    Dev<float> o(128);
    MF_LAUNCH(tma_tx_kernel, 1, 64, 4096, 0, map, 0, o.p);
    expect_success("TMA with the right expect_tx count");
    MF_LAUNCH(tma_tx_kernel, 1, 64, 4096, 0, map, 16, o.p);
    expect_failure("expect_tx 16 bytes too many", cudaErrorLaunchTimeout, "tx-count 16 bytes: more bytes expected");
    MF_LAUNCH(tma_tx_kernel, 1, 64, 4096, 0, map, -16, o.p);
    expect_failure("expect_tx 16 bytes too few", cudaErrorLaunchTimeout, "tx-count -16 bytes");
    Dev<int> oi(4);
    MF_LAUNCH(uninit_mbar_kernel, 1, 32, 0, 0, oi.p);
    expect_failure("an uninitialised mbarrier", cudaErrorLaunchFailure, "not an initialised mbarrier");
    MF_LAUNCH(extra_arrive_kernel, 1, 32, 0, 0, oi.p);
    expect_failure("more arrivals than the count", cudaErrorLaunchFailure, "more arrivals than");
    std::vector<float> h(128);
    for (int i = 0; i < 128; i++) h[i] = (float)i;
    Dev<float> src(h);
    MF_LAUNCH(cp_wait_kernel<true>, 1, 32, 0, 0, src.p, o.p);
    expect_success("cp.async with its wait");
    CHECK(o.get()[3] == 16.0f, "cp.async data after wait_group + barrier");
    MF_LAUNCH(cp_wait_kernel<false>, 1, 32, 0, 0, src.p, o.p);
    expect_success("cp.async without its wait (no report: the data never landed)");
    int nan = 0;
    const auto ov = o.get();
    for (int i = 0; i < 32; i++) nan += std::isnan(ov[i]);
    CHECK(nan == 32, "another thread's cp.async data read without cp.async.wait_group is poison (%d of 32)", nan);
}

// ---- wgmma accumulators ---------------------------------------------------------------------------------------

template <int kBug> __global__ void wgmma_acc_kernel(float *o) {
    MF_DYN_SHARED(uint8_t, raw);
    uint8_t *base = raw + (((ptx::smem_u32(raw) + 1023u) & ~1023u) - ptx::smem_u32(raw));
    for (int i = threadIdx.x; i < 4096; i += 128) reinterpret_cast<uint16_t *>(base)[i] = 0x3f80; // bf16 1.0
    __syncthreads();
    const uint32_t s = ptx::smem_u32(base);
    const uint64_t d = ((uint64_t)((s & 0x3ffff) >> 4)) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
    float acc[32];
    for (int i = 0; i < 32; i++) acc[i] = 0.0f;
    ptx::wgmma_fence();
    ptx::wgmma_ss<64, __nv_bfloat16>(acc, d, d, 0);
    ptx::wgmma_commit_group();
    if (kBug == 1) o[threadIdx.x] = acc[0]; // read before the wait
    if (kBug == 2) acc[1] = 1.0f;           // written while in flight
    ptx::wgmma_wait_group<0>();
    ptx::fence_acc(acc);
    if (kBug != 1) o[threadIdx.x] = acc[0];
}

void test_wgmma_accumulators() {
    Dev<float> o(128);
    MF_LAUNCH(wgmma_acc_kernel<0>, 1, 128, 8192 + 1024, 0, o.p);
    expect_success("wgmma read after its wait");
    CHECK(o.get()[7] == 16.0f, "wgmma of ones over k16");
    MF_LAUNCH(wgmma_acc_kernel<1>, 1, 128, 8192 + 1024, 0, o.p);
    expect_success("wgmma accumulators read before the wait (no report: the values are undefined)");
    CHECK(std::isnan(o.get()[7]), "accumulators read before wgmma.wait_group are poison");
    MF_LAUNCH(wgmma_acc_kernel<2>, 1, 128, 8192 + 1024, 0, o.p);
    expect_failure("accumulators written during a wgmma", cudaErrorLaunchFailure, "written while");
}

// ---- global memory, traps, launch configurations, compute capability ------------------------------------------

__global__ void tail_kernel(float *o, int n, bool bug) {
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (bug || i < n) o[i] = 1.0f; // the bug: the tail tile writes past n
}

__global__ void trap_kernel(int *o) {
    if (threadIdx.x == 3) __trap();
    o[threadIdx.x] = 1;
}

__global__ void empty_kernel(int *) {}

__global__ void wgmma_fence_kernel(int *o) {
    ptx::wgmma_fence();
    o[0] = 1;
}

__global__ void misaligned_ldmatrix_kernel(uint32_t *o) {
    MF_SHARED_ALIGNED(16, uint16_t, t, [512]);
    for (int i = threadIdx.x; i < 512; i += 32) t[i] = 0;
    __syncthreads();
    uint32_t r[4];
    ptx::ldmatrix_x4(r, ptx::smem_u32(&t[8 * threadIdx.x + 2])); // rows must be 16-byte aligned
    o[threadIdx.x] = r[0];
}

void test_global_and_config() {
    // Out-of-bounds global write in a tail tile: 1000 floats, 4 blocks of 256 threads.
    std::string err;
    const bool failed = child_fails([] {
        float *o = nullptr;
        cudaMalloc(reinterpret_cast<void **>(&o), 1000 * sizeof(float));
        MF_LAUNCH(tail_kernel, 4, 256, 0, 0, o, 1000, true);
        if (cudaDeviceSynchronize() != cudaSuccess) _exit(3);
    }, &err);
    CHECK(failed && (err.find("past the end") != std::string::npos || err.find("AddressSanitizer") != std::string::npos),
          "an out-of-bounds write in a tail tile must be caught: %s", err.c_str());
    Dev<float> of(1000);
    MF_LAUNCH(tail_kernel, 4, 256, 0, 0, of.p, 1000, false);
    expect_success("the tail tile with its bound");

    Dev<int> o(64);
    MF_LAUNCH(trap_kernel, 1, 32, 0, 0, o.p);
    {
        const cudaError_t e1 = cudaDeviceSynchronize(), e2 = cudaMemset(o.p, 0, 4);
        CHECK(e1 == cudaErrorLaunchFailure && e2 == cudaErrorLaunchFailure, "__trap: %s, then sticky: %s",
              cudaGetErrorName(e1), cudaGetErrorName(e2));
        mf_emu_reset();
        CHECK(cudaMemset(o.p, 0, 4) == cudaSuccess, "mf_emu_reset clears the sticky error");
    }

    CHECK(MF_LAUNCH(empty_kernel, 1, 2048, 0, 0, o.p) == cudaErrorInvalidConfiguration, "2048 threads per block");
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "the launch error is the last error");
    CHECK(MF_LAUNCH(empty_kernel, 1, 32, 64 << 10, 0, o.p) == cudaErrorInvalidValue,
          "64 KB of dynamic shared memory without cudaFuncAttributeMaxDynamicSharedMemorySize");
    CHECK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10) == cudaSuccess,
          "opt in to 64 KB");
    CHECK(MF_LAUNCH(empty_kernel, 1, 32, 64 << 10, 0, o.p) == cudaSuccess, "64 KB after the opt-in");
    CHECK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 << 10) ==
              cudaErrorInvalidValue,
          "more than the device's 227 KB per block");
    (void)cudaGetLastError();
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 16, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(16), cfg.blockDim = dim3(32), cfg.attrs = &attr, cfg.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&cfg, empty_kernel, o.p) == cudaErrorInvalidClusterSize,
          "a cluster of 16 without cudaFuncAttributeNonPortableClusterSizeAllowed");
    CHECK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess, "opt in");
    CHECK(cudaLaunchKernelEx(&cfg, empty_kernel, o.p) == cudaSuccess, "a cluster of 16 after the opt-in");
    cfg.gridDim = dim3(24);
    CHECK(cudaLaunchKernelEx(&cfg, empty_kernel, o.p) == cudaErrorInvalidClusterSize, "a grid not a multiple of the cluster");
    (void)cudaGetLastError();
    expect_success("configuration checks");

    MF_LAUNCH(misaligned_ldmatrix_kernel, 1, 32, 0, 0, reinterpret_cast<uint32_t *>(o.p));
    expect_failure("a misaligned ldmatrix row", cudaErrorMisalignedAddress, "not 16-byte aligned");

    // Compute capability 8.0: no clusters, no sm_90 instructions.
    CHECK(mf_emu_set_device(8, 0, 108) == cudaSuccess, "emulate an A100");
    attr.val.clusterDim.x = 2, cfg.gridDim = dim3(2);
    CHECK(cudaLaunchKernelEx(&cfg, empty_kernel, o.p) == cudaErrorInvalidClusterSize, "no clusters on 8.0");
    (void)cudaGetLastError();
    MF_LAUNCH(wgmma_fence_kernel, 1, 32, 0, 0, o.p);
    expect_failure("wgmma on 8.0", cudaErrorIllegalInstruction, "needs compute capability 9.0");
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    CHECK(sms == 108, "SM count %d", sms);
    CHECK(mf_emu_set_device(9, 0, 132) == cudaSuccess, "back to an H100");
}

} // namespace

int main() {
    test_missing_barrier();
    test_collectives();
    test_shared_between_blocks();
    test_async();
    test_wgmma_accumulators();
    test_global_and_config();
    return finish("test_emu_checks");
}
