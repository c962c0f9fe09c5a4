// Internal: what every CUDA source of the backend shares: the backend
// context, macros that turn CUDA / cuBLAS failures into MF_ERR_CUDA, the op
// entries, and device helpers (f32/f16/bf16 loads and stores, 8-element
// vector chunks, warp and block sums).
#ifndef MF_CUDA_COMMON_CUH
#define MF_CUDA_COMMON_CUH

#include <cstdint>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend.h"
#include "core/error.h"
#include "cuda/portable.cuh"
#include "cuda/ptx.cuh"

// ---- the backend context --------------------------------------------------------

// Each op family keeps what it caches per backend (plans, device limits,
// handles, how its last call ran) in one state of its own, made by its first
// use and freed by its mf_cuda_<family>_release at backend teardown.
struct mf_cuda_gemm_state;      // gemm/gemm.cu: the cuBLASLt plan cache and f32 scratch
struct mf_cuda_softmax_state;   // softmax/softmax.cuh: occupancy and device limits, asked once
struct mf_cuda_attention_state; // attention/attention.cuh: the last path, whether the sm_90a kernel runs
struct mf_cuda_moe_state;       // moe/moe.cuh: the cuBLAS handle, the last experts path, whether sm_90a runs

struct mf_cuda_ctx {
    int device;               // ordinal current when the backend was created; ops run there
    int sm_count;             // multiprocessors: caps grids of grid-stride kernels
    int cc_major, cc_minor;   // compute capability
    cudaStream_t stream;      // every op and copy is queued here; NULL = legacy default stream
    cudaEvent_t switch_event; // set_stream: orders the new stream after the old one
    cublasLtHandle_t lt;      // one handle for the backend's lifetime
    void *workspace;          // (workspace_bytes) cuBLASLt scratch, used on `stream`
    size_t workspace_bytes;
    unsigned int *err_count;  // (kMfErrSlots) device: errors only the device sees, since the last sync
    unsigned int *err_host;   // (kMfErrSlots) pinned host: err_count read back at sync
    bool err_pending;         // an op that can count was queued since the last sync (else sync skips the read-back)
    int64_t err_vocab;        // vocab of the last embed, for the sync message
    cudaStream_t capture;     // graph recording: a private stream (capture cannot use the legacy one), or NULL
    cudaStream_t capture_prev;// the stream graph_begin replaced (restored by graph_end)
    bool capturing;           // between graph_begin and graph_end
    bool fatal;               // a queued kernel faulted: the CUDA context is unusable (sync, copy, set_stream refuse)
    // The families' states (NULL until their first use).
    mf_cuda_gemm_state *gemm;
    mf_cuda_softmax_state *softmax;
    mf_cuda_attention_state *attention;
    mf_cuda_moe_state *moe;
};

// Slots of mf_cuda_ctx::err_count: one counter per kind of device-side error.
enum {
    kMfErrEmbed = 0,     // token ids out of range (embed)
    kMfErrAttention = 1, // sequences with bad device lengths / slots (attention)
    kMfErrKvWrite = 2,   // tokens with a bad (slot, pos) (kv_write)
    kMfErrSlots = 4,     // room for more
};

static inline mf_cuda_ctx *mf_cuda_ctx_of(mf_backend *be) { return static_cast<mf_cuda_ctx *>(be->ctx); }

// Blocks per SM that grid-stride kernels launch at most: enough waves to hide
// latency, while a huge row count (int64) never exceeds the grid limit.
constexpr int64_t kMfGridBlocksPerSm = 32;

static inline unsigned mf_cuda_grid(const mf_cuda_ctx *c, int64_t blocks) {
    int64_t cap = (int64_t)c->sm_count * kMfGridBlocksPerSm;
    if (blocks > cap) blocks = cap;
    if (blocks < 1) blocks = 1;
    return (unsigned)blocks;
}

static inline bool mf_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// ---- errors -----------------------------------------------------------------------

