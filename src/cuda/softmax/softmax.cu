// Fused scale + mask + softmax (mf_softmax) on CUDA, f32 math:
//   u_j = scale * x_j + bias_j,   y_j = exp(u_j - max u) / sum_k exp(u_k - max u)
// with keys j >= lim(row) masked, lim = min(k_len, i + k_len - q_len + 1 if
// causal, key_lens[b]). Masks come from indices (never materialised); chunks
// wholly past lim are not loaded (a causal row reads its visible prefix and
// at most 7 masked columns of the chunk that straddles lim, discarded), and
// masked keys are written as 0. exp is ex2.approx of (u - max) * log2(e): the difference is
// taken first, in natural units, so that logits of magnitude 1e4 keep their
// relative accuracy (folding log2(e) into the scale would round each logit
// by ~1e-3 there), at one FMUL per element.
//
// Chunks. A row is cut into chunks of kMfVec = 8 columns, chunk k covering
// columns [base + 8k, base + 8k + 8). base = 0 when the row starts on a
// 16-byte boundary in x, y and bias; otherwise base = h - 8 where column h is
// the first at which they all are, so chunk 0 is a partial "head". Chunks
// inside the row are one 16-byte access (two for f32); the head and the tail
// use scalar accesses. A layout whose x, y and bias can never be 16-byte
// aligned at one column (e.g. f32 x and bf16 y whose rows drift apart) runs
// the generic kernel instead: scalar, one block per row.
//
// Variants (rows.cu: rows, cluster; online.cu: online, split; generic.cu),
// picked by plan() from the row length; plan() also answers
// "supported?" (every variant takes any row count; columns < 2^31):
//   rows     <= kRowsMaxChunks (~8K cols): the row in registers, 2 chunks per
//            thread over G = 1..512 threads (G <= 32: several rows per
//            128-thread block). One load, one exp and one store per element.
//   cluster  (sm_90) rows up to 16 blocks long (~128K cols): the rows kernel
//            with the row spread over a cluster of blocks that exchange their
//            (max, sum) partials through distributed shared memory.
//   online   longer rows (or long rows without clusters): pass 1 keeps a
//            running (max, sum) per thread, combined over the block; pass 2
//            re-reads the row (from L2 while the rows in flight fit there)
//            and writes y.
//   split    long rows but too few of them to fill the chip: each row is cut
//            into splits, a stats launch writes (max, sum) per split into the
//            backend's workspace, a normalise launch combines and writes.
//   generic  layouts that cannot be vectorised: scalar, online, any length.
// The rows and cluster grids cover every row (the scheduler overlaps blocks'
// phases); the others loop grid-stride over rows (or row splits), their grid
// sized to the blocks the chip holds at once.
//
// In place (y == x): every element is read by the thread that writes it, and
// before it writes it; no thread reads an element another one writes.
#include <algorithm>
#include <climits>

#include "core/alloc.h"
#include "cuda/cuda_query.h"
#include "cuda/softmax/softmax.cuh"
#include "kernels/softmax_geom.h"

using namespace softmax;

namespace {

enum Variant { kVarRows, kVarCluster, kVarOnline, kVarSplit, kVarGeneric };

const char *variant_name(Variant v) {
    switch (v) {
    case kVarRows: return "rows";
    case kVarCluster: return "cluster";
    case kVarOnline: return "online";
    case kVarSplit: return "split";
    case kVarGeneric: return "generic";
    }
    return "?";
}

struct Plan {
    Variant var;
    int G;                        // rows/cluster: threads per row in a block
    int cs;                       // cluster: blocks per row (1 otherwise)
    int threads;                  // per block
    unsigned grid;
    int nchunks;                  // chunks per row at most
    int splits, split_chunks;     // split variant
};

} // namespace

extern "C" void mf_cuda_softmax_release(mf_cuda_ctx *ctx) {
    free(ctx->softmax);
    ctx->softmax = nullptr;
}

