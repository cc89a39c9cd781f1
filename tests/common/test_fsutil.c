/* Tests common/fsutil.c: zt_mkdirs creates every missing parent, accepts what exists, names
 * the component that is not a directory, refuses a path over PATH_MAX, and (durable) fsyncs. */
#define _POSIX_C_SOURCE 200809L
#include "common/fsutil.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/test.h"

static bool is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int main(void)
{
    char tmpl[] = "/tmp/zt-fsutil-XXXXXX";
    char *root = mkdtemp(tmpl);
    ASSERT_TRUE(root != NULL);
    char path[512], failed[512];

    snprintf(path, sizeof(path), "%s/a/b/c", root);
    ASSERT_EQ_INT(zt_mkdirs(path, false, failed, sizeof(failed)), 0);
    ASSERT_TRUE(is_dir(path));
    ASSERT_STREQ(failed, "");
    /* again: everything exists */
    ASSERT_EQ_INT(zt_mkdirs(path, false, NULL, 0), 0);
    /* durable, with a trailing slash */
    snprintf(path, sizeof(path), "%s/a/d/e/", root);
    ASSERT_EQ_INT(zt_mkdirs(path, true, failed, sizeof(failed)), 0);
    snprintf(path, sizeof(path), "%s/a/d/e", root);
    ASSERT_TRUE(is_dir(path));

    /* a file in the way: ENOTDIR, naming it */
    snprintf(path, sizeof(path), "%s/a/file", root);
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fclose(f);
    char want[512];
    snprintf(want, sizeof(want), "%s", path);
    snprintf(path, sizeof(path), "%s/a/file/x/y", root);
    ASSERT_EQ_INT(zt_mkdirs(path, false, failed, sizeof(failed)), -1);
    ASSERT_EQ_INT(errno, ENOTDIR);
    ASSERT_STREQ(failed, want);

    /* longer than PATH_MAX: refused before anything is made */
    char *longp = malloc(PATH_MAX + 64);
    ASSERT_TRUE(longp != NULL);
    int n = snprintf(longp, PATH_MAX + 64, "%s/", root);
    memset(longp + n, 'x', (size_t)(PATH_MAX + 10 - n));
    longp[PATH_MAX + 10] = '\0';
    ASSERT_EQ_INT(zt_mkdirs(longp, false, failed, sizeof(failed)), -1);
    ASSERT_EQ_INT(errno, ENAMETOOLONG);
    free(longp);

    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    ASSERT_EQ_INT(system(cmd), 0);
    printf("test_fsutil: ok\n");
    return 0;
}