// A failing runtime call becomes MF_ERR_CUDA naming the call. The runtime's
// last-error slot is cleared so that it is not blamed on a later launch.
#define MF_CUDA_TRY(call)                                                                           \
    do {                                                                                            \
        cudaError_t mf_cu_e_ = (call);                                                              \
        if (mf_cu_e_ != cudaSuccess) {                                                              \
            (void)cudaGetLastError();                                                               \
            return mf_fail(MF_ERR_CUDA, "cuda: %s failed: %s (%s)", #call, cudaGetErrorString(mf_cu_e_), \
                           cudaGetErrorName(mf_cu_e_));                                             \
        }                                                                                           \
    } while (0)

#define MF_CUBLAS_TRY(call)                                                                         \
    do {                                                                                            \
        cublasStatus_t mf_cb_s_ = (call);                                                           \
        if (mf_cb_s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
            (void)cudaGetLastError();                                                               \
            return mf_fail(MF_ERR_CUDA, "cublasLt: %s failed: %s", #call, cublasLtGetStatusString(mf_cb_s_)); \
        }                                                                                           \
    } while (0)

// After every kernel launch: a bad configuration or a missing kernel image
// shows up here (errors during execution surface at the next sync).
#define MF_CUDA_CHECK_LAUNCH(kernel_name)                                                           \
    do {                                                                                            \
        cudaError_t mf_cu_e_ = cudaGetLastError();                                                  \
        if (mf_cu_e_ != cudaSuccess)                                                                \
            return mf_fail(MF_ERR_CUDA, "cuda: launching %s failed: %s (%s)", kernel_name,          \
                           cudaGetErrorString(mf_cu_e_), cudaGetErrorName(mf_cu_e_));               \
    } while (0)

// ---- op entries (arguments already validated by src/ops/) ----------------------------

extern "C" {
// src/op_list.h's every op (MF_OPS and MF_OPS_OPTIONAL), each in its op
// family's folder: attention/ (attention, kv_write), softmax/, gemm/, moe/
// (router, permute, combine, experts), elementwise/ (add, act, rope, embed,
// copy_tensor: copy.cu, add_norm: norm.cu), select/ (argmax, topk)
#define MF_CUDA_OP(entry, args_t, name) mf_status mf_cuda_##entry(mf_backend *be, const args_t *args);
MF_OPS(MF_CUDA_OP)
MF_OPS_OPTIONAL(MF_CUDA_OP)
#undef MF_CUDA_OP
mf_status mf_cuda_attention_workspace(mf_backend *be, const mf_attention_args *args, size_t *bytes); // attention/attention.cu
bool mf_cuda_moe_experts_capturable(mf_backend *be, const mf_moe_experts_args *args);               // moe/experts.cu
mf_status mf_cuda_graph_begin(mf_backend *be);                         // graph.cu
mf_status mf_cuda_graph_end(mf_backend *be, void **graph);
mf_status mf_cuda_graph_launch(mf_backend *be, void *graph);
void mf_cuda_graph_free(mf_backend *be, void *graph);
// The families' state releases (backend teardown); each sets its pointer to NULL.
void mf_cuda_gemm_release(mf_cuda_ctx *ctx);      // gemm/gemm.cu: plans and scratch (before the cuBLASLt handle goes)
void mf_cuda_softmax_release(mf_cuda_ctx *ctx);   // softmax/softmax.cu
void mf_cuda_attention_release(mf_cuda_ctx *ctx); // attention/attention.cu
void mf_cuda_moe_release(mf_cuda_ctx *ctx);       // moe/experts.cu: the cuBLAS handle
}

// ---- device helpers -------------------------------------------------------------------

// Kernels take dtypes at run time (mf_dtype values: f32, f16, bf16) so that
// one compiled body serves every mix of input and output dtypes; the branch
// is uniform across the grid, so it costs a few instructions, no divergence.

__device__ __forceinline__ float mf_ld(const void *p, int dt, int64_t i) {
    if (dt == MF_DTYPE_F32) return static_cast<const float *>(p)[i];
    if (dt == MF_DTYPE_F16) return __half2float(static_cast<const __half *>(p)[i]);
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
}

__device__ __forceinline__ void mf_st(void *p, int dt, int64_t i, float v) {
    if (dt == MF_DTYPE_F32)
        static_cast<float *>(p)[i] = v;
    else if (dt == MF_DTYPE_F16)
        static_cast<__half *>(p)[i] = __float2half_rn(v);
    else
        static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
}

// The RoPE rotation of pair (x0, x1) by (cos c, sin s): y0 = x0 c - x1 s,
// y1 = x1 c + x0 s, each product and sum rounded on its own (no FMA
// contraction, as the CPU computes it), so that mf_rope and mf_kv_write give
// the same bits however ptxas would have fused them.
__device__ __forceinline__ void mf_rotate(float x0, float x1, float c, float s, float *y0, float *y1) {
    *y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    *y1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

// Vector chunks: 8 consecutive elements = one 16-byte access for f16/bf16,
// two for f32. The caller guarantees that element i is a multiple of 8 and
// that p + i is 16-byte aligned.
constexpr int kMfVec = 8;

// Two 16-bit values packed in a 32-bit word (element 2j in the low half),
// unpacked and packed with bit operations so that everything stays in registers.
__device__ __forceinline__ float2 mf_unpack2(uint32_t w, int dt) {
    if (dt == MF_DTYPE_F16)
        return make_float2(__half2float(__ushort_as_half((unsigned short)(w & 0xffffu))),
                           __half2float(__ushort_as_half((unsigned short)(w >> 16))));
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u)); // bf16: exact
}

