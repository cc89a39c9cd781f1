/* Test helper: starts the real zcoord binary ($ZT_BIN/zcoord) on loopback in a temporary
 * directory, finds its port through --ready-file, and makes sure it is killed when the test
 * ends — also when an assertion fails (atexit) or the test is killed by a signal. */
#ifndef ZT_TESTS_ZCOORD_HARNESS_H
#define ZT_TESTS_ZCOORD_HARNESS_H

#include <sys/types.h>

typedef struct zt_zcoord_proc {
    pid_t pid;
    char dir[128]; /* temporary directory (database, log, ready file) */
    char db[256];
    char addr[64]; /* "127.0.0.1:PORT" */
    int port;
    char log[256]; /* zcoord's stderr */
} zt_zcoord_proc;

/* Starts zcoord with --db, --grpc 127.0.0.1:0 (or the previous port on restart), --http
 * off, --ready-file, then the NULL-terminated extra arguments. Fails the test (exit 1) when
 * it does not come up within 20 s, printing its log. */
void zt_zcoord_start(zt_zcoord_proc *p, const char *const *extra);
/* Starts it again on the same database and port (after stop or kill). */
void zt_zcoord_restart(zt_zcoord_proc *p, const char *const *extra);
/* SIGTERM and wait (SIGKILL after 15 s); returns the exit status (-1 when killed). */
int zt_zcoord_stop(zt_zcoord_proc *p);
/* SIGKILL and reap. */
void zt_zcoord_kill(zt_zcoord_proc *p);
/* Removes the temporary directory. */
void zt_zcoord_cleanup(zt_zcoord_proc *p);
/* Prints the last lines of zcoord's log to stderr (on failures). */
void zt_zcoord_dump_log(const zt_zcoord_proc *p);

#endif
