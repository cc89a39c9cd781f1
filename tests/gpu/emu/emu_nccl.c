/* zerotrain tests: the NCCL calls engine/comm/comm_nccl.c makes, emulated across the processes of
 * one machine, so that the GPU engine's NCCL path (rendezvous of the unique id, communicator
 * creation, the collectives on the communication stream, events, waits, errors) runs in CI on
 * the emulated GPUs of emu_runtime.c.
 *
 * What it keeps of NCCL: collectives are asynchronous — a call queues the collective on the
 * communicator's thread and on the stream (emu_runtime.c), and returns; the collective is done
 * when every rank has called it, and only then is an event recorded behind it complete.
 * Non-blocking communicators answer ncclInProgress until every rank has joined (creation) or
 * everything queued is done (finalize). An error (a peer that aborted or exited, collectives
 * that do not match across ranks, a buffer that is not device memory) is reported by
 * ncclCommGetAsyncError and ncclGetLastError, and the collective then never completes, as on a
 * GPU, until ncclCommAbort. A rank that is alive but never arrives makes the others wait, which
 * only the caller's timeout ends.
 *
 * How: the unique id names POSIX shared memory: a control block (per rank: pid, the last
 * collective it has published its input for, the last one it has read everybody's input for, a
 * signature of that collective) and one region per rank holding its input of the current
 * collective. Each rank computes its own result from all the regions: sums in rank order, in
 * fp32, rounded to the buffer's type after each addition, as a ring's hops do. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "common/dtype.h"
#include "emu_int.h"

#define EMU_NCCL_MAX_RANKS 64
#define EMU_NCCL_PREFIX "/zt-emu-nccl-"
#define EMU_NCCL_MAGIC 0x7a746e63636cULL /* "ztnccl" */

typedef enum { C_ALLREDUCE = 1, C_REDUCE_SCATTER, C_ALLGATHER, C_BROADCAST } coll_kind;

static const char *const kind_name[] = {"?", "ncclAllReduce", "ncclReduceScatter", "ncclAllGather",
                                        "ncclBroadcast"};

typedef struct rank_slot {
    atomic_int pid;                 /* 0: not joined */
    atomic_int aborted;             /* its communicator was aborted */
    atomic_uint_least64_t arrived;  /* last collective whose input is in its region */
    atomic_uint_least64_t consumed; /* last collective it has read every region for */
    atomic_uint_least64_t region_bytes;
    /* the collective it arrived at: kind, count, type, root (compared across ranks) */
    atomic_uint_least64_t sig_kind, sig_count, sig_type, sig_root;
} rank_slot;

typedef struct ctl_block {
    atomic_int world; /* 0 until the first rank joins */
    rank_slot r[EMU_NCCL_MAX_RANKS];
} ctl_block;

typedef struct coll {
    coll_kind kind;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t type;
    int root;
    zt_emu_op *op;
    struct coll *next;
} coll;

typedef struct mapping {
    unsigned char *p;
    size_t len;
} mapping;

struct ncclComm {
    uint64_t magic;
    int rank, world;
    bool blocking;
    char base[64];
    ctl_block *ctl;
    int region_fd;                   /* locked (flock) while this rank lives */
    int peer_fd[EMU_NCCL_MAX_RANKS]; /* peers' regions, opened to test their locks */
    mapping own, peer[EMU_NCCL_MAX_RANKS];

    pthread_t thread;
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t cond;
    coll *head, *tail;
    bool busy;        /* the thread is running a collective */
    bool finalizing;  /* ncclCommFinalize was called */
    atomic_int stop;  /* abort or destroy: the thread returns */
    ncclResult_t err; /* the first asynchronous error */
    char last_error[320];
    uint64_t seq; /* collectives run (the thread's) */
};

/* ---- helpers ---- */

static size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8:
    case ncclUint8:
        return 1;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    default:
        return 0; /* not emulated */
    }
}

