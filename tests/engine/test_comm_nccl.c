/* zerotrain tests: the NCCL collectives (engine/comm/comm_nccl.c) on real GPUs. A world of one on
 * GPU 0, then one rank per GPU (up to 4) as forked processes when there are several. Sums of
 * integer-valued floats are exact, so results are checked exactly and bitwise across ranks.
 * Exits 77 (skip) without a GPU. CUDA is only touched in child processes (fork safety). On the
 * emulation (ZT_TEST_EMU) also NCCL misuse that the emulation reports: a host buffer, and
 * ranks whose calls differ. */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>

#include "common/alloc.h"
#include "common/dtype.h"
#include "common/timeutil.h"
#include "engine/comm/comm.h"
#include "tests/engine/comm_test_util.h"
#include "tests/test.h"

static ct_shared *sh;

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) ZT_FAIL("%s: %s", #call, cudaGetErrorString(e_));                   \
    } while (0)

static int probe(int rank, int world, const char *rdv, void *arg)
{
    (void)rank, (void)world, (void)rdv, (void)arg;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    return n > 100 ? 100 : n;
}

static float val(int rank, size_t i)
{
    return (float)((int)((i * 2654435761u + (size_t)rank * 40503u) % 9u) - 4);
}

/* Rank `rank`'s NCCL communicator on GPU `rank` (a test failure if it cannot be made). */
static zt_comm *comm_on_gpu(int rank, int world, const char *rdv, const char *session,
                            int timeout_ms)
{
    CUDA_OK(cudaSetDevice(rank));
    zt_comm_opts o;
    memset(&o, 0, sizeof(o));
    o.rank = rank;
    o.world_size = world;
    o.rendezvous = world > 1 ? rdv : NULL;
    o.session = session;
    o.timeout_ms = timeout_ms;
    o.device = rank;
    zt_comm *c = NULL;
    zt_err err;
    zt_err_clear(&err);
    if (zt_comm_create(&c, zt_comm_backend_nccl(), &o, &err) != ZT_OK)
        ZT_FAIL("rank %d: zt_comm_create(nccl): %s", rank, zt_err_msg(&err));
    return c;
}

