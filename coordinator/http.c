/* zerotrain: zcoord's HTTP server (see http.h): libmicrohttpd with its own polling threads,
 * the credential check, and event streams that sleep (suspended connections) until
 * zt_http_publish or the keep-alive timer gives them something to send. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/crypto.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/netutil.h"

#define MAX_BODY (64 * 1024)
#define STREAM_MAX_PENDING (1024 * 1024)
#define KEEPALIVE_S 15
#define SIGNIN_TTL_S (7 * 24 * 3600)
#define COOKIE_NAME "zt_signin"
/* Connections one client address may hold open at once, streams included. The polling threads
 * never wait on a client, so a slow one costs others nothing but a connection slot; this limit
 * keeps one address (stalled or half-sent requests, a runaway script) from taking them all:
 * past it, its new connections are closed at once while other addresses are still served.
 * Clients behind one proxy share it; a browser tab needs two or three. */
#define MAX_CONNECTIONS_PER_IP 64

static const char CSP[] =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

typedef struct stream {
    zt_http *h;
    struct MHD_Connection *conn;
    int64_t topic;
    char *buf; /* pending bytes [off, len) */
    size_t off, len, cap;
    bool suspended, closed;
    struct stream *prev, *next;
} stream;

struct zt_http {
    struct MHD_Daemon *d;
    int port;
    bool tls;
    zt_http_user *users; /* copied */
    int n_users;
    zt_http_config cfg;
    /* streams (smu) */
    pthread_mutex_t smu;
    pthread_cond_t scv; /* a stream was freed; or the keep-alive thread should stop */
    stream *streams;
    atomic_int n_streams;
    bool stopping;
    pthread_t keepalive;
    bool keepalive_started;
    /* counters */
    atomic_uint_fast64_t requests[6];
    atomic_uint_fast64_t unauthorized;
};

struct zt_http_req {
    zt_http *h;
    struct MHD_Connection *conn;
    const char *method, *path;
    const char *body;
    size_t body_len;
    const char *user; /* the signed-in user's name, "" when none */
    bool answered;
    enum MHD_Result result;
};

/* Per connection and request: the body as it arrives. */
typedef struct conn_ctx {
    char *body;
    size_t len, cap;
    bool too_big;
} conn_ctx;

/* ---- answering ----------------------------------------------------------------------------- */

static void count_status(zt_http *h, int status)
{
    int cls = status / 100;
    if (cls >= 1 && cls <= 5) atomic_fetch_add(&h->requests[cls], 1);
}

static void add_security_headers(struct MHD_Response *resp, bool cache)
{
    MHD_add_response_header(resp, "Content-Security-Policy", CSP);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
    /* same-origin, not no-referrer: with no-referrer a browser sends "Origin: null" on a form
     * POST, and the CSRF guard needs the real origin of the sign-in form */
    MHD_add_response_header(resp, "Referrer-Policy", "same-origin");
    MHD_add_response_header(resp, "Cache-Control", cache ? "max-age=60" : "no-store");
}

/* Queues a response built from body; extra headers as name, value pairs ending with NULL. */
static enum MHD_Result send_response(zt_http *h, struct MHD_Connection *conn, int status,
                                     const char *type, const void *body, size_t len, bool cache,
                                     ...)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", type);
    add_security_headers(resp, cache);
    va_list ap;
    va_start(ap, cache);
    for (;;) {
        const char *name = va_arg(ap, const char *);
        if (!name) break;
        const char *value = va_arg(ap, const char *);
        MHD_add_response_header(resp, name, value);
    }
    va_end(ap);
    enum MHD_Result r = MHD_queue_response(conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    count_status(h, status);
    return r;
}

/* {"error": msg} with the characters JSON needs escaped. */
static size_t json_error(char *out, size_t cap, const char *msg)
{
    size_t n = (size_t)snprintf(out, cap, "{\"error\": \"");
    for (const unsigned char *p = (const unsigned char *)msg; *p && n + 8 < cap; p++) {
        if (*p == '"' || *p == '\\') {
            out[n++] = '\\';
            out[n++] = (char)*p;
        } else if (*p < 0x20) {
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", *p);
        } else {
            out[n++] = (char)*p;
        }
    }
    n += (size_t)snprintf(out + n, cap - n, "\"}\n");
    return n < cap ? n : cap - 1;
}

