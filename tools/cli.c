// What the commands share (tools/cli.h).
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "cli.h"

int mf_cli_parsed(mf_args_result r, const char *cmd, const char *err, void (*help)(FILE *f)) {
    if (r == MF_ARGS_OK) return -1;
    if (r == MF_ARGS_HELP) {
        help(stdout);
        return 0;
    }
    fprintf(stderr, "minfer: error: %s: %s\n", cmd, err);
    return 2;
}

int mf_cli_fail(const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    fprintf(stderr, "minfer: error: %s: %s\n", what, mf_last_error());
    return 1;
}

double mf_cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int mf_cli_open_model(const mf_model_args *o, bool verbose, mf_backend **be, mf_model **m) {
    *be = NULL, *m = NULL;
    if (mf_backend_init(o->backend ? o->backend : "auto", be) != MF_OK) return mf_cli_fail("backend");
    mf_model_opts mo = {.dtype = o->dtype, .dtype_auto = o->dtype_auto, .attn = o->attn, .verbose = verbose,
                        .kv_dtype = o->kv_dtype, .mmap = o->mmap};
    mf_status s = o->synthetic ? mf_model_synthetic(o->synthetic, o->seed, *be, &mo, m)
                               : mf_model_load(o->dir, *be, &mo, m);
    if (s != MF_OK) {
        mf_cli_fail("%s", o->synthetic ? "synthetic model" : o->dir);
        mf_backend_free(*be);
        *be = NULL;
        return 1;
    }
    return 0;
}
