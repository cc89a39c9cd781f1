/* zerotrain: the RPC client over the gRPC C core: a channel with registered methods,
 * blocking unary calls and server streams (each on a pluck queue of its own), and
 * asynchronous unary calls delivered through a next-style queue. */
#define _POSIX_C_SOURCE 200809L
#include "proto/rpc.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "common/alloc.h"
#include "common/log.h"
#include "proto/rpc_int.h"

#define MAX_REGISTERED 64

struct zt_rpc_client {
    grpc_channel *ch;
    char *target;
    char *auth_value;  /* "Bearer <token>" or NULL */
    uint32_t md_flags; /* flags of SEND_INITIAL_METADATA (wait for ready) */
    pthread_mutex_t mu;
    struct {
        char *path;
        void *handle;
    } reg[MAX_REGISTERED];
    int nreg;
};

struct zt_rpc_stream {
    grpc_call *call;
    grpc_completion_queue *cq;
    grpc_metadata_array md_in, trailing;
    grpc_metadata auth;
    bool done;
};

struct zt_rpc_cq {
    grpc_completion_queue *cq;
};

/* ---- credentials from files ---------------------------------------------------------------- */

/* The file at path (at most max bytes) as a string in *out. */
static zt_status read_small(const char *path, const char *origin, const char *what, size_t max,
                            char **out, zt_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return zt_err_set(err, ZT_ERR_IO, "cannot read %s %s (%s): %s; check the path", what, path,
                          origin, strerror(errno));
    char *buf = zt_malloc(max + 2);
    size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
    bool failed = buf && ferror(f);
    fclose(f);
    if (!buf) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory reading %s %s", what, path);
    if (failed) {
        zt_free(buf);
        return zt_err_set(err, ZT_ERR_IO, "cannot read %s %s (%s): read error", what, path, origin);
    }
    if (n > max) {
        zt_free(buf);
        return zt_err_set(err, ZT_ERR_CONFIG,
                          "%s %s (%s) is larger than %zu bytes; is it the right file?", what, path,
                          origin, max);
    }
    buf[n] = '\0';
    *out = buf;
    return ZT_OK;
}

zt_status zt_rpc_read_key_file(const char *path, const char *origin, char **out, zt_err *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) == 0 && (sb.st_mode & 077))
        return zt_err_set(err, ZT_ERR_CONFIG,
                          "the TLS key %s (%s) may be read by other users (mode %03o); run chmod 600 %s",
                          path, origin, (unsigned)(sb.st_mode & 0777), path);
    char *pem;
    zt_status st = read_small(path, origin, "the TLS key", 1 << 20, &pem, err);
    if (st != ZT_OK) return st;
    if (!strstr(pem, "PRIVATE KEY-----")) {
        zt_free(pem);
        return zt_err_set(err, ZT_ERR_CONFIG, "%s (%s) holds no PEM private key; give the key of the certificate",
                          path, origin);
    }
    *out = pem;
    return ZT_OK;
}

zt_status zt_rpc_read_ca_file(const char *path, const char *origin, char **out, zt_err *err)
{
    char *pem;
    zt_status st = read_small(path, origin, "the CA certificate", 1 << 20, &pem, err);
    if (st != ZT_OK) {
        *out = NULL;
        return st;
    }
    if (!strstr(pem, "-----BEGIN CERTIFICATE")) {
        zt_free(pem);
        *out = NULL;
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "%s (%s) holds no PEM certificate; give the CA that signed the coordinator's certificate",
            path, origin);
    }
    *out = pem;
    return ZT_OK;
}

/* ---- channel ------------------------------------------------------------------------------ */

