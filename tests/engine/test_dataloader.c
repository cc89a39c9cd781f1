/* Tests engine/data/dataloader.c: shard write/read, sample numbering over shards of different
 * lengths, the micro-batch formula of docs/formats.md for several (ranks, micro, accumulation) splits,
 * wrap-around, every header/token error (message names the file), durable output errors,
 * and that drawing micro-batches allocates nothing. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/timeutil.h"
#include "engine/data/dataloader.h"
#include "tests/test.h"
#include "tests/tmpdir.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t next_u32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static uint16_t *random_tokens(size_t n, unsigned vocab)
{
    uint16_t *t = malloc(n * sizeof(*t));
    for (size_t i = 0; i < n; i++)
        t[i] = (uint16_t)(next_u32() % vocab);
    return t;
}

/* Raw file writer for malformed shards: header ints h0..h2, then `ntok` tokens. */
static void write_raw(const char *path, int32_t magic, int32_t version, int32_t count,
                      const uint16_t *tok, size_t ntok)
{
    int32_t h[256] = {0};
    h[0] = magic;
    h[1] = version;
    h[2] = count;
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    ASSERT_EQ_INT(fwrite(h, 4, 256, f), 256);
    if (ntok) ASSERT_EQ_INT(fwrite(tok, 2, ntok, f), ntok);
    fclose(f);
}

static void test_round_trip(void)
{
    const size_t n = 5000;
    uint16_t *tok = random_tokens(n, 65535);
    tok[0] = 65535; /* the full uint16 range survives */
    zt_err err;
    const char *p = path_of("rt.bin");
    ASSERT_OK(zt_shard_write(p, tok, n, &err));
    /* The bytes are llm.c's: header ints then the tokens, nothing else. */
    struct stat sb;
    ASSERT_EQ_INT(stat(p, &sb), 0);
    ASSERT_EQ_INT(sb.st_size, 1024 + 2 * n);
    FILE *f = fopen(p, "rb");
    int32_t h[256];
    ASSERT_EQ_INT(fread(h, 4, 256, f), 256);
    fclose(f);
    ASSERT_EQ_INT(h[0], 20240520);
    ASSERT_EQ_INT(h[1], 1);
    ASSERT_EQ_INT(h[2], n);
    for (int i = 3; i < 256; i++)
        ASSERT_EQ_INT(h[i], 0);

    zt_dataset *ds;
    const int T = 64;
    ASSERT_OK(zt_dataset_open(&ds, p, T, 0, &err));
    ASSERT_EQ_INT(zt_dataset_num_shards(ds), 1);
    ASSERT_EQ_INT(zt_dataset_num_tokens(ds), n);
    ASSERT_EQ_INT(zt_dataset_num_samples(ds), (n - 1) / T);
    int32_t in[64], tg[64];
    for (uint64_t k = 0; k < zt_dataset_num_samples(ds); k++) {
        ASSERT_OK(zt_dataset_sample(ds, k, in, tg, &err));
        for (int j = 0; j < T; j++) {
            ASSERT_EQ_INT(in[j], tok[k * T + j]);
            ASSERT_EQ_INT(tg[j], tok[k * T + j + 1]);
        }
    }
    /* Out of range. */
    ASSERT_EQ_INT(zt_dataset_sample(ds, zt_dataset_num_samples(ds), in, tg, &err), ZT_ERR_INVALID);
    zt_dataset_close(ds);
    zt_dataset_close(NULL);
    /* An empty shard is writable (and refused by the loader as too short). */
    ASSERT_OK(zt_shard_write(path_of("empty.bin"), NULL, 0, &err));
    ASSERT_EQ_INT(zt_dataset_open(&ds, path_of("empty.bin"), 4, 0, &err), ZT_ERR_FORMAT);
    ASSERT_CONTAINS(err.msg, "empty.bin");
    free(tok);
}

