/* zerotrain bench: bandwidth of the TCP collectives, in the manner of nccl-tests. Runs each
 * world size as forked ranks on loopback and prints, per collective and size, the time per
 * call (slowest rank), algbw = size / time and busbw = algbw x the ring factor
 * (allreduce 2(n-1)/n, reduce_scatter and allgather (n-1)/n, broadcast 1).
 * Usage: comm_bw [-w 2,4] [-b 1K] [-e 64M] [-f 4] [-d fp32|bf16|fp16] [-c all|allreduce,...] */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>

#include "common/alloc.h"
#include "engine/comm/comm.h"
#include "tests/engine/comm_test_util.h"

typedef struct bcfg {
    size_t min_bytes, max_bytes;
    int factor;
    zt_dtype dt;
    unsigned kinds; /* bit per zt_coll_kind */
} bcfg;

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (toupper((unsigned char)*end)) {
    case 'K':
        v *= 1024;
        break;
    case 'M':
        v *= 1024 * 1024;
        break;
    case 'G':
        v *= 1024.0 * 1024 * 1024;
        break;
    default:
        break;
    }
    return (size_t)v;
}

static double bus_factor(zt_coll_kind k, int n)
{
    switch (k) {
    case ZT_COLL_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case ZT_COLL_REDUCE_SCATTER:
    case ZT_COLL_ALLGATHER:
        return (double)(n - 1) / n;
    default:
        return 1.0;
    }
}

static zt_status run_once(zt_comm *c, zt_coll_kind k, unsigned char *big, unsigned char *small,
                          size_t bytes, zt_dtype dt, zt_err *err)
{
    int n = zt_comm_world_size(c), r = zt_comm_rank(c);
    size_t es = zt_dtype_size(dt);
    size_t part = bytes / es / (size_t)n;
    switch (k) {
    case ZT_COLL_ALLREDUCE:
        return zt_comm_allreduce(c, big, bytes / es, dt, NULL, err);
    case ZT_COLL_REDUCE_SCATTER:
        return zt_comm_reduce_scatter(c, big, small, part, dt, NULL, err);
    case ZT_COLL_ALLGATHER:
        return zt_comm_allgather(c, big + (size_t)r * part * es, big, part, dt, NULL, err);
    default:
        return zt_comm_broadcast(c, big, bytes, 0, NULL, err);
    }
}

static int bench_rank(int rank, int world, const char *rdv, void *arg)
{
    const bcfg *b = arg;
    zt_comm_opts o;
    memset(&o, 0, sizeof(o));
    o.rank = rank;
    o.world_size = world;
    o.rendezvous = rdv;
    o.timeout_ms = 120000;
    zt_comm *c = NULL;
    zt_err err;
    zt_err_clear(&err);
    if (zt_comm_create(&c, zt_comm_backend_tcp(), &o, &err) != ZT_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, zt_err_msg(&err));
        return 1;
    }
    unsigned char *big = zt_aligned_alloc(64, b->max_bytes + 64);
    unsigned char *small = zt_aligned_alloc(64, b->max_bytes / (size_t)world + 64);
    if (!big || !small) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        return 1;
    }
    memset(big, 0, b->max_bytes + 64); /* zeros: sums stay finite however often we add */
    memset(small, 0, b->max_bytes / (size_t)world + 64);
    size_t es = zt_dtype_size(b->dt);
    if (rank == 0) {
        printf("\n# world %d, %s, TCP ring over loopback\n", world, zt_dtype_name(b->dt));
        printf("# %12s %12s %-15s %6s %12s %12s %12s\n", "size(B)", "count", "collective", "iters",
               "time(us)", "algbw(GB/s)", "busbw(GB/s)");
        fflush(stdout);
    }
    for (int k = 0; k < ZT_COLL_BARRIER; k++) {
        if (!(b->kinds & (1u << k))) continue;
        for (size_t bytes = b->min_bytes; bytes <= b->max_bytes; bytes *= (size_t)b->factor) {
            /* whole elements per rank */
            size_t unit = es * (size_t)world;
            size_t sz = bytes / unit * unit;
            if (sz == 0) sz = unit;
            int iters = (int)((size_t)(256u << 20) / sz);
            iters = iters < 5 ? 5 : iters > 200 ? 200 : iters;
            for (int w = 0; w < 2; w++)
                if (run_once(c, (zt_coll_kind)k, big, small, sz, b->dt, &err) != ZT_OK) goto failed;
            if (zt_comm_barrier(c, &err) != ZT_OK) goto failed;
            double t0 = ct_now_ms();
            for (int i = 0; i < iters; i++)
                if (run_once(c, (zt_coll_kind)k, big, small, sz, b->dt, &err) != ZT_OK) goto failed;
            float mine = (float)((ct_now_ms() - t0) * 1e3 / iters);
            float all[CT_MAX_RANKS] = {0};
            if (zt_comm_allgather(c, &mine, all, 1, ZT_F32, NULL, &err) != ZT_OK) goto failed;
            float us = 0;
            for (int r = 0; r < world; r++)
                us = all[r] > us ? all[r] : us;
            if (rank == 0) {
                double algbw = (double)sz / (us * 1e-6) / 1e9;
                printf("  %12zu %12zu %-15s %6d %12.1f %12.3f %12.3f\n", sz,
                       k == ZT_COLL_BROADCAST ? sz : sz / es, zt_coll_kind_name((zt_coll_kind)k),
                       iters, us, algbw, algbw * bus_factor((zt_coll_kind)k, world));
                fflush(stdout);
            }
        }
    }
    zt_free(small);
    zt_free(big);
    zt_comm_destroy(c);
    return 0;
