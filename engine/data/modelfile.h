/* zerotrain: llm.c's GPT-2 model file (docs/formats.md): read as an initial model
 * (fp32 or bf16, widened to fp32) and written on export through a streaming writer that never
 * needs the whole model in memory. Writes are durable (temporary name, fsync, rename). */
#ifndef ZT_ENGINE_MODELFILE_H
#define ZT_ENGINE_MODELFILE_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/jobfile.h"
#include "common/status.h"

#define ZT_MODELFILE_MAGIC 20240326
#define ZT_MODELFILE_VERSION_F32 3
#define ZT_MODELFILE_VERSION_BF16 5
#define ZT_MODELFILE_HEADER_BYTES 1024

typedef struct zt_model_shape {
    int max_seq_len, vocab_size, padded_vocab_size, num_layers, num_heads, channels;
} zt_model_shape;

enum { ZT_MODELFILE_NUM_TENSORS = 16 };

/* Element counts of the 16 tensors in llm.c order (wte, wpe, ln1w, ln1b, qkvw, qkvb,
 * attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb) into sizes;
 * returns the total. The shape should have passed zt_modelfile_check (no overflow checks). */
size_t zt_modelfile_tensor_sizes(const zt_model_shape *s, size_t sizes[16]);
/* "wte", "wpe", "ln1w", ...; "?" outside [0, 16). */
const char *zt_modelfile_tensor_name(int i);

/* Checks that a shape makes sense: every field positive and within generous limits
 * (layers <= 1024, channels <= 65536, max_seq_len and padded_vocab_size <= 2^24), channels
 * divisible by num_heads, padded_vocab_size >= vocab_size. ZT_ERR_FORMAT naming origin (a
 * path, "job") and the field. Thread-safe. */
zt_status zt_modelfile_check(const zt_model_shape *s, const char *origin, zt_err *err);

/* Reads and validates the header: magic, version (3 = fp32, 5 = bf16; the older versions 1
 * and 2 are refused), shape sanity, and the file size against the shape (a truncated or an
 * oversized file is refused with both sizes). *dtype_code gets ZT_F32 or ZT_BF16 (may be
 * NULL). Errors name the file: ZT_ERR_NOT_FOUND, ZT_ERR_IO, ZT_ERR_FORMAT. Thread-safe. */
zt_status zt_modelfile_read_header(const char *path, zt_model_shape *shape, int *dtype_code,
                                   zt_err *err);

/* Reads header + all parameters as fp32 (bf16 files widened) in llm.c order into a fresh
 * zt_malloc'd array (*params_out, caller frees with zt_free; NULL on error). Same checks and
 * errors as zt_modelfile_read_header, plus ZT_ERR_NOMEM. Thread-safe. */
zt_status zt_modelfile_read(const char *path, zt_model_shape *shape, float **params_out,
                            zt_err *err);

/* Streaming writer: open with the shape and dtype (ZT_F32, or ZT_BF16 rounded to nearest
 * even), put the tensors in order as fp32 pieces (any number of calls per tensor; putting more
 * than the shape holds is ZT_ERR_INVALID), then commit, which checks that the total matches
 * and makes the file durable. commit frees w whatever it returns; abort (NULL ok) removes the
 * temporary file, so an unfinished export never leaves a file at path. Write errors come back
 * as ZT_ERR_NOSPACE / ZT_ERR_IO naming the path. One handle per thread. */
typedef struct zt_modelfile_writer zt_modelfile_writer;
zt_status zt_modelfile_writer_open(zt_modelfile_writer **out, const char *path,
                                   const zt_model_shape *s, zt_dtype dtype, zt_err *err);
zt_status zt_modelfile_writer_put(zt_modelfile_writer *w, const float *data, size_t n, zt_err *err);
zt_status zt_modelfile_writer_commit(zt_modelfile_writer *w, zt_err *err); /* frees w */
void zt_modelfile_writer_abort(zt_modelfile_writer *w);                    /* NULL ok */

/* Convenience: writes a whole parameter array (zt_modelfile_tensor_sizes total) at once. */
zt_status zt_modelfile_write(const char *path, const zt_model_shape *s, const float *params,
                             zt_dtype dtype, zt_err *err);

/* The shape a job's model config asks for (max_seq_len = block_size). */
void zt_modelfile_shape_from_cfg(const zt_model_cfg *cfg, zt_model_shape *s);

/* Compares a file's shape with a model config. vocab_size, padded_vocab_size, n_layer, n_head
 * and n_embd must be equal. max_seq_len may be larger than block_size: the engine then uses
 * the first block_size rows of wpe (llm.c's 124M file has 1024 positions and a job may train
 * with 256); smaller is an error. The ZT_ERR_CONFIG message names every mismatching field with
 * both values and says to fix the job file or the init file. Thread-safe. */
zt_status zt_modelfile_check_shape(const zt_model_shape *file, const zt_model_cfg *cfg,
                                   const char *path, zt_err *err);

#endif
