/* Load benchmark of zcoord: N simulated agents (one HTTP/2 connection each) heartbeat at a
 * fixed rate from a C load generator (--threads shares of the agents, each on one thread that
 * sends beats when due and takes each reply as it arrives, as an agent of its own would). The
 * agents speak gRPC through nghttp2 (h2_unary.c), which costs the generator a fraction of the
 * gRPC core client's CPU per call: zcoord and the generator share this machine's cores, and
 * 1,000 real agents would run elsewhere. --grpc-agents sends the beats through the gRPC core
 * client instead (the one zagent uses; a sender and a receiver thread per share).
 * Meanwhile submitters send jobs that the simulated agents run to completion (so the heartbeat
 * path also carries worker reports and state changes). Prints heartbeats handled per second
 * with p50/p99 latency, acknowledged submissions per second (verified stored afterwards), and
 * next to them the rate of an empty unary call (Ping) measured in the same run: the gRPC C
 * core's own ceiling on this machine. --http-readers N adds N browsers' worth of HTTP readers
 * beside the agents, each holding the job-list event stream (/api/v1/stream) open, and
 * --scrapers M (1 by default with readers: one Prometheus) scrape /metrics once a second
 * each, so the heartbeat figures can be compared with and without them. Exits 1 when a
 * heartbeat fails or an acknowledged job is not stored; with --check also when the targets
 * are missed (10,000 heartbeats/s with p99 under 20 ms; 100 submissions/s). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "proto/rpc.h"
#include "proto/zerotrain.pb-c.h"
#include "tests/bench/h2_unary.h"
#include "tests/coordinator/zcoord_harness.h"

typedef struct opts {
    int agents, rate_hz, seconds, submitters, threads, pollers, job_steps, http_readers, scrapers;
    double submit_rate;
    bool check, grpc_agents;
} opts;

/* ---- latency histogram: 1 us buckets up to 100 ms, then overflow ------------------------- */

#define HBUCKETS 100000
typedef struct hist {
    uint32_t *b;
    uint64_t n, over;
    double max_ms;
} hist;

static void hist_init(hist *h)
{
    h->b = zt_calloc(HBUCKETS, sizeof(*h->b));
    h->n = h->over = 0;
    h->max_ms = 0;
}

static void hist_add(hist *h, uint64_t ns)
{
    uint64_t us = ns / 1000;
    if (us < HBUCKETS)
        h->b[us]++;
    else
        h->over++;
    h->n++;
    double ms = (double)ns * 1e-6;
    if (ms > h->max_ms) h->max_ms = ms;
}

static void hist_merge(hist *into, const hist *from)
{
    for (int i = 0; i < HBUCKETS; i++)
        into->b[i] += from->b[i];
    into->n += from->n;
    into->over += from->over;
    if (from->max_ms > into->max_ms) into->max_ms = from->max_ms;
}

static double hist_pct(const hist *h, double p)
{
    if (!h->n) return 0;
    uint64_t want = (uint64_t)ceil(p * (double)h->n), seen = 0;
    for (int i = 0; i < HBUCKETS; i++) {
        seen += h->b[i];
        if (seen >= want) return (double)i / 1000.0;
    }
    return h->max_ms;
}

/* ---- simulated agents --------------------------------------------------------------------- */

typedef struct sim_worker {
    int64_t job, attempt;
    int rank, device;
    int64_t step;
    bool exited;
} sim_worker;

typedef struct agent {
    char name[32];
    int64_t inc;
    char key[128];    /* the agent key RegisterAgent gave */
    zt_rpc_client *c; /* --grpc-agents */
    h2u_conn *h2;     /* otherwise */
    uint64_t next_due, sent_at;
    bool in_flight;
    sim_worker w[4];
    int nw;
    struct loadgen *lg;
} agent;

/* One share of the agents. Through nghttp2 (the default) one thread sends each agent's beat
 * when it is due and reads the replies as they arrive, between sends of a few microseconds.
 * Through the gRPC core client (--grpc-agents) a sender thread starts the beats and a
 * receiver thread waits on the completion queue: a thread that both sent and reaped there
 * would leave replies unread behind hundreds of costlier sends and count that wait as the
 * coordinator's latency. mu guards the agents' state and the counters (held for a few
 * microseconds, never across an RPC call). */
typedef struct loadgen {
    agent *agents;
    int first, count;
    zt_rpc_cq *q; /* --grpc-agents */
    int epfd;     /* otherwise */
    hist h;
    uint64_t ok, errors, skipped, completed_workers;
    char last_error[256];
    int job_steps;
    pthread_mutex_t mu;
    pthread_t th, rx_th;
} loadgen;

static atomic_bool stop_load;
static const opts *O;
static uint64_t measure_from; /* beats sent before this are warm-up: not counted */