/* Several shards of different lengths; numbering shard after shard in sorted name order. */
typedef struct {
    const char *name;
    size_t n;
    uint16_t *tok;
} shard_spec;

static void check_sample_raw(const shard_spec *sorted, int ns, int T, uint64_t k, const int32_t *in,
                             const int32_t *tg)
{
    uint64_t kk = k;
    for (int s = 0; s < ns; s++) {
        uint64_t cnt = (sorted[s].n - 1) / (uint64_t)T;
        if (kk < cnt) {
            for (int j = 0; j < T; j++) {
                if (in[j] != sorted[s].tok[kk * T + j] || tg[j] != sorted[s].tok[kk * T + j + 1])
                    ZT_FAIL(
                        "sample %llu (shard %s, local %llu) position %d: got in=%d tg=%d, want in=%d tg=%d",
                        (unsigned long long)k, sorted[s].name, (unsigned long long)kk, j, in[j],
                        tg[j], sorted[s].tok[kk * T + j], sorted[s].tok[kk * T + j + 1]);
            }
            return;
        }
        kk -= cnt;
    }
    ZT_FAIL("sample %llu beyond the raw shards", (unsigned long long)k);
}

static void test_multi_shard_and_batches(void)
{
    const int T = 16;
    /* Written in an order different from the sorted one; lengths give 62, 1, 8, 10 samples
     * (65 tokens is exactly one sample short of 2 plus the +1 remainder). */
    shard_spec spec[] = {
        {"ms_c.bin", 1000, NULL},
        {"ms_a.bin", 17, NULL},
        {"ms_d.bin", 140, NULL},
        {"ms_b.bin", 161, NULL},
    };
    const int ns = 4;
    zt_err err;
    for (int s = 0; s < ns; s++) {
        spec[s].tok = random_tokens(spec[s].n, 50000);
        ASSERT_OK(zt_shard_write(path_of(spec[s].name), spec[s].tok, spec[s].n, &err));
    }
    /* A file that does not match the pattern is not read. */
    ASSERT_OK(zt_shard_write(path_of("other.bin"), spec[0].tok, 100, &err));
    shard_spec sorted[] = {spec[1], spec[3], spec[0], spec[2]};
    uint64_t total = 0;
    for (int s = 0; s < ns; s++)
        total += (sorted[s].n - 1) / T;
    ASSERT_EQ_INT(total, 1 + 10 + 62 + 8);

    zt_dataset *ds;
    ASSERT_OK(zt_dataset_open(&ds, path_of("ms_*.bin"), T, 50000, &err));
    ASSERT_EQ_INT(zt_dataset_num_shards(ds), 4);
    ASSERT_EQ_INT(zt_dataset_num_samples(ds), total);
    ASSERT_EQ_INT(zt_dataset_num_tokens(ds), 1000 + 17 + 140 + 161);
    for (int s = 0; s < ns; s++) {
        ASSERT_CONTAINS(zt_dataset_shard_path(ds, s), sorted[s].name);
        ASSERT_EQ_INT(zt_dataset_shard_tokens(ds, s), sorted[s].n);
        ASSERT_EQ_INT(zt_dataset_shard_samples(ds, s), (sorted[s].n - 1) / T);
    }
    int32_t in[16], tg[16];
    for (uint64_t k = 0; k < total; k++) {
        ASSERT_OK(zt_dataset_sample(ds, k, in, tg, &err));
        check_sample_raw(sorted, ns, T, k, in, tg);
    }

    /* Micro-batches: for each split (ranks, micro, accumulation) of train_batch_size 12, and
     * several steps (wrapping around the 81 samples), every micro-batch holds exactly
     * the samples of docs/formats.md, and the union over ranks and micro-steps, placed at
     * i = (m*ranks + r)*micro + j, is the global batch in order. */
    const int64_t B = 12;
    const int splits[][3] = {{1, 12, 1}, {1, 1, 12}, {2, 3, 2}, {3, 2, 2}, {4, 1, 3},
                             {6, 2, 1},  {12, 1, 1}, {2, 1, 6}, {4, 3, 1}};
    int32_t *ref_in = malloc((size_t)B * T * sizeof(int32_t));
    int32_t *ref_tg = malloc((size_t)B * T * sizeof(int32_t));
    int32_t *got_in = malloc((size_t)B * T * sizeof(int32_t));
    int32_t *got_tg = malloc((size_t)B * T * sizeof(int32_t));
    int32_t *mb_in = malloc((size_t)B * T * sizeof(int32_t));
    int32_t *mb_tg = malloc((size_t)B * T * sizeof(int32_t));
    const int64_t steps[] = {0, 1, 5, 6, 7, 20, 1000003};
    for (size_t si = 0; si < sizeof(steps) / sizeof(steps[0]); si++) {
        int64_t step = steps[si];
        /* The global batch, straight from the raw arrays. */
        for (int64_t i = 0; i < B; i++) {
            uint64_t k = (uint64_t)((step * B + i) % (int64_t)total);
            ASSERT_EQ_INT(zt_dataset_batch_sample(ds, step, B, i), k);
            ASSERT_OK(zt_dataset_sample(ds, k, ref_in + i * T, ref_tg + i * T, &err));
            check_sample_raw(sorted, ns, T, k, ref_in + i * T, ref_tg + i * T);
        }
        for (size_t sp = 0; sp < sizeof(splits) / sizeof(splits[0]); sp++) {
            int ranks = splits[sp][0], micro = splits[sp][1], accum = splits[sp][2];
            ASSERT_EQ_INT((int64_t)ranks * micro * accum, B);
            memset(got_in, 0xff, (size_t)B * T * sizeof(int32_t));
            memset(got_tg, 0xff, (size_t)B * T * sizeof(int32_t));
            for (int m = 0; m < accum; m++) {
                for (int r = 0; r < ranks; r++) {
                    ASSERT_OK(zt_dataset_micro_batch(ds, step, B, ranks, r, m, micro, mb_in, mb_tg,
                                                     &err));
                    int64_t first = ((int64_t)m * ranks + r) * micro;
                    memcpy(got_in + first * T, mb_in, (size_t)micro * T * sizeof(int32_t));
                    memcpy(got_tg + first * T, mb_tg, (size_t)micro * T * sizeof(int32_t));
                }
            }
            for (int64_t x = 0; x < B * T; x++) {
                if (got_in[x] != ref_in[x] || got_tg[x] != ref_tg[x])
                    ZT_FAIL(
                        "step %lld split ranks=%d micro=%d accum=%d: element %lld (batch position %lld) differs: %d/%d vs %d/%d",
                        (long long)step, ranks, micro, accum, (long long)x, (long long)(x / T),
                        got_in[x], got_tg[x], ref_in[x], ref_tg[x]);
            }
        }
    }
    /* Huge step numbers wrap without overflow. */
    int64_t big = INT64_MAX / 3;
    uint64_t want =
        (uint64_t)(((big % (int64_t)total) * (B % (int64_t)total) + 5) % (int64_t)total);
    ASSERT_EQ_INT(zt_dataset_batch_sample(ds, big, B, 5), want);
    ASSERT_EQ_INT(
        zt_dataset_batch_sample(ds, INT64_MAX, INT64_MAX, INT64_MAX),
        (uint64_t)((((INT64_MAX % (int64_t)total) * (INT64_MAX % (int64_t)total)) % (int64_t)total +
                    INT64_MAX % (int64_t)total) %
                   (int64_t)total));
    ASSERT_OK(zt_dataset_micro_batch(ds, big, B, 2, 1, 1, 3, mb_in, mb_tg, &err));

    /* Bad requests. */
    ASSERT_EQ_INT(zt_dataset_micro_batch(ds, 0, B, 2, 2, 0, 3, mb_in, mb_tg, &err), ZT_ERR_INVALID);
    ASSERT_EQ_INT(zt_dataset_micro_batch(ds, -1, B, 2, 0, 0, 3, mb_in, mb_tg, &err),
                  ZT_ERR_INVALID);
    ASSERT_EQ_INT(zt_dataset_micro_batch(ds, 0, B, 2, 1, 2, 3, mb_in, mb_tg, &err),
                  ZT_ERR_INVALID); /* positions 15..17 >= 12 */
    ASSERT_CONTAINS(err.msg, "beyond train_batch_size 12");

    /* No allocation while drawing batches; thread-safe reads need no state. */
    uint64_t before = zt_alloc_count();
    for (int64_t step = 0; step < 50; step++)
        for (int r = 0; r < 4; r++)
            ASSERT_OK(zt_dataset_micro_batch(ds, step, B, 4, r, 0, 3, mb_in, mb_tg, &err));
    ASSERT_EQ_INT(zt_alloc_count(), before);

    zt_dataset_close(ds);
    free(ref_in);
    free(ref_tg);
    free(got_in);
    free(got_tg);
    free(mb_in);
    free(mb_tg);
    for (int s = 0; s < ns; s++)
        free(spec[s].tok);
}

