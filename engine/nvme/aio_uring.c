/* zerotrain: the io_uring backend of engine/nvme/aio.h (liburing): one ring per context,
 * queue_depth entries, one submission per batch of pieces unless single_submit. */
#define _POSIX_C_SOURCE 200809L
#include "aio_int.h"

#include <errno.h>
#include <liburing.h>
#include <string.h>

#include "common/alloc.h"

static zt_status uring_open(zt_aio *a, zt_err *err)
{
    struct io_uring *ring = zt_calloc(1, sizeof(*ring));
    if (!ring) return zt_err_set(err, ZT_ERR_NOMEM, "no memory for an io_uring");
    int rc = io_uring_queue_init((unsigned)a->cfg.queue_depth, ring, 0);
    if (rc < 0) {
        zt_free(ring);
        return zt_err_set(err, ZT_ERR_UNSUPPORTED, "io_uring_queue_init: %s", strerror(-rc));
    }
    a->impl = ring;
    return ZT_OK;
}

static void uring_close(zt_aio *a)
{
    struct io_uring *ring = a->impl;
    if (!ring) return;
    io_uring_queue_exit(ring);
    zt_free(ring);
    a->impl = NULL;
}

static int uring_queue(zt_aio *a, zt_aio_piece *p)
{
    struct io_uring *ring = a->impl;
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (!sqe) {
        int rc = io_uring_submit(ring);
        if (rc < 0) return rc;
        if (!(sqe = io_uring_get_sqe(ring))) return -EBUSY;
    }
    if (p->req->dir == ZT_AIO_READ)
        io_uring_prep_read(sqe, p->req->fd, p->buf, (unsigned)p->len, p->off);
    else
        io_uring_prep_write(sqe, p->req->fd, p->buf, (unsigned)p->len, p->off);
    io_uring_sqe_set_data(sqe, p);
    return 0;
}

static int uring_flush(zt_aio *a)
{
    int rc = io_uring_submit(a->impl);
    return rc < 0 ? rc : 0;
}

static zt_aio_piece *uring_reap(zt_aio *a, int *errno_out)
{
    struct io_uring_cqe *cqe = NULL;
    int rc;
    do
        rc = io_uring_wait_cqe(a->impl, &cqe);
    while (rc == -EINTR);
    if (rc < 0) {
        *errno_out = -rc;
        return NULL;
    }
    zt_aio_piece *p = io_uring_cqe_get_data(cqe);
    p->res = cqe->res;
    io_uring_cqe_seen(a->impl, cqe);
    return p;
}

const zt_aio_backend_ops zt_aio_uring_ops = {
    .name = "io_uring",
    .open = uring_open,
    .close = uring_close,
    .queue = uring_queue,
    .flush = uring_flush,
    .reap = uring_reap,
};
