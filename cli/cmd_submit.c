/* zerotrain: `zctl submit` (send a job file to the coordinator, optionally follow it) and
 * `zctl wait` (block until a job ends; the exit code tells how). */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/rpc_cli.h"
#include "common/alloc.h"
#include "common/dsconfig.h"
#include "common/jobfile.h"
#include "common/timeutil.h"
#include "common/utf8.h"
#include "proto/limits.h" /* ZT_MAX_USER, ZT_MAX_JOB_PATH */

ZT_COMMAND(submit, zt_cmd_submit, "submit a job file to the coordinator (--follow to watch it)")
ZT_COMMAND(wait, zt_cmd_wait, "wait until a job ends (the exit code says how it ended)")

static void submit_usage(FILE *f)
{
    fprintf(f, "usage: zctl submit JOB.json [--follow] [--priority N] [--retry DUR]\n\n"
               "Sends the job file (its text and its absolute directory, against which relative\n"
               "paths resolve) to the coordinator, which validates and stores it, and prints the\n"
               "job id.\n\n"
               "  --follow       show state changes and a progress bar until the job ends; the\n"
               "                 exit code is then the job's: 0 COMPLETED, 1 FAILED, 3 CANCELED\n"
               "  --priority N   higher runs first (-1000..1000, default 0)\n"
               "  --retry DUR    keep retrying for DUR while the coordinator is unreachable\n"
               "                 (safe: a retry never creates a second job)\n"
               "  -o json        print {\"job_id\": N, ...}\n");
}

static char *slurp(const char *path, size_t max, int *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *err = errno;
        return NULL;
    }
    char *buf = zt_malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
    fclose(f);
    if (!buf) {
        *err = ENOMEM;
        return NULL;
    }
    if (n > max) {
        zt_free(buf);
        *err = EFBIG;
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* A random idempotency key, so that a retried submission never makes a second job. */
static void make_key(char *out, size_t cap)
{
    unsigned char r[12] = {0};
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd >= 0) {
        if (read(fd, r, sizeof(r)) != (ssize_t)sizeof(r)) memset(r, 0, sizeof(r));
        close(fd);
    }
    uint64_t t = zt_now_ns() ^ ((uint64_t)getpid() << 32);
    size_t n = 0;
    for (size_t i = 0; i < sizeof(r) && n + 2 < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%02x", r[i]);
    snprintf(out + n, cap - n, "-%016llx", (unsigned long long)t);
}

/* The DeepSpeed config's summary (ignored keys, no effect here, "auto" filled), read the way
 * the coordinator read it; rank 0 logs it again when the job starts. */
static void print_ds_summary(const char *text, const char *origin, const char *dir)
{
    zt_job *job = zt_calloc(1, sizeof(*job));
    zt_err err = {0};
    if (job && zt_job_parse(job, text, origin, dir, &err) == ZT_OK && job->ds.notes[0]) {
        printf("  deepspeed config:\n");
        zt_ds_notes_print(stdout, job->ds.notes, "    ");
    }
    zt_free(job);
}

/* When the job's "deepspeed" is the path of a DeepSpeed JSON file (relative to dir, the job
 * file's directory), *out is the job text with that file's object in its place (zt_malloc'd);
 * otherwise *out is NULL. The job was validated before, so errors here are I/O races. */
static zt_status inline_deepspeed(const char *text, const char *dir, char **out, zt_err *err)
{
    *out = NULL;
    json_error_t je;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!root) return zt_err_set(err, ZT_ERR_CONFIG, "%d:%d: %s", je.line, je.column, je.text);
    zt_status st = ZT_OK;
    json_t *ds = json_object_get(root, "deepspeed");
    if (!json_is_string(ds)) goto free_root;
    const char *rel = json_string_value(ds);
    char file[PATH_MAX * 2];
    snprintf(file, sizeof(file), "%s%s%s", rel[0] == '/' ? "" : dir,
             rel[0] == '/' || !strcmp(dir, "/") ? "" : "/", rel);
    json_t *obj = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
    if (!obj || !json_is_object(obj)) {
        st = zt_err_set(err, ZT_ERR_CONFIG, "cannot read the DeepSpeed config %s: %s", file,
                        obj ? "not a JSON object" : je.text);
        json_decref(obj);
        goto free_root;
    }
    json_object_set_new(root, "deepspeed", obj);
    char *dumped = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!dumped) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        goto free_root;
    }
    *out = zt_strdup(dumped);
    free(dumped);
    if (!*out) st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
