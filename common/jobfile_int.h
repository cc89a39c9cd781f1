/* zerotrain: what the job file's parse (jobfile*.c: the job's own sections, the typed getters,
 * key tables, paths) and the DeepSpeed config (dsconfig*.c) share and nothing else may see. A
 * parse collects every problem it meets (jf_report) instead of stopping at the first, and the
 * notes that make up the DeepSpeed start-up summary (ignored keys, keys with no effect, "auto"
 * values filled). */
#ifndef ZT_COMMON_JOBFILE_INT_H
#define ZT_COMMON_JOBFILE_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobfile.h"
#include "json_locate.h"

#define JF_CTX_DEPTH 8 /* deepest key path: deepspeed.optimizer.params.betas[1] */
#define JF_PATH_TEXT 256
#define JF_MAX_PROBLEMS 25 /* problems kept per parse; the rest are counted */
#define JF_MAX_AUTOS 48

typedef struct jf_problem {
    int origin;    /* 0 = the job file, 1 = a DeepSpeed file it names */
    int line, col; /* 0 when the path is not in the text */
    int seq;       /* order of discovery, for ties */
    zt_status code;
    char msg[ZT_ERRMSG_MAX];
} jf_problem;

/* An "auto" (or absent) value that the parse filled: its key path, where the value went and
 * where it came from. */
typedef enum { JF_V_INT, JF_V_I64, JF_V_NUM, JF_V_BOOL, JF_V_TEXT } jf_vtype;
typedef struct jf_auto {
    char path[JF_PATH_TEXT];
    jf_vtype type;
    const void *value; /* into the zt_job being parsed; JF_V_TEXT: a string literal */
    const char *from;  /* "DeepSpeed's default", "train.steps", ... */
} jf_auto;

typedef struct jf_report {
    jf_problem problems[JF_MAX_PROBLEMS];
    size_t nproblems, dropped;
    int seq;
    char ignored[1024];   /* "a, b (did you mean \"c\"?)" */
    char noeffect[4096];  /* one line per key */
    char info[1024];      /* one line per logging block */
    char suggested[1024]; /* paths offered as "did you mean", one per line: their "missing"
                             problems would repeat the typo's */
    jf_auto autos[JF_MAX_AUTOS];
    size_t nautos;
} jf_report;

/* Parse context: the text being read (for positions) and the key path of the current object. */
typedef struct pctx {
    const char *origin; /* the name shown in messages: a file path or "job 17" */
    int origin_index;
    const char *text;
    size_t len;
    zt_json_seg seg[JF_CTX_DEPTH];
    size_t depth;
    jf_report *rep;
    bool no_files; /* zt_job_parse_inline: a "deepspeed" file is not opened */
} pctx;

void jf_push(pctx *c, const char *key);
void jf_pop(pctx *c);
/* The current path plus key (NULL: the current object) as "a.b.c". */
void jf_path(const pctx *c, const char *key, char *out, size_t cap);

/* Record a problem at member key (or element index, or the current object) and return code
 * (ZT_ERR_CONFIG for the jf_fail_* forms). The parse goes on. */
