/* zerotrain: the store's records of what runs report (see store.h): events, log lines,
 * metrics, checkpoints with their shards, and rendezvous entries. Records are bound and read
 * through tables of columns (store_int.h). */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/store_int.h"

#include <string.h>

/* ---- events and logs --------------------------------------------------------------------- */

/* EVENTS_LIST's columns; EVENT_ADD's parameters are the same without the id */
static const col event_cols[] = {
    F_I64(zt_event_rec, id),
    F_I64(zt_event_rec, time_ms),
    F_ID(zt_event_rec, job_id),
    F_ID(zt_event_rec, attempt_id),
    F_TEXT(zt_event_rec, agent),
    F_TEXT_OR(zt_event_rec, kind, "job"),
    F_TEXT_OR(zt_event_rec, from_state, ""),
    F_TEXT_OR(zt_event_rec, to_state, ""),
    F_TEXT_OR(zt_event_rec, reason, ""),
};
static const col_table event_row = COL_TABLE(zt_event_rec, event_cols);
static const col_table event_add = {event_cols + 1, sizeof(event_cols) / sizeof(event_cols[0]) - 1,
                                    sizeof(zt_event_rec)};

/* LOG_ADD's parameters */
static const col log_add_cols[] = {
    F_I64(zt_log_rec, job_id),  F_I64(zt_log_rec, attempt_id), F_I32(zt_log_rec, rank),
    F_I32(zt_log_rec, source),  F_I64(zt_log_rec, time_ms),    F_TEXT_OR(zt_log_rec, text, ""),
};
static const col_table log_add = COL_TABLE(zt_log_rec, log_add_cols);

/* LOGS_LIST's columns */
static const col log_row_cols[] = {
    F_I64(zt_log_rec, id),      F_I64(zt_log_rec, time_ms), F_I64(zt_log_rec, job_id),
    F_I64(zt_log_rec, attempt_id), F_I32(zt_log_rec, rank), F_I32(zt_log_rec, source),
    F_TEXT_OR(zt_log_rec, text, ""),
};
static const col_table log_row = COL_TABLE(zt_log_rec, log_row_cols);

zt_status zt_store_event_add(zt_store *s, const zt_event_rec *r, int64_t *id, zt_err *err)
{
    return store_write(s, S_EVENT_ADD, &event_add, r, id, err, "recording an event");
}

zt_status zt_store_events_list(zt_store *s, int64_t job_id, int limit, zt_store_event_fn fn,
                               void *arg, zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_EVENTS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int(st, 2, limit > 0 ? limit : -1);
    zt_event_rec r;
    zt_status q;
    while (store_row_next(s, st, &event_row, &r, &q, err, "listing events"))
        fn(arg, &r);
    return q;
}

zt_status zt_store_log_add(zt_store *s, const zt_log_rec *r, int64_t *id, zt_err *err)
{
    return store_write(s, S_LOG_ADD, &log_add, r, id, err, "recording a log line");
}

zt_status zt_store_logs_prune(zt_store *s, int64_t job_id, int64_t keep, zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_LOGS_PRUNE, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, keep);
    return store_exec_done(s, st, err, "pruning log lines");
}

zt_status zt_store_logs_list(zt_store *s, int64_t job_id, int64_t after_id, int limit, int tail,
                             const char *ranks_json, bool no_events, zt_store_log_fn fn, void *arg,
                             zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_LOGS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, after_id);
    store_bind_text(st, 3, ranks_json);
    sqlite3_bind_int(st, 4, no_events);
    sqlite3_bind_int(st, 5, tail > 0 ? tail : -1);
    sqlite3_bind_int(st, 6, limit > 0 ? limit : -1);
    zt_log_rec r;
    zt_status q;
    while (store_row_next(s, st, &log_row, &r, &q, err, "listing log lines"))
        fn(arg, &r);
    return q;
}

zt_status zt_store_job_state_counts(zt_store *s, int64_t counts[8], zt_err *err)
{
    for (int i = 0; i < 8; i++)
        counts[i] = 0;
    sqlite3_stmt *st = store_stmt(s, S_JOB_STATE_COUNTS, err);
    if (!st)
        return ZT_ERR_DB;
    zt_status q;
    while (store_row_next(s, st, NULL, NULL, &q, err, "counting jobs by state")) {
        const char *name = store_col_text(st, 0);
        int state = zt_job_state_parse(name ? name : "");
        if (state > 0 && state < 8)
            counts[state] = sqlite3_column_int64(st, 1);
    }
    return q;
}

