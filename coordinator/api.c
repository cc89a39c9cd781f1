/* zerotrain: zcoord's JSON API, event streams and dashboard files (see api.h). Each reader
 * borrows a read-only store handle from a small pool, and takes the model's lock only to copy
 * live values (ranks, agents, the queue); JSON is built after the lock is released where the
 * copy can be large. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/api.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/utf8.h"
#include "coordinator/coord_int.h"
#include "web/web_assets.h"

/* ---- small helpers ------------------------------------------------------------------------ */

/* A JSON string of s; bytes that are not UTF-8 (a database written by an old zcoord) become
 * '?', so that one bad row never breaks a reply. */
static json_t *jstr(const char *s)
{
    if (!s) s = "";
    json_t *v = json_string(s);
    if (v) return v;
    char *d = zt_strdup(s);
    if (!d) return json_string("");
    zt_utf8_clean(d, strlen(d));
    v = json_string(d);
    zt_free(d);
    return v ? v : json_string("");
}

static void set(json_t *o, const char *k, json_t *v)
{
    json_object_set_new(o, k, v ? v : json_null());
}

static void reply_json(zt_http_req *r, int status, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) {
        zt_http_respond_error(r, 500, "out of memory building the reply");
        return;
    }
    zt_http_respond(r, status, "application/json", s, strlen(s), false);
    free(s);
}

static const char *device_name(int d)
{
    return d == 2 ? "cuda" : "cpu";
}

static const char *phase_name(int phase)
{
    static const char *const names[] = {"UNSPECIFIED", "STARTING",   "RENDEZVOUS",    "LOADING",
                                        "TRAINING",    "EVALUATING", "CHECKPOINTING", "EXITED"};
    return phase >= 0 && phase < 8 ? names[phase] : "UNSPECIFIED";
}

static const char *source_name(int s)
{
    return s == ZT_LOG_STDOUT ? "stdout" : s == ZT_LOG_STDERR ? "stderr" : "event";
}

/* "k=v k=v" as {"k": v, ...}. */
static json_t *kv_json(const char *kv)
{
    json_t *o = json_object();
    for (const char *p = kv; o && p && *p;) {
        while (*p == ' ')
            p++;
        const char *eq = strchr(p, '=');
        if (!eq) break;
        const char *end = strchr(eq, ' ');
        if (!end) end = eq + strlen(eq);
        char key[96];
        size_t kl = (size_t)(eq - p);
        if (kl > 0 && kl < sizeof(key)) {
            memcpy(key, p, kl);
            key[kl] = '\0';
            set(o, key, json_real(strtod(eq + 1, NULL)));
        }
        p = end;
    }
    return o;
}

/* Parses an integer query parameter; answers 400 naming it and returns false when bad. */
static bool param_int(zt_http_req *r, const char *name, int64_t lo, int64_t hi, int64_t def,
                      int64_t *out)
{
    const char *v = zt_http_query(r, name);
    *out = def;
    if (!v) return true;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        zt_http_respond_error(r, 400, "parameter %s: '%.64s' is not an integer in [%lld, %lld]",
                              name, v, (long long)lo, (long long)hi);
        return false;
    }
    *out = x;
    return true;
}

/* ---- read-only store handles ---------------------------------------------------------------- */

static zt_store *store_get(zt_coord *c, zt_err *e)
{
    zt_store *s = NULL;
    pthread_mutex_lock(&c->hsmu);
    if (c->n_hstores > 0) s = c->hstores[--c->n_hstores];
    pthread_mutex_unlock(&c->hsmu);
    if (!s && zt_store_open(&s, c->cfg.db_path, true, e) != ZT_OK) return NULL;
    return s;
}

static void store_put(zt_coord *c, zt_store *s)
{
    if (!s) return;
    pthread_mutex_lock(&c->hsmu);
    if (c->n_hstores < COORD_HTTP_STORES) {
        c->hstores[c->n_hstores++] = s;
        s = NULL;
    }
    pthread_mutex_unlock(&c->hsmu);
    zt_store_close(s);
}

void coord_api_close(zt_coord *c)
{
    pthread_mutex_lock(&c->hsmu);
    while (c->n_hstores > 0)
        zt_store_close(c->hstores[--c->n_hstores]);
    pthread_mutex_unlock(&c->hsmu);
    for (size_t i = 0; i < c->n_sse_lines; i++)
        zt_free(c->sse_lines[i].json);
    zt_free(c->sse_lines);
    c->sse_lines = NULL;
    c->n_sse_lines = c->cap_sse_lines = 0;
}

static void store_error(zt_http_req *r, zt_status st, const zt_err *e, int64_t job_id)
{
    if (st == ZT_ERR_NOT_FOUND)
        zt_http_respond_error(r, 404, "job %lld not found", (long long)job_id);
    else
        zt_http_respond_error(r, 500, "%s", zt_err_msg(e));
}

/* ---- jobs ------------------------------------------------------------------------------------ */

