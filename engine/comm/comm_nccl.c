/* zerotrain: the NCCL collective backend for GPU ranks. Shares the ncclUniqueId through the
 * TCP rendezvous of comm_net.c, runs every collective on its own communication stream ordered
 * after the compute stream with CUDA events, and waits by polling those events together with
 * ncclCommGetAsyncError, aborting the communicator on an error or a timeout. */
#define _POSIX_C_SOURCE 200809L
#include "comm_int.h"

#include <cuda_runtime.h>
/* nccl.h declares a few functions as f() */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../../common/alloc.h"
#include "../../common/log.h"
#include "../../common/timeutil.h"
#include "../../kernels/ops.h"

typedef struct nccl_impl {
    pthread_mutex_t lock; /* guards comm: abort may come from another thread */
    ncclComm_t comm;      /* NULL once aborted or destroyed */
    cudaStream_t stream;  /* communication stream */
    cudaStream_t compute; /* the engine's compute stream (NULL: the legacy default stream) */
    cudaEvent_t compute_ready;
    float *barrier_buf; /* one device float for barriers */
    int device;
    atomic_int aborted;
} nccl_impl;

typedef struct nccl_req {
    cudaEvent_t start, done;
} nccl_req;

/* CUDA / NCCL failures, translated once here. The macros jump to a label the caller names. */
#define CUDA_TRY(call, label)                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            st = zt_err_set(err, ZT_ERR_CUDA, "%s: %s (%s)", #call, cudaGetErrorString(e_),        \
                            cudaGetErrorName(e_));                                                 \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

static zt_status nccl_fail(zt_err *err, ncclResult_t r, ncclComm_t comm, const char *what)
{
    const char *last = comm ? ncclGetLastError(comm) : "";
    return zt_err_set(err, ZT_ERR_NCCL, "%s: %s%s%s", what, ncclGetErrorString(r),
                      last && *last ? ": " : "", last ? last : "");
}

static ncclDataType_t nccl_type(zt_dtype dt)
{
    return dt == ZT_F32 ? ncclFloat32 : dt == ZT_BF16 ? ncclBfloat16 : ncclFloat16;
}

static void pause_briefly(unsigned *spins)
{
    if (++*spins < 200) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 20000}; /* 20 us */
    nanosleep(&ts, NULL);
}

/* A non-blocking communicator may answer ncclInProgress; this waits (lock held) until the
 * call has really finished or the deadline passes. */
static ncclResult_t settle(ncclComm_t comm, ncclResult_t r, uint64_t deadline_ns)
{
    unsigned spins = 0;
    while (r == ncclInProgress) {
        if (zt_now_ns() > deadline_ns) return ncclInProgress;
        pause_briefly(&spins);
        if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclInternalError;
    }
    return r;
}

static void abort_locked(nccl_impl *n)
{
    if (n->comm) {
        ncclCommAbort(n->comm);
        n->comm = NULL;
    }
}

static zt_status nccl_init(zt_comm *c, const zt_comm_opts *opts, zt_err *err)
{
    zt_status st = ZT_OK;
    nccl_impl *n = zt_calloc(1, sizeof(*n));
    if (!n) return zt_err_set(err, ZT_ERR_NOMEM, "comm nccl: out of memory");
    atomic_init(&n->aborted, 0);
    n->device = opts->device;
    if (pthread_mutex_init(&n->lock, NULL) != 0) {
        zt_free(n);
        return zt_err_set(err, ZT_ERR_INTERNAL, "comm nccl: pthread_mutex_init failed");
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        st = zt_err_set(
            err, ZT_ERR_NO_DEVICE,
            "rank %d: no CUDA device is visible (CUDA_VISIBLE_DEVICES, driver); use the tcp backend for CPU ranks",
            c->rank);
        goto free_impl;
    }
    if (opts->device < 0 || opts->device >= ndev) {
        st = zt_err_set(err, ZT_ERR_CONFIG, "rank %d: GPU %d does not exist (%d visible)", c->rank,
                        opts->device, ndev);
        goto free_impl;
    }
    CUDA_TRY(cudaSetDevice(opts->device), free_impl);
    if (opts->kctx) {
        const zt_ops *ops = zt_ops_cuda();
        if (ops && ops->stream) n->compute = (cudaStream_t)ops->stream(opts->kctx);
    }
    CUDA_TRY(cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking), free_impl);
    CUDA_TRY(cudaEventCreateWithFlags(&n->compute_ready, cudaEventDisableTiming), destroy_stream);
    CUDA_TRY(cudaMalloc((void **)&n->barrier_buf, sizeof(float)), destroy_event);
    CUDA_TRY(cudaMemset(n->barrier_buf, 0, sizeof(float)), free_barrier);

    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (c->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            st = nccl_fail(err, r, NULL, "ncclGetUniqueId");
            goto free_barrier;
        }
    }
    uint64_t deadline = zt_now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
    if (c->world > 1) {
        st = zt_comm_net_rendezvous(opts, c->session, c->timeout_ms, 0, &id, sizeof(id), NULL, NULL,
                                    0, err);
        if (st != ZT_OK) goto free_barrier;
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* so that a missing rank cannot hang creation past the timeout */
    ncclResult_t r = ncclCommInitRankConfig(&n->comm, c->world, id, c->rank, &cfg);
    if (r == ncclInProgress || r == ncclSuccess) r = settle(n->comm, r, deadline);
    if (r != ncclSuccess) {
        if (r == ncclInProgress)
            st = zt_err_set(
                err, ZT_ERR_TIMEOUT,
                "rank %d: NCCL communicator creation (%d ranks) did not finish within %d ms; a rank is missing or cannot reach the others",
                c->rank, c->world, c->timeout_ms);
        else
            st = nccl_fail(err, r, n->comm, "ncclCommInitRankConfig");
        abort_locked(n);
        goto free_barrier;
    }
    c->impl = n;
    return ZT_OK;

free_barrier:
    cudaFree(n->barrier_buf);
destroy_event:
    cudaEventDestroy(n->compute_ready);
destroy_stream:
    cudaStreamDestroy(n->stream);
free_impl:
    pthread_mutex_destroy(&n->lock);
    zt_free(n);
    return st;
}

