/* zerotrain: gang placement and the restart policy (see sched.h). */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/sched.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/device.h"

static const char *device_name(int device)
{
    return zt_device_name((zt_device)device);
}

static int free_slots(const zt_sched_agent *a)
{
    if (!a->alive) return 0;
    int n = 0;
    for (int i = 0; i < a->slots; i++)
        n += !a->busy[i];
    return n;
}

typedef struct {
    int idx;
    int free;
} cand;

static int cmp_cand(const void *x, const void *y)
{
    const cand *a = x, *b = y;
    if (a->free != b->free) return b->free - a->free; /* most free first */
    return a->idx - b->idx;
}

static int cmp_order(const void *x, const void *y, const zt_sched_job *jobs)
{
    const zt_sched_job *a = &jobs[*(const size_t *)x], *b = &jobs[*(const size_t *)y];
    if (a->priority != b->priority) return a->priority > b->priority ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* qsort has no context argument in C11: a small insertion sort is enough here (the queue
 * is sorted already but for new arrivals). */
static void sort_order(size_t *order, size_t n, const zt_sched_job *jobs)
{
    for (size_t i = 1; i < n; i++) {
        size_t v = order[i];
        size_t j = i;
        while (j > 0 && cmp_order(&order[j - 1], &v, jobs) > 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
}

/* Appends "name free/slots" of up to 4 agents with free slots to buf. */
static void describe_free(const zt_sched_agent *agents, size_t n_agents, int device, char *buf,
                          size_t cap)
{
    size_t used = strlen(buf);
    int shown = 0, total_free = 0, nag = 0;
    for (size_t i = 0; i < n_agents; i++) {
        const zt_sched_agent *a = &agents[i];
        if (!a->alive || a->device != device) continue;
        int f = free_slots(a);
        total_free += f;
        nag++;
        if (f > 0 && shown < 4 && used < cap) {
            used += (size_t)snprintf(buf + used, cap - used, "%s%s %d/%d", shown ? ", " : " (",
                                     a->name, f, a->slots);
            shown++;
        }
    }
    if (shown && used < cap)
        used += (size_t)snprintf(buf + used, cap - used, "%s)", shown < nag ? ", ..." : "");
    (void)total_free;
}

void zt_sched_plan(zt_sched_agent *agents, size_t n_agents, const zt_sched_job *jobs, size_t n_jobs,
                   zt_sched_decision *out)
{
    size_t *order = zt_calloc(n_jobs ? n_jobs : 1, sizeof(*order));
    cand *cands = zt_calloc(n_agents ? n_agents : 1, sizeof(*cands));
    if (!order || !cands) {
        for (size_t i = 0; i < n_jobs; i++) {
            out[i].placed = false;
            snprintf(out[i].reason, sizeof(out[i].reason), "scheduler out of memory; retrying");
        }
        zt_free(order);
        zt_free(cands);
        return;
    }
    for (size_t i = 0; i < n_jobs; i++)
        order[i] = i;
    sort_order(order, n_jobs, jobs);
    /* the first job per device that fits the cluster but not the free slots: it blocks */
    int64_t blocker[3] = {0, 0, 0};
    int blocker_prio[3] = {0, 0, 0};
    for (size_t oi = 0; oi < n_jobs; oi++) {
        size_t ji = order[oi];
        const zt_sched_job *j = &jobs[ji];
        zt_sched_decision *d = &out[ji];
        d->placed = false;
        d->reason[0] = '\0';
        int dev = j->device == ZT_DEVICE_CUDA ? ZT_DEVICE_CUDA : ZT_DEVICE_CPU;
        int rpn = j->ranks_per_node > 0 ? j->ranks_per_node : j->ranks;
        if (!j->eligible) continue; /* the caller words the backoff reason */
        int live = 0, capacity = 0, free_total = 0;
        size_t nc = 0;
        for (size_t a = 0; a < n_agents; a++) {
            const zt_sched_agent *ag = &agents[a];
            if (!ag->alive || ag->device != dev) continue;
            live++;
            capacity += ag->slots < rpn ? ag->slots : rpn;
            int f = free_slots(ag);
            free_total += f;
            if (f > 0) {
                cands[nc].idx = (int)a;
                cands[nc].free = f;
                nc++;
            }
        }
        if (live == 0) {
            snprintf(d->reason, sizeof(d->reason),
                     "no live agent offers %s slots; start a zagent with --slots %s",
                     device_name(dev), dev == 2 ? "cuda:auto" : "cpu:N");
            continue;
        }
        if (capacity < j->ranks) {
            snprintf(
                d->reason, sizeof(d->reason),
                "cluster too small: needs %d %s slots with at most %d per node, but the %d live %s agent%s can hold at most %d",
                j->ranks, device_name(dev), rpn, live, device_name(dev), live == 1 ? "" : "s",
                capacity);
            continue;
        }
        if (blocker[dev]) {
            snprintf(d->reason, sizeof(d->reason),
                     "waiting behind job %lld (priority %d), which is first in line for %s slots",
                     (long long)blocker[dev], blocker_prio[dev], device_name(dev));
            continue;
        }
        qsort(cands, nc, sizeof(*cands), cmp_cand);
        int placeable = 0;
        for (size_t c = 0; c < nc; c++)
            placeable += cands[c].free < rpn ? cands[c].free : rpn;
        if (placeable < j->ranks) {
            int n = snprintf(
                d->reason, sizeof(d->reason),
                "waiting for free slots: needs %d %s slots with at most %d per node; %d free now",
                j->ranks, device_name(dev), rpn, free_total);
            if (n > 0 && (size_t)n < sizeof(d->reason))
                describe_free(agents, n_agents, dev, d->reason, sizeof(d->reason));
            blocker[dev] = j->id;
            blocker_prio[dev] = j->priority;
            continue;
        }
        /* place: consecutive ranks per agent, lowest free slots first */
        int r = 0;
        for (size_t c = 0; c < nc && r < j->ranks; c++) {
            zt_sched_agent *ag = &agents[cands[c].idx];
            int take = cands[c].free < rpn ? cands[c].free : rpn;
            if (take > j->ranks - r) take = j->ranks - r;
            int local = 0;
            for (int s = 0; s < ag->slots && local < take; s++) {
                if (ag->busy[s]) continue;
                ag->busy[s] = true;
                d->ranks[r].agent = cands[c].idx;
                d->ranks[r].local_rank = local;
                d->ranks[r].slot = s;
                r++;
                local++;
            }
        }
        d->placed = true;
    }
    zt_free(order);
    zt_free(cands);
}

zt_exit_class zt_sched_classify_exit(int code, int sig, char *why, size_t cap)
{
    return zt_sched_classify_worker_exit(code, sig, NULL, why, cap);
}

zt_exit_class zt_sched_classify_worker_exit(int code, int sig, const char *bad_ckpt, char *why,
                                            size_t cap)
{
    char tmp[8];
    if (!why) {
        why = tmp;
        cap = sizeof(tmp);
    }
    if (sig != 0) {
        const char *name = sig == SIGKILL   ? "SIGKILL (out of memory, or killed)"
                           : sig == SIGSEGV ? "SIGSEGV (crash)"
                           : sig == SIGABRT ? "SIGABRT (abort)"
                           : sig == SIGBUS  ? "SIGBUS"
                           : sig == SIGTERM ? "SIGTERM"
                           : sig == SIGINT  ? "SIGINT"
                           : sig == SIGFPE  ? "SIGFPE"
                           : sig == SIGILL  ? "SIGILL"
                                            : NULL;
        if (name)
            snprintf(why, cap, "killed by signal %d %s", sig, name);
        else
            snprintf(why, cap, "killed by signal %d", sig);
        return ZT_EXIT_RETRYABLE;
    }
    switch (code) {
    case 0:
        snprintf(why, cap, "exited 0");
        return ZT_EXIT_OK;
    case ZT_EXIT_CODE_BAD_CHECKPOINT:
        if (bad_ckpt && bad_ckpt[0])
            snprintf(why, cap, "exited with code 5 (checkpoint %s failed verification)", bad_ckpt);
        else
            snprintf(why, cap,
                     "exited with code 5 (the checkpoint it resumed from failed verification)");
        return ZT_EXIT_BAD_CHECKPOINT;
    case 2:
    case 64:
        snprintf(why, cap, "exited with code %d (usage error: not retryable)", code);
        return ZT_EXIT_FATAL;
    case 65:
        snprintf(why, cap, "exited with code 65 (bad input data: not retryable)");
        return ZT_EXIT_FATAL;
    case 66:
        snprintf(why, cap, "exited with code 66 (input missing: not retryable)");
        return ZT_EXIT_FATAL;
    case 77:
        snprintf(why, cap, "exited with code 77 (permission denied: not retryable)");
        return ZT_EXIT_FATAL;
    case 78:
        snprintf(why, cap, "exited with code 78 (configuration error: not retryable)");
        return ZT_EXIT_FATAL;
    case 126:
    case 127:
        snprintf(why, cap, "exited with code %d (the worker could not be started: not retryable)",
                 code);
        return ZT_EXIT_FATAL;
    default:
        snprintf(why, cap, "exited with code %d", code);
        return ZT_EXIT_RETRYABLE;
    }
}

int64_t zt_sched_backoff_ms(int64_t base_ms, int64_t max_ms, int n)
{
    if (base_ms <= 0) return 0;
    int64_t d = base_ms;
    for (int i = 1; i < n && d < max_ms; i++)
        d *= 2;
    return d < max_ms ? d : max_ms;
}