void zt_http_respond(zt_http_req *r, int status, const char *type, const void *body, size_t len,
                     bool cache)
{
    if (r->answered) return;
    r->answered = true;
    r->result = send_response(r->h, r->conn, status, type, body, len, cache, NULL);
}

void zt_http_respond_error(zt_http_req *r, int status, const char *fmt, ...)
{
    char msg[1024], body[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    size_t n = json_error(body, sizeof(body), msg);
    zt_http_respond(r, status, "application/json", body, n, false);
}

/* ---- requests -------------------------------------------------------------------------------- */

const char *zt_http_method(const zt_http_req *r)
{
    return r->method;
}

const char *zt_http_path(const zt_http_req *r)
{
    return r->path;
}

const char *zt_http_query(const zt_http_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *zt_http_body(const zt_http_req *r, size_t *len)
{
    if (len) *len = r->body_len;
    return r->body ? r->body : "";
}

const char *zt_http_user_name(const zt_http_req *r)
{
    return r->user ? r->user : "";
}

zt_http *zt_http_server(const zt_http_req *r)
{
    return r->h;
}

/* ---- credentials ------------------------------------------------------------------------------
 */

/* Compares in time that depends on the lengths only. */
static bool ct_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    unsigned char d = alen != blen;
    size_t n = alen < blen ? alen : blen;
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

/* The sign-in cookie's value: "EXP.NAME.HEX(HMAC-SHA256(token, 'zt-signin:EXP:NAME'))". Keyed
 * by the user's token, so that it lasts across a zcoord restart and dies with a new token. */
static bool cookie_value(const zt_http_user *u, long long exp, char *out, size_t cap)
{
    char msg[128];
    int mlen = snprintf(msg, sizeof(msg), "zt-signin:%lld:%s", exp, u->name);
    if (mlen < 0 || (size_t)mlen >= sizeof(msg)) return false;
    unsigned char mac[32];
    if (gnutls_hmac_fast(GNUTLS_MAC_SHA256, u->token, strlen(u->token), msg, (size_t)mlen, mac) !=
        0)
        return false;
    int n = snprintf(out, cap, "%lld.%s.", exp, u->name);
    if (n < 0 || (size_t)n + 65 > cap) return false;
    for (int i = 0; i < 32; i++)
        snprintf(out + n + 2 * i, 3, "%02x", mac[i]);
    return true;
}

bool zt_http_cookie_value(const zt_http_user *u, long long exp, char *out, size_t cap)
{
    return cookie_value(u, exp, out, cap);
}

/* The user a cookie value proves (its index), -1 when none or expired. */
static int cookie_user(const zt_http_user *users, int n_users, const char *v, long long now)
{
    char *end;
    errno = 0;
    long long exp = strtoll(v, &end, 10);
    if (errno || end == v || *end != '.' || exp < now) return -1;
    const char *name = end + 1, *dot = strchr(name, '.');
    if (!dot) return -1;
    for (int i = 0; i < n_users; i++) {
        if (strlen(users[i].name) != (size_t)(dot - name) ||
            strncmp(users[i].name, name, (size_t)(dot - name)) != 0)
            continue;
        char want[200];
        if (!cookie_value(&users[i], exp, want, sizeof(want))) return -1;
        return ct_equal(v, strlen(v), want, strlen(want)) ? i : -1;
    }
    return -1;
}

/* The user whose token t is; every token is compared, so the time says nothing of which. */
static int token_user(const zt_http_user *users, int n_users, const char *t)
{
    int found = -1;
    for (int i = 0; i < n_users; i++)
        if (ct_equal(t, strlen(t), users[i].token, strlen(users[i].token))) found = i;
    return found;
}

typedef enum { AUTH_NONE, AUTH_OPEN, AUTH_BEARER, AUTH_COOKIE } auth_kind;

static auth_kind authenticate(const zt_http_user *users, int n_users, const zt_http_parts *p,
                              long long now, int *user)
{
    if (n_users <= 0) return AUTH_OPEN;
    const char *a = p->authorization;
    if (a && strncasecmp(a, "Bearer ", 7) == 0) {
        const char *t = a + 7;
        while (*t == ' ')
            t++;
        *user = token_user(users, n_users, t);
        return *user >= 0 ? AUTH_BEARER : AUTH_NONE;
    }
    if (p->cookie && (*user = cookie_user(users, n_users, p->cookie, now)) >= 0)
        return AUTH_COOKIE;
    return AUTH_NONE;
}

/* A POST that a browser sent from another site carries neither X-Requested-With (a header that
 * needs a CORS preflight, which zcoord never grants) nor an Origin naming this host. */
static bool same_origin(const zt_http_parts *p)
{
    if (p->requested_with && p->requested_with[0]) return true;
    if (!p->origin || !p->host) return false;
    const char *o = strstr(p->origin, "://");
    return o && strcmp(o + 3, p->host) == 0;
}

/* Without a token zcoord listens on loopback only; a page of another site that a DNS name
 * rebound to 127.0.0.1 would still name its own host: only loopback names are served —
 * "localhost", "[::1]" or an IPv4 address in 127.0.0.0/8 (a whole address: a name such as
 * "127.0.0.1.example" is not one), each with or without a port. */
static bool loopback_host(const zt_http_parts *p)
{
    if (!p->host) return true; /* HTTP/1.0 without Host: not a browser */
    return strncmp(p->host, "unix:", 5) != 0 && zt_net_is_loopback(p->host, true);
}

static bool wants_html(struct MHD_Connection *conn)
{
    const char *acc = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept");
    return acc && strstr(acc, "text/html");
}

static const char SIGNIN_HEAD[] =
    "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    "<title>zerotrain: sign in</title><link rel=\"icon\" href=\"data:,\">"
    "<link rel=\"stylesheet\" href=\"/style.css\"></head>"
    "<body class=\"signin\"><main><h1>zerotrain</h1>"
    "<form method=\"post\" action=\"/login\"><label for=\"token\">Token</label>"
    "<input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"current-password\" "
    "required autofocus><button type=\"submit\">Sign in</button></form>";
static const char SIGNIN_TAIL[] =
    "<p class=\"hint\">The token zcoord was started with (<code>--token-file</code> or "
    "<code>ZT_TOKEN</code>). Scripts send it as <code>Authorization: Bearer TOKEN</code>."
    "</p></main></body></html>\n";

static enum MHD_Result send_signin(zt_http *h, struct MHD_Connection *conn, int status,
                                   const char *note)
{
    char page[2048];
    int n = snprintf(page, sizeof(page), "%s%s%s%s%s", SIGNIN_HEAD,
                     note ? "<p class=\"error\" role=\"alert\">" : "", note ? note : "",
                     note ? "</p>" : "", SIGNIN_TAIL);
    return send_response(h, conn, status, "text/html; charset=utf-8", page, (size_t)n, false, NULL);
}

static enum MHD_Result send_unauthorized(zt_http *h, struct MHD_Connection *conn)
{
    atomic_fetch_add(&h->unauthorized, 1);
    if (wants_html(conn)) return send_signin(h, conn, 401, NULL);
    char body[256];
    size_t n = json_error(
        body, sizeof(body),
        "missing or wrong credential: send Authorization: Bearer TOKEN, or sign in at /login");
    return send_response(h, conn, 401, "application/json", body, n, false, "WWW-Authenticate",
                         "Bearer realm=\"zcoord\"", NULL);
}

/* The value of `name` in an application/x-www-form-urlencoded body, decoded into out. */
static bool form_value(const char *body, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *p = body; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        if (len > nl && strncmp(p, name, nl) == 0 && p[nl] == '=') {
            size_t vl = len - nl - 1;
            if (vl >= cap) return false;
            memcpy(out, p + nl + 1, vl);
            out[vl] = '\0';
            for (char *q = out; *q; q++)
                if (*q == '+') *q = ' ';
            out[MHD_http_unescape(out)] = '\0';
            return true;
        }
        p = amp ? amp + 1 : NULL;
    }
    return false;
}

static bool is_open_path(const char *url)
{
    return strcmp(url, "/style.css") == 0;
}

zt_http_route zt_http_route_request(const zt_http_user *users, int n_users, const zt_http_parts *p,
                                    long long now, int *user)
{
    int who = -1;
    if (user) *user = -1;
    bool token = n_users > 0;
    const char *url = p->url ? p->url : "";
    const char *method = p->method ? p->method : "";
    if (strcmp(url, "/healthz") == 0 || strcmp(url, "/readyz") == 0) return ZT_HTTP_TO_HEALTH;
    if (!token && !loopback_host(p)) return ZT_HTTP_TO_NOT_LOOPBACK;
    if (strcmp(url, "/login") == 0) {
        if (!token) return ZT_HTTP_TO_HOME;
        if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) return ZT_HTTP_TO_LOGIN_PAGE;
        if (strcmp(method, "POST") != 0) return ZT_HTTP_TO_LOGIN_METHOD;
        if (!same_origin(p)) return ZT_HTTP_TO_LOGIN_CROSS_SITE;
        char tok[4200];
        if (form_value(p->body ? p->body : "", "token", tok, sizeof(tok)))
            who = token_user(users, n_users, tok);
        memset(tok, 0, sizeof(tok));
        if (user) *user = who;
        return who >= 0 ? ZT_HTTP_TO_LOGIN_OK : ZT_HTTP_TO_LOGIN_WRONG;
    }
    auth_kind auth = is_open_path(url) ? AUTH_OPEN : authenticate(users, n_users, p, now, &who);
    if (auth == AUTH_NONE) return ZT_HTTP_TO_UNAUTHORIZED;
    if (user) *user = who;
    if (strcmp(url, "/logout") == 0) return ZT_HTTP_TO_LOGOUT;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0 && auth != AUTH_BEARER &&
        !same_origin(p))
        return ZT_HTTP_TO_CROSS_SITE;
    return ZT_HTTP_TO_HANDLER;
}

