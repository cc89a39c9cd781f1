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
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/log.h"
#include "../common/settings.h"
#include "ckpt.h"
#include "monitor.h"
#include "data/modelfile.h"

static void report_line(zt_engine *e, const char *line);

/* ---- set-up ---- */

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

/* ZT_HOST_MEMORY_LIMIT: a rank whose plan (zt_engine_plan) needs more host memory than the
 * budget stops here, before it allocates. Host memory is counted as `zctl plan` counts it: on
 * the CPU the whole rank (total_bytes), on cuda the host buffers and the start-up transient's
 * excess over the snapshot. */
static zt_status check_host_budget(const zt_job *job, int world, zt_err *err)
{
    const char *v = zt_setting_raw(ZT_SET_HOST_MEMORY_LIMIT);
    if (!v) return ZT_OK;
    double limit = zt_parse_size(v);
    if (!(limit >= 1) || limit > 9.2e18)
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "ZT_HOST_MEMORY_LIMIT=\"%s\" is not a size; give bytes or a size such as 1235MiB or 2GB, or unset it for no budget",
            v);
    zt_mem_plan p;
    zt_status st = zt_engine_plan(job, world, &p, err);
    if (st != ZT_OK) return st;
    bool cpu = job->resources.device != ZT_DEVICE_CUDA;
    int64_t extra = cpu ? 0 : p.init_bytes - p.bytes[ZT_MEM_CKPT];
    int64_t need = cpu ? p.total_bytes : p.host_total + (extra > 0 ? extra : 0);
    if ((double)need <= limit) return ZT_OK;
    char parts[512] = "", b[32];
    size_t n = 0;
    for (int c = 0; c < ZT_MEM_CATEGORY_COUNT; c++) {
        int64_t x = cpu ? p.bytes[c] : p.host_bytes[c];
        if (x > 0 && n < sizeof(parts))
            n += (size_t)snprintf(parts + n, sizeof(parts) - n, "%s%s %s", n ? ", " : "",
                                  zt_mem_category_name((zt_mem_category)c),
                                  zt_fmt_bytes(x, b, sizeof(b)));
    }
    int64_t rest = cpu ? p.total_bytes - p.device_total - p.host_total : extra;
    if (rest > 0 && n < sizeof(parts))
        snprintf(parts + n, sizeof(parts) - n, "%sruntime and start-up %s", n ? ", " : "",
                 zt_fmt_bytes(rest, b, sizeof(b)));
    return zt_err_set(
        err, ZT_ERR_NOMEM,
        "this rank's plan needs %.1f MiB of host memory but ZT_HOST_MEMORY_LIMIT allows %.1f MiB (%s); put the optimizer states on disk (zero_optimization.offload_optimizer.device \"nvme\"), use a higher ZeRO stage or more ranks, a smaller micro batch, or raise ZT_HOST_MEMORY_LIMIT (zctl plan JOB --host-memory SIZE shows what fits)",
        (double)need / 1048576.0, limit / 1048576.0, parts);
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
    const char *crash = zt_setting_env(ZT_SET_INJECT_CRASH); /* test hook: "rank:step" dies mid-step */
    if (crash) {
        int r = -1;
        long long s = -1;
        if (sscanf(crash, "%d:%lld", &r, &s) == 2 && r == e->rank)
            e->crash_step = s;
    }
    const char *inj = zt_setting_env(ZT_SET_INJECT_NONFINITE);
    if (inj) {
        int r = -1;
        long long s = -1;
        if (sscanf(inj, "%d:%lld", &r, &s) == 2 && r == e->rank)
            e->inject_step = s;
    }
    e->peak_flops = zt_setting_real(ZT_SET_PEAK_TFLOPS) * 1e12; /* 0: unknown */

    if (job->ds.world_size != e->world) {
        st = zt_err_set(err, ZT_ERR_CONFIG,
                        "the batch sizes were resolved for %d ranks but the run has %d; call zt_job_resolve_batch first",
                        job->ds.world_size, e->world);
        goto destroy_engine;
    }
    ZT_CHECK(check_host_budget(job, e->world, err), destroy_engine);
    const zt_offload_cfg *oo = &job->ds.zero.offload_optimizer;
    if (job->resources.device == ZT_DEVICE_CUDA && job->ds.zero.offload_param.enabled &&
        !(oo->enabled && oo->ratio == 1.0)) {
        st = zt_err_set(err, ZT_ERR_CONFIG,
                        "zero_optimization.offload_param on device \"cuda\" needs offload_optimizer with ratio 1 (the host then updates the parameters it keeps); add \"offload_optimizer\": {\"device\": \"cpu\"} or remove offload_param");
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
    const char *tenv = zt_setting_raw(ZT_SET_COMM_TIMEOUT_MS);
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
        const char *sv = zt_setting_raw(ZT_SET_COMM_STALL_MS);
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
    ZT_CHECK(zt_engine_nvme_open(e, err), destroy_engine);
    ZT_CHECK(zt_engine_pnvme_open(e, err), destroy_engine);
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
    zt_engine_optim_close(e);
    zt_ckpt_release(e);
    zt_engine_nvme_close(e);
    zt_engine_pnvme_close(e);
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

/* ---- the training loop and its reports ---- */

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
    if (s->opt_bg_s > 0)
        w += snprintf(buf + w, n - (size_t)w, " opt_bg_ms=%.2f", s->opt_bg_s * 1e3);
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
    /* the snapshot reads the states the last step's update may still be writing */
    zt_status st = zt_engine_optim_ready(e, -1, err);
    if (st == ZT_OK)
        st = ckpt_snapshot_ready(e, err);
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
    /* the last step's update, finishing in the background, and its errors */
    ZT_CHECK(zt_engine_optim_ready(e, -1, err), close_monitor);
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
