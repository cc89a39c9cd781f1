/* zerotrain: engine/nvme/swap.h — the swap files of one rank: their directory, aligned segment
 * offsets, space reserved up front, and the CRC32C of every segment written. */
#define _GNU_SOURCE /* O_DIRECT */
#include "swap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/crc32c.h"
#include "common/fsutil.h"

enum { SEG_UNWRITTEN = 0, SEG_OK = 1, SEG_BAD = 2 };

struct zt_swap {
    zt_aio *aio;
    char dir[PATH_MAX];
    int n_arrays, n_segs;
    size_t elem_bytes;
    int lock_fd; /* flock held while open: one process per directory */
    int fd[ZT_SWAP_MAX_ARRAYS];
    char path[ZT_SWAP_MAX_ARRAYS][PATH_MAX];
    size_t *len;   /* real bytes of each segment */
    uint64_t *off; /* file offset of each segment */
    uint64_t file_bytes;
    uint32_t *crc;  /* [array][seg] */
    uint8_t *state; /* [array][seg] */
};

#define LOCK_NAME "swap.lock"

/* The files zerotrain itself writes in a swap directory. */
static bool own_file(const char *name)
{
    static const char *const names[] = {"master.swp", "exp_avg.swp", "exp_avg_sq.swp", "params.swp",
                                        LOCK_NAME};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(name, names[i]) == 0) return true;
    return false;
}

/* Removes the swap files an earlier attempt left in dir; anything else there is refused. */
static zt_status clear_dir(const char *dir, zt_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return zt_err_set(err, ZT_ERR_IO, "cannot read swap directory %s: %s", dir,
                          strerror(errno));
    zt_status st = ZT_OK;
    struct dirent *de;
    while (st == ZT_OK && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            strcmp(de->d_name, LOCK_NAME) == 0)
            continue;
        if (!own_file(de->d_name)) {
            st = zt_err_set(
                err, ZT_ERR_EXISTS,
                "swap directory %s holds %s, which is not a zerotrain swap file: give each job its own nvme_path or empty it",
                dir, de->d_name);
            break;
        }
        if (unlinkat(dirfd(d), de->d_name, 0) != 0)
            st = zt_err_set(err, ZT_ERR_IO, "cannot remove the old swap file %s/%s: %s", dir,
                            de->d_name, strerror(errno));
    }
    closedir(d);
    return st;
}

/* Takes dir's lock: a second process (another job or rank given the same directory) is
 * refused while the first runs; a dead one's lock is gone with it. */
static zt_status lock_dir(zt_swap *s, zt_err *err)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/" LOCK_NAME, s->dir);
    s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s->lock_fd < 0)
        return zt_err_set(err, ZT_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0)
        return zt_err_set(
            err, ZT_ERR_EXISTS,
            "swap directory %s is in use by another running process: give each job its own nvme_path",
            s->dir);
    return ZT_OK;
}

