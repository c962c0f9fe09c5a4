// minfer: the command-line tool. Each command is a row of the table below
// (tools/cli.h); `minfer --help` lists them and the benchmarks (bench.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

static const struct {
    const char *name, *about;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"generate", "generate text from a prompt, streamed to stdout", mf_cmd_generate},
    {"score", "per-token NLL and perplexity of a text", mf_cmd_score},
    {"info", "backends and build information; with -m DIR: a model's architecture and memory plan", mf_cmd_info},
    {"serve", "an OpenAI-compatible HTTP server (streaming, chat, metrics)", mf_cmd_serve},
    {"bench", "benchmarks (no NAME: softmax; minfer bench --help):", mf_cmd_bench},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void usage(FILE *f) {
    fprintf(f, "usage: minfer <command> [options]   (minfer <command> --help: its options)\n\ncommands:\n");
    for (int c = 0; c < N_COMMANDS; c++)
        fprintf(f, "  %-17s %s\n", strcmp(commands[c].name, "bench") ? commands[c].name : "bench [NAME]",
                commands[c].about);
    mf_bench_list(f);
    fprintf(f, "\noptions:\n"
               "  -h, --help     this help\n"
               "  -V, --version  print the version\n");
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
    for (int c = 0; c < N_COMMANDS; c++)
        if (!strcmp(cmd, commands[c].name)) return commands[c].run(argc - 2, argv + 2);
    fprintf(stderr, "minfer: error: unknown command '%s' (see minfer --help)\n", cmd);
    return 2;
}
