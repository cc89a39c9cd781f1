/* zerotrain: synthetic Markov corpora with an exact entropy floor, and byte-level tokenization
 * (see datagen.h). Both stream tokens through one fixed buffer into durable shard files, so
 * memory does not grow with the corpus. */
#define _POSIX_C_SOURCE 200809L
#include "engine/data/datagen.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/fsutil.h"
#include "engine/data/dataloader.h"

#define ZT_DATAGEN_CHUNK ((size_t)1 << 20) /* tokens per streamed write */
#define ZT_DATAGEN_UNIFORM_MIX 0.1         /* share of each state's mass spread uniformly */
#define ZT_DATAGEN_PI_TOL 1e-12            /* L1 change per power-iteration step */
#define ZT_DATAGEN_PI_MAX_ITERS 200000

/* ---- PRNG: splitmix64 to seed xoshiro256** ------------------------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(uint64_t s[4])
{
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4])
{
    return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [0, n), unbiased (rejection). */
static uint32_t rng_below(uint64_t s[4], uint32_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do
        r = rng_next(s);
    while (r >= limit);
    return (uint32_t)(r % n);
}

/* ---- the chain ------------------------------------------------------------------------ */

struct zt_datagen_chain {
    int vocab, M, K;
    uint16_t *token;   /* (M) the token of each state */
    int32_t *state_of; /* (vocab) the state of each token, -1 when inactive */
    int32_t *succ;     /* (M, K) successor states */
    double *prob;      /* (M, K) transition probabilities */
    double *cum;       /* (M, K) cumulative probabilities, last exactly 1 */
    double *pi;        /* (M) stationary distribution */
    double floor_nats, unigram_nats;
    uint64_t rng[4];
    int32_t cur; /* current state; -1 before the first token */
};

void zt_datagen_chain_destroy(zt_datagen_chain *c)
{
    if (!c) return;
    zt_free(c->token);
    zt_free(c->state_of);
    zt_free(c->succ);
    zt_free(c->prob);
    zt_free(c->cum);
    zt_free(c->pi);
    zt_free(c);
}

/* Stationary distribution by power iteration on (P+I)/2; returns false if it does not settle. */
static bool stationary(zt_datagen_chain *c)
{
    const int M = c->M, K = c->K;
    double *next = zt_malloc((size_t)M * sizeof(double));
    if (!next) return false;
    for (int i = 0; i < M; i++)
        c->pi[i] = 1.0 / M;
    bool settled = false;
    for (int it = 0; it < ZT_DATAGEN_PI_MAX_ITERS && !settled; it++) {
        for (int i = 0; i < M; i++)
            next[i] = 0.5 * c->pi[i];
        for (int i = 0; i < M; i++)
            for (int j = 0; j < K; j++)
                next[c->succ[(size_t)i * K + j]] += 0.5 * c->pi[i] * c->prob[(size_t)i * K + j];
        double sum = 0, diff = 0;
        for (int i = 0; i < M; i++)
            sum += next[i];
        for (int i = 0; i < M; i++) {
            next[i] /= sum;
            diff += fabs(next[i] - c->pi[i]);
            c->pi[i] = next[i];
        }
        settled = diff < ZT_DATAGEN_PI_TOL;
    }
    zt_free(next);
    return settled;
}

