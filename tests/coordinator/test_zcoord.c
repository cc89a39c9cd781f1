/* Integration test of zcoord: the real binary on loopback, driven by C clients that play
 * the user and simulated agents (RegisterAgent, Heartbeat with worker reports). Covers the
 * job lifecycle (gang placement, desired sets, rendezvous, metrics, checkpoints committed by
 * the last shard, logs, WatchJob), failures and restarts from the newest committed
 * checkpoint with backoff, the restart policy, lost agents, hangs, vanished workers, stale
 * incarnations and attempts, state surviving SIGKILL, bearer-token auth, bad input, agents
 * that leave (LOST at once), and checkpoints deleted by keep_checkpoints or found incomplete
 * on disk (never resumed from). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/timeutil.h"
#include "common/utf8.h"
#include "proto/health.pb-c.h"
#include "proto/pbjson.h"
#include "proto/rpc.h"
#include "proto/zerotrain.pb-c.h"
#include "tests/coordinator/zcoord_harness.h"
#include "tests/test.h"

#define C_ "/zt.v1.Coordinator/"
#define A_ "/zt.v1.AgentControl/"

static zt_zcoord_proc *current;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (current) zt_zcoord_dump_log(current);                                              \
            ZT_FAIL("expected: %s", #cond);                                                        \
        }                                                                                          \
    } while (0)

static void agents_forget(void);
static char used[64][64]; /* job names submitted to this coordinator, and how often */
static int n_used, uses[64];

/* A client of a coordinator just started: the agents of earlier ones are forgotten. */
static zt_rpc_client *client(const zt_zcoord_proc *p, const char *token)
{
    agents_forget();
    zt_rpc_client_config cfg = {.target = p->addr, .token = token};
    zt_rpc_client *c;
    zt_err err = {0};
    ASSERT_OK(zt_rpc_client_create(&c, &cfg, &err));
    return c;
}

/* The agent keys RegisterAgent gave, by agent name: agent calls carry the one of
 * the agent they speak for (the heartbeat's name, a report's agent field, else the agent
 * registered last). */
static struct {
    char name[64], key[96];
} keys[64];
static int n_keys, last_key = -1;

static void key_put(const char *name, const char *key)
{
    int i = 0;
    while (i < n_keys && strcmp(keys[i].name, name) != 0)
        i++;
    if (i == n_keys && n_keys < 64) n_keys++;
    if (i >= 64) ZT_FAIL("too many agents for the key table");
    snprintf(keys[i].name, sizeof(keys[i].name), "%s", name);
    snprintf(keys[i].key, sizeof(keys[i].key), "%s", key);
    last_key = i;
}

static const char *key_owner(const char *name)
{
    for (int i = 0; name && name[0] && i < n_keys; i++)
        if (strcmp(keys[i].name, name) == 0) return keys[i].key;
    if (name && name[0]) return "an-agent-that-never-registered"; /* holds no agent_key */
    return last_key >= 0 ? keys[last_key].key : "no-key";
}

/* Where the coordinator placed each rank (from the heartbeat replies' desired sets), so that
 * a report about a rank speaks as the agent that runs it, as a real agent does. */
static struct {
    int64_t attempt;
    int rank;
    char agent[64];
} placed[256];
static int n_placed;
static pthread_mutex_t placed_mu = PTHREAD_MUTEX_INITIALIZER;

static void placed_note(const char *agent, const Zt__V1__HeartbeatReply *r)
{
    pthread_mutex_lock(&placed_mu);
    for (size_t w = 0; r && w < r->n_workers; w++) {
        int i = 0;
        while (i < n_placed && !(placed[i].attempt == r->workers[w]->attempt_id &&
                                 placed[i].rank == r->workers[w]->rank))
            i++;
        if (i == n_placed) {
            if (n_placed == 256) memmove(placed, placed + 128, 128 * sizeof(placed[0]));
            if (n_placed == 256) n_placed = 128;
            i = n_placed++;
        }
        placed[i].attempt = r->workers[w]->attempt_id;
        placed[i].rank = r->workers[w]->rank;
        snprintf(placed[i].agent, sizeof(placed[i].agent), "%s", agent);
    }
    pthread_mutex_unlock(&placed_mu);
}

static const char *placed_agent(int64_t attempt, int rank, char *buf, size_t cap)
{
    buf[0] = '\0';
    pthread_mutex_lock(&placed_mu);
    for (int i = 0; i < n_placed; i++)
        if (placed[i].attempt == attempt && placed[i].rank == rank)
            snprintf(buf, cap, "%s", placed[i].agent);
    pthread_mutex_unlock(&placed_mu);
    return buf;
}

/* The agent an AgentControl request speaks for: the one it names, else the one running the
 * rank it is about ("" when neither is known). */
static const char *agent_of(const char *path, const ProtobufCMessage *req, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (strstr(path, "/Heartbeat")) return ((const Zt__V1__HeartbeatRequest *)req)->name;
    if (strstr(path, "/ReportMetrics")) {
        const Zt__V1__ReportMetricsRequest *q = (const void *)req;
        if (q->agent[0]) return q->agent;
        return q->n_steps ? placed_agent(q->steps[0]->attempt_id, q->steps[0]->rank, buf, cap) : "";
    }
    if (strstr(path, "/ReportCheckpointRemoved")) {
        const Zt__V1__ReportCheckpointRemovedRequest *q = (const void *)req;
        return q->agent[0] ? q->agent : placed_agent(q->attempt_id, q->rank, buf, cap);
    }
    if (strstr(path, "/ReportCheckpoint")) {
        const Zt__V1__ReportCheckpointRequest *q = (const void *)req;
        return q->agent[0] ? q->agent : placed_agent(q->attempt_id, q->rank, buf, cap);
    }
    if (strstr(path, "/ReportLogs")) {
        const Zt__V1__ReportLogsRequest *q = (const void *)req;
        if (q->agent[0]) return q->agent;
        return q->n_entries ? placed_agent(q->entries[0]->attempt_id, q->entries[0]->rank, buf, cap)
                            : "";
    }
    if (strstr(path, "/Rendezvous")) {
        const Zt__V1__RendezvousRequest *q = (const void *)req;
        return placed_agent(q->attempt_id, q->rank, buf, cap);
    }
    if (strstr(path, "/GetAttemptSpec")) {
        const Zt__V1__GetAttemptSpecRequest *q = (const void *)req;
        return placed_agent(q->attempt_id, 0, buf, cap);
    }
    return "";
}

static void agents_forget(void)
{
    n_used = 0;
    memset(uses, 0, sizeof(uses));
    n_keys = 0;
    last_key = -1;
    pthread_mutex_lock(&placed_mu);
    n_placed = 0;
    pthread_mutex_unlock(&placed_mu);
}

/* A unary call; returns the gRPC code, message in msg (optional). */
static zt_rpc_code call(zt_rpc_client *c, const char *path, const ProtobufCMessage *req,
                        const ProtobufCMessageDescriptor *rt, void **reply, char *msg, size_t cap)
{
    zt_rpc_code code;
    zt_err err = {0};
    void *r = NULL;
    const char *as = NULL;
    char who[64];
    if (strncmp(path, A_, strlen(A_)) == 0 && !strstr(path, "/RegisterAgent"))
        as = key_owner(agent_of(path, req, who, sizeof(who)));
    zt_rpc_unary_as(c, path, as, req, rt, &r, 10000, &code, &err);
    if (code == ZT_RPC_OK && r && strstr(path, "/Heartbeat"))
        placed_note(((const Zt__V1__HeartbeatRequest *)req)->name, r);
    if (code == ZT_RPC_OK && r && strstr(path, "/RegisterAgent"))
        key_put(((const Zt__V1__RegisterAgentRequest *)req)->name,
                    ((const Zt__V1__RegisterAgentReply *)r)->agent_key);
    if (msg) snprintf(msg, cap, "%.900s", err.msg);
    if (reply)
        *reply = r;
    else
        zt_pb_free(r);
    return code;
}

/* Jobs keep their checkpoints in ckpt_base/NAME (a checkpoint directory belongs to one job,
 * and the coordinator takes a shard report only from inside its job's directory). */
static char ckpt_base[300] = "/ckpt";

static char *job_text(const char *name, int ranks, int rpn, int max_restarts, int steps)
{
    /* one directory per job: a name submitted again to the same coordinator gets NAME-2, ... */
    int k = 0;
    while (k < n_used && strcmp(used[k], name) != 0)
        k++;
    if (k == n_used && n_used < 64) snprintf(used[n_used++], sizeof(used[0]), "%s", name);
    char dir[128];
    int n = k < 64 ? ++uses[k] : 0;
    if (n > 1)
        snprintf(dir, sizeof(dir), "%.60s-%d", name, n);
    else
        snprintf(dir, sizeof(dir), "%.60s", name);
    return zt_asprintf(
        "{\"name\": \"%s\", \"model\": {\"arch\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, "
        "\"n_embd\": 32, \"block_size\": 16, \"vocab_size\": 64}, \"data\": {\"train\": "
        "\"data/*.bin\"}, \"train\": {\"steps\": %d, \"checkpoint_every\": 5, "
        "\"checkpoint_dir\": \"%s/%s\"}, "
        "\"resources\": {\"ranks\": %d, \"ranks_per_node\": %d, \"device\": \"cpu\"}, "
        "\"max_restarts\": %d, \"deepspeed\": {\"train_micro_batch_size_per_gpu\": 1, "
        "\"gradient_accumulation_steps\": 1}}",
        name, steps, ckpt_base, dir, ranks, rpn, max_restarts);
}

static int64_t submit(zt_rpc_client *c, const char *name, int ranks, int rpn, int max_restarts)
{
    char *text = job_text(name, ranks, rpn, max_restarts, 100);
    Zt__V1__SubmitJobRequest q = ZT__V1__SUBMIT_JOB_REQUEST__INIT;
    q.job_text = text;
    q.job_dir = "/tmp";
    q.job_path = "job.json";
    q.user = "tester";
    Zt__V1__SubmitJobReply *r = NULL;
    char msg[1024];
    zt_rpc_code code = call(c, C_ "SubmitJob", &q.base, &zt__v1__submit_job_reply__descriptor,
                            (void **)&r, msg, sizeof(msg));
    if (code != ZT_RPC_OK) ZT_FAIL("submit %s: %s: %s", name, zt_rpc_code_name(code), msg);
    int64_t id = r->job_id;
    zt_pb_free(r);
    zt_free(text);
    return id;
}

static Zt__V1__GetJobReply *get_job(zt_rpc_client *c, int64_t id)
{
    Zt__V1__GetJobRequest q = ZT__V1__GET_JOB_REQUEST__INIT;
    q.job_id = id;
    Zt__V1__GetJobReply *r = NULL;
    char msg[1024];
    zt_rpc_code code = call(c, C_ "GetJob", &q.base, &zt__v1__get_job_reply__descriptor,
                            (void **)&r, msg, sizeof(msg));
    if (code != ZT_RPC_OK) ZT_FAIL("GetJob %lld: %s", (long long)id, msg);
    return r;
}

static int job_state(zt_rpc_client *c, int64_t id, char *reason, size_t cap)
{
    Zt__V1__GetJobReply *r = get_job(c, id);
    int st = r->job->state;
    if (reason) snprintf(reason, cap, "%s | %s", r->job->reason, r->job->pending_reason);
    zt_pb_free(r);
    return st;
}

/* Polls until the job is in state (or fails the test after timeout_ms). */
static void wait_state(zt_rpc_client *c, int64_t id, int state, int timeout_ms)
{
    char reason[2048] = "";
    int st = 0;
    for (int t = 0; t < timeout_ms; t += 20) {
        st = job_state(c, id, reason, sizeof(reason));
        if (st == state) return;
        zt_sleep_ms(20);
    }
    if (current) zt_zcoord_dump_log(current);
    ZT_FAIL("job %lld: state %d (%s) after %d ms, wanted %d", (long long)id, st, reason, timeout_ms,
            state);
}

static int64_t register_agent(zt_rpc_client *c, const char *name, int slots)
{
    Zt__V1__RegisterAgentRequest q = ZT__V1__REGISTER_AGENT_REQUEST__INIT;
    q.name = (char *)name;
    q.hostname = "testhost";
    q.address = "127.0.0.1";
    q.device = ZT__V1__DEVICE__DEVICE_CPU;
    q.slots = slots;
    q.version = "test";
    /* a process that registers again presents the key it holds, as zagent does */
    for (int i = 0; i < n_keys; i++)
        if (strcmp(keys[i].name, name) == 0) q.previous_agent_key = keys[i].key;
    Zt__V1__RegisterAgentReply *r = NULL;
    char msg[1024];
    zt_rpc_code code =
        call(c, A_ "RegisterAgent", &q.base, &zt__v1__register_agent_reply__descriptor, (void **)&r,
             msg, sizeof(msg));
    if (code != ZT_RPC_OK) ZT_FAIL("register %s: %s", name, msg);
    int64_t inc = r->incarnation;
    zt_pb_free(r);
    return inc;
}

typedef struct sim {
    int64_t job, attempt;
    int rank, phase, code, sig;
    int64_t step, seq;
} sim;

/* Heartbeat with workers (the last one of a stopping agent when leaving); returns the reply
 * (free it) or NULL with *code set. */
static Zt__V1__HeartbeatReply *heartbeat_ex(zt_rpc_client *c, const char *name, int64_t inc,
                                            const sim *w, int n, bool leaving,
                                            zt_rpc_code *code_out, char *msg, size_t cap)
{
    Zt__V1__HeartbeatRequest q = ZT__V1__HEARTBEAT_REQUEST__INIT;
    q.leaving = leaving;
    Zt__V1__WorkerStatus ws[16], *wp[16];
    for (int i = 0; i < n; i++) {
        zt__v1__worker_status__init(&ws[i]);
        ws[i].job_id = w[i].job;
        ws[i].attempt_id = w[i].attempt;
        ws[i].rank = w[i].rank;
        ws[i].pid = 1000 + w[i].rank;
        ws[i].phase = (Zt__V1__WorkerPhase)w[i].phase;
        ws[i].step = w[i].step;
        ws[i].collective_seq = w[i].seq;
        ws[i].exit_code = w[i].code;
        ws[i].exit_signal = w[i].sig;
        ws[i].device_index = w[i].rank % 2;
        ws[i].loss = 3.5;
        wp[i] = &ws[i];
    }
    q.name = (char *)name;
    q.incarnation = inc;
    q.n_workers = (size_t)n;
    q.workers = wp;
    Zt__V1__HeartbeatReply *r = NULL;
    zt_rpc_code code = call(c, A_ "Heartbeat", &q.base, &zt__v1__heartbeat_reply__descriptor,
                            (void **)&r, msg, cap);
    if (code_out)
        *code_out = code;
    else if (code != ZT_RPC_OK)
        ZT_FAIL("heartbeat %s: %s: %s", name, zt_rpc_code_name(code), msg ? msg : "");
    return r;
}

static Zt__V1__HeartbeatReply *heartbeat(zt_rpc_client *c, const char *name, int64_t inc,
                                         const sim *w, int n, zt_rpc_code *code_out, char *msg,
                                         size_t cap)
{
    return heartbeat_ex(c, name, inc, w, n, false, code_out, msg, cap);
}

static Zt__V1__HeartbeatReply *hb(zt_rpc_client *c, const char *name, int64_t inc, const sim *w,
                                  int n)
{
    char msg[1024];
    return heartbeat(c, name, inc, w, n, NULL, msg, sizeof(msg));
}

/* The attempt the agent is told to run (0 when none). */
static int64_t desired_attempt(const Zt__V1__HeartbeatReply *r, int *n)
{
    *n = (int)r->n_workers;
    return r->n_workers ? r->workers[0]->attempt_id : 0;
}

/* ---- WatchJob collector ------------------------------------------------------------------- */

