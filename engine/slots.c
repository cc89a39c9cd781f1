/* zerotrain: the engine's working slots — fp32 compute copies of units (a 16-bit widening, or a
 * stage-3 gather started ahead of use and kept for reuse while its slot is not needed) and the
 * fp32 scratch where a unit's backward accumulates its gradient before it is folded into the
 * gradients or reduce-scattered. */
#include "engine_int.h"

#include "../common/alloc.h"
#include "../common/crc32c.h"
#include "../common/timeutil.h"

/* Fences of the copy stream (zt_ops.copy_async) with offload_param on a CUDA rank: parameter
 * slot i's buffer free for its next fill (its last reader on the compute stream is queued) and
 * its shard landed; gradient slot j's stage summed, and its last transfer done. */
#define FENCE_PSLOT_FREE(i) (i)
#define FENCE_PSLOT_UP(i) (4 + (i))
#define FENCE_GSLOT_SUM(j) (8 + (j))
#define FENCE_GSLOT_COPY(j) (11 + (j))
_Static_assert(FENCE_GSLOT_COPY(2) < ZT_COPY_FENCES, "slot fences beyond the copy stream's");

/* ---- parameter slots: compute copies of units ---- */

static zt_pslot *pslot_find(zt_engine *e, int u)
{
    for (int i = 0; i < e->npslots; i++)
        if (e->pslots[i].unit == u)
            return &e->pslots[i];
    return NULL;
}

static zt_status pslot_wait(zt_engine *e, zt_pslot *s, zt_err *err)
{
    if (!s->gathering)
        return ZT_OK;
    uint64_t t0 = zt_now_ns();
    zt_status st = zt_comm_wait(e->comm, s->req, err);
    e->t_comm += (double)(zt_now_ns() - t0) * 1e-9;
    s->gathering = 0;
    s->req = NULL;
    if (st != ZT_OK) {
        s->unit = -1;
        return st;
    }
    if (s->cbuf != (float *)s->gbuf)
        e->ops->cast(e->k, s->cbuf, ZT_F32, s->gbuf, e->pdt, e->P[s->unit]);
    if (e->params_host) /* the gather's buffer is read (the cast) or in use from here on */
        e->ops->fence_record(e->k, FENCE_PSLOT_FREE((int)(s - e->pslots)));
    return ZT_OK;
}

/* Starts filling slot s with unit u (gathered per use: async all-gather; else a synchronous
 * cast). */
static zt_status pslot_fill(zt_engine *e, zt_pslot *s, int u, zt_err *err)
{
    s->unit = u;
    s->stamp = ++e->pstamp;
    if (zt_zero_gathers_per_use(e->zero)) {
        void *shard;
        zt_status st = zt_engine_param_ptr(e, u, zt_zero_param_span(e->zero, u).start,
                                           ZT_PARAM_READ, &shard, err);
        if (st != ZT_OK) {
            s->unit = -1;
            return st;
        }
        void *mine = (char *)s->gbuf + (size_t)e->rank * e->S[u] * zt_engine_psize(e);
        if (e->params_host) { /* offload_param: the shard comes up from pinned host memory on
                               * the copy stream, once the slot's last reader is done, beside
                               * the compute queued meanwhile; the gather waits for it */
            int i = (int)(s - e->pslots);
            e->ops->copy_async(e->k, mine, shard, e->S[u] * zt_engine_psize(e),
                               FENCE_PSLOT_FREE(i), FENCE_PSLOT_UP(i));
            e->ops->fence_wait(e->k, FENCE_PSLOT_UP(i));
        } else
            e->ops->copy_d2d(e->k, mine, shard, e->S[u] * zt_engine_psize(e));
        s->gathering = 1;
        st = zt_comm_allgather(e->comm, mine, s->gbuf, e->S[u], e->pdt, &s->req, err);
        if (st != ZT_OK) {
            s->gathering = 0;
            s->unit = -1;
        }
        return st;
    }
    e->ops->cast(e->k, s->cbuf, ZT_F32, zt_engine_param_at(e, u, 0), e->pdt, e->P[u]);
    return ZT_OK;
}

static zt_pslot *pslot_victim(zt_engine *e, int u)
{
    if (u == 0)
        return e->pslots[0].busy ? NULL : &e->pslots[0];
    zt_pslot *best = NULL;
    for (int i = 1; i < e->npslots; i++) {
        zt_pslot *s = &e->pslots[i];
        if (s->busy)
            continue;
        if (!best || s->unit < 0 || (best->unit >= 0 && s->stamp < best->stamp))
            best = s;
        if (s->unit < 0)
            break;
    }
    return best;
}

