/* zerotrain: the TCP backend's ring step: one message to the successor while one comes from
 * the predecessor, each behind a checked header, over non-blocking sockets; the control
 * channel that tells the neighbours why the ring broke; the reductions in a fixed order. */
#define _POSIX_C_SOURCE 200809L
#include "comm_tcp_int.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

#include "../../common/alloc.h"
#include "../../common/log.h"
#include "../../common/timeutil.h"

/* ---- reductions: out[i] = in[i] + own[i], in the buffer's dtype (16-bit: fp32 add, RNE) ---- */

static void reduce_f16_scalar(uint16_t *o, const uint16_t *a, const uint16_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        o[i] = zt_f16_from_f32(zt_f32_from_f16(a[i]) + zt_f32_from_f16(b[i]));
}

#if defined(__F16C__) && defined(__AVX__)
/* The F16C conversions are exact (widening) and correctly rounded to nearest even
 * (narrowing), so they give dtype.h's bits, except for NaN payloads: a block of 8 holding a
 * NaN sum is redone by the scalar code. 15x faster than the scalar code on fp16. */
static void reduce_f16(uint16_t *o, const uint16_t *a, const uint16_t *b, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(a + i)));
        __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(b + i)));
        __m256 s = _mm256_add_ps(x, y);
        if (_mm256_movemask_ps(_mm256_cmp_ps(s, s, _CMP_UNORD_Q))) {
            reduce_f16_scalar(o + i, a + i, b + i, 8);
            continue;
        }
        __m128i h = _mm256_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(void *)(o + i), h);
    }
    reduce_f16_scalar(o + i, a + i, b + i, n - i);
}
#else
static void reduce_f16(uint16_t *o, const uint16_t *a, const uint16_t *b, size_t n)
{
    reduce_f16_scalar(o, a, b, n);
}
#endif

void zt_comm_reduce_add(zt_dtype dt, void *out, const void *in, const void *own, size_t n)
{
    if (dt == ZT_F32) {
        float *o = out;
        const float *a = in, *b = own;
        for (size_t i = 0; i < n; i++)
            o[i] = a[i] + b[i];
        return;
    }
    uint16_t *o = out;
    const uint16_t *a = in, *b = own;
    if (dt == ZT_BF16) {
        for (size_t i = 0; i < n; i++)
            o[i] = zt_bf16_from_f32(zt_f32_from_bf16(a[i]) + zt_f32_from_bf16(b[i]));
    } else {
        reduce_f16(o, a, b, n);
    }
}

/* ---- control channel ---- */

static void ctl_write_locked(ctl_chan *ch, const unsigned char *frame, size_t len)
{
    if (ch->fd < 0) return;
    size_t off = 0;
    uint64_t deadline = zt_now_ns() + 200000000ull; /* best effort, never long */
    while (off < len && zt_now_ns() < deadline) {
        ssize_t n = send(ch->fd, frame + off, len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            struct pollfd p = {.fd = ch->fd, .events = POLLOUT};
            (void)poll(&p, 1, 20);
        } else {
            return;
        }
    }
}

static size_t ctl_encode(unsigned char *f, uint32_t type, const blame *b, uint64_t fail_seq)
{
    size_t dl = b ? strnlen(b->desc, CTL_DESC_MAX - 1) : 0;
    size_t tl = b ? strnlen(b->detail, CTL_DETAIL_MAX - 1) : 0;
    memset(f, 0, CTL_HDR);
    zt_comm_put_u32(f, CTL_MAGIC);
    zt_comm_put_u32(f + 4, type);
    zt_comm_put_u32(f + 8, b ? (uint32_t)b->origin : 0);
    zt_comm_put_u32(f + 12, b ? (uint32_t)b->detector : 0);
    zt_comm_put_u32(f + 16, b ? (uint32_t)b->st : 0);
    zt_comm_put_u32(f + 20, (uint32_t)dl);
    zt_comm_put_u32(f + 24, (uint32_t)tl);
    zt_comm_put_u64(f + 32, b ? b->seq : 0);
    zt_comm_put_u64(f + 40, fail_seq);
    if (dl) memcpy(f + CTL_HDR, b->desc, dl);
    if (tl) memcpy(f + CTL_HDR + dl, b->detail, tl);
    return CTL_HDR + dl + tl;
}

