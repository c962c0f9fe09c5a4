// CPU emulator of the CUDA backend (src/cuda/emu/): what a .cu file gets
// from cuda_runtime.h when it is compiled as host C++ (g++ -DMF_CUDA_EMU):
// the runtime API, the execution-space keywords as no-ops, threadIdx & co,
// barriers, warp intrinsics, atomics, math intrinsics, and the runtime's C++
// templates (cudaLaunchKernelEx, cudaFuncSetAttribute, occupancy). Kernels
// are launched with MF_LAUNCH (src/cuda/portable.cuh); inline PTX lives in
// src/cuda/ptx.cuh. Plain C includes only cuda_runtime_api.h.
#ifndef MF_EMU_CUDA_RUNTIME_H
#define MF_EMU_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <math.h> // isnan / isinf / isfinite at global scope, as device code has them
#include <type_traits>

#include "../emu.h"

// ---- execution spaces and qualifiers ------------------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __restrict__ __restrict
// Static shared memory must go through MF_SHARED (src/cuda/portable.cuh), which gives each block its own.
#define __shared__ _Pragma("GCC error \"__shared__ under the emulator: declare it with MF_SHARED / MF_DYN_SHARED (src/cuda/portable.cuh)\"")

// The running kernel thread's coordinates: per OS thread, rewritten at every
// switch between kernel threads (fibers), so plain reads cost nothing extra.
// (__thread, not thread_local: no dynamic-initialisation wrapper per access.)
extern __thread uint3 threadIdx __attribute__((tls_model("initial-exec")));
extern __thread uint3 blockIdx __attribute__((tls_model("initial-exec")));
extern __thread dim3 blockDim __attribute__((tls_model("initial-exec")));
extern __thread dim3 gridDim __attribute__((tls_model("initial-exec")));
static constexpr int warpSize = 32;

// ---- barriers and warp intrinsics ---------------------------------------------------------------

inline void __syncthreads(::mf_emu::Loc loc = ::mf_emu::Loc::here()) { ::mf_emu::syncthreads(loc); }
inline void __syncwarp(unsigned mask = 0xffffffffu, ::mf_emu::Loc loc = ::mf_emu::Loc::here()) {
    ::mf_emu::syncwarp(mask, loc);
}

namespace mf_emu {
template <class T> inline uint64_t to_bits(const T &v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp shuffle of a type over 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <class T> inline T from_bits(uint64_t u) {
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}
} // namespace mf_emu

template <class T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32, ::mf_emu::Loc loc = ::mf_emu::Loc::here()) {
    return ::mf_emu::from_bits<T>(::mf_emu::shfl(::mf_emu::kShflIdx, mask, ::mf_emu::to_bits(var), src_lane, width, loc));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32, ::mf_emu::Loc loc = ::mf_emu::Loc::here()) {
    return ::mf_emu::from_bits<T>(::mf_emu::shfl(::mf_emu::kShflUp, mask, ::mf_emu::to_bits(var), (int)delta, width, loc));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,
                          ::mf_emu::Loc loc = ::mf_emu::Loc::here()) {
    return ::mf_emu::from_bits<T>(::mf_emu::shfl(::mf_emu::kShflDown, mask, ::mf_emu::to_bits(var), (int)delta, width, loc));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32, ::mf_emu::Loc loc = ::mf_emu::Loc::here()) {
    return ::mf_emu::from_bits<T>(::mf_emu::shfl(::mf_emu::kShflXor, mask, ::mf_emu::to_bits(var), lane_mask, width, loc));
}
inline unsigned __ballot_sync(unsigned mask, int pred, ::mf_emu::Loc loc = ::mf_emu::Loc::here()) {
    return ::mf_emu::vote(::mf_emu::kVoteBallot, mask, pred, loc);
}
inline int __any_sync(unsigned mask, int pred, ::mf_emu::Loc loc = ::mf_emu::Loc::here()) {
    return (int)::mf_emu::vote(::mf_emu::kVoteAny, mask, pred, loc);
}
inline int __all_sync(unsigned mask, int pred, ::mf_emu::Loc loc = ::mf_emu::Loc::here()) {
    return (int)::mf_emu::vote(::mf_emu::kVoteAll, mask, pred, loc);
}
template <class T> inline unsigned __match_any_sync(unsigned mask, T value, ::mf_emu::Loc loc = ::mf_emu::Loc::here()) {
    return ::mf_emu::match_any(mask, ::mf_emu::to_bits(value), loc);
}

