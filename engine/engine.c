/* zerotrain: the training engine of one rank (see engine.h) — creating it (collective group,
 * partition, buffers, initial values or a checkpoint), destroying it, and the training loop
 * with its step lines, evaluations and checkpoints.
 *
 * One code path for every ZeRO stage: parameters live in per-unit padded flat buffers laid out
 * by the partition (zero.h); a unit's compute copy is obtained with zt_engine_param_acquire (a
 * pointer into the parameters, a 16-bit widening, or a stage-3 gather) and its gradient with
 * zt_engine_grad_acquire/zt_engine_grad_finish (accumulated in place, or reduce-scattered unit
 * by unit as backward produces it). The optimizer updates only this rank's region. */
#define _POSIX_C_SOURCE 200809L
#include "engine_int.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/timeutil.h"
#include "../common/log.h"
#include "ckpt.h"
#include "monitor.h"
#include "data/modelfile.h"

static void report_line(zt_engine *e, const char *line);

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
    return (char *)e->acts16 + (e->ckpt_act ? 0 : (size_t)l) * lp * zt_engine_psize(e);
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
    a->home.out = h + (size_t)e->B * e->T * 3 * e->lay.d.C * zt_engine_psize(e);
    a->home.dtype = e->pdt;
    a->fch16 = h + acts16_attn(e) * zt_engine_psize(e);
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
    if ((st = zt_engine_param_acquire(e, 0, &p, err)) != ZT_OK)
        return st;
    if ((st = zt_engine_param_prefetch(e, 1, err)) != ZT_OK)
        return st;
    zt_gpt2_embed pe = zt_gpt2_embed_view(lay, p);
    zt_gpt2_embed_forward(e->ops, e->k, lay, &pe, e->d_inp, xres(e, 0), B, T);
    zt_engine_param_release(e, 0);
    for (int l = 0; l < L; l++) {
        int u = zt_gpt2_block_unit(l);
        if ((st = zt_engine_param_acquire(e, u, &p, err)) != ZT_OK)
            return st;
        if ((st = zt_engine_param_prefetch(e, u + 1, err)) != ZT_OK)
            return st;
        zt_gpt2_block pb = zt_gpt2_block_view(lay, p);
        /* attached for every forward, so that attproj reads the same rounded atty in training,
         * evaluation and checkpointing's first pass (with checkpointing, the one set's home) */
        if (e->act16) acts16_attach(e, l);
        zt_gpt2_block_forward(e->ops, e->k, lay, &pb, block_acts(e, l), &e->scr, xres(e, l),
                              xres(e, l + 1), B, T);
        zt_engine_param_release(e, u);
    }
    float *pf, *p0;
    if ((st = zt_engine_param_acquire(e, uf, &pf, err)) != ZT_OK)
        return st;
    if ((st = zt_engine_param_acquire(e, 0, &p0, err)) != ZT_OK)
        return st;
    zt_gpt2_final fv = zt_gpt2_final_view(lay, pf);
    zt_gpt2_embed ev = zt_gpt2_embed_view(lay, p0);
    if (dloss == 0.0f) {
        zt_gpt2_head(e->ops, e->k, lay, &fv, ev.wte, NULL, NULL, &e->head, &e->scr, xres(e, L),
                     e->d_tgt, 0.0f, NULL, B, T);
        zt_engine_param_release(e, 0);
        zt_engine_param_release(e, uf);
        return ZT_OK;
    }
    float *gf, *g0;
    if ((st = zt_engine_grad_acquire(e, uf, &gf, err)) != ZT_OK)
        return st;
    if ((st = zt_engine_grad_acquire(e, 0, &g0, err)) != ZT_OK)
        return st;
    /* the last block's parameters come (back) while the head computes */
    if ((st = zt_engine_param_prefetch(e, zt_gpt2_block_unit(L - 1), err)) != ZT_OK)
        return st;
    zt_gpt2_final gfv = zt_gpt2_final_view(lay, gf);
    zt_gpt2_embed gev = zt_gpt2_embed_view(lay, g0);
    zt_gpt2_head(e->ops, e->k, lay, &fv, ev.wte, &gfv, gev.wte, &e->head, &e->scr, xres(e, L),
                 e->d_tgt, dloss, e->dres, B, T);
    zt_engine_param_release(e, 0);
    zt_engine_param_release(e, uf);
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
    if ((st = zt_engine_grad_finish(e, uf, err)) != ZT_OK)
        return st;
    for (int l = L - 1; l >= 0; l--) {
        int u = zt_gpt2_block_unit(l);
        float *p, *g;
        if ((st = zt_engine_param_acquire(e, u, &p, err)) != ZT_OK)
            return st;
        if (l > 0 && (st = zt_engine_param_prefetch(e, u - 1, err)) != ZT_OK)
            return st;
        zt_gpt2_block pb = zt_gpt2_block_view(lay, p);
        if (e->act16) acts16_attach(e, l);
        if (e->ckpt_act)
            zt_gpt2_block_forward(e->ops, e->k, lay, &pb, block_acts(e, l), &e->scr, xres(e, l),
                                  e->x_tmp, B, T);
        if ((st = zt_engine_grad_acquire(e, u, &g, err)) != ZT_OK)
            return st;
        zt_gpt2_block gb = zt_gpt2_block_view(lay, g);
        zt_gpt2_block_backward(e->ops, e->k, lay, &pb, &gb, block_acts(e, l), &e->scr, xres(e, l),
                               e->dres, B, T);
        zt_engine_param_release(e, u);
        if ((st = zt_engine_grad_finish(e, u, err)) != ZT_OK)
            return st;
    }
    zt_gpt2_embed_backward(e->ops, e->k, lay, &gev, e->d_inp, e->dres, B, T);
    return zt_engine_grad_finish(e, 0, err);
}

