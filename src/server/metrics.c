// Prometheus metrics with vLLM's names (see metrics.h).
#include "server/metrics.h"

#include <string.h>

// vLLM's bucket bounds (vllm/v1/metrics/loggers.py), so dashboards made
// for it read ours the same.
static const double k_ttft_le[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                   1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double k_itl_le[] = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,  0.4, 0.5,
                                  0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double k_e2e_le[] = {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                  30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

bool mf_metrics_init(mf_metrics *m, const char *model) {
    memset(m, 0, sizeof *m);
    if (pthread_mutex_init(&m->mu, NULL) != 0) return false;
    // Label values escape \, " and newline.
    size_t w = 0;
    for (const char *p = model ? model : ""; *p && w + 3 < sizeof m->model_label; p++) {
        if (*p == '\\' || *p == '"') {
            m->model_label[w++] = '\\';
            m->model_label[w++] = *p;
        } else if (*p == '\n') {
            m->model_label[w++] = '\\';
            m->model_label[w++] = 'n';
        } else {
            m->model_label[w++] = *p;
        }
    }
    m->model_label[w] = '\0';
    m->ttft = (mf_metrics_hist){.le = k_ttft_le, .n_le = N_OF(k_ttft_le)};
    m->itl = (mf_metrics_hist){.le = k_itl_le, .n_le = N_OF(k_itl_le)};
    m->e2e = (mf_metrics_hist){.le = k_e2e_le, .n_le = N_OF(k_e2e_le)};
    return true;
}

void mf_metrics_free(mf_metrics *m) { pthread_mutex_destroy(&m->mu); }

void mf_metrics_hist_observe(mf_metrics_hist *h, double v) {
    int i = 0;
    while (i < h->n_le && v > h->le[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

static void head(mf_sbuf *b, const char *name, const char *type, const char *help) {
    mf_sbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(mf_sbuf *b, const mf_metrics *m, const char *name, const char *help, double v) {
    head(b, name, "gauge", help);
    mf_sbuf_printf(b, "%s{model_name=\"%s\"} %.17g\n", name, m->model_label, v);
}

// A counter named NAME_total (the exposition's convention; vLLM's names end so).
static void counter(mf_sbuf *b, const mf_metrics *m, const char *name, const char *help, int64_t v) {
    head(b, name, "counter", help);
    mf_sbuf_printf(b, "%s{model_name=\"%s\"} %lld\n", name, m->model_label, (long long)v);
}

static void hist(mf_sbuf *b, const mf_metrics *m, const char *name, const char *help, const mf_metrics_hist *h) {
    head(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i <= h->n_le; i++) {
        cum += h->counts[i];
        if (i < h->n_le)
            mf_sbuf_printf(b, "%s_bucket{le=\"%g\",model_name=\"%s\"} %llu\n", name, h->le[i], m->model_label,
                           (unsigned long long)cum);
        else
            mf_sbuf_printf(b, "%s_bucket{le=\"+Inf\",model_name=\"%s\"} %llu\n", name, m->model_label,
                           (unsigned long long)cum);
    }
    mf_sbuf_printf(b, "%s_sum{model_name=\"%s\"} %.17g\n", name, m->model_label, h->sum);
    mf_sbuf_printf(b, "%s_count{model_name=\"%s\"} %llu\n", name, m->model_label, (unsigned long long)h->count);
}

void mf_metrics_render(mf_metrics *m, mf_sbuf *b) {
    pthread_mutex_lock(&m->mu);
    double usage = m->kv_blocks > 0 ? (double)m->kv_blocks_used / (double)m->kv_blocks : 0.0;
    gauge(b, m, "vllm:num_requests_running", "Number of requests in model execution batches.", (double)m->running);
    gauge(b, m, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", (double)m->waiting);
    gauge(b, m, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage);
    gauge(b, m, "vllm:gpu_cache_usage_perc",
          "KV-cache usage. 1 means 100 percent usage (the older name, which routers still read).", usage);
    gauge(b, m, "minfer:kv_cache_blocks", "KV-cache blocks in the pool.", (double)m->kv_blocks);
    gauge(b, m, "minfer:kv_cache_blocks_used", "KV-cache blocks held by running sequences.", (double)m->kv_blocks_used);
    gauge(b, m, "minfer:kv_cache_blocks_cached", "Free KV-cache blocks holding a cached prefix.",
          (double)m->kv_blocks_cached);
    counter(b, m, "vllm:prompt_tokens_total", "Number of prefill tokens processed.", m->prompt_tokens);
    counter(b, m, "vllm:generation_tokens_total", "Number of generation tokens processed.", m->generation_tokens);
    counter(b, m, "vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.", m->prefix_queries);
    counter(b, m, "vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
            m->prefix_hits);
    counter(b, m, "vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", m->preemptions);
    head(b, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
    static const char *const reasons[MF_METRICS_FINISH_COUNT] = {"stop", "length", "abort"};
    for (int i = 0; i < MF_METRICS_FINISH_COUNT; i++)
        mf_sbuf_printf(b, "vllm:request_success_total{finished_reason=\"%s\",model_name=\"%s\"} %lld\n", reasons[i],
                       m->model_label, (long long)m->finished[i]);
    counter(b, m, "minfer:http_errors_total", "HTTP responses with a 4xx or 5xx status.", m->http_errors);
    hist(b, m, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", &m->ttft);
    hist(b, m, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", &m->itl);
    hist(b, m, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", &m->e2e);
    pthread_mutex_unlock(&m->mu);
}
