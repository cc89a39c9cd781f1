/* zerotrain: /metrics — the coordinator in the Prometheus text exposition format (0.0.4):
 * jobs and agents by state, slots by device, each live job's and rank's progress, memory and
 * step-time split, RPC calls per method, heartbeats, SQLite commit latency, HTTP requests.
 * Live values are copied under the model's lock, then formatted without it. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/device.h"
#include "coordinator/api.h"
#include "coordinator/coord_int.h"

const double coord_hist_bounds[COORD_HIST_BUCKETS - 1] = {0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                          0.025,  0.05,  0.1,    0.25,  1.0};

void coord_hist_observe(c_hist *h, uint64_t ns)
{
    double s = (double)ns / 1e9;
    int b = 0;
    while (b < COORD_HIST_BUCKETS - 1 && s > coord_hist_bounds[b])
        b++;
    atomic_fetch_add_explicit(&h->buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

/* ---- a growing text buffer ---------------------------------------------------------------- */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool failed;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)w < b->cap - b->n) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)w;
        char *ns = zt_realloc(b->s, cap);
        if (!ns) {
            b->failed = true;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
}

static void header(sbuf *b, const char *name, const char *type, const char *help)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The series of one histogram: cumulative buckets, sum and count, with labels (or none). */
static void put_hist(sbuf *b, const char *name, const char *labels, const c_hist *h)
{
    const char *sep = labels ? "," : "";
    labels = labels ? labels : "";
    uint64_t cum = 0;
    for (int i = 0; i < COORD_HIST_BUCKETS; i++) {
        cum += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
        if (i < COORD_HIST_BUCKETS - 1)
            sb_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep,
                      coord_hist_bounds[i], (unsigned long long)cum);
        else
            sb_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                      (unsigned long long)cum);
    }
    if (labels[0]) {
        sb_printf(b, "%s_sum{%s} %.9f\n%s_count{%s} %llu\n", name, labels,
                  (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) / 1e9, name,
                  labels, (unsigned long long)cum);
    } else {
        sb_printf(b, "%s_sum %.9f\n%s_count %llu\n", name,
                  (double)atomic_load_explicit(&h->sum_ns, memory_order_relaxed) / 1e9, name,
                  (unsigned long long)cum);
    }
}

/* A label value with \, " and newlines escaped (names are [A-Za-z0-9._-] already). */
static void esc(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    for (; *in && n + 3 < cap; in++) {
        if (*in == '\\' || *in == '"') {
            out[n++] = '\\';
            out[n++] = *in;
        } else if (*in == '\n') {
            out[n++] = '\\';
            out[n++] = 'n';
        } else {
            out[n++] = *in;
        }
    }
    out[n] = '\0';
}

/* ---- the snapshot taken under the lock ------------------------------------------------------ */

typedef struct rank_snap {
    int rank;
    int64_t step, memory_bytes, peak_memory_bytes;
    double tokens_per_s;
} rank_snap;

typedef struct job_snap {
    int64_t id;
    char name[200];
    int64_t step, total_steps;
    double loss, tokens_per_s;
    bool has_metrics;
    char *kv; /* rank 0's latest step line (owned) */
    rank_snap *ranks;
    int n_ranks;
} job_snap;

/* Value of key in "k=v k=v"; false when absent. */
static bool kv_get(const char *kv, const char *key, double *out)
{
    size_t kl = strlen(key);
    for (const char *p = kv; p && *p;) {
        while (*p == ' ')
            p++;
        if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
            *out = strtod(p + kl + 1, NULL);
            return true;
        }
        p = strchr(p, ' ');
    }
    return false;
}

