/* The HTTP side of `emb serve`, on libmicrohttpd: a pool of worker threads, each with its
 * own event loop (epoll), so that slow or idle clients hold a connection slot but no
 * thread; limits on connections, idle time, header and body size; the page's files; and a
 * clean stop on SIGTERM or SIGINT that lets the requests in flight finish. */
#include "assets.h"
#include "serve.h"

#include <microhttpd.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    serve_ctx *ctx;
    const serve_options *o;
    atomic_long inflight; /* requests received whose reply is not yet sent */
    atomic_long open;     /* connections open */
    atomic_bool draining;
} server;

/* One request: its body as it arrives. */
typedef struct {
    char *body;
    size_t len, cap;
    bool replied;     /* a reply (413) was queued before the body was read */
    size_t discarded; /* bytes of a body over the limit, read and dropped */
} request;

static enum MHD_Result send_reply(server *s, struct MHD_Connection *c, unsigned status,
                                  const char *type, void *body, size_t len,
                                  enum MHD_ResponseMemoryMode mode, const char *allow) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, mode);
    if (!resp) {
        if (mode == MHD_RESPMEM_MUST_FREE) free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    if (allow) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    if (s->o->cors) MHD_add_response_header(resp, "Access-Control-Allow-Origin", s->o->cors);
    if (atomic_load(&s->draining))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result send_json(server *s, struct MHD_Connection *c, serve_reply *r) {
    if (!r->body) {
        serve_error(r, 500, "out of memory");
        if (!r->body) return MHD_NO;
    }
    return send_reply(s, c, r->status, "application/json", r->body, r->len, MHD_RESPMEM_MUST_FREE,
                      r->allow);
}

static enum MHD_Result send_error(server *s, struct MHD_Connection *c, unsigned status,
                                  const char *msg) {
    serve_reply r = {0, NULL, 0, NULL};
    serve_error(&r, status, "%s", msg);
    return send_json(s, c, &r);
}

static enum MHD_Result too_large(server *s, struct MHD_Connection *c, request *rq) {
    char msg[128];
    rq->replied = true;
    snprintf(msg, sizeof msg, "the request body is larger than %lld bytes (--max-body)",
             (long long)s->ctx->limits.max_body);
    return send_error(s, c, 413, msg);
}

static enum MHD_Result send_asset(server *s, struct MHD_Connection *c, const char *method,
                                  const char *url) {
    const serve_asset *a = serve_asset_find(strcmp(url, "/") == 0 ? "/index.html" : url);
    if (!a) return send_error(s, c, 404, "not found");
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        serve_reply r = {0, NULL, 0, "GET, HEAD"};
        serve_error(&r, 405, "%s takes GET requests", url);
        return send_json(s, c, &r);
    }
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(a->size, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a->type);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    if (atomic_load(&s->draining))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload_data,
                               size_t *upload_data_size, void **con_cls) {
    (void)version;
    server *s = cls;
    request *rq = *con_cls;
    if (!rq) { /* the headers: check what can be checked before the body comes */
        if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
        *con_cls = rq;
        atomic_fetch_add(&s->inflight, 1);
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(cl, &end, 10);
            if (errno || *end || n > (unsigned long long)s->ctx->limits.max_body)
                return too_large(s, c, rq);
        }
        return MHD_YES;
    }
    if (*upload_data_size) { /* a piece of the body */
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (rq->replied) return MHD_YES;
        if (rq->discarded || rq->len + n > (size_t)s->ctx->limits.max_body) {
            /* A body without Content-Length (chunked) that outgrows the limit: libmicrohttpd
             * takes a reply only once the body is read, so the rest is read and dropped and
             * 413 comes at the end; a body that goes on for more than 4 times the limit
             * closes the connection. */
            free(rq->body);
            rq->body = NULL, rq->len = rq->cap = 0;
            rq->discarded += n;
            return rq->discarded > 4 * (size_t)s->ctx->limits.max_body ? MHD_NO : MHD_YES;
        }
        if (rq->len + n + 1 > rq->cap) {
            size_t cap = rq->cap ? rq->cap : 4096;
            while (cap < rq->len + n + 1) cap *= 2;
            char *b = realloc(rq->body, cap);
            if (!b) return MHD_NO;
            rq->body = b, rq->cap = cap;
        }
        memcpy(rq->body + rq->len, upload_data, n);
        rq->len += n;
        return MHD_YES;
    }
    if (rq->replied) return MHD_YES;
    if (rq->discarded) return too_large(s, c, rq);
    if (s->o->cors && strcmp(method, "OPTIONS") == 0) { /* a CORS preflight */
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", s->o->cors);
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                "Content-Type, Authorization");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    if (s->o->api_key && (strncmp(url, "/v1/", 4) == 0 || strncmp(url, "/api/", 5) == 0)) {
        const char *auth =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        const size_t kl = strlen(s->o->api_key);
        if (!auth || strncmp(auth, "Bearer ", 7) != 0 || strlen(auth + 7) != kl ||
            memcmp(auth + 7, s->o->api_key, kl) != 0)
            return send_error(s, c, 401, "a valid API key is required (Authorization: Bearer KEY)");
    }
    serve_reply r = {0, NULL, 0, NULL};
    if (serve_api(s->ctx, method, url, rq->body, rq->len, &r)) return send_json(s, c, &r);
    return send_asset(s, c, method, url);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
    (void)c, (void)toe;
    server *s = cls;
    request *rq = *con_cls;
    if (!rq) return;
    free(rq->body);
    free(rq);
    *con_cls = NULL;
    atomic_fetch_sub(&s->inflight, 1);
}

