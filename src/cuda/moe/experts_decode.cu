// The MoE expert FFNs' decode path (mf_cuda_moe_experts' "decode", see
// experts.cu): at most MF_MOE_DECODE_MAX_ROWS (32) routed rows, two launches
// that find each expert's rows from the device offsets (no host read-back,
// so the layer can be recorded in a CUDA Graph) and stream each selected
// expert's weights once, on the skinny dot product gemv uses.
#include "cuda/gemm/skinny_dot.cuh"
#include "cuda/moe/moe.cuh"
#include "kernels/act_math.h"

namespace {

constexpr unsigned kFull = 0xffffffffu;

constexpr int kDecWarps = 4;                 // warps per block
constexpr int kDecThreads = kDecWarps * 32;
constexpr int kDecWRows = kMfSkinnyCols;     // weight rows a warp streams (SwiGLU: gate j, j + 1 and up j, j + 1)
constexpr int kDecRows = kMfSkinnyRows;      // routed rows one block computes (all of one expert's, or 8 of them)
constexpr int64_t kDecMaxTiles = 65535;      // column tiles are grid y
static_assert(kDecRows * kDecWRows == 32, "after the reduction each lane holds exactly one (row, weight row) sum");
static_assert(kDecWRows == 4, "the SwiGLU epilogue pairs lane c with lane c + 2 (gate with up)");

enum { kDecDown = 0, kDecSwiglu = 1, kDecGelu = 2 }; // what the block does with its sums

struct DecodeParams {
    const void *x;          // (N, K) expert-contiguous routed rows, row stride ldx elements, 16-byte aligned rows
    const void *w;          // (E, rows, K): expert e's weight row j at w + e * wse + j * ldw elements
    void *out;              // (N, n_out), row stride ldo elements: act(x . w^T), or silu(gate) * up
    const int32_t *offsets; // (E + 1) expert e owns rows [offsets[e], offsets[e + 1]) (clamped to [0, N])
    int64_t K, n_out;       // reduction length; output columns (SwiGLU: I, the up rows start at row I)
    int64_t ldx, ldw, wse, ldo;
    int N, E;
    int dt;                 // mf_dtype of x, w and out
    int mode;               // kDecDown | kDecSwiglu | kDecGelu
};

// The block's work item: item `slot` of the list, in expert order, of
// (expert, group of up to kDecRows of its rows) pairs; its rows [r0, r1).
// Offsets are clamped to [0, N] (a decreasing pair is an empty expert), so
// no offsets can make a block touch rows outside x or out. Returns the
// expert, or -1 when the list is shorter than slot + 1. Every lane of the
// warp gets the same answer (a warp scan over 32 experts at a time).
__device__ __forceinline__ int decode_item(const int32_t *offsets, int E, int N, int slot, int lane, int &r0,
                                           int &r1) {
    for (int base = 0; base < E; base += 32) {
        const int e = base + lane;
        int a = 0, b = 0;
        if (e < E) {
            a = min(max(offsets[e], 0), N);
            b = max(min(max(offsets[e + 1], 0), N), a);
        }
        const int groups = (b - a + kDecRows - 1) / kDecRows;
        int incl = groups;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int v = __shfl_up_sync(kFull, incl, o);
            if (lane >= o) incl += v;
        }
        const int total = __shfl_sync(kFull, incl, 31);
        if (slot < total) { // exactly one lane's [incl - groups, incl) holds slot
            const unsigned pick = __ballot_sync(kFull, slot >= incl - groups && slot < incl);
            const int src = __ffs(pick) - 1;
            const int first = __shfl_sync(kFull, a, src), last = __shfl_sync(kFull, b, src);
            const int before = __shfl_sync(kFull, incl - groups, src);
            r0 = first + (slot - before) * kDecRows;
            r1 = min(last, r0 + kDecRows);
            return base + src;
        }
        slot -= total;
    }
    return -1;
}

