// Weights: loading (or generating) every tensor into one backend allocation.
// See weights.h; the names come from each family's weight map (arch_*.c)
// through the planner (wplan.c).
//
// A load is planned first: one slot per destination tensor, each filled from
// 1..3 source tensors stacked along dim 0 (Llama's q|k|v, gate|up). The plan
// is checked against the checkpoint (names, shapes, dtypes: errors name the
// tensor and its file) before anything is allocated, then the slots are
// placed in the block, converted and uploaded.
#define _DEFAULT_SOURCE // madvise
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "core/alloc.h"
#include "core/error.h"
#include "model/load/weights.h"

#define MF_W_ALIGN 256

typedef mf_wplan wplan;

static int64_t slot_rows(const wslot *s) {
    int64_t r = 0;
    for (int i = 0; i < s->n_src; i++) r += s->rows[i];
    return r;
}

// Groups of sources (experts): 1 unless the slot repeats them.
static int32_t slot_reps(const wslot *s) { return s->n_rep > 0 ? s->n_rep : 1; }

static int64_t slot_numel(const wslot *s) { return slot_reps(s) * slot_rows(s) * (s->cols ? s->cols : 1); }

// A slot used in place from the mmap (when the load can): one unrepeated source.
static bool slot_in_place(const wslot *s) { return s->n_rep == 0 && s->n_src == 1; }

// The checkpoint name of source j of group e (buf: MF_W_NAME + 48 bytes).
static const char *src_name(const wslot *s, int32_t e, int j, char *buf, size_t n) {
    if (s->n_rep == 0) return s->name[j];
    snprintf(buf, n, "%s%d%s", s->name[j], e, s->suffix[j]);
    return buf;
}

// ---- values: checkpoint conversion and seeded random -------------------------------

// Element i of st tensor t as f32 (memcpy loads: t->data may be unaligned).
static inline float st_load(const mf_st_tensor *t, int64_t i) {
    const char *p = (const char *)t->data;
    switch (t->dtype) {
    case MF_DTYPE_F32: {
        float v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    case MF_DTYPE_F16: {
        uint16_t u;
        memcpy(&u, p + 2 * i, 2);
        return mf_f16_to_f32(u);
    }
    case MF_DTYPE_BF16: {
        uint16_t u;
        memcpy(&u, p + 2 * i, 2);
        return mf_bf16_to_f32(u);
    }
    default: return 0.0f; // refused by check_sources
    }
}

// Elements [start, start + n) of t into dst (dtype dt, host).
static void convert_st(const mf_st_tensor *t, int64_t start, int64_t n, void *dst, mf_dtype dt) {
    const size_t es = mf_dtype_size(dt);
    if (t->dtype == dt) { // in 1 MB pieces over the threads: faulting in the destination's pages is most of it
        const int64_t bytes = n * (int64_t)es, piece = 1 << 20;
#pragma omp parallel for schedule(static) if (bytes > piece)
        for (int64_t o = 0; o < bytes; o += piece)
            memcpy((char *)dst + o, (const char *)t->data + start * (int64_t)es + o,
                   (size_t)(bytes - o < piece ? bytes - o : piece));
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) mf_store_f32(dst, dt, i, st_load(t, start + i));
}

static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// mean + std * N(0, 1) for element i of stream `stream`: counter-based, so
// values do not depend on threads or chunking. Box-Muller in f32 on one
// 64-bit hash per pair of elements (2i, 2i + 1): cos and sin halves.
static void fill_random(uint64_t seed, uint64_t stream, float mean, float std, int64_t start, int64_t n, void *dst,
                        mf_dtype dt) {
    const uint64_t key = splitmix64(seed ^ splitmix64(stream * 0x632be59bd9b4e019ull));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const int64_t e = start + i;
        const uint64_t r = splitmix64(key + (uint64_t)(e >> 1));
        const float u1 = ((float)(r >> 40) + 0.5f) * 0x1.0p-24f;       // (0, 1)
        const float u2 = (float)((r >> 8) & 0xffffffu) * 0x1.0p-24f;  // [0, 1)
        const float rad = sqrtf(-2.0f * logf(u1)), ang = 6.2831853f * u2;
        const float z = rad * ((e & 1) ? sinf(ang) : cosf(ang));
        const float v = mean + std * z;
        if (dt == MF_DTYPE_F32)
            ((float *)dst)[i] = v;
        else
            mf_store_f32(dst, dt, i, v);
    }
}

