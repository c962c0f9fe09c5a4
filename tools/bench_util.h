// Benchmark plumbing shared by `minfer bench <op>`: timing (CUDA events on a
// stream of its own, or the wall clock on the CPU backend), cache flushing
// between iterations, percentiles, the copy-bandwidth ceiling, random data and
// table/CSV/JSON output. The CUDA parts are plain C over the CUDA runtime API
// (cuda_runtime_api.h), compiled when MF_HAVE_CUDA is defined.
#ifndef MF_TOOLS_BENCH_UTIL_H
#define MF_TOOLS_BENCH_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "minfer/minfer.h"

// ---- timing ----------------------------------------------------------------------

typedef struct mf_bench_timer mf_bench_timer;

// For be's device: on CUDA a new stream that be is switched to (so that ops,
// events and flushes share it), two events and a flush buffer of at least
// flush_bytes (cleared before every timed iteration so that L2 starts cold);
// on the CPU a host buffer of flush_bytes written the same way.
mf_status mf_bench_timer_init(mf_backend *be, size_t flush_bytes, mf_bench_timer **out);
void mf_bench_timer_free(mf_bench_timer *t); // restores be's default stream
bool mf_bench_timer_is_cuda(const mf_bench_timer *t);
void *mf_bench_timer_stream(const mf_bench_timer *t); // cudaStream_t (NULL on the CPU)

// One timed region: fn(arg) called `calls` times between two events (or clock
// reads), after a flush. Returns microseconds per call in *us.
typedef mf_status (*mf_bench_fn)(void *arg);
mf_status mf_bench_time(mf_bench_timer *t, mf_bench_fn fn, void *arg, bool flush, double *us);

// Runs `warmup` untimed calls, then `iters` timed ones (each flushed first),
// into samples[iters] (microseconds).
mf_status mf_bench_sample(mf_bench_timer *t, mf_bench_fn fn, void *arg, int warmup, int iters, double *samples);

// Device-to-device (CPU: memcpy) copy of `bytes`, median of `iters` runs:
// GB/s counting bytes read plus bytes written. The ceiling memory-bound
// kernels are quoted against.
mf_status mf_bench_copy_gbps(mf_bench_timer *t, mf_backend *be, size_t bytes, int iters, double *gbps);

// CPU only: the read bandwidth of the OpenMP threads the ops run on (the
// decode step's), a read stream over `bytes` (src/cpu/stream.c), best of
// `rounds` x its access patterns: GB/s of bytes read.
// The ceiling a CPU decode step (weights read once, little written) is
// quoted against. *gbps only grows (the best of this call and what it
// held), so that calls before and after a run give the best of both.
mf_status mf_bench_read_gbps(mf_backend *be, size_t bytes, int rounds, double *gbps);

// A square n^3 GEMM c = a b in dtype dt through mf_gemm (random inputs),
// median of `iters` runs after 2 warm-up calls: TFLOP/s (2 n^3 FLOP a call).
mf_status mf_bench_gemm_tflops(mf_bench_timer *t, mf_backend *be, int64_t n, mf_dtype dt, int iters, double *tflops);

// ---- statistics ----------------------------------------------------------------------

typedef struct {
    double p5, p50, p95; // microseconds
    int n;
} mf_bench_stats;

// Percentiles of samples[0..n) (sorted in place), nearest rank.
mf_bench_stats mf_bench_stats_of(double *samples, int n);

// ---- data --------------------------------------------------------------------------------

// n random values uniform in [lo, hi) as dtype dt into host memory dst (seeded).
void mf_bench_fill_random(void *dst, mf_dtype dt, int64_t n, float lo, float hi, uint64_t seed);

// The same into be's memory dst: one random host block of up to 4M elements,
// copied as many times as needed.
mf_status mf_bench_upload_random(mf_backend *be, void *dst, mf_dtype dt, int64_t n, float lo, float hi, uint64_t seed);

// ---- output ----------------------------------------------------------------------------

typedef enum { MF_BENCH_TABLE = 0, MF_BENCH_CSV = 1, MF_BENCH_JSON = 2 } mf_bench_format;

// A result table: named columns, rows of string cells (numbers preformatted).
// Printed as a markdown table (padded, number columns right-aligned), CSV, or
// a JSON array of objects (cells that parse as numbers are written as numbers).
typedef struct mf_bench_table mf_bench_table;
mf_bench_table *mf_bench_table_new(int ncols, const char *const *names); // NULL on OOM
void mf_bench_table_free(mf_bench_table *t);
// Appends a row of ncols cells (copied). False on OOM.
bool mf_bench_table_add(mf_bench_table *t, const char *const *cells);
void mf_bench_table_print(const mf_bench_table *t, mf_bench_format fmt, FILE *f);
// Writes t as CSV to csv and as JSON to json (either NULL: skipped); a file
// that cannot be written is named on stderr after `who` ("minfer bench
// attention"). Returns 0, or 1 when a file could not be written.
int mf_bench_table_write_files(const mf_bench_table *t, const char *csv, const char *json, const char *who);
// Leaves column `name` out of the markdown table (CSV and JSON keep it).
void mf_bench_table_hide_in_table(mf_bench_table *t, const char *name);

// One line naming the device the numbers come from ("NVIDIA H100 80GB HBM3, 132 SMs,
// 50 MB L2" or "cpu: 2 threads").
void mf_bench_device_name(const mf_bench_timer *t, char *buf, size_t cap);

// The commit the binary was built from: git's short HEAD, "+dirty" when
// src, include, tools, bench or CMakeLists.txt differ from it, MF_COMMIT
// when set at build time, "unknown" without git (build_info.c, generated by
// cmake/build_info.cmake at every build).
extern const char mf_build_commit[];

// A number cell: "%.*f", or "-" for NaN.
void mf_bench_fmt(char *buf, size_t cap, double v, int prec);

#endif // MF_TOOLS_BENCH_UTIL_H
