/* zerotrain: zcoord's memory-only HTTP views (see api.h): the agents, the cluster's slots and
 * queue, and a cancel from the dashboard. The model's lock is held only to copy live values;
 * JSON is built after it is released. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/api_int.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/device.h"

/* ---- agents and the cluster ------------------------------------------------------------------ */

typedef struct agent_copy {
    char name[256], hostname[256], address[256], version[64];
    int device, slots, free_slots, state, n_gpus, n_reports;
    int64_t last_seen_ms, registered_ms, incarnation;
    c_gpu gpus[16];
    c_report *reports;
} agent_copy;

void api_get_agents(zt_coord *c, zt_http_req *r)
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
        api_set(o, "name", api_jstr(a->name));
        api_set(o, "hostname", api_jstr(a->hostname));
        api_set(o, "address", api_jstr(a->address));
        api_set(o, "version", api_jstr(a->version));
        api_set(o, "state", json_string(zt_agent_state_name(a->state)));
        api_set(o, "device", json_string(api_device_name(a->device)));
        api_set(o, "slots", json_integer(a->slots));
        api_set(o, "free_slots", json_integer(a->free_slots));
        api_set(o, "used_slots", json_integer(a->slots - a->free_slots));
        api_set(o, "last_heartbeat_ms", json_integer(a->last_seen_ms));
        api_set(o, "registered_ms", json_integer(a->registered_ms));
        api_set(o, "incarnation", json_integer(a->incarnation));
        json_t *gpus = json_array();
        for (int g = 0; g < a->n_gpus; g++) {
            json_t *go = json_object();
            api_set(go, "index", json_integer(a->gpus[g].index));
            api_set(go, "name", api_jstr(a->gpus[g].name));
            api_set(go, "memory_total", json_integer(a->gpus[g].memory_total));
            api_set(go, "memory_free", json_integer(a->gpus[g].memory_free));
            json_array_append_new(gpus, go);
        }
        api_set(o, "gpus", gpus);
        json_t *ws = json_array();
        for (int w = 0; w < a->n_reports; w++) {
            const c_report *p = &a->reports[w];
            json_t *wo = json_object();
            api_set(wo, "job_id", json_integer(p->job_id));
            api_set(wo, "attempt_id", json_integer(p->attempt_id));
            api_set(wo, "rank", json_integer(p->rank));
            api_set(wo, "pid", json_integer(p->pid));
            api_set(wo, "phase", json_string(api_phase_name(p->phase)));
            api_set(wo, "step", json_integer(p->step));
            api_set(wo, "memory_bytes", json_integer(p->memory_bytes));
            api_set(wo, "device_index", json_integer(p->device_index));
            json_array_append_new(ws, wo);
        }
        api_set(o, "workers", ws);
        json_array_append_new(arr, o);
    }
    zt_free(reps);
    zt_free(ac);
    json_t *out = json_object();
    api_set(out, "agents", arr);
    api_reply_json(r, 200, out);
}

typedef struct queued_copy {
    int64_t id, submitted_ms;
    char name[128], pending[256];
    int priority, ranks, device;
} queued_copy;

void api_get_cluster(zt_coord *c, zt_http_req *r)
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
        int d = a->device == ZT_DEVICE_CUDA ? ZT_DEVICE_CUDA : ZT_DEVICE_CPU;
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
        api_set(o, "total", json_integer(total[d]));
        api_set(o, "used", json_integer(total[d] - freeslots[d]));
        api_set(o, "free", json_integer(freeslots[d]));
        api_set(slots, api_device_name(d), o);
    }
    for (size_t i = 0; i < k; i++) {
        json_t *o = json_object();
        api_set(o, "id", json_integer(q[i].id));
        api_set(o, "name", api_jstr(q[i].name));
        api_set(o, "priority", json_integer(q[i].priority));
        api_set(o, "ranks", json_integer(q[i].ranks));
        api_set(o, "device", json_string(api_device_name(q[i].device)));
        api_set(o, "pending_reason", api_jstr(q[i].pending));
        api_set(o, "submitted_ms", json_integer(q[i].submitted_ms));
        json_array_append_new(queue, o);
    }
    for (int s = ZT_JOB_QUEUED; s <= ZT_JOB_RUNNING; s++)
        api_set(jobs, zt_job_state_name((zt_job_state)s), json_integer(live[s]));
    json_t *ag = json_object();
    api_set(ag, "ALIVE", json_integer(agents[1]));
    api_set(ag, "LOST", json_integer(agents[2]));
    api_set(out, "slots", slots);
    api_set(out, "agents", ag);
    api_set(out, "jobs", jobs);
    api_set(out, "queue", queue);
    api_set(out, "time_ms", json_integer(coord_now_ms()));
    zt_free(q);
    api_reply_json(r, 200, out);
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
    if (x->code == ZT_RPC_OK && !c->batch_failed && j) x->job = api_job_live_json(j);
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

void api_post_cancel(zt_coord *c, zt_http_req *r, int64_t id)
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
        api_set(out, "job", x->job);
        api_reply_json(r, 200, out);
    }
    pthread_mutex_destroy(&x->m);
    pthread_cond_destroy(&x->cv);
    zt_free(x);
}
