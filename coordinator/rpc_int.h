/* zerotrain: what zcoord's RPC handlers (coordinator/rpc*.c) share: the descriptor of a method
 * that the one handler skeleton in rpc.c runs, the operation a method queues for the state
 * thread, and the checks of who may report what. */
#ifndef ZT_COORDINATOR_RPC_INT_H
#define ZT_COORDINATOR_RPC_INT_H

#include "coordinator/coord_int.h"

typedef struct c_rpc_desc c_rpc_desc;

/* An RPC's operation for the state thread. The method's run() sets code and msg when it
 * refuses the request (nothing stored); its reply() answers a committed one. Operations that
 * carry more embed it first. */
typedef struct c_rpc_op {
    c_op op;
    const c_rpc_desc *d;
    const void *q;  /* the request, owned by the call */
    const char *me; /* the calling agent (coord_rpc_caller) */
    zt_rpc_code code;
    size_t msg_cap; /* how much of msg this method's messages may fill */
    char msg[1200];
    bool handed_on; /* run() gave the call to others to answer (rendezvous waiters) */
} c_rpc_op;

/* Checks a call passes before its method's own code runs, in this order. */
enum {
    RPC_SERVING = 1u << 0, /* refused with UNAVAILABLE while the coordinator shuts down */
    RPC_STRINGS = 1u << 1, /* every string field is UTF-8 (zt_check_strings) */
};

struct c_rpc_desc {
    const char *path; /* "/zt.v1.Coordinator/SubmitJob" */
    const ProtobufCMessageDescriptor *request;
    bool server_stream;
    zt_rpc_access access;
    int preposted;   /* zt_rpc_method.preposted */
    unsigned checks; /* RPC_SERVING | RPC_STRINGS */
    /* the request's own check (validate.c); false: INVALID_ARGUMENT with why */
    bool (*check)(const ProtobufCMessage *q, char *why, size_t cap);
    /* whether the caller may make this call; false: it has been answered */
    bool (*permit)(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *q);
    /* answers the call or hands it on (reader thread, watchers); NULL: queue an operation */
    void (*body)(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *q);

    /* ---- methods that queue an operation for the state thread (body NULL) ---- */
    size_t op_size;   /* of the operation, c_rpc_op first */
    size_t msg_cap;   /* at most sizeof(c_rpc_op.msg) */
    const char *what; /* what was not stored when the batch rolled back: "the job" */
    /* fills what the operation needs beyond the request; false: the call has been answered */
    bool (*prepare)(zt_coord *c, zt_rpc_call *call, c_rpc_op *x);
    void (*run)(zt_coord *c, c_op *op);      /* inside the batch, mu held */
    void (*reply)(zt_coord *c, c_rpc_op *x); /* after the commit, x->code being OK */
    void (*release)(c_rpc_op *x);            /* frees what prepare and run allocated; NULL: none */
};

/* The methods of each service, in the order /metrics lists them. */
extern const c_rpc_desc coord_rpc_user[]; /* zt.v1.Coordinator (rpc_user.c) */
extern const size_t coord_rpc_n_user;
extern const c_rpc_desc coord_rpc_agent[]; /* zt.v1.AgentControl (rpc_agent.c) */
extern const size_t coord_rpc_n_agent;
extern const c_rpc_desc coord_rpc_health[]; /* grpc.health.v1.Health (rpc_user.c) */
extern const size_t coord_rpc_n_health;

/* ---- who may report what (rpc.c) ---- */

/* The agent the call's key belongs to, "" when the coordinator runs without credentials
 * (an embedding without zt_auth: nothing to check), "?" for a caller that is no agent. */
const char *coord_rpc_caller(const zt_coord *c, const zt_rpc_call *call);
/* permit() of agent reports: PERMISSION_DENIED when the request's `agent` field names another
 * agent than the caller's key (an empty field means the caller). */
bool coord_rpc_permit_agent_field(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *q);
/* Whether the coordinator placed rank `rank` of attempt `id` on agent `me` (state thread):
 * live and just-ended attempts from memory, older ones from the store. ZT_RPC_OK; NOT_FOUND
 * (no such attempt or rank); PERMISSION_DENIED (it runs elsewhere). msg says which. */
zt_rpc_code coord_rpc_placed_on(zt_coord *c, const char *me, int64_t id, int rank, char *msg,
                                size_t cap);
/* ZT_RPC_OK when dir lies directly in job_id's checkpoint_dir (jobs no longer in memory are
 * not checked), else PERMISSION_DENIED with the message in msg. */
zt_rpc_code coord_rpc_ckpt_dir_of_job(zt_coord *c, int64_t job_id, const char *dir, char *msg,
                                      size_t cap);

/* An attempt as reports that may come after it ended need it. */
typedef struct c_attempt_info {
    bool found;
    int64_t job_id;
    int world_size;
    zt_attempt_state state;
} c_attempt_info;

/* Active and just-ended attempts from memory, older ones from the store (state thread). A
 * store error fails the batch and is returned. */
zt_status coord_rpc_attempt_info(zt_coord *c, int64_t id, c_attempt_info *ai);

#endif
