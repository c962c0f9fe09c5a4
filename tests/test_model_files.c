// Checkpoint reading: safetensors files and directories, config.json.
//
//   test_model_files FIXTURE_DIR      (tests/fixtures/model_files)
//
// Good files come from tests/fixtures/make_model_file_fixtures.py (the
// reference safetensors writer and a hand-written one); tensor values follow
// the script's formula and are compared bit for bit. Bad files are derived at
// run time in a temporary directory: every one must fail with the right
// status and a message naming the file (and the tensor or field), leave
// nothing allocated (run under valgrind / ASan), and the next call must work.
// Last line: "N passed, N failed".
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "minfer/minfer.h"
#include "model/arch/arch.h"
#include "model/load/safetensors.h"

static int n_pass, n_fail;
static const char *fixdir;
static char tmpdir[256];

// ---- reporting -------------------------------------------------------------------------

static void report(bool ok, const char *name, const char *fmt, ...) {
    char detail[1024] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(detail, sizeof detail, fmt, ap);
        va_end(ap);
    }
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", name, detail[0] ? ": " : "", detail);
    if (ok)
        n_pass++;
    else
        n_fail++;
}

static int n_bad_inputs; // expect_err calls: the bad-input cases (printed for scripts/reliability-report.sh)

// got must be want, and the last error must contain each non-NULL substring.
static bool expect_err(const char *name, mf_status got, mf_status want, const char *s1, const char *s2,
                       const char *s3) {
    n_bad_inputs++;
    const char *msg = mf_last_error();
    bool ok = got == want;
    const char *subs[3] = {s1, s2, s3};
    const char *missing = NULL;
    for (int i = 0; i < 3; i++)
        if (subs[i] && !strstr(msg, subs[i])) {
            ok = false;
            missing = subs[i];
        }
    report(ok, name, "%s (want %s)%s%s%s: %s", mf_status_str(got), mf_status_str(want), missing ? " message lacks \"" : "",
           missing ? missing : "", missing ? "\"" : "", msg);
    return ok;
}

// ---- files ---------------------------------------------------------------------------

static char *fix_path(const char *rel) {
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", fixdir, rel);
    return buf[k];
}

// Paths made under tmpdir, removed at the end in reverse order.
static char made[256][512];
static int n_made;

static const char *tmp_path(const char *rel) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, rel);
    return buf[k];
}

static void remember(const char *path) {
    for (int i = 0; i < n_made; i++)
        if (strcmp(made[i], path) == 0) return;
    if (n_made < 256) snprintf(made[n_made++], sizeof made[0], "%s", path);
}

static const char *tmp_mkdir(const char *rel) {
    const char *p = tmp_path(rel);
    mkdir(p, 0700);
    remember(p);
    return p;
}

static const char *tmp_write(const char *rel, const void *data, size_t n) {
    const char *p = tmp_path(rel);
    FILE *f = fopen(p, "wb");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(2);
    }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
    remember(p);
    return p;
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot read %s (run tests/fixtures/make_model_file_fixtures.py)\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    if (!b || fread(b, 1, (size_t)len, f) != (size_t)len) exit(2);
    fclose(f);
    b[len] = 0;
    *n = (size_t)len;
    return b;
}

// A safetensors file: 8-byte length, header text, data_len bytes (data or a pattern).
static const char *write_st(const char *rel, const char *header, const void *data, size_t data_len) {
    size_t h = strlen(header), n = 8 + h + data_len;
    unsigned char *b = malloc(n);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < data_len; i++) b[8 + h + i] = data ? ((const unsigned char *)data)[i] : (unsigned char)i;
    const char *p = tmp_write(rel, b, n);
    free(b);
    return p;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

// ---- expected tensor values (the fixture script's formula) -----------------------------

static float fx(int64_t i, int k) {
    float v = (float)((i * 37 + k * 11) % 101 - 50) / 7.0f;
    if (i % 13 == 5) v *= 1000.0f;
    return v;
}

// Every element of t equals fx(i, k) rounded to t's dtype, bit for bit; and
// the view reads back the same through mf_load_f32.
static bool values_ok(const mf_st_tensor *t, int k, char *why, size_t nwhy) {
    mf_tensor v;
    if (mf_st_tensor_view(t, &v) != MF_OK) {
        snprintf(why, nwhy, "view: %s", mf_last_error());
        return false;
    }
    for (int64_t i = 0; i < t->numel; i++) {
        float want = fx(i, k);
        uint32_t got32 = 0, want32 = 0;
        uint16_t got16 = 0, want16 = 0;
        bool same;
        switch (t->st_dtype) {
        case MF_ST_F32:
            memcpy(&got32, (const char *)t->data + 4 * i, 4);
            memcpy(&want32, &want, 4);
            same = got32 == want32;
            break;
        case MF_ST_F16:
            memcpy(&got16, (const char *)t->data + 2 * i, 2);
            want16 = mf_f32_to_f16(want);
            same = got16 == want16;
            want = mf_f16_to_f32(want16);
            break;
        case MF_ST_BF16:
            memcpy(&got16, (const char *)t->data + 2 * i, 2);
            want16 = mf_f32_to_bf16(want);
            same = got16 == want16;
            want = mf_bf16_to_f32(want16);
            break;
        default: snprintf(why, nwhy, "unexpected dtype %s", mf_st_dtype_name(t->st_dtype)); return false;
        }
        float through_view = mf_load_f32(v.data, v.dtype, i);
        if (!same || through_view != want) {
            snprintf(why, nwhy, "%s[%lld]: stored %#x, view %g, expected %g", t->name, (long long)i,
                     t->st_dtype == MF_ST_F32 ? got32 : got16, through_view, want);
            return false;
        }
    }
    return true;
}

static bool shape_is(const mf_st_tensor *t, int32_t ndim, int64_t d0, int64_t d1, int64_t d2) {
    int64_t d[3] = {d0, d1, d2};
    if (t->ndim != ndim) return false;
    for (int i = 0; i < ndim && i < 3; i++)
        if (t->shape[i] != d[i]) return false;
    return true;
}

// ---- safetensors: good files ------------------------------------------------------------

