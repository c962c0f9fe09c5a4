// Internal (server): a job's answer as bytes: the SSE stream a reader pulls,
// and the whole JSON body of a non-streamed job.
#ifndef MF_SERVER_STREAM_H
#define MF_SERVER_STREAM_H

#include <stddef.h>
#include <sys/types.h>

#include "server/job.h"
#include "server/oai_response.h"
#include "core/sbuf.h"

// MHD's content reader for a streamed job: copies up to max bytes of SSE
// into buf; with nothing to send it suspends the connection and returns 0
// (the engine thread or the ticker resumes it). -1 at the end of the
// stream, -2 when the client left.
ssize_t mf_stream_read(mf_job *j, char *buf, size_t max);

// The body of a finished (MF_JOB_DONE) non-streamed job.
void mf_stream_final_json(mf_job *j, mf_sbuf *out);

// Token texts for logprobs: decode(prev, id) minus decode(prev) with the
// server's tokenizer (user: the mf_tokenizer).
void mf_srv_token_piece(void *tok, int32_t prev, int32_t id, mf_sbuf *out);

#endif // MF_SERVER_STREAM_H
