/* zerotrain: `zctl run --nproc N job.json` — trains locally with no coordinator, like
 * `torchrun --standalone`: starts N zworker processes with a loopback rendezvous, keeps each
 * rank's output in a log file, shows a progress bar on a terminal (otherwise passes rank 0's
 * step lines through), and when a rank fails stops the others and reports the first failure. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cliopt.h"
#include "cli/commands.h"
#include "common/alloc.h"
#include "common/fsutil.h"
#include "common/hangdiag.h"
#include "common/jobfile.h"
#include "common/netutil.h"
#include "common/reportline.h"
#include "common/settings.h"
#include "common/timeutil.h"
#include "engine/ckpt.h"
#include "engine/engine.h"

ZT_COMMAND(run, zt_cmd_run, "train locally on N worker processes (no coordinator)")

#define TAIL_LINES 12
#define LINE_MAX_LEN 4096

typedef struct rank_proc {
    pid_t pid;
    int fd[3];          /* read ends of stdout, stderr and ZT_REPORT_FD; -1 when closed */
    FILE *log;
    char *partial[3];   /* unterminated line per stream */
    size_t partial_len[3];
    zt_hang_wait wait;  /* the collective it waits in (its stall reports) */
    int64_t step;       /* the last step it reported */
    char *tail[TAIL_LINES];
    bool tail_shown[TAIL_LINES]; /* already printed on the terminal */
    int tail_next;
    bool stopped;                /* zctl sent it SIGTERM or SIGKILL */
    int exited;
    int status;
} rank_proc;

static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
    got_signal = sig;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: zctl run [--nproc N] [--resume CKPT] [--log-dir DIR] [--timeout-ms MS] JOB.json\n"
            "\n"
            "Trains the job locally on N worker processes (default: resources.ranks of the job)\n"
            "that rendezvous on loopback; no coordinator is needed.\n"
            "\n"
            "  --nproc N        number of ranks (the batch triad is re-resolved for N)\n"
            "  --resume CKPT    a checkpoint directory (its newest complete step) or a step_*\n"
            "                   directory; may be written by another rank count or ZeRO stage\n"
            "  --log-dir DIR    where rank_NNNNN.log files go (default CHECKPOINT_DIR/logs)\n"
            "  --timeout-ms MS  collective timeout for the workers (default 300000)\n"
            "\n"
            "On a terminal a progress bar shows step, loss, tokens/s and ETA; otherwise rank 0's\n"
            "'step=<n> loss=<x> ...' lines are printed as they come.\n");
}

static const char *find_worker(char *buf, size_t n)
{
    const char *env = zt_setting_raw(ZT_SET_WORKER);
    if (env)
        return env;
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len > 0) {
        self[len] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            snprintf(buf, n, "%.*s/zworker", (int)(n - 16), self);
            if (access(buf, X_OK) == 0)
                return buf;
        }
    }
    return "zworker"; /* from PATH */
}

/* ---- progress ---- */

typedef struct progress {
    int tty;
    int64_t total, step, start_step;
    double loss, tok_s, val_loss;
    double t0;
    int drawn;
} progress;

