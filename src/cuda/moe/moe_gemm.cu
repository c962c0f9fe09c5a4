// The MoE expert FFNs as two grouped GEMMs of our own for sm_90a: every
// expert's rows in one persistent launch per GEMM, tensor cores through
// wgmma, tiles brought in by TMA, the experts' row ranges read from the
// device offsets (no host read-back, so the layer can be captured in a graph).
// UNVERIFIED on a GPU (compile-checked for sm_90a and sm_80).
//
//   GEMM 1: h[r, :I] = silu(x_r . W1_e[j]) * (x_r . W1_e[I + j])   (SwiGLU), or
//           h[r, :I] = gelu_tanh(x_r . W1_e[j])                      (GELU)
//   GEMM 2: y[r, :]  = h[r, :I] . W2_e^T
// for every row r of expert e, r in [offsets[e], offsets[e+1]) clamped to
// [0, N]. Operands are torch Linear weights (K contiguous) and row-major
// activations (K contiguous): both wgmma operands are K-major, the case
// wgmma reads straight from 128-byte swizzled shared memory.
//
// Design (one block per SM, 384 threads):
//   - tiles of 128 rows x 256 accumulator columns; a tile never spans two
//     experts, so an expert with m rows costs ceil(m / 128) row tiles (the
//     rows past its end are loaded, computed and not stored);
//   - the tile list is the experts' tiles in order, row tiles fastest, so
//     the ~132 tiles in flight share a few weight column strips (W is the
//     big operand: read once from DRAM) while the expert's rows stay in L2;
//     block b takes tiles b, b + grid, ... (all tiles cost the same K loop);
//   - warpgroup 0 is the producer (one thread issues the TMA loads of a
//     4-stage ring: A 128 x 64, B two 128 x 64 halves, 48 KB a stage);
//     warpgroups 1 and 2 each own 64 of the tile's rows and issue
//     m64n128k16 wgmmas on both B halves (128 f32 accumulators a thread);
//   - stages are released one K step late (wgmma.wait_group 1), so the tensor
//     cores always have the next step's MMAs queued;
//   - SwiGLU: the two B halves are the gate rows [n0, n0 + 128) and the up
//     rows [I + n0, I + n0 + 128), so each thread holds gate and up of the
//     same output column and the product is formed in f32 and rounded once;
//   - epilogue: masked bf16x2 / half2 stores straight from the accumulators;
//     the producer meanwhile fills the ring for the next tile.
// K tails, rows past N and weight rows past the expert's end are zero-filled
// by TMA (out of the tensor's bounds), so any K (a multiple of 8: 16-byte
// global strides) works. A plain / GELU tile whose second half has no output
// column neither loads nor multiplies it. A barrier wait over 10 s traps (a
// launch error, not a hang).
#include <climits>
#include <cstring>

#include <cuda.h>         // CUtensorMap (types only: the encoder is fetched at run time)
#include <cudaTypedefs.h> // PFN_cuTensorMapEncodeTiled

#include "cuda/moe/moe.cuh"
#include "cuda/sm90.cuh"
#include "kernels/act_math.h"

