// Internal: the Hopper (sm_90a) building blocks our wgmma kernels share
// (moe_gemm.cu, attn_prefill_sm90.cu): mbarriers, TMA and cp.async loads,
// shared-memory matrix descriptors and warpgroup MMAs (wgmma). They exist
// only in an sm_90a device pass and under the emulator (MF_SM90A_DEVICE); the
// kernels that use them compile to a trap elsewhere and are never launched
// there. The PTX itself is in src/cuda/ptx.cuh; the helpers pass their
// caller's source location on, so that the emulator's reports name the kernel line.
#ifndef MF_CUDA_SM90_CUH
#define MF_CUDA_SM90_CUH

#include <cuda.h> // CUtensorMap

#include "cuda/common.cuh"

#if (defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)) || defined(MF_CUDA_EMU)
#define MF_SM90A_DEVICE 1
#endif

#ifdef MF_SM90A_DEVICE
namespace sm90 {

__device__ __forceinline__ uint32_t smem_u32(const void *p MF_PTX_LOC) { return ptx::smem_u32(p MF_PTX_AT); }

// ---- mbarriers ---------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count MF_PTX_LOC) {
    ptx::mbarrier_init(smem_u32(bar MF_PTX_AT), count MF_PTX_AT);
}

// Arrive once and announce `bytes` of TMA data completing on this phase.
__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes MF_PTX_LOC) {
    ptx::mbarrier_arrive_expect_tx(smem_u32(bar MF_PTX_AT), bytes MF_PTX_AT);
}

__device__ __forceinline__ void mbar_arrive(uint64_t *bar MF_PTX_LOC) {
    ptx::mbarrier_arrive(smem_u32(bar MF_PTX_AT) MF_PTX_AT);
}

// Arrive when every cp.async this thread issued so far has landed (.noinc:
// the arrival counts toward the count the barrier was initialised with).
__device__ __forceinline__ void mbar_arrive_cp_async(uint64_t *bar MF_PTX_LOC) {
    ptx::cp_async_mbarrier_arrive_noinc(smem_u32(bar MF_PTX_AT) MF_PTX_AT);
}

// Whether the phase of parity `parity` has completed (a fresh barrier counts
// its phase before 0, of parity 1, as completed); may suspend a while first.
__device__ __forceinline__ bool mbar_try(uint64_t *bar, uint32_t parity MF_PTX_LOC) {
    return ptx::mbarrier_try_wait_parity(smem_u32(bar MF_PTX_AT), parity MF_PTX_AT);
}

// Wait for that phase. A wait of over 10 s can only be a protocol bug (a
// stage takes microseconds): trap, so the launch fails with an error instead
// of hanging the process. (The emulator's try_wait returns only once the
// phase completed, or reports the deadlock.)
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity MF_PTX_LOC) {
    if (mbar_try(bar, parity MF_PTX_AT)) return;
    const uint64_t t0 = ptx::globaltimer();
    for (uint32_t n = 1;; n++) {
        if (mbar_try(bar, parity MF_PTX_AT)) return;
        if ((n & 1023) == 0 && ptx::globaltimer() - t0 > 10000000000ull) __trap();
    }
}

// ---- loads ---------------------------------------------------------------------------

__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, int c0, int c1, uint64_t *bar MF_PTX_LOC) {
    ptx::tma_load_2d(smem_u32(dst MF_PTX_AT), map, c0, c1, smem_u32(bar MF_PTX_AT) MF_PTX_AT);
}

__device__ __forceinline__ void tma_load_3d(void *dst, const CUtensorMap *map, int c0, int c1, int c2,
                                            uint64_t *bar MF_PTX_LOC) {
    ptx::tma_load_3d(smem_u32(dst MF_PTX_AT), map, c0, c1, c2, smem_u32(bar MF_PTX_AT) MF_PTX_AT);
}

// 16 bytes global -> shared; pred false reads nothing and zero-fills them.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool pred MF_PTX_LOC) {
    ptx::cp_async_cg16(dst, src, pred ? 16 : 0 MF_PTX_AT);
}

// Generic-proxy writes to shared memory (cp.async, st.shared) seen by this
// thread become visible to its later async-proxy reads (wgmma operands).
__device__ __forceinline__ void fence_proxy_async(MF_PTX_LOC1) { ptx::fence_proxy_async_shared_cta(MF_PTX_AT1); }

// ---- shared-memory matrix descriptors (128-byte swizzle) ---------------------------
//
// Both describe tiles stored as 64-element (128-byte) rows in 1024-byte
// aligned blocks of 8 rows, 16-byte chunk c of row r at chunk c ^ (r & 7)
// (what TMA's SWIZZLE_128B writes; the swizzle applies to the final address).

