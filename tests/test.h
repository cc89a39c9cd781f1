/* zerotrain: the tiny assertion kit every C test uses. Failures print both sides and
 * file:line, then exit(1). A test that cannot run here exits ZT_TEST_SKIP (77). */
#ifndef ZT_TESTS_TEST_H
#define ZT_TESTS_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZT_TEST_SKIP 77

#define ZT_FAIL(...)                                                                               \
    do {                                                                                           \
        fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                                      \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        exit(1);                                                                                   \
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