[[noreturn]] inline void __trap(::mf_emu::Loc loc = ::mf_emu::Loc::here()) {
    ::mf_emu::kernel_fail(loc, cudaErrorLaunchFailure, "__trap()");
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline long long clock64() { return (long long)::mf_emu::globaltimer(); }
inline void __nanosleep(unsigned) {}
inline size_t __cvta_generic_to_shared(const void *p, ::mf_emu::Loc loc = ::mf_emu::Loc::here()) {
    return ::mf_emu::cvta_shared(p, loc);
}

// ---- atomics (real atomics: blocks may run on several OS threads) --------------------------------

#define MF_EMU_ATOMIC_INT(T)                                                                                 \
    inline T atomicAdd(T *a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }                     \
    inline T atomicSub(T *a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }                     \
    inline T atomicExch(T *a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }                   \
    inline T atomicAnd(T *a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); }                     \
    inline T atomicOr(T *a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }                       \
    inline T atomicXor(T *a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); }                     \
    inline T atomicCAS(T *a, T cmp, T v) {                                                                   \
        __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);                  \
        return cmp;                                                                                          \
    }                                                                                                        \
    inline T atomicMin(T *a, T v) {                                                                          \
        T o = __atomic_load_n(a, __ATOMIC_RELAXED);                                                          \
        while (v < o && !__atomic_compare_exchange_n(a, &o, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {  \
        }                                                                                                    \
        return o;                                                                                            \
    }                                                                                                        \
    inline T atomicMax(T *a, T v) {                                                                          \
        T o = __atomic_load_n(a, __ATOMIC_RELAXED);                                                          \
        while (v > o && !__atomic_compare_exchange_n(a, &o, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {  \
        }                                                                                                    \
        return o;                                                                                            \
    }
MF_EMU_ATOMIC_INT(int)
MF_EMU_ATOMIC_INT(unsigned int)
MF_EMU_ATOMIC_INT(long long)
MF_EMU_ATOMIC_INT(unsigned long long)
#undef MF_EMU_ATOMIC_INT

#define MF_EMU_ATOMIC_FLOAT(T, U)                                                                            \
    inline T atomicAdd(T *a, T v) {                                                                          \
        U *u = reinterpret_cast<U *>(a);                                                                     \
        U o = __atomic_load_n(u, __ATOMIC_RELAXED), n;                                                       \
        do {                                                                                                 \
            T f;                                                                                             \
            memcpy(&f, &o, sizeof f);                                                                        \
            f += v;                                                                                          \
            memcpy(&n, &f, sizeof n);                                                                        \
        } while (!__atomic_compare_exchange_n(u, &o, n, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));          \
        T r;                                                                                                 \
        memcpy(&r, &o, sizeof r);                                                                            \
        return r;                                                                                            \
    }                                                                                                        \
    inline T atomicExch(T *a, T v) {                                                                         \
        U n, o;                                                                                              \
        memcpy(&n, &v, sizeof n);                                                                            \
        o = __atomic_exchange_n(reinterpret_cast<U *>(a), n, __ATOMIC_RELAXED);                              \
        T r;                                                                                                 \
        memcpy(&r, &o, sizeof r);                                                                            \
        return r;                                                                                            \
    }
MF_EMU_ATOMIC_FLOAT(float, uint32_t)
MF_EMU_ATOMIC_FLOAT(double, uint64_t)
#undef MF_EMU_ATOMIC_FLOAT
inline unsigned atomicInc(unsigned *a, unsigned lim) {
    unsigned o = __atomic_load_n(a, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(a, &o, o >= lim ? 0u : o + 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return o;
}

// ---- integer and bit intrinsics ----------------------------------------------------------------------

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline unsigned __brev(unsigned x) {
    x = (x >> 1 & 0x55555555u) | (x & 0x55555555u) << 1;
    x = (x >> 2 & 0x33333333u) | (x & 0x33333333u) << 2;
    x = (x >> 4 & 0x0f0f0f0fu) | (x & 0x0f0f0f0fu) << 4;
    return __builtin_bswap32(x);
}
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}

inline float __uint_as_float(unsigned u) { return ::mf_emu::from_bits<float>(u); }
inline float __int_as_float(int i) { return ::mf_emu::from_bits<float>((uint32_t)i); }
inline unsigned __float_as_uint(float f) { return (unsigned)::mf_emu::to_bits(f); }
inline int __float_as_int(float f) { return (int)(uint32_t)::mf_emu::to_bits(f); }
inline double __longlong_as_double(long long i) { return ::mf_emu::from_bits<double>((uint64_t)i); }
inline long long __double_as_longlong(double d) { return (long long)::mf_emu::to_bits(d); }

// ---- float intrinsics --------------------------------------------------------------------------------
// The _rn forms are what IEEE f32 gives on the CPU (-ffp-contract=off: no
// fused multiply-add behind the kernel's back). The approximate ones are
// computed precisely: the hardware's are within a few ulp (see the notes).

inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float a) { return a != a ? 0.0f : a < 0.0f ? 0.0f : a > 1.0f ? 1.0f : a; }
inline float __expf(float x) { return exp2f(x * 1.44269504088896341f); } // ex2.approx(x * log2 e)
inline float __exp10f(float x) { return exp2f(x * 3.32192809488736235f); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float *s, float *c) { sincosf(x, s, c); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }

// min / max over mixed arithmetic types, as CUDA's device overloads (floats as fminf / fmaxf).
template <class A, class B, std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value, int> = 0>
inline std::common_type_t<A, B> min(A a, B b) {
    using C = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point<C>::value) return std::fmin((C)a, (C)b);
    else return (C)a < (C)b ? (C)a : (C)b;
}
template <class A, class B, std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value, int> = 0>
inline std::common_type_t<A, B> max(A a, B b) {
    using C = std::common_type_t<A, B>;
    if constexpr (std::is_floating_point<C>::value) return std::fmax((C)a, (C)b);
    else return (C)a > (C)b ? (C)a : (C)b;
}

// ---- cached / streaming loads and stores: plain accesses -------------------------------------------

template <class T> inline T __ldg(const T *p) { return *p; }
template <class T> inline T __ldcg(const T *p) { return *p; }
template <class T> inline T __ldca(const T *p) { return *p; }
template <class T> inline T __ldcs(const T *p) { return *p; }
template <class T> inline T __ldlu(const T *p) { return *p; }
template <class T> inline T __ldcv(const T *p) { return *p; }
template <class T> inline void __stcg(T *p, T v) { *p = v; }
template <class T> inline void __stcs(T *p, T v) { *p = v; }
template <class T> inline void __stwb(T *p, T v) { *p = v; }
template <class T> inline void __stwt(T *p, T v) { *p = v; }

// ---- the runtime's C++ templates -----------------------------------------------------------------------

template <class T> inline cudaError_t cudaMalloc(T **ptr, size_t size) {
    return ::cudaMalloc(reinterpret_cast<void **>(ptr), size);
}

template <class T> inline cudaError_t cudaFuncSetAttribute(T *entry, cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute(reinterpret_cast<const void *>(entry), attr, value);
}
template <class T> inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attr, T *entry) {
    return ::cudaFuncGetAttributes(attr, reinterpret_cast<const void *>(entry));
}
template <class T>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, T func, int block_size, size_t smem) {
    return ::cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, reinterpret_cast<const void *>(func), block_size, smem);
}
template <class T> inline cudaError_t cudaOccupancyMaxActiveClusters(int *n, T *func, const cudaLaunchConfig_t *cfg) {
    return ::cudaOccupancyMaxActiveClusters(n, reinterpret_cast<const void *>(func), cfg);
}
template <class... P, class... A>
inline cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *cfg, void (*kernel)(P...), A &&...args) {
    if (!cfg) return cudaErrorInvalidValue;
    dim3 cluster(1, 1, 1);
    for (unsigned i = 0; i < cfg->numAttrs; i++)
        if (cfg->attrs[i].id == cudaLaunchAttributeClusterDimension)
            cluster = dim3(cfg->attrs[i].val.clusterDim.x, cfg->attrs[i].val.clusterDim.y, cfg->attrs[i].val.clusterDim.z);
    ::mf_emu::LaunchConfig c{reinterpret_cast<const void *>(kernel), "(cudaLaunchKernelEx)", ::mf_emu::Loc::here(),
                             cfg->gridDim, cfg->blockDim, cluster, cfg->dynamicSmemBytes, cfg->stream};
    return ::mf_emu::enqueue_launch(c, std::make_shared<::mf_emu::KernelCall<P...>>(kernel, std::forward<A>(args)...));
}

#endif // __cplusplus

#endif // MF_EMU_CUDA_RUNTIME_H