namespace {

constexpr int kBM = 128;                            // rows of a tile (2 consumer warpgroups x 64)
constexpr int kBK = 64;                             // K of a stage: one 128-byte swizzled row per matrix row
constexpr int kHalf = 128;                          // columns of one B half (one m64n128 wgmma)
constexpr int kStages = 4;
constexpr int kThreads = 384;                       // warpgroup 0 producer, 1-2 consumers
constexpr int kMaxExperts = 256;                    // mf_moe's bound on E
constexpr int kATile = kBM * kBK * 2;               // 16 KB
constexpr int kBTile = kHalf * kBK * 2;             // 16 KB per half
constexpr int kStage = kATile + 2 * kBTile;         // 48 KB, a multiple of the swizzle's 1024 bytes
constexpr int kTables = 3 * (kMaxExperts + 1) * 4;  // tile prefix, first row, rows per expert
constexpr int kSmem = 1024 + kStages * kStage + 2 * kStages * 8 + kTables; // + 1024: aligning the ring
static_assert(kStage % 1024 == 0, "stages keep the 128-byte swizzle's 1024-byte alignment");
static_assert(kSmem <= 227 * 1024, "one block per SM within sm_90's 227 KB");

enum { kEpPlain = 0, kEpSwiglu = 1, kEpGelu = 2 };

struct GemmParams {
    const int32_t *offsets; // (E + 1) expert e owns rows [offsets[e], offsets[e + 1]) of A and out (clamped to [0, rows])
    int E, rows;            // experts; rows of A and out
    int kt;                 // K steps: ceil(K / 64)
    int n_out;              // columns of out: I (GEMM 1) or H (GEMM 2)
    int up;                 // SwiGLU: first up row of W (I); else unused
    int mode;               // kEpPlain | kEpSwiglu | kEpGelu
    void *out;              // (rows, n_out) A's dtype, row stride ldo elements
    int64_t ldo;
};

#ifdef MF_SM90A_DEVICE
using namespace sm90;

// Tile t (< cum[E]) -> expert e (cum[e] <= t < cum[e + 1]: the last e with
// cum[e] <= t, which skips experts without tiles), its row tile and column tile.
__device__ __forceinline__ void tile_of(int t, const int *cum, int E, int nt, int &e, int &mt, int &ct) {
    int lo = 0, hi = E - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (cum[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    e = lo;
    const int local = t - cum[e], mtiles = (cum[e + 1] - cum[e]) / nt;
    mt = local % mtiles, ct = local / mtiles;
}

// Whether a tile whose first weight row is b0 needs its second B half:
// always for SwiGLU (the up rows); for plain / GELU only when any of its
// columns b0 + 128 ... is an output column. The box would lie wholly outside
// W otherwise: not loaded (PTX does not say what such a box credits to the
// mbarrier) and not multiplied.
__device__ __forceinline__ bool second_half(const GemmParams &p, int b0) {
    return p.mode == kEpSwiglu || b0 + kHalf < p.n_out;
}

template <typename T> __device__ __forceinline__ void store2(void *out, int64_t i, float a, float b);
template <> __device__ __forceinline__ void store2<__nv_bfloat16>(void *out, int64_t i, float a, float b) {
    *reinterpret_cast<__nv_bfloat162 *>(static_cast<__nv_bfloat16 *>(out) + i) = __floats2bfloat162_rn(a, b);
}
template <> __device__ __forceinline__ void store2<__half>(void *out, int64_t i, float a, float b) {
    *reinterpret_cast<__half2 *>(static_cast<__half *>(out) + i) = __floats2half2_rn(a, b);
}
#endif // MF_SM90A_DEVICE

// ta: A (rows, K) as {K, rows}, box {64, 128}; tb: W (E, n_w, K) as
// {K, n_w, E}, box {64, 128, 1}; both 128-byte swizzled, zero fill outside.
template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    moe_gemm_sm90_kernel(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb,
                         const GemmParams p) {
#ifdef MF_SM90A_DEVICE
    MF_DYN_SHARED(uint8_t, smem_raw);
    // The swizzle pattern follows shared-memory address bits 4-9: align the ring's shared address to 1024.
    uint8_t *ring = smem_raw + (((smem_u32(smem_raw) + 1023u) & ~1023u) - smem_u32(smem_raw));
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + kStages * kStage); // TMA bytes landed (1 arrival + tx)
    uint64_t *empty = full + kStages;                                        // both consumers done (2 arrivals)
    int *cum = reinterpret_cast<int *>(empty + kStages);                     // (E + 1) tiles before expert e
    int *first = cum + kMaxExperts + 1;                                      // (E) first row of expert e
    int *count = first + kMaxExperts + 1;                                    // (E) rows of expert e
    const int tid = threadIdx.x, E = p.E;
    const int tile_n = p.mode == kEpSwiglu ? kHalf : 2 * kHalf; // output columns of a tile
    const int nt = (p.n_out + tile_n - 1) / tile_n;

    // The tile table: rows of each expert (offsets clamped to [0, rows], a
    // decreasing pair is empty), then a warp scan of the tile counts. Offsets
    // that break the non-decreasing contract give overlapping ranges: rows
    // written twice (a race), never outside [0, rows).
    for (int e = tid; e < E; e += kThreads) {
        const int lo = min(max(p.offsets[e], 0), p.rows), hi = min(max(p.offsets[e + 1], 0), p.rows);
        first[e] = lo, count[e] = max(hi - lo, 0);
        cum[e + 1] = (max(hi - lo, 0) + kBM - 1) / kBM * nt;
    }
    if (tid == 0) {
        cum[0] = 0;
        for (int s = 0; s < kStages; s++) mbar_init(&full[s], 1), mbar_init(&empty[s], 2);
        ptx::fence_mbarrier_init(); // inits visible to the TMA unit
    }
    __syncthreads();
    if (tid < 32) { // lane l scans experts [8 l, 8 l + 8): cum[1..E] becomes inclusive
        constexpr int kPer = kMaxExperts / 32;
        int v[kPer], run = 0;
#pragma unroll
        for (int j = 0; j < kPer; j++) {
            const int e = tid * kPer + j;
            run += e < E ? cum[e + 1] : 0;
            v[j] = run;
        }
        int incl = run;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int u = __shfl_up_sync(0xffffffffu, incl, o);
            if (tid >= o) incl += u;
        }
        const int before = incl - run;
#pragma unroll
        for (int j = 0; j < kPer; j++)
            if (tid * kPer + j < E) cum[tid * kPer + j + 1] = before + v[j];
    }
    __syncthreads();
    const int total = cum[E];

    if (tid < 128) {
        // Producer: one thread walks the same tiles as the consumers and keeps
        // the ring full; the other 127 threads have nothing to do.
        ptx::setmaxnreg_dec<40>();
        if (tid == 0) {
            int s = 0;
            uint32_t ph = 0;
            for (int t = blockIdx.x; t < total; t += gridDim.x) {
                int e, mt, ct;
                tile_of(t, cum, E, nt, e, mt, ct);
                const int row0 = first[e] + mt * kBM;
                const int b0 = ct * tile_n, b1 = p.mode == kEpSwiglu ? p.up + b0 : b0 + kHalf;
                const bool two = second_half(p, b0);
                for (int kb = 0; kb < p.kt; kb++) {
                    mbar_wait(&empty[s], ph ^ 1);
                    mbar_expect_tx(&full[s], two ? kStage : kStage - kBTile);
                    uint8_t *st = ring + s * kStage;
                    tma_load_2d(st, &ta, kb * kBK, row0, &full[s]);
                    tma_load_3d(st + kATile, &tb, kb * kBK, b0, e, &full[s]);
                    if (two) tma_load_3d(st + kATile + kBTile, &tb, kb * kBK, b1, e, &full[s]);
                    if (++s == kStages) s = 0, ph ^= 1;
                }
            }
        }
    } else {
        // Consumers: warpgroup g (0, 1) computes rows [64 g, 64 g + 64) of the
        // tile against both B halves.
        ptx::setmaxnreg_inc<232>();
        const int g = tid / 128 - 1, lane = tid & 31, warp = (tid >> 5) & 3;
        const bool leader = (tid & 127) == 0;
        float acc0[64], acc1[64]; // B half 0 / 1: column 8 j + 2 (lane % 4) + {0, 1}, row + {0, 8}
        int s = 0;
        uint32_t ph = 0;
        for (int t = blockIdx.x; t < total; t += gridDim.x) {
            int e, mt, ct;
            tile_of(t, cum, E, nt, e, mt, ct);
#pragma unroll
            for (int i = 0; i < 64; i++) acc0[i] = 0.0f, acc1[i] = 0.0f;
            const bool two = second_half(p, ct * tile_n);
            int prev = -1;
            for (int kb = 0; kb < p.kt; kb++) {
                mbar_wait(&full[s], ph);
                const uint32_t a = smem_u32(ring + s * kStage) + g * (64 * 128);
                const uint32_t b0 = smem_u32(ring + s * kStage + kATile), b1 = b0 + kBTile;
                if (two) {
                    wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < kBK / 16; kk++) {
                        wgmma_ss<kHalf, T>(acc0, desc_k(a + 32 * kk), desc_k(b0 + 32 * kk), 1);
                        wgmma_ss<kHalf, T>(acc1, desc_k(a + 32 * kk), desc_k(b1 + 32 * kk), 1);
                    }
                    wgmma_commit();
                } else { // (fence and commit in each branch: ptxas injects its own fences at a join)
                    wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < kBK / 16; kk++)
                        wgmma_ss<kHalf, T>(acc0, desc_k(a + 32 * kk), desc_k(b0 + 32 * kk), 1);
                    wgmma_commit();
                }
                wgmma_wait<1>(); // the previous step's MMAs are done: its stage can refill
                if (prev >= 0 && leader) mbar_arrive(&empty[prev]);
                prev = s;
                if (++s == kStages) s = 0, ph ^= 1;
            }
            wgmma_wait<0>();
            fence_acc(acc0), fence_acc(acc1);
            if (leader) mbar_arrive(&empty[prev]);

            // Epilogue: this thread's rows r and r + 8, columns 8 j + 2 (lane % 4) + {0, 1}.
            const int r = mt * kBM + g * 64 + warp * 16 + (lane >> 2), c2 = 2 * (lane & 3);
            const int n0 = ct * tile_n;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = r + 8 * h;
                if (row >= count[e]) continue;
                const int64_t base = (int64_t)(first[e] + row) * p.ldo;
#pragma unroll
                for (int j = 0; j < 16; j++) {
                    const int i = 4 * j + 2 * h, col = n0 + 8 * j + c2;
                    if (p.mode == kEpSwiglu) {
                        if (col < p.n_out)
                            store2<T>(p.out, base + col, mf_act_apply(MF_ACT_SILU, acc0[i]) * acc1[i],
                                      mf_act_apply(MF_ACT_SILU, acc0[i + 1]) * acc1[i + 1]);
                    } else {
                        const bool gelu = p.mode == kEpGelu;
                        float v0 = acc0[i], v1 = acc0[i + 1], u0 = acc1[i], u1 = acc1[i + 1];
                        if (gelu) {
                            v0 = mf_act_apply(MF_ACT_GELU_TANH, v0), v1 = mf_act_apply(MF_ACT_GELU_TANH, v1);
                            u0 = mf_act_apply(MF_ACT_GELU_TANH, u0), u1 = mf_act_apply(MF_ACT_GELU_TANH, u1);
                        }
                        if (col < p.n_out) store2<T>(p.out, base + col, v0, v1);
                        if (col + kHalf < p.n_out) store2<T>(p.out, base + col + kHalf, u0, u1);
                    }
                }
            }
        }
    }
