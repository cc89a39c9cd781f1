/* zerotrain: what zagent forwards to the coordinator besides heartbeats — step metrics and
 * output lines, batched (one call of each kind in flight, sent every heartbeat tick or when a
 * batch is full) and bounded (when full, new entries are dropped and counted, and a marker
 * line says so), and checkpoint reports (durable shards, directories removed by
 * keep_checkpoints), sent at once and retried until recorded. A failed call leaves its
 * entries queued, so reports survive a coordinator restart. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "agent/agent_int.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/utf8.h"

#define AG_LOG_QUEUE_BYTES (16u << 20)

/* ---- output lines ---------------------------------------------------------------------- */

static bool log_push(ag_reports *r, const ag_worker *w, int source, const char *text, size_t len)
{
    ag_log_entry *e = zt_malloc(sizeof(*e) + len + 1);
    if (!e) return false;
    e->next = NULL;
    e->attempt_id = w->attempt_id;
    e->rank = w->rank;
    e->source = source;
    e->time_ms = zt_wall_ms();
    e->len = len;
    memcpy(e->text, text, len);
    e->text[len] = '\0';
    /* the coordinator stores and serves lines as protobuf strings and JSON: UTF-8 only */
    zt_utf8_clean(e->text, len);
    if (r->log_tail)
        r->log_tail->next = e;
    else
        r->log_head = e;
    r->log_tail = e;
    r->log_count++;
    r->log_bytes += len;
    return true;
}

void ag_reports_log_drops(zt_agent *a, ag_worker *w)
{
    if (!w->logs_dropped) return;
    /* one line per worker and episode, past the bounds, so that the gap is always marked */
    char mark[600];
    int n = snprintf(
        mark, sizeof(mark),
        "[zagent] %lld output lines of rank %d were dropped here (the coordinator was unreachable or slow); the whole output is in %s/rank_%05d.log on %s",
        (long long)w->logs_dropped, w->rank, w->dir, w->rank, a->cfg.name);
    if (log_push(&a->rep, w, 2, mark, (size_t)n < sizeof(mark) ? (size_t)n : sizeof(mark) - 1))
        w->logs_dropped = 0;
}

void ag_reports_log(zt_agent *a, ag_worker *w, int source, const char *text, size_t len)
{
    ag_reports *r = &a->rep;
    size_t max = (size_t)a->cfg.log_queue_lines;
    bool room = r->log_count + 1 < max && r->log_bytes + len + 256 <= AG_LOG_QUEUE_BYTES;
    if (room) ag_reports_log_drops(a, w);
    if (!room || !log_push(r, w, source, text, len)) {
        w->logs_dropped++;
        r->logs_dropped++;
        if (!r->warned_logs) {
            r->warned_logs = true;
            ZT_WARN(
                "agent",
                "the queue of output lines for the coordinator is full (%zu lines, %zu bytes): dropping new lines until it drains (they stay in the rank log files under %s)",
                r->log_count, r->log_bytes, a->cfg.work_dir);
        }
    }
}

static void log_pop(ag_reports *r, size_t k)
{
    for (size_t i = 0; i < k && r->log_head; i++) {
        ag_log_entry *e = r->log_head;
        r->log_head = e->next;
        r->log_count--;
        r->log_bytes -= e->len;
        zt_free(e);
    }
    if (!r->log_head) r->log_tail = NULL;
    if (r->log_count < (size_t)1 << 10) r->warned_logs = false;
}

static void on_logs(zt_agent *a, void *ctx, zt_rpc_code code, const char *msg, void *reply,
                    uint64_t elapsed_ns)
{
    (void)ctx;
    (void)reply;
    (void)elapsed_ns;
    ag_reports *r = &a->rep;
    size_t k = r->log_in_flight;
    r->log_in_flight = 0;
    if (code == ZT_RPC_OK) {
        r->logs_sent += (int64_t)k;
        log_pop(r, k);
        for (ag_worker *w = a->workers; w; w = w->next)
            if (r->log_count + 1 < (size_t)a->cfg.log_queue_lines) ag_reports_log_drops(a, w);
    } else if (!ag_rpc_transient(code)) {
        ZT_WARN("agent", "the coordinator refused %zu output lines (%s: %s); dropping them", k,
                zt_rpc_code_name(code), msg);
        r->logs_dropped += (int64_t)k;
        log_pop(r, k);
    }
    if (r->log_count >= AG_LOG_BATCH && code == ZT_RPC_OK) ag_reports_flush(a);
}

