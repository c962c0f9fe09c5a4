// minfer: the command-line tool. Subcommands arrive with later issues.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cmd_generate.h"
#include "cmd_model.h"
#include "minfer/minfer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: minfer <command> [options]\n"
            "\n"
            "commands:\n"
            "  generate    generate text from a prompt, streamed to stdout (minfer generate --help)\n"
            "  info        backends and build information; with -m DIR: a model's architecture and memory plan\n"
            "  score       per-token NLL and perplexity of a text (minfer score --help)\n"
            "  bench [op]  benchmarks (ops: softmax, attention, moe; none named: softmax); minfer bench OP --help\n"
            "  bench model the end-to-end model benchmark and per-op profile (minfer bench model --help)\n"
            "  bench gemm-host  host microseconds per GEMM call (CUDA: plan cache off vs on)\n"
            "  bench gemv  decode GEMMs (m = 1..8): cuBLASLt vs our gemv kernel, GB/s and %% of copy bandwidth\n"
            "  bench topk  device top-k / top-p candidates (mf_topk) per row of logits: us, GB/s, bytes to the host\n"
            "\n"
            "options:\n"
            "  -h, --help     this help\n"
            "  -V, --version  print the version\n");
}

static int cmd_info(void) {
    printf("minfer %s\n", mf_version());
    printf("build: %s\n", mf_build_info());
    mf_backend *be = NULL;
    mf_status s = mf_backend_init("auto", &be);
    if (s != MF_OK) {
        fprintf(stderr, "minfer: error: %s\n", mf_last_error());
        return 1;
    }
    printf("backend: %s (cuda device %s)\n", mf_backend_name(be), mf_cuda_available() ? "available" : "not available");
    mf_backend_free(be);
    return 0;
}

// minfer bench [op] [options]: no op name (only options) runs every op's benchmark.
static int cmd_bench(int argc, char **argv) {
    if (argc > 0 && argv[0][0] != '-') {
        if (!strcmp(argv[0], "softmax")) return mf_bench_softmax_main(argc - 1, argv + 1);
        if (!strcmp(argv[0], "attention")) return mf_bench_attention_main(argc - 1, argv + 1);
        if (!strcmp(argv[0], "moe")) return mf_bench_moe_main(argc - 1, argv + 1);
        if (!strcmp(argv[0], "model")) return mf_bench_model_main(argc - 1, argv + 1);
        if (!strcmp(argv[0], "gemm-host")) return mf_bench_gemm_host_main(argc - 1, argv + 1);
        if (!strcmp(argv[0], "gemv")) return mf_bench_gemv_main(argc - 1, argv + 1);
        if (!strcmp(argv[0], "topk")) return mf_bench_topk_main(argc - 1, argv + 1);
        fprintf(stderr, "minfer: error: unknown benchmark '%s' (ops: softmax, attention, moe, model, gemm-host, gemv, topk)\n",
                argv[0]);
        return 2;
    }
    return mf_bench_softmax_main(argc, argv);
}

int main(int argc, char **argv) {
    // libgomp reads OMP_WAIT_POLICY when it is loaded, before main. Its default
    // spin-waiting fights OpenBLAS's own threads for the cores and made CPU
    // decode steps 5-15x slower on a 2-core machine (docs/notes/model.md); so
    // unless the user chose a policy, start again with PASSIVE. Not under
    // valgrind, whose /proc/self/exe is the tool itself (it preloads vgpreload_*).
    const char *preload = getenv("LD_PRELOAD");
    if (!getenv("OMP_WAIT_POLICY") && !(preload && strstr(preload, "vgpreload")) &&
        setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0)
        execv("/proc/self/exe", argv); // on failure: carry on with the default policy
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
        printf("minfer %s\n", mf_version());
        return 0;
    }
    if (!strcmp(cmd, "info")) return argc > 2 ? mf_cmd_model_info(argc - 2, argv + 2) : cmd_info();
    if (!strcmp(cmd, "generate")) return mf_cmd_generate(argc - 2, argv + 2);
    if (!strcmp(cmd, "score")) return mf_cmd_score(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 2, argv + 2);
    fprintf(stderr, "minfer: error: unknown command '%s' (see minfer --help)\n", cmd);
    return 2;
}
