/* zerotrain tests: an LD_PRELOAD shim that makes one file-system call fail on request, so the
 * checkpoint tests can prove that a save reports what the disk refused instead of ignoring it.
 *   ZT_FAULT_FSYNC_DIR=DIR   fsync of the directory DIR (same inode) fails with EIO
 *   ZT_FAULT_MKDIR=SUFFIX    mkdir of a path ending in SUFFIX fails with ENOSPC
 *   ZT_FAULT_RENAME=SUFFIX   rename onto a path ending in SUFFIX fails with EIO
 *   ZT_FAULT_ODIRECT=SUFFIX  open with O_DIRECT of a path ending in SUFFIX fails with EINVAL
 *                            (a filesystem without direct I/O)
 *   ZT_FAULT_FALLOCATE=SUFFIX  posix_fallocate of such a file fails with ENOSPC
 *   ZT_FAULT_PWRITE=SUFFIX   pwrite to such a file fails with ENOSPC (a disk that fills; the
 *                            NVMe swap's thread backend writes with pwrite), after the first
 *                            ZT_FAULT_PWRITE_SKIP=N such writes of the process succeeded
 * Everything else goes straight to the kernel. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return k > 0 && n >= k && strcmp(s + n - k, suffix) == 0;
}

int fsync(int fd)
{
    const char *dir = getenv("ZT_FAULT_FSYNC_DIR");
    struct stat a, b;
    if (dir && *dir && fstat(fd, &a) == 0 && S_ISDIR(a.st_mode) && stat(dir, &b) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
        errno = EIO;
        return -1;
    }
    return (int)syscall(SYS_fsync, fd);
}

int mkdir(const char *path, mode_t mode)
{
    const char *suffix = getenv("ZT_FAULT_MKDIR");
    if (suffix && ends_with(path, suffix)) {
        errno = ENOSPC;
        return -1;
    }
    return (int)syscall(SYS_mkdirat, AT_FDCWD, path, mode);
}

int rename(const char *from, const char *to)
{
    const char *suffix = getenv("ZT_FAULT_RENAME");
    if (suffix && ends_with(to, suffix)) {
        errno = EIO;
        return -1;
    }
#ifdef SYS_renameat
    return (int)syscall(SYS_renameat, AT_FDCWD, from, AT_FDCWD, to);
#else
    return (int)syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, 0);
#endif
}

/* Whether fd's path ends with the suffix named by environment variable var. */
static int fd_matches(int fd, const char *var)
{
    const char *suffix = getenv(var);
    if (!suffix || !*suffix) return 0;
    char link[64], path[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    return ends_with(path, suffix);
}

static int open_at(const char *path, int flags, va_list ap)
{
    mode_t mode = (flags & O_CREAT) ? (mode_t)va_arg(ap, int) : 0;
    const char *suffix = getenv("ZT_FAULT_ODIRECT");
    if ((flags & O_DIRECT) && suffix && ends_with(path, suffix)) {
        errno = EINVAL;
        return -1;
    }
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int fd = open_at(path, flags, ap);
    va_end(ap);
    return fd;
}

int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int fd = open_at(path, flags, ap);
    va_end(ap);
    return fd;
}

int posix_fallocate(int fd, off_t offset, off_t len)
{
    if (fd_matches(fd, "ZT_FAULT_FALLOCATE")) return ENOSPC;
    return syscall(SYS_fallocate, fd, 0, offset, len) == 0 ? 0 : errno;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    static long matched; /* the I/O threads of one process take turns: a rough count will do */
    if (fd_matches(fd, "ZT_FAULT_PWRITE")) {
        const char *skip = getenv("ZT_FAULT_PWRITE_SKIP");
        if (__atomic_fetch_add(&matched, 1, __ATOMIC_RELAXED) >= (skip ? atol(skip) : 0)) {
            errno = ENOSPC;
            return -1;
        }
    }
    return syscall(SYS_pwrite64, fd, buf, n, off);
}
