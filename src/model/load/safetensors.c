// safetensors: map, validate every header value, look tensors up by name.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/fileio.h"
#include "model/load/safetensors.h"

// Messages name files and tensors with at most this many characters each, so
// that both fit in the 512-byte error message.
#define NAME_FMT "%.160s"

// Integers in a JSON header are doubles in cJSON: exact up to 2^53, which is
// also the most any real file offset or dim can be.
#define JSON_INT_MAX 9007199254740992.0

// Index files (a few thousand names) above this are refused as corrupt.
#define MAX_INDEX_BYTES (64u << 20)

typedef struct {
    char *path;       // file path (owned)
    void *map;        // read-only mapping of the whole file; NULL for a caller's buffer
    size_t map_len;
    cJSON *header;    // parsed header: owns the tensor names
    cJSON *metadata;  // header's __metadata__ object (borrowed), NULL when absent
} mf_st_shard;

struct mf_st_file {
    char *path;            // file or directory the checkpoint was opened from
    mf_st_shard *shards;   // (n_shards)
    int32_t n_shards, cap_shards;
    mf_st_tensor *tensors; // (n_tensors) shard order, then header order
    int64_t n_tensors, cap_tensors;
    int64_t *table;        // (table_mask + 1) open-addressing slots: tensor index or -1
    int64_t table_mask;
};

// ---- dtypes --------------------------------------------------------------------------

static const struct {
    const char *name;
    int32_t bits;
    bool supported;
    mf_dtype dtype;
} dtype_info[MF_ST_DTYPE_COUNT] = {
    [MF_ST_BOOL] = {"BOOL", 8, false, MF_DTYPE_F32},
    [MF_ST_U8] = {"U8", 8, false, MF_DTYPE_F32},
    [MF_ST_I8] = {"I8", 8, false, MF_DTYPE_F32},
    [MF_ST_U16] = {"U16", 16, false, MF_DTYPE_F32},
    [MF_ST_I16] = {"I16", 16, false, MF_DTYPE_F32},
    [MF_ST_U32] = {"U32", 32, false, MF_DTYPE_F32},
    [MF_ST_I32] = {"I32", 32, true, MF_DTYPE_I32},
    [MF_ST_U64] = {"U64", 64, false, MF_DTYPE_F32},
    [MF_ST_I64] = {"I64", 64, false, MF_DTYPE_F32},
    [MF_ST_F16] = {"F16", 16, true, MF_DTYPE_F16},
    [MF_ST_BF16] = {"BF16", 16, true, MF_DTYPE_BF16},
    [MF_ST_F32] = {"F32", 32, true, MF_DTYPE_F32},
    [MF_ST_F64] = {"F64", 64, false, MF_DTYPE_F32},
    [MF_ST_C64] = {"C64", 64, false, MF_DTYPE_F32},
    [MF_ST_F8_E4M3] = {"F8_E4M3", 8, false, MF_DTYPE_F32},
    [MF_ST_F8_E5M2] = {"F8_E5M2", 8, false, MF_DTYPE_F32},
    [MF_ST_F8_E8M0] = {"F8_E8M0", 8, false, MF_DTYPE_F32},
    [MF_ST_F6_E2M3] = {"F6_E2M3", 6, false, MF_DTYPE_F32},
    [MF_ST_F6_E3M2] = {"F6_E3M2", 6, false, MF_DTYPE_F32},
    [MF_ST_F4] = {"F4", 4, false, MF_DTYPE_F32},
};

const char *mf_st_dtype_name(mf_st_dtype dt) {
    return (unsigned)dt < MF_ST_DTYPE_COUNT ? dtype_info[dt].name : "?";
}

int32_t mf_st_dtype_bits(mf_st_dtype dt) {
    return (unsigned)dt < MF_ST_DTYPE_COUNT ? dtype_info[dt].bits : 0;
}

static bool dtype_from_name(const char *s, mf_st_dtype *out) {
    for (int i = 0; i < MF_ST_DTYPE_COUNT; i++) {
        if (strcmp(s, dtype_info[i].name) == 0) {
            *out = (mf_st_dtype)i;
            return true;
        }
    }
    return false;
}

