/* zerotrain: user tokens, the agent join token and agent keys (see auth.h). */
#define _GNU_SOURCE
#include "coordinator/auth.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <openssl/sha.h>

#include "common/alloc.h"
#include "coordinator/validate.h"

/* An agent key is kept as the SHA-256 of its credential, never the credential itself (the
 * database holds the same digest). */
typedef struct agent_key {
    char *name;
    unsigned char sha[SHA256_DIGEST_LENGTH];
} agent_key;

struct zt_auth {
    zt_auth_user *users; /* copied */
    int n_users;
    char *agent_token;
    pthread_rwlock_t mu; /* keys and their index */
    agent_key *keys;
    size_t n_keys, cap_keys;
    /* open addressing on the digest's first 8 bytes: key index + 1, 0 = empty; capacity a
     * power of two, at least twice the keys (a heartbeat finds its agent in O(1)) */
    uint32_t *index;
    size_t index_cap;
};

static uint64_t digest_key(const unsigned char *sha)
{
    uint64_t k;
    memcpy(&k, sha, sizeof(k));
    return k;
}

/* Rebuilds the index after a change; under the write lock. False when out of memory. */
static bool index_rebuild(zt_auth *a)
{
    size_t cap = 16;
    while (cap < 2 * a->n_keys)
        cap *= 2;
    uint32_t *ix = zt_calloc(cap, sizeof(*ix));
    if (!ix) return false;
    for (size_t i = 0; i < a->n_keys; i++) {
        size_t h = (size_t)digest_key(a->keys[i].sha) & (cap - 1);
        while (ix[h])
            h = (h + 1) & (cap - 1);
        ix[h] = (uint32_t)(i + 1);
    }
    zt_free(a->index);
    a->index = ix;
    a->index_cap = cap;
    return true;
}

static void digest(const char *p, size_t n, unsigned char *out)
{
    SHA256((const unsigned char *)p, n, out);
}

static void to_hex(const unsigned char *b, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static bool from_hex(const char *s, unsigned char *out, size_t n)
{
    if (strlen(s) != 2 * n) return false;
    for (size_t i = 0; i < 2 * n; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return false;
        if (i % 2 == 0)
            out[i / 2] = (unsigned char)(v << 4);
        else
            out[i / 2] |= (unsigned char)v;
    }
    return true;
}

/* a (alen bytes) equals the string b, in time that depends on the lengths only */
static bool eq(const char *a, size_t alen, const char *b)
{
    size_t blen = strlen(b), n = alen > blen ? alen : blen;
    volatile unsigned diff = (unsigned)(alen ^ blen);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned)((unsigned char)(i < alen ? a[i] : 0) ^
                           (unsigned char)(i < blen ? b[i] : 0));
    return diff == 0;
}

/* an agent's kind of name (validate.h), at most 64 bytes: it goes into sign-in cookies */
static bool valid_user_name(const char *s)
{
    return zt_valid_name(s) && strlen(s) <= 64;
}

zt_status zt_auth_create(zt_auth **out, const zt_auth_user *users, int n_users,
                         const char *agent_token, zt_err *err)
{
    *out = NULL;
    for (int i = 0; i < n_users; i++) {
        if (!valid_user_name(users[i].name))
            return zt_err_set(err, ZT_ERR_CONFIG,
                              "user name '%s' is not valid: use 1-64 letters, digits, '.', '_' or '-'",
                              users[i].name);
        for (int k = 0; k < i; k++) {
            if (strcmp(users[k].name, users[i].name) == 0)
                return zt_err_set(err, ZT_ERR_CONFIG,
                                  "user %s is given twice: give each user one token", users[i].name);
            if (strcmp(users[k].token, users[i].token) == 0)
                return zt_err_set(err, ZT_ERR_CONFIG,
                                  "users %s and %s have the same token: events could not tell them apart; give each its own",
                                  users[k].name, users[i].name);
        }
        if (agent_token && strcmp(agent_token, users[i].token) == 0)
            return zt_err_set(err, ZT_ERR_CONFIG,
                              "the agent join token equals user %s's token: a user could act as an agent; give agents their own token (--agent-token-file)",
                              users[i].name);
    }
    zt_auth *a = zt_calloc(1, sizeof(*a));
    if (!a) return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
    pthread_rwlock_init(&a->mu, NULL);
    a->users = zt_calloc(n_users > 0 ? (size_t)n_users : 1, sizeof(*a->users));
    if (!a->users) goto nomem;
    for (int i = 0; i < n_users; i++) {
        a->users[i].name = zt_strdup(users[i].name);
        a->users[i].token = zt_strdup(users[i].token);
        a->n_users = i + 1;
        if (!a->users[i].name || !a->users[i].token) goto nomem;
    }
    if (agent_token && agent_token[0] && !(a->agent_token = zt_strdup(agent_token))) goto nomem;
    *out = a;
    return ZT_OK;
nomem:
    zt_auth_destroy(a);
    return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
}

