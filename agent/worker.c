/* zerotrain: one zworker under zagent — preparation (GetAttemptSpec, job.json, rendezvous
 * "zcoord:<attempt>"), the spawn (own session, stdout/stderr/report pipes; the command line,
 * environment and exec wrapper are worker_exec.c's), the lines it writes, its stop (SIGTERM,
 * SIGKILL after the grace period) and its exit, reported once its pipes are drained and its
 * shard reports are settled. */
#define _GNU_SOURCE /* strsignal */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent_int.h"
#include "agent/confine.h"
#include "common/jobfile.h"
#include "common/netutil.h"
#include "common/alloc.h"
#include "common/fsutil.h"
#include "common/log.h"
#include "common/timeutil.h"

/* The exit code of a worker the agent refused to start (a job path outside the allowed
 * roots): the coordinator fails the attempt as "could not be started: not retryable". */
#define AG_EXIT_REFUSED 126

const char *ag_wstate_name(ag_wstate s)
{
    switch (s) {
    case AGW_PREPARING:
        return "preparing";
    case AGW_RUNNING:
        return "running";
    case AGW_STOPPING:
        return "stopping";
    case AGW_EXITED:
        return "exited";
    }
    return "?";
}

/* ---- memory ---------------------------------------------------------------------------------- */

static void worker_free(ag_worker *w)
{
    zt_free(w->resume_path);
    zt_free(w->job_name);
    for (int i = 0; i < w->n_env; i++)
        zt_free(w->env[i]);
    zt_free(w->env);
    zt_free(w);
}

static void maybe_free(ag_worker *w)
{
    if (w->gone && w->handles == 0 && w->refs == 0) {
        zt_agent *a = w->agent;
        worker_free(w);
        if (a->stopping) ag_check_stopped(a);
    }
}

void ag_worker_unref(ag_worker *w)
{
    w->refs--;
    maybe_free(w);
}

static void on_worker_handle_closed(uv_handle_t *h)
{
    ag_worker *w = h->type == UV_NAMED_PIPE ? ((ag_stream *)h->data)->w : h->data;
    w->handles--;
    maybe_free(w);
}

static void close_stream(ag_stream *s)
{
    if (!s->pipe.loop) return; /* never initialized */
    if (s->open) {
        s->open = false;
        uv_read_stop((uv_stream_t *)&s->pipe);
    }
    if (!uv_is_closing((uv_handle_t *)&s->pipe))
        uv_close((uv_handle_t *)&s->pipe, on_worker_handle_closed);
}

void ag_worker_forget(ag_worker *w)
{
    if (w->gone) return;
    zt_agent *a = w->agent;
    for (ag_worker **p = &a->workers; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            break;
        }
    }
    w->next = NULL;
    w->gone = true;
    if (w->proc_started && !w->proc_exited && w->pid > 0)
        kill(-w->pid, SIGKILL); /* never leave a process without its supervisor */
    if (!uv_is_closing((uv_handle_t *)&w->timer)) {
        uv_timer_stop(&w->timer);
        uv_close((uv_handle_t *)&w->timer, on_worker_handle_closed);
    }
    if (w->proc_started) {
        close_stream(&w->out);
        close_stream(&w->err);
        close_stream(&w->rep);
        if (!uv_is_closing((uv_handle_t *)&w->proc))
            uv_close((uv_handle_t *)&w->proc, on_worker_handle_closed);
    }
    if (w->log) {
        fclose(w->log);
        w->log = NULL;
    }
    maybe_free(w);
}

/* ---- small helpers ------------------------------------------------------------------------- */

static uint64_t backoff_ms(int failures)
{
    uint64_t ms = 200;
    for (int i = 1; i < failures && ms < 5000; i++)
        ms *= 2;
    return ms < 5000 ? ms : 5000;
}

