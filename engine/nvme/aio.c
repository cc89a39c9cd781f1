/* zerotrain: the backend-neutral half of engine/nvme/aio.h: cutting transfers into pieces,
 * keeping the queue full, resubmitting short transfers, and turning errno into messages. */
#define _POSIX_C_SOURCE 200809L
#include "aio_int.h"

#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"

static zt_status config_check(zt_aio_config *c, zt_err *err)
{
    if (c->block_size == 0) c->block_size = ZT_AIO_DEFAULT_BLOCK_SIZE;
    if (c->queue_depth == 0) c->queue_depth = ZT_AIO_DEFAULT_QUEUE_DEPTH;
    if (c->thread_count == 0) c->thread_count = 1;
    if (c->block_size % 4096 != 0)
        return zt_err_set(err, ZT_ERR_CONFIG,
                          "aio.block_size %zu is not a multiple of 4096 (what direct I/O needs)",
                          c->block_size);
    if (c->block_size > ZT_AIO_MAX_BLOCK_SIZE)
        return zt_err_set(err, ZT_ERR_CONFIG, "aio.block_size %zu is over the limit of %zu bytes",
                          c->block_size, ZT_AIO_MAX_BLOCK_SIZE);
    if (c->queue_depth < 1 || c->queue_depth > ZT_AIO_MAX_QUEUE_DEPTH)
        return zt_err_set(err, ZT_ERR_CONFIG, "aio.queue_depth %d is outside 1..%d", c->queue_depth,
                          ZT_AIO_MAX_QUEUE_DEPTH);
    if (c->thread_count < 1 || c->thread_count > ZT_AIO_MAX_THREADS)
        return zt_err_set(err, ZT_ERR_CONFIG, "aio.thread_count %d is outside 1..%d",
                          c->thread_count, ZT_AIO_MAX_THREADS);
    return ZT_OK;
}

zt_status zt_aio_open(zt_aio **out, const zt_aio_config *cfg, zt_err *err)
{
    *out = NULL;
    zt_aio_config c = cfg ? *cfg : (zt_aio_config){0};
    zt_status st = config_check(&c, err);
    if (st != ZT_OK) return st;
    const char *want = c.backend && strcmp(c.backend, "auto") != 0 ? c.backend : NULL;
    if (want && strcmp(want, "io_uring") != 0 && strcmp(want, "threads") != 0)
        return zt_err_set(err, ZT_ERR_CONFIG,
                          "unknown I/O backend \"%s\": use \"io_uring\", \"threads\" or \"auto\"",
                          want);
    zt_aio *a = zt_calloc(1, sizeof(*a));
    if (!a) return zt_err_set(err, ZT_ERR_NOMEM, "no memory for an I/O context");
    a->cfg = c;
    a->pieces = zt_calloc((size_t)c.queue_depth, sizeof(*a->pieces));
    if (!a->pieces) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "no memory for %d I/O pieces", c.queue_depth);
        goto free_ctx;
    }
    for (int i = 0; i < c.queue_depth; i++) {
        a->pieces[i].next = a->free_pieces;
        a->free_pieces = &a->pieces[i];
    }
    if (!want || strcmp(want, "io_uring") == 0) {
        zt_err why = {0};
        a->ops = &zt_aio_uring_ops;
        st = a->ops->open(a, &why);
        if (st == ZT_OK) goto opened;
        if (want) {
            zt_err_set(err, st, "%s", zt_err_msg(&why));
            goto free_pieces;
        }
        ZT_INFO("aio", "io_uring unavailable (%s); using %d I/O threads", zt_err_msg(&why),
                c.thread_count);
    }
    a->ops = &zt_aio_threads_ops;
    st = a->ops->open(a, err);
    if (st != ZT_OK) goto free_pieces;
opened:
    *out = a;
    return ZT_OK;
free_pieces:
    zt_free(a->pieces);
free_ctx:
    zt_free(a);
    return st;
}

void zt_aio_close(zt_aio *a)
{
    if (!a) return;
    a->ops->close(a);
    zt_free(a->pieces);
    zt_free(a);
}

const char *zt_aio_backend(const zt_aio *a)
{
    return a->ops->name;
}