__device__ __forceinline__ uint32_t mf_pack2(float a, float b, int dt) {
    uint32_t lo, hi;
    if (dt == MF_DTYPE_F16) {
        lo = __half_as_ushort(__float2half_rn(a)), hi = __half_as_ushort(__float2half_rn(b));
    } else {
        lo = __bfloat16_as_ushort(__float2bfloat16_rn(a)), hi = __bfloat16_as_ushort(__float2bfloat16_rn(b));
    }
    return lo | (hi << 16);
}

__device__ __forceinline__ void mf_ld8(const void *p, int dt, int64_t i, float (&v)[kMfVec]) {
    if (dt == MF_DTYPE_F32) {
        const float4 *q = reinterpret_cast<const float4 *>(static_cast<const float *>(p) + i);
        const float4 lo = q[0], hi = q[1];
        v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
        v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
        return;
    }
    const uint4 u = *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(p) + i);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 f = mf_unpack2(w[j], dt);
        v[2 * j] = f.x, v[2 * j + 1] = f.y;
    }
}

__device__ __forceinline__ void mf_st8(void *p, int dt, int64_t i, const float (&v)[kMfVec]) {
    if (dt == MF_DTYPE_F32) {
        float4 *q = reinterpret_cast<float4 *>(static_cast<float *>(p) + i);
        q[0] = make_float4(v[0], v[1], v[2], v[3]);
        q[1] = make_float4(v[4], v[5], v[6], v[7]);
        return;
    }
    const uint4 u = make_uint4(mf_pack2(v[0], v[1], dt), mf_pack2(v[2], v[3], dt), mf_pack2(v[4], v[5], dt),
                               mf_pack2(v[6], v[7], dt));
    *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(p) + i) = u;
}

__device__ __forceinline__ float mf_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block (blockDim.x a multiple of 32); every thread gets the
// total. red: 32 floats of shared memory. Safe to call back to back: the
// first barrier waits until the previous call's readers are done with red.
__device__ __forceinline__ float mf_block_sum(float v, float *red) {
    v = mf_warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < nwarps ? red[lane] : 0.0f;
    return mf_warp_sum(v);
}

#endif // MF_CUDA_COMMON_CUH