/* Folds the desired set of a reply into the agent's simulated workers. */
static void apply_desired(agent *a, const uint8_t *reply, size_t len)
{
    Zt__V1__HeartbeatReply *r = zt_pb_unpack(&zt__v1__heartbeat_reply__descriptor, reply, len);
    if (!r) return;
    sim_worker next[4];
    int n = 0;
    for (size_t i = 0; i < r->n_workers && n < 4; i++) {
        const Zt__V1__DesiredWorker *d = r->workers[i];
        sim_worker w = {d->job_id, d->attempt_id, d->rank, d->device_index, 0, false};
        for (int k = 0; k < a->nw; k++)
            if (a->w[k].attempt == d->attempt_id && a->w[k].rank == d->rank) w = a->w[k];
        next[n++] = w;
    }
    memcpy(a->w, next, sizeof(next));
    a->nw = n;
    zt_pb_free(r);
}

/* With ZT_BENCH_SLOW set: when the slowest beats happened (ms since start, latency). */
static uint64_t slow_origin;
static atomic_int n_slow;
static double slow_at[4096], slow_ms[4096];

static void on_beat(void *arg, zt_rpc_code code, const char *message, const uint8_t *reply,
                    size_t len)
{
    agent *a = arg;
    loadgen *lg = a->lg;
    uint64_t done = zt_now_ns();
    pthread_mutex_lock(&lg->mu);
    uint64_t lat = done - a->sent_at;
    bool counted = a->sent_at >= measure_from;
    a->in_flight = false;
    if (!counted) {
        if (code == ZT_RPC_OK && (len > 16 || a->nw)) apply_desired(a, reply, len);
        pthread_mutex_unlock(&lg->mu);
        return;
    }
    hist_add(&lg->h, lat);
    if (lat > 20000000ull && slow_origin) {
        int k = atomic_fetch_add(&n_slow, 1);
        if (k < 4096) {
            slow_at[k] = (double)(a->sent_at - slow_origin) * 1e-6;
            slow_ms[k] = (double)lat * 1e-6;
        }
    }
    if (code != ZT_RPC_OK) {
        lg->errors++;
        snprintf(lg->last_error, sizeof(lg->last_error), "%s: %.200s", zt_rpc_code_name(code),
                 message);
    } else {
        lg->ok++;
        if (len > 16 || a->nw) /* an empty desired set is a few bytes: skip decoding it */
            apply_desired(a, reply, len);
    }
    pthread_mutex_unlock(&lg->mu);
}

/* A reply through nghttp2: status is the grpc-status, or -1 (the connection failed). */
static void on_beat_h2(void *arg, int status, const char *message, const uint8_t *reply, size_t len)
{
    on_beat(arg, status < 0 ? ZT_RPC_UNAVAILABLE : (zt_rpc_code)status, message, reply, len);
}

/* Called with a->lg->mu held; releases it around the call itself. */
static void send_beat(agent *a)
{
    loadgen *lg = a->lg;
    Zt__V1__HeartbeatRequest q = ZT__V1__HEARTBEAT_REQUEST__INIT;
    Zt__V1__WorkerStatus ws[4], *wp[4];
    for (int i = 0; i < a->nw; i++) {
        sim_worker *w = &a->w[i];
        zt__v1__worker_status__init(&ws[i]);
        ws[i].job_id = w->job;
        ws[i].attempt_id = w->attempt;
        ws[i].rank = w->rank;
        ws[i].pid = 4000 + w->rank;
        ws[i].device_index = w->device;
        if (!w->exited && w->step < a->lg->job_steps) w->step++;
        ws[i].step = w->step;
        ws[i].collective_seq = w->step * 3;
        ws[i].tokens_per_s = 12345;
        ws[i].loss = 3.0;
        if (w->step >= a->lg->job_steps) {
            if (!w->exited) a->lg->completed_workers++;
            w->exited = true;
            ws[i].phase = ZT__V1__WORKER_PHASE__WORKER_PHASE_EXITED;
        } else {
            ws[i].phase = ZT__V1__WORKER_PHASE__WORKER_PHASE_TRAINING;
        }
        wp[i] = &ws[i];
    }
    q.name = a->name;
    q.incarnation = a->inc;
    q.n_workers = (size_t)a->nw;
    q.workers = wp;
    uint8_t buf[2048];
    size_t len = 0;
    if (a->h2) {
        len = protobuf_c_message_get_packed_size(&q.base);
        if (len > sizeof(buf)) {
            lg->errors++;
            return;
        }
        protobuf_c_message_pack(&q.base, buf);
    }
    a->in_flight = true;
    a->sent_at = zt_now_ns();
    /* the reply may be reaped before the call returns: on_beat takes mu */
    pthread_mutex_unlock(&lg->mu);
    zt_err err = {0};
    zt_status st =
        a->h2 ? (h2u_call(a->h2, "/zt.v1.AgentControl/Heartbeat", buf, len, 10000, on_beat_h2, a)
                     ? ZT_ERR_IO
                     : ZT_OK)
              : zt_rpc_unary_async(a->c, lg->q, "/zt.v1.AgentControl/Heartbeat", &q.base, 10000,
                                   on_beat, a, &err);
    pthread_mutex_lock(&lg->mu);
    if (st != ZT_OK) {
        a->in_flight = false;
        lg->errors++;
    }
}

