/* zerotrain: the optimizer's update of this rank's region — its segments (tensor pieces, split
 * at the device/host boundary of offload_optimizer.ratio) and AdamW over them, the offloaded part
 * on a host thread pipelined with the transfers (Twin-Flow). */
#define _POSIX_C_SOURCE 200809L
#include "engine_int.h"

#include <stdlib.h>

#include "../common/alloc.h"
#include "../common/settings.h"
#include "../common/timeutil.h"

/* Largest host segment of an offloaded optimizer step (elements): the unit of its pipeline
 * (4 MiB of fp32 gradients, a few hundred microseconds over PCIe). */
#define ZT_OFFLOAD_PIECE ((size_t)1 << 20)

/* The optimizer's segments: tensor pieces of the region, split at the device/host boundary
 * and, on the host side, into pieces of the offload pipeline. */
size_t zt_engine_offload_piece(const zt_engine *e)
{
    /* DeepSpeed's sub_group_size bounds a segment (default 1e9: the pipeline's piece);
     * test hook: ZT_OFFLOAD_PIECE=N cuts the host part finer than any tensor of a small model */
    size_t piece = ZT_OFFLOAD_PIECE;
    int64_t sgs = e->job.ds.zero.sub_group_size;
    if (sgs > 0 && (uint64_t)sgs < piece)
        piece = (size_t)sgs;
    int64_t forced = zt_setting_int(ZT_SET_OFFLOAD_PIECE); /* 0: unset or not a count */
    if (forced > 0)
        piece = (size_t)forced;
    return piece;
}

zt_status zt_engine_setup_segments(zt_engine *e, zt_err *err)
{
    int nu = e->nu;
    size_t dev_n = zt_zero_device_elems(e->zero);
    size_t piece = zt_engine_offload_piece(e);

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
                size_t gi = zt_zero_region_offset(e->zero, u) + j;
                size_t len = b - a;
                bool host = gi >= dev_n;
                if (!host && gi + len > dev_n)
                    len = dev_n - gi;
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
                s->side_off = host ? gi - dev_n : gi;
                a += len;
            }
        }
    }
    return ZT_OK;
}

/* The host part of an offloaded step (Twin-Flow's ratio of the shard) runs as a pipeline over
 * its segments, each at most ZT_OFFLOAD_PIECE elements: the engine's thread brings segment
 * i+1's gradients to (pinned) host memory while a host thread updates segment i, queues the
 * device part's AdamW on the backend meanwhile, and sends each updated segment back as soon as
 * it is done. Transfers in both directions and both updates overlap; the step waits for the
 * slower of the two sides.
 *
 * With NVMe offload the host part's stream of swap reads and writes is much slower than its
 * arithmetic, so the step does not wait for it (unless an all-gather of the parameters must
 * follow the update, stages 1-2 on more than one rank): once every host gradient is in host
 * memory and the device part is queued, the step returns and the host thread goes on in the
 * background. Segments are updated in unit order, so the next step's forward, which needs unit
 * 0 first, waits (zt_engine_optim_ready, from zt_engine_param_acquire) only until the segments
 * of the unit it acquires are updated; the engine's thread then sends them back. The result is
 * the same update in the same order: only when its values arrive changes. */
typedef struct host_job {
    zt_engine *e;
    zt_adamw_args args; /* a copy: a background step outlives its caller's */
    zt_kctx *k;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready; /* host segments, in order, whose gradients are in host memory */
    int done;  /* host segments updated (or skipped after a failure) */
    zt_status st; /* the first failure of NVMe offload's swap; later segments are skipped */
    zt_err err;
    uint64_t t_end; /* when the thread finished, write-backs included */
} host_job;

/* One optimizer step's host part, from its start to its end (offload.c only). */
typedef struct zt_optim_bg {
    host_job hj;
    pthread_t th;
    bool threaded, joined;
    int nhost;
    int *hidx;   /* e->segs index of host segment n */
    int *upto;   /* per unit u: host segments of units 0..u (segments are in unit order) */
    int sent;    /* host segments whose updated values were sent back */
    int64_t step;
    uint64_t t0;
    zt_status st; /* a background failure, returned by every wait after it */
    zt_err err;
} zt_optim_bg;

/* The values sent back to the device after a host update: the parameter-dtype copy AdamW
 * writes (mixed precision, and NVMe offload, whose master is reused for the next segment), else
 * the host master itself. */
static bool host_copies_back_lp(const zt_engine *e)
{
    return e->mixed || e->nvme;
}

