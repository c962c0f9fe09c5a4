// KV-cache write (mf_kv_write) on CUDA: one launch scatters the k and v rows
// of every token of a step to (slot[t], pos[t]) of the caches (paged: to row
// slot_mapping[t] of the block pool), with RoPE
// fused on k (and on q, in place, when given). The rotation is mf_rope's:
// angle = __fmul_rn((float)pos, inv_freq[i]) (the f32 product, never
// contracted), precise sincosf (angles reach ~1e5 rad), HF rotate_half pairs
// (i, i + half), dims >= rot_dim copied unchanged; f32 math.
//
// Work split: one block per token (grid-stride over tokens). The block first
// puts the token's cos/sin of the half pairs in shared memory, then its
// threads stride over "units" of 8 consecutive elements of one head row:
//   q heads:  ceil(half / 8) rotated units (pairs [8c, 8c + 8) of the head)
//   k heads:  the same rotated units, then ceil((D - rot_dim) / 8) copied ones
//             (no RoPE: ceil(D / 8) copied units)
//   v heads:  ceil(D / 8) copied units
// so consecutive threads touch consecutive 16-byte pieces of a row (vec path:
// every base, stride and half aligned to 8 elements / 16 bytes; otherwise
// the same units element by element). A slot or position out of range skips
// the whole token (q stays unrotated) and counts one error on the context's
// device counter, which the next mf_backend_sync reports.
#include "cuda/common.cuh"

namespace {

constexpr int kKvThreads = 128;

struct KvParams {
    const void *k, *v;       // (n, n_kv, D): element (t, h, d) at t * k_ts + h * k_hs + d
    void *kc, *vc;           // (n_slots, max_len, n_kv, D): (s, p, h, d) at s * c_ss + p * c_ps + h * c_hs + d
    void *q;                 // (n, n_heads, D) rotated in place, or NULL
    const int32_t *slot, *pos; // (n)
    const int32_t *map;      // (n) rows of the block pool (paged: slot_mapping), or NULL: (slot, pos)
    const float *inv_freq;   // (half), or NULL (no RoPE)
    int64_t k_ts, k_hs, v_ts, v_hs, q_ts, q_hs;
    int64_t kc_ss, kc_ps, kc_hs, vc_ss, vc_ps, vc_hs;
    int k_dt, v_dt, c_dt, q_dt;
    int64_t n, n_kv, n_heads, D, half; // n_heads 0 when q is NULL; half 0 without RoPE
    int64_t n_slots, max_len;
    unsigned int *err;       // (1) bad (slot, pos) tokens, summed until the next sync
    bool vec;                // 16-byte chunk accesses allowed
};

// Elements [e0, e0 + 8) of row src (dtype sdt) -> row dst (ddt), limited to < end.
__device__ __forceinline__ void copy_unit(const void *src, int sdt, int64_t so, void *dst, int ddt, int64_t dof,
                                          int64_t e0, int64_t end, bool vec) {
    if (vec) {
        float x[kMfVec];
        mf_ld8(src, sdt, so + e0, x);
        mf_st8(dst, ddt, dof + e0, x);
        return;
    }
    for (int64_t e = e0; e < e0 + kMfVec && e < end; e++) mf_st(dst, ddt, dof + e, mf_ld(src, sdt, so + e));
}

// Pairs [i0, i0 + 8) (limited to < half) of row src rotated into row dst.
__device__ __forceinline__ void rot_unit(const void *src, int sdt, int64_t so, void *dst, int ddt, int64_t dof,
                                         int64_t i0, int64_t half, const float2 *cs, bool vec) {
    if (vec) {
        float x0[kMfVec], x1[kMfVec], y0[kMfVec], y1[kMfVec];
        mf_ld8(src, sdt, so + i0, x0);
        mf_ld8(src, sdt, so + i0 + half, x1);
#pragma unroll
        for (int j = 0; j < kMfVec; j++) {
            const float2 c = cs[i0 + j]; // (cos, sin)
            mf_rotate(x0[j], x1[j], c.x, c.y, &y0[j], &y1[j]);
        }
        mf_st8(dst, ddt, dof + i0, y0);
        mf_st8(dst, ddt, dof + i0 + half, y1);
        return;
    }
    for (int64_t i = i0; i < i0 + kMfVec && i < half; i++) {
        const float2 c = cs[i];
        const float x0 = mf_ld(src, sdt, so + i), x1 = mf_ld(src, sdt, so + i + half);
        float y0, y1;
        mf_rotate(x0, x1, c.x, c.y, &y0, &y1);
        mf_st(dst, ddt, dof + i, y0);
        mf_st(dst, ddt, dof + i + half, y1);
    }
}

__global__ void __launch_bounds__(kKvThreads) kv_write_kernel(KvParams p) {
    MF_DYN_SHARED(float2, cs); // (half): cos, sin of the token's angles
    const int64_t rot_units = (p.half + kMfVec - 1) / kMfVec;
    const int64_t row_units = (p.D + kMfVec - 1) / kMfVec;
    const int64_t tail_units = (p.D - 2 * p.half + kMfVec - 1) / kMfVec;
    const int64_t k_units = p.half ? rot_units + tail_units : row_units;
    const int64_t nq = p.n_heads * rot_units, nk = p.n_kv * k_units, total = nq + nk + p.n_kv * row_units;
    for (int64_t t = blockIdx.x; t < p.n; t += gridDim.x) {
        const int32_t pos = p.pos[t];
        const int64_t r = p.map ? (int64_t)p.map[t] : 0;
        const int64_t slot = p.map ? r / p.max_len : (int64_t)p.slot[t], row = p.map ? r % p.max_len : (int64_t)pos;
        if (r < 0 || slot < 0 || slot >= p.n_slots || pos < 0 || (!p.map && (int64_t)pos >= p.max_len)) {
            if (threadIdx.x == 0) atomicAdd(p.err, 1u);
            continue; // uniform over the block
        }
        __syncthreads(); // the previous token's readers of cs are done
        for (int64_t i = threadIdx.x; i < p.half; i += blockDim.x) {
            float s, c;
            sincosf(__fmul_rn((float)pos, p.inv_freq[i]), &s, &c);
            cs[i] = make_float2(c, s);
        }
        __syncthreads();
        for (int64_t u = threadIdx.x; u < total; u += blockDim.x) {
            if (u < nq) { // q head: rotate in place
                const int64_t h = u / rot_units, c = u - h * rot_units;
                const int64_t o = t * p.q_ts + h * p.q_hs;
                rot_unit(p.q, p.q_dt, o, p.q, p.q_dt, o, c * kMfVec, p.half, cs, p.vec);
            } else if (u < nq + nk) { // k head -> k_cache, rotated part then the rest
                const int64_t w = u - nq, h = w / k_units, c = w - h * k_units;
                const int64_t so = t * p.k_ts + h * p.k_hs;
                const int64_t dof = slot * p.kc_ss + row * p.kc_ps + h * p.kc_hs;
                if (p.half && c < rot_units)
                    rot_unit(p.k, p.k_dt, so, p.kc, p.c_dt, dof, c * kMfVec, p.half, cs, p.vec);
                else if (p.half)
                    copy_unit(p.k, p.k_dt, so, p.kc, p.c_dt, dof, 2 * p.half + (c - rot_units) * kMfVec, p.D, p.vec);
                else
                    copy_unit(p.k, p.k_dt, so, p.kc, p.c_dt, dof, c * kMfVec, p.D, p.vec);
            } else { // v head -> v_cache
                const int64_t w = u - nq - nk, h = w / row_units, c = w - h * row_units;
                const int64_t so = t * p.v_ts + h * p.v_hs;
                const int64_t dof = slot * p.vc_ss + row * p.vc_ps + h * p.vc_hs;
                copy_unit(p.v, p.v_dt, so, p.vc, p.c_dt, dof, c * kMfVec, p.D, p.vec);
            }
        }
    }
}

// A view's rows start 16-byte aligned at every index of dims [0, nd - 1).
bool rows_aligned(const mf_tensor *t) {
    if (!mf_aligned16(t->data)) return false;
    const int64_t es = (int64_t)mf_dtype_size(t->dtype);
    for (int d = 0; d + 1 < t->ndim; d++)
        if (t->shape[d] > 1 && (t->stride[d] * es) % 16 != 0) return false;
    return true;
}

} // namespace

