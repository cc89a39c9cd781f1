/* zerotrain: what only the agent/ sources may see — the agent, its workers and report queues. Every
 * function here runs on the loop thread, except the RPC completion hand-off in rpc.c (a
 * poller thread queues finished calls under cmu and wakes the loop with uv_async_send). */
#ifndef ZT_AGENT_AGENT_INT_H
#define ZT_AGENT_AGENT_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <uv.h>

#include "agent/agent.h"
#include "common/reportline.h"
#include "common/hangdiag.h"
#include "proto/rpc.h"
#include "proto/zerotrain.pb-c.h"

#define AG_PATH_MAX 4096
#define AG_LINE_MAX 8192  /* longer output lines are split (the coordinator's limit) */
#define AG_LOG_BATCH 1000 /* entries per ReportLogs call */
#define AG_LOG_BATCH_BYTES (1 << 20)
#define AG_METRICS_MAX 10000 /* queued steps before dropping */
#define AG_METRICS_BATCH 1000
#define AG_CKPT_MAX 4096      /* queued shard reports before dropping */
#define AG_RDZV_WAIT_MS 5000  /* one Rendezvous WAIT_RANK0 call; repeated while desired */
#define AG_EXIT_HOLD_MS 10000 /* longest wait for a worker's pipes and shard reports */
#define AG_RTT_RING 512

typedef struct ag_worker ag_worker;

/* ---- rpc.c: asynchronous calls whose completions run on the loop ------------------------ */

/* code is the gRPC status; reply is the decoded reply (NULL unless code is OK), freed after
 * the callback returns; elapsed_ns the call's round trip. */
typedef void (*ag_rpc_fn)(zt_agent *a, void *ctx, zt_rpc_code code, const char *msg, void *reply,
                          uint64_t elapsed_ns);

typedef struct ag_call {
    struct ag_call *next;
    zt_agent *agent;
    const ProtobufCMessageDescriptor *reply_type;
    ag_rpc_fn fn;
    void *ctx;
    zt_rpc_code code;
    char msg[512];
    uint8_t *reply;
    size_t len;
    uint64_t started_ns, done_ns;
} ag_call;

zt_status ag_rpc_init(zt_agent *a, zt_err *err);
/* Starts /zt.v1.AgentControl/<method>; fn runs later, on the loop (also when the call could
 * not start: then with UNAVAILABLE and the reason). Only when even the call record cannot be
 * allocated does fn run at once (RESOURCE_EXHAUSTED), so callbacks never start calls
 * directly: they schedule timers. */
void ag_rpc_call(zt_agent *a, const char *method, const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *reply_type, int timeout_ms, ag_rpc_fn fn,
                 void *ctx);
/* Stops the poller thread and frees the client; only with no call in flight. */
void ag_rpc_close(zt_agent *a);
/* True for codes where trying the same call again later may succeed. */
bool ag_rpc_transient(zt_rpc_code code);

/* ---- worker.c: one zworker process --------------------------------------------------------- */

typedef enum {
    AGW_PREPARING = 0, /* desired; fetching the spec, meeting at the rendezvous */
    AGW_RUNNING,       /* spawned */
    AGW_STOPPING,      /* no longer desired (or the agent stops): SIGTERM sent */
    AGW_EXITED,        /* ended, pipes drained, shard reports settled: reported as EXITED */
} ag_wstate;

typedef enum { AGP_SPEC = 0, AGP_RDZV, AGP_SPAWN } ag_prep;

typedef struct ag_stream {
    uv_pipe_t pipe;
    ag_worker *w;
    int kind; /* 0 stdout, 1 stderr, 2 report fd */
    bool open;
    size_t len;
    char line[AG_LINE_MAX + 1];
    char rbuf[16384];
} ag_stream;

