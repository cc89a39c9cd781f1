/* zerotrain: zworker, one rank of a training run. Started by zagent or `zctl run`, configured
 * by the environment (ZT_RANK, ZT_WORLD_SIZE, ZT_LOCAL_RANK, ZT_RENDEZVOUS, ZT_SESSION,
 * ZT_REPORT_FD), it loads the job file, builds the engine and trains. Rank 0 prints one
 * `step=<n> loss=<x> ...` line per optimizer step on stdout; logs go to stderr. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/jobfile.h"
#include "common/log.h"
#include "common/settings.h"
#include "engine/autobatch.h"
#include "engine/ckpt.h"
#include "engine/engine.h"

/* Exit codes (the agent and zctl classify them): */
#define ZW_EXIT_OK 0
#define ZW_EXIT_FAIL 1     /* runtime failure, retryable (I/O, internal) */
#define ZW_EXIT_CONFIG 2   /* bad job, data, init or checkpoint: retrying cannot help */
#define ZW_EXIT_PEER 3     /* another rank died or hung: retryable */
#define ZW_EXIT_NOMEM 4    /* out of memory: retrying with the same plan cannot help */
#define ZW_EXIT_BAD_CKPT 5 /* the resume checkpoint failed verification: an older one may do */

static void usage(FILE *f)
{
    fprintf(f, "usage: zworker [--resume CKPT] JOB.json\n"
               "\n"
               "One rank of a zerotrain run, normally started by zagent or 'zctl run'.\n"
               "Without --resume it starts from the job's train.resume_from when given (under\n"
               "'zctl run', from the newest checkpoint of its own checkpoint_dir once it has one).\n"
               "Environment: ZT_RANK, ZT_WORLD_SIZE, ZT_LOCAL_RANK, ZT_RENDEZVOUS "
               "(tcp://host:port),\n"
               "ZT_SESSION (run attempt id), ZT_REPORT_FD (fd for machine-readable reports),\n"
               "ZT_COMM_TIMEOUT_MS (overrides the job's train.comm_timeout_ms), ZT_LOG_LEVEL,\n"
               "ZT_JOB_ID and ZT_SUBMIT_KEY (the job that owns checkpoint_dir, set by zagent),\n"
               "ZT_CKPT_TAKEOVER=1 (take over a checkpoint_dir that belongs to another job).\n"
               "Exit codes: 0 done, 1 runtime failure, 2 bad job/data/checkpoint (or non-finite\n"
               "values), 3 a peer failed, 4 out of memory, 5 the checkpoint to resume from failed\n"
               "verification (reported as ckpt_bad on ZT_REPORT_FD).\n");
}

/* A variable set by the parent (zagent, zctl run): a bad value is an error, since the rank's
 * place in the job would be a guess. */
static int env_int(zt_setting id, int dflt, int *ok)
{
    const char *v = zt_setting_raw(id);
    if (!v)
        return dflt;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < 0 || x > 1 << 24) {
        fprintf(stderr, "zworker: %s=\"%s\" is not a valid non-negative integer\n",
                zt_setting_about(id)->name, v);
        *ok = 0;
        return dflt;
    }
    return (int)x;
}

static int exit_code_for(zt_status st)
{
    switch (st) {
    case ZT_OK: return ZW_EXIT_OK;
    case ZT_ERR_CONFIG: case ZT_ERR_INVALID: case ZT_ERR_FORMAT: case ZT_ERR_NOT_FOUND:
    case ZT_ERR_CORRUPT: case ZT_ERR_UNSUPPORTED: case ZT_ERR_NO_DEVICE: case ZT_ERR_NONFINITE:
        return ZW_EXIT_CONFIG;
    case ZT_ERR_PEER: case ZT_ERR_TIMEOUT: return ZW_EXIT_PEER;
    case ZT_ERR_NOMEM: return ZW_EXIT_NOMEM;
    default: return ZW_EXIT_FAIL;
    }
}

