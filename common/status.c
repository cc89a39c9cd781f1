/* zerotrain: status codes and error records (see status.h). */
#include "status.h"

#include <stdio.h>
#include <string.h>

const char *zt_strerror(zt_status st)
{
    switch (st) {
#define ZT_STATUS_STR(name, msg)                                                                   \
    case ZT_##name:                                                                                \
        return msg;
        ZT_STATUS_MAP(ZT_STATUS_STR)
#undef ZT_STATUS_STR
    default:
        return "unknown status";
    }
}

const char *zt_status_name(zt_status st)
{
    switch (st) {
#define ZT_STATUS_NAME(name, msg)                                                                  \
    case ZT_##name:                                                                                \
        return #name;
        ZT_STATUS_MAP(ZT_STATUS_NAME)
#undef ZT_STATUS_NAME
    default:
        return "UNKNOWN";
    }
}

zt_status zt_err_vset(zt_err *err, zt_status st, const char *fmt, va_list ap)
{
    if (err) {
        err->status = st;
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    }
    return st;
}

zt_status zt_err_set(zt_err *err, zt_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    zt_err_vset(err, st, fmt, ap);
    va_end(ap);
    return st;
}

zt_status zt_err_prefix(zt_err *err, const char *fmt, ...)
{
    if (!err)
        return ZT_ERR_INTERNAL;
    char old[ZT_ERRMSG_MAX];
    memcpy(old, err->msg, sizeof(old));
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    size_t used = (size_t)n < sizeof(err->msg) ? (size_t)n : sizeof(err->msg) - 1;
    const char *rest = old[0] ? old : zt_strerror(err->status);
    size_t room = sizeof(err->msg) - used;
    if (room > 3) {
        memcpy(err->msg + used, ": ", 2);
        size_t len = strlen(rest);
        if (len > room - 3)
            len = room - 3;
        memcpy(err->msg + used + 2, rest, len);
        err->msg[used + 2 + len] = '\0';
    }
    return err->status;
}

void zt_err_clear(zt_err *err)
{
    if (err) {
        err->status = ZT_OK;
        err->msg[0] = '\0';
    }
}

const char *zt_err_msg(const zt_err *err)
{
    if (!err)
        return "";
    return err->msg[0] ? err->msg : zt_strerror(err->status);
}
