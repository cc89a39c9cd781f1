/* zerotrain: the coordinator's SQLite store (see store.h). Every statement is prepared once
 * from the table below and reused; the schema comes from the migrations list, applied in
 * order and recorded in PRAGMA user_version. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/store.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"

/* ---- schema ------------------------------------------------------------------------------ */

static const char *const migrations[] = {
    /* 1: the tables */
    "CREATE TABLE agents("
    " name TEXT PRIMARY KEY,"
    " hostname TEXT NOT NULL DEFAULT '',"
    " address TEXT NOT NULL DEFAULT '',"
    " version TEXT NOT NULL DEFAULT '',"
    " device INTEGER NOT NULL,"
    " slots INTEGER NOT NULL CHECK(slots >= 0),"
    " gpus TEXT NOT NULL DEFAULT '[]',"
    " incarnation INTEGER NOT NULL,"
    " state TEXT NOT NULL CHECK(state IN ('ALIVE','LOST')),"
    " registered_ms INTEGER NOT NULL,"
    " last_seen_ms INTEGER NOT NULL);"
    "CREATE TABLE jobs("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " submit_key TEXT UNIQUE,"
    " name TEXT NOT NULL,"
    " state TEXT NOT NULL CHECK(state IN "
    "('QUEUED','SCHEDULED','RUNNING','COMPLETED','FAILED','CANCELED')),"
    " reason TEXT NOT NULL DEFAULT '',"
    " priority INTEGER NOT NULL DEFAULT 0,"
    " ranks INTEGER NOT NULL CHECK(ranks > 0),"
    " ranks_per_node INTEGER NOT NULL CHECK(ranks_per_node > 0),"
    " device INTEGER NOT NULL,"
    " max_restarts INTEGER NOT NULL DEFAULT 0,"
    " restarts INTEGER NOT NULL DEFAULT 0,"
    " total_steps INTEGER NOT NULL,"
    " last_step INTEGER NOT NULL DEFAULT 0,"
    " spec_text TEXT NOT NULL,"
    " spec_dir TEXT NOT NULL,"
    " spec_json TEXT NOT NULL,"
    " spec_hash TEXT NOT NULL,"
    " user TEXT NOT NULL DEFAULT '',"
    " submitted_ms INTEGER NOT NULL,"
    " started_ms INTEGER NOT NULL DEFAULT 0,"
    " ended_ms INTEGER NOT NULL DEFAULT 0,"
    " attempt_id INTEGER NOT NULL DEFAULT 0,"
    " metrics_stride INTEGER NOT NULL DEFAULT 1 CHECK(metrics_stride > 0));"
    "CREATE TABLE attempts("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    " number INTEGER NOT NULL,"
    " state TEXT NOT NULL CHECK(state IN ('STARTING','RUNNING','SUCCEEDED','FAILED','CANCELED')),"
    " reason TEXT NOT NULL DEFAULT '',"
    " world_size INTEGER NOT NULL CHECK(world_size > 0),"
    " resume_path TEXT NOT NULL DEFAULT '',"
    " resume_step INTEGER NOT NULL DEFAULT 0,"
    " created_ms INTEGER NOT NULL,"
    " started_ms INTEGER NOT NULL DEFAULT 0,"
    " ended_ms INTEGER NOT NULL DEFAULT 0,"
    " UNIQUE(job_id, number));"
    "CREATE TABLE ranks("
    " attempt_id INTEGER NOT NULL REFERENCES attempts(id) ON DELETE CASCADE,"
    " rank INTEGER NOT NULL CHECK(rank >= 0),"
    " agent TEXT NOT NULL REFERENCES agents(name),"
    " local_rank INTEGER NOT NULL,"
    " device_index INTEGER NOT NULL,"
    " pid INTEGER NOT NULL DEFAULT 0,"
    " exited INTEGER NOT NULL DEFAULT 0,"
    " exit_code INTEGER NOT NULL DEFAULT 0,"
    " exit_signal INTEGER NOT NULL DEFAULT 0,"
    " last_step INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY(attempt_id, rank)) WITHOUT ROWID;"
    "CREATE TABLE events("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " time_ms INTEGER NOT NULL,"
    " job_id INTEGER REFERENCES jobs(id) ON DELETE CASCADE,"
    " attempt_id INTEGER,"
    " agent TEXT,"
    " kind TEXT NOT NULL,"
    " from_state TEXT NOT NULL DEFAULT '',"
    " to_state TEXT NOT NULL DEFAULT '',"
    " reason TEXT NOT NULL DEFAULT '');"
    "CREATE TABLE logs("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    " attempt_id INTEGER NOT NULL DEFAULT 0,"
    " rank INTEGER NOT NULL,"
    " source INTEGER NOT NULL,"
    " time_ms INTEGER NOT NULL,"
    " text TEXT NOT NULL);"
    "CREATE TABLE metrics("
    " job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    " step INTEGER NOT NULL,"
    " attempt_id INTEGER NOT NULL,"
    " time_ms INTEGER NOT NULL,"
    " kv TEXT NOT NULL,"
    " PRIMARY KEY(job_id, step)) WITHOUT ROWID;"
    "CREATE TABLE checkpoints("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    " attempt_id INTEGER NOT NULL,"
    " step INTEGER NOT NULL,"
    " path TEXT NOT NULL,"
    " world_size INTEGER NOT NULL CHECK(world_size > 0),"
    " state TEXT NOT NULL CHECK(state IN ('PARTIAL','COMMITTED')),"
    " created_ms INTEGER NOT NULL,"
    " committed_ms INTEGER NOT NULL DEFAULT 0,"
    " UNIQUE(job_id, path));"
    "CREATE TABLE checkpoint_shards("
    " checkpoint_id INTEGER NOT NULL REFERENCES checkpoints(id) ON DELETE CASCADE,"
    " rank INTEGER NOT NULL CHECK(rank >= 0),"
    " file TEXT NOT NULL,"
    " bytes INTEGER NOT NULL,"
    " crc32c INTEGER NOT NULL,"
    " reported_ms INTEGER NOT NULL,"
    " PRIMARY KEY(checkpoint_id, rank)) WITHOUT ROWID;"
    "CREATE TABLE rendezvous("
    " attempt_id INTEGER NOT NULL REFERENCES attempts(id) ON DELETE CASCADE,"
    " rank INTEGER NOT NULL,"
    " value BLOB NOT NULL,"
    " PRIMARY KEY(attempt_id, rank)) WITHOUT ROWID;",
    /* 2: indexes for the per-job views */
    "CREATE INDEX events_job ON events(job_id, id);"
    "CREATE INDEX logs_job ON logs(job_id, id);"
    "CREATE INDEX attempts_job ON attempts(job_id, number);"
    "CREATE INDEX checkpoints_job ON checkpoints(job_id, step);"
    "CREATE INDEX jobs_state ON jobs(state, id);",
    /* 3: checkpoints may be DELETED (keep_checkpoints removed the directory). SQLite cannot
     * change a CHECK constraint in place: the table is rebuilt (foreign keys are off during
     * migrations, so the shards stay; migrate() checks them before the commit). */
    "CREATE TABLE checkpoints_v3("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    " attempt_id INTEGER NOT NULL,"
    " step INTEGER NOT NULL,"
    " path TEXT NOT NULL,"
    " world_size INTEGER NOT NULL CHECK(world_size > 0),"
    " state TEXT NOT NULL CHECK(state IN ('PARTIAL','COMMITTED','DELETED')),"
    " created_ms INTEGER NOT NULL,"
    " committed_ms INTEGER NOT NULL DEFAULT 0,"
    " deleted_ms INTEGER NOT NULL DEFAULT 0,"
    " UNIQUE(job_id, path));"
    "INSERT INTO checkpoints_v3(id, job_id, attempt_id, step, path, world_size, state, "
    "created_ms, committed_ms) SELECT id, job_id, attempt_id, step, path, world_size, state, "
    "created_ms, committed_ms FROM checkpoints;"
    "DROP TABLE checkpoints;"
    "ALTER TABLE checkpoints_v3 RENAME TO checkpoints;"
    "CREATE INDEX checkpoints_job ON checkpoints(job_id, step);",
    /* 4: a job's restart backoff survives a coordinator restart (wall-clock ms, 0 = none) */
    "ALTER TABLE jobs ADD COLUMN eligible_ms INTEGER NOT NULL DEFAULT 0;",
    /* 5: who may say what. An agent's key survives a coordinator restart (its
     * SHA-256, never the credential); a checkpoint directory belongs to the job that first
     * used it (looked up by its resolved path); a checkpoint that failed verification on
     * load is BAD, with the worker's reason */
    "ALTER TABLE agents ADD COLUMN key_sha256 TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE jobs ADD COLUMN checkpoint_dir TEXT NOT NULL DEFAULT '';"
    "UPDATE jobs SET checkpoint_dir = COALESCE(json_extract(spec_json, '$.train.checkpoint_dir'), '');"
    "CREATE INDEX jobs_checkpoint_dir ON jobs(checkpoint_dir);"
    "CREATE TABLE checkpoints_v5("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    " attempt_id INTEGER NOT NULL,"
    " step INTEGER NOT NULL,"
    " path TEXT NOT NULL,"
    " world_size INTEGER NOT NULL CHECK(world_size > 0),"
    " state TEXT NOT NULL CHECK(state IN ('PARTIAL','COMMITTED','DELETED','BAD')),"
    " created_ms INTEGER NOT NULL,"
    " committed_ms INTEGER NOT NULL DEFAULT 0,"
    " deleted_ms INTEGER NOT NULL DEFAULT 0,"
    " bad_reason TEXT NOT NULL DEFAULT '',"
    " UNIQUE(job_id, path));"
    "INSERT INTO checkpoints_v5(id, job_id, attempt_id, step, path, world_size, state, "
    "created_ms, committed_ms, deleted_ms) SELECT id, job_id, attempt_id, step, path, world_size, "
    "state, created_ms, committed_ms, deleted_ms FROM checkpoints;"
    "DROP TABLE checkpoints;"
    "ALTER TABLE checkpoints_v5 RENAME TO checkpoints;"
    "CREATE INDEX checkpoints_job ON checkpoints(job_id, step);",
};
_Static_assert(sizeof(migrations) / sizeof(migrations[0]) == ZT_STORE_SCHEMA_VERSION,
               "one migration per schema version");