// ---- small helpers -----------------------------------------------------------------

// A JSON number that is an integer in [0, 2^53].
static bool json_uint(const cJSON *v, int64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d <= JSON_INT_MAX)) return false; // also rejects NaN
    int64_t i = (int64_t)d;
    if ((double)i != d) return false;
    *out = i;
    return true;
}

// "(768, 2304)" into buf.
static const char *fmt_shape(char *buf, size_t n, int32_t ndim, const int64_t *shape) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "(");
    for (int32_t i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, ")");
    return buf;
}

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = mf_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

// ---- the checkpoint object ---------------------------------------------------------

static mf_status file_new(const char *path, int32_t n_shards, mf_st_file **out) {
    mf_st_file *f = mf_calloc(1, sizeof *f);
    if (!f) return mf_fail(MF_ERR_OOM, NAME_FMT ": cannot allocate the checkpoint object", path);
    f->path = dup_str(path);
    f->shards = mf_calloc((size_t)n_shards, sizeof *f->shards);
    if (!f->path || !f->shards) {
        mf_st_close(f);
        return mf_fail(MF_ERR_OOM, NAME_FMT ": cannot allocate the checkpoint object", path);
    }
    f->cap_shards = n_shards;
    *out = f;
    return MF_OK;
}

void mf_st_close(mf_st_file *f) {
    if (!f) return;
    for (int32_t i = 0; i < f->n_shards; i++) {
        mf_st_shard *sh = &f->shards[i];
        if (sh->map) munmap(sh->map, sh->map_len);
        cJSON_Delete(sh->header);
        free(sh->path);
    }
    free(f->shards);
    free(f->tensors);
    free(f->table);
    free(f->path);
    free(f);
}

// Appends an empty shard named path; its index in *idx.
static mf_status shard_add(mf_st_file *f, const char *path, int32_t *idx) {
    if (f->n_shards >= f->cap_shards) return mf_fail(MF_ERR_INTERNAL, "safetensors: too many shards");
    mf_st_shard *sh = &f->shards[f->n_shards];
    memset(sh, 0, sizeof *sh);
    sh->path = dup_str(path);
    if (!sh->path) return mf_fail(MF_ERR_OOM, NAME_FMT ": cannot allocate its name", path);
    *idx = f->n_shards++;
    return MF_OK;
}

static mf_status tensors_reserve(mf_st_file *f, int64_t more) {
    if (f->n_tensors + more <= f->cap_tensors) return MF_OK;
    int64_t cap = f->n_tensors + more;
    mf_st_tensor *t = mf_malloc((size_t)cap * sizeof *t);
    if (!t) return mf_fail(MF_ERR_OOM, NAME_FMT ": cannot allocate %lld tensor records", f->path, (long long)cap);
    if (f->n_tensors) memcpy(t, f->tensors, (size_t)f->n_tensors * sizeof *t);
    free(f->tensors);
    f->tensors = t;
    f->cap_tensors = cap;
    return MF_OK;
}

