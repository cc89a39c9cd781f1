/* zerotrain: what a zworker runs with — its command line (through zagent's exec wrapper when
 * zagent knows its own path) and its environment (the agent's, less the token, plus the
 * coordinator's variables and the rank's identity) — and the exec wrapper itself, the hidden
 * `zagent --exec-worker` mode that takes on the --run-as user, sets the parent-death signal
 * and execs the worker. */
#define _GNU_SOURCE /* environ, prctl, setgroups */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "agent/agent_int.h"
#include "common/alloc.h"

extern char **environ;

/* ---- command line and environment ---------------------------------------------------------- */

typedef struct strvec {
    char **v;
    int n, cap;
    bool failed;
} strvec;

static void sv_push(strvec *s, char *str)
{
    if (!str) {
        s->failed = true;
        return;
    }
    if (s->n + 2 > s->cap) {
        int cap = s->cap ? s->cap * 2 : 64;
        char **v = zt_realloc(s->v, (size_t)cap * sizeof(*v));
        if (!v) {
            zt_free(str);
            s->failed = true;
            return;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = str;
    s->v[s->n] = NULL;
}

static void sv_free(strvec *s)
{
    for (int i = 0; i < s->n; i++)
        zt_free(s->v[i]);
    zt_free(s->v);
}

static bool env_name_is(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

/* HOME, USER and LOGNAME: set for the --run-as user instead of inherited. */
static bool user_var(const char *entry)
{
    return env_name_is(entry, "HOME") || env_name_is(entry, "USER") ||
           env_name_is(entry, "LOGNAME");
}

/* The worker's environment: the agent's, minus the token and what is set here, plus the
 * coordinator's extra variables and the rank's identity (and, with --run-as, the user's HOME,
 * USER and LOGNAME). */
static void build_env(const ag_worker *w, strvec *env)
{
    const zt_agent *a = w->agent;
    static const char *const ours[] = {
        "ZT_RANK",    "ZT_WORLD_SIZE", "ZT_LOCAL_RANK", "ZT_LOCAL_WORLD_SIZE", "ZT_RENDEZVOUS",
        "ZT_SESSION", "ZT_REPORT_FD",  "ZT_TOKEN",      "ZT_TOKEN_FILE",       "ZT_DEVICE_INDEX"};
    for (char **e = environ; e && *e; e++) {
        bool skip = false;
        for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]) && !skip; i++)
            skip = env_name_is(*e, ours[i]);
        if (w->device == ZT_DEVICE_CUDA && env_name_is(*e, "CUDA_VISIBLE_DEVICES")) skip = true;
        if (w->device != ZT_DEVICE_CUDA && a->omp_threads > 0 && env_name_is(*e, "OMP_NUM_THREADS"))
            skip = true;
        for (int k = 0; k < w->n_env && !skip; k++) {
            const char *eq = strchr(w->env[k], '=');
            size_t n = eq ? (size_t)(eq - w->env[k]) : strlen(w->env[k]);
            skip = strncmp(*e, w->env[k], n) == 0 && (*e)[n] == '=';
        }
        if (!skip && !(a->cfg.drop_privileges && user_var(*e))) sv_push(env, zt_strdup(*e));
    }
    for (int k = 0; k < w->n_env; k++)
        if (!(a->cfg.drop_privileges && user_var(w->env[k]))) sv_push(env, zt_strdup(w->env[k]));
    if (a->cfg.drop_privileges) {
        /* what a login of the --run-as user would have */
        sv_push(env, zt_asprintf("HOME=%s", a->cfg.run_as_home));
        sv_push(env, zt_asprintf("USER=%s", a->cfg.run_as));
        sv_push(env, zt_asprintf("LOGNAME=%s", a->cfg.run_as));
    }
    sv_push(env, zt_asprintf("ZT_RANK=%d", w->rank));
    sv_push(env, zt_asprintf("ZT_WORLD_SIZE=%d", w->world_size));
    sv_push(env, zt_asprintf("ZT_LOCAL_RANK=%d", w->local_rank));
    sv_push(env, zt_asprintf("ZT_LOCAL_WORLD_SIZE=%d", w->local_world_size));
    sv_push(env, zt_asprintf("ZT_DEVICE_INDEX=%d", w->device_index));
    sv_push(env, zt_asprintf("ZT_SESSION=%lld", (long long)w->attempt_id));
    sv_push(env, zt_strdup("ZT_REPORT_FD=3"));
    if (w->rendezvous[0]) sv_push(env, zt_asprintf("ZT_RENDEZVOUS=%s", w->rendezvous));
    if (w->device == ZT_DEVICE_CUDA)
        sv_push(env, zt_asprintf("CUDA_VISIBLE_DEVICES=%s", w->cuda_visible));
    else if (a->omp_threads > 0)
        sv_push(env, zt_asprintf("OMP_NUM_THREADS=%d", a->omp_threads));
}