/* ---- statements -------------------------------------------------------------------------- */

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

static const char *const stmt_sql[] = {
#define STMT_SQL(name, sql) sql,
    STMT_LIST(STMT_SQL)
#undef STMT_SQL
};

struct zt_store {
    sqlite3 *db;
    char *path;
    bool readonly;
    sqlite3_stmt *stmts[S_COUNT];
};

/* ---- helpers ----------------------------------------------------------------------------- */

static zt_status db_err(zt_store *s, zt_err *err, const char *what)
{
    int code = sqlite3_extended_errcode(s->db);
    zt_status st = ZT_ERR_DB;
    if ((code & 0xff) == SQLITE_FULL)
        st = ZT_ERR_NOSPACE;
    return zt_err_set(err, st, "database %s: %s: %s (sqlite error %d)", s->path, what,
                      sqlite3_errmsg(s->db), code);
}

/* The prepared statement, reset and unbound, or NULL (err set). */
static sqlite3_stmt *stmt(zt_store *s, stmt_id id, zt_err *err)
{
    sqlite3_stmt *st = s->stmts[id];
    if (!st) {
        if (sqlite3_prepare_v3(s->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) !=
            SQLITE_OK) {
            db_err(s, err, "preparing a statement");
            return NULL;
        }
        s->stmts[id] = st;
    } else {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    }
    return st;
}

static void bind_text(sqlite3_stmt *st, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    return (const char *)sqlite3_column_text(st, i);
}

static const char *col_text_or_empty(sqlite3_stmt *st, int i)
{
    const char *t = col_text(st, i);
    return t ? t : "";
}

/* Runs a statement that returns no rows. */
static zt_status exec_done(zt_store *s, sqlite3_stmt *st, zt_err *err, const char *what)
{
    int rc = sqlite3_step(st);
    zt_status r = rc == SQLITE_DONE || rc == SQLITE_ROW ? ZT_OK : db_err(s, err, what);
    sqlite3_reset(st);
    return r;
}

static zt_status simple(zt_store *s, stmt_id id, zt_err *err, const char *what)
{
    sqlite3_stmt *st = stmt(s, id, err);
    if (!st)
        return err ? err->status : ZT_ERR_DB;
    return exec_done(s, st, err, what);
}

/* A single-integer query; *out = 0 when there is no row. */
static zt_status query_int(zt_store *s, sqlite3_stmt *st, int64_t *out, zt_err *err, const char *what)
{
    int rc = sqlite3_step(st);
    *out = 0;
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    else if (rc != SQLITE_DONE) {
        sqlite3_reset(st);
        return db_err(s, err, what);
    }
    sqlite3_reset(st);
    return ZT_OK;
}

/* ---- open / migrate ---------------------------------------------------------------------- */

