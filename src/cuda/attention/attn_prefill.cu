// FlashAttention-2 style forward on tensor cores (mma.sync m16n8k16, f16 or
// bf16 in, f32 accumulate), for head dims 64 and 128, all three modes of
// mf_attention (fixed, packed varlen, KV cache). Written for minfer from the
// published FA2 algorithm (Dao, 2023); no code taken from any project.
#include <atomic>

#include "cuda/attention/attention.cuh"

namespace {

// Tile shapes. One block = kBlockM query rows of one (sequence, head); each
// of the kWarps warps owns 16 rows (one mma M tile), so the softmax row
// statistics never cross warps and no block-wide reduction is needed.
template <int D> struct PrefillTraits {
    static constexpr int kHeadDim = D;
    static constexpr int kWarps = 8;
    static constexpr int kThreads = kWarps * 32;
    static constexpr int kBlockM = kWarps * 16; // 128: each K/V tile read from smem by 8 warps
    static constexpr int kBlockN = 64;          // keys per tile: S is 16 x 64 per warp = 32 f32 regs
    static constexpr int kStages = 2;           // K/V tiles in flight (cp.async double buffer)
    static constexpr int kChunks = D / 8;       // 16-byte chunks per row
    // d128: Q frag 32 + O 64 + S 32 regs per thread + addressing -> ptxas 245
    // regs, one block of 8 warps per SM. d64 under a 128-reg cap (two blocks
    // per SM) spilled 48 bytes on sm_90a, so it also takes one block per SM.
    static constexpr int kMinBlocks = 1;
    static constexpr int kSmemBytes = (kBlockM + 2 * kStages * kBlockN) * D * 2;

    static_assert(kHeadDim % 16 == 0, "the mma K step (QK^T) and the V n-tile pairs are 16 wide");
    static_assert(kChunks >= 8 && (kChunks & (kChunks - 1)) == 0,
                  "the XOR swizzle permutes chunk bits 0..2 inside a row: needs 8, 16, ... chunks per row");
    static_assert(kBlockN % 16 == 0, "P (C layout of 8-wide n tiles) is re-read as 16-wide A tiles");
    static_assert((kBlockN * kChunks) % kThreads == 0 && (kBlockM * kChunks) % kThreads == 0,
                  "every thread issues the same number of cp.async per tile");
    static_assert(kStages >= 2, "one tile computes while the next loads");
    static_assert(kSmemBytes * kMinBlocks <= 227 * 1024, "shared memory per SM (H100/A100 227/163 KB)");
};

// Swizzled smem offset (elements) of chunk `ch` of row `row` in a tile of
// D-wide rows: chunk ^ (row & 7) puts the 8 rows an ldmatrix phase reads
// (same logical chunk) in 8 different 16-byte bank groups; rows are a
// multiple of 128 bytes, so no padding is needed.
template <int D> __device__ __forceinline__ int swz(int row, int ch) { return row * D + ((ch ^ (row & 7)) << 3); }

// 16 bytes global -> shared; pred false reads nothing (the 16 smem bytes are zero-filled).
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool pred MF_PTX_LOC) {
    ptx::cp_async_cg16(ptx::smem_u32(smem MF_PTX_AT), gmem, pred ? 16 : 0 MF_PTX_AT);
}
__device__ __forceinline__ void cp_async_commit(MF_PTX_LOC1) { ptx::cp_async_commit(MF_PTX_AT1); }
template <int N> __device__ __forceinline__ void cp_async_wait(MF_PTX_LOC1) { ptx::cp_async_wait<N>(MF_PTX_AT1); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *smem MF_PTX_LOC) {
    ptx::ldmatrix_x4(r, ptx::smem_u32(smem MF_PTX_AT) MF_PTX_AT);
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *smem MF_PTX_LOC) {
    ptx::ldmatrix_x4_trans(r, ptx::smem_u32(smem MF_PTX_AT) MF_PTX_AT);
}

// c += a (16x16, row) * b (16x8, col); fragment layout (g = lane / 4, t = lane % 4):
// a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..);
// b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g); c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1).
template <bool BF16>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1 MF_PTX_LOC) {
    ptx::mma_m16n8k16<BF16>(c, a, b0, b1 MF_PTX_AT);
}

