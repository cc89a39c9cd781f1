/* zerotrain: reads the DeepSpeed config of a job (an object, or the file it names) into
 * zt_ds_cfg, section by section against the key table (dsconfig.c): precision, ZeRO and
 * offload, activation checkpointing, data types, the CSV monitor, and the batch triad with the
 * "auto" values filled from the job's train section; then writes the start-up summary. The
 * optimizer and the schedule are read by dsconfig_optim.c. */
#define _POSIX_C_SOURCE 200809L
#include "dsconfig.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "dsconfig_int.h"

/* ---- sections ---------------------------------------------------------------------------- */

static zt_status parse_fp16(pctx *c, json_t *ds, zt_job *job)
{
    zt_fp16_cfg *f = &job->ds.fp16;
    /* A static object has zeroed padding, so parsed jobs compare equal with memcmp. */
    static const zt_fp16_cfg defaults = {.enabled = false,
                                         .loss_scale = 0,
                                         .initial_scale_power = 16,
                                         .loss_scale_window = 1000,
                                         .hysteresis = 2,
                                         .consecutive_hysteresis = false,
                                         .min_loss_scale = 1};
    memcpy(f, &defaults, sizeof(*f));
    json_t *o;
    zt_status st = jf_get_obj(c, ds, "fp16", &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, "fp16");
    KEEP(ds_check_block(c, o, "fp16"));
    KEEP(jf_get_bool(c, o, "enabled", &f->enabled));
    if (jf_auto_given(c, o, "enabled")) {
        f->enabled = job->train.precision_given && job->train.precision == ZT_PREC_FP16;
        jf_auto_note(c, "enabled", JF_V_BOOL, &f->enabled,
                     job->train.precision_given ? "the job's train.precision" : "fp32 by default");
    }
    KEEP(jf_get_num(c, o, "loss_scale", 0, 0, NUM_GE, &f->loss_scale));
    KEEP(jf_get_int(c, o, "initial_scale_power", 0, 64, &f->initial_scale_power));
    KEEP(jf_get_int(c, o, "loss_scale_window", 1, INT_MAX, &f->loss_scale_window));
    KEEP(jf_get_int(c, o, "hysteresis", 1, INT_MAX, &f->hysteresis));
    KEEP(jf_get_bool(c, o, "consecutive_hysteresis", &f->consecutive_hysteresis));
    KEEP(jf_get_num(c, o, "min_loss_scale", 0, 0, NUM_GT, &f->min_loss_scale));
    jf_pop(c);
    return st;
}

/* bf16 (or its alias bfloat16); *key_out names the one given, for later messages. */
static zt_status parse_bf16(pctx *c, json_t *ds, zt_job *job, const char **key_out)
{
    bool *enabled = &job->ds.bf16;
    *enabled = false;
    const dsblock *top = ds_block("");
    *key_out = jf_pick_alias(c, ds, top->keys, top->n, "bf16");
    json_t *o;
    zt_status st = jf_get_obj(c, ds, *key_out, &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, *key_out);
    KEEP(ds_check_block(c, o, "bf16"));
    KEEP(jf_get_bool(c, o, "enabled", enabled));
    if (jf_auto_given(c, o, "enabled")) {
        *enabled = job->train.precision_given && job->train.precision == ZT_PREC_BF16;
        jf_auto_note(c, "enabled", JF_V_BOOL, enabled,
                     job->train.precision_given ? "the job's train.precision" : "fp32 by default");
    }
    jf_pop(c);
    return st;
}

/* offload_optimizer / offload_param "device": "none", "cpu" or "nvme". */
static zt_status parse_offload_device(pctx *c, json_t *o, zt_offload_cfg *off)
{
    char dev[64];
    bool present;
    zt_status st = jf_get_str(c, o, "device", dev, sizeof(dev), &present);
    if (st != ZT_OK || !present) return st;
    off->enabled = off->nvme = false;
    if (strcmp(dev, "none") == 0) return ZT_OK;
    if (strcmp(dev, "cpu") == 0) {
        off->enabled = true;
    } else if (strcmp(dev, "nvme") == 0) {
        off->enabled = off->nvme = true;
    } else {
        return jf_fail_key(c, "device", "must be \"none\", \"cpu\" or \"nvme\" (got \"%s\")", dev);
    }
    return ZT_OK;
}