zt_status zt_datagen_chain_create(zt_datagen_chain **out, int vocab, int active_vocab,
                                  int successors, uint64_t seed, zt_err *err)
{
    *out = NULL;
    if (vocab < 2 || vocab > 65536)
        return zt_err_set(err, ZT_ERR_INVALID, "--vocab %d is outside 2..65536 (tokens are 16-bit)",
                          vocab);
    if (active_vocab < 2 || active_vocab > vocab)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "--active-vocab %d is outside 2..%d (the vocabulary size)", active_vocab,
                          vocab);
    int kmax = active_vocab < ZT_DATAGEN_MAX_SUCCESSORS ? active_vocab : ZT_DATAGEN_MAX_SUCCESSORS;
    if (successors < 2 || successors > kmax)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "--successors %d is outside 2..%d (at most the active vocabulary and %d)",
                          successors, kmax, ZT_DATAGEN_MAX_SUCCESSORS);
    const int M = active_vocab, K = successors;
    zt_status st = ZT_OK;
    int32_t *mark = NULL;
    zt_datagen_chain *c = zt_calloc(1, sizeof(*c));
    if (!c) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory building the Markov chain");
    c->vocab = vocab;
    c->M = M;
    c->K = K;
    c->cur = -1;
    c->token = zt_malloc((size_t)M * sizeof(*c->token));
    c->state_of = zt_malloc((size_t)vocab * sizeof(*c->state_of));
    c->succ = zt_malloc((size_t)M * K * sizeof(*c->succ));
    c->prob = zt_malloc((size_t)M * K * sizeof(*c->prob));
    c->cum = zt_malloc((size_t)M * K * sizeof(*c->cum));
    c->pi = zt_malloc((size_t)M * sizeof(*c->pi));
    mark = zt_malloc((size_t)M * sizeof(*mark));
    if (!c->token || !c->state_of || !c->succ || !c->prob || !c->cum || !c->pi || !mark) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory building the Markov chain");
        goto fail;
    }
    uint64_t sm = seed;
    for (int i = 0; i < 4; i++)
        c->rng[i] = splitmix64(&sm);

    /* Active tokens: the first M of a seeded shuffle of the vocabulary. */
    for (int t = 0; t < vocab; t++)
        c->state_of[t] = t;
    for (int i = 0; i < M; i++) {
        int j = i + (int)rng_below(c->rng, (uint32_t)(vocab - i));
        int32_t tmp = c->state_of[i];
        c->state_of[i] = c->state_of[j];
        c->state_of[j] = tmp;
        c->token[i] = (uint16_t)c->state_of[i];
    }
    for (int t = 0; t < vocab; t++)
        c->state_of[t] = -1;
    for (int i = 0; i < M; i++)
        c->state_of[c->token[i]] = i;

    /* Successors and their probabilities. */
    for (int i = 0; i < M; i++)
        mark[i] = -1;
    for (int i = 0; i < M; i++) {
        int32_t *sc = c->succ + (size_t)i * K;
        double *p = c->prob + (size_t)i * K;
        sc[0] = (i + 1) % M;
        mark[sc[0]] = i;
        for (int j = 1; j < K; j++) {
            int32_t s;
            do
                s = (int32_t)rng_below(c->rng, (uint32_t)M);
            while (mark[s] == i);
            mark[s] = i;
            sc[j] = s;
        }
        double sum = 0;
        for (int j = 0; j < K; j++) {
            p[j] = -log(1.0 - rng_uniform(c->rng)); /* Exp(1): normalised, a Dirichlet(1) draw */
            sum += p[j];
        }
        double acc = 0;
        for (int j = 0; j < K; j++) {
            p[j] = (1.0 - ZT_DATAGEN_UNIFORM_MIX) * p[j] / sum + ZT_DATAGEN_UNIFORM_MIX / K;
            acc += p[j];
            c->cum[(size_t)i * K + j] = acc;
        }
        c->cum[(size_t)i * K + K - 1] = 1.0;
    }
    if (!stationary(c)) {
        st = zt_err_set(
            err, ZT_ERR_INTERNAL,
            "the Markov chain's stationary distribution did not converge (vocab %d, active %d, successors %d); try another --seed",
            vocab, M, K);
        goto fail;
    }
    double fl = 0, uni = 0;
    for (int i = 0; i < M; i++) {
        double h = 0;
        for (int j = 0; j < K; j++) {
            double q = c->prob[(size_t)i * K + j];
            h -= q * log(q);
        }
        fl += c->pi[i] * h;
        if (c->pi[i] > 0) uni -= c->pi[i] * log(c->pi[i]);
    }
    c->floor_nats = fl;
    c->unigram_nats = uni;
    zt_free(mark);
    *out = c;
    return ZT_OK;

