// Split-KV attention for few query rows per sequence (decode over the KV
// cache; valid for any mode and any q_len, and so also the CUDA-core path
// for f32 and head dims without a tensor-core kernel). Memory-bound: the
// query rows of all grp heads that share a KV head are processed together,
// so each K/V byte is read once per split, with 16-byte loads.
#include <algorithm>

#include "cuda/attention/attention.cuh"

namespace {

constexpr int kDecThreads = 128; // 4 warps, each a private online softmax over its keys
constexpr int kDecWarps = kDecThreads / 32;
constexpr int kMaxRows = 8;      // query rows (q row x head of the group) per block, at most
constexpr int kUnroll = 2;       // key steps whose K/V loads are in flight together
constexpr int kMinSplitKeys = 128; // a split reads at least this many keys (else the combine costs more)
constexpr int kWavesPerSm = 4;     // auto split count aims at this many 4-warp blocks per SM

// Shapes: q/o (rows, n_heads, D), k/v (keys or slots x max_len, n_kv_heads, D).
// Grid: x = split (keys [split * chunk, +chunk) of the sequence), y = kv head
// x row group (kMaxRows of the q_len * grp rows (qi, head of the group),
// row r -> qi = r / grp, head = kvh * grp + r % grp), z = sequence.
// Block: 4 warps. A key row is read by kLpk = D / 8 lanes (8 elements, one
// 16-byte chunk each for f16/bf16), so a warp step covers 32 / kLpk keys;
// warp w takes steps w, w + 4, ... The lanes of one key hold their 8 dims of
// every query row (q pre-scaled into the exp2 domain) and of the O
// accumulator; the dot product is reduced over the kLpk lanes, the running
// max over the whole warp (so the rescale of O is uniform and rare). At the
// end the key groups, then the warps, are merged through shared memory.
// n_splits == 1: o and lse are written here; else the unnormalised O, the
// max m (exp2 domain) and the sum l go to ws_o / ws_ml for combine_kernel.
// R: the rows a block holds (4 or 8; q, O take 16 R registers per thread, so
// R = 4 leaves room for more resident warps, i.e. more loads in flight).
template <int D, int R>
__global__ void __launch_bounds__(kDecThreads, R == 4 ? 3 : 1)
    attn_decode_kernel(const AttnParams p, int n_splits, int n_rg, float *ws_o, float *ws_ml) {
    constexpr int kMaxRows = R;
    constexpr int kLpk = D / 8, kKeys = 32 / kLpk;
    static_assert(D % 8 == 0 && kLpk <= 32 && 32 % kLpk == 0, "a key row is 8-element chunks over a lane group");
    static_assert(R <= ::kMaxRows, "row_groups() sizes the grid by the widest R");
    MF_SHARED(float, sm_o, [kDecWarps][kMaxRows][D]);
    MF_SHARED(float, sm_m, [kDecWarps][kMaxRows]);
    MF_SHARED(float, sm_l, [kDecWarps][kMaxRows]);

    const int split = blockIdx.x, kvh = blockIdx.y / n_rg, rg = blockIdx.y % n_rg, b = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, kg = lane / kLpk, dp = lane % kLpk;
    const SeqView s = attn_seq(p, b);
    if (!s.ok && split == 0 && blockIdx.y == 0 && tid == 0) atomicAdd(p.err, 1u);
    const int r0 = rg * kMaxRows;
    if (!s.ok) { // zero-filled here (every row, also those past the grid when q_len > max_q_len) and again by the combine
        const int64_t n_bad = (int64_t)s.q_len * p.grp; // int64: a bad q_len can be up to total_q
        if (split == 0)
            for (int64_t r = r0; r < n_bad; r += n_rg * kMaxRows)
                for (int64_t q = r; q < min(n_bad, r + kMaxRows); q++)
                    attn_zero_rows(p, s, kvh * p.grp + (int)(q % p.grp), (int)(q / p.grp), (int)(q / p.grp) + 1);
        return;
    }
    const int n_rows = s.q_len * p.grp; // <= max_q_len * grp, which the grid holds
    if (r0 >= n_rows) return;
    const int rows = min(kMaxRows, n_rows - r0);
    const int off = s.k_len - s.q_len;

    // Keys of this split, trimmed to those some row of the block can see.
    const int chunk = (s.k_len + n_splits - 1) / n_splits;
    int k0 = split * chunk, k1 = min(s.k_len, k0 + chunk);
    if (p.causal) {
        const int qi_lo = r0 / p.grp, qi_hi = (r0 + rows - 1) / p.grp;
        k1 = min(k1, qi_hi + off + 1);
        if (p.window > 0) k0 = (int)max((int64_t)k0, (int64_t)qi_lo + off - p.window + 1); // int64: window up to INT_MAX
    }

    int qi[kMaxRows], hh[kMaxRows];
    float q[kMaxRows][8], o[kMaxRows][8], m[kMaxRows], l[kMaxRows];
#pragma unroll
    for (int r = 0; r < kMaxRows; r++) {
        const int rr = min(r, rows - 1); // padding rows repeat the last real one, never stored
        qi[r] = (r0 + rr) / p.grp, hh[r] = kvh * p.grp + (r0 + rr) % p.grp;
        mf_ld8(p.q, p.dt, s.q_off + (int64_t)qi[r] * p.q_sr + (int64_t)hh[r] * p.q_sh + dp * 8, q[r]);
#pragma unroll
        for (int d = 0; d < 8; d++) q[r][d] *= p.scale_log2, o[r][d] = 0.0f;
        m[r] = -INFINITY, l[r] = 0.0f;
    }

    const int64_t kb = s.k_off + (int64_t)kvh * p.k_sh + dp * 8, vb = s.v_off + (int64_t)kvh * p.v_sh + dp * 8;
    const KeyRows kr = attn_k_rows(p, s), vr = attn_v_rows(p, s);
    for (int j0 = k0 + warp * kKeys; j0 < k1; j0 += kDecWarps * kKeys * kUnroll) {
        float kf[kUnroll][8], vf[kUnroll][8];
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const int j = j0 + u * kDecWarps * kKeys + kg;
            if (j < k1) { // past k1 nothing is read: NaN in the cache stays out
                mf_ld8(p.k, p.dt, kb + kr(j), kf[u]);
                mf_ld8(p.v, p.dt, vb + vr(j), vf[u]);
            } else {
#pragma unroll
                for (int d = 0; d < 8; d++) kf[u][d] = vf[u][d] = 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const int j = j0 + u * kDecWarps * kKeys + kg;
#pragma unroll
            for (int r = 0; r < kMaxRows; r++) {
                if (r >= rows) break;
                float sc = 0.0f;
#pragma unroll
                for (int d = 0; d < 8; d++) sc = fmaf(q[r][d], kf[u][d], sc);
#pragma unroll
                for (int x = 1; x < kLpk; x <<= 1) sc += __shfl_xor_sync(0xffffffffu, sc, x);
                if (j >= k1 || !attn_visible(p, qi[r], j, s.k_len, off)) sc = -INFINITY;
                float mx = sc;
#pragma unroll
                for (int x = kLpk; x < 32; x <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, x));
                if (mx > m[r]) { // warp-uniform
                    const float alpha = attn_exp2(m[r] - mx);
                    l[r] *= alpha;
#pragma unroll
                    for (int d = 0; d < 8; d++) o[r][d] *= alpha;
                    m[r] = mx;
                }
                const float pr = sc == -INFINITY ? 0.0f : attn_exp2(sc - m[r]);
                l[r] += pr;
                if (pr != 0.0f) // a key hidden from this row adds nothing, even an inf / NaN value (as on the CPU)
#pragma unroll
                    for (int d = 0; d < 8; d++) o[r][d] = fmaf(pr, vf[u][d], o[r][d]);
            }
        }
    }

