/* zerotrain: the TCP collective backend for CPU ranks. Ring reduce-scatter and ring all-gather
 * over non-blocking sockets driven by poll() on one progress thread per communicator, with a
 * fixed reduction order (bitwise-identical results), a checked header on every message and a
 * small control channel per neighbour that tells every rank why the ring broke.
 * The timeout counts inactivity: a collective fails once no byte has moved for timeout_ms, so
 * a large buffer on a slow link never times out while it progresses. */
#define _POSIX_C_SOURCE 200809L
#include "comm_int.h"

#include <errno.h>
#include <poll.h>
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

/* ---- wire format ----
 * Data channel (rank r -> r+1 only): every message is a 48-byte header, then `len` payload
 * bytes. Control channel (both directions between neighbours): 40-byte frames followed by
 * two strings, FAIL (why the sender's communicator broke) and WAITING (the sender is alive
 * and blocked on its own predecessor). Ring setup: RING_HELLO then a one-frame answer. */
#define DATA_MAGIC 0x5a54434du /* "ZTCM" */
#define HDR_LEN 48
#define CTL_MAGIC 0x5a544346u /* "ZTCF" */
#define CTL_HDR 48
#define CTL_FAIL 1u
#define CTL_WAITING 2u
#define CTL_DESC_MAX 200
#define CTL_DETAIL_MAX 800
#define CTL_BUF (CTL_HDR + CTL_DESC_MAX + CTL_DETAIL_MAX)
#define RING_MAGIC 0x5a545248u /* "ZTRH" */
#define RING_HELLO_LEN 20
#define RING_ACK_LEN 12

#define STAGE_BYTES (1u << 20) /* receive staging for reductions */
#define BURST_BYTES (8u << 20) /* bytes moved per direction before polling again */
#define GRACE_MS 500           /* wait for a neighbour's FAIL frame after its socket closes */

typedef struct blame {
    int origin;   /* the rank held responsible */
    int detector; /* the rank that saw it first */
    zt_status st;
    uint64_t seq;            /* the detector's collective */
    uint64_t fail_seq;       /* the first collective the sender of a FAIL frame did not complete */
    char desc[CTL_DESC_MAX]; /* the detector's collective, "" if none */
    char detail[CTL_DETAIL_MAX]; /* what happened */
} blame;

typedef struct ctl_chan {
    int fd;
    bool eof;
    size_t got;
    unsigned char buf[CTL_BUF];
} ctl_chan;

typedef struct tcp_impl {
    int data_next, data_prev; /* payload: we send on data_next, receive on data_prev */
    ctl_chan ctl_next, ctl_prev;
    int next, prev;

    pthread_t thread;
    bool thread_started;
    zt_comm_req *q_head, *q_tail; /* under c->lock */
    zt_comm_req *running;         /* under c->lock */
    bool stop;                    /* under c->lock */
    atomic_int aborted;
    _Atomic uint64_t done_seq; /* last collective completed here */

    pthread_mutex_t ctl_lock; /* serialises control frames written by any thread */
    bool fail_sent;           /* under ctl_lock */

    /* progress thread only */
    bool have_remote;
    blame remote;
    int remote_from;
    uint64_t prev_waiting_ns; /* when the predecessor last said it is waiting */
    unsigned char *stage;
    unsigned char *scratch;
    size_t scratch_cap;
} tcp_impl;

/* Copies a NUL-terminated string, truncating to fit. */
static void str_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static int mod(int a, int n)
{
    return ((a % n) + n) % n;
}

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
static void tell_peers_and_close(tcp_impl *t, const blame *b, uint64_t fail_seq)
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

/* ---- one ring step: send one message to next while receiving one from prev ---- */

typedef struct xfer {
    /* send side */
    bool s_on;
    unsigned char s_hdr[HDR_LEN];
    size_t s_hoff;
    const unsigned char *s_src;
    size_t s_len, s_off;
    const size_t *s_avail; /* forwarding: payload bytes of s_src ready so far */
    /* receive side */
    bool r_on;
    unsigned char r_hdr[HDR_LEN];
    size_t r_hoff;
    uint32_t r_step;
    size_t r_len, r_off;
    unsigned char *r_dst; /* direct destination, or NULL to reduce: */
    unsigned char *r_out; /*   r_out[i] = received[i] + r_own[i] */
    const unsigned char *r_own;
    size_t r_fill, r_done_el;
} xfer;

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

static void xfer_send(xfer *x, const zt_comm_req *r, int me, uint32_t step, const void *src,
                      size_t len)
{
    x->s_on = true;
    pack_hdr(x->s_hdr, r, me, step, len);
    x->s_src = src;
    x->s_len = len;
}

static void xfer_recv(xfer *x, uint32_t step, size_t len, void *dst)
{
    x->r_on = true;
    x->r_step = step;
    x->r_len = len;
    x->r_dst = dst;
}

static void xfer_recv_reduce(xfer *x, uint32_t step, size_t len, void *out, const void *own)
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

