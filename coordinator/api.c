/* zerotrain: zcoord's JSON API, event streams and dashboard files (see api.h). Each reader
 * borrows a read-only store handle from a small pool, and takes the model's lock only to copy
 * live values (ranks, agents, the queue); JSON is built after the lock is released where the
 * copy can be large. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/api_int.h"

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
#include "web/web_assets.h"

/* ---- small helpers ------------------------------------------------------------------------ */

/* A JSON string of s; bytes that are not UTF-8 (a database written by an old zcoord) become
 * '?', so that one bad row never breaks a reply. */
json_t *api_jstr(const char *s)
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

void api_set(json_t *o, const char *k, json_t *v)
{
    json_object_set_new(o, k, v ? v : json_null());
}

void api_reply_json(zt_http_req *r, int status, json_t *o)
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

const char *api_device_name(int d)
{
    return d == 2 ? "cuda" : "cpu";
}

const char *api_phase_name(int phase)
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
            api_set(o, key, json_real(strtod(eq + 1, NULL)));
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
    api_set(o, "id", json_integer(r->id));
    api_set(o, "name", api_jstr(r->name));
    api_set(o, "state", json_string(zt_job_state_name(r->state)));
    api_set(o, "reason", api_jstr(r->reason));
    api_set(o, "pending_reason", json_string(""));
    api_set(o, "priority", json_integer(r->priority));
    api_set(o, "ranks", json_integer(r->ranks));
    api_set(o, "ranks_per_node", json_integer(r->ranks_per_node));
    api_set(o, "device", json_string(api_device_name(r->device)));
    api_set(o, "max_restarts", json_integer(r->max_restarts));
    api_set(o, "restarts", json_integer(r->restarts));
    api_set(o, "total_steps", json_integer(r->total_steps));
    api_set(o, "step", json_integer(r->last_step));
    api_set(o, "loss", json_null());
    api_set(o, "tokens_per_s", json_null());
    api_set(o, "eta_s", json_null());
    api_set(o, "submitted_ms", json_integer(r->submitted_ms));
    api_set(o, "started_ms", json_integer(r->started_ms));
    api_set(o, "ended_ms", json_integer(r->ended_ms));
    api_set(o, "attempt_id", json_integer(r->attempt_id));
    api_set(o, "user", api_jstr(r->user));
    return o;
}

/* Live values of a job in memory (mu held). */
static void job_overlay(json_t *o, const c_job *j)
{
    api_set(o, "step", json_integer(j->step));
    if (j->metrics_kv) {
        api_set(o, "loss", json_real(j->loss));
        api_set(o, "tokens_per_s", json_real(j->tokens_per_s));
    }
    if (j->eta_s > 0) api_set(o, "eta_s", json_real(j->eta_s));
    api_set(o, "pending_reason", api_jstr(j->state == ZT_JOB_QUEUED ? j->pending : ""));
}

/* A job as the model has it (mu held, after a commit). */
json_t *api_job_live_json(const c_job *j)
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
    api_set(o, "rank", json_integer(rk->rank));
    api_set(o, "attempt_id", json_integer(attempt_id));
    api_set(o, "agent", api_jstr(rk->agent ? rk->agent->name : ""));
    api_set(o, "local_rank", json_integer(rk->local_rank));
    api_set(o, "device_index", json_integer(rk->device_index));
    api_set(o, "pid", json_integer(rk->pid));
    api_set(o, "phase", json_string(rk->exited ? "EXITED" : api_phase_name(rk->phase)));
    api_set(o, "step", json_integer(rk->step));
    api_set(o, "collective_seq", json_integer(rk->seq));
    api_set(o, "memory_bytes", json_integer(rk->memory_bytes));
    api_set(o, "peak_memory_bytes", json_integer(rk->peak_memory_bytes));
    api_set(o, "tokens_per_s", json_real(rk->tokens_per_s));
    api_set(o, "loss", json_real(rk->loss));
    api_set(o, "started_ms", json_integer(rk->started_ms));
    api_set(o, "last_report_ms", json_integer(rk->agent && rk->seen ? rk->agent->last_seen_ms : 0));
    if (rk->exited) {
        api_set(o, "exit_code", json_integer(rk->exit_code));
        api_set(o, "exit_signal", json_integer(rk->exit_signal));
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
    api_set(o, "id", json_integer(r->id));
    api_set(o, "time_ms", json_integer(r->time_ms));
    api_set(o, "attempt_id", json_integer(r->attempt_id));
    api_set(o, "agent", api_jstr(r->agent));
    api_set(o, "kind", api_jstr(r->kind));
    api_set(o, "from", api_jstr(r->from_state));
    api_set(o, "to", api_jstr(r->to_state));
    api_set(o, "reason", api_jstr(r->reason));
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
    api_set(out, "jobs", jobs);
    api_set(out, "next_before",
            (int64_t)n == limit && n ? json_integer(json_integer_value(
                                           json_object_get(json_array_get(jobs, n - 1), "id")))
                                     : json_null());
    api_reply_json(r, 200, out);
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
    if (!d->spec) d->spec = api_jstr(r->spec_json);
    d->spec_dir = zt_strdup(r->spec_dir ? r->spec_dir : "");
}

