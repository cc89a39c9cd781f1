/* Tests engine/optim.c: lr schedules against DeepSpeed's formulas under zerotrain's t = k-1
 * contract (reference/deepspeed-semantics.md §1.3), and the dynamic loss scaler's state
 * machine (§1.4) including hysteresis, window growth and the floor. */
#include <math.h>

#include "engine/optim.h"
#include "tests/test.h"

static void test_warmup_lr(void)
{
    zt_sched_cfg s = {0};
    s.type = ZT_SCHED_WARMUP_LR;
    s.warmup_min_lr = 0.0;
    s.warmup_max_lr = 0.01;
    s.warmup_num_steps = 10;
    s.warmup_type = ZT_WARMUP_LOG;
    ASSERT_NEAR(zt_sched_lr(&s, 1.0, 0), 0.0, 0, 0); /* first step: log(1) = 0 */
    ASSERT_NEAR(zt_sched_lr(&s, 1.0, 4), 0.01 * log(5.0) / log(10.0), 1e-12, 0);
    ASSERT_NEAR(zt_sched_lr(&s, 1.0, 10), 0.01, 1e-12, 0);
    ASSERT_NEAR(zt_sched_lr(&s, 1.0, 1000), 0.01, 1e-12, 0);
    s.warmup_type = ZT_WARMUP_LINEAR;
    s.warmup_min_lr = 0.001;
    ASSERT_NEAR(zt_sched_lr(&s, 1.0, 0), 0.001, 1e-12, 0);
    ASSERT_NEAR(zt_sched_lr(&s, 1.0, 5), 0.001 + 0.009 * 0.5, 1e-12, 0);
    /* warmup_num_steps below 2 behaves as 2 (DeepSpeed's W = max(2, n)) */
    s.warmup_num_steps = 0;
    ASSERT_NEAR(zt_sched_lr(&s, 1.0, 1), 0.001 + 0.009 * 0.5, 1e-12, 0);
    ASSERT_NEAR(zt_sched_lr(&s, 1.0, 2), 0.01, 1e-12, 0);
    /* monotone non-decreasing */
    s.warmup_num_steps = 50;
    s.warmup_type = ZT_WARMUP_LOG;
    double prev = -1;
    for (int t = 0; t < 100; t++) {
        double lr = zt_sched_lr(&s, 1.0, t);
        ASSERT_TRUE(lr >= prev);
        prev = lr;
    }
}

static void test_warmup_decay(void)
{
    zt_sched_cfg s = {0};
    s.type = ZT_SCHED_WARMUP_DECAY_LR;
    s.warmup_min_lr = 0.0;
    s.warmup_max_lr = 0.1;
    s.warmup_num_steps = 10;
    s.total_num_steps = 110;
    s.warmup_type = ZT_WARMUP_LINEAR;
    ASSERT_NEAR(zt_sched_lr(&s, 1.0, 10), 0.1, 1e-12, 0);
    ASSERT_NEAR(zt_sched_lr(&s, 1.0, 60), 0.05, 1e-12, 0);
    ASSERT_NEAR(zt_sched_lr(&s, 1.0, 110), 0.0, 0, 1e-15);
    ASSERT_NEAR(zt_sched_lr(&s, 1.0, 500), 0.0, 0, 1e-15); /* stays at min past the end */
}

static void test_warmup_cosine(void)
{
    zt_sched_cfg s = {0};
    s.type = ZT_SCHED_WARMUP_COSINE_LR;
    s.warmup_num_steps = 10;
    s.total_num_steps = 100;
    s.warmup_min_ratio = 0.05;
    s.cos_min_ratio = 1e-4;
    s.warmup_type = ZT_WARMUP_LOG;
    double base = 3e-4;
    /* DeepSpeed's own unit test: r(0) = warmup_min_ratio, r(W-1) = 1, r(T-1) = cos_min_ratio */
    ASSERT_NEAR(zt_sched_lr(&s, base, 0) / base, 0.05, 0, 1e-7);
    ASSERT_NEAR(zt_sched_lr(&s, base, 9) / base, 0.05 + 0.95 * log(10.0) / log(10.0), 0, 1e-7);
    ASSERT_NEAR(zt_sched_lr(&s, base, 99) / base, 1e-4, 0, 1e-7);
    /* decreasing after warmup */
    double prev = 1e9;
    for (int t = 10; t < 100; t++) {
        double lr = zt_sched_lr(&s, base, t);
        ASSERT_TRUE(lr <= prev);
        prev = lr;
    }
    zt_sched_cfg none = {0};
    ASSERT_NEAR(zt_sched_lr(&none, base, 123), base, 0, 0);
}

