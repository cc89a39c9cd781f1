/* zerotrain tests: how the TCP collectives fail. A rank that dies mid-collective, a rank that
 * stalls, mismatched collectives, a wrong session, a missing or late rank 0, zt_comm_abort from
 * another thread and destroy with work pending: every rank gets a clear error naming the
 * culprit, the collective and its sequence number within the timeout, never a hang or SIGPIPE. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "common/alloc.h"
#include "engine/comm/comm.h"
#include "tests/engine/comm_test_util.h"
#include "tests/test.h"

static ct_shared *sh;

static zt_status try_create(zt_comm **c, int rank, int world, const char *rdv, int timeout_ms,
                            const char *session, zt_err *err)
{
    zt_comm_opts o;
    memset(&o, 0, sizeof(o));
    o.rank = rank;
    o.world_size = world;
    o.rendezvous = rdv;
    o.session = session;
    o.timeout_ms = timeout_ms;
    zt_err_clear(err);
    return zt_comm_create(c, zt_comm_backend_tcp(), &o, err);
}

static zt_comm *make_comm(int rank, int world, const char *rdv, int timeout_ms)
{
    zt_comm *c = NULL;
    zt_err err;
    if (try_create(&c, rank, world, rdv, timeout_ms, "fail-test", &err) != ZT_OK)
        ZT_FAIL("rank %d: zt_comm_create: %s", rank, zt_err_msg(&err));
    return c;
}

/* A first collective that must work, so that the failure comes at #2. */
static void warm_up(zt_comm *c)
{
    float v[3] = {1, 2, 3};
    zt_err err;
    zt_err_clear(&err);
    if (zt_comm_allreduce(c, v, 3, ZT_F32, NULL, &err) != ZT_OK)
        ZT_FAIL("warm-up allreduce: %s", zt_err_msg(&err));
    ASSERT_EQ_INT((int)v[2], 3 * zt_comm_world_size(c));
}

static void record(int rank, zt_status st, const zt_err *err, double t0)
{
    sh->status[rank] = (int)st;
    sh->elapsed_ms[rank] = ct_now_ms() - t0;
    snprintf(sh->msg[rank], sizeof(sh->msg[rank]), "%s", st == ZT_OK ? "ok" : err->msg);
}

static void show(const char *name, int world)
{
    printf("-- %s\n", name);
    for (int r = 0; r < world; r++)
        if (sh->msg[r][0])
            printf("   rank %d: %s after %.0f ms: %s\n", r,
                   zt_status_name((zt_status)sh->status[r]), sh->elapsed_ms[r], sh->msg[r]);
}

static void reset_shared(void)
{
    memset(sh->status, 0, sizeof(sh->status));
    memset(sh->elapsed_ms, 0, sizeof(sh->elapsed_ms));
    memset(sh->msg, 0, sizeof(sh->msg));
}

/* Later calls fail at once with the first error. */
static void expect_broken(zt_comm *c, zt_status first)
{
    zt_err err;
    zt_err_clear(&err);
    ASSERT_TRUE(zt_comm_is_broken(c));
    double t0 = ct_now_ms();
    zt_status st = zt_comm_barrier(c, &err);
    ASSERT_EQ_INT(st, first);
    ASSERT_CONTAINS(err.msg, "failed earlier");
    ASSERT_TRUE(ct_now_ms() - t0 < 200);
    char recent[4096];
    zt_comm_describe_recent(c, recent, sizeof(recent));
    ASSERT_CONTAINS(recent, "#2");
    ASSERT_CONTAINS(recent, "failed (");
}

/* ---- a rank exits in the middle of a large allreduce ---- */

#define BIG (4u << 20)

static int rank_exit_mid(int rank, int world, const char *rdv, void *arg)
{
    (void)arg;
    zt_comm *c = make_comm(rank, world, rdv, 5000);
    warm_up(c);
    float *buf = zt_calloc(BIG, sizeof(float));
    ASSERT_TRUE(buf != NULL);
    zt_err err;
    zt_err_clear(&err);
    if (rank == 2) {
        zt_comm_req *q;
        zt_comm_allreduce(c, buf, BIG, ZT_F32, &q, &err);
        ct_sleep_ms(10);
        _exit(42); /* dies with the collective in flight */
    }
    double t0 = ct_now_ms();
    zt_status st = zt_comm_allreduce(c, buf, BIG, ZT_F32, NULL, &err);
    record(rank, st, &err, t0);
    ASSERT_EQ_INT(st, ZT_ERR_PEER);
    ASSERT_CONTAINS(err.msg, "allreduce #2 (4194304 x fp32)");
    ASSERT_CONTAINS(err.msg, "rank 2");
    ASSERT_CONTAINS(err.msg, "(it probably died)");
    ASSERT_TRUE(sh->elapsed_ms[rank] < 3000); /* well inside the 5 s timeout */
    expect_broken(c, ZT_ERR_PEER);
    zt_free(buf);
    zt_comm_destroy(c);
    return 0;
}

