/* zerotrain: zcoord's zt.v1.Coordinator service (what zctl and the clients call: submit,
 * cancel, watch and read jobs, list agents) and grpc.health.v1.Health. Each method is a
 * descriptor run by rpc.c's skeleton; reads of the store go to the reader thread. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/rpc_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/jobfile.h"
#include "common/utf8.h"
#include "coordinator/validate.h"

/* ---- SubmitJob --------------------------------------------------------------------------- */

typedef struct submit_op {
    c_rpc_op r;
    char *name, *spec_text, *spec_dir, *spec_json, *user, *submit_key;
    char *ckpt_dir, *resume_from; /* train.checkpoint_dir (no trailing '/'), train.resume_from */
    char hash[17];
    int priority, ranks, ranks_per_node, device, max_restarts;
    int64_t total_steps, id;
    bool existed;
} submit_op;

/* The job a checkpoint directory belongs to, as the store has it. */
typedef struct ckpt_owner {
    int64_t id;
    char name[256], user[256];
    zt_job_state state;
} ckpt_owner;

static void on_ckpt_owner(void *arg, const zt_job_rec *r)
{
    ckpt_owner *o = arg;
    o->id = r->id;
    o->state = r->state;
    snprintf(o->name, sizeof(o->name), "%s", r->name);
    snprintf(o->user, sizeof(o->user), "%s", r->user[0] ? r->user : "an unknown user");
    zt_utf8_trim_partial(o->name);
    zt_utf8_trim_partial(o->user);
}

/* Whether path is dir or lies inside it (both absolute and lexically clean, as the job parser
 * leaves them: the coordinator opens no path a job names). */
