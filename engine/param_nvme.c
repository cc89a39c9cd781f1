/* zerotrain: NVMe offload of the stage-3 parameter shard (offload_param.device "nvme", as in
 * ZeRO-Infinity). The shard's first units, up to max_in_cpu elements, stay in host memory
 * (e->params, pinned on CUDA ranks); each later unit's slice is one segment of a "params" swap
 * file (engine/nvme/swap.h), read into one of buffer_count host buffers when the engine uses it
 * (a gather copies it up from there). A read reads the next units ahead in the direction of
 * travel (forward up, backward down), as many as the free buffers, stage3_prefetch_bucket_size
 * and stage3_max_live_parameters allow; a unit the optimizer or a load changed is written back
 * behind, once another unit is used. */
#define _POSIX_C_SOURCE 200809L
#include "engine_int.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/log.h"
#include "nvme/swap.h"

#define PNVME_MAX_BUFS 64

enum { IO_NONE, IO_READ, IO_WRITE };

/* One host buffer: a swapped unit's shard slice, or nothing. */
typedef struct pbuf {
    void *buf;
    int unit;   /* -1: empty */
    bool dirty; /* holds values the swap file does not have yet */
    int io;     /* IO_*: the transfer in flight through buf */
    bool lent;  /* CUDA: handed out since the last sync (a copy to the device may read it) */
    zt_swap_io req;
    uint64_t stamp; /* last use; the least recent buffer is reused first */
} pbuf;

typedef struct zt_pnvme {
    zt_aio *aio;
    zt_swap *swap;
    int first;  /* units [first, nu) are swapped: unit u is segment u - first */
    size_t cap; /* bytes of one buffer */
    int nbuf;
    pbuf b[PNVME_MAX_BUFS];
    uint64_t stamp;
    int last; /* the unit asked for last: the direction of the read-ahead */
    char dir[PATH_MAX];
} zt_pnvme;

static size_t align_up(size_t x)
{
    return (x + ZT_SWAP_ALIGN - 1) / ZT_SWAP_ALIGN * ZT_SWAP_ALIGN;
}

int zt_engine_pnvme_first(const zt_engine *e)
{
    if (!e->job.ds.zero.offload_param.nvme || !zt_zero_params_sharded(e->zero)) return e->nu;
    uint64_t keep = (uint64_t)e->job.ds.zero.offload_param.max_in_cpu, sum = 0;
    int u = 0;
    for (; u < e->nu && sum + e->S[u] <= keep; u++)
        sum += e->S[u];
    return u;
}

size_t zt_engine_pnvme_resident_elems(const zt_engine *e)
{
    int first = zt_engine_pnvme_first(e);
    return first == e->nu ? zt_zero_param_elems(e->zero) : zt_zero_param_span(e->zero, first).off;
}

/* Bytes of one buffer: the largest swapped unit's shard slice, 4 KiB-aligned. */
static size_t buffer_cap(const zt_engine *e, int first)
{
    size_t big = 0;
    for (int u = first; u < e->nu; u++)
        if (e->S[u] > big) big = e->S[u];
    return align_up(big * zt_engine_psize(e));
}

static int buffer_count(const zt_engine *e)
{
    int n = e->job.ds.zero.offload_param.buffer_count;
    return n < 1 ? 1 : n > PNVME_MAX_BUFS ? PNVME_MAX_BUFS : n;
}

size_t zt_engine_pnvme_buffer_bytes(const zt_engine *e)
{
    int first = zt_engine_pnvme_first(e);
    if (first == e->nu) return 0;
    /* one alignment's slack: the arena aligns to less than ZT_SWAP_ALIGN */
    return (size_t)buffer_count(e) * buffer_cap(e, first) + ZT_SWAP_ALIGN;
}

uint64_t zt_engine_pnvme_disk_bytes(const zt_engine *e)
{
    uint64_t n = 0;
    for (int u = zt_engine_pnvme_first(e); u < e->nu; u++)
        n += align_up(e->S[u] * zt_engine_psize(e));
    return n;
}

