/* zerotrain: zagent's confinement of jobs (see confine.h): each path a job names is resolved as
 * the kernel would resolve it for the worker and must land inside an allowed root; and the
 * policy that decides whether workers change user. */
#define _XOPEN_SOURCE 700 /* realpath, lstat, readlink */
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/confine.h"

#define MAX_LINK_HOPS 40 /* the kernel's limit (MAXSYMLINKS) */

zt_status zt_confine_root(const char *dir, const char *origin, char *out, size_t cap, zt_err *err)
{
    char rp[PATH_MAX];
    struct stat sb;
    if (!dir[0])
        return zt_err_set(err, ZT_ERR_CONFIG, "%s: an empty path; give a directory jobs may use",
                          origin);
    if (!realpath(dir, rp))
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "%s: the allowed path %s cannot be resolved: %s; create the directory or correct the path",
            origin, dir, strerror(errno));
    if (stat(rp, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return zt_err_set(err, ZT_ERR_CONFIG,
                          "%s: the allowed path %s is not a directory; give a directory", origin,
                          dir);
    if (strlen(rp) >= cap)
        return zt_err_set(err, ZT_ERR_CONFIG, "%s: the allowed path %s is too long", origin, dir);
    memcpy(out, rp, strlen(rp) + 1);
    return ZT_OK;
}

/* Splits path (absolute, no trailing slash but "/") into its parent and its last name. */
static void split_last(const char *path, char *parent, size_t cap, const char **base)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (n == 0) {
        snprintf(parent, cap, "/");
    } else {
        snprintf(parent, cap, "%.*s", (int)n, path);
    }
    *base = slash ? slash + 1 : path;
}

static zt_status resolve_at(const char *path, char *out, size_t cap, int *hops, zt_err *err)
{
    char rp[PATH_MAX];
    if (realpath(path, rp)) {
        if (strlen(rp) >= cap)
            return zt_err_set(err, ZT_ERR_CONFIG, "%s resolves to a path that is too long", path);
        memcpy(out, rp, strlen(rp) + 1);
        return ZT_OK;
    }
    int e = errno;
    if (e != ENOENT && e != ENOTDIR)
        return zt_err_set(err, ZT_ERR_CONFIG, "cannot resolve %s: %s", path, strerror(e));
    /* the path, or one of its ancestors, does not exist (yet) */
    char p[PATH_MAX];
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    if (n >= sizeof(p))
        return zt_err_set(err, ZT_ERR_CONFIG, "cannot resolve %.200s...: the path is too long",
                          path);
    memcpy(p, path, n);
    p[n] = '\0';
    char parent[PATH_MAX];
    const char *base;
    split_last(p, parent, sizeof(parent), &base);
    struct stat sb;
    if (lstat(p, &sb) == 0) {
        if (!S_ISLNK(sb.st_mode))
            return zt_err_set(err, ZT_ERR_CONFIG, "cannot resolve %s: %s", path, strerror(e));
        /* a dangling link: whatever is created through it appears where it points */
        if (++*hops > MAX_LINK_HOPS)
            return zt_err_set(err, ZT_ERR_CONFIG, "cannot resolve %s: %s", path, strerror(ELOOP));
        char target[PATH_MAX];
        ssize_t k = readlink(p, target, sizeof(target) - 1);
        if (k < 0)
            return zt_err_set(err, ZT_ERR_CONFIG, "cannot read the link %s: %s", p,
                              strerror(errno));
        target[k] = '\0';
        char next[2 * PATH_MAX + 2];
        if (target[0] == '/')
            snprintf(next, sizeof(next), "%s", target);
        else
            snprintf(next, sizeof(next), "%s/%s", parent, target);
        return resolve_at(next, out, cap, hops, err);
    }
    if (strcmp(base, "..") == 0)
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "cannot resolve %s: it goes up (\"..\") from a directory that does not exist", path);
    zt_status st = resolve_at(parent, out, cap, hops, err);
    if (st != ZT_OK || base[0] == '\0' || strcmp(base, ".") == 0) return st;
    size_t used = strlen(out);
    bool root = used == 1 && out[0] == '/';
    if (used + 1 + strlen(base) + 1 > cap)
        return zt_err_set(err, ZT_ERR_CONFIG, "%s resolves to a path that is too long", path);
    snprintf(out + used, cap - used, "%s%s", root ? "" : "/", base);
    return ZT_OK;
}

