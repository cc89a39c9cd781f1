/* Tests engine/data/datagen.c: the Markov chain (rows sum to 1, pi is stationary, the floor matches
 * an empirical conditional entropy of a long walk within 1%), synth determinism and files
 * (names, counts, meta JSON, stale shards removed), tokenize round trip and error messages. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "engine/data/datagen.h"
#include "engine/data/dataloader.h"
#include "tests/test.h"
#include "tests/tmpdir.h"

static unsigned char *slurp(const char *p, long *n)
{
    FILE *f = fopen(p, "rb");
    if (!f) ZT_FAIL("cannot open %s", p);
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n + 1);
    ASSERT_EQ_INT(fread(b, 1, (size_t)*n, f), *n);
    fclose(f);
    return b;
}

/* Tokens of a shard file read by hand (header checked). */
static uint16_t *read_shard(const char *p, long *ntok)
{
    long n;
    unsigned char *b = slurp(p, &n);
    int32_t h[256];
    ASSERT_TRUE(n >= 1024);
    memcpy(h, b, sizeof(h));
    ASSERT_EQ_INT(h[0], 20240520);
    ASSERT_EQ_INT(h[1], 1);
    ASSERT_EQ_INT(1024 + 2 * (long)h[2], n);
    *ntok = h[2];
    uint16_t *t = malloc((size_t)h[2] * 2 + 2);
    memcpy(t, b + 1024, (size_t)h[2] * 2);
    free(b);
    return t;
}

