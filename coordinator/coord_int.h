/* zerotrain: what only coordinator/coord*.c may see — the live model and the two work
 * queues. Locking: `mu` guards the whole model (jobs, attempts, agents, watchers). The
 * state thread is the only writer of the store and the only thread that changes job and
 * attempt state; poller threads take `mu` briefly for heartbeats and views. Lock order:
 * mu, then a call's own lock inside zt_rpc (never the other way). */
#ifndef ZT_COORDINATOR_COORD_INT_H
#define ZT_COORDINATOR_COORD_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/hangdiag.h"
#include "coordinator/coord.h"
#include "coordinator/http.h"
#include "coordinator/model.h"
#include "coordinator/store.h"
#include "proto/health.pb-c.h"
#include "proto/rpc.h"
#include "proto/zerotrain.pb-c.h"

/* A worker as its agent last reported it (the fields of zt.v1.WorkerStatus). */
typedef struct c_report {
    int64_t job_id, attempt_id;
    int rank, pid, phase;
    int64_t step, collective_seq, memory_bytes, peak_memory_bytes;
    double tokens_per_s, loss;
    int exit_code, exit_signal, device_index;
    int64_t started_ms;
    zt_hang_wait wait;
    /* exits only: the checkpoint found bad on load, and why the agent did not start it */
    char bad_ckpt[1024], bad_ckpt_why[1024], exit_reason[1024];
} c_report;

typedef struct c_gpu {
    int index;
    char name[64];
    int64_t memory_total, memory_free;
} c_gpu;

struct c_attempt;

/* One rank of an active attempt placed on an agent. */
typedef struct c_place {
    struct c_attempt *att;
    int rank;
} c_place;

typedef struct c_agent {
    char *name, *hostname, *address, *version;
    int device, slots;
    c_gpu *gpus;
    int n_gpus;
    int64_t incarnation;
    zt_agent_state state; /* as stored */
    int64_t registered_ms, last_seen_ms;
    uint64_t last_seen_ns; /* monotonic */
    char key_sha[65];      /* hex SHA-256 of its agent key (auth.h); "" = none */
    c_report *reports;     /* last heartbeat's workers */
    int n_reports, cap_reports;
    c_report *exits; /* workers seen exiting, kept until the state thread saw them
                        (a later heartbeat may already omit them) */
    int n_exits, cap_exits;
    bool reports_changed; /* the state thread has not looked at them yet */
    bool revived;         /* a LOST agent heartbeats again */
    bool leaving;         /* its last heartbeat said it stops: LOST at once */
    bool desired_dirty;   /* rebuild the published desired set after this batch */
    uint8_t *desired;     /* packed HeartbeatReply, published after commit */
    size_t desired_len;
    int64_t desired_version;
    c_place *places; /* ranks of active attempts placed here */
    int n_places, cap_places;
    struct c_agent *hnext; /* hash chain */
} c_agent;

typedef struct c_rank {
    int rank, local_rank, slot, device_index;
    c_agent *agent;
    bool seen; /* the agent reported this worker alive */
    bool exited;
    int exit_code, exit_signal;
    int pid;
    int64_t step, seq; /* live */
    int phase;
    double loss, tokens_per_s;
    int64_t memory_bytes, peak_memory_bytes, started_ms;
    zt_hang_wait wait; /* live: the collective the rank waits in, if it reports one */
} c_rank;

typedef struct c_waiter {
    zt_rpc_call *call;
    int wait; /* zt.v1.RendezvousRequest.Wait */
    uint64_t until_ns;
    struct c_waiter *next;
} c_waiter;

typedef struct c_job c_job;

typedef struct c_attempt {
    int64_t id;
    c_job *job;
    int number;
    zt_attempt_state state;
    char *reason;
    int world_size;
    char *resume_path;
    int64_t resume_step;
    int64_t created_ms, started_ms, ended_ms;
    c_rank *ranks; /* [world_size] */
    /* rendezvous entries by rank */
    uint8_t **rdzv;
    size_t *rdzv_len;
    bool rdzv_changed;
    c_waiter *waiters;
    int n_waiters;
    /* progress (hang detection, ETA) */
    int64_t progress_sig;
    uint64_t progress_ns;
    int64_t eta_step0;
    uint64_t eta_ns0;
    struct c_attempt *hnext; /* chain of the active-attempt hash */
} c_attempt;

