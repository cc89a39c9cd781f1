/* Tests proto/rpc_*.c: a real zt_rpc server and client in one process over loopback —
 * unary and streaming calls, deadlines and cancellation, bearer-token auth, unknown
 * methods, undecodable and oversized payloads, asynchronous calls from several threads,
 * TLS (when openssl is installed), and shutdown with streams still open. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/timeutil.h"
#include "proto/pbjson.h"
#include "proto/rpc.h"
#include "proto/zerotrain.pb-c.h"
#include "tests/test.h"

#define P_PING "/zt.v1.Coordinator/Ping"
#define P_SUBMIT "/zt.v1.Coordinator/SubmitJob"
#define P_GET "/zt.v1.Coordinator/GetJob"
#define P_WATCH "/zt.v1.Coordinator/WatchJob"

static atomic_int cancels_seen;
static zt_rpc_call *held_stream; /* WatchJob id 3: kept open until shutdown */
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;

static void h_ping(zt_rpc_call *call, const ProtobufCMessage *req, void *user)
{
    (void)req;
    (void)user;
    Zt__V1__PingReply r = ZT__V1__PING_REPLY__INIT;
    r.time_ms = 42;
    r.version = "test";
    zt_rpc_reply(call, &r.base);
}

static void h_submit(zt_rpc_call *call, const ProtobufCMessage *req, void *user)
{
    (void)user;
    const Zt__V1__SubmitJobRequest *q = (const void *)req;
    char auth[256] = "";
    zt_rpc_call_metadata(call, "authorization", auth, sizeof(auth));
    Zt__V1__SubmitJobReply r = ZT__V1__SUBMIT_JOB_REPLY__INIT;
    r.job_id = (int64_t)strlen(q->job_text);
    r.name = q->job_text;
    zt_rpc_reply(call, &r.base);
}

static void on_get_cancel(zt_rpc_call *call, void *arg)
{
    (void)arg;
    atomic_fetch_add(&cancels_seen, 1);
    zt_rpc_fail(call, ZT_RPC_CANCELLED, "cancelled");
}

/* Never answers on its own: the client's deadline ends it. */
static void h_get(zt_rpc_call *call, const ProtobufCMessage *req, void *user)
{
    (void)req;
    (void)user;
    zt_rpc_call_on_cancel(call, on_get_cancel, NULL);
}

static void on_held_cancel(zt_rpc_call *call, void *arg)
{
    (void)arg;
    atomic_fetch_add(&cancels_seen, 1);
    pthread_mutex_lock(&held_mu);
    if (held_stream == call) {
        held_stream = NULL;
        pthread_mutex_unlock(&held_mu);
        zt_rpc_stream_finish(call, ZT_RPC_CANCELLED, "server going away");
        return;
    }
    pthread_mutex_unlock(&held_mu);
}

static void h_watch(zt_rpc_call *call, const ProtobufCMessage *req, void *user)
{
    (void)user;
    const Zt__V1__WatchJobRequest *q = (const void *)req;
    if (q->job_id == 2) {
        zt_rpc_fail(call, ZT_RPC_NOT_FOUND, "job 2 not found");
        return;
    }
    Zt__V1__JobUpdate u = ZT__V1__JOB_UPDATE__INIT;
    Zt__V1__Job j = ZT__V1__JOB__INIT;
    u.job = &j;
    j.id = q->job_id;
    int n = q->job_id == 1 ? 200 : 1;
    for (int i = 1; i <= n; i++) {
        j.step = i;
        u.final = i == n && q->job_id == 1;
        zt_status st;
        /* the queue is bounded: a sender that outruns the network waits a little */
        while ((st = zt_rpc_stream_send(call, &u.base)) == ZT_ERR_NOSPACE)
            zt_sleep_ms(1);
        ASSERT_EQ_INT(st, ZT_OK);
    }
    if (q->job_id == 3) {
        pthread_mutex_lock(&held_mu);
        held_stream = call;
        pthread_mutex_unlock(&held_mu);
        zt_rpc_call_on_cancel(call, on_held_cancel, NULL);
        return;
    }
    zt_rpc_stream_finish(call, ZT_RPC_OK, NULL);
}

