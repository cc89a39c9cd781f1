/* zerotrain: learning-rate schedules and the fp16 dynamic loss scaler, as DeepSpeed defines
 * them (reference/deepspeed-semantics.md §1.3-1.4) with zerotrain's documented differences:
 * optimizer step k (1-based, counting applied steps) uses lr(t = k-1), and the loss scaler
 * applies the documented defaults and unscales with the scale the backward pass used. */
#ifndef ZT_ENGINE_OPTIM_H
#define ZT_ENGINE_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/jobfile.h"

/* Learning rate at schedule time t >= 0 (t = applied optimizer steps before this one).
 * base_lr is the optimizer's lr (the peak for WarmupCosineLR; unused by WarmupLR and
 * WarmupDecayLR, whose values come from warmup_min_lr/warmup_max_lr). */
double zt_sched_lr(const zt_sched_cfg *s, double base_lr, int64_t t);

typedef struct zt_loss_scaler {
    bool dynamic;
    double scale;
    int64_t iter;          /* optimizer steps seen (skipped ones too) */
    int64_t last_overflow; /* iter of the last overflow, -1 = none */
    int hysteresis_left;   /* DeepSpeed's delayed shift */
    /* configuration */
    int window, hysteresis;
    bool consecutive_hysteresis;
    double min_scale;
} zt_loss_scaler;

/* Sets up the scaler from the fp16 config; a disabled fp16 block gives a fixed scale of 1. */
void zt_loss_scaler_init(zt_loss_scaler *ls, const zt_fp16_cfg *cfg);
/* Records one optimizer step's outcome. On overflow the scale halves (after the hysteresis
 * allows it); after `window` clean steps it doubles. Returns ZT_ERR_NONFINITE when an
 * overflow happens with the scale already at its minimum (DeepSpeed stops the run there). */
zt_status zt_loss_scaler_update(zt_loss_scaler *ls, bool overflow);

#endif