    // Merge the key groups of the warp (same m), then the warps.
#pragma unroll
    for (int r = 0; r < kMaxRows; r++) {
#pragma unroll
        for (int x = kLpk; x < 32; x <<= 1) {
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], x);
#pragma unroll
            for (int d = 0; d < 8; d++) o[r][d] += __shfl_xor_sync(0xffffffffu, o[r][d], x);
        }
        if (kg == 0) {
#pragma unroll
            for (int d = 0; d < 8; d++) sm_o[warp][r][dp * 8 + d] = o[r][d];
        }
        if (lane == 0) sm_m[warp][r] = m[r], sm_l[warp][r] = l[r];
    }
    __syncthreads();
    for (int e = tid; e < rows * D; e += kDecThreads) {
        const int r = e / D, d = e % D;
        float mm = -INFINITY;
#pragma unroll
        for (int w = 0; w < kDecWarps; w++) mm = fmaxf(mm, sm_m[w][r]);
        float ll = 0.0f, oo = 0.0f;
        if (mm != -INFINITY) {
#pragma unroll
            for (int w = 0; w < kDecWarps; w++) {
                const float c = attn_exp2(sm_m[w][r] - mm); // -inf - finite: 0
                ll += sm_l[w][r] * c, oo += sm_o[w][r][d] * c;
            }
        }
        const int qr = (r0 + r) / p.grp, h = kvh * p.grp + (r0 + r) % p.grp;
        if (n_splits == 1) {
            mf_st(p.o, p.dt, s.o_off + (int64_t)qr * p.o_sr + (int64_t)h * p.o_sh + d, ll > 0.0f ? oo / ll : 0.0f);
            if (p.lse && d == 0)
                p.lse[s.l_off + (int64_t)qr * p.l_sr + (int64_t)h * p.l_sh] =
                    ll > 0.0f ? (mm + __log2f(ll)) * kLn2 : -INFINITY;
        } else {
            const int64_t slot = ((int64_t)split * p.total_q + s.row0 + qr) * p.n_heads + h;
            ws_o[slot * D + d] = oo;
            if (d == 0) ws_ml[slot * 2] = mm, ws_ml[slot * 2 + 1] = ll;
        }
    }
}