/* A state change waiting for the commit that makes it visible to watchers. */
typedef struct c_event {
    zt_event_rec rec; /* strings owned */
    struct c_event *next;
} c_event;

typedef struct c_watcher {
    zt_rpc_call *call;
    struct c_watcher *next;
} c_watcher;

struct c_job {
    int64_t id;
    char *name, *user, *spec_json, *spec_hash, *spec_dir, *reason;
    zt_job_state state;
    int priority, ranks, ranks_per_node, device, max_restarts, restarts;
    int64_t total_steps, last_step, submitted_ms, started_ms, ended_ms, attempt_id;
    int64_t metrics_stride, metrics_count, log_count;
    c_attempt *att;       /* the active attempt (STARTING/RUNNING), NULL otherwise */
    uint64_t eligible_ns; /* restart backoff: not placed before this (monotonic) */
    int64_t eligible_ms;  /* the same in wall-clock ms, as stored (survives a restart) */
    char pending[256];    /* QUEUED: why it is not placed */
    /* live progress */
    int64_t step;
    double loss, tokens_per_s, eta_s;
    int64_t metrics_step;
    char *metrics_kv; /* rank 0's latest metrics */
    bool progress_dirty, metrics_dirty;
    int64_t notified_step;
    /* state changes of this batch, for watchers */
    c_event *events, *events_tail;
    c_watcher *watchers;
    int n_watchers;
    zt_job_state pub_state; /* the last state watchers were told (committed) */
    uint64_t sse_all_ns;    /* when the job-list event stream last heard of its progress */
    bool done;              /* terminal: removed from memory after the commit */
};

/* One unit of work for the state thread (embedded first in bigger structs). run() executes
 * inside the batch transaction with mu held; done() runs after the commit (committed =
 * false when the batch was rolled back) without mu, answers the call and frees the op. */
typedef struct c_op c_op;
struct c_op {
    c_op *next;
    void (*run)(zt_coord *c, c_op *op);
    void (*done)(zt_coord *c, c_op *op, bool committed);
    zt_rpc_call *call;
};

/* A read for the reader thread (its own read-only store handle), embedded likewise. */
typedef struct c_task c_task;
struct c_task {
    c_task *next;
    void (*run)(zt_coord *c, c_task *t, zt_store *rs);
    zt_rpc_call *call;
};

/* Calls of one RPC method (counted by the handler skeleton in rpc.c, for /metrics). */
#define COORD_HIST_BUCKETS 11

/* A latency histogram written by any thread and read by /metrics (relaxed atomics). */
typedef struct c_hist {
    atomic_uint_fast64_t buckets[COORD_HIST_BUCKETS]; /* cumulative counts are summed on read */
    atomic_uint_fast64_t count, sum_ns;
} c_hist;

struct c_rpc_desc;

typedef struct c_rpc_stat {
    const char *path;
    const struct c_rpc_desc *desc; /* the method (rpc_int.h) */
    zt_coord *coord;
    atomic_uint_fast64_t calls;
    c_hist latency; /* arrival to answer */
} c_rpc_stat;

#define COORD_MAX_METHODS 32

/* Upper bounds of c_hist's buckets in seconds (the last is +Inf). */
extern const double coord_hist_bounds[COORD_HIST_BUCKETS - 1];
void coord_hist_observe(c_hist *h, uint64_t ns);

/* A log line waiting for the commit before it goes to the job's event streams. */
typedef struct c_sse_line {
    int64_t job_id;
    char *json;
} c_sse_line;

#define COORD_HTTP_STORES 8

struct zt_coord {
    zt_coord_config cfg;
    zt_store *store; /* the writer: state thread (and open/close) only */
    pthread_mutex_t mu;

    /* ---- model (mu) ---- */
    c_job **jobs; /* live jobs, by id */
    size_t n_jobs, cap_jobs;
    c_attempt **atts; /* active attempts */
    size_t n_atts, cap_atts;
    c_attempt **att_hash; /* active attempts by id */
    size_t att_buckets;
    c_agent **agent_hash;
    size_t agent_buckets;
    c_agent **agents; /* by registration */
    size_t n_agents, cap_agents;
    int64_t desired_seq;
    bool sched_dirty;
    c_attempt **grave; /* attempts that ended in this batch (freed after publishing) */
    size_t n_grave, cap_grave;
    c_watcher *health_watchers;
    int n_watchers; /* WatchJob and Health.Watch streams open */
    int n_waiters;  /* Rendezvous calls waiting */