namespace {

mf_status launch_state(mf_cuda_ctx *c, mf_cuda_softmax_state **out) {
    if (!c->softmax) {
        mf_cuda_softmax_state *s = static_cast<mf_cuda_softmax_state *>(mf_calloc(1, sizeof *s));
        if (!s) return mf_fail(MF_ERR_OOM, "softmax: out of host memory (%zu bytes of launch cache)", sizeof *s);
        if (cudaDeviceGetAttribute(&s->l2_bytes, cudaDevAttrL2CacheSize, c->device) != cudaSuccess) {
            (void)cudaGetLastError();
            s->l2_bytes = 0;
        }
        c->softmax = s;
    }
    *out = c->softmax;
    return MF_OK;
}

unsigned grid_of(int64_t work, int64_t cap) {
    work = std::min(work, cap);
    return (unsigned)std::max(work, (int64_t)1);
}

int esize(int dt) { return dt == MF_DTYPE_F32 ? 4 : 2; }

// Can one column of every row align x, y and bias to 16 bytes together? Each
// tensor's row start has a phase (in elements) modulo v = 16 / element size;
// two tensors agree at some column iff their phases are congruent modulo the
// smaller v, which holds for all rows when the base pointers and every stride
// are. (v is 4 or 8, so pairwise agreement is enough.)
bool alignable(const SmParams &p) {
    struct T { uintptr_t addr; int e; const int64_t *st; } t[3] = {
        {(uintptr_t)p.x, esize(p.x_dt), p.xs}, {(uintptr_t)p.y, esize(p.y_dt), p.ys}, {(uintptr_t)p.bias, esize(p.b_dt), p.bs}};
    const int n = p.bcol ? 3 : 2;
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            const int64_t g = 16 / std::max(t[a].e, t[b].e); // the smaller v
            const int64_t pa = (int64_t)(t[a].addr / t[a].e), pb = (int64_t)(t[b].addr / t[b].e);
            if ((pa - pb) % g != 0) return false;
            for (int d = 0; d < 3; d++)
                if ((t[a].st[d] - t[b].st[d]) % g != 0) return false;
        }
    return true;
}

// Rows of `blocks_per_row`-block groups over `rows_per_block` rows each: the
// grid, a multiple of blocks_per_row within the grid limit (the kernels loop
// over what does not fit).
unsigned rows_grid(int64_t rows, int rows_per_block, int blocks_per_row) {
    const int64_t groups = (rows + rows_per_block - 1) / rows_per_block;
    return (unsigned)(std::max((int64_t)1, std::min(groups, (int64_t)INT_MAX / blocks_per_row)) * blocks_per_row);
}

int round32(int n) { return (n + 31) / 32 * 32; }