static const zt_rpc_method methods[] = {
    {P_PING, &zt__v1__ping_request__descriptor, false, h_ping, NULL, 0, NULL, NULL, ZT_RPC_ACCESS_USER},
    {P_SUBMIT, &zt__v1__submit_job_request__descriptor, false, h_submit, NULL, 0, NULL, NULL, ZT_RPC_ACCESS_USER},
    {P_GET, &zt__v1__get_job_request__descriptor, false, h_get, NULL, 0, NULL, NULL, ZT_RPC_ACCESS_USER},
    {P_WATCH, &zt__v1__watch_job_request__descriptor, true, h_watch, NULL, 0, NULL, NULL, ZT_RPC_ACCESS_USER},
};

static zt_rpc_server *start_server(const char *token, const char *cert, const char *key, int *port)
{
    zt_rpc_server_config cfg = {.addr = "127.0.0.1:0",
                                .token = token,
                                .tls_cert_pem = cert,
                                .tls_key_pem = key,
                                .max_message_bytes = 64 * 1024,
                                .pollers = 2,
                                .stream_queue_max = 8};
    zt_rpc_server *s;
    zt_err err = {0};
    zt_status st =
        zt_rpc_server_create(&s, &cfg, methods, sizeof(methods) / sizeof(methods[0]), &err);
    if (st != ZT_OK) ZT_FAIL("server: %s", zt_err_msg(&err));
    *port = zt_rpc_server_port(s);
    ASSERT_TRUE(*port > 0);
    return s;
}

static zt_rpc_client *client_for(int port, const char *token, const char *ca)
{
    char target[64];
    snprintf(target, sizeof(target), "127.0.0.1:%d", port);
    zt_rpc_client_config cfg = {.target = target, .token = token, .tls_ca_pem = ca};
    zt_rpc_client *c;
    zt_err err = {0};
    ASSERT_OK(zt_rpc_client_create(&c, &cfg, &err));
    return c;
}

static zt_rpc_code ping(zt_rpc_client *c, char *msg, size_t cap)
{
    Zt__V1__PingRequest q = ZT__V1__PING_REQUEST__INIT;
    Zt__V1__PingReply *r = NULL;
    zt_rpc_code code;
    zt_err err = {0};
    zt_rpc_unary(c, P_PING, &q.base, &zt__v1__ping_reply__descriptor, (void **)&r, 5000, &code,
                 &err);
    if (code == ZT_RPC_OK) {
        ASSERT_TRUE(r != NULL);
        ASSERT_EQ_INT(r->time_ms, 42);
        ASSERT_STREQ(r->version, "test");
    }
    if (msg) snprintf(msg, cap, "%.400s", err.msg);
    zt_pb_free(r);
    return code;
}