static int cmp_by_offset(const void *a, const void *b) {
    const mf_st_tensor *x = *(const mf_st_tensor *const *)a, *y = *(const mf_st_tensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

// No two non-empty tensors of tensors[first..n) share a byte.
static mf_status check_overlaps(mf_st_file *f, int64_t first, const char *fn) {
    int64_t n = f->n_tensors - first;
    if (n < 2) return MF_OK;
    const mf_st_tensor **by = mf_malloc((size_t)n * sizeof *by);
    if (!by) return mf_fail(MF_ERR_OOM, NAME_FMT ": cannot allocate the overlap check", fn);
    int64_t m = 0;
    for (int64_t i = first; i < f->n_tensors; i++)
        if (f->tensors[i].nbytes > 0) by[m++] = &f->tensors[i];
    qsort(by, (size_t)m, sizeof *by, cmp_by_offset);
    for (int64_t i = 1; i < m; i++) {
        const mf_st_tensor *a = by[i - 1], *b = by[i];
        if (a->offset + a->nbytes > b->offset) {
            free(by);
            return mf_fail(MF_ERR_FORMAT, NAME_FMT ": tensors '" NAME_FMT "' and '" NAME_FMT "' overlap in the data section",
                           fn, a->name, b->name);
        }
    }
    free(by);
    return MF_OK;
}

// One header entry into *t (name, file and shard already set).
static mf_status parse_entry(const cJSON *e, const char *fn, int64_t data_start, int64_t data_len,
                             const uint8_t *data, mf_st_tensor *t) {
    const char *tn = t->name;
    if (!cJSON_IsObject(e))
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": tensor '" NAME_FMT "': header entry is not a JSON object", fn, tn);

    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(jd))
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": tensor '" NAME_FMT "': missing or non-string \"dtype\"", fn, tn);
    if (!dtype_from_name(jd->valuestring, &t->st_dtype))
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": tensor '" NAME_FMT "': unknown dtype \"%.32s\"", fn, tn,
                       jd->valuestring);
    t->supported = dtype_info[t->st_dtype].supported;
    t->dtype = dtype_info[t->st_dtype].dtype;

    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(js))
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": tensor '" NAME_FMT "': missing or non-array \"shape\"", fn, tn);
    int nd = cJSON_GetArraySize(js);
    if (nd > MF_ST_MAX_DIMS)
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": tensor '" NAME_FMT "': %d dims, more than %d", fn, tn, nd,
                       MF_ST_MAX_DIMS);
    t->ndim = nd;
    for (int i = 0; i < MF_ST_MAX_DIMS; i++) t->shape[i] = 1;
    bool any_zero = false;
    int i = 0;
    for (const cJSON *d = js->child; d; d = d->next, i++) {
        if (!json_uint(d, &t->shape[i])) {
            if (cJSON_IsNumber(d) && d->valuedouble < 0)
                return mf_fail(MF_ERR_FORMAT, NAME_FMT ": tensor '" NAME_FMT "': negative dim shape[%d] = %g", fn, tn,
                               i, d->valuedouble);
            return mf_fail(MF_ERR_FORMAT, NAME_FMT ": tensor '" NAME_FMT "': shape[%d] is not an integer in [0, 2^53]",
                           fn, tn, i);
        }
        if (t->shape[i] == 0) any_zero = true;
    }
    char sb[160];
    // The product of the non-zero dims must fit in int64 even when a zero dim
    // makes numel 0: strides of a view are such products.
    int64_t numel = 1;
    for (i = 0; i < nd; i++) {
        if (t->shape[i] == 0) continue;
        if (numel > INT64_MAX / t->shape[i])
            return mf_fail(MF_ERR_FORMAT, NAME_FMT ": tensor '" NAME_FMT "': shape %s overflows int64", fn, tn,
                           fmt_shape(sb, sizeof sb, t->ndim, t->shape));
        numel *= t->shape[i];
    }
    if (any_zero) numel = 0;
    t->numel = numel;
    int64_t bits = dtype_info[t->st_dtype].bits;
    if (numel > INT64_MAX / bits)
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": tensor '" NAME_FMT "': shape %s of %s overflows int64 bytes", fn, tn,
                       fmt_shape(sb, sizeof sb, t->ndim, t->shape), mf_st_dtype_name(t->st_dtype));
    if ((numel * bits) % 8 != 0)
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": tensor '" NAME_FMT "': %lld elements of %s are not a whole number of bytes",
                       fn, tn, (long long)numel, mf_st_dtype_name(t->st_dtype));
    int64_t want = numel * bits / 8;

    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    int64_t begin = 0, end = 0;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || !json_uint(jo->child, &begin) ||
        !json_uint(jo->child->next, &end))
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": tensor '" NAME_FMT "': \"data_offsets\" is not 2 integers in [0, 2^53]",
                       fn, tn);
    if (begin > end)
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": tensor '" NAME_FMT "': data_offsets [%lld, %lld] begin past end", fn,
                       tn, (long long)begin, (long long)end);
    if (end > data_len)
        return mf_fail(MF_ERR_FORMAT,
                       NAME_FMT ": tensor '" NAME_FMT "': header offset past the end of the file "
                                "(data_offsets [%lld, %lld], data section has %lld bytes): truncated file?",
                       fn, tn, (long long)begin, (long long)end, (long long)data_len);
    if (end - begin != want)
        return mf_fail(MF_ERR_FORMAT,
                       NAME_FMT ": tensor '" NAME_FMT "': data_offsets [%lld, %lld] hold %lld bytes, but %s %s needs %lld",
                       fn, tn, (long long)begin, (long long)end, (long long)(end - begin),
                       mf_st_dtype_name(t->st_dtype), fmt_shape(sb, sizeof sb, t->ndim, t->shape), (long long)want);
    t->data = data + begin;
    int64_t esize = bits >= 8 ? bits / 8 : 1;
    t->aligned = (uintptr_t)t->data % (uintptr_t)esize == 0;
    t->nbytes = want;
    t->offset = data_start + begin;
    return MF_OK;
}

