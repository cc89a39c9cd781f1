/* Tests coordinator/store.c on a real SQLite file: migrations (fresh, from an older schema,
 * the checkpoints table rebuilt by schema 3 with its shards and foreign keys, the restart
 * backoff column of schema 4, refusing a newer one), jobs with idempotent submission,
 * attempts and ranks, foreign keys, events, logs (filters, tail, pruning), metrics (a
 * replaced step is not a new row) and thinning, checkpoints committed by the last
 * shard in one transaction and DELETED when keep_checkpoints removes them, rendezvous entries,
 * rollback, and a read-only handle. */
#define _POSIX_C_SOURCE 200809L
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "coordinator/store.h"
#include "tests/test.h"

static char dir[64];
static char path[128];

static void cleanup_dir(void)
{
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (dir[0] && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

static int64_t g_count;
static char g_text[4096];
static int64_t g_ids[64];

static void count_job(void *arg, const zt_job_rec *r)
{
    (void)arg;
    if (g_count < 64) g_ids[g_count] = r->id;
    g_count++;
}

static void keep_job(void *arg, const zt_job_rec *r)
{
    zt_job_rec *out = arg;
    *out = *r;
    snprintf(g_text, sizeof(g_text), "%s|%s|%s|%s", r->name, r->spec_text ? r->spec_text : "(null)",
             zt_job_state_name(r->state), r->reason);
    out->name = out->spec_text = out->spec_json = out->reason = NULL;
}

static zt_job_rec job(const char *name, const char *key)
{
    zt_job_rec r = {.submit_key = key,
                    .name = name,
                    .state = ZT_JOB_QUEUED,
                    .reason = "submitted",
                    .ranks = 2,
                    .ranks_per_node = 2,
                    .device = 1,
                    .max_restarts = 1,
                    .total_steps = 100,
                    .spec_text = "{\"name\": \"x\"}",
                    .spec_dir = "/tmp",
                    .spec_json = "{}",
                    .spec_hash = "abc",
                    .user = "me",
                    .submitted_ms = 1000};
    return r;
}

static void test_migrations(void)
{
    zt_store *s;
    zt_err err = {0};
    ASSERT_OK(zt_store_open_at_version(&s, path, 1, &err));
    ASSERT_EQ_INT(zt_store_schema_version(s), 1);
    zt_store_close(s);
    ASSERT_OK(zt_store_open(&s, path, false, &err));
    ASSERT_EQ_INT(zt_store_schema_version(s), ZT_STORE_SCHEMA_VERSION);
    zt_store_close(s);
    /* the v2 indexes exist */
    sqlite3 *db;
    ASSERT_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *st;
    ASSERT_EQ_INT(
        sqlite3_prepare_v2(
            db,
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name IN ('events_job','logs_job','attempts_job','checkpoints_job','jobs_state')",
            -1, &st, NULL),
        SQLITE_OK);
    ASSERT_EQ_INT(sqlite3_step(st), SQLITE_ROW);
    ASSERT_EQ_INT(sqlite3_column_int(st, 0), 5);
    sqlite3_finalize(st);
    /* WAL mode is on */
    ASSERT_EQ_INT(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    ASSERT_EQ_INT(sqlite3_step(st), SQLITE_ROW);
    ASSERT_STREQ((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(db);

    /* a database from the future is refused with advice */
    char fut[160];
    snprintf(fut, sizeof(fut), "%s/future.db", dir);
    ASSERT_EQ_INT(sqlite3_open(fut, &db), SQLITE_OK);
    ASSERT_EQ_INT(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    zt_err_clear(&err);
    ASSERT_EQ_INT(zt_store_open(&s, fut, false, &err), ZT_ERR_STATE);
    ASSERT_CONTAINS(err.msg, "schema version 99");
    ASSERT_CONTAINS(err.msg, "newer zcoord");
    /* an unwritable place */
    ASSERT_NE_INT(zt_store_open(&s, "/nonexistent-dir/x.db", false, &err), ZT_OK);
    ASSERT_CONTAINS(err.msg, "/nonexistent-dir/x.db");
}

static void test_jobs(zt_store *s)
{
    zt_err err = {0};
    int64_t id1, id2, id3;
    bool existed;
    zt_job_rec r = job("a", "key-1");
    ASSERT_OK(zt_store_job_insert(s, &r, &id1, &existed, &err));
    ASSERT_TRUE(!existed);
    ASSERT_OK(zt_store_job_insert(s, &r, &id2, &existed, &err));
    ASSERT_TRUE(existed);
    ASSERT_EQ_INT(id2, id1);
    r = job("b", NULL);
    ASSERT_OK(zt_store_job_insert(s, &r, &id2, &existed, &err));
    r = job("c", "");
    ASSERT_OK(zt_store_job_insert(s, &r, &id3, &existed, &err));
    ASSERT_TRUE(id1 < id2 && id2 < id3 && !existed);

    zt_job_rec got;
    ASSERT_OK(zt_store_job_get(s, id1, keep_job, &got, &err));
    ASSERT_STREQ(g_text, "a|{\"name\": \"x\"}|QUEUED|submitted");
    ASSERT_EQ_INT(got.total_steps, 100);
    ASSERT_EQ_INT(zt_store_job_get(s, 999, keep_job, &got, &err), ZT_ERR_NOT_FOUND);
    ASSERT_CONTAINS(err.msg, "job 999 not found");

    zt_job_rec upd = {.id = id2,
                      .state = ZT_JOB_COMPLETED,
                      .reason = "done",
                      .last_step = 100,
                      .ended_ms = 5,
                      .metrics_stride = 1};
    ASSERT_OK(zt_store_job_save(s, &upd, &err));
    upd.id = 12345;
    ASSERT_EQ_INT(zt_store_job_save(s, &upd, &err), ZT_ERR_NOT_FOUND);

    g_count = 0;
    ASSERT_OK(zt_store_jobs_list(s, 0, 0, 10, count_job, NULL, &err));
    ASSERT_EQ_INT(g_count, 3);
    ASSERT_EQ_INT(g_ids[0], id3); /* newest first */
    g_count = 0;
    ASSERT_OK(zt_store_jobs_list(s, 1u << ZT_JOB_COMPLETED, 0, 10, count_job, NULL, &err));
    ASSERT_EQ_INT(g_count, 1);
    ASSERT_EQ_INT(g_ids[0], id2);
    g_count = 0;
    ASSERT_OK(zt_store_jobs_list(s, 0, id3, 1, count_job, NULL, &err));
    ASSERT_EQ_INT(g_count, 1);
    ASSERT_EQ_INT(g_ids[0], id2);
    g_count = 0;
    ASSERT_OK(zt_store_jobs_active(s, count_job, NULL, &err));
    ASSERT_EQ_INT(g_count, 2);
    ASSERT_EQ_INT(g_ids[0], id1); /* oldest first */
}

static int g_ranks;
static void count_rank(void *arg, const zt_rank_rec *r)
{
    (void)arg;
    if (r->exited && r->exit_code == 3) g_ranks += 100;
    g_ranks++;
}

static void test_attempts(zt_store *s)
{
    zt_err err = {0};
    int64_t jid, aid;
    bool existed;
    zt_job_rec r = job("att", NULL);
    ASSERT_OK(zt_store_job_insert(s, &r, &jid, &existed, &err));
    zt_agent_rec ag = {.name = "n1",
                       .device = 1,
                       .slots = 4,
                       .incarnation = 1,
                       .state = ZT_AGENT_ALIVE,
                       .registered_ms = 1,
                       .last_seen_ms = 1};
    ASSERT_OK(zt_store_agent_save(s, &ag, &err));
    zt_attempt_rec a = {
        .job_id = jid, .number = 1, .state = ZT_ATTEMPT_STARTING, .world_size = 2, .created_ms = 7};
    ASSERT_OK(zt_store_attempt_insert(s, &a, &aid, &err));
    /* (job, number) is unique */
    int64_t dup;
    ASSERT_EQ_INT(zt_store_attempt_insert(s, &a, &dup, &err), ZT_ERR_DB);
    zt_rank_rec rk = {.attempt_id = aid, .rank = 0, .agent = "n1"};
    ASSERT_OK(zt_store_rank_save(s, &rk, &err));
    rk.rank = 1;
    rk.exited = true;
    rk.exit_code = 3;
    ASSERT_OK(zt_store_rank_save(s, &rk, &err));
    ASSERT_OK(zt_store_rank_save(s, &rk, &err)); /* replaces */
    /* foreign keys: a rank on an unknown agent is refused */
    rk.rank = 2;
    rk.agent = "nobody";
    ASSERT_EQ_INT(zt_store_rank_save(s, &rk, &err), ZT_ERR_DB);
    ASSERT_CONTAINS(err.msg, "FOREIGN KEY");
    g_ranks = 0;
    ASSERT_OK(zt_store_ranks_list(s, aid, count_rank, NULL, &err));
    ASSERT_EQ_INT(g_ranks, 102);
    a.id = aid;
    a.state = ZT_ATTEMPT_FAILED;
    a.reason = "rank 1 exited with code 3";
    ASSERT_OK(zt_store_attempt_save(s, &a, &err));
}

static char g_logs[4096];
static void cat_log(void *arg, const zt_log_rec *r)
{
    (void)arg;
    size_t n = strlen(g_logs);
    snprintf(g_logs + n, sizeof(g_logs) - n, "%s%d:%s", n ? "," : "", r->rank, r->text);
}

static void cat_event(void *arg, const zt_event_rec *r)
{
    (void)arg;
    size_t n = strlen(g_logs);
    snprintf(g_logs + n, sizeof(g_logs) - n, "%s%s", n ? "," : "", r->reason);
}

static void test_events_logs(zt_store *s)
{
    zt_err err = {0};
    int64_t jid;
    bool existed;
    zt_job_rec r = job("logs", NULL);
    ASSERT_OK(zt_store_job_insert(s, &r, &jid, &existed, &err));
    for (int i = 0; i < 5; i++) {
        char reason[16];
        snprintf(reason, sizeof(reason), "e%d", i);
        zt_event_rec e = {
            .time_ms = i, .job_id = jid, .kind = "job", .to_state = "X", .reason = reason};
        ASSERT_OK(zt_store_event_add(s, &e, NULL, &err));
    }
    g_logs[0] = '\0';
    ASSERT_OK(zt_store_events_list(s, jid, 3, cat_event, NULL, &err));
    ASSERT_STREQ(g_logs, "e2,e3,e4");
    /* an agent event without a job */
    zt_event_rec ae = {.time_ms = 1, .agent = "n1", .kind = "agent", .reason = "lost"};
    ASSERT_OK(zt_store_event_add(s, &ae, NULL, &err));

    const char *texts[] = {"a0", "b1", "c0", "d1", "e0"};
    for (int i = 0; i < 5; i++) {
        zt_log_rec l = {.time_ms = i,
                        .job_id = jid,
                        .attempt_id = 1,
                        .rank = i % 2,
                        .source = ZT_LOG_STDOUT,
                        .text = texts[i]};
        ASSERT_OK(zt_store_log_add(s, &l, NULL, &err));
    }
    zt_log_rec ev = {.time_ms = 9, .job_id = jid, .rank = -1, .source = ZT_LOG_EVENT, .text = "ev"};
    ASSERT_OK(zt_store_log_add(s, &ev, NULL, &err));
    g_logs[0] = '\0';
    ASSERT_OK(zt_store_logs_list(s, jid, 0, 0, 0, NULL, false, cat_log, NULL, &err));
    ASSERT_STREQ(g_logs, "0:a0,1:b1,0:c0,1:d1,0:e0,-1:ev");
    g_logs[0] = '\0';
    ASSERT_OK(zt_store_logs_list(s, jid, 0, 0, 0, "[1]", false, cat_log, NULL, &err));
    ASSERT_STREQ(g_logs, "1:b1,1:d1,-1:ev");
    g_logs[0] = '\0';
    ASSERT_OK(zt_store_logs_list(s, jid, 0, 0, 2, "[0]", true, cat_log, NULL, &err));
    ASSERT_STREQ(g_logs, "0:c0,0:e0");
    g_logs[0] = '\0';
    ASSERT_OK(zt_store_logs_list(s, jid, 0, 2, 0, NULL, false, cat_log, NULL, &err));
    ASSERT_STREQ(g_logs, "0:a0,1:b1");
    int64_t n;
    ASSERT_OK(zt_store_logs_prune(s, jid, 2, &err));
    ASSERT_OK(zt_store_logs_count(s, jid, &n, &err));
    ASSERT_EQ_INT(n, 2);
    g_logs[0] = '\0';
    ASSERT_OK(zt_store_logs_list(s, jid, 0, 0, 0, NULL, false, cat_log, NULL, &err));
    ASSERT_STREQ(g_logs, "0:e0,-1:ev");
}

static char g_steps[1024], g_last_kv[64];
static int64_t g_last_attempt;
static void cat_metric(void *arg, const zt_metric_rec *r)
{
    (void)arg;
    size_t n = strlen(g_steps);
    snprintf(g_steps + n, sizeof(g_steps) - n, "%s%lld", n ? "," : "", (long long)r->step);
    g_last_attempt = r->attempt_id;
    snprintf(g_last_kv, sizeof(g_last_kv), "%s", r->kv);
}

static void test_metrics(zt_store *s)
{
    zt_err err = {0};
    int64_t jid;
    bool existed;
    zt_job_rec r = job("metrics", NULL);
    ASSERT_OK(zt_store_job_insert(s, &r, &jid, &existed, &err));
    for (int step = 1; step <= 8; step++) {
        zt_metric_rec m = {
            .job_id = jid, .attempt_id = 1, .step = step, .time_ms = step, .kv = "loss=1 lr=0.1"};
        bool added = false;
        ASSERT_OK(zt_store_metric_add(s, &m, &added, &err));
        ASSERT_TRUE(added);
    }
    /* a resumed attempt reports step 8 again: the row is replaced, not added */
    zt_metric_rec again = {
        .job_id = jid, .attempt_id = 2, .step = 8, .time_ms = 99, .kv = "loss=0.5 lr=0.1"};
    bool added = true;
    ASSERT_OK(zt_store_metric_add(s, &again, &added, &err));
    ASSERT_TRUE(!added);
    int64_t n;
    ASSERT_OK(zt_store_metrics_count(s, jid, &n, &err));
    ASSERT_EQ_INT(n, 8);
    ASSERT_OK(zt_store_metrics_thin(s, jid, 4, &err));
    ASSERT_OK(zt_store_metrics_count(s, jid, &n, &err));
    ASSERT_EQ_INT(n, 2);
    g_steps[0] = '\0';
    ASSERT_OK(zt_store_metrics_list(s, jid, 0, cat_metric, NULL, &err));
    ASSERT_STREQ(g_steps, "4,8");
    g_steps[0] = '\0';
    ASSERT_OK(zt_store_metrics_list(s, jid, 5, cat_metric, NULL, &err));
    ASSERT_STREQ(g_steps, "8");
    ASSERT_EQ_INT(g_last_attempt, 2); /* the replacement's values */
    ASSERT_STREQ(g_last_kv, "loss=0.5 lr=0.1");
}

static zt_ckpt_rec g_ck;
static char g_ck_path[256];
static void keep_ckpt(void *arg, const zt_ckpt_rec *r)
{
    (void)arg;
    g_ck = *r;
    snprintf(g_ck_path, sizeof(g_ck_path), "%s", r->path);
}

static int g_ck_n;
static void count_ckpt(void *arg, const zt_ckpt_rec *r)
{
    (void)arg;
    (void)r;
    g_ck_n++;
}

/* The first row of a listing (newest first) and the row count. */
static zt_ckpt_rec g_first;
static int g_first_n;
static void first_ckpt(void *arg, const zt_ckpt_rec *r)
{
    (void)arg;
    if (g_first_n++ == 0) g_first = *r;
}

static void test_checkpoints(zt_store *s)
{
    zt_err err = {0};
    int64_t jid, cid;
    bool existed, committed;
    int shards;
    zt_job_rec r = job("ckpt", NULL);
    ASSERT_OK(zt_store_job_insert(s, &r, &jid, &existed, &err));
    ASSERT_EQ_INT(zt_store_ckpt_latest(s, jid, keep_ckpt, NULL, &err), ZT_ERR_NOT_FOUND);
    zt_shard_rec sh = {.rank = 1, .file = "rank_00001.zts", .bytes = 100, .crc32c = 7};
    ASSERT_OK(zt_store_begin(s, &err));
    ASSERT_OK(zt_store_ckpt_shard_add(s, jid, 5, 50, "/c/step_50", 2, &sh, 10, &cid, &shards,
                                      &committed, &err));
    ASSERT_EQ_INT(shards, 1);
    ASSERT_TRUE(!committed);
    ASSERT_OK(zt_store_commit(s, &err));
    ASSERT_EQ_INT(zt_store_ckpt_latest(s, jid, keep_ckpt, NULL, &err), ZT_ERR_NOT_FOUND);
    /* the last shard commits it in the same transaction */
    sh.rank = 0;
    sh.file = "rank_00000.zts";
    ASSERT_OK(zt_store_begin(s, &err));
    ASSERT_OK(zt_store_ckpt_shard_add(s, jid, 5, 50, "/c/step_50", 2, &sh, 11, &cid, &shards,
                                      &committed, &err));
    ASSERT_TRUE(committed);
    ASSERT_EQ_INT(shards, 2);
    ASSERT_OK(zt_store_commit(s, &err));
    ASSERT_OK(zt_store_ckpt_latest(s, jid, keep_ckpt, NULL, &err));
    ASSERT_EQ_INT(g_ck.step, 50);
    ASSERT_EQ_INT(g_ck.state, ZT_CKPT_COMMITTED);
    ASSERT_EQ_INT(g_ck.shards, 2);
    ASSERT_EQ_INT(g_ck.bytes, 200);
    ASSERT_STREQ(g_ck_path, "/c/step_50");
    /* re-reporting a shard does not commit twice */
    ASSERT_OK(zt_store_ckpt_shard_add(s, jid, 5, 50, "/c/step_50", 2, &sh, 12, &cid, &shards,
                                      &committed, &err));
    ASSERT_TRUE(!committed);
    /* a newer partial checkpoint does not count for restarts */
    ASSERT_OK(zt_store_ckpt_shard_add(s, jid, 5, 100, "/c/step_100", 2, &sh, 13, &cid, &shards,
                                      &committed, &err));
    ASSERT_OK(zt_store_ckpt_latest(s, jid, keep_ckpt, NULL, &err));
    ASSERT_EQ_INT(g_ck.step, 50);
    g_ck_n = 0;
    ASSERT_OK(zt_store_ckpts_list(s, jid, false, false, count_ckpt, NULL, &err));
    ASSERT_EQ_INT(g_ck_n, 1);
    g_ck_n = 0;
    ASSERT_OK(zt_store_ckpts_list(s, jid, true, false, count_ckpt, NULL, &err));
    ASSERT_EQ_INT(g_ck_n, 2);
    /* another attempt (world 1) rewrites step_100: earlier shards do not count */
    ASSERT_OK(zt_store_ckpt_shard_add(s, jid, 6, 100, "/c/step_100", 1, &sh, 14, &cid, &shards,
                                      &committed, &err));
    ASSERT_TRUE(committed);
    ASSERT_EQ_INT(shards, 1);
    ASSERT_OK(zt_store_ckpt_latest(s, jid, keep_ckpt, NULL, &err));
    ASSERT_EQ_INT(g_ck.step, 100);
    ASSERT_EQ_INT(g_ck.attempt_id, 6);
    int count;
    ASSERT_OK(zt_store_ckpt_count(s, jid, &count, &err));
    ASSERT_EQ_INT(count, 2);

    /* keep_checkpoints removed step_100: DELETED, no longer listed, counted or resumed from */
    zt_ckpt_state before;
    int64_t rid;
    ASSERT_OK(zt_store_ckpt_remove(s, jid, 6, 100, "/c/step_100", 1, 20, &rid, &before, &err));
    ASSERT_EQ_INT(rid, cid);
    ASSERT_EQ_INT(before, ZT_CKPT_COMMITTED);
    ASSERT_OK(zt_store_ckpt_latest(s, jid, keep_ckpt, NULL, &err));
    ASSERT_EQ_INT(g_ck.step, 50);
    ASSERT_OK(zt_store_ckpt_count(s, jid, &count, &err));
    ASSERT_EQ_INT(count, 1);
    g_ck_n = 0;
    ASSERT_OK(zt_store_ckpts_list(s, jid, true, false, count_ckpt, NULL, &err));
    ASSERT_EQ_INT(g_ck_n, 1);
    g_first_n = 0;
    ASSERT_OK(zt_store_ckpts_list(s, jid, false, true, first_ckpt, NULL, &err));
    ASSERT_EQ_INT(g_first_n, 2);
    ASSERT_EQ_INT(g_first.step, 100);
    ASSERT_EQ_INT(g_first.state, ZT_CKPT_DELETED);
    ASSERT_EQ_INT(g_first.deleted_ms, 20);
    /* again: idempotent, nothing changes */
    ASSERT_OK(zt_store_ckpt_remove(s, jid, 6, 100, "/c/step_100", 1, 21, &rid, &before, &err));
    ASSERT_EQ_INT(before, ZT_CKPT_DELETED);
    /* a late shard report of the same attempt does not make it usable again */
    ASSERT_OK(zt_store_ckpt_shard_add(s, jid, 6, 100, "/c/step_100", 1, &sh, 22, &cid, &shards,
                                      &committed, &err));
    ASSERT_TRUE(!committed);
    ASSERT_OK(zt_store_ckpt_latest(s, jid, keep_ckpt, NULL, &err));
    ASSERT_EQ_INT(g_ck.step, 50);
    /* ...but another attempt that writes the directory again does */
    ASSERT_OK(zt_store_ckpt_shard_add(s, jid, 7, 100, "/c/step_100", 1, &sh, 23, &cid, &shards,
                                      &committed, &err));
    ASSERT_TRUE(committed);
    ASSERT_OK(zt_store_ckpt_latest(s, jid, keep_ckpt, NULL, &err));
    ASSERT_EQ_INT(g_ck.step, 100);
    ASSERT_EQ_INT(g_ck.state, ZT_CKPT_COMMITTED);
    ASSERT_EQ_INT(g_ck.deleted_ms, 0);
    /* a removal the store never heard of is recorded as DELETED (late shards stay out) */
    ASSERT_OK(zt_store_ckpt_remove(s, jid, 7, 150, "/c/step_150", 1, 24, &rid, &before, &err));
    ASSERT_EQ_INT(before, 0);
    ASSERT_TRUE(rid > 0);
    ASSERT_OK(zt_store_ckpt_shard_add(s, jid, 7, 150, "/c/step_150", 1, &sh, 25, &cid, &shards,
                                      &committed, &err));
    ASSERT_EQ_INT(cid, rid);
    ASSERT_TRUE(!committed);
    g_first_n = 0;
    ASSERT_OK(zt_store_ckpts_list(s, jid, true, true, first_ckpt, NULL, &err));
    ASSERT_EQ_INT(g_first_n, 3);
    ASSERT_EQ_INT(g_first.step, 150);
    ASSERT_EQ_INT(g_first.state, ZT_CKPT_DELETED);
    g_ck_n = 0;
    ASSERT_OK(zt_store_ckpts_list(s, jid, false, false, count_ckpt, NULL, &err));
    ASSERT_EQ_INT(g_ck_n, 2);
}

static int64_t sql_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    int64_t v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        ZT_FAIL("%s: %s", sql, sqlite3_errmsg(db));
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* Schema 2 -> 3 rebuilds the checkpoints table: rows, ids, shards and the foreign keys that
 * point at it survive, and DELETED becomes a valid state. */
static void test_migration_v3(void)
{
    char p2[160];
    snprintf(p2, sizeof(p2), "%s/v2.db", dir);
    zt_store *s;
    zt_err err = {0};
    ASSERT_OK(zt_store_open_at_version(&s, p2, 2, &err));
    zt_store_close(s);
    sqlite3 *db;
    ASSERT_EQ_INT(sqlite3_open(p2, &db), SQLITE_OK);
    const char *fill =
        "INSERT INTO jobs(id, name, state, ranks, ranks_per_node, device, total_steps, spec_text, "
        "spec_dir, spec_json, spec_hash, submitted_ms) VALUES(1, 'j', 'RUNNING', 2, 2, 1, 100, "
        "'{}', '/tmp', '{}', 'h', 1);"
        "INSERT INTO checkpoints(id, job_id, attempt_id, step, path, world_size, state, "
        "created_ms, committed_ms) VALUES(7, 1, 3, 20, '/k/step_20', 2, 'COMMITTED', 5, 6);"
        "INSERT INTO checkpoints(id, job_id, attempt_id, step, path, world_size, state, "
        "created_ms) VALUES(9, 1, 3, 40, '/k/step_40', 2, 'PARTIAL', 8);"
        "INSERT INTO checkpoint_shards VALUES(7, 0, 'rank_00000.zts', 10, 1, 5);"
        "INSERT INTO checkpoint_shards VALUES(7, 1, 'rank_00001.zts', 11, 2, 6);"
        "INSERT INTO checkpoint_shards VALUES(9, 0, 'rank_00000.zts', 12, 3, 8);";
    char *msg = NULL;
    if (sqlite3_exec(db, fill, NULL, NULL, &msg) != SQLITE_OK) ZT_FAIL("filling v2: %s", msg);
    sqlite3_close(db);

    ASSERT_OK(zt_store_open(&s, p2, false, &err));
    ASSERT_EQ_INT(zt_store_schema_version(s), ZT_STORE_SCHEMA_VERSION);
    g_first_n = 0;
    ASSERT_OK(zt_store_ckpts_list(s, 1, true, true, first_ckpt, NULL, &err));
    ASSERT_EQ_INT(g_first_n, 2);
    ASSERT_EQ_INT(g_first.id, 9);
    ASSERT_EQ_INT(g_first.state, ZT_CKPT_PARTIAL);
    ASSERT_EQ_INT(g_first.shards, 1);
    ASSERT_OK(zt_store_ckpt_latest(s, 1, keep_ckpt, NULL, &err));
    ASSERT_EQ_INT(g_ck.id, 7);
    ASSERT_EQ_INT(g_ck.shards, 2);
    ASSERT_EQ_INT(g_ck.bytes, 21);
    ASSERT_EQ_INT(g_ck.committed_ms, 6);
    ASSERT_EQ_INT(g_ck.deleted_ms, 0);
    zt_ckpt_state before;
    int64_t rid;
    ASSERT_OK(zt_store_ckpt_remove(s, 1, 3, 20, "/k/step_20", 2, 30, &rid, &before, &err));
    ASSERT_EQ_INT(rid, 7);
    ASSERT_EQ_INT(before, ZT_CKPT_COMMITTED);
    ASSERT_EQ_INT(zt_store_ckpt_latest(s, 1, keep_ckpt, NULL, &err), ZT_ERR_NOT_FOUND);
    /* new ids continue after the old ones (AUTOINCREMENT's sequence moved with the table) */
    zt_shard_rec sh = {.rank = 0, .file = "rank_00000.zts", .bytes = 1};
    int64_t cid;
    int shards;
    bool committed;
    ASSERT_OK(zt_store_ckpt_shard_add(s, 1, 4, 60, "/k/step_60", 1, &sh, 40, &cid, &shards,
                                      &committed, &err));
    ASSERT_TRUE(cid > 9);
    ASSERT_TRUE(committed);
    zt_store_close(s);

    ASSERT_EQ_INT(sqlite3_open(p2, &db), SQLITE_OK);
    ASSERT_EQ_INT(sqlite3_exec(db, "PRAGMA foreign_keys = ON", NULL, NULL, NULL), SQLITE_OK);
    ASSERT_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM pragma_foreign_key_check"), 0);
    ASSERT_EQ_INT(
        sql_int(db, "SELECT COUNT(*) FROM sqlite_master WHERE sql LIKE '%checkpoints_v3%'"), 0);
    ASSERT_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'checkpoints_job'"),
                  1);
    /* the shards still reference the checkpoints: a dangling one is refused, a cascade works */
    ASSERT_NE_INT(sqlite3_exec(db, "INSERT INTO checkpoint_shards VALUES(999, 0, 'x', 1, 1, 1)",
                               NULL, NULL, NULL),
                  SQLITE_OK);
    ASSERT_EQ_INT(sqlite3_exec(db, "DELETE FROM checkpoints WHERE id = 7", NULL, NULL, NULL),
                  SQLITE_OK);
    ASSERT_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM checkpoint_shards WHERE checkpoint_id = 7"), 0);
    ASSERT_NE_INT(
        sqlite3_exec(db, "UPDATE checkpoints SET state = 'GONE' WHERE id = 9", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
}

static char g_rdzv[256];
static void cat_rdzv(void *arg, int rank, const void *v, size_t len)
{
    (void)arg;
    size_t n = strlen(g_rdzv);
    snprintf(g_rdzv + n, sizeof(g_rdzv) - n, "%s%d=%.*s", n ? "," : "", rank, (int)len,
             (const char *)v);
}

static void test_rdzv_and_rollback(zt_store *s)
{
    zt_err err = {0};
    int64_t jid, aid;
    bool existed;
    zt_job_rec r = job("rdzv", NULL);
    ASSERT_OK(zt_store_job_insert(s, &r, &jid, &existed, &err));
    zt_attempt_rec a = {.job_id = jid, .number = 1, .state = ZT_ATTEMPT_STARTING, .world_size = 2};
    ASSERT_OK(zt_store_attempt_insert(s, &a, &aid, &err));
    ASSERT_OK(zt_store_rdzv_put(s, aid, 1, "tcp://b:2", 9, &err));
    ASSERT_OK(zt_store_rdzv_put(s, aid, 0, "tcp://a:1", 9, &err));
    ASSERT_OK(zt_store_rdzv_put(s, aid, 0, "tcp://a:3", 9, &err));
    g_rdzv[0] = '\0';
    ASSERT_OK(zt_store_rdzv_list(s, aid, cat_rdzv, NULL, &err));
    ASSERT_STREQ(g_rdzv, "0=tcp://a:3,1=tcp://b:2");

    /* rollback */
    int64_t id;
    ASSERT_OK(zt_store_begin(s, &err));
    r = job("gone", "gone-key");
    ASSERT_OK(zt_store_job_insert(s, &r, &id, &existed, &err));
    zt_store_rollback(s);
    zt_job_rec got;
    ASSERT_EQ_INT(zt_store_job_get(s, id, keep_job, &got, &err), ZT_ERR_NOT_FOUND);
    /* savepoint: one operation undone, the rest of the transaction kept */
    ASSERT_OK(zt_store_begin(s, &err));
    r = job("kept", NULL);
    int64_t kept;
    ASSERT_OK(zt_store_job_insert(s, &r, &kept, &existed, &err));
    ASSERT_OK(zt_store_savepoint(s, &err));
    r = job("undone", NULL);
    int64_t undone;
    ASSERT_OK(zt_store_job_insert(s, &r, &undone, &existed, &err));
    zt_store_rollback_savepoint(s);
    ASSERT_OK(zt_store_commit(s, &err));
    ASSERT_OK(zt_store_job_get(s, kept, keep_job, &got, &err));
    ASSERT_EQ_INT(zt_store_job_get(s, undone, keep_job, &got, &err), ZT_ERR_NOT_FOUND);

    /* a read-only handle sees committed data and cannot write */
    zt_store *ro;
    ASSERT_OK(zt_store_open(&ro, path, true, &err));
    ASSERT_OK(zt_store_job_get(ro, kept, keep_job, &got, &err));
    r = job("ro", NULL);
    ASSERT_NE_INT(zt_store_job_insert(ro, &r, &id, &existed, &err), ZT_OK);
    zt_store_close(ro);
    zt_store_close(NULL);
}

static zt_job_rec g_job4;
static char g_job4_name[64];
static void keep_job4(void *arg, const zt_job_rec *r)
{
    (void)arg;
    g_job4 = *r;
    snprintf(g_job4_name, sizeof(g_job4_name), "%s", r->name);
    g_job4.name = g_job4_name;
}

/* Schema 3 -> 4 adds jobs.eligible_ms (the restart backoff survives a coordinator restart):
 * existing jobs keep every column and read 0; the value is saved and read back. */
static void test_migration_v4(void)
{
    char p3[160];
    snprintf(p3, sizeof(p3), "%s/v3.db", dir);
    zt_store *s;
    zt_err err = {0};
    ASSERT_OK(zt_store_open_at_version(&s, p3, 3, &err));
    zt_store_close(s);
    sqlite3 *db;
    ASSERT_EQ_INT(sqlite3_open(p3, &db), SQLITE_OK);
    ASSERT_EQ_INT(sql_int(db, "SELECT COUNT(*) FROM pragma_table_info('jobs') WHERE name = "
                              "'eligible_ms'"),
                  0);
    const char *fill =
        "INSERT INTO jobs(id, name, state, reason, ranks, ranks_per_node, device, restarts, "
        "total_steps, spec_text, spec_dir, spec_json, spec_hash, user, submitted_ms, "
        "metrics_stride) VALUES(5, 'old', 'QUEUED', 'restart 1 of 3', 2, 2, 1, 1, 100, '{}', "
        "'/tmp', '{}', 'h', 'me', 1, 4);";
    char *msg = NULL;
    if (sqlite3_exec(db, fill, NULL, NULL, &msg) != SQLITE_OK) ZT_FAIL("filling v3: %s", msg);
    sqlite3_close(db);

    ASSERT_OK(zt_store_open(&s, p3, false, &err));
    ASSERT_EQ_INT(zt_store_schema_version(s), ZT_STORE_SCHEMA_VERSION);
    ASSERT_OK(zt_store_job_get(s, 5, keep_job4, NULL, &err));
    ASSERT_STREQ(g_job4.name, "old");
    ASSERT_EQ_INT(g_job4.state, ZT_JOB_QUEUED);
    ASSERT_EQ_INT(g_job4.restarts, 1);
    ASSERT_EQ_INT(g_job4.metrics_stride, 4);
    ASSERT_EQ_INT(g_job4.eligible_ms, 0);
    zt_job_rec save = g_job4;
    save.reason = "restart 2 of 3 in 60.0 s";
    save.restarts = 2;
    save.eligible_ms = 1234567890123;
    ASSERT_OK(zt_store_job_save(s, &save, &err));
    ASSERT_OK(zt_store_job_get(s, 5, keep_job4, NULL, &err));
    ASSERT_EQ_INT(g_job4.eligible_ms, 1234567890123);
    ASSERT_EQ_INT(g_job4.restarts, 2);
    /* the light listing reads it too */
    memset(&g_job4, 0, sizeof(g_job4));
    ASSERT_OK(zt_store_jobs_list(s, 0, 0, 10, keep_job4, NULL, &err));
    ASSERT_EQ_INT(g_job4.eligible_ms, 1234567890123);
    zt_store_close(s);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/zt_store_XXXXXX");
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    atexit(cleanup_dir);
    snprintf(path, sizeof(path), "%s/zt.db", dir);
    test_migrations();
    test_migration_v3();
    test_migration_v4();
    zt_store *s;
    zt_err err = {0};
    ASSERT_OK(zt_store_open(&s, path, false, &err));
    test_jobs(s);
    test_attempts(s);
    test_events_logs(s);
    test_metrics(s);
    test_checkpoints(s);
    test_rdzv_and_rollback(s);
    zt_store_close(s);
    printf("test_store: ok\n");
    return 0;
}