static bool path_within(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    if (!path[0] || !n) return false;
    if (strcmp(dir, "/") == 0) return path[0] == '/';
    return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* A checkpoint directory belongs to one job (docs/formats.md "owner.json"): a job whose
 * train.checkpoint_dir is that of any other job in the database, whatever its state (a
 * finished job's checkpoints are still there), is refused, unless its train.resume_from lies
 * in that directory: then it takes the directory over, with an event saying so. A resubmit
 * with a known submit_key returns its job first, unchecked (the directory is its own). */
static void submit_run(zt_coord *c, c_op *op)
{
    submit_op *s = (submit_op *)op;
    zt_err e = {0};
    if (zt_store_job_find_key(c->store, s->submit_key, &s->id, &e) != ZT_OK) {
        coord_db_failed(c, &e);
        return;
    }
    if (s->id) {
        s->existed = true;
        return;
    }
    ckpt_owner owner = {0};
    zt_status st = zt_store_job_by_ckpt_dir(c->store, s->ckpt_dir, on_ckpt_owner, &owner, &e);
    if (st != ZT_OK && st != ZT_ERR_NOT_FOUND) {
        coord_db_failed(c, &e);
        return;
    }
    if (owner.id && !path_within(s->resume_from, s->ckpt_dir)) {
        s->r.code = ZT_RPC_FAILED_PRECONDITION;
        snprintf(
            s->r.msg, s->r.msg_cap,
            "train.checkpoint_dir %s belongs to job %lld '%s' (%s, submitted by %s); give this job its own checkpoint_dir, or set train.resume_from to start from that job's checkpoints",
            s->ckpt_dir, (long long)owner.id, owner.name, zt_job_state_name(owner.state),
            owner.user);
        zt_utf8_trim_partial(s->r.msg);
        return;
    }
    zt_job_rec r = {.submit_key = s->submit_key,
                    .name = s->name,
                    .state = ZT_JOB_QUEUED,
                    .reason = "submitted",
                    .priority = s->priority,
                    .ranks = s->ranks,
                    .ranks_per_node = s->ranks_per_node,
                    .device = s->device,
                    .max_restarts = s->max_restarts,
                    .total_steps = s->total_steps,
                    .spec_text = s->spec_text,
                    .spec_dir = s->spec_dir,
                    .spec_json = s->spec_json,
                    .spec_hash = s->hash,
                    .user = s->user,
                    .submitted_ms = coord_now_ms(),
                    .metrics_stride = 1,
                    .checkpoint_dir = s->ckpt_dir};
    if (zt_store_job_insert(c->store, &r, &s->id, &s->existed, &e) != ZT_OK) {
        coord_db_failed(c, &e);
        return;
    }
    if (s->existed) return;
    r.id = s->id;
    c_job *j = coord_job_from_rec(&r);
    if (!j) {
        zt_err m;
        zt_err_set(&m, ZT_ERR_NOMEM, "out of memory tracking a new job");
        coord_db_failed(c, &m);
        return;
    }
    coord_job_add(c, j);
    coord_job_event(c, j, 0, NULL, "job", "", "QUEUED",
                    "submitted by %s: %d %s rank(s), %lld steps",
                    s->user[0] ? s->user : "(unknown user)", s->ranks,
                    zt_device_name((zt_device)s->device), (long long)s->total_steps);
    if (owner.id)
        coord_job_event(
            c, j, 0, NULL, "job", "QUEUED", "QUEUED",
            "took over job %lld '%s' (%s)'s checkpoint_dir %s: train.resume_from %s lies in it",
            (long long)owner.id, owner.name, zt_job_state_name(owner.state), s->ckpt_dir,
            s->resume_from);
    c->sched_dirty = true;
}

static void submit_reply(zt_coord *c, c_rpc_op *op)
{
    (void)c;
    submit_op *s = (submit_op *)op;
    Zt__V1__SubmitJobReply r = ZT__V1__SUBMIT_JOB_REPLY__INIT;
    r.job_id = s->id;
    r.name = s->name;
    r.existed = s->existed;
    zt_rpc_reply(op->op.call, &r.base);
}

static void submit_release(c_rpc_op *op)
{
    submit_op *s = (submit_op *)op;
    zt_free(s->name);
    zt_free(s->spec_text);
    zt_free(s->spec_dir);
    zt_free(s->spec_json);
    zt_free(s->user);
    zt_free(s->submit_key);
    zt_free(s->ckpt_dir);
    zt_free(s->resume_from);
}

/* The job file parsed and resolved; who submitted it. */
static bool submit_prepare(zt_coord *c, zt_rpc_call *call, c_rpc_op *op)
{
    (void)c;
    submit_op *s = (submit_op *)op;
    const Zt__V1__SubmitJobRequest *q = op->q;
    zt_job *job = zt_calloc(1, sizeof(*job));
    if (!job) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return false;
    }
    const char *origin = q->job_path && q->job_path[0] ? q->job_path : "job";
    const char *dir = q->job_dir && q->job_dir[0] ? q->job_dir : "/";
    zt_err err = {0};
    if (zt_job_parse_inline(job, q->job_text, origin, dir, &err) != ZT_OK) {
        zt_rpc_fail(call, ZT_RPC_INVALID_ARGUMENT, "%s", zt_err_msg(&err));
        zt_free(job);
        return false;
    }
    s->spec_json = zt_job_to_json(job);
    s->name = zt_strdup(job->name[0] ? job->name : "job");
    s->spec_text = zt_strdup(q->job_text);
    s->spec_dir = zt_strdup(dir);
    /* who submitted: the user credential's name; without tokens, what the client says */
    const char *who = zt_rpc_call_identity(call);
    if (strncmp(who, "user:", 5) == 0)
        s->user = zt_strdup(who + 5);
    else
        s->user = zt_strdup(q->user && q->user[0] ? q->user : "local");
    s->submit_key = zt_strdup(q->submit_key ? q->submit_key : "");
    s->priority = q->priority;
    s->ranks = job->resources.ranks > 0 ? job->resources.ranks : 1;
    s->ranks_per_node =
        job->resources.ranks_per_node > 0 ? job->resources.ranks_per_node : s->ranks;
    s->device = (int)job->resources.device;
    s->max_restarts = job->max_restarts;
    s->total_steps = job->train.steps;
    s->ckpt_dir = zt_strdup(job->train.checkpoint_dir);
    s->resume_from = zt_strdup(job->train.resume_from);
    if (s->ckpt_dir) { /* the parser leaves no trailing '/' but the root's; make sure */
        size_t n = strlen(s->ckpt_dir);
        while (n > 1 && s->ckpt_dir[n - 1] == '/')
            s->ckpt_dir[--n] = '\0';
    }
    zt_free(job);
    if (!s->name || !s->spec_text || !s->spec_dir || !s->spec_json || !s->user || !s->submit_key ||
        !s->ckpt_dir || !s->resume_from) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return false;
    }
    zt_hash_hex(s->spec_json, strlen(s->spec_json), s->hash);
    return true;
}

