// Prefill attention for Hopper (sm_90a): the FlashAttention-2 algorithm of
// attn_prefill.cu with both GEMMs on warpgroup MMAs (wgmma), for f16/bf16
// and head dims 64, 128 and 256, in all three modes of mf_attention (fixed,
// packed varlen, KV cache), causal / sliding window and GQA. Written for
// minfer from the published FlashAttention-2/3 algorithms and the PTX ISA;
// no code taken from any project. UNVERIFIED on a GPU (compile-checked).
//
// Why: mma.sync (attn_prefill.cu) issues at most ~half of the H100's tensor
// rate; wgmma reads both operands of S = Q K^T straight from shared memory
// and P from registers for O += P V, 64 rows x N columns per instruction.
//
// Design (one block = 128 q rows of one (sequence, head); 256 threads = two
// warpgroups of 64 rows each, both loading and computing):
//   - Q (128 x D), K and V tiles (kBN x D) are stored as 64-column panels of
//     128-byte swizzled rows (the layout wgmma's descriptors read). Every
//     thread copies its share with cp.async, zero-filling rows past q_len /
//     k_len (so a NaN in the cache past the sequence never reaches P.V), and
//     signals the stage's `full` mbarrier when its copies land (256 arrivals);
//   - K/V go through a 2-stage ring; a stage is refilled only after both
//     warpgroups released it (`empty`, 256 arrivals), so the two warpgroups
//     drift up to a tile apart and one's softmax overlaps the other's MMAs;
//   - S = Q K^T: D / 16 m64nBNk16 wgmmas, both operands K-major in smem;
//   - online softmax in the exp2 domain on the accumulators (a row's values
//     live in the 4 lanes of a quad), the mask only on edge tiles;
//   - O += P V: P is re-packed from the S accumulators into wgmma's A
//     register fragment without shuffles (the 16-bit A fragment of k step j
//     is accumulator groups 2j and 2j + 1), V is read MN-major (trans-b);
//   - the next tile's loads are issued while this tile's S MMAs run.
// Not done yet (the levers, in order, once an H100 has measured this):
// TMA loads from a producer warpgroup with setmaxnreg, softmax of tile j
// overlapped with S of tile j + 1 inside a warpgroup, warpgroup ping-pong,
// a persistent causal schedule.
#include "cuda/attention/attention.cuh"
#include "cuda/sm90.cuh"