fail:
    zt_free(mark);
    zt_datagen_chain_destroy(c);
    return st;
}

double zt_datagen_chain_entropy_floor(const zt_datagen_chain *c)
{
    return c->floor_nats;
}

double zt_datagen_chain_unigram_entropy(const zt_datagen_chain *c)
{
    return c->unigram_nats;
}

double zt_datagen_chain_prob(const zt_datagen_chain *c, int a, int b)
{
    if (a < 0 || a >= c->vocab || b < 0 || b >= c->vocab) return 0;
    int sa = c->state_of[a], sb = c->state_of[b];
    if (sa < 0 || sb < 0) return 0;
    for (int j = 0; j < c->K; j++)
        if (c->succ[(size_t)sa * c->K + j] == sb) return c->prob[(size_t)sa * c->K + j];
    return 0;
}

double zt_datagen_chain_stationary(const zt_datagen_chain *c, int a)
{
    if (a < 0 || a >= c->vocab || c->state_of[a] < 0) return 0;
    return c->pi[c->state_of[a]];
}

void zt_datagen_chain_generate(zt_datagen_chain *c, uint16_t *out, size_t n)
{
    const int K = c->K;
    size_t i = 0;
    if (n > 0 && c->cur < 0) {
        double u = rng_uniform(c->rng), acc = 0;
        int s = c->M - 1;
        for (int j = 0; j < c->M; j++) {
            acc += c->pi[j];
            if (u < acc) {
                s = j;
                break;
            }
        }
        c->cur = s;
        out[i++] = c->token[s];
    }
    for (; i < n; i++) {
        const double *cum = c->cum + (size_t)c->cur * K;
        double u = rng_uniform(c->rng);
        int lo = 0, hi = K - 1; /* first j with u < cum[j] */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (u < cum[mid])
                hi = mid;
            else
                lo = mid + 1;
        }
        c->cur = c->succ[(size_t)c->cur * K + lo];
        out[i] = c->token[c->cur];
    }
}

/* ---- files ---------------------------------------------------------------------------- */

void zt_datagen_result_free(zt_datagen_result *r)
{
    if (!r) return;
    for (int i = 0; i < r->num_files; i++)
        zt_free(r->files[i].path);
    zt_free(r->files);
    for (int i = 0; i < r->num_removed; i++)
        zt_free(r->removed[i]);
    zt_free(r->removed);
    zt_free(r->meta_path);
    memset(r, 0, sizeof(*r));
}

static zt_status check_prefix(const char *prefix, zt_err *err)
{
    if (!prefix || !*prefix || strchr(prefix, '/') || strcmp(prefix, ".") == 0 ||
        strcmp(prefix, "..") == 0)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "--prefix '%s' must be a plain file-name stem (no '/'), e.g. synth",
                          prefix ? prefix : "");
    return ZT_OK;
}

/* mkdir -p, with the messages for --out */
static zt_status make_dirs(const char *dir, zt_err *err)
{
    char bad[4096];
    if (zt_mkdirs(dir, false, bad, sizeof(bad)) == 0) return ZT_OK;
    if (errno == ENOTDIR)
        return zt_err_set(
            err, ZT_ERR_IO,
            "cannot use %s as an output directory: it is not a directory; choose another --out",
            bad);
    return zt_err_set(err, errno == ENOSPC ? ZT_ERR_NOSPACE : ZT_ERR_IO,
                      "cannot create output directory %s: %s; choose a writable --out directory",
                      bad, strerror(errno));
}

static zt_status add_file(zt_datagen_result *r, char *path, const char *split, uint64_t tokens,
                          zt_err *err)
{
    zt_datagen_file *f = zt_realloc(r->files, (size_t)(r->num_files + 1) * sizeof(*f));
    if (!f) {
        zt_free(path);
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    }
    r->files = f;
    f[r->num_files].path = path;
    f[r->num_files].split = split;
    f[r->num_files].tokens = tokens;
    r->num_files++;
    return ZT_OK;
}

