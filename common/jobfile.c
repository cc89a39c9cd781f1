/* zerotrain: parses and validates the job file into struct zt_job: the job's own sections
 * here, the DeepSpeed config in dsconfig*.c, values read through the getters of jobfile_get.c
 * and paths resolved by jobfile_path.c. Every problem is collected with the file, the JSON line
 * and column, the key path, what is wrong and what to do, and reported together.
 * Serialisation back to JSON lives in jobfile_write.c. */
#define _POSIX_C_SOURCE 200809L
#include "jobfile.h"

#include <ctype.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "jobfile_int.h"
#include "log.h"

/* ------------------------------------------------------------------------------------------ */
/* Key tables. */

static const keyspec job_keys[] = {
    SUP("name"),      SUP("model"),        SUP("data"),      SUP("train"),
    SUP("resources"), SUP("max_restarts"), SUP("deepspeed"), SUP("deepspeed_notes"),
};

static const keyspec model_keys[] = {
    SUP("arch"),       SUP("n_layer"),           SUP("n_head"), SUP("n_embd"), SUP("block_size"),
    SUP("vocab_size"), SUP("padded_vocab_size"), SUP("init"),   SUP("seed"),
};

static const keyspec data_keys[] = {SUP("train"), SUP("val")};

static const keyspec train_keys[] = {
    SUP("steps"),
    SUP("eval_every"),
    SUP("eval_steps"),
    SUP("checkpoint_every"),
    SUP("checkpoint_dir"),
    SUP("keep_checkpoints"),
    SUP("comm_timeout_ms"),
    SUP("max_skipped_steps"),
    SUP("resume_from"),
    SUP("batch_size"),
    SUP("micro_batch_size"),
    SUP("warmup_steps"),
    SUP("precision"),
};

static const keyspec resources_keys[] = {SUP("ranks"), SUP("ranks_per_node"), SUP("device")};

/* A DeepSpeed key written at the job's top level belongs inside "deepspeed". */
static const char *job_key_hint(const char *key, const void *arg)
{
    (void)arg;
    return zt_ds_top_key_hint(key);
}

/* ------------------------------------------------------------------------------------------ */
/* The job's own sections. Each goes on after a problem, so that one run reports them all. */

static bool valid_name(const char *s)
{
    if (!isalnum((unsigned char)s[0])) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.') return false;
    return true;
}

/* The default name: the job file's name without its extension, else "job". */
static void default_name(const zt_job *job, char *out, size_t cap)
{
    const char *base = strrchr(job->job_path, '/');
    base = base ? base + 1 : job->job_path;
    size_t k = strlen(base);
    const char *dot = strrchr(base, '.');
    if (dot && dot != base) k = (size_t)(dot - base);
    if (k == 0 || k >= cap) {
        snprintf(out, cap, "job");
        return;
    }
    memcpy(out, base, k);
    out[k] = '\0';
    if (!valid_name(out)) snprintf(out, cap, "job");
}

static zt_status parse_name(pctx *c, json_t *root, zt_job *job)
{
    bool present;
    zt_status st = jf_get_str(c, root, "name", job->name, sizeof(job->name), &present);
    if (st != ZT_OK || !present) {
        default_name(job, job->name, sizeof(job->name));
        return st;
    }
    if (!valid_name(job->name)) {
        st = jf_fail_key(
            c, "name",
            "must start with a letter or digit and hold only letters, digits, '-', '_' and '.' (got \"%s\")",
            job->name);
        default_name(job, job->name, sizeof(job->name));
    }
    return st;
}

