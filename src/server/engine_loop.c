// The engine thread: the one caller of mf_engine_*. It admits submitted
// jobs, runs steps, hands each event to its job and resumes the job's
// connection, aborts the requests of clients that left, and at shutdown
// aborts what is still running when the deadline passes.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "minfer/status.h"
#include "server/server.h"

typedef struct {
    uint64_t id;   // engine request
    mf_job *job;
    int32_t p;     // its prompt
} entry;

typedef struct {
    mf_srv *s;
    mf_job **live;   // (n_live) jobs this thread holds a reference to
    int32_t n_live, cap_live;
    entry *ents;     // (n_ents) engine requests added and not released
    int32_t n_ents, cap_ents;
    int fails;       // consecutive failed steps
} loop;

static bool push_live(loop *L, mf_job *j) {
    if (L->n_live == L->cap_live) {
        int32_t cap = L->cap_live ? 2 * L->cap_live : 64;
        mf_job **p = realloc(L->live, (size_t)cap * sizeof *p);
        if (!p) return false;
        L->live = p;
        L->cap_live = cap;
    }
    L->live[L->n_live++] = j;
    return true;
}

static bool push_entry(loop *L, uint64_t id, mf_job *j, int32_t p) {
    if (L->n_ents == L->cap_ents) {
        int32_t cap = L->cap_ents ? 2 * L->cap_ents : 128;
        entry *e = realloc(L->ents, (size_t)cap * sizeof *e);
        if (!e) return false;
        L->ents = e;
        L->cap_ents = cap;
    }
    L->ents[L->n_ents++] = (entry){id, j, p};
    return true;
}

static entry *find_entry(loop *L, uint64_t id) {
    for (int32_t i = 0; i < L->n_ents; i++)
        if (L->ents[i].id == id) return &L->ents[i];
    return NULL;
}

static void drop_entry(loop *L, uint64_t id) {
    for (int32_t i = 0; i < L->n_ents; i++)
        if (L->ents[i].id == id) {
            L->ents[i] = L->ents[--L->n_ents];
            return;
        }
}

// Releases the engine's reference to j (it leaves `live`).
static void drop_job(loop *L, mf_job *j) {
    for (int32_t i = 0; i < L->n_live; i++)
        if (L->live[i] == j) {
            L->live[i] = L->live[--L->n_live];
            break;
        }
    mf_job_unref(j);
}

// Ends what j still runs in the engine (abort + release), counting its unfinished sequences as aborted.
static void abort_requests(loop *L, mf_job *j) {
    mf_srv *s = L->s;
    int64_t aborted = 0;
    for (int32_t p = 0; p < j->n_prompts; p++) {
        if (!j->eng_live[p]) continue;
        if (mf_engine_abort(s->engine, j->eng_ids[p]) != MF_OK)
            fprintf(stderr, "minfer serve: abort of request %llu: %s\n", (unsigned long long)j->eng_ids[p], mf_last_error());
        if (mf_engine_release(s->engine, j->eng_ids[p]) != MF_OK)
            fprintf(stderr, "minfer serve: release of request %llu: %s\n", (unsigned long long)j->eng_ids[p],
                    mf_last_error());
        aborted += j->req.n - j->eng_finished[p];
        j->eng_live[p] = false;
        j->n_live--;
        drop_entry(L, j->eng_ids[p]);
    }
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.finished[MF_METRICS_FINISH_ABORT] += aborted;
    pthread_mutex_unlock(&s->metrics.mu);
}

