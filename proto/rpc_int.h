/* zerotrain: what only proto/rpc_*.c may see. */
#ifndef ZT_PROTO_RPC_INT_H
#define ZT_PROTO_RPC_INT_H

#include <grpc/grpc.h>

/* A completion-queue tag: the event's callback lives inside the object it concerns. */
typedef struct zt_rpc_tag {
    void (*fn)(struct zt_rpc_tag *tag, bool ok);
} zt_rpc_tag;

/* Before grpc_init (idempotent): routes gRPC's log lines into ZT_LOG (warnings and up unless
 * ZT_LOG_LEVEL=debug) and turns off abseil's lock-order tracking (rpc_absl.cc). */
void zt_rpc_init_process(void);

#define ZT_RPC_DEFAULT_MAX_MESSAGE (4u << 20)

#endif
