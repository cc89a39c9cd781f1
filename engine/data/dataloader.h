/* zerotrain: token shards (llm.c's format) and the data loader that turns them into the
 * micro-batches of docs/formats.md "Sample order". Shards are memory-mapped once at
 * open; drawing a micro-batch allocates nothing and only widens uint16 tokens to int32.
 * Also home of the durable file writer (temporary name, fsync, rename, fsync of the
 * directory) that the shard, model-file and corpus writers share. */
#ifndef ZT_ENGINE_DATALOADER_H
#define ZT_ENGINE_DATALOADER_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

/* Token shard header: 256 little-endian int32, then `num_tokens` uint16 tokens. */
#define ZT_SHARD_MAGIC 20240520
#define ZT_SHARD_VERSION 1
#define ZT_SHARD_HEADER_INTS 256
#define ZT_SHARD_HEADER_BYTES (ZT_SHARD_HEADER_INTS * 4)
/* The header stores the count as int32. */
#define ZT_SHARD_MAX_TOKENS ((uint64_t)INT32_MAX)

typedef struct zt_dataset zt_dataset;

/* Opens every file matching the glob pattern, in sorted (byte-wise strcmp) name order, and
 * memory-maps them read-only. Each header is validated: magic, version, and the token count
 * against the file size (a truncated file, or one with bytes beyond its tokens, is refused
 * naming the file, the expected and the actual size). Shard i holds
 * floor((tokens_i - 1) / block_size) samples; a shard too short for even one sample is an
 * error naming the file, its token count and block_size ("needs at least T+1 tokens").
 * No match for the pattern is ZT_ERR_NOT_FOUND naming the pattern.
 * vocab_size (1..65536) bounds the tokens, checked as samples are drawn; 0 disables the check.
 * *out is owned by the caller (zt_dataset_close). Errors: ZT_ERR_INVALID (arguments),
 * ZT_ERR_NOT_FOUND, ZT_ERR_IO, ZT_ERR_FORMAT, ZT_ERR_NOMEM. Thread-safe (no shared state). */
zt_status zt_dataset_open(zt_dataset **out, const char *pattern, int block_size, int vocab_size,
                          zt_err *err);
/* Unmaps and frees everything; NULL is a no-op. */
void zt_dataset_close(zt_dataset *ds);

/* Totals over all shards. Thread-safe (read-only). */
uint64_t zt_dataset_num_samples(const zt_dataset *ds);
uint64_t zt_dataset_num_tokens(const zt_dataset *ds);
int zt_dataset_num_shards(const zt_dataset *ds);
int zt_dataset_block_size(const zt_dataset *ds);
/* Shard i's path (owned by ds), token count and sample count; i in [0, num_shards). */
const char *zt_dataset_shard_path(const zt_dataset *ds, int i);
uint64_t zt_dataset_shard_tokens(const zt_dataset *ds, int i);
uint64_t zt_dataset_shard_samples(const zt_dataset *ds, int i);

/* Sample k (global numbering, shard after shard; k < num_samples): the T inputs starting at
 * token k_local*T of its shard and the T targets shifted by one, widened to int32 into
 * inputs[T] and targets[T]. A token >= vocab_size is ZT_ERR_FORMAT naming the file and the
 * token's offset; k out of range is ZT_ERR_INVALID. Allocates nothing. Thread-safe. */
zt_status zt_dataset_sample(const zt_dataset *ds, uint64_t k, int32_t *inputs, int32_t *targets,
                            zt_err *err);

/* Global sample index of batch position i of optimizer step `step`:
 * (step * train_batch_size + i) mod num_samples, without overflow for any int64 inputs >= 0. */
uint64_t zt_dataset_batch_sample(const zt_dataset *ds, int64_t step, int64_t train_batch_size,
                                 int64_t i);

/* The micro-batch of rank `rank` (of `ranks`) for micro-step `micro_step` of global step
 * `step` (0-based), docs/formats.md "Sample order": batch positions
 * i = (micro_step*ranks + rank)*micro ... + micro - 1, each the sample
 * (step*train_batch_size + i) mod num_samples. Fills inputs/targets (micro, T) row-major.
 * Positions beyond train_batch_size, a negative step, or rank outside [0, ranks) are
 * ZT_ERR_INVALID. Allocates nothing. Thread-safe. */
zt_status zt_dataset_micro_batch(const zt_dataset *ds, int64_t step, int64_t train_batch_size,
                                 int ranks, int rank, int micro_step, int micro, int32_t *inputs,
                                 int32_t *targets, zt_err *err);

/* Writes a token shard (llm.c format) with n tokens, durably (see zt_outfile). n may be at
 * most ZT_SHARD_MAX_TOKENS. Errors: ZT_ERR_INVALID, ZT_ERR_NOSPACE, ZT_ERR_IO, each naming
 * the path. Thread-safe for distinct paths. */
zt_status zt_shard_write(const char *path, const uint16_t *tokens, uint64_t n, zt_err *err);

/* Durable output file. open creates "<path>.tmp.<pid>" beside path; write appends; commit
 * fsyncs, renames onto path and fsyncs the directory, so readers see either the old file or
 * the whole new one. abort (or a failed write/commit) removes the temporary file. A path that
 * already names a non-regular file (a character device such as /dev/stdout or /dev/null, or
 * a FIFO) is written in place, without temporary or rename.
 * Errors name the path: ENOSPC/EDQUOT become ZT_ERR_NOSPACE, other failures ZT_ERR_IO; a
 * missing directory is ZT_ERR_NOT_FOUND. A failed fsync of the directory after the rename is
 * an error too (the new file is in place but may not survive a crash). commit frees f
 * whatever it returns; after a failed write the caller still calls abort. Not thread-safe
 * per handle. */
typedef struct zt_outfile zt_outfile;
zt_status zt_outfile_open(zt_outfile **out, const char *path, zt_err *err);
zt_status zt_outfile_write(zt_outfile *f, const void *data, size_t n, zt_err *err);
zt_status zt_outfile_commit(zt_outfile *f, zt_err *err);
void zt_outfile_abort(zt_outfile *f); /* NULL ok */
/* Bytes written so far. */
uint64_t zt_outfile_size(const zt_outfile *f);
/* fsyncs directory dir itself, so that entries created, renamed or removed in it are durable.
 * A file system that cannot fsync directories (EINVAL) is not an error; any other failure is
 * ZT_ERR_IO (ZT_ERR_NOSPACE for ENOSPC/EDQUOT) naming dir. Thread-safe. */
zt_status zt_dir_fsync(const char *dir, zt_err *err);

#endif