static json_t *job_rec_json(const zt_job_rec *r)
{
    json_t *o = json_object();
    if (!o) return NULL;
    set(o, "id", json_integer(r->id));
    set(o, "name", jstr(r->name));
    set(o, "state", json_string(zt_job_state_name(r->state)));
    set(o, "reason", jstr(r->reason));
    set(o, "pending_reason", json_string(""));
    set(o, "priority", json_integer(r->priority));
    set(o, "ranks", json_integer(r->ranks));
    set(o, "ranks_per_node", json_integer(r->ranks_per_node));
    set(o, "device", json_string(device_name(r->device)));
    set(o, "max_restarts", json_integer(r->max_restarts));
    set(o, "restarts", json_integer(r->restarts));
    set(o, "total_steps", json_integer(r->total_steps));
    set(o, "step", json_integer(r->last_step));
    set(o, "loss", json_null());
    set(o, "tokens_per_s", json_null());
    set(o, "eta_s", json_null());
    set(o, "submitted_ms", json_integer(r->submitted_ms));
    set(o, "started_ms", json_integer(r->started_ms));
    set(o, "ended_ms", json_integer(r->ended_ms));
    set(o, "attempt_id", json_integer(r->attempt_id));
    set(o, "user", jstr(r->user));
    return o;
}

/* Live values of a job in memory (mu held). */
static void job_overlay(json_t *o, const c_job *j)
{
    set(o, "step", json_integer(j->step));
    if (j->metrics_kv) {
        set(o, "loss", json_real(j->loss));
        set(o, "tokens_per_s", json_real(j->tokens_per_s));
    }
    if (j->eta_s > 0) set(o, "eta_s", json_real(j->eta_s));
    set(o, "pending_reason", jstr(j->state == ZT_JOB_QUEUED ? j->pending : ""));
}

/* A job as the model has it (mu held, after a commit). */
static json_t *job_live_json(const c_job *j)
{
    zt_job_rec r = {.id = j->id,
                    .name = j->name,
                    .state = j->state,
                    .reason = j->reason,
                    .priority = j->priority,
                    .ranks = j->ranks,
                    .ranks_per_node = j->ranks_per_node,
                    .device = j->device,
                    .max_restarts = j->max_restarts,
                    .restarts = j->restarts,
                    .total_steps = j->total_steps,
                    .last_step = j->step,
                    .user = j->user,
                    .submitted_ms = j->submitted_ms,
                    .started_ms = j->started_ms,
                    .ended_ms = j->ended_ms,
                    .attempt_id = j->attempt_id};
    json_t *o = job_rec_json(&r);
    if (o) job_overlay(o, j);
    return o;
}

/* One rank's live values (mu held). */
static json_t *rank_live_json(const c_rank *rk, int64_t attempt_id)
{
    json_t *o = json_object();
    if (!o) return NULL;
    set(o, "rank", json_integer(rk->rank));
    set(o, "attempt_id", json_integer(attempt_id));
    set(o, "agent", jstr(rk->agent ? rk->agent->name : ""));
    set(o, "local_rank", json_integer(rk->local_rank));
    set(o, "device_index", json_integer(rk->device_index));
    set(o, "pid", json_integer(rk->pid));
    set(o, "phase", json_string(rk->exited ? "EXITED" : phase_name(rk->phase)));
    set(o, "step", json_integer(rk->step));
    set(o, "collective_seq", json_integer(rk->seq));
    set(o, "memory_bytes", json_integer(rk->memory_bytes));
    set(o, "peak_memory_bytes", json_integer(rk->peak_memory_bytes));
    set(o, "tokens_per_s", json_real(rk->tokens_per_s));
    set(o, "loss", json_real(rk->loss));
    set(o, "started_ms", json_integer(rk->started_ms));
    set(o, "last_report_ms", json_integer(rk->agent && rk->seen ? rk->agent->last_seen_ms : 0));
    if (rk->exited) {
        set(o, "exit_code", json_integer(rk->exit_code));
        set(o, "exit_signal", json_integer(rk->exit_signal));
    }
    return o;
}

static json_t *ranks_live_json(const c_attempt *a)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < a->world_size; i++)
        json_array_append_new(arr, rank_live_json(&a->ranks[i], a->id));
    return arr;
}

static json_t *event_json(const zt_event_rec *r)
{
    json_t *o = json_object();
    if (!o) return NULL;
    set(o, "id", json_integer(r->id));
    set(o, "time_ms", json_integer(r->time_ms));
    set(o, "attempt_id", json_integer(r->attempt_id));
    set(o, "agent", jstr(r->agent));
    set(o, "kind", jstr(r->kind));
    set(o, "from", jstr(r->from_state));
    set(o, "to", jstr(r->to_state));
    set(o, "reason", jstr(r->reason));
    return o;
}

static void lj_job(void *arg, const zt_job_rec *r)
{
    json_array_append_new(arg, job_rec_json(r));
}

static void get_jobs(zt_coord *c, zt_http_req *r)
{
    unsigned mask = 0;
    const char *states = zt_http_query(r, "state");
    if (states && states[0]) {
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", states);
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            for (char *q = t; *q; q++)
                if (*q >= 'a' && *q <= 'z') *q = (char)(*q - 'a' + 'A');
            int s = zt_job_state_parse(t);
            if (!s) {
                zt_http_respond_error(
                    r, 400,
                    "parameter state: '%.40s' is not QUEUED, SCHEDULED, RUNNING, COMPLETED, FAILED or CANCELED",
                    t);
                return;
            }
            mask |= 1u << s;
        }
    }
    int64_t before, limit;
    if (!param_int(r, "before", 0, INT64_MAX, 0, &before) ||
        !param_int(r, "limit", 1, 1000, 100, &limit))
        return;
    zt_err e = {0};
    zt_store *rs = store_get(c, &e);
    if (!rs) {
        zt_http_respond_error(r, 503, "%s", zt_err_msg(&e));
        return;
    }
    json_t *jobs = json_array();
    zt_status st = zt_store_jobs_list(rs, mask, before, (int)limit, lj_job, jobs, &e);
    store_put(c, rs);
    if (st != ZT_OK) {
        json_decref(jobs);
        store_error(r, st, &e, 0);
        return;
    }
    size_t n = json_array_size(jobs);
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(jobs, i);
        c_job *j = coord_job_find(c, json_integer_value(json_object_get(o, "id")));
        if (j) job_overlay(o, j);
    }
    pthread_mutex_unlock(&c->mu);
    json_t *out = json_object();
    set(out, "jobs", jobs);
    set(out, "next_before",
        (int64_t)n == limit && n
            ? json_integer(json_integer_value(json_object_get(json_array_get(jobs, n - 1), "id")))
            : json_null());
    reply_json(r, 200, out);
}

