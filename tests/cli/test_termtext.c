/* Tests cli/termtext.c: terminal controls in others' text come out as visible escapes (C0 but
 * tab and newline, DEL, C1 in its UTF-8 form, bytes that are not UTF-8); printable ASCII and
 * valid UTF-8 come out unchanged. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/termtext.h"
#include "tests/test.h"

static void expect(const char *in, size_t n, const char *want)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) ZT_FAIL("open_memstream failed");
    long w = zt_term_write(f, in, n);
    fclose(f);
    ASSERT_STREQ(buf, want);
    ASSERT_EQ_INT(w, (long)strlen(want));
    free(buf);
}

#define EXPECT(lit, want) expect(lit, sizeof(lit) - 1, want)

int main(void)
{
    /* unchanged */
    EXPECT("", "");
    EXPECT("step=3 loss=2.500000", "step=3 loss=2.500000");
    EXPECT("a\tb\nc", "a\tb\nc");
    EXPECT("back\\slash ~", "back\\slash ~");
    EXPECT("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xc2\xa0nbsp",
           "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xc2\xa0nbsp");
    /* C0 and DEL */
    EXPECT("\x1b[2J\x1b]0;owned\x07", "\\x1b[2J\\x1b]0;owned\\x07");
    EXPECT("over\rwrite", "over\\x0dwrite");
    EXPECT("bs\b\x7f", "bs\\x08\\x7f");
    expect("nul\0here", 8, "nul\\x00here");
    /* C1 (CSI is U+009B) in UTF-8 form; the character just past C1 is ordinary */
    EXPECT("\xc2\x9b[31m red", "\\u009b[31m red");
    EXPECT("\xc2\x80\xc2\x9f\xc2\xa0", "\\u0080\\u009f\xc2\xa0");
    /* not UTF-8: raw C1 bytes, a lone lead byte, overlong forms, surrogates, a cut sequence */
    EXPECT("\x9b[31m", "\\x9b[31m");
    EXPECT("\xc3(", "\\xc3(");
    EXPECT("\xc0\xaf", "\\xc0\\xaf");
    EXPECT("\xed\xa0\x80", "\\xed\\xa0\\x80");
    EXPECT("ok\xe2\x82", "ok\\xe2\\x82");
    EXPECT("\xff\xfe", "\\xff\\xfe");
    printf("test_termtext: ok\n");
    return 0;
}
