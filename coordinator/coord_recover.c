/* zerotrain: the model rebuilt from the database: at start-up (agents, live jobs and their
 * active attempts with ranks and rendezvous entries), and after a batch whose commit failed,
 * when memory is dropped and read again so that it follows the store. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/coord_int.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "coordinator/auth.h"

/* ---- loading and reloading ----------------------------------------------------------------- */

typedef struct load_ctx {
    zt_coord *c;
    zt_status st;
    c_attempt *att;
    zt_err err;
} load_ctx;

static void on_load_agent(void *arg, const zt_agent_rec *r)
{
    load_ctx *L = arg;
    zt_coord *c = L->c;
    c_agent *a = coord_agent_find(c, r->name);
    bool fresh = !a;
    if (!a && !(a = coord_agent_new(c, r->name))) {
        L->st = ZT_ERR_NOMEM;
        return;
    }
    coord_set_str(&a->hostname, r->hostname);
    coord_set_str(&a->address, r->address);
    coord_set_str(&a->version, r->version);
    a->device = r->device;
    a->slots = r->slots;
    a->incarnation = r->incarnation;
    a->state = r->state;
    a->registered_ms = r->registered_ms;
    snprintf(a->key_sha, sizeof(a->key_sha), "%s", r->key_sha256);
    if (c->cfg.auth) {
        zt_err se = {0};
        if (zt_auth_key_restore(c->cfg.auth, r->name, r->key_sha256, &se) != ZT_OK)
            ZT_WARN("coord", "%s: the agent registers again", zt_err_msg(&se));
    }
    if (fresh) {
        a->last_seen_ms = r->last_seen_ms;
        a->last_seen_ns = zt_now_ns(); /* a grace period to heartbeat again */
        json_error_t je;
        json_t *g = json_loads(r->gpus_json, 0, &je);
        if (g && json_is_array(g) && json_array_size(g) > 0) {
            a->gpus = zt_calloc(json_array_size(g), sizeof(*a->gpus));
            for (size_t i = 0; a->gpus && i < json_array_size(g); i++) {
                const char *gname =
                    json_string_value(json_object_get(json_array_get(g, i), "name"));
                json_t *o = json_array_get(g, i);
                a->gpus[i].index = (int)json_integer_value(json_object_get(o, "index"));
                snprintf(a->gpus[i].name, sizeof(a->gpus[i].name), "%s", gname ? gname : "");
                a->gpus[i].memory_total = json_integer_value(json_object_get(o, "memory_total"));
                a->n_gpus = (int)i + 1;
            }
        }
        json_decref(g);
    }
    a->desired_dirty = true;
}

static void on_load_job(void *arg, const zt_job_rec *r)
{
    load_ctx *L = arg;
    c_job *j = coord_job_from_rec(r);
    if (!j) {
        L->st = ZT_ERR_NOMEM;
        return;
    }
    coord_job_add(L->c, j);
}

static void on_load_attempt(void *arg, const zt_attempt_rec *r)
{
    load_ctx *L = arg;
    c_attempt *a = zt_calloc(1, sizeof(*a));
    if (!a) {
        L->st = ZT_ERR_NOMEM;
        return;
    }
    a->id = r->id;
    a->number = r->number;
    a->state = r->state;
    a->reason = coord_dup_clean(r->reason);
    a->world_size = r->world_size;
    a->resume_path = coord_dup_clean(r->resume_path);
    a->resume_step = r->resume_step;
    a->created_ms = r->created_ms;
    a->started_ms = r->started_ms;
    a->ended_ms = r->ended_ms;
    a->ranks = zt_calloc((size_t)r->world_size, sizeof(*a->ranks));
    a->rdzv = zt_calloc((size_t)r->world_size, sizeof(*a->rdzv));
    a->rdzv_len = zt_calloc((size_t)r->world_size, sizeof(*a->rdzv_len));
    if (!a->ranks || !a->rdzv || !a->rdzv_len) {
        coord_attempt_free(a);
        L->st = ZT_ERR_NOMEM;
        return;
    }
    for (int i = 0; i < a->world_size; i++)
        a->ranks[i].rank = i;
    L->att = a;
}

static void on_load_rank(void *arg, const zt_rank_rec *r)
{
    load_ctx *L = arg;
    c_attempt *a = L->att;
    if (r->rank < 0 || r->rank >= a->world_size) return;
    c_rank *rk = &a->ranks[r->rank];
    rk->agent = coord_agent_find(L->c, r->agent);
    rk->local_rank = r->local_rank;
    rk->device_index = r->device_index;
    rk->slot = r->device_index;
    if (rk->agent)
        for (int s = 0; s < rk->agent->n_gpus; s++)
            if (rk->agent->gpus[s].index == r->device_index) rk->slot = s;
    rk->pid = r->pid;
    rk->exited = r->exited;
    rk->exit_code = r->exit_code;
    rk->exit_signal = r->exit_signal;
    rk->step = r->last_step;
}

static void on_load_rdzv(void *arg, int rank, const void *value, size_t len)
{
    load_ctx *L = arg;
    c_attempt *a = L->att;
    if (rank < 0 || rank >= a->world_size) return;
    a->rdzv[rank] = zt_malloc(len ? len : 1);
    if (a->rdzv[rank]) {
        memcpy(a->rdzv[rank], value, len);
        a->rdzv_len[rank] = len;
    }
}

