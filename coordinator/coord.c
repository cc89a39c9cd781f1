/* zerotrain: the coordinator core — the live model, the state thread (one batch = one
 * transaction: queued operations, agent reports, timers, a scheduling pass; then the commit;
 * then what the batch changed is published to agents and watchers), recovery at start-up,
 * and the transitions of jobs and attempts with their restart policy. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/coord_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <jansson.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/utf8.h"
#include "coordinator/auth.h"
#include "coordinator/sched.h"

#define MAX_BATCH 512

/* ---- small helpers ------------------------------------------------------------------------ */

int64_t coord_now_ms(void)
{
    return zt_wall_ms();
}

/* A copy for the live model. Strings come from checked requests or from the store, where a
 * database written by an older zcoord may hold bytes that are not UTF-8: they are replaced
 * (replies must be valid protobuf strings). */
static char *dup_or_empty(const char *s)
{
    char *d = zt_strdup(s ? s : "");
    if (d) zt_utf8_clean(d, strlen(d));
    return d;
}

static void set_str(char **dst, const char *s)
{
    char *n = dup_or_empty(s);
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
    a->hostname = dup_or_empty("");
    a->address = dup_or_empty("");
    a->version = dup_or_empty("");
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

static void agent_remove(zt_coord *c, c_agent *a)
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

static void agent_event(zt_coord *c, c_agent *a, const char *from, const char *to,
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
    j->name = dup_or_empty(r->name);
    j->user = dup_or_empty(r->user);
    j->spec_json = dup_or_empty(r->spec_json);
    j->spec_hash = dup_or_empty(r->spec_hash);
    j->spec_dir = dup_or_empty(r->spec_dir);
    j->reason = dup_or_empty(r->reason);
    if (!j->name || !j->user || !j->spec_json || !j->spec_hash || !j->spec_dir || !j->reason) {
        zt_free(j->name);
        zt_free(j->user);
        zt_free(j->spec_json);
        zt_free(j->spec_hash);
        zt_free(j->spec_dir);
        zt_free(j->reason);
        zt_free(j);
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
    j->eligible_ms = r->eligible_ms; /* model_load turns it into eligible_ns */
    return j;
}

static void attempt_free(c_attempt *a)
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

static void events_free(c_job *j)
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

static void job_free(c_job *j)
{
    if (!j) return;
    events_free(j);
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
    set_str(&j->reason, reason);
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
static bool atts_add(zt_coord *c, c_attempt *a)
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

static void fail_waiters(zt_coord *c, c_attempt *a, const char *msg);

/* Attempts that ended in this batch: their rendezvous waiters are answered after the
 * commit, then they are freed. */
static void bury(zt_coord *c, c_attempt *a)
{
    if (c->n_grave == c->cap_grave) {
        size_t cap = c->cap_grave ? c->cap_grave * 2 : 16;
        c_attempt **n = zt_realloc(c->grave, cap * sizeof(*n));
        if (!n) { /* cannot defer: answer the waiters now */
            fail_waiters(c, a, "out of memory; retry");
            attempt_free(a);
            return;
        }
        c->grave = n;
        c->cap_grave = cap;
    }
    c->grave[c->n_grave++] = a;
}

static void save_rank(zt_coord *c, c_attempt *a, c_rank *rk)
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

static void attempt_set_state(zt_coord *c, c_attempt *a, zt_attempt_state to, const char *reason)
{
    zt_attempt_state from = a->state;
    a->state = to;
    set_str(&a->reason, reason);
    if (to == ZT_ATTEMPT_RUNNING && !a->started_ms) a->started_ms = coord_now_ms();
    if (zt_attempt_state_terminal(to)) a->ended_ms = coord_now_ms();
    save_attempt(c, a);
    coord_job_event(c, a->job, a->id, NULL, "attempt", zt_attempt_state_name(from),
                    zt_attempt_state_name(to), "attempt %d: %s", a->number, reason);
}

/* How the job of a failed attempt goes on (attempt_end). */
typedef enum {
    RETRY_NONE,     /* the job fails */
    RETRY_COUNTED,  /* a restart counted against max_restarts, after the backoff */
    RETRY_FALLBACK, /* at once, from an older checkpoint: the one resumed from became BAD
                       (resume_failed says why max_restarts does not count it) */
} retry_kind;

static void attempt_end(zt_coord *c, c_attempt *a, zt_attempt_state to, retry_kind retry,
                        const char *reason)
{
    c_job *j = a->job;
    attempt_set_state(c, a, to, reason);
    for (int r = 0; r < a->world_size; r++) {
        save_rank(c, a, &a->ranks[r]);
        coord_agent_mark_dirty(c, a->ranks[r].agent);
    }
    if (a->ranks[0].step > j->step) j->step = a->ranks[0].step;
    atts_remove(c, a);
    j->att = NULL;
    c->sched_dirty = true;
    bury(c, a);
    bool retryable = retry == RETRY_COUNTED;
    if (to == ZT_ATTEMPT_SUCCEEDED) {
        coord_job_set_state(c, j, ZT_JOB_COMPLETED, "all %d ranks exited 0", a->world_size);
    } else if (to == ZT_ATTEMPT_FAILED && retry == RETRY_FALLBACK) {
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

void coord_attempt_end(zt_coord *c, c_attempt *a, zt_attempt_state to, bool retryable,
                       const char *reason)
{
    attempt_end(c, a, to, retryable ? RETRY_COUNTED : RETRY_NONE, reason);
}

/* Marks busy[s] for each slot s of agent a that is in use: placed ranks of active attempts,
 * and workers of ended attempts that the agent still runs (being stopped). */
static void agent_busy_map(zt_coord *c, c_agent *a, bool *busy)
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
    agent_busy_map(c, a, busy);
    int n = 0;
    for (int s = 0; s < a->slots; s++)
        n += !busy[s];
    zt_free(busy);
    return n;
}

/* ---- agent reports (state thread) ---------------------------------------------------------- */

static const c_report *report_of(const c_agent *a, int64_t attempt_id, int rank)
{
    for (int i = 0; i < a->n_reports; i++)
        if (a->reports[i].attempt_id == attempt_id && a->reports[i].rank == rank)
            return &a->reports[i];
    return NULL;
}

static void attempt_check_done(zt_coord *c, c_attempt *a)
{
    int ok = 0;
    for (int r = 0; r < a->world_size; r++)
        ok += a->ranks[r].exited && a->ranks[r].exit_code == 0 && a->ranks[r].exit_signal == 0;
    if (ok == a->world_size)
        coord_attempt_end(c, a, ZT_ATTEMPT_SUCCEEDED, false, "every rank exited 0");
}

static void attempt_check_running(zt_coord *c, c_attempt *a)
{
    if (a->state != ZT_ATTEMPT_STARTING) return;
    for (int r = 0; r < a->world_size; r++)
        if (!a->ranks[r].seen && !a->ranks[r].exited) return;
    attempt_set_state(c, a, ZT_ATTEMPT_RUNNING, "every rank reported a live worker");
    a->progress_ns = zt_now_ns();
    if (a->job->state != ZT_JOB_RUNNING)
        coord_job_set_state(c, a->job, ZT_JOB_RUNNING, "all %d ranks of attempt %d are running",
                            a->world_size, a->number);
}

static void resume_failed(zt_coord *c, c_attempt *t, const c_report *rp, const char *agent,
                          const char *reason);

/* A worker of active attempt t ended (once per rank). While its agent is leaving, a failed
 * exit is recorded but does not end the attempt: the agent's departure does, with its own
 * reason (the workers were stopped because the agent stopped). */
static void rank_exited(zt_coord *c, c_agent *a, c_attempt *t, c_rank *rk, const c_report *rp,
                        bool leaving)
{
    if (rk->exited) return;
    rk->exited = true;
    rk->pid = rp->pid;
    rk->exit_code = rp->exit_code;
    rk->exit_signal = rp->exit_signal;
    if (rp->step > rk->step) rk->step = rp->step;
    char why[1200];
    zt_exit_class cls = zt_sched_classify_worker_exit(rp->exit_code, rp->exit_signal, rp->bad_ckpt,
                                                      why, sizeof(why));
    /* what the agent knows beyond the code (it refused to start the worker: which path) */
    size_t wl = strlen(why);
    if (rp->exit_reason[0] && wl + 3 < sizeof(why))
        snprintf(why + wl, sizeof(why) - wl, ": %s", rp->exit_reason);
    save_rank(c, t, rk);
    coord_job_event(c, t->job, t->id, a->name, "rank", "RUNNING", "EXITED",
                    "rank %d on %s (pid %d) %s", rk->rank, a->name, rk->pid, why);
    if (cls != ZT_EXIT_OK && leaving) {
        return;
    } else if (cls != ZT_EXIT_OK) {
        char reason[1400];
        snprintf(reason, sizeof(reason), "rank %d on %s (pid %d) %s", rk->rank, a->name, rk->pid,
                 why);
        if (cls == ZT_EXIT_BAD_CHECKPOINT)
            resume_failed(c, t, rp, a->name, reason);
        else
            coord_attempt_end(c, t, ZT_ATTEMPT_FAILED, cls == ZT_EXIT_RETRYABLE, reason);
    } else {
        attempt_check_done(c, t);
    }
}

/* Agent a is LOST (no heartbeat, or it stopped): every attempt with a rank there fails
 * (retryable) and nothing more is placed on it until it heartbeats or registers again. */
static void agent_lost(zt_coord *c, c_agent *a, const char *reason)
{
    a->state = ZT_AGENT_LOST;
    coord_agent_save(c, a);
    agent_event(c, a, "ALIVE", "LOST", reason);
    while (a->n_places > 0) { /* each end removes the attempt's places */
        c_attempt *t = a->places[0].att;
        char why[300];
        snprintf(why, sizeof(why), "agent %s lost (rank %d there): %s", a->name, a->places[0].rank,
                 reason);
        coord_attempt_end(c, t, ZT_ATTEMPT_FAILED, true, why);
    }
    c->sched_dirty = true;
}

static void process_agent_reports(zt_coord *c, c_agent *a)
{
    bool leaving = a->leaving;
    a->leaving = false;
    /* a worker of an ended attempt that the agent still ran may have exited or gone from the
     * report, freeing its slot (agent_busy_map): nothing else would wake the scheduler for a
     * job waiting on that slot */
    c->sched_dirty = true;
    if (a->revived) {
        a->revived = false;
        a->state = ZT_AGENT_ALIVE;
        coord_agent_save(c, a);
        agent_event(c, a, "LOST", "ALIVE", "heartbeats resumed");
        c->sched_dirty = true;
    }
    /* exits first: they may be missing from the latest report already */
    for (int i = 0; i < a->n_exits; i++) {
        const c_report *rp = &a->exits[i];
        c_attempt *t = coord_attempt_find(c, rp->attempt_id);
        if (t && rp->rank >= 0 && rp->rank < t->world_size && t->ranks[rp->rank].agent == a)
            rank_exited(c, a, t, &t->ranks[rp->rank], rp, leaving);
    }
    a->n_exits = 0;
    for (int i = 0; i < a->n_reports; i++) {
        const c_report *rp = &a->reports[i];
        c_attempt *t = coord_attempt_find(c, rp->attempt_id);
        if (!t || rp->rank < 0 || rp->rank >= t->world_size || t->ranks[rp->rank].agent != a)
            continue; /* a stale worker: not desired, the agent stops it */
        c_rank *rk = &t->ranks[rp->rank];
        rk->pid = rp->pid;
        rk->phase = rp->phase;
        if (rp->step > rk->step) rk->step = rp->step;
        rk->seq = rp->collective_seq;
        rk->loss = rp->loss;
        rk->tokens_per_s = rp->tokens_per_s;
        rk->memory_bytes = rp->memory_bytes;
        rk->peak_memory_bytes = rp->peak_memory_bytes;
        rk->started_ms = rp->started_ms;
        if (rp->phase == ZT_PHASE_EXITED) {
            rank_exited(c, a, t, rk, rp, leaving);
        } else if (!rk->seen) {
            rk->seen = true;
            save_rank(c, t, rk);
            attempt_check_running(c, t);
        }
    }
    if (leaving) {
        /* it stopped its workers and told us so: LOST now, not after the heartbeat timeout */
        a->n_reports = 0;
        if (a->state == ZT_AGENT_ALIVE)
            agent_lost(c, a, "agent stopped");
        else
            ZT_INFO("coord", "agent %s (LOST already) says it stopped", a->name);
        return;
    }
    /* a worker that was running and is no longer reported has vanished */
    for (int i = 0; i < a->n_places;) {
        c_attempt *t = a->places[i].att;
        int r = a->places[i].rank;
        c_rank *rk = &t->ranks[r];
        if (!rk->seen || rk->exited || report_of(a, t->id, r)) {
            i++;
            continue;
        }
        char reason[300];
        snprintf(
            reason, sizeof(reason),
            "rank %d on %s (pid %d) is no longer reported by its agent: the worker vanished (agent restarted?)",
            r, a->name, rk->pid);
        coord_attempt_end(c, t, ZT_ATTEMPT_FAILED, true, reason); /* removes t's places */
    }
}

/* ---- timers (state thread) ------------------------------------------------------------------- */

static void tick(zt_coord *c)
{
    uint64_t now = zt_now_ns();
    /* lost agents */
    for (size_t i = 0; i < c->n_agents; i++) {
        c_agent *a = c->agents[i];
        if (a->state != ZT_AGENT_ALIVE || a->revived) continue;
        uint64_t silent = now - a->last_seen_ns;
        if (silent <= (uint64_t)c->cfg.heartbeat_timeout_ms * 1000000ull) continue;
        char reason[200];
        snprintf(reason, sizeof(reason), "no heartbeat for %.1f s (timeout %.1f s)",
                 (double)silent * 1e-9, (double)c->cfg.heartbeat_timeout_ms / 1000.0);
        agent_lost(c, a, reason);
    }
    /* progress, hangs */
    for (size_t k = 0; k < c->n_atts; k++) {
        c_attempt *t = c->atts[k];
        c_job *j = t->job;
        int64_t sig = 0, max_step = 0;
        for (int r = 0; r < t->world_size; r++) {
            const c_rank *rk = &t->ranks[r];
            sig = sig * 31 + rk->step * 1000003 + rk->seq * 7 + rk->phase + (rk->seen ? 1 : 0);
            if (rk->step > max_step) max_step = rk->step;
        }
        if (sig != t->progress_sig || !t->progress_ns) {
            t->progress_sig = sig;
            t->progress_ns = now;
        } else if (now - t->progress_ns > (uint64_t)c->cfg.hang_timeout_ms * 1000000ull) {
            /* who stopped and what the others wait in, from their stall reports */
            char why[1024];
            zt_hang_rank *hr = zt_calloc((size_t)t->world_size, sizeof(*hr));
            size_t n = 0;
            if (hr) {
                for (int r = 0; r < t->world_size; r++) {
                    hr[r].rank = r;
                    hr[r].step = t->ranks[r].step;
                    hr[r].seq = t->ranks[r].seq;
                    hr[r].wait = t->ranks[r].wait;
                }
                n = zt_hang_describe(hr, t->world_size, why, sizeof(why));
                zt_free(hr);
            } else {
                n = (size_t)snprintf(why, sizeof(why), "hang");
            }
            if (n < sizeof(why))
                snprintf(why + n, sizeof(why) - n, " (no progress for %.1f s; hang timeout %.1f s)",
                         (double)(now - t->progress_ns) * 1e-9,
                         (double)c->cfg.hang_timeout_ms / 1000.0);
            coord_attempt_end(c, t, ZT_ATTEMPT_FAILED, true, why);
            k--;
            continue;
        }
        if (max_step > j->step) j->step = max_step;
        if (t->ranks[0].loss != 0) j->loss = t->ranks[0].loss;
        if (t->ranks[0].tokens_per_s > 0) j->tokens_per_s = t->ranks[0].tokens_per_s;
        if (!t->eta_ns0 && j->step > 0) {
            t->eta_ns0 = now;
            t->eta_step0 = j->step;
        } else if (t->eta_ns0 && j->step > t->eta_step0 && j->total_steps > j->step) {
            double rate = (double)(j->step - t->eta_step0) / ((double)(now - t->eta_ns0) * 1e-9);
            j->eta_s = rate > 0 ? (double)(j->total_steps - j->step) / rate : 0;
        }
        if (j->step != j->notified_step) j->progress_dirty = true;
    }
    /* restart backoffs that ran out */
    for (size_t i = 0; i < c->n_jobs; i++) {
        c_job *j = c->jobs[i];
        if (j->state == ZT_JOB_QUEUED && j->eligible_ns && j->eligible_ns <= now) {
            j->eligible_ns = 0;
            c->sched_dirty = true;
        }
    }
}

/* ---- scheduling (state thread) ------------------------------------------------------------- */

/* The committed, bad and partial checkpoints of a job, newest first (copied: the store's
 * strings live only during its callback). */
typedef struct ckpt_cand {
    char *path;
    int64_t id, step, attempt_id;
    int world_size, shards;
    zt_ckpt_state state;
} ckpt_cand;

typedef struct ckpt_list {
    ckpt_cand *v;
    size_t n, cap;
    bool failed;
} ckpt_list;

static void on_ckpt_cand(void *arg, const zt_ckpt_rec *r)
{
    ckpt_list *l = arg;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        ckpt_cand *v = zt_realloc(l->v, cap * sizeof(*v));
        if (!v) {
            l->failed = true;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    ckpt_cand *k = &l->v[l->n];
    if (!(k->path = zt_strdup(r->path))) {
        l->failed = true;
        return;
    }
    k->id = r->id;
    k->step = r->step;
    k->attempt_id = r->attempt_id;
    k->world_size = r->world_size;
    k->shards = r->shards;
    k->state = r->state;
    l->n++;
}

/* stat of dir/meta.json: 0, or the errno of the failure */
static int ckpt_meta_stat(const char *dir, struct stat *sb)
{
    char meta[1100];
    snprintf(meta, sizeof(meta), "%s/meta.json", dir);
    return stat(meta, sb) == 0 ? 0 : errno;
}

/* Whether the checkpoint directory dir still holds a complete checkpoint, as far as this
 * host can tell: false (why set) when meta.json is absent while the directory above it is
 * visible here — the checkpoint was deleted or never completed. When that parent is not
 * visible (the checkpoints live on a file system this host does not mount) or stat fails
 * otherwise, the store's word is taken: the worker checks the checkpoint again on load. */
static bool ckpt_dir_usable(const char *dir, char *why, size_t cap)
{
    char parent[1100];
    struct stat sb;
    int e = ckpt_meta_stat(dir, &sb);
    if (e == 0 || (e != ENOENT && e != ENOTDIR)) return true;
    snprintf(parent, sizeof(parent), "%s", dir);
    char *slash = strrchr(parent, '/');
    if (!slash || slash == parent) return true;
    *slash = '\0';
    if (stat(parent, &sb) != 0 || !S_ISDIR(sb.st_mode)) return true;
    if (stat(dir, &sb) == 0)
        snprintf(why, cap, "the directory has no meta.json (the checkpoint never completed)");
    else
        snprintf(why, cap, "the directory is gone (deleted)");
    return false;
}

/* Whether dir/meta.json is seen on this host (positive evidence only). */
static bool ckpt_meta_seen(const char *dir)
{
    struct stat sb;
    return ckpt_meta_stat(dir, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* A PARTIAL checkpoint that is complete on disk: rank 0 writes meta.json only once every
 * rank's shard is durable (and a re-saved step loses it first), so when it is seen here the
 * checkpoint is whole and only reports are missing — a node that died between its worker's
 * commit and its agent's report, while rank 0 had already pruned the older checkpoints. It
 * is recorded COMMITTED (with an event) and true is returned. k is PARTIAL. */
static bool ckpt_partial_complete(zt_coord *c, c_job *j, const ckpt_cand *k, int number)
{
    if (!ckpt_meta_seen(k->path)) return false;
    zt_err e = {0};
    bool changed = false;
    if (zt_store_ckpt_commit(c->store, k->id, coord_now_ms(), &changed, &e) != ZT_OK) {
        coord_db_failed(c, &e);
        return false;
    }
    coord_job_event(c, j, k->attempt_id, NULL, "checkpoint", "PARTIAL", "COMMITTED",
                    "step %lld at %s: %d of %d shard reports came, but meta.json is there, "
                    "so every shard was durable; used to resume attempt %d",
                    (long long)k->step, k->path, k->shards, k->world_size, number);
    return true;
}

/* The newest checkpoint of j whose directory is still complete (*path NULL when none): a
 * committed one, or a partial one complete on disk (ckpt_partial_complete). BAD ones (they
 * failed verification on load) are skipped. Committed ones found unusable are marked
 * DELETED, each with an event saying why; partial ones that are not complete are left as
 * they are. */
static void pick_resume(zt_coord *c, c_job *j, int number, char **path, int64_t *step)
{
    *path = NULL;
    *step = 0;
    ckpt_list l = {0};
    zt_err e = {0};
    if (zt_store_ckpts_list(c->store, j->id, true, false, on_ckpt_cand, &l, &e) != ZT_OK) {
        coord_db_failed(c, &e);
    } else if (l.failed) {
        zt_err_set(&e, ZT_ERR_NOMEM, "out of memory listing the checkpoints of job %lld",
                   (long long)j->id);
        coord_db_failed(c, &e);
    } else {
        for (size_t i = 0; i < l.n && !*path; i++) {
            ckpt_cand *k = &l.v[i];
            char why[128];
            if (k->state == ZT_CKPT_BAD) continue;
            if (k->state == ZT_CKPT_PARTIAL && !ckpt_partial_complete(c, j, k, number)) continue;
            if (k->state == ZT_CKPT_PARTIAL || ckpt_dir_usable(k->path, why, sizeof(why))) {
                *path = k->path;
                k->path = NULL;
                *step = k->step;
                continue;
            }
            int64_t id;
            zt_ckpt_state before;
            if (zt_store_ckpt_remove(c->store, j->id, k->attempt_id, k->step, k->path,
                                     k->world_size, coord_now_ms(), &id, &before, &e) != ZT_OK) {
                coord_db_failed(c, &e);
                break;
            }
            coord_job_event(c, j, k->attempt_id, NULL, "checkpoint", "COMMITTED", "DELETED",
                            "step %lld at %s: not used to resume attempt %d: %s",
                            (long long)k->step, k->path, number, why);
        }
    }
    for (size_t i = 0; i < l.n; i++)
        zt_free(l.v[i].path);
    zt_free(l.v);
}

/* Whether j has a checkpoint that pick_resume could resume from: a COMMITTED one whose
 * directory looks complete, or a PARTIAL one complete on disk. Marks nothing. A store error
 * fails the batch (and answers true). */
static bool ckpt_resume_left(zt_coord *c, c_job *j)
{
    ckpt_list l = {0};
    zt_err e = {0};
    bool left = false;
    if (zt_store_ckpts_list(c->store, j->id, true, false, on_ckpt_cand, &l, &e) != ZT_OK) {
        coord_db_failed(c, &e);
        left = true;
    } else if (l.failed) {
        zt_err_set(&e, ZT_ERR_NOMEM, "out of memory listing the checkpoints of job %lld",
                   (long long)j->id);
        coord_db_failed(c, &e);
        left = true;
    }
    for (size_t i = 0; i < l.n && !left; i++) {
        char why[128];
        if (l.v[i].state == ZT_CKPT_COMMITTED)
            left = ckpt_dir_usable(l.v[i].path, why, sizeof(why));
        else if (l.v[i].state == ZT_CKPT_PARTIAL)
            left = ckpt_meta_seen(l.v[i].path);
    }
    for (size_t i = 0; i < l.n; i++)
        zt_free(l.v[i].path);
    zt_free(l.v);
    return left;
}

/* A worker of attempt t exited 5: the checkpoint it was told to resume from failed
 * verification (rp names it and says why; an older zagent forwards neither, and then it is
 * the one the attempt resumed from). That checkpoint becomes BAD and the attempt fails.
 * The job then restarts at once from the newest older checkpoint, and max_restarts does not
 * count that restart: the budget is for crashes, and a corrupt file must not use it up. It
 * cannot loop either: each such restart turns one of the job's checkpoints BAD (pick_resume
 * never resumes from a BAD one), so there are at most as many in a row as the job has
 * checkpoints; a new one takes an attempt that loaded its checkpoint and ran, and such an
 * attempt ends done or with a counted restart. When no usable checkpoint
 * is left the job fails rather than start over from step 0 unnoticed; one that is not this
 * job's own (train.resume_from) has no older one to fall back on, so the job fails too.
 * Anything else (it was BAD or DELETED already, or the worker names a checkpoint other than
 * the one the attempt was given: a worker is believed only about that one) is an ordinary,
 * counted restart. */
static void resume_failed(zt_coord *c, c_attempt *t, const c_report *rp, const char *agent,
                          const char *reason)
{
    c_job *j = t->job;
    char dir[1024], given[1024], msg[4096]; /* the event and the reasons keep what fits */
    snprintf(given, sizeof(given), "%s", t->resume_path);
    snprintf(dir, sizeof(dir), "%s", rp->bad_ckpt[0] ? rp->bad_ckpt : given);
    for (size_t n = strlen(given); n > 1 && given[n - 1] == '/'; n--)
        given[n - 1] = '\0';
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--)
        dir[n - 1] = '\0';
    const char *what =
        rp->bad_ckpt_why[0]
            ? rp->bad_ckpt_why
            : "the worker exited with code 5; its agent does not forward what failed (an older zagent)";
    if (!dir[0]) {
        snprintf(
            msg, sizeof(msg),
            "%s; this attempt resumed from none of the job's checkpoints, so the damaged one is train.resume_from and no older checkpoint can replace it: repair or change train.resume_from",
            reason);
        attempt_end(c, t, ZT_ATTEMPT_FAILED, RETRY_NONE, msg);
        return;
    }
    if (given[0] && strcmp(dir, given) != 0) {
        snprintf(msg, sizeof(msg),
                 "%s, but this attempt was given %s: nothing is marked BAD; the worker found: %s",
                 reason, given, what);
        attempt_end(c, t, ZT_ATTEMPT_FAILED, RETRY_COUNTED, msg);
        return;
    }
    int64_t id = 0, step = 0;
    zt_ckpt_state before = 0;
    zt_err e = {0};
    if (zt_store_ckpt_mark_bad(c->store, j->id, dir, what, &id, &step, &before, &e) != ZT_OK) {
        coord_db_failed(c, &e);
        return;
    }
    if (before == ZT_CKPT_PARTIAL || before == ZT_CKPT_COMMITTED) {
        coord_job_event(c, j, t->id, agent, "checkpoint", zt_ckpt_state_name(before), "BAD",
                        "step %lld at %s failed verification when attempt %d resumed from it: %s",
                        (long long)step, dir, t->number, what);
        if (ckpt_resume_left(c, j)) {
            attempt_end(c, t, ZT_ATTEMPT_FAILED, RETRY_FALLBACK, reason);
        } else {
            snprintf(
                msg, sizeof(msg),
                "%s; the newest checkpoint (step %lld at %s) is corrupt and no older committed checkpoint is left, so the job does not start over from step 0 by itself (resubmit it for that); the worker found: %s",
                reason, (long long)step, dir, what);
            attempt_end(c, t, ZT_ATTEMPT_FAILED, RETRY_NONE, msg);
        }
    } else if (before == 0) {
        snprintf(
            msg, sizeof(msg),
            "%s; it is not one of this job's checkpoints (train.resume_from?), so no older checkpoint can replace it: repair or change it; the worker found: %s",
            reason, what);
        attempt_end(c, t, ZT_ATTEMPT_FAILED, RETRY_NONE, msg);
    } else {
        attempt_end(c, t, ZT_ATTEMPT_FAILED, RETRY_COUNTED, reason);
    }
}

static void on_attempt_number(void *arg, const zt_attempt_rec *r)
{
    *(int *)arg = r->number;
}

/* The number of j's next attempt: one more than its last one's. Attempts are numbered 1, 2,
 * ... in order; restarts from an older checkpoint after a BAD one are not counted in
 * j->restarts, so that is no guide. */
static int next_attempt_number(zt_coord *c, const c_job *j)
{
    int last = 0;
    zt_err e = {0};
    if (!j->attempt_id) return 1;
    if (zt_store_attempt_get(c->store, j->attempt_id, on_attempt_number, &last, &e) != ZT_OK ||
        last <= 0)
        return j->restarts + 1;
    return last + 1;
}

static void place_job(zt_coord *c, c_job *j, const zt_sched_slot *slots, c_agent **agents)
{
    c_attempt *a = zt_calloc(1, sizeof(*a));
    if (!a) return;
    a->ranks = zt_calloc((size_t)j->ranks, sizeof(*a->ranks));
    a->rdzv = zt_calloc((size_t)j->ranks, sizeof(*a->rdzv));
    a->rdzv_len = zt_calloc((size_t)j->ranks, sizeof(*a->rdzv_len));
    if (!a->ranks || !a->rdzv || !a->rdzv_len) {
        attempt_free(a);
        return;
    }
    a->job = j;
    a->number = next_attempt_number(c, j);
    a->state = ZT_ATTEMPT_STARTING;
    a->world_size = j->ranks;
    a->created_ms = coord_now_ms();
    char *resume = NULL;
    pick_resume(c, j, a->number, &resume, &a->resume_step);
    a->resume_path = resume ? resume : dup_or_empty("");
    char where[512];
    size_t n = 0;
    where[0] = '\0';
    for (int r = 0; r < j->ranks; r++) {
        c_rank *rk = &a->ranks[r];
        c_agent *ag = agents[slots[r].agent];
        rk->rank = r;
        rk->agent = ag;
        rk->local_rank = slots[r].local_rank;
        rk->slot = slots[r].slot;
        rk->device_index = ag->n_gpus > rk->slot ? ag->gpus[rk->slot].index : rk->slot;
        if (r == 0 || ag != a->ranks[r - 1].agent) {
            int last = r;
            while (last + 1 < j->ranks && agents[slots[last + 1].agent] == ag)
                last++;
            if (n < sizeof(where))
                n += (size_t)snprintf(where + n, sizeof(where) - n, "%s%s (rank%s %d%s%.0d)",
                                      r ? ", " : "", ag->name, last > r ? "s" : "", r,
                                      last > r ? "-" : "", last > r ? last : 0);
        }
        coord_agent_mark_dirty(c, ag);
    }
    zt_attempt_rec ar = {.job_id = j->id,
                         .number = a->number,
                         .state = a->state,
                         .reason = "placed",
                         .world_size = a->world_size,
                         .resume_path = a->resume_path,
                         .resume_step = a->resume_step,
                         .created_ms = a->created_ms};
    DB(c, zt_store_attempt_insert(c->store, &ar, &a->id, err_));
    a->reason = dup_or_empty("placed");
    for (int r = 0; r < j->ranks; r++)
        save_rank(c, a, &a->ranks[r]);
    if (!atts_add(c, a)) {
        attempt_free(a);
        zt_err e2;
        zt_err_set(&e2, ZT_ERR_NOMEM, "out of memory placing job %lld", (long long)j->id);
        coord_db_failed(c, &e2); /* roll the batch back: memory and store stay in step */
        return;
    }
    j->att = a;
    j->attempt_id = a->id;
    a->progress_ns = zt_now_ns();
    if (a->resume_path[0])
        coord_job_set_state(c, j, ZT_JOB_SCHEDULED,
                            "attempt %d placed on %s; resuming from %s (step %lld)", a->number,
                            where, a->resume_path, (long long)a->resume_step);
    else
        coord_job_set_state(c, j, ZT_JOB_SCHEDULED, "attempt %d placed on %s", a->number, where);
}

static void schedule(zt_coord *c)
{
    size_t nq = 0;
    for (size_t i = 0; i < c->n_jobs; i++)
        nq += c->jobs[i]->state == ZT_JOB_QUEUED && !c->jobs[i]->done;
    if (!nq) return;
    zt_sched_agent *sa = zt_calloc(c->n_agents ? c->n_agents : 1, sizeof(*sa));
    c_agent **amap = zt_calloc(c->n_agents ? c->n_agents : 1, sizeof(*amap));
    zt_sched_job *sj = zt_calloc(nq, sizeof(*sj));
    zt_sched_decision *d = zt_calloc(nq, sizeof(*d));
    c_job **jmap = zt_calloc(nq, sizeof(*jmap));
    bool ok = sa && amap && sj && d && jmap;
    size_t na = 0;
    for (size_t i = 0; ok && i < c->n_agents; i++) {
        c_agent *a = c->agents[i];
        if (a->state != ZT_AGENT_ALIVE || a->revived || a->slots <= 0) continue;
        sa[na].name = a->name;
        sa[na].device = a->device;
        sa[na].alive = true;
        sa[na].slots = a->slots;
        sa[na].busy = zt_calloc((size_t)a->slots, sizeof(bool));
        if (!sa[na].busy) {
            ok = false;
            break;
        }
        agent_busy_map(c, a, sa[na].busy);
        amap[na] = a;
        na++;
    }
    size_t nj = 0;
    uint64_t now = zt_now_ns();
    for (size_t i = 0; ok && i < c->n_jobs; i++) {
        c_job *j = c->jobs[i];
        if (j->state != ZT_JOB_QUEUED || j->done) continue;
        sj[nj].id = j->id;
        sj[nj].priority = j->priority;
        sj[nj].ranks = j->ranks;
        sj[nj].ranks_per_node = j->ranks_per_node;
        sj[nj].device = j->device;
        sj[nj].eligible = !j->eligible_ns || j->eligible_ns <= now;
        d[nj].ranks = zt_calloc((size_t)j->ranks, sizeof(zt_sched_slot));
        if (!d[nj].ranks) {
            ok = false;
            break;
        }
        jmap[nj] = j;
        nj++;
    }
    if (ok) {
        zt_sched_plan(sa, na, sj, nj, d);
        for (size_t i = 0; i < nj; i++) {
            c_job *j = jmap[i];
            if (d[i].placed) {
                place_job(c, j, d[i].ranks, amap);
            } else if (!sj[i].eligible) {
                snprintf(j->pending, sizeof(j->pending),
                         "restart backoff: attempt %d may start in %.1f s",
                         next_attempt_number(c, j), (double)(j->eligible_ns - now) * 1e-9);
            } else {
                snprintf(j->pending, sizeof(j->pending), "%s", d[i].reason);
            }
        }
    }
    for (size_t i = 0; i < nj; i++)
        zt_free(d ? d[i].ranks : NULL);
    for (size_t i = 0; i < na; i++)
        zt_free(sa[i].busy);
    zt_free(sa);
    zt_free(amap);
    zt_free(sj);
    zt_free(d);
    zt_free(jmap);
}

/* ---- publishing (after the commit) ---------------------------------------------------------- */

static void agent_build_desired(zt_coord *c, c_agent *a)
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
    events_free(j);
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

void coord_rdzv_reply(c_attempt *a, zt_rpc_call *call, bool complete)
{
    Zt__V1__RendezvousReply rep = ZT__V1__RENDEZVOUS_REPLY__INIT;
    Zt__V1__RendezvousEntry *e = zt_calloc((size_t)a->world_size, sizeof(*e));
    Zt__V1__RendezvousEntry **ep = zt_calloc((size_t)a->world_size, sizeof(*ep));
    if (!e || !ep) {
        zt_free(e);
        zt_free(ep);
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory answering a rendezvous");
        return;
    }
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
    zt_rpc_reply(call, &rep.base);
    zt_free(e);
    zt_free(ep);
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

static void publish(zt_coord *c)
{
    for (size_t i = 0; i < c->n_agents; i++)
        if (c->agents[i]->desired_dirty) agent_build_desired(c, c->agents[i]);
    uint64_t now = zt_now_ns();
    for (size_t i = 0; i < c->n_atts; i++)
        if (c->atts[i]->waiters) publish_rdzv(c, c->atts[i], now, false);
    for (size_t i = 0; i < c->n_grave; i++) {
        publish_rdzv(c, c->grave[i], now, true);
        attempt_free(c->grave[i]);
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
            job_free(j);
        } else {
            c->jobs[kept++] = j;
        }
    }
    c->n_jobs = kept;
}

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
    set_str(&a->hostname, r->hostname);
    set_str(&a->address, r->address);
    set_str(&a->version, r->version);
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
    a->reason = dup_or_empty(r->reason);
    a->world_size = r->world_size;
    a->resume_path = dup_or_empty(r->resume_path);
    a->resume_step = r->resume_step;
    a->created_ms = r->created_ms;
    a->started_ms = r->started_ms;
    a->ended_ms = r->ended_ms;
    a->ranks = zt_calloc((size_t)r->world_size, sizeof(*a->ranks));
    a->rdzv = zt_calloc((size_t)r->world_size, sizeof(*a->rdzv));
    a->rdzv_len = zt_calloc((size_t)r->world_size, sizeof(*a->rdzv_len));
    if (!a->ranks || !a->rdzv || !a->rdzv_len) {
        attempt_free(a);
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
static zt_status model_load(zt_coord *c, zt_err *err)
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
            attempt_free(a);
            continue;
        }
        a->job = j;
        if ((st = zt_store_ranks_list(c->store, a->id, on_load_rank, &L, err)) != ZT_OK ||
            (st = zt_store_rdzv_list(c->store, a->id, on_load_rdzv, &L, err)) != ZT_OK) {
            attempt_free(a);
            return st;
        }
        a->progress_ns = zt_now_ns();
        j->att = a;
        atts_add(c, a);
        for (int r = 0; r < a->world_size; r++)
            coord_agent_mark_dirty(c, a->ranks[r].agent);
    }
    c->sched_dirty = true;
    return ZT_OK;
}

static void end_watchers(zt_coord *c, c_job *j, zt_rpc_code code, const char *msg)
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

static void fail_waiters(zt_coord *c, c_attempt *a, const char *msg)
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
static void model_drop_jobs(zt_coord *c, const char *msg)
{
    for (size_t i = 0; i < c->n_atts; i++) {
        fail_waiters(c, c->atts[i], msg);
        attempt_free(c->atts[i]);
    }
    c->n_atts = 0;
    memset(c->att_hash, 0, c->att_buckets * sizeof(*c->att_hash));
    for (size_t i = 0; i < c->n_agents; i++)
        c->agents[i]->n_places = 0;
    for (size_t i = 0; i < c->n_grave; i++) {
        fail_waiters(c, c->grave[i], msg);
        attempt_free(c->grave[i]);
    }
    c->n_grave = 0;
    for (size_t i = 0; i < c->n_jobs; i++) {
        end_watchers(c, c->jobs[i], ZT_RPC_UNAVAILABLE, msg);
        job_free(c->jobs[i]);
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
static void model_reload(zt_coord *c)
{
    char msg[1400];
    snprintf(
        msg, sizeof(msg),
        "the coordinator could not write its database (%s); state was reloaded: reconnect and retry",
        zt_err_msg(&c->batch_err));
    model_drop_jobs(c, msg);
    /* agents that were never stored are forgotten; the others take their stored values */
    seen_ctx s = {0};
    zt_store_agents_list(c->store, on_agent_name, &s, NULL);
    for (size_t i = 0; i < c->n_agents;) {
        bool stored = false;
        for (size_t k = 0; k < s.n; k++)
            stored |= strcmp(s.names[k], c->agents[i]->name) == 0;
        if (!stored)
            agent_remove(c, c->agents[i]);
        else
            i++;
    }
    for (size_t k = 0; k < s.n; k++)
        zt_free(s.names[k]);
    zt_free(s.names);
    zt_err err = {0};
    if (model_load(c, &err) != ZT_OK)
        ZT_ERROR("coord", "reloading the state failed: %s", zt_err_msg(&err));
    for (size_t i = 0; i < c->n_agents; i++) {
        c->agents[i]->reports_changed = true;
        c->agents[i]->desired_dirty = true;
    }
}

/* ---- the state thread ---------------------------------------------------------------------- */

void coord_enqueue(zt_coord *c, c_op *op)
{
    op->next = NULL;
    pthread_mutex_lock(&c->qmu);
    if (c->stop) {
        pthread_mutex_unlock(&c->qmu);
        op->done(c, op, false);
        return;
    }
    if (c->q_tail)
        c->q_tail->next = op;
    else
        c->q_head = op;
    c->q_tail = op;
    pthread_cond_signal(&c->qcv);
    pthread_mutex_unlock(&c->qmu);
}

void coord_wake_reports(zt_coord *c)
{
    pthread_mutex_lock(&c->qmu);
    if (!c->reports_pending) {
        c->reports_pending = true;
        pthread_cond_signal(&c->qcv);
    }
    pthread_mutex_unlock(&c->qmu);
}

static void timespec_at_ns(struct timespec *ts, uint64_t delta_ns)
{
    clock_gettime(CLOCK_REALTIME, ts);
    uint64_t ns = (uint64_t)ts->tv_nsec + delta_ns;
    ts->tv_sec += (time_t)(ns / 1000000000ull);
    ts->tv_nsec = (long)(ns % 1000000000ull);
}

static void *state_main(void *arg)
{
    zt_coord *c = arg;
    uint64_t tick_ns = (uint64_t)c->cfg.tick_ms * 1000000ull;
    uint64_t next_tick = zt_now_ns() + tick_ns;
    for (;;) {
        pthread_mutex_lock(&c->qmu);
        while (!c->q_head && !c->reports_pending && !c->stop) {
            uint64_t now = zt_now_ns();
            if (now >= next_tick) break;
            struct timespec ts;
            timespec_at_ns(&ts, next_tick - now);
            pthread_cond_timedwait(&c->qcv, &c->qmu, &ts);
        }
        c_op *ops = c->q_head;
        int nops = 0;
        c_op *last = NULL;
        for (c_op *o = ops; o && nops < MAX_BATCH; o = o->next) {
            last = o;
            nops++;
        }
        if (last) {
            c->q_head = last->next;
            if (!c->q_head) c->q_tail = NULL;
            last->next = NULL;
        }
        bool reports = c->reports_pending;
        c->reports_pending = false;
        bool stopping = c->stop;
        pthread_mutex_unlock(&c->qmu);
        if (stopping && !ops) break;

        uint64_t now = zt_now_ns();
        bool do_tick = now >= next_tick;
        if (do_tick) next_tick = now + tick_ns;

        pthread_mutex_lock(&c->mu);
        c->batch_failed = false;
        zt_err_clear(&c->batch_err);
        zt_err berr = {0};
        if (zt_store_begin(c->store, &berr) != ZT_OK) coord_db_failed(c, &berr);
        if (!c->batch_failed) {
            for (c_op *o = ops; o; o = o->next)
                o->run(c, o);
            if (reports || do_tick) {
                for (size_t i = 0; i < c->n_agents; i++) {
                    c_agent *a = c->agents[i];
                    if (a->reports_changed || a->revived) {
                        a->reports_changed = false;
                        process_agent_reports(c, a);
                    }
                }
            }
            if (do_tick) tick(c);
            if (c->sched_dirty) {
                c->sched_dirty = false;
                schedule(c);
            }
        }
        pthread_mutex_unlock(&c->mu);

        bool committed = false;
        if (c->cfg.test_commit_delay_ms > 0 && (ops || reports))
            zt_sleep_ms(c->cfg.test_commit_delay_ms);
        if (!c->batch_failed) {
            zt_err cerr = {0};
                uint64_t t0 = zt_now_ns();
            if (zt_store_commit(c->store, &cerr) == ZT_OK)
                committed = true;
            else
                coord_db_failed(c, &cerr);
            coord_hist_observe(&c->commit_hist, zt_now_ns() - t0);
        }
        pthread_mutex_lock(&c->mu);
        if (committed) {
            publish(c);
        } else {
            ZT_ERROR("coord", "batch of %d operation(s) rolled back: %s", nops,
                     zt_err_msg(&c->batch_err));
            zt_store_rollback(c->store);
            model_reload(c);
        }
        coord_api_batch_end(c, committed);
        pthread_mutex_unlock(&c->mu);
        coord_logs_wake(c);
        for (c_op *o = ops; o;) {
            c_op *n = o->next;
            o->done(c, o, committed);
            o = n;
        }
    }
    return NULL;
}

/* ---- open / close --------------------------------------------------------------------------- */

static void set_defaults(zt_coord_config *cfg)
{
    if (cfg->heartbeat_interval_ms <= 0) cfg->heartbeat_interval_ms = 1000;
    if (cfg->heartbeat_timeout_ms <= 0) cfg->heartbeat_timeout_ms = 10000;
    if (cfg->hang_timeout_ms <= 0) cfg->hang_timeout_ms = 600000;
    if (cfg->restart_backoff_ms < 0) cfg->restart_backoff_ms = 2000;
    if (cfg->restart_backoff_max_ms <= 0) cfg->restart_backoff_max_ms = 300000;
    if (cfg->tick_ms <= 0) cfg->tick_ms = 100;
    if (cfg->metrics_max_points <= 0) cfg->metrics_max_points = 2000;
    if (cfg->logs_max_lines <= 0) cfg->logs_max_lines = 100000;
    if (cfg->max_log_streams <= 0) cfg->max_log_streams = 64;
    if (cfg->max_watchers <= 0) cfg->max_watchers = 1024;
    if (cfg->max_watchers_per_job <= 0) cfg->max_watchers_per_job = 64;
    if (cfg->max_rdzv_waiters <= 0) cfg->max_rdzv_waiters = 16384;
    if (cfg->max_rdzv_waiters_per_rank <= 0) cfg->max_rdzv_waiters_per_rank = 2;
    if (!cfg->version) cfg->version = "0";
}

zt_status zt_coord_open(zt_coord **out, const zt_coord_config *cfg, zt_err *err)
{
    *out = NULL;
    zt_coord *c = zt_calloc(1, sizeof(*c));
    if (!c) return zt_err_set(err, ZT_ERR_NOMEM, "coordinator: out of memory");
    c->cfg = *cfg;
    set_defaults(&c->cfg);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->qmu, NULL);
    pthread_cond_init(&c->qcv, NULL);
    pthread_mutex_init(&c->rmu, NULL);
    pthread_cond_init(&c->rcv, NULL);
    pthread_mutex_init(&c->lmu, NULL);
    pthread_cond_init(&c->lcv, NULL);
    pthread_mutex_init(&c->hsmu, NULL);
    c->agent_buckets = 4096;
    c->agent_hash = zt_calloc(c->agent_buckets, sizeof(*c->agent_hash));
    c->att_buckets = 4096;
    c->att_hash = zt_calloc(c->att_buckets, sizeof(*c->att_hash));
    c->started_ns = zt_now_ns();
    c->desired_seq = coord_now_ms() * 1000;
    zt_status st;
    if (!c->agent_hash || !c->att_hash) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "coordinator: out of memory");
        goto fail;
    }
    if ((st = zt_store_open(&c->store, c->cfg.db_path, false, err)) != ZT_OK) goto fail;
    if ((st = zt_store_open(&c->rstore, c->cfg.db_path, true, err)) != ZT_OK) goto fail;
    pthread_mutex_lock(&c->mu);
    st = model_load(c, err);
    for (size_t i = 0; i < c->n_agents; i++)
        if (c->agents[i]->desired_dirty) agent_build_desired(c, c->agents[i]);
    pthread_mutex_unlock(&c->mu);
    if (st != ZT_OK) goto fail;
    ZT_INFO("coord", "loaded %zu live job(s), %zu active attempt(s), %zu agent(s) from %s",
            c->n_jobs, c->n_atts, c->n_agents, c->cfg.db_path);
    if (pthread_create(&c->state_thread, NULL, state_main, c) != 0) {
        st = zt_err_set(err, ZT_ERR_INTERNAL, "coordinator: cannot start the state thread");
        goto fail;
    }
    if (pthread_create(&c->reader_thread, NULL, coord_reader_main, c) != 0) {
        pthread_mutex_lock(&c->qmu);
        c->stop = true;
        pthread_cond_signal(&c->qcv);
        pthread_mutex_unlock(&c->qmu);
        pthread_join(c->state_thread, NULL);
        st = zt_err_set(err, ZT_ERR_INTERNAL, "coordinator: cannot start the reader thread");
        goto fail;
    }
    atomic_store(&c->serving, true);
    *out = c;
    return ZT_OK;
fail:
    pthread_mutex_lock(&c->mu);
    model_drop_jobs(c, "shutting down");
    while (c->n_agents)
        agent_remove(c, c->agents[c->n_agents - 1]);
    pthread_mutex_unlock(&c->mu);
    zt_store_close(c->rstore);
    zt_store_close(c->store);
    zt_free(c->agent_hash);
    zt_free(c->att_hash);
    zt_free(c->agents);
    zt_free(c->jobs);
    zt_free(c->atts);
    zt_free(c);
    return st;
}

size_t zt_coord_methods(zt_coord *c, zt_rpc_method *methods, size_t cap)
{
    return coord_rpc_methods(c, methods, cap);
}

void zt_coord_stop_serving(zt_coord *c)
{
    if (!c || !atomic_exchange(&c->serving, false)) return;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n_jobs; i++)
        end_watchers(c, c->jobs[i], ZT_RPC_UNAVAILABLE,
                     "the coordinator is shutting down; watch again when it is back");
    for (size_t i = 0; i < c->n_atts; i++)
        fail_waiters(c, c->atts[i], "the coordinator is shutting down; retry the rendezvous");
    for (c_watcher *w = c->health_watchers; w;) {
        c_watcher *n = w->next;
        Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        r.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
        zt_rpc_stream_send(w->call, &r.base);
        zt_rpc_stream_finish(w->call, ZT_RPC_OK, NULL);
        zt_rpc_call_unref(w->call);
        zt_free(w);
        c->n_watchers--;
        w = n;
    }
    c->health_watchers = NULL;
    pthread_mutex_unlock(&c->mu);
    coord_logs_stop(c);
}

void zt_coord_drain(zt_coord *c)
{
    if (!c) return;
    zt_coord_stop_serving(c);
    pthread_mutex_lock(&c->qmu);
    bool was = c->stop;
    c->stop = true;
    pthread_cond_signal(&c->qcv);
    pthread_mutex_unlock(&c->qmu);
    if (was) return;
    pthread_join(c->state_thread, NULL);
    pthread_mutex_lock(&c->rmu);
    c->rstop = true;
    pthread_cond_signal(&c->rcv);
    pthread_mutex_unlock(&c->rmu);
    pthread_join(c->reader_thread, NULL);
    coord_logs_stop(c); /* waits for the log streams to end */
    pthread_mutex_lock(&c->mu);
    model_drop_jobs(c, "the coordinator is shutting down; retry when it is back");
    pthread_mutex_unlock(&c->mu);
}

void zt_coord_close(zt_coord *c)
{
    if (!c) return;
    zt_coord_drain(c);
    pthread_mutex_lock(&c->mu);
    while (c->n_agents)
        agent_remove(c, c->agents[c->n_agents - 1]);
    pthread_mutex_unlock(&c->mu);
    zt_free(c->grave);
    coord_api_close(c);
    zt_store_close(c->rstore);
    zt_store_close(c->store);
    zt_free(c->agent_hash);
    zt_free(c->att_hash);
    zt_free(c->agents);
    zt_free(c->jobs);
    zt_free(c->atts);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->qmu);
    pthread_cond_destroy(&c->qcv);
    pthread_mutex_destroy(&c->rmu);
    pthread_cond_destroy(&c->rcv);
    pthread_mutex_destroy(&c->lmu);
    pthread_cond_destroy(&c->lcv);
    pthread_mutex_destroy(&c->hsmu);
    zt_free(c);
}
