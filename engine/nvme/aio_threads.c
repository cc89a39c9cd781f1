/* zerotrain: the thread-pool backend of engine/nvme/aio.h, for kernels or sandboxes without
 * io_uring: thread_count threads take pieces in order and move them with pread/pwrite. */
#define _POSIX_C_SOURCE 200809L
#include "aio_int.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"

typedef struct pool {
    pthread_mutex_t mu;
    pthread_cond_t work;
    pthread_cond_t done;
    zt_aio_piece *todo, **todo_tail;
    zt_aio_piece *finished, **finished_tail;
    bool stop;
    int n_threads;
    pthread_t threads[ZT_AIO_MAX_THREADS];
} pool;

static ssize_t move(zt_aio_piece *p)
{
    size_t moved = 0;
    while (moved < p->len) {
        ssize_t n =
            p->req->dir == ZT_AIO_READ
                ? pread(p->req->fd, p->buf + moved, p->len - moved, (off_t)(p->off + moved))
                : pwrite(p->req->fd, p->buf + moved, p->len - moved, (off_t)(p->off + moved));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return moved ? (ssize_t)moved : -errno;
        if (n == 0) break;
        moved += (size_t)n;
    }
    return (ssize_t)moved;
}

static void *pool_main(void *arg)
{
    pool *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->todo && !q->stop)
            pthread_cond_wait(&q->work, &q->mu);
        if (!q->todo) break;
        zt_aio_piece *p = q->todo;
        q->todo = p->next;
        if (!q->todo) q->todo_tail = &q->todo;
        pthread_mutex_unlock(&q->mu);
        p->res = move(p);
        pthread_mutex_lock(&q->mu);
        p->next = NULL;
        *q->finished_tail = p;
        q->finished_tail = &p->next;
        pthread_cond_signal(&q->done);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void pool_stop(pool *q)
{
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_broadcast(&q->work);
    pthread_mutex_unlock(&q->mu);
    for (int i = 0; i < q->n_threads; i++)
        pthread_join(q->threads[i], NULL);
    pthread_cond_destroy(&q->done);
    pthread_cond_destroy(&q->work);
    pthread_mutex_destroy(&q->mu);
}

static zt_status threads_open(zt_aio *a, zt_err *err)
{
    pool *q = zt_calloc(1, sizeof(*q));
    if (!q) return zt_err_set(err, ZT_ERR_NOMEM, "no memory for an I/O thread pool");
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->work, NULL);
    pthread_cond_init(&q->done, NULL);
    q->todo_tail = &q->todo;
    q->finished_tail = &q->finished;
    for (int i = 0; i < a->cfg.thread_count; i++) {
        int rc = pthread_create(&q->threads[i], NULL, pool_main, q);
        if (rc != 0) {
            pool_stop(q);
            zt_free(q);
            return zt_err_set(err, ZT_ERR_NOMEM, "cannot start I/O thread %d: %s", i, strerror(rc));
        }
        q->n_threads++;
    }
    a->impl = q;
    return ZT_OK;
}

static void threads_close(zt_aio *a)
{
    pool *q = a->impl;
    if (!q) return;
    pool_stop(q);
    zt_free(q);
    a->impl = NULL;
}

static int threads_queue(zt_aio *a, zt_aio_piece *p)
{
    pool *q = a->impl;
    pthread_mutex_lock(&q->mu);
    p->next = NULL;
    *q->todo_tail = p;
    q->todo_tail = &p->next;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

static int threads_flush(zt_aio *a)
{
    (void)a;
    return 0;
}

static zt_aio_piece *threads_reap(zt_aio *a, int *errno_out)
{
    (void)errno_out;
    pool *q = a->impl;
    pthread_mutex_lock(&q->mu);
    while (!q->finished)
        pthread_cond_wait(&q->done, &q->mu);
    zt_aio_piece *p = q->finished;
    q->finished = p->next;
    if (!q->finished) q->finished_tail = &q->finished;
    pthread_mutex_unlock(&q->mu);
    return p;
}

const zt_aio_backend_ops zt_aio_threads_ops = {
    .name = "threads",
    .open = threads_open,
    .close = threads_close,
    .queue = threads_queue,
    .flush = threads_flush,
    .reap = threads_reap,
};