static void nccl_abort(zt_comm *c, const zt_err *why)
{
    (void)why; /* NCCL peers see the communicator fail; they cannot be told why */
    nccl_impl *n = c->impl;
    if (!n) return;
    atomic_store(&n->aborted, 1);
    pthread_mutex_lock(&n->lock);
    abort_locked(n);
    pthread_mutex_unlock(&n->lock);
}

static void nccl_fini(zt_comm *c)
{
    nccl_impl *n = c->impl;
    if (!n) return;
    cudaSetDevice(n->device);
    /* finalizing waits for queued work; with requests still pending, abandon them instead */
    bool pending = false;
    pthread_mutex_lock(&c->lock);
    for (zt_comm_req *r = c->live_head; r; r = r->live_next)
        if (r->state == ZT_REQ_QUEUED || r->state == ZT_REQ_RUNNING) pending = true;
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_lock(&n->lock);
    if (n->comm) {
        bool clean = !pending && !zt_comm_get_broken(c, NULL);
        if (clean) {
            uint64_t deadline = zt_now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
            ncclResult_t r = ncclCommFinalize(n->comm);
            r = settle(n->comm, r, deadline);
            clean = r == ncclSuccess && ncclCommDestroy(n->comm) == ncclSuccess;
            if (clean) n->comm = NULL;
        }
        abort_locked(n); /* pending work abandoned, or finalize failed */
    }
    pthread_mutex_unlock(&n->lock);
    cudaStreamSynchronize(n->stream);
    cudaFree(n->barrier_buf);
    cudaEventDestroy(n->compute_ready);
    cudaStreamDestroy(n->stream);
    pthread_mutex_destroy(&n->lock);
    zt_free(n);
    c->impl = NULL;
}

static zt_status nccl_submit(zt_comm *c, zt_comm_req *r, zt_err *err)
{
    zt_status st = ZT_OK;
    nccl_impl *n = c->impl;
    char d[160];
    zt_comm_req_describe(r, d, sizeof(d));
    nccl_req *q = zt_calloc(1, sizeof(*q));
    if (!q) return zt_err_set(err, ZT_ERR_NOMEM, "%s: out of memory", d);
    r->backend_data = q;
    CUDA_TRY(cudaEventCreate(&q->start), fail);
    CUDA_TRY(cudaEventCreate(&q->done), fail);
    /* everything the compute stream has queued so far (the gradients) comes first */
    CUDA_TRY(cudaEventRecord(n->compute_ready, n->compute), fail);
    CUDA_TRY(cudaStreamWaitEvent(n->stream, n->compute_ready, 0), fail);
    CUDA_TRY(cudaEventRecord(q->start, n->stream), fail);

    pthread_mutex_lock(&n->lock);
    if (!n->comm) {
        pthread_mutex_unlock(&n->lock);
        st = zt_err_set(err, ZT_ERR_CANCELED, "%s: the NCCL communicator was aborted", d);
        goto fail;
    }
    ncclResult_t res;
    ncclDataType_t t = nccl_type(r->dt);
    switch (r->kind) {
    case ZT_COLL_ALLREDUCE:
        res = ncclAllReduce(r->recv, r->recv, r->count, t, ncclSum, n->comm, n->stream);
        break;
    case ZT_COLL_REDUCE_SCATTER:
        res = ncclReduceScatter(r->send, r->recv, r->count, t, ncclSum, n->comm, n->stream);
        break;
    case ZT_COLL_ALLGATHER:
        res = ncclAllGather(r->send, r->recv, r->count, t, n->comm, n->stream);
        break;
    case ZT_COLL_BROADCAST:
        res = ncclBroadcast(r->recv, r->recv, r->count, ncclUint8, r->root, n->comm, n->stream);
        break;
    default:
        res = ncclAllReduce(n->barrier_buf, n->barrier_buf, 1, ncclFloat32, ncclSum, n->comm,
                            n->stream);
        break;
    }
    res = settle(n->comm, res, zt_now_ns() + (uint64_t)c->timeout_ms * 1000000ull);
    if (res != ncclSuccess) {
        if (res == ncclInProgress)
            st = zt_err_set(err, ZT_ERR_TIMEOUT, "%s: NCCL did not accept the call within %d ms", d,
                            c->timeout_ms);
        else
            st = nccl_fail(err, res, n->comm, d);
        pthread_mutex_unlock(&n->lock);
        goto fail;
    }
    pthread_mutex_unlock(&n->lock);
    CUDA_TRY(cudaEventRecord(q->done, n->stream), fail);
    r->bytes_sent = zt_comm_ring_bytes(r->kind, r->count, r->dt, r->root, c->rank, c->world);
    zt_comm_req_started(c, r);
    return ZT_OK;

fail:
    return st;
}