typedef struct detail_ctx {
    json_t *job, *attempts, *events;
    json_t *spec;
    char *spec_dir;
} detail_ctx;

static void dj_job(void *arg, const zt_job_rec *r)
{
    detail_ctx *d = arg;
    d->job = job_rec_json(r);
    json_error_t je;
    d->spec = r->spec_json ? json_loads(r->spec_json, 0, &je) : NULL;
    if (!d->spec) d->spec = jstr(r->spec_json);
    d->spec_dir = zt_strdup(r->spec_dir ? r->spec_dir : "");
}

static void dj_attempt(void *arg, const zt_attempt_rec *r)
{
    detail_ctx *d = arg;
    json_t *o = json_object();
    if (!o) return;
    set(o, "id", json_integer(r->id));
    set(o, "number", json_integer(r->number));
    set(o, "state", json_string(zt_attempt_state_name(r->state)));
    set(o, "reason", jstr(r->reason));
    set(o, "world_size", json_integer(r->world_size));
    set(o, "resume_path", jstr(r->resume_path));
    set(o, "resume_step", json_integer(r->resume_step));
    set(o, "created_ms", json_integer(r->created_ms));
    set(o, "started_ms", json_integer(r->started_ms));
    set(o, "ended_ms", json_integer(r->ended_ms));
    set(o, "ranks", json_array());
    json_array_append_new(d->attempts, o);
}

static void dj_rank(void *arg, const zt_rank_rec *r)
{
    json_t *o = json_object();
    if (!o) return;
    set(o, "rank", json_integer(r->rank));
    set(o, "attempt_id", json_integer(r->attempt_id));
    set(o, "agent", jstr(r->agent));
    set(o, "local_rank", json_integer(r->local_rank));
    set(o, "device_index", json_integer(r->device_index));
    set(o, "pid", json_integer(r->pid));
    set(o, "phase", json_string(r->exited ? "EXITED" : "UNSPECIFIED"));
    set(o, "step", json_integer(r->last_step));
    if (r->exited) {
        set(o, "exit_code", json_integer(r->exit_code));
        set(o, "exit_signal", json_integer(r->exit_signal));
    }
    json_array_append_new(arg, o);
}

static void dj_event(void *arg, const zt_event_rec *r)
{
    detail_ctx *d = arg;
    json_array_append_new(d->events, event_json(r));
}

