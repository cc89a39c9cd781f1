/* zerotrain: zcoord's HTTP server on libmicrohttpd — a pool of polling threads (epoll), TLS
 * when given a certificate, the user credential check (bearer token or the dashboard's sign-in
 * cookie, with a CSRF guard on POST), and Server-Sent Events streams fed by zt_http_publish.
 * It knows no route but /healthz, /readyz and /login: everything else goes to the handler
 * (coordinator/api.c). */
#ifndef ZT_COORDINATOR_HTTP_H
#define ZT_COORDINATOR_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct zt_http zt_http;
/* One request, valid during the handler call only. */
typedef struct zt_http_req zt_http_req;

/* Returns whether the coordinator serves (for /healthz and /readyz). */
typedef bool (*zt_http_health_fn)(void *arg);
/* Answers one authenticated request (any path but the three above) with exactly one
 * zt_http_respond* or zt_http_stream call; runs on a server thread: keep it short. */
typedef void (*zt_http_handler_fn)(void *arg, zt_http_req *req);

/* The topic of the job list and cluster stream; a job's own stream uses its id (> 0). */
#define ZT_HTTP_TOPIC_ALL ((int64_t)-1)

/* A user and the token that proves it (coordinator/auth.h's users). */
typedef struct zt_http_user {
    const char *name; /* [A-Za-z0-9._-], 1..64 */
    const char *token;
} zt_http_user;

typedef struct zt_http_config {
    const char *addr;           /* "host:port" or "[v6]:port"; port 0 picks one */
    const zt_http_user *users;  /* who may sign in; none = no credential asked (loopback) */
    int n_users;
    const char *tls_cert_pem; /* PEM text: serve HTTPS; NULL = plain HTTP */
    const char *tls_key_pem;
    int threads;         /* polling threads; 0 = 4 */
    int max_connections; /* open at once, streams included; 0 = 512 (64 at most from one
                            client address: see MAX_CONNECTIONS_PER_IP in http.c) */
    int timeout_s;       /* an idle connection is closed after this; 0 = 30 */
    int max_streams;     /* event streams open at once (more: 503); 0 = 256 */
    zt_http_health_fn health;
    void *health_arg;
    zt_http_handler_fn handler;
    void *handler_arg;
} zt_http_config;

/* Counters for /metrics, read without locks (they may be a request apart). */
typedef struct zt_http_stats {
    uint64_t requests[6]; /* by status class: [1] 1xx ... [5] 5xx; [0] unused */
    uint64_t unauthorized;
    int streams;
} zt_http_stats;

/* Binds cfg->addr and serves. Errors: ZT_ERR_INVALID (malformed address, or TLS asked from a
 * libmicrohttpd without it), ZT_ERR_IO (cannot bind; the message names the address),
 * ZT_ERR_NOMEM. The strings of cfg are copied. */
zt_status zt_http_start(zt_http **out, const zt_http_config *cfg, zt_err *err);
/* The bound port. */
int zt_http_port(const zt_http *h);
/* Ends every stream, stops the threads and closes the socket. NULL is a no-op. */
void zt_http_stop(zt_http *h);
void zt_http_get_stats(const zt_http *h, zt_http_stats *out);

/* ---- requests (handler thread) ---- */
const char *zt_http_method(const zt_http_req *r);
/* The path without the query string, percent-decoded by libmicrohttpd. */
const char *zt_http_path(const zt_http_req *r);
/* A query parameter (decoded), NULL when absent. */
const char *zt_http_query(const zt_http_req *r, const char *name);
/* The request body (POST), NUL-terminated; len may be NULL. */
const char *zt_http_body(const zt_http_req *r, size_t *len);
/* The signed-in user's name; "" on a coordinator without credentials. */
const char *zt_http_user_name(const zt_http_req *r);
zt_http *zt_http_server(const zt_http_req *r);

/* Answers with body (copied). Adds the security headers (a Content-Security-Policy allowing
 * only the server's own files, nosniff, no referrer, no caching unless cache is true). */
void zt_http_respond(zt_http_req *r, int status, const char *type, const void *body, size_t len,
                     bool cache);
