// zerotrain: the one C++ file of zt_rpc. The gRPC C core locks abseil mutexes, and an abseil
// built without NDEBUG (Debian's, for one) checks each lock taken against a process-wide
// graph of lock orders: a global spin lock, graph updates and stack captures on the hot path,
// costlier the more mutexes are alive (every channel, connection and call holds some), so a
// coordinator with a thousand agent connections spends a good part of its CPU there, its
// threads queued on that spin lock; and a suspected inversion aborts the process. Release
// builds of abseil leave this off; so does zt_rpc, before gRPC starts.
#include <absl/synchronization/mutex.h>

extern "C" void zt_rpc_absl_untrack_locks(void);

extern "C" void zt_rpc_absl_untrack_locks(void)
{
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}
