/* zerotrain: the training engine of one rank (see engine.h). One code path for every ZeRO
 * stage: parameters live in per-unit padded flat buffers; a unit's compute copy is obtained
 * with param_acquire (a pointer into the parameters, a 16-bit widening, or a stage-3 gather)
 * and its gradient with grad_acquire/grad_finish (accumulated in place, or reduce-scattered
 * unit by unit as backward produces it). The optimizer updates only this rank's region. */
#define _POSIX_C_SOURCE 200809L
#include "engine_int.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/crc32c.h"
#include "../common/log.h"
#include "../common/timeutil.h"
#include "../kernels/cuda/cuda_plan.h"
#include "ckpt.h"
#include "monitor.h"
#include "data/modelfile.h"

#define CHECK(expr, label)                                                                         \
    do {                                                                                           \
        st = (expr);                                                                               \
        if (st != ZT_OK)                                                                           \
            goto label;                                                                            \
    } while (0)

static size_t round_up(size_t x, size_t m)
{
    return (x + m - 1) / m * m;
}

static void report_line(zt_engine *e, const char *line);

/* Largest host segment of an offloaded optimizer step (elements): the unit of its pipeline
 * (4 MiB of fp32 gradients, a few hundred microseconds over PCIe). */
#define ZT_OFFLOAD_PIECE ((size_t)1 << 20)

/* Elements zt_engine_load_unit casts at a time to 16 bits. */
#define ZT_LOAD_PIECE ((size_t)1 << 16)

/* ---- backend memory with accounting ---- */

static void *balloc(zt_engine *e, zt_mem_category cat, size_t bytes)
{
    void *p = e->ops->alloc(e->k, bytes ? bytes : 1);
    if (p) {
        e->ops->memset0(e->k, p, bytes ? bytes : 1);
        zt_memacct_charge(&e->mem, cat, (int64_t)bytes);
    }
    return p;
}

static void bfree(zt_engine *e, zt_mem_category cat, void *p, size_t bytes)
{
    if (!p)
        return;
    e->ops->free(e->k, p);
    zt_memacct_charge(&e->mem, cat, -(int64_t)bytes);
}

static void *halloc(zt_engine *e, zt_mem_category cat, size_t bytes)
{
    void *p = e->ops->host_alloc(e->k, bytes ? bytes : 1);
    if (p) {
        memset(p, 0, bytes ? bytes : 1);
        zt_memacct_charge(&e->mem, cat, (int64_t)bytes);
    }
    return p;
}

void *zt_engine_comm_alloc(zt_engine *e, size_t bytes)
{
    return balloc(e, ZT_MEM_COMM, bytes);
}

void zt_engine_comm_free(zt_engine *e, void *p, size_t bytes)
{
    bfree(e, ZT_MEM_COMM, p, bytes);
}

static void hfree(zt_engine *e, zt_mem_category cat, void *p, size_t bytes)
{
    if (!p)
        return;
    e->ops->host_free(e->k, p);
    zt_memacct_charge(&e->mem, cat, -(int64_t)bytes);
}

/* ---- partition geometry ---- */

static size_t psize(const zt_engine *e)
{
    return zt_dtype_size(e->pdt);
}

static size_t gsize(const zt_engine *e)
{
    return zt_dtype_size(e->gdt);
}

/* Element j of unit u's optimizer region, in the parameter buffer. */
static void *param_loc(zt_engine *e, int u, size_t j)
{
    size_t idx = e->stage < 3 ? e->foff[u] + e->base[u] + j : e->soff[u] + j;
    return (char *)e->params + idx * psize(e);
}

/* Element j of unit u's optimizer region, in the (reduced) gradient buffer. */
static void *grad_loc(zt_engine *e, int u, size_t j)
{
    size_t idx = e->stage < 2 ? e->foff[u] + e->base[u] + j : e->soff[u] + j;
    return (char *)e->grads + idx * gsize(e);
}

/* Real (unpadded) elements of unit u's optimizer region. */
size_t zt_engine_region_len(const zt_engine *e, int u)
{
    size_t n = e->lay.unit_numel[u];
    size_t olen = e->stage == 0 ? e->P[u] : e->S[u];
    if (e->base[u] >= n)
        return 0;
    size_t r = n - e->base[u];
    return r < olen ? r : olen;
}

/* Where optimizer state `section` (0 the fp32 truth: master weights, or the fp32 parameters
 * themselves; 1 exp_avg; 2 exp_avg_sq) of region element j of unit u lives, and whether that is
 * host memory (the offloaded part). */
static float *state_ptr(zt_engine *e, int u, size_t j, int section, bool *host)
{
    size_t gi = e->ooff[u] + j;
    *host = gi >= e->dev_n;
    if (*host) {
        float *side[3] = {e->h_master, e->h_m, e->h_v};
        return side[section] + (gi - e->dev_n);
    }
    if (section == 0)
        return e->mixed ? e->master + gi : (float *)param_loc(e, u, j);
    return (section == 1 ? e->m : e->v) + gi;
}

float *zt_engine_master_ptr(zt_engine *e, int u, size_t j)
{
    bool host;
    return state_ptr(e, u, j, 0, &host);
}

/* Copies one optimizer state section of region elements [j, j+len) of unit u out of (get) or
 * into (set) its home, piece by piece across the device/host split of offload. */
static void state_io(zt_engine *e, int u, size_t j, size_t len, int section, float *buf, bool set)
{
    while (len > 0) {
        size_t gi = e->ooff[u] + j;
        size_t n = len;
        if (gi < e->dev_n && gi + n > e->dev_n)
            n = e->dev_n - gi;
        bool host;
        float *loc = state_ptr(e, u, j, section, &host);
        if (host)
            memcpy(set ? loc : buf, set ? buf : loc, n * sizeof(float));
        else if (set)
            e->ops->copy_h2d(e->k, loc, buf, n * sizeof(float));
        else
            e->ops->copy_d2h(e->k, buf, loc, n * sizeof(float));
        buf += n;
        j += n;
        len -= n;
    }
}

void zt_engine_region_get(zt_engine *e, int u, size_t j, size_t len, float *out)
{
    state_io(e, u, j, len, 0, out, false);
}

void zt_engine_region_set(zt_engine *e, int u, size_t j, size_t len, const float *in)
{
    state_io(e, u, j, len, 0, (float *)in, true);
}

void zt_engine_moments_get(zt_engine *e, int u, size_t j, size_t len, float *m, float *v)
{
    state_io(e, u, j, len, 1, m, false);
    state_io(e, u, j, len, 2, v, false);
}

void zt_engine_moments_set(zt_engine *e, int u, size_t j, size_t len, const float *m,
                           const float *v)
{
    state_io(e, u, j, len, 1, (float *)m, true);
    state_io(e, u, j, len, 2, (float *)v, true);
}

/* Writes the full fp32 values of unit u (P_u elements, host) into this rank's parameters
 * (cast to the parameter dtype) and optimizer truth. */
/* Counts the non-finite values of each tensor of unit u in vals (the unit's values being
 * loaded) and remembers the first tensor that has any: a model file or checkpoint that holds
 * NaN or Inf makes every step non-finite, and the error then names where it came from. */
static void note_nonfinite_params(zt_engine *e, int u, const float *vals)
{
    const zt_gpt2_layout *lay = &e->lay;
    for (int ti = lay->unit_first_tensor[u]; ti < lay->unit_first_tensor[u + 1]; ti++) {
        const zt_gpt2_tensor *t = &lay->tensors[ti];
        size_t bad = 0;
        for (size_t i = 0; i < t->numel; i++)
            bad += !isfinite(vals[t->offset + i]);
        if (!bad)
            continue;
        e->nonfinite_tensors++;
        if (e->first_nonfinite[0])
            continue;
        char name[48];
        if (t->layer >= 0)
            snprintf(name, sizeof(name), "%s of layer %d", zt_gpt2_kind_name(t->kind), t->layer);
        else
            snprintf(name, sizeof(name), "%s", zt_gpt2_kind_name(t->kind));
        snprintf(e->first_nonfinite, sizeof(e->first_nonfinite),
                 "parameters at load: %s has %zu non-finite value%s", name, bad,
                 bad == 1 ? "" : "s");
    }
}

zt_status zt_engine_load_unit(zt_engine *e, int u, const float *vals, zt_err *err)
{
    note_nonfinite_params(e, u, vals);
    size_t n_own = e->stage < 3 ? e->P[u] : e->S[u];
    const float *src = e->stage < 3 ? vals : vals + (size_t)e->rank * e->S[u];
    char *dst = (char *)e->params + (e->stage < 3 ? e->foff[u] : e->soff[u]) * psize(e);
    if (e->pdt == ZT_F32) {
        e->ops->copy_h2d(e->k, dst, src, n_own * sizeof(float));
    } else {
        /* cast piece by piece: a whole-unit temporary would be a start-up peak of its own */
        size_t piece = n_own < ZT_LOAD_PIECE ? n_own : ZT_LOAD_PIECE;
        void *tmp = zt_malloc(piece * psize(e));
        if (!tmp)
            return zt_err_set(err, ZT_ERR_NOMEM, "out of memory loading unit %d", u);
        zt_status st = ZT_OK;
        for (size_t i0 = 0; i0 < n_own && st == ZT_OK; i0 += piece) {
            size_t n = n_own - i0 < piece ? n_own - i0 : piece;
            for (size_t i = 0; i < n; i++)
                zt_store_f32(tmp, e->pdt, i, src[i0 + i]);
            e->ops->copy_h2d(e->k, dst + i0 * psize(e), tmp, n * psize(e));
            st = e->ops->sync(e->k, err); /* tmp is refilled next */
        }
        zt_free(tmp);
        if (st != ZT_OK)
            return st;
    }
    size_t rl = zt_engine_region_len(e, u);
    if (rl)
        zt_engine_region_set(e, u, 0, rl, vals + e->base[u]);
    /* the caller may reuse vals as soon as this returns */
    return e->ops->sync(e->k, err);
}

/* ---- parameter slots: compute copies of units ---- */

static bool params_direct(const zt_engine *e)
{
    return e->stage < 3 && e->pdt == ZT_F32;
}

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
    return ZT_OK;
}

