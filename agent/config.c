/* zerotrain: zagent's settings. One table (flag, its row of common/settings.h, help) feeds
 * the flags, the ZT_* environment fallbacks and --help; each value is then checked with a
 * message that names where it came from. */
#define _XOPEN_SOURCE 700 /* realpath */
#define _DEFAULT_SOURCE   /* getgrouplist */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/confine.h"
#include "agent/gpu.h"
#include "common/alloc.h"
#include "common/fsutil.h"
#include "common/log.h"
#include "common/netutil.h"
#include "common/secretfile.h"
#include "common/settings.h"
#include "proto/rpc.h"

#define MAX_SLOTS 4096
#define MAX_GPUS 256
#define MAX_GROUPS 65536

enum {
    S_COORDINATOR,
    S_TOKEN_FILE,
    S_TLS_CA,
    S_TLS_CERT,
    S_TLS_KEY,
    S_SLOTS,
    S_NAME,
    S_WORK_DIR,
    S_WORKER,
    S_HEARTBEAT,
    S_ADVERTISE,
    S_STOP_GRACE,
    S_LOG_QUEUE,
    S_STATUS_FILE,
    S_LOG_LEVEL,
    S_ALLOW_PATH,
    S_RUN_AS,
    S_ALLOW_ROOT,
    S_COUNT
};

typedef enum {
    K_VALUE = 0, /* --name VALUE */
    K_LIST,      /* repeatable --name VALUE; the variable is a ':'-separated list */
    K_SWITCH,    /* --name alone (or --name=true|false); the variable is 1/0, true/false, yes/no */
} setting_kind;

typedef struct setting {
    const char *name; /* the flag without "--" */
    zt_setting env;  /* its variable, name and default in common/settings.h */
    const char *arg; /* metavariable in --help ("" for a switch) */
    const char *help;
    setting_kind kind;
} setting;

static const setting settings[S_COUNT] = {
    [S_COORDINATOR] = {"coordinator", ZT_SET_COORDINATOR, "ADDR",
                       "the coordinator's gRPC address (host:port or unix:/path)"},
    [S_TOKEN_FILE] =
        {"token-file", ZT_SET_TOKEN_FILE, "FILE",
         "file holding the agent join token zcoord reads with --agent-token-file (or put it in ZT_TOKEN)"},
    [S_TLS_CA] = {"tls-ca", ZT_SET_TLS_CA, "FILE",
                  "PEM CA certificate: talk TLS to the coordinator and verify it"},
    [S_TLS_CERT] =
        {"tls-cert", ZT_SET_TLS_CERT, "FILE",
         "PEM client certificate for mutual TLS (with --tls-ca and --tls-key): its common name is this agent's name, and it stands for the join token"},
    [S_TLS_KEY] = {"tls-key", ZT_SET_TLS_KEY, "FILE", "PEM private key of --tls-cert"},
    [S_SLOTS] = {"slots", ZT_SET_SLOTS, "SPEC",
                 "cpu:N (N CPU workers), cuda:auto (one per GPU found) or cuda:N"},
    [S_NAME] = {"name", ZT_SET_AGENT_NAME, "NAME",
                "agent name, unique per node and stable across restarts (default: hostname)"},
    [S_WORK_DIR] = {"work-dir", ZT_SET_WORK_DIR, "DIR",
                    "per-attempt job files and rank logs (attempt_<id>/rank_NNNNN.log)"},
    [S_WORKER] = {"worker", ZT_SET_WORKER, "PATH",
                  "the zworker binary (default: zworker next to zagent)"},
    [S_HEARTBEAT] = {"heartbeat-ms", ZT_SET_HEARTBEAT_MS, "MS",
                     "heartbeat interval in ms, 50..60000 (0: the coordinator's)"},
    [S_ADVERTISE] =
        {"advertise-host", ZT_SET_ADVERTISE_HOST, "HOST",
         "address peers use to reach this node's rank-0 worker (default: 127.0.0.1 with a loopback coordinator, else the hostname)"},
    [S_STOP_GRACE] = {"stop-grace", ZT_SET_STOP_GRACE, "DUR",
                      "SIGTERM to SIGKILL when a worker is stopped (ms, s, m)"},
    [S_LOG_QUEUE] = {"log-queue", ZT_SET_LOG_QUEUE, "N",
                     "worker output lines queued for the coordinator before new ones are dropped"},
    [S_STATUS_FILE] = {"status-file", ZT_SET_STATUS_FILE, "FILE",
                       "rewrite this JSON file with the agent's state after each heartbeat"},
    [S_LOG_LEVEL] = {"log-level", ZT_SET_LOG_LEVEL, "LEVEL", "error, warn, info or debug"},
    [S_ALLOW_PATH] =
        {"allow-path", ZT_SET_ALLOW_PATH, "DIR",
         "a directory the paths of jobs must resolve inside (repeatable; the variable is ':'-separated; default: the working directory)",
         K_LIST},
    [S_RUN_AS] = {"run-as", ZT_SET_RUN_AS, "USER",
                  "when zagent runs as root, start workers as this user (name or uid)"},
    [S_ALLOW_ROOT] = {"allow-root", ZT_SET_ALLOW_ROOT, "",
                      "let a root zagent without --run-as start workers as root", K_SWITCH},
};