zt_status zt_store_logs_count(zt_store *s, int64_t job_id, int64_t *count, zt_err *err)
{
    return store_count_of(s, S_LOGS_COUNT, job_id, count, err);
}

/* ---- metrics ----------------------------------------------------------------------------- */

/* METRIC_ADD's and METRIC_REPLACE's parameters */
static const col metric_add_cols[] = {
    F_I64(zt_metric_rec, job_id),  F_I64(zt_metric_rec, step), F_I64(zt_metric_rec, attempt_id),
    F_I64(zt_metric_rec, time_ms), F_TEXT_OR(zt_metric_rec, kv, ""),
};
static const col_table metric_add = COL_TABLE(zt_metric_rec, metric_add_cols);

/* METRICS_LIST's columns */
static const col metric_row_cols[] = {
    F_I64(zt_metric_rec, job_id),  F_I64(zt_metric_rec, attempt_id), F_I64(zt_metric_rec, step),
    F_I64(zt_metric_rec, time_ms), F_TEXT_OR(zt_metric_rec, kv, ""),
};
static const col_table metric_row = COL_TABLE(zt_metric_rec, metric_row_cols);

zt_status zt_store_metric_add(zt_store *s, const zt_metric_rec *r, bool *added, zt_err *err)
{
    if (added)
        *added = false;
    for (int pass = 0; pass < 2; pass++) { /* insert; when the step has a row, replace it */
        zt_status q = store_write(s, pass ? S_METRIC_REPLACE : S_METRIC_ADD, &metric_add, r,
                                  NULL, err, "recording metrics");
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
    sqlite3_stmt *st = store_stmt(s, S_METRICS_THIN, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, stride > 0 ? stride : 1);
    return store_exec_done(s, st, err, "thinning metrics");
}

zt_status zt_store_metrics_list(zt_store *s, int64_t job_id, int64_t from_step,
                                zt_store_metric_fn fn, void *arg, zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_METRICS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, from_step);
    zt_metric_rec r;
    zt_status q;
    while (store_row_next(s, st, &metric_row, &r, &q, err, "listing metrics"))
        fn(arg, &r);
    return q;
}

zt_status zt_store_metrics_count(zt_store *s, int64_t job_id, int64_t *count, zt_err *err)
{
    return store_count_of(s, S_METRICS_COUNT, job_id, count, err);
}

/* ---- checkpoints ------------------------------------------------------------------------- */

/* CKPT_COLS */
static const col ckpt_cols[] = {
    F_I64(zt_ckpt_rec, id),
    F_I64(zt_ckpt_rec, job_id),
    F_I64(zt_ckpt_rec, attempt_id),
    F_I64(zt_ckpt_rec, step),
    F_TEXT_OR(zt_ckpt_rec, path, ""),
    F_CKPT_STATE(zt_ckpt_rec, state),
    F_I32(zt_ckpt_rec, world_size),
    F_I32(zt_ckpt_rec, shards),
    F_I64(zt_ckpt_rec, bytes),
    F_I64(zt_ckpt_rec, created_ms),
    F_I64(zt_ckpt_rec, committed_ms),
    F_I64(zt_ckpt_rec, deleted_ms),
    F_TEXT_OR(zt_ckpt_rec, bad_reason, ""),
};
static const col_table ckpt_row = COL_TABLE(zt_ckpt_rec, ckpt_cols);

/* SHARD_SAVE's parameters and SHARDS_LIST's columns */
static const col shard_cols[] = {
    F_I64(zt_shard_rec, ckpt_id), F_I32(zt_shard_rec, rank),  F_TEXT_OR(zt_shard_rec, file, NULL),
    F_I64(zt_shard_rec, bytes),   F_U32(zt_shard_rec, crc32c), F_I64(zt_shard_rec, reported_ms),
};
static const col_table shard_table = COL_TABLE(zt_shard_rec, shard_cols);

/* CKPT_INSERT's parameters */
static const col ckpt_insert_cols[] = {
    F_I64(zt_ckpt_rec, job_id),         F_I64(zt_ckpt_rec, attempt_id),
    F_I64(zt_ckpt_rec, step),           F_TEXT_OR(zt_ckpt_rec, path, NULL),
    F_I32(zt_ckpt_rec, world_size),     F_I64(zt_ckpt_rec, created_ms),
    F_CKPT_STATE(zt_ckpt_rec, state),   F_I64(zt_ckpt_rec, deleted_ms),
};
static const col_table ckpt_insert = COL_TABLE(zt_ckpt_rec, ckpt_insert_cols);

