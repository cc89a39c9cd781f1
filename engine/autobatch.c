/* zerotrain: the planner's "auto" micro batch (see autobatch.h). */
#define _POSIX_C_SOURCE 200809L
#include "autobatch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/alloc.h"
#include "common/settings.h"
#include "engine/engine.h"
#include "kernels/ops.h"

static void take(int64_t *budget, char *why, size_t cap, int64_t bytes, const char *what)
{
    if (bytes <= 0 || (*budget > 0 && bytes >= *budget)) return;
    *budget = bytes;
    snprintf(why, cap, "%s", what);
}

/* cgroup v2's memory.max of this process, or -1 ("max", or no cgroup file). */
static int64_t cgroup_limit(void)
{
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
    if (!f) return -1;
    char buf[64] = "";
    int64_t v = -1;
    if (fgets(buf, sizeof(buf), f) && strncmp(buf, "max", 3) != 0) {
        char *end;
        long long x = strtoll(buf, &end, 10);
        if (end != buf && x > 0) v = x;
    }
    fclose(f);
    return v;
}

zt_status zt_auto_batch_budget(const zt_job *job, int local_ranks, int64_t *budget, char *why,
                               size_t why_cap, zt_err *err)
{
    char b[32], text[160];
    *budget = 0;
    why[0] = '\0';
    if (local_ranks < 1) local_ranks = 1;
    if (job->resources.device == ZT_DEVICE_CUDA) {
        const zt_ops *ops = zt_ops_cuda();
        size_t avail = 0, total = 0;
        if (!ops || !ops->mem_info(NULL, &avail, &total))
            return zt_err_set(
                err, ZT_ERR_NO_DEVICE,
                "train_micro_batch_size_per_gpu is \"auto\" but this rank cannot read its GPU's memory; give the micro batch (train.micro_batch_size) or run where the GPU is visible");
        snprintf(text, sizeof(text), "the GPU's %s", zt_fmt_bytes((int64_t)total, b, sizeof(b)));
        take(budget, why, why_cap, (int64_t)total, text);
    } else {
        size_t avail = 0, total = 0;
        if (zt_ops_cpu()->mem_info(NULL, &avail, &total) && total > 0) {
            snprintf(text, sizeof(text), "host memory %s / %d rank%s on the node",
                     zt_fmt_bytes((int64_t)total, b, sizeof(b)), local_ranks,
                     local_ranks == 1 ? "" : "s");
            take(budget, why, why_cap, (int64_t)total / local_ranks, text);
        }
        int64_t cg = cgroup_limit();
        if (cg > 0) {
            snprintf(text, sizeof(text), "the cgroup's memory.max %s / %d rank%s",
                     zt_fmt_bytes(cg, b, sizeof(b)), local_ranks, local_ranks == 1 ? "" : "s");
            take(budget, why, why_cap, cg / local_ranks, text);
        }
        struct rlimit rl;
        if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
            snprintf(text, sizeof(text), "RLIMIT_AS %s",
                     zt_fmt_bytes((int64_t)rl.rlim_cur, b, sizeof(b)));
            take(budget, why, why_cap, (int64_t)rl.rlim_cur, text);
        }
        if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
            snprintf(text, sizeof(text), "RLIMIT_DATA %s",
                     zt_fmt_bytes((int64_t)rl.rlim_cur, b, sizeof(b)));
            take(budget, why, why_cap, (int64_t)rl.rlim_cur, text);
        }
    }
    const char *env = zt_setting_raw(ZT_SET_MEMORY_LIMIT);
    if (env) {
        char *end;
        errno = 0;
        long long x = strtoll(env, &end, 10);
        if (errno || *end || x <= 0)
            return zt_err_set(err, ZT_ERR_CONFIG,
                              "ZT_MEMORY_LIMIT=\"%s\" is not a positive number of bytes", env);
        snprintf(text, sizeof(text), "ZT_MEMORY_LIMIT %s", zt_fmt_bytes(x, b, sizeof(b)));
        take(budget, why, why_cap, x, text);
    }
    if (*budget <= 0)
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "train_micro_batch_size_per_gpu is \"auto\" but this machine's memory cannot be read; give the micro batch (train.micro_batch_size) or set ZT_MEMORY_LIMIT");
    return ZT_OK;
}

