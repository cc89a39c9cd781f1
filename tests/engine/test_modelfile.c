/* Tests engine/data/modelfile.c: tensor sizes in llm.c order, fp32 and bf16 round trips (bf16 rounds
 * to nearest even), the raw header bytes, header/size validation with messages naming the file,
 * shape-check messages, the streaming writer with pieces, abort and write errors. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "engine/data/modelfile.h"
#include "tests/test.h"
#include "tests/tmpdir.h"

static const zt_model_shape small = {.max_seq_len = 8,
                                     .vocab_size = 10,
                                     .padded_vocab_size = 16,
                                     .num_layers = 2,
                                     .num_heads = 2,
                                     .channels = 4};

static float *random_params(size_t n, unsigned seed)
{
    float *p = malloc(n * sizeof(float));
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.2f;
    }
    return p;
}

static long file_size(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

static unsigned char *slurp(const char *p, long *n)
{
    *n = file_size(p);
    unsigned char *b = malloc((size_t)*n + 1);
    FILE *f = fopen(p, "rb");
    ASSERT_TRUE(f && fread(b, 1, (size_t)*n, f) == (size_t)*n);
    fclose(f);
    return b;
}

static void test_sizes(void)
{
    size_t sz[16];
    size_t total = zt_modelfile_tensor_sizes(&small, sz);
    const size_t Vp = 16, T = 8, L = 2, C = 4;
    const size_t want[16] = {Vp * C,        T * C, L * C, L * C, L * 3 * C * C, L * 3 * C,
                             L * C * C,     L * C, L * C, L * C, L * 4 * C * C, L * 4 * C,
                             L * C * 4 * C, L * C, C,     C};
    size_t sum = 0;
    for (int i = 0; i < 16; i++) {
        ASSERT_EQ_INT(sz[i], want[i]);
        sum += want[i];
    }
    ASSERT_EQ_INT(total, sum);
    /* GPT-2 124M as llm.c has it: 124,475,904 parameters with Vp = 50304. */
    zt_model_shape g = {1024, 50257, 50304, 12, 12, 768};
    ASSERT_EQ_INT(zt_modelfile_tensor_sizes(&g, sz), 124475904);
    const char *names[16] = {"wte",      "wpe",      "ln1w", "ln1b", "qkvw", "qkvb",
                             "attprojw", "attprojb", "ln2w", "ln2b", "fcw",  "fcb",
                             "fcprojw",  "fcprojb",  "lnfw", "lnfb"};
    for (int i = 0; i < 16; i++)
        ASSERT_STREQ(zt_modelfile_tensor_name(i), names[i]);
    ASSERT_STREQ(zt_modelfile_tensor_name(16), "?");
    ASSERT_STREQ(zt_modelfile_tensor_name(-1), "?");
}

static void test_round_trips(void)
{
    size_t sz[16];
    size_t n = zt_modelfile_tensor_sizes(&small, sz);
    float *p = random_params(n, 1);
    zt_err err;
    /* fp32: bit-exact; the header is llm.c's. */
    const char *f32 = path_of("m32.bin");
    ASSERT_OK(zt_modelfile_write(f32, &small, p, ZT_F32, &err));
    ASSERT_EQ_INT(file_size(f32), 1024 + 4 * (long)n);
    long len;
    unsigned char *raw = slurp(f32, &len);
    int32_t h[256];
    memcpy(h, raw, sizeof(h));
    const int32_t want_h[8] = {20240326, 3, 8, 10, 2, 2, 4, 16};
    for (int i = 0; i < 8; i++)
        ASSERT_EQ_INT(h[i], want_h[i]);
    for (int i = 8; i < 256; i++)
        ASSERT_EQ_INT(h[i], 0);
    ASSERT_TRUE(memcmp(raw + 1024, p, n * 4) == 0);
    free(raw);

    zt_model_shape s;
    float *q;
    int dt = -1;
    ASSERT_OK(zt_modelfile_read_header(f32, &s, &dt, &err));
    ASSERT_EQ_INT(dt, ZT_F32);
    ASSERT_OK(zt_modelfile_read(f32, &s, &q, &err));
    ASSERT_TRUE(memcmp(&s, &small, sizeof(s)) == 0);
    ASSERT_TRUE(memcmp(p, q, n * 4) == 0);
    zt_free(q);

    /* bf16: values round to nearest even; reading widens exactly. */
    p[0] = 1.0f + 1.0f / 256;         /* halfway between 1 and 1+2^-7: even is 1 */
    p[1] = 1.0f + 3.0f / 256;         /* halfway between 1+2^-7 and 1+2^-6: even is 1+2^-6 */
    p[2] = 1.0f + 1.0f / 256 + 1e-6f; /* just above halfway: up */
    p[3] = -2.0f - 1.0f / 128;        /* halfway below -2: even is -2 */
    p[4] = 3.0f;                      /* exact */
    p[5] = 1e-40f;                    /* subnormal: kept to bf16 precision */
    const float want[6] = {1.0f, 1.0f + 1.0f / 64, 1.0f + 1.0f / 128, -2.0f, 3.0f, 0.0f};
    const char *f16 = path_of("m16.bin");
    ASSERT_OK(zt_modelfile_write(f16, &small, p, ZT_BF16, &err));
    ASSERT_EQ_INT(file_size(f16), 1024 + 2 * (long)n);
    raw = slurp(f16, &len);
    memcpy(h, raw, sizeof(h));
    ASSERT_EQ_INT(h[1], 5);
    uint16_t b0;
    memcpy(&b0, raw + 1024, 2);
    ASSERT_EQ_INT(b0, 0x3f80); /* 1.0 */
    free(raw);
    ASSERT_OK(zt_modelfile_read_header(f16, &s, &dt, &err));
    ASSERT_EQ_INT(dt, ZT_BF16);
    ASSERT_OK(zt_modelfile_read(f16, &s, &q, &err));
    for (int i = 0; i < 5; i++)
        if (q[i] != want[i])
            ZT_FAIL("bf16 element %d: %.9g read back as %.9g, want %.9g", i, p[i], q[i], want[i]);
    ASSERT_TRUE(q[5] > 0 && q[5] < 1.1e-40f && q[5] > 0.9e-40f);
    for (size_t i = 6; i < n; i++) {
        /* within half a bf16 ulp (2^-8 relative) */
        ASSERT_NEAR(q[i], p[i], 1.0 / 256, 0);
        uint32_t u;
        memcpy(&u, &q[i], 4);
        ASSERT_EQ_INT(u & 0xffff, 0);
    }
    zt_free(q);
    free(p);
}