/* CKPT_FIND's columns */
static const col ckpt_find_cols[] = {
    F_I64(zt_ckpt_rec, id), F_I64(zt_ckpt_rec, attempt_id), F_I32(zt_ckpt_rec, world_size),
    F_CKPT_STATE(zt_ckpt_rec, state), F_I64(zt_ckpt_rec, step),
};
static const col_table ckpt_found = COL_TABLE(zt_ckpt_rec, ckpt_find_cols);

/* Job job_id's checkpoint at dir into *k (zeroed: k->id 0 when there is none). */
static zt_status ckpt_find(zt_store *s, int64_t job_id, const char *dir, zt_ckpt_rec *k,
                           zt_err *err)
{
    memset(k, 0, sizeof(*k));
    sqlite3_stmt *st = store_stmt(s, S_CKPT_FIND, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    store_bind_text(st, 2, dir);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        store_read_cols(st, &ckpt_found, k);
    } else if (rc != SQLITE_DONE) {
        sqlite3_reset(st);
        return store_db_err(s, err, "looking up a checkpoint");
    }
    sqlite3_reset(st);
    return ZT_OK;
}

zt_status zt_store_ckpt_shard_add(zt_store *s, int64_t job_id, int64_t attempt_id, int64_t step,
                                  const char *dir, int world_size, const zt_shard_rec *shard,
                                  int64_t now_ms, int64_t *ckpt_id, int *shards, bool *committed,
                                  zt_err *err)
{
    *committed = false;
    *shards = 0;
    *ckpt_id = 0;
    zt_ckpt_rec old;
    zt_status q = ckpt_find(s, job_id, dir, &old, err);
    if (q != ZT_OK)
        return q;
    int64_t id = old.id;
    sqlite3_stmt *st;
    if (!id) {
        zt_ckpt_rec k = {.job_id = job_id,
                         .attempt_id = attempt_id,
                         .step = step,
                         .path = dir,
                         .world_size = world_size,
                         .created_ms = now_ms,
                         .state = ZT_CKPT_PARTIAL};
        if ((q = store_write(s, S_CKPT_INSERT, &ckpt_insert, &k, &id, err,
                             "recording a checkpoint")) != ZT_OK)
            return q;
    } else if (old.attempt_id != attempt_id || old.world_size != world_size) {
        /* another attempt writes this directory again: its earlier shards do not count */
        if (!(st = store_stmt(s, S_CKPT_RESET, err)))
            return ZT_ERR_DB;
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, attempt_id);
        sqlite3_bind_int64(st, 3, step);
        sqlite3_bind_int(st, 4, world_size);
        sqlite3_bind_int64(st, 5, now_ms);
        if ((q = store_exec_done(s, st, err, "resetting a checkpoint")) != ZT_OK)
            return q;
        if (!(st = store_stmt(s, S_CKPT_CLEAR_SHARDS, err)))
            return ZT_ERR_DB;
        sqlite3_bind_int64(st, 1, id);
        if ((q = store_exec_done(s, st, err, "clearing checkpoint shards")) != ZT_OK)
            return q;
    }
    zt_shard_rec sh = *shard;
    sh.ckpt_id = id;
    sh.reported_ms = now_ms;
    if ((q = store_write(s, S_SHARD_SAVE, &shard_table, &sh, NULL, err,
                         "recording a checkpoint shard")) != ZT_OK)
        return q;
    int64_t n = 0;
    if ((q = store_count_of(s, S_SHARD_COUNT, id, &n, err)) != ZT_OK)
        return q;
    *ckpt_id = id;
    *shards = (int)n;
    if (n >= world_size) {
        if (!(st = store_stmt(s, S_CKPT_COMMIT, err)))
            return ZT_ERR_DB;
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, now_ms);
        if ((q = store_exec_done(s, st, err, "committing a checkpoint")) != ZT_OK)
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
    sqlite3_stmt *st = store_stmt(s, S_CKPT_COMMIT, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, ckpt_id);
    sqlite3_bind_int64(st, 2, now_ms);
    zt_status q = store_exec_done(s, st, err, "committing a checkpoint");
    if (q == ZT_OK && changed)
        *changed = sqlite3_changes(s->db) > 0;
    return q;
}

