/* zerotrain: the agent's loop — registration (retried with backoff while the coordinator is
 * unreachable), heartbeats that report every worker and apply the desired set of the reply
 * (level-triggered: start what is missing, stop what is no longer wanted), the status file,
 * and the orderly stop on SIGTERM/SIGINT (workers stopped, reports flushed, exits reported in a
 * last heartbeat marked `leaving`). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent_int.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"

#ifndef ZT_VERSION
#define ZT_VERSION "dev"
#endif

#define AG_WARN_EVERY_NS (30ull * 1000000000ull)

/* zt_device goes on the wire as it is (RegisterAgentRequest.device). */
_Static_assert(ZT_DEVICE_CPU == (int)ZT__V1__DEVICE__DEVICE_CPU &&
                   ZT_DEVICE_CUDA == (int)ZT__V1__DEVICE__DEVICE_CUDA,
               "zt_device must keep zt.v1.Device's numbers");

static void reg_start(zt_agent *a);
static void begin_stop(zt_agent *a, int code);

static void on_agent_handle_closed(uv_handle_t *h)
{
    zt_agent *a = h->data;
    a->handles--;
}

/* 200 ms doubling to 2 s: a coordinator that restarts is found again within 2 s */
static uint64_t reg_backoff_ms(int failures)
{
    uint64_t ms = 200;
    for (int i = 1; i < failures && ms < 2000; i++)
        ms *= 2;
    return ms < 2000 ? ms : 2000;
}

static int hb_deadline_ms(const zt_agent *a)
{
    int t = a->hb_timeout_ms > 0 ? a->hb_timeout_ms / 2 : 5000;
    return t < 500 ? 500 : t > 5000 ? 5000 : t;
}

static int worker_count(const zt_agent *a, bool live_only)
{
    int n = 0;
    for (const ag_worker *w = a->workers; w; w = w->next)
        n += !live_only || (w->state == AGW_RUNNING || w->state == AGW_STOPPING);
    return n;
}

/* ---- status file ----------------------------------------------------------------------- */

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* p50, p99 and max of the recent heartbeat round trips, in ms. */
static void rtt_stats(const zt_agent *a, double *p50, double *p99, double *max)
{
    int n = a->rtt_count < AG_RTT_RING ? (int)a->rtt_count : AG_RTT_RING;
    *p50 = *p99 = *max = 0;
    if (!n) return;
    uint64_t v[AG_RTT_RING];
    memcpy(v, a->rtt_ns, (size_t)n * sizeof(v[0]));
    qsort(v, (size_t)n, sizeof(v[0]), cmp_u64);
    *p50 = (double)v[n / 2] / 1e6;
    *p99 = (double)v[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] / 1e6;
    *max = (double)v[n - 1] / 1e6;
}

