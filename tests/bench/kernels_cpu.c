/* zerotrain bench: speed of the CPU op table (kernels/cpu) at the reference training config
 * (GPT-2, n_layer 4, n_embd 256, n_head 4, block 256, batch 8, vocab 256 padded 256), on 1 and
 * 2 OpenMP threads: a large dnnl_sgemm as the peak, every op alone (GFLOP/s or GB/s), the
 * attention variants, and a whole training step (forward, backward, AdamW) with its breakdown.
 * Options: --quick (fewer repetitions), --threads N (only N threads). */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/timeutil.h"
#include "kernels/cpu/cpu_int.h"
#include "kernels/ops.h"
#include "tests/bench/bench_shapes.h"

/* the reference config */
enum { L = 4, C = 256, NH = 4, T = 256, B = 8, V = 256, VP = 256 };
#define N ((size_t)B * T)

static const zt_ops *OPS;
static zt_kctx *CTX;
static double MIN_TIME = 0.3; /* seconds of repetitions per measurement */

static float *falloc(size_t n)
{
    float *p = zt_aligned_alloc(256, n * sizeof(float));
    if (!p) {
        fprintf(stderr, "bench_kernels_cpu: out of memory allocating %zu floats\n", n);
        exit(1);
    }
    return p;
}

static float *frand(size_t n, float scale)
{
    float *p = falloc(n);
    uint64_t s = 0x12345678u + n;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = scale * ((float)(s >> 40) / (float)(1u << 24) - 0.5f) * 3.4f;
    }
    return p;
}

/* Runs `stmt` once to warm up, then repeatedly for at least MIN_TIME seconds (and 3 times);
 * leaves the fastest run's seconds in `out`: on a shared machine the minimum is the figure
 * least disturbed by other processes. */
#define TIME_IT(out, stmt)                                                                         \
    do {                                                                                           \
        stmt;                                                                                      \
        int reps_ = 0;                                                                             \
        double start_ = zt_now_s(), best_ = 1e30, t0_, dt_;                                        \
        do {                                                                                       \
            t0_ = zt_now_s();                                                                      \
            stmt;                                                                                  \
            dt_ = zt_now_s() - t0_;                                                                \
            best_ = dt_ < best_ ? dt_ : best_;                                                     \
            reps_++;                                                                               \
        } while (zt_now_s() - start_ < MIN_TIME || reps_ < 3);                                     \
        (out) = best_;                                                                             \
    } while (0)

static void report(const char *what, double sec, double flops, double bytes)
{
    if (flops > 0)
        printf("  %-34s %9.3f ms %9.1f GFLOP/s\n", what, sec * 1e3, flops / sec * 1e-9);
    else
        printf("  %-34s %9.3f ms %9.1f GB/s\n", what, sec * 1e3, bytes / sec * 1e-9);
}

/* ---------------------------------------------------------------------------------------- */

static double bench_peak(void)
{
    const size_t n = 2048;
    float *a = frand(n * n, 1.0f), *b = frand(n * n, 1.0f), *c = falloc(n * n);
    double sec;
    double saved = MIN_TIME;
    MIN_TIME = MIN_TIME > 0.5 ? MIN_TIME : 0.5;
    TIME_IT(sec, dnnl_sgemm('N', 'N', (dnnl_dim_t)n, (dnnl_dim_t)n, (dnnl_dim_t)n, 1.0f, a,
                            (dnnl_dim_t)n, b, (dnnl_dim_t)n, 0.0f, c, (dnnl_dim_t)n));
    MIN_TIME = saved;
    double gf = 2.0 * n * n * n / sec * 1e-9;
    printf("  %-34s %9.3f ms %9.1f GFLOP/s  (peak)\n", "dnnl_sgemm 2048^3", sec * 1e3, gf);
    zt_free(a), zt_free(b), zt_free(c);
    return gf;
}

