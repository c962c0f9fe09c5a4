// Internal (server): the MHD glue the routes use to answer.
#ifndef MF_SERVER_HTTP_H
#define MF_SERVER_HTTP_H

#include <microhttpd.h>
#include <stddef.h>

#include "server/oai_request.h"
#include "server/server.h"

// Queues a response with a copy of body[0 .. len).
enum MHD_Result mf_http_reply(mf_srv *s, struct MHD_Connection *conn, unsigned status, const char *content_type,
                              const char *body, size_t len);
// Queues OpenAI's error JSON with err->status (401 adds WWW-Authenticate).
enum MHD_Result mf_http_reply_error(mf_srv *s, struct MHD_Connection *conn, const mf_oai_error *err);
// Queues a server-sent-events response that reads j's stream (stream.c);
// the response holds a reference to j.
enum MHD_Result mf_http_reply_stream(mf_srv *s, struct MHD_Connection *conn, mf_job *j);

#endif // MF_SERVER_HTTP_H
