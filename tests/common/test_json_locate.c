/* Tests common/json_locate.c: line:column of key paths in raw JSON text and the duplicate-key
 * finder that jobfile.c's messages rely on. */
#include "common/json_locate.h"

#include <string.h>

#include "tests/test.h"

#define SEG(k)                                                                                     \
    {                                                                                              \
        k, 0                                                                                       \
    }
#define IDX(i)                                                                                     \
    {                                                                                              \
        NULL, i                                                                                    \
    }

static void expect_at(const char *text, const zt_json_seg *path, size_t depth, int kl, int kc,
                      int vl, int vc)
{
    zt_json_loc k, v;
    if (!zt_json_locate(text, strlen(text), path, depth, &k, &v))
        ZT_FAIL("path of depth %zu not found in %s", depth, text);
    ASSERT_EQ_INT(k.line, kl);
    ASSERT_EQ_INT(k.col, kc);
    ASSERT_EQ_INT(v.line, vl);
    ASSERT_EQ_INT(v.col, vc);
    /* the offsets agree with the line:col */
    zt_json_loc again = zt_json_offset_loc(text, strlen(text), k.offset);
    ASSERT_EQ_INT(again.line, kl);
    ASSERT_EQ_INT(again.col, kc);
}

static void expect_missing(const char *text, const zt_json_seg *path, size_t depth)
{
    zt_json_loc k = {0, -1, -1};
    ASSERT_TRUE(!zt_json_locate(text, strlen(text), path, depth, &k, NULL));
    ASSERT_EQ_INT(k.line, -1); /* untouched on failure */
}

static void test_locate(void)
{
    const char *t = "{\n"
                    "  \"name\": \"tiny\",\n"
                    "  \"model\": {\"n_layer\": 4, \"n_head\": 4},\n"
                    "  \"deepspeed\": {\n"
                    "    \"optimizer\": {\"params\": {\"betas\": [0.9, 0.95]}},\n"
                    "    \"zero_optimization\": {\n"
                    "      \"stage\": 2\n"
                    "    }\n"
                    "  }\n"
                    "}\n";
    zt_json_seg p1[] = {SEG("name")};
    expect_at(t, p1, 1, 2, 3, 2, 11);
    zt_json_seg p2[] = {SEG("model"), SEG("n_head")};
    expect_at(t, p2, 2, 3, 27, 3, 37);
    zt_json_seg p3[] = {SEG("deepspeed"), SEG("zero_optimization"), SEG("stage")};
    expect_at(t, p3, 3, 7, 7, 7, 16);
    zt_json_seg p4[] = {SEG("deepspeed"), SEG("optimizer"), SEG("params"), SEG("betas"), IDX(1)};
    expect_at(t, p4, 5, 5, 45, 5, 45);
    zt_json_seg p5[] = {SEG("deepspeed"), SEG("optimizer"), SEG("params"), SEG("betas"), IDX(0)};
    expect_at(t, p5, 5, 5, 40, 5, 40);
    /* depth 0 is the root value */
    expect_at(t, NULL, 0, 1, 1, 1, 1);

    /* missing keys, indices out of range, wrong container kinds */
    zt_json_seg m1[] = {SEG("model"), SEG("n_embd")};
    expect_missing(t, m1, 2);
    zt_json_seg m2[] = {SEG("deepspeed"), SEG("optimizer"), SEG("params"), SEG("betas"), IDX(2)};
    expect_missing(t, m2, 5);
    zt_json_seg m3[] = {SEG("name"), SEG("x")};
    expect_missing(t, m3, 2);
    zt_json_seg m4[] = {SEG("model"), IDX(0)};
    expect_missing(t, m4, 2);
    zt_json_seg m5[] = {SEG("stage")}; /* exists only deeper */
    expect_missing(t, m5, 1);
    expect_missing("", NULL, 0);
    expect_missing("   \n", NULL, 0);
}