static void bench_ops(void)
{
    double s;
    size_t NC = N * C;
    float *x = frand(NC * 4, 1.0f), *y = falloc(NC * 4), *z = frand(NC * 4, 1.0f);
    float *dx = frand(NC * 4, 1.0f);
    float *w = frand((size_t)4 * C * C, 0.05f), *bias = frand(4 * C, 0.1f);
    float *dw = falloc((size_t)4 * C * C), *db = falloc(4 * C);
    float *mean = falloc(N), *rstd = falloc(N);
    memset(dw, 0, (size_t)4 * C * C * sizeof(float));
    memset(db, 0, 4 * C * sizeof(float));
    int32_t *tok = zt_calloc(N, sizeof(int32_t));
    for (size_t i = 0; i < N; i++)
        tok[i] = (int32_t)((i * 7919) % V);

    float *wte = frand((size_t)VP * C, 0.02f), *wpe = frand((size_t)T * C, 0.02f);
    TIME_IT(s, OPS->encoder_forward(CTX, y, tok, wte, wpe, B, T, C));
    report("encoder_forward", s, 0, 3.0 * NC * 4);
    TIME_IT(s, OPS->encoder_backward(CTX, dw, dx, x, tok, B, T, C));
    report("encoder_backward", s, 0, 4.0 * NC * 4);

    TIME_IT(s, OPS->layernorm_forward(CTX, y, mean, rstd, x, w, bias, (int)N, C));
    report("layernorm_forward", s, 0, 2.0 * NC * 4);
    TIME_IT(s, OPS->layernorm_backward(CTX, dx, dw, db, z, x, w, mean, rstd, (int)N, C));
    report("layernorm_backward", s, 0, 4.0 * NC * 4);

    static const zt_bench_matmul mm[] = ZT_BENCH_GPT2_MATMULS(C, VP);
    for (size_t k = 0; k < sizeof(mm) / sizeof(mm[0]); k++) {
        char what[80];
        const float *bb = k == 4 ? NULL : bias;
        double fl = 2.0 * N * mm[k].in * mm[k].out;
        TIME_IT(s, OPS->matmul_forward(CTX, y, x, w, bb, (int)N, mm[k].in, mm[k].out));
        snprintf(what, sizeof what, "matmul_forward %s", mm[k].name);
        report(what, s, fl, 0);
        TIME_IT(s, OPS->matmul_backward(CTX, dx, dw, k == 4 ? NULL : db, z, x, w, (int)N, mm[k].in,
                                        mm[k].out));
        snprintf(what, sizeof what, "matmul_backward %s", mm[k].name);
        report(what, s, 2 * fl, 0);
    }

    /* attention: FLOPs of the causal half that is needed (QK^T and PV: 2 * B*NH*T*T*hs each
     * for the full square; backward twice that, not counting its recomputed QK^T) */
    size_t nlse = (size_t)B * NH * T, nscr = zt_attention_scratch_floats(B, T, NH);
    float *lse = falloc(nlse), *scr = falloc(nscr), *qkv = frand(3 * NC, 1.0f);
    float *dqkv = falloc(3 * NC);
    memset(dqkv, 0, 3 * NC * sizeof(float));
    double att_fl = 4.0 * B * NH * (double)T * T * (C / NH) * 0.5;
    TIME_IT(s, OPS->attention_forward(CTX, y, lse, scr, qkv, NULL, B, T, C, NH));
    report("attention_forward (causal flops)", s, att_fl, 0);
    TIME_IT(s, OPS->attention_backward(CTX, dqkv, scr, z, qkv, y, lse, NULL, B, T, C, NH));
    report("attention_backward (causal flops)", s, 2 * att_fl, 0);

    TIME_IT(s, OPS->gelu_forward(CTX, y, x, 4 * NC));
    report("gelu_forward (N x 4C)", s, 0, 2.0 * 4 * NC * 4);
    TIME_IT(s, OPS->gelu_backward(CTX, dx, x, z, 4 * NC));
    report("gelu_backward (N x 4C)", s, 0, 4.0 * 4 * NC * 4);
    TIME_IT(s, OPS->residual_forward(CTX, y, x, z, NC));
    report("residual_forward", s, 0, 3.0 * NC * 4);
    TIME_IT(s, OPS->residual_backward(CTX, dx, y, z, NC));
    report("residual_backward", s, 0, 5.0 * NC * 4);

    float *losses = falloc(N);
    TIME_IT(s, OPS->crossentropy_forward_backward(CTX, losses, y, x, tok, (int)N, V, VP,
                                                  1.0f / (float)N));
    report("crossentropy_forward_backward", s, 0, 2.0 * N * VP * 4);

    /* optimizer and precision ops over the model's parameter count */
    size_t P = (size_t)VP * C + (size_t)T * C + (size_t)L * (12 * C * C + 13 * C) + 2 * C;
    float *p = frand(P, 0.02f), *g = frand(P, 0.01f), *m = falloc(P), *v = falloc(P);
    void *lp = falloc(P);
    memset(m, 0, P * sizeof(float));
    memset(v, 0, P * sizeof(float));
    zt_adamw_args a = {.lr = 1e-4f,
                       .beta1 = 0.9f,
                       .beta2 = 0.999f,
                       .eps = 1e-8f,
                       .weight_decay = 0.1f,
                       .bc1 = 0.1f,
                       .bc2 = 0.001f,
                       .grad_scale = 1.0f};
    TIME_IT(s, OPS->adamw(CTX, p, g, ZT_F32, m, v, P, &a, NULL, ZT_F32));
    report("adamw fp32 (all params)", s, 0, 7.0 * P * 4);
    TIME_IT(s, OPS->adamw(CTX, p, lp, ZT_BF16, m, v, P, &a, lp, ZT_BF16));
    report("adamw bf16 grad + bf16 copy", s, 0, (6.0 * 4 + 4) * P);
    TIME_IT(s, OPS->cast(CTX, lp, ZT_BF16, p, ZT_F32, P));
    report("cast fp32 -> bf16", s, 0, 6.0 * P);
    TIME_IT(s, OPS->cast(CTX, lp, ZT_F16, p, ZT_F32, P));
    report("cast fp32 -> fp16", s, 0, 6.0 * P);
    TIME_IT(s, OPS->accumulate(CTX, g, ZT_F32, p, 0.5f, P));
    report("accumulate fp32", s, 0, 12.0 * P);
    TIME_IT(s, OPS->accumulate(CTX, lp, ZT_BF16, p, 0.5f, P));
    report("accumulate bf16", s, 0, 8.0 * P);
    double out[2] = {0, 0};
    TIME_IT(s, OPS->sumsq_nonfinite(CTX, g, ZT_F32, P, out));
    report("sumsq_nonfinite fp32", s, 0, 4.0 * P);
    TIME_IT(s, OPS->scale(CTX, g, 0.999f, P));
    report("scale", s, 0, 8.0 * P);
    TIME_IT(s, OPS->memset0(CTX, g, P * sizeof(float)));
    report("memset0", s, 0, 4.0 * P);

    zt_free(x), zt_free(y), zt_free(z), zt_free(dx), zt_free(w), zt_free(bias), zt_free(dw);
    zt_free(db), zt_free(mean), zt_free(rstd), zt_free(tok), zt_free(wte), zt_free(wpe);
    zt_free(lse), zt_free(scr), zt_free(qkv), zt_free(dqkv), zt_free(losses), zt_free(p);
    zt_free(g), zt_free(m), zt_free(v), zt_free(lp);
}

