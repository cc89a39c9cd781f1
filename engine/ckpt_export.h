/* zerotrain: a checkpoint exported as one consolidated model file — llm.c's model format
 * (what zerotrain and llm.c load as model.init) or safetensors with Hugging Face GPT-2 names —
 * for zctl ckpt export. Engine-free: it reads through the checkpoint reader (ckpt_format.h). */
#ifndef ZT_ENGINE_CKPT_EXPORT_H
#define ZT_ENGINE_CKPT_EXPORT_H

#include "../common/dtype.h"
#include "../common/status.h"

/* Verifies every checksum of the checkpoint at path (a step directory or a checkpoint
 * directory's newest), then writes the consolidated model to out: format "llmc" or
 * "safetensors", dtype ZT_F32 or ZT_BF16, streaming one tensor at a time. ZT_ERR_INVALID for
 * another format or dtype; the reader's errors (zt_ckpt_open, zt_ckpt_verify) otherwise. */
zt_status zt_ckpt_export(const char *path, const char *format, zt_dtype dtype, const char *out,
                         zt_err *err);

#endif
