/* zerotrain: writes a parsed job (common/jobfile.h) back as a job file with every default
 * spelled out, paths absolute and the DeepSpeed config inline, so that the coordinator can
 * store it, workers can receive it and zt_job_parse reads back the same struct. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "jobfile.h"

/* A small JSON emitter: indented two spaces per level, one member per line. */
typedef struct emitter {
    char *buf;
    size_t len, cap;
    int depth;
    bool first; /* no member written yet in the current container */
    bool oom;
} emitter;

static void put(emitter *e, const char *s, size_t k)
{
    if (e->oom) return;
    if (e->len + k + 1 > e->cap) {
        size_t cap = e->cap ? e->cap : 1024;
        while (cap < e->len + k + 1)
            cap *= 2;
        char *p = zt_realloc(e->buf, cap);
        if (!p) {
            e->oom = true;
            return;
        }
        e->buf = p;
        e->cap = cap;
    }
    memcpy(e->buf + e->len, s, k);
    e->len += k;
    e->buf[e->len] = '\0';
}

static void puts_(emitter *e, const char *s)
{
    put(e, s, strlen(s));
}

static void putf(emitter *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(emitter *e, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0) put(e, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static void put_string(emitter *e, const char *s)
{
    puts_(e, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            put(e, esc, 2);
        } else if (*p < 0x20) {
            putf(e, "\\u%04x", *p);
        } else {
            put(e, (const char *)p, 1);
        }
    }
    puts_(e, "\"");
}

static void newline(emitter *e)
{
    puts_(e, "\n");
    for (int i = 0; i < e->depth; i++)
        puts_(e, "  ");
}

static void key(emitter *e, const char *k)
{
    if (!e->first) puts_(e, ",");
    e->first = false;
    newline(e);
    put_string(e, k);
    puts_(e, ": ");
}

static void open_obj(emitter *e, const char *k)
{
    if (k) key(e, k);
    puts_(e, "{");
    e->depth++;
    e->first = true;
}

static void close_obj(emitter *e)
{
    e->depth--;
    if (!e->first) newline(e);
    puts_(e, "}");
    e->first = false;
}

static void kv_str(emitter *e, const char *k, const char *v)
{
    key(e, k);
    put_string(e, v);
}

static void kv_int(emitter *e, const char *k, int64_t v)
{
    key(e, k);
    putf(e, "%" PRId64, v);
}

static void kv_uint(emitter *e, const char *k, uint64_t v)
{
    key(e, k);
    putf(e, "%" PRIu64, v);
}

static void kv_bool(emitter *e, const char *k, bool v)
{
    key(e, k);
    puts_(e, v ? "true" : "false");
}

/* The shortest text that reads back as exactly v (valid JSON: validation keeps v finite). */
static void put_double(emitter *e, double v)
{
    char tmp[40];
    if (v == 0 && signbit(v)) { /* "-0" would read back as the integer 0 */
        puts_(e, "-0.0");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) break;
    }
    puts_(e, tmp);
}

static void kv_num(emitter *e, const char *k, double v)
{
    key(e, k);
    put_double(e, v);
}

static const char *sched_name(zt_sched_type t)
{
    switch (t) {
    case ZT_SCHED_WARMUP_LR:
        return "WarmupLR";
    case ZT_SCHED_WARMUP_DECAY_LR:
        return "WarmupDecayLR";
    case ZT_SCHED_WARMUP_COSINE_LR:
        return "WarmupCosineLR";
    default:
        return NULL;
    }
}

static void write_scheduler(emitter *e, const zt_sched_cfg *s)
{
    const char *name = sched_name(s->type);
    if (!name) return;
    open_obj(e, "scheduler");
    kv_str(e, "type", name);
    open_obj(e, "params");
    if (s->type != ZT_SCHED_WARMUP_COSINE_LR) {
        kv_num(e, "warmup_min_lr", s->warmup_min_lr);
        kv_num(e, "warmup_max_lr", s->warmup_max_lr);
    }
    kv_int(e, "warmup_num_steps", s->warmup_num_steps);
    kv_str(e, "warmup_type", s->warmup_type == ZT_WARMUP_LINEAR ? "linear" : "log");
    if (s->type != ZT_SCHED_WARMUP_LR) kv_int(e, "total_num_steps", s->total_num_steps);
    if (s->type == ZT_SCHED_WARMUP_COSINE_LR) {
        kv_num(e, "warmup_min_ratio", s->warmup_min_ratio);
        kv_num(e, "cos_min_ratio", s->cos_min_ratio);
    }
    close_obj(e);
    close_obj(e);
}