static void get_job(zt_coord *c, zt_http_req *r, int64_t id)
{
    detail_ctx d = {.attempts = json_array(), .events = json_array()};
    zt_err e = {0};
    int ckpts = 0;
    zt_store *rs = store_get(c, &e);
    if (!rs) {
        json_decref(d.attempts);
        json_decref(d.events);
        zt_http_respond_error(r, 503, "%s", zt_err_msg(&e));
        return;
    }
    zt_status st = zt_store_job_get(rs, id, dj_job, &d, &e);
    if (st == ZT_OK) st = zt_store_attempts_list(rs, id, dj_attempt, &d, &e);
    for (size_t i = 0; st == ZT_OK && i < json_array_size(d.attempts); i++) {
        json_t *a = json_array_get(d.attempts, i);
        st = zt_store_ranks_list(rs, json_integer_value(json_object_get(a, "id")), dj_rank,
                                 json_object_get(a, "ranks"), &e);
    }
    if (st == ZT_OK) st = zt_store_events_list(rs, id, 200, dj_event, &d, &e);
    if (st == ZT_OK) st = zt_store_ckpt_count(rs, id, &ckpts, &e);
    store_put(c, rs);
    if (st != ZT_OK || !d.job) {
        json_decref(d.job);
        json_decref(d.spec);
        json_decref(d.attempts);
        json_decref(d.events);
        zt_free(d.spec_dir);
        store_error(r, st == ZT_OK ? ZT_ERR_NOT_FOUND : st, &e, id);
        return;
    }
    json_t *latest = NULL, *ranks = NULL;
    pthread_mutex_lock(&c->mu);
    c_job *j = coord_job_find(c, id);
    if (j) {
        job_overlay(d.job, j);
        if (j->metrics_kv) {
            latest = kv_json(j->metrics_kv);
            if (latest) set(latest, "step", json_integer(j->metrics_step));
        }
        if (j->att) {
            ranks = ranks_live_json(j->att);
            for (size_t i = 0; i < json_array_size(d.attempts); i++) {
                json_t *a = json_array_get(d.attempts, i);
                if (json_integer_value(json_object_get(a, "id")) == j->att->id)
                    set(a, "ranks", json_deep_copy(ranks));
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (!ranks) {
        size_t n = json_array_size(d.attempts);
        json_t *last = n ? json_object_get(json_array_get(d.attempts, n - 1), "ranks") : NULL;
        ranks = last ? json_deep_copy(last) : json_array();
    }
    json_t *out = json_object();
    set(out, "job", d.job);
    set(out, "spec", d.spec);
    set(out, "spec_dir", jstr(d.spec_dir));
    set(out, "attempts", d.attempts);
    set(out, "ranks", ranks);
    set(out, "events", d.events);
    set(out, "checkpoints", json_integer(ckpts));
    set(out, "latest", latest);
    zt_free(d.spec_dir);
    reply_json(r, 200, out);
}

/* ---- metrics series ------------------------------------------------------------------------ */

typedef struct mrow {
    int64_t step, time_ms;
    char *kv;
} mrow;

typedef struct series_ctx {
    mrow *rows;
    size_t n, cap;
    bool failed;
    int64_t stride;
} series_ctx;

static void ms_row(void *arg, const zt_metric_rec *r)
{
    series_ctx *m = arg;
    if (m->failed) return;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 256;
        mrow *nr = zt_realloc(m->rows, cap * sizeof(*nr));
        if (!nr) {
            m->failed = true;
            return;
        }
        m->rows = nr;
        m->cap = cap;
    }
    char *kv = zt_strdup(r->kv ? r->kv : "");
    if (!kv) {
        m->failed = true;
        return;
    }
    m->rows[m->n++] = (mrow){r->step, r->time_ms, kv};
}

static void ms_job(void *arg, const zt_job_rec *r)
{
    ((series_ctx *)arg)->stride = r->metrics_stride;
}

static bool key_listed(const char *keys, const char *k)
{
    if (!keys || !keys[0]) return true;
    size_t kl = strlen(k);
    for (const char *p = keys; *p;) {
        const char *comma = strchr(p, ',');
        size_t l = comma ? (size_t)(comma - p) : strlen(p);
        if (l == kl && strncmp(p, k, l) == 0) return true;
        p = comma ? comma + 1 : p + l;
    }
    return false;
}

static void get_metrics(zt_coord *c, zt_http_req *r, int64_t id)
{
    int64_t max_points, since;
    if (!param_int(r, "max_points", 1, 100000, 1000, &max_points) ||
        !param_int(r, "since", -1, INT64_MAX - 1, -1, &since))
        return;
    const char *keys = zt_http_query(r, "keys");
    series_ctx m = {0};
    zt_err e = {0};
    zt_store *rs = store_get(c, &e);
    if (!rs) {
        zt_http_respond_error(r, 503, "%s", zt_err_msg(&e));
        return;
    }
    zt_status st = zt_store_job_get(rs, id, ms_job, &m, &e);
    if (st == ZT_OK) st = zt_store_metrics_list(rs, id, since + 1, ms_row, &m, &e);
    store_put(c, rs);
    json_t *out = NULL;
    if (st != ZT_OK || m.failed) {
        if (st == ZT_OK) zt_err_set(&e, st = ZT_ERR_NOMEM, "out of memory reading metrics");
        store_error(r, st, &e, id);
        goto cleanup;
    }
    size_t every =
        m.n > (size_t)max_points ? (m.n + (size_t)max_points - 1) / (size_t)max_points : 1;
    json_t *steps = json_array(), *times = json_array(), *series = json_object();
    out = json_object();
    size_t k = 0; /* points written */
    for (size_t i = 0; i < m.n; i++) {
        if (!(i % every == 0 || i + 1 == m.n)) continue;
        json_array_append_new(steps, json_integer(m.rows[i].step));
        json_array_append_new(times, json_integer(m.rows[i].time_ms));
        json_t *vals = kv_json(m.rows[i].kv);
        const char *key;
        json_t *v;
        json_object_foreach(vals, key, v)
        {
            if (!key_listed(keys, key)) continue;
            json_t *arr = json_object_get(series, key);
            if (!arr) {
                arr = json_array();
                for (size_t q = 0; q < k; q++)
                    json_array_append_new(arr, json_null());
                json_object_set_new(series, key, arr);
            }
            json_array_append(arr, v);
        }
        json_decref(vals);
        k++;
        json_object_foreach(series, key, v)
        {
            while (json_array_size(v) < k)
                json_array_append_new(v, json_null());
        }
    }
    set(out, "stride", json_integer((m.stride > 0 ? m.stride : 1) * (int64_t)every));
    set(out, "steps", steps);
    set(out, "time_ms", times);
    set(out, "series", series);
    set(out, "last_step", json_integer(m.n ? m.rows[m.n - 1].step : since));
    reply_json(r, 200, out);
cleanup:
    for (size_t i = 0; i < m.n; i++)
        zt_free(m.rows[i].kv);
    zt_free(m.rows);
}

/* ---- checkpoints and logs ---------------------------------------------------------------------
 */

static void on_exists(void *arg, const zt_job_rec *r)
{
    (void)arg;
    (void)r;
}

static void ck_row(void *arg, const zt_ckpt_rec *r)
{
    json_t *o = json_object();
    if (!o) return;
    set(o, "id", json_integer(r->id));
    set(o, "attempt_id", json_integer(r->attempt_id));
    set(o, "step", json_integer(r->step));
    set(o, "path", jstr(r->path));
    set(o, "state", json_string(zt_ckpt_state_name(r->state)));
    set(o, "world_size", json_integer(r->world_size));
    set(o, "shards", json_integer(r->shards));
    set(o, "bytes", json_integer(r->bytes));
    set(o, "created_ms", json_integer(r->created_ms));
    set(o, "committed_ms", json_integer(r->committed_ms));
    set(o, "deleted_ms", json_integer(r->deleted_ms));
    set(o, "bad_reason", jstr(r->bad_reason));
    json_array_append_new(arg, o);
}

static void get_ckpts(zt_coord *c, zt_http_req *r, int64_t id)
{
    int64_t all;
    if (!param_int(r, "all", 0, 1, 0, &all)) return;
    zt_err e = {0};
    zt_store *rs = store_get(c, &e);
    if (!rs) {
        zt_http_respond_error(r, 503, "%s", zt_err_msg(&e));
        return;
    }
    json_t *arr = json_array();
    zt_status st = zt_store_job_get(rs, id, on_exists, NULL, &e);
    if (st == ZT_OK) st = zt_store_ckpts_list(rs, id, true, all != 0, ck_row, arr, &e);
    store_put(c, rs);
    if (st != ZT_OK) {
        json_decref(arr);
        store_error(r, st, &e, id);
        return;
    }
    json_t *out = json_object();
    set(out, "checkpoints", arr);
    reply_json(r, 200, out);
}

static json_t *log_json(const zt_log_rec *r)
{
    json_t *o = json_object();
    if (!o) return NULL;
    set(o, "id", json_integer(r->id));
    set(o, "time_ms", json_integer(r->time_ms));
    set(o, "attempt_id", json_integer(r->attempt_id));
    set(o, "rank", json_integer(r->rank));
    set(o, "source", json_string(source_name(r->source)));
    set(o, "text", jstr(r->text));
    return o;
}

static void lg_row(void *arg, const zt_log_rec *r)
{
    json_array_append_new(arg, log_json(r));
}

static void get_logs(zt_coord *c, zt_http_req *r, int64_t id)
{
    int64_t rank, since, limit, tail, events;
    if (!param_int(r, "rank", -1, 1 << 20, -2, &rank) ||
        !param_int(r, "since", 0, INT64_MAX, 0, &since) ||
        !param_int(r, "limit", 1, 5000, 500, &limit) || !param_int(r, "tail", 0, 5000, 0, &tail) ||
        !param_int(r, "events", 0, 1, rank == -2 ? 1 : 0, &events))
        return;
    char ranks[32];
    if (rank >= 0) snprintf(ranks, sizeof(ranks), "[%lld]", (long long)rank);
    zt_err e = {0};
    zt_store *rs = store_get(c, &e);
    if (!rs) {
        zt_http_respond_error(r, 503, "%s", zt_err_msg(&e));
        return;
    }
    json_t *arr = json_array();
    zt_status st = zt_store_job_get(rs, id, on_exists, NULL, &e);
    if (st == ZT_OK)
        st = zt_store_logs_list(rs, id, since, (int)limit, (int)tail, rank >= 0 ? ranks : NULL,
                                rank == -1 ? false : !events, lg_row, arr, &e);
    store_put(c, rs);
    if (st != ZT_OK) {
        json_decref(arr);
        store_error(r, st, &e, id);
        return;
    }
    if (rank == -1) { /* the coordinator's own lines only */
        for (size_t i = json_array_size(arr); i-- > 0;)
            if (json_integer_value(json_object_get(json_array_get(arr, i), "rank")) != -1)
                json_array_remove(arr, i);
    }
    size_t n = json_array_size(arr);
    json_t *out = json_object();
    set(out, "next",
        json_integer(n ? json_integer_value(json_object_get(json_array_get(arr, n - 1), "id"))
                       : since));
    set(out, "logs", arr);
    reply_json(r, 200, out);
}

/* ---- agents and the cluster (memory only) -----------------------------------------------------
 */

typedef struct agent_copy {
    char name[256], hostname[256], address[256], version[64];
    int device, slots, free_slots, state, n_gpus, n_reports;
    int64_t last_seen_ms, registered_ms, incarnation;
    c_gpu gpus[16];
    c_report *reports;
} agent_copy;

static void get_agents(zt_coord *c, zt_http_req *r)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->n_agents, nrep = 0;
    for (size_t i = 0; i < n; i++)
        nrep += (size_t)c->agents[i]->n_reports;
    agent_copy *ac = zt_calloc(n ? n : 1, sizeof(*ac));
    c_report *reps = zt_calloc(nrep ? nrep : 1, sizeof(*reps));
    if (!ac || !reps) {
        pthread_mutex_unlock(&c->mu);
        zt_free(ac);
        zt_free(reps);
        zt_http_respond_error(r, 503, "out of memory listing agents");
        return;
    }
    size_t kr = 0;
    for (size_t i = 0; i < n; i++) {
        const c_agent *a = c->agents[i];
        agent_copy *o = &ac[i];
        snprintf(o->name, sizeof(o->name), "%s", a->name ? a->name : "");
        snprintf(o->hostname, sizeof(o->hostname), "%s", a->hostname ? a->hostname : "");
        snprintf(o->address, sizeof(o->address), "%s", a->address ? a->address : "");
        snprintf(o->version, sizeof(o->version), "%s", a->version ? a->version : "");
        o->device = a->device;
        o->slots = a->slots;
        o->free_slots = coord_agent_free_slots(c, (c_agent *)a);
        o->state = a->revived ? ZT_AGENT_ALIVE : a->state;
        o->last_seen_ms = a->last_seen_ms;
        o->registered_ms = a->registered_ms;
        o->incarnation = a->incarnation;
        o->n_gpus = a->n_gpus < 16 ? a->n_gpus : 16;
        if (o->n_gpus > 0) memcpy(o->gpus, a->gpus, (size_t)o->n_gpus * sizeof(c_gpu));
        o->reports = &reps[kr];
        o->n_reports = a->n_reports;
        if (a->n_reports > 0)
            memcpy(o->reports, a->reports, (size_t)a->n_reports * sizeof(c_report));
        kr += (size_t)a->n_reports;
    }
    pthread_mutex_unlock(&c->mu);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        const agent_copy *a = &ac[i];
        json_t *o = json_object();
        set(o, "name", jstr(a->name));
        set(o, "hostname", jstr(a->hostname));
        set(o, "address", jstr(a->address));
        set(o, "version", jstr(a->version));
        set(o, "state", json_string(zt_agent_state_name(a->state)));
        set(o, "device", json_string(device_name(a->device)));
        set(o, "slots", json_integer(a->slots));
        set(o, "free_slots", json_integer(a->free_slots));
        set(o, "used_slots", json_integer(a->slots - a->free_slots));
        set(o, "last_heartbeat_ms", json_integer(a->last_seen_ms));
        set(o, "registered_ms", json_integer(a->registered_ms));
        set(o, "incarnation", json_integer(a->incarnation));
        json_t *gpus = json_array();
        for (int g = 0; g < a->n_gpus; g++) {
            json_t *go = json_object();
            set(go, "index", json_integer(a->gpus[g].index));
            set(go, "name", jstr(a->gpus[g].name));
            set(go, "memory_total", json_integer(a->gpus[g].memory_total));
            set(go, "memory_free", json_integer(a->gpus[g].memory_free));
            json_array_append_new(gpus, go);
        }
        set(o, "gpus", gpus);
        json_t *ws = json_array();
        for (int w = 0; w < a->n_reports; w++) {
            const c_report *p = &a->reports[w];
            json_t *wo = json_object();
            set(wo, "job_id", json_integer(p->job_id));
            set(wo, "attempt_id", json_integer(p->attempt_id));
            set(wo, "rank", json_integer(p->rank));
            set(wo, "pid", json_integer(p->pid));
            set(wo, "phase", json_string(phase_name(p->phase)));
            set(wo, "step", json_integer(p->step));
            set(wo, "memory_bytes", json_integer(p->memory_bytes));
            set(wo, "device_index", json_integer(p->device_index));
            json_array_append_new(ws, wo);
        }
        set(o, "workers", ws);
        json_array_append_new(arr, o);
    }
    zt_free(reps);
    zt_free(ac);
    json_t *out = json_object();
    set(out, "agents", arr);
    reply_json(r, 200, out);
}

