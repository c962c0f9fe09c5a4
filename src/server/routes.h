// Internal (server): the routes: which URL is which, and what each does
// with a complete request.
#ifndef MF_SERVER_ROUTES_H
#define MF_SERVER_ROUTES_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/sbuf.h"
#include "server/oai_request.h"
#include "server/server.h"

typedef enum {
    MF_ROUTE_HEALTH,      // GET /health (no key)
    MF_ROUTE_METRICS,     // GET /metrics (no key)
    MF_ROUTE_VERSION,     // GET /version (no key)
    MF_ROUTE_MODELS,      // GET /v1/models
    MF_ROUTE_COMPLETIONS, // POST /v1/completions
    MF_ROUTE_CHAT,        // POST /v1/chat/completions
    MF_ROUTE_TOKENIZE,    // POST /tokenize
    MF_ROUTE_DETOKENIZE,  // POST /detokenize
} mf_route;

// The route of (method, url); false: *err is 404 (no such route) or 405.
bool mf_route_match(const char *method, const char *url, mf_route *route, mf_oai_error *err);
// Whether the route needs an API key (when the server has any).
bool mf_route_needs_key(mf_route r);

// HTTP thread, a complete request: either answers at once, or (completions,
// /tokenize, /detokenize) makes a job that takes over *body, queues it for a
// prep worker, suspends the connection and sets *job (the connection's reference).
enum MHD_Result mf_route_handle(mf_srv *s, struct MHD_Connection *conn, mf_route r, mf_sbuf *body, mf_job **job);
// HTTP thread: the connection of a queued job was resumed: answer, stream, or suspend again.
enum MHD_Result mf_route_continue(mf_srv *s, struct MHD_Connection *conn, mf_job *j);
// Prep worker: parses and tokenizes j's body, then submits j to the engine
// thread (a completion) or stores the answer or error in j and resumes its
// connection. Drops the worker's reference to j.
void mf_route_prepare(mf_srv *s, mf_job *j);

#endif // MF_SERVER_ROUTES_H
