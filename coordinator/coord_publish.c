/* zerotrain: what a committed batch tells its readers: the desired workers each agent gets in
 * its next heartbeat reply, job updates to WatchJob streams and the HTTP event streams, and
 * the answers to waiting rendezvous calls. Runs with mu held, after the commit. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/coord_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/timeutil.h"

/* ---- publishing (after the commit) ---------------------------------------------------------- */

void coord_agent_build_desired(zt_coord *c, c_agent *a)
{
    size_t n = (size_t)a->n_places;
    (void)c;
    Zt__V1__DesiredWorker *w = zt_calloc(n ? n : 1, sizeof(*w));
    Zt__V1__DesiredWorker **wp = zt_calloc(n ? n : 1, sizeof(*wp));
    Zt__V1__EnvVar *env = zt_calloc(n ? n * 3 : 1, sizeof(*env));
    Zt__V1__EnvVar **envp = zt_calloc(n ? n * 3 : 1, sizeof(*envp));
    char(*vals)[2][32] = zt_calloc(n ? n : 1, sizeof(*vals));
    char(*rdzv)[48] = zt_calloc(n ? n : 1, sizeof(*rdzv));
    if (!w || !wp || !env || !envp || !vals || !rdzv) goto cleanup;
    size_t k = 0;
    for (int i = 0; i < a->n_places; i++) {
        c_attempt *t = a->places[i].att;
        int r = a->places[i].rank;
        int local_world = 0;
        for (int q = 0; q < a->n_places; q++)
            local_world += a->places[q].att == t;
        {
            c_rank *rk = &t->ranks[r];
            Zt__V1__DesiredWorker *d = &w[k];
            zt__v1__desired_worker__init(d);
            d->job_id = t->job->id;
            d->attempt_id = t->id;
            d->rank = r;
            d->world_size = t->world_size;
            d->local_rank = rk->local_rank;
            d->local_world_size = local_world;
            d->device_index = rk->device_index;
            d->device = (Zt__V1__Device)t->job->device;
            d->job_name = t->job->name;
            d->spec_hash = t->job->spec_hash;
            d->resume_path = t->resume_path;
            snprintf(rdzv[k], sizeof(rdzv[k]), "zcoord:%lld", (long long)t->id);
            d->rendezvous = rdzv[k];
            snprintf(vals[k][0], sizeof(vals[k][0]), "%lld", (long long)t->job->id);
            snprintf(vals[k][1], sizeof(vals[k][1]), "%lld", (long long)t->id);
            Zt__V1__EnvVar *e = &env[k * 3];
            zt__v1__env_var__init(&e[0]);
            e[0].name = "ZT_JOB_ID";
            e[0].value = vals[k][0];
            zt__v1__env_var__init(&e[1]);
            e[1].name = "ZT_ATTEMPT_ID";
            e[1].value = vals[k][1];
            zt__v1__env_var__init(&e[2]);
            e[2].name = "ZT_RESUME";
            e[2].value = t->resume_path;
            envp[k * 3] = &e[0];
            envp[k * 3 + 1] = &e[1];
            envp[k * 3 + 2] = &e[2];
            d->n_env = t->resume_path[0] ? 3 : 2;
            d->env = &envp[k * 3];
            wp[k] = d;
            k++;
        }
    }
    Zt__V1__HeartbeatReply reply = ZT__V1__HEARTBEAT_REPLY__INIT;
    reply.desired_version = ++c->desired_seq;
    reply.n_workers = k;
    reply.workers = wp;
    reply.heartbeat_interval_ms = (int32_t)c->cfg.heartbeat_interval_ms;
    size_t len = 0;
    uint8_t *packed = zt_pb_pack(&reply.base, &len);
    if (packed) {
        zt_free(a->desired);
        a->desired = packed;
        a->desired_len = len;
        a->desired_version = reply.desired_version;
        a->desired_dirty = false;
    }
cleanup:
    zt_free(w);
    zt_free(wp);
    zt_free(env);
    zt_free(envp);
    zt_free(vals);
    zt_free(rdzv);
}

void coord_job_to_pb(const c_job *j, Zt__V1__Job *o)
{
    zt__v1__job__init(o);
    o->id = j->id;
    o->name = j->name;
    o->state = (Zt__V1__JobState)j->state;
    o->reason = j->reason;
    o->pending_reason = (char *)(j->state == ZT_JOB_QUEUED ? j->pending : "");
    o->priority = j->priority;
    o->ranks = j->ranks;
    o->ranks_per_node = j->ranks_per_node;
    o->device = (Zt__V1__Device)j->device;
    o->max_restarts = j->max_restarts;
    o->restarts = j->restarts;
    o->total_steps = j->total_steps;
    o->step = j->step;
    o->loss = j->loss;
    o->tokens_per_s = j->tokens_per_s;
    o->eta_s = j->eta_s;
    o->submitted_ms = j->submitted_ms;
    o->started_ms = j->started_ms;
    o->ended_ms = j->ended_ms;
    o->attempt_id = j->attempt_id;
    o->user = j->user;
}

