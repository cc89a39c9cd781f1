/* Tests engine/nvme/aio.c on both backends (io_uring where the kernel has it, and threads):
 * direct-I/O round trips of several concurrent transfers at block sizes and queue depths from
 * one page to a megabyte, more transfers than pieces, short files, a read-only file, a full
 * device (/dev/full) and bad configurations, each error naming the file and offset; and that a
 * request fills the whole queue depth at once (the pieces in flight, from aio_int.h). */
#define _GNU_SOURCE /* O_DIRECT */
#include "engine/nvme/aio.h"
#include "engine/nvme/aio_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "tests/test.h"
#include "tests/tmpdir.h"

#define FILE_BYTES ((size_t)6 << 20)

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

/* Writes FILE_BYTES in `parts` concurrent transfers, reads them back in reverse order in as
 * many concurrent transfers, and compares. */
static void round_trip(const char *backend, size_t block, int depth, bool single, bool overlap,
                       int parts, bool direct)
{
    zt_aio_config cfg = {.block_size = block,
                         .queue_depth = depth,
                         .thread_count = 3,
                         .single_submit = single,
                         .overlap_events = overlap,
                         .backend = backend};
    zt_aio *a = NULL;
    zt_err err = {0};
    ASSERT_OK(zt_aio_open(&a, &cfg, &err));
    ASSERT_STREQ(zt_aio_backend(a), backend);
    char path[512];
    snprintf(path, sizeof(path), "%s/rt_%s_%zu_%d", tmpdir, backend, block, depth);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0600);
    ASSERT_TRUE(fd >= 0);
    uint8_t *src = zt_aligned_alloc(4096, FILE_BYTES), *dst = zt_aligned_alloc(4096, FILE_BYTES);
    fill(src, FILE_BYTES, (uint32_t)(block + (size_t)depth));
    memset(dst, 0, FILE_BYTES);
    size_t part = FILE_BYTES / (size_t)parts;
    zt_aio_req w[16], r[16];
    for (int i = 0; i < parts; i++) {
        w[i] = (zt_aio_req){.dir = ZT_AIO_WRITE,
                            .fd = fd,
                            .buf = src + i * part,
                            .len = part,
                            .off = i * part,
                            .path = path};
        ASSERT_OK(zt_aio_submit(a, &w[i], &err));
    }
    for (int i = parts - 1; i >= 0; i--)
        ASSERT_OK(zt_aio_wait(a, &w[i], &err));
    for (int i = parts - 1; i >= 0; i--) {
        r[i] = (zt_aio_req){.dir = ZT_AIO_READ,
                            .fd = fd,
                            .buf = dst + i * part,
                            .len = part,
                            .off = i * part,
                            .path = path};
        ASSERT_OK(zt_aio_submit(a, &r[i], &err));
    }
    for (int i = 0; i < parts; i++)
        ASSERT_OK(zt_aio_wait(a, &r[i], &err));
    ASSERT_TRUE(memcmp(src, dst, FILE_BYTES) == 0);
    ASSERT_EQ_INT(lseek(fd, 0, SEEK_END), (long long)FILE_BYTES);
    close(fd);
    zt_free(src);
    zt_free(dst);
    zt_aio_close(a);
}

static void errors(const char *backend)
{
    zt_aio_config cfg = {.block_size = 8192, .queue_depth = 4, .backend = backend};
    zt_aio *a = NULL;
    zt_err err = {0};
    ASSERT_OK(zt_aio_open(&a, &cfg, &err));
    uint8_t *buf = zt_aligned_alloc(4096, 65536);
    memset(buf, 7, 65536);

    /* a read past the end of a 4 KiB file */
    char path[512];
    snprintf(path, sizeof(path), "%s/short_%s", tmpdir, backend);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ASSERT_EQ_INT(write(fd, buf, 4096), 4096);
    zt_aio_req r = {.dir = ZT_AIO_READ, .fd = fd, .buf = buf, .len = 65536, .off = 0, .path = path};
    ASSERT_OK(zt_aio_submit(a, &r, &err));
    ASSERT_EQ_INT(zt_aio_wait(a, &r, &err), ZT_ERR_IO);
    ASSERT_CONTAINS(err.msg, path);
    ASSERT_CONTAINS(err.msg, "the file ends there");
    close(fd);

    /* a write through a read-only descriptor */
    fd = open(path, O_RDONLY);
    zt_aio_req w = {
        .dir = ZT_AIO_WRITE, .fd = fd, .buf = buf, .len = 16384, .off = 8192, .path = path};
    ASSERT_OK(zt_aio_submit(a, &w, &err));
    ASSERT_EQ_INT(zt_aio_wait(a, &w, &err), ZT_ERR_IO);
    ASSERT_CONTAINS(err.msg, "writing");
    ASSERT_CONTAINS(err.msg, "at offset 8192");
    ASSERT_CONTAINS(err.msg, strerror(EBADF));
    close(fd);

    /* a full device; the context stays usable afterwards */
    fd = open("/dev/full", O_WRONLY);
    if (fd >= 0) {
        zt_aio_req f = {
            .dir = ZT_AIO_WRITE, .fd = fd, .buf = buf, .len = 65536, .path = "/dev/full"};
        ASSERT_OK(zt_aio_submit(a, &f, &err));
        ASSERT_EQ_INT(zt_aio_wait(a, &f, &err), ZT_ERR_NOSPACE);
        ASSERT_CONTAINS(err.msg, "/dev/full");
        close(fd);
    }
    fd = open(path, O_RDONLY);
    zt_aio_req ok = {.dir = ZT_AIO_READ, .fd = fd, .buf = buf, .len = 4096, .path = path};
    ASSERT_OK(zt_aio_submit(a, &ok, &err));
    ASSERT_OK(zt_aio_wait(a, &ok, &err));
    close(fd);

    zt_aio_req empty = {.dir = ZT_AIO_READ, .fd = 0, .buf = buf, .len = 0, .path = path};
    ASSERT_EQ_INT(zt_aio_submit(a, &empty, &err), ZT_ERR_INVALID);
    zt_free(buf);
    zt_aio_close(a);
}