static void test_unary_and_errors(void)
{
    int port;
    zt_rpc_server *s = start_server(NULL, NULL, NULL, &port);
    zt_rpc_client *c = client_for(port, NULL, NULL);
    ASSERT_EQ_INT(ping(c, NULL, 0), ZT_RPC_OK);

    /* payload echoed back; a message near the limit passes, one over it is refused */
    char *big = zt_malloc(100 * 1024 + 1);
    memset(big, 'x', 100 * 1024);
    big[100 * 1024] = '\0';
    Zt__V1__SubmitJobRequest q = ZT__V1__SUBMIT_JOB_REQUEST__INIT;
    Zt__V1__SubmitJobReply *r = NULL;
    zt_rpc_code code;
    zt_err err = {0};
    big[60 * 1024] = '\0';
    q.job_text = big;
    ASSERT_OK(zt_rpc_unary(c, P_SUBMIT, &q.base, &zt__v1__submit_job_reply__descriptor, (void **)&r,
                           5000, &code, &err));
    ASSERT_EQ_INT(r->job_id, 60 * 1024);
    zt_pb_free(r);
    r = NULL;
    big[60 * 1024] = 'x';
    zt_status st = zt_rpc_unary(c, P_SUBMIT, &q.base, &zt__v1__submit_job_reply__descriptor,
                                (void **)&r, 5000, &code, &err);
    ASSERT_EQ_INT(code, ZT_RPC_RESOURCE_EXHAUSTED);
    ASSERT_EQ_INT(st, ZT_ERR_NOSPACE);
    ASSERT_TRUE(r == NULL);
    zt_free(big);

    /* unknown method */
    Zt__V1__PingRequest pq = ZT__V1__PING_REQUEST__INIT;
    st = zt_rpc_unary(c, "/zt.v1.Coordinator/NoSuchCall", &pq.base, &zt__v1__ping_reply__descriptor,
                      (void **)&r, 5000, &code, &err);
    ASSERT_EQ_INT(code, ZT_RPC_UNIMPLEMENTED);
    ASSERT_CONTAINS(err.msg, "NoSuchCall");

    /* deadline: the handler never answers; the client gets DEADLINE_EXCEEDED, the server a cancel
     */
    Zt__V1__GetJobRequest gq = ZT__V1__GET_JOB_REQUEST__INIT;
    uint64_t t0 = zt_now_ns();
    st = zt_rpc_unary(c, P_GET, &gq.base, &zt__v1__get_job_reply__descriptor, (void **)&r, 200,
                      &code, &err);
    double dt = (double)(zt_now_ns() - t0) * 1e-9;
    ASSERT_EQ_INT(code, ZT_RPC_DEADLINE_EXCEEDED);
    ASSERT_TRUE(dt >= 0.15 && dt < 3.0);
    for (int i = 0; i < 200 && atomic_load(&cancels_seen) == 0; i++)
        zt_sleep_ms(10);
    ASSERT_EQ_INT(atomic_load(&cancels_seen), 1);
    /* the server is unaffected */
    ASSERT_EQ_INT(ping(c, NULL, 0), ZT_RPC_OK);

    zt_rpc_client_destroy(c);
    zt_rpc_server_shutdown(s, 1000);
    zt_rpc_server_destroy(s);
}

static atomic_int async_done, async_bad;

static void on_async(void *arg, zt_rpc_code code, const char *message, const uint8_t *reply,
                     size_t len)
{
    int want = (int)(intptr_t)arg;
    if ((int)code != want) {
        fprintf(stderr, "async: code %s (%s), want %s\n", zt_rpc_code_name(code), message,
                zt_rpc_code_name((zt_rpc_code)want));
        atomic_fetch_add(&async_bad, 1);
    } else if (code == ZT_RPC_OK) {
        Zt__V1__PingReply *r = zt_pb_unpack(&zt__v1__ping_reply__descriptor, reply, len);
        if (!r || r->time_ms != 42) atomic_fetch_add(&async_bad, 1);
        zt_pb_free(r);
    } else if (!strstr(message, "decode")) {
        fprintf(stderr, "async: message without 'decode': %s\n", message);
        atomic_fetch_add(&async_bad, 1);
    }
    atomic_fetch_add(&async_done, 1);
}

typedef struct {
    int port;
    int n;
} async_arg;

static void *async_thread(void *p)
{
    async_arg *a = p;
    zt_rpc_client *c = client_for(a->port, "sekret", NULL);
    zt_rpc_cq *q = zt_rpc_cq_create();
    Zt__V1__PingRequest pq = ZT__V1__PING_REQUEST__INIT;
    zt_err err = {0};
    int done = 0;
    for (int i = 0; i < a->n; i++)
        ASSERT_OK(
            zt_rpc_unary_async(c, q, P_PING, &pq.base, 5000, on_async, (void *)(intptr_t)0, &err));
    while (done < a->n) {
        int k = zt_rpc_cq_poll(q, 1000);
        ASSERT_TRUE(k >= 0);
        done += k;
    }
    zt_rpc_cq_destroy(q);
    zt_rpc_client_destroy(c);
    return NULL;
}