/* The answer to a sign-in with the right token: the sign-in cookie, then the dashboard. */
static enum MHD_Result login_ok(zt_http *h, struct MHD_Connection *conn, int user, bool xhr)
{
    long long exp = (long long)time(NULL) + SIGNIN_TTL_S;
    char val[200], cookie[400];
    if (user < 0 || user >= h->n_users || !cookie_value(&h->users[user], exp, val, sizeof(val))) {
        char b[128];
        size_t n = json_error(b, sizeof(b), "cannot make a sign-in cookie");
        return send_response(h, conn, 500, "application/json", b, n, false, NULL);
    }
    snprintf(cookie, sizeof(cookie), "%s=%s; Path=/; Max-Age=%d; HttpOnly; SameSite=Strict%s",
             COOKIE_NAME, val, SIGNIN_TTL_S, h->tls ? "; Secure" : "");
    if (xhr)
        return send_response(h, conn, 200, "application/json", "{\"ok\": true}\n", 13, false,
                             "Set-Cookie", cookie, NULL);
    return send_response(h, conn, 303, "text/plain", "", 0, false, "Set-Cookie", cookie, "Location",
                         "/", NULL);
}

/* ---- streams ------------------------------------------------------------------------------- */

static bool stream_append(stream *s, const char *a, size_t alen)
{
    if (s->off > 0 && s->off == s->len) s->off = s->len = 0;
    if (s->len - s->off + alen > STREAM_MAX_PENDING) return false;
    if (s->len + alen > s->cap) {
        if (s->off > 0) {
            memmove(s->buf, s->buf + s->off, s->len - s->off);
            s->len -= s->off;
            s->off = 0;
        }
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->len + alen)
            cap *= 2;
        if (cap != s->cap) {
            char *nb = zt_realloc(s->buf, cap);
            if (!nb) return false;
            s->buf = nb;
            s->cap = cap;
        }
    }
    memcpy(s->buf + s->len, a, alen);
    s->len += alen;
    return true;
}