typedef struct watch {
    zt_rpc_client *c;
    int64_t id;
    pthread_t th;
    char states[1024]; /* "QUEUED,SCHEDULED,..." from events */
    int updates, final_state;
    bool got_final;
    zt_rpc_code end_code;
} watch;

static void *watch_main(void *arg)
{
    watch *w = arg;
    Zt__V1__WatchJobRequest q = ZT__V1__WATCH_JOB_REQUEST__INIT;
    q.job_id = w->id;
    zt_rpc_stream *s;
    zt_err err = {0};
    ASSERT_OK(zt_rpc_stream_open(w->c, C_ "WatchJob", &q.base, 60000, &s, &err));
    for (;;) {
        Zt__V1__JobUpdate *u = NULL;
        zt_status st =
            zt_rpc_stream_next(s, &zt__v1__job_update__descriptor, (void **)&u, &w->end_code, &err);
        if (st != ZT_OK || !u) break;
        w->updates++;
        if (u->event && strcmp(u->event->kind, "job") == 0) {
            size_t n = strlen(w->states);
            snprintf(w->states + n, sizeof(w->states) - n, "%s%s", n ? "," : "",
                     u->event->to_state);
        }
        if (u->final) {
            w->got_final = true;
            w->final_state = u->job->state;
        }
        zt_pb_free(u);
    }
    zt_rpc_stream_close(s);
    return NULL;
}

/* ---- Rendezvous --------------------------------------------------------------------------- */

typedef struct rdzv_call {
    zt_rpc_client *c;
    int64_t attempt;
    int rank, wait, wait_ms;
    const char *value;
    pthread_t th;
    zt_rpc_code code;
    bool complete;
    int n_entries;
    char rank0[128];
    char msg[1024];
} rdzv_call;

static void *rdzv_main(void *arg)
{
    rdzv_call *r = arg;
    Zt__V1__RendezvousRequest q = ZT__V1__RENDEZVOUS_REQUEST__INIT;
    q.attempt_id = r->attempt;
    q.rank = r->rank;
    if (r->value) {
        q.value.data = (uint8_t *)r->value;
        q.value.len = strlen(r->value);
    }
    q.wait = (Zt__V1__RendezvousRequest__Wait)r->wait;
    q.wait_ms = r->wait_ms;
    Zt__V1__RendezvousReply *rep = NULL;
    r->code = call(r->c, A_ "Rendezvous", &q.base, &zt__v1__rendezvous_reply__descriptor,
                   (void **)&rep, r->msg, sizeof(r->msg));
    if (rep) {
        r->complete = rep->complete;
        r->n_entries = (int)rep->n_entries;
        for (size_t i = 0; i < rep->n_entries; i++)
            if (rep->entries[i]->rank == 0)
                snprintf(r->rank0, sizeof(r->rank0), "%.*s", (int)rep->entries[i]->value.len,
                         (const char *)rep->entries[i]->value.data);
        zt_pb_free(rep);
    }
    return NULL;
}

/* Reports rank's shard of the checkpoint at root/step_NNNNNNNN. */
static void report_shard_in(zt_rpc_client *c, const char *root, int64_t attempt, int rank,
                            int64_t step, bool *committed)
{
    Zt__V1__ReportCheckpointRequest q = ZT__V1__REPORT_CHECKPOINT_REQUEST__INIT;
    char dir[300], file[32];
    snprintf(dir, sizeof(dir), "%s/step_%08lld", root, (long long)step);
    snprintf(file, sizeof(file), "rank_%05d.zts", rank);
    q.attempt_id = attempt; /* no agent field: the call speaks as the agent running the rank */
    q.rank = rank;
    q.step = step;
    q.dir = dir;
    q.file = file;
    q.bytes = 1000;
    q.crc32c = 42;
    Zt__V1__ReportCheckpointReply *r = NULL;
    char msg[1024];
    zt_rpc_code code =
        call(c, A_ "ReportCheckpoint", &q.base, &zt__v1__report_checkpoint_reply__descriptor,
             (void **)&r, msg, sizeof(msg));
    if (code != ZT_RPC_OK) ZT_FAIL("ReportCheckpoint: %s", msg);
    *committed = r->committed;
    zt_pb_free(r);
}

static void report_shard(zt_rpc_client *c, int64_t attempt, int rank, int64_t step, bool *committed)
{
    report_shard_in(c, "/ckpt/life", attempt, rank, step, committed);
}

static void report_metrics(zt_rpc_client *c, int64_t attempt, int64_t from, int64_t to)
{
    Zt__V1__ReportMetricsRequest q = ZT__V1__REPORT_METRICS_REQUEST__INIT;
    Zt__V1__StepMetrics st[64], *sp[64];
    Zt__V1__Metric m[64][2], *mp[64][2];
    int n = 0;
    for (int64_t s = from; s <= to && n < 64; s++, n++) {
        zt__v1__step_metrics__init(&st[n]);
        st[n].attempt_id = attempt;
        st[n].rank = 0;
        st[n].step = s;
        zt__v1__metric__init(&m[n][0]);
        m[n][0].key = "loss";
        m[n][0].value = 5.0 - 0.1 * (double)s;
        zt__v1__metric__init(&m[n][1]);
        m[n][1].key = "tok_s";
        m[n][1].value = 1000;
        mp[n][0] = &m[n][0];
        mp[n][1] = &m[n][1];
        st[n].n_values = 2;
        st[n].values = mp[n];
        sp[n] = &st[n];
    }
    q.n_steps = (size_t)n;
    q.steps = sp;
    Zt__V1__ReportMetricsReply *r = NULL;
    char msg[1024];
    zt_rpc_code code =
        call(c, A_ "ReportMetrics", &q.base, &zt__v1__report_metrics_reply__descriptor, (void **)&r,
             msg, sizeof(msg));
    if (code != ZT_RPC_OK) ZT_FAIL("ReportMetrics: %s", msg);
    ASSERT_EQ_INT(r->accepted, n);
    zt_pb_free(r);
}

static char *get_logs(zt_rpc_client *c, int64_t id, int rank, bool follow)
{
    Zt__V1__GetLogsRequest q = ZT__V1__GET_LOGS_REQUEST__INIT;
    int32_t ranks[1] = {rank};
    q.job_id = id;
    q.follow = follow;
    if (rank >= 0) {
        q.n_ranks = 1;
        q.ranks = ranks;
    }
    zt_rpc_stream *s;
    zt_err err = {0};
    ASSERT_OK(zt_rpc_stream_open(c, C_ "GetLogs", &q.base, 20000, &s, &err));
    size_t cap = 1 << 16, n = 0;
    char *out = zt_calloc(1, cap);
    zt_rpc_code code;
    for (;;) {
        Zt__V1__LogBatch *b = NULL;
        zt_status st =
            zt_rpc_stream_next(s, &zt__v1__log_batch__descriptor, (void **)&b, &code, &err);
        if (st != ZT_OK) ZT_FAIL("GetLogs: %s", zt_err_msg(&err));
        if (!b) break;
        for (size_t i = 0; i < b->n_entries; i++)
            n += (size_t)snprintf(out + n, cap - n, "%d|%s\n", b->entries[i]->rank,
                                  b->entries[i]->text);
        zt_pb_free(b);
    }
    zt_rpc_stream_close(s);
    return out;
}

/* ---- scenarios ---------------------------------------------------------------------------- */

static void test_lifecycle(void)
{
    zt_zcoord_proc p;
    const char *args[] = {"--restart-backoff", "100ms", NULL};
    zt_zcoord_start(&p, args);
    current = &p;
    zt_rpc_client *c = client(&p, NULL);
    int64_t id = submit(c, "life", 4, 2, 1);
    watch w = {.c = client(&p, NULL), .id = id};
    pthread_create(&w.th, NULL, watch_main, &w);
    for (int t = 0; t < 500 && w.updates == 0; t++)
        zt_sleep_ms(10); /* the watch's snapshot (QUEUED) has arrived */
    ASSERT_EQ_INT(w.updates, 1);
    int64_t n1 = register_agent(c, "n1", 2), n2 = register_agent(c, "n2", 2);
    ASSERT_EQ_INT(n1, 1);

    /* gang placement: 2 ranks on each agent, told through the heartbeat replies */
    Zt__V1__HeartbeatReply *r1 = NULL, *r2 = NULL;
    int k1 = 0, k2 = 0;
    for (int t = 0; t < 200 && (k1 < 2 || k2 < 2); t++) {
        zt_pb_free(r1);
        zt_pb_free(r2);
        r1 = hb(c, "n1", n1, NULL, 0);
        r2 = hb(c, "n2", n2, NULL, 0);
        desired_attempt(r1, &k1);
        desired_attempt(r2, &k2);
        zt_sleep_ms(10);
    }
    CHECK(k1 == 2 && k2 == 2);
    int64_t att = r1->workers[0]->attempt_id;
    CHECK(att > 0 && r2->workers[0]->attempt_id == att);
    ASSERT_EQ_INT(r1->workers[0]->world_size, 4);
    ASSERT_EQ_INT(r1->workers[0]->local_world_size, 2);
    int ranks_seen = 0;
    for (int i = 0; i < 2; i++) {
        ranks_seen |= 1 << r1->workers[i]->rank;
        ranks_seen |= 1 << r2->workers[i]->rank;
        ASSERT_EQ_INT(r1->workers[i]->local_rank, i);
    }
    ASSERT_EQ_INT(ranks_seen, 15);
    char want[32];
    snprintf(want, sizeof(want), "zcoord:%lld", (long long)att);
    ASSERT_STREQ(r1->workers[0]->rendezvous, want);
    ASSERT_STREQ(r1->workers[0]->job_name, "life");
    zt_pb_free(r1);
    zt_pb_free(r2);
    wait_state(c, id, ZT__V1__JOB_STATE__JOB_STATE_SCHEDULED, 2000);

    /* the resolved job for the agent */
    Zt__V1__GetAttemptSpecRequest sq = ZT__V1__GET_ATTEMPT_SPEC_REQUEST__INIT;
    sq.attempt_id = att;
    Zt__V1__AttemptSpec *spec = NULL;
    ASSERT_EQ_INT(call(c, A_ "GetAttemptSpec", &sq.base, &zt__v1__attempt_spec__descriptor,
                       (void **)&spec, NULL, 0),
                  ZT_RPC_OK);
    ASSERT_CONTAINS(spec->job_json, "\"life\"");
    ASSERT_EQ_INT(spec->world_size, 4);
    ASSERT_STREQ(spec->resume_path, "");
    zt_pb_free(spec);

    /* rendezvous: rank 1 waits for rank 0's address; rank 0 publishes it */
    rdzv_call waiter = {.c = c, .attempt = att, .rank = 1, .wait = 1, .wait_ms = 10000};
    pthread_create(&waiter.th, NULL, rdzv_main, &waiter);
    zt_sleep_ms(150);
    rdzv_call pub = {
        .c = c, .attempt = att, .rank = 0, .value = "tcp://127.0.0.1:29500", .wait = 0};
    rdzv_main(&pub);
    ASSERT_EQ_INT(pub.code, ZT_RPC_OK);
    uint64_t t0 = zt_now_ns();
    pthread_join(waiter.th, NULL);
    ASSERT_EQ_INT(waiter.code, ZT_RPC_OK);
    ASSERT_TRUE(waiter.complete);
    ASSERT_STREQ(waiter.rank0, "tcp://127.0.0.1:29500");
    ASSERT_TRUE((double)(zt_now_ns() - t0) * 1e-9 < 2.0);
    /* waiting for every rank times out with complete = false after wait_ms */
    rdzv_call all = {.c = c, .attempt = att, .rank = 2, .wait = 2, .wait_ms = 300};
    t0 = zt_now_ns();
    rdzv_main(&all);
    ASSERT_EQ_INT(all.code, ZT_RPC_OK);
    ASSERT_TRUE(!all.complete);
    ASSERT_EQ_INT(all.n_entries, 1);
    ASSERT_TRUE((double)(zt_now_ns() - t0) * 1e-9 >= 0.25);
    /* a rank outside the world */
    rdzv_call bad = {.c = c, .attempt = att, .rank = 9, .wait = 0};
    rdzv_main(&bad);
    ASSERT_EQ_INT(bad.code, ZT_RPC_INVALID_ARGUMENT);

    /* every rank reports a live worker: RUNNING */
    sim a1[2] = {{id, att, 0, 4, 0, 0, 1, 10}, {id, att, 1, 4, 0, 0, 1, 10}};
    sim a2[2] = {{id, att, 2, 4, 0, 0, 1, 10}, {id, att, 3, 4, 0, 0, 1, 10}};
    zt_pb_free(hb(c, "n1", n1, a1, 2));
    zt_pb_free(hb(c, "n2", n2, a2, 2));
    wait_state(c, id, ZT__V1__JOB_STATE__JOB_STATE_RUNNING, 2000);

    /* metrics, a checkpoint committed by its last shard, logs */
    report_metrics(c, att, 1, 5);
    Zt__V1__GetMetricsRequest mq = ZT__V1__GET_METRICS_REQUEST__INIT;
    mq.job_id = id;
    char *keys[] = {"loss"};
    mq.n_keys = 1;
    mq.keys = keys;
    Zt__V1__GetMetricsReply *mr = NULL;
    ASSERT_EQ_INT(call(c, C_ "GetMetrics", &mq.base, &zt__v1__get_metrics_reply__descriptor,
                       (void **)&mr, NULL, 0),
                  ZT_RPC_OK);
    ASSERT_EQ_INT(mr->n_points, 5);
    ASSERT_EQ_INT(mr->points[4]->step, 5);
    ASSERT_EQ_INT(mr->points[4]->n_values, 1);
    ASSERT_STREQ(mr->points[4]->values[0]->key, "loss");
    ASSERT_NEAR(mr->points[4]->values[0]->value, 4.5, 1e-9, 1e-9);
    zt_pb_free(mr);
    Zt__V1__GetJobReply *gj = get_job(c, id);
    ASSERT_EQ_INT(gj->job->step, 5);
    ASSERT_NEAR(gj->job->loss, 4.5, 1e-9, 1e-9);
    zt_pb_free(gj);
    bool committed;
    for (int r = 0; r < 4; r++) {
        report_shard(c, att, r, 5, &committed);
        ASSERT_EQ_INT(committed, r == 3);
    }
    Zt__V1__ListCheckpointsRequest lq = ZT__V1__LIST_CHECKPOINTS_REQUEST__INIT;
    lq.job_id = id;
    Zt__V1__ListCheckpointsReply *lr = NULL;
    ASSERT_EQ_INT(call(c, C_ "ListCheckpoints", &lq.base,
                       &zt__v1__list_checkpoints_reply__descriptor, (void **)&lr, NULL, 0),
                  ZT_RPC_OK);
    ASSERT_EQ_INT(lr->n_checkpoints, 1);
    ASSERT_EQ_INT(lr->checkpoints[0]->state, ZT__V1__CHECKPOINT_STATE__CHECKPOINT_STATE_COMMITTED);
    ASSERT_EQ_INT(lr->checkpoints[0]->n_shard, 4);
    ASSERT_EQ_INT(lr->checkpoints[0]->bytes, 4000);
    zt_pb_free(lr);
    Zt__V1__ReportLogsRequest rl = ZT__V1__REPORT_LOGS_REQUEST__INIT;
    Zt__V1__LogEntry le[2], *lp[2] = {&le[0], &le[1]};
    for (int i = 0; i < 2; i++) {
        zt__v1__log_entry__init(&le[i]);
        le[i].attempt_id = att;
        le[i].rank = i * 2;
        le[i].source = ZT__V1__LOG_SOURCE__LOG_SOURCE_STDOUT;
        le[i].text = i ? "world from rank 2\n" : "hello from rank 0";
    }
    /* ranks 0 and 2 run on different agents: each agent reports its own */
    for (int i = 0; i < 2; i++) {
        rl.n_entries = 1;
        rl.entries = &lp[i];
        ASSERT_EQ_INT(call(c, A_ "ReportLogs", &rl.base, &zt__v1__report_logs_reply__descriptor,
                           NULL, NULL, 0),
                      ZT_RPC_OK);
    }
    char *logs = get_logs(c, id, -1, false);
    ASSERT_CONTAINS(logs, "0|hello from rank 0\n");
    ASSERT_CONTAINS(logs, "2|world from rank 2\n");
    ASSERT_CONTAINS(logs, "-1|[job] QUEUED -> SCHEDULED");
    zt_free(logs);
    logs = get_logs(c, id, 2, false);
    ASSERT_TRUE(!strstr(logs, "hello"));
    ASSERT_CONTAINS(logs, "world");
    zt_free(logs);

    /* rank 3 fails: the attempt fails, every rank is stopped (no longer desired), and the job
     * restarts after the backoff from the committed checkpoint */
    a2[1].phase = 7;
    a2[1].code = 1;
    zt_pb_free(hb(c, "n2", n2, a2, 2));
    int64_t att2 = 0;
    bool stopped1 = false, stopped2 = false;
    for (int t = 0; t < 300 && (!att2 || att2 == att); t++) {
        /* like real agents: report the workers until they are no longer desired, then stop
         * them and report none */
        Zt__V1__HeartbeatReply *x = hb(c, "n1", n1, stopped1 ? NULL : a1, stopped1 ? 0 : 2);
        int n;
        att2 = desired_attempt(x, &n);
        stopped1 = att2 != att;
        if (att2 == att) att2 = 0;
        zt_pb_free(x);
        x = hb(c, "n2", n2, stopped2 ? NULL : a2, stopped2 ? 0 : 2);
        stopped2 = desired_attempt(x, &n) != att;
        zt_pb_free(x);
        zt_sleep_ms(10);
    }
    CHECK(att2 > att);
    gj = get_job(c, id);
    ASSERT_EQ_INT(gj->job->restarts, 1);
    ASSERT_EQ_INT(gj->n_attempts, 2);
    ASSERT_EQ_INT(gj->attempts[0]->state, ZT__V1__ATTEMPT_STATE__ATTEMPT_STATE_FAILED);
    ASSERT_CONTAINS(gj->attempts[0]->reason, "rank 3 on n2");
    ASSERT_CONTAINS(gj->attempts[0]->reason, "exited with code 1");
    ASSERT_STREQ(gj->attempts[1]->resume_path, "/ckpt/life/step_00000005");
    ASSERT_EQ_INT(gj->attempts[1]->resume_step, 5);
    zt_pb_free(gj);
    sq.attempt_id = att2;
    ASSERT_EQ_INT(call(c, A_ "GetAttemptSpec", &sq.base, &zt__v1__attempt_spec__descriptor,
                       (void **)&spec, NULL, 0),
                  ZT_RPC_OK);
    ASSERT_STREQ(spec->resume_path, "/ckpt/life/step_00000005");
    zt_pb_free(spec);
    /* the old attempt is stale now */
    rdzv_call stale = {.c = c, .attempt = att, .rank = 0, .value = "x", .wait = 0};
    rdzv_main(&stale);
    ASSERT_EQ_INT(stale.code, ZT_RPC_FAILED_PRECONDITION);
    ASSERT_CONTAINS(stale.msg, "stale");
    rdzv_call unknown = {.c = c, .attempt = 99999, .rank = 0, .wait = 0};
    rdzv_main(&unknown);
    ASSERT_EQ_INT(unknown.code, ZT_RPC_NOT_FOUND);
    sq.attempt_id = att;
    char msg[1024];
    ASSERT_EQ_INT(call(c, A_ "GetAttemptSpec", &sq.base, &zt__v1__attempt_spec__descriptor, NULL,
                       msg, sizeof(msg)),
                  ZT_RPC_FAILED_PRECONDITION);

    /* attempt 2 runs and every rank exits 0: COMPLETED */
    sim b1[2] = {{id, att2, 0, 4, 0, 0, 6, 1}, {id, att2, 1, 4, 0, 0, 6, 1}};
    sim b2[2] = {{id, att2, 2, 4, 0, 0, 6, 1}, {id, att2, 3, 4, 0, 0, 6, 1}};
    zt_pb_free(hb(c, "n1", n1, b1, 2));
    zt_pb_free(hb(c, "n2", n2, b2, 2));
    wait_state(c, id, ZT__V1__JOB_STATE__JOB_STATE_RUNNING, 2000);
    for (int i = 0; i < 2; i++) {
        b1[i].phase = b2[i].phase = 7;
        b1[i].step = b2[i].step = 100;
    }
    zt_pb_free(hb(c, "n1", n1, b1, 2));
    zt_pb_free(hb(c, "n2", n2, b2, 2));
    wait_state(c, id, ZT__V1__JOB_STATE__JOB_STATE_COMPLETED, 2000);
    pthread_join(w.th, NULL);
    ASSERT_TRUE(w.got_final);
    ASSERT_EQ_INT(w.final_state, ZT__V1__JOB_STATE__JOB_STATE_COMPLETED);
    ASSERT_EQ_INT(w.end_code, ZT_RPC_OK);
    ASSERT_STREQ(w.states, "SCHEDULED,RUNNING,QUEUED,SCHEDULED,RUNNING,COMPLETED");
    /* the desired set is empty again */
    Zt__V1__HeartbeatReply *x = hb(c, "n1", n1, NULL, 0);
    ASSERT_EQ_INT(x->n_workers, 0);
    zt_pb_free(x);
    /* watching an ended job: one final update */
    watch w2 = {.c = c, .id = id};
    watch_main(&w2);
    ASSERT_EQ_INT(w2.updates, 1);
    ASSERT_TRUE(w2.got_final);
    /* follow-mode logs of an ended job end by themselves */
    logs = get_logs(c, id, -1, true);
    ASSERT_CONTAINS(logs, "COMPLETED");
    zt_free(logs);
    /* agents list */
    Zt__V1__ListAgentsRequest aq = ZT__V1__LIST_AGENTS_REQUEST__INIT;
    Zt__V1__ListAgentsReply *ar = NULL;
    ASSERT_EQ_INT(call(c, C_ "ListAgents", &aq.base, &zt__v1__list_agents_reply__descriptor,
                       (void **)&ar, NULL, 0),
                  ZT_RPC_OK);
    ASSERT_EQ_INT(ar->n_agents, 2);
    ASSERT_EQ_INT(ar->agents[0]->free_slots, 2);
    ASSERT_EQ_INT(ar->agents[0]->state, ZT__V1__AGENT_STATE__AGENT_STATE_ALIVE);
    zt_pb_free(ar);

    zt_rpc_client_destroy(w.c);
    zt_rpc_client_destroy(c);
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    zt_zcoord_cleanup(&p);
    current = NULL;
}