zt_status zt_confine_resolve(const char *path, char *out, size_t cap, zt_err *err)
{
    if (path[0] != '/') return zt_err_set(err, ZT_ERR_CONFIG, "%s is not an absolute path", path);
    int hops = 0;
    return resolve_at(path, out, cap, &hops, err);
}

bool zt_confine_inside(const char *resolved, char *const *roots, int n_roots)
{
    for (int i = 0; i < n_roots; i++) {
        size_t n = strlen(roots[i]);
        if (n == 0 || strncmp(resolved, roots[i], n) != 0) continue;
        if (resolved[n] == '\0' || resolved[n] == '/' || roots[i][n - 1] == '/') return true;
    }
    return false;
}

/* ---- a job's paths ------------------------------------------------------------------------- */

typedef struct checker {
    char *const *roots;
    int n_roots;
    const char *origin;
    zt_err *err;
    char roots_text[1024];
} checker;

/* Resolves path and checks it. shown is how the job gave it (the key's value); via, when set,
 * the file of a glob that led to it; tail, when set, what follows the resolved directory of a
 * glob in the message; advice what to do instead. */
static zt_status check_path(checker *c, const char *key, const char *shown, const char *path,
                            const char *via, const char *tail, const char *advice)
{
    char res[PATH_MAX];
    zt_err e = {0};
    if (zt_confine_resolve(path, res, sizeof(res), &e) != ZT_OK)
        return zt_err_set(c->err, ZT_ERR_CONFIG, "%s: %s %s: %s", c->origin, key, shown,
                          zt_err_msg(&e));
    if (zt_confine_inside(res, c->roots, c->n_roots)) return ZT_OK;
    if (via)
        return zt_err_set(
            c->err, ZT_ERR_AUTH,
            "%s: %s %s matches %s, which resolves to %s, outside the agent's allowed paths (%s); start zagent with --allow-path DIR or %s",
            c->origin, key, shown, via, res, c->roots_text, advice);
    return zt_err_set(
        c->err, ZT_ERR_AUTH,
        "%s: %s %s resolves to %s%s%s, outside the agent's allowed paths (%s); start zagent with --allow-path DIR or %s",
        c->origin, key, shown, res, tail && strcmp(res, "/") != 0 ? "/" : "", tail ? tail : "",
        c->roots_text, advice);
}

/* A data glob: the directory before its first wildcard, then every file it matches now (the
 * worker's loader expands it with the same glob flags). */
static zt_status check_glob(checker *c, const char *key, const char *pattern)
{
    const char *magic = NULL;
    for (const char *p = pattern; *p; p++)
        if (*p == '*' || *p == '?' || *p == '[') {
            magic = p;
            break;
        }
    char dir[PATH_MAX];
    const char *tail;
    if (magic) {
        const char *slash = magic;
        while (slash > pattern && *slash != '/')
            slash--;
        snprintf(dir, sizeof(dir), "%.*s", slash == pattern ? 1 : (int)(slash - pattern), pattern);
        tail = slash + 1;
    } else {
        split_last(pattern, dir, sizeof(dir), &tail);
    }
    zt_status st = check_path(c, key, pattern, dir, NULL, tail, "move the data inside them");
    if (st != ZT_OK) return st;
    if (!magic)
        return check_path(c, key, pattern, pattern, NULL, NULL, "move the data inside them");
    glob_t g;
    memset(&g, 0, sizeof(g));
    int grc = glob(pattern, GLOB_NOSORT, NULL, &g);
    if (grc == GLOB_NOSPACE) {
        globfree(&g);
        return zt_err_set(c->err, ZT_ERR_NOMEM, "%s: %s %s: out of memory expanding the pattern",
                          c->origin, key, pattern);
    }
    /* no match, or an unreadable directory: the worker reports that itself */
    for (size_t i = 0; grc == 0 && i < g.gl_pathc && st == ZT_OK; i++)
        st = check_path(c, key, pattern, g.gl_pathv[i], g.gl_pathv[i], NULL,
                        "move the data inside them");
    globfree(&g);
    return st;
}

