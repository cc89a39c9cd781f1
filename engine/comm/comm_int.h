/* zerotrain: what only engine/comm*.c may see. The backend table behind comm.h, the request
 * (one issued collective), the communicator's shared state (lock, sequence numbers, stats,
 * the ring of recent collectives, the first error) and the TCP bootstrap both backends use. */
#ifndef ZT_ENGINE_COMM_INT_H
#define ZT_ENGINE_COMM_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm.h"

/* Default per-collective timeout when neither opts.timeout_ms nor ZT_COMM_TIMEOUT_MS is set. */
#define ZT_COMM_DEFAULT_TIMEOUT_MS 300000
/* Entries kept for zt_comm_describe_recent. */
#define ZT_COMM_RECENT 16

typedef enum {
    ZT_REQ_QUEUED = 0,
    ZT_REQ_RUNNING,
    ZT_REQ_DONE,
    ZT_REQ_FAILED,
} zt_req_state;

/* One issued collective. The issuing thread owns it until it is submitted; then the backend
 * runs it and sets state under c->lock; zt_comm_wait frees it. `count` is the size argument
 * of the call: elements for allreduce, recv_count for reduce-scatter, send_count for
 * all-gather, bytes for broadcast, 0 for barrier. */
struct zt_comm_req {
    zt_comm *comm;
    zt_coll_kind kind;
    uint64_t seq;
    const void *send;
    void *recv;
    size_t count;
    zt_dtype dt;
    int root;

    zt_req_state state;  /* under c->lock */
    zt_err err;          /* valid when state == ZT_REQ_FAILED */
    uint64_t bytes_sent; /* payload bytes this rank sent for it */
    double busy_s;       /* time it spent running */

    struct zt_comm_req *next_queued;           /* backend queue (tcp), under c->lock */
    struct zt_comm_req *live_prev, *live_next; /* every request not yet waited for */
    void *backend_data;                        /* per-request backend state (nccl events) */
};

typedef struct zt_comm_recent {
    uint64_t seq; /* 0: empty slot */
    zt_coll_kind kind;
    size_t count;
    zt_dtype dt;
    int root;
    zt_req_state state;
    double t_issue, t_start, t_end; /* monotonic seconds; 0 = not yet */
    zt_status status;
} zt_comm_recent;

struct zt_comm {
    const zt_comm_backend *be;
    void *impl; /* backend state */
    int rank, world;
    int timeout_ms;
    char *session;    /* never NULL ("" when none) */
    char *rendezvous; /* copy of opts.rendezvous, NULL for world 1 */

    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t cond;  /* signalled when a request changes state or the comm breaks */
    uint64_t seq;         /* last issued sequence number */
    bool broken;
    zt_err first_err;
    zt_comm_stats stats;
    zt_comm_recent recent[ZT_COMM_RECENT];
    zt_comm_req *live_head;

    /* stall reports (opts.stall_ms > 0): the watch thread, woken by watch_cond */
    _Atomic int64_t where_step;
    _Atomic(const char *) where_part;
    int report_fd, stall_ms;
    bool watching, watch_stop; /* watch_stop under lock */
    pthread_t watch_thread;
    pthread_cond_t watch_cond; /* CLOCK_MONOTONIC */
};

/* The backend table: one per implementation, picked at creation, never an #ifdef inside. */
struct zt_comm_backend {
    const char *name;
    /* Joins the run and sets c->impl. c->rank/world/timeout_ms/session are filled. */
    zt_status (*init)(zt_comm *c, const zt_comm_opts *opts, zt_err *err);
    /* Stops progress, closes connections, frees c->impl. Requests still live are freed by
     * comm.c afterwards; the backend must not touch them after fini returns. */
    void (*fini)(zt_comm *c);
    /* Makes the peers fail fast (tell them why, close connections, abort the library).
     * Idempotent; any thread. */
    void (*abort)(zt_comm *c, const zt_err *why);
    /* Starts a request (already registered with a sequence number). On failure the request is
     * not started and the caller finishes it. */
    zt_status (*submit)(zt_comm *c, zt_comm_req *r, zt_err *err);
    /* Blocks until r is DONE or FAILED (it must end within the timeout). */
    void (*wait)(zt_comm *c, zt_comm_req *r);
    /* Frees r->backend_data (may be NULL). */
    void (*req_free)(zt_comm *c, zt_comm_req *r);
    /* zt_comm_backend_buffer_bytes for this backend (NULL: 0). */
    uint64_t (*buffer_bytes)(int world, size_t max_rs_chunk_bytes);
};

/* ---- helpers comm.c gives the backends ---- */

/* "allreduce #17 (4096 x fp32)" / "broadcast #3 (1024 bytes from rank 0)" / "barrier #5". */
void zt_comm_req_describe(const zt_comm_req *r, char *buf, size_t len);
/* Marks r running (recent ring, start time). Takes c->lock. */
void zt_comm_req_started(zt_comm *c, zt_comm_req *r);
/* Ends r: DONE when st == ZT_OK, else FAILED with err (also the comm's first error if it has
 * none, which breaks the comm). Adds bytes and time to the stats and wakes waiters.
 * Takes c->lock. */
void zt_comm_req_finish(zt_comm *c, zt_comm_req *r, zt_status st, const zt_err *err);
/* Breaks the comm with err unless already broken. Takes c->lock. Returns true when this call
 * broke it (the caller then tells the peers). */
