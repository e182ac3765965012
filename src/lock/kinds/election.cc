// A leader election: one leader at a time (a mutex under keys of the election's own), whose
// lease also records the candidate, the value it proclaims and since when (backend.h,
// LockKind::kElection). Candidates wait in line for as long as their campaign stream is open.
#include <array>

#include "lock/kinds/kind_policy.h"

namespace sidelock::lock {
namespace {

constexpr std::array<LockKind, 1> kOwnKeysOnly = {LockKind::kElection};

}  // namespace

const KindPolicy& electionPolicy() {
  static constexpr KindPolicy kPolicy{
      .kind = LockKind::kElection,
      .lease_sharers = kOwnKeysOnly,
      // A second grant to this sidecar means its earlier term lapsed unnoticed, as for a mutex.
      .new_grant_ends_earlier_lease = true,
      // A campaign waits in line until elected or until its client leaves: no max_wait_ms.
      .waits_until_cancelled = true,
      // A resign announces itself and the next candidate asks at once; a hand-off would have to
      // record the next candidate's name and value in the release (not done: one round trip
      // more on a resign, which is rare).
      .hands_off = false,
      .grant_readable_back = false,
  };
  return kPolicy;
}

}  // namespace sidelock::lock
