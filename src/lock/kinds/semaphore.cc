// A counting semaphore: up to `limit` holders at once, each a permit (its own owner id and TTL)
// under keys of the semaphore's own.
#include <array>

#include "lock/kinds/kind_policy.h"

namespace sidelock::lock {
namespace {

constexpr std::array<LockKind, 1> kOwnKeysOnly = {LockKind::kSemaphore};

}  // namespace

const KindPolicy& semaphorePolicy() {
  static constexpr KindPolicy kPolicy{
      .kind = LockKind::kSemaphore,
      .lease_sharers = kOwnKeysOnly,
      .admits_many = true,
      .owner_field = "permit",
  };
  return kPolicy;
}

}  // namespace sidelock::lock