bool zt_comm_set_broken(zt_comm *c, const zt_err *err);
/* Copies the first error; false if the comm is not broken. Takes c->lock. */
bool zt_comm_get_broken(zt_comm *c, zt_err *out);

/* The split of `count` elements into `world` ring chunks used by allreduce: chunk i holds
 * count/world elements, one more for i < count%world; chunks are contiguous in order.
 * Reduce-scatter and all-gather use equal chunks of their per-rank count. */
static inline void zt_comm_chunk(size_t count, int world, int i, size_t *off, size_t *len)
{
    size_t base = count / (size_t)world, rem = count % (size_t)world, ui = (size_t)i;
    *len = base + (ui < rem ? 1 : 0);
    *off = ui * base + (ui < rem ? ui : rem);
}

/* Fixed reduction order (both the TCP rings and the tests' reference rely on it): the sum of
 * ring chunk i is accumulated along the ring starting at rank i+1:
 *     acc = x[i+1]; acc = acc + x[i+2]; ...; acc = acc + x[i]     (ranks mod world)
 * each addition in fp32 and rounded to the buffer's dtype (nearest even) after every hop. */

/* out[i] = in[i] + own[i] in dtype dt: fp32 adds, 16-bit values widened to fp32, added and
 * rounded to nearest even (common/dtype.h's bits exactly, whatever the CPU). out may alias
 * in or own element for element. The one reduction of the TCP rings (comm_tcp.c). */
void zt_comm_reduce_add(zt_dtype dt, void *out, const void *in, const void *own, size_t n);

/* Textbook ring payload bytes one rank sends for a collective (what zt_comm_stats counts for
 * the TCP backend and estimates for NCCL). */
uint64_t zt_comm_ring_bytes(zt_coll_kind kind, size_t count, zt_dtype dt, int root, int rank,
                            int world);

/* ---- TCP bootstrap (engine/comm_net.c) ---- */

/* One rank's listening address as rank 0 hands it out. */
typedef struct zt_comm_peer_addr {
    char host[64]; /* numeric address; "" for rank 0 = the rendezvous host */
    uint16_t port; /* 0: this rank has no listener */
} zt_comm_peer_addr;

/* Rendezvous through opts->rendezvous ("tcp://host:port", "host:port", "[v6]:port"):
 * rank 0 listens there, accepts world-1 ranks presenting the same session and world size,
 * refusing others with a message they report, then sends each the peer table and rank 0's
 * blob; the other ranks retry connecting until the deadline (rank 0 may start late).
 * listen_port: this rank's own data listener port (0: none). blob/blob_len: input on rank 0,
 * output elsewhere (same length on every rank). table: world entries, filled on every rank
 * (may be NULL). rank0_host: on ranks > 0 receives rank 0's numeric address as seen from
 * here (may be NULL). Errors: ZT_ERR_CONFIG (bad address), ZT_ERR_TIMEOUT (nobody answered or
 * ranks missing), ZT_ERR_AUTH (refused: session), ZT_ERR_PEER (refused: other reasons,
 * broken connection), ZT_ERR_IO (socket calls). */
zt_status zt_comm_net_rendezvous(const zt_comm_opts *opts, const char *session, int timeout_ms,
                                 uint16_t listen_port, void *blob, size_t blob_len,
                                 zt_comm_peer_addr *table, char *rank0_host, size_t host_len,
                                 zt_err *err);

/* A listening socket on the wildcard address (IPv6 dual stack when available, else IPv4),
 * port chosen by the kernel. Returns the fd and the port, or -1 with err set. */
int zt_comm_net_listen_any(uint16_t *port, zt_err *err);

/* Connects to host:port (names resolved each try), retrying refused/unreachable attempts
 * every 50 ms until deadline_ns (monotonic). Returns a blocking fd or -1 with err set
 * (ZT_ERR_TIMEOUT naming `who`). */
int zt_comm_net_connect_retry(const char *host, uint16_t port, uint64_t deadline_ns,
                              const char *who, zt_err *err);

/* Accepts one connection from a listening fd before deadline_ns; -1 with err on timeout. */
int zt_comm_net_accept(int lfd, uint64_t deadline_ns, const char *who, zt_err *err);

/* Blocking-style full read/write with a deadline (poll + non-blocking I/O, MSG_NOSIGNAL).
 * Return 0, or -1 with err set (ZT_ERR_TIMEOUT, ZT_ERR_PEER when closed). `who` names the
 * other side in messages. */
int zt_comm_net_write_all(int fd, const void *buf, size_t len, uint64_t deadline_ns,
                          const char *who, zt_err *err);
int zt_comm_net_read_all(int fd, void *buf, size_t len, uint64_t deadline_ns, const char *who,
                         zt_err *err);

/* Sets O_NONBLOCK (on != 0) or clears it. 0 on success. */
int zt_comm_net_set_nonblock(int fd, int on);
/* Disables Nagle (TCP_NODELAY). */
void zt_comm_net_nodelay(int fd);

/* Little-endian packing used by every frame between ranks. */
static inline void zt_comm_put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}
static inline uint32_t zt_comm_get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void zt_comm_put_u64(unsigned char *p, uint64_t v)
{
    zt_comm_put_u32(p, (uint32_t)v);
    zt_comm_put_u32(p + 4, (uint32_t)(v >> 32));
}
static inline uint64_t zt_comm_get_u64(const unsigned char *p)
{
    return (uint64_t)zt_comm_get_u32(p) | (uint64_t)zt_comm_get_u32(p + 4) << 32;
}

#endif
