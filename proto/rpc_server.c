/* zerotrain: the RPC server over the gRPC C core. One completion queue, a few poller
 * threads, registered methods with several requests kept posted each, a catch-all that
 * answers UNIMPLEMENTED. Each call is one refcounted zt_rpc_call: the handler's duty to
 * answer, the close batch and every send batch in flight each hold a reference. */
#define _POSIX_C_SOURCE 200809L
#include "proto/rpc.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "proto/rpc_int.h"

#define DEFAULT_PREPOSTED 32
#define CATCHALL_PREPOSTED 4
#define DEFAULT_STREAM_QUEUE 64

typedef struct srv_method {
    zt_rpc_method m;
    void *handle; /* grpc_server_register_method */
} srv_method;

struct zt_rpc_server {
    grpc_server *server;
    grpc_completion_queue *cq;
    srv_method *methods;
    size_t n_methods;
    char *auth_value; /* the token every call must carry as "Bearer <token>", NULL = no auth */
    size_t auth_len;
    zt_rpc_authorize_fn authorize;
    void *authorize_user;
    bool client_certs; /* mutual TLS: calls may carry a verified client certificate */
    int port;
    int stream_queue_max;
    int n_pollers;
    pthread_t *pollers;
    atomic_int shutting_down;
    atomic_long outstanding; /* posted requests + live calls */
    atomic_long live;        /* accepted calls not yet freed */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool shutdown_notified; /* grpc_server_shutdown_and_notify's tag fired */
    bool shutdown_started;
    zt_rpc_tag shutdown_tag;
};

struct zt_rpc_call {
    zt_rpc_server *srv;
    srv_method *method; /* NULL: the catch-all (an unknown method) */
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    grpc_call_details details; /* catch-all only */
    ProtobufCMessage *request;
    atomic_int refs;
    zt_rpc_tag accept_tag, close_tag, send_tag;
    int close_cancelled; /* written by RECV_CLOSE_ON_SERVER */
    atomic_bool cancelled;
    bool accepted;
    uint64_t start_ns; /* when the request arrived (for zt_rpc_method.observe) */
    char who[96];      /* zt_rpc_call_identity */

    pthread_mutex_t mu; /* everything below, and grpc_call_start_batch of sends */
    bool closed;
    bool answered; /* reply / fail / finish was called */
    bool md_sent;
    bool sending; /* a send batch is in flight */
    bool inflight_final;
    bool dead;          /* cancelled or a send failed: refuse new messages */
    bool finish_queued; /* stream finish waits for the send in flight */
    zt_rpc_code finish_code;
    char *finish_msg;
    grpc_byte_buffer **queue; /* ring of pending stream messages */
    int qhead, qlen, qcap;
    grpc_byte_buffer *inflight_buf;
    grpc_slice status_slice;
    bool status_slice_set;
    void (*cancel_fn)(zt_rpc_call *, void *);
    void *cancel_arg;
    bool cancel_fired;
};

#define CONTAINER(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

static void post_request(zt_rpc_server *s, srv_method *m);
static void on_accept(zt_rpc_tag *tag, bool ok);
static void on_close(zt_rpc_tag *tag, bool ok);
static void on_send_done(zt_rpc_tag *tag, bool ok);

/* ---- call lifetime ------------------------------------------------------------------------ */

zt_rpc_call *zt_rpc_call_ref(zt_rpc_call *c)
{
    atomic_fetch_add(&c->refs, 1);
    return c;
}