failed:
    fprintf(stderr, "rank %d: %s\n", rank, zt_err_msg(&err));
    return 1;
}

int main(int argc, char **argv)
{
    bcfg b = {.min_bytes = 1024, .max_bytes = 64u << 20, .factor = 4, .dt = ZT_F32, .kinds = 0xf};
    int worlds[CT_MAX_RANKS] = {2, 4}, n_worlds = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf(
                "usage: comm_bw [-w 2,4] [-b 1K] [-e 64M] [-f 4] [-d fp32|bf16|fp16] [-c allreduce,reduce_scatter,allgather,broadcast]\n");
            return 0;
        }
        if (!v) {
            fprintf(stderr, "comm_bw: option %s needs a value (see --help)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "-w")) {
            n_worlds = 0;
            for (const char *p = v; *p && n_worlds < CT_MAX_RANKS;) {
                int w = atoi(p);
                if (w < 1 || w > CT_MAX_RANKS) {
                    fprintf(stderr, "comm_bw: world sizes must be 1..%d\n", CT_MAX_RANKS);
                    return 2;
                }
                worlds[n_worlds++] = w;
                p = strchr(p, ',');
                if (!p) break;
                p++;
            }
        } else if (!strcmp(a, "-b")) {
            b.min_bytes = parse_size(v);
        } else if (!strcmp(a, "-e")) {
            b.max_bytes = parse_size(v);
        } else if (!strcmp(a, "-f")) {
            b.factor = atoi(v);
        } else if (!strcmp(a, "-d")) {
            b.dt = !strcmp(v, "bf16") ? ZT_BF16 : !strcmp(v, "fp16") ? ZT_F16 : ZT_F32;
        } else if (!strcmp(a, "-c")) {
            b.kinds = 0;
            for (int k = 0; k < ZT_COLL_BARRIER; k++)
                if (strstr(v, zt_coll_kind_name((zt_coll_kind)k)) || !strcmp(v, "all"))
                    b.kinds |= 1u << k;
        } else {
            fprintf(stderr, "comm_bw: unknown option %s (see --help)\n", a);
            return 2;
        }
    }
    if (b.factor < 2 || b.min_bytes == 0 || b.max_bytes < b.min_bytes || !b.kinds) {
        fprintf(stderr, "comm_bw: need -f >= 2, 0 < -b <= -e, and at least one collective\n");
        return 2;
    }
    signal(SIGPIPE, SIG_DFL);
    for (int i = 0; i < n_worlds; i++) {
        int codes[CT_MAX_RANKS];
        ct_run_world(worlds[i], bench_rank, &b, 1800000, codes);
        for (int r = 0; r < worlds[i]; r++)
            if (codes[r] != 0) {
                fprintf(stderr, "comm_bw: world %d: rank %d exited with %d\n", worlds[i], r,
                        codes[r]);
                return 1;
            }
    }
    return 0;
}