static void bench_attention_variants(void)
{
    size_t NC = N * C, nlse = (size_t)B * NH * T, nscr = zt_attention_scratch_floats(B, T, NH);
    float *lse = falloc(nlse), *scr = falloc(nscr), *qkv = frand(3 * NC, 1.0f);
    float *out = falloc(NC), *dout = frand(NC, 1.0f), *dqkv = falloc(3 * NC);
    memset(dqkv, 0, 3 * NC * sizeof(float));
    double fl = 3 * 4.0 * B * NH * (double)T * T * (C / NH) * 0.5;
    zt_cpu_attn_mode saved_mode = CTX->attn_mode;
    int saved_block = CTX->attn_block;
    static const int blocks[] = {32, 64, 128, 256};
    for (int mode = 0; mode < (CTX->nthreads > 1 ? 2 : 1); mode++)
        for (size_t k = 0; k < sizeof(blocks) / sizeof(blocks[0]); k++) {
            CTX->attn_mode = mode ? ZT_CPU_ATTN_INNER : ZT_CPU_ATTN_OUTER;
            CTX->attn_block = blocks[k];
            double s;
            TIME_IT(s, {
                OPS->attention_forward(CTX, out, lse, scr, qkv, NULL, B, T, C, NH);
                OPS->attention_backward(CTX, dqkv, scr, dout, qkv, out, lse, NULL, B, T, C, NH);
            });
            char what[80];
            snprintf(what, sizeof what, "attn fwd+bwd %s block %d", mode ? "inner" : "outer",
                     blocks[k]);
            report(what, s, fl, 0);
        }
    CTX->attn_mode = saved_mode;
    CTX->attn_block = saved_block;
    zt_free(lse), zt_free(scr), zt_free(qkv), zt_free(out), zt_free(dout), zt_free(dqkv);
}