// Merge of the split partials by log-sum-exp: o = sum_s o_s 2^(m_s - M) /
// sum_s l_s 2^(m_s - M). Grid: x = q row of the sequence, y = head, z =
// sequence; block: threads over D.
__global__ void __launch_bounds__(128)
    attn_combine_kernel(const AttnParams p, int n_splits, const float *ws_o, const float *ws_ml) {
    const int qr = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const SeqView s = attn_seq(p, b);
    if (qr >= s.q_len) return;
    if (!s.ok) { // every row, also those past the grid (q_len > max_q_len)
        for (int r = qr; r < s.q_len; r += gridDim.x) attn_zero_rows(p, s, h, r, r + 1);
        return;
    }
    const int64_t row = (s.row0 + qr) * p.n_heads + h, stride = p.total_q * p.n_heads;
    float mm = -INFINITY;
    for (int k = 0; k < n_splits; k++) mm = fmaxf(mm, ws_ml[(k * stride + row) * 2]);
    float ll = 0.0f;
    if (mm != -INFINITY)
        for (int k = 0; k < n_splits; k++)
            ll += ws_ml[(k * stride + row) * 2 + 1] * attn_exp2(ws_ml[(k * stride + row) * 2] - mm);
    const float inv = ll > 0.0f ? 1.0f / ll : 0.0f;
    for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
        float oo = 0.0f;
        if (mm != -INFINITY)
            for (int k = 0; k < n_splits; k++)
                oo += ws_o[(k * stride + row) * p.head_dim + d] * attn_exp2(ws_ml[(k * stride + row) * 2] - mm);
        mf_st(p.o, p.dt, s.o_off + (int64_t)qr * p.o_sr + (int64_t)h * p.o_sh + d, oo * inv);
    }
    if (p.lse && threadIdx.x == 0)
        p.lse[s.l_off + (int64_t)qr * p.l_sr + (int64_t)h * p.l_sh] = ll > 0.0f ? (mm + __log2f(ll)) * kLn2 : -INFINITY;
}

// Rows per block: 4 when every sequence's q_len * grp fits (Llama-style decode,
// grp 4), else 8; D 32 and 256 take 8 only (fewer instantiations).
int rows_per_block(const AttnParams &p) {
    return (int64_t)p.max_q_len * p.grp <= 4 && (p.head_dim == 64 || p.head_dim == 128) ? 4 : kMaxRows;
}
int row_groups(const AttnParams &p) {
    const int r = rows_per_block(p);
    return (int)(((int64_t)p.max_q_len * p.grp + r - 1) / r);
}