/* ---- the step ---- */

/* AdamW over this rank's region, with the step's learning rate and bias corrections. */
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
    return zt_engine_optim_apply(e, &a, err);
}

/* The reduction the partition runs at the accumulation boundary, if any. */
static zt_status reduce_at_boundary(zt_engine *e, zt_err *err)
{
    zt_status st = ZT_OK;
    zt_zero_boundary_reduce how = zt_zero_boundary(e->zero);
    if (how == ZT_ZERO_BOUNDARY_NONE)
        return ZT_OK;
    uint64_t t0 = zt_now_ns();
    if (how == ZT_ZERO_BOUNDARY_ALLREDUCE) {
        st = zt_comm_allreduce(e->comm, e->grads, zt_zero_grad_elems(e->zero), e->gdt, NULL, err);
    } else {
        zt_comm_req **reqs = zt_calloc((size_t)e->nu, sizeof(*reqs));
        if (!reqs)
            return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        for (int u = 0; u < e->nu && st == ZT_OK; u++)
            st = zt_comm_reduce_scatter(e->comm, zt_engine_grad_at(e, u, 0),
                                        zt_engine_grad_loc(e, u, 0), e->S[u], e->gdt, &reqs[u],
                                        err);
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

/* Every rank's updated region back to all ranks, where the partition runs that. */
static zt_status gather_params(zt_engine *e, zt_err *err)
{
    zt_status st = ZT_OK;
    if (!zt_zero_gathers_after_step(e->zero))
        return ZT_OK;
    uint64_t t0 = zt_now_ns();
    zt_comm_req **reqs = zt_calloc((size_t)e->nu, sizeof(*reqs));
    if (!reqs)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    for (int u = 0; u < e->nu && st == ZT_OK; u++)
        st = zt_comm_allgather(e->comm, zt_engine_param_loc(e, u, 0), zt_engine_param_at(e, u, 0),
                               e->S[u], e->pdt, &reqs[u], err);
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
        void *chunk = zt_engine_grad_at(e, u, (size_t)e->rank * e->S[u]);
        e->ops->sumsq_nonfinite(e->k, chunk, e->gdt, e->S[u], out);
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

    size_t gn = zt_zero_grad_elems(e->zero);
    /* op times (ZT_OP_TIMES=1): what marks an evaluation left are dropped; the step's own are
     * taken at its end, for its report line */
    e->ops->marks_take(e->k, &e->optimes);
    e->ops->mark(e->k, "engine");
    e->ops->memset0(e->k, e->grads, gn * zt_engine_gsize(e));
    for (int micro = 0; micro < ds->grad_accum; micro++) {
        ZT_CHECK(load_micro(e, e->train_ds, e->steps_done, micro, err), copy_stats);
        uint64_t t0 = zt_now_ns();
        zt_comm_set_where(e->comm, e->steps_done + 1, "forward");
        ZT_CHECK(forward(e, dloss, err), copy_stats);
        if (e->crash_step == e->steps_done + 1) {
            ZT_ERROR("engine", "test hook: rank %d dies in the middle of step %lld", e->rank,
                     (long long)e->crash_step);
            abort();
        }
        local_loss += sum_losses(e);
        uint64_t t1 = zt_now_ns();
        zt_comm_set_where(e->comm, e->steps_done + 1, "backward");
        ZT_CHECK(backward(e, err), copy_stats);
        ZT_CHECK(e->ops->sync(e->k, err), copy_stats);
        uint64_t t2 = zt_now_ns();
        e->t_fwd += (double)(t1 - t0) * 1e-9;
        e->t_bwd += (double)(t2 - t1) * 1e-9;
    }
    ZT_CHECK(zt_engine_grads_drain(e, err), copy_stats);
    ZT_CHECK(reduce_at_boundary(e, err), copy_stats);

    uint64_t t_opt0 = zt_now_ns();
    double comm_before_opt = e->t_comm;
    e->ops->mark(e->k, "optimizer");
    zt_comm_set_where(e->comm, e->steps_done + 1, "optimizer");
    double gs[2];
    grad_stats(e, gs);
    ZT_CHECK(e->ops->sync(e->k, err), copy_stats);
    /* one small all-reduce: gradient sum of squares, non-finite count, loss, and how many
     * ranks are still writing a checkpoint shard in the background */
    float red[4] = {(float)gs[0], (float)gs[1], (float)(local_loss / denom),
                    zt_ckpt_write_pending(e) ? 1.0f : 0.0f};
    {
        uint64_t t0 = zt_now_ns();
        e->ops->copy_h2d(e->k, e->d_red, red, sizeof(red));
        ZT_CHECK(zt_comm_allreduce(e->comm, e->d_red, 4, ZT_F32, NULL, err), copy_stats);
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
        ZT_CHECK(optimizer_step(e, (float)(coef / loss_scale), s.lr, err), copy_stats);
        e->applied_steps++;
        ZT_CHECK(e->ops->sync(e->k, err), copy_stats);
        ZT_CHECK(gather_params(e, err), copy_stats);
        ZT_CHECK(zt_engine_params_invalidate(e, err), copy_stats);
    }
    if (zt_loss_scaler_update(&e->scaler, nonfinite) != ZT_OK) {
        st = zt_err_set(err, ZT_ERR_NONFINITE,
                        "step %lld: the fp16 loss scale is already at its minimum (%g) and the gradients still overflow; the run cannot make progress. Lower the learning rate, use bf16, or lower fp16.min_loss_scale",
                        (long long)e->steps_done + 1, e->scaler.min_scale);
        goto copy_stats;
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
        goto copy_stats;
    }
    e->steps_done++;
    e->ops->marks_take(e->k, &e->optimes);
    uint64_t t_end = zt_now_ns();
    e->t_opt = (double)(t_end - t_opt0) * 1e-9 - (e->t_comm - comm_before_opt);

    zt_comm_get_stats(e->comm, &cs1);
    zt_engine_charge_comm(e);
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
copy_stats:
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
            if ((st = load_micro(e, e->val_ds, s, micro, err)) != ZT_OK ||
                (st = forward(e, 0.0f, err)) != ZT_OK)
                return st;
            local += sum_losses(e);
        }
    }
    double denom = (double)nsteps * (double)ds->train_batch_size * (double)e->T;
    float red = (float)(local / denom);
    e->ops->copy_h2d(e->k, e->d_red, &red, sizeof(red));
    if ((st = zt_comm_allreduce(e->comm, e->d_red, 1, ZT_F32, NULL, err)) != ZT_OK)
        return st;
    e->ops->copy_d2h(e->k, &red, e->d_red, sizeof(red));
    *loss = red;
    return ZT_OK;
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
        ZT_CHECK(zt_modelfile_read(e->job.model.init_path, &shape, &file, err), drop_transient);
        size_t sizes[ZT_MODELFILE_NUM_TENSORS];
        file_bytes = (int64_t)(zt_modelfile_tensor_sizes(&shape, sizes) * sizeof(float));
        zt_memacct_charge(&e->mem, ZT_MEM_BUFFERS, file_bytes);
        ZT_CHECK(zt_modelfile_check_shape(&shape, &e->job.model, e->job.model.init_path, err),
                 drop_transient);
        llmc_kind_offsets(&shape, koff, kper);
    }
    size_t maxp = e->P[0] > e->max_unit_p ? e->P[0] : e->max_unit_p;
    unit = zt_calloc(maxp, sizeof(float));
    if (!unit) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory initialising the model");
        goto drop_transient;
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
        ZT_CHECK(zt_engine_load_unit(e, u, unit, err), drop_transient);
    }