int zt_store_schema_version(zt_store *s)
{
    sqlite3_stmt *st;
    int v = -1;
    if (sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            v = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    return v;
}

static int count_rows(void *arg, int ncol, char **vals, char **names)
{
    (void)ncol;
    (void)vals;
    (void)names;
    (*(int *)arg)++;
    return 0;
}

static zt_status migrate(zt_store *s, int target, zt_err *err)
{
    int v = zt_store_schema_version(s);
    if (v < 0)
        return db_err(s, err, "reading the schema version");
    if (v > ZT_STORE_SCHEMA_VERSION)
        return zt_err_set(err, ZT_ERR_STATE,
                          "database %s has schema version %d but this zcoord knows versions up to %d; run a newer zcoord (or point --db at another file)",
                          s->path, v, ZT_STORE_SCHEMA_VERSION);
    if (v >= target)
        return ZT_OK;
    /* a migration may rebuild a table that others reference: foreign keys are off meanwhile
     * (the pragma is a no-op inside a transaction) and checked before each commit */
    sqlite3_exec(s->db, "PRAGMA foreign_keys = OFF", NULL, NULL, NULL);
    zt_status st = ZT_OK;
    for (int i = v; i < target; i++) {
        char pragma[64];
        snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d", i + 1);
        char *msg = NULL;
        int violations = 0;
        if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, &msg) != SQLITE_OK ||
            sqlite3_exec(s->db, migrations[i], NULL, NULL, &msg) != SQLITE_OK ||
            sqlite3_exec(s->db, "PRAGMA foreign_key_check", count_rows, &violations, &msg) !=
                SQLITE_OK ||
            (violations == 0 && sqlite3_exec(s->db, pragma, NULL, NULL, &msg) != SQLITE_OK) ||
            (violations == 0 && sqlite3_exec(s->db, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) ||
            violations != 0) {
            if (violations)
                zt_err_set(err, ZT_ERR_DB,
                           "database %s: migration to schema version %d would leave %d broken references; it was not applied (report this with the database file)",
                           s->path, i + 1, violations);
            else
                zt_err_set(err, ZT_ERR_DB, "database %s: migration to schema version %d failed: %s",
                           s->path, i + 1, msg ? msg : sqlite3_errmsg(s->db));
            sqlite3_free(msg);
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
            st = ZT_ERR_DB;
            break;
        }
        ZT_INFO("store", "database %s migrated to schema version %d", s->path, i + 1);
    }
    sqlite3_exec(s->db, "PRAGMA foreign_keys = ON", NULL, NULL, NULL);
    return st;
}

static zt_status open_store(zt_store **out, const char *path, bool readonly, int target, zt_err *err)
{
    *out = NULL;
    zt_store *s = zt_calloc(1, sizeof(*s));
    if (!s)
        return zt_err_set(err, ZT_ERR_NOMEM, "store: out of memory");
    s->path = zt_strdup(path);
    s->readonly = readonly;
    int flags = readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    flags |= SQLITE_OPEN_NOMUTEX; /* one thread per handle */
    zt_status st = ZT_OK;
    if (!s->path) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "store: out of memory");
        goto fail;
    }
    if (sqlite3_open_v2(path, &s->db, flags, NULL) != SQLITE_OK) {
        st = zt_err_set(err, readonly ? ZT_ERR_NOT_FOUND : ZT_ERR_IO,
                        "cannot open the database %s: %s; check the path given to --db and that its directory is writable",
                        path, s->db ? sqlite3_errmsg(s->db) : "out of memory");
        goto fail;
    }
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, 5000);
    const char *setup = readonly ? "PRAGMA foreign_keys = ON; PRAGMA query_only = ON;"
                                 : "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; "
                                   "PRAGMA foreign_keys = ON;";
    char *msg = NULL;
    if (sqlite3_exec(s->db, setup, NULL, NULL, &msg) != SQLITE_OK) {
        st = zt_err_set(err, ZT_ERR_DB,
                        "cannot set up the database %s: %s; is it a zerotrain database (and not on a network file system without locking)?",
                        path, msg ? msg : sqlite3_errmsg(s->db));
        sqlite3_free(msg);
        goto fail;
    }
    if (!readonly) {
        if ((st = migrate(s, target, err)) != ZT_OK)
            goto fail;
    } else if (zt_store_schema_version(s) != ZT_STORE_SCHEMA_VERSION) {
        st = zt_err_set(err, ZT_ERR_STATE, "database %s has schema version %d, expected %d", path,
                        zt_store_schema_version(s), ZT_STORE_SCHEMA_VERSION);
        goto fail;
    }
    *out = s;
    return ZT_OK;
fail:
    zt_store_close(s);
    return st;
}

zt_status zt_store_open(zt_store **out, const char *path, bool readonly, zt_err *err)
{
    return open_store(out, path, readonly, ZT_STORE_SCHEMA_VERSION, err);
}

zt_status zt_store_open_at_version(zt_store **out, const char *path, int version, zt_err *err)
{
    return open_store(out, path, false, version, err);
}

void zt_store_close(zt_store *s)
{
    if (!s)
        return;
    for (int i = 0; i < S_COUNT; i++)
        sqlite3_finalize(s->stmts[i]);
    if (s->db)
        sqlite3_close(s->db);
    zt_free(s->path);
    zt_free(s);
}

/* ---- transactions ------------------------------------------------------------------------ */

zt_status zt_store_begin(zt_store *s, zt_err *err)
{
    return simple(s, S_BEGIN, err, "beginning a transaction");
}

zt_status zt_store_commit(zt_store *s, zt_err *err)
{
    return simple(s, S_COMMIT, err, "committing");
}

void zt_store_rollback(zt_store *s)
{
    if (!sqlite3_get_autocommit(s->db))
        simple(s, S_ROLLBACK, NULL, "rolling back");
}

zt_status zt_store_savepoint(zt_store *s, zt_err *err)
{
    return simple(s, S_SAVEPOINT, err, "opening a savepoint");
}

void zt_store_release(zt_store *s)
{
    simple(s, S_RELEASE, NULL, "releasing a savepoint");
}

void zt_store_rollback_savepoint(zt_store *s)
{
    simple(s, S_ROLLBACK_TO, NULL, "rolling back to a savepoint");
    simple(s, S_RELEASE, NULL, "releasing a savepoint");
}

/* ---- jobs -------------------------------------------------------------------------------- */

zt_status zt_store_job_insert(zt_store *s, const zt_job_rec *r, int64_t *id, bool *existed,
                              zt_err *err)
{
    *existed = false;
    *id = 0;
    sqlite3_stmt *st;
    if (r->submit_key && r->submit_key[0]) {
        if (!(st = stmt(s, S_JOB_BY_KEY, err)))
            return ZT_ERR_DB;
        bind_text(st, 1, r->submit_key);
        zt_status q = query_int(s, st, id, err, "looking up a submit key");
        if (q != ZT_OK)
            return q;
        if (*id) {
            *existed = true;
            return ZT_OK;
        }
    }
    if (!(st = stmt(s, S_JOB_INSERT, err)))
        return ZT_ERR_DB;
    bind_text(st, 1, r->submit_key && r->submit_key[0] ? r->submit_key : NULL);
    bind_text(st, 2, r->name);
    bind_text(st, 3, zt_job_state_name(r->state));
    bind_text(st, 4, r->reason ? r->reason : "");
    sqlite3_bind_int(st, 5, r->priority);
    sqlite3_bind_int(st, 6, r->ranks);
    sqlite3_bind_int(st, 7, r->ranks_per_node);
    sqlite3_bind_int(st, 8, r->device);
    sqlite3_bind_int(st, 9, r->max_restarts);
    sqlite3_bind_int(st, 10, r->restarts);
    sqlite3_bind_int64(st, 11, r->total_steps);
    sqlite3_bind_int64(st, 12, r->last_step);
    bind_text(st, 13, r->spec_text ? r->spec_text : "");
    bind_text(st, 14, r->spec_dir ? r->spec_dir : "");
    bind_text(st, 15, r->spec_json ? r->spec_json : "");
    bind_text(st, 16, r->spec_hash ? r->spec_hash : "");
    bind_text(st, 17, r->user ? r->user : "");
    sqlite3_bind_int64(st, 18, r->submitted_ms);
    sqlite3_bind_int64(st, 19, r->started_ms);
    sqlite3_bind_int64(st, 20, r->ended_ms);
    sqlite3_bind_int64(st, 21, r->attempt_id);
    sqlite3_bind_int64(st, 22, r->metrics_stride > 0 ? r->metrics_stride : 1);
    bind_text(st, 23, r->checkpoint_dir ? r->checkpoint_dir : "");
    zt_status q = exec_done(s, st, err, "inserting a job");
    if (q == ZT_OK)
        *id = sqlite3_last_insert_rowid(s->db);
    return q;
}

