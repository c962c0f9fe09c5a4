// `minfer bench NAME [options]`: one definition record per benchmark (in its
// file, tools/bench_<name>.c, next to its option parser and its run function)
// and one driver (bench.c) that finds the record, parses the options the
// benches share, calls the bench's own, prints its help or one error line,
// and runs it. `minfer --help` and `minfer bench --help` list mf_benches.
#ifndef MF_TOOLS_BENCH_H
#define MF_TOOLS_BENCH_H

#include <stddef.h>
#include <stdio.h>

#include "bench_util.h"
#include "cli_args.h"
#include "minfer/engine.h"

// ---- the options the benches share --------------------------------------------------------

// Which of them a bench takes (the driver refuses the others as unknown).
enum {
    MF_BENCH_OPT_BACKEND = 1 << 0, // --backend auto|cpu|cuda
    MF_BENCH_OPT_CSV = 1 << 1,     // --csv FILE
    MF_BENCH_OPT_JSON = 1 << 2,    // --json FILE
    MF_BENCH_OPT_FORMAT = 1 << 3,  // --format table|csv|json
    MF_BENCH_OPT_ITERS = 1 << 4,   // --warmup N --iters N
    MF_BENCH_OPT_DTYPE = 1 << 5,   // --dtype bf16|f16|f32
    MF_BENCH_OPT_FULL = 1 << 6,    // --full
    MF_BENCH_OPT_MAX_MB = 1 << 7,  // --max-mb N
    MF_BENCH_OPT_NO_GEMM = 1 << 8, // --no-gemm-ceiling
    // what every bench with a session (mf_bench_begin) takes
    MF_BENCH_OPT_SESSION = MF_BENCH_OPT_BACKEND | MF_BENCH_OPT_CSV | MF_BENCH_OPT_JSON | MF_BENCH_OPT_FORMAT |
                           MF_BENCH_OPT_ITERS,
};

// Every bench's options struct starts with these.
typedef struct {
    const char *backend, *csv, *json; // --backend (auto), --csv FILE, --json FILE
    mf_dtype dt;                      // --dtype (valid when dt_given; the bench has a default)
    bool dt_given;
    mf_bench_format fmt;              // --format (table)
    bool full;                        // --full: the whole default grid (not with list options)
    bool no_gemm;                     // --no-gemm-ceiling: skip it (profiling runs: no cuBLAS kernel to filter)
    int warmup, iters;                // [0, 10^6] and [1, 10^6]; -1: the record's default
    double max_mb;                    // --max-mb, finite, >= 0; -1: the record's default
} mf_bench_common_opts;

// A list option of a bench ("--batch 1,4,16"): each value in [lo, hi], into
// the mf_arg_list at byte offset `off` of its options.
typedef struct {
    const char *flag;
    int64_t lo, hi;
    size_t off;
} mf_bench_list_opt;

// ---- the record -------------------------------------------------------------------------

typedef struct mf_bench_def {
    const char *name;  // minfer bench NAME
    const char *about; // one line for minfer --help and minfer bench --help
    // Options: the shared ones that `common` names, the list options, then the
    // bench's own: `valued` flags take the next argument, `flags` none (value
    // NULL); option() sets one. --full with a list option is refused unless
    // full_with_lists (then --full extends the dimensions not listed).
    unsigned common;                          // MF_BENCH_OPT_* bits
    bool full_with_lists;
    size_t opts_size;                         // its options struct (mf_bench_common_opts first)
    const void *defaults;                     // (opts_size bytes) its options before parsing; the
                                              // shared ones are then set to the driver's defaults
    const mf_bench_list_opt *lists;           // ends with {NULL}; NULL: none
    const char *const *valued, *const *flags; // NULL-terminated; NULL: none
    mf_args_result (*option)(void *opts, const char *flag, const char *value, char *err);
    mf_args_result (*check)(void *opts, char *err); // after the last argument; NULL: none
    void (*help)(FILE *f);
    int (*run)(void *opts); // the exit status (0, or 1 after a message on stderr)
    // Defaults of --warmup, --iters and --max-mb when not given: [0] on the
    // CPU, [1] on CUDA; --max-mb on CUDA is 85% of free memory less max_mb[1].
    int warmup[2], iters[2];
    double max_mb[2];
} mf_bench_def;