static void expect_open_error(const char *pattern, int T, int vocab, zt_status want,
                              const char *needle1, const char *needle2)
{
    zt_dataset *ds = (zt_dataset *)1;
    zt_err err;
    zt_err_clear(&err);
    zt_status st = zt_dataset_open(&ds, pattern, T, vocab, &err);
    if (st != want)
        ZT_FAIL("open %s: status %s, want %s (message: %s)", pattern, zt_status_name(st),
                zt_status_name(want), err.msg);
    ASSERT_TRUE(ds == NULL);
    ASSERT_CONTAINS(err.msg, needle1);
    if (needle2) ASSERT_CONTAINS(err.msg, needle2);
    printf("  ok: %s\n", err.msg);
}

static void test_errors(void)
{
    uint16_t tok[300];
    for (int i = 0; i < 300; i++)
        tok[i] = (uint16_t)(i % 200);
    write_raw(path_of("bad_magic.bin"), 20240326, 1, 300, tok, 300);
    expect_open_error(path_of("bad_magic.bin"), 8, 256, ZT_ERR_FORMAT, "bad_magic.bin",
                      "magic 20240326");
    write_raw(path_of("bad_version.bin"), 20240520, 2, 300, tok, 300);
    expect_open_error(path_of("bad_version.bin"), 8, 256, ZT_ERR_FORMAT, "bad_version.bin",
                      "version 2");
    /* Truncated: header says 300, the file holds 250 tokens. */
    write_raw(path_of("trunc.bin"), 20240520, 1, 300, tok, 250);
    expect_open_error(path_of("trunc.bin"), 8, 256, ZT_ERR_FORMAT, "trunc.bin",
                      "should have 1624 bytes, but it has 1524");
    /* Header count far larger than the file. */
    write_raw(path_of("count_big.bin"), 20240520, 1, 1000000, tok, 300);
    expect_open_error(path_of("count_big.bin"), 8, 256, ZT_ERR_FORMAT, "count_big.bin",
                      "1000000 tokens");
    /* A file shorter than the header. */
    FILE *f = fopen(path_of("stub.bin"), "wb");
    fwrite(tok, 1, 100, f);
    fclose(f);
    expect_open_error(path_of("stub.bin"), 8, 256, ZT_ERR_FORMAT, "stub.bin", "100 bytes");
    /* Bytes beyond the tokens. */
    write_raw(path_of("oversize.bin"), 20240520, 1, 200, tok, 300);
    expect_open_error(path_of("oversize.bin"), 8, 256, ZT_ERR_FORMAT, "oversize.bin", "1624 bytes");
    write_raw(path_of("negative.bin"), 20240520, 1, -5, tok, 0);
    expect_open_error(path_of("negative.bin"), 8, 256, ZT_ERR_FORMAT, "negative.bin", "negative");
    /* Too short for one sample: 64 tokens, block 64 needs 65. */
    write_raw(path_of("short.bin"), 20240520, 1, 64, tok, 64);
    expect_open_error(path_of("short.bin"), 64, 256, ZT_ERR_FORMAT, "short.bin",
                      "needs at least T+1 tokens");
    ASSERT_OK(zt_shard_write(path_of("short65.bin"), tok, 65, NULL));
    zt_dataset *ds;
    zt_err err;
    ASSERT_OK(zt_dataset_open(&ds, path_of("short65.bin"), 64, 256, &err));
    ASSERT_EQ_INT(zt_dataset_num_samples(ds), 1);
    zt_dataset_close(ds);
    /* No match: the message names the pattern. */
    expect_open_error(path_of("nothing_*.bin"), 8, 256, ZT_ERR_NOT_FOUND, "nothing_*.bin",
                      "no files match");
    expect_open_error(path_of("missing.bin"), 8, 256, ZT_ERR_NOT_FOUND, "missing.bin", NULL);
    /* A bad file among good ones is named. */
    ASSERT_OK(zt_shard_write(path_of("mix_a.bin"), tok, 300, NULL));
    write_raw(path_of("mix_b.bin"), 20240520, 1, 300, tok, 299);
    expect_open_error(path_of("mix_*.bin"), 8, 256, ZT_ERR_FORMAT, "mix_b.bin", "truncated");
    /* A directory matching the pattern. */
    ASSERT_EQ_INT(mkdir(path_of("dir_x.bin"), 0755), 0);
    expect_open_error(path_of("dir_*.bin"), 8, 256, ZT_ERR_FORMAT, "dir_x.bin", "regular file");
    /* Bad arguments. */
    expect_open_error(path_of("mix_a.bin"), 0, 256, ZT_ERR_INVALID, "block_size 0", NULL);
    expect_open_error(path_of("mix_a.bin"), 8, 70000, ZT_ERR_INVALID, "vocab_size 70000", NULL);
    expect_open_error("", 8, 256, ZT_ERR_INVALID, "empty", NULL);

    /* Token >= vocab: found when the sample is drawn, naming file and offset. */
    uint16_t bad[200];
    for (int i = 0; i < 200; i++)
        bad[i] = (uint16_t)(i % 100);
    bad[77] = 300;
    ASSERT_OK(zt_shard_write(path_of("vocab.bin"), bad, 200, NULL));
    ASSERT_OK(zt_dataset_open(&ds, path_of("vocab.bin"), 10, 256, &err));
    int32_t in[10], tg[10];
    for (uint64_t k = 0; k < zt_dataset_num_samples(ds); k++) {
        zt_status st = zt_dataset_sample(ds, k, in, tg, &err);
        /* token 77 is input of sample 7 (70..79) and target of none other: 70..80 covers it */
        if (k == 7) {
            ASSERT_EQ_INT(st, ZT_ERR_FORMAT);
            ASSERT_CONTAINS(err.msg, "vocab.bin");
            ASSERT_CONTAINS(err.msg, "token 300 at token offset 77");
            printf("  ok: %s\n", err.msg);
        } else {
            ASSERT_OK(st);
        }
    }
    zt_dataset_close(ds);
    /* Token 80 is the last target of sample 7 and the first input of sample 8. */
    bad[77] = 5;
    bad[80] = 256;
    ASSERT_OK(zt_shard_write(path_of("vocab.bin"), bad, 200, NULL));
    ASSERT_OK(zt_dataset_open(&ds, path_of("vocab.bin"), 10, 256, &err));
    ASSERT_EQ_INT(zt_dataset_sample(ds, 7, in, tg, &err), ZT_ERR_FORMAT);
    ASSERT_CONTAINS(err.msg, "offset 80");
    ASSERT_EQ_INT(zt_dataset_sample(ds, 8, in, tg, &err), ZT_ERR_FORMAT);
    ASSERT_OK(zt_dataset_sample(ds, 6, in, tg, &err));
    /* The micro-batch passes the error up. */
    int32_t all_in[19 * 10], all_tg[19 * 10];
    ASSERT_EQ_INT(zt_dataset_micro_batch(ds, 0, 19, 1, 0, 0, 19, all_in, all_tg, &err),
                  ZT_ERR_FORMAT);
    ASSERT_CONTAINS(err.msg, "vocab.bin");
    zt_dataset_close(ds);
    /* vocab 0 disables the check. */
    ASSERT_OK(zt_dataset_open(&ds, path_of("vocab.bin"), 10, 0, &err));
    ASSERT_OK(zt_dataset_sample(ds, 8, in, tg, &err));
    ASSERT_EQ_INT(in[0], 256);
    zt_dataset_close(ds);
}