static void expect_read_error(const char *name, const char *n1, const char *n2)
{
    zt_model_shape s;
    float *q = (float *)1;
    zt_err err;
    zt_err_clear(&err);
    zt_status st = zt_modelfile_read(path_of(name), &s, &q, &err);
    if (st == ZT_OK) ZT_FAIL("%s: read succeeded, want an error containing '%s'", name, n1);
    ASSERT_TRUE(q == NULL);
    ASSERT_CONTAINS(err.msg, name);
    ASSERT_CONTAINS(err.msg, n1);
    if (n2) ASSERT_CONTAINS(err.msg, n2);
    int dt;
    ASSERT_EQ_INT(zt_modelfile_read_header(path_of(name), &s, &dt, &err), st);
    printf("  ok: %s\n", err.msg);
}

/* Writes a header with the given ints [0..7] and `payload` bytes of zeros. */
static void write_raw(const char *name, const int32_t h8[8], long payload)
{
    int32_t h[256] = {0};
    memcpy(h, h8, 8 * sizeof(int32_t));
    FILE *f = fopen(path_of(name), "wb");
    fwrite(h, 4, 256, f);
    for (long i = 0; i < payload; i++)
        fputc(0, f);
    fclose(f);
}

static void test_validation(void)
{
    size_t sz[16];
    long n = (long)zt_modelfile_tensor_sizes(&small, sz);
    int32_t h[8] = {20240326, 3, 8, 10, 2, 2, 4, 16};
    write_raw("ok.bin", h, 4 * n);
    zt_model_shape s;
    float *q;
    ASSERT_OK(zt_modelfile_read(path_of("ok.bin"), &s, &q, NULL));
    zt_free(q);

    int32_t bad[8];
    memcpy(bad, h, sizeof(bad));
    bad[0] = 20240520;
    write_raw("magic.bin", bad, 4 * n);
    expect_read_error("magic.bin", "magic 20240520", NULL);
    memcpy(bad, h, sizeof(bad));
    bad[1] = 1;
    write_raw("v1.bin", bad, 4 * n);
    expect_read_error("v1.bin", "version 1", NULL);
    bad[1] = 4;
    write_raw("v4.bin", bad, 4 * n);
    expect_read_error("v4.bin", "version 4", NULL);
    write_raw("trunc.bin", h, 4 * n - 4);
    expect_read_error("trunc.bin", "truncated", "needs");
    write_raw("over.bin", h, 4 * n + 2);
    expect_read_error("over.bin", "oversized", NULL);
    /* A bf16 header over an fp32-sized payload. */
    memcpy(bad, h, sizeof(bad));
    bad[1] = 5;
    write_raw("bf16big.bin", bad, 4 * n);
    expect_read_error("bf16big.bin", "oversized", "bf16");
    FILE *f = fopen(path_of("tiny.bin"), "wb");
    fputs("hello", f);
    fclose(f);
    expect_read_error("tiny.bin", "shorter than the 1024-byte header", NULL);
    /* Nonsense shapes. */
    memcpy(bad, h, sizeof(bad));
    bad[6] = 0;
    write_raw("c0.bin", bad, 0);
    expect_read_error("c0.bin", "channels = 0", NULL);
    memcpy(bad, h, sizeof(bad));
    bad[5] = 3;
    write_raw("heads.bin", bad, 0);
    expect_read_error("heads.bin", "not divisible by num_heads 3", NULL);
    memcpy(bad, h, sizeof(bad));
    bad[7] = 8;
    write_raw("vp.bin", bad, 0);
    expect_read_error("vp.bin", "padded_vocab_size 8 is smaller than vocab_size 10", NULL);
    memcpy(bad, h, sizeof(bad));
    bad[4] = -1;
    write_raw("layers.bin", bad, 0);
    expect_read_error("layers.bin", "num_layers = -1", NULL);
    memcpy(bad, h, sizeof(bad));
    bad[6] = 2000000000;
    write_raw("huge.bin", bad, 0);
    expect_read_error("huge.bin", "channels = 2000000000", NULL);
    /* Missing file. */
    zt_err err;
    ASSERT_EQ_INT(zt_modelfile_read(path_of("absent.bin"), &s, &q, &err), ZT_ERR_NOT_FOUND);
    ASSERT_CONTAINS(err.msg, "absent.bin");
}

