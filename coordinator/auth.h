/* zerotrain: who may call zcoord. Users hold named user tokens; agents hold the join token,
 * with which RegisterAgent obtains a per-agent agent key that every later agent call
 * carries. A user credential cannot make agent calls and the other way round. Without any
 * token (loopback only) every user call is "local", and agents still need their key.
 * Agent keys are kept as SHA-256 digests, in memory and in the database, so that agents keep
 * theirs across a coordinator restart. */
#ifndef ZT_COORDINATOR_AUTH_H
#define ZT_COORDINATOR_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "common/status.h"
#include "proto/rpc.h"

typedef struct zt_auth zt_auth;

#define ZT_AUTH_KEY_LEN 64 /* hex characters of an agent key */

typedef struct zt_auth_user {
    const char *name;  /* [A-Za-z0-9._-], 1..64 */
    const char *token; /* at least 16 bytes */
} zt_auth_user;

/* users: n_users named user tokens (copied); agent_token: the join token, NULL = none (then
 * agents may join only when there are no user tokens either: a loopback-only coordinator).
 * Errors: ZT_ERR_CONFIG (a bad or repeated name, a token used twice, the join token equal to a
 * user token), ZT_ERR_NOMEM. */
zt_status zt_auth_create(zt_auth **out, const zt_auth_user *users, int n_users,
                         const char *agent_token, zt_err *err);
void zt_auth_destroy(zt_auth *a);

/* Reads a users file: one "NAME TOKEN" per line ('#' comments and blank lines skipped), the
 * file readable by its owner only, each token 16-4096 printable ASCII bytes, as
 * common/secretfile.h asks of a token file. *users (n entries, names and tokens allocated)
 * goes to zt_auth_create and then to zt_auth_users_free. what names the file in messages.
 * Errors: ZT_ERR_IO, ZT_ERR_CONFIG (permissions, a bad line: its number and what is wrong),
 * ZT_ERR_NOMEM. */
zt_status zt_auth_users_file_read(const char *path, const char *what, zt_auth_user **users,
                                  int *n, zt_err *err);
/* Frees the first n entries' strings and the array; NULL is a no-op. */
void zt_auth_users_free(zt_auth_user *users, int n);

/* True when calls need a credential (some token is configured). */
bool zt_auth_required(const zt_auth *a);

/* zt_rpc_authorize_fn for the RPC server (user = the zt_auth). Identities: "user:NAME",
 * "local" (no user tokens), "agent-join" (RegisterAgent with the join token), "agent-cert:NAME"
 * (RegisterAgent with a client certificate for NAME, mutual TLS), "agent:NAME" (a key, or
 * a client certificate for NAME). Thread-safe. */
zt_rpc_code zt_auth_authorize(void *user, zt_rpc_access access, const char *bearer,
                              size_t bearer_len, const char *cert_name, char *who, size_t who_cap,
                              char *msg, size_t msg_cap);

/* The user a bearer token belongs to ("user:NAME", or "local" when no user token is
 * configured and bearer is NULL); false when it is not a user credential. Thread-safe. */
bool zt_auth_user_of(const zt_auth *a, const char *bearer, size_t len, char *who, size_t cap);

/* Issues a new agent key for agent `name` (replacing its previous one) into
 * token[ZT_AUTH_KEY_LEN + 1], and its SHA-256 (what the database keeps) into
 * sha_hex[65]. Errors: ZT_ERR_IO (no randomness), ZT_ERR_NOMEM. Thread-safe. */
zt_status zt_auth_key_issue(zt_auth *a, const char *name, char *token, char *sha_hex,
                                zt_err *err);
/* Takes back a key digest kept in the database (a coordinator restart); "" is a no-op.
 * Errors: ZT_ERR_CORRUPT (not 64 hex digits), ZT_ERR_NOMEM. */
zt_status zt_auth_key_restore(zt_auth *a, const char *name, const char *sha_hex, zt_err *err);
/* Whether `name` holds a key, and whether token is it. Thread-safe. */
bool zt_auth_key_exists(zt_auth *a, const char *name);
bool zt_auth_key_is(zt_auth *a, const char *name, const char *token);

/* "n1" for "agent:n1"; NULL when who is not an agent identity. */
const char *zt_auth_agent_name(const char *who);

#endif