static zt_status open_file(zt_swap *s, int a, const char *name, zt_err *err)
{
    int n = snprintf(s->path[a], sizeof(s->path[a]), "%s/%s.swp", s->dir, name);
    if (n < 0 || (size_t)n >= sizeof(s->path[a]))
        return zt_err_set(err, ZT_ERR_INVALID, "swap path %s/%s.swp is too long", s->dir, name);
    s->fd[a] = open(s->path[a], O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
    if (s->fd[a] < 0 && errno == EINVAL)
        return zt_err_set(
            err, ZT_ERR_UNSUPPORTED,
            "the filesystem of %s does not support direct I/O (O_DIRECT): put nvme_path on a local disk",
            s->dir);
    if (s->fd[a] < 0)
        return zt_err_set(err, ZT_ERR_IO, "cannot create swap file %s: %s", s->path[a],
                          strerror(errno));
    if (s->file_bytes == 0) return ZT_OK;
    int rc = posix_fallocate(s->fd[a], 0, (off_t)s->file_bytes);
    if (rc == EOPNOTSUPP || rc == EINVAL)
        rc = ftruncate(s->fd[a], (off_t)s->file_bytes) ? errno : 0;
    if (rc == ENOSPC || rc == EDQUOT) {
        char need[32];
        return zt_err_set(
            err, ZT_ERR_NOSPACE,
            "no space for swap file %s (%s): free space in %s or choose another nvme_path",
            s->path[a], zt_fmt_bytes((int64_t)s->file_bytes, need, sizeof(need)), s->dir);
    }
    if (rc != 0)
        return zt_err_set(err, ZT_ERR_IO, "cannot reserve %llu bytes for swap file %s: %s",
                          (unsigned long long)s->file_bytes, s->path[a], strerror(rc));
    return ZT_OK;
}

static zt_status check_space(const zt_swap *s, zt_err *err)
{
    struct statvfs vfs;
    if (statvfs(s->dir, &vfs) != 0) return ZT_OK; /* the reservation below still tells */
    uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    uint64_t need = s->file_bytes * (uint64_t)s->n_arrays;
    if (avail >= need) return ZT_OK;
    char a[32], b[32];
    return zt_err_set(
        err, ZT_ERR_NOSPACE,
        "swap directory %s has %s free but this rank's %d swap files need %s: free space there or choose another nvme_path",
        s->dir, zt_fmt_bytes((int64_t)avail, a, sizeof(a)), s->n_arrays,
        zt_fmt_bytes((int64_t)need, b, sizeof(b)));
}

zt_status zt_swap_open(zt_swap **out, const char *dir, const zt_swap_layout *layout, zt_aio *aio,
                       zt_err *err)
{
    *out = NULL;
    if (layout->n_arrays < 1 || layout->n_arrays > ZT_SWAP_MAX_ARRAYS || layout->n_segs < 1 ||
        layout->elem_bytes == 0)
        return zt_err_set(err, ZT_ERR_INVALID, "bad swap layout for %s", dir);
    zt_swap *s = zt_calloc(1, sizeof(*s));
    if (!s) return zt_err_set(err, ZT_ERR_NOMEM, "no memory for swap state");
    zt_status st = ZT_OK;
    for (int a = 0; a < ZT_SWAP_MAX_ARRAYS; a++)
        s->fd[a] = -1;
    s->aio = aio;
    s->n_arrays = layout->n_arrays;
    s->n_segs = layout->n_segs;
    s->elem_bytes = layout->elem_bytes;
    snprintf(s->dir, sizeof(s->dir), "%s", dir);
    size_t ns = (size_t)s->n_segs, cells = ns * (size_t)s->n_arrays;
    s->len = zt_calloc(ns, sizeof(*s->len));
    s->off = zt_calloc(ns, sizeof(*s->off));
    s->crc = zt_calloc(cells, sizeof(*s->crc));
    s->state = zt_calloc(cells, sizeof(*s->state));
    if (!s->len || !s->off || !s->crc || !s->state) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "no memory for the segment table of %s", dir);
        goto close_swap;
    }
    for (size_t k = 0; k < ns; k++) {
        s->len[k] = layout->seg_elems[k] * layout->elem_bytes;
        s->off[k] = s->file_bytes;
        s->file_bytes += (s->len[k] + ZT_SWAP_ALIGN - 1) / ZT_SWAP_ALIGN * ZT_SWAP_ALIGN;
    }
    char bad[PATH_MAX];
    if (zt_mkdirs(dir, false, bad, sizeof(bad)) != 0) {
        st = zt_err_set(err, ZT_ERR_IO, "cannot create swap directory %s (at %s): %s", dir, bad,
                        strerror(errno));
        goto close_swap;
    }
    if ((st = lock_dir(s, err)) != ZT_OK) {
        s->dir[0] = '\0'; /* another process's: nothing of it is removed */
        goto close_swap;
    }
    if ((st = clear_dir(dir, err)) != ZT_OK || (st = check_space(s, err)) != ZT_OK) goto close_swap;
    for (int a = 0; a < s->n_arrays; a++)
        if ((st = open_file(s, a, layout->names[a], err)) != ZT_OK) goto close_swap;
    *out = s;
    return ZT_OK;
close_swap:
    zt_swap_close(s, true);
    return st;
}

void zt_swap_close(zt_swap *s, bool remove)
{
    if (!s) return;
    for (int a = 0; a < s->n_arrays; a++) {
        if (s->fd[a] >= 0) close(s->fd[a]);
        if (remove && s->path[a][0]) unlink(s->path[a]);
    }
    if (s->lock_fd >= 0) {
        if (remove && s->dir[0]) {
            char path[PATH_MAX + 16];
            snprintf(path, sizeof(path), "%s/" LOCK_NAME, s->dir);
            unlink(path);
        }
        close(s->lock_fd);
    }
    if (remove && s->dir[0] && rmdir(s->dir) == 0) {
        char parent[PATH_MAX];
        snprintf(parent, sizeof(parent), "%s", s->dir);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) {
            *slash = '\0';
            rmdir(parent); /* only succeeds when no other rank's directory is left */
        }
    }
    zt_free(s->len);
    zt_free(s->off);
    zt_free(s->crc);
    zt_free(s->state);
    zt_free(s);
}

