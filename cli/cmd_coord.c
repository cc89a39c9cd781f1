/* zerotrain: shared code of zctl's coordinator commands (see rpc_cli.h): connection from
 * the global options, error messages, JSON output, formatting, and following a job. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/probe.h"
#include "cli/rpc_cli.h"
#include "common/alloc.h"
#include "common/secretfile.h"
#include "common/timeutil.h"
#include "proto/pbjson.h"

#define CALL_TIMEOUT_MS 15000
#define PROBE_TIMEOUT_MS 1000

const char *zt_cli_token_file_origin = "--token-file";
const char *zt_cli_tls_ca_origin = "--tls-ca";
static char *token_read; /* the token file's token, kept for later connections */

zt_rpc_client *zt_cli_connect(void)
{
    return zt_cli_connect_opts(false);
}

zt_rpc_client *zt_cli_connect_opts(bool wait_for_ready)
{
    if (zt_cli.token_file && !token_read) {
        zt_err err = {0};
        char what[96];
        snprintf(what, sizeof(what), "the token file (%s)", zt_cli_token_file_origin);
        token_read = zt_secret_file_read(zt_cli.token_file, what, &err);
        if (!token_read) {
            zt_cli_error("%s", zt_err_msg(&err));
            return NULL;
        }
        zt_cli.token = token_read;
    }
    char *ca = NULL;
    if (zt_cli.tls_ca) {
        zt_err err = {0};
        if (zt_rpc_read_ca_file(zt_cli.tls_ca, zt_cli_tls_ca_origin, &ca, &err) != ZT_OK) {
            zt_cli_error("%s", zt_err_msg(&err));
            return NULL;
        }
    }
    zt_rpc_client_config cfg = {.target = zt_cli.coordinator,
                                .token = zt_cli.token,
                                .tls_ca_pem = ca,
                                .wait_for_ready = wait_for_ready};
    zt_rpc_client *c = NULL;
    zt_err err = {0};
    if (zt_rpc_client_create(&c, &cfg, &err) != ZT_OK) zt_cli_error("%s", zt_err_msg(&err));
    zt_free(ca);
    return c;
}

void zt_cli_rpc_error(const char *what, zt_status st, zt_rpc_code code, const zt_err *err)
{
    const char *msg = zt_err_msg(err);
    zt_probe_kind probe;
    (void)st;
    switch (code) {
    case ZT_RPC_UNAVAILABLE:
        if (!(strstr(msg, "connect") || strstr(msg, "Connection") || strstr(msg, "DNS") ||
              strstr(msg, "handshake") || strstr(msg, "Socket closed") || strstr(msg, "resolve"))) {
            zt_cli_error("%s: the coordinator at %s is unavailable: %s", what, zt_cli.coordinator,
                         msg);
            break;
        }
        /* the gRPC core tells a TLS mismatch only as a closed socket or a failed handshake:
         * ask the address itself which it speaks */
        probe = zt_cli_probe(zt_cli.coordinator, PROBE_TIMEOUT_MS);
        if (probe == ZT_PROBE_TLS && !zt_cli.tls_ca)
            zt_cli_error(
                "the coordinator at %s speaks TLS; pass --tls-ca FILE (or set ZT_TLS_CA) with the CA certificate that signed its certificate",
                zt_cli.coordinator);
        else if (probe == ZT_PROBE_PLAIN_H2 && zt_cli.tls_ca)
            zt_cli_error(
                "the coordinator at %s speaks plain text, not TLS; drop %s, or start zcoord with --tls-cert and --tls-key",
                zt_cli.coordinator, zt_cli_tls_ca_origin);
        else
            zt_cli_error(
                "cannot reach the coordinator at %s (%s); is zcoord running there? Set --coordinator or ZT_COORDINATOR%s",
                zt_cli.coordinator, msg, zt_cli.tls_ca ? " (and check --tls-ca)" : "");
        break;
    case ZT_RPC_UNAUTHENTICATED:
        zt_cli_error("the coordinator at %s refused the request: %s", zt_cli.coordinator, msg);
        break;
    case ZT_RPC_DEADLINE_EXCEEDED:
        zt_cli_error(
            "%s: the coordinator at %s did not answer in time (%s); it may be overloaded, retry",
            what, zt_cli.coordinator, msg);
        break;
    case ZT_RPC_RESOURCE_EXHAUSTED:
        if (strstr(msg, "larger than max"))
            zt_cli_error(
                "%s: the request is larger than the coordinator at %s accepts (%s); send less, or raise the coordinator's --max-message",
                what, zt_cli.coordinator, msg);
        else
            zt_cli_error("%s", msg);
        break;
    case ZT_RPC_UNIMPLEMENTED:
        zt_cli_error(
            "%s: the coordinator at %s does not know this call (%s); are zctl and zcoord the same version?",
            what, zt_cli.coordinator, msg);
        break;
    default:
        zt_cli_error("%s", msg);
        break;
    }
}