// Issue the cp.async of one kBlockN x D tile (keys n0.. of one head, rows
// where `rows` says: one run, or a paged cache's blocks) into smem; rows at
// or past k_len are zero-filled, never read, so that a NaN in the cache past
// the sequence cannot reach P.V (0 * NaN = NaN).
template <int D>
__device__ __forceinline__ void load_tile(uint16_t *sm, const uint16_t *g, const KeyRows &rows, int n0, int k_len) {
    using Tr = PrefillTraits<D>;
#pragma unroll
    for (int i = 0; i < Tr::kBlockN * Tr::kChunks / Tr::kThreads; i++) {
        const int c = threadIdx.x + i * Tr::kThreads;
        const int row = c / Tr::kChunks, ch = c % Tr::kChunks;
        const bool ok = n0 + row < k_len;
        cp_async16(sm + swz<D>(row, ch), ok ? g + rows(n0 + row) + ch * 8 : g, ok);
    }
}

// Shapes: q/o (rows of the sequence, n_heads, D), k/v (keys, n_kv_heads, D),
// strided as AttnParams says. Grid: x = q blocks of kBlockM rows (heaviest
// causal blocks first), y = q head h (reads kv head h / grp), z = sequence.
// Block: 8 warps; warp w owns rows m0 + 16w .. +15 for the whole key loop:
// Q fragments in registers, S = Q K^T (16 x kBlockN) and O (16 x D) in f32
// mma accumulators, softmax statistics (max in the exp2 domain, sum) for
// the thread's two rows g and g + 8. K/V tiles pass through a kStages-deep
// cp.async ring; only tiles crossing the k_len / causal / window edge pay
// for the mask, and tiles wholly masked are never visited.
template <int D, bool BF16>
__global__ void __launch_bounds__(PrefillTraits<D>::kThreads, PrefillTraits<D>::kMinBlocks)
    attn_prefill_kernel(const AttnParams p) {
    using Tr = PrefillTraits<D>;
    constexpr int kBlockM = Tr::kBlockM, kBlockN = Tr::kBlockN, kStages = Tr::kStages;
    constexpr int kDt = BF16 ? MF_DTYPE_BF16 : MF_DTYPE_F16;
    MF_DYN_SHARED(uint4, smem_u4);
    uint16_t *sQ = reinterpret_cast<uint16_t *>(smem_u4); // (kBlockM, D), later the O staging tile
    uint16_t *sKV = sQ + kBlockM * D;                      // kStages x {K (kBlockN, D), V (kBlockN, D)}

    const int b = blockIdx.z, h = blockIdx.y, m0 = (gridDim.x - 1 - blockIdx.x) * kBlockM;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
    const SeqView s = attn_seq(p, b);
    PrefillRows rr;
    if (!attn_prefill_rows(p, s, h, m0, kBlockM, rr)) return;
    const int kvh = h / p.grp, off = rr.off, n_lo = rr.n_lo, n_hi = rr.n_hi;
    const int t_lo = n_lo / kBlockN, t_hi = n_hi > n_lo ? (n_hi + kBlockN - 1) / kBlockN : t_lo;

    const uint16_t *gq = static_cast<const uint16_t *>(p.q) + s.q_off + (int64_t)h * p.q_sh;
    const uint16_t *gk = static_cast<const uint16_t *>(p.k) + s.k_off + (int64_t)kvh * p.k_sh;
    const uint16_t *gv = static_cast<const uint16_t *>(p.v) + s.v_off + (int64_t)kvh * p.v_sh;
    const KeyRows kr = attn_k_rows(p, s), vr = attn_v_rows(p, s);

    // Q tile (rows past q_len zero), then the first kStages - 1 K/V tiles.
#pragma unroll
    for (int i = 0; i < kBlockM * Tr::kChunks / Tr::kThreads; i++) {
        const int c = tid + i * Tr::kThreads, row = c / Tr::kChunks, ch = c % Tr::kChunks;
        const bool ok = m0 + row < s.q_len;
        cp_async16(sQ + swz<D>(row, ch), ok ? gq + (int64_t)(m0 + row) * p.q_sr + ch * 8 : gq, ok);
    }
    cp_async_commit();
#pragma unroll
    for (int st = 0; st < kStages - 1; st++) {
        if (t_lo + st < t_hi) {
            uint16_t *sk = sKV + st * 2 * kBlockN * D;
            load_tile<D>(sk, gk, kr, (t_lo + st) * kBlockN, s.k_len);
            load_tile<D>(sk + kBlockN * D, gv, vr, (t_lo + st) * kBlockN, s.k_len);
        }
        cp_async_commit(); // possibly empty: keeps the group count uniform
    }
    cp_async_wait<kStages - 1>(); // the Q group is complete
    __syncthreads();

    // Q fragments (A operand) of the warp's 16 rows: ldmatrix x4 matrices are
    // (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        ldsm_x4(qf[kk], sQ + swz<D>(warp * 16 + (lane & 15), kk * 2 + (lane >> 4)));

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
    const int row_a = m0 + warp * 16 + g; // the thread's rows: row_a, row_a + 8

    for (int t = t_lo; t < t_hi; t++) {
        const int it = t - t_lo;
        {
            const int tn = t + kStages - 1;
            if (tn < t_hi) {
                uint16_t *sk = sKV + ((it + kStages - 1) % kStages) * 2 * kBlockN * D;
                load_tile<D>(sk, gk, kr, tn * kBlockN, s.k_len);
                load_tile<D>(sk + kBlockN * D, gv, vr, tn * kBlockN, s.k_len);
            }
            cp_async_commit();
        }
        cp_async_wait<kStages - 1>(); // tile t has landed (this thread's copies)
        __syncthreads();              // ... and every thread's
        const uint16_t *sK = sKV + (it % kStages) * 2 * kBlockN * D, *sV = sK + kBlockN * D;

        // S = Q K^T. K is stored (key, d): a non-transposed ldmatrix of 8 keys x
        // 8 dims is exactly a B fragment. x4: (n 0-7, k 0-7) b0 and (n 0-7, k 8-15)
        // b1 of n-tile 2np, then the same for keys 8-15 (n-tile 2np + 1).
        float sc[kBlockN / 8][4];
#pragma unroll
        for (int i = 0; i < kBlockN / 8; i++) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
            for (int np = 0; np < kBlockN / 16; np++) {
                uint32_t kb[4];
                ldsm_x4(kb, sK + swz<D>(np * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)));
                mma16816<BF16>(sc[2 * np], qf[kk], kb[0], kb[1]);
                mma16816<BF16>(sc[2 * np + 1], qf[kk], kb[2], kb[3]);
            }
        }

        // Into the exp2 domain (any sign of scale), then the mask on edge tiles only.
        const int n0 = t * kBlockN;
