// The op test harness behind tests/test_ops.c: a table of cases, each run on
// every available backend and compared with a float64 reference.
//
// HOW TO ADD AN OP FAMILY (e.g. softmax):
//   1. Write tests/cases_softmax.c (it is picked up by the glob in
//      tests/CMakeLists.txt). It defines
//          void th_cases_softmax(th_list *l);
//      which calls th_add(l, run_fn, &params, sizeof params,
//                         "softmax(dtype=%s,rows=%lld,...)", ...) once per case.
//      The name spells every parameter and starts with "softmax(" so that
//      `--filter 'softmax('` selects exactly this family. Tolerances go in a
//      comment next to the cases, per op and dtype.
//   2. Add X(softmax) to TH_FAMILIES in tests/test_ops.c (the registry table).
//   3. Add one CTest line to tests/CMakeLists.txt (above the block that
//      must stay last):
//          add_test(NAME ops_softmax COMMAND test_ops --filter "softmax(")
//   Names must be unique (test_ops refuses to run otherwise); `test_ops
//   --list --filter 'softmax('` shows them.
//
// A case's run function (th_run_fn) is called once per backend with a fresh
// context whose random stream is seeded from the case name, so every backend
// and every run sees the same inputs. Inside it:
//     mf_tensor x;  th_buf *bx = th_tensor(ctx, dt, 2, shape, NULL, &x);  // NaN-poisoned, guarded
//     th_fill(ctx, bx, &x, NULL);           // random values with outliers, rounded to dt
//     ... compute ref[] and bound[] in double from th_get(bx, offset) ...
//     TH_CALL(ctx, mf_op(ctx->be, &args));  // op + sync; fails (or skips: UNSUPPORTED on a GPU) the case
//     return th_check(ctx, by, &y, ref, bound, "y") ? TH_PASS : TH_FAIL;
// Every buffer is uploaded before the op (TH_CALL does it) and freed by the
// harness. th_check downloads a buffer and checks, besides the values, the
// guard bytes before and after it and that elements outside the view kept
// their poison; buffers never passed to th_check must come back unchanged.
#ifndef MF_TESTS_HARNESS_H
#define MF_TESTS_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "minfer/minfer.h"

#if defined(__GNUC__)
#define TH_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TH_PRINTF(a, b)
#endif

// ---- random numbers: xoshiro256**, seeded by splitmix64 -----------------------
typedef struct {
    uint64_t s[4];
} th_rng;

void th_rng_seed(th_rng *r, uint64_t seed);
uint64_t th_rng_u64(th_rng *r);
double th_rng_unif(th_rng *r, double lo, double hi); // [lo, hi)
int64_t th_rng_int(th_rng *r, int64_t n);            // [0, n)

// ---- per-dtype numbers --------------------------------------------------------
double th_eps(mf_dtype dt);  // unit roundoff: 2^-24 (f32), 2^-11 (f16), 2^-8 (bf16)
double th_tiny(mf_dtype dt); // absolute rounding error floor (half the smallest subnormal)
double th_round(mf_dtype dt, double v); // v as stored in dt (through f32)

// ---- device buffers with guards ------------------------------------------------
// One backend allocation: TH_GUARD bytes | n elements | TH_GUARD bytes.
// The host copy starts as a NaN pattern (0xff bytes) in the data region;
// the guards hold TH_GUARD_BYTE.
#define TH_GUARD 256
#define TH_GUARD_BYTE 0xa5

typedef struct th_buf {
    mf_dtype dtype;
    int64_t n;         // elements in the data region
    size_t bytes;      // n * dtype size
    char *host_base;   // host: guard | data | guard
    char *host;        // host_base + TH_GUARD: what is uploaded, and what th_check downloads into
    char *init;        // data region as uploaded (for "unchanged" checks)
    void *dev_base;    // backend: guard | data | guard
    void *dev;         // dev_base + TH_GUARD: first element on the backend
    bool uploaded;     // set by th_upload_all; cleared when the host copy is changed
    bool checked;      // compared by th_check (an output); otherwise it must come back unchanged
} th_buf;

// ---- a case running on one backend ----------------------------------------------
typedef enum { TH_PASS = 0, TH_FAIL = 1, TH_SKIP = 2 } th_result;

#define TH_MAX_BUFS 16

typedef struct th_ctx {
    mf_backend *be;          // backend under test
    th_rng rng;              // seeded from the case name
    const char *case_name;
    char msg[2048];          // why it failed / was skipped (appended to)
    double worst;            // largest err/bound seen by th_check (for the "ok" line)
    th_buf *bufs[TH_MAX_BUFS];
    int nbufs;
    void *scratch[TH_MAX_BUFS]; // th_scratch blocks
    int nscratch;
} th_ctx;