static bool float_type(ncclDataType_t t)
{
    return t == ncclFloat32 || t == ncclFloat16 || t == ncclBfloat16;
}

static zt_dtype zt_type(ncclDataType_t t)
{
    return t == ncclFloat32 ? ZT_F32 : t == ncclBfloat16 ? ZT_BF16 : ZT_F16;
}

static void slot_name(char *buf, size_t len, const char *base, int rank)
{
    if (rank < 0)
        snprintf(buf, len, "%s-ctl", base);
    else
        snprintf(buf, len, "%s-r%d", base, rank);
}

/* The first error wins; the message is what ncclGetLastError returns. Lock held. */
static void set_error_locked(ncclComm_t c, ncclResult_t r, const char *fmt, ...)
{
    if (c->err != ncclSuccess) return;
    c->err = r;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last_error, sizeof(c->last_error), fmt, ap);
    va_end(ap);
}

static bool comm_ok(ncclComm_t c)
{
    return c && c->magic == EMU_NCCL_MAGIC;
}

/* Maps (or remaps, larger) shared memory object `name` of `len` bytes. */
static int map_shm(mapping *m, const char *name, size_t len, int fd)
{
    int own_fd = fd < 0;
    if (own_fd) {
        fd = shm_open(name, O_RDWR, 0600);
        if (fd < 0) return -1;
    }
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (own_fd) close(fd);
    if (p == MAP_FAILED) return -1;
    if (m->p) munmap(m->p, m->len);
    m->p = p;
    m->len = len;
    return 0;
}

/* ---- the exchange (the communicator's thread) ---- */

/* A rank holds an exclusive lock on its region for as long as it lives (the kernel drops it
 * when the process ends, before a parent reaps it: a zombie counts as dead). */
static bool peer_alive(ncclComm_t c, int k)
{
    if (c->peer_fd[k] < 0) {
        char name[96];
        slot_name(name, sizeof(name), c->base, k);
        c->peer_fd[k] = shm_open(name, O_RDWR, 0600);
        if (c->peer_fd[k] < 0) return errno != ENOENT; /* gone: it ended and removed it */
    }
    if (flock(c->peer_fd[k], LOCK_EX | LOCK_NB) != 0) return true;
    flock(c->peer_fd[k], LOCK_UN);
    return false;
}

/* Whether peer k aborted or exited (then the error is recorded and waiting is over). */
static bool peer_failed(ncclComm_t c, int k, const char *what)
{
    rank_slot *s = &c->ctl->r[k];
    int pid = atomic_load(&s->pid);
    const char *why = NULL;
    if (atomic_load(&s->aborted))
        why = "aborted its communicator";
    else if (k != c->rank && pid > 0 && !peer_alive(c, k))
        why = "exited";
    if (!why) return false;
    pthread_mutex_lock(&c->lock);
    set_error_locked(c, ncclRemoteError, "rank %d (pid %d) %s while rank %d waited in %s #%llu", k,
                     pid, why, c->rank, what, (unsigned long long)c->seq);
    pthread_mutex_unlock(&c->lock);
    return true;
}

/* Waits until every rank's counter (arrived or consumed) reaches want. false: stop or error. */
static bool wait_all(ncclComm_t c, size_t field_off, uint64_t want, const char *what)
{
    unsigned spins = 0;
    for (int k = 0; k < c->world; k++) {
        atomic_uint_least64_t *v = (atomic_uint_least64_t *)((char *)&c->ctl->r[k] + field_off);
        while (atomic_load_explicit(v, memory_order_acquire) < want) {
            if (atomic_load(&c->stop)) return false;
            if ((spins & 63) == 0 && peer_failed(c, k, what)) return false;
            zt_emu_pause(&spins);
        }
    }
    return true;
}

static size_t input_bytes(const ncclComm_t c, const coll *q)
{
    size_t es = type_size(q->type);
    switch (q->kind) {
    case C_REDUCE_SCATTER:
        return q->count * (size_t)c->world * es;
    case C_BROADCAST:
        return c->rank == q->root ? q->count * es : 0;
    default:
        return q->count * es;
    }
}