/* The fp32 compute copy of unit u's parameters; stays valid until zt_engine_param_release. */
zt_status zt_engine_param_acquire(zt_engine *e, int u, float **out, zt_err *err)
{
    /* the optimizer step finishing in the background updates unit u first */
    zt_status st = zt_engine_optim_ready(e, u, err);
    if (st != ZT_OK)
        return st;
    if (zt_engine_params_direct(e)) {
        *out = zt_engine_param_at(e, u, 0);
        return ZT_OK;
    }
    zt_pslot *s = pslot_find(e, u);
    if (!s) {
        s = pslot_victim(e, u);
        if (!s)
            return zt_err_set(err, ZT_ERR_INTERNAL, "no free parameter slot for unit %d", u);
        if ((st = pslot_wait(e, s, err)) != ZT_OK)
            return st;
        if ((st = pslot_fill(e, s, u, err)) != ZT_OK)
            return st;
    }
    if ((st = pslot_wait(e, s, err)) != ZT_OK)
        return st;
    s->busy++;
    s->stamp = ++e->pstamp;
    *out = s->cbuf;
    return ZT_OK;
}

/* Starts gathering unit u ahead of use (gathered per use); a no-op otherwise or without a free
 * slot. */
zt_status zt_engine_param_prefetch(zt_engine *e, int u, zt_err *err)
{
    if (!zt_zero_gathers_per_use(e->zero) || u < 0 || u >= e->nu || pslot_find(e, u))
        return ZT_OK;
    zt_pslot *s = pslot_victim(e, u);
    if (!s || s->gathering)
        return ZT_OK;
    zt_status st = zt_engine_optim_ready(e, u, err); /* as in zt_engine_param_acquire */
    return st == ZT_OK ? pslot_fill(e, s, u, err) : st;
}

void zt_engine_param_release(zt_engine *e, int u)
{
    if (zt_engine_params_direct(e))
        return;
    zt_pslot *s = pslot_find(e, u);
    if (s && s->busy > 0)
        s->busy--;
    if (s && !s->busy && e->params_host) /* its readers are queued: free for the next fill */
        e->ops->fence_record(e->k, FENCE_PSLOT_FREE((int)(s - e->pslots)));
    /* a unit used again soon is not re-gathered, unless the partition drops it after use */
    if (s && !s->busy && zt_zero_release_after_use(e->zero))
        s->unit = -1;
}

/* Parameters changed: every cached compute copy is stale. */
zt_status zt_engine_params_invalidate(zt_engine *e, zt_err *err)
{
    zt_status st = ZT_OK;
    for (int i = 0; i < e->npslots; i++) {
        zt_status s2 = pslot_wait(e, &e->pslots[i], err);
        if (s2 != ZT_OK && st == ZT_OK)
            st = s2;
        e->pslots[i].unit = -1;
        e->pslots[i].busy = 0;
    }
    return st;
}

/* ---- gradient slots ---- */

static zt_gslot *gslot_find(zt_engine *e, int u)
{
    for (int i = 0; i < e->ngslots; i++)
        if (e->gslots[i].unit == u)
            return &e->gslots[i];
    return NULL;
}

/* offload_param: adds unit u's reduced chunk to its slice of the gradient shard in pinned host
 * memory, through slot g's stage on the device, so that the sum is the device's own (bitwise):
 * the slice comes up on the copy stream (at the step's first micro-step it holds zeros: a memset
 * instead), the chunk is added on the compute stream, and the sum goes down on the copy stream
 * while the compute goes on. */
static void gslot_offload(zt_engine *e, zt_gslot *g, int u, const float *chunk, bool first)
{
    int j = (int)(g - e->gslots);
    size_t bytes = e->S[u] * zt_engine_gsize(e);
    void *slice = zt_engine_grad_at(e, u, (size_t)e->rank * e->S[u]);
    if (first) {
        e->ops->fence_wait(e->k, FENCE_GSLOT_COPY(j)); /* the stage's last trip down is done */
        e->ops->memset0(e->k, g->stage, bytes);
    } else { /* behind the stage's last trip down, and the slice's, on the copy stream */
        e->ops->copy_async(e->k, g->stage, slice, bytes, -1, FENCE_GSLOT_COPY(j));
        e->ops->fence_wait(e->k, FENCE_GSLOT_COPY(j));
    }
    e->ops->accumulate(e->k, g->stage, e->gdt, chunk, 1.0f, e->S[u]);
    e->ops->fence_record(e->k, FENCE_GSLOT_SUM(j));
    e->ops->copy_async(e->k, slice, g->stage, bytes, FENCE_GSLOT_SUM(j), FENCE_GSLOT_COPY(j));
}

/* Completes a pending reduce-scatter: adds this rank's reduced chunk into its gradient shard. */
static zt_status gslot_complete(zt_engine *e, zt_gslot *g, zt_err *err)
{
    if (!g->pending) {
        g->unit = -1;
        return ZT_OK;
    }
    int u = g->unit;
    uint64_t t0 = zt_now_ns();
    zt_status st = zt_comm_wait(e->comm, g->req, err);
    e->t_comm += (double)(zt_now_ns() - t0) * 1e-9;
    g->pending = 0;
    g->req = NULL;
    g->unit = -1;
    if (st != ZT_OK)
        return st;
    size_t off = (size_t)e->rank * e->S[u];
    float *chunk = g->buf + off;
    if (e->gdt != ZT_F32)
        e->ops->cast(e->k, chunk, ZT_F32, (char *)g->buf16 + off * 2, e->gdt, e->S[u]);
    if (zt_engine_grads_host(e))
        gslot_offload(e, g, u, chunk, g->first);
    else
        e->ops->accumulate(e->k, zt_engine_grad_at(e, u, off), e->gdt, chunk, 1.0f, e->S[u]);
    return ZT_OK;
}