zt_status zt_engine_pnvme_open(zt_engine *e, zt_err *err)
{
    const zt_offload_cfg *off = &e->job.ds.zero.offload_param;
    if (!off->nvme) return ZT_OK;
    int first = zt_engine_pnvme_first(e);
    if (first == e->nu) {
        ZT_INFO("nvme", "the parameter shard (%zu elements) fits offload_param.max_in_cpu: no swap",
                zt_zero_param_elems(e->zero));
        return ZT_OK;
    }
    size_t biggest = 0;
    for (int u = first; u < e->nu; u++)
        if (e->S[u] > biggest) biggest = e->S[u];
    if ((uint64_t)off->buffer_size < biggest)
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "offload_param.buffer_size %lld is smaller than this rank's largest unit shard (%zu elements): raise it to at least %zu",
            (long long)off->buffer_size, biggest, biggest);
    int nseg = e->nu - first;
    zt_pnvme *nv = zt_calloc(1, sizeof(*nv));
    size_t *lens = zt_calloc((size_t)nseg, sizeof(*lens));
    if (!nv || !lens) {
        zt_free(nv);
        zt_free(lens);
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory for the parameter swap's tables");
    }
    e->pnvme = nv;
    nv->first = first;
    nv->last = first;
    nv->cap = buffer_cap(e, first);
    nv->nbuf = buffer_count(e);
    char *base =
        (char *)(((uintptr_t)e->h_pswapbuf + ZT_SWAP_ALIGN - 1) & ~(uintptr_t)(ZT_SWAP_ALIGN - 1));
    for (int i = 0; i < nv->nbuf; i++, base += nv->cap) {
        nv->b[i].buf = base;
        nv->b[i].unit = -1;
    }
    for (int k = 0; k < nseg; k++)
        lens[k] = e->S[first + k];
    zt_status st = zt_engine_nvme_aio_open(e, &nv->aio, err);
    if (st != ZT_OK) goto free_lens;
    st = zt_engine_nvme_dir(e, "offload_param", off->nvme_path, "_params", nv->dir,
                            sizeof(nv->dir), err);
    if (st != ZT_OK) goto free_lens;
    zt_swap_layout lay = {.n_arrays = 1,
                          .names = {"params"},
                          .elem_bytes = zt_engine_psize(e),
                          .n_segs = nseg,
                          .seg_elems = lens};
    if ((st = zt_swap_open(&nv->swap, nv->dir, &lay, nv->aio, err)) != ZT_OK) {
        zt_err_prefix(err, "offload_param.nvme_path");
        goto free_lens;
    }
    char sz[32];
    ZT_INFO(
        "nvme",
        "parameters of units %d-%d (%zu of %zu shard elements) in %s (%s on disk, %d buffers of %zu KiB, %s I/O)",
        first, e->nu - 1, zt_zero_param_elems(e->zero) - zt_engine_pnvme_resident_elems(e),
        zt_zero_param_elems(e->zero), nv->dir,
        zt_fmt_bytes((int64_t)zt_swap_total_bytes(nv->swap), sz, sizeof(sz)), nv->nbuf,
        nv->cap >> 10, zt_aio_backend(nv->aio));
free_lens:
    zt_free(lens);
    return st;
}

/* Waits for b's transfer. A failed read leaves b empty; a failed write leaves it dirty. */
static zt_status buf_finish(zt_pnvme *nv, pbuf *b, zt_err *err)
{
    if (b->io == IO_NONE) return ZT_OK;
    int io = b->io;
    b->io = IO_NONE;
    zt_status st = zt_swap_finish(nv->swap, &b->req, err);
    if (st != ZT_OK && io == IO_READ) b->unit = -1;
    if (st != ZT_OK && io == IO_WRITE) b->dirty = true;
    return st;
}

