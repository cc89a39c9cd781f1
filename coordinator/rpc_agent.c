/* zerotrain: zcoord's zt.v1.AgentControl service: agents register, heartbeat (answered from
 * memory: the hot path), read the specs of what they run, and report metrics, checkpoints,
 * log lines and rendezvous entries. Each method is a descriptor run by rpc.c's skeleton. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/rpc_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/device.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/utf8.h"
#include "coordinator/auth.h"
#include "coordinator/validate.h"

/* ---- RegisterAgent ----------------------------------------------------------------------- */

typedef struct register_op {
    c_rpc_op r;
    int64_t incarnation;
    char agent_key[ZT_AUTH_KEY_LEN + 1];
    bool by_cert; /* its client certificate names it: the name is its own */
} register_op;

static void register_run(zt_coord *c, c_op *op)
{
    register_op *x = (register_op *)op;
    const Zt__V1__RegisterAgentRequest *q = x->r.q;
    c_agent *a = coord_agent_find(c, q->name);
    const char *from = a ? zt_agent_state_name(a->state) : "";
    /* a live agent's name goes to the process holding its key, to nobody else until the
     * agent is LOST (a restarted coordinator issued no key yet: anyone may take it) */
    uint64_t silent = a ? zt_now_ns() - a->last_seen_ns : 0;
    if (a && c->cfg.auth && !x->by_cert && a->state == ZT_AGENT_ALIVE && !a->leaving &&
        silent < (uint64_t)c->cfg.heartbeat_timeout_ms * 1000000ull &&
        zt_auth_key_exists(c->cfg.auth, q->name) &&
        !(q->previous_agent_key[0] &&
          zt_auth_key_is(c->cfg.auth, q->name, q->previous_agent_key))) {
        x->r.code = ZT_RPC_FAILED_PRECONDITION;
        snprintf(
            x->r.msg, x->r.msg_cap,
            "agent %s is alive (last heartbeat %.1f s ago, from %s) and this process does not hold its key: another zagent may not take its name; stop that one, or wait until it is LOST (heartbeat timeout %.1f s)",
            q->name, (double)silent * 1e-9, a->hostname && a->hostname[0] ? a->hostname : "?",
            (double)c->cfg.heartbeat_timeout_ms / 1000.0);
        return;
    }
    char sha[65] = "";
    if (c->cfg.auth) {
        zt_err se = {0};
        if (zt_auth_key_issue(c->cfg.auth, q->name, x->agent_key, sha, &se) != ZT_OK) {
            x->r.code = ZT_RPC_UNAVAILABLE;
            snprintf(x->r.msg, x->r.msg_cap, "%s", zt_err_msg(&se));
            return;
        }
    }
    if (!a && !(a = coord_agent_new(c, q->name))) {
        x->r.code = ZT_RPC_RESOURCE_EXHAUSTED;
        snprintf(x->r.msg, x->r.msg_cap, "out of memory registering agent %s", q->name);
        return;
    }
    c_gpu *gpus = NULL;
    if (q->n_gpus) {
        gpus = zt_calloc(q->n_gpus, sizeof(*gpus));
        if (!gpus) {
            x->r.code = ZT_RPC_RESOURCE_EXHAUSTED;
            snprintf(x->r.msg, x->r.msg_cap, "out of memory registering agent %s", q->name);
            return;
        }
        for (size_t i = 0; i < q->n_gpus; i++) {
            gpus[i].index = q->gpus[i]->index;
            snprintf(gpus[i].name, sizeof(gpus[i].name), "%s", q->gpus[i]->name);
            zt_utf8_trim_partial(gpus[i].name); /* a long name is cut, never mid-character */
            gpus[i].memory_total = q->gpus[i]->memory_total;
            gpus[i].memory_free = q->gpus[i]->memory_free;
        }
    }
    /* hostname and address are at most ZT_MAX_HOST bytes (validated); the version is
     * informational: cut on a character boundary */
    char *h = zt_strdup(q->hostname), *ad = zt_strdup(q->address),
         *v = zt_strndup(q->version, zt_utf8_cut(q->version, strlen(q->version), 63));
    if (h) {
        zt_free(a->hostname);
        a->hostname = h;
    }
    if (ad) {
        zt_free(a->address);
        a->address = ad;
    }
    if (v) {
        zt_free(a->version);
        a->version = v;
    }
    zt_free(a->gpus);
    a->gpus = gpus;
    a->n_gpus = (int)q->n_gpus;
    a->device = q->device;
    a->slots = q->slots;
    a->incarnation++;
    snprintf(a->key_sha, sizeof(a->key_sha), "%s", sha);
    a->state = ZT_AGENT_ALIVE;
    a->revived = false;
    a->leaving = false; /* an earlier incarnation's goodbye does not apply to this one */
    a->registered_ms = a->last_seen_ms = coord_now_ms();
    a->last_seen_ns = zt_now_ns();
    a->n_reports = 0; /* a new process: its earlier workers are gone */
    a->n_exits = 0;
    a->reports_changed = true;
    a->desired_dirty = true;
    x->incarnation = a->incarnation;
    coord_agent_save(c, a);
    char reason[200];
    snprintf(reason, sizeof(reason), "registered (incarnation %lld, %d %s slot%s) from %s",
             (long long)a->incarnation, a->slots, zt_device_name((zt_device)a->device),
             a->slots == 1 ? "" : "s", a->hostname[0] ? a->hostname : "?");
    zt_event_rec e = {.time_ms = a->registered_ms,
                      .agent = a->name,
                      .kind = "agent",
                      .from_state = from,
                      .to_state = "ALIVE",
                      .reason = reason};
    zt_err err = {0};
    if (zt_store_event_add(c->store, &e, NULL, &err) != ZT_OK) coord_db_failed(c, &err);
    ZT_INFO("coord", "agent %s %s", a->name, reason);
    c->sched_dirty = true;
}

