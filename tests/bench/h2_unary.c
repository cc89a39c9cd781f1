/* A small gRPC unary client over HTTP/2 on nghttp2: see h2_unary.h. */
#define _POSIX_C_SOURCE 200809L
#include "tests/bench/h2_unary.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "common/alloc.h"

struct h2u_conn {
    int fd, epfd;
    nghttp2_session *s;
    char authority[128];
    char auth[512]; /* "Bearer <token>" or "" */
    bool failed, want_out;
    char why[160];

    /* the call in flight */
    bool busy, closed;
    int32_t stream;
    uint8_t *req; /* 5-byte gRPC prefix + message */
    size_t req_len, req_off, req_cap;
    uint8_t *body;
    size_t body_len, body_cap;
    int http_status, grpc_status; /* -1 = not seen */
    uint32_t reset_code;
    char grpc_message[160];
    h2u_done_fn done;
    void *arg;

    uint8_t *out; /* bytes nghttp2 produced that the socket did not take yet */
    size_t out_len, out_cap;
};

static void fail(h2u_conn *c, const char *why)
{
    if (c->failed) return;
    c->failed = true;
    snprintf(c->why, sizeof(c->why), "%s", why);
}

/* Appends n bytes to a growing buffer; false when out of memory. */
static bool append(uint8_t **buf, size_t *len, size_t *cap, const uint8_t *p, size_t n)
{
    if (*len + n > *cap) {
        size_t want = *cap ? *cap : 256;
        while (want < *len + n)
            want *= 2;
        uint8_t *b = zt_realloc(*buf, want);
        if (!b) return false;
        *buf = b;
        *cap = want;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    return true;
}

/* ---- nghttp2 callbacks -------------------------------------------------------------------- */

static ssize_t read_req(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                        nghttp2_data_source *src, void *user)
{
    (void)s;
    (void)id;
    (void)src;
    h2u_conn *c = user;
    size_t n = c->req_len - c->req_off;
    if (n > len) n = len;
    memcpy(buf, c->req + c->req_off, n);
    c->req_off += n;
    if (c->req_off == c->req_len) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *user)
{
    (void)s;
    (void)flags;
    h2u_conn *c = user;
    if (f->hd.stream_id != c->stream) return 0;
    char v[160];
    size_t k = vlen < sizeof(v) - 1 ? vlen : sizeof(v) - 1;
    memcpy(v, value, k);
    v[k] = '\0';
    if (nlen == 7 && !memcmp(name, ":status", 7))
        c->http_status = atoi(v);
    else if (nlen == 11 && !memcmp(name, "grpc-status", 11))
        c->grpc_status = atoi(v);
    else if (nlen == 12 && !memcmp(name, "grpc-message", 12))
        snprintf(c->grpc_message, sizeof(c->grpc_message), "%s", v);
    return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *user)
{
    (void)s;
    (void)flags;
    h2u_conn *c = user;
    if (id != c->stream) return 0;
    return append(&c->body, &c->body_len, &c->body_cap, data, len) ? 0
                                                                   : NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int on_close(nghttp2_session *s, int32_t id, uint32_t code, void *user)
{
    (void)s;
    h2u_conn *c = user;
    if (id != c->stream) return 0;
    c->closed = true;
    c->reset_code = code;
    return 0;
}

/* ---- the call's end ----------------------------------------------------------------------- */

static void finish(h2u_conn *c)
{
    if (!c->busy || (!c->closed && !c->failed)) return;
    c->busy = false;
    c->closed = false;
    h2u_done_fn done = c->done;
    void *arg = c->arg;
    c->done = NULL;
    char why[200];
    if (c->grpc_status == 0 && c->http_status == 200 && c->body_len >= 5 && c->body[0] == 0) {
        uint32_t n = (uint32_t)c->body[1] << 24 | (uint32_t)c->body[2] << 16 |
                     (uint32_t)c->body[3] << 8 | c->body[4];
        if (n == c->body_len - 5) {
            done(arg, 0, "", c->body + 5, n);
            return;
        }
        snprintf(why, sizeof(why), "reply frame says %u bytes, %zu came", n, c->body_len - 5);
        done(arg, -1, why, NULL, 0);
        return;
    }
    if (c->grpc_status > 0) {
        done(arg, c->grpc_status, c->grpc_message, NULL, 0);
        return;
    }
    if (c->failed)
        snprintf(why, sizeof(why), "connection failed: %s", c->why);
    else if (c->grpc_status == 0)
        snprintf(why, sizeof(why), "grpc-status 0 without a reply message");
    else
        snprintf(why, sizeof(why), "no grpc-status (HTTP status %d, stream error %u)",
                 c->http_status, c->reset_code);
    done(arg, -1, why, NULL, 0);
}

/* ---- the socket --------------------------------------------------------------------------- */

static void set_out_interest(h2u_conn *c, bool want)
{
    if (c->want_out == want) return;
    c->want_out = want;
    struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0u), .data.ptr = c};
    epoll_ctl(c->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* Hands everything nghttp2 wants to send to the socket; keeps what it does not take. */
static void flush(h2u_conn *c)
{
    while (!c->failed) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->s, &data);
        if (n < 0) {
            fail(c, nghttp2_strerror((int)n));
            break;
        }
        if (n == 0) break;
        if (!append(&c->out, &c->out_len, &c->out_cap, data, (size_t)n)) fail(c, "out of memory");
    }
    size_t off = 0;
    while (!c->failed && off < c->out_len) {
        ssize_t w = send(c->fd, c->out + off, c->out_len - off, MSG_NOSIGNAL);
        if (w > 0) {
            off += (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {
            fail(c, strerror(errno));
        }
    }
    if (off) {
        memmove(c->out, c->out + off, c->out_len - off);
        c->out_len -= off;
    }
    if (!c->failed) set_out_interest(c, c->out_len > 0);
}

h2u_conn *h2u_open(int epfd, int fd, const char *authority, const char *bearer, char *err,
                   size_t cap)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);

    h2u_conn *c = zt_calloc(1, sizeof(*c));
    nghttp2_session_callbacks *cb = NULL;
    if (!c || nghttp2_session_callbacks_new(&cb) != 0) {
        snprintf(err, cap, "out of memory");
        zt_free(c);
        close(fd);
        return NULL;
    }
    c->fd = fd;
    c->epfd = epfd;
    snprintf(c->authority, sizeof(c->authority), "%s", authority);
    if (bearer && bearer[0]) snprintf(c->auth, sizeof(c->auth), "Bearer %s", bearer);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
    int rc = nghttp2_session_client_new(&c->s, cb, c);
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
    if (rc != 0 || nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, settings, 1) != 0) {
        snprintf(err, cap, "nghttp2: %s", nghttp2_strerror(rc));
        if (c->s) nghttp2_session_del(c->s);
        zt_free(c);
        close(fd);
        return NULL;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        snprintf(err, cap, "epoll_ctl: %s", strerror(errno));
        nghttp2_session_del(c->s);
        zt_free(c);
        close(fd);
        return NULL;
    }
    flush(c); /* the connection preface and our SETTINGS */
    if (c->failed) {
        snprintf(err, cap, "%s: %s", authority, c->why);
        h2u_close(c);
        return NULL;
    }
    return c;
}

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NO_COPY_NAME     \
    }