/* The plan's bytes for micro batch mb: the device's on cuda, the process's on the CPU. */
static zt_status need_for(const zt_job *job, int world, int64_t mb, int64_t *need, zt_err *err)
{
    zt_job *v = zt_malloc(sizeof(*v));
    if (!v) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    memcpy(v, job, sizeof(*v));
    v->ds.micro_picked = mb;
    zt_status st = zt_job_resolve_batch(v, world, err);
    zt_mem_plan p;
    if (st == ZT_OK) st = zt_engine_plan(v, world, &p, err);
    if (st == ZT_OK) *need = v->resources.device == ZT_DEVICE_CUDA ? p.device_total : p.total_bytes;
    zt_free(v);
    return st;
}

static void put(char *out, size_t cap, size_t *used, const char *s, size_t k)
{
    if (*used + 1 >= cap) return;
    if (k > cap - 1 - *used) k = cap - 1 - *used;
    memcpy(out + *used, s, k);
    *used += k;
    out[*used] = '\0';
}

/* Replaces the summary's line that holds `key` (or adds one when add). line is "auto: " and
 * the text after the key path; the path is kept as the line had it ("deepspeed.x" for a
 * config inside the job file, "x" for one in its own file). */
static void note_set(zt_job *job, const char *key, const char *line, bool add)
{
    char *notes = job->ds.notes;
    size_t cap = sizeof(job->ds.notes);
    char out[ZT_DS_NOTES_MAX] = "";
    size_t used = 0;
    char *hit = strstr(notes, key);
    if (!hit && !add) return;
    char *start = hit, *end = NULL;
    const char *prefix = "", *prefix_end = prefix;
    if (hit) {
        while (start > notes && start[-1] != '\n')
            start--;
        end = strchr(hit, '\n');
        put(out, sizeof(out), &used, notes, (size_t)(start - notes));
        if (strncmp(start, "auto: ", 6) == 0) {
            prefix = start + 6;
            prefix_end = hit;
        }
    } else {
        put(out, sizeof(out), &used, notes, strlen(notes));
        if (used) put(out, sizeof(out), &used, "\n", 1);
    }
    put(out, sizeof(out), &used, "auto: ", 6);
    put(out, sizeof(out), &used, prefix, (size_t)(prefix_end - prefix));
    if (strncmp(line, "auto: ", 6) == 0) line += 6;
    put(out, sizeof(out), &used, line, strlen(line));
    if (end) put(out, sizeof(out), &used, end, strlen(end));
    memset(notes, 0, cap);
    memcpy(notes, out, used < cap ? used : cap - 1);
}

