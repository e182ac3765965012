// The checkers on hand-made logs: each must find the violation it exists for, and excuse only
// what it documents (a grant expired on arrival, a data-losing fault, a stopped sidecar).
#include <gtest/gtest.h>

#include "chaos/history.h"
#include "support/hold_check.h"

namespace sidelock::testing::chaos {
namespace {

Operation grant(int client, const std::string& lock, uint64_t token, int64_t invoke_ms,
                int64_t complete_ms, int64_t validity_ms) {
  return Operation{.client = client,
                   .kind = OpKind::kAcquire,
                   .lock = lock,
                   .token = token,
                   .validity_ms = validity_ms,
                   .invoke_us = invoke_ms * 1000,
                   .complete_us = complete_ms * 1000,
                   .status = 200};
}

Operation release(int client, const std::string& lock, uint64_t token, int64_t invoke_ms) {
  return Operation{.client = client,
                   .kind = OpKind::kRelease,
                   .lock = lock,
                   .token = token,
                   .invoke_us = invoke_ms * 1000,
                   .complete_us = invoke_ms * 1000 + 500,
                   .status = 200};
}

TEST(ChaosCheckers, OverlappingGrantsOfOneLockViolateMutualExclusion) {
  History history;
  history.add(grant(1, "a", 1, 0, 10, 800));
  history.add(release(1, "a", 1, 500));
  history.add(grant(2, "a", 2, 400, 450, 800));  // granted while client 1 still held it
  history.add(grant(3, "b", 1, 400, 450, 800));  // another lock: no conflict
  EXPECT_EQ(checkMutualExclusion(history).size(), 1u);
}

TEST(ChaosCheckers, AWindowEndsAtValidityCountedFromTheInvocation) {
  History history;
  // Answered 300 ms late: valid until 0 + 800, not 300 + 800; the next grant at 850 is fine.
  history.add(grant(1, "a", 1, 0, 300, 800));
  history.add(grant(2, "a", 2, 840, 850, 800));
  EXPECT_TRUE(checkMutualExclusion(history).empty());
  // A grant answered after its validity ended is discarded, even with a lower token.
  history.add(grant(3, "a", 1, 0, 900, 800));
  EXPECT_TRUE(checkMutualExclusion(history).empty());
  EXPECT_TRUE(checkTokenOrder(history).empty());
}

TEST(ChaosCheckers, DataLossExcusesOverlapsButNotTokensGoingBack) {
  History history;
  history.add(grant(1, "a", 7, 0, 10, 800));
  history.addFault({"Redis restarted empty", -1, 400'000, 420'000, /*loses_data=*/true});
  history.add(grant(2, "a", 1, 450, 460, 800));  // Redis forgot the lease and the counter
  EXPECT_TRUE(checkMutualExclusion(history).empty());
  EXPECT_EQ(checkTokenOrder(history).size(), 1u) << "token 1 granted after token 7";

  History without_loss;
  without_loss.add(grant(1, "a", 7, 0, 10, 800));
  without_loss.addFault({"Redis stopped", -1, 400'000, 420'000, /*loses_data=*/false});
  without_loss.add(grant(2, "a", 8, 450, 460, 800));
  EXPECT_EQ(checkMutualExclusion(without_loss).size(), 1u);
}

TEST(ChaosCheckers, LateRequestsViolateLivenessUnlessTheirSidecarWasStopped) {
  History history;
  Operation slow = grant(1, "a", 1, 0, 6000, 800);
  slow.deadline_ms = 3000;
  history.add(slow);
  EXPECT_EQ(checkLiveness(history, 2000).size(), 1u);
  EXPECT_TRUE(checkLiveness(history, 4000).empty());

  History stopped;
  stopped.addFault({"SIGSTOP of sidecar 0", 0, 1'000'000, 4'000'000, false});
  Operation on_stopped = grant(1, "a", 1, 500, 6000, 800);
  on_stopped.process = 0;
  Operation on_other = on_stopped;
  on_other.process = 1;
  stopped.add(on_stopped);
  stopped.add(on_other);
  EXPECT_EQ(checkLiveness(stopped, 2000).size(), 1u) << "only the other sidecar's request is late";
}

// The shared observer (tests/support/hold_check.h) the semaphore, read/write, fair, multi-lock
// and chaos tests judge their logs with.
Hold hold(const std::string& lock, int64_t from, int64_t to, HoldMode mode = HoldMode::kExclusive) {
  return Hold{lock, from, to, mode, lock + "@" + std::to_string(from), 0};
}

TEST(HoldCheck, ExclusiveHoldsOfOneLockMustNotOverlap) {
  auto report = checkExclusion({hold("a", 0, 10), hold("a", 10, 20), hold("b", 5, 15)});
  EXPECT_TRUE(report.violations.empty()) << "back to back, or another lock, is no overlap";
  EXPECT_EQ(report.most_at_once, 1);
  report = checkExclusion({hold("a", 0, 10), hold("a", 9, 20)});
  ASSERT_EQ(report.violations.size(), 1u);
  EXPECT_EQ(report.violations[0], "lock a held by a@0 and a@9");
}

TEST(HoldCheck, SharedHoldsShareUpToTheLimitAndNeverBesideAnExclusiveOne) {
  const auto shared = HoldMode::kShared;
  auto report = checkExclusion({hold("r", 0, 10, shared), hold("r", 2, 12, shared),
                                hold("r", 4, 14, shared)});
  EXPECT_TRUE(report.violations.empty()) << "readers: no limit";
  EXPECT_EQ(report.most_at_once, 3);
  EXPECT_EQ(report.shared_overlaps, 3);
  report = checkExclusion(
      {hold("s", 0, 10, shared), hold("s", 2, 12, shared), hold("s", 4, 14, shared)},
      {.shared_limit = 2, .excused = nullptr});
  ASSERT_EQ(report.violations.size(), 1u) << "a semaphore of 2 with 3 permits out";
  EXPECT_NE(report.violations[0].find("3 shared holders at once, over the limit of 2"),
            std::string::npos);
  report = checkExclusion({hold("r", 0, 10, shared), hold("r", 5, 10), hold("r", 9, 12, shared)});
  EXPECT_EQ(report.violations.size(), 2u) << "a writer beside a reader, and a reader beside it";
}

TEST(HoldCheck, AnExcusedConflictIsPassedOverAndAnEmptyHoldOverlapsNothing) {
  ExclusionRules rules;
  rules.excused = [](const Hold& x, const Hold& y) { return x.from_us == 0 && y.from_us == 5; };
  auto report = checkExclusion({hold("a", 0, 10), hold("a", 5, 6), hold("a", 7, 7)}, rules);
  EXPECT_TRUE(report.violations.empty());
}

}  // namespace
}  // namespace sidelock::testing::chaos