/* ---- CancelJob --------------------------------------------------------------------------- */

typedef struct cancel_op {
    c_rpc_op r;
    int64_t id;
    char *why;
    uint8_t *reply;
    size_t reply_len;
} cancel_op;

typedef struct state_peek {
    zt_job_state state;
    char reason[256];
} state_peek;

static void on_peek_job(void *arg, const zt_job_rec *r)
{
    state_peek *p = arg;
    p->state = r->state;
    snprintf(p->reason, sizeof(p->reason), "%s", r->reason);
}

zt_rpc_code coord_job_cancel(zt_coord *c, int64_t id, const char *why, char *msg, size_t cap)
{
    c_job *j = coord_job_find(c, id);
    if (!j || j->done) {
        state_peek p = {0};
        zt_err e = {0};
        zt_status st = zt_store_job_get(c->store, id, on_peek_job, &p, &e);
        if (st == ZT_ERR_NOT_FOUND) {
            snprintf(msg, cap, "job %lld not found; 'zctl jobs' lists the jobs", (long long)id);
            return ZT_RPC_NOT_FOUND;
        }
        if (st != ZT_OK) {
            coord_db_failed(c, &e);
            return ZT_RPC_OK;
        }
        snprintf(msg, cap, "job %lld has already ended: %s (%s)", (long long)id,
                 zt_job_state_name(j ? j->state : p.state), j ? j->reason : p.reason);
        return ZT_RPC_FAILED_PRECONDITION;
    }
    char reason[600];
    snprintf(reason, sizeof(reason), "canceled%s%s", why[0] ? ": " : " by the user", why);
    if (j->att) coord_attempt_end(c, j->att, ZT_ATTEMPT_CANCELED, false, reason);
    coord_job_set_state(c, j, ZT_JOB_CANCELED, "%s", reason);
    return ZT_RPC_OK;
}

static void cancel_run(zt_coord *c, c_op *op)
{
    cancel_op *x = (cancel_op *)op;
    x->r.code = coord_job_cancel(c, x->id, x->why, x->r.msg, x->r.msg_cap);
    c_job *j = coord_job_find(c, x->id);
    if (x->r.code != ZT_RPC_OK || c->batch_failed || !j) return;
    Zt__V1__Job jb;
    coord_job_to_pb(j, &jb);
    Zt__V1__CancelJobReply r = ZT__V1__CANCEL_JOB_REPLY__INIT;
    r.job = &jb;
    x->reply = zt_pb_pack(&r.base, &x->reply_len);
}

static void cancel_reply(zt_coord *c, c_rpc_op *op)
{
    (void)c;
    cancel_op *x = (cancel_op *)op;
    if (!x->reply)
        zt_rpc_fail(op->op.call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
    else
        zt_rpc_reply_bytes(op->op.call, x->reply, x->reply_len);
}

static void cancel_release(c_rpc_op *op)
{
    cancel_op *x = (cancel_op *)op;
    zt_free(x->reply);
    zt_free(x->why);
}

/* The reason as stored: the user's words, and who canceled when users have credentials. */
static bool cancel_prepare(zt_coord *c, zt_rpc_call *call, c_rpc_op *op)
{
    (void)c;
    cancel_op *x = (cancel_op *)op;
    const Zt__V1__CancelJobRequest *q = op->q;
    const char *why = q->reason ? q->reason : "";
    const char *who = zt_rpc_call_identity(call);
    char by[512];
    if (strncmp(who, "user:", 5) == 0) {
        snprintf(by, sizeof(by), "%s%s(by %s)", why, why[0] ? " " : "", who + 5);
        why = by;
    }
    if (!(x->why = zt_strndup(why, zt_utf8_cut(why, strlen(why), 400)))) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return false;
    }
    x->id = q->job_id;
    return true;
}

