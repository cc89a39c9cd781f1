/* zerotrain: the optimizer's update of this rank's region — its segments (tensor pieces, split
 * at the device/host boundary of offload_optimizer.ratio) and AdamW over them, the offloaded part
 * on a host thread pipelined with the transfers (Twin-Flow). */
#define _POSIX_C_SOURCE 200809L
#include "engine_int.h"

#include <stdlib.h>

#include "../common/alloc.h"
#include "../common/settings.h"

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
 * slower of the two sides. */
typedef struct host_job {
    zt_engine *e;
    const zt_adamw_args *args;
    zt_kctx *k;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready; /* host segments, in order, whose gradients are in host memory */
    int done;  /* host segments updated */
    zt_status st; /* the first failure of NVMe offload's swap; later segments are skipped */
    zt_err err;
} host_job;

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
 * NVMe offload's buffers. A failure is kept in hj and skips the segments after it. */
static void host_segment(host_job *hj, int n, int i)
{
    zt_engine *e = hj->e;
    const zt_optseg *s = &e->segs[i];
    if (!e->nvme) {
        adamw_segment(e, zt_ops_cpu(), hj->k, s, hj->args, NULL); /* a host segment: no error */
        return;
    }
    if (hj->st != ZT_OK)
        return;
    float *master, *m, *v;
    hj->st = zt_engine_nvme_seg_get(e, n, &master, &m, &v, &hj->err);
    if (hj->st != ZT_OK)
        return;
    zt_adamw_args a = *hj->args;
    if (!s->decay)
        a.weight_decay = 0.0f;
    size_t off = s->side_off;
    zt_ops_cpu()->adamw(hj->k, master, host_grad(e, s), e->gdt, m, v,
                        s->len, &a, (char *)e->h_lp + off * zt_engine_psize(e), e->pdt);
    hj->st = zt_engine_nvme_seg_put(e, n, &hj->err);
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
        host_segment(hj, n, i);
        pthread_mutex_lock(&hj->mu);
        hj->done = ++n;
        pthread_cond_broadcast(&hj->cv);
        pthread_mutex_unlock(&hj->mu);
    }
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

/* Marks host segment count n ready (threaded) and sends back those the host thread finished;
 * with wait, blocks until the host thread has done all nhost. Returns the segments sent; the
 * first failure to send one back is kept in *st (later ones are skipped). */
static int host_pipeline_advance(zt_engine *e, host_job *hj, int ready, bool wait, int sent,
                                 int nhost, const int *hidx, zt_status *st, zt_err *err)
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
        if (*st == ZT_OK)
            *st = host_segment_back(e, &e->segs[hidx[sent]], err);
    return sent;
}

/* The device part alone runs on the backend in segment order; with offload, see host_job. */
zt_status zt_engine_optim_apply(zt_engine *e, const zt_adamw_args *a, zt_err *err)
{
    zt_status st = zt_engine_pnvme_step_begin(e, err);
    if (st != ZT_OK)
        return st;
    if (!zt_zero_host_elems(e->zero)) {
        for (int i = 0; i < e->nsegs && st == ZT_OK; i++)
            st = adamw_segment(e, e->ops, e->k, &e->segs[i], a, err);
        return st;
    }
    int *hidx = zt_malloc((size_t)e->nsegs * sizeof(int));
    if (!hidx)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    int nhost = 0;
    for (int i = 0; i < e->nsegs; i++)
        if (e->segs[i].host)
            hidx[nhost++] = i;
    host_job hj = {.e = e, .args = a};
    /* offload_param: the host writes the parameter shard the copy stream last read from and
     * reads the gradient shard it last wrote */
    st = e->params_host ? e->ops->sync(e->k, err) : ZT_OK;
    if (st != ZT_OK)
        goto free_hidx;
    st = zt_ops_cpu()->ctx_create(&hj.k, 0, err);
    if (st != ZT_OK) {
        st = zt_err_prefix(err, "host optimizer");
        goto free_hidx;
    }
    if (e->nvme && (st = zt_engine_nvme_step_begin(e, err)) != ZT_OK) {
        st = zt_engine_nvme_step_end(e, st, err);
        goto destroy_ctx;
    }
    pthread_mutex_init(&hj.mu, NULL);
    pthread_cond_init(&hj.cv, NULL);
    pthread_t th;
    bool threaded = pthread_create(&th, NULL, host_adamw_main, &hj) == 0;
    int sent = 0;
    zt_status back = ZT_OK; /* the first failure to send an updated segment back */
    zt_err back_err = {0};
    /* gradients down, one segment at a time (complete when copy_d2h returns); with
     * offload_param they are in host memory already */
    for (int n = 0; n < nhost; n++) {
        const zt_optseg *s = &e->segs[hidx[n]];
        if (!zt_engine_grads_host(e))
            e->ops->copy_d2h(e->k, (char *)e->h_grad + s->side_off * zt_engine_gsize(e),
                             zt_engine_grad_loc(e, s->unit, s->j), s->len * zt_engine_gsize(e));
        if (threaded)
            sent = host_pipeline_advance(e, &hj, n + 1, false, sent, nhost, hidx, &back,
                                         &back_err);
    }
    /* the device part, queued behind the copies */
    for (int i = 0; i < e->nsegs; i++)
        if (!e->segs[i].host && back == ZT_OK)
            back = adamw_segment(e, e->ops, e->k, &e->segs[i], a, &back_err);
    if (threaded) {
        sent = host_pipeline_advance(e, &hj, nhost, true, sent, nhost, hidx, &back, &back_err);
        pthread_join(th, NULL);
    } else {
        for (int n = 0; n < nhost; n++)
            host_segment(&hj, n, hidx[n]);
        for (; sent < nhost; sent++)
            if (back == ZT_OK)
                back = host_segment_back(e, &e->segs[hidx[sent]], &back_err);
    }
    pthread_cond_destroy(&hj.cv);
    pthread_mutex_destroy(&hj.mu);
    if (e->nvme) {
        if (hj.st != ZT_OK && err)
            *err = hj.err;
        st = zt_engine_nvme_step_end(e, hj.st, err);
    }
    if (st == ZT_OK && back != ZT_OK) {
        st = back;
        if (err)
            *err = back_err;
    }
destroy_ctx:
    zt_ops_cpu()->ctx_destroy(hj.k);
free_hidx:
    zt_free(hidx);
    return st;
}