// Fails j: its engine requests end, the client gets the error (a status
// before a stream starts, an error event after), the engine lets go of it.
static void fail_job(loop *L, mf_job *j, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void fail_job(loop *L, mf_job *j, int status, const char *type, const char *fmt, ...) {
    abort_requests(L, j);
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mf_job_fail(j, status, type, msg);
    drop_job(L, j);
}

// A submitted job: its prompts become engine requests, or it is refused.
static void admit(loop *L, mf_job *j) {
    mf_srv *s = L->s;
    if (!push_live(L, j)) {
        mf_job_fail(j, 500, "internal_error", "out of memory admitting the request");
        mf_job_unref(j);
        return;
    }
    pthread_mutex_lock(&j->mu);
    bool gone = j->gone;
    pthread_mutex_unlock(&j->mu);
    if (gone) { // the client left while it was queued
        fail_job(L, j, 499, "client_closed_request", "the client closed the connection");
        return;
    }
    if (atomic_load(&s->state) != MF_SRV_READY) {
        fail_job(L, j, 503, "service_unavailable", "the server is shutting down");
        return;
    }
    mf_engine_stats st;
    if (mf_engine_get_stats(s->engine, &st) == MF_OK && st.n_waiting + j->n_prompts > s->opts->max_queue) {
        fail_job(L, j, 429, "rate_limit_error", "too many requests waiting: %d queued, %d more would pass --max-queue %lld",
                 (int)st.n_waiting, (int)j->n_prompts, (long long)s->opts->max_queue);
        return;
    }
    const mf_oai_request *r = &j->req;
    for (int32_t p = 0; p < j->n_prompts; p++) {
        mf_request_params rp = {
            .prompt = j->prompt_ids[p],
            .n_prompt = j->n_prompt_ids[p],
            .max_tokens = j->max_tokens,
            .n = r->n,
            .sampler = {.temperature = (float)r->temperature,
                        .top_k = r->top_k,
                        .top_p = (float)r->top_p,
                        .min_p = (float)r->min_p,
                        .repetition_penalty = (float)r->repetition_penalty,
                        .seed = j->seed},
            .stop = (const char *const *)r->stop,
            .n_stop = r->n_stop,
            .stop_ids = r->stop_ids,
            .n_stop_ids = r->n_stop_ids,
            .ignore_eos = r->ignore_eos,
            .logprobs = r->logprobs,
            .top_logprobs = j->n_top,
            .no_text = s->tok == NULL,
        };
        uint64_t id = 0;
        mf_status rc = mf_engine_add_request(s->engine, &rp, &id);
        if (rc == MF_OK && !push_entry(L, id, j, p)) {
            mf_engine_abort(s->engine, id);
            mf_engine_release(s->engine, id);
            rc = MF_ERR_OOM;
        }
        if (rc != MF_OK) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", rc == MF_ERR_OOM && !mf_last_error()[0] ? "out of memory" : mf_last_error());
            if (rc == MF_ERR_INVALID_ARG)
                fail_job(L, j, 400, "invalid_request_error", "%s%s", j->n_prompts > 1 ? "a prompt: " : "", msg);
            else
                fail_job(L, j, rc == MF_ERR_OOM ? 503 : 500, "internal_error", "the engine refused the request: %s", msg);
            return;
        }
        j->eng_ids[p] = id;
        j->eng_live[p] = true;
        j->n_live++;
    }
    int64_t prompt_tokens = 0;
    for (int32_t p = 0; p < j->n_prompts; p++) prompt_tokens += j->n_prompt_ids[p];
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.prompt_tokens += prompt_tokens;
    pthread_mutex_unlock(&s->metrics.mu);
    pthread_mutex_lock(&j->mu);
    j->state = MF_JOB_RUNNING;
    j->usage.prompt_tokens = prompt_tokens;
    mf_job_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
}

// Every sequence of request (j, p) finished: its usage, then release.
// True when it was j's last: the engine let go of j (it may be freed).
static bool finish_request(loop *L, mf_job *j, int32_t p) {
    mf_srv *s = L->s;
    uint64_t id = j->eng_ids[p];
    mf_request_info info = {0};
    bool have = mf_engine_request_info(s->engine, id, &info) == MF_OK;
    if (mf_engine_release(s->engine, id) != MF_OK)
        fprintf(stderr, "minfer serve: release of request %llu: %s\n", (unsigned long long)id, mf_last_error());
    drop_entry(L, id);
    j->eng_live[p] = false;
    j->n_live--;
    double now = mf_srv_now();
    pthread_mutex_lock(&s->metrics.mu);
    mf_metrics_hist_observe(&s->metrics.e2e, now - j->t_arrival);
    s->metrics.prefix_queries += j->n_prompt_ids[p];
    if (have) s->metrics.prefix_hits += info.n_cached;
    pthread_mutex_unlock(&s->metrics.mu);
    pthread_mutex_lock(&j->mu);
    if (have) j->usage.cached_tokens += info.n_cached;
    for (int32_t q = 0; q < j->req.n; q++) j->usage.completion_tokens += j->choices[p * j->req.n + q].n_generated;
    bool done = j->n_live == 0;
    if (done) j->state = MF_JOB_DONE;
    mf_job_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
    if (done) drop_job(L, j);
    return done;
}

static void update_gauges(mf_srv *s) {
    mf_engine_stats st;
    if (mf_engine_get_stats(s->engine, &st) != MF_OK) return;
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.running = st.n_running;
    s->metrics.waiting = st.n_waiting;
    s->metrics.kv_blocks = st.kv_blocks;
    s->metrics.kv_blocks_used = st.kv_blocks_used;
    s->metrics.kv_blocks_cached = st.kv_blocks_cached;
    s->metrics.block_size = st.block_size;
    s->metrics.preemptions = st.preemptions;
    pthread_mutex_unlock(&s->metrics.mu);
}

