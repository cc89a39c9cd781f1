/* zerotrain: secrets from files (see secretfile.h). The file is opened once and every check
 * looks at that open file, so a path swapped between check and read cannot slip through. */
#define _POSIX_C_SOURCE 200809L
#include "common/secretfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"

static const char *file_kind(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

/* "a space", "a tab", "control character 0x1b", ... for the byte c (not printable ASCII). */
static const char *byte_desc(unsigned char c, char *buf, size_t cap)
{
    if (c == ' ') return "a space";
    if (c == '\t') return "a tab";
    if (c == '\r') return "a carriage return";
    if (c == '\0') return "a NUL byte";
    snprintf(buf, cap, "%s 0x%02x", c >= 0x80 ? "the non-ASCII byte" : "the control character", c);
    return buf;
}

char *zt_secret_file_read(const char *path, const char *what, zt_err *err)
{
    if (!what) what = "the secret file";
    if (!path || !path[0]) {
        zt_err_set(err, ZT_ERR_INVALID, "%s: no path given", what);
        return NULL;
    }
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        zt_err_set(err, ZT_ERR_IO, "cannot read %s %s: %s; check the path", what, path,
                   strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        zt_err_set(err, ZT_ERR_IO, "cannot read %s %s: %s; check the path", what, path,
                   strerror(errno));
        goto close_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        zt_err_set(err, ZT_ERR_CONFIG,
                   "%s %s is %s, not a file; give the path of the file that holds the secret", what,
                   path, file_kind(st.st_mode));
        goto close_fd;
    }
    if (st.st_mode & 077) {
        zt_err_set(
            err, ZT_ERR_CONFIG,
            "%s %s is open to group or others (mode %04o); a secret must be readable by its owner only: run chmod 600 %s",
            what, path, (unsigned)(st.st_mode & 07777), path);
        goto close_fd;
    }
    /* room for the longest secret, CR LF, and one byte more to see that it is too long */
    size_t cap = ZT_SECRET_MAX + 3, n = 0;
    buf = zt_malloc(cap + 1);
    if (!buf) {
        zt_err_set(err, ZT_ERR_NOMEM, "out of memory reading %s %s", what, path);
        goto close_fd;
    }
    while (n < cap) {
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            zt_err_set(err, ZT_ERR_IO, "cannot read %s %s: %s", what, path, strerror(errno));
            goto free_buf;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    if (n >= 2 && buf[n - 2] == '\r' && buf[n - 1] == '\n')
        n -= 2;
    else if (n >= 1 && buf[n - 1] == '\n')
        n -= 1;
    buf[n] = '\0';
    if (n > ZT_SECRET_MAX) {
        zt_err_set(
            err, ZT_ERR_CONFIG,
            "%s %s is longer than %d bytes; a secret is one line of at most %d: is it the right file?",
            what, path, ZT_SECRET_MAX, ZT_SECRET_MAX);
        goto free_buf;
    }
    const char *nl = memchr(buf, '\n', n);
    if (nl) {
        zt_err_set(
            err, ZT_ERR_CONFIG,
            "%s %s holds more than one line (a line break at byte %zu); put the secret alone on one line",
            what, path, (size_t)(nl - buf) + 1);
        goto free_buf;
    }
    if (n == 0) {
        zt_err_set(err, ZT_ERR_CONFIG,
                   "%s %s is empty; write the secret into it (e.g. openssl rand -hex 32 > %s)",
                   what, path, path);
        goto free_buf;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c > 0x20 && c < 0x7f) continue;
        char desc[48];
        zt_err_set(
            err, ZT_ERR_CONFIG,
            "%s %s has %s at byte %zu; a secret is printable ASCII without spaces or control characters: remove it",
            what, path, byte_desc(c, desc, sizeof(desc)), i + 1);
        goto free_buf;
    }
    if (n < ZT_SECRET_MIN) {
        zt_err_set(
            err, ZT_ERR_CONFIG,
            "%s %s holds a secret of %zu bytes, shorter than the %d required; make a longer one (e.g. openssl rand -hex 32 > %s)",
            what, path, n, ZT_SECRET_MIN, path);
        goto free_buf;
    }
    close(fd);
    return buf;

free_buf:
    /* the buffer held (part of) a secret */
    memset(buf, 0, cap + 1);
    zt_free(buf);
    buf = NULL;
close_fd:
    close(fd);
    return NULL;
}