static int64_t last_att; /* replies may still show an attempt that just ended: skip it */

/* Waits until agent is told to run an attempt newer than the last one seen. */
static int64_t next_attempt(zt_rpc_client *c, const char *agent, int64_t inc)
{
    int64_t att = 0;
    for (int t = 0; t < 300 && att <= last_att; t++) {
        Zt__V1__HeartbeatReply *x = hb(c, agent, inc, NULL, 0);
        int n;
        att = desired_attempt(x, &n);
        zt_pb_free(x);
        if (att <= last_att) zt_sleep_ms(10);
    }
    CHECK(att > last_att);
    last_att = att;
    return att;
}

/* Places a 1-rank job on agent n and reports its worker running; returns the attempt. */
static int64_t run_to_running(zt_rpc_client *c, const char *agent, int64_t inc, int64_t id)
{
    int64_t att = next_attempt(c, agent, inc);
    sim s = {id, att, 0, 4, 0, 0, 1, 1};
    zt_pb_free(hb(c, agent, inc, &s, 1));
    return att;
}

/* Runs one 1-rank job on agent n to a worker exit. */
static void run_to_exit(zt_rpc_client *c, const char *agent, int64_t inc, int64_t id, int code,
                        int sig)
{
    int64_t att = next_attempt(c, agent, inc);
    sim s = {id, att, 0, 4, 0, 0, 1, 1};
    zt_pb_free(hb(c, agent, inc, &s, 1));
    s.phase = 7;
    s.code = code;
    s.sig = sig;
    zt_pb_free(hb(c, agent, inc, &s, 1));
}

static void test_restart_policy(void)
{
    last_att = 0;
    zt_zcoord_proc p;
    const char *args[] = {"--restart-backoff", "50ms", NULL};
    zt_zcoord_start(&p, args);
    current = &p;
    zt_rpc_client *c = client(&p, NULL);
    int64_t inc = register_agent(c, "solo", 1);
    char reason[2048];

    /* no restarts allowed: FAILED with the reason */
    int64_t j1 = submit(c, "norestart", 1, 1, 0);
    run_to_exit(c, "solo", inc, j1, 1, 0);
    wait_state(c, j1, ZT__V1__JOB_STATE__JOB_STATE_FAILED, 2000);
    job_state(c, j1, reason, sizeof(reason));
    ASSERT_CONTAINS(reason, "no restarts left (max_restarts=0)");
    zt_pb_free(hb(c, "solo", inc, NULL, 0));

    /* a configuration error is not retried however many restarts remain */
    int64_t j2 = submit(c, "fatal", 1, 1, 3);
    run_to_exit(c, "solo", inc, j2, 78, 0);
    wait_state(c, j2, ZT__V1__JOB_STATE__JOB_STATE_FAILED, 2000);
    job_state(c, j2, reason, sizeof(reason));
    ASSERT_CONTAINS(reason, "configuration error: not retryable");
    Zt__V1__GetJobReply *g = get_job(c, j2);
    ASSERT_EQ_INT(g->job->restarts, 0);
    zt_pb_free(g);
    zt_pb_free(hb(c, "solo", inc, NULL, 0));

    /* a signal is retried until max_restarts is spent */
    int64_t j3 = submit(c, "signal", 1, 1, 2);
    for (int i = 0; i < 3; i++) {
        run_to_exit(c, "solo", inc, j3, 0, 9);
        zt_pb_free(hb(c, "solo", inc, NULL, 0));
    }
    wait_state(c, j3, ZT__V1__JOB_STATE__JOB_STATE_FAILED, 3000);
    g = get_job(c, j3);
    ASSERT_EQ_INT(g->job->restarts, 2);
    ASSERT_EQ_INT(g->n_attempts, 3);
    ASSERT_CONTAINS(g->job->reason, "signal 9");
    zt_pb_free(g);

    /* cancel: a queued job and a running one; cancelling twice is refused */
    int64_t j4 = submit(c, "cancel-me", 1, 1, 0);
    run_to_running(c, "solo", inc, j4);
    wait_state(c, j4, ZT__V1__JOB_STATE__JOB_STATE_RUNNING, 2000);
    Zt__V1__CancelJobRequest cq = ZT__V1__CANCEL_JOB_REQUEST__INIT;
    cq.job_id = j4;
    cq.reason = "testing";
    Zt__V1__CancelJobReply *cr = NULL;
    char msg[1024];
    zt_rpc_code code = call(c, C_ "CancelJob", &cq.base, &zt__v1__cancel_job_reply__descriptor,
                            (void **)&cr, msg, sizeof(msg));
    if (code != ZT_RPC_OK) ZT_FAIL("cancel: %s", msg);
    ASSERT_EQ_INT(cr->job->state, ZT__V1__JOB_STATE__JOB_STATE_CANCELED);
    ASSERT_CONTAINS(cr->job->reason, "canceled: testing");
    zt_pb_free(cr);
    /* its worker is no longer desired */
    Zt__V1__HeartbeatReply *x = hb(c, "solo", inc, NULL, 0);
    ASSERT_EQ_INT(x->n_workers, 0);
    zt_pb_free(x);
    g = get_job(c, j4);
    ASSERT_EQ_INT(g->attempts[0]->state, ZT__V1__ATTEMPT_STATE__ATTEMPT_STATE_CANCELED);
    zt_pb_free(g);
    ASSERT_EQ_INT(call(c, C_ "CancelJob", &cq.base, &zt__v1__cancel_job_reply__descriptor, NULL,
                       msg, sizeof(msg)),
                  ZT_RPC_FAILED_PRECONDITION);
    ASSERT_CONTAINS(msg, "already ended");
    cq.job_id = 4242;
    ASSERT_EQ_INT(call(c, C_ "CancelJob", &cq.base, &zt__v1__cancel_job_reply__descriptor, NULL,
                       msg, sizeof(msg)),
                  ZT_RPC_NOT_FOUND);

    zt_rpc_client_destroy(c);
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    zt_zcoord_cleanup(&p);
    current = NULL;
}

/* A worker of an ended attempt that its agent still runs holds its slot; once the agent
 * reports it exited, a job waiting for that slot is placed with no other event to wake the
 * scheduler (it used to stay QUEUED until one came: seen once in e2e_agent_worker_io). */
static void test_stale_worker_slot(void)
{
    last_att = 0;
    zt_zcoord_proc p;
    zt_zcoord_start(&p, NULL);
    current = &p;
    zt_rpc_client *c = client(&p, NULL);
    int64_t inc = register_agent(c, "duo", 2);
    int64_t j1 = submit(c, "first", 2, 2, 0);
    int64_t att = next_attempt(c, "duo", inc);
    /* rank 0 exits with a configuration error while rank 1 runs on: the attempt ends */
    sim w[2] = {{j1, att, 0, 4, 0, 0, 1, 1}, {j1, att, 1, 4, 0, 0, 1, 1}};
    zt_pb_free(hb(c, "duo", inc, w, 2));
    w[0].phase = 7, w[0].code = 78;
    zt_pb_free(hb(c, "duo", inc, w, 2));
    wait_state(c, j1, ZT__V1__JOB_STATE__JOB_STATE_FAILED, 2000);
    /* rank 1, no longer desired, still runs (being stopped): one slot free of two */
    zt_pb_free(hb(c, "duo", inc, &w[1], 1));
    int64_t j2 = submit(c, "second", 2, 2, 0);
    zt_sleep_ms(300);
    char reason[2048];
    ASSERT_EQ_INT(job_state(c, j2, reason, sizeof(reason)), ZT__V1__JOB_STATE__JOB_STATE_QUEUED);
    ASSERT_CONTAINS(reason, "free");
    /* it exits (SIGTERM), then the agent drops it: the job is placed */
    w[1].phase = 7, w[1].sig = 15;
    zt_pb_free(hb(c, "duo", inc, &w[1], 1));
    zt_pb_free(hb(c, "duo", inc, NULL, 0));
    wait_state(c, j2, ZT__V1__JOB_STATE__JOB_STATE_SCHEDULED, 2000);
    zt_rpc_client_destroy(c);
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    zt_zcoord_cleanup(&p);
    current = NULL;
}