static zt_status parse_offload(pctx *c, json_t *zo, const char *key, const char *base_dir,
                               zt_offload_cfg *off)
{
    bool is_opt = strcmp(key, "offload_optimizer") == 0;
    json_t *o;
    zt_status st = jf_get_obj(c, zo, key, &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, key);
    KEEP(ds_check_block(
        c, o, is_opt ? "zero_optimization.offload_optimizer" : "zero_optimization.offload_param"));
    KEEP(parse_offload_device(c, o, off));
    KEEP(jf_get_bool(c, o, "pin_memory", &off->pin_memory));
    if (is_opt) {
        KEEP(jf_get_num(c, o, "ratio", 0, 1, NUM_RANGE, &off->ratio));
    } else {
        KEEP(jf_get_i64(c, o, "buffer_size", 1, INT64_MAX, &off->buffer_size));
        KEEP(jf_get_i64(c, o, "max_in_cpu", 0, INT64_MAX, &off->max_in_cpu));
    }
    KEEP(jf_get_int(c, o, "buffer_count", 1, 64, &off->buffer_count));
    json_t *np = jf_member(o, "nvme_path");
    bool given = false;
    if (np && !json_is_null(np))
        KEEP(jf_get_path(c, o, "nvme_path", base_dir, off->nvme_path, &given));
    if (off->nvme && !given && st == ZT_OK)
        KEEP(jf_fail_key(
            c, "device",
            "\"nvme\" needs \"nvme_path\": the directory (on a local disk) where each rank keeps its swap files"));
    if (!off->nvme) off->nvme_path[0] = '\0';
    jf_pop(c);
    return st;
}

/* DeepSpeed's "aio" block: the NVMe swap's requests. */
static zt_status parse_aio(pctx *c, json_t *ds, zt_aio_cfg *a)
{
    json_t *o;
    zt_status st = jf_get_obj(c, ds, "aio", &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, "aio");
    KEEP(ds_check_block(c, o, "aio"));
    KEEP(jf_get_i64(c, o, "block_size", 4096, (int64_t)1 << 30, &a->block_size));
    if (a->block_size % 4096 != 0)
        KEEP(jf_fail_key(
            c, "block_size",
            "must be a multiple of 4096 for direct I/O (got %lld); DeepSpeed's default is 1048576",
            (long long)a->block_size));
    KEEP(jf_get_int(c, o, "queue_depth", 1, 1024, &a->queue_depth));
    KEEP(jf_get_int(c, o, "thread_count", 1, 64, &a->thread_count));
    KEEP(jf_get_bool(c, o, "single_submit", &a->single_submit));
    KEEP(jf_get_bool(c, o, "overlap_events", &a->overlap_events));
    jf_pop(c);
    return st;
}

/* Reads the (possibly aliased) zero_optimization key `key` as an integer. */
static zt_status get_zero_i64(pctx *c, json_t *o, const char *key, int64_t lo, int64_t *out)
{
    const dsblock *zb = ds_block("zero_optimization");
    const char *name = jf_pick_alias(c, o, zb->keys, zb->n, key);
    return jf_get_i64(c, o, name, lo, INT64_MAX, out);
}

/* HF's fills for bucket sizes given as "auto" (transformers' deepspeed integration): from the
 * model's width. */
static void zero_bucket_auto(pctx *c, json_t *o, const char *key, int64_t *out, int64_t value,
                             const char *from)
{
    const dsblock *zb = ds_block("zero_optimization");
    const char *name = jf_pick_alias(c, o, zb->keys, zb->n, key);
    if (!jf_auto_given(c, o, name)) return;
    *out = value;
    jf_auto_note(c, name, JF_V_I64, out, from);
}