zt_status jf_fail_key(pctx *c, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
zt_status jf_fail_index(pctx *c, long index, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
zt_status jf_fail_key_code(pctx *c, zt_status code, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
zt_status jf_fail_here(pctx *c, zt_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Record a message that already names its section, placed at member key when it is given. */
zt_status jf_fail_at(pctx *c, zt_status code, const char *key, const char *msg);
/* Keeps a message on one line: control characters from keys and values become '?'. */
void jf_one_line(char *msg);

/* Keeps the first problem's status in st and goes on, so that one parse reports them all. */
#define KEEP(expr)                                                                                 \
    do {                                                                                           \
        zt_status s_ = (expr);                                                                     \
        if (s_ != ZT_OK && st == ZT_OK) st = s_;                                                   \
    } while (0)

void jf_format_double(double d, char *out, size_t cap);
void jf_describe(const json_t *v, char *out, size_t cap);
void jf_append(char *out, size_t cap, size_t *used, const char *s);
bool jf_in_list_ci(const char *s, const char *const *list, size_t n);
const char *jf_closest(const char *key, const char *const *names, size_t n);

/* Typed getters (jobfile_get.c). Each leaves *out alone when the key is absent or "auto"
 * (DeepSpeed drops "auto" values; the getter records it as filled with *out's final value),
 * and otherwise checks type and bounds, recording a problem and leaving *out alone when they
 * are wrong. */
bool jf_is_auto(const json_t *v);
json_t *jf_member(json_t *obj, const char *key);
zt_status jf_get_int_max(pctx *c, json_t *obj, const char *key, int64_t lo, int64_t hi,
                         int64_t type_max, int64_t *out);
zt_status jf_get_i64(pctx *c, json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out);
zt_status jf_get_int(pctx *c, json_t *obj, const char *key, int lo, int hi, int *out);
enum {
    NUM_GE = 0,      /* x >= lo */
    NUM_GT = 1,      /* x > lo */
    NUM_RANGE = 2,   /* lo <= x <= hi */
    NUM_RANGE_HO = 3 /* lo <= x < hi */
};
zt_status jf_check_num(pctx *c, const char *key, long index, double x, double lo, double hi,
                       int rule, const char *got);
zt_status jf_get_num(pctx *c, json_t *obj, const char *key, double lo, double hi, int rule,
                     double *out);
zt_status jf_get_bool(pctx *c, json_t *obj, const char *key, bool *out);
zt_status jf_get_str(pctx *c, json_t *obj, const char *key, char *out, size_t cap, bool *present);
zt_status jf_get_obj(pctx *c, json_t *obj, const char *key, json_t **sub);
zt_status jf_require(pctx *c, json_t *obj, const char *key, const char *what);

/* "auto" bookkeeping: jf_auto_note records (or updates) the fill of member key of the current
 * object; the summary prints the value found at `value` once the parse is done. */
void jf_auto_note(pctx *c, const char *key, jf_vtype type, const void *value, const char *from);
bool jf_auto_given(const pctx *c, json_t *obj, const char *key);

/* Key tables (jobfile_keys.c). A key is used (parsed by its section), has no effect here
 * (accepted, checked for its type, named in the summary when not at DeepSpeed's default), is
 * refused unless it holds a value that means "off", or is an alias of another key. */
enum { KEY_USED = 0, KEY_NO_EFFECT = 1, KEY_REFUSED = 2, KEY_ALIAS = 3 };
enum { VT_ANY = 0, VT_BOOL, VT_INT, VT_NUM, VT_STR, VT_OBJ, VT_LIST, VT_STR_OR_NULL };
enum {
    ALLOW_FALSE = 1 << 0,
    ALLOW_TRUE = 1 << 1,
    ALLOW_NULL = 1 << 2,
    ALLOW_NUM = 1 << 3,      /* the number in keyspec.num */
    ALLOW_DISABLED = 1 << 4, /* an object whose "enabled" is false or absent (off by default) */
};

typedef struct keyspec {
    const char *name;
    int kind;
    int type;
    int allow;
    double num;
    const char *dflt; /* DeepSpeed's default as JSON text; NULL when it has none */
    const char *doc;  /* used: what zerotrain does with it; no effect: why; refused: what to
                         use instead; alias: the key it stands for */
} keyspec;

#define SUP(name)                                                                                  \
    {                                                                                              \
        name, KEY_USED, VT_ANY, 0, 0, NULL, NULL                                                   \
    }
#define NKEYS(t) (sizeof(t) / sizeof((t)[0]))

/* How check_keys treats a key that is not in the table (JF_QUIET: strict, and keys with no
 * effect are not named one by one: the block's own note says it all). */
enum { JF_STRICT = 0, JF_LENIENT = 1, JF_QUIET = 2 };
typedef const char *(*unknown_hint_fn)(const char *key, const void *arg);
zt_status jf_check_keys(pctx *c, json_t *obj, const keyspec *ks, size_t n, int mode,
                        unknown_hint_fn hint_fn, const void *hint_arg);
/* Which of a key and its aliases (ks entries of kind KEY_ALIAS whose doc is key) obj holds;
 * records a problem when more than one is given. Returns key when none is. */
const char *jf_pick_alias(pctx *c, json_t *obj, const keyspec *ks, size_t n, const char *key);

/* Paths resolved against the job file's directory (jobfile_path.c). */
bool jf_absolute_path(const char *base, const char *p, char *out, size_t cap);
/* The current directory, or ZT_ERR_IO saying why it cannot be read. */
zt_status jf_cwd_path(char *out, size_t cap, zt_err *err);
/* job->base_dir = base_dir made absolute against the current directory (NULL: the current
 * directory itself). ZT_ERR_INVALID when it does not fit. */
zt_status jf_set_base_dir(zt_job *job, const char *base_dir, zt_err *err);
zt_status jf_get_path(pctx *c, json_t *obj, const char *key, const char *base_dir, char *out,
                      bool *present);
zt_status jf_read_text(const char *path, const char *shown, const char *what, char **out,
                       size_t *out_len, zt_err *err);
zt_status jf_load_json(const char *text, size_t len, const char *origin, const char *what,
                       json_t **out, zt_err *err);

/* dsconfig_read.c: the "deepspeed" member of a job (an object or a file's path). */
zt_status zt_ds_parse(pctx *c, json_t *root, zt_job *job);
/* dsconfig_read.c: writes the summary of rep into job->ds.notes. */
void zt_ds_notes_build(const jf_report *rep, zt_job *job);
/* dsconfig.c: a DeepSpeed key written at the job's top level: the advice, or NULL. */
const char *zt_ds_top_key_hint(const char *key);

#endif