/* Sleeps until the monotonic time t (ns). */
static void sleep_until_ns(uint64_t t)
{
    struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull),
                          .tv_nsec = (long)(t % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* Starts each agent's beat that is due and returns when the next one is. A beat still out
 * when the next is due is skipped, as an agent waits. The senders wake once a millisecond at
 * most, so a beat starts at most 1 ms late. */
static uint64_t send_due(loadgen *lg, uint64_t now)
{
    uint64_t period = 1000000000ull / (uint64_t)O->rate_hz, next = now + period;
    pthread_mutex_lock(&lg->mu);
    for (int i = 0; i < lg->count; i++) {
        agent *a = &lg->agents[lg->first + i];
        if (a->next_due <= now) {
            if (a->in_flight) {
                if (now >= measure_from)
                    lg->skipped++; /* the previous beat is not back yet: like an agent, wait */
            } else {
                send_beat(a);
            }
            a->next_due += period;
            if (a->next_due < now) a->next_due = now + period;
        }
        if (a->next_due < next) next = a->next_due;
    }
    pthread_mutex_unlock(&lg->mu);
    return next;
}

static void *loadgen_main(void *arg)
{
    loadgen *lg = arg;
    while (!atomic_load(&stop_load)) {
        uint64_t now = zt_now_ns(), next = send_due(lg, now);
        if (next < now + 1000000ull) next = now + 1000000ull;
        sleep_until_ns(next);
    }
    return NULL;
}

/* Waits up to timeout_ms for replies on the share's connections and reads them. */
static void h2_poll(loadgen *lg, int timeout_ms)
{
    struct epoll_event ev[256];
    int n = epoll_wait(lg->epfd, ev, 256, timeout_ms);
    for (int i = 0; i < n; i++)
        h2u_on_event(ev[i].data.ptr, ev[i].events);
}

static bool any_in_flight(loadgen *lg);

static void *loadgen_h2_main(void *arg)
{
    loadgen *lg = arg;
    while (!atomic_load(&stop_load)) {
        uint64_t now = zt_now_ns(), next = send_due(lg, now);
        uint64_t wait = next > now ? next - now : 0;
        h2_poll(lg, (int)((wait + 999999ull) / 1000000ull));
    }
    for (int k = 0; k < 200 && any_in_flight(lg); k++)
        h2_poll(lg, 50);
    return NULL;
}

static bool any_in_flight(loadgen *lg)
{
    bool any = false;
    pthread_mutex_lock(&lg->mu);
    for (int i = 0; i < lg->count && !any; i++)
        any = lg->agents[lg->first + i].in_flight;
    pthread_mutex_unlock(&lg->mu);
    return any;
}

/* The receiver: waits on the completion queue, so a reply is taken as soon as it arrives;
 * after the stop, until nothing is in flight (10 s at most). */
static void *loadgen_rx_main(void *arg)
{
    loadgen *lg = arg;
    while (!atomic_load(&stop_load))
        zt_rpc_cq_poll(lg->q, 50);
    pthread_join(lg->th, NULL); /* no beat starts after this */
    for (int k = 0; k < 200 && any_in_flight(lg); k++)
        zt_rpc_cq_poll(lg->q, 50);
    return NULL;
}

/* ---- the empty-call ceiling --------------------------------------------------------------- */

typedef struct ping_state {
    zt_rpc_cq *q;
    zt_rpc_client *c;
    hist h;
    uint64_t done;
    uint64_t sent_at[256];
    bool running;
} ping_state;

static ping_state *g_ping;

static void on_ping(void *arg, zt_rpc_code code, const char *message, const uint8_t *r, size_t len);

/* arg carries the slot: its send time is in sent_at[slot] */
static void send_ping(ping_state *p, int slot)
{
    Zt__V1__PingRequest q = ZT__V1__PING_REQUEST__INIT;
    p->sent_at[slot] = zt_now_ns();
    zt_rpc_unary_async(p->c, p->q, "/zt.v1.Coordinator/Ping", &q.base, 10000, on_ping,
                       (void *)(intptr_t)slot, NULL);
}

static void on_ping(void *arg, zt_rpc_code code, const char *message, const uint8_t *r, size_t len)
{
    (void)message;
    (void)r;
    (void)len;
    ping_state *p = g_ping;
    int slot = (int)(intptr_t)arg;
    hist_add(&p->h, zt_now_ns() - p->sent_at[slot]);
    if (code == ZT_RPC_OK) p->done++;
    if (p->running) send_ping(p, slot);
}

/* Closed loop: `inflight` calls outstanding on one channel for `seconds`. */
static double measure_ping(const char *addr, int inflight, double seconds, hist *out)
{
    ping_state p = {0};
    zt_rpc_client_config cfg = {.target = addr};
    zt_err err = {0};
    if (zt_rpc_client_create(&p.c, &cfg, &err) != ZT_OK) return 0;
    p.q = zt_rpc_cq_create();
    hist_init(&p.h);
    g_ping = &p;
    /* warm up the connection */
    Zt__V1__PingRequest q = ZT__V1__PING_REQUEST__INIT;
    void *rep = NULL;
    zt_rpc_unary(p.c, "/zt.v1.Coordinator/Ping", &q.base, &zt__v1__ping_reply__descriptor, &rep,
                 5000, NULL, &err);
    zt_pb_free(rep);
    p.running = true;
    for (int i = 0; i < inflight && i < 256; i++)
        send_ping(&p, i);
    double t0 = zt_now_s();
    while (zt_now_s() - t0 < seconds)
        zt_rpc_cq_poll(p.q, 10);
    p.running = false;
    double dt = zt_now_s() - t0;
    uint64_t done = p.done;
    for (int k = 0; k < 100; k++)
        zt_rpc_cq_poll(p.q, 10);
    *out = p.h;
    zt_rpc_cq_destroy(p.q);
    zt_rpc_client_destroy(p.c);
    return (double)done / dt;
}

/* ---- submitters --------------------------------------------------------------------------- */

typedef struct submitter {
    const char *addr;
    double rate;
    pthread_t th;
    hist h;
    uint64_t ok, errors;
    int64_t *ids; /* every acknowledged job id, warm-up included */
    size_t n_ids, cap_ids;
    char last_error[256];
    int id;
} submitter;

static const char *JOB_FMT =
    "{\"name\": \"load-%d-%llu\", \"model\": {\"arch\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, "
    "\"n_embd\": 32, \"block_size\": 16, \"vocab_size\": 64}, \"data\": {\"train\": \"d/*.bin\"}, "
    "\"train\": {\"steps\": 20}, \"resources\": {\"ranks\": 1, \"device\": \"cpu\"}, "
    "\"deepspeed\": {\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1}}";

static void *submit_main(void *arg)
{
    submitter *s = arg;
    zt_rpc_client_config cfg = {.target = s->addr};
    zt_rpc_client *c;
    zt_err err = {0};
    if (zt_rpc_client_create(&c, &cfg, &err) != ZT_OK) return NULL;
    uint64_t period = (uint64_t)(1e9 / s->rate), next = zt_now_ns();
    unsigned long long n = 0;
    while (!atomic_load(&stop_load)) {
        uint64_t now = zt_now_ns();
        if (now < next) {
            zt_sleep_ms((int64_t)((next - now) / 1000000) + 1);
            continue;
        }
        next += period;
        char text[1024], key[64];
        snprintf(text, sizeof(text), JOB_FMT, s->id, n);
        snprintf(key, sizeof(key), "load-%d-%llu", s->id, n);
        n++;
        Zt__V1__SubmitJobRequest q = ZT__V1__SUBMIT_JOB_REQUEST__INIT;
        q.job_text = text;
        q.job_dir = "/tmp";
        q.submit_key = key;
        void *rep = NULL;
        zt_rpc_code code;
        uint64_t t0 = zt_now_ns();
        zt_status st =
            zt_rpc_unary(c, "/zt.v1.Coordinator/SubmitJob", &q.base,
                         &zt__v1__submit_job_reply__descriptor, &rep, 10000, &code, &err);
        if (st == ZT_OK) {
            if (s->n_ids == s->cap_ids) {
                size_t cap = s->cap_ids ? s->cap_ids * 2 : 1024;
                int64_t *ids = zt_realloc(s->ids, cap * sizeof(*ids));
                if (ids) {
                    s->ids = ids;
                    s->cap_ids = cap;
                }
            }
            if (s->n_ids < s->cap_ids) s->ids[s->n_ids++] = ((Zt__V1__SubmitJobReply *)rep)->job_id;
        }
        if (t0 < measure_from) { /* warm-up */
            zt_pb_free(rep);
            continue;
        }
        hist_add(&s->h, zt_now_ns() - t0);
        if (st == ZT_OK)
            s->ok++;
        else {
            s->errors++;
            snprintf(s->last_error, sizeof(s->last_error), "%.200s", err.msg);
        }
        zt_pb_free(rep);
    }
    zt_rpc_client_destroy(c);
    return NULL;
}

/* ---- main --------------------------------------------------------------------------------- */

/* ---- HTTP readers: a browser's event stream and a Prometheus scrape each ------------------- */

typedef struct http_reader {
    pthread_t stream_th, scrape_th;
    int port;
    atomic_uint_fast64_t events, scrapes, errors, scrape_ns;
} http_reader;

static int tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(0x7f000001);
    struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0) return false;
        s += w;
        n -= (size_t)w;
    }
    return true;
}