zt_status zt_cli_call(zt_rpc_client *c, const char *method, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *reply_type, void **reply, zt_rpc_code *code)
{
    char path[128];
    snprintf(path, sizeof(path), "/zt.v1.Coordinator/%s", method);
    zt_rpc_code cd = ZT_RPC_OK;
    zt_err err = {0};
    zt_status st = zt_rpc_unary(c, path, req, reply_type, reply, CALL_TIMEOUT_MS, &cd, &err);
    if (st != ZT_OK && cd == ZT_RPC_UNAVAILABLE && strstr(zt_err_msg(&err), "failed to connect")) {
        /* the connection was never made, so the request was never delivered: one more try on a
         * channel that waits for the coordinator (a loaded machine, a coordinator starting up),
         * bounded to a second and a half */
        zt_rpc_client *patient = zt_cli_connect_opts(true);
        if (patient) {
            zt_rpc_code cd2 = ZT_RPC_OK;
            zt_err err2 = {0};
            zt_status st2 = zt_rpc_unary(patient, path, req, reply_type, reply, 1500, &cd2, &err2);
            zt_rpc_client_destroy(patient);
            /* still no coordinator: keep the first error, which says why the connection failed */
            if (st2 == ZT_OK || cd2 != ZT_RPC_DEADLINE_EXCEEDED) {
                st = st2;
                cd = cd2;
                err = err2;
            }
        }
    }
    if (code) *code = cd;
    if (st != ZT_OK) zt_cli_rpc_error(method, st, cd, &err);
    return st;
}

void zt_cli_print_json(const ProtobufCMessage *msg, bool compact)
{
    /* zt_pb_to_json fails only when memory runs out (text that is not UTF-8 is printed with
     * '?' for the bad bytes) */
    json_t *j = zt_pb_to_json(msg);
    char *s = j ? json_dumps(j, compact ? JSON_COMPACT : JSON_INDENT(2)) : NULL;
    if (!s)
        zt_cli_error("out of memory converting the %s reply to JSON; retry without -o json",
                     msg->descriptor->short_name);
    else
        puts(s);
    free(s);
    json_decref(j);
}

int64_t zt_cli_parse_job_id(const char *s)
{
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v <= 0) {
        zt_cli_error("'%s' is not a job id (a positive number, as 'zctl jobs' shows)", s ? s : "");
        return 0;
    }
    return v;
}

bool zt_cli_parse_duration(const char *s, double *seconds)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : -1;
    if (!s || end == s || errno || v < 0) return false;
    if (!*end || strcmp(end, "s") == 0)
        *seconds = v;
    else if (strcmp(end, "ms") == 0)
        *seconds = v / 1000;
    else if (strcmp(end, "m") == 0)
        *seconds = v * 60;
    else if (strcmp(end, "h") == 0)
        *seconds = v * 3600;
    else
        return false;
    return true;
}

const char *zt_cli_fmt_time(int64_t ms, char *buf, size_t cap)
{
    if (ms <= 0) {
        snprintf(buf, cap, "-");
        return buf;
    }
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm);
    return buf;
}

