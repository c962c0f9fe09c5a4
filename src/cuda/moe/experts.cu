// Mixture-of-Experts on CUDA: router.cu (fused router: softmax / sigmoid +
// top-k + renorm + scale), permute.cu (the stable counting-sort permutation
// and the gather of x into expert-contiguous rows), combine.cu (+ residual,
// + gated shared expert), and here the expert FFNs on one of four paths
// (mf_cuda_moe_experts):
//   "decode"  at most MF_MOE_DECODE_MAX_ROWS (32) routed rows (T * k): two kernels that
//             read the expert offsets on the device (no host read-back, so
//             the layer can be recorded in a CUDA Graph) and stream each
//             selected expert's weights once (experts_decode.cu);
//   "loop"    otherwise: the per-expert cuBLASLt loop of src/ops/moe.c, sized
//             by one device-to-host read of the E + 1 offsets per layer;
//   "wgmma"   MINFER_MOE_GEMM=wgmma (f16/bf16 on sm_90a): our grouped GEMMs
//             (moe_gemm.cu), offsets read on the device, no sync;
//             opt-in until an H100 has checked and timed it;
//   "grouped" MINFER_MOE_GEMM=grouped: cublasGemmGroupedBatchedEx (same read-back).
// UNVERIFIED on a GPU (compile-checked for sm_80, sm_90a).
#include <climits>
#include <cstdlib>
#include <cstring>

#include <cublas_v2.h>

#include "core/alloc.h"
#include "cuda/cuda_query.h"
#include "cuda/moe/moe.cuh"
#include "kernels/moe_offsets.h"

namespace {

// MINFER_MOE_GEMM: "grouped" or "loop" force that path (measurements);
// "wgmma" takes our sm_90a grouped GEMMs wherever they fit (any number of
// rows), else what unset takes; unset or anything else: decode when it fits,
// else the loop.
const char *forced_path() {
    const char *mode = getenv("MINFER_MOE_GEMM");
    if (mode && strcmp(mode, "grouped") == 0) return "grouped";
    if (mode && strcmp(mode, "loop") == 0) return "loop";
    if (mode && strcmp(mode, "wgmma") == 0) return "wgmma";
    return nullptr;
}

// The path mf_cuda_moe_experts takes for p (given valid arguments).
const char *experts_path(mf_cuda_ctx *c, const mf_moe_experts_args *p) {
    const char *forced = forced_path();
    if (forced && strcmp(forced, "wgmma") == 0) {
        if (mf_moe_sm90_fits(c, p)) return "wgmma";
        forced = nullptr;
    }
    if (forced) return forced;
    return mf_moe_decode_fits(p) ? "decode" : "loop";
}

} // namespace

extern "C" bool mf_cuda_moe_experts_capturable(mf_backend *be, const mf_moe_experts_args *p) {
    const char *path = experts_path(mf_cuda_ctx_of(be), p);
    return strcmp(path, "decode") == 0 || strcmp(path, "wgmma") == 0;
}

extern "C" int mf_cuda_moe_sm90(mf_backend *be, int *cc) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    if (cc) *cc = 10 * c->cc_major + c->cc_minor;
    return mf_moe_sm90_available(c);
}

extern "C" const char *mf_cuda_moe_last_path(mf_backend *be) {
    const mf_cuda_moe_state *s = mf_cuda_ctx_of(be)->moe;
    return s ? s->path : "";
}