static zt_status parse_model(pctx *c, json_t *root, zt_job *job)
{
    zt_model_cfg *m = &job->model;
    json_t *o;
    zt_status st = jf_get_obj(c, root, "model", &o);
    if (st != ZT_OK) return st;
    if (!o)
        return jf_fail_key(
            c, "model",
            "missing; add the model, e.g. \"model\": {\"n_layer\": 4, \"n_head\": 4, \"n_embd\": 128, \"block_size\": 128, \"vocab_size\": 256}");
    jf_push(c, "model");
    KEEP(jf_check_keys(c, o, model_keys, NKEYS(model_keys), JF_STRICT, NULL, NULL));
    snprintf(m->arch, sizeof(m->arch), "gpt2");
    KEEP(jf_get_str(c, o, "arch", m->arch, sizeof(m->arch), NULL));
    if (strcmp(m->arch, "gpt2") != 0)
        KEEP(jf_fail_key(c, "arch",
                         "unsupported architecture \"%s\"; zerotrain implements \"gpt2\" only",
                         m->arch));
    static const char *const required[] = {"n_layer", "n_head", "n_embd", "block_size",
                                           "vocab_size"};
    for (size_t i = 0; i < NKEYS(required); i++)
        KEEP(jf_require(c, o, required[i], "a positive integer"));
    KEEP(jf_get_int(c, o, "n_layer", 1, INT_MAX, &m->n_layer));
    KEEP(jf_get_int(c, o, "n_head", 1, INT_MAX, &m->n_head));
    KEEP(jf_get_int(c, o, "n_embd", 1, INT_MAX, &m->n_embd));
    if (m->n_head > 0 && m->n_embd > 0 && m->n_embd % m->n_head != 0)
        KEEP(jf_fail_key(c, "n_head",
                         "must be a positive integer that divides n_embd (got %d for n_embd %d)",
                         m->n_head, m->n_embd));
    KEEP(jf_get_int(c, o, "block_size", 1, INT_MAX, &m->block_size));
    KEEP(jf_get_int(c, o, "vocab_size", 1, 65536, &m->vocab_size));
    /* V rounded up to a multiple of 128, computed in 64 bits: V <= 65536 so it fits. */
    m->padded_vocab_size = (int)(((int64_t)m->vocab_size + 127) / 128 * 128);
    KEEP(jf_get_int(c, o, "padded_vocab_size", 1, INT_MAX, &m->padded_vocab_size));
    if (m->padded_vocab_size < m->vocab_size)
        KEEP(jf_fail_key(
            c, "padded_vocab_size",
            "must be >= vocab_size (got %d for vocab_size %d); leave it out to get a multiple of 128",
            m->padded_vocab_size, m->vocab_size));
    char init[ZT_PATH_MAX];
    bool present = false;
    zt_status s_init = jf_get_str(c, o, "init", init, sizeof(init), &present);
    KEEP(s_init);
    m->init_random = !present || strcmp(init, "random") == 0;
    if (!m->init_random) KEEP(jf_get_path(c, o, "init", job->base_dir, m->init_path, NULL));
    int64_t seed = 1337;
    KEEP(jf_get_i64(c, o, "seed", 0, INT64_MAX, &seed));
    m->seed = (uint64_t)seed;
    jf_pop(c);
    return st;
}

static zt_status parse_data(pctx *c, json_t *root, zt_job *job)
{
    json_t *o;
    zt_status st = jf_get_obj(c, root, "data", &o);
    if (st != ZT_OK) return st;
    if (!o)
        return jf_fail_key(
            c, "data",
            "missing; add the token shards, e.g. \"data\": {\"train\": \"data/train_*.bin\"}");
    jf_push(c, "data");
    KEEP(jf_check_keys(c, o, data_keys, NKEYS(data_keys), JF_STRICT, NULL, NULL));
    KEEP(jf_require(c, o, "train", "a glob of training shards, e.g. \"data/train_*.bin\""));
    KEEP(jf_get_path(c, o, "train", job->base_dir, job->data.train, NULL));
    KEEP(jf_get_path(c, o, "val", job->base_dir, job->data.val, NULL));
    jf_pop(c);
    return st;
}