    /* ---- the current batch (state thread) ---- */
    bool batch_failed;
    zt_err batch_err;

    /* ---- state thread queue (qmu) ---- */
    pthread_t state_thread;
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    c_op *q_head, *q_tail;
    bool reports_pending;
    bool stop;

    /* ---- reader thread (rmu) ---- */
    pthread_t reader_thread;
    pthread_mutex_t rmu;
    pthread_cond_t rcv;
    c_task *r_head, *r_tail;
    bool rstop;
    zt_store *rstore;

    /* ---- log streams ---- */
    pthread_mutex_t lmu;
    pthread_cond_t lcv; /* broadcast after a commit that added log lines */
    int log_streams;
    int64_t log_seq;

    atomic_bool serving;
    uint64_t started_ns;

    /* ---- HTTP (api.c) ---- */
    zt_http *http;         /* mu: event streams fed after each commit; NULL = none */
    c_sse_line *sse_lines; /* mu: log lines of this batch for the streams */
    size_t n_sse_lines, cap_sse_lines;
    pthread_mutex_t hsmu; /* guards hstores: read-only handles of HTTP readers */
    zt_store *hstores[COORD_HTTP_STORES];
    int n_hstores;
    c_rpc_stat rpc_stats[COORD_MAX_METHODS];
    size_t n_rpc_stats;
    c_hist commit_hist; /* SQLite commit latency (state thread) */
};

/* ---- coord.c: the state thread ---- */
void coord_enqueue(zt_coord *c, c_op *op);
void coord_enqueue_read(zt_coord *c, c_task *t);
void coord_wake_reports(zt_coord *c);

/* ---- coord_model.c: the live model (mu held; changes inside the batch) ---- */
c_job *coord_job_find(zt_coord *c, int64_t id);
c_agent *coord_agent_find(zt_coord *c, const char *name);
c_attempt *coord_attempt_find(zt_coord *c, int64_t id);
/* Records a failed store call of the current batch (the batch will be rolled back). */
void coord_db_failed(zt_coord *c, const zt_err *err);
int64_t coord_now_ms(void);
/* A copy for the model ("" for NULL) with bytes that are not UTF-8 replaced; NULL when out of
 * memory. coord_set_str replaces *dst by such a copy, keeping the old text when out of memory. */
char *coord_dup_clean(const char *s);
void coord_set_str(char **dst, const char *s);

/* How the job of a failed attempt goes on (coord_attempt_end). */
typedef enum {
    COORD_RETRY_NONE,     /* the job fails */
    COORD_RETRY_COUNTED,  /* a restart counted against max_restarts, after the backoff */
    COORD_RETRY_FALLBACK, /* at once, from an older checkpoint: the one resumed from became BAD
                             (coord_batch.c's resume_failed says why max_restarts does not
                             count it) */
} c_retry;

/* Transitions (state thread, mu held, inside the batch). */
void coord_job_event(zt_coord *c, c_job *j, int64_t attempt_id, const char *agent, const char *kind,
                     const char *from, const char *to, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));
