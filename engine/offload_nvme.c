/* zerotrain: NVMe offload of the optimizer (offload_optimizer.device "nvme"). The host part's
 * fp32 master weights and both moments live in swap files (engine/nvme/swap.h), one swap
 * segment per host optimizer segment; a step streams them through buffer_count buffer sets,
 * reading segment k + buffer_count - 1 while k is updated and k - 1 written back. */
#define _POSIX_C_SOURCE 200809L
#include "engine_int.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/log.h"
#include "../common/settings.h"
#include "nvme/swap.h"

#define NVME_MAX_BUFS 64

typedef struct zt_nvme {
    zt_aio *aio;
    zt_swap *swap;
    int nseg;       /* host segments, in side_off order */
    int *seg_index; /* e->segs index of host segment k */
    size_t seg_cap; /* bytes of one buffer (the largest segment, 4 KiB-aligned) */
    int nbuf;
    float *buf[NVME_MAX_BUFS][3];
    float *bounce; /* one segment, for reads and writes outside the step */
    zt_swap_io rd[NVME_MAX_BUFS][3], wr[NVME_MAX_BUFS][3];
    bool rd_pending[NVME_MAX_BUFS], wr_pending[NVME_MAX_BUFS];
    char dir[PATH_MAX];
} zt_nvme;

size_t zt_engine_nvme_buffer_bytes(const zt_engine *e, size_t piece)
{
    const zt_offload_cfg *off = &e->job.ds.zero.offload_optimizer;
    size_t host_n = zt_zero_host_elems(e->zero);
    if (!off->nvme || !host_n) return 0;
    size_t seg = piece < host_n ? piece : host_n;
    size_t cap = (seg * 4 + ZT_SWAP_ALIGN - 1) / ZT_SWAP_ALIGN * ZT_SWAP_ALIGN;
    int nbuf = off->buffer_count < NVME_MAX_BUFS ? off->buffer_count : NVME_MAX_BUFS;
    return ((size_t)nbuf * 3 + 1) * cap;
}

uint64_t zt_engine_nvme_disk_bytes(const zt_engine *e)
{
    if (!e->job.ds.zero.offload_optimizer.nvme) return 0;
    /* three fp32 arrays; each segment is padded to 4 KiB at most once */
    return 3 * ((uint64_t)zt_zero_host_elems(e->zero) * 4 + (uint64_t)e->nsegs * ZT_SWAP_ALIGN);
}

