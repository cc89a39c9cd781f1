/* zerotrain: the TCP collective backend for CPU ranks. Ring reduce-scatter and ring all-gather
 * over non-blocking sockets driven by poll() on one progress thread per communicator, with a
 * fixed reduction order (bitwise-identical results), a checked header on every message and a
 * small control channel per neighbour that tells every rank why the ring broke.
 * The timeout counts inactivity: a collective fails once no byte has moved for timeout_ms, so
 * a large buffer on a slow link never times out while it progresses. This file holds the
 * collectives, the progress thread and the ring's setup; comm_tcp_step.c the ring step. */
#define _POSIX_C_SOURCE 200809L
#include "comm_tcp_int.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../../common/alloc.h"
#include "../../common/log.h"
#include "../../common/timeutil.h"

/* ---- the collectives ---- */

static void op_chunk(const zt_comm_req *r, int world, int i, size_t *off, size_t *len)
{
    if (r->kind == ZT_COLL_ALLREDUCE) {
        zt_comm_chunk(r->count, world, i, off, len);
    } else {
        *off = (size_t)i * r->count;
        *len = r->count;
    }
}

/* Scratch a ring reduce-scatter of `chunk` bytes per rank needs: partials alternate between
 * two slots, and recv serves as one of them unless the call is in place on 4+ ranks. */
static size_t rs_scratch_bytes(int world, size_t chunk, bool in_place)
{
    if (world < 3) return 0;
    size_t slots = in_place && world >= 4 ? 2 : 1;
    return slots * chunk + 1;
}

/* Publishes the host memory held for staging and scratch (zt_comm_stats.buffer_bytes). */
static void publish_buffers(zt_comm *c, const tcp_impl *t)
{
    pthread_mutex_lock(&c->lock);
    c->stats.buffer_bytes = (t->stage ? STAGE_BYTES : 0) + t->scratch_cap;
    pthread_mutex_unlock(&c->lock);
}

static unsigned char *scratch_get(zt_comm *c, tcp_impl *t, size_t bytes)
{
    if (bytes <= t->scratch_cap) return t->scratch;
    zt_free(t->scratch);
    t->scratch_cap = 0;
    t->scratch = zt_aligned_alloc(64, bytes);
    if (t->scratch) t->scratch_cap = bytes;
    publish_buffers(c, t);
    return t->scratch;
}

static uint64_t tcp_buffer_bytes(int world, size_t max_rs_chunk_bytes)
{
    size_t scratch = max_rs_chunk_bytes ? rs_scratch_bytes(world, max_rs_chunk_bytes, true) : 0;
    return STAGE_BYTES + scratch;
}

/* Ring reduce-scatter over N chunks of `src`: rank `me` ends with the sum of chunk `me` in
 * final_out. Partial sums go to src itself (allreduce, in place) or to two alternating slots. */
static zt_status rs_phase(zt_comm *c, tcp_impl *t, zt_comm_req *r, const unsigned char *src,
                          unsigned char *final_out, unsigned char *slot_a, unsigned char *slot_b,
                          uint64_t op_start, blame *b)
{
    int n = c->world, me = c->rank;
    size_t es = zt_dtype_size(r->dt);
    const unsigned char *prev_partial = NULL;
    for (int s = 0; s <= n - 2; s++) {
        int cs = zt_comm_tcp_mod(me - s - 1, n), cr = zt_comm_tcp_mod(me - s - 2, n);
        size_t soff, slen, roff, rlen;
        op_chunk(r, n, cs, &soff, &slen);
        op_chunk(r, n, cr, &roff, &rlen);
        unsigned char *out;
        if (s == n - 2)
            out = final_out;
        else if (r->kind == ZT_COLL_ALLREDUCE)
            out = (unsigned char *)src + roff * es;
        else
            out = (s % 2 == 0) ? slot_a : slot_b;
        xfer x;
        memset(&x, 0, sizeof(x));
        zt_comm_tcp_xfer_send(&x, r, me, (uint32_t)s, s == 0 ? src + soff * es : prev_partial,
                              slen * es);
        zt_comm_tcp_xfer_recv_reduce(&x, (uint32_t)s, rlen * es, out, src + roff * es);
        zt_status st = zt_comm_tcp_run_xfer(c, t, r, &x, op_start, b);
        if (st != ZT_OK) return st;
        prev_partial = out;
    }
    return ZT_OK;
}