static zt_status parse_zero(pctx *c, json_t *ds, zt_job *job)
{
    zt_zero_cfg *z = &job->ds.zero;
    /* A static object has zeroed padding, so parsed jobs compare equal with memcmp. */
    static const zt_zero_cfg defaults = {.stage = 0,
                                         .reduce_bucket_size = 500000000,
                                         .allgather_bucket_size = 500000000,
                                         .overlap_comm = false,
                                         .contiguous_gradients = true,
                                         .offload_optimizer = {.ratio = 1.0, .buffer_count = 4},
                                         .offload_param = {.ratio = 1.0,
                                                           .buffer_count = 5,
                                                           .buffer_size = 100000000,
                                                           .max_in_cpu = 1000000000},
                                         .stage3_prefetch_bucket_size = 50000000,
                                         .stage3_param_persistence_threshold = 100000,
                                         .stage3_max_reuse_distance = 1000000000,
                                         .stage3_max_live_parameters = 1000000000,
                                         .sub_group_size = 1000000000};
    memcpy(z, &defaults, sizeof(*z));
    json_t *v = jf_member(ds, "zero_optimization");
    if (v && json_is_boolean(v)) { /* legacy form: true means stage 1 */
        z->stage = json_is_true(v) ? 1 : 0;
        return ZT_OK;
    }
    json_t *o;
    zt_status st = jf_get_obj(c, ds, "zero_optimization", &o);
    if (st != ZT_OK || !o) return st;
    const dsblock *zb = ds_block("zero_optimization");
    jf_push(c, "zero_optimization");
    KEEP(ds_check_block(c, o, "zero_optimization"));
    KEEP(jf_get_int(c, o, "stage", 0, 3, &z->stage));
    int64_t C = job->model.n_embd;
    KEEP(jf_get_i64(c, o, "reduce_bucket_size", 0, INT64_MAX, &z->reduce_bucket_size));
    zero_bucket_auto(c, o, "reduce_bucket_size", &z->reduce_bucket_size, C * C,
                     "n_embd^2, as Hugging Face fills it");
    KEEP(jf_get_i64(c, o, "allgather_bucket_size", 0, INT64_MAX, &z->allgather_bucket_size));
    if (z->allgather_bucket_size % 2 != 0)
        KEEP(jf_fail_key(
            c, "allgather_bucket_size",
            "must be even (got %lld); DeepSpeed requires a multiple of nccl_start_alignment_factor, 2",
            (long long)z->allgather_bucket_size));
    z->overlap_comm = z->stage == 3;
    KEEP(jf_get_bool(c, o, "overlap_comm", &z->overlap_comm));
    KEEP(jf_get_bool(c, o, "contiguous_gradients", &z->contiguous_gradients));
    /* the deprecated booleans first, so that the blocks win where both are given */
    bool legacy = false;
    KEEP(jf_get_bool(c, o, "cpu_offload", &legacy));
    if (legacy) z->offload_optimizer.enabled = true;
    const char *cop = jf_pick_alias(c, o, zb->keys, zb->n, "cpu_offload_param");
    legacy = false;
    KEEP(jf_get_bool(c, o, cop, &legacy));
    if (legacy) z->offload_param.enabled = true;
    legacy = false;
    KEEP(jf_get_bool(c, o, "cpu_offload_use_pin_memory", &legacy));
    if (legacy) z->offload_optimizer.pin_memory = z->offload_param.pin_memory = true;
    KEEP(parse_offload(c, o, "offload_optimizer", job->base_dir, &z->offload_optimizer));
    KEEP(parse_offload(c, o, "offload_param", job->base_dir, &z->offload_param));
    if (z->offload_param.enabled && z->stage != 3) {
        const char *where = json_object_get(o, "offload_param") ? "offload_param" : cop;
        KEEP(jf_fail_key(
            c, where,
            "offloading parameters needs zero_optimization.stage 3 (stage is %d); remove it or set \"stage\": 3",
            z->stage));
    }
    KEEP(get_zero_i64(c, o, "stage3_prefetch_bucket_size", 0, &z->stage3_prefetch_bucket_size));
    zero_bucket_auto(c, o, "stage3_prefetch_bucket_size", &z->stage3_prefetch_bucket_size,
                     (int64_t)(0.9 * (double)(C * C)), "0.9 n_embd^2, as Hugging Face fills it");
    KEEP(get_zero_i64(c, o, "stage3_param_persistence_threshold", 0,
                      &z->stage3_param_persistence_threshold));
    zero_bucket_auto(c, o, "stage3_param_persistence_threshold",
                     &z->stage3_param_persistence_threshold, 10 * C,
                     "10 n_embd, as Hugging Face fills it");
    KEEP(get_zero_i64(c, o, "stage3_max_reuse_distance", 0, &z->stage3_max_reuse_distance));
    KEEP(get_zero_i64(c, o, "stage3_max_live_parameters", 0, &z->stage3_max_live_parameters));
    KEEP(jf_get_i64(c, o, "sub_group_size", 0, INT64_MAX, &z->sub_group_size));
    /* aliases of keys with no effect: only the check for two spellings at once */
    static const char *const aliased[] = {
        "stage3_model_persistence_threshold", "stage3_gather_16bit_weights_on_model_save",
        "stage3_module_granularity_threshold", "stage3_use_all_reduce_for_fetch_params"};
    for (size_t i = 0; i < NKEYS(aliased); i++)
        (void)jf_pick_alias(c, o, zb->keys, zb->n, aliased[i]);
    jf_pop(c);
    return st;
}

