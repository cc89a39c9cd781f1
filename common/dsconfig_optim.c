/* zerotrain: the optimizer and scheduler sections of a DeepSpeed config: Adam and AdamW with
 * DeepSpeed's rule for decoupled decay, and the three warmup schedules, each schedule taking
 * only its own parameters. Other optimizers and schedules DeepSpeed knows are refused by name. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "dsconfig_int.h"

/* The parameters of each schedule (scheduler.params), in one table so that a parameter given
 * to the wrong schedule can say where it belongs. */
typedef struct sched_info {
    const char *name;
    zt_sched_type type;
    const char *params[8];
} sched_info;

static const sched_info sched_table[] = {
    {"WarmupLR",
     ZT_SCHED_WARMUP_LR,
     {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "last_batch_iteration"}},
    {"WarmupDecayLR",
     ZT_SCHED_WARMUP_DECAY_LR,
     {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "total_num_steps",
      "last_batch_iteration"}},
    {"WarmupCosineLR",
     ZT_SCHED_WARMUP_COSINE_LR,
     {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "warmup_type",
      "last_batch_iteration"}},
};

static const char *const unsupported_schedulers[] = {
    "OneCycle",
    "LRRangeTest",
    /* torch.optim.lr_scheduler, which DeepSpeed falls back to */
    "LambdaLR",
    "MultiplicativeLR",
    "StepLR",
    "MultiStepLR",
    "ConstantLR",
    "LinearLR",
    "ExponentialLR",
    "SequentialLR",
    "CosineAnnealingLR",
    "ChainedScheduler",
    "ReduceLROnPlateau",
    "CyclicLR",
    "CosineAnnealingWarmRestarts",
    "OneCycleLR",
    "PolynomialLR",
};

static const char *const unsupported_optimizers[] = {
    /* DeepSpeed's own (lowercased) */
    "lamb",
    "onebitadam",
    "zerooneadam",
    "onebitlamb",
    "adagrad",
    "lion",
    "muadam",
    "muadamw",
    "musgd",
    "muon",
    /* torch.optim, which DeepSpeed falls back to */
    "sgd",
    "rmsprop",
    "adadelta",
    "adamax",
    "asgd",
    "lbfgs",
    "nadam",
    "radam",
    "rprop",
    "sparseadam",
    "adafactor",
};

static zt_status parse_betas(pctx *c, json_t *params, zt_optim_cfg *opt)
{
    json_t *v = jf_member(params, "betas");
    if (!v) return ZT_OK;
    if (!json_is_array(v) || json_array_size(v) != 2) {
        char got[64];
        if (json_is_array(v))
            snprintf(got, sizeof(got), "a list of %zu", json_array_size(v));
        else
            jf_describe(v, got, sizeof(got));
        return jf_fail_key(c, "betas",
                           "must be a list of two numbers [beta1, beta2], each in [0, 1) (got %s)",
                           got);
    }
    double b[2] = {opt->beta1, opt->beta2};
    zt_status st = ZT_OK;
    jf_push(c, "betas");
    for (size_t i = 0; i < 2; i++) {
        json_t *e = json_array_get(v, i);
        char got[64];
        jf_describe(e, got, sizeof(got));
        zt_status s1;
        if (!json_is_number(e))
            s1 = jf_fail_index(c, (long)i, "must be a number (got %s)", got);
        else
            s1 = jf_check_num(c, NULL, (long)i, json_number_value(e), 0, 1, NUM_RANGE_HO, got);
        if (s1 == ZT_OK)
            b[i] = json_number_value(e);
        else if (st == ZT_OK)
            st = s1;
    }
    jf_pop(c);
    opt->beta1 = b[0];
    opt->beta2 = b[1];
    return st;
}

