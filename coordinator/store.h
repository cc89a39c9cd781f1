/* zerotrain: the coordinator's SQLite store — jobs, attempts, ranks, agents, events, logs,
 * metrics, checkpoints and their shards, rendezvous entries. WAL mode, synchronous=FULL,
 * foreign keys on, versioned migrations, prepared statements only. One handle is used by
 * one thread at a time: zcoord has one writer handle (the state thread) and read-only
 * handles for queries. Errors are ZT_ERR_DB with sqlite's message, or ZT_ERR_NOT_FOUND. */
#ifndef ZT_COORDINATOR_STORE_H
#define ZT_COORDINATOR_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "coordinator/model.h"

typedef struct zt_store zt_store;

/* The schema version this build migrates to. */
#define ZT_STORE_SCHEMA_VERSION 5

/* Opens (creating if needed) the database at path. A writer handle applies the pending
 * migrations in order, each in its own transaction; a database with a newer schema than
 * this build knows is refused (ZT_ERR_STATE, the message says to upgrade zcoord). A
 * read-only handle needs an existing, migrated database. */
zt_status zt_store_open(zt_store **out, const char *path, bool readonly, zt_err *err);
/* NULL is a no-op. */
void zt_store_close(zt_store *s);
/* PRAGMA user_version of the open database. */
int zt_store_schema_version(zt_store *s);
/* Test hook: open path and migrate only up to `version` (to test later migrations). */
zt_status zt_store_open_at_version(zt_store **out, const char *path, int version, zt_err *err);

/* Transactions: begin/commit (the commit is the fsync point), rollback; savepoints nest
 * inside a transaction so one failed operation of a batch leaves the others. */
zt_status zt_store_begin(zt_store *s, zt_err *err);
zt_status zt_store_commit(zt_store *s, zt_err *err);
void zt_store_rollback(zt_store *s);
zt_status zt_store_savepoint(zt_store *s, zt_err *err);
void zt_store_release(zt_store *s);
void zt_store_rollback_savepoint(zt_store *s);

/* ---- writes ---------------------------------------------------------------------------- */

/* Inserts a job (rec->id ignored; rec->checkpoint_dir is stored as given). When
 * rec->submit_key names an existing job, inserts nothing and sets *existed and *id to that
 * job. */
zt_status zt_store_job_insert(zt_store *s, const zt_job_rec *rec, int64_t *id, bool *existed,
                              zt_err *err);
/* Updates the mutable columns of job rec->id (state, reason, restarts, last_step, times,
 * attempt_id, metrics_stride, eligible_ms). */
zt_status zt_store_job_save(zt_store *s, const zt_job_rec *rec, zt_err *err);
zt_status zt_store_attempt_insert(zt_store *s, const zt_attempt_rec *rec, int64_t *id, zt_err *err);
zt_status zt_store_attempt_save(zt_store *s, const zt_attempt_rec *rec, zt_err *err);
/* Inserts or replaces the rank row (attempt_id, rank). */
zt_status zt_store_rank_save(zt_store *s, const zt_rank_rec *rec, zt_err *err);
/* Inserts or replaces the agent row (by name). */
zt_status zt_store_agent_save(zt_store *s, const zt_agent_rec *rec, zt_err *err);
zt_status zt_store_event_add(zt_store *s, const zt_event_rec *rec, int64_t *id, zt_err *err);
zt_status zt_store_log_add(zt_store *s, const zt_log_rec *rec, int64_t *id, zt_err *err);
/* Deletes the oldest log lines of a job so that at most keep remain. */
zt_status zt_store_logs_prune(zt_store *s, int64_t job_id, int64_t keep, zt_err *err);
/* Inserts or replaces the metrics of (job, step); *added (optional): a new row was inserted
 * (false when an existing step was replaced, as a resumed attempt re-reports steps). */
zt_status zt_store_metric_add(zt_store *s, const zt_metric_rec *rec, bool *added, zt_err *err);
/* Keeps only the steps divisible by stride (downsampling a long job's metrics). */
zt_status zt_store_metrics_thin(zt_store *s, int64_t job_id, int64_t stride, zt_err *err);
/* Records one rank's shard of the checkpoint (job, dir), creating the checkpoint row, and
 * when every rank of world_size has a shard marks it COMMITTED — all in the caller's
 * transaction. Re-reporting a shard replaces it. Outputs: checkpoint id, shards recorded,
 * whether this call committed it. */
