// Argument parsing of the CLI, apart from running the commands, so that it can
// be tested and fuzzed (fuzz/fuzz_cli.c): the parsers of generate, score and
// info, the model options they share with bench model, and the primitives
// every parser uses (the benches' parsers live with the benches: bench.h).
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
    bool no_graphs;                // --no-graphs: decode steps launch their ops (no CUDA Graphs)
    const char *kv_dtype;          // --kv-dtype auto|f32|f16|bf16 (NULL: auto)
    bool mmap;                     // --mmap: CPU weights in place from the file (mf_model_opts.mmap)
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
    const char *kv_dtype;  // --kv-dtype auto|f32|f16|bf16 (NULL: auto; mf_model_opts.kv_dtype)
    bool mmap;             // --mmap: CPU weights in place from the file (mf_model_opts.mmap)
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

// ---- primitives ---------------------------------------------------------------------------
// Each option helper parses value s of `flag` into *v, or formats the message
// naming flag and value ("--iters 0: not an integer in [1, 1000000]") into err.

// Formats err (control bytes shown as '?': one line) and returns MF_ARGS_BAD.
mf_args_result mf_args_bad(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool mf_args_is_help(const char *a);                    // -h or --help
bool mf_args_one_of(const char *a, const char *const *names); // names: NULL-terminated
// argv[*i + 1] as the value of flag argv[*i] (*i advanced), or "FLAG needs a value".
mf_args_result mf_args_value(int argc, char **argv, int *i, const char **v, char *err);
mf_args_result mf_args_int(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *v, char *err);
mf_args_result mf_args_int32(const char *flag, const char *s, int64_t lo, int64_t hi, int *v, char *err);
// In [lo, hi] (hi = INFINITY: no upper bound); the float one also within the float range.
mf_args_result mf_args_double(const char *flag, const char *s, double lo, double hi, double *v, char *err);
mf_args_result mf_args_float(const char *flag, const char *s, double lo, double hi, float *v, char *err);
bool mf_args_finite(const char *s, double *v); // the whole string is a finite number
// "1,4,8": up to MF_ARGS_MAX_LIST integers, each in [lo, hi].
mf_args_result mf_args_list(const char *flag, const char *s, int64_t lo, int64_t hi, mf_arg_list *l, char *err);
bool mf_args_dtype(const char *s, mf_dtype *dt);          // bf16, f16 or f32
bool mf_args_format(const char *s, mf_bench_format *f);   // table, csv or json
bool mf_args_backend_ok(const char *s);                   // auto, cpu or cuda
bool mf_args_kv_dtype_ok(const char *s);                  // auto, f32, f16 or bf16 (--kv-dtype)
// v is x, y or both: *want_x and *want_y say which ("FLAG V: not X, Y or BOTH" when none).
mf_args_result mf_args_either(const char *flag, const char *v, const char *x, const char *y, const char *both,
                              bool *want_x, bool *want_y, char *err);

// The model options: those that take a value, and those that take none.
#define MF_ARGS_MODEL_VALUED "-m", "--model", "--synthetic", "--backend", "--dtype", "--seed", "--attn", "--topk", \
                             "--kv-dtype"
#define MF_ARGS_MODEL_FLAGS "--no-graphs", "--host-argmax", "--mmap"
// Sets model option `flag` (value NULL for MF_ARGS_MODEL_FLAGS).
mf_args_result mf_args_model_set(mf_model_args *o, const char *flag, const char *value, char *err);
// A model option at argv[*i] (its value consumed): MF_ARGS_OK with *taken
// set when argv[*i] is one, or MF_ARGS_BAD.
mf_args_result mf_args_model_opt(int argc, char **argv, int *i, mf_model_args *o, bool *taken, char *err);

// ---- commands -------------------------------------------------------------------------------
mf_args_result mf_parse_generate_args(int argc, char **argv, mf_generate_opts *o, char err[MF_ARGS_ERR_CAP]);
mf_args_result mf_parse_score_args(int argc, char **argv, mf_score_opts *o, char err[MF_ARGS_ERR_CAP]);
void mf_score_opts_free(mf_score_opts *o); // frees ids; NULL is fine
mf_args_result mf_parse_info_args(int argc, char **argv, mf_info_opts *o, char err[MF_ARGS_ERR_CAP]);

#endif // MF_TOOLS_CLI_ARGS_H