// Parses the file image buf[0..len) as shard si of f, appending its tensors.
static mf_status parse_image(mf_st_file *f, int32_t si, const uint8_t *buf, size_t len) {
    mf_st_shard *sh = &f->shards[si];
    const char *fn = sh->path;
    if (len < 8)
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": truncated file: %zu bytes, less than the 8-byte header length", fn,
                       len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i];
    if (hlen > (uint64_t)MF_ST_MAX_HEADER_BYTES)
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": header length %llu is absurd (more than %lld bytes): not a safetensors file?",
                       fn, (unsigned long long)hlen, (long long)MF_ST_MAX_HEADER_BYTES);
    if (hlen > len - 8)
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": header length %llu runs past the end of the file (%zu bytes): truncated file?",
                       fn, (unsigned long long)hlen, len);
    if (hlen < 2 || buf[8] != '{')
        return mf_fail(MF_ERR_FORMAT, NAME_FMT ": header does not start with '{'", fn);

    MF_TRY(mf_json_parse((const char *)buf + 8, (size_t)hlen, fn, "header", &sh->header));
    if (!cJSON_IsObject(sh->header)) return mf_fail(MF_ERR_FORMAT, NAME_FMT ": header is not a JSON object", fn);

    int64_t data_start = 8 + (int64_t)hlen;
    int64_t data_len = (int64_t)len - data_start;
    const uint8_t *data = buf + data_start;
    MF_TRY(tensors_reserve(f, cJSON_GetArraySize(sh->header)));
    int64_t first = f->n_tensors;
    for (const cJSON *e = sh->header->child; e; e = e->next) {
        const char *tn = e->string ? e->string : "";
        if (strcmp(tn, "__metadata__") == 0) {
            if (!cJSON_IsObject(e))
                return mf_fail(MF_ERR_FORMAT, NAME_FMT ": __metadata__ is not a JSON object", fn);
            if (!sh->metadata) sh->metadata = (cJSON *)e;
            continue;
        }
        mf_st_tensor *t = &f->tensors[f->n_tensors];
        memset(t, 0, sizeof *t);
        t->name = tn;
        t->file = sh->path;
        t->shard = si;
        MF_TRY(parse_entry(e, fn, data_start, data_len, data, t));
        f->n_tensors++;
    }
    return check_overlaps(f, first, fn);
}

