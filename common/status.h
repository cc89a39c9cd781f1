/* zerotrain: the one status type every module returns, and a small error record that
 * carries the human message (what, where, what to do) next to the code.
 * Codes of CUDA, NCCL, SQLite, gRPC and libuv are translated into these at the boundary. */
#ifndef ZT_COMMON_STATUS_H
#define ZT_COMMON_STATUS_H

#include <stdarg.h>
#include <stddef.h>

#define ZT_STATUS_MAP(X)                                                                           \
    X(OK, "ok")                                                                                    \
    X(ERR_NOMEM, "out of memory")                                                                  \
    X(ERR_INVALID, "invalid argument")                                                             \
    X(ERR_CONFIG, "invalid configuration")                                                         \
    X(ERR_UNSUPPORTED, "not supported")                                                            \
    X(ERR_NOT_FOUND, "not found")                                                                  \
    X(ERR_EXISTS, "already exists")                                                                \
    X(ERR_IO, "input/output error")                                                                \
    X(ERR_NOSPACE, "no space left on device")                                                      \
    X(ERR_FORMAT, "bad file format")                                                               \
    X(ERR_CORRUPT, "data corrupted")                                                               \
    X(ERR_TIMEOUT, "timed out")                                                                    \
    X(ERR_PEER, "peer failed")                                                                     \
    X(ERR_CANCELED, "canceled")                                                                    \
    X(ERR_STATE, "wrong state")                                                                    \
    X(ERR_AUTH, "not authorized")                                                                  \
    X(ERR_DB, "database error")                                                                    \
    X(ERR_RPC, "rpc error")                                                                        \
    X(ERR_CUDA, "cuda error")                                                                      \
    X(ERR_NCCL, "nccl error")                                                                      \
    X(ERR_NO_DEVICE, "no gpu device")                                                              \
    X(ERR_NONFINITE, "non-finite value")                                                           \
    X(ERR_INTERNAL, "internal error")

typedef enum {
#define ZT_STATUS_ENUM(name, msg) ZT_##name,
    ZT_STATUS_MAP(ZT_STATUS_ENUM)
#undef ZT_STATUS_ENUM
        ZT_STATUS_COUNT
} zt_status;

/* Short fixed text for a status; never NULL. Thread-safe. */
const char *zt_strerror(zt_status st);
/* The enum's name without the ZT_ prefix ("ERR_IO"); never NULL. */
const char *zt_status_name(zt_status st);

/* An error record: a status and the human message. Callers own it (usually on the stack)
 * and pass it down; the function that fails fills it. A NULL zt_err* is allowed everywhere
 * and means "the caller does not want the message". */
#define ZT_ERRMSG_MAX 4096
typedef struct zt_err {
    zt_status status;
    char msg[ZT_ERRMSG_MAX];
} zt_err;

/* Sets err (if non-NULL) to st with a printf-style message and returns st, so that
 * `return zt_err_set(err, ZT_ERR_IO, "cannot open %s: %s", path, strerror(errno));`
 * reads naturally. */
zt_status zt_err_set(zt_err *err, zt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
zt_status zt_err_vset(zt_err *err, zt_status st, const char *fmt, va_list ap);
/* Prepends "prefix: " to an existing message (context while unwinding). Returns err->status. */
zt_status zt_err_prefix(zt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Clears the record to ZT_OK with an empty message. */
void zt_err_clear(zt_err *err);
/* The message if one was set, else zt_strerror(status). */
const char *zt_err_msg(const zt_err *err);

#endif