drop_transient:
    zt_memacct_charge(&e->mem, ZT_MEM_BUFFERS, -(file_bytes + unit_bytes));
    zt_free(file);
    zt_free(unit);
    return st;
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
    zt_engine_init_fields(e, job, opts->world_size > 0 ? opts->world_size : 1, opts->rank);
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
        goto destroy_engine;
    }
    if (job->resources.device == ZT_DEVICE_CUDA && job->ds.zero.offload_param.enabled) {
        st = zt_err_set(err, ZT_ERR_UNSUPPORTED,
                        "zero_optimization.offload_param is not implemented for device \"cuda\" yet (on the CPU the parameters already live in host memory); remove it or use offload_optimizer");
        goto destroy_engine;
    }
    if (job->resources.device == ZT_DEVICE_CUDA) {
        e->ops = zt_ops_cuda();
        if (!e->ops) {
            st = zt_err_set(err, ZT_ERR_NO_DEVICE,
                            "the job asks for device \"cuda\" but this zworker was built without CUDA; rebuild with nvcc available or set resources.device to \"cpu\"");
            goto destroy_engine;
        }
    } else {
        e->ops = zt_ops_cpu();
    }
    ZT_CHECK(e->ops->ctx_create(&e->k, opts->local_rank, err), destroy_engine);
    e->ops->set_matmul_dtype(e->k, e->pdt);

    if (zt_gpt2_layout_init(&e->lay, &e->dims) != ZT_OK) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        goto destroy_engine;
    }
    zt_loss_scaler_init(&e->scaler, &job->ds.fp16);

    ZT_CHECK(zt_dataset_open(&e->train_ds, job->data.train, job->model.block_size,
                          job->model.vocab_size, err),
          destroy_engine);
    if (job->data.val[0] && job->train.eval_every > 0)
        ZT_CHECK(zt_dataset_open(&e->val_ds, job->data.val, job->model.block_size,
                              job->model.vocab_size, err),
              destroy_engine);

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
            ZT_CHECK(zt_err_set(err, ZT_ERR_CONFIG,
                             "ZT_COMM_STALL_MS='%s' is not a number of milliseconds; unset it or give e.g. 2000 (0 turns stall reports off)",
                             sv),
                  destroy_engine);
        co.stall_ms = (int)ms;
    }
    const zt_comm_backend *cb =
        job->resources.device == ZT_DEVICE_CUDA ? zt_comm_backend_nccl() : zt_comm_backend_tcp();
    report_line(e, "phase=rendezvous");
    ZT_CHECK(zt_comm_create(&e->comm, cb, &co, err), destroy_engine);
    report_line(e, "phase=loading");

    ZT_CHECK(zt_engine_setup_partition(e, err), destroy_engine);
    ZT_CHECK(zt_engine_setup_segments(e, err), destroy_engine);
    ZT_CHECK(zt_engine_setup_buffers(e, err), destroy_engine);
    if (opts->resume && opts->resume[0]) {
        st = zt_ckpt_load(e, opts->resume, err);
        if (opts->resume_bad)
            *opts->resume_bad = zt_ckpt_status_is_bad(st);
        if (st != ZT_OK)
            goto destroy_engine;
    } else {
        ZT_CHECK(init_params(e, err), destroy_engine);
    }
    if (e->nonfinite_tensors && e->rank == 0)
        ZT_WARN("engine",
                "%s (%d tensor%s of %s hold NaN or Inf); every step will be skipped: check that file",
                e->first_nonfinite, e->nonfinite_tensors, e->nonfinite_tensors == 1 ? "" : "s",
                opts->resume && opts->resume[0] ? opts->resume
                : job->model.init_random        ? "the random initialisation"
                                                : job->model.init_path);
    if (opts->owner)
        ZT_CHECK(zt_ckpt_claim(e, opts->owner, opts->owner_takeover, err), destroy_engine);
    if (job->train.checkpoint_every > 0)
        ZT_CHECK(ckpt_snapshot_ready(e, err), destroy_engine);
    ZT_CHECK(e->ops->sync(e->k, err), destroy_engine);
    zt_engine_charge_comm(e);
    *out = e;
    return ZT_OK;
