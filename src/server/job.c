// Jobs: lifetime and the per-choice buffers (see job.h).
#include "server/job.h"

#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

mf_job *mf_job_new(mf_srv *srv) {
    mf_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    if (pthread_mutex_init(&j->mu, NULL) != 0) {
        free(j);
        return NULL;
    }
    j->srv = srv;
    j->refs = 1;
    j->fd = -1;
    pthread_mutex_lock(&srv->mu);
    j->next = srv->jobs;
    if (srv->jobs) srv->jobs->prev = j;
    srv->jobs = j;
    srv->n_jobs++;
    pthread_mutex_unlock(&srv->mu);
    return j;
}

void mf_job_ref(mf_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

static void job_free(mf_job *j) {
    mf_srv *s = j->srv;
    pthread_mutex_lock(&s->mu);
    if (j->prev) j->prev->next = j->next;
    else s->jobs = j->next;
    if (j->next) j->next->prev = j->prev;
    s->n_jobs--;
    pthread_mutex_unlock(&s->mu);
    int32_t n_choices = j->n_prompts * (j->req.n > 0 ? j->req.n : 1);
    for (int32_t i = 0; j->choices && i < n_choices; i++) {
        mf_job_choice *c = &j->choices[i];
        mf_sbuf_free(&c->text);
        free(c->tokens);
        free(c->logprobs);
        free(c->top_ids);
        free(c->top_logprobs);
    }
    free(j->choices);
    for (int32_t p = 0; j->prompt_ids && p < j->n_prompts; p++) free(j->prompt_ids[p]);
    free(j->prompt_ids);
    free(j->n_prompt_ids);
    free(j->eng_ids);
    free(j->eng_finished);
    free(j->eng_live);
    free(j->eng_first);
    mf_sbuf_free(&j->out);
    mf_sbuf_free(&j->reply);
    mf_sbuf_free(&j->body);
    mf_oai_request_free(&j->req);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

void mf_job_unref(mf_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left == 0) job_free(j);
}

bool mf_job_alloc_choices(mf_job *j) {
    int32_t n = j->n_prompts, nc = n * j->req.n;
    j->eng_ids = calloc((size_t)n, sizeof *j->eng_ids);
    j->eng_finished = calloc((size_t)n, sizeof *j->eng_finished);
    j->eng_live = calloc((size_t)n, sizeof *j->eng_live);
    j->eng_first = calloc((size_t)n, sizeof *j->eng_first);
    j->choices = calloc((size_t)nc, sizeof *j->choices);
    if (!j->eng_ids || !j->eng_finished || !j->eng_live || !j->eng_first || !j->choices) return false;
    for (int32_t i = 0; i < nc; i++) j->choices[i].prev_token = -1;
    return true;
}

bool mf_job_choice_append(mf_job *j, mf_job_choice *c, const mf_engine_event *ev) {
    if (ev->token >= 0) {
        c->n_generated++;
        if (j->req.logprobs) {
            if (c->n_pend == c->cap) {
                int64_t cap = c->cap ? 2 * c->cap : 16;
                int32_t k = j->n_top > 0 ? j->n_top : 1;
                int32_t *t = realloc(c->tokens, (size_t)cap * sizeof *t);
                if (t) c->tokens = t;
                float *l = realloc(c->logprobs, (size_t)cap * sizeof *l);
                if (l) c->logprobs = l;
                int32_t *ti = realloc(c->top_ids, (size_t)(cap * k) * sizeof *ti);
                if (ti) c->top_ids = ti;
                float *tl = realloc(c->top_logprobs, (size_t)(cap * k) * sizeof *tl);
                if (tl) c->top_logprobs = tl;
                if (!t || !l || !ti || !tl) return false;
                c->cap = cap;
            }
            c->tokens[c->n_pend] = ev->token;
            c->logprobs[c->n_pend] = ev->logprob;
            for (int32_t k = 0; k < j->n_top; k++) {
                bool have = k < ev->n_top;
                c->top_ids[c->n_pend * j->n_top + k] = have ? ev->top_ids[k] : ev->token;
                c->top_logprobs[c->n_pend * j->n_top + k] = have ? ev->top_logprobs[k] : ev->logprob;
            }
            c->n_pend++;
        }
    }
    if (ev->text_len) mf_sbuf_put(&c->text, ev->text, ev->text_len);
    if (ev->finish != MF_FINISH_NONE) c->finish = ev->finish;
    return !c->text.oom;
}

void mf_job_wake_locked(mf_job *j) {
    if (j->suspended && j->conn) {
        j->suspended = false;
        MHD_resume_connection(j->conn);
    }
}

void mf_job_fail(mf_job *j, int status, const char *type, const char *msg) {
    pthread_mutex_lock(&j->mu);
    if (j->state != MF_JOB_DONE) {
        j->state = MF_JOB_FAILED;
        mf_oai_error_set(&j->err, status, type, NULL, "%s", msg);
    }
    mf_job_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
}

const char *mf_job_finish_str(mf_finish_reason r) {
    switch (r) {
    case MF_FINISH_EOS:
    case MF_FINISH_STOP: return "stop";
    case MF_FINISH_LENGTH: return "length";
    case MF_FINISH_ABORT: return "abort";
    default: return NULL;
    }
}