static void test_lost_hang_vanish(void)
{
    last_att = 0;
    zt_zcoord_proc p;
    const char *args[] = {"--restart-backoff",
                          "50ms",
                          "--heartbeat-timeout",
                          "700ms",
                          "--hang-timeout",
                          "1500ms",
                          NULL};
    zt_zcoord_start(&p, args);
    current = &p;
    zt_rpc_client *c = client(&p, NULL);
    char reason[2048], msg[1024];

    /* lost agent: its attempt fails and restarts; the agent comes back ALIVE */
    int64_t inc = register_agent(c, "flaky", 1);
    int64_t j1 = submit(c, "lost", 1, 1, 1);
    run_to_exit(c, "flaky", inc, j1, 0, 0); /* exits 0 -> completes; use a fresh job below */
    wait_state(c, j1, ZT__V1__JOB_STATE__JOB_STATE_COMPLETED, 2000);
    zt_pb_free(hb(c, "flaky", inc, NULL, 0));
    int64_t j2 = submit(c, "lost2", 1, 1, 1);
    int64_t att = next_attempt(c, "flaky", inc);
    sim s = {j2, att, 0, 4, 0, 0, 3, 3};
    zt_pb_free(hb(c, "flaky", inc, &s, 1));
    wait_state(c, j2, ZT__V1__JOB_STATE__JOB_STATE_RUNNING, 2000);
    zt_sleep_ms(1200); /* silence */
    wait_state(c, j2, ZT__V1__JOB_STATE__JOB_STATE_QUEUED, 2000);
    job_state(c, j2, reason, sizeof(reason));
    ASSERT_CONTAINS(reason, "agent flaky lost");
    ASSERT_CONTAINS(reason, "no heartbeat for");
    Zt__V1__ListAgentsRequest aq = ZT__V1__LIST_AGENTS_REQUEST__INIT;
    Zt__V1__ListAgentsReply *ar = NULL;
    ASSERT_EQ_INT(call(c, C_ "ListAgents", &aq.base, &zt__v1__list_agents_reply__descriptor,
                       (void **)&ar, NULL, 0),
                  ZT_RPC_OK);
    ASSERT_EQ_INT(ar->agents[0]->state, ZT__V1__AGENT_STATE__AGENT_STATE_LOST);
    ASSERT_EQ_INT(ar->agents[0]->free_slots, 0);
    zt_pb_free(ar);
    /* it heartbeats again (without the old worker): ALIVE, and the job is placed again */
    int64_t att2 = next_attempt(c, "flaky", inc);
    CHECK(att2 > att);

    /* the rest needs steady heartbeats from a loaded test machine: the same database and
     * port under a long heartbeat timeout (state survives the restart) */
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    const char *args2[] = {"--restart-backoff", "50ms", "--hang-timeout", "1500ms", NULL};
    zt_zcoord_restart(&p, args2);
    Zt__V1__PingRequest pq = ZT__V1__PING_REQUEST__INIT;
    zt_rpc_code pc = ZT_RPC_UNAVAILABLE;
    for (int t = 0; t < 100 && pc != ZT_RPC_OK; t++) {
        pc = call(c, C_ "Ping", &pq.base, &zt__v1__ping_reply__descriptor, NULL, NULL, 0);
        if (pc != ZT_RPC_OK) zt_sleep_ms(50);
    }
    ASSERT_EQ_INT(pc, ZT_RPC_OK);

    /* hang: the worker keeps reporting the same step */
    s = (sim){j2, att2, 0, 4, 0, 0, 7, 70};
    uint64_t t0 = zt_now_ns();
    int st = 0;
    while ((double)(zt_now_ns() - t0) * 1e-9 < 6.0) {
        zt_pb_free(hb(c, "flaky", inc, &s, 1));
        st = job_state(c, j2, reason, sizeof(reason));
        if (st == ZT__V1__JOB_STATE__JOB_STATE_FAILED) break;
        zt_sleep_ms(100);
    }
    ASSERT_EQ_INT(st, ZT__V1__JOB_STATE__JOB_STATE_FAILED);
    ASSERT_CONTAINS(reason, "hang: no rank waits in a collective");
    ASSERT_CONTAINS(reason, "rank 0 step 7 (collective #70)");
    ASSERT_CONTAINS(reason, "no progress for");
    ASSERT_CONTAINS(reason, "no restarts left");
    zt_pb_free(hb(c, "flaky", inc, NULL, 0));

    /* a worker that vanishes from its agent's report */
    int64_t j3 = submit(c, "vanish", 1, 1, 0);
    int64_t att3 = next_attempt(c, "flaky", inc);
    s = (sim){j3, att3, 0, 4, 0, 0, 1, 1};
    zt_pb_free(hb(c, "flaky", inc, &s, 1));
    wait_state(c, j3, ZT__V1__JOB_STATE__JOB_STATE_RUNNING, 2000);
    zt_pb_free(hb(c, "flaky", inc, NULL, 0));
    wait_state(c, j3, ZT__V1__JOB_STATE__JOB_STATE_FAILED, 2000);
    job_state(c, j3, reason, sizeof(reason));
    ASSERT_CONTAINS(reason, "vanished");

    /* incarnations: a re-registration makes the old one stale; unknown agents are told so */
    int64_t inc2 = register_agent(c, "flaky", 1);
    ASSERT_EQ_INT(inc2, inc + 1);
    zt_rpc_code code;
    heartbeat(c, "flaky", inc, NULL, 0, &code, msg, sizeof(msg));
    ASSERT_EQ_INT(code, ZT_RPC_FAILED_PRECONDITION);
    ASSERT_CONTAINS(msg, "stale");
    heartbeat(c, "ghost", 1, NULL, 0, &code, msg, sizeof(msg)); /* it holds no agent_key */
    ASSERT_EQ_INT(code, ZT_RPC_UNAUTHENTICATED);
    ASSERT_CONTAINS(msg, "RegisterAgent");

    /* pending reasons */
    int64_t big = submit(c, "too-big", 4, 4, 0);
    wait_state(c, big, ZT__V1__JOB_STATE__JOB_STATE_QUEUED, 1000);
    for (int t = 0; t < 100; t++) {
        job_state(c, big, reason, sizeof(reason));
        if (strstr(reason, "cluster too small")) break;
        zt_sleep_ms(20);
    }
    ASSERT_CONTAINS(reason, "cluster too small: needs 4 cpu slots");

    zt_rpc_client_destroy(c);
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    zt_zcoord_cleanup(&p);
    current = NULL;
}

static void test_persistence(void)
{
    zt_zcoord_proc p;
    const char *args[] = {"--heartbeat-timeout", "5s", NULL};
    zt_zcoord_start(&p, args);
    current = &p;
    zt_rpc_client *c = client(&p, NULL);
    int64_t inc = register_agent(c, "keeper", 2);
    int64_t id = submit(c, "durable", 2, 2, 0);
    int64_t att = 0;
    for (int t = 0; t < 200 && !att; t++) {
        Zt__V1__HeartbeatReply *x = hb(c, "keeper", inc, NULL, 0);
        int n;
        att = desired_attempt(x, &n);
        zt_pb_free(x);
        zt_sleep_ms(10);
    }
    sim s[2] = {{id, att, 0, 4, 0, 0, 3, 3}, {id, att, 1, 4, 0, 0, 3, 3}};
    zt_pb_free(hb(c, "keeper", inc, s, 2));
    wait_state(c, id, ZT__V1__JOB_STATE__JOB_STATE_RUNNING, 2000);
    report_metrics(c, att, 1, 3);
    int64_t queued = submit(c, "waiting", 2, 2, 0);

    /* SIGKILL, restart on the same port and database */
    zt_zcoord_kill(&p);
    zt_zcoord_restart(&p, args);
    /* the channel notices the new server on its next call */
    Zt__V1__PingRequest pq = ZT__V1__PING_REQUEST__INIT;
    zt_rpc_code code = ZT_RPC_UNAVAILABLE;
    for (int t = 0; t < 100 && code != ZT_RPC_OK; t++) {
        code = call(c, C_ "Ping", &pq.base, &zt__v1__ping_reply__descriptor, NULL, NULL, 0);
        if (code != ZT_RPC_OK) zt_sleep_ms(50);
    }
    ASSERT_EQ_INT(code, ZT_RPC_OK);
    Zt__V1__GetJobReply *g = get_job(c, id);
    ASSERT_EQ_INT(g->job->state, ZT__V1__JOB_STATE__JOB_STATE_RUNNING);
    ASSERT_EQ_INT(g->job->step, 3);
    ASSERT_CONTAINS(g->spec_text, "\"durable\"");
    ASSERT_EQ_INT(g->n_attempts, 1);
    zt_pb_free(g);
    ASSERT_EQ_INT(job_state(c, queued, NULL, 0), ZT__V1__JOB_STATE__JOB_STATE_QUEUED);
    /* the agent's incarnation is still valid and it is told the same workers */
    Zt__V1__HeartbeatReply *x = hb(c, "keeper", inc, s, 2);
    int n;
    ASSERT_EQ_INT(desired_attempt(x, &n), att);
    ASSERT_EQ_INT(n, 2);
    zt_pb_free(x);
    /* the job finishes under the new coordinator; the queued one follows */
    s[0].phase = s[1].phase = 7;
    zt_pb_free(hb(c, "keeper", inc, s, 2));
    wait_state(c, id, ZT__V1__JOB_STATE__JOB_STATE_COMPLETED, 2000);
    zt_pb_free(hb(c, "keeper", inc, NULL, 0));
    wait_state(c, queued, ZT__V1__JOB_STATE__JOB_STATE_SCHEDULED, 2000);
    zt_rpc_client_destroy(c);
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    zt_zcoord_cleanup(&p);
    current = NULL;
}