zt_status ds_parse_optimizer(pctx *c, json_t *ds, zt_ds_cfg *d)
{
    zt_optim_cfg *opt = &d->optimizer;
    /* A static object has zeroed padding, so parsed jobs compare equal with memcmp. */
    static const zt_optim_cfg defaults = {.type = ZT_OPTIM_ADAMW,
                                          .lr = 1e-3,
                                          .beta1 = 0.9,
                                          .beta2 = 0.999,
                                          .eps = 1e-8,
                                          .weight_decay = 0,
                                          .adam_w_mode = true};
    memcpy(opt, &defaults, sizeof(*opt));
    json_t *o, *p;
    zt_status st = jf_get_obj(c, ds, "optimizer", &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, "optimizer");
    KEEP(ds_check_block(c, o, "optimizer"));
    bool named_adamw = true, known = false;
    char type[64];
    bool present = false;
    KEEP(jf_require(c, o, "type", "\"AdamW\" or \"Adam\""));
    KEEP(jf_get_str(c, o, "type", type, sizeof(type), &present));
    if (!present) {
    } else if (jf_in_list_ci(type, (const char *const[]){"adam"}, 1)) {
        named_adamw = false;
        known = true;
    } else if (jf_in_list_ci(type, (const char *const[]){"adamw"}, 1)) {
        known = true;
    } else if (jf_in_list_ci(type, unsupported_optimizers, NKEYS(unsupported_optimizers))) {
        KEEP(jf_fail_key(
            c, "type",
            "\"%s\" is an optimizer zerotrain does not offer; use \"AdamW\" (or \"Adam\" with adam_w_mode false for L2 decay)",
            type));
    } else {
        const char *near = jf_closest(type, (const char *const[]){"Adam", "AdamW"}, 2);
        if (near)
            KEEP(jf_fail_key(c, "type", "unknown optimizer \"%s\"; did you mean \"%s\"?", type,
                             near));
        else
            KEEP(jf_fail_key(c, "type", "unknown optimizer \"%s\"; use \"AdamW\" or \"Adam\"",
                             type));
    }
    KEEP(jf_get_obj(c, o, "params", &p));
    if (p && known) {
        jf_push(c, "params");
        KEEP(ds_check_block(c, p, "optimizer.params"));
        KEEP(jf_get_num(c, p, "lr", 0, 0, NUM_GE, &opt->lr));
        if (jf_auto_given(c, p, "lr")) jf_auto_note(c, "lr", JF_V_NUM, &opt->lr, NULL);
        KEEP(parse_betas(c, p, opt));
        KEEP(jf_get_num(c, p, "eps", 0, 0, NUM_GT, &opt->eps));
        KEEP(jf_get_num(c, p, "weight_decay", 0, 0, NUM_GE, &opt->weight_decay));
        if (jf_auto_given(c, p, "weight_decay"))
            jf_auto_note(c, "weight_decay", JF_V_NUM, &opt->weight_decay, NULL);
        KEEP(jf_get_bool(c, p, "adam_w_mode", &opt->adam_w_mode));
        double mgn = -1;
        KEEP(jf_get_num(c, p, "max_grad_norm", 0, 0, NUM_GE, &mgn));
        if (mgn >= 0) {
            if (!jf_member(ds, "gradient_clipping"))
                d->gradient_clipping = mgn;
            else if (d->gradient_clipping != mgn)
                KEEP(jf_fail_key(
                    c, "max_grad_norm",
                    "differs from the top-level gradient_clipping (%g against %g); keep gradient_clipping only",
                    mgn, d->gradient_clipping));
        }
        jf_pop(c);
    }
    /* DeepSpeed: decoupled decay when the type is adamw or adam_w_mode is set (default). */
    opt->type = named_adamw || opt->adam_w_mode ? ZT_OPTIM_ADAMW : ZT_OPTIM_ADAM;
    opt->adam_w_mode = opt->type == ZT_OPTIM_ADAMW;
    jf_pop(c);
    return st;
}

static bool sched_has(const sched_info *info, const char *param)
{
    for (size_t i = 0; i < NKEYS(info->params) && info->params[i]; i++)
        if (strcmp(info->params[i], param) == 0) return true;
    return false;
}

/* A schedule parameter given to the wrong schedule says which schedules take it. */
static const char *sched_key_hint(const char *key, const void *arg)
{
    (void)arg;
    if (strcmp(key, "warmup_min_lr") == 0 || strcmp(key, "warmup_max_lr") == 0)
        return "it is a parameter of WarmupLR and WarmupDecayLR, not of this schedule";
    if (strcmp(key, "total_num_steps") == 0)
        return "it is a parameter of WarmupDecayLR and WarmupCosineLR, not of this schedule";
    if (strcmp(key, "warmup_min_ratio") == 0 || strcmp(key, "cos_min_ratio") == 0)
        return "it is a parameter of WarmupCosineLR, not of this schedule";
    return NULL;
}

