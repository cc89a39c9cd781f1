/* zerotrain: collectives between the ranks of one run. Two backends share this contract:
 * comm_tcp.c (CPU ranks: rings over TCP sockets) and comm_nccl.c (GPU ranks: NCCL on a
 * communication stream). The engine's ZeRO logic calls only this header.
 *
 * Semantics shared by both backends:
 *  - Reductions are sums. Buffers are backend memory (host for tcp, device for nccl).
 *  - Every rank must issue the same collectives in the same order; each has a sequence number
 *    (1, 2, ...) and a peer that disagrees about kind/size/sequence is an error, not a hang.
 *  - Results are bitwise identical on every rank and from run to run (fixed reduction order).
 *  - Every collective has a timeout; a dead or silent peer gives ZT_ERR_PEER / ZT_ERR_TIMEOUT
 *    with a message naming the peer rank, the collective and its sequence number. The TCP
 *    backend's timeout counts inactivity: a large transfer that keeps moving never expires.
 *  - Collectives may be asynchronous: pass a request pointer to get a handle and overlap work;
 *    pass NULL to wait for completion. Requests complete in issue order. After an error the
 *    communicator is broken: every later call fails fast with the first error.
 *  - One thread issues collectives and waits on requests; the backend may run its own
 *    progress thread internally. */
#ifndef ZT_ENGINE_COMM_H
#define ZT_ENGINE_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/dtype.h"
#include "../../common/status.h"

typedef struct zt_comm zt_comm;
typedef struct zt_comm_req zt_comm_req;
typedef struct zt_kctx zt_kctx;

typedef enum {
    ZT_COLL_ALLREDUCE = 0,
    ZT_COLL_REDUCE_SCATTER,
    ZT_COLL_ALLGATHER,
    ZT_COLL_BROADCAST,
    ZT_COLL_BARRIER,
    ZT_COLL_KIND_COUNT
} zt_coll_kind;

typedef struct zt_comm_opts {
    int rank, world_size;
    /* "tcp://host:port": rank 0 listens there and hands out the peer table (and the NCCL
     * unique id); the other ranks connect to it. */
    const char *rendezvous;
    /* Identifies the run attempt; a peer presenting another session is refused. May be NULL. */
    const char *session;
    int timeout_ms;     /* per collective and for rendezvous; <= 0: ZT_COMM_TIMEOUT_MS or 300000
                         * (the engine passes the job's train.comm_timeout_ms when the
                         * environment does not set one) */
    zt_kctx *kctx;      /* nccl: the compute context whose stream the comm stream syncs with */
    int device;         /* nccl: GPU ordinal */
    /* Stall reports, the raw material of a hang diagnosis: when stall_ms > 0 and the world
     * has more than one rank, a watch thread writes on report_fd (ZT_REPORT_FD's protocol)
     *     rank=R wait op=KIND seq=N step=S part=PART prev_op=KIND prev_seq=N-1 waited_ms=MS
     * once the oldest unfinished collective has waited stall_ms since it was issued, and
     *     rank=R wait_end seq=N waited_ms=MS
     * when it finishes after that. step and part are what zt_comm_set_where last said. */
    int report_fd;
    int stall_ms;
} zt_comm_opts;

typedef struct zt_comm_backend zt_comm_backend;
const zt_comm_backend *zt_comm_backend_tcp(void);
const zt_comm_backend *zt_comm_backend_nccl(void); /* NULL when built without CUDA */

/* Joins the run: rendezvous, connections, and (nccl) communicator creation. Blocks until all
 * world_size ranks have joined or the timeout passes. world_size 1 needs no rendezvous. */
zt_status zt_comm_create(zt_comm **out, const zt_comm_backend *backend, const zt_comm_opts *opts,
                         zt_err *err);
/* Closes connections and frees, pending requests included (their handles become invalid).
 * NULL is a no-op. */
void zt_comm_destroy(zt_comm *c);
/* Breaks the communicator now (other ranks see this rank as gone). Thread-safe. */
void zt_comm_abort(zt_comm *c);

int zt_comm_rank(const zt_comm *c);
int zt_comm_world_size(const zt_comm *c);

/* buf[0..count) summed over ranks, in place. */
zt_status zt_comm_allreduce(zt_comm *c, void *buf, size_t count, zt_dtype dt, zt_comm_req **req,
                            zt_err *err);
/* send holds world_size*recv_count elements; rank r receives the sum of chunk r.
 * In place when recv == (char *)send + r*recv_count*size. */
zt_status zt_comm_reduce_scatter(zt_comm *c, const void *send, void *recv, size_t recv_count,
                                 zt_dtype dt, zt_comm_req **req, zt_err *err);
/* recv gets every rank's send_count elements in rank order.
 * In place when send == (char *)recv + r*send_count*size. */
zt_status zt_comm_allgather(zt_comm *c, const void *send, void *recv, size_t send_count,
                            zt_dtype dt, zt_comm_req **req, zt_err *err);
zt_status zt_comm_broadcast(zt_comm *c, void *buf, size_t bytes, int root, zt_comm_req **req,
                            zt_err *err);
zt_status zt_comm_barrier(zt_comm *c, zt_err *err);
/* Waits for a request and frees it. */
zt_status zt_comm_wait(zt_comm *c, zt_comm_req *req, zt_err *err);

/* Counters since creation. bytes_sent counts payload bytes this rank sent. */
typedef struct zt_comm_stats {
    uint64_t bytes_sent;
    uint64_t collectives;
    double busy_s;         /* time spent inside collectives (wall) */
    uint64_t buffer_bytes; /* host memory the backend holds now for staging and scratch (tcp;
                            * nccl's own buffers live inside the library and are not counted) */
} zt_comm_stats;
void zt_comm_get_stats(const zt_comm *c, zt_comm_stats *out);

/* The buffer_bytes a backend will reach in a run of `world` ranks whose largest reduce-scatter
 * (always in place) receives max_rs_chunk_bytes per rank: what `zctl plan` adds for the
 * communicator. NULL backend or nccl: 0. No allocation; thread-safe. */
uint64_t zt_comm_backend_buffer_bytes(const zt_comm_backend *b, int world,
                                      size_t max_rs_chunk_bytes);

/* True once a collective has failed or the communicator was aborted (every later call fails
 * fast). Thread-safe; NULL is false. */
bool zt_comm_is_broken(const zt_comm *c);

/* The last few collectives (kind, count, dtype, sequence, state) as text lines, newest last,
 * for diagnosis after a failure. Returns the number of bytes written (always NUL-terminated). */
size_t zt_comm_describe_recent(const zt_comm *c, char *buf, size_t len);

/* Where the caller is, for stall reports: the step it computes (1-based) and the part of it
 * ("forward", "backward", "optimizer", "evaluation", "checkpoint"; a string literal or other
 * storage that outlives the comm). Two relaxed atomic stores; any thread; NULL c is a no-op. */
void zt_comm_set_where(zt_comm *c, int64_t step, const char *part);

/* The sequence number of the last collective this rank issued (0 before any). */
uint64_t zt_comm_last_seq(const zt_comm *c);

const char *zt_coll_kind_name(zt_coll_kind k);

#endif