static void test_auth(void)
{
    zt_zcoord_proc p;
    char tokfile[256];
    zt_zcoord_start(&p, NULL); /* to get a directory */
    zt_zcoord_stop(&p);
    snprintf(tokfile, sizeof(tokfile), "%s/token", p.dir);
    FILE *f = fopen(tokfile, "w");
    fputs("s3cret-token-0123456789\n", f);
    fclose(f);
    chmod(tokfile, 0600);
    const char *args[] = {"--token-file", tokfile, NULL};
    zt_zcoord_restart(&p, args);
    current = &p;
    zt_rpc_client *none = client(&p, NULL), *wrong = client(&p, "nope"),
                  *good = client(&p, "s3cret-token-0123456789");
    Zt__V1__PingRequest pq = ZT__V1__PING_REQUEST__INIT;
    char msg[1024];
    ASSERT_EQ_INT(
        call(none, C_ "Ping", &pq.base, &zt__v1__ping_reply__descriptor, NULL, msg, sizeof(msg)),
        ZT_RPC_UNAUTHENTICATED);
    ASSERT_CONTAINS(msg, "missing token");
    ASSERT_EQ_INT(
        call(wrong, C_ "Ping", &pq.base, &zt__v1__ping_reply__descriptor, NULL, msg, sizeof(msg)),
        ZT_RPC_UNAUTHENTICATED);
    ASSERT_CONTAINS(msg, "invalid token");
    Zt__V1__HeartbeatRequest hq = ZT__V1__HEARTBEAT_REQUEST__INIT;
    hq.name = "x";
    ASSERT_EQ_INT(
        call(wrong, A_ "Heartbeat", &hq.base, &zt__v1__heartbeat_reply__descriptor, NULL, NULL, 0),
        ZT_RPC_UNAUTHENTICATED);
    /* health checks need no credential (load balancers and kubelets probe it) */
    Grpc__Health__V1__HealthCheckRequest h = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ASSERT_EQ_INT(call(none, "/grpc.health.v1.Health/Check", &h.base,
                       &grpc__health__v1__health_check_response__descriptor, NULL, NULL, 0),
                  ZT_RPC_OK);
    /* a user token cannot register an agent (this coordinator has no join token at all) */
    Zt__V1__RegisterAgentRequest rq = ZT__V1__REGISTER_AGENT_REQUEST__INIT;
    rq.name = "n";
    rq.device = ZT__V1__DEVICE__DEVICE_CPU;
    rq.slots = 1;
    ASSERT_EQ_INT(call(good, A_ "RegisterAgent", &rq.base,
                       &zt__v1__register_agent_reply__descriptor, NULL, msg, sizeof(msg)),
                  ZT_RPC_PERMISSION_DENIED);
    ASSERT_CONTAINS(msg, "a user token cannot register an agent");
    ASSERT_EQ_INT(call(good, C_ "Ping", &pq.base, &zt__v1__ping_reply__descriptor, NULL, NULL, 0),
                  ZT_RPC_OK);
    Grpc__Health__V1__HealthCheckResponse *hr = NULL;
    ASSERT_EQ_INT(call(good, "/grpc.health.v1.Health/Check", &h.base,
                       &grpc__health__v1__health_check_response__descriptor, (void **)&hr, NULL, 0),
                  ZT_RPC_OK);
    ASSERT_EQ_INT(hr->status, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
    zt_pb_free(hr);
    zt_rpc_client_destroy(none);
    zt_rpc_client_destroy(wrong);
    zt_rpc_client_destroy(good);
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    zt_zcoord_cleanup(&p);
    current = NULL;
}

static atomic_int raw_done;
static zt_rpc_code raw_codes[32];
static char raw_msgs[32][256];

static void on_raw(void *arg, zt_rpc_code code, const char *message, const uint8_t *reply,
                   size_t len)
{
    (void)reply;
    (void)len;
    int i = (int)(intptr_t)arg;
    raw_codes[i] = code;
    snprintf(raw_msgs[i], sizeof(raw_msgs[i]), "%s", message);
    atomic_fetch_add(&raw_done, 1);
}

static void expect(zt_rpc_client *c, const char *path, const ProtobufCMessage *req,
                   zt_rpc_code want, const char *needle)
{
    char msg[1024];
    zt_rpc_code got = call(c, path, req, &zt__v1__ping_reply__descriptor, NULL, msg, sizeof(msg));
    if (got != want || (needle && !strstr(msg, needle)))
        ZT_FAIL("%s: got %s \"%s\", want %s with \"%s\"", path, zt_rpc_code_name(got), msg,
                zt_rpc_code_name(want), needle ? needle : "");
}

static void test_bad_input(void)
{
    zt_zcoord_proc p;
    const char *args[] = {"--max-message", "64KiB", NULL};
    zt_zcoord_start(&p, args);
    current = &p;
    zt_rpc_client *c = client(&p, NULL);

    Zt__V1__SubmitJobRequest sq = ZT__V1__SUBMIT_JOB_REQUEST__INIT;
    expect(c, C_ "SubmitJob", &sq.base, ZT_RPC_INVALID_ARGUMENT, "job_text is empty");
    sq.job_text =
        "{\"name\": \"x\",\n  \"train\": {\"steps\": 1},\n  \"deepspeed\": {\"zero_optimization\": {\"stag\": 1}}}";
    sq.job_path = "typo.json";
    sq.job_dir = "relative/dir";
    expect(c, C_ "SubmitJob", &sq.base, ZT_RPC_INVALID_ARGUMENT, "not absolute");
    sq.job_dir = "/tmp";
    expect(c, C_ "SubmitJob", &sq.base, ZT_RPC_INVALID_ARGUMENT, "typo.json:");
    sq.job_text = "{\"name\": ";
    expect(c, C_ "SubmitJob", &sq.base, ZT_RPC_INVALID_ARGUMENT, "typo.json:1:");
    char *valid = job_text("prio", 1, 1, 0, 10);
    sq.job_text = valid;
    sq.priority = 5000;
    expect(c, C_ "SubmitJob", &sq.base, ZT_RPC_INVALID_ARGUMENT, "priority 5000");
    sq.priority = 0;
    /* over the configured size limit */
    char *big = zt_malloc(100 * 1024);
    memset(big, ' ', 100 * 1024 - 1);
    big[100 * 1024 - 1] = '\0';
    sq.job_text = big;
    /* refused by the gRPC core before any handler: its message gives both sizes */
    expect(c, C_ "SubmitJob", &sq.base, ZT_RPC_RESOURCE_EXHAUSTED,
           "larger than max (102420 vs. 65536)");
    zt_free(big);

    /* unknown ids and out-of-range values */
    Zt__V1__GetJobRequest gq = ZT__V1__GET_JOB_REQUEST__INIT;
    expect(c, C_ "GetJob", &gq.base, ZT_RPC_INVALID_ARGUMENT, "job_id 0");
    gq.job_id = 777;
    expect(c, C_ "GetJob", &gq.base, ZT_RPC_NOT_FOUND, "job 777 not found");
    Zt__V1__GetMetricsRequest mq = ZT__V1__GET_METRICS_REQUEST__INIT;
    mq.job_id = 777;
    expect(c, C_ "GetMetrics", &mq.base, ZT_RPC_NOT_FOUND, "job 777");
    Zt__V1__ListCheckpointsRequest lq = ZT__V1__LIST_CHECKPOINTS_REQUEST__INIT;
    lq.job_id = 777;
    expect(c, C_ "ListCheckpoints", &lq.base, ZT_RPC_NOT_FOUND, "job 777");
    Zt__V1__ListJobsRequest ljq = ZT__V1__LIST_JOBS_REQUEST__INIT;
    ljq.limit = 5000;
    expect(c, C_ "ListJobs", &ljq.base, ZT_RPC_INVALID_ARGUMENT, "limit 5000");
    Zt__V1__JobState badstate = (Zt__V1__JobState)42;
    ljq.limit = 0;
    ljq.n_states = 1;
    ljq.states = &badstate;
    expect(c, C_ "ListJobs", &ljq.base, ZT_RPC_INVALID_ARGUMENT, "not a job state");
    Zt__V1__RegisterAgentRequest rq = ZT__V1__REGISTER_AGENT_REQUEST__INIT;
    rq.name = "bad name!";
    rq.device = ZT__V1__DEVICE__DEVICE_CPU;
    expect(c, A_ "RegisterAgent", &rq.base, ZT_RPC_INVALID_ARGUMENT, "not valid");
    rq.name = "ok";
    rq.device = ZT__V1__DEVICE__DEVICE_UNSPECIFIED;
    expect(c, A_ "RegisterAgent", &rq.base, ZT_RPC_INVALID_ARGUMENT, "device");
    register_agent(c, "checker", 1); /* the later agent calls carry its key */
    Zt__V1__RendezvousRequest zq = ZT__V1__RENDEZVOUS_REQUEST__INIT;
    zq.attempt_id = 1;
    zq.wait_ms = 1000000;
    expect(c, A_ "Rendezvous", &zq.base, ZT_RPC_INVALID_ARGUMENT, "wait_ms");
    Zt__V1__ReportCheckpointRequest cq = ZT__V1__REPORT_CHECKPOINT_REQUEST__INIT;
    cq.attempt_id = 1;
    cq.dir = "relative";
    cq.file = "x";
    expect(c, A_ "ReportCheckpoint", &cq.base, ZT_RPC_INVALID_ARGUMENT, "absolute");

    /* malformed bytes and wrong field types, for every method */
    const char *paths[] = {
        C_ "SubmitJob",     C_ "GetJob",     C_ "ListJobs",        C_ "CancelJob",
        C_ "WatchJob",      C_ "GetMetrics", C_ "ListCheckpoints", C_ "GetLogs",
        A_ "RegisterAgent", A_ "Heartbeat",  A_ "ReportMetrics",   A_ "ReportCheckpoint",
        A_ "ReportLogs",    A_ "Rendezvous", A_ "GetAttemptSpec",  "/grpc.health.v1.Health/Check"};
    const uint8_t garbage[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x02};
    zt_rpc_cq *q = zt_rpc_cq_create();
    zt_err err = {0};
    int n = (int)(sizeof(paths) / sizeof(paths[0]));
    for (int i = 0; i < n; i++)
        ASSERT_OK(zt_rpc_unary_async_bytes(c, q, paths[i], garbage, sizeof(garbage), 5000, on_raw,
                                           (void *)(intptr_t)i, &err));
    /* field 1 of GetJobRequest (int64) sent as a string */
    const uint8_t wrongtype[] = {0x0a, 0x03, 'a', 'b', 'c'};
    ASSERT_OK(zt_rpc_unary_async_bytes(c, q, C_ "GetJob", wrongtype, sizeof(wrongtype), 5000,
                                       on_raw, (void *)(intptr_t)n, &err));
    while (atomic_load(&raw_done) < n + 1)
        zt_rpc_cq_poll(q, 1000);
    zt_rpc_cq_destroy(q);
    for (int i = 0; i <= n; i++) {
        /* an agent call without a key is refused before its bytes are decoded */
        bool agent_call = i < n && strncmp(paths[i], A_, strlen(A_)) == 0 &&
                          !strstr(paths[i], "/RegisterAgent");
        zt_rpc_code want = agent_call ? ZT_RPC_UNAUTHENTICATED : ZT_RPC_INVALID_ARGUMENT;
        if (raw_codes[i] != want)
            ZT_FAIL("%s with garbage: %s (%s)", i < n ? paths[i] : "GetJob wrong type",
                    zt_rpc_code_name(raw_codes[i]), raw_msgs[i]);
        ASSERT_CONTAINS(raw_msgs[i], agent_call ? "missing agent key" : "cannot decode");
    }
    /* an unknown method */
    Zt__V1__PingRequest pq = ZT__V1__PING_REQUEST__INIT;
    expect(c, C_ "Frobnicate", &pq.base, ZT_RPC_UNIMPLEMENTED, "unknown method");
    /* and the server is unaffected */
    expect(c, C_ "Ping", &pq.base, ZT_RPC_OK, NULL);
    sq.job_text = valid;
    Zt__V1__SubmitJobReply *sr = NULL;
    ASSERT_EQ_INT(call(c, C_ "SubmitJob", &sq.base, &zt__v1__submit_job_reply__descriptor,
                       (void **)&sr, NULL, 0),
                  ZT_RPC_OK);
    ASSERT_TRUE(sr->job_id > 0);
    zt_pb_free(sr);
    zt_free(valid);
    zt_rpc_client_destroy(c);
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    zt_zcoord_cleanup(&p);
    current = NULL;
}

/* Metrics thinning and log pruning for long jobs; GPU agents: slots map to GPU indices. */
static void test_limits_and_gpus(void)
{
    zt_zcoord_proc p;
    const char *args[] = {"--metrics-max-points", "10", "--logs-max-lines", "100", NULL};
    zt_zcoord_start(&p, args);
    current = &p;
    zt_rpc_client *c = client(&p, NULL);
    int64_t inc = register_agent(c, "cpu1", 1);
    int64_t id = submit(c, "long", 1, 1, 0);
    last_att = 0;
    int64_t att = run_to_running(c, "cpu1", inc, id);
    for (int64_t s = 1; s <= 60; s += 20)
        report_metrics(c, att, s, s + 19);
    Zt__V1__GetMetricsRequest mq = ZT__V1__GET_METRICS_REQUEST__INIT;
    mq.job_id = id;
    Zt__V1__GetMetricsReply *mr = NULL;
    ASSERT_EQ_INT(call(c, C_ "GetMetrics", &mq.base, &zt__v1__get_metrics_reply__descriptor,
                       (void **)&mr, NULL, 0),
                  ZT_RPC_OK);
    /* 60 steps into at most 10 stored rows: every 8th step */
    ASSERT_TRUE(mr->n_points <= 10 && mr->n_points >= 5);
    ASSERT_EQ_INT(mr->stride, 8);
    for (size_t i = 0; i < mr->n_points; i++)
        ASSERT_EQ_INT(mr->points[i]->step % 8, 0);
    zt_pb_free(mr);
    /* a resumed attempt reports the same steps again: rows are replaced, not added, so the
     * stride stays */
    for (int64_t s = 1; s <= 60; s += 20)
        report_metrics(c, att, s, s + 19);
    mr = NULL;
    ASSERT_EQ_INT(call(c, C_ "GetMetrics", &mq.base, &zt__v1__get_metrics_reply__descriptor,
                       (void **)&mr, NULL, 0),
                  ZT_RPC_OK);
    ASSERT_EQ_INT(mr->stride, 8);
    ASSERT_TRUE(mr->n_points <= 10 && mr->n_points >= 5);
    zt_pb_free(mr);
    Zt__V1__GetJobReply *g = get_job(c, id);
    ASSERT_EQ_INT(g->job->step, 60); /* the live step is not thinned */
    zt_pb_free(g);
    Zt__V1__ReportLogsRequest rl = ZT__V1__REPORT_LOGS_REQUEST__INIT;
    Zt__V1__LogEntry le[150], *lp[150];
    char text[150][16];
    for (int i = 0; i < 150; i++) {
        zt__v1__log_entry__init(&le[i]);
        le[i].attempt_id = att;
        le[i].source = ZT__V1__LOG_SOURCE__LOG_SOURCE_STDOUT;
        snprintf(text[i], sizeof(text[i]), "line %03d", i);
        le[i].text = text[i];
        lp[i] = &le[i];
    }
    rl.n_entries = 150;
    rl.entries = lp;
    ASSERT_EQ_INT(
        call(c, A_ "ReportLogs", &rl.base, &zt__v1__report_logs_reply__descriptor, NULL, NULL, 0),
        ZT_RPC_OK);
    char *logs = get_logs(c, id, -1, false);
    int lines = 0;
    for (const char *q = logs; *q; q++)
        lines += *q == '\n';
    ASSERT_TRUE(lines <= 110 && lines >= 100);
    ASSERT_CONTAINS(logs, "line 149");
    ASSERT_TRUE(!strstr(logs, "line 000"));
    zt_free(logs);
    /* lines that come after the job ended (an agent flushing) are bounded the same way */
    Zt__V1__CancelJobRequest cq = ZT__V1__CANCEL_JOB_REQUEST__INIT;
    cq.job_id = id;
    ASSERT_EQ_INT(
        call(c, C_ "CancelJob", &cq.base, &zt__v1__cancel_job_reply__descriptor, NULL, NULL, 0),
        ZT_RPC_OK);
    zt_pb_free(hb(c, "cpu1", inc, NULL, 0));
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 150; i++)
            snprintf(text[i], sizeof(text[i]), "late %d-%03d", round, i);
        ASSERT_EQ_INT(call(c, A_ "ReportLogs", &rl.base, &zt__v1__report_logs_reply__descriptor,
                           NULL, NULL, 0),
                      ZT_RPC_OK);
    }
    logs = get_logs(c, id, -1, false);
    lines = 0;
    for (const char *q = logs; *q; q++)
        lines += *q == '\n';
    if (lines > 110 || lines < 100)
        ZT_FAIL("%d log lines kept after the job ended, limit 100", lines);
    ASSERT_CONTAINS(logs, "late 2-149");
    ASSERT_TRUE(!strstr(logs, "late 0-"));
    zt_free(logs);

    /* a GPU agent: slots are its GPUs, device_index the GPU's index */
    Zt__V1__RegisterAgentRequest q = ZT__V1__REGISTER_AGENT_REQUEST__INIT;
    Zt__V1__Gpu gpus[2], *gp[2] = {&gpus[0], &gpus[1]};
    for (int i = 0; i < 2; i++) {
        zt__v1__gpu__init(&gpus[i]);
        gpus[i].index = 4 + i;
        gpus[i].name = "H100";
        gpus[i].memory_total = 80ll << 30;
        gpus[i].memory_free = 79ll << 30;
    }
    q.name = "gpu1";
    q.device = ZT__V1__DEVICE__DEVICE_CUDA;
    q.slots = 2;
    q.n_gpus = 2;
    q.gpus = gp;
    Zt__V1__RegisterAgentReply *rr = NULL;
    ASSERT_EQ_INT(call(c, A_ "RegisterAgent", &q.base, &zt__v1__register_agent_reply__descriptor,
                       (void **)&rr, NULL, 0),
                  ZT_RPC_OK);
    int64_t ginc = rr->incarnation;
    zt_pb_free(rr);
    q.slots = 3; /* disagrees with the GPU list */
    char msg[1024];
    ASSERT_EQ_INT(call(c, A_ "RegisterAgent", &q.base, &zt__v1__register_agent_reply__descriptor,
                       NULL, msg, sizeof(msg)),
                  ZT_RPC_INVALID_ARGUMENT);
    char *text2 =
        zt_asprintf("{\"name\": \"gpu-job\", \"model\": {\"arch\": \"gpt2\", \"n_layer\": 2, "
                    "\"n_head\": 2, \"n_embd\": 32, \"block_size\": 16, \"vocab_size\": 64}, "
                    "\"data\": {\"train\": \"d/*.bin\"}, \"train\": {\"steps\": 10}, "
                    "\"resources\": {\"ranks\": 2, \"device\": \"cuda\"}, \"deepspeed\": "
                    "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 1}}");
    Zt__V1__SubmitJobRequest sq = ZT__V1__SUBMIT_JOB_REQUEST__INIT;
    sq.job_text = text2;
    sq.job_dir = "/tmp";
    ASSERT_EQ_INT(
        call(c, C_ "SubmitJob", &sq.base, &zt__v1__submit_job_reply__descriptor, NULL, NULL, 0),
        ZT_RPC_OK);
    zt_free(text2);
    Zt__V1__HeartbeatReply *x = NULL;
    for (int t = 0; t < 200; t++) {
        zt_pb_free(x);
        x = hb(c, "gpu1", ginc, NULL, 0);
        if (x->n_workers == 2) break;
        zt_sleep_ms(10);
    }
    ASSERT_EQ_INT(x->n_workers, 2);
    ASSERT_EQ_INT(x->workers[0]->device, ZT__V1__DEVICE__DEVICE_CUDA);
    ASSERT_EQ_INT(x->workers[0]->device_index + x->workers[1]->device_index, 9);
    zt_pb_free(x);
    Zt__V1__ListAgentsRequest aq = ZT__V1__LIST_AGENTS_REQUEST__INIT;
    Zt__V1__ListAgentsReply *ar = NULL;
    ASSERT_EQ_INT(call(c, C_ "ListAgents", &aq.base, &zt__v1__list_agents_reply__descriptor,
                       (void **)&ar, NULL, 0),
                  ZT_RPC_OK);
    ASSERT_EQ_INT(ar->n_agents, 2);
    ASSERT_STREQ(ar->agents[1]->name, "gpu1");
    ASSERT_EQ_INT(ar->agents[1]->n_gpus, 2);
    ASSERT_EQ_INT(ar->agents[1]->gpus[1]->index, 5);
    ASSERT_EQ_INT(ar->agents[1]->free_slots, 0);
    zt_pb_free(ar);
    zt_rpc_client_destroy(c);
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    zt_zcoord_cleanup(&p);
    current = NULL;
}

typedef struct stream_end {
    zt_rpc_client *c;
    const char *path;
    const ProtobufCMessage *req;
    const ProtobufCMessageDescriptor *type;
    pthread_t th;
    int messages;
    zt_rpc_code code;
    bool ended;
} stream_end;

static void *stream_main(void *arg)
{
    stream_end *e = arg;
    zt_rpc_stream *s;
    zt_err err = {0};
    ASSERT_OK(zt_rpc_stream_open(e->c, e->path, e->req, 0, &s, &err));
    for (;;) {
        void *m = NULL;
        zt_status st = zt_rpc_stream_next(s, e->type, &m, &e->code, &err);
        if (st != ZT_OK || !m) break;
        e->messages++;
        zt_pb_free(m);
    }
    zt_rpc_stream_close(s);
    e->ended = true;
    return NULL;
}

/* SIGTERM with streams and a long poll open: every call is answered, zcoord exits 0. */
static void test_shutdown_with_streams(void)
{
    zt_zcoord_proc p;
    zt_zcoord_start(&p, NULL);
    current = &p;
    zt_rpc_client *c = client(&p, NULL);
    int64_t inc = register_agent(c, "n1", 2);
    int64_t id = submit(c, "open-streams", 2, 2, 0);
    last_att = 0;
    int64_t att = next_attempt(c, "n1", inc);
    Zt__V1__WatchJobRequest wq = ZT__V1__WATCH_JOB_REQUEST__INIT;
    wq.job_id = id;
    Zt__V1__GetLogsRequest lq = ZT__V1__GET_LOGS_REQUEST__INIT;
    lq.job_id = id;
    lq.follow = true;
    Grpc__Health__V1__HealthCheckRequest hq = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    stream_end ends[3] = {
        {.c = c, .path = C_ "WatchJob", .req = &wq.base, .type = &zt__v1__job_update__descriptor},
        {.c = c, .path = C_ "GetLogs", .req = &lq.base, .type = &zt__v1__log_batch__descriptor},
        {.c = c,
         .path = "/grpc.health.v1.Health/Watch",
         .req = &hq.base,
         .type = &grpc__health__v1__health_check_response__descriptor},
    };
    for (int i = 0; i < 3; i++)
        pthread_create(&ends[i].th, NULL, stream_main, &ends[i]);
    rdzv_call waiter = {.c = c, .attempt = att, .rank = 1, .wait = 2, .wait_ms = 30000};
    pthread_create(&waiter.th, NULL, rdzv_main, &waiter);
    for (int t = 0;
         t < 300 && (ends[0].messages < 1 || ends[1].messages < 1 || ends[2].messages < 1); t++)
        zt_sleep_ms(10);
    CHECK(ends[0].messages >= 1 && ends[1].messages >= 1 && ends[2].messages >= 1);
    zt_sleep_ms(100);
    uint64_t t0 = zt_now_ns();
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    double dt = (double)(zt_now_ns() - t0) * 1e-9;
    if (dt > 1.0) zt_zcoord_dump_log(&p);
    ASSERT_TRUE(dt < 10.0);
    for (int i = 0; i < 3; i++) {
        pthread_join(ends[i].th, NULL);
        ASSERT_TRUE(ends[i].ended);
    }
    pthread_join(waiter.th, NULL);
    ASSERT_NE_INT(ends[0].code, ZT_RPC_OK);
    ASSERT_NE_INT(ends[1].code, ZT_RPC_OK);
    ASSERT_TRUE(waiter.code == ZT_RPC_OK || waiter.code == ZT_RPC_UNAVAILABLE);
    fprintf(stderr, "zcoord stopped in %.2f s with 3 streams and a rendezvous wait open\n", dt);
    zt_rpc_client_destroy(c);
    zt_zcoord_cleanup(&p);
    current = NULL;
}