static void test_chain(void)
{
    zt_datagen_chain *c;
    zt_err err;
    const int V = 12, M = 5, K = 3;
    ASSERT_OK(zt_datagen_chain_create(&c, V, M, K, 42, &err));
    double floor = zt_datagen_chain_entropy_floor(c);
    printf("  tiny chain: floor %.6f nats, unigram %.6f nats\n", floor,
           zt_datagen_chain_unigram_entropy(c));
    /* Rows sum to 1, each active token has exactly K successors, all probabilities >= 0.1/K,
     * pi sums to 1 and is stationary; floor = sum pi H(row). */
    int active = 0;
    double pisum = 0, fl = 0, uni = 0;
    for (int a = 0; a < V; a++) {
        double pa = zt_datagen_chain_stationary(c, a);
        double row = 0, h = 0;
        int nsucc = 0;
        for (int b = 0; b < V; b++) {
            double p = zt_datagen_chain_prob(c, a, b);
            if (p > 0) {
                nsucc++;
                ASSERT_TRUE(p >= 0.1 / K - 1e-12);
                ASSERT_TRUE(zt_datagen_chain_stationary(c, b) > 0);
                h -= p * log(p);
            }
            row += p;
        }
        if (pa > 0) {
            active++;
            ASSERT_EQ_INT(nsucc, K);
            ASSERT_NEAR(row, 1.0, 0, 1e-12);
            fl += pa * h;
            uni -= pa * log(pa);
        } else {
            ASSERT_EQ_INT(nsucc, 0);
        }
        pisum += pa;
        double in = 0; /* (pi P)(a) */
        for (int b = 0; b < V; b++)
            in += zt_datagen_chain_stationary(c, b) * zt_datagen_chain_prob(c, b, a);
        ASSERT_NEAR(in, pa, 0, 1e-11);
    }
    ASSERT_EQ_INT(active, M);
    ASSERT_NEAR(pisum, 1.0, 0, 1e-12);
    ASSERT_NEAR(fl, floor, 1e-12, 0);
    ASSERT_NEAR(uni, zt_datagen_chain_unigram_entropy(c), 1e-12, 0);
    ASSERT_TRUE(floor > 0.3 && floor < log(K));

    /* Brute force: the empirical conditional entropy of a long walk (the plug-in estimate
     * -sum c(a,b)/N log(c(a,b)/c(a))) is within 1% of the exact floor. */
    const size_t N = 2000000;
    uint16_t *t = malloc(N * sizeof(*t));
    zt_datagen_chain_generate(c, t, N / 2);
    zt_datagen_chain_generate(c, t + N / 2, N - N / 2); /* the walk continues across calls */
    static double pair[12][12], single[12];
    for (size_t i = 0; i + 1 < N; i++) {
        ASSERT_TRUE(zt_datagen_chain_prob(c, t[i], t[i + 1]) > 0);
        pair[t[i]][t[i + 1]] += 1;
        single[t[i]] += 1;
    }
    double emp = 0;
    for (int a = 0; a < V; a++)
        for (int b = 0; b < V; b++)
            if (pair[a][b] > 0) emp -= pair[a][b] / (double)(N - 1) * log(pair[a][b] / single[a]);
    printf("  empirical conditional entropy over %zu tokens: %.6f (exact %.6f, %.3f%% off)\n", N,
           emp, floor, 100 * fabs(emp - floor) / floor);
    ASSERT_NEAR(emp, floor, 0.01, 0);
    /* Visit frequencies match pi. */
    for (int a = 0; a < V; a++)
        ASSERT_NEAR(single[a] / (double)(N - 1), zt_datagen_chain_stationary(c, a), 0, 0.005);
    free(t);
    zt_datagen_chain_destroy(c);
    zt_datagen_chain_destroy(NULL);

    /* The default chain: a mid-size floor, well below the unigram entropy. */
    zt_synth_opts o;
    zt_synth_opts_default(&o);
    ASSERT_OK(zt_datagen_chain_create(&c, o.vocab, o.active_vocab, o.successors, o.seed, &err));
    printf("  default chain: floor %.4f, unigram %.4f, uniform %.4f\n",
           zt_datagen_chain_entropy_floor(c), zt_datagen_chain_unigram_entropy(c), log(o.vocab));
    ASSERT_TRUE(zt_datagen_chain_entropy_floor(c) > 0.5);
    ASSERT_TRUE(zt_datagen_chain_entropy_floor(c) < zt_datagen_chain_unigram_entropy(c) - 1);
    zt_datagen_chain_destroy(c);
    /* Large alphabets still converge. */
    ASSERT_OK(zt_datagen_chain_create(&c, 65536, 65536, 2, 7, &err));
    zt_datagen_chain_destroy(c);
    ASSERT_OK(zt_datagen_chain_create(&c, 50257, 20000, 64, 7, &err));
    zt_datagen_chain_destroy(c);

    /* Parameter errors name the option. */
    ASSERT_EQ_INT(zt_datagen_chain_create(&c, 1, 1, 2, 0, &err), ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "--vocab 1");
    ASSERT_EQ_INT(zt_datagen_chain_create(&c, 70000, 10, 2, 0, &err), ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "--vocab 70000");
    ASSERT_EQ_INT(zt_datagen_chain_create(&c, 256, 300, 2, 0, &err), ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "--active-vocab 300");
    ASSERT_EQ_INT(zt_datagen_chain_create(&c, 256, 8, 9, 0, &err), ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "--successors 9");
    ASSERT_EQ_INT(zt_datagen_chain_create(&c, 256, 8, 1, 0, &err), ZT_ERR_INVALID);
    ASSERT_TRUE(c == NULL);
}

static zt_synth_opts small_opts(const char *dir)
{
    zt_synth_opts o;
    zt_synth_opts_default(&o);
    o.out_dir = dir;
    o.train_tokens = 30001;
    o.val_tokens = 5000;
    o.shards = 3;
    return o;
}