/* Ring all-gather in place over buf: chunk `me` is already there. */
static zt_status ag_phase(zt_comm *c, tcp_impl *t, zt_comm_req *r, unsigned char *buf,
                          uint32_t step0, uint64_t op_start, blame *b)
{
    int n = c->world, me = c->rank;
    size_t es = zt_dtype_size(r->dt);
    for (int s = 0; s <= n - 2; s++) {
        int cs = zt_comm_tcp_mod(me - s, n), cr = zt_comm_tcp_mod(me - s - 1, n);
        size_t soff, slen, roff, rlen;
        op_chunk(r, n, cs, &soff, &slen);
        op_chunk(r, n, cr, &roff, &rlen);
        xfer x;
        memset(&x, 0, sizeof(x));
        zt_comm_tcp_xfer_send(&x, r, me, step0 + (uint32_t)s, buf + soff * es, slen * es);
        zt_comm_tcp_xfer_recv(&x, step0 + (uint32_t)s, rlen * es, buf + roff * es);
        zt_status st = zt_comm_tcp_run_xfer(c, t, r, &x, op_start, b);
        if (st != ZT_OK) return st;
    }
    return ZT_OK;
}

static zt_status run_req(zt_comm *c, tcp_impl *t, zt_comm_req *r, blame *b)
{
    int n = c->world, me = c->rank;
    size_t es = zt_dtype_size(r->dt);
    uint64_t op_start = zt_now_ns();
    switch (r->kind) {
    case ZT_COLL_ALLREDUCE: {
        unsigned char *buf = r->recv;
        size_t off, len;
        zt_comm_chunk(r->count, n, me, &off, &len);
        zt_status st = rs_phase(c, t, r, buf, buf + off * es, NULL, NULL, op_start, b);
        if (st != ZT_OK) return st;
        return ag_phase(c, t, r, buf, (uint32_t)(n - 1), op_start, b);
    }
    case ZT_COLL_REDUCE_SCATTER: {
        const unsigned char *send = r->send;
        unsigned char *recv = r->recv;
        size_t chunk = r->count * es;
        bool in_place = recv == send + (size_t)me * chunk;
        /* partials alternate between two slots; the last one before the final step must not
         * be recv. Out of place, recv itself can serve as one slot. */
        unsigned char *a = NULL, *bb = NULL;
        if (n >= 3) {
            size_t need = rs_scratch_bytes(n, chunk, in_place);
            unsigned char *s0 = scratch_get(c, t, need);
            if (!s0) {
                zt_comm_tcp_set_blame(b, c, r, me, ZT_ERR_NOMEM,
                                      "out of memory for %zu bytes of scratch", need);
                return ZT_ERR_NOMEM;
            }
            /* X_s for s < n-2: the slot used at s = n-3 is always scratch */
            unsigned char *other = in_place ? s0 + chunk : recv;
            if ((n - 3) % 2 == 0) {
                a = s0;
                bb = other;
            } else {
                a = other;
                bb = s0;
            }
        }
        return rs_phase(c, t, r, send, recv, a, bb, op_start, b);
    }
    case ZT_COLL_ALLGATHER: {
        unsigned char *recv = r->recv;
        size_t chunk = r->count * es;
        if (chunk && (const unsigned char *)r->send != recv + (size_t)me * chunk)
            memmove(recv + (size_t)me * chunk, r->send, chunk);
        return ag_phase(c, t, r, recv, 0, op_start, b);
    }
    case ZT_COLL_BROADCAST: {
        int pos = zt_comm_tcp_mod(me - r->root, n);
        xfer x;
        memset(&x, 0, sizeof(x));
        if (pos != 0) zt_comm_tcp_xfer_recv(&x, 0, r->count, r->recv);
        if (pos != n - 1) {
            zt_comm_tcp_xfer_send(&x, r, me, 0, r->recv, r->count);
            if (pos != 0) x.s_avail = &x.r_off;
        }
        return zt_comm_tcp_run_xfer(c, t, r, &x, op_start, b);
    }
    case ZT_COLL_BARRIER:
        for (int s = 0; s <= n - 2; s++) {
            xfer x;
            memset(&x, 0, sizeof(x));
            zt_comm_tcp_xfer_send(&x, r, me, (uint32_t)s, NULL, 0);
            zt_comm_tcp_xfer_recv(&x, (uint32_t)s, 0, NULL);
            zt_status st = zt_comm_tcp_run_xfer(c, t, r, &x, op_start, b);
            if (st != ZT_OK) return st;
        }
        return ZT_OK;
    default:
        zt_comm_tcp_set_blame(b, c, r, me, ZT_ERR_INVALID, "unknown collective kind %d",
                              (int)r->kind);
        return ZT_ERR_INVALID;
    }
}