zt_status zt_store_job_save(zt_store *s, const zt_job_rec *r, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_JOB_SAVE, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, r->id);
    bind_text(st, 2, zt_job_state_name(r->state));
    bind_text(st, 3, r->reason ? r->reason : "");
    sqlite3_bind_int(st, 4, r->restarts);
    sqlite3_bind_int64(st, 5, r->last_step);
    sqlite3_bind_int64(st, 6, r->started_ms);
    sqlite3_bind_int64(st, 7, r->ended_ms);
    sqlite3_bind_int64(st, 8, r->attempt_id);
    sqlite3_bind_int64(st, 9, r->metrics_stride > 0 ? r->metrics_stride : 1);
    sqlite3_bind_int64(st, 10, r->eligible_ms);
    zt_status q = exec_done(s, st, err, "updating a job");
    if (q == ZT_OK && sqlite3_changes(s->db) == 0)
        return zt_err_set(err, ZT_ERR_NOT_FOUND, "job %lld is not in the database",
                          (long long)r->id);
    return q;
}

static void row_job(sqlite3_stmt *st, zt_job_rec *r)
{
    memset(r, 0, sizeof(*r));
    r->id = sqlite3_column_int64(st, 0);
    r->submit_key = col_text(st, 1);
    r->name = col_text_or_empty(st, 2);
    r->state = (zt_job_state)zt_job_state_parse(col_text(st, 3));
    r->reason = col_text_or_empty(st, 4);
    r->priority = sqlite3_column_int(st, 5);
    r->ranks = sqlite3_column_int(st, 6);
    r->ranks_per_node = sqlite3_column_int(st, 7);
    r->device = sqlite3_column_int(st, 8);
    r->max_restarts = sqlite3_column_int(st, 9);
    r->restarts = sqlite3_column_int(st, 10);
    r->total_steps = sqlite3_column_int64(st, 11);
    r->last_step = sqlite3_column_int64(st, 12);
    r->spec_text = col_text(st, 13);
    r->spec_dir = col_text_or_empty(st, 14);
    r->spec_json = col_text(st, 15);
    r->spec_hash = col_text_or_empty(st, 16);
    r->user = col_text_or_empty(st, 17);
    r->submitted_ms = sqlite3_column_int64(st, 18);
    r->started_ms = sqlite3_column_int64(st, 19);
    r->ended_ms = sqlite3_column_int64(st, 20);
    r->attempt_id = sqlite3_column_int64(st, 21);
    r->metrics_stride = sqlite3_column_int64(st, 22);
    r->eligible_ms = sqlite3_column_int64(st, 23);
    r->checkpoint_dir = col_text_or_empty(st, 24);
}

/* Steps st to the end, calling each(row) per row. */
#define FOR_ROWS(s, st, err, what, body)                                                           \
    do {                                                                                           \
        int rc_;                                                                                   \
        while ((rc_ = sqlite3_step(st)) == SQLITE_ROW) {                                           \
            body;                                                                                  \
        }                                                                                          \
        if (rc_ != SQLITE_DONE) {                                                                  \
            zt_status e_ = db_err(s, err, what);                                                   \
            sqlite3_reset(st);                                                                     \
            return e_;                                                                             \
        }                                                                                          \
        sqlite3_reset(st);                                                                         \
    } while (0)

zt_status zt_store_job_get(zt_store *s, int64_t id, zt_store_job_fn fn, void *arg, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_JOB_GET, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, id);
    int n = 0;
    FOR_ROWS(s, st, err, "reading a job", {
        zt_job_rec r;
        row_job(st, &r);
        fn(arg, &r);
        n++;
    });
    if (!n)
        return zt_err_set(err, ZT_ERR_NOT_FOUND, "job %lld not found; 'zctl jobs' lists the jobs",
                          (long long)id);
    return ZT_OK;
}

zt_status zt_store_job_find_key(zt_store *s, const char *submit_key, int64_t *id, zt_err *err)
{
    *id = 0;
    if (!submit_key || !submit_key[0])
        return ZT_OK;
    sqlite3_stmt *st = stmt(s, S_JOB_BY_KEY, err);
    if (!st)
        return ZT_ERR_DB;
    bind_text(st, 1, submit_key);
    return query_int(s, st, id, err, "looking up a submit key");
}

zt_status zt_store_job_by_ckpt_dir(zt_store *s, const char *dir, zt_store_job_fn fn, void *arg,
                                   zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_JOB_BY_CKPT_DIR, err);
    if (!st)
        return ZT_ERR_DB;
    bind_text(st, 1, dir);
    int n = 0;
    FOR_ROWS(s, st, err, "looking up the job of a checkpoint directory", {
        zt_job_rec r;
        row_job(st, &r);
        fn(arg, &r);
        n++;
    });
    if (!n)
        return zt_err_set(err, ZT_ERR_NOT_FOUND, "no job has the checkpoint directory %s", dir);
    return ZT_OK;
}

zt_status zt_store_jobs_list(zt_store *s, unsigned state_mask, int64_t before_id, int limit,
                             zt_store_job_fn fn, void *arg, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_JOBS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, before_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)state_mask);
    sqlite3_bind_int(st, 3, limit);
    FOR_ROWS(s, st, err, "listing jobs", {
        zt_job_rec r;
        row_job(st, &r);
        fn(arg, &r);
    });
    return ZT_OK;
}

zt_status zt_store_jobs_active(zt_store *s, zt_store_job_fn fn, void *arg, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_JOBS_ACTIVE, err);
    if (!st)
        return ZT_ERR_DB;
    FOR_ROWS(s, st, err, "loading active jobs", {
        zt_job_rec r;
        row_job(st, &r);
        fn(arg, &r);
    });
    return ZT_OK;
}

/* ---- attempts and ranks ------------------------------------------------------------------ */

zt_status zt_store_attempt_insert(zt_store *s, const zt_attempt_rec *r, int64_t *id, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_ATTEMPT_INSERT, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, r->job_id);
    sqlite3_bind_int(st, 2, r->number);
    bind_text(st, 3, zt_attempt_state_name(r->state));
    bind_text(st, 4, r->reason ? r->reason : "");
    sqlite3_bind_int(st, 5, r->world_size);
    bind_text(st, 6, r->resume_path ? r->resume_path : "");
    sqlite3_bind_int64(st, 7, r->resume_step);
    sqlite3_bind_int64(st, 8, r->created_ms);
    sqlite3_bind_int64(st, 9, r->started_ms);
    sqlite3_bind_int64(st, 10, r->ended_ms);
    zt_status q = exec_done(s, st, err, "inserting an attempt");
    if (q == ZT_OK)
        *id = sqlite3_last_insert_rowid(s->db);
    return q;
}