// Every bench, in the order the help lists them; NULL-terminated.
extern const mf_bench_def *const mf_benches[];
extern const mf_bench_def mf_bench_softmax, mf_bench_attention, mf_bench_moe, mf_bench_topk, mf_bench_gemv,
    mf_bench_gemm_host, mf_bench_model, mf_bench_serve;

// Parses the arguments after the bench's name into opts (d->opts_size bytes),
// as the parsers of cli_args.h do.
mf_args_result mf_bench_parse(const mf_bench_def *d, int argc, char **argv, void *opts, char err[MF_ARGS_ERR_CAP]);

// The benches' lines of `minfer --help` ("  bench softmax   <about>").
void mf_bench_list(FILE *f);

// ---- the session of an op bench ---------------------------------------------------------
// What an op bench opens first (mf_bench_begin): the backend, its result table, the timer
// with an L2 flush buffer (256 MB on CUDA, cpu_flush bytes on the CPU), the
// provenance (device, commit, UTC date) and the ceilings its figures are
// quoted against, measured before the first case:
//   copy: device-to-device copy of 1 GiB (CPU: memcpy of 128 MiB), GB/s
//         counting bytes read plus bytes written, median of 20 (CPU 5);
//   gemm: when asked, a square GEMM through mf_gemm (CUDA: bf16 8192^3,
//         cuBLASLt; CPU: f32 1024^3, OpenBLAS), TFLOP/s, median of 20 (CPU 3).
// The table has the bench's ncols columns `names`, then the session's:
// device, commit, date, copy_GB/s, gemm_TFLOP/s (gemm "-" when not
// measured); the markdown table shows none of those (a "# ..." line above
// it does), CSV and JSON keep them all.
typedef struct {
    const char *what;     // "attention": names the bench in messages
    mf_backend *be;
    mf_bench_timer *timer;
    mf_bench_table *tab;
    bool cuda;            // be runs on CUDA
    int ncols;            // the bench's own columns (the table has 5 more)
    char device[160];     // mf_bench_device_name
    char date[32];        // UTC, ISO 8601
    double copy_gbps;     // the copy ceiling
    double gemm_tflops;   // the GEMM ceiling; NAN when not measured
    char gemm_shape[48];  // "bf16 8192x8192x8192" (empty when not measured)
} mf_bench_session;

// Opens the session of bench d on c->backend and sets the shared options not
// given (warmup, iters, max_mb) to d's defaults. 0, or 1 after printing
// "minfer bench <name>: <why>" with nothing left open.
int mf_bench_begin(mf_bench_session *b, const mf_bench_def *d, mf_bench_common_opts *c, size_t cpu_flush, bool gemm,
                   int ncols, const char *const *names);

// Appends a row: the bench's ncols cells, then the session's own. False on OOM.
bool mf_bench_add_row(mf_bench_session *b, const char *const *cells);