namespace {

cudaDataType_t cu_type(int dt) {
    return dt == MF_DTYPE_F16 ? CUDA_R_16F : dt == MF_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

#define MF_CUBLAS_V2_TRY(call)                                                                        \
    do {                                                                                              \
        cublasStatus_t mf_cb_s_ = (call);                                                             \
        if (mf_cb_s_ != CUBLAS_STATUS_SUCCESS) {                                                      \
            (void)cudaGetLastError();                                                                 \
            return mf_fail(MF_ERR_CUDA, "cublas: %s failed: %s", #call, cublasGetStatusString(mf_cb_s_)); \
        }                                                                                             \
    } while (0)

// One grouped GEMM over the G non-empty experts, row-major
//   C_g (n_g, N) = A_g (n_g, K) . W_g^T,  W_g (N, K) rows of stride ldw
// as cuBLAS column-major C_g^T (N, n_g) = op_T(W_g as (K, N)) . A_g^T (K, n_g).
// The 3 G pointers go through `ptrs` (device, 3 * 256 entries), copied from
// the host on the stream (pageable: staged before the call returns).
mf_status grouped_gemm(mf_cuda_ctx *c, int G, const int *rows, const void *const *a, int lda, const void *const *w,
                       int ldw, void *const *cc, int ldc, int N, int K, cudaDataType_t type, void **ptrs) {
    const void *host[3 * 256] = {}; // unused entries copied too (one 6 KB copy)
    for (int g = 0; g < G; g++) host[g] = w[g], host[256 + g] = a[g], host[512 + g] = cc[g];
    MF_CUDA_TRY(cudaMemcpyAsync(ptrs, host, sizeof host, cudaMemcpyHostToDevice, c->stream));
    cublasOperation_t ta[256], tb[256];
    int m[256], n[256], k[256], la[256], lb[256], lc[256], gs[256];
    float alpha[256], beta[256];
    for (int g = 0; g < G; g++) {
        ta[g] = CUBLAS_OP_T, tb[g] = CUBLAS_OP_N;
        m[g] = N, n[g] = rows[g], k[g] = K;
        la[g] = ldw, lb[g] = lda, lc[g] = ldc, gs[g] = 1;
        alpha[g] = 1.0f, beta[g] = 0.0f;
    }
    cublasHandle_t h = static_cast<cublasHandle_t>(c->moe->cublas);
    MF_CUBLAS_V2_TRY(cublasGemmGroupedBatchedEx(h, ta, tb, m, n, k, alpha, (const void *const *)ptrs, type, la,
                                                (const void *const *)(ptrs + 256), type, lb, beta,
                                                (void *const *)(ptrs + 512), type, lc, G, gs, CUBLAS_COMPUTE_32F));
    return MF_OK;
}

} // namespace

mf_cuda_moe_state *mf_cuda_moe_state_of(mf_cuda_ctx *c) {
    if (!c->moe) {
        c->moe = static_cast<mf_cuda_moe_state *>(mf_calloc(1, sizeof *c->moe));
        if (!c->moe) {
            mf_fail(MF_ERR_OOM, "moe_experts: out of host memory (%zu bytes of backend state)", sizeof *c->moe);
            return nullptr;
        }
        c->moe->path = "";
    }
    return c->moe;
}

extern "C" void mf_cuda_moe_release(mf_cuda_ctx *c) {
    if (!c->moe) return;
    if (c->moe->cublas) cublasDestroy(static_cast<cublasHandle_t>(c->moe->cublas));
    free(c->moe);
    c->moe = nullptr;
}

// Declines (MF_ERR_UNSUPPORTED): src/ops/moe.c then runs its generic
// per-expert loop of mf_gemm / mf_act (cuBLASLt), the offsets read back.
static mf_status decline(mf_cuda_ctx *c, const char *why) {
    c->moe->path = "loop";
    return mf_fail(MF_ERR_UNSUPPORTED, "moe_experts: %s (the generic expert loop runs them)", why);
}

// The expert FFNs: the decode kernels when they fit (no read-back), else a
// decline (the per-expert loop of src/ops/moe.c); our sm_90a grouped GEMMs or
// cuBLAS's grouped GEMM when MINFER_MOE_GEMM asks.
extern "C" mf_status mf_cuda_moe_experts(mf_backend *be, const mf_moe_experts_args *p) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    mf_cuda_moe_state *st = mf_cuda_moe_state_of(c);
    if (!st) return MF_ERR_OOM;
    const char *path = experts_path(c, p);
    st->path = path;
    if (strcmp(path, "decode") == 0) return mf_moe_decode_run(be, p);
    if (strcmp(path, "loop") == 0) return decline(c, "no device path for these rows and shapes");
    if (strcmp(path, "wgmma") == 0) return mf_moe_sm90_run(c, p); // host_offsets were checked at dispatch
    // Pointer arrays live at the start of the cuBLASLt workspace: stream-ordered
    // between GEMMs, so no Lt call is using it meanwhile.
    if (c->workspace_bytes < 3 * 256 * sizeof(void *)) return decline(c, "the grouped GEMM's pointer arrays do not fit");
    if (!st->cublas) {
        cublasHandle_t h = nullptr;
        MF_CUBLAS_V2_TRY(cublasCreate(&h));
        st->cublas = h;
    }
    cublasHandle_t h = static_cast<cublasHandle_t>(st->cublas);
    MF_CUBLAS_V2_TRY(cublasSetStream(h, c->stream));
    const int E = (int)p->w1.shape[0];
    int32_t buf[257];
    const int32_t *o = p->host_offsets;
    if (!o) { // one read-back sizes the grouped GEMM
        MF_TRY(be->copy(be, buf, p->offsets.data, (size_t)(E + 1) * sizeof(int32_t), MF_COPY_D2H));
        MF_TRY(mf_moe_offsets_check(buf, E, p->x.shape[0]));
        o = buf;
    }
    const int64_t H = p->x.shape[1], rows1 = p->h.shape[1];
    const bool glu = p->ffn == MF_MOE_FFN_SWIGLU;
    const int64_t I = glu ? rows1 / 2 : rows1;
    const size_t es = mf_dtype_size(p->x.dtype);
    const cudaDataType_t type = cu_type(p->x.dtype);
    int G = 0, rows[256];
    const void *xa[256], *w1[256], *ha[256], *w2[256];
    void *hc[256], *yc[256];
    for (int e = 0; e < E; e++) {
        const int n = o[e + 1] - o[e];
        if (n == 0) continue;
        rows[G] = n;
        xa[G] = static_cast<const char *>(p->x.data) + (size_t)(o[e] * p->x.stride[0]) * es;
        hc[G] = static_cast<char *>(p->h.data) + (size_t)(o[e] * p->h.stride[0]) * es;
        ha[G] = hc[G];
        yc[G] = static_cast<char *>(p->y.data) + (size_t)(o[e] * p->y.stride[0]) * es;
        w1[G] = static_cast<const char *>(p->w1.data) + (size_t)(e * p->w1.stride[0]) * es;
        w2[G] = static_cast<const char *>(p->w2.data) + (size_t)(e * p->w2.stride[0]) * es;
        G++;
    }
    if (G == 0) return MF_OK;
    const int64_t lim = INT_MAX;
    if (p->x.stride[0] > lim || p->h.stride[0] > lim || p->y.stride[0] > lim || p->w1.stride[1] > lim ||
        p->w2.stride[1] > lim || rows1 > lim || H > lim)
        return decline(c, "the grouped GEMM takes 32-bit sizes and strides");
    void **ptrs = static_cast<void **>(c->workspace);
    MF_TRY(grouped_gemm(c, G, rows, xa, (int)p->x.stride[0], w1, (int)p->w1.stride[1], hc, (int)p->h.stride[0],
                        (int)rows1, (int)H, type, ptrs));
    // The activation over every routed row at once (GELU too: no grouped epilogue).
    mf_tensor hv = p->h;
    hv.data = static_cast<char *>(p->h.data) + (size_t)(o[0] * p->h.stride[0]) * es;
    hv.shape[0] = o[E] - o[0];
    mf_tensor gate = hv, up = hv;
    gate.shape[1] = I, up.shape[1] = I;
    up.data = static_cast<char *>(hv.data) + (size_t)I * es;
    mf_act_args act = {};
    act.x = gate, act.y = gate, act.up = glu ? &up : nullptr, act.kind = glu ? MF_ACT_SILU : MF_ACT_GELU_TANH;
    MF_TRY(mf_cuda_act(be, &act));
    MF_TRY(grouped_gemm(c, G, rows, ha, (int)p->h.stride[0], w2, (int)p->w2.stride[1], yc, (int)p->y.stride[0],
                        (int)H, (int)I, type, ptrs));
    return MF_OK;
}