static zt_status parse_actckpt(pctx *c, json_t *ds, zt_actckpt_cfg *a)
{
    /* A static object has zeroed padding, so parsed jobs compare equal with memcmp. */
    static const zt_actckpt_cfg defaults = {false, false, false};
    memcpy(a, &defaults, sizeof(*a));
    json_t *o;
    zt_status st = jf_get_obj(c, ds, "activation_checkpointing", &o);
    if (st != ZT_OK || !o) return st;
    a->enabled = true;
    jf_push(c, "activation_checkpointing");
    KEEP(ds_check_block(c, o, "activation_checkpointing"));
    KEEP(jf_get_bool(c, o, "partition_activations", &a->partition_activations));
    KEEP(jf_get_bool(c, o, "cpu_checkpointing", &a->cpu_checkpointing));
    jf_pop(c);
    return st;
}

static const char *precision_name(zt_precision p)
{
    return p == ZT_PREC_FP16 ? "fp16" : p == ZT_PREC_BF16 ? "bf16" : "fp32";
}

/* data_types.grad_accum_dtype: fp32, or the 16-bit type in use. */
static zt_status parse_data_types(pctx *c, json_t *ds, zt_ds_cfg *d)
{
    d->grad_accum_fp32 = d->precision != ZT_PREC_FP16;
    json_t *o;
    zt_status st = jf_get_obj(c, ds, "data_types", &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, "data_types");
    KEEP(ds_check_block(c, o, "data_types"));
    char dt[64];
    bool present = false;
    KEEP(jf_get_str(c, o, "grad_accum_dtype", dt, sizeof(dt), &present));
    static const char *const fp32_names[] = {"fp32", "float32", "float", "torch.float32"};
    static const char *const fp16_names[] = {"fp16", "float16", "half", "torch.float16"};
    static const char *const bf16_names[] = {"bf16", "bfloat16", "torch.bfloat16"};
    zt_precision want = d->precision;
    if (!present) {
    } else if (jf_in_list_ci(dt, fp32_names, NKEYS(fp32_names))) {
        d->grad_accum_fp32 = true;
    } else if (jf_in_list_ci(dt, fp16_names, NKEYS(fp16_names)) ||
               jf_in_list_ci(dt, bf16_names, NKEYS(bf16_names))) {
        want = jf_in_list_ci(dt, fp16_names, NKEYS(fp16_names)) ? ZT_PREC_FP16 : ZT_PREC_BF16;
        if (want != d->precision) {
            if (d->precision == ZT_PREC_FP32)
                KEEP(jf_fail_key(
                    c, "grad_accum_dtype",
                    "\"%s\" needs %s training, but neither fp16 nor bf16 is enabled; use \"fp32\" or enable %s",
                    dt, precision_name(want), precision_name(want)));
            else
                KEEP(jf_fail_key(
                    c, "grad_accum_dtype",
                    "\"%s\" does not match the training precision %s; use \"fp32\" or \"%s\"", dt,
                    precision_name(d->precision), precision_name(d->precision)));
        } else {
            d->grad_accum_fp32 = false;
        }
    } else {
        KEEP(jf_fail_key(c, "grad_accum_dtype",
                         "must be \"fp32\", \"fp16\" or \"bf16\" (got \"%s\")", dt));
    }
    jf_pop(c);
    return st;
}