static void write_offload(emitter *e, const char *k, const zt_offload_cfg *o, bool with_ratio)
{
    open_obj(e, k);
    kv_str(e, "device", o->nvme ? "nvme" : o->enabled ? "cpu" : "none");
    kv_bool(e, "pin_memory", o->pin_memory);
    if (with_ratio) {
        kv_num(e, "ratio", o->ratio);
    } else {
        kv_int(e, "buffer_size", o->buffer_size);
        kv_int(e, "max_in_cpu", o->max_in_cpu);
    }
    kv_int(e, "buffer_count", o->buffer_count);
    if (o->nvme) kv_str(e, "nvme_path", o->nvme_path);
    close_obj(e);
}

static void write_deepspeed(emitter *e, const zt_ds_cfg *d)
{
    open_obj(e, "deepspeed");
    /* The triad as given, so that it can be re-resolved for another world size. */
    if (d->given_train_batch_size) kv_int(e, "train_batch_size", d->given_train_batch_size);
    if (d->given_micro_batch)
        kv_int(e, "train_micro_batch_size_per_gpu", d->given_micro_batch);
    else if (d->micro_auto)
        kv_str(e, "train_micro_batch_size_per_gpu", "auto");
    if (d->given_grad_accum) kv_int(e, "gradient_accumulation_steps", d->given_grad_accum);
    kv_int(e, "steps_per_print", d->steps_per_print);
    kv_num(e, "gradient_clipping", d->gradient_clipping);
    kv_bool(e, "wall_clock_breakdown", d->wall_clock_breakdown);
    if (d->csv_monitor.enabled) {
        open_obj(e, "csv_monitor");
        kv_bool(e, "enabled", true);
        kv_str(e, "output_path", d->csv_monitor.output_path);
        kv_str(e, "job_name", d->csv_monitor.job_name);
        close_obj(e);
    }

    open_obj(e, "optimizer");
    kv_str(e, "type", d->optimizer.type == ZT_OPTIM_ADAMW ? "AdamW" : "Adam");
    open_obj(e, "params");
    kv_num(e, "lr", d->optimizer.lr);
    key(e, "betas");
    puts_(e, "[");
    put_double(e, d->optimizer.beta1);
    puts_(e, ", ");
    put_double(e, d->optimizer.beta2);
    puts_(e, "]");
    kv_num(e, "eps", d->optimizer.eps);
    kv_num(e, "weight_decay", d->optimizer.weight_decay);
    kv_bool(e, "adam_w_mode", d->optimizer.adam_w_mode);
    close_obj(e);
    close_obj(e);

    write_scheduler(e, &d->scheduler);

    open_obj(e, "fp16");
    kv_bool(e, "enabled", d->fp16.enabled);
    kv_num(e, "loss_scale", d->fp16.loss_scale);
    kv_int(e, "initial_scale_power", d->fp16.initial_scale_power);
    kv_int(e, "loss_scale_window", d->fp16.loss_scale_window);
    kv_int(e, "hysteresis", d->fp16.hysteresis);
    kv_bool(e, "consecutive_hysteresis", d->fp16.consecutive_hysteresis);
    kv_num(e, "min_loss_scale", d->fp16.min_loss_scale);
    close_obj(e);
    open_obj(e, "bf16");
    kv_bool(e, "enabled", d->bf16);
    close_obj(e);

    const zt_zero_cfg *z = &d->zero;
    open_obj(e, "zero_optimization");
    kv_int(e, "stage", z->stage);
    kv_int(e, "reduce_bucket_size", z->reduce_bucket_size);
    kv_int(e, "allgather_bucket_size", z->allgather_bucket_size);
    kv_bool(e, "overlap_comm", z->overlap_comm);
    kv_bool(e, "contiguous_gradients", z->contiguous_gradients);
    write_offload(e, "offload_optimizer", &z->offload_optimizer, true);
    write_offload(e, "offload_param", &z->offload_param, false);
    kv_int(e, "stage3_prefetch_bucket_size", z->stage3_prefetch_bucket_size);
    kv_int(e, "stage3_param_persistence_threshold", z->stage3_param_persistence_threshold);
    kv_int(e, "stage3_max_reuse_distance", z->stage3_max_reuse_distance);
    kv_int(e, "stage3_max_live_parameters", z->stage3_max_live_parameters);
    kv_int(e, "sub_group_size", z->sub_group_size);
    close_obj(e);

    open_obj(e, "aio");
    kv_int(e, "block_size", d->aio.block_size);
    kv_int(e, "queue_depth", d->aio.queue_depth);
    kv_int(e, "thread_count", d->aio.thread_count);
    kv_bool(e, "single_submit", d->aio.single_submit);
    kv_bool(e, "overlap_events", d->aio.overlap_events);
    close_obj(e);

    if (d->activation_checkpointing.enabled) {
        open_obj(e, "activation_checkpointing");
        kv_bool(e, "partition_activations", d->activation_checkpointing.partition_activations);
        kv_bool(e, "cpu_checkpointing", d->activation_checkpointing.cpu_checkpointing);
        close_obj(e);
    }
    open_obj(e, "data_types");
    const char *accum = "fp32";
    if (!d->grad_accum_fp32) accum = d->precision == ZT_PREC_BF16 ? "bf16" : "fp16";
    kv_str(e, "grad_accum_dtype", accum);
    close_obj(e);
    close_obj(e);
}