static void fmt_duration(double s, char *buf, size_t n)
{
    if (s < 0 || s > 1e7) {
        snprintf(buf, n, "--:--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static void progress_draw(progress *p)
{
    if (!p->tty || p->step <= 0)
        return;
    int width = 30;
    double frac = p->total > 0 ? (double)p->step / (double)p->total : 0;
    if (frac > 1)
        frac = 1;
    int filled = (int)(frac * width);
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '=' : i == filled ? '>' : ' ';
    bar[width] = '\0';
    double el = zt_now_s() - p->t0;
    int64_t done = p->step - p->start_step;
    double eta = done > 0 ? el / (double)done * (double)(p->total - p->step) : -1;
    char etas[32], els[32];
    fmt_duration(eta, etas, sizeof(etas));
    fmt_duration(el, els, sizeof(els));
    fprintf(stdout, "\r\033[Kstep %lld/%lld [%s] %3.0f%% loss %.4f", (long long)p->step,
            (long long)p->total, bar, frac * 100, p->loss);
    if (p->val_loss >= 0)
        fprintf(stdout, " val %.4f", p->val_loss);
    fprintf(stdout, " | %.0f tok/s | %s elapsed | ETA %s", p->tok_s, els, etas);
    fflush(stdout);
    p->drawn = 1;
}

static void progress_clear(progress *p)
{
    if (p->tty && p->drawn) {
        fprintf(stdout, "\r\033[K");
        fflush(stdout);
    }
}

static void progress_step_line(progress *p, const char *line)
{
    zt_reportline *r = zt_malloc(sizeof(*r));
    zt_err err = {0};
    if (r && zt_reportline_parse_step(line, r, &err) == ZT_OK) {
        p->step = r->step;
        p->loss = NAN; /* a loss that is not a finite number (nan, inf) shows as nan */
        p->tok_s = r->tokens_per_s;
        for (int i = 0; i < r->n_values; i++) {
            if (strcmp(r->values[i].key, "loss") == 0) p->loss = r->values[i].value;
            if (strcmp(r->values[i].key, "val_loss") == 0) p->val_loss = r->values[i].value;
        }
        if (p->start_step < 0)
            p->start_step = p->step - 1;
    }
    zt_free(r);
}

/* ---- output handling ---- */

static void keep_tail(rank_proc *r, const char *line, bool shown)
{
    zt_free(r->tail[r->tail_next]);
    r->tail[r->tail_next] = zt_strdup(line);
    r->tail_shown[r->tail_next] = shown;
    r->tail_next = (r->tail_next + 1) % TAIL_LINES;
}

/* A report line (stream 2): what a hang diagnosis needs, the rest is the agent's business. */
static void handle_report(rank_proc *r, const char *line)
{
    zt_reportline *rl = zt_malloc(sizeof(*rl));
    zt_err err = {0};
    if (!rl || zt_reportline_parse(line, rl, &err) != ZT_OK) {
        zt_free(rl);
        return;
    }
    if (rl->kind == ZT_REPORTLINE_STEP) {
        r->step = rl->step;
    } else if (rl->kind == ZT_REPORTLINE_WAIT) {
        r->wait = rl->wait;
    } else if (rl->kind == ZT_REPORTLINE_WAIT_END && rl->wait.seq == r->wait.seq) {
        r->wait.waiting = false;
    }
    zt_free(rl);
}

static void handle_line(rank_proc *r, int rank, int stream, const char *line, progress *p)
{
    if (stream == 2) {
        handle_report(r, line);
        return;
    }
    if (r->log) {
        fprintf(r->log, "%s\n", line);
        fflush(r->log);
    }
    bool is_step = stream == 0 && strncmp(line, "step=", 5) == 0;
    if (rank == 0 && is_step) {
        keep_tail(r, line, !p->tty);
        progress_step_line(p, line);
        if (p->tty) {
            progress_draw(p);
        } else {
            fprintf(stdout, "%s\n", line);
            fflush(stdout);
        }
        return;
    }
    /* logs: on a terminal only warnings and errors (above the bar); otherwise rank 0's log
     * and every rank's warnings and errors */
    bool important = strstr(line, " WARN ") || strstr(line, " ERROR ");
    bool show = p->tty ? important : (rank == 0 || important);
    keep_tail(r, line, show);
    if (show) {
        progress_clear(p);
        fprintf(stderr, "%s\n", line);
        fflush(stderr);
        progress_draw(p);
    }
}

/* Hands on an unterminated last line. */
static void flush_partial(rank_proc *r, int rank, int stream, progress *p)
{
    if (r->partial_len[stream]) {
        r->partial[stream][r->partial_len[stream]] = '\0';
        handle_line(r, rank, stream, r->partial[stream], p);
        r->partial_len[stream] = 0;
    }
}

/* Reads what is available on fd (non-blocking); returns 1 after reading, 2 when nothing is
 * there now, 0 at EOF or error. */
static int drain(rank_proc *r, int rank, int stream, int fd, progress *p)
{
    char buf[8192];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return 2;
    if (n <= 0) {
        flush_partial(r, rank, stream, p);
        return 0;
    }
    for (ssize_t i = 0; i < n; i++) {
        char c = buf[i];
        if (!r->partial[stream])
            r->partial[stream] = zt_malloc(LINE_MAX_LEN + 1);
        if (!r->partial[stream])
            return 1;
        if (c == '\n' || r->partial_len[stream] == LINE_MAX_LEN) {
            r->partial[stream][r->partial_len[stream]] = '\0';
            handle_line(r, rank, stream, r->partial[stream], p);
            r->partial_len[stream] = 0;
            if (c == '\n')
                continue;
        }
        r->partial[stream][r->partial_len[stream]++] = c;
    }
    return 1;
}

static void describe_exit(int status, char *buf, size_t n)
{
    if (WIFEXITED(status))
        snprintf(buf, n, "exited with code %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, n, "ended with status %d", status);
}

/* Asks every live rank to stop (SIGTERM; SIGKILL after the deadline). */
static void stop_all(rank_proc *rp, int started, int sig)
{
    for (int r = 0; r < started; r++) {
        if (!rp[r].exited) {
            kill(rp[r].pid, sig);
            rp[r].stopped = true;
        }
    }
}

static pid_t spawn(const char *worker, const char *job, const char *resume, int rank, int world,
                   const char *rdzv, const char *session, const char *timeout,
                   const char *threads, int out[2], int errp[2], int rep[2])
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    /* child: stdout, stderr, and the report pipe as fd 3 (moved above every pipe first) */
    int rfd = fcntl(rep[1], F_DUPFD, 10);
    dup2(out[1], 1);
    dup2(errp[1], 2);
    close(out[0]);
    close(out[1]);
    close(errp[0]);
    close(errp[1]);
    close(rep[0]);
    close(rep[1]);
    if (rfd < 0 || dup2(rfd, 3) != 3) _exit(127);
    close(rfd);
    char rs[16], ws[16];
    snprintf(rs, sizeof(rs), "%d", rank);
    snprintf(ws, sizeof(ws), "%d", world);
    setenv("ZT_RANK", rs, 1);
    setenv("ZT_LOCAL_RANK", rs, 1);
    setenv("ZT_WORLD_SIZE", ws, 1);
    setenv("ZT_LOCAL_WORLD_SIZE", ws, 1);
    setenv("ZT_RENDEZVOUS", rdzv, 1);
    setenv("ZT_SESSION", session, 1);
    if (timeout)
        setenv("ZT_COMM_TIMEOUT_MS", timeout, 1);
    if (threads)
        setenv("OMP_NUM_THREADS", threads, 1);
    setenv("ZT_REPORT_FD", "3", 1);
    if (resume)
        execlp(worker, worker, "--resume", resume, job, (char *)NULL);
    else
        execlp(worker, worker, job, (char *)NULL);
    fprintf(stderr, "zctl run: cannot start the worker %s: %s (set ZT_WORKER to its path)\n",
            worker, strerror(errno));
    _exit(127);
}

int zt_cmd_run(int argc, char **argv)
{
    int nproc = 0;
    const char *job_path = NULL, *resume = NULL, *log_dir = NULL, *timeout = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int m;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if ((m = zt_cli_take_opt(argc, argv, &i, "--nproc", &v)) != 0 ||
                   (m = zt_cli_take_opt(argc, argv, &i, "-n", &v)) != 0) {
            if (m < 0 || zt_cli_parse_int("--nproc", v, 1, 4096, &nproc) != 0)
                return 2;
        } else if ((m = zt_cli_take_opt(argc, argv, &i, "--resume", &resume)) != 0 ||
                   (m = zt_cli_take_opt(argc, argv, &i, "--log-dir", &log_dir)) != 0) {
            if (m < 0)
                return 2;
        } else if ((m = zt_cli_take_opt(argc, argv, &i, "--timeout-ms", &v)) != 0) {
            int ms;
            if (m < 0 || zt_cli_parse_int("--timeout-ms", v, 1, INT_MAX, &ms) != 0)
                return 2;
            timeout = v;
        } else if (a[0] == '-') {
            zt_cli_error("run: unknown option %s; see 'zctl run --help'", a);
            return 2;
        } else if (!job_path) {
            job_path = a;
        } else {
            zt_cli_error("run: one job file only (got %s and %s)", job_path, a);
            return 2;
        }
    }
    if (!job_path) {
        usage(stderr);
        return 2;
    }
    /* validate everything we can before starting processes */
    zt_err err;
    zt_err_clear(&err);
    zt_job *job = zt_calloc(1, sizeof(*job));
    if (!job) {
        zt_cli_error("out of memory");
        return 1;
    }
    if (zt_job_load(job, job_path, &err) != ZT_OK) {
        zt_cli_error("%s", zt_err_msg(&err));
        zt_free(job);
        return 2;
    }
    if (nproc == 0)
        nproc = job->resources.ranks;
    char step_dir[ZT_PATH_MAX];
    if (resume) {
        zt_ckpt *ck = NULL;
        /* every shard present, of the recorded size, with a header that agrees with
         * meta.json (the workers verify the checksums as they load) */
        if (zt_ckpt_resolve(resume, step_dir, sizeof(step_dir), &err) != ZT_OK ||
            zt_ckpt_open(&ck, step_dir, &err) != ZT_OK ||
            zt_ckpt_adapt_job(job, step_dir, nproc, &err) != ZT_OK) {
            zt_ckpt_close(ck);
            zt_cli_error("%s", zt_err_msg(&err));
            zt_free(job);
            return 2;
        }
        zt_ckpt_close(ck);
        resume = step_dir;
    } else if (zt_job_resolve_batch(job, nproc, &err) != ZT_OK) {
        zt_cli_error("%s", zt_err_msg(&err));
        zt_free(job);
        return 2;
    }
    if (zt_engine_preflight(job, &err) != ZT_OK) {
        zt_cli_error("%s", zt_err_msg(&err));
        zt_free(job);
        return 2;
    }
    char logs[ZT_PATH_MAX + 16];
    if (log_dir)
        snprintf(logs, sizeof(logs), "%s", log_dir);
    else
        snprintf(logs, sizeof(logs), "%.*s/logs", ZT_PATH_MAX - 8, job->train.checkpoint_dir);
    if (zt_mkdirs(logs, false, NULL, 0) != 0) {
        zt_cli_error("cannot create the log directory %s: %s; pass --log-dir", logs,
                     strerror(errno));
        zt_free(job);
        return 1;
    }
    int64_t total_steps = job->train.steps;
    zt_free(job);

    char wbuf[PATH_MAX];
    const char *worker = find_worker(wbuf, sizeof(wbuf));
    int port = zt_net_pick_port("127.0.0.1");
    if (port < 0) {
        zt_cli_error("cannot find a free loopback port for the rendezvous: %s", strerror(errno));
        return 1;
    }
    char rdzv[64], session[64], threads_buf[24];
    snprintf(rdzv, sizeof(rdzv), "tcp://127.0.0.1:%d", port);
    /* the ranks share this machine's cores: each gets its share of threads, as zagent gives
     * each slot, unless the user chose a number */
    const char *threads = NULL;
    const char *omp = getenv("OMP_NUM_THREADS");
    if (!(omp && *omp)) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        snprintf(threads_buf, sizeof(threads_buf), "%ld", cpus > nproc ? cpus / nproc : 1);
        threads = threads_buf;
    }
    snprintf(session, sizeof(session), "run-%d-%lld", (int)getpid(), (long long)zt_wall_ms());

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    rank_proc *rp = zt_calloc((size_t)nproc, sizeof(*rp));
    if (!rp) {
        zt_cli_error("out of memory");
        return 1;
    }
    progress prog = {.tty = isatty(1), .total = total_steps, .start_step = -1, .val_loss = -1,
                     .t0 = zt_now_s()};
    int started = 0, rc = 0;
    for (int r = 0; r < nproc; r++) {
        int out[2], errp[2], rep[2];
        if (pipe(out) != 0 || pipe(errp) != 0 || pipe(rep) != 0) {
            zt_cli_error("cannot create pipes: %s", strerror(errno));
            rc = 1;
            break;
        }
        char lp[ZT_PATH_MAX + 64];
        snprintf(lp, sizeof(lp), "%s/rank_%05d.log", logs, r);
        rp[r].log = fopen(lp, "w");
        rp[r].pid =
            spawn(worker, job_path, resume, r, nproc, rdzv, session, timeout, threads, out, errp, rep);
        close(out[1]);
        close(errp[1]);
        close(rep[1]);
        int rd[3] = {out[0], errp[0], rep[0]};
        if (rp[r].pid < 0) {
            zt_cli_error("cannot start rank %d: %s", r, strerror(errno));
            for (int s = 0; s < 3; s++)
                close(rd[s]);
            rc = 1;
            break;
        }
        for (int s = 0; s < 3; s++) {
            rp[r].fd[s] = rd[s];
            fcntl(rd[s], F_SETFD, FD_CLOEXEC);
            fcntl(rd[s], F_SETFL, fcntl(rd[s], F_GETFL) | O_NONBLOCK);
        }
        started++;
    }

    int first_fail = -1, failed_status = 0;
    bool interrupted = false;
    double kill_deadline = 0;
    int alive = started;
    struct pollfd *pfd = zt_calloc((size_t)nproc * 3, sizeof(*pfd));
    while (alive > 0 && pfd) {
        if (got_signal && kill_deadline == 0) {
            progress_clear(&prog);
            fprintf(stderr, "zctl run: interrupted; stopping the workers\n");
            stop_all(rp, started, SIGTERM);
            kill_deadline = zt_now_s() + 5;
            interrupted = true;
            rc = 130;
        }
        if (kill_deadline > 0 && zt_now_s() > kill_deadline)
            stop_all(rp, started, SIGKILL);
        int np = 0;
        int map[3 * 4096][2];
        for (int r = 0; r < started; r++) {
            for (int s = 0; s < 3; s++) {
                if (rp[r].fd[s] < 0)
                    continue;
                pfd[np].fd = rp[r].fd[s];
                pfd[np].events = POLLIN;
                map[np][0] = r;
                map[np][1] = s;
                np++;
            }
        }
        if (np > 0) {
            int pr = poll(pfd, (nfds_t)np, 200);
            if (pr > 0) {
                for (int i = 0; i < np; i++) {
                    if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
                        continue;
                    int r = map[i][0], s = map[i][1];
                    if (!drain(&rp[r], r, s, pfd[i].fd, &prog)) {
                        close(pfd[i].fd);
                        rp[r].fd[s] = -1;
                    }
                }
            }
        } else {
            zt_sleep_ms(50);
        }
        /* reap */
        for (int r = 0; r < started; r++) {
            if (rp[r].exited)
                continue;
            int status;
            pid_t w = waitpid(rp[r].pid, &status, WNOHANG);
            if (w != rp[r].pid)
                continue;
            /* collect what is left in its pipes; a process it left behind may hold them open,
             * so take what is there and stop */
            for (int s = 0; s < 3; s++) {
                while (rp[r].fd[s] >= 0 && drain(&rp[r], r, s, rp[r].fd[s], &prog) == 1) {
                }
                flush_partial(&rp[r], r, s, &prog);
                if (rp[r].fd[s] >= 0)
                    close(rp[r].fd[s]);
                rp[r].fd[s] = -1;
            }
            rp[r].exited = 1;
            rp[r].status = status;
            alive--;
            bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
            /* zworker exits 3 when a peer failed: those are consequences; report the rank
             * whose own failure started it when it shows up. A rank that died of the signal
             * zctl sent it to stop is never the cause (a hung rank's peers time out, exit 3
             * and name it; then zctl kills it). */
            bool peer = WIFEXITED(status) && WEXITSTATUS(status) == 3;
            bool ours = rp[r].stopped && WIFSIGNALED(status) &&
                        (WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGKILL);
            bool first_was_peer = first_fail >= 0 && WIFEXITED(failed_status) &&
                                  WEXITSTATUS(failed_status) == 3;
            if (!ok && !ours && !interrupted && (first_fail < 0 || (first_was_peer && !peer))) {
                first_fail = r;
                failed_status = status;
            }
            if (!ok && kill_deadline == 0) {
                stop_all(rp, started, SIGTERM);
                kill_deadline = zt_now_s() + 10;
            }
        }
    }
    progress_clear(&prog);
    if (prog.tty && prog.step > 0)
        fprintf(stdout, "step %lld/%lld loss %.6f%s\n", (long long)prog.step,
                (long long)prog.total, prog.loss, first_fail < 0 ? "" : " (failed)");
    if (first_fail >= 0) {
        char how[128];
        describe_exit(failed_status, how, sizeof(how));
        bool lost_peer = WIFEXITED(failed_status) && WEXITSTATUS(failed_status) == 3;
        fprintf(stderr, "zctl run: rank %d %s%s; the other ranks were stopped.\n", first_fail,
                how, lost_peer ? " (it lost a peer; its last lines say which)" : "");
        /* a collective that timed out: who stopped and what the others waited in */
        bool any_wait = false;
        for (int r = 0; r < started; r++)
            any_wait = any_wait || rp[r].wait.waiting;
        zt_hang_rank *hr = any_wait ? zt_calloc((size_t)started, sizeof(*hr)) : NULL;
        if (hr) {
            for (int r = 0; r < started; r++) {
                hr[r].rank = r;
                hr[r].step = rp[r].step;
                hr[r].wait = rp[r].wait;
            }
            char why[1024];
            zt_hang_describe(hr, started, why, sizeof(why));
            fprintf(stderr, "zctl run: %s\n", why);
            zt_free(hr);
        }
        /* the lines not already shown above the bar or in the pass-through */
        rank_proc *f = &rp[first_fail];
        int unshown = 0;
        for (int i = 0; i < TAIL_LINES; i++)
            unshown += f->tail[i] && !f->tail_shown[i];
        if (unshown) {
            fprintf(stderr, "last lines of rank %d (full log: %s/rank_%05d.log):\n", first_fail,
                    logs, first_fail);
            for (int i = 0; i < TAIL_LINES; i++) {
                int k = (f->tail_next + i) % TAIL_LINES;
                if (f->tail[k] && !f->tail_shown[k])
                    fprintf(stderr, "  %s\n", f->tail[k]);
            }
        } else {
            fprintf(stderr, "its last lines are above (full log: %s/rank_%05d.log)\n", logs,
                    first_fail);
        }
        rc = WIFEXITED(failed_status) ? WEXITSTATUS(failed_status) : 128 + WTERMSIG(failed_status);
        if (rc == 0)
            rc = 1;
    } else if (rc == 0 && started < nproc) {
        rc = 1;
    }
    for (int r = 0; r < nproc; r++) {
        if (rp[r].log)
            fclose(rp[r].log);
        for (int i = 0; i < TAIL_LINES; i++)
            zt_free(rp[r].tail[i]);
        for (int s = 0; s < 3; s++)
            zt_free(rp[r].partial[s]);
    }
    zt_free(pfd);
    zt_free(rp);
    return rc;
}