/* The message this rank reports for a failure described by b. */
static void blame_to_err(const zt_comm *c, const zt_comm_req *r, const blame *b, zt_err *e)
{
    char mine[CTL_DESC_MAX];
    zt_comm_req_describe(r, mine, sizeof(mine));
    zt_status st = b->st == ZT_ERR_CANCELED && b->detector != c->rank ? ZT_ERR_PEER : b->st;
    if (b->detector == c->rank)
        zt_err_set(e, st, "%s: %s", mine, b->detail);
    else if (b->seq == r->seq || !b->desc[0])
        zt_err_set(e, st, "%s: %s (reported by rank %d)", mine, b->detail, b->detector);
    else
        zt_err_set(e, st, "%s: %s (reported by rank %d during %s)", mine, b->detail, b->detector,
                   b->desc);
}

static void *progress_main(void *arg)
{
    zt_comm *c = arg;
    tcp_impl *t = c->impl;
    for (;;) {
        pthread_mutex_lock(&c->lock);
        while (!t->q_head && !t->stop)
            pthread_cond_wait(&c->cond, &c->lock);
        zt_comm_req *r = t->q_head;
        if (!r) {
            pthread_mutex_unlock(&c->lock);
            break;
        }
        t->q_head = r->next_queued;
        if (!t->q_head) t->q_tail = NULL;
        r->next_queued = NULL;
        t->running = r;
        bool broken = c->broken;
        zt_err first = c->first_err;
        pthread_mutex_unlock(&c->lock);

        zt_status st;
        zt_err e;
        zt_err_clear(&e);
        if (broken) {
            char d[CTL_DESC_MAX];
            zt_comm_req_describe(r, d, sizeof(d));
            st = zt_err_set(&e, first.status, "%s not run, the communicator failed earlier: %s", d,
                            first.msg);
        } else {
            zt_comm_req_started(c, r);
            blame b;
            memset(&b, 0, sizeof(b));
            double t0 = zt_now_s();
            st = run_req(c, t, r, &b);
            r->busy_s = zt_now_s() - t0;
            if (st != ZT_OK) {
                const blame *why = t->have_remote ? &t->remote : &b;
                blame_to_err(c, r, why, &e);
                st = e.status;
                ZT_DEBUG("comm", "%s", e.msg);
                zt_comm_tcp_tell_peers(t, why, r->seq);
            }
        }
        if (st == ZT_OK) atomic_store(&t->done_seq, r->seq);
        /* no longer pending for destroy; once finished, r may be freed by its waiter */
        pthread_mutex_lock(&c->lock);
        t->running = NULL;
        pthread_mutex_unlock(&c->lock);
        zt_comm_req_finish(c, r, st, &e);
    }
    return NULL;
}

/* ---- world of one: copies only ---- */

static void run_local(zt_comm_req *r)
{
    size_t bytes = r->count * zt_dtype_size(r->dt);
    if ((r->kind == ZT_COLL_REDUCE_SCATTER || r->kind == ZT_COLL_ALLGATHER) && bytes &&
        r->send != r->recv)
        memmove(r->recv, r->send, bytes);
}

/* ---- ring setup ---- */

