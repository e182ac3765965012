// A mutex: one holder at a time; also the writers of a read/write lock (readers are kShared on
// the same key) and every member of a multi-lock.
#include "lock/kinds/kind_policy.h"

namespace sidelock::lock {

const KindPolicy& mutexPolicy() {
  static constexpr KindPolicy kPolicy{
      .kind = LockKind::kMutex,
      .lease_sharers = kMutexLeaseSharers,
      .new_grant_ends_earlier_lease = true,
      // A writer queued behind readers keeps new readers out.
      .marks_writer_waiting = true,
      .allows_reentry = true,
      .hands_off = true,
  };
  return kPolicy;
}

}  // namespace sidelock::lock
