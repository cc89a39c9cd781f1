/* zerotrain: the coordinator's SQLite store (see store.h): opening a database, its schema and
 * migrations, transactions, and the helpers every statement goes through. Every statement is
 * prepared once from the table in store_int.h and reused; the schema comes from the migrations
 * list, applied in order and recorded in PRAGMA user_version. The records live in
 * store_jobs.c and store_runs.c, the lock file in store_lock.c. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/store_int.h"

#include <stdio.h>
#include <string.h>

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

static const char *const stmt_sql[] = {
#define STMT_SQL(name, sql) sql,
    STMT_LIST(STMT_SQL)
#undef STMT_SQL
};

/* ---- helpers ----------------------------------------------------------------------------- */

zt_status store_db_err(zt_store *s, zt_err *err, const char *what)
{
    int code = sqlite3_extended_errcode(s->db);
    zt_status st = ZT_ERR_DB;
    if ((code & 0xff) == SQLITE_FULL)
        st = ZT_ERR_NOSPACE;
    return zt_err_set(err, st, "database %s: %s: %s (sqlite error %d)", s->path, what,
                      sqlite3_errmsg(s->db), code);
}

sqlite3_stmt *store_stmt(zt_store *s, stmt_id id, zt_err *err)
{
    sqlite3_stmt *st = s->stmts[id];
    if (!st) {
        if (sqlite3_prepare_v3(s->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) !=
            SQLITE_OK) {
            store_db_err(s, err, "preparing a statement");
            return NULL;
        }
        s->stmts[id] = st;
    } else {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    }
    return st;
}

void store_bind_text(sqlite3_stmt *st, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

const char *store_col_text(sqlite3_stmt *st, int i)
{
    return (const char *)sqlite3_column_text(st, i);
}

zt_status store_exec_done(zt_store *s, sqlite3_stmt *st, zt_err *err, const char *what)
{
    int rc = sqlite3_step(st);
    zt_status r = rc == SQLITE_DONE || rc == SQLITE_ROW ? ZT_OK : store_db_err(s, err, what);
    sqlite3_reset(st);
    return r;
}

static zt_status simple(zt_store *s, stmt_id id, zt_err *err, const char *what)
{
    sqlite3_stmt *st = store_stmt(s, id, err);
    if (!st)
        return err ? err->status : ZT_ERR_DB;
    return store_exec_done(s, st, err, what);
}

zt_status store_query_int(zt_store *s, sqlite3_stmt *st, int64_t *out, zt_err *err,
                          const char *what)
{
    int rc = sqlite3_step(st);
    *out = 0;
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    else if (rc != SQLITE_DONE) {
        sqlite3_reset(st);
        return store_db_err(s, err, what);
    }
    sqlite3_reset(st);
    return ZT_OK;
}

zt_status store_count_of(zt_store *s, stmt_id id, int64_t key, int64_t *count, zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, id, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, key);
    return store_query_int(s, st, count, err, "counting rows");
}

/* ---- tables of columns ------------------------------------------------------------------- */

_Static_assert(sizeof(zt_job_state) == sizeof(int) && sizeof(zt_attempt_state) == sizeof(int) &&
                   sizeof(zt_agent_state) == sizeof(int) && sizeof(zt_ckpt_state) == sizeof(int),
               "states are bound and read as int");

static const char *state_name(col_kind k, int v)
{
    switch (k) {
    case COL_JOB_STATE:
        return zt_job_state_name((zt_job_state)v);
    case COL_ATTEMPT_STATE:
        return zt_attempt_state_name((zt_attempt_state)v);
    case COL_AGENT_STATE:
        return zt_agent_state_name((zt_agent_state)v);
    default:
        return zt_ckpt_state_name((zt_ckpt_state)v);
    }
}

static int state_parse(col_kind k, const char *name)
{
    switch (k) {
    case COL_JOB_STATE:
        return zt_job_state_parse(name);
    case COL_ATTEMPT_STATE:
        return zt_attempt_state_parse(name);
    case COL_AGENT_STATE:
        return zt_agent_state_parse(name);
    default:
        return zt_ckpt_state_parse(name);
    }
}

