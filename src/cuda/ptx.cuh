// Internal: every inline-PTX operation of the CUDA kernels, one function
// each, with two bodies: the device body (the PTX, as the kernels had it
// inline) and the emulated body (src/cuda/emu/, -DMF_CUDA_EMU), written from
// the PTX ISA. Kernel source calls these and contains no asm of its own.
//
// Under the emulator `asm` is defined to an undeclared name, so inline PTX
// anywhere else (an op added without an emulated body) fails to build.
//
// Shared-memory operands are 32-bit shared addresses (ptx::smem_u32 of a
// generic pointer), as PTX takes them. Ops that exist only in an sm_90a
// device pass (mbarrier waits with tx-counts, TMA, wgmma, setmaxnreg) are
// declared where MF_PTX_SM90 is 1: nvcc's sm_90a pass and the emulator
// (which checks at run time that the emulated device is compute capability 9.0).
#ifndef MF_CUDA_PTX_CUH
#define MF_CUDA_PTX_CUH

#include <cstdint>
#include <type_traits>

#include <cuda.h> // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#if defined(MF_CUDA_EMU) || (defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL))
#define MF_PTX_SM90 1
#else
#define MF_PTX_SM90 0
#endif

// The caller's source location, for the emulator's reports (nothing under
// nvcc). A helper that wraps ops declares MF_PTX_LOC (MF_PTX_LOC1 as its only
// parameter) too and passes it on with MF_PTX_AT (MF_PTX_AT1), so that a
// report names the line that called the helper.
#ifdef MF_CUDA_EMU
#define MF_PTX_LOC , ::mf_emu::Loc loc = ::mf_emu::Loc::here()
#define MF_PTX_LOC1 ::mf_emu::Loc loc = ::mf_emu::Loc::here()
#define MF_PTX_AT , loc
#define MF_PTX_AT1 loc
#ifdef MF_EMU_TSAN
// ThreadSanitizer sees accesses made in the kernel thread's own code; the
// emulator's own (in src/cuda/emu/) are not instrumented.
// (8-byte accesses: TSan keeps a few accesses per 8-byte shadow cell, and byte-wise ones get lost.)
#define MF_PTX_TOUCH_READ(p, n)                                                                               \
    do {                                                                                                      \
        const volatile uint64_t *mf_t_ = static_cast<const volatile uint64_t *>(p);                          \
        for (size_t mf_i_ = 0; mf_i_ < (size_t)(n) / 8; mf_i_++) (void)mf_t_[mf_i_];                        \
    } while (0)
#define MF_PTX_TOUCH_WRITE(p, n)                                                                              \
    do {                                                                                                      \
        volatile uint64_t *mf_t_ = static_cast<volatile uint64_t *>(p);                                       \
        for (size_t mf_i_ = 0; mf_i_ < (size_t)(n) / 8; mf_i_++) mf_t_[mf_i_] = ~(uint64_t)0;               \
    } while (0)
#else
#define MF_PTX_TOUCH_READ(p, n) ((void)0)
#define MF_PTX_TOUCH_WRITE(p, n) ((void)0)
#endif
#else
#define MF_PTX_LOC
#define MF_PTX_LOC1
#define MF_PTX_AT
#define MF_PTX_AT1
#endif

namespace ptx {

// ---- addresses ------------------------------------------------------------------------------------

// The 32-bit shared-memory address of a generic pointer into this block's shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void *p MF_PTX_LOC) {
#ifdef MF_CUDA_EMU
    return ::mf_emu::cvta_shared(p, loc);
#else
    return (uint32_t)__cvta_generic_to_shared(p);
#endif
}

// ---- cp.async (sm_80+) -------------------------------------------------------------------------------

// 16 bytes global -> shared; src_bytes 0 reads nothing and zero-fills the 16 bytes.
__device__ __forceinline__ void cp_async_cg16(uint32_t dst, const void *src, int src_bytes MF_PTX_LOC) {
#ifdef MF_CUDA_EMU
    MF_PTX_TOUCH_WRITE(::mf_emu::smem_at(dst, 16, 16, "cp.async destination", loc), 16);
    ::mf_emu::cp_async(dst, src, 16, src_bytes, loc);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
#endif
}

__device__ __forceinline__ void cp_async_commit(MF_PTX_LOC1) {
#ifdef MF_CUDA_EMU
    ::mf_emu::cp_async_commit(loc);
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most N of this thread's most recent commit groups are in flight.
template <int N> __device__ __forceinline__ void cp_async_wait(MF_PTX_LOC1) {
#ifdef MF_CUDA_EMU
    ::mf_emu::cp_async_wait(N, loc);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Arrives on the mbarrier when every cp.async this thread issued so far has
// landed (.noinc: the arrival counts toward the count it was initialised with).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint32_t bar MF_PTX_LOC) {
#ifdef MF_CUDA_EMU
    ::mf_emu::mbar_arrive_cp_async(bar, true, loc);
#else
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
#endif
}

// ---- ldmatrix, mma.sync (sm_80+) ----------------------------------------------------------------------

// Four 8x8 b16 matrices: lane 8 j + r gives the address of row r of matrix j;
// register j of lane l holds matrix j's row l / 4, columns 2 (l % 4), +1.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr MF_PTX_LOC) {
#ifdef MF_CUDA_EMU
    ::mf_emu::ldmatrix(4, false, r, addr, loc);
    MF_PTX_TOUCH_READ(::mf_emu::smem_at(addr, 16, 16, "ldmatrix", loc), 16);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}

