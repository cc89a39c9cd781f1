/* zerotrain: what the parts of the DeepSpeed config reader (dsconfig*.c) share and nothing
 * else may see: the blocks of the key table, and the sections read in a file of their own. */
#ifndef ZT_COMMON_DSCONFIG_INT_H
#define ZT_COMMON_DSCONFIG_INT_H

#include "jobfile_int.h"

/* One block of the key table: the keys an object at path may hold. */
typedef struct dsblock {
    const char *path; /* "" for the top level */
    const keyspec *keys;
    size_t n;
    int mode; /* JF_STRICT: DeepSpeed refuses unknown keys here; JF_LENIENT: it ignores them */
} dsblock;

/* The block at path ("zero_optimization.offload_param"), or NULL when there is none. */
const dsblock *ds_block(const char *path);
/* jf_check_keys of obj against the block at path, with the block's mode. */
zt_status ds_check_block(pctx *c, json_t *obj, const char *path);

/* dsconfig_optim.c: the "optimizer" and "scheduler" members of the DeepSpeed object ds, with
 * their defaults when absent. */
zt_status ds_parse_optimizer(pctx *c, json_t *ds, zt_ds_cfg *d);
zt_status ds_parse_scheduler(pctx *c, json_t *ds, zt_job *job);

#endif
