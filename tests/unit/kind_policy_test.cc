// The lock kinds' policies (src/lock/kinds/): every kind has one, and they agree with each other
// where the service relies on it. The per-kind rows say what each kind does differently.
#include "lock/kinds/kind_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace sidelock::lock {
namespace {

std::set<LockKind> setOf(std::span<const LockKind> kinds) { return {kinds.begin(), kinds.end()}; }

TEST(KindPolicyTest, EveryKindHasItsOwnPolicy) {
  for (size_t i = 0; i < backend::kLockKindCount; ++i) {
    const auto kind = static_cast<LockKind>(i);
    EXPECT_EQ(policyOf(kind).kind, kind) << backend::lockKindName(kind);
  }
}

TEST(KindPolicyTest, AnnouncedReleasesWakeEveryKindOnce) {
  const std::span<const LockKind> order = kindsInWakeOrder();
  EXPECT_EQ(order.size(), backend::kLockKindCount);
  EXPECT_EQ(setOf(order).size(), backend::kLockKindCount);
  // Writers before readers (writer preference), as in lease_sharers.
  const auto at = [&](LockKind k) { return std::find(order.begin(), order.end(), k); };
  EXPECT_LT(at(LockKind::kMutex), at(LockKind::kShared));
}

TEST(KindPolicyTest, KindsSharingALeaseAgreeOnWhoSharesIt) {
  for (size_t i = 0; i < backend::kLockKindCount; ++i) {
    const KindPolicy& policy = policyOf(static_cast<LockKind>(i));
    const std::set<LockKind> sharers = setOf(policy.lease_sharers);
    EXPECT_TRUE(sharers.contains(policy.kind)) << backend::lockKindName(policy.kind);
    EXPECT_EQ(sharers.size(), policy.lease_sharers.size()) << "listed twice";
    for (LockKind other : sharers) {
      EXPECT_EQ(setOf(policyOf(other).lease_sharers), sharers)
          << backend::lockKindName(policy.kind) << " and " << backend::lockKindName(other);
    }
  }
}

TEST(KindPolicyTest, NoKindBothHandsOffAndQueuesInTheBackend) {
  // A hand-off grants the local head; a backend queue decides who is next across sidecars.
  for (size_t i = 0; i < backend::kLockKindCount; ++i) {
    const KindPolicy& policy = policyOf(static_cast<LockKind>(i));
    EXPECT_FALSE(policy.hands_off && policy.queue_in_backend) << backend::lockKindName(policy.kind);
  }
}

TEST(KindPolicyTest, EachKindSaysWhatItDoesDifferently) {
  const KindPolicy& mutex = policyOf(LockKind::kMutex);
  EXPECT_TRUE(mutex.hands_off);
  EXPECT_TRUE(mutex.allows_reentry);
  EXPECT_TRUE(mutex.marks_writer_waiting);
  EXPECT_TRUE(mutex.new_grant_ends_earlier_lease);
  EXPECT_FALSE(mutex.admits_many);
  EXPECT_EQ(mutex.owner_field, "owner");
  EXPECT_TRUE(mutex.answer_tag.key.empty());

  const KindPolicy& shared = policyOf(LockKind::kShared);
  EXPECT_TRUE(shared.admits_many);
  EXPECT_TRUE(shared.holders_share_one_lease);
  EXPECT_TRUE(shared.single_try_skips_local_queue);
  EXPECT_FALSE(shared.grant_readable_back);
  EXPECT_FALSE(shared.allows_reentry);
  EXPECT_EQ(shared.answer_tag.key, "mode");
  EXPECT_EQ(shared.answer_tag.text, "shared");

  const KindPolicy& fair = policyOf(LockKind::kFair);
  EXPECT_TRUE(fair.queue_in_backend);
  EXPECT_FALSE(fair.hands_off);
  EXPECT_FALSE(fair.allows_reentry);
  EXPECT_EQ(fair.answer_tag.key, "fair");
  EXPECT_TRUE(fair.answer_tag.text.empty());  // "fair": true

  const KindPolicy& semaphore = policyOf(LockKind::kSemaphore);
  EXPECT_TRUE(semaphore.admits_many);
  EXPECT_EQ(semaphore.owner_field, "permit");
  EXPECT_EQ(setOf(semaphore.lease_sharers), std::set<LockKind>{LockKind::kSemaphore});
  EXPECT_FALSE(semaphore.hands_off);
  EXPECT_FALSE(semaphore.single_try_skips_local_queue);

  // An election: a mutex of its own keys whose candidates wait while their stream is open; never
  // handed on, never re-entered, never queued in the backend.
  const KindPolicy& election = policyOf(LockKind::kElection);
  EXPECT_EQ(setOf(election.lease_sharers), std::set<LockKind>{LockKind::kElection});
  EXPECT_TRUE(election.waits_until_cancelled);
  EXPECT_TRUE(election.new_grant_ends_earlier_lease);
  EXPECT_FALSE(election.hands_off);
  EXPECT_FALSE(election.allows_reentry);
  EXPECT_FALSE(election.queue_in_backend);
  EXPECT_FALSE(election.marks_writer_waiting);
  EXPECT_FALSE(election.admits_many);
  EXPECT_FALSE(election.grant_readable_back);
  EXPECT_FALSE(mutex.waits_until_cancelled) << "only elections wait without a max_wait_ms";
}

}  // namespace
}  // namespace sidelock::lock
