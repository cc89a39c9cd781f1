/* tests/bench/nvme_swap: how fast engine/nvme/swap.c streams an optimizer's state. Three arrays
 * (master, exp_avg, exp_avg_sq) of MIB each in SEG_MIB segments are written once, read once,
 * then streamed as an offloaded optimizer step does: segment k+1 read while k is updated and
 * k-1 written back, through BUFFERS buffer sets. Prints one JSON line of GB/s figures.
 * Usage: bench_nvme_swap DIR MIB SEG_MIB BUFFERS BLOCK_KIB QUEUE_DEPTH [BACKEND] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/timeutil.h"
#include "engine/nvme/swap.h"

#define NARR 3

static void die(const zt_err *err)
{
    fprintf(stderr, "bench_nvme_swap: %s\n", zt_err_msg(err));
    exit(1);
}

static void update(float *m, float *v, float *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        m[i] = 0.9f * m[i] + 0.1f;
        v[i] = 0.999f * v[i] + 0.001f;
        p[i] -= 1e-3f * m[i] / (v[i] + 1e-8f);
    }
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr,
                "usage: bench_nvme_swap DIR MIB SEG_MIB BUFFERS BLOCK_KIB QUEUE_DEPTH [BACKEND]\n");
        return 2;
    }
    size_t mib = strtoull(argv[2], NULL, 10), seg_mib = strtoull(argv[3], NULL, 10);
    int nbuf = atoi(argv[4]);
    zt_aio_config cfg = {.block_size = strtoull(argv[5], NULL, 10) << 10,
                         .queue_depth = atoi(argv[6]),
                         .overlap_events = true,
                         .backend = argc > 7 ? argv[7] : NULL};
    if (nbuf < 2 || seg_mib == 0 || mib < seg_mib) {
        fprintf(stderr, "bench_nvme_swap: need BUFFERS >= 2 and MIB >= SEG_MIB > 0\n");
        return 2;
    }
    zt_err err = {0};
    zt_aio *aio = NULL;
    if (zt_aio_open(&aio, &cfg, &err) != ZT_OK) die(&err);
    int nseg = (int)(mib / seg_mib);
    size_t seg_elems = (seg_mib << 20) / 4;
    size_t *segs = zt_calloc((size_t)nseg, sizeof(*segs));
    for (int k = 0; k < nseg; k++)
        segs[k] = seg_elems;
    zt_swap_layout lay = {.n_arrays = NARR,
                          .names = {"master", "exp_avg", "exp_avg_sq"},
                          .elem_bytes = 4,
                          .n_segs = nseg,
                          .seg_elems = segs};
    zt_swap *s = NULL;
    if (zt_swap_open(&s, argv[1], &lay, aio, &err) != ZT_OK) die(&err);
    float *buf[16][NARR];
    if (nbuf > 16) nbuf = 16;
    for (int b = 0; b < nbuf; b++)
        for (int a = 0; a < NARR; a++) {
            buf[b][a] = zt_aligned_alloc(ZT_SWAP_ALIGN, seg_mib << 20);
            memset(buf[b][a], 0, seg_mib << 20);
        }
    zt_swap_io *io = zt_calloc((size_t)nseg * NARR, sizeof(*io));
    double bytes = (double)nseg * (double)NARR * (double)(seg_mib << 20);

    /* writes, then reads, with every buffer set in flight */
    double t0 = zt_now_s();
    for (int k = 0; k < nseg; k++) {
        if (k >= nbuf)
            for (int a = 0; a < NARR; a++)
                if (zt_swap_finish(s, &io[(k - nbuf) * NARR + a], &err) != ZT_OK) die(&err);
        for (int a = 0; a < NARR; a++)
            if (zt_swap_write_start(s, a, k, buf[k % nbuf][a], &io[k * NARR + a], &err) != ZT_OK)
                die(&err);
    }
    for (int k = nseg - nbuf < 0 ? 0 : nseg - nbuf; k < nseg; k++)
        for (int a = 0; a < NARR; a++)
            if (zt_swap_finish(s, &io[k * NARR + a], &err) != ZT_OK) die(&err);
    double t_write = zt_now_s() - t0;
    t0 = zt_now_s();
    for (int k = 0; k < nseg; k++) {
        if (k >= nbuf)
            for (int a = 0; a < NARR; a++)
                if (zt_swap_finish(s, &io[(k - nbuf) * NARR + a], &err) != ZT_OK) die(&err);
        for (int a = 0; a < NARR; a++)
            if (zt_swap_read_start(s, a, k, buf[k % nbuf][a], &io[k * NARR + a], &err) != ZT_OK)
                die(&err);
    }
    for (int k = nseg - nbuf < 0 ? 0 : nseg - nbuf; k < nseg; k++)
        for (int a = 0; a < NARR; a++)
            if (zt_swap_finish(s, &io[k * NARR + a], &err) != ZT_OK) die(&err);
    double t_read = zt_now_s() - t0;

    /* the optimizer's stream: read ahead nbuf-1 segments, update, write back */
    zt_swap_io *rd = zt_calloc((size_t)nseg * NARR, sizeof(*rd));
    zt_swap_io *wr = zt_calloc((size_t)nseg * NARR, sizeof(*wr));
    double t_update = 0;
    t0 = zt_now_s();
    int ahead = nbuf - 1;
    for (int k = 0; k < ahead && k < nseg; k++)
        for (int a = 0; a < NARR; a++)
            if (zt_swap_read_start(s, a, k, buf[k % nbuf][a], &rd[k * NARR + a], &err) != ZT_OK)
                die(&err);
    for (int k = 0; k < nseg; k++) {
        for (int a = 0; a < NARR; a++)
            if (zt_swap_finish(s, &rd[k * NARR + a], &err) != ZT_OK) die(&err);
        double u0 = zt_now_s();
        float **b = buf[k % nbuf];
        update(b[1], b[2], b[0], seg_elems);
        t_update += zt_now_s() - u0;
        for (int a = 0; a < NARR; a++)
            if (zt_swap_write_start(s, a, k, b[a], &wr[k * NARR + a], &err) != ZT_OK) die(&err);
        int next = k + ahead;
        if (next < nseg) {
            /* its buffer set was segment next-nbuf's, written back one iteration ago */
            if (next - nbuf >= 0)
                for (int a = 0; a < NARR; a++)
                    if (zt_swap_finish(s, &wr[(next - nbuf) * NARR + a], &err) != ZT_OK) die(&err);
            for (int a = 0; a < NARR; a++)
                if (zt_swap_read_start(s, a, next, buf[next % nbuf][a], &rd[next * NARR + a],
                                       &err) != ZT_OK)
                    die(&err);
        }
    }
    for (int k = nseg - nbuf < 0 ? 0 : nseg - nbuf; k < nseg; k++)
        for (int a = 0; a < NARR; a++)
            if (zt_swap_finish(s, &wr[k * NARR + a], &err) != ZT_OK) die(&err);
    double t_step = zt_now_s() - t0;
    printf("{\"backend\": \"%s\", \"bytes\": %.0f, \"write_gbs\": %.3f, \"read_gbs\": %.3f, "
           "\"step_s\": %.4f, \"update_s\": %.4f, \"step_gbs\": %.3f}\n",
           zt_aio_backend(aio), bytes, bytes / t_write / 1e9, bytes / t_read / 1e9, t_step,
           t_update, 2 * bytes / t_step / 1e9);
    zt_swap_close(s, true);
    zt_aio_close(aio);
    return 0;
}