typedef th_result (*th_run_fn)(th_ctx *ctx, const void *params);

// Appends to ctx->msg; returns TH_FAIL so that `return th_fail(ctx, ...)` reads well.
th_result th_fail(th_ctx *ctx, const char *fmt, ...) TH_PRINTF(2, 3);
// Test infrastructure broke (allocation, copy): prints and exits with code 2.
void th_fatal(const char *fmt, ...) TH_PRINTF(1, 2);

// A buffer of n elements of dt on ctx's backend (freed after the case).
th_buf *th_buf_new(th_ctx *ctx, mf_dtype dt, int64_t n);
// A buffer that holds a view of `shape` with `stride` (NULL: contiguous row-major)
// and that view in *view (data = the buffer's first element on the backend).
th_buf *th_tensor(th_ctx *ctx, mf_dtype dt, int32_t ndim, const int64_t *shape, const int64_t *stride,
                  mf_tensor *view);
// A view over an existing buffer (e.g. the same buffer as x for in-place y).
mf_tensor th_view(th_ctx *ctx, const th_buf *b, int32_t ndim, const int64_t *shape, const int64_t *stride);

// Element offset of the logical (row-major) index `lin` of view t.
int64_t th_lin_off(const mf_tensor *t, int64_t lin);
// Host value of element `off` (an offset from the buffer's first element).
double th_get(const th_buf *b, int64_t off);
void th_set(th_buf *b, int64_t off, double v); // rounds to the buffer's dtype

// Random values into the elements of view t (its own buffer b), rounded to b's dtype.
typedef struct {
    double lo, hi;          // ordinary values: uniform in [lo, hi)
    double outlier;         // about one element in `outlier_every` is multiplied by this (0: none)
    int64_t outlier_every;  // and at least one per fill when numel >= 8
    int64_t neginf_every;   // 0: none; else about one row (last dim) in this many gets a
                            // run of -inf of random length (whole row included)
} th_fill_opts;
// Defaults: [-1, 1), outliers x1e4 (f32, bf16) or x1e2 (f16) one in 64, no -inf.
th_fill_opts th_fill_defaults(mf_dtype dt);
void th_fill(th_ctx *ctx, th_buf *b, const mf_tensor *t, const th_fill_opts *opts); // opts NULL: defaults

// Upload every buffer not yet uploaded (host -> backend, guards included).
void th_upload_all(th_ctx *ctx);

// Run an op's status through: on MF_OK syncs the backend and checks that too.
// UNSUPPORTED on a non-CPU backend skips the case (reported, not failed); on
// the CPU (the oracle) any error fails it.
th_result th_status(th_ctx *ctx, mf_status st, const char *call);
#define TH_CALL(ctx, expr)                                            \
    do {                                                              \
        th_upload_all(ctx);                                           \
        th_result th_r_ = th_status((ctx), (expr), #expr);            \
        if (th_r_ != TH_PASS) return th_r_;                           \
    } while (0)

// Checks a status and message: true when got == want and, if needle is not
// NULL, mf_last_error() contains it; else fails the case naming `what`.
bool th_expect(th_ctx *ctx, mf_status got, mf_status want, const char *needle, const char *what);

// Downloads b and checks: guards intact, elements outside view t unchanged,
// and for each element i of t (logical row-major order) |got - ref[i]| <= bound[i]
// (ref +-inf / NaN must be matched exactly). `what` names it in messages.
bool th_check(th_ctx *ctx, th_buf *b, const mf_tensor *t, const double *ref, const double *bound,
              const char *what);

// Host scratch freed after the case (zeroed; exits on OOM).
void *th_scratch(th_ctx *ctx, size_t bytes);

// ---- the case list ----------------------------------------------------------------
typedef struct th_list th_list;
// Registers a case; params (params_size bytes) are copied.
void th_add(th_list *l, th_run_fn run, const void *params, size_t params_size, const char *name_fmt, ...)
    TH_PRINTF(5, 6);

// Used by the runner in test_ops.c.
typedef struct {
    char name[256];   // "gemm(dtype=bf16,...)": the parameter string
    th_run_fn run;
    void *params;     // owned copy
} th_case;
struct th_list {
    th_case *cases;
    int64_t n, cap;
};
void th_list_free(th_list *l);
// Runs one case on one backend; msg gets the failure/skip reason, *worst the
// largest err/bound ratio seen.
th_result th_run_case(const th_case *c, mf_backend *be, uint64_t seed, char *msg, size_t msg_cap, double *worst);

// Small formatting helper for names: "0"/"1".
static inline int th_b(bool v) { return v ? 1 : 0; }

#endif // MF_TESTS_HARNESS_H
