/* zerotrain: `zctl jobs` (list), `zctl job ID` (inspect) and `zctl cancel ID`. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/commands.h"
#include "cli/rpc_cli.h"
#include "common/alloc.h"
#include "proto/pbjson.h"

ZT_COMMAND(jobs, zt_cmd_jobs, "list jobs (newest first)")
ZT_COMMAND(job, zt_cmd_job, "show one job: state, attempts, ranks, recent events")
ZT_COMMAND(cancel, zt_cmd_cancel, "cancel a job (its workers are stopped)")

static int parse_state(const char *s)
{
    for (int v = 1; v <= 6; v++)
        if (strcasecmp(s, zt_cli_job_state(v)) == 0) return v;
    return 0;
}

int zt_cmd_jobs(int argc, char **argv)
{
    if (zt_cli_wants_help(argc, argv)) {
        printf("usage: zctl jobs [--state S[,S...]] [--limit N] [--before ID]\n\n"
               "Lists jobs, newest first. States: queued, scheduled, running, completed, failed,\n"
               "canceled. --limit defaults to 50 (at most 1000).\n");
        return 0;
    }
    Zt__V1__ListJobsRequest q = ZT__V1__LIST_JOBS_REQUEST__INIT;
    Zt__V1__JobState states[6];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--state") == 0 && i + 1 < argc) {
            char *list = zt_strdup(argv[++i]);
            for (char *save = NULL, *t = strtok_r(list, ",", &save); t;
                 t = strtok_r(NULL, ",", &save)) {
                int v = parse_state(t);
                if (!v || q.n_states >= 6) {
                    zt_cli_error(
                        "'%s' is not a job state (queued, scheduled, running, completed, failed, canceled)",
                        t);
                    zt_free(list);
                    return ZT_CLI_EXIT_USAGE;
                }
                states[q.n_states++] = (Zt__V1__JobState)v;
            }
            zt_free(list);
        } else if (strcmp(argv[i], "--limit") == 0 && i + 1 < argc) {
            q.limit = atoi(argv[++i]);
            if (q.limit <= 0 || q.limit > 1000) {
                zt_cli_error("--limit takes 1..1000, not '%s'", argv[i]);
                return ZT_CLI_EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--before") == 0 && i + 1 < argc) {
            if (!(q.before_id = zt_cli_parse_job_id(argv[++i]))) return ZT_CLI_EXIT_USAGE;
        } else {
            zt_cli_error("jobs: unknown argument '%s'; see 'zctl jobs --help'", argv[i]);
            return ZT_CLI_EXIT_USAGE;
        }
    }
    q.states = states;
    zt_rpc_client *c = zt_cli_connect();
    if (!c) return 1;
    Zt__V1__ListJobsReply *r = NULL;
    int rc = 1;
    if (zt_cli_call(c, "ListJobs", &q.base, &zt__v1__list_jobs_reply__descriptor, (void **)&r,
                    NULL) != ZT_OK)
        goto out;
    rc = 0;
    if (zt_cli.json) {
        zt_cli_print_json(&r->base, false);
        goto out;
    }
    if (!r->n_jobs) {
        printf("no jobs%s\n",
               q.n_states ? " in that state" : " yet: 'zctl submit JOB.json' adds one");
        goto out;
    }
    printf("%-6s %-20s %-10s %-13s %-9s %-10s %s\n", "ID", "NAME", "STATE", "STEP", "RANKS",
           "SUBMITTED", "REASON");
    for (size_t i = 0; i < r->n_jobs; i++) {
        const Zt__V1__Job *j = r->jobs[i];
        char step[32], ranks[24], ago[32];
        snprintf(step, sizeof(step), "%lld/%lld", (long long)j->step, (long long)j->total_steps);
        snprintf(ranks, sizeof(ranks), "%d %s", j->ranks,
                 j->device == ZT__V1__DEVICE__DEVICE_CUDA ? "cuda" : "cpu");
        zt_cli_fmt_ago(j->submitted_ms, ago, sizeof(ago));
        const char *why = j->pending_reason[0] ? j->pending_reason : j->reason;
        printf("%-6lld %-20.20s %-10s %-13s %-9s %-10s %.100s\n", (long long)j->id, j->name,
               zt_cli_job_state(j->state), step, ranks, ago, why);
    }
    if (r->next_before_id)
        printf("(more: zctl jobs --before %lld)\n", (long long)r->next_before_id);
out:
    zt_pb_free(r);
    zt_rpc_client_destroy(c);
    return rc;
}

static void print_job(const Zt__V1__GetJobReply *r)
{
    const Zt__V1__Job *j = r->job;
    char t1[32], t2[32], t3[32], d[32];
    printf("job %lld: %s\n", (long long)j->id, j->name);
    printf("  state:      %s: %s\n", zt_cli_job_state(j->state), j->reason);
    if (j->pending_reason[0]) printf("  pending:    %s\n", j->pending_reason);
    printf("  resources:  %d %s rank(s), at most %d per node; priority %d\n", j->ranks,
           j->device == ZT__V1__DEVICE__DEVICE_CUDA ? "cuda" : "cpu", j->ranks_per_node,
           j->priority);
    printf("  progress:   step %lld of %lld", (long long)j->step, (long long)j->total_steps);
    if (j->loss != 0) printf(", loss %.4f", j->loss);
    if (j->tokens_per_s > 0) printf(", %.0f tok/s", j->tokens_per_s);
    if (j->eta_s > 0) printf(", ETA %s", zt_cli_fmt_duration(j->eta_s, d, sizeof(d)));
    printf("\n  restarts:   %d of %d\n", j->restarts, j->max_restarts);
    printf("  submitted:  %s by %s; started %s; ended %s\n",
           zt_cli_fmt_time(j->submitted_ms, t1, sizeof(t1)), j->user[0] ? j->user : "?",
           zt_cli_fmt_time(j->started_ms, t2, sizeof(t2)),
           zt_cli_fmt_time(j->ended_ms, t3, sizeof(t3)));
    printf("  directory:  %s\n", r->spec_dir);
    printf("  checkpoints: %d committed ('zctl ckpt list %lld')\n", r->checkpoints,
           (long long)j->id);
    for (size_t i = 0; i < r->n_attempts; i++) {
        const Zt__V1__Attempt *a = r->attempts[i];
        printf("  attempt %d (id %lld): %s: %s\n", a->number, (long long)a->id,
               zt_pb_enum_short_name(&zt__v1__attempt_state__descriptor, a->state), a->reason);
        if (a->resume_path[0])
            printf("    resumed from %s (step %lld)\n", a->resume_path, (long long)a->resume_step);
        for (size_t k = 0; k < a->n_ranks; k++) {
            const Zt__V1__RankInfo *rk = a->ranks[k];
            const Zt__V1__WorkerStatus *w = rk->status;
            printf("    rank %-3d on %-16s local %d device %d", rk->rank, rk->agent, rk->local_rank,
                   rk->device_index);
            if (w) {
                printf("  %s", zt_pb_enum_short_name(&zt__v1__worker_phase__descriptor, w->phase));
                if (w->pid) printf(" pid %d", w->pid);
                printf(" step %lld", (long long)w->step);
                if (w->phase == ZT__V1__WORKER_PHASE__WORKER_PHASE_EXITED) {
                    if (w->exit_signal)
                        printf(" signal %d", w->exit_signal);
                    else
                        printf(" exit %d", w->exit_code);
                }
                if (w->peak_memory_bytes)
                    printf(" peak %s", zt_fmt_bytes(w->peak_memory_bytes, d, sizeof(d)));
            }
            printf("\n");
        }
    }
    if (r->n_events) {
        printf("  recent events:\n");
        for (size_t i = 0; i < r->n_events; i++) {
            const Zt__V1__Event *e = r->events[i];
            printf("    %s  %-10s %s -> %s: %s\n", zt_cli_fmt_time(e->time_ms, t1, sizeof(t1)),
                   e->kind, e->from_state[0] ? e->from_state : "-", e->to_state, e->reason);
        }
    }
}

int zt_cmd_job(int argc, char **argv)
{
    if (zt_cli_wants_help(argc, argv) || argc != 2) {
        printf(
            "usage: zctl job JOB_ID [--spec]\n\nShows a job: state and why, progress, attempts with their ranks and workers,\nand the most recent events. -o json prints everything, including the job file.\n");
        return argc == 2 || zt_cli_wants_help(argc, argv) ? 0 : ZT_CLI_EXIT_USAGE;
    }
    int64_t id = zt_cli_parse_job_id(argv[1]);
    if (!id) return ZT_CLI_EXIT_USAGE;
    zt_rpc_client *c = zt_cli_connect();
    if (!c) return 1;
    Zt__V1__GetJobRequest q = ZT__V1__GET_JOB_REQUEST__INIT;
    q.job_id = id;
    Zt__V1__GetJobReply *r = NULL;
    int rc = 1;
    if (zt_cli_call(c, "GetJob", &q.base, &zt__v1__get_job_reply__descriptor, (void **)&r, NULL) ==
        ZT_OK) {
        rc = 0;
        if (zt_cli.json)
            zt_cli_print_json(&r->base, false);
        else
            print_job(r);
    }
    zt_pb_free(r);
    zt_rpc_client_destroy(c);
    return rc;
}

int zt_cmd_cancel(int argc, char **argv)
{
    if (zt_cli_wants_help(argc, argv)) {
        printf(
            "usage: zctl cancel JOB_ID [--reason TEXT]\n\nCancels a queued or running job; its workers are stopped.\n");
        return 0;
    }
    int64_t id = 0;
    const char *reason = "";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reason") == 0 && i + 1 < argc)
            reason = argv[++i];
        else if (!id && argv[i][0] != '-') {
            if (!(id = zt_cli_parse_job_id(argv[i]))) return ZT_CLI_EXIT_USAGE;
        } else {
            zt_cli_error("cancel: unexpected argument '%s'; see 'zctl cancel --help'", argv[i]);
            return ZT_CLI_EXIT_USAGE;
        }
    }
    if (!id) {
        zt_cli_error("usage: zctl cancel JOB_ID [--reason TEXT]");
        return ZT_CLI_EXIT_USAGE;
    }
    zt_rpc_client *c = zt_cli_connect();
    if (!c) return 1;
    Zt__V1__CancelJobRequest q = ZT__V1__CANCEL_JOB_REQUEST__INIT;
    q.job_id = id;
    q.reason = (char *)reason;
    Zt__V1__CancelJobReply *r = NULL;
    int rc = 1;
    if (zt_cli_call(c, "CancelJob", &q.base, &zt__v1__cancel_job_reply__descriptor, (void **)&r,
                    NULL) == ZT_OK) {
        rc = 0;
        if (zt_cli.json)
            zt_cli_print_json(&r->base, false);
        else
            printf("job %lld %s: %s\n", (long long)r->job->id, zt_cli_job_state(r->job->state),
                   r->job->reason);
    }
    zt_pb_free(r);
    zt_rpc_client_destroy(c);
    return rc;
}