// Hash table over all tensors; refuses duplicate names.
static mf_status build_table(mf_st_file *f) {
    int64_t cap = 16;
    while (cap < 2 * f->n_tensors) cap *= 2;
    free(f->table);
    f->table = mf_malloc((size_t)cap * sizeof *f->table);
    if (!f->table) return mf_fail(MF_ERR_OOM, NAME_FMT ": cannot allocate the tensor table", f->path);
    for (int64_t i = 0; i < cap; i++) f->table[i] = -1;
    f->table_mask = cap - 1;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const mf_st_tensor *t = &f->tensors[i];
        int64_t s = (int64_t)(hash_name(t->name) & (uint64_t)f->table_mask);
        while (f->table[s] >= 0) {
            const mf_st_tensor *o = &f->tensors[f->table[s]];
            if (strcmp(o->name, t->name) == 0) {
                if (o->shard == t->shard)
                    return mf_fail(MF_ERR_FORMAT, NAME_FMT ": duplicate tensor name '" NAME_FMT "' in the header",
                                   t->file, t->name);
                return mf_fail(MF_ERR_FORMAT, "tensor '" NAME_FMT "' is in both " NAME_FMT " and " NAME_FMT, t->name,
                               o->file, t->file);
            }
            s = (s + 1) & f->table_mask;
        }
        f->table[s] = i;
    }
    return MF_OK;
}

// Maps path read-only into shard si and parses it.
static mf_status map_and_parse(mf_st_file *f, int32_t si) {
    mf_st_shard *sh = &f->shards[si];
    const char *fn = sh->path;
    int fd = open(fn, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mf_fail(MF_ERR_IO, NAME_FMT ": cannot open: %s", fn, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return mf_fail(MF_ERR_IO, NAME_FMT ": not a regular file", fn);
    }
    size_t len = (size_t)st.st_size;
    if (len >= 8) { // shorter files are reported as truncated by parse_image
        void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int err = errno;
            close(fd);
            return mf_fail(err == ENOMEM ? MF_ERR_OOM : MF_ERR_IO, NAME_FMT ": cannot mmap %zu bytes: %s", fn, len,
                           strerror(err));
        }
        sh->map = m;
        sh->map_len = len;
    }
    close(fd); // the mapping keeps the file
    static const uint8_t empty[8];
    return parse_image(f, si, sh->map ? sh->map : empty, sh->map ? len : (size_t)st.st_size);
}

mf_status mf_st_open(const char *path, mf_st_file **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "safetensors open: out is NULL");
    *out = NULL;
    if (!path) return mf_fail(MF_ERR_INVALID_ARG, "safetensors open: path is NULL");
    mf_st_file *f = NULL;
    MF_TRY(file_new(path, 1, &f));
    int32_t si = 0;
    mf_status s = shard_add(f, path, &si);
    if (s == MF_OK) s = map_and_parse(f, si);
    if (s == MF_OK) s = build_table(f);
    if (s != MF_OK) {
        mf_st_close(f);
        return s;
    }
    *out = f;
    return MF_OK;
}

mf_status mf_st_parse_buffer(const void *buf, size_t len, const char *name, mf_st_file **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "safetensors parse: out is NULL");
    *out = NULL;
    if (!buf && len) return mf_fail(MF_ERR_INVALID_ARG, "safetensors parse: buf is NULL, len %zu", len);
    if (!name) name = "<buffer>";
    static const uint8_t empty[8];
    mf_st_file *f = NULL;
    MF_TRY(file_new(name, 1, &f));
    int32_t si = 0;
    mf_status s = shard_add(f, name, &si);
    if (s == MF_OK) s = parse_image(f, si, buf ? buf : empty, len);
    if (s == MF_OK) s = build_table(f);
    if (s != MF_OK) {
        mf_st_close(f);
        return s;
    }
    *out = f;
    return MF_OK;
}

// ---- sharded checkpoints -----------------------------------------------------------

