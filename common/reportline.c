/* zerotrain: parser of zworker's report lines (see reportline.h). A line is space-separated
 * key=value pairs after "rank=R"; the second token says what it is. */
#define _POSIX_C_SOURCE 200809L
#include "common/reportline.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* zt.v1.WorkerPhase numbers (proto/zerotrain.proto). */
static const struct {
    const char *name;
    int phase;
} phases[] = {
    {"starting", 1},   {"rendezvous", 2},    {"loading", 3}, {"training", 4},
    {"evaluating", 5}, {"checkpointing", 6}, {"exited", 7},
};

int zt_reportline_phase(const char *name)
{
    for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++)
        if (strcmp(phases[i].name, name) == 0) return phases[i].phase;
    return 0;
}

static zt_status bad(zt_err *err, const char *line, const char *why)
{
    return zt_err_set(err, ZT_ERR_FORMAT, "report line \"%.80s\": %s", line, why);
}

static bool parse_i64(const char *s, size_t n, int64_t *out)
{
    char buf[32];
    if (n == 0 || n >= sizeof(buf)) return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

static bool parse_double(const char *s, size_t n, double *out)
{
    char buf[64];
    if (n == 0 || n >= sizeof(buf)) return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (*end || !isfinite(v)) return false;
    *out = v;
    return true;
}

static bool metric_key(const char *s, size_t n)
{
    if (n == 0 || n > ZT_REPORTLINE_KEY_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.'))
            return false;
    }
    return true;
}

/* The next space-separated token of *p: [*tok, *tok + *len); false at the end. */
static bool next_token(const char **p, const char **tok, size_t *len)
{
    const char *s = *p;
    while (*s == ' ')
        s++;
    if (!*s) return false;
    const char *e = s;
    while (*e && *e != ' ')
        e++;
    *tok = s;
    *len = (size_t)(e - s);
    *p = e;
    return true;
}

/* Splits "key=value"; false when there is no '='. */
static bool split_kv(const char *tok, size_t len, size_t *klen, const char **val, size_t *vlen)
{
    const char *eq = memchr(tok, '=', len);
    if (!eq) return false;
    *klen = (size_t)(eq - tok);
    *val = eq + 1;
    *vlen = len - *klen - 1;
    return true;
}

static bool key_is(const char *tok, size_t klen, const char *key)
{
    return strlen(key) == klen && memcmp(tok, key, klen) == 0;
}

static zt_status parse_step(const char *line, const char *p, zt_reportline *out, zt_err *err)
{
    const char *tok, *val;
    size_t len, klen, vlen;
    bool have_step = false;
    while (next_token(&p, &tok, &len)) {
        if (!split_kv(tok, len, &klen, &val, &vlen)) continue;
        if (key_is(tok, klen, "step")) {
            if (!parse_i64(val, vlen, &out->step) || out->step < 0)
                return bad(err, line, "step is not a non-negative integer");
            have_step = true;
            continue;
        }
        double v;
        if (!metric_key(tok, klen) || !parse_double(val, vlen, &v)) continue;
        if (key_is(tok, klen, "loss"))
            out->loss = v;
        else if (key_is(tok, klen, "tok_s"))
            out->tokens_per_s = v;
        else if (key_is(tok, klen, "coll_seq"))
            out->coll_seq = (int64_t)v;
        else if (key_is(tok, klen, "mem_peak"))
            out->mem_peak = (int64_t)v;
        else if (klen > 4 && memcmp(tok, "mem_", 4) == 0 && !key_is(tok, klen, "mem_model_states"))
            out->mem_bytes += (int64_t)v;
        if (out->n_values < ZT_REPORTLINE_MAX_VALUES) {
            zt_reportline_value *kv = &out->values[out->n_values++];
            memcpy(kv->key, tok, klen);
            kv->key[klen] = '\0';
            kv->value = v;
        }
    }
    if (!have_step) return bad(err, line, "no step=N");
    out->kind = ZT_REPORTLINE_STEP;
    return ZT_OK;
}

zt_status zt_reportline_parse_step(const char *line, zt_reportline *out, zt_err *err)
{
    memset(out, 0, sizeof(*out));
    return parse_step(line, line, out, err);
}

/* The value of key in p, up to the next " <word>=" (paths may hold spaces) or the end. */
static bool path_value(const char *p, const char *key, char *out, size_t cap)
{
    char pat[32];
    snprintf(pat, sizeof(pat), " %s=", key);
    const char *s = strstr(p, pat);
    if (!s) return false;
    s += strlen(pat);
    const char *e = s;
    for (;;) {
        const char *sp = strchr(e, ' ');
        if (!sp) {
            e = s + strlen(s);
            break;
        }
        const char *w = sp + 1;
        while ((*w >= 'a' && *w <= 'z') || *w == '_' || (*w >= '0' && *w <= '9'))
            w++;
        if (*w == '=' && w > sp + 1) {
            e = sp;
            break;
        }
        e = sp + 1;
    }
    size_t n = (size_t)(e - s);
    if (n == 0 || n >= cap) return false;
    memcpy(out, s, n);
    out[n] = '\0';
    return true;
}

static bool int_value(const char *p, const char *key, int64_t *out)
{
    char pat[32];
    snprintf(pat, sizeof(pat), " %s=", key);
    const char *s = strstr(p, pat);
    if (!s) return false;
    s += strlen(pat);
    size_t n = strcspn(s, " ");
    return parse_i64(s, n, out);
}

/* A word value ([A-Za-z0-9_], at most cap-1 bytes). */
static bool word_value(const char *p, const char *key, char *out, size_t cap)
{
    char pat[32];
    snprintf(pat, sizeof(pat), " %s=", key);
    const char *s = strstr(p, pat);
    if (!s) return false;
    s += strlen(pat);
    size_t n = strcspn(s, " ");
    if (n == 0 || n >= cap) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    memcpy(out, s, n);
    out[n] = '\0';
    return true;
}

zt_status zt_reportline_parse(const char *line, zt_reportline *out, zt_err *err)
{
    memset(out, 0, sizeof(*out));
    const char *p = line;
    const char *tok;
    size_t len;
    if (!next_token(&p, &tok, &len) || len < 6 || memcmp(tok, "rank=", 5) != 0)
        return bad(err, line, "does not start with rank=R");
    int64_t rank;
    if (!parse_i64(tok + 5, len - 5, &rank) || rank < 0 || rank > 1 << 24)
        return bad(err, line, "rank is not a non-negative integer");
    out->rank = (int)rank;
    const char *rest = p;
    if (!next_token(&p, &tok, &len)) return bad(err, line, "nothing after the rank");
    if (len > 6 && memcmp(tok, "phase=", 6) == 0) {
        char name[32];
        size_t n = len - 6 < sizeof(name) - 1 ? len - 6 : sizeof(name) - 1;
        memcpy(name, tok + 6, n);
        name[n] = '\0';
        out->phase = zt_reportline_phase(name);
        if (!out->phase) return bad(err, line, "unknown phase");
        out->kind = ZT_REPORTLINE_PHASE;
        return ZT_OK;
    }
    if (len > 5 && memcmp(tok, "step=", 5) == 0) return parse_step(line, rest, out, err);
    if (len == 4 && memcmp(tok, "ckpt", 4) == 0) {
        int64_t crc = 0;
        char hex[16];
        const char *c = strstr(p, " crc32c=");
        if (!int_value(p, "step", &out->step) || !int_value(p, "bytes", &out->bytes) ||
            !path_value(p, "file", out->path, sizeof(out->path)) || !c)
            return bad(err, line, "a ckpt line needs step=, file=, bytes= and crc32c=");
        size_t n = strcspn(c + 8, " ");
        if (n == 0 || n > 8) return bad(err, line, "crc32c is not 1-8 hex digits");
        memcpy(hex, c + 8, n);
        hex[n] = '\0';
        char *end;
        crc = strtoll(hex, &end, 16);
        if (*end) return bad(err, line, "crc32c is not 1-8 hex digits");
        if (out->step < 0 || out->bytes < 0 || out->path[0] != '/')
            return bad(err, line, "negative step or bytes, or a relative file");
        out->crc32c = (uint32_t)crc;
        out->kind = ZT_REPORTLINE_CKPT;
        return ZT_OK;
    }
    bool commit = len == 11 && memcmp(tok, "ckpt_commit", 11) == 0;
    if (commit || (len == 12 && memcmp(tok, "ckpt_removed", 12) == 0)) {
        if (!int_value(p, "step", &out->step) ||
            !path_value(p, "dir", out->path, sizeof(out->path)))
            return bad(err, line,
                       commit ? "a ckpt_commit line needs step= and dir="
                              : "a ckpt_removed line needs step= and dir=");
        if (!commit && (out->step < 0 || out->path[0] != '/'))
            return bad(err, line, "negative step, or a relative dir");
        out->kind = commit ? ZT_REPORTLINE_COMMIT : ZT_REPORTLINE_REMOVED;
        return ZT_OK;
    }
    if (len == 4 && memcmp(tok, "wait", 4) == 0) {
        zt_hang_wait *w = &out->wait;
        if (!word_value(p, "op", w->op, sizeof(w->op)) || !int_value(p, "seq", &w->seq) ||
            !int_value(p, "step", &w->step) ||
            !word_value(p, "part", w->part, sizeof(w->part)) ||
            !word_value(p, "prev_op", w->prev_op, sizeof(w->prev_op)) ||
            !int_value(p, "prev_seq", &w->prev_seq) || !int_value(p, "waited_ms", &w->waited_ms))
            return bad(err, line,
                       "a wait line needs op=, seq=, step=, part=, prev_op=, prev_seq= and waited_ms=");
        if (w->seq < 1 || w->prev_seq < 0 || w->step < 0 || w->waited_ms < 0)
            return bad(err, line, "seq, prev_seq, step or waited_ms out of range");
        w->waiting = true;
        out->kind = ZT_REPORTLINE_WAIT;
        return ZT_OK;
    }
    if (len == 8 && memcmp(tok, "wait_end", 8) == 0) {
        if (!int_value(p, "seq", &out->wait.seq) ||
            !int_value(p, "waited_ms", &out->wait.waited_ms) || out->wait.seq < 1)
            return bad(err, line, "a wait_end line needs seq= (>= 1) and waited_ms=");
        out->kind = ZT_REPORTLINE_WAIT_END;
        return ZT_OK;
    }
    if (len == 8 && memcmp(tok, "ckpt_bad", 8) == 0) {
        const char *why = strstr(p, " why=");
        if (!why || !int_value(p, "step", &out->step) || out->step < 0)
            return bad(err, line, "a ckpt_bad line needs step=, dir= and why=");
        /* dir= ends where why= begins: the reason is the rest of the line */
        char head[ZT_REPORTLINE_PATH_MAX + 64];
        size_t hn = (size_t)(why - p);
        if (hn >= sizeof(head)) return bad(err, line, "dir= is too long");
        memcpy(head, p, hn);
        head[hn] = '\0';
        if (!path_value(head, "dir", out->path, sizeof(out->path)) || out->path[0] != '/')
            return bad(err, line, "a ckpt_bad line needs an absolute dir=");
        snprintf(out->why, sizeof(out->why), "%s", why + 5);
        out->kind = ZT_REPORTLINE_CKPT_BAD;
        return ZT_OK;
    }
    return bad(err, line, "unknown kind of report");
}
