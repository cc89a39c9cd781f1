/* zerotrain: the backend-independent half of comm.h. Validates calls, numbers collectives,
 * keeps requests, stats, the ring of recent collectives and the first error, and hands the
 * work to a backend table (comm_tcp.c, comm_nccl.c). */
#define _POSIX_C_SOURCE 200809L
#include "comm_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../common/alloc.h"
#include "../../common/log.h"
#include "../../common/settings.h"
#include "../../common/timeutil.h"

static const char *const kind_names[ZT_COLL_KIND_COUNT] = {
    "allreduce", "reduce_scatter", "allgather", "broadcast", "barrier",
};

const char *zt_coll_kind_name(zt_coll_kind k)
{
    return (unsigned)k < ZT_COLL_KIND_COUNT ? kind_names[k] : "unknown-collective";
}

static void describe(zt_coll_kind kind, uint64_t seq, size_t count, zt_dtype dt, int root,
                     char *buf, size_t len)
{
    const char *name = zt_coll_kind_name(kind);
    unsigned long long s = (unsigned long long)seq;
    if (kind == ZT_COLL_BARRIER)
        snprintf(buf, len, "%s #%llu", name, s);
    else if (kind == ZT_COLL_BROADCAST)
        snprintf(buf, len, "%s #%llu (%zu bytes from rank %d)", name, s, count, root);
    else
        snprintf(buf, len, "%s #%llu (%zu x %s)", name, s, count, zt_dtype_name(dt));
}

void zt_comm_req_describe(const zt_comm_req *r, char *buf, size_t len)
{
    describe(r->kind, r->seq, r->count, r->dt, r->root, buf, len);
}

uint64_t zt_comm_ring_bytes(zt_coll_kind kind, size_t count, zt_dtype dt, int root, int rank,
                            int world)
{
    if (world <= 1) return 0;
    uint64_t es = zt_dtype_size(dt);
    switch (kind) {
    case ZT_COLL_ALLREDUCE: {
        /* reduce-scatter sends every chunk but this rank's, all-gather every chunk but the
         * next rank's */
        size_t off, len_self, len_next;
        zt_comm_chunk(count, world, rank, &off, &len_self);
        zt_comm_chunk(count, world, (rank + 1) % world, &off, &len_next);
        return es * ((uint64_t)count - len_self + (uint64_t)count - len_next);
    }
    case ZT_COLL_REDUCE_SCATTER:
    case ZT_COLL_ALLGATHER:
        return es * (uint64_t)count * (uint64_t)(world - 1);
    case ZT_COLL_BROADCAST:
        /* a chain from root: every rank but the last one forwards the whole buffer */
        return rank == (root + world - 1) % world ? 0 : (uint64_t)count;
    default:
        return 0;
    }
}

/* ---- shared state helpers for the backends ---- */

static zt_comm_recent *recent_slot(zt_comm *c, uint64_t seq)
{
    zt_comm_recent *e = &c->recent[seq % ZT_COMM_RECENT];
    return e->seq == seq ? e : NULL;
}