static void test_alloc_failures(void)
{
    uint16_t tok[100] = {0};
    ASSERT_OK(zt_shard_write(path_of("af_1.bin"), tok, 100, NULL));
    ASSERT_OK(zt_shard_write(path_of("af_2.bin"), tok, 100, NULL));
    /* Fail the n-th allocation for every n until open succeeds: clean errors, no leaks. */
    for (long n = 0;; n++) {
        zt_dataset *ds;
        zt_err err;
        zt_alloc_fail_after(n);
        zt_status st = zt_dataset_open(&ds, path_of("af_*.bin"), 8, 256, &err);
        zt_alloc_fail_after(-1);
        if (st == ZT_OK) {
            ASSERT_EQ_INT(zt_dataset_num_shards(ds), 2);
            zt_dataset_close(ds);
            ASSERT_TRUE(n > 2);
            break;
        }
        ASSERT_EQ_INT(st, ZT_ERR_NOMEM);
        ASSERT_CONTAINS(err.msg, "out of memory");
        ASSERT_TRUE(n < 100);
    }
}

static int count_tmp_files(void)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "ls -a %s | grep -c '\\.tmp\\.' > %s/count.txt", tmpdir, tmpdir);
    if (system(cmd) < 0) return -1;
    FILE *f = fopen(path_of("count.txt"), "r");
    int n = -1;
    if (f) {
        if (fscanf(f, "%d", &n) != 1) n = -1;
        fclose(f);
    }
    remove(path_of("count.txt"));
    return n;
}

