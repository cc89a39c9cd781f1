/* zerotrain: the coordinator's live model — agents, jobs and active attempts in memory, each
 * change written to the store inside the state thread's batch — and the transitions of jobs
 * and attempts with their restart policy. Everything here runs with mu held. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/coord_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/utf8.h"
#include "coordinator/sched.h"

/* ---- small helpers ------------------------------------------------------------------------ */

int64_t coord_now_ms(void)
{
    return zt_wall_ms();
}

/* A copy for the live model. Strings come from checked requests or from the store, where a
 * database written by an older zcoord may hold bytes that are not UTF-8: they are replaced
 * (replies must be valid protobuf strings). */
char *coord_dup_clean(const char *s)
{
    char *d = zt_strdup(s ? s : "");
    if (d) zt_utf8_clean(d, strlen(d));
    return d;
}

void coord_set_str(char **dst, const char *s)
{
    char *n = coord_dup_clean(s);
    if (!n) return; /* keep the old text rather than lose it */
    zt_free(*dst);
    *dst = n;
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

void coord_db_failed(zt_coord *c, const zt_err *err)
{
    if (!c->batch_failed) {
        c->batch_failed = true;
        c->batch_err = *err;
    }
}

/* Checks a store call inside the batch. */
#define DB(c, call)                                                                                \
    do {                                                                                           \
        zt_err e_ = {0};                                                                           \
        zt_err *err_ = &e_;                                                                        \
        (void)err_;                                                                                \
        if ((call) != ZT_OK) coord_db_failed((c), &e_);                                            \
    } while (0)

/* ---- agents ------------------------------------------------------------------------------- */

c_agent *coord_agent_find(zt_coord *c, const char *name)
{
    for (c_agent *a = c->agent_hash[hash_str(name) % c->agent_buckets]; a; a = a->hnext)
        if (strcmp(a->name, name) == 0) return a;
    return NULL;
}

c_agent *coord_agent_new(zt_coord *c, const char *name)
{
    if (c->n_agents == c->cap_agents) {
        size_t cap = c->cap_agents ? c->cap_agents * 2 : 64;
        c_agent **n = zt_realloc(c->agents, cap * sizeof(*n));
        if (!n) return NULL;
        c->agents = n;
        c->cap_agents = cap;
    }
    c_agent *a = zt_calloc(1, sizeof(*a));
    if (!a || !(a->name = zt_strdup(name))) {
        zt_free(a);
        return NULL;
    }
    a->hostname = coord_dup_clean("");
    a->address = coord_dup_clean("");
    a->version = coord_dup_clean("");
    a->state = ZT_AGENT_ALIVE;
    a->desired_dirty = true;
    size_t b = hash_str(name) % c->agent_buckets;
    a->hnext = c->agent_hash[b];
    c->agent_hash[b] = a;
    c->agents[c->n_agents++] = a;
    return a;
}

static void agent_free(c_agent *a)
{
    if (!a) return;
    zt_free(a->name);
    zt_free(a->hostname);
    zt_free(a->address);
    zt_free(a->version);
    zt_free(a->gpus);
    zt_free(a->reports);
    zt_free(a->exits);
    zt_free(a->places);
    zt_free(a->desired);
    zt_free(a);
}

void coord_agent_remove(zt_coord *c, c_agent *a)
{
    c_agent **pp = &c->agent_hash[hash_str(a->name) % c->agent_buckets];
    while (*pp && *pp != a)
        pp = &(*pp)->hnext;
    if (*pp) *pp = a->hnext;
    for (size_t i = 0; i < c->n_agents; i++) {
        if (c->agents[i] == a) {
            memmove(&c->agents[i], &c->agents[i + 1], (c->n_agents - i - 1) * sizeof(*c->agents));
            c->n_agents--;
            break;
        }
    }
    agent_free(a);
}

void coord_agent_mark_dirty(zt_coord *c, c_agent *a)
{
    (void)c;
    if (a) a->desired_dirty = true;
}

/* gpus as stored: [{"index":0,"name":"H100","memory_total":85000000000}, ...] */
static char *gpus_json(const c_agent *a)
{
    size_t cap = 32 + (size_t)a->n_gpus * 160;
    char *s = zt_malloc(cap);
    if (!s) return NULL;
    size_t n = (size_t)snprintf(s, cap, "[");
    for (int i = 0; i < a->n_gpus; i++) {
        char name[64];
        size_t k = 0;
        for (const char *p = a->gpus[i].name; *p && k < sizeof(name) - 1; p++)
            if (*p != '"' && *p != '\\' && (unsigned char)*p >= 32) name[k++] = *p;
        name[k] = '\0';
        n += (size_t)snprintf(s + n, cap - n,
                              "%s{\"index\":%d,\"name\":\"%s\",\"memory_total\":%" PRId64 "}",
                              i ? "," : "", a->gpus[i].index, name, a->gpus[i].memory_total);
    }
    snprintf(s + n, cap - n, "]");
    return s;
}

void coord_agent_save(zt_coord *c, c_agent *a)
{
    char *g = gpus_json(a);
    zt_agent_rec r = {.name = a->name,
                      .hostname = a->hostname,
                      .address = a->address,
                      .version = a->version,
                      .device = a->device,
                      .slots = a->slots,
                      .gpus_json = g ? g : "[]",
                      .incarnation = a->incarnation,
                      .state = a->state,
                      .registered_ms = a->registered_ms,
                      .last_seen_ms = a->last_seen_ms,
                      .key_sha256 = a->key_sha};
    DB(c, zt_store_agent_save(c->store, &r, err_));
    zt_free(g);
}

void coord_agent_event(zt_coord *c, c_agent *a, const char *from, const char *to,
                       const char *reason)
{
    zt_event_rec e = {.time_ms = coord_now_ms(),
                      .agent = a->name,
                      .kind = "agent",
                      .from_state = from,
                      .to_state = to,
                      .reason = reason};
    DB(c, zt_store_event_add(c->store, &e, NULL, err_));
    ZT_INFO("coord", "agent %s: %s -> %s: %s", a->name, from, to, reason);
}

/* ---- jobs --------------------------------------------------------------------------------- */

c_job *coord_job_find(zt_coord *c, int64_t id)
{
    size_t lo = 0, hi = c->n_jobs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->jobs[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->n_jobs && c->jobs[lo]->id == id ? c->jobs[lo] : NULL;
}

void coord_job_add(zt_coord *c, c_job *j)
{
    if (c->n_jobs == c->cap_jobs) {
        size_t cap = c->cap_jobs ? c->cap_jobs * 2 : 64;
        c_job **n = zt_realloc(c->jobs, cap * sizeof(*n));
        if (!n) {
            ZT_ERROR("coord", "out of memory tracking job %lld", (long long)j->id);
            return;
        }
        c->jobs = n;
        c->cap_jobs = cap;
    }
    size_t i = c->n_jobs;
    while (i > 0 && c->jobs[i - 1]->id > j->id)
        i--;
    memmove(&c->jobs[i + 1], &c->jobs[i], (c->n_jobs - i) * sizeof(*c->jobs));
    c->jobs[i] = j;
    c->n_jobs++;
}

c_job *coord_job_from_rec(const zt_job_rec *r)
{
    c_job *j = zt_calloc(1, sizeof(*j));
    if (!j) return NULL;
    j->id = r->id;
    j->name = coord_dup_clean(r->name);
    j->user = coord_dup_clean(r->user);
    j->spec_json = coord_dup_clean(r->spec_json);
    j->spec_hash = coord_dup_clean(r->spec_hash);
    j->spec_dir = coord_dup_clean(r->spec_dir);
    j->reason = coord_dup_clean(r->reason);
    if (!j->name || !j->user || !j->spec_json || !j->spec_hash || !j->spec_dir || !j->reason) {
        coord_job_free(j);
        return NULL;
    }
    j->state = r->state;
    j->pub_state = r->state;
    j->priority = r->priority;
    j->ranks = r->ranks;
    j->ranks_per_node = r->ranks_per_node;
    j->device = r->device;
    j->max_restarts = r->max_restarts;
    j->restarts = r->restarts;
    j->total_steps = r->total_steps;
    j->last_step = r->last_step;
    j->step = r->last_step;
    j->notified_step = r->last_step;
    j->submitted_ms = r->submitted_ms;
    j->started_ms = r->started_ms;
    j->ended_ms = r->ended_ms;
    j->attempt_id = r->attempt_id;
    j->metrics_stride = r->metrics_stride > 0 ? r->metrics_stride : 1;
    j->eligible_ms = r->eligible_ms; /* coord_model_load turns it into eligible_ns */
    return j;
}

void coord_attempt_free(c_attempt *a)
{
    if (!a) return;
    zt_free(a->reason);
    zt_free(a->resume_path);
    zt_free(a->ranks);
    if (a->rdzv)
        for (int i = 0; i < a->world_size; i++)
            zt_free(a->rdzv[i]);
    zt_free(a->rdzv);
    zt_free(a->rdzv_len);
    zt_free(a);
}

void coord_job_events_free(c_job *j)
{
    for (c_event *e = j->events; e;) {
        c_event *n = e->next;
        zt_free((char *)e->rec.agent);
        zt_free((char *)e->rec.kind);
        zt_free((char *)e->rec.from_state);
        zt_free((char *)e->rec.to_state);
        zt_free((char *)e->rec.reason);
        zt_free(e);
        e = n;
    }
    j->events = j->events_tail = NULL;
}

void coord_job_free(c_job *j)
{
    if (!j) return;
    coord_job_events_free(j);
    zt_free(j->name);
    zt_free(j->user);
    zt_free(j->spec_json);
    zt_free(j->spec_hash);
    zt_free(j->spec_dir);
    zt_free(j->reason);
    zt_free(j->metrics_kv);
    zt_free(j);
}

void coord_save_job(zt_coord *c, c_job *j)
{
    if (j->step > j->last_step) j->last_step = j->step;
    zt_job_rec r = {.id = j->id,
                    .state = j->state,
                    .reason = j->reason,
                    .restarts = j->restarts,
                    .last_step = j->last_step,
                    .started_ms = j->started_ms,
                    .ended_ms = j->ended_ms,
                    .attempt_id = j->attempt_id,
                    .metrics_stride = j->metrics_stride,
                    .eligible_ms = j->eligible_ns ? j->eligible_ms : 0};
    DB(c, zt_store_job_save(c->store, &r, err_));
}

void coord_job_event(zt_coord *c, c_job *j, int64_t attempt_id, const char *agent, const char *kind,
                     const char *from, const char *to, const char *fmt, ...)
{
    char reason[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    zt_utf8_trim_partial(reason); /* a long path may be cut: never mid-character */
    int64_t now = coord_now_ms();
    zt_event_rec e = {.time_ms = now,
                      .job_id = j->id,
                      .attempt_id = attempt_id,
                      .agent = agent,
                      .kind = kind,
                      .from_state = from,
                      .to_state = to,
                      .reason = reason};
    int64_t id = 0;
    DB(c, zt_store_event_add(c->store, &e, &id, err_));
    /* the same change as a line of `zctl logs` */
    char line[1400], change[64];
    if (from && from[0])
        snprintf(change, sizeof(change), "%s -> %s", from, to);
    else
        snprintf(change, sizeof(change), "%s", to);
    if (attempt_id && strcmp(kind, "job") != 0)
        snprintf(line, sizeof(line), "[%s, attempt %lld] %s: %s", kind, (long long)attempt_id,
                 change, reason);
    else
        snprintf(line, sizeof(line), "[%s] %s: %s", kind, change, reason);
    zt_utf8_trim_partial(line);
    zt_log_rec l = {.time_ms = now,
                    .job_id = j->id,
                    .attempt_id = attempt_id,
                    .rank = -1,
                    .source = ZT_LOG_EVENT,
                    .text = line};
    DB(c, zt_store_log_add(c->store, &l, &l.id, err_));
    coord_api_log(c, &l);
    j->log_count++;
    ZT_INFO("coord", "job %lld: %s", (long long)j->id, line);
    c_event *ev = zt_calloc(1, sizeof(*ev));
    if (ev) {
        ev->rec = e;
        ev->rec.id = id;
        ev->rec.agent = agent ? zt_strdup(agent) : NULL;
        ev->rec.kind = zt_strdup(kind);
        ev->rec.from_state = zt_strdup(from);
        ev->rec.to_state = zt_strdup(to);
        ev->rec.reason = zt_strdup(reason);
        if (j->events_tail)
            j->events_tail->next = ev;
        else
            j->events = ev;
        j->events_tail = ev;
    }
}

void coord_job_set_state(zt_coord *c, c_job *j, zt_job_state to, const char *fmt, ...)
{
    char reason[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    zt_utf8_trim_partial(reason);
    zt_job_state from = j->state;
    j->state = to;
    coord_set_str(&j->reason, reason);
    int64_t now = coord_now_ms();
    if (to == ZT_JOB_RUNNING && !j->started_ms) j->started_ms = now;
    if (zt_job_state_terminal(to)) {
        j->ended_ms = now;
        j->done = true;
        j->eta_s = 0;
    }
    if (to != ZT_JOB_QUEUED) j->pending[0] = '\0';
    coord_save_job(c, j);
    coord_job_event(c, j, j->attempt_id, NULL, "job", zt_job_state_name(from),
                    zt_job_state_name(to), "%s", reason);
}

static void place_add(c_agent *ag, c_attempt *a, int rank)
{
    if (ag->n_places == ag->cap_places) {
        int cap = ag->cap_places ? ag->cap_places * 2 : 4;
        c_place *p = zt_realloc(ag->places, (size_t)cap * sizeof(*p));
        if (!p) {
            ZT_ERROR("coord", "out of memory indexing rank %d of attempt %lld on %s", rank,
                     (long long)a->id, ag->name);
            return;
        }
        ag->places = p;
        ag->cap_places = cap;
    }
    ag->places[ag->n_places].att = a;
    ag->places[ag->n_places].rank = rank;
    ag->n_places++;
}

static void place_remove(c_agent *ag, const c_attempt *a)
{
    int k = 0;
    for (int i = 0; i < ag->n_places; i++)
        if (ag->places[i].att != a) ag->places[k++] = ag->places[i];
    ag->n_places = k;
}

static void atts_remove(zt_coord *c, c_attempt *a)
{
    for (size_t i = 0; i < c->n_atts; i++) {
        if (c->atts[i] == a) {
            memmove(&c->atts[i], &c->atts[i + 1], (c->n_atts - i - 1) * sizeof(*c->atts));
            c->n_atts--;
            break;
        }
    }
    c_attempt **pp = &c->att_hash[(uint64_t)a->id % c->att_buckets];
    while (*pp && *pp != a)
        pp = &(*pp)->hnext;
    if (*pp) *pp = a->hnext;
    a->hnext = NULL;
    for (int r = 0; r < a->world_size; r++)
        if (a->ranks[r].agent) place_remove(a->ranks[r].agent, a);
}

/* Makes a active: listed, hashed by id, and indexed on the agents of its ranks. */
bool coord_atts_add(zt_coord *c, c_attempt *a)
{
    if (c->n_atts == c->cap_atts) {
        size_t cap = c->cap_atts ? c->cap_atts * 2 : 32;
        c_attempt **n = zt_realloc(c->atts, cap * sizeof(*n));
        if (!n) return false;
        c->atts = n;
        c->cap_atts = cap;
    }
    c->atts[c->n_atts++] = a;
    size_t b = (uint64_t)a->id % c->att_buckets;
    a->hnext = c->att_hash[b];
    c->att_hash[b] = a;
    for (int r = 0; r < a->world_size; r++)
        if (a->ranks[r].agent) place_add(a->ranks[r].agent, a, r);
    return true;
}

c_attempt *coord_attempt_find(zt_coord *c, int64_t id)
{
    for (c_attempt *a = c->att_hash[(uint64_t)id % c->att_buckets]; a; a = a->hnext)
        if (a->id == id) return a;
    return NULL;
}

/* Attempts that ended in this batch: their rendezvous waiters are answered after the
 * commit, then they are freed. */
static void bury(zt_coord *c, c_attempt *a)
{
    if (c->n_grave == c->cap_grave) {
        size_t cap = c->cap_grave ? c->cap_grave * 2 : 16;
        c_attempt **n = zt_realloc(c->grave, cap * sizeof(*n));
        if (!n) { /* cannot defer: answer the waiters now */
            coord_fail_waiters(c, a, "out of memory; retry");
            coord_attempt_free(a);
            return;
        }
        c->grave = n;
        c->cap_grave = cap;
    }
    c->grave[c->n_grave++] = a;
}

void coord_rank_save(zt_coord *c, c_attempt *a, c_rank *rk)
{
    zt_rank_rec r = {.attempt_id = a->id,
                     .rank = rk->rank,
                     .agent = rk->agent ? rk->agent->name : "",
                     .local_rank = rk->local_rank,
                     .device_index = rk->device_index,
                     .pid = rk->pid,
                     .exited = rk->exited,
                     .exit_code = rk->exit_code,
                     .exit_signal = rk->exit_signal,
                     .last_step = rk->step};
    DB(c, zt_store_rank_save(c->store, &r, err_));
}

static void save_attempt(zt_coord *c, c_attempt *a)
{
    zt_attempt_rec r = {.id = a->id,
                        .state = a->state,
                        .reason = a->reason,
                        .started_ms = a->started_ms,
                        .ended_ms = a->ended_ms};
    DB(c, zt_store_attempt_save(c->store, &r, err_));
}

void coord_attempt_set_state(zt_coord *c, c_attempt *a, zt_attempt_state to, const char *reason)
{
    zt_attempt_state from = a->state;
    a->state = to;
    coord_set_str(&a->reason, reason);
    if (to == ZT_ATTEMPT_RUNNING && !a->started_ms) a->started_ms = coord_now_ms();
    if (zt_attempt_state_terminal(to)) a->ended_ms = coord_now_ms();
    save_attempt(c, a);
    coord_job_event(c, a->job, a->id, NULL, "attempt", zt_attempt_state_name(from),
                    zt_attempt_state_name(to), "attempt %d: %s", a->number, reason);
}

void coord_attempt_end(zt_coord *c, c_attempt *a, zt_attempt_state to, c_retry retry,
                       const char *reason)
{
    c_job *j = a->job;
    coord_attempt_set_state(c, a, to, reason);
    for (int r = 0; r < a->world_size; r++) {
        coord_rank_save(c, a, &a->ranks[r]);
        coord_agent_mark_dirty(c, a->ranks[r].agent);
    }
    if (a->ranks[0].step > j->step) j->step = a->ranks[0].step;
    atts_remove(c, a);
    j->att = NULL;
    c->sched_dirty = true;
    bury(c, a);
    bool retryable = retry == COORD_RETRY_COUNTED;
    if (to == ZT_ATTEMPT_SUCCEEDED) {
        coord_job_set_state(c, j, ZT_JOB_COMPLETED, "all %d ranks exited 0", a->world_size);
    } else if (to == ZT_ATTEMPT_FAILED && retry == COORD_RETRY_FALLBACK) {
        j->eligible_ns = 0;
        j->eligible_ms = 0;
        coord_job_set_state(
            c, j, ZT_JOB_QUEUED,
            "restarting from the newest older checkpoint (not counted against max_restarts: %d of %d used): attempt %d failed: %s",
            j->restarts, j->max_restarts, a->number, reason);
    } else if (to == ZT_ATTEMPT_FAILED) {
        if (retryable && j->restarts < j->max_restarts) {
            j->restarts++;
            int64_t delay = zt_sched_backoff_ms(c->cfg.restart_backoff_ms,
                                                c->cfg.restart_backoff_max_ms, j->restarts);
            j->eligible_ns = zt_now_ns() + (uint64_t)delay * 1000000ull;
            j->eligible_ms = coord_now_ms() + delay; /* stored with the state below */
            coord_job_set_state(
                c, j, ZT_JOB_QUEUED,
                "restart %d of %d in %.1f s, from the newest committed checkpoint: attempt %d failed: %s",
                j->restarts, j->max_restarts, (double)delay / 1000.0, a->number, reason);
        } else if (retryable) {
            coord_job_set_state(c, j, ZT_JOB_FAILED,
                                "attempt %d failed: %s; no restarts left (max_restarts=%d)",
                                a->number, reason, j->max_restarts);
        } else {
            coord_job_set_state(c, j, ZT_JOB_FAILED, "attempt %d failed: %s", a->number, reason);
        }
    }
}

/* Marks busy[s] for each slot s of agent a that is in use: placed ranks of active attempts,
 * and workers of ended attempts that the agent still runs (being stopped). */
void coord_agent_busy_map(zt_coord *c, c_agent *a, bool *busy)
{
    memset(busy, 0, (size_t)a->slots * sizeof(*busy));
    for (int i = 0; i < a->n_places; i++) {
        int slot = a->places[i].att->ranks[a->places[i].rank].slot;
        if (slot >= 0 && slot < a->slots) busy[slot] = true;
    }
    for (int i = 0; i < a->n_reports; i++) {
        const c_report *rp = &a->reports[i];
        if (rp->phase == ZT_PHASE_EXITED || coord_attempt_find(c, rp->attempt_id)) continue;
        for (int s = 0; s < a->slots; s++) {
            int dev = a->n_gpus > s ? a->gpus[s].index : s;
            if (dev == rp->device_index) {
                busy[s] = true;
                break;
            }
        }
    }
}

int coord_agent_free_slots(zt_coord *c, c_agent *a)
{
    if (a->state != ZT_AGENT_ALIVE || a->slots <= 0) return 0;
    bool *busy = zt_calloc((size_t)a->slots, sizeof(*busy));
    if (!busy) return 0;
    coord_agent_busy_map(c, a, busy);
    int n = 0;
    for (int s = 0; s < a->slots; s++)
        n += !busy[s];
    zt_free(busy);
    return n;
}
