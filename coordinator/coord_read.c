/* zerotrain: zcoord's read side — the reader thread with its read-only store handle (GetJob,
 * ListJobs, GetMetrics, ListCheckpoints, and the ends of WatchJob / GetAttemptSpec for jobs
 * no longer live), overlaid with live values from the model; and GetLogs streams, one thread
 * each with its own read-only handle, woken after every commit. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/utf8.h"

/* ---- scratch memory for one reply --------------------------------------------------------- */

typedef struct arena {
    void **ptrs;
    size_t n, cap;
    bool failed;
} arena;

static void *arena_alloc(arena *a, size_t size)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        void **p = zt_realloc(a->ptrs, cap * sizeof(*p));
        if (!p) {
            a->failed = true;
            return NULL;
        }
        a->ptrs = p;
        a->cap = cap;
    }
    void *m = zt_calloc(1, size ? size : 1);
    if (!m) {
        a->failed = true;
        return NULL;
    }
    a->ptrs[a->n++] = m;
    return m;
}

/* A copy of s for a reply. Requests are checked for UTF-8 before anything is stored, but a
 * database written by an older zcoord may hold other bytes: they are replaced, so that one bad
 * row cannot make a reply undecodable for standard clients. */
static char *arena_str(arena *a, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    char *d = arena_alloc(a, n + 1);
    if (!d) return (char *)"";
    if (n) memcpy(d, s, n);
    zt_utf8_clean(d, n);
    return d;
}

/* A growing array of message pointers kept in the arena. */
typedef struct pvec {
    void **v;
    size_t n, cap;
} pvec;

static void pvec_push(arena *a, pvec *p, void *item)
{
    if (!item) return;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        void **nv = arena_alloc(a, cap * sizeof(*nv));
        if (!nv) return;
        if (p->n) memcpy(nv, p->v, p->n * sizeof(*nv));
        p->v = nv;
        p->cap = cap;
    }
    p->v[p->n++] = item;
}

static void arena_free(arena *a)
{
    for (size_t i = 0; i < a->n; i++)
        zt_free(a->ptrs[i]);
    zt_free(a->ptrs);
    memset(a, 0, sizeof(*a));
}

/* ---- the reader thread -------------------------------------------------------------------- */

void coord_enqueue_read(zt_coord *c, c_task *t)
{
    t->next = NULL;
    pthread_mutex_lock(&c->rmu);
    if (c->rstop) {
        pthread_mutex_unlock(&c->rmu);
        zt_rpc_fail(t->call, ZT_RPC_UNAVAILABLE, "the coordinator is shutting down; retry shortly");
        zt_free(t);
        return;
    }
    if (c->r_tail)
        c->r_tail->next = t;
    else
        c->r_head = t;
    c->r_tail = t;
    pthread_cond_signal(&c->rcv);
    pthread_mutex_unlock(&c->rmu);
}

void *coord_reader_main(void *arg)
{
    zt_coord *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->rmu);
        while (!c->r_head && !c->rstop)
            pthread_cond_wait(&c->rcv, &c->rmu);
        c_task *t = c->r_head;
        if (t) {
            c->r_head = t->next;
            if (!c->r_head) c->r_tail = NULL;
        }
        pthread_mutex_unlock(&c->rmu);
        if (!t) break;
        t->run(c, t, c->rstore);
    }
    return NULL;
}

static void fail_read(zt_rpc_call *call, zt_status st, const zt_err *e)
{
    zt_rpc_fail(call, zt_rpc_code_from_status(st), "%s", zt_err_msg(e));
}

/* Live values of a job that is still in memory (mu held). */
static void overlay_job(arena *a, const c_job *j, Zt__V1__Job *o)
{
    o->step = j->step;
    o->loss = j->loss;
    o->tokens_per_s = j->tokens_per_s;
    o->eta_s = j->eta_s;
    o->pending_reason = arena_str(a, j->state == ZT_JOB_QUEUED ? j->pending : "");
}

static Zt__V1__Job *job_pb(arena *a, const zt_job_rec *r)
{
    Zt__V1__Job *o = arena_alloc(a, sizeof(*o));
    if (!o) return NULL;
    coord_rec_to_pb(r, o);
    o->name = arena_str(a, r->name);
    o->reason = arena_str(a, r->reason);
    o->user = arena_str(a, r->user);
    o->pending_reason = (char *)"";
    return o;
}

