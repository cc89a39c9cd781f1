/* zerotrain: the gang scheduler and the restart policy, as pure functions over plain arrays
 * (no store, no locks), so that every placement rule is testable on its own.
 * Placement: all ranks of an attempt on agents with free slots, or none; jobs in order of
 * priority (higher first), then submission (FIFO); a job that fits the cluster but not the
 * free slots now blocks the jobs behind it on the same device (no starvation); a job that
 * can never fit, or waits out a restart backoff, does not block. */
#ifndef ZT_COORDINATOR_SCHED_H
#define ZT_COORDINATOR_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZT_SCHED_REASON_MAX 256

typedef struct zt_sched_agent {
    const char *name;
    int device; /* a zt_device (common/device.h) */
    bool alive;
    int slots;  /* total */
    bool *busy; /* [slots]: slot i in use; zt_sched_plan marks the slots it hands out */
} zt_sched_agent;

typedef struct zt_sched_job {
    int64_t id;
    int priority;
    int ranks;
    int ranks_per_node; /* at most this many ranks on one agent */
    int device;
    bool eligible; /* false while a restart backoff runs: skipped, blocks nobody */
} zt_sched_job;

typedef struct zt_sched_slot {
    int agent;      /* index into the agents array */
    int local_rank; /* 0.. on that agent */
    int slot;       /* slot (GPU index or CPU slot) on that agent */
} zt_sched_slot;

typedef struct zt_sched_decision {
    bool placed;
    zt_sched_slot *ranks;             /* [ranks], caller-provided, filled when placed */
    char reason[ZT_SCHED_REASON_MAX]; /* why it is not placed (placed = false) */
} zt_sched_decision;

/* Places jobs in priority/FIFO order onto the agents' free slots. out[i] belongs to jobs[i]
 * and out[i].ranks must have room for jobs[i].ranks entries. Ranks go to agents with the
 * most free slots first (fewest nodes), consecutive ranks on one agent, local ranks and
 * the lowest free slots in order. Agents' busy flags are updated. Not thread-safe on the
 * same arrays. */
void zt_sched_plan(zt_sched_agent *agents, size_t n_agents, const zt_sched_job *jobs, size_t n_jobs,
                   zt_sched_decision *out);

typedef enum {
    ZT_EXIT_OK = 0,             /* exit code 0 */
    ZT_EXIT_RETRYABLE = 1,      /* a restart may help (crash, signal, lost peer, I/O) */
    ZT_EXIT_FATAL = 2,          /* a restart repeats it (usage, bad config or data, not runnable) */
    ZT_EXIT_BAD_CHECKPOINT = 3, /* the checkpoint it resumed from failed verification: a
                                   restart from an older checkpoint may help, never one from
                                   the same checkpoint */
} zt_exit_class;

/* zworker's exit code for "the checkpoint I was told to resume from failed verification". */
#define ZT_EXIT_CODE_BAD_CHECKPOINT 5

/* Classifies how a worker ended: exit status (when sig == 0) or the signal that killed it.
 * Fatal: exit 2 (usage), 64 EX_USAGE, 65 EX_DATAERR, 66 EX_NOINPUT, 77 EX_NOPERM,
 * 78 EX_CONFIG, 126 (not executable), 127 (not found). Exit 5 is ZT_EXIT_BAD_CHECKPOINT.
 * Every other non-zero exit and every signal is retryable. why (optional) gets a human
 * explanation. */
zt_exit_class zt_sched_classify_exit(int code, int sig, char *why, size_t cap);
/* The same, where bad_ckpt (NULL or "" when unknown) is the checkpoint directory the worker
 * reported as failing verification: exit 5's explanation names it. */
zt_exit_class zt_sched_classify_worker_exit(int code, int sig, const char *bad_ckpt, char *why,
                                            size_t cap);

/* Delay before restart number n (1-based): base * 2^(n-1), at most max_ms. */
int64_t zt_sched_backoff_ms(int64_t base_ms, int64_t max_ms, int n);

#endif