void zt_agent_usage(FILE *f)
{
    fprintf(
        f,
        "usage: zagent [options]\n\nThe zerotrain node agent: registers with the coordinator, starts and stops zworker processes as\nthe coordinator's desired set says, and forwards their metrics, checkpoints and output.\nSIGTERM or SIGINT stop the workers (SIGTERM, then SIGKILL after --stop-grace) and exit 0.\n\noptions (each also from its environment variable):\n");
    for (int i = 0; i < S_COUNT; i++) {
        const setting *s = &settings[i];
        char flag[64];
        snprintf(flag, sizeof(flag), "--%s%s%s", s->name, s->arg[0] ? " " : "", s->arg);
        const zt_setting_info *v = zt_setting_about(s->env);
        fprintf(f, "  %-26s %s (%s", flag, s->help, v->name);
        if (v->def[0]) fprintf(f, ", default %s", v->def);
        fprintf(f, ")\n");
    }
    fprintf(
        f,
        "\nEach worker runs WORKER [--resume CKPT] WORK_DIR/attempt_<id>/job.json in that directory, leading a process group\nof its own, with the agent's environment (less ZT_TOKEN) plus the coordinator's variables and\nZT_RANK, ZT_WORLD_SIZE, ZT_LOCAL_RANK, ZT_LOCAL_WORLD_SIZE, ZT_DEVICE_INDEX, ZT_SESSION (the attempt\nid), ZT_RENDEZVOUS (tcp://host:port of rank 0, met through the coordinator), ZT_REPORT_FD=3.\nCPU workers get OMP_NUM_THREADS = online CPUs / slots unless the agent's environment sets it.\nCUDA workers get CUDA_VISIBLE_DEVICES = the attempt's GPUs on this node in local-rank order.\nWorkers die with the agent (parent-death signal SIGKILL). --slots cuda:auto on a node without a\nusable GPU is an error (exit 2): use --slots cpu:N there.\nBefore starting the workers of an attempt zagent resolves the job's data globs and the files they\nmatch, model file, checkpoint directory, train.resume_from, CSV output, NVMe swap directory and the checkpoint it\nresumes from (symbolic links followed); when one lies outside every --allow-path the attempt\nfails, not retried, with the reason in the job's logs. As root, zagent needs --run-as USER\n(workers then start with that user's uid, gid, groups and HOME) or --allow-root.\nExit codes: 0 stopped by a signal, 1 the coordinator refused the token, 2 bad flags or environment.\n");
}

zt_status zt_agent_parse_slots(const char *s, zt_device *device, int *slots, zt_err *err)
{
    const char *v = NULL;
    if (strncmp(s, "cpu:", 4) == 0) {
        *device = ZT_DEVICE_CPU;
        v = s + 4;
    } else if (strncmp(s, "cuda:", 5) == 0) {
        *device = ZT_DEVICE_CUDA;
        v = s + 5;
        if (strcmp(v, "auto") == 0) {
            *slots = -1;
            return ZT_OK;
        }
    } else {
        return zt_err_set(err, ZT_ERR_CONFIG,
                          "'%s' is not a slot spec: write cpu:N (N CPU workers) or cuda:auto", s);
    }
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (!*v || *end || errno || n < 1 || n > MAX_SLOTS)
        return zt_err_set(err, ZT_ERR_CONFIG,
                          "'%s': the slot count must be a number from 1 to %d%s", s, MAX_SLOTS,
                          *device == ZT_DEVICE_CUDA ? " (or auto)" : "");
    *slots = (int)n;
    return ZT_OK;
}