/* acc (fp32) += element i of x, rounded to type t after the addition, as a ring hop does */
static void reduce_into(void *out, const void *const *in, int world, ncclDataType_t t, size_t off,
                        size_t n)
{
    if (t == ncclFloat32) {
        float *o = out;
        for (size_t i = 0; i < n; i++) {
            float acc = ((const float *)in[0])[off + i];
            for (int k = 1; k < world; k++)
                acc += ((const float *)in[k])[off + i];
            o[i] = acc;
        }
        return;
    }
    zt_dtype d = zt_type(t);
    for (size_t i = 0; i < n; i++) {
        float acc = zt_load_f32(in[0], d, off + i);
        for (int k = 1; k < world; k++) {
            /* rounded after every hop: a 16-bit value travels between ranks */
            uint16_t h;
            zt_store_f32(&h, d, 0, acc + zt_load_f32(in[k], d, off + i));
            acc = zt_load_f32(&h, d, 0);
        }
        zt_store_f32(out, d, i, acc);
    }
}

static bool run_collective(ncclComm_t c, coll *q)
{
    uint64_t s = ++c->seq;
    const char *what = kind_name[q->kind];
    size_t es = type_size(q->type), in_bytes = input_bytes(c, q);
    rank_slot *me = &c->ctl->r[c->rank];

    /* everybody has read this rank's input of the previous collective */
    if (!wait_all(c, offsetof(rank_slot, consumed), s - 1, what)) return false;
    if (in_bytes > c->own.len) {
        size_t len = in_bytes + in_bytes / 4;
        if (ftruncate(c->region_fd, (off_t)len) != 0 || map_shm(&c->own, NULL, len, c->region_fd)) {
            pthread_mutex_lock(&c->lock);
            set_error_locked(c, ncclSystemError,
                             "rank %d: %s #%llu: cannot grow the shared region to %zu bytes: %s",
                             c->rank, what, (unsigned long long)s, len, strerror(errno));
            pthread_mutex_unlock(&c->lock);
            return false;
        }
        atomic_store(&me->region_bytes, len);
    }
    if (in_bytes) memcpy(c->own.p, q->send, in_bytes);
    atomic_store(&me->sig_kind, q->kind);
    atomic_store(&me->sig_count, q->count);
    atomic_store(&me->sig_type, (uint64_t)q->type);
    atomic_store(&me->sig_root, (uint64_t)(q->kind == C_BROADCAST ? q->root : 0));
    atomic_store_explicit(&me->arrived, s, memory_order_release);

    if (!wait_all(c, offsetof(rank_slot, arrived), s, what)) return false;
    const void *in[EMU_NCCL_MAX_RANKS];
    for (int k = 0; k < c->world; k++) {
        rank_slot *p = &c->ctl->r[k];
        if (atomic_load(&p->sig_kind) != (uint64_t)q->kind ||
            atomic_load(&p->sig_count) != q->count ||
            atomic_load(&p->sig_type) != (uint64_t)q->type ||
            atomic_load(&p->sig_root) != atomic_load(&me->sig_root)) {
            unsigned long long pk = atomic_load(&p->sig_kind);
            pthread_mutex_lock(&c->lock);
            set_error_locked(
                c, ncclInvalidUsage,
                "collective #%llu differs across ranks: rank %d called %s(count %zu, type %d), rank %d called %s(count %llu, type %llu); on a GPU this hangs or corrupts memory",
                (unsigned long long)s, c->rank, what, q->count, (int)q->type, k,
                pk < 5 ? kind_name[pk] : "?", (unsigned long long)atomic_load(&p->sig_count),
                (unsigned long long)atomic_load(&p->sig_type));
            pthread_mutex_unlock(&c->lock);
            return false;
        }
        if (k == c->rank) {
            in[k] = c->own.p;
            continue;
        }
        size_t need = (size_t)atomic_load(&p->region_bytes);
        if (need > c->peer[k].len) {
            char name[96];
            slot_name(name, sizeof(name), c->base, k);
            if (map_shm(&c->peer[k], name, need, -1) != 0) {
                pthread_mutex_lock(&c->lock);
                set_error_locked(c, ncclSystemError, "rank %d: cannot map rank %d's region %s: %s",
                                 c->rank, k, name, strerror(errno));
                pthread_mutex_unlock(&c->lock);
                return false;
            }
        }
        in[k] = c->peer[k].p;
    }

    switch (q->kind) {
    case C_ALLREDUCE:
        reduce_into(q->recv, in, c->world, q->type, 0, q->count);
        break;
    case C_REDUCE_SCATTER:
        reduce_into(q->recv, in, c->world, q->type, (size_t)c->rank * q->count, q->count);
        break;
    case C_ALLGATHER:
        for (int k = 0; k < c->world; k++)
            memcpy((char *)q->recv + (size_t)k * q->count * es, in[k], q->count * es);
        break;
    case C_BROADCAST:
        memcpy(q->recv, in[q->root], q->count * es);
        break;
    }
    atomic_store_explicit(&me->consumed, s, memory_order_release);
    return true;
}