typedef struct queued_copy {
    int64_t id, submitted_ms;
    char name[128], pending[256];
    int priority, ranks, device;
} queued_copy;

static void get_cluster(zt_coord *c, zt_http_req *r)
{
    int64_t total[3] = {0}, freeslots[3] = {0}, agents[3] = {0}, live[8] = {0};
    pthread_mutex_lock(&c->mu);
    size_t nq = 0;
    for (size_t i = 0; i < c->n_jobs; i++)
        nq += c->jobs[i]->state == ZT_JOB_QUEUED;
    queued_copy *q = zt_calloc(nq ? nq : 1, sizeof(*q));
    if (!q) {
        pthread_mutex_unlock(&c->mu);
        zt_http_respond_error(r, 503, "out of memory");
        return;
    }
    for (size_t i = 0; i < c->n_agents; i++) {
        c_agent *a = c->agents[i];
        int state = a->revived ? ZT_AGENT_ALIVE : a->state;
        agents[state == ZT_AGENT_ALIVE ? 1 : 2]++;
        if (state != ZT_AGENT_ALIVE || a->leaving) continue;
        int d = a->device == 2 ? 2 : 1;
        total[d] += a->slots;
        freeslots[d] += coord_agent_free_slots(c, a);
    }
    size_t k = 0;
    for (size_t i = 0; i < c->n_jobs; i++) {
        const c_job *j = c->jobs[i];
        if (j->state > 0 && j->state < 8) live[j->state]++;
        if (j->state != ZT_JOB_QUEUED || k >= nq) continue;
        q[k].id = j->id;
        q[k].submitted_ms = j->submitted_ms;
        snprintf(q[k].name, sizeof(q[k].name), "%s", j->name);
        snprintf(q[k].pending, sizeof(q[k].pending), "%s", j->pending);
        q[k].priority = j->priority;
        q[k].ranks = j->ranks;
        q[k].device = j->device;
        k++;
    }
    pthread_mutex_unlock(&c->mu);
    json_t *out = json_object(), *slots = json_object(), *queue = json_array(),
           *jobs = json_object();
    for (int d = 1; d <= 2; d++) {
        json_t *o = json_object();
        set(o, "total", json_integer(total[d]));
        set(o, "used", json_integer(total[d] - freeslots[d]));
        set(o, "free", json_integer(freeslots[d]));
        set(slots, device_name(d), o);
    }
    for (size_t i = 0; i < k; i++) {
        json_t *o = json_object();
        set(o, "id", json_integer(q[i].id));
        set(o, "name", jstr(q[i].name));
        set(o, "priority", json_integer(q[i].priority));
        set(o, "ranks", json_integer(q[i].ranks));
        set(o, "device", json_string(device_name(q[i].device)));
        set(o, "pending_reason", jstr(q[i].pending));
        set(o, "submitted_ms", json_integer(q[i].submitted_ms));
        json_array_append_new(queue, o);
    }
    for (int s = ZT_JOB_QUEUED; s <= ZT_JOB_RUNNING; s++)
        set(jobs, zt_job_state_name((zt_job_state)s), json_integer(live[s]));
    json_t *ag = json_object();
    set(ag, "ALIVE", json_integer(agents[1]));
    set(ag, "LOST", json_integer(agents[2]));
    set(out, "slots", slots);
    set(out, "agents", ag);
    set(out, "jobs", jobs);
    set(out, "queue", queue);
    set(out, "time_ms", json_integer(coord_now_ms()));
    zt_free(q);
    reply_json(r, 200, out);
}