void coord_job_set_state(zt_coord *c, c_job *j, zt_job_state to, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void coord_attempt_set_state(zt_coord *c, c_attempt *a, zt_attempt_state to, const char *reason);
/* Ends active attempt a (it moves to the grave until the publish step) and moves its job on. */
void coord_attempt_end(zt_coord *c, c_attempt *a, zt_attempt_state to, c_retry retry,
                       const char *reason);
void coord_save_job(zt_coord *c, c_job *j);
void coord_rank_save(zt_coord *c, c_attempt *a, c_rank *rk);
c_job *coord_job_from_rec(const zt_job_rec *r);
void coord_job_add(zt_coord *c, c_job *j);
void coord_job_events_free(c_job *j);
void coord_job_free(c_job *j);
void coord_attempt_free(c_attempt *a);
/* Makes a active: listed, hashed by id, and indexed on the agents of its ranks. */
bool coord_atts_add(zt_coord *c, c_attempt *a);
void coord_agent_mark_dirty(zt_coord *c, c_agent *a);
c_agent *coord_agent_new(zt_coord *c, const char *name);
void coord_agent_remove(zt_coord *c, c_agent *a);
void coord_agent_save(zt_coord *c, c_agent *a);
void coord_agent_event(zt_coord *c, c_agent *a, const char *from, const char *to,
                       const char *reason);
/* Marks busy[s] for each of a's slots in use (busy has a->slots entries). */
void coord_agent_busy_map(zt_coord *c, c_agent *a, bool *busy);
int coord_agent_free_slots(zt_coord *c, c_agent *a);

/* ---- coord_batch.c: the rest of a batch (state thread, mu held) ---- */
void coord_agent_reports(zt_coord *c, c_agent *a);
void coord_tick(zt_coord *c);
void coord_schedule(zt_coord *c);

/* ---- coord_publish.c: after the commit (mu held) ---- */
void coord_publish(zt_coord *c);
void coord_agent_build_desired(zt_coord *c, c_agent *a);
/* Ends j's watch streams (code, msg) / fails a's waiting rendezvous calls (UNAVAILABLE, msg). */
void coord_end_watchers(zt_coord *c, c_job *j, zt_rpc_code code, const char *msg);
void coord_fail_waiters(zt_coord *c, c_attempt *a, const char *msg);
/* Views (mu held): fill wire messages whose strings point into the model. */
void coord_job_to_pb(const c_job *j, Zt__V1__Job *out);
void coord_rec_to_pb(const zt_job_rec *r, Zt__V1__Job *out);
/* Sends u to j's watchers, dropping watchers that are gone or too slow. */
void coord_watchers_send(zt_coord *c, c_job *j, const Zt__V1__JobUpdate *u, bool final);
/* Whether a's entries satisfy a rendezvous call's wait (zt.v1.RendezvousRequest.Wait). */
bool coord_rdzv_complete(const c_attempt *a, int wait);
/* a's RendezvousReply, packed (zt_free it); NULL when out of memory. */
uint8_t *coord_rdzv_pack(const c_attempt *a, bool complete, size_t *len);
/* Answers call with a's RendezvousReply. */
void coord_rdzv_reply(c_attempt *a, zt_rpc_call *call, bool complete);

/* ---- coord_recover.c: the model from the store (mu held) ---- */
/* Loads agents and the live jobs with their active attempts. */
zt_status coord_model_load(zt_coord *c, zt_err *err);
/* After a failed commit: memory follows the database again. */
void coord_model_reload(zt_coord *c);
/* Drops jobs and attempts from memory (watchers and waiters are told msg). */
void coord_model_drop_jobs(zt_coord *c, const char *msg);

/* ---- rpc.c, rpc_user.c, rpc_agent.c: the RPC methods ---- */
size_t coord_rpc_methods(zt_coord *c, zt_rpc_method *m, size_t cap);

/* Cancels job id (state thread, mu held, inside the batch). ZT_RPC_OK: canceled (or the batch
 * failed: c->batch_failed); otherwise NOT_FOUND or FAILED_PRECONDITION with msg. */
zt_rpc_code coord_job_cancel(zt_coord *c, int64_t id, const char *why, char *msg, size_t cap);

/* ---- api.c: what the HTTP event streams hear (mu held; nothing when c->http is NULL) ---- */
/* A log line written in this batch. */
void coord_api_log(zt_coord *c, const zt_log_rec *r);
/* After the commit, before j's changes are cleared: j's update to the streams. */
void coord_api_publish_job(zt_coord *c, c_job *j);
/* After the commit (or the rollback): sends (or drops) the batch's log lines. */
void coord_api_batch_end(zt_coord *c, bool committed);
/* Closes the HTTP readers' store handles (zt_coord_close). */
void coord_api_close(zt_coord *c);

/* ---- coord_read.c ---- */
void *coord_reader_main(void *arg);
/* Reads handed to the reader thread; each answers call. */
void coord_read_get_job(zt_coord *c, zt_rpc_call *call, int64_t id);
void coord_read_list_jobs(zt_coord *c, zt_rpc_call *call, const Zt__V1__ListJobsRequest *q);
void coord_read_metrics(zt_coord *c, zt_rpc_call *call, const Zt__V1__GetMetricsRequest *q);
void coord_read_ckpts(zt_coord *c, zt_rpc_call *call, const Zt__V1__ListCheckpointsRequest *q);
void coord_logs_start(zt_coord *c, zt_rpc_call *call, const Zt__V1__GetLogsRequest *q);
void coord_logs_wake(zt_coord *c);
void coord_logs_stop(zt_coord *c);

#endif
