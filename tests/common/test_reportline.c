/* Tests common/reportline.c: every kind of line zworker writes on ZT_REPORT_FD (taken from the
 * formats in engine.c and ckpt.c), the values zagent forwards, and lines it must refuse. */
#include "common/reportline.h"

#include "tests/test.h"

static zt_reportline r;

static void test_phase(void)
{
    zt_err err = {0};
    ASSERT_OK(zt_reportline_parse("rank=3 phase=training", &r, &err));
    ASSERT_EQ_INT(r.kind, ZT_REPORTLINE_PHASE);
    ASSERT_EQ_INT(r.rank, 3);
    ASSERT_EQ_INT(r.phase, 4);
    ASSERT_OK(zt_reportline_parse("rank=0 phase=rendezvous", &r, &err));
    ASSERT_EQ_INT(r.phase, 2);
    ASSERT_OK(zt_reportline_parse("rank=0 phase=checkpointing", &r, &err));
    ASSERT_EQ_INT(r.phase, 6);
    ASSERT_EQ_INT(zt_reportline_parse("rank=0 phase=dancing", &r, &err), ZT_ERR_FORMAT);
    ASSERT_CONTAINS(err.msg, "unknown phase");
    ASSERT_CONTAINS(err.msg, "rank=0 phase=dancing");
}

static void test_step(void)
{
    zt_err err = {0};
    const char *line =
        "rank=1 step=12 loss=3.412087 lr=3.0000e-04 grad_norm=0.812000 skipped=0 tok_s=51234 step_ms=3.03 fwd_ms=0.70 bwd_ms=0.96 opt_ms=0.07 comm_ms=1.29 tflops=0.0652 comm_bytes=482320 mem_params=1000 mem_master=0 mem_grads=2000 mem_optim=4000 mem_activations=300 mem_buffers=20 mem_comm=16 mem_host_optim=0 mem_model_states=7000 mem_peak=9999 val_loss=3.220719 coll_seq=77";
    ASSERT_OK(zt_reportline_parse(line, &r, &err));
    ASSERT_EQ_INT(r.kind, ZT_REPORTLINE_STEP);
    ASSERT_EQ_INT(r.rank, 1);
    ASSERT_EQ_INT(r.step, 12);
    ASSERT_NEAR(r.loss, 3.412087, 0, 1e-12);
    ASSERT_NEAR(r.tokens_per_s, 51234, 0, 0);
    ASSERT_EQ_INT(r.coll_seq, 77);
    ASSERT_EQ_INT(r.mem_peak, 9999);
    /* current memory: the categories, neither the model-state total nor the peak */
    ASSERT_EQ_INT(r.mem_bytes, 1000 + 2000 + 4000 + 300 + 20 + 16);
    /* every numeric pair but rank and step, in order */
    ASSERT_EQ_INT(r.n_values, 24);
    ASSERT_STREQ(r.values[0].key, "loss");
    ASSERT_STREQ(r.values[1].key, "lr");
    ASSERT_NEAR(r.values[1].value, 3e-4, 1e-12, 0);
    ASSERT_STREQ(r.values[r.n_values - 1].key, "coll_seq");
    ASSERT_STREQ(r.values[r.n_values - 2].key, "val_loss");
    for (int i = 0; i < r.n_values; i++)
        ASSERT_TRUE(strcmp(r.values[i].key, "step") != 0 && strcmp(r.values[i].key, "rank") != 0);
}

static void test_step_skips_junk(void)
{
    zt_err err = {0};
    ASSERT_OK(zt_reportline_parse("rank=0 step=5 loss=nan odd=abc bad-key=1 x y=2", &r, &err));
    ASSERT_EQ_INT(r.step, 5);
    ASSERT_EQ_INT(r.n_values, 1);
    ASSERT_STREQ(r.values[0].key, "y");
    /* more values than a report carries: the first 64 are kept */
    char line[8192];
    int n = snprintf(line, sizeof(line), "rank=0 step=1");
    for (int i = 0; i < 80; i++)
        n += snprintf(line + n, sizeof(line) - (size_t)n, " k%d=%d", i, i);
    ASSERT_OK(zt_reportline_parse(line, &r, &err));
    ASSERT_EQ_INT(r.n_values, ZT_REPORTLINE_MAX_VALUES);
    ASSERT_STREQ(r.values[63].key, "k63");
    ASSERT_EQ_INT(zt_reportline_parse("rank=0 step=-3 loss=1", &r, &err), ZT_ERR_FORMAT);
    ASSERT_CONTAINS(err.msg, "step");
}

