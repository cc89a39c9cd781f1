/* zerotrain: the thin C layer over the gRPC C core (Debian libgrpc-dev 1.51) that zcoord,
 * zctl and zagent share: a server that polls one completion queue from a few threads and
 * hands each call, already authenticated and decoded with protobuf-c, to a handler; unary
 * and server-streaming replies from any thread; and a blocking plus an asynchronous client.
 * gRPC codes and messages are translated here, once. */
#ifndef ZT_PROTO_RPC_H
#define ZT_PROTO_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "common/status.h"

/* gRPC status codes, same numbers as grpc_status_code. */
typedef enum {
    ZT_RPC_OK = 0,
    ZT_RPC_CANCELLED = 1,
    ZT_RPC_UNKNOWN = 2,
    ZT_RPC_INVALID_ARGUMENT = 3,
    ZT_RPC_DEADLINE_EXCEEDED = 4,
    ZT_RPC_NOT_FOUND = 5,
    ZT_RPC_ALREADY_EXISTS = 6,
    ZT_RPC_PERMISSION_DENIED = 7,
    ZT_RPC_RESOURCE_EXHAUSTED = 8,
    ZT_RPC_FAILED_PRECONDITION = 9,
    ZT_RPC_ABORTED = 10,
    ZT_RPC_OUT_OF_RANGE = 11,
    ZT_RPC_UNIMPLEMENTED = 12,
    ZT_RPC_INTERNAL = 13,
    ZT_RPC_UNAVAILABLE = 14,
    ZT_RPC_DATA_LOSS = 15,
    ZT_RPC_UNAUTHENTICATED = 16,
} zt_rpc_code;

/* "NOT_FOUND" for ZT_RPC_NOT_FOUND; never NULL. */
const char *zt_rpc_code_name(zt_rpc_code code);
/* The gRPC code that reports a zt_status (ZT_ERR_CONFIG -> INVALID_ARGUMENT, ...). */
zt_rpc_code zt_rpc_code_from_status(zt_status st);
/* The zt_status a client sees for a gRPC code (UNAVAILABLE -> ZT_ERR_PEER, ...). */
zt_status zt_rpc_status_from_code(zt_rpc_code code);

/* ---- protobuf-c helpers: every message buffer comes from zt_malloc ---------------------- */

/* The allocator handed to protobuf-c (zt_malloc/zt_free). */
extern ProtobufCAllocator zt_pb_allocator;
/* Decodes len bytes as type; NULL when the bytes are not a valid message of that type (or
 * on allocation failure). Free with zt_pb_free. Thread-safe. */
void *zt_pb_unpack(const ProtobufCMessageDescriptor *type, const uint8_t *data, size_t len);
/* Frees a message from zt_pb_unpack or an rpc call; NULL is a no-op. */
void zt_pb_free(void *msg);
/* Encodes msg into a fresh zt_malloc buffer (*len set); NULL on allocation failure. */
uint8_t *zt_pb_pack(const ProtobufCMessage *msg, size_t *len);

/* ---- server ------------------------------------------------------------------------------ */


typedef struct zt_rpc_server zt_rpc_server;
/* One incoming call. The handler owns the duty to answer it exactly once, with
 * zt_rpc_reply / zt_rpc_reply_bytes / zt_rpc_fail (unary) or zt_rpc_stream_finish /
 * zt_rpc_fail (streaming), from any thread, now or later. */
typedef struct zt_rpc_call zt_rpc_call;

/* Runs on a poller thread: keep it short, hand slow work to another thread. `request` is
 * the decoded message (of the method's request_type) and stays valid until the call is
 * answered. */
typedef void (*zt_rpc_handler_fn)(zt_rpc_call *call, const ProtobufCMessage *request, void *user);

/* Who may call a method: the class zt_rpc_server_config.authorize decides on. */
typedef enum {
    ZT_RPC_ACCESS_USER = 0,   /* a user credential (the default) */
    ZT_RPC_ACCESS_OPEN,       /* anybody (health checks) */
    ZT_RPC_ACCESS_AGENT_JOIN, /* the agent join credential (RegisterAgent) */
    ZT_RPC_ACCESS_AGENT,      /* an agent's own key (every later agent call) */
} zt_rpc_access;