/* ---- WatchJob ---------------------------------------------------------------------------- */

static bool remove_watcher(c_watcher **list, zt_rpc_call *call)
{
    for (c_watcher **pp = list; *pp; pp = &(*pp)->next) {
        if ((*pp)->call == call) {
            c_watcher *w = *pp;
            *pp = w->next;
            zt_free(w);
            return true;
        }
    }
    return false;
}

static void on_watch_cancel(zt_rpc_call *call, void *arg)
{
    zt_coord *c = arg;
    bool found = false;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n_jobs && !found; i++)
        if ((found = remove_watcher(&c->jobs[i]->watchers, call))) c->jobs[i]->n_watchers--;
    if (!found) found = remove_watcher(&c->health_watchers, call);
    if (found) c->n_watchers--;
    pthread_mutex_unlock(&c->mu);
    if (found) {
        zt_rpc_stream_finish(call, ZT_RPC_CANCELLED, "watcher gone");
        zt_rpc_call_unref(call);
    }
}

/* Whether one more watch stream (of job j, NULL for Health.Watch) fits the limits (mu held);
 * when not, the call is answered RESOURCE_EXHAUSTED. */
static bool watcher_fits(zt_coord *c, const c_job *j, zt_rpc_call *call)
{
    if (c->n_watchers >= c->cfg.max_watchers) {
        zt_rpc_fail(
            call, ZT_RPC_RESOURCE_EXHAUSTED,
            "too many watch streams open on this coordinator (%d, its --max-watchers): close some (zctl submit --follow, zctl wait, health watchers) and retry",
            c->cfg.max_watchers);
        return false;
    }
    if (j && j->n_watchers >= c->cfg.max_watchers_per_job) {
        zt_rpc_fail(
            call, ZT_RPC_RESOURCE_EXHAUSTED,
            "job %lld has %d watch streams open already (the coordinator's --max-watchers-per-job): close some and retry",
            (long long)j->id, j->n_watchers);
        return false;
    }
    return true;
}

/* Registers call on a list of watchers (mu held); the list holds a reference. */
static bool watcher_add(zt_coord *c, c_watcher **list, zt_rpc_call *call)
{
    c_watcher *w = zt_calloc(1, sizeof(*w));
    if (!w) return false;
    w->call = zt_rpc_call_ref(call);
    w->next = *list;
    *list = w;
    c->n_watchers++;
    return true;
}

/* Makes the cancel callback of a call just registered as a watcher remove it again. mu
 * must be free (the callback takes it, and runs at once when the client has gone already).
 * The caller's reference (taken under mu) keeps the call alive meanwhile: once mu was
 * released, a commit may have ended the stream and dropped the list's reference. */
static void watcher_arm(zt_coord *c, zt_rpc_call *call)
{
    zt_rpc_call_on_cancel(call, on_watch_cancel, c);
    zt_rpc_call_unref(call);
}

typedef enum { ATTACH_NOT_LIVE, ATTACH_DONE } attach_result;

/* Attaches call to live job id: sends the snapshot of the last published state, and the
 * commits that follow send the changes until the job ends (final). A job that ended in the
 * batch being committed (done, its end not yet published) is live too: its watchers get the
 * final update right after the commit, while a read of the store could still miss the end.
 * ATTACH_DONE: the call is attached or answered (limits, shutting down, out of memory). */