// Picks the variant for these parameters, or says why they are unsupported.
// Thresholds, with the reasoning in docs/notes/softmax.md: a row is held in
// registers at 2 chunks (16 values) per thread over up to 512 threads (~8K
// columns), over a cluster of up to 16 blocks on sm_90 (~128K columns);
// longer rows, and long rows on older GPUs, stream twice (online).
// A long row is split over several blocks when the rows alone cannot fill
// the chip.
mf_status plan(mf_cuda_ctx *c, const SmParams &p, Plan *pl) {
    const int ex = esize(p.x_dt), ey = esize(p.y_dt), eb = esize(p.b_dt);
    if ((uintptr_t)p.x % ex || (uintptr_t)p.y % ey || (p.bias && (uintptr_t)p.bias % eb) ||
        (p.key_lens && (uintptr_t)p.key_lens % 4))
        return mf_fail(MF_ERR_UNSUPPORTED,
                       "softmax: a pointer is not aligned to its element size (x %p, y %p, bias %p, key_lens %p)",
                       p.x, p.y, p.bias, static_cast<const void *>(p.key_lens));
    mf_cuda_softmax_state *ls = nullptr;
    MF_TRY(launch_state(c, &ls));
    const int64_t resident_sm = c->sm_count;
    pl->splits = 1;
    pl->cs = 1;
    pl->G = 0;
    if (!alignable(p)) {
        pl->var = kVarGeneric;
        pl->threads = kGenericThreads;
        const int occ = generic_resident(ls);
        pl->grid = grid_of(p.rows, resident_sm * occ);
        return MF_OK;
    }
    const int nchunks = (p.cols + kMfVec - 1) / kMfVec + (p.rows_aligned ? 0 : 1);
    pl->nchunks = pl->split_chunks = nchunks;
    // In one block: G threads of kRowsChunks chunks each (G a power of two
    // up to 32, else a multiple of 32).
    if (nchunks <= kRowsMaxChunks) {
        const int g = (nchunks + kRowsChunks - 1) / kRowsChunks;
        int G = 1;
        if (g <= 32)
            while (G < g) G *= 2;
        else
            G = round32(g);
        pl->var = kVarRows;
        pl->G = G;
        pl->threads = G <= 32 ? kRowsBlock : G;
        pl->grid = rows_grid(p.rows, G <= 32 ? kRowsBlock / G : 1, 1);
        return MF_OK;
    }
    // Long rows: a cluster of cs blocks per row if the GPU has clusters and
    // the row fits in the largest one; the chunks are spread evenly.
    const int cs = (nchunks + kRowsMaxChunks - 1) / kRowsMaxChunks;
    const bool cluster = cs <= max_cluster(c, ls, p.bcol);
    const int occ = online_resident(ls);
    const int64_t resident = resident_sm * occ;
    // Few rows: split them over blocks (three passes over memory instead of
    // two, but the whole chip works), unless clusters already fill it.
    if ((!cluster || p.rows * cs < resident_sm) && p.rows > 0 && p.rows < resident && c->workspace) {
        int64_t splits = (resident + p.rows - 1) / p.rows;
        splits = std::min(splits, (int64_t)(nchunks / kSplitMinChunks));
        splits = std::min(splits, (int64_t)(c->workspace_bytes / sizeof(float2)) / p.rows);
        if (splits >= 2) {
            pl->var = kVarSplit;
            pl->threads = kOnlineThreads;
            pl->splits = (int)splits;
            pl->split_chunks = (int)((nchunks + splits - 1) / splits);
            pl->grid = grid_of(p.rows * splits, resident);
            return MF_OK;
        }
    }
    if (cluster) {
        const int per_block = (nchunks + cs - 1) / cs;
        pl->var = kVarCluster;
        pl->cs = cs;
        pl->G = pl->threads = round32((per_block + kRowsChunks - 1) / kRowsChunks);
        // cluster_ms exchanges one (max, sum) per block: one row per block (G > 32),
        // true for every cluster row (per_block > kRowsMaxChunks / 2 chunks); kept true here.
        if (pl->G <= 32)
            return mf_fail(MF_ERR_INTERNAL, "softmax: cluster plan with %d threads per block", pl->G);
        pl->grid = rows_grid(p.rows, 1, cs);
        return MF_OK;
    }
    pl->var = kVarOnline;
    pl->threads = kOnlineThreads;
    // Pass 2 re-reads the row: keep the rows in flight within half the L2 so
    // that it hits there (but at least one block per SM).
    const int l2 = ls->l2_bytes;
    const int64_t row_bytes = (int64_t)p.cols * (ex + (p.bcol ? eb : 0));
    const int64_t cap = l2 > 0 ? std::max(resident_sm, std::min(resident, (int64_t)l2 / 2 / row_bytes)) : resident;
    pl->grid = grid_of(p.rows, cap);
    return MF_OK;
}