/* If name is "<prefix>_<split>_<digits>.bin" returns the number, else -1. */
static long shard_index(const char *name, const char *prefix, const char *split)
{
    size_t pl = strlen(prefix), sl = strlen(split);
    if (strncmp(name, prefix, pl) != 0 || name[pl] != '_' || strncmp(name + pl + 1, split, sl) ||
        name[pl + 1 + sl] != '_')
        return -1;
    const char *d = name + pl + sl + 2;
    size_t nd = strspn(d, "0123456789");
    if (nd < 3 || nd > 9 || strcmp(d + nd, ".bin") != 0) return -1;
    return strtol(d, NULL, 10);
}

/* Deletes <dir>/<prefix>_<split>_NNN.bin for NNN >= keep, recording each in r->removed. */
static zt_status remove_stale(const char *dir, const char *prefix, const char *split, long keep,
                              zt_datagen_result *r, zt_err *err)
{
    DIR *d = opendir(dir);
    if (!d) return ZT_OK;
    zt_status st = ZT_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long idx = shard_index(e->d_name, prefix, split);
        if (idx < keep) continue;
        char *path = zt_asprintf("%s/%s", dir, e->d_name);
        char **rm =
            path ? zt_realloc(r->removed, (size_t)(r->num_removed + 1) * sizeof(*rm)) : NULL;
        if (!rm) {
            zt_free(path);
            st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
            break;
        }
        r->removed = rm;
        if (unlink(path) != 0) {
            st = zt_err_set(
                err, ZT_ERR_IO,
                "cannot remove the stale shard %s (left from an earlier run, it would join this corpus): %s; remove it by hand",
                path, strerror(errno));
            zt_free(path);
            break;
        }
        r->removed[r->num_removed++] = path;
    }
    closedir(d);
    return st;
}

/* Fills buf[0..n) with the next tokens. */
typedef zt_status (*fill_fn)(void *ctx, uint16_t *buf, size_t n, zt_err *err);

