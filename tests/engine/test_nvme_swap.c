/* Tests engine/nvme/swap.c: segments of three arrays written and read back through direct
 * I/O at aligned offsets, a segment corrupted on disk (named by file, offset and segment) and
 * healed by its next write, a read of a segment never written, the files of an earlier attempt
 * replaced, a second opener of the directory and a foreign file refused, a disk too small
 * refused up front, removal on close. */
#define _XOPEN_SOURCE 700
#include "engine/nvme/swap.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "tests/test.h"
#include "tests/tmpdir.h"

static const size_t SEGS[] = {1000, 4096, 3, 70000, 1024};
#define NSEG 5

static float value(int a, int k, size_t i)
{
    return (float)a * 1000.0f + (float)k + (float)i * 1e-3f;
}

static bool exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

int main(void)
{
    ASSERT_OK(tmpdir_create("zt-swap"));
    zt_aio *aio = NULL;
    zt_err err = {0};
    zt_aio_config cfg = {.block_size = 65536, .queue_depth = 4, .overlap_events = true};
    ASSERT_OK(zt_aio_open(&aio, &cfg, &err));
    zt_swap_layout lay = {.n_arrays = 3,
                          .names = {"master", "exp_avg", "exp_avg_sq"},
                          .elem_bytes = 4,
                          .n_segs = NSEG,
                          .seg_elems = SEGS};
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/job-7/rank_00001", tmpdir);

    /* an earlier attempt's files (left by a process that died) are replaced */
    zt_swap *s = NULL;
    ASSERT_OK(zt_swap_open(&s, dir, &lay, aio, &err));
    zt_swap_close(s, false);
    char old[600];
    snprintf(old, sizeof(old), "%s/params.swp", dir);
    FILE *f = fopen(old, "w");
    fputs("stale", f);
    fclose(f);

    ASSERT_OK(zt_swap_open(&s, dir, &lay, aio, &err));
    ASSERT_TRUE(!exists(old));
    uint64_t want_total = 0;
    for (int k = 0; k < NSEG; k++)
        want_total += zt_swap_seg_bytes(s, k);
    ASSERT_EQ_INT(zt_swap_total_bytes(s), 3 * want_total);
    ASSERT_EQ_INT(zt_swap_seg_bytes(s, 2), 4096);

    size_t cap = zt_swap_seg_bytes(s, 3);
    float *buf[3];
    for (int a = 0; a < 3; a++)
        buf[a] = zt_aligned_alloc(ZT_SWAP_ALIGN, cap);

    /* never written */
    zt_swap_io io[3];
    ASSERT_EQ_INT(zt_swap_read_start(s, 0, 1, buf[0], &io[0], &err), ZT_ERR_STATE);
    ASSERT_CONTAINS(err.msg, "never written");

    /* each segment of the three arrays written concurrently, then read back concurrently */
    for (int k = 0; k < NSEG; k++) {
        for (int a = 0; a < 3; a++) {
            for (size_t i = 0; i < SEGS[k]; i++)
                buf[a][i] = value(a, k, i);
            ASSERT_OK(zt_swap_write_start(s, a, k, buf[a], &io[a], &err));
        }
        for (int a = 0; a < 3; a++)
            ASSERT_OK(zt_swap_finish(s, &io[a], &err));
        ASSERT_TRUE(zt_swap_written(s, 2, k));
    }
    for (int k = NSEG - 1; k >= 0; k--) {
        for (int a = 0; a < 3; a++) {
            memset(buf[a], 0, cap);
            ASSERT_OK(zt_swap_read_start(s, a, k, buf[a], &io[a], &err));
        }
        for (int a = 0; a < 3; a++) {
            ASSERT_OK(zt_swap_finish(s, &io[a], &err));
            for (size_t i = 0; i < SEGS[k]; i++)
                if (buf[a][i] != value(a, k, i))
                    ZT_FAIL("array %d segment %d element %zu: %g, want %g", a, k, i, buf[a][i],
                            value(a, k, i));
        }
    }

    /* a flipped byte inside segment 3 of exp_avg */
    char path[600];
    snprintf(path, sizeof(path), "%s/exp_avg.swp", dir);
    int fd = open(path, O_RDWR);
    uint64_t off3 = zt_swap_seg_bytes(s, 0) + zt_swap_seg_bytes(s, 1) + zt_swap_seg_bytes(s, 2);
    ASSERT_EQ_INT(pwrite(fd, "X", 1, (off_t)(off3 + 1234)), 1);
    close(fd);
    ASSERT_OK(zt_swap_read_start(s, 1, 3, buf[1], &io[1], &err));
    ASSERT_EQ_INT(zt_swap_finish(s, &io[1], &err), ZT_ERR_CORRUPT);
    ASSERT_CONTAINS(err.msg, path);
    ASSERT_CONTAINS(err.msg, "segment 3");
    char at[64];
    snprintf(at, sizeof(at), "offset %llu", (unsigned long long)off3);
    ASSERT_CONTAINS(err.msg, at);
    /* written again, it reads back */
    for (size_t i = 0; i < SEGS[3]; i++)
        buf[1][i] = value(9, 3, i);
    ASSERT_OK(zt_swap_write_start(s, 1, 3, buf[1], &io[1], &err));
    ASSERT_OK(zt_swap_finish(s, &io[1], &err));
    memset(buf[1], 0, cap);
    ASSERT_OK(zt_swap_read_start(s, 1, 3, buf[1], &io[1], &err));
    ASSERT_OK(zt_swap_finish(s, &io[1], &err));
    ASSERT_TRUE(buf[1][69999] == value(9, 3, 69999));

    /* a second process (or open) on the same directory is refused and harms nothing */
    zt_swap *s2 = NULL;
    ASSERT_EQ_INT(zt_swap_open(&s2, dir, &lay, aio, &err), ZT_ERR_EXISTS);
    ASSERT_CONTAINS(err.msg, "in use by another running process");
    ASSERT_TRUE(s2 == NULL);
    ASSERT_TRUE(exists(path));
    memset(buf[1], 0, cap);
    ASSERT_OK(zt_swap_read_start(s, 1, 3, buf[1], &io[1], &err));
    ASSERT_OK(zt_swap_finish(s, &io[1], &err));
    ASSERT_TRUE(buf[1][7] == value(9, 3, 7));

    /* misuse */
    ASSERT_EQ_INT(zt_swap_read_start(s, 3, 0, buf[0], &io[0], &err), ZT_ERR_INVALID);
    ASSERT_EQ_INT(zt_swap_read_start(s, 0, 0, (char *)buf[0] + 4, &io[0], &err), ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "aligned");

    zt_swap_close(s, true);
    ASSERT_TRUE(!exists(dir));
    char parent[512];
    snprintf(parent, sizeof(parent), "%s/job-7", tmpdir);
    ASSERT_TRUE(!exists(parent));

    /* a foreign file is refused and left alone */
    snprintf(dir, sizeof(dir), "%s/other", tmpdir);
    mkdir(dir, 0700);
    snprintf(path, sizeof(path), "%s/notes.txt", dir);
    f = fopen(path, "w");
    fclose(f);
    ASSERT_EQ_INT(zt_swap_open(&s, dir, &lay, aio, &err), ZT_ERR_EXISTS);
    ASSERT_CONTAINS(err.msg, "notes.txt");
    ASSERT_TRUE(exists(path));
    ASSERT_TRUE(s == NULL);

    /* more than the disk holds: refused before anything is written */
    size_t huge[1] = {(size_t)1 << 50};
    zt_swap_layout big = {
        .n_arrays = 1, .names = {"master"}, .elem_bytes = 4, .n_segs = 1, .seg_elems = huge};
    snprintf(dir, sizeof(dir), "%s/big", tmpdir);
    ASSERT_EQ_INT(zt_swap_open(&s, dir, &big, aio, &err), ZT_ERR_NOSPACE);
    ASSERT_CONTAINS(err.msg, "free");
    ASSERT_CONTAINS(err.msg, "nvme_path");
    ASSERT_TRUE(!exists(dir));

    for (int a = 0; a < 3; a++)
        zt_free(buf[a]);
    zt_aio_close(aio);
    printf("ok\n");
    return 0;
}