// ---- filling the block --------------------------------------------------------------

typedef struct {
    mf_backend *be;
    bool host;            // the block is host memory: convert in place
    char *block;
    void *stage;          // CUDA: host staging buffer of stage_bytes
    size_t stage_bytes;
    int64_t done, total;  // bytes, for progress
    bool verbose;
    int last_pct;
    double t0;
} filler;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void progress(filler *f, int64_t bytes) {
    f->done += bytes;
    if (!f->verbose || f->total <= 0) return;
    int pct = (int)(100.0 * (double)f->done / (double)f->total);
    if (pct / 5 == f->last_pct / 5 && f->done < f->total) return;
    f->last_pct = pct;
    fprintf(stderr, "\rminfer: loading weights %3d%% (%.2f / %.2f GB, %.1f s)", pct, (double)f->done / 1e9,
            (double)f->total / 1e9, now_s() - f->t0);
    if (f->done >= f->total) fputc('\n', stderr);
    fflush(stderr);
}

typedef struct {
    const mf_st_tensor *t; // file source, or NULL: random
    uint64_t seed, stream;
    float mean, std;
} source;

// n elements from src into the block at byte offset off, in dtype dt, through
// the staging buffer in chunks (CUDA) or directly (CPU).
// Elements [start, start + n) of t are copied: their whole pages of the
// file's mapping leave this process (they stay in the page cache, and a later
// read maps them again), so that a load's peak RSS is the weights, not the
// weights and the file.
static void drop_pages(const mf_st_tensor *t, int64_t start, int64_t n) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), es = mf_dtype_size(t->dtype);
    const uintptr_t a = ((uintptr_t)t->data + (uintptr_t)start * es + page - 1) / page * page,
                    b = ((uintptr_t)t->data + (uintptr_t)(start + n) * es) / page * page;
    if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED); // advice: an error changes nothing
}

static mf_status fill(filler *f, int64_t off, const source *src, int64_t n, mf_dtype dt) {
    const int64_t es = (int64_t)mf_dtype_size(dt);
    const int64_t chunk = (int64_t)(f->stage_bytes / (size_t)es);
    for (int64_t i = 0; i < n; i += chunk) {
        const int64_t k = n - i < chunk ? n - i : chunk;
        void *dst = f->host ? (void *)(f->block + off + i * es) : f->stage;
        if (src->t) {
            convert_st(src->t, i, k, dst, dt);
            drop_pages(src->t, i, k);
        } else
            fill_random(src->seed, src->stream, src->mean, src->std, i, k, dst, dt);
        if (!f->host) {
            MF_TRY(mf_backend_copy(f->be, f->block + off + i * es, f->stage, (size_t)(k * es), MF_COPY_H2D));
            MF_TRY(mf_backend_sync(f->be)); // the staging buffer is reused next
        }
        progress(f, k * es);
    }
    return MF_OK;
}

// A (rows, cols) source into the host block at off as (cols, rows), dtype dt
// (a flipped slot): blocks of kFlipRows source rows staged as dt, then
// written column by column (each column kFlipRows contiguous elements).
enum { kFlipRows = 64 };
static mf_status fill_flip(filler *f, int64_t off, const source *src, int64_t rows, int64_t cols, mf_dtype dt,
                           const char *name) {
    const size_t es = mf_dtype_size(dt);
    char *tmp = mf_malloc((size_t)(kFlipRows * cols) * es), *dst = f->block + off;
    if (!tmp)
        return mf_fail(MF_ERR_OOM, "model: out of host memory for %lld rows of '%s' (stored transposed)",
                       (long long)kFlipRows, name);
    for (int64_t i0 = 0; i0 < rows; i0 += kFlipRows) {
        const int64_t r = rows - i0 < kFlipRows ? rows - i0 : kFlipRows;
        if (src->t) {
            convert_st(src->t, i0 * cols, r * cols, tmp, dt);
            drop_pages(src->t, i0 * cols, r * cols);
        } else
            fill_random(src->seed, src->stream, src->mean, src->std, i0 * cols, r * cols, tmp, dt);
#pragma omp parallel for schedule(static) if (r * cols > (1 << 16))
        for (int64_t c = 0; c < cols; c++) {
            if (es == 4) // f32
                for (int64_t i = 0; i < r; i++)
                    ((uint32_t *)dst)[c * rows + i0 + i] = ((const uint32_t *)tmp)[i * cols + c];
            else // f16, bf16
                for (int64_t i = 0; i < r; i++)
                    ((uint16_t *)dst)[c * rows + i0 + i] = ((const uint16_t *)tmp)[i * cols + c];
        }
        progress(f, r * cols * (int64_t)es);
    }
    free(tmp);
    return MF_OK;
}