zt_status zt_rpc_client_create(zt_rpc_client **out, const zt_rpc_client_config *cfg, zt_err *err)
{
    *out = NULL;
    if (!cfg || !cfg->target || !cfg->target[0])
        return zt_err_set(err, ZT_ERR_INVALID, "no coordinator address given");
    zt_rpc_client *c = zt_calloc(1, sizeof(*c));
    if (!c) return zt_err_set(err, ZT_ERR_NOMEM, "rpc client: out of memory");
    c->target = zt_strdup(cfg->target);
    if (cfg->token && cfg->token[0]) c->auth_value = zt_asprintf("Bearer %s", cfg->token);
    if (!c->target || (cfg->token && cfg->token[0] && !c->auth_value)) {
        zt_free(c->target);
        zt_free(c->auth_value);
        zt_free(c);
        return zt_err_set(err, ZT_ERR_NOMEM, "rpc client: out of memory");
    }
    pthread_mutex_init(&c->mu, NULL);
    if (cfg->wait_for_ready)
        c->md_flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY |
                      GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
    zt_rpc_init_process();
    grpc_init();
    int max_msg =
        (int)(cfg->max_message_bytes ? cfg->max_message_bytes : ZT_RPC_DEFAULT_MAX_MESSAGE);
    grpc_arg args[9];
    size_t n = 0;
    memset(args, 0, sizeof(args));
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[n++].value.integer = max_msg;
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[n++].value.integer = max_msg;
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = GRPC_ARG_KEEPALIVE_TIME_MS;
    args[n++].value.integer = cfg->keepalive_ms > 0 ? cfg->keepalive_ms : 20000;
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS;
    args[n++].value.integer = 1;
    /* one connection per client: a load generator's simulated agents must not share one */
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
    args[n++].value.integer = 1;
    /* a coordinator that restarts is back within a second: reconnect quickly */
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS;
    args[n++].value.integer = 100;
    args[n].type = GRPC_ARG_INTEGER;
    args[n].key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;
    args[n++].value.integer = 1000;
    if (cfg->tls_server_name && cfg->tls_server_name[0]) {
        args[n].type = GRPC_ARG_STRING;
        args[n].key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        args[n++].value.string = (char *)cfg->tls_server_name;
    }
    grpc_channel_args cargs = {.num_args = n, .args = args};
    grpc_channel_credentials *creds;
    grpc_ssl_pem_key_cert_pair pair = {.private_key = cfg->tls_key_pem,
                                       .cert_chain = cfg->tls_cert_pem};
    bool own_cert = cfg->tls_cert_pem && cfg->tls_cert_pem[0] && cfg->tls_key_pem;
    if (cfg->tls_ca_pem)
        creds = grpc_ssl_credentials_create(cfg->tls_ca_pem, own_cert ? &pair : NULL, NULL, NULL);
    else
        creds = grpc_insecure_credentials_create();
    c->ch = grpc_channel_create(c->target, creds, &cargs);
    grpc_channel_credentials_release(creds);
    if (!c->ch) {
        zt_rpc_client_destroy(c);
        return zt_err_set(err, ZT_ERR_INVALID, "cannot create a channel to %s", cfg->target);
    }
    *out = c;
    return ZT_OK;
}

void zt_rpc_client_destroy(zt_rpc_client *c)
{
    if (!c) return;
    if (c->ch) grpc_channel_destroy(c->ch);
    for (int i = 0; i < c->nreg; i++)
        zt_free(c->reg[i].path);
    zt_free(c->target);
    zt_free(c->auth_value);
    pthread_mutex_destroy(&c->mu);
    zt_free(c);
    grpc_shutdown();
}

const char *zt_rpc_client_target(const zt_rpc_client *c)
{
    return c->target;
}

