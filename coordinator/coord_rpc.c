/* zerotrain: zcoord's RPC handlers. Each checks its request (validate.c), then answers at
 * once from the live model (heartbeats, agents, pings), queues an operation for the state
 * thread (anything that changes state: answered after the commit), or hands a read to the
 * reader thread (coord_read.c). */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/coord_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/alloc.h"
#include "common/jobfile.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/utf8.h"
#include "coordinator/auth.h"
#include "coordinator/validate.h"

#define CHECK_OR_FAIL(call, check)                                                                 \
    do {                                                                                           \
        char why_[512];                                                                            \
        if (!(check)) {                                                                            \
            zt_rpc_fail((call), ZT_RPC_INVALID_ARGUMENT, "%s", why_);                              \
            return;                                                                                \
        }                                                                                          \
    } while (0)
#define WHY why_, sizeof(why_)

static bool refuse_when_stopping(zt_coord *c, zt_rpc_call *call)
{
    if (atomic_load(&c->serving)) return false;
    zt_rpc_fail(call, ZT_RPC_UNAVAILABLE, "the coordinator is shutting down; retry shortly");
    return true;
}

static void fail_rollback(zt_coord *c, zt_rpc_call *call, const char *what)
{
    zt_rpc_fail(call, ZT_RPC_UNAVAILABLE, "%s was not stored: %s; retry", what,
                c->batch_failed ? zt_err_msg(&c->batch_err) : "the coordinator is shutting down");
}

/* ---- SubmitJob --------------------------------------------------------------------------- */

typedef struct submit_op {
    c_op op;
    char *name, *spec_text, *spec_dir, *spec_json, *user, *submit_key;
    char *ckpt_dir, *resume_from; /* train.checkpoint_dir (no trailing '/'), train.resume_from */
    char hash[17];
    int priority, ranks, ranks_per_node, device, max_restarts;
    int64_t total_steps, id;
    bool existed;
    zt_rpc_code code; /* refused (nothing stored): code and msg */
    char msg[1200];
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
        s->code = ZT_RPC_FAILED_PRECONDITION;
        snprintf(
            s->msg, sizeof(s->msg),
            "train.checkpoint_dir %s belongs to job %lld '%s' (%s, submitted by %s); give this job its own checkpoint_dir, or set train.resume_from to start from that job's checkpoints",
            s->ckpt_dir, (long long)owner.id, owner.name, zt_job_state_name(owner.state),
            owner.user);
        zt_utf8_trim_partial(s->msg);
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
                    s->device == 2 ? "cuda" : "cpu", (long long)s->total_steps);
    if (owner.id)
        coord_job_event(
            c, j, 0, NULL, "job", "QUEUED", "QUEUED",
            "took over job %lld '%s' (%s)'s checkpoint_dir %s: train.resume_from %s lies in it",
            (long long)owner.id, owner.name, zt_job_state_name(owner.state), s->ckpt_dir,
            s->resume_from);
    c->sched_dirty = true;
}

static void submit_done(zt_coord *c, c_op *op, bool committed)
{
    submit_op *s = (submit_op *)op;
    if (committed && s->code != ZT_RPC_OK) {
        zt_rpc_fail(op->call, s->code, "%s", s->msg);
    } else if (committed) {
        Zt__V1__SubmitJobReply r = ZT__V1__SUBMIT_JOB_REPLY__INIT;
        r.job_id = s->id;
        r.name = s->name;
        r.existed = s->existed;
        zt_rpc_reply(op->call, &r.base);
    } else {
        fail_rollback(c, op->call, "the job");
    }
    zt_free(s->name);
    zt_free(s->spec_text);
    zt_free(s->spec_dir);
    zt_free(s->spec_json);
    zt_free(s->user);
    zt_free(s->submit_key);
    zt_free(s->ckpt_dir);
    zt_free(s->resume_from);
    zt_free(s);
}

