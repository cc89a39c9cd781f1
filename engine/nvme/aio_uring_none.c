/* zerotrain: the io_uring backend where the build has no liburing: it never opens, so
 * engine/nvme/aio.c uses its threads. */
#define _POSIX_C_SOURCE 200809L
#include "aio_int.h"

static zt_status none_open(zt_aio *a, zt_err *err)
{
    (void)a;
    return zt_err_set(err, ZT_ERR_UNSUPPORTED,
                      "this build has no io_uring support (install liburing-dev and rebuild)");
}

static void none_close(zt_aio *a)
{
    (void)a;
}

const zt_aio_backend_ops zt_aio_uring_ops = {
    .name = "io_uring",
    .open = none_open,
    .close = none_close,
};
