/* zerotrain tests: zt_gpu_probe — tells the GPU test scripts whether this build can run on a
 * GPU here: exit 0 (prints "gpu ok"), 77 when the build has no CUDA backend or no GPU is usable
 * (prints why), 1 when creating the CUDA context fails for another reason. */
#include <stdio.h>

#include "kernels/ops.h"

int main(void)
{
    const zt_ops *g = zt_ops_cuda();
    if (!g) {
        printf("no GPU: this build has no CUDA backend\n");
        return 77;
    }
    zt_kctx *k = NULL;
    zt_err err;
    zt_err_clear(&err);
    zt_status st = g->ctx_create(&k, 0, &err);
    if (st == ZT_ERR_NO_DEVICE) {
        printf("no GPU: %s\n", zt_err_msg(&err));
        return 77;
    }
    if (st != ZT_OK) {
        printf("creating the CUDA context failed: %s\n", zt_err_msg(&err));
        return 1;
    }
    g->ctx_destroy(k);
    printf("gpu ok\n");
    return 0;
}
