/* Tests coordinator/sched.c: gang placement (all ranks or none), ranks per node, packing,
 * priority then FIFO, head-of-line blocking per device, jobs that can never fit or wait out
 * a backoff (they block nobody), the pending reasons, exit classification and backoff. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/sched.h"
#include "tests/test.h"

#define MAXA 8
static bool busy[MAXA][16];
static zt_sched_agent agents[MAXA];

static void agent(int i, const char *name, int device, int slots, int used, bool alive)
{
    memset(busy[i], 0, sizeof(busy[i]));
    for (int s = 0; s < used; s++)
        busy[i][s] = true;
    agents[i] = (zt_sched_agent){
        .name = name, .device = device, .alive = alive, .slots = slots, .busy = busy[i]};
}

static zt_sched_slot slots[8][16];
static zt_sched_decision dec[8];

static void plan(int n_agents, const zt_sched_job *jobs, int n_jobs)
{
    for (int i = 0; i < n_jobs; i++) {
        memset(&dec[i], 0, sizeof(dec[i]));
        dec[i].ranks = slots[i];
    }
    zt_sched_plan(agents, (size_t)n_agents, jobs, (size_t)n_jobs, dec);
}

static void test_gang_and_packing(void)
{
    agent(0, "n1", 1, 4, 2, true); /* 2 free */
    agent(1, "n2", 1, 4, 0, true); /* 4 free */
    zt_sched_job j = {.id = 1, .ranks = 5, .ranks_per_node = 4, .device = 1, .eligible = true};
    plan(2, &j, 1);
    ASSERT_TRUE(dec[0].placed);
    /* most free first: ranks 0-3 on n2, rank 4 on n1's first free slot (2) */
    for (int r = 0; r < 4; r++) {
        ASSERT_EQ_INT(slots[0][r].agent, 1);
        ASSERT_EQ_INT(slots[0][r].local_rank, r);
        ASSERT_EQ_INT(slots[0][r].slot, r);
    }
    ASSERT_EQ_INT(slots[0][4].agent, 0);
    ASSERT_EQ_INT(slots[0][4].local_rank, 0);
    ASSERT_EQ_INT(slots[0][4].slot, 2);
    ASSERT_TRUE(busy[0][2] && !busy[0][3]);

    /* all or nothing: 2 free left, a job of 3 waits and nothing is taken */
    zt_sched_job k = {.id = 2, .ranks = 3, .ranks_per_node = 3, .device = 1, .eligible = true};
    plan(2, &k, 1);
    ASSERT_TRUE(!dec[0].placed);
    ASSERT_CONTAINS(dec[0].reason, "waiting for free slots: needs 3 cpu slots");
    ASSERT_CONTAINS(dec[0].reason, "1 free now");
    ASSERT_CONTAINS(dec[0].reason, "n1 1/4");
    ASSERT_TRUE(!busy[0][3]);
}

static void test_ranks_per_node(void)
{
    agent(0, "big", 1, 8, 0, true);
    zt_sched_job j = {.id = 1, .ranks = 2, .ranks_per_node = 1, .device = 1, .eligible = true};
    plan(1, &j, 1);
    ASSERT_TRUE(!dec[0].placed);
    ASSERT_CONTAINS(dec[0].reason, "cluster too small: needs 2 cpu slots with at most 1 per node");
    agent(1, "big2", 1, 8, 0, true);
    plan(2, &j, 1);
    ASSERT_TRUE(dec[0].placed);
    ASSERT_NE_INT(slots[0][0].agent, slots[0][1].agent);
    ASSERT_EQ_INT(slots[0][1].local_rank, 0);
}