static int ring_hello(int fd, const char *session, int from, int world, int channel,
                      uint64_t deadline, const char *who, zt_err *err)
{
    size_t sl = strlen(session);
    unsigned char h[RING_HELLO_LEN];
    zt_comm_put_u32(h, RING_MAGIC);
    zt_comm_put_u32(h + 4, (uint32_t)from);
    zt_comm_put_u32(h + 8, (uint32_t)world);
    zt_comm_put_u32(h + 12, (uint32_t)channel);
    zt_comm_put_u32(h + 16, (uint32_t)sl);
    if (zt_comm_net_write_all(fd, h, sizeof(h), deadline, who, err) != 0) return -1;
    return zt_comm_net_write_all(fd, session, sl, deadline, who, err);
}

static int ring_read_ack(int fd, uint64_t deadline, const char *who, int rank, zt_err *err)
{
    unsigned char a[RING_ACK_LEN];
    if (zt_comm_net_read_all(fd, a, sizeof(a), deadline, who, err) != 0) return -1;
    uint32_t st = zt_comm_get_u32(a + 4), len = zt_comm_get_u32(a + 8);
    if (zt_comm_get_u32(a) != RING_MAGIC || len > 2048) {
        zt_err_set(err, ZT_ERR_PEER, "%s answered the ring connection with garbage", who);
        return -1;
    }
    if (st == ZT_OK) return 0;
    char msg[2049];
    if (zt_comm_net_read_all(fd, msg, len, deadline, who, err) != 0) return -1;
    msg[len] = '\0';
    zt_err_set(err, st < ZT_STATUS_COUNT ? (zt_status)st : ZT_ERR_PEER,
               "%s refused rank %d's ring connection: %s", who, rank, msg);
    return -1;
}

static void ring_answer(int fd, zt_status st, const char *msg, uint64_t deadline)
{
    zt_err e;
    size_t len = msg ? strlen(msg) : 0;
    unsigned char a[RING_ACK_LEN];
    zt_comm_put_u32(a, RING_MAGIC);
    zt_comm_put_u32(a + 4, (uint32_t)st);
    zt_comm_put_u32(a + 8, (uint32_t)len);
    if (zt_comm_net_write_all(fd, a, sizeof(a), deadline, "a ring peer", &e) == 0 && len)
        (void)zt_comm_net_write_all(fd, msg, len, deadline, "a ring peer", &e);
}

/* Accepts the data and control connections of prev on lfd. */
static zt_status ring_accept(zt_comm *c, tcp_impl *t, int lfd, uint64_t deadline, zt_err *err)
{
    char who[64];
    snprintf(who, sizeof(who), "rank %d", t->prev);
    char *sess = NULL;
    zt_status st = ZT_OK;
    while (t->data_prev < 0 || t->ctl_prev.fd < 0) {
        zt_err e;
        int fd = zt_comm_net_accept(lfd, deadline, who, &e);
        if (fd < 0)
            return zt_err_set(err, e.status,
                              "rank %d: %s (its ring connection never came; did it fail to start?)",
                              c->rank, e.msg);
        unsigned char h[RING_HELLO_LEN];
        uint64_t d2 =
            zt_now_ns() + 5000000000ull < deadline ? zt_now_ns() + 5000000000ull : deadline;
        if (zt_comm_net_read_all(fd, h, sizeof(h), d2, who, &e) != 0 ||
            zt_comm_get_u32(h) != RING_MAGIC || zt_comm_get_u32(h + 16) > 4096) {
            ZT_WARN("comm", "rank %d: dropped a stray connection on the ring port", c->rank);
            close(fd);
            continue;
        }
        int from = (int)zt_comm_get_u32(h + 4);
        int world = (int)zt_comm_get_u32(h + 8);
        int channel = (int)zt_comm_get_u32(h + 12);
        size_t sl = zt_comm_get_u32(h + 16);
        sess = zt_malloc(sl + 1);
        if (!sess) {
            close(fd);
            return zt_err_set(err, ZT_ERR_NOMEM, "ring setup: out of memory");
        }
        if (zt_comm_net_read_all(fd, sess, sl, d2, who, &e) != 0) {
            close(fd);
            zt_free(sess);
            sess = NULL;
            continue;
        }
        sess[sl] = '\0';
        char msg[700];
        msg[0] = '\0';
        zt_status why = ZT_OK;
        if (strcmp(sess, c->session) != 0) {
            snprintf(msg, sizeof(msg),
                     "rank %d runs session '%.200s' but the connecting rank presents '%.200s'",
                     c->rank, c->session, sess);
            why = ZT_ERR_AUTH;
        } else if (from != t->prev || world != c->world || (channel != 0 && channel != 1)) {
            snprintf(msg, sizeof(msg),
                     "rank %d expects its ring predecessor rank %d of %d, not rank %d of %d",
                     c->rank, t->prev, c->world, from, world);
            why = ZT_ERR_CONFIG;
        } else if ((channel == 0 && t->data_prev >= 0) || (channel == 1 && t->ctl_prev.fd >= 0)) {
            snprintf(msg, sizeof(msg), "rank %d connected twice", from);
            why = ZT_ERR_CONFIG;
        }
        zt_free(sess);
        sess = NULL;
        if (why != ZT_OK) {
            ZT_WARN("comm", "rank %d: refused a ring connection: %s", c->rank, msg);
            ring_answer(fd, why, msg, d2);
            close(fd);
            continue;
        }
        ring_answer(fd, ZT_OK, NULL, d2);
        if (channel == 0)
            t->data_prev = fd;
        else
            t->ctl_prev.fd = fd;
    }
    return st;
}