/* Writes one shard of n tokens drawn from fill, through buf (cap tokens). */
static zt_status write_streamed(const char *path, uint64_t n, uint16_t *buf, size_t cap,
                                fill_fn fill, void *ctx, zt_err *err)
{
    int32_t header[ZT_SHARD_HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = ZT_SHARD_MAGIC;
    header[1] = ZT_SHARD_VERSION;
    header[2] = (int32_t)n;
    zt_outfile *f;
    zt_status st = zt_outfile_open(&f, path, err);
    if (st != ZT_OK) return st;
    st = zt_outfile_write(f, header, sizeof(header), err);
    for (uint64_t done = 0; st == ZT_OK && done < n;) {
        size_t m = n - done < cap ? (size_t)(n - done) : cap;
        st = fill(ctx, buf, m, err);
        if (st == ZT_OK) st = zt_outfile_write(f, buf, m * sizeof(uint16_t), err);
        done += m;
    }
    if (st != ZT_OK) {
        zt_outfile_abort(f);
        return st;
    }
    return zt_outfile_commit(f, err);
}

/* Writes `count` shards of the split, sizes[i] tokens each, named from index 0, then removes
 * stale higher-numbered shards. */
static zt_status write_split(const char *dir, const char *prefix, const char *split,
                             const uint64_t *sizes, int count, uint16_t *buf, size_t cap,
                             fill_fn fill, void *ctx, zt_datagen_result *r, zt_err *err)
{
    for (int i = 0; i < count; i++) {
        char *path = zt_asprintf("%s/%s_%s_%03d.bin", dir, prefix, split, i);
        if (!path) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        zt_status st = write_streamed(path, sizes[i], buf, cap, fill, ctx, err);
        if (st != ZT_OK) {
            zt_free(path);
            return st;
        }
        st = add_file(r, path, split, sizes[i], err);
        if (st != ZT_OK) return st;
    }
    return remove_stale(dir, prefix, split, count, r, err);
}

static zt_status fill_chain(void *ctx, uint16_t *buf, size_t n, zt_err *err)
{
    (void)err;
    zt_datagen_chain_generate(ctx, buf, n);
    return ZT_OK;
}

void zt_synth_opts_default(zt_synth_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->out_dir = "data";
    o->prefix = "synth";
    o->vocab = 256;
    o->active_vocab = 64;
    o->successors = 4;
    o->train_tokens = 1000000;
    o->val_tokens = 100000;
    o->shards = 1;
    o->seed = 1337;
}

static zt_status write_meta(const zt_synth_opts *o, const zt_datagen_chain *c, zt_datagen_result *r,
                            zt_err *err)
{
    zt_status st = ZT_OK;
    char *text = NULL;
    json_t *files = json_array();
    json_t *meta = json_object();
    if (!files || !meta) goto nomem;
    for (int i = 0; i < r->num_files; i++) {
        const char *slash = strrchr(r->files[i].path, '/');
        json_t *f = json_pack("{s:s, s:s, s:I}", "name", slash ? slash + 1 : r->files[i].path,
                              "split", r->files[i].split, "tokens", (json_int_t)r->files[i].tokens);
        if (!f || json_array_append_new(files, f) != 0) goto nomem;
    }
    json_t *body =
        json_pack("{s:s, s:f, s:f, s:f, s:i, s:i, s:i, s:I, s:I, s:I, s:i, s:s}", "generator",
                  "markov1", "entropy_floor_nats", c->floor_nats, "unigram_entropy_nats",
                  c->unigram_nats, "uniform_entropy_nats", log((double)o->vocab), "vocab", o->vocab,
                  "active_vocab", o->active_vocab, "successors", o->successors, "seed",
                  (json_int_t)o->seed, "train_tokens", (json_int_t)o->train_tokens, "val_tokens",
                  (json_int_t)o->val_tokens, "train_shards", o->shards, "prefix", o->prefix);
    if (!body || json_object_update(meta, body) != 0) {
        json_decref(body);
        goto nomem;
    }
    json_decref(body);
    if (json_object_set(meta, "files", files) != 0) goto nomem;
    text = json_dumps(meta, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!text) goto nomem;
    r->meta_path = zt_asprintf("%s/%s_meta.json", o->out_dir, o->prefix);
    if (!r->meta_path) goto nomem;
    zt_outfile *f;
    st = zt_outfile_open(&f, r->meta_path, err);
    if (st != ZT_OK) goto out;
    st = zt_outfile_write(f, text, strlen(text), err);
    if (st == ZT_OK) st = zt_outfile_write(f, "\n", 1, err);
    if (st != ZT_OK) {
        zt_outfile_abort(f);
        goto out;
    }
    st = zt_outfile_commit(f, err);
    goto out;
nomem:
    st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory writing the corpus metadata");
out:
    free(text); /* jansson's allocator */
    json_decref(meta);
    json_decref(files);
    return st;
}

zt_status zt_datagen_synth(const zt_synth_opts *o, zt_datagen_result *r, zt_err *err)
{
    memset(r, 0, sizeof(*r));
    zt_status st = check_prefix(o->prefix, err);
    if (st != ZT_OK) return st;
    if (!o->out_dir || !*o->out_dir)
        return zt_err_set(err, ZT_ERR_INVALID, "--out is empty; give an output directory");
    if (o->shards < 1 || o->shards > 100000)
        return zt_err_set(err, ZT_ERR_INVALID, "--shards %d is outside 1..100000", o->shards);
    if (o->train_tokens < 2 * (uint64_t)o->shards)
        return zt_err_set(
            err, ZT_ERR_INVALID,
            "--train-tokens %llu is too few for %d shard(s): each needs at least 2 tokens (and block_size+1 to be trained on)",
            (unsigned long long)o->train_tokens, o->shards);
    if ((o->train_tokens + (uint64_t)o->shards - 1) / (uint64_t)o->shards > ZT_SHARD_MAX_TOKENS)
        return zt_err_set(
            err, ZT_ERR_INVALID,
            "--train-tokens %llu over %d shard(s) exceeds %llu tokens per shard; raise --shards",
            (unsigned long long)o->train_tokens, o->shards,
            (unsigned long long)ZT_SHARD_MAX_TOKENS);
    if (o->val_tokens == 1 || o->val_tokens > ZT_SHARD_MAX_TOKENS)
        return zt_err_set(
            err, ZT_ERR_INVALID, "--val-tokens %llu must be 0 (no val shard) or 2..%llu",
            (unsigned long long)o->val_tokens, (unsigned long long)ZT_SHARD_MAX_TOKENS);
    if (o->seed > (uint64_t)INT64_MAX)
        return zt_err_set(err, ZT_ERR_INVALID, "--seed must be at most %lld", (long long)INT64_MAX);

    zt_datagen_chain *c = NULL;
    uint16_t *buf = NULL;
    uint64_t *sizes = NULL;
    st = zt_datagen_chain_create(&c, o->vocab, o->active_vocab, o->successors, o->seed, err);
    if (st != ZT_OK) return st;
    st = make_dirs(o->out_dir, err);
    if (st != ZT_OK) goto out;
    buf = zt_malloc(ZT_DATAGEN_CHUNK * sizeof(*buf));
    sizes = zt_calloc((size_t)o->shards, sizeof(*sizes));
    if (!buf || !sizes) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < o->shards; i++)
        sizes[i] = o->train_tokens / (uint64_t)o->shards +
                   ((uint64_t)i < o->train_tokens % (uint64_t)o->shards ? 1 : 0);
    st = write_split(o->out_dir, o->prefix, "train", sizes, o->shards, buf, ZT_DATAGEN_CHUNK,
                     fill_chain, c, r, err);
    if (st != ZT_OK) goto out;
    uint64_t val = o->val_tokens;
    st = write_split(o->out_dir, o->prefix, "val", &val, val > 0 ? 1 : 0, buf, ZT_DATAGEN_CHUNK,
                     fill_chain, c, r, err);
    if (st != ZT_OK) goto out;
    r->entropy_floor = c->floor_nats;
    r->unigram_entropy = c->unigram_nats;
    r->train_tokens = o->train_tokens;
    r->val_tokens = o->val_tokens;
    st = write_meta(o, c, r, err);
out:
    zt_free(sizes);
    zt_free(buf);
    zt_datagen_chain_destroy(c);
    return st;
}

