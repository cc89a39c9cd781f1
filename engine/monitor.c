/* zerotrain: DeepSpeed's csv_monitor (see monitor.h). */
#define _POSIX_C_SOURCE 200809L
#include "monitor.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/alloc.h"
#include "common/fsutil.h"
#include "common/log.h"

enum { MON_LOSS, MON_LR, MON_SCALE, MON_COUNT };
static const char *const mon_names[MON_COUNT] = {"train_loss", "lr", "loss_scale"};

struct zt_monitor {
    char dir[ZT_PATH_MAX + ZT_NAME_MAX + 2];
    bool fp16;
    bool failed[MON_COUNT];
};

/* mkdir -p, with the message for csv_monitor's folder */
static zt_status make_dirs(const char *path, zt_err *err)
{
    char bad[ZT_PATH_MAX];
    if (zt_mkdirs(path, false, bad, sizeof(bad)) == 0) return ZT_OK;
    if (errno == ENOTDIR)
        return zt_err_set(err, ZT_ERR_IO,
                          "csv_monitor: %s is not a folder; fix deepspeed.csv_monitor.output_path",
                          bad);
    return zt_err_set(err, ZT_ERR_IO,
                      "csv_monitor: cannot create the folder %s: %s; fix deepspeed.csv_monitor.output_path",
                      bad, strerror(errno));
}

zt_status zt_monitor_open(zt_monitor **out, const zt_job *job, zt_err *err)
{
    *out = NULL;
    const zt_csv_monitor_cfg *c = &job->ds.csv_monitor;
    if (!c->enabled) return ZT_OK;
    zt_monitor *m = zt_calloc(1, sizeof(*m));
    if (!m) return zt_err_set(err, ZT_ERR_NOMEM, "csv_monitor: out of memory");
    snprintf(m->dir, sizeof(m->dir), "%s/%s", c->output_path, c->job_name);
    m->fp16 = job->ds.fp16.enabled;
    zt_status st = make_dirs(m->dir, err);
    if (st != ZT_OK) {
        zt_free(m);
        return st;
    }
    *out = m;
    return ZT_OK;
}

static void row(zt_monitor *m, int which, int64_t samples, double value)
{
    if (m->failed[which]) return;
    char path[sizeof(m->dir) + 64];
    snprintf(path, sizeof(path), "%s/Train_Samples_%s.csv", m->dir, mon_names[which]);
    FILE *f = fopen(path, "a");
    bool ok = f != NULL;
    if (ok) {
        /* a new file starts with DeepSpeed's header; a resumed run appends below its rows */
        if (ftell(f) == 0) ok = fprintf(f, "step,%s\n", mon_names[which]) > 0;
        ok = ok && fprintf(f, "%lld,%.9g\n", (long long)samples, value) > 0;
        ok = (fclose(f) == 0) && ok;
    }
    if (!ok) {
        ZT_WARN("monitor", "csv_monitor: cannot write %s: %s; its rows are skipped from now on",
                path, strerror(errno));
        m->failed[which] = true;
    }
}

void zt_monitor_step(zt_monitor *m, int64_t samples, double loss, double lr, double loss_scale)
{
    if (!m) return;
    row(m, MON_LOSS, samples, loss);
    row(m, MON_LR, samples, lr);
    if (m->fp16) row(m, MON_SCALE, samples, loss_scale);
}

void zt_monitor_close(zt_monitor *m)
{
    zt_free(m);
}