void mf_st_index_free(mf_st_index *idx) {
    if (!idx) return;
    free(idx->tensor);
    free(idx->shard);
    free(idx->shards);
    cJSON_Delete(idx->json_);
    free(idx);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// A plain file name: no directory part, not "." or "..", not empty.
static bool is_plain_name(const char *s) {
    return s[0] && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

mf_status mf_st_index_parse(const char *json, size_t len, const char *name, mf_st_index **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "safetensors index: out is NULL");
    *out = NULL;
    if (!json && len) return mf_fail(MF_ERR_INVALID_ARG, "safetensors index: json is NULL, len %zu", len);
    if (!name) name = "<index>";
    mf_st_index *idx = mf_calloc(1, sizeof *idx);
    if (!idx) return mf_fail(MF_ERR_OOM, NAME_FMT ": cannot allocate the index", name);
    cJSON *root = NULL;
    mf_status s = mf_json_parse(json, len, name, "index", &root);
    if (s != MF_OK) {
        free(idx);
        return s;
    }
    const char **sorted = NULL;
    idx->json_ = root;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        s = mf_fail(MF_ERR_FORMAT, NAME_FMT ": missing \"weight_map\" object", name);
        goto done;
    }
    int64_t n = cJSON_GetArraySize(wm);
    if (n == 0) {
        s = mf_fail(MF_ERR_FORMAT, NAME_FMT ": \"weight_map\" is empty", name);
        goto done;
    }
    idx->tensor = mf_malloc((size_t)n * sizeof *idx->tensor);
    idx->shard = mf_malloc((size_t)n * sizeof *idx->shard);
    idx->shards = mf_malloc((size_t)n * sizeof *idx->shards);
    sorted = mf_malloc((size_t)n * sizeof *sorted);
    if (!idx->tensor || !idx->shard || !idx->shards || !sorted) {
        s = mf_fail(MF_ERR_OOM, NAME_FMT ": cannot allocate %lld index entries", name, (long long)n);
        goto done;
    }
    int64_t i = 0;
    for (const cJSON *e = wm->child; e; e = e->next, i++) {
        const char *tn = e->string ? e->string : "";
        if (!cJSON_IsString(e)) {
            s = mf_fail(MF_ERR_FORMAT, NAME_FMT ": weight_map entry '" NAME_FMT "' is not a file name string", name, tn);
            goto done;
        }
        if (!is_plain_name(e->valuestring)) {
            s = mf_fail(MF_ERR_FORMAT, NAME_FMT ": weight_map maps '" NAME_FMT "' to \"" NAME_FMT
                                       "\", which is not a plain file name",
                        name, tn, e->valuestring);
            goto done;
        }
        idx->tensor[i] = tn;
        idx->shards[i] = e->valuestring;
        sorted[i] = tn;
    }
    // Duplicate tensor names (JSON allows repeated keys; cJSON keeps them all).
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_str);
    for (i = 1; i < n; i++) {
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            s = mf_fail(MF_ERR_FORMAT, NAME_FMT ": tensor '" NAME_FMT "' listed twice in weight_map", name, sorted[i]);
            goto done;
        }
    }
    // Distinct shard names, sorted; then each entry's shard index.
    for (i = 0; i < n; i++) sorted[i] = idx->shards[i];
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_str);
    int32_t ns = 0;
    for (i = 0; i < n; i++)
        if (ns == 0 || strcmp(sorted[i], sorted[ns - 1]) != 0) sorted[ns++] = sorted[i];
    for (i = 0; i < n; i++) {
        const char **hit = bsearch(&idx->shards[i], sorted, (size_t)ns, sizeof *sorted, cmp_str);
        idx->shard[i] = (int32_t)(hit - sorted);
    }
    memcpy(idx->shards, sorted, (size_t)ns * sizeof *sorted);
    idx->n_shards = ns;
    idx->n_entries = n;
done:
    free(sorted);
    if (s != MF_OK) {
        mf_st_index_free(idx);
        return s;
    }
    *out = idx;
    return MF_OK;
}