void zt_auth_destroy(zt_auth *a)
{
    if (!a) return;
    for (int i = 0; i < a->n_users; i++) {
        zt_free((char *)a->users[i].name);
        zt_free((char *)a->users[i].token);
    }
    zt_free(a->users);
    zt_free(a->agent_token);
    for (size_t i = 0; i < a->n_keys; i++)
        zt_free(a->keys[i].name);
    zt_free(a->keys);
    zt_free(a->index);
    pthread_rwlock_destroy(&a->mu);
    zt_free(a);
}

bool zt_auth_required(const zt_auth *a)
{
    return a && (a->n_users > 0 || a->agent_token);
}

bool zt_auth_user_of(const zt_auth *a, const char *bearer, size_t len, char *who, size_t cap)
{
    if (a->n_users == 0) {
        snprintf(who, cap, "local");
        return true;
    }
    if (!bearer) return false;
    /* every token is compared, so the time says nothing about which one matched */
    int found = -1;
    for (int i = 0; i < a->n_users; i++)
        if (eq(bearer, len, a->users[i].token)) found = i;
    if (found < 0) return false;
    snprintf(who, cap, "user:%s", a->users[found].name);
    return true;
}

/* The agent whose key the bearer is, copied into who as "agent:NAME". Digests are
 * compared, so the time taken says nothing about the credentials. */
static bool key_owner(zt_auth *a, const char *bearer, size_t len, char *who, size_t cap)
{
    if (!bearer || len != ZT_AUTH_KEY_LEN) return false;
    unsigned char sha[SHA256_DIGEST_LENGTH];
    digest(bearer, len, sha);
    bool ok = false;
    pthread_rwlock_rdlock(&a->mu);
    if (a->index && a->index_cap >= 2 * a->n_keys) {
        for (size_t h = (size_t)digest_key(sha) & (a->index_cap - 1); a->index[h] && !ok;
             h = (h + 1) & (a->index_cap - 1)) {
            const agent_key *s = &a->keys[a->index[h] - 1];
            if (memcmp(s->sha, sha, sizeof(sha)) == 0) {
                snprintf(who, cap, "agent:%s", s->name);
                ok = true;
            }
        }
    } else {
        for (size_t i = 0; i < a->n_keys && !ok; i++)
            if (memcmp(a->keys[i].sha, sha, sizeof(sha)) == 0) {
                snprintf(who, cap, "agent:%s", a->keys[i].name);
                ok = true;
            }
    }
    pthread_rwlock_unlock(&a->mu);
    return ok;
}