static void *comm_thread(void *arg)
{
    ncclComm_t c = arg;
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->head && !atomic_load(&c->stop))
            pthread_cond_wait(&c->cond, &c->lock);
        if (atomic_load(&c->stop)) break;
        if (c->err != ncclSuccess) { /* after an error nothing completes until the abort */
            pthread_cond_wait(&c->cond, &c->lock);
            continue;
        }
        coll *q = c->head;
        c->busy = true;
        pthread_mutex_unlock(&c->lock);
        bool ok = run_collective(c, q);
        pthread_mutex_lock(&c->lock);
        c->busy = false;
        if (ok) {
            c->head = q->next;
            if (!c->head) c->tail = NULL;
            zt_emu_op_done(q->op);
            free(q);
        }
        pthread_cond_broadcast(&c->cond);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* ---- the API ---- */

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t c)
{
    static __thread char copy[sizeof(((struct ncclComm *)0)->last_error)];
    if (!comm_ok(c)) return "";
    pthread_mutex_lock(&c->lock);
    memcpy(copy, c->last_error, sizeof(copy));
    pthread_mutex_unlock(&c->lock);
    return copy;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    static atomic_uint counter;
    if (!id) return ncclInvalidArgument;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    memset(id, 0, sizeof(*id));
    snprintf(id->internal, sizeof(id->internal), EMU_NCCL_PREFIX "%d-%u-%lx", (int)getpid(),
             atomic_fetch_add(&counter, 1), (unsigned long)ts.tv_nsec ^ (unsigned long)ts.tv_sec);
    return ncclSuccess;
}

static bool all_joined(ncclComm_t c)
{
    for (int k = 0; k < c->world; k++)
        if (atomic_load(&c->ctl->r[k].pid) == 0) return false;
    return true;
}

