/* zerotrain: stateless request checks (see validate.h). */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/validate.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/utf8.h"

static bool fail(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static bool fail(char *why, size_t cap, const char *fmt, ...)
{
    if (why && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* ---- UTF-8 of every string field -------------------------------------------------------- */

/* Why the text s (n bytes) is refused, with where it goes bad: the line and column too when
 * the text has several lines (a job file). */
static bool bad_utf8(char *why, size_t cap, const char *path, const char *s, size_t at)
{
    size_t line, col;
    zt_utf8_position(s, at, &line, &col);
    if (line > 1)
        return fail(
            why, cap,
            "%s is not valid UTF-8 at line %zu, column %zu (byte %zu): string fields must be UTF-8; re-encode the text (e.g. iconv -t UTF-8) and send it again",
            path, line, col, at);
    return fail(
        why, cap,
        "%s is not valid UTF-8 at byte %zu: string fields must be UTF-8; re-encode the text and send it again",
        path, at);
}

static bool strings_ok(const ProtobufCMessage *m, char *path, size_t plen, size_t pcap, char *why,
                       size_t cap, int depth)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    if (depth > 16) return true; /* the wire format nests no deeper in these messages */
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE) continue;
        if (d == &zt__v1__log_entry__descriptor && strcmp(f->name, "text") == 0)
            continue; /* cleaned by the handler: worker output is kept, not refused */
        bool rep = f->label == PROTOBUF_C_LABEL_REPEATED;
        size_t n = rep ? *(const size_t *)(base + f->quantifier_offset) : 1;
        const void *const *vals = rep ? *(const void *const *const *)(base + f->offset)
                                      : (const void *const *)(base + f->offset);
        for (size_t k = 0; k < n; k++) {
            const void *v = vals[k];
            if (!v) continue;
            int w =
                rep ? snprintf(path + plen, pcap - plen, "%s%s[%zu]", plen ? "." : "", f->name, k)
                    : snprintf(path + plen, pcap - plen, "%s%s", plen ? "." : "", f->name);
            size_t nlen = w > 0 && (size_t)w < pcap - plen ? plen + (size_t)w : pcap - 1;
            if (f->type == PROTOBUF_C_TYPE_STRING) {
                const char *str = v;
                size_t at = 0;
                if (!zt_utf8_valid(str, strlen(str), &at)) return bad_utf8(why, cap, path, str, at);
            } else if (!strings_ok(v, path, nlen, pcap, why, cap, depth + 1)) {
                return false;
            }
            path[plen] = '\0';
        }
    }
    return true;
}

bool zt_check_strings(const ProtobufCMessage *m, char *why, size_t cap)
{
    char path[256] = "";
    return strings_ok(m, path, 0, sizeof(path), why, cap, 0);
}

static bool too_long(const char *s, size_t max)
{
    return s && strlen(s) > max;
}

/* ---- per request --------------------------------------------------------------------------- */

static bool charset_ok(const char *s, size_t max, const char *extra)
{
    if (!s || !*s) return false;
    size_t n = 0;
    for (; *s; s++, n++) {
        unsigned char ch = (unsigned char)*s;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || strchr(extra, ch) != NULL;
        if (!ok || n >= max) return false;
    }
    return true;
}

bool zt_valid_name(const char *s)
{
    return charset_ok(s, 128, "._-");
}

bool zt_valid_metric_key(const char *s)
{
    return charset_ok(s, 64, "_.");
}

static bool device_ok(int d)
{
    return d == ZT__V1__DEVICE__DEVICE_CPU || d == ZT__V1__DEVICE__DEVICE_CUDA;
}

bool zt_check_submit(const Zt__V1__SubmitJobRequest *q, char *why, size_t cap)
{
    if (!q->job_text || !q->job_text[0])
        return fail(why, cap, "job_text is empty: send the job file's JSON text");
    if (q->job_dir && q->job_dir[0] && q->job_dir[0] != '/')
        return fail(why, cap,
                    "job_dir '%s' is not absolute: send the absolute directory of the job file",
                    q->job_dir);
    if (q->job_dir && strlen(q->job_dir) >= 1024)
        return fail(why, cap, "job_dir is longer than 1023 bytes");
    if (q->priority < -ZT_MAX_PRIORITY || q->priority > ZT_MAX_PRIORITY)
        return fail(why, cap, "priority %d is out of range [%d, %d]", q->priority, -ZT_MAX_PRIORITY,
                    ZT_MAX_PRIORITY);
    if (q->submit_key && strlen(q->submit_key) > 128)
        return fail(why, cap, "submit_key is longer than 128 bytes");
    if (too_long(q->user, ZT_MAX_USER))
        return fail(why, cap, "user is longer than %d bytes: send a shorter user name",
                    ZT_MAX_USER);
    if (too_long(q->job_path, ZT_MAX_JOB_PATH))
        return fail(why, cap, "job_path is longer than %d bytes", ZT_MAX_JOB_PATH);
    return true;
}