/* smu held. */
static void stream_wake(stream *s)
{
    if (s->suspended) {
        s->suspended = false;
        MHD_resume_connection(s->conn);
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    stream *s = cls;
    zt_http *h = s->h;
    pthread_mutex_lock(&h->smu);
    if (s->off < s->len) {
        size_t n = s->len - s->off < max ? s->len - s->off : max;
        memcpy(out, s->buf + s->off, n);
        s->off += n;
        pthread_mutex_unlock(&h->smu);
        return (ssize_t)n;
    }
    if (s->closed) {
        pthread_mutex_unlock(&h->smu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    s->suspended = true;
    MHD_suspend_connection(s->conn);
    pthread_mutex_unlock(&h->smu);
    return 0;
}

static void stream_free(void *cls)
{
    stream *s = cls;
    zt_http *h = s->h;
    pthread_mutex_lock(&h->smu);
    if (s->prev)
        s->prev->next = s->next;
    else
        h->streams = s->next;
    if (s->next) s->next->prev = s->prev;
    atomic_fetch_sub(&h->n_streams, 1);
    pthread_cond_broadcast(&h->scv);
    pthread_mutex_unlock(&h->smu);
    zt_free(s->buf);
    zt_free(s);
}

zt_status zt_http_stream(zt_http_req *r, int64_t topic, const char *first)
{
    zt_http *h = r->h;
    if (r->answered) return ZT_ERR_STATE;
    stream *s = zt_calloc(1, sizeof(*s));
    if (!s) {
        zt_http_respond_error(r, 503, "out of memory");
        return ZT_ERR_NOMEM;
    }
    s->h = h;
    s->conn = r->conn;
    s->topic = topic;
    static const char hello[] = "retry: 2000\n\n";
    if (!stream_append(s, hello, sizeof(hello) - 1) ||
        (first && !stream_append(s, first, strlen(first)))) {
        zt_free(s->buf);
        zt_free(s);
        zt_http_respond_error(r, 503, "out of memory");
        return ZT_ERR_NOMEM;
    }
    pthread_mutex_lock(&h->smu);
    if (h->stopping || atomic_load(&h->n_streams) >= h->cfg.max_streams) {
        bool stopping = h->stopping;
        pthread_mutex_unlock(&h->smu);
        zt_free(s->buf);
        zt_free(s);
        zt_http_respond_error(r, 503, "%s",
                              stopping ? "the coordinator is shutting down; retry shortly"
                                       : "too many event streams open; close some and retry");
        return ZT_ERR_NOSPACE;
    }
    s->next = h->streams;
    if (h->streams) h->streams->prev = s;
    h->streams = s;
    atomic_fetch_add(&h->n_streams, 1);
    pthread_mutex_unlock(&h->smu);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, s, stream_free);
    if (!resp) {
        stream_free(s);
        r->answered = true;
        r->result = MHD_NO;
        return ZT_ERR_NOMEM;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    add_security_headers(resp, false);
    r->answered = true;
    r->result = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp); /* stream_free runs when the connection is done with it */
    count_status(h, 200);
    return ZT_OK;
}

bool zt_http_has_streams(zt_http *h, int64_t topic)
{
    if (!h || atomic_load(&h->n_streams) == 0) return false;
    bool found = false;
    pthread_mutex_lock(&h->smu);
    for (stream *s = h->streams; s && !found; s = s->next)
        found = s->topic == topic && !s->closed;
    pthread_mutex_unlock(&h->smu);
    return found;
}

void zt_http_publish(zt_http *h, int64_t topic, const char *event, const char *data)
{
    if (!h || atomic_load(&h->n_streams) == 0) return;
    size_t el = strlen(event), dl = strlen(data), n = el + dl + 17;
    char stackbuf[2048];
    char *msg = n <= sizeof(stackbuf) ? stackbuf : zt_malloc(n);
    if (!msg) return;
    int w = snprintf(msg, n, "event: %s\ndata: %s\n\n", event, data);
    pthread_mutex_lock(&h->smu);
    for (stream *s = h->streams; s; s = s->next) {
        if (s->topic != topic || s->closed) continue;
        if (!stream_append(s, msg, (size_t)w)) {
            ZT_WARN("http", "an event stream of topic %lld fell more than %d bytes behind: closed",
                    (long long)topic, STREAM_MAX_PENDING);
            s->closed = true;
            s->off = s->len = 0;
            stream_wake(s); /* to end it */
        }
    }
    pthread_mutex_unlock(&h->smu);
    if (msg != stackbuf) zt_free(msg);
}

void zt_http_flush(zt_http *h)
{
    if (!h || atomic_load(&h->n_streams) == 0) return;
    pthread_mutex_lock(&h->smu);
    for (stream *s = h->streams; s; s = s->next)
        if (s->len > s->off) stream_wake(s);
    pthread_mutex_unlock(&h->smu);
}

/* Every KEEPALIVE_S a comment line on each stream: proxies keep it open, and a client that went
 * away is noticed (a suspended connection sees no disconnect). */
static void *keepalive_main(void *arg)
{
    zt_http *h = arg;
    pthread_mutex_lock(&h->smu);
    while (!h->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += KEEPALIVE_S;
        int rc = 0;
        while (!h->stopping && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&h->scv, &h->smu, &ts);
        if (h->stopping) break;
        for (stream *s = h->streams; s; s = s->next) {
            if (s->closed) continue;
            if (!stream_append(s, ": keep-alive\n\n", 14)) s->closed = true;
            stream_wake(s);
        }
    }
    pthread_mutex_unlock(&h->smu);
    return NULL;
}

/* ---- the request handler ------------------------------------------------------------------ */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    zt_http *h = cls;
    conn_ctx *cx = *con_cls;
    if (!cx) {
        cx = zt_calloc(1, sizeof(*cx));
        if (!cx) return MHD_NO;
        *con_cls = cx;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (cx->too_big || cx->len + n > MAX_BODY) {
            cx->too_big = true;
            return MHD_YES;
        }
        if (cx->len + n + 1 > cx->cap) {
            size_t cap = cx->cap ? cx->cap * 2 : 1024;
            while (cap < cx->len + n + 1)
                cap *= 2;
            char *nb = zt_realloc(cx->body, cap);
            if (!nb) return MHD_NO;
            cx->body = nb;
            cx->cap = cap;
        }
        memcpy(cx->body + cx->len, upload_data, n);
        cx->len += n;
        cx->body[cx->len] = '\0';
        return MHD_YES;
    }
    if (cx->too_big) {
        char b[128];
        size_t n = json_error(b, sizeof(b), "request body over 64 KiB");
        return send_response(h, conn, 413, "application/json", b, n, false, NULL);
    }
    zt_http_parts parts = {
        .method = method,
        .url = url,
        .authorization = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"),
        .cookie = MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, COOKIE_NAME),
        .origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin"),
        .host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host"),
        .requested_with = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Requested-With"),
        .body = cx->body ? cx->body : ""};
    char b[256];
    size_t n;
    int user = -1;
    switch (zt_http_route_request(h->users, h->n_users, &parts, (long long)time(NULL), &user)) {
    case ZT_HTTP_TO_HEALTH: {
        bool ok = h->cfg.health ? h->cfg.health(h->cfg.health_arg) : true;
        const char *hb = ok ? "ok\n" : "shutting down\n";
        return send_response(h, conn, ok ? 200 : 503, "text/plain", hb, strlen(hb), false, NULL);
    }
    case ZT_HTTP_TO_NOT_LOOPBACK:
        n = json_error(
            b, sizeof(b),
            "this zcoord has no token and answers only loopback host names; use 127.0.0.1, or start it with --token-file");
        return send_response(h, conn, 403, "application/json", b, n, false, NULL);
    case ZT_HTTP_TO_HOME:
        return send_response(h, conn, 303, "text/plain", "", 0, false, "Location", "/", NULL);
    case ZT_HTTP_TO_LOGIN_PAGE:
        return send_signin(h, conn, 200, NULL);
    case ZT_HTTP_TO_LOGIN_METHOD:
        n = json_error(b, sizeof(b), "only GET and POST on /login");
        return send_response(h, conn, 405, "application/json", b, n, false, "Allow", "GET, POST",
                             NULL);
    case ZT_HTTP_TO_LOGIN_CROSS_SITE:
        n = json_error(b, sizeof(b), "cross-site sign-in refused");
        return send_response(h, conn, 403, "application/json", b, n, false, NULL);
    case ZT_HTTP_TO_LOGIN_WRONG:
        atomic_fetch_add(&h->unauthorized, 1);
        if (!parts.requested_with) return send_signin(h, conn, 401, "Wrong token.");
        n = json_error(b, sizeof(b), "wrong token");
        return send_response(h, conn, 401, "application/json", b, n, false, NULL);
    case ZT_HTTP_TO_LOGIN_OK:
        return login_ok(h, conn, user, parts.requested_with != NULL);
    case ZT_HTTP_TO_UNAUTHORIZED:
        return send_unauthorized(h, conn);
    case ZT_HTTP_TO_LOGOUT:
        return send_response(h, conn, 303, "text/plain", "", 0, false, "Set-Cookie",
                             COOKIE_NAME "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict",
                             "Location", "/login", NULL);
    case ZT_HTTP_TO_CROSS_SITE:
        n = json_error(
            b, sizeof(b),
            "cross-site request refused: send the header X-Requested-With, or Authorization: Bearer");
        return send_response(h, conn, 403, "application/json", b, n, false, NULL);
    case ZT_HTTP_TO_HANDLER:
        break;
    }
    zt_http_req r = {.h = h,
                     .conn = conn,
                     .method = method,
                     .path = url,
                     .body = cx->body,
                     .body_len = cx->len,
                     .user = user >= 0 && user < h->n_users ? h->users[user].name : "",
                     .answered = false,
                     .result = MHD_YES};
    h->cfg.handler(h->cfg.handler_arg, &r);
    if (!r.answered) zt_http_respond_error(&r, 500, "no answer for %s %s", method, url);
    return r.result;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    conn_ctx *cx = *con_cls;
    if (!cx) return;
    zt_free(cx->body);
    zt_free(cx);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n')
        msg[--n] = '\0';
    ZT_DEBUG("http", "libmicrohttpd: %s", msg);
}

