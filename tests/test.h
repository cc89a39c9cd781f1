/* zerotrain: the tiny assertion kit every C test uses. Failures print both sides and
 * file:line, then exit(1), or, inside ZT_TEST_RUN, return to it so that the test goes on with
 * its next part (where a run is scarce, as on a lent GPU). A test that cannot run here exits
 * ZT_TEST_SKIP (77). */
#ifndef ZT_TESTS_TEST_H
#define ZT_TESTS_TEST_H

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZT_TEST_SKIP 77

/* Where ZT_FAIL returns to (NULL: it exits), and how many ZT_TEST_RUN parts failed. */
static inline jmp_buf **zt_test_jump(void)
{
    static jmp_buf *where;
    return &where;
}

static inline int *zt_test_failed_parts(void)
{
    static int n;
    return &n;
}

#define ZT_FAIL(...)                                                                               \
    do {                                                                                           \
        fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                                      \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        if (*zt_test_jump()) longjmp(**zt_test_jump(), 1);                                         \
        exit(1);                                                                                   \
    } while (0)

/* Runs `call`; a failure in it is counted (zt_test_failed_parts) and the caller goes on. What
 * the failed part allocated stays allocated: the process ends soon with exit status 1. */
#define ZT_TEST_RUN(call)                                                                          \
    do {                                                                                           \
        jmp_buf jb_;                                                                               \
        *zt_test_jump() = &jb_;                                                                    \
        if (setjmp(jb_) == 0) {                                                                    \
            call;                                                                                  \
        } else {                                                                                   \
            ++*zt_test_failed_parts();                                                             \
            fprintf(stderr, "  (%s failed; going on with the next part)\n", #call);                \
        }                                                                                          \
        *zt_test_jump() = NULL;                                                                    \
    } while (0)

#define ASSERT_TRUE(c)                                                                             \
    do {                                                                                           \
        if (!(c))                                                                                  \
            ZT_FAIL("expected true: %s", #c);                                                      \
    } while (0)

#define ASSERT_EQ_INT(a, b)                                                                        \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_)                                                                              \
            ZT_FAIL("%s == %s: %lld != %lld", #a, #b, a_, b_);                                     \
    } while (0)

#define ASSERT_NE_INT(a, b)                                                                        \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ == b_)                                                                              \
            ZT_FAIL("%s != %s: both %lld", #a, #b, a_);                                            \
    } while (0)

#define ASSERT_STREQ(a, b)                                                                         \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                                     \
            ZT_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); \
    } while (0)

/* haystack contains needle */
#define ASSERT_CONTAINS(hay, needle)                                                               \
    do {                                                                                           \
        const char *h_ = (hay), *n_ = (needle);                                                    \
        if (!h_ || !strstr(h_, n_))                                                                \
            ZT_FAIL("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)", n_);                     \
    } while (0)

/* |a-b| <= atol + rtol*|b| */
#define ASSERT_NEAR(a, b, rtol, atol)                                                              \
    do {                                                                                           \
        double a_ = (double)(a), b_ = (double)(b);                                                 \
        if (!(fabs(a_ - b_) <= (atol) + (rtol)*fabs(b_)))                                          \
            ZT_FAIL("%s ~= %s: %.9g vs %.9g (diff %.3g, rtol %g, atol %g)", #a, #b, a_, b_,        \
                    fabs(a_ - b_), (double)(rtol), (double)(atol));                                \
    } while (0)

#define ASSERT_OK(st)                                                                              \
    do {                                                                                           \
        int st_ = (int)(st);                                                                       \
        if (st_ != 0)                                                                              \
            ZT_FAIL("%s returned status %d", #st, st_);                                            \
    } while (0)

#endif
