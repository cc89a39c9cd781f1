/* zerotrain: what the state thread does inside a batch besides the queued operations: the
 * agents' reports (workers that started, exited or vanished; agents lost), the timers (hangs,
 * progress, restart backoffs) and the scheduling pass with the checkpoint to resume from. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/coord_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "coordinator/sched.h"

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
        coord_attempt_end(c, a, ZT_ATTEMPT_SUCCEEDED, COORD_RETRY_NONE, "every rank exited 0");
}

static void attempt_check_running(zt_coord *c, c_attempt *a)
{
    if (a->state != ZT_ATTEMPT_STARTING) return;
    for (int r = 0; r < a->world_size; r++)
        if (!a->ranks[r].seen && !a->ranks[r].exited) return;
    coord_attempt_set_state(c, a, ZT_ATTEMPT_RUNNING, "every rank reported a live worker");
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
    coord_rank_save(c, t, rk);
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
            coord_attempt_end(c, t, ZT_ATTEMPT_FAILED,
                              cls == ZT_EXIT_RETRYABLE ? COORD_RETRY_COUNTED : COORD_RETRY_NONE,
                              reason);
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
    coord_agent_event(c, a, "ALIVE", "LOST", reason);
    while (a->n_places > 0) { /* each end removes the attempt's places */
        c_attempt *t = a->places[0].att;
        char why[300];
        snprintf(why, sizeof(why), "agent %s lost (rank %d there): %s", a->name, a->places[0].rank,
                 reason);
        coord_attempt_end(c, t, ZT_ATTEMPT_FAILED, COORD_RETRY_COUNTED, why);
    }
    c->sched_dirty = true;
}

void coord_agent_reports(zt_coord *c, c_agent *a)
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
        coord_agent_event(c, a, "LOST", "ALIVE", "heartbeats resumed");
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
            coord_rank_save(c, t, rk);
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
        coord_attempt_end(c, t, ZT_ATTEMPT_FAILED, COORD_RETRY_COUNTED,
                          reason); /* removes t's places */
    }
}

/* ---- timers (state thread) ------------------------------------------------------------------- */

void coord_tick(zt_coord *c)
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
            coord_attempt_end(c, t, ZT_ATTEMPT_FAILED, COORD_RETRY_COUNTED, why);
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
        coord_attempt_end(c, t, ZT_ATTEMPT_FAILED, COORD_RETRY_NONE, msg);
        return;
    }
    if (given[0] && strcmp(dir, given) != 0) {
        snprintf(msg, sizeof(msg),
                 "%s, but this attempt was given %s: nothing is marked BAD; the worker found: %s",
                 reason, given, what);
        coord_attempt_end(c, t, ZT_ATTEMPT_FAILED, COORD_RETRY_COUNTED, msg);
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
            coord_attempt_end(c, t, ZT_ATTEMPT_FAILED, COORD_RETRY_FALLBACK, reason);
        } else {
            snprintf(
                msg, sizeof(msg),
                "%s; the newest checkpoint (step %lld at %s) is corrupt and no older committed checkpoint is left, so the job does not start over from step 0 by itself (resubmit it for that); the worker found: %s",
                reason, (long long)step, dir, what);
            coord_attempt_end(c, t, ZT_ATTEMPT_FAILED, COORD_RETRY_NONE, msg);
        }
    } else if (before == 0) {
        snprintf(
            msg, sizeof(msg),
            "%s; it is not one of this job's checkpoints (train.resume_from?), so no older checkpoint can replace it: repair or change it; the worker found: %s",
            reason, what);
        coord_attempt_end(c, t, ZT_ATTEMPT_FAILED, COORD_RETRY_NONE, msg);
    } else {
        coord_attempt_end(c, t, ZT_ATTEMPT_FAILED, COORD_RETRY_COUNTED, reason);
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
        coord_attempt_free(a);
        return;
    }
    a->job = j;
    a->number = next_attempt_number(c, j);
    a->state = ZT_ATTEMPT_STARTING;
    a->world_size = j->ranks;
    a->created_ms = coord_now_ms();
    char *resume = NULL;
    pick_resume(c, j, a->number, &resume, &a->resume_step);
    a->resume_path = resume ? resume : coord_dup_clean("");
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
    zt_err e = {0};
    if (zt_store_attempt_insert(c->store, &ar, &a->id, &e) != ZT_OK) coord_db_failed(c, &e);
    a->reason = coord_dup_clean("placed");
    for (int r = 0; r < j->ranks; r++)
        coord_rank_save(c, a, &a->ranks[r]);
    if (!coord_atts_add(c, a)) {
        coord_attempt_free(a);
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

void coord_schedule(zt_coord *c)
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
        coord_agent_busy_map(c, a, sa[na].busy);
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
