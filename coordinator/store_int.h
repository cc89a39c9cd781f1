/* zerotrain: what only coordinator/store*.c see — the statements every store handle prepares
 * once, the handle itself, and the helpers that bind records to statements and read them back
 * from result rows through tables of columns. */
#ifndef ZT_COORDINATOR_STORE_INT_H
#define ZT_COORDINATOR_STORE_INT_H

#include <sqlite3.h>
#include <stddef.h>

#include "coordinator/store.h"

/* ---- statements (their SQL is compiled in store.c) ---- */

#define JOB_COLS                                                                                   \
    "id, submit_key, name, state, reason, priority, ranks, ranks_per_node, device, "              \
    "max_restarts, restarts, total_steps, last_step, spec_text, spec_dir, spec_json, spec_hash, "  \
    "user, submitted_ms, started_ms, ended_ms, attempt_id, metrics_stride, eligible_ms, "          \
    "checkpoint_dir"
#define JOB_COLS_LIGHT                                                                             \
    "id, submit_key, name, state, reason, priority, ranks, ranks_per_node, device, "              \
    "max_restarts, restarts, total_steps, last_step, NULL, spec_dir, NULL, spec_hash, "            \
    "user, submitted_ms, started_ms, ended_ms, attempt_id, metrics_stride, eligible_ms, "          \
    "checkpoint_dir"
#define ATTEMPT_COLS                                                                               \
    "id, job_id, number, state, reason, world_size, resume_path, resume_step, created_ms, "        \
    "started_ms, ended_ms"
#define CKPT_COLS                                                                                  \
    "c.id, c.job_id, c.attempt_id, c.step, c.path, c.state, c.world_size, "                        \
    "(SELECT COUNT(*) FROM checkpoint_shards s WHERE s.checkpoint_id = c.id), "                    \
    "(SELECT COALESCE(SUM(bytes), 0) FROM checkpoint_shards s WHERE s.checkpoint_id = c.id), "     \
    "c.created_ms, c.committed_ms, c.deleted_ms, c.bad_reason"