static zt_status parse_precision(pctx *c, json_t *o, zt_train_cfg *t)
{
    char p[32];
    bool present = false;
    zt_status st = jf_get_str(c, o, "precision", p, sizeof(p), &present);
    if (st != ZT_OK || !present) return st;
    if (strcmp(p, "fp32") == 0)
        t->precision = ZT_PREC_FP32;
    else if (strcmp(p, "bf16") == 0)
        t->precision = ZT_PREC_BF16;
    else if (strcmp(p, "fp16") == 0)
        t->precision = ZT_PREC_FP16;
    else
        return jf_fail_key(c, "precision", "must be \"fp32\", \"bf16\" or \"fp16\" (got \"%s\")",
                           p);
    t->precision_given = true;
    return ZT_OK;
}

static zt_status parse_train(pctx *c, json_t *root, zt_job *job)
{
    zt_train_cfg *t = &job->train;
    t->eval_every = 0;
    t->eval_steps = 10;
    t->checkpoint_every = 0;
    t->keep_checkpoints = 3;
    t->comm_timeout_ms = ZT_JOB_DEFAULT_COMM_TIMEOUT_MS;
    t->max_skipped_steps = ZT_JOB_DEFAULT_MAX_SKIPPED_STEPS;
    t->warmup_steps = -1;
    json_t *o;
    zt_status st = jf_get_obj(c, root, "train", &o);
    if (st != ZT_OK) return st;
    if (!o) return jf_fail_key(c, "train", "missing; add at least \"train\": {\"steps\": N}");
    jf_push(c, "train");
    KEEP(jf_check_keys(c, o, train_keys, NKEYS(train_keys), JF_STRICT, NULL, NULL));
    KEEP(jf_require(c, o, "steps", "the number of optimizer steps, a positive integer"));
    KEEP(jf_get_i64(c, o, "steps", 1, INT64_MAX, &t->steps));
    KEEP(jf_get_i64(c, o, "eval_every", 0, INT64_MAX, &t->eval_every));
    KEEP(jf_get_i64(c, o, "eval_steps", 1, INT64_MAX, &t->eval_steps));
    KEEP(jf_get_i64(c, o, "checkpoint_every", 0, INT64_MAX, &t->checkpoint_every));
    KEEP(jf_get_int(c, o, "keep_checkpoints", 0, INT_MAX, &t->keep_checkpoints));
    KEEP(jf_get_int(c, o, "comm_timeout_ms", ZT_JOB_MIN_COMM_TIMEOUT_MS, ZT_JOB_MAX_COMM_TIMEOUT_MS,
                    &t->comm_timeout_ms));
    KEEP(jf_get_i64(c, o, "max_skipped_steps", 0, INT64_MAX, &t->max_skipped_steps));
    json_t *rf = jf_member(o, "resume_from");
    if (json_is_string(rf) && !json_string_value(rf)[0])
        KEEP(jf_fail_key(c, "resume_from",
                         "is empty; give a checkpoint (a step_* directory or a checkpoint directory) or remove the key"));
    else
        KEEP(jf_get_path(c, o, "resume_from", job->base_dir, t->resume_from, NULL));
    KEEP(jf_get_i64(c, o, "batch_size", 1, INT_MAX, &t->batch_size));
    KEEP(jf_get_i64(c, o, "micro_batch_size", 1, INT_MAX, &t->micro_batch_size));
    KEEP(jf_get_i64(c, o, "warmup_steps", 0, INT64_MAX, &t->warmup_steps));
    KEEP(parse_precision(c, o, t));
    bool present = false;
    KEEP(jf_get_path(c, o, "checkpoint_dir", job->base_dir, t->checkpoint_dir, &present));
    if (!present) {
        char rel[ZT_NAME_MAX + 8];
        snprintf(rel, sizeof(rel), "ckpt/%s", job->name);
        if (!jf_absolute_path(job->base_dir, rel, t->checkpoint_dir, sizeof(t->checkpoint_dir)))
            KEEP(
                jf_fail_here(c, ZT_ERR_CONFIG,
                             "the default checkpoint_dir %s/%s is too long; set \"checkpoint_dir\"",
                             job->base_dir, rel));
    }
    jf_pop(c);
    return st;
}