const char *zt_cli_fmt_duration(double s, char *buf, size_t cap)
{
    if (s < 0 || !isfinite(s)) s = 0;
    long v = (long)(s + 0.5);
    if (v < 60)
        snprintf(buf, cap, "%lds", v);
    else if (v < 3600)
        snprintf(buf, cap, "%ldm%02lds", v / 60, v % 60);
    else if (v < 86400)
        snprintf(buf, cap, "%ldh%02ldm", v / 3600, (v % 3600) / 60);
    else
        snprintf(buf, cap, "%ldd%02ldh", v / 86400, (v % 86400) / 3600);
    return buf;
}

const char *zt_cli_fmt_ago(int64_t ms, char *buf, size_t cap)
{
    if (ms <= 0) {
        snprintf(buf, cap, "-");
        return buf;
    }
    char d[32];
    snprintf(buf, cap, "%s ago",
             zt_cli_fmt_duration((double)(zt_wall_ms() - ms) / 1000.0, d, sizeof(d)));
    return buf;
}

const char *zt_cli_job_state(int state)
{
    return zt_pb_enum_short_name(&zt__v1__job_state__descriptor, state);
}

/* ---- following a job ---------------------------------------------------------------------- */

static int exit_for(int state)
{
    switch (state) {
    case ZT__V1__JOB_STATE__JOB_STATE_COMPLETED:
        return ZT_CLI_EXIT_COMPLETED;
    case ZT__V1__JOB_STATE__JOB_STATE_CANCELED:
        return ZT_CLI_EXIT_CANCELED;
    default:
        return ZT_CLI_EXIT_FAILED;
    }
}

static void progress_line(const Zt__V1__Job *j, bool tty)
{
    char eta[32] = "", bar[41];
    int width = 30;
    double frac = j->total_steps > 0 ? (double)j->step / (double)j->total_steps : 0;
    if (frac > 1) frac = 1;
    int fill = (int)(frac * width);
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    if (j->eta_s > 0) zt_cli_fmt_duration(j->eta_s, eta, sizeof(eta));
    if (tty)
        fprintf(stdout, "\r\033[Kjob %lld %-9s [%s] %lld/%lld", (long long)j->id,
                zt_cli_job_state(j->state), bar, (long long)j->step, (long long)j->total_steps);
    else
        fprintf(stdout, "job %lld: step %lld/%lld", (long long)j->id, (long long)j->step,
                (long long)j->total_steps);
    if (j->loss != 0) fprintf(stdout, " loss %.4f", j->loss);
    if (j->tokens_per_s > 0) fprintf(stdout, " %.0f tok/s", j->tokens_per_s);
    if (eta[0]) fprintf(stdout, " ETA %s", eta);
    if (!tty) fputc('\n', stdout);
    fflush(stdout);
}