static void test_order_and_blocking(void)
{
    agent(0, "c1", 1, 2, 0, true);
    agent(1, "g1", 2, 2, 0, true);
    zt_sched_job jobs[5] = {
        {.id = 10, .priority = 0, .ranks = 2, .ranks_per_node = 2, .device = 1, .eligible = true},
        {.id = 11, .priority = 5, .ranks = 1, .ranks_per_node = 1, .device = 1, .eligible = true},
        {.id = 12, .priority = 0, .ranks = 1, .ranks_per_node = 1, .device = 1, .eligible = true},
        {.id = 13, .priority = 0, .ranks = 2, .ranks_per_node = 2, .device = 2, .eligible = true},
        {.id = 14, .priority = 9, .ranks = 64, .ranks_per_node = 64, .device = 1, .eligible = true},
    };
    plan(2, jobs, 5);
    /* 14 can never fit: skipped, blocks nobody; 11 (priority 5) goes first; 10 then needs 2
     * but 1 is free: it waits and blocks 12 (FIFO, no starvation); cuda job 13 is not blocked */
    ASSERT_TRUE(!dec[4].placed);
    ASSERT_CONTAINS(dec[4].reason, "cluster too small");
    ASSERT_TRUE(dec[1].placed);
    ASSERT_TRUE(!dec[0].placed);
    ASSERT_CONTAINS(dec[0].reason, "waiting for free slots");
    ASSERT_TRUE(!dec[2].placed);
    ASSERT_CONTAINS(dec[2].reason, "waiting behind job 10 (priority 0)");
    ASSERT_TRUE(dec[3].placed);
    ASSERT_EQ_INT(slots[3][0].agent, 1);

    /* a job in restart backoff is skipped and blocks nobody */
    agent(0, "c1", 1, 2, 0, true);
    zt_sched_job b[2] = {
        {.id = 1, .ranks = 2, .ranks_per_node = 2, .device = 1, .eligible = false},
        {.id = 2, .ranks = 2, .ranks_per_node = 2, .device = 1, .eligible = true},
    };
    plan(1, b, 2);
    ASSERT_TRUE(!dec[0].placed);
    ASSERT_TRUE(dec[1].placed);
}

static void test_no_agents(void)
{
    zt_sched_job j = {.id = 1, .ranks = 1, .ranks_per_node = 1, .device = 2, .eligible = true};
    agent(0, "c1", 1, 4, 0, true);
    agent(1, "g-dead", 2, 4, 0, false);
    plan(2, &j, 1);
    ASSERT_TRUE(!dec[0].placed);
    ASSERT_CONTAINS(dec[0].reason, "no live agent offers cuda slots");
    plan(0, &j, 1);
    ASSERT_TRUE(!dec[0].placed);
}

static void test_exit_and_backoff(void)
{
    char why[160];
    ASSERT_EQ_INT(zt_sched_classify_exit(0, 0, why, sizeof(why)), ZT_EXIT_OK);
    ASSERT_EQ_INT(zt_sched_classify_exit(1, 0, why, sizeof(why)), ZT_EXIT_RETRYABLE);
    ASSERT_STREQ(why, "exited with code 1");
    ASSERT_EQ_INT(zt_sched_classify_exit(78, 0, why, sizeof(why)), ZT_EXIT_FATAL);
    ASSERT_CONTAINS(why, "configuration error");
    ASSERT_EQ_INT(zt_sched_classify_exit(65, 0, why, sizeof(why)), ZT_EXIT_FATAL);
    ASSERT_EQ_INT(zt_sched_classify_exit(127, 0, why, sizeof(why)), ZT_EXIT_FATAL);
    ASSERT_EQ_INT(zt_sched_classify_exit(0, SIGKILL, why, sizeof(why)), ZT_EXIT_RETRYABLE);
    ASSERT_CONTAINS(why, "signal 9");
    ASSERT_EQ_INT(zt_sched_classify_exit(0, SIGSEGV, NULL, 0), ZT_EXIT_RETRYABLE);
    ASSERT_EQ_INT(zt_sched_backoff_ms(1000, 8000, 1), 1000);
    ASSERT_EQ_INT(zt_sched_backoff_ms(1000, 8000, 2), 2000);
    ASSERT_EQ_INT(zt_sched_backoff_ms(1000, 8000, 4), 8000);
    ASSERT_EQ_INT(zt_sched_backoff_ms(1000, 8000, 60), 8000);
    ASSERT_EQ_INT(zt_sched_backoff_ms(0, 8000, 3), 0);
}

int main(void)
{
    test_gang_and_packing();
    test_ranks_per_node();
    test_order_and_blocking();
    test_no_agents();
    test_exit_and_backoff();
    printf("test_sched: ok\n");
    return 0;
}