/* ---- start / stop ------------------------------------------------------------------------- */

/* Splits "host:port" / "[v6]:port" into host and port. */
static bool split_addr(const char *addr, char *host, size_t hcap, char *port, size_t pcap)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || !colon[1]) return false;
    const char *hs = addr;
    size_t hl = (size_t)(colon - addr);
    if (hl >= 2 && hs[0] == '[' && hs[hl - 1] == ']') {
        hs++;
        hl -= 2;
    }
    if (hl >= hcap || strlen(colon + 1) >= pcap) return false;
    memcpy(host, hs, hl);
    host[hl] = '\0';
    snprintf(port, pcap, "%s", colon + 1);
    return true;
}

static void free_server(zt_http *h)
{
    for (int i = 0; i < h->n_users; i++) {
        zt_free((char *)h->users[i].name);
        zt_free((char *)h->users[i].token);
    }
    zt_free(h->users);
    zt_free((char *)h->cfg.tls_cert_pem);
    zt_free((char *)h->cfg.tls_key_pem);
    pthread_mutex_destroy(&h->smu);
    pthread_cond_destroy(&h->scv);
    zt_free(h);
}

zt_status zt_http_start(zt_http **out, const zt_http_config *cfg, zt_err *err)
{
    *out = NULL;
    char host[256], port[32];
    const char *addr = cfg->addr;
    if (!addr || !split_addr(addr, host, sizeof(host), port, sizeof(port)))
        return zt_err_set(err, ZT_ERR_INVALID,
                          "HTTP address '%s' is not host:port; e.g. --http 127.0.0.1:8080",
                          addr ? addr : "");
    bool tls = cfg->tls_cert_pem && cfg->tls_cert_pem[0];
    if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return zt_err_set(
            err, ZT_ERR_INVALID,
            "--tls-cert given but this libmicrohttpd was built without TLS; serve HTTP on loopback (--http 127.0.0.1:PORT) or install libmicrohttpd with GnuTLS");
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (gai != 0)
        return zt_err_set(err, ZT_ERR_INVALID, "HTTP address %s: %s", addr, gai_strerror(gai));
    zt_http *h = zt_calloc(1, sizeof(*h));
    if (!h) {
        freeaddrinfo(res);
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&h->smu, NULL);
    pthread_cond_init(&h->scv, NULL);
    h->cfg = *cfg;
    h->cfg.addr = NULL;
    h->cfg.tls_cert_pem = tls ? zt_strdup(cfg->tls_cert_pem) : NULL;
    h->cfg.tls_key_pem = tls ? zt_strdup(cfg->tls_key_pem ? cfg->tls_key_pem : "") : NULL;
    bool users_ok = true;
    if (cfg->n_users > 0) {
        h->users = zt_calloc((size_t)cfg->n_users, sizeof(*h->users));
        users_ok = h->users != NULL;
        for (int i = 0; users_ok && i < cfg->n_users; i++) {
            h->users[i].name = zt_strdup(cfg->users[i].name);
            h->users[i].token = zt_strdup(cfg->users[i].token);
            h->n_users = i + 1;
            users_ok = h->users[i].name && h->users[i].token;
        }
    }
    h->cfg.users = NULL;
    h->cfg.n_users = 0;
    h->tls = tls;
    if (h->cfg.threads <= 0) h->cfg.threads = 4;
    if (h->cfg.max_connections <= 0) h->cfg.max_connections = 512;
    if (h->cfg.timeout_s <= 0) h->cfg.timeout_s = 30;
    if (h->cfg.max_streams <= 0) h->cfg.max_streams = 256;
    if (!users_ok ||
        (tls && (!h->cfg.tls_cert_pem || !h->cfg.tls_key_pem))) {
        freeaddrinfo(res);
        free_server(h);
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    if (tls) flags |= MHD_USE_TLS;
    int per_ip = h->cfg.max_connections < MAX_CONNECTIONS_PER_IP ? h->cfg.max_connections
                                                                 : MAX_CONNECTIONS_PER_IP;
    const char *why = "no address";
    for (struct addrinfo *ai = res; ai && !h->d; ai = ai->ai_next) {
        unsigned f = flags | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
        struct MHD_OptionItem opts[] = {
            {MHD_OPTION_SOCK_ADDR, 0, ai->ai_addr},
            {MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)h->cfg.threads, NULL},
            {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)h->cfg.max_connections, NULL},
            {MHD_OPTION_PER_IP_CONNECTION_LIMIT, (intptr_t)per_ip, NULL},
            {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)h->cfg.timeout_s, NULL},
            {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)(64 * 1024), NULL},
            {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, NULL},
            {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mhd_log, NULL},
            /* the TLS pair last: without TLS the first END closes the list there */
            {tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, (void *)h->cfg.tls_key_pem},
            {tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, (void *)h->cfg.tls_cert_pem},
            {MHD_OPTION_END, 0, NULL},
        };
        h->d = MHD_start_daemon(f, 0, NULL, NULL, on_request, h, MHD_OPTION_ARRAY, opts,
                                MHD_OPTION_END);
        if (!h->d) why = errno ? strerror(errno) : "libmicrohttpd refused the settings";
    }
    freeaddrinfo(res);
    if (!h->d) {
        free_server(h);
        return zt_err_set(err, ZT_ERR_IO,
                          "cannot listen on %s for HTTP%s: %s; choose another --http address", addr,
                          tls ? "S (is the key the certificate's, both PEM?)" : "", why);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : 0;
    if (pthread_create(&h->keepalive, NULL, keepalive_main, h) == 0) h->keepalive_started = true;
    *out = h;
    return ZT_OK;
}

