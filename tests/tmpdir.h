/* zerotrain tests: a private temporary directory per test process, removed at exit even when
 * an assertion fails (exit(1) runs atexit handlers). Needs _XOPEN_SOURCE 700 for nftw. */
#ifndef ZT_TESTS_TMPDIR_H
#define ZT_TESTS_TMPDIR_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static char tmpdir[256];

static int tmpdir_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void tmpdir_cleanup(void)
{
    if (tmpdir[0])
        nftw(tmpdir, tmpdir_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Creates /tmp/<name>_XXXXXX and registers its removal; returns 0, or -1 (errno set). */
static inline int tmpdir_create(const char *name)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/%s_XXXXXX", name);
    if (!mkdtemp(tmpdir)) {
        tmpdir[0] = '\0';
        return -1;
    }
    atexit(tmpdir_cleanup);
    return 0;
}

/* tmpdir/name in one of 8 rotating static buffers. */
static inline char *path_of(const char *name)
{
    static char buf[8][1024];
    static int n;
    char *b = buf[n++ % 8];
    snprintf(b, 1024, "%s/%s", tmpdir, name);
    return b;
}

#endif
