/* zerotrain: the job a checkpoint directory belongs to — owner.json read, written and checked,
 * so that one job cannot resume from, prune or overwrite another's checkpoints (see
 * ckpt_owner.h). Engine-free. */
#define _XOPEN_SOURCE 700 /* realpath, and POSIX 2008 */
#include "ckpt_owner.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../common/log.h"
#include "../common/settings.h"
#include "../common/timeutil.h"
#include "ckpt_int.h"
#include "data/dataloader.h"

#define OWNER_NAME "owner.json"
#define OWNER_FORMAT "zerotrain-checkpoint-owner"
#define OWNER_VERSION 1

zt_status zt_ckpt_owner_from_env(zt_ckpt_owner *me, const char *job_name, zt_err *err)
{
    memset(me, 0, sizeof(*me));
    zt_ckpt_pathf(me->job_name, sizeof(me->job_name), "%s", job_name ? job_name : "");
    const char *id = zt_setting_raw(ZT_SET_JOB_ID);
    if (id && *id) {
        char *end;
        errno = 0;
        long long v = strtoll(id, &end, 10);
        if (errno || *end || v < 0 || !isdigit((unsigned char)id[0]))
            return zt_err_set(err, ZT_ERR_CONFIG,
                              "ZT_JOB_ID=\"%s\" is not a job id (a non-negative integer); unset it for a run without a coordinator",
                              id);
        me->has_job_id = true;
        me->job_id = v;
    }
    const char *key = zt_setting_env(ZT_SET_SUBMIT_KEY);
    if (key && zt_ckpt_pathf(me->submit_key, sizeof(me->submit_key), "%s", key) >=
                   (int)sizeof(me->submit_key))
        return zt_err_set(err, ZT_ERR_CONFIG, "ZT_SUBMIT_KEY is longer than %zu bytes",
                          sizeof(me->submit_key) - 1);
    return ZT_OK;
}

bool zt_ckpt_owner_same(const zt_ckpt_owner *a, const zt_ckpt_owner *b)
{
    return a->has_job_id == b->has_job_id && (!a->has_job_id || a->job_id == b->job_id);
}

zt_status zt_ckpt_owner_read(const char *dir, zt_ckpt_owner *out, bool *found, zt_err *err)
{
    memset(out, 0, sizeof(*out));
    *found = false;
    char path[ZT_PATH_MAX + 16];
    zt_ckpt_pathf(path, sizeof(path), "%s/%s", dir, OWNER_NAME);
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return ZT_OK;
        return zt_err_set(err, ZT_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    }
    *found = true;
    const char *why = NULL;
    char buf[160];
    json_error_t je;
    json_t *root = S_ISREG(sb.st_mode) ? json_load_file(path, JSON_REJECT_DUPLICATES, &je) : NULL;
    json_t *id = NULL, *name = NULL, *key = NULL, *created = NULL;
    if (!S_ISREG(sb.st_mode)) {
        why = "it is not a regular file";
    } else if (!root) {
        zt_ckpt_pathf(buf, sizeof(buf), "line %d: %s", je.line, je.text);
        why = buf;
    } else if (!json_is_object(root) ||
               !json_is_string(json_object_get(root, "format")) ||
               strcmp(json_string_value(json_object_get(root, "format")), OWNER_FORMAT) != 0) {
        why = "its \"format\" is not \"" OWNER_FORMAT "\"";
    } else if (json_integer_value(json_object_get(root, "version")) != OWNER_VERSION) {
        why = "its \"version\" is not 1";
    } else {
        id = json_object_get(root, "job_id");
        name = json_object_get(root, "job_name");
        key = json_object_get(root, "submit_key");
        created = json_object_get(root, "created");
        if (!(json_is_null(id) || (json_is_integer(id) && json_integer_value(id) >= 0)) ||
            !json_is_string(name) || !json_is_string(key) || !json_is_string(created))
            why = "\"job_id\", \"job_name\", \"submit_key\" or \"created\" is missing or of the wrong type";
    }
    if (why) {
        json_decref(root);
        return zt_err_set(err, ZT_ERR_CONFIG,
                          "%s is not a checkpoint owner record (%s); remove it, or set ZT_CKPT_TAKEOVER=1 to replace it",
                          path, why);
    }
    out->has_job_id = json_is_integer(id);
    out->job_id = out->has_job_id ? json_integer_value(id) : 0;
    zt_ckpt_pathf(out->job_name, sizeof(out->job_name), "%s", json_string_value(name));
    zt_ckpt_pathf(out->submit_key, sizeof(out->submit_key), "%s", json_string_value(key));
    zt_ckpt_pathf(out->created, sizeof(out->created), "%s", json_string_value(created));
    json_decref(root);
    return ZT_OK;
}