void zt_comm_req_started(zt_comm *c, zt_comm_req *r)
{
    pthread_mutex_lock(&c->lock);
    r->state = ZT_REQ_RUNNING;
    zt_comm_recent *e = recent_slot(c, r->seq);
    if (e) {
        e->state = ZT_REQ_RUNNING;
        e->t_start = zt_now_s();
    }
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

void zt_comm_req_finish(zt_comm *c, zt_comm_req *r, zt_status st, const zt_err *err)
{
    pthread_mutex_lock(&c->lock);
    r->state = st == ZT_OK ? ZT_REQ_DONE : ZT_REQ_FAILED;
    if (st != ZT_OK) {
        if (err && err->status != ZT_OK)
            r->err = *err;
        else
            zt_err_set(&r->err, st, "%s", zt_strerror(st));
        r->err.status = st;
        if (!c->broken) {
            c->broken = true;
            c->first_err = r->err;
        }
    } else {
        c->stats.collectives++;
    }
    c->stats.bytes_sent += r->bytes_sent;
    c->stats.busy_s += r->busy_s;
    zt_comm_recent *e = recent_slot(c, r->seq);
    if (e) {
        e->state = r->state;
        e->status = st;
        e->t_end = zt_now_s();
        if (e->t_start == 0) e->t_start = e->t_end;
    }
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

bool zt_comm_set_broken(zt_comm *c, const zt_err *err)
{
    bool now = false;
    pthread_mutex_lock(&c->lock);
    if (!c->broken) {
        c->broken = true;
        c->first_err = *err;
        now = true;
    }
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    return now;
}

bool zt_comm_get_broken(zt_comm *c, zt_err *out)
{
    pthread_mutex_lock(&c->lock);
    bool b = c->broken;
    if (b && out) *out = c->first_err;
    pthread_mutex_unlock(&c->lock);
    return b;
}

/* ---- stall reports (the watch thread) ---- */

static void watch_write(const zt_comm *c, const char *line, int n)
{
    if (n <= 0) return;
    /* one write of less than PIPE_BUF bytes: never interleaved with the engine's lines */
    ssize_t w = write(c->report_fd, line, (size_t)n);
    (void)w;
}

/* Once a tick: the oldest unfinished collective, reported when it has waited stall_ms and
 * again (wait_end) when it finishes. Takes c->lock around reading the ring only. */
static void *watch_main(void *arg)
{
    zt_comm *c = arg;
    uint64_t reported = 0; /* seq of the collective reported as waiting, 0: none */
    double reported_t0 = 0;
    pthread_mutex_lock(&c->lock);
    while (!c->watch_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 200 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&c->watch_cond, &c->lock, &ts);
        if (c->watch_stop) break;
        /* collectives finish in issue order: the first unfinished one in the ring is the one
         * this rank waits in */
        uint64_t first = c->seq >= ZT_COMM_RECENT ? c->seq - ZT_COMM_RECENT + 1 : 1;
        const zt_comm_recent *w = NULL;
        for (uint64_t s = first; s <= c->seq; s++) {
            const zt_comm_recent *e = &c->recent[s % ZT_COMM_RECENT];
            if (e->seq == s && (e->state == ZT_REQ_QUEUED || e->state == ZT_REQ_RUNNING)) {
                w = e;
                break;
            }
        }
        double now = zt_now_s();
        char line[512];
        int n = 0;
        if (reported && (!w || w->seq != reported) && !c->broken) {
            n = snprintf(line, sizeof(line), "rank=%d wait_end seq=%llu waited_ms=%.0f\n",
                         c->rank, (unsigned long long)reported, (now - reported_t0) * 1e3);
            reported = 0;
        } else if (!reported && w && !c->broken && (now - w->t_issue) * 1e3 >= c->stall_ms) {
            const zt_comm_recent *p = &c->recent[(w->seq - 1) % ZT_COMM_RECENT];
            bool have_prev = w->seq > 1 && p->seq == w->seq - 1;
            const char *part = atomic_load_explicit(&c->where_part, memory_order_relaxed);
            n = snprintf(line, sizeof(line),
                         "rank=%d wait op=%s seq=%llu step=%lld part=%s prev_op=%s prev_seq=%llu waited_ms=%.0f\n",
                         c->rank, zt_coll_kind_name(w->kind), (unsigned long long)w->seq,
                         (long long)atomic_load_explicit(&c->where_step, memory_order_relaxed),
                         part ? part : "setup", have_prev ? zt_coll_kind_name(p->kind) : "none",
                         have_prev ? (unsigned long long)p->seq : 0ull,
                         (now - w->t_issue) * 1e3);
            reported = w->seq;
            reported_t0 = w->t_issue;
        }
        if (n > 0) {
            pthread_mutex_unlock(&c->lock);
            watch_write(c, line, n < (int)sizeof(line) ? n : (int)sizeof(line) - 1);
            pthread_mutex_lock(&c->lock);
        }
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

static zt_status watch_start(zt_comm *c, const zt_comm_opts *opts, zt_err *err)
{
    if (opts->stall_ms <= 0 || opts->report_fd < 0 || c->world < 2) return ZT_OK;
    c->report_fd = opts->report_fd;
    c->stall_ms = opts->stall_ms;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return zt_err_set(err, ZT_ERR_INTERNAL, "zt_comm_create: pthread_condattr_init failed");
    int rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(&c->watch_cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0)
        return zt_err_set(err, ZT_ERR_INTERNAL, "zt_comm_create: the watch thread's condition failed (%s)",
                          strerror(rc));
    rc = pthread_create(&c->watch_thread, NULL, watch_main, c);
    if (rc != 0) {
        pthread_cond_destroy(&c->watch_cond);
        return zt_err_set(err, ZT_ERR_INTERNAL, "zt_comm_create: cannot start the watch thread (%s)",
                          strerror(rc));
    }
    c->watching = true;
    return ZT_OK;
}

static void watch_stop(zt_comm *c)
{
    if (!c->watching) return;
    pthread_mutex_lock(&c->lock);
    c->watch_stop = true;
    pthread_cond_signal(&c->watch_cond);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->watch_thread, NULL);
    pthread_cond_destroy(&c->watch_cond);
    c->watching = false;
}

void zt_comm_set_where(zt_comm *c, int64_t step, const char *part)
{
    if (!c) return;
    atomic_store_explicit(&c->where_step, step, memory_order_relaxed);
    atomic_store_explicit(&c->where_part, part, memory_order_relaxed);
}

/* ---- creation and teardown ---- */

static zt_status resolve_timeout(const zt_comm_opts *opts, int *out, zt_err *err)
{
    if (opts->timeout_ms > 0) {
        *out = opts->timeout_ms;
        return ZT_OK;
    }
    const char *env = zt_setting_raw(ZT_SET_COMM_TIMEOUT_MS);
    if (!env) {
        *out = ZT_COMM_DEFAULT_TIMEOUT_MS;
        return ZT_OK;
    }
    char *end = NULL;
    errno = 0;
    long v = strtol(env, &end, 10);
    if (errno || end == env || *end != '\0' || v <= 0 || v > INT_MAX)
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "ZT_COMM_TIMEOUT_MS='%s' is not a positive number of milliseconds; set it to e.g. 300000 (5 minutes) or unset it",
            env);
    *out = (int)v;
    return ZT_OK;
}

zt_status zt_comm_create(zt_comm **out, const zt_comm_backend *backend, const zt_comm_opts *opts,
                         zt_err *err)
{
    zt_status st;
    if (!out || !opts)
        return zt_err_set(err, ZT_ERR_INVALID, "zt_comm_create: out and opts must not be NULL");
    *out = NULL;
    if (!backend)
        return zt_err_set(
            err, ZT_ERR_UNSUPPORTED,
            "zt_comm_create: no collective backend (the NCCL backend is absent from builds without CUDA; use the tcp backend for CPU ranks)");
    if (opts->world_size < 1 || opts->rank < 0 || opts->rank >= opts->world_size)
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "rank %d with world size %d: need world size >= 1 and 0 <= rank < world size (check ZT_RANK and ZT_WORLD_SIZE)",
            opts->rank, opts->world_size);
    if (opts->world_size > 1 && (!opts->rendezvous || !*opts->rendezvous))
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "rank %d of %d: no rendezvous address; set ZT_RENDEZVOUS=tcp://host:port (rank 0 listens there)",
            opts->rank, opts->world_size);
    int timeout_ms = 0;
    st = resolve_timeout(opts, &timeout_ms, err);
    if (st != ZT_OK) return st;

    zt_comm *c = zt_calloc(1, sizeof(*c));
    if (!c) return zt_err_set(err, ZT_ERR_NOMEM, "zt_comm_create: out of memory");
    c->be = backend;
    c->rank = opts->rank;
    c->world = opts->world_size;
    c->timeout_ms = timeout_ms;
    c->session = zt_strdup(opts->session ? opts->session : "");
    c->rendezvous = opts->rendezvous ? zt_strdup(opts->rendezvous) : NULL;
    if (!c->session || (opts->rendezvous && !c->rendezvous)) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "zt_comm_create: out of memory");
        goto free_comm;
    }
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        st = zt_err_set(err, ZT_ERR_INTERNAL, "zt_comm_create: pthread_mutex_init failed");
        goto free_comm;
    }
    if (pthread_cond_init(&c->cond, NULL) != 0) {
        st = zt_err_set(err, ZT_ERR_INTERNAL, "zt_comm_create: pthread_cond_init failed");
        goto destroy_mutex;
    }
    atomic_init(&c->where_step, 0);
    atomic_init(&c->where_part, "setup");
    st = backend->init(c, opts, err);
    if (st != ZT_OK) goto destroy_cond;
    st = watch_start(c, opts, err);
    if (st != ZT_OK) {
        backend->fini(c);
        goto destroy_cond;
    }
    ZT_DEBUG("comm", "rank %d of %d joined (%s backend, timeout %d ms)", c->rank, c->world,
             backend->name, c->timeout_ms);
    *out = c;
    return ZT_OK;