/* ---- GetJob ------------------------------------------------------------------------------- */

typedef struct get_job_task {
    c_task t;
    int64_t id;
} get_job_task;

typedef struct get_job_ctx {
    arena a;
    Zt__V1__GetJobReply r;
    pvec attempts, events;
} get_job_ctx;

static void gj_job(void *arg, const zt_job_rec *rec)
{
    get_job_ctx *g = arg;
    g->r.job = job_pb(&g->a, rec);
    g->r.spec_text = arena_str(&g->a, rec->spec_text);
    g->r.spec_dir = arena_str(&g->a, rec->spec_dir);
    g->r.spec_json = arena_str(&g->a, rec->spec_json);
}

static void gj_attempt(void *arg, const zt_attempt_rec *r)
{
    get_job_ctx *g = arg;
    Zt__V1__Attempt *o = arena_alloc(&g->a, sizeof(*o));
    if (!o) return;
    zt__v1__attempt__init(o);
    o->id = r->id;
    o->number = r->number;
    o->state = (Zt__V1__AttemptState)r->state;
    o->reason = arena_str(&g->a, r->reason);
    o->world_size = r->world_size;
    o->resume_path = arena_str(&g->a, r->resume_path);
    o->resume_step = r->resume_step;
    o->created_ms = r->created_ms;
    o->started_ms = r->started_ms;
    o->ended_ms = r->ended_ms;
    pvec_push(&g->a, &g->attempts, o);
}

typedef struct rank_ctx {
    arena *a;
    pvec ranks;
} rank_ctx;

static void gj_rank(void *arg, const zt_rank_rec *r)
{
    rank_ctx *rc = arg;
    Zt__V1__RankInfo *o = arena_alloc(rc->a, sizeof(*o));
    Zt__V1__WorkerStatus *w = arena_alloc(rc->a, sizeof(*w));
    if (!o || !w) return;
    zt__v1__rank_info__init(o);
    zt__v1__worker_status__init(w);
    o->rank = r->rank;
    o->agent = arena_str(rc->a, r->agent);
    o->local_rank = r->local_rank;
    o->device_index = r->device_index;
    w->attempt_id = r->attempt_id;
    w->rank = r->rank;
    w->pid = r->pid;
    w->step = r->last_step;
    w->device_index = r->device_index;
    if (r->exited) {
        w->phase = ZT__V1__WORKER_PHASE__WORKER_PHASE_EXITED;
        w->exit_code = r->exit_code;
        w->exit_signal = r->exit_signal;
    }
    o->status = w;
    pvec_push(rc->a, &rc->ranks, o);
}

static void gj_event(void *arg, const zt_event_rec *r)
{
    get_job_ctx *g = arg;
    Zt__V1__Event *o = arena_alloc(&g->a, sizeof(*o));
    if (!o) return;
    zt__v1__event__init(o);
    o->id = r->id;
    o->time_ms = r->time_ms;
    o->job_id = r->job_id;
    o->attempt_id = r->attempt_id;
    o->agent = arena_str(&g->a, r->agent);
    o->kind = arena_str(&g->a, r->kind);
    o->from_state = arena_str(&g->a, r->from_state);
    o->to_state = arena_str(&g->a, r->to_state);
    o->reason = arena_str(&g->a, r->reason);
    pvec_push(&g->a, &g->events, o);
}

