// `minfer serve`: start, load, serve until a signal, drain, stop (see server.h).
#include "server/server.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "minfer/minfer.h"
#include "server/chat_prompt.h"
#include "server/http.h"

double mf_srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t mf_srv_random_seed(mf_srv *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t v = splitmix(&s->seed_state);
    pthread_mutex_unlock(&s->mu);
    return v;
}

bool mf_srv_submit(mf_srv *s, mf_job *j) {
    pthread_mutex_lock(&s->mu);
    if (s->n_inbox == s->cap_inbox) {
        int32_t cap = s->cap_inbox ? 2 * s->cap_inbox : 64;
        mf_job **p = realloc(s->inbox, (size_t)cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&s->mu);
            return false;
        }
        s->inbox = p;
        s->cap_inbox = cap;
    }
    mf_job_ref(j); // the engine thread's
    s->inbox[s->n_inbox++] = j;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return true;
}

void mf_srv_poke(mf_srv *s) {
    pthread_mutex_lock(&s->mu);
    s->wake = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void mf_srv_count_error(mf_srv *s) {
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.http_errors++;
    pthread_mutex_unlock(&s->metrics.mu);
}

// Whether the peer of a suspended connection closed it (MHD does not look
// while a connection is suspended). A pipelined request waiting there is
// data, not a close.
static bool peer_closed(int fd) {
    if (fd < 0) return false;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

// The main thread's tick: suspended connections whose client left are
// resumed (to be closed) and their jobs aborted; idle streams are resumed
// for a ping.
static void tick(mf_srv *s) {
    double now = mf_srv_now();
    bool poke = false;
    pthread_mutex_lock(&s->mu);
    for (mf_job *j = s->jobs; j; j = j->next) {
        pthread_mutex_lock(&j->mu);
        if (j->suspended && j->conn) {
            bool left = peer_closed(j->fd);
            if (left) {
                j->gone = true;
                poke |= j->state == MF_JOB_QUEUED || j->state == MF_JOB_RUNNING;
            }
            if (left || (j->streaming && now - j->t_last_write >= s->opts->ping_interval)) mf_job_wake_locked(j);
        }
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_unlock(&s->mu);
    if (poke) mf_srv_poke(s);
}

// Waits up to `seconds` for SIGINT/SIGTERM (blocked in every thread).
static bool wait_signal(const sigset_t *set, double seconds, int *sig) {
    struct timespec ts = {.tv_sec = (time_t)seconds, .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
    int r = sigtimedwait(set, NULL, &ts);
    if (r > 0) *sig = r;
    return r > 0;
}

static bool load(mf_srv *s) {
    const mf_srv_opts *o = s->opts;
    if (mf_backend_init(o->backend, &s->be) != MF_OK) {
        fprintf(stderr, "minfer: error: serve: backend: %s\n", mf_last_error());
        return false;
    }
    mf_model_opts mo = {.dtype = o->dtype, .dtype_auto = o->dtype_auto, .verbose = true, .mmap = o->mmap};
    if (mf_model_load(o->dir, s->be, &mo, &s->model) != MF_OK) {
        fprintf(stderr, "minfer: error: serve: %s: %s\n", o->dir, mf_last_error());
        return false;
    }
    mf_model_info info;
    if (mf_model_get_info(s->model, &info) != MF_OK) {
        fprintf(stderr, "minfer: error: serve: model info: %s\n", mf_last_error());
        return false;
    }
    s->tok = mf_model_tokenizer(s->model);
    s->vocab = info.vocab;
    bool hard = false;
    if (!mf_srv_chat_load(s, o->chat_template, &hard)) {
        if (hard) {
            fprintf(stderr, "minfer: error: serve: --chat-template %s: %s\n", o->chat_template, s->chat_error);
            return false;
        }
        fprintf(stderr, "minfer serve: no chat template (%s): /v1/chat/completions will refuse requests\n", s->chat_error);
    }
    mf_engine_opts eo = {.kv_blocks = o->kv_blocks,
                         .kv_bytes = (int64_t)(o->kv_mem_gb * 1073741824.0),
                         .block_size = o->block_size,
                         .max_batched_tokens = o->max_batched_tokens,
                         .max_seqs = o->max_seqs,
                         .max_model_len = o->max_model_len,
                         .no_prefix_cache = o->no_prefix_cache};
    if (mf_engine_create(s->model, &eo, &s->engine) != MF_OK) {
        fprintf(stderr, "minfer: error: serve: engine: %s\n", mf_last_error());
        return false;
    }
    mf_engine_stats st;
    if (mf_engine_get_stats(s->engine, &st) != MF_OK) {
        fprintf(stderr, "minfer: error: serve: engine stats: %s\n", mf_last_error());
        return false;
    }
    s->max_model_len = st.max_model_len;
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.kv_blocks = st.kv_blocks;
    s->metrics.block_size = st.block_size;
    pthread_mutex_unlock(&s->metrics.mu);
    fprintf(stderr,
            "minfer serve: model %s (%s, %s, %.1f M parameters); KV pool %lld blocks x %d tokens (%.1f MiB); "
            "max_model_len %lld, max_seqs %d, max_batched_tokens %lld\n",
            o->served_name, info.arch, info.backend, (double)info.n_params / 1e6, (long long)st.kv_blocks,
            (int)st.block_size, (double)st.kv_bytes / 1048576.0, (long long)st.max_model_len, (int)st.max_seqs,
            (long long)st.max_batched_tokens);
    return true;
}

// The model loads on a thread of its own, so that the main thread can take
// SIGINT/SIGTERM meanwhile: a large checkpoint takes seconds to copy, and a
// Ctrl-C must not wait for it.
typedef struct {
    mf_srv *s;
    bool ok;
    atomic_bool done;
} srv_loader;

static void *load_main(void *p) {
    srv_loader *l = p;
    l->ok = load(l->s);
    atomic_store(&l->done, true);
    return NULL;
}

int mf_server_run(const mf_srv_opts *o) {
    static mf_srv srv; // one server per process: signals are process-wide
    mf_srv *s = &srv;
    memset(s, 0, sizeof *s);
    s->opts = o;
    atomic_store(&s->state, MF_SRV_LOADING);
    s->created = (int64_t)time(NULL);
    s->seed_state = (uint64_t)time(NULL) * 0x2545F4914F6CDD1Dull ^ (uint64_t)getpid() ^ (uint64_t)(uintptr_t)s;
    s->id_salt = splitmix(&s->seed_state);
    if (!mf_metrics_init(&s->metrics, o->served_name) || pthread_mutex_init(&s->mu, NULL) != 0 ||
        pthread_cond_init(&s->cv, NULL) != 0 || pthread_cond_init(&s->prep_cv, NULL) != 0) {
        fprintf(stderr, "minfer: error: serve: cannot create locks\n");
        return 1;
    }
    // SIGINT/SIGTERM go to sigtimedwait below only: blocked before any thread starts.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    if (!mf_srv_http_start(s)) goto out;
    fprintf(stderr, "minfer serve: listening on http://%s:%d (loading %s)\n", o->host, s->port, o->dir);
    srv_loader ld = {.s = s};
    atomic_init(&ld.done, false);
    pthread_t loader;
    if (pthread_create(&loader, NULL, load_main, &ld) != 0) {
        fprintf(stderr, "minfer: error: serve: cannot start the loading thread\n");
        goto out;
    }
    int sig = 0;
    while (!atomic_load(&ld.done))
        if (wait_signal(&sigs, 0.05, &sig)) {
            // Nothing is in flight (every route answers 503 while loading), and
            // the load cannot be interrupted: stop listening and leave now.
            fprintf(stderr, "minfer serve: %s while loading %s: stopped\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                    o->dir);
            mf_srv_http_stop(s);
            _exit(0);
        }
    pthread_join(loader, NULL);
    if (!ld.ok) goto out;
    if (pthread_create(&s->engine_thread, NULL, mf_srv_engine_main, s) != 0) {
        fprintf(stderr, "minfer: error: serve: cannot start the engine thread\n");
        goto out;
    }
    s->engine_started = true;
    if (!mf_srv_prep_start(s)) goto out;
    atomic_store(&s->state, MF_SRV_READY);
    fprintf(stderr, "minfer serve: ready on http://%s:%d (model %s)\n", o->host, s->port, o->served_name);

    while (!wait_signal(&sigs, 0.25, &sig)) tick(s);

    // Drain: stop accepting, let in-flight requests finish until the deadline.
    atomic_store(&s->state, MF_SRV_DRAINING);
    int lfd = MHD_quiesce_daemon(s->daemon);
    if (lfd >= 0) close(lfd);
    double deadline = mf_srv_now() + o->shutdown_timeout;
    pthread_mutex_lock(&s->mu);
    int64_t n_jobs = s->n_jobs;
    s->drain_deadline = deadline;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    fprintf(stderr, "minfer serve: %s: stopping; %lld request(s) in flight get %g s to finish (again: stop now)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", (long long)n_jobs, o->shutdown_timeout);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        n_jobs = s->n_jobs;
        pthread_mutex_unlock(&s->mu);
        if (n_jobs == 0 || mf_srv_now() > deadline + 5.0) break; // the deadline aborts; 5 s more to write the errors
        if (wait_signal(&sigs, 0.1, &sig)) { // a second signal: abort now
            pthread_mutex_lock(&s->mu);
            s->drain_deadline = deadline = mf_srv_now();
            pthread_cond_signal(&s->cv);
            pthread_mutex_unlock(&s->mu);
        }
        tick(s);
    }
    rc = 0;
out:
    mf_srv_prep_stop(s); // before the engine thread: a worker may still submit
    if (s->engine_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        if (s->drain_deadline == 0) s->drain_deadline = mf_srv_now();
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->engine_thread, NULL);
    }
    // MHD may not be stopped with suspended connections: resume them (their clients get nothing more).
    pthread_mutex_lock(&s->mu);
    for (mf_job *j = s->jobs; j; j = j->next) {
        pthread_mutex_lock(&j->mu);
        if (j->suspended && j->conn) {
            j->gone = true;
            mf_job_wake_locked(j);
        }
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_unlock(&s->mu);
    mf_srv_http_stop(s);
    mf_engine_free(s->engine);
    mf_srv_chat_free(s);
    mf_model_free(s->model);
    mf_backend_free(s->be);
    if (s->n_jobs != 0) fprintf(stderr, "minfer serve: %lld job(s) left at exit (a bug)\n", (long long)s->n_jobs);
    free(s->inbox);
    mf_metrics_free(&s->metrics);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->prep_cv);
    pthread_mutex_destroy(&s->mu);
    if (rc == 0) fprintf(stderr, "minfer serve: stopped\n");
    return rc;
}