void coord_rec_to_pb(const zt_job_rec *r, Zt__V1__Job *o)
{
    zt__v1__job__init(o);
    o->id = r->id;
    o->name = (char *)r->name;
    o->state = (Zt__V1__JobState)r->state;
    o->reason = (char *)r->reason;
    o->priority = r->priority;
    o->ranks = r->ranks;
    o->ranks_per_node = r->ranks_per_node;
    o->device = (Zt__V1__Device)r->device;
    o->max_restarts = r->max_restarts;
    o->restarts = r->restarts;
    o->total_steps = r->total_steps;
    o->step = r->last_step;
    o->submitted_ms = r->submitted_ms;
    o->started_ms = r->started_ms;
    o->ended_ms = r->ended_ms;
    o->attempt_id = r->attempt_id;
    o->user = (char *)r->user;
}

void coord_watchers_send(zt_coord *c, c_job *j, const Zt__V1__JobUpdate *u, bool final)
{
    c_watcher **pp = &j->watchers;
    while (*pp) {
        c_watcher *w = *pp;
        zt_status st = zt_rpc_stream_send(w->call, &u->base);
        if (st == ZT_OK && !final) {
            pp = &w->next;
            continue;
        }
        if (st == ZT_OK)
            zt_rpc_stream_finish(w->call, ZT_RPC_OK, NULL);
        else if (st == ZT_ERR_NOSPACE)
            zt_rpc_fail(
                w->call, ZT_RPC_RESOURCE_EXHAUSTED,
                "watcher too slow: more than the stream queue of updates waited; watch again to resume");
        else
            zt_rpc_stream_finish(w->call, ZT_RPC_CANCELLED, "watcher gone");
        zt_rpc_call_unref(w->call);
        *pp = w->next;
        zt_free(w);
        j->n_watchers--;
        c->n_watchers--;
    }
}

static void parse_kv_metrics(const char *kv, Zt__V1__Metric *m, Zt__V1__Metric **mp, char *keys,
                             size_t keys_cap, size_t max, size_t *n)
{
    *n = 0;
    size_t used = 0;
    const char *p = kv;
    while (p && *p && *n < max) {
        while (*p == ' ')
            p++;
        const char *eq = strchr(p, '=');
        if (!eq) break;
        const char *end = strchr(eq, ' ');
        if (!end) end = eq + strlen(eq);
        size_t klen = (size_t)(eq - p);
        if (used + klen + 1 > keys_cap) break;
        memcpy(keys + used, p, klen);
        keys[used + klen] = '\0';
        zt__v1__metric__init(&m[*n]);
        m[*n].key = keys + used;
        m[*n].value = strtod(eq + 1, NULL);
        mp[*n] = &m[*n];
        (*n)++;
        used += klen + 1;
        p = end;
    }
}

static void publish_job(zt_coord *c, c_job *j)
{
    if (!j->events && !j->progress_dirty && !j->metrics_dirty && !(j->done && j->watchers)) return;
    coord_api_publish_job(c, j);
    Zt__V1__Job jb;
    coord_job_to_pb(j, &jb);
    Zt__V1__JobUpdate u = ZT__V1__JOB_UPDATE__INIT;
    u.job = &jb;
    Zt__V1__Metric m[64];
    Zt__V1__Metric *mp[64];
    char keys[2048];
    if (j->metrics_kv) {
        parse_kv_metrics(j->metrics_kv, m, mp, keys, sizeof(keys), 64, &u.n_metrics);
        u.metrics = mp;
        u.metrics_step = j->metrics_step;
    }
    for (c_event *e = j->events; e; e = e->next) {
        Zt__V1__Event ev = ZT__V1__EVENT__INIT;
        ev.id = e->rec.id;
        ev.time_ms = e->rec.time_ms;
        ev.job_id = e->rec.job_id;
        ev.attempt_id = e->rec.attempt_id;
        ev.agent = (char *)(e->rec.agent ? e->rec.agent : "");
        ev.kind = (char *)e->rec.kind;
        ev.from_state = (char *)e->rec.from_state;
        ev.to_state = (char *)e->rec.to_state;
        ev.reason = (char *)e->rec.reason;
        u.event = &ev;
        u.final = j->done && !e->next;
        coord_watchers_send(c, j, &u, u.final);
    }
    if (!j->events && (j->progress_dirty || j->metrics_dirty || j->done)) {
        u.event = NULL;
        u.final = j->done;
        coord_watchers_send(c, j, &u, u.final);
    }
    coord_job_events_free(j);
    j->progress_dirty = j->metrics_dirty = false;
    j->notified_step = j->step;
    j->pub_state = j->state;
}