static mf_status open_index(mf_st_file *f, const char *dir, const char *index_path) {
    char *text = NULL;
    size_t len = 0;
    MF_TRY(mf_file_read_all(index_path, MAX_INDEX_BYTES, &text, &len));
    mf_st_index *idx = NULL;
    mf_status s = mf_st_index_parse(text, len, index_path, &idx);
    free(text);
    if (s != MF_OK) return s;

    // Room for every shard: f was created with one slot.
    mf_st_shard *sh = mf_calloc((size_t)idx->n_shards, sizeof *sh);
    if (!sh) {
        s = mf_fail(MF_ERR_OOM, NAME_FMT ": cannot allocate %d shards", index_path, idx->n_shards);
        mf_st_index_free(idx);
        return s;
    }
    free(f->shards);
    f->shards = sh;
    f->cap_shards = idx->n_shards;

    for (int32_t i = 0; i < idx->n_shards && s == MF_OK; i++) {
        char *p = mf_path_join(dir, idx->shards[i]);
        int32_t si = 0;
        s = p ? shard_add(f, p, &si) : mf_fail(MF_ERR_OOM, NAME_FMT ": cannot allocate a path", dir);
        free(p);
        if (s == MF_OK) {
            s = map_and_parse(f, si);
            if (s == MF_ERR_IO) { // say who named the missing shard
                char msg[512];
                snprintf(msg, sizeof msg, "%s", mf_last_error());
                s = mf_fail(MF_ERR_IO, "%s (a shard named by " NAME_FMT ")", msg, index_path);
            }
        }
    }
    if (s == MF_OK) s = build_table(f);
    for (int64_t i = 0; i < idx->n_entries && s == MF_OK; i++) {
        const mf_st_tensor *t = mf_st_lookup(f, idx->tensor[i]);
        const char *want = f->shards[idx->shard[i]].path;
        if (!t)
            s = mf_fail(MF_ERR_FORMAT, NAME_FMT ": weight_map puts tensor '" NAME_FMT "' in " NAME_FMT
                                       ", which has no such tensor",
                        index_path, idx->tensor[i], want);
        else if (t->shard != idx->shard[i])
            s = mf_fail(MF_ERR_FORMAT, NAME_FMT ": weight_map puts tensor '" NAME_FMT "' in " NAME_FMT
                                       ", but it is in " NAME_FMT,
                        index_path, idx->tensor[i], want, t->file);
    }
    mf_st_index_free(idx);
    return s;
}

mf_status mf_st_open_dir(const char *dir, mf_st_file **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "safetensors open_dir: out is NULL");
    *out = NULL;
    if (!dir) return mf_fail(MF_ERR_INVALID_ARG, "safetensors open_dir: dir is NULL");
    struct stat st;
    if (stat(dir, &st) != 0) return mf_fail(MF_ERR_IO, NAME_FMT ": cannot open: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return mf_fail(MF_ERR_IO, NAME_FMT ": not a directory", dir);

    char *index_path = mf_path_join(dir, "model.safetensors.index.json");
    char *single_path = mf_path_join(dir, "model.safetensors");
    mf_st_file *f = NULL;
    mf_status s = MF_OK;
    if (!index_path || !single_path) {
        s = mf_fail(MF_ERR_OOM, NAME_FMT ": cannot allocate a path", dir);
    } else if (stat(single_path, &st) == 0) { // as transformers: the single file first
        int32_t si = 0;
        s = file_new(dir, 1, &f);
        if (s == MF_OK) s = shard_add(f, single_path, &si);
        if (s == MF_OK) s = map_and_parse(f, si);
        if (s == MF_OK) s = build_table(f);
    } else if (stat(index_path, &st) == 0) {
        s = file_new(dir, 1, &f);
        if (s == MF_OK) s = open_index(f, dir, index_path);
    } else {
        s = mf_fail(MF_ERR_IO, NAME_FMT ": has neither model.safetensors nor model.safetensors.index.json", dir);
    }
    free(index_path);
    free(single_path);
    if (s != MF_OK) {
        mf_st_close(f);
        return s;
    }
    *out = f;
    return MF_OK;
}

// ---- lookups -----------------------------------------------------------------------

int64_t mf_st_count(const mf_st_file *f) { return f ? f->n_tensors : 0; }

const mf_st_tensor *mf_st_at(const mf_st_file *f, int64_t i) {
    return f && i >= 0 && i < f->n_tensors ? &f->tensors[i] : NULL;
}

const mf_st_tensor *mf_st_lookup(const mf_st_file *f, const char *name) {
    if (!f || !name || !f->table) return NULL;
    int64_t s = (int64_t)(hash_name(name) & (uint64_t)f->table_mask);
    while (f->table[s] >= 0) {
        const mf_st_tensor *t = &f->tensors[f->table[s]];
        if (strcmp(t->name, name) == 0) return t;
        s = (s + 1) & f->table_mask;
    }
    return NULL;
}