/* Answers {"error": message} with status. */
void zt_http_respond_error(zt_http_req *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Turns the request into an event stream of topic (text/event-stream); first (may be NULL)
 * is sent at once. Past max_streams answers 503 and returns ZT_ERR_NOSPACE. */
zt_status zt_http_stream(zt_http_req *r, int64_t topic, const char *first);

/* ---- the decision before any route (pure: the fuzzer tests/fuzz/fuzz_http.c drives it) ---- */

/* The parts of a request that decide where it goes; NULL = absent. */
typedef struct zt_http_parts {
    const char *method;         /* "GET", "POST", ... */
    const char *url;            /* the path without the query, percent-decoded */
    const char *authorization;  /* the Authorization header */
    const char *cookie;         /* the value of the zt_signin cookie */
    const char *origin, *host;  /* the Origin and Host headers */
    const char *requested_with; /* the X-Requested-With header */
    const char *body;           /* the request body, NUL-terminated (a sign-in form) */
} zt_http_parts;

typedef enum {
    ZT_HTTP_TO_HEALTH,           /* /healthz, /readyz: open to all */
    ZT_HTTP_TO_NOT_LOOPBACK,     /* 403: no token, and Host names no loopback address */
    ZT_HTTP_TO_HOME,             /* /login without a token: 303 to / */
    ZT_HTTP_TO_LOGIN_PAGE,       /* GET or HEAD /login: the sign-in form */
    ZT_HTTP_TO_LOGIN_METHOD,     /* 405: /login takes GET and POST only */
    ZT_HTTP_TO_LOGIN_CROSS_SITE, /* 403: a sign-in posted from another site */
    ZT_HTTP_TO_LOGIN_WRONG,      /* 401: the form's token is not the token */
    ZT_HTTP_TO_LOGIN_OK,         /* the form's token is right: a sign-in cookie */
    ZT_HTTP_TO_UNAUTHORIZED,     /* 401: no valid bearer token or sign-in cookie */
    ZT_HTTP_TO_LOGOUT,           /* /logout: the cookie is cleared */
    ZT_HTTP_TO_CROSS_SITE,       /* 403: a cookie-authenticated change from another site */
    ZT_HTTP_TO_HANDLER,          /* authenticated (or open): the handler answers */
} zt_http_route;

/* Where the server sends a request with these parts, given the users (none: no credential,
 * loopback only) and the time now (seconds since the epoch; sign-in cookies expire). Parses
 * the bearer header, the sign-in cookie (its expiry, user and HMAC keyed by that user's
 * token), Origin against Host, the Host as a loopback address, and the sign-in form
 * (application/x-www-form-urlencoded, "token=..."). *user (may be NULL) receives the index of
 * the user the request proved to be (the bearer's, the cookie's, or the form's), -1 when none.
 * Pure: allocates nothing, touches no connection; thread-safe. */
zt_http_route zt_http_route_request(const zt_http_user *users, int n_users, const zt_http_parts *p,
                                    long long now, int *user);
/* The sign-in cookie value that zt_http_route_request accepts for user u until exp, into out
 * (at least 160 bytes); false when the HMAC cannot be computed. For tests and the fuzzer. */
bool zt_http_cookie_value(const zt_http_user *u, long long exp, char *out, size_t cap);

/* ---- publishing (any thread; cheap when nobody listens) ---- */
/* Whether a stream of topic is open (ZT_HTTP_TOPIC_ALL: of the job list). */
bool zt_http_has_streams(zt_http *h, int64_t topic);
/* Queues "event: EVENT\ndata: DATA\n\n" on every stream of topic (zt_http_flush sends it).
 * data is one line of JSON.
 * A stream that has more than 1 MiB unsent is closed (the browser reconnects and reloads). */
void zt_http_publish(zt_http *h, int64_t topic, const char *event, const char *data);
/* Sends what zt_http_publish queued: the events of one commit go out together, one write a
 * stream rather than one per event. Call after a batch of zt_http_publish calls. */
void zt_http_flush(zt_http *h);

#endif
