/* zerotrain: the store's jobs, attempts, ranks and agents (see store.h). Each record is bound
 * to its statements and read from their rows through a table of columns that follows the
 * statement's parameters or result columns in order (store_int.h). */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/store_int.h"

/* ---- jobs -------------------------------------------------------------------------------- */

/* JOB_INSERT's parameters */
static const col job_insert_cols[] = {
    F_TEXT_KEY(zt_job_rec, submit_key),
    F_TEXT(zt_job_rec, name),
    F_JOB_STATE(zt_job_rec, state),
    F_TEXT_OR(zt_job_rec, reason, ""),
    F_I32(zt_job_rec, priority),
    F_I32(zt_job_rec, ranks),
    F_I32(zt_job_rec, ranks_per_node),
    F_I32(zt_job_rec, device),
    F_I32(zt_job_rec, max_restarts),
    F_I32(zt_job_rec, restarts),
    F_I64(zt_job_rec, total_steps),
    F_I64(zt_job_rec, last_step),
    F_TEXT_OR(zt_job_rec, spec_text, ""),
    F_TEXT_OR(zt_job_rec, spec_dir, ""),
    F_TEXT_OR(zt_job_rec, spec_json, ""),
    F_TEXT_OR(zt_job_rec, spec_hash, ""),
    F_TEXT_OR(zt_job_rec, user, ""),
    F_I64(zt_job_rec, submitted_ms),
    F_I64(zt_job_rec, started_ms),
    F_I64(zt_job_rec, ended_ms),
    F_I64(zt_job_rec, attempt_id),
    F_STRIDE(zt_job_rec, metrics_stride),
    F_TEXT_OR(zt_job_rec, checkpoint_dir, ""),
};
static const col_table job_insert = COL_TABLE(zt_job_rec, job_insert_cols);

/* JOB_SAVE's parameters: what changes after the insert */
static const col job_save_cols[] = {
    F_I64(zt_job_rec, id),
    F_JOB_STATE(zt_job_rec, state),
    F_TEXT_OR(zt_job_rec, reason, ""),
    F_I32(zt_job_rec, restarts),
    F_I64(zt_job_rec, last_step),
    F_I64(zt_job_rec, started_ms),
    F_I64(zt_job_rec, ended_ms),
    F_I64(zt_job_rec, attempt_id),
    F_STRIDE(zt_job_rec, metrics_stride),
    F_I64(zt_job_rec, eligible_ms),
};
static const col_table job_save = COL_TABLE(zt_job_rec, job_save_cols);

/* JOB_COLS and JOB_COLS_LIGHT (whose spec_text and spec_json read NULL) */
static const col job_row_cols[] = {
    F_I64(zt_job_rec, id),
    F_TEXT(zt_job_rec, submit_key),
    F_TEXT_OR(zt_job_rec, name, NULL),
    F_JOB_STATE(zt_job_rec, state),
    F_TEXT_OR(zt_job_rec, reason, NULL),
    F_I32(zt_job_rec, priority),
    F_I32(zt_job_rec, ranks),
    F_I32(zt_job_rec, ranks_per_node),
    F_I32(zt_job_rec, device),
    F_I32(zt_job_rec, max_restarts),
    F_I32(zt_job_rec, restarts),
    F_I64(zt_job_rec, total_steps),
    F_I64(zt_job_rec, last_step),
    F_TEXT(zt_job_rec, spec_text),
    F_TEXT_OR(zt_job_rec, spec_dir, NULL),
    F_TEXT(zt_job_rec, spec_json),
    F_TEXT_OR(zt_job_rec, spec_hash, NULL),
    F_TEXT_OR(zt_job_rec, user, NULL),
    F_I64(zt_job_rec, submitted_ms),
    F_I64(zt_job_rec, started_ms),
    F_I64(zt_job_rec, ended_ms),
    F_I64(zt_job_rec, attempt_id),
    F_I64(zt_job_rec, metrics_stride),
    F_I64(zt_job_rec, eligible_ms),
    F_TEXT_OR(zt_job_rec, checkpoint_dir, NULL),
};
static const col_table job_row = COL_TABLE(zt_job_rec, job_row_cols);

/* Calls fn for each job row of st; *n counts them (n may be NULL). */
static zt_status job_rows(zt_store *s, sqlite3_stmt *st, zt_store_job_fn fn, void *arg, int *n,
                          zt_err *err, const char *what)
{
    zt_job_rec r;
    zt_status q;
    while (store_row_next(s, st, &job_row, &r, &q, err, what)) {
        fn(arg, &r);
        if (n)
            (*n)++;
    }
    return q;
}