// The same, transposed: register j of lane l holds matrix j's column l / 4, rows 2 (l % 4), +1.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr MF_PTX_LOC) {
#ifdef MF_CUDA_EMU
    ::mf_emu::ldmatrix(4, true, r, addr, loc);
    MF_PTX_TOUCH_READ(::mf_emu::smem_at(addr, 16, 16, "ldmatrix", loc), 16);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}

// c += a (16x16, row) * b (16x8, col), f32 accumulate; fragments (g = lane / 4, t = lane % 4):
// a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..);
// b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g); c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1).
template <bool BF16>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1 MF_PTX_LOC) {
#ifdef MF_CUDA_EMU
    ::mf_emu::mma_m16n8k16(BF16 ? ::mf_emu::kMmaBF16 : ::mf_emu::kMmaF16, c, a, b0, b1, loc);
#else
    if constexpr (BF16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
#endif
}

// ---- math ------------------------------------------------------------------------------------------------

// 2^x, ~2 ulp on the GPU, subnormals flushed; ex2(-inf) = 0. Emulated as
// exp2f with the flushes (within the hardware's error: see the notes).
__device__ __forceinline__ float ex2_approx_ftz(float x) {
#ifdef MF_CUDA_EMU
    if (std::fabs(x) < 1.17549435e-38f) x = 0.0f; // .ftz: a subnormal input is 0
    const float y = exp2f(x);
    return std::fabs(y) < 1.17549435e-38f ? 0.0f : y;
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}

#if MF_PTX_SM90

// ---- mbarriers ---------------------------------------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count MF_PTX_LOC) {
#ifdef MF_CUDA_EMU
    ::mf_emu::mbar_init(bar, count, loc);
#else
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
#endif
}

// The barrier inits visible to the async proxy (TMA) and the cluster.
__device__ __forceinline__ void fence_mbarrier_init(MF_PTX_LOC1) {
#ifdef MF_CUDA_EMU
    ::mf_emu::require_sm90("fence.mbarrier_init", loc); // ordering is not modelled
#else
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// Arrive once and announce `bytes` of TMA data completing on this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes MF_PTX_LOC) {
#ifdef MF_CUDA_EMU
    ::mf_emu::require_sm90("mbarrier.arrive.expect_tx", loc);
    ::mf_emu::mbar_arrive(bar, bytes, loc);
#else
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}

__device__ __forceinline__ void mbarrier_arrive(uint32_t bar MF_PTX_LOC) {
#ifdef MF_CUDA_EMU
    ::mf_emu::mbar_arrive(bar, 0, loc);
#else
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
#endif
}

// Whether the phase of parity `parity` has completed (a fresh barrier counts
// its phase before 0, of parity 1, as completed). The GPU may suspend a while
// and answer false; the emulator suspends the thread until it is true (a
// phase that never completes is reported as a deadlock).
__device__ __forceinline__ bool mbarrier_try_wait_parity(uint32_t bar, uint32_t parity MF_PTX_LOC) {
#ifdef MF_CUDA_EMU
    ::mf_emu::require_sm90("mbarrier.try_wait.parity", loc);
    return ::mf_emu::mbar_try_wait_parity(bar, parity, loc);
#else
    uint32_t done;
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n"
                 "}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return done != 0;
#endif
}

// The global nanosecond timer (a barrier wait's timeout).
__device__ __forceinline__ uint64_t globaltimer() {
#ifdef MF_CUDA_EMU
    return ::mf_emu::globaltimer();
#else
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
#endif
}

// ---- TMA ---------------------------------------------------------------------------------------------------

// Tile loads of the tensor map's box at coordinates (c0, c1[, c2]) into
// shared memory at dst (128-byte aligned); the bytes complete on `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                            uint32_t bar MF_PTX_LOC) {
#ifdef MF_CUDA_EMU
    const int32_t c[2] = {c0, c1};
    ::mf_emu::tma_load(dst, map, 2, c, bar, loc);
#else
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
#endif
}

__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2,
                                            uint32_t bar MF_PTX_LOC) {
#ifdef MF_CUDA_EMU
    const int32_t c[3] = {c0, c1, c2};
    ::mf_emu::tma_load(dst, map, 3, c, bar, loc);
#else
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
                 : "memory");
#endif
}

