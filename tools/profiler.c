// The per-op profiler of `minfer bench model --profile` (tools/profiler.h).
// The session brackets every op with begin/end. On the CPU (synchronous ops)
// the wall clock between them is the op's time; on CUDA a pair of events is
// recorded on the backend's stream around the launch and read after the step
// (the time between the events includes any launch gap the GPU waited for).
#include <stdlib.h>
#include <string.h>

#ifdef MF_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "cli.h"
#include "profiler.h"

enum { kMaxProfEntries = 96, kMaxEventPairs = 16384 };

typedef struct {
    const char *op, *what;
    double us;
    int64_t calls;
} prof_entry;

struct mf_profiler {
    bool cuda;
    void *stream;
    prof_entry e[kMaxProfEntries];
    int n, cur;
    double t0;
    int64_t dropped;
#ifdef MF_HAVE_CUDA
    cudaEvent_t *ev;   // 2 * kMaxEventPairs
    int *ev_entry;     // entry of each pair
    int n_pairs;
#endif
};

static int prof_entry_of(mf_profiler *p, const char *op, const char *what) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->e[i].op, op) && !strcmp(p->e[i].what, what)) return i;
    if (p->n == kMaxProfEntries) return -1;
    p->e[p->n] = (prof_entry){op, what, 0, 0};
    return p->n++;
}

static void prof_begin(void *u, const char *op, const char *what) {
    mf_profiler *p = u;
    p->cur = prof_entry_of(p, op, what);
#ifdef MF_HAVE_CUDA
    if (p->cuda) {
        if (p->cur >= 0 && p->n_pairs < kMaxEventPairs)
            cudaEventRecord(p->ev[2 * p->n_pairs], (cudaStream_t)p->stream);
        return;
    }
#endif
    p->t0 = mf_cli_now();
}

static void prof_end(void *u, const char *op, const char *what) {
    mf_profiler *p = u;
    (void)op, (void)what;
    if (p->cur < 0) {
        p->dropped++;
        return;
    }
#ifdef MF_HAVE_CUDA
    if (p->cuda) {
        if (p->n_pairs < kMaxEventPairs) {
            cudaEventRecord(p->ev[2 * p->n_pairs + 1], (cudaStream_t)p->stream);
            p->ev_entry[p->n_pairs++] = p->cur;
        } else {
            p->dropped++;
        }
        return;
    }
#endif
    p->e[p->cur].us += 1e6 * (mf_cli_now() - p->t0);
    p->e[p->cur].calls++;
}

// After a forward call returned (it synchronises): reads the events.
static void prof_collect(mf_profiler *p) {
#ifdef MF_HAVE_CUDA
    if (!p->cuda) return;
    cudaStreamSynchronize((cudaStream_t)p->stream);
    for (int i = 0; i < p->n_pairs; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, p->ev[2 * i], p->ev[2 * i + 1]) == cudaSuccess) {
            p->e[p->ev_entry[i]].us += 1e3 * ms;
            p->e[p->ev_entry[i]].calls++;
        }
    }
    p->n_pairs = 0;
#else
    (void)p;
#endif
}

mf_profiler *mf_profiler_new(bool cuda, void *stream) {
    mf_profiler *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->cuda = cuda, p->stream = stream;
#ifdef MF_HAVE_CUDA
    if (cuda) {
        p->ev = calloc(2 * kMaxEventPairs, sizeof *p->ev);
        p->ev_entry = calloc(kMaxEventPairs, sizeof *p->ev_entry);
        bool ok = p->ev && p->ev_entry;
        for (int i = 0; ok && i < 2 * kMaxEventPairs; i++) ok = cudaEventCreate(&p->ev[i]) == cudaSuccess;
        if (!ok) {
            mf_profiler_free(p);
            return NULL;
        }
    }
#endif
    return p;
}

void mf_profiler_free(mf_profiler *p) {
    if (!p) return;
#ifdef MF_HAVE_CUDA
    if (p->ev)
        for (int i = 0; i < 2 * kMaxEventPairs; i++)
            if (p->ev[i]) cudaEventDestroy(p->ev[i]);
    free(p->ev);
    free(p->ev_entry);
#endif
    free(p);
}

mf_session_profiler mf_profiler_hook(mf_profiler *p) {
    return (mf_session_profiler){.begin = prof_begin, .end = prof_end, .user = p};
}

void mf_profiler_reset(mf_profiler *p) {
    p->n = 0, p->dropped = 0;
#ifdef MF_HAVE_CUDA
    p->n_pairs = 0;
#endif
}

static int cmp_entry(const void *a, const void *b) {
    const double x = ((const prof_entry *)a)->us, y = ((const prof_entry *)b)->us;
    return x < y ? 1 : x > y ? -1 : 0;
}

// One row: id, phase, name, calls (< 0: "-", and no time per call), ms, % of
// the ops' time, us per call, kind, then the stamp.
static void add_row(mf_bench_table *t, const char *id, const char *phase, const char *name, int64_t calls, double us,
                    double pct, const char *kind, const char *const stamp[3]) {
    char c[4][32];
    snprintf(c[0], 32, "%lld", (long long)calls);
    snprintf(c[1], 32, "%.3f", us / 1e3);
    snprintf(c[2], 32, "%.1f", pct);
    snprintf(c[3], 32, "%.2f", calls > 0 ? us / (double)calls : 0.0);
    if (calls < 0) snprintf(c[0], 32, "-"), snprintf(c[3], 32, "-");
    const char *cells[11] = {id, phase, name, c[0], c[1], c[2], c[3], kind, stamp[0], stamp[1], stamp[2]};
    mf_bench_table_add(t, cells);
}

int64_t mf_profiler_rows(mf_profiler *p, const char *phase, double wall_us, mf_bench_table *t, const char *bench_id,
                         const char *const stamp[3]) {
    prof_collect(p);
    qsort(p->e, (size_t)p->n, sizeof p->e[0], cmp_entry);
    double sum = 0;
    for (int i = 0; i < p->n; i++) sum += p->e[i].us;
    char name[64];
    for (int i = 0; i < p->n; i++) {
        snprintf(name, sizeof name, "%s:%s", p->e[i].op, p->e[i].what);
        add_row(t, bench_id, phase, name, p->e[i].calls, p->e[i].us, 100.0 * p->e[i].us / sum, "op", stamp);
    }
    // families
    const char *fam[16];
    double fus[16] = {0};
    int64_t fcalls[16] = {0};
    int nf = 0;
    for (int i = 0; i < p->n; i++) {
        int f = 0;
        while (f < nf && strcmp(fam[f], p->e[i].op)) f++;
        if (f == nf && nf < 16) fam[nf++] = p->e[i].op;
        if (f < 16) fus[f] += p->e[i].us, fcalls[f] += p->e[i].calls;
    }
    for (int f = 0; f < nf; f++) {
        snprintf(name, sizeof name, "%s (all)", fam[f]);
        add_row(t, bench_id, phase, name, fcalls[f], fus[f], 100.0 * fus[f] / sum, "family", stamp);
    }
    snprintf(name, sizeof name, "ops total (outside: %.3f ms of %.3f ms wall)", (wall_us - sum) / 1e3, wall_us / 1e3);
    add_row(t, bench_id, phase, name, -1, sum, 100.0, "total", stamp);
    return p->dropped;
}
