// A fair lock: the mutex's lease (same key, same holder), granted in the order its waiters of
// every sidecar arrived, through a queue the backend keeps (scripts fair_*.lua).
#include "lock/kinds/kind_policy.h"

namespace sidelock::lock {

const KindPolicy& fairPolicy() {
  static constexpr KindPolicy kPolicy{
      .kind = LockKind::kFair,
      .lease_sharers = kMutexLeaseSharers,
      // The backend's queue decides who is next; a hand-off would grant the local head.
      .queue_in_backend = true,
      .answer_tag = {.key = "fair", .text = {}},
  };
  return kPolicy;
}

}  // namespace sidelock::lock