/* ---------------------------------------------------------------------------------------- */
/* a whole training step, llm.c's order (train_gpt2.c), fp32 */

enum { K_ENC, K_LN, K_MM, K_ATT, K_GELU, K_RES, K_CE, K_OPT, K_ZERO, K_COUNT };
static const char *KNAMES[K_COUNT] = {"encoder",  "layernorm",    "matmul", "attention", "gelu",
                                      "residual", "crossentropy", "adamw",  "zero grads"};
static double KT[K_COUNT];

#define TIMED(k, stmt)                                                                             \
    do {                                                                                           \
        double t0_ = zt_now_s();                                                                   \
        stmt;                                                                                      \
        KT[k] += zt_now_s() - t0_;                                                                 \
    } while (0)

typedef struct {
    float *ln1, *ln1m, *ln1r, *qkv, *atty, *lse, *attproj, *res2, *ln2, *ln2m, *ln2r, *fch, *fchg,
        *fcproj, *res3;
} layer_acts;

static float *sub(float **p, size_t n)
{
    float *r = *p;
    *p += n;
    return r;
}

static void bench_step(double peak_gf, int steps)
{
    size_t NC = N * C, NL = (size_t)B * NH * T, NS = zt_attention_scratch_floats(B, T, NH);
    /* parameters, llm.c order, and their gradients */
    size_t sizes[16] = {(size_t)VP * C,
                        (size_t)T * C,
                        (size_t)L * C,
                        (size_t)L * C,
                        (size_t)L * 3 * C * C,
                        (size_t)L * 3 * C,
                        (size_t)L * C * C,
                        (size_t)L * C,
                        (size_t)L * C,
                        (size_t)L * C,
                        (size_t)L * 4 * C * C,
                        (size_t)L * 4 * C,
                        (size_t)L * C * 4 * C,
                        (size_t)L * C,
                        C,
                        C};
    size_t P = 0;
    for (int i = 0; i < 16; i++)
        P += sizes[i];
    float *params = frand(P, 0.02f), *grads = falloc(P), *m = falloc(P), *v = falloc(P);
    memset(m, 0, P * sizeof(float));
    memset(v, 0, P * sizeof(float));
    float *pp[16], *gp[16];
    for (int i = 0, off = 0; i < 16; off += (int)sizes[i], i++) {
        pp[i] = params + off;
        gp[i] = grads + off;
    }
    for (int l = 0; l < L; l++) /* LayerNorm weights 1 */
        for (int c = 0; c < C; c++)
            pp[2][l * C + c] = pp[8][l * C + c] = 1.0f;
    for (int c = 0; c < C; c++)
        pp[14][c] = 1.0f;

    /* activations and their gradients */
    size_t per_layer = 18 * NC + 4 * N + NL;
    size_t nacts = NC + (size_t)L * per_layer + NC + 3 * N + N * VP;
    float *acts = falloc(nacts), *dacts = falloc(nacts), *scratch = falloc(NS);
    memset(acts, 0, nacts * sizeof(float));
    float *ap = acts;
    float *encoded = sub(&ap, NC);
    layer_acts la[L];
    for (int l = 0; l < L; l++) {
        la[l].ln1 = sub(&ap, NC), la[l].ln1m = sub(&ap, N), la[l].ln1r = sub(&ap, N);
        la[l].qkv = sub(&ap, 3 * NC), la[l].atty = sub(&ap, NC), la[l].lse = sub(&ap, NL);
        la[l].attproj = sub(&ap, NC), la[l].res2 = sub(&ap, NC), la[l].ln2 = sub(&ap, NC);
        la[l].ln2m = sub(&ap, N), la[l].ln2r = sub(&ap, N), la[l].fch = sub(&ap, 4 * NC);
        la[l].fchg = sub(&ap, 4 * NC), la[l].fcproj = sub(&ap, NC), la[l].res3 = sub(&ap, NC);
    }
    float *lnf = sub(&ap, NC), *lnfm = sub(&ap, N), *lnfr = sub(&ap, N);
    float *logits = sub(&ap, N * VP), *losses = sub(&ap, N);
    /* the same layout for activation gradients (only some are used) */
    ptrdiff_t dd = dacts - acts;
#define D(p) ((p) + dd)
    int32_t *inp = zt_calloc(N, sizeof(int32_t)), *tgt = zt_calloc(N, sizeof(int32_t));
    for (size_t i = 0; i < N; i++) {
        inp[i] = (int32_t)((i * 7919 + 13) % V);
        tgt[i] = (int32_t)((i * 104729 + 7) % V);
    }
    zt_adamw_args aw = {.lr = 1e-4f,
                        .beta1 = 0.9f,
                        .beta2 = 0.999f,
                        .eps = 1e-8f,
                        .weight_decay = 0.0f,
                        .grad_scale = 1.0f};

    double total = 0.0, best = 1e30, loss0 = 0.0, loss_last = 0.0;
    double best_kt[K_COUNT] = {0};
    for (int step = -1; step < steps; step++) { /* step -1 warms up, untimed */
        memset(KT, 0, sizeof KT);
        double t0 = zt_now_s();
        /* forward */
        TIMED(K_ENC, OPS->encoder_forward(CTX, encoded, inp, pp[0], pp[1], B, T, C));
        for (int l = 0; l < L; l++) {
            layer_acts *a = &la[l];
            float *res = l == 0 ? encoded : la[l - 1].res3;
            TIMED(K_LN, OPS->layernorm_forward(CTX, a->ln1, a->ln1m, a->ln1r, res, pp[2] + l * C,
                                               pp[3] + l * C, (int)N, C));
            TIMED(K_MM, OPS->matmul_forward(CTX, a->qkv, a->ln1, pp[4] + (size_t)l * 3 * C * C,
                                            pp[5] + l * 3 * C, (int)N, C, 3 * C));
            TIMED(K_ATT,
                  OPS->attention_forward(CTX, a->atty, a->lse, scratch, a->qkv, NULL, B, T, C, NH));
            TIMED(K_MM, OPS->matmul_forward(CTX, a->attproj, a->atty, pp[6] + (size_t)l * C * C,
                                            pp[7] + l * C, (int)N, C, C));
            TIMED(K_RES, OPS->residual_forward(CTX, a->res2, res, a->attproj, NC));
            TIMED(K_LN, OPS->layernorm_forward(CTX, a->ln2, a->ln2m, a->ln2r, a->res2,
                                               pp[8] + l * C, pp[9] + l * C, (int)N, C));
            TIMED(K_MM, OPS->matmul_forward(CTX, a->fch, a->ln2, pp[10] + (size_t)l * 4 * C * C,
                                            pp[11] + l * 4 * C, (int)N, C, 4 * C));
            TIMED(K_GELU, OPS->gelu_forward(CTX, a->fchg, a->fch, 4 * NC));
            TIMED(K_MM, OPS->matmul_forward(CTX, a->fcproj, a->fchg, pp[12] + (size_t)l * 4 * C * C,
                                            pp[13] + l * C, (int)N, 4 * C, C));
            TIMED(K_RES, OPS->residual_forward(CTX, a->res3, a->res2, a->fcproj, NC));
        }
        TIMED(K_LN, OPS->layernorm_forward(CTX, lnf, lnfm, lnfr, la[L - 1].res3, pp[14], pp[15],
                                           (int)N, C));
        TIMED(K_MM, OPS->matmul_forward(CTX, logits, lnf, pp[0], NULL, (int)N, C, VP));
        /* gradients start at zero; dlogits overwrite the logits in place */
        TIMED(K_ZERO, OPS->memset0(CTX, grads, P * sizeof(float)));
        TIMED(K_ZERO, OPS->memset0(CTX, dacts, nacts * sizeof(float)));
        TIMED(K_CE, OPS->crossentropy_forward_backward(CTX, losses, logits, logits, tgt, (int)N, V,
                                                       VP, 1.0f / (float)N));
        /* backward */
        TIMED(K_MM,
              OPS->matmul_backward(CTX, D(lnf), gp[0], NULL, logits, lnf, pp[0], (int)N, C, VP));
        TIMED(K_LN, OPS->layernorm_backward(CTX, D(la[L - 1].res3), gp[14], gp[15], D(lnf),
                                            la[L - 1].res3, pp[14], lnfm, lnfr, (int)N, C));
        for (int l = L - 1; l >= 0; l--) {
            layer_acts *a = &la[l];
            float *res = l == 0 ? encoded : la[l - 1].res3;
            TIMED(K_RES, OPS->residual_backward(CTX, D(a->res2), D(a->fcproj), D(a->res3), NC));
            TIMED(K_MM, OPS->matmul_backward(CTX, D(a->fchg), gp[12] + (size_t)l * 4 * C * C,
                                             gp[13] + l * C, D(a->fcproj), a->fchg,
                                             pp[12] + (size_t)l * 4 * C * C, (int)N, 4 * C, C));
            TIMED(K_GELU, OPS->gelu_backward(CTX, D(a->fch), a->fch, D(a->fchg), 4 * NC));
            TIMED(K_MM, OPS->matmul_backward(CTX, D(a->ln2), gp[10] + (size_t)l * 4 * C * C,
                                             gp[11] + l * 4 * C, D(a->fch), a->ln2,
                                             pp[10] + (size_t)l * 4 * C * C, (int)N, C, 4 * C));
            TIMED(K_LN,
                  OPS->layernorm_backward(CTX, D(a->res2), gp[8] + l * C, gp[9] + l * C, D(a->ln2),
                                          a->res2, pp[8] + l * C, a->ln2m, a->ln2r, (int)N, C));
            TIMED(K_RES, OPS->residual_backward(CTX, D(res), D(a->attproj), D(a->res2), NC));
            TIMED(K_MM, OPS->matmul_backward(CTX, D(a->atty), gp[6] + (size_t)l * C * C,
                                             gp[7] + l * C, D(a->attproj), a->atty,
                                             pp[6] + (size_t)l * C * C, (int)N, C, C));
            TIMED(K_ATT, OPS->attention_backward(CTX, D(a->qkv), scratch, D(a->atty), a->qkv,
                                                 a->atty, a->lse, NULL, B, T, C, NH));
            TIMED(K_MM, OPS->matmul_backward(CTX, D(a->ln1), gp[4] + (size_t)l * 3 * C * C,
                                             gp[5] + l * 3 * C, D(a->qkv), a->ln1,
                                             pp[4] + (size_t)l * 3 * C * C, (int)N, C, 3 * C));
            TIMED(K_LN,
                  OPS->layernorm_backward(CTX, D(res), gp[2] + l * C, gp[3] + l * C, D(a->ln1), res,
                                          pp[2] + l * C, a->ln1m, a->ln1r, (int)N, C));
        }
        TIMED(K_ENC, OPS->encoder_backward(CTX, gp[0], gp[1], D(encoded), inp, B, T, C));
        aw.bc1 = (float)(1.0 - pow(0.9, step + 2));
        aw.bc2 = (float)(1.0 - pow(0.999, step + 2));
        TIMED(K_OPT, OPS->adamw(CTX, params, grads, ZT_F32, m, v, P, &aw, NULL, ZT_F32));
        double dt = zt_now_s() - t0;
        double mean_loss = 0.0;
        for (size_t i = 0; i < N; i++)
            mean_loss += losses[i];
        mean_loss /= (double)N;
        if (step == 0) loss0 = mean_loss;
        loss_last = mean_loss;
        if (step >= 0) {
            total += dt;
            if (dt < best) {
                best = dt;
                memcpy(best_kt, KT, sizeof KT);
            }
        }
    }
#undef D
    double sec = best, mean = total / steps;
    /* FLOPs: every matmul forward 2*N*in*out, backward twice that; attention as computed
     * (causal half of QK^T and PV, forward 2 matmuls, backward 5 with QK^T recomputed) */
    double mm = 2.0 * N * ((double)L * (3.0 * C * C + C * C + 8.0 * C * C) + (double)C * VP);
    double att = 2.0 * (double)B * NH * T * T * (C / NH) * 0.5;
    double fl = 3.0 * mm + 7.0 * L * att;
    /* the usual model FLOPs: 6 * params * tokens + attention 6 * L * T * C * tokens (full) */
    double model_fl = 6.0 * (double)(P - (size_t)T * C) * N + 12.0 * L * T * C * (double)N;
    printf("  step: best %.2f ms (mean %.2f ms over %d), %.0f tokens/s, loss %.4f -> %.4f\n",
           sec * 1e3, mean * 1e3, steps, (double)N / sec, loss0, loss_last);
    printf("  step: computed %.1f GFLOP/s = %.1f%% of the sgemm peak\n", fl / sec * 1e-9,
           100.0 * fl / sec * 1e-9 / peak_gf);
    printf("  step: model (6N + attention) %.1f GFLOP/s = %.1f%% of the sgemm peak\n",
           model_fl / sec * 1e-9, 100.0 * model_fl / sec * 1e-9 / peak_gf);
    printf("  best step breakdown:");
    for (int k = 0; k < K_COUNT; k++)
        printf(" %s %.2f ms;", KNAMES[k], best_kt[k] * 1e3);
    printf("\n");
    zt_free(params), zt_free(grads), zt_free(m), zt_free(v), zt_free(acts), zt_free(dacts);
    zt_free(scratch), zt_free(inp), zt_free(tgt);
}

int main(int argc, char **argv)
{
    int only = 0, steps = 10;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            MIN_TIME = 0.05;
            steps = 3;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            only = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_kernels_cpu [--quick] [--threads N]\n");
            return 2;
        }
    }
    OPS = zt_ops_cpu();
    printf("bench_kernels_cpu: GPT-2 L=%d C=%d NH=%d T=%d B=%d V=%d Vp=%d\n", L, C, NH, T, B, V,
           VP);
    for (int nt = 1; nt <= 2; nt++) {
        if (only && nt != only) continue;
        omp_set_num_threads(nt);
        zt_err err;
        if (OPS->ctx_create(&CTX, 0, &err) != ZT_OK) {
            fprintf(stderr, "bench_kernels_cpu: %s\n", zt_err_msg(&err));
            return 1;
        }
        printf("threads=%d\n", nt);
        double peak = bench_peak();
        bench_ops();
        bench_attention_variants();
        bench_step(peak, steps);
        OPS->ctx_destroy(CTX);
        CTX = NULL;
    }
    return 0;
}