mf_status mf_st_find(const mf_st_file *f, const char *name, const mf_st_tensor **out) {
    if (!f || !name || !out) return mf_fail(MF_ERR_INVALID_ARG, "safetensors find: NULL argument");
    *out = mf_st_lookup(f, name);
    if (!*out) return mf_fail(MF_ERR_FORMAT, "missing tensor '" NAME_FMT "' in " NAME_FMT, name, f->path);
    return MF_OK;
}

mf_status mf_st_expect(const mf_st_file *f, const char *name, int32_t ndim, const int64_t *shape,
                       const mf_st_tensor **out) {
    if (!out) return mf_fail(MF_ERR_INVALID_ARG, "safetensors expect: out is NULL");
    *out = NULL;
    if (shape && (ndim < 0 || ndim > MF_ST_MAX_DIMS))
        return mf_fail(MF_ERR_INVALID_ARG, "safetensors expect: ndim %d not in [0, %d]", ndim, MF_ST_MAX_DIMS);
    const mf_st_tensor *t = NULL;
    MF_TRY(mf_st_find(f, name, &t));
    if (!t->supported)
        return mf_fail(MF_ERR_UNSUPPORTED, "dtype %s unsupported for tensor '" NAME_FMT "' in " NAME_FMT
                                           " (supported: F32, F16, BF16, I32)",
                       mf_st_dtype_name(t->st_dtype), t->name, t->file);
    if (shape) {
        bool same = t->ndim == ndim;
        for (int32_t i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
        if (!same) {
            char a[160], b[160];
            return mf_fail(MF_ERR_FORMAT, "tensor '" NAME_FMT "' in " NAME_FMT " has shape %s, expected %s", t->name,
                           t->file, fmt_shape(a, sizeof a, t->ndim, t->shape), fmt_shape(b, sizeof b, ndim, shape));
        }
    }
    *out = t;
    return MF_OK;
}

mf_status mf_st_tensor_view(const mf_st_tensor *t, mf_tensor *out) {
    if (!t || !out) return mf_fail(MF_ERR_INVALID_ARG, "safetensors view: NULL argument");
    if (!t->supported)
        return mf_fail(MF_ERR_UNSUPPORTED, "dtype %s unsupported for tensor '" NAME_FMT "' in " NAME_FMT,
                       mf_st_dtype_name(t->st_dtype), t->name, t->file);
    if (t->ndim > MF_MAX_DIMS)
        return mf_fail(MF_ERR_UNSUPPORTED, "tensor '" NAME_FMT "' in " NAME_FMT " has %d dims, more than %d", t->name,
                       t->file, t->ndim, MF_MAX_DIMS);
    static const int64_t one = 1;
    // The view type has no const; the mapping is PROT_READ, so writes fault.
    return mf_tensor_make(out, (void *)(uintptr_t)t->data, t->dtype, MF_DEVICE_CPU, t->ndim ? t->ndim : 1,
                          t->ndim ? t->shape : &one);
}

const char *mf_st_path(const mf_st_file *f) { return f ? f->path : NULL; }
int32_t mf_st_shard_count(const mf_st_file *f) { return f ? f->n_shards : 0; }

const char *mf_st_shard_path(const mf_st_file *f, int32_t i) {
    return f && i >= 0 && i < f->n_shards ? f->shards[i].path : NULL;
}

int64_t mf_st_data_bytes(const mf_st_file *f) {
    int64_t sum = 0;
    for (int64_t i = 0; f && i < f->n_tensors; i++) sum += f->tensors[i].nbytes;
    return sum;
}

const char *mf_st_metadata(const mf_st_file *f, const char *key) {
    for (int32_t i = 0; f && key && i < f->n_shards; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(f->shards[i].metadata, key);
        if (cJSON_IsString(v)) return v->valuestring;
    }
    return NULL;
}
