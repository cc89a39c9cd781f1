/* Benchmark of engine/data/dataloader.c: what drawing a micro-batch costs next to copying the
 * same bytes with memcpy (the floor for any loader that hands out int32 tokens), and what
 * opening a multi-shard data set costs. Prints one line per case; asserts nothing about time. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/timeutil.h"
#include "engine/data/dataloader.h"
#include "tests/test.h"
#include "tests/tmpdir.h"

int main(void)
{
    if (tmpdir_create("zt_bench_dataloader") != 0) return 1;
    const int nshards = 8;
    const size_t per = 2500000; /* 20M tokens, 40 MB */
    uint16_t *tok = malloc(per * sizeof(*tok));
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < per; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (uint16_t)(x % 50257);
    }
    char path[512];
    for (int s = 0; s < nshards; s++) {
        snprintf(path, sizeof(path), "%s/bench_%03d.bin", tmpdir, s);
        ASSERT_OK(zt_shard_write(path, tok, per - (size_t)s * 1000, NULL));
    }
    char pattern[512];
    snprintf(pattern, sizeof(pattern), "%s/bench_*.bin", tmpdir);

    const struct {
        int B, T;
    } cases[] = {{16, 1024}, {64, 128}, {4, 64}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const int B = cases[c].B, T = cases[c].T;
        zt_dataset *ds;
        uint64_t t0 = zt_now_ns();
        ASSERT_OK(zt_dataset_open(&ds, pattern, T, 50257, NULL));
        double open_ms = (double)(zt_now_ns() - t0) / 1e6;
        size_t n = (size_t)B * T;
        int32_t *in = malloc(n * sizeof(int32_t)), *tg = malloc(n * sizeof(int32_t));
        int32_t *src = malloc(2 * n * sizeof(int32_t));
        memset(src, 1, 2 * n * sizeof(int32_t));
        const int64_t steps = (int64_t)(zt_dataset_num_samples(ds) / (uint64_t)B);
        /* One pass over the whole data set (every page touched once), then warm passes. */
        t0 = zt_now_ns();
        for (int64_t s = 0; s < steps; s++)
            ASSERT_OK(zt_dataset_micro_batch(ds, s, B, 1, 0, 0, B, in, tg, NULL));
        double first_us = (double)(zt_now_ns() - t0) / 1e3 / (double)steps;
        const int reps = 2000;
        t0 = zt_now_ns();
        for (int r = 0; r < reps; r++)
            ASSERT_OK(zt_dataset_micro_batch(ds, r % 64, B, 1, 0, 0, B, in, tg, NULL));
        double warm_us = (double)(zt_now_ns() - t0) / 1e3 / reps;
        volatile int32_t sink = 0;
        t0 = zt_now_ns();
        for (int r = 0; r < reps; r++) {
            src[r % (2 * n)] = r;
            memcpy(in, src, n * sizeof(int32_t));
            memcpy(tg, src + n, n * sizeof(int32_t));
            sink += in[r % n] + tg[r % n];
        }
        (void)sink;
        double memcpy_us = (double)(zt_now_ns() - t0) / 1e3 / reps;
        printf(
            "micro-batch %3dx%-5d open %6.2f ms (%d shards, %llu tokens) | first pass %7.2f us | warm %7.2f us (%.2f ns/token) | memcpy of the same bytes %7.2f us\n",
            B, T, open_ms, zt_dataset_num_shards(ds), (unsigned long long)zt_dataset_num_tokens(ds),
            first_us, warm_us, warm_us * 1e3 / (double)n, memcpy_us);
        free(in);
        free(tg);
        free(src);
        zt_dataset_close(ds);
    }
    free(tok);
    return 0;
}
