/* zerotrain: `zctl plan job.json` — before anything runs, the memory one rank will need for
 * every ZeRO stage and offload choice of this job (model states, activations, buffers,
 * communication, the checkpoint snapshot, the process itself), computed from the engine's own
 * allocation table (zt_engine_plan); which of them fit the device, host memory and disk; NVMe
 * offload's I/O per step at the disk's speed; and the largest model each choice can train. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cliopt.h"
#include "cli/plan_limits.h"
#include "cli/commands.h"
#include "common/alloc.h"
#include "common/dsconfig.h"
#include "common/jobfile.h"
#include "engine/autobatch.h"
#include "engine/engine.h"
#include "kernels/ops.h"

ZT_COMMAND(plan, zt_cmd_plan, "predict per-rank memory for each ZeRO stage and offload choice")

static void usage(FILE *f)
{
    fprintf(f, "usage: zctl plan JOB.json [--nproc N] [--device-memory SIZE] [--host-memory SIZE]\n"
               "                 [--disk SIZE] [--nvme-path DIR | --disk-speed READ,WRITE]\n"
               "       zctl plan --deepspeed-keys   (every DeepSpeed key and what zerotrain does with it)\n"
               "\n"
               "Prints the memory one rank will allocate for every ZeRO stage (0-3) with and\n"
               "without optimizer offload, for the job's model, precision, micro batch and rank\n"
               "count (or --nproc N). The job's own configuration is marked with '*'.\n"
               "'total' is the rank's peak: device and host memory, the start-up transient and,\n"
               "on the CPU path, the process itself (code, libraries, heap).\n"
               "--device-memory SIZE (e.g. 80GiB, 24GB, 512MiB) flags what does not fit: the\n"
               "device part on cuda, the total on the CPU.\n"
               "--host-memory SIZE and --disk SIZE: the host memory and the disk space of one\n"
               "node, shared by the job's ranks on it; given, they flag what does not fit too.\n"
               "\n"
               "NVMe offload rows (the job's, or ratio 1 with --nvme-path or --disk-speed) show\n"
               "the bytes each rank reads and writes in its swap files per optimizer step and\n"
               "the seconds that takes at the disk's speed (reads and writes share the disk):\n"
               "--nvme-path DIR measures it (default: the job's nvme_path), writing and reading\n"
               "a 256 MiB file with direct I/O there and removing it; --disk-speed READ,WRITE\n"
               "(e.g. 2.5GB/s,1.8GB/s) gives it instead.\n"
               "\n"
               "Under each row, the largest model that configuration can train: the job's model\n"
               "with more or fewer layers (n_layer) at the same width, heads, vocabulary,\n"
               "sequence length and micro batch, whose plan fits the device memory (when given),\n"
               "the host memory (default: this machine's MemAvailable) and the disk (default:\n"
               "the free space of the NVMe directory, when there is one), each divided among\n"
               "the ranks of a node.\n"
               "\n"
               "A micro batch that is \"auto\" is picked as the ranks would pick it: the largest\n"
               "that fits the rank's memory (or --device-memory) with a 10%% margin.\n"
               "The DeepSpeed config's summary (ignored keys, keys with no effect here, the\n"
               "values filled for \"auto\") comes first.\n");
}

static double mib(int64_t b)
{
    return (double)b / 1048576.0;
}

/* Device bytes of a category. */
static double dev(const zt_mem_plan *p, zt_mem_category c)
{
    return mib(p->bytes[c] - p->host_bytes[c]);
}

/* What one rank may use; 0 where there is no limit. */
typedef struct plan_limits {
    double device; /* device memory (on the CPU: the whole rank) */
    double host;   /* host memory */
    double disk;   /* swap files */
} plan_limits;

/* What plan p needs of host memory: on cuda the host buffers and the start-up transient's
 * excess over the snapshot (it lives in host memory), on the CPU everything. */
static double host_need(const zt_mem_plan *p, bool cpu)
{
    if (cpu)
        return (double)p->total_bytes;
    int64_t extra = p->init_bytes - p->bytes[ZT_MEM_CKPT];
    return (double)(p->host_total + (extra > 0 ? extra : 0));
}