// The view of a placed slot.
static void set_view(const wslot *s, void *data, mf_dtype dt, mf_device dev) {
    mf_tensor *t = s->dst;
    memset(t, 0, sizeof *t);
    t->data = data;
    t->dtype = dt;
    t->device = dev;
    for (int i = 0; i < MF_MAX_DIMS; i++) t->shape[i] = 1;
    const int64_t rows = slot_rows(s);
    if (!s->cols) {
        t->ndim = 1, t->shape[0] = rows, t->stride[0] = 1;
    } else if (s->n_rep > 0) { // (n_rep, rows per group, cols), contiguous
        const int64_t r = rows;
        t->ndim = 3, t->shape[0] = s->n_rep, t->shape[1] = r, t->shape[2] = s->cols;
        t->stride[0] = r * s->cols, t->stride[1] = s->cols, t->stride[2] = 1;
    } else if (s->transposed) { // (rows = out, cols = in) stored; seen as (in, out)
        t->ndim = 2, t->shape[0] = s->cols, t->shape[1] = rows, t->stride[0] = 1, t->stride[1] = s->cols;
    } else if (s->flip) { // (cols = out, rows = in) stored; seen as (in, out)
        t->ndim = 2, t->shape[0] = rows, t->shape[1] = s->cols, t->stride[0] = 1, t->stride[1] = rows;
    } else {
        t->ndim = 2, t->shape[0] = rows, t->shape[1] = s->cols, t->stride[0] = s->cols, t->stride[1] = 1;
    }
}

// ---- load / random ----------------------------------------------------------------------

static const char *dtype_ok_names = "F32, F16 or BF16";

// Every source exists with its shape and a float dtype.
static mf_status check_sources(mf_st_file *st, wplan *p) {
    char buf[MF_W_NAME + 48];
    for (int32_t i = 0; i < p->n; i++) {
        wslot *s = &p->v[i];
        for (int32_t e = 0; e < slot_reps(s); e++)
            for (int j = 0; j < s->n_src; j++) {
                const int64_t shape[2] = {s->rows[j], s->cols};
                const char *name = src_name(s, e, j, buf, sizeof buf);
                if (!mf_st_lookup(st, name)) // name the file, not only the directory
                    return mf_fail(MF_ERR_FORMAT, "missing tensor '%s' in %s%s", name,
                                   mf_st_shard_count(st) == 1 ? mf_st_shard_path(st, 0) : mf_st_path(st),
                                   mf_st_shard_count(st) == 1 ? "" : " (sharded checkpoint)");
                const mf_st_tensor *t = NULL;
                MF_TRY(mf_st_expect(st, name, s->cols ? 2 : 1, shape, &t));
                if (e == 0) s->src[j] = t;
                if (e == 0 && j == 0) s->src_dt = t->dtype, s->src_same = true;
                s->src_same = s->src_same && t->dtype == s->src_dt;
                if (t->dtype != MF_DTYPE_F32 && t->dtype != MF_DTYPE_F16 && t->dtype != MF_DTYPE_BF16)
                    return mf_fail(MF_ERR_FORMAT, "tensor '%s' in %s has dtype %s (want %s)", t->name, t->file,
                                   mf_st_dtype_name(t->st_dtype), dtype_ok_names);
            }
    }
    return MF_OK;
}

static int64_t align_up(int64_t x) { return (x + MF_W_ALIGN - 1) / MF_W_ALIGN * MF_W_ALIGN; }