/* ---- cancel --------------------------------------------------------------------------------- */

typedef struct http_cancel_op {
    c_op op;
    int64_t id;
    char why[96]; /* "(by NAME)" from the dashboard's signed-in user */
    zt_rpc_code code;
    char msg[512];
    json_t *job;
    pthread_mutex_t m;
    pthread_cond_t cv;
    bool done, committed;
} http_cancel_op;

static void hc_run(zt_coord *c, c_op *op)
{
    http_cancel_op *x = (http_cancel_op *)op;
    x->code = coord_job_cancel(c, x->id, x->why, x->msg, sizeof(x->msg));
    c_job *j = coord_job_find(c, x->id);
    if (x->code == ZT_RPC_OK && !c->batch_failed && j) x->job = job_live_json(j);
}

static void hc_done(zt_coord *c, c_op *op, bool committed)
{
    (void)c;
    http_cancel_op *x = (http_cancel_op *)op;
    pthread_mutex_lock(&x->m);
    x->done = true;
    x->committed = committed;
    pthread_cond_signal(&x->cv);
    pthread_mutex_unlock(&x->m);
}

static void post_cancel(zt_coord *c, zt_http_req *r, int64_t id)
{
    http_cancel_op *x = zt_calloc(1, sizeof(*x));
    if (!x) {
        zt_http_respond_error(r, 503, "out of memory");
        return;
    }
    x->op.run = hc_run;
    x->op.done = hc_done;
    x->id = id;
    if (zt_http_user_name(r)[0]) snprintf(x->why, sizeof(x->why), "(by %s)", zt_http_user_name(r));
    pthread_mutex_init(&x->m, NULL);
    pthread_cond_init(&x->cv, NULL);
    coord_enqueue(c, &x->op); /* done runs once, after the commit or at shutdown */
    pthread_mutex_lock(&x->m);
    while (!x->done)
        pthread_cond_wait(&x->cv, &x->m);
    pthread_mutex_unlock(&x->m);
    if (!x->committed) {
        zt_http_respond_error(r, 503, "the cancellation was not recorded (%s); retry",
                              atomic_load(&c->serving) ? "database error" : "shutting down");
        json_decref(x->job);
    } else if (x->code == ZT_RPC_NOT_FOUND) {
        zt_http_respond_error(r, 404, "%s", x->msg);
        json_decref(x->job);
    } else if (x->code != ZT_RPC_OK) {
        zt_http_respond_error(r, 409, "%s", x->msg);
        json_decref(x->job);
    } else {
        json_t *out = json_object();
        set(out, "job", x->job);
        reply_json(r, 200, out);
    }
    pthread_mutex_destroy(&x->m);
    pthread_cond_destroy(&x->cv);
    zt_free(x);
}