destroy_cond:
    pthread_cond_destroy(&c->cond);
destroy_mutex:
    pthread_mutex_destroy(&c->lock);
free_comm:
    zt_free(c->rendezvous);
    zt_free(c->session);
    zt_free(c);
    return st;
}

static void live_unlink(zt_comm *c, zt_comm_req *r)
{
    if (r->live_prev)
        r->live_prev->live_next = r->live_next;
    else
        c->live_head = r->live_next;
    if (r->live_next) r->live_next->live_prev = r->live_prev;
    r->live_prev = r->live_next = NULL;
}

static void req_free(zt_comm *c, zt_comm_req *r)
{
    if (c->be->req_free) c->be->req_free(c, r);
    zt_free(r);
}

void zt_comm_destroy(zt_comm *c)
{
    if (!c) return;
    watch_stop(c);
    c->be->fini(c);
    c->impl = NULL;
    while (c->live_head) {
        zt_comm_req *r = c->live_head;
        live_unlink(c, r);
        req_free(c, r);
    }
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    zt_free(c->rendezvous);
    zt_free(c->session);
    zt_free(c);
}

void zt_comm_abort(zt_comm *c)
{
    if (!c) return;
    zt_err why;
    zt_err_set(&why, ZT_ERR_CANCELED, "rank %d aborted the communicator (zt_comm_abort)", c->rank);
    zt_comm_set_broken(c, &why);
    c->be->abort(c, &why);
}