free_root:
    json_decref(root);
    return st;
}

int zt_cmd_submit(int argc, char **argv)
{
    if (zt_cli_wants_help(argc, argv)) {
        submit_usage(stdout);
        return 0;
    }
    const char *path = NULL;
    bool follow = false;
    long priority = 0;
    double retry_s = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--follow") == 0 || strcmp(argv[i], "-f") == 0) {
            follow = true;
        } else if (strcmp(argv[i], "--priority") == 0 && i + 1 < argc) {
            char *end;
            priority = strtol(argv[++i], &end, 10);
            if (*end || priority < -1000 || priority > 1000) {
                zt_cli_error("--priority takes a number in -1000..1000, not '%s'", argv[i]);
                return ZT_CLI_EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--retry") == 0 && i + 1 < argc) {
            if (!zt_cli_parse_duration(argv[++i], &retry_s)) {
                zt_cli_error("--retry takes a duration such as 30s or 2m, not '%s'", argv[i]);
                return ZT_CLI_EXIT_USAGE;
            }
        } else if (argv[i][0] == '-') {
            zt_cli_error("submit: unknown option '%s'; see 'zctl submit --help'", argv[i]);
            return ZT_CLI_EXIT_USAGE;
        } else if (!path) {
            path = argv[i];
        } else {
            zt_cli_error("submit takes one job file, got '%s' and '%s'", path, argv[i]);
            return ZT_CLI_EXIT_USAGE;
        }
    }
    if (!path) {
        submit_usage(stderr);
        return ZT_CLI_EXIT_USAGE;
    }
    int e = 0;
    char *text = slurp(path, 1 << 20, &e);
    if (!text) {
        zt_cli_error("cannot read the job file %s: %s", path,
                     e == EFBIG ? "larger than 1 MiB" : strerror(e));
        return 1;
    }
    /* zt_job_load below skips a UTF-8 byte order mark with a note; the coordinator must not
     * see it either */
    if (strncmp(text, "\xef\xbb\xbf", 3) == 0) memmove(text, text + 3, strlen(text + 3) + 1);
    char absolute[PATH_MAX];
    if (!realpath(path, absolute)) {
        zt_cli_error("cannot resolve the path of %s: %s", path, strerror(errno));
        zt_free(text);
        return 1;
    }
    char *slash = strrchr(absolute, '/');
    if (slash == absolute)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    /* the coordinator takes UTF-8 only: say so here, where the file can be named */
    size_t bad = 0;
    if (!zt_utf8_valid(text, strlen(text), &bad)) {
        size_t line, col;
        zt_utf8_position(text, bad, &line, &col);
        zt_cli_error(
            "%s:%zu:%zu: the job file is not valid UTF-8 (byte %zu); save it as UTF-8 (e.g. iconv -t UTF-8)",
            path, line, col, bad);
        zt_free(text);
        return 1;
    }
    if (!zt_utf8_valid(absolute, strlen(absolute), NULL)) {
        zt_cli_error(
            "the directory of %s is not a valid UTF-8 path (%s); the coordinator stores paths as UTF-8 text: move the job and its data to a directory with a UTF-8 name",
            path, absolute);
        zt_free(text);
        return 1;
    }
    /* every problem now, with the DeepSpeed file's own lines and columns */
    zt_job *job = zt_calloc(1, sizeof(*job));
    zt_err jerr = {0};
    if (!job || zt_job_load(job, path, &jerr) != ZT_OK) {
        zt_cli_error("%s", job ? zt_err_msg(&jerr) : "out of memory");
        zt_free(job);
        zt_free(text);
        return 1;
    }
    zt_free(job);
    /* the coordinator opens no file a job names: a DeepSpeed config given by path goes inline */
    char *inlined = NULL;
    if (inline_deepspeed(text, absolute, &inlined, &jerr) != ZT_OK) {
        zt_cli_error("%s: %s", path, zt_err_msg(&jerr));
        zt_free(text);
        return 1;
    }
    if (inlined) {
        zt_free(text);
        text = inlined;
    }
    char key[64];
    make_key(key, sizeof(key));
    /* informational: who submitted and the name as given, cleaned and cut to fit */
    char user[ZT_MAX_USER + 1], shown[ZT_MAX_JOB_PATH + 1];
    const char *u = getenv("USER") ? getenv("USER") : "";
    size_t un = zt_utf8_cut(u, strlen(u), ZT_MAX_USER);
    memcpy(user, u, un);
    user[un] = '\0';
    zt_utf8_clean(user, un);
    size_t pn = zt_utf8_cut(path, strlen(path), ZT_MAX_JOB_PATH);
    memcpy(shown, path, pn);
    shown[pn] = '\0';
    zt_utf8_clean(shown, pn);

    /* with --retry, calls wait for the coordinator to come (back) up */
    zt_rpc_client *c = zt_cli_connect_opts(retry_s > 0);
    if (!c) {
        zt_free(text);
        return 1;
    }
    Zt__V1__SubmitJobRequest q = ZT__V1__SUBMIT_JOB_REQUEST__INIT;
    q.job_text = text;
    q.job_dir = absolute;
    q.job_path = shown;
    q.submit_key = key;
    q.priority = (int32_t)priority;
    q.user = user;
    Zt__V1__SubmitJobReply *r = NULL;
    double t0 = zt_now_s();
    int rc = 1;
    for (int attempt = 0;; attempt++) {
        zt_rpc_code code = ZT_RPC_OK;
        zt_err err = {0};
        double left = retry_s - (zt_now_s() - t0);
        int timeout_ms = left > 15 ? 15000 : left > 1 ? (int)(left * 1000) : 1000;
        zt_status st = zt_rpc_unary(c, "/zt.v1.Coordinator/SubmitJob", &q.base,
                                    &zt__v1__submit_job_reply__descriptor, (void **)&r, timeout_ms,
                                    &code, &err);
        if (st == ZT_OK) break;
        bool transient = code == ZT_RPC_UNAVAILABLE || code == ZT_RPC_DEADLINE_EXCEEDED;
        if (!transient || zt_now_s() - t0 >= retry_s) {
            zt_cli_rpc_error("submit", st, code, &err);
            goto out;
        }
        if (attempt == 0)
            fprintf(stderr,
                    "zctl: the coordinator at %s is unavailable (%s); retrying for %.0f s\n",
                    zt_cli.coordinator, zt_err_msg(&err), retry_s);
        zt_sleep_ms(100);
    }
    if (zt_cli.json) {
        zt_cli_print_json(&r->base, false);
    } else if (r->existed) {
        printf("job %lld (%s) was already submitted with this request\n", (long long)r->job_id,
               r->name);
    } else {
        printf("submitted job %lld (%s)\n", (long long)r->job_id, r->name);
        print_ds_summary(text, shown, absolute);
        if (!follow)
            printf("  watch:   zctl wait %lld    (or zctl submit --follow next time)\n"
                   "  inspect: zctl job %lld     logs: zctl logs %lld -f\n"
                   "  cancel:  zctl cancel %lld\n",
                   (long long)r->job_id, (long long)r->job_id, (long long)r->job_id,
                   (long long)r->job_id);
    }
    fflush(stdout);
    rc = follow ? zt_cli_follow(c, r->job_id, true, false, 0) : 0;
