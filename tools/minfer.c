// minfer: the command-line tool. Subcommands arrive with later issues.
#include <stdio.h>
#include <string.h>

#include "minfer/minfer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: minfer <command> [options]\n"
            "\n"
            "commands:\n"
            "  info        backends and build information\n"
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

int main(int argc, char **argv) {
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
    if (!strcmp(cmd, "info")) return cmd_info();
    fprintf(stderr, "minfer: error: unknown command '%s' (see minfer --help)\n", cmd);
    return 2;
}
