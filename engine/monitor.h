/* zerotrain: DeepSpeed's csv_monitor on rank 0: after each optimizer step, one row per metric
 * in <output_path>/<job_name>/Train_Samples_<metric>.csv ("step,<metric>" header, the step
 * counted in samples as DeepSpeed counts it): train_loss, lr, and loss_scale with fp16. */
#ifndef ZT_ENGINE_MONITOR_H
#define ZT_ENGINE_MONITOR_H

#include <stdint.h>

#include "common/jobfile.h"

typedef struct zt_monitor zt_monitor;

/* Creates the folder (and its parents) when job->ds.csv_monitor.enabled; *out is NULL when it
 * is not. Errors: ZT_ERR_IO naming the folder that cannot be made. */
zt_status zt_monitor_open(zt_monitor **out, const zt_job *job, zt_err *err);
/* Appends the step's rows. A file that cannot be written is reported once in the log and
 * skipped from then on: training goes on. NULL is a no-op. */
void zt_monitor_step(zt_monitor *m, int64_t samples, double loss, double lr, double loss_scale);
/* NULL is a no-op. */
void zt_monitor_close(zt_monitor *m);

#endif
