/* zerotrain: one optimizer step of the engine — forward and backward of each micro-batch unit
 * by unit, the reductions the partition runs, the global gradient norm and loss, the update,
 * and evaluation. */
#include "engine_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/log.h"
#include "../common/timeutil.h"
#include "ckpt.h"

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

/* Waits for every request of reqs (one per unit, NULL where none started) and frees the array;
 * returns st, or the first failure when st is ZT_OK. */
static zt_status wait_all(zt_engine *e, zt_comm_req **reqs, zt_status st, zt_err *err)
{
    for (int u = 0; u < e->nu; u++) {
        if (!reqs[u])
            continue;
        zt_status s2 = zt_comm_wait(e->comm, reqs[u], err);
        if (s2 != ZT_OK && st == ZT_OK)
            st = s2;
    }
    zt_free(reqs);
    return st;
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
        st = wait_all(e, reqs, st, err);
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
    st = wait_all(e, reqs, st, err);
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
    if (zt_engine_grads_host(e)) /* the last step's copies and host update are complete */
        memset(e->grads, 0, gn * zt_engine_gsize(e));
    else
        e->ops->memset0(e->k, e->grads, gn * zt_engine_gsize(e));
    for (int micro = 0; micro < ds->grad_accum; micro++) {
        e->grads_first = micro == 0;
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
    s.opt_bg_s = e->t_opt_bg;
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
