/* Tests common/hangdiag.c: the sentence a hang ends an attempt with, for one stopped rank,
 * several, none (every rank waits: in one collective, or in different ones) and no reports. */
#include "common/hangdiag.h"

#include <stdio.h>
#include <string.h>

#include "tests/test.h"

static zt_hang_rank ranks[16];
static char buf[1024];

static void waits(int r, const char *op, int64_t seq, int64_t step, const char *part,
                  const char *prev_op)
{
    zt_hang_wait *w = &ranks[r].wait;
    w->waiting = true;
    snprintf(w->op, sizeof(w->op), "%s", op);
    snprintf(w->part, sizeof(w->part), "%s", part);
    snprintf(w->prev_op, sizeof(w->prev_op), "%s", prev_op);
    w->seq = seq;
    w->step = step;
    w->prev_seq = seq - 1;
    w->waited_ms = 3000;
}

static void reset(int n)
{
    memset(ranks, 0, sizeof(ranks));
    for (int i = 0; i < n; i++) {
        ranks[i].rank = i;
        ranks[i].step = 13;
    }
}

static void test_one_stopped(void)
{
    reset(4);
    waits(0, "allgather", 612, 14, "backward", "reduce_scatter");
    waits(2, "allgather", 612, 14, "backward", "reduce_scatter");
    waits(3, "allgather", 612, 14, "backward", "reduce_scatter");
    size_t n = zt_hang_describe(ranks, 4, buf, sizeof(buf));
    ASSERT_EQ_INT(n, strlen(buf));
    ASSERT_STREQ(buf, "hang: rank 1 stopped in backward at step 14 (last collective reduce_scatter #611); ranks 0, 2, 3 wait in allgather #612 for rank 1");
}

static void test_several_stopped_and_ranges(void)
{
    reset(12);
    for (int r = 0; r < 12; r++)
        if (r != 4 && r != 9) waits(r, "allreduce", 90, 3, "optimizer", "reduce_scatter");
    zt_hang_describe(ranks, 12, buf, sizeof(buf));
    ASSERT_STREQ(buf, "hang: ranks 4, 9 stopped in optimizer at step 3 (last collective reduce_scatter #89); ranks 0-3, 5-8, 10, 11 wait in allreduce #90 for ranks 4, 9");
}

static void test_ranks_in_two_collectives(void)
{
    /* a rank that stopped mid-way lets some peers finish a collective the others still wait in;
     * the stopped rank is placed at the lowest one */
    reset(4);
    waits(0, "allgather", 612, 14, "backward", "reduce_scatter");
    waits(2, "reduce_scatter", 611, 14, "backward", "allgather");
    waits(3, "allgather", 612, 14, "backward", "reduce_scatter");
    zt_hang_describe(ranks, 4, buf, sizeof(buf));
    ASSERT_STREQ(buf, "hang: rank 1 stopped in backward at step 14 (last collective allgather #610); rank 2 waits in reduce_scatter #611; ranks 0, 3 wait in allgather #612 for rank 1");
}

static void test_all_wait(void)
{
    reset(2);
    waits(0, "allreduce", 7, 2, "forward", "barrier");
    waits(1, "allreduce", 7, 2, "forward", "barrier");
    zt_hang_describe(ranks, 2, buf, sizeof(buf));
    ASSERT_CONTAINS(buf, "hang: every rank waits in allreduce #7 (step 2, forward)");
    reset(2);
    waits(0, "allreduce", 7, 2, "forward", "barrier");
    waits(1, "broadcast", 8, 2, "forward", "allreduce");
    zt_hang_describe(ranks, 2, buf, sizeof(buf));
    ASSERT_CONTAINS(buf, "rank 0 waits in allreduce #7; rank 1 waits in broadcast #8");
    ASSERT_CONTAINS(buf, "disagree");
}

static void test_no_reports_and_small_buffer(void)
{
    reset(3);
    ranks[2].step = 12;
    ranks[1].seq = 130;
    zt_hang_describe(ranks, 3, buf, sizeof(buf));
    ASSERT_STREQ(buf, "hang: no rank waits in a collective; last steps finished: rank 0 step 13, rank 1 step 13 (collective #130), rank 2 step 12");
    reset(4);
    waits(0, "allgather", 612, 14, "backward", "reduce_scatter");
    char small[20];
    size_t n = zt_hang_describe(ranks, 4, small, sizeof(small));
    ASSERT_EQ_INT(n, sizeof(small) - 1);
    ASSERT_EQ_INT(strlen(small), sizeof(small) - 1);
    ASSERT_EQ_INT(zt_hang_describe(ranks, 0, buf, sizeof(buf)) > 0, 1);
}

int main(void)
{
    test_one_stopped();
    test_several_stopped_and_ranges();
    test_ranks_in_two_collectives();
    test_all_wait();
    test_no_reports_and_small_buffer();
    printf("test_hangdiag: ok\n");
    return 0;
}
