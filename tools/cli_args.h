// Argument parsing of the CLI's commands, apart from running them, so that it
// can be tested and fuzzed (fuzz/fuzz_cli.c) without a model or a backend.
//
// Each mf_parse_<command>_args() takes the arguments after the command name,
// fills the whole options struct (defaults included) and returns
//   MF_ARGS_OK    the options are usable,
//   MF_ARGS_HELP  -h / --help was given: the caller prints its help, exits 0,
//   MF_ARGS_BAD   err holds one line naming the flag and the value
//                 ("-n 99999999999999999999: not an integer in [0, 2147483647]"),
//                 without the "minfer: error: <command>: " prefix: exit 2.
// Nothing is printed and nothing exits. Strings in the options point into argv
// (except score's ids: free them with mf_score_opts_free). Numbers are parsed
// strictly: the whole argument, in range, finite.
#ifndef MF_TOOLS_CLI_ARGS_H
#define MF_TOOLS_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "bench_util.h"
#include "minfer/generate.h"
#include "minfer/tensor.h"

typedef enum { MF_ARGS_OK = 0, MF_ARGS_HELP = 1, MF_ARGS_BAD = 2 } mf_args_result;

enum {
    MF_ARGS_ERR_CAP = 320,  // bytes of an error message, NUL included
    MF_ARGS_MAX_STOP = 16,  // generate --stop strings
    MF_ARGS_MAX_LIST = 16,  // values of a list option (bench --batch 1,4,16)
};

// A list-valued option ("--batch 1,4,16"): v[0 .. n), n == 0 when not given.
typedef struct {
    int64_t v[MF_ARGS_MAX_LIST];
    int n;
} mf_arg_list;

// minfer generate -m DIR -p TEXT [options]
typedef struct {
    const char *dir, *prompt;      // -m, -p (both required)
    const char *backend;           // --backend: "auto" (default), "cpu" or "cuda"
    mf_dtype dtype;                // --dtype bf16|f16|f32 (valid when !dtype_auto)
    bool dtype_auto;               // --dtype auto (the default): CUDA bf16, CPU the checkpoint's
    int64_t n;                     // -n: new tokens at most, [0, 2^31) (128)
    mf_sampler_params sp;          // --temp 0.8, --top-k 40, --top-p 0.95, --min-p 0.05,
                                   // --repeat-penalty 1, --seed (valid only when seed_given)
    bool seed_given;
    const char *stop[MF_ARGS_MAX_STOP]; // (n_stop) --stop strings, non-empty
    int n_stop;
    bool ignore_eos;               // --ignore-eos
    mf_bos_mode bos;               // --bos / --no-bos (MF_BOS_AUTO)
    const char *attn;              // --attn flash|classic (NULL: flash; the library checks the name)
    bool no_graphs;                // --no-graphs: decode steps launch their ops (no CUDA Graphs)
} mf_generate_opts;

// The model options of score, info and bench model.
typedef struct {
    const char *dir;       // -m / --model
    const char *synthetic; // --synthetic PRESET (the library checks the name)
    const char *backend;   // --backend auto|cpu|cuda (NULL: auto)
    mf_dtype dtype;        // --dtype bf16|f16|f32 (valid when !dtype_auto)
    bool dtype_auto;       // --dtype auto (the default): CUDA bf16, CPU the checkpoint's
    uint64_t seed;         // --seed for synthetic weights, [0, 2^64)
    const char *attn;      // --attn (NULL: flash; the library checks the name)
    bool no_graphs;        // --no-graphs: decode steps launch their ops (no CUDA Graphs)
    bool host_argmax;      // --host-argmax: bench model's greedy steps take the logits to the host
    int32_t topk;          // --topk K: bench model's decode steps return K candidates (0: the argmax)
} mf_model_args;

// minfer score -m DIR (-p TEXT | --tokens 1,2,3) [options]
typedef struct {
    mf_model_args model;
    const char *text;       // -p, or NULL when ids are given
    int32_t *ids;           // (n_ids) --tokens, parsed (owned: mf_score_opts_free), or NULL
    int64_t n_ids;
    const char *logits_out; // --logits-out FILE.npy
    int bos;                // -1: the tokenizer's default, 1: --bos, 0: --no-bos
} mf_score_opts;

// minfer info (-m DIR | --synthetic PRESET) [--batch N] [--seq N]
typedef struct {
    mf_model_args model;
    int64_t batch; // --batch, [1, 2^31) (1)
    int64_t seq;   // --seq, [1, 2^31); 0: min(max positions, 2048)
} mf_info_opts;

// minfer bench model [options]
typedef struct {
    mf_model_args model;              // no -m and no --synthetic: --synthetic small; --seed 1
    int64_t batches[MF_ARGS_MAX_LIST]; // (n_batches) --batch values, each [1, 2^31)
    int64_t seqs[MF_ARGS_MAX_LIST];    // (n_seqs) --seq values, each [1, 2^31)
    int n_batches, n_seqs;            // 0 when not given: the backend's defaults
    mf_bench_format fmt;              // --format (table)
    int gen;                          // --gen, [1, 4096] (16)
    int iters;                        // --iters, [1, 100000]; 0: backend default
    bool profile;                     // --profile
} mf_bench_model_opts;