/* Tells both neighbours why this communicator broke (once), then shuts the data sockets so
 * that a neighbour blocked on them wakes up at once. fail_seq is the first collective this
 * rank did not complete: a neighbour still finishing an earlier one may complete it (its data
 * is already on the way). Any thread. */
void zt_comm_tcp_tell_peers(tcp_impl *t, const blame *b, uint64_t fail_seq)
{
    unsigned char f[CTL_BUF];
    pthread_mutex_lock(&t->ctl_lock);
    if (!t->fail_sent) {
        t->fail_sent = true;
        size_t n = ctl_encode(f, CTL_FAIL, b, fail_seq);
        ctl_write_locked(&t->ctl_next, f, n);
        ctl_write_locked(&t->ctl_prev, f, n);
        if (t->ctl_next.fd >= 0) shutdown(t->ctl_next.fd, SHUT_WR);
        if (t->ctl_prev.fd >= 0) shutdown(t->ctl_prev.fd, SHUT_WR);
    }
    pthread_mutex_unlock(&t->ctl_lock);
    if (t->data_next >= 0) shutdown(t->data_next, SHUT_RDWR);
    if (t->data_prev >= 0) shutdown(t->data_prev, SHUT_RDWR);
}

static void send_waiting(tcp_impl *t, uint64_t seq)
{
    unsigned char f[CTL_BUF];
    blame b;
    memset(&b, 0, sizeof(b));
    b.seq = seq;
    size_t n = ctl_encode(f, CTL_WAITING, &b, seq);
    pthread_mutex_lock(&t->ctl_lock);
    if (!t->fail_sent) ctl_write_locked(&t->ctl_next, f, n);
    pthread_mutex_unlock(&t->ctl_lock);
}

/* Reads what a neighbour sent on its control channel (progress thread only). */
static void ctl_read(tcp_impl *t, ctl_chan *ch, int from)
{
    if (ch->fd < 0 || ch->eof) return;
    for (;;) {
        ssize_t n = recv(ch->fd, ch->buf + ch->got, sizeof(ch->buf) - ch->got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n <= 0) {
            ch->eof = true;
            break;
        }
        ch->got += (size_t)n;
        while (ch->got >= CTL_HDR) {
            const unsigned char *f = ch->buf;
            uint32_t dl = zt_comm_get_u32(f + 20), tl = zt_comm_get_u32(f + 24);
            if (zt_comm_get_u32(f) != CTL_MAGIC || dl >= CTL_DESC_MAX || tl >= CTL_DETAIL_MAX) {
                ch->eof = true; /* garbled: stop listening to it */
                ch->got = 0;
                return;
            }
            size_t total = CTL_HDR + dl + tl;
            if (ch->got < total) break;
            uint32_t type = zt_comm_get_u32(f + 4);
            if (type == CTL_FAIL && !t->have_remote) {
                blame *b = &t->remote;
                b->origin = (int)zt_comm_get_u32(f + 8);
                b->detector = (int)zt_comm_get_u32(f + 12);
                uint32_t st = zt_comm_get_u32(f + 16);
                b->st = st > ZT_OK && st < ZT_STATUS_COUNT ? (zt_status)st : ZT_ERR_PEER;
                b->seq = zt_comm_get_u64(f + 32);
                b->fail_seq = zt_comm_get_u64(f + 40);
                memcpy(b->desc, f + CTL_HDR, dl);
                b->desc[dl] = '\0';
                memcpy(b->detail, f + CTL_HDR + dl, tl);
                b->detail[tl] = '\0';
                t->have_remote = true;
                t->remote_from = from;
            } else if (type == CTL_WAITING && ch == &t->ctl_prev) {
                t->prev_waiting_ns = zt_now_ns();
            }
            memmove(ch->buf, ch->buf + total, ch->got - total);
            ch->got -= total;
        }
        if (ch->got == sizeof(ch->buf)) { /* cannot happen with valid frames */
            ch->eof = true;
            break;
        }
    }
}