/* ---- tokenize ------------------------------------------------------------------------- */

void zt_tokenize_opts_default(zt_tokenize_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->out_dir = "data";
    o->val_fraction = 0.1;
    o->shard_tokens = 100000000;
}

typedef struct byte_reader {
    FILE *f;
    const char *path;
    unsigned char *bytes; /* (cap) */
} byte_reader;

static zt_status fill_bytes(void *ctx, uint16_t *buf, size_t n, zt_err *err)
{
    byte_reader *br = ctx;
    size_t got = fread(br->bytes, 1, n, br->f);
    if (got != n)
        return zt_err_set(err, ZT_ERR_IO, "cannot read %s: %s", br->path,
                          ferror(br->f) ? strerror(errno) : "the file got shorter while reading");
    for (size_t i = 0; i < n; i++)
        buf[i] = br->bytes[i];
    return ZT_OK;
}

/* Shard sizes for `total` tokens in pieces of at most `per`; *count gets the number. */
static uint64_t *split_sizes(uint64_t total, uint64_t per, int *count)
{
    uint64_t n = (total + per - 1) / per;
    *count = (int)n;
    uint64_t *sizes = zt_calloc(n ? (size_t)n : 1, sizeof(*sizes));
    if (!sizes) return NULL;
    for (uint64_t i = 0; i < n; i++)
        sizes[i] = i + 1 < n ? per : total - per * (n - 1);
    return sizes;
}

