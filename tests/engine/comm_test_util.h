/* zerotrain tests: run N ranks as real forked processes talking over loopback, with a shared
 * results page, a free port for the rendezvous, and teardown of every child even when a test
 * fails. Used by the collective tests and the bandwidth benchmark. */
#ifndef ZT_TESTS_ENGINE_COMM_TEST_UTIL_H
#define ZT_TESTS_ENGINE_COMM_TEST_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CT_MAX_RANKS 8

/* What every child can write and the parent reads after the children end. */
typedef struct ct_shared {
    int status[CT_MAX_RANKS];        /* zt_status of the call under test */
    double elapsed_ms[CT_MAX_RANKS]; /* how long it took */
    char msg[CT_MAX_RANKS][ZT_ERRMSG_MAX];    /* its error message */
    uint64_t digest[2][CT_MAX_RANKS][64];
    double figures[64][8]; /* benchmark numbers */
} ct_shared;

/* A page of memory shared with the children (an unlinked temporary file, POSIX only). */
static inline ct_shared *ct_shared_create(void)
{
    char path[] = "/tmp/zt_comm_test_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        exit(1);
    }
    unlink(path);
    if (ftruncate(fd, sizeof(ct_shared)) != 0) {
        perror("ftruncate");
        exit(1);
    }
    void *p = mmap(NULL, sizeof(ct_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    memset(p, 0, sizeof(ct_shared));
    return p;
}

/* Whether `port` on 127.0.0.1 can be bound right now. */
static inline int ct_port_bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    int ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* A TCP port on 127.0.0.1 that was free a moment ago, chosen below the kernel's ephemeral
 * range (ip_local_port_range): a port the kernel hands out (the source port of some other
 * test's connection, or another kernel-chosen listener) could be taken before rank 0 binds
 * it, which made parallel test runs fail now and then with "Address already in use". */
static inline int ct_free_port(void)
{
    int lo = 32768, a = 0, b = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &a, &b) == 2 && a > 4096) lo = a;
        fclose(f);
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t s = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec;
    for (int tries = 0; tries < 500; tries++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int port = 2048 + (int)((s >> 33) % (uint64_t)(lo - 2048));
        if (ct_port_bindable(port)) return port;
    }
    fprintf(stderr, "ct_free_port: no free port below %d on 127.0.0.1\n", lo);
    exit(1);
}

static inline double ct_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static inline void ct_sleep_ms(double ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                          .tv_nsec = (long)((ms - (double)(time_t)(ms / 1000) * 1000) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

typedef int (*ct_rank_fn)(int rank, int world, const char *rendezvous, void *arg);

/* Runs fn(rank, ...) in `world` child processes (rendezvous tcp://host:free-port, host NULL
 * meaning 127.0.0.1) and returns when all have ended; the exit
 * code of each lands in codes[] (128+signal when killed). Children still alive after
 * limit_ms are killed (code 124 style: reported as 128+SIGKILL). */
static inline void ct_run_world_at(const char *host, int world, ct_rank_fn fn, void *arg,
                                   double limit_ms, int *codes)
{
    char rdv[128];
    snprintf(rdv, sizeof(rdv), "tcp://%s:%d", host ? host : "127.0.0.1", ct_free_port());
    pid_t pids[CT_MAX_RANKS];
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] < 0) {
            perror("fork");
            for (int k = 0; k < r; k++)
                kill(pids[k], SIGKILL);
            exit(1);
        }
        if (pids[r] == 0) {
            alarm((unsigned)(limit_ms / 1000) + 5); /* never outlive a dead parent for long */
            int code = fn(r, world, rdv, arg);
            fflush(stdout);
            fflush(stderr);
            _exit(code);
        }
    }
    double start = ct_now_ms();
    int left = world;
    for (int r = 0; r < world; r++)
        codes[r] = -1;
    while (left > 0) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            for (int r = 0; r < world; r++)
                if (pids[r] == p) {
                    codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                    left--;
                }
            continue;
        }
        if (ct_now_ms() - start > limit_ms) {
            fprintf(stderr, "ct_run_world: children still running after %.0f ms, killing them\n",
                    limit_ms);
            for (int r = 0; r < world; r++)
                if (codes[r] < 0) kill(pids[r], SIGKILL);
        }
        ct_sleep_ms(2);
    }
}

static inline void ct_run_world(int world, ct_rank_fn fn, void *arg, double limit_ms, int *codes)
{
    ct_run_world_at(NULL, world, fn, arg, limit_ms, codes);
}

/* Fails the test (in the parent) unless every rank exited with 0. */
static inline void ct_expect_all_ok(const char *name, int world, const int *codes)
{
    int bad = 0;
    for (int r = 0; r < world; r++)
        if (codes[r] != 0) {
            fprintf(stderr, "%s: rank %d of %d exited with %d\n", name, r, world, codes[r]);
            bad = 1;
        }
    if (bad) {
        fprintf(stderr, "FAIL: %s\n", name);
        exit(1);
    }
}

/* 64-bit FNV-1a over bytes. */
static inline uint64_t ct_fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    if (h == 0) h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

#endif