zt_status zt_store_attempt_save(zt_store *s, const zt_attempt_rec *r, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_ATTEMPT_SAVE, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, r->id);
    bind_text(st, 2, zt_attempt_state_name(r->state));
    bind_text(st, 3, r->reason ? r->reason : "");
    sqlite3_bind_int64(st, 4, r->started_ms);
    sqlite3_bind_int64(st, 5, r->ended_ms);
    return exec_done(s, st, err, "updating an attempt");
}

static void row_attempt(sqlite3_stmt *st, zt_attempt_rec *r)
{
    memset(r, 0, sizeof(*r));
    r->id = sqlite3_column_int64(st, 0);
    r->job_id = sqlite3_column_int64(st, 1);
    r->number = sqlite3_column_int(st, 2);
    r->state = (zt_attempt_state)zt_attempt_state_parse(col_text(st, 3));
    r->reason = col_text_or_empty(st, 4);
    r->world_size = sqlite3_column_int(st, 5);
    r->resume_path = col_text_or_empty(st, 6);
    r->resume_step = sqlite3_column_int64(st, 7);
    r->created_ms = sqlite3_column_int64(st, 8);
    r->started_ms = sqlite3_column_int64(st, 9);
    r->ended_ms = sqlite3_column_int64(st, 10);
}

zt_status zt_store_attempt_get(zt_store *s, int64_t id, zt_store_attempt_fn fn, void *arg,
                               zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_ATTEMPT_GET, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, id);
    int n = 0;
    FOR_ROWS(s, st, err, "reading an attempt", {
        zt_attempt_rec r;
        row_attempt(st, &r);
        fn(arg, &r);
        n++;
    });
    if (!n)
        return zt_err_set(err, ZT_ERR_NOT_FOUND, "attempt %lld not found", (long long)id);
    return ZT_OK;
}

zt_status zt_store_attempts_list(zt_store *s, int64_t job_id, zt_store_attempt_fn fn, void *arg,
                                 zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_ATTEMPTS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    FOR_ROWS(s, st, err, "listing attempts", {
        zt_attempt_rec r;
        row_attempt(st, &r);
        fn(arg, &r);
    });
    return ZT_OK;
}

zt_status zt_store_rank_save(zt_store *s, const zt_rank_rec *r, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_RANK_SAVE, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, r->attempt_id);
    sqlite3_bind_int(st, 2, r->rank);
    bind_text(st, 3, r->agent);
    sqlite3_bind_int(st, 4, r->local_rank);
    sqlite3_bind_int(st, 5, r->device_index);
    sqlite3_bind_int(st, 6, r->pid);
    sqlite3_bind_int(st, 7, r->exited);
    sqlite3_bind_int(st, 8, r->exit_code);
    sqlite3_bind_int(st, 9, r->exit_signal);
    sqlite3_bind_int64(st, 10, r->last_step);
    return exec_done(s, st, err, "saving a rank");
}

zt_status zt_store_ranks_list(zt_store *s, int64_t attempt_id, zt_store_rank_fn fn, void *arg,
                              zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_RANKS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, attempt_id);
    FOR_ROWS(s, st, err, "listing ranks", {
        zt_rank_rec r = {0};
        r.attempt_id = sqlite3_column_int64(st, 0);
        r.rank = sqlite3_column_int(st, 1);
        r.agent = col_text_or_empty(st, 2);
        r.local_rank = sqlite3_column_int(st, 3);
        r.device_index = sqlite3_column_int(st, 4);
        r.pid = sqlite3_column_int(st, 5);
        r.exited = sqlite3_column_int(st, 6) != 0;
        r.exit_code = sqlite3_column_int(st, 7);
        r.exit_signal = sqlite3_column_int(st, 8);
        r.last_step = sqlite3_column_int64(st, 9);
        fn(arg, &r);
    });
    return ZT_OK;
}

/* ---- agents ------------------------------------------------------------------------------ */

zt_status zt_store_agent_save(zt_store *s, const zt_agent_rec *r, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_AGENT_SAVE, err);
    if (!st)
        return ZT_ERR_DB;
    bind_text(st, 1, r->name);
    bind_text(st, 2, r->hostname ? r->hostname : "");
    bind_text(st, 3, r->address ? r->address : "");
    bind_text(st, 4, r->version ? r->version : "");
    sqlite3_bind_int(st, 5, r->device);
    sqlite3_bind_int(st, 6, r->slots);
    bind_text(st, 7, r->gpus_json ? r->gpus_json : "[]");
    sqlite3_bind_int64(st, 8, r->incarnation);
    bind_text(st, 9, zt_agent_state_name(r->state));
    sqlite3_bind_int64(st, 10, r->registered_ms);
    sqlite3_bind_int64(st, 11, r->last_seen_ms);
    bind_text(st, 12, r->key_sha256 ? r->key_sha256 : "");
    return exec_done(s, st, err, "saving an agent");
}

zt_status zt_store_agents_list(zt_store *s, zt_store_agent_fn fn, void *arg, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_AGENTS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    FOR_ROWS(s, st, err, "listing agents", {
        zt_agent_rec r = {0};
        r.name = col_text_or_empty(st, 0);
        r.hostname = col_text_or_empty(st, 1);
        r.address = col_text_or_empty(st, 2);
        r.version = col_text_or_empty(st, 3);
        r.device = sqlite3_column_int(st, 4);
        r.slots = sqlite3_column_int(st, 5);
        r.gpus_json = col_text_or_empty(st, 6);
        r.incarnation = sqlite3_column_int64(st, 7);
        r.state = (zt_agent_state)zt_agent_state_parse(col_text(st, 8));
        r.registered_ms = sqlite3_column_int64(st, 9);
        r.last_seen_ms = sqlite3_column_int64(st, 10);
        r.key_sha256 = col_text_or_empty(st, 11);
        fn(arg, &r);
    });
    return ZT_OK;
}

/* ---- events and logs --------------------------------------------------------------------- */

zt_status zt_store_event_add(zt_store *s, const zt_event_rec *r, int64_t *id, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_EVENT_ADD, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, r->time_ms);
    if (r->job_id)
        sqlite3_bind_int64(st, 2, r->job_id);
    if (r->attempt_id)
        sqlite3_bind_int64(st, 3, r->attempt_id);
    bind_text(st, 4, r->agent);
    bind_text(st, 5, r->kind ? r->kind : "job");
    bind_text(st, 6, r->from_state ? r->from_state : "");
    bind_text(st, 7, r->to_state ? r->to_state : "");
    bind_text(st, 8, r->reason ? r->reason : "");
    zt_status q = exec_done(s, st, err, "recording an event");
    if (q == ZT_OK && id)
        *id = sqlite3_last_insert_rowid(s->db);
    return q;
}

