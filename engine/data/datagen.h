/* zerotrain: corpora for `zctl data`. `synth` draws tokens from a seeded first-order Markov
 * chain whose entropy rate (the best mean cross-entropy any model can reach) is computed
 * exactly, so a training run can be judged against a known floor; `tokenize` turns any file
 * into byte-level (vocab 256) train/val token shards. */
#ifndef ZT_ENGINE_DATAGEN_H
#define ZT_ENGINE_DATAGEN_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

/* ---- the Markov chain ------------------------------------------------------------------
 * M active tokens (a seeded random subset of 0..vocab-1) form the states. State i moves to
 * K distinct successors: state i+1 (mod M), which makes the chain irreducible, and K-1 other
 * states drawn at random; the K probabilities are a seeded random draw (Dirichlet(1) mixed
 * with 10% uniform, so every edge keeps at least 0.1/K). The floor is
 * sum_s pi(s) H(P(.|s)) with pi the stationary distribution, found by power iteration on the
 * lazy chain (P+I)/2 (same pi, aperiodic) to a residual below 1e-12. */
typedef struct zt_datagen_chain zt_datagen_chain;

#define ZT_DATAGEN_MAX_SUCCESSORS 4096

/* Builds the chain. vocab in 2..65536, active_vocab in 2..vocab, successors in
 * 2..min(active_vocab, ZT_DATAGEN_MAX_SUCCESSORS). Deterministic for a seed (own PRNG:
 * splitmix64 seeding xoshiro256**). ZT_ERR_INVALID names the bad parameter; ZT_ERR_NOMEM.
 * The chain is owned by the caller (destroy; NULL ok). Not thread-safe per chain. */
zt_status zt_datagen_chain_create(zt_datagen_chain **out, int vocab, int active_vocab,
                                  int successors, uint64_t seed, zt_err *err);
void zt_datagen_chain_destroy(zt_datagen_chain *c);
/* The entropy rate in nats/token: the exact floor of the mean next-token cross-entropy. */
double zt_datagen_chain_entropy_floor(const zt_datagen_chain *c);
/* The entropy of the stationary distribution (what a model that ignores context reaches). */
double zt_datagen_chain_unigram_entropy(const zt_datagen_chain *c);
/* P(next = b | current = a) for tokens a, b; 0 when a is not active or b not a successor. */
double zt_datagen_chain_prob(const zt_datagen_chain *c, int a, int b);
/* Stationary probability of token a (0 for inactive tokens). */
double zt_datagen_chain_stationary(const zt_datagen_chain *c, int a);
/* Writes the next n tokens of one continuing walk (the first token is drawn from the
 * stationary distribution, so the walk is stationary from the start). */
void zt_datagen_chain_generate(zt_datagen_chain *c, uint16_t *out, size_t n);

/* ---- corpora on disk -------------------------------------------------------------------- */

typedef struct zt_datagen_file {
    char *path;
    const char *split; /* "train" or "val" */
    uint64_t tokens;
} zt_datagen_file;

/* What a synth or tokenize run wrote; free with zt_datagen_result_free. */
typedef struct zt_datagen_result {
    zt_datagen_file *files; /* (num_files) in the order written: train shards, then val */
    int num_files;
    char **removed; /* (num_removed) stale shards of an earlier run, deleted */
    int num_removed;
    char *meta_path;        /* synth: DIR/PREFIX_meta.json; NULL for tokenize */
    double entropy_floor;   /* synth: nats/token */
    double unigram_entropy; /* synth: nats/token */
    uint64_t train_tokens, val_tokens;
    uint64_t input_bytes; /* tokenize */
} zt_datagen_result;

/* Frees what the result holds (not r itself) and zeroes it; NULL ok. */
void zt_datagen_result_free(zt_datagen_result *r);

typedef struct zt_synth_opts {
    const char *out_dir;   /* default "data"; created (with parents) if missing */
    const char *prefix;    /* default "synth" */
    int vocab;             /* default 256 */
    int active_vocab;      /* default 64 */
    int successors;        /* default 4 */
    uint64_t train_tokens; /* default 1,000,000 */
    uint64_t val_tokens;   /* default 100,000; 0 = no val shard */
    int shards;            /* train shards, default 1 */
    uint64_t seed;         /* default 1337 */
} zt_synth_opts;

void zt_synth_opts_default(zt_synth_opts *o);

/* Writes OUT/PREFIX_train_000.bin ... (train_tokens split evenly over `shards`), then
 * OUT/PREFIX_val_000.bin (val_tokens, the walk continued), then OUT/PREFIX_meta.json with
 * the entropy floor and the generator parameters. Shards named like ours with a higher number
 * (from an earlier, larger run) are removed, so PREFIX_train_*.bin matches exactly this
 * corpus. Memory stays bounded (tokens are streamed). Errors name the path or option:
 * ZT_ERR_INVALID, ZT_ERR_NOT_FOUND, ZT_ERR_IO, ZT_ERR_NOSPACE, ZT_ERR_NOMEM. On error, files
 * already committed stay. Thread-safe for distinct outputs. */
zt_status zt_datagen_synth(const zt_synth_opts *o, zt_datagen_result *res, zt_err *err);

typedef struct zt_tokenize_opts {
    const char *input;     /* required: a regular file */
    const char *out_dir;   /* default "data" */
    const char *prefix;    /* default: the input's file name up to its first '.' */
    double val_fraction;   /* default 0.1, in [0, 1) */
    uint64_t shard_tokens; /* default 100,000,000, at most ZT_SHARD_MAX_TOKENS */
} zt_tokenize_opts;

void zt_tokenize_opts_default(zt_tokenize_opts *o);

/* Byte-level tokenization (token = byte value, vocab 256): the first
 * size - round(size * val_fraction) bytes go to OUT/PREFIX_train_NNN.bin, the rest to
 * OUT/PREFIX_val_NNN.bin, in shards of at most shard_tokens tokens; stale higher-numbered
 * shards of the same names are removed. Errors: missing input (ZT_ERR_NOT_FOUND), empty input
 * or bad options (ZT_ERR_INVALID), unwritable output (ZT_ERR_NOT_FOUND / ZT_ERR_IO /
 * ZT_ERR_NOSPACE), each naming the path. Thread-safe for distinct outputs. */
zt_status zt_datagen_tokenize(const zt_tokenize_opts *o, zt_datagen_result *res, zt_err *err);

#endif