bool zt_check_job_id(int64_t id, char *why, size_t cap)
{
    if (id <= 0)
        return fail(why, cap, "job_id %lld is not a job id: ids are positive integers",
                    (long long)id);
    return true;
}

bool zt_check_list_jobs(const Zt__V1__ListJobsRequest *q, char *why, size_t cap)
{
    if (q->limit < 0 || q->limit > 1000)
        return fail(why, cap, "limit %d is out of range [0, 1000] (0 = 50)", q->limit);
    if (q->before_id < 0)
        return fail(why, cap, "before_id %lld is negative", (long long)q->before_id);
    for (size_t i = 0; i < q->n_states; i++)
        if (q->states[i] < ZT__V1__JOB_STATE__JOB_STATE_QUEUED ||
            q->states[i] > ZT__V1__JOB_STATE__JOB_STATE_CANCELED)
            return fail(why, cap, "states[%zu] = %d is not a job state", i, (int)q->states[i]);
    return true;
}

bool zt_check_get_metrics(const Zt__V1__GetMetricsRequest *q, char *why, size_t cap)
{
    if (!zt_check_job_id(q->job_id, why, cap)) return false;
    if (q->max_points < 0 || q->max_points > 100000)
        return fail(why, cap, "max_points %d is out of range [0, 100000]", q->max_points);
    if (q->n_keys > 256) return fail(why, cap, "%zu keys asked; at most 256", q->n_keys);
    for (size_t i = 0; i < q->n_keys; i++)
        if (!zt_valid_metric_key(q->keys[i]))
            return fail(why, cap, "keys[%zu] is not a metric key (letters, digits, '_', '.')", i);
    return true;
}

bool zt_check_get_logs(const Zt__V1__GetLogsRequest *q, char *why, size_t cap)
{
    if (!zt_check_job_id(q->job_id, why, cap)) return false;
    if (q->tail < 0) return fail(why, cap, "tail %d is negative", q->tail);
    if (q->n_ranks > 4096) return fail(why, cap, "%zu ranks asked; at most 4096", q->n_ranks);
    for (size_t i = 0; i < q->n_ranks; i++)
        if (q->ranks[i] < 0) return fail(why, cap, "ranks[%zu] = %d is negative", i, q->ranks[i]);
    return true;
}

bool zt_check_register(const Zt__V1__RegisterAgentRequest *q, char *why, size_t cap)
{
    if (!zt_valid_name(q->name))
        return fail(why, cap,
                    "agent name '%.64s' is not valid: 1-128 letters, digits, '.', '_' or '-'",
                    q->name ? q->name : "");
    if (!device_ok(q->device))
        return fail(why, cap, "agent %s: device %d is not DEVICE_CPU or DEVICE_CUDA", q->name,
                    (int)q->device);
    if (q->slots < 0 || q->slots > ZT_MAX_AGENT_SLOTS)
        return fail(why, cap, "agent %s: slots %d is out of range [0, %d]", q->name, q->slots,
                    ZT_MAX_AGENT_SLOTS);
    if (q->n_gpus > 256)
        return fail(why, cap, "agent %s: %zu GPUs listed; at most 256", q->name, q->n_gpus);
    if (q->device == ZT__V1__DEVICE__DEVICE_CUDA && q->n_gpus && q->n_gpus != (size_t)q->slots)
        return fail(why, cap, "agent %s: slots %d but %zu GPUs listed; they must agree", q->name,
                    q->slots, q->n_gpus);
    for (size_t i = 0; i < q->n_gpus; i++)
        if (q->gpus[i]->index < 0 || q->gpus[i]->memory_total < 0)
            return fail(why, cap, "agent %s: gpus[%zu] has a negative index or memory", q->name, i);
    if (too_long(q->hostname, ZT_MAX_HOST) || too_long(q->address, ZT_MAX_HOST))
        return fail(why, cap, "agent %s: hostname or address is longer than %d bytes", q->name,
                    ZT_MAX_HOST);
    return true;
}

