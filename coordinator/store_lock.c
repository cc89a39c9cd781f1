/* zerotrain: one coordinator per database (see store.h): a lock file beside the database,
 * held with flock for the coordinator's lifetime, whose text says which process holds it and
 * where it serves, for the error a second coordinator reports. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"

struct zt_store_lock {
    int fd;
    char *path; /* "<db>.lock" */
};

/* Replaces the lock file's content with text, then fsyncs it. */
static zt_status lock_write(zt_store_lock *l, const char *text, zt_err *err)
{
    size_t n = strlen(text);
    /* write, then cut: a reader never finds the file empty between the two */
    if (pwrite(l->fd, text, n, 0) != (ssize_t)n || ftruncate(l->fd, (off_t)n) != 0 ||
        fsync(l->fd) != 0)
        return zt_err_set(err, ZT_ERR_IO, "cannot write the lock file %s: %s", l->path,
                          strerror(errno));
    return ZT_OK;
}

/* The value of "key=" in the holder's line into out ("" when absent). */
static void lock_field(const char *line, const char *key, char *out, size_t cap)
{
    out[0] = '\0';
    size_t kn = strlen(key);
    for (const char *p = line; (p = strstr(p, key)) != NULL; p += kn) {
        if ((p != line && p[-1] != ' ') || p[kn] != '=') continue;
        p += kn + 1;
        size_t n = strcspn(p, " \n");
        if (n >= cap) n = cap - 1;
        memcpy(out, p, n);
        out[n] = '\0';
        return;
    }
}

/* The error for a lock that another process holds, from what that process wrote. */
static zt_status lock_busy(int fd, const char *db_path, zt_err *err)
{
    char line[1024];
    ssize_t n = pread(fd, line, sizeof(line) - 1, 0);
    line[n > 0 ? n : 0] = '\0';
    char pid[32], grpc[300], http[300];
    lock_field(line, "pid", pid, sizeof(pid));
    lock_field(line, "grpc", grpc, sizeof(grpc));
    lock_field(line, "http", http, sizeof(http));
    if (!pid[0])
        return zt_err_set(
            err, ZT_ERR_EXISTS,
            "database %s is in use by another zcoord that is starting up; stop it first or use another --db",
            db_path);
    if (!grpc[0])
        return zt_err_set(
            err, ZT_ERR_EXISTS,
            "database %s is in use by zcoord pid %s (starting up); stop it first or use another --db",
            db_path, pid);
    return zt_err_set(
        err, ZT_ERR_EXISTS,
        "database %s is in use by zcoord pid %s (grpc %s, http %s); stop it first or use another --db",
        db_path, pid, grpc, http[0] ? http : "off");
}

zt_status zt_store_lock_acquire(zt_store_lock **out, const char *db_path, zt_err *err)
{
    *out = NULL;
    zt_store_lock *l = zt_calloc(1, sizeof(*l));
    if (!l) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory locking the database");
    l->fd = -1;
    zt_status st = ZT_OK;
    l->path = zt_asprintf("%s.lock", db_path);
    if (!l->path) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory locking the database");
        goto free_lock;
    }
    l->fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
    if (l->fd < 0) {
        st = zt_err_set(
            err, ZT_ERR_IO,
            "cannot open the lock file %s of database %s: %s; zcoord needs to create and write it beside the database",
            l->path, db_path, strerror(errno));
        goto free_lock;
    }
    while (flock(l->fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EINTR) continue;
        if (errno == EWOULDBLOCK)
            st = lock_busy(l->fd, db_path, err);
        else
            st = zt_err_set(err, ZT_ERR_IO, "cannot lock %s (the lock of database %s): %s", l->path,
                            db_path, strerror(errno));
        goto close_fd;
    }
    char text[64];
    snprintf(text, sizeof(text), "pid=%d\n", (int)getpid());
    if ((st = lock_write(l, text, err)) != ZT_OK) goto close_fd;
    *out = l;
    return ZT_OK;

close_fd:
    close(l->fd);
free_lock:
    zt_free(l->path);
    zt_free(l);
    return st;
}

zt_status zt_store_lock_describe(zt_store_lock *l, const char *grpc, const char *http, zt_err *err)
{
    char *text = zt_asprintf("pid=%d grpc=%s http=%s\n", (int)getpid(), grpc, http);
    if (!text) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory writing the lock file");
    zt_status st = lock_write(l, text, err);
    zt_free(text);
    return st;
}

void zt_store_lock_release(zt_store_lock *l)
{
    if (!l) return;
    /* a stale pid in the file would only mislead a reader; the lock itself dies with the fd */
    if (ftruncate(l->fd, 0) != 0) ZT_WARN("store", "cannot empty %s: %s", l->path, strerror(errno));
    close(l->fd);
    zt_free(l->path);
    zt_free(l);
}
