/* zerotrain: zcoord's RPC methods run through one handler skeleton: the checks each method's
 * descriptor asks for (rpc_int.h), then its body, or an operation queued for the state thread
 * and answered after the commit. Also the checks of who may report what, and the method table
 * with the counters /metrics reads. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator/rpc_int.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "common/alloc.h"
#include "coordinator/auth.h"
#include "coordinator/validate.h"

/* ---- the skeleton -------------------------------------------------------------------------- */

/* After the batch: the answer of an operation, then the operation is freed. */
static void op_done(zt_coord *c, c_op *op, bool committed)
{
    c_rpc_op *x = (c_rpc_op *)op;
    if (x->handed_on) {
        /* answered by the publish step (or failed by the reload after a rollback) */
    } else if (!committed) {
        zt_rpc_fail(op->call, ZT_RPC_UNAVAILABLE, "%s was not stored: %s; retry", x->d->what,
                    c->batch_failed ? zt_err_msg(&c->batch_err)
                                    : "the coordinator is shutting down");
    } else if (x->code != ZT_RPC_OK) {
        zt_rpc_fail(op->call, x->code, "%s", x->msg);
    } else {
        x->d->reply(c, x);
    }
    if (x->d->release) x->d->release(x);
    zt_free(x);
}

static void op_queue(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *q, const c_rpc_desc *d)
{
    c_rpc_op *x = zt_calloc(1, d->op_size);
    if (!x) {
        zt_rpc_fail(call, ZT_RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    x->op.run = d->run;
    x->op.done = op_done;
    x->op.call = call;
    x->d = d;
    x->q = q;
    x->me = coord_rpc_caller(c, call);
    x->msg_cap = d->msg_cap;
    if (d->prepare && !d->prepare(c, call, x)) {
        if (d->release) d->release(x);
        zt_free(x);
        return;
    }
    coord_enqueue(c, &x->op);
}

/* Calls of one method: counted for /metrics, checked, then answered or handed on. */
static void rpc_call(zt_rpc_call *call, const ProtobufCMessage *q, void *user)
{
    c_rpc_stat *st = user;
    const c_rpc_desc *d = st->desc;
    zt_coord *c = st->coord;
    char why[512];
    atomic_fetch_add_explicit(&st->calls, 1, memory_order_relaxed);
    if ((d->checks & RPC_SERVING) && !atomic_load(&c->serving)) {
        zt_rpc_fail(call, ZT_RPC_UNAVAILABLE, "the coordinator is shutting down; retry shortly");
        return;
    }
    if ((d->checks & RPC_STRINGS) && !zt_check_strings(q, why, sizeof(why))) goto invalid;
    if (d->check && !d->check(q, why, sizeof(why))) goto invalid;
    if (d->permit && !d->permit(c, call, q)) return;
    if (d->body)
        d->body(c, call, q);
    else
        op_queue(c, call, q, d);
    return;
invalid:
    zt_rpc_fail(call, ZT_RPC_INVALID_ARGUMENT, "%s", why);
}

/* ---- who may report what ----------------------------------------------------------------- */

const char *coord_rpc_caller(const zt_coord *c, const zt_rpc_call *call)
{
    if (!c->cfg.auth) return "";
    const char *n = zt_auth_agent_name(zt_rpc_call_identity(call));
    return n ? n : "?";
}

/* The request's string field `agent` (protobuf-c reflection: each agent report has one). */
static const char *agent_field(const ProtobufCMessage *q)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(q->descriptor, "agent");
    return f ? *(char *const *)((const char *)q + f->offset) : NULL;
}

bool coord_rpc_permit_agent_field(zt_coord *c, zt_rpc_call *call, const ProtobufCMessage *q)
{
    const char *me = coord_rpc_caller(c, call), *field = agent_field(q);
    if (!me[0] || !field || !field[0] || strcmp(field, me) == 0) return true;
    zt_rpc_fail(call, ZT_RPC_PERMISSION_DENIED,
                "permission denied: the key of agent %s cannot report as agent %s", me, field);
    return false;
}

typedef struct rank_agent_find {
    int rank;
    char agent[160];
    bool found;
} rank_agent_find;

static void on_rank_agent(void *arg, const zt_rank_rec *r)
{
    rank_agent_find *f = arg;
    if (r->rank == f->rank) {
        snprintf(f->agent, sizeof(f->agent), "%s", r->agent);
        f->found = true;
    }
}

/* Whether dir (".../step_<n>", checked by validate.c) lies directly in the checkpoint_dir of
 * job j's resolved spec. Jobs no longer in memory are not checked here. */
static bool in_job_ckpt_dir(const c_job *j, const char *dir)
{
    if (!j || !j->spec_json) return true;
    json_t *root = json_loads(j->spec_json, 0, NULL);
    const char *cd =
        json_string_value(json_object_get(json_object_get(root, "train"), "checkpoint_dir"));
    bool ok = false;
    const char *slash = strrchr(dir, '/');
    if (cd && slash) {
        size_t n = strlen(cd);
        while (n > 1 && cd[n - 1] == '/')
            n--;
        ok = (size_t)(slash - dir) == n && strncmp(dir, cd, n) == 0;
    }
    json_decref(root);
    return ok;
}

zt_rpc_code coord_rpc_ckpt_dir_of_job(zt_coord *c, int64_t job_id, const char *dir, char *msg,
                                      size_t cap)
{
    if (in_job_ckpt_dir(coord_job_find(c, job_id), dir)) return ZT_RPC_OK;
    snprintf(msg, cap, "permission denied: %.200s is not a checkpoint in job %lld's checkpoint_dir",
             dir, (long long)job_id);
    return ZT_RPC_PERMISSION_DENIED;
}

zt_rpc_code coord_rpc_placed_on(zt_coord *c, const char *me, int64_t id, int rank, char *msg,
                                size_t cap)
{
    if (!me[0]) return ZT_RPC_OK;
    c_attempt *t = coord_attempt_find(c, id);
    if (!t)
        for (size_t i = 0; i < c->n_grave && !t; i++)
            if (c->grave[i]->id == id) t = c->grave[i];
    const char *where = NULL;
    rank_agent_find f = {.rank = rank};
    if (t) {
        if (rank < 0 || rank >= t->world_size) {
            snprintf(msg, cap, "rank %d is outside attempt %lld's world of %d", rank, (long long)id,
                     t->world_size);
            return ZT_RPC_NOT_FOUND;
        }
        where = t->ranks[rank].agent ? t->ranks[rank].agent->name : "";
    } else {
        zt_err e = {0};
        if (zt_store_ranks_list(c->store, id, on_rank_agent, &f, &e) != ZT_OK) {
            snprintf(msg, cap, "%s", zt_err_msg(&e));
            return ZT_RPC_UNAVAILABLE;
        }
        if (!f.found) {
            snprintf(msg, cap, "rank %d of attempt %lld not found", rank, (long long)id);
            return ZT_RPC_NOT_FOUND;
        }
        where = f.agent;
    }
    if (strcmp(where, me) != 0) {
        snprintf(
            msg, cap,
            "permission denied: rank %d of attempt %lld was not placed on agent %s; an agent reports only its own ranks",
            rank, (long long)id, me);
        return ZT_RPC_PERMISSION_DENIED;
    }
    return ZT_RPC_OK;
}

/* ---- attempts that reports may name after they ended -------------------------------------- */

static void on_attempt_info(void *arg, const zt_attempt_rec *r)
{
    c_attempt_info *ai = arg;
    ai->found = true;
    ai->job_id = r->job_id;
    ai->world_size = r->world_size;
    ai->state = r->state;
}

zt_status coord_rpc_attempt_info(zt_coord *c, int64_t id, c_attempt_info *ai)
{
    memset(ai, 0, sizeof(*ai));
    c_attempt *t = coord_attempt_find(c, id);
    if (!t)
        for (size_t i = 0; i < c->n_grave && !t; i++)
            if (c->grave[i]->id == id) t = c->grave[i];
    if (t) {
        ai->found = true;
        ai->job_id = t->job->id;
        ai->world_size = t->world_size;
        ai->state = t->state;
        return ZT_OK;
    }
    zt_err e = {0};
    zt_status st = zt_store_attempt_get(c->store, id, on_attempt_info, ai, &e);
    if (st != ZT_OK && st != ZT_ERR_NOT_FOUND) {
        coord_db_failed(c, &e);
        return st;
    }
    return ZT_OK;
}

/* ---- the method table -------------------------------------------------------------------- */

/* The call's latency, arrival to answer, for /metrics. */
static void observed_call(void *user, uint64_t ns, zt_rpc_code code)
{
    (void)code;
    coord_hist_observe(&((c_rpc_stat *)user)->latency, ns);
}

size_t coord_rpc_methods(zt_coord *c, zt_rpc_method *m, size_t cap)
{
    const struct {
        const c_rpc_desc *v;
        size_t n;
    } services[] = {{coord_rpc_user, coord_rpc_n_user},
                    {coord_rpc_agent, coord_rpc_n_agent},
                    {coord_rpc_health, coord_rpc_n_health}};
    if (cap > COORD_MAX_METHODS) cap = COORD_MAX_METHODS;
    size_t n = 0;
    for (size_t s = 0; s < sizeof(services) / sizeof(services[0]); s++) {
        for (size_t i = 0; i < services[s].n && n < cap; i++, n++) {
            const c_rpc_desc *d = &services[s].v[i];
            c_rpc_stat *st = &c->rpc_stats[n];
            st->path = d->path;
            st->desc = d;
            st->coord = c;
            atomic_store(&st->calls, 0);
            m[n] = (zt_rpc_method){.path = d->path,
                                   .request_type = d->request,
                                   .server_stream = d->server_stream,
                                   .handler = rpc_call,
                                   .user = st,
                                   .preposted = d->preposted,
                                   .observe = observed_call,
                                   .observe_user = st,
                                   .access = d->access};
        }
    }
    c->n_rpc_stats = n;
    return n;
}
