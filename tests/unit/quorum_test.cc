// Redlock arithmetic: majority, drift, validity, fail-fast decisions, tokens, delayed restarts.
#include "redis/quorum.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>

namespace sidelock::backend::quorum {
namespace {

TEST(QuorumTest, MajorityIsHalfPlusOne) {
  EXPECT_EQ(majority(1), 1);
  EXPECT_EQ(majority(2), 2);
  EXPECT_EQ(majority(3), 2);
  EXPECT_EQ(majority(4), 3);
  EXPECT_EQ(majority(5), 3);
  EXPECT_EQ(majority(7), 4);
}

TEST(QuorumTest, DriftIsFactorOfTtlPlusTwoMs) {
  EXPECT_EQ(driftMs(10'000, 0.01), 102);
  EXPECT_EQ(driftMs(1'000, 0.01), 12);
  EXPECT_EQ(driftMs(0, 0.01), 2);
  EXPECT_EQ(driftMs(150, 0.01), 4);  // 1.5 rounds up: never under-estimate drift
  EXPECT_EQ(driftMs(1'000, 0.0), 2);
}

TEST(QuorumTest, ValidityIsTtlMinusElapsedMinusDrift) {
  EXPECT_EQ(validityMs(10'000, 5, 0.01), 10'000 - 5 - 102);
  EXPECT_EQ(validityMs(10, 7, 0.01), 10 - 7 - 3);  // exactly zero: nothing usable left
  EXPECT_LT(validityMs(100, 200, 0.01), 0);
}

TEST(QuorumTest, GrantedNeedsMajorityAndPositiveValidity) {
  EXPECT_TRUE(granted(5, 3, 1));
  EXPECT_TRUE(granted(5, 5, 9'000));
  EXPECT_FALSE(granted(5, 2, 9'000));
  EXPECT_FALSE(granted(5, 3, 0));
  EXPECT_FALSE(granted(5, 5, -1));
  EXPECT_TRUE(granted(1, 1, 1));
  EXPECT_FALSE(granted(0, 0, 1));
}

TEST(QuorumTest, DecideFailsFastBothWays) {
  EXPECT_EQ(decide(5, 0, 0), Outcome::kUndecided);
  EXPECT_EQ(decide(5, 2, 2), Outcome::kUndecided);
  EXPECT_EQ(decide(5, 3, 0), Outcome::kWon);   // no need to wait for the other two
  EXPECT_EQ(decide(5, 0, 3), Outcome::kLost);  // three down: answer at once
  EXPECT_EQ(decide(5, 1, 2), Outcome::kUndecided);
  EXPECT_EQ(decide(4, 2, 1), Outcome::kUndecided);
  EXPECT_EQ(decide(4, 2, 2), Outcome::kLost);  // 4 nodes: 2-2 can never reach 3
  EXPECT_EQ(decide(1, 0, 1), Outcome::kLost);
}

TEST(QuorumTest, DecideMatchesExhaustiveOutcomeForEveryPartialVote) {
  // Cross-check against brute force: the outcome is decided iff every completion agrees.
  for (int n = 1; n <= 7; ++n) {
    for (int f = 0; f <= n; ++f) {
      for (int a = 0; f + a <= n; ++a) {
        int rest = n - f - a;
        bool can_win = f + rest >= majority(n);
        bool can_lose = f < majority(n);
        Outcome o = decide(n, f, a);
        if (can_win && can_lose) {
          EXPECT_EQ(o, Outcome::kUndecided) << n << " " << f << " " << a;
        } else if (can_win) {
          EXPECT_EQ(o, Outcome::kWon) << n << " " << f << " " << a;
        } else {
          EXPECT_EQ(o, Outcome::kLost) << n << " " << f << " " << a;
        }
      }
    }
  }
}

TEST(QuorumTest, LossIsBusyWhenAMajorityAnswered) {
  EXPECT_EQ(classifyLoss(5, 0, 3, 0), LossKind::kBusy);
  EXPECT_EQ(classifyLoss(5, 0, 3, 2), LossKind::kBusy);  // 2 down + 3 held: just busy
  EXPECT_EQ(classifyLoss(5, 2, 3, 0), LossKind::kBusy);
  EXPECT_EQ(classifyLoss(5, 1, 2, 2), LossKind::kBusy);      // split vote among live nodes: retry
  EXPECT_EQ(classifyLoss(5, 0, 0, 3), LossKind::kNoQuorum);  // 3 down
  EXPECT_EQ(classifyLoss(5, 2, 0, 3), LossKind::kNoQuorum);
  EXPECT_EQ(classifyLoss(5, 1, 1, 3), LossKind::kNoQuorum);
  EXPECT_EQ(classifyLoss(3, 0, 1, 2), LossKind::kNoQuorum);
}

TEST(QuorumTest, TokenIsMaxOverGrantingNodes) {
  EXPECT_EQ(fencingToken({}), 0u);
  EXPECT_EQ(fencingToken({7}), 7u);
  EXPECT_EQ(fencingToken({3, 11, 5}), 11u);
}

// A read's token of a held lease: only once every holding node reports the same one (a late
// node's own counter, a granting node awaiting its sync: not yet).
TEST(QuorumTest, LeaseTokenIsSettledOnlyWhenEveryHolderAgrees) {
  EXPECT_EQ(agreedToken({}), std::nullopt);
  EXPECT_EQ(agreedToken({42}), 42u);
  EXPECT_EQ(agreedToken({42, 42, 42}), 42u);
  EXPECT_EQ(agreedToken({42, 42, 1'000'042}), std::nullopt) << "a late node seeded later";
  EXPECT_EQ(agreedToken({40, 42, 42}), std::nullopt) << "a granting node awaiting the sync";
}

// The last grant's token: the highest a majority of nodes names, never a minority's own.
TEST(QuorumTest, LastTokenIsTheHighestAMajorityNames) {
  EXPECT_EQ(quorumToken({}, 2), std::nullopt);
  EXPECT_EQ(quorumToken({7}, 2), std::nullopt);
  EXPECT_EQ(quorumToken({7, 7}, 2), 7u);
  EXPECT_EQ(quorumToken({7, 9, 7}, 2), 7u) << "one node ahead: a lost attempt or a later seed";
  EXPECT_EQ(quorumToken({9, 7, 9, 7, 5}, 3), std::nullopt);
  EXPECT_EQ(quorumToken({9, 7, 9, 7, 9}, 3), 9u);
  EXPECT_EQ(quorumToken({9, 9, 7, 7, 7}, 2), 9u) << "the highest of two that a majority names";
  EXPECT_EQ(quorumToken({3, 1, 2}, 2), std::nullopt);
  EXPECT_EQ(quorumToken({5}, 1), 5u);
  EXPECT_EQ(quorumToken({5}, 0), std::nullopt);
  EXPECT_EQ(quorumToken({7, 7, 0, 0, 0}, 3), std::nullopt) << "nodes restarted empty name none";
}

// Without a majority token: one a majority of nodes count up to, so the next grant is above it.
TEST(QuorumTest, MajorityFloorIsTheQuorumThHighest) {
  EXPECT_EQ(majorityFloorToken({}, 2), 0u);
  EXPECT_EQ(majorityFloorToken({60, 51}, 2), 51u) << "not a lost attempt's 60";
  EXPECT_EQ(majorityFloorToken({9, 5, 7}, 2), 7u);
  EXPECT_EQ(majorityFloorToken({9, 5, 7, 1, 3}, 3), 5u);
  EXPECT_EQ(majorityFloorToken({7, 7, 0, 0, 0}, 3), 7u) << "fewer counters than a majority";
  EXPECT_EQ(majorityFloorToken({0, 0}, 2), 0u);
}

TEST(QuorumTest, MajorityTokenIsTheSharedOneElseTheFloor) {
  EXPECT_EQ(majorityToken({7, 9, 7}, 2), 7u);
  EXPECT_EQ(majorityToken({9, 9, 7, 7, 7}, 2), 9u);
  EXPECT_EQ(majorityToken({60, 51}, 2), 51u);
  EXPECT_EQ(majorityToken({}, 2), 0u);
}

TEST(QuorumTest, HolderTtlIsWhenEnoughNodesFreeUp) {
  // All five busy: three must expire, so the third smallest.
  EXPECT_EQ(holderTtlMs(5, 0, {500, 100, 300, 200, 400}), 300);
  // Two free already: one more is enough.
  EXPECT_EQ(holderTtlMs(5, 2, {500, 100, 300}), 100);
  // Fewer PTTLs known than needed: the largest known.
  EXPECT_EQ(holderTtlMs(5, 0, {100, 200}), 200);
  EXPECT_EQ(holderTtlMs(5, 0, {}), -1);
  EXPECT_EQ(holderTtlMs(5, 0, {-1, -2}), -1);  // no expiry / gone say nothing
}

TEST(QuorumTest, HeldTtlIsMajorityThLargest) {
  EXPECT_EQ(heldTtlMs(5, {900, 100, 800, 700}), 700);
  EXPECT_EQ(heldTtlMs(5, {900, 800, 700}), 700);
  EXPECT_EQ(heldTtlMs(5, {900, 800}), -1);
}

TEST(QuorumTest, NodeNeverSeenDoesNotVote) {
  NodeRestartState s;
  EXPECT_FALSE(mayVote(s, 1'000'000, 0));
}

TEST(QuorumTest, LongRunningNodeVotesAtOnce) {
  NodeRestartState s;
  noteNodeUp(s, "aaa", /*uptime_ms=*/3'600'000, /*learned_at_ms=*/10'000);
  EXPECT_TRUE(mayVote(s, 10'000, 600'000));
}

TEST(QuorumTest, YoungNodeWaitsUntilMaxTtlAfterItsStart) {
  NodeRestartState s;
  noteNodeUp(s, "aaa", /*uptime_ms=*/1'000, /*learned_at_ms=*/50'000);  // started at 49'000
  EXPECT_FALSE(mayVote(s, 50'000, 2'000));
  EXPECT_FALSE(mayVote(s, 50'999, 2'000));
  EXPECT_TRUE(mayVote(s, 51'000, 2'000));
  EXPECT_EQ(votingFromMs(s, 2'000), 51'000);
}

TEST(QuorumTest, RunIdChangeIsARestart) {
  NodeRestartState s;
  noteNodeUp(s, "old", 3'600'000, 10'000);
  EXPECT_TRUE(mayVote(s, 10'000, 5'000));
  // Restarted: new run id, young.
  noteNodeUp(s, "new", 500, 20'000);
  EXPECT_FALSE(mayVote(s, 20'000, 5'000));
  EXPECT_TRUE(mayVote(s, 24'500, 5'000));
}

TEST(QuorumTest, RunIdChangeToAnOlderServerCountsFromDetection) {
  NodeRestartState s;
  noteNodeUp(s, "old", 3'600'000, 10'000);
  // A different, long-running server now answers at the same address (failover).
  noteNodeDown(s, 25'000);
  noteNodeUp(s, "other", 7'200'000, 30'000);
  // Its data is unrelated to the old server's from the moment we noticed: wait a full max TTL.
  EXPECT_FALSE(mayVote(s, 30'000, 5'000));
  EXPECT_FALSE(mayVote(s, 34'999, 5'000));
  EXPECT_TRUE(mayVote(s, 35'000, 5'000));
}

TEST(QuorumTest, ReconnectToSameProcessKeepsItsRestartTime) {
  NodeRestartState s;
  noteNodeUp(s, "aaa", 1'000, 10'000);  // started at 9'000
  noteNodeUp(s, "aaa", 5'000, 14'500);  // uptime in whole seconds: 13'500 would be later
  EXPECT_EQ(votingFromMs(s, 2'000), 11'000);
}

TEST(QuorumTest, VotingTimeSaturates) {
  NodeRestartState s;
  noteNodeUp(s, "aaa", 0, std::numeric_limits<int64_t>::max() - 10);
  EXPECT_EQ(votingFromMs(s, 1'000), std::numeric_limits<int64_t>::max());
}

TEST(QuorumTest, NotVotingReasonSaysWhyForHowLongAndTheWaysOut) {
  const std::string fix =
      " (delayed restart; to vote at once: appendonly yes + appendfsync always on the node, or "
      "backend.redlock.delayed_restart: false)";
  NodeRestartState s;
  noteNodeUp(s, "fresh", 13'000, 100'000);  // started at 87'000, first sight
  EXPECT_EQ(notVotingReason(s, 100'000, 600'000),
            "not voting for another 587 s: node up 13 s < max ttl 600 s" + fix);
  EXPECT_EQ(notVotingReason(s, 100'001, 600'000),
            "not voting for another 587 s: node up 13 s < max ttl 600 s" + fix)
      << "seconds left round up";
  noteNodeDown(s, 200'000);
  noteNodeUp(s, "new-run", 2'000, 210'000);
  EXPECT_EQ(notVotingReason(s, 210'000, 600'000),
            "not voting for another 598 s: restarted 2 s ago (new run_id) < max ttl 600 s" + fix);
}

TEST(QuorumTest, OnlyAppendonlyWithFsyncAlwaysPersistsEveryWrite) {
  EXPECT_TRUE(persistsEveryWrite({"appendonly", "yes", "appendfsync", "always"}));
  EXPECT_TRUE(persistsEveryWrite(
      {"appendfsync", "always", "appendfilename", "a.aof", "appendonly", "yes"}));
  EXPECT_FALSE(persistsEveryWrite({"appendonly", "yes", "appendfsync", "everysec"}));
  EXPECT_FALSE(persistsEveryWrite({"appendonly", "no", "appendfsync", "always"}));
  EXPECT_FALSE(persistsEveryWrite({}));  // CONFIG refused: assume the worst
  EXPECT_FALSE(persistsEveryWrite({"appendonly"}));
}

}  // namespace
}  // namespace sidelock::backend::quorum