#define STMT_LIST(X)                                                                               \
    X(BEGIN, "BEGIN IMMEDIATE")                                                                    \
    X(COMMIT, "COMMIT")                                                                            \
    X(ROLLBACK, "ROLLBACK")                                                                        \
    X(SAVEPOINT, "SAVEPOINT op")                                                                   \
    X(RELEASE, "RELEASE op")                                                                       \
    X(ROLLBACK_TO, "ROLLBACK TO op")                                                               \
    X(JOB_BY_KEY, "SELECT id FROM jobs WHERE submit_key = ?1")                                     \
    X(JOB_INSERT,                                                                                  \
      "INSERT INTO jobs(submit_key, name, state, reason, priority, ranks, ranks_per_node, "        \
      "device, max_restarts, restarts, total_steps, last_step, spec_text, spec_dir, spec_json, "   \
      "spec_hash, user, submitted_ms, started_ms, ended_ms, attempt_id, metrics_stride, "          \
      "checkpoint_dir) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, "  \
      "?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23)")                                                   \
    X(JOB_SAVE,                                                                                    \
      "UPDATE jobs SET state = ?2, reason = ?3, restarts = ?4, last_step = ?5, started_ms = ?6, "   \
      "ended_ms = ?7, attempt_id = ?8, metrics_stride = ?9, eligible_ms = ?10 WHERE id = ?1")      \
    X(JOB_GET, "SELECT " JOB_COLS " FROM jobs WHERE id = ?1")                                      \
    X(JOB_BY_CKPT_DIR,                                                                             \
      "SELECT " JOB_COLS_LIGHT " FROM jobs WHERE checkpoint_dir = ?1 ORDER BY id DESC LIMIT 1")     \
    X(JOBS_LIST,                                                                                   \
      "SELECT " JOB_COLS_LIGHT " FROM jobs WHERE (?1 = 0 OR id < ?1) AND (?2 = 0 OR "              \
      "((?2 >> (CASE state WHEN 'QUEUED' THEN 1 WHEN 'SCHEDULED' THEN 2 WHEN 'RUNNING' THEN 3 "    \
      "WHEN 'COMPLETED' THEN 4 WHEN 'FAILED' THEN 5 ELSE 6 END)) & 1) = 1) "                       \
      "ORDER BY id DESC LIMIT ?3")                                                                 \
    X(JOBS_ACTIVE,                                                                                 \
      "SELECT " JOB_COLS " FROM jobs WHERE state IN ('QUEUED','SCHEDULED','RUNNING') ORDER BY id") \
    X(ATTEMPT_INSERT,                                                                              \
      "INSERT INTO attempts(job_id, number, state, reason, world_size, resume_path, resume_step, " \
      "created_ms, started_ms, ended_ms) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)")         \
    X(ATTEMPT_SAVE,                                                                                \
      "UPDATE attempts SET state = ?2, reason = ?3, started_ms = ?4, ended_ms = ?5 WHERE id = ?1") \
    X(ATTEMPT_GET, "SELECT " ATTEMPT_COLS " FROM attempts WHERE id = ?1")                          \
    X(ATTEMPTS_LIST, "SELECT " ATTEMPT_COLS " FROM attempts WHERE job_id = ?1 ORDER BY number")    \
    X(RANK_SAVE,                                                                                   \
      "INSERT OR REPLACE INTO ranks(attempt_id, rank, agent, local_rank, device_index, pid, "      \
      "exited, exit_code, exit_signal, last_step) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)") \
    X(RANKS_LIST,                                                                                  \
      "SELECT attempt_id, rank, agent, local_rank, device_index, pid, exited, exit_code, "         \
      "exit_signal, last_step FROM ranks WHERE attempt_id = ?1 ORDER BY rank")                     \
    X(AGENT_SAVE,                                                                                  \
      "INSERT OR REPLACE INTO agents(name, hostname, address, version, device, slots, gpus, "      \
      "incarnation, state, registered_ms, last_seen_ms, key_sha256) VALUES(?1, ?2, ?3, ?4, "   \
      "?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)")                                                        \
    X(AGENTS_LIST,                                                                                 \
      "SELECT name, hostname, address, version, device, slots, gpus, incarnation, state, "         \
      "registered_ms, last_seen_ms, key_sha256 FROM agents ORDER BY name")                     \
    X(EVENT_ADD,                                                                                   \
      "INSERT INTO events(time_ms, job_id, attempt_id, agent, kind, from_state, to_state, reason) " \
      "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)")                                                    \
    X(EVENTS_LIST,                                                                                 \
      "SELECT id, time_ms, job_id, attempt_id, agent, kind, from_state, to_state, reason FROM "    \
      "(SELECT * FROM events WHERE job_id = ?1 ORDER BY id DESC LIMIT ?2) ORDER BY id")            \
    X(LOG_ADD,                                                                                     \
      "INSERT INTO logs(job_id, attempt_id, rank, source, time_ms, text) VALUES(?1, ?2, ?3, ?4, "  \
      "?5, ?6)")                                                                                   \
    X(LOGS_PRUNE,                                                                                  \
      "DELETE FROM logs WHERE job_id = ?1 AND id <= (SELECT id FROM logs WHERE job_id = ?1 ORDER " \
      "BY id DESC LIMIT 1 OFFSET ?2)")                                                             \
    X(LOGS_LIST,                                                                                   \
      "SELECT id, time_ms, job_id, attempt_id, rank, source, text FROM (SELECT * FROM logs WHERE " \
      "job_id = ?1 AND id > ?2 AND (?4 = 0 OR source != 3) AND (?3 IS NULL OR source = 3 OR rank " \
      "IN (SELECT value FROM json_each(?3))) ORDER BY id DESC LIMIT ?5) ORDER BY id LIMIT ?6")     \
    X(LOGS_COUNT, "SELECT COUNT(*) FROM logs WHERE job_id = ?1")                                   \
    X(JOB_STATE_COUNTS, "SELECT state, COUNT(*) FROM jobs GROUP BY state")                         \
    X(METRIC_ADD,                                                                                  \
      "INSERT OR IGNORE INTO metrics(job_id, step, attempt_id, time_ms, kv) VALUES(?1, ?2, ?3, "   \
      "?4, ?5)")                                                                                   \
    X(METRIC_REPLACE,                                                                              \
      "UPDATE metrics SET attempt_id = ?3, time_ms = ?4, kv = ?5 WHERE job_id = ?1 AND step = ?2") \
    X(METRICS_THIN, "DELETE FROM metrics WHERE job_id = ?1 AND step % ?2 != 0")                    \
    X(METRICS_LIST,                                                                                \
      "SELECT job_id, attempt_id, step, time_ms, kv FROM metrics WHERE job_id = ?1 AND step >= ?2 " \
      "ORDER BY step")                                                                             \
    X(METRICS_COUNT, "SELECT COUNT(*) FROM metrics WHERE job_id = ?1")                             \
    X(CKPT_FIND, "SELECT id, attempt_id, world_size, state, step FROM checkpoints WHERE "          \
                 "job_id = ?1 AND path = ?2")                                                      \
    X(CKPT_INSERT,                                                                                 \
      "INSERT INTO checkpoints(job_id, attempt_id, step, path, world_size, state, created_ms, "    \
      "deleted_ms) VALUES(?1, ?2, ?3, ?4, ?5, ?7, ?6, ?8)")                                        \
    X(CKPT_RESET,                                                                                  \
      "UPDATE checkpoints SET attempt_id = ?2, step = ?3, world_size = ?4, state = 'PARTIAL', "    \
      "created_ms = ?5, committed_ms = 0, deleted_ms = 0, bad_reason = '' WHERE id = ?1")          \
    X(CKPT_DELETE,                                                                                 \
      "UPDATE checkpoints SET state = 'DELETED', deleted_ms = ?2 WHERE id = ?1 AND state != "      \
      "'DELETED'")                                                                                 \
    X(CKPT_MARK_BAD,                                                                               \
      "UPDATE checkpoints SET state = 'BAD', bad_reason = ?2 WHERE id = ?1 AND state IN "          \
      "('PARTIAL','COMMITTED')")                                                                   \
    X(CKPT_CLEAR_SHARDS, "DELETE FROM checkpoint_shards WHERE checkpoint_id = ?1")                 \
    X(SHARD_SAVE,                                                                                  \
      "INSERT OR REPLACE INTO checkpoint_shards(checkpoint_id, rank, file, bytes, crc32c, "        \
      "reported_ms) VALUES(?1, ?2, ?3, ?4, ?5, ?6)")                                               \
    X(SHARD_COUNT, "SELECT COUNT(*) FROM checkpoint_shards WHERE checkpoint_id = ?1")              \
    X(CKPT_COMMIT,                                                                                 \
      "UPDATE checkpoints SET state = 'COMMITTED', committed_ms = ?2 WHERE id = ?1 AND state = "   \
      "'PARTIAL'")                                                                                 \
    X(CKPTS_LIST,                                                                                  \
      "SELECT " CKPT_COLS " FROM checkpoints c WHERE c.job_id = ?1 AND (c.state IN "              \
      "('COMMITTED','BAD') OR (?2 = 1 AND c.state = 'PARTIAL') OR (?3 = 1 AND c.state = "          \
      "'DELETED')) ORDER BY c.step DESC, c.id DESC")                                               \
    X(CKPT_LATEST,                                                                                 \
      "SELECT " CKPT_COLS " FROM checkpoints c WHERE c.job_id = ?1 AND c.state = 'COMMITTED' "     \
      "ORDER BY c.step DESC, c.id DESC LIMIT 1")                                                   \
    X(CKPT_COUNT, "SELECT COUNT(*) FROM checkpoints WHERE job_id = ?1 AND state = 'COMMITTED'")    \
    X(SHARDS_LIST,                                                                                 \
      "SELECT checkpoint_id, rank, file, bytes, crc32c, reported_ms FROM checkpoint_shards WHERE " \
      "checkpoint_id = ?1 ORDER BY rank")                                                          \
    X(RDZV_PUT, "INSERT OR REPLACE INTO rendezvous(attempt_id, rank, value) VALUES(?1, ?2, ?3)")   \
    X(RDZV_LIST, "SELECT rank, value FROM rendezvous WHERE attempt_id = ?1 ORDER BY rank")