/* The registered-call handle for path (registered once per channel). NULL when full. */
static void *method_handle(zt_rpc_client *c, const char *path)
{
    void *h = NULL;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nreg; i++) {
        if (strcmp(c->reg[i].path, path) == 0) {
            h = c->reg[i].handle;
            break;
        }
    }
    if (!h && c->nreg < MAX_REGISTERED) {
        char *p = zt_strdup(path); /* must outlive the channel's use of it */
        if (p) {
            h = grpc_channel_register_call(c->ch, p, NULL, NULL);
            c->reg[c->nreg].path = p;
            c->reg[c->nreg].handle = h;
            c->nreg++;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return h;
}

static grpc_call *new_call(zt_rpc_client *c, grpc_completion_queue *cq, const char *path,
                           int timeout_ms, zt_err *err)
{
    gpr_timespec deadline = timeout_ms > 0
                                ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                               gpr_time_from_millis(timeout_ms, GPR_TIMESPAN))
                                : gpr_inf_future(GPR_CLOCK_MONOTONIC);
    void *h = method_handle(c, path);
    grpc_call *call;
    if (h) {
        call = grpc_channel_create_registered_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, h,
                                                   deadline, NULL);
    } else {
        call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                        grpc_slice_from_static_string(path), NULL, deadline, NULL);
    }
    if (!call) zt_err_set(err, ZT_ERR_INTERNAL, "cannot create a call to %s", path);
    return call;
}

/* value: "Bearer <token>", kept alive by the caller until the call completes */
static void set_auth(grpc_metadata *md, const char *value)
{
    memset(md, 0, sizeof(*md));
    md->key = grpc_slice_from_static_string("authorization");
    md->value = grpc_slice_from_static_string(value);
}

static grpc_byte_buffer *pack_bb(const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    grpc_slice sl = grpc_slice_malloc(n);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(sl));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return bb;
}

static void drain_destroy_pluck(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
}

/* Decodes a received buffer; NULL on failure. */
static void *decode_bb(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *type)
{
    grpc_byte_buffer_reader rd;
    if (!grpc_byte_buffer_reader_init(&rd, bb)) return NULL;
    grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
    void *m = zt_pb_unpack(type, GRPC_SLICE_START_PTR(all), GRPC_SLICE_LENGTH(all));
    grpc_slice_unref(all);
    return m;
}

static zt_status status_result(grpc_status_code status, grpc_slice details,
                               const char *error_string, const char *path, zt_rpc_code *code,
                               zt_err *err)
{
    if (code) *code = (zt_rpc_code)status;
    if (status == GRPC_STATUS_OK) return ZT_OK;
    char *d = grpc_slice_to_c_string(details);
    const char *msg = d && d[0] ? d : (error_string ? error_string : "");
    zt_status st = zt_rpc_status_from_code((zt_rpc_code)status);
    zt_err_set(err, st, "%s", msg[0] ? msg : zt_rpc_code_name((zt_rpc_code)status));
    ZT_DEBUG("rpc", "%s -> %s: %s", path, zt_rpc_code_name((zt_rpc_code)status), msg);
    gpr_free(d);
    return st;
}

/* ---- unary -------------------------------------------------------------------------------- */

zt_status zt_rpc_unary(zt_rpc_client *c, const char *path, const ProtobufCMessage *request,
                       const ProtobufCMessageDescriptor *reply_type, void **reply, int timeout_ms,
                       zt_rpc_code *code, zt_err *err)
{
    return zt_rpc_unary_as(c, path, NULL, request, reply_type, reply, timeout_ms, code, err);
}