static void send_logs(zt_agent *a)
{
    ag_reports *r = &a->rep;
    size_t k = 0, bytes = 0;
    for (ag_log_entry *e = r->log_head; e && k < AG_LOG_BATCH && bytes < AG_LOG_BATCH_BYTES;
         e = e->next) {
        k++;
        bytes += e->len + 32;
    }
    Zt__V1__LogEntry *ents = zt_calloc(k, sizeof(*ents));
    Zt__V1__LogEntry **ptrs = zt_calloc(k, sizeof(*ptrs));
    if (!ents || !ptrs) {
        zt_free(ents);
        zt_free(ptrs);
        return; /* next tick */
    }
    size_t i = 0;
    for (ag_log_entry *e = r->log_head; e && i < k; e = e->next, i++) {
        zt__v1__log_entry__init(&ents[i]);
        ents[i].attempt_id = e->attempt_id;
        ents[i].rank = e->rank;
        ents[i].source = (Zt__V1__LogSource)e->source;
        ents[i].time_ms = e->time_ms;
        ents[i].text = e->text;
        ptrs[i] = &ents[i];
    }
    Zt__V1__ReportLogsRequest q = ZT__V1__REPORT_LOGS_REQUEST__INIT;
    q.agent = a->cfg.name;
    q.n_entries = k;
    q.entries = ptrs;
    r->log_in_flight = k;
    ag_rpc_call(a, "ReportLogs", &q.base, &zt__v1__report_logs_reply__descriptor, 10000, on_logs,
                NULL);
    zt_free(ents);
    zt_free(ptrs);
}

/* ---- step metrics ---------------------------------------------------------------------- */

void ag_reports_step(zt_agent *a, ag_worker *w, const zt_reportline *line)
{
    ag_reports *r = &a->rep;
    if (r->step_count >= AG_METRICS_MAX) {
        r->steps_dropped++;
        if (!r->warned_steps) {
            r->warned_steps = true;
            ZT_WARN(
                "agent",
                "%d step reports are queued for the coordinator: dropping new ones until it takes them",
                AG_METRICS_MAX);
        }
        return;
    }
    int n = line->n_values;
    ag_step *s = zt_malloc(sizeof(*s) + (size_t)n * sizeof(s->values[0]));
    if (!s) {
        r->steps_dropped++;
        return;
    }
    s->next = NULL;
    s->attempt_id = w->attempt_id;
    s->rank = w->rank;
    s->step = line->step;
    s->time_ms = zt_wall_ms();
    s->n = n;
    memcpy(s->values, line->values, (size_t)n * sizeof(s->values[0]));
    if (r->step_tail)
        r->step_tail->next = s;
    else
        r->step_head = s;
    r->step_tail = s;
    r->step_count++;
}

static void step_pop(ag_reports *r, size_t k)
{
    for (size_t i = 0; i < k && r->step_head; i++) {
        ag_step *s = r->step_head;
        r->step_head = s->next;
        r->step_count--;
        zt_free(s);
    }
    if (!r->step_head) r->step_tail = NULL;
    if (r->step_count < AG_METRICS_MAX / 2) r->warned_steps = false;
}

static void on_metrics(zt_agent *a, void *ctx, zt_rpc_code code, const char *msg, void *reply,
                       uint64_t elapsed_ns)
{
    (void)ctx;
    (void)reply;
    (void)elapsed_ns;
    ag_reports *r = &a->rep;
    size_t k = r->step_in_flight;
    r->step_in_flight = 0;
    if (code == ZT_RPC_OK) {
        r->steps_sent += (int64_t)k;
        step_pop(r, k);
    } else if (!ag_rpc_transient(code)) {
        ZT_WARN("agent", "the coordinator refused %zu step reports (%s: %s); dropping them", k,
                zt_rpc_code_name(code), msg);
        r->steps_dropped += (int64_t)k;
        step_pop(r, k);
    }
}

static void send_steps(zt_agent *a)
{
    ag_reports *r = &a->rep;
    size_t k = 0, nv = 0;
    for (ag_step *s = r->step_head; s && k < AG_METRICS_BATCH; s = s->next) {
        k++;
        nv += (size_t)s->n;
    }
    Zt__V1__StepMetrics *steps = zt_calloc(k, sizeof(*steps));
    Zt__V1__StepMetrics **sp = zt_calloc(k, sizeof(*sp));
    Zt__V1__Metric *vals = zt_calloc(nv ? nv : 1, sizeof(*vals));
    Zt__V1__Metric **vp = zt_calloc(nv ? nv : 1, sizeof(*vp));
    if (steps && sp && vals && vp) {
        size_t i = 0, v = 0;
        for (ag_step *s = r->step_head; s && i < k; s = s->next, i++) {
            zt__v1__step_metrics__init(&steps[i]);
            steps[i].attempt_id = s->attempt_id;
            steps[i].rank = s->rank;
            steps[i].step = s->step;
            steps[i].time_ms = s->time_ms;
            steps[i].values = &vp[v];
            steps[i].n_values = (size_t)s->n;
            for (int j = 0; j < s->n; j++, v++) {
                zt__v1__metric__init(&vals[v]);
                vals[v].key = s->values[j].key;
                vals[v].value = s->values[j].value;
                vp[v] = &vals[v];
            }
            sp[i] = &steps[i];
        }
        Zt__V1__ReportMetricsRequest q = ZT__V1__REPORT_METRICS_REQUEST__INIT;
        q.agent = a->cfg.name;
        q.n_steps = k;
        q.steps = sp;
        r->step_in_flight = k;
        ag_rpc_call(a, "ReportMetrics", &q.base, &zt__v1__report_metrics_reply__descriptor, 10000,
                    on_metrics, NULL);
    }
    zt_free(steps);
    zt_free(sp);
    zt_free(vals);
    zt_free(vp);
}