static attach_result watch_attach(zt_coord *c, zt_rpc_call *call, int64_t id)
{
    pthread_mutex_lock(&c->mu);
    c_job *j = coord_job_find(c, id);
    if (!j || !j->pub_state || zt_job_state_terminal(j->pub_state)) {
        pthread_mutex_unlock(&c->mu);
        return ATTACH_NOT_LIVE;
    }
    if (!atomic_load(&c->serving)) { /* stop_serving has ended the watchers, or is waiting */
        pthread_mutex_unlock(&c->mu);
        zt_rpc_fail(call, ZT_RPC_UNAVAILABLE, "the coordinator is shutting down; retry shortly");
        return ATTACH_DONE;
    }
    if (!watcher_fits(c, j, call)) {
        pthread_mutex_unlock(&c->mu);
        return ATTACH_DONE;
    }
    Zt__V1__Job jb;
    coord_job_to_pb(j, &jb);
    jb.state = (Zt__V1__JobState)j->pub_state;
    Zt__V1__JobUpdate u = ZT__V1__JOB_UPDATE__INIT;
    u.job = &jb;
    zt_rpc_stream_send(call, &u.base);
    if (!watcher_add(c, &j->watchers, call)) {
        pthread_mutex_unlock(&c->mu);
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return ATTACH_DONE;
    }
    j->n_watchers++;
    zt_rpc_call_ref(call); /* ours, until the cancel callback is set */
    pthread_mutex_unlock(&c->mu);
    watcher_arm(c, call);
    return ATTACH_DONE;
}

typedef struct watch_task {
    c_task t;
    int64_t id;
    zt_job_state state; /* as read from the store */
} watch_task;

/* A copy of a stored string, with bytes that are not UTF-8 replaced (a database written by
 * an older zcoord may hold them); NULL on allocation failure. */
static char *clean_dup(const char *s)
{
    char *d = zt_strdup(s ? s : "");
    if (d) zt_utf8_clean(d, strlen(d));
    return d;
}

/* An ended job: its one, final update. */
static void on_watch_rec(void *arg, const zt_job_rec *r)
{
    watch_task *w = arg;
    w->state = r->state;
    if (!zt_job_state_terminal(r->state)) return;
    Zt__V1__Job jb;
    coord_rec_to_pb(r, &jb);
    char *name = clean_dup(r->name), *reason = clean_dup(r->reason), *user = clean_dup(r->user);
    if (name && reason && user) {
        jb.name = name;
        jb.reason = reason;
        jb.user = user;
        Zt__V1__JobUpdate u = ZT__V1__JOB_UPDATE__INIT;
        u.job = &jb;
        u.final = true;
        zt_rpc_stream_send(w->t.call, &u.base);
    }
    zt_free(name);
    zt_free(reason);
    zt_free(user);
}

/* A job that was not live when the watch came: answered from the store. A committed job
 * leaves memory only after its end is committed, so the store shows it ended — or the job
 * was being submitted and is live now. */
static void watch_read(zt_coord *c, c_task *t, zt_store *rs)
{
    watch_task *w = (watch_task *)t;
    zt_err e = {0};
    zt_status st = zt_store_job_get(rs, w->id, on_watch_rec, w, &e);
    if (st != ZT_OK)
        zt_rpc_fail(t->call, zt_rpc_code_from_status(st), "%s", zt_err_msg(&e));
    else if (zt_job_state_terminal(w->state))
        zt_rpc_stream_finish(t->call, ZT_RPC_OK, NULL);
    else if (watch_attach(c, t->call, w->id) == ATTACH_NOT_LIVE)
        zt_rpc_fail(t->call, ZT_RPC_UNAVAILABLE,
                    "job %lld changed while it was being read; watch it again", (long long)w->id);
    zt_free(w);
}

static void watch_body(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *m)
{
    const Zt__V1__WatchJobRequest *q = (const void *)m;
    if (watch_attach(c, call, q->job_id) == ATTACH_DONE) return;
    watch_task *w = zt_calloc(1, sizeof(*w));
    if (!w) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    w->t.run = watch_read;
    w->t.call = call;
    w->id = q->job_id;
    coord_enqueue_read(c, &w->t);
}