/* ---- agents that leave, checkpoints that are deleted ------------------------------------------
 */

/* The state of agent name in ListAgents (0 when absent); its worker count in *workers. */
static int agent_state(zt_rpc_client *c, const char *name, int *workers, int *free_slots)
{
    Zt__V1__ListAgentsRequest aq = ZT__V1__LIST_AGENTS_REQUEST__INIT;
    Zt__V1__ListAgentsReply *ar = NULL;
    ASSERT_EQ_INT(call(c, C_ "ListAgents", &aq.base, &zt__v1__list_agents_reply__descriptor,
                       (void **)&ar, NULL, 0),
                  ZT_RPC_OK);
    int st = 0;
    for (size_t i = 0; i < ar->n_agents; i++) {
        if (strcmp(ar->agents[i]->name, name) != 0) continue;
        st = ar->agents[i]->state;
        if (workers) *workers = (int)ar->agents[i]->n_workers;
        if (free_slots) *free_slots = ar->agents[i]->free_slots;
    }
    zt_pb_free(ar);
    return st;
}

/* Milliseconds until agent name is LOST (fails the test after timeout_ms). */
static double wait_lost(zt_rpc_client *c, const char *name, int timeout_ms)
{
    uint64_t t0 = zt_now_ns();
    while (agent_state(c, name, NULL, NULL) != ZT__V1__AGENT_STATE__AGENT_STATE_LOST) {
        if ((double)(zt_now_ns() - t0) * 1e-6 > timeout_ms) {
            if (current) zt_zcoord_dump_log(current);
            ZT_FAIL("agent %s is not LOST %d ms after it left", name, timeout_ms);
        }
        zt_sleep_ms(5);
    }
    return (double)(zt_now_ns() - t0) * 1e-6;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) ZT_FAIL("cannot open %s", path);
    size_t cap = 1 << 20, n;
    char *buf = zt_calloc(1, cap);
    n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* A stopping agent's last heartbeat says it is leaving: LOST at once (not after the heartbeat
 * timeout, 30 s here), its attempt fails with the reason "agent stopped" and the job runs
 * elsewhere; nothing is placed on it until it registers again. */
static void test_agent_leaving(void)
{
    last_att = 0;
    zt_zcoord_proc p;
    const char *args[] = {"--restart-backoff", "50ms", "--heartbeat-timeout", "30s", NULL};
    zt_zcoord_start(&p, args);
    current = &p;
    zt_rpc_client *c = client(&p, NULL);
    char reason[2048];

    /* idle: LOST as soon as the last heartbeat is answered, with an event */
    int64_t i1 = register_agent(c, "idle1", 1);
    zt_pb_free(hb(c, "idle1", i1, NULL, 0));
    ASSERT_EQ_INT(agent_state(c, "idle1", NULL, NULL), ZT__V1__AGENT_STATE__AGENT_STATE_ALIVE);
    uint64_t t0 = zt_now_ns();
    zt_pb_free(heartbeat_ex(c, "idle1", i1, NULL, 0, true, NULL, reason, sizeof(reason)));
    wait_lost(c, "idle1", 1000);
    double ms = (double)(zt_now_ns() - t0) * 1e-6;
    fprintf(stderr, "idle agent LOST %.1f ms after it sent its leaving heartbeat\n", ms);
    int free_slots = -1;
    agent_state(c, "idle1", NULL, &free_slots);
    ASSERT_EQ_INT(free_slots, 0);
    /* nothing is placed on a departed agent */
    int64_t id = submit(c, "leave", 1, 1, 1);
    for (int t = 0; t < 100; t++) {
        job_state(c, id, reason, sizeof(reason));
        if (strstr(reason, "cluster too small")) break;
        zt_sleep_ms(10);
    }
    ASSERT_EQ_INT(job_state(c, id, reason, sizeof(reason)), ZT__V1__JOB_STATE__JOB_STATE_QUEUED);

    /* with a job: the attempt fails at once and restarts on the other agent */
    int64_t w1 = register_agent(c, "w1", 1);
    int64_t att = run_to_running(c, "w1", w1, id);
    wait_state(c, id, ZT__V1__JOB_STATE__JOB_STATE_RUNNING, 2000);
    int64_t w2 = register_agent(c, "w2", 1);
    zt_pb_free(hb(c, "w2", w2, NULL, 0));
    sim s = {id, att, 0, 7, 0, 15, 3, 3}; /* stopped with SIGTERM by its agent */
    t0 = zt_now_ns();
    zt_pb_free(heartbeat_ex(c, "w1", w1, &s, 1, true, NULL, reason, sizeof(reason)));
    wait_lost(c, "w1", 1000);
    ms = (double)(zt_now_ns() - t0) * 1e-6;
    int64_t att2 = next_attempt(c, "w2", w2);
    double placed_ms = (double)(zt_now_ns() - t0) * 1e-6;
    fprintf(stderr,
            "busy agent LOST %.1f ms after leaving; attempt placed elsewhere after %.1f ms\n", ms,
            placed_ms);
    CHECK(att2 > att);
    CHECK(placed_ms < 2000);
    Zt__V1__GetJobReply *g = get_job(c, id);
    ASSERT_EQ_INT(g->n_attempts, 2);
    ASSERT_EQ_INT(g->attempts[0]->state, ZT__V1__ATTEMPT_STATE__ATTEMPT_STATE_FAILED);
    ASSERT_CONTAINS(g->attempts[0]->reason, "agent w1 lost (rank 0 there): agent stopped");
    ASSERT_EQ_INT(g->attempts[0]->ranks[0]->status->exit_signal, 15); /* the exit is kept */
    ASSERT_EQ_INT(g->job->restarts, 1);
    ASSERT_STREQ(g->attempts[1]->ranks[0]->agent, "w2");
    bool rank_event = false;
    for (size_t i = 0; i < g->n_events; i++)
        rank_event |= strcmp(g->events[i]->kind, "rank") == 0 &&
                      strstr(g->events[i]->reason, "signal 15") != NULL;
    ASSERT_TRUE(rank_event);
    zt_pb_free(g);
    int workers = -1;
    agent_state(c, "w1", &workers, NULL);
    ASSERT_EQ_INT(workers, 0);
    char *log = read_text(p.log);
    ASSERT_CONTAINS(log, "agent idle1: ALIVE -> LOST: agent stopped");
    ASSERT_CONTAINS(log, "agent w1: ALIVE -> LOST: agent stopped");
    zt_free(log);

    /* the new attempt completes; w1 comes back with a new incarnation */
    s = (sim){id, att2, 0, 7, 0, 0, 100, 9};
    zt_pb_free(hb(c, "w2", w2, &s, 1));
    wait_state(c, id, ZT__V1__JOB_STATE__JOB_STATE_COMPLETED, 2000);
    ASSERT_EQ_INT(register_agent(c, "w1", 1), w1 + 1);
    ASSERT_EQ_INT(agent_state(c, "w1", NULL, NULL), ZT__V1__AGENT_STATE__AGENT_STATE_ALIVE);
    /* a leaving heartbeat of a stale incarnation changes nothing */
    zt_rpc_code code;
    heartbeat_ex(c, "w1", w1, NULL, 0, true, &code, reason, sizeof(reason));
    ASSERT_EQ_INT(code, ZT_RPC_FAILED_PRECONDITION);
    ASSERT_EQ_INT(agent_state(c, "w1", NULL, NULL), ZT__V1__AGENT_STATE__AGENT_STATE_ALIVE);

    zt_rpc_client_destroy(c);
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    zt_zcoord_cleanup(&p);
    current = NULL;
}

static zt_rpc_code report_removed(zt_rpc_client *c, int64_t attempt, int64_t step, const char *dir,
                                  bool *changed, char *msg, size_t cap)
{
    Zt__V1__ReportCheckpointRemovedRequest q = ZT__V1__REPORT_CHECKPOINT_REMOVED_REQUEST__INIT;
    q.agent = "ck";
    q.attempt_id = attempt;
    q.rank = 0;
    q.step = step;
    q.dir = (char *)dir;
    Zt__V1__ReportCheckpointRemovedReply *r = NULL;
    zt_rpc_code code =
        call(c, A_ "ReportCheckpointRemoved", &q.base,
             &zt__v1__report_checkpoint_removed_reply__descriptor, (void **)&r, msg, cap);
    if (r && changed) *changed = r->changed;
    zt_pb_free(r);
    return code;
}

/* "step:STATE,..." of a job's checkpoints, newest first. */
static void ckpt_states(zt_rpc_client *c, int64_t id, bool all, char *out, size_t cap)
{
    Zt__V1__ListCheckpointsRequest q = ZT__V1__LIST_CHECKPOINTS_REQUEST__INIT;
    q.job_id = id;
    q.include_partial = q.include_deleted = all;
    Zt__V1__ListCheckpointsReply *r = NULL;
    ASSERT_EQ_INT(call(c, C_ "ListCheckpoints", &q.base,
                       &zt__v1__list_checkpoints_reply__descriptor, (void **)&r, NULL, 0),
                  ZT_RPC_OK);
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < r->n_checkpoints && n < cap; i++) {
        const Zt__V1__Checkpoint *k = r->checkpoints[i];
        n += (size_t)snprintf(
            out + n, cap - n, "%s%lld:%s", i ? "," : "", (long long)k->step,
            zt_pb_enum_short_name(&zt__v1__checkpoint_state__descriptor, k->state));
        if (k->state == ZT__V1__CHECKPOINT_STATE__CHECKPOINT_STATE_DELETED)
            CHECK(k->deleted_ms > 0);
    }
    zt_pb_free(r);
}

static void make_ckpt_dir(const char *root, int64_t step, bool meta)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/step_%08lld", root, (long long)step);
    ASSERT_EQ_INT(mkdir(path, 0755), 0);
    if (!meta) return;
    snprintf(path, sizeof(path), "%s/step_%08lld/meta.json", root, (long long)step);
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fputs("{}\n", f);
    fclose(f);
}

/* ReportCheckpointRemoved marks a checkpoint DELETED (listed only on request, never resumed
 * from); a restart also skips committed checkpoints whose directory lost its meta.json or is
 * gone, records why and resumes from the newest complete one. */
/* A zcoord for the checkpoint tests (restart backoff 50 ms), a client of it and root = its
 * directory's ckpt/, made. */
/* root: the checkpoint directory of the job `name` the test submits */
static zt_rpc_client *ckpt_zcoord_start(zt_zcoord_proc *p, const char *name, char *root,
                                        size_t cap)
{
    last_att = 0;
    const char *args[] = {"--restart-backoff", "50ms", NULL};
    zt_zcoord_start(p, args);
    current = p;
    snprintf(ckpt_base, sizeof(ckpt_base), "%.250s/ckpt", p->dir);
    ASSERT_EQ_INT(mkdir(ckpt_base, 0755), 0);
    snprintf(root, cap, "%.200s/%.60s", ckpt_base, name);
    ASSERT_EQ_INT(mkdir(root, 0755), 0);
    return client(p, NULL);
}

static void ckpt_zcoord_stop(zt_zcoord_proc *p, zt_rpc_client *c)
{
    zt_rpc_client_destroy(c);
    ASSERT_EQ_INT(zt_zcoord_stop(p), 0);
    zt_zcoord_cleanup(p);
    current = NULL;
    snprintf(ckpt_base, sizeof(ckpt_base), "/ckpt");
}

static void test_ckpt_removed(void)
{
    zt_zcoord_proc p;
    char root[300], msg[1024], got[512], dir[400];
    zt_rpc_client *c = ckpt_zcoord_start(&p, "prune", root, sizeof(root));
    int64_t inc = register_agent(c, "ck", 1);
    int64_t id = submit(c, "prune", 1, 1, 2);
    int64_t att = run_to_running(c, "ck", inc, id);
    for (int64_t step = 5; step <= 20; step += 5) {
        bool committed = false;
        report_shard_in(c, root, att, 0, step, &committed);
        CHECK(committed);
    }
    make_ckpt_dir(root, 10, true);
    make_ckpt_dir(root, 15, false); /* never completed: no meta.json */
    make_ckpt_dir(root, 20, true);
    ckpt_states(c, id, false, got, sizeof(got));
    ASSERT_STREQ(got, "20:COMMITTED,15:COMMITTED,10:COMMITTED,5:COMMITTED");

    /* keep_checkpoints removed step 5 (its directory never existed here) */
    bool changed = false;
    snprintf(dir, sizeof(dir), "%s/step_%08d", root, 5);
    ASSERT_EQ_INT(report_removed(c, att, 5, dir, &changed, msg, sizeof(msg)), ZT_RPC_OK);
    ASSERT_TRUE(changed);
    ASSERT_EQ_INT(report_removed(c, att, 5, dir, &changed, msg, sizeof(msg)), ZT_RPC_OK);
    ASSERT_TRUE(!changed); /* idempotent */
    ckpt_states(c, id, false, got, sizeof(got));
    ASSERT_STREQ(got, "20:COMMITTED,15:COMMITTED,10:COMMITTED");
    ckpt_states(c, id, true, got, sizeof(got));
    ASSERT_STREQ(got, "20:COMMITTED,15:COMMITTED,10:COMMITTED,5:DELETED");
    Zt__V1__GetJobReply *g = get_job(c, id);
    ASSERT_EQ_INT(g->checkpoints, 3);
    zt_pb_free(g);
    /* a removal it never heard of is kept as DELETED */
    snprintf(dir, sizeof(dir), "%s/step_%08d", root, 25);
    ASSERT_EQ_INT(report_removed(c, att, 25, dir, &changed, msg, sizeof(msg)), ZT_RPC_OK);
    ASSERT_TRUE(changed);
    ckpt_states(c, id, true, got, sizeof(got));
    ASSERT_STREQ(got, "25:DELETED,20:COMMITTED,15:COMMITTED,10:COMMITTED,5:DELETED");
    /* bad input */
    ASSERT_EQ_INT(report_removed(c, att, 5, "relative/step_5", NULL, msg, sizeof(msg)),
                  ZT_RPC_INVALID_ARGUMENT);
    ASSERT_CONTAINS(msg, "absolute path");
    ASSERT_EQ_INT(report_removed(c, 99999, 5, dir, NULL, msg, sizeof(msg)), ZT_RPC_NOT_FOUND);
    ASSERT_EQ_INT(report_removed(c, att, -1, dir, NULL, msg, sizeof(msg)), ZT_RPC_INVALID_ARGUMENT);

    /* step 20's directory disappears behind the coordinator's back; the worker fails: the
     * restart skips 20 (gone) and 15 (no meta.json) and resumes from 10 */
    snprintf(dir, sizeof(dir), "%s/step_%08d/meta.json", root, 20);
    ASSERT_EQ_INT(unlink(dir), 0);
    snprintf(dir, sizeof(dir), "%s/step_%08d", root, 20);
    ASSERT_EQ_INT(rmdir(dir), 0);
    sim s = {id, att, 0, 7, 1, 0, 22, 22};
    zt_pb_free(hb(c, "ck", inc, &s, 1));
    int64_t att2 = next_attempt(c, "ck", inc);
    CHECK(att2 > att);
    g = get_job(c, id);
    ASSERT_EQ_INT(g->n_attempts, 2);
    snprintf(dir, sizeof(dir), "%s/step_%08d", root, 10);
    ASSERT_STREQ(g->attempts[1]->resume_path, dir);
    ASSERT_EQ_INT(g->attempts[1]->resume_step, 10);
    int skipped = 0;
    for (size_t i = 0; i < g->n_events; i++) {
        const Zt__V1__Event *e = g->events[i];
        if (strcmp(e->kind, "checkpoint") != 0 || strcmp(e->to_state, "DELETED") != 0) continue;
        if (strstr(e->reason, "step 20 at") && strstr(e->reason, "not used to resume attempt 2") &&
            strstr(e->reason, "is gone"))
            skipped |= 1;
        if (strstr(e->reason, "step 15 at") && strstr(e->reason, "no meta.json")) skipped |= 2;
        if (strstr(e->reason, "step 5 at") && strstr(e->reason, "keep_checkpoints")) skipped |= 4;
    }
    zt_pb_free(g);
    ASSERT_EQ_INT(skipped, 7);
    ckpt_states(c, id, false, got, sizeof(got));
    ASSERT_STREQ(got, "10:COMMITTED");
    char *logs = get_logs(c, id, -1, false);
    ASSERT_CONTAINS(logs, "COMMITTED -> DELETED: step 20 at");
    zt_free(logs);

    ckpt_zcoord_stop(&p, c);
}

