/* zerotrain: the coordinator core behind zcoord's RPC API — the live model of jobs, attempts
 * and agents (in memory, guarded), the state thread that writes every transition to the
 * store (group commit) before any agent or watcher hears of it, the scheduler glue, failure
 * detection (worker exit, lost agent, hang) and restarts, and the RPC handlers. */
#ifndef ZT_COORDINATOR_COORD_H
#define ZT_COORDINATOR_COORD_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "proto/rpc.h"

typedef struct zt_coord zt_coord;

typedef struct zt_coord_config {
    const char *db_path;
    int64_t heartbeat_interval_ms;  /* told to agents; default 1000 */
    int64_t heartbeat_timeout_ms;   /* silence that marks an agent LOST; default 10000 */
    int64_t hang_timeout_ms;        /* no step progress that fails an attempt; default 600000 */
    int64_t restart_backoff_ms;     /* first restart delay, doubled per restart; default 2000 */
    int64_t restart_backoff_max_ms; /* default 300000 */
    int64_t tick_ms;                /* timer resolution of the state thread; default 100 */
    int metrics_max_points;         /* stored metric rows per job before thinning; default 2000 */
    int64_t logs_max_lines;         /* stored log lines per job (oldest dropped); default 100000 */
    int max_log_streams;            /* concurrent GetLogs streams; default 64 */
    int max_watchers;               /* open WatchJob + Health.Watch streams; default 1024 */
    int max_watchers_per_job;       /* open WatchJob streams of one job; default 64 */
    int max_rdzv_waiters;           /* Rendezvous calls waiting at once; default 16384 */
    int max_rdzv_waiters_per_rank;  /* of one attempt: this times its world size; default 2 */
    const char *version;            /* reported by Ping */
    struct zt_auth *auth;           /* credentials (coordinator/auth.h); owned by the caller,
                                       outlives the coordinator; NULL = no tokens */
    int test_commit_delay_ms;       /* tests only: sleep before each commit (widens the window
                                       between a change and its publication); 0 = none */
} zt_coord_config;

/* Opens the store (migrating it), loads the jobs, attempts and agents that were live when
 * the coordinator last stopped (agents get one heartbeat timeout to come back), and starts
 * the state and reader threads. Errors from the store (ZT_ERR_IO, ZT_ERR_DB, ZT_ERR_STATE)
 * carry a message naming the database. */
zt_status zt_coord_open(zt_coord **out, const zt_coord_config *cfg, zt_err *err);

/* Fills methods[] (capacity cap) with the RPC table (zt.v1.Coordinator, zt.v1.AgentControl,
 * grpc.health.v1.Health) bound to c; returns the number of methods. */
size_t zt_coord_methods(zt_coord *c, zt_rpc_method *methods, size_t cap);

/* Shutdown, in this order around the RPC server:
 *   zt_coord_stop_serving(c);     health turns NOT_SERVING; WatchJob, GetLogs and health
 *                                 streams end; new work is answered UNAVAILABLE
 *   zt_rpc_server_shutdown(s, grace);
 *   zt_coord_drain(c);            answers what is queued, stops the threads
 *   zt_rpc_server_destroy(s);     (every call answered and released by now)
 *   zt_coord_close(c);            closes the store, frees everything
 * Each is idempotent; zt_coord_close alone does all of its part (NULL is a no-op). */
void zt_coord_stop_serving(zt_coord *c);
void zt_coord_drain(zt_coord *c);
void zt_coord_close(zt_coord *c);

#endif