bool coord_rdzv_complete(const c_attempt *a, int wait)
{
    if (wait == ZT__V1__RENDEZVOUS_REQUEST__WAIT__WAIT_RANK0) return a->rdzv[0] != NULL;
    if (wait == ZT__V1__RENDEZVOUS_REQUEST__WAIT__WAIT_ALL) {
        for (int r = 0; r < a->world_size; r++)
            if (!a->rdzv[r]) return false;
    }
    return true;
}

uint8_t *coord_rdzv_pack(const c_attempt *a, bool complete, size_t *len)
{
    Zt__V1__RendezvousReply rep = ZT__V1__RENDEZVOUS_REPLY__INIT;
    Zt__V1__RendezvousEntry *e = zt_calloc((size_t)a->world_size, sizeof(*e));
    Zt__V1__RendezvousEntry **ep = zt_calloc((size_t)a->world_size, sizeof(*ep));
    uint8_t *out = NULL;
    if (!e || !ep) goto free_entries;
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
free_entries:
    zt_free(e);
    zt_free(ep);
    return out;
}

void coord_rdzv_reply(c_attempt *a, zt_rpc_call *call, bool complete)
{
    size_t len = 0;
    uint8_t *packed = coord_rdzv_pack(a, complete, &len);
    if (!packed) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory answering a rendezvous");
        return;
    }
    zt_rpc_reply_bytes(call, packed, len);
    zt_free(packed);
}

static void publish_rdzv(zt_coord *c, c_attempt *a, uint64_t now, bool ended)
{
    c_waiter **pp = &a->waiters;
    while (*pp) {
        c_waiter *w = *pp;
        if (ended) {
            zt_rpc_fail(
                w->call, ZT_RPC_FAILED_PRECONDITION,
                "attempt %lld ended (%s) while waiting for its rendezvous: stop this worker; the next heartbeat says what to run",
                (long long)a->id, zt_attempt_state_name(a->state));
        } else if (coord_rdzv_complete(a, w->wait)) {
            coord_rdzv_reply(a, w->call, true);
        } else if (now >= w->until_ns || zt_rpc_call_cancelled(w->call)) {
            coord_rdzv_reply(a, w->call, false);
        } else {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        zt_free(w);
        a->n_waiters--;
        c->n_waiters--;
    }
    a->rdzv_changed = false;
}

void coord_publish(zt_coord *c)
{
    for (size_t i = 0; i < c->n_agents; i++)
        if (c->agents[i]->desired_dirty) coord_agent_build_desired(c, c->agents[i]);
    uint64_t now = zt_now_ns();
    for (size_t i = 0; i < c->n_atts; i++)
        if (c->atts[i]->waiters) publish_rdzv(c, c->atts[i], now, false);
    for (size_t i = 0; i < c->n_grave; i++) {
        publish_rdzv(c, c->grave[i], now, true);
        coord_attempt_free(c->grave[i]);
    }
    c->n_grave = 0;
    size_t kept = 0;
    for (size_t i = 0; i < c->n_jobs; i++) {
        c_job *j = c->jobs[i];
        publish_job(c, j);
        if (j->done) {
            c_watcher *w = j->watchers;
            while (w) { /* publish_job finished them; defensive */
                c_watcher *n = w->next;
                zt_rpc_stream_finish(w->call, ZT_RPC_OK, NULL);
                zt_rpc_call_unref(w->call);
                zt_free(w);
                c->n_watchers--;
                w = n;
            }
            coord_job_free(j);
        } else {
            c->jobs[kept++] = j;
        }
    }
    c->n_jobs = kept;
}

void coord_end_watchers(zt_coord *c, c_job *j, zt_rpc_code code, const char *msg)
{
    for (c_watcher *w = j->watchers; w;) {
        c_watcher *n = w->next;
        zt_rpc_fail(w->call, code, "%s", msg);
        zt_rpc_call_unref(w->call);
        zt_free(w);
        w = n;
    }
    j->watchers = NULL;
    c->n_watchers -= j->n_watchers;
    j->n_watchers = 0;
}

void coord_fail_waiters(zt_coord *c, c_attempt *a, const char *msg)
{
    for (c_waiter *w = a->waiters; w;) {
        c_waiter *n = w->next;
        zt_rpc_fail(w->call, ZT_RPC_UNAVAILABLE, "%s", msg);
        zt_free(w);
        w = n;
    }
    a->waiters = NULL;
    c->n_waiters -= a->n_waiters;
    a->n_waiters = 0;
}

/* Drops jobs and attempts from memory (watchers and waiters are told msg). */