/* --connections: a connection beyond the limit is closed as soon as it is accepted (left in
 * the kernel's queue it would wait, unanswered, for a slot). Threads accept in parallel, so
 * the count may pass the limit by a connection or two. */
static enum MHD_Result accept_policy(void *cls, const struct sockaddr *addr, socklen_t len) {
    (void)addr, (void)len;
    server *s = cls;
    return atomic_load(&s->open) < (long)s->o->connections ? MHD_YES : MHD_NO;
}

static void connection_event(void *cls, struct MHD_Connection *c, void **socket_context,
                             enum MHD_ConnectionNotificationCode toe) {
    (void)c, (void)socket_context;
    server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED)
        atomic_fetch_add(&s->open, 1);
    else if (toe == MHD_CONNECTION_NOTIFY_CLOSED)
        atomic_fetch_sub(&s->open, 1);
}

/* MHD's own errors (a client that sent garbage, a socket error) go to stderr unless quiet. */
static void log_mhd(void *cls, const char *fmt, va_list ap) {
    const serve_options *o = cls;
    if (o->quiet) return;
    fputs("emb serve: ", stderr);
    vfprintf(stderr, fmt, ap);
}

int serve_http_run(serve_ctx *ctx, const serve_options *o) {
    server s;
    s.ctx = ctx;
    s.o = o;
    atomic_init(&s.inflight, 0);
    atomic_init(&s.draining, false);
    atomic_init(&s.open, 0);

    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%lld", (long long)o->port);
    int gai = getaddrinfo(o->host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        fprintf(stderr, "emb serve: cannot use host '%s': %s\n", o->host, gai_strerror(gai));
        return 1;
    }
    const bool v6 = ai->ai_family == AF_INET6;

    /* SIGTERM and SIGINT are taken by sigwait below: block them in every thread (the
     * workers inherit the mask). */
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    signal(SIGPIPE, SIG_IGN);

    unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
    /* MHD's own connection limit is a backstop: accept_policy keeps --connections */
    const unsigned hard_limit = (unsigned)(2 * o->connections + 16);
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, accept_policy, &s, handler, &s, MHD_OPTION_EXTERNAL_LOGGER, log_mhd,
        (void *)o, /* must come first */
        MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)o->threads,
        MHD_OPTION_CONNECTION_LIMIT, hard_limit, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)o->timeout, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)64 * 1024, /* a request's headers */
        MHD_OPTION_NOTIFY_COMPLETED, completed, &s, MHD_OPTION_NOTIFY_CONNECTION, connection_event,
        &s, MHD_OPTION_END);
    if (!d) {
        int e = errno;
        fprintf(stderr, "emb serve: cannot listen on %s port %lld: %s\n", o->host,
                (long long)o->port, e ? strerror(e) : "libmicrohttpd refused to start");
        freeaddrinfo(ai);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return 1;
    }
    freeaddrinfo(ai);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    unsigned bound = di ? di->port : (unsigned)o->port;
    printf("http://%s%s%s:%u/\n", v6 ? "[" : "", o->host, v6 ? "]" : "", bound);
    fflush(stdout);
    if (!o->quiet) {
        const serve_table *t = ctx->table;
        fprintf(stderr,
                "emb serve: %s: %lld rows x %lld, %s%s, %s; %lld worker threads; "
                "SIGTERM or Ctrl-C stops\n",
                t->model, (long long)t->rows, (long long)t->dim,
                emb_qtype_name(emb_qtable_qtype(t->q)), t->mapped ? " (mapped)" : "",
                t->vocab ? "words" : "ids only", (long long)o->threads);
    }

    int sig = 0;
    while (sigwait(&sigs, &sig) != 0) {
    }
    /* Drain: stop accepting, let the requests in flight finish, then stop. */
    atomic_store(&s.draining, true);
    MHD_socket ls = MHD_quiesce_daemon(d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    long left = atomic_load(&s.inflight);
    if (!o->quiet)
        fprintf(stderr, "emb serve: %s: stopping, %ld request%s in flight\n",
                sig == SIGINT ? "SIGINT" : "SIGTERM", left, left == 1 ? "" : "s");
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = 0;
    while ((left = atomic_load(&s.inflight)) > 0) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        double waited =
            (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec);
        if (waited >= (double)o->drain_timeout) {
            fprintf(stderr,
                    "emb serve: %ld request%s still in flight after %lld s (--drain-timeout): "
                    "closing them\n",
                    left, left == 1 ? "" : "s", (long long)o->drain_timeout);
            rc = 1;
            break;
        }
        struct timespec nap = {0, 10 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    MHD_stop_daemon(d);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!o->quiet && rc == 0) fprintf(stderr, "emb serve: stopped\n");
    return rc;
}
