/* zerotrain tests: the op table's op times (ops.h mark and marks_take, ZT_OP_TIMES) on a
 * backend: off unless the variable was 1 when the context was created, a bad value warned and
 * off; each label's total in the order first seen, the intervals a NULL mark ends not counted,
 * the totals inside the wall-clock time around them, forgotten once taken; labels past the
 * table's room summed as "other"; more marks than the backend holds folded without loss.
 * Header-only; the CPU kernel test and test_gpu_ops include it. */
#ifndef ZT_TESTS_KERNELS_OPTIMES_CHECK_H
#define ZT_TESTS_KERNELS_OPTIMES_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/timeutil.h"
#include "kernels/ops.h"
#include "tests/test.h"

static double oc_now_ms(void)
{
    return (double)zt_now_ns() * 1e-6;
}

/* a context of ops created with ZT_OP_TIMES=value (NULL: unset); the log it wrote into log */
static zt_kctx *oc_ctx(const zt_ops *ops, const char *value, char *log, size_t n)
{
    FILE *f = tmpfile();
    ASSERT_TRUE(f != NULL);
    zt_log_set_file(f);
    if (value)
        setenv("ZT_OP_TIMES", value, 1);
    else
        unsetenv("ZT_OP_TIMES");
    zt_kctx *k = NULL;
    zt_err err;
    zt_status st = ops->ctx_create(&k, 0, &err);
    unsetenv("ZT_OP_TIMES");
    zt_log_set_file(stderr);
    if (st != ZT_OK) ZT_FAIL("%s ctx_create with ZT_OP_TIMES: %s", ops->name, zt_err_msg(&err));
    rewind(f);
    size_t got = fread(log, 1, n - 1, f);
    log[got] = '\0';
    fclose(f);
    return k;
}

/* the index of label in t, or -1 */
static int oc_find(const zt_optimes *t, const char *label)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->label[i], label) == 0) return i;
    return -1;
}