// One step and its events.
static void step(loop *L) {
    mf_srv *s = L->s;
    // A failing step still fills *res: a sequence that could not be sampled
    // ends with an abort event (the other rows went on); a failure of the
    // whole step has no events and changed nothing.
    mf_engine_step_result res = {0};
    if (mf_engine_step(s->engine, &res) != MF_OK) {
        fprintf(stderr, "minfer serve: engine step failed: %s\n", mf_last_error());
        if (res.n_events == 0) {
            nanosleep(&(struct timespec){.tv_nsec = 50 * 1000 * 1000}, NULL); // not a hot loop while it fails
            if (++L->fails >= 3) {
                char msg[300];
                snprintf(msg, sizeof msg, "%s", mf_last_error());
                while (L->n_live > 0)
                    fail_job(L, L->live[0], 500, "internal_error", "the engine failed 3 steps in a row: %s", msg);
                L->fails = 0;
            }
            return;
        }
    }
    L->fails = 0;
    double now = mf_srv_now();
    mf_metrics *m = &s->metrics;
    pthread_mutex_lock(&m->mu);
    for (int32_t i = 0; i < res.n_events; i++) {
        const mf_engine_event *ev = &res.events[i];
        entry *e = find_entry(L, ev->id);
        if (!e || ev->seq < 0 || ev->seq >= e->job->req.n) continue;
        mf_job *j = e->job;
        int32_t p = e->p;
        mf_job_choice *c = &j->choices[p * j->req.n + ev->seq];
        pthread_mutex_lock(&j->mu);
        bool ok = mf_job_choice_append(j, c, ev);
        pthread_mutex_unlock(&j->mu);
        if (!ok) fprintf(stderr, "minfer serve: out of memory keeping the output of %s\n", j->id);
        if (ev->token >= 0) {
            m->generation_tokens++;
            if (!j->eng_first[p]) {
                j->eng_first[p] = true;
                mf_metrics_hist_observe(&m->ttft, now - j->t_arrival);
            }
            if (c->t_last > 0) mf_metrics_hist_observe(&m->itl, now - c->t_last);
            c->t_last = now;
        }
        if (ev->finish != MF_FINISH_NONE) {
            m->finished[ev->finish == MF_FINISH_LENGTH  ? MF_METRICS_FINISH_LENGTH
                        : ev->finish == MF_FINISH_ABORT ? MF_METRICS_FINISH_ABORT
                                                        : MF_METRICS_FINISH_STOP]++;
            j->eng_finished[p]++;
        }
        j->eng_touched = true;
    }
    pthread_mutex_unlock(&m->mu);
    update_gauges(s); // before any client hears of this step
    // Requests whose sequences all finished are released now, after the
    // events (a release invalidates their pointers); streams are woken.
    // Backwards: finish_request may drop a job, moving the last one here.
    for (int32_t i = L->n_live - 1; i >= 0; i--) {
        mf_job *j = L->live[i];
        if (!j->eng_touched) continue;
        j->eng_touched = false;
        bool dropped = false;
        for (int32_t p = 0; !dropped && p < j->n_prompts; p++) // j may be freed once dropped
            if (j->eng_live[p] && j->eng_finished[p] >= j->req.n) dropped = finish_request(L, j, p);
        if (dropped || !j->req.stream) continue; // a non-streamed answer waits for DONE
        pthread_mutex_lock(&j->mu);
        mf_job_wake_locked(j);
        pthread_mutex_unlock(&j->mu);
    }
}

void *mf_srv_engine_main(void *arg) {
    mf_srv *s = arg;
    loop L = {.s = s};
    bool busy = false;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!busy && s->n_inbox == 0 && !s->wake && !s->stop) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 250 * 1000 * 1000; // a deadline is checked at least this often
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
            if (s->drain_deadline > 0) break;
        }
        mf_job *in[64];
        int32_t n_in = s->n_inbox < 64 ? s->n_inbox : 64;
        if (n_in > 0) { // inbox is NULL until the first submit (woken by a poke or the drain before any)
            memcpy(in, s->inbox, (size_t)n_in * sizeof *in);
            memmove(s->inbox, s->inbox + n_in, (size_t)(s->n_inbox - n_in) * sizeof *in);
            s->n_inbox -= n_in;
        }
        s->wake = false;
        bool stop = s->stop;
        double deadline = s->drain_deadline;
        pthread_mutex_unlock(&s->mu);

        for (int32_t i = 0; i < n_in; i++) admit(&L, in[i]);
        // Clients that left: their requests end now and free their blocks.
        for (int32_t i = 0; i < L.n_live;) {
            mf_job *j = L.live[i];
            pthread_mutex_lock(&j->mu);
            bool gone = j->gone;
            pthread_mutex_unlock(&j->mu);
            if (gone)
                fail_job(&L, j, 499, "client_closed_request", "the client closed the connection"); // drops j from live
            else
                i++;
        }
        if (deadline > 0 && mf_srv_now() >= deadline)
            while (L.n_live > 0)
                fail_job(&L, L.live[0], 503, "service_unavailable",
                         "the server is shutting down: the request did not finish within --shutdown-timeout %g s",
                         s->opts->shutdown_timeout);
        if (stop && L.n_live == 0) {
            pthread_mutex_lock(&s->mu);
            bool more = s->n_inbox > 0;
            pthread_mutex_unlock(&s->mu);
            if (!more) break;
        }
        mf_engine_stats st;
        busy = mf_engine_get_stats(s->engine, &st) == MF_OK && st.n_running + st.n_waiting > 0;
        if (busy) step(&L);
        update_gauges(s);
    }
    free(L.live);
    free(L.ents);
    return NULL;
}
