/* zerotrain: asynchronous file I/O for NVMe offload. A transfer (one buffer at one file
 * offset) is cut into block_size pieces with up to queue_depth of them in flight, through
 * io_uring where the kernel allows it, else a pool of threads doing pread/pwrite. */
#ifndef ZT_ENGINE_NVME_AIO_H
#define ZT_ENGINE_NVME_AIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

/* DeepSpeed's "aio" block; zero fields take the defaults below. */
typedef struct zt_aio_config {
    size_t block_size;   /* bytes per piece; default 1 MiB; a multiple of 4096 */
    int queue_depth;     /* pieces in flight; default 8 */
    int thread_count;    /* threads of the pool backend; default 1 */
    bool single_submit;  /* io_uring: one submission call per piece instead of per batch */
    bool overlap_events; /* refill the queue as each piece completes (else when it drains) */
    const char *backend; /* NULL or "auto": io_uring where it works, else "threads" */
} zt_aio_config;

#define ZT_AIO_DEFAULT_BLOCK_SIZE ((size_t)1 << 20)
#define ZT_AIO_DEFAULT_QUEUE_DEPTH 8
#define ZT_AIO_MAX_BLOCK_SIZE ((size_t)1 << 30)
#define ZT_AIO_MAX_QUEUE_DEPTH 1024
#define ZT_AIO_MAX_THREADS 64

typedef enum { ZT_AIO_READ, ZT_AIO_WRITE } zt_aio_dir;

/* One transfer. The caller fills the first five fields, owns the struct and the buffer, and
 * keeps both alive and untouched from zt_aio_submit until zt_aio_wait returns for it. */
typedef struct zt_aio_req {
    zt_aio_dir dir;
    int fd;
    void *buf;
    size_t len;
    uint64_t off;
    const char *path; /* named in error messages; not owned */
    /* private to aio.c */
    size_t queued;   /* bytes handed to pieces so far */
    size_t done;     /* bytes completed */
    int inflight;    /* pieces in flight */
    int error;       /* first errno seen, or -1 for an unexpected end of file */
    uint64_t err_at; /* file offset of that error */
    struct zt_aio_req *next;
} zt_aio_req;

typedef struct zt_aio zt_aio;

/* Opens an I/O context. With backend "io_uring" a kernel without io_uring is an error; with
 * NULL/"auto" it falls back to threads. Errors: ZT_ERR_CONFIG (bad sizes, unknown backend),
 * ZT_ERR_UNSUPPORTED, ZT_ERR_NOMEM. One thread at a time may use a context. */
zt_status zt_aio_open(zt_aio **out, const zt_aio_config *cfg, zt_err *err);
/* Waits for nothing: the caller must have waited for every request it submitted. NULL is a
 * no-op. */
void zt_aio_close(zt_aio *a);
/* "io_uring" or "threads". */
const char *zt_aio_backend(const zt_aio *a);

/* Starts a transfer; returns at once (pieces beyond the queue depth start as others finish,
 * inside zt_aio_wait). Errors: ZT_ERR_INVALID for a zero-length or busy request. */
zt_status zt_aio_submit(zt_aio *a, zt_aio_req *r, zt_err *err);
/* Blocks until r has completed (other requests progress meanwhile). A failed piece stops the
 * request: ZT_ERR_NOSPACE for a full disk, ZT_ERR_IO otherwise, with the file, offset and
 * reason in err. */
zt_status zt_aio_wait(zt_aio *a, zt_aio_req *r, zt_err *err);

#endif