int zt_http_port(const zt_http *h)
{
    return h ? h->port : 0;
}

void zt_http_get_stats(const zt_http *h, zt_http_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!h) return;
    for (int i = 0; i < 6; i++)
        out->requests[i] = atomic_load(&((zt_http *)h)->requests[i]);
    out->unauthorized = atomic_load(&((zt_http *)h)->unauthorized);
    out->streams = atomic_load(&((zt_http *)h)->n_streams);
}

void zt_http_stop(zt_http *h)
{
    if (!h) return;
    /* end every stream and wake the sleeping ones: libmicrohttpd must not be stopped with
     * suspended connections */
    pthread_mutex_lock(&h->smu);
    h->stopping = true;
    pthread_cond_broadcast(&h->scv);
    for (stream *s = h->streams; s; s = s->next) {
        s->closed = true;
        s->off = s->len = 0;
        stream_wake(s);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 3;
    while (h->streams) {
        if (pthread_cond_timedwait(&h->scv, &h->smu, &ts) == ETIMEDOUT) break;
        for (stream *s = h->streams; s; s = s->next)
            stream_wake(s);
    }
    bool left = h->streams != NULL;
    pthread_mutex_unlock(&h->smu);
    if (left) ZT_WARN("http", "event streams still open at shutdown");
    if (h->keepalive_started) pthread_join(h->keepalive, NULL);
    MHD_stop_daemon(h->d);
    free_server(h);
}