zt_status zt_datagen_tokenize(const zt_tokenize_opts *o, zt_datagen_result *r, zt_err *err)
{
    memset(r, 0, sizeof(*r));
    if (!o->input || !*o->input)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "no input file given; name the text file to tokenize");
    if (!(o->val_fraction >= 0 && o->val_fraction < 1))
        return zt_err_set(err, ZT_ERR_INVALID, "--val-fraction %g is outside [0, 1)",
                          o->val_fraction);
    if (o->shard_tokens < 1 || o->shard_tokens > ZT_SHARD_MAX_TOKENS)
        return zt_err_set(err, ZT_ERR_INVALID, "--shard-tokens %llu is outside 1..%llu",
                          (unsigned long long)o->shard_tokens,
                          (unsigned long long)ZT_SHARD_MAX_TOKENS);
    if (!o->out_dir || !*o->out_dir)
        return zt_err_set(err, ZT_ERR_INVALID, "--out is empty; give an output directory");

    char *prefix = NULL;
    if (o->prefix) {
        prefix = zt_strdup(o->prefix);
    } else {
        const char *base = strrchr(o->input, '/');
        base = base ? base + 1 : o->input;
        size_t len = strcspn(base + (base[0] == '.'), ".") + (base[0] == '.');
        prefix = base[0] == '.' || len == 0 ? zt_strdup("tokens") : zt_strndup(base, len);
    }
    if (!prefix) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    zt_status st = check_prefix(prefix, err);
    if (st != ZT_OK) {
        zt_free(prefix);
        return st;
    }

    byte_reader br = {.f = NULL, .path = o->input, .bytes = NULL};
    uint16_t *buf = NULL;
    uint64_t *train_sizes = NULL, *val_sizes = NULL;
    br.f = fopen(o->input, "rb");
    if (!br.f) {
        st = zt_err_set(err, errno == ENOENT ? ZT_ERR_NOT_FOUND : ZT_ERR_IO,
                        "cannot open input %s: %s; check the path", o->input, strerror(errno));
        goto out;
    }
    struct stat sb;
    if (fstat(fileno(br.f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = zt_err_set(
            err, ZT_ERR_FORMAT,
            "input %s is not a regular file; give a text file (save a stream to a file first)",
            o->input);
        goto out;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size == 0) {
        st = zt_err_set(err, ZT_ERR_FORMAT, "input %s is empty; there is nothing to tokenize",
                        o->input);
        goto out;
    }
    uint64_t val = (uint64_t)floor((double)size * o->val_fraction + 0.5);
    if (val >= size) val = size - 1;
    uint64_t train = size - val;
    int ntrain, nval;
    train_sizes = split_sizes(train, o->shard_tokens, &ntrain);
    val_sizes = split_sizes(val, o->shard_tokens, &nval);
    size_t cap = o->shard_tokens < ZT_DATAGEN_CHUNK ? (size_t)o->shard_tokens : ZT_DATAGEN_CHUNK;
    buf = zt_malloc(cap * sizeof(*buf));
    br.bytes = zt_malloc(cap);
    if (!train_sizes || !val_sizes || !buf || !br.bytes) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        goto out;
    }
    st = make_dirs(o->out_dir, err);
    if (st != ZT_OK) goto out;
    st = write_split(o->out_dir, prefix, "train", train_sizes, ntrain, buf, cap, fill_bytes, &br, r,
                     err);
    if (st != ZT_OK) goto out;
    st = write_split(o->out_dir, prefix, "val", val_sizes, nval, buf, cap, fill_bytes, &br, r, err);
    if (st != ZT_OK) goto out;
    r->train_tokens = train;
    r->val_tokens = val;
    r->input_bytes = size;
out:
    zt_free(train_sizes);
    zt_free(val_sizes);
    zt_free(buf);
    zt_free(br.bytes);
    if (br.f) fclose(br.f);
    zt_free(prefix);
    return st;
}