// Generic-proxy writes to shared memory (cp.async, st.shared) seen by this
// thread become visible to its later async-proxy reads (wgmma operands).
__device__ __forceinline__ void fence_proxy_async_shared_cta(MF_PTX_LOC1) {
#ifdef MF_CUDA_EMU
    ::mf_emu::require_sm90("fence.proxy.async", loc); // proxies are not modelled
#else
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// ---- warpgroup MMA (wgmma) ------------------------------------------------------------------------------------
//
// Accumulators d (64 x N f32) in the wgmma layout: warp w of the warpgroup,
// lane l holds d[4 i + 0, 1] = (row 16 w + l / 4, columns 8 i + 2 (l % 4) + {0, 1})
// and d[4 i + 2, 3] = the same columns of row + 8.

__device__ __forceinline__ void wgmma_fence(MF_PTX_LOC1) {
#ifdef MF_CUDA_EMU
    ::mf_emu::wgmma_fence(loc);
#else
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_commit_group(MF_PTX_LOC1) {
#ifdef MF_CUDA_EMU
    ::mf_emu::wgmma_commit(loc);
#else
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}

template <int N> __device__ __forceinline__ void wgmma_wait_group(MF_PTX_LOC1) {
#ifdef MF_CUDA_EMU
    ::mf_emu::wgmma_wait(N, loc);
#else
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}

// Pins accumulators after a wait_group: the compiler sees them change here,
// so no read of them moves above the wait (they are the wgmma asm's outputs
// as far as it knows). Nothing to do under the emulator.
template <int N> __device__ __forceinline__ void fence_acc(float (&d)[N]) {
#ifdef MF_CUDA_EMU
    (void)d;
#else
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
#endif
}

#ifndef MF_CUDA_EMU
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
#endif

// Both operands in shared memory, both K-major (descriptors da, db):
// d (64 x N) = A (64 x 16) . B (N x 16)^T + (accumulate ? d : 0).
#define MF_WG_SS(n, types, R, ia, ib, ip, ACC)                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" ip ", 0;\n"                                  \
                 "wgmma.mma_async.sync.aligned.m64n" n "k16.f32." types " {" R "}, %" ia ", %" ib \
                 ", p, 1, 1, 0, 0;\n}\n"                                                           \
                 : ACC                                                                             \
                 : "l"(da), "l"(db), "r"(accumulate))
template <int N, typename T>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int accumulate MF_PTX_LOC) {
    constexpr bool bf = std::is_same<T, __nv_bfloat16>::value;
    static_assert(N == 64 || N == 128, "instantiated shapes");
#ifdef MF_CUDA_EMU
    ::mf_emu::wgmma_mma(N, bf ? ::mf_emu::kMmaBF16 : ::mf_emu::kMmaF16, d, nullptr, da, db, accumulate, 1, 1, 0, 0, loc);
#else
    if constexpr (N == 64) {
        if constexpr (bf) MF_WG_SS("64", "bf16.bf16", MF_WG_R32, "32", "33", "34", MF_WG_ACC32(0));
        else MF_WG_SS("64", "f16.f16", MF_WG_R32, "32", "33", "34", MF_WG_ACC32(0));
    } else {
        if constexpr (bf) MF_WG_SS("128", "bf16.bf16", MF_WG_R64, "64", "65", "66", MF_WG_ACC64);
        else MF_WG_SS("128", "f16.f16", MF_WG_R64, "64", "65", "66", MF_WG_ACC64);
    }
#endif
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
__device__ __forceinline__ void wgmma_rs_tb(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db MF_PTX_LOC) {
    constexpr bool bf = std::is_same<T, __nv_bfloat16>::value;
    static_assert(N == 64 || N == 128 || N == 256, "instantiated shapes");
#ifdef MF_CUDA_EMU
    ::mf_emu::wgmma_mma(N, bf ? ::mf_emu::kMmaBF16 : ::mf_emu::kMmaF16, d, a, 0, db, 1, 1, 1, 0, 1, loc);
#else
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
#endif
}
#undef MF_WG_RS

// ---- register reallocation (warpgroup-wide) -------------------------------------------------------------------

// setmaxnreg.dec / .inc to REGS registers per thread (a no-op in emulation,
// which only checks the count and that the whole warp executes it).
template <int REGS> __device__ __forceinline__ void setmaxnreg_dec(MF_PTX_LOC1) {
    static_assert(REGS >= 24 && REGS <= 256 && REGS % 8 == 0, "setmaxnreg: a multiple of 8 in [24, 256]");
#ifdef MF_CUDA_EMU
    ::mf_emu::setmaxnreg(false, REGS, loc);
#else
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
#endif
}

template <int REGS> __device__ __forceinline__ void setmaxnreg_inc(MF_PTX_LOC1) {
    static_assert(REGS >= 24 && REGS <= 256 && REGS % 8 == 0, "setmaxnreg: a multiple of 8 in [24, 256]");
#ifdef MF_CUDA_EMU
    ::mf_emu::setmaxnreg(true, REGS, loc);
#else
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
#endif
}

#endif // MF_PTX_SM90

} // namespace ptx

#ifdef MF_CUDA_EMU
// Inline PTX has no emulated body: this name is undeclared, so such code fails to build here.
#define asm MF_EMU_inline_PTX_without_an_emulated_body__move_it_into_src_cuda_ptx_cuh
#endif

#endif // MF_CUDA_PTX_CUH
