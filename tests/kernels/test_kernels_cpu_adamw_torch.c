/* zerotrain tests: the CPU AdamW op against the real torch.optim.AdamW (and torch.optim.Adam
 * with L2 weight decay) run by tests/kernels/adamw_torch.py on the same inputs, step by step,
 * counting units in the last place. Skips (77) when /usr/bin/python3 has no torch. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "kernels/cpu/vmath.h"
#include "kernels/ops.h"
#include "tests/kernels/kcheck.h"

#define N 1003 /* not a multiple of any vector width: torch's scalar tail runs too */
#define STEPS 10

typedef struct {
    const char *name;
    const char *mode; /* adamw | l2 */
    float lr, b1, b2, eps, wd;
    int max_ulp;     /* largest difference allowed, in float ulps, ... */
    double abs_tol;  /* ... unless within this absolute difference */
    double min_same; /* fraction of bit-identical parameters required after every step */
} torch_case;

/* Runs the script; fills want[STEPS][N] with float bit patterns. Returns 77 when torch is
 * missing, 0 on success; fails the test on any other problem. The child has exited on return. */
static int run_torch(const torch_case *c, uint32_t (*want)[N])
{
    const char *src = getenv("ZT_SOURCE_DIR");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/tests/kernels/adamw_torch.py %d %d %s %.9g %.9g %.9g %.9g %.9g",
             src ? src : ".", N, STEPS, c->mode, (double)c->lr, (double)c->b1, (double)c->b2,
             (double)c->eps, (double)c->wd);
    FILE *f = popen(cmd, "r");
    if (!f) ZT_FAIL("cannot run %s", cmd);
    int ok = 1;
    for (int t = 0; t < STEPS && ok; t++)
        for (int i = 0; i < N && ok; i++) {
            unsigned int u;
            if (fscanf(f, "%8x", &u) != 1)
                ok = 0;
            else
                want[t][i] = u;
        }
    int st = pclose(f);
    if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 77) return 77;
    if (!ok || st != 0) ZT_FAIL("%s: exit status %d, output incomplete or unreadable", cmd, st);
    return 0;
}

static int64_t ulp_diff(uint32_t a, uint32_t b)
{
    /* map to a monotonic integer line (sign-magnitude to two's complement) */
    int64_t x = (a & 0x80000000u) ? -(int64_t)(a & 0x7fffffffu) : (int64_t)a;
    int64_t y = (b & 0x80000000u) ? -(int64_t)(b & 0x7fffffffu) : (int64_t)b;
    return x > y ? x - y : y - x;
}

static int run_case(const zt_ops *ops, zt_kctx *ctx, const torch_case *c)
{
    static uint32_t want[STEPS][N];
    int rc = run_torch(c, want);
    if (rc) return rc;
    float *p = kc_falloc(N), *m = kc_falloc(N), *v = kc_falloc(N), *g = kc_falloc(N);
    memset(m, 0, N * sizeof(float));
    memset(v, 0, N * sizeof(float));
    for (int i = 0; i < N; i++)
        p[i] = (float)(sin(i * 0.37) * 0.5);
    for (int t = 1; t <= STEPS; t++) {
        for (int i = 0; i < N; i++)
            g[i] = (float)(cos(i * 0.11 + t) * 0.01 * (1 + i % 3));
        zt_adamw_args a = {.lr = c->lr,
                           .beta1 = c->b1,
                           .beta2 = c->b2,
                           .eps = c->eps,
                           .weight_decay = c->wd,
                           .bc1 = (float)(1.0 - pow((double)c->b1, t)),
                           .bc2 = (float)(1.0 - pow((double)c->b2, t)),
                           .grad_scale = 1.0f,
                           .l2_mode = strcmp(c->mode, "l2") == 0};
        ops->adamw(ctx, p, g, ZT_F32, m, v, N, &a, NULL, ZT_F32);
        int64_t worst = 0;
        int same = 0, at = 0;
        for (int i = 0; i < N; i++) {
            int64_t d = ulp_diff(zt_v_bits(p[i]), want[t - 1][i]);
            same += d == 0;
            if (fabs((double)p[i] - (double)zt_v_float(want[t - 1][i])) <= c->abs_tol) continue;
            if (d > worst) worst = d, at = i;
        }
        if (t == STEPS || worst > c->max_ulp || same < c->min_same * N)
            printf(
                "%s, step %d: %d of %d bit-identical to torch, worst %lld ulp (param %d: %a vs %a)\n",
                c->name, t, same, N, (long long)worst, at, (double)p[at],
                (double)zt_v_float(want[t - 1][at]));
        if (worst > c->max_ulp)
            ZT_FAIL("%s: step %d differs from torch by %lld ulp at param %d (allowed %d)", c->name,
                    t, (long long)worst, at, c->max_ulp);
        if (same < c->min_same * N)
            ZT_FAIL("%s: step %d: only %d of %d params bit-identical to torch (want %.0f%%)",
                    c->name, t, same, N, 100.0 * c->min_same);
    }
    zt_free(p), zt_free(m), zt_free(v), zt_free(g);
    return 0;
}

int main(void)
{
    static const torch_case cases[] = {
        /* hyperparameters exact in float (torch keeps them in double): bit for bit */
        {"AdamW, exact hyperparameters", "adamw", 0.00390625f, 0.875f, 0.75f, 9.5367431640625e-07f,
         0.5f, 0, 0.0, 1.0},
        /* the usual ones: the op takes them as float, torch as double */
        {"AdamW, lr 1e-3 betas (0.9, 0.999) eps 1e-8 wd 0.1", "adamw", 1e-3f, 0.9f, 0.999f, 1e-8f,
         0.1f, 4, 1e-6 * 1e-3, 0.5},
        /* l2_mode is torch.optim.Adam with weight_decay (DeepSpeed's adam_w_mode=false) */
        {"Adam L2, exact hyperparameters", "l2", 0.00390625f, 0.875f, 0.75f, 9.5367431640625e-07f,
         0.5f, 0, 0.0, 1.0},
    };
    const zt_ops *ops = zt_ops_cpu();
    zt_kctx *ctx;
    zt_err err;
    ASSERT_OK(ops->ctx_create(&ctx, 0, &err));
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        if (run_case(ops, ctx, &cases[k]) == 77) {
            printf("skipped: /usr/bin/python3 has no torch\n");
            ops->ctx_destroy(ctx);
            return ZT_TEST_SKIP;
        }
    }
    ops->ctx_destroy(ctx);
    printf("ok\n");
    return 0;
}