/* Runs every collective once with `count` elements per rank-chunk and checks the results. */
static int rank_collectives(int rank, int world, const char *rdv, void *arg)
{
    (void)arg;
    zt_comm *c = comm_on_gpu(rank, world, rdv, "nccl-test", 60000);
    zt_err err;
    zt_err_clear(&err);

    const zt_dtype dts[] = {ZT_F32, ZT_BF16, ZT_F16};
    const size_t counts[] = {1, 1001, 1 << 20};
    uint64_t digest = 0;
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 3; k++) {
            zt_dtype dt = dts[d];
            size_t n = counts[k] * (size_t)world, es = zt_dtype_size(dt);
            unsigned char *h = zt_malloc(n * es), *h2 = zt_malloc(n * es);
            void *dev = NULL, *dev2 = NULL;
            ASSERT_TRUE(h && h2);
            CUDA_OK(cudaMalloc(&dev, n * es));
            CUDA_OK(cudaMalloc(&dev2, n * es));
            for (size_t i = 0; i < n; i++)
                zt_store_f32(h, dt, i, val(rank, i));
            CUDA_OK(cudaMemcpy(dev, h, n * es, cudaMemcpyHostToDevice));

            zt_comm_stats s0, s1;
            zt_comm_get_stats(c, &s0);
            zt_comm_req *q = NULL;
            if (zt_comm_allreduce(c, dev, n, dt, &q, &err) != ZT_OK ||
                zt_comm_wait(c, q, &err) != ZT_OK)
                ZT_FAIL("allreduce: %s", zt_err_msg(&err));
            zt_comm_get_stats(c, &s1);
            ASSERT_EQ_INT(s1.bytes_sent - s0.bytes_sent,
                          world > 1 ? 2 * (uint64_t)(world - 1) * (n / (size_t)world) * es : 0);
            CUDA_OK(cudaMemcpy(h2, dev, n * es, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < n; i++) {
                float want = 0;
                for (int r = 0; r < world; r++)
                    want += val(r, i);
                ASSERT_EQ_INT((int)zt_load_f32(h2, dt, i), (int)want);
            }
            digest = ct_fnv(digest, h2, n * es);

            /* reduce-scatter out of place: chunk `rank` of the sums */
            size_t rc = n / (size_t)world;
            CUDA_OK(cudaMemcpy(dev, h, n * es, cudaMemcpyHostToDevice));
            if (zt_comm_reduce_scatter(c, dev, dev2, rc, dt, NULL, &err) != ZT_OK)
                ZT_FAIL("reduce_scatter: %s", zt_err_msg(&err));
            CUDA_OK(cudaMemcpy(h2, dev2, rc * es, cudaMemcpyDeviceToHost));
            for (size_t j = 0; j < rc; j++) {
                float want = 0;
                for (int r = 0; r < world; r++)
                    want += val(r, (size_t)rank * rc + j);
                ASSERT_EQ_INT((int)zt_load_f32(h2, dt, j), (int)want);
            }

            /* all-gather in place */
            CUDA_OK(cudaMemcpy((char *)dev + (size_t)rank * rc * es, h, rc * es,
                               cudaMemcpyHostToDevice));
            if (zt_comm_allgather(c, (char *)dev + (size_t)rank * rc * es, dev, rc, dt, NULL,
                                  &err) != ZT_OK)
                ZT_FAIL("allgather: %s", zt_err_msg(&err));
            CUDA_OK(cudaMemcpy(h2, dev, n * es, cudaMemcpyDeviceToHost));
            for (int r = 0; r < world; r++)
                for (size_t j = 0; j < rc; j++)
                    ASSERT_EQ_INT((int)zt_load_f32(h2, dt, (size_t)r * rc + j), (int)val(r, j));

            zt_free(h2);
            zt_free(h);
            CUDA_OK(cudaFree(dev2));
            CUDA_OK(cudaFree(dev));
        }
    /* broadcast from the last rank, and a barrier */
    unsigned char *hb = zt_malloc(4096);
    void *db = NULL;
    CUDA_OK(cudaMalloc(&db, 4096));
    memset(hb, rank == world - 1 ? 0x77 : 0, 4096);
    CUDA_OK(cudaMemcpy(db, hb, 4096, cudaMemcpyHostToDevice));
    if (zt_comm_broadcast(c, db, 4096, world - 1, NULL, &err) != ZT_OK)
        ZT_FAIL("broadcast: %s", zt_err_msg(&err));
    CUDA_OK(cudaMemcpy(hb, db, 4096, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 4096; i++)
        ASSERT_EQ_INT(hb[i], 0x77);
    if (zt_comm_barrier(c, &err) != ZT_OK) ZT_FAIL("barrier: %s", zt_err_msg(&err));
    char recent[4096];
    zt_comm_describe_recent(c, recent, sizeof(recent));
    ASSERT_CONTAINS(recent, "done in");
    zt_comm_stats st;
    zt_comm_get_stats(c, &st);
    ASSERT_EQ_INT(st.collectives, 3 * 3 * 3 + 2);
    sh->digest[0][rank][0] = digest;
    CUDA_OK(cudaFree(db));
    zt_free(hb);
    zt_comm_destroy(c);
    return 0;
}

#ifdef ZT_TEST_EMU
/* The emulation's checks of NCCL's rules, through comm_nccl.c (on a GPU these hang or corrupt
 * memory rather than fail): arg 0, a host buffer given to a collective; arg 1, ranks calling a
 * collective with different counts. Each rank's call must fail, not hang, with the reason. */
static int rank_misuse(int rank, int world, const char *rdv, void *arg)
{
    int kind = *(int *)arg;
    zt_comm *c = comm_on_gpu(rank, world, rdv, "nccl-misuse", 30000);
    zt_err err;
    zt_err_clear(&err);
    size_t n = kind == 0 ? 64 : 64 * (size_t)(rank + 1);
    float *host = zt_calloc(n, sizeof(float));
    void *dev = NULL;
    ASSERT_TRUE(host != NULL);
    CUDA_OK(cudaMalloc(&dev, n * sizeof(float)));
    CUDA_OK(cudaMemset(dev, 0, n * sizeof(float)));
    double t0 = zt_now_s();
    zt_comm_req *q = NULL;
    zt_status st = zt_comm_allreduce(c, kind == 0 ? (void *)host : dev, n, ZT_F32, &q, &err);
    if (st == ZT_OK) st = zt_comm_wait(c, q, &err);
    double took = zt_now_s() - t0;
    printf("rank %d, %s: status %d after %.2f s: %s\n", rank,
           kind == 0 ? "host buffer" : "counts differ", (int)st, took, zt_err_msg(&err));
    ASSERT_TRUE(st != ZT_OK);
    ASSERT_TRUE(took < 20.0); /* reported, not timed out */
    ASSERT_CONTAINS(zt_err_msg(&err), kind == 0 ? "not device memory" : "differs across ranks");
    CUDA_OK(cudaFree(dev));
    zt_free(host);
    zt_comm_destroy(c);
    return 0;
}
#endif

int main(void)
{
    sh = ct_shared_create();
    int codes[CT_MAX_RANKS];
    ct_run_world(1, probe, NULL, 60000, codes);
    int ndev = codes[0];
    if (ndev <= 0 || ndev >= 100) {
        printf("skipped: no CUDA device\n");
        return ZT_TEST_SKIP;
    }
    ct_run_world(1, rank_collectives, NULL, 120000, codes);
    ct_expect_all_ok("nccl world of one", 1, codes);
    printf("ok: nccl, world 1\n");
    if (ndev >= 2) {
        int world = ndev > 4 ? 4 : ndev;
        ct_run_world(world, rank_collectives, NULL, 300000, codes);
        ct_expect_all_ok("nccl multi-GPU", world, codes);
        for (int r = 1; r < world; r++)
            ASSERT_EQ_INT(sh->digest[0][r][0], sh->digest[0][0][0]);
        printf("ok: nccl, world %d\n", world);
#ifdef ZT_TEST_EMU
        for (int kind = 0; kind < 2; kind++) {
            ct_run_world(2, rank_misuse, &kind, 60000, codes);
            ct_expect_all_ok(kind == 0 ? "nccl host buffer" : "nccl counts differ", 2, codes);
        }
        printf("ok: nccl misuse reported\n");
#endif
    } else {
        printf("skipped: nccl with several ranks (one GPU here)\n");
    }
    return 0;
}