// The dtype slot s is stored in: vectors in t->dtype (the CPU's f32), matrices
// in mat_dtype, or (mat_auto) in their checkpoint's f16/bf16 when every
// source has it.
static mf_dtype slot_dtype(const mf_weights_target *t, const wslot *s) {
    if (!s->cols) return t->dtype;
    if (t->mat_auto && s->src_same && (s->src_dt == MF_DTYPE_F16 || s->src_dt == MF_DTYPE_BF16)) return s->src_dt;
    return t->mat_dtype;
}

// Whether slot s can be a view into the mmap (when the load is in place, on
// the CPU): one unrepeated source, already in the slot's dtype and aligned.
static bool slot_mappable(const mf_weights_target *t, const wslot *s) {
    return slot_in_place(s) && s->src[0] && s->src[0]->dtype == slot_dtype(t, s) && s->src[0]->aligned;
}

// Places slots (in-place ones keep offset -1), allocates the block with room
// for the RoPE frequencies, fills it, sets every view.
static mf_status place_and_fill(mf_weights *w, const mf_weights_target *t, wplan *p, bool in_place,
                                const source *rnd) {
    char buf[MF_W_NAME + 48];
    const mf_dec_spec *sp = t->spec;
    const bool verbose = t->verbose;
    const bool rope = !sp->learned_pos;
    const bool host = mf_backend_device(t->be) == MF_DEVICE_CPU;
    int64_t off = 0, total = 0, in_place_bytes = 0, mat_bytes[3] = {0};
    for (int32_t i = 0; i < p->n; i++) {
        wslot *s = &p->v[i];
        s->dt = slot_dtype(t, s);
        const int64_t bytes = slot_numel(s) * (int64_t)mf_dtype_size(s->dt);
        if (s->cols) mat_bytes[s->dt] += bytes;
        if (in_place && slot_mappable(t, s)) {
            in_place_bytes += bytes;
            continue;
        }
        // A copied GPT-2 Conv1D on the CPU: (out, in) rows, as a Linear's, so
        // that the decode GEMV streams whole rows on the hot team (the
        // row-major (in, out) path read bf16 GPT-2 small at 8-15 GB/s against
        // 24-26 for Linear rows: docs/notes/cpu.md).
        s->flip = host && s->conv1d && s->n_src == 1 && s->n_rep == 0;
        s->offset = off;
        off = align_up(off + bytes);
        total += bytes;
    }
    w->mat_dtype = t->mat_dtype;
    for (int d = 0; d < 3; d++)
        if (mat_bytes[d] > mat_bytes[w->mat_dtype]) w->mat_dtype = (mf_dtype)d;
    const int64_t freq_off = off, n_freq = sp->head_dim / 2;
    if (rope) off = align_up(off + n_freq * 4);
    w->block_bytes = off;
    w->weight_bytes = total + in_place_bytes;
    MF_TRY(mf_backend_alloc(t->be, (size_t)(off > 0 ? off : 1), &w->block));

    filler f = {.be = t->be, .host = host, .block = w->block,
                .total = total, .verbose = verbose && total > 0, .last_pct = -5, .t0 = now_s()};
    f.stage_bytes = (size_t)64 << 20; // CPU: chunks for progress only
    mf_status s = MF_OK;
    if (!f.host) {
        f.stage = mf_malloc(f.stage_bytes);
        if (!f.stage) s = mf_fail(MF_ERR_OOM, "model: out of host memory for the %zu-byte upload buffer", f.stage_bytes);
    }
    const mf_device dev = mf_backend_device(t->be);
    for (int32_t i = 0; i < p->n && s == MF_OK; i++) {
        wslot *sl = &p->v[i];
        if (sl->offset < 0) { // in place: a read-only view into the mmap
            set_view(sl, (void *)sl->src[0]->data, sl->src[0]->dtype, MF_DEVICE_CPU);
            continue;
        }
        int64_t o = sl->offset;
        const int64_t es = (int64_t)mf_dtype_size(sl->dt);
        for (int32_t e = 0; e < slot_reps(sl) && s == MF_OK; e++)
            for (int j = 0; j < sl->n_src && s == MF_OK; j++) {
                const int64_t n = sl->rows[j] * (sl->cols ? sl->cols : 1);
                source src = {0};
                if (rnd) { // group e > 0 (experts): streams above the slots' (group 0 keeps the old ones)
                    src = *rnd;
                    src.stream = (uint64_t)i * 4 + (uint64_t)j + ((uint64_t)e << 32);
                    src.mean = sl->mean, src.std = sl->std;
                } else {
                    src.t = e == 0 ? sl->src[j] : mf_st_lookup(w->st, src_name(sl, e, j, buf, sizeof buf));
                }
                s = sl->flip ? fill_flip(&f, o, &src, sl->rows[j], sl->cols, sl->dt, sl->name[j])
                             : fill(&f, o, &src, n, sl->dt);
                o += n * es;
            }
        set_view(sl, (char *)w->block + sl->offset, sl->dt, dev);
    }
    if (s == MF_OK && rope) {
        float *freq = mf_malloc((size_t)n_freq * sizeof(float));
        if (!freq) {
            s = mf_fail(MF_ERR_OOM, "model: out of host memory for %lld RoPE frequencies", (long long)n_freq);
        } else {
            mf_dec_spec_inv_freq(sp, freq);
            s = mf_backend_copy(t->be, (char *)w->block + freq_off, freq, (size_t)n_freq * 4, MF_COPY_H2D);
            if (s == MF_OK) s = mf_backend_sync(t->be);
            free(freq);
            const int64_t shp = n_freq;
            if (s == MF_OK) s = mf_tensor_make(&w->inv_freq, (char *)w->block + freq_off, MF_DTYPE_F32, dev, 1, &shp);
        }
    }
    free(f.stage);
    if (s != MF_OK) return s;
    if (sp->tied) {
        w->lm_head.w = w->tok_emb;
        MF_TRY(mf_tensor_transpose(&w->lm_head.w, 0, 1));
        memset(&w->lm_head.bias, 0, sizeof w->lm_head.bias);
    }
    return MF_OK;
}