static zt_status parse_csv_monitor(pctx *c, json_t *ds, zt_job *job)
{
    zt_csv_monitor_cfg *m = &job->ds.csv_monitor;
    json_t *o;
    zt_status st = jf_get_obj(c, ds, "csv_monitor", &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, "csv_monitor");
    KEEP(ds_check_block(c, o, "csv_monitor"));
    KEEP(jf_get_bool(c, o, "enabled", &m->enabled));
    snprintf(m->job_name, sizeof(m->job_name), "DeepSpeedJobName");
    KEEP(jf_get_str(c, o, "job_name", m->job_name, sizeof(m->job_name), NULL));
    if (strchr(m->job_name, '/') || strcmp(m->job_name, "..") == 0 || strcmp(m->job_name, ".") == 0)
        KEEP(
            jf_fail_key(c, "job_name",
                        "must be a plain name, not a path (got \"%s\"); put folders in output_path",
                        m->job_name));
    /* output_path "" (DeepSpeed's default) is the job file's directory */
    json_t *op = jf_member(o, "output_path");
    if (op && json_is_string(op) && json_string_length(op) == 0)
        snprintf(m->output_path, sizeof(m->output_path), "%s", job->base_dir);
    else if (op)
        KEEP(jf_get_path(c, o, "output_path", job->base_dir, m->output_path, NULL));
    else
        snprintf(m->output_path, sizeof(m->output_path), "%s", job->base_dir);
    if (!m->enabled) memset(m, 0, sizeof(*m));
    jf_pop(c);
    return st;
}

/* DeepSpeed batch key `key` filled from the job's train section (value 0: not given there,
 * nothing to do): a value given in both must agree, and the fill is noted when the DeepSpeed
 * key is "auto" or absent. `from` names the train key ("the job's train.batch_size"); it is a
 * string literal, kept by the note. */
static zt_status fill_from_train(pctx *c, json_t *ds, const char *key, int64_t value,
                                 const char *from, int64_t *given)
{
    if (!value) return ZT_OK;
    zt_status st = ZT_OK;
    if (*given && *given != value)
        st = jf_fail_key(c, key, "is %lld but %s is %lld; give one of them, or make them equal",
                         (long long)*given, from, (long long)value);
    *given = value;
    if (jf_auto_given(c, ds, key) || !json_object_get(ds, key))
        jf_auto_note(c, key, JF_V_I64, given, from);
    return st;
}

