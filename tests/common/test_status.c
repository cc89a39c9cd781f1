/* Tests common/status.c and common/alloc.c. */
#include "common/alloc.h"
#include "common/status.h"
#include "tests/test.h"

int main(void)
{
    ASSERT_STREQ(zt_strerror(ZT_OK), "ok");
    ASSERT_STREQ(zt_strerror(ZT_ERR_IO), "input/output error");
    ASSERT_STREQ(zt_status_name(ZT_ERR_CONFIG), "ERR_CONFIG");
    zt_err e;
    zt_err_clear(&e);
    ASSERT_STREQ(zt_err_msg(&e), "ok");
    ASSERT_EQ_INT(zt_err_set(&e, ZT_ERR_IO, "cannot open %s", "x.bin"), ZT_ERR_IO);
    ASSERT_STREQ(e.msg, "cannot open x.bin");
    zt_err_prefix(&e, "loading shard %d", 3);
    ASSERT_STREQ(e.msg, "loading shard 3: cannot open x.bin");
    ASSERT_EQ_INT(zt_err_set(NULL, ZT_ERR_IO, "ignored"), ZT_ERR_IO);

    /* failure injection: the third allocation from now fails, later ones too */
    zt_alloc_fail_after(2);
    void *a = zt_malloc(8), *b = zt_calloc(2, 8), *c = zt_malloc(8);
    ASSERT_TRUE(a && b && !c);
    zt_alloc_fail_after(-1);
    c = zt_strdup("abc");
    ASSERT_STREQ(c, "abc");
    char *s = zt_asprintf("%d-%s", 7, "x");
    ASSERT_STREQ(s, "7-x");
    zt_free(a);
    zt_free(b);
    zt_free(c);
    zt_free(s);
    return 0;
}