/* ---- ListAgents, Ping, Health ------------------------------------------------------------ */

static void report_to_pb(const c_report *r, Zt__V1__WorkerStatus *o)
{
    zt__v1__worker_status__init(o);
    o->job_id = r->job_id;
    o->attempt_id = r->attempt_id;
    o->rank = r->rank;
    o->pid = r->pid;
    o->phase = (Zt__V1__WorkerPhase)r->phase;
    o->step = r->step;
    o->collective_seq = r->collective_seq;
    o->memory_bytes = r->memory_bytes;
    o->peak_memory_bytes = r->peak_memory_bytes;
    o->tokens_per_s = r->tokens_per_s;
    o->loss = r->loss;
    o->exit_code = r->exit_code;
    o->exit_signal = r->exit_signal;
    o->device_index = r->device_index;
    o->started_ms = r->started_ms;
}

static void list_agents_body(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *m)
{
    (void)m;
    pthread_mutex_lock(&c->mu);
    size_t n = c->n_agents, nw = 0, ng = 0;
    for (size_t i = 0; i < n; i++) {
        nw += (size_t)c->agents[i]->n_reports;
        ng += (size_t)c->agents[i]->n_gpus;
    }
    Zt__V1__Agent *ag = zt_calloc(n ? n : 1, sizeof(*ag));
    Zt__V1__Agent **agp = zt_calloc(n ? n : 1, sizeof(*agp));
    Zt__V1__WorkerStatus *ws = zt_calloc(nw ? nw : 1, sizeof(*ws));
    Zt__V1__WorkerStatus **wsp = zt_calloc(nw ? nw : 1, sizeof(*wsp));
    Zt__V1__Gpu *gp = zt_calloc(ng ? ng : 1, sizeof(*gp));
    Zt__V1__Gpu **gpp = zt_calloc(ng ? ng : 1, sizeof(*gpp));
    if (!ag || !agp || !ws || !wsp || !gp || !gpp) {
        pthread_mutex_unlock(&c->mu);
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory listing agents");
        goto cleanup;
    }
    size_t kw = 0, kg = 0;
    for (size_t i = 0; i < n; i++) {
        c_agent *a = c->agents[i];
        Zt__V1__Agent *o = &ag[i];
        zt__v1__agent__init(o);
        o->name = a->name;
        o->hostname = a->hostname;
        o->address = a->address;
        o->state = (Zt__V1__AgentState)(a->revived ? ZT_AGENT_ALIVE : a->state);
        o->device = (Zt__V1__Device)a->device;
        o->slots = a->slots;
        o->free_slots = coord_agent_free_slots(c, a);
        o->last_heartbeat_ms = a->last_seen_ms;
        o->registered_ms = a->registered_ms;
        o->incarnation = a->incarnation;
        o->version = a->version;
        o->workers = &wsp[kw];
        for (int k = 0; k < a->n_reports; k++, kw++) {
            report_to_pb(&a->reports[k], &ws[kw]);
            wsp[kw] = &ws[kw];
        }
        o->n_workers = (size_t)a->n_reports;
        o->gpus = &gpp[kg];
        for (int k = 0; k < a->n_gpus; k++, kg++) {
            zt__v1__gpu__init(&gp[kg]);
            gp[kg].index = a->gpus[k].index;
            gp[kg].name = a->gpus[k].name;
            gp[kg].memory_total = a->gpus[k].memory_total;
            gp[kg].memory_free = a->gpus[k].memory_free;
            gpp[kg] = &gp[kg];
        }
        o->n_gpus = (size_t)a->n_gpus;
        agp[i] = o;
    }
    Zt__V1__ListAgentsReply r = ZT__V1__LIST_AGENTS_REPLY__INIT;
    r.n_agents = n;
    r.agents = agp;
    zt_rpc_reply(call, &r.base);
    pthread_mutex_unlock(&c->mu);
cleanup:
    zt_free(ag);
    zt_free(agp);
    zt_free(ws);
    zt_free(wsp);
    zt_free(gp);
    zt_free(gpp);
}

