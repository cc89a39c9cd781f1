/* zerotrain tests: an LD_PRELOAD shim that makes one file-system call fail on request, so the
 * checkpoint tests can prove that a save reports what the disk refused instead of ignoring it.
 *   ZT_FAULT_FSYNC_DIR=DIR   fsync of the directory DIR (same inode) fails with EIO
 *   ZT_FAULT_MKDIR=SUFFIX    mkdir of a path ending in SUFFIX fails with ENOSPC
 *   ZT_FAULT_RENAME=SUFFIX   rename onto a path ending in SUFFIX fails with EIO
 * Everything else goes straight to the kernel. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