/* "job 12 'tiny'" or "a local run (zctl run) of 'tiny'" */
static void owner_describe(const zt_ckpt_owner *o, char *buf, size_t n)
{
    if (o->has_job_id)
        zt_ckpt_pathf(buf, n, "job %lld '%s'", (long long)o->job_id, o->job_name);
    else
        zt_ckpt_pathf(buf, n, "a local run (zctl run) of '%s'", o->job_name);
}

/* The refusal of a directory that belongs to another job. */
static zt_status owner_refuse(const char *dir, const zt_ckpt_owner *owner, zt_err *err)
{
    char who[ZT_NAME_MAX + 64];
    owner_describe(owner, who, sizeof(who));
    return zt_err_set(err, ZT_ERR_CONFIG,
                      "checkpoint_dir %s belongs to %s (created %s); give this job its own train.checkpoint_dir, or set train.resume_from to take it over (ZT_CKPT_TAKEOVER=1 takes it over without resuming from it)",
                      dir, who, owner->created);
}

zt_status zt_ckpt_owner_check(const char *dir, const zt_ckpt_owner *me, bool takeover,
                              zt_err *err)
{
    zt_ckpt_owner cur;
    bool found;
    zt_err rerr;
    zt_err_clear(&rerr);
    zt_status st = zt_ckpt_owner_read(dir, &cur, &found, &rerr);
    if (st != ZT_OK)
        return takeover && st == ZT_ERR_CONFIG ? ZT_OK : zt_err_set(err, st, "%s", rerr.msg);
    if (!found || takeover || zt_ckpt_owner_same(&cur, me))
        return ZT_OK;
    return owner_refuse(dir, &cur, err);
}

/* Writes me as dir's owner (a new record, created now), durably. */
static zt_status owner_write(const char *dir, const zt_ckpt_owner *me, zt_err *err)
{
    char created[32];
    time_t now = (time_t)(zt_wall_ms() / 1000);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string(OWNER_FORMAT));
    json_object_set_new(root, "version", json_integer(OWNER_VERSION));
    json_object_set_new(root, "job_id", me->has_job_id ? json_integer(me->job_id) : json_null());
    json_object_set_new(root, "job_name", json_string(me->job_name));
    json_object_set_new(root, "submit_key", json_string(me->submit_key));
    json_object_set_new(root, "created", json_string(created));
    char *js = json_dumps(root, JSON_PRESERVE_ORDER);
    json_decref(root);
    char path[ZT_PATH_MAX + 16];
    zt_ckpt_pathf(path, sizeof(path), "%s/%s", dir, OWNER_NAME);
    if (!js)
        return zt_err_set(err, ZT_ERR_NOMEM, "out of memory writing %s", path);
    zt_outfile *f = NULL;
    zt_status st = zt_outfile_open(&f, path, err);
    if (st == ZT_OK && (st = zt_outfile_write(f, js, strlen(js), err)) == ZT_OK &&
        (st = zt_outfile_write(f, "\n", 1, err)) == ZT_OK)
        st = zt_outfile_commit(f, err);
    else
        zt_outfile_abort(f);
    free(js);
    return st;
}

zt_status zt_ckpt_owner_claim(const char *dir, const zt_ckpt_owner *me, bool takeover,
                              zt_err *err)
{
    zt_ckpt_owner cur;
    bool found;
    zt_err rerr;
    zt_err_clear(&rerr);
    zt_status st = zt_ckpt_owner_read(dir, &cur, &found, &rerr);
    if (st != ZT_OK && !(takeover && st == ZT_ERR_CONFIG))
        return zt_err_set(err, st, "%s", rerr.msg);
    bool readable = st == ZT_OK;
    if (found && readable && zt_ckpt_owner_same(&cur, me))
        return ZT_OK;
    if (found && readable && !takeover)
        return owner_refuse(dir, &cur, err);
    if ((st = owner_write(dir, me, err)) != ZT_OK)
        return st;
    char who[ZT_NAME_MAX + 64];
    if (found && readable) {
        owner_describe(&cur, who, sizeof(who));
        ZT_WARN("ckpt", "took over checkpoint_dir %s from %s (created %s)", dir, who,
                cur.created);
    } else if (found) {
        ZT_WARN("ckpt", "replaced %s/%s, which was not an owner record (ZT_CKPT_TAKEOVER=1)", dir,
                OWNER_NAME);
    }
    return ZT_OK;
}

bool zt_ckpt_path_inside(const char *path, const char *dir)
{
    char p[PATH_MAX], d[PATH_MAX];
    if (!realpath(path, p) || !realpath(dir, d))
        return false;
    size_t n = strlen(d);
    return strncmp(p, d, n) == 0 && (p[n] == '\0' || p[n] == '/' || (n == 1 && d[0] == '/'));
}