static void test_auth_and_async(void)
{
    int port;
    zt_rpc_server *s = start_server("sekret", NULL, NULL, &port);
    char msg[512];
    zt_rpc_client *none = client_for(port, NULL, NULL);
    ASSERT_EQ_INT(ping(none, msg, sizeof(msg)), ZT_RPC_UNAUTHENTICATED);
    ASSERT_CONTAINS(msg, "missing token");
    zt_rpc_client *wrong = client_for(port, "sekreT", NULL);
    ASSERT_EQ_INT(ping(wrong, msg, sizeof(msg)), ZT_RPC_UNAUTHENTICATED);
    ASSERT_CONTAINS(msg, "invalid token");
    zt_rpc_client *longer = client_for(port, "sekret2", NULL);
    ASSERT_EQ_INT(ping(longer, msg, sizeof(msg)), ZT_RPC_UNAUTHENTICATED);
    zt_rpc_client *good = client_for(port, "sekret", NULL);
    ASSERT_EQ_INT(ping(good, msg, sizeof(msg)), ZT_RPC_OK);

    /* garbage bytes as a request: INVALID_ARGUMENT naming the type; server unaffected */
    zt_rpc_cq *q = zt_rpc_cq_create();
    zt_err err = {0};
    const uint8_t garbage[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
    ASSERT_OK(zt_rpc_unary_async_bytes(good, q, P_SUBMIT, garbage, sizeof(garbage), 5000, on_async,
                                       (void *)(intptr_t)ZT_RPC_INVALID_ARGUMENT, &err));
    /* a wire-type mismatch: field 1 (string) sent as a varint */
    const uint8_t wrongtype[] = {0x08, 0x05};
    ASSERT_OK(zt_rpc_unary_async_bytes(good, q, P_SUBMIT, wrongtype, sizeof(wrongtype), 5000,
                                       on_async, (void *)(intptr_t)ZT_RPC_INVALID_ARGUMENT, &err));
    int got = 0;
    while (got < 2)
        got += zt_rpc_cq_poll(q, 1000);
    zt_rpc_cq_destroy(q);
    ASSERT_EQ_INT(atomic_load(&async_bad), 0);

    /* 4 threads x 500 asynchronous calls */
    atomic_store(&async_done, 0);
    pthread_t th[4];
    async_arg aa = {port, 500};
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, async_thread, &aa);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    ASSERT_EQ_INT(atomic_load(&async_done), 2000);
    ASSERT_EQ_INT(atomic_load(&async_bad), 0);

    zt_rpc_client_destroy(none);
    zt_rpc_client_destroy(wrong);
    zt_rpc_client_destroy(longer);
    zt_rpc_client_destroy(good);
    zt_rpc_server_shutdown(s, 1000);
    zt_rpc_server_destroy(s);
}

