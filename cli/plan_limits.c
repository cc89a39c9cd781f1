/* zerotrain: the machine's side of `zctl plan`: sizes and speeds as the user writes them, the
 * host memory and disk space there are, and the disk's direct-I/O speed measured through the
 * same swap files (engine/nvme/swap.h) and aio context NVMe offload streams its states with. */
#define _POSIX_C_SOURCE 200809L
#include "cli/plan_limits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/settings.h"
#include "engine/nvme/swap.h"

/* One speed: a positive size, optionally followed by "/s". */
static double parse_speed(const char *s, size_t len)
{
    char buf[64];
    if (len == 0 || len >= sizeof(buf)) return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    size_t n = strlen(buf);
    if (n > 2 && strcasecmp(buf + n - 2, "/s") == 0) buf[n - 2] = '\0';
    double v = zt_parse_size(buf);
    return v > 0 ? v : -1;
}

int zt_plan_parse_speeds(const char *s, double *read_bps, double *write_bps)
{
    const char *comma = strchr(s, ',');
    if (!comma || strchr(comma + 1, ',')) return -1;
    double r = parse_speed(s, (size_t)(comma - s));
    double w = parse_speed(comma + 1, strlen(comma + 1));
    if (r <= 0 || w <= 0) return -1;
    *read_bps = r;
    *write_bps = w;
    return 0;
}

int64_t zt_plan_disk_free(const char *dir)
{
    struct statvfs vfs;
    if (statvfs(dir, &vfs) != 0) return -1;
    return (int64_t)((uint64_t)vfs.f_bavail * vfs.f_frsize);
}

/* The probe's segments: as large as NVMe offload's at its usual piece size, and several
 * buffers in flight as the engine keeps buffer_count sets in flight. */
#define PROBE_SEG_BYTES ((size_t)8 << 20)
#define PROBE_BUFS 4

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Writes (or reads) every segment of the probe once, PROBE_BUFS at a time. */
static zt_status probe_pass(zt_swap *sw, int nseg, char *bufs, bool write, zt_err *err)
{
    zt_swap_io io[PROBE_BUFS];
    bool pending[PROBE_BUFS] = {false};
    zt_status st = ZT_OK;
    for (int k = 0; k < nseg && st == ZT_OK; k++) {
        int b = k % PROBE_BUFS;
        if (pending[b]) {
            pending[b] = false;
            if ((st = zt_swap_finish(sw, &io[b], err)) != ZT_OK) break;
        }
        void *buf = bufs + (size_t)b * PROBE_SEG_BYTES;
        st = write ? zt_swap_write_start(sw, 0, k, buf, &io[b], err)
                   : zt_swap_read_start(sw, 0, k, buf, &io[b], err);
        if (st == ZT_OK) pending[b] = true;
    }
    for (int b = 0; b < PROBE_BUFS; b++)
        if (pending[b]) {
            zt_err ignore;
            zt_status s2 = zt_swap_finish(sw, &io[b], st == ZT_OK ? err : &ignore);
            if (st == ZT_OK) st = s2;
        }
    return st;
}

/* Adds what to do instead to an error of the measurement. */
static zt_status measure_error(zt_err *err)
{
    char msg[ZT_ERRMSG_MAX];
    snprintf(msg, sizeof(msg), "%s", zt_err_msg(err));
    return zt_err_set(
        err, err->status,
        "plan: cannot measure the disk's speed: %s; measure another directory with --nvme-path DIR or give the speeds with --disk-speed READ,WRITE (e.g. 2.5GB/s,1.8GB/s)",
        msg);
}

zt_status zt_plan_disk_measure(const char *dir, const zt_aio_cfg *aio, zt_plan_disk_speed *out,
                               zt_err *err)
{
    memset(out, 0, sizeof(*out));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zt_err_set(
            err, ZT_ERR_NOT_FOUND,
            "plan: %s is not a directory, so its disk's speed cannot be measured: give an existing directory on the disk meant for the swap with --nvme-path DIR, or the speeds with --disk-speed READ,WRITE (e.g. 2.5GB/s,1.8GB/s)",
            dir);
    int nseg = (int)(ZT_PLAN_PROBE_BYTES / PROBE_SEG_BYTES);
    size_t *lens = zt_calloc((size_t)nseg, sizeof(*lens));
    char *bufs = zt_aligned_alloc(ZT_SWAP_ALIGN, PROBE_BUFS * PROBE_SEG_BYTES);
    zt_status st = ZT_OK;
    if (!lens || !bufs) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "plan: out of memory for the disk probe's buffers");
        goto free_bufs;
    }
    for (int k = 0; k < nseg; k++)
        lens[k] = PROBE_SEG_BYTES / 4;
    /* data that no layer below can shortcut (not zeros) */
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < PROBE_BUFS * PROBE_SEG_BYTES / 4; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        ((uint32_t *)bufs)[i] = x;
    }
    zt_aio_config cfg = {.block_size = (size_t)aio->block_size,
                         .queue_depth = aio->queue_depth,
                         .thread_count = aio->thread_count,
                         .single_submit = aio->single_submit,
                         .overlap_events = aio->overlap_events,
                         .backend = zt_setting_choice(ZT_SET_AIO_BACKEND)};
    zt_aio *a = NULL;
    if ((st = zt_aio_open(&a, &cfg, err)) != ZT_OK) {
        measure_error(err);
        goto free_bufs;
    }
    snprintf(out->backend, sizeof(out->backend), "%s", zt_aio_backend(a));
    /* a directory of its own inside dir: zt_swap_close removes the probe's directory and its
     * parent when that is empty, which is then ours, never dir */
    char probe[4096];
    int n = snprintf(probe, sizeof(probe), "%s/zctl-plan-%ld/probe", dir, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof(probe)) {
        st = zt_err_set(err, ZT_ERR_INVALID, "plan: the path %s is too long for the disk probe",
                        dir);
        goto close_aio;
    }
    const char *names[ZT_SWAP_MAX_ARRAYS] = {"master"};
    zt_swap_layout lay = {.n_arrays = 1, .elem_bytes = 4, .n_segs = nseg, .seg_elems = lens};
    lay.names[0] = names[0];
    zt_swap *sw = NULL;
    if ((st = zt_swap_open(&sw, probe, &lay, a, err)) != ZT_OK) {
        measure_error(err);
        goto close_aio;
    }
    /* the first pass allocates the file's blocks; the engine overwrites them every step, and
     * that is what the second pass times */
    double t0 = 0, t1 = 0, t2 = 0;
    if ((st = probe_pass(sw, nseg, bufs, true, err)) != ZT_OK) goto close_swap;
    t0 = now_s();
    if ((st = probe_pass(sw, nseg, bufs, true, err)) != ZT_OK) goto close_swap;
    t1 = now_s();
    if ((st = probe_pass(sw, nseg, bufs, false, err)) != ZT_OK) goto close_swap;
    t2 = now_s();
    /* a clock too coarse for the transfer counts as one microsecond */
    out->write_bps = (double)ZT_PLAN_PROBE_BYTES / (t1 - t0 > 1e-6 ? t1 - t0 : 1e-6);
    out->read_bps = (double)ZT_PLAN_PROBE_BYTES / (t2 - t1 > 1e-6 ? t2 - t1 : 1e-6);
close_swap:
    zt_swap_close(sw, true);
    if (st != ZT_OK) measure_error(err);
close_aio:
    zt_aio_close(a);
free_bufs:
    zt_free(bufs);
    zt_free(lens);
    return st;
}