static void write_status(zt_agent *a)
{
    if (!a->cfg.status_file) return;
    double p50, p99, max;
    rtt_stats(a, &p50, &p99, &max);
    json_t *ws = json_array();
    for (ag_worker *w = a->workers; w && ws; w = w->next) {
        Zt__V1__WorkerStatus s = ZT__V1__WORKER_STATUS__INIT;
        ag_worker_status(w, &s);
        json_array_append_new(
            ws, json_pack("{s:I, s:I, s:i, s:i, s:s, s:i, s:I, s:I, s:f, s:I, s:i, s:i, s:s}",
                          "job_id", (json_int_t)w->job_id, "attempt_id", (json_int_t)w->attempt_id,
                          "rank", w->rank, "pid", w->pid, "state", ag_wstate_name(w->state),
                          "phase", (int)s.phase, "step", (json_int_t)s.step, "memory_bytes",
                          (json_int_t)s.memory_bytes, "loss", s.loss, "peak_memory_bytes",
                          (json_int_t)s.peak_memory_bytes, "exit_code", s.exit_code, "exit_signal",
                          s.exit_signal, "dir", w->dir));
    }
    json_t *j = json_pack(
        "{s:s, s:s, s:i, s:b, s:I, s:i, s:I, s:I, s:{s:f, s:f, s:f, s:I}, s:o, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I}}",
        "name", a->cfg.name, "coordinator", a->cfg.coordinator, "pid", (int)getpid(), "registered",
        a->reg == AG_REGISTERED, "incarnation", (json_int_t)a->incarnation, "heartbeat_ms",
        a->hb_ms, "heartbeats_ok", (json_int_t)a->hb_ok, "heartbeats_failed",
        (json_int_t)a->hb_failed, "heartbeat_rtt_ms", "p50", p50, "p99", p99, "max", max, "samples",
        (json_int_t)a->rtt_count, "workers", ws ? ws : json_array(), "reports", "logs_queued",
        (json_int_t)a->rep.log_count, "logs_sent", (json_int_t)a->rep.logs_sent, "logs_dropped",
        (json_int_t)a->rep.logs_dropped, "steps_sent", (json_int_t)a->rep.steps_sent,
        "steps_dropped", (json_int_t)a->rep.steps_dropped, "ckpts_sent",
        (json_int_t)a->rep.ckpts_sent, "ckpts_pending", (json_int_t)a->rep.ckpt_count);
    if (!j) return;
    char tmp[AG_PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp", a->cfg.status_file);
    if (json_dump_file(j, tmp, JSON_INDENT(1)) != 0 || rename(tmp, a->cfg.status_file) != 0) {
        if (!a->status_warned)
            ZT_WARN("agent", "cannot write the status file %s: %s", a->cfg.status_file,
                    strerror(errno));
        a->status_warned = true;
    }
    json_decref(j);
}

/* ---- heartbeats ------------------------------------------------------------------------ */

static void send_heartbeat(zt_agent *a, bool final);

static void on_hb_timer(uv_timer_t *t)
{
    zt_agent *a = t->data;
    if (a->stopping) {
        /* until the final flush: keep retrying shard reports while workers stop */
        if (!a->final_sent && !a->closing) {
            ag_reports_flush(a);
            uv_timer_start(&a->hb_timer, on_hb_timer, 250, 0);
        }
        return;
    }
    ag_reports_flush(a);
    if (a->reg != AG_REGISTERED) {
        uv_timer_start(&a->hb_timer, on_hb_timer, (uint64_t)(a->hb_ms > 0 ? a->hb_ms : 1000), 0);
        return;
    }
    if (a->hb_in_flight) {
        a->hb_kick = true;
        return;
    }
    send_heartbeat(a, false);
}

void ag_heartbeat_soon(zt_agent *a, uint64_t delay_ms)
{
    if (a->closing) return;
    if (a->hb_in_flight) {
        a->hb_kick = true;
        return;
    }
    /* coalesce the kicks of one burst (several ranks starting or exiting together) */
    if (delay_ms < 20) delay_ms = 20;
    if (!uv_is_active((uv_handle_t *)&a->hb_timer) || uv_timer_get_due_in(&a->hb_timer) > delay_ms)
        uv_timer_start(&a->hb_timer, on_hb_timer, delay_ms, 0);
}

static void apply_desired(zt_agent *a, const Zt__V1__HeartbeatReply *r)
{
    if (r->desired_version != a->desired_version)
        ZT_DEBUG("agent", "desired set version %lld: %zu workers", (long long)r->desired_version,
                 r->n_workers);
    a->desired_version = r->desired_version;
    for (ag_worker *w = a->workers; w; w = w->next)
        w->desired = false;
    for (size_t i = 0; i < r->n_workers; i++) {
        const Zt__V1__DesiredWorker *d = r->workers[i];
        if (d->attempt_id <= 0 || d->rank < 0 ||
            d->rank >= (d->world_size > 0 ? d->world_size : 1)) {
            ZT_WARN("agent", "ignoring a desired worker with attempt %lld rank %d of %d",
                    (long long)d->attempt_id, d->rank, d->world_size);
            continue;
        }
        ag_worker *w = a->workers;
        while (w && !(w->attempt_id == d->attempt_id && w->rank == d->rank))
            w = w->next;
        if (w) {
            w->desired = true;
            continue;
        }
        w = ag_worker_new(a, d);
        if (!w) continue;
        if (w->device == ZT_DEVICE_CUDA) {
            /* the engine uses device local_rank: list this attempt's local GPUs in that order */
            size_t n = 0;
            w->cuda_visible[0] = '\0';
            for (int lr = 0; lr < d->local_world_size && lr < 256; lr++)
                for (size_t k = 0; k < r->n_workers; k++) {
                    const Zt__V1__DesiredWorker *o = r->workers[k];
                    if (o->attempt_id == d->attempt_id && o->local_rank == lr &&
                        n + 12 < sizeof(w->cuda_visible))
                        n += (size_t)snprintf(w->cuda_visible + n, sizeof(w->cuda_visible) - n,
                                              "%s%d", n ? "," : "", o->device_index);
                }
            if (!n) snprintf(w->cuda_visible, sizeof(w->cuda_visible), "%d", d->device_index);
        }
    }
    ag_worker *next;
    for (ag_worker *w = a->workers; w; w = next) {
        next = w->next;
        if (!w->desired) ag_worker_undesired(w);
    }
}

static void warn_unreachable(zt_agent *a, const char *what, zt_rpc_code code, const char *msg,
                             uint64_t *last_warn)
{
    uint64_t now = zt_now_ns();
    if (*last_warn && now - *last_warn < AG_WARN_EVERY_NS) return;
    *last_warn = now;
    if (code == ZT_RPC_UNAUTHENTICATED)
        ZT_ERROR(
            "agent",
            "%s: the coordinator at %s refused our token (%s); give the token zcoord uses with --token-file or ZT_TOKEN",
            what, a->cfg.coordinator, msg);
    else if ((code == ZT_RPC_UNAVAILABLE || code == ZT_RPC_DEADLINE_EXCEEDED) &&
             worker_count(a, true))
        ZT_WARN(
            "agent",
            "%s: cannot reach the coordinator at %s (%s: %s); is zcoord running there? (--coordinator or ZT_COORDINATOR). Retrying; the %d running workers keep training",
            what, a->cfg.coordinator, zt_rpc_code_name(code), msg, worker_count(a, true));
    else if (code == ZT_RPC_UNAVAILABLE || code == ZT_RPC_DEADLINE_EXCEEDED)
        ZT_WARN(
            "agent",
            "%s: cannot reach the coordinator at %s (%s: %s); is zcoord running there? (--coordinator or ZT_COORDINATOR). Retrying",
            what, a->cfg.coordinator, zt_rpc_code_name(code), msg);
    else
        ZT_WARN("agent", "%s failed: %s: %s; retrying", what, zt_rpc_code_name(code), msg);
}

static void on_heartbeat(zt_agent *a, void *ctx, zt_rpc_code code, const char *msg, void *reply,
                         uint64_t elapsed_ns)
{
    bool final = ctx != NULL;
    a->hb_in_flight = false;
    if (code == ZT_RPC_OK) {
        a->hb_ok++;
        a->rtt_ns[a->rtt_count % AG_RTT_RING] = elapsed_ns;
        a->rtt_count++;
        a->hb_last_ok_ns = zt_now_ns();
        if (a->hb_failures) {
            ZT_INFO("agent", "the coordinator at %s answers heartbeats again (after %d failed)",
                    a->cfg.coordinator, a->hb_failures);
            a->hb_failures = 0;
            a->hb_last_warn_ns = 0;
        }
    } else {
        a->hb_failed++;
        a->hb_failures++;
    }
    if (a->final_hb_pending && !final) {
        a->final_hb_pending = false;
        send_heartbeat(a, true);
        return;
    }
    if (final || a->stopping) return; /* ag_check_stopped runs after this callback */
    const Zt__V1__HeartbeatReply *r = reply;
    uint64_t next = (uint64_t)a->hb_ms;
    if (code == ZT_RPC_OK) {
        if (!a->cfg.heartbeat_ms && r->heartbeat_interval_ms >= 50)
            a->hb_ms = r->heartbeat_interval_ms;
        next = (uint64_t)a->hb_ms;
        apply_desired(a, r);
        write_status(a);
    } else if (code == ZT_RPC_NOT_FOUND || code == ZT_RPC_FAILED_PRECONDITION ||
               code == ZT_RPC_UNAUTHENTICATED) {
        ZT_WARN(
            "agent",
            "the coordinator no longer knows this agent's registration (%s: %s); registering again",
            zt_rpc_code_name(code), msg);
        /* two agents with one name take the registration from each other forever */
        uint64_t now = zt_now_ns();
        if (code == ZT_RPC_FAILED_PRECONDITION) {
            if (now - a->rereg_window_ns > 60ull * 1000000000ull) {
                a->rereg_window_ns = now;
                a->rereg_count = 0;
            }
            if (++a->rereg_count == 3)
                ZT_ERROR(
                    "agent",
                    "registered again 3 times within a minute: another zagent probably runs with the name %s; give each node its own --name",
                    a->cfg.name);
        }
        a->reg = AG_UNREGISTERED;
        reg_start(a);
        write_status(a);
        return;
    } else {
        warn_unreachable(a, "heartbeat", code, msg, &a->hb_last_warn_ns);
        write_status(a);
    }
    if (a->hb_kick) next = 20;
    a->hb_kick = false;
    uv_timer_start(&a->hb_timer, on_hb_timer, next, 0);
}

static void send_heartbeat(zt_agent *a, bool final)
{
    int n = worker_count(a, false);
    Zt__V1__WorkerStatus *ws = zt_calloc(n ? (size_t)n : 1, sizeof(*ws));
    Zt__V1__WorkerStatus **wp = zt_calloc(n ? (size_t)n : 1, sizeof(*wp));
    if (!ws || !wp) {
        zt_free(ws);
        zt_free(wp);
        ZT_ERROR("agent", "out of memory building a heartbeat; retrying");
        uv_timer_start(&a->hb_timer, on_hb_timer, (uint64_t)a->hb_ms, 0);
        return;
    }
    size_t k = 0;
    for (ag_worker *w = a->workers; w; w = w->next) {
        if (w->state == AGW_PREPARING) continue; /* not a process yet */
        zt__v1__worker_status__init(&ws[k]);
        ag_worker_status(w, &ws[k]);
        wp[k] = &ws[k];
        k++;
    }
    Zt__V1__HeartbeatRequest q = ZT__V1__HEARTBEAT_REQUEST__INIT;
    q.name = a->cfg.name;
    q.incarnation = a->incarnation;
    q.n_workers = k;
    q.workers = wp;
    q.leaving = final; /* the workers have exited: the coordinator marks this agent LOST now */
    a->hb_in_flight = true;
    a->hb_kick = false;
    ag_rpc_call(a, "Heartbeat", &q.base, &zt__v1__heartbeat_reply__descriptor,
                final ? 2000 : hb_deadline_ms(a), on_heartbeat, final ? (void *)a : NULL);
    zt_free(ws);
    zt_free(wp);
}

/* ---- registration ---------------------------------------------------------------------- */

/* work_dir/agent.key: the last agent key, readable by this user only */
static void key_path(const zt_agent *a, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/agent.key", a->cfg.work_dir);
}

static void key_load(zt_agent *a)
{
    char path[4200];
    key_path(a, path, sizeof(path));
    FILE *f = fopen(path, "re");
    if (!f) return;
    char buf[sizeof(a->agent_key)] = "";
    if (fgets(buf, sizeof(buf), f)) {
        buf[strcspn(buf, "\r\n")] = '\0';
        snprintf(a->agent_key, sizeof(a->agent_key), "%s", buf);
    }
    fclose(f);
}

static void key_store(const zt_agent *a)
{
    char path[4200], tmp[4210];
    key_path(a, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        ZT_WARN("agent", "cannot keep the agent key in %s: %s; a restart of this agent waits until the coordinator marks it lost",
                tmp, strerror(errno));
        return;
    }
    size_t n = strlen(a->agent_key);
    bool ok = write(fd, a->agent_key, n) == (ssize_t)n && fsync(fd) == 0;
    close(fd);
    if (!ok || rename(tmp, path) != 0) {
        ZT_WARN("agent", "cannot keep the agent key in %s: %s", path, strerror(errno));
        unlink(tmp);
    }
}

static void on_reg_timer(uv_timer_t *t)
{
    reg_start(t->data);
}

static void on_register(zt_agent *a, void *ctx, zt_rpc_code code, const char *msg, void *reply,
                        uint64_t elapsed_ns)
{
    (void)ctx;
    (void)elapsed_ns;
    a->reg = AG_UNREGISTERED;
    if (a->stopping) return;
    if (code == ZT_RPC_OK) {
        const Zt__V1__RegisterAgentReply *r = reply;
        a->reg = AG_REGISTERED;
        a->incarnation = r->incarnation;
        snprintf(a->agent_key, sizeof(a->agent_key), "%s", r->agent_key);
        key_store(a);
        a->hb_timeout_ms = r->heartbeat_timeout_ms;
        if (!a->cfg.heartbeat_ms && r->heartbeat_interval_ms >= 50)
            a->hb_ms = r->heartbeat_interval_ms;
        if (a->hb_timeout_ms > 0 && a->hb_ms * 2 > a->hb_timeout_ms)
            ZT_WARN(
                "agent",
                "heartbeat every %d ms but the coordinator marks agents lost after %d ms of silence: lower --heartbeat-ms",
                a->hb_ms, a->hb_timeout_ms);
        ZT_INFO(
            "agent",
            "registered with the coordinator at %s as %s (incarnation %lld, %d %s slot%s, rendezvous host %s); heartbeat every %d ms%s",
            a->cfg.coordinator, a->cfg.name, (long long)a->incarnation, a->cfg.slots,
            zt_device_name(a->cfg.device), a->cfg.slots == 1 ? "" : "s", a->cfg.advertise_host,
            a->hb_ms, a->reg_failures ? " (it was unreachable before)" : "");
        a->ever_registered = true;
        a->reg_failures = 0;
        a->reg_last_warn_ns = 0;
        ag_heartbeat_soon(a, 0); /* its success notes the end of a streak of failures */
        return;
    }
    a->reg_failures++;
    if ((code == ZT_RPC_UNAUTHENTICATED || code == ZT_RPC_PERMISSION_DENIED) &&
        !a->ever_registered) {
        ZT_ERROR(
            "agent",
            "the coordinator at %s refused our token (%s); give the agent join token (the file zcoord reads with --agent-token-file) with --token-file or ZT_TOKEN; exiting",
            a->cfg.coordinator, msg);
        begin_stop(a, ZT_AGENT_EXIT_FAIL);
        return;
    }
    if (code == ZT_RPC_INVALID_ARGUMENT && !a->ever_registered) {
        ZT_ERROR("agent", "the coordinator at %s refused the registration: %s", a->cfg.coordinator,
                 msg);
        begin_stop(a, ZT_AGENT_EXIT_USAGE);
        return;
    }
    warn_unreachable(a, "registration", code, msg, &a->reg_last_warn_ns);
    uv_timer_start(&a->reg_timer, on_reg_timer, reg_backoff_ms(a->reg_failures), 0);
}

static void reg_start(zt_agent *a)
{
    if (a->stopping || a->reg != AG_UNREGISTERED) return;
    a->reg = AG_REGISTERING;
    Zt__V1__Gpu *g = NULL;
    Zt__V1__Gpu **gp = NULL;
    if (a->cfg.n_gpus) {
        g = zt_calloc((size_t)a->cfg.n_gpus, sizeof(*g));
        gp = zt_calloc((size_t)a->cfg.n_gpus, sizeof(*gp));
        if (!g || !gp) {
            zt_free(g);
            zt_free(gp);
            a->reg = AG_UNREGISTERED;
            uv_timer_start(&a->reg_timer, on_reg_timer, 1000, 0);
            return;
        }
        for (int i = 0; i < a->cfg.n_gpus; i++) {
            zt__v1__gpu__init(&g[i]);
            g[i].index = a->cfg.gpus[i].index;
            g[i].name = a->cfg.gpus[i].name;
            g[i].memory_total = a->cfg.gpus[i].memory_total;
            g[i].memory_free = a->cfg.gpus[i].memory_free;
            gp[i] = &g[i];
        }
    }
    Zt__V1__RegisterAgentRequest q = ZT__V1__REGISTER_AGENT_REQUEST__INIT;
    q.name = a->cfg.name;
    q.hostname = a->cfg.hostname;
    q.address = a->cfg.advertise_host;
    q.device = (Zt__V1__Device)a->cfg.device;
    q.slots = a->cfg.slots;
    q.n_gpus = (size_t)a->cfg.n_gpus;
    q.gpus = gp;
    q.version = (char *)ZT_VERSION;
    if (!a->agent_key[0]) key_load(a);
    q.previous_agent_key = a->agent_key;
    ag_rpc_call(a, "RegisterAgent", &q.base, &zt__v1__register_agent_reply__descriptor, 5000,
                on_register, NULL);
    zt_free(g);
    zt_free(gp);
}

/* ---- stopping -------------------------------------------------------------------------- */

static void on_stop_timer(uv_timer_t *t)
{
    zt_agent *a = t->data;
    if (a->calls_in_flight > 0)
        return; /* ag_check_stopped schedules this again when they are done */
    /* no call is in flight: the poller can go, then every handle */
    a->closing = true;
    ag_rpc_close(a);
    ag_worker *next;
    for (ag_worker *w = a->workers; w; w = next) {
        next = w->next;
        ag_worker_forget(w);
    }
    ag_reports_free(a);
    uv_handle_t *hs[] = {(uv_handle_t *)&a->rpc_async, (uv_handle_t *)&a->hb_timer,
                         (uv_handle_t *)&a->reg_timer, (uv_handle_t *)&a->sigterm,
                         (uv_handle_t *)&a->sigint,    (uv_handle_t *)t};
    for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++)
        if (hs[i]->loop && !uv_is_closing(hs[i])) /* initialized and not closed yet */
            uv_close(hs[i], on_agent_handle_closed);
    double p50, p99, max;
    rtt_stats(a, &p50, &p99, &max);
    ZT_INFO(
        "agent",
        "stopped: %lld heartbeats (%lld failed), round trip p50 %.2f ms p99 %.2f ms max %.2f ms; %lld output lines sent, %lld dropped; %lld step reports sent",
        (long long)a->hb_ok, (long long)a->hb_failed, p50, p99, max, (long long)a->rep.logs_sent,
        (long long)a->rep.logs_dropped, (long long)a->rep.steps_sent);
}