/* A node dies between its worker's commit and its agent's shard report, after rank 0 pruned the
 * older checkpoints: the newest checkpoint is PARTIAL in the store, but complete on disk
 * (meta.json: rank 0 writes it only once every shard is durable). The restart resumes from it
 * and records it COMMITTED, rather than from the pruned one (and then from nothing); a partial
 * checkpoint without meta.json is passed over and left as it is. */
static void test_ckpt_partial_complete(void)
{
    zt_zcoord_proc p;
    char root[300], msg[1024], got[512], dir[400];
    zt_rpc_client *c = ckpt_zcoord_start(&p, "lost", root, sizeof(root));
    int64_t inc = register_agent(c, "ck", 2);
    int64_t id = submit(c, "lost", 2, 2, 2);
    int64_t att = next_attempt(c, "ck", inc);
    sim run[2] = {{id, att, 0, 4, 0, 0, 1, 1}, {id, att, 1, 4, 0, 0, 1, 1}};
    zt_pb_free(hb(c, "ck", inc, run, 2));
    bool committed = false;
    report_shard_in(c, root, att, 0, 10, &committed);
    CHECK(!committed);
    report_shard_in(c, root, att, 1, 10, &committed);
    CHECK(committed);
    report_shard_in(c, root, att, 1, 20, &committed); /* rank 0's report is lost */
    CHECK(!committed);
    report_shard_in(c, root, att, 1, 30, &committed); /* a save that never completed */
    CHECK(!committed);
    make_ckpt_dir(root, 20, true);
    make_ckpt_dir(root, 30, false);
    /* keep_checkpoints 1: rank 0 pruned step 10 once step 20 committed */
    snprintf(dir, sizeof(dir), "%s/step_%08d", root, 10);
    ASSERT_EQ_INT(report_removed(c, att, 10, dir, NULL, msg, sizeof(msg)), ZT_RPC_OK);
    ckpt_states(c, id, true, got, sizeof(got));
    ASSERT_STREQ(got, "30:PARTIAL,20:PARTIAL,10:DELETED");

    sim fail[2] = {{id, att, 0, 7, 1, 0, 32, 32}, {id, att, 1, 7, 1, 0, 32, 32}};
    zt_pb_free(hb(c, "ck", inc, fail, 2));
    int64_t att2 = next_attempt(c, "ck", inc);
    CHECK(att2 > att);
    Zt__V1__GetJobReply *g = get_job(c, id);
    ASSERT_EQ_INT(g->n_attempts, 2);
    snprintf(dir, sizeof(dir), "%s/step_%08d", root, 20);
    ASSERT_STREQ(g->attempts[1]->resume_path, dir);
    ASSERT_EQ_INT(g->attempts[1]->resume_step, 20);
    bool event = false;
    for (size_t i = 0; i < g->n_events; i++) {
        const Zt__V1__Event *e = g->events[i];
        if (strcmp(e->kind, "checkpoint") == 0 && strcmp(e->from_state, "PARTIAL") == 0 &&
            strcmp(e->to_state, "COMMITTED") == 0 && strstr(e->reason, "step 20 at") &&
            strstr(e->reason, "1 of 2 shard reports") && strstr(e->reason, "meta.json") &&
            strstr(e->reason, "resume attempt 2"))
            event = true;
    }
    zt_pb_free(g);
    ASSERT_TRUE(event);
    ckpt_states(c, id, true, got, sizeof(got));
    ASSERT_STREQ(got, "30:PARTIAL,20:COMMITTED,10:DELETED");
    ckpt_zcoord_stop(&p, c);
}

/* ---- UTF-8, resource limits, races at the end of a job, backoff across restarts ------------- */

/* Protobuf strings must be UTF-8: a request with other bytes in any string field is refused
 * with a message naming the field (nothing stored, so later reads stay decodable); log text
 * is cleaned instead (worker output is kept), and long lines are cut on a character
 * boundary. Over-long informational strings are refused. */
static void test_utf8_input(void)
{
    zt_zcoord_proc p;
    zt_zcoord_start(&p, NULL);
    current = &p;
    zt_rpc_client *c = client(&p, NULL);
    char *valid = job_text("utf8", 1, 1, 0, 10);

    Zt__V1__SubmitJobRequest sq = ZT__V1__SUBMIT_JOB_REQUEST__INIT;
    sq.job_text = valid;
    sq.job_dir = "/tmp";
    sq.user = "\xff"
              "bad";
    expect(c, C_ "SubmitJob", &sq.base, ZT_RPC_INVALID_ARGUMENT,
           "user is not valid UTF-8 at byte 0");
    sq.user = "ok";
    sq.job_dir = "/tmp/caf\xc3";
    expect(c, C_ "SubmitJob", &sq.base, ZT_RPC_INVALID_ARGUMENT, "job_dir is not valid UTF-8");
    sq.job_dir = "/tmp";
    sq.job_path = "\xed\xa0\x80.json"; /* a UTF-16 surrogate */
    expect(c, C_ "SubmitJob", &sq.base, ZT_RPC_INVALID_ARGUMENT, "job_path is not valid UTF-8");
    sq.job_path = "job.json";
    char *bad_text =
        zt_asprintf("{\"name\": \"x\",\n  \"train\": {\"steps\": 1, \"x\": \"\xc0\xaf\"}}");
    sq.job_text = bad_text;
    expect(c, C_ "SubmitJob", &sq.base, ZT_RPC_INVALID_ARGUMENT,
           "job_text is not valid UTF-8 at line 2, column 31");
    zt_free(bad_text);
    sq.job_text = valid;
    char longuser[300];
    memset(longuser, 'u', sizeof(longuser) - 1);
    longuser[sizeof(longuser) - 1] = '\0';
    sq.user = longuser;
    expect(c, C_ "SubmitJob", &sq.base, ZT_RPC_INVALID_ARGUMENT, "user is longer than 256 bytes");
    sq.user = "\xc3\xa9lodie"; /* valid UTF-8 is kept as it is */
    Zt__V1__SubmitJobReply *sr = NULL;
    ASSERT_EQ_INT(call(c, C_ "SubmitJob", &sq.base, &zt__v1__submit_job_reply__descriptor,
                       (void **)&sr, NULL, 0),
                  ZT_RPC_OK);
    int64_t id = sr->job_id;
    zt_pb_free(sr);
    Zt__V1__GetJobReply *g = get_job(c, id);
    ASSERT_STREQ(g->job->user, "\xc3\xa9lodie");
    zt_pb_free(g);
    Zt__V1__CancelJobRequest cq = ZT__V1__CANCEL_JOB_REQUEST__INIT;
    cq.job_id = id;
    cq.reason = "no \xff";
    expect(c, C_ "CancelJob", &cq.base, ZT_RPC_INVALID_ARGUMENT, "reason is not valid UTF-8");
    cq.reason = "caf\xc3\xa9 closed";
    Zt__V1__CancelJobReply *cr = NULL;
    ASSERT_EQ_INT(call(c, C_ "CancelJob", &cq.base, &zt__v1__cancel_job_reply__descriptor,
                       (void **)&cr, NULL, 0),
                  ZT_RPC_OK);
    ASSERT_CONTAINS(cr->job->reason, "canceled: caf\xc3\xa9 closed");
    zt_pb_free(cr);

    /* agents: every string field, nested ones named with their index */
    Zt__V1__RegisterAgentRequest rq = ZT__V1__REGISTER_AGENT_REQUEST__INIT;
    Zt__V1__Gpu gpus[2], *gp[2] = {&gpus[0], &gpus[1]};
    for (int i = 0; i < 2; i++) {
        zt__v1__gpu__init(&gpus[i]);
        gpus[i].index = i;
        gpus[i].name = "H100";
    }
    rq.name = "u1";
    rq.device = ZT__V1__DEVICE__DEVICE_CUDA;
    rq.slots = 2;
    rq.n_gpus = 2;
    rq.gpus = gp;
    rq.hostname = "h\x80st";
    expect(c, A_ "RegisterAgent", &rq.base, ZT_RPC_INVALID_ARGUMENT, "hostname is not valid UTF-8");
    rq.hostname = "host";
    rq.address = "10.0.0.1\xfe";
    expect(c, A_ "RegisterAgent", &rq.base, ZT_RPC_INVALID_ARGUMENT, "address is not valid UTF-8");
    rq.address = "10.0.0.1";
    rq.version = "1.0\xf5";
    expect(c, A_ "RegisterAgent", &rq.base, ZT_RPC_INVALID_ARGUMENT, "version is not valid UTF-8");
    rq.version = "1.0";
    gpus[1].name = "H1\xe2\x82";
    expect(c, A_ "RegisterAgent", &rq.base, ZT_RPC_INVALID_ARGUMENT,
           "gpus[1].name is not valid UTF-8 at byte 2");
    gpus[1].name = "H100";
    char longhost[300];
    memset(longhost, 'h', sizeof(longhost) - 1);
    longhost[sizeof(longhost) - 1] = '\0';
    rq.hostname = longhost;
    expect(c, A_ "RegisterAgent", &rq.base, ZT_RPC_INVALID_ARGUMENT, "longer than 255 bytes");
    rq.hostname = "host";
    register_agent(c, "u1", 1); /* agent calls are checked once their key is known */
    Zt__V1__HeartbeatRequest hq = ZT__V1__HEARTBEAT_REQUEST__INIT;
    hq.name = "u1";
    hq.n_gpus = 2;
    hq.gpus = gp;
    gpus[0].name = "\xc1\xbf";
    expect(c, A_ "Heartbeat", &hq.base, ZT_RPC_INVALID_ARGUMENT, "gpus[0].name is not valid UTF-8");
    gpus[0].name = "H100";
    Zt__V1__ReportCheckpointRequest kq = ZT__V1__REPORT_CHECKPOINT_REQUEST__INIT;
    kq.attempt_id = 1;
    kq.dir = "/ckpt/\xff";
    kq.file = "rank_00000.zts";
    expect(c, A_ "ReportCheckpoint", &kq.base, ZT_RPC_INVALID_ARGUMENT, "dir is not valid UTF-8");
    Grpc__Health__V1__HealthCheckRequest h = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    h.service = "zt\xff";
    expect(c, "/grpc.health.v1.Health/Check", &h.base, ZT_RPC_INVALID_ARGUMENT,
           "service is not valid UTF-8");

    /* log lines: cleaned and kept; a long line is cut before a character, never inside */
    int64_t inc = register_agent(c, "u1", 1);
    int64_t id2 = submit(c, "logs", 1, 1, 0);
    last_att = 0;
    int64_t att = run_to_running(c, "u1", inc, id2);
    Zt__V1__ReportLogsRequest rl = ZT__V1__REPORT_LOGS_REQUEST__INIT;
    Zt__V1__LogEntry le[2], *lp[2] = {&le[0], &le[1]};
    char *longline = zt_malloc(9000);
    memset(longline, 'x', 8191);
    memcpy(longline + 8191, "\xe2\x82\xac tail", 9); /* the euro sign spans bytes 8191-8193 */
    for (int i = 0; i < 2; i++) {
        zt__v1__log_entry__init(&le[i]);
        le[i].attempt_id = att;
        le[i].source = ZT__V1__LOG_SOURCE__LOG_SOURCE_STDOUT;
    }
    le[0].text = "\xff"
                 "bad \xc3\xa9 \xe2\x82 end";
    le[1].text = longline;
    rl.n_entries = 2;
    rl.entries = lp;
    Zt__V1__ReportLogsReply *lr = NULL;
    ASSERT_EQ_INT(call(c, A_ "ReportLogs", &rl.base, &zt__v1__report_logs_reply__descriptor,
                       (void **)&lr, NULL, 0),
                  ZT_RPC_OK);
    ASSERT_EQ_INT(lr->accepted, 2);
    zt_pb_free(lr);
    zt_free(longline);
    char *logs = get_logs(c, id2, 0, false);
    ASSERT_CONTAINS(logs, "0|?bad \xc3\xa9 ?? end\n");
    const char *cut = strstr(logs, "0|xxxx");
    CHECK(cut != NULL);
    const char *eol = strchr(cut, '\n');
    ASSERT_EQ_INT(eol - cut - 2, 8191); /* the x's, without the split euro sign */
    ASSERT_TRUE(zt_utf8_valid(logs, strlen(logs), NULL));
    zt_free(logs);
    zt_free(valid);
    zt_rpc_client_destroy(c);
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    zt_zcoord_cleanup(&p);
    current = NULL;
}

/* Opens WatchJob streams on one job again and again, each with a short deadline, until one
 * brings the final update: so some are opened right as the job ends. Counts the streams that
 * ended OK without a final update (never allowed). */
typedef struct churn {
    zt_rpc_client *c;
    int64_t id;
    pthread_t th;
    int streams, finals, final_state, bad;
} churn;

static void *churn_main(void *arg)
{
    churn *w = arg;
    uint64_t t0 = zt_now_ns();
    while (!w->finals && (double)(zt_now_ns() - t0) * 1e-9 < 30.0) {
        Zt__V1__WatchJobRequest q = ZT__V1__WATCH_JOB_REQUEST__INIT;
        q.job_id = w->id;
        zt_rpc_stream *s;
        zt_err err = {0};
        if (zt_rpc_stream_open(w->c, C_ "WatchJob", &q.base, 40, &s, &err) != ZT_OK) continue;
        bool final = false;
        zt_rpc_code code = ZT_RPC_OK;
        for (;;) {
            Zt__V1__JobUpdate *u = NULL;
            zt_status st =
                zt_rpc_stream_next(s, &zt__v1__job_update__descriptor, (void **)&u, &code, &err);
            if (st != ZT_OK) break;
            if (!u) {
                code = ZT_RPC_OK;
                break;
            }
            if (u->final) {
                final = true;
                w->final_state = u->job->state;
            }
            zt_pb_free(u);
        }
        zt_rpc_stream_close(s);
        w->streams++;
        if (final)
            w->finals++;
        else if (code == ZT_RPC_OK)
            w->bad++;
    }
    return NULL;
}