static void test_synth(void)
{
    zt_err err;
    zt_datagen_result r;
    /* Out directories are created with their parents. */
    zt_synth_opts o = small_opts(path_of("a/b"));
    ASSERT_OK(zt_datagen_synth(&o, &r, &err));
    ASSERT_EQ_INT(r.num_files, 4);
    const char *names[4] = {"a/b/synth_train_000.bin", "a/b/synth_train_001.bin",
                            "a/b/synth_train_002.bin", "a/b/synth_val_000.bin"};
    const long counts[4] = {10001, 10000, 10000, 5000};
    uint16_t *all = malloc((30001 + 5000) * sizeof(uint16_t));
    long at = 0;
    for (int i = 0; i < 4; i++) {
        ASSERT_STREQ(r.files[i].path, path_of(names[i]));
        ASSERT_EQ_INT(r.files[i].tokens, counts[i]);
        ASSERT_STREQ(r.files[i].split, i < 3 ? "train" : "val");
        long n;
        uint16_t *t = read_shard(r.files[i].path, &n);
        ASSERT_EQ_INT(n, counts[i]);
        memcpy(all + at, t, (size_t)n * 2);
        at += n;
        free(t);
    }
    /* One continuing walk: every consecutive pair, across shard boundaries too, is an edge. */
    zt_datagen_chain *c;
    ASSERT_OK(zt_datagen_chain_create(&c, o.vocab, o.active_vocab, o.successors, o.seed, &err));
    for (long i = 0; i + 1 < at; i++)
        if (zt_datagen_chain_prob(c, all[i], all[i + 1]) <= 0)
            ZT_FAIL("tokens %ld,%ld (%u -> %u) are not an edge of the chain", i, i + 1, all[i],
                    all[i + 1]);
    ASSERT_NEAR(r.entropy_floor, zt_datagen_chain_entropy_floor(c), 0, 0);
    zt_datagen_chain_destroy(c);
    free(all);

    /* The meta file. */
    ASSERT_STREQ(r.meta_path, path_of("a/b/synth_meta.json"));
    json_error_t je;
    json_t *m = json_load_file(r.meta_path, 0, &je);
    ASSERT_TRUE(m != NULL);
    ASSERT_NEAR(json_real_value(json_object_get(m, "entropy_floor_nats")), r.entropy_floor, 1e-15,
                0);
    ASSERT_EQ_INT(json_integer_value(json_object_get(m, "vocab")), 256);
    ASSERT_EQ_INT(json_integer_value(json_object_get(m, "seed")), 1337);
    ASSERT_EQ_INT(json_integer_value(json_object_get(m, "active_vocab")), o.active_vocab);
    ASSERT_EQ_INT(json_integer_value(json_object_get(m, "successors")), o.successors);
    ASSERT_EQ_INT(json_integer_value(json_object_get(m, "train_tokens")), 30001);
    ASSERT_EQ_INT(json_array_size(json_object_get(m, "files")), 4);
    ASSERT_STREQ(
        json_string_value(json_object_get(json_array_get(json_object_get(m, "files"), 3), "name")),
        "synth_val_000.bin");
    json_decref(m);

    /* The loader reads what synth wrote, in the job file's pattern. */
    zt_dataset *ds;
    ASSERT_OK(zt_dataset_open(&ds, path_of("a/b/synth_train_*.bin"), 128, 256, &err));
    ASSERT_EQ_INT(zt_dataset_num_shards(ds), 3);
    ASSERT_EQ_INT(zt_dataset_num_samples(ds), 78 * 3);
    zt_dataset_close(ds);
    zt_datagen_result_free(&r);
    zt_datagen_result_free(NULL);

    /* Determinism: same seed, same bytes; another seed, other bytes. */
    o = small_opts(path_of("c"));
    ASSERT_OK(zt_datagen_synth(&o, &r, &err));
    zt_datagen_result_free(&r);
    const char *files[] = {"synth_train_000.bin", "synth_train_001.bin", "synth_train_002.bin",
                           "synth_val_000.bin", "synth_meta.json"};
    for (int i = 0; i < 5; i++) {
        char pa[64], pc[64];
        snprintf(pa, sizeof(pa), "a/b/%s", files[i]);
        snprintf(pc, sizeof(pc), "c/%s", files[i]);
        long na, nc;
        unsigned char *ba = slurp(path_of(pa), &na), *bc = slurp(path_of(pc), &nc);
        ASSERT_EQ_INT(na, nc);
        if (memcmp(ba, bc, (size_t)na) != 0)
            ZT_FAIL("%s differs between two runs with the same seed", files[i]);
        free(ba);
        free(bc);
    }
    o.seed = 1338;
    o.out_dir = path_of("d");
    ASSERT_OK(zt_datagen_synth(&o, &r, &err));
    zt_datagen_result_free(&r);
    long na, nd;
    unsigned char *ba = slurp(path_of("c/synth_train_000.bin"), &na);
    unsigned char *bd = slurp(path_of("d/synth_train_000.bin"), &nd);
    ASSERT_EQ_INT(na, nd);
    ASSERT_TRUE(memcmp(ba + 1024, bd + 1024, (size_t)na - 1024) != 0);
    free(ba);
    free(bd);

    /* A smaller rerun removes the stale higher-numbered shards (and only those). */
    FILE *keep = fopen(path_of("c/synth_train_notes.bin"), "w");
    fclose(keep);
    o = small_opts(path_of("c"));
    o.shards = 1;
    o.val_tokens = 0;
    ASSERT_OK(zt_datagen_synth(&o, &r, &err));
    ASSERT_EQ_INT(r.num_files, 1);
    ASSERT_EQ_INT(r.num_removed, 3);
    ASSERT_EQ_INT(access(path_of("c/synth_train_001.bin"), F_OK), -1);
    ASSERT_EQ_INT(access(path_of("c/synth_train_002.bin"), F_OK), -1);
    ASSERT_EQ_INT(access(path_of("c/synth_val_000.bin"), F_OK), -1);
    ASSERT_EQ_INT(access(path_of("c/synth_train_notes.bin"), F_OK), 0);
    zt_datagen_result_free(&r);

    /* Errors. */
    o = small_opts(path_of("e"));
    o.shards = 0;
    ASSERT_EQ_INT(zt_datagen_synth(&o, &r, &err), ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "--shards 0");
    o = small_opts(path_of("e"));
    o.train_tokens = 5;
    ASSERT_EQ_INT(zt_datagen_synth(&o, &r, &err), ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "--train-tokens 5");
    o = small_opts(path_of("e"));
    o.val_tokens = 1;
    ASSERT_EQ_INT(zt_datagen_synth(&o, &r, &err), ZT_ERR_INVALID);
    o = small_opts(path_of("e"));
    o.prefix = "x/y";
    ASSERT_EQ_INT(zt_datagen_synth(&o, &r, &err), ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "--prefix 'x/y'");
    o = small_opts(path_of("a/b/synth_meta.json/sub")); /* through a regular file */
    ASSERT_TRUE(zt_datagen_synth(&o, &r, &err) != ZT_OK);
    ASSERT_CONTAINS(err.msg, "synth_meta.json");
    printf("  ok: %s\n", err.msg);
    o = small_opts("/dev/null/x");
    ASSERT_TRUE(zt_datagen_synth(&o, &r, &err) != ZT_OK);
    ASSERT_CONTAINS(err.msg, "/dev/null");
    ASSERT_EQ_INT(access(path_of("e"), F_OK), -1); /* nothing made for refused options */
}