zt_status zt_store_events_list(zt_store *s, int64_t job_id, int limit, zt_store_event_fn fn,
                               void *arg, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_EVENTS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int(st, 2, limit > 0 ? limit : -1);
    FOR_ROWS(s, st, err, "listing events", {
        zt_event_rec r = {0};
        r.id = sqlite3_column_int64(st, 0);
        r.time_ms = sqlite3_column_int64(st, 1);
        r.job_id = sqlite3_column_int64(st, 2);
        r.attempt_id = sqlite3_column_int64(st, 3);
        r.agent = col_text(st, 4);
        r.kind = col_text_or_empty(st, 5);
        r.from_state = col_text_or_empty(st, 6);
        r.to_state = col_text_or_empty(st, 7);
        r.reason = col_text_or_empty(st, 8);
        fn(arg, &r);
    });
    return ZT_OK;
}

zt_status zt_store_log_add(zt_store *s, const zt_log_rec *r, int64_t *id, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_LOG_ADD, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, r->job_id);
    sqlite3_bind_int64(st, 2, r->attempt_id);
    sqlite3_bind_int(st, 3, r->rank);
    sqlite3_bind_int(st, 4, r->source);
    sqlite3_bind_int64(st, 5, r->time_ms);
    bind_text(st, 6, r->text ? r->text : "");
    zt_status q = exec_done(s, st, err, "recording a log line");
    if (q == ZT_OK && id)
        *id = sqlite3_last_insert_rowid(s->db);
    return q;
}

zt_status zt_store_logs_prune(zt_store *s, int64_t job_id, int64_t keep, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_LOGS_PRUNE, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, keep);
    return exec_done(s, st, err, "pruning log lines");
}

zt_status zt_store_logs_list(zt_store *s, int64_t job_id, int64_t after_id, int limit, int tail,
                             const char *ranks_json, bool no_events, zt_store_log_fn fn, void *arg,
                             zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_LOGS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, after_id);
    bind_text(st, 3, ranks_json);
    sqlite3_bind_int(st, 4, no_events);
    sqlite3_bind_int(st, 5, tail > 0 ? tail : -1);
    sqlite3_bind_int(st, 6, limit > 0 ? limit : -1);
    FOR_ROWS(s, st, err, "listing log lines", {
        zt_log_rec r = {0};
        r.id = sqlite3_column_int64(st, 0);
        r.time_ms = sqlite3_column_int64(st, 1);
        r.job_id = sqlite3_column_int64(st, 2);
        r.attempt_id = sqlite3_column_int64(st, 3);
        r.rank = sqlite3_column_int(st, 4);
        r.source = sqlite3_column_int(st, 5);
        r.text = col_text_or_empty(st, 6);
        fn(arg, &r);
    });
    return ZT_OK;
}

static zt_status count_of(zt_store *s, stmt_id id, int64_t key, int64_t *count, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, id, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, key);
    return query_int(s, st, count, err, "counting rows");
}

zt_status zt_store_job_state_counts(zt_store *s, int64_t counts[8], zt_err *err)
{
    for (int i = 0; i < 8; i++)
        counts[i] = 0;
    sqlite3_stmt *st = stmt(s, S_JOB_STATE_COUNTS, err);
    if (!st)
        return ZT_ERR_DB;
    FOR_ROWS(s, st, err, "counting jobs by state", {
        int state = zt_job_state_parse(col_text_or_empty(st, 0));
        if (state > 0 && state < 8)
            counts[state] = sqlite3_column_int64(st, 1);
    });
    return ZT_OK;
}

zt_status zt_store_logs_count(zt_store *s, int64_t job_id, int64_t *count, zt_err *err)
{
    return count_of(s, S_LOGS_COUNT, job_id, count, err);
}

/* ---- metrics ----------------------------------------------------------------------------- */

zt_status zt_store_metric_add(zt_store *s, const zt_metric_rec *r, bool *added, zt_err *err)
{
    if (added)
        *added = false;
    for (int pass = 0; pass < 2; pass++) { /* insert; when the step has a row, replace it */
        sqlite3_stmt *st = stmt(s, pass ? S_METRIC_REPLACE : S_METRIC_ADD, err);
        if (!st)
            return ZT_ERR_DB;
        sqlite3_bind_int64(st, 1, r->job_id);
        sqlite3_bind_int64(st, 2, r->step);
        sqlite3_bind_int64(st, 3, r->attempt_id);
        sqlite3_bind_int64(st, 4, r->time_ms);
        bind_text(st, 5, r->kv ? r->kv : "");
        zt_status q = exec_done(s, st, err, "recording metrics");
        if (q != ZT_OK)
            return q;
        if (!pass && sqlite3_changes(s->db) > 0) {
            if (added)
                *added = true;
            return ZT_OK;
        }
    }
    return ZT_OK;
}

zt_status zt_store_metrics_thin(zt_store *s, int64_t job_id, int64_t stride, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_METRICS_THIN, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, stride > 0 ? stride : 1);
    return exec_done(s, st, err, "thinning metrics");
}

zt_status zt_store_metrics_list(zt_store *s, int64_t job_id, int64_t from_step,
                                zt_store_metric_fn fn, void *arg, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_METRICS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, from_step);
    FOR_ROWS(s, st, err, "listing metrics", {
        zt_metric_rec r = {0};
        r.job_id = sqlite3_column_int64(st, 0);
        r.attempt_id = sqlite3_column_int64(st, 1);
        r.step = sqlite3_column_int64(st, 2);
        r.time_ms = sqlite3_column_int64(st, 3);
        r.kv = col_text_or_empty(st, 4);
        fn(arg, &r);
    });
    return ZT_OK;
}

zt_status zt_store_metrics_count(zt_store *s, int64_t job_id, int64_t *count, zt_err *err)
{
    return count_of(s, S_METRICS_COUNT, job_id, count, err);
}

/* ---- checkpoints ------------------------------------------------------------------------- */