static void test_streams(void)
{
    int port;
    zt_rpc_server *s = start_server(NULL, NULL, NULL, &port);
    zt_rpc_client *c = client_for(port, NULL, NULL);
    zt_err err = {0};
    zt_rpc_code code;

    /* 200 messages through a queue of 8, in order, then OK */
    Zt__V1__WatchJobRequest q = ZT__V1__WATCH_JOB_REQUEST__INIT;
    q.job_id = 1;
    zt_rpc_stream *st;
    ASSERT_OK(zt_rpc_stream_open(c, P_WATCH, &q.base, 10000, &st, &err));
    int n = 0;
    for (;;) {
        Zt__V1__JobUpdate *u = NULL;
        ASSERT_OK(
            zt_rpc_stream_next(st, &zt__v1__job_update__descriptor, (void **)&u, &code, &err));
        if (!u) break;
        n++;
        ASSERT_EQ_INT(u->job->step, n);
        ASSERT_EQ_INT(u->final, n == 200);
        zt_pb_free(u);
    }
    ASSERT_EQ_INT(n, 200);
    ASSERT_EQ_INT(code, ZT_RPC_OK);
    zt_rpc_stream_close(st);

    /* an error status before any message */
    q.job_id = 2;
    ASSERT_OK(zt_rpc_stream_open(c, P_WATCH, &q.base, 10000, &st, &err));
    Zt__V1__JobUpdate *u = NULL;
    zt_status rc =
        zt_rpc_stream_next(st, &zt__v1__job_update__descriptor, (void **)&u, &code, &err);
    ASSERT_EQ_INT(rc, ZT_ERR_NOT_FOUND);
    ASSERT_EQ_INT(code, ZT_RPC_NOT_FOUND);
    ASSERT_CONTAINS(err.msg, "job 2 not found");
    zt_rpc_stream_close(st);

    /* a client that closes early: the server sees the cancel */
    int before = atomic_load(&cancels_seen);
    q.job_id = 3;
    ASSERT_OK(zt_rpc_stream_open(c, P_WATCH, &q.base, 0, &st, &err));
    ASSERT_OK(zt_rpc_stream_next(st, &zt__v1__job_update__descriptor, (void **)&u, &code, &err));
    ASSERT_TRUE(u != NULL);
    zt_pb_free(u);
    zt_rpc_stream_close(st);
    for (int i = 0; i < 300 && atomic_load(&cancels_seen) == before; i++)
        zt_sleep_ms(10);
    ASSERT_EQ_INT(atomic_load(&cancels_seen), before + 1);

    /* a stream still open at shutdown is cancelled; destroy returns */
    q.job_id = 3;
    ASSERT_OK(zt_rpc_stream_open(c, P_WATCH, &q.base, 0, &st, &err));
    ASSERT_OK(zt_rpc_stream_next(st, &zt__v1__job_update__descriptor, (void **)&u, &code, &err));
    zt_pb_free(u);
    uint64_t t0 = zt_now_ns();
    zt_rpc_server_shutdown(s, 200);
    zt_rpc_server_destroy(s);
    ASSERT_TRUE((double)(zt_now_ns() - t0) * 1e-9 < 5.0);
    rc = zt_rpc_stream_next(st, &zt__v1__job_update__descriptor, (void **)&u, &code, &err);
    ASSERT_TRUE(u == NULL);
    ASSERT_NE_INT(code, ZT_RPC_OK);
    zt_rpc_stream_close(st);
    zt_rpc_client_destroy(c);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = zt_calloc(1, 65536);
    size_t n = fread(buf, 1, 65535, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void test_tls(void)
{
    if (system("command -v openssl >/dev/null 2>&1") != 0) {
        fprintf(stderr, "test_tls: openssl not installed, skipped\n");
        return;
    }
    char dir[] = "/tmp/zt_tls_XXXXXX";
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "cd %s && openssl req -x509 -newkey rsa:2048 -nodes -keyout key.pem -out cert.pem "
             "-days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 "
             ">/dev/null 2>&1",
             dir);
    ASSERT_EQ_INT(system(cmd), 0);
    char path[256];
    snprintf(path, sizeof(path), "%s/cert.pem", dir);
    char *cert = slurp(path);
    snprintf(path, sizeof(path), "%s/key.pem", dir);
    char *key = slurp(path);
    ASSERT_TRUE(cert && key);
    int port;
    zt_rpc_server *s = start_server("tok", cert, key, &port);
    zt_rpc_client *c = client_for(port, "tok", cert);
    char msg[512];
    ASSERT_EQ_INT(ping(c, msg, sizeof(msg)), ZT_RPC_OK);
    /* a plaintext client cannot talk to a TLS server */
    zt_rpc_client *plain = client_for(port, "tok", NULL);
    ASSERT_EQ_INT(ping(plain, msg, sizeof(msg)), ZT_RPC_UNAVAILABLE);
    zt_rpc_client_destroy(plain);
    zt_rpc_client_destroy(c);
    zt_rpc_server_shutdown(s, 1000);
    zt_rpc_server_destroy(s);
    /* key and certificate that are not PEM: a clear error */
    zt_rpc_server_config cfg = {.addr = "127.0.0.1:0", .tls_cert_pem = "junk", .tls_key_pem = key};
    zt_err err = {0};
    ASSERT_EQ_INT(zt_rpc_server_create(&s, &cfg, methods, 1, &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "--tls-cert");
    zt_free(cert);
    zt_free(key);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ASSERT_EQ_INT(system(cmd), 0);
}

static void test_bind_errors(void)
{
    int port;
    zt_rpc_server *s = start_server(NULL, NULL, NULL, &port);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    zt_rpc_server_config cfg = {.addr = addr};
    zt_rpc_server *s2 = NULL;
    zt_err err = {0};
    ASSERT_EQ_INT(zt_rpc_server_create(&s2, &cfg, methods, 1, &err), ZT_ERR_IO);
    ASSERT_CONTAINS(err.msg, addr);
    ASSERT_TRUE(s2 == NULL);
    zt_rpc_server_shutdown(s, 100);
    zt_rpc_server_destroy(s);
    zt_rpc_server_destroy(NULL);
}

static void test_pbjson(void)
{
    Zt__V1__Job j = ZT__V1__JOB__INIT;
    j.id = 17;
    j.name = "tiny";
    j.state = ZT__V1__JOB_STATE__JOB_STATE_RUNNING;
    j.loss = 3.5;
    json_t *o = zt_pb_to_json(&j.base);
    ASSERT_TRUE(o != NULL);
    char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    ASSERT_CONTAINS(s, "\"id\":17");
    ASSERT_CONTAINS(s, "\"state\":\"RUNNING\"");
    ASSERT_CONTAINS(s, "\"name\":\"tiny\"");
    ASSERT_CONTAINS(s, "\"loss\":3.5");
    ASSERT_CONTAINS(s, "\"pending_reason\":\"\"");
    free(s);
    json_decref(o);

    Zt__V1__RendezvousReply r = ZT__V1__RENDEZVOUS_REPLY__INIT;
    Zt__V1__RendezvousEntry e = ZT__V1__RENDEZVOUS_ENTRY__INIT, *ep = &e;
    e.rank = 0;
    e.value.data = (uint8_t *)"tcp://h:1";
    e.value.len = 9;
    r.n_entries = 1;
    r.entries = &ep;
    o = zt_pb_to_json(&r.base);
    s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    ASSERT_CONTAINS(s, "\"entries\":[{\"rank\":0,\"value\":\"dGNwOi8vaDox\"}]");
    free(s);
    json_decref(o);
    Zt__V1__Metric m = ZT__V1__METRIC__INIT;
    m.key = "loss";
    m.value = NAN;
    o = zt_pb_to_json(&m.base);
    ASSERT_TRUE(o != NULL);
    s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    ASSERT_STREQ(s, "{\"key\":\"loss\",\"value\":\"NaN\"}");
    free(s);
    json_decref(o);
    ASSERT_STREQ(zt_pb_enum_short_name(&zt__v1__job_state__descriptor, 4), "COMPLETED");
    ASSERT_STREQ(zt_pb_enum_short_name(&zt__v1__rendezvous_request__wait__descriptor, 2), "ALL");
    ASSERT_STREQ(zt_pb_enum_short_name(&zt__v1__job_state__descriptor, 99), "?");
}

int main(void)
{
    test_pbjson();
    test_unary_and_errors();
    test_auth_and_async();
    test_streams();
    test_bind_errors();
    test_tls();
    printf("test_rpc: ok\n");
    return 0;
}