int zt_comm_rank(const zt_comm *c)
{
    return c ? c->rank : -1;
}

int zt_comm_world_size(const zt_comm *c)
{
    return c ? c->world : 0;
}

/* ---- issuing ---- */

/* Breaks the comm over a local error so that the peers fail fast instead of waiting for a
 * collective this rank will never run, and returns the error. */
static zt_status fail_issue(zt_comm *c, zt_status st, zt_err *err, const char *what)
{
    zt_err e;
    zt_err_set(&e, st, "%s", what);
    if (zt_comm_set_broken(c, &e)) c->be->abort(c, &e);
    return zt_err_set(err, st, "%s", what);
}

static zt_status issue(zt_comm *c, zt_coll_kind kind, const void *send, void *recv, size_t count,
                       zt_dtype dt, int root, zt_comm_req **req, zt_err *err)
{
    char what[ZT_ERRMSG_MAX];
    if (req) *req = NULL;
    if (!c)
        return zt_err_set(err, ZT_ERR_INVALID, "%s: communicator is NULL", zt_coll_kind_name(kind));

    zt_err first;
    if (zt_comm_get_broken(c, &first)) {
        char d[160];
        describe(kind, c->seq + 1, count, dt, root, d, sizeof(d));
        return zt_err_set(err, first.status, "%s not started, the communicator failed earlier: %s",
                          d, first.msg);
    }

    /* argument checks */
    char d[160];
    describe(kind, c->seq + 1, count, dt, root, d, sizeof(d));
    if (kind != ZT_COLL_BROADCAST && kind != ZT_COLL_BARRIER && (unsigned)dt > ZT_F16) {
        snprintf(what, sizeof(what), "%s on rank %d: unknown dtype %d (use fp32, bf16 or fp16)", d,
                 c->rank, (int)dt);
        return fail_issue(c, ZT_ERR_INVALID, err, what);
    }
    if (kind == ZT_COLL_BROADCAST && (root < 0 || root >= c->world)) {
        snprintf(what, sizeof(what), "%s on rank %d: root %d is not a rank of this world of %d", d,
                 c->rank, root, c->world);
        return fail_issue(c, ZT_ERR_INVALID, err, what);
    }
    size_t es = kind == ZT_COLL_BROADCAST ? 1 : zt_dtype_size(dt);
    size_t mult =
        (kind == ZT_COLL_REDUCE_SCATTER || kind == ZT_COLL_ALLGATHER) ? (size_t)c->world : 1;
    if (count > SIZE_MAX / es / mult) {
        snprintf(what, sizeof(what), "%s on rank %d: buffer size overflows", d, c->rank);
        return fail_issue(c, ZT_ERR_INVALID, err, what);
    }
    if (count > 0 && kind != ZT_COLL_BARRIER) {
        bool need_send = kind == ZT_COLL_REDUCE_SCATTER || kind == ZT_COLL_ALLGATHER;
        bool need_recv = kind != ZT_COLL_BARRIER;
        if ((need_send && !send) || (need_recv && !recv)) {
            snprintf(what, sizeof(what), "%s on rank %d: NULL buffer for %zu elements", d, c->rank,
                     count);
            return fail_issue(c, ZT_ERR_INVALID, err, what);
        }
    }

    if ((kind == ZT_COLL_REDUCE_SCATTER || kind == ZT_COLL_ALLGATHER) && count > 0) {
        /* in place means exactly the rank's own chunk of the big buffer; any other overlap
         * would read data the collective already overwrote */
        uintptr_t chunk = (uintptr_t)(count * es);
        uintptr_t big = (uintptr_t)(kind == ZT_COLL_REDUCE_SCATTER ? send : recv);
        uintptr_t small = (uintptr_t)(kind == ZT_COLL_REDUCE_SCATTER ? recv : send);
        uintptr_t big_end = big + chunk * (uintptr_t)c->world, small_end = small + chunk;
        bool overlap = small < big_end && big < small_end;
        if (overlap && small != big + chunk * (uintptr_t)c->rank) {
            snprintf(
                what, sizeof(what),
                "%s on rank %d: send and receive buffers overlap without being in place (in place, the %s buffer must be chunk %d of the %s buffer)",
                d, c->rank, kind == ZT_COLL_REDUCE_SCATTER ? "receive" : "send", c->rank,
                kind == ZT_COLL_REDUCE_SCATTER ? "send" : "receive");
            return fail_issue(c, ZT_ERR_INVALID, err, what);
        }
    }

    zt_comm_req *r = zt_calloc(1, sizeof(*r));
    if (!r) {
        snprintf(what, sizeof(what), "%s on rank %d: out of memory for the request", d, c->rank);
        return fail_issue(c, ZT_ERR_NOMEM, err, what);
    }
    r->comm = c;
    r->kind = kind;
    r->send = send;
    r->recv = recv;
    r->count = count;
    r->dt = kind == ZT_COLL_BROADCAST || kind == ZT_COLL_BARRIER ? ZT_F32 : dt;
    r->root = root;
    r->state = ZT_REQ_QUEUED;

    pthread_mutex_lock(&c->lock);
    r->seq = ++c->seq;
    zt_comm_recent *e = &c->recent[r->seq % ZT_COMM_RECENT];
    memset(e, 0, sizeof(*e));
    e->seq = r->seq;
    e->kind = kind;
    e->count = count;
    e->dt = r->dt;
    e->root = root;
    e->state = ZT_REQ_QUEUED;
    e->t_issue = zt_now_s();
    r->live_next = c->live_head;
    if (c->live_head) c->live_head->live_prev = r;
    c->live_head = r;
    pthread_mutex_unlock(&c->lock);

    zt_err e2;
    zt_err_clear(&e2);
    zt_status st = c->be->submit(c, r, &e2);
    if (st != ZT_OK) {
        zt_comm_req_finish(c, r, st, &e2);
        c->be->abort(c, &r->err);
        return zt_comm_wait(c, r, err);
    }
    if (req) {
        *req = r;
        return ZT_OK;
    }
    return zt_comm_wait(c, r, err);
}