typedef enum {
#define STMT_ENUM(name, sql) S_##name,
    STMT_LIST(STMT_ENUM)
#undef STMT_ENUM
        S_COUNT
} stmt_id;

struct zt_store {
    sqlite3 *db;
    char *path;
    bool readonly;
    sqlite3_stmt *stmts[S_COUNT];
};

/* ---- helpers (store.c) ---- */

/* Sets err from the handle's last SQLite error ("database <path>: <what>: ..."); returns
 * ZT_ERR_NOSPACE for a full disk, ZT_ERR_DB otherwise. */
zt_status store_db_err(zt_store *s, zt_err *err, const char *what);
/* The prepared statement, reset and unbound, or NULL (err set). */
sqlite3_stmt *store_stmt(zt_store *s, stmt_id id, zt_err *err);
/* Binds v, or NULL when v is NULL. */
void store_bind_text(sqlite3_stmt *st, int i, const char *v);
/* Column i as text (NULL for SQL NULL). */
const char *store_col_text(sqlite3_stmt *st, int i);
/* Runs a statement that returns no rows. */
zt_status store_exec_done(zt_store *s, sqlite3_stmt *st, zt_err *err, const char *what);
/* A single-integer query; *out = 0 when there is no row. */
zt_status store_query_int(zt_store *s, sqlite3_stmt *st, int64_t *out, zt_err *err,
                          const char *what);