/* The fill of the batch triad from the job's train section, before DeepSpeed's rules. */
static zt_status fill_batch(pctx *c, json_t *ds, zt_job *job)
{
    zt_ds_cfg *d = &job->ds;
    zt_status st = ZT_OK;
    const zt_train_cfg *t = &job->train;
    KEEP(fill_from_train(c, ds, "train_batch_size", t->batch_size, "the job's train.batch_size",
                         &d->given_train_batch_size));
    KEEP(fill_from_train(c, ds, "train_micro_batch_size_per_gpu", t->micro_batch_size,
                         "the job's train.micro_batch_size", &d->given_micro_batch));
    /* "auto" (or absent with no other batch key): the planner picks it when the rank starts */
    bool mb_auto = jf_auto_given(c, ds, "train_micro_batch_size_per_gpu");
    bool mb_absent = !json_object_get(ds, "train_micro_batch_size_per_gpu");
    bool derived = d->given_train_batch_size && d->given_grad_accum; /* DeepSpeed's rule */
    if (!d->given_micro_batch && !derived &&
        (mb_auto || (mb_absent && !d->given_train_batch_size && !d->given_grad_accum))) {
        d->micro_auto = true;
        jf_auto_note(c, "train_micro_batch_size_per_gpu", JF_V_TEXT,
                     "the largest that fits the rank's memory",
                     "chosen by the planner when the ranks start");
    }
    if (jf_auto_given(c, ds, "train_batch_size") && !t->batch_size)
        jf_auto_note(c, "train_batch_size", JF_V_I64, &d->train_batch_size,
                     "micro batch x accumulation x ranks");
    if (jf_auto_given(c, ds, "gradient_accumulation_steps"))
        jf_auto_note(c, "gradient_accumulation_steps", JF_V_I64, &d->grad_accum,
                     "derived from the batch sizes");
    return st;
}

/* The precision from the job's train.precision where fp16/bf16 do not say. */
static zt_status fill_precision(pctx *c, json_t *ds, zt_job *job, const char *bf16_key)
{
    zt_ds_cfg *d = &job->ds;
    zt_status st = ZT_OK;
    if (!job->train.precision_given) return ZT_OK;
    zt_precision want = job->train.precision;
    json_t *f = jf_member(ds, "fp16"), *b = jf_member(ds, bf16_key);
    bool fp16_said = f && json_is_object(f) && jf_member(f, "enabled");
    bool bf16_said = b && json_is_object(b) && jf_member(b, "enabled");
    if ((fp16_said && d->fp16.enabled && want != ZT_PREC_FP16) ||
        (bf16_said && d->bf16 && want != ZT_PREC_BF16))
        return jf_fail_key(
            c, d->fp16.enabled ? "fp16" : bf16_key,
            "enables %s but the job's train.precision is \"%s\"; make them agree or set \"enabled\": \"auto\"",
            d->fp16.enabled ? "fp16" : "bf16", precision_name(want));
    if (!fp16_said && !bf16_said) {
        d->fp16.enabled = want == ZT_PREC_FP16;
        d->bf16 = want == ZT_PREC_BF16;
    }
    return st;
}

/* Every problem of the batch triad, placed at the first batch key given. */
static zt_status check_batch(pctx *c, json_t *ds, zt_job *job)
{
    zt_err berr;
    zt_err_clear(&berr);
    zt_status st = zt_job_resolve_batch(job, job->resources.ranks, &berr);
    if (st == ZT_OK) return ZT_OK;
    const char *key =
        json_object_get(ds, "train_batch_size")                 ? "train_batch_size"
        : json_object_get(ds, "train_micro_batch_size_per_gpu") ? "train_micro_batch_size_per_gpu"
        : json_object_get(ds, "gradient_accumulation_steps")    ? "gradient_accumulation_steps"
                                                                : NULL;
    return jf_fail_at(c, st, key, berr.msg);
}

