/* zerotrain bench: the host side of an offloaded optimizer step (kernels/cpu AdamW) over one
 * flat shard of N elements on the threads OpenMP is given, and the machine's copy bandwidth in
 * the same run. Prints one JSON line: seconds of the fastest of REPS steps for
 *   fp32:  fp32 parameters, fp32 gradients, fp32 moments (torch.optim.AdamW's work)
 *   mixed: fp32 master, bf16 gradients, fp32 moments, and the updated bf16 copy written
 * and the bandwidth of a large memcpy. tests/bench/host_adamw.py runs it next to PyTorch.
 * Usage: bench_host_adamw N [REPS] */
#define _POSIX_C_SOURCE 200809L

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/dtype.h"
#include "common/timeutil.h"
#include "kernels/ops.h"

static void *must_alloc(size_t bytes)
{
    void *p = zt_aligned_alloc(256, bytes);
    if (!p) {
        fprintf(stderr, "bench_host_adamw: out of memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}

/* deterministic values in [-scale, scale), written in parallel (first touch spreads pages) */
static float *frand(size_t n, float scale, uint64_t seed)
{
    float *p = must_alloc(n * sizeof(float));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint64_t s = (i + seed) * 6364136223846793005ull + 1442695040888963407ull;
        s ^= s >> 29;
        p[i] = scale * ((float)(s >> 40) / (float)(1u << 24) * 2.0f - 1.0f);
    }
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 2 || atoll(argv[1]) <= 0) {
        fprintf(stderr, "usage: bench_host_adamw N [REPS]\n");
        return 2;
    }
    size_t n = (size_t)atoll(argv[1]);
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (reps < 1) reps = 1;
    const zt_ops *ops = zt_ops_cpu();
    zt_kctx *k = NULL;
    zt_err err;
    if (ops->ctx_create(&k, 0, &err) != ZT_OK) {
        fprintf(stderr, "bench_host_adamw: %s\n", err.msg);
        return 1;
    }
    float *p = frand(n, 0.02f, 1), *g = frand(n, 1e-3f, 2), *m = frand(n, 1e-4f, 3);
    float *v = frand(n, 1e-6f, 4);
    for (size_t i = 0; i < n; i++)
        v[i] = v[i] < 0 ? -v[i] : v[i];
    uint16_t *g16 = must_alloc(n * 2), *lp = must_alloc(n * 2);
    ops->cast(k, g16, ZT_BF16, g, ZT_F32, n);
    ops->cast(k, lp, ZT_BF16, p, ZT_F32, n);
    zt_adamw_args a = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                       .weight_decay = 0.1f, .bc1 = 0.1f, .bc2 = 0.001f, .grad_scale = 1.0f};
    double best32 = 1e30, best16 = 1e30, bestcp = 1e30;
    for (int r = 0; r < reps + 1; r++) { /* the first round warms up */
        double t0 = zt_now_s();
        ops->adamw(k, p, g, ZT_F32, m, v, n, &a, NULL, ZT_F32);
        double t1 = zt_now_s();
        ops->adamw(k, p, g16, ZT_BF16, m, v, n, &a, lp, ZT_BF16);
        double t2 = zt_now_s();
        ops->copy_d2d(k, g, p, n * sizeof(float));
        double t3 = zt_now_s();
        if (r > 0) {
            best32 = t1 - t0 < best32 ? t1 - t0 : best32;
            best16 = t2 - t1 < best16 ? t2 - t1 : best16;
            bestcp = t3 - t2 < bestcp ? t3 - t2 : bestcp;
        }
    }
    if (ops->sync(k, &err) != ZT_OK) {
        fprintf(stderr, "bench_host_adamw: %s\n", err.msg);
        return 1;
    }
    /* a checksum, so the work cannot be optimised away and a broken update shows */
    double sum = 0;
    for (size_t i = 0; i < n; i += 4099)
        sum += p[i];
    printf("{\"n\": %zu, \"threads\": %d, \"fp32_s\": %.6f, \"mixed_s\": %.6f, "
           "\"copy_gbs\": %.3f, \"checksum\": %.6e}\n",
           n, omp_get_max_threads(), best32, best16, 2.0 * n * sizeof(float) / bestcp / 1e9, sum);
    ops->ctx_destroy(k);
    zt_free(p);
    zt_free(g);
    zt_free(m);
    zt_free(v);
    zt_free(g16);
    zt_free(lp);
    return 0;
}