static void pack_hdr(unsigned char *h, const zt_comm_req *r, int from, uint32_t step, size_t len)
{
    memset(h, 0, HDR_LEN);
    zt_comm_put_u32(h, DATA_MAGIC);
    zt_comm_put_u32(h + 4, (uint32_t)from);
    zt_comm_put_u32(h + 8, step);
    zt_comm_put_u32(h + 12, (uint32_t)r->root);
    h[16] = (unsigned char)r->kind;
    h[17] = (unsigned char)r->dt;
    zt_comm_put_u64(h + 24, r->seq);
    zt_comm_put_u64(h + 32, (uint64_t)r->count);
    zt_comm_put_u64(h + 40, (uint64_t)len);
}

void zt_comm_tcp_xfer_send(xfer *x, const zt_comm_req *r, int me, uint32_t step, const void *src,
                           size_t len)
{
    x->s_on = true;
    pack_hdr(x->s_hdr, r, me, step, len);
    x->s_src = src;
    x->s_len = len;
}

void zt_comm_tcp_xfer_recv(xfer *x, uint32_t step, size_t len, void *dst)
{
    x->r_on = true;
    x->r_step = step;
    x->r_len = len;
    x->r_dst = dst;
}

void zt_comm_tcp_xfer_recv_reduce(xfer *x, uint32_t step, size_t len, void *out, const void *own)
{
    x->r_on = true;
    x->r_step = step;
    x->r_len = len;
    x->r_out = out;
    x->r_own = own;
}

static bool send_done(const xfer *x)
{
    return !x->s_on || (x->s_hoff == HDR_LEN && x->s_off == x->s_len);
}

static bool recv_done(const xfer *x)
{
    return !x->r_on || (x->r_hoff == HDR_LEN && x->r_off == x->r_len);
}

void zt_comm_tcp_set_blame(blame *b, const zt_comm *c, const zt_comm_req *r, int origin,
                           zt_status st, const char *fmt, ...)
{
    b->origin = origin;
    b->detector = c->rank;
    b->st = st;
    b->seq = r ? r->seq : 0;
    b->fail_seq = b->seq;
    if (r)
        zt_comm_req_describe(r, b->desc, sizeof(b->desc));
    else
        b->desc[0] = '\0';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->detail, sizeof(b->detail), fmt, ap);
    va_end(ap);
}

static void describe_hdr(const unsigned char *h, char *buf, size_t len)
{
    zt_comm_req tmp;
    memset(&tmp, 0, sizeof(tmp));
    tmp.kind = (zt_coll_kind)h[16];
    tmp.dt = (zt_dtype)h[17];
    tmp.root = (int)zt_comm_get_u32(h + 12);
    tmp.seq = zt_comm_get_u64(h + 24);
    tmp.count = (size_t)zt_comm_get_u64(h + 32);
    if ((unsigned)tmp.kind >= ZT_COLL_KIND_COUNT || (unsigned)tmp.dt > ZT_F16)
        snprintf(buf, len, "an unknown collective (kind %u, dtype %u) #%llu", h[16], h[17],
                 (unsigned long long)tmp.seq);
    else
        zt_comm_req_describe(&tmp, buf, len);
}

