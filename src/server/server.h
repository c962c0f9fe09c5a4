// `minfer serve`: an OpenAI-compatible HTTP server over the serving engine.
//
// Threads (docs/notes/server.md):
//   - MHD's polling threads (--http-threads, a pool; a connection stays on
//     one): HTTP, building responses; they never touch the engine nor do
//     heavy work: a completion, /tokenize or /detokenize body becomes a job
//     for a prep worker and its connection is suspended. Streams are
//     responses whose reader suspends the connection while there is nothing
//     to send. They share only what is under mu, a job's mu, metrics.mu, or
//     read-only after READY.
//   - the prep workers (prep.c, MF_SRV_PREP_THREADS): parse, validate, chat
//     template, tokenize; submit the job to the engine thread, or store the
//     answer (or error) in the job and resume its connection.
//   - the engine thread (engine_loop.c): the only caller of mf_engine_*; it
//     takes submitted jobs, steps, appends each event to its job and resumes
//     the job's connection.
//   - the main thread: loads the model, then waits for SIGINT/SIGTERM and
//     ticks: SSE pings, noticing clients that left while suspended.
#ifndef MF_SERVER_SERVER_H
#define MF_SERVER_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "minfer/engine.h"
#include "minfer/model.h"
#include "server/job.h"
#include "server/metrics.h"
#include "server/opts.h"

struct MHD_Daemon;

// Prep workers: enough that one long prompt does not hold up the others;
// tokenizing is single-threaded, and the engine thread wants a core.
#define MF_SRV_PREP_THREADS 2

typedef enum {
    MF_SRV_LOADING = 0,  // /health 503, completions 503
    MF_SRV_READY = 1,
    MF_SRV_DRAINING = 2, // a signal came: new requests 503, in-flight ones finish
} mf_srv_state;

struct mf_srv {
    const mf_srv_opts *opts;
    _Atomic int state;            // mf_srv_state
    struct MHD_Daemon *daemon;
    int port;                     // the port bound
    mf_metrics metrics;
    int64_t created;              // Unix seconds at start (/v1/models)
    // ---- set before READY, then read-only ------------------------------------------
    mf_backend *be;
    mf_model *model;
    const mf_tokenizer *tok;      // NULL: the model has none (token prompts only)
    struct mf_chat_template *chat; // the chat template (NULL: chat completions refused)
    char chat_error[256];         // why there is none
    mf_engine *engine;            // driven by the engine thread only
    int64_t max_model_len;
    int64_t vocab;
    // ---- under mu -------------------------------------------------------------------
    pthread_mutex_t mu;
    pthread_cond_t cv;            // the engine thread waits here for work
    mf_job *jobs;                 // every live job (job.h's prev/next)
    int64_t n_jobs;
    mf_job **inbox;               // (n_inbox) submitted jobs the engine thread has not taken
    int32_t n_inbox, cap_inbox;
    bool wake;                    // something for the engine thread (a client left, a deadline)
    bool stop;                    // the engine thread ends once it holds no job
    double drain_deadline;        // > 0: draining; jobs still running then are aborted
    uint64_t next_id;             // request ids
    uint64_t id_salt;
    uint64_t seed_state;          // seeds for requests without one
    pthread_t engine_thread;
    bool engine_started;
    pthread_cond_t prep_cv;       // the prep workers wait here for jobs
    mf_job *prep_head, *prep_tail; // jobs queued for a prep worker (job.h's prep_next), FIFO
    bool prep_stop;               // the prep workers fail what is queued and end
    pthread_t prep_threads[MF_SRV_PREP_THREADS];
    int n_prep_started;
};

// Runs the server until SIGINT/SIGTERM (blocking). Returns the exit status
// (0 after a clean shutdown; 1 when it cannot start, with a message on stderr).
int mf_server_run(const mf_srv_opts *opts);

// ---- between the pieces ---------------------------------------------------------------
double mf_srv_now(void);                  // CLOCK_MONOTONIC seconds
bool mf_srv_submit(mf_srv *s, mf_job *j); // queues j for the engine thread (takes the engine's reference)
void mf_srv_poke(mf_srv *s);              // wakes the engine thread (a client left)
uint64_t mf_srv_random_seed(mf_srv *s);
void mf_srv_count_error(mf_srv *s);       // a 4xx/5xx response (metrics)

// prep.c
bool mf_srv_prep_start(mf_srv *s);        // false with a message on stderr (those started are stopped by _stop)
void mf_srv_prep_queue(mf_srv *s, mf_job *j); // takes a reference to j for the worker
void mf_srv_prep_stop(mf_srv *s);         // fails (503) what is still queued, joins the workers

// engine_loop.c
void *mf_srv_engine_main(void *srv);

// http.c
bool mf_srv_http_start(mf_srv *s);        // binds and starts MHD; false with a message on stderr
void mf_srv_http_stop(mf_srv *s);

#endif // MF_SERVER_SERVER_H