static void test_st_tiny(void) {
    const char *path = fix_path("tiny.safetensors");
    mf_st_file *f = NULL;
    mf_status s = mf_st_open(path, &f);
    if (s != MF_OK) {
        report(false, "st_tiny_open", "%s", mf_last_error());
        return;
    }
    report(mf_st_count(f) == 7, "st_tiny_count", "%lld tensors", (long long)mf_st_count(f));
    const char *fmt = mf_st_metadata(f, "format");
    report(fmt && strcmp(fmt, "pt") == 0 && !mf_st_metadata(f, "nope"), "st_tiny_metadata", "format=%s",
           fmt ? fmt : "(null)");
    report(mf_st_shard_count(f) == 1 && strcmp(mf_st_shard_path(f, 0), path) == 0 && !mf_st_shard_path(f, 1) &&
               strcmp(mf_st_path(f), path) == 0,
           "st_tiny_paths", NULL);

    const mf_st_tensor *t = NULL;
    char why[512] = "";
    s = mf_st_find(f, "a.f32", &t);
    report(s == MF_OK && t->supported && t->dtype == MF_DTYPE_F32 && shape_is(t, 2, 3, 5, 0) && t->numel == 15 &&
               t->nbytes == 60 && values_ok(t, 1, why, sizeof why),
           "st_tiny_f32_values", "%s", why);
    s = mf_st_find(f, "b.f16", &t);
    report(s == MF_OK && t->dtype == MF_DTYPE_F16 && shape_is(t, 3, 2, 3, 4) && t->nbytes == 48 &&
               values_ok(t, 2, why, sizeof why),
           "st_tiny_f16_values", "%s", why);

    s = mf_st_find(f, "scalar", &t);
    float sc = 0;
    if (s == MF_OK) memcpy(&sc, t->data, 4);
    mf_tensor v;
    bool view_ok = s == MF_OK && mf_st_tensor_view(t, &v) == MF_OK && v.ndim == 1 && v.shape[0] == 1;
    report(s == MF_OK && t->ndim == 0 && t->numel == 1 && t->nbytes == 4 && sc == 3.25f && view_ok, "st_tiny_scalar",
           "value %g", sc);
    s = mf_st_find(f, "empty", &t);
    report(s == MF_OK && shape_is(t, 2, 0, 4, 0) && t->numel == 0 && t->nbytes == 0, "st_tiny_empty", NULL);
    s = mf_st_find(f, "ids", &t);
    int32_t ids[5] = {0};
    if (s == MF_OK && t->nbytes == 20) memcpy(ids, t->data, 20);
    report(s == MF_OK && t->dtype == MF_DTYPE_I32 && t->supported && ids[0] == 0 && ids[1] == -1 &&
               ids[2] == INT32_MAX && ids[3] == INT32_MIN && ids[4] == 42,
           "st_tiny_i32_values", NULL);

    // An I64 buffer opens fine and is refused when asked for.
    s = mf_st_find(f, "position_ids", &t);
    report(s == MF_OK && !t->supported && t->st_dtype == MF_ST_I64 && t->nbytes == 48, "st_tiny_i64_listed", NULL);
    s = mf_st_expect(f, "position_ids", 2, (const int64_t[]){1, 6}, &t);
    expect_err("st_expect_unsupported_dtype", s, MF_ERR_UNSUPPORTED, "dtype I64 unsupported for tensor 'position_ids'",
               "tiny.safetensors", NULL);
    s = mf_st_tensor_view(mf_st_lookup(f, "position_ids"), &v);
    expect_err("st_view_unsupported_dtype", s, MF_ERR_UNSUPPORTED, "I64", "position_ids", NULL);
    s = mf_st_tensor_view(mf_st_lookup(f, "five.d.weight"), &v);
    expect_err("st_view_5d", s, MF_ERR_UNSUPPORTED, "five.d.weight", "5 dims", NULL);

    s = mf_st_expect(f, "a.f32", 2, (const int64_t[]){3, 5}, &t);
    report(s == MF_OK && t && strcmp(t->name, "a.f32") == 0, "st_expect_ok", "%s", s == MF_OK ? "" : mf_last_error());
    s = mf_st_expect(f, "a.f32", 2, (const int64_t[]){3, 6}, &t);
    expect_err("st_expect_wrong_shape", s, MF_ERR_FORMAT, "'a.f32'", "has shape (3, 5), expected (3, 6)",
               "tiny.safetensors");
    s = mf_st_expect(f, "a.f32", 3, (const int64_t[]){3, 5, 1}, &t);
    expect_err("st_expect_wrong_ndim", s, MF_ERR_FORMAT, "expected (3, 5, 1)", NULL, NULL);
    s = mf_st_expect(f, "a.f32", 0, NULL, &t);
    report(s == MF_OK && t, "st_expect_any_shape", NULL);
    s = mf_st_find(f, "lm_head.weight", &t);
    expect_err("st_find_missing", s, MF_ERR_FORMAT, "missing tensor 'lm_head.weight'", "tiny.safetensors", NULL);
    report(t == NULL && mf_st_lookup(f, "lm_head.weight") == NULL && mf_st_at(f, -1) == NULL && mf_st_at(f, 7) == NULL,
           "st_lookup_missing_null", NULL);

    // Iteration visits each tensor once; lookup finds the same record; data
    // points at the file bytes at `offset`.
    size_t flen = 0;
    unsigned char *bytes = read_all(path, &flen);
    bool iter_ok = true;
    int64_t sum = 0;
    for (int64_t i = 0; i < mf_st_count(f); i++) {
        const mf_st_tensor *a = mf_st_at(f, i);
        if (!a || mf_st_lookup(f, a->name) != a || a->offset + a->nbytes > (int64_t)flen ||
            memcmp(bytes + a->offset, a->data, (size_t)a->nbytes) != 0 || strcmp(a->file, path) != 0 || a->shard != 0 ||
            !a->aligned) // the reference writer aligns every tensor
            iter_ok = false;
        sum += a ? a->nbytes : 0;
    }
    free(bytes);
    report(iter_ok && sum == mf_st_data_bytes(f) && sum == 48 + 60 + 0 + 96 + 4 + 20 + 48, "st_tiny_iterate_offsets",
           "data bytes %lld", (long long)sum);

    // The same bytes parsed from memory.
    bytes = read_all(path, &flen);
    mf_st_file *g = NULL;
    s = mf_st_parse_buffer(bytes, flen, "mem", &g);
    const mf_st_tensor *ta = g ? mf_st_lookup(g, "a.f32") : NULL;
    report(s == MF_OK && mf_st_count(g) == 7 && ta && ta->data == bytes + (ta->offset) && values_ok(ta, 1, why, sizeof why),
           "st_parse_buffer", "%s", s == MF_OK ? why : mf_last_error());
    mf_st_close(g);
    free(bytes);
    mf_st_close(f);
}

static void test_st_bf16(void) {
    mf_st_file *f = NULL;
    mf_status s = mf_st_open(fix_path("bf16.safetensors"), &f);
    if (s != MF_OK) {
        report(false, "st_bf16_open", "%s", mf_last_error());
        return;
    }
    char why[512] = "";
    const mf_st_tensor *t = mf_st_lookup(f, "w.bf16"), *u = mf_st_lookup(f, "w.f32");
    report(t && t->dtype == MF_DTYPE_BF16 && shape_is(t, 2, 4, 7, 0) && values_ok(t, 4, why, sizeof why),
           "st_bf16_values", "%s", why);
    report(u && shape_is(u, 1, 7, 0, 0) && !u->aligned && values_ok(u, 5, why, sizeof why), "st_bf16_f32_values_unaligned",
           "data at file offset %lld", u ? (long long)u->offset : -1ll);
    const char *note = mf_st_metadata(f, "note");
    report(note && strcmp(note, "hand-written") == 0, "st_bf16_metadata", NULL);
    mf_st_close(f);
}

// Tensors of the sharded fixture and their formula seeds.
static const struct {
    const char *name;
    int k;
    mf_st_dtype dt;
    int shard;
} sharded_tensors[] = {
    {"model.embed_tokens.weight", 6, MF_ST_F32, 0},
    {"model.layers.0.w", 7, MF_ST_F16, 0},
    {"model.layers.1.w", 8, MF_ST_BF16, 1},
    {"lm_head.weight", 9, MF_ST_F32, 1},
};

static void check_sharded(const char *name, const char *dir) {
    mf_st_file *f = NULL;
    mf_status s = mf_st_open_dir(dir, &f);
    if (s != MF_OK) {
        report(false, name, "%s", mf_last_error());
        return;
    }
    char why[512] = "";
    bool ok = mf_st_count(f) == 4 && mf_st_shard_count(f) == 2 && mf_st_data_bytes(f) == 256 &&
              strstr(mf_st_shard_path(f, 0), "model-00001-of-00002.safetensors") &&
              strstr(mf_st_shard_path(f, 1), "model-00002-of-00002.safetensors");
    if (!ok) snprintf(why, sizeof why, "%lld tensors, %d shards", (long long)mf_st_count(f), mf_st_shard_count(f));
    for (int i = 0; ok && i < 4; i++) {
        const mf_st_tensor *t = NULL;
        ok = mf_st_find(f, sharded_tensors[i].name, &t) == MF_OK && t->st_dtype == sharded_tensors[i].dt &&
             t->shard == sharded_tensors[i].shard && t->file == mf_st_shard_path(f, t->shard) &&
             values_ok(t, sharded_tensors[i].k, why, sizeof why);
    }
    report(ok, name, "%s", why);
    mf_st_close(f);
}

static void test_st_dirs(void) {
    check_sharded("st_dir_sharded", fix_path("sharded"));
    mf_st_file *f = NULL;
    mf_status s = mf_st_open_dir(fix_path("single"), &f);
    char why[512] = "";
    const mf_st_tensor *t = f ? mf_st_lookup(f, "w") : NULL;
    report(s == MF_OK && mf_st_count(f) == 1 && t && shape_is(t, 2, 2, 3, 0) && values_ok(t, 10, why, sizeof why) &&
               strcmp(mf_st_path(f), fix_path("single")) == 0,
           "st_dir_single", "%s", s == MF_OK ? why : mf_last_error());
    mf_st_close(f);

    // The index parsed on its own.
    size_t n = 0;
    unsigned char *text = read_all(fix_path("sharded/model.safetensors.index.json"), &n);
    mf_st_index *idx = NULL;
    s = mf_st_index_parse((const char *)text, n, "index", &idx);
    bool ok = s == MF_OK && idx->n_entries == 4 && idx->n_shards == 2 &&
              strcmp(idx->shards[0], "model-00001-of-00002.safetensors") == 0;
    for (int64_t i = 0; ok && i < idx->n_entries; i++)
        for (int j = 0; j < 4; j++)
            if (strcmp(idx->tensor[i], sharded_tensors[j].name) == 0) ok = idx->shard[i] == sharded_tensors[j].shard;
    report(ok, "st_index_parse", "%s", s == MF_OK ? "" : mf_last_error());
    mf_st_index_free(idx);
    free(text);
}