/* ---- checkpoint shards ----------------------------------------------------------------- */

static void ckpt_settle(zt_agent *a, ag_ckpt *c)
{
    for (ag_ckpt **p = &a->rep.ckpts; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    a->rep.ckpt_count--;
    ag_worker *w = c->w;
    zt_free(c->dir);
    zt_free(c->file);
    zt_free(c);
    ag_worker_ckpt_settled(w);
    ag_worker_unref(w);
}

static void send_ckpt(zt_agent *a, ag_ckpt *c);

static void on_ckpt(zt_agent *a, void *ctx, zt_rpc_code code, const char *msg, void *reply,
                    uint64_t elapsed_ns)
{
    (void)elapsed_ns;
    ag_ckpt *c = ctx;
    c->in_flight = false;
    if (code == ZT_RPC_OK && c->removed) {
        const Zt__V1__ReportCheckpointRemovedReply *r = reply;
        a->rep.ckpts_sent++;
        ZT_INFO("agent", "checkpoint step %lld at %s: removal recorded%s", (long long)c->step,
                c->dir, r->changed ? "" : " (it was already)");
        ckpt_settle(a, c);
    } else if (code == ZT_RPC_OK) {
        const Zt__V1__ReportCheckpointReply *r = reply;
        a->rep.ckpts_sent++;
        ZT_INFO("agent", "checkpoint step %lld: shard of rank %d recorded (%d of %d)%s",
                (long long)c->step, c->rank, r->shards, r->world_size,
                r->committed ? ": checkpoint COMMITTED" : "");
        ckpt_settle(a, c);
    } else if (ag_rpc_transient(code) && !a->final_sent) {
        c->failures++;
        uint64_t ms = 250;
        for (int i = 1; i < c->failures && ms < 5000; i++)
            ms *= 2;
        c->next_try_ns = zt_now_ns() + (ms < 5000 ? ms : 5000) * 1000000ull;
        if (c->failures == 1 && c->removed)
            ZT_WARN("agent",
                    "checkpoint step %lld: reporting that %s was removed failed (%s: %s); retrying",
                    (long long)c->step, c->dir, zt_rpc_code_name(code), msg);
        else if (c->failures == 1)
            ZT_WARN(
                "agent",
                "checkpoint step %lld: reporting the shard of rank %d failed (%s: %s); retrying",
                (long long)c->step, c->rank, zt_rpc_code_name(code), msg);
    } else if (c->removed) {
        ZT_WARN(
            "agent",
            "checkpoint step %lld: the coordinator did not record that %s was removed (%s: %s); giving up (it may still list that checkpoint, but it checks for meta.json before resuming from one)",
            (long long)c->step, c->dir, zt_rpc_code_name(code), msg);
        a->rep.ckpts_dropped++;
        ckpt_settle(a, c);
    } else {
        ZT_WARN(
            "agent",
            "checkpoint step %lld: the coordinator did not record the shard of rank %d (%s: %s); giving up on it",
            (long long)c->step, c->rank, zt_rpc_code_name(code), msg);
        a->rep.ckpts_dropped++;
        ckpt_settle(a, c);
    }
}

static void send_ckpt(zt_agent *a, ag_ckpt *c)
{
    if (c->removed) {
        Zt__V1__ReportCheckpointRemovedRequest q = ZT__V1__REPORT_CHECKPOINT_REMOVED_REQUEST__INIT;
        q.agent = a->cfg.name;
        q.attempt_id = c->attempt_id;
        q.rank = c->rank;
        q.step = c->step;
        q.dir = c->dir;
        c->in_flight = true;
        ag_rpc_call(a, "ReportCheckpointRemoved", &q.base,
                    &zt__v1__report_checkpoint_removed_reply__descriptor, 10000, on_ckpt, c);
        return;
    }
    Zt__V1__ReportCheckpointRequest q = ZT__V1__REPORT_CHECKPOINT_REQUEST__INIT;
    q.agent = a->cfg.name;
    q.attempt_id = c->attempt_id;
    q.rank = c->rank;
    q.step = c->step;
    q.dir = c->dir;
    q.file = c->file;
    q.bytes = c->bytes;
    q.crc32c = c->crc32c;
    c->in_flight = true;
    ag_rpc_call(a, "ReportCheckpoint", &q.base, &zt__v1__report_checkpoint_reply__descriptor, 10000,
                on_ckpt, c);
}

/* Links c (filled by the caller) into the queue, holding a ref on w, and sends it. */
static void ckpt_queue(zt_agent *a, ag_worker *w, ag_ckpt *c, const zt_reportline *line)
{
    ag_reports *r = &a->rep;
    c->w = w;
    c->attempt_id = w->attempt_id;
    c->rank = w->rank;
    c->step = line->step;
    c->bytes = line->bytes;
    c->crc32c = line->crc32c;
    w->refs++;
    w->ckpt_pending++;
    c->next = r->ckpts;
    r->ckpts = c;
    r->ckpt_count++;
    send_ckpt(a, c);
}

void ag_reports_ckpt(zt_agent *a, ag_worker *w, const zt_reportline *line)
{
    ag_reports *r = &a->rep;
    const char *slash = strrchr(line->path, '/');
    if (!slash || slash == line->path || !slash[1]) {
        ZT_WARN("agent", "rank %d: shard path %s has no directory part; not reported", w->rank,
                line->path);
        return;
    }
    if (r->ckpt_count >= AG_CKPT_MAX) {
        r->ckpts_dropped++;
        ZT_ERROR(
            "agent",
            "%d shard reports are waiting for the coordinator; dropping step %lld of rank %d (that checkpoint will not be usable for restarts)",
            AG_CKPT_MAX, (long long)line->step, w->rank);
        return;
    }
    ag_ckpt *c = zt_calloc(1, sizeof(*c));
    if (c) {
        c->dir = zt_strndup(line->path, (size_t)(slash - line->path));
        c->file = zt_strdup(slash + 1);
    }
    if (!c || !c->dir || !c->file) {
        if (c) {
            zt_free(c->dir);
            zt_free(c->file);
        }
        zt_free(c);
        r->ckpts_dropped++;
        ZT_ERROR("agent", "out of memory queueing the shard report of rank %d, step %lld", w->rank,
                 (long long)line->step);
        return;
    }
    ckpt_queue(a, w, c, line);
}

void ag_reports_ckpt_removed(zt_agent *a, ag_worker *w, const zt_reportline *line)
{
    ag_reports *r = &a->rep;
    if (r->ckpt_count >= AG_CKPT_MAX) {
        r->ckpts_dropped++;
        ZT_ERROR(
            "agent",
            "%d checkpoint reports are waiting for the coordinator; dropping the removal of %s (the coordinator checks for meta.json before resuming from a checkpoint)",
            AG_CKPT_MAX, line->path);
        return;
    }
    ag_ckpt *c = zt_calloc(1, sizeof(*c));
    if (c) c->dir = zt_strdup(line->path);
    if (!c || !c->dir) {
        zt_free(c);
        r->ckpts_dropped++;
        ZT_ERROR("agent", "out of memory queueing the removal report of %s", line->path);
        return;
    }
    c->removed = true;
    ckpt_queue(a, w, c, line);
}

/* ---- flushing -------------------------------------------------------------------------- */

void ag_reports_flush(zt_agent *a)
{
    ag_reports *r = &a->rep;
    if (!r->log_in_flight && r->log_count) send_logs(a);
    if (!r->step_in_flight && r->step_count) send_steps(a);
    uint64_t now = zt_now_ns();
    ag_ckpt *next;
    for (ag_ckpt *c = r->ckpts; c; c = next) {
        next = c->next; /* a failed start settles c at once */
        if (!c->in_flight && c->next_try_ns <= now) send_ckpt(a, c);
    }
}

bool ag_reports_idle(const zt_agent *a)
{
    const ag_reports *r = &a->rep;
    return !r->log_count && !r->step_count && !r->ckpts;
}

void ag_reports_free(zt_agent *a)
{
    ag_reports *r = &a->rep;
    log_pop(r, r->log_count);
    step_pop(r, r->step_count);
    while (r->ckpts) {
        ag_ckpt *c = r->ckpts;
        r->ckpts = c->next;
        ag_worker *w = c->w;
        zt_free(c->dir);
        zt_free(c->file);
        zt_free(c);
        w->ckpt_pending--;
        ag_worker_unref(w);
    }
    r->ckpt_count = 0;
}
