// Internal (server): Prometheus metrics under vLLM's names.
//
// Routers that balance vLLM replicas (the Gateway API Inference Extension,
// llm-d, Envoy AI Gateway) read vllm:num_requests_waiting,
// vllm:num_requests_running and the KV-cache usage gauge; exporting the same
// names (labelled model_name, as vLLM does) lets them balance minfer
// replicas unchanged. The engine thread writes (one mutex), GET /metrics reads.
#ifndef MF_SERVER_METRICS_H
#define MF_SERVER_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/sbuf.h"

enum { MF_METRICS_MAX_BUCKETS = 24 };

typedef struct {
    const double *le;                            // (n_le) upper bounds, ascending (+Inf implied)
    int n_le;
    uint64_t counts[MF_METRICS_MAX_BUCKETS + 1]; // (n_le + 1) per bucket, not cumulative; last: above every bound
    double sum;
    uint64_t count;
} mf_metrics_hist;

typedef enum {
    MF_METRICS_FINISH_STOP = 0,   // EOS, a stop string or stop token
    MF_METRICS_FINISH_LENGTH = 1, // max_tokens or the context
    MF_METRICS_FINISH_ABORT = 2,  // the client left, or shutdown
    MF_METRICS_FINISH_COUNT = 3,
} mf_metrics_finish;

typedef struct {
    pthread_mutex_t mu;
    char model_label[256];        // the model name, escaped for a label value
    // gauges: the engine's state after its latest step
    int64_t running, waiting;     // engine requests (one per prompt of an HTTP request)
    int64_t kv_blocks, kv_blocks_used, kv_blocks_cached;
    int64_t block_size;
    // counters
    int64_t prompt_tokens;        // prompt tokens of accepted requests (cached ones included)
    int64_t generation_tokens;
    int64_t prefix_queries;       // prompt tokens looked up in the prefix cache (of finished requests)
    int64_t prefix_hits;          //   and found there
    int64_t preemptions;
    int64_t finished[MF_METRICS_FINISH_COUNT];
    int64_t http_errors;          // responses with a 4xx/5xx status
    mf_metrics_hist ttft;         // seconds from arrival to the first token (per request)
    mf_metrics_hist itl;          // seconds between consecutive tokens of a sequence
    mf_metrics_hist e2e;          // seconds from arrival to the end (per request)
} mf_metrics;

// model: the served name (escaped here). Returns false when the mutex cannot be made.
bool mf_metrics_init(mf_metrics *m, const char *model);
void mf_metrics_free(mf_metrics *m);

void mf_metrics_hist_observe(mf_metrics_hist *h, double v); // no lock: the caller holds m->mu

// Appends the exposition (text format 0.0.4) to b.
void mf_metrics_render(mf_metrics *m, mf_sbuf *b);

#endif // MF_SERVER_METRICS_H