static void dj_attempt(void *arg, const zt_attempt_rec *r)
{
    detail_ctx *d = arg;
    json_t *o = json_object();
    if (!o) return;
    api_set(o, "id", json_integer(r->id));
    api_set(o, "number", json_integer(r->number));
    api_set(o, "state", json_string(zt_attempt_state_name(r->state)));
    api_set(o, "reason", api_jstr(r->reason));
    api_set(o, "world_size", json_integer(r->world_size));
    api_set(o, "resume_path", api_jstr(r->resume_path));
    api_set(o, "resume_step", json_integer(r->resume_step));
    api_set(o, "created_ms", json_integer(r->created_ms));
    api_set(o, "started_ms", json_integer(r->started_ms));
    api_set(o, "ended_ms", json_integer(r->ended_ms));
    api_set(o, "ranks", json_array());
    json_array_append_new(d->attempts, o);
}

static void dj_rank(void *arg, const zt_rank_rec *r)
{
    json_t *o = json_object();
    if (!o) return;
    api_set(o, "rank", json_integer(r->rank));
    api_set(o, "attempt_id", json_integer(r->attempt_id));
    api_set(o, "agent", api_jstr(r->agent));
    api_set(o, "local_rank", json_integer(r->local_rank));
    api_set(o, "device_index", json_integer(r->device_index));
    api_set(o, "pid", json_integer(r->pid));
    api_set(o, "phase", json_string(r->exited ? "EXITED" : "UNSPECIFIED"));
    api_set(o, "step", json_integer(r->last_step));
    if (r->exited) {
        api_set(o, "exit_code", json_integer(r->exit_code));
        api_set(o, "exit_signal", json_integer(r->exit_signal));
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
            if (latest) api_set(latest, "step", json_integer(j->metrics_step));
        }
        if (j->att) {
            ranks = ranks_live_json(j->att);
            for (size_t i = 0; i < json_array_size(d.attempts); i++) {
                json_t *a = json_array_get(d.attempts, i);
                if (json_integer_value(json_object_get(a, "id")) == j->att->id)
                    api_set(a, "ranks", json_deep_copy(ranks));
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
    api_set(out, "job", d.job);
    api_set(out, "spec", d.spec);
    api_set(out, "spec_dir", api_jstr(d.spec_dir));
    api_set(out, "attempts", d.attempts);
    api_set(out, "ranks", ranks);
    api_set(out, "events", d.events);
    api_set(out, "checkpoints", json_integer(ckpts));
    api_set(out, "latest", latest);
    zt_free(d.spec_dir);
    api_reply_json(r, 200, out);
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
    api_set(out, "stride", json_integer((m.stride > 0 ? m.stride : 1) * (int64_t)every));
    api_set(out, "steps", steps);
    api_set(out, "time_ms", times);
    api_set(out, "series", series);
    api_set(out, "last_step", json_integer(m.n ? m.rows[m.n - 1].step : since));
    api_reply_json(r, 200, out);
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
    api_set(o, "id", json_integer(r->id));
    api_set(o, "attempt_id", json_integer(r->attempt_id));
    api_set(o, "step", json_integer(r->step));
    api_set(o, "path", api_jstr(r->path));
    api_set(o, "state", json_string(zt_ckpt_state_name(r->state)));
    api_set(o, "world_size", json_integer(r->world_size));
    api_set(o, "shards", json_integer(r->shards));
    api_set(o, "bytes", json_integer(r->bytes));
    api_set(o, "created_ms", json_integer(r->created_ms));
    api_set(o, "committed_ms", json_integer(r->committed_ms));
    api_set(o, "deleted_ms", json_integer(r->deleted_ms));
    api_set(o, "bad_reason", api_jstr(r->bad_reason));
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
    api_set(out, "checkpoints", arr);
    api_reply_json(r, 200, out);
}

static json_t *log_json(const zt_log_rec *r)
{
    json_t *o = json_object();
    if (!o) return NULL;
    api_set(o, "id", json_integer(r->id));
    api_set(o, "time_ms", json_integer(r->time_ms));
    api_set(o, "attempt_id", json_integer(r->attempt_id));
    api_set(o, "rank", json_integer(r->rank));
    api_set(o, "source", json_string(source_name(r->source)));
    api_set(o, "text", api_jstr(r->text));
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
    api_set(out, "next",
            json_integer(n ? json_integer_value(json_object_get(json_array_get(arr, n - 1), "id"))
                           : since));
    api_set(out, "logs", arr);
    api_reply_json(r, 200, out);
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
    json_t *jo = api_job_live_json(j);
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
            api_set(m, "step", json_integer(j->metrics_step));
            api_set(m, "time_ms", json_integer(coord_now_ms()));
            api_set(m, "values", kv_json(j->metrics_kv));
            publish_json(h, j->id, "metrics", m);
        }
        if (j->att) {
            json_t *ro = json_object();
            api_set(ro, "attempt_id", json_integer(j->att->id));
            api_set(ro, "ranks", ranks_live_json(j->att));
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
        if (method_is(r, "GET")) api_get_agents(c, r);
        return;
    }
    if (strcmp(rest, "cluster") == 0) {
        if (method_is(r, "GET")) api_get_cluster(c, r);
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
            if (method_is(r, "POST")) api_post_cancel(c, r, id);
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
