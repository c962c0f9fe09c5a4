// Internal: the Hopper (sm_90a) building blocks our wgmma kernels share
// (moe_gemm.cu, attn_prefill_sm90.cu): mbarriers, TMA and cp.async loads,
// shared-memory matrix descriptors and warpgroup MMAs (wgmma). They exist
// only in an sm_90a device pass (MF_SM90A_DEVICE); the kernels that use them
// compile to a trap elsewhere and are never launched there.
#ifndef MF_CUDA_SM90_CUH
#define MF_CUDA_SM90_CUH

#include <type_traits>

#include <cuda.h> // CUtensorMap

#include "cuda/common.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MF_SM90A_DEVICE 1
#endif

#ifdef MF_SM90A_DEVICE
namespace sm90 {

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// ---- mbarriers ---------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
}

// Arrive once and announce `bytes` of TMA data completing on this phase.
__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// Arrive when every cp.async this thread issued so far has landed (.noinc:
// the arrival counts toward the count the barrier was initialised with).
__device__ __forceinline__ void mbar_arrive_cp_async(uint64_t *bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// Whether the phase of parity `parity` has completed (a fresh barrier counts
// its phase before 0, of parity 1, as completed); may suspend a while first.
__device__ __forceinline__ bool mbar_try(uint64_t *bar, uint32_t parity) {
    uint32_t done;
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n"
                 "}\n"
                 : "=r"(done)
                 : "r"(smem_u32(bar)), "r"(parity)
                 : "memory");
    return done != 0;
}

// Wait for that phase. A wait of over 10 s can only be a protocol bug (a
// stage takes microseconds): trap, so the launch fails with an error instead
// of hanging the process.
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    if (mbar_try(bar, parity)) return;
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (uint32_t n = 1;; n++) {
        if (mbar_try(bar, parity)) return;
        if ((n & 1023) == 0) {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
            if (t - t0 > 10000000000ull) __trap();
        }
    }
}

// ---- loads ---------------------------------------------------------------------------

__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, int c0, int c1, uint64_t *bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_u32(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar))
                 : "memory");
}

__device__ __forceinline__ void tma_load_3d(void *dst, const CUtensorMap *map, int c0, int c1, int c2, uint64_t *bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(smem_u32(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar))
                 : "memory");
}

// 16 bytes global -> shared; pred false reads nothing and zero-fills them.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool pred) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(pred ? 16 : 0) : "memory");
}

// Generic-proxy writes to shared memory (cp.async, st.shared) seen by this
// thread become visible to its later async-proxy reads (wgmma operands).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

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

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Pins accumulators after a wait_group: the compiler sees them change here,
// so no read of them moves above the wait (they are the wgmma asm's outputs
// as far as it knows).
template <int N> __device__ __forceinline__ void fence_acc(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

#define MF_WG_R32                                                                      \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "           \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define MF_WG_R64                                                                      \
    MF_WG_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
              "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MF_WG_R128                                                                                   \
    MF_WG_R64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "   \
              "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "     \
              "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
              "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define MF_WG_ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                      "+f"(d[i + 6]), "+f"(d[i + 7])
#define MF_WG_ACC32(i) MF_WG_ACC8(i), MF_WG_ACC8(i + 8), MF_WG_ACC8(i + 16), MF_WG_ACC8(i + 24)
#define MF_WG_ACC64 MF_WG_ACC32(0), MF_WG_ACC32(32)
#define MF_WG_ACC128 MF_WG_ACC64, MF_WG_ACC32(64), MF_WG_ACC32(96)

// Both operands in shared memory, both K-major:
// d (64 x N) = A (64 x 16) . B (N x 16)^T + (accumulate ? d : 0).
#define MF_WG_SS(n, types, R, ia, ib, ip, ACC)                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" ip ", 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n" n "k16.f32." types " {" R "}, %" ia ", %" ib \
                 ", p, 1, 1, 0, 0;\n}\n"                                                           \
                 : ACC                                                                             \
                 : "l"(da), "l"(db), "r"(accumulate))
template <int N, typename T>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int accumulate) {
    constexpr bool bf = std::is_same<T, __nv_bfloat16>::value;
    static_assert(N == 64 || N == 128, "instantiated shapes");
    if constexpr (N == 64) {
        if constexpr (bf) MF_WG_SS("64", "bf16.bf16", MF_WG_R32, "32", "33", "34", MF_WG_ACC32(0));
        else MF_WG_SS("64", "f16.f16", MF_WG_R32, "32", "33", "34", MF_WG_ACC32(0));
    } else {
        if constexpr (bf) MF_WG_SS("128", "bf16.bf16", MF_WG_R64, "64", "65", "66", MF_WG_ACC64);
        else MF_WG_SS("128", "f16.f16", MF_WG_R64, "64", "65", "66", MF_WG_ACC64);
    }
}
#undef MF_WG_SS

// A from registers (the 64 x 16 A fragment: a[0] = (row, k 2 (l % 4) + {0, 1}),
// a[1] = row + 8, a[2] = k + 8, a[3] = both, rows as in the accumulator
// layout), B in shared memory MN-major (imm-trans-b = 1):
// d (64 x N) += A (64 x 16) . B (16 x N).
#define MF_WG_RS(n, types, R, A, B, ACC)                                                          \
    asm volatile("wgmma.mma_async.sync.aligned.m64n" n "k16.f32." types " {" R "}, {" A "}, " B \
                 ", 1, 1, 1, 1;\n"                                                                  \
                 : ACC                                                                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db))
template <int N, typename T>
__device__ __forceinline__ void wgmma_rs_tb(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db) {
    constexpr bool bf = std::is_same<T, __nv_bfloat16>::value;
    static_assert(N == 64 || N == 128 || N == 256, "instantiated shapes");
    if constexpr (N == 64) {
        if constexpr (bf) MF_WG_RS("64", "bf16.bf16", MF_WG_R32, "%32, %33, %34, %35", "%36", MF_WG_ACC32(0));
        else MF_WG_RS("64", "f16.f16", MF_WG_R32, "%32, %33, %34, %35", "%36", MF_WG_ACC32(0));
    } else if constexpr (N == 128) {
        if constexpr (bf) MF_WG_RS("128", "bf16.bf16", MF_WG_R64, "%64, %65, %66, %67", "%68", MF_WG_ACC64);
        else MF_WG_RS("128", "f16.f16", MF_WG_R64, "%64, %65, %66, %67", "%68", MF_WG_ACC64);
    } else {
        if constexpr (bf) MF_WG_RS("256", "bf16.bf16", MF_WG_R128, "%128, %129, %130, %131", "%132", MF_WG_ACC128);
        else MF_WG_RS("256", "f16.f16", MF_WG_R128, "%128, %129, %130, %131", "%132", MF_WG_ACC128);
    }
}
#undef MF_WG_RS

} // namespace sm90
#endif // MF_SM90A_DEVICE

#endif // MF_CUDA_SM90_CUH