static bool valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* Parses a duration: plain ms, or a number with ms, s or m. */
static bool parse_duration_ms(const char *v, long *ms)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || errno || x < 0) return false;
    double mult = strcmp(end, "ms") == 0 || !*end ? 1
                  : strcmp(end, "s") == 0         ? 1000
                  : strcmp(end, "m") == 0         ? 60000
                                                  : -1;
    if (mult < 0 || x * mult > 3600000) return false;
    *ms = (long)(x * mult);
    return true;
}

static bool loopback_target(const char *t)
{
    return zt_net_is_loopback(t, false);
}

/* The directory of the running executable (for the default worker and the exec wrapper). */
static bool self_exe(char *buf, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
    if (n <= 0) return false;
    buf[n] = '\0';
    return true;
}

void zt_agent_config_free(zt_agent_config *cfg)
{
    if (!cfg) return;
    zt_free(cfg->coordinator);
    zt_free(cfg->token);
    zt_free(cfg->tls_ca_pem);
    zt_free(cfg->tls_cert_pem);
    zt_free(cfg->tls_key_pem);
    zt_free(cfg->gpus);
    zt_free(cfg->name);
    zt_free(cfg->hostname);
    zt_free(cfg->advertise_host);
    zt_free(cfg->work_dir);
    zt_free(cfg->worker);
    zt_free(cfg->exec_wrapper);
    zt_free(cfg->status_file);
    for (int i = 0; i < cfg->n_allow_paths; i++)
        zt_free(cfg->allow_paths[i]);
    zt_free(cfg->allow_paths);
    zt_free(cfg->run_as);
    zt_free(cfg->run_as_groups);
    zt_free(cfg->run_as_home);
    memset(cfg, 0, sizeof(*cfg));
}

/* Adds the canonical form of dir to cfg's allowed roots (a root given twice is kept once). */
static zt_status add_root(zt_agent_config *cfg, const char *dir, const char *origin, zt_err *err)
{
    char rp[PATH_MAX];
    zt_status st = zt_confine_root(dir, origin, rp, sizeof(rp), err);
    if (st != ZT_OK) return st;
    for (int i = 0; i < cfg->n_allow_paths; i++)
        if (strcmp(cfg->allow_paths[i], rp) == 0) return ZT_OK;
    char **v = zt_realloc(cfg->allow_paths, (size_t)(cfg->n_allow_paths + 1) * sizeof(*v));
    if (!v) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    cfg->allow_paths = v;
    if (!(v[cfg->n_allow_paths] = zt_strdup(rp)))
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    cfg->n_allow_paths++;
    return ZT_OK;
}

/* The allowed roots: every --allow-path flag, else ZT_ALLOW_PATH split on ':', else the
 * working directory. Each must exist; the canonical path is kept. */
static zt_status parse_allow_paths(zt_agent_config *cfg, const char **flags, int n_flags,
                                   const char *env, const char *origin, zt_err *err)
{
    zt_status st = ZT_OK;
    for (int i = 0; i < n_flags && st == ZT_OK; i++)
        st = add_root(cfg, flags[i], "--allow-path", err);
    if (n_flags == 0 && env[0]) {
        char *copy = zt_strdup(env);
        if (!copy) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        char *save = NULL;
        for (char *d = strtok_r(copy, ":", &save); d && st == ZT_OK; d = strtok_r(NULL, ":", &save))
            st = add_root(cfg, d, origin, err);
        zt_free(copy);
    }
    if (st != ZT_OK || cfg->n_allow_paths > 0) return st;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd)))
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "cannot read the working directory (the default of --allow-path): %s; give --allow-path DIR",
            strerror(errno));
    cfg->allow_paths_default = true;
    return add_root(cfg, cwd, "the default of --allow-path (the working directory)", err);
}

/* A switch's value: 1/true/yes/on or 0/false/no/off (and "" = off). */
static bool parse_switch(const char *v, bool *on)
{
    static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no",
                                                                                "off", ""};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        if (strcmp(v, yes[i]) == 0) return (*on = true);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        if (strcmp(v, no[i]) == 0) return !(*on = false);
    return false;
}

/* --run-as and --allow-root: who the workers run as (zt_confine_check_user), and for a user
 * change the user's ids, groups and home, looked up once here (not in the forked child). */