/* Queues pieces of the active requests while pieces are free; then flushes. */
static int pump(zt_aio *a)
{
    int queued = 0;
    while (a->active && a->free_pieces) {
        zt_aio_req *r = a->active;
        zt_aio_piece *p = a->free_pieces;
        /* once queued, p is the backend's (the thread pool links it into its own lists) */
        zt_aio_piece *next = p->next;
        size_t n = r->len - r->queued;
        if (n > a->cfg.block_size) n = a->cfg.block_size;
        *p = (zt_aio_piece){.req = r,
                            .buf = (char *)r->buf + r->queued,
                            .len = n,
                            .off = r->off + r->queued,
                            .next = next};
        int rc = a->ops->queue(a, p);
        if (rc < 0) return rc;
        a->free_pieces = next;
        r->queued += n;
        r->inflight++;
        a->inflight++;
        queued++;
        if (r->queued == r->len) a->active = r->next;
        if (a->cfg.single_submit && (rc = a->ops->flush(a)) < 0) return rc;
    }
    return queued && !a->cfg.single_submit ? a->ops->flush(a) : 0;
}

static void unlink_active(zt_aio *a, zt_aio_req *r)
{
    for (zt_aio_req **pp = &a->active; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            return;
        }
}

zt_status zt_aio_submit(zt_aio *a, zt_aio_req *r, zt_err *err)
{
    if (r->len == 0 || !r->buf)
        return zt_err_set(err, ZT_ERR_INVALID, "I/O request on %s with no bytes",
                          r->path ? r->path : "a file");
    r->queued = r->done = 0;
    r->inflight = 0;
    r->error = 0;
    r->next = NULL;
    zt_aio_req **tail = &a->active;
    while (*tail)
        tail = &(*tail)->next;
    *tail = r;
    if (a->cfg.overlap_events || a->inflight == 0) {
        int rc = pump(a);
        if (rc < 0)
            return zt_err_set(err, ZT_ERR_IO, "cannot start I/O on %s: %s",
                              r->path ? r->path : "a file", strerror(-rc));
    }
    return ZT_OK;
}

/* Records a completed piece on its request; a short transfer goes back in the queue. */
static int complete(zt_aio *a, zt_aio_piece *p)
{
    zt_aio_req *r = p->req;
    if (p->res > 0 && (size_t)p->res < p->len && r->error == 0) {
        r->done += (size_t)p->res;
        p->buf += p->res;
        p->off += (uint64_t)p->res;
        p->len -= (size_t)p->res;
        int rc = a->ops->queue(a, p);
        return rc < 0 ? rc : a->ops->flush(a);
    }
    if (p->res < 0 || (p->res == 0 && p->len > 0)) {
        if (r->error == 0) {
            r->error = p->res < 0 ? (int)-p->res : -1;
            r->err_at = p->off;
            /* queue nothing more of this request */
            r->queued = r->len;
            unlink_active(a, r);
        }
    } else {
        r->done += (size_t)p->res;
    }
    r->inflight--;
    a->inflight--;
    p->next = a->free_pieces;
    a->free_pieces = p;
    return 0;
}

zt_status zt_aio_wait(zt_aio *a, zt_aio_req *r, zt_err *err)
{
    const char *path = r->path ? r->path : "a file";
    while (r->queued < r->len || r->inflight > 0) {
        if (r->inflight == 0 && a->inflight == 0) {
            int rc = pump(a);
            if (rc < 0)
                return zt_err_set(err, ZT_ERR_IO, "cannot start I/O on %s: %s", path,
                                  strerror(-rc));
            if (a->inflight == 0) break;
        }
        int e = 0;
        zt_aio_piece *p = a->ops->reap(a, &e);
        if (!p) return zt_err_set(err, ZT_ERR_IO, "waiting for I/O on %s: %s", path, strerror(e));
        int rc = complete(a, p);
        if (rc == 0 && (a->cfg.overlap_events || a->inflight == 0)) rc = pump(a);
        if (rc < 0)
            return zt_err_set(err, ZT_ERR_IO, "cannot continue I/O on %s: %s", path, strerror(-rc));
    }
    if (r->error == 0) return ZT_OK;
    const char *what = r->dir == ZT_AIO_READ ? "reading" : "writing";
    if (r->error == -1)
        return zt_err_set(err, ZT_ERR_IO, "%s %s at offset %llu: the file ends there", what, path,
                          (unsigned long long)r->err_at);
    return zt_err_set(err, r->error == ENOSPC || r->error == EDQUOT ? ZT_ERR_NOSPACE : ZT_ERR_IO,
                      "%s %s at offset %llu: %s", what, path, (unsigned long long)r->err_at,
                      strerror(r->error));
}