size_t zt_swap_seg_bytes(const zt_swap *s, int seg)
{
    return (s->len[seg] + ZT_SWAP_ALIGN - 1) / ZT_SWAP_ALIGN * ZT_SWAP_ALIGN;
}

uint64_t zt_swap_total_bytes(const zt_swap *s)
{
    return s->file_bytes * (uint64_t)s->n_arrays;
}

bool zt_swap_written(const zt_swap *s, int array, int seg)
{
    return s->state[(size_t)array * (size_t)s->n_segs + (size_t)seg] == SEG_OK;
}

zt_status zt_swap_check(const zt_swap *s, zt_err *err)
{
    for (int a = 0; a < s->n_arrays; a++) {
        struct stat sb;
        if (fstat(s->fd[a], &sb) != 0)
            return zt_err_set(err, ZT_ERR_IO, "cannot stat swap file %s: %s", s->path[a],
                              strerror(errno));
        if (sb.st_nlink == 0)
            return zt_err_set(err, ZT_ERR_IO,
                              "swap file %s was deleted while the job ran (was %s removed?); the run stops here and a restart resumes from the last checkpoint",
                              s->path[a], s->dir);
    }
    return ZT_OK;
}

static zt_status start(zt_swap *s, zt_aio_dir dir, int array, int seg, void *buf, zt_swap_io *io,
                       zt_err *err)
{
    if (array < 0 || array >= s->n_arrays || seg < 0 || seg >= s->n_segs)
        return zt_err_set(err, ZT_ERR_INVALID, "swap segment %d of array %d does not exist in %s",
                          seg, array, s->dir);
    if (((uintptr_t)buf & (ZT_SWAP_ALIGN - 1)) != 0)
        return zt_err_set(err, ZT_ERR_INVALID, "swap buffer %p is not %d-byte aligned", buf,
                          ZT_SWAP_ALIGN);
    size_t cell = (size_t)array * (size_t)s->n_segs + (size_t)seg;
    if (dir == ZT_AIO_READ && s->state[cell] != SEG_OK)
        return zt_err_set(err, s->state[cell] == SEG_BAD ? ZT_ERR_CORRUPT : ZT_ERR_STATE,
                          s->state[cell] == SEG_BAD
                              ? "%s at offset %llu (segment %d): its last write failed"
                              : "%s at offset %llu (segment %d) was never written",
                          s->path[array], (unsigned long long)s->off[seg], seg);
    *io = (zt_swap_io){.req = {.dir = dir,
                               .fd = s->fd[array],
                               .buf = buf,
                               .len = zt_swap_seg_bytes(s, seg),
                               .off = s->off[seg],
                               .path = s->path[array]},
                       .array = array,
                       .seg = seg};
    if (dir == ZT_AIO_WRITE) {
        io->crc = zt_crc32c(0, buf, s->len[seg]);
        s->state[cell] = SEG_BAD; /* until the write completes */
    }
    return zt_aio_submit(s->aio, &io->req, err);
}

zt_status zt_swap_read_start(zt_swap *s, int array, int seg, void *buf, zt_swap_io *io, zt_err *err)
{
    return start(s, ZT_AIO_READ, array, seg, buf, io, err);
}

zt_status zt_swap_write_start(zt_swap *s, int array, int seg, void *buf, zt_swap_io *io,
                              zt_err *err)
{
    return start(s, ZT_AIO_WRITE, array, seg, buf, io, err);
}

zt_status zt_swap_finish(zt_swap *s, zt_swap_io *io, zt_err *err)
{
    zt_status st = zt_aio_wait(s->aio, &io->req, err);
    size_t cell = (size_t)io->array * (size_t)s->n_segs + (size_t)io->seg;
    if (io->req.dir == ZT_AIO_WRITE) {
        if (st == ZT_OK) {
            s->crc[cell] = io->crc;
            s->state[cell] = SEG_OK;
        }
        return st;
    }
    if (st != ZT_OK) return st;
    uint32_t got = zt_crc32c(0, io->req.buf, s->len[io->seg]);
    if (got != s->crc[cell])
        return zt_err_set(
            err, ZT_ERR_CORRUPT,
            "swap file %s at offset %llu (segment %d, %zu bytes): CRC32C %08x, written as %08x; the disk returned other bytes than were written",
            s->path[io->array], (unsigned long long)s->off[io->seg], io->seg, s->len[io->seg], got,
            s->crc[cell]);
    return ZT_OK;
}