/* The exec wrapper's --as value: "UID:GID:G1,G2,..." (the groups may be empty). */
static char *user_spec(const zt_agent_config *c)
{
    size_t cap = 48 + (size_t)c->n_run_as_groups * 12;
    char *s = zt_malloc(cap);
    if (!s) return NULL;
    size_t n = (size_t)snprintf(s, cap, "%u:%u:", (unsigned)c->run_as_uid, (unsigned)c->run_as_gid);
    for (int i = 0; i < c->n_run_as_groups && n < cap; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s%u", i ? "," : "", (unsigned)c->run_as_groups[i]);
    return s;
}

bool ag_worker_command(const ag_worker *w, char ***argv, char ***envp)
{
    const zt_agent *a = w->agent;
    strvec args = {0}, env = {0};
    char ppid[24];
    snprintf(ppid, sizeof(ppid), "%d", (int)getpid());
    if (a->cfg.exec_wrapper) {
        sv_push(&args, zt_strdup(a->cfg.exec_wrapper));
        sv_push(&args, zt_strdup("--exec-worker"));
        sv_push(&args, zt_strdup(ppid));
        if (a->cfg.drop_privileges) {
            sv_push(&args, zt_strdup("--as"));
            sv_push(&args, user_spec(&a->cfg));
        }
    }
    sv_push(&args, zt_strdup(a->cfg.worker));
    if (w->resume_path && w->resume_path[0]) {
        sv_push(&args, zt_strdup("--resume"));
        sv_push(&args, zt_strdup(w->resume_path));
    }
    sv_push(&args, zt_strdup(w->job_path));
    build_env(w, &env);
    if (args.failed || env.failed) {
        sv_free(&args);
        sv_free(&env);
        return false;
    }
    *argv = args.v;
    *envp = env.v;
    return true;
}

void ag_strv_free(char **v)
{
    for (char **p = v; p && *p; p++)
        zt_free(*p);
    zt_free(v);
}

/* ---- the exec wrapper --------------------------------------------------------------------- */

/* --as UID:GID:G1,G2,...: takes on that user for good (groups, then group, then user) and
 * checks that root cannot be regained. 0 on success; -1 after saying why on stderr. */
static int become(const char *spec)
{
    char *end;
    errno = 0;
    unsigned long uid = strtoul(spec, &end, 10), gid = 0;
    bool ok = !errno && end != spec && *end == ':';
    const char *list = "";
    if (ok) {
        const char *g = end + 1;
        gid = strtoul(g, &end, 10);
        ok = !errno && end != g && *end == ':';
        list = end + 1;
    }
    size_t n = 0, cap = 1;
    for (const char *p = list; *p; p++)
        cap += *p == ',';
    gid_t *groups = zt_calloc(cap, sizeof(*groups));
    for (const char *p = list; ok && groups && *p;) {
        errno = 0;
        unsigned long x = strtoul(p, &end, 10);
        ok = !errno && end != p && (*end == ',' || !*end) && n < cap;
        if (ok) groups[n++] = (gid_t)x;
        p = *end ? end + 1 : end;
    }
    if (!ok || !groups) {
        fprintf(stderr, "zagent --exec-worker: bad --as '%s' (expected UID:GID:G1,G2,...)\n", spec);
        zt_free(groups);
        return -1;
    }
    int rc = setgroups(n, groups);
    zt_free(groups);
    if (rc != 0 || setgid((gid_t)gid) != 0 || setuid((uid_t)uid) != 0) {
        fprintf(stderr, "zagent: cannot start the worker as uid %lu gid %lu: %s (check --run-as)\n",
                uid, gid, strerror(errno));
        return -1;
    }
    if (getuid() != (uid_t)uid || geteuid() != (uid_t)uid || getgid() != (gid_t)gid ||
        getegid() != (gid_t)gid || (uid != 0 && setuid(0) == 0)) {
        fprintf(
            stderr,
            "zagent: after changing to uid %lu gid %lu the worker's ids differ or it can regain root; not starting it\n",
            uid, gid);
        return -1;
    }
    return 0;
}

int zt_agent_exec_worker(int argc, char **argv)
{
    int first = 3; /* WORKER */
    if (argc >= 4 && strcmp(argv[3], "--as") == 0) first = 5;
    if (argc < first + 1) {
        fprintf(
            stderr,
            "zagent --exec-worker: usage: zagent --exec-worker PPID [--as UID:GID:GROUPS] WORKER ARGS...\n");
        return 2;
    }
    long ppid = strtol(argv[2], NULL, 10);
    /* the user first: changing it clears the parent-death signal */
    if (first == 5 && become(argv[4]) != 0) return 126;
    /* SIGKILL when the agent (the thread that spawned us: its loop thread) dies */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        fprintf(stderr, "zagent --exec-worker: prctl(PR_SET_PDEATHSIG): %s\n", strerror(errno));
        return 1;
    }
    if (getppid() != (pid_t)ppid) {
        fprintf(stderr, "zagent --exec-worker: the agent (pid %ld) is gone; not starting %s\n",
                ppid, argv[first]);
        return 1;
    }
    execv(argv[first], argv + first);
    int e = errno;
    fprintf(stderr, "zagent: cannot start the worker %s: %s (check --worker)\n", argv[first],
            strerror(e));
    return e == ENOENT ? 127 : e == EACCES ? 126 : 1;
}