typedef struct zt_rpc_method {
    const char *path; /* "/zt.v1.Coordinator/SubmitJob" */
    const ProtobufCMessageDescriptor *request_type;
    bool server_stream;
    zt_rpc_handler_fn handler;
    void *user;
    int preposted; /* calls kept posted for this method (concurrent accepts); 0 = 32 */
    /* Optional: told when a call of this method is answered, with the time from its arrival
     * to its answer (the handler's and whatever it waited for) and the status. Runs on the
     * answering thread: keep it short. */
    void (*observe)(void *observe_user, uint64_t ns, zt_rpc_code code);
    void *observe_user;
    zt_rpc_access access;
} zt_rpc_method;

/* Decides whether a call of a method of class `access` may proceed, given the bearer token
 * it carries (bearer NULL when it carries none; not NUL-terminated, bearer_len bytes) and the
 * common name of the client certificate it presented under mutual TLS (cert_name; NULL when
 * none, or when the server asks for none).
 * Returns ZT_RPC_OK after writing who is calling into who ("user:alice", "agent:n1"), or
 * UNAUTHENTICATED / PERMISSION_DENIED with the message for the caller in msg. Runs on a
 * poller thread for every call, before the request is decoded: keep it short. */
typedef zt_rpc_code (*zt_rpc_authorize_fn)(void *user, zt_rpc_access access, const char *bearer,
                                           size_t bearer_len, const char *cert_name, char *who,
                                           size_t who_cap, char *msg, size_t msg_cap);

typedef struct zt_rpc_server_config {
    const char *addr;         /* "host:port" ("127.0.0.1:0" picks a free port) or "unix:/path" */
    const char *token;        /* bearer token every call but ZT_RPC_ACCESS_OPEN ones must carry;
                                 NULL or "" = none; ignored when authorize is set */
    zt_rpc_authorize_fn authorize; /* NULL: `token` decides */
    void *authorize_user;
    const char *tls_cert_pem; /* PEM text of the certificate chain; NULL = plaintext */
    const char *tls_key_pem;  /* PEM text of the private key (with tls_cert_pem) */
    const char *tls_client_ca_pem; /* PEM roots: clients may present a certificate they sign
                                      (mutual TLS; its common name reaches authorize); NULL =
                                      no client certificates */
    size_t max_message_bytes; /* larger messages get RESOURCE_EXHAUSTED; 0 = 4 MiB */
    int pollers;              /* threads on the completion queue; 0 = 1 */
    int stream_queue_max;     /* messages queued per stream before a send is refused; 0 = 64 */
} zt_rpc_server_config;

/* Binds cfg->addr, registers the methods (copied; paths must stay valid), starts serving and
 * the poller threads. Unknown methods are answered UNIMPLEMENTED, calls without the token
 * UNAUTHENTICATED, undecodable or missing payloads INVALID_ARGUMENT, all before a handler
 * runs. Errors: ZT_ERR_IO (cannot bind: message names the address), ZT_ERR_CONFIG (bad TLS
 * material), ZT_ERR_NOMEM. Initializes gRPC (reference counted). */
zt_status zt_rpc_server_create(zt_rpc_server **out, const zt_rpc_server_config *cfg,
                               const zt_rpc_method *methods, size_t n_methods, zt_err *err);
/* The bound TCP port (useful with port 0); 0 for unix sockets. */
int zt_rpc_server_port(const zt_rpc_server *s);
/* Stops accepting calls, lets calls in flight finish for up to grace_ms, then cancels the
 * rest (streams see their cancel callback). Handlers may still answer calls afterwards
 * (the answers fail quietly). Call once, before zt_rpc_server_destroy. */
void zt_rpc_server_shutdown(zt_rpc_server *s, int grace_ms);
/* Waits until every call is answered and released, stops the pollers and frees the
 * server. Everything that holds calls (stream registries) must have let go first, or
 * this waits. NULL is a no-op. */
void zt_rpc_server_destroy(zt_rpc_server *s);