/* The gradients of host segment s in host memory: the gradient shard itself with offload_param
 * (zt_engine_grads_host), else their copy in h_grad. */
static const void *host_grad(zt_engine *e, const zt_optseg *s)
{
    if (zt_engine_grads_host(e))
        return zt_engine_grad_loc(e, s->unit, s->j);
    return (char *)e->h_grad + s->side_off * zt_engine_gsize(e);
}

/* Errors come from offload_param "nvme" only (the device part's parameters in a swap). */
static zt_status adamw_segment(zt_engine *e, const zt_ops *ops, zt_kctx *k, const zt_optseg *s,
                               const zt_adamw_args *base, zt_err *err)
{
    zt_adamw_args a = *base;
    if (!s->decay)
        a.weight_decay = 0.0f;
    if (s->host) {
        size_t off = s->side_off;
        ops->adamw(k, e->h_master + off, host_grad(e, s), e->gdt,
                   e->h_m + off, e->h_v + off, s->len, &a,
                   e->mixed ? (char *)e->h_lp + off * zt_engine_psize(e) : NULL, e->pdt);
    } else {
        void *lp;
        zt_status st =
            zt_engine_param_ptr(e, s->unit, e->base[s->unit] + s->j, ZT_PARAM_WRITE, &lp, err);
        if (st != ZT_OK)
            return st;
        float *p = e->mixed ? e->master + s->side_off : (float *)lp;
        ops->adamw(k, p, zt_engine_grad_loc(e, s->unit, s->j), e->gdt, e->m + s->side_off,
                   e->v + s->side_off, s->len, &a, e->mixed ? lp : NULL, e->pdt);
    }
    return ZT_OK;
}

/* Host segment n (the n-th of the host part, e->segs[i]): in host memory, or streamed through
 * NVMe offload's buffers (whose errors it returns). */
static zt_status host_segment(host_job *hj, int n, int i, zt_err *err)
{
    zt_engine *e = hj->e;
    const zt_optseg *s = &e->segs[i];
    if (!e->nvme) {
        /* a host segment: no error */
        return adamw_segment(e, zt_ops_cpu(), hj->k, s, &hj->args, err);
    }
    float *master, *m, *v;
    zt_status st = zt_engine_nvme_seg_get(e, n, &master, &m, &v, err);
    if (st != ZT_OK)
        return st;
    zt_adamw_args a = hj->args;
    if (!s->decay)
        a.weight_decay = 0.0f;
    size_t off = s->side_off;
    zt_ops_cpu()->adamw(hj->k, master, host_grad(e, s), e->gdt, m, v,
                        s->len, &a, (char *)e->h_lp + off * zt_engine_psize(e), e->pdt);
    return zt_engine_nvme_seg_put(e, n, err);
}

/* The host thread: every host segment in order as its gradients arrive, then (NVMe offload)
 * the stream's last write-backs. A failure is kept in hj (under its lock) and skips the
 * segments after it. */
static void *host_adamw_main(void *arg)
{
    host_job *hj = arg;
    zt_engine *e = hj->e;
    zt_status st = ZT_OK;
    zt_err err;
    zt_err_clear(&err);
    int n = 0;
    for (int i = 0; i < e->nsegs; i++) {
        if (!e->segs[i].host)
            continue;
        pthread_mutex_lock(&hj->mu);
        while (hj->ready <= n)
            pthread_cond_wait(&hj->cv, &hj->mu);
        pthread_mutex_unlock(&hj->mu);
        if (st == ZT_OK)
            st = host_segment(hj, n, i, &err);
        pthread_mutex_lock(&hj->mu);
        hj->done = ++n;
        if (st != ZT_OK && hj->st == ZT_OK) {
            hj->st = st;
            hj->err = err;
        }
        pthread_cond_broadcast(&hj->cv);
        pthread_mutex_unlock(&hj->mu);
    }
    if (e->nvme) {
        zt_status s2 = zt_engine_nvme_step_end(e, st, &err);
        pthread_mutex_lock(&hj->mu);
        if (s2 != ZT_OK && hj->st == ZT_OK) {
            hj->st = s2;
            hj->err = err;
        }
        pthread_mutex_unlock(&hj->mu);
    }
    hj->t_end = zt_now_ns();
    return NULL;
}

/* Queues host segment s's updated values (16-bit copy, or fp32 master) to the backend. Errors
 * come from offload_param "nvme" only. */