int zt_cli_follow(zt_rpc_client *c, int64_t job_id, bool progress, bool quiet, double timeout_s)
{
    bool tty = isatty(STDOUT_FILENO) && !zt_cli.json;
    double t0 = zt_now_s();
    double unavailable_since = 0;
    bool got_any = false;
    zt_rpc_client *patient = NULL; /* a wait-for-ready client for reconnecting */
    int rc = ZT_CLI_EXIT_FAILED;
    int64_t last_step_printed = -1;
    double last_progress_print = 0;
    Zt__V1__WatchJobRequest q = ZT__V1__WATCH_JOB_REQUEST__INIT;
    q.job_id = job_id;
    for (;;) {
        int remaining_ms = 0;
        if (timeout_s > 0) {
            double left = timeout_s - (zt_now_s() - t0);
            if (left <= 0) goto timeout;
            remaining_ms = (int)(left * 1000) + 1;
        }
        zt_rpc_stream *s = NULL;
        zt_err err = {0};
        zt_rpc_code code = ZT_RPC_OK;
        if (unavailable_since && !patient) /* reconnecting: wait for the coordinator */
            patient = zt_cli_connect_opts(true);
        zt_status st = zt_rpc_stream_open(patient ? patient : c, "/zt.v1.Coordinator/WatchJob",
                                          &q.base, remaining_ms, &s, &err);
        if (st != ZT_OK) {
            zt_cli_rpc_error("WatchJob", st, ZT_RPC_INTERNAL, &err);
            goto out;
        }
        for (;;) {
            Zt__V1__JobUpdate *u = NULL;
            st = zt_rpc_stream_next(s, &zt__v1__job_update__descriptor, (void **)&u, &code, &err);
            if (st != ZT_OK || !u) break;
            unavailable_since = 0;
            got_any = true;
            const Zt__V1__Job *j = u->job;
            if (zt_cli.json && !quiet) {
                zt_cli_print_json(&u->base, true);
            } else if (j && !quiet) {
                if (u->event) {
                    if (tty && progress) fputs("\r\033[K", stdout);
                    const Zt__V1__Event *e = u->event;
                    bool job_kind = strcmp(e->kind, "job") == 0;
                    printf("job %lld: %s%s%s%s%s -> %s: %s\n", (long long)j->id,
                           job_kind ? "" : "[", job_kind ? "" : e->kind, job_kind ? "" : "] ",
                           e->from_state[0] ? e->from_state : "", e->from_state[0] ? "" : "(new)",
                           e->to_state, e->reason);
                } else if (last_step_printed < 0 && !u->final) {
                    printf("job %lld (%s): %s: %s\n", (long long)j->id, j->name,
                           zt_cli_job_state(j->state),
                           j->pending_reason[0] ? j->pending_reason : j->reason);
                    last_step_printed = j->step;
                }
                fflush(stdout); /* a pipe (tee, a log file) sees each line as it happens */
                if (progress && j->state == ZT__V1__JOB_STATE__JOB_STATE_RUNNING) {
                    double now = zt_now_s();
                    if (tty || (j->step != last_step_printed && now - last_progress_print >= 5.0)) {
                        progress_line(j, tty);
                        last_progress_print = now;
                        last_step_printed = j->step;
                    }
                }
            }
            if (u->final && j) {
                int state = j->state;
                if (tty && progress && !zt_cli.json) fputs("\r\033[K", stdout);
                if (!zt_cli.json)
                    printf("job %lld %s: %s\n", (long long)j->id, zt_cli_job_state(state),
                           j->reason);
                else if (quiet) /* zctl wait -o json: the final job */
                    zt_cli_print_json(&j->base, false);
                fflush(stdout);
                zt_pb_free(u);
                zt_rpc_stream_close(s);
                rc = exit_for(state);
                goto out;
            }
            zt_pb_free(u);
        }
        zt_rpc_stream_close(s);
        if (st == ZT_OK) /* the stream ended without a final update: watch again */
            continue;
        if (code == ZT_RPC_DEADLINE_EXCEEDED && timeout_s > 0) goto timeout;
        if (got_any && (code == ZT_RPC_UNAVAILABLE || code == ZT_RPC_RESOURCE_EXHAUSTED)) {
            /* the coordinator restarts or we read too slowly: reconnect for up to a minute */
            double now = zt_now_s();
            if (!unavailable_since) {
                unavailable_since = now;
                fprintf(stderr, "zctl: lost the coordinator (%s); reconnecting...\n",
                        zt_err_msg(&err));
            } else if (now - unavailable_since > 60) {
                zt_cli_rpc_error("WatchJob", st, code, &err);
                goto out;
            }
            zt_sleep_ms(200);
            continue;
        }
        zt_cli_rpc_error("WatchJob", st, code, &err);
        goto out;
    }
timeout:
    if (tty && progress) fputs("\r\033[K", stdout);
    zt_cli_error("job %lld did not end within %.0f s; it keeps running ('zctl job %lld')",
                 (long long)job_id, timeout_s, (long long)job_id);
    rc = ZT_CLI_EXIT_TIMEOUT;
out:
    zt_rpc_client_destroy(patient);
    return rc;
}
