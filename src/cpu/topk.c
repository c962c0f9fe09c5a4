// CPU row top-k with softmax statistics (mf_topk): per row one scan in index
// order (the first NaN / +inf, then a k-heap of the best values held in the
// output row itself), a heap sort into rank order, and the sum of the
// weights in index order, each term computed exactly as the host sampler
// computes it, so that the sampler's normaliser and this one agree.
#include <math.h>

#include "cpu/cpu.h"

// (va, ia) ranks before (vb, ib): larger value, then lower index.
static inline int better(float va, int32_t ia, float vb, int32_t ib) { return va > vb || (va == vb && ia < ib); }

// Restores the heap (worst at the root) over h[0, n) from i down.
static void sift_down(float *v, int32_t *id, int64_t n, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, worst = i;
        if (l < n && better(v[worst], id[worst], v[l], id[l])) worst = l;
        if (r < n && better(v[worst], id[worst], v[r], id[r])) worst = r;
        if (worst == i) return;
        float tv = v[i];
        v[i] = v[worst], v[worst] = tv;
        int32_t ti = id[i];
        id[i] = id[worst], id[worst] = ti;
        i = worst;
    }
}

enum { kBlock = 1024 }; // columns converted at a time

mf_status mf_cpu_topk(mf_backend *be, const mf_topk_args *p) {
    (void)be;
    const int64_t rows = p->x.shape[0], n = p->x.shape[1], rs = p->x.stride[0], k = p->k;
    const float scale = p->scale;
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int32_t *id = (int32_t *)p->ids.data + r * k;
        float *v = (float *)p->vals.data + r * k, *st = (float *)p->stats.data + 2 * r;
        int64_t m = 0, bad = -1;
        float bad_v = 0.0f;
        float blk[kBlock]; // the row converted to f32 a block at a time
        for (int64_t i0 = 0; i0 < n && bad < 0; i0 += kBlock) {
            const int64_t nb = n - i0 < kBlock ? n - i0 : kBlock;
            mf_cpu_to_f32(blk, p->x.data, p->x.dtype, r * rs + i0, nb);
            for (int64_t j = 0; j < nb; j++) {
                float x = blk[j];
                const int64_t i = i0 + j;
                if (isnan(x) || x == INFINITY) {
                    bad = i, bad_v = x;
                    break;
                }
                if (x == -INFINITY) continue;
                if (x == 0.0f) x = 0.0f; // -0.0 as +0.0, as the CUDA kernel's ordered keys give it
                if (m < k) {
                    v[m] = x, id[m] = (int32_t)i, m++;
                    if (m == k)
                        for (int64_t h = k / 2 - 1; h >= 0; h--) sift_down(v, id, k, h);
                } else if (x > v[0]) { // indices rise: an equal value loses the tie
                    v[0] = x, id[0] = (int32_t)i;
                    sift_down(v, id, k, 0);
                }
            }
        }
        if (bad >= 0) {
            id[0] = (int32_t)bad, v[0] = isnan(bad_v) ? NAN : INFINITY;
            for (int64_t j = 1; j < k; j++) id[j] = -1, v[j] = -INFINITY;
            st[0] = st[1] = NAN;
            continue;
        }
        // Heap sort into rank order (a heap of m < k was never built: build it).
        if (m < k)
            for (int64_t j = m / 2 - 1; j >= 0; j--) sift_down(v, id, m, j);
        for (int64_t e = m - 1; e > 0; e--) { // the worst of [0, e] goes to e
            float tv = v[0];
            v[0] = v[e], v[e] = tv;
            int32_t ti = id[0];
            id[0] = id[e], id[e] = ti;
            sift_down(v, id, e, 0);
        }
        for (int64_t j = m; j < k; j++) id[j] = -1, v[j] = -INFINITY;
        if (m == 0) {
            st[0] = -INFINITY, st[1] = 0.0f;
            continue;
        }
        const float xmax = v[0];
        double z = 0.0;
        for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
            const int64_t nb = n - i0 < kBlock ? n - i0 : kBlock;
            mf_cpu_to_f32(blk, p->x.data, p->x.dtype, r * rs + i0, nb);
            for (int64_t j = 0; j < nb; j++) z += expf((blk[j] - xmax) * scale);
        }
        st[0] = xmax, st[1] = (float)z;
    }
    return MF_OK;
}