static zt_status host_segment_back(zt_engine *e, const zt_optseg *s, zt_err *err)
{
    const void *src = host_copies_back_lp(e)
                          ? (const void *)((char *)e->h_lp + s->side_off * zt_engine_psize(e))
                          : (const void *)(e->h_master + s->side_off);
    void *dst;
    zt_status st =
        zt_engine_param_ptr(e, s->unit, e->base[s->unit] + s->j, ZT_PARAM_WRITE, &dst, err);
    if (st == ZT_OK)
        zt_engine_params_put(e, dst, src, s->len * zt_engine_psize(e));
    return st;
}

/* Marks host segment count `ready` ready (threaded) and sends back those the host thread
 * finished, up to at least `need` of them (waiting for the host thread as long as it takes).
 * Returns the host thread's failure, if any (then nothing more is sent back). */
static zt_status host_pipeline_advance(zt_engine *e, zt_optim_bg *bg, int ready, int need,
                                       zt_err *err)
{
    host_job *hj = &bg->hj;
    pthread_mutex_lock(&hj->mu);
    if (ready > hj->ready) {
        hj->ready = ready;
        pthread_cond_broadcast(&hj->cv);
    }
    while (hj->done < need)
        pthread_cond_wait(&hj->cv, &hj->mu);
    int done = hj->done;
    zt_status st = hj->st;
    pthread_mutex_unlock(&hj->mu);
    if (st != ZT_OK) /* hj->err is final once st is set */
        return err ? (*err = hj->err, st) : st;
    for (; bg->sent < done; bg->sent++) {
        zt_status back = host_segment_back(e, &e->segs[bg->hidx[bg->sent]], err);
        if (back != ZT_OK)
            return back;
    }
    return ZT_OK;
}

static void bg_free(zt_optim_bg *bg)
{
    if (!bg)
        return;
    pthread_cond_destroy(&bg->hj.cv);
    pthread_mutex_destroy(&bg->hj.mu);
    zt_ops_cpu()->ctx_destroy(bg->hj.k);
    zt_free(bg->upto);
    zt_free(bg->hidx);
    zt_free(bg);
}

static void bg_join(zt_optim_bg *bg)
{
    if (bg->threaded && !bg->joined)
        pthread_join(bg->th, NULL);
    bg->joined = true;
}

/* zt_engine_optim_ready while a step's host part runs in the background. A failure ends the
 * background step: the thread is joined, and the error, which names the swap file and offset,
 * is kept for every later wait, so that no checkpoint is taken of a half-updated state. */
static zt_status bg_wait(zt_engine *e, int u, zt_err *err)
{
    zt_optim_bg *bg = e->optim_bg;
    if (bg->st != ZT_OK) {
        if (err)
            *err = bg->err;
        return bg->st;
    }
    int need = u < 0 || u >= e->nu ? bg->nhost : bg->upto[u];
    zt_status st = host_pipeline_advance(e, bg, bg->nhost, need, &bg->err);
    if (st == ZT_OK && u < 0) {
        bg_join(bg); /* the last write-backs */
        st = bg->hj.st;
        bg->err = bg->hj.err;
    }
    if (st != ZT_OK) {
        bg_join(bg);
        bg->st = st;
        zt_err_prefix(&bg->err, "the optimizer update of step %lld, finishing in the background",
                      (long long)bg->step);
        if (err)
            *err = bg->err;
        return st;
    }
    if (u >= 0)
        return ZT_OK;
    e->t_opt_bg = (double)(bg->hj.t_end - bg->t0) * 1e-9;
    e->optim_bg = NULL;
    bg_free(bg);
    return e->ops->sync(e->k, err); /* the last values sent back have arrived */
}

zt_status zt_engine_optim_ready(zt_engine *e, int u, zt_err *err)
{
    return e->optim_bg ? bg_wait(e, u, err) : ZT_OK;
}

void zt_engine_optim_close(zt_engine *e)
{
    if (!e->optim_bg)
        return;
    bg_join(e->optim_bg);
    bg_free(e->optim_bg);
    e->optim_bg = NULL;
}