/* ---- a rank stalls before the collective ---- */

static int rank_stall(int rank, int world, const char *rdv, void *arg)
{
    (void)arg;
    zt_comm *c = make_comm(rank, world, rdv, 1500);
    warm_up(c);
    float buf[1000] = {0};
    zt_err err;
    zt_err_clear(&err);
    if (rank == 1) ct_sleep_ms(4000);
    double t0 = ct_now_ms();
    zt_status st = zt_comm_allreduce(c, buf, 1000, ZT_F32, NULL, &err);
    record(rank, st, &err, t0);
    ASSERT_EQ_INT(st, ZT_ERR_TIMEOUT);
    ASSERT_CONTAINS(err.msg, "allreduce #2 (1000 x fp32)");
    ASSERT_CONTAINS(err.msg, "nothing received from rank 1");
    if (rank != 1) {
        ASSERT_TRUE(sh->elapsed_ms[rank] > 1400);
        ASSERT_TRUE(sh->elapsed_ms[rank] < 3900);
    } else {
        ASSERT_TRUE(sh->elapsed_ms[rank] < 500); /* it learns at once what happened */
    }
    expect_broken(c, ZT_ERR_TIMEOUT);
    zt_comm_destroy(c);
    return 0;
}

/* ---- rank 1 calls allgather while the others call allreduce ---- */

static int rank_mismatch(int rank, int world, const char *rdv, void *arg)
{
    (void)arg;
    zt_comm *c = make_comm(rank, world, rdv, 5000);
    warm_up(c);
    float buf[1000] = {0};
    zt_err err;
    zt_err_clear(&err);
    double t0 = ct_now_ms();
    zt_status st;
    if (rank == 1)
        st = zt_comm_allgather(c, buf + 333, buf, 333, ZT_F32, NULL, &err);
    else
        st = zt_comm_allreduce(c, buf, 1000, ZT_F32, NULL, &err);
    record(rank, st, &err, t0);
    ASSERT_EQ_INT(st, ZT_ERR_STATE);
    ASSERT_CONTAINS(err.msg, "allgather #2 (333 x fp32)");
    ASSERT_CONTAINS(err.msg, "allreduce #2 (1000 x fp32)");
    ASSERT_CONTAINS(err.msg, "same order");
    ASSERT_TRUE(sh->elapsed_ms[rank] < 2000);
    expect_broken(c, ZT_ERR_STATE);
    zt_comm_destroy(c);
    return 0;
}

/* ---- a rank from another run attempt ---- */

static int rank_session(int rank, int world, const char *rdv, void *arg)
{
    (void)arg;
    zt_comm *c = NULL;
    zt_err err;
    double t0 = ct_now_ms();
    zt_status st =
        try_create(&c, rank, world, rdv, 1500, rank == 1 ? "attempt-2" : "attempt-1", &err);
    record(rank, st, &err, t0);
    ASSERT_TRUE(c == NULL);
    if (rank == 1) {
        ASSERT_EQ_INT(st, ZT_ERR_AUTH);
        ASSERT_CONTAINS(err.msg, "refused rank 1");
        ASSERT_CONTAINS(err.msg, "session 'attempt-2'");
        ASSERT_CONTAINS(err.msg, "'attempt-1'");
        ASSERT_TRUE(sh->elapsed_ms[rank] < 1000);
    } else {
        ASSERT_EQ_INT(st, ZT_ERR_TIMEOUT);
        ASSERT_CONTAINS(err.msg, "missing rank(s) 1");
        ASSERT_CONTAINS(err.msg, "attempt-2");
    }
    return 0;
}

/* ---- rank 0 never comes / comes late ---- */

static int rank_no_rank0(int rank, int world, const char *rdv, void *arg)
{
    (void)arg;
    if (rank == 0) return 0;
    zt_comm *c = NULL;
    zt_err err;
    double t0 = ct_now_ms();
    zt_status st = try_create(&c, rank, world, rdv, 1200, NULL, &err);
    record(rank, st, &err, t0);
    ASSERT_EQ_INT(st, ZT_ERR_TIMEOUT);
    ASSERT_CONTAINS(err.msg, "could not connect to rank 0");
    ASSERT_CONTAINS(err.msg, rdv);
    ASSERT_CONTAINS(err.msg, "ZT_RENDEZVOUS");
    ASSERT_TRUE(sh->elapsed_ms[rank] > 1100 && sh->elapsed_ms[rank] < 3000);
    return 0;
}