/* Whether plan p fits lim; else *over names the first limit it passes. */
static bool plan_fits(const zt_mem_plan *p, bool cpu, const plan_limits *lim, const char **over)
{
    if (lim->device > 0 && (double)(cpu ? p->total_bytes : p->device_total) > lim->device) {
        *over = "device memory";
        return false;
    }
    if (lim->host > 0 && host_need(p, cpu) > lim->host) {
        *over = "host memory";
        return false;
    }
    if (lim->disk > 0 && (double)p->disk_bytes > lim->disk) {
        *over = "disk";
        return false;
    }
    return true;
}

/* The most layers a search tries: past this the answer is "more than". */
#define PLAN_MAX_LAYERS 65536

/* The largest n_layer, at v's width, heads, vocabulary, sequence length and micro batch, whose
 * plan fits lim: 0 when not even one layer does. *best gets its plan, *over the limit one more
 * layer passes (NULL when PLAN_MAX_LAYERS fit). The plan grows with n_layer, so a doubling and
 * then a bisection find it. */
static zt_status largest_layers(const zt_job *v, int world, const plan_limits *lim,
                                int *layers, zt_mem_plan *best, const char **over, zt_err *err)
{
    bool cpu = v->resources.device == ZT_DEVICE_CPU;
    zt_job *t = zt_malloc(sizeof(*t));
    if (!t)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    *t = *v;
    zt_mem_plan p;
    zt_status st = ZT_OK;
    int lo = 0, hi = 1; /* lo fits (0: nothing yet), hi is tried next */
    *over = NULL;
    memset(best, 0, sizeof(*best));
    for (;;) {
        t->model.n_layer = hi;
        if ((st = zt_engine_plan(t, world, &p, err)) != ZT_OK)
            goto free_job;
        if (!plan_fits(&p, cpu, lim, over))
            break;
        lo = hi;
        *best = p;
        if (hi == PLAN_MAX_LAYERS) {
            *over = NULL;
            goto done;
        }
        hi = hi * 2 < PLAN_MAX_LAYERS ? hi * 2 : PLAN_MAX_LAYERS;
    }
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        t->model.n_layer = mid;
        if ((st = zt_engine_plan(t, world, &p, err)) != ZT_OK)
            goto free_job;
        const char *o = NULL;
        if (plan_fits(&p, cpu, lim, &o)) {
            lo = mid;
            *best = p;
        } else {
            hi = mid;
            *over = o;
        }
    }
done:
    *layers = lo;
free_job:
    zt_free(t);
    return st;
}

/* "1.21B", "124.4M", "85.3K" parameters */
static void fmt_count(double n, char *out, size_t cap)
{
    if (n >= 1e9)
        snprintf(out, cap, "%.2fB", n / 1e9);
    else if (n >= 1e6)
        snprintf(out, cap, "%.1fM", n / 1e6);
    else
        snprintf(out, cap, "%.1fK", n / 1e3);
}

/* A size option: bytes > 0, or an error naming the option (returns -1). */
static int take_size(const char *opt, const char *v, double *out)
{
    *out = zt_parse_size(v);
    if (*out <= 0) {
        zt_cli_error("plan: cannot read %s \"%s\" as a size above zero; write it like 80GiB, 24GB or 512MiB", opt, v);
        return -1;
    }
    return 0;
}

/* Offload kinds of the table's rows. */
enum { OFF_NONE, OFF_CPU, OFF_NVME };