static mf_status alloc_layers(mf_weights *w, const mf_weights_target *t) {
    w->be = t->be;
    w->layers = mf_calloc((size_t)t->spec->n_layers, sizeof *w->layers);
    if (!w->layers)
        return mf_fail(MF_ERR_OOM, "model: out of host memory for %d layer descriptors", t->spec->n_layers);
    return MF_OK;
}

static bool st_has(const mf_st_file *st, const char *name) { return mf_st_lookup(st, name) != NULL; }

// The family's map into p (fuse: stack q|k|v and gate|up); an out-of-memory
// or a malformed map is an error.
static mf_status plan(const mf_weights_target *t, mf_weights *w, bool fuse, const mf_st_file *st, wplan *p) {
    p->n = 0, p->fuse = fuse, p->st = st, p->has = st_has;
    if (!t->map) return mf_fail(MF_ERR_UNSUPPORTED, "model: %s has no weight map", t->spec->arch);
    t->map(t->spec, w, p);
    return p->oom ? mf_fail(MF_ERR_OOM, "model: out of host memory for the weight plan") : MF_OK;
}

static void reset_views(mf_weights *w, int32_t n_layers) {
    mf_layer_weights *L = w->layers;
    memset(L, 0, (size_t)n_layers * sizeof *L);
    mf_backend *be = w->be;
    mf_st_file *st = w->st;
    memset(w, 0, sizeof *w);
    w->layers = L, w->be = be, w->st = st;
}

mf_status mf_weights_load(mf_weights *w, const mf_weights_target *t, mf_st_file *st) {
    w->st = st;
    MF_TRY(alloc_layers(w, t));
    const mf_dec_spec *sp = t->spec;
    // First the plan without stacking: check every source, and see whether
    // the CPU can use the matrices in place (each in its dtype and aligned;
    // vectors of another dtype are copied either way).
    wplan p = {0};
    mf_status s = plan(t, w, false, st, &p);
    if (s == MF_OK) s = check_sources(st, &p);
    bool in_place = s == MF_OK && t->mmap && mf_backend_device(t->be) == MF_DEVICE_CPU;
    for (int32_t i = 0; i < p.n && in_place; i++)
        if (slot_in_place(&p.v[i]) && p.v[i].cols && !slot_mappable(t, &p.v[i])) in_place = false;
    if (s == MF_OK && !in_place) { // copying anyway: stack q|k|v and gate|up
        reset_views(w, sp->n_layers);
        s = plan(t, w, true, st, &p);
        if (s == MF_OK) s = check_sources(st, &p);
    }
    if (s == MF_OK) s = place_and_fill(w, t, &p, in_place, NULL);
    bool any_in_place = false;
    for (int32_t i = 0; i < p.n && in_place; i++) any_in_place = any_in_place || p.v[i].offset < 0;
    free(p.v);
    if (s == MF_OK && !any_in_place) { // nothing points into the mmap any more
        mf_st_close(w->st);
        w->st = NULL;
    }
    return s;
}