/* Loads agents and the live jobs with their active attempts from the store (mu held). */
zt_status coord_model_load(zt_coord *c, zt_err *err)
{
    load_ctx L = {.c = c, .st = ZT_OK};
    zt_status st = zt_store_agents_list(c->store, on_load_agent, &L, err);
    if (st != ZT_OK) return st;
    if ((st = zt_store_jobs_active(c->store, on_load_job, &L, err)) != ZT_OK) return st;
    if (L.st != ZT_OK)
        return zt_err_set(err, L.st, "out of memory loading the coordinator's state");
    int64_t now_ms = coord_now_ms();
    for (size_t i = 0; i < c->n_jobs; i++) {
        c_job *j = c->jobs[i];
        /* a restart backoff that was running when the coordinator stopped runs on (from the
         * wall clock, so at most --restart-backoff-max whatever the clock did) */
        if (j->state == ZT_JOB_QUEUED && j->eligible_ms > now_ms) {
            int64_t left = j->eligible_ms - now_ms;
            if (left > c->cfg.restart_backoff_max_ms) left = c->cfg.restart_backoff_max_ms;
            j->eligible_ns = zt_now_ns() + (uint64_t)left * 1000000ull;
            j->eligible_ms = now_ms + left;
        }
        zt_store_metrics_count(c->store, j->id, &j->metrics_count, NULL);
        zt_store_logs_count(c->store, j->id, &j->log_count, NULL);
        if (!j->attempt_id || j->state == ZT_JOB_QUEUED) continue;
        L.att = NULL;
        st = zt_store_attempt_get(c->store, j->attempt_id, on_load_attempt, &L, err);
        if (st == ZT_ERR_NOT_FOUND || !L.att) {
            continue;
        } else if (st != ZT_OK) {
            return st;
        }
        c_attempt *a = L.att;
        if (zt_attempt_state_terminal(a->state)) {
            coord_attempt_free(a);
            continue;
        }
        a->job = j;
        if ((st = zt_store_ranks_list(c->store, a->id, on_load_rank, &L, err)) != ZT_OK ||
            (st = zt_store_rdzv_list(c->store, a->id, on_load_rdzv, &L, err)) != ZT_OK) {
            coord_attempt_free(a);
            return st;
        }
        a->progress_ns = zt_now_ns();
        j->att = a;
        coord_atts_add(c, a);
        for (int r = 0; r < a->world_size; r++)
            coord_agent_mark_dirty(c, a->ranks[r].agent);
    }
    c->sched_dirty = true;
    return ZT_OK;
}

void coord_model_drop_jobs(zt_coord *c, const char *msg)
{
    for (size_t i = 0; i < c->n_atts; i++) {
        coord_fail_waiters(c, c->atts[i], msg);
        coord_attempt_free(c->atts[i]);
    }
    c->n_atts = 0;
    memset(c->att_hash, 0, c->att_buckets * sizeof(*c->att_hash));
    for (size_t i = 0; i < c->n_agents; i++)
        c->agents[i]->n_places = 0;
    for (size_t i = 0; i < c->n_grave; i++) {
        coord_fail_waiters(c, c->grave[i], msg);
        coord_attempt_free(c->grave[i]);
    }
    c->n_grave = 0;
    for (size_t i = 0; i < c->n_jobs; i++) {
        coord_end_watchers(c, c->jobs[i], ZT_RPC_UNAVAILABLE, msg);
        coord_job_free(c->jobs[i]);
    }
    c->n_jobs = 0;
}

typedef struct seen_ctx {
    char **names;
    size_t n;
} seen_ctx;

static void on_agent_name(void *arg, const zt_agent_rec *r)
{
    seen_ctx *s = arg;
    char **nn = zt_realloc(s->names, (s->n + 1) * sizeof(*nn));
    if (!nn) return;
    s->names = nn;
    s->names[s->n] = zt_strdup(r->name);
    if (s->names[s->n]) s->n++;
}

/* After a failed commit: memory follows the database again (mu held). */
void coord_model_reload(zt_coord *c)
{
    char msg[1400];
    snprintf(
        msg, sizeof(msg),
        "the coordinator could not write its database (%s); state was reloaded: reconnect and retry",
        zt_err_msg(&c->batch_err));
    coord_model_drop_jobs(c, msg);
    /* agents that were never stored are forgotten; the others take their stored values */
    seen_ctx s = {0};
    zt_store_agents_list(c->store, on_agent_name, &s, NULL);
    for (size_t i = 0; i < c->n_agents;) {
        bool stored = false;
        for (size_t k = 0; k < s.n; k++)
            stored |= strcmp(s.names[k], c->agents[i]->name) == 0;
        if (!stored)
            coord_agent_remove(c, c->agents[i]);
        else
            i++;
    }
    for (size_t k = 0; k < s.n; k++)
        zt_free(s.names[k]);
    zt_free(s.names);
    zt_err err = {0};
    if (coord_model_load(c, &err) != ZT_OK)
        ZT_ERROR("coord", "reloading the state failed: %s", zt_err_msg(&err));
    for (size_t i = 0; i < c->n_agents; i++) {
        c->agents[i]->reports_changed = true;
        c->agents[i]->desired_dirty = true;
    }
}