static int rank_late_rank0(int rank, int world, const char *rdv, void *arg)
{
    (void)arg;
    if (rank == 0) ct_sleep_ms(800);
    zt_comm *c = make_comm(rank, world, rdv, 10000);
    warm_up(c);
    zt_comm_destroy(c);
    return 0;
}

/* ---- zt_comm_abort from another thread ---- */

static void *aborter(void *arg)
{
    ct_sleep_ms(200);
    zt_comm_abort(arg);
    return NULL;
}

static int rank_abort(int rank, int world, const char *rdv, void *arg)
{
    (void)arg;
    zt_comm *c = make_comm(rank, world, rdv, 10000);
    warm_up(c);
    float buf[5000] = {0};
    zt_err err;
    zt_err_clear(&err);
    pthread_t th;
    if (rank == 1) pthread_create(&th, NULL, aborter, c);
    if (rank == 2) ct_sleep_ms(1500);
    double t0 = ct_now_ms();
    zt_status st = zt_comm_allreduce(c, buf, 5000, ZT_F32, NULL, &err);
    record(rank, st, &err, t0);
    ASSERT_CONTAINS(err.msg, "allreduce #2 (5000 x fp32)");
    ASSERT_CONTAINS(err.msg, "rank 1 aborted the communicator");
    if (rank == 1) {
        pthread_join(th, NULL);
        ASSERT_EQ_INT(st, ZT_ERR_CANCELED);
    } else {
        ASSERT_EQ_INT(st, ZT_ERR_PEER);
    }
    ASSERT_TRUE(sh->elapsed_ms[rank] < 1500); /* not the 10 s timeout */
    zt_comm_destroy(c);
    return 0;
}

/* ---- destroy with a request pending ---- */

static int rank_destroy_pending(int rank, int world, const char *rdv, void *arg)
{
    (void)arg;
    zt_comm *c = make_comm(rank, world, rdv, 10000);
    warm_up(c);
    float buf[100] = {0};
    zt_err err;
    zt_err_clear(&err);
    double t0 = ct_now_ms();
    if (rank == 0) {
        zt_comm_req *q;
        ASSERT_OK(zt_comm_allreduce(c, buf, 100, ZT_F32, &q, &err));
        zt_comm_destroy(c); /* abandons q */
        ASSERT_TRUE(ct_now_ms() - t0 < 1000);
        return 0;
    }
    ct_sleep_ms(300);
    zt_status st = zt_comm_allreduce(c, buf, 100, ZT_F32, NULL, &err);
    record(rank, st, &err, t0);
    ASSERT_EQ_INT(st, ZT_ERR_PEER);
    ASSERT_CONTAINS(err.msg, "rank 0 destroyed the communicator with 1 collective(s) pending");
    zt_comm_destroy(c);
    return 0;
}

typedef struct fcase {
    const char *name;
    int world;
    ct_rank_fn fn;
    int expect_code[CT_MAX_RANKS];
} fcase;

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    sh = ct_shared_create();
    signal(SIGPIPE, SIG_DFL); /* the library must never raise it */
    const fcase cases[] = {
        {"exit_mid", 4, rank_exit_mid, {0, 0, 42, 0}},
        {"stall", 3, rank_stall, {0}},
        {"mismatch", 3, rank_mismatch, {0}},
        {"session", 2, rank_session, {0}},
        {"no_rank0", 3, rank_no_rank0, {0}},
        {"late_rank0", 3, rank_late_rank0, {0}},
        {"abort", 3, rank_abort, {0}},
        {"destroy_pending", 2, rank_destroy_pending, {0}},
    };
    int ran = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const fcase *f = &cases[i];
        if (only && strcmp(only, f->name) != 0) continue;
        ran++;
        reset_shared();
        int codes[CT_MAX_RANKS];
        double t0 = ct_now_ms();
        ct_run_world(f->world, f->fn, NULL, 20000, codes);
        show(f->name, f->world);
        for (int r = 0; r < f->world; r++)
            if (codes[r] != f->expect_code[r])
                ZT_FAIL("%s: rank %d exited with %d, expected %d", f->name, r, codes[r],
                        f->expect_code[r]);
        printf("ok: %s (%.0f ms)\n", f->name, ct_now_ms() - t0);
    }
    if (!ran) ZT_FAIL("no test case named '%s'", only);
    return 0;
}