/* Checks the header of a message from prev against what this rank runs. */
static zt_status check_hdr(zt_comm *c, tcp_impl *t, const zt_comm_req *r, const xfer *x, blame *b)
{
    const unsigned char *h = x->r_hdr;
    if (zt_comm_get_u32(h) != DATA_MAGIC || (int)zt_comm_get_u32(h + 4) != t->prev) {
        zt_comm_tcp_set_blame(
            b, c, r, t->prev, ZT_ERR_PEER,
            "garbled data from rank %d (not a zerotrain collective stream, or a bug)", t->prev);
        return ZT_ERR_PEER;
    }
    bool same = h[16] == (unsigned char)r->kind && h[17] == (unsigned char)r->dt &&
                zt_comm_get_u64(h + 24) == r->seq &&
                zt_comm_get_u64(h + 32) == (uint64_t)r->count &&
                zt_comm_get_u32(h + 12) == (uint32_t)r->root;
    if (!same) {
        char theirs[160], mine[160];
        describe_hdr(h, theirs, sizeof(theirs));
        zt_comm_req_describe(r, mine, sizeof(mine));
        zt_comm_tcp_set_blame(
            b, c, r, t->prev, ZT_ERR_STATE,
            "rank %d sent %s but rank %d runs %s; every rank must issue the same collectives in the same order",
            t->prev, theirs, c->rank, mine);
        return ZT_ERR_STATE;
    }
    if (zt_comm_get_u32(h + 8) != x->r_step || zt_comm_get_u64(h + 40) != (uint64_t)x->r_len) {
        zt_comm_tcp_set_blame(
            b, c, r, t->prev, ZT_ERR_INTERNAL,
            "rank %d sent ring step %u with %llu bytes but rank %d expects step %u with %zu bytes (internal error)",
            t->prev, zt_comm_get_u32(h + 8), (unsigned long long)zt_comm_get_u64(h + 40), c->rank,
            x->r_step, x->r_len);
        return ZT_ERR_INTERNAL;
    }
    return ZT_OK;
}

/* A neighbour's FAIL frame breaks the collective running here unless the neighbour had
 * completed it (then its data is still on the way and this rank may complete it too). */
static bool remote_applies(const tcp_impl *t, const zt_comm_req *r)
{
    return t->have_remote && t->remote.fail_seq <= r->seq;
}

/* This rank aborted (zt_comm_abort, or destroy with work pending): report its reason. */
static zt_status aborted_blame(zt_comm *c, const zt_comm_req *r, blame *b)
{
    zt_err e;
    if (!zt_comm_get_broken(c, &e))
        zt_err_set(&e, ZT_ERR_CANCELED, "the communicator was aborted on rank %d", c->rank);
    zt_comm_tcp_set_blame(b, c, r, c->rank, e.status, "%s", e.msg);
    return e.status;
}

/* A neighbour's data socket closed or reset: give its FAIL frame a moment to arrive (it is
 * written before the close) so the root cause, not the echo, is reported. */
static zt_status peer_gone(zt_comm *c, tcp_impl *t, const zt_comm_req *r, int peer, int sys_errno,
                           blame *b)
{
    if (atomic_load(&t->aborted)) return aborted_blame(c, r, b);
    ctl_chan *ch = peer == t->next ? &t->ctl_next : &t->ctl_prev;
    ctl_chan *other = ch == &t->ctl_next ? &t->ctl_prev : &t->ctl_next;
    uint64_t deadline = zt_now_ns() + (uint64_t)GRACE_MS * 1000000ull;
    while (!t->have_remote && !ch->eof && ch->fd >= 0 && zt_now_ns() < deadline) {
        struct pollfd p = {.fd = ch->fd, .events = POLLIN};
        int ms = (int)((deadline - zt_now_ns()) / 1000000ull) + 1;
        if (poll(&p, 1, ms) > 0) ctl_read(t, ch, peer);
    }
    ctl_read(t, other, peer == t->next ? t->prev : t->next);
    if (t->have_remote) return t->remote.st;
    if (sys_errno == ECONNRESET || sys_errno == EPIPE)
        zt_comm_tcp_set_blame(b, c, r, peer, ZT_ERR_PEER,
                              "rank %d reset the connection (it probably died)", peer);
    else if (sys_errno)
        zt_comm_tcp_set_blame(b, c, r, peer, ZT_ERR_PEER, "connection to rank %d failed: %s", peer,
                              strerror(sys_errno));
    else
        zt_comm_tcp_set_blame(b, c, r, peer, ZT_ERR_PEER,
                              "rank %d closed the connection (it probably died)", peer);
    return ZT_ERR_PEER;
}

