// A job's answer: SSE chunks as the engine produces tokens, or one JSON body.
#include "server/stream.h"

#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#include "minfer/tokenizer.h"
#include "server/server.h"

void mf_srv_token_piece(void *user, int32_t prev, int32_t id, mf_sbuf *out) {
    const mf_tokenizer *tok = user;
    if (!tok) {
        mf_sbuf_printf(out, "token_id:%d", (int)id); // no tokenizer: vLLM's spelling of ids
        return;
    }
    int32_t ids[2] = {prev, id};
    char *both = NULL, *one = NULL;
    size_t n_both = 0, n_one = 0;
    if (prev >= 0 && mf_tokenizer_decode(tok, ids, 2, &both, &n_both) == MF_OK &&
        mf_tokenizer_decode(tok, ids, 1, &one, &n_one) == MF_OK && n_one <= n_both && !memcmp(both, one, n_one)) {
        mf_sbuf_put(out, both + n_one, n_both - n_one);
    } else {
        mf_tokenizer_free_buffer(both);
        both = NULL;
        if (mf_tokenizer_decode(tok, &id, 1, &both, &n_both) == MF_OK) mf_sbuf_put(out, both, n_both);
    }
    mf_tokenizer_free_buffer(both);
    mf_tokenizer_free_buffer(one);
}

static mf_oai_head head_of(mf_job *j) {
    return (mf_oai_head){.kind = j->req.kind, .id = j->id, .model = j->srv->opts->served_name, .created = j->created,
                         .logprobs = j->req.logprobs};
}

// The token before a choice's first pending one: its previous token, else the prompt's last.
static int32_t context_token(const mf_job *j, int32_t i, const mf_job_choice *c) {
    if (c->prev_token >= 0) return c->prev_token;
    int32_t p = i / j->req.n;
    return j->n_prompt_ids[p] > 0 ? j->prompt_ids[p][j->n_prompt_ids[p] - 1] : -1;
}

static mf_oai_choice choice_of(mf_job *j, int32_t i) {
    mf_job_choice *c = &j->choices[i];
    return (mf_oai_choice){.index = i,
                           .text = c->text.p,
                           .text_len = c->text.len,
                           .tokens = c->tokens,
                           .n_tokens = c->n_pend,
                           .logprobs = c->logprobs,
                           .top_ids = c->top_ids,
                           .top_logprobs = c->top_logprobs,
                           .n_top = j->n_top,
                           .prev_token = context_token(j, i, c),
                           .text_offset = &c->text_offset,
                           .finish = mf_job_finish_str(c->finish)};
}

// Under j->mu: what the stream can say now goes into j->out.
static void build(mf_job *j) {
    mf_srv *s = j->srv;
    mf_oai_head h = head_of(j);
    mf_oai_tokstr ts = {mf_srv_token_piece, (void *)s->tok};
    bool chat = j->req.kind == MF_OAI_CHAT;
    int32_t n_choices = j->n_prompts * j->req.n;
    bool all_sent = true;
    for (int32_t i = 0; i < n_choices; i++) {
        mf_job_choice *c = &j->choices[i];
        bool role = chat && !c->role_sent;
        bool fin = c->finish != MF_FINISH_NONE && !c->finish_sent;
        if (role || c->text.len || c->n_pend || fin) {
            mf_oai_choice oc = choice_of(j, i);
            oc.role = role;
            if (!fin) oc.finish = NULL;
            mf_oai_chunk_sse(&j->out, &h, &oc, 1, j->req.include_usage, &ts);
            c->role_sent = true;
            c->finish_sent |= fin;
            if (c->n_pend) c->prev_token = c->tokens[c->n_pend - 1];
            c->n_pend = 0;
            c->text.len = 0;
        }
        all_sent &= c->finish_sent;
    }
    if (j->state == MF_JOB_FAILED) {
        mf_oai_error_sse(&j->out, &j->err);
        mf_oai_done_sse(&j->out);
        j->stream_ended = true;
    } else if (j->state == MF_JOB_DONE && all_sent) {
        if (j->req.include_usage) mf_oai_usage_sse(&j->out, &h, &j->usage);
        mf_oai_done_sse(&j->out);
        j->stream_ended = true;
    } else if (j->out.len == 0 && mf_srv_now() - j->t_last_write >= s->opts->ping_interval) {
        mf_sbuf_puts(&j->out, ": ping\n\n"); // an SSE comment: clients ignore it; a dead client fails the write
    }
}

ssize_t mf_stream_read(mf_job *j, char *buf, size_t max) {
    pthread_mutex_lock(&j->mu);
    ssize_t rc;
    for (;;) {
        if (j->gone || !j->conn || j->out.oom) {
            rc = MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
        if (j->out.len) {
            size_t n = j->out.len < max ? j->out.len : max;
            memcpy(buf, j->out.p, n);
            mf_sbuf_consume(&j->out, n);
            j->t_last_write = mf_srv_now();
            rc = (ssize_t)n;
            break;
        }
        if (j->stream_ended) {
            rc = MHD_CONTENT_READER_END_OF_STREAM;
            break;
        }
        build(j);
        if (j->out.len) continue;
        j->suspended = true; // the engine thread (new events) or the ticker (a ping) resumes it
        MHD_suspend_connection(j->conn);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

void mf_stream_final_json(mf_job *j, mf_sbuf *out) {
    mf_oai_head h = head_of(j);
    mf_oai_tokstr ts = {mf_srv_token_piece, (void *)j->srv->tok};
    int32_t n = j->n_prompts * j->req.n;
    mf_oai_choice *cs = calloc((size_t)n, sizeof *cs);
    if (!cs) {
        out->oom = true;
        return;
    }
    for (int32_t i = 0; i < n; i++) cs[i] = choice_of(j, i);
    mf_oai_response_json(out, &h, cs, n, &j->usage, &ts);
    free(cs);
}
