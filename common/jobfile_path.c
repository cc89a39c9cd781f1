/* zerotrain: the paths of a job file and the files it names. Relative paths resolve against
 * the job file's directory; the result is absolute and lexically cleaned like Python's
 * os.path.abspath: "//" and "." dropped, "x/.." removed. Files are read whole and parsed with
 * messages that say where the JSON went wrong. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "jobfile_int.h"

#define JOB_MAX_BYTES (16u << 20) /* a job file larger than this is surely a mistake */

static bool clean_path(const char *in, char *out, size_t cap)
{
    size_t used = 0;
    const char *p = in;
    if (cap < 2) return false;
    out[0] = '\0';
    while (*p) {
        while (*p == '/')
            p++;
        const char *e = p;
        while (*e && *e != '/')
            e++;
        size_t k = (size_t)(e - p);
        if (k == 2 && p[0] == '.' && p[1] == '.') {
            while (used > 0 && out[used - 1] != '/')
                used--;
            if (used > 0) used--; /* the slash; ".." of the root is the root */
            out[used] = '\0';
        } else if (k > 0 && !(k == 1 && p[0] == '.')) {
            if (used + 1 + k + 1 > cap) return false;
            out[used++] = '/';
            memcpy(out + used, p, k);
            used += k;
            out[used] = '\0';
        }
        p = e;
    }
    if (used == 0) {
        out[0] = '/';
        out[1] = '\0';
    }
    return true;
}

/* Joins base (absolute) and p unless p is absolute. False when the result does not fit. */
bool jf_absolute_path(const char *base, const char *p, char *out, size_t cap)
{
    if (p[0] == '/') return clean_path(p, out, cap);
    char tmp[2 * ZT_PATH_MAX + 2];
    int n = snprintf(tmp, sizeof(tmp), "%s/%s", base, p);
    if (n < 0 || (size_t)n >= sizeof(tmp)) return false;
    return clean_path(tmp, out, cap);
}

zt_status jf_cwd_path(char *out, size_t cap, zt_err *err)
{
    if (!getcwd(out, cap)) {
        char why[128];
        strerror_r(errno, why, sizeof(why));
        return zt_err_set(
            err, ZT_ERR_IO,
            "job file: cannot read the current directory: %s; run from a directory that exists or pass an absolute base directory",
            why);
    }
    return ZT_OK;
}

/* Reads member `key` as a path and stores it resolved against base_dir. */
zt_status jf_get_path(pctx *c, json_t *obj, const char *key, const char *base_dir, char *out,
                      bool *present)
{
    char raw[ZT_PATH_MAX];
    bool given;
    zt_status st = jf_get_str(c, obj, key, raw, sizeof(raw), &given);
    if (present) *present = given;
    if (st != ZT_OK || !given) return st;
    if (!jf_absolute_path(base_dir, raw, out, ZT_PATH_MAX))
        return jf_fail_key(
            c, key,
            "path is too long once resolved against %s (at most %d bytes); use a shorter path",
            base_dir, ZT_PATH_MAX - 1);
    return ZT_OK;
}

/* Reads a whole file into a NUL-terminated buffer (caller frees with zt_free). `what` names
 * the file in messages ("job file", "DeepSpeed config"). */
zt_status jf_read_text(const char *path, const char *shown, const char *what, char **out,
                       size_t *out_len, zt_err *err)
{
    char why[128];
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        strerror_r(e, why, sizeof(why));
        return zt_err_set(err, e == ENOENT ? ZT_ERR_NOT_FOUND : ZT_ERR_IO,
                          "%s: cannot open %s: %s; check the path", shown, what, why);
    }
    zt_status st = ZT_OK;
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        st = zt_err_set(err, ZT_ERR_IO,
                        "%s: is a directory, not a %s; give the path of a JSON file", shown, what);
        goto close_file;
    }
    size_t cap = 4096, len = 0;
    char *buf = zt_malloc(cap);
    if (!buf) {
        st = zt_err_set(err, ZT_ERR_NOMEM, "%s: out of memory reading the %s", shown, what);
        goto close_file;
    }
    for (;;) {
        if (len + 1 >= cap) {
            if (cap >= JOB_MAX_BYTES) {
                st = zt_err_set(
                    err, ZT_ERR_CONFIG,
                    "%s: the %s is larger than %u MiB; a job file is a small JSON object", shown,
                    what, JOB_MAX_BYTES >> 20);
                goto free_buf;
            }
            char *nb = zt_realloc(buf, cap * 2);
            if (!nb) {
                st = zt_err_set(err, ZT_ERR_NOMEM, "%s: out of memory reading the %s", shown, what);
                goto free_buf;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - 1 - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) {
                strerror_r(errno, why, sizeof(why));
                st = zt_err_set(err, ZT_ERR_IO, "%s: cannot read %s: %s", shown, what, why);
                goto free_buf;
            }
            break;
        }
    }
    buf[len] = '\0';
    *out = buf;
    *out_len = len;
    goto close_file;
free_buf:
    zt_free(buf);
close_file:
    fclose(f);
    return st;
}

/* jansson's parse of text, with messages "origin:line:col: text". Empty text, a duplicate
 * key (named with its path and both positions) and a root that is not an object get their
 * own messages. */
zt_status jf_load_json(const char *text, size_t len, const char *origin, const char *what,
                       json_t **out, zt_err *err)
{
    *out = NULL;
    size_t k = 0;
    while (k < len && isspace((unsigned char)text[k]))
        k++;
    if (k == len)
        return zt_err_set(err, ZT_ERR_CONFIG,
                          "%s: the %s is empty; it must hold one JSON object {...}", origin, what);
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        char path[JF_PATH_TEXT];
        zt_json_loc first, second;
        if (json_error_code(&je) == json_error_duplicate_key &&
            zt_json_find_duplicate(text, len, path, sizeof(path), &first, &second))
            return zt_err_set(
                err, ZT_ERR_CONFIG,
                "%s:%d:%d: %s: duplicate key (first at line %d, column %d); keep only one", origin,
                second.line, second.col, path, first.line, first.col);
        /* jansson says column 0 at the start of a line (e.g. at end of file); columns are
         * 1-based everywhere else. */
        zt_err_set(err, ZT_ERR_CONFIG, "%s:%d:%d: %s", origin, je.line,
                   je.column > 0 ? je.column : 1, je.text);
        if (err) jf_one_line(err->msg);
        return ZT_ERR_CONFIG;
    }
    if (!json_is_object(root)) {
        zt_json_loc loc = zt_json_offset_loc(text, len, k);
        json_decref(root);
        return zt_err_set(err, ZT_ERR_CONFIG,
                          "%s:%d:%d: the %s must be a JSON object {...}, not an array", origin,
                          loc.line, loc.col, what);
    }
    *out = root;
    return ZT_OK;
}

zt_status jf_set_base_dir(zt_job *job, const char *base_dir, zt_err *err)
{
    char cwd[ZT_PATH_MAX] = "/";
    if (!base_dir || base_dir[0] != '/') {
        zt_status st = jf_cwd_path(cwd, sizeof(cwd), err);
        if (st != ZT_OK) return st;
    }
    bool ok = base_dir ? jf_absolute_path(cwd, base_dir, job->base_dir, sizeof(job->base_dir))
                       : clean_path(cwd, job->base_dir, sizeof(job->base_dir));
    if (!ok)
        return zt_err_set(err, ZT_ERR_INVALID,
                          "job file: base directory %s is longer than %d bytes; use a shorter path",
                          base_dir ? base_dir : cwd, ZT_PATH_MAX - 1);
    return ZT_OK;
}