static void st_good(const char *name, const char *header, size_t data_len, int64_t want_count) {
    char rel[128];
    snprintf(rel, sizeof rel, "%s.safetensors", name);
    const char *p = write_st(rel, header, NULL, data_len);
    mf_st_file *f = NULL;
    mf_status s = mf_st_open(p, &f);
    report(s == MF_OK && mf_st_count(f) == want_count, name, "%s", s == MF_OK ? "" : mf_last_error());
    mf_st_close(f);
}

static void test_st_edge_good(void) {
    st_good("st_empty_header", "{}", 0, 0);
    st_good("st_header_padded", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}      ", 4, 1);
    st_good("st_metadata_only", "{\"__metadata__\":{\"format\":\"pt\"}}", 0, 0);
    st_good("st_zero_dim", "{\"z\":{\"dtype\":\"F64\",\"shape\":[1000000,0,3],\"data_offsets\":[0,0]}}", 0, 1);
    st_good("st_f4_packed", "{\"q\":{\"dtype\":\"F4\",\"shape\":[2,3],\"data_offsets\":[0,3]}}", 3, 1);
    st_good("st_trailing_unindexed_bytes", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 10, 1);
    st_good("st_shared_empty_offsets",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
            8, 2);

    // 1000 tensors: the lookup table at a real checkpoint's size.
    enum { N = 1000 };
    size_t cap = (size_t)N * 96 + 16, k = 0;
    char *h = malloc(cap);
    float *data = malloc(N * sizeof *data);
    k += (size_t)snprintf(h + k, cap - k, "{");
    for (int i = 0; i < N; i++) {
        data[i] = (float)i * 0.5f;
        k += (size_t)snprintf(h + k, cap - k, "%s\"model.layers.%d.mlp.weight\":{\"dtype\":\"F32\",\"shape\":[1],"
                              "\"data_offsets\":[%d,%d]}", i ? "," : "", N - 1 - i, 4 * i, 4 * i + 4);
    }
    snprintf(h + k, cap - k, "}");
    const char *p = write_st("many.safetensors", h, data, N * sizeof *data);
    mf_st_file *f = NULL;
    mf_status s = mf_st_open(p, &f);
    bool ok = s == MF_OK && mf_st_count(f) == N;
    for (int i = 0; ok && i < N; i++) {
        char nm[64];
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.weight", i);
        const mf_st_tensor *t = mf_st_lookup(f, nm);
        float v = -1;
        if (t) memcpy(&v, t->data, 4);
        ok = t && v == (float)(N - 1 - i) * 0.5f;
    }
    report(ok && !mf_st_lookup(f, "model.layers.1000.mlp.weight"), "st_1000_tensors_lookup", "%s",
           s == MF_OK ? "" : mf_last_error());
    mf_st_close(f);
    free(h);
    free(data);
}

// ---- safetensors: bad files -------------------------------------------------------------

// Writes a file with this header and data_len pattern bytes; opening it (and
// parsing the same bytes from memory) must fail with `want`, the message
// naming the file and containing s1/s2.
static void st_bad(const char *name, const char *header, size_t data_len, mf_status want, const char *s1,
                   const char *s2) {
    char rel[128];
    snprintf(rel, sizeof rel, "%s.safetensors", name);
    const char *p = write_st(rel, header, NULL, data_len);
    mf_st_file *f = (mf_st_file *)&f; // poison: must come back NULL
    mf_status s = mf_st_open(p, &f);
    if (f) {
        report(false, name, "out not NULL after a failure");
        if (s == MF_OK) mf_st_close(f);
        return;
    }
    if (!expect_err(name, s, want, base_name(p), s1, s2)) return;
    size_t n = 0;
    unsigned char *b = read_all(p, &n);
    char mname[128];
    snprintf(mname, sizeof mname, "%s(memory)", name);
    s = mf_st_parse_buffer(b, n, rel, &f);
    if (s == MF_OK) mf_st_close(f);
    report(s == want && !f, mname, "%s: %s", mf_status_str(s), mf_last_error());
    free(b);
}

#define T1(dt, shape, off) "{\"x\":{\"dtype\":" dt ",\"shape\":" shape ",\"data_offsets\":" off "}}"

static void test_st_bad_headers(void) {
    st_bad("st_bad_json", "{\"x\":{\"dtype\":\"F32\",", 4, MF_ERR_FORMAT, "not valid JSON", NULL);
    st_bad("st_bad_not_object", "[1,2,3]", 0, MF_ERR_FORMAT, "does not start with '{'", NULL);
    st_bad("st_bad_trailing_bytes", "{} xyz", 0, MF_ERR_FORMAT, "unexpected bytes after the JSON value", NULL);
    st_bad("st_bad_entry_not_object", "{\"x\":5}", 0, MF_ERR_FORMAT, "tensor 'x'", "not a JSON object");
    st_bad("st_bad_metadata", "{\"__metadata__\":[1]}", 0, MF_ERR_FORMAT, "__metadata__", NULL);
    st_bad("st_bad_no_dtype", "{\"x\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, MF_ERR_FORMAT, "'x'", "\"dtype\"");
    st_bad("st_bad_dtype_number", T1("4", "[1]", "[0,4]"), 4, MF_ERR_FORMAT, "'x'", "\"dtype\"");
    st_bad("st_bad_dtype_unknown", T1("\"Q9\"", "[1]", "[0,4]"), 4, MF_ERR_FORMAT, "'x'", "unknown dtype \"Q9\"");
    st_bad("st_bad_no_shape", "{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, MF_ERR_FORMAT, "'x'", "\"shape\"");
    st_bad("st_bad_shape_not_array", T1("\"F32\"", "4", "[0,4]"), 4, MF_ERR_FORMAT, "'x'", "\"shape\"");
    st_bad("st_bad_negative_dim", T1("\"F32\"", "[2,-1]", "[0,4]"), 4, MF_ERR_FORMAT, "'x'", "negative dim shape[1]");
    st_bad("st_bad_fractional_dim", T1("\"F32\"", "[1.5]", "[0,4]"), 4, MF_ERR_FORMAT, "'x'", "shape[0] is not an integer");
    st_bad("st_bad_string_dim", T1("\"F32\"", "[\"1\"]", "[0,4]"), 4, MF_ERR_FORMAT, "'x'", "shape[0]");
    st_bad("st_bad_huge_dim", T1("\"F32\"", "[1e300]", "[0,4]"), 4, MF_ERR_FORMAT, "'x'", "shape[0]");
    st_bad("st_bad_too_many_dims", T1("\"F32\"", "[1,1,1,1,1,1,1,1,1]", "[0,4]"), 4, MF_ERR_FORMAT, "9 dims", NULL);
    st_bad("st_bad_numel_overflow", T1("\"U8\"", "[4503599627370496,4096]", "[0,0]"), 0, MF_ERR_FORMAT, "'x'",
           "overflows int64");
    // The non-zero dims must not overflow even when a zero dim makes numel 0.
    st_bad("st_bad_zero_dim_huge_others", T1("\"F64\"", "[9007199254740992,9007199254740992,0]", "[0,0]"), 0,
           MF_ERR_FORMAT, "'x'", "overflows int64");
    st_bad("st_bad_bytes_overflow", T1("\"F64\"", "[1125899906842624,2048]", "[0,0]"), 0, MF_ERR_FORMAT, "'x'",
           "overflows int64 bytes");
    st_bad("st_bad_f4_half_byte", T1("\"F4\"", "[3]", "[0,2]"), 2, MF_ERR_FORMAT, "'x'", "whole number of bytes");
    st_bad("st_bad_no_offsets", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, MF_ERR_FORMAT, "'x'", "data_offsets");
    st_bad("st_bad_offsets_one", T1("\"F32\"", "[1]", "[4]"), 4, MF_ERR_FORMAT, "'x'", "not 2 integers");
    st_bad("st_bad_offsets_three", T1("\"F32\"", "[1]", "[0,4,8]"), 8, MF_ERR_FORMAT, "'x'", "not 2 integers");
    st_bad("st_bad_offsets_string", T1("\"F32\"", "[1]", "[\"0\",4]"), 4, MF_ERR_FORMAT, "'x'", "not 2 integers");
    st_bad("st_bad_offsets_fraction", T1("\"F32\"", "[1]", "[0.5,4.5]"), 8, MF_ERR_FORMAT, "'x'", "not 2 integers");
    st_bad("st_bad_offsets_negative", T1("\"F32\"", "[1]", "[-4,0]"), 8, MF_ERR_FORMAT, "'x'", "not 2 integers");
    st_bad("st_bad_offsets_reversed", T1("\"F32\"", "[1]", "[8,4]"), 8, MF_ERR_FORMAT, "'x'", "begin past end");
    st_bad("st_bad_offset_past_end", T1("\"F32\"", "[4]", "[0,16]"), 12, MF_ERR_FORMAT, "tensor 'x'",
           "header offset past the end of the file");
    st_bad("st_bad_offset_huge", T1("\"F32\"", "[1]", "[9007199254740988,9007199254740992]"), 8, MF_ERR_FORMAT,
           "'x'", "header offset past the end of the file");
    st_bad("st_bad_byte_count", T1("\"F32\"", "[2]", "[0,12]"), 12, MF_ERR_FORMAT, "'x'",
           "hold 12 bytes, but F32 (2) needs 8");
    st_bad("st_bad_duplicate_name",
           "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
           8, MF_ERR_FORMAT, "duplicate tensor name 'x'", NULL);
    st_bad("st_bad_overlap",
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
           12, MF_ERR_FORMAT, "'a' and 'b' overlap", NULL);

    // Unsupported dtypes open; asking for them fails with the dtype named.
    const char *p = write_st("f64.safetensors", T1("\"F64\"", "[2]", "[0,16]"), NULL, 16);
    mf_st_file *f = NULL;
    mf_status s = mf_st_open(p, &f);
    report(s == MF_OK, "st_f64_opens", "%s", s == MF_OK ? "" : mf_last_error());
    const mf_st_tensor *t = NULL;
    s = mf_st_expect(f, "x", 1, (const int64_t[]){2}, &t);
    expect_err("st_f64_refused", s, MF_ERR_UNSUPPORTED, "dtype F64 unsupported for tensor 'x'", "f64.safetensors",
               NULL);
    mf_st_close(f);
}