/* Holds /api/v1/stream open, counting the events, reconnecting when it ends. */
static void *stream_main(void *arg)
{
    http_reader *r = arg;
    char buf[16384];
    while (!atomic_load(&stop_load)) {
        int fd = tcp_connect(r->port);
        if (fd < 0 || !send_all(fd, "GET /api/v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                    "Accept: text/event-stream\r\n\r\n")) {
            atomic_fetch_add(&r->errors, 1);
            if (fd >= 0) close(fd);
            zt_sleep_ms(100);
            continue;
        }
        while (!atomic_load(&stop_load)) {
            ssize_t n = read(fd, buf, sizeof(buf) - 1);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                break;
            if (n <= 0) continue;
            buf[n] = '\0';
            for (char *p = buf; (p = strstr(p, "event: ")) != NULL; p += 7)
                atomic_fetch_add(&r->events, 1);
        }
        close(fd);
    }
    return NULL;
}

/* GET /metrics once a second on a new connection, read to the end. */
static void *scrape_main(void *arg)
{
    http_reader *r = arg;
    char buf[65536];
    uint64_t next = zt_now_ns();
    while (!atomic_load(&stop_load)) {
        uint64_t t0 = zt_now_ns();
        int fd = tcp_connect(r->port);
        bool ok = fd >= 0 && send_all(fd, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                          "Connection: close\r\n\r\n");
        size_t total = 0;
        while (ok) {
            ssize_t n = read(fd, buf, sizeof(buf));
            if (n == 0) break;
            if (n < 0) {
                ok = errno == EINTR;
                continue;
            }
            total += (size_t)n;
        }
        if (fd >= 0) close(fd);
        if (ok && total > 0) {
            if (t0 >= measure_from) { /* counted like the heartbeats: after the warm-up */
                atomic_fetch_add(&r->scrapes, 1);
                atomic_fetch_add(&r->scrape_ns, zt_now_ns() - t0);
            }
        } else {
            atomic_fetch_add(&r->errors, 1);
        }
        next += 1000000000ull;
        uint64_t now = zt_now_ns();
        if (next > now) zt_sleep_ms((int64_t)((next - now) / 1000000ull));
    }
    return NULL;
}

/* The HTTP port from zcoord's ready file ({"grpc": ..., "http": "127.0.0.1:PORT", ...}). */
static int http_port_of(const zt_zcoord_proc *zc)
{
    char path[300], text[512];
    snprintf(path, sizeof(path), "%s/ready.json", zc->dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *h = strstr(text, "\"http\"");
    const char *colon = h ? strchr(h + 6, ':') : NULL;
    colon = colon ? strchr(colon + 1, ':') : NULL;
    return colon ? atoi(colon + 1) : 0;
}

static void usage(void)
{
    fprintf(
        stderr,
        "usage: coordinator_load [--agents N] [--rate HZ] [--seconds S] [--submitters N]\n"
        "                        [--submit-rate PER_S] [--threads N] [--pollers N]\n"
        "                        [--http-readers N] [--scrapers M] [--grpc-agents] [--check]\n");
}

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){.agents = 1000,
                .rate_hz = 10,
                .seconds = 10,
                .submitters = 2,
                .threads = 2,
                .pollers = 2,
                .job_steps = 20,
                .submit_rate = 100,
                .http_readers = 0,
                .scrapers = -1,
                .check = false};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--check") == 0) {
            o->check = true;
            continue;
        }
        if (strcmp(a, "--grpc-agents") == 0) {
            o->grpc_agents = true;
            continue;
        }
        if (!v) {
            usage();
            return -1;
        }
        if (strcmp(a, "--agents") == 0)
            o->agents = atoi(v);
        else if (strcmp(a, "--rate") == 0)
            o->rate_hz = atoi(v);
        else if (strcmp(a, "--seconds") == 0)
            o->seconds = atoi(v);
        else if (strcmp(a, "--submitters") == 0)
            o->submitters = atoi(v);
        else if (strcmp(a, "--submit-rate") == 0)
            o->submit_rate = atof(v);
        else if (strcmp(a, "--threads") == 0)
            o->threads = atoi(v);
        else if (strcmp(a, "--pollers") == 0)
            o->pollers = atoi(v);
        else if (strcmp(a, "--http-readers") == 0)
            o->http_readers = atoi(v);
        else if (strcmp(a, "--scrapers") == 0)
            o->scrapers = atoi(v);
        else {
            usage();
            return -1;
        }
        i++;
    }
    if (o->agents < 1 || o->rate_hz < 1 || o->seconds < 1 || o->threads < 1 || o->submitters < 0 ||
        o->http_readers < 0 || o->http_readers > 200 || o->scrapers > 200) {
        usage();
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, &o) != 0) return 2;
    O = &o;
    zt_log_set_level(ZT_LOG_WARN);
    /* one socket per agent on each side */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)(o.agents + 256)) {
        fprintf(stderr,
                "coordinator_load: %d agents need %d file descriptors, the limit is %llu; "
                "raise it (ulimit -n) or use --agents\n",
                o.agents, o.agents + 256, (unsigned long long)rl.rlim_cur);
        return 77;
    }
    char pollers[16], hb_timeout[] = "60s";
    snprintf(pollers, sizeof(pollers), "%d", o.pollers);
    const char *args[] = {"--pollers",   pollers, "--heartbeat-timeout",  hb_timeout,
                          "--log-level", "warn",  "--metrics-max-points", "100",
                          "--http",      o.http_readers ? "127.0.0.1:0" : "off", NULL};
    zt_zcoord_proc zc;
    zt_zcoord_start(&zc, args);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    printf("coordinator_load: %d agents x %d Hz (target %d heartbeats/s), %d submitter(s) at %.0f "
           "jobs/s, %d s measured after 2 s of warm-up; zcoord --pollers %d; %ld CPU core(s) "
           "shared by zcoord and this generator; %d HTTP reader(s)\n",
           o.agents, o.rate_hz, o.agents * o.rate_hz, o.submitters, o.submit_rate, o.seconds,
           o.pollers, ncpu, o.http_readers);

    /* 1. the ceiling: empty unary calls */
    hist ph;
    double ping_rate = measure_ping(zc.addr, 64, 3.0, &ph);
    printf("  empty unary call (Ping), 64 in flight on 1 channel:  %8.0f calls/s   p50 %6.2f ms  "
           "p99 %6.2f ms\n",
           ping_rate, hist_pct(&ph, 0.5), hist_pct(&ph, 0.99));
    fflush(stdout);

    /* 2. agents: one channel each, registered */
    agent *agents = zt_calloc((size_t)o.agents, sizeof(*agents));
    loadgen *lgs = zt_calloc((size_t)o.threads, sizeof(*lgs));
    uint64_t t_reg = zt_now_ns();
    for (int i = 0; i < o.agents; i++) {
        agent *a = &agents[i];
        snprintf(a->name, sizeof(a->name), "sim-%04d", i);
        zt_rpc_client_config cfg = {.target = zc.addr};
        zt_err err = {0};
        if (zt_rpc_client_create(&a->c, &cfg, &err) != ZT_OK) {
            fprintf(stderr, "client %d: %s\n", i, zt_err_msg(&err));
            return 1;
        }
        Zt__V1__RegisterAgentRequest q = ZT__V1__REGISTER_AGENT_REQUEST__INIT;
        q.name = a->name;
        q.hostname = "loadgen";
        q.device = ZT__V1__DEVICE__DEVICE_CPU;
        q.slots = 1;
        Zt__V1__RegisterAgentReply *r = NULL;
        if (zt_rpc_unary(a->c, "/zt.v1.AgentControl/RegisterAgent", &q.base,
                         &zt__v1__register_agent_reply__descriptor, (void **)&r, 10000, NULL,
                         &err) != ZT_OK) {
            fprintf(stderr, "register %s: %s\n", a->name, zt_err_msg(&err));
            zt_zcoord_dump_log(&zc);
            return 1;
        }
        a->inc = r->incarnation;
        /* every later agent call carries the agent key RegisterAgent gave */
        zt_rpc_client_destroy(a->c);
        a->c = NULL;
        bool key_fits = strlen(r->agent_key) < sizeof(a->key);
        snprintf(a->key, sizeof(a->key), "%s", r->agent_key);
        zt_pb_free(r);
        if (!key_fits) {
            fprintf(stderr, "register %s: the agent key is longer than %zu bytes\n", a->name,
                    sizeof(a->key) - 1);
            return 1;
        }
        if (o.grpc_agents) {
            cfg.token = a->key;
            if (zt_rpc_client_create(&a->c, &cfg, &err) != ZT_OK) {
                fprintf(stderr, "client %d: %s\n", i, zt_err_msg(&err));
                return 1;
            }
        }
    }
    printf("  registered %d agents (one connection each) in %.1f s\n", o.agents,
           (double)(zt_now_ns() - t_reg) * 1e-9);
    uint64_t start = zt_now_ns() + 100000000ull;
    uint64_t period = 1000000000ull / (uint64_t)o.rate_hz;
    int per = (o.agents + o.threads - 1) / o.threads;
    const char *colon = strrchr(zc.addr, ':'); /* "127.0.0.1:PORT" */
    int grpc_port = colon ? atoi(colon + 1) : 0;
    for (int t = 0; t < o.threads; t++) {
        loadgen *lg = &lgs[t];
        lg->agents = agents;
        lg->first = t * per;
        lg->count = t * per + per > o.agents ? o.agents - t * per : per;
        lg->q = o.grpc_agents ? zt_rpc_cq_create() : NULL;
        lg->epfd = o.grpc_agents ? -1 : epoll_create1(EPOLL_CLOEXEC);
        lg->job_steps = o.job_steps;
        hist_init(&lg->h);
        for (int i = 0; i < lg->count; i++) {
            agent *a = &agents[lg->first + i];
            a->lg = lg;
            a->next_due = start + period * (uint64_t)(lg->first + i) / (uint64_t)o.agents;
            if (o.grpc_agents) continue;
            char why[256] = "epoll_create1 failed";
            int fd = lg->epfd >= 0 ? tcp_connect(grpc_port) : -1;
            if (lg->epfd >= 0 && fd < 0)
                snprintf(why, sizeof(why), "connect %s: %s", zc.addr, strerror(errno));
            a->h2 = fd >= 0 ? h2u_open(lg->epfd, fd, zc.addr, a->key, why, sizeof(why)) : NULL;
            if (!a->h2) {
                fprintf(stderr, "agent %s: %s\n", a->name, why);
                return 1;
            }
        }
    }
    submitter *subs = zt_calloc((size_t)(o.submitters ? o.submitters : 1), sizeof(*subs));

    /* 3. the run: beats start at `start`; the first 2 s warm up (connections' first calls of
     * a method, allocator pools) and are not counted */
    measure_from = start + 2000000000ull;
    uint64_t t0 = measure_from;
    if (getenv("ZT_BENCH_SLOW")) slow_origin = measure_from;
    for (int t = 0; t < o.threads; t++) {
        pthread_mutex_init(&lgs[t].mu, NULL);
        if (o.grpc_agents) {
            pthread_create(&lgs[t].th, NULL, loadgen_main, &lgs[t]);
            pthread_create(&lgs[t].rx_th, NULL, loadgen_rx_main, &lgs[t]);
        } else {
            pthread_create(&lgs[t].th, NULL, loadgen_h2_main, &lgs[t]);
        }
    }
    http_reader *readers = zt_calloc((size_t)(o.http_readers ? o.http_readers : 1), sizeof(*readers));
    int http_port = o.http_readers ? http_port_of(&zc) : 0;
    if (o.http_readers && !http_port) {
        fprintf(stderr, "coordinator_load: no HTTP port in zcoord's ready file\n");
        return 1;
    }
    if (o.scrapers < 0) o.scrapers = o.http_readers ? 1 : 0;
    if (o.scrapers > o.http_readers) o.scrapers = o.http_readers;
    for (int i = 0; i < o.http_readers; i++) {
        readers[i].port = http_port;
        pthread_create(&readers[i].stream_th, NULL, stream_main, &readers[i]);
        if (i < o.scrapers) pthread_create(&readers[i].scrape_th, NULL, scrape_main, &readers[i]);
    }
    for (int s = 0; s < o.submitters; s++) {
        subs[s].addr = zc.addr;
        subs[s].rate = o.submit_rate / o.submitters;
        subs[s].id = s;
        hist_init(&subs[s].h);
        pthread_create(&subs[s].th, NULL, submit_main, &subs[s]);
    }
    zt_sleep_ms((int64_t)o.seconds * 1000 + 2100);
    atomic_store(&stop_load, true);
    double dt = (double)(zt_now_ns() - t0) * 1e-9;
    for (int s = 0; s < o.submitters; s++)
        pthread_join(subs[s].th, NULL);
    for (int t = 0; t < o.threads; t++) /* the receiver joins its sender */
        pthread_join(o.grpc_agents ? lgs[t].rx_th : lgs[t].th, NULL);
    uint64_t h_events = 0, h_scrapes = 0, h_errors = 0, h_scrape_ns = 0;
    for (int i = 0; i < o.http_readers; i++) {
        pthread_join(readers[i].stream_th, NULL);
        if (i < o.scrapers) pthread_join(readers[i].scrape_th, NULL);
        h_events += atomic_load(&readers[i].events);
        h_scrapes += atomic_load(&readers[i].scrapes);
        h_errors += atomic_load(&readers[i].errors);
        h_scrape_ns += atomic_load(&readers[i].scrape_ns);
    }
    zt_free(readers);

    hist all;
    hist_init(&all);
    uint64_t ok = 0, errors = 0, skipped = 0, done_workers = 0;
    const char *last_error = "";
    for (int t = 0; t < o.threads; t++) {
        hist_merge(&all, &lgs[t].h);
        ok += lgs[t].ok;
        errors += lgs[t].errors;
        skipped += lgs[t].skipped;
        done_workers += lgs[t].completed_workers;
        if (lgs[t].last_error[0]) last_error = lgs[t].last_error;
    }
    double hb_rate = (double)ok / dt, hb_p50 = hist_pct(&all, 0.5), hb_p99 = hist_pct(&all, 0.99);
    printf("  heartbeats:  %8.0f /s (target %d)   p50 %6.2f ms  p99 %6.2f ms  max %6.1f ms   "
           "errors %llu, skipped (previous beat still out) %llu\n",
           hb_rate, o.agents * o.rate_hz, hb_p50, hb_p99, all.max_ms, (unsigned long long)errors,
           (unsigned long long)skipped);
    if (errors) printf("    last heartbeat error: %s\n", last_error);
    if (o.http_readers)
        printf("  http readers: %d event streams (%llu events received), /metrics %.1f scrapes/s "
               "(mean %.1f ms each), errors %llu\n",
               o.http_readers, (unsigned long long)h_events, (double)h_scrapes / dt,
               h_scrapes ? (double)h_scrape_ns / (double)h_scrapes * 1e-6 : 0.0,
               (unsigned long long)h_errors);
    for (int k = 0; k < atomic_load(&n_slow) && k < 4096; k++)
        printf("    slow beat sent at %8.1f ms: %6.1f ms\n", slow_at[k], slow_ms[k]);
    hist sh;
    hist_init(&sh);
    uint64_t sok = 0, serr = 0;
    for (int s = 0; s < o.submitters; s++) {
        hist_merge(&sh, &subs[s].h);
        sok += subs[s].ok;
        serr += subs[s].errors;
        if (subs[s].last_error[0]) printf("    last submit error: %s\n", subs[s].last_error);
    }
    double sub_rate = (double)sok / dt;

    /* 4. durability of what was acknowledged: count the stored jobs */
    zt_rpc_client_config cfg = {.target = zc.addr};
    zt_rpc_client *c;
    zt_err err = {0};
    zt_rpc_client_create(&c, &cfg, &err);
    uint64_t stored = 0, completed = 0;
    int64_t before = 0, max_id = 0;
    for (int s = 0; s < o.submitters; s++)
        for (size_t i = 0; i < subs[s].n_ids; i++)
            if (subs[s].ids[i] > max_id) max_id = subs[s].ids[i];
    bool *present = zt_calloc((size_t)max_id + 1, sizeof(bool));
    for (;;) {
        Zt__V1__ListJobsRequest q = ZT__V1__LIST_JOBS_REQUEST__INIT;
        q.limit = 1000;
        q.before_id = before;
        Zt__V1__ListJobsReply *r = NULL;
        if (zt_rpc_unary(c, "/zt.v1.Coordinator/ListJobs", &q.base,
                         &zt__v1__list_jobs_reply__descriptor, (void **)&r, 30000, NULL,
                         &err) != ZT_OK) {
            fprintf(stderr, "ListJobs: %s\n", zt_err_msg(&err));
            break;
        }
        stored += r->n_jobs;
        for (size_t i = 0; i < r->n_jobs; i++) {
            completed += r->jobs[i]->state == ZT__V1__JOB_STATE__JOB_STATE_COMPLETED;
            if (r->jobs[i]->id > 0 && r->jobs[i]->id <= max_id) present[r->jobs[i]->id] = true;
        }
        before = r->next_before_id;
        zt_pb_free(r);
        if (!before) break;
    }
    zt_rpc_client_destroy(c);
    uint64_t acked_all = 0, missing = 0;
    for (int s = 0; s < o.submitters; s++)
        for (size_t i = 0; i < subs[s].n_ids; i++, acked_all++)
            missing += !present[subs[s].ids[i]];
    zt_free(present);
    printf("  submissions: %8.1f /s acknowledged (target %.0f)   p50 %6.2f ms  p99 %6.2f ms   "
           "errors %llu\n",
           sub_rate, o.submit_rate, hist_pct(&sh, 0.5), hist_pct(&sh, 0.99),
           (unsigned long long)serr);
    printf("    durability: %llu of %llu acknowledged jobs (warm-up included) listed by the "
           "coordinator afterwards; %llu jobs ran to COMPLETED on the simulated agents\n",
           (unsigned long long)(acked_all - missing), (unsigned long long)acked_all,
           (unsigned long long)completed);
    (void)done_workers;

    int target_hb = 10000;
    bool hb_pass = hb_rate >= target_hb * 0.99 && hb_p99 < 20.0 && errors == 0;
    bool sub_pass = sub_rate >= 100 * 0.99 && missing == 0 && serr == 0;
    bool full = o.agents * o.rate_hz >= target_hb && o.submit_rate >= 100;
    if (full)
        printf("  targets (2 cores): >= 10,000 heartbeats/s with p99 < 20 ms: %s; >= 100 "
               "submissions/s durably stored: %s\n",
               hb_pass ? "PASS" : "MISS", sub_pass ? "PASS" : "MISS");
    bool stored_ok = missing == 0;
    if (!stored_ok)
        printf("  ERROR: %llu acknowledged submissions are not stored\n",
               (unsigned long long)missing);
    (void)stored;
    int rc = zt_zcoord_stop(&zc);
    if (rc != 0) {
        printf("  zcoord exited %d on SIGTERM\n", rc);
        zt_zcoord_dump_log(&zc);
    }
    zt_zcoord_cleanup(&zc);
    for (int i = 0; i < o.agents; i++) {
        if (agents[i].c) zt_rpc_client_destroy(agents[i].c);
        h2u_close(agents[i].h2);
    }
    for (int t = 0; t < o.threads; t++) {
        if (lgs[t].q) zt_rpc_cq_destroy(lgs[t].q);
        if (lgs[t].epfd >= 0) close(lgs[t].epfd);
        zt_free(lgs[t].h.b);
        pthread_mutex_destroy(&lgs[t].mu);
    }
    zt_free(agents);
    zt_free(lgs);
    for (int s = 0; s < o.submitters; s++) {
        zt_free(subs[s].h.b);
        zt_free(subs[s].ids);
    }
    zt_free(subs);
    zt_free(all.b);
    zt_free(sh.b);
    zt_free(ph.b);
    if (!stored_ok || rc != 0 || errors || !ok) return 1;
    if (o.check && full && !(hb_pass && sub_pass)) return 1;
    return 0;
}