// K-major (the K dimension contiguous in a row): start address / 16, leading
// byte offset 16 (unused by this layout), 1024 bytes between 8-row groups.
// A K step of 16 elements inside the 64-wide row is +32 bytes on the start.
__device__ __forceinline__ uint64_t desc_k(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

// MN-major (the M / N dimension contiguous in a row, K down the rows; the
// B operand with imm-trans-b = 1): 64 N elements per row, `lbo` bytes to the
// next 64 N elements, 1024 bytes between groups of 8 K rows. A K step of 16
// rows is +2048 bytes on the start.
__device__ __forceinline__ uint64_t desc_mn(uint32_t addr, uint32_t lbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
           ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

// ---- swizzled panels ------------------------------------------------------------------------
//
// A (R rows x D) tile of 16-bit elements as D / 64 panels of R 128-byte rows,
// the layout both descriptors above read (the tile 1024-byte aligned, R a
// multiple of 8): byte offset of 16-byte chunk ch (of D / 8) of row `row`.
template <int R> __device__ __forceinline__ uint32_t panel_off(int row, int ch) {
    return (uint32_t)((ch >> 3) * R * 128 + row * 128 + (((ch & 7) ^ (row & 7)) << 4));
}

// Rows [r0, r0 + R) of a (rows, D) 16-bit view with row stride `stride`
// elements into the panels at shared address dst, by kThreads threads with
// cp.async; rows at or past `lim` become zeros (nothing is read for them).
// `rows(j)`: the element offset of row j from g (e.g. j * stride, or a
// paged cache's block-table lookup); the stride overload is the plain case.
template <int D, int R, int kThreads, typename Rows>
__device__ __forceinline__ void cp_async_panels(uint32_t dst, const uint16_t *g, const Rows &rows, int r0, int lim) {
    constexpr int kChunks = D / 8;
    static_assert((R * kChunks) % kThreads == 0, "even cp.async shares");
#pragma unroll
    for (int i = 0; i < R * kChunks / kThreads; i++) {
        const int c = threadIdx.x + i * kThreads, row = c / kChunks, ch = c % kChunks;
        const bool ok = r0 + row < lim;
        cp_async16(dst + panel_off<R>(row, ch), ok ? g + rows(r0 + row) + ch * 8 : g, ok);
    }
}
struct StrideRows {
    int64_t stride;
    __device__ __forceinline__ int64_t operator()(int j) const { return (int64_t)j * stride; }
};
template <int D, int R, int kThreads>
__device__ __forceinline__ void cp_async_panels(uint32_t dst, const uint16_t *g, int64_t stride, int r0, int lim) {
    cp_async_panels<D, R, kThreads>(dst, g, StrideRows{stride}, r0, lim);
}

// ---- warpgroup MMAs -------------------------------------------------------------------
//
// Accumulators d (64 x N f32) in the wgmma layout: warp w of the warpgroup,
// lane l holds d[4 i + 0, 1] = (row 16 w + l / 4, columns 8 i + 2 (l % 4) + {0, 1})
// and d[4 i + 2, 3] = the same columns of row + 8.

__device__ __forceinline__ void wgmma_fence(MF_PTX_LOC1) { ptx::wgmma_fence(MF_PTX_AT1); }
__device__ __forceinline__ void wgmma_commit(MF_PTX_LOC1) { ptx::wgmma_commit_group(MF_PTX_AT1); }
template <int N> __device__ __forceinline__ void wgmma_wait(MF_PTX_LOC1) { ptx::wgmma_wait_group<N>(MF_PTX_AT1); }

// Pins accumulators after a wait_group: the compiler sees them change here,
// so no read of them moves above the wait (they are the wgmma asm's outputs
// as far as it knows).
template <int N> __device__ __forceinline__ void fence_acc(float (&d)[N]) { ptx::fence_acc(d); }

// Both operands in shared memory, both K-major:
// d (64 x N) = A (64 x 16) . B (N x 16)^T + (accumulate ? d : 0).
template <int N, typename T>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int accumulate MF_PTX_LOC) {
    ptx::wgmma_ss<N, T>(d, da, db, accumulate MF_PTX_AT);
}

// A from registers (the 64 x 16 A fragment: a[0] = (row, k 2 (l % 4) + {0, 1}),
// a[1] = row + 8, a[2] = k + 8, a[3] = both, rows as in the accumulator
// layout), B in shared memory MN-major (imm-trans-b = 1):
// d (64 x N) += A (64 x 16) . B (16 x N).
template <int N, typename T>
__device__ __forceinline__ void wgmma_rs_tb(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db MF_PTX_LOC) {
    ptx::wgmma_rs_tb<N, T>(d, a, db MF_PTX_AT);
}

} // namespace sm90
#endif // MF_SM90A_DEVICE

#endif // MF_CUDA_SM90_CUH
