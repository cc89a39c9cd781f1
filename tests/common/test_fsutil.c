/* Tests common/fsutil.c: zt_mkdirs creates every missing parent, accepts what exists, names
 * the component that is not a directory, refuses a path over PATH_MAX, (durable) fsyncs, and
 * succeeds while another thread keeps removing the parent it shares (as ranks do with the
 * swap directory's parent). */
#define _POSIX_C_SOURCE 200809L
#include "common/fsutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/test.h"

static bool is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The other rank: makes its own directory under the shared parent, then removes it and the
 * parent (which succeeds whenever the main thread's directory is not there yet). */
typedef struct churn {
    const char *root;
    atomic_bool stop;
} churn;

static void *churn_main(void *arg)
{
    churn *c = arg;
    char mine[512], parent[512];
    snprintf(parent, sizeof(parent), "%s/shared", c->root);
    snprintf(mine, sizeof(mine), "%s/shared/rank_0", c->root);
    while (!atomic_load(&c->stop)) {
        zt_mkdirs(mine, false, NULL, 0);
        rmdir(mine);
        rmdir(parent);
    }
    return NULL;
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

    /* a parent removed under us: created again, every time */
    churn c = {.root = root};
    pthread_t th;
    ASSERT_EQ_INT(pthread_create(&th, NULL, churn_main, &c), 0);
    char mine[512], shared[512];
    snprintf(shared, sizeof(shared), "%s/shared", root);
    snprintf(mine, sizeof(mine), "%s/shared/rank_1/deep", root);
    int fails = 0;
    for (int k = 0; k < 2000; k++) {
        if (zt_mkdirs(mine, false, failed, sizeof(failed)) != 0) {
            if (!fails)
                fprintf(stderr, "zt_mkdirs %s failed at %s: %s\n", mine, failed, strerror(errno));
            fails++;
        }
        snprintf(path, sizeof(path), "%s/shared/rank_1", root);
        rmdir(mine);
        rmdir(path);
        rmdir(shared);
    }
    atomic_store(&c.stop, true);
    pthread_join(th, NULL);
    ASSERT_EQ_INT(fails, 0);

    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    ASSERT_EQ_INT(system(cmd), 0);
    printf("test_fsutil: ok\n");
    return 0;
}