zt_rpc_code zt_auth_authorize(void *user, zt_rpc_access access, const char *bearer,
                              size_t bearer_len, const char *cert_name, char *who, size_t who_cap,
                              char *msg, size_t msg_cap)
{
    zt_auth *a = user;
    char tmp[96];
    /* a client certificate the coordinator's client roots signed names an agent (mutual TLS):
     * it stands for the join token and the key, for that agent's name only */
    bool cert_agent = cert_name && zt_valid_name(cert_name);
    switch (access) {
    case ZT_RPC_ACCESS_OPEN:
        snprintf(who, who_cap, "anyone");
        return ZT_RPC_OK;
    case ZT_RPC_ACCESS_USER:
        if (zt_auth_user_of(a, bearer, bearer_len, who, who_cap)) return ZT_RPC_OK;
        if (key_owner(a, bearer, bearer_len, tmp, sizeof(tmp)) ||
            (bearer && a->agent_token && eq(bearer, bearer_len, a->agent_token))) {
            snprintf(msg, msg_cap,
                     "permission denied: an agent credential cannot make user calls; use a user token (--token-file or ZT_TOKEN)");
            return ZT_RPC_PERMISSION_DENIED;
        }
        snprintf(msg, msg_cap, "%s",
                 bearer ? "invalid token: the coordinator did not accept the bearer token sent; check --token-file or ZT_TOKEN"
                        : "missing token: this coordinator requires 'authorization: Bearer <token>'; pass --token-file or set ZT_TOKEN");
        return ZT_RPC_UNAUTHENTICATED;
    case ZT_RPC_ACCESS_AGENT_JOIN:
        if (cert_agent) {
            snprintf(who, who_cap, "agent-cert:%s", cert_name);
            return ZT_RPC_OK;
        }
        if (a->agent_token ? bearer && eq(bearer, bearer_len, a->agent_token)
                           : a->n_users == 0) {
            snprintf(who, who_cap, "agent-join");
            return ZT_RPC_OK;
        }
        if (bearer && a->n_users > 0 && zt_auth_user_of(a, bearer, bearer_len, tmp, sizeof(tmp))) {
            snprintf(msg, msg_cap,
                     "permission denied: a user token cannot register an agent; give zagent the agent join token (--token-file on the agent side, the file zcoord reads with --agent-token-file)");
            return ZT_RPC_PERMISSION_DENIED;
        }
        if (!a->agent_token) {
            snprintf(msg, msg_cap,
                     "this coordinator takes no agents: it has user tokens but no agent join token; start zcoord with --agent-token-file");
            return ZT_RPC_PERMISSION_DENIED;
        }
        snprintf(msg, msg_cap, "%s",
                 bearer ? "invalid agent join token: the coordinator did not accept it; give zagent the file zcoord reads with --agent-token-file"
                        : "missing agent join token: this coordinator requires one; pass zagent --token-file with the agent join token");
        return ZT_RPC_UNAUTHENTICATED;
    case ZT_RPC_ACCESS_AGENT:
        if (key_owner(a, bearer, bearer_len, who, who_cap)) return ZT_RPC_OK;
        if (cert_agent) {
            snprintf(who, who_cap, "agent:%s", cert_name);
            return ZT_RPC_OK;
        }
        if (bearer && a->n_users > 0 && zt_auth_user_of(a, bearer, bearer_len, tmp, sizeof(tmp))) {
            snprintf(msg, msg_cap,
                     "permission denied: a user credential cannot make agent calls");
            return ZT_RPC_PERMISSION_DENIED;
        }
        if (!bearer)
            snprintf(msg, msg_cap,
                     "missing agent key: every agent call but RegisterAgent carries the agent key RegisterAgent returned; register first");
        else if (a->agent_token && eq(bearer, bearer_len, a->agent_token))
            snprintf(msg, msg_cap,
                     "the agent join token is for RegisterAgent only: later agent calls carry the agent key it returns");
        else /* the agent registers again and gets a new key */
            snprintf(msg, msg_cap,
                     "unknown agent key: this coordinator did not issue it (or the agent registered again since); call RegisterAgent");
        return ZT_RPC_UNAUTHENTICATED;
    }
    snprintf(msg, msg_cap, "unknown access class");
    return ZT_RPC_PERMISSION_DENIED;
}

/* Sets name's key digest (adding the entry); under the write lock. */
static zt_status key_set(zt_auth *a, const char *name, const unsigned char *sha, zt_err *err)
{
    pthread_rwlock_wrlock(&a->mu);
    agent_key *s = NULL;
    for (size_t i = 0; i < a->n_keys && !s; i++)
        if (strcmp(a->keys[i].name, name) == 0) s = &a->keys[i];
    if (!s) {
        if (a->n_keys == a->cap_keys) {
            size_t cap = a->cap_keys ? a->cap_keys * 2 : 16;
            agent_key *v = zt_realloc(a->keys, cap * sizeof(*v));
            if (!v) {
                pthread_rwlock_unlock(&a->mu);
                return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
            }
            a->keys = v;
            a->cap_keys = cap;
        }
        s = &a->keys[a->n_keys];
        if (!(s->name = zt_strdup(name))) {
            pthread_rwlock_unlock(&a->mu);
            return zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
        }
        a->n_keys++;
    }
    memcpy(s->sha, sha, SHA256_DIGEST_LENGTH);
    if (!index_rebuild(a)) { /* lookups scan until the next change */
        zt_free(a->index);
        a->index = NULL;
        a->index_cap = 0;
    }
    pthread_rwlock_unlock(&a->mu);
    return ZT_OK;
}

zt_status zt_auth_key_issue(zt_auth *a, const char *name, char *token, char *sha_hex,
                                zt_err *err)
{
    unsigned char raw[ZT_AUTH_KEY_LEN / 2];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return zt_err_set(err, ZT_ERR_IO, "cannot draw an agent key: getrandom: %s",
                              strerror(errno));
        got += (size_t)n;
    }
    to_hex(raw, sizeof(raw), token);
    unsigned char sha[SHA256_DIGEST_LENGTH];
    digest(token, ZT_AUTH_KEY_LEN, sha);
    to_hex(sha, sizeof(sha), sha_hex);
    return key_set(a, name, sha, err);
}

