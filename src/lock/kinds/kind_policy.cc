#include "lock/kinds/kind_policy.h"

#include <array>

namespace sidelock::lock {

const KindPolicy& policyOf(LockKind kind) {
  switch (kind) {
    case LockKind::kMutex:
      return mutexPolicy();
    case LockKind::kFair:
      return fairPolicy();
    case LockKind::kShared:
      return sharedPolicy();
    case LockKind::kSemaphore:
      return semaphorePolicy();
    case LockKind::kElection:
      return electionPolicy();
  }
  return mutexPolicy();  // not reached: the switch names every kind (-Wswitch)
}

std::span<const LockKind> kindsInWakeOrder() {
  static constexpr std::array<LockKind, backend::kLockKindCount> kOrder = {
      LockKind::kMutex, LockKind::kFair, LockKind::kSemaphore, LockKind::kShared,
      LockKind::kElection};
  return kOrder;
}

}  // namespace sidelock::lock