/* The DeepSpeed object `ds`, whose path is c's current one. */
static zt_status parse_ds(pctx *c, json_t *ds, zt_job *job)
{
    zt_ds_cfg *d = &job->ds;
    zt_status st = ZT_OK;
    KEEP(ds_check_block(c, ds, ""));
    KEEP(
        jf_get_int_max(c, ds, "train_batch_size", 1, INT_MAX, INT_MAX, &d->given_train_batch_size));
    KEEP(jf_get_int_max(c, ds, "train_micro_batch_size_per_gpu", 1, INT_MAX, INT_MAX,
                        &d->given_micro_batch));
    KEEP(jf_get_int_max(c, ds, "gradient_accumulation_steps", 1, INT_MAX, INT_MAX,
                        &d->given_grad_accum));
    d->steps_per_print = 10;
    KEEP(jf_get_i64(c, ds, "steps_per_print", 1, INT64_MAX, &d->steps_per_print));
    d->gradient_clipping = 0;
    KEEP(jf_get_num(c, ds, "gradient_clipping", 0, 0, NUM_GE, &d->gradient_clipping));
    if (jf_auto_given(c, ds, "gradient_clipping"))
        jf_auto_note(c, "gradient_clipping", JF_V_NUM, &d->gradient_clipping, NULL);
    KEEP(jf_get_bool(c, ds, "wall_clock_breakdown", &d->wall_clock_breakdown));
    KEEP(parse_fp16(c, ds, job));
    const char *bf16_key = "bf16";
    KEEP(parse_bf16(c, ds, job, &bf16_key));
    KEEP(fill_precision(c, ds, job, bf16_key));
    if (d->fp16.enabled && d->bf16) {
        jf_push(c, bf16_key);
        KEEP(jf_fail_key(
            c, "enabled",
            "fp16 and bf16 cannot both be enabled (DeepSpeed: \"bfloat16 and fp16 modes cannot be simultaneously enabled\"); enable at most one"));
        jf_pop(c);
        d->bf16 = false;
    }
    d->precision = d->fp16.enabled ? ZT_PREC_FP16 : d->bf16 ? ZT_PREC_BF16 : ZT_PREC_FP32;
    KEEP(ds_parse_optimizer(c, ds, d));
    KEEP(ds_parse_scheduler(c, ds, job));
    KEEP(parse_zero(c, ds, job));
    static const zt_aio_cfg aio_defaults = {
        .block_size = 1048576, .queue_depth = 8, .thread_count = 1, .overlap_events = true};
    memcpy(&d->aio, &aio_defaults, sizeof(d->aio));
    KEEP(parse_aio(c, ds, &d->aio));
    KEEP(parse_actckpt(c, ds, &d->activation_checkpointing));
    KEEP(parse_data_types(c, ds, d));
    KEEP(parse_csv_monitor(c, ds, job));
    /* blocks that have no effect here are still checked as DeepSpeed checks them */
    static const char *const quiet[] = {"tensorboard", "wandb", "comet"};
    for (size_t i = 0; i < NKEYS(quiet); i++) {
        json_t *o = jf_member(ds, quiet[i]);
        if (!o || !json_is_object(o)) continue;
        const dsblock *b = ds_block(quiet[i]);
        jf_push(c, quiet[i]);
        KEEP(jf_check_keys(c, o, b->keys, b->n, JF_QUIET, NULL, NULL));
        jf_pop(c);
    }
    KEEP(fill_batch(c, ds, job));
    KEEP(check_batch(c, ds, job));
    return st;
}