extern "C" mf_status mf_cuda_kv_write(mf_backend *be, const mf_kv_write_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    KvParams p;
    p.k = a->k.data, p.k_ts = a->k.stride[0], p.k_hs = a->k.stride[1], p.k_dt = a->k.dtype;
    p.v = a->v.data, p.v_ts = a->v.stride[0], p.v_hs = a->v.stride[1], p.v_dt = a->v.dtype;
    p.kc = a->k_cache.data, p.kc_ss = a->k_cache.stride[0], p.kc_ps = a->k_cache.stride[1];
    p.kc_hs = a->k_cache.stride[2];
    p.vc = a->v_cache.data, p.vc_ss = a->v_cache.stride[0], p.vc_ps = a->v_cache.stride[1];
    p.vc_hs = a->v_cache.stride[2];
    p.c_dt = a->k_cache.dtype;
    p.q = a->q ? a->q->data : nullptr;
    p.q_ts = a->q ? a->q->stride[0] : 0, p.q_hs = a->q ? a->q->stride[1] : 0;
    p.q_dt = a->q ? (int)a->q->dtype : 0;
    p.n_heads = a->q ? a->q->shape[1] : 0;
    p.slot = static_cast<const int32_t *>(a->slot.data);
    p.map = a->slot_mapping ? static_cast<const int32_t *>(a->slot_mapping->data) : nullptr;
    p.pos = static_cast<const int32_t *>(a->pos.data);
    p.inv_freq = a->inv_freq ? static_cast<const float *>(a->inv_freq->data) : nullptr;
    p.half = a->inv_freq ? a->inv_freq->shape[0] : 0;
    p.n = a->k.shape[0], p.n_kv = a->k.shape[1], p.D = a->k.shape[2];
    p.n_slots = a->k_cache.shape[0], p.max_len = a->k_cache.shape[1];
    p.err = c->err_count + kMfErrKvWrite;
    const size_t smem = (size_t)p.half * sizeof(float2);
    if (smem > 48 * 1024)
        return mf_fail(MF_ERR_UNSUPPORTED, "kv_write: rot_dim %lld too large for the CUDA kernel (max 12288)",
                       (long long)(2 * p.half));
    p.vec = p.D % kMfVec == 0 && p.half % kMfVec == 0 && rows_aligned(&a->k) && rows_aligned(&a->v) &&
            rows_aligned(&a->k_cache) && rows_aligned(&a->v_cache) && (!a->q || rows_aligned(a->q));
    MF_LAUNCH(kv_write_kernel, mf_cuda_grid(c, p.n), kKvThreads, smem, c->stream, p);
    MF_CUDA_CHECK_LAUNCH("kv_write");
    c->err_pending = true; // the sync reads the error counter back
    return MF_OK;
}