/* COUNT(*) of statement id, its ?1 being key. */
zt_status store_count_of(zt_store *s, stmt_id id, int64_t key, int64_t *count, zt_err *err);

/* ---- records and statements: tables of columns (store.c) ---- */

/* How a record field is bound to a parameter and read from a column. */
typedef enum {
    COL_I32,         /* int */
    COL_I64,         /* int64_t */
    COL_BOOL,        /* bool, stored as 0/1 */
    COL_U32,         /* uint32_t, stored as an integer */
    COL_TEXT,        /* const char *: NULL binds and reads as SQL NULL */
    COL_TEXT_OR,     /* const char *: NULL binds `dflt`; SQL NULL reads as "" */
    COL_TEXT_KEY,    /* const char *: NULL and "" bind SQL NULL (unique when set) */
    COL_I64_ID,      /* int64_t: 0 binds SQL NULL (no reference) */
    COL_I64_STRIDE,  /* int64_t: values below 1 bind 1 */
    COL_JOB_STATE,   /* zt_job_state, stored by name */
    COL_ATTEMPT_STATE,
    COL_AGENT_STATE,
    COL_CKPT_STATE,
} col_kind;

typedef struct col {
    col_kind kind;
    size_t off; /* of the field in its record */
    const char *dflt; /* COL_TEXT_OR: what NULL binds */
} col;

typedef struct col_table {
    const col *v;
    size_t n;
    size_t rec_size;
} col_table;

/* The offset of field f of record type R, which must have type T (a compile error otherwise). */
#define STORE_AT(R, f, T)                                                                          \
    (offsetof(R, f) + 0 * sizeof(char[_Generic(((R *)0)->f, T: 1, default: -1)]))
#define F_OF(kind, R, f, T) {kind, STORE_AT(R, f, T), NULL}
#define F_I32(R, f) F_OF(COL_I32, R, f, int)
#define F_I64(R, f) F_OF(COL_I64, R, f, int64_t)
#define F_BOOL(R, f) F_OF(COL_BOOL, R, f, bool)
#define F_U32(R, f) F_OF(COL_U32, R, f, uint32_t)
#define F_TEXT(R, f) F_OF(COL_TEXT, R, f, const char *)
#define F_TEXT_OR(R, f, d) {COL_TEXT_OR, STORE_AT(R, f, const char *), d}
#define F_TEXT_KEY(R, f) F_OF(COL_TEXT_KEY, R, f, const char *)
#define F_ID(R, f) F_OF(COL_I64_ID, R, f, int64_t)
#define F_STRIDE(R, f) F_OF(COL_I64_STRIDE, R, f, int64_t)
#define F_JOB_STATE(R, f) F_OF(COL_JOB_STATE, R, f, zt_job_state)
#define F_ATTEMPT_STATE(R, f) F_OF(COL_ATTEMPT_STATE, R, f, zt_attempt_state)
#define F_AGENT_STATE(R, f) F_OF(COL_AGENT_STATE, R, f, zt_agent_state)
#define F_CKPT_STATE(R, f) F_OF(COL_CKPT_STATE, R, f, zt_ckpt_state)
#define COL_TABLE(R, cols) {cols, sizeof(cols) / sizeof(cols[0]), sizeof(R)}

/* Binds the fields of rec that table t names to parameters first, first + 1, ... */
void store_bind_cols(sqlite3_stmt *st, int first, const col_table *t, const void *rec);
/* Runs statement id (no rows) with rec bound to its parameters from ?1 on; *rowid = the
 * inserted row's id when rowid is not NULL. what names the action in the error. */
zt_status store_write(zt_store *s, stmt_id id, const col_table *t, const void *rec,
                      int64_t *rowid, zt_err *err, const char *what);
/* Reads the current row of st into the fields of rec that table t names, from column 0 on. */
void store_read_cols(sqlite3_stmt *st, const col_table *t, void *rec);
/* Steps st: true with the next row read into rec (zeroed first; NULL reads nothing);
 * false at the end or on an error (*q says which; st is reset either way). */
bool store_row_next(zt_store *s, sqlite3_stmt *st, const col_table *t, void *rec, zt_status *q,
                    zt_err *err, const char *what);

#endif