zt_status zt_store_ckpt_shard_add(zt_store *s, int64_t job_id, int64_t attempt_id, int64_t step,
                                  const char *dir, int world_size, const zt_shard_rec *shard,
                                  int64_t now_ms, int64_t *ckpt_id, int *shards, bool *committed,
                                  zt_err *err);
/* Marks the checkpoint (job, dir) DELETED (its directory was removed) with deleted_ms =
 * now_ms; one the store has no row for is inserted as DELETED (attempt_id, step,
 * world_size), so that late shard reports of that attempt cannot make it usable again (a
 * later attempt that rewrites the directory resets it to PARTIAL as usual). Outputs: the
 * checkpoint id and its state before the call (0 when it was unknown; DELETED: nothing
 * changed). */
zt_status zt_store_ckpt_remove(zt_store *s, int64_t job_id, int64_t attempt_id, int64_t step,
                               const char *dir, int world_size, int64_t now_ms, int64_t *ckpt_id,
                               zt_ckpt_state *before, zt_err *err);
/* Marks the PARTIAL or COMMITTED checkpoint (job, dir) BAD with the worker's reason (it
 * failed verification on load): it is listed, never resumed from again, and a later attempt
 * that rewrites the directory makes it PARTIAL again as usual. Outputs: the checkpoint id
 * and step (0 when the store has no such checkpoint) and its state before the call (0:
 * unknown; BAD or DELETED: nothing changed). In the caller's transaction. */
zt_status zt_store_ckpt_mark_bad(zt_store *s, int64_t job_id, const char *dir, const char *reason,
                                 int64_t *ckpt_id, int64_t *step, zt_ckpt_state *before,
                                 zt_err *err);
/* Marks the PARTIAL checkpoint ckpt_id COMMITTED with committed_ms = now_ms, whatever its
 * shard count (the caller has seen the checkpoint complete on disk); *changed (optional): it
 * was PARTIAL. */
zt_status zt_store_ckpt_commit(zt_store *s, int64_t ckpt_id, int64_t now_ms, bool *changed,
                               zt_err *err);
/* Replaces rank's rendezvous entry for an attempt. */
zt_status zt_store_rdzv_put(zt_store *s, int64_t attempt_id, int rank, const void *value,
                            size_t len, zt_err *err);

/* ---- reads ----------------------------------------------------------------------------- */

typedef void (*zt_store_job_fn)(void *arg, const zt_job_rec *rec);
typedef void (*zt_store_attempt_fn)(void *arg, const zt_attempt_rec *rec);
typedef void (*zt_store_rank_fn)(void *arg, const zt_rank_rec *rec);
typedef void (*zt_store_agent_fn)(void *arg, const zt_agent_rec *rec);
typedef void (*zt_store_event_fn)(void *arg, const zt_event_rec *rec);
typedef void (*zt_store_log_fn)(void *arg, const zt_log_rec *rec);
typedef void (*zt_store_metric_fn)(void *arg, const zt_metric_rec *rec);
typedef void (*zt_store_ckpt_fn)(void *arg, const zt_ckpt_rec *rec);
typedef void (*zt_store_shard_fn)(void *arg, const zt_shard_rec *rec);
typedef void (*zt_store_rdzv_fn)(void *arg, int rank, const void *value, size_t len);

/* One job; ZT_ERR_NOT_FOUND when there is none. */
zt_status zt_store_job_get(zt_store *s, int64_t id, zt_store_job_fn fn, void *arg, zt_err *err);
/* The job whose submit_key is submit_key: *id, or 0 when there is none (or the key is ""). */
zt_status zt_store_job_find_key(zt_store *s, const char *submit_key, int64_t *id, zt_err *err);
/* The newest job (any state) whose checkpoint_dir is exactly dir: the one the directory
 * belongs to. spec_text/spec_json are not read (NULL). ZT_ERR_NOT_FOUND when there is none. */
zt_status zt_store_job_by_ckpt_dir(zt_store *s, const char *dir, zt_store_job_fn fn, void *arg,
                                   zt_err *err);
/* Jobs newest first, with id < before_id (0 = no bound), whose state bit (1 << state) is in
 * state_mask (0 = all), at most limit. spec_text/spec_json are not read (NULL). */
zt_status zt_store_jobs_list(zt_store *s, unsigned state_mask, int64_t before_id, int limit,
                             zt_store_job_fn fn, void *arg, zt_err *err);
/* Jobs not in a terminal state, oldest first, with every column (recovery). */
zt_status zt_store_jobs_active(zt_store *s, zt_store_job_fn fn, void *arg, zt_err *err);
zt_status zt_store_attempt_get(zt_store *s, int64_t id, zt_store_attempt_fn fn, void *arg,
                               zt_err *err);