zt_status zt_ds_parse(pctx *c, json_t *root, zt_job *job)
{
    json_t *v = jf_member(root, "deepspeed");
    if (!v)
        return jf_fail_key(
            c, "deepspeed",
            "missing; add the DeepSpeed config (an object, or the path of a DeepSpeed JSON file) with at least \"train_micro_batch_size_per_gpu\"");
    if (json_is_object(v)) {
        jf_push(c, "deepspeed");
        zt_status st = parse_ds(c, v, job);
        jf_pop(c);
        return st;
    }
    if (!json_is_string(v)) {
        char got[64];
        jf_describe(v, got, sizeof(got));
        return jf_fail_key(c, "deepspeed",
                           "must be an object {...} or the path of a DeepSpeed JSON file (got %s)",
                           got);
    }
    if (c->no_files)
        return jf_fail_key(
            c, "deepspeed",
            "names a file, and the coordinator opens no file a job names; submit with 'zctl submit', which sends the DeepSpeed config inline, or put the config object here");
    char path[ZT_PATH_MAX];
    zt_status st = jf_get_path(c, root, "deepspeed", job->base_dir, path, NULL);
    if (st != ZT_OK) return st;
    char *text = NULL;
    size_t len = 0;
    zt_err ferr;
    zt_err_clear(&ferr);
    st = jf_read_text(path, path, "DeepSpeed config", &text, &len, &ferr);
    if (st != ZT_OK)
        return jf_fail_key_code(c, st, "deepspeed", "%s (relative paths resolve against %s)",
                                ferr.msg, job->base_dir);
    json_t *ds = NULL;
    st = jf_load_json(text, len, path, "DeepSpeed config", &ds, &ferr);
    if (st != ZT_OK) {
        pctx dc = {.origin = path, .origin_index = 1, .text = text, .len = len, .rep = c->rep};
        jf_fail_at(&dc, st, NULL, ferr.msg);
    } else {
        pctx dc = {.origin = path, .origin_index = 1, .text = text, .len = len, .rep = c->rep};
        st = parse_ds(&dc, ds, job);
        json_decref(ds);
    }
    zt_free(text);
    return st;
}

/* ---- the summary ------------------------------------------------------------------------- */

static void notes_line(char *out, size_t cap, size_t *used, const char *prefix, const char *text)
{
    if (!text[0]) return;
    if (*used) jf_append(out, cap, used, "\n");
    jf_append(out, cap, used, prefix);
    jf_append(out, cap, used, text);
}

static void auto_value(const jf_auto *a, char *out, size_t cap)
{
    switch (a->type) {
    case JF_V_INT:
        snprintf(out, cap, "%d", *(const int *)a->value);
        break;
    case JF_V_I64:
        snprintf(out, cap, "%lld", (long long)*(const int64_t *)a->value);
        break;
    case JF_V_NUM:
        jf_format_double(*(const double *)a->value, out, cap);
        break;
    case JF_V_BOOL:
        snprintf(out, cap, "%s", *(const bool *)a->value ? "true" : "false");
        break;
    case JF_V_TEXT:
        snprintf(out, cap, "%s", (const char *)a->value);
        break;
    }
}

void zt_ds_notes_build(const jf_report *rep, zt_job *job)
{
    char *out = job->ds.notes;
    size_t cap = sizeof(job->ds.notes), used = 0;
    memset(out, 0, cap);
    notes_line(out, cap, &used, "ignored (DeepSpeed does not know them either): ", rep->ignored);
    char line[ZT_DS_NOTES_MAX];
    const char *p = rep->noeffect;
    while (*p) { /* one line per key */
        const char *e = strchr(p, '\n');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k >= sizeof(line)) k = sizeof(line) - 1;
        memcpy(line, p, k);
        line[k] = '\0';
        notes_line(out, cap, &used, "no effect here: ", line);
        p += k + (e ? 1 : 0);
    }
    notes_line(out, cap, &used, "", rep->info);
    for (size_t i = 0; i < rep->nautos; i++) {
        const jf_auto *a = &rep->autos[i];
        char val[128];
        auto_value(a, val, sizeof(val));
        snprintf(line, sizeof(line), "%s = %s (%s)", a->path, val,
                 a->from ? a->from : "DeepSpeed's default");
        notes_line(out, cap, &used, "auto: ", line);
    }
}

void zt_ds_notes_print(FILE *f, const char *notes, const char *indent)
{
    for (const char *p = notes; *p;) {
        const char *e = strchr(p, '\n');
        int k = e ? (int)(e - p) : (int)strlen(p);
        fprintf(f, "%s%.*s\n", indent, k, p);
        p += k + (e ? 1 : 0);
    }
}