/* The fp32 buffer where unit u's backward accumulates its gradient this micro-step. */
zt_status zt_engine_grad_acquire(zt_engine *e, int u, float **out, zt_err *err)
{
    if (zt_engine_grads_direct(e)) {
        *out = zt_engine_grad_at(e, u, 0);
        return ZT_OK;
    }
    zt_gslot *g = gslot_find(e, u);
    if (!g || g->pending) {
        if (g) {
            zt_status st = gslot_complete(e, g, err);
            if (st != ZT_OK)
                return st;
        }
        if (u == 0) {
            g = &e->gslots[0];
        } else {
            /* the two general slots rotate, so the one taken holds the oldest reduction */
            g = &e->gslots[e->gnext];
            e->gnext = e->gnext == 1 ? 2 : 1;
        }
        if (g->unit >= 0) {
            zt_status st = gslot_complete(e, g, err);
            if (st != ZT_OK)
                return st;
        }
        g->unit = u;
        e->ops->memset0(e->k, g->buf, e->P[u] * sizeof(float));
    }
    *out = g->buf;
    return ZT_OK;
}

/* Unit u's gradient for this micro-step is complete: fold it into the accumulation buffer,
 * or start its reduce-scatter, as the partition says. */
zt_status zt_engine_grad_finish(zt_engine *e, int u, zt_err *err)
{
    if (zt_engine_grads_direct(e))
        return ZT_OK;
    zt_gslot *g = gslot_find(e, u);
    if (!g)
        return zt_err_set(err, ZT_ERR_INTERNAL, "gradient of unit %d finished but not acquired", u);
    if (zt_zero_micro(e->zero) == ZT_ZERO_MICRO_ACCUMULATE) {
        e->ops->accumulate(e->k, zt_engine_grad_at(e, u, 0), e->gdt, g->buf, 1.0f,
                           e->lay.unit_numel[u]);
        g->unit = -1;
        return ZT_OK;
    }
    size_t off = (size_t)e->rank * e->S[u];
    zt_status st;
    if (e->gdt == ZT_F32) {
        st = zt_comm_reduce_scatter(e->comm, g->buf, g->buf + off, e->S[u], ZT_F32, &g->req, err);
    } else {
        e->ops->cast(e->k, g->buf16, e->gdt, g->buf, ZT_F32, e->P[u]);
        st = zt_comm_reduce_scatter(e->comm, g->buf16, (char *)g->buf16 + off * 2, e->S[u], e->gdt,
                                    &g->req, err);
    }
    if (st != ZT_OK) {
        g->unit = -1;
        return st;
    }
    g->pending = 1;
    g->first = e->grads_first;
    return ZT_OK;
}

/* Completes every reduce-scatter still in flight and frees every gradient slot. */
zt_status zt_engine_grads_drain(zt_engine *e, zt_err *err)
{
    zt_status st = ZT_OK;
    for (int i = 0; i < e->ngslots; i++) {
        if (e->gslots[i].unit < 0)
            continue;
        zt_status s2 = gslot_complete(e, &e->gslots[i], err);
        if (s2 != ZT_OK && st == ZT_OK)
            st = s2;
    }
    if (zt_engine_grads_host(e)) /* what reads the gradient shard next waits for its copies */
        for (int i = 0; i < e->ngslots; i++)
            e->ops->fence_wait(e->k, FENCE_GSLOT_COPY(i));
    return st;
}

/* ---- export ---- */

zt_status zt_engine_param_digest(zt_engine *e, uint32_t *crc, zt_err *err)
{
    zt_status st = ZT_OK;
    size_t maxp = e->P[0] > e->max_unit_p ? e->P[0] : e->max_unit_p;
    void *host = zt_malloc(maxp * zt_engine_psize(e));
    if (!host)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    uint32_t c = 0;
    st = zt_engine_optim_ready(e, -1, err);
    for (int u = 0; u < e->nu && st == ZT_OK; u++) {
        size_t bytes = e->lay.unit_numel[u] * zt_engine_psize(e);
        if (!zt_zero_params_sharded(e->zero)) {
            e->ops->copy_d2h(e->k, host, zt_engine_param_at(e, u, 0), bytes);
        } else {
            float *p;
            if ((st = zt_engine_param_acquire(e, u, &p, err)) != ZT_OK)
                break;
            e->ops->copy_d2h(e->k, host, pslot_find(e, u)->gbuf, bytes);
            zt_engine_param_release(e, u);
        }
        if ((st = e->ops->sync(e->k, err)) == ZT_OK)
            c = zt_crc32c(c, host, bytes);
    }
    zt_free(host);
    *crc = c;
    return st;
}