static zt_status parse_user(zt_agent_config *cfg, const char *run_as, const char *run_as_origin,
                            const char *allow_root, const char *allow_root_origin, zt_err *err)
{
    if (!parse_switch(allow_root, &cfg->allow_root))
        return zt_err_set(err, ZT_ERR_CONFIG, "%s: '%s' is not 1 or 0 (true or false)",
                          allow_root_origin, allow_root);
    struct passwd *pw = NULL;
    if (run_as[0]) {
        char *end;
        errno = 0;
        unsigned long id = strtoul(run_as, &end, 10);
        pw = getpwnam(run_as);
        if (!pw && !*end && !errno) pw = getpwuid((uid_t)id);
        if (!pw)
            return zt_err_set(
                err, ZT_ERR_CONFIG,
                "%s: there is no user '%s' on this node; give an existing user name or uid",
                run_as_origin, run_as);
        if (!(cfg->run_as = zt_strdup(pw->pw_name)) || !(cfg->run_as_home = zt_strdup(pw->pw_dir)))
            return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        cfg->run_as_uid = pw->pw_uid;
        cfg->run_as_gid = pw->pw_gid;
    }
    zt_status st = zt_confine_check_user(geteuid(), run_as, cfg->run_as_uid, cfg->allow_root,
                                         &cfg->drop_privileges, err);
    if (st != ZT_OK || !cfg->drop_privileges) return st;
    if (!cfg->exec_wrapper)
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "%s: workers change user in zagent's exec wrapper, and zagent cannot find its own path (/proc/self/exe)",
            run_as_origin);
    int n = 64;
    for (;;) {
        gid_t *g = zt_realloc(cfg->run_as_groups, (size_t)n * sizeof(*g));
        if (!g) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        cfg->run_as_groups = g;
        int got = n;
        if (getgrouplist(cfg->run_as, cfg->run_as_gid, g, &got) >= 0) {
            cfg->n_run_as_groups = got;
            return ZT_OK;
        }
        if (got <= n || got > MAX_GROUPS)
            return zt_err_set(err, ZT_ERR_CONFIG, "%s: cannot read the groups of user '%s'",
                              run_as_origin, run_as);
        n = got;
    }
}

/* Sets err and st, then jumps to the cleanup label the call site names. */
#define FAIL(label, ...)                                                                           \
    do {                                                                                           \
        st = zt_err_set(err, __VA_ARGS__);                                                         \
        goto label;                                                                                \
    } while (0)