static zt_status parse_sched_params(pctx *c, json_t *p, const sched_info *info, zt_job *job)
{
    zt_sched_cfg *s = &job->ds.scheduler;
    const dsblock *all = ds_block("scheduler.params");
    keyspec ks[NKEYS(info->params)];
    size_t n = 0;
    for (size_t i = 0; i < all->n; i++)
        if (sched_has(info, all->keys[i].name)) ks[n++] = all->keys[i];
    zt_status st = ZT_OK;
    if (p) KEEP(jf_check_keys(c, p, ks, n, JF_STRICT, sched_key_hint, NULL));
    if (sched_has(info, "warmup_min_lr")) {
        KEEP(jf_get_num(c, p, "warmup_min_lr", 0, 0, NUM_GE, &s->warmup_min_lr));
        if (jf_auto_given(c, p, "warmup_min_lr"))
            jf_auto_note(c, "warmup_min_lr", JF_V_NUM, &s->warmup_min_lr,
                         "as Hugging Face fills it");
        KEEP(jf_get_num(c, p, "warmup_max_lr", 0, 0, NUM_GE, &s->warmup_max_lr));
        if (jf_auto_given(c, p, "warmup_max_lr")) {
            s->warmup_max_lr = job->ds.optimizer.lr;
            jf_auto_note(c, "warmup_max_lr", JF_V_NUM, &s->warmup_max_lr, "the optimizer's lr");
        }
    }
    KEEP(jf_get_i64(c, p, "warmup_num_steps", 0, INT64_MAX, &s->warmup_num_steps));
    if (jf_auto_given(c, p, "warmup_num_steps") ||
        (!jf_member(p, "warmup_num_steps") && job->train.warmup_steps >= 0)) {
        if (job->train.warmup_steps >= 0) s->warmup_num_steps = job->train.warmup_steps;
        jf_auto_note(c, "warmup_num_steps", JF_V_I64, &s->warmup_num_steps,
                     job->train.warmup_steps >= 0 ? "the job's train.warmup_steps"
                                                  : "DeepSpeed's default");
    }
    char wt[64];
    bool present;
    KEEP(jf_get_str(c, p, "warmup_type", wt, sizeof(wt), &present));
    if (present) {
        if (strcmp(wt, "log") == 0)
            s->warmup_type = ZT_WARMUP_LOG;
        else if (strcmp(wt, "linear") == 0)
            s->warmup_type = ZT_WARMUP_LINEAR;
        else
            KEEP(jf_fail_key(
                c, "warmup_type",
                "must be \"log\" or \"linear\" (got \"%s\"); DeepSpeed would fall back to \"log\" with a warning",
                wt));
    }
    if (sched_has(info, "total_num_steps")) {
        if (jf_auto_given(c, p, "total_num_steps") || !json_object_get(p, "total_num_steps")) {
            s->total_num_steps = job->train.steps;
            jf_auto_note(c, "total_num_steps", JF_V_I64, &s->total_num_steps,
                         "the job's train.steps");
        }
        KEEP(jf_get_i64(c, p, "total_num_steps", 1, INT64_MAX, &s->total_num_steps));
    }
    if (info->type == ZT_SCHED_WARMUP_COSINE_LR) {
        KEEP(jf_get_num(c, p, "warmup_min_ratio", 0, 1, NUM_RANGE, &s->warmup_min_ratio));
        KEEP(jf_get_num(c, p, "cos_min_ratio", 0, 1, NUM_RANGE, &s->cos_min_ratio));
        if (s->total_num_steps > 0 && s->total_num_steps <= s->warmup_num_steps)
            KEEP(jf_fail_key(
                c, "total_num_steps",
                "must be greater than warmup_num_steps (got %lld <= %lld%s); lower warmup_num_steps (or set the job's train.warmup_steps) or raise total_num_steps",
                (long long)s->total_num_steps, (long long)s->warmup_num_steps,
                jf_member(p, "warmup_num_steps") ? "" : ", the default"));
    }
    return st;
}

zt_status ds_parse_scheduler(pctx *c, json_t *ds, zt_job *job)
{
    zt_sched_cfg *s = &job->ds.scheduler;
    /* A static object has zeroed padding, so parsed jobs compare equal with memcmp. */
    static const zt_sched_cfg defaults = {.type = ZT_SCHED_NONE,
                                          .warmup_min_lr = 0,
                                          .warmup_max_lr = 0.001,
                                          .warmup_num_steps = 1000,
                                          .warmup_type = ZT_WARMUP_LOG,
                                          .total_num_steps = 0,
                                          .warmup_min_ratio = 0,
                                          .cos_min_ratio = 1e-4};
    memcpy(s, &defaults, sizeof(*s));
    json_t *o, *p;
    zt_status st = jf_get_obj(c, ds, "scheduler", &o);
    if (st != ZT_OK || !o) return st;
    jf_push(c, "scheduler");
    KEEP(ds_check_block(c, o, "scheduler"));
    KEEP(jf_require(c, o, "type", "\"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\""));
    char type[64];
    bool present = false;
    KEEP(jf_get_str(c, o, "type", type, sizeof(type), &present));
    const sched_info *info = NULL;
    for (size_t i = 0; present && i < NKEYS(sched_table) && !info; i++)
        if (strcmp(sched_table[i].name, type) == 0) info = &sched_table[i];
    if (present && !info) {
        const char *names[] = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
        const char *near = jf_closest(type, names, NKEYS(names));
        if (near)
            KEEP(jf_fail_key(c, "type", "unknown scheduler \"%s\"; did you mean \"%s\"?", type,
                             near));
        else if (jf_in_list_ci(type, unsupported_schedulers, NKEYS(unsupported_schedulers)))
            KEEP(jf_fail_key(
                c, "type",
                "\"%s\" is a schedule zerotrain does not offer; use \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"",
                type));
        else
            KEEP(jf_fail_key(
                c, "type",
                "unknown scheduler \"%s\"; use \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"",
                type));
    }
    if (info) {
        s->type = info->type;
        KEEP(jf_get_obj(c, o, "params", &p));
        jf_push(c, "params");
        KEEP(parse_sched_params(c, p, info, job));
        jf_pop(c);
    }
    jf_pop(c);
    return st;
}