static void test_outfile(void)
{
    zt_err err;
    zt_outfile *f;
    /* ENOSPC comes back as ZT_ERR_NOSPACE naming the path (a device is written in place). */
    ASSERT_OK(zt_outfile_open(&f, "/dev/full", &err));
    char block[4096] = {0};
    zt_status st = ZT_OK;
    for (int i = 0; i < 4 && st == ZT_OK; i++)
        st = zt_outfile_write(f, block, sizeof(block), &err);
    if (st == ZT_OK)
        st = zt_outfile_commit(f, &err);
    else
        zt_outfile_abort(f);
    ASSERT_EQ_INT(st, ZT_ERR_NOSPACE);
    ASSERT_CONTAINS(err.msg, "/dev/full");
    printf("  ok: %s\n", err.msg);
    uint16_t tok[10] = {1, 2, 3};
    ASSERT_EQ_INT(zt_shard_write("/dev/full", tok, 10, &err), ZT_ERR_NOSPACE);
    ASSERT_CONTAINS(err.msg, "/dev/full");

    /* Missing directory; a path through a regular file; a directory as the target. */
    ASSERT_EQ_INT(zt_shard_write(path_of("no/such/dir/x.bin"), tok, 10, &err), ZT_ERR_NOT_FOUND);
    ASSERT_CONTAINS(err.msg, "no/such/dir/x.bin");
    ASSERT_OK(zt_shard_write(path_of("plain.bin"), tok, 10, &err));
    ASSERT_TRUE(zt_shard_write(path_of("plain.bin/x.bin"), tok, 10, &err) != ZT_OK);
    ASSERT_CONTAINS(err.msg, "plain.bin/x.bin");
    ASSERT_EQ_INT(zt_shard_write(tmpdir, tok, 10, &err), ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "directory");
    ASSERT_EQ_INT(zt_shard_write(path_of("huge.bin"), tok, ZT_SHARD_MAX_TOKENS + 1, &err),
                  ZT_ERR_INVALID);

    /* Abort leaves neither the file nor a temporary; commit replaces an old file whole. */
    ASSERT_OK(zt_outfile_open(&f, path_of("atomic.bin"), &err));
    ASSERT_OK(zt_outfile_write(f, "new", 3, &err));
    ASSERT_EQ_INT(zt_outfile_size(f), 3);
    ASSERT_EQ_INT(count_tmp_files(), 1);
    zt_outfile_abort(f);
    zt_outfile_abort(NULL);
    ASSERT_EQ_INT(access(path_of("atomic.bin"), F_OK), -1);
    ASSERT_EQ_INT(count_tmp_files(), 0);
    FILE *fp = fopen(path_of("atomic.bin"), "w");
    fputs("old contents", fp);
    fclose(fp);
    ASSERT_OK(zt_outfile_open(&f, path_of("atomic.bin"), &err));
    ASSERT_OK(zt_outfile_write(f, "new", 3, &err));
    fp = fopen(path_of("atomic.bin"), "r"); /* still the old file until commit */
    char buf[32] = {0};
    ASSERT_TRUE(fgets(buf, sizeof(buf), fp) != NULL);
    fclose(fp);
    ASSERT_STREQ(buf, "old contents");
    ASSERT_OK(zt_outfile_commit(f, &err));
    fp = fopen(path_of("atomic.bin"), "r");
    memset(buf, 0, sizeof(buf));
    ASSERT_TRUE(fgets(buf, sizeof(buf), fp) != NULL);
    fclose(fp);
    ASSERT_STREQ(buf, "new");
    ASSERT_EQ_INT(count_tmp_files(), 0);
}