/* Sends what is ready. Returns 0, or the errno of a failed send (EPIPE etc.). */
static int do_send(tcp_impl *t, zt_comm_req *r, xfer *x, bool *progress)
{
    size_t burst = 0;
    while (!send_done(x) && burst < BURST_BYTES) {
        size_t avail = x->s_avail ? *x->s_avail : x->s_len;
        struct iovec iov[2];
        int n_iov = 0;
        if (x->s_hoff < HDR_LEN) {
            iov[n_iov].iov_base = x->s_hdr + x->s_hoff;
            iov[n_iov++].iov_len = HDR_LEN - x->s_hoff;
        }
        if (avail > x->s_off) {
            size_t want = avail - x->s_off;
            if (want > BURST_BYTES) want = BURST_BYTES;
            iov[n_iov].iov_base = (void *)(x->s_src + x->s_off);
            iov[n_iov++].iov_len = want;
        }
        if (n_iov == 0) break; /* forwarding: wait for more to arrive */
        struct msghdr m;
        memset(&m, 0, sizeof(m));
        m.msg_iov = iov;
        m.msg_iovlen = (size_t)n_iov;
        ssize_t n = sendmsg(t->data_next, &m, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            return errno;
        }
        size_t k = (size_t)n;
        *progress = true;
        burst += k;
        if (x->s_hoff < HDR_LEN) {
            size_t h = HDR_LEN - x->s_hoff < k ? HDR_LEN - x->s_hoff : k;
            x->s_hoff += h;
            k -= h;
        }
        x->s_off += k;
        r->bytes_sent += k;
    }
    return 0;
}

/* Receives what has arrived. Returns ZT_OK, or a failure with *b set. */
static zt_status do_recv(zt_comm *c, tcp_impl *t, zt_comm_req *r, xfer *x, bool *progress, blame *b)
{
    size_t es = zt_dtype_size(r->dt);
    size_t burst = 0;
    while (!recv_done(x) && burst < BURST_BYTES) {
        ssize_t n;
        bool hdr = x->r_hoff < HDR_LEN;
        if (hdr) {
            n = recv(t->data_prev, x->r_hdr + x->r_hoff, HDR_LEN - x->r_hoff, 0);
        } else if (x->r_dst) {
            size_t want = x->r_len - x->r_off;
            n = recv(t->data_prev, x->r_dst + x->r_off, want < BURST_BYTES ? want : BURST_BYTES, 0);
        } else {
            size_t want = x->r_len - x->r_off;
            size_t room = STAGE_BYTES - x->r_fill;
            n = recv(t->data_prev, t->stage + x->r_fill, want < room ? want : room, 0);
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            return peer_gone(c, t, r, t->prev, errno, b);
        }
        if (n == 0) return peer_gone(c, t, r, t->prev, 0, b);
        size_t k = (size_t)n;
        *progress = true;
        burst += k;
        if (hdr) {
            x->r_hoff += k;
            if (x->r_hoff == HDR_LEN) {
                zt_status st = check_hdr(c, t, r, x, b);
                if (st != ZT_OK) return st;
            }
            continue;
        }
        x->r_off += k;
        if (!x->r_dst) {
            x->r_fill += k;
            size_t el = x->r_fill / es;
            zt_comm_reduce_add(r->dt, x->r_out + x->r_done_el * es, t->stage,
                               x->r_own + x->r_done_el * es, el);
            x->r_done_el += el;
            size_t left = x->r_fill - el * es;
            if (left) memmove(t->stage, t->stage + el * es, left);
            x->r_fill = left;
        }
    }
    return ZT_OK;
}