static void register_reply(zt_coord *c, c_rpc_op *op)
{
    register_op *x = (register_op *)op;
    const Zt__V1__RegisterAgentRequest *q = op->q;
    Zt__V1__RegisterAgentReply r = ZT__V1__REGISTER_AGENT_REPLY__INIT;
    r.name = q->name;
    r.incarnation = x->incarnation;
    r.heartbeat_interval_ms = (int32_t)c->cfg.heartbeat_interval_ms;
    r.heartbeat_timeout_ms = (int32_t)c->cfg.heartbeat_timeout_ms;
    r.agent_key = x->agent_key;
    zt_rpc_reply(op->op.call, &r.base);
}

/* A client certificate that names an agent registers that agent only. */
static bool register_permit(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *m)
{
    (void)c;
    const Zt__V1__RegisterAgentRequest *q = (const void *)m;
    const char *who = zt_rpc_call_identity(call);
    if (strncmp(who, "agent-cert:", 11) != 0 || strcmp(who + 11, q->name) == 0) return true;
    zt_rpc_fail(
        call, ZT_RPC_PERMISSION_DENIED,
        "permission denied: the client certificate is for agent %s, not %s; start zagent with --name %s or give it its own certificate",
        who + 11, q->name, who + 11);
    return false;
}

static bool register_prepare(zt_coord *c, zt_rpc_call *call, c_rpc_op *op)
{
    (void)c;
    ((register_op *)op)->by_cert = strncmp(zt_rpc_call_identity(call), "agent-cert:", 11) == 0;
    return true;
}

/* ---- Heartbeat (the hot path: memory only, no store write unless something changed) ------ */

/* An agent's key sends that agent's heartbeats only. */
static bool heartbeat_permit(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *m)
{
    const Zt__V1__HeartbeatRequest *q = (const void *)m;
    const char *me = coord_rpc_caller(c, call);
    if (!me[0] || strcmp(me, q->name) == 0) return true;
    zt_rpc_fail(call, ZT_RPC_PERMISSION_DENIED,
                "permission denied: the key of agent %s cannot send agent %s's heartbeat", me,
                q->name);
    return false;
}

