/* Tests common/utf8.c: validity per RFC 3629 (overlong forms, surrogates, code points above
 * U+10FFFF, truncated sequences), cleaning in place, and cutting on character boundaries. */
#include <string.h>

#include "common/utf8.h"
#include "tests/test.h"

static bool valid(const char *s)
{
    return zt_utf8_valid(s, strlen(s), NULL);
}

int main(void)
{
    /* valid: ASCII, 2-, 3- and 4-byte characters, the extremes */
    ASSERT_TRUE(valid(""));
    ASSERT_TRUE(valid("plain ascii"));
    ASSERT_TRUE(valid("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
    ASSERT_TRUE(
        valid("\xc2\x80 \xdf\xbf \xe0\xa0\x80 \xef\xbf\xbf \xf0\x90\x80\x80 \xf4\x8f\xbf\xbf"));
    /* invalid: a lone continuation, bad leads, overlong forms, surrogates, > U+10FFFF,
     * sequences cut short */
    const char *bad[] = {"\x80",
                         "\xff",
                         "\xfe",
                         "\xc0\xaf",
                         "\xc1\xbf",
                         "\xe0\x80\xaf",
                         "\xf0\x80\x80\xaf",
                         "\xed\xa0\x80",
                         "\xed\xbf\xbf",
                         "\xf4\x90\x80\x80",
                         "\xf5\x80\x80\x80",
                         "\xc3",
                         "\xe2\x82",
                         "\xf0\x9f\x98",
                         "\xe2\x28\xa1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (valid(bad[i])) ZT_FAIL("bad[%zu] was accepted", i);
    size_t at = 99;
    ASSERT_TRUE(!zt_utf8_valid("ok \xc3\xa9 \xff"
                               "bad",
                               10, &at));
    ASSERT_EQ_INT(at, 6);

    /* cleaning replaces each bad byte with '?' and keeps the good characters */
    char s1[] = "\xff"
                "bad \xc3\xa9 \xe2\x82 end \xf0\x9f\x98\x80";
    ASSERT_EQ_INT(zt_utf8_clean(s1, strlen(s1)), 3);
    ASSERT_STREQ(s1, "?bad \xc3\xa9 ?? end \xf0\x9f\x98\x80");
    ASSERT_TRUE(valid(s1));
    char s2[] = "already fine \xe2\x82\xac";
    ASSERT_EQ_INT(zt_utf8_clean(s2, strlen(s2)), 0);
    ASSERT_STREQ(s2, "already fine \xe2\x82\xac");

    /* cutting never splits a character */
    const char *t = "ab\xe2\x82\xac"; /* a, b, euro sign (3 bytes) */
    ASSERT_EQ_INT(zt_utf8_cut(t, 5, 10), 5);
    ASSERT_EQ_INT(zt_utf8_cut(t, 5, 5), 5);
    ASSERT_EQ_INT(zt_utf8_cut(t, 5, 4), 2);
    ASSERT_EQ_INT(zt_utf8_cut(t, 5, 3), 2);
    ASSERT_EQ_INT(zt_utf8_cut(t, 5, 2), 2);
    ASSERT_EQ_INT(zt_utf8_cut(t, 5, 1), 1);
    const char *emoji = "\xf0\x9f\x98\x80\xf0\x9f\x98\x80";
    for (size_t max = 0; max <= 8; max++) {
        size_t k = zt_utf8_cut(emoji, 8, max);
        ASSERT_EQ_INT(k, max / 4 * 4);
        ASSERT_TRUE(zt_utf8_valid(emoji, k, NULL));
    }

    /* a truncating snprintf's leftover is dropped; complete text is kept */
    char p1[] = "x\xe2\x82";
    ASSERT_EQ_INT(zt_utf8_trim_partial(p1), 1);
    ASSERT_STREQ(p1, "x");
    char p2[] = "x\xf0\x9f\x98";
    ASSERT_EQ_INT(zt_utf8_trim_partial(p2), 1);
    char p3[] = "x\xe2\x82\xac";
    ASSERT_EQ_INT(zt_utf8_trim_partial(p3), 4);
    char p4[] = "plain";
    ASSERT_EQ_INT(zt_utf8_trim_partial(p4), 5);
    char p5[] = "";
    ASSERT_EQ_INT(zt_utf8_trim_partial(p5), 0);

    /* positions for messages: lines from 1, columns in characters (the euro sign is one) */
    const char *pos = "ab\n\xe2\x82\xac\xffz";
    size_t line, col;
    zt_utf8_position(pos, 0, &line, &col);
    ASSERT_TRUE(line == 1 && col == 1);
    zt_utf8_position(pos, 2, &line, &col);
    ASSERT_TRUE(line == 1 && col == 3);
    zt_utf8_position(pos, 6, &line, &col); /* the 0xff after the euro sign */
    ASSERT_TRUE(line == 2 && col == 2);
    return 0;
}