static zt_status tcp_init(zt_comm *c, const zt_comm_opts *opts, zt_err *err)
{
    zt_status st;
    tcp_impl *t = zt_calloc(1, sizeof(*t));
    if (!t) return zt_err_set(err, ZT_ERR_NOMEM, "comm tcp: out of memory");
    t->data_next = t->data_prev = t->ctl_next.fd = t->ctl_prev.fd = -1;
    atomic_init(&t->aborted, 0);
    atomic_init(&t->done_seq, 0);
    if (pthread_mutex_init(&t->ctl_lock, NULL) != 0) {
        zt_free(t);
        return zt_err_set(err, ZT_ERR_INTERNAL, "comm tcp: pthread_mutex_init failed");
    }
    c->impl = t;
    if (c->world == 1) return ZT_OK;

    int n = c->world, me = c->rank;
    t->next = (me + 1) % n;
    t->prev = (me + n - 1) % n;
    zt_comm_peer_addr *table = NULL;
    int lfd = -1;
    uint16_t port = 0;
    t->stage = zt_aligned_alloc(64, STAGE_BYTES);
    table = zt_calloc((size_t)n, sizeof(*table));
    if (!t->stage || !table) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "comm tcp: out of memory");
        goto fail;
    }
    lfd = zt_comm_net_listen_any(&port, err);
    if (lfd < 0) {
        st = err ? err->status : ZT_ERR_IO;
        goto fail;
    }
    char rank0_host[64] = "";
    st = zt_comm_net_rendezvous(opts, c->session, c->timeout_ms, port, NULL, 0, table, rank0_host,
                                sizeof(rank0_host), err);
    if (st != ZT_OK) goto fail;
    if (me != 0) snprintf(table[0].host, sizeof(table[0].host), "%s", rank0_host);

    uint64_t deadline = zt_now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
    char who[96];
    snprintf(who, sizeof(who), "rank %d (ring successor)", t->next);
    zt_err e;
    for (int ch = 0; ch < 2; ch++) {
        int fd =
            zt_comm_net_connect_retry(table[t->next].host, table[t->next].port, deadline, who, &e);
        if (fd < 0 || ring_hello(fd, c->session, me, n, ch, deadline, who, &e) != 0) {
            if (fd >= 0) close(fd);
            st = zt_err_set(err, e.status, "ring setup: rank %d: %s", me, e.msg);
            goto fail;
        }
        if (ch == 0)
            t->data_next = fd;
        else
            t->ctl_next.fd = fd;
    }
    st = ring_accept(c, t, lfd, deadline, err);
    if (st != ZT_OK) goto fail;
    if (ring_read_ack(t->data_next, deadline, who, me, &e) != 0 ||
        ring_read_ack(t->ctl_next.fd, deadline, who, me, &e) != 0) {
        st = zt_err_set(err, e.status, "ring setup: %s", e.msg);
        goto fail;
    }
    close(lfd);
    lfd = -1;
    zt_free(table);
    table = NULL;

    publish_buffers(c, t);
    if (pthread_create(&t->thread, NULL, progress_main, c) != 0) {
        st = zt_err_set(err, ZT_ERR_INTERNAL, "comm tcp: cannot start the progress thread");
        goto fail;
    }
    t->thread_started = true;
    return ZT_OK;