static void bad_configs(void)
{
    zt_aio *a = NULL;
    zt_err err = {0};
    zt_aio_config c1 = {.block_size = 1000};
    ASSERT_EQ_INT(zt_aio_open(&a, &c1, &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "aio.block_size 1000");
    zt_aio_config c2 = {.queue_depth = 5000};
    ASSERT_EQ_INT(zt_aio_open(&a, &c2, &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "aio.queue_depth 5000");
    zt_aio_config c3 = {.thread_count = -2};
    ASSERT_EQ_INT(zt_aio_open(&a, &c3, &err), ZT_ERR_CONFIG);
    zt_aio_config c4 = {.backend = "libaio"};
    ASSERT_EQ_INT(zt_aio_open(&a, &c4, &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "\"libaio\"");
    ASSERT_TRUE(a == NULL);
    zt_aio_close(NULL);
}

/* A request of queue_depth blocks has every piece in flight as soon as it is submitted, and
 * again for the next request once the pieces came back: a backend that links a queued piece
 * into its own lists (the thread pool) must not cut the free list short. */
static void full_depth(const char *backend)
{
    enum { DEPTH = 4, BLOCK = 4096 };
    zt_aio_config cfg = {.block_size = BLOCK,
                         .queue_depth = DEPTH,
                         .thread_count = 2,
                         .overlap_events = true,
                         .backend = backend};
    zt_aio *a = NULL;
    zt_err err = {0};
    ASSERT_OK(zt_aio_open(&a, &cfg, &err));
    char path[512];
    snprintf(path, sizeof(path), "%s/depth_%s", tmpdir, backend);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ASSERT_TRUE(fd >= 0);
    uint8_t *buf = zt_aligned_alloc(4096, DEPTH * BLOCK);
    fill(buf, DEPTH * BLOCK, 7);
    for (int round = 0; round < 2; round++) {
        zt_aio_req w = {.dir = ZT_AIO_WRITE,
                        .fd = fd,
                        .buf = buf,
                        .len = DEPTH * BLOCK,
                        .off = 0,
                        .path = path};
        ASSERT_OK(zt_aio_submit(a, &w, &err));
        ASSERT_EQ_INT(a->inflight, DEPTH);
        ASSERT_OK(zt_aio_wait(a, &w, &err));
        ASSERT_EQ_INT(a->inflight, 0);
    }
    close(fd);
    zt_free(buf);
    zt_aio_close(a);
}

int main(void)
{
    ASSERT_OK(tmpdir_create("zt-aio"));
    bad_configs();
    const char *backends[2] = {"threads", "io_uring"};
    zt_aio *probe = NULL;
    zt_err err = {0};
    zt_aio_config c = {.backend = "io_uring"};
    int n = 2;
    if (zt_aio_open(&probe, &c, &err) != ZT_OK) {
        printf("io_uring unavailable here (%s): testing the threads backend only\n", err.msg);
        n = 1;
    }
    zt_aio_close(probe);
    for (int b = 0; b < n; b++) {
        const char *be = backends[b];
        round_trip(be, 4096, 1, false, true, 3, true);
        round_trip(be, 65536, 8, false, true, 4, true);
        round_trip(be, 1 << 20, 4, true, false, 6, true);
        round_trip(be, 1 << 20, 2, false, false, 16, false);
        errors(be);
        full_depth(be);
        printf("%s: round trips, errors and full depth ok\n", be);
    }
    zt_aio_config dflt = {0};
    ASSERT_OK(zt_aio_open(&probe, &dflt, &err));
    printf("default backend: %s\n", zt_aio_backend(probe));
    zt_aio_close(probe);
    printf("ok\n");
    return 0;
}
