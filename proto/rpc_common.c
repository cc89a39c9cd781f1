/* zerotrain: what the RPC server and client share: status-code translation, the protobuf-c
 * allocator over zt_malloc, and the process setup before gRPC starts (gRPC's own log lines
 * routed into ZT_LOG, abseil's lock-order tracking off). */
#define _POSIX_C_SOURCE 200809L
#include "proto/rpc.h"

#include <grpc/support/log.h>

#include "common/alloc.h"
#include "common/log.h"
#include "proto/rpc_int.h"

const char *zt_rpc_code_name(zt_rpc_code code)
{
    static const char *const names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if ((int)code < 0 || (size_t)code >= sizeof(names) / sizeof(names[0])) return "UNKNOWN";
    return names[code];
}

zt_rpc_code zt_rpc_code_from_status(zt_status st)
{
    switch (st) {
    case ZT_OK:
        return ZT_RPC_OK;
    case ZT_ERR_INVALID:
    case ZT_ERR_CONFIG:
    case ZT_ERR_FORMAT:
        return ZT_RPC_INVALID_ARGUMENT;
    case ZT_ERR_NOT_FOUND:
        return ZT_RPC_NOT_FOUND;
    case ZT_ERR_EXISTS:
        return ZT_RPC_ALREADY_EXISTS;
    case ZT_ERR_STATE:
        return ZT_RPC_FAILED_PRECONDITION;
    case ZT_ERR_AUTH:
        return ZT_RPC_UNAUTHENTICATED;
    case ZT_ERR_TIMEOUT:
        return ZT_RPC_DEADLINE_EXCEEDED;
    case ZT_ERR_CANCELED:
        return ZT_RPC_CANCELLED;
    case ZT_ERR_UNSUPPORTED:
        return ZT_RPC_UNIMPLEMENTED;
    case ZT_ERR_NOMEM:
    case ZT_ERR_NOSPACE:
        return ZT_RPC_RESOURCE_EXHAUSTED;
    case ZT_ERR_IO:
    case ZT_ERR_DB:
    case ZT_ERR_PEER:
        return ZT_RPC_UNAVAILABLE;
    case ZT_ERR_CORRUPT:
        return ZT_RPC_DATA_LOSS;
    default:
        return ZT_RPC_INTERNAL;
    }
}

zt_status zt_rpc_status_from_code(zt_rpc_code code)
{
    switch (code) {
    case ZT_RPC_OK:
        return ZT_OK;
    case ZT_RPC_CANCELLED:
        return ZT_ERR_CANCELED;
    case ZT_RPC_INVALID_ARGUMENT:
    case ZT_RPC_OUT_OF_RANGE:
        return ZT_ERR_INVALID;
    case ZT_RPC_DEADLINE_EXCEEDED:
        return ZT_ERR_TIMEOUT;
    case ZT_RPC_NOT_FOUND:
        return ZT_ERR_NOT_FOUND;
    case ZT_RPC_ALREADY_EXISTS:
        return ZT_ERR_EXISTS;
    case ZT_RPC_PERMISSION_DENIED:
    case ZT_RPC_UNAUTHENTICATED:
        return ZT_ERR_AUTH;
    case ZT_RPC_RESOURCE_EXHAUSTED:
        return ZT_ERR_NOSPACE;
    case ZT_RPC_FAILED_PRECONDITION:
    case ZT_RPC_ABORTED:
        return ZT_ERR_STATE;
    case ZT_RPC_UNIMPLEMENTED:
        return ZT_ERR_UNSUPPORTED;
    case ZT_RPC_UNAVAILABLE:
        return ZT_ERR_PEER;
    case ZT_RPC_DATA_LOSS:
        return ZT_ERR_CORRUPT;
    default:
        return ZT_ERR_RPC;
    }
}

static void *pb_alloc(void *data, size_t size)
{
    (void)data;
    return zt_malloc(size);
}

static void pb_free(void *data, void *p)
{
    (void)data;
    zt_free(p);
}

ProtobufCAllocator zt_pb_allocator = {pb_alloc, pb_free, NULL};

void *zt_pb_unpack(const ProtobufCMessageDescriptor *type, const uint8_t *data, size_t len)
{
    return protobuf_c_message_unpack(type, &zt_pb_allocator, len, data);
}

void zt_pb_free(void *msg)
{
    if (msg) protobuf_c_message_free_unpacked((ProtobufCMessage *)msg, &zt_pb_allocator);
}

uint8_t *zt_pb_pack(const ProtobufCMessage *msg, size_t *len)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = zt_malloc(n ? n : 1);
    if (!buf) return NULL;
    *len = protobuf_c_message_pack(msg, buf);
    return buf;
}

static void grpc_log_to_zt(gpr_log_func_args *args)
{
    /* gRPC's "error" lines are mostly about peers going away: a warning for us. */
    if (args->severity == GPR_LOG_SEVERITY_ERROR)
        ZT_WARN("grpc", "%s:%d: %s", args->file, args->line, args->message);
    else
        ZT_DEBUG("grpc", "%s:%d: %s", args->file, args->line, args->message);
}

#ifdef ZT_RPC_HAVE_ABSL
void zt_rpc_absl_untrack_locks(void); /* rpc_absl.cc */
#endif

void zt_rpc_init_process(void)
{
#ifdef ZT_RPC_HAVE_ABSL
    zt_rpc_absl_untrack_locks();
#endif
    gpr_set_log_function(grpc_log_to_zt);
    if (zt_log_level_current < ZT_LOG_DEBUG) gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);
}