static void test_check_shape(void)
{
    zt_model_cfg cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.n_layer = 2;
    cfg.n_head = 2;
    cfg.n_embd = 4;
    cfg.block_size = 8;
    cfg.vocab_size = 10;
    cfg.padded_vocab_size = 16;
    zt_err err;
    ASSERT_OK(zt_modelfile_check_shape(&small, &cfg, "init.bin", &err));
    zt_model_shape s;
    zt_modelfile_shape_from_cfg(&cfg, &s);
    ASSERT_TRUE(memcmp(&s, &small, sizeof(s)) == 0);
    /* A longer file is fine (the first block_size rows of wpe are used). */
    cfg.block_size = 4;
    ASSERT_OK(zt_modelfile_check_shape(&small, &cfg, "init.bin", &err));
    /* Every mismatch is named with both values. */
    cfg.block_size = 16;
    cfg.n_layer = 4;
    cfg.n_embd = 8;
    cfg.padded_vocab_size = 128;
    ASSERT_EQ_INT(zt_modelfile_check_shape(&small, &cfg, "init.bin", &err), ZT_ERR_CONFIG);
    printf("  ok: %s\n", err.msg);
    ASSERT_CONTAINS(err.msg, "init.bin");
    ASSERT_CONTAINS(err.msg, "n_layer 2 (file) vs 4 (job)");
    ASSERT_CONTAINS(err.msg, "n_embd 4 (file) vs 8 (job)");
    ASSERT_CONTAINS(err.msg, "padded_vocab_size 16 (file) vs 128 (job)");
    ASSERT_CONTAINS(err.msg, "max_seq_len 8 (file) is smaller than block_size 16 (job)");
    ASSERT_CONTAINS(err.msg, "fix model.* in the job file or use an init file");
    ASSERT_TRUE(strstr(err.msg, "n_head") == NULL);
    ASSERT_TRUE(strstr(err.msg, "vocab_size 10") == NULL);
    cfg = (zt_model_cfg){.n_layer = 2,
                         .n_head = 1,
                         .n_embd = 4,
                         .block_size = 8,
                         .vocab_size = 11,
                         .padded_vocab_size = 16};
    ASSERT_EQ_INT(zt_modelfile_check_shape(&small, &cfg, "init.bin", &err), ZT_ERR_CONFIG);
    ASSERT_CONTAINS(err.msg, "n_head 2 (file) vs 1 (job)");
    ASSERT_CONTAINS(err.msg, "vocab_size 10 (file) vs 11 (job)");
}

static int count_entries(void)
{
    int n = 0;
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "ls -A %s | wc -l > /tmp/zt_mf_count_%d", tmpdir, (int)getpid());
    if (system(cmd) != 0) return -1;
    snprintf(cmd, sizeof(cmd), "/tmp/zt_mf_count_%d", (int)getpid());
    FILE *f = fopen(cmd, "r");
    if (!f || fscanf(f, "%d", &n) != 1) n = -1;
    if (f) fclose(f);
    remove(cmd);
    return n;
}