/* ---- event streams -----------------------------------------------------------------------------
 */

void zt_api_attach(zt_coord *c, zt_http *h)
{
    pthread_mutex_lock(&c->mu);
    c->http = h;
    pthread_mutex_unlock(&c->mu);
}

static void publish_json(zt_http *h, int64_t topic, const char *event, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (s) zt_http_publish(h, topic, event, s);
    free(s);
}

void coord_api_log(zt_coord *c, const zt_log_rec *r)
{
    if (!c->http || !zt_http_has_streams(c->http, r->job_id)) return;
    if (c->n_sse_lines == c->cap_sse_lines) {
        size_t cap = c->cap_sse_lines ? c->cap_sse_lines * 2 : 64;
        if (cap > 65536) return; /* a flood: the page reloads the rest by `since` */
        c_sse_line *nl = zt_realloc(c->sse_lines, cap * sizeof(*nl));
        if (!nl) return;
        c->sse_lines = nl;
        c->cap_sse_lines = cap;
    }
    json_t *o = log_json(r);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) return;
    char *copy = zt_strdup(s);
    free(s);
    if (!copy) return;
    c->sse_lines[c->n_sse_lines++] = (c_sse_line){r->job_id, copy};
}

void coord_api_batch_end(zt_coord *c, bool committed)
{
    for (size_t i = 0; i < c->n_sse_lines; i++) {
        if (committed && c->http)
            zt_http_publish(c->http, c->sse_lines[i].job_id, "log", c->sse_lines[i].json);
        zt_free(c->sse_lines[i].json);
    }
    c->n_sse_lines = 0;
    zt_http_flush(c->http);
}