void ag_check_stopped(zt_agent *a)
{
    if (!a->stopping || a->closing) return;
    for (ag_worker *w = a->workers; w; w = w->next)
        if (w->state != AGW_EXITED) return; /* still stopping */
    if (!a->final_sent) {
        a->final_sent = true;
        ag_reports_flush(a);
        /* the exits, so the coordinator need not wait for a timeout */
        if (a->reg == AG_REGISTERED && !a->hb_in_flight)
            send_heartbeat(a, true);
        else if (a->reg == AG_REGISTERED)
            a->final_hb_pending = true;
    }
    if (a->calls_in_flight > 0) return;
    if (!uv_is_active((uv_handle_t *)&a->stop_timer))
        uv_timer_start(&a->stop_timer, on_stop_timer, 0, 0);
}

static void begin_stop(zt_agent *a, int code)
{
    if (a->stopping) return;
    a->stopping = true;
    a->exit_code = code;
    uv_timer_stop(&a->reg_timer);
    int n = worker_count(a, true);
    if (n)
        ZT_INFO("agent", "stopping %d worker%s (SIGTERM, SIGKILL after %d ms)", n,
                n == 1 ? "" : "s", a->cfg.stop_grace_ms);
    ag_worker *next;
    for (ag_worker *w = a->workers; w; w = next) {
        next = w->next;
        ag_worker_stop(w, false);
    }
    ag_check_stopped(a);
}