/* ZT_CKPT_TAKEOVER: "1" takes over a checkpoint_dir that belongs to another job. */
static zt_status takeover_from_env(bool *out, zt_err *err)
{
    const char *v = zt_setting_env(ZT_SET_CKPT_TAKEOVER);
    *out = v && strcmp(v, "1") == 0;
    if (v && *v && strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
        return zt_err_set(err, ZT_ERR_CONFIG, "ZT_CKPT_TAKEOVER=\"%s\" is not 0 or 1", v);
    return ZT_OK;
}

/* Where a run starts that is given no --resume while its job names train.resume_from. Under
 * zctl run (no job id) the job's own newest checkpoint wins once checkpoint_dir belongs to the
 * job and holds one: only the first run starts from resume_from. Under the coordinator, which
 * says with --resume which checkpoint a restart continues from, no --resume means the start:
 * resume_from. Starting from a checkpoint inside checkpoint_dir takes that directory over.
 * Every rank decides alike: rank 0 writes owner.json only after the rendezvous. */
static void pick_start(const zt_job *job, const zt_ckpt_owner *me, char *out, size_t len,
                       bool *takeover)
{
    const zt_train_cfg *t = &job->train;
    zt_ckpt_owner cur;
    bool found = false;
    zt_err tmp;
    zt_err_clear(&tmp);
    if (!me->has_job_id && zt_ckpt_owner_read(t->checkpoint_dir, &cur, &found, &tmp) == ZT_OK &&
        found && zt_ckpt_owner_same(&cur, me) &&
        zt_ckpt_resolve(t->checkpoint_dir, out, len, &tmp) == ZT_OK) {
        ZT_INFO("worker", "resuming from this job's newest checkpoint %s (train.resume_from %s is where its first run started)",
                out, t->resume_from);
        return;
    }
    snprintf(out, len, "%s", t->resume_from);
    if (zt_ckpt_path_inside(t->resume_from, t->checkpoint_dir))
        *takeover = true;
    ZT_INFO("worker", "starting from train.resume_from %s", t->resume_from);
}

/* The report line of a checkpoint that failed verification (engine.h):
 *   rank=R ckpt_bad step=N dir=/abs/step_0000000N why=MESSAGE
 * N is the step in the directory's name (0 when the name has none); why= comes last and takes
 * the rest of the line, the message with its line breaks made spaces. One write, so that the
 * line arrives whole. */
static void report_bad_ckpt(int fd, int rank, const char *dir, const char *why)
{
    if (fd < 0)
        return;
    char abs[2 * ZT_PATH_MAX + 2], cwd[ZT_PATH_MAX];
    if (dir[0] == '/' || !getcwd(cwd, sizeof(cwd)))
        snprintf(abs, sizeof(abs), "%s", dir);
    else
        snprintf(abs, sizeof(abs), "%s/%s", cwd, dir);
    size_t n = strlen(abs);
    while (n > 1 && abs[n - 1] == '/')
        abs[--n] = '\0';
    const char *base = strrchr(abs, '/') ? strrchr(abs, '/') + 1 : abs;
    long long step = 0;
    if (strncmp(base, "step_", 5) == 0 && isdigit((unsigned char)base[5]))
        step = strtoll(base + 5, NULL, 10);
    char line[8192];
    int w = snprintf(line, sizeof(line), "rank=%d ckpt_bad step=%lld dir=%s why=", rank, step, abs);
    if (w < 0 || (size_t)w >= sizeof(line) - 2)
        return;
    size_t k = (size_t)w;
    for (const char *p = why; *p && k < sizeof(line) - 2; p++)
        line[k++] = *p == '\n' || *p == '\r' ? ' ' : *p;
    line[k++] = '\n';
    ssize_t wr = write(fd, line, k);
    (void)wr;
}

int main(int argc, char **argv)
{
    const char *job_path = NULL, *resume = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--resume") == 0 && i + 1 < argc) {
            resume = argv[++i];
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "zworker: unknown option %s\n", argv[i]);
            usage(stderr);
            return ZW_EXIT_CONFIG;
        } else if (!job_path) {
            job_path = argv[i];
        } else {
            fprintf(stderr, "zworker: more than one job file given (%s, %s)\n", job_path, argv[i]);
            return ZW_EXIT_CONFIG;
        }
    }
    if (!job_path) {
        usage(stderr);
        return ZW_EXIT_CONFIG;
    }
    signal(SIGPIPE, SIG_IGN);
    int ok = 1;
    int rank = env_int(ZT_SET_RANK, 0, &ok);
    int world = env_int(ZT_SET_WORLD_SIZE, 1, &ok);
    int local_rank = env_int(ZT_SET_LOCAL_RANK, 0, &ok);
    int report_fd = env_int(ZT_SET_REPORT_FD, -1, &ok);
    if (!ok)
        return ZW_EXIT_CONFIG;
    if (world < 1 || rank >= world) {
        fprintf(stderr, "zworker: ZT_RANK %d is not below ZT_WORLD_SIZE %d\n", rank, world);
        return ZW_EXIT_CONFIG;
    }
    zt_log_set_identity(NULL, rank);

    zt_err err;
    zt_err_clear(&err);
    zt_job job;
    zt_ckpt_owner me;
    bool takeover = false;
    zt_status st = zt_job_load(&job, job_path, &err);
    if (st == ZT_OK)
        st = zt_ckpt_owner_from_env(&me, job.name, &err);
    if (st == ZT_OK)
        st = takeover_from_env(&takeover, &err);
    char start[ZT_PATH_MAX];
    if (st == ZT_OK && !resume && job.train.resume_from[0]) {
        pick_start(&job, &me, start, sizeof(start), &takeover);
        resume = start;
    }
    /* a checkpoint directory belongs to one job: refused before anything is read or written */
    if (st == ZT_OK)
        st = zt_ckpt_owner_check(job.train.checkpoint_dir, &me, takeover, &err);
    char step_dir[ZT_PATH_MAX];
    bool bad_ckpt = false; /* resume's checkpoint failed verification */
    const char *bad_dir = resume;
    if (st == ZT_OK && resume) {
        st = zt_ckpt_resolve(resume, step_dir, sizeof(step_dir), &err);
        if (st == ZT_OK) {
            bad_dir = step_dir;
            st = zt_ckpt_adapt_job(&job, step_dir, world, &err);
        }
        bad_ckpt = zt_ckpt_status_is_bad(st);
    } else if (st == ZT_OK && job.ds.world_size != world) {
        st = zt_job_resolve_batch(&job, world, &err);
    }
    if (st == ZT_OK && job.ds.micro_auto) {
        /* every rank of a node sees the same memory and picks the same micro batch */
        st = zt_auto_batch_pick(&job, world, env_int(ZT_SET_LOCAL_WORLD_SIZE, 0, &ok), 0, &err);
    }
    if (st == ZT_OK && rank == 0 && job.ds.notes[0]) {
        /* the start-up summary of the DeepSpeed config: one log line per note */
        const char *p = job.ds.notes;
        while (*p) {
            const char *e = strchr(p, '\n');
            int k = e ? (int)(e - p) : (int)strlen(p);
            ZT_INFO("deepspeed", "%.*s", k, p);
            p += k + (e ? 1 : 0);
        }
    }
    zt_engine *e = NULL;
    if (st == ZT_OK) {
        zt_engine_opts o = {0};
        o.rank = rank;
        o.world_size = world;
        o.local_rank = local_rank;
        o.rendezvous = zt_setting_env(ZT_SET_RENDEZVOUS);
        o.session = zt_setting_env(ZT_SET_SESSION);
        o.comm_timeout_ms = env_int(ZT_SET_COMM_TIMEOUT_MS, 0, &ok);
        o.resume = resume ? step_dir : NULL;
        o.step_out = rank == 0 ? stdout : NULL;
        o.report_fd = report_fd;
        o.owner = &me;
        o.owner_takeover = takeover;
        o.resume_bad = &bad_ckpt;
        st = zt_engine_create(&e, &job, &o, &err);
    }
    if (st == ZT_OK && zt_setting_env(ZT_SET_DUMP_STATE_AFTER_LOAD))
        st = zt_engine_dump_state(e, zt_setting_env(ZT_SET_DUMP_STATE_AFTER_LOAD), &err);
    if (st == ZT_OK)
        st = zt_engine_train(e, &err);
    if (st == ZT_OK && zt_setting_env(ZT_SET_PARAM_DIGEST)) {
        uint32_t crc = 0;
        st = zt_engine_param_digest(e, &crc, &err);
        if (st == ZT_OK)
            ZT_INFO("worker", "param_digest=%08x", crc);
    }
    if (st != ZT_OK) {
        /* where every collective of this rank stood, then the error itself as the last line
         * (zctl run and the agent show the last lines of a failed rank) */
        zt_engine_log_comm_failure(e);
        ZT_ERROR("worker", "%s", zt_err_msg(&err));
        if (bad_ckpt)
            report_bad_ckpt(report_fd, rank, bad_dir, zt_err_msg(&err));
    }
    zt_engine_destroy(e);
    if (st != ZT_OK)
        return bad_ckpt ? ZW_EXIT_BAD_CKPT : exit_code_for(st);
    return ZW_EXIT_OK;
}