// The options every op bench takes (each refuses those it has no use for).
typedef struct {
    const char *backend, *csv, *json; // --backend (auto), --csv FILE, --json FILE
    mf_dtype dt;                      // --dtype (valid when dt_given; the bench has a default)
    bool dt_given;
    mf_bench_format fmt;              // --format (table)
    bool full;                        // --full: the whole default grid (not with shape lists)
    bool no_gemm;                     // --no-gemm-ceiling: skip it (profiling runs: no cuBLAS kernel to filter)
    int warmup, iters;                // [0, 10^6] and [1, 10^6]; -1: backend default
    double max_mb;                    // --max-mb, finite, >= 0; -1: the backend default
} mf_bench_common_opts;

// minfer bench softmax [options]
typedef struct {
    mf_bench_common_opts com;
    bool fused, unfused;              // --variant (both)
    bool grid, sweep;                 // --cases (all; grid only when shape lists are given)
    bool causal;                      // --mask (causal)
    float scale;                      // --scale, finite (0.125)
    mf_arg_list batch, heads, seq;    // grid shapes (product; q_len = k_len = seq); any given: no default grid
} mf_bench_softmax_opts;

// minfer bench attention [options]
typedef struct {
    mf_bench_common_opts com;
    bool prefill, decode;             // --cases (all)
    bool causal, noncausal;           // --mask causal|none|both (both; prefill cases)
    int num_splits;                   // --num-splits, [0, 256] (0: the dispatch chooses)
    mf_arg_list batch, seq, heads, kv_heads, head_dim; // shapes (product; decode: seq = cached context;
                                                       // pairs where kv_heads does not divide heads skipped)
} mf_bench_attention_opts;

// minfer bench moe [options]
typedef struct {
    mf_bench_common_opts com;
    bool prefill, decode;             // --mode (all)
    bool even, zipf;                  // --routing (both)
    int64_t seq;                      // --seq, prefill tokens per sequence, [1, 65536]; -1: 2048 (CPU 16)
    mf_arg_list experts, top_k, hidden, batch; // shapes (product; top_k > experts skipped): experts and
                                               // top_k [1, 256], hidden a multiple of 8 in [8, 65536]
} mf_bench_moe_opts;

// minfer bench topk [options]
typedef struct {
    mf_bench_common_opts com;         // --dtype is dts below; no --max-mb, no GEMM ceiling
    mf_arg_list vocab, batch, k;      // n == 0: the backend's defaults; vocab, batch [1, 2^31), k [1, MF_TOPK_MAX]
    mf_dtype dts[3];                  // (n_dt) --dtype f32,bf16,f16: distinct (default f32)
    int n_dt;
    float scale;                      // --scale, finite and > 0 (1)
} mf_bench_topk_opts;

// minfer bench gemv [options]
typedef struct {
    mf_bench_common_opts com;         // no --dtype, --full, --max-mb or GEMM ceiling
    int m;                            // --m: one row count in [1, 8]; 0: 1, 2, 4 and 8
} mf_bench_gemv_opts;

mf_args_result mf_parse_generate_args(int argc, char **argv, mf_generate_opts *o, char err[MF_ARGS_ERR_CAP]);
mf_args_result mf_parse_score_args(int argc, char **argv, mf_score_opts *o, char err[MF_ARGS_ERR_CAP]);
void mf_score_opts_free(mf_score_opts *o); // frees ids; NULL is fine
mf_args_result mf_parse_info_args(int argc, char **argv, mf_info_opts *o, char err[MF_ARGS_ERR_CAP]);
mf_args_result mf_parse_bench_model_args(int argc, char **argv, mf_bench_model_opts *o, char err[MF_ARGS_ERR_CAP]);
mf_args_result mf_parse_bench_softmax_args(int argc, char **argv, mf_bench_softmax_opts *o,
                                           char err[MF_ARGS_ERR_CAP]);
mf_args_result mf_parse_bench_attention_args(int argc, char **argv, mf_bench_attention_opts *o,
                                             char err[MF_ARGS_ERR_CAP]);
mf_args_result mf_parse_bench_moe_args(int argc, char **argv, mf_bench_moe_opts *o, char err[MF_ARGS_ERR_CAP]);
mf_args_result mf_parse_bench_topk_args(int argc, char **argv, mf_bench_topk_opts *o, char err[MF_ARGS_ERR_CAP]);
mf_args_result mf_parse_bench_gemv_args(int argc, char **argv, mf_bench_gemv_opts *o, char err[MF_ARGS_ERR_CAP]);

#endif // MF_TOOLS_CLI_ARGS_H
