// What the commands share (tools/cli.h).
#include <stdio.h>
#include <time.h>

#include "cli.h"

int mf_cli_fail(const char *what) {
    fprintf(stderr, "minfer: error: %s%s%s\n", what ? what : "", what ? ": " : "", mf_last_error());
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
    mf_model_opts mo = {.dtype = o->dtype, .dtype_auto = o->dtype_auto, .attn = o->attn, .verbose = verbose};
    mf_status s = o->synthetic ? mf_model_synthetic(o->synthetic, o->seed, *be, &mo, m)
                               : mf_model_load(o->dir, *be, &mo, m);
    if (s != MF_OK) {
        mf_cli_fail(o->synthetic ? "synthetic model" : o->dir);
        mf_backend_free(*be);
        *be = NULL;
        return 1;
    }
    return 0;
}