zt_status zt_store_ckpt_shard_add(zt_store *s, int64_t job_id, int64_t attempt_id, int64_t step,
                                  const char *dir, int world_size, const zt_shard_rec *shard,
                                  int64_t now_ms, int64_t *ckpt_id, int *shards, bool *committed,
                                  zt_err *err)
{
    *committed = false;
    *shards = 0;
    *ckpt_id = 0;
    sqlite3_stmt *st = stmt(s, S_CKPT_FIND, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    bind_text(st, 2, dir);
    int64_t id = 0, old_attempt = 0;
    int old_world = 0;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        id = sqlite3_column_int64(st, 0);
        old_attempt = sqlite3_column_int64(st, 1);
        old_world = sqlite3_column_int(st, 2);
    } else if (rc != SQLITE_DONE) {
        sqlite3_reset(st);
        return db_err(s, err, "looking up a checkpoint");
    }
    sqlite3_reset(st);
    zt_status q;
    if (!id) {
        if (!(st = stmt(s, S_CKPT_INSERT, err)))
            return ZT_ERR_DB;
        sqlite3_bind_int64(st, 1, job_id);
        sqlite3_bind_int64(st, 2, attempt_id);
        sqlite3_bind_int64(st, 3, step);
        bind_text(st, 4, dir);
        sqlite3_bind_int(st, 5, world_size);
        sqlite3_bind_int64(st, 6, now_ms);
        bind_text(st, 7, "PARTIAL");
        sqlite3_bind_int64(st, 8, 0);
        if ((q = exec_done(s, st, err, "recording a checkpoint")) != ZT_OK)
            return q;
        id = sqlite3_last_insert_rowid(s->db);
    } else if (old_attempt != attempt_id || old_world != world_size) {
        /* another attempt writes this directory again: its earlier shards do not count */
        if (!(st = stmt(s, S_CKPT_RESET, err)))
            return ZT_ERR_DB;
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, attempt_id);
        sqlite3_bind_int64(st, 3, step);
        sqlite3_bind_int(st, 4, world_size);
        sqlite3_bind_int64(st, 5, now_ms);
        if ((q = exec_done(s, st, err, "resetting a checkpoint")) != ZT_OK)
            return q;
        if (!(st = stmt(s, S_CKPT_CLEAR_SHARDS, err)))
            return ZT_ERR_DB;
        sqlite3_bind_int64(st, 1, id);
        if ((q = exec_done(s, st, err, "clearing checkpoint shards")) != ZT_OK)
            return q;
    }
    if (!(st = stmt(s, S_SHARD_SAVE, err)))
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int(st, 2, shard->rank);
    bind_text(st, 3, shard->file);
    sqlite3_bind_int64(st, 4, shard->bytes);
    sqlite3_bind_int64(st, 5, shard->crc32c);
    sqlite3_bind_int64(st, 6, now_ms);
    if ((q = exec_done(s, st, err, "recording a checkpoint shard")) != ZT_OK)
        return q;
    int64_t n = 0;
    if ((q = count_of(s, S_SHARD_COUNT, id, &n, err)) != ZT_OK)
        return q;
    *ckpt_id = id;
    *shards = (int)n;
    if (n >= world_size) {
        if (!(st = stmt(s, S_CKPT_COMMIT, err)))
            return ZT_ERR_DB;
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, now_ms);
        if ((q = exec_done(s, st, err, "committing a checkpoint")) != ZT_OK)
            return q;
        *committed = sqlite3_changes(s->db) > 0;
    }
    return ZT_OK;
}

zt_status zt_store_ckpt_commit(zt_store *s, int64_t ckpt_id, int64_t now_ms, bool *changed,
                               zt_err *err)
{
    if (changed)
        *changed = false;
    sqlite3_stmt *st = stmt(s, S_CKPT_COMMIT, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, ckpt_id);
    sqlite3_bind_int64(st, 2, now_ms);
    zt_status q = exec_done(s, st, err, "committing a checkpoint");
    if (q == ZT_OK && changed)
        *changed = sqlite3_changes(s->db) > 0;
    return q;
}

static void row_ckpt(sqlite3_stmt *st, zt_ckpt_rec *r)
{
    memset(r, 0, sizeof(*r));
    r->id = sqlite3_column_int64(st, 0);
    r->job_id = sqlite3_column_int64(st, 1);
    r->attempt_id = sqlite3_column_int64(st, 2);
    r->step = sqlite3_column_int64(st, 3);
    r->path = col_text_or_empty(st, 4);
    r->state = (zt_ckpt_state)zt_ckpt_state_parse(col_text(st, 5));
    r->world_size = sqlite3_column_int(st, 6);
    r->shards = sqlite3_column_int(st, 7);
    r->bytes = sqlite3_column_int64(st, 8);
    r->created_ms = sqlite3_column_int64(st, 9);
    r->committed_ms = sqlite3_column_int64(st, 10);
    r->deleted_ms = sqlite3_column_int64(st, 11);
    r->bad_reason = col_text_or_empty(st, 12);
}

zt_status zt_store_ckpt_remove(zt_store *s, int64_t job_id, int64_t attempt_id, int64_t step,
                               const char *dir, int world_size, int64_t now_ms, int64_t *ckpt_id,
                               zt_ckpt_state *before, zt_err *err)
{
    *ckpt_id = 0;
    *before = 0;
    sqlite3_stmt *st = stmt(s, S_CKPT_FIND, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    bind_text(st, 2, dir);
    int64_t id = 0;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        id = sqlite3_column_int64(st, 0);
        *before = (zt_ckpt_state)zt_ckpt_state_parse(col_text(st, 3));
    } else if (rc != SQLITE_DONE) {
        sqlite3_reset(st);
        return db_err(s, err, "looking up a checkpoint");
    }
    sqlite3_reset(st);
    if (id) {
        *ckpt_id = id;
        if (*before == ZT_CKPT_DELETED)
            return ZT_OK;
        if (!(st = stmt(s, S_CKPT_DELETE, err)))
            return ZT_ERR_DB;
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, now_ms);
        return exec_done(s, st, err, "marking a checkpoint deleted");
    }
    /* never heard of (its shard reports were lost or are late): recorded as DELETED, so a
     * late shard report of the same attempt cannot make it usable */
    if (!(st = stmt(s, S_CKPT_INSERT, err)))
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, attempt_id);
    sqlite3_bind_int64(st, 3, step);
    bind_text(st, 4, dir);
    sqlite3_bind_int(st, 5, world_size > 0 ? world_size : 1);
    sqlite3_bind_int64(st, 6, now_ms);
    bind_text(st, 7, "DELETED");
    sqlite3_bind_int64(st, 8, now_ms);
    zt_status q = exec_done(s, st, err, "recording a deleted checkpoint");
    if (q == ZT_OK)
        *ckpt_id = sqlite3_last_insert_rowid(s->db);
    return q;
}

zt_status zt_store_ckpt_mark_bad(zt_store *s, int64_t job_id, const char *dir, const char *reason,
                                 int64_t *ckpt_id, int64_t *step, zt_ckpt_state *before,
                                 zt_err *err)
{
    *ckpt_id = 0;
    *step = 0;
    *before = 0;
    sqlite3_stmt *st = stmt(s, S_CKPT_FIND, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    bind_text(st, 2, dir);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *ckpt_id = sqlite3_column_int64(st, 0);
        *before = (zt_ckpt_state)zt_ckpt_state_parse(col_text(st, 3));
        *step = sqlite3_column_int64(st, 4);
    } else if (rc != SQLITE_DONE) {
        sqlite3_reset(st);
        return db_err(s, err, "looking up a checkpoint");
    }
    sqlite3_reset(st);
    if (*before != ZT_CKPT_PARTIAL && *before != ZT_CKPT_COMMITTED)
        return ZT_OK;
    if (!(st = stmt(s, S_CKPT_MARK_BAD, err)))
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, *ckpt_id);
    bind_text(st, 2, reason ? reason : "");
    return exec_done(s, st, err, "marking a checkpoint bad");
}

zt_status zt_store_ckpts_list(zt_store *s, int64_t job_id, bool include_partial,
                              bool include_deleted, zt_store_ckpt_fn fn, void *arg, zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_CKPTS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int(st, 2, include_partial);
    sqlite3_bind_int(st, 3, include_deleted);
    FOR_ROWS(s, st, err, "listing checkpoints", {
        zt_ckpt_rec r;
        row_ckpt(st, &r);
        fn(arg, &r);
    });
    return ZT_OK;
}

