/* Tests common/secretfile.c: a good token file (with LF, CR LF or no newline) is read whole;
 * files others may read, directories, FIFOs, and secrets that are short, long, several lines,
 * or hold spaces or control characters are refused with a message naming the file. */
#define _XOPEN_SOURCE 700
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/secretfile.h"
#include "tests/test.h"
#include "tests/tmpdir.h"

#define GOOD "0123456789abcdef-token"

/* Writes n bytes of data to tmpdir/name with the given mode; returns the path. */
static const char *put(const char *name, const char *data, size_t n, mode_t mode)
{
    const char *p = path_of(name);
    unlink(p);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, data, n) != (ssize_t)n) ZT_FAIL("cannot write %s", p);
    close(fd);
    if (chmod(p, mode) != 0) ZT_FAIL("cannot chmod %s", p);
    return p;
}

static void expect_ok(const char *name, const char *data, const char *want)
{
    const char *p = put(name, data, strlen(data), 0600);
    zt_err err = {0};
    char *s = zt_secret_file_read(p, "the token file (--token-file)", &err);
    if (!s) ZT_FAIL("%s: refused: %s", name, zt_err_msg(&err));
    ASSERT_STREQ(s, want);
    zt_free(s);
}

/* Reading p fails with a message that holds the path, the origin and each of the needles. */
static void expect_refused(const char *p, const char *needle1, const char *needle2)
{
    zt_err err = {0};
    char *s = zt_secret_file_read(p, "the token file (ZT_TOKEN_FILE)", &err);
    if (s) ZT_FAIL("%s: accepted \"%s\"", p, s);
    ASSERT_NE_INT(err.status, ZT_OK);
    ASSERT_CONTAINS(err.msg, p);
    ASSERT_CONTAINS(err.msg, "the token file (ZT_TOKEN_FILE)");
    ASSERT_CONTAINS(err.msg, needle1);
    if (needle2) ASSERT_CONTAINS(err.msg, needle2);
    /* never the secret itself */
    if (strstr(err.msg, "0123456789abcdef")) ZT_FAIL("the message quotes the secret: %s", err.msg);
}

static void expect_content_refused(const char *name, const char *data, size_t n,
                                   const char *needle1, const char *needle2)
{
    expect_refused(put(name, data, n, 0600), needle1, needle2);
}

int main(void)
{
    if (tmpdir_create("zt_secretfile") != 0) ZT_FAIL("cannot create a temporary directory");

    /* accepted: one line, one trailing newline of either kind stripped, nothing else changed */
    expect_ok("lf", GOOD "\n", GOOD);
    expect_ok("crlf", GOOD "\r\n", GOOD);
    expect_ok("bare", GOOD, GOOD);
    expect_ok("sixteen", "0123456789abcdef", "0123456789abcdef");
    char big[ZT_SECRET_MAX + 2];
    memset(big, 'x', ZT_SECRET_MAX);
    big[ZT_SECRET_MAX] = '\n';
    big[ZT_SECRET_MAX + 1] = '\0';
    char want[ZT_SECRET_MAX + 1];
    memcpy(want, big, ZT_SECRET_MAX);
    want[ZT_SECRET_MAX] = '\0';
    expect_ok("max", big, want);
    /* the mode of the file, not of the link, counts: a Kubernetes secret volume links to it */
    put("target", GOOD "\n", strlen(GOOD) + 1, 0400);
    if (symlink(path_of("target"), path_of("link")) != 0) ZT_FAIL("cannot make a symlink");
    zt_err err = {0};
    char *s = zt_secret_file_read(path_of("link"), "the token file", &err);
    if (!s) ZT_FAIL("symlink to a 0400 file: %s", zt_err_msg(&err));
    ASSERT_STREQ(s, GOOD);
    zt_free(s);

    /* who may read it */
    expect_refused(put("g", GOOD "\n", strlen(GOOD) + 1, 0640), "mode 0640", "chmod 600");
    expect_refused(put("o", GOOD "\n", strlen(GOOD) + 1, 0604), "mode 0604", "chmod 600");
    expect_refused(put("w", GOOD "\n", strlen(GOOD) + 1, 0620), "mode 0620", "chmod 600");

    /* what it is */
    expect_refused(path_of("nothing-here"), "cannot read", "No such file");
    expect_refused(tmpdir, "is a directory", "give the path of the file");
    if (mkfifo(path_of("fifo"), 0600) != 0) ZT_FAIL("cannot make a FIFO");
    expect_refused(path_of("fifo"), "is a FIFO", NULL); /* and does not wait for a writer */

    /* what it holds */
    expect_content_refused("empty", "", 0, "is empty", "openssl rand");
    expect_content_refused("newline", "\n", 1, "is empty", NULL);
    expect_content_refused("short", "0123456789abcde\n", 16, "15 bytes", "shorter than the 16");
    expect_content_refused("short-len", "short\n", 6, "shorter than the 16", NULL);
    big[ZT_SECRET_MAX] = 'x'; /* 4097 bytes, then a newline: never cut to 4096 */
    big[ZT_SECRET_MAX + 1] = '\n';
    expect_content_refused("long", big, ZT_SECRET_MAX + 2, "longer than 4096 bytes", NULL);
    char huge[3 * ZT_SECRET_MAX];
    memset(huge, 'y', sizeof(huge));
    expect_content_refused("huge", huge, sizeof(huge), "longer than 4096 bytes", NULL);
    expect_content_refused("lines", GOOD "\n" GOOD "\n", 2 * strlen(GOOD) + 2, "more than one line",
                           NULL);
    expect_content_refused("two-newlines", GOOD "\n\n", strlen(GOOD) + 2, "more than one line",
                           NULL);
    expect_content_refused("space", "0123456789abcdef with space", 27, "a space", "byte 17");
    expect_content_refused("trailing-space", GOOD " \n", strlen(GOOD) + 2, "a space", NULL);
    expect_content_refused("tab", "\t" GOOD, strlen(GOOD) + 1, "a tab", "byte 1");
    expect_content_refused("cr", GOOD "\r", strlen(GOOD) + 1, "a carriage return", NULL);
    expect_content_refused("esc", GOOD "\x1b[0m", strlen(GOOD) + 4, "control character 0x1b", NULL);
    expect_content_refused("nul", "0123456789abcdef\0tail", 21, "a NUL byte", NULL);
    expect_content_refused("del", GOOD "\x7f", strlen(GOOD) + 1, "control character 0x7f", NULL);
    expect_content_refused("utf8", GOOD "\xc3\xa9", strlen(GOOD) + 2, "non-ASCII byte 0xc3", NULL);

    /* a NULL err is allowed */
    ASSERT_TRUE(zt_secret_file_read(path_of("g"), "the token file", NULL) == NULL);
    printf("test_secretfile: ok\n");
    return 0;
}