namespace {

template <int D> struct Sm90Traits {
    static constexpr int kBM = 128;                   // q rows of a block: 2 warpgroups x 64
    static constexpr int kBN = D <= 128 ? 128 : 64;   // keys of a tile (D 256: O takes 128 registers)
    static constexpr int kThreads = 256;
    static constexpr int kStages = 2;
    static constexpr int kQBytes = kBM * D * 2;
    static constexpr int kTileBytes = kBN * D * 2;    // one K or one V tile
    static constexpr int kBars = 2 * kStages * 8;     // full[kStages], empty[kStages]
    static constexpr int kSmem = 1024 + kQBytes + kStages * 2 * kTileBytes + kBars; // + 1024: aligning
    static_assert(D % 64 == 0, "64-column panels of 128-byte rows");
    static_assert(kSmem <= 227 * 1024, "sm_90 shared memory per block");
};

// Shapes: q/o (rows of the sequence, n_heads, D), k/v (keys, n_kv_heads, D),
// strided as AttnParams says. Grid: x = q blocks of 128 rows (heaviest
// causal blocks first), y = q head h (reads kv head h / grp), z = sequence.
template <int D, typename T>
__global__ void __launch_bounds__(Sm90Traits<D>::kThreads, 1) attn_prefill_sm90_kernel(const AttnParams p) {
#ifdef MF_SM90A_DEVICE
    using Tr = Sm90Traits<D>;
    using namespace sm90;
    constexpr int kBM = Tr::kBM, kBN = Tr::kBN;
    constexpr int kDt = std::is_same<T, __nv_bfloat16>::value ? MF_DTYPE_BF16 : MF_DTYPE_F16;
    MF_DYN_SHARED(uint8_t, smem_raw);
    // The swizzle follows shared-memory address bits 4-9: align the tiles to 1024.
    uint8_t *base = smem_raw + (((smem_u32(smem_raw) + 1023u) & ~1023u) - smem_u32(smem_raw));
    const uint32_t sQ = smem_u32(base);                    // (kBM, D) panels
    const uint32_t sKV = sQ + Tr::kQBytes;                 // kStages x {K (kBN, D), V (kBN, D)}
    uint64_t *full = reinterpret_cast<uint64_t *>(base + Tr::kQBytes + Tr::kStages * 2 * Tr::kTileBytes);
    uint64_t *empty = full + Tr::kStages;

    const int b = blockIdx.z, h = blockIdx.y, m0 = (gridDim.x - 1 - blockIdx.x) * kBM;
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, tq = lane & 3;
    const SeqView s = attn_seq(p, b);
    PrefillRows rr;
    if (!attn_prefill_rows(p, s, h, m0, kBM, rr)) return;
    const int kvh = h / p.grp, off = rr.off, n_lo = rr.n_lo, n_hi = rr.n_hi;
    const int t_lo = n_lo / kBN, n_tiles = n_hi > n_lo ? (n_hi + kBN - 1) / kBN - t_lo : 0;

    const uint16_t *gq = static_cast<const uint16_t *>(p.q) + s.q_off + (int64_t)h * p.q_sh;
    const uint16_t *gk = static_cast<const uint16_t *>(p.k) + s.k_off + (int64_t)kvh * p.k_sh;
    const uint16_t *gv = static_cast<const uint16_t *>(p.v) + s.v_off + (int64_t)kvh * p.v_sh;

    if (tid == 0) {
        for (int st = 0; st < Tr::kStages; st++)
            mbar_init(&full[st], Tr::kThreads), mbar_init(&empty[st], Tr::kThreads);
        ptx::fence_mbarrier_init();
    }
    __syncthreads();

    // Tile it of the loop (keys (t_lo + it) * kBN ...) into stage it % 2;
    // the Q tile rides on tile 0's barrier phase.
    auto issue = [&](int it) {
        const uint32_t sk = sKV + (it & 1) * 2 * Tr::kTileBytes;
        const int n0 = (t_lo + it) * kBN;
        cp_async_panels<D, kBN, Tr::kThreads>(sk, gk, attn_k_rows(p, s), n0, s.k_len);
        cp_async_panels<D, kBN, Tr::kThreads>(sk + Tr::kTileBytes, gv, attn_v_rows(p, s), n0, s.k_len);
        mbar_arrive_cp_async(&full[it & 1]);
    };
    if (n_tiles > 0) {
        cp_async_panels<D, kBM, Tr::kThreads>(sQ, gq, p.q_sr, m0, s.q_len);
        issue(0);
    }

    float o[D / 2]; // O (this warpgroup's 64 rows x D) in the accumulator layout
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
    const int row_a = m0 + wg * 64 + warp * 16 + g; // the thread's rows: row_a, row_a + 8
    const uint32_t q_wg = sQ + wg * 64 * 128;        // this warpgroup's 64 rows of every Q panel

    for (int it = 0; it < n_tiles; it++) {
        const int st = it & 1;
        const uint32_t sK = sKV + st * 2 * Tr::kTileBytes, sV = sK + Tr::kTileBytes;
        mbar_wait(&full[st], (it >> 1) & 1);
        __syncwarp();        // the warp converged again before the .aligned wgmma instructions
        fence_proxy_async(); // the cp.async writes (generic proxy) before wgmma's reads (async proxy)

        // S = Q K^T: k step kk reads panel kk / 4 at +32 bytes per step.
        float sc[kBN / 2];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            wgmma_ss<kBN, T>(sc, desc_k(q_wg + (kk >> 2) * kBM * 128 + (kk & 3) * 32),
                             desc_k(sK + (kk >> 2) * kBN * 128 + (kk & 3) * 32), kk > 0);
        }
        wgmma_commit();

        // While the MMAs run: the next tile's loads, once both warpgroups
        // released its stage (tile it - 1).
        if (it + 1 < n_tiles) {
            if (it >= 1) mbar_wait(&empty[st ^ 1], (((it + 1) >> 1) - 1) & 1);
            issue(it + 1);
            __syncwarp();
        }
        wgmma_wait<0>();
        fence_acc(sc);

        // Into the exp2 domain (any sign of scale), then the mask on edge tiles only.
        const int n0 = (t_lo + it) * kBN;
#pragma unroll
        for (int i = 0; i < kBN / 2; i++) sc[i] *= p.scale_log2;
        if (attn_edge_tile(p, s, rr, n0, kBN)) {
#pragma unroll
            for (int i = 0; i < kBN / 2; i++) {
                const int r = row_a + ((i >> 1) & 1) * 8, j = n0 + (i >> 2) * 8 + 2 * tq + (i & 1);
                if (!attn_visible(p, r, j, s.k_len, off)) sc[i] = -INFINITY;
            }
        }

        attn_softmax_tile<kBN / 8, D / 8>([&](int i, int e) -> float & { return sc[4 * i + e]; },
                                          [&](int i, int e) -> float & { return o[4 * i + e]; }, mrow, lrow);

        // O += P V: k step j (keys 16 j ... 16 j + 15) takes accumulator groups
        // 2j, 2j + 1 as its A fragment and rows 16 j ... of V (+2048 bytes).
        uint32_t pa[kBN / 16][4];
#pragma unroll
        for (int j = 0; j < kBN / 16; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) pa[j][e] = mf_pack2(sc[8 * j + 2 * e], sc[8 * j + 2 * e + 1], kDt);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < kBN / 16; j++) wgmma_rs_tb<D, T>(o, pa[j], desc_mn(sV + j * 2048, kBN * 128));
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(o);
        mbar_arrive(&empty[st]); // this thread is done with the stage
    }

    float lse[2];
    attn_softmax_finish<D / 8>([&](int i, int e) -> float & { return o[4 * i + e]; }, mrow, lrow, lse);

    // Stores straight from the accumulators: a quad writes 16 contiguous
    // bytes of a row per 8-column group (L2 merges the sectors).
    uint16_t *go = static_cast<uint16_t *>(p.o) + s.o_off + (int64_t)h * p.o_sh;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row_a + 8 * r;
        if (row >= s.q_len) continue;
        uint16_t *orow = go + (int64_t)row * p.o_sr + 2 * tq;