static void comm_free(ncclComm_t c)
{
    char name[96];
    for (int k = 0; k < EMU_NCCL_MAX_RANKS; k++) {
        if (c->peer[k].p) munmap(c->peer[k].p, c->peer[k].len);
        if (c->peer_fd[k] >= 0) close(c->peer_fd[k]);
    }
    if (c->own.p) munmap(c->own.p, c->own.len);
    if (c->region_fd >= 0) {
        close(c->region_fd);
        slot_name(name, sizeof(name), c->base, c->rank);
        shm_unlink(name);
    }
    if (c->ctl) {
        munmap(c->ctl, sizeof(*c->ctl));
        slot_name(name, sizeof(name), c->base, -1);
        shm_unlink(name); /* every rank has it mapped since it joined: the name can go */
    }
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    c->magic = 0;
    free(c);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    if (!out) return ncclInvalidArgument;
    *out = NULL;
    if (nranks < 1 || nranks > EMU_NCCL_MAX_RANKS || rank < 0 || rank >= nranks ||
        strncmp(id.internal, EMU_NCCL_PREFIX, strlen(EMU_NCCL_PREFIX)) != 0 ||
        !memchr(id.internal, 0, sizeof(id.internal)) || strlen(id.internal) > 40)
        return ncclInvalidArgument;
    if (config && (config->magic != 0xcafebeef || config->size != sizeof(ncclConfig_t)))
        return ncclInvalidArgument;
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess) return ncclUnhandledCudaError;
    ncclComm_t c = calloc(1, sizeof(*c));
    if (!c) return ncclSystemError;
    c->magic = EMU_NCCL_MAGIC;
    c->rank = rank;
    c->world = nranks;
    c->region_fd = -1;
    for (int k = 0; k < EMU_NCCL_MAX_RANKS; k++)
        c->peer_fd[k] = -1;
    c->blocking = !config || config->blocking != 0;
    memcpy(c->base, id.internal, strlen(id.internal) + 1); /* checked above: at most 40 */
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);

    char name[96];
    ncclResult_t r = ncclSystemError;
    slot_name(name, sizeof(name), c->base, -1);
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    if (fd < 0) goto fail;
    if (ftruncate(fd, sizeof(ctl_block)) != 0) {
        close(fd);
        goto fail;
    }
    c->ctl = mmap(NULL, sizeof(ctl_block), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (c->ctl == MAP_FAILED) {
        c->ctl = NULL;
        goto fail;
    }
    int zero = 0;
    if (!atomic_compare_exchange_strong(&c->ctl->world, &zero, nranks) && zero != nranks) {
        r = ncclInvalidUsage; /* ranks disagree on the size */
        goto fail;
    }
    slot_name(name, sizeof(name), c->base, rank);
    c->region_fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (c->region_fd < 0) {
        r = errno == EEXIST ? ncclInvalidUsage : ncclSystemError; /* rank taken twice */
        goto fail;
    }
    if (flock(c->region_fd, LOCK_EX | LOCK_NB) != 0) goto fail;
    zero = 0;
    if (!atomic_compare_exchange_strong(&c->ctl->r[rank].pid, &zero, (int)getpid())) {
        r = ncclInvalidUsage;
        goto fail;
    }
    if (pthread_create(&c->thread, NULL, comm_thread, c) != 0) goto fail;
    *out = c;
    if (c->blocking) {
        for (unsigned spins = 0; !all_joined(c); zt_emu_pause(&spins)) {
        }
        return ncclSuccess;
    }
    return all_joined(c) ? ncclSuccess : ncclInProgress;

fail:
    comm_free(c);
    return r;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *async)
{
    if (!comm_ok(c) || !async) return ncclInvalidArgument;
    pthread_mutex_lock(&c->lock);
    ncclResult_t r = c->err;
    if (r == ncclSuccess && (!all_joined(c) || (c->finalizing && (c->head || c->busy))))
        r = ncclInProgress;
    pthread_mutex_unlock(&c->lock);
    *async = r;
    return ncclSuccess;
}

