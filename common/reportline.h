/* zerotrain: the parser of zworker's report protocol (the lines a worker writes on
 * ZT_REPORT_FD, see engine/engine.h): phase changes, per-step metrics, durable checkpoint
 * shards, checkpoint commits, checkpoints removed by keep_checkpoints, collectives that stall
 * and checkpoints that failed verification. Pure functions, no
 * allocation; zagent and zctl run feed it one line at a time and tests feed it text. */
#ifndef ZT_COMMON_REPORTLINE_H
#define ZT_COMMON_REPORTLINE_H

#include <stdint.h>

#include "common/hangdiag.h"
#include "common/status.h"

#define ZT_REPORTLINE_MAX_VALUES 64
#define ZT_REPORTLINE_KEY_MAX 64
#define ZT_REPORTLINE_PATH_MAX 4096

typedef enum {
    ZT_REPORTLINE_PHASE = 1, /* rank=R phase=NAME */
    ZT_REPORTLINE_STEP,      /* rank=R step=N loss=X ... coll_seq=S */
    ZT_REPORTLINE_CKPT,      /* rank=R ckpt step=N file=/abs/rank_0000R.zts bytes=B crc32c=HEX */
    ZT_REPORTLINE_COMMIT,    /* rank=0 ckpt_commit step=N dir=/abs/step_0000000N */
    ZT_REPORTLINE_REMOVED,   /* rank=0 ckpt_removed step=N dir=/abs/step_0000000N */
    /* rank=R wait op=KIND seq=N step=S part=PART prev_op=KIND prev_seq=M waited_ms=MS:
     * the rank's oldest unfinished collective has waited that long (engine/comm/comm.h) */
    ZT_REPORTLINE_WAIT,
    ZT_REPORTLINE_WAIT_END, /* rank=R wait_end seq=N waited_ms=MS: that collective finished */
    /* rank=R ckpt_bad step=N dir=/abs/step_0000000N why=TEXT (the rest of the line): the
     * checkpoint failed verification on load */
    ZT_REPORTLINE_CKPT_BAD,
} zt_reportline_kind;

typedef struct zt_reportline_value {
    char key[ZT_REPORTLINE_KEY_MAX + 1];
    double value;
} zt_reportline_value;

typedef struct zt_reportline {
    zt_reportline_kind kind;
    int rank;
    int phase;    /* PHASE: a zt.v1.WorkerPhase number */
    int64_t step; /* STEP, CKPT, COMMIT, REMOVED */
    /* STEP: the numeric key=value pairs other than rank and step, in line order (keys that
     * are not metric keys, [A-Za-z0-9_.], and values that are not numbers are skipped) */
    zt_reportline_value values[ZT_REPORTLINE_MAX_VALUES];
    int n_values;
    double loss, tokens_per_s;         /* STEP: loss and tok_s (0 when absent) */
    int64_t coll_seq;                  /* STEP: coll_seq (0 when absent) */
    int64_t mem_bytes;                 /* STEP: the sum of the mem_<category> values but mem_peak */
    int64_t mem_peak;                  /* STEP: mem_peak */
    char path[ZT_REPORTLINE_PATH_MAX]; /* CKPT: the shard file; COMMIT, REMOVED: the step dir */
    int64_t bytes;                     /* CKPT */
    uint32_t crc32c;                   /* CKPT */
    /* WAIT: the collective waited in, where the rank is and the collective before it, as the
     * hang diagnosis takes it (wait.step is the step computed; out->step is 0); WAIT_END:
     * wait.seq and wait.waited_ms */
    zt_hang_wait wait;
    char why[1024]; /* CKPT_BAD */
} zt_reportline;

/* Parses one line (without its newline). ZT_OK fills *out; ZT_ERR_FORMAT (with a message
 * that quotes the line's start) for anything that is not a report line of a known kind.
 * Thread-safe. */
zt_status zt_reportline_parse(const char *line, zt_reportline *out, zt_err *err);

/* Parses a step line as rank 0 prints it ("step=N loss=X ...", no rank prefix) into the
 * fields of a STEP report (kind ZT_REPORTLINE_STEP, rank 0). ZT_ERR_FORMAT when it has no
 * step=N. Thread-safe. */
zt_status zt_reportline_parse_step(const char *line, zt_reportline *out, zt_err *err);

/* "training" -> the zt.v1.WorkerPhase number; 0 when unknown. */
int zt_reportline_phase(const char *name);

#endif