void coord_api_publish_job(zt_coord *c, c_job *j)
{
    zt_http *h = c->http;
    if (!h) return;
    /* the job list hears of every state change at once, of progress at most once a second
     * per job (a thousand jobs reporting must not flood twenty browsers) */
    uint64_t now = zt_now_ns();
    bool all = (j->events || j->done || now - j->sse_all_ns >= 1000000000ull) &&
               zt_http_has_streams(h, ZT_HTTP_TOPIC_ALL);
    bool mine = zt_http_has_streams(h, j->id);
    if (!all && !mine) return;
    json_t *jo = job_live_json(j);
    char *js = jo ? json_dumps(jo, JSON_COMPACT) : NULL;
    json_decref(jo);
    if (!js) return;
    if (all) {
        zt_http_publish(h, ZT_HTTP_TOPIC_ALL, "job", js);
        j->sse_all_ns = now;
    }
    if (mine) {
        zt_http_publish(h, j->id, "job", js);
        for (const c_event *e = j->events; e; e = e->next)
            publish_json(h, j->id, "event", event_json(&e->rec));
        if (j->metrics_dirty && j->metrics_kv) {
            json_t *m = json_object();
            set(m, "step", json_integer(j->metrics_step));
            set(m, "time_ms", json_integer(coord_now_ms()));
            set(m, "values", kv_json(j->metrics_kv));
            publish_json(h, j->id, "metrics", m);
        }
        if (j->att) {
            json_t *ro = json_object();
            set(ro, "attempt_id", json_integer(j->att->id));
            set(ro, "ranks", ranks_live_json(j->att));
            publish_json(h, j->id, "ranks", ro);
        }
    }
    free(js);
}

static void open_stream(zt_coord *c, zt_http_req *r, int64_t topic)
{
    char first[128];
    snprintf(first, sizeof(first), "event: hello\ndata: {\"time_ms\": %lld}\n\n",
             (long long)coord_now_ms());
    if (topic > 0) {
        zt_err e = {0};
        zt_store *rs = store_get(c, &e);
        zt_status st = rs ? zt_store_job_get(rs, topic, on_exists, NULL, &e) : ZT_ERR_IO;
        store_put(c, rs);
        if (st != ZT_OK) {
            store_error(r, st, &e, topic);
            return;
        }
    }
    zt_http_stream(r, topic, first);
}

/* ---- routing -------------------------------------------------------------------------------- */

static bool method_is(zt_http_req *r, const char *want)
{
    const char *m = zt_http_method(r);
    if (strcmp(m, want) == 0 || (strcmp(want, "GET") == 0 && strcmp(m, "HEAD") == 0)) return true;
    zt_http_respond_error(r, 405, "%s needs %s", zt_http_path(r), want);
    return false;
}

static void api_route(zt_coord *c, zt_http_req *r, const char *rest)
{
    if (strcmp(rest, "jobs") == 0) {
        if (method_is(r, "GET")) get_jobs(c, r);
        return;
    }
    if (strcmp(rest, "agents") == 0) {
        if (method_is(r, "GET")) get_agents(c, r);
        return;
    }
    if (strcmp(rest, "cluster") == 0) {
        if (method_is(r, "GET")) get_cluster(c, r);
        return;
    }
    if (strcmp(rest, "stream") == 0) {
        if (method_is(r, "GET")) open_stream(c, r, ZT_HTTP_TOPIC_ALL);
        return;
    }
    if (strncmp(rest, "jobs/", 5) == 0) {
        const char *p = rest + 5;
        char *end;
        errno = 0;
        long long id = strtoll(p, &end, 10);
        if (errno || end == p || id <= 0 || (*end && *end != '/')) {
            size_t l = strcspn(p, "/");
            zt_http_respond_error(r, 400, "job id '%.*s' is not a positive integer",
                                  (int)(l < 40 ? l : 40), p);
            return;
        }
        const char *sub = *end ? end + 1 : "";
        if (!sub[0]) {
            if (method_is(r, "GET")) get_job(c, r, id);
        } else if (strcmp(sub, "metrics") == 0) {
            if (method_is(r, "GET")) get_metrics(c, r, id);
        } else if (strcmp(sub, "checkpoints") == 0) {
            if (method_is(r, "GET")) get_ckpts(c, r, id);
        } else if (strcmp(sub, "logs") == 0) {
            if (method_is(r, "GET")) get_logs(c, r, id);
        } else if (strcmp(sub, "stream") == 0) {
            if (method_is(r, "GET")) open_stream(c, r, id);
        } else if (strcmp(sub, "cancel") == 0) {
            if (method_is(r, "POST")) post_cancel(c, r, id);
        } else {
            zt_http_respond_error(r, 404, "no such resource: /api/v1/%s", rest);
        }
        return;
    }
    zt_http_respond_error(r, 404, "no such resource: /api/v1/%s", rest);
}

static void serve_file(zt_http_req *r, const char *path)
{
    if (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0) path = "/index.html";
    for (size_t i = 0; i < zt_web_n_files; i++) {
        if (strcmp(zt_web_files[i].path, path) != 0) continue;
        const char *m = zt_http_method(r);
        if (strcmp(m, "GET") != 0 && strcmp(m, "HEAD") != 0) {
            zt_http_respond_error(r, 405, "%s needs GET", path);
            return;
        }
        zt_http_respond(r, 200, zt_web_files[i].type, zt_web_files[i].data, zt_web_files[i].len,
                        true);
        return;
    }
    static const char nf[] = "not found\n";
    zt_http_respond(r, 404, "text/plain; charset=utf-8", nf, sizeof(nf) - 1, false);
}

void zt_api_handle(void *arg, zt_http_req *r)
{
    zt_coord *c = arg;
    const char *path = zt_http_path(r);
    if (strncmp(path, "/api/v1/", 8) == 0) {
        api_route(c, r, path + 8);
    } else if (strcmp(path, "/metrics") == 0) {
        if (!method_is(r, "GET")) return;
        char *text = zt_api_metrics_text(c, zt_http_server(r));
        if (!text) {
            zt_http_respond_error(r, 503, "out of memory");
            return;
        }
        zt_http_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, strlen(text),
                        false);
        zt_free(text);
    } else {
        serve_file(r, path);
    }
}