static zt_status parse_resources(pctx *c, json_t *root, zt_job *job)
{
    zt_resources_cfg *r = &job->resources;
    r->ranks = 1;
    r->device = ZT_DEVICE_CPU;
    json_t *o;
    zt_status st = jf_get_obj(c, root, "resources", &o);
    if (st != ZT_OK || !o) {
        r->ranks_per_node = r->ranks;
        return st;
    }
    jf_push(c, "resources");
    KEEP(jf_check_keys(c, o, resources_keys, NKEYS(resources_keys), JF_STRICT, NULL, NULL));
    KEEP(jf_get_int(c, o, "ranks", 1, INT_MAX, &r->ranks));
    r->ranks_per_node = r->ranks;
    KEEP(jf_get_int(c, o, "ranks_per_node", 1, INT_MAX, &r->ranks_per_node));
    if (r->ranks_per_node > r->ranks)
        KEEP(jf_fail_key(c, "ranks_per_node", "must be at most ranks (got %d for ranks %d)",
                         r->ranks_per_node, r->ranks));
    char dev[64];
    bool present = false;
    KEEP(jf_get_str(c, o, "device", dev, sizeof(dev), &present));
    if (present) {
        if (strcmp(dev, "cpu") == 0)
            r->device = ZT_DEVICE_CPU;
        else if (strcmp(dev, "cuda") == 0)
            r->device = ZT_DEVICE_CUDA;
        else
            KEEP(jf_fail_key(c, "device", "must be \"cpu\" or \"cuda\" (got \"%s\")", dev));
    }
    jf_pop(c);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* Entry points. */

static int problem_order(const void *a, const void *b)
{
    const jf_problem *p = a, *q = b;
    if (p->origin != q->origin) return p->origin - q->origin;
    /* problems without a position go after those of their file with one */
    if ((p->line == 0) != (q->line == 0)) return p->line == 0 ? 1 : -1;
    if (p->line != q->line) return p->line - q->line;
    if (p->col != q->col) return p->col - q->col;
    return p->seq - q->seq;
}

/* err = every problem of rep, in file order, one per line. */
static zt_status report_problems(jf_report *rep, zt_err *err)
{
    qsort(rep->problems, rep->nproblems, sizeof(rep->problems[0]), problem_order);
    zt_status code = rep->problems[0].code;
    if (!err) return code;
    char *out = err->msg;
    size_t cap = sizeof(err->msg), used = 0;
    out[0] = '\0';
    size_t shown = 0;
    for (size_t i = 0; i < rep->nproblems; i++) {
        const char *m = rep->problems[i].msg;
        /* keep room for the count of what does not fit */
        if (used + strlen(m) + 2 > cap - 64) break;
        if (i) jf_append(out, cap, &used, "\n");
        jf_append(out, cap, &used, m);
        shown++;
    }
    size_t rest = rep->nproblems - shown + rep->dropped;
    if (rest) {
        char more[64];
        snprintf(more, sizeof(more), "\n... and %zu more problem%s", rest, rest == 1 ? "" : "s");
        jf_append(out, cap, &used, more);
    }
    err->status = code;
    return code;
}

/* Parses text into job, whose job_path and base_dir the caller has set. */
static zt_status parse_job(zt_job *job, const char *text, size_t len, const char *origin,
                           bool no_files, zt_err *err)
{
    json_t *root;
    zt_status st = jf_load_json(text, len, origin, "job file", &root, err);
    if (st != ZT_OK) return st;
    jf_report *rep = zt_calloc(1, sizeof(*rep));
    if (!rep) {
        json_decref(root);
        return zt_err_set(err, ZT_ERR_NOMEM, "%s: out of memory while reading the job file",
                          origin);
    }
    pctx c = {.origin = origin,
              .origin_index = 0,
              .text = text,
              .len = len,
              .rep = rep,
              .no_files = no_files};
    KEEP(jf_check_keys(&c, root, job_keys, NKEYS(job_keys), JF_STRICT, job_key_hint, NULL));
    KEEP(parse_name(&c, root, job));
    KEEP(parse_model(&c, root, job));
    KEEP(parse_data(&c, root, job));
    KEEP(parse_train(&c, root, job));
    KEEP(parse_resources(&c, root, job));
    job->max_restarts = 0;
    KEEP(jf_get_int(&c, root, "max_restarts", 0, INT_MAX, &job->max_restarts));
    KEEP(zt_ds_parse(&c, root, job));
    if (rep->nproblems || rep->dropped) {
        st = report_problems(rep, err);
    } else {
        /* a resolved job (zt_job_to_json) carries the summary of the config it came from */
        zt_ds_notes_build(rep, job);
        json_t *n = json_object_get(root, "deepspeed_notes");
        if (n && !json_is_string(n)) {
            char got[64];
            jf_describe(n, got, sizeof(got));
            jf_fail_key(&c, "deepspeed_notes", "must be a string (got %s)", got);
            st = report_problems(rep, err);
        } else if (n) {
            memset(job->ds.notes, 0, sizeof(job->ds.notes));
            size_t k = json_string_length(n);
            if (k >= sizeof(job->ds.notes)) k = sizeof(job->ds.notes) - 1;
            memcpy(job->ds.notes, json_string_value(n), k);
        }
    }
    zt_free(rep);
    json_decref(root);
    return st;
}

static zt_status parse_text(zt_job *job, const char *text, const char *origin,
                            const char *base_dir, bool no_files, zt_err *err)
{
    if (!job || !text)
        return zt_err_set(err, ZT_ERR_INVALID, "zt_job_parse: job and text must not be NULL");
    memset(job, 0, sizeof(*job));
    zt_status st = jf_set_base_dir(job, base_dir, err);
    if (st == ZT_OK)
        st = parse_job(job, text, strlen(text), origin ? origin : "job", no_files, err);
    if (st != ZT_OK) memset(job, 0, sizeof(*job));
    return st;
}

zt_status zt_job_parse(zt_job *job, const char *text, const char *origin, const char *base_dir,
                       zt_err *err)
{
    return parse_text(job, text, origin, base_dir, false, err);
}

zt_status zt_job_parse_inline(zt_job *job, const char *text, const char *origin,
                              const char *base_dir, zt_err *err)
{
    return parse_text(job, text, origin, base_dir, true, err);
}

zt_status zt_job_load(zt_job *job, const char *path, zt_err *err)
{
    if (!job || !path || !path[0])
        return zt_err_set(err, ZT_ERR_INVALID, "zt_job_load: give the path of a job file");
    memset(job, 0, sizeof(*job));
    char *text = NULL;
    size_t len = 0;
    zt_status st = jf_read_text(path, path, "job file", &text, &len, err);
    if (st != ZT_OK) return st;
    /* a UTF-8 byte order mark (some Windows editors write one) is no part of the JSON */
    size_t bom = len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0 ? 3 : 0;
    if (bom)
        ZT_WARN(
            "jobfile",
            "%s: skipped the UTF-8 byte order mark at the start of the job file; save it without one to drop this note",
            path);
    size_t k = bom;
    while (k < len && isspace((unsigned char)text[k]))
        k++;
    if (k == len && len > bom) {
        zt_free(text);
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "%s: the job file holds only whitespace; it must hold one JSON object {...}", path);
    }
    char cwd[ZT_PATH_MAX] = "/";
    if (path[0] != '/') st = jf_cwd_path(cwd, sizeof(cwd), err);
    if (st == ZT_OK && !jf_absolute_path(cwd, path, job->job_path, sizeof(job->job_path)))
        st = zt_err_set(
            err, ZT_ERR_INVALID,
            "%s: the absolute path of the job file is longer than %d bytes; move it to a shorter path",
            path, ZT_PATH_MAX - 1);
    if (st == ZT_OK) {
        /* base_dir is still all zeros: copy only the directory part, so no bytes of the
         * file name linger after its NUL (parsed jobs compare equal with memcmp). */
        const char *slash = strrchr(job->job_path, '/');
        size_t k = slash == job->job_path ? 1 : (size_t)(slash - job->job_path);
        memcpy(job->base_dir, job->job_path, k);
        st = parse_job(job, text + bom, len - bom, path, false, err);
    }
    zt_free(text);
    if (st != ZT_OK) memset(job, 0, sizeof(*job));
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* The batch triad (deepspeed-semantics.md §1.1). */

/* a * b, or -1 when it does not fit int64_t (a, b >= 0). */
static int64_t mul_or_neg(int64_t a, int64_t b)
{
    if (a != 0 && b > INT64_MAX / a) return -1;
    return a * b;
}

zt_status zt_job_resolve_batch(zt_job *job, int world_size, zt_err *err)
{
    if (!job) return zt_err_set(err, ZT_ERR_INVALID, "zt_job_resolve_batch: job must not be NULL");
    if (world_size < 1)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "deepspeed: the world size must be at least 1 (got %d)", world_size);
    zt_ds_cfg *d = &job->ds;
    int64_t ws = world_size;
    int64_t tb = d->given_train_batch_size, mb = d->given_micro_batch, gas = d->given_grad_accum;
    /* an "auto" micro batch counts as given: the planner's pick, or 1 until it has picked */
    if (!mb && d->micro_auto) mb = d->micro_picked > 0 ? d->micro_picked : 1;
    if (tb < 0 || mb < 0 || gas < 0)
        return zt_err_set(
            err, ZT_ERR_INVALID,
            "deepspeed: given batch sizes must not be negative (train_batch_size %lld, train_micro_batch_size_per_gpu %lld, gradient_accumulation_steps %lld)",
            (long long)tb, (long long)mb, (long long)gas);
    bool dtb = false, dmb = false, dgas = false; /* derived, not given */
    const char *advice =
        "make train_batch_size = micro * accumulation * ranks, or give only two of the three";
    char buf[160];
    if (tb && mb && gas) {
    } else if (tb && mb) {
        gas = tb / mb / ws;
        dgas = true;
        snprintf(
            buf, sizeof(buf),
            "train_batch_size must be a positive multiple of train_micro_batch_size_per_gpu * ranks = %lld",
            (long long)mul_or_neg(mb, ws));
        advice = buf;
    } else if (tb && gas) {
        mb = tb / ws / gas;
        dmb = true;
        snprintf(
            buf, sizeof(buf),
            "train_batch_size must be a positive multiple of gradient_accumulation_steps * ranks = %lld",
            (long long)mul_or_neg(gas, ws));
        advice = buf;
    } else if (mb && gas) {
        tb = mul_or_neg(mul_or_neg(mb, gas), ws);
        dtb = true;
    } else if (tb) {
        gas = 1;
        mb = tb / ws;
        dgas = dmb = true;
        snprintf(buf, sizeof(buf), "train_batch_size must be a positive multiple of ranks %lld",
                 (long long)ws);
        advice = buf;
    } else if (mb) {
        gas = 1;
        tb = mul_or_neg(mb, ws);
        dtb = dgas = true;
    } else {
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "deepspeed: give train_batch_size or train_micro_batch_size_per_gpu (DeepSpeed: \"Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided\"); e.g. \"train_micro_batch_size_per_gpu\": 4");
    }
    int64_t prod = mul_or_neg(mul_or_neg(mb, gas), ws);
    if (tb <= 0 || mb <= 0 || gas <= 0 || prod < 0 || tb != prod) {
        const char *mark = " (derived)";
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "deepspeed: train_batch_size %lld%s != train_micro_batch_size_per_gpu %lld%s * gradient_accumulation_steps %lld%s * ranks %lld; %s",
            (long long)tb, dtb ? mark : "", (long long)mb, dmb ? mark : "", (long long)gas,
            dgas ? mark : "", (long long)ws, advice);
    }
    d->train_batch_size = tb;
    d->micro_batch = mb;
    d->grad_accum = gas;
    d->world_size = world_size;
    return ZT_OK;
}