static void test_tokenize(void)
{
    zt_err err;
    zt_datagen_result r;
    /* Every byte value, in a pseudo-random file of 10007 bytes. */
    const long n = 10007;
    unsigned char *data = malloc((size_t)n);
    uint32_t x = 12345;
    for (long i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        data[i] = i < 256 ? (unsigned char)i : (unsigned char)(x >> 16);
    }
    FILE *f = fopen(path_of("corpus.txt"), "wb");
    fwrite(data, 1, (size_t)n, f);
    fclose(f);

    zt_tokenize_opts o;
    zt_tokenize_opts_default(&o);
    o.input = path_of("corpus.txt");
    o.out_dir = path_of("tok");
    o.shard_tokens = 3000;
    ASSERT_OK(zt_datagen_tokenize(&o, &r, &err));
    /* val = round(10007 * 0.1) = 1001, train = 9006 -> shards 3000, 3000, 3000, 6. */
    ASSERT_EQ_INT(r.val_tokens, 1001);
    ASSERT_EQ_INT(r.train_tokens, 9006);
    ASSERT_EQ_INT(r.input_bytes, n);
    ASSERT_EQ_INT(r.num_files, 5);
    ASSERT_STREQ(r.files[0].path, path_of("tok/corpus_train_000.bin"));
    ASSERT_STREQ(r.files[3].path, path_of("tok/corpus_train_003.bin"));
    ASSERT_EQ_INT(r.files[3].tokens, 6);
    ASSERT_STREQ(r.files[4].path, path_of("tok/corpus_val_000.bin"));
    /* Bytes back = the file. */
    long at = 0;
    for (int i = 0; i < r.num_files; i++) {
        long m;
        uint16_t *t = read_shard(r.files[i].path, &m);
        for (long j = 0; j < m; j++) {
            if (t[j] != data[at + j])
                ZT_FAIL("%s token %ld is %u, the input byte is %u", r.files[i].path, j, t[j],
                        data[at + j]);
        }
        at += m;
        free(t);
    }
    ASSERT_EQ_INT(at, n);
    zt_datagen_result_free(&r);

    /* Prefix option, no validation part, one big shard. */
    o.prefix = "mine";
    o.val_fraction = 0;
    o.shard_tokens = 100000;
    ASSERT_OK(zt_datagen_tokenize(&o, &r, &err));
    ASSERT_EQ_INT(r.num_files, 1);
    ASSERT_EQ_INT(r.files[0].tokens, n);
    zt_datagen_result_free(&r);

    /* Errors name the path. */
    zt_tokenize_opts_default(&o);
    o.out_dir = path_of("tok");
    o.input = path_of("nope.txt");
    ASSERT_EQ_INT(zt_datagen_tokenize(&o, &r, &err), ZT_ERR_NOT_FOUND);
    ASSERT_CONTAINS(err.msg, "nope.txt");
    printf("  ok: %s\n", err.msg);
    f = fopen(path_of("empty.txt"), "wb");
    fclose(f);
    o.input = path_of("empty.txt");
    ASSERT_EQ_INT(zt_datagen_tokenize(&o, &r, &err), ZT_ERR_FORMAT);
    ASSERT_CONTAINS(err.msg, "empty.txt");
    ASSERT_CONTAINS(err.msg, "empty");
    printf("  ok: %s\n", err.msg);
    o.input = tmpdir;
    ASSERT_EQ_INT(zt_datagen_tokenize(&o, &r, &err), ZT_ERR_FORMAT);
    ASSERT_CONTAINS(err.msg, "not a regular file");
    o.input = path_of("corpus.txt");
    o.out_dir = path_of("corpus.txt/out"); /* unwritable: through a regular file */
    ASSERT_TRUE(zt_datagen_tokenize(&o, &r, &err) != ZT_OK);
    ASSERT_CONTAINS(err.msg, "corpus.txt");
    printf("  ok: %s\n", err.msg);
    o.out_dir = path_of("tok");
    o.val_fraction = 1.0;
    ASSERT_EQ_INT(zt_datagen_tokenize(&o, &r, &err), ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "--val-fraction");
    o.val_fraction = 0.1;
    o.shard_tokens = 0;
    ASSERT_EQ_INT(zt_datagen_tokenize(&o, &r, &err), ZT_ERR_INVALID);
    ASSERT_CONTAINS(err.msg, "--shard-tokens");
    /* Default prefix: the input's name up to its first dot. */
    o.shard_tokens = 100000;
    f = fopen(path_of("notes.v2.txt"), "wb");
    fputs("hello, world\n", f);
    fclose(f);
    o.input = path_of("notes.v2.txt");
    ASSERT_OK(zt_datagen_tokenize(&o, &r, &err));
    ASSERT_STREQ(r.files[0].path, path_of("tok/notes_train_000.bin"));
    ASSERT_EQ_INT(r.files[0].tokens, 13 - 1);
    ASSERT_STREQ(r.files[1].path, path_of("tok/notes_val_000.bin"));
    zt_datagen_result_free(&r);
    free(data);
}

int main(void)
{
    if (tmpdir_create("zt_test_datagen") != 0) {
        perror("mkdtemp");
        return 1;
    }
    printf("markov chain\n");
    test_chain();
    printf("synth\n");
    test_synth();
    printf("tokenize\n");
    test_tokenize();
    printf("all datagen tests passed\n");
    return 0;
}
