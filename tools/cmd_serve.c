// minfer serve -m DIR [options]: the OpenAI-compatible HTTP server
// (src/server/; options: src/server/opts.c, minfer serve --help).
// Exit status: 0 after SIGINT/SIGTERM and a clean stop, 1 when it cannot
// start, 2 for a bad option.
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "server/opts.h"
#include "server/server.h"

int mf_cmd_serve(int argc, char **argv) {
    mf_srv_opts o;
    char err[MF_SRV_ERR_CAP];
    mf_srv_opts_result r = mf_srv_opts_parse(argc, argv, &o, err);
    if (r == MF_SRV_OPTS_HELP) {
        fputs(mf_srv_opts_help(), stdout);
        return 0;
    }
    if (r != MF_SRV_OPTS_OK) {
        fprintf(stderr, "minfer: error: serve: %s\n", err);
        return 2;
    }
    // As vLLM's VLLM_API_KEY: a key from the environment keeps it out of `ps`.
    const char *key = getenv("MINFER_API_KEY");
    if (key && *key && o.n_api_keys < MF_SRV_MAX_KEYS) o.api_keys[o.n_api_keys++] = key;
    return mf_server_run(&o);
}