template <int D, int R>
mf_status launch(mf_cuda_ctx *c, const AttnParams &p, int n_splits, float *ws_o, float *ws_ml) {
    const int n_rg = row_groups(p);
    const dim3 grid((unsigned)n_splits, (unsigned)(p.n_kv_heads * n_rg), (unsigned)p.batch);
    MF_LAUNCH((attn_decode_kernel<D, R>), grid, kDecThreads, 0, c->stream, p, n_splits, n_rg, ws_o, ws_ml);
    MF_CUDA_CHECK_LAUNCH("attn_decode");
    return MF_OK;
}

} // namespace

bool mf_cuda_attn_decode_fits(const AttnParams &p) {
    const int d = p.head_dim;
    if (d != 32 && d != 64 && d != 128 && d != 256) return false;
    if (p.batch > 65535 || p.n_heads > 65535 || p.max_q_len <= 0 || (int64_t)p.n_kv_heads * row_groups(p) > 65535)
        return false; // grid limits of the decode and combine launches
    if (!mf_aligned16(p.q) || !mf_aligned16(p.k) || !mf_aligned16(p.v)) return false;
    const int64_t st[] = {p.q_sr, p.q_sh, p.k_sr, p.k_sh, p.v_sr, p.v_sh, p.q_sb, p.k_sb, p.v_sb};
    for (int64_t x : st)
        if (x % 8 != 0) return false; // 8-element chunks stay 16-byte aligned (f32: two 16-byte halves)
    return true;
}

int mf_cuda_attn_decode_splits(const mf_cuda_ctx *c, const AttnParams &p, int num_splits) {
    const int max_by_len = (int)std::max<int64_t>(1, ((int64_t)p.max_k_len + kMinSplitKeys - 1) / kMinSplitKeys);
    if (num_splits > 0) return std::min(num_splits, std::max(1, p.max_k_len)); // fixed: deterministic
    // Enough blocks to keep ~kWavesPerSm blocks (12-16 warps of loads in flight)
    // on every SM (sm_count is read once, at backend creation).
    const int64_t base = (int64_t)p.batch * p.n_kv_heads * row_groups(p);
    const int64_t want = (kWavesPerSm * (int64_t)c->sm_count + base - 1) / base;
    return (int)std::min<int64_t>(std::min<int64_t>(want, max_by_len), 256);
}

size_t mf_cuda_attn_decode_ws_bytes(const AttnParams &p, int splits) {
    if (splits <= 1) return 0;
    return (size_t)splits * (size_t)p.total_q * (size_t)p.n_heads * (size_t)(p.head_dim + 2) * sizeof(float);
}

mf_status mf_cuda_attn_decode(mf_cuda_ctx *c, const AttnParams &p, int num_splits, void *ws, size_t ws_bytes) {
    int n = mf_cuda_attn_decode_splits(c, p, num_splits);
    const size_t per = mf_cuda_attn_decode_ws_bytes(p, 2) / 2;
    if (n > 1 && (!ws || mf_cuda_attn_decode_ws_bytes(p, n) > ws_bytes)) n = ws ? (int)std::min<size_t>(n, ws_bytes / per) : 1;
    if (n < 2 || !mf_aligned16(ws)) n = 1; // too little scratch: fewer splits, never a failure
    float *ws_o = n > 1 ? static_cast<float *>(ws) : nullptr;
    float *ws_ml = n > 1 ? ws_o + (size_t)n * p.total_q * p.n_heads * p.head_dim : nullptr;
    mf_status st;
    const bool r4 = rows_per_block(p) == 4;
    switch (p.head_dim) {
    case 32: st = launch<32, 8>(c, p, n, ws_o, ws_ml); break;
    case 64: st = r4 ? launch<64, 4>(c, p, n, ws_o, ws_ml) : launch<64, 8>(c, p, n, ws_o, ws_ml); break;
    case 128: st = r4 ? launch<128, 4>(c, p, n, ws_o, ws_ml) : launch<128, 8>(c, p, n, ws_o, ws_ml); break;
    default: st = launch<256, 8>(c, p, n, ws_o, ws_ml); break;
    }
    if (st != MF_OK || n == 1) return st;
    const dim3 grid((unsigned)p.max_q_len, (unsigned)p.n_heads, (unsigned)p.batch);
    MF_LAUNCH(attn_combine_kernel, grid, 128, 0, c->stream, p, n, ws_o, ws_ml);
    MF_CUDA_CHECK_LAUNCH("attn_combine");
    return MF_OK;
}
