/* zerotrain: lr schedules and the loss scaler (see optim.h). */
#include "optim.h"

#include <math.h>

static double warmup_gamma(zt_warmup_type type, int64_t t, int64_t W)
{
    if (type == ZT_WARMUP_LINEAR)
        return (double)t / (double)W;
    return log((double)t + 1.0) / log((double)W);
}

double zt_sched_lr(const zt_sched_cfg *s, double base_lr, int64_t t)
{
    if (t < 0)
        t = 0;
    int64_t W = s->warmup_num_steps < 2 ? 2 : s->warmup_num_steps;
    switch (s->type) {
    case ZT_SCHED_NONE:
        return base_lr;
    case ZT_SCHED_WARMUP_LR: {
        double g = t < W ? warmup_gamma(s->warmup_type, t, W) : 1.0;
        return s->warmup_min_lr + (s->warmup_max_lr - s->warmup_min_lr) * g;
    }
    case ZT_SCHED_WARMUP_DECAY_LR: {
        double g;
        if (t < W) {
            g = warmup_gamma(s->warmup_type, t, W);
        } else {
            int64_t span = s->total_num_steps - W;
            if (span < 1)
                span = 1;
            g = (double)(s->total_num_steps - t) / (double)span;
            if (g < 0.0)
                g = 0.0;
        }
        return s->warmup_min_lr + (s->warmup_max_lr - s->warmup_min_lr) * g;
    }
    case ZT_SCHED_WARMUP_COSINE_LR: {
        double r;
        if (t < W) {
            r = s->warmup_min_ratio + (1.0 - s->warmup_min_ratio) * warmup_gamma(s->warmup_type, t, W);
        } else {
            double span = (double)(s->total_num_steps - W);
            if (span <= 0.0)
                span = 1.0;
            double c = (1.0 + cos(3.14159265358979323846 * (double)(t - W + 1) / span)) / 2.0;
            r = s->cos_min_ratio + (1.0 - s->cos_min_ratio) * c;
            if (r < 0.0)
                r = 0.0;
        }
        return base_lr * r;
    }
    }
    return base_lr;
}

void zt_loss_scaler_init(zt_loss_scaler *ls, const zt_fp16_cfg *cfg)
{
    ls->iter = 0;
    ls->last_overflow = -1;
    if (!cfg || !cfg->enabled) {
        ls->dynamic = false;
        ls->scale = 1.0;
        ls->window = 1000;
        ls->hysteresis = ls->hysteresis_left = 1;
        ls->consecutive_hysteresis = false;
        ls->min_scale = 1.0;
        return;
    }
    ls->dynamic = cfg->loss_scale <= 0.0;
    ls->scale = ls->dynamic ? ldexp(1.0, cfg->initial_scale_power) : cfg->loss_scale;
    ls->window = cfg->loss_scale_window > 0 ? cfg->loss_scale_window : 1000;
    ls->hysteresis = cfg->hysteresis > 0 ? cfg->hysteresis : 1;
    ls->hysteresis_left = ls->hysteresis;
    ls->consecutive_hysteresis = cfg->consecutive_hysteresis;
    ls->min_scale = cfg->min_loss_scale > 0 ? cfg->min_loss_scale : 1.0;
}

zt_status zt_loss_scaler_update(zt_loss_scaler *ls, bool overflow)
{
    zt_status st = ZT_OK;
    if (ls->dynamic) {
        if (overflow) {
            if (ls->hysteresis == 1 || ls->hysteresis_left == 1) {
                if (ls->scale <= ls->min_scale)
                    st = ZT_ERR_NONFINITE;
                ls->scale = ls->scale / 2.0 < ls->min_scale ? ls->min_scale : ls->scale / 2.0;
            } else {
                ls->hysteresis_left--;
            }
            ls->last_overflow = ls->iter;
        } else {
            if (ls->consecutive_hysteresis)
                ls->hysteresis_left = ls->hysteresis;
            if ((ls->iter - ls->last_overflow) % ls->window == 0) {
                if (!ls->consecutive_hysteresis)
                    ls->hysteresis_left = ls->hysteresis;
                ls->scale *= 2.0;
            }
        }
    }
    ls->iter++;
    return st;
}
