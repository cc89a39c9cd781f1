/* zerotrain tests: the TCP collectives (engine/comm/comm_tcp.c) with 1 to 4 ranks as real processes
 * on loopback. Every collective, dtype and awkward size, in and out of place, checked against
 * sums computed here (exactly, with the documented fixed reduction order), bitwise identical
 * across ranks and runs, with the textbook ring byte counts; asynchronous requests; the
 * single-rank API and argument errors. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>

#include "common/alloc.h"
#include "common/dtype.h"
#include "engine/comm/comm.h"
#include "engine/comm/comm_int.h"
#include "tests/engine/comm_test_util.h"
#include "tests/test.h"

static ct_shared *sh;

/* ---- inputs and references (independent of the implementation) ---- */

enum { INTS = 0, FRACS = 1 };

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static float round_dt(zt_dtype dt, float v)
{
    uint32_t tmp = 0;
    zt_store_f32(&tmp, dt, 0, v);
    return zt_load_f32(&tmp, dt, 0);
}

/* Element i of rank `rank`'s input, already representable in dt. */
static float x_of(zt_dtype dt, int mode, int seed, int rank, size_t i)
{
    uint64_t h = mix64(((uint64_t)seed << 48) ^ ((uint64_t)rank << 40) ^ (uint64_t)i);
    if (mode == INTS) return (float)((int)(h % 17) - 8);
    static const float pow2[13] = {1.f / 64, 1.f / 32, 1.f / 16, 1.f / 8, 1.f / 4, 1.f / 2, 1.f,
                                   2.f,      4.f,      8.f,      16.f,    32.f,    64.f};
    float m = (float)((double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    return round_dt(dt, m * pow2[(h >> 3) % 13]);
}

static void fill(void *buf, zt_dtype dt, int mode, int seed, int rank, size_t first, size_t n)
{
    for (size_t j = 0; j < n; j++)
        zt_store_f32(buf, dt, j, x_of(dt, mode, seed, rank, first + j));
}

/* The ring chunk of element i for `count` elements over `world` ranks (count/world each, one
 * more for the first count%world). */
static int chunk_of(size_t count, int world, size_t i)
{
    size_t base = count / (size_t)world, rem = count % (size_t)world;
    size_t big = rem * (base + 1);
    if (i < big) return (int)(i / (base + 1));
    return (int)(rem + (i - big) / base);
}

static size_t chunk_len(size_t count, int world, int c)
{
    return count / (size_t)world + ((size_t)c < count % (size_t)world ? 1 : 0);
}

/* The documented order: start at rank c+1, add ranks c+2, ..., c (mod world), rounding to dt
 * after every addition. Also the exact sum and the sum of magnitudes, for the tolerance. */
static float ref_fixed(zt_dtype dt, int mode, int seed, int world, int c, size_t i, double *sum,
                       double *abs_sum)
{
    float acc = 0;
    *sum = 0;
    *abs_sum = 0;
    for (int k = 1; k <= world; k++) {
        float v = x_of(dt, mode, seed, (c + k) % world, i);
        acc = k == 1 ? v : round_dt(dt, acc + v);
        *sum += v;
        *abs_sum += fabs((double)v);
    }
    return acc;
}

static double eps_of(zt_dtype dt)
{
    return dt == ZT_F32 ? ldexp(1, -23) : dt == ZT_BF16 ? ldexp(1, -8) : ldexp(1, -11);
}

/* Checks one reduced element: bitwise against the fixed-order reference, and within rounding
 * of the exact sum (exactly equal for integer inputs). */
static void check_sum(const char *what, const void *buf, zt_dtype dt, size_t j, int mode, int seed,
                      int world, int chunk, size_t i)
{
    float got = zt_load_f32(buf, dt, j);
    double sum, abs_sum;
    float want = ref_fixed(dt, mode, seed, world, chunk, i, &sum, &abs_sum);
    if (mode == INTS && (double)got != sum)
        ZT_FAIL("%s %s element %zu: got %.9g, exact integer sum %.9g", what, zt_dtype_name(dt), i,
                got, sum);
    if (zt_f32_bits(got) != zt_f32_bits(want))
        ZT_FAIL("%s %s element %zu: got %.9g (0x%08x), fixed-order reference %.9g (0x%08x)", what,
                zt_dtype_name(dt), i, got, zt_f32_bits(got), want, zt_f32_bits(want));
    double tol = (double)world * eps_of(dt) * abs_sum + (double)world * ldexp(1, -24);
    ASSERT_NEAR(got, sum, 0.0, tol);
}

static zt_comm *make_comm(int rank, int world, const char *rdv, int timeout_ms, const char *session)
{
    zt_comm_opts o;
    memset(&o, 0, sizeof(o));
    o.rank = rank;
    o.world_size = world;
    o.rendezvous = rdv;
    o.session = session;
    o.timeout_ms = timeout_ms;
    zt_comm *c = NULL;
    zt_err err;
    zt_err_clear(&err);
    zt_status st = zt_comm_create(&c, zt_comm_backend_tcp(), &o, &err);
    if (st != ZT_OK) ZT_FAIL("rank %d: zt_comm_create: %s", rank, zt_err_msg(&err));
    ASSERT_EQ_INT(zt_comm_rank(c), rank);
    ASSERT_EQ_INT(zt_comm_world_size(c), world);
    return c;
}

static uint64_t bytes_sent(zt_comm *c)
{
    zt_comm_stats s;
    zt_comm_get_stats(c, &s);
    return s.bytes_sent;
}

#define CHECK_OK(call)                                                                             \
    do {                                                                                           \
        zt_err e_;                                                                                 \
        zt_err_clear(&e_);                                                                         \
        zt_status s_ = (call);                                                                     \
        if (s_ != ZT_OK) ZT_FAIL("%s failed: %s: %s", #call, zt_status_name(s_), zt_err_msg(&e_)); \
    } while (0)
#define E (&e_)

/* ---- every collective, dtype and size ---- */

typedef struct wcfg {
    int seed;
    int run;  /* which digest slot */
    int full; /* 0: only the fractional allreduces (determinism runs) */
} wcfg;

static const size_t sizes[] = {0, 1, 7, 1001, 1200, 65539, 1048579};
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))

static void test_allreduce(zt_comm *c, zt_dtype dt, size_t n, int mode, int seed, uint64_t *dg,
                           uint64_t *dg_same)
{
    int rank = zt_comm_rank(c), world = zt_comm_world_size(c);
    size_t es = zt_dtype_size(dt);
    void *buf = zt_malloc(n * es + 1);
    ASSERT_TRUE(buf != NULL);
    fill(buf, dt, mode, seed, rank, 0, n);
    uint64_t b0 = bytes_sent(c);
    CHECK_OK(zt_comm_allreduce(c, buf, n, dt, NULL, E));
    uint64_t sent = bytes_sent(c) - b0;
    for (size_t i = 0; i < n; i++)
        check_sum("allreduce", buf, dt, i, mode, seed, world, chunk_of(n, world, i), i);
    uint64_t want = 0;
    if (world > 1)
        want = es * (2 * n - chunk_len(n, world, rank) - chunk_len(n, world, (rank + 1) % world));
    ASSERT_EQ_INT(sent, want);
    if (n % (size_t)world == 0) /* the textbook 2 (N-1)/N of the buffer */
        ASSERT_EQ_INT(sent, 2 * (uint64_t)(world - 1) * n / (uint64_t)world * es);
    *dg = ct_fnv(*dg, buf, n * es);
    *dg_same = ct_fnv(*dg_same, buf, n * es);
    zt_free(buf);
}

static void test_reduce_scatter(zt_comm *c, zt_dtype dt, size_t rc, int mode, int seed,
                                int in_place, uint64_t *dg)
{
    int rank = zt_comm_rank(c), world = zt_comm_world_size(c);
    size_t es = zt_dtype_size(dt), total = rc * (size_t)world;
    unsigned char *send = zt_malloc(total * es + 1);
    unsigned char *own = zt_malloc(rc * es + 1);
    ASSERT_TRUE(send && own);
    fill(send, dt, mode, seed, rank, 0, total);
    /* a copy of the send buffer to check it is left alone out of place */
    uint64_t send_digest = ct_fnv(0, send, total * es);
    unsigned char *recv = in_place ? send + (size_t)rank * rc * es : own;
    uint64_t b0 = bytes_sent(c);
    CHECK_OK(zt_comm_reduce_scatter(c, send, recv, rc, dt, NULL, E));
    ASSERT_EQ_INT(bytes_sent(c) - b0, (uint64_t)(world - 1) * rc * es);
    for (size_t j = 0; j < rc; j++)
        check_sum(in_place ? "reduce_scatter(in place)" : "reduce_scatter", recv, dt, j, mode, seed,
                  world, rank, (size_t)rank * rc + j);
    if (!in_place) ASSERT_EQ_INT(ct_fnv(0, send, total * es), send_digest);
    *dg = ct_fnv(*dg, recv, rc * es);
    zt_free(own);
    zt_free(send);
}

static void test_allgather(zt_comm *c, zt_dtype dt, size_t sc, int seed, int in_place, uint64_t *dg,
                           uint64_t *dg_same)
{
    int rank = zt_comm_rank(c), world = zt_comm_world_size(c);
    size_t es = zt_dtype_size(dt), total = sc * (size_t)world;
    unsigned char *recv = zt_malloc(total * es + 1);
    unsigned char *mine = zt_malloc(sc * es + 1);
    ASSERT_TRUE(recv && mine);
    memset(recv, 0xab, total * es);
    unsigned char *send = in_place ? recv + (size_t)rank * sc * es : mine;
    fill(send, dt, FRACS, seed, rank, 0, sc);
    uint64_t b0 = bytes_sent(c);
    CHECK_OK(zt_comm_allgather(c, send, recv, sc, dt, NULL, E));
    ASSERT_EQ_INT(bytes_sent(c) - b0, (uint64_t)(world - 1) * sc * es);
    for (int k = 0; k < world; k++)
        for (size_t j = 0; j < sc; j++) {
            float got = zt_load_f32(recv, dt, (size_t)k * sc + j);
            float want = x_of(dt, FRACS, seed, k, j);
            if (zt_f32_bits(got) != zt_f32_bits(want))
                ZT_FAIL("allgather%s %s: rank %d's element %zu: got %.9g, want %.9g",
                        in_place ? "(in place)" : "", zt_dtype_name(dt), k, j, got, want);
        }
    *dg = ct_fnv(*dg, recv, total * es);
    *dg_same = ct_fnv(*dg_same, recv, total * es);
    zt_free(mine);
    zt_free(recv);
}

static void test_broadcast(zt_comm *c, size_t bytes, int root, int seed, uint64_t *dg_same)
{
    int rank = zt_comm_rank(c), world = zt_comm_world_size(c);
    unsigned char *buf = zt_malloc(bytes + 1);
    ASSERT_TRUE(buf != NULL);
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (unsigned char)(mix64((uint64_t)seed * 7919 + (uint64_t)rank * 104729 + i) >> 24);
    uint64_t b0 = bytes_sent(c);
    CHECK_OK(zt_comm_broadcast(c, buf, bytes, root, NULL, E));
    uint64_t want = world == 1 || rank == (root + world - 1) % world ? 0 : bytes;
    ASSERT_EQ_INT(bytes_sent(c) - b0, want);
    for (size_t i = 0; i < bytes; i++) {
        unsigned char w =
            (unsigned char)(mix64((uint64_t)seed * 7919 + (uint64_t)root * 104729 + i) >> 24);
        if (buf[i] != w)
            ZT_FAIL("broadcast from %d of %zu bytes: byte %zu is %u, want %u", root, bytes, i,
                    buf[i], w);
    }
    *dg_same = ct_fnv(*dg_same, buf, bytes);
    zt_free(buf);
}

static int rank_all(int rank, int world, const char *rdv, void *arg)
{
    const wcfg *cfg = arg;
    zt_comm *c = make_comm(rank, world, rdv, 30000, "test-all");
    uint64_t dg = 0, same = 0;
    uint64_t issued = 0;
    const zt_dtype dts[] = {ZT_F32, ZT_BF16, ZT_F16};
    for (int d = 0; d < 3; d++) {
        zt_dtype dt = dts[d];
        for (size_t si = 0; si < N_SIZES; si++) {
            size_t n = sizes[si];
            if (!cfg->full && n < 1001) continue;
            if (dt != ZT_F32 && n > 65539)
                n = 262147; /* a few MB in fp32; 16-bit dtypes stay at half a MB */
            size_t per_rank = (n + (size_t)world - 1) / (size_t)world;
            for (int mode = INTS; mode <= FRACS; mode++) {
                if (mode == INTS && (n > 65539 || !cfg->full)) continue;
                int seed = cfg->seed + (int)si * 10 + d * 100 + mode;
                test_allreduce(c, dt, n, mode, seed, &dg, &same);
                issued++;
                if (!cfg->full) continue;
                test_reduce_scatter(c, dt, per_rank, mode, seed, 0, &dg);
                test_reduce_scatter(c, dt, per_rank, mode, seed + 1, 1, &dg);
                issued += 2;
            }
            if (!cfg->full) continue;
            test_allgather(c, dt, per_rank, cfg->seed + (int)si, 0, &dg, &same);
            test_allgather(c, dt, per_rank, cfg->seed + (int)si + 1, 1, &dg, &same);
            issued += 2;
        }
    }
    if (cfg->full) {
        const size_t bsizes[] = {0, 1, 1000, (3u << 20) + 1};
        for (size_t i = 0; i < 4; i++) {
            test_broadcast(c, bsizes[i], 0, cfg->seed + (int)i, &same);
            test_broadcast(c, bsizes[i], world - 1, cfg->seed + (int)i + 50, &same);
            issued += 2;
        }
        for (int i = 0; i < 3; i++) {
            uint64_t b0 = bytes_sent(c);
            CHECK_OK(zt_comm_barrier(c, E));
            ASSERT_EQ_INT(bytes_sent(c) - b0, 0);
            issued++;
        }
    }
    zt_comm_stats st;
    zt_comm_get_stats(c, &st);
    ASSERT_EQ_INT(st.collectives, issued);
    ASSERT_EQ_INT(zt_comm_last_seq(c), issued);
    ASSERT_TRUE(st.busy_s >= 0.0);
    char recent[4096];
    size_t len = zt_comm_describe_recent(c, recent, sizeof(recent));
    ASSERT_EQ_INT(len, strlen(recent));
    char last[64];
    snprintf(last, sizeof(last), "#%llu", (unsigned long long)issued);
    ASSERT_CONTAINS(recent, last);
    ASSERT_CONTAINS(recent, "done in");
    sh->digest[cfg->run][rank][0] = dg;
    sh->digest[cfg->run][rank][1] = same;
    zt_comm_destroy(c);
    return 0;
}

static void run_worlds(void)
{
    int codes[CT_MAX_RANKS];
    for (int world = 1; world <= 4; world++) {
        wcfg cfg = {.seed = 1000 + world, .run = 0, .full = 1};
        memset(sh->digest, 0, sizeof(sh->digest));
        double t0 = ct_now_ms();
        ct_run_world(world, rank_all, &cfg, 120000, codes);
        char name[64];
        snprintf(name, sizeof(name), "all collectives, world %d", world);
        ct_expect_all_ok(name, world, codes);
        for (int r = 1; r < world; r++)
            if (sh->digest[0][r][1] != sh->digest[0][0][1])
                ZT_FAIL(
                    "world %d: rank %d's allreduce/allgather/broadcast results differ from rank 0's (digest %016llx vs %016llx)",
                    world, r, (unsigned long long)sh->digest[0][r][1],
                    (unsigned long long)sh->digest[0][0][1]);
        printf("ok: %s (%.0f ms)\n", name, ct_now_ms() - t0);
    }
}

/* Two runs of the same world give the same bits (fractional values: order matters). */
static void run_determinism(void)
{
    int codes[CT_MAX_RANKS];
    const int world = 3;
    memset(sh->digest, 0, sizeof(sh->digest));
    for (int run = 0; run < 2; run++) {
        wcfg cfg = {.seed = 77, .run = run, .full = 0};
        ct_run_world(world, rank_all, &cfg, 60000, codes);
        ct_expect_all_ok("determinism run", world, codes);
    }
    for (int r = 0; r < world; r++) {
        ASSERT_TRUE(sh->digest[0][r][0] != 0);
        if (sh->digest[0][r][0] != sh->digest[1][r][0])
            ZT_FAIL("rank %d: run 1 and run 2 differ (digest %016llx vs %016llx)", r,
                    (unsigned long long)sh->digest[0][r][0],
                    (unsigned long long)sh->digest[1][r][0]);
        ASSERT_EQ_INT(sh->digest[0][r][1], sh->digest[0][0][1]);
    }
    printf("ok: two runs give bitwise-identical results on every rank\n");
}

/* ---- asynchronous requests ---- */

static int rank_async(int rank, int world, const char *rdv, void *arg)
{
    (void)arg;
    zt_comm *c = make_comm(rank, world, rdv, 30000, NULL);
    const size_t n = 300001, rc = 40001;
    float *a = zt_malloc(n * 4);
    uint16_t *rs_send = zt_malloc(rc * (size_t)world * 2), *rs_recv = zt_malloc(rc * 2);
    float *ag = zt_malloc(rc * (size_t)world * 4);
    unsigned char *bc = zt_malloc(100000);
    uint16_t *h = zt_malloc(n * 2);
    ASSERT_TRUE(a && rs_send && rs_recv && ag && bc && h);
    fill(a, ZT_F32, FRACS, 1, rank, 0, n);
    fill(rs_send, ZT_BF16, FRACS, 2, rank, 0, rc * (size_t)world);
    fill(ag + (size_t)rank * rc, ZT_F32, FRACS, 3, rank, 0, rc);
    memset(bc, rank == 1 ? 0x5a : 0, 100000);
    fill(h, ZT_F16, INTS, 4, rank, 0, n);

    /* the backend's own memory: the receive staging from the start, a reduce-scatter's
     * scratch from its first use, as zctl plan predicts them */
    const zt_comm_backend *tcp = zt_comm_backend_tcp();
    zt_comm_stats st;
    zt_comm_get_stats(c, &st);
    ASSERT_EQ_INT(st.buffer_bytes, zt_comm_backend_buffer_bytes(tcp, world, 0));
    ASSERT_EQ_INT(st.buffer_bytes, 1 << 20);
    ASSERT_EQ_INT(zt_comm_backend_buffer_bytes(tcp, 1, 12345), 0);
    ASSERT_EQ_INT(zt_comm_backend_buffer_bytes(NULL, 4, 12345), 0);
    ASSERT_EQ_INT(zt_comm_backend_buffer_bytes(tcp, 2, 12345), 1 << 20); /* 2 ranks: no scratch */
    ASSERT_EQ_INT(zt_comm_backend_buffer_bytes(tcp, 4, 1000), (1 << 20) + 2001); /* two slots */

    zt_comm_req *q[5];
    CHECK_OK(zt_comm_allreduce(c, a, n, ZT_F32, &q[0], E));
    CHECK_OK(zt_comm_reduce_scatter(c, rs_send, rs_recv, rc, ZT_BF16, &q[1], E));
    CHECK_OK(zt_comm_allgather(c, ag + (size_t)rank * rc, ag, rc, ZT_F32, &q[2], E));
    CHECK_OK(zt_comm_broadcast(c, bc, 100000, 1, &q[3], E));
    CHECK_OK(zt_comm_allreduce(c, h, n, ZT_F16, &q[4], E));
    for (int i = 0; i < 5; i++)
        ASSERT_TRUE(q[i] != NULL);
    ASSERT_EQ_INT(zt_comm_last_seq(c), 5);
    /* the issuing thread is free while they run */
    char recent[4096];
    zt_comm_describe_recent(c, recent, sizeof(recent));
    ASSERT_CONTAINS(recent, "allreduce #1 (300001 x fp32)");
    ASSERT_CONTAINS(recent, "allreduce #5 (300001 x fp16)");
    ASSERT_CONTAINS(recent, "broadcast #4 (100000 bytes from rank 1)");
    volatile double busy = 0;
    for (int i = 0; i < 200000; i++)
        busy += sqrt((double)i);
    /* wait the last one first: requests still complete in issue order */
    CHECK_OK(zt_comm_wait(c, q[4], E));
    for (int i = 0; i < 4; i++)
        CHECK_OK(zt_comm_wait(c, q[i], E));
    for (size_t i = 0; i < n; i++) {
        check_sum("async allreduce", a, ZT_F32, i, FRACS, 1, world, chunk_of(n, world, i), i);
        check_sum("async allreduce fp16", h, ZT_F16, i, INTS, 4, world, chunk_of(n, world, i), i);
    }
    for (size_t j = 0; j < rc; j++)
        check_sum("async reduce_scatter", rs_recv, ZT_BF16, j, FRACS, 2, world, rank,
                  (size_t)rank * rc + j);
    for (int k = 0; k < world; k++)
        for (size_t j = 0; j < rc; j++)
            ASSERT_EQ_INT(zt_f32_bits(ag[(size_t)k * rc + j]),
                          zt_f32_bits(x_of(ZT_F32, FRACS, 3, k, j)));
    for (size_t i = 0; i < 100000; i++)
        ASSERT_EQ_INT(bc[i], 0x5a);
    zt_comm_describe_recent(c, recent, sizeof(recent));
    ASSERT_CONTAINS(recent, "allreduce #5 (300001 x fp16): done in");
    ASSERT_TRUE(!zt_comm_is_broken(c));
    zt_comm_get_stats(c, &st);
    ASSERT_EQ_INT(st.collectives, 5);
    /* 3 ranks: one scratch slot of the chunk (out of place, recv is the other) */
    ASSERT_EQ_INT(st.buffer_bytes, (1 << 20) + rc * 2 + 1);
    ASSERT_EQ_INT(st.buffer_bytes, zt_comm_backend_buffer_bytes(tcp, world, rc * 2));
    zt_free(h);
    zt_free(bc);
    zt_free(ag);
    zt_free(rs_recv);
    zt_free(rs_send);
    zt_free(a);
    zt_comm_destroy(c);
    return 0;
}

static void run_async(void)
{
    int codes[CT_MAX_RANKS];
    ct_run_world(3, rank_async, NULL, 60000, codes);
    ct_expect_all_ok("async requests", 3, codes);
    printf("ok: asynchronous requests, waited out of order\n");
}

/* ---- stall reports: the watch thread's wait / wait_end lines ---- */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int rank_stall(int rank, int world, const char *rdv, void *arg)
{
    (void)arg;
    int fds[2] = {-1, -1};
    if (rank == 0 && pipe(fds) != 0) ZT_FAIL("pipe: %s", strerror(errno));
    zt_comm_opts o;
    memset(&o, 0, sizeof(o));
    o.rank = rank;
    o.world_size = world;
    o.rendezvous = rdv;
    o.session = "stall";
    o.timeout_ms = 20000;
    o.report_fd = rank == 0 ? fds[1] : -1;
    o.stall_ms = rank == 0 ? 150 : 0;
    zt_comm *c = NULL;
    zt_err err;
    zt_err_clear(&err);
    if (zt_comm_create(&c, zt_comm_backend_tcp(), &o, &err) != ZT_OK)
        ZT_FAIL("rank %d: zt_comm_create: %s", rank, zt_err_msg(&err));
    float v[3] = {1, 2, 3}, g[6];
    CHECK_OK(zt_comm_allreduce(c, v, 3, ZT_F32, NULL, E)); /* #1: nobody late */
    if (rank == 1) sleep_ms(700);                           /* rank 0 waits in #2 */
    zt_comm_set_where(c, 5, "backward");
    CHECK_OK(zt_comm_allgather(c, v, g, 3, ZT_F32, NULL, E));
    if (rank == 0) {
        sleep_ms(500); /* the next tick says it ended */
        char buf[2048];
        ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
        if (n <= 0) ZT_FAIL("no stall report on the report fd");
        buf[n] = '\0';
        if (!strstr(buf, "rank=0 wait op=allgather seq=2 step=5 part=backward prev_op=allreduce prev_seq=1 waited_ms="))
            ZT_FAIL("no wait line for allgather #2 in:\n%s", buf);
        if (!strstr(buf, "rank=0 wait_end seq=2 waited_ms="))
            ZT_FAIL("no wait_end line for allgather #2 in:\n%s", buf);
        if (strstr(buf, "op=allreduce seq=1"))
            ZT_FAIL("allreduce #1 did not wait, yet it was reported:\n%s", buf);
        close(fds[0]);
        close(fds[1]);
    }
    zt_comm_destroy(c);
    return 0;
}

static void run_stall(void)
{
    int codes[CT_MAX_RANKS];
    ct_run_world(2, rank_stall, NULL, 30000, codes);
    ct_expect_all_ok("stall reports", 2, codes);
    printf("ok: a collective that waits is reported on the report fd, and its end\n");
}

/* ---- host names and IPv6 for the rendezvous ---- */

static int rank_small(int rank, int world, const char *rdv, void *arg)
{
    (void)arg;
    zt_comm *c = make_comm(rank, world, rdv, 20000, "s");
    float v[5];
    fill(v, ZT_F32, INTS, 9, rank, 0, 5);
    CHECK_OK(zt_comm_allreduce(c, v, 5, ZT_F32, NULL, E));
    for (size_t i = 0; i < 5; i++)
        check_sum("allreduce", v, ZT_F32, i, INTS, 9, world, chunk_of(5, world, i), i);
    zt_comm_destroy(c);
    return 0;
}

static int have_ipv6_loopback(void)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct sockaddr_in6 a;
    memset(&a, 0, sizeof(a));
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    int ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

static void run_addresses(void)
{
    int codes[CT_MAX_RANKS];
    ct_run_world_at("localhost", 3, rank_small, NULL, 30000, codes);
    ct_expect_all_ok("rendezvous by host name", 3, codes);
    printf("ok: rendezvous tcp://localhost:port\n");
    if (have_ipv6_loopback()) {
        ct_run_world_at("[::1]", 2, rank_small, NULL, 30000, codes);
        ct_expect_all_ok("rendezvous over IPv6", 2, codes);
        printf("ok: rendezvous tcp://[::1]:port\n");
    } else {
        printf("skipped: IPv6 rendezvous (no ::1 here)\n");
    }
}

/* ---- one rank: local copies, argument errors, configuration errors ---- */

static void run_single_rank_api(void)
{
    zt_comm *c = make_comm(0, 1, NULL, 0, NULL);
    float a[4] = {1, 2, 3, 4}, b[4] = {0};
    CHECK_OK(zt_comm_allreduce(c, a, 4, ZT_F32, NULL, E));
    ASSERT_EQ_INT((int)a[3], 4);
    CHECK_OK(zt_comm_reduce_scatter(c, a, b, 4, ZT_F32, NULL, E));
    ASSERT_EQ_INT((int)b[2], 3);
    memset(b, 0, sizeof(b));
    CHECK_OK(zt_comm_allgather(c, a, b, 4, ZT_F32, NULL, E));
    ASSERT_EQ_INT((int)b[1], 2);
    CHECK_OK(zt_comm_broadcast(c, a, sizeof(a), 0, NULL, E));
    CHECK_OK(zt_comm_barrier(c, E));
    zt_comm_req *q = NULL;
    CHECK_OK(zt_comm_allreduce(c, a, 4, ZT_BF16, &q, E));
    CHECK_OK(zt_comm_wait(c, q, E));
    zt_comm_stats st;
    zt_comm_get_stats(c, &st);
    ASSERT_EQ_INT(st.bytes_sent, 0);
    ASSERT_EQ_INT(st.collectives, 6);
    ASSERT_EQ_INT(zt_comm_last_seq(c), 6);

    /* a request left unwaited is freed by destroy (ASan checks) */
    CHECK_OK(zt_comm_allreduce(c, a, 4, ZT_F32, &q, E));

    /* bad arguments: a clear error, and the communicator is broken from then on */
    zt_err err;
    zt_err_clear(&err);
    zt_status s = zt_comm_allreduce(c, NULL, 10, ZT_F32, NULL, &err);
    ASSERT_EQ_INT(s, ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "allreduce #8 (10 x fp32)");
    ASSERT_CONTAINS(err.msg, "NULL buffer");
    zt_err_clear(&err);
    s = zt_comm_barrier(c, &err);
    ASSERT_EQ_INT(s, ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "the communicator failed earlier");
    ASSERT_CONTAINS(err.msg, "NULL buffer");
    zt_comm_destroy(c);
    zt_comm_destroy(NULL);

    /* overlapping buffers that are not "in place" */
    c = make_comm(0, 2 - 1, NULL, 0, NULL);
    float big[8] = {0};
    zt_err_clear(&err);
    s = zt_comm_reduce_scatter(c, big, big + 1, 4, ZT_F32, NULL, &err);
    ASSERT_EQ_INT(s, ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "overlap");
    zt_comm_destroy(c);

    /* bad options */
    zt_comm_opts o;
    memset(&o, 0, sizeof(o));
    o.rank = 2;
    o.world_size = 2;
    zt_err_clear(&err);
    ASSERT_EQ_INT(zt_comm_create(&c, zt_comm_backend_tcp(), &o, &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "ZT_RANK");
    ASSERT_TRUE(c == NULL);
    o.rank = 1;
    zt_err_clear(&err);
    ASSERT_EQ_INT(zt_comm_create(&c, zt_comm_backend_tcp(), &o, &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "ZT_RENDEZVOUS");
    o.rendezvous = "udp://1.2.3.4:5";
    zt_err_clear(&err);
    ASSERT_EQ_INT(zt_comm_create(&c, zt_comm_backend_tcp(), &o, &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "only tcp://");
    o.rendezvous = "tcp://127.0.0.1:99999";
    zt_err_clear(&err);
    ASSERT_EQ_INT(zt_comm_create(&c, zt_comm_backend_tcp(), &o, &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "port");
    o.rank = 0;
    o.world_size = 1;
    o.rendezvous = NULL;
    setenv("ZT_COMM_TIMEOUT_MS", "soon", 1);
    zt_err_clear(&err);
    ASSERT_EQ_INT(zt_comm_create(&c, zt_comm_backend_tcp(), &o, &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "ZT_COMM_TIMEOUT_MS='soon'");
    unsetenv("ZT_COMM_TIMEOUT_MS");
    zt_err_clear(&err);
    ASSERT_EQ_INT(zt_comm_create(&c, NULL, &o, &err), ZT_ERR_UNSUPPORTED);
    ASSERT_STREQ(zt_coll_kind_name(ZT_COLL_REDUCE_SCATTER), "reduce_scatter");
    printf("ok: single-rank API, argument and option errors\n");
}

/* ---- the reduction kernel against dtype.h, bit for bit (SIMD paths included) ---- */

static uint16_t to16(zt_dtype dt, float v)
{
    uint16_t h[2] = {0, 0}; /* room for a float store as far as the compiler knows */
    zt_store_f32(h, dt, 0, v);
    return h[0];
}

/* C leaves open which NaN an addition of two NaNs returns: any NaN is right. */
static int is_nan16(zt_dtype dt, uint16_t h)
{
    return dt == ZT_BF16 ? (h & 0x7f80) == 0x7f80 && (h & 0x7f)
                         : (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}

static void run_reduce_kernel(void)
{
    const size_t n = 65536 + 5; /* every 16-bit pattern, plus a tail that is not a multiple of 8 */
    uint16_t *a = zt_malloc(n * 2), *b = zt_malloc(n * 2), *o = zt_malloc(n * 2);
    ASSERT_TRUE(a && b && o);
    const zt_dtype dts[] = {ZT_BF16, ZT_F16};
    for (int d = 0; d < 2; d++)
        for (uint32_t k = 1; k < 65536; k += 251) {
            for (size_t i = 0; i < n; i++) {
                a[i] = (uint16_t)i;
                b[i] = (uint16_t)((uint32_t)i * k + k);
            }
            zt_comm_reduce_add(dts[d], o, a, b, n);
            for (size_t i = 0; i < n; i++) {
                float sum = zt_load_f32(a, dts[d], i) + zt_load_f32(b, dts[d], i);
                uint16_t want = to16(dts[d], sum);
                if (o[i] != want && !(is_nan16(dts[d], want) && is_nan16(dts[d], o[i])))
                    ZT_FAIL("%s: 0x%04x + 0x%04x gave 0x%04x, dtype.h gives 0x%04x",
                            zt_dtype_name(dts[d]), a[i], b[i], o[i], want);
            }
            /* in place: out aliases own */
            memcpy(o, b, n * 2);
            zt_comm_reduce_add(dts[d], o, a, o, n);
            for (size_t i = 0; i < n; i++) {
                uint16_t want = to16(dts[d], zt_load_f32(a, dts[d], i) + zt_load_f32(b, dts[d], i));
                if (!(is_nan16(dts[d], want) && is_nan16(dts[d], o[i]))) ASSERT_EQ_INT(o[i], want);
            }
        }
    float x[19], y[19], z[19];
    for (int i = 0; i < 19; i++) {
        x[i] = (float)i * 0.1f;
        y[i] = 1.0f / (float)(i + 1);
    }
    zt_comm_reduce_add(ZT_F32, z, x, y, 19);
    for (int i = 0; i < 19; i++)
        ASSERT_EQ_INT(zt_f32_bits(z[i]), zt_f32_bits(x[i] + y[i]));
    zt_free(o);
    zt_free(b);
    zt_free(a);
    printf("ok: reduction kernel matches dtype.h bit for bit\n");
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    sh = ct_shared_create();
    signal(SIGPIPE, SIG_DFL); /* the library must never raise it */
    if (!only || !strcmp(only, "api")) run_single_rank_api();
    if (!only || !strcmp(only, "reduce")) run_reduce_kernel();
    if (!only || !strcmp(only, "worlds")) run_worlds();
    if (!only || !strcmp(only, "determinism")) run_determinism();
    if (!only || !strcmp(only, "async")) run_async();
    if (!only || !strcmp(only, "addresses")) run_addresses();
    if (!only || !strcmp(only, "stall")) run_stall();
    return 0;
}