/* Writes text to path through a temporary name and a rename. */
static int write_file(const char *path, const char *text)
{
    char tmp[AG_PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n && fputc('\n', f) != EOF;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

bool ag_proc_memory(int pid, int64_t *rss, int64_t *hwm)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    *rss = *hwm = 0;
    while (fgets(line, sizeof(line), f)) {
        long long kb;
        if (sscanf(line, "VmRSS: %lld kB", &kb) == 1)
            *rss = kb * 1024;
        else if (sscanf(line, "VmHWM: %lld kB", &kb) == 1)
            *hwm = kb * 1024;
    }
    fclose(f);
    return true;
}

/* A line from the agent about this worker: in its log file and in the coordinator's logs. */
static void agent_line(ag_worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void agent_line(ag_worker *w, const char *fmt, ...)
{
    char buf[AG_LINE_MAX];
    int n = snprintf(buf, sizeof(buf), "[zagent] ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
    va_end(ap);
    if (w->log) {
        fprintf(w->log, "%s\n", buf);
        fflush(w->log);
    }
    ag_reports_log(w->agent, w, 2, buf, strlen(buf));
}

/* The worker cannot be started: report it as exited with code (127 not found, 126 not
 * executable or refused, 1 retryable) so that the coordinator fails the attempt instead of
 * waiting. The reason goes to the agent's log and, as an output line of the rank, to the
 * job's logs, and with the exit to the coordinator (WorkerStatus.exit_reason). */
static void fail_start(ag_worker *w, int code, const char *why)
{
    snprintf(w->exit_reason, sizeof(w->exit_reason), "%s", why);
    ZT_ERROR("agent", "cannot start rank %d of attempt %lld: %s", w->rank, (long long)w->attempt_id,
             why);
    agent_line(w, "cannot start rank %d of attempt %lld: %s", w->rank, (long long)w->attempt_id,
               why);
    uv_timer_stop(&w->timer);
    w->proc_exited = true;
    w->exit_code = code;
    w->exit_signal = 0;
    w->state = AGW_EXITED;
    w->phase = ZT__V1__WORKER_PHASE__WORKER_PHASE_EXITED;
    ag_heartbeat_soon(w->agent, 0);
    if (!w->desired) ag_worker_forget(w);
}

/* ---- preparation ------------------------------------------------------------------------- */

static void prep_next(ag_worker *w);

static void on_prep_timer(uv_timer_t *t)
{
    ag_worker *w = t->data;
    if (w->state == AGW_PREPARING && !w->gone && !w->prep_call) prep_next(w);
}

static void prep_retry(ag_worker *w, uint64_t ms)
{
    uv_timer_start(&w->timer, on_prep_timer, ms, 0);
}

/* A failed spec or rendezvous call: warn once per streak, retry with backoff. A stale attempt
 * (FAILED_PRECONDITION, NOT_FOUND) waits for the desired set to drop it. */
static void prep_failed(ag_worker *w, const char *what, zt_rpc_code code, const char *msg)
{
    w->prep_failures++;
    bool stale = code == ZT_RPC_FAILED_PRECONDITION || code == ZT_RPC_NOT_FOUND;
    if (w->prep_failures == 1 || w->prep_failures % 20 == 0)
        ZT_WARN("agent", "rank %d of attempt %lld: %s failed (%s: %s); %s", w->rank,
                (long long)w->attempt_id, what, zt_rpc_code_name(code), msg,
                stale ? "waiting for the coordinator to drop the attempt" : "retrying");
    prep_retry(w, stale ? 2000 : backoff_ms(w->prep_failures));
}

/* The start of a preparation call's reply: false, with w released, when the worker no longer
 * waits for it, or when the call failed (retried by prep_failed). */
static bool prep_reply_wanted(ag_worker *w, const char *what, zt_rpc_code code, const char *msg)
{
    w->prep_call = false;
    if (w->gone || w->state != AGW_PREPARING) {
        ag_worker_unref(w);
        return false;
    }
    if (code != ZT_RPC_OK) {
        prep_failed(w, what, code, msg);
        ag_worker_unref(w);
        return false;
    }
    return true;
}

/* Whether the attempt may run here: every path of the job, and the checkpoint it resumes
 * from, must resolve inside the agent's allowed roots (agent/confine.h). When not, the worker
 * is failed with AG_EXIT_REFUSED and the reason, and false returned. */
static bool job_confined(ag_worker *w, const char *job_json)
{
    zt_agent *a = w->agent;
    zt_job *job = zt_malloc(sizeof(*job));
    if (!job) {
        fail_start(w, 1, "out of memory checking the job's paths");
        return false;
    }
    char origin[64];
    snprintf(origin, sizeof(origin), "job %lld", (long long)w->job_id);
    zt_err err = {0};
    zt_status st = zt_job_parse_inline(job, job_json, origin, w->dir, &err);
    if (st != ZT_OK)
        zt_err_prefix(&err, "cannot check the paths of the job the coordinator sent");
    else
        st = zt_confine_check_job(job, w->resume_path, a->cfg.allow_paths, a->cfg.n_allow_paths,
                                  origin, &err);
    zt_free(job);
    if (st == ZT_OK) return true;
    fail_start(w, st == ZT_ERR_NOMEM ? 1 : AG_EXIT_REFUSED, zt_err_msg(&err));
    return false;
}

/* Hands the attempt directory (or a file in it) to the user workers run as. */
static int give_to_worker_user(const zt_agent *a, const char *path)
{
    if (!a->cfg.drop_privileges) return 0;
    return chown(path, a->cfg.run_as_uid, a->cfg.run_as_gid);
}

static void on_spec(zt_agent *a, void *ctx, zt_rpc_code code, const char *msg, void *reply,
                    uint64_t elapsed_ns)
{
    (void)elapsed_ns;
    ag_worker *w = ctx;
    if (!prep_reply_wanted(w, "GetAttemptSpec", code, msg)) return;
    const Zt__V1__AttemptSpec *s = reply;
    if (zt_mkdirs(w->dir, false, NULL, 0) != 0 || give_to_worker_user(a, w->dir) != 0) {
        char why[AG_PATH_MAX + 128];
        snprintf(why, sizeof(why), "cannot create %s: %s (check --work-dir)", w->dir,
                 strerror(errno));
        fail_start(w, 1, why);
    } else if (!s->job_json || !s->job_json[0]) {
        fail_start(w, 1, "the coordinator sent an empty job spec");
    } else if (!job_confined(w, s->job_json)) {
        /* refused: failed with the reason */
    } else if (write_file(w->job_path, s->job_json) != 0 ||
               give_to_worker_user(a, w->job_path) != 0) {
        char why[AG_PATH_MAX + 128];
        snprintf(why, sizeof(why), "cannot write %s: %s", w->job_path, strerror(errno));
        fail_start(w, 1, why);
    } else {
        w->prep = AGP_RDZV;
        w->prep_failures = 0;
        prep_next(w);
    }
    ag_worker_unref(w);
}

static bool rdzv_value_ok(const uint8_t *v, size_t n)
{
    if (n < 8 || n >= 300 || memcmp(v, "tcp://", 6) != 0) return false;
    for (size_t i = 0; i < n; i++)
        if (v[i] <= ' ' || v[i] >= 127) return false;
    return true;
}

static void spawn(ag_worker *w);

static void on_rdzv(zt_agent *a, void *ctx, zt_rpc_code code, const char *msg, void *reply,
                    uint64_t elapsed_ns)
{
    (void)a;
    (void)elapsed_ns;
    ag_worker *w = ctx;
    if (!prep_reply_wanted(w, w->rank == 0 ? "publishing the rendezvous" : "the rendezvous", code,
                           msg))
        return;
    const Zt__V1__RendezvousReply *r = reply;
    if (w->rank == 0) {
        w->prep = AGP_SPAWN;
        spawn(w);
        ag_worker_unref(w);
        return;
    }
    const Zt__V1__RendezvousEntry *e0 = NULL;
    for (size_t i = 0; i < r->n_entries; i++)
        if (r->entries[i]->rank == 0) e0 = r->entries[i];
    if (!e0) {
        /* rank 0 is not there yet: ask again (each call waits on the coordinator) */
        if (++w->prep_failures % 12 == 0)
            ZT_INFO("agent",
                    "rank %d of attempt %lld: still waiting for rank 0's rendezvous address (%d s)",
                    w->rank, (long long)w->attempt_id, w->prep_failures * AG_RDZV_WAIT_MS / 1000);
        prep_retry(w, 10);
    } else if (!rdzv_value_ok(e0->value.data, e0->value.len)) {
        fail_start(w, 1, "rank 0's rendezvous entry is not a tcp://host:port address");
    } else {
        memcpy(w->rendezvous, e0->value.data, e0->value.len);
        w->rendezvous[e0->value.len] = '\0';
        w->prep = AGP_SPAWN;
        spawn(w);
    }
    ag_worker_unref(w);
}

static void rdzv_start(ag_worker *w)
{
    zt_agent *a = w->agent;
    Zt__V1__RendezvousRequest q = ZT__V1__RENDEZVOUS_REQUEST__INIT;
    q.attempt_id = w->attempt_id;
    q.rank = w->rank;
    int timeout = 10000;
    if (w->rank == 0) {
        if (!w->rendezvous[0]) {
            int port = zt_net_pick_port(a->cfg.advertise_host);
            if (port <= 0) {
                char why[512];
                snprintf(why, sizeof(why), "no free TCP port for the rendezvous on %s: %s",
                         a->cfg.advertise_host, strerror(errno));
                fail_start(w, 1, why);
                return;
            }
            bool v6 = strchr(a->cfg.advertise_host, ':') != NULL;
            snprintf(w->rendezvous, sizeof(w->rendezvous), "tcp://%s%s%s:%d", v6 ? "[" : "",
                     a->cfg.advertise_host, v6 ? "]" : "", port);
        }
        q.value.data = (uint8_t *)w->rendezvous;
        q.value.len = strlen(w->rendezvous);
        q.wait = ZT__V1__RENDEZVOUS_REQUEST__WAIT__WAIT_NONE;
    } else {
        q.wait = ZT__V1__RENDEZVOUS_REQUEST__WAIT__WAIT_RANK0;
        q.wait_ms = AG_RDZV_WAIT_MS;
        timeout = AG_RDZV_WAIT_MS + 3000;
    }
    w->prep_call = true;
    w->refs++;
    ag_rpc_call(a, "Rendezvous", &q.base, &zt__v1__rendezvous_reply__descriptor, timeout, on_rdzv,
                w);
}

static void prep_next(ag_worker *w)
{
    if (w->agent->stopping) return;
    switch (w->prep) {
    case AGP_SPEC: {
        Zt__V1__GetAttemptSpecRequest q = ZT__V1__GET_ATTEMPT_SPEC_REQUEST__INIT;
        q.attempt_id = w->attempt_id;
        w->prep_call = true;
        w->refs++;
        ag_rpc_call(w->agent, "GetAttemptSpec", &q.base, &zt__v1__attempt_spec__descriptor, 10000,
                    on_spec, w);
        break;
    }
    case AGP_RDZV:
        if (w->world_size <= 1) {
            w->prep = AGP_SPAWN;
            spawn(w);
        } else {
            rdzv_start(w);
        }
        break;
    case AGP_SPAWN:
        spawn(w);
        break;
    }
}

/* ---- output and reports ---------------------------------------------------------------- */

static void on_report_line(ag_worker *w, const char *line)
{
    zt_reportline *r = zt_malloc(sizeof(*r));
    if (!r) return;
    zt_err err = {0};
    if (zt_reportline_parse(line, r, &err) != ZT_OK) {
        ZT_DEBUG("agent", "rank %d: %s", w->rank, zt_err_msg(&err));
    } else if (r->rank != w->rank) {
        ZT_WARN("agent", "rank %d of attempt %lld wrote a report for rank %d; ignored", w->rank,
                (long long)w->attempt_id, r->rank);
    } else {
        switch (r->kind) {
        case ZT_REPORTLINE_PHASE:
            w->phase = r->phase;
            break;
        case ZT_REPORTLINE_STEP:
            w->phase = w->phase ? w->phase : ZT__V1__WORKER_PHASE__WORKER_PHASE_TRAINING;
            w->step = r->step;
            w->coll_seq = r->coll_seq;
            w->loss = r->loss;
            w->tokens_per_s = r->tokens_per_s;
            w->mem_bytes = r->mem_bytes;
            if (r->mem_peak > w->mem_peak) w->mem_peak = r->mem_peak;
            ag_reports_step(w->agent, w, r);
            break;
        case ZT_REPORTLINE_CKPT:
            ag_reports_ckpt(w->agent, w, r);
            break;
        case ZT_REPORTLINE_COMMIT:
            ZT_INFO("agent", "attempt %lld: checkpoint of step %lld committed at %s",
                    (long long)w->attempt_id, (long long)r->step, r->path);
            break;
        case ZT_REPORTLINE_REMOVED:
            ZT_INFO("agent", "attempt %lld: checkpoint of step %lld removed (keep_checkpoints): %s",
                    (long long)w->attempt_id, (long long)r->step, r->path);
            ag_reports_ckpt_removed(w->agent, w, r);
            break;
        case ZT_REPORTLINE_WAIT:
            w->wait = r->wait;
            ZT_INFO("agent", "attempt %lld: rank %d waits in %s #%lld (step %lld, %s) for %.1f s",
                    (long long)w->attempt_id, w->rank, r->wait.op, (long long)r->wait.seq,
                    (long long)r->wait.step, r->wait.part, (double)r->wait.waited_ms / 1000.0);
            ag_heartbeat_soon(w->agent, 100);
            break;
        case ZT_REPORTLINE_WAIT_END:
            if (w->wait.waiting && w->wait.seq == r->wait.seq) {
                w->wait.waiting = false;
                ag_heartbeat_soon(w->agent, 100);
            }
            break;
        case ZT_REPORTLINE_CKPT_BAD:
            snprintf(w->bad_ckpt, sizeof(w->bad_ckpt), "%s", r->path);
            snprintf(w->bad_ckpt_why, sizeof(w->bad_ckpt_why), "%s", r->why);
            ZT_WARN("agent", "attempt %lld: rank %d found checkpoint %s bad: %s",
                    (long long)w->attempt_id, w->rank, r->path, r->why);
            break;
        }
    }
    zt_free(r);
}

static void on_line(ag_stream *s, const char *line, size_t len)
{
    ag_worker *w = s->w;
    if (s->kind == 2) {
        on_report_line(w, line);
        return;
    }
    if (w->log) {
        fwrite(line, 1, len, w->log);
        fputc('\n', w->log);
    }
    ag_reports_log(w->agent, w, s->kind == 0 ? 1 : 2, line, len);
}

static void feed(ag_stream *s, const char *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = buf[i];
        if (c == '\n' || s->len == AG_LINE_MAX) {
            s->line[s->len] = '\0';
            if (s->len && s->line[s->len - 1] == '\r') s->line[--s->len] = '\0';
            on_line(s, s->line, s->len);
            s->len = 0;
            if (c == '\n') continue;
        }
        s->line[s->len++] = c == '\0' ? ' ' : c;
    }
}

static void check_exit_ready(ag_worker *w, bool hold_over);

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    ag_stream *s = h->data;
    buf->base = s->rbuf;
    buf->len = sizeof(s->rbuf);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    ag_stream *s = st->data;
    ag_worker *w = s->w;
    if (n > 0) {
        feed(s, buf->base, (size_t)n);
        if (w->log && s->kind != 2) fflush(w->log);
        return;
    }
    if (n == 0) return; /* EAGAIN */
    if (s->len) {
        s->line[s->len] = '\0';
        on_line(s, s->line, s->len);
        s->len = 0;
    }
    if (w->log) fflush(w->log);
    close_stream(s);
    check_exit_ready(w, false);
}

/* ---- exit ------------------------------------------------------------------------------- */

static void on_exit_hold(uv_timer_t *t)
{
    check_exit_ready(t->data, true);
}

/* Reports the exit once the pipes are drained and the shard reports settled (or the hold
 * ran out), so the coordinator hears of every checkpoint before it hears of the exit. */
static void check_exit_ready(ag_worker *w, bool hold_over)
{
    if (!w->proc_exited || w->state == AGW_EXITED || w->gone) return;
    bool pipes = w->out.open || w->err.open || w->rep.open;
    if (!hold_over && (pipes || w->ckpt_pending > 0)) return;
    if (pipes)
        ZT_WARN(
            "agent",
            "rank %d of attempt %lld: output pipes still open %d s after the exit (a child process holds them?); closing them",
            w->rank, (long long)w->attempt_id, AG_EXIT_HOLD_MS / 1000);
    close_stream(&w->out);
    close_stream(&w->err);
    close_stream(&w->rep);
    uv_timer_stop(&w->timer);
    if (w->log) {
        fclose(w->log);
        w->log = NULL;
    }
    w->state = AGW_EXITED;
    w->phase = ZT__V1__WORKER_PHASE__WORKER_PHASE_EXITED;
    zt_agent *a = w->agent;
    ag_reports_log_drops(a, w);
    ag_reports_flush(a);
    ag_heartbeat_soon(a, 0);
    if (!w->desired && !a->stopping)
        ag_worker_forget(w);
    else if (a->stopping)
        ag_check_stopped(a);
}

static void on_proc_exit(uv_process_t *p, int64_t status, int sig)
{
    ag_worker *w = p->data;
    w->proc_exited = true;
    w->exit_code = (int)status;
    w->exit_signal = sig;
    kill(-w->pid, SIGKILL); /* whatever it left behind in its process group */
    if (sig)
        ZT_INFO("agent", "rank %d of attempt %lld (pid %d) was killed by signal %d (%s)", w->rank,
                (long long)w->attempt_id, w->pid, sig, strsignal(sig));
    else
        ZT_INFO("agent", "rank %d of attempt %lld (pid %d) exited with code %d", w->rank,
                (long long)w->attempt_id, w->pid, (int)status);
    uv_close((uv_handle_t *)p, on_worker_handle_closed);
    uv_timer_start(&w->timer, on_exit_hold, AG_EXIT_HOLD_MS, 0);
    check_exit_ready(w, false);
}

void ag_worker_ckpt_settled(ag_worker *w)
{
    w->ckpt_pending--;
    check_exit_ready(w, false);
}

/* ---- spawn ----------------------------------------------------------------------------- */

static int stream_init(ag_worker *w, ag_stream *s, int kind)
{
    s->w = w;
    s->kind = kind;
    s->len = 0;
    int rc = uv_pipe_init(&w->agent->loop, &s->pipe, 0);
    if (rc == 0) {
        s->pipe.data = s;
        w->handles++;
    }
    return rc;
}

static void spawn(ag_worker *w)
{
    zt_agent *a = w->agent;
    char why[AG_PATH_MAX + 256];
    char logpath[AG_PATH_MAX + 32];
    snprintf(logpath, sizeof(logpath), "%s/rank_%05d.log", w->dir, w->rank);
    w->log = fopen(logpath, "a");
    if (!w->log) {
        snprintf(why, sizeof(why), "cannot open the rank log %s: %s", logpath, strerror(errno));
        fail_start(w, 1, why);
        return;
    }
    setvbuf(w->log, NULL, _IOFBF, 1 << 16);
    char **args, **env;
    if (!ag_worker_command(w, &args, &env)) {
        fail_start(w, 1, "out of memory building the worker's command line");
        return;
    }
    int rc = stream_init(w, &w->out, 0);
    if (rc == 0) rc = stream_init(w, &w->err, 1);
    if (rc == 0) rc = stream_init(w, &w->rep, 2);
    uv_stdio_container_t stdio[4];
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&w->out.pipe;
    stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[2].data.stream = (uv_stream_t *)&w->err.pipe;
    stdio[3].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[3].data.stream = (uv_stream_t *)&w->rep.pipe;
    uv_process_options_t o;
    memset(&o, 0, sizeof(o));
    o.exit_cb = on_proc_exit;
    o.file = args[0];
    o.args = args;
    o.env = env;
    o.cwd = w->dir;
    /* own session: a terminal's Ctrl-C reaches the agent, which stops workers in order */
    o.flags = UV_PROCESS_DETACHED;
    o.stdio_count = 4;
    o.stdio = stdio;
    w->proc.data = w;
    if (rc == 0) {
        rc = uv_spawn(&a->loop, &w->proc, &o);
        w->proc_started = true;
        w->handles++;
    }
    ag_strv_free(args);
    ag_strv_free(env);
    if (rc != 0) {
        snprintf(why, sizeof(why), "cannot spawn %s: %s",
                 a->cfg.exec_wrapper ? a->cfg.exec_wrapper : a->cfg.worker, uv_strerror(rc));
        close_stream(&w->out);
        close_stream(&w->err);
        close_stream(&w->rep);
        if (w->proc_started && !uv_is_closing((uv_handle_t *)&w->proc))
            uv_close((uv_handle_t *)&w->proc, on_worker_handle_closed);
        w->proc_started = false;
        fail_start(w, rc == UV_ENOENT ? 127 : rc == UV_EACCES ? 126 : 1, why);
        return;
    }
    w->pid = w->proc.pid;
    w->started_ms = zt_wall_ms();
    w->state = AGW_RUNNING;
    w->phase = ZT__V1__WORKER_PHASE__WORKER_PHASE_STARTING;
    ag_stream *ss[3] = {&w->out, &w->err, &w->rep};
    for (int i = 0; i < 3; i++) {
        ss[i]->open = uv_read_start((uv_stream_t *)&ss[i]->pipe, on_alloc, on_read) == 0;
        if (!ss[i]->open) close_stream(ss[i]);
    }
    fprintf(w->log, "[zagent] rank %d of %d, attempt %lld of job %lld (%s): pid %d%s%s%s%s\n",
            w->rank, w->world_size, (long long)w->attempt_id, (long long)w->job_id,
            w->job_name ? w->job_name : "", w->pid, w->rendezvous[0] ? ", rendezvous " : "",
            w->rendezvous, w->resume_path && w->resume_path[0] ? ", resuming from " : "",
            w->resume_path ? w->resume_path : "");
    fflush(w->log);
    ZT_INFO("agent", "started rank %d/%d of attempt %lld (job %lld %s) as pid %d%s%s", w->rank,
            w->world_size, (long long)w->attempt_id, (long long)w->job_id,
            w->job_name ? w->job_name : "", w->pid,
            w->resume_path && w->resume_path[0] ? ", resuming from " : "",
            w->resume_path ? w->resume_path : "");
    ag_heartbeat_soon(a, 0);
}

/* ---- life cycle --------------------------------------------------------------------------- */

static char *dup_or_null(const char *s)
{
    return s && s[0] ? zt_strdup(s) : NULL;
}

ag_worker *ag_worker_new(zt_agent *a, const Zt__V1__DesiredWorker *d)
{
    ag_worker *w = zt_calloc(1, sizeof(*w));
    if (!w) {
        ZT_ERROR("agent", "out of memory for rank %d of attempt %lld; will retry", d->rank,
                 (long long)d->attempt_id);
        return NULL;
    }
    w->agent = a;
    w->job_id = d->job_id;
    w->attempt_id = d->attempt_id;
    w->rank = d->rank;
    w->world_size = d->world_size > 0 ? d->world_size : 1;
    w->local_rank = d->local_rank;
    w->local_world_size = d->local_world_size > 0 ? d->local_world_size : 1;
    w->device_index = d->device_index;
    w->device = d->device == ZT__V1__DEVICE__DEVICE_CUDA ? ZT_DEVICE_CUDA : ZT_DEVICE_CPU;
    w->resume_path = dup_or_null(d->resume_path);
    w->job_name = dup_or_null(d->job_name);
    w->desired = true;
    if (d->n_env) {
        w->env = zt_calloc(d->n_env, sizeof(*w->env));
        for (size_t i = 0; w->env && i < d->n_env; i++) {
            const char *n = d->env[i]->name, *v = d->env[i]->value ? d->env[i]->value : "";
            /* only plain names: the coordinator's list must not smuggle in "A=B=C" */
            if (!n || !n[0] || strchr(n, '=')) continue;
            char *kv = zt_asprintf("%s=%s", n, v);
            if (kv) w->env[w->n_env++] = kv;
        }
    }
    snprintf(w->dir, sizeof(w->dir), "%.*s/attempt_%lld", AG_PATH_MAX - 40, a->cfg.work_dir,
             (long long)d->attempt_id);
    snprintf(w->job_path, sizeof(w->job_path), "%s/job.json", w->dir);
    if (uv_timer_init(&a->loop, &w->timer) != 0) {
        worker_free(w);
        return NULL;
    }
    w->timer.data = w;
    w->handles = 1;
    w->next = a->workers;
    a->workers = w;
    ZT_INFO("agent", "desired: rank %d/%d of attempt %lld (job %lld %s)%s%s", w->rank,
            w->world_size, (long long)w->attempt_id, (long long)w->job_id,
            w->job_name ? w->job_name : "", w->resume_path ? ", resume from " : "",
            w->resume_path ? w->resume_path : "");
    prep_next(w);
    return w;
}

static void on_grace(uv_timer_t *t)
{
    ag_worker *w = t->data;
    if (w->proc_started && !w->proc_exited && w->pid > 0) {
        ZT_WARN(
            "agent",
            "rank %d of attempt %lld (pid %d) did not stop within %d ms of SIGTERM; sending SIGKILL",
            w->rank, (long long)w->attempt_id, w->pid, w->agent->cfg.stop_grace_ms);
        kill(-w->pid, SIGKILL);
        w->kill_sent = true;
    }
}

void ag_worker_stop(ag_worker *w, bool hard)
{
    switch (w->state) {
    case AGW_PREPARING:
        ag_worker_forget(w);
        return;
    case AGW_RUNNING:
        if (w->proc_exited) return; /* the exit is being reported */
        ZT_INFO("agent", "stopping rank %d of attempt %lld (pid %d)%s", w->rank,
                (long long)w->attempt_id, w->pid, hard ? " with SIGKILL" : "");
        w->state = AGW_STOPPING;
        kill(-w->pid, hard ? SIGKILL : SIGTERM);
        if (hard)
            w->kill_sent = true;
        else
            uv_timer_start(&w->timer, on_grace, (uint64_t)w->agent->cfg.stop_grace_ms, 0);
        return;
    case AGW_STOPPING:
        if (hard && !w->proc_exited && !w->kill_sent) {
            kill(-w->pid, SIGKILL);
            w->kill_sent = true;
        }
        return;
    case AGW_EXITED:
        return;
    }
}

void ag_worker_undesired(ag_worker *w)
{
    w->desired = false;
    switch (w->state) {
    case AGW_PREPARING:
        ZT_INFO("agent", "rank %d of attempt %lld is no longer desired; not starting it", w->rank,
                (long long)w->attempt_id);
        ag_worker_forget(w);
        break;
    case AGW_RUNNING:
        ag_worker_stop(w, false);
        break;
    case AGW_STOPPING:
        break;
    case AGW_EXITED:
        ag_worker_forget(w);
        break;
    }
}

void ag_worker_status(ag_worker *w, Zt__V1__WorkerStatus *s)
{
    s->job_id = w->job_id;
    s->attempt_id = w->attempt_id;
    s->rank = w->rank;
    s->pid = w->pid;
    s->phase = w->state == AGW_EXITED ? ZT__V1__WORKER_PHASE__WORKER_PHASE_EXITED
                                      : (Zt__V1__WorkerPhase)(w->phase ? w->phase : 1);
    s->step = w->step;
    s->collective_seq = w->coll_seq;
    s->memory_bytes = w->mem_bytes;
    s->peak_memory_bytes = w->mem_peak;
    if (w->device != ZT_DEVICE_CUDA && w->pid > 0 && !w->proc_exited) {
        int64_t rss, hwm;
        if (ag_proc_memory(w->pid, &rss, &hwm)) {
            s->memory_bytes = rss;
            s->peak_memory_bytes = hwm;
        }
    }
    s->tokens_per_s = w->tokens_per_s;
    s->loss = w->loss;
    if (w->state == AGW_EXITED) {
        s->exit_code = w->exit_code;
        s->exit_signal = w->exit_signal;
    }
    s->device_index = w->device_index;
    s->started_ms = w->started_ms;
    if (w->wait.waiting && w->state != AGW_EXITED) {
        zt__v1__collective_wait__init(&w->pb_wait);
        w->pb_wait.op = w->wait.op;
        w->pb_wait.seq = w->wait.seq;
        w->pb_wait.step = w->wait.step;
        w->pb_wait.part = w->wait.part;
        w->pb_wait.prev_op = w->wait.prev_op;
        w->pb_wait.prev_seq = w->wait.prev_seq;
        w->pb_wait.waited_ms = w->wait.waited_ms;
        s->wait = &w->pb_wait;
    }
    if (w->bad_ckpt[0]) {
        s->bad_checkpoint = w->bad_ckpt;
        s->bad_checkpoint_reason = w->bad_ckpt_why;
    }
    if (w->exit_reason[0] && w->state == AGW_EXITED) s->exit_reason = w->exit_reason;
}
