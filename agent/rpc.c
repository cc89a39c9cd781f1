/* zerotrain: zagent's RPCs without blocking its loop. Calls start on the loop thread with the
 * asynchronous zt_rpc client; one poller thread waits on the completion queue, copies each
 * finished call's status and reply bytes, queues it and wakes the loop (uv_async), where the
 * reply is decoded and the caller's callback runs. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "agent/agent_int.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"

bool ag_rpc_transient(zt_rpc_code code)
{
    /* UNAUTHENTICATED: the key is unknown (a restarted coordinator); the heartbeat
     * registers again and the call goes through with the new key */
    return code == ZT_RPC_UNAVAILABLE || code == ZT_RPC_DEADLINE_EXCEEDED ||
           code == ZT_RPC_UNAUTHENTICATED ||
           code == ZT_RPC_RESOURCE_EXHAUSTED || code == ZT_RPC_ABORTED ||
           code == ZT_RPC_CANCELLED || code == ZT_RPC_UNKNOWN || code == ZT_RPC_INTERNAL;
}

static void push_done(zt_agent *a, ag_call *c)
{
    c->done_ns = zt_now_ns();
    pthread_mutex_lock(&a->cmu);
    c->next = NULL;
    if (a->done_tail)
        a->done_tail->next = c;
    else
        a->done_head = c;
    a->done_tail = c;
    pthread_mutex_unlock(&a->cmu);
    uv_async_send(&a->rpc_async);
}

/* Poller thread: the call finished; reply is valid only during this callback. */
static void on_call_done(void *arg, zt_rpc_code code, const char *message, const uint8_t *reply,
                         size_t len)
{
    ag_call *c = arg;
    c->code = code;
    snprintf(c->msg, sizeof(c->msg), "%s", message ? message : "");
    if (code == ZT_RPC_OK && len) {
        c->reply = zt_malloc(len);
        if (c->reply) {
            memcpy(c->reply, reply, len);
            c->len = len;
        } else {
            c->code = ZT_RPC_RESOURCE_EXHAUSTED;
            snprintf(c->msg, sizeof(c->msg), "zagent: out of memory copying a reply");
        }
    }
    push_done(c->agent, c);
}

static void *poller_main(void *arg)
{
    zt_agent *a = arg;
    while (!atomic_load(&a->poller_stop))
        zt_rpc_cq_poll(a->cq, 100); /* also how soon a stop is seen */
    return NULL;
}

/* Loop thread: run the callbacks of finished calls. */
static void on_async(uv_async_t *h)
{
    zt_agent *a = h->data;
    for (;;) {
        pthread_mutex_lock(&a->cmu);
        ag_call *c = a->done_head;
        if (c) {
            a->done_head = c->next;
            if (!a->done_head) a->done_tail = NULL;
        }
        pthread_mutex_unlock(&a->cmu);
        if (!c) break;
        a->calls_in_flight--;
        void *reply = NULL;
        zt_rpc_code code = c->code;
        const char *msg = c->msg;
        if (code == ZT_RPC_OK) {
            reply = zt_pb_unpack(c->reply_type, c->reply ? c->reply : (const uint8_t *)"", c->len);
            if (!reply) {
                code = ZT_RPC_INTERNAL;
                msg = "the coordinator's reply does not decode (version mismatch?)";
            }
        }
        c->fn(a, c->ctx, code, msg, reply, c->done_ns - c->started_ns);
        zt_pb_free(reply);
        zt_free(c->reply);
        zt_free(c);
    }
    if (a->stopping) ag_check_stopped(a);
}

void ag_rpc_call(zt_agent *a, const char *method, const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *reply_type, int timeout_ms, ag_rpc_fn fn,
                 void *ctx)
{
    ag_call *c = zt_calloc(1, sizeof(*c));
    if (!c) {
        /* nothing to queue: the caller's retry timers run again */
        ZT_ERROR("agent", "out of memory starting %s; will retry", method);
        fn(a, ctx, ZT_RPC_RESOURCE_EXHAUSTED, "zagent: out of memory", NULL, 0);
        return;
    }
    c->agent = a;
    c->reply_type = reply_type;
    c->fn = fn;
    c->ctx = ctx;
    c->started_ns = zt_now_ns();
    a->calls_in_flight++;
    char path[96];
    snprintf(path, sizeof(path), "/zt.v1.AgentControl/%s", method);
    zt_err err = {0};
    /* RegisterAgent carries the join token (the client's); every other call the key */
    const char *token = strcmp(method, "RegisterAgent") == 0 ? NULL : a->agent_key;
    if (zt_rpc_unary_async_as(a->client, a->cq, path, token, req, timeout_ms, on_call_done, c,
                              &err) != ZT_OK) {
        c->code = ZT_RPC_UNAVAILABLE;
        snprintf(c->msg, sizeof(c->msg), "cannot start the call: %s", zt_err_msg(&err));
        push_done(a, c);
    }
}

zt_status ag_rpc_init(zt_agent *a, zt_err *err)
{
    zt_rpc_client_config cc = {.target = a->cfg.coordinator,
                               .token = a->cfg.token,
                               .tls_ca_pem = a->cfg.tls_ca_pem,
                               .tls_cert_pem = a->cfg.tls_cert_pem,
                               .tls_key_pem = a->cfg.tls_key_pem,
                               .keepalive_ms = 10000};
    zt_status st = zt_rpc_client_create(&a->client, &cc, err);
    if (st != ZT_OK) return st;
    a->cq = zt_rpc_cq_create();
    if (!a->cq)
        return zt_err_set(err, ZT_ERR_NOMEM, "zagent: out of memory creating a completion queue");
    int rc = uv_async_init(&a->loop, &a->rpc_async, on_async);
    if (rc != 0) return zt_err_set(err, ZT_ERR_INTERNAL, "uv_async_init: %s", uv_strerror(rc));
    a->rpc_async.data = a;
    a->handles++;
    atomic_store(&a->poller_stop, false);
    /* the poller must not take the signals the loop handles */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = pthread_create(&a->poller, NULL, poller_main, a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return zt_err_set(err, ZT_ERR_INTERNAL, "cannot start the RPC poller thread: %s",
                          strerror(rc));
    a->poller_started = true;
    return ZT_OK;
}

void ag_rpc_close(zt_agent *a)
{
    if (a->poller_started) {
        atomic_store(&a->poller_stop, true);
        pthread_join(a->poller, NULL);
        a->poller_started = false;
    }
    /* completions the loop never ran (only when the loop was abandoned early) */
    while (a->done_head) {
        ag_call *c = a->done_head;
        a->done_head = c->next;
        zt_free(c->reply);
        zt_free(c);
    }
    a->done_tail = NULL;
    zt_rpc_cq_destroy(a->cq);
    a->cq = NULL;
    zt_rpc_client_destroy(a->client);
    a->client = NULL;
}