// out[r, j] for the <= kDecRows routed rows r of one expert and a tile of
// output columns j, with each weight byte of the tile read once:
//   grid (slots, column tiles): x = the work item (expert, row group; slot-
//   major so that the row groups of one expert run side by side and share
//   the weight tile in L2), y = kDecWarps * (4, or 2 for SwiGLU) columns.
//   A block whose item does not exist (fewer selected experts than slots)
//   returns at once.
//   Warp: kDecWRows weight rows (SwiGLU: gate rows j, j + 1 and up rows
//   I + j, I + j + 1, so the gate product needs no other warp), their dot
//   products with the routed rows by mf_skinny_dot (gemm/skinny_dot.cuh, as
//   gemv's: 16 loads in flight per lane, each weight chunk unpacked once and
//   multiplied with the same chunk of every routed row, L1-resident since the
//   block's 4 warps read the same x rows); lane row * 4 + wrow gets its sum.
//   Epilogue in f32, one rounding to out's dtype: the plain sum (down),
//   gelu_tanh(sum), or silu(gate) * up with up from lane + 2.
// Deterministic: one writer per output, a fixed summation order, no atomics.
template <int kElems>
__global__ void __launch_bounds__(kDecThreads) moe_decode_kernel(DecodeParams p) {
    constexpr int kEsz = 16 / kElems;             // bytes per element
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const bool glu = p.mode == kDecSwiglu;
    const int per_warp = glu ? kDecWRows / 2 : kDecWRows;
    const int64_t col0 = ((int64_t)blockIdx.y * kDecWarps + warp) * per_warp;
    if (col0 >= p.n_out) return; // no block-wide barrier below
    int r0 = 0, r1 = 0;
    const int ex = decode_item(p.offsets, p.E, p.N, (int)blockIdx.x, lane, r0, r1);
    if (ex < 0) return;
    const int m = r1 - r0; // 1..kDecRows, the same in every lane

    // Columns past n_out read column n_out - 1 (valid memory, results dropped): loads stay unconditional.
    const char *we = static_cast<const char *>(p.w) + (int64_t)ex * p.wse * kEsz;
    const char *wrow[kDecWRows];
#pragma unroll
    for (int c = 0; c < kDecWRows; c++) {
        const int64_t oc = min(col0 + (glu ? c % 2 : c), p.n_out - 1);
        wrow[c] = we + (glu && c >= 2 ? p.n_out + oc : oc) * p.ldw * kEsz;
    }
    const char *xr = static_cast<const char *>(p.x) + (int64_t)r0 * p.ldx * kEsz;

    // lane row * 4 + c: the sum of (row, weight row c)
    const float mine = mf_skinny_dot<kElems>(wrow, xr, p.ldx, m, 0, p.K, p.dt);
    const int r = lane / kDecWRows, c = lane % kDecWRows;
    const float up = __shfl_down_sync(kFull, mine, 2); // SwiGLU: lane c + 2 holds the up row of column c
    if (r >= m) return;
    float v;
    int64_t j;
    if (glu) {
        if (c >= 2) return;
        j = col0 + c;
        v = mf_act_apply(MF_ACT_SILU, mine) * up;
    } else {
        j = col0 + c;
        v = p.mode == kDecGelu ? mf_act_apply(MF_ACT_GELU_TANH, mine) : mine;
    }
    if (j < p.n_out) mf_st(p.out, p.dt, (int64_t)(r0 + r) * p.ldo + j, v);
}

// Elements per 16-byte load for x's dtype.
int64_t decode_elems(const mf_tensor *x) { return x->dtype == MF_DTYPE_F32 ? 4 : 8; }

// Rows of t (n of them) start 16-byte aligned for loads of v elements.
bool decode_rows_ok(const mf_tensor *t, int64_t n, int64_t v) {
    return mf_aligned16(t->data) && (n <= 1 || t->stride[0] % v == 0);
}

// Weights (E, rows, K) of unit stride along K: every row 16-byte aligned.
bool decode_weights_ok(const mf_tensor *w, int64_t v) {
    return mf_aligned16(w->data) && (w->shape[1] <= 1 || w->stride[1] % v == 0) &&
           (w->shape[0] <= 1 || w->stride[0] % v == 0);
}