static void on_signal(uv_signal_t *h, int sig)
{
    zt_agent *a = h->data;
    a->signals++;
    if (a->signals == 1) {
        ZT_INFO("agent", "signal %d (%s): stopping", sig, strsignal(sig));
        begin_stop(a, ZT_AGENT_EXIT_OK);
    } else {
        ZT_WARN("agent", "signal %d again: killing the workers now", sig);
        for (ag_worker *w = a->workers; w; w = w->next)
            ag_worker_stop(w, true);
    }
}

/* ---- create, run, destroy -------------------------------------------------------------- */

zt_status zt_agent_create(zt_agent **out, zt_agent_config *cfg, zt_err *err)
{
    *out = NULL;
    zt_agent *a = zt_calloc(1, sizeof(*a));
    if (!a) return zt_err_set(err, ZT_ERR_NOMEM, "zagent: out of memory");
    a->cfg = *cfg;
    memset(cfg, 0, sizeof(*cfg));
    a->hb_ms = a->cfg.heartbeat_ms > 0 ? a->cfg.heartbeat_ms : 1000;
    a->omp_threads = a->cfg.omp_threads;
    int rc = uv_loop_init(&a->loop);
    if (rc != 0) {
        zt_agent_config_free(&a->cfg);
        zt_free(a);
        return zt_err_set(err, ZT_ERR_INTERNAL, "uv_loop_init: %s", uv_strerror(rc));
    }
    pthread_mutex_init(&a->cmu, NULL);
    uv_handle_t *hs[] = {(uv_handle_t *)&a->hb_timer, (uv_handle_t *)&a->reg_timer,
                         (uv_handle_t *)&a->stop_timer};
    for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
        uv_timer_init(&a->loop, (uv_timer_t *)hs[i]);
        hs[i]->data = a;
        a->handles++;
    }
    uv_signal_init(&a->loop, &a->sigterm);
    uv_signal_init(&a->loop, &a->sigint);
    a->sigterm.data = a->sigint.data = a;
    a->handles += 2;
    zt_status st = ag_rpc_init(a, err);
    if (st != ZT_OK) {
        zt_agent_destroy(a);
        return st;
    }
    *out = a;
    return ZT_OK;
}