static bool worker_ok(const Zt__V1__WorkerStatus *w, size_t i, char *why, size_t cap)
{
    if (w->attempt_id <= 0 || w->rank < 0)
        return fail(why, cap, "workers[%zu]: attempt_id %lld / rank %d are not valid", i,
                    (long long)w->attempt_id, w->rank);
    if ((int)w->phase < 0 || w->phase > ZT__V1__WORKER_PHASE__WORKER_PHASE_EXITED)
        return fail(why, cap, "workers[%zu]: phase %d is not a worker phase", i, (int)w->phase);
    if (w->step < 0 || w->collective_seq < 0)
        return fail(why, cap, "workers[%zu]: negative step or collective_seq", i);
    const Zt__V1__CollectiveWait *c = w->wait;
    if (c && (strlen(c->op) > 23 || strlen(c->part) > 23 || strlen(c->prev_op) > 23 ||
              c->seq < 1 || c->prev_seq < 0 || c->step < 0 || c->waited_ms < 0))
        return fail(why, cap,
                    "workers[%zu].wait: op, part and prev_op must be at most 23 bytes, seq >= 1, prev_seq, step and waited_ms >= 0",
                    i);
    if (strlen(w->bad_checkpoint) > 4096 || strlen(w->bad_checkpoint_reason) > 4096 ||
        strlen(w->exit_reason) > 4096)
        return fail(why, cap, "workers[%zu]: bad_checkpoint or its reason is longer than 4096 bytes",
                    i);
    return true;
}

bool zt_check_heartbeat(const Zt__V1__HeartbeatRequest *q, char *why, size_t cap)
{
    if (!zt_valid_name(q->name))
        return fail(why, cap, "heartbeat without a valid agent name: register first");
    if (q->n_workers > ZT_MAX_WORKERS_PER_HEARTBEAT)
        return fail(why, cap, "agent %s reports %zu workers; at most %d", q->name, q->n_workers,
                    ZT_MAX_WORKERS_PER_HEARTBEAT);
    for (size_t i = 0; i < q->n_workers; i++)
        if (!worker_ok(q->workers[i], i, why, cap)) return false;
    if (q->n_gpus > 256)
        return fail(why, cap, "agent %s: %zu GPUs listed; at most 256", q->name, q->n_gpus);
    return true;
}

bool zt_check_report_metrics(const Zt__V1__ReportMetricsRequest *q, char *why, size_t cap)
{
    if (q->n_steps > ZT_MAX_BATCH_ENTRIES)
        return fail(why, cap, "%zu steps in one report; at most %d", q->n_steps,
                    ZT_MAX_BATCH_ENTRIES);
    for (size_t i = 0; i < q->n_steps; i++) {
        const Zt__V1__StepMetrics *s = q->steps[i];
        if (s->attempt_id <= 0 || s->rank < 0 || s->step < 0)
            return fail(why, cap, "steps[%zu]: attempt_id, rank and step must be set", i);
        if (s->n_values > 64)
            return fail(why, cap, "steps[%zu]: %zu values; at most 64", i, s->n_values);
        for (size_t k = 0; k < s->n_values; k++)
            if (!zt_valid_metric_key(s->values[k]->key))
                return fail(
                    why, cap,
                    "steps[%zu].values[%zu]: key is not a metric key (1-64 letters, digits, '_', '.')",
                    i, k);
    }
    return true;
}

/* An absolute path whose last component is step_<digits> and that has no empty, "." or ".."
 * component: what zworker reports for a checkpoint directory. */
static bool step_dir_ok(const char *d)
{
    if (d[0] != '/') return false;
    const char *last = NULL;
    for (const char *p = d; *p;) {
        while (*p == '/')
            p++;
        if (!*p) break;
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) return false;
        last = p;
        p += n;
    }
    if (!last || strncmp(last, "step_", 5) != 0 || !last[5]) return false;
    for (const char *p = last + 5; *p && *p != '/'; p++)
        if (*p < '0' || *p > '9') return false;
    return true;
}