zt_status zt_rpc_unary_as(zt_rpc_client *c, const char *path, const char *token,
                          const ProtobufCMessage *request,
                          const ProtobufCMessageDescriptor *reply_type, void **reply,
                          int timeout_ms, zt_rpc_code *code, zt_err *err)
{
    *reply = NULL;
    if (code) *code = ZT_RPC_INTERNAL;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_call *call = new_call(c, cq, path, timeout_ms > 0 ? timeout_ms : 30000, err);
    if (!call) {
        drain_destroy_pluck(cq);
        return ZT_ERR_INTERNAL;
    }
    grpc_metadata auth;
    char *own_auth = token ? zt_asprintf("Bearer %s", token) : NULL;
    const char *auth_value = token ? own_auth : c->auth_value;
    grpc_metadata_array md_in, trailing;
    grpc_metadata_array_init(&md_in);
    grpc_metadata_array_init(&trailing);
    grpc_byte_buffer *send = pack_bb(request);
    grpc_byte_buffer *recv = NULL;
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;
    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].flags = c->md_flags;
    if (auth_value) {
        set_auth(&auth, auth_value);
        ops[0].data.send_initial_metadata.count = 1;
        ops[0].data.send_initial_metadata.metadata = &auth;
    }
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_in;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailing;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &details;
    ops[5].data.recv_status_on_client.error_string = &error_string;
    zt_status st;
    int tag = 1;
    if (grpc_call_start_batch(call, ops, 6, &tag, NULL) != GRPC_CALL_OK) {
        st = zt_err_set(err, ZT_ERR_INTERNAL, "cannot start the call to %s", path);
        goto cleanup;
    }
    grpc_completion_queue_pluck(cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    st = status_result(status, details, error_string, path, code, err);
    if (st == ZT_OK) {
        if (!recv) {
            st = zt_err_set(err, ZT_ERR_RPC, "%s: the server answered OK without a message", path);
        } else if (!(*reply = decode_bb(recv, reply_type))) {
            st = zt_err_set(
                err, ZT_ERR_FORMAT,
                "%s: cannot decode the reply as %s; are client and server built from the same zerotrain.proto?",
                path, reply_type->name);
        }
    }
cleanup:
    if (recv) grpc_byte_buffer_destroy(recv);
    grpc_byte_buffer_destroy(send);
    grpc_slice_unref(details);
    gpr_free((void *)error_string);
    grpc_metadata_array_destroy(&md_in);
    grpc_metadata_array_destroy(&trailing);
    grpc_call_unref(call);
    drain_destroy_pluck(cq);
    zt_free(own_auth);
    return st;
}

/* ---- server streaming --------------------------------------------------------------------- */

zt_status zt_rpc_stream_open(zt_rpc_client *c, const char *path, const ProtobufCMessage *request,
                             int timeout_ms, zt_rpc_stream **out, zt_err *err)
{
    *out = NULL;
    zt_rpc_stream *s = zt_calloc(1, sizeof(*s));
    if (!s) return zt_err_set(err, ZT_ERR_NOMEM, "rpc client: out of memory");
    s->cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_metadata_array_init(&s->md_in);
    grpc_metadata_array_init(&s->trailing);
    s->call = new_call(c, s->cq, path, timeout_ms, err);
    if (!s->call) {
        zt_rpc_stream_close(s);
        return ZT_ERR_INTERNAL;
    }
    grpc_byte_buffer *send = pack_bb(request);
    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].flags = c->md_flags;
    if (c->auth_value) {
        set_auth(&s->auth, c->auth_value);
        ops[0].data.send_initial_metadata.count = 1;
        ops[0].data.send_initial_metadata.metadata = &s->auth;
    }
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &s->md_in;
    int tag = 1;
    if (grpc_call_start_batch(s->call, ops, 4, &tag, NULL) != GRPC_CALL_OK) {
        grpc_byte_buffer_destroy(send);
        zt_rpc_stream_close(s);
        return zt_err_set(err, ZT_ERR_INTERNAL, "cannot start the call to %s", path);
    }
    /* A failed send shows as an error status at the first zt_rpc_stream_next. */
    grpc_completion_queue_pluck(s->cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_byte_buffer_destroy(send);
    *out = s;
    return ZT_OK;
}

