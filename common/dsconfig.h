/* zerotrain: the DeepSpeed config inside a job file — its key table (every key DeepSpeed
 * knows: used, no effect here and why, or refused), parsed into zt_job's zt_ds_cfg by
 * zt_job_load/zt_job_parse (common/jobfile.h), with a start-up summary in zt_ds_cfg.notes. */
#ifndef ZT_COMMON_DSCONFIG_H
#define ZT_COMMON_DSCONFIG_H

#include <stdio.h>

#include "jobfile.h"

/* docs/deepspeed.md as generated from the key table; caller frees with zt_free. NULL when out
 * of memory. Thread-safe. */
char *zt_ds_doc_markdown(void);

/* Prints the summary (zt_ds_cfg.notes) to f, one note a line, each after indent. Nothing when
 * it is empty. */
void zt_ds_notes_print(FILE *f, const char *notes, const char *indent);

#endif