static void test_tricky_text(void)
{
    /* Strings holding braces, brackets, quotes, escapes and the key name itself must be
     * skipped whole; an escaped key matches its decoded form. */
    const char *t = "{\"a\": \"}]{[\\\"stage\\\"\", \"b\": [\"x\", {\"stage\": 1}],\n"
                    " \"\\u0073tage\": 3, \"stage\": 4}";
    zt_json_seg p[] = {SEG("stage")};
    expect_at(t, p, 1, 2, 2, 2, 16);
    zt_json_seg q[] = {SEG("b"), IDX(1), SEG("stage")};
    expect_at(t, q, 3, 1, 36, 1, 45);

    /* Columns count characters, not bytes, as jansson does: "é" is two bytes. */
    const char *u = "{\"é\": 1,\n \"ü\": {\"k\": true}}";
    zt_json_seg r[] = {SEG("ü"), SEG("k")};
    expect_at(u, r, 2, 2, 8, 2, 13);
    zt_json_seg s[] = {SEG("é")};
    expect_at(u, s, 1, 1, 2, 1, 7);

    /* Surrogate pairs decode to one 4-byte character. */
    const char *w = "{\"\\ud83d\\ude00\": 7}";
    zt_json_seg e[] = {SEG("\xf0\x9f\x98\x80")};
    expect_at(w, e, 1, 1, 2, 1, 18);

    /* Tabs and CRLF line ends. */
    const char *x = "{\r\n\t\"a\":\t{\r\n\t\t\"b\": null}}";
    zt_json_seg ab[] = {SEG("a"), SEG("b")};
    expect_at(x, ab, 2, 3, 3, 3, 8);

    /* Truncated or broken text: no crash, no match past the end. */
    const char *broken[] = {"{\"a\": ",
                            "{\"a\": \"unterminated",
                            "{\"a\" 1}",
                            "{\"a\": [1, 2",
                            "{\"a\": {\"b\": \"\\u12\"}}",
                            "[",
                            "{\"a\": \"\\",
                            "{\"\\x\": 1}"};
    for (size_t i = 0; i < sizeof(broken) / sizeof(broken[0]); i++) {
        zt_json_seg deep[] = {SEG("a"), SEG("b"), IDX(3)};
        zt_json_loc loc;
        ASSERT_TRUE(!zt_json_locate(broken[i], strlen(broken[i]), deep, 3, &loc, NULL));
        char path[64];
        ASSERT_TRUE(
            !zt_json_find_duplicate(broken[i], strlen(broken[i]), path, sizeof(path), NULL, NULL));
    }
    /* the length bounds the scan even if the buffer continues */
    const char *longer = "{\"a\": 1, \"b\": 2}";
    zt_json_seg b[] = {SEG("b")};
    zt_json_loc loc;
    ASSERT_TRUE(!zt_json_locate(longer, 8, b, 1, &loc, NULL));
    ASSERT_TRUE(zt_json_locate(longer, strlen(longer), b, 1, &loc, NULL));
}

static void test_duplicates(void)
{
    char path[128];
    zt_json_loc first, second;
    const char *t = "{\n  \"model\": {\"n_layer\": 4,\n             \"n_layer\": 5}\n}";
    ASSERT_TRUE(zt_json_find_duplicate(t, strlen(t), path, sizeof(path), &first, &second));
    ASSERT_STREQ(path, "model.n_layer");
    ASSERT_EQ_INT(first.line, 2);
    ASSERT_EQ_INT(first.col, 13);
    ASSERT_EQ_INT(second.line, 3);
    ASSERT_EQ_INT(second.col, 14);

    /* inside an array of objects; the same key in sibling objects is not a duplicate */
    const char *a = "{\"x\": [{\"k\": 1}, {\"k\": 2}, {\"j\": 1, \"j\": 2}]}";
    ASSERT_TRUE(zt_json_find_duplicate(a, strlen(a), path, sizeof(path), &first, &second));
    ASSERT_STREQ(path, "x[2].j");
    ASSERT_EQ_INT(second.col, 37);

    /* escaped spelling of the same key is a duplicate too (jansson agrees) */
    const char *e = "{\"stage\": 1, \"st\\u0061ge\": 2}";
    ASSERT_TRUE(zt_json_find_duplicate(e, strlen(e), path, sizeof(path), &first, &second));
    ASSERT_STREQ(path, "stage");
    ASSERT_EQ_INT(first.col, 2);
    ASSERT_EQ_INT(second.col, 14);

    /* the first duplicate in text order wins; a short buffer truncates the path */
    const char *two = "{\"aaaa\": {\"b\": 1, \"b\": 2}, \"c\": 1, \"c\": 2}";
    char small[4];
    ASSERT_TRUE(zt_json_find_duplicate(two, strlen(two), small, sizeof(small), NULL, NULL));
    ASSERT_STREQ(small, "aaa");

    const char *none = "{\"a\": {\"a\": {\"a\": [1, {\"a\": 2}]}}, \"b\": []}";
    ASSERT_TRUE(!zt_json_find_duplicate(none, strlen(none), path, sizeof(path), NULL, NULL));
    ASSERT_STREQ(path, "");
    ASSERT_TRUE(!zt_json_find_duplicate(NULL, 0, path, sizeof(path), NULL, NULL));

    /* very deep nesting gives up instead of recursing without bound */
    char deep[600];
    size_t n = 0;
    for (int i = 0; i < 200; i++)
        deep[n++] = '[';
    for (int i = 0; i < 200; i++)
        deep[n++] = ']';
    deep[n] = '\0';
    ASSERT_TRUE(!zt_json_find_duplicate(deep, n, path, sizeof(path), NULL, NULL));
}

static void test_offset_loc(void)
{
    const char *t = "ab\ncd\n\xc3\xa9x";
    zt_json_loc l = zt_json_offset_loc(t, strlen(t), 0);
    ASSERT_EQ_INT(l.line, 1);
    ASSERT_EQ_INT(l.col, 1);
    l = zt_json_offset_loc(t, strlen(t), 4);
    ASSERT_EQ_INT(l.line, 2);
    ASSERT_EQ_INT(l.col, 2);
    l = zt_json_offset_loc(t, strlen(t), 8); /* the x after a 2-byte character */
    ASSERT_EQ_INT(l.line, 3);
    ASSERT_EQ_INT(l.col, 2);
    l = zt_json_offset_loc(t, strlen(t), 1000); /* clamped */
    ASSERT_EQ_INT(l.offset, strlen(t));
    ASSERT_EQ_INT(l.line, 3);
    ASSERT_EQ_INT(l.col, 3);
}

int main(void)
{
    test_locate();
    test_tricky_text();
    test_duplicates();
    test_offset_loc();
    printf("test_json_locate: ok\n");
    return 0;
}