zt_status zt_comm_tcp_run_xfer(zt_comm *c, tcp_impl *t, zt_comm_req *r, xfer *x, uint64_t op_start,
                               blame *b)
{
    uint64_t tmo = (uint64_t)c->timeout_ms * 1000000ull;
    uint64_t last = zt_now_ns();
    uint64_t extra = 0;
    bool waiting_sent = false, deferred = false;
    while (!send_done(x) || !recv_done(x)) {
        if (atomic_load(&t->aborted)) return aborted_blame(c, r, b);
        if (remote_applies(t, r)) return t->remote.st;
        bool sending = !send_done(x);
        bool receiving = !recv_done(x);
        struct pollfd p[4];
        p[0].fd = sending ? t->data_next : -1;
        p[0].events = POLLIN;
        if (sending && (x->s_hoff < HDR_LEN || (x->s_avail ? *x->s_avail : x->s_len) > x->s_off))
            p[0].events |= POLLOUT;
        p[1].fd = receiving ? t->data_prev : -1;
        p[1].events = POLLIN;
        p[2].fd = t->ctl_next.eof ? -1 : t->ctl_next.fd;
        p[2].events = POLLIN;
        p[3].fd = t->ctl_prev.eof ? -1 : t->ctl_prev.fd;
        p[3].events = POLLIN;
        for (int i = 0; i < 4; i++)
            p[i].revents = 0;
        uint64_t now = zt_now_ns();
        uint64_t due = last + tmo + extra;
        if (receiving && !waiting_sent && last + tmo / 2 < due) due = last + tmo / 2;
        uint64_t wait_ms = now >= due ? 0 : (due - now + 999999) / 1000000;
        int rc = poll(p, 4, wait_ms > 60000 ? 60000 : (int)wait_ms);
        if (rc < 0 && errno != EINTR) {
            zt_comm_tcp_set_blame(b, c, r, c->rank, ZT_ERR_IO, "poll failed: %s", strerror(errno));
            return ZT_ERR_IO;
        }
        if (atomic_load(&t->aborted)) continue; /* reported at the top of the loop */
        bool progress = false;
        if (p[2].revents) ctl_read(t, &t->ctl_next, t->next);
        if (p[3].revents) ctl_read(t, &t->ctl_prev, t->prev);
        if (remote_applies(t, r)) return t->remote.st;
        if (sending && (p[0].revents & POLLOUT)) {
            int e = do_send(t, r, x, &progress);
            if (e) return peer_gone(c, t, r, t->next, e, b);
        }
        if (sending && !send_done(x) && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
            /* next never writes on this socket: readable means closed or reset */
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            getsockopt(t->data_next, SOL_SOCKET, SO_ERROR, &soerr, &sl);
            return peer_gone(c, t, r, t->next, soerr, b);
        }
        if (receiving && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            zt_status st = do_recv(c, t, r, x, &progress, b);
            if (st != ZT_OK) return st;
        }
        now = zt_now_ns();
        if (progress) {
            last = now;
            extra = 0;
            deferred = false;
            continue;
        }
        if (!recv_done(x) && !waiting_sent && now >= last + tmo / 2) {
            send_waiting(t, r->seq);
            waiting_sent = true;
        }
        if (now < last + tmo + extra) continue;
        unsigned long long idle_ms = (unsigned long long)((now - last) / 1000000ull);
        if (!recv_done(x)) {
            bool prev_waits = t->prev_waiting_ns >= op_start;
            if (prev_waits && !deferred) {
                /* prev is alive and blocked on its own predecessor: give the rank that sees
                 * the real culprit time to report it */
                deferred = true;
                extra = tmo / 4 < 2000000000ull ? tmo / 4 : 2000000000ull;
                continue;
            }
            if (prev_waits)
                zt_comm_tcp_set_blame(
                    b, c, r, t->prev, ZT_ERR_TIMEOUT,
                    "nothing received from rank %d for %llu ms; rank %d reports it is itself waiting for its predecessor, so a rank further back is stalled (train.comm_timeout_ms in the job file or ZT_COMM_TIMEOUT_MS sets the limit)",
                    t->prev, idle_ms, t->prev);
            else
                zt_comm_tcp_set_blame(
                    b, c, r, t->prev, ZT_ERR_TIMEOUT,
                    "nothing received from rank %d for %llu ms (it is stalled, hung, or has not called this collective; train.comm_timeout_ms in the job file or ZT_COMM_TIMEOUT_MS sets the limit)",
                    t->prev, idle_ms);
        } else {
            zt_comm_tcp_set_blame(
                b, c, r, t->next, ZT_ERR_TIMEOUT,
                "rank %d accepted no data for %llu ms (it is stalled or hung; train.comm_timeout_ms in the job file or ZT_COMM_TIMEOUT_MS sets the limit)",
                t->next, idle_ms);
        }
        return ZT_ERR_TIMEOUT;
    }
    return ZT_OK;
}