static void get_job_run(zt_coord *c, c_task *t, zt_store *rs)
{
    get_job_task *gt = (get_job_task *)t;
    get_job_ctx g;
    memset(&g, 0, sizeof(g));
    zt__v1__get_job_reply__init(&g.r);
    zt_err e = {0};
    zt_status st = zt_store_job_get(rs, gt->id, gj_job, &g, &e);
    if (st == ZT_OK) st = zt_store_attempts_list(rs, gt->id, gj_attempt, &g, &e);
    for (size_t i = 0; st == ZT_OK && i < g.attempts.n; i++) {
        Zt__V1__Attempt *at = g.attempts.v[i];
        rank_ctx rc = {.a = &g.a};
        st = zt_store_ranks_list(rs, at->id, gj_rank, &rc, &e);
        at->n_ranks = rc.ranks.n;
        at->ranks = (Zt__V1__RankInfo **)rc.ranks.v;
    }
    if (st == ZT_OK) st = zt_store_events_list(rs, gt->id, 50, gj_event, &g, &e);
    int ckpts = 0;
    if (st == ZT_OK) st = zt_store_ckpt_count(rs, gt->id, &ckpts, &e);
    if (st != ZT_OK || g.a.failed || !g.r.job) {
        if (st == ZT_OK)
            zt_err_set(&e, st = ZT_ERR_NOMEM, "out of memory reading job %lld", (long long)gt->id);
        fail_read(t->call, st, &e);
        goto cleanup;
    }
    g.r.checkpoints = ckpts;
    g.r.n_attempts = g.attempts.n;
    g.r.attempts = (Zt__V1__Attempt **)g.attempts.v;
    g.r.n_events = g.events.n;
    g.r.events = (Zt__V1__Event **)g.events.v;
    pthread_mutex_lock(&c->mu);
    c_job *j = coord_job_find(c, gt->id);
    if (j) {
        overlay_job(&g.a, j, g.r.job);
        c_attempt *a = j->att;
        for (size_t i = 0; a && i < g.attempts.n; i++) {
            Zt__V1__Attempt *at = g.attempts.v[i];
            if (at->id != a->id) continue;
            for (size_t k = 0; k < at->n_ranks; k++) {
                Zt__V1__RankInfo *ri = at->ranks[k];
                if (ri->rank < 0 || ri->rank >= a->world_size) continue;
                const c_rank *rk = &a->ranks[ri->rank];
                Zt__V1__WorkerStatus *w = ri->status;
                w->job_id = j->id;
                w->pid = rk->pid;
                w->phase = (Zt__V1__WorkerPhase)rk->phase;
                w->step = rk->step;
                w->collective_seq = rk->seq;
                w->memory_bytes = rk->memory_bytes;
                w->peak_memory_bytes = rk->peak_memory_bytes;
                w->tokens_per_s = rk->tokens_per_s;
                w->loss = rk->loss;
                w->started_ms = rk->started_ms;
                if (rk->exited) {
                    w->phase = ZT__V1__WORKER_PHASE__WORKER_PHASE_EXITED;
                    w->exit_code = rk->exit_code;
                    w->exit_signal = rk->exit_signal;
                }
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
    zt_rpc_reply(t->call, &g.r.base);
cleanup:
    arena_free(&g.a);
    zt_free(gt);
}

void coord_read_get_job(zt_coord *c, zt_rpc_call *call, int64_t id)
{
    get_job_task *t = zt_calloc(1, sizeof(*t));
    if (!t) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    t->t.run = get_job_run;
    t->t.call = call;
    t->id = id;
    coord_enqueue_read(c, &t->t);
}

/* ---- ListJobs ----------------------------------------------------------------------------- */

typedef struct list_jobs_task {
    c_task t;
    unsigned mask;
    int64_t before;
    int limit;
} list_jobs_task;

typedef struct list_ctx {
    arena a;
    pvec jobs;
} list_ctx;

static void lj_job(void *arg, const zt_job_rec *r)
{
    list_ctx *l = arg;
    pvec_push(&l->a, &l->jobs, job_pb(&l->a, r));
}

static void list_jobs_run(zt_coord *c, c_task *t, zt_store *rs)
{
    list_jobs_task *lt = (list_jobs_task *)t;
    list_ctx l;
    memset(&l, 0, sizeof(l));
    zt_err e = {0};
    zt_status st = zt_store_jobs_list(rs, lt->mask, lt->before, lt->limit, lj_job, &l, &e);
    if (st != ZT_OK || l.a.failed) {
        if (st == ZT_OK) zt_err_set(&e, st = ZT_ERR_NOMEM, "out of memory listing jobs");
        fail_read(t->call, st, &e);
        goto cleanup;
    }
    Zt__V1__ListJobsReply r = ZT__V1__LIST_JOBS_REPLY__INIT;
    r.n_jobs = l.jobs.n;
    r.jobs = (Zt__V1__Job **)l.jobs.v;
    if ((int)l.jobs.n == lt->limit && l.jobs.n > 0) r.next_before_id = r.jobs[l.jobs.n - 1]->id;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < l.jobs.n; i++) {
        c_job *j = coord_job_find(c, r.jobs[i]->id);
        if (j) overlay_job(&l.a, j, r.jobs[i]);
    }
    pthread_mutex_unlock(&c->mu);
    zt_rpc_reply(t->call, &r.base);
cleanup:
    arena_free(&l.a);
    zt_free(lt);
}

void coord_read_list_jobs(zt_coord *c, zt_rpc_call *call, const Zt__V1__ListJobsRequest *q)
{
    list_jobs_task *t = zt_calloc(1, sizeof(*t));
    if (!t) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    t->t.run = list_jobs_run;
    t->t.call = call;
    for (size_t i = 0; i < q->n_states; i++)
        t->mask |= 1u << q->states[i];
    t->before = q->before_id;
    t->limit = q->limit > 0 ? q->limit : 50;
    coord_enqueue_read(c, &t->t);
}

/* ---- GetMetrics --------------------------------------------------------------------------- */

typedef struct metrics_task {
    c_task t;
    const Zt__V1__GetMetricsRequest *q;
} metrics_task;

typedef struct mrow {
    int64_t step, time_ms, attempt_id;
    char *kv;
} mrow;

typedef struct metrics_ctx {
    arena a;
    mrow *rows;
    size_t n, cap;
    int64_t stride;
} metrics_ctx;

static void gm_row(void *arg, const zt_metric_rec *r)
{
    metrics_ctx *m = arg;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 256;
        mrow *nr = zt_realloc(m->rows, cap * sizeof(*nr));
        if (!nr) {
            m->a.failed = true;
            return;
        }
        m->rows = nr;
        m->cap = cap;
    }
    m->rows[m->n].step = r->step;
    m->rows[m->n].time_ms = r->time_ms;
    m->rows[m->n].attempt_id = r->attempt_id;
    m->rows[m->n].kv = arena_str(&m->a, r->kv);
    m->n++;
}

static void gm_job(void *arg, const zt_job_rec *r)
{
    metrics_ctx *m = arg;
    m->stride = r->metrics_stride;
}

static bool key_wanted(const Zt__V1__GetMetricsRequest *q, const char *key, size_t len)
{
    if (!q->n_keys) return true;
    for (size_t i = 0; i < q->n_keys; i++)
        if (strlen(q->keys[i]) == len && strncmp(q->keys[i], key, len) == 0) return true;
    return false;
}

static Zt__V1__MetricPoint *point_pb(arena *a, const mrow *row, const Zt__V1__GetMetricsRequest *q)
{
    Zt__V1__MetricPoint *p = arena_alloc(a, sizeof(*p));
    if (!p) return NULL;
    zt__v1__metric_point__init(p);
    p->step = row->step;
    p->time_ms = row->time_ms;
    p->attempt_id = row->attempt_id;
    pvec vals = {0};
    for (const char *s = row->kv; *s;) {
        while (*s == ' ')
            s++;
        const char *eq = strchr(s, '=');
        if (!eq) break;
        const char *end = strchr(eq, ' ');
        if (!end) end = eq + strlen(eq);
        if (key_wanted(q, s, (size_t)(eq - s))) {
            Zt__V1__Metric *m = arena_alloc(a, sizeof(*m));
            char *k = arena_alloc(a, (size_t)(eq - s) + 1);
            if (m && k) {
                zt__v1__metric__init(m);
                memcpy(k, s, (size_t)(eq - s));
                m->key = k;
                m->value = strtod(eq + 1, NULL);
                pvec_push(a, &vals, m);
            }
        }
        s = end;
    }
    p->n_values = vals.n;
    p->values = (Zt__V1__Metric **)vals.v;
    return p;
}

static void metrics_run(zt_coord *c, c_task *t, zt_store *rs)
{
    (void)c;
    metrics_task *mt = (metrics_task *)t;
    const Zt__V1__GetMetricsRequest *q = mt->q;
    metrics_ctx m;
    memset(&m, 0, sizeof(m));
    zt_err e = {0};
    zt_status st = zt_store_job_get(rs, q->job_id, gm_job, &m, &e);
    if (st == ZT_OK) st = zt_store_metrics_list(rs, q->job_id, q->from_step, gm_row, &m, &e);
    if (st != ZT_OK || m.a.failed) {
        if (st == ZT_OK) zt_err_set(&e, st = ZT_ERR_NOMEM, "out of memory reading metrics");
        fail_read(t->call, st, &e);
        goto cleanup;
    }
    size_t max = q->max_points > 0 ? (size_t)q->max_points : 1000;
    size_t every = m.n > max ? (m.n + max - 1) / max : 1;
    pvec pts = {0};
    for (size_t i = 0; i < m.n; i++)
        if (i % every == 0 || i + 1 == m.n) pvec_push(&m.a, &pts, point_pb(&m.a, &m.rows[i], q));
    Zt__V1__GetMetricsReply r = ZT__V1__GET_METRICS_REPLY__INIT;
    r.n_points = pts.n;
    r.points = (Zt__V1__MetricPoint **)pts.v;
    r.stride = (m.stride > 0 ? m.stride : 1) * (int64_t)every;
    zt_rpc_reply(t->call, &r.base);
cleanup:
    zt_free(m.rows);
    arena_free(&m.a);
    zt_free(mt);
}

void coord_read_metrics(zt_coord *c, zt_rpc_call *call, const Zt__V1__GetMetricsRequest *q)
{
    metrics_task *t = zt_calloc(1, sizeof(*t));
    if (!t) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    t->t.run = metrics_run;
    t->t.call = call;
    t->q = q;
    coord_enqueue_read(c, &t->t);
}

/* ---- ListCheckpoints ---------------------------------------------------------------------- */

typedef struct ckpts_task {
    c_task t;
    int64_t job_id;
    bool partial, deleted;
} ckpts_task;

typedef struct ckpts_ctx {
    arena a;
    pvec ckpts;
    pvec shards;
} ckpts_ctx;

static void lc_ckpt(void *arg, const zt_ckpt_rec *r)
{
    ckpts_ctx *k = arg;
    Zt__V1__Checkpoint *o = arena_alloc(&k->a, sizeof(*o));
    if (!o) return;
    zt__v1__checkpoint__init(o);
    o->id = r->id;
    o->job_id = r->job_id;
    o->attempt_id = r->attempt_id;
    o->step = r->step;
    o->path = arena_str(&k->a, r->path);
    o->state = (Zt__V1__CheckpointState)r->state;
    o->world_size = r->world_size;
    o->shards = r->shards;
    o->bytes = r->bytes;
    o->created_ms = r->created_ms;
    o->committed_ms = r->committed_ms;
    o->deleted_ms = r->deleted_ms;
    o->bad_reason = arena_str(&k->a, r->bad_reason);
    pvec_push(&k->a, &k->ckpts, o);
}

static void lc_shard(void *arg, const zt_shard_rec *r)
{
    ckpts_ctx *k = arg;
    Zt__V1__CheckpointShard *o = arena_alloc(&k->a, sizeof(*o));
    if (!o) return;
    zt__v1__checkpoint_shard__init(o);
    o->rank = r->rank;
    o->file = arena_str(&k->a, r->file);
    o->bytes = r->bytes;
    o->crc32c = r->crc32c;
    o->reported_ms = r->reported_ms;
    pvec_push(&k->a, &k->shards, o);
}

static void on_exists(void *arg, const zt_job_rec *r)
{
    (void)arg;
    (void)r;
}

static void ckpts_run(zt_coord *c, c_task *t, zt_store *rs)
{
    (void)c;
    ckpts_task *ct = (ckpts_task *)t;
    ckpts_ctx k;
    memset(&k, 0, sizeof(k));
    zt_err e = {0};
    zt_status st = zt_store_job_get(rs, ct->job_id, on_exists, NULL, &e);
    if (st == ZT_OK)
        st = zt_store_ckpts_list(rs, ct->job_id, ct->partial, ct->deleted, lc_ckpt, &k, &e);
    for (size_t i = 0; st == ZT_OK && i < k.ckpts.n; i++) {
        Zt__V1__Checkpoint *o = k.ckpts.v[i];
        memset(&k.shards, 0, sizeof(k.shards));
        st = zt_store_shards_list(rs, o->id, lc_shard, &k, &e);
        o->n_shard = k.shards.n;
        o->shard = (Zt__V1__CheckpointShard **)k.shards.v;
    }
    if (st != ZT_OK || k.a.failed) {
        if (st == ZT_OK) zt_err_set(&e, st = ZT_ERR_NOMEM, "out of memory listing checkpoints");
        fail_read(t->call, st, &e);
    } else {
        Zt__V1__ListCheckpointsReply r = ZT__V1__LIST_CHECKPOINTS_REPLY__INIT;
        r.n_checkpoints = k.ckpts.n;
        r.checkpoints = (Zt__V1__Checkpoint **)k.ckpts.v;
        zt_rpc_reply(t->call, &r.base);
    }
    arena_free(&k.a);
    zt_free(ct);
}

void coord_read_ckpts(zt_coord *c, zt_rpc_call *call, const Zt__V1__ListCheckpointsRequest *q)
{
    ckpts_task *t = zt_calloc(1, sizeof(*t));
    if (!t) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    t->t.run = ckpts_run;
    t->t.call = call;
    t->job_id = q->job_id;
    t->partial = q->include_partial;
    t->deleted = q->include_deleted;
    coord_enqueue_read(c, &t->t);
}

/* ---- GetLogs streams ---------------------------------------------------------------------- */

#define LOG_PAGE 500

typedef struct log_stream {
    zt_coord *c;
    zt_rpc_call *call;
    int64_t job_id, last_id;
    int tail;
    bool follow, no_events;
    char *ranks_json;
    /* the page being built */
    arena a;
    pvec entries;
} log_stream;

static void ls_entry(void *arg, const zt_log_rec *r)
{
    log_stream *ls = arg;
    Zt__V1__LogEntry *o = arena_alloc(&ls->a, sizeof(*o));
    if (!o) return;
    zt__v1__log_entry__init(o);
    o->id = r->id;
    o->time_ms = r->time_ms;
    o->job_id = r->job_id;
    o->attempt_id = r->attempt_id;
    o->rank = r->rank;
    o->source = (Zt__V1__LogSource)r->source;
    o->text = arena_str(&ls->a, r->text);
    pvec_push(&ls->a, &ls->entries, o);
    if (r->id > ls->last_id) ls->last_id = r->id;
}

static void ls_state(void *arg, const zt_job_rec *r)
{
    *(zt_job_state *)arg = r->state;
}

static bool stream_stopping(zt_coord *c)
{
    return !atomic_load(&c->serving);
}

/* Sends a batch, waiting (up to 30 s) while the client reads slowly. */
static zt_status ls_send(log_stream *ls, const Zt__V1__LogBatch *b)
{
    for (int i = 0; i < 3000; i++) {
        zt_status st = zt_rpc_stream_send(ls->call, &b->base);
        if (st != ZT_ERR_NOSPACE) return st;
        if (stream_stopping(ls->c) || zt_rpc_call_cancelled(ls->call)) return ZT_ERR_PEER;
        zt_sleep_ms(10);
    }
    return ZT_ERR_NOSPACE;
}

static void *log_stream_main(void *arg)
{
    log_stream *ls = arg;
    zt_coord *c = ls->c;
    zt_store *rs = NULL;
    zt_err e = {0};
    zt_job_state state = 0;
    zt_status st = zt_store_open(&rs, c->cfg.db_path, true, &e);
    if (st == ZT_OK) st = zt_store_job_get(rs, ls->job_id, ls_state, &state, &e);
    if (st != ZT_OK) {
        fail_read(ls->call, st, &e);
        goto done;
    }
    int64_t seen_seq;
    pthread_mutex_lock(&c->lmu);
    seen_seq = c->log_seq;
    pthread_mutex_unlock(&c->lmu);
    bool first = true;
    for (;;) {
        if (stream_stopping(c)) {
            zt_rpc_fail(ls->call, ZT_RPC_UNAVAILABLE,
                        "the coordinator is shutting down; run the command again to resume");
            break;
        }
        if (zt_rpc_call_cancelled(ls->call)) {
            zt_rpc_stream_finish(ls->call, ZT_RPC_CANCELLED, "client gone");
            break;
        }
        /* read the state before the lines, so that lines committed with the final state
         * are read before the stream ends */
        if (ls->follow && zt_store_job_get(rs, ls->job_id, ls_state, &state, &e) != ZT_OK) {
            fail_read(ls->call, e.status, &e);
            break;
        }
        memset(&ls->entries, 0, sizeof(ls->entries));
        st = zt_store_logs_list(rs, ls->job_id, ls->last_id, LOG_PAGE, first ? ls->tail : 0,
                                ls->ranks_json, ls->no_events, ls_entry, ls, &e);
        first = false;
        if (st != ZT_OK || ls->a.failed) {
            if (st == ZT_OK) zt_err_set(&e, st = ZT_ERR_NOMEM, "out of memory reading logs");
            fail_read(ls->call, st, &e);
            break;
        }
        size_t got = ls->entries.n;
        bool ended = zt_job_state_terminal(state);
        if (got || (ended && ls->follow)) {
            Zt__V1__LogBatch b = ZT__V1__LOG_BATCH__INIT;
            b.n_entries = got;
            b.entries = (Zt__V1__LogEntry **)ls->entries.v;
            b.final = ls->follow && ended && got < LOG_PAGE;
            st = ls_send(ls, &b);
            arena_free(&ls->a);
            if (st == ZT_ERR_NOSPACE) {
                zt_rpc_fail(ls->call, ZT_RPC_RESOURCE_EXHAUSTED,
                            "log reader too slow; run the command again with --after to resume");
                break;
            }
            if (st != ZT_OK) {
                zt_rpc_stream_finish(ls->call, ZT_RPC_CANCELLED, "client gone");
                break;
            }
            if (b.final) goto finish_ok;
        }
        if (got == LOG_PAGE) continue;
        if (!ls->follow) goto finish_ok;
        /* wait for the next commit (or poll now and then) */
        pthread_mutex_lock(&c->lmu);
        if (c->log_seq == seen_seq && atomic_load(&c->serving)) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 500 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&c->lcv, &c->lmu, &ts);
        }
        seen_seq = c->log_seq;
        pthread_mutex_unlock(&c->lmu);
    }
    goto done;