mf_status mf_weights_random(mf_weights *w, const mf_weights_target *t, uint64_t seed) {
    MF_TRY(alloc_layers(w, t));
    wplan p = {0};
    source rnd = {.seed = seed};
    mf_status s = plan(t, w, true, NULL, &p);
    if (s == MF_OK) s = place_and_fill(w, t, &p, false, &rnd);
    free(p.v);
    return s;
}

// ---- save (the inverse of load, for weights filled by mf_weights_random) ----------------

static const char *st_dtype_str(mf_dtype dt) {
    return dt == MF_DTYPE_F32 ? "F32" : dt == MF_DTYPE_F16 ? "F16" : dt == MF_DTYPE_BF16 ? "BF16" : NULL;
}

// The header JSON: every source of every slot, in plan order, in its view's
// dtype, its data contiguous in the block order (group e, then source j), as
// place_and_fill wrote them; offsets into the data section = offsets into a
// packed copy.
static cJSON *save_header(const wplan *p, const char *const *meta, int32_t n_meta, int64_t *bytes) {
    char buf[MF_W_NAME + 48];
    cJSON *h = cJSON_CreateObject();
    if (!h) return NULL;
    int64_t off = 0;
    bool ok = true;
    for (int32_t i = 0; i < p->n && ok; i++) {
        const wslot *s = &p->v[i];
        const char *dt = st_dtype_str(s->dst->dtype);
        const int64_t es = (int64_t)mf_dtype_size(s->dst->dtype);
        for (int32_t e = 0; e < slot_reps(s) && ok; e++)
            for (int j = 0; j < s->n_src && ok; j++) {
                const int64_t n = s->rows[j] * (s->cols ? s->cols : 1);
                const double shape[2] = {(double)s->rows[j], (double)s->cols};
                const double offs[2] = {(double)off, (double)(off + n * es)};
                cJSON *t = cJSON_AddObjectToObject(h, src_name(s, e, j, buf, sizeof buf)); // owned by h
                ok = t && cJSON_AddStringToObject(t, "dtype", dt) &&
                     cJSON_AddItemToObject(t, "shape", cJSON_CreateDoubleArray(shape, s->cols ? 2 : 1)) &&
                     cJSON_AddItemToObject(t, "data_offsets", cJSON_CreateDoubleArray(offs, 2));
                off += n * es;
            }
    }
    cJSON *m = ok && n_meta > 0 ? cJSON_AddObjectToObject(h, "__metadata__") : NULL;
    for (int32_t i = 0; i < n_meta && ok; i++) ok = m && cJSON_AddStringToObject(m, meta[2 * i], meta[2 * i + 1]);
    if (!ok) {
        cJSON_Delete(h);
        return NULL;
    }
    *bytes = off;
    return h;
}

// Whether a planned slot's view is a flipped one (load: fill_flip).
static bool slot_flipped(const wslot *s) {
    return s->cols && !s->transposed && s->n_rep == 0 && s->dst->ndim == 2 && s->dst->stride[1] != 1;
}

// A flipped slot's (cols, rows) data at p written as the checkpoint's (rows,
// cols), a row at a time through row (cols elements of es bytes).
static bool write_flipped(FILE *f, const char *p, int64_t rows, int64_t cols, size_t es, char *row) {
    bool ok = true;
    for (int64_t r = 0; r < rows && ok; r++) {
        for (int64_t c = 0; c < cols; c++) memcpy(row + (size_t)c * es, p + (size_t)(c * rows + r) * es, es);
        ok = fwrite(row, es, (size_t)cols, f) == (size_t)cols;
    }
    return ok;
}

