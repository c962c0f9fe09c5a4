// Internal (server): a job, one HTTP request whose answer is not made on
// the HTTP thread: a completion, between the HTTP thread that took its body
// and streams its answer, the prep worker that parses and tokenizes it, and
// the engine thread that runs it; or a /tokenize or /detokenize, answered
// by a prep worker (`reply`).
//
// Ownership: a job is counted (refs). The connection holds one reference
// until MHD's request-completed callback, a prep worker one from queueing
// until it has submitted or answered the job, the engine thread one from
// submission until none of the job's engine requests is left, a streaming
// response one until MHD frees it. Everything below `mu` is guarded by it
// unless marked otherwise; the lock order is srv->mu, then a job's mu.
#ifndef MF_SERVER_JOB_H
#define MF_SERVER_JOB_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "minfer/engine.h"
#include "server/oai_request.h"
#include "server/oai_response.h"
#include "core/sbuf.h"

struct MHD_Connection;
typedef struct mf_srv mf_srv;

typedef enum {
    MF_JOB_PREP = 0,    // its body waits for (or is with) a prep worker (prep.c)
    MF_JOB_QUEUED = 1,  // prepared and submitted, not yet seen by the engine thread
    MF_JOB_RUNNING = 2, // its engine requests were added
    MF_JOB_DONE = 3,    // every sequence finished (usage is final), or `reply` is the answer
    MF_JOB_FAILED = 4,  // refused or aborted: err says why
} mf_job_state;

// One choice (prompt p, sequence s: index p * n + s). The engine thread
// appends; a stream drains what it sent (a non-streamed job keeps it all).
typedef struct {
    mf_sbuf text;          // raw bytes not yet sent
    int32_t *tokens;       // (n_pend) tokens not yet sent (kept only when logprobs are asked)
    float *logprobs;       // (n_pend)
    int32_t *top_ids;      // (n_pend, n_top)
    float *top_logprobs;   // (n_pend, n_top)
    int64_t n_pend, cap;
    int32_t prev_token;    // the token before tokens[0]; -1: none (the prompt's last is used)
    int64_t text_offset;   // completions logprobs: characters sent so far
    int64_t n_generated;   // tokens generated in all
    mf_finish_reason finish; // MF_FINISH_NONE while it runs
    bool finish_sent, role_sent;
    double t_last;         // engine thread only: CLOCK_MONOTONIC of its latest token (0: none)
} mf_job_choice;

typedef struct mf_job {
    // ---- set by the HTTP thread before queueing, then the prep worker's ---------
    mf_srv *srv;
    int route;                 // mf_route (routes.h)
    mf_sbuf body;              // the request body (freed once parsed)
    struct mf_job *prep_next;  // the prep queue, under srv->mu
    // ---- written by the prep worker, immutable once state leaves PREP -------------
    mf_oai_request req;        // the parsed request
    int32_t n_prompts;         // engine requests (one per prompt), each with req.n sequences
    int32_t **prompt_ids;      // (n_prompts) the prompts' ids
    int64_t *n_prompt_ids;     // (n_prompts)
    int64_t max_tokens;        // resolved (default applied)
    uint64_t seed;             // resolved (random when not given)
    int32_t n_top;             // top logprobs per token (0 unless asked)
    char id[48];               // "cmpl-..." / "chatcmpl-..."
    int64_t created;           // Unix seconds
    double t_arrival;          // CLOCK_MONOTONIC when the body was complete
    // ---- engine thread only ------------------------------------------------------
    uint64_t *eng_ids;         // (n_prompts) engine request ids
    int32_t *eng_finished;     // (n_prompts) sequences finished per request
    bool *eng_live;            // (n_prompts) added and not yet released
    bool *eng_first;           // (n_prompts) its first token was seen (TTFT observed)
    int32_t n_live;            // engine requests added and not released
    bool eng_touched;          // got events this step (its connection is resumed after it)
    // ---- shared, under mu --------------------------------------------------------
    pthread_mutex_t mu;
    int refs;
    mf_job_state state;
    mf_oai_error err;          // MF_JOB_FAILED: the error for the client
    mf_oai_usage usage;        // summed as engine requests finish
    mf_job_choice *choices;    // (n_prompts * req.n)
    struct MHD_Connection *conn; // NULL once MHD completed the request
    int fd;                    // the connection's socket (-1: unknown)
    bool suspended;            // the connection is suspended (resume it to make progress)
    bool gone;                 // the client left: abort (engine thread), answer nothing
    bool streaming;            // a stream response was queued
    bool stream_ended;         // [DONE] (or the error) is in `out`
    double t_last_write;       // CLOCK_MONOTONIC of the last bytes handed to MHD (pings)
    mf_sbuf out;               // stream bytes built, not yet handed to MHD
    mf_sbuf reply;             // DONE by a prep worker (/tokenize, /detokenize): the 200 JSON body
    // ---- the server's list of live jobs, under srv->mu ------------------------------
    struct mf_job *prev, *next;
} mf_job;

// A zeroed job with one reference (the connection's), linked into srv's
// list. NULL when out of memory.
mf_job *mf_job_new(mf_srv *srv);
void mf_job_ref(mf_job *j);
// Drops a reference; the last one unlinks and frees the job.
void mf_job_unref(mf_job *j);
// Allocates the per-prompt and per-choice arrays once n_prompts and req are set.
bool mf_job_alloc_choices(mf_job *j);

// Engine thread, under j->mu: one event of choice c.
bool mf_job_choice_append(mf_job *j, mf_job_choice *c, const mf_engine_event *ev);
// Under j->mu: resumes the connection if it is suspended.
void mf_job_wake_locked(mf_job *j);
// Takes j->mu: the job fails with {status, type, msg} (a job already done
// keeps its answer) and its connection resumes to send it.
void mf_job_fail(mf_job *j, int status, const char *type, const char *msg);

// "stop" | "length" | "abort" (OpenAI's finish_reason; EOS and stop strings are both "stop").
const char *mf_job_finish_str(mf_finish_reason r);

#endif // MF_SERVER_JOB_H