#else
    (void)ta, (void)tb, (void)p;
    __trap(); // never launched: mf_moe_sm90_available() is false without sm_90a code
#endif
}

// ---- host ----------------------------------------------------------------------------------

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            (void)cudaGetLastError();
            f = nullptr;
        }
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    }();
    return fn;
}

CUtensorMapDataType tma_type(int dt) {
    return dt == MF_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

// rank 2 (A: dims {K, rows}) or 3 (W: dims {K, n_w, E}); strides in elements
// of dims 1 and 2; boxes of 64 x 128 (x 1), 128-byte swizzle, zeros outside.
mf_status encode(CUtensorMap *map, int dt, int rank, const void *base, const uint64_t *dims, const int64_t *strides,
                 const char *what) {
    PFN_cuTensorMapEncodeTiled_v12000 fn = encoder();
    if (!fn) return mf_fail(MF_ERR_CUDA, "moe_experts: the driver has no cuTensorMapEncodeTiled");
    cuuint64_t gdim[3], gstride[2];
    cuuint32_t box[3] = {(cuuint32_t)kBK, (cuuint32_t)kHalf, 1}, estride[3] = {1, 1, 1};
    for (int i = 0; i < rank; i++) gdim[i] = dims[i];
    for (int i = 0; i + 1 < rank; i++) gstride[i] = (cuuint64_t)strides[i] * 2;
    const CUresult r = fn(map, tma_type(dt), (cuuint32_t)rank, const_cast<void *>(base), gdim, gstride, box, estride,
                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return mf_fail(MF_ERR_CUDA, "moe_experts: cuTensorMapEncodeTiled failed for %s (CUresult %d)", what, (int)r);
    return MF_OK;
}

bool aligned16(const void *ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

// One grouped GEMM: out (rows, n_out) from A (rows, K) and W (E, n_w, K).
mf_status launch(mf_cuda_ctx *c, int dt, const void *a, int64_t lda, int64_t rows, int64_t K, const void *w,
                 int64_t ldw, int64_t wse, int64_t n_w, int64_t E, const int32_t *offsets, void *out, int64_t ldo,
                 int64_t n_out, int mode, int64_t up) {
    CUtensorMap ta, tb;
    const uint64_t adims[2] = {(uint64_t)K, (uint64_t)rows}, wdims[3] = {(uint64_t)K, (uint64_t)n_w, (uint64_t)E};
    const int64_t astr[1] = {lda}, wstr[2] = {ldw, E > 1 ? wse : n_w * ldw}; // one expert: any stride[0]
    MF_TRY(encode(&ta, dt, 2, a, adims, astr, "the routed rows"));
    MF_TRY(encode(&tb, dt, 3, w, wdims, wstr, "the expert weights"));
    GemmParams p = {};
    p.offsets = offsets, p.E = (int)E, p.rows = (int)rows;
    p.kt = (int)((K + kBK - 1) / kBK), p.n_out = (int)n_out, p.up = (int)up, p.mode = mode;
    p.out = out, p.ldo = ldo;
    void (*kernel)(CUtensorMap, CUtensorMap, GemmParams) =
        dt == MF_DTYPE_BF16 ? moe_gemm_sm90_kernel<__nv_bfloat16> : moe_gemm_sm90_kernel<__half>;
    // Every SM: blocks past the last tile return at once (the tile count is
    // known only on the device).
    MF_LAUNCH(kernel, (unsigned)c->sm_count, kThreads, kSmem, c->stream, ta, tb, p);
    MF_CUDA_CHECK_LAUNCH("moe_gemm_sm90_kernel");
    return MF_OK;
}

} // namespace

namespace {

bool sm90_probe(mf_cuda_ctx *c) {
#ifdef MF_CUDA_SM90A
    if (c->cc_major != 9 || c->cc_minor != 0 || !encoder()) return false;
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device) != cudaSuccess ||
        optin < kSmem) {
        (void)cudaGetLastError();
        return false;
    }
    // The sm_90a image must be the one loaded (not a JIT of compute_80 PTX).
    void (*kernels[2])(CUtensorMap, CUtensorMap, GemmParams) = {moe_gemm_sm90_kernel<__nv_bfloat16>,
                                                                 moe_gemm_sm90_kernel<__half>};
    for (auto *k : kernels) {
        cudaFuncAttributes fa;
        if (cudaFuncGetAttributes(&fa, k) != cudaSuccess || fa.binaryVersion != 90 ||
            cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
    }
    return true;
#else
    (void)c;
    return false;
#endif
}

} // namespace

// Asked once per backend (answered again, uncached, if its state cannot be made).
bool mf_moe_sm90_available(mf_cuda_ctx *c) {
    mf_cuda_moe_state *s = mf_cuda_moe_state_of(c);
    if (s && s->sm90 != 0) return s->sm90 > 0;
    const bool ok = sm90_probe(c);
    if (s) s->sm90 = ok ? 1 : -1;
    return ok;
}

bool mf_moe_sm90_fits(mf_cuda_ctx *c, const mf_moe_experts_args *p) {
    const int dt = p->x.dtype;
    if (dt != MF_DTYPE_BF16 && dt != MF_DTYPE_F16) return false;
    const int64_t N = p->x.shape[0], H = p->x.shape[1], E = p->w1.shape[0], rows1 = p->h.shape[1];
    const int64_t I = p->ffn == MF_MOE_FFN_SWIGLU ? rows1 / 2 : rows1;
    if (N < 1 || N > INT_MAX || H % 8 || I % 8 || H >= INT_MAX || rows1 >= INT_MAX || E > kMaxExperts) return false;
    // Tiles: at most (N / 128 + E) row tiles x (I / 128 or H / 256 + 1) column tiles, in int.
    const int64_t rt = N / kBM + E, ct = (H > I ? H : I) / kHalf + 1;
    if (rt * ct >= INT_MAX) return false;
    // One expert: stride[0] unused (the map gets a dense one). Several: each
    // expert's weights must not overlap the next (the tensor map's strides
    // grow with the dimensions).
    const int64_t wse1 = E > 1 ? p->w1.stride[0] : rows1 * p->w1.stride[1];
    const int64_t wse2 = E > 1 ? p->w2.stride[0] : H * p->w2.stride[1];
    const int64_t ld[7] = {p->x.stride[0], p->h.stride[0], p->y.stride[0], p->w1.stride[1], p->w2.stride[1], wse1, wse2};
    for (int64_t l : ld)
        if (l <= 0 || l % 8 || l >= (int64_t)1 << 38) return false;
    if (wse1 < rows1 * p->w1.stride[1] || wse2 < H * p->w2.stride[1]) return false;
    if (!aligned16(p->x.data) || !aligned16(p->h.data) || !aligned16(p->y.data) || !aligned16(p->w1.data) ||
        !aligned16(p->w2.data))
        return false;
    return mf_moe_sm90_available(c);
}

mf_status mf_moe_sm90_run(mf_cuda_ctx *c, const mf_moe_experts_args *p) {
    const int dt = p->x.dtype;
    const int64_t N = p->x.shape[0], H = p->x.shape[1], E = p->w1.shape[0], rows1 = p->h.shape[1];
    const bool glu = p->ffn == MF_MOE_FFN_SWIGLU;
    const int64_t I = glu ? rows1 / 2 : rows1;
    const int32_t *off = static_cast<const int32_t *>(p->offsets.data);
    MF_TRY(launch(c, dt, p->x.data, p->x.stride[0], N, H, p->w1.data, p->w1.stride[1], p->w1.stride[0], rows1, E, off,
                  p->h.data, p->h.stride[0], I, glu ? kEpSwiglu : kEpGelu, I));
    return launch(c, dt, p->h.data, p->h.stride[0], N, I, p->w2.data, p->w2.stride[1], p->w2.stride[0], H, E, off,
                  p->y.data, p->y.stride[0], H, kEpPlain, 0);
}