char *zt_job_to_json(const zt_job *job)
{
    if (!job) return NULL;
    emitter e = {.first = true};
    open_obj(&e, NULL);
    kv_str(&e, "name", job->name);

    const zt_model_cfg *m = &job->model;
    open_obj(&e, "model");
    kv_str(&e, "arch", m->arch);
    kv_int(&e, "n_layer", m->n_layer);
    kv_int(&e, "n_head", m->n_head);
    kv_int(&e, "n_embd", m->n_embd);
    kv_int(&e, "block_size", m->block_size);
    kv_int(&e, "vocab_size", m->vocab_size);
    kv_int(&e, "padded_vocab_size", m->padded_vocab_size);
    kv_str(&e, "init", m->init_random ? "random" : m->init_path);
    kv_uint(&e, "seed", m->seed);
    close_obj(&e);

    open_obj(&e, "data");
    kv_str(&e, "train", job->data.train);
    if (job->data.val[0]) kv_str(&e, "val", job->data.val);
    close_obj(&e);

    const zt_train_cfg *t = &job->train;
    open_obj(&e, "train");
    kv_int(&e, "steps", t->steps);
    kv_int(&e, "eval_every", t->eval_every);
    kv_int(&e, "eval_steps", t->eval_steps);
    kv_int(&e, "checkpoint_every", t->checkpoint_every);
    kv_str(&e, "checkpoint_dir", t->checkpoint_dir);
    kv_int(&e, "keep_checkpoints", t->keep_checkpoints);
    kv_int(&e, "comm_timeout_ms", t->comm_timeout_ms);
    kv_int(&e, "max_skipped_steps", t->max_skipped_steps);
    if (t->resume_from[0]) kv_str(&e, "resume_from", t->resume_from);
    if (t->batch_size) kv_int(&e, "batch_size", t->batch_size);
    if (t->micro_batch_size) kv_int(&e, "micro_batch_size", t->micro_batch_size);
    if (t->warmup_steps >= 0) kv_int(&e, "warmup_steps", t->warmup_steps);
    if (t->precision_given)
        kv_str(&e, "precision",
               t->precision == ZT_PREC_FP16   ? "fp16"
               : t->precision == ZT_PREC_BF16 ? "bf16"
                                              : "fp32");
    close_obj(&e);

    open_obj(&e, "resources");
    kv_int(&e, "ranks", job->resources.ranks);
    kv_int(&e, "ranks_per_node", job->resources.ranks_per_node);
    kv_str(&e, "device", zt_device_name(job->resources.device));
    close_obj(&e);

    kv_int(&e, "max_restarts", job->max_restarts);
    write_deepspeed(&e, &job->ds);
    kv_str(&e, "deepspeed_notes", job->ds.notes);
    close_obj(&e);
    puts_(&e, "\n");
    if (e.oom) {
        zt_free(e.buf);
        return NULL;
    }
    return e.buf;
}