zt_status zt_confine_check_job(const zt_job *job, const char *resume_path, char *const *roots,
                               int n_roots, const char *origin, zt_err *err)
{
    checker c = {.roots = roots, .n_roots = n_roots, .origin = origin, .err = err};
    size_t used = 0;
    for (int i = 0; i < n_roots && used < sizeof(c.roots_text); i++)
        used += (size_t)snprintf(c.roots_text + used, sizeof(c.roots_text) - used, "%s%s",
                                 i ? ", " : "", roots[i]);
    if (n_roots == 0) snprintf(c.roots_text, sizeof(c.roots_text), "none");
    zt_status st = check_glob(&c, "data.train", job->data.train);
    if (st == ZT_OK && job->data.val[0]) st = check_glob(&c, "data.val", job->data.val);
    if (st == ZT_OK && !job->model.init_random)
        st = check_path(&c, "model.init", job->model.init_path, job->model.init_path, NULL, NULL,
                        "move the model file inside them");
    if (st == ZT_OK)
        st = check_path(&c, "train.checkpoint_dir", job->train.checkpoint_dir,
                        job->train.checkpoint_dir, NULL, NULL,
                        "choose a checkpoint_dir inside them");
    if (st == ZT_OK && job->train.resume_from[0])
        st = check_path(&c, "train.resume_from", job->train.resume_from, job->train.resume_from,
                        NULL, NULL, "resume from a checkpoint inside them");
    if (st == ZT_OK && job->ds.csv_monitor.enabled)
        st = check_path(&c, "deepspeed.csv_monitor.output_path", job->ds.csv_monitor.output_path,
                        job->ds.csv_monitor.output_path, NULL, NULL,
                        "choose an output_path inside them");
    if (st == ZT_OK && job->ds.zero.offload_optimizer.nvme)
        st = check_path(&c, "deepspeed.zero_optimization.offload_optimizer.nvme_path",
                        job->ds.zero.offload_optimizer.nvme_path,
                        job->ds.zero.offload_optimizer.nvme_path, NULL, NULL,
                        "choose an nvme_path inside them");
    if (st == ZT_OK && job->ds.zero.offload_param.nvme)
        st = check_path(&c, "deepspeed.zero_optimization.offload_param.nvme_path",
                        job->ds.zero.offload_param.nvme_path,
                        job->ds.zero.offload_param.nvme_path, NULL, NULL,
                        "choose an nvme_path inside them");
    if (st == ZT_OK && resume_path && resume_path[0])
        st = check_path(&c, "the checkpoint to resume from", resume_path, resume_path, NULL, NULL,
                        "resume from a checkpoint inside them");
    return st;
}

/* ---- who workers run as --------------------------------------------------------------------- */

zt_status zt_confine_check_user(uid_t euid, const char *run_as, uid_t run_as_uid, bool allow_root,
                                bool *drop, zt_err *err)
{
    bool given = run_as && run_as[0];
    *drop = false;
    if (euid == 0) {
        if (!given) {
            if (allow_root) return ZT_OK;
            return zt_err_set(
                err, ZT_ERR_CONFIG,
                "zagent runs as root: give --run-as USER so workers do not run as root (or --allow-root to run them as root on purpose)");
        }
        if (run_as_uid == 0 && !allow_root)
            return zt_err_set(
                err, ZT_ERR_CONFIG,
                "--run-as %s is root: give an unprivileged user (or --allow-root to run workers as root on purpose)",
                run_as);
        *drop = run_as_uid != 0;
        return ZT_OK;
    }
    if (given && run_as_uid != euid)
        return zt_err_set(
            err, ZT_ERR_CONFIG,
            "--run-as %s: zagent runs as uid %u, and only root can start workers as another user; start zagent as %s, or as root with --run-as",
            run_as, (unsigned)euid, run_as);
    return ZT_OK;
}
