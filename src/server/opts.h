// Internal (server): `minfer serve` options, parsed apart from running them
// (tested in tests/test_server.c; no library calls).
#ifndef MF_SERVER_OPTS_H
#define MF_SERVER_OPTS_H

#include <stdbool.h>
#include <stdint.h>

#include "minfer/tensor.h"

enum {
    MF_SRV_MAX_KEYS = 16,    // --api-key values
    MF_SRV_ERR_CAP = 320,    // bytes of an option error, NUL included
};

typedef enum { MF_SRV_OPTS_OK = 0, MF_SRV_OPTS_HELP = 1, MF_SRV_OPTS_BAD = 2 } mf_srv_opts_result;

typedef struct {
    const char *dir;                       // -m / --model DIR (required)
    const char *served_name;               // --served-model-name (default: DIR as given, as vLLM does)
    const char *host;                      // --host (127.0.0.1)
    int32_t port;                          // --port [0, 65535] (8000; 0: a free port, printed)
    const char *api_keys[MF_SRV_MAX_KEYS]; // (n_api_keys) --api-key KEY, repeatable (none: no key needed)
    int32_t n_api_keys;
    double kv_mem_gb;                      // --kv-mem GB (0: the engine's default)
    int64_t kv_blocks;                     // --kv-blocks N (0: from --kv-mem); not with --kv-mem
    int64_t max_batched_tokens;            // --max-batched-tokens N (0: the engine's default)
    int32_t max_seqs;                      // --max-seqs N (0: the engine's default)
    int64_t max_model_len;                 // --max-model-len N (0: the engine's default)
    int32_t block_size;                    // --block-size N (0: the engine's default)
    bool no_prefix_cache;                  // --no-prefix-cache
    int64_t max_queue;                     // --max-queue N: engine requests waiting at most, else 429 (1024)
    const char *backend;                   // --backend auto|cpu|cuda (auto)
    mf_dtype dtype;                        // --dtype bf16|f16|f32 (valid when !dtype_auto)
    bool dtype_auto;                       // --dtype auto (the default)
    bool mmap;                             // --mmap: CPU weights in place from the file (mf_model_opts.mmap)
    const char *chat_template;             // --chat-template NAME (NULL: the checkpoint's)
    int64_t max_body;                      // --max-body-mb MB -> bytes (8 MiB); larger bodies: 413
    double shutdown_timeout;               // --shutdown-timeout S: SIGINT/SIGTERM lets requests finish this long (30)
    double ping_interval;                  // --ping-interval S: SSE comment pings when a stream is idle (5)
    int32_t http_threads;                  // --http-threads N [1, 256]: MHD's thread pool (4; 1: one polling thread)
} mf_srv_opts;

// argv: the arguments after "serve". Strings point into argv. BAD: err names
// the flag and value (one line, no prefix).
mf_srv_opts_result mf_srv_opts_parse(int argc, char **argv, mf_srv_opts *o, char err[MF_SRV_ERR_CAP]);

// The --help text.
const char *mf_srv_opts_help(void);

#endif // MF_SERVER_OPTS_H