/* A job's attempts, oldest first. */
zt_status zt_store_attempts_list(zt_store *s, int64_t job_id, zt_store_attempt_fn fn, void *arg,
                                 zt_err *err);
zt_status zt_store_ranks_list(zt_store *s, int64_t attempt_id, zt_store_rank_fn fn, void *arg,
                              zt_err *err);
zt_status zt_store_agents_list(zt_store *s, zt_store_agent_fn fn, void *arg, zt_err *err);
/* The last `limit` events of a job, oldest first (limit <= 0: all). */
zt_status zt_store_events_list(zt_store *s, int64_t job_id, int limit, zt_store_event_fn fn,
                               void *arg, zt_err *err);
/* A job's log entries with id > after_id, oldest first, at most limit; tail > 0 keeps only
 * the newest `tail` matching entries. ranks_json: a JSON array of ranks to keep (NULL = all;
 * events always pass unless no_events). */
zt_status zt_store_logs_list(zt_store *s, int64_t job_id, int64_t after_id, int limit, int tail,
                             const char *ranks_json, bool no_events, zt_store_log_fn fn, void *arg,
                             zt_err *err);
/* counts[state] = the number of jobs in that state (zt_job_state; [0] unused). */
zt_status zt_store_job_state_counts(zt_store *s, int64_t counts[8], zt_err *err);
zt_status zt_store_logs_count(zt_store *s, int64_t job_id, int64_t *count, zt_err *err);
/* A job's metric rows with step >= from_step, by step. */
zt_status zt_store_metrics_list(zt_store *s, int64_t job_id, int64_t from_step,
                                zt_store_metric_fn fn, void *arg, zt_err *err);
zt_status zt_store_metrics_count(zt_store *s, int64_t job_id, int64_t *count, zt_err *err);
/* A job's checkpoints, newest step first: the COMMITTED and BAD ones, plus the PARTIAL and
 * DELETED ones when asked for. */
zt_status zt_store_ckpts_list(zt_store *s, int64_t job_id, bool include_partial,
                              bool include_deleted, zt_store_ckpt_fn fn, void *arg, zt_err *err);
zt_status zt_store_shards_list(zt_store *s, int64_t ckpt_id, zt_store_shard_fn fn, void *arg,
                               zt_err *err);
/* The newest COMMITTED checkpoint of a job (DELETED ones never count); ZT_ERR_NOT_FOUND when
 * there is none. */
zt_status zt_store_ckpt_latest(zt_store *s, int64_t job_id, zt_store_ckpt_fn fn, void *arg,
                               zt_err *err);
zt_status zt_store_ckpt_count(zt_store *s, int64_t job_id, int *committed, zt_err *err);
zt_status zt_store_rdzv_list(zt_store *s, int64_t attempt_id, zt_store_rdzv_fn fn, void *arg,
                             zt_err *err);

/* ---- one coordinator per database --------------------------------------------------------- */

/* Two coordinators on one database would each schedule its jobs and fight over its rows; the
 * lock makes the second one stop at start-up and name the first. */
typedef struct zt_store_lock zt_store_lock;

/* Takes the exclusive lock of the database at db_path for this process: flock(LOCK_EX |
 * LOCK_NB) on the sidecar file "<db_path>.lock" (created 0644 when missing), which then holds
 * "pid=<pid>" until zt_store_lock_describe adds the addresses. The kernel drops the lock when
 * the process dies, so a lock file left behind by a dead coordinator never blocks. Take it
 * before zt_store_open, so that migrations never run twice at once.
 * Errors: ZT_ERR_EXISTS when another process holds it (the message names the database, the
 * holder's pid and addresses as it recorded them, and what to do), ZT_ERR_IO (the lock file
 * cannot be created or locked), ZT_ERR_NOMEM. Not for several threads on one handle. */
zt_status zt_store_lock_acquire(zt_store_lock **out, const char *db_path, zt_err *err);
/* Records who holds the lock: the file becomes "pid=<pid> grpc=<grpc> http=<http>\n",
 * fsync'd, for the message a second coordinator prints. Errors: ZT_ERR_IO. */
zt_status zt_store_lock_describe(zt_store_lock *l, const char *grpc, const char *http, zt_err *err);
/* Empties the lock file and releases the lock (the file stays: removing it would let two
 * processes lock two different files of one name). NULL is a no-op. */
void zt_store_lock_release(zt_store_lock *l);

#endif
