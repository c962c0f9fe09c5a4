// The prep workers: a few threads that take request bodies off the HTTP
// threads (parse, validate, chat template, tokenize: up to hundreds of ms for
// a long prompt), so a polling thread never stalls the other connections it
// serves. The HTTP thread suspends the connection and queues the job here;
// the worker runs mf_route_prepare, which submits the job to the engine
// thread or answers it and resumes the connection.
#include <stdio.h>

#include "server/oai_request.h"
#include "server/routes.h"
#include "server/server.h"

static void *prep_main(void *arg) {
    mf_srv *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->prep_head && !s->prep_stop) pthread_cond_wait(&s->prep_cv, &s->mu);
        mf_job *j = s->prep_head;
        if (j) {
            s->prep_head = j->prep_next;
            if (!s->prep_head) s->prep_tail = NULL;
            j->prep_next = NULL;
        }
        bool stop = s->prep_stop;
        pthread_mutex_unlock(&s->mu);
        if (!j) break; // stopping, and nothing is left
        if (stop) { // the engine is about to go: answer without running it
            mf_job_fail(j, 503, "service_unavailable", "the server is shutting down");
            mf_job_unref(j);
            continue;
        }
        mf_route_prepare(s, j); // drops the worker's reference
    }
    return NULL;
}

bool mf_srv_prep_start(mf_srv *s) {
    for (int i = 0; i < MF_SRV_PREP_THREADS; i++) {
        if (pthread_create(&s->prep_threads[i], NULL, prep_main, s) != 0) {
            fprintf(stderr, "minfer: error: serve: cannot start the prep threads\n");
            return false;
        }
        s->n_prep_started++;
    }
    return true;
}

void mf_srv_prep_queue(mf_srv *s, mf_job *j) {
    pthread_mutex_lock(&s->mu);
    if (s->prep_stop) { // late in a shutdown: no worker will take it
        mf_job_fail(j, 503, "service_unavailable", "the server is shutting down");
        pthread_mutex_unlock(&s->mu);
        return;
    }
    mf_job_ref(j); // the worker's
    j->prep_next = NULL;
    if (s->prep_tail) s->prep_tail->prep_next = j;
    else s->prep_head = j;
    s->prep_tail = j;
    pthread_cond_signal(&s->prep_cv);
    pthread_mutex_unlock(&s->mu);
}

void mf_srv_prep_stop(mf_srv *s) {
    pthread_mutex_lock(&s->mu);
    s->prep_stop = true;
    pthread_cond_broadcast(&s->prep_cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_prep_started; i++) pthread_join(s->prep_threads[i], NULL);
}