zt_status zt_rpc_stream_next(zt_rpc_stream *s, const ProtobufCMessageDescriptor *type, void **msg,
                             zt_rpc_code *code, zt_err *err)
{
    *msg = NULL;
    if (code) *code = ZT_RPC_OK;
    if (s->done) return ZT_OK;
    grpc_byte_buffer *recv = NULL;
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &recv;
    int tag = 1;
    if (grpc_call_start_batch(s->call, &op, 1, &tag, NULL) != GRPC_CALL_OK)
        return zt_err_set(err, ZT_ERR_INTERNAL, "cannot read from the stream");
    grpc_completion_queue_pluck(s->cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (recv) {
        *msg = decode_bb(recv, type);
        grpc_byte_buffer_destroy(recv);
        if (!*msg) {
            if (code) *code = ZT_RPC_INTERNAL;
            return zt_err_set(err, ZT_ERR_FORMAT, "cannot decode a stream message as %s",
                              type->name);
        }
        return ZT_OK;
    }
    /* end of the stream: collect the status */
    s->done = true;
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = &s->trailing;
    op.data.recv_status_on_client.status = &status;
    op.data.recv_status_on_client.status_details = &details;
    op.data.recv_status_on_client.error_string = &error_string;
    if (grpc_call_start_batch(s->call, &op, 1, &tag, NULL) != GRPC_CALL_OK)
        return zt_err_set(err, ZT_ERR_INTERNAL, "cannot read the stream's status");
    grpc_completion_queue_pluck(s->cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    zt_status st = status_result(status, details, error_string, "stream", code, err);
    grpc_slice_unref(details);
    gpr_free((void *)error_string);
    return st;
}

void zt_rpc_stream_close(zt_rpc_stream *s)
{
    if (!s) return;
    if (s->call) {
        if (!s->done) grpc_call_cancel(s->call, NULL);
        grpc_call_unref(s->call);
    }
    grpc_metadata_array_destroy(&s->md_in);
    grpc_metadata_array_destroy(&s->trailing);
    drain_destroy_pluck(s->cq);
    zt_free(s);
}

/* ---- asynchronous unary ------------------------------------------------------------------- */

typedef struct async_call {
    grpc_call *call;
    grpc_byte_buffer *send, *recv;
    grpc_metadata_array md_in, trailing;
    grpc_status_code status;
    grpc_slice details;
    const char *error_string;
    grpc_metadata auth;
    char *own_auth; /* "Bearer <token>" of a zt_rpc_unary_async_as call */
    zt_rpc_done_fn done;
    void *arg;
} async_call;

zt_rpc_cq *zt_rpc_cq_create(void)
{
    zt_rpc_cq *q = zt_calloc(1, sizeof(*q));
    if (!q) return NULL;
    zt_rpc_init_process();
    grpc_init();
    q->cq = grpc_completion_queue_create_for_next(NULL);
    return q;
}

void zt_rpc_cq_destroy(zt_rpc_cq *q)
{
    if (!q) return;
    grpc_completion_queue_shutdown(q->cq);
    while (grpc_completion_queue_next(q->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(q->cq);
    zt_free(q);
    grpc_shutdown();
}

static zt_status start_async(zt_rpc_client *c, zt_rpc_cq *q, const char *path,
                             const char *token, grpc_byte_buffer *send, int timeout_ms,
                             zt_rpc_done_fn done, void *arg, zt_err *err)
{
    async_call *a = zt_calloc(1, sizeof(*a));
    if (a && token && !(a->own_auth = zt_asprintf("Bearer %s", token))) {
        zt_free(a);
        a = NULL;
    }
    if (!a) {
        grpc_byte_buffer_destroy(send);
        return zt_err_set(err, ZT_ERR_NOMEM, "rpc client: out of memory");
    }
    a->send = send;
    a->done = done;
    a->arg = arg;
    a->details = grpc_empty_slice();
    grpc_metadata_array_init(&a->md_in);
    grpc_metadata_array_init(&a->trailing);
    a->call = new_call(c, q->cq, path, timeout_ms > 0 ? timeout_ms : 30000, err);
    if (!a->call) {
        grpc_byte_buffer_destroy(send);
        zt_free(a->own_auth);
        zt_free(a);
        return ZT_ERR_INTERNAL;
    }
    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].flags = c->md_flags;
    const char *auth_value = a->own_auth ? a->own_auth : c->auth_value;
    if (auth_value) {
        set_auth(&a->auth, auth_value);
        ops[0].data.send_initial_metadata.count = 1;
        ops[0].data.send_initial_metadata.metadata = &a->auth;
    }
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = a->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &a->md_in;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &a->recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &a->trailing;
    ops[5].data.recv_status_on_client.status = &a->status;
    ops[5].data.recv_status_on_client.status_details = &a->details;
    ops[5].data.recv_status_on_client.error_string = &a->error_string;
    if (grpc_call_start_batch(a->call, ops, 6, a, NULL) != GRPC_CALL_OK) {
        grpc_call_unref(a->call);
        grpc_byte_buffer_destroy(send);
        grpc_metadata_array_destroy(&a->md_in);
        grpc_metadata_array_destroy(&a->trailing);
        zt_free(a->own_auth);
        zt_free(a);
        return zt_err_set(err, ZT_ERR_INTERNAL, "cannot start the call to %s", path);
    }
    return ZT_OK;
}

zt_status zt_rpc_unary_async(zt_rpc_client *c, zt_rpc_cq *q, const char *path,
                             const ProtobufCMessage *request, int timeout_ms, zt_rpc_done_fn done,
                             void *arg, zt_err *err)
{
    return start_async(c, q, path, NULL, pack_bb(request), timeout_ms, done, arg, err);
}

zt_status zt_rpc_unary_async_as(zt_rpc_client *c, zt_rpc_cq *q, const char *path,
                                const char *token, const ProtobufCMessage *request,
                                int timeout_ms, zt_rpc_done_fn done, void *arg, zt_err *err)
{
    return start_async(c, q, path, token, pack_bb(request), timeout_ms, done, arg, err);
}

zt_status zt_rpc_unary_async_bytes(zt_rpc_client *c, zt_rpc_cq *q, const char *path,
                                   const void *request, size_t len, int timeout_ms,
                                   zt_rpc_done_fn done, void *arg, zt_err *err)
{
    grpc_slice sl = grpc_slice_malloc(len);
    if (len) memcpy(GRPC_SLICE_START_PTR(sl), request, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return start_async(c, q, path, NULL, bb, timeout_ms, done, arg, err);
}

static void finish_async(async_call *a)
{
    char msgbuf[512] = "";
    const uint8_t *bytes = NULL;
    size_t len = 0;
    grpc_slice all = grpc_empty_slice();
    if (a->status == GRPC_STATUS_OK && a->recv) {
        grpc_byte_buffer_reader rd;
        if (grpc_byte_buffer_reader_init(&rd, a->recv)) {
            all = grpc_byte_buffer_reader_readall(&rd);
            grpc_byte_buffer_reader_destroy(&rd);
            bytes = GRPC_SLICE_START_PTR(all);
            len = GRPC_SLICE_LENGTH(all);
        }
    } else if (a->status != GRPC_STATUS_OK) {
        size_t n = GRPC_SLICE_LENGTH(a->details);
        if (n >= sizeof(msgbuf)) n = sizeof(msgbuf) - 1;
        memcpy(msgbuf, GRPC_SLICE_START_PTR(a->details), n);
        msgbuf[n] = '\0';
        if (!msgbuf[0] && a->error_string) snprintf(msgbuf, sizeof(msgbuf), "%s", a->error_string);
    }
    a->done(a->arg, (zt_rpc_code)a->status, msgbuf, bytes, len);
    grpc_slice_unref(all);
    if (a->recv) grpc_byte_buffer_destroy(a->recv);
    grpc_byte_buffer_destroy(a->send);
    grpc_slice_unref(a->details);
    gpr_free((void *)a->error_string);
    grpc_metadata_array_destroy(&a->md_in);
    grpc_metadata_array_destroy(&a->trailing);
    grpc_call_unref(a->call);
    zt_free(a->own_auth);
    zt_free(a);
}

int zt_rpc_cq_poll(zt_rpc_cq *q, int timeout_ms)
{
    int n = 0;
    gpr_timespec until =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                     gpr_time_from_millis(timeout_ms > 0 ? timeout_ms : 0, GPR_TIMESPAN));
    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(q->cq, n ? gpr_inf_past(GPR_CLOCK_MONOTONIC) : until, NULL);
        if (ev.type == GRPC_QUEUE_TIMEOUT) return n;
        if (ev.type == GRPC_QUEUE_SHUTDOWN) return n ? n : -1;
        finish_async(ev.tag);
        n++;
    }
}