finish_ok:
    zt_rpc_stream_finish(ls->call, ZT_RPC_OK, NULL);
done:
    arena_free(&ls->a);
    zt_store_close(rs);
    zt_free(ls->ranks_json);
    zt_free(ls);
    pthread_mutex_lock(&c->lmu);
    c->log_streams--;
    pthread_cond_broadcast(&c->lcv);
    pthread_mutex_unlock(&c->lmu);
    return NULL;
}

void coord_logs_start(zt_coord *c, zt_rpc_call *call, const Zt__V1__GetLogsRequest *q)
{
    log_stream *ls = zt_calloc(1, sizeof(*ls));
    if (!ls) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    ls->c = c;
    ls->call = call;
    ls->job_id = q->job_id;
    ls->last_id = q->after_id;
    ls->tail = q->tail;
    ls->follow = q->follow;
    ls->no_events = q->no_events;
    if (q->n_ranks) {
        size_t cap = q->n_ranks * 12 + 3;
        ls->ranks_json = zt_malloc(cap);
        if (ls->ranks_json) {
            size_t n = (size_t)snprintf(ls->ranks_json, cap, "[");
            for (size_t i = 0; i < q->n_ranks; i++)
                n += (size_t)snprintf(ls->ranks_json + n, cap - n, "%s%d", i ? "," : "",
                                      q->ranks[i]);
            snprintf(ls->ranks_json + n, cap - n, "]");
        }
    }
    pthread_mutex_lock(&c->lmu);
    if (c->log_streams >= c->cfg.max_log_streams) {
        pthread_mutex_unlock(&c->lmu);
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED,
                    "too many log streams open (%d); close some and retry", c->cfg.max_log_streams);
        zt_free(ls->ranks_json);
        zt_free(ls);
        return;
    }
    c->log_streams++;
    pthread_mutex_unlock(&c->lmu);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    if (pthread_create(&th, &attr, log_stream_main, ls) != 0) {
        pthread_mutex_lock(&c->lmu);
        c->log_streams--;
        pthread_mutex_unlock(&c->lmu);
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "cannot start a log stream; retry");
        zt_free(ls->ranks_json);
        zt_free(ls);
    }
    pthread_attr_destroy(&attr);
}

void coord_logs_wake(zt_coord *c)
{
    pthread_mutex_lock(&c->lmu);
    c->log_seq++;
    pthread_cond_broadcast(&c->lcv);
    pthread_mutex_unlock(&c->lmu);
}

void coord_logs_stop(zt_coord *c)
{
    pthread_mutex_lock(&c->lmu);
    pthread_cond_broadcast(&c->lcv);
    while (c->log_streams > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&c->lcv, &c->lmu, &ts);
        pthread_cond_broadcast(&c->lcv);
    }
    pthread_mutex_unlock(&c->lmu);
}