// One progress line on stderr: "minfer bench <what>: [i/n] <message>".
void mf_bench_progress(const mf_bench_session *b, int i, int n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// Names st's error on stderr unless MF_OK; prints the results on stdout in
// c->fmt (table: after one "# ..." line naming the device, commit, date,
// ceilings, iterations and `note`) and as CSV / JSON into c->csv / c->json
// (NULL: skipped); closes the session. The exit status: 0, or 1 after an
// error or a file that could not be written (named on stderr).
int mf_bench_end(mf_bench_session *b, mf_status st, const mf_bench_common_opts *c, const char *note);

// ---- the benches' own options (parsed in their files; checked by fuzz/fuzz_cli.c) ------------

// minfer bench softmax
typedef struct {
    mf_bench_common_opts com;
    bool fused, unfused;              // --variant (both)
    bool grid, sweep;                 // --cases (all; grid only when shape lists are given)
    bool cases_given;                 // --cases was given
    bool causal;                      // --mask (causal)
    float scale;                      // --scale, finite (0.125)
    mf_arg_list batch, heads, seq;    // grid shapes (product; q_len = k_len = seq); any given: no default grid
} mf_bench_softmax_opts;

// minfer bench attention
typedef struct {
    mf_bench_common_opts com;
    bool prefill, decode;             // --cases (all)
    bool causal, noncausal;           // --mask causal|none|both (both; prefill cases)
    int num_splits;                   // --num-splits, [0, 256] (0: the dispatch chooses)
    mf_arg_list batch, seq, heads, kv_heads, head_dim; // shapes (product; decode: seq = cached context;
                                                       // pairs where kv_heads does not divide heads skipped)
} mf_bench_attention_opts;

// minfer bench moe
typedef struct {
    mf_bench_common_opts com;
    bool prefill, decode;             // --mode (all)
    bool even, zipf;                  // --routing (both)
    int64_t seq;                      // --seq, prefill tokens per sequence, [1, 65536]; -1: 2048 (CPU 16)
    mf_arg_list experts, top_k, hidden, batch; // shapes (product; top_k > experts skipped): experts and
                                               // top_k [1, 256], hidden a multiple of 8 in [8, 65536]
} mf_bench_moe_opts;

// minfer bench topk
typedef struct {
    mf_bench_common_opts com;         // --dtype is dts below; no --max-mb, no GEMM ceiling
    mf_arg_list vocab, batch, k;      // n == 0: the backend's defaults; vocab, batch [1, 2^31), k [1, MF_TOPK_MAX]
    mf_dtype dts[3];                  // (n_dt) --dtype f32,bf16,f16: distinct (default f32)
    int n_dt;
    float scale;                      // --scale, finite and > 0 (1)
} mf_bench_topk_opts;

// minfer bench gemv
typedef struct {
    mf_bench_common_opts com;         // no --dtype, --full, --max-mb or GEMM ceiling
    int m;                            // --m: one row count in [1, 8]; 0: 1, 2, 4 and 8
    const char *shapes;               // --shapes tiny|tinyllama|smollm2 (CPU; NULL: tiny)
} mf_bench_gemv_opts;

// minfer bench gemm-host
typedef struct {
    mf_bench_common_opts com;         // --backend and --csv only
    int64_t m;                        // --m, rows, [1, 4096] (1)
    int reps;                         // --reps, bursts, [1, 100000] (50)
} mf_bench_gemm_host_opts;

// minfer bench model
typedef struct {
    mf_bench_common_opts com;         // --format only (--backend, --dtype, --seed: the model's)
    mf_model_args model;              // no -m and no --synthetic: --synthetic small; --seed 1
    mf_arg_list batch, seq;           // --batch, --seq: each [1, 2^31); n == 0: the backend's defaults
    int gen;                          // --gen, [1, 4096] (16)
    int iters;                        // --iters, [1, 100000]; 0: backend default
    bool profile;                     // --profile
} mf_bench_model_opts;

// minfer bench serve
typedef struct {
    mf_bench_common_opts com;         // --format, --csv, --json
    mf_model_args model;              // -m DIR or --synthetic PRESET (default: the default model)
    int requests;                     // --requests, [1, 100000] (64)
    mf_arg_list conc;                 // --concurrency: each [1, 100000]
    const char *rates;                // --rate R,R2: 1 to 32 request rates per second, each >= 0.001
    int in_lo, in_hi, out_lo, out_hi; // --input-len LO:HI (16:128), --output-len LO:HI (16:64): 1 <= LO <= HI <= 2^20
    int shared;                       // --shared-prefix N, [0, 2^20] (0)
    mf_engine_opts eng;               // --kv-blocks, --block-size, --max-batched-tokens, --max-seqs, --no-prefix-cache
} mf_bench_serve_opts;                // --seed (the model's): also seeds the lengths and prompts

#endif // MF_TOOLS_BENCH_H