zt_status zt_engine_nvme_dir(const zt_engine *e, const char *block, const char *nvme_path,
                             const char *suffix, char *out, size_t cap, zt_err *err)
{
    struct stat sb;
    if (stat(nvme_path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zt_err_set(
            err, ZT_ERR_NOT_FOUND,
            "%s.nvme_path %s is not a directory: create it on the disk meant for the swap (zerotrain creates only its own directories inside)",
            block, nvme_path);
    const char *id = zt_setting_raw(ZT_SET_JOB_ID); /* a number, or not part of the name */
    if (id && strspn(id, "0123456789") != strlen(id)) id = NULL;
    int n = snprintf(out, cap, "%s/%s%s%s/rank_%05d%s", nvme_path, e->job.name, id && *id ? "-" : "",
                     id && *id ? id : "", e->rank, suffix);
    if (n < 0 || (size_t)n >= cap)
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "nvme_path %s is too long for the swap directory of rank %d; use a shorter path",
            nvme_path, e->rank);
    return ZT_OK;
}

zt_status zt_engine_nvme_aio_open(const zt_engine *e, zt_aio **out, zt_err *err)
{
    const zt_aio_cfg *ac = &e->job.ds.aio;
    zt_aio_config cfg = {.block_size = (size_t)ac->block_size,
                         .queue_depth = ac->queue_depth,
                         .thread_count = ac->thread_count,
                         .single_submit = ac->single_submit,
                         .overlap_events = ac->overlap_events,
                         .backend = zt_setting_choice(ZT_SET_AIO_BACKEND)};
    return zt_aio_open(out, &cfg, err);
}

/* The moments start at zero (as in host memory); the master is written by the load. Up to
 * nbuf segments' writes are in flight, all from one zeroed buffer. */
static zt_status zero_moments(zt_nvme *nv, zt_err *err)
{
    memset(nv->bounce, 0, nv->seg_cap);
    bool pending[NVME_MAX_BUFS][3] = {{false}};
    zt_status st = ZT_OK;
    zt_err ignore;
    for (int k = 0; k < nv->nseg && st == ZT_OK; k++) {
        int b = k % nv->nbuf;
        for (int a = 1; a < 3 && st == ZT_OK; a++) {
            if (pending[b][a]) {
                pending[b][a] = false;
                st = zt_swap_finish(nv->swap, &nv->wr[b][a], err);
            }
            if (st == ZT_OK)
                st = zt_swap_write_start(nv->swap, a, k, nv->bounce, &nv->wr[b][a], err);
            if (st == ZT_OK) pending[b][a] = true;
        }
    }
    for (int b = 0; b < nv->nbuf; b++)
        for (int a = 1; a < 3; a++)
            if (pending[b][a]) {
                zt_status s2 = zt_swap_finish(nv->swap, &nv->wr[b][a], st == ZT_OK ? err : &ignore);
                if (st == ZT_OK) st = s2;
            }
    return st;
}

zt_status zt_engine_nvme_open(zt_engine *e, zt_err *err)
{
    const zt_offload_cfg *off = &e->job.ds.zero.offload_optimizer;
    if (!off->nvme || !zt_zero_host_elems(e->zero)) return ZT_OK;
    zt_nvme *nv = zt_calloc(1, sizeof(*nv));
    size_t *lens = zt_calloc((size_t)e->nsegs, sizeof(*lens));
    if (!nv || !lens) {
        zt_free(nv);
        zt_free(lens);
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory for the NVMe swap's tables");
    }
    e->nvme = nv;
    zt_status st = ZT_OK;
    nv->seg_index = zt_calloc((size_t)e->nsegs, sizeof(*nv->seg_index));
    if (!nv->seg_index) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory for the NVMe swap's tables");
        goto free_lens;
    }
    size_t biggest = 0;
    for (int i = 0; i < e->nsegs; i++) {
        if (!e->segs[i].host) continue;
        nv->seg_index[nv->nseg] = i;
        lens[nv->nseg++] = e->segs[i].len;
        if (e->segs[i].len > biggest) biggest = e->segs[i].len;
    }
    nv->seg_cap = (biggest * 4 + ZT_SWAP_ALIGN - 1) / ZT_SWAP_ALIGN * ZT_SWAP_ALIGN;
    nv->nbuf = off->buffer_count < NVME_MAX_BUFS ? off->buffer_count : NVME_MAX_BUFS;
    /* the buffers were planned at the piece size (zt_engine_nvme_buffer_bytes): carve them */
    char *base =
        (char *)(((uintptr_t)e->h_swapbuf + ZT_SWAP_ALIGN - 1) & ~(uintptr_t)(ZT_SWAP_ALIGN - 1));
    for (int b = 0; b < nv->nbuf; b++)
        for (int a = 0; a < 3; a++, base += nv->seg_cap)
            nv->buf[b][a] = (float *)base;
    nv->bounce = (float *)base;

    if ((st = zt_engine_nvme_aio_open(e, &nv->aio, err)) != ZT_OK) goto free_lens;
    if ((st = zt_engine_nvme_dir(e, "offload_optimizer", off->nvme_path, "", nv->dir,
                                 sizeof(nv->dir), err)) != ZT_OK)
        goto free_lens;
    zt_swap_layout lay = {.n_arrays = 3,
                          .names = {"master", "exp_avg", "exp_avg_sq"},
                          .elem_bytes = 4,
                          .n_segs = nv->nseg,
                          .seg_elems = lens};
    if ((st = zt_swap_open(&nv->swap, nv->dir, &lay, nv->aio, err)) != ZT_OK) {
        zt_err_prefix(err, "offload_optimizer.nvme_path");
        goto free_lens;
    }
    if ((st = zero_moments(nv, err)) != ZT_OK) goto free_lens;
    char sz[32];
    ZT_INFO(
        "nvme",
        "optimizer states of %zu elements in %s (%s on disk, %d buffer sets of %zu KiB, %s I/O)",
        zt_zero_host_elems(e->zero), nv->dir,
        zt_fmt_bytes((int64_t)zt_swap_total_bytes(nv->swap), sz, sizeof(sz)), nv->nbuf,
        nv->seg_cap >> 10, zt_aio_backend(nv->aio));
free_lens:
    zt_free(lens);
    return st;
}