int zt_cmd_plan(int argc, char **argv)
{
    const char *job_path = NULL, *nvme_dir = NULL;
    int nproc = 0;
    double devmem = 0, hostmem = 0, diskmem = 0, speed_r = 0, speed_w = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--deepspeed-keys") == 0) {
            char *md = zt_ds_doc_markdown();
            if (!md) {
                zt_cli_error("out of memory");
                return 1;
            }
            fputs(md, stdout);
            zt_free(md);
            return 0;
        } else if ((m = zt_cli_take_opt(argc, argv, &i, "--nproc", &v)) != 0) {
            if (m < 0 || zt_cli_parse_int("--nproc", v, 1, 4096, &nproc) != 0)
                return 2;
        } else if ((m = zt_cli_take_opt(argc, argv, &i, "--device-memory", &v)) != 0) {
            if (m < 0 || take_size("--device-memory", v, &devmem) != 0)
                return 2;
        } else if ((m = zt_cli_take_opt(argc, argv, &i, "--host-memory", &v)) != 0) {
            if (m < 0 || take_size("--host-memory", v, &hostmem) != 0)
                return 2;
        } else if ((m = zt_cli_take_opt(argc, argv, &i, "--disk", &v)) != 0) {
            if (m < 0 || take_size("--disk", v, &diskmem) != 0)
                return 2;
        } else if ((m = zt_cli_take_opt(argc, argv, &i, "--nvme-path", &v)) != 0) {
            if (m < 0)
                return 2;
            nvme_dir = v;
        } else if ((m = zt_cli_take_opt(argc, argv, &i, "--disk-speed", &v)) != 0) {
            if (m < 0)
                return 2;
            if (zt_plan_parse_speeds(v, &speed_r, &speed_w) != 0) {
                zt_cli_error("plan: cannot read --disk-speed \"%s\"; write the read and the write speed as READ,WRITE, e.g. 2.5GB/s,1.8GB/s", v);
                return 2;
            }
        } else if (argv[i][0] == '-') {
            zt_cli_error("plan: unknown option %s; see 'zctl plan --help'", argv[i]);
            return 2;
        } else if (!job_path) {
            job_path = argv[i];
        } else {
            zt_cli_error("plan: one job file only");
            return 2;
        }
    }
    if (!job_path) {
        usage(stderr);
        return 2;
    }
    if (nvme_dir && speed_r > 0) {
        zt_cli_error("plan: --nvme-path measures the disk's speed and --disk-speed gives it; use one of them");
        return 2;
    }
    zt_err err;
    zt_err_clear(&err);
    zt_job *job = calloc(1, sizeof(*job));
    if (!job) {
        zt_cli_error("out of memory");
        return 1;
    }
    int rc = 0;
    if (zt_job_load(job, job_path, &err) != ZT_OK ||
        (nproc && zt_job_resolve_batch(job, nproc, &err) != ZT_OK)) {
        zt_cli_error("%s", zt_err_msg(&err));
        rc = 2;
        goto free_job;
    }
    if (job->ds.micro_auto) {
        int world0 = nproc ? nproc : job->resources.ranks;
        if (zt_auto_batch_pick(job, world0, 0, (int64_t)devmem, &err) != ZT_OK) {
            zt_cli_error("%s", zt_err_msg(&err));
            rc = 1;
            goto free_job;
        }
    }
    if (!zt_cli.json && job->ds.notes[0]) {
        printf("deepspeed config:\n");
        zt_ds_notes_print(stdout, job->ds.notes, "  ");
    }
    int world = job->ds.world_size;
    const zt_zero_cfg own = job->ds.zero;
    const char *prec = job->ds.fp16.enabled ? "fp16" : job->ds.bf16 ? "bf16" : "fp32";
    bool cpu = job->resources.device == ZT_DEVICE_CPU;
    bool own_nvme = own.offload_optimizer.enabled && own.offload_optimizer.nvme;
    /* rows per stage: no offload, the whole shard on the host, the job's own offload when it
     * is another (a ratio below 1, or NVMe), and NVMe at ratio 1 when asked about a disk */
    int kinds[4] = {OFF_NONE, OFF_CPU}, nkinds = 2;
    double ratios[4] = {0, 1.0};
    if (own.offload_optimizer.enabled && (own_nvme || own.offload_optimizer.ratio != 1.0)) {
        kinds[nkinds] = own_nvme ? OFF_NVME : OFF_CPU;
        ratios[nkinds++] = own.offload_optimizer.ratio;
    }
    if (!own_nvme && (nvme_dir || speed_r > 0)) {
        kinds[nkinds] = OFF_NVME;
        ratios[nkinds++] = 1.0;
    }
    bool any_nvme = own_nvme || nvme_dir || speed_r > 0;

    /* the disk: its speed measured or given, its free space */
    const char *speed_dir = nvme_dir ? nvme_dir : own_nvme ? own.offload_optimizer.nvme_path : NULL;
    char speed_note[ZT_ERRMSG_MAX + 64] = "";
    zt_plan_disk_speed ds = {0};
    if (speed_r <= 0 && speed_dir) {
        if (zt_plan_disk_measure(speed_dir, &job->ds.aio, &ds, &err) == ZT_OK) {
            speed_r = ds.read_bps;
            speed_w = ds.write_bps;
        } else if (nvme_dir) { /* asked for: refused */
            zt_cli_error("%s", zt_err_msg(&err));
            rc = 2;
            goto free_job;
        } else { /* the job's own nvme_path, perhaps of another machine: the plan goes on */
            snprintf(speed_note, sizeof(speed_note), "I/O seconds not shown: %s", zt_err_msg(&err));
        }
    }
    int local = job->resources.ranks_per_node < world ? job->resources.ranks_per_node : world;
    if (local < 1)
        local = 1;
    const char *host_src = hostmem > 0 ? "--host-memory" : "MemAvailable";
    size_t avail = 0, total = 0; /* as the "auto" micro batch reads it */
    double host_node = hostmem;
    if (host_node <= 0)
        host_node = zt_ops_cpu()->mem_info(NULL, &avail, &total) ? (double)avail : -1;
    const char *disk_src = diskmem > 0 ? "--disk" : speed_dir ? "free" : NULL;
    double disk_node = diskmem > 0 ? diskmem : speed_dir ? (double)zt_plan_disk_free(speed_dir) : 0;
    /* what flags a row (as given), and what bounds the largest model (with the defaults) */
    plan_limits given = {devmem, hostmem > 0 ? hostmem / local : 0,
                         diskmem > 0 ? diskmem / local : 0};
    plan_limits lim = {devmem, host_node > 0 ? host_node / local : 0,
                       disk_node > 0 ? disk_node / local : 0};
    bool any_limit = lim.device > 0 || lim.host > 0 || lim.disk > 0;

    zt_mem_plan p;
    if (!zt_cli.json) {
        zt_job probe = *job;
        if (zt_engine_plan(&probe, world, &p, &err) != ZT_OK) {
            zt_cli_error("%s", zt_err_msg(&err));
            rc = 1;
            goto free_job;
        }
        printf("plan for %s: %.2fM parameters (Psi), %d rank%s, %s, micro batch %lld%s x block %d%s\n",
               job->name, (double)p.num_params / 1e6, world, world == 1 ? "" : "s", prec,
               (long long)job->ds.micro_batch, job->ds.micro_auto ? " (auto)" : "",
               job->model.block_size,
               job->ds.activation_checkpointing.enabled ? ", activation checkpointing" : "");
        if (speed_r > 0 && ds.backend[0])
            printf("disk speed: read %.2f GB/s, write %.2f GB/s (measured in %s: %.0f MiB written and read with direct I/O through %s)\n",
                   speed_r / 1e9, speed_w / 1e9, speed_dir, (double)ZT_PLAN_PROBE_BYTES / 1048576.0,
                   ds.backend);
        else if (speed_r > 0)
            printf("disk speed: read %.2f GB/s, write %.2f GB/s (given with --disk-speed)\n",
                   speed_r / 1e9, speed_w / 1e9);
        printf("MiB per rank     params  master   grads   optim  activ. buffers    comm |  device    host    disk   total\n");
    } else {
        printf("{\"job\":\"%s\",\"ranks\":%d,\"precision\":\"%s\",\"local_ranks\":%d,"
               "\"limits\":{\"device_bytes\":%.0f,\"host_bytes\":%.0f,\"disk_bytes\":%.0f},",
               job->name, world, prec, local, lim.device, lim.host, lim.disk);
        if (speed_r > 0)
            printf("\"disk_speed\":{\"read_bps\":%.0f,\"write_bps\":%.0f,\"source\":\"%s\"},",
                   speed_r, speed_w, ds.backend[0] ? "measured" : "given");
        else
            printf("\"disk_speed\":null,");
        printf("\"rows\":[");
    }
    int row = 0;
    for (int stage = 0; stage < 4; stage++) {
        for (int ri = 0; ri < nkinds; ri++) {
            zt_job *v = zt_malloc(sizeof(*v));
            if (!v) {
                zt_cli_error("out of memory");
                rc = 1;
                goto free_job;
            }
            *v = *job;
            v->ds.zero.stage = stage;
            zt_offload_cfg *off = &v->ds.zero.offload_optimizer;
            off->enabled = kinds[ri] != OFF_NONE;
            off->nvme = kinds[ri] == OFF_NVME;
            off->ratio = ratios[ri];
            if (off->nvme && off->buffer_count < 1)
                off->buffer_count = 4; /* DeepSpeed's default */
            int layers = 0;
            zt_mem_plan big;
            const char *over = NULL;
            if (zt_engine_plan(v, world, &p, &err) != ZT_OK ||
                (any_limit && largest_layers(v, world, &lim, &layers, &big, &over, &err) != ZT_OK)) {
                zt_cli_error("%s", zt_err_msg(&err));
                zt_free(v);
                rc = 1;
                goto free_job;
            }
            zt_free(v);
            bool mine = stage == own.stage &&
                        (kinds[ri] == OFF_NONE
                             ? !own.offload_optimizer.enabled
                             : own.offload_optimizer.enabled &&
                                   own.offload_optimizer.nvme == (kinds[ri] == OFF_NVME) &&
                                   own.offload_optimizer.ratio == ratios[ri]);
            int64_t total = p.total_bytes;
            const char *why = NULL;
            bool fits = plan_fits(&p, cpu, &given, &why);
            double io_s = speed_r > 0 ? (double)p.io_read_bytes / speed_r +
                                            (double)p.io_write_bytes / speed_w
                                      : -1;
            char label[32];
            if (kinds[ri] == OFF_NONE)
                snprintf(label, sizeof(label), "none");
            else
                snprintf(label, sizeof(label), "%s %.2f", kinds[ri] == OFF_NVME ? "nvme" : "cpu",
                         ratios[ri]);
            if (zt_cli.json) {
                printf("%s{\"stage\":%d,\"offload\":\"%s\",\"job\":%s,\"device_bytes\":%lld,\"host_bytes\":%lld,\"disk_bytes\":%lld,\"init_bytes\":%lld,\"peak_bytes\":%lld,\"runtime_bytes\":%lld,\"backend_bytes\":%lld,\"total_bytes\":%lld,\"fits\":%s,",
                       row ? "," : "", stage, label, mine ? "true" : "false",
                       (long long)p.device_total, (long long)p.host_total,
                       (long long)p.disk_bytes, (long long)p.init_bytes, (long long)p.peak_total,
                       (long long)p.runtime_bytes, (long long)p.backend_bytes, (long long)total,
                       fits ? "true" : "false");
                printf("\"io_read_bytes\":%lld,\"io_write_bytes\":%lld,", (long long)p.io_read_bytes,
                       (long long)p.io_write_bytes);
                if (io_s >= 0)
                    printf("\"io_seconds\":%.6g,", io_s);
                else
                    printf("\"io_seconds\":null,");
                if (any_limit && layers > 0)
                    printf("\"largest\":{\"n_layer\":%d,\"params\":%zu,\"bound\":%s%s%s},", layers,
                           big.num_params, over ? "\"" : "", over ? over : "null", over ? "\"" : "");
                else if (any_limit)
                    printf("\"largest\":{\"n_layer\":0,\"params\":0,\"bound\":\"%s\"},", over);
                else
                    printf("\"largest\":null,");
                printf("\"bytes\":{");
                for (int c = 0; c < ZT_MEM_CATEGORY_COUNT; c++)
                    printf("%s\"%s\":%lld", c ? "," : "", zt_mem_category_name((zt_mem_category)c),
                           (long long)p.bytes[c]);
                printf("}}");
            } else {
                char nofit[48] = "";
                if (!fits)
                    snprintf(nofit, sizeof(nofit), "  DOES NOT FIT (%s)", why);
                printf("%c stage %d %-9s %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f | %7.1f %7.1f %7.1f %7.1f%s\n",
                       mine ? '*' : ' ', stage, label, dev(&p, ZT_MEM_PARAMS),
                       dev(&p, ZT_MEM_MASTER), dev(&p, ZT_MEM_GRADS), dev(&p, ZT_MEM_OPTIM),
                       dev(&p, ZT_MEM_ACTIVATIONS), dev(&p, ZT_MEM_BUFFERS), dev(&p, ZT_MEM_COMM),
                       mib(p.device_total), mib(p.host_total), mib(p.disk_bytes), mib(total),
                       nofit);
                if (kinds[ri] == OFF_NVME) {
                    char secs[48] = "";
                    if (io_s >= 0)
                        snprintf(secs, sizeof(secs), ", %.3f s at the disk's speed", io_s);
                    printf("      NVMe per step: read %.1f MiB, write %.1f MiB%s; swap buffers %.1f MiB of host\n",
                           mib(p.io_read_bytes), mib(p.io_write_bytes), secs,
                           mib(p.host_bytes[ZT_MEM_HOST_OPTIM]));
                }
                if (any_limit) {
                    char n[32];
                    fmt_count((double)big.num_params, n, sizeof(n));
                    if (layers == 0)
                        printf("      largest: none; 1 layer exceeds the %s\n", over);
                    else if (!over)
                        printf("      largest: more than %d layers (%s params) fit\n", layers, n);
                    else
                        printf("      largest: %d layer%s, %s params; %d exceed the %s\n", layers,
                               layers == 1 ? "" : "s", n, layers + 1, over);
                }
            }
            if (mine && !fits)
                rc = 1;
            row++;
        }
    }
    if (zt_cli.json) {
        printf("]}\n");
        if (speed_note[0])
            fprintf(stderr, "zctl plan: %s\n", speed_note);
    } else {
        char cuda_note[160];
        snprintf(cuda_note, sizeof(cuda_note),
                 "; device also holds the CUDA kernels' workspace and scratch (%.1f MiB), not the CUDA context itself or NCCL's buffers",
                 mib(p.backend_bytes));
        printf("columns are device memory; host = offloaded master weights, moments and their staging buffers (with NVMe: the swap's buffer sets instead of the states), the checkpoint snapshot (12 bytes per element of the rank's shard) and the collectives' staging; disk = NVMe offload's swap files, read and written once each step.\n");
        printf("total = the rank's peak: device + host%s, or at start-up the buffers without the snapshot + %.1f MiB to initialise (one unit in fp32%s), whichever is larger%s.\n",
               cpu ? " + the process itself once it trains (code, libraries, oneDNN kernels, heap: a measured constant)"
                   : "",
               mib(p.init_bytes), job->model.init_random ? "" : " and the init file",
               cpu ? "" : cuda_note);
        if (any_nvme)
            printf("NVMe per step = the bytes each rank reads from and writes back to its swap files in one training step (master weights and both moments of the host part, 4 bytes an element each; with offload_param on NVMe also the swapped parameters, read at most once by each micro-step's forward and backward and once by the update, written once); seconds = read/read speed + write/write speed, as reads and writes share the disk, before any overlap with compute.\n");
        if (speed_note[0])
            printf("%s\n", speed_note);
        if (any_limit) {
            char dv[64] = "", hv[96] = "not limited", kv[4352] = "not limited";
            if (lim.device > 0)
                snprintf(dv, sizeof(dv), "%s %.1f MiB, ", cpu ? "memory (--device-memory)" : "device memory",
                         lim.device / 1048576.0);
            else if (!cpu)
                snprintf(dv, sizeof(dv), "device memory not limited (give --device-memory), ");
            if (lim.host > 0)
                snprintf(hv, sizeof(hv), "%.1f MiB (%s %.1f MiB / %d rank%s on a node)",
                         lim.host / 1048576.0, host_src, lim.host * local / 1048576.0, local,
                         local == 1 ? "" : "s");
            if (lim.disk > 0)
                snprintf(kv, sizeof(kv), "%.1f MiB (%s%s%s %.1f MiB / %d rank%s on a node)",
                         lim.disk / 1048576.0, disk_src, diskmem > 0 ? "" : " in ",
                         diskmem > 0 ? "" : speed_dir, lim.disk * local / 1048576.0, local,
                         local == 1 ? "" : "s");
            printf("largest = the most layers (n_layer; the job has %d) whose plan fits, at the job's width (n_embd %d, %d heads), vocabulary, block %d and micro batch %lld; limits per rank: %shost memory %s, disk %s.\n",
                   job->model.n_layer, job->model.n_embd, job->model.n_head,
                   job->model.block_size, (long long)job->ds.micro_batch, dv, hv, kv);
        }
        if (devmem > 0 || hostmem > 0 || diskmem > 0)
            printf("the job's configuration %s\n",
                   rc ? "DOES NOT FIT; pick a higher stage, offload, or a smaller micro batch" : "fits");
    }
free_job:
    free(job);
    return rc;
}