zt_status zt_comm_allreduce(zt_comm *c, void *buf, size_t count, zt_dtype dt, zt_comm_req **req,
                            zt_err *err)
{
    return issue(c, ZT_COLL_ALLREDUCE, buf, buf, count, dt, 0, req, err);
}

zt_status zt_comm_reduce_scatter(zt_comm *c, const void *send, void *recv, size_t recv_count,
                                 zt_dtype dt, zt_comm_req **req, zt_err *err)
{
    return issue(c, ZT_COLL_REDUCE_SCATTER, send, recv, recv_count, dt, 0, req, err);
}

zt_status zt_comm_allgather(zt_comm *c, const void *send, void *recv, size_t send_count,
                            zt_dtype dt, zt_comm_req **req, zt_err *err)
{
    return issue(c, ZT_COLL_ALLGATHER, send, recv, send_count, dt, 0, req, err);
}

zt_status zt_comm_broadcast(zt_comm *c, void *buf, size_t bytes, int root, zt_comm_req **req,
                            zt_err *err)
{
    return issue(c, ZT_COLL_BROADCAST, buf, buf, bytes, ZT_F32, root, req, err);
}

zt_status zt_comm_barrier(zt_comm *c, zt_err *err)
{
    return issue(c, ZT_COLL_BARRIER, NULL, NULL, 0, ZT_F32, 0, NULL, err);
}