zt_status zt_store_ckpt_remove(zt_store *s, int64_t job_id, int64_t attempt_id, int64_t step,
                               const char *dir, int world_size, int64_t now_ms, int64_t *ckpt_id,
                               zt_ckpt_state *before, zt_err *err)
{
    *ckpt_id = 0;
    *before = 0;
    zt_ckpt_rec old;
    zt_status q = ckpt_find(s, job_id, dir, &old, err);
    if (q != ZT_OK)
        return q;
    int64_t id = old.id;
    *before = old.state;
    sqlite3_stmt *st;
    if (id) {
        *ckpt_id = id;
        if (*before == ZT_CKPT_DELETED)
            return ZT_OK;
        if (!(st = store_stmt(s, S_CKPT_DELETE, err)))
            return ZT_ERR_DB;
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, now_ms);
        return store_exec_done(s, st, err, "marking a checkpoint deleted");
    }
    /* never heard of (its shard reports were lost or are late): recorded as DELETED, so a
     * late shard report of the same attempt cannot make it usable */
    zt_ckpt_rec k = {.job_id = job_id,
                     .attempt_id = attempt_id,
                     .step = step,
                     .path = dir,
                     .world_size = world_size > 0 ? world_size : 1,
                     .created_ms = now_ms,
                     .state = ZT_CKPT_DELETED,
                     .deleted_ms = now_ms};
    return store_write(s, S_CKPT_INSERT, &ckpt_insert, &k, ckpt_id, err,
                       "recording a deleted checkpoint");
}

zt_status zt_store_ckpt_mark_bad(zt_store *s, int64_t job_id, const char *dir, const char *reason,
                                 int64_t *ckpt_id, int64_t *step, zt_ckpt_state *before,
                                 zt_err *err)
{
    zt_ckpt_rec old;
    zt_status q = ckpt_find(s, job_id, dir, &old, err);
    *ckpt_id = old.id;
    *step = old.step;
    *before = old.state;
    if (q != ZT_OK)
        return q;
    sqlite3_stmt *st;
    if (*before != ZT_CKPT_PARTIAL && *before != ZT_CKPT_COMMITTED)
        return ZT_OK;
    if (!(st = store_stmt(s, S_CKPT_MARK_BAD, err)))
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, *ckpt_id);
    store_bind_text(st, 2, reason ? reason : "");
    return store_exec_done(s, st, err, "marking a checkpoint bad");
}

zt_status zt_store_ckpts_list(zt_store *s, int64_t job_id, bool include_partial,
                              bool include_deleted, zt_store_ckpt_fn fn, void *arg, zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_CKPTS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int(st, 2, include_partial);
    sqlite3_bind_int(st, 3, include_deleted);
    zt_ckpt_rec r;
    zt_status q;
    while (store_row_next(s, st, &ckpt_row, &r, &q, err, "listing checkpoints"))
        fn(arg, &r);
    return q;
}

zt_status zt_store_ckpt_latest(zt_store *s, int64_t job_id, zt_store_ckpt_fn fn, void *arg,
                               zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_CKPT_LATEST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    int n = 0;
    zt_ckpt_rec r;
    zt_status q;
    while (store_row_next(s, st, &ckpt_row, &r, &q, err, "finding the latest checkpoint")) {
        fn(arg, &r);
        n++;
    }
    if (q != ZT_OK)
        return q;
    if (!n)
        return zt_err_set(err, ZT_ERR_NOT_FOUND, "job %lld has no committed checkpoint",
                          (long long)job_id);
    return ZT_OK;
}

zt_status zt_store_ckpt_count(zt_store *s, int64_t job_id, int *committed, zt_err *err)
{
    int64_t n = 0;
    zt_status q = store_count_of(s, S_CKPT_COUNT, job_id, &n, err);
    *committed = (int)n;
    return q;
}

zt_status zt_store_shards_list(zt_store *s, int64_t ckpt_id, zt_store_shard_fn fn, void *arg,
                               zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_SHARDS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, ckpt_id);
    zt_shard_rec r;
    zt_status q;
    while (store_row_next(s, st, &shard_table, &r, &q, err, "listing checkpoint shards"))
        fn(arg, &r);
    return q;
}

/* ---- rendezvous -------------------------------------------------------------------------- */

zt_status zt_store_rdzv_put(zt_store *s, int64_t attempt_id, int rank, const void *value, size_t len,
                            zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_RDZV_PUT, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, attempt_id);
    sqlite3_bind_int(st, 2, rank);
    sqlite3_bind_blob(st, 3, value, (int)len, SQLITE_TRANSIENT);
    return store_exec_done(s, st, err, "recording a rendezvous entry");
}

zt_status zt_store_rdzv_list(zt_store *s, int64_t attempt_id, zt_store_rdzv_fn fn, void *arg,
                             zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_RDZV_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, attempt_id);
    zt_status q;
    while (store_row_next(s, st, NULL, NULL, &q, err, "listing rendezvous entries"))
        fn(arg, sqlite3_column_int(st, 0), sqlite3_column_blob(st, 1),
           (size_t)sqlite3_column_bytes(st, 1));
    return q;
}