int zt_agent_run(zt_agent *a)
{
    uv_signal_start(&a->sigterm, on_signal, SIGTERM);
    uv_signal_start(&a->sigint, on_signal, SIGINT);
    ZT_INFO("agent", "zagent %s: %s, %d %s slot%s, work dir %s, worker %s, coordinator %s%s%s",
            ZT_VERSION, a->cfg.name, a->cfg.slots, zt_device_name(a->cfg.device),
            a->cfg.slots == 1 ? "" : "s", a->cfg.work_dir, a->cfg.worker, a->cfg.coordinator,
            a->cfg.tls_ca_pem ? " (TLS)" : "", a->cfg.token ? " with a token" : "");
    reg_start(a);
    uv_timer_start(&a->hb_timer, on_hb_timer, (uint64_t)a->hb_ms, 0);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    return a->exit_code;
}

void zt_agent_destroy(zt_agent *a)
{
    if (!a) return;
    if (!a->closing) {
        /* never ran (or the loop was left early): close everything and let it settle */
        a->stopping = true;
        on_stop_timer(&a->stop_timer);
    }
    uv_run(&a->loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(&a->loop);
    if (rc != 0) ZT_WARN("agent", "uv_loop_close: %s (a handle was left open)", uv_strerror(rc));
    pthread_mutex_destroy(&a->cmu);
    zt_agent_config_free(&a->cfg);
    zt_free(a);
}