static void ping_body(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *m)
{
    (void)m;
    Zt__V1__PingReply r = ZT__V1__PING_REPLY__INIT;
    r.time_ms = coord_now_ms();
    r.version = (char *)c->cfg.version;
    zt_rpc_reply(call, &r.base);
}

static bool known_service(const char *s)
{
    return !s || !s[0] || strcmp(s, "zt.v1.Coordinator") == 0 ||
           strcmp(s, "zt.v1.AgentControl") == 0 || strcmp(s, "grpc.health.v1.Health") == 0;
}

static void health_check_body(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *m)
{
    const Grpc__Health__V1__HealthCheckRequest *q = (const void *)m;
    if (!known_service(q->service)) {
        zt_rpc_fail(call, ZT_RPC_NOT_FOUND, "unknown service '%s'", q->service);
        return;
    }
    Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    r.status = atomic_load(&c->serving)
                   ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                   : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
    zt_rpc_reply(call, &r.base);
}

static void health_watch_body(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *m)
{
    const Grpc__Health__V1__HealthCheckRequest *q = (const void *)m;
    Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    r.status = known_service(q->service)
                   ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                   : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
    /* serving is read under mu: stop_serving clears it before it tells the watchers */
    pthread_mutex_lock(&c->mu);
    if (!atomic_load(&c->serving)) { /* and nothing will change any more */
        pthread_mutex_unlock(&c->mu);
        if (known_service(q->service))
            r.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
        zt_rpc_stream_send(call, &r.base);
        zt_rpc_stream_finish(call, ZT_RPC_OK, NULL);
        return;
    }
    if (!watcher_fits(c, NULL, call)) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    zt_rpc_stream_send(call, &r.base);
    if (!watcher_add(c, &c->health_watchers, call)) {
        pthread_mutex_unlock(&c->mu);
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    zt_rpc_call_ref(call); /* ours, until the cancel callback is set */
    pthread_mutex_unlock(&c->mu);
    watcher_arm(c, call);
}

/* ---- reads handed to the reader thread (coord_read.c) -------------------------------------- */

static void get_job_body(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *m)
{
    coord_read_get_job(c, call, ((const Zt__V1__GetJobRequest *)(const void *)m)->job_id);
}

static void list_jobs_body(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *m)
{
    coord_read_list_jobs(c, call, (const void *)m);
}

static void get_metrics_body(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *m)
{
    coord_read_metrics(c, call, (const void *)m);
}

static void list_ckpts_body(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *m)
{
    coord_read_ckpts(c, call, (const void *)m);
}

static void get_logs_body(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *m)
{
    coord_logs_start(c, call, (const void *)m);
}

/* ---- the services ---------------------------------------------------------------------------- */

/* The request's int64 field `job_id` (protobuf-c reflection), checked by zt_check_job_id. */
static bool check_job_id(const ProtobufCMessage *m, char *why, size_t cap)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(m->descriptor, "job_id");
    int64_t id = f ? *(const int64_t *)(const void *)((const char *)m + f->offset) : 0;
    return zt_check_job_id(id, why, cap);
}

static bool check_submit(const ProtobufCMessage *m, char *why, size_t cap)
{
    return zt_check_submit((const void *)m, why, cap);
}

static bool check_list_jobs(const ProtobufCMessage *m, char *why, size_t cap)
{
    return zt_check_list_jobs((const void *)m, why, cap);
}

static bool check_get_metrics(const ProtobufCMessage *m, char *why, size_t cap)
{
    return zt_check_get_metrics((const void *)m, why, cap);
}

static bool check_get_logs(const ProtobufCMessage *m, char *why, size_t cap)
{
    return zt_check_get_logs((const void *)m, why, cap);
}

static bool check_health(const ProtobufCMessage *m, char *why, size_t cap)
{
    return zt_check_health(((const Grpc__Health__V1__HealthCheckRequest *)(const void *)m)->service,
                           why, cap);
}