static void test_scaler_dynamic(void)
{
    zt_fp16_cfg c = {0};
    c.enabled = true;
    c.loss_scale = 0;
    c.initial_scale_power = 4;
    c.loss_scale_window = 2;
    c.hysteresis = 1;
    c.min_loss_scale = 1;
    zt_loss_scaler ls;
    zt_loss_scaler_init(&ls, &c);
    ASSERT_TRUE(ls.dynamic);
    ASSERT_NEAR(ls.scale, 16, 0, 0);
    /* DeepSpeed's test: window 2, clean steps -> the scale doubles whenever iter % 2 == 1 */
    double expect[] = {16, 32, 32, 64, 64, 128};
    for (int i = 0; i < 6; i++) {
        ASSERT_OK(zt_loss_scaler_update(&ls, false));
        ASSERT_NEAR(ls.scale, expect[i], 0, 0);
    }
    /* all overflow: halves each step, floored at min; at the floor an overflow is fatal */
    zt_loss_scaler_init(&ls, &c);
    ASSERT_OK(zt_loss_scaler_update(&ls, true));
    ASSERT_NEAR(ls.scale, 8, 0, 0);
    ASSERT_OK(zt_loss_scaler_update(&ls, true));
    ASSERT_OK(zt_loss_scaler_update(&ls, true));
    ASSERT_OK(zt_loss_scaler_update(&ls, true));
    ASSERT_NEAR(ls.scale, 1, 0, 0);
    ASSERT_EQ_INT(zt_loss_scaler_update(&ls, true), ZT_ERR_NONFINITE);
    ASSERT_NEAR(ls.scale, 1, 0, 0);
}

static void test_scaler_hysteresis(void)
{
    zt_fp16_cfg c = {0};
    c.enabled = true;
    c.initial_scale_power = 16;
    c.loss_scale_window = 1000;
    c.hysteresis = 2;
    c.min_loss_scale = 1;
    zt_loss_scaler ls;
    zt_loss_scaler_init(&ls, &c);
    ASSERT_NEAR(ls.scale, 65536, 0, 0);
    /* first overflow spends the hysteresis: the scale stays */
    ASSERT_OK(zt_loss_scaler_update(&ls, true));
    ASSERT_NEAR(ls.scale, 65536, 0, 0);
    ASSERT_EQ_INT(ls.hysteresis_left, 1);
    /* the second halves it */
    ASSERT_OK(zt_loss_scaler_update(&ls, true));
    ASSERT_NEAR(ls.scale, 32768, 0, 0);
    /* growth comes `window` clean steps after the last overflow, refilling the hysteresis */
    for (int i = 0; i < 999; i++)
        ASSERT_OK(zt_loss_scaler_update(&ls, false));
    ASSERT_NEAR(ls.scale, 32768, 0, 0);
    ASSERT_OK(zt_loss_scaler_update(&ls, false));
    ASSERT_NEAR(ls.scale, 65536, 0, 0);
    ASSERT_EQ_INT(ls.hysteresis_left, 2);
    /* consecutive_hysteresis refills on every clean step */
    c.consecutive_hysteresis = true;
    zt_loss_scaler_init(&ls, &c);
    ASSERT_OK(zt_loss_scaler_update(&ls, true));
    ASSERT_EQ_INT(ls.hysteresis_left, 1);
    ASSERT_OK(zt_loss_scaler_update(&ls, false));
    ASSERT_EQ_INT(ls.hysteresis_left, 2);
}

static void test_scaler_static_and_off(void)
{
    zt_fp16_cfg c = {0};
    zt_loss_scaler ls;
    zt_loss_scaler_init(&ls, &c); /* fp16 off: scale 1, never changes */
    ASSERT_TRUE(!ls.dynamic);
    ASSERT_OK(zt_loss_scaler_update(&ls, true));
    ASSERT_NEAR(ls.scale, 1, 0, 0);
    c.enabled = true;
    c.loss_scale = 128;
    zt_loss_scaler_init(&ls, &c); /* static: overflow skips, the scale stays */
    ASSERT_OK(zt_loss_scaler_update(&ls, true));
    ASSERT_NEAR(ls.scale, 128, 0, 0);
}

int main(void)
{
    test_warmup_lr();
    test_warmup_decay();
    test_warmup_cosine();
    test_scaler_dynamic();
    test_scaler_hysteresis();
    test_scaler_static_and_off();
    return 0;
}