char *zt_api_metrics_text(zt_coord *c, zt_http *h)
{
    sbuf b = {.s = zt_malloc(16384), .cap = 16384};
    if (!b.s) return NULL;
    b.s[0] = '\0';

    /* jobs by state: terminal ones from the store, live ones from memory */
    int64_t counts[8] = {0};
    zt_err e = {0};
    zt_store *rs = NULL;
    pthread_mutex_lock(&c->hsmu);
    if (c->n_hstores > 0) rs = c->hstores[--c->n_hstores];
    pthread_mutex_unlock(&c->hsmu);
    if (!rs && zt_store_open(&rs, c->cfg.db_path, true, &e) != ZT_OK) rs = NULL;
    bool counted = rs && zt_store_job_state_counts(rs, counts, &e) == ZT_OK;
    if (rs) {
        pthread_mutex_lock(&c->hsmu);
        if (c->n_hstores < COORD_HTTP_STORES) {
            c->hstores[c->n_hstores++] = rs;
            rs = NULL;
        }
        pthread_mutex_unlock(&c->hsmu);
        zt_store_close(rs);
    }

    int64_t slots[3] = {0}, used[3] = {0}, agents[3] = {0}, live[8] = {0};
    pthread_mutex_lock(&c->mu);
    size_t nj = 0;
    for (size_t i = 0; i < c->n_jobs; i++)
        nj += c->jobs[i]->att != NULL;
    job_snap *js = zt_calloc(nj ? nj : 1, sizeof(*js));
    size_t k = 0;
    for (size_t i = 0; i < c->n_agents; i++) {
        c_agent *a = c->agents[i];
        int state = a->revived ? ZT_AGENT_ALIVE : a->state;
        agents[state == ZT_AGENT_ALIVE ? 1 : 2]++;
        if (state != ZT_AGENT_ALIVE) continue;
        int d = a->device == ZT_DEVICE_CUDA ? ZT_DEVICE_CUDA : ZT_DEVICE_CPU;
        slots[d] += a->slots;
        used[d] += a->slots - coord_agent_free_slots(c, a);
    }
    for (size_t i = 0; i < c->n_jobs; i++) {
        const c_job *j = c->jobs[i];
        if (j->state > 0 && j->state < 8) live[j->state]++;
        if (!js || !j->att || k >= nj) continue;
        job_snap *s = &js[k++];
        s->id = j->id;
        snprintf(s->name, sizeof(s->name), "%s", j->name);
        s->step = j->step;
        s->total_steps = j->total_steps;
        s->loss = j->loss;
        s->tokens_per_s = j->tokens_per_s;
        s->has_metrics = j->metrics_kv != NULL;
        s->kv = j->metrics_kv ? zt_strdup(j->metrics_kv) : NULL;
        s->ranks = zt_calloc((size_t)j->att->world_size, sizeof(*s->ranks));
        if (s->ranks) {
            s->n_ranks = j->att->world_size;
            for (int r = 0; r < j->att->world_size; r++) {
                const c_rank *rk = &j->att->ranks[r];
                s->ranks[r] = (rank_snap){rk->rank, rk->step, rk->memory_bytes,
                                          rk->peak_memory_bytes, rk->tokens_per_s};
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (!js) {
        zt_free(b.s);
        return NULL;
    }

    header(&b, "zt_jobs", "gauge", "Jobs by state (terminal states from the database).");
    for (int s = ZT_JOB_QUEUED; s <= ZT_JOB_CANCELED; s++) {
        int64_t v = s <= ZT_JOB_RUNNING ? live[s] : counted ? counts[s] : 0;
        sb_printf(&b, "zt_jobs{state=\"%s\"} %lld\n", zt_job_state_name((zt_job_state)s),
                  (long long)v);
    }
    header(&b, "zt_agents", "gauge", "Registered agents by state.");
    sb_printf(&b, "zt_agents{state=\"ALIVE\"} %lld\nzt_agents{state=\"LOST\"} %lld\n",
              (long long)agents[1], (long long)agents[2]);
    header(&b, "zt_slots", "gauge", "Worker slots of alive agents by device.");
    sb_printf(&b, "zt_slots{device=\"cpu\"} %lld\nzt_slots{device=\"cuda\"} %lld\n",
              (long long)slots[1], (long long)slots[2]);
    header(&b, "zt_slots_used", "gauge", "Worker slots taken by placed ranks, by device.");
    sb_printf(&b, "zt_slots_used{device=\"cpu\"} %lld\nzt_slots_used{device=\"cuda\"} %lld\n",
              (long long)used[1], (long long)used[2]);

    /* per job and rank */
    static const struct {
        const char *name, *type, *help;
    } per_rank[] = {
        {"zt_job_step", "gauge", "Last step a rank reported."},
        {"zt_job_tokens_per_second", "gauge", "Training throughput a rank reported."},
        {"zt_job_memory_bytes", "gauge", "Memory a rank's worker holds."},
        {"zt_job_peak_memory_bytes", "gauge", "Peak memory of a rank's worker."},
    };
    for (size_t m = 0; m < sizeof(per_rank) / sizeof(per_rank[0]); m++) {
        header(&b, per_rank[m].name, per_rank[m].type, per_rank[m].help);
        for (size_t i = 0; i < k; i++) {
            char name[420];
            esc(js[i].name, name, sizeof(name));
            for (int r = 0; r < js[i].n_ranks; r++) {
                const rank_snap *rk = &js[i].ranks[r];
                double v = m == 0   ? (double)rk->step
                           : m == 1 ? rk->tokens_per_s
                           : m == 2 ? (double)rk->memory_bytes
                                    : (double)rk->peak_memory_bytes;
                sb_printf(&b, "%s{job_id=\"%lld\",job=\"%s\",rank=\"%d\"} %.17g\n",
                          per_rank[m].name, (long long)js[i].id, name, rk->rank, v);
            }
        }
    }
    /* rank 0's step line: loss, rates, the step-time split and memory by category */
    static const struct {
        const char *key, *name, *help;
        double scale;
    } per_job[] = {
        {"loss", "zt_job_loss", "Training loss of the last step.", 1},
        {"val_loss", "zt_job_validation_loss", "Validation loss of the last evaluation.", 1},
        {"lr", "zt_job_learning_rate", "Learning rate of the last step.", 1},
        {"grad_norm", "zt_job_gradient_norm", "Gradient norm of the last step.", 1},
        {"loss_scale", "zt_job_loss_scale", "fp16 loss scale.", 1},
        {"mfu", "zt_job_mfu_ratio", "Model FLOPs utilisation of the last step (0-1).", 1},
        {"tflops", "zt_job_tflops", "Achieved TFLOP/s of the last step.", 1},
        {"step_ms", "zt_job_step_seconds", "Duration of the last step.", 1e-3},
    };
    for (size_t m = 0; m < sizeof(per_job) / sizeof(per_job[0]); m++) {
        bool any = false;
        for (size_t i = 0; i < k; i++) {
            double v;
            if (!js[i].kv || !kv_get(js[i].kv, per_job[m].key, &v)) continue;
            if (!any) header(&b, per_job[m].name, "gauge", per_job[m].help);
            any = true;
            char name[420];
            esc(js[i].name, name, sizeof(name));
            sb_printf(&b, "%s{job_id=\"%lld\",job=\"%s\"} %.17g\n", per_job[m].name,
                      (long long)js[i].id, name, v * per_job[m].scale);
        }
    }
    static const struct {
        const char *key, *phase;
    } split[] = {{"fwd_ms", "forward"},
                 {"bwd_ms", "backward"},
                 {"opt_ms", "optimizer"},
                 {"comm_ms", "communication"}};
    header(&b, "zt_job_step_phase_seconds", "gauge", "Time of the last step by phase (rank 0).");
    for (size_t i = 0; i < k; i++) {
        char name[420];
        esc(js[i].name, name, sizeof(name));
        for (size_t p = 0; p < 4; p++) {
            double v;
            if (js[i].kv && kv_get(js[i].kv, split[p].key, &v))
                sb_printf(
                    &b,
                    "zt_job_step_phase_seconds{job_id=\"%lld\",job=\"%s\",phase=\"%s\"} %.17g\n",
                    (long long)js[i].id, name, split[p].phase, v * 1e-3);
        }
    }
    header(&b, "zt_job_memory_category_bytes", "gauge",
           "Rank 0's memory by category (parameters, gradients, optimizer states, ...).");
    for (size_t i = 0; i < k; i++) {
        char name[420];
        esc(js[i].name, name, sizeof(name));
        for (const char *p = js[i].kv; p && *p;) {
            while (*p == ' ')
                p++;
            const char *eq = strchr(p, '=');
            if (!eq) break;
            if (strncmp(p, "mem_", 4) == 0 && eq - p > 4 && eq - p < 64) {
                char cat[64];
                snprintf(cat, sizeof(cat), "%.*s", (int)(eq - p - 4), p + 4);
                sb_printf(
                    &b,
                    "zt_job_memory_category_bytes{job_id=\"%lld\",job=\"%s\",rank=\"0\",category=\"%s\"} %.17g\n",
                    (long long)js[i].id, name, cat, strtod(eq + 1, NULL));
            }
            p = strchr(eq, ' ');
        }
    }
    for (size_t i = 0; i < k; i++) {
        zt_free(js[i].kv);
        zt_free(js[i].ranks);
    }
    zt_free(js);

    /* RPC, heartbeats, commits, HTTP */
    header(&b, "zt_rpc_requests_total", "counter", "gRPC calls received, by method.");
    uint64_t heartbeats = 0;
    for (size_t i = 0; i < c->n_rpc_stats; i++) {
        uint64_t n = atomic_load_explicit(&c->rpc_stats[i].calls, memory_order_relaxed);
        sb_printf(&b, "zt_rpc_requests_total{method=\"%s\"} %llu\n", c->rpc_stats[i].path,
                  (unsigned long long)n);
        if (strcmp(c->rpc_stats[i].path, "/zt.v1.AgentControl/Heartbeat") == 0) heartbeats = n;
    }
    header(&b, "zt_heartbeats_received_total", "counter", "Agent heartbeats received.");
    sb_printf(&b, "zt_heartbeats_received_total %llu\n", (unsigned long long)heartbeats);
    header(&b, "zt_rpc_duration_seconds", "histogram",
           "gRPC calls from arrival to answer (streams: to their end), by method.");
    for (size_t i = 0; i < c->n_rpc_stats; i++) {
        char labels[160];
        snprintf(labels, sizeof(labels), "method=\"%s\"", c->rpc_stats[i].path);
        put_hist(&b, "zt_rpc_duration_seconds", labels, &c->rpc_stats[i].latency);
    }
    header(&b, "zt_store_commit_seconds", "histogram",
           "Duration of SQLite commits of the state thread (the fsync point).");
    put_hist(&b, "zt_store_commit_seconds", NULL, &c->commit_hist);
    zt_http_stats hs;
    zt_http_get_stats(h, &hs);
    header(&b, "zt_http_requests_total", "counter", "HTTP requests answered, by status class.");
    for (int i = 1; i <= 5; i++)
        sb_printf(&b, "zt_http_requests_total{code=\"%dxx\"} %llu\n", i,
                  (unsigned long long)hs.requests[i]);
    header(&b, "zt_http_unauthorized_total", "counter",
           "HTTP requests refused for a missing or wrong credential.");
    sb_printf(&b, "zt_http_unauthorized_total %llu\n", (unsigned long long)hs.unauthorized);
    header(&b, "zt_http_event_streams", "gauge", "Server-Sent Events streams open.");
    sb_printf(&b, "zt_http_event_streams %d\n", hs.streams);
    if (b.failed) {
        zt_free(b.s);
        return NULL;
    }
    return b.s;
}