mf_status decode_launch(mf_cuda_ctx *c, const DecodeParams &p, int slots) {
    const int64_t per_block = kDecWarps * (p.mode == kDecSwiglu ? kDecWRows / 2 : kDecWRows);
    const dim3 grid((unsigned)slots, (unsigned)((p.n_out + per_block - 1) / per_block));
    if (p.dt == MF_DTYPE_F32)
        MF_LAUNCH(moe_decode_kernel<4>, grid, kDecThreads, 0, c->stream, p);
    else
        MF_LAUNCH(moe_decode_kernel<8>, grid, kDecThreads, 0, c->stream, p);
    MF_CUDA_CHECK_LAUNCH("moe_decode_kernel");
    return MF_OK;
}

} // namespace

// Whether the decode kernels take these (validated) arguments: 1..MF_MOE_DECODE_MAX_ROWS
// routed rows, H and I multiples of the 16-byte chunk, every row of x, h,
// w1 and w2 16-byte aligned, column tiles within grid y.
bool mf_moe_decode_fits(const mf_moe_experts_args *p) {
    const int64_t N = p->x.shape[0], H = p->x.shape[1], rows1 = p->h.shape[1];
    const int64_t I = p->ffn == MF_MOE_FFN_SWIGLU ? rows1 / 2 : rows1, v = decode_elems(&p->x);
    const int64_t up_cols = kDecWarps * (p->ffn == MF_MOE_FFN_SWIGLU ? kDecWRows / 2 : kDecWRows);
    const int64_t down_cols = kDecWarps * kDecWRows;
    return N >= 1 && N <= MF_MOE_DECODE_MAX_ROWS && H % v == 0 && I % v == 0 && decode_rows_ok(&p->x, N, v) &&
           decode_rows_ok(&p->h, N, v) && decode_weights_ok(&p->w1, v) && decode_weights_ok(&p->w2, v) &&
           (I + up_cols - 1) / up_cols <= kDecMaxTiles && (H + down_cols - 1) / down_cols <= kDecMaxTiles;
}

// The two launches: h[:, :I] = act(xs . W1_e^T) (SwiGLU's gate product fused),
// then y = h[:, :I] . W2_e^T, each expert's rows found on the device.
mf_status mf_moe_decode_run(mf_backend *be, const mf_moe_experts_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be); // host_offsets, when given, were checked at dispatch; the kernels clamp
    const int64_t N = a->x.shape[0], H = a->x.shape[1], E = a->w1.shape[0], rows1 = a->h.shape[1];
    const bool glu = a->ffn == MF_MOE_FFN_SWIGLU;
    const int64_t I = glu ? rows1 / 2 : rows1;
    // Work items: sum over experts of ceil(n_e / kDecRows) <= D + (N - D) / kDecRows, D = min(E, N) experts.
    const int64_t D = E < N ? E : N;
    const int slots = (int)(D + (N - D) / kDecRows);
    DecodeParams p = {};
    p.offsets = static_cast<const int32_t *>(a->offsets.data);
    p.N = (int)N, p.E = (int)E, p.dt = a->x.dtype;
    p.x = a->x.data, p.ldx = a->x.stride[0], p.K = H;
    p.w = a->w1.data, p.ldw = a->w1.stride[1], p.wse = a->w1.stride[0];
    p.out = a->h.data, p.ldo = a->h.stride[0], p.n_out = I;
    p.mode = glu ? kDecSwiglu : kDecGelu;
    MF_TRY(decode_launch(c, p, slots));
    p.x = a->h.data, p.ldx = a->h.stride[0], p.K = I;
    p.w = a->w2.data, p.ldw = a->w2.stride[1], p.wse = a->w2.stride[0];
    p.out = a->y.data, p.ldo = a->y.stride[0], p.n_out = H;
    p.mode = kDecDown;
    return decode_launch(c, p, slots);
}