static void test_st_bad_files(void) {
    size_t n = 0;
    unsigned char *good = read_all(fix_path("tiny.safetensors"), &n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | good[i];
    mf_st_file *f = NULL;
    mf_status s;

    s = mf_st_open(tmp_write("empty.safetensors", NULL, 0), &f);
    expect_err("st_file_empty", s, MF_ERR_FORMAT, "empty.safetensors", "truncated file", NULL);
    s = mf_st_open(tmp_write("five_bytes.safetensors", good, 5), &f);
    expect_err("st_file_5_bytes", s, MF_ERR_FORMAT, "five_bytes.safetensors", "truncated file", NULL);
    s = mf_st_open(tmp_write("cut_header.safetensors", good, 100), &f);
    expect_err("st_file_truncated_in_header", s, MF_ERR_FORMAT, "cut_header.safetensors", "runs past the end of the file",
               NULL);
    // The last tensor in data order is "ids" (the writer sorts by dtype size, then name).
    s = mf_st_open(tmp_write("cut_data.safetensors", good, n - 1), &f);
    expect_err("st_file_truncated_in_data", s, MF_ERR_FORMAT, "cut_data.safetensors",
               "header offset past the end of the file", "tensor '");
    s = mf_st_open(tmp_write("no_data.safetensors", good, 8 + (size_t)hlen), &f);
    expect_err("st_file_header_only", s, MF_ERR_FORMAT, "no_data.safetensors", "header offset past the end of the file",
               NULL);

    unsigned char *bad = malloc(n);
    memcpy(bad, good, n);
    bad[5] = 1; // header length 2^40
    s = mf_st_open(tmp_write("len_absurd.safetensors", bad, n), &f);
    expect_err("st_file_header_len_absurd", s, MF_ERR_FORMAT, "len_absurd.safetensors", "absurd", NULL);
    memcpy(bad, good, n);
    memset(bad, 0xff, 8);
    s = mf_st_open(tmp_write("len_max.safetensors", bad, n), &f);
    expect_err("st_file_header_len_2^64-1", s, MF_ERR_FORMAT, "len_max.safetensors", "absurd", NULL);
    memcpy(bad, good, n);
    bad[0] = (unsigned char)(n - 8 + 1), bad[1] = 0; // one past the file (n < 256 + 8 here)
    if (n - 8 + 1 < 256) {
        s = mf_st_open(tmp_write("len_past.safetensors", bad, n), &f);
        expect_err("st_file_header_len_past_end", s, MF_ERR_FORMAT, "len_past.safetensors",
                   "runs past the end of the file", NULL);
    }
    memcpy(bad, good, n);
    bad[0] = 0, bad[1] = 0;
    s = mf_st_open(tmp_write("len_zero.safetensors", bad, n), &f);
    expect_err("st_file_header_len_zero", s, MF_ERR_FORMAT, "len_zero.safetensors", "does not start with '{'", NULL);
    memcpy(bad, good, n);
    bad[0] = (unsigned char)(bad[0] - 8); // the header loses its last 8 bytes: JSON cut short
    s = mf_st_open(tmp_write("len_short.safetensors", bad, n), &f);
    expect_err("st_file_header_len_short", s, MF_ERR_FORMAT, "len_short.safetensors", "not valid JSON", NULL);
    memcpy(bad, good, n);
    bad[0] = (unsigned char)(bad[0] + 8); // the header swallows 8 data bytes
    s = mf_st_open(tmp_write("len_long.safetensors", bad, n), &f);
    expect_err("st_file_header_len_long", s, MF_ERR_FORMAT, "len_long.safetensors", NULL, NULL);
    memcpy(bad, good, n);
    bad[8 + 20] = '\0'; // a NUL inside the JSON text
    s = mf_st_open(tmp_write("nul.safetensors", bad, n), &f);
    expect_err("st_file_nul_in_header", s, MF_ERR_FORMAT, "nul.safetensors", "raw control byte 0x00 at byte 20", NULL);
    free(bad);
    free(good);

    s = mf_st_open(tmp_path("does_not_exist.safetensors"), &f);
    expect_err("st_file_missing", s, MF_ERR_IO, "does_not_exist.safetensors", "cannot open", NULL);
    s = mf_st_open(tmpdir, &f);
    expect_err("st_file_is_directory", s, MF_ERR_IO, "not a regular file", NULL, NULL);
    s = mf_st_open(NULL, &f);
    expect_err("st_open_null_path", s, MF_ERR_INVALID_ARG, "path is NULL", NULL, NULL);
    s = mf_st_open(fix_path("tiny.safetensors"), NULL);
    expect_err("st_open_null_out", s, MF_ERR_INVALID_ARG, "out is NULL", NULL, NULL);
    s = mf_st_parse_buffer(NULL, 10, "x", &f);
    expect_err("st_parse_null_buf", s, MF_ERR_INVALID_ARG, "buf is NULL", NULL, NULL);
}

// Copies a fixture file into the temp tree.
static void copy_fixture(const char *from_rel, const char *to_rel) {
    size_t n = 0;
    unsigned char *b = read_all(fix_path(from_rel), &n);
    tmp_write(to_rel, b, n);
    free(b);
}

static void dir_bad(const char *name, const char *index_json, mf_status want, const char *s1, const char *s2) {
    char rel[256];
    tmp_mkdir(name);
    for (int i = 1; i <= 2; i++) {
        char from[128];
        snprintf(from, sizeof from, "sharded/model-0000%d-of-00002.safetensors", i);
        snprintf(rel, sizeof rel, "%s/%s", name, from + strlen("sharded/"));
        copy_fixture(from, rel);
    }
    snprintf(rel, sizeof rel, "%s/model.safetensors.index.json", name);
    tmp_write(rel, index_json, strlen(index_json));
    mf_st_file *f = (mf_st_file *)&f;
    mf_status s = mf_st_open_dir(tmp_path(name), &f);
    if (f) {
        report(false, name, "out not NULL after a failure");
        if (s == MF_OK) mf_st_close(f);
        return;
    }
    expect_err(name, s, want, s1, s2, NULL);
}

#define S1 "\"model-00001-of-00002.safetensors\""
#define S2 "\"model-00002-of-00002.safetensors\""

static void test_st_bad_dirs(void) {
    mf_st_file *f = NULL;
    mf_status s = mf_st_open_dir(tmp_path("nope"), &f);
    expect_err("dir_missing", s, MF_ERR_IO, "nope", "cannot open", NULL);
    s = mf_st_open_dir(fix_path("tiny.safetensors"), &f);
    expect_err("dir_is_file", s, MF_ERR_IO, "not a directory", NULL, NULL);
    s = mf_st_open_dir(tmp_mkdir("emptydir"), &f);
    expect_err("dir_empty", s, MF_ERR_IO, "emptydir", "neither model.safetensors nor model.safetensors.index.json",
               NULL);

    // The index names a shard that is not there.
    tmp_mkdir("missing_shard");
    copy_fixture("sharded/model-00001-of-00002.safetensors", "missing_shard/model-00001-of-00002.safetensors");
    copy_fixture("sharded/model.safetensors.index.json", "missing_shard/model.safetensors.index.json");
    s = mf_st_open_dir(tmp_path("missing_shard"), &f);
    expect_err("dir_index_missing_shard", s, MF_ERR_IO, "model-00002-of-00002.safetensors",
               "a shard named by", "model.safetensors.index.json");

    // A shard that is truncated.
    tmp_mkdir("cut_shard");
    copy_fixture("sharded/model-00001-of-00002.safetensors", "cut_shard/model-00001-of-00002.safetensors");
    copy_fixture("sharded/model.safetensors.index.json", "cut_shard/model.safetensors.index.json");
    size_t n = 0;
    unsigned char *b = read_all(fix_path("sharded/model-00002-of-00002.safetensors"), &n);
    tmp_write("cut_shard/model-00002-of-00002.safetensors", b, n - 4);
    free(b);
    s = mf_st_open_dir(tmp_path("cut_shard"), &f);
    expect_err("dir_shard_truncated", s, MF_ERR_FORMAT, "model-00002-of-00002.safetensors",
               "header offset past the end of the file", "lm_head.weight");

    dir_bad("dir_index_bad_json", "{\"weight_map\": {", MF_ERR_FORMAT, "model.safetensors.index.json", "not valid JSON");
    dir_bad("dir_index_no_weight_map", "{\"metadata\": {}}", MF_ERR_FORMAT, "missing \"weight_map\"", NULL);
    dir_bad("dir_index_empty_weight_map", "{\"weight_map\": {}}", MF_ERR_FORMAT, "\"weight_map\" is empty", NULL);
    dir_bad("dir_index_value_not_string", "{\"weight_map\": {\"lm_head.weight\": 2}}", MF_ERR_FORMAT,
            "'lm_head.weight'", "not a file name string");
    dir_bad("dir_index_path_traversal", "{\"weight_map\": {\"lm_head.weight\": \"../model-00002-of-00002.safetensors\"}}",
            MF_ERR_FORMAT, "not a plain file name", NULL);
    dir_bad("dir_index_duplicate", "{\"weight_map\": {\"lm_head.weight\": " S2 ", \"lm_head.weight\": " S2 "}}",
            MF_ERR_FORMAT, "'lm_head.weight' listed twice", NULL);
    dir_bad("dir_index_tensor_absent", "{\"weight_map\": {\"lm_head.weight\": " S2 ", \"model.norm.weight\": " S2 "}}",
            MF_ERR_FORMAT, "'model.norm.weight'", "has no such tensor");
    dir_bad("dir_index_wrong_shard", "{\"weight_map\": {\"lm_head.weight\": " S1 ", \"model.layers.1.w\": " S2 "}}",
            MF_ERR_FORMAT, "'lm_head.weight'", "but it is in");

    // The same tensor in two shards.
    tmp_mkdir("dup_across");
    copy_fixture("sharded/model-00002-of-00002.safetensors", "dup_across/a.safetensors");
    copy_fixture("sharded/model-00002-of-00002.safetensors", "dup_across/b.safetensors");
    const char *idx = "{\"weight_map\": {\"lm_head.weight\": \"a.safetensors\", \"model.layers.1.w\": \"b.safetensors\"}}";
    tmp_write("dup_across/model.safetensors.index.json", idx, strlen(idx));
    s = mf_st_open_dir(tmp_path("dup_across"), &f);
    expect_err("dir_tensor_in_two_shards", s, MF_ERR_FORMAT, "is in both", "a.safetensors", "b.safetensors");

    // model.safetensors wins over an index, as in transformers (this index is broken).
    tmp_mkdir("both");
    copy_fixture("single/model.safetensors", "both/model.safetensors");
    tmp_write("both/model.safetensors.index.json", "{", 1);
    s = mf_st_open_dir(tmp_path("both"), &f);
    report(s == MF_OK && mf_st_count(f) == 1 && mf_st_lookup(f, "w"), "dir_single_file_before_index", "%s",
           s == MF_OK ? "" : mf_last_error());
    mf_st_close(f);
    f = NULL;

    // A copy of the good sharded directory still opens (the temp tree works).
    tmp_mkdir("good_copy");
    copy_fixture("sharded/model-00001-of-00002.safetensors", "good_copy/model-00001-of-00002.safetensors");
    copy_fixture("sharded/model-00002-of-00002.safetensors", "good_copy/model-00002-of-00002.safetensors");
    copy_fixture("sharded/model.safetensors.index.json", "good_copy/model.safetensors.index.json");
    check_sharded("dir_good_copy", tmp_path("good_copy"));
}

// Every allocation of a call fails in turn: MF_ERR_OOM each time, nothing
// leaks (valgrind/ASan), and then the call succeeds.
typedef mf_status (*open_fn)(void);
static mf_st_file *oom_file;
static mf_model_config oom_cfg;
static mf_status oom_open_dir(void) { return mf_st_open_dir(fix_path("sharded"), &oom_file); }
static mf_status oom_open_file(void) { return mf_st_open(fix_path("tiny.safetensors"), &oom_file); }
static mf_status oom_config(void) { return mf_model_config_load(fix_path("configs/llama.json"), &oom_cfg); }

static void oom_each(const char *name, open_fn fn, int min_failures) {
    int n_oom = 0;
    for (int k = 1; k < 200; k++) {
        oom_file = NULL;
        mf_fault_alloc_fail_after(k);
        mf_status s = fn();
        mf_fault_alloc_fail_after(0);
        if (s == MF_OK) {
            mf_st_close(oom_file);
            report(n_oom >= min_failures, name, "%d injected failures, then success", n_oom);
            return;
        }
        if (s != MF_ERR_OOM || oom_file) {
            report(false, name, "allocation %d: %s: %s", k, mf_status_str(s), mf_last_error());
            return;
        }
        n_oom++;
    }
    report(false, name, "still failing after 200 injected failures");
}

static void test_oom(void) {
    oom_each("st_oom_open_dir_each_allocation", oom_open_dir, 10);
    oom_each("st_oom_open_each_allocation", oom_open_file, 5);
    oom_each("config_oom_each_allocation", oom_config, 2);
    check_sharded("st_after_oom", fix_path("sharded"));
}

// ---- config.json --------------------------------------------------------------------------

static void test_config_fixtures(void) {
    mf_model_config c;
    mf_status s = mf_model_config_load(fix_path("configs/gpt2.json"), &c);
    // 64000 wte + 8192 wpe + 2 * 49984 per block + 128 ln_f; tied head.
    report(s == MF_OK && c.arch == MF_ARCH_GPT2 && strcmp(c.arch_name, "GPT2LMHeadModel") == 0 &&
               strcmp(c.model_type, "gpt2") == 0 && c.vocab_size == 1000 && c.hidden == 64 && c.n_layers == 2 &&
               c.n_heads == 4 && c.n_kv_heads == 4 && c.head_dim == 16 && c.ffn == 256 && c.max_pos == 128 &&
               c.norm_eps == 1e-5 && c.norm == MF_NORM_LAYERNORM && c.learned_pos && !c.gated_mlp &&
               c.act == MF_HIDDEN_ACT_GELU_TANH && c.qkv_bias && c.o_bias && c.mlp_bias && c.tie_word_embeddings &&
               c.n_experts == 0 && c.bos_id == 50256 && c.n_eos == 1 && c.eos_ids[0] == 50256 && c.has_torch_dtype &&
               c.torch_dtype == MF_DTYPE_F32 && c.n_params == 172288,
           "config_gpt2", "%s", s == MF_OK ? "" : mf_last_error());

    s = mf_model_config_load(fix_path("configs/llama.json"), &c);
    char d[512] = "";
    if (s == MF_OK) mf_model_config_describe(&c, d, sizeof d);
    report(s == MF_OK && c.arch == MF_ARCH_LLAMA && c.vocab_size == 128256 && c.hidden == 96 && c.n_layers == 3 &&
               c.n_heads == 6 && c.n_kv_heads == 2 && c.head_dim == 16 && c.ffn == 256 && c.max_pos == 131072 &&
               c.norm_eps == 1e-5 && c.norm == MF_NORM_RMSNORM && !c.learned_pos && c.gated_mlp &&
               c.act == MF_HIDDEN_ACT_SILU && !c.qkv_bias && !c.o_bias && !c.mlp_bias && !c.tie_word_embeddings &&
               c.rope_theta == 500000.0 && c.rope_scaling.type == MF_ROPE_SCALING_LLAMA3 &&
               c.rope_scaling.factor == 8.0 && c.rope_scaling.low_freq_factor == 1.0 &&
               c.rope_scaling.high_freq_factor == 4.0 && c.rope_scaling.original_max_pos == 8192 &&
               c.bos_id == 128000 && c.n_eos == 3 && c.eos_ids[0] == 128001 && c.eos_ids[1] == 128008 &&
               c.eos_ids[2] == 128009 && c.torch_dtype == MF_DTYPE_BF16 && c.sliding_window == 0 &&
               c.n_params == 24920736 && strstr(d, "llama3 x8"),
           "config_llama_gqa_llama3", "%s", s == MF_OK ? d : mf_last_error());

    s = mf_model_config_load(fix_path("configs/mistral.json"), &c);
    report(s == MF_OK && c.arch == MF_ARCH_MISTRAL && c.n_heads == 8 && c.n_kv_heads == 2 && c.head_dim == 8 &&
               c.ffn == 160 && c.sliding_window == 4096 && c.rope_theta == 10000.0 &&
               c.rope_scaling.type == MF_ROPE_SCALING_NONE && c.bos_id == 1 && c.n_eos == 1 && c.eos_ids[0] == 2 &&
               c.torch_dtype == MF_DTYPE_F16,
           "config_mistral", "%s", s == MF_OK ? "" : mf_last_error());

    s = mf_model_config_load(fix_path("configs/mixtral.json"), &c);
    report(s == MF_OK && c.arch == MF_ARCH_MIXTRAL && c.n_experts == 8 && c.n_experts_per_tok == 2 &&
               c.norm_topk_prob && c.ffn == 112 && c.rope_theta == 1e6 && c.sliding_window == 0 &&
               c.shared_expert_ffn == 0 && c.n_params == 4465984,
           "config_mixtral", "%s", s == MF_OK ? "" : mf_last_error());

    s = mf_model_config_load(fix_path("configs/qwen2_moe.json"), &c);
    report(s == MF_OK && c.arch == MF_ARCH_QWEN2_MOE && c.n_experts == 6 && c.n_experts_per_tok == 2 &&
               !c.norm_topk_prob && c.ffn == 32 && c.shared_expert_ffn == 96 && c.qkv_bias && !c.o_bias &&
               c.sliding_window == 0 && c.bos_id == 151643 && c.n_eos == 1 && c.n_params == 276032,
           "config_qwen2_moe", "%s", s == MF_OK ? "" : mf_last_error());

    // A directory: DIR/config.json.
    tmp_mkdir("cfgdir");
    copy_fixture("configs/gpt2.json", "cfgdir/config.json");
    s = mf_model_config_load(tmp_path("cfgdir"), &c);
    report(s == MF_OK && c.arch == MF_ARCH_GPT2, "config_load_dir", "%s", s == MF_OK ? "" : mf_last_error());
    s = mf_model_config_load(tmp_path("emptydir"), &c);
    expect_err("config_load_dir_without_config", s, MF_ERR_IO, "config.json", "cannot open", NULL);
    s = mf_model_config_load(tmp_path("nothing.json"), &c);
    expect_err("config_load_missing_file", s, MF_ERR_IO, "nothing.json", NULL, NULL);
}

// A Llama config with `over` written first (cJSON keeps the first of repeated
// keys, so it overrides the base) and the base key `omit` left out.
static const char *llama_base[][2] = {
    {"architectures", "[\"LlamaForCausalLM\"]"}, {"vocab_size", "1000"}, {"hidden_size", "64"},
    {"num_hidden_layers", "2"}, {"num_attention_heads", "4"}, {"intermediate_size", "128"},
};
static const char *gpt2_base[][2] = {
    {"architectures", "[\"GPT2LMHeadModel\"]"}, {"vocab_size", "1000"}, {"n_embd", "64"},
    {"n_layer", "2"}, {"n_head", "4"},
};

static char *make_cfg(const char *(*base)[2], int nbase, const char *over, const char *omit) {
    static char buf[4096];
    size_t k = (size_t)snprintf(buf, sizeof buf, "{%s", over ? over : "");
    bool first = true; // `over` is empty or ends with a comma
    for (int i = 0; i < nbase; i++) {
        if (omit && strcmp(omit, base[i][0]) == 0) continue;
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s\"%s\":%s", first ? "" : ",", base[i][0], base[i][1]);
        first = false;
    }
    snprintf(buf + k, sizeof buf - k, "}");
    return buf;
}
#define LLAMA(over, omit) make_cfg(llama_base, 6, over, omit)
#define GPT2(over, omit) make_cfg(gpt2_base, 5, over, omit)