static void call_free(zt_rpc_call *c)
{
    zt_rpc_server *s = c->srv;
    if (c->call) grpc_call_unref(c->call);
    grpc_metadata_array_destroy(&c->md);
    if (c->payload) grpc_byte_buffer_destroy(c->payload);
    if (!c->method) grpc_call_details_destroy(&c->details);
    zt_pb_free(c->request);
    for (int i = 0; i < c->qlen; i++)
        grpc_byte_buffer_destroy(c->queue[(c->qhead + i) % c->qcap]);
    zt_free(c->queue);
    if (c->inflight_buf) grpc_byte_buffer_destroy(c->inflight_buf);
    if (c->status_slice_set) grpc_slice_unref(c->status_slice);
    zt_free(c->finish_msg);
    pthread_mutex_destroy(&c->mu);
    if (c->accepted) atomic_fetch_sub(&s->live, 1);
    zt_free(c);
    if (atomic_fetch_sub(&s->outstanding, 1) == 1) {
        pthread_mutex_lock(&s->mu);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

void zt_rpc_call_unref(zt_rpc_call *c)
{
    if (c && atomic_fetch_sub(&c->refs, 1) == 1) call_free(c);
}

bool zt_rpc_call_cancelled(const zt_rpc_call *c)
{
    return atomic_load(&((zt_rpc_call *)c)->cancelled);
}

const char *zt_rpc_call_method(const zt_rpc_call *c)
{
    return c->method ? c->method->m.path : "(unknown)";
}

const char *zt_rpc_call_identity(const zt_rpc_call *c)
{
    return c->who;
}

int64_t zt_rpc_call_deadline_left_ms(const zt_rpc_call *c)
{
    gpr_timespec d = c->deadline;
    if (gpr_time_cmp(d, gpr_inf_future(d.clock_type)) == 0) return INT64_MAX;
    gpr_timespec dm = gpr_convert_clock_type(d, GPR_CLOCK_MONOTONIC);
    gpr_timespec left = gpr_time_sub(dm, gpr_now(GPR_CLOCK_MONOTONIC));
    int64_t ms = (int64_t)left.tv_sec * 1000 + left.tv_nsec / 1000000;
    return ms < 0 ? 0 : ms;
}

bool zt_rpc_call_metadata(const zt_rpc_call *c, const char *key, char *buf, size_t cap)
{
    for (size_t i = 0; i < c->md.count; i++) {
        if (grpc_slice_str_cmp(c->md.metadata[i].key, key) == 0) {
            grpc_slice v = c->md.metadata[i].value;
            size_t n = GRPC_SLICE_LENGTH(v);
            if (cap) {
                size_t k = n < cap - 1 ? n : cap - 1;
                memcpy(buf, GRPC_SLICE_START_PTR(v), k);
                buf[k] = '\0';
            }
            return true;
        }
    }
    return false;
}

void zt_rpc_call_peer(zt_rpc_call *c, char *buf, size_t cap)
{
    char *p = grpc_call_get_peer(c->call);
    snprintf(buf, cap, "%s", p ? p : "?");
    gpr_free(p);
}

void zt_rpc_call_on_cancel(zt_rpc_call *c, void (*fn)(zt_rpc_call *, void *), void *arg)
{
    bool now = false;
    pthread_mutex_lock(&c->mu);
    if (c->closed && atomic_load(&c->cancelled) && !c->cancel_fired) {
        c->cancel_fired = true;
        now = true;
    } else {
        c->cancel_fn = fn;
        c->cancel_arg = arg;
    }
    pthread_mutex_unlock(&c->mu);
    if (now) fn(c, arg);
}

/* ---- sending ------------------------------------------------------------------------------ */

static grpc_byte_buffer *bytes_to_bb(const void *bytes, size_t len)
{
    grpc_slice sl = grpc_slice_malloc(len);
    if (len) memcpy(GRPC_SLICE_START_PTR(sl), bytes, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return bb;
}

static grpc_byte_buffer *msg_to_bb(const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    grpc_slice sl = grpc_slice_malloc(n);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(sl));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return bb;
}

/* Starts a send batch: msg (may be NULL) and, when final, the status. Called with c->mu held.
 * A non-final batch takes a reference; a final batch carries the handler's duty reference.
 * Returns false when the batch could not start (the caller releases what it must). */
static bool start_send_locked(zt_rpc_call *c, grpc_byte_buffer *msg, bool final, zt_rpc_code code,
                              const char *details)
{
    grpc_op ops[3];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    if (!c->md_sent) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[n].data.send_initial_metadata.count = 0;
        n++;
    }
    if (msg) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = msg;
        n++;
    }
    if (final) {
        if (c->status_slice_set) grpc_slice_unref(c->status_slice);
        c->status_slice = grpc_slice_from_copied_string(details ? details : "");
        c->status_slice_set = true;
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.trailing_metadata_count = 0;
        ops[n].data.send_status_from_server.status = (grpc_status_code)code;
        ops[n].data.send_status_from_server.status_details = &c->status_slice;
        n++;
    }
    if (!final) zt_rpc_call_ref(c);
    c->sending = true;
    c->inflight_final = final;
    c->inflight_buf = msg;
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->send_tag, NULL);
    if (e != GRPC_CALL_OK) {
        ZT_WARN("rpc", "%s: cannot start a send batch (grpc_call_error %d)", zt_rpc_call_method(c),
                (int)e);
        c->sending = false;
        c->inflight_buf = NULL;
        if (msg) grpc_byte_buffer_destroy(msg);
        c->dead = true;
        if (!final) atomic_fetch_sub(&c->refs, 1); /* cannot be the last: the duty ref is held */
        return false;
    }
    c->md_sent = true;
    return true;
}