static zt_status buf_write_start(zt_pnvme *nv, pbuf *b, zt_err *err)
{
    zt_status st = zt_swap_write_start(nv->swap, 0, b->unit - nv->first, b->buf, &b->req, err);
    if (st == ZT_OK) {
        b->io = IO_WRITE;
        b->dirty = false;
    }
    return st;
}

/* Empties b for another unit, writing its values back first when the file lacks them. */
static zt_status buf_evict(zt_pnvme *nv, pbuf *b, zt_err *err)
{
    zt_status st = buf_finish(nv, b, err);
    if (st == ZT_OK && b->unit >= 0 && b->dirty && (st = buf_write_start(nv, b, err)) == ZT_OK)
        st = buf_finish(nv, b, err);
    if (st == ZT_OK) b->unit = -1;
    return st;
}

static pbuf *buf_find(zt_pnvme *nv, int u)
{
    for (int i = 0; i < nv->nbuf; i++)
        if (nv->b[i].unit == u) return &nv->b[i];
    return NULL;
}

/* The buffer to reuse: an empty one, else the least recently used. With spare, only one not
 * used since stamp `since` that holds nothing unwritten nor a read in flight (NULL if none). */
static pbuf *buf_victim(zt_pnvme *nv, bool spare, uint64_t since)
{
    pbuf *best = NULL;
    for (int i = 0; i < nv->nbuf; i++) {
        pbuf *b = &nv->b[i];
        if (spare && b->unit >= 0 && (b->stamp >= since || b->dirty || b->io == IO_READ)) continue;
        uint64_t score = b->unit < 0 ? 0 : b->stamp;
        if (!best || score < (best->unit < 0 ? 0 : best->stamp)) best = b;
    }
    return best;
}

/* Before b's values change: on a CUDA rank a copy to the device queued from b (a gather's,
 * zt_engine_params_put's rule) must have read it, so the stream is synced once for every buffer
 * handed out since the last sync. */
static zt_status buf_quiesce(zt_engine *e, pbuf *b, zt_err *err)
{
    zt_pnvme *nv = e->pnvme;
    if (!b->lent) return ZT_OK;
    for (int i = 0; i < nv->nbuf; i++)
        nv->b[i].lent = false;
    return e->ops->sync(e->k, err);
}

/* Starts reading unit u into b (zeros for a unit never written). */
static zt_status buf_read_start(zt_engine *e, pbuf *b, int u, bool fill, zt_err *err)
{
    zt_pnvme *nv = e->pnvme;
    zt_status st = buf_quiesce(e, b, err);
    if (st != ZT_OK) return st;
    b->unit = u;
    b->dirty = false;
    int seg = u - nv->first;
    if (!fill || !zt_swap_written(nv->swap, 0, seg)) {
        memset(b->buf, 0, nv->cap);
        return ZT_OK;
    }
    st = zt_swap_read_start(nv->swap, 0, seg, b->buf, &b->req, err);
    if (st == ZT_OK)
        b->io = IO_READ;
    else
        b->unit = -1;
    return st;
}

/* After unit u was handed out: units changed before are written back behind, and the next
 * units in the direction of travel are read ahead into spare buffers. */
static zt_status background(zt_engine *e, int u, zt_err *err)
{
    zt_pnvme *nv = e->pnvme;
    zt_status st = ZT_OK;
    uint64_t since = buf_find(nv, u)->stamp;
    for (int i = 0; i < nv->nbuf && st == ZT_OK; i++) {
        pbuf *b = &nv->b[i];
        if (b->unit >= 0 && b->unit != u && b->dirty && b->io == IO_NONE)
            st = buf_write_start(nv, b, err);
    }
    int dir = u >= nv->last ? 1 : -1;
    nv->last = u;
    const zt_zero_cfg *z = &e->job.ds.zero;
    int64_t budget = z->stage3_prefetch_bucket_size < z->stage3_max_live_parameters
                         ? z->stage3_prefetch_bucket_size
                         : z->stage3_max_live_parameters;
    int64_t ahead = 0;
    for (int k = 1; k < nv->nbuf && st == ZT_OK; k++) {
        int w = u + dir * k;
        if (w < nv->first || w >= e->nu || (ahead += (int64_t)e->S[w]) > budget) break;
        pbuf *b = buf_find(nv, w);
        if (!b) {
            if (!(b = buf_victim(nv, true, since))) break;
            if ((st = buf_evict(nv, b, err)) == ZT_OK) st = buf_read_start(e, b, w, true, err);
        }
        b->stamp = ++nv->stamp;
    }
    return st;
}