zt_status zt_auth_key_restore(zt_auth *a, const char *name, const char *sha_hex, zt_err *err)
{
    unsigned char sha[SHA256_DIGEST_LENGTH];
    if (!sha_hex || !sha_hex[0]) return ZT_OK;
    if (!from_hex(sha_hex, sha, sizeof(sha)))
        return zt_err_set(err, ZT_ERR_CORRUPT,
                          "agent %s: the stored key digest is not 64 hex digits", name);
    return key_set(a, name, sha, err);
}

bool zt_auth_key_exists(zt_auth *a, const char *name)
{
    bool ok = false;
    pthread_rwlock_rdlock(&a->mu);
    for (size_t i = 0; i < a->n_keys && !ok; i++)
        ok = strcmp(a->keys[i].name, name) == 0;
    pthread_rwlock_unlock(&a->mu);
    return ok;
}

bool zt_auth_key_is(zt_auth *a, const char *name, const char *token)
{
    unsigned char sha[SHA256_DIGEST_LENGTH];
    digest(token, strlen(token), sha);
    bool ok = false;
    pthread_rwlock_rdlock(&a->mu);
    for (size_t i = 0; i < a->n_keys; i++)
        if (strcmp(a->keys[i].name, name) == 0)
            ok = memcmp(a->keys[i].sha, sha, sizeof(sha)) == 0;
    pthread_rwlock_unlock(&a->mu);
    return ok;
}

const char *zt_auth_agent_name(const char *who)
{
    return who && strncmp(who, "agent:", 6) == 0 ? who + 6 : NULL;
}

zt_status zt_auth_users_file_read(const char *path, const char *what, zt_auth_user **users,
                                  int *n, zt_err *err)
{
    *users = NULL;
    *n = 0;
    FILE *f = fopen(path, "re");
    if (!f) return zt_err_set(err, ZT_ERR_IO, "%s %s: %s", what, path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return zt_err_set(err, ZT_ERR_CONFIG, "%s %s is not a regular file", what, path);
    }
    if (sb.st_mode & 077) {
        fclose(f);
        return zt_err_set(err, ZT_ERR_CONFIG,
                          "%s %s may be read by other users (mode %03o); run chmod 600 %s", what,
                          path, (unsigned)(sb.st_mode & 0777), path);
    }
    zt_status st = ZT_OK;
    char line[4400];
    int lineno = 0, cap = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
            st = zt_err_set(err, ZT_ERR_CONFIG, "%s %s:%d: the line is too long (tokens are at most 4096 bytes)",
                            what, path, lineno);
            break;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p || *p == '#') continue;
        char *name = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
        if (*p) *p++ = '\0';
        while (*p == ' ' || *p == '\t')
            p++;
        char *tok = p;
        size_t tl = strlen(tok);
        bool printable = tl > 0;
        for (size_t i = 0; i < tl; i++)
            printable = printable && tok[i] >= 0x21 && tok[i] <= 0x7e;
        if (!valid_user_name(name) || !printable || tl < 16 || tl > 4096) {
            st = zt_err_set(err, ZT_ERR_CONFIG,
                            "%s %s:%d: expected 'NAME TOKEN' (a name of 1-64 letters, digits, '.', '_' or '-'; a token of 16-4096 printable characters, no spaces)",
                            what, path, lineno);
            break;
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            zt_auth_user *v = zt_realloc(*users, (size_t)cap * sizeof(*v));
            if (!v) {
                st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
                break;
            }
            *users = v;
        }
        (*users)[*n].name = zt_strdup(name);
        (*users)[*n].token = zt_strdup(tok);
        (*n)++;
        if (!(*users)[*n - 1].name || !(*users)[*n - 1].token) {
            st = zt_err_set(err, ZT_ERR_NOMEM, "out of memory");
            break;
        }
    }
    fclose(f);
    if (st == ZT_OK && *n == 0)
        st = zt_err_set(err, ZT_ERR_CONFIG, "%s %s names no user: add 'NAME TOKEN' lines", what,
                        path);
    if (st != ZT_OK) {
        zt_auth_users_free(*users, *n);
        *users = NULL;
        *n = 0;
    }
    memset(line, 0, sizeof(line));
    return st;
}

void zt_auth_users_free(zt_auth_user *users, int n)
{
    if (!users) return;
    for (int i = 0; i < n; i++) {
        zt_free((char *)users[i].name);
        zt_free((char *)users[i].token);
    }
    zt_free(users);
}