zt_status zt_store_job_insert(zt_store *s, const zt_job_rec *r, int64_t *id, bool *existed,
                              zt_err *err)
{
    *id = 0;
    *existed = false;
    sqlite3_stmt *st;
    if (r->submit_key && r->submit_key[0]) {
        if (!(st = store_stmt(s, S_JOB_BY_KEY, err)))
            return ZT_ERR_DB;
        store_bind_text(st, 1, r->submit_key);
        zt_status q = store_query_int(s, st, id, err, "looking up a submit key");
        if (q != ZT_OK)
            return q;
        if (*id) {
            *existed = true;
            return ZT_OK;
        }
    }
    return store_write(s, S_JOB_INSERT, &job_insert, r, id, err, "inserting a job");
}

zt_status zt_store_job_save(zt_store *s, const zt_job_rec *r, zt_err *err)
{
    zt_status q = store_write(s, S_JOB_SAVE, &job_save, r, NULL, err, "updating a job");
    if (q == ZT_OK && sqlite3_changes(s->db) == 0)
        return zt_err_set(err, ZT_ERR_NOT_FOUND, "job %lld is not in the database",
                          (long long)r->id);
    return q;
}

zt_status zt_store_job_get(zt_store *s, int64_t id, zt_store_job_fn fn, void *arg, zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_JOB_GET, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, id);
    int n = 0;
    zt_status q = job_rows(s, st, fn, arg, &n, err, "reading a job");
    if (q != ZT_OK)
        return q;
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
    sqlite3_stmt *st = store_stmt(s, S_JOB_BY_KEY, err);
    if (!st)
        return ZT_ERR_DB;
    store_bind_text(st, 1, submit_key);
    return store_query_int(s, st, id, err, "looking up a submit key");
}

zt_status zt_store_job_by_ckpt_dir(zt_store *s, const char *dir, zt_store_job_fn fn, void *arg,
                                   zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_JOB_BY_CKPT_DIR, err);
    if (!st)
        return ZT_ERR_DB;
    store_bind_text(st, 1, dir);
    int n = 0;
    zt_status q = job_rows(s, st, fn, arg, &n, err, "looking up the job of a checkpoint directory");
    if (q != ZT_OK)
        return q;
    if (!n)
        return zt_err_set(err, ZT_ERR_NOT_FOUND, "no job has the checkpoint directory %s", dir);
    return ZT_OK;
}

zt_status zt_store_jobs_list(zt_store *s, unsigned state_mask, int64_t before_id, int limit,
                             zt_store_job_fn fn, void *arg, zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_JOBS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, before_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)state_mask);
    sqlite3_bind_int(st, 3, limit);
    return job_rows(s, st, fn, arg, NULL, err, "listing jobs");
}

zt_status zt_store_jobs_active(zt_store *s, zt_store_job_fn fn, void *arg, zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_JOBS_ACTIVE, err);
    if (!st)
        return ZT_ERR_DB;
    return job_rows(s, st, fn, arg, NULL, err, "loading active jobs");
}

/* ---- attempts and ranks ------------------------------------------------------------------ */

/* ATTEMPT_COLS; ATTEMPT_INSERT's parameters are the same without the id */
static const col attempt_cols[] = {
    F_I64(zt_attempt_rec, id),
    F_I64(zt_attempt_rec, job_id),
    F_I32(zt_attempt_rec, number),
    F_ATTEMPT_STATE(zt_attempt_rec, state),
    F_TEXT_OR(zt_attempt_rec, reason, ""),
    F_I32(zt_attempt_rec, world_size),
    F_TEXT_OR(zt_attempt_rec, resume_path, ""),
    F_I64(zt_attempt_rec, resume_step),
    F_I64(zt_attempt_rec, created_ms),
    F_I64(zt_attempt_rec, started_ms),
    F_I64(zt_attempt_rec, ended_ms),
};
static const col_table attempt_row = COL_TABLE(zt_attempt_rec, attempt_cols);
static const col_table attempt_insert = {attempt_cols + 1,
                                         sizeof(attempt_cols) / sizeof(attempt_cols[0]) - 1,
                                         sizeof(zt_attempt_rec)};

/* ATTEMPT_SAVE's parameters */
static const col attempt_save_cols[] = {
    F_I64(zt_attempt_rec, id),
    F_ATTEMPT_STATE(zt_attempt_rec, state),
    F_TEXT_OR(zt_attempt_rec, reason, ""),
    F_I64(zt_attempt_rec, started_ms),
    F_I64(zt_attempt_rec, ended_ms),
};
static const col_table attempt_save = COL_TABLE(zt_attempt_rec, attempt_save_cols);

