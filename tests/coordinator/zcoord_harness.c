/* Test helper: start and tear down the real zcoord binary (see zcoord_harness.h). */
#define _POSIX_C_SOURCE 200809L
#include "tests/coordinator/zcoord_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS 16

static pid_t live[MAX_PROCS];
static int hooks_installed;

static void kill_all(void)
{
    for (int i = 0; i < MAX_PROCS; i++) {
        if (live[i] > 0) {
            kill(live[i], SIGKILL);
            waitpid(live[i], NULL, 0);
            live[i] = 0;
        }
    }
}

static void on_signal(int sig)
{
    for (int i = 0; i < MAX_PROCS; i++)
        if (live[i] > 0) kill(live[i], SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void track(pid_t pid, bool add)
{
    for (int i = 0; i < MAX_PROCS; i++) {
        if (add && live[i] == 0) {
            live[i] = pid;
            return;
        }
        if (!add && live[i] == pid) {
            live[i] = 0;
            return;
        }
    }
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void zt_zcoord_dump_log(const zt_zcoord_proc *p)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "tail -n 40 %s >&2", p->log);
    fprintf(stderr, "---- zcoord log (%s) ----\n", p->log);
    if (system(cmd) != 0) fprintf(stderr, "(no log)\n");
}

static void launch(zt_zcoord_proc *p, const char *const *extra)
{
    if (!hooks_installed) {
        atexit(kill_all);
        signal(SIGTERM, on_signal);
        signal(SIGINT, on_signal);
        signal(SIGALRM, on_signal);
        signal(SIGPIPE, SIG_IGN);
        hooks_installed = 1;
    }
    const char *bin_dir = getenv("ZT_BIN");
    char bin[512];
    snprintf(bin, sizeof(bin), "%s/zcoord", bin_dir ? bin_dir : "./bin");
    char ready[256], grpc[64];
    snprintf(ready, sizeof(ready), "%s/ready.json", p->dir);
    unlink(ready);
    snprintf(grpc, sizeof(grpc), "127.0.0.1:%d", p->port);
    const char *argv[64];
    int n = 0;
    argv[n++] = bin;
    argv[n++] = "--db";
    argv[n++] = p->db;
    argv[n++] = "--grpc";
    argv[n++] = grpc;
    argv[n++] = "--http";
    argv[n++] = "off";
    argv[n++] = "--ready-file";
    argv[n++] = ready;
    for (int i = 0; extra && extra[i] && n < 62; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        int fd = open(p->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 2);
            dup2(fd, 1);
            close(fd);
        }
        execv(bin, (char *const *)argv);
        fprintf(stderr, "cannot run %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    p->pid = pid;
    track(pid, true);
    for (int i = 0; i < 2000; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            track(pid, false);
            p->pid = 0;
            fprintf(stderr, "zcoord exited during start-up (status %d)\n", st);
            zt_zcoord_dump_log(p);
            exit(1);
        }
        FILE *f = fopen(ready, "r");
        if (f) {
            char buf[512] = "";
            size_t k = fread(buf, 1, sizeof(buf) - 1, f);
            buf[k] = '\0';
            fclose(f);
            const char *g = strstr(buf, "\"grpc\": \"");
            if (g) {
                g += 9;
                const char *end = strchr(g, '"');
                const char *colon = NULL;
                for (const char *q = g; end && q < end; q++)
                    if (*q == ':') colon = q;
                if (colon && end && colon < end) {
                    p->port = atoi(colon + 1);
                    snprintf(p->addr, sizeof(p->addr), "127.0.0.1:%d", p->port);
                    return;
                }
            }
        }
        sleep_ms(10);
    }
    fprintf(stderr, "zcoord did not become ready within 20 s\n");
    zt_zcoord_dump_log(p);
    exit(1);
}

void zt_zcoord_start(zt_zcoord_proc *p, const char *const *extra)
{
    memset(p, 0, sizeof(*p));
    snprintf(p->dir, sizeof(p->dir), "/tmp/zt_zcoord_XXXXXX");
    if (!mkdtemp(p->dir)) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(p->db, sizeof(p->db), "%s/zt.db", p->dir);
    snprintf(p->log, sizeof(p->log), "%s/zcoord.log", p->dir);
    launch(p, extra);
}

void zt_zcoord_restart(zt_zcoord_proc *p, const char *const *extra)
{
    launch(p, extra);
}

int zt_zcoord_stop(zt_zcoord_proc *p)
{
    if (p->pid <= 0) return -1;
    kill(p->pid, SIGTERM);
    int st = 0;
    for (int i = 0; i < 1500; i++) {
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            track(p->pid, false);
            p->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        sleep_ms(10);
    }
    fprintf(stderr, "zcoord did not stop within 15 s of SIGTERM; killing it\n");
    zt_zcoord_kill(p);
    return -1;
}

void zt_zcoord_kill(zt_zcoord_proc *p)
{
    if (p->pid <= 0) return;
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    track(p->pid, false);
    p->pid = 0;
}

void zt_zcoord_cleanup(zt_zcoord_proc *p)
{
    char cmd[300];
    if (!p->dir[0]) return;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", p->dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", p->dir);
}
