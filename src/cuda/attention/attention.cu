// mf_attention on CUDA: builds the kernel parameters from the validated
// arguments and picks one of three kernels:
//   decode   (attn_decode.cu)  few q rows per KV head (q_len * grp <= 16), any
//            dtype, D in {32, 64, 128, 256}: split-KV, memory-bound;
//   prefill  (attn_prefill.cu) f16/bf16, D in {64, 128}: FlashAttention-2 on
//            tensor cores (mma.sync);
//   wgmma    (attn_prefill_sm90.cu) the same on Hopper's warpgroup MMAs,
//            f16/bf16, D in {64, 128, 256}, sm_90a: opt-in with
//            MINFER_ATTN=wgmma until an H100 has checked it;
//   fallback (here)            everything else up to D = 256 (f32 prefill,
//            odd head dims, unaligned views): one warp per (q row, head),
//            CUDA cores, correct but slow.
// Bad device lengths zero-fill the sequence's rows and count on the
// context's error slot kMfErrAttention; mf_backend_sync reports them.
#include <climits>
#include <cstdlib>
#include <cstring>

#include "core/alloc.h"
#include "cuda/attention/attention.cuh"
#include "cuda/cuda_query.h"

namespace {

constexpr int kDecodeRows = 16; // q_len * grp up to this: the split-KV kernel
// Longest sequence on CUDA: the kernels step key / row indices in int by up
// to a few hundred past a bound; this margin keeps those sums from overflowing.
constexpr int64_t kMaxSeqLen = INT_MAX - 4096;
constexpr int kFbWarps = 4;     // fallback block: 4 heads of one q row
constexpr int kFbMaxD = 256;    // fallback: 8 dims per lane

// Shapes: q/o (rows, n_heads, D). Grid: x = q row of the sequence, y = group
// of kFbWarps heads, z = sequence. Warp w owns head 4y + w of row x: lane
// holds dims lane + 32 i of q (pre-scaled) and O; a key costs one warp sum.
__global__ void __launch_bounds__(kFbWarps * 32, 1) attn_fallback_kernel(const AttnParams p) {
    const int i = blockIdx.x, b = blockIdx.z, lane = threadIdx.x & 31;
    const int h = blockIdx.y * kFbWarps + (threadIdx.x >> 5);
    const SeqView s = attn_seq(p, b);
    if (!s.ok && i == 0 && blockIdx.y == 0 && threadIdx.x == 0) atomicAdd(p.err, 1u);
    if (i >= s.q_len) return;
    if (h >= p.n_heads) return;
    if (!s.ok) { // each warp zero-fills its head's rows i, i + gridDim.x, ... (q_len may exceed max_q_len)
        for (int r = i; r < s.q_len; r += gridDim.x) {
            const int64_t ob = s.o_off + (int64_t)r * p.o_sr + (int64_t)h * p.o_sh;
            for (int d = lane; d < p.head_dim; d += 32) mf_st(p.o, p.dt, ob + d, 0.0f);
            if (p.lse && lane == 0) p.lse[s.l_off + (int64_t)r * p.l_sr + (int64_t)h * p.l_sh] = -INFINITY;
        }
        return;
    }
    const int kvh = h / p.grp, off = s.k_len - s.q_len, D = p.head_dim;
    float q[kFbMaxD / 32], o[kFbMaxD / 32];
    const int64_t qb = s.q_off + (int64_t)i * p.q_sr + (int64_t)h * p.q_sh;
#pragma unroll
    for (int e = 0; e < kFbMaxD / 32; e++) {
        const int d = lane + 32 * e;
        q[e] = d < D ? mf_ld(p.q, p.dt, qb + d) * p.scale_log2 : 0.0f;
        o[e] = 0.0f;
    }
    int j0 = 0, j1 = s.k_len;
    if (p.causal) {
        j1 = max(0, min(j1, i + off + 1));
        if (p.window > 0) j0 = (int)max((int64_t)0, (int64_t)i + off - p.window + 1);
    }
    float m = -INFINITY, l = 0.0f;
    const int64_t kb = s.k_off + (int64_t)kvh * p.k_sh, vb = s.v_off + (int64_t)kvh * p.v_sh;
    const KeyRows kr = attn_k_rows(p, s), vr = attn_v_rows(p, s);
    for (int j = j0; j < j1; j++) {
        float sc = 0.0f;
#pragma unroll
        for (int e = 0; e < kFbMaxD / 32; e++) {
            const int d = lane + 32 * e;
            if (d < D) sc = fmaf(q[e], mf_ld(p.k, p.dt, kb + kr(j) + d), sc);
        }
        sc = mf_warp_sum(sc);
        const float m_new = fmaxf(m, sc), alpha = attn_exp2(m - m_new), pr = attn_exp2(sc - m_new);
        l = l * alpha + pr;
#pragma unroll
        for (int e = 0; e < kFbMaxD / 32; e++) {
            const int d = lane + 32 * e;
            o[e] = o[e] * alpha + (d < D ? pr * mf_ld(p.v, p.dt, vb + vr(j) + d) : 0.0f);
        }
        m = m_new;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int64_t ob = s.o_off + (int64_t)i * p.o_sr + (int64_t)h * p.o_sh;
#pragma unroll
    for (int e = 0; e < kFbMaxD / 32; e++) {
        const int d = lane + 32 * e;
        if (d < D) mf_st(p.o, p.dt, ob + d, o[e] * inv);
    }
    if (p.lse && lane == 0)
        p.lse[s.l_off + (int64_t)i * p.l_sr + (int64_t)h * p.l_sh] = l > 0.0f ? (m + __log2f(l)) * kLn2 : -INFINITY;
}

// The kernel view of validated arguments (see ops.h for the three modes).
mf_status make_params(mf_cuda_ctx *c, const mf_attention_args *a, AttnParams *p) {
    *p = AttnParams{};
    const bool fixed = !a->cu_seqlens_q, cache = a->k_lens != nullptr;
    const int qd = a->q.ndim; // 4 fixed, 3 otherwise
    p->q = a->q.data, p->k = a->k.data, p->v = a->v.data, p->o = a->o.data;
    p->lse = a->lse ? static_cast<float *>(a->lse->data) : nullptr;
    p->dt = a->q.dtype;
    p->head_dim = (int)a->q.shape[qd - 1];
    p->n_heads = (int)a->q.shape[qd - 2];
    p->n_kv_heads = (int)a->k.shape[a->k.ndim - 2];
    p->grp = p->n_heads / p->n_kv_heads;
    p->batch = a->batch;
    p->scale_log2 = a->scale * kLog2e;
    p->causal = a->causal ? 1 : 0;
    if (a->window > INT_MAX) return mf_fail(MF_ERR_UNSUPPORTED, "attention: window %lld too large for cuda", (long long)a->window);
    p->window = a->causal ? (int)a->window : 0;
    p->err = c->err_count + kMfErrAttention;
    if (fixed) {
        p->mode = kModeFixed;
        p->batch = (int)a->q.shape[0];
        p->q_sb = a->q.stride[0], p->q_sr = a->q.stride[1], p->q_sh = a->q.stride[2];
        p->o_sb = a->o.stride[0], p->o_sr = a->o.stride[1], p->o_sh = a->o.stride[2];
        p->k_sb = a->k.stride[0], p->k_sr = a->k.stride[1], p->k_sh = a->k.stride[2];
        p->v_sb = a->v.stride[0], p->v_sr = a->v.stride[1], p->v_sh = a->v.stride[2];
        if (a->lse) p->l_sb = a->lse->stride[0], p->l_sr = a->lse->stride[1], p->l_sh = a->lse->stride[2];
        if (a->q.shape[1] > kMaxSeqLen || a->k.shape[1] > kMaxSeqLen)
            return mf_fail(MF_ERR_UNSUPPORTED, "attention: sequence longer than %lld on cuda", (long long)kMaxSeqLen);
        p->q_len_fixed = p->max_q_len = (int)a->q.shape[1];
        p->k_len_fixed = p->max_k_len = (int)a->k.shape[1];
        p->total_q = a->q.shape[0] * a->q.shape[1];
        return MF_OK;
    }
    p->mode = cache ? kModeCache : kModePacked;
    p->cu_q = static_cast<const int32_t *>(a->cu_seqlens_q->data);
    p->cu_k = a->cu_seqlens_k ? static_cast<const int32_t *>(a->cu_seqlens_k->data) : nullptr;
    p->k_lens = cache ? static_cast<const int32_t *>(a->k_lens->data) : nullptr;
    p->slots = a->slots ? static_cast<const int32_t *>(a->slots->data) : nullptr;
    p->q_sr = a->q.stride[0], p->q_sh = a->q.stride[1];
    p->o_sr = a->o.stride[0], p->o_sh = a->o.stride[1];
    if (a->lse) p->l_sr = a->lse->stride[0], p->l_sh = a->lse->stride[1];
    p->total_q = a->q.shape[0];
    if (cache) {
        p->k_sb = a->k.stride[0], p->k_sr = a->k.stride[1], p->k_sh = a->k.stride[2];
        p->v_sb = a->v.stride[0], p->v_sr = a->v.stride[1], p->v_sh = a->v.stride[2];
        p->n_slots = a->k.shape[0], p->total_k = a->k.shape[1];
        if (a->block_table) { // paged: (n_blocks, block_size, ...) read through the table
            const int64_t bs = a->k.shape[1];
            if (bs < 1 || (bs & (bs - 1)) != 0 || bs > (1 << 20))
                return mf_fail(MF_ERR_UNSUPPORTED, "attention: block size %lld on cuda (want a power of two)",
                               (long long)bs);
            if (a->block_table->shape[1] > INT_MAX / bs)
                return mf_fail(MF_ERR_UNSUPPORTED, "attention: %lld blocks of %lld keys per sequence on cuda",
                               (long long)a->block_table->shape[1], (long long)bs);
            p->table = static_cast<const int32_t *>(a->block_table->data);
            p->table_sr = a->block_table->shape[0] > 1 ? a->block_table->stride[0] : a->block_table->shape[1];
            p->table_w = (int)a->block_table->shape[1];
            p->bs_log2 = 0;
            while ((int64_t)1 << p->bs_log2 < bs) p->bs_log2++;
            p->total_k = (int64_t)p->table_w * bs;
        }
    } else {
        p->k_sr = a->k.stride[0], p->k_sh = a->k.stride[1];
        p->v_sr = a->v.stride[0], p->v_sh = a->v.stride[1];
        p->total_k = a->k.shape[0];
    }
    if (a->max_q_len > kMaxSeqLen || a->max_k_len > kMaxSeqLen)
        return mf_fail(MF_ERR_UNSUPPORTED, "attention: max_q_len / max_k_len past %lld on cuda", (long long)kMaxSeqLen);
    p->max_q_len = (int)a->max_q_len, p->max_k_len = (int)a->max_k_len;
    return MF_OK;
}

enum Path { kPathNone, kPathDecode, kPathSm90, kPathPrefill, kPathFallback };
const char *const kPathNames[] = {"", "decode", "wgmma", "prefill", "fallback"};

// MINFER_ATTN=wgmma: the sm_90a kernel wherever it fits (it stays opt-in
// until an H100 has run its tests and benchmarks).
bool want_sm90() {
    const char *mode = getenv("MINFER_ATTN");
    return mode && strcmp(mode, "wgmma") == 0;
}

Path pick(mf_cuda_ctx *c, const AttnParams &p) {
    if (p.batch <= 0 || p.total_q <= 0) return kPathNone; // no q rows
    if (p.max_q_len <= 0) return kPathFallback;           // every q_len must be 0: the kernel checks (one block per row 0)
    const bool few_rows = (int64_t)p.max_q_len * p.grp <= kDecodeRows;
    const bool dec = mf_cuda_attn_decode_fits(p), pre = mf_cuda_attn_prefill_fits(p);
    if (dec && few_rows) return kPathDecode;
    if (want_sm90() && mf_cuda_attn_sm90_fits(c, p)) return kPathSm90;
    if (dec && !pre) return kPathDecode;
    if (pre) return kPathPrefill;
    return kPathFallback;
}

} // namespace

mf_cuda_attention_state *mf_cuda_attention_state_of(mf_cuda_ctx *c) {
    if (!c->attention) {
        c->attention = static_cast<mf_cuda_attention_state *>(mf_calloc(1, sizeof *c->attention));
        if (!c->attention) {
            mf_fail(MF_ERR_OOM, "attention: out of host memory (%zu bytes of backend state)", sizeof *c->attention);
            return nullptr;
        }
        c->attention->path = "";
    }
    return c->attention;
}

extern "C" void mf_cuda_attention_release(mf_cuda_ctx *c) {
    free(c->attention);
    c->attention = nullptr;
}

mf_status mf_cuda_attn_fallback(mf_cuda_ctx *c, const AttnParams &p) {
    const dim3 grid((unsigned)max(1, p.max_q_len), (unsigned)((p.n_heads + kFbWarps - 1) / kFbWarps), (unsigned)p.batch);
    MF_LAUNCH(attn_fallback_kernel, grid, kFbWarps * 32, 0, c->stream, p);
    MF_CUDA_CHECK_LAUNCH("attn_fallback");
    return MF_OK;
}

extern "C" mf_status mf_cuda_attention(mf_backend *be, const mf_attention_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    mf_cuda_attention_state *st = mf_cuda_attention_state_of(c);
    if (!st) return MF_ERR_OOM;
    AttnParams p;
    MF_TRY(make_params(c, a, &p));
    if (p.head_dim > kFbMaxD)
        return mf_fail(MF_ERR_UNSUPPORTED, "attention: head_dim %d is not supported on cuda (at most %d)", p.head_dim,
                       kFbMaxD);
    if (p.batch > 65535 || p.n_heads > 65535 * kFbWarps)
        return mf_fail(MF_ERR_UNSUPPORTED, "attention: batch %d / n_heads %d past the cuda grid limit (65535)",
                       p.batch, p.n_heads);
    mf_status s = MF_OK;
    const Path path = pick(c, p);
    st->path = kPathNames[path];
    // Device lengths: the next sync reads the counter, even if a later launch
    // of this call fails (a kernel queued before it may have counted).
    if (path != kPathNone && p.mode != kModeFixed) c->err_pending = true;
    switch (path) {
    case kPathNone: return MF_OK;
    case kPathDecode: s = mf_cuda_attn_decode(c, p, a->num_splits, a->workspace, a->workspace_bytes); break;
    case kPathSm90: s = mf_cuda_attn_prefill_sm90(c, p); break;
    case kPathPrefill: s = mf_cuda_attn_prefill(c, p); break;
    case kPathFallback: s = mf_cuda_attn_fallback(c, p); break;
    }
    return s;
}

extern "C" mf_status mf_cuda_attention_workspace(mf_backend *be, const mf_attention_args *a, size_t *bytes) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    *bytes = 0;
    AttnParams p;
    MF_TRY(make_params(c, a, &p));
    if (p.head_dim > kFbMaxD || pick(c, p) != kPathDecode) return MF_OK;
    *bytes = mf_cuda_attn_decode_ws_bytes(p, mf_cuda_attn_decode_splits(c, p, a->num_splits));
    return MF_OK;
}

extern "C" const char *mf_cuda_attn_last_path(mf_backend *be) {
    const mf_cuda_attention_state *s = mf_cuda_ctx_of(be)->attention;
    return s ? s->path : "";
}

extern "C" int mf_cuda_attn_sm90(mf_backend *be, int *cc) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    if (cc) *cc = 10 * c->cc_major + c->cc_minor;
    return mf_cuda_attn_sm90_available(c) ? 1 : 0;
}