static void test_ckpt(void)
{
    zt_err err = {0};
    ASSERT_OK(zt_reportline_parse(
        "rank=1 ckpt step=50 file=/data/ck/step_00000050/rank_00001.zts bytes=723520 crc32c=0a1b2c3d",
        &r, &err));
    ASSERT_EQ_INT(r.kind, ZT_REPORTLINE_CKPT);
    ASSERT_EQ_INT(r.rank, 1);
    ASSERT_EQ_INT(r.step, 50);
    ASSERT_STREQ(r.path, "/data/ck/step_00000050/rank_00001.zts");
    ASSERT_EQ_INT(r.bytes, 723520);
    ASSERT_EQ_INT(r.crc32c, 0x0a1b2c3du);
    /* a directory with spaces in it */
    ASSERT_OK(zt_reportline_parse(
        "rank=0 ckpt step=7 file=/tmp/my runs/a b/step_00000007/rank_00000.zts bytes=10 crc32c=ffffffff",
        &r, &err));
    ASSERT_STREQ(r.path, "/tmp/my runs/a b/step_00000007/rank_00000.zts");
    ASSERT_EQ_INT(r.crc32c, 0xffffffffu);
    ASSERT_EQ_INT(
        zt_reportline_parse("rank=0 ckpt step=7 file=/x/rank_00000.zts bytes=10", &r, &err),
        ZT_ERR_FORMAT);
    ASSERT_CONTAINS(err.msg, "crc32c");
    ASSERT_EQ_INT(
        zt_reportline_parse("rank=0 ckpt step=7 file=rel/rank.zts bytes=1 crc32c=1", &r, &err),
        ZT_ERR_FORMAT);
    ASSERT_EQ_INT(
        zt_reportline_parse("rank=0 ckpt step=7 file=/x/r.zts bytes=1 crc32c=xyz", &r, &err),
        ZT_ERR_FORMAT);
    ASSERT_EQ_INT(
        zt_reportline_parse("rank=0 ckpt step=7 file=/x/r.zts bytes=1 crc32c=123456789", &r, &err),
        ZT_ERR_FORMAT);
}

static void test_commit(void)
{
    zt_err err = {0};
    ASSERT_OK(zt_reportline_parse("rank=0 ckpt_commit step=100 dir=/c/step_00000100", &r, &err));
    ASSERT_EQ_INT(r.kind, ZT_REPORTLINE_COMMIT);
    ASSERT_EQ_INT(r.step, 100);
    ASSERT_STREQ(r.path, "/c/step_00000100");
    ASSERT_EQ_INT(zt_reportline_parse("rank=0 ckpt_commit step=100", &r, &err), ZT_ERR_FORMAT);
}

/* engine/ckpt.c's prune() line for a checkpoint deleted by keep_checkpoints */
static void test_removed(void)
{
    zt_err err = {0};
    ASSERT_OK(
        zt_reportline_parse("rank=0 ckpt_removed step=20 dir=/c/my ckpt/step_00000020", &r, &err));
    ASSERT_EQ_INT(r.kind, ZT_REPORTLINE_REMOVED);
    ASSERT_EQ_INT(r.rank, 0);
    ASSERT_EQ_INT(r.step, 20);
    ASSERT_STREQ(r.path, "/c/my ckpt/step_00000020"); /* a path with a space */
    const char *bad[] = {"rank=0 ckpt_removed step=20", "rank=0 ckpt_removed dir=/c/step_20",
                         "rank=0 ckpt_removed step=-2 dir=/c/step_20",
                         "rank=0 ckpt_removed step=20 dir=relative/step_20",
                         "rank=0 ckpt_removedx step=20 dir=/c/step_20"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        zt_err e2 = {0};
        zt_status st = zt_reportline_parse(bad[i], &r, &e2);
        if (st != ZT_ERR_FORMAT)
            ZT_FAIL("line \"%s\": status %d, expected ZT_ERR_FORMAT", bad[i], (int)st);
        ASSERT_CONTAINS(e2.msg, "report line");
    }
}

static void test_bad_lines(void)
{
    const char *bad[] = {"",
                         "   ",
                         "step=3 loss=1",
                         "rank= step=1",
                         "rank=x phase=training",
                         "rank=-1 phase=training",
                         "rank=0",
                         "rank=0 hello=1",
                         "rank=0 ckpt",
                         "rank=99999999999 phase=training"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        zt_err err = {0};
        zt_status st = zt_reportline_parse(bad[i], &r, &err);
        if (st != ZT_ERR_FORMAT)
            ZT_FAIL("line \"%s\": status %d, expected ZT_ERR_FORMAT", bad[i], (int)st);
        ASSERT_CONTAINS(err.msg, "report line");
    }
    ASSERT_EQ_INT(zt_reportline_phase("evaluating"), 5);
    ASSERT_EQ_INT(zt_reportline_phase("nope"), 0);
}