static void nccl_wait(zt_comm *c, zt_comm_req *r)
{
    nccl_impl *n = c->impl;
    nccl_req *q = r->backend_data;
    zt_err e;
    zt_err_clear(&e);
    pthread_mutex_lock(&c->lock);
    bool finished = r->state == ZT_REQ_DONE || r->state == ZT_REQ_FAILED;
    pthread_mutex_unlock(&c->lock);
    if (finished) return;
    char d[160];
    zt_comm_req_describe(r, d, sizeof(d));
    uint64_t start = zt_now_ns();
    uint64_t deadline = start + (uint64_t)c->timeout_ms * 1000000ull;
    unsigned spins = 0;
    zt_status st = ZT_OK;
    for (;;) {
        cudaError_t ce = cudaEventQuery(q->done);
        if (ce == cudaSuccess) {
            float ms = 0;
            if (cudaEventElapsedTime(&ms, q->start, q->done) == cudaSuccess) r->busy_s = ms * 1e-3;
            /* later compute sees the result even if nobody synchronises the host */
            cudaStreamWaitEvent(n->compute, q->done, 0);
            break;
        }
        if (ce != cudaErrorNotReady) {
            st = zt_err_set(&e, ZT_ERR_CUDA, "%s: %s (%s)", d, cudaGetErrorString(ce),
                            cudaGetErrorName(ce));
            break;
        }
        pthread_mutex_lock(&n->lock);
        ncclResult_t ae = ncclSuccess;
        if (!n->comm) {
            pthread_mutex_unlock(&n->lock);
            zt_err first;
            if (zt_comm_get_broken(c, &first))
                st = zt_err_set(&e, first.status, "%s: %s", d, first.msg);
            else
                st = zt_err_set(&e, ZT_ERR_CANCELED, "%s: the NCCL communicator was aborted", d);
            break;
        }
        if (ncclCommGetAsyncError(n->comm, &ae) != ncclSuccess) ae = ncclInternalError;
        if (ae != ncclSuccess && ae != ncclInProgress) {
            st = nccl_fail(&e, ae, n->comm, d);
            if (ae == ncclRemoteError || ae == ncclSystemError) /* a peer died or failed */
                st = e.status = ZT_ERR_PEER;
            pthread_mutex_unlock(&n->lock);
            break;
        }
        pthread_mutex_unlock(&n->lock);
        if (zt_now_ns() > deadline) {
            st = zt_err_set(
                &e, ZT_ERR_TIMEOUT,
                "%s: not complete after %d ms; a rank is stalled, dead or issued a different collective (NCCL cannot say which; compare the ranks' recent collectives); the NCCL communicator was aborted",
                d, c->timeout_ms);
            break;
        }
        pause_briefly(&spins);
    }
    if (st != ZT_OK) {
        /* an error leaves the communicator unusable: abort so that the peers fail too */
        atomic_store(&n->aborted, 1);
        pthread_mutex_lock(&n->lock);
        abort_locked(n);
        pthread_mutex_unlock(&n->lock);
    }
    zt_comm_req_finish(c, r, st, &e);
}

static void nccl_req_free(zt_comm *c, zt_comm_req *r)
{
    (void)c;
    nccl_req *q = r->backend_data;
    if (!q) return;
    if (q->start) cudaEventDestroy(q->start);
    if (q->done) cudaEventDestroy(q->done);
    zt_free(q);
    r->backend_data = NULL;
}

static const zt_comm_backend nccl_backend = {
    .name = "nccl",
    .init = nccl_init,
    .fini = nccl_fini,
    .abort = nccl_abort,
    .submit = nccl_submit,
    .wait = nccl_wait,
    .req_free = nccl_req_free,
};

const zt_comm_backend *zt_comm_backend_nccl(void)
{
    return &nccl_backend;
}