static void check_optimes(const zt_ops *ops)
{
    char log[4096];
    size_t bytes = (size_t)64 << 20;
    zt_optimes t;
    zt_err err;

    /* off: unset, "0", and a bad value (warned) */
    const char *off[] = {NULL, "0", "yes"};
    for (size_t v = 0; v < sizeof(off) / sizeof(off[0]); v++) {
        zt_kctx *k = oc_ctx(ops, off[v], log, sizeof(log));
        if (off[v] && strcmp(off[v], "yes") == 0) {
            ASSERT_CONTAINS(log, "ZT_OP_TIMES=yes");
            ASSERT_CONTAINS(log, "expected 0 or 1");
        } else {
            ASSERT_TRUE(strstr(log, "ZT_OP_TIMES") == NULL);
        }
        void *d = ops->alloc(k, bytes);
        ASSERT_TRUE(d != NULL);
        ops->mark(k, "a");
        ops->memset0(k, d, bytes);
        ops->mark(k, NULL);
        memset(&t, 0x5a, sizeof(t));
        ops->marks_take(k, &t);
        if (t.n != 0)
            ZT_FAIL("%s: op times with ZT_OP_TIMES %s: %d labels", ops->name,
                    off[v] ? off[v] : "unset", t.n);
        ops->free(k, d);
        ASSERT_OK(ops->sync(k, &err));
        ops->ctx_destroy(k);
    }

    zt_kctx *k = oc_ctx(ops, "1", log, sizeof(log));
    ASSERT_TRUE(strstr(log, "ZT_OP_TIMES") == NULL);
    void *d = ops->alloc(k, bytes);
    ASSERT_TRUE(d != NULL);
    ops->marks_take(k, &t);
    ASSERT_TRUE(t.n == 0);

    /* a, b, a, then a gap (after NULL) that counts for nothing, then c */
    double t0 = oc_now_ms();
    ops->mark(k, "a");
    ops->memset0(k, d, bytes);
    ops->mark(k, "b");
    ops->memset0(k, d, bytes);
    ops->memset0(k, d, bytes);
    ops->mark(k, "a");
    ops->memset0(k, d, bytes);
    ops->mark(k, NULL);
    ops->mark(k, NULL); /* nothing open: nothing */
    ops->memset0(k, d, bytes);
    ASSERT_OK(ops->sync(k, &err));
    double t1 = oc_now_ms();
    ops->mark(k, "c");
    ops->memset0(k, d, bytes);
    ops->marks_take(k, &t);
    double t2 = oc_now_ms();
    ASSERT_OK(ops->sync(k, &err));
    if (t.n != 3 || strcmp(t.label[0], "a") != 0 || strcmp(t.label[1], "b") != 0 ||
        strcmp(t.label[2], "c") != 0)
        ZT_FAIL("%s: op times' labels: %d of them, expected a, b, c in that order", ops->name, t.n);
    for (int i = 0; i < t.n; i++)
        if (!(t.ms[i] >= 0.0)) ZT_FAIL("%s: op time of %s: %g ms", ops->name, t.label[i], t.ms[i]);
    /* the intervals lie inside the wall-clock time around them (0.5 ms for the clocks'
     * granularity), a and b before t1 */
    if (!(t.ms[0] + t.ms[1] <= t1 - t0 + 0.5) || !(t.ms[0] + t.ms[1] + t.ms[2] <= t2 - t0 + 0.5))
        ZT_FAIL("%s: op times a %.3f + b %.3f + c %.3f ms, more than the %.3f / %.3f ms around "
                "them",
                ops->name, t.ms[0], t.ms[1], t.ms[2], t1 - t0, t2 - t0);
    printf("%s op times: a %.3f, b %.3f, c %.3f ms within %.3f ms\n", ops->name, t.ms[0], t.ms[1],
           t.ms[2], t2 - t0);
    ops->marks_take(k, &t);
    ASSERT_TRUE(t.n == 0); /* forgotten once taken */

    /* more labels than the table holds: the last slot is "other" */
    char names[ZT_OPTIMES_LABELS + 8][16];
    for (int i = 0; i < ZT_OPTIMES_LABELS + 8; i++) {
        snprintf(names[i], sizeof(names[i]), "l%d", i);
        ops->mark(k, names[i]);
    }
    ops->marks_take(k, &t);
    ASSERT_TRUE(t.n == ZT_OPTIMES_LABELS);
    ASSERT_TRUE(strcmp(t.label[ZT_OPTIMES_LABELS - 2], names[ZT_OPTIMES_LABELS - 2]) == 0);
    ASSERT_TRUE(strcmp(t.label[ZT_OPTIMES_LABELS - 1], "other") == 0);
    ASSERT_TRUE(oc_find(&t, names[ZT_OPTIMES_LABELS + 7]) == -1);

    /* many more marks than a backend holds before it reads them (cuda: ZT_CUDA_MARKS, 1024):
     * all folded into the two labels */
    int nm = 5000;
    ASSERT_OK(ops->sync(k, &err));
    t0 = oc_now_ms();
    for (int i = 0; i < nm; i++) {
        ops->mark(k, i % 2 ? "odd" : "even");
        ops->memset0(k, d, (size_t)1 << 20);
    }
    ops->marks_take(k, &t);
    t1 = oc_now_ms();
    if (t.n != 2 || oc_find(&t, "even") != 0 || oc_find(&t, "odd") != 1)
        ZT_FAIL("%s: %d marks: %d labels, expected even and odd", ops->name, nm, t.n);
    if (!(t.ms[0] >= 0.0 && t.ms[1] >= 0.0 && t.ms[0] + t.ms[1] <= t1 - t0 + 0.5))
        ZT_FAIL("%s: %d marks: even %.3f + odd %.3f ms, more than the %.3f ms around them",
                ops->name, nm, t.ms[0], t.ms[1], t1 - t0);
    printf("%s op times over %d marks: even %.3f, odd %.3f ms within %.3f ms\n", ops->name, nm,
           t.ms[0], t.ms[1], t1 - t0);
    ASSERT_OK(ops->sync(k, &err));
    ops->free(k, d);
    ops->ctx_destroy(k);
    printf("%s op times: ok\n", ops->name);
}

#endif
