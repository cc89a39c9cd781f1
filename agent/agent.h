/* zerotrain: zagent, the node agent. It registers with the coordinator, heartbeats the state
 * of its workers and treats the desired set in each Heartbeat reply as the truth: it starts
 * the zworker processes that are desired and not running (spec, rendezvous, spawn), stops the
 * ones that are no longer desired, and forwards what workers report (step metrics, checkpoint
 * shards, output lines). One libuv loop; RPCs are asynchronous, so a dead coordinator never
 * stalls the loop. The worker's command line and environment are described in `zagent --help`
 * (zt_agent_usage); each rank's output is kept in WORK_DIR/attempt_<id>/rank_NNNNN.log. */
#ifndef ZT_AGENT_AGENT_H
#define ZT_AGENT_AGENT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "common/device.h"
#include "common/status.h"

/* Exit codes of zagent (and of zt_agent_run). */
#define ZT_AGENT_EXIT_OK 0    /* stopped by SIGTERM/SIGINT */
#define ZT_AGENT_EXIT_FAIL 1  /* the coordinator refused us for good (token), or a fatal error */
#define ZT_AGENT_EXIT_USAGE 2 /* bad flags or environment */

typedef struct zt_agent_gpu {
    int index;
    char name[96];
    int64_t memory_total, memory_free; /* bytes */
} zt_agent_gpu;

/* Everything zagent runs with; strings are owned (zt_malloc) and freed by
 * zt_agent_config_free. */
typedef struct zt_agent_config {
    char *coordinator;  /* "host:port" or "unix:/path" */
    char *token;        /* bearer token; NULL = none */
    char *tls_ca_pem;   /* PEM roots: TLS to the coordinator; NULL = plaintext */
    char *tls_cert_pem, *tls_key_pem; /* client certificate and key (mutual TLS); NULL = none */
    zt_device device;                 /* the kind of the slots */
    int slots;          /* CPU slots or GPUs */
    zt_agent_gpu *gpus; /* [n_gpus] (cuda) */
    int n_gpus;
    char *name; /* unique per node, stable across restarts ([A-Za-z0-9._-]) */
    char *hostname;
    char *advertise_host; /* host peers reach this node's rank-0 worker at */
    char *work_dir;       /* absolute; per-attempt job files and rank logs go below it */
    char *worker;         /* absolute path of zworker */
    char *exec_wrapper;   /* absolute path of zagent itself (runs `--exec-worker`); NULL = exec
                             the worker directly (no parent-death signal) */
    int heartbeat_ms;     /* 0 = the interval the coordinator asks for */
    int stop_grace_ms;    /* SIGTERM to SIGKILL when a worker is stopped */
    int log_queue_lines;  /* output lines queued for the coordinator before dropping */
    char *status_file;    /* JSON status rewritten after each heartbeat; NULL = none */
    int omp_threads;      /* OMP_NUM_THREADS for CPU workers (0 = leave the environment) */
    /* confinement (agent/confine.h) */
    char **allow_paths; /* [n_allow_paths] canonical directories (realpath) a job's paths must
                           resolve inside; the working directory when none is given */
    int n_allow_paths;
    bool allow_paths_default; /* allow_paths is the working directory, by default */
    bool allow_root;          /* --allow-root: a root agent may start workers as root */
    char *run_as;             /* the --run-as user's name; NULL = none */
    bool drop_privileges;     /* workers start as run_as_uid/gid/groups (the agent is root) */
    uid_t run_as_uid;
    gid_t run_as_gid;
    gid_t *run_as_groups; /* [n_run_as_groups] the user's supplementary groups */
    int n_run_as_groups;
    char *run_as_home; /* the user's home directory (HOME of its workers) */
} zt_agent_config;

/* Reads the settings from argv (flags win) and the environment (ZT_* variables), checks
 * them, reads the token and CA files, detects GPUs for cuda slots and resolves paths.
 * *help is set (and ZT_OK returned) for -h/--help. Errors (ZT_ERR_CONFIG, ZT_ERR_IO,
 * ZT_ERR_NO_DEVICE) say which flag or variable was wrong and what to do. On failure cfg is
 * left empty. Not thread-safe (reads the environment). */
zt_status zt_agent_config_parse(zt_agent_config *cfg, int argc, char **argv, bool *help,
                                zt_err *err);
/* Frees the strings of cfg and zeroes it; a zeroed cfg is a no-op. */
void zt_agent_config_free(zt_agent_config *cfg);
/* The --help text: every setting with its flag, variable and default. */
void zt_agent_usage(FILE *f);

/* Parses a --slots value: "cpu:N" (1..4096) sets *device and *slots; "cuda:auto" and
 * "cuda:N" set *device to cuda and *slots to -1 (auto) or N (detection is the caller's). */
zt_status zt_agent_parse_slots(const char *s, zt_device *device, int *slots, zt_err *err);

typedef struct zt_agent zt_agent;

/* Builds the agent (libuv loop, RPC client, signal handlers); takes ownership of cfg's
 * strings (cfg is zeroed). Errors: ZT_ERR_IO (work dir), ZT_ERR_NOMEM, ZT_ERR_INTERNAL (libuv). */
zt_status zt_agent_create(zt_agent **out, zt_agent_config *cfg, zt_err *err);
/* Runs the loop until SIGTERM/SIGINT (workers stopped gracefully, their exits reported in a
 * last heartbeat that says the agent is leaving, so the coordinator marks it LOST at once) or
 * a fatal refusal by the coordinator. Returns ZT_AGENT_EXIT_*. Call once, on the thread that created
 * the agent (workers get a parent-death signal tied to it). */
int zt_agent_run(zt_agent *a);
/* Frees the agent; NULL is a no-op. Only after zt_agent_run returned (or instead of it). */
void zt_agent_destroy(zt_agent *a);

/* The hidden `zagent --exec-worker PPID [--as UID:GID:G1,G2,...] WORKER ARGS...` mode: with
 * --as, sets the supplementary groups, the group and the user (and checks that root cannot be
 * regained); then sets the parent-death signal (SIGKILL; after the user change, which clears
 * it), checks that the agent PPID is still the parent, and execs WORKER. Returns only on
 * failure, with the exit code to use (127 not found, 126 not executable or the user could not
 * be set, 1 otherwise). */
int zt_agent_exec_worker(int argc, char **argv);

#endif
