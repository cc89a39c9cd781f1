/* zerotrain: a rank's swap files for NVMe offload. Each array (fp32 master weights, exp_avg,
 * exp_avg_sq, or 16-bit parameters) is one file in the rank's own directory, cut into the
 * segments the caller streams; every segment sits at a 4 KiB-aligned offset, moves with
 * direct I/O through engine/nvme/aio.h, and carries a CRC32C checked on each read. */
#ifndef ZT_ENGINE_NVME_SWAP_H
#define ZT_ENGINE_NVME_SWAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aio.h"
#include "common/status.h"

#define ZT_SWAP_ALIGN 4096
#define ZT_SWAP_MAX_ARRAYS 4

typedef struct zt_swap_layout {
    int n_arrays;
    const char *names[ZT_SWAP_MAX_ARRAYS]; /* "master", "exp_avg", "exp_avg_sq" or "params" */
    size_t elem_bytes;                     /* 4 for fp32, 2 for 16-bit */
    int n_segs;
    const size_t *seg_elems; /* n_segs lengths; the same segmentation for every array */
} zt_swap_layout;

typedef struct zt_swap zt_swap;

/* Creates DIR (and its parents) and the array files at their full size, so that a disk too
 * small is known now. DIR is locked while open (a second process is refused with
 * ZT_ERR_EXISTS); files of an earlier attempt in DIR are replaced, and a DIR holding anything
 * else is refused (nothing is mixed, and nothing deleted that zerotrain did not write). The context
 * aio is used, not owned. Errors name DIR and say what to do: ZT_ERR_NOSPACE (free space vs
 * need), ZT_ERR_UNSUPPORTED (a filesystem without direct I/O), ZT_ERR_EXISTS, ZT_ERR_IO. */
zt_status zt_swap_open(zt_swap **out, const char *dir, const zt_swap_layout *layout, zt_aio *aio,
                       zt_err *err);
/* Closes the files; with remove, deletes them and DIR (and DIR's parent when that is then
 * empty). NULL is a no-op. */
void zt_swap_close(zt_swap *s, bool remove);

/* Bytes a buffer for segment seg must hold (its length rounded up to ZT_SWAP_ALIGN); buffers
 * must be ZT_SWAP_ALIGN-aligned. */
size_t zt_swap_seg_bytes(const zt_swap *s, int seg);
/* Bytes of all files together. */
uint64_t zt_swap_total_bytes(const zt_swap *s);
/* Whether segment seg of array has been written (a read of one that has not is an error). */
bool zt_swap_written(const zt_swap *s, int array, int seg);

/* ZT_ERR_IO when a swap file has been deleted (its directory removed) since it was opened:
 * what is written from then on would vanish at close. */
zt_status zt_swap_check(const zt_swap *s, zt_err *err);

/* One segment transfer in flight; owned by the caller. */
typedef struct zt_swap_io {
    zt_aio_req req;
    int array, seg;
    uint32_t crc; /* a write's CRC, recorded when it completes */
} zt_swap_io;

/* Start reading or writing segment seg of array through buf (see zt_swap_seg_bytes); the
 * buffer stays untouched until zt_swap_finish. A write's CRC covers the segment's real bytes
 * as they are at this call. */
zt_status zt_swap_read_start(zt_swap *s, int array, int seg, void *buf, zt_swap_io *io,
                             zt_err *err);
zt_status zt_swap_write_start(zt_swap *s, int array, int seg, void *buf, zt_swap_io *io,
                              zt_err *err);
/* Waits for io. A read whose bytes do not match the CRC recorded at its write is
 * ZT_ERR_CORRUPT naming the file, offset and segment; a failed write leaves the segment
 * unreadable (ZT_ERR_CORRUPT on its next read) until it is written again. */
zt_status zt_swap_finish(zt_swap *s, zt_swap_io *io, zt_err *err);

#endif