/* Unary success: encodes reply and ends the call with OK. */
void zt_rpc_reply(zt_rpc_call *call, const ProtobufCMessage *reply);
/* Same with a reply encoded already (copied). */
void zt_rpc_reply_bytes(zt_rpc_call *call, const void *bytes, size_t len);
/* Ends a unary or streaming call with a non-OK code and a message (what, where, what to do);
 * for a stream, messages still queued are dropped. */
void zt_rpc_fail(zt_rpc_call *call, zt_rpc_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Queues one message on a server stream; thread-safe. ZT_ERR_PEER when the client has gone
 * (or the call is finished), ZT_ERR_NOSPACE when stream_queue_max messages wait already
 * (a slow reader: drop or end the stream), ZT_ERR_NOMEM. */
zt_status zt_rpc_stream_send(zt_rpc_call *call, const ProtobufCMessage *msg);
/* Ends a stream after the queued messages with code and message (NULL = none). */
void zt_rpc_stream_finish(zt_rpc_call *call, zt_rpc_code code, const char *message);

/* Extra references for those that keep a call past the handler (a stream registry). The
 * call memory lives until it is answered and every reference is dropped. Thread-safe. */
zt_rpc_call *zt_rpc_call_ref(zt_rpc_call *call);
void zt_rpc_call_unref(zt_rpc_call *call);
/* fn(call, arg) runs once, on a poller thread, when the client cancels, its deadline passes
 * or the connection drops before the call ended; it runs right away if that happened
 * already. Set it once. */
void zt_rpc_call_on_cancel(zt_rpc_call *call, void (*fn)(zt_rpc_call *, void *), void *arg);
bool zt_rpc_call_cancelled(const zt_rpc_call *call);
/* Milliseconds until the client's deadline; INT64_MAX when it set none. */
int64_t zt_rpc_call_deadline_left_ms(const zt_rpc_call *call);
/* The method's path. */
const char *zt_rpc_call_method(const zt_rpc_call *call);
/* Who the call was authorized as (zt_rpc_authorize_fn's `who`; "" without an authorize
 * function). Valid until the call is answered. */
const char *zt_rpc_call_identity(const zt_rpc_call *call);
/* The value of request metadata key (lowercase), copied into buf; false when absent. */
bool zt_rpc_call_metadata(const zt_rpc_call *call, const char *key, char *buf, size_t cap);
/* "ipv4:127.0.0.1:53412" into buf. */
void zt_rpc_call_peer(zt_rpc_call *call, char *buf, size_t cap);

/* ---- client ------------------------------------------------------------------------------ */

typedef struct zt_rpc_client zt_rpc_client;

typedef struct zt_rpc_client_config {
    const char *target;          /* "host:port" or "unix:/path" */
    const char *token;           /* sent as "authorization: Bearer <token>"; NULL = none */
    const char *tls_ca_pem;      /* PEM roots: use TLS and verify the server; NULL = plaintext */
    const char *tls_server_name; /* expected name in the server certificate; NULL = target host */
    const char *tls_cert_pem;    /* PEM client certificate (mutual TLS, with tls_ca_pem); NULL =
                                    none */
    const char *tls_key_pem;     /* its PEM private key */
    size_t max_message_bytes;    /* 0 = 4 MiB */
    int keepalive_ms;            /* ping an idle connection this often; 0 = 20000 */
    bool wait_for_ready;         /* calls wait (until their deadline) for the coordinator to be
                                    reachable instead of failing at once with UNAVAILABLE */
} zt_rpc_client_config;

/* Client credentials from files, read the same way by zctl and zagent; origin says where the
 * path came from ("--tls-key", "ZT_TLS_KEY") for the message. The PEM private key of a client
 * certificate (mutual TLS; at most 1 MiB, readable by its owner only) into *out (zt_free).
 * Errors: ZT_ERR_IO (the file cannot be read), ZT_ERR_CONFIG (others may read it, too large, no
 * PEM key in it). Thread-safe. */
zt_status zt_rpc_read_key_file(const char *path, const char *origin, char **out, zt_err *err);
/* PEM roots to verify the coordinator's TLS certificate (at most 1 MiB) into *out (zt_free).
 * Errors: ZT_ERR_IO, ZT_ERR_CONFIG (too large, or no PEM certificate in it). */
zt_status zt_rpc_read_ca_file(const char *path, const char *origin, char **out, zt_err *err);

/* Creates a channel (connects lazily). Errors: ZT_ERR_INVALID (no target), ZT_ERR_NOMEM.
 * One client may be used from several threads at once. */
zt_status zt_rpc_client_create(zt_rpc_client **out, const zt_rpc_client_config *cfg, zt_err *err);
void zt_rpc_client_destroy(zt_rpc_client *c);
const char *zt_rpc_client_target(const zt_rpc_client *c);

/* Blocking unary call. On success *reply (of reply_type) is set; free with zt_pb_free.
 * On failure returns zt_rpc_status_from_code(code) with the server's (or gRPC's) message in
 * err; *code (optional) receives the gRPC code in both cases. timeout_ms <= 0 means 30 s.
 * Thread-safe. */
zt_status zt_rpc_unary(zt_rpc_client *c, const char *path, const ProtobufCMessage *request,
                       const ProtobufCMessageDescriptor *reply_type, void **reply, int timeout_ms,
                       zt_rpc_code *code, zt_err *err);

/* The same with a bearer token of its own instead of the client's (NULL: the client's):
 * an agent's own key. */
zt_status zt_rpc_unary_as(zt_rpc_client *c, const char *path, const char *token,
                          const ProtobufCMessage *request,
                          const ProtobufCMessageDescriptor *reply_type, void **reply,
                          int timeout_ms, zt_rpc_code *code, zt_err *err);

typedef struct zt_rpc_stream zt_rpc_stream;
/* Starts a server-streaming call. timeout_ms <= 0: no deadline. One stream is used by one
 * thread at a time. */
zt_status zt_rpc_stream_open(zt_rpc_client *c, const char *path, const ProtobufCMessage *request,
                             int timeout_ms, zt_rpc_stream **out, zt_err *err);
/* Next message (of type) into *msg, free with zt_pb_free. At the end of the stream returns
 * ZT_OK with *msg NULL when the server finished with OK, or the error (code, message)
 * otherwise. */
zt_status zt_rpc_stream_next(zt_rpc_stream *s, const ProtobufCMessageDescriptor *type, void **msg,
                             zt_rpc_code *code, zt_err *err);
/* Cancels the call if it is still open and frees the stream. NULL is a no-op. */
void zt_rpc_stream_close(zt_rpc_stream *s);

/* Asynchronous unary calls, for load generators and event loops: completions are delivered
 * by zt_rpc_cq_poll on the thread that polls. */
typedef struct zt_rpc_cq zt_rpc_cq;
/* reply/len: the encoded reply (valid during the callback only) when code is OK. */
typedef void (*zt_rpc_done_fn)(void *arg, zt_rpc_code code, const char *message,
                               const uint8_t *reply, size_t len);
zt_rpc_cq *zt_rpc_cq_create(void);
/* Cancels nothing: wait for your calls to complete first. NULL is a no-op. */
void zt_rpc_cq_destroy(zt_rpc_cq *q);
/* Starts a call; done runs from zt_rpc_cq_poll. Thread-safe. */
zt_status zt_rpc_unary_async(zt_rpc_client *c, zt_rpc_cq *q, const char *path,
                             const ProtobufCMessage *request, int timeout_ms, zt_rpc_done_fn done,
                             void *arg, zt_err *err);
/* The same with a bearer token of its own (NULL: the client's). */
zt_status zt_rpc_unary_async_as(zt_rpc_client *c, zt_rpc_cq *q, const char *path,
                                const char *token, const ProtobufCMessage *request,
                                int timeout_ms, zt_rpc_done_fn done, void *arg, zt_err *err);
/* Same with a request encoded already (copied). */
zt_status zt_rpc_unary_async_bytes(zt_rpc_client *c, zt_rpc_cq *q, const char *path,
                                   const void *request, size_t len, int timeout_ms,
                                   zt_rpc_done_fn done, void *arg, zt_err *err);
/* Runs completions for up to timeout_ms (0 = only what is ready, at most one wait); returns
 * how many ran. Several threads may poll one queue. */
int zt_rpc_cq_poll(zt_rpc_cq *q, int timeout_ms);

#endif