static mf_status parse(const char *text, mf_model_config *c) {
    return mf_model_config_parse(text, strlen(text), "test/config.json", c);
}

static void cfg_bad(const char *name, const char *text, mf_status want, const char *s1, const char *s2) {
    mf_model_config c;
    memset(&c, 0x5a, sizeof c);
    mf_model_config before = c;
    mf_status s = parse(text, &c);
    if (memcmp(&c, &before, sizeof c) != 0) {
        report(false, name, "out written on failure");
        return;
    }
    expect_err(name, s, want, "test/config.json", s1, s2);
}

static void test_config_inline(void) {
    mf_model_config c;
    // transformers 5 moves rope_theta and the scaling into rope_parameters.
    mf_status s5 = parse(LLAMA("\"rope_parameters\":{\"rope_type\":\"llama3\",\"rope_theta\":500000,\"factor\":8,"
                               "\"low_freq_factor\":1,\"high_freq_factor\":4,"
                               "\"original_max_position_embeddings\":8192},",
                               NULL),
                         &c);
    report(s5 == MF_OK && c.rope_theta == 500000.0 && c.rope_scaling.type == MF_ROPE_SCALING_LLAMA3 &&
               c.rope_scaling.factor == 8.0 && c.rope_scaling.original_max_pos == 8192,
           "config_rope_parameters_llama3", "%s", s5 == MF_OK ? "" : mf_last_error());
    s5 = parse(LLAMA("\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":20000},", NULL), &c);
    report(s5 == MF_OK && c.rope_theta == 20000.0 && c.rope_scaling.type == MF_ROPE_SCALING_NONE,
           "config_rope_parameters_default", "%s", s5 == MF_OK ? "" : mf_last_error());
    cfg_bad("config_rope_parameters_yarn", LLAMA("\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":4},", NULL),
            MF_ERR_UNSUPPORTED, "rope_parameters.rope_type 'yarn' unsupported", NULL);
    mf_status s = parse(LLAMA("", NULL), &c);
    report(s == MF_OK && c.n_kv_heads == 4 && c.head_dim == 16 && c.rope_theta == 10000.0 && c.norm_eps == 1e-6 &&
               c.max_pos == 2048 && c.bos_id == 1 && c.n_eos == 1 && c.eos_ids[0] == 2 && !c.tie_word_embeddings &&
               !c.has_torch_dtype,
           "config_llama_defaults", "%s", s == MF_OK ? "" : mf_last_error());
    s = parse("{\"model_type\":\"llama\",\"vocab_size\":10,\"hidden_size\":8,\"num_hidden_layers\":1,"
              "\"num_attention_heads\":2,\"intermediate_size\":16}",
              &c);
    report(s == MF_OK && c.arch == MF_ARCH_LLAMA && strcmp(c.arch_name, "LlamaForCausalLM") == 0,
           "config_model_type_only", "%s", s == MF_OK ? "" : mf_last_error());
    s = parse("{\"architectures\":[],\"model_type\":\"gpt2\",\"vocab_size\":10,\"hidden_size\":8,\"num_hidden_layers\":1,"
              "\"num_attention_heads\":2,\"n_inner\":24,\"max_position_embeddings\":64,\"dtype\":\"float16\"}",
              &c);
    report(s == MF_OK && c.arch == MF_ARCH_GPT2 && c.hidden == 8 && c.ffn == 24 && c.max_pos == 64 &&
               c.torch_dtype == MF_DTYPE_F16,
           "config_gpt2_alias_names", "%s", s == MF_OK ? "" : mf_last_error());
    s = parse(GPT2("", NULL), &c);
    report(s == MF_OK && c.ffn == 256 && c.max_pos == 1024 && c.bos_id == 50256 && c.tie_word_embeddings,
           "config_gpt2_defaults", "%s", s == MF_OK ? "" : mf_last_error());
    s = parse(LLAMA("\"head_dim\":32,\"num_key_value_heads\":1,", NULL), &c);
    report(s == MF_OK && c.head_dim == 32 && c.n_kv_heads == 1, "config_explicit_head_dim", "%s",
           s == MF_OK ? "" : mf_last_error());
    s = parse(LLAMA("\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.0},", NULL), &c);
    report(s == MF_OK && c.rope_scaling.type == MF_ROPE_SCALING_LINEAR && c.rope_scaling.factor == 2.0,
           "config_rope_linear", "%s", s == MF_OK ? "" : mf_last_error());
    s = parse(LLAMA("\"rope_scaling\":{\"rope_type\":\"default\"},\"eos_token_id\":null,\"bos_token_id\":null,", NULL),
              &c);
    report(s == MF_OK && c.rope_scaling.type == MF_ROPE_SCALING_NONE && c.bos_id == -1 && c.n_eos == 0,
           "config_rope_default_null_ids", "%s", s == MF_OK ? "" : mf_last_error());
    s = parse(LLAMA("\"hidden_act\":\"gelu\",\"attention_bias\":true,\"mlp_bias\":true,\"tie_word_embeddings\":true,", NULL),
              &c);
    report(s == MF_OK && c.act == MF_HIDDEN_ACT_GELU && c.qkv_bias && c.o_bias && c.mlp_bias && c.tie_word_embeddings,
           "config_llama_flags", "%s", s == MF_OK ? "" : mf_last_error());
    const char *t = "{\"model_type\":\"gpt2\",\"vocab_size\":10,\"n_embd\":8,\"n_layer\":1,\"n_head\":2} trailing";
    s = mf_model_config_parse(t, strlen(t) - 9, "slice", &c); // a slice: not NUL-terminated there
    report(s == MF_OK && c.vocab_size == 10, "config_parse_slice", "%s", s == MF_OK ? "" : mf_last_error());

    // Qwen2: the Llama block, q/k/v biases (none on o), Qwen2Config's defaults; a
    // sliding window on every layer or none (max_window_layers, layer_types).
#define QWEN2(over) LLAMA("\"architectures\":[\"Qwen2ForCausalLM\"]," over, NULL)
    s = parse(QWEN2(""), &c);
    report(s == MF_OK && c.arch == MF_ARCH_QWEN2 && strcmp(c.arch_name, "Qwen2ForCausalLM") == 0 && c.qkv_bias &&
               !c.o_bias && !c.mlp_bias && c.max_pos == 32768 && c.rope_theta == 1e4 && c.norm_eps == 1e-6 &&
               c.bos_id == -1 && c.n_eos == 0 && c.sliding_window == 0 && !c.tie_word_embeddings,
           "config_qwen2_defaults", "%s", s == MF_OK ? "" : mf_last_error());
    s = parse(QWEN2("\"use_sliding_window\":true,\"sliding_window\":16,\"max_window_layers\":0,"), &c);
    report(s == MF_OK && c.sliding_window == 16, "config_qwen2_window_every_layer", "%s",
           s == MF_OK ? "" : mf_last_error());
    s = parse(QWEN2("\"use_sliding_window\":true,\"sliding_window\":16,"), &c); // max_window_layers 28 >= 2 layers
    report(s == MF_OK && c.sliding_window == 0, "config_qwen2_window_no_layer", "%s", s == MF_OK ? "" : mf_last_error());
    s = parse(QWEN2("\"use_sliding_window\":false,\"sliding_window\":16,\"max_window_layers\":0,"), &c);
    report(s == MF_OK && c.sliding_window == 0, "config_qwen2_window_off", "%s", s == MF_OK ? "" : mf_last_error());
    s = parse(QWEN2("\"use_sliding_window\":true,\"sliding_window\":8,"
                    "\"layer_types\":[\"sliding_attention\",\"sliding_attention\"],"),
              &c);
    report(s == MF_OK && c.sliding_window == 8, "config_qwen2_layer_types_sliding", "%s",
           s == MF_OK ? "" : mf_last_error());
    cfg_bad("config_qwen2_window_some_layers",
            QWEN2("\"use_sliding_window\":true,\"sliding_window\":16,\"max_window_layers\":1,"), MF_ERR_UNSUPPORTED,
            "sliding window on 1 of 2 layers", "max_window_layers 1");
    cfg_bad("config_qwen2_layer_types_mixed",
            QWEN2("\"use_sliding_window\":true,\"layer_types\":[\"full_attention\",\"sliding_attention\"],"),
            MF_ERR_UNSUPPORTED, "sliding window on 1 of 2 layers", NULL);
    cfg_bad("config_qwen2_layer_types_length", QWEN2("\"layer_types\":[\"full_attention\"],"), MF_ERR_FORMAT,
            "layer_types", "num_hidden_layers 2");
#undef QWEN2
    // Phi-3 / Gemma-style details the decoder lacks are refused by field name.
    cfg_bad("config_partial_rotary", LLAMA("\"partial_rotary_factor\":0.5,", NULL), MF_ERR_UNSUPPORTED,
            "partial_rotary_factor 0.5 is not supported", NULL);
    s = parse(LLAMA("\"partial_rotary_factor\":1.0,", NULL), &c);
    report(s == MF_OK, "config_partial_rotary_one", "%s", s == MF_OK ? "" : mf_last_error());
    cfg_bad("config_gemma_arch", "{\"architectures\":[\"GemmaForCausalLM\"],\"model_type\":\"gemma\"}",
            MF_ERR_UNSUPPORTED, "architecture 'GemmaForCausalLM' unsupported", "Qwen2ForCausalLM");
    cfg_bad("config_phi3_model_type", "{\"model_type\":\"phi3\"}", MF_ERR_UNSUPPORTED,
            "model_type 'phi3' unsupported", "qwen2");

    cfg_bad("config_bad_arch", "{\"architectures\":[\"BertForMaskedLM\"],\"model_type\":\"bert\"}", MF_ERR_UNSUPPORTED,
            "architecture 'BertForMaskedLM' unsupported", "LlamaForCausalLM");
    cfg_bad("config_bad_model_type", "{\"model_type\":\"t5\"}", MF_ERR_UNSUPPORTED, "model_type 't5' unsupported",
            "gpt2, llama");
    cfg_bad("config_no_arch", "{\"vocab_size\":3}", MF_ERR_FORMAT, "missing required field 'architectures'",
            "'model_type'");
    cfg_bad("config_arch_not_list", "{\"architectures\":\"LlamaForCausalLM\"}", MF_ERR_FORMAT, "'architectures'", NULL);
    cfg_bad("config_arch_not_string", "{\"architectures\":[7]}", MF_ERR_FORMAT, "'architectures'[0]", NULL);
    cfg_bad("config_missing_vocab", LLAMA("", "vocab_size"), MF_ERR_FORMAT, "missing required field 'vocab_size'", NULL);
    cfg_bad("config_missing_ffn", LLAMA("", "intermediate_size"), MF_ERR_FORMAT,
            "missing required field 'intermediate_size'", NULL);
    cfg_bad("config_gpt2_missing_n_embd", GPT2("", "n_embd"), MF_ERR_FORMAT, "missing required field 'n_embd'",
            "(or 'hidden_size')");
    cfg_bad("config_heads_not_dividing_hidden", GPT2("\"n_head\":5,", NULL), MF_ERR_FORMAT,
            "hidden size 64 not divisible by n_heads 5", NULL);
    cfg_bad("config_kv_not_dividing_heads",
            LLAMA("\"hidden_size\":768,\"num_attention_heads\":12,\"num_key_value_heads\":5,", NULL), MF_ERR_FORMAT,
            "n_heads 12 not divisible by n_kv_heads 5", NULL);
    cfg_bad("config_kv_exceeds_heads", LLAMA("\"num_key_value_heads\":8,", NULL), MF_ERR_FORMAT,
            "n_kv_heads 8 exceeds n_heads 4", NULL);
    cfg_bad("config_zero_vocab", LLAMA("\"vocab_size\":0,", NULL), MF_ERR_FORMAT, "vocab_size = 0 is out of range",
            NULL);
    cfg_bad("config_negative_layers", LLAMA("\"num_hidden_layers\":-1,", NULL), MF_ERR_FORMAT,
            "num_hidden_layers = -1 is out of range", NULL);
    cfg_bad("config_zero_kv", LLAMA("\"num_key_value_heads\":0,", NULL), MF_ERR_FORMAT, "num_key_value_heads = 0", NULL);
    cfg_bad("config_fractional_size", LLAMA("\"hidden_size\":64.5,", NULL), MF_ERR_FORMAT,
            "field 'hidden_size' is not an integer", NULL);
    cfg_bad("config_string_size", LLAMA("\"hidden_size\":\"64\",", NULL), MF_ERR_FORMAT,
            "field 'hidden_size' is not an integer", NULL);
    cfg_bad("config_bool_size", LLAMA("\"hidden_size\":true,", NULL), MF_ERR_FORMAT, "'hidden_size'", NULL);
    cfg_bad("config_size_over_int32", LLAMA("\"vocab_size\":3000000000,", NULL), MF_ERR_FORMAT,
            "vocab_size = 3000000000 is out of range [1, 2147483647]", NULL);
    cfg_bad("config_size_1e300", LLAMA("\"vocab_size\":1e300,", NULL), MF_ERR_FORMAT, "'vocab_size' is not an integer",
            NULL);
    cfg_bad("config_gpt2_default_ffn_overflow", GPT2("\"n_embd\":1000000000,\"n_head\":1,", NULL), MF_ERR_FORMAT,
            "n_inner = 4000000000 is out of range", NULL);
    cfg_bad("config_qkv_width_overflows_32bit",
            LLAMA("\"num_attention_heads\":65536,\"num_key_value_heads\":65536,\"head_dim\":16384,", NULL),
            MF_ERR_FORMAT, "overflows 32 bits", NULL);
    cfg_bad("config_param_count_overflow",
            LLAMA("\"vocab_size\":2000000000,\"hidden_size\":2000000000,\"num_hidden_layers\":2000000000,"
                  "\"num_attention_heads\":1,\"head_dim\":2,",
                  NULL),
            MF_ERR_FORMAT, "parameter count", "overflows int64");
    cfg_bad("config_odd_head_dim_rope", LLAMA("\"hidden_size\":63,\"num_attention_heads\":7,", NULL), MF_ERR_FORMAT,
            "head_dim 9 must be even", NULL);
    cfg_bad("config_eps_zero", LLAMA("\"rms_norm_eps\":0,", NULL), MF_ERR_FORMAT, "rms_norm_eps = 0 must be > 0", NULL);
    cfg_bad("config_theta_string", LLAMA("\"rope_theta\":\"abc\",", NULL), MF_ERR_FORMAT,
            "'rope_theta' is not a finite number", NULL);
    cfg_bad("config_rope_scaling_not_object", LLAMA("\"rope_scaling\":5,", NULL), MF_ERR_FORMAT,
            "'rope_scaling' is not an object", NULL);
    cfg_bad("config_rope_scaling_no_type", LLAMA("\"rope_scaling\":{\"factor\":2},", NULL), MF_ERR_FORMAT,
            "missing required field 'rope_scaling.rope_type'", NULL);
    cfg_bad("config_rope_yarn", LLAMA("\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4},", NULL), MF_ERR_UNSUPPORTED,
            "rope_scaling.rope_type 'yarn' unsupported", "llama3");
    cfg_bad("config_llama3_no_factor",
            LLAMA("\"rope_scaling\":{\"rope_type\":\"llama3\",\"low_freq_factor\":1,\"high_freq_factor\":4,"
                  "\"original_max_position_embeddings\":8192},",
                  NULL),
            MF_ERR_FORMAT, "missing required field 'rope_scaling.factor'", NULL);
    cfg_bad("config_llama3_no_orig",
            LLAMA("\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1,\"high_freq_factor\":4},",
                  NULL),
            MF_ERR_FORMAT, "'rope_scaling.original_max_position_embeddings'", NULL);
    cfg_bad("config_llama3_freqs_reversed",
            LLAMA("\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":4,\"high_freq_factor\":1,"
                  "\"original_max_position_embeddings\":8192},",
                  NULL),
            MF_ERR_FORMAT, "high_freq_factor 1 must exceed low_freq_factor 4", NULL);
    cfg_bad("config_rope_linear_negative", LLAMA("\"rope_scaling\":{\"type\":\"linear\",\"factor\":-2},", NULL),
            MF_ERR_FORMAT, "rope_scaling.factor = -2 must be > 0", NULL);
    cfg_bad("config_bad_activation", LLAMA("\"hidden_act\":\"mish\",", NULL), MF_ERR_UNSUPPORTED,
            "activation 'mish' unsupported", "silu");
    cfg_bad("config_eos_list_string", LLAMA("\"eos_token_id\":[2,\"x\"],", NULL), MF_ERR_FORMAT,
            "eos_token_id[1] is not a token id", NULL);
    cfg_bad("config_eos_object", LLAMA("\"eos_token_id\":{},", NULL), MF_ERR_FORMAT,
            "'eos_token_id' is neither an integer nor a list", NULL);
    cfg_bad("config_eos_too_many", LLAMA("\"eos_token_id\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],", NULL),
            MF_ERR_FORMAT, "more than 16", NULL);
    cfg_bad("config_bos_negative", LLAMA("\"bos_token_id\":-1,", NULL), MF_ERR_FORMAT, "bos_token_id = -1", NULL);
    cfg_bad("config_tie_not_bool", LLAMA("\"tie_word_embeddings\":\"yes\",", NULL), MF_ERR_FORMAT,
            "'tie_word_embeddings' is not true/false", NULL);
    cfg_bad("config_mixtral_topk_exceeds",
            "{\"architectures\":[\"MixtralForCausalLM\"],\"vocab_size\":10,\"hidden_size\":8,\"num_hidden_layers\":1,"
            "\"num_attention_heads\":2,\"intermediate_size\":16,\"num_local_experts\":8,\"num_experts_per_tok\":9}",
            MF_ERR_FORMAT, "num_experts_per_tok 9 exceeds the 8 experts", NULL);
    cfg_bad("config_qwen2_moe_dense_layers",
            "{\"architectures\":[\"Qwen2MoeForCausalLM\"],\"vocab_size\":10,\"hidden_size\":8,\"num_hidden_layers\":1,"
            "\"num_attention_heads\":2,\"moe_intermediate_size\":16,\"decoder_sparse_step\":2}",
            MF_ERR_UNSUPPORTED, "decoder_sparse_step 2", NULL);
    cfg_bad("config_qwen2_moe_mlp_only_layers",
            "{\"architectures\":[\"Qwen2MoeForCausalLM\"],\"vocab_size\":10,\"hidden_size\":8,\"num_hidden_layers\":2,"
            "\"num_attention_heads\":2,\"moe_intermediate_size\":16,\"mlp_only_layers\":[1]}",
            MF_ERR_UNSUPPORTED, "mlp_only_layers lists 1 dense layers", NULL);
    cfg_bad("config_gpt2_inverse_layer_scaling", GPT2("\"scale_attn_by_inverse_layer_idx\":true,", NULL),
            MF_ERR_UNSUPPORTED, "scale_attn_by_inverse_layer_idx=true", NULL);
    cfg_bad("config_bad_json", "{\"architectures\":[\"LlamaForCausalLM\"", MF_ERR_FORMAT, "not valid JSON", NULL);
    cfg_bad("config_empty_text", "", MF_ERR_FORMAT, "not valid JSON", NULL);
    cfg_bad("config_not_object", "[1,2]", MF_ERR_FORMAT, "not a JSON object", NULL);

    s = mf_model_config_parse(NULL, 3, "x", &c);
    expect_err("config_parse_null_json", s, MF_ERR_INVALID_ARG, "json is NULL", NULL, NULL);
    s = mf_model_config_parse("{}", 2, "x", NULL);
    expect_err("config_parse_null_out", s, MF_ERR_INVALID_ARG, "out is NULL", NULL, NULL);

}

// ---- main ----------------------------------------------------------------------------------

static void cleanup(void) {
    for (int i = n_made - 1; i >= 0; i--) remove(made[i]);
    rmdir(tmpdir);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURE_DIR (tests/fixtures/model_files)\n", argv[0]);
        return 2;
    }
    fixdir = argv[1];
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/mf_model_files_XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }

    test_st_tiny();
    test_st_bf16();
    test_st_dirs();
    test_st_edge_good();
    test_st_bad_headers();
    test_st_bad_files();
    test_st_bad_dirs();
    test_oom();
    test_config_fixtures();
    test_config_inline();
    // After every failure above, the first file still opens.
    mf_st_file *f = NULL;
    mf_status s = mf_st_open(fix_path("tiny.safetensors"), &f);
    report(s == MF_OK && mf_st_count(f) == 7, "st_next_call_works", "%s", s == MF_OK ? "" : mf_last_error());
    mf_st_close(f);

    cleanup();
    printf("bad-input cases: %d\n", n_bad_inputs);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
