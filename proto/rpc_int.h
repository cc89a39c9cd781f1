/* zerotrain: what only proto/rpc_*.c may see. */
#ifndef ZT_PROTO_RPC_INT_H
#define ZT_PROTO_RPC_INT_H

#include <grpc/grpc.h>

/* A completion-queue tag: the event's callback lives inside the object it concerns. */
typedef struct zt_rpc_tag {
    void (*fn)(struct zt_rpc_tag *tag, bool ok);
} zt_rpc_tag;

/* Routes gRPC's log lines into ZT_LOG (warnings and up unless ZT_LOG_LEVEL=debug). Call
 * before grpc_init; idempotent. */
void zt_rpc_init_logging(void);

#define ZT_RPC_DEFAULT_MAX_MESSAGE (4u << 20)

#endif