zt_status zt_auto_batch_pick(zt_job *job, int world, int local_ranks, int64_t budget, zt_err *err)
{
    if (!job->ds.micro_auto) return ZT_OK;
    if (local_ranks <= 0) /* the job's own placement: ranks_per_node on each node */
        local_ranks = job->resources.ranks_per_node < world ? job->resources.ranks_per_node : world;
    char why[160] = "the given budget";
    zt_status st;
    if (budget <= 0 &&
        (st = zt_auto_batch_budget(job, local_ranks, &budget, why, sizeof(why), err)) != ZT_OK)
        return st;
    int64_t room = (int64_t)((double)budget * ZT_AUTO_BATCH_FILL);
    int64_t cap = ZT_AUTO_BATCH_MAX_TOKENS / job->model.block_size;
    if (cap < 1) cap = 1;
    int64_t tb = job->ds.given_train_batch_size, gas = job->ds.given_grad_accum;
    int64_t per_rank = 0; /* the samples a rank takes a step when the global batch is fixed */
    if (tb) {
        if (tb % world != 0)
            return zt_err_set(
                err, ZT_ERR_CONFIG,
                "train_batch_size %lld cannot be split over %d ranks; make it a multiple of the rank count",
                (long long)tb, world);
        per_rank = tb / world;
        if (gas) {
            if (per_rank % gas != 0)
                return zt_err_set(
                    err, ZT_ERR_CONFIG,
                    "train_batch_size %lld is not a multiple of gradient_accumulation_steps %lld x %d ranks",
                    (long long)tb, (long long)gas, world);
            per_rank /= gas; /* the micro batch is fixed: nothing to pick but to check it */
        }
    }
    int64_t need = 0, best = 0, best_need = 0, over = 0, over_need = 0;
    if (per_rank && gas) {
        if ((st = need_for(job, world, per_rank, &need, err)) != ZT_OK) return st;
        best = per_rank;
        best_need = need;
    } else if (per_rank) {
        /* the largest divisor of the rank's share that fits */
        for (int64_t mb = per_rank; mb >= 1; mb--) {
            if (per_rank % mb || (mb > cap && mb > 1)) continue;
            if ((st = need_for(job, world, mb, &need, err)) != ZT_OK) return st;
            if (need <= room) {
                best = mb;
                best_need = need;
                break;
            }
            over = mb;
            over_need = need;
        }
    } else {
        /* memory grows with the micro batch: double to the first that does not fit, then
         * bisect */
        int64_t lo = 0, hi = 0;
        for (int64_t mb = 1; mb <= cap; mb = mb * 2 <= cap || mb == cap ? mb * 2 : cap) {
            if ((st = need_for(job, world, mb, &need, err)) != ZT_OK) return st;
            if (need > room) {
                hi = mb;
                over_need = need;
                break;
            }
            lo = mb;
            best_need = need;
        }
        bool capped = hi == 0; /* everything up to the cap fits */
        while (!capped && hi - lo > 1 && lo > 0) {
            int64_t mid = lo + (hi - lo) / 2;
            if ((st = need_for(job, world, mid, &need, err)) != ZT_OK) return st;
            if (need <= room) {
                lo = mid;
                best_need = need;
            } else {
                hi = mid;
                over_need = need;
            }
        }
        best = lo;
        over = capped ? 0 : hi;
    }
    char r[32], n1[32], n2[32];
    if (!best || best_need > room) {
        if (!best_need) (void)need_for(job, world, 1, &best_need, NULL);
        return zt_err_set(
            err, ZT_ERR_NOMEM,
            "train_micro_batch_size_per_gpu is \"auto\" but not even a micro batch of %lld fits: the plan needs %s and the rank may use %s (90%% of %s); use a higher ZeRO stage, optimizer offload, activation_checkpointing or more ranks",
            (long long)(per_rank && gas ? per_rank : 1), zt_fmt_bytes(best_need, n1, sizeof(n1)),
            zt_fmt_bytes(room, r, sizeof(r)), why);
    }
    job->ds.micro_picked = best;
    if ((st = zt_job_resolve_batch(job, world, err)) != ZT_OK) return st;
    char line[512], b[32];
    if (over)
        snprintf(
            line, sizeof(line),
            "auto: train_micro_batch_size_per_gpu = %lld (the largest that fits %s with a 10%% margin: it needs %s, %lld would need %s)",
            (long long)best, why, zt_fmt_bytes(best_need, n1, sizeof(n1)), (long long)over,
            zt_fmt_bytes(over_need, n2, sizeof(n2)));
    else
        snprintf(
            line, sizeof(line),
            "auto: train_micro_batch_size_per_gpu = %lld (at most %d tokens a micro batch; it fits %s with a 10%% margin: it needs %s of %s)",
            (long long)best, ZT_AUTO_BATCH_MAX_TOKENS, why, zt_fmt_bytes(best_need, n1, sizeof(n1)),
            zt_fmt_bytes(room, b, sizeof(b)));
    note_set(job, "train_micro_batch_size_per_gpu = ", line, true);
    /* the lines written when the file was read hold the values of a micro batch of 1 */
    snprintf(line, sizeof(line),
             "auto: gradient_accumulation_steps = %lld (derived from the batch sizes)",
             (long long)job->ds.grad_accum);
    note_set(job, "gradient_accumulation_steps = ", line, false);
    if (!job->ds.given_train_batch_size) {
        snprintf(line, sizeof(line),
                 "auto: train_batch_size = %lld (micro batch x accumulation x ranks)",
                 (long long)job->ds.train_batch_size);
        note_set(job, "train_batch_size = ", line, false);
    }
    return ZT_OK;
}