static void h_submit(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    zt_coord *c = user;
    const Zt__V1__SubmitJobRequest *q = (const void *)m;
    if (refuse_when_stopping(c, call)) return;
    CHECK_OR_FAIL(call, zt_check_strings(m, WHY));
    CHECK_OR_FAIL(call, zt_check_submit(q, WHY));
    zt_job *job = zt_calloc(1, sizeof(*job));
    submit_op *s = zt_calloc(1, sizeof(*s));
    if (!job || !s) {
        zt_free(job);
        zt_free(s);
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    const char *origin = q->job_path && q->job_path[0] ? q->job_path : "job";
    const char *dir = q->job_dir && q->job_dir[0] ? q->job_dir : "/";
    zt_err err = {0};
    if (zt_job_parse_inline(job, q->job_text, origin, dir, &err) != ZT_OK) {
        zt_rpc_fail(call, ZT_RPC_INVALID_ARGUMENT, "%s", zt_err_msg(&err));
        zt_free(job);
        zt_free(s);
        return;
    }
    char *json = zt_job_to_json(job);
    s->op.run = submit_run;
    s->op.done = submit_done;
    s->op.call = call;
    s->name = zt_strdup(job->name[0] ? job->name : "job");
    s->spec_text = zt_strdup(q->job_text);
    s->spec_dir = zt_strdup(dir);
    s->spec_json = json;
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
    s->device = job->resources.device == ZT_DEVICE_CUDA ? 2 : 1;
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
    if (!s->name || !s->spec_text || !s->spec_dir || !json || !s->user || !s->submit_key ||
        !s->ckpt_dir || !s->resume_from) {
        s->op.call = NULL;
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        zt_free(s->name);
        zt_free(s->spec_text);
        zt_free(s->spec_dir);
        zt_free(json);
        zt_free(s->user);
        zt_free(s->submit_key);
        zt_free(s->ckpt_dir);
        zt_free(s->resume_from);
        zt_free(s);
        return;
    }
    zt_hash_hex(json, strlen(json), s->hash);
    coord_enqueue(c, &s->op);
}

/* ---- CancelJob --------------------------------------------------------------------------- */

typedef struct cancel_op {
    c_op op;
    int64_t id;
    char *why;
    zt_rpc_code code;
    char msg[512];
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
    x->code = coord_job_cancel(c, x->id, x->why, x->msg, sizeof(x->msg));
    c_job *j = coord_job_find(c, x->id);
    if (x->code != ZT_RPC_OK || c->batch_failed || !j) return;
    Zt__V1__Job jb;
    coord_job_to_pb(j, &jb);
    Zt__V1__CancelJobReply r = ZT__V1__CANCEL_JOB_REPLY__INIT;
    r.job = &jb;
    x->reply = zt_pb_pack(&r.base, &x->reply_len);
}

static void cancel_done(zt_coord *c, c_op *op, bool committed)
{
    cancel_op *x = (cancel_op *)op;
    if (!committed)
        fail_rollback(c, op->call, "the cancellation");
    else if (x->code != ZT_RPC_OK)
        zt_rpc_fail(op->call, x->code, "%s", x->msg);
    else if (!x->reply)
        zt_rpc_fail(op->call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
    else
        zt_rpc_reply_bytes(op->call, x->reply, x->reply_len);
    zt_free(x->reply);
    zt_free(x->why);
    zt_free(x);
}

static void h_cancel(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    zt_coord *c = user;
    const Zt__V1__CancelJobRequest *q = (const void *)m;
    if (refuse_when_stopping(c, call)) return;
    CHECK_OR_FAIL(call, zt_check_strings(m, WHY));
    CHECK_OR_FAIL(call, zt_check_job_id(q->job_id, WHY));
    cancel_op *x = zt_calloc(1, sizeof(*x));
    const char *why = q->reason ? q->reason : "";
    const char *who = zt_rpc_call_identity(call);
    char by[512];
    if (strncmp(who, "user:", 5) == 0) {
        snprintf(by, sizeof(by), "%s%s(by %s)", why, why[0] ? " " : "", who + 5);
        why = by;
    }
    if (!x || !(x->why = zt_strndup(why, zt_utf8_cut(why, strlen(why), 400)))) {
        zt_free(x);
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    x->op.run = cancel_run;
    x->op.done = cancel_done;
    x->op.call = call;
    x->id = q->job_id;
    coord_enqueue(c, &x->op);
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

static void h_watch(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    zt_coord *c = user;
    const Zt__V1__WatchJobRequest *q = (const void *)m;
    if (refuse_when_stopping(c, call)) return;
    CHECK_OR_FAIL(call, zt_check_job_id(q->job_id, WHY));
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

static void h_list_agents(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    (void)m;
    zt_coord *c = user;
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

static void h_ping(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    (void)m;
    zt_coord *c = user;
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

static void h_health_check(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    zt_coord *c = user;
    const Grpc__Health__V1__HealthCheckRequest *q = (const void *)m;
    CHECK_OR_FAIL(call, zt_check_strings(m, WHY));
    CHECK_OR_FAIL(call, zt_check_health(q->service, WHY));
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

static void h_health_watch(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    zt_coord *c = user;
    const Grpc__Health__V1__HealthCheckRequest *q = (const void *)m;
    CHECK_OR_FAIL(call, zt_check_strings(m, WHY));
    CHECK_OR_FAIL(call, zt_check_health(q->service, WHY));
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

/* ---- who may report what ----------------------------------------------------------------- */

/* The agent the call's key belongs to, "" when the coordinator runs without credentials
 * (an embedding without zt_auth: nothing to check). */
static const char *caller_agent(const zt_coord *c, const zt_rpc_call *call)
{
    if (!c->cfg.auth) return "";
    const char *n = zt_auth_agent_name(zt_rpc_call_identity(call));
    return n ? n : "?";
}

/* Answers PERMISSION_DENIED and returns false when a request's agent field names another
 * agent than the caller's key (an empty field means the caller). */
static bool agent_field_ok(const zt_coord *c, zt_rpc_call *call, const char *field)
{
    const char *me = caller_agent(c, call);
    if (!me[0] || !field || !field[0] || strcmp(field, me) == 0) return true;
    zt_rpc_fail(call, ZT_RPC_PERMISSION_DENIED,
                "permission denied: the key of agent %s cannot report as agent %s", me, field);
    return false;
}

typedef struct rank_agent_find {
    int rank;
    char agent[160];
    bool found;
} rank_agent_find;

static void on_rank_agent(void *arg, const zt_rank_rec *r)
{
    rank_agent_find *f = arg;
    if (r->rank == f->rank) {
        snprintf(f->agent, sizeof(f->agent), "%s", r->agent);
        f->found = true;
    }
}

/* Whether dir (".../step_<n>", checked by validate.c) lies directly in the checkpoint_dir of
 * job j's resolved spec. Jobs no longer in memory are not checked here. */
static bool in_job_ckpt_dir(const c_job *j, const char *dir)
{
    if (!j || !j->spec_json) return true;
    json_t *root = json_loads(j->spec_json, 0, NULL);
    const char *cd = json_string_value(json_object_get(json_object_get(root, "train"),
                                                       "checkpoint_dir"));
    bool ok = false;
    const char *slash = strrchr(dir, '/');
    if (cd && slash) {
        size_t n = strlen(cd);
        while (n > 1 && cd[n - 1] == '/')
            n--;
        ok = (size_t)(slash - dir) == n && strncmp(dir, cd, n) == 0;
    }
    json_decref(root);
    return ok;
}

/* ZT_RPC_OK when dir lies directly in job_id's checkpoint_dir, else PERMISSION_DENIED with
 * the message in msg. */
static zt_rpc_code ckpt_dir_of_job(zt_coord *c, int64_t job_id, const char *dir, char *msg,
                                   size_t cap)
{
    if (in_job_ckpt_dir(coord_job_find(c, job_id), dir)) return ZT_RPC_OK;
    snprintf(msg, cap, "permission denied: %.200s is not a checkpoint in job %lld's checkpoint_dir",
             dir, (long long)job_id);
    return ZT_RPC_PERMISSION_DENIED;
}

/* Whether the coordinator placed rank `rank` of attempt `id` on agent `me` (state thread):
 * live and just-ended attempts from memory, older ones from the store. ZT_RPC_OK; NOT_FOUND
 * (no such attempt or rank); PERMISSION_DENIED (it runs elsewhere). msg says which. */
static zt_rpc_code placed_on(zt_coord *c, const char *me, int64_t id, int rank, bool *live,
                             char *msg, size_t cap)
{
    if (live) *live = false;
    if (!me[0]) return ZT_RPC_OK;
    c_attempt *t = coord_attempt_find(c, id);
    if (t && live) *live = true;
    if (!t)
        for (size_t i = 0; i < c->n_grave && !t; i++)
            if (c->grave[i]->id == id) t = c->grave[i];
    const char *where = NULL;
    rank_agent_find f = {.rank = rank};
    if (t) {
        if (rank < 0 || rank >= t->world_size) {
            snprintf(msg, cap, "rank %d is outside attempt %lld's world of %d", rank,
                     (long long)id, t->world_size);
            return ZT_RPC_NOT_FOUND;
        }
        where = t->ranks[rank].agent ? t->ranks[rank].agent->name : "";
    } else {
        zt_err e = {0};
        if (zt_store_ranks_list(c->store, id, on_rank_agent, &f, &e) != ZT_OK) {
            snprintf(msg, cap, "%s", zt_err_msg(&e));
            return ZT_RPC_UNAVAILABLE;
        }
        if (!f.found) {
            snprintf(msg, cap, "rank %d of attempt %lld not found", rank, (long long)id);
            return ZT_RPC_NOT_FOUND;
        }
        where = f.agent;
    }
    if (strcmp(where, me) != 0) {
        snprintf(msg, cap,
                 "permission denied: rank %d of attempt %lld was not placed on agent %s; an agent reports only its own ranks",
                 rank, (long long)id, me);
        return ZT_RPC_PERMISSION_DENIED;
    }
    return ZT_RPC_OK;
}

/* ---- RegisterAgent ----------------------------------------------------------------------- */

typedef struct register_op {
    c_op op;
    Zt__V1__RegisterAgentRequest *q; /* owned by the call */
    int64_t incarnation;
    zt_rpc_code code;
    char msg[400];
    char agent_key[ZT_AUTH_KEY_LEN + 1];
    bool by_cert; /* its client certificate names it: the name is its own */
} register_op;

static void register_run(zt_coord *c, c_op *op)
{
    register_op *x = (register_op *)op;
    const Zt__V1__RegisterAgentRequest *q = x->q;
    c_agent *a = coord_agent_find(c, q->name);
    const char *from = a ? zt_agent_state_name(a->state) : "";
    /* a live agent's name goes to the process holding its key, to nobody else until the
     * agent is LOST (a restarted coordinator issued no key yet: anyone may take it) */
    uint64_t silent = a ? zt_now_ns() - a->last_seen_ns : 0;
    if (a && c->cfg.auth && !x->by_cert && a->state == ZT_AGENT_ALIVE && !a->leaving &&
        silent < (uint64_t)c->cfg.heartbeat_timeout_ms * 1000000ull &&
        zt_auth_key_exists(c->cfg.auth, q->name) &&
        !(q->previous_agent_key[0] && zt_auth_key_is(c->cfg.auth, q->name, q->previous_agent_key))) {
        x->code = ZT_RPC_FAILED_PRECONDITION;
        snprintf(
            x->msg, sizeof(x->msg),
            "agent %s is alive (last heartbeat %.1f s ago, from %s) and this process does not hold its key: another zagent may not take its name; stop that one, or wait until it is LOST (heartbeat timeout %.1f s)",
            q->name, (double)silent * 1e-9, a->hostname && a->hostname[0] ? a->hostname : "?",
            (double)c->cfg.heartbeat_timeout_ms / 1000.0);
        return;
    }
    char sha[65] = "";
    if (c->cfg.auth) {
        zt_err se = {0};
        if (zt_auth_key_issue(c->cfg.auth, q->name, x->agent_key, sha, &se) != ZT_OK) {
            x->code = ZT_RPC_UNAVAILABLE;
            snprintf(x->msg, sizeof(x->msg), "%s", zt_err_msg(&se));
            return;
        }
    }
    if (!a && !(a = coord_agent_new(c, q->name))) {
        x->code = ZT_RPC_RESOURCE_EXHAUSTED;
        snprintf(x->msg, sizeof(x->msg), "out of memory registering agent %s", q->name);
        return;
    }
    c_gpu *gpus = NULL;
    if (q->n_gpus) {
        gpus = zt_calloc(q->n_gpus, sizeof(*gpus));
        if (!gpus) {
            x->code = ZT_RPC_RESOURCE_EXHAUSTED;
            snprintf(x->msg, sizeof(x->msg), "out of memory registering agent %s", q->name);
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
             (long long)a->incarnation, a->slots, a->device == 2 ? "cuda" : "cpu",
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

static void register_done(zt_coord *c, c_op *op, bool committed)
{
    register_op *x = (register_op *)op;
    if (!committed) {
        fail_rollback(c, op->call, "the registration");
    } else if (x->code != ZT_RPC_OK) {
        zt_rpc_fail(op->call, x->code, "%s", x->msg);
    } else {
        Zt__V1__RegisterAgentReply r = ZT__V1__REGISTER_AGENT_REPLY__INIT;
        r.name = x->q->name;
        r.incarnation = x->incarnation;
        r.heartbeat_interval_ms = (int32_t)c->cfg.heartbeat_interval_ms;
        r.heartbeat_timeout_ms = (int32_t)c->cfg.heartbeat_timeout_ms;
        r.agent_key = x->agent_key;
        zt_rpc_reply(op->call, &r.base);
    }
    zt_free(x);
}

static void h_register(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    zt_coord *c = user;
    const Zt__V1__RegisterAgentRequest *q = (const void *)m;
    if (refuse_when_stopping(c, call)) return;
    CHECK_OR_FAIL(call, zt_check_strings(m, WHY));
    CHECK_OR_FAIL(call, zt_check_register(q, WHY));
    const char *who = zt_rpc_call_identity(call);
    bool by_cert = strncmp(who, "agent-cert:", 11) == 0;
    if (by_cert && strcmp(who + 11, q->name) != 0) {
        zt_rpc_fail(call, ZT_RPC_PERMISSION_DENIED,
                    "permission denied: the client certificate is for agent %s, not %s; start zagent with --name %s or give it its own certificate",
                    who + 11, q->name, who + 11);
        return;
    }
    register_op *x = zt_calloc(1, sizeof(*x));
    if (!x) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    x->op.run = register_run;
    x->op.done = register_done;
    x->op.call = call;
    x->q = (Zt__V1__RegisterAgentRequest *)q;
    x->by_cert = by_cert;
    coord_enqueue(c, &x->op);
}

/* ---- Heartbeat (the hot path: memory only, no store write unless something changed) ------ */

static void h_heartbeat(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    zt_coord *c = user;
    const Zt__V1__HeartbeatRequest *q = (const void *)m;
    CHECK_OR_FAIL(call, zt_check_strings(m, WHY));
    CHECK_OR_FAIL(call, zt_check_heartbeat(q, WHY));
    const char *me = caller_agent(c, call);
    if (me[0] && strcmp(me, q->name) != 0) {
        zt_rpc_fail(call, ZT_RPC_PERMISSION_DENIED,
                    "permission denied: the key of agent %s cannot send agent %s's heartbeat",
                    me, q->name);
        return;
    }
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

static void h_attempt_spec(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    zt_coord *c = user;
    const Zt__V1__GetAttemptSpecRequest *q = (const void *)m;
    if (q->attempt_id <= 0) {
        zt_rpc_fail(call, ZT_RPC_INVALID_ARGUMENT, "attempt_id %lld is not valid",
                    (long long)q->attempt_id);
        return;
    }
    pthread_mutex_lock(&c->mu);
    c_attempt *a = coord_attempt_find(c, q->attempt_id);
    const char *me = caller_agent(c, call);
    bool mine = !me[0];
    for (int r = 0; a && !mine && r < a->world_size; r++)
        mine = a->ranks[r].agent && strcmp(a->ranks[r].agent->name, me) == 0;
    if (a && !mine) {
        pthread_mutex_unlock(&c->mu);
        zt_rpc_fail(call, ZT_RPC_PERMISSION_DENIED,
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
    c_op op;
    const Zt__V1__ReportMetricsRequest *q;
    const char *me; /* the calling agent */
    int accepted;
    zt_rpc_code code;
    char msg[300];
} metrics_op;

static void metrics_run(zt_coord *c, c_op *op)
{
    metrics_op *x = (metrics_op *)op;
    const Zt__V1__ReportMetricsRequest *q = x->q;
    /* every step first: one that is not the caller's refuses the whole report */
    for (size_t i = 0; i < q->n_steps; i++) {
        zt_rpc_code code = placed_on(c, x->me, q->steps[i]->attempt_id, q->steps[i]->rank, NULL,
                                     x->msg, sizeof(x->msg));
        if (code != ZT_RPC_OK && code != ZT_RPC_NOT_FOUND) {
            x->code = code;
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

static void metrics_done(zt_coord *c, c_op *op, bool committed)
{
    metrics_op *x = (metrics_op *)op;
    if (!committed) {
        fail_rollback(c, op->call, "the metrics");
    } else if (x->code != ZT_RPC_OK) {
        zt_rpc_fail(op->call, x->code, "%s", x->msg);
    } else {
        Zt__V1__ReportMetricsReply r = ZT__V1__REPORT_METRICS_REPLY__INIT;
        r.accepted = x->accepted;
        zt_rpc_reply(op->call, &r.base);
    }
    zt_free(x);
}

static void h_report_metrics(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    zt_coord *c = user;
    const Zt__V1__ReportMetricsRequest *q = (const void *)m;
    if (refuse_when_stopping(c, call)) return;
    CHECK_OR_FAIL(call, zt_check_strings(m, WHY));
    CHECK_OR_FAIL(call, zt_check_report_metrics(q, WHY));
    if (!agent_field_ok(c, call, q->agent)) return;
    metrics_op *x = zt_calloc(1, sizeof(*x));
    if (!x) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    x->me = caller_agent(c, call);
    x->op.run = metrics_run;
    x->op.done = metrics_done;
    x->op.call = call;
    x->q = q;
    coord_enqueue(c, &x->op);
}

/* ---- attempt lookup for reports that may come after an attempt ended ---------------------- */

typedef struct attempt_info {
    bool found;
    int64_t job_id;
    int world_size;
    zt_attempt_state state;
} attempt_info;

static void on_attempt_info(void *arg, const zt_attempt_rec *r)
{
    attempt_info *ai = arg;
    ai->found = true;
    ai->job_id = r->job_id;
    ai->world_size = r->world_size;
    ai->state = r->state;
}

/* Active attempts from memory, ended ones from the store (state thread). */
static zt_status attempt_info_get(zt_coord *c, int64_t id, attempt_info *ai)
{
    memset(ai, 0, sizeof(*ai));
    c_attempt *t = coord_attempt_find(c, id);
    if (!t)
        for (size_t i = 0; i < c->n_grave && !t; i++)
            if (c->grave[i]->id == id) t = c->grave[i];
    if (t) {
        ai->found = true;
        ai->job_id = t->job->id;
        ai->world_size = t->world_size;
        ai->state = t->state;
        return ZT_OK;
    }
    zt_err e = {0};
    zt_status st = zt_store_attempt_get(c->store, id, on_attempt_info, ai, &e);
    if (st != ZT_OK && st != ZT_ERR_NOT_FOUND) {
        coord_db_failed(c, &e);
        return st;
    }
    return ZT_OK;
}

/* ---- ReportCheckpoint -------------------------------------------------------------------- */

typedef struct ckpt_op {
    c_op op;
    const Zt__V1__ReportCheckpointRequest *q;
    const char *me;
    int64_t ckpt_id;
    int shards, world_size;
    bool committed;
    zt_rpc_code code;
    char msg[300];
} ckpt_op;

static void ckpt_run(zt_coord *c, c_op *op)
{
    ckpt_op *x = (ckpt_op *)op;
    const Zt__V1__ReportCheckpointRequest *q = x->q;
    attempt_info ai;
    if (attempt_info_get(c, q->attempt_id, &ai) != ZT_OK) return;
    if (!ai.found) {
        x->code = ZT_RPC_NOT_FOUND;
        snprintf(x->msg, sizeof(x->msg), "attempt %lld not found", (long long)q->attempt_id);
        return;
    }
    if (q->rank >= ai.world_size) {
        x->code = ZT_RPC_INVALID_ARGUMENT;
        snprintf(x->msg, sizeof(x->msg), "rank %d is outside attempt %lld's world of %d", q->rank,
                 (long long)q->attempt_id, ai.world_size);
        return;
    }
    x->code = placed_on(c, x->me, q->attempt_id, q->rank, NULL, x->msg, sizeof(x->msg));
    if (x->code != ZT_RPC_OK) return;
    x->code = ckpt_dir_of_job(c, ai.job_id, q->dir, x->msg, sizeof(x->msg));
    if (x->code != ZT_RPC_OK) return;
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
    c_job *j = coord_job_find(c, ai.job_id);
    if (j) {
        coord_job_event(c, j, q->attempt_id, NULL, "checkpoint", "PARTIAL", "COMMITTED",
                        "step %lld at %s: all %d shards recorded", (long long)q->step, q->dir,
                        ai.world_size);
    } else {
        char reason[1200];
        snprintf(reason, sizeof(reason), "step %lld at %s: all %d shards recorded",
                 (long long)q->step, q->dir, ai.world_size);
        zt_event_rec ev = {.time_ms = now,
                           .job_id = ai.job_id,
                           .attempt_id = q->attempt_id,
                           .kind = "checkpoint",
                           .from_state = "PARTIAL",
                           .to_state = "COMMITTED",
                           .reason = reason};
        if (zt_store_event_add(c->store, &ev, NULL, &e) != ZT_OK) coord_db_failed(c, &e);
    }
}

static void ckpt_done(zt_coord *c, c_op *op, bool committed)
{
    ckpt_op *x = (ckpt_op *)op;
    if (!committed) {
        fail_rollback(c, op->call, "the checkpoint shard");
    } else if (x->code != ZT_RPC_OK) {
        zt_rpc_fail(op->call, x->code, "%s", x->msg);
    } else {
        Zt__V1__ReportCheckpointReply r = ZT__V1__REPORT_CHECKPOINT_REPLY__INIT;
        r.checkpoint_id = x->ckpt_id;
        r.committed = x->committed;
        r.shards = x->shards;
        r.world_size = x->world_size;
        zt_rpc_reply(op->call, &r.base);
    }
    zt_free(x);
}

static void h_report_ckpt(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    zt_coord *c = user;
    const Zt__V1__ReportCheckpointRequest *q = (const void *)m;
    if (refuse_when_stopping(c, call)) return;
    CHECK_OR_FAIL(call, zt_check_strings(m, WHY));
    CHECK_OR_FAIL(call, zt_check_report_checkpoint(q, WHY));
    if (!agent_field_ok(c, call, q->agent)) return;
    ckpt_op *x = zt_calloc(1, sizeof(*x));
    if (!x) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    x->me = caller_agent(c, call);
    x->op.run = ckpt_run;
    x->op.done = ckpt_done;
    x->op.call = call;
    x->q = q;
    coord_enqueue(c, &x->op);
}

/* ---- ReportCheckpointRemoved ------------------------------------------------------------- */

typedef struct ckpt_rm_op {
    c_op op;
    const Zt__V1__ReportCheckpointRemovedRequest *q;
    const char *me;
    int64_t ckpt_id;
    bool changed;
    zt_rpc_code code;
    char msg[300];
} ckpt_rm_op;

static void ckpt_rm_run(zt_coord *c, c_op *op)
{
    ckpt_rm_op *x = (ckpt_rm_op *)op;
    const Zt__V1__ReportCheckpointRemovedRequest *q = x->q;
    attempt_info ai;
    if (attempt_info_get(c, q->attempt_id, &ai) != ZT_OK) return;
    if (!ai.found) {
        x->code = ZT_RPC_NOT_FOUND;
        snprintf(x->msg, sizeof(x->msg), "attempt %lld not found", (long long)q->attempt_id);
        return;
    }
    x->code = placed_on(c, x->me, q->attempt_id, q->rank, NULL, x->msg, sizeof(x->msg));
    if (x->code != ZT_RPC_OK) return;
    x->code = ckpt_dir_of_job(c, ai.job_id, q->dir, x->msg, sizeof(x->msg));
    if (x->code != ZT_RPC_OK) return;
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
    c_job *j = coord_job_find(c, ai.job_id);
    if (j) {
        coord_job_event(c, j, q->attempt_id, NULL, "checkpoint", from, "DELETED", "%s", reason);
    } else {
        zt_event_rec ev = {.time_ms = now,
                           .job_id = ai.job_id,
                           .attempt_id = q->attempt_id,
                           .kind = "checkpoint",
                           .from_state = from,
                           .to_state = "DELETED",
                           .reason = reason};
        if (zt_store_event_add(c->store, &ev, NULL, &e) != ZT_OK) coord_db_failed(c, &e);
    }
}

static void ckpt_rm_done(zt_coord *c, c_op *op, bool committed)
{
    ckpt_rm_op *x = (ckpt_rm_op *)op;
    if (!committed) {
        fail_rollback(c, op->call, "the checkpoint removal");
    } else if (x->code != ZT_RPC_OK) {
        zt_rpc_fail(op->call, x->code, "%s", x->msg);
    } else {
        Zt__V1__ReportCheckpointRemovedReply r = ZT__V1__REPORT_CHECKPOINT_REMOVED_REPLY__INIT;
        r.checkpoint_id = x->ckpt_id;
        r.changed = x->changed;
        zt_rpc_reply(op->call, &r.base);
    }
    zt_free(x);
}

static void h_report_ckpt_removed(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    zt_coord *c = user;
    const Zt__V1__ReportCheckpointRemovedRequest *q = (const void *)m;
    if (refuse_when_stopping(c, call)) return;
    CHECK_OR_FAIL(call, zt_check_strings(m, WHY));
    CHECK_OR_FAIL(call, zt_check_report_checkpoint_removed(q, WHY));
    if (!agent_field_ok(c, call, q->agent)) return;
    ckpt_rm_op *x = zt_calloc(1, sizeof(*x));
    if (!x) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    x->me = caller_agent(c, call);
    x->op.run = ckpt_rm_run;
    x->op.done = ckpt_rm_done;
    x->op.call = call;
    x->q = q;
    coord_enqueue(c, &x->op);
}

/* ---- ReportLogs -------------------------------------------------------------------------- */

typedef struct logs_op {
    c_op op;
    const Zt__V1__ReportLogsRequest *q;
    const char *me;
    int accepted;
    zt_rpc_code code;
    char msg[300];
} logs_op;

static void logs_run(zt_coord *c, c_op *op)
{
    logs_op *x = (logs_op *)op;
    const Zt__V1__ReportLogsRequest *q = x->q;
    /* every entry first: one that is not the caller's refuses the whole report */
    for (size_t i = 0; i < q->n_entries; i++) {
        if (i > 0 && q->entries[i]->attempt_id == q->entries[i - 1]->attempt_id &&
            q->entries[i]->rank == q->entries[i - 1]->rank)
            continue;
        zt_rpc_code code = placed_on(c, x->me, q->entries[i]->attempt_id, q->entries[i]->rank,
                                     NULL, x->msg, sizeof(x->msg));
        if (code != ZT_RPC_OK && code != ZT_RPC_NOT_FOUND) {
            x->code = code;
            return;
        }
    }
    int64_t last_attempt = 0, ended_job = 0, ended_count = 0;
    attempt_info ai = {0};
    for (size_t i = 0; i < q->n_entries; i++) {
        const Zt__V1__LogEntry *le = q->entries[i];
        if (le->attempt_id != last_attempt) {
            if (attempt_info_get(c, le->attempt_id, &ai) != ZT_OK) return;
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

static void logs_done(zt_coord *c, c_op *op, bool committed)
{
    logs_op *x = (logs_op *)op;
    if (!committed) {
        fail_rollback(c, op->call, "the log lines");
    } else if (x->code != ZT_RPC_OK) {
        zt_rpc_fail(op->call, x->code, "%s", x->msg);
    } else {
        Zt__V1__ReportLogsReply r = ZT__V1__REPORT_LOGS_REPLY__INIT;
        r.accepted = x->accepted;
        zt_rpc_reply(op->call, &r.base);
    }
    zt_free(x);
}

static void h_report_logs(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    zt_coord *c = user;
    const Zt__V1__ReportLogsRequest *q = (const void *)m;
    if (refuse_when_stopping(c, call)) return;
    CHECK_OR_FAIL(call, zt_check_strings(m, WHY));
    CHECK_OR_FAIL(call, zt_check_report_logs(q, WHY));
    if (!agent_field_ok(c, call, q->agent)) return;
    logs_op *x = zt_calloc(1, sizeof(*x));
    if (!x) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    x->me = caller_agent(c, call);
    x->op.run = logs_run;
    x->op.done = logs_done;
    x->op.call = call;
    x->q = q;
    coord_enqueue(c, &x->op);
}

/* ---- Rendezvous -------------------------------------------------------------------------- */

typedef struct rdzv_op {
    c_op op;
    const Zt__V1__RendezvousRequest *q;
    const char *me;
    zt_rpc_code code;
    char msg[400];
    uint8_t *reply;
    size_t reply_len;
    bool waiting; /* the call went to the attempt's waiters */
} rdzv_op;

static uint8_t *rdzv_pack(const c_attempt *a, bool complete, size_t *len)
{
    Zt__V1__RendezvousReply rep = ZT__V1__RENDEZVOUS_REPLY__INIT;
    Zt__V1__RendezvousEntry *e = zt_calloc((size_t)a->world_size, sizeof(*e));
    Zt__V1__RendezvousEntry **ep = zt_calloc((size_t)a->world_size, sizeof(*ep));
    uint8_t *out = NULL;
    if (e && ep) {
        size_t n = 0;
        for (int r = 0; r < a->world_size; r++) {
            if (!a->rdzv[r]) continue;
            zt__v1__rendezvous_entry__init(&e[n]);
            e[n].rank = r;
            e[n].value.data = a->rdzv[r];
            e[n].value.len = a->rdzv_len[r];
            ep[n] = &e[n];
            n++;
        }
        rep.attempt_id = a->id;
        rep.world_size = a->world_size;
        rep.complete = complete;
        rep.n_entries = n;
        rep.entries = ep;
        out = zt_pb_pack(&rep.base, len);
    }
    zt_free(e);
    zt_free(ep);
    return out;
}

static void rdzv_run(zt_coord *c, c_op *op)
{
    rdzv_op *x = (rdzv_op *)op;
    const Zt__V1__RendezvousRequest *q = x->q;
    c_attempt *a = coord_attempt_find(c, q->attempt_id);
    if (!a) {
        attempt_info ai;
        if (attempt_info_get(c, q->attempt_id, &ai) != ZT_OK) return;
        if (!ai.found) {
            x->code = ZT_RPC_NOT_FOUND;
            snprintf(x->msg, sizeof(x->msg), "attempt %lld not found", (long long)q->attempt_id);
        } else {
            x->code = ZT_RPC_FAILED_PRECONDITION;
            snprintf(
                x->msg, sizeof(x->msg),
                "attempt %lld of job %lld is stale: it is %s; stop this worker, the next heartbeat says what to run",
                (long long)q->attempt_id, (long long)ai.job_id, zt_attempt_state_name(ai.state));
        }
        return;
    }
    if (q->rank >= a->world_size) {
        x->code = ZT_RPC_INVALID_ARGUMENT;
        snprintf(x->msg, sizeof(x->msg), "rank %d is outside attempt %lld's world of %d", q->rank,
                 (long long)a->id, a->world_size);
        return;
    }
    x->code = placed_on(c, x->me, q->attempt_id, q->rank, NULL, x->msg, sizeof(x->msg));
    if (x->code != ZT_RPC_OK) return;
    if (q->value.len) {
        bool same = a->rdzv[q->rank] && a->rdzv_len[q->rank] == q->value.len &&
                    memcmp(a->rdzv[q->rank], q->value.data, q->value.len) == 0;
        if (!same) {
            uint8_t *v = zt_malloc(q->value.len);
            if (!v) {
                x->code = ZT_RPC_RESOURCE_EXHAUSTED;
                snprintf(x->msg, sizeof(x->msg), "out of memory");
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
        x->reply = rdzv_pack(a, complete, &x->reply_len);
        if (!x->reply) {
            x->code = ZT_RPC_RESOURCE_EXHAUSTED;
            snprintf(x->msg, sizeof(x->msg), "out of memory");
        }
        return;
    }
    /* each waiting call holds memory and an open gRPC call: bounded per attempt (agents
     * retry RESOURCE_EXHAUSTED) and in total */
    int64_t per_job = (int64_t)c->cfg.max_rdzv_waiters_per_rank * a->world_size;
    if (c->n_waiters >= c->cfg.max_rdzv_waiters || a->n_waiters >= per_job) {
        x->code = ZT_RPC_RESOURCE_EXHAUSTED;
        if (c->n_waiters >= c->cfg.max_rdzv_waiters)
            snprintf(
                x->msg, sizeof(x->msg),
                "too many rendezvous calls waiting on this coordinator (%d, its --max-rdzv-waiters); retry shortly",
                c->cfg.max_rdzv_waiters);
        else
            snprintf(
                x->msg, sizeof(x->msg),
                "attempt %lld has %d rendezvous calls waiting already (%d per rank, the coordinator's --max-rdzv-waiters-per-rank): a rank is calling again before its earlier call ended; retry shortly",
                (long long)a->id, a->n_waiters, c->cfg.max_rdzv_waiters_per_rank);
        return;
    }
    c_waiter *w = zt_calloc(1, sizeof(*w));
    if (!w) {
        x->code = ZT_RPC_RESOURCE_EXHAUSTED;
        snprintf(x->msg, sizeof(x->msg), "out of memory");
        return;
    }
    w->call = op->call;
    w->wait = q->wait;
    w->until_ns = zt_now_ns() + (uint64_t)wait_ms * 1000000ull;
    w->next = a->waiters;
    a->waiters = w;
    a->n_waiters++;
    c->n_waiters++;
    x->waiting = true;
}

static void rdzv_done(zt_coord *c, c_op *op, bool committed)
{
    rdzv_op *x = (rdzv_op *)op;
    if (x->waiting) {
        /* answered by the publish step (or failed by the reload after a rollback) */
    } else if (!committed) {
        fail_rollback(c, op->call, "the rendezvous entry");
    } else if (x->code != ZT_RPC_OK) {
        zt_rpc_fail(op->call, x->code, "%s", x->msg);
    } else {
        zt_rpc_reply_bytes(op->call, x->reply, x->reply_len);
    }
    zt_free(x->reply);
    zt_free(x);
}

static void h_rendezvous(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    zt_coord *c = user;
    const Zt__V1__RendezvousRequest *q = (const void *)m;
    if (refuse_when_stopping(c, call)) return;
    CHECK_OR_FAIL(call, zt_check_rendezvous(q, WHY));
    rdzv_op *x = zt_calloc(1, sizeof(*x));
    if (!x) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    x->op.run = rdzv_run;
    x->op.done = rdzv_done;
    x->op.call = call;
    x->q = q;
    x->me = caller_agent(c, call);
    coord_enqueue(c, &x->op);
}

/* ---- reads handed to the reader thread (coord_read.c) -------------------------------------- */

void coord_read_get_job(zt_coord *c, zt_rpc_call *call, int64_t id);
void coord_read_list_jobs(zt_coord *c, zt_rpc_call *call, const Zt__V1__ListJobsRequest *q);
void coord_read_metrics(zt_coord *c, zt_rpc_call *call, const Zt__V1__GetMetricsRequest *q);
void coord_read_ckpts(zt_coord *c, zt_rpc_call *call, const Zt__V1__ListCheckpointsRequest *q);

static void h_get_job(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    const Zt__V1__GetJobRequest *q = (const void *)m;
    CHECK_OR_FAIL(call, zt_check_job_id(q->job_id, WHY));
    coord_read_get_job(user, call, q->job_id);
}

static void h_list_jobs(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    const Zt__V1__ListJobsRequest *q = (const void *)m;
    CHECK_OR_FAIL(call, zt_check_list_jobs(q, WHY));
    coord_read_list_jobs(user, call, q);
}

static void h_get_metrics(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    const Zt__V1__GetMetricsRequest *q = (const void *)m;
    CHECK_OR_FAIL(call, zt_check_strings(m, WHY));
    CHECK_OR_FAIL(call, zt_check_get_metrics(q, WHY));
    coord_read_metrics(user, call, q);
}

static void h_list_ckpts(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    const Zt__V1__ListCheckpointsRequest *q = (const void *)m;
    CHECK_OR_FAIL(call, zt_check_job_id(q->job_id, WHY));
    coord_read_ckpts(user, call, q);
}

static void h_get_logs(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    zt_coord *c = user;
    const Zt__V1__GetLogsRequest *q = (const void *)m;
    if (refuse_when_stopping(c, call)) return;
    CHECK_OR_FAIL(call, zt_check_get_logs(q, WHY));
    coord_logs_start(c, call, q);
}

/* ---- the method table -------------------------------------------------------------------- */

/* Counts the call for /metrics, then runs the method's own handler. */
static void counted_call(zt_rpc_call *call, const ProtobufCMessage *m, void *user)
{
    c_rpc_stat *st = user;
    atomic_fetch_add_explicit(&st->calls, 1, memory_order_relaxed);
    st->handler(call, m, st->user);
}

/* The call's latency, arrival to answer, for /metrics. */
static void observed_call(void *user, uint64_t ns, zt_rpc_code code)
{
    (void)code;
    coord_hist_observe(&((c_rpc_stat *)user)->latency, ns);
}

size_t coord_rpc_methods(zt_coord *c, zt_rpc_method *m, size_t cap)
{
    const zt_rpc_method table[] = {
        {"/zt.v1.Coordinator/SubmitJob", &zt__v1__submit_job_request__descriptor, false, h_submit,
         c, 64, NULL, NULL, ZT_RPC_ACCESS_USER},
        {"/zt.v1.Coordinator/GetJob", &zt__v1__get_job_request__descriptor, false, h_get_job, c, 0,
         NULL, NULL, ZT_RPC_ACCESS_USER},
        {"/zt.v1.Coordinator/ListJobs", &zt__v1__list_jobs_request__descriptor, false, h_list_jobs,
         c, 0, NULL, NULL, ZT_RPC_ACCESS_USER},
        {"/zt.v1.Coordinator/CancelJob", &zt__v1__cancel_job_request__descriptor, false, h_cancel,
         c, 0, NULL, NULL, ZT_RPC_ACCESS_USER},
        {"/zt.v1.Coordinator/WatchJob", &zt__v1__watch_job_request__descriptor, true, h_watch, c, 0,
         NULL, NULL, ZT_RPC_ACCESS_USER},
        {"/zt.v1.Coordinator/GetMetrics", &zt__v1__get_metrics_request__descriptor, false,
         h_get_metrics, c, 0, NULL, NULL, ZT_RPC_ACCESS_USER},
        {"/zt.v1.Coordinator/ListCheckpoints", &zt__v1__list_checkpoints_request__descriptor, false,
         h_list_ckpts, c, 0, NULL, NULL, ZT_RPC_ACCESS_USER},
        {"/zt.v1.Coordinator/ListAgents", &zt__v1__list_agents_request__descriptor, false,
         h_list_agents, c, 0, NULL, NULL, ZT_RPC_ACCESS_USER},
        {"/zt.v1.Coordinator/GetLogs", &zt__v1__get_logs_request__descriptor, true, h_get_logs, c,
         0, NULL, NULL, ZT_RPC_ACCESS_USER},
        {"/zt.v1.Coordinator/Ping", &zt__v1__ping_request__descriptor, false, h_ping, c, 128, NULL,
         NULL, ZT_RPC_ACCESS_USER},
        {"/zt.v1.AgentControl/RegisterAgent", &zt__v1__register_agent_request__descriptor, false,
         h_register, c, 64, NULL, NULL, ZT_RPC_ACCESS_AGENT_JOIN},
        {"/zt.v1.AgentControl/Heartbeat", &zt__v1__heartbeat_request__descriptor, false,
         h_heartbeat, c, 256, NULL, NULL, ZT_RPC_ACCESS_AGENT},
        {"/zt.v1.AgentControl/GetAttemptSpec", &zt__v1__get_attempt_spec_request__descriptor, false,
         h_attempt_spec, c, 0, NULL, NULL, ZT_RPC_ACCESS_AGENT},
        {"/zt.v1.AgentControl/ReportMetrics", &zt__v1__report_metrics_request__descriptor, false,
         h_report_metrics, c, 0, NULL, NULL, ZT_RPC_ACCESS_AGENT},
        {"/zt.v1.AgentControl/ReportCheckpoint", &zt__v1__report_checkpoint_request__descriptor,
         false, h_report_ckpt, c, 0, NULL, NULL, ZT_RPC_ACCESS_AGENT},
        {"/zt.v1.AgentControl/ReportCheckpointRemoved",
         &zt__v1__report_checkpoint_removed_request__descriptor, false, h_report_ckpt_removed, c, 0,
         NULL, NULL, ZT_RPC_ACCESS_AGENT},
        {"/zt.v1.AgentControl/ReportLogs", &zt__v1__report_logs_request__descriptor, false,
         h_report_logs, c, 0, NULL, NULL, ZT_RPC_ACCESS_AGENT},
        {"/zt.v1.AgentControl/Rendezvous", &zt__v1__rendezvous_request__descriptor, false,
         h_rendezvous, c, 0, NULL, NULL, ZT_RPC_ACCESS_AGENT},
        {"/grpc.health.v1.Health/Check", &grpc__health__v1__health_check_request__descriptor, false,
         h_health_check, c, 0, NULL, NULL, ZT_RPC_ACCESS_OPEN},
        {"/grpc.health.v1.Health/Watch", &grpc__health__v1__health_check_request__descriptor, true,
         h_health_watch, c, 0, NULL, NULL, ZT_RPC_ACCESS_OPEN},
    };
    size_t n = sizeof(table) / sizeof(table[0]);
    if (n > cap) n = cap;
    if (n > COORD_MAX_METHODS) n = COORD_MAX_METHODS;
    for (size_t i = 0; i < n; i++) {
        c_rpc_stat *st = &c->rpc_stats[i];
        st->path = table[i].path;
        st->handler = table[i].handler;
        st->user = table[i].user;
        atomic_store(&st->calls, 0);
        m[i] = table[i];
        m[i].handler = counted_call;
        m[i].user = st;
        m[i].observe = observed_call;
        m[i].observe_user = st;
    }
    c->n_rpc_stats = n;
    return n;
}