static void set_blame(blame *b, const zt_comm *c, const zt_comm_req *r, int origin, zt_status st,
                      const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void set_blame(blame *b, const zt_comm *c, const zt_comm_req *r, int origin, zt_status st,
                      const char *fmt, ...)
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
        set_blame(b, c, r, t->prev, ZT_ERR_PEER,
                  "garbled data from rank %d (not a zerotrain collective stream, or a bug)",
                  t->prev);
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
        set_blame(
            b, c, r, t->prev, ZT_ERR_STATE,
            "rank %d sent %s but rank %d runs %s; every rank must issue the same collectives in the same order",
            t->prev, theirs, c->rank, mine);
        return ZT_ERR_STATE;
    }
    if (zt_comm_get_u32(h + 8) != x->r_step || zt_comm_get_u64(h + 40) != (uint64_t)x->r_len) {
        set_blame(
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
    set_blame(b, c, r, c->rank, e.status, "%s", e.msg);
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
        set_blame(b, c, r, peer, ZT_ERR_PEER, "rank %d reset the connection (it probably died)",
                  peer);
    else if (sys_errno)
        set_blame(b, c, r, peer, ZT_ERR_PEER, "connection to rank %d failed: %s", peer,
                  strerror(sys_errno));
    else
        set_blame(b, c, r, peer, ZT_ERR_PEER, "rank %d closed the connection (it probably died)",
                  peer);
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

static zt_status run_xfer(zt_comm *c, tcp_impl *t, zt_comm_req *r, xfer *x, uint64_t op_start,
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
            set_blame(b, c, r, c->rank, ZT_ERR_IO, "poll failed: %s", strerror(errno));
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
                set_blame(
                    b, c, r, t->prev, ZT_ERR_TIMEOUT,
                    "nothing received from rank %d for %llu ms; rank %d reports it is itself waiting for its predecessor, so a rank further back is stalled (train.comm_timeout_ms in the job file or ZT_COMM_TIMEOUT_MS sets the limit)",
                    t->prev, idle_ms, t->prev);
            else
                set_blame(
                    b, c, r, t->prev, ZT_ERR_TIMEOUT,
                    "nothing received from rank %d for %llu ms (it is stalled, hung, or has not called this collective; train.comm_timeout_ms in the job file or ZT_COMM_TIMEOUT_MS sets the limit)",
                    t->prev, idle_ms);
        } else {
            set_blame(
                b, c, r, t->next, ZT_ERR_TIMEOUT,
                "rank %d accepted no data for %llu ms (it is stalled or hung; train.comm_timeout_ms in the job file or ZT_COMM_TIMEOUT_MS sets the limit)",
                t->next, idle_ms);
        }
        return ZT_ERR_TIMEOUT;
    }
    return ZT_OK;
}

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
        int cs = mod(me - s - 1, n), cr = mod(me - s - 2, n);
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
        xfer_send(&x, r, me, (uint32_t)s, s == 0 ? src + soff * es : prev_partial, slen * es);
        xfer_recv_reduce(&x, (uint32_t)s, rlen * es, out, src + roff * es);
        zt_status st = run_xfer(c, t, r, &x, op_start, b);
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
        int cs = mod(me - s, n), cr = mod(me - s - 1, n);
        size_t soff, slen, roff, rlen;
        op_chunk(r, n, cs, &soff, &slen);
        op_chunk(r, n, cr, &roff, &rlen);
        xfer x;
        memset(&x, 0, sizeof(x));
        xfer_send(&x, r, me, step0 + (uint32_t)s, buf + soff * es, slen * es);
        xfer_recv(&x, step0 + (uint32_t)s, rlen * es, buf + roff * es);
        zt_status st = run_xfer(c, t, r, &x, op_start, b);
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
                set_blame(b, c, r, me, ZT_ERR_NOMEM, "out of memory for %zu bytes of scratch",
                          need);
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
        int pos = mod(me - r->root, n);
        xfer x;
        memset(&x, 0, sizeof(x));
        if (pos != 0) xfer_recv(&x, 0, r->count, r->recv);
        if (pos != n - 1) {
            xfer_send(&x, r, me, 0, r->recv, r->count);
            if (pos != 0) x.s_avail = &x.r_off;
        }
        return run_xfer(c, t, r, &x, op_start, b);
    }
    case ZT_COLL_BARRIER:
        for (int s = 0; s <= n - 2; s++) {
            xfer x;
            memset(&x, 0, sizeof(x));
            xfer_send(&x, r, me, (uint32_t)s, NULL, 0);
            xfer_recv(&x, (uint32_t)s, 0, NULL);
            zt_status st = run_xfer(c, t, r, &x, op_start, b);
            if (st != ZT_OK) return st;
        }
        return ZT_OK;
    default:
        set_blame(b, c, r, me, ZT_ERR_INVALID, "unknown collective kind %d", (int)r->kind);
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
                tell_peers_and_close(t, why, r->seq);
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
    str_copy(b.detail, sizeof(b.detail), why ? why->msg : "communicator aborted");
    return b;
}

static void tcp_abort(zt_comm *c, const zt_err *why)
{
    tcp_impl *t = c->impl;
    if (!t) return;
    atomic_store(&t->aborted, 1);
    if (c->world > 1) {
        blame b = abort_blame(c, why);
        tell_peers_and_close(t, &b, atomic_load(&t->done_seq) + 1);
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