struct ag_worker {
    ag_worker *next;
    zt_agent *agent;
    /* what the coordinator asked for */
    int64_t job_id, attempt_id;
    int rank, world_size, local_rank, local_world_size, device_index;
    zt_device device;
    char *resume_path, *job_name;
    char **env; /* "NAME=value" from DesiredWorker.env */
    int n_env;
    char cuda_visible[256]; /* the attempt's local devices in local-rank order (cuda) */
    bool desired;           /* in the last desired set */
    /* lifecycle */
    ag_wstate state;
    ag_prep prep;
    int prep_failures;
    bool prep_call;        /* a spec or rendezvous call is in flight */
    char dir[AG_PATH_MAX]; /* work_dir/attempt_<id> */
    char job_path[AG_PATH_MAX + 16];
    char rendezvous[300];
    uv_timer_t timer; /* preparation retries, stop grace, exit hold */
    uv_process_t proc;
    bool proc_started;
    ag_stream out, err, rep;
    FILE *log;
    int pid;
    int64_t started_ms;
    bool proc_exited;
    bool kill_sent;
    int exit_code, exit_signal;
    /* as reported */
    int phase;
    int64_t step, coll_seq, mem_bytes, mem_peak;
    double loss, tokens_per_s;
    int64_t logs_dropped; /* lines dropped since the last marker */
    zt_hang_wait wait;            /* the collective the rank waits in (stall report) */
    Zt__V1__CollectiveWait pb_wait; /* wait, as heartbeats carry it (points into wait) */
    char bad_ckpt[ZT_REPORTLINE_PATH_MAX], bad_ckpt_why[1024]; /* found bad on load */
    char exit_reason[1024]; /* why the agent did not start it */
    /* memory */
    int ckpt_pending; /* shard reports not yet settled */
    int handles;      /* open uv handles */
    int refs;         /* RPCs and queued reports that point here */
    bool gone;        /* forgotten: freed when handles == 0 && refs == 0 */
};

/* A worker for one DesiredWorker, linked into the agent, preparation started. NULL on
 * allocation failure (logged). */
ag_worker *ag_worker_new(zt_agent *a, const Zt__V1__DesiredWorker *d);
/* The worker is no longer desired: cancel its preparation, stop its process, or forget it. */
void ag_worker_undesired(ag_worker *w);
/* SIGTERM now, SIGKILL after the grace period (now when hard). */
void ag_worker_stop(ag_worker *w, bool hard);
/* Unlinks w and frees it once nothing refers to it. */
void ag_worker_forget(ag_worker *w);
void ag_worker_unref(ag_worker *w);
/* One of w's shard reports was recorded or given up: its exit may be reported now. */
void ag_worker_ckpt_settled(ag_worker *w);
/* Fills a WorkerStatus (strings none). */
void ag_worker_status(ag_worker *w, Zt__V1__WorkerStatus *s);
/* Resident and peak memory of a live process from /proc (bytes); false when unreadable. */
bool ag_proc_memory(int pid, int64_t *rss, int64_t *hwm);
const char *ag_wstate_name(ag_wstate s);

/* ---- worker_exec.c: what a worker runs with ------------------------------------------------ */

/* The worker's argv and environment (NULL-terminated, owned by the caller: ag_strv_free each).
 * False when out of memory, with nothing left to free. */
bool ag_worker_command(const ag_worker *w, char ***argv, char ***envp);
/* Frees a NULL-terminated vector of strings and the strings; NULL is a no-op. */
void ag_strv_free(char **v);

/* ---- reports.c: queues of metrics, shard reports and output lines -------------------------- */

typedef struct ag_log_entry {
    struct ag_log_entry *next;
    int64_t attempt_id, time_ms;
    int rank, source;
    size_t len;
    char text[];
} ag_log_entry;

typedef struct ag_step {
    struct ag_step *next;
    int64_t attempt_id, step, time_ms;
    int rank, n;
    zt_reportline_value values[];
} ag_step;

/* A shard report (ReportCheckpoint), or with removed set a removal report
 * (ReportCheckpointRemoved: dir was deleted by keep_checkpoints; file is NULL). */
typedef struct ag_ckpt {
    struct ag_ckpt *next;
    ag_worker *w; /* holds a ref and counts in w->ckpt_pending */
    int64_t attempt_id, step, bytes;
    int rank;
    uint32_t crc32c;
    bool removed;
    char *dir, *file;
    bool in_flight;
    int failures;
    uint64_t next_try_ns;
} ag_ckpt;