#pragma unroll
        for (int i = 0; i < D / 8; i++)
            *reinterpret_cast<uint32_t *>(orow + 8 * i) = mf_pack2(o[4 * i + 2 * r], o[4 * i + 2 * r + 1], kDt);
        if (p.lse && tq == 0) p.lse[s.l_off + (int64_t)row * p.l_sr + (int64_t)h * p.l_sh] = lse[r];
    }
#else
    (void)p;
    __trap(); // never launched: mf_cuda_attn_sm90_available() is false without sm_90a code
#endif
}

template <int D, typename T> mf_status launch(mf_cuda_ctx *c, const AttnParams &p) {
    using Tr = Sm90Traits<D>;
    const dim3 grid((unsigned)((p.max_q_len + Tr::kBM - 1) / Tr::kBM), (unsigned)p.n_heads, (unsigned)p.batch);
    MF_LAUNCH((attn_prefill_sm90_kernel<D, T>), grid, Tr::kThreads, Tr::kSmem, c->stream, p);
    MF_CUDA_CHECK_LAUNCH("attn_prefill_sm90");
    return MF_OK;
}

template <int D> bool set_up(int optin) {
    if (optin < Sm90Traits<D>::kSmem) return false;
    void (*kernels[2])(AttnParams) = {attn_prefill_sm90_kernel<D, __nv_bfloat16>, attn_prefill_sm90_kernel<D, __half>};
    for (auto *k : kernels) {
        cudaFuncAttributes fa;
        if (cudaFuncGetAttributes(&fa, k) != cudaSuccess || fa.binaryVersion != 90 ||
            cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, Sm90Traits<D>::kSmem) != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
    }
    return true;
}

} // namespace

// Asked once per backend (answered again, uncached, if its state cannot be made).
bool mf_cuda_attn_sm90_available(mf_cuda_ctx *c) {
    mf_cuda_attention_state *s = mf_cuda_attention_state_of(c);
    if (s && s->sm90 != 0) return s->sm90 > 0;
    bool ok = false;
#ifdef MF_CUDA_SM90A
    int optin = 0;
    if (c->cc_major == 9 && c->cc_minor == 0) {
        if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device) != cudaSuccess) {
            (void)cudaGetLastError();
            optin = 0;
        }
        // The sm_90a images must be the ones loaded (not a JIT of compute_80 PTX).
        ok = optin > 0 && set_up<64>(optin) && set_up<128>(optin) && set_up<256>(optin);
    }
#endif
    if (s) s->sm90 = ok ? 1 : -1;
    return ok;
}

bool mf_cuda_attn_sm90_fits(mf_cuda_ctx *c, const AttnParams &p) {
    if (p.dt != MF_DTYPE_F16 && p.dt != MF_DTYPE_BF16) return false;
    if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return false;
    if (p.batch > 65535 || p.n_heads > 65535 || p.max_q_len <= 0) return false;
    if (!mf_aligned16(p.q) || !mf_aligned16(p.k) || !mf_aligned16(p.v) || !mf_aligned16(p.o)) return false;
    const int64_t st[] = {p.q_sr, p.q_sh, p.k_sr, p.k_sh, p.v_sr, p.v_sh, p.o_sr, p.o_sh,
                          p.q_sb, p.k_sb, p.v_sb, p.o_sb};
    for (int64_t x : st)
        if (x % 8) return false;
    return mf_cuda_attn_sm90_available(c);
}

mf_status mf_cuda_attn_prefill_sm90(mf_cuda_ctx *c, const AttnParams &p) {
    const bool bf = p.dt == MF_DTYPE_BF16;
    if (p.head_dim == 64) return bf ? launch<64, __nv_bfloat16>(c, p) : launch<64, __half>(c, p);
    if (p.head_dim == 128) return bf ? launch<128, __nv_bfloat16>(c, p) : launch<128, __half>(c, p);
    return bf ? launch<256, __nv_bfloat16>(c, p) : launch<256, __half>(c, p);
}