static void heartbeat_body(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *m)
{
    const Zt__V1__HeartbeatRequest *q = (const void *)m;
    pthread_mutex_lock(&c->mu);
    c_agent *a = coord_agent_find(c, q->name);
    if (!a) {
        pthread_mutex_unlock(&c->mu);
        zt_rpc_fail(
            call, ZT_RPC_NOT_FOUND,
            "agent %s is not registered with this coordinator (new database?): call RegisterAgent",
            q->name);
        return;
    }
    if (q->incarnation != a->incarnation) {
        int64_t cur = a->incarnation;
        pthread_mutex_unlock(&c->mu);
        zt_rpc_fail(
            call, ZT_RPC_FAILED_PRECONDITION,
            "agent %s: incarnation %lld is stale (current %lld): the agent re-registered or another process uses this name; register again",
            q->name, (long long)q->incarnation, (long long)cur);
        return;
    }
    a->last_seen_ns = zt_now_ns();
    a->last_seen_ms = coord_now_ms();
    bool changed = false;
    if (q->leaving) {
        /* its workers have exited (reported below): the state thread marks it LOST */
        a->leaving = true;
        a->revived = false;
        changed = true;
    } else if (a->state == ZT_AGENT_LOST && !a->revived) {
        a->revived = true;
        changed = true;
    }
    int n = (int)q->n_workers;
    if (n > a->cap_reports) {
        int cap = n < 8 ? 8 : n;
        c_report *r = zt_realloc(a->reports, (size_t)cap * sizeof(*r));
        if (!r) {
            pthread_mutex_unlock(&c->mu);
            zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        a->reports = r;
        a->cap_reports = cap;
    }
    if (n != a->n_reports) changed = true;
    /* remember exits until the state thread has seen them: the agent may drop an exited
     * worker from its next heartbeat */
    for (int i = 0; i < n; i++) {
        const Zt__V1__WorkerStatus *w = q->workers[i];
        if (w->phase != ZT__V1__WORKER_PHASE__WORKER_PHASE_EXITED) continue;
        bool known = false;
        for (int k = 0; k < a->n_reports && !known; k++)
            known = a->reports[k].attempt_id == w->attempt_id && a->reports[k].rank == w->rank &&
                    a->reports[k].phase == ZT_PHASE_EXITED;
        for (int k = 0; k < a->n_exits && !known; k++)
            known = a->exits[k].attempt_id == w->attempt_id && a->exits[k].rank == w->rank;
        if (known) continue;
        if (a->n_exits == a->cap_exits) {
            int cap = a->cap_exits ? a->cap_exits * 2 : 8;
            c_report *e = zt_realloc(a->exits, (size_t)cap * sizeof(*e));
            if (!e) continue; /* the level-triggered report still carries it */
            a->exits = e;
            a->cap_exits = cap;
        }
        c_report *e = &a->exits[a->n_exits++];
        memset(e, 0, sizeof(*e));
        e->job_id = w->job_id;
        e->attempt_id = w->attempt_id;
        e->rank = w->rank;
        e->pid = w->pid;
        e->phase = ZT_PHASE_EXITED;
        e->step = w->step;
        e->exit_code = w->exit_code;
        e->exit_signal = w->exit_signal;
        e->device_index = w->device_index;
        snprintf(e->bad_ckpt, sizeof(e->bad_ckpt), "%s", w->bad_checkpoint);
        snprintf(e->bad_ckpt_why, sizeof(e->bad_ckpt_why), "%s", w->bad_checkpoint_reason);
        snprintf(e->exit_reason, sizeof(e->exit_reason), "%s", w->exit_reason);
        changed = true;
    }
    for (int i = 0; i < n; i++) {
        const Zt__V1__WorkerStatus *w = q->workers[i];
        c_report *r = &a->reports[i];
        if (i < a->n_reports &&
            (r->attempt_id != w->attempt_id || r->rank != w->rank || r->phase != (int)w->phase))
            changed = true;
        r->job_id = w->job_id;
        r->attempt_id = w->attempt_id;
        r->rank = w->rank;
        r->pid = w->pid;
        r->phase = (int)w->phase;
        r->step = w->step;
        r->collective_seq = w->collective_seq;
        r->memory_bytes = w->memory_bytes;
        r->peak_memory_bytes = w->peak_memory_bytes;
        r->tokens_per_s = w->tokens_per_s;
        r->loss = w->loss;
        r->exit_code = w->exit_code;
        r->exit_signal = w->exit_signal;
        r->device_index = w->device_index;
        r->started_ms = w->started_ms;
        r->wait.waiting = w->wait != NULL;
        if (w->wait) {
            snprintf(r->wait.op, sizeof(r->wait.op), "%s", w->wait->op);
            snprintf(r->wait.part, sizeof(r->wait.part), "%s", w->wait->part);
            snprintf(r->wait.prev_op, sizeof(r->wait.prev_op), "%s", w->wait->prev_op);
            r->wait.seq = w->wait->seq;
            r->wait.step = w->wait->step;
            r->wait.prev_seq = w->wait->prev_seq;
            r->wait.waited_ms = w->wait->waited_ms;
        }
        r->bad_ckpt[0] = '\0';
        r->bad_ckpt_why[0] = '\0';
        r->exit_reason[0] = '\0';
    }
    a->n_reports = n;
    /* live step progress is read by the state thread's timer from the ranks */
    for (int i = 0; i < n; i++) {
        c_attempt *t = coord_attempt_find(c, a->reports[i].attempt_id);
        int rk = a->reports[i].rank;
        if (t && rk >= 0 && rk < t->world_size && t->ranks[rk].agent == a) {
            c_rank *x = &t->ranks[rk];
            if (a->reports[i].step > x->step) x->step = a->reports[i].step;
            x->seq = a->reports[i].collective_seq;
            x->loss = a->reports[i].loss;
            x->tokens_per_s = a->reports[i].tokens_per_s;
            x->memory_bytes = a->reports[i].memory_bytes;
            x->peak_memory_bytes = a->reports[i].peak_memory_bytes;
            x->wait = a->reports[i].wait;
        }
    }
    for (size_t g = 0; g < q->n_gpus; g++)
        for (int k = 0; k < a->n_gpus; k++)
            if (a->gpus[k].index == q->gpus[g]->index)
                a->gpus[k].memory_free = q->gpus[g]->memory_free;
    if (changed) a->reports_changed = true;
    /* answer outside the lock: copy the published desired set */
    uint8_t small[4096];
    size_t len = a->desired_len;
    uint8_t *copy = len <= sizeof(small) ? small : zt_malloc(len);
    if (copy && len) memcpy(copy, a->desired, len);
    pthread_mutex_unlock(&c->mu);
    if (changed) coord_wake_reports(c);
    if (!copy) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    zt_rpc_reply_bytes(call, copy, len);
    if (copy != small) zt_free(copy);
}

/* ---- GetAttemptSpec ---------------------------------------------------------------------- */

typedef struct spec_task {
    c_task t;
    int64_t id;
} spec_task;

static void on_spec_attempt(void *arg, const zt_attempt_rec *r)
{
    zt_attempt_rec *out = arg;
    *out = *r;
    out->reason = NULL;
    out->resume_path = NULL;
}

static void spec_read(zt_coord *c, c_task *t, zt_store *rs)
{
    (void)c;
    spec_task *s = (spec_task *)t;
    zt_attempt_rec a = {0};
    zt_err e = {0};
    zt_status st = zt_store_attempt_get(rs, s->id, on_spec_attempt, &a, &e);
    if (st == ZT_ERR_NOT_FOUND)
        zt_rpc_fail(t->call, ZT_RPC_NOT_FOUND, "attempt %lld not found", (long long)s->id);
    else if (st != ZT_OK)
        zt_rpc_fail(t->call, ZT_RPC_UNAVAILABLE, "%s", zt_err_msg(&e));
    else
        zt_rpc_fail(t->call, ZT_RPC_FAILED_PRECONDITION,
                    "attempt %lld of job %lld is not active (%s): nothing to run; stop its workers",
                    (long long)s->id, (long long)a.job_id, zt_attempt_state_name(a.state));
    zt_free(s);
}

static bool attempt_spec_check(const ProtobufCMessage *m, char *why, size_t cap)
{
    const Zt__V1__GetAttemptSpecRequest *q = (const void *)m;
    if (q->attempt_id > 0) return true;
    snprintf(why, cap, "attempt_id %lld is not valid", (long long)q->attempt_id);
    return false;
}

static void attempt_spec_body(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *m)
{
    const Zt__V1__GetAttemptSpecRequest *q = (const void *)m;
    pthread_mutex_lock(&c->mu);
    c_attempt *a = coord_attempt_find(c, q->attempt_id);
    const char *me = coord_rpc_caller(c, call);
    bool mine = !me[0];
    for (int r = 0; a && !mine && r < a->world_size; r++)
        mine = a->ranks[r].agent && strcmp(a->ranks[r].agent->name, me) == 0;
    if (a && !mine) {
        pthread_mutex_unlock(&c->mu);
        zt_rpc_fail(
            call, ZT_RPC_PERMISSION_DENIED,
            "permission denied: attempt %lld has no rank on agent %s; an agent reads only the specs of what it runs",
            (long long)q->attempt_id, me);
        return;
    }
    if (a) {
        Zt__V1__AttemptSpec r = ZT__V1__ATTEMPT_SPEC__INIT;
        r.job_id = a->job->id;
        r.attempt_id = a->id;
        r.job_json = a->job->spec_json;
        r.spec_hash = a->job->spec_hash;
        r.resume_path = a->resume_path;
        r.resume_step = a->resume_step;
        r.world_size = a->world_size;
        r.state = (Zt__V1__AttemptState)a->state;
        zt_rpc_reply(call, &r.base);
        pthread_mutex_unlock(&c->mu);
        return;
    }
    pthread_mutex_unlock(&c->mu);
    spec_task *s = zt_calloc(1, sizeof(*s));
    if (!s) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    s->t.run = spec_read;
    s->t.call = call;
    s->id = q->attempt_id;
    coord_enqueue_read(c, &s->t);
}

/* ---- ReportMetrics ----------------------------------------------------------------------- */

typedef struct metrics_op {
    c_rpc_op r;
    int accepted;
} metrics_op;

static void metrics_run(zt_coord *c, c_op *op)
{
    metrics_op *x = (metrics_op *)op;
    const Zt__V1__ReportMetricsRequest *q = x->r.q;
    /* every step first: one that is not the caller's refuses the whole report */
    for (size_t i = 0; i < q->n_steps; i++) {
        zt_rpc_code code = coord_rpc_placed_on(c, x->r.me, q->steps[i]->attempt_id,
                                               q->steps[i]->rank, x->r.msg, x->r.msg_cap);
        if (code != ZT_RPC_OK && code != ZT_RPC_NOT_FOUND) {
            x->r.code = code;
            return;
        }
    }
    for (size_t i = 0; i < q->n_steps; i++) {
        const Zt__V1__StepMetrics *s = q->steps[i];
        c_attempt *t = coord_attempt_find(c, s->attempt_id);
        if (!t || s->rank != 0)
            continue; /* only rank 0's line is stored; stale attempts are dropped */
        c_job *j = t->job;
        char kv[64 * 96];
        size_t n = 0;
        kv[0] = '\0';
        for (size_t k = 0; k < s->n_values && n < sizeof(kv); k++) {
            n += (size_t)snprintf(kv + n, sizeof(kv) - n, "%s%s=%.9g", k ? " " : "",
                                  s->values[k]->key, s->values[k]->value);
            if (strcmp(s->values[k]->key, "loss") == 0)
                j->loss = s->values[k]->value;
            else if (strcmp(s->values[k]->key, "tok_s") == 0)
                j->tokens_per_s = s->values[k]->value;
        }
        if (s->step >= j->metrics_step) {
            char *copy = zt_strdup(kv);
            if (copy) {
                zt_free(j->metrics_kv);
                j->metrics_kv = copy;
                j->metrics_step = s->step;
                j->metrics_dirty = true;
            }
        }
        if (s->step > j->step) j->step = s->step;
        if (s->step > t->ranks[0].step) t->ranks[0].step = s->step;
        x->accepted++;
        if (s->step % j->metrics_stride != 0) continue; /* downsampled away */
        zt_metric_rec r = {.job_id = j->id,
                           .attempt_id = t->id,
                           .step = s->step,
                           .time_ms = s->time_ms ? s->time_ms : coord_now_ms(),
                           .kv = kv};
        zt_err e = {0};
        bool added = false;
        if (zt_store_metric_add(c->store, &r, &added, &e) != ZT_OK) {
            coord_db_failed(c, &e);
            return;
        }
        /* a replaced step (a resumed attempt reports its steps again) adds no row */
        if (added && ++j->metrics_count > c->cfg.metrics_max_points) {
            j->metrics_stride *= 2;
            if (zt_store_metrics_thin(c->store, j->id, j->metrics_stride, &e) != ZT_OK ||
                zt_store_metrics_count(c->store, j->id, &j->metrics_count, &e) != ZT_OK) {
                coord_db_failed(c, &e);
                return;
            }
        }
        coord_save_job(c, j);
    }
}

static void metrics_reply(zt_coord *c, c_rpc_op *op)
{
    (void)c;
    Zt__V1__ReportMetricsReply r = ZT__V1__REPORT_METRICS_REPLY__INIT;
    r.accepted = ((metrics_op *)op)->accepted;
    zt_rpc_reply(op->op.call, &r.base);
}

/* ---- checkpoint reports ------------------------------------------------------------------ */

/* Whether rank `rank` of attempt `id` may report checkpoint directory dir (state thread): the
 * attempt exists (NOT_FOUND), the rank lies in its world when in_world is asked for
 * (INVALID_ARGUMENT), the rank was placed on the caller and dir lies in the job's
 * checkpoint_dir (PERMISSION_DENIED). false: refused (x's code and msg) or the batch failed. */
static bool ckpt_report_ok(zt_coord *c, c_rpc_op *x, int64_t id, int rank, const char *dir,
                           bool in_world, c_attempt_info *ai)
{
    if (coord_rpc_attempt_info(c, id, ai) != ZT_OK) return false;
    if (!ai->found) {
        x->code = ZT_RPC_NOT_FOUND;
        snprintf(x->msg, x->msg_cap, "attempt %lld not found", (long long)id);
        return false;
    }
    if (in_world && rank >= ai->world_size) {
        x->code = ZT_RPC_INVALID_ARGUMENT;
        snprintf(x->msg, x->msg_cap, "rank %d is outside attempt %lld's world of %d", rank,
                 (long long)id, ai->world_size);
        return false;
    }
    x->code = coord_rpc_placed_on(c, x->me, id, rank, x->msg, x->msg_cap);
    if (x->code != ZT_RPC_OK) return false;
    x->code = coord_rpc_ckpt_dir_of_job(c, ai->job_id, dir, x->msg, x->msg_cap);
    return x->code == ZT_RPC_OK;
}

/* A checkpoint's change of state as an event of its job: through the job when it is live, else
 * straight to the store (a report that comes after the job ended). */
static void ckpt_event(zt_coord *c, int64_t job_id, int64_t attempt_id, int64_t now,
                       const char *from, const char *to, const char *reason)
{
    c_job *j = coord_job_find(c, job_id);
    if (j) {
        coord_job_event(c, j, attempt_id, NULL, "checkpoint", from, to, "%s", reason);
        return;
    }
    zt_event_rec ev = {.time_ms = now,
                       .job_id = job_id,
                       .attempt_id = attempt_id,
                       .kind = "checkpoint",
                       .from_state = from,
                       .to_state = to,
                       .reason = reason};
    zt_err e = {0};
    if (zt_store_event_add(c->store, &ev, NULL, &e) != ZT_OK) coord_db_failed(c, &e);
}

/* ---- ReportCheckpoint -------------------------------------------------------------------- */

typedef struct ckpt_op {
    c_rpc_op r;
    int64_t ckpt_id;
    int shards, world_size;
    bool committed;
} ckpt_op;

static void ckpt_run(zt_coord *c, c_op *op)
{
    ckpt_op *x = (ckpt_op *)op;
    const Zt__V1__ReportCheckpointRequest *q = x->r.q;
    c_attempt_info ai;
    if (!ckpt_report_ok(c, &x->r, q->attempt_id, q->rank, q->dir, true, &ai)) return;
    zt_shard_rec sh = {.rank = q->rank, .file = q->file, .bytes = q->bytes, .crc32c = q->crc32c};
    zt_err e = {0};
    int64_t now = coord_now_ms();
    if (zt_store_ckpt_shard_add(c->store, ai.job_id, q->attempt_id, q->step, q->dir, ai.world_size,
                                &sh, now, &x->ckpt_id, &x->shards, &x->committed, &e) != ZT_OK) {
        coord_db_failed(c, &e);
        return;
    }
    x->world_size = ai.world_size;
    if (!x->committed) return;
    char reason[1200];
    snprintf(reason, sizeof(reason), "step %lld at %s: all %d shards recorded", (long long)q->step,
             q->dir, ai.world_size);
    ckpt_event(c, ai.job_id, q->attempt_id, now, "PARTIAL", "COMMITTED", reason);
}

static void ckpt_reply(zt_coord *c, c_rpc_op *op)
{
    (void)c;
    ckpt_op *x = (ckpt_op *)op;
    Zt__V1__ReportCheckpointReply r = ZT__V1__REPORT_CHECKPOINT_REPLY__INIT;
    r.checkpoint_id = x->ckpt_id;
    r.committed = x->committed;
    r.shards = x->shards;
    r.world_size = x->world_size;
    zt_rpc_reply(op->op.call, &r.base);
}

/* ---- ReportCheckpointRemoved ------------------------------------------------------------- */

typedef struct ckpt_rm_op {
    c_rpc_op r;
    int64_t ckpt_id;
    bool changed;
} ckpt_rm_op;

static void ckpt_rm_run(zt_coord *c, c_op *op)
{
    ckpt_rm_op *x = (ckpt_rm_op *)op;
    const Zt__V1__ReportCheckpointRemovedRequest *q = x->r.q;
    c_attempt_info ai;
    if (!ckpt_report_ok(c, &x->r, q->attempt_id, q->rank, q->dir, false, &ai)) return;
    zt_ckpt_state before;
    zt_err e = {0};
    int64_t now = coord_now_ms();
    if (zt_store_ckpt_remove(c->store, ai.job_id, q->attempt_id, q->step, q->dir, ai.world_size,
                             now, &x->ckpt_id, &before, &e) != ZT_OK) {
        coord_db_failed(c, &e);
        return;
    }
    x->changed = before != ZT_CKPT_DELETED;
    if (!x->changed) return;
    const char *from = before ? zt_ckpt_state_name(before) : "";
    char reason[1200];
    snprintf(
        reason, sizeof(reason),
        "step %lld at %s: removed by rank %d of attempt %lld (keep_checkpoints); not used for restarts",
        (long long)q->step, q->dir, q->rank, (long long)q->attempt_id);
    ckpt_event(c, ai.job_id, q->attempt_id, now, from, "DELETED", reason);
}

static void ckpt_rm_reply(zt_coord *c, c_rpc_op *op)
{
    (void)c;
    ckpt_rm_op *x = (ckpt_rm_op *)op;
    Zt__V1__ReportCheckpointRemovedReply r = ZT__V1__REPORT_CHECKPOINT_REMOVED_REPLY__INIT;
    r.checkpoint_id = x->ckpt_id;
    r.changed = x->changed;
    zt_rpc_reply(op->op.call, &r.base);
}

/* ---- ReportLogs -------------------------------------------------------------------------- */

typedef struct logs_op {
    c_rpc_op r;
    int accepted;
} logs_op;

static void logs_run(zt_coord *c, c_op *op)
{
    logs_op *x = (logs_op *)op;
    const Zt__V1__ReportLogsRequest *q = x->r.q;
    /* every entry first: one that is not the caller's refuses the whole report */
    for (size_t i = 0; i < q->n_entries; i++) {
        if (i > 0 && q->entries[i]->attempt_id == q->entries[i - 1]->attempt_id &&
            q->entries[i]->rank == q->entries[i - 1]->rank)
            continue;
        zt_rpc_code code = coord_rpc_placed_on(c, x->r.me, q->entries[i]->attempt_id,
                                               q->entries[i]->rank, x->r.msg, x->r.msg_cap);
        if (code != ZT_RPC_OK && code != ZT_RPC_NOT_FOUND) {
            x->r.code = code;
            return;
        }
    }
    int64_t last_attempt = 0, ended_job = 0, ended_count = 0;
    c_attempt_info ai = {0};
    for (size_t i = 0; i < q->n_entries; i++) {
        const Zt__V1__LogEntry *le = q->entries[i];
        if (le->attempt_id != last_attempt) {
            if (coord_rpc_attempt_info(c, le->attempt_id, &ai) != ZT_OK) return;
            last_attempt = le->attempt_id;
        }
        if (!ai.found || le->rank >= ai.world_size) continue;
        /* stored and served as a protobuf string: cut long lines on a character boundary
         * and replace what is not UTF-8 (the agent cleans already; other clients may not) */
        char line[ZT_MAX_LOG_LINE + 1];
        size_t n = zt_utf8_cut(le->text, strlen(le->text), ZT_MAX_LOG_LINE);
        memcpy(line, le->text, n);
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        line[n] = '\0';
        zt_utf8_clean(line, n);
        zt_log_rec r = {.time_ms = le->time_ms ? le->time_ms : coord_now_ms(),
                        .job_id = ai.job_id,
                        .attempt_id = le->attempt_id,
                        .rank = le->rank,
                        .source = le->source,
                        .text = line};
        zt_err e = {0};
        if (zt_store_log_add(c->store, &r, &r.id, &e) != ZT_OK) {
            coord_db_failed(c, &e);
            return;
        }
        coord_api_log(c, &r);
        x->accepted++;
        /* at most logs_max_lines per job (pruned in steps of a tenth): live jobs keep their
         * count in memory; lines that come after a job ended (an agent flushing) are counted
         * in the store, once per job and report */
        c_job *j = coord_job_find(c, ai.job_id);
        int64_t *count = j ? &j->log_count : &ended_count;
        if (!j && ended_job != ai.job_id) {
            if (zt_store_logs_count(c->store, ai.job_id, &ended_count, &e) != ZT_OK) {
                coord_db_failed(c, &e);
                return;
            }
            ended_job = ai.job_id;
        } else {
            ++*count;
        }
        if (*count > c->cfg.logs_max_lines + c->cfg.logs_max_lines / 10) {
            if (zt_store_logs_prune(c->store, ai.job_id, c->cfg.logs_max_lines, &e) != ZT_OK) {
                coord_db_failed(c, &e);
                return;
            }
            *count = c->cfg.logs_max_lines;
        }
    }
}

static void logs_reply(zt_coord *c, c_rpc_op *op)
{
    (void)c;
    Zt__V1__ReportLogsReply r = ZT__V1__REPORT_LOGS_REPLY__INIT;
    r.accepted = ((logs_op *)op)->accepted;
    zt_rpc_reply(op->op.call, &r.base);
}

/* ---- Rendezvous -------------------------------------------------------------------------- */

typedef struct rdzv_op {
    c_rpc_op r;
    uint8_t *reply;
    size_t reply_len;
} rdzv_op;

static void rdzv_run(zt_coord *c, c_op *op)
{
    rdzv_op *x = (rdzv_op *)op;
    const Zt__V1__RendezvousRequest *q = x->r.q;
    c_attempt *a = coord_attempt_find(c, q->attempt_id);
    if (!a) {
        c_attempt_info ai;
        if (coord_rpc_attempt_info(c, q->attempt_id, &ai) != ZT_OK) return;
        if (!ai.found) {
            x->r.code = ZT_RPC_NOT_FOUND;
            snprintf(x->r.msg, x->r.msg_cap, "attempt %lld not found", (long long)q->attempt_id);
        } else {
            x->r.code = ZT_RPC_FAILED_PRECONDITION;
            snprintf(
                x->r.msg, x->r.msg_cap,
                "attempt %lld of job %lld is stale: it is %s; stop this worker, the next heartbeat says what to run",
                (long long)q->attempt_id, (long long)ai.job_id, zt_attempt_state_name(ai.state));
        }
        return;
    }
    if (q->rank >= a->world_size) {
        x->r.code = ZT_RPC_INVALID_ARGUMENT;
        snprintf(x->r.msg, x->r.msg_cap, "rank %d is outside attempt %lld's world of %d", q->rank,
                 (long long)a->id, a->world_size);
        return;
    }
    x->r.code = coord_rpc_placed_on(c, x->r.me, q->attempt_id, q->rank, x->r.msg, x->r.msg_cap);
    if (x->r.code != ZT_RPC_OK) return;
    if (q->value.len) {
        bool same = a->rdzv[q->rank] && a->rdzv_len[q->rank] == q->value.len &&
                    memcmp(a->rdzv[q->rank], q->value.data, q->value.len) == 0;
        if (!same) {
            uint8_t *v = zt_malloc(q->value.len);
            if (!v) {
                x->r.code = ZT_RPC_RESOURCE_EXHAUSTED;
                snprintf(x->r.msg, x->r.msg_cap, "out of memory");
                return;
            }
            zt_err e = {0};
            if (zt_store_rdzv_put(c->store, a->id, q->rank, q->value.data, q->value.len, &e) !=
                ZT_OK) {
                zt_free(v);
                coord_db_failed(c, &e);
                return;
            }
            memcpy(v, q->value.data, q->value.len);
            zt_free(a->rdzv[q->rank]);
            a->rdzv[q->rank] = v;
            a->rdzv_len[q->rank] = q->value.len;
            a->rdzv_changed = true;
        }
    }
    bool complete = coord_rdzv_complete(a, q->wait);
    int64_t left = zt_rpc_call_deadline_left_ms(op->call);
    int64_t wait_ms = q->wait_ms;
    if (left != INT64_MAX && wait_ms > left - 50) wait_ms = left - 50;
    if (complete || q->wait == ZT__V1__RENDEZVOUS_REQUEST__WAIT__WAIT_NONE || wait_ms <= 0) {
        x->reply = coord_rdzv_pack(a, complete, &x->reply_len);
        if (!x->reply) {
            x->r.code = ZT_RPC_RESOURCE_EXHAUSTED;
            snprintf(x->r.msg, x->r.msg_cap, "out of memory");
        }
        return;
    }
    /* each waiting call holds memory and an open gRPC call: bounded per attempt (agents
     * retry RESOURCE_EXHAUSTED) and in total */
    int64_t per_job = (int64_t)c->cfg.max_rdzv_waiters_per_rank * a->world_size;
    if (c->n_waiters >= c->cfg.max_rdzv_waiters || a->n_waiters >= per_job) {
        x->r.code = ZT_RPC_RESOURCE_EXHAUSTED;
        if (c->n_waiters >= c->cfg.max_rdzv_waiters)
            snprintf(
                x->r.msg, x->r.msg_cap,
                "too many rendezvous calls waiting on this coordinator (%d, its --max-rdzv-waiters); retry shortly",
                c->cfg.max_rdzv_waiters);
        else
            snprintf(
                x->r.msg, x->r.msg_cap,
                "attempt %lld has %d rendezvous calls waiting already (%d per rank, the coordinator's --max-rdzv-waiters-per-rank): a rank is calling again before its earlier call ended; retry shortly",
                (long long)a->id, a->n_waiters, c->cfg.max_rdzv_waiters_per_rank);
        return;
    }
    c_waiter *w = zt_calloc(1, sizeof(*w));
    if (!w) {
        x->r.code = ZT_RPC_RESOURCE_EXHAUSTED;
        snprintf(x->r.msg, x->r.msg_cap, "out of memory");
        return;
    }
    w->call = op->call;
    w->wait = q->wait;
    w->until_ns = zt_now_ns() + (uint64_t)wait_ms * 1000000ull;
    w->next = a->waiters;
    a->waiters = w;
    a->n_waiters++;
    c->n_waiters++;
    x->r.handed_on = true;
}

static void rdzv_reply(zt_coord *c, c_rpc_op *op)
{
    (void)c;
    rdzv_op *x = (rdzv_op *)op;
    zt_rpc_reply_bytes(op->op.call, x->reply, x->reply_len);
}

static void rdzv_release(c_rpc_op *op)
{
    zt_free(((rdzv_op *)op)->reply);
}

/* ---- the service ---------------------------------------------------------------------------- */

static bool check_register(const ProtobufCMessage *m, char *why, size_t cap)
{
    return zt_check_register((const void *)m, why, cap);
}

static bool check_heartbeat(const ProtobufCMessage *m, char *why, size_t cap)
{
    return zt_check_heartbeat((const void *)m, why, cap);
}

static bool check_metrics(const ProtobufCMessage *m, char *why, size_t cap)
{
    return zt_check_report_metrics((const void *)m, why, cap);
}

static bool check_ckpt(const ProtobufCMessage *m, char *why, size_t cap)
{
    return zt_check_report_checkpoint((const void *)m, why, cap);
}

static bool check_ckpt_rm(const ProtobufCMessage *m, char *why, size_t cap)
{
    return zt_check_report_checkpoint_removed((const void *)m, why, cap);
}

static bool check_logs(const ProtobufCMessage *m, char *why, size_t cap)
{
    return zt_check_report_logs((const void *)m, why, cap);
}

static bool check_rdzv(const ProtobufCMessage *m, char *why, size_t cap)
{
    return zt_check_rendezvous((const void *)m, why, cap);
}

/* An agent's report: refused while shutting down, checked, from its own key only, stored by
 * the state thread. */
#define AGENT_REPORT(method, req, chk, op, desc, run_fn, reply_fn)                                 \
    {                                                                                              \
        .path = "/zt.v1.AgentControl/" method, .request = &req, .access = ZT_RPC_ACCESS_AGENT,     \
        .checks = RPC_SERVING | RPC_STRINGS, .check = chk, .permit = coord_rpc_permit_agent_field, \
        .op_size = sizeof(op), .msg_cap = 300, .what = desc, .run = run_fn, .reply = reply_fn      \
    }

const c_rpc_desc coord_rpc_agent[] = {
    {.path = "/zt.v1.AgentControl/RegisterAgent",
     .request = &zt__v1__register_agent_request__descriptor,
     .access = ZT_RPC_ACCESS_AGENT_JOIN,
     .preposted = 64,
     .checks = RPC_SERVING | RPC_STRINGS,
     .check = check_register,
     .permit = register_permit,
     .op_size = sizeof(register_op),
     .msg_cap = 400,
     .what = "the registration",
     .prepare = register_prepare,
     .run = register_run,
     .reply = register_reply},
    {.path = "/zt.v1.AgentControl/Heartbeat",
     .request = &zt__v1__heartbeat_request__descriptor,
     .access = ZT_RPC_ACCESS_AGENT,
     .preposted = 256,
     .checks = RPC_STRINGS,
     .check = check_heartbeat,
     .permit = heartbeat_permit,
     .body = heartbeat_body},
    {.path = "/zt.v1.AgentControl/GetAttemptSpec",
     .request = &zt__v1__get_attempt_spec_request__descriptor,
     .access = ZT_RPC_ACCESS_AGENT,
     .check = attempt_spec_check,
     .body = attempt_spec_body},
    AGENT_REPORT("ReportMetrics", zt__v1__report_metrics_request__descriptor, check_metrics,
                 metrics_op, "the metrics", metrics_run, metrics_reply),
    AGENT_REPORT("ReportCheckpoint", zt__v1__report_checkpoint_request__descriptor, check_ckpt,
                 ckpt_op, "the checkpoint shard", ckpt_run, ckpt_reply),
    AGENT_REPORT("ReportCheckpointRemoved", zt__v1__report_checkpoint_removed_request__descriptor,
                 check_ckpt_rm, ckpt_rm_op, "the checkpoint removal", ckpt_rm_run, ckpt_rm_reply),
    AGENT_REPORT("ReportLogs", zt__v1__report_logs_request__descriptor, check_logs, logs_op,
                 "the log lines", logs_run, logs_reply),
    {.path = "/zt.v1.AgentControl/Rendezvous",
     .request = &zt__v1__rendezvous_request__descriptor,
     .access = ZT_RPC_ACCESS_AGENT,
     .checks = RPC_SERVING,
     .check = check_rdzv,
     .op_size = sizeof(rdzv_op),
     .msg_cap = 400,
     .what = "the rendezvous entry",
     .run = rdzv_run,
     .reply = rdzv_reply,
     .release = rdzv_release},
};
const size_t coord_rpc_n_agent = sizeof(coord_rpc_agent) / sizeof(coord_rpc_agent[0]);