typedef struct ag_reports {
    ag_log_entry *log_head, *log_tail;
    size_t log_count, log_bytes;
    size_t log_in_flight; /* entries at the head being sent */
    int64_t logs_dropped, logs_sent;
    ag_step *step_head, *step_tail;
    size_t step_count, step_in_flight;
    int64_t steps_dropped, steps_sent;
    ag_ckpt *ckpts;
    size_t ckpt_count;
    int64_t ckpts_sent, ckpts_dropped;
    bool warned_logs, warned_steps;
} ag_reports;

/* A worker's output line (source 1 stdout, 2 stderr): queued for ReportLogs, or counted as
 * dropped when the queue is full. */
void ag_reports_log(zt_agent *a, ag_worker *w, int source, const char *text, size_t len);
/* Queues the marker line that says how many of w's lines were dropped (if any were). */
void ag_reports_log_drops(zt_agent *a, ag_worker *w);
/* A step line of w: queued for ReportMetrics. */
void ag_reports_step(zt_agent *a, ag_worker *w, const zt_reportline *r);
/* A durable shard of w: sent now (retried until it is recorded). */
void ag_reports_ckpt(zt_agent *a, ag_worker *w, const zt_reportline *r);
/* A checkpoint directory w deleted (keep_checkpoints): sent now, retried like a shard report
 * (and likewise held before w's exit is reported). */
void ag_reports_ckpt_removed(zt_agent *a, ag_worker *w, const zt_reportline *r);
/* Sends what is queued (one logs and one metrics call at a time) and retries shard reports
 * whose backoff ran out. */
void ag_reports_flush(zt_agent *a);
/* True when nothing is queued or in flight. */
bool ag_reports_idle(const zt_agent *a);
void ag_reports_free(zt_agent *a);

/* ---- agent.c --------------------------------------------------------------------------------- */

typedef enum { AG_UNREGISTERED = 0, AG_REGISTERING, AG_REGISTERED } ag_reg;

struct zt_agent {
    zt_agent_config cfg;
    uv_loop_t loop;
    uv_signal_t sigterm, sigint;
    uv_timer_t hb_timer, reg_timer, stop_timer;
    uv_async_t rpc_async;
    int handles; /* the agent's own open handles */
    /* rpc.c */
    zt_rpc_client *client;
    zt_rpc_cq *cq;
    pthread_t poller;
    bool poller_started;
    atomic_bool poller_stop;
    pthread_mutex_t cmu;
    ag_call *done_head, *done_tail;
    int calls_in_flight;
    /* registration and heartbeats */
    ag_reg reg;
    bool ever_registered;
    int64_t incarnation;
    /* the agent key RegisterAgent gave (every other agent call carries it), also
     * kept in work_dir/agent.key so that a restarted agent may take its name back at once */
    char agent_key[96];
    int hb_ms, hb_timeout_ms;
    int reg_failures;
    uint64_t reg_first_fail_ns, reg_last_warn_ns;
    bool hb_in_flight, hb_kick;
    int hb_failures;
    int rereg_count; /* re-registrations for a stale incarnation in the current minute */
    uint64_t rereg_window_ns;
    uint64_t hb_last_warn_ns, hb_last_ok_ns;
    int64_t hb_ok, hb_failed, desired_version;
    uint64_t rtt_ns[AG_RTT_RING];
    int64_t rtt_count;
    /* workers */
    ag_worker *workers;
    int omp_threads;
    /* reports */
    ag_reports rep;
    /* stopping */
    bool stopping, final_sent, final_hb_pending, closing;
    bool status_warned;
    int exit_code;
    int signals;
};

/* Schedules a heartbeat within delay_ms (sooner when one is due sooner already). */
void ag_heartbeat_soon(zt_agent *a, uint64_t delay_ms);
/* A worker reached EXITED or was forgotten: the agent may be done stopping. */
void ag_check_stopped(zt_agent *a);

#endif