/* The device part alone runs on the backend in segment order; with offload, see host_job. */
zt_status zt_engine_optim_apply(zt_engine *e, const zt_adamw_args *a, zt_err *err)
{
    /* the previous step's host part reads h_grad and the swap's buffers this one refills */
    zt_status st = zt_engine_optim_ready(e, -1, err);
    if (st == ZT_OK)
        st = zt_engine_pnvme_step_begin(e, err);
    if (st != ZT_OK)
        return st;
    if (!zt_zero_host_elems(e->zero)) {
        for (int i = 0; i < e->nsegs && st == ZT_OK; i++)
            st = adamw_segment(e, e->ops, e->k, &e->segs[i], a, err);
        return st;
    }
    zt_optim_bg *bg = zt_calloc(1, sizeof(*bg));
    int *hidx = zt_malloc((size_t)e->nsegs * sizeof(int));
    int *upto = zt_calloc((size_t)e->nu, sizeof(int));
    if (!bg || !hidx || !upto) {
        zt_free(bg);
        zt_free(hidx);
        zt_free(upto);
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    }
    int nhost = 0;
    for (int i = 0; i < e->nsegs; i++)
        if (e->segs[i].host) {
            hidx[nhost++] = i;
            upto[e->segs[i].unit] = nhost;
        }
    for (int u = 1; u < e->nu; u++)
        if (upto[u] < upto[u - 1])
            upto[u] = upto[u - 1];
    bg->hidx = hidx;
    bg->upto = upto;
    bg->nhost = nhost;
    bg->step = e->steps_done + 1;
    bg->t0 = zt_now_ns();
    host_job *hj = &bg->hj;
    hj->e = e;
    hj->args = *a;
    pthread_mutex_init(&hj->mu, NULL);
    pthread_cond_init(&hj->cv, NULL);
    /* offload_param: the host writes the parameter shard the copy stream last read from and
     * reads the gradient shard it last wrote */
    st = e->params_host ? e->ops->sync(e->k, err) : ZT_OK;
    if (st != ZT_OK)
        goto free_bg;
    st = zt_ops_cpu()->ctx_create(&hj->k, 0, err);
    if (st != ZT_OK) {
        st = zt_err_prefix(err, "host optimizer");
        goto free_bg;
    }
    if (e->nvme && (st = zt_engine_nvme_step_begin(e, err)) != ZT_OK) {
        st = zt_engine_nvme_step_end(e, st, err);
        goto free_bg;
    }
    bg->threaded = pthread_create(&bg->th, NULL, host_adamw_main, hj) == 0;
    /* not with a parameter swap: sending values back reads and writes it (engine thread only),
     * and a failure there must end this step, not a later wait */
    bool background =
        bg->threaded && e->nvme && !e->pnvme && !zt_zero_gathers_after_step(e->zero);
    /* gradients down, one segment at a time (complete when copy_d2h returns); in the
     * background a failure of the host thread is left to the waits (bg_wait), which say so */
    for (int n = 0; n < nhost; n++) {
        const zt_optseg *s = &e->segs[hidx[n]];
        if (!zt_engine_grads_host(e)) /* with offload_param they are in host memory already */
            e->ops->copy_d2h(e->k, (char *)e->h_grad + s->side_off * zt_engine_gsize(e),
                             zt_engine_grad_loc(e, s->unit, s->j), s->len * zt_engine_gsize(e));
        if (bg->threaded && st == ZT_OK) {
            zt_status s2 = host_pipeline_advance(e, bg, n + 1, 0, background ? NULL : err);
            if (!background)
                st = s2;
        }
    }
    /* the device part, queued behind the copies */
    for (int i = 0; i < e->nsegs && st == ZT_OK; i++)
        if (!e->segs[i].host)
            st = adamw_segment(e, e->ops, e->k, &e->segs[i], a, err);
    if (background && st == ZT_OK) {
        e->optim_bg = bg;
        return ZT_OK;
    }
    if (bg->threaded) {
        if (st == ZT_OK)
            st = host_pipeline_advance(e, bg, nhost, nhost, err);
    } else {
        for (int n = 0; n < nhost && st == ZT_OK; n++)
            st = host_segment(hj, n, hidx[n], err);
        if (e->nvme)
            st = zt_engine_nvme_step_end(e, st, err);
        for (; st == ZT_OK && bg->sent < nhost; bg->sent++)
            st = host_segment_back(e, &e->segs[hidx[bg->sent]], err);
    }
free_bg:
    if (bg->threaded) {
        /* after a failure the thread may still wait for segments never marked ready */
        pthread_mutex_lock(&hj->mu);
        hj->ready = nhost;
        pthread_cond_broadcast(&hj->cv);
        pthread_mutex_unlock(&hj->mu);
        bg_join(bg);
        if (st == ZT_OK && (st = hj->st) != ZT_OK && err)
            *err = hj->err;
    }
    bg_free(bg);
    return st;
}
