/* zerotrain: what only ckpt*.c may see — meta.json in memory, the open reader's state, and the
 * format helpers that saving (ckpt.c) shares with the reader (ckpt_format.c). Engine-free. */
#ifndef ZT_ENGINE_CKPT_INT_H
#define ZT_ENGINE_CKPT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/dtype.h"
#include "../common/jobfile.h"
#include "../common/status.h"
#include "ckpt_format.h"
#include "gpt2.h"

/* meta.json: the checkpoint's training state, layout and shard list. */
typedef struct zt_ckpt_meta {
    int64_t step, applied_steps, skipped_steps;
    int world, stage;
    zt_dtype precision;
    zt_gpt2_dims dims;
    int64_t train_batch_size, micro_batch, grad_accum;
    int n_units;
    size_t *numel, *shard; /* per unit */
    uint64_t *bytes;       /* per rank */
    uint32_t *crc;         /* per rank: its table_crc32c */
    double ls_scale;
    int64_t ls_iter, ls_last_overflow;
    int ls_hyst_left;
    uint32_t meta_crc, meta_crc_recorded; /* of the canonical content; as meta.json records it */
} zt_ckpt_meta;

/* An open checkpoint (zt_ckpt_open). */
struct zt_ckpt {
    char dir[ZT_PATH_MAX + 32];
    zt_ckpt_meta m;
    int *fds;
    size_t *unit_off;       /* byte offset of unit u's first chunk inside the payload */
    size_t payload_off;     /* header + chunk table */
    uint32_t *tables;       /* (world, n_units * ZT_CKPT_SECTIONS) chunk checksums */
    unsigned char *scratch; /* streaming buffer, for checksummed partial reads */
    uint64_t bytes_read;    /* payload bytes read so far */
    zt_gpt2_layout lay;
};

/* snprintf for paths and short texts; truncation is checked by the callers that can hit it
 * (paths are bounded by ZT_PATH_MAX well before these buffers). */
int zt_ckpt_pathf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Allocates m's per-unit (n_units) and per-rank (world) arrays, zeroed; zt_ckpt_meta_free
 * releases them (and is a no-op on a zeroed m). */
zt_status zt_ckpt_meta_alloc(zt_ckpt_meta *m, zt_err *err);
void zt_ckpt_meta_free(zt_ckpt_meta *m);
/* meta.json's text for m and the job that wrote it, its checksum meta_crc32c included; NULL
 * when out of memory. The caller frees it with free(). */
char *zt_ckpt_meta_to_json(const zt_ckpt_meta *m, const zt_job *job);

/* Bytes of the chunk table after the header, padded so that the payload is 64-byte aligned. */
size_t zt_ckpt_table_bytes(int n_units);
/* CRC32C of every unit's (numel, shard) as uint64 pairs: the partition layout in a header. */
uint32_t zt_ckpt_units_crc(int n_units, const size_t *numel, const size_t *shard);
/* Seals a shard image in memory (header, table space, payload laid out as above, with shard[u]
 * values per section of unit u): fills in the chunk table, table_crc32c and header_crc32c, and
 * returns table_crc32c. */
uint32_t zt_ckpt_shard_seal(unsigned char *buf, int n_units, const size_t *shard);

/* The step of a "step_NNNNNNNN" directory name, or -1. */
int64_t zt_ckpt_parse_step_name(const char *name);
/* The rank of a "rank_NNNNN.zts" file name, or -1. */
int zt_ckpt_parse_shard_name(const char *name);

/* zt_ckpt_read that reads every chunk it touches whole and checks it against the chunk table
 * before returning: what a resuming rank uses, so that it verifies exactly what it loads. */
zt_status zt_ckpt_read_verified(zt_ckpt *c, int section, int u, size_t pos, size_t len,
                                float *out, zt_err *err);

#endif