/* RANK_SAVE's parameters and RANKS_LIST's columns */
static const col rank_cols[] = {
    F_I64(zt_rank_rec, attempt_id),
    F_I32(zt_rank_rec, rank),
    F_TEXT_OR(zt_rank_rec, agent, NULL),
    F_I32(zt_rank_rec, local_rank),
    F_I32(zt_rank_rec, device_index),
    F_I32(zt_rank_rec, pid),
    F_BOOL(zt_rank_rec, exited),
    F_I32(zt_rank_rec, exit_code),
    F_I32(zt_rank_rec, exit_signal),
    F_I64(zt_rank_rec, last_step),
};
static const col_table rank_table = COL_TABLE(zt_rank_rec, rank_cols);

zt_status zt_store_attempt_insert(zt_store *s, const zt_attempt_rec *r, int64_t *id, zt_err *err)
{
    return store_write(s, S_ATTEMPT_INSERT, &attempt_insert, r, id, err, "inserting an attempt");
}

zt_status zt_store_attempt_save(zt_store *s, const zt_attempt_rec *r, zt_err *err)
{
    return store_write(s, S_ATTEMPT_SAVE, &attempt_save, r, NULL, err, "updating an attempt");
}

zt_status zt_store_attempt_get(zt_store *s, int64_t id, zt_store_attempt_fn fn, void *arg,
                               zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_ATTEMPT_GET, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, id);
    int n = 0;
    zt_attempt_rec r;
    zt_status q;
    while (store_row_next(s, st, &attempt_row, &r, &q, err, "reading an attempt")) {
        fn(arg, &r);
        n++;
    }
    if (q != ZT_OK)
        return q;
    if (!n)
        return zt_err_set(err, ZT_ERR_NOT_FOUND, "attempt %lld not found", (long long)id);
    return ZT_OK;
}

zt_status zt_store_attempts_list(zt_store *s, int64_t job_id, zt_store_attempt_fn fn, void *arg,
                                 zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_ATTEMPTS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, job_id);
    zt_attempt_rec r;
    zt_status q;
    while (store_row_next(s, st, &attempt_row, &r, &q, err, "listing attempts"))
        fn(arg, &r);
    return q;
}

zt_status zt_store_rank_save(zt_store *s, const zt_rank_rec *r, zt_err *err)
{
    return store_write(s, S_RANK_SAVE, &rank_table, r, NULL, err, "saving a rank");
}

zt_status zt_store_ranks_list(zt_store *s, int64_t attempt_id, zt_store_rank_fn fn, void *arg,
                              zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_RANKS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    sqlite3_bind_int64(st, 1, attempt_id);
    zt_rank_rec r;
    zt_status q;
    while (store_row_next(s, st, &rank_table, &r, &q, err, "listing ranks"))
        fn(arg, &r);
    return q;
}

/* ---- agents ------------------------------------------------------------------------------ */

/* AGENT_SAVE's parameters and AGENTS_LIST's columns */
static const col agent_cols[] = {
    F_TEXT_OR(zt_agent_rec, name, NULL),
    F_TEXT_OR(zt_agent_rec, hostname, ""),
    F_TEXT_OR(zt_agent_rec, address, ""),
    F_TEXT_OR(zt_agent_rec, version, ""),
    F_I32(zt_agent_rec, device),
    F_I32(zt_agent_rec, slots),
    F_TEXT_OR(zt_agent_rec, gpus_json, "[]"),
    F_I64(zt_agent_rec, incarnation),
    F_AGENT_STATE(zt_agent_rec, state),
    F_I64(zt_agent_rec, registered_ms),
    F_I64(zt_agent_rec, last_seen_ms),
    F_TEXT_OR(zt_agent_rec, key_sha256, ""),
};
static const col_table agent_table = COL_TABLE(zt_agent_rec, agent_cols);

zt_status zt_store_agent_save(zt_store *s, const zt_agent_rec *r, zt_err *err)
{
    return store_write(s, S_AGENT_SAVE, &agent_table, r, NULL, err, "saving an agent");
}

zt_status zt_store_agents_list(zt_store *s, zt_store_agent_fn fn, void *arg, zt_err *err)
{
    sqlite3_stmt *st = store_stmt(s, S_AGENTS_LIST, err);
    if (!st)
        return ZT_ERR_DB;
    zt_agent_rec r;
    zt_status q;
    while (store_row_next(s, st, &agent_table, &r, &q, err, "listing agents"))
        fn(arg, &r);
    return q;
}
