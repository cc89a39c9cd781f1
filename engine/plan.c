/* zerotrain: where the engine's memory goes — the table of its buffers, the arenas they are
 * carved from, the out-of-memory report that names what did not fit, and `zctl plan`'s
 * prediction, computed from that same table without allocating. */
#include "engine_int.h"

#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/log.h"
#include "../common/settings.h"
#include "../kernels/cuda/cuda_plan.h"
#include "ckpt.h"
#include "data/modelfile.h"
#include "nvme/swap.h"

static size_t round_up(size_t x, size_t m)
{
    return (x + m - 1) / m * m;
}

/* ---- backend and host memory with accounting ---- */

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

static void hfree(zt_engine *e, zt_mem_category cat, void *p, size_t bytes)
{
    if (!p)
        return;
    e->ops->host_free(e->k, p);
    zt_memacct_charge(&e->mem, cat, -(int64_t)bytes);
}

void *zt_engine_comm_alloc(zt_engine *e, size_t bytes)
{
    return balloc(e, ZT_MEM_COMM, bytes);
}

void zt_engine_comm_free(zt_engine *e, void *p, size_t bytes)
{
    bfree(e, ZT_MEM_COMM, p, bytes);
}

/* ---- the partition and the fields derived from the job ---- */

static zt_precision precision_of(const zt_job *job)
{
    return job->ds.fp16.enabled ? ZT_PREC_FP16 : job->ds.bf16 ? ZT_PREC_BF16 : ZT_PREC_FP32;
}

void zt_engine_init_fields(zt_engine *e, const zt_job *job, int world, int rank)
{
    e->job = *job;
    e->rank = rank;
    e->world = world;
    e->ckpt_act = job->ds.activation_checkpointing.enabled;
    zt_precision prec = precision_of(job);
    e->pdt = prec == ZT_PREC_FP16 ? ZT_F16 : prec == ZT_PREC_BF16 ? ZT_BF16 : ZT_F32;
    e->mixed = e->pdt != ZT_F32;
    /* offload_param (stage 3 only): on the CPU the parameters already live in host memory */
    e->params_host = job->resources.device == ZT_DEVICE_CUDA && job->ds.zero.offload_param.enabled;
    /* ZT_ACTIVATIONS_FP32=1 keeps a mixed-precision job's activations in fp32 (comparisons) */
    bool keep32 = zt_setting_bool(ZT_SET_ACTIVATIONS_FP32); /* warns once: a plan makes many */
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
    int64_t rows = zt_setting_int(ZT_SET_HEAD_ROWS); /* 0: unset */
    if (rows > 0) e->head_rows = rows < e->B * e->T ? (int)rows : e->B * e->T;
}

zt_status zt_engine_setup_partition(zt_engine *e, zt_err *err)
{
    zt_status st = zt_zero_create(&e->zero, &e->job.ds.zero, e->lay.unit_numel, e->lay.n_units,
                                  e->world, e->rank, err);
    if (st != ZT_OK)
        return st;
    e->nu = zt_zero_units(e->zero);
    e->P = zt_zero_padded_sizes(e->zero);
    e->S = zt_zero_shard_sizes(e->zero);
    e->base = zt_zero_region_starts(e->zero);
    e->max_unit_p = zt_zero_max_block(e->zero);
    return ZT_OK;
}

/* ---- the buffer table and its arenas ---- */

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
    const zt_zero *z = e->zero;
    size_t dev_n = zt_zero_device_elems(z), host_n = zt_zero_host_elems(z);
    int n = 0;