mf_status mf_weights_save(mf_weights *w, const mf_weights_target *t, const char *path, const char *const *meta,
                          int32_t n_meta) {
    static const char fn[] = "weights_save";
    if (!w || !t || !t->spec || !path)
        return mf_fail(MF_ERR_INVALID_ARG, "%s: weights, target, spec or path is NULL", fn);
    if (n_meta < 0 || (n_meta > 0 && !meta))
        return mf_fail(MF_ERR_INVALID_ARG, "%s: %d metadata pairs with meta %s", fn, n_meta, meta ? "set" : "NULL");
    if (!w->block || !w->layers) return mf_fail(MF_ERR_INVALID_ARG, "%s: the weights are not allocated", fn);
    if (w->st) // a load that kept views into the mmap planned unstacked sources: copy the checkpoint instead
        return mf_fail(MF_ERR_UNSUPPORTED, "%s: the weights are views into a checkpoint (%s); copy its files instead",
                       fn, mf_st_path(w->st));
    // Plan as mf_weights_random did (stacked): the family's map only records
    // view pointers and sets n_qkv / n_up, which it set the same way then.
    wplan p = {0};
    MF_TRY(plan(t, w, true, NULL, &p));
    for (int32_t i = 0; i < p.n; i++) {
        const char *why = !p.v[i].dst->data ? "has no data" : !st_dtype_str(p.v[i].dst->dtype) ? "is not a float" : NULL;
        if (why) {
            free(p.v);
            return mf_fail(MF_ERR_INVALID_ARG, "%s: weight '%s' %s", fn, p.v[i].name[0], why);
        }
    }
    int64_t bytes = 0;
    cJSON *h = save_header(&p, meta, n_meta, &bytes);
    char *json = h ? cJSON_PrintUnformatted(h) : NULL;
    cJSON_Delete(h);
    size_t row_bytes = 1; // a row of the widest flipped slot, written back as (in, out)
    for (int32_t i = 0; i < p.n; i++)
        if (slot_flipped(&p.v[i])) {
            const size_t b = (size_t)p.v[i].cols * mf_dtype_size(p.v[i].dst->dtype);
            row_bytes = b > row_bytes ? b : row_bytes;
        }
    char *host = json ? mf_malloc((size_t)(w->block_bytes > 0 ? w->block_bytes : 1)) : NULL;
    char *row = host ? mf_malloc(row_bytes) : NULL;
    mf_status s = row ? MF_OK
                      : mf_fail(MF_ERR_OOM, "%s: out of host memory for %s", fn,
                                !json ? "the header" : !host ? "a copy of the weights" : "a row of a Conv1D weight");
    if (s == MF_OK) s = mf_backend_copy(w->be, host, w->block, (size_t)w->block_bytes, MF_COPY_D2H);
    if (s == MF_OK) s = mf_backend_sync(w->be);
    FILE *f = s == MF_OK ? fopen(path, "wb") : NULL;
    if (s == MF_OK && !f) s = mf_fail(MF_ERR_IO, "%s: cannot create %s", fn, path);
    if (s == MF_OK) { // 8-byte length, the JSON padded with spaces to 8 bytes, the data in header order
        const size_t jl = strlen(json), hl = (jl + 7) / 8 * 8;
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hl >> (8 * i));
        bool ok = fwrite(len8, 1, 8, f) == 8 && fwrite(json, 1, jl, f) == jl;
        for (size_t i = jl; i < hl && ok; i++) ok = fputc(' ', f) != EOF;
        for (int32_t i = 0; i < p.n && ok; i++) {
            const wslot *sl = &p.v[i];
            const size_t es = mf_dtype_size(sl->dst->dtype), n = (size_t)slot_numel(sl) * es;
            char *at = host + ((const char *)sl->dst->data - (const char *)w->block);
            ok = slot_flipped(sl) ? write_flipped(f, at, slot_rows(sl), sl->cols, es, row) // (in, out) again
                                  : fwrite(at, 1, n, f) == n;
        }
        if (fclose(f) != 0 || !ok) {
            s = mf_fail(MF_ERR_IO, "%s: writing %s failed (%lld data bytes)", fn, path, (long long)bytes);
            (void)remove(path); // no partial file left behind
        }
    }
    free(row);
    free(host);
    free(json);
    free(p.v);
    return s;
}

void mf_weights_free(mf_weights *w) {
    if (!w) return;
    if (w->be) mf_backend_dealloc(w->be, w->block);
    mf_st_close(w->st);
    free(w->layers);
    memset(w, 0, sizeof *w);
}