#pragma unroll
        for (int i = 0; i < kBlockN / 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) sc[i][e] *= p.scale_log2;
        if (attn_edge_tile(p, s, rr, n0, kBlockN)) {
#pragma unroll
            for (int i = 0; i < kBlockN / 8; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = row_a + (e >> 1) * 8, j = n0 + i * 8 + 2 * tq + (e & 1);
                    if (!attn_visible(p, r, j, s.k_len, off)) sc[i][e] = -INFINITY;
                }
        }

        attn_softmax_tile<kBlockN / 8, D / 8>([&](int i, int e) -> float & { return sc[i][e]; },
                                              [&](int i, int e) -> float & { return o[i][e]; }, mrow, lrow);

        // O += P V. P's C fragments of n-tiles 2kk, 2kk+1 are the A fragment of
        // key step kk. V is stored (key, d): ldmatrix.trans of 8 keys x 8 dims is
        // a B fragment; x4: (keys 0-7, d 0-7) b0, (keys 8-15, d 0-7) b1 of d-tile
        // 2dp, then the same for dims 8-15 (d-tile 2dp + 1).
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; kk++) {
            const uint32_t pa[4] = {mf_pack2(sc[2 * kk][0], sc[2 * kk][1], kDt),
                                    mf_pack2(sc[2 * kk][2], sc[2 * kk][3], kDt),
                                    mf_pack2(sc[2 * kk + 1][0], sc[2 * kk + 1][1], kDt),
                                    mf_pack2(sc[2 * kk + 1][2], sc[2 * kk + 1][3], kDt)};
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t vb[4];
                ldsm_x4_t(vb, sV + swz<D>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), dp * 2 + (lane >> 4)));
                mma16816<BF16>(o[2 * dp], pa, vb[0], vb[1]);
                mma16816<BF16>(o[2 * dp + 1], pa, vb[2], vb[3]);
            }
        }
        __syncthreads(); // everyone is done with this stage before it is refilled
    }
    cp_async_wait<0>();

    float lse[2];
    attn_softmax_finish<D / 8>([&](int i, int e) -> float & { return o[i][e]; }, mrow, lrow, lse);

    // Stage the warp's 16 rows in its own rows of sQ (only this warp read
    // them), then 16-byte coalesced stores of whole rows. The __syncwarp
    // orders the lanes' ldmatrix reads of those rows before the writes: a
    // block that visits no key tile (k_len 0) has no barrier in between, and
    // lanes are separate threads (found by the emulator's TSan mode).
    __syncwarp();
