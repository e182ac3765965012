// The readers of a read/write lock ("mode": "shared"): any number at once, each with a lease of
// its own, never together with a writer (the mutex of the same name).
#include "lock/kinds/kind_policy.h"

namespace sidelock::lock {

const KindPolicy& sharedPolicy() {
  static constexpr KindPolicy kPolicy{
      .kind = LockKind::kShared,
      .lease_sharers = kMutexLeaseSharers,
      .holders_share_one_lease = true,
      .admits_many = true,
      .single_try_skips_local_queue = true,
      .answer_tag = {.key = "mode", .text = "shared"},
      .grant_readable_back = false,
  };
  return kPolicy;
}

}  // namespace sidelock::lock