/* Queues one collective on the communicator's thread and on the stream. */
static ncclResult_t enqueue(ncclComm_t c, coll_kind kind, const void *send, void *recv,
                            size_t count, ncclDataType_t type, int root, cudaStream_t stream)
{
    if (!comm_ok(c)) return ncclInvalidArgument;
    if (!type_size(type) || (kind != C_ALLGATHER && kind != C_BROADCAST && !float_type(type)) ||
        root < 0 || root >= c->world || (count && (!recv || (!send && kind != C_BROADCAST))))
        return ncclInvalidArgument;
    size_t es = type_size(type);
    size_t in_bytes = kind == C_REDUCE_SCATTER ? count * (size_t)c->world * es : count * es;
    size_t out_bytes = kind == C_ALLGATHER ? count * (size_t)c->world * es : count * es;
    const void *src = kind == C_BROADCAST ? recv : send;
    if (count &&
        (!zt_emu_device_range(recv, out_bytes) ||
         ((kind != C_BROADCAST || c->rank == root) && !zt_emu_device_range(src, in_bytes)))) {
        pthread_mutex_lock(&c->lock);
        set_error_locked(
            c, ncclInvalidArgument,
            "%s: a buffer is not device memory (%zu elements; NCCL needs cudaMalloc'd buffers)",
            kind_name[kind], count);
        pthread_mutex_unlock(&c->lock);
        return ncclInvalidArgument;
    }
    pthread_mutex_lock(&c->lock);
    bool finalizing = c->finalizing;
    pthread_mutex_unlock(&c->lock);
    if (finalizing) return ncclInvalidUsage;
    coll *q = calloc(1, sizeof(*q));
    if (!q) return ncclSystemError;
    zt_emu_count(ZT_EMU_COLLECTIVE);
    q->op = zt_emu_op_enqueue(stream);
    if (!q->op) {
        free(q);
        return ncclSystemError;
    }
    q->kind = kind;
    q->send = src;
    q->recv = recv;
    q->count = count;
    q->type = type;
    q->root = root;
    pthread_mutex_lock(&c->lock);
    if (c->tail)
        c->tail->next = q;
    else
        c->head = q;
    c->tail = q;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t c, cudaStream_t stream)
{
    if (op != ncclSum) return ncclInvalidArgument; /* the only reduction the emulation has */
    return enqueue(c, C_ALLREDUCE, send, recv, count, type, 0, stream);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t c, cudaStream_t stream)
{
    if (op != ncclSum) return ncclInvalidArgument;
    return enqueue(c, C_REDUCE_SCATTER, send, recv, recvcount, type, 0, stream);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t type,
                           ncclComm_t c, cudaStream_t stream)
{
    return enqueue(c, C_ALLGATHER, send, recv, sendcount, type, 0, stream);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t c, cudaStream_t stream)
{
    (void)send; /* comm_nccl.c broadcasts in place; the root's data is read from recv */
    return enqueue(c, C_BROADCAST, NULL, recv, count, type, root, stream);
}

ncclResult_t ncclCommFinalize(ncclComm_t c)
{
    if (!comm_ok(c)) return ncclInvalidArgument;
    pthread_mutex_lock(&c->lock);
    c->finalizing = true;
    if (c->blocking)
        while ((c->head || c->busy) && c->err == ncclSuccess)
            pthread_cond_wait(&c->cond, &c->lock);
    ncclResult_t r = c->err != ncclSuccess ? c->err
                     : c->head || c->busy  ? ncclInProgress
                                           : ncclSuccess;
    pthread_mutex_unlock(&c->lock);
    return r;
}

/* Stops the thread; what is still queued completes without a result (an abort kills the
 * kernels, so streams and events behind them go on). */
static void stop_thread(ncclComm_t c)
{
    pthread_mutex_lock(&c->lock);
    atomic_store(&c->stop, 1);
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->thread, NULL);
    for (coll *q = c->head, *n; q; q = n) {
        n = q->next;
        zt_emu_op_done(q->op);
        free(q);
    }
    c->head = c->tail = NULL;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    if (!comm_ok(c)) return ncclInvalidArgument;
    /* a peer may still have to map this rank's region for the last collective: wait until
     * every peer has read it (or failed) before the name goes */
    pthread_mutex_lock(&c->lock);
    bool clean = c->err == ncclSuccess;
    pthread_mutex_unlock(&c->lock);
    if (clean) (void)wait_all(c, offsetof(rank_slot, consumed), c->seq, "ncclCommDestroy");
    stop_thread(c);
    comm_free(c);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
    if (!comm_ok(c)) return ncclInvalidArgument;
    atomic_store(&c->ctl->r[c->rank].aborted, 1);
    stop_thread(c);
    comm_free(c);
    return ncclSuccess;
}