zt_status zt_agent_config_parse(zt_agent_config *cfg, int argc, char **argv, bool *help,
                                zt_err *err)
{
    memset(cfg, 0, sizeof(*cfg));
    *help = false;
    zt_status st = ZT_OK;
    const char *val[S_COUNT] = {0};
    char origin[S_COUNT][64];
    /* flags first: they win over the environment */
    const char **list = zt_calloc((size_t)argc + 1, sizeof(*list)); /* --allow-path values */
    int n_list = 0;
    if (!list) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            *help = true;
            zt_free(list);
            return ZT_OK;
        }
        if (strncmp(a, "--", 2) != 0)
            FAIL(free_cfg, ZT_ERR_CONFIG, "unexpected argument '%s'; see zagent --help", a);
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        int k = -1;
        for (int j = 0; j < S_COUNT; j++)
            if (strlen(settings[j].name) == nlen && strncmp(settings[j].name, name, nlen) == 0)
                k = j;
        if (k < 0) FAIL(free_cfg, ZT_ERR_CONFIG, "unknown option '%s'; see zagent --help", a);
        if (eq)
            val[k] = eq + 1;
        else if (settings[k].kind == K_SWITCH)
            val[k] = "1";
        else if (i + 1 < argc)
            val[k] = argv[++i];
        else
            FAIL(free_cfg, ZT_ERR_CONFIG, "%s needs a value; see zagent --help", a);
        if (settings[k].kind == K_LIST) list[n_list++] = val[k];
        snprintf(origin[k], sizeof(origin[k]), "--%s", settings[k].name);
    }
    for (int k = 0; k < S_COUNT; k++) {
        if (val[k]) continue;
        const char *e = zt_setting_raw(settings[k].env);
        if (e) {
            val[k] = e;
            snprintf(origin[k], sizeof(origin[k]), "%s", zt_setting_about(settings[k].env)->name);
        } else {
            val[k] = zt_setting_about(settings[k].env)->def;
            snprintf(origin[k], sizeof(origin[k]), "the default of --%s", settings[k].name);
        }
    }

    int lvl = zt_log_parse_level(val[S_LOG_LEVEL]);
    if (lvl < 0)
        FAIL(free_cfg, ZT_ERR_CONFIG, "%s: '%s' is not error, warn, info or debug",
             origin[S_LOG_LEVEL], val[S_LOG_LEVEL]);
    zt_log_set_level((zt_log_level)lvl);

    if (!val[S_COORDINATOR][0])
        FAIL(free_cfg, ZT_ERR_CONFIG, "%s is empty: give the coordinator's host:port",
             origin[S_COORDINATOR]);
    cfg->coordinator = zt_strdup(val[S_COORDINATOR]);

    /* token: the file wins over ZT_TOKEN; both read as zctl reads them */
    if (val[S_TOKEN_FILE][0]) {
        char what[160];
        snprintf(what, sizeof(what), "the token file (%s)", origin[S_TOKEN_FILE]);
        if (!(cfg->token = zt_secret_file_read(val[S_TOKEN_FILE], what, err))) {
            st = err ? err->status : ZT_ERR_CONFIG;
            goto free_cfg;
        }
    } else if (zt_setting_raw(ZT_SET_TOKEN)) {
        cfg->token = zt_strdup(zt_setting_raw(ZT_SET_TOKEN));
    }
    if (val[S_TLS_CA][0] &&
        (st = zt_rpc_read_ca_file(val[S_TLS_CA], origin[S_TLS_CA], &cfg->tls_ca_pem, err)) !=
            ZT_OK)
        goto free_cfg;
    if (!!val[S_TLS_CERT][0] != !!val[S_TLS_KEY][0] || (val[S_TLS_CERT][0] && !val[S_TLS_CA][0]))
        FAIL(free_cfg, ZT_ERR_CONFIG,
             "%s and %s go together, and with --tls-ca (mutual TLS): give all three or neither",
             origin[S_TLS_CERT], origin[S_TLS_KEY]);
    if (val[S_TLS_CERT][0]) {
        if ((st = zt_rpc_read_ca_file(val[S_TLS_CERT], origin[S_TLS_CERT], &cfg->tls_cert_pem,
                                      err)) != ZT_OK)
            goto free_cfg;
        if ((st = zt_rpc_read_key_file(val[S_TLS_KEY], origin[S_TLS_KEY], &cfg->tls_key_pem,
                                       err)) != ZT_OK)
            goto free_cfg;
    }

    /* slots */
    st = zt_agent_parse_slots(val[S_SLOTS], &cfg->device, &cfg->slots, err);
    if (st != ZT_OK) {
        zt_err_prefix(err, "%s", origin[S_SLOTS]);
        goto free_cfg;
    }
    if (cfg->device == ZT_DEVICE_CUDA) {
        cfg->gpus = zt_calloc(MAX_GPUS, sizeof(*cfg->gpus));
        if (!cfg->gpus) FAIL(free_cfg, ZT_ERR_NOMEM, "out of memory");
        zt_err gerr = {0};
        if (zt_agent_gpu_detect(cfg->gpus, MAX_GPUS, &cfg->n_gpus, &gerr) != ZT_OK)
            FAIL(free_cfg, ZT_ERR_NO_DEVICE,
                 "%s '%s': no usable GPU on this node (%s); on a CPU-only node use --slots cpu:N",
                 origin[S_SLOTS], val[S_SLOTS], zt_err_msg(&gerr));
        if (cfg->slots < 0)
            cfg->slots = cfg->n_gpus;
        else if (cfg->slots > cfg->n_gpus)
            FAIL(free_cfg, ZT_ERR_NO_DEVICE, "%s '%s': only %d GPU%s on this node", origin[S_SLOTS],
                 val[S_SLOTS], cfg->n_gpus, cfg->n_gpus == 1 ? "" : "s");
        cfg->n_gpus = cfg->slots;
    } else {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        const char *omp = getenv("OMP_NUM_THREADS");
        if (!(omp && omp[0])) cfg->omp_threads = cpus > cfg->slots ? (int)(cpus / cfg->slots) : 1;
    }

    /* identity */
    char host[256] = "localhost";
    if (gethostname(host, sizeof(host) - 1) != 0) snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    cfg->hostname = zt_strdup(host);
    if (val[S_NAME][0]) {
        if (!valid_name(val[S_NAME]))
            FAIL(free_cfg, ZT_ERR_CONFIG,
                 "%s: agent name '%.64s' is not valid: use 1-128 letters, digits, '.', '_' or '-'",
                 origin[S_NAME], val[S_NAME]);
        cfg->name = zt_strdup(val[S_NAME]);
    } else {
        char nm[129];
        snprintf(nm, sizeof(nm), "%.128s", host);
        for (char *p = nm; *p; p++)
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' || *p == '-'))
                *p = '-';
        cfg->name = zt_strdup(nm[0] ? nm : "agent");
    }
    if (val[S_ADVERTISE][0])
        cfg->advertise_host = zt_strdup(val[S_ADVERTISE]);
    else
        cfg->advertise_host = zt_strdup(loopback_target(cfg->coordinator) ? "127.0.0.1" : host);

    /* numbers */
    char *end;
    errno = 0;
    long hb = strtol(val[S_HEARTBEAT], &end, 10);
    if (errno || *end || !val[S_HEARTBEAT][0] || (hb != 0 && (hb < 50 || hb > 60000)))
        FAIL(free_cfg, ZT_ERR_CONFIG,
             "%s: '%s' is not 0 or a number of milliseconds from 50 to 60000", origin[S_HEARTBEAT],
             val[S_HEARTBEAT]);
    cfg->heartbeat_ms = (int)hb;
    long grace;
    if (!parse_duration_ms(val[S_STOP_GRACE], &grace))
        FAIL(free_cfg, ZT_ERR_CONFIG, "%s: '%s' is not a duration up to 1h (e.g. 10s, 500ms)",
             origin[S_STOP_GRACE], val[S_STOP_GRACE]);
    cfg->stop_grace_ms = (int)grace;
    errno = 0;
    long lq = strtol(val[S_LOG_QUEUE], &end, 10);
    if (errno || *end || lq < 10 || lq > 10000000)
        FAIL(free_cfg, ZT_ERR_CONFIG, "%s: '%s' is not a line count from 10 to 10000000",
             origin[S_LOG_QUEUE], val[S_LOG_QUEUE]);
    cfg->log_queue_lines = (int)lq;
    if (val[S_STATUS_FILE][0]) cfg->status_file = zt_strdup(val[S_STATUS_FILE]);

    /* paths */
    char exe[PATH_MAX];
    bool have_exe = self_exe(exe, sizeof(exe));
    if (have_exe) cfg->exec_wrapper = zt_strdup(exe);
    char wpath[PATH_MAX];
    if (val[S_WORKER][0]) {
        snprintf(wpath, sizeof(wpath), "%s", val[S_WORKER]);
    } else {
        if (!have_exe)
            FAIL(free_cfg, ZT_ERR_CONFIG,
                 "cannot find zagent's own path (/proc/self/exe): give --worker");
        char *slash = strrchr(exe, '/');
        snprintf(wpath, sizeof(wpath), "%.*s/zworker", (int)(slash - exe), exe);
    }
    char rp[PATH_MAX];
    if (!realpath(wpath, rp) || access(rp, X_OK) != 0)
        FAIL(free_cfg, ZT_ERR_CONFIG,
             "%s: the worker binary %s is not an executable file (%s); give --worker PATH",
             val[S_WORKER][0] ? origin[S_WORKER] : "zworker next to zagent", wpath,
             strerror(errno));
    cfg->worker = zt_strdup(rp);
    if (zt_mkdirs(val[S_WORK_DIR], false, NULL, 0) != 0 || !realpath(val[S_WORK_DIR], rp))
        FAIL(free_cfg, ZT_ERR_IO, "%s: cannot create the work directory %s: %s", origin[S_WORK_DIR],
             val[S_WORK_DIR], strerror(errno));
    if (access(rp, W_OK) != 0)
        FAIL(free_cfg, ZT_ERR_IO, "%s: the work directory %s is not writable: %s",
             origin[S_WORK_DIR], rp, strerror(errno));
    cfg->work_dir = zt_strdup(rp);

    if (!cfg->coordinator || !cfg->hostname || !cfg->name || !cfg->advertise_host || !cfg->worker ||
        !cfg->work_dir || (val[S_STATUS_FILE][0] && !cfg->status_file))
        FAIL(free_cfg, ZT_ERR_NOMEM, "out of memory");

    if ((st = parse_allow_paths(cfg, list, n_list, val[S_ALLOW_PATH], origin[S_ALLOW_PATH], err)) !=
        ZT_OK)
        goto free_cfg;
    if ((st = parse_user(cfg, val[S_RUN_AS], origin[S_RUN_AS], val[S_ALLOW_ROOT],
                         origin[S_ALLOW_ROOT], err)) != ZT_OK)
        goto free_cfg;
    zt_free(list);
    return ZT_OK;

free_cfg:
    zt_agent_config_free(cfg);
    zt_free(list);
    return st;
}