static void drop_queue_locked(zt_rpc_call *c)
{
    for (int i = 0; i < c->qlen; i++)
        grpc_byte_buffer_destroy(c->queue[(c->qhead + i) % c->qcap]);
    c->qlen = 0;
    c->qhead = 0;
}

/* Ends the call (duty reference handed to the final batch). msg may be NULL. */
static void answer(zt_rpc_call *c, grpc_byte_buffer *msg, zt_rpc_code code, const char *details,
                   bool drop_queued)
{
    bool release = false;
    pthread_mutex_lock(&c->mu);
    if (c->answered) {
        pthread_mutex_unlock(&c->mu);
        ZT_WARN("rpc", "%s: answered twice; the second answer is ignored", zt_rpc_call_method(c));
        if (msg) grpc_byte_buffer_destroy(msg);
        return;
    }
    c->answered = true;
    if (c->method && c->method->m.observe)
        c->method->m.observe(c->method->m.observe_user, zt_now_ns() - c->start_ns, code);
    if (drop_queued) drop_queue_locked(c);
    if (c->sending || c->qlen > 0) {
        /* a stream with messages in flight: finish after them */
        c->finish_queued = true;
        c->finish_code = code;
        c->finish_msg = zt_strdup(details ? details : "");
        if (msg) grpc_byte_buffer_destroy(msg);
    } else if (!start_send_locked(c, msg, true, code, details)) {
        release = true;
    }
    pthread_mutex_unlock(&c->mu);
    if (release) zt_rpc_call_unref(c);
}

void zt_rpc_reply(zt_rpc_call *c, const ProtobufCMessage *reply)
{
    answer(c, msg_to_bb(reply), ZT_RPC_OK, NULL, false);
}

void zt_rpc_reply_bytes(zt_rpc_call *c, const void *bytes, size_t len)
{
    answer(c, bytes_to_bb(bytes, len), ZT_RPC_OK, NULL, false);
}