static void test_streaming(void)
{
    size_t sz[16];
    size_t n = zt_modelfile_tensor_sizes(&small, sz);
    float *p = random_params(n, 7);
    zt_err err;
    for (int d = 0; d < 2; d++) {
        zt_dtype dt = d ? ZT_BF16 : ZT_F32;
        ASSERT_OK(zt_modelfile_write(path_of("whole.bin"), &small, p, dt, &err));
        /* Tensor by tensor, each in irregular pieces (including empty ones). */
        zt_modelfile_writer *w;
        remove(path_of("pieces.bin"));
        ASSERT_OK(zt_modelfile_writer_open(&w, path_of("pieces.bin"), &small, dt, &err));
        size_t off = 0;
        for (int t = 0; t < 16; t++) {
            size_t left = sz[t], k = 0;
            while (left > 0) {
                size_t piece = (k % 3 == 0) ? 1 : (k % 3 == 1) ? 7 : 0;
                piece = piece > left ? left : piece;
                ASSERT_OK(zt_modelfile_writer_put(w, p + off, piece, &err));
                off += piece;
                left -= piece;
                k++;
            }
        }
        ASSERT_EQ_INT(off, n);
        /* Before commit, nothing at the path. */
        ASSERT_EQ_INT(access(path_of("pieces.bin"), F_OK), -1);
        ASSERT_OK(zt_modelfile_writer_commit(w, &err));
        long la, lb;
        unsigned char *a = slurp(path_of("whole.bin"), &la);
        unsigned char *b = slurp(path_of("pieces.bin"), &lb);
        ASSERT_EQ_INT(la, lb);
        ASSERT_TRUE(memcmp(a, b, (size_t)la) == 0);
        free(a);
        free(b);
    }
    int entries = count_entries();
    /* Too many elements. */
    zt_modelfile_writer *w;
    ASSERT_OK(zt_modelfile_writer_open(&w, path_of("over.bin"), &small, ZT_F32, &err));
    ASSERT_OK(zt_modelfile_writer_put(w, p, n - 3, &err));
    ASSERT_EQ_INT(zt_modelfile_writer_put(w, p, 4, &err), ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "over.bin");
    ASSERT_CONTAINS(err.msg, "tensor lnfb");
    zt_modelfile_writer_abort(w);
    /* Too few: commit refuses, names the missing tensor, leaves no file. */
    ASSERT_OK(zt_modelfile_writer_open(&w, path_of("short.bin"), &small, ZT_BF16, &err));
    ASSERT_OK(zt_modelfile_writer_put(w, p, sz[0] + sz[1], &err));
    ASSERT_EQ_INT(zt_modelfile_writer_commit(w, &err), ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "tensor ln1w onwards is missing");
    ASSERT_EQ_INT(access(path_of("short.bin"), F_OK), -1);
    /* Abort: no file, no temporary. */
    ASSERT_OK(zt_modelfile_writer_open(&w, path_of("aborted.bin"), &small, ZT_F32, &err));
    ASSERT_OK(zt_modelfile_writer_put(w, p, 100, &err));
    zt_modelfile_writer_abort(w);
    zt_modelfile_writer_abort(NULL);
    ASSERT_EQ_INT(access(path_of("aborted.bin"), F_OK), -1);
    ASSERT_EQ_INT(count_entries(), entries);
    /* Unsupported dtype, bad shape, unwritable place, full disk. */
    ASSERT_EQ_INT(zt_modelfile_writer_open(&w, path_of("f16.bin"), &small, ZT_F16, &err),
                  ZT_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(err.msg, "f16.bin");
    zt_model_shape bad = small;
    bad.num_heads = 3;
    ASSERT_EQ_INT(zt_modelfile_writer_open(&w, path_of("bad.bin"), &bad, ZT_F32, &err),
                  ZT_ERR_FORMAT);
    ASSERT_EQ_INT(zt_modelfile_write(path_of("none/x.bin"), &small, p, ZT_F32, &err),
                  ZT_ERR_NOT_FOUND);
    ASSERT_CONTAINS(err.msg, "none/x.bin");
    /* /dev/full (a device, so written in place) refuses the very first write. */
    zt_status st = zt_modelfile_write("/dev/full", &small, p, ZT_F32, &err);
    ASSERT_EQ_INT(st, ZT_ERR_NOSPACE);
    ASSERT_CONTAINS(err.msg, "/dev/full");
    printf("  ok: %s\n", err.msg);
    st = zt_modelfile_write("/dev/full", &small, p, ZT_BF16, &err);
    ASSERT_EQ_INT(st, ZT_ERR_NOSPACE);
    ASSERT_EQ_INT(count_entries(), entries);
    free(p);
}

int main(void)
{
    if (tmpdir_create("zt_test_modelfile") != 0) {
        perror("mkdtemp");
        return 1;
    }
    printf("tensor sizes\n");
    test_sizes();
    printf("round trips\n");
    test_round_trips();
    printf("validation\n");
    test_validation();
    printf("shape check\n");
    test_check_shape();
    printf("streaming writer\n");
    test_streaming();
    printf("all modelfile tests passed\n");
    return 0;
}
