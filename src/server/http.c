// The HTTP layer on libmicrohttpd: a pool of --http-threads internal
// polling threads (epoll; each connection stays on one of them), connections
// suspended while their job waits for the engine, the request-completed
// callback to notice a client that left. The handlers run on several threads
// at once: what they share is locked or read-only (docs/notes/server.md).
#include "server/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server/auth.h"
#include "server/oai_response.h"
#include "server/routes.h"
#include "server/stream.h"

// One HTTP request on a connection (MHD's req_cls).
typedef struct {
    mf_route route;
    bool headers_done;    // the first call (headers) is behind us
    bool too_big;         // the body passed --max-body-mb (answered 413 at the end)
    mf_sbuf body;
    mf_job *job;          // the connection's reference to its job
} request;

enum MHD_Result mf_http_reply(mf_srv *s, struct MHD_Connection *conn, unsigned status, const char *content_type,
                              const char *body, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status >= 400) mf_srv_count_error(s);
    enum MHD_Result rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

enum MHD_Result mf_http_reply_error(mf_srv *s, struct MHD_Connection *conn, const mf_oai_error *err) {
    mf_sbuf b = {0};
    mf_oai_error_json(&b, err);
    enum MHD_Result rc = b.oom ? MHD_NO : mf_http_reply(s, conn, (unsigned)err->status, "application/json", b.p, b.len);
    mf_sbuf_free(&b);
    return rc;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    return mf_stream_read((mf_job *)cls, buf, max);
}

static void stream_free(void *cls) { mf_job_unref((mf_job *)cls); }

enum MHD_Result mf_http_reply_stream(mf_srv *s, struct MHD_Connection *conn, mf_job *j) {
    (void)s;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, j, stream_free);
    if (!r) return MHD_NO;
    mf_job_ref(j); // the response's, dropped by stream_free
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    enum MHD_Result rc = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **req_cls) {
    (void)version;
    mf_srv *s = cls;
    request *q = *req_cls;
    if (!q) { // headers: route, key and size are known before the body comes
        q = calloc(1, sizeof *q);
        if (!q) return MHD_NO;
        *req_cls = q;
        mf_oai_error err = {0};
        if (!mf_route_match(method, url, &q->route, &err)) return mf_http_reply_error(s, conn, &err);
        if (mf_route_needs_key(q->route) &&
            !mf_srv_auth_ok(s->opts, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION))) {
            mf_oai_error_set(&err, 401, "authentication_error", NULL,
                             "missing or wrong API key: send 'Authorization: Bearer KEY'");
            return mf_http_reply_error(s, conn, &err);
        }
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(cl, &end, 10);
            if (end != cl && !*end && !errno && n > (unsigned long long)s->opts->max_body) {
                mf_oai_error_set(&err, 413, "invalid_request_error", NULL,
                                 "request body: %llu bytes, more than --max-body-mb allows (%lld bytes)", n,
                                 (long long)s->opts->max_body);
                return mf_http_reply_error(s, conn, &err);
            }
        }
        return MHD_YES;
    }
    if (*upload_data_size) { // a piece of the body
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (!q->too_big && q->body.len + n > (size_t)s->opts->max_body) { // chunked uploads have no Content-Length
            q->too_big = true;
            mf_sbuf_free(&q->body);
        }
        if (!q->too_big) {
            mf_sbuf_put(&q->body, upload_data, n);
            if (q->body.oom) return MHD_NO;
        }
        return MHD_YES;
    }
    if (q->job) return mf_route_continue(s, conn, q->job); // resumed
    if (q->too_big) {
        mf_oai_error err;
        mf_oai_error_set(&err, 413, "invalid_request_error", NULL, "request body: more than --max-body-mb allows (%lld bytes)",
                         (long long)s->opts->max_body);
        return mf_http_reply_error(s, conn, &err);
    }
    return mf_route_handle(s, conn, q->route, &q->body, &q->job);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls, enum MHD_RequestTerminationCode toe) {
    (void)conn;
    (void)toe;
    mf_srv *s = cls;
    request *q = *req_cls;
    if (!q) return;
    if (q->job) {
        mf_job *j = q->job;
        pthread_mutex_lock(&j->mu);
        j->conn = NULL;
        j->suspended = false;
        bool engine = j->state == MF_JOB_QUEUED || j->state == MF_JOB_RUNNING;
        if (engine || j->state == MF_JOB_PREP) j->gone = true; // the connection ended before the answer: nobody wants it
        pthread_mutex_unlock(&j->mu);
        if (engine) mf_srv_poke(s); // a PREP job is dropped by its prep worker
        mf_job_unref(j);
    }
    mf_sbuf_free(&q->body);
    free(q);
    *req_cls = NULL;
}

static void log_mhd(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    fprintf(stderr, "minfer serve: http: ");
    vfprintf(stderr, fmt, ap);
}

bool mf_srv_http_start(mf_srv *s) {
    const mf_srv_opts *o = s->opts;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", (int)o->port);
    int gai = getaddrinfo(o->host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        fprintf(stderr, "minfer: error: serve: --host %s: %s\n", o->host, gai_strerror(gai));
        return false;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    // MHD pools threads from 2 up; 1 is its single polling thread, as before the pool.
    unsigned pool = o->http_threads > 1 ? (unsigned)o->http_threads : 0;
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,                       //
                                 MHD_OPTION_EXTERNAL_LOGGER, log_mhd, NULL,                   // first, or MHD warns
                                 MHD_OPTION_THREAD_POOL_SIZE, pool,                           //
                                 MHD_OPTION_SOCK_ADDR, ai->ai_addr,                           //
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,                //
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,                // idle keep-alive
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)4096,                 // split among the pool
                                 MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        fprintf(stderr, "minfer: error: serve: cannot listen on %s port %d (in use, or not an address here?)\n", o->host,
                (int)o->port);
        return false;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? (int)info->port : o->port;
    return true;
}

void mf_srv_http_stop(mf_srv *s) {
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}