zt_status zt_engine_param_ptr(zt_engine *e, int u, size_t pos, zt_param_use use, void **out,
                              zt_err *err)
{
    zt_pnvme *nv = e->pnvme;
    if (!nv || u < nv->first) {
        *out = zt_engine_param_at(e, u, pos);
        return ZT_OK;
    }
    zt_status st = ZT_OK;
    pbuf *b = buf_find(nv, u);
    if (!b) {
        b = buf_victim(nv, false, 0);
        if ((st = buf_evict(nv, b, err)) != ZT_OK) return st;
        if ((st = buf_read_start(e, b, u, use != ZT_PARAM_OVERWRITE, err)) != ZT_OK) return st;
    }
    b->stamp = ++nv->stamp;
    /* a read must land before the values are used, a write before they change */
    if (b->io == IO_READ || (b->io == IO_WRITE && use != ZT_PARAM_READ))
        if ((st = buf_finish(nv, b, err)) != ZT_OK) return st;
    if (use != ZT_PARAM_READ && (st = buf_quiesce(e, b, err)) != ZT_OK) return st;
    if (use != ZT_PARAM_READ) b->dirty = true;
    b->lent = e->params_host;
    zt_zero_span sp = zt_zero_param_span(e->zero, u);
    *out = (char *)b->buf + (zt_zero_param_index(e->zero, u, pos) - sp.off) * zt_engine_psize(e);
    return background(e, u, err);
}

/* Writes every changed buffer back and empties them all (errors after the first are dropped). */
static zt_status flush_all(zt_pnvme *nv, zt_err *err)
{
    zt_status st = ZT_OK;
    for (int i = 0; i < nv->nbuf; i++) {
        zt_err ignore;
        zt_status s2 = buf_evict(nv, &nv->b[i], st == ZT_OK ? err : &ignore);
        if (st == ZT_OK) st = s2;
    }
    return st;
}

void zt_engine_pnvme_close(zt_engine *e)
{
    zt_pnvme *nv = e->pnvme;
    if (!nv) return;
    for (int i = 0; i < nv->nbuf; i++) {
        zt_err ignore;
        buf_finish(nv, &nv->b[i], &ignore);
    }
    zt_swap_close(nv->swap, true);
    zt_aio_close(nv->aio);
    zt_free(nv);
    e->pnvme = NULL;
}

/* Test hooks, before a step's update: ZT_INJECT_SWAP_CORRUPT=rank:step writes every buffer back,
 * empties them and flips one byte of the first swapped unit in params.swp (as a failing drive
 * would return it); ZT_INJECT_SWAP_UNLINK=rank:step deletes params.swp. */
zt_status zt_engine_pnvme_step_begin(zt_engine *e, zt_err *err)
{
    zt_pnvme *nv = e->pnvme;
    if (!nv) return ZT_OK;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/params.swp", nv->dir);
    if (zt_engine_nvme_hook_now(e, ZT_SET_INJECT_SWAP_UNLINK) && unlink(path) == 0)
        ZT_WARN("nvme", "test hook: deleted %s", path);
    if (zt_engine_nvme_hook_now(e, ZT_SET_INJECT_SWAP_CORRUPT)) {
        zt_status st = flush_all(nv, err);
        if (st != ZT_OK) return st;
        zt_engine_nvme_hook_flip(path);
    }
    return zt_swap_check(nv->swap, err);
}