destroy_engine:
    zt_engine_log_comm_failure(e);
    zt_engine_destroy(e);
    return st;
}

void zt_engine_destroy(zt_engine *e)
{
    if (!e)
        return;
    zt_ckpt_release(e);
    if (e->k && e->zero) {
        zt_engine_params_invalidate(e, NULL);
        zt_engine_grads_drain(e, NULL);
        zt_engine_free_buffers(e);
    }
    zt_comm_destroy(e->comm);
    zt_dataset_close(e->train_ds);
    zt_dataset_close(e->val_ds);
    zt_zero_destroy(e->zero);
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
        ZT_CHECK(zt_monitor_open(&mon, &e->job, err), close_monitor);
    report_line(e, "phase=training");
    while (e->steps_done < tc->steps) {
        zt_step_stats s;
        ZT_CHECK(zt_engine_step(e, &s, err), close_monitor);
        if (e->val_ds && tc->eval_every > 0 &&
            (s.step % tc->eval_every == 0 || s.step == tc->steps)) {
            report_line(e, "phase=evaluating");
            ZT_CHECK(zt_engine_eval(e, &s.val_loss, err), close_monitor);
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
            ZT_CHECK(zt_ckpt_save_finish(e, err), close_monitor);
        if (tc->checkpoint_every > 0 && s.step % tc->checkpoint_every == 0 && s.step < tc->steps)
            ZT_CHECK(save_begin(e, err), close_monitor);
    }
    ZT_CHECK(zt_ckpt_save_finish(e, err), close_monitor);
    if (!e->opts.no_final_save && e->last_ckpt_step != e->steps_done) {
        report_line(e, "phase=checkpointing");
        ZT_CHECK(zt_engine_save(e, err), close_monitor);
    }
close_monitor:
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