int h2u_call(h2u_conn *c, const char *path, const uint8_t *msg, size_t len, int timeout_ms,
             h2u_done_fn done, void *arg)
{
    if (c->busy || c->failed) return -1;
    if (c->req_cap < len + 5) {
        uint8_t *r = zt_realloc(c->req, len + 5);
        if (!r) return -1;
        c->req = r;
        c->req_cap = len + 5;
    }
    c->req[0] = 0;
    c->req[1] = (uint8_t)(len >> 24);
    c->req[2] = (uint8_t)(len >> 16);
    c->req[3] = (uint8_t)(len >> 8);
    c->req[4] = (uint8_t)len;
    if (len) memcpy(c->req + 5, msg, len);
    c->req_len = len + 5;
    c->req_off = 0;
    char timeout[24];
    snprintf(timeout, sizeof(timeout), "%dm", timeout_ms);
    nghttp2_nv nva[8] = {NV(":method", "POST"),
                         NV(":scheme", "http"),
                         NV(":path", path),
                         NV(":authority", c->authority),
                         NV("content-type", "application/grpc"),
                         NV("te", "trailers"),
                         NV("grpc-timeout", timeout),
                         NV("authorization", c->auth)};
    size_t nnv = c->auth[0] ? 8 : 7;
    nghttp2_data_provider prd = {.read_callback = read_req};
    int32_t id = nghttp2_submit_request(c->s, NULL, nva, nnv, &prd, NULL);
    if (id < 0) {
        fail(c, nghttp2_strerror(id));
        return -1;
    }
    c->stream = id;
    c->busy = true;
    c->closed = false;
    c->body_len = 0;
    c->http_status = c->grpc_status = -1;
    c->reset_code = 0;
    c->grpc_message[0] = '\0';
    c->done = done;
    c->arg = arg;
    flush(c);
    if (c->failed) finish(c);
    return 0;
}

int h2u_on_event(h2u_conn *c, uint32_t events)
{
    if (!c->failed && (events & EPOLLIN)) {
        uint8_t buf[16384];
        for (;;) {
            ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
            if (n > 0) {
                ssize_t used = nghttp2_session_mem_recv(c->s, buf, (size_t)n);
                if (used < 0) {
                    fail(c, nghttp2_strerror((int)used));
                    break;
                }
                if ((size_t)n < sizeof(buf)) break;
            } else if (n == 0) {
                fail(c, "the server closed the connection");
                break;
            } else if (errno == EINTR) {
                continue;
            } else {
                if (errno != EAGAIN && errno != EWOULDBLOCK) fail(c, strerror(errno));
                break;
            }
        }
    }
    if (!c->failed && (events & (EPOLLERR | EPOLLHUP)) && !(events & EPOLLIN))
        fail(c, "socket error");
    if (!c->failed) flush(c); /* acknowledgements, window updates, queued request data */
    finish(c);
    return c->failed ? -1 : 0;
}

void h2u_close(h2u_conn *c)
{
    if (!c) return;
    fail(c, "closed by the caller");
    finish(c);
    epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    nghttp2_session_del(c->s);
    zt_free(c->req);
    zt_free(c->body);
    zt_free(c->out);
    zt_free(c);
}
