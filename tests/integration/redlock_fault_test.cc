// Redlock under node failure, on five real redis-server processes: killed, paused (SIGSTOP) and
// restarted nodes, and the delayed-restart rule for a node that comes back empty.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <regex>
#include <string>

#include "integration/redlock_test_env.h"
#include "support/log_capture.h"

namespace sidelock::testing {
namespace {

using backend::Operation;
using backend::OutcomeCode;
using Clock = std::chrono::steady_clock;

TEST_F(RedlockTest, TwoNodesKilledStillGrantedAndReady) {
  auto& b = makeReadyBackend();
  servers_[3]->kill();
  servers_[4]->kill();
  // Right after the kill (before the backend noticed) and after it noticed: both granted.
  auto early = acquire(b, "l", "a", 10'000);
  ASSERT_TRUE(early.isOk()) << early.status().toString();
  EXPECT_TRUE(early->ok());
  ASSERT_TRUE(env_.runUntil([&] { return !b.health().nodes[3].up && !b.health().nodes[4].up; }));
  auto h = b.health();
  EXPECT_TRUE(h.ready) << h.reason;
  EXPECT_FALSE(h.nodes[3].reason.empty());
  EXPECT_EQ(env_.metrics().backend_ready.Value(), 1);
  EXPECT_EQ(nodesHolding("l", "a"), 3);
  EXPECT_EQ(*release(b, "l", "a"), OutcomeCode::kOk);
  auto again = acquire(b, "l", "b", 10'000);
  ASSERT_TRUE(again.isOk()) << again.status().toString();
  EXPECT_TRUE(again->ok());
  EXPECT_GT(again->token, early->token);
}

TEST_F(RedlockTest, ThreeNodesKilledFailsFastNotReadyAndLeavesNoStaleKeys) {
  auto& b = makeReadyBackend();
  for (int i = 2; i < kNodes; ++i) servers_[i]->kill();
  // Before the backend has even noticed: the broken links fail fast.
  auto t0 = Clock::now();
  auto r = acquire(b, "l", "a", 10'000);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().toString();
  EXPECT_LT(msSince(t0), 1000);

  ASSERT_TRUE(env_.runUntil([&] { return !b.health().ready; }));
  auto h = b.health();
  EXPECT_NE(h.reason.find(servers_[4]->address()), std::string::npos) << h.reason;
  EXPECT_EQ(env_.metrics().backend_ready.Value(), 0);

  // And once it knows: still fast, and counted as a quorum failure.
  const double failures_before = env_.metrics().redlock_quorum_failures.Value();
  t0 = Clock::now();
  auto r2 = acquire(b, "l", "a", 10'000);
  ASSERT_FALSE(r2.isOk());
  EXPECT_EQ(r2.status().code(), StatusCode::kUnavailable);
  EXPECT_LT(msSince(t0), 1000);
  EXPECT_EQ(env_.metrics().redlock_quorum_failures.Value(), failures_before + 1);
  EXPECT_GE(failures_before, 1);
  // The two live nodes granted, and the failed attempts took it back.
  EXPECT_EQ(nodesWithKey("l"), 0);

  // Extend and inspect with the majority gone: not extended, not answered.
  auto e = extend(b, "l", "a", 10'000);
  ASSERT_FALSE(e.isOk());
  EXPECT_EQ(e.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(nodesWithKey("l"), 0);  // never re-created
  EXPECT_FALSE(inspect(b, "l").isOk());
}

TEST_F(RedlockTest, ExtendWithMajorityLostIsNotExtended) {
  auto& b = makeReadyBackend();
  ASSERT_TRUE(acquire(b, "l", "a", 10'000)->ok());
  for (int i = 2; i < kNodes; ++i) servers_[i]->kill();
  auto e = extend(b, "l", "a", 60'000);
  ASSERT_FALSE(e.isOk());
  EXPECT_EQ(e.status().code(), StatusCode::kUnavailable) << e.status().toString();
  // Not extended: the two live nodes may have applied it, but two are no majority and the lease
  // keeps its old validity (TTL at most the original 10 s on a majority ever).
  ASSERT_TRUE(env_.runUntil([&] { return !b.health().nodes[2].up && !b.health().nodes[3].up; }));
  servers_[2]->restart();
  servers_[3]->restart();
  // The two live nodes voting too, not only the restarted two (node 4 stays down): on a loaded
  // machine a live node's PING can time out meanwhile, and an inspect needs a majority answering.
  ASSERT_TRUE(env_.runUntil([&] {
    return b.nodeVoting(0) && b.nodeVoting(1) && b.nodeVoting(2) && b.nodeVoting(3);
  }));
  auto state = inspect(b, "l");
  ASSERT_TRUE(state.isOk()) << state.status().toString();
  EXPECT_FALSE(state->ok());  // the restarted nodes came back empty: no majority holds it
}

TEST_F(RedlockTest, PausedNodeCostsAtMostItsTimeout) {
  auto& b = makeReadyBackend();
  ASSERT_TRUE(acquire(b, "held", "other", 30'000)->ok());

  // Granted: answered once the majority voted, without waiting for the paused node.
  servers_[2]->pause();
  auto t0 = Clock::now();
  auto r = acquire(b, "l", "a", 10'000);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_TRUE(r->ok());
  EXPECT_LT(msSince(t0), kNodeTimeoutMs + 500);
  servers_[2]->resume();
  ASSERT_TRUE(env_.runUntil([&] { return b.nodeVoting(2); }, 5000)) << b.health().reason;

  // Busy: decided by the live nodes; the cleanup release to the paused node (which the backend
  // still believes up) is bounded by the node timeout.
  servers_[2]->pause();
  t0 = Clock::now();
  auto busy = acquire(b, "held", "a", 10'000);
  ASSERT_TRUE(busy.isOk()) << busy.status().toString();
  EXPECT_FALSE(busy->ok());
  EXPECT_LT(msSince(t0), kNodeTimeoutMs + 500);

  servers_[2]->resume();
  ASSERT_TRUE(env_.runUntil([&] { return b.nodeVoting(2); }, 5000)) << b.health().reason;
  EXPECT_EQ(*release(b, "l", "a"), OutcomeCode::kOk);
  // The paused node ran our late acquire of "l" when it woke up; the release removed it there
  // too. Nothing of "a" on "held" remains anywhere.
  EXPECT_EQ(nodesWithKey("l"), 0);
  EXPECT_EQ(nodesHolding("held", "a"), 0);
  EXPECT_EQ(nodesHolding("held", "other"), 5);
}

// Redlock's per-node budget (node_timeout_ms) only answers the vote: a node that stalls past it
// (a fork, an fsync) keeps its link, so a 60 ms hiccup does not reconnect the node with the full
// handshake. Only command_timeout_ms of silence tears a link down.
TEST_F(RedlockTest, NodeStalledPastItsBudgetKeepsItsLink) {
  config::BackendConfig c = redlockConfig();
  c.redlock.node_timeout_ms = 50;
  c.command_timeout_ms = 3000;
  auto& b = makeBackend(c);
  ASSERT_TRUE(waitAllVoting(b));
  auto& stalled = env_.metrics().node(servers_[2]->address());

  servers_[2]->pause();
  auto r = acquire(b, "stall", "a", 10'000);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_TRUE(r->ok());
  env_.runFor(150);  // three node budgets
  EXPECT_GE(stalled.errors_timeout->Value(), 1.0);
  servers_[2]->resume();

  EXPECT_TRUE(b.health().nodes[2].up) << b.health().nodes[2].reason;
  EXPECT_EQ(stalled.reconnects->Value(), 0.0) << "the stalled node's link was torn down";
  EXPECT_EQ(*release(b, "stall", "a"), OutcomeCode::kOk);
  ASSERT_TRUE(env_.runUntil([&] { return nodesWithKey("stall") == 0; }));
  EXPECT_EQ(stalled.reconnects->Value(), 0.0);
}

TEST_F(RedlockTest, ShutdownAnswersPendingCallsBeforeDone) {
  auto& b = makeReadyBackend();
  ASSERT_TRUE(acquire(b, "held", "other", 30'000)->ok());
  servers_[2]->pause();  // keeps the next attempt's cleanup waiting on this node
  std::optional<StatusOr<backend::Outcome>> reply;
  bool callback_before_done = false;
  bool done = false;
  b.run(backend::Operation::acquire("held", "a", 10'000),
        [&](StatusOr<backend::Outcome> r) { reply.emplace(r); });
  env_.runFor(20);  // the live nodes said "busy": the attempt is cleaning up
  b.shutdown([&] {
    callback_before_done = reply.has_value();
    done = true;
  });
  ASSERT_TRUE(env_.runUntil([&] { return done; }, 5000));
  EXPECT_TRUE(callback_before_done);
  EXPECT_FALSE(b.health().ready);
  // New calls after shutdown fail (on a later turn), they do not hang.
  auto late = acquire(b, "x", "a", 1'000);
  ASSERT_FALSE(late.isOk());
  EXPECT_EQ(late.status().code(), StatusCode::kCancelled);
}

TEST_F(RedlockTest, NodesRestartedRecoverWithoutRecreatingTheBackend) {
  auto& b = makeReadyBackend();
  for (int i = 0; i < 3; ++i) servers_[i]->kill();
  ASSERT_TRUE(env_.runUntil([&] { return !b.health().ready; }));
  EXPECT_FALSE(acquire(b, "l", "a", 5'000).isOk());
  for (int i = 0; i < 3; ++i) servers_[i]->restart();
  ASSERT_TRUE(env_.runUntil([&] { return b.health().ready; }, 5000)) << b.health().reason;
  // The gauge follows the nodes' state notifications, which are posted: allow it a loop turn.
  EXPECT_TRUE(env_.runUntil([&] { return env_.metrics().backend_ready.Value() == 1; }, 1000));
  ASSERT_TRUE(waitAllVoting(b)) << b.health().reason;
  auto r = acquire(b, "l", "a", 5'000);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_TRUE(r->ok());
  EXPECT_EQ(nodesHolding("l", "a"), 5);
}

// The hazard delayed restarts prevent, shown without them: three nodes restart empty while "a"
// holds the lock, and "b" wins a majority through them. Two owners at once.
TEST_F(RedlockTest, WithoutDelayedRestartsAnEmptyRestartAllowsASecondOwner) {
  auto& b = makeReadyBackend(/*delayed_restart=*/false);
  ASSERT_TRUE(acquire(b, "l", "a", 30'000)->ok());
  ASSERT_NO_FATAL_FAILURE(restartEmpty(b, 2, kNodes));
  ASSERT_TRUE(waitAllVoting(b));
  auto second = acquire(b, "l", "b", 30'000);
  ASSERT_TRUE(second.isOk());
  EXPECT_TRUE(second->ok());  // unsafe: "a" still believes it holds the lock
}

// Issue 10 finding 2 on Redlock: a majority of nodes restarts empty and the nodes that kept
// their counters are gone, so the grant's token comes from recreated counters only. Seeded from
// the nodes' clocks, it is still above every token handed out before.
TEST_F(RedlockTest, TokensNeverDecreaseWhenAMajorityRestartsEmpty) {
  auto& b = makeReadyBackend(/*delayed_restart=*/false);
  uint64_t last = 0;
  for (int i = 0; i < 3; ++i) {
    auto r = acquire(b, "fenced", "before", 5'000);
    ASSERT_TRUE(r.isOk() && r->ok()) << r.status().toString();
    EXPECT_GT(r->token, last);
    last = r->token;
    ASSERT_EQ(*release(b, "fenced", "before"), OutcomeCode::kOk);
  }
  ASSERT_NO_FATAL_FAILURE(restartEmpty(b, 0, 3));
  for (int i = 3; i < kNodes; ++i) servers_[i]->kill();  // the nodes that remember the counter
  ASSERT_TRUE(env_.runUntil([&] { return !b.health().nodes[3].up && !b.health().nodes[4].up; }));
  ASSERT_TRUE(env_.runUntil([&] { return b.health().ready; })) << b.health().reason;
  auto after = acquire(b, "fenced", "after", 5'000);
  ASSERT_TRUE(after.isOk() && after->ok()) << after.status().toString();
  EXPECT_GT(after->token, last) << "the token went backwards after nodes restarted empty";
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(servers_[i]->cli({"GET", counterKey("fenced")}), std::to_string(after->token));
    EXPECT_GT(std::stoll(servers_[i]->cli({"PTTL", counterKey("fenced")})), 600'000)
        << "counters expire, after max_ttl_ms plus a margin";
  }
}

TEST_F(RedlockTest, NodeRestartedEmptyCannotVoteUntilMaxTtlPassed) {
  constexpr int64_t kMaxTtl = 2'000;
  // Fresh servers have uptime ~0: they vote only kMaxTtl after their start.
  auto& b = makeBackend(redlockConfig(/*delayed_restart=*/true), kMaxTtl);
  env_.runFor(300);
  EXPECT_FALSE(b.health().ready);
  EXPECT_FALSE(b.health().nodes[0].voting);
  EXPECT_NE(b.health().nodes[0].reason.find("delayed restart"), std::string::npos);
  ASSERT_TRUE(waitAllVoting(b, kMaxTtl + 5000)) << b.health().reason;
  EXPECT_TRUE(b.health().ready);

  const auto granted_at = Clock::now();
  ASSERT_TRUE(acquire(b, "l", "a", kMaxTtl)->ok());
  ASSERT_NO_FATAL_FAILURE(restartEmpty(b, 2, kNodes));
  auto h = b.health();
  EXPECT_FALSE(h.ready) << "only two nodes may vote";
  for (int i = 2; i < kNodes; ++i) {
    EXPECT_FALSE(h.nodes[i].voting) << i;
    EXPECT_NE(h.nodes[i].reason.find("restarted"), std::string::npos) << h.nodes[i].reason;
  }
  EXPECT_NE(h.reason.find("not voting yet"), std::string::npos) << h.reason;

  // The three empty nodes would grant "b", but their votes do not count.
  auto second = acquire(b, "l", "b", kMaxTtl);
  EXPECT_TRUE(!second.isOk() || !second->ok());
  EXPECT_EQ(nodesHolding("l", "b"), 0);  // and the attempt was cleaned up everywhere
  // "a" still holds its two keys, unless a loaded machine took longer than its TTL to get here.
  if (msSince(granted_at) < kMaxTtl) {
    EXPECT_EQ(nodesHolding("l", "a"), 2);
  }
  EXPECT_LE(nodesHolding("l", "a"), 2);
  // Extends count only voting nodes too: "a" keeps two voting keys, no majority.
  auto e = extend(b, "l", "a", kMaxTtl);
  EXPECT_TRUE(!e.isOk() || e->code != OutcomeCode::kOk);

  // Once max TTL has passed since their restart (every lease they forgot has expired), they
  // vote again and the lock can be granted.
  ASSERT_TRUE(waitAllVoting(b, kMaxTtl + 5000)) << b.health().reason;
  EXPECT_TRUE(b.health().ready);
  auto later = acquire(b, "l", "b", kMaxTtl);
  ASSERT_TRUE(later.isOk()) << later.status().toString();
  EXPECT_TRUE(later->ok());
}

// Issue 10 finding 4: five freshly started nodes. Those that persist every write vote at once;
// the others say in /readyz (health) what is happening and when it ends, and the log says it
// once per node run, not once per reconnect.
TEST_F(RedlockTest, FreshNodesSayWhyTheyDoNotVoteAndPersistentOnesVoteAtOnce) {
  constexpr int64_t kMaxTtl = 600'000;
  servers_[0] = std::make_unique<RedisServer>(RedisServer::Options{/*persistence=*/true, {}});
  servers_[1] = std::make_unique<RedisServer>(RedisServer::Options{/*persistence=*/true, {}});
  servers_[2] = std::make_unique<RedisServer>(RedisServer::Options{/*persistence=*/true, {}});
  // Persistent, but CONFIG is refused to the sidecar's user: counted as not persistent.
  ASSERT_EQ(servers_[2]->cli({"ACL", "SETUSER", "default", "-config"}), "OK");

  LogCapture log;
  ASSERT_TRUE(log.ok());
  auto& b = makeBackend(redlockConfig(/*delayed_restart=*/true), kMaxTtl);
  ASSERT_TRUE(env_.runUntil([&] { return b.nodeVoting(0) && b.nodeVoting(1); }))
      << b.health().reason;
  ASSERT_TRUE(env_.runUntil([&] {
    auto h = b.health();
    for (int i = 2; i < kNodes; ++i) {
      if (!h.nodes[i].up || h.nodes[i].reason.empty()) return false;
    }
    return true;
  }));
  auto h = b.health();
  EXPECT_FALSE(h.ready) << "two voting nodes are no majority";
  for (int i = 2; i < kNodes; ++i) {
    EXPECT_FALSE(h.nodes[i].voting) << i;
    // "not voting for another 600 s: node up 0 s < max ttl 600 s (delayed restart; to vote at
    // once: ...)", give or take the seconds the start took.
    EXPECT_TRUE(std::regex_search(
        h.nodes[i].reason,
        std::regex("^not voting for another (59[0-9]|600) s: node up [0-9]+ s < max ttl 600 s")))
        << h.nodes[i].reason;
  }
  EXPECT_NE(h.reason.find("not voting for another"), std::string::npos) << h.reason;

  // A reconnect of the same run is not a new event for the log. First the node's CONFIG check
  // has answered and been logged; then its connection is killed; then the check after the
  // reconnect has run on the server (its answer is then already in the sidecar's socket: a
  // short loop run processes it).
  const std::string node3_not_voting =
      "event=redlock.node_not_voting node=" + servers_[3]->address();
  ASSERT_TRUE(env_.runUntil([&] { return log.count(node3_not_voting) == 1; }, 3000));
  auto config_calls = [&] {
    const std::string stats = servers_[3]->cli({"INFO", "commandstats"});
    const size_t at = stats.find("cmdstat_config|get:calls=");
    return at == std::string::npos ? 0 : std::stoi(stats.substr(at + 25));
  };
  const int calls_before = config_calls();
  servers_[3]->cli({"CLIENT", "KILL", "TYPE", "normal"});
  ASSERT_TRUE(env_.runUntil([&] { return !b.health().nodes[3].up; }, 3000));
  ASSERT_TRUE(env_.runUntil([&] { return config_calls() > calls_before; }, 3000));
  env_.runFor(kSettleMs);
  EXPECT_EQ(log.count(node3_not_voting), 1) << log.text();
  EXPECT_EQ(log.count("event=redlock.node_not_voting"), 3) << log.text();
  EXPECT_EQ(log.count("event=redlock.node_voting node=" + servers_[0]->address()), 1) << log.text();
}

}  // namespace
}  // namespace sidelock::testing