zt_status zt_comm_wait(zt_comm *c, zt_comm_req *r, zt_err *err)
{
    if (!c || !r)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "zt_comm_wait: communicator and request must not be NULL");
    if (r->comm != c)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "zt_comm_wait: the request belongs to another communicator");
    c->be->wait(c, r);
    pthread_mutex_lock(&c->lock);
    zt_status st = r->state == ZT_REQ_DONE ? ZT_OK : r->err.status;
    if (st != ZT_OK && err) *err = r->err;
    live_unlink(c, r);
    pthread_mutex_unlock(&c->lock);
    req_free(c, r);
    return st == ZT_OK ? ZT_OK : st;
}

/* ---- introspection ---- */

void zt_comm_get_stats(const zt_comm *c, zt_comm_stats *out)
{
    if (!out) return;
    memset(out, 0, sizeof(*out));
    if (!c) return;
    zt_comm *m = (zt_comm *)c; /* the lock is not part of the logical state */
    pthread_mutex_lock(&m->lock);
    *out = m->stats;
    pthread_mutex_unlock(&m->lock);
}

uint64_t zt_comm_backend_buffer_bytes(const zt_comm_backend *b, int world,
                                      size_t max_rs_chunk_bytes)
{
    return b && b->buffer_bytes && world > 1 ? b->buffer_bytes(world, max_rs_chunk_bytes) : 0;
}

bool zt_comm_is_broken(const zt_comm *c)
{
    return c && zt_comm_get_broken((zt_comm *)c, NULL);
}

uint64_t zt_comm_last_seq(const zt_comm *c)
{
    if (!c) return 0;
    zt_comm *m = (zt_comm *)c;
    pthread_mutex_lock(&m->lock);
    uint64_t s = m->seq;
    pthread_mutex_unlock(&m->lock);
    return s;
}

size_t zt_comm_describe_recent(const zt_comm *c, char *buf, size_t len)
{
    if (!buf || len == 0) return 0;
    buf[0] = '\0';
    if (!c) return 0;
    zt_comm *m = (zt_comm *)c;
    size_t used = 0;
    pthread_mutex_lock(&m->lock);
    double now = zt_now_s();
    uint64_t first = m->seq >= ZT_COMM_RECENT ? m->seq - ZT_COMM_RECENT + 1 : 1;
    for (uint64_t s = first; s <= m->seq && used + 1 < len; s++) {
        const zt_comm_recent *e = &m->recent[s % ZT_COMM_RECENT];
        if (e->seq != s) continue;
        char d[160], tail[96];
        describe(e->kind, e->seq, e->count, e->dt, e->root, d, sizeof(d));
        switch (e->state) {
        case ZT_REQ_QUEUED:
            snprintf(tail, sizeof(tail), "queued for %.3f ms", (now - e->t_issue) * 1e3);
            break;
        case ZT_REQ_RUNNING:
            snprintf(tail, sizeof(tail), "running for %.3f ms", (now - e->t_start) * 1e3);
            break;
        case ZT_REQ_DONE:
            snprintf(tail, sizeof(tail), "done in %.3f ms", (e->t_end - e->t_start) * 1e3);
            break;
        case ZT_REQ_FAILED:
            snprintf(tail, sizeof(tail), "failed (%s) after %.3f ms", zt_status_name(e->status),
                     (e->t_end - e->t_start) * 1e3);
            break;
        }
        int n = snprintf(buf + used, len - used, "%s: %s\n", d, tail);
        if (n < 0) break;
        used += (size_t)n < len - used ? (size_t)n : len - used - 1;
    }
    pthread_mutex_unlock(&m->lock);
    return used;
}