fail:
    if (lfd >= 0) close(lfd);
    zt_free(table);
    if (t->data_next >= 0) close(t->data_next);
    if (t->data_prev >= 0) close(t->data_prev);
    if (t->ctl_next.fd >= 0) close(t->ctl_next.fd);
    if (t->ctl_prev.fd >= 0) close(t->ctl_prev.fd);
    zt_free(t->stage);
    pthread_mutex_destroy(&t->ctl_lock);
    zt_free(t);
    c->impl = NULL;
    return st;
}

static blame abort_blame(const zt_comm *c, const zt_err *why)
{
    blame b;
    memset(&b, 0, sizeof(b));
    b.origin = c->rank;
    b.detector = c->rank;
    b.st = why && why->status != ZT_OK ? why->status : ZT_ERR_CANCELED;
    zt_comm_tcp_str_copy(b.detail, sizeof(b.detail), why ? why->msg : "communicator aborted");
    return b;
}

static void tcp_abort(zt_comm *c, const zt_err *why)
{
    tcp_impl *t = c->impl;
    if (!t) return;
    atomic_store(&t->aborted, 1);
    if (c->world > 1) {
        blame b = abort_blame(c, why);
        zt_comm_tcp_tell_peers(t, &b, atomic_load(&t->done_seq) + 1);
    }
    pthread_mutex_lock(&c->lock);
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

static void tcp_fini(zt_comm *c)
{
    tcp_impl *t = c->impl;
    if (!t) return;
    if (t->thread_started) {
        pthread_mutex_lock(&c->lock);
        t->stop = true;
        int pending = 0;
        for (zt_comm_req *q = t->q_head; q; q = q->next_queued)
            pending++;
        if (t->running) pending++;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        if (pending) {
            zt_err why;
            zt_err_set(&why, ZT_ERR_CANCELED,
                       "rank %d destroyed the communicator with %d collective(s) pending", c->rank,
                       pending);
            zt_comm_set_broken(c, &why);
            tcp_abort(c, &why);
        }
        pthread_join(t->thread, NULL);
    }
    if (t->data_next >= 0) close(t->data_next);
    if (t->data_prev >= 0) close(t->data_prev);
    if (t->ctl_next.fd >= 0) close(t->ctl_next.fd);
    if (t->ctl_prev.fd >= 0) close(t->ctl_prev.fd);
    zt_free(t->stage);
    zt_free(t->scratch);
    pthread_mutex_destroy(&t->ctl_lock);
    zt_free(t);
    c->impl = NULL;
}

static zt_status tcp_submit(zt_comm *c, zt_comm_req *r, zt_err *err)
{
    (void)err;
    tcp_impl *t = c->impl;
    if (c->world == 1) {
        zt_comm_req_started(c, r);
        run_local(r);
        zt_comm_req_finish(c, r, ZT_OK, NULL);
        return ZT_OK;
    }
    pthread_mutex_lock(&c->lock);
    if (t->q_tail)
        t->q_tail->next_queued = r;
    else
        t->q_head = r;
    t->q_tail = r;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    return ZT_OK;
}

static void tcp_wait(zt_comm *c, zt_comm_req *r)
{
    pthread_mutex_lock(&c->lock);
    while (r->state == ZT_REQ_QUEUED || r->state == ZT_REQ_RUNNING)
        pthread_cond_wait(&c->cond, &c->lock);
    pthread_mutex_unlock(&c->lock);
}

static const zt_comm_backend tcp_backend = {
    .name = "tcp",
    .init = tcp_init,
    .fini = tcp_fini,
    .abort = tcp_abort,
    .submit = tcp_submit,
    .wait = tcp_wait,
    .req_free = NULL,
    .buffer_bytes = tcp_buffer_bytes,
};

const zt_comm_backend *zt_comm_backend_tcp(void)
{
    return &tcp_backend;
}