out:
    zt_pb_free(r);
    zt_rpc_client_destroy(c);
    zt_free(text);
    return rc;
}

int zt_cmd_wait(int argc, char **argv)
{
    if (zt_cli_wants_help(argc, argv)) {
        printf("usage: zctl wait JOB_ID [--timeout DUR] [--progress]\n\n"
               "Waits until the job ends and prints its final state. Exit code: 0 COMPLETED,\n"
               "1 FAILED (or an error), 3 CANCELED, 124 when --timeout passed first.\n");
        return 0;
    }
    int64_t id = 0;
    double timeout = 0;
    bool progress = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
            if (!zt_cli_parse_duration(argv[++i], &timeout)) {
                zt_cli_error("--timeout takes a duration such as 30s or 2m, not '%s'", argv[i]);
                return ZT_CLI_EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--progress") == 0) {
            progress = true;
        } else if (argv[i][0] == '-') {
            zt_cli_error("wait: unknown option '%s'; see 'zctl wait --help'", argv[i]);
            return ZT_CLI_EXIT_USAGE;
        } else if (!id) {
            if (!(id = zt_cli_parse_job_id(argv[i]))) return ZT_CLI_EXIT_USAGE;
        } else {
            zt_cli_error("wait takes one job id");
            return ZT_CLI_EXIT_USAGE;
        }
    }
    if (!id) {
        zt_cli_error("usage: zctl wait JOB_ID [--timeout DUR]");
        return ZT_CLI_EXIT_USAGE;
    }
    zt_rpc_client *c = zt_cli_connect();
    if (!c) return 1;
    int rc = zt_cli_follow(c, id, progress, !progress, timeout);
    zt_rpc_client_destroy(c);
    return rc;
}