bool zt_check_report_checkpoint(const Zt__V1__ReportCheckpointRequest *q, char *why, size_t cap)
{
    if (q->attempt_id <= 0)
        return fail(why, cap, "attempt_id %lld is not valid", (long long)q->attempt_id);
    if (q->rank < 0) return fail(why, cap, "rank %d is negative", q->rank);
    if (q->step < 0) return fail(why, cap, "step %lld is negative", (long long)q->step);
    if (!q->dir || q->dir[0] != '/')
        return fail(why, cap, "dir must be the checkpoint directory's absolute path");
    if (strlen(q->dir) >= 1024 || (q->file && strlen(q->file) >= 256))
        return fail(why, cap, "dir or file name too long");
    if (!q->file || !q->file[0] || strchr(q->file, '/'))
        return fail(why, cap, "file must be the shard's name inside dir (no '/')");
    char want[32];
    snprintf(want, sizeof(want), "rank_%05d.zts", q->rank);
    if (strcmp(q->file, want) != 0)
        return fail(why, cap, "file must be rank %d's shard name %s", q->rank, want);
    if (!step_dir_ok(q->dir))
        return fail(why, cap,
                    "dir must be an absolute path ending in step_<n>, without '.' or '..' components");
    if (q->bytes <= 0) return fail(why, cap, "bytes %lld is not positive", (long long)q->bytes);
    return true;
}

bool zt_check_report_checkpoint_removed(const Zt__V1__ReportCheckpointRemovedRequest *q, char *why,
                                        size_t cap)
{
    if (q->attempt_id <= 0)
        return fail(why, cap, "attempt_id %lld is not valid", (long long)q->attempt_id);
    if (q->rank < 0) return fail(why, cap, "rank %d is negative", q->rank);
    if (q->step < 0) return fail(why, cap, "step %lld is negative", (long long)q->step);
    if (!q->dir || q->dir[0] != '/')
        return fail(why, cap, "dir must be the removed checkpoint directory's absolute path");
    if (strlen(q->dir) >= 1024) return fail(why, cap, "dir is too long (at most 1023 bytes)");
    if (!step_dir_ok(q->dir))
        return fail(why, cap,
                    "dir must be an absolute path ending in step_<n>, without '.' or '..' components");
    return true;
}

bool zt_check_report_logs(const Zt__V1__ReportLogsRequest *q, char *why, size_t cap)
{
    if (q->n_entries > ZT_MAX_BATCH_ENTRIES)
        return fail(why, cap, "%zu log entries in one report; at most %d", q->n_entries,
                    ZT_MAX_BATCH_ENTRIES);
    for (size_t i = 0; i < q->n_entries; i++) {
        const Zt__V1__LogEntry *e = q->entries[i];
        if (e->attempt_id <= 0 || e->rank < 0)
            return fail(why, cap, "entries[%zu]: attempt_id and rank must be set", i);
        if (e->source != ZT__V1__LOG_SOURCE__LOG_SOURCE_STDOUT &&
            e->source != ZT__V1__LOG_SOURCE__LOG_SOURCE_STDERR)
            return fail(why, cap, "entries[%zu]: source must be STDOUT or STDERR", i);
    }
    return true;
}

bool zt_check_rendezvous(const Zt__V1__RendezvousRequest *q, char *why, size_t cap)
{
    if (q->attempt_id <= 0)
        return fail(why, cap, "attempt_id %lld is not valid", (long long)q->attempt_id);
    if (q->rank < 0) return fail(why, cap, "rank %d is negative", q->rank);
    if (q->value.len > ZT_MAX_RDZV_VALUE)
        return fail(why, cap, "value of %zu bytes is over %d", q->value.len, ZT_MAX_RDZV_VALUE);
    if ((int)q->wait < 0 || q->wait > ZT__V1__RENDEZVOUS_REQUEST__WAIT__WAIT_ALL)
        return fail(why, cap, "wait %d is not NONE, RANK0 or ALL", (int)q->wait);
    if (q->wait_ms < 0 || q->wait_ms > ZT_MAX_RDZV_WAIT_MS)
        return fail(why, cap, "wait_ms %d is out of range [0, %d]", q->wait_ms,
                    ZT_MAX_RDZV_WAIT_MS);
    return true;
}

bool zt_check_health(const char *service, char *why, size_t cap)
{
    if (too_long(service, ZT_MAX_SERVICE))
        return fail(why, cap, "service name is longer than %d bytes", ZT_MAX_SERVICE);
    return true;
}