#pragma unroll
    for (int i = 0; i < D / 8; i++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = warp * 16 + g + 8 * r;
            *reinterpret_cast<uint32_t *>(sQ + swz<D>(row, i) + 2 * tq) = mf_pack2(o[i][2 * r], o[i][2 * r + 1], kDt);
        }
    __syncwarp();
    uint16_t *go = static_cast<uint16_t *>(p.o) + s.o_off + (int64_t)h * p.o_sh;
#pragma unroll
    for (int i = 0; i < 16 * Tr::kChunks / 32; i++) {
        const int c = lane + i * 32, rr = c / Tr::kChunks, ch = c % Tr::kChunks;
        const int row = warp * 16 + rr;
        if (m0 + row < s.q_len)
            *reinterpret_cast<uint4 *>(go + (int64_t)(m0 + row) * p.o_sr + ch * 8) =
                *reinterpret_cast<const uint4 *>(sQ + swz<D>(row, ch));
    }
    if (p.lse && tq == 0) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = row_a + 8 * r;
            if (row < s.q_len) p.lse[s.l_off + (int64_t)row * p.l_sr + (int64_t)h * p.l_sh] = lse[r];
        }
    }
}

template <int D, bool BF16> mf_status launch(mf_cuda_ctx *c, const AttnParams &p) {
    using Tr = PrefillTraits<D>;
    auto kern = attn_prefill_kernel<D, BF16>;
    // The opt-in above 48 KB is per kernel and device: done once per device
    // (ordinals past 63 set it every launch).
    static std::atomic<uint64_t> opted{0};
    const uint64_t bit = c->device < 64 ? (uint64_t)1 << c->device : 0;
    if (Tr::kSmemBytes > 48 * 1024 && (!bit || !(opted.load(std::memory_order_relaxed) & bit))) {
        MF_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes));
        opted.fetch_or(bit, std::memory_order_relaxed);
    }
    const dim3 grid((unsigned)((p.max_q_len + Tr::kBlockM - 1) / Tr::kBlockM), (unsigned)p.n_heads, (unsigned)p.batch);
    MF_LAUNCH(kern, grid, Tr::kThreads, Tr::kSmemBytes, c->stream, p);
    MF_CUDA_CHECK_LAUNCH("attn_prefill");
    return MF_OK;
}

bool aligned_stride(int64_t s) { return s % 8 == 0; }

} // namespace

bool mf_cuda_attn_prefill_fits(const AttnParams &p) {
    if (p.dt != MF_DTYPE_F16 && p.dt != MF_DTYPE_BF16) return false;
    if (p.head_dim != 64 && p.head_dim != 128) return false;
    if (p.batch > 65535 || p.n_heads > 65535 || p.max_q_len <= 0) return false;
    if (!mf_aligned16(p.q) || !mf_aligned16(p.k) || !mf_aligned16(p.v) || !mf_aligned16(p.o)) return false;
    const int64_t st[] = {p.q_sr, p.q_sh, p.k_sr, p.k_sh, p.v_sr, p.v_sh, p.o_sr, p.o_sh,
                          p.q_sb, p.k_sb, p.v_sb, p.o_sb};
    for (int64_t x : st)
        if (!aligned_stride(x)) return false;
    return true;
}

mf_status mf_cuda_attn_prefill(mf_cuda_ctx *c, const AttnParams &p) {
    const bool bf = p.dt == MF_DTYPE_BF16;
    if (p.head_dim == 64) return bf ? launch<64, true>(c, p) : launch<64, false>(c, p);
    return bf ? launch<128, true>(c, p) : launch<128, false>(c, p);
}