mf_status params_of(const mf_softmax_args *a, SmParams *p) {
    mf_softmax_geom g;
    mf_softmax_geom_of(a, &g);
    if (g.k_len > INT_MAX - 2 * kMfVec)
        return mf_fail(MF_ERR_UNSUPPORTED, "softmax: k_len %lld exceeds the CUDA kernels' 2^31 - 17 columns",
                       (long long)g.k_len);
    p->x = a->x.data;
    p->y = a->y.data;
    p->bias = a->bias ? a->bias->data : nullptr;
    p->key_lens = a->key_lens ? static_cast<const int32_t *>(a->key_lens->data) : nullptr;
    p->x_dt = a->x.dtype;
    p->y_dt = a->y.dtype;
    p->b_dt = a->bias ? (int)a->bias->dtype : (int)MF_DTYPE_F32;
    p->rows = g.rows;
    p->cols = (int)g.k_len;
    p->heads = g.heads;
    p->q_len = g.q_len;
    for (int d = 0; d < 3; d++) {
        p->xs[d] = g.xs[d];
        p->ys[d] = g.ys[d];
        p->bs[d] = g.bs[d];
    }
    p->kls = g.kls;
    p->scale = a->scale;
    p->causal = a->causal;
    p->bcol = a->bias && g.bs[3] != 0;
    // The head of a row is fixed by a tensor with 2-byte elements if any (its
    // phase is the finer one), else by x.
    p->head_src = p->x_dt != MF_DTYPE_F32 ? 0 : p->y_dt != MF_DTYPE_F32 ? 1 : (p->bcol && p->b_dt != MF_DTYPE_F32) ? 2 : 0;
    bool al = mf_aligned16(p->x) && mf_aligned16(p->y);
    for (int d = 0; d < 3; d++) al = al && (p->xs[d] * esize(p->x_dt)) % 16 == 0 && (p->ys[d] * esize(p->y_dt)) % 16 == 0;
    if (p->bcol) {
        al = al && mf_aligned16(p->bias);
        for (int d = 0; d < 3; d++) al = al && (p->bs[d] * esize(p->b_dt)) % 16 == 0;
    }
    p->rows_aligned = al;
    return MF_OK;
}

} // namespace

extern "C" const char *mf_cuda_softmax_variant(mf_backend *be, const mf_softmax_args *a) {
    SmParams p;
    Plan pl;
    if (params_of(a, &p) != MF_OK || plan(mf_cuda_ctx_of(be), p, &pl) != MF_OK) return nullptr;
    return variant_name(pl.var);
}

extern "C" int mf_cuda_softmax_clusters(mf_backend *be, int bias_along_keys, int *cc) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    if (cc) *cc = c->cc_major * 10 + c->cc_minor;
    mf_cuda_softmax_state *ls = nullptr;
    if (launch_state(c, &ls) != MF_OK) return 1;
    return max_cluster(c, ls, bias_along_keys != 0);
}

extern "C" mf_status mf_cuda_softmax(mf_backend *be, const mf_softmax_args *a) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    SmParams p;
    Plan pl;
    MF_TRY(params_of(a, &p));
    MF_TRY(plan(c, p, &pl));
    switch (pl.var) {
    case kVarRows:
    case kVarCluster: MF_TRY(launch_rows(c, p, pl.grid, pl.threads, pl.G, pl.cs)); break;
    case kVarOnline:
        MF_TRY(launch_online(c, p, pl.grid, pl.threads, kOnlineWhole, 1, pl.split_chunks, nullptr));
        break;
    case kVarSplit: {
        // (rows, splits) partial (max, sum) pairs in the backend's workspace:
        // ordered on the stream like every other user of it.
        float2 *ws = static_cast<float2 *>(c->workspace);
        MF_TRY(launch_online(c, p, pl.grid, pl.threads, kOnlineStats, pl.splits, pl.split_chunks, ws));
        MF_CUDA_CHECK_LAUNCH("softmax (split stats)");
        MF_TRY(launch_online(c, p, pl.grid, pl.threads, kOnlineNorm, pl.splits, pl.split_chunks, ws));
        break;
    }
    case kVarGeneric: MF_TRY(launch_generic(c, p, pl.grid, pl.threads)); break;
    }
    MF_CUDA_CHECK_LAUNCH("softmax");
    return MF_OK;
}
