/* zerotrain: what `zctl plan` measures and parses about the machine a job will run on: sizes
 * and speeds written by the user, the host memory available, the free space of a directory,
 * and the speed of the disk under NVMe offload's swap directory, measured with the engine's
 * own swap files and asynchronous I/O. */
#ifndef ZT_CLI_PLAN_LIMITS_H
#define ZT_CLI_PLAN_LIMITS_H

#include <stdint.h>

#include "common/jobfile.h"
#include "common/status.h"

/* Bytes of the test file zt_plan_disk_measure writes twice and reads once. */
#define ZT_PLAN_PROBE_BYTES ((uint64_t)256 << 20)

/* "READ,WRITE" in bytes per second, each a size with an optional "/s" ("2.5GB/s,1.8GB/s",
 * "900MiB,700MiB"). 0 on success; -1 when s is not two positive speeds. */
int zt_plan_parse_speeds(const char *s, double *read_bps, double *write_bps);

/* Bytes an unprivileged process may still write under dir (statvfs f_bavail); -1 when dir
 * cannot be examined. */
int64_t zt_plan_disk_free(const char *dir);

typedef struct zt_plan_disk_speed {
    double read_bps, write_bps; /* sequential direct-I/O bytes per second */
    char backend[16];           /* the aio backend that moved them: "io_uring" or "threads" */
} zt_plan_disk_speed;

/* Measures sequential O_DIRECT write and read speed in dir: a swap file of
 * ZT_PLAN_PROBE_BYTES in dir/zctl-plan-PID/probe (zt_swap, the job's aio block), written once
 * to allocate it, written again (timed) and read (timed), then removed with its directory; dir
 * itself is kept. Errors name dir and point at --disk-speed: ZT_ERR_NOT_FOUND (not a
 * directory), ZT_ERR_UNSUPPORTED (no direct I/O), ZT_ERR_NOSPACE, ZT_ERR_IO. Not thread-safe
 * (one measurement at a time per process). */
zt_status zt_plan_disk_measure(const char *dir, const zt_aio_cfg *aio, zt_plan_disk_speed *out,
                               zt_err *err);

#endif