#define SPEC(ptr, c, b, h) (sp[n++] = (buf_spec){(void **)(ptr), (c), (b), (h)})
    /* offload_param "nvme": the units past max_in_cpu live in a swap file, read through buffers */
    SPEC(&e->params, ZT_MEM_PARAMS, zt_engine_pnvme_resident_elems(e) * zt_engine_psize(e),
         e->params_host);
    if (zt_engine_pnvme_buffer_bytes(e))
        SPEC(&e->h_pswapbuf, ZT_MEM_PARAMS, zt_engine_pnvme_buffer_bytes(e), true);
    bool grads_host = zt_engine_grads_host(e);
    SPEC(&e->grads, ZT_MEM_GRADS, zt_zero_grad_elems(z) * zt_engine_gsize(e), grads_host);
    if (e->mixed && dev_n)
        SPEC(&e->master, ZT_MEM_MASTER, dev_n * 4, false);
    SPEC(&e->m, ZT_MEM_OPTIM, dev_n * 4, false);
    SPEC(&e->v, ZT_MEM_OPTIM, dev_n * 4, false);
    bool nvme = e->job.ds.zero.offload_optimizer.nvme;
    if (host_n && nvme) { /* master and moments in swap files, streamed through buffer sets */
        SPEC(&e->h_swapbuf, ZT_MEM_HOST_OPTIM,
             zt_engine_nvme_buffer_bytes(e, zt_engine_offload_piece(e)) + ZT_SWAP_ALIGN, true);
    } else if (host_n) {
        SPEC(&e->h_master, ZT_MEM_HOST_OPTIM, host_n * 4, true);
        SPEC(&e->h_m, ZT_MEM_HOST_OPTIM, host_n * 4, true);
        SPEC(&e->h_v, ZT_MEM_HOST_OPTIM, host_n * 4, true);
    }
    if (host_n) {
        if (!grads_host) /* else the host optimizer reads the gradient shard itself */
            SPEC(&e->h_grad, ZT_MEM_BUFFERS, host_n * zt_engine_gsize(e), true);
        if (e->mixed || nvme)
            SPEC(&e->h_lp, ZT_MEM_BUFFERS, host_n * zt_engine_psize(e), true);
    }
    /* parameter slots: compute copies of units (16-bit widening, gathers): slot 0 holds the
     * embeddings, slots 1..3 the blocks the partition lets be held at once */
    e->npslots = zt_engine_params_direct(e) ? 0 : 1 + zt_zero_live_blocks(z, 3);
    bool gathers = zt_zero_gathers_per_use(z);
    for (int i = 0; i < e->npslots; i++) {
        zt_pslot *s = &e->pslots[i];
        s->cap = i == 0 ? e->P[0] : e->max_unit_p;
        SPEC(&s->cbuf, ZT_MEM_BUFFERS, s->cap * 4, false);
        if (gathers && e->pdt != ZT_F32)
            SPEC(&s->gbuf, ZT_MEM_COMM, s->cap * zt_engine_psize(e), false);
    }
    /* gradient slots: a unit's fp32 gradient before accumulation or reduce-scatter */
    e->ngslots = zt_engine_grads_direct(e) ? 0 : 3;
    bool scatters = zt_zero_micro(z) == ZT_ZERO_MICRO_REDUCE_SCATTER;
    for (int i = 0; i < e->ngslots; i++) {
        zt_gslot *g = &e->gslots[i];
        g->cap = i == 0 ? e->P[0] : e->max_unit_p;
        SPEC(&g->buf, ZT_MEM_BUFFERS, g->cap * 4, false);
        if (scatters && e->gdt != ZT_F32)
            SPEC(&g->buf16, ZT_MEM_COMM, g->cap * 2, false);
        if (grads_host) /* a unit's slice of the host gradient shard, while summed */
            SPEC(&g->stage, ZT_MEM_BUFFERS, g->cap / (size_t)e->world * zt_engine_gsize(e),
                 false);
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
        SPEC(&e->acts16, ZT_MEM_ACTIVATIONS, lp * nacts * zt_engine_psize(e), false);
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

zt_status zt_engine_setup_buffers(zt_engine *e, zt_err *err)
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

void zt_engine_free_buffers(zt_engine *e)
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

/* ---- the prediction ---- */

zt_status zt_engine_plan(const zt_job *job, int world, zt_mem_plan *out, zt_err *err)
{
    memset(out, 0, sizeof(*out));
    zt_engine *e = zt_calloc(1, sizeof(*e));
    if (!e)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    zt_engine_init_fields(e, job, world, 0);
    zt_status st = ZT_OK;
    if (zt_gpt2_layout_init(&e->lay, &e->dims) != ZT_OK) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        goto free_engine;
    }
    if ((st = zt_engine_setup_partition(e, err)) != ZT_OK)
        goto free_engine;
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
    uint64_t opt_swap = zt_engine_nvme_disk_bytes(e), par_swap = zt_engine_pnvme_disk_bytes(e);
    out->disk_bytes = (int64_t)(opt_swap + par_swap);
    /* I/O per optimizer step, one term per swap. The optimizer's swap reads its three arrays
     * (master and both moments) once and writes them back once. The parameter swap is read
     * at most once by each micro-step's forward and backward and once by the update, and
     * written back once (units still in a buffer are not read again). */
    int64_t gas = job->ds.grad_accum > 0 ? job->ds.grad_accum : 1;
    out->io_read_bytes += (int64_t)opt_swap + (2 * gas + 1) * (int64_t)par_swap;
    out->io_write_bytes += (int64_t)opt_swap + (int64_t)par_swap;
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
    /* the communicator's own buffers: they follow its largest reduce-scatter */
    const zt_comm_backend *cb = cuda ? zt_comm_backend_nccl() : zt_comm_backend_tcp();
    int64_t comm = (int64_t)zt_comm_backend_buffer_bytes(
        cb, world, zt_zero_max_reduce_scatter(e->zero) * zt_engine_gsize(e));
    /* the checkpoint snapshot, sized as zt_ckpt_prepare sizes it (header and master weights
     * and moments of this rank's chunk of every unit, in whole 2 MiB pages); every run ends
     * with a save */
    size_t huge = (size_t)2 << 20;
    int64_t ck =
        (int64_t)round_up(sizeof(zt_shard_header) + 12 * zt_zero_shard_total(e->zero), huge);
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
        out->init_bytes +=
            (int64_t)((maxp < ZT_LOAD_PIECE ? maxp : ZT_LOAD_PIECE) * zt_engine_psize(e));
    out->peak_total = out->device_total + out->host_total +
                      (out->init_bytes > ck ? out->init_bytes - ck : 0);
    out->runtime_bytes = cuda ? 0 : ZT_PLAN_RUNTIME_BYTES;
    /* the snapshot comes after initialisation (start-up or the final save) */
    int64_t start = out->device_total + out->host_total - ck + out->init_bytes +
                    (cuda ? 0 : ZT_PLAN_RUNTIME_START_BYTES);
    int64_t train = out->device_total + out->host_total + out->runtime_bytes;
    out->total_bytes = start > train ? start : train;
    out->num_params = e->lay.num_params;
    out->padded_params = zt_zero_padded_total(e->zero);
free_engine:
    zt_zero_destroy(e->zero);
    zt_gpt2_layout_free(&e->lay);
    zt_free(e);
    return st;
}

void zt_engine_charge_comm(zt_engine *e)
{
    zt_comm_stats cs;
    zt_comm_get_stats(e->comm, &cs);
    if (cs.buffer_bytes != e->comm_buf_charged) {
        zt_memacct_charge(&e->mem, ZT_MEM_COMM,
                          (int64_t)cs.buffer_bytes - (int64_t)e->comm_buf_charged);
        e->comm_buf_charged = cs.buffer_bytes;
    }
}