const c_rpc_desc coord_rpc_user[] = {
    {.path = "/zt.v1.Coordinator/SubmitJob",
     .request = &zt__v1__submit_job_request__descriptor,
     .access = ZT_RPC_ACCESS_USER,
     .preposted = 64,
     .checks = RPC_SERVING | RPC_STRINGS,
     .check = check_submit,
     .op_size = sizeof(submit_op),
     .msg_cap = 1200,
     .what = "the job",
     .prepare = submit_prepare,
     .run = submit_run,
     .reply = submit_reply,
     .release = submit_release},
    {.path = "/zt.v1.Coordinator/GetJob",
     .request = &zt__v1__get_job_request__descriptor,
     .access = ZT_RPC_ACCESS_USER,
     .check = check_job_id,
     .body = get_job_body},
    {.path = "/zt.v1.Coordinator/ListJobs",
     .request = &zt__v1__list_jobs_request__descriptor,
     .access = ZT_RPC_ACCESS_USER,
     .check = check_list_jobs,
     .body = list_jobs_body},
    {.path = "/zt.v1.Coordinator/CancelJob",
     .request = &zt__v1__cancel_job_request__descriptor,
     .access = ZT_RPC_ACCESS_USER,
     .checks = RPC_SERVING | RPC_STRINGS,
     .check = check_job_id,
     .op_size = sizeof(cancel_op),
     .msg_cap = 512,
     .what = "the cancellation",
     .prepare = cancel_prepare,
     .run = cancel_run,
     .reply = cancel_reply,
     .release = cancel_release},
    {.path = "/zt.v1.Coordinator/WatchJob",
     .request = &zt__v1__watch_job_request__descriptor,
     .server_stream = true,
     .access = ZT_RPC_ACCESS_USER,
     .checks = RPC_SERVING,
     .check = check_job_id,
     .body = watch_body},
    {.path = "/zt.v1.Coordinator/GetMetrics",
     .request = &zt__v1__get_metrics_request__descriptor,
     .access = ZT_RPC_ACCESS_USER,
     .checks = RPC_STRINGS,
     .check = check_get_metrics,
     .body = get_metrics_body},
    {.path = "/zt.v1.Coordinator/ListCheckpoints",
     .request = &zt__v1__list_checkpoints_request__descriptor,
     .access = ZT_RPC_ACCESS_USER,
     .check = check_job_id,
     .body = list_ckpts_body},
    {.path = "/zt.v1.Coordinator/ListAgents",
     .request = &zt__v1__list_agents_request__descriptor,
     .access = ZT_RPC_ACCESS_USER,
     .body = list_agents_body},
    {.path = "/zt.v1.Coordinator/GetLogs",
     .request = &zt__v1__get_logs_request__descriptor,
     .server_stream = true,
     .access = ZT_RPC_ACCESS_USER,
     .checks = RPC_SERVING,
     .check = check_get_logs,
     .body = get_logs_body},
    {.path = "/zt.v1.Coordinator/Ping",
     .request = &zt__v1__ping_request__descriptor,
     .access = ZT_RPC_ACCESS_USER,
     .preposted = 128,
     .body = ping_body},
};
const size_t coord_rpc_n_user = sizeof(coord_rpc_user) / sizeof(coord_rpc_user[0]);

const c_rpc_desc coord_rpc_health[] = {
    {.path = "/grpc.health.v1.Health/Check",
     .request = &grpc__health__v1__health_check_request__descriptor,
     .access = ZT_RPC_ACCESS_OPEN,
     .checks = RPC_STRINGS,
     .check = check_health,
     .body = health_check_body},
    {.path = "/grpc.health.v1.Health/Watch",
     .request = &grpc__health__v1__health_check_request__descriptor,
     .server_stream = true,
     .access = ZT_RPC_ACCESS_OPEN,
     .checks = RPC_STRINGS,
     .check = check_health,
     .body = health_watch_body},
};
const size_t coord_rpc_n_health = sizeof(coord_rpc_health) / sizeof(coord_rpc_health[0]);
