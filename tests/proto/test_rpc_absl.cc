// zerotrain: once zt_rpc has set up the process, abseil does not track lock orders: two
// abseil mutexes taken in both orders do not abort (with tracking on, as in an abseil built
// without NDEBUG, the second order kills the process as a potential deadlock).
#include <absl/synchronization/mutex.h>

#include <cstdio>

extern "C" {
#include "proto/rpc.h"
}

int main()
{
    zt_rpc_cq *q = zt_rpc_cq_create(); // the first zt_rpc object of the process
    if (!q) {
        std::fprintf(stderr, "test_rpc_absl: zt_rpc_cq_create failed\n");
        return 1;
    }
    absl::Mutex a, b;
    a.Lock();
    b.Lock();
    b.Unlock();
    a.Unlock();
    b.Lock();
    a.Lock(); // the inverse order: fatal while abseil tracks lock orders
    a.Unlock();
    b.Unlock();
    zt_rpc_cq_destroy(q);
    std::printf("test_rpc_absl: both lock orders taken, no abort: lock-order tracking is off\n");
    return 0;
}