/* Every WatchJob stream of a job that ends closes with a final update, also one that starts
 * while the end is being committed (the job is done in memory, the store does not show it
 * yet): the stream attaches to the live job and gets the final update after the commit. The
 * coordinator's test hook holds each commit back (ZT_TEST_COMMIT_DELAY_MS) so that a watch
 * started right after the last heartbeat lands in that window. Streams opened and cancelled
 * meanwhile exercise the watcher's registration (a reference is held across it: run it under
 * ASan too). */
static void test_watch_at_end(void)
{
    last_att = 0;
    zt_zcoord_proc p;
    setenv("ZT_TEST_COMMIT_DELAY_MS", "250", 1);
    zt_zcoord_start(&p, NULL);
    unsetenv("ZT_TEST_COMMIT_DELAY_MS");
    current = &p;
    zt_rpc_client *c = client(&p, NULL);
    int64_t inc = register_agent(c, "w", 1);
    enum { ROUNDS = 3, CHURNERS = 6 };
    int streams = 0;
    for (int round = 0; round < ROUNDS; round++) {
        int64_t id = submit(c, "ending", 1, 1, 0);
        int64_t att = run_to_running(c, "w", inc, id);
        wait_state(c, id, ZT__V1__JOB_STATE__JOB_STATE_RUNNING, 5000);
        churn ch[CHURNERS];
        for (int i = 0; i < CHURNERS; i++) {
            ch[i] = (churn){.c = c, .id = id};
            pthread_create(&ch[i].th, NULL, churn_main, &ch[i]);
        }
        zt_sleep_ms(30);
        sim s = {id, att, 0, 7, 0, 0, 100, 1}; /* exits 0: COMPLETED */
        zt_pb_free(hb(c, "w", inc, &s, 1));
        /* the end is decided now and committed 250 ms later: watch in between */
        zt_sleep_ms(60);
        watch late = {.c = c, .id = id};
        watch_main(&late);
        CHECK(late.got_final);
        ASSERT_EQ_INT(late.final_state, ZT__V1__JOB_STATE__JOB_STATE_COMPLETED);
        ASSERT_EQ_INT(late.end_code, ZT_RPC_OK);
        for (int i = 0; i < CHURNERS; i++) {
            pthread_join(ch[i].th, NULL);
            streams += ch[i].streams;
            if (ch[i].bad)
                ZT_FAIL("round %d: %d WatchJob stream(s) ended OK without a final update", round,
                        ch[i].bad);
            CHECK(ch[i].finals == 1);
            ASSERT_EQ_INT(ch[i].final_state, ZT__V1__JOB_STATE__JOB_STATE_COMPLETED);
        }
        zt_pb_free(hb(c, "w", inc, NULL, 0));
    }
    fprintf(
        stderr,
        "%d WatchJob streams around %d job ends: each ended with a final update or a deadline\n",
        streams, ROUNDS);
    zt_rpc_client_destroy(c);
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    zt_zcoord_cleanup(&p);
    current = NULL;
}

/* A watch stream that stays open until told to go: it reports its first message (the watch
 * is registered by then) and cancels the call when released. */
typedef struct holder {
    zt_rpc_client *c;
    const char *path;
    const ProtobufCMessage *req;
    const ProtobufCMessageDescriptor *type;
    pthread_t th;
    atomic_int got_first, release, ended;
    zt_rpc_code code;
    char msg[ZT_ERRMSG_MAX];
} holder;

static void *holder_main(void *arg)
{
    holder *h = arg;
    zt_rpc_stream *s;
    zt_err err = {0};
    ASSERT_OK(zt_rpc_stream_open(h->c, h->path, h->req, 30000, &s, &err));
    void *m = NULL;
    zt_status st = zt_rpc_stream_next(s, h->type, &m, &h->code, &err);
    if (st == ZT_OK && m) {
        zt_pb_free(m);
        atomic_store(&h->got_first, 1);
        while (!atomic_load(&h->release))
            zt_sleep_ms(5);
    } else {
        snprintf(h->msg, sizeof(h->msg), "%s", err.msg);
    }
    zt_rpc_stream_close(s);
    atomic_store(&h->ended, 1);
    return NULL;
}

/* Starts a holder and waits until it is registered or refused; returns the refusal's code. */
static zt_rpc_code hold(holder *h)
{
    pthread_create(&h->th, NULL, holder_main, h);
    for (int t = 0; t < 1000 && !atomic_load(&h->got_first) && !atomic_load(&h->ended); t++)
        zt_sleep_ms(10);
    CHECK(atomic_load(&h->got_first) || atomic_load(&h->ended));
    return atomic_load(&h->got_first) ? ZT_RPC_OK : h->code;
}

static void unhold(holder *h)
{
    atomic_store(&h->release, 1);
    pthread_join(h->th, NULL);
}

/* WatchJob and Health.Watch streams, and Rendezvous calls waiting, are bounded per job and in
 * total (RESOURCE_EXHAUSTED with what to do); a stream that ends frees its place. */
static void test_stream_limits(void)
{
    last_att = 0;
    zt_zcoord_proc p;
    const char *args[] = {"--max-watchers",
                          "3",
                          "--max-watchers-per-job",
                          "2",
                          "--max-rdzv-waiters",
                          "3",
                          "--max-rdzv-waiters-per-rank",
                          "1",
                          NULL};
    zt_zcoord_start(&p, args);
    current = &p;
    zt_rpc_client *c = client(&p, NULL);
    int64_t inc = register_agent(c, "big", 4);
    int64_t ja = submit(c, "a", 2, 2, 0);
    int64_t jc = submit(c, "c", 2, 2, 0);
    int64_t atts[2] = {0, 0};
    for (int t = 0; t < 300 && (!atts[0] || !atts[1]); t++) {
        Zt__V1__HeartbeatReply *x = hb(c, "big", inc, NULL, 0);
        for (size_t i = 0; i < x->n_workers; i++)
            atts[x->workers[i]->job_id == ja ? 0 : 1] = x->workers[i]->attempt_id;
        zt_pb_free(x);
        zt_sleep_ms(10);
    }
    CHECK(atts[0] && atts[1]);

    /* watchers: two on job a fill its share, a third is refused; the total is 3 */
    Zt__V1__WatchJobRequest wa = ZT__V1__WATCH_JOB_REQUEST__INIT,
                            wc = ZT__V1__WATCH_JOB_REQUEST__INIT;
    wa.job_id = ja;
    wc.job_id = jc;
    Grpc__Health__V1__HealthCheckRequest hq = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    holder h[6];
    for (int i = 0; i < 6; i++)
        h[i] = (holder){.c = c,
                        .path = C_ "WatchJob",
                        .req = &wa.base,
                        .type = &zt__v1__job_update__descriptor};
    h[3].req = h[5].req = &wc.base;
    h[4].path = "/grpc.health.v1.Health/Watch";
    h[4].req = &hq.base;
    h[4].type = &grpc__health__v1__health_check_response__descriptor;
    ASSERT_EQ_INT(hold(&h[0]), ZT_RPC_OK);
    ASSERT_EQ_INT(hold(&h[1]), ZT_RPC_OK);
    ASSERT_EQ_INT(hold(&h[2]), ZT_RPC_RESOURCE_EXHAUSTED);
    ASSERT_CONTAINS(h[2].msg, "has 2 watch streams open already");
    ASSERT_CONTAINS(h[2].msg, "--max-watchers-per-job");
    pthread_join(h[2].th, NULL);
    ASSERT_EQ_INT(hold(&h[3]), ZT_RPC_OK); /* job c: the third in all */
    ASSERT_EQ_INT(hold(&h[4]), ZT_RPC_RESOURCE_EXHAUSTED);
    ASSERT_CONTAINS(h[4].msg, "too many watch streams open on this coordinator (3");
    pthread_join(h[4].th, NULL);
    /* a watcher that goes frees its place: job a takes a new one */
    unhold(&h[0]);
    zt_rpc_code code = ZT_RPC_RESOURCE_EXHAUSTED;
    for (int t = 0; t < 200 && code != ZT_RPC_OK; t++) {
        h[5] = (holder){.c = c,
                        .path = C_ "WatchJob",
                        .req = &wa.base,
                        .type = &zt__v1__job_update__descriptor};
        code = hold(&h[5]);
        if (code != ZT_RPC_OK) {
            pthread_join(h[5].th, NULL);
            zt_sleep_ms(20);
        }
    }
    ASSERT_EQ_INT(code, ZT_RPC_OK);
    unhold(&h[1]);
    unhold(&h[3]);
    unhold(&h[5]);

    /* rendezvous: rank 1 of attempt a waits for rank 0, twice (a retry); a third call is over
     * a's share (1 per rank); then attempt c's second waiter is over the total of 3 */
    rdzv_call r[5];
    for (int i = 0; i < 5; i++)
        r[i] = (rdzv_call){
            .c = c, .attempt = i < 3 ? atts[0] : atts[1], .rank = 1, .wait = 1, .wait_ms = 8000};
    for (int i = 0; i < 3; i++)
        pthread_create(&r[i].th, NULL, rdzv_main, &r[i]);
    /* one of the three is refused at once, once the other two wait */
    int refused = -1;
    for (int t = 0; t < 500 && refused < 0; t++) {
        for (int i = 0; i < 3; i++)
            if (r[i].code == ZT_RPC_RESOURCE_EXHAUSTED) refused = i;
        zt_sleep_ms(10);
    }
    CHECK(refused >= 0);
    ASSERT_CONTAINS(r[refused].msg, "rendezvous calls waiting already (1 per rank");
    pthread_create(&r[3].th, NULL, rdzv_main, &r[3]);
    pthread_create(&r[4].th, NULL, rdzv_main, &r[4]);
    int refused2 = -1;
    for (int t = 0; t < 500 && refused2 < 0; t++) {
        for (int i = 3; i < 5; i++)
            if (r[i].code == ZT_RPC_RESOURCE_EXHAUSTED) refused2 = i;
        zt_sleep_ms(10);
    }
    CHECK(refused2 >= 0);
    ASSERT_CONTAINS(r[refused2].msg, "too many rendezvous calls waiting on this coordinator (3");
    /* rank 0 publishes on both attempts: the waiters complete and leave */
    for (int k = 0; k < 2; k++) {
        rdzv_call pub = {.c = c, .attempt = atts[k], .rank = 0, .value = "tcp://127.0.0.1:1"};
        rdzv_main(&pub);
        ASSERT_EQ_INT(pub.code, ZT_RPC_OK);
    }
    for (int i = 0; i < 5; i++) {
        pthread_join(r[i].th, NULL);
        if (i == refused || i == refused2) continue;
        if (r[i].code != ZT_RPC_OK || !r[i].complete)
            ZT_FAIL("rendezvous %d: %s %s", i, zt_rpc_code_name(r[i].code), r[i].msg);
    }
    /* the places are free again: three waiters fit (each returns incomplete after 200 ms) */
    for (int i = 0; i < 3; i++) {
        r[i] =
            (rdzv_call){.c = c, .attempt = atts[i % 2], .rank = i / 2, .wait = 2, .wait_ms = 200};
        pthread_create(&r[i].th, NULL, rdzv_main, &r[i]);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(r[i].th, NULL);
        if (r[i].code != ZT_RPC_OK)
            ZT_FAIL("rendezvous %d after the others left: %s %s", i, zt_rpc_code_name(r[i].code),
                    r[i].msg);
    }
    zt_rpc_client_destroy(c);
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    zt_zcoord_cleanup(&p);
    current = NULL;
}

/* Waits until a restarted zcoord answers on c's channel. */
static void wait_ping(zt_rpc_client *c)
{
    Zt__V1__PingRequest pq = ZT__V1__PING_REQUEST__INIT;
    zt_rpc_code pc = ZT_RPC_UNAVAILABLE;
    for (int t = 0; t < 200 && pc != ZT_RPC_OK; t++) {
        pc = call(c, C_ "Ping", &pq.base, &zt__v1__ping_reply__descriptor, NULL, NULL, 0);
        if (pc != ZT_RPC_OK) zt_sleep_ms(50);
    }
    ASSERT_EQ_INT(pc, ZT_RPC_OK);
}

/* A job waiting out its restart backoff is not placed as soon as the coordinator restarts:
 * the backoff's end is stored with the job (schema 4). A restart under a shorter
 * --restart-backoff-max shortens what is left to it. */
static void test_backoff_restart(void)
{
    last_att = 0;
    zt_zcoord_proc p;
    const char *args[] = {"--restart-backoff", "60s", "--heartbeat-timeout", "30s", NULL};
    zt_zcoord_start(&p, args);
    current = &p;
    zt_rpc_client *c = client(&p, NULL);
    int64_t inc = register_agent(c, "b", 1);
    int64_t id = submit(c, "backoff", 1, 1, 2);
    run_to_exit(c, "b", inc, id, 1, 0); /* retryable: QUEUED for 60 s */
    wait_state(c, id, ZT__V1__JOB_STATE__JOB_STATE_QUEUED, 5000);
    zt_pb_free(hb(c, "b", inc, NULL, 0));
    char reason[2048];
    for (int t = 0; t < 200; t++) {
        job_state(c, id, reason, sizeof(reason));
        if (strstr(reason, "restart backoff")) break;
        zt_sleep_ms(10);
    }
    ASSERT_CONTAINS(reason, "restart 1 of 2 in 60.0 s");
    ASSERT_CONTAINS(reason, "restart backoff: attempt 2 may start in");

    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    zt_zcoord_restart(&p, args);
    wait_ping(c);
    /* the agent heartbeats for a second: nothing to run, the job still waits */
    for (int t = 0; t < 20; t++) {
        Zt__V1__HeartbeatReply *x = hb(c, "b", inc, NULL, 0);
        int n;
        if (desired_attempt(x, &n)) ZT_FAIL("the job was placed right after the restart");
        zt_pb_free(x);
        zt_sleep_ms(50);
    }
    ASSERT_EQ_INT(job_state(c, id, reason, sizeof(reason)), ZT__V1__JOB_STATE__JOB_STATE_QUEUED);
    ASSERT_CONTAINS(reason, "restart backoff: attempt 2 may start in");

    /* at most --restart-backoff-max is left after a restart */
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    const char *args2[] = {"--restart-backoff",
                           "60s",
                           "--restart-backoff-max",
                           "100ms",
                           "--heartbeat-timeout",
                           "30s",
                           NULL};
    zt_zcoord_restart(&p, args2);
    wait_ping(c);
    int64_t att2 = next_attempt(c, "b", inc);
    CHECK(att2 > 0);
    Zt__V1__GetJobReply *g = get_job(c, id);
    ASSERT_EQ_INT(g->job->restarts, 1);
    ASSERT_EQ_INT(g->n_attempts, 2);
    zt_pb_free(g);
    zt_rpc_client_destroy(c);
    ASSERT_EQ_INT(zt_zcoord_stop(&p), 0);
    zt_zcoord_cleanup(&p);
    current = NULL;
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    alarm(240);
#define RUN(t)                                                                                     \
    do {                                                                                           \
        if (!only || strcmp(only, #t) == 0) {                                                      \
            fprintf(stderr, "-- %s\n", #t);                                                        \
            t();                                                                                   \
        }                                                                                          \
    } while (0)
    RUN(test_bad_input);
    RUN(test_auth);
    RUN(test_lifecycle);
    RUN(test_restart_policy);
    RUN(test_lost_hang_vanish);
    RUN(test_stale_worker_slot);
    RUN(test_persistence);
    RUN(test_shutdown_with_streams);
    RUN(test_limits_and_gpus);
    RUN(test_agent_leaving);
    RUN(test_ckpt_removed);
    RUN(test_ckpt_partial_complete);
    RUN(test_utf8_input);
    RUN(test_watch_at_end);
    RUN(test_stream_limits);
    RUN(test_backoff_restart);
    printf("test_zcoord: ok\n");
    return 0;
}
