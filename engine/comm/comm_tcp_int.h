/* zerotrain: what only the TCP backend's files see: the wire format, the backend's state, and
 * the ring step (comm_tcp_step.c: one message to the successor while one comes from the
 * predecessor, the control channel, the reductions) that the collectives of comm_tcp.c are
 * built from. */
#ifndef ZT_ENGINE_COMM_TCP_INT_H
#define ZT_ENGINE_COMM_TCP_INT_H

#include <string.h>

#include "comm_int.h"

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

/* Copies a NUL-terminated string, truncating to fit. */
static inline void zt_comm_tcp_str_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static inline int zt_comm_tcp_mod(int a, int n)
{
    return ((a % n) + n) % n;
}

/* Tells both neighbours why this communicator broke (a FAIL frame) and closes the data
 * sockets; fail_seq is the first collective this rank did not complete. Any thread. */
void zt_comm_tcp_tell_peers(tcp_impl *t, const blame *b, uint64_t fail_seq);

/* Sets up x to send len bytes of src to the successor as step `step` of r. */
void zt_comm_tcp_xfer_send(xfer *x, const zt_comm_req *r, int me, uint32_t step, const void *src,
                           size_t len);
/* Sets up x to receive step `step` (len bytes) from the predecessor into dst. */
void zt_comm_tcp_xfer_recv(xfer *x, uint32_t step, size_t len, void *dst);
/* Sets up x to receive step `step` and add it to own: out[i] = received[i] + own[i]. */
void zt_comm_tcp_xfer_recv_reduce(xfer *x, uint32_t step, size_t len, void *out, const void *own);
/* Runs x until both sides are done, on the progress thread: ZT_OK, or the failure with b
 * saying who is to blame. op_start is when the collective began (stall reports). */
zt_status zt_comm_tcp_run_xfer(zt_comm *c, tcp_impl *t, zt_comm_req *r, xfer *x, uint64_t op_start,
                               blame *b);
/* Fills b: origin is the rank held responsible, this rank the detector. */
void zt_comm_tcp_set_blame(blame *b, const zt_comm *c, const zt_comm_req *r, int origin,
                           zt_status st, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

#endif
