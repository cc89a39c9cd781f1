/* zerotrain: what aio.c shares with its backends (aio_uring.c, aio_threads.c): the pieces a
 * transfer is cut into and the table of backend functions. */
#ifndef ZT_ENGINE_NVME_AIO_INT_H
#define ZT_ENGINE_NVME_AIO_INT_H

#include <sys/types.h>

#include "aio.h"

typedef struct zt_aio_piece {
    zt_aio_req *req;
    char *buf;    /* inside req->buf */
    size_t len;   /* bytes still to move */
    uint64_t off; /* file offset */
    ssize_t res;  /* set by the backend: bytes moved, or -errno */
    struct zt_aio_piece *next;
} zt_aio_piece;

typedef struct zt_aio_backend_ops {
    const char *name;
    zt_status (*open)(zt_aio *a, zt_err *err);
    void (*close)(zt_aio *a);
    /* Queues a piece; 0 or -errno (nothing queued). */
    int (*queue)(zt_aio *a, zt_aio_piece *p);
    /* Hands what was queued to the kernel or the threads; 0 or -errno. */
    int (*flush)(zt_aio *a);
    /* Blocks until a piece completes and returns it with res set; NULL with *errno_out on a
     * failure of the mechanism itself. */
    zt_aio_piece *(*reap)(zt_aio *a, int *errno_out);
} zt_aio_backend_ops;

struct zt_aio {
    zt_aio_config cfg;
    const zt_aio_backend_ops *ops;
    void *impl;
    zt_aio_piece *pieces; /* queue_depth of them */
    zt_aio_piece *free_pieces;
    int inflight;
    zt_aio_req *active; /* requests with bytes not yet queued, in submission order */
};

extern const zt_aio_backend_ops zt_aio_uring_ops;
extern const zt_aio_backend_ops zt_aio_threads_ops;

#endif