zt_status zt_store_ckpt_latest(zt_store *s, int64_t job_id, zt_store_ckpt_fn fn, void *arg,
                               zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_CKPT_LATEST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    int n = 0;
    FOR_ROWS(s, st, err, "finding the latest checkpoint", {
        zt_ckpt_rec r;
        row_ckpt(st, &r);
        fn(arg, &r);
        n++;
    });
    if (!n)
        return zt_err_set(err, ZT_ERR_NOT_FOUND, "job %lld has no committed checkpoint",
                          (long long)job_id);
    return ZT_OK;
}

zt_status zt_store_ckpt_count(zt_store *s, int64_t job_id, int *committed, zt_err *err)
{
    int64_t n = 0;
    zt_status q = count_of(s, S_CKPT_COUNT, job_id, &n, err);
    *committed = (int)n;
    return q;
}

zt_status zt_store_shards_list(zt_store *s, int64_t ckpt_id, zt_store_shard_fn fn, void *arg,
                               zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_SHARDS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, ckpt_id);
    FOR_ROWS(s, st, err, "listing checkpoint shards", {
        zt_shard_rec r = {0};
        r.ckpt_id = sqlite3_column_int64(st, 0);
        r.rank = sqlite3_column_int(st, 1);
        r.file = col_text_or_empty(st, 2);
        r.bytes = sqlite3_column_int64(st, 3);
        r.crc32c = (uint32_t)sqlite3_column_int64(st, 4);
        r.reported_ms = sqlite3_column_int64(st, 5);
        fn(arg, &r);
    });
    return ZT_OK;
}

/* ---- rendezvous -------------------------------------------------------------------------- */

zt_status zt_store_rdzv_put(zt_store *s, int64_t attempt_id, int rank, const void *value, size_t len,
                            zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_RDZV_PUT, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, attempt_id);
    sqlite3_bind_int(st, 2, rank);
    sqlite3_bind_blob(st, 3, value, (int)len, SQLITE_TRANSIENT);
    return exec_done(s, st, err, "recording a rendezvous entry");
}

zt_status zt_store_rdzv_list(zt_store *s, int64_t attempt_id, zt_store_rdzv_fn fn, void *arg,
                             zt_err *err)
{
    sqlite3_stmt *st = stmt(s, S_RDZV_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, attempt_id);
    FOR_ROWS(s, st, err, "listing rendezvous entries", {
        fn(arg, sqlite3_column_int(st, 0), sqlite3_column_blob(st, 1),
           (size_t)sqlite3_column_bytes(st, 1));
    });
    return ZT_OK;
}

/* ---- one coordinator per database --------------------------------------------------------- */

struct zt_store_lock {
    int fd;
    char *path; /* "<db>.lock" */
};

/* Replaces the lock file's content with text, then fsyncs it. */
static zt_status lock_write(zt_store_lock *l, const char *text, zt_err *err)
{
    size_t n = strlen(text);
    /* write, then cut: a reader never finds the file empty between the two */
    if (pwrite(l->fd, text, n, 0) != (ssize_t)n || ftruncate(l->fd, (off_t)n) != 0 ||
        fsync(l->fd) != 0)
        return zt_err_set(err, ZT_ERR_IO, "cannot write the lock file %s: %s", l->path,
                          strerror(errno));
    return ZT_OK;
}

/* The value of "key=" in the holder's line into out ("" when absent). */
static void lock_field(const char *line, const char *key, char *out, size_t cap)
{
    out[0] = '\0';
    size_t kn = strlen(key);
    for (const char *p = line; (p = strstr(p, key)) != NULL; p += kn) {
        if ((p != line && p[-1] != ' ') || p[kn] != '=') continue;
        p += kn + 1;
        size_t n = strcspn(p, " \n");
        if (n >= cap) n = cap - 1;
        memcpy(out, p, n);
        out[n] = '\0';
        return;
    }
}

/* The error for a lock that another process holds, from what that process wrote. */
static zt_status lock_busy(int fd, const char *db_path, zt_err *err)
{
    char line[1024];
    ssize_t n = pread(fd, line, sizeof(line) - 1, 0);
    line[n > 0 ? n : 0] = '\0';
    char pid[32], grpc[300], http[300];
    lock_field(line, "pid", pid, sizeof(pid));
    lock_field(line, "grpc", grpc, sizeof(grpc));
    lock_field(line, "http", http, sizeof(http));
    if (!pid[0])
        return zt_err_set(
            err, ZT_ERR_EXISTS,
            "database %s is in use by another zcoord that is starting up; stop it first or use another --db",
            db_path);
    if (!grpc[0])
        return zt_err_set(
            err, ZT_ERR_EXISTS,
            "database %s is in use by zcoord pid %s (starting up); stop it first or use another --db",
            db_path, pid);
    return zt_err_set(
        err, ZT_ERR_EXISTS,
        "database %s is in use by zcoord pid %s (grpc %s, http %s); stop it first or use another --db",
        db_path, pid, grpc, http[0] ? http : "off");
}

zt_status zt_store_lock_acquire(zt_store_lock **out, const char *db_path, zt_err *err)
{
    *out = NULL;
    zt_store_lock *l = zt_calloc(1, sizeof(*l));
    if (!l) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory locking the database");
    l->fd = -1;
    zt_status st = ZT_OK;
    l->path = zt_asprintf("%s.lock", db_path);
    if (!l->path) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory locking the database");
        goto free_lock;
    }
    l->fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
    if (l->fd < 0) {
        st = zt_err_set(
            err, ZT_ERR_IO,
            "cannot open the lock file %s of database %s: %s; zcoord needs to create and write it beside the database",
            l->path, db_path, strerror(errno));
        goto free_lock;
    }
    while (flock(l->fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EINTR) continue;
        if (errno == EWOULDBLOCK)
            st = lock_busy(l->fd, db_path, err);
        else
            st = zt_err_set(err, ZT_ERR_IO, "cannot lock %s (the lock of database %s): %s", l->path,
                            db_path, strerror(errno));
        goto close_fd;
    }
    char text[64];
    snprintf(text, sizeof(text), "pid=%d\n", (int)getpid());
    if ((st = lock_write(l, text, err)) != ZT_OK) goto close_fd;
    *out = l;
    return ZT_OK;

close_fd:
    close(l->fd);
free_lock:
    zt_free(l->path);
    zt_free(l);
    return st;
}

zt_status zt_store_lock_describe(zt_store_lock *l, const char *grpc, const char *http, zt_err *err)
{
    char *text = zt_asprintf("pid=%d grpc=%s http=%s\n", (int)getpid(), grpc, http);
    if (!text) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory writing the lock file");
    zt_status st = lock_write(l, text, err);
    zt_free(text);
    return st;
}

void zt_store_lock_release(zt_store_lock *l)
{
    if (!l) return;
    /* a stale pid in the file would only mislead a reader; the lock itself dies with the fd */
    if (ftruncate(l->fd, 0) != 0) ZT_WARN("store", "cannot empty %s: %s", l->path, strerror(errno));
    close(l->fd);
    zt_free(l->path);
    zt_free(l);
}