void zt_rpc_fail(zt_rpc_call *c, zt_rpc_code code, const char *fmt, ...)
{
    char msg[ZT_ERRMSG_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (code == ZT_RPC_OK) code = ZT_RPC_UNKNOWN;
    ZT_DEBUG("rpc", "%s -> %s: %s", zt_rpc_call_method(c), zt_rpc_code_name(code), msg);
    answer(c, NULL, code, msg, true);
}

void zt_rpc_stream_finish(zt_rpc_call *c, zt_rpc_code code, const char *message)
{
    answer(c, NULL, code, message, false);
}

zt_status zt_rpc_stream_send(zt_rpc_call *c, const ProtobufCMessage *msg)
{
    grpc_byte_buffer *bb = msg_to_bb(msg);
    pthread_mutex_lock(&c->mu);
    if (c->dead || c->answered || atomic_load(&c->cancelled)) {
        pthread_mutex_unlock(&c->mu);
        grpc_byte_buffer_destroy(bb);
        return ZT_ERR_PEER;
    }
    if (c->sending) {
        if (!c->queue) {
            c->qcap = c->srv->stream_queue_max;
            c->queue = zt_calloc((size_t)c->qcap, sizeof(*c->queue));
            if (!c->queue) {
                pthread_mutex_unlock(&c->mu);
                grpc_byte_buffer_destroy(bb);
                return ZT_ERR_NOMEM;
            }
        }
        if (c->qlen >= c->qcap) {
            pthread_mutex_unlock(&c->mu);
            grpc_byte_buffer_destroy(bb);
            return ZT_ERR_NOSPACE;
        }
        c->queue[(c->qhead + c->qlen) % c->qcap] = bb;
        c->qlen++;
        pthread_mutex_unlock(&c->mu);
        return ZT_OK;
    }
    bool ok = start_send_locked(c, bb, false, ZT_RPC_OK, NULL);
    pthread_mutex_unlock(&c->mu);
    return ok ? ZT_OK : ZT_ERR_PEER;
}

static void on_send_done(zt_rpc_tag *tag, bool ok)
{
    zt_rpc_call *c = CONTAINER(tag, zt_rpc_call, send_tag);
    bool release_duty = false;
    pthread_mutex_lock(&c->mu);
    if (c->inflight_buf) {
        grpc_byte_buffer_destroy(c->inflight_buf);
        c->inflight_buf = NULL;
    }
    c->sending = false;
    bool final = c->inflight_final;
    if (!ok) c->dead = true;
    if (!final) {
        if (c->dead) drop_queue_locked(c);
        bool started = false;
        while (!started && c->qlen > 0) {
            grpc_byte_buffer *next = c->queue[c->qhead];
            c->qhead = (c->qhead + 1) % c->qcap;
            c->qlen--;
            started = start_send_locked(c, next, false, ZT_RPC_OK, NULL);
            if (!started) drop_queue_locked(c);
        }
        if (!started && c->finish_queued) {
            c->finish_queued = false;
            if (!start_send_locked(c, NULL, true, c->finish_code, c->finish_msg))
                release_duty = true;
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (release_duty) zt_rpc_call_unref(c);
    /* a non-final batch held its own reference; a final one held the duty reference */
    zt_rpc_call_unref(c);
}

/* ---- receiving ---------------------------------------------------------------------------- */

static void on_close(zt_rpc_tag *tag, bool ok)
{
    (void)ok;
    zt_rpc_call *c = CONTAINER(tag, zt_rpc_call, close_tag);
    void (*fn)(zt_rpc_call *, void *) = NULL;
    void *arg = NULL;
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    if (c->close_cancelled) {
        atomic_store(&c->cancelled, true);
        c->dead = true;
        if (c->cancel_fn && !c->cancel_fired) {
            c->cancel_fired = true;
            fn = c->cancel_fn;
            arg = c->cancel_arg;
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (fn) fn(c, arg);
    zt_rpc_call_unref(c);
}

static bool const_time_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t n = alen > blen ? alen : blen;
    volatile unsigned diff = (unsigned)(alen ^ blen);
    for (size_t i = 0; i < n; i++) {
        unsigned char x = i < alen ? (unsigned char)a[i] : 0;
        unsigned char y = i < blen ? (unsigned char)b[i] : 0;
        diff |= (unsigned)(x ^ y);
    }
    return diff == 0;
}

/* The token of the call's authorization metadata: *tok and *len ("Bearer <token>"; the whole
 * value for another scheme), true when there is an "authorization" entry. */
static bool find_bearer(const zt_rpc_call *c, const char **tok, size_t *len)
{
    *tok = NULL;
    *len = 0;
    for (size_t i = 0; i < c->md.count; i++) {
        if (grpc_slice_str_cmp(c->md.metadata[i].key, "authorization") != 0) continue;
        /* credentials = auth-scheme 1*SP token; the scheme is case-insensitive (RFC 7235
         * section 2.1, RFC 6750 section 2.1) */
        /* the call's own slice, not a copy: a short slice holds its bytes inline, and *tok
         * must point into memory that outlives this function */
        const grpc_slice *v = &c->md.metadata[i].value;
        const char *p = (const char *)GRPC_SLICE_START_PTR(*v);
        size_t n = GRPC_SLICE_LENGTH(*v), k = 0;
        static const char scheme[] = "bearer";
        bool bearer = n > sizeof(scheme) - 1;
        for (; bearer && k < sizeof(scheme) - 1; k++)
            bearer = (p[k] | 0x20) == scheme[k];
        if (bearer && p[k] == ' ') {
            while (k < n && p[k] == ' ')
                k++;
            *tok = p + k;
            *len = n - k;
        } else {
            /* another scheme (Basic ...): a credential that matches no token */
            *tok = p;
            *len = n;
        }
        return true;
    }
    return false;
}

/* The common name of the client certificate the call's connection presented and the server
 * verified against its client roots; false when there is none. */
static bool cert_common_name(const zt_rpc_call *c, char *out, size_t cap)
{
    grpc_auth_context *ctx = grpc_call_auth_context(c->call);
    if (!ctx) return false;
    bool ok = false;
    if (grpc_auth_context_peer_is_authenticated(ctx)) {
        grpc_auth_property_iterator it =
            grpc_auth_context_find_properties_by_name(ctx, GRPC_X509_CN_PROPERTY_NAME);
        const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
        if (p && p->value && p->value_length > 0 && p->value_length < cap) {
            memcpy(out, p->value, p->value_length);
            out[p->value_length] = '\0';
            ok = true;
        }
    }
    grpc_auth_context_release(ctx);
    return ok;
}

/* ZT_RPC_OK when the call may proceed, else the code with its message in msg. */
static zt_rpc_code check_auth(zt_rpc_server *s, zt_rpc_call *c, char *msg, size_t cap)
{
    zt_rpc_access access = c->method ? c->method->m.access : ZT_RPC_ACCESS_USER;
    const char *tok;
    size_t len;
    bool has = find_bearer(c, &tok, &len);
    char cn[160];
    const char *cert_name = s->client_certs && cert_common_name(c, cn, sizeof(cn)) ? cn : NULL;
    if (s->authorize)
        return s->authorize(s->authorize_user, access, tok, len, cert_name, c->who,
                            sizeof(c->who), msg, cap);
    if (!s->auth_value || access == ZT_RPC_ACCESS_OPEN) return ZT_RPC_OK;
    if (tok && const_time_equal(tok, len, s->auth_value, s->auth_len)) return ZT_RPC_OK;
    snprintf(msg, cap, "%s",
             has ? "invalid token: the coordinator did not accept the bearer token sent; check --token-file or ZT_TOKEN"
                 : "missing token: this coordinator requires 'authorization: Bearer <token>'; pass --token-file or set ZT_TOKEN");
    return ZT_RPC_UNAUTHENTICATED;
}

static void handle_call(zt_rpc_server *s, zt_rpc_call *c)
{
    c->start_ns = zt_now_ns();
    /* RECV_CLOSE_ON_SERVER in a batch of its own: it reports cancellation and lost peers. */
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->close_cancelled;
    zt_rpc_call_ref(c); /* the close batch */
    if (grpc_call_start_batch(c->call, &op, 1, &c->close_tag, NULL) != GRPC_CALL_OK) {
        ZT_WARN("rpc", "cannot start the close batch of %s", zt_rpc_call_method(c));
        atomic_fetch_sub(&c->refs, 1);
    }
    char why[400];
    zt_rpc_code ac = check_auth(s, c, why, sizeof(why));
    if (ac != ZT_RPC_OK) {
        zt_rpc_fail(c, ac, "%s", why);
        return;
    }
    if (!c->method) {
        char *m = grpc_slice_to_c_string(c->details.method);
        zt_rpc_fail(
            c, ZT_RPC_UNIMPLEMENTED,
            "unknown method %s: this zcoord serves zt.v1.Coordinator, zt.v1.AgentControl and grpc.health.v1.Health; check that client and server versions match",
            m ? m : "?");
        gpr_free(m);
        return;
    }
    const ProtobufCMessageDescriptor *type = c->method->m.request_type;
    if (!c->payload) {
        zt_rpc_fail(c, ZT_RPC_INVALID_ARGUMENT, "%s: the request carries no %s message",
                    c->method->m.path, type->name);
        return;
    }
    grpc_byte_buffer_reader rd;
    if (!grpc_byte_buffer_reader_init(&rd, c->payload)) {
        zt_rpc_fail(c, ZT_RPC_INVALID_ARGUMENT, "%s: cannot read the request payload",
                    c->method->m.path);
        return;
    }
    grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    size_t len = GRPC_SLICE_LENGTH(all);
    c->request = zt_pb_unpack(type, GRPC_SLICE_START_PTR(all), len);
    grpc_slice_unref(all);
    grpc_byte_buffer_destroy(c->payload);
    c->payload = NULL;
    if (!c->request) {
        zt_rpc_fail(
            c, ZT_RPC_INVALID_ARGUMENT,
            "%s: cannot decode the %zu-byte request as %s (malformed protobuf or a field of the wrong type); build the client from the same zerotrain.proto",
            c->method->m.path, len, type->name);
        return;
    }
    c->method->m.handler(c, c->request, c->method->m.user);
}

static zt_rpc_call *call_new(zt_rpc_server *s, srv_method *m)
{
    zt_rpc_call *c = zt_calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->srv = s;
    c->method = m;
    atomic_init(&c->refs, 1); /* the handler's duty to answer */
    c->accept_tag.fn = on_accept;
    c->close_tag.fn = on_close;
    c->send_tag.fn = on_send_done;
    grpc_metadata_array_init(&c->md);
    if (!m) grpc_call_details_init(&c->details);
    pthread_mutex_init(&c->mu, NULL);
    atomic_fetch_add(&s->outstanding, 1);
    return c;
}

static void post_request(zt_rpc_server *s, srv_method *m)
{
    if (atomic_load(&s->shutting_down)) return;
    zt_rpc_call *c = call_new(s, m);
    if (!c) {
        ZT_ERROR("rpc", "out of memory posting a request for %s", m ? m->m.path : "(catch-all)");
        return;
    }
    grpc_call_error e;
    if (m)
        e = grpc_server_request_registered_call(s->server, m->handle, &c->call, &c->deadline,
                                                &c->md, &c->payload, s->cq, s->cq, &c->accept_tag);
    else
        e = grpc_server_request_call(s->server, &c->call, &c->details, &c->md, s->cq, s->cq,
                                     &c->accept_tag);
    if (e != GRPC_CALL_OK) {
        ZT_WARN("rpc", "cannot post a request for %s (grpc_call_error %d)",
                m ? m->m.path : "(catch-all)", (int)e);
        c->call = NULL;
        call_free(c);
    }
}

static void on_accept(zt_rpc_tag *tag, bool ok)
{
    zt_rpc_call *c = CONTAINER(tag, zt_rpc_call, accept_tag);
    zt_rpc_server *s = c->srv;
    if (!ok) { /* shutting down: the request was never matched */
        call_free(c);
        return;
    }
    c->accepted = true;
    atomic_fetch_add(&s->live, 1);
    post_request(s, c->method);
    if (!c->method) c->deadline = c->details.deadline;
    handle_call(s, c);
}

/* ---- server ------------------------------------------------------------------------------- */

static void on_shutdown_notified(zt_rpc_tag *tag, bool ok)
{
    (void)ok;
    zt_rpc_server *s = CONTAINER(tag, zt_rpc_server, shutdown_tag);
    pthread_mutex_lock(&s->mu);
    s->shutdown_notified = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void *poller_main(void *arg)
{
    zt_rpc_server *s = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type == GRPC_OP_COMPLETE) {
            zt_rpc_tag *t = ev.tag;
            t->fn(t, ev.success != 0);
        }
    }
    return NULL;
}

static bool is_pem(const char *s, const char *what)
{
    return s && strstr(s, "-----BEGIN") && strstr(s, what);
}

zt_status zt_rpc_server_create(zt_rpc_server **out, const zt_rpc_server_config *cfg,
                               const zt_rpc_method *methods, size_t n_methods, zt_err *err)
{
    *out = NULL;
    if (!cfg || !cfg->addr || !cfg->addr[0])
        return zt_err_set(err, ZT_ERR_INVALID, "rpc server: no listen address given");
    bool tls = cfg->tls_cert_pem || cfg->tls_key_pem;
    if (tls &&
        (!is_pem(cfg->tls_cert_pem, "CERTIFICATE") || !is_pem(cfg->tls_key_pem, "PRIVATE KEY")))
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "TLS needs a PEM certificate chain and a PEM private key; check the files given to --tls-cert and --tls-key");
    zt_rpc_server *s = zt_calloc(1, sizeof(*s));
    if (!s) return zt_err_set(err, ZT_ERR_NOMEM, "rpc server: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->shutdown_tag.fn = on_shutdown_notified;
    s->stream_queue_max = cfg->stream_queue_max > 0 ? cfg->stream_queue_max : DEFAULT_STREAM_QUEUE;
    s->n_pollers = cfg->pollers > 0 ? cfg->pollers : 1;
    s->authorize = cfg->authorize;
    s->authorize_user = cfg->authorize_user;
    if (cfg->token && cfg->token[0] && !cfg->authorize) {
        s->auth_value = zt_strdup(cfg->token);
        if (!s->auth_value) goto fail_alloc;
        s->auth_len = strlen(s->auth_value);
    }
    s->methods = zt_calloc(n_methods ? n_methods : 1, sizeof(*s->methods));
    s->pollers = zt_calloc((size_t)s->n_pollers, sizeof(*s->pollers));
    if (!s->methods || !s->pollers) goto fail_alloc;
    s->n_methods = n_methods;

    zt_rpc_init_process();
    grpc_init();
    s->cq = grpc_completion_queue_create_for_next(NULL);
    int max_msg =
        (int)(cfg->max_message_bytes ? cfg->max_message_bytes : ZT_RPC_DEFAULT_MAX_MESSAGE);
    grpc_arg args[5];
    memset(args, 0, sizeof(args));
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_ALLOW_REUSEPORT;
    args[0].value.integer = 0;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[1].value.integer = max_msg;
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[2].value.integer = max_msg;
    args[3].type = GRPC_ARG_INTEGER;
    args[3].key = GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS;
    args[3].value.integer = 5000;
    args[4].type = GRPC_ARG_INTEGER;
    args[4].key = GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS;
    args[4].value.integer = 1;
    grpc_channel_args cargs = {.num_args = 5, .args = args};
    s->server = grpc_server_create(&cargs, NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    for (size_t i = 0; i < n_methods; i++) {
        s->methods[i].m = methods[i];
        s->methods[i].handle = grpc_server_register_method(
            s->server, methods[i].path, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
        if (!s->methods[i].handle) {
            zt_err_set(err, ZT_ERR_INTERNAL, "rpc server: cannot register method %s (twice?)",
                       methods[i].path);
            goto fail_server;
        }
    }
    grpc_server_credentials *creds;
    if (tls) {
        grpc_ssl_pem_key_cert_pair pair = {.private_key = cfg->tls_key_pem,
                                           .cert_chain = cfg->tls_cert_pem};
        /* with client roots a client may present a certificate, which is then verified; one
         * without a certificate still connects (users hold tokens) */
        s->client_certs = cfg->tls_client_ca_pem && cfg->tls_client_ca_pem[0];
        creds = grpc_ssl_server_credentials_create_ex(
            s->client_certs ? cfg->tls_client_ca_pem : NULL, &pair, 1,
            s->client_certs ? GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY
                            : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            NULL);
    } else {
        creds = grpc_insecure_server_credentials_create();
    }
    if (!creds) {
        zt_err_set(err, ZT_ERR_CONFIG,
                   "cannot use the TLS certificate/key given; check --tls-cert and --tls-key");
        goto fail_server;
    }
    s->port = grpc_server_add_http2_port(s->server, cfg->addr, creds);
    grpc_server_credentials_release(creds);
    if (s->port == 0) {
        zt_err_set(
            err, ZT_ERR_IO,
            "cannot listen on %s: the address is invalid or in use (or the TLS certificate and key do not match); choose another address",
            cfg->addr);
        goto fail_server;
    }
    if (strncmp(cfg->addr, "unix:", 5) == 0) s->port = 0;
    grpc_server_start(s->server);
    for (size_t i = 0; i < n_methods; i++) {
        int k = methods[i].preposted > 0 ? methods[i].preposted : DEFAULT_PREPOSTED;
        for (int j = 0; j < k; j++)
            post_request(s, &s->methods[i]);
    }
    for (int j = 0; j < CATCHALL_PREPOSTED; j++)
        post_request(s, NULL);
    for (int i = 0; i < s->n_pollers; i++) {
        if (pthread_create(&s->pollers[i], NULL, poller_main, s) != 0) {
            /* run with the pollers that started; one is enough */
            ZT_WARN("rpc", "could only start %d of %d poller threads", i, s->n_pollers);
            if (i == 0) {
                zt_err_set(err, ZT_ERR_INTERNAL, "rpc server: cannot start a poller thread");
                s->n_pollers = 0;
                zt_rpc_server_shutdown(s, 0);
                zt_rpc_server_destroy(s);
                return err ? err->status : ZT_ERR_INTERNAL;
            }
            s->n_pollers = i;
            break;
        }
    }
    *out = s;
    return ZT_OK;

fail_server:
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(s->cq);
    while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(s->cq);
    grpc_shutdown();
    zt_free(s->methods);
    zt_free(s->pollers);
    zt_free(s->auth_value);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    zt_free(s);
    return err ? err->status : ZT_ERR_IO;
fail_alloc:
    zt_free(s->methods);
    zt_free(s->pollers);
    zt_free(s->auth_value);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    zt_free(s);
    return zt_err_set(err, ZT_ERR_NOMEM, "rpc server: out of memory");
}

int zt_rpc_server_port(const zt_rpc_server *s)
{
    return s ? s->port : 0;
}

static void timespec_in(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

void zt_rpc_server_shutdown(zt_rpc_server *s, int grace_ms)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    if (s->shutdown_started) {
        pthread_mutex_unlock(&s->mu);
        return;
    }
    s->shutdown_started = true;
    atomic_store(&s->shutting_down, 1);
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
    /* wait for the calls in flight (up to grace_ms); idle client connections alone do not
     * deserve the wait: once no call is open, cancel_all lets the notify fire at once */
    for (int waited = 0; !s->shutdown_notified && s->n_pollers > 0 && waited < grace_ms;
         waited += 10) {
        if (atomic_load(&s->live) == 0) break;
        struct timespec until;
        timespec_in(&until, 10);
        pthread_cond_timedwait(&s->cv, &s->mu, &until);
    }
    bool done = s->shutdown_notified;
    long open = atomic_load(&s->live);
    pthread_mutex_unlock(&s->mu);
    if (!done) { /* open streams keep the notify from firing: cancel them */
        if (open)
            ZT_INFO("rpc", "shutdown: grace period over, cancelling %ld call(s) still open", open);
        grpc_server_cancel_all_calls(s->server);
    }
}

void zt_rpc_server_destroy(zt_rpc_server *s)
{
    if (!s) return;
    zt_rpc_server_shutdown(s, 0);
    pthread_mutex_lock(&s->mu);
    int waited = 0;
    while ((!s->shutdown_notified || atomic_load(&s->outstanding) > 0) && s->n_pollers > 0) {
        struct timespec until;
        timespec_in(&until, 1000);
        if (pthread_cond_timedwait(&s->cv, &s->mu, &until) == ETIMEDOUT && ++waited % 10 == 0)
            ZT_WARN("rpc",
                    "server shutdown: still waiting for %ld call(s) to be answered and released",
                    (long)atomic_load(&s->outstanding));
    }
    pthread_mutex_unlock(&s->mu);
    grpc_completion_queue_shutdown(s->cq);
    for (int i = 0; i < s->n_pollers; i++)
        pthread_join(s->pollers[i], NULL);
    if (s->n_pollers == 0) poller_main(s); /* nobody drained the queue: do it here */
    grpc_server_destroy(s->server);
    grpc_completion_queue_destroy(s->cq);
    grpc_shutdown();
    zt_free(s->methods);
    zt_free(s->pollers);
    zt_free(s->auth_value);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    zt_free(s);
}