/* The integer a field of kind k holds (COL_I32 and the states are int). */
static int64_t field_int(col_kind k, const char *p)
{
    int64_t i64;
    uint32_t u32;
    bool b;
    int i32;
    switch (k) {
    case COL_I64:
    case COL_I64_ID:
    case COL_I64_STRIDE:
        memcpy(&i64, p, sizeof(i64));
        return i64;
    case COL_U32:
        memcpy(&u32, p, sizeof(u32));
        return u32;
    case COL_BOOL:
        memcpy(&b, p, sizeof(b));
        return b;
    default:
        memcpy(&i32, p, sizeof(i32));
        return i32;
    }
}

/* Stores v into a field of kind k (the inverse of field_int). */
static void field_set_int(col_kind k, char *p, int64_t v)
{
    uint32_t u32 = (uint32_t)v;
    bool b = v != 0;
    int i32 = (int)v;
    switch (k) {
    case COL_I64:
    case COL_I64_ID:
    case COL_I64_STRIDE:
        memcpy(p, &v, sizeof(v));
        break;
    case COL_U32:
        memcpy(p, &u32, sizeof(u32));
        break;
    case COL_BOOL:
        memcpy(p, &b, sizeof(b));
        break;
    default:
        memcpy(p, &i32, sizeof(i32));
        break;
    }
}

static bool kind_is_text(col_kind k)
{
    return k == COL_TEXT || k == COL_TEXT_OR || k == COL_TEXT_KEY;
}

static bool kind_is_state(col_kind k)
{
    return k == COL_JOB_STATE || k == COL_ATTEMPT_STATE || k == COL_AGENT_STATE ||
           k == COL_CKPT_STATE;
}

void store_bind_cols(sqlite3_stmt *st, int first, const col_table *t, const void *rec)
{
    for (size_t i = 0; i < t->n; i++) {
        const col *c = &t->v[i];
        const char *p = (const char *)rec + c->off;
        int at = first + (int)i;
        if (kind_is_text(c->kind)) {
            const char *text;
            memcpy(&text, p, sizeof(text));
            if (c->kind == COL_TEXT_OR && !text)
                text = c->dflt;
            else if (c->kind == COL_TEXT_KEY && text && !text[0])
                text = NULL;
            store_bind_text(st, at, text);
            continue;
        }
        int64_t v = field_int(c->kind, p);
        if (kind_is_state(c->kind))
            store_bind_text(st, at, state_name(c->kind, (int)v));
        else if (c->kind == COL_I64_ID && !v)
            sqlite3_bind_null(st, at);
        else if (c->kind == COL_I64_STRIDE)
            sqlite3_bind_int64(st, at, v > 0 ? v : 1);
        else if (c->kind == COL_I32 || c->kind == COL_BOOL)
            sqlite3_bind_int(st, at, (int)v);
        else
            sqlite3_bind_int64(st, at, v);
    }
}

zt_status store_write(zt_store *s, stmt_id id, const col_table *t, const void *rec,
                      int64_t *rowid, zt_err *err, const char *what)
{
    sqlite3_stmt *st = store_stmt(s, id, err);
    if (!st)
        return ZT_ERR_DB;
    store_bind_cols(st, 1, t, rec);
    zt_status q = store_exec_done(s, st, err, what);
    if (q == ZT_OK && rowid)
        *rowid = sqlite3_last_insert_rowid(s->db);
    return q;
}

void store_read_cols(sqlite3_stmt *st, const col_table *t, void *rec)
{
    for (size_t i = 0; i < t->n; i++) {
        const col *c = &t->v[i];
        char *p = (char *)rec + c->off;
        int at = (int)i;
        if (kind_is_text(c->kind)) {
            const char *text = store_col_text(st, at);
            if (c->kind == COL_TEXT_OR && !text)
                text = "";
            memcpy(p, &text, sizeof(text));
        } else if (kind_is_state(c->kind)) {
            field_set_int(c->kind, p, state_parse(c->kind, store_col_text(st, at)));
        } else if (c->kind == COL_I32 || c->kind == COL_BOOL) {
            field_set_int(c->kind, p, sqlite3_column_int(st, at));
        } else {
            field_set_int(c->kind, p, sqlite3_column_int64(st, at));
        }
    }
}

bool store_row_next(zt_store *s, sqlite3_stmt *st, const col_table *t, void *rec, zt_status *q,
                    zt_err *err, const char *what)
{
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        if (t) {
            memset(rec, 0, t->rec_size);
            store_read_cols(st, t, rec);
        }
        return true;
    }
    *q = rc == SQLITE_DONE ? ZT_OK : store_db_err(s, err, what);
    sqlite3_reset(st);
    return false;
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
        return store_db_err(s, err, "reading the schema version");
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