/* engine/comm/comm.c's stall reports (the watch thread's formats) */
static void test_wait(void)
{
    zt_err err = {0};
    ASSERT_OK(zt_reportline_parse(
        "rank=2 wait op=allgather seq=612 step=14 part=backward prev_op=reduce_scatter prev_seq=611 waited_ms=2003",
        &r, &err));
    ASSERT_EQ_INT(r.kind, ZT_REPORTLINE_WAIT);
    ASSERT_EQ_INT(r.rank, 2);
    ASSERT_STREQ(r.wait.op, "allgather");
    ASSERT_EQ_INT(r.wait.seq, 612);
    ASSERT_EQ_INT(r.wait.step, 14);
    ASSERT_STREQ(r.wait.part, "backward");
    ASSERT_STREQ(r.wait.prev_op, "reduce_scatter");
    ASSERT_EQ_INT(r.wait.prev_seq, 611);
    ASSERT_EQ_INT(r.wait.waited_ms, 2003);
    ASSERT_OK(zt_reportline_parse(
        "rank=0 wait op=barrier seq=1 step=0 part=setup prev_op=none prev_seq=0 waited_ms=0", &r,
        &err));
    ASSERT_STREQ(r.wait.prev_op, "none");
    ASSERT_OK(zt_reportline_parse("rank=1 wait_end seq=612 waited_ms=9000", &r, &err));
    ASSERT_EQ_INT(r.kind, ZT_REPORTLINE_WAIT_END);
    ASSERT_EQ_INT(r.wait.seq, 612);
    ASSERT_EQ_INT(r.wait.waited_ms, 9000);
    /* missing fields, a word with odd characters, seq 0 */
    ASSERT_EQ_INT(zt_reportline_parse("rank=1 wait op=allgather seq=3", &r, &err), ZT_ERR_FORMAT);
    ASSERT_CONTAINS(err.msg, "a wait line needs");
    ASSERT_EQ_INT(zt_reportline_parse(
                      "rank=1 wait op=all;gather seq=3 step=1 part=forward prev_op=none prev_seq=0 waited_ms=1",
                      &r, &err),
                  ZT_ERR_FORMAT);
    ASSERT_EQ_INT(zt_reportline_parse(
                      "rank=1 wait op=allgather seq=0 step=1 part=forward prev_op=none prev_seq=0 waited_ms=1",
                      &r, &err),
                  ZT_ERR_FORMAT);
    ASSERT_EQ_INT(zt_reportline_parse("rank=1 wait_end seq=0 waited_ms=1", &r, &err), ZT_ERR_FORMAT);
}

static void test_ckpt_bad(void)
{
    zt_err err = {0};
    ASSERT_OK(zt_reportline_parse(
        "rank=0 ckpt_bad step=40 dir=/ck/my run/step_00000040 why=rank_00001.zts: crc32c mismatch (file says 1a2b, data gives 3c4d); the shard is corrupt",
        &r, &err));
    ASSERT_EQ_INT(r.kind, ZT_REPORTLINE_CKPT_BAD);
    ASSERT_EQ_INT(r.step, 40);
    ASSERT_STREQ(r.path, "/ck/my run/step_00000040");
    ASSERT_STREQ(r.why,
                 "rank_00001.zts: crc32c mismatch (file says 1a2b, data gives 3c4d); the shard is corrupt");
    ASSERT_EQ_INT(zt_reportline_parse("rank=0 ckpt_bad step=4 dir=/x/step_4", &r, &err),
                  ZT_ERR_FORMAT);
    ASSERT_EQ_INT(zt_reportline_parse("rank=0 ckpt_bad step=4 dir=rel/step_4 why=x", &r, &err),
                  ZT_ERR_FORMAT);
}

/* rank 0's step line as zctl run reads it from its output: no rank prefix */
static void test_parse_step(void)
{
    zt_err err = {0};
    ASSERT_OK(zt_reportline_parse_step("step=7 loss=3.25 tok_s=900 val_loss=3.5 lr=nan", &r, &err));
    ASSERT_EQ_INT(r.kind, ZT_REPORTLINE_STEP);
    ASSERT_EQ_INT(r.step, 7);
    ASSERT_NEAR(r.loss, 3.25, 0, 0);
    ASSERT_NEAR(r.tokens_per_s, 900, 0, 0);
    ASSERT_EQ_INT(r.n_values, 3); /* lr=nan is not a number */
    ASSERT_STREQ(r.values[2].key, "val_loss");
    ASSERT_EQ_INT(zt_reportline_parse_step("loss=3.25", &r, &err), ZT_ERR_FORMAT);
    ASSERT_CONTAINS(err.msg, "no step=N");
}

int main(void)
{
    test_phase();
    test_step();
    test_step_skips_junk();
    test_ckpt();
    test_commit();
    test_removed();
    test_bad_lines();
    test_wait();
    test_ckpt_bad();
    test_parse_step();
    printf("test_reportline: ok\n");
    return 0;
}
