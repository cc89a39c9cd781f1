/* zerotrain: file-system helpers (see fsutil.h). */
#define _POSIX_C_SOURCE 200809L
#include "common/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* fsync of the directory that holds path's last component; on failure its name goes to
 * failed */
static int fsync_parent(char *path, char *failed, size_t cap)
{
    char *slash = strrchr(path, '/');
    const char *dir = !slash ? "." : slash == path ? "/" : path;
    if (slash && slash != path) *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = fd < 0 ? -1 : fsync(fd);
    /* some file systems cannot fsync a directory at all (EINVAL): nothing more to do there */
    if (rc != 0 && fd >= 0 && errno == EINVAL) rc = 0;
    int e = errno;
    if (fd >= 0) close(fd);
    if (rc != 0 && failed && cap) snprintf(failed, cap, "%s", dir);
    if (slash && slash != path) *slash = '/';
    errno = e;
    return rc;
}

/* Another process may remove a parent between our mkdir of it and our mkdir of its child
 * (ranks sharing a swap parent, the last one out removing it): start over, at most this
 * many times. */
#define MKDIRS_RETRIES 1000

int zt_mkdirs(const char *path, bool durable, char *failed, size_t cap)
{
    char tmp[PATH_MAX];
    if (failed && cap) failed[0] = '\0';
    if (snprintf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp)) {
        if (failed && cap) snprintf(failed, cap, "%s", path);
        errno = ENAMETOOLONG;
        return -1;
    }
    size_t len = strlen(tmp);
    int retries = 0;
    for (size_t i = 1; i <= len; i++) {
        if (tmp[i] != '/' && tmp[i] != '\0') continue;
        char saved = tmp[i];
        tmp[i] = '\0';
        int rc = 0;
        if (mkdir(tmp, 0755) == 0) {
            if (durable && fsync_parent(tmp, failed, cap) != 0) return -2;
        } else if (errno == EEXIST) {
            struct stat sb;
            if (stat(tmp, &sb) != 0) {
                rc = -1;
            } else if (!S_ISDIR(sb.st_mode)) {
                errno = ENOTDIR;
                rc = -1;
            }
        } else {
            rc = -1;
        }
        if (rc != 0 && errno == ENOENT && i > 1 && retries < MKDIRS_RETRIES) {
            retries++; /* a parent vanished after we saw it: create the path again */
            snprintf(tmp, sizeof(tmp), "%s", path);
            i = 0;
            continue;
        }
        if (rc != 0) {
            int e = errno;
            if (failed && cap) snprintf(failed, cap, "%s", tmp);
            errno = e;
            return -1;
        }
        tmp[i] = saved;
    }
    return 0;
}