void zt_engine_nvme_close(zt_engine *e)
{
    zt_nvme *nv = e->nvme;
    if (!nv) return;
    zt_swap_close(nv->swap, true);
    zt_aio_close(nv->aio);
    zt_free(nv->seg_index);
    zt_free(nv);
    e->nvme = NULL;
}

/* The host segment holding side offset off (host segments are contiguous, in order). */
static int seg_at(const zt_engine *e, size_t off)
{
    const zt_nvme *nv = e->nvme;
    int lo = 0, hi = nv->nseg - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (e->segs[nv->seg_index[mid]].side_off <= off)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static zt_status seg_read(zt_nvme *nv, int array, int k, float *buf, zt_err *err)
{
    zt_swap_io io;
    zt_status st = zt_swap_read_start(nv->swap, array, k, buf, &io, err);
    return st == ZT_OK ? zt_swap_finish(nv->swap, &io, err) : st;
}

static zt_status seg_write(zt_nvme *nv, int array, int k, float *buf, zt_err *err)
{
    zt_swap_io io;
    zt_status st = zt_swap_write_start(nv->swap, array, k, buf, &io, err);
    return st == ZT_OK ? zt_swap_finish(nv->swap, &io, err) : st;
}

zt_status zt_engine_nvme_io(zt_engine *e, size_t off, size_t n, int section, float *buf, bool set,
                            zt_err *err)
{
    zt_nvme *nv = e->nvme;
    while (n > 0) {
        int k = seg_at(e, off);
        const zt_optseg *s = &e->segs[nv->seg_index[k]];
        size_t at = off - s->side_off, len = s->len - at < n ? s->len - at : n;
        bool whole = at == 0 && len == s->len;
        zt_status st = ZT_OK;
        if (!set || !whole) {
            if (zt_swap_written(nv->swap, section, k))
                st = seg_read(nv, section, k, nv->bounce, err);
            else
                memset(nv->bounce, 0, s->len * sizeof(float));
        }
        if (st != ZT_OK) return st;
        if (set) {
            memcpy(nv->bounce + at, buf, len * sizeof(float));
            if ((st = seg_write(nv, section, k, nv->bounce, err)) != ZT_OK) return st;
        } else {
            memcpy(buf, nv->bounce + at, len * sizeof(float));
        }
        buf += len;
        off += len;
        n -= len;
    }
    return ZT_OK;
}

/* ---- the step's stream ---- */

static int ahead(const zt_nvme *nv)
{
    return nv->nbuf > 1 ? nv->nbuf - 1 : 1;
}

static zt_status finish_slot(zt_nvme *nv, zt_swap_io io[3], bool *pending, zt_err *err)
{
    zt_status st = ZT_OK;
    if (!*pending) return ZT_OK;
    for (int a = 0; a < 3; a++) {
        zt_err e2 = {0};
        zt_status s2 = zt_swap_finish(nv->swap, &io[a], st == ZT_OK ? err : &e2);
        if (st == ZT_OK) st = s2;
    }
    *pending = false;
    return st;
}

static zt_status start_reads(zt_nvme *nv, int k, zt_err *err)
{
    int b = k % nv->nbuf;
    zt_status st = finish_slot(nv, nv->wr[b], &nv->wr_pending[b], err);
    if (st != ZT_OK) return st;
    for (int a = 0; a < 3; a++) {
        st = zt_swap_read_start(nv->swap, a, k, nv->buf[b][a], &nv->rd[b][a], err);
        if (st != ZT_OK) {
            for (int x = 0; x < a; x++) { /* the ones started must end before b is reused */
                zt_err ignore;
                zt_swap_finish(nv->swap, &nv->rd[b][x], &ignore);
            }
            return st;
        }
    }
    nv->rd_pending[b] = true;
    return ZT_OK;
}

bool zt_engine_nvme_hook_now(const zt_engine *e, zt_setting var)
{
    const char *v = zt_setting_raw(var);
    int r = -1;
    long long step = -1;
    return v && sscanf(v, "%d:%lld", &r, &step) == 2 && r == e->rank && step == e->steps_done + 1;
}

/* Test hooks, before a step's update: ZT_INJECT_SWAP_CORRUPT=rank:step flips one byte of this
 * rank's master.swp on disk (as a failing drive would return it; with offload_param "nvme",
 * param_nvme.c flips one of params.swp instead); ZT_INJECT_SWAP_UNLINK=rank:step deletes its
 * swap files (as removing the directory would). */
static void test_hooks(const zt_engine *e, const zt_nvme *nv)
{
    static const char *const names[] = {"master.swp", "exp_avg.swp", "exp_avg_sq.swp"};
    char path[PATH_MAX + 16];
    if (zt_engine_nvme_hook_now(e, ZT_SET_INJECT_SWAP_UNLINK))
        for (int a = 0; a < 3; a++) {
            snprintf(path, sizeof(path), "%s/%s", nv->dir, names[a]);
            if (unlink(path) == 0) ZT_WARN("nvme", "test hook: deleted %s", path);
        }
    if (!zt_engine_nvme_hook_now(e, ZT_SET_INJECT_SWAP_CORRUPT) || e->pnvme) return;
    snprintf(path, sizeof(path), "%s/master.swp", nv->dir);
    zt_engine_nvme_hook_flip(path);
}

void zt_engine_nvme_hook_flip(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    unsigned char byte;
    if (fd >= 0 && pread(fd, &byte, 1, 100) == 1) {
        byte ^= 0x5a;
        if (pwrite(fd, &byte, 1, 100) == 1)
            ZT_WARN("nvme", "test hook: flipped a byte of %s", path);
    }
    if (fd >= 0) close(fd);
}

zt_status zt_engine_nvme_step_begin(zt_engine *e, zt_err *err)
{
    zt_nvme *nv = e->nvme;
    test_hooks(e, nv);
    zt_status st = zt_swap_check(nv->swap, err);
    for (int k = 0; k < ahead(nv) && k < nv->nseg && st == ZT_OK; k++)
        st = start_reads(nv, k, err);
    return st;
}

zt_status zt_engine_nvme_seg_get(zt_engine *e, int k, float **master, float **m, float **v,
                                 zt_err *err)
{
    zt_nvme *nv = e->nvme;
    int b = k % nv->nbuf;
    zt_status st = finish_slot(nv, nv->rd[b], &nv->rd_pending[b], err);
    *master = nv->buf[b][0];
    *m = nv->buf[b][1];
    *v = nv->buf[b][2];
    return st;
}

zt_status zt_engine_nvme_seg_put(zt_engine *e, int k, zt_err *err)
{
    zt_nvme *nv = e->nvme;
    int b = k % nv->nbuf;
    for (int a = 0; a < 3; a++) {
        zt_status st = zt_swap_write_start(nv->swap, a, k, nv->buf[b][a], &nv->wr[b][a], err);
        if (st != ZT_OK) {
            for (int x = 0; x < a; x++) { /* the ones started must end before b is reused */
                zt_err ignore;
                zt_swap_finish(nv->swap, &nv->wr[b][x], &ignore);
            }
            return st;
        }
    }
    nv->wr_pending[b] = true;
    int next = k + ahead(nv);
    return next < nv->nseg ? start_reads(nv, next, err) : ZT_OK;
}

zt_status zt_engine_nvme_step_end(zt_engine *e, zt_status st, zt_err *err)
{
    zt_nvme *nv = e->nvme;
    for (int b = 0; b < nv->nbuf; b++) {
        zt_err ignore;
        zt_status s1 = finish_slot(nv, nv->rd[b], &nv->rd_pending[b], st == ZT_OK ? err : &ignore);
        if (st == ZT_OK) st = s1;
        zt_status s2 = finish_slot(nv, nv->wr[b], &nv->wr_pending[b], st == ZT_OK ? err : &ignore);
        if (st == ZT_OK) st = s2;
    }
    return st;
}