static void test_speed(void)
{
    /* Not an assertion on time (sanitizer builds are slow): prints what a step costs. */
    const int T = 1024, B = 16;
    const size_t n = (size_t)T * 200 + 1;
    uint16_t *tok = random_tokens(n, 50257);
    ASSERT_OK(zt_shard_write(path_of("speed.bin"), tok, n, NULL));
    zt_dataset *ds;
    ASSERT_OK(zt_dataset_open(&ds, path_of("speed.bin"), T, 50257, NULL));
    int32_t *in = malloc((size_t)B * T * sizeof(int32_t));
    int32_t *tg = malloc((size_t)B * T * sizeof(int32_t));
    const int iters = 200;
    uint64_t t0 = zt_now_ns();
    for (int s = 0; s < iters; s++)
        ASSERT_OK(zt_dataset_micro_batch(ds, s, B, 1, 0, 0, B, in, tg, NULL));
    double us = (double)(zt_now_ns() - t0) / 1e3 / iters;
    printf("  micro-batch %dx%d: %.1f us per call (%.2f ns/token)\n", B, T, us, us * 1e3 / (B * T));
    zt_dataset_close(ds);
    free(in);
    free(tg);
    free(tok);
}

int main(void)
{
    if (tmpdir_create("zt_test_dataloader") != 0) {
        perror("mkdtemp");
        return 1;
    }
    printf("round trip\n");
    test_round_trip();
    printf("multi-shard numbering and micro-batches\n");
    test_multi_shard_and_batches();
    printf("errors\n");
    test_errors();
    printf("allocation failures\n");
    test_alloc_failures();
    printf("durable output\n");
    test_outfile();
    printf("speed\n");
    test_speed();
    printf("all dataloader tests passed\n");
    return 0;
}