/* Starts filling slot s with unit u (stage 3: async all-gather; else a synchronous cast). */
static zt_status pslot_fill(zt_engine *e, zt_pslot *s, int u, zt_err *err)
{
    s->unit = u;
    s->stamp = ++e->pstamp;
    if (e->stage == 3) {
        void *shard = (char *)e->params + e->soff[u] * psize(e);
        void *mine = (char *)s->gbuf + (size_t)e->rank * e->S[u] * psize(e);
        e->ops->copy_d2d(e->k, mine, shard, e->S[u] * psize(e));
        s->gathering = 1;
        zt_status st = zt_comm_allgather(e->comm, mine, s->gbuf, e->S[u], e->pdt, &s->req, err);
        if (st != ZT_OK) {
            s->gathering = 0;
            s->unit = -1;
        }
        return st;
    }
    e->ops->cast(e->k, s->cbuf, ZT_F32, (char *)e->params + e->foff[u] * psize(e), e->pdt, e->P[u]);
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

/* The fp32 compute copy of unit u's parameters; stays valid until param_release(u). */
static zt_status param_acquire(zt_engine *e, int u, float **out, zt_err *err)
{
    zt_status st;
    if (params_direct(e)) {
        *out = (float *)e->params + e->foff[u];
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

/* Starts gathering unit u ahead of use (stage 3); a no-op otherwise or without a free slot. */
static zt_status param_prefetch(zt_engine *e, int u, zt_err *err)
{
    if (e->stage != 3 || u < 0 || u >= e->nu || pslot_find(e, u))
        return ZT_OK;
    zt_pslot *s = pslot_victim(e, u);
    if (!s || s->gathering)
        return ZT_OK;
    return pslot_fill(e, s, u, err);
}

static void param_release(zt_engine *e, int u)
{
    if (params_direct(e))
        return;
    zt_pslot *s = pslot_find(e, u);
    if (s && s->busy > 0)
        s->busy--;
    /* stage3_max_reuse_distance 0: a gathered unit is freed after each use (DeepSpeed's
     * release-after-use), so it is gathered again for its next use; otherwise it stays in its
     * working slot until the slot is needed, and a unit used again soon is not re-gathered */
    if (s && !s->busy && e->stage == 3 && e->job.ds.zero.stage3_max_reuse_distance == 0)
        s->unit = -1;
}

/* Parameters changed: every cached compute copy is stale. */
static zt_status params_invalidate(zt_engine *e, zt_err *err)
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

static bool grads_direct(const zt_engine *e)
{
    return e->stage < 2 && e->gdt == ZT_F32;
}

static zt_gslot *gslot_find(zt_engine *e, int u)
{
    for (int i = 0; i < e->ngslots; i++)
        if (e->gslots[i].unit == u)
            return &e->gslots[i];
    return NULL;
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
    e->ops->accumulate(e->k, (char *)e->grads + e->soff[u] * gsize(e), e->gdt, chunk, 1.0f,
                       e->S[u]);
    return ZT_OK;
}

/* The fp32 buffer where unit u's backward accumulates its gradient this micro-step. */
static zt_status grad_acquire(zt_engine *e, int u, float **out, zt_err *err)
{
    if (grads_direct(e)) {
        *out = (float *)e->grads + e->foff[u];
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
 * or start its reduce-scatter (stages 2-3). */
static zt_status grad_finish(zt_engine *e, int u, zt_err *err)
{
    if (grads_direct(e))
        return ZT_OK;
    zt_gslot *g = gslot_find(e, u);
    if (!g)
        return zt_err_set(err, ZT_ERR_INTERNAL, "gradient of unit %d finished but not acquired", u);
    if (e->stage < 2) {
        e->ops->accumulate(e->k, (char *)e->grads + e->foff[u] * gsize(e), e->gdt, g->buf, 1.0f,
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
    return ZT_OK;
}

static zt_status grads_drain(zt_engine *e, zt_err *err)
{
    zt_status st = ZT_OK;
    for (int i = 0; i < e->ngslots; i++) {
        if (e->gslots[i].unit < 0)
            continue;
        zt_status s2 = gslot_complete(e, &e->gslots[i], err);
        if (s2 != ZT_OK && st == ZT_OK)
            st = s2;
    }
    return st;
}

/* ---- forward / backward of one micro-batch ---- */

static zt_gpt2_block_acts *block_acts(zt_engine *e, int l)
{
    return e->ckpt_act ? &e->acts[0] : &e->acts[l];
}

/* act16: block l's qkv, atty and fch live in a 16-bit home between its forward and its
 * backward: what a mixed-precision job's backward reads is rounded to its 16-bit type, as under
 * PyTorch's autocast. qkv's GEMM writes qkv there rounded and attention reads it there, writes
 * atty there rounded and reads both there in backward, as attproj reads atty; fc writes fch
 * there rounded, and GELU and its gradient read it there (the homes are attached to the block's
 * activations). One fp32 working set is room for qkv and atty where a backend needs them in
 * fp32 (the CUDA tensor-core attention does not); fch never is. With checkpointing the
 * recomputation writes the one set's home again, the same values. */
static void *acts16_home(zt_engine *e, int l)
{
    size_t lp = zt_gpt2_block_acts_lp_floats(&e->lay.d, e->B, e->T);
    return (char *)e->acts16 + (e->ckpt_act ? 0 : (size_t)l) * lp * psize(e);
}

/* Elements of the home that attention fills (qkv, then atty: 4 C a token, first) */
static size_t acts16_attn(const zt_engine *e)
{
    return (size_t)e->B * e->T * 4 * e->lay.d.C;
}

/* Attaches block l's homes of qkv, atty and fch to its activations. */
static void acts16_attach(zt_engine *e, int l)
{
    zt_gpt2_block_acts *a = block_acts(e, l);
    char *h = acts16_home(e, l);
    a->home.qkv = h;
    a->home.out = h + (size_t)e->B * e->T * 3 * e->lay.d.C * psize(e);
    a->home.dtype = e->pdt;
    a->fch16 = h + acts16_attn(e) * psize(e);
}

static float *xres(zt_engine *e, int l)
{
    return e->x + (size_t)l * e->B * e->T * e->lay.d.C;
}

/* Forward through the whole model. With dloss != 0 (training) the head also runs its own
 * backward, chunk by chunk while each chunk's logits exist, leaving dL/dx_L in dres; the
 * gradients of units 0 and L+1 stay acquired for backward. With dloss == 0 (evaluation)
 * everything is released. */
static zt_status forward(zt_engine *e, float dloss, zt_err *err)
{
    zt_status st;
    const zt_gpt2_layout *lay = &e->lay;
    int L = lay->d.L, B = e->B, T = e->T, uf = zt_gpt2_final_unit(lay);
    float *p;
    if ((st = param_acquire(e, 0, &p, err)) != ZT_OK)
        return st;
    if ((st = param_prefetch(e, 1, err)) != ZT_OK)
        return st;
    zt_gpt2_embed pe = zt_gpt2_embed_view(lay, p);
    zt_gpt2_embed_forward(e->ops, e->k, lay, &pe, e->d_inp, xres(e, 0), B, T);
    param_release(e, 0);
    for (int l = 0; l < L; l++) {
        int u = zt_gpt2_block_unit(l);
        if ((st = param_acquire(e, u, &p, err)) != ZT_OK)
            return st;
        if ((st = param_prefetch(e, u + 1, err)) != ZT_OK)
            return st;
        zt_gpt2_block pb = zt_gpt2_block_view(lay, p);
        /* attached for every forward, so that attproj reads the same rounded atty in training,
         * evaluation and checkpointing's first pass (with checkpointing, the one set's home) */
        if (e->act16) acts16_attach(e, l);
        zt_gpt2_block_forward(e->ops, e->k, lay, &pb, block_acts(e, l), &e->scr, xres(e, l),
                              xres(e, l + 1), B, T);
        param_release(e, u);
    }
    float *pf, *p0;
    if ((st = param_acquire(e, uf, &pf, err)) != ZT_OK)
        return st;
    if ((st = param_acquire(e, 0, &p0, err)) != ZT_OK)
        return st;
    zt_gpt2_final fv = zt_gpt2_final_view(lay, pf);
    zt_gpt2_embed ev = zt_gpt2_embed_view(lay, p0);
    if (dloss == 0.0f) {
        zt_gpt2_head(e->ops, e->k, lay, &fv, ev.wte, NULL, NULL, &e->head, &e->scr, xres(e, L),
                     e->d_tgt, 0.0f, NULL, B, T);
        param_release(e, 0);
        param_release(e, uf);
        return ZT_OK;
    }
    float *gf, *g0;
    if ((st = grad_acquire(e, uf, &gf, err)) != ZT_OK)
        return st;
    if ((st = grad_acquire(e, 0, &g0, err)) != ZT_OK)
        return st;
    /* the last block's parameters come (back) while the head computes */
    if ((st = param_prefetch(e, zt_gpt2_block_unit(L - 1), err)) != ZT_OK)
        return st;
    zt_gpt2_final gfv = zt_gpt2_final_view(lay, gf);
    zt_gpt2_embed gev = zt_gpt2_embed_view(lay, g0);
    zt_gpt2_head(e->ops, e->k, lay, &fv, ev.wte, &gfv, gev.wte, &e->head, &e->scr, xres(e, L),
                 e->d_tgt, dloss, e->dres, B, T);
    param_release(e, 0);
    param_release(e, uf);
    e->head_gf = gf; /* kept acquired for backward */
    e->head_g0 = g0;
    return ZT_OK;
}

static void maybe_inject(zt_engine *e, float *g)
{
    if (e->inject_step != e->steps_done + 1)
        return;
    float inf = INFINITY;
    e->ops->copy_h2d(e->k, g, &inf, sizeof(inf));
    ZT_WARN("engine", "test hook: injected a non-finite gradient at step %lld",
            (long long)e->inject_step);
}

static zt_status backward(zt_engine *e, zt_err *err)
{
    zt_status st;
    const zt_gpt2_layout *lay = &e->lay;
    int L = lay->d.L, B = e->B, T = e->T, uf = zt_gpt2_final_unit(lay);
    /* the head's backward ran in forward; its gradients are still acquired */
    float *gf = e->head_gf, *g0 = e->head_g0;
    zt_gpt2_embed gev = zt_gpt2_embed_view(lay, g0);
    maybe_inject(e, gf);
    if ((st = grad_finish(e, uf, err)) != ZT_OK)
        return st;
    for (int l = L - 1; l >= 0; l--) {
        int u = zt_gpt2_block_unit(l);
        float *p, *g;
        if ((st = param_acquire(e, u, &p, err)) != ZT_OK)
            return st;
        if (l > 0 && (st = param_prefetch(e, u - 1, err)) != ZT_OK)
            return st;
        zt_gpt2_block pb = zt_gpt2_block_view(lay, p);
        if (e->act16) acts16_attach(e, l);
        if (e->ckpt_act)
            zt_gpt2_block_forward(e->ops, e->k, lay, &pb, block_acts(e, l), &e->scr, xres(e, l),
                                  e->x_tmp, B, T);
        if ((st = grad_acquire(e, u, &g, err)) != ZT_OK)
            return st;
        zt_gpt2_block gb = zt_gpt2_block_view(lay, g);
        zt_gpt2_block_backward(e->ops, e->k, lay, &pb, &gb, block_acts(e, l), &e->scr, xres(e, l),
                               e->dres, B, T);
        param_release(e, u);
        if ((st = grad_finish(e, u, err)) != ZT_OK)
            return st;
    }
    zt_gpt2_embed_backward(e->ops, e->k, lay, &gev, e->d_inp, e->dres, B, T);
    return grad_finish(e, 0, err);
}

/* ---- set-up ---- */

static zt_status setup_partition(zt_engine *e, zt_err *err)
{
    int nu = e->nu = e->lay.n_units;
    size_t *arr = zt_calloc((size_t)nu * 6, sizeof(size_t));
    if (!arr)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    e->P = arr;
    e->S = arr + nu;
    e->foff = arr + 2 * nu;
    e->soff = arr + 3 * nu;
    e->ooff = arr + 4 * nu;
    e->base = arr + 5 * nu;
    size_t align = (size_t)e->world * ZT_SHARD_ALIGN;
    e->Ptot = e->Stot = e->Otot = e->max_unit_p = 0;
    for (int u = 0; u < nu; u++) {
        e->P[u] = round_up(e->lay.unit_numel[u], align);
        e->S[u] = e->P[u] / (size_t)e->world;
        e->foff[u] = e->Ptot;
        e->soff[u] = e->Stot;
        e->ooff[u] = e->Otot;
        e->base[u] = e->stage == 0 ? 0 : (size_t)e->rank * e->S[u];
        e->Ptot += e->P[u];
        e->Stot += e->S[u];
        e->Otot += e->stage == 0 ? e->P[u] : e->S[u];
        if (u > 0 && e->P[u] > e->max_unit_p)
            e->max_unit_p = e->P[u];
    }
    const zt_offload_cfg *off = &e->job.ds.zero.offload_optimizer;
    e->dev_n = e->Otot;
    if (off->enabled)
        e->dev_n = (size_t)llround((double)e->Otot * (1.0 - off->ratio));
    e->host_n = e->Otot - e->dev_n;
    /* DeepSpeed's sub_group_size bounds a segment (default 1e9: the pipeline's piece);
     * test hook: ZT_OFFLOAD_PIECE=N cuts the host part finer than any tensor of a small model */
    size_t piece = ZT_OFFLOAD_PIECE;
    int64_t sgs = e->job.ds.zero.sub_group_size;
    if (sgs > 0 && (uint64_t)sgs < piece)
        piece = (size_t)sgs;
    const char *pe = getenv("ZT_OFFLOAD_PIECE");
    if (pe && atol(pe) > 0)
        piece = (size_t)atol(pe);

    /* optimizer segments: tensor pieces of the region, split at the device/host boundary */
    int cap = 0;
    for (int u = 0; u < nu; u++)
        cap += e->lay.unit_first_tensor[u + 1] - e->lay.unit_first_tensor[u] + 1;
    e->segs = zt_calloc((size_t)cap, sizeof(*e->segs));
    if (!e->segs)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    for (int u = 0; u < nu; u++) {
        size_t lo = e->base[u], hi = e->base[u] + zt_engine_region_len(e, u);
        for (int ti = e->lay.unit_first_tensor[u]; ti < e->lay.unit_first_tensor[u + 1]; ti++) {
            const zt_gpt2_tensor *t = &e->lay.tensors[ti];
            size_t a = t->offset > lo ? t->offset : lo;
            size_t b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
            while (a < b) {
                size_t j = a - e->base[u];
                size_t gi = e->ooff[u] + j;
                size_t len = b - a;
                bool host = gi >= e->dev_n;
                if (!host && gi + len > e->dev_n)
                    len = e->dev_n - gi;
                if (host && len > piece)
                    len = piece;
                if (e->nsegs == cap) {
                    zt_optseg *ns = zt_realloc(e->segs, (size_t)cap * 2 * sizeof(*ns));
                    if (!ns)
                        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
                    e->segs = ns;
                    cap *= 2;
                }
                zt_optseg *s = &e->segs[e->nsegs++];
                s->unit = u;
                s->j = j;
                s->len = len;
                s->decay = t->decay;
                s->host = host;
                s->side_off = host ? gi - e->dev_n : gi;
                a += len;
            }
        }
    }
    return ZT_OK;
}

/* One backend or host buffer of the engine: where its pointer goes, what it is charged to and
 * its size. The same table drives allocation, freeing and `zctl plan`'s prediction. */
typedef struct buf_spec {
    void **slot;
    zt_mem_category cat;
    size_t bytes;
    bool host;
} buf_spec;

#define ZT_MAX_BUF_SPECS 40

static int buffer_specs(zt_engine *e, buf_spec *sp)
{
    const zt_gpt2_dims *d = &e->lay.d;
    int n = 0;
#define SPEC(ptr, c, b, h) (sp[n++] = (buf_spec){(void **)(ptr), (c), (b), (h)})
    SPEC(&e->params, ZT_MEM_PARAMS, (e->stage < 3 ? e->Ptot : e->Stot) * psize(e), false);
    SPEC(&e->grads, ZT_MEM_GRADS, (e->stage < 2 ? e->Ptot : e->Stot) * gsize(e), false);
    if (e->mixed && e->dev_n)
        SPEC(&e->master, ZT_MEM_MASTER, e->dev_n * 4, false);
    SPEC(&e->m, ZT_MEM_OPTIM, e->dev_n * 4, false);
    SPEC(&e->v, ZT_MEM_OPTIM, e->dev_n * 4, false);
    if (e->host_n) {
        SPEC(&e->h_master, ZT_MEM_HOST_OPTIM, e->host_n * 4, true);
        SPEC(&e->h_m, ZT_MEM_HOST_OPTIM, e->host_n * 4, true);
        SPEC(&e->h_v, ZT_MEM_HOST_OPTIM, e->host_n * 4, true);
        SPEC(&e->h_grad, ZT_MEM_BUFFERS, e->host_n * gsize(e), true);
        if (e->mixed)
            SPEC(&e->h_lp, ZT_MEM_BUFFERS, e->host_n * psize(e), true);
    }
    /* parameter slots: compute copies of units (16-bit widening, stage-3 gathers) */
    e->npslots = params_direct(e) ? 0 : 4;
    /* stage3_max_live_parameters: the gathered blocks held at once (slots 1..3; slot 0 holds
     * the embeddings), at least one */
    if (e->stage == 3 && e->npslots) {
        int64_t live = e->job.ds.zero.stage3_max_live_parameters;
        int64_t blocks = e->max_unit_p ? live / (int64_t)e->max_unit_p : 3;
        if (blocks < 1) blocks = 1;
        if (blocks < 3) e->npslots = 1 + (int)blocks;
    }
    for (int i = 0; i < e->npslots; i++) {
        zt_pslot *s = &e->pslots[i];
        s->cap = i == 0 ? e->P[0] : e->max_unit_p;
        SPEC(&s->cbuf, ZT_MEM_BUFFERS, s->cap * 4, false);
        if (e->stage == 3 && e->pdt != ZT_F32)
            SPEC(&s->gbuf, ZT_MEM_COMM, s->cap * psize(e), false);
    }
    /* gradient slots: a unit's fp32 gradient before accumulation or reduce-scatter */
    e->ngslots = grads_direct(e) ? 0 : 3;
    for (int i = 0; i < e->ngslots; i++) {
        zt_gslot *g = &e->gslots[i];
        g->cap = i == 0 ? e->P[0] : e->max_unit_p;
        SPEC(&g->buf, ZT_MEM_BUFFERS, g->cap * 4, false);
        if (e->stage >= 2 && e->gdt != ZT_F32)
            SPEC(&g->buf16, ZT_MEM_COMM, g->cap * 2, false);
    }
    /* activations of one micro-batch */
    int B = e->B, T = e->T, L = d->L;
    size_t BT = (size_t)B * T, BTC = BT * d->C;
    size_t nacts = e->ckpt_act ? 1 : (size_t)L;
    if (e->act16) { /* per set: the fp32 part, and the rest in pdt; one fp32 working set */
        size_t lp = zt_gpt2_block_acts_lp_floats(d, B, T);
        SPEC(&e->acts_mem, ZT_MEM_ACTIVATIONS,
             (zt_gpt2_block_acts_f32_floats(d, B, T) * nacts +
              zt_gpt2_block_acts_lp_work_floats(d, B, T)) *
                 4,
             false);
        SPEC(&e->acts16, ZT_MEM_ACTIVATIONS, lp * nacts * psize(e), false);
    } else {
        SPEC(&e->acts_mem, ZT_MEM_ACTIVATIONS, zt_gpt2_block_acts_floats(d, B, T) * nacts * 4,
             false);
    }
    SPEC(&e->x, ZT_MEM_ACTIVATIONS, BTC * (size_t)(L + 1) * 4, false);
    SPEC(&e->head_mem, ZT_MEM_ACTIVATIONS, zt_gpt2_head_acts_floats(d, B, T, e->head_rows) * 4,
         false);
    SPEC(&e->d_inp, ZT_MEM_ACTIVATIONS, BT * 4, false);
    SPEC(&e->d_tgt, ZT_MEM_ACTIVATIONS, BT * 4, false);
    SPEC(&e->scr_mem, ZT_MEM_BUFFERS, zt_gpt2_scratch_floats(d, B, T) * 4, false);
    SPEC(&e->dres, ZT_MEM_BUFFERS, BTC * 4, false);
    if (e->ckpt_act)
        SPEC(&e->x_tmp, ZT_MEM_BUFFERS, BTC * 4, false);
    SPEC(&e->d_red, ZT_MEM_COMM, 16, false);
#undef SPEC
    return n;
}

/* Arenas: the buffers of one category on one side (backend or host memory) are carved from a
 * single allocation, each piece 256-byte aligned, so the engine makes a handful of allocations
 * (cudaMalloc is slow and fragments), an out-of-memory names the category that asked, and the
 * plan's prediction is these sizes exactly. */
#define ZT_ARENA_ALIGN 256

static size_t arena_piece(size_t bytes)
{
    return round_up(bytes ? bytes : 1, ZT_ARENA_ALIGN);
}

/* sizes[cat][host] of the arenas holding the buffers in sp */
static void arena_sizes(const buf_spec *sp, int n, size_t sizes[ZT_MEM_CATEGORY_COUNT][2])
{
    memset(sizes, 0, sizeof(size_t) * ZT_MEM_CATEGORY_COUNT * 2);
    for (int i = 0; i < n; i++)
        sizes[sp[i].cat][sp[i].host] += arena_piece(sp[i].bytes);
}

/* What to change when category cat does not fit (ckpt_act: activation checkpointing is on). */
static const char *oom_advice(zt_mem_category cat, bool ckpt_act)
{
    switch (cat) {
    case ZT_MEM_ACTIVATIONS:
    case ZT_MEM_BUFFERS:
        return ckpt_act ? "lower train_micro_batch_size_per_gpu (raising gradient_accumulation_steps keeps the batch)"
                        : "lower train_micro_batch_size_per_gpu (raising gradient_accumulation_steps keeps the batch) or turn on activation_checkpointing";
    case ZT_MEM_HOST_OPTIM:
        return "lower zero_optimization.offload_optimizer.ratio (less on the host) or give the node more memory";
    case ZT_MEM_COMM:
        return "these buffers follow the largest block and the rank count: use more ranks or a lower zero_optimization.stage";
    default:
        return "use a higher zero_optimization.stage, more ranks, or zero_optimization.offload_optimizer";
    }
}

/* The error for an arena that could not be allocated: the category, its size, what the
 * backend still has, what is already held, and what `zctl plan` predicts for the job. */
static zt_status oom_error(zt_engine *e, zt_mem_category cat, bool host, size_t bytes,
                           zt_err *err)
{
    bool dev = !host && strcmp(e->ops->name, "cpu") != 0;
    const zt_ops *mops = host ? zt_ops_cpu() : e->ops;
    size_t avail = 0, total = 0;
    char have[128] = "", a[32], t[32], need[32], held[32], pc[32], pt[32], kb[32];
    char held_s[96];
    int64_t arenas = e->mem.total_cur;
    if (dev) { /* the kernel context's fixed buffers (cuBLASLt workspace, scratch) came first;
                * those that grow with the batch come with the first step */
        int64_t ctx = (int64_t)zt_cuda_context_device_bytes(0, 0);
        snprintf(held_s, sizeof(held_s), "%s already held (%s of it the CUDA context's buffers)",
                 zt_fmt_bytes(arenas + ctx, held, sizeof(held)), zt_fmt_bytes(ctx, kb, sizeof(kb)));
    } else {
        snprintf(held_s, sizeof(held_s), "%s already held",
                 zt_fmt_bytes(arenas, held, sizeof(held)));
    }
    if (mops->mem_info(host ? NULL : e->k, &avail, &total))
        snprintf(have, sizeof(have), " (%s of %s free)", zt_fmt_bytes((int64_t)avail, a, sizeof(a)),
                 zt_fmt_bytes((int64_t)total, t, sizeof(t)));
    char planned[256] = "";
    zt_mem_plan plan;
    zt_err perr;
    if (zt_engine_plan(&e->job, e->world, &plan, &perr) == ZT_OK) {
        int64_t side = dev ? plan.device_total : plan.device_total + plan.host_total;
        int64_t cb = dev ? plan.bytes[cat] - plan.host_bytes[cat] : plan.bytes[cat];
        snprintf(planned, sizeof(planned),
                 "; 'zctl plan' predicts %s of %s and %s of %s memory in all for this job at %d rank%s",
                 zt_fmt_bytes(cb, pc, sizeof(pc)), zt_mem_category_name(cat),
                 zt_fmt_bytes(side, pt, sizeof(pt)), dev ? "GPU" : "host", e->world,
                 e->world == 1 ? "" : "s");
    }
    return zt_err_set(err, ZT_ERR_NOMEM,
                      "rank %d is out of %s memory: its %s need %s more%s, %s%s; %s",
                      e->rank, dev ? "GPU" : "host", zt_mem_category_name(cat),
                      zt_fmt_bytes((int64_t)bytes, need, sizeof(need)), have, held_s, planned,
                      oom_advice(cat, e->ckpt_act));
}

static zt_status setup_buffers(zt_engine *e, zt_err *err)
{
    const zt_gpt2_dims *d = &e->lay.d;
    buf_spec sp[ZT_MAX_BUF_SPECS];
    int n = buffer_specs(e, sp);
    size_t sizes[ZT_MEM_CATEGORY_COUNT][2], used[ZT_MEM_CATEGORY_COUNT][2] = {{0}};
    arena_sizes(sp, n, sizes);
    /* the largest first, so the likeliest failure comes before anything else is held */
    for (;;) {
        int bc = -1, bh = 0;
        for (int c = 0; c < ZT_MEM_CATEGORY_COUNT; c++)
            for (int h = 0; h < 2; h++)
                if (sizes[c][h] && !e->arena[c][h] &&
                    (bc < 0 || sizes[c][h] > sizes[bc][bh])) {
                    bc = c;
                    bh = h;
                }
        if (bc < 0)
            break;
        size_t b = sizes[bc][bh];
        e->arena[bc][bh] = bh ? halloc(e, (zt_mem_category)bc, b) : balloc(e, (zt_mem_category)bc, b);
        if (!e->arena[bc][bh])
            return oom_error(e, (zt_mem_category)bc, bh, b, err);
        e->arena_bytes[bc][bh] = b;
    }
    for (int i = 0; i < n; i++) {
        size_t *u = &used[sp[i].cat][sp[i].host];
        *sp[i].slot = (char *)e->arena[sp[i].cat][sp[i].host] + *u;
        *u += arena_piece(sp[i].bytes);
    }
    for (int i = 0; i < e->npslots; i++) {
        e->pslots[i].unit = -1;
        if (!e->pslots[i].gbuf)
            e->pslots[i].gbuf = e->pslots[i].cbuf;
    }
    for (int i = 0; i < e->ngslots; i++)
        e->gslots[i].unit = -1;
    e->gnext = 1;
    int B = e->B, T = e->T;
    size_t BT = (size_t)B * T;
    int nacts = e->ckpt_act ? 1 : d->L;
    e->acts = zt_calloc((size_t)(nacts > 0 ? nacts : 1), sizeof(*e->acts));
    e->h_inp = zt_calloc(BT, 4);
    e->h_tgt = zt_calloc(BT, 4);
    e->h_losses = zt_calloc(BT, 4);
    if (!e->acts || !e->h_inp || !e->h_tgt || !e->h_losses)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    size_t per = zt_gpt2_block_acts_floats(d, B, T);
    size_t f32 = zt_gpt2_block_acts_f32_floats(d, B, T);
    for (int i = 0; i < nacts; i++) {
        if (e->act16) { /* every set's qkv and atty in the one fp32 working set; fch none */
            zt_gpt2_block_acts_carve_split(&e->acts[i], d, B, T, e->acts_mem + f32 * (size_t)i,
                                           e->acts_mem + f32 * (size_t)nacts);
            e->acts[i].fch = NULL;
        } else
            zt_gpt2_block_acts_carve(&e->acts[i], d, B, T, e->acts_mem + per * (size_t)i);
    }
    zt_gpt2_head_acts_carve(&e->head, d, B, T, e->head_rows, e->head_mem);
    if (e->act16) e->head.logits_dt = e->pdt; /* the loss of 16-bit logits, as autocast's */
    zt_gpt2_scratch_carve(&e->scr, d, B, T, e->scr_mem);
    return ZT_OK;
}

static void free_buffers(zt_engine *e)
{
    buf_spec sp[ZT_MAX_BUF_SPECS];
    int n = buffer_specs(e, sp);
    for (int i = 0; i < n; i++)
        *sp[i].slot = NULL;
    for (int c = ZT_MEM_CATEGORY_COUNT - 1; c >= 0; c--)
        for (int h = 1; h >= 0; h--) {
            if (h)
                hfree(e, (zt_mem_category)c, e->arena[c][h], e->arena_bytes[c][h]);
            else
                bfree(e, (zt_mem_category)c, e->arena[c][h], e->arena_bytes[c][h]);
            e->arena[c][h] = NULL;
            e->arena_bytes[c][h] = 0;
        }
    zt_free(e->acts);
    zt_free(e->h_inp);
    zt_free(e->h_tgt);
    zt_free(e->h_losses);
}

/* llm.c file offsets of each tensor kind (element offsets into the file's parameter array). */
static void llmc_kind_offsets(const zt_model_shape *s, size_t off[ZT_T_KIND_COUNT],
                              size_t per_layer[ZT_T_KIND_COUNT])
{
    size_t sizes[ZT_MODELFILE_NUM_TENSORS];
    zt_modelfile_tensor_sizes(s, sizes);
    size_t o = 0;
    for (int i = 0; i < ZT_T_KIND_COUNT; i++) {
        off[i] = o;
        o += sizes[i];
        bool layered = i != ZT_T_WTE && i != ZT_T_WPE && i != ZT_T_LNFW && i != ZT_T_LNFB;
        per_layer[i] = layered ? sizes[i] / (size_t)s->num_layers : sizes[i];
    }
}

static zt_status init_params(zt_engine *e, zt_err *err)
{
    zt_status st = ZT_OK;
    const zt_gpt2_layout *lay = &e->lay;
    float *file = NULL, *unit = NULL;
    zt_model_shape shape;
    size_t koff[ZT_T_KIND_COUNT], kper[ZT_T_KIND_COUNT];
    int64_t file_bytes = 0, unit_bytes = 0; /* the init transient, charged while it lives */
    if (!e->job.model.init_random) {
        CHECK(zt_modelfile_read(e->job.model.init_path, &shape, &file, err), out);
        size_t sizes[ZT_MODELFILE_NUM_TENSORS];
        file_bytes = (int64_t)(zt_modelfile_tensor_sizes(&shape, sizes) * sizeof(float));
        zt_memacct_charge(&e->mem, ZT_MEM_BUFFERS, file_bytes);
        CHECK(zt_modelfile_check_shape(&shape, &e->job.model, e->job.model.init_path, err), out);
        llmc_kind_offsets(&shape, koff, kper);
    }
    size_t maxp = e->P[0] > e->max_unit_p ? e->P[0] : e->max_unit_p;
    unit = zt_calloc(maxp, sizeof(float));
    if (!unit) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory initialising the model");
        goto out;
    }
    unit_bytes = (int64_t)(maxp * sizeof(float));
    zt_memacct_charge(&e->mem, ZT_MEM_BUFFERS, unit_bytes);
    for (int u = 0; u < e->nu; u++) {
        memset(unit, 0, e->P[u] * sizeof(float));
        if (!file) {
            zt_gpt2_init_unit(lay, u, e->job.model.seed, unit);
        } else {
            for (int ti = lay->unit_first_tensor[u]; ti < lay->unit_first_tensor[u + 1]; ti++) {
                const zt_gpt2_tensor *t = &lay->tensors[ti];
                size_t src = koff[t->kind] + (t->layer >= 0 ? (size_t)t->layer * kper[t->kind] : 0);
                /* wpe may have more rows in the file than block_size: take the first T */
                memcpy(unit + t->offset, file + src, t->numel * sizeof(float));
            }
        }
        CHECK(zt_engine_load_unit(e, u, unit, err), out);
    }
out:
    zt_memacct_charge(&e->mem, ZT_MEM_BUFFERS, -(file_bytes + unit_bytes));
    zt_free(file);
    zt_free(unit);
    return st;
}

static zt_precision precision_of(const zt_job *job)
{
    return job->ds.fp16.enabled ? ZT_PREC_FP16 : job->ds.bf16 ? ZT_PREC_BF16 : ZT_PREC_FP32;
}

zt_status zt_engine_preflight(const zt_job *job, zt_err *err)
{
    zt_dataset *ds = NULL;
    zt_status st = zt_dataset_open(&ds, job->data.train, job->model.block_size,
                                   job->model.vocab_size, err);
    zt_dataset_close(ds);
    if (st != ZT_OK)
        return zt_err_prefix(err, "data.train");
    /* a validation set that is given is checked even when nothing evaluates on it: a wrong
     * pattern is a mistake either way */
    if (job->data.val[0]) {
        st = zt_dataset_open(&ds, job->data.val, job->model.block_size, job->model.vocab_size, err);
        zt_dataset_close(ds);
        if (st != ZT_OK)
            return zt_err_prefix(err, "data.val");
        if (job->train.eval_every <= 0)
            ZT_WARN("engine",
                    "data.val is given but train.eval_every is 0, so no validation loss will be computed; set train.eval_every to evaluate every that many steps");
    }
    if (!job->model.init_random) {
        zt_model_shape shape;
        int dtype = 0;
        st = zt_modelfile_read_header(job->model.init_path, &shape, &dtype, err);
        if (st == ZT_OK)
            st = zt_modelfile_check_shape(&shape, &job->model, job->model.init_path, err);
    }
    return st;
}

/* The fields every engine (and every plan) derives from the job and its place in the run. */
static void init_fields(zt_engine *e, const zt_job *job, int world, int rank)
{
    e->job = *job;
    e->rank = rank;
    e->world = world;
    e->stage = job->ds.zero.stage;
    e->ckpt_act = job->ds.activation_checkpointing.enabled;
    zt_precision prec = precision_of(job);
    e->pdt = prec == ZT_PREC_FP16 ? ZT_F16 : prec == ZT_PREC_BF16 ? ZT_BF16 : ZT_F32;
    e->mixed = e->pdt != ZT_F32;
    /* ZT_ACTIVATIONS_FP32=1 keeps a mixed-precision job's activations in fp32 (comparisons) */
    const char *a32 = getenv("ZT_ACTIVATIONS_FP32");
    bool keep32 = a32 && strcmp(a32, "1") == 0;
    static bool warned_a32; /* a plan makes many engines */
    if (a32 && *a32 && !keep32 && strcmp(a32, "0") != 0 && !warned_a32) {
        warned_a32 = true;
        ZT_WARN("engine", "ignoring ZT_ACTIVATIONS_FP32=%s: expected 0 or 1", a32);
    }
    e->act16 = e->mixed && !keep32;
    e->gdt = job->ds.grad_accum_fp32 ? ZT_F32 : e->pdt;
    e->B = (int)job->ds.micro_batch;
    e->T = job->model.block_size;
    zt_gpt2_dims d = {job->model.n_layer, job->model.n_embd, job->model.n_head,
                      job->model.block_size, job->model.vocab_size, job->model.padded_vocab_size};
    e->dims = d;
    e->head_rows = zt_gpt2_head_rows(&d, e->B, e->T);
    /* ZT_HEAD_ROWS=N: the classifier in chunks of N rows (at most B x T) instead of
     * ZT_GPT2_LOGITS_BUDGET's: small ones test the chunking on a small model or save memory,
     * large ones trade memory (zctl plan counts it) for fewer passes over wte */
    const char *hr = getenv("ZT_HEAD_ROWS");
    int rows = hr ? atoi(hr) : 0;
    if (rows > 0) e->head_rows = rows < e->B * e->T ? rows : e->B * e->T;
}

zt_status zt_engine_plan(const zt_job *job, int world, zt_mem_plan *out, zt_err *err)
{
    memset(out, 0, sizeof(*out));
    zt_engine *e = zt_calloc(1, sizeof(*e));
    if (!e)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    init_fields(e, job, world, 0);
    zt_status st = ZT_OK;
    if (zt_gpt2_layout_init(&e->lay, &e->dims) != ZT_OK) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((st = setup_partition(e, err)) != ZT_OK)
        goto out;
    buf_spec sp[ZT_MAX_BUF_SPECS];
    int n = buffer_specs(e, sp);
    size_t sizes[ZT_MEM_CATEGORY_COUNT][2];
    arena_sizes(sp, n, sizes);
    for (int c = 0; c < ZT_MEM_CATEGORY_COUNT; c++) {
        out->bytes[c] += (int64_t)(sizes[c][0] + sizes[c][1]);
        out->host_bytes[c] += (int64_t)sizes[c][1];
        out->host_total += (int64_t)sizes[c][1];
        out->device_total += (int64_t)sizes[c][0];
    }
    bool cuda = job->resources.device == ZT_DEVICE_CUDA;
    /* the CUDA kernel context's own device buffers (cuBLASLt workspace, scratch, ...) */
    if (cuda) {
        out->backend_bytes = (int64_t)zt_cuda_context_device_bytes(e->B, e->T);
        if (zt_cuda_stage_wanted(e->pdt))
            out->backend_bytes +=
                (int64_t)(sizeof(uint16_t) * zt_gpt2_stage_elems(&e->dims, e->B, e->T, e->head_rows,
                                                                 zt_cuda_stage_cap_elems()));
        out->device_total += out->backend_bytes;
    }
    /* the communicator's own buffers: its largest reduce-scatter is one unit's gradient
     * (stages 1-3; stage 0 only all-reduces) */
    size_t max_s = 0;
    for (int u = 0; u < e->nu; u++)
        max_s = e->S[u] > max_s ? e->S[u] : max_s;
    const zt_comm_backend *cb = cuda ? zt_comm_backend_nccl() : zt_comm_backend_tcp();
    int64_t comm = (int64_t)zt_comm_backend_buffer_bytes(cb, world,
                                                         e->stage >= 1 ? max_s * gsize(e) : 0);
    /* the checkpoint snapshot, sized as zt_ckpt_prepare sizes it (header and master weights
     * and moments of this rank's chunk of every unit, in whole 2 MiB pages); every run ends
     * with a save */
    size_t huge = (size_t)2 << 20;
    int64_t ck = (int64_t)round_up(sizeof(zt_shard_header) + 12 * e->Stot, huge);
    out->bytes[ZT_MEM_COMM] += comm;
    out->host_bytes[ZT_MEM_COMM] += comm;
    out->bytes[ZT_MEM_CKPT] += ck;
    out->host_bytes[ZT_MEM_CKPT] += ck;
    out->host_total += comm + ck;
    /* initialisation: one unit in fp32, the llm.c file when init is one (taken at the job's
     * block_size), and the 16-bit cast pieces of zt_engine_load_unit */
    size_t maxp = e->P[0] > e->max_unit_p ? e->P[0] : e->max_unit_p;
    out->init_bytes = (int64_t)(maxp * sizeof(float));
    if (!job->model.init_random) {
        zt_model_shape shape = {e->dims.T, e->dims.V, e->dims.Vp, e->dims.L, e->dims.NH,
                                e->dims.C};
        size_t sizes[ZT_MODELFILE_NUM_TENSORS];
        out->init_bytes += (int64_t)(zt_modelfile_tensor_sizes(&shape, sizes) * sizeof(float));
    }
    if (e->mixed)
        out->init_bytes += (int64_t)((maxp < ZT_LOAD_PIECE ? maxp : ZT_LOAD_PIECE) * psize(e));
    out->peak_total = out->device_total + out->host_total +
                      (out->init_bytes > ck ? out->init_bytes - ck : 0);
    out->runtime_bytes = cuda ? 0 : ZT_PLAN_RUNTIME_BYTES;
    /* the snapshot comes after initialisation (start-up or the final save) */
    int64_t start = out->device_total + out->host_total - ck + out->init_bytes +
                    (cuda ? 0 : ZT_PLAN_RUNTIME_START_BYTES);
    int64_t train = out->device_total + out->host_total + out->runtime_bytes;
    out->total_bytes = start > train ? start : train;
    out->num_params = e->lay.num_params;
    out->padded_params = e->Ptot;
out:
    zt_free(e->P);
    zt_free(e->segs);
    zt_gpt2_layout_free(&e->lay);
    zt_free(e);
    return st;
}

/* The checkpoint snapshot buffer (ckpt.c), allocated at most once and charged to ZT_MEM_CKPT. */
static zt_status ckpt_snapshot_ready(zt_engine *e, zt_err *err)
{
    zt_status st = zt_ckpt_prepare(e, err);
    if (st == ZT_OK && e->ck_buf && e->ck_charged == 0) {
        e->ck_charged = (int64_t)e->ck_buf_bytes;
        zt_memacct_charge(&e->mem, ZT_MEM_CKPT, e->ck_charged);
    }
    return st;
}

/* Brings the communicator's own staging and scratch (it grows them on first use) into the
 * comm category. */
static void charge_comm_buffers(zt_engine *e)
{
    zt_comm_stats cs;
    zt_comm_get_stats(e->comm, &cs);
    if (cs.buffer_bytes != e->comm_buf_charged) {
        zt_memacct_charge(&e->mem, ZT_MEM_COMM,
                          (int64_t)cs.buffer_bytes - (int64_t)e->comm_buf_charged);
        e->comm_buf_charged = cs.buffer_bytes;
    }
}

void zt_engine_log_comm_failure(const zt_engine *e)
{
    if (!e || !zt_comm_is_broken(e->comm))
        return;
    char buf[4096];
    zt_comm_describe_recent(e->comm, buf, sizeof(buf));
    int n = 0;
    for (const char *p = buf; *p; p++)
        n += *p == '\n';
    /* the heading is an error (it reaches zctl run's terminal and the coordinator's events);
     * the record itself is detail for the rank's log */
    ZT_ERROR("comm",
             "rank %d's last %d collectives, oldest first (kind #sequence (size): state), follow in its log:",
             e->rank, n);
    for (char *line = buf, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl)
            break;
        *nl = '\0';
        ZT_INFO("comm", "  %s", line);
    }
}

zt_status zt_engine_create(zt_engine **out, const zt_job *job, const zt_engine_opts *opts,
                           zt_err *err)
{
    zt_status st;
    *out = NULL;
    zt_engine *e = zt_calloc(1, sizeof(*e));
    if (!e)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    e->opts = *opts;
    init_fields(e, job, opts->world_size > 0 ? opts->world_size : 1, opts->rank);
    e->inject_step = -1;
    e->last_ckpt_step = -1;
    e->crash_step = -1;
    const char *crash = getenv("ZT_INJECT_CRASH"); /* test hook: "rank:step" dies mid-step */
    if (crash) {
        int r = -1;
        long long s = -1;
        if (sscanf(crash, "%d:%lld", &r, &s) == 2 && r == e->rank)
            e->crash_step = s;
    }
    const char *inj = getenv("ZT_INJECT_NONFINITE");
    if (inj) {
        int r = -1;
        long long s = -1;
        if (sscanf(inj, "%d:%lld", &r, &s) == 2 && r == e->rank)
            e->inject_step = s;
    }
    const char *pk = getenv("ZT_PEAK_TFLOPS");
    e->peak_flops = pk ? atof(pk) * 1e12 : 0.0;

    if (job->ds.world_size != e->world) {
        st = zt_err_set(err, ZT_ERR_CONFIG,
                        "the batch sizes were resolved for %d ranks but the run has %d; call zt_job_resolve_batch first",
                        job->ds.world_size, e->world);
        goto fail;
    }
    if (job->resources.device == ZT_DEVICE_CUDA && job->ds.zero.offload_param.enabled) {
        st = zt_err_set(err, ZT_ERR_UNSUPPORTED,
                        "zero_optimization.offload_param is not implemented for device \"cuda\" yet (on the CPU the parameters already live in host memory); remove it or use offload_optimizer");
        goto fail;
    }
    if (job->resources.device == ZT_DEVICE_CUDA) {
        e->ops = zt_ops_cuda();
        if (!e->ops) {
            st = zt_err_set(err, ZT_ERR_NO_DEVICE,
                            "the job asks for device \"cuda\" but this zworker was built without CUDA; rebuild with nvcc available or set resources.device to \"cpu\"");
            goto fail;
        }
    } else {
        e->ops = zt_ops_cpu();
    }
    CHECK(e->ops->ctx_create(&e->k, opts->local_rank, err), fail);
    e->ops->set_matmul_dtype(e->k, e->pdt);

    if (zt_gpt2_layout_init(&e->lay, &e->dims) != ZT_OK) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        goto fail;
    }
    zt_loss_scaler_init(&e->scaler, &job->ds.fp16);

    CHECK(zt_dataset_open(&e->train_ds, job->data.train, job->model.block_size,
                          job->model.vocab_size, err),
          fail);
    if (job->data.val[0] && job->train.eval_every > 0)
        CHECK(zt_dataset_open(&e->val_ds, job->data.val, job->model.block_size,
                              job->model.vocab_size, err),
              fail);

    zt_comm_opts co = {0};
    co.rank = e->rank;
    co.world_size = e->world;
    co.rendezvous = opts->rendezvous;
    co.session = opts->session;
    /* the caller's value (zworker: ZT_COMM_TIMEOUT_MS, which zctl run --timeout-ms sets),
     * else the environment (zt_comm_create reads and checks it), else the job file's
     * train.comm_timeout_ms: the environment overrides the job for one launch */
    const char *tenv = getenv("ZT_COMM_TIMEOUT_MS");
    if (opts->comm_timeout_ms > 0)
        co.timeout_ms = opts->comm_timeout_ms;
    else if (tenv && *tenv)
        co.timeout_ms = 0;
    else
        co.timeout_ms = job->train.comm_timeout_ms;
    co.kctx = e->k;
    co.device = opts->local_rank;
    /* stall reports for the agent's hang diagnosis: a collective unfinished after
     * ZT_COMM_STALL_MS (default 2 s) is reported on the report fd */
    co.report_fd = opts->report_fd;
    co.stall_ms = 0;
    if (opts->report_fd >= 0) {
        const char *sv = getenv("ZT_COMM_STALL_MS");
        char *end = NULL;
        long ms = sv && *sv ? strtol(sv, &end, 10) : 2000;
        if (sv && *sv && (*end || ms < 0 || ms > INT_MAX))
            CHECK(zt_err_set(err, ZT_ERR_CONFIG,
                             "ZT_COMM_STALL_MS='%s' is not a number of milliseconds; unset it or give e.g. 2000 (0 turns stall reports off)",
                             sv),
                  fail);
        co.stall_ms = (int)ms;
    }
    const zt_comm_backend *cb =
        job->resources.device == ZT_DEVICE_CUDA ? zt_comm_backend_nccl() : zt_comm_backend_tcp();
    report_line(e, "phase=rendezvous");
    CHECK(zt_comm_create(&e->comm, cb, &co, err), fail);
    report_line(e, "phase=loading");

    CHECK(setup_partition(e, err), fail);
    CHECK(setup_buffers(e, err), fail);
    if (opts->resume && opts->resume[0]) {
        st = zt_ckpt_load(e, opts->resume, err);
        if (opts->resume_bad)
            *opts->resume_bad = zt_ckpt_status_is_bad(st);
        if (st != ZT_OK)
            goto fail;
    } else {
        CHECK(init_params(e, err), fail);
    }
    if (e->nonfinite_tensors && e->rank == 0)
        ZT_WARN("engine",
                "%s (%d tensor%s of %s hold NaN or Inf); every step will be skipped: check that file",
                e->first_nonfinite, e->nonfinite_tensors, e->nonfinite_tensors == 1 ? "" : "s",
                opts->resume && opts->resume[0] ? opts->resume
                : job->model.init_random        ? "the random initialisation"
                                                : job->model.init_path);
    if (opts->owner)
        CHECK(zt_ckpt_claim(e, opts->owner, opts->owner_takeover, err), fail);
    if (job->train.checkpoint_every > 0)
        CHECK(ckpt_snapshot_ready(e, err), fail);
    CHECK(e->ops->sync(e->k, err), fail);
    charge_comm_buffers(e);
    *out = e;
    return ZT_OK;
fail:
    zt_engine_log_comm_failure(e);
    zt_engine_destroy(e);
    return st;
}

void zt_engine_destroy(zt_engine *e)
{
    if (!e)
        return;
    zt_ckpt_release(e);
    if (e->k && e->P) {
        params_invalidate(e, NULL);
        grads_drain(e, NULL);
        free_buffers(e);
    }
    zt_comm_destroy(e->comm);
    zt_dataset_close(e->train_ds);
    zt_dataset_close(e->val_ds);
    zt_free(e->P);
    zt_free(e->segs);
    zt_gpt2_layout_free(&e->lay);
    if (e->ops)
        e->ops->ctx_destroy(e->k);
    zt_free(e);
}

int64_t zt_engine_steps_done(const zt_engine *e)
{
    return e->steps_done;
}

/* ---- the optimizer step ---- */

/* The host part of an offloaded step (Twin-Flow's ratio of the shard) runs as a pipeline over
 * its segments, each at most ZT_OFFLOAD_PIECE elements: the engine's thread brings segment
 * i+1's gradients to (pinned) host memory while a host thread updates segment i, queues the
 * device part's AdamW on the backend meanwhile, and sends each updated segment back as soon as
 * it is done. Transfers in both directions and both updates overlap; the step waits for the
 * slower of the two sides. */
typedef struct host_job {
    zt_engine *e;
    const zt_adamw_args *args;
    zt_kctx *k;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready; /* host segments, in order, whose gradients are in host memory */
    int done;  /* host segments updated */
} host_job;

static void adamw_segment(zt_engine *e, const zt_ops *ops, zt_kctx *k, const zt_optseg *s,
                          const zt_adamw_args *base)
{
    zt_adamw_args a = *base;
    if (!s->decay)
        a.weight_decay = 0.0f;
    if (s->host) {
        ops->adamw(k, e->h_master + s->side_off, (char *)e->h_grad + s->side_off * gsize(e),
                   e->gdt, e->h_m + s->side_off, e->h_v + s->side_off, s->len, &a,
                   e->mixed ? (char *)e->h_lp + s->side_off * psize(e) : NULL, e->pdt);
    } else {
        float *p = e->mixed ? e->master + s->side_off : (float *)param_loc(e, s->unit, s->j);
        ops->adamw(k, p, grad_loc(e, s->unit, s->j), e->gdt, e->m + s->side_off,
                   e->v + s->side_off, s->len, &a, e->mixed ? param_loc(e, s->unit, s->j) : NULL,
                   e->pdt);
    }
}

static void *host_adamw_main(void *arg)
{
    host_job *hj = arg;
    zt_engine *e = hj->e;
    int n = 0;
    for (int i = 0; i < e->nsegs; i++) {
        if (!e->segs[i].host)
            continue;
        pthread_mutex_lock(&hj->mu);
        while (hj->ready <= n)
            pthread_cond_wait(&hj->cv, &hj->mu);
        pthread_mutex_unlock(&hj->mu);
        adamw_segment(e, zt_ops_cpu(), hj->k, &e->segs[i], hj->args);
        pthread_mutex_lock(&hj->mu);
        hj->done = ++n;
        pthread_cond_broadcast(&hj->cv);
        pthread_mutex_unlock(&hj->mu);
    }
    return NULL;
}

/* Queues host segment s's updated values (16-bit copy, or fp32 master) to the backend. */
static void host_segment_back(zt_engine *e, const zt_optseg *s)
{
    const void *src = e->mixed ? (const void *)((char *)e->h_lp + s->side_off * psize(e))
                               : (const void *)(e->h_master + s->side_off);
    e->ops->copy_h2d(e->k, param_loc(e, s->unit, s->j), src, s->len * psize(e));
}

/* Marks host segment count n ready (threaded) and sends back those the host thread finished;
 * with wait, blocks until the host thread has done all nhost. Returns the segments sent. */
static int host_pipeline_advance(zt_engine *e, host_job *hj, int ready, bool wait, int sent,
                                 int nhost, const int *hidx)
{
    pthread_mutex_lock(&hj->mu);
    if (ready > hj->ready) {
        hj->ready = ready;
        pthread_cond_broadcast(&hj->cv);
    }
    while (wait && hj->done < nhost)
        pthread_cond_wait(&hj->cv, &hj->mu);
    int done = hj->done;
    pthread_mutex_unlock(&hj->mu);
    for (; sent < done; sent++)
        host_segment_back(e, &e->segs[hidx[sent]]);
    return sent;
}

static zt_status optimizer_step(zt_engine *e, float grad_scale, double lr, zt_err *err)
{
    const zt_optim_cfg *oc = &e->job.ds.optimizer;
    double t = (double)(e->applied_steps + 1);
    zt_adamw_args a = {
        .lr = (float)lr,
        .beta1 = (float)oc->beta1,
        .beta2 = (float)oc->beta2,
        .eps = (float)oc->eps,
        .weight_decay = (float)oc->weight_decay,
        .bc1 = (float)(1.0 - pow(oc->beta1, t)),
        .bc2 = (float)(1.0 - pow(oc->beta2, t)),
        .grad_scale = grad_scale,
        .l2_mode = !oc->adam_w_mode,
    };
    if (!e->host_n) {
        for (int i = 0; i < e->nsegs; i++)
            adamw_segment(e, e->ops, e->k, &e->segs[i], &a);
        return ZT_OK;
    }
    int *hidx = zt_malloc((size_t)e->nsegs * sizeof(int));
    if (!hidx)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    int nhost = 0;
    for (int i = 0; i < e->nsegs; i++)
        if (e->segs[i].host)
            hidx[nhost++] = i;
    host_job hj = {.e = e, .args = &a};
    zt_status st = zt_ops_cpu()->ctx_create(&hj.k, 0, err);
    if (st != ZT_OK) {
        zt_free(hidx);
        return zt_err_prefix(err, "host optimizer");
    }
    pthread_mutex_init(&hj.mu, NULL);
    pthread_cond_init(&hj.cv, NULL);
    pthread_t th;
    bool threaded = pthread_create(&th, NULL, host_adamw_main, &hj) == 0;
    int sent = 0;
    /* gradients down, one segment at a time (complete when copy_d2h returns) */
    for (int n = 0; n < nhost; n++) {
        const zt_optseg *s = &e->segs[hidx[n]];
        e->ops->copy_d2h(e->k, (char *)e->h_grad + s->side_off * gsize(e),
                         grad_loc(e, s->unit, s->j), s->len * gsize(e));
        if (threaded)
            sent = host_pipeline_advance(e, &hj, n + 1, false, sent, nhost, hidx);
    }
    /* the device part, queued behind the copies */
    for (int i = 0; i < e->nsegs; i++)
        if (!e->segs[i].host)
            adamw_segment(e, e->ops, e->k, &e->segs[i], &a);
    if (threaded) {
        sent = host_pipeline_advance(e, &hj, nhost, true, sent, nhost, hidx);
        pthread_join(th, NULL);
    } else {
        for (int n = 0; n < nhost; n++)
            adamw_segment(e, zt_ops_cpu(), hj.k, &e->segs[hidx[n]], &a);
        for (; sent < nhost; sent++)
            host_segment_back(e, &e->segs[hidx[sent]]);
    }
    pthread_cond_destroy(&hj.cv);
    pthread_mutex_destroy(&hj.mu);
    zt_ops_cpu()->ctx_destroy(hj.k);
    zt_free(hidx);
    return ZT_OK;
}

/* Stage 0/1 reductions at the accumulation boundary. */
static zt_status reduce_at_boundary(zt_engine *e, zt_err *err)
{
    zt_status st = ZT_OK;
    if (e->world == 1 || e->stage >= 2)
        return ZT_OK;
    uint64_t t0 = zt_now_ns();
    if (e->stage == 0) {
        st = zt_comm_allreduce(e->comm, e->grads, e->Ptot, e->gdt, NULL, err);
    } else {
        zt_comm_req **reqs = zt_calloc((size_t)e->nu, sizeof(*reqs));
        if (!reqs)
            return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        for (int u = 0; u < e->nu && st == ZT_OK; u++) {
            char *full = (char *)e->grads + e->foff[u] * gsize(e);
            st = zt_comm_reduce_scatter(e->comm, full, full + e->base[u] * gsize(e), e->S[u],
                                        e->gdt, &reqs[u], err);
        }
        for (int u = 0; u < e->nu; u++) {
            if (!reqs[u])
                continue;
            zt_status s2 = zt_comm_wait(e->comm, reqs[u], err);
            if (s2 != ZT_OK && st == ZT_OK)
                st = s2;
        }
        zt_free(reqs);
    }
    e->t_comm += (double)(zt_now_ns() - t0) * 1e-9;
    return st;
}

/* Stage 1/2: every rank's updated region back to all ranks. */
static zt_status gather_params(zt_engine *e, zt_err *err)
{
    zt_status st = ZT_OK;
    if (e->world == 1 || e->stage == 0 || e->stage == 3)
        return ZT_OK;
    uint64_t t0 = zt_now_ns();
    zt_comm_req **reqs = zt_calloc((size_t)e->nu, sizeof(*reqs));
    if (!reqs)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    for (int u = 0; u < e->nu && st == ZT_OK; u++) {
        char *full = (char *)e->params + e->foff[u] * psize(e);
        st = zt_comm_allgather(e->comm, full + e->base[u] * psize(e), full, e->S[u], e->pdt,
                               &reqs[u], err);
    }
    for (int u = 0; u < e->nu; u++) {
        if (!reqs[u])
            continue;
        zt_status s2 = zt_comm_wait(e->comm, reqs[u], err);
        if (s2 != ZT_OK && st == ZT_OK)
            st = s2;
    }
    zt_free(reqs);
    e->t_comm += (double)(zt_now_ns() - t0) * 1e-9;
    return st;
}

/* Sum of squares and non-finite count of this rank's part of the reduced gradient. */
static void grad_stats(zt_engine *e, double out[2])
{
    out[0] = out[1] = 0.0;
    for (int u = 0; u < e->nu; u++) {
        size_t idx = e->stage < 2 ? e->foff[u] + (size_t)e->rank * e->S[u] : e->soff[u];
        e->ops->sumsq_nonfinite(e->k, (char *)e->grads + idx * gsize(e), e->gdt, e->S[u], out);
    }
}

static zt_status load_micro(zt_engine *e, zt_dataset *ds, int64_t step, int micro, zt_err *err)
{
    zt_status st = zt_dataset_micro_batch(ds, step, e->job.ds.train_batch_size, e->world, e->rank,
                                          micro, e->B, e->h_inp, e->h_tgt, err);
    if (st != ZT_OK)
        return st;
    size_t bytes = (size_t)e->B * e->T * sizeof(int32_t);
    e->ops->copy_h2d(e->k, e->d_inp, e->h_inp, bytes);
    e->ops->copy_h2d(e->k, e->d_tgt, e->h_tgt, bytes);
    return ZT_OK;
}

static double sum_losses(zt_engine *e)
{
    size_t n = (size_t)e->B * e->T;
    e->ops->copy_d2h(e->k, e->h_losses, e->head.losses, n * sizeof(float));
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += e->h_losses[i];
    return s;
}

zt_status zt_engine_step(zt_engine *e, zt_step_stats *out, zt_err *err)
{
    zt_status st;
    zt_step_stats s;
    memset(&s, 0, sizeof(s));
    s.val_loss = -1.0;
    zt_memacct_reset_peaks(&e->mem);
    zt_comm_stats cs0, cs1;
    zt_comm_get_stats(e->comm, &cs0);
    e->t_fwd = e->t_bwd = e->t_opt = e->t_comm = 0.0;
    uint64_t t_start = zt_now_ns();

    const zt_ds_cfg *ds = &e->job.ds;
    double denom = (double)ds->train_batch_size * (double)e->T;
    double loss_scale = e->scaler.scale;
    float dloss = (float)(loss_scale / denom);
    double local_loss = 0.0;

    size_t gn = e->stage < 2 ? e->Ptot : e->Stot;
    /* op times (ZT_OP_TIMES=1): what marks an evaluation left are dropped; the step's own are
     * taken at its end, for its report line */
    e->ops->marks_take(e->k, &e->optimes);
    e->ops->mark(e->k, "engine");
    e->ops->memset0(e->k, e->grads, gn * gsize(e));
    for (int micro = 0; micro < ds->grad_accum; micro++) {
        CHECK(load_micro(e, e->train_ds, e->steps_done, micro, err), out);
        uint64_t t0 = zt_now_ns();
        zt_comm_set_where(e->comm, e->steps_done + 1, "forward");
        CHECK(forward(e, dloss, err), out);
        if (e->crash_step == e->steps_done + 1) {
            ZT_ERROR("engine", "test hook: rank %d dies in the middle of step %lld", e->rank,
                     (long long)e->crash_step);
            abort();
        }
        local_loss += sum_losses(e);
        uint64_t t1 = zt_now_ns();
        zt_comm_set_where(e->comm, e->steps_done + 1, "backward");
        CHECK(backward(e, err), out);
        CHECK(e->ops->sync(e->k, err), out);
        uint64_t t2 = zt_now_ns();
        e->t_fwd += (double)(t1 - t0) * 1e-9;
        e->t_bwd += (double)(t2 - t1) * 1e-9;
    }
    CHECK(grads_drain(e, err), out);
    CHECK(reduce_at_boundary(e, err), out);

    uint64_t t_opt0 = zt_now_ns();
    double comm_before_opt = e->t_comm;
    e->ops->mark(e->k, "optimizer");
    zt_comm_set_where(e->comm, e->steps_done + 1, "optimizer");
    double gs[2];
    grad_stats(e, gs);
    CHECK(e->ops->sync(e->k, err), out);
    /* one small all-reduce: gradient sum of squares, non-finite count, loss, and how many
     * ranks are still writing a checkpoint shard in the background */
    float red[4] = {(float)gs[0], (float)gs[1], (float)(local_loss / denom),
                    zt_ckpt_write_pending(e) ? 1.0f : 0.0f};
    {
        uint64_t t0 = zt_now_ns();
        e->ops->copy_h2d(e->k, e->d_red, red, sizeof(red));
        CHECK(zt_comm_allreduce(e->comm, e->d_red, 4, ZT_F32, NULL, err), out);
        e->ops->copy_d2h(e->k, red, e->d_red, sizeof(red));
        e->t_comm += (double)(zt_now_ns() - t0) * 1e-9;
    }
    double norm = sqrt((double)red[0]) / loss_scale;
    bool nonfinite = red[1] > 0.0f || !isfinite(red[0]);
    e->ck_all_written = red[3] == 0.0f;
    s.loss = red[2];
    s.loss_scale = loss_scale;
    s.lr = zt_sched_lr(&ds->scheduler, ds->optimizer.lr, e->applied_steps);
    if (!isfinite(s.loss) && !e->first_nonfinite[0])
        snprintf(e->first_nonfinite, sizeof(e->first_nonfinite), "the loss at step %lld (%g)",
                 (long long)e->steps_done + 1, s.loss);
    if (nonfinite) {
        s.skipped = true;
        e->skipped_total++;
        s.grad_norm = NAN;
        if (!e->first_nonfinite[0])
            snprintf(e->first_nonfinite, sizeof(e->first_nonfinite),
                     "the gradient norm at step %lld (%.0f non-finite gradient value%s%s)",
                     (long long)e->steps_done + 1, (double)red[1], red[1] == 1.0f ? "" : "s",
                     red[1] > 0.0f ? "" : ", its sum of squares overflowed");
        ZT_WARN("engine", "step %lld skipped on every rank: %.0f non-finite gradient values (loss scale %g); %lld skipped so far",
                (long long)e->steps_done + 1, (double)red[1], loss_scale,
                (long long)e->skipped_total);
    } else {
        s.grad_norm = norm;
        double coef = 1.0;
        if (ds->gradient_clipping > 0.0 && norm > ds->gradient_clipping)
            coef = ds->gradient_clipping / (norm + 1e-6);
        CHECK(optimizer_step(e, (float)(coef / loss_scale), s.lr, err), out);
        e->applied_steps++;
        CHECK(e->ops->sync(e->k, err), out);
        CHECK(gather_params(e, err), out);
        CHECK(params_invalidate(e, err), out);
    }
    if (zt_loss_scaler_update(&e->scaler, nonfinite) != ZT_OK) {
        st = zt_err_set(err, ZT_ERR_NONFINITE,
                        "step %lld: the fp16 loss scale is already at its minimum (%g) and the gradients still overflow; the run cannot make progress. Lower the learning rate, use bf16, or lower fp16.min_loss_scale",
                        (long long)e->steps_done + 1, e->scaler.min_scale);
        goto out;
    }
    /* a run whose every step is skipped would otherwise "complete" with what it loaded */
    e->skipped_run = nonfinite ? e->skipped_run + 1 : 0;
    if (e->job.train.max_skipped_steps > 0 && e->skipped_run >= e->job.train.max_skipped_steps) {
        bool at_load = e->nonfinite_tensors > 0; /* loading comes before any step */
        st = zt_err_set(err, ZT_ERR_NONFINITE,
                        "%lld consecutive steps skipped for non-finite values (train.max_skipped_steps=%lld); the first non-finite value was in %s; %s, or raise train.max_skipped_steps (0: never stop)",
                        (long long)e->skipped_run, (long long)e->job.train.max_skipped_steps,
                        e->first_nonfinite[0] ? e->first_nonfinite : "the gradients",
                        at_load ? "check the model file (model.init) or the checkpoint the run started from"
                                : "lower the learning rate, set gradient_clipping, use bf16 rather than fp16, or check the data");
        goto out;
    }
    e->steps_done++;
    e->ops->marks_take(e->k, &e->optimes);
    uint64_t t_end = zt_now_ns();
    e->t_opt = (double)(t_end - t_opt0) * 1e-9 - (e->t_comm - comm_before_opt);

    zt_comm_get_stats(e->comm, &cs1);
    charge_comm_buffers(e);
    s.step = e->steps_done;
    s.skipped_total = e->skipped_total;
    s.step_s = (double)(t_end - t_start) * 1e-9;
    s.fwd_s = e->t_fwd;
    s.bwd_s = e->t_bwd;
    s.opt_s = e->t_opt;
    s.comm_s = e->t_comm;
    s.comm_bytes = cs1.bytes_sent - cs0.bytes_sent;
    double tokens = denom;
    s.tokens_per_s = tokens / s.step_s;
    const zt_gpt2_dims *d = &e->lay.d;
    double fpt = 6.0 * (double)e->lay.num_params + 6.0 * d->L * (double)d->C * (double)e->T;
    s.tflops = fpt * s.tokens_per_s / e->world / 1e12;
    s.mfu = e->peak_flops > 0 ? s.tflops * 1e12 / e->peak_flops : 0.0;
    for (int i = 0; i < ZT_MEM_CATEGORY_COUNT; i++)
        s.mem[i] = e->mem.cur[i];
    s.mem_peak = e->mem.total_peak;
    s.model_state_bytes = zt_memacct_model_states(&e->mem);
    st = ZT_OK;
out:
    if (out)
        *out = s;
    return st;
}

zt_status zt_engine_eval(zt_engine *e, double *loss, zt_err *err)
{
    zt_status st = ZT_OK;
    *loss = NAN;
    if (!e->val_ds)
        return zt_err_set(err, ZT_ERR_CONFIG, "no validation data (data.val) to evaluate on");
    const zt_ds_cfg *ds = &e->job.ds;
    double local = 0.0;
    int64_t nsteps = e->job.train.eval_steps > 0 ? e->job.train.eval_steps : 1;
    zt_comm_set_where(e->comm, e->steps_done, "evaluation");
    for (int64_t s = 0; s < nsteps; s++) {
        for (int micro = 0; micro < ds->grad_accum; micro++) {
            CHECK(load_micro(e, e->val_ds, s, micro, err), out);
            CHECK(forward(e, 0.0f, err), out);
            local += sum_losses(e);
        }
    }
    double denom = (double)nsteps * (double)ds->train_batch_size * (double)e->T;
    float red = (float)(local / denom);
    e->ops->copy_h2d(e->k, e->d_red, &red, sizeof(red));
    CHECK(zt_comm_allreduce(e->comm, e->d_red, 1, ZT_F32, NULL, err), out);
    e->ops->copy_d2h(e->k, &red, e->d_red, sizeof(red));
    *loss = red;
out:
    return st;
}

/* ---- reporting ---- */

static int format_step_line(const zt_engine *e, const zt_step_stats *s, char *buf, size_t n)
{
    int w = snprintf(buf, n, "step=%lld loss=%.6f lr=%.4e grad_norm=%.6f", (long long)s->step,
                     s->loss, s->lr, s->grad_norm);
    if (e->job.ds.fp16.enabled)
        w += snprintf(buf + w, n - (size_t)w, " loss_scale=%g", s->loss_scale);
    w += snprintf(buf + w, n - (size_t)w,
                  " skipped=%lld tok_s=%.0f step_ms=%.2f fwd_ms=%.2f bwd_ms=%.2f opt_ms=%.2f comm_ms=%.2f tflops=%.4f",
                  (long long)s->skipped_total, s->tokens_per_s, s->step_s * 1e3, s->fwd_s * 1e3,
                  s->bwd_s * 1e3, s->opt_s * 1e3, s->comm_s * 1e3, s->tflops);
    if (s->mfu > 0)
        w += snprintf(buf + w, n - (size_t)w, " mfu=%.4f", s->mfu);
    w += snprintf(buf + w, n - (size_t)w, " comm_bytes=%llu", (unsigned long long)s->comm_bytes);
    for (int i = 0; i < ZT_MEM_CATEGORY_COUNT; i++)
        w += snprintf(buf + w, n - (size_t)w, " mem_%s=%lld", zt_mem_category_name((zt_mem_category)i),
                      (long long)s->mem[i]);
    w += snprintf(buf + w, n - (size_t)w, " mem_model_states=%lld mem_peak=%lld",
                  (long long)s->model_state_bytes, (long long)s->mem_peak);
    if (s->val_loss >= 0)
        w += snprintf(buf + w, n - (size_t)w, " val_loss=%.6f", s->val_loss);
    for (int i = 0; i < e->optimes.n && (size_t)w < n; i++)
        w += snprintf(buf + w, n - (size_t)w, " op_%s_ms=%.3f", e->optimes.label[i],
                      e->optimes.ms[i]);
    return w;
}

/* One line of the report protocol on ZT_REPORT_FD (see engine.h). */
static void report_line(zt_engine *e, const char *line)
{
    if (e->opts.report_fd >= 0) {
        char buf[4200];
        int n = snprintf(buf, sizeof(buf), "rank=%d %s\n", e->rank, line);
        if (n > 0) {
            ssize_t w = write(e->opts.report_fd, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
            (void)w;
        }
    }
}

/* Snapshots a checkpoint with its buffer accounted for. */
static zt_status save_begin(zt_engine *e, zt_err *err)
{
    zt_comm_set_where(e->comm, e->steps_done, "checkpoint");
    zt_status st = ckpt_snapshot_ready(e, err);
    return st == ZT_OK ? zt_ckpt_save_begin(e, err) : st;
}

zt_status zt_engine_train(zt_engine *e, zt_err *err)
{
    zt_status st = ZT_OK;
    const zt_train_cfg *tc = &e->job.train;
    int64_t spp = e->job.ds.steps_per_print > 0 ? e->job.ds.steps_per_print : 10;
    zt_monitor *mon = NULL;
    if (e->rank == 0)
        CHECK(zt_monitor_open(&mon, &e->job, err), out);
    report_line(e, "phase=training");
    while (e->steps_done < tc->steps) {
        zt_step_stats s;
        CHECK(zt_engine_step(e, &s, err), out);
        if (e->val_ds && tc->eval_every > 0 &&
            (s.step % tc->eval_every == 0 || s.step == tc->steps)) {
            report_line(e, "phase=evaluating");
            CHECK(zt_engine_eval(e, &s.val_loss, err), out);
            report_line(e, "phase=training");
        }
        char line[4096];
        int w = format_step_line(e, &s, line, sizeof(line));
        if (e->rank == 0 && e->opts.step_out) {
            fprintf(e->opts.step_out, "%s\n", line);
            fflush(e->opts.step_out);
        }
        if (w > 0 && (size_t)w < sizeof(line) - 32)
            snprintf(line + w, sizeof(line) - (size_t)w, " coll_seq=%llu",
                     (unsigned long long)zt_comm_last_seq(e->comm));
        report_line(e, line);
        if (e->rank == 0 && (s.step % spp == 0 || s.step == 1))
            ZT_INFO("engine", "step %lld/%lld loss %.4f lr %.3e %.0f tok/s", (long long)s.step,
                    (long long)tc->steps, s.loss, s.lr, s.tokens_per_s);
        /* DeepSpeed's wall_clock_breakdown: the step's time split, every step */
        if (e->rank == 0 && e->job.ds.wall_clock_breakdown)
            ZT_INFO("engine",
                    "step %lld time (ms) | forward: %.2f | backward: %.2f | optimizer: %.2f | communication: %.2f | step: %.2f",
                    (long long)s.step, s.fwd_s * 1e3, s.bwd_s * 1e3, s.opt_s * 1e3,
                    s.comm_s * 1e3, s.step_s * 1e3);
        zt_monitor_step(mon, s.step * e->job.ds.train_batch_size, s.loss, s.lr, s.loss_scale);
        /* the other ranks print no step line: their log says what they hold */
        if (e->rank > 0 && (s.step % spp == 0 || s.step == 1))
            ZT_INFO("engine",
                    "step %lld memory: model states %.1f MiB, activations %.1f MiB, buffers %.1f MiB, comm %.1f MiB, ckpt snapshot %.1f MiB, peak %.1f MiB",
                    (long long)s.step, (double)s.model_state_bytes / 1048576.0,
                    (double)s.mem[ZT_MEM_ACTIVATIONS] / 1048576.0,
                    (double)s.mem[ZT_MEM_BUFFERS] / 1048576.0,
                    (double)s.mem[ZT_MEM_COMM] / 1048576.0, (double)s.mem[ZT_MEM_CKPT] / 1048576.0,
                    (double)s.mem_peak / 1048576.0);
        /* a checkpoint commits at the first step boundary where every rank's shard is
         * durable (all ranks learn it from the step's all-reduce), so training never waits */
        if (e->ck_all_written)
            CHECK(zt_ckpt_save_finish(e, err), out);
        if (tc->checkpoint_every > 0 && s.step % tc->checkpoint_every == 0 && s.step < tc->steps)
            CHECK(save_begin(e, err), out);
    }
    CHECK(zt_ckpt_save_finish(e, err), out);
    if (!e->opts.no_final_save && e->last_ckpt_step != e->steps_done) {
        report_line(e, "phase=checkpointing");
        CHECK(zt_engine_save(e, err), out);
    }
out:
    zt_monitor_close(mon);
    return st;
}

zt_status zt_engine_save(zt_engine *e, zt_err *err)
{
    zt_status st = save_begin(e, err);
    if (st != ZT_OK)
        return st;
    return zt_ckpt_save_finish(e, err);
}

/* ---- export ---- */

/* Gathers the fp32 values of unit u (P_u elements) from every rank's region into out. */
zt_status zt_engine_gather_unit(zt_engine *e, int u, int section, float *out, zt_err *err)
{
    size_t S = e->S[u];
    size_t r0 = (size_t)e->rank * S;
    memset(out, 0, e->P[u] * sizeof(float));
    /* this rank's chunk [r*S, (r+1)*S) of the unit, from wherever its truth lives */
    size_t n = e->lay.unit_numel[u];
    size_t len = r0 >= n ? 0 : (n - r0 < S ? n - r0 : S);
    if (len && section == 0) {
        zt_engine_region_get(e, u, r0 - e->base[u], len, out + r0);
    } else if (len) {
        float *tmp = zt_malloc(len * sizeof(float));
        if (!tmp)
            return zt_err_set(err, ZT_ERR_NOMEM, "out of memory gathering unit %d", u);
        zt_engine_moments_get(e, u, r0 - e->base[u], len, section == 1 ? out + r0 : tmp,
                              section == 1 ? tmp : out + r0);
        zt_free(tmp);
    }
    if (e->world == 1)
        return ZT_OK;
    float *dev = balloc(e, ZT_MEM_COMM, e->P[u] * sizeof(float));
    if (!dev)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory gathering unit %d", u);
    e->ops->copy_h2d(e->k, dev + r0, out + r0, S * sizeof(float));
    zt_status st = zt_comm_allgather(e->comm, dev + r0, dev, S, ZT_F32, NULL, err);
    if (st == ZT_OK)
        e->ops->copy_d2h(e->k, out, dev, e->P[u] * sizeof(float));
    bfree(e, ZT_MEM_COMM, dev, e->P[u] * sizeof(float));
    return st;
}

zt_status zt_engine_dump_state(zt_engine *e, const char *path, zt_err *err)
{
    zt_status st = ZT_OK;
    size_t maxp = e->P[0] > e->max_unit_p ? e->P[0] : e->max_unit_p;
    float *buf = zt_malloc(maxp * sizeof(float));
    FILE *f = NULL;
    if (!buf)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    if (e->rank == 0 && !(f = fopen(path, "wb"))) {
        st = zt_err_set(err, ZT_ERR_IO, "cannot write %s", path);
        /* keep going: the gathers are collective */
    }
    for (int u = 0; u < e->nu; u++) {
        for (int sec = 0; sec < 3; sec++) {
            zt_status s2 = zt_engine_gather_unit(e, u, sec, buf, err);
            if (s2 != ZT_OK) {
                st = s2;
                goto out;
            }
            if (f && fwrite(buf, sizeof(float), e->lay.unit_numel[u], f) != e->lay.unit_numel[u])
                st = zt_err_set(err, ZT_ERR_IO, "cannot write %s", path);
        }
    }
out:
    if (f && fclose(f) != 0 && st == ZT_OK)
        st = zt_err_set(err, ZT_ERR_IO, "cannot write %s", path);
    zt_free(buf);
    return st;
}

zt_status zt_engine_param_digest(zt_engine *e, uint32_t *crc, zt_err *err)
{
    zt_status st = ZT_OK;
    size_t maxp = e->P[0] > e->max_unit_p ? e->P[0] : e->max_unit_p;
    void *host = zt_malloc(maxp * psize(e));
    if (!host)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    uint32_t c = 0;
    for (int u = 0; u < e->nu && st == ZT_OK; u++) {
        size_t bytes = e->lay.unit_numel[u] * psize(e);
        if (e->stage < 3) {
            e->ops->copy_d2h(e->k, host, (char *)e->params + e->foff[u] * psize(e), bytes);
        } else {
            float *p;
            if ((st = param_acquire(e, u, &p, err)) != ZT_OK)
                break;
            e->ops->copy_d2h(e->k, host, pslot_find(e, u)->gbuf, bytes);
            param_release(e, u);
        }
        if ((st = e->ops->sync(e->k, err)) == ZT_OK)
            c = zt_crc32c(c, host, bytes);
    }
    zt_free(host);
    *crc = c;
    return st;
}
