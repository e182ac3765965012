// Redlock semantics on five real redis-server processes, all nodes healthy: where grants are
// written, release/extend/inspect outcomes, the quorum matrix, fencing tokens across diverged
// counters, wake-up dedupe, and mutual exclusion under contention from several backends.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/random.h"
#include "integration/redlock_test_env.h"
#include "redis/quorum.h"
#include "redis/scripts.h"
#include "support/fencing.h"

namespace sidelock::testing {
namespace {

using backend::Operation;
using backend::OutcomeCode;

// Issue 22: nodes at maxmemory (noeviction) answer, and refuse to write. That is not an outage:
// kResourceExhausted (503 backend_full), in Redis's words without the script's SHA or line.
TEST_F(RedlockTest, NodesOutOfMemoryAreResourceExhaustedNotAnOutage) {
  auto& b = makeReadyBackend();
  for (auto& s : servers_) {
    ASSERT_EQ(s->cli({"CONFIG", "SET", "maxmemory-policy", "noeviction"}), "OK");
    ASSERT_EQ(s->cli({"CONFIG", "SET", "maxmemory", "1"}), "OK");
  }
  auto r = acquire(b, "full", "owner-a", 10'000);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().toString();
  EXPECT_NE(r.status().message().find("is out of memory (maxmemory reached)"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(r.status().message().find("script"), std::string::npos) << r.status().message();
  EXPECT_EQ(nodesHolding("full", "owner-a"), 0);
  for (auto& s : servers_) ASSERT_EQ(s->cli({"CONFIG", "SET", "maxmemory", "0"}), "OK");
  auto granted = acquire(b, "full", "owner-a", 10'000);
  ASSERT_TRUE(granted.isOk()) << granted.status().toString();
  EXPECT_TRUE(granted->ok());
}

// Redlock's counters follow Redis's clock by the whole second, not by the microsecond as one
// master's do (src/redis/lua/lib/next_token.lua): nodes whose counters agree hand out the same
// token within a second, so a grant needs no token sync round. With a microsecond floor each node
// would answer its own clock, and every grant would pay a sync.
TEST_F(RedlockTest, NodesThatAgreeGrantOneTokenWithoutASync) {
  auto& b = makeReadyBackend();
  const std::string sync_sha = servers_[0]->cli(
      {"SCRIPT", "LOAD", std::string(backend::scriptText(backend::ScriptId::kTokenSync))});
  ASSERT_EQ(sync_sha.size(), 40u) << sync_sha;
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_EQ(servers_[i]->cli({"SET", counterKey("agreed"), "5"}), "OK");  // behind the clock
    // Every command in the slow log: a token sync would be there by its script's SHA.
    ASSERT_EQ(servers_[i]->cli({"CONFIG", "SET", "slowlog-log-slower-than", "0"}), "OK");
  }
  // Early in a second of Redis's clock: the five grants land in the same second.
  ASSERT_TRUE(env_.runUntil(
      [&] {
        const uint64_t us = clockUsOf(servers_[0]->cli({"TIME"})) % 1'000'000;
        return us > 10'000 && us < 400'000;
      },
      3000));
  for (int i = 0; i < kNodes; ++i) ASSERT_EQ(servers_[i]->cli({"SLOWLOG", "RESET"}), "OK");
  auto r = acquire(b, "agreed", "owner-a", 10'000);
  ASSERT_TRUE(r.isOk() && r->ok()) << r.status().toString();
  EXPECT_EQ(r->token % 1'000'000, 1u) << "the second's floor: " << r->token;
  env_.runFor(100);  // every sync sent has landed by now
  // The vote is decided by the first three answers; the two nodes not counted in it get the sync
  // anyway (best effort), the three that granted it need none.
  int synced = 0;
  for (int i = 0; i < kNodes; ++i) {
    const std::string log = servers_[i]->cli({"SLOWLOG", "GET", "1000"});
    EXPECT_NE(log.find("EVALSHA"), std::string::npos) << "node " << i << "'s log: " << log;
    synced += log.find(sync_sha) != std::string::npos ? 1 : 0;
    EXPECT_EQ(servers_[i]->cli({"GET", counterKey("agreed")}), std::to_string(r->token));
    servers_[i]->cli({"CONFIG", "SET", "slowlog-log-slower-than", "10000"});
  }
  EXPECT_LE(synced, kNodes - 3) << "a granting node's counter needed the sync";
}

TEST_F(RedlockTest, GrantIsWrittenOnEveryNodeAndReleaseRemovesIt) {
  auto& b = makeReadyBackend();
  EXPECT_TRUE(b.health().ready);
  auto r = acquire(b, "orders-1", "owner-a", 10'000);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  ASSERT_TRUE(r->ok());
  EXPECT_GT(r->token, 0u);
  // validity = ttl - elapsed - drift: below the TTL by at least the drift allowance.
  EXPECT_LE(r->validity_ms, 10'000 - backend::quorum::driftMs(10'000, 0.01));
  EXPECT_GT(r->validity_ms, 9'000);
  // Written on at least a majority; with every node healthy, on all of them.
  EXPECT_GE(nodesHolding("orders-1", "owner-a"), 3);
  EXPECT_EQ(nodesHolding("orders-1", "owner-a"), 5);
  // With its token (seeded from the clock: ~1.8e15, written as an integer) in the grant record of
  // every node of the granting majority, at least; a node that granted last may still await its
  // token sync.
  int recorded = 0;
  for (int i = 0; i < kNodes; ++i) {
    const std::string record =
        servers_[i]->cli({"GET", backend::grantRecordKey("sidelock:", "orders-1")});
    recorded += record == std::to_string(r->token) + " owner-a" ? 1 : 0;
  }
  EXPECT_GE(recorded, 3);
  for (int i = 0; i < kNodes; ++i) {
    int64_t pttl = std::stoll(servers_[i]->cli({"PTTL", key("orders-1")}));
    // Written with the lease's TTL; each redis-cli here is a process start, which takes seconds
    // on a loaded CI machine (PTTL 8,948 was seen): the margin is for that, not for the backend.
    EXPECT_GT(pttl, 5'000);
    EXPECT_LE(pttl, 10'000);
  }

  auto rel = release(b, "orders-1", "owner-a");
  ASSERT_TRUE(rel.isOk()) << rel.status().toString();
  EXPECT_EQ(*rel, OutcomeCode::kOk);
  EXPECT_EQ(nodesWithKey("orders-1"), 0);
  EXPECT_GT(env_.metrics().redlock_validity_seconds.Collect().histogram.sample_count, 0u);
}

TEST_F(RedlockTest, SecondOwnerIsBusyWithHolderTtl) {
  auto& b = makeReadyBackend();
  ASSERT_TRUE(acquire(b, "l", "a", 5'000)->ok());
  auto r = acquire(b, "l", "b", 5'000);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_FALSE(r->ok());
  EXPECT_GT(r->holder_ttl_ms, 4'000);
  EXPECT_LE(r->holder_ttl_ms, 5'000);
  // The failed attempt left nothing of b's anywhere and did not disturb a.
  EXPECT_EQ(nodesHolding("l", "a"), 5);
  EXPECT_EQ(nodesHolding("l", "b"), 0);
  // A busy lock is no outage.
  EXPECT_EQ(env_.metrics().redlock_quorum_failures.Value(), 0);
}

// An acquire by the owner that holds the lease is refused "held by you" and leaves that lease
// alone, as on one Redis: the lost attempt's clean-up releases only where the attempt may have
// written, never on a node that refused it (it released the holder's key everywhere).
TEST_F(RedlockTest, AnAcquireRefusedAsHeldByYouLeavesTheLease) {
  auto& b = makeReadyBackend();
  auto& elsewhere = makeReadyBackend();  // a second sidecar, given the same owner id
  ASSERT_TRUE(acquire(b, "p", "a", 20'000)->ok());
  for (backend::RedlockBackend* via : {&b, &elsewhere}) {
    auto again = acquire(*via, "p", "a", 20'000);
    ASSERT_TRUE(again.isOk()) << again.status().toString();
    EXPECT_EQ(again->code, OutcomeCode::kBusy);
    EXPECT_EQ(again->busy_reason, backend::BusyReason::kHeldByYou);
    EXPECT_EQ(nodesHolding("p", "a"), 5) << "the holder's lease survives the refused acquire";
  }
  EXPECT_EQ(acquire(b, "p", "b", 20'000)->code, OutcomeCode::kBusy);
  auto extended = extend(b, "p", "a", 20'000);
  ASSERT_TRUE(extended.isOk()) << extended.status().toString();
  EXPECT_EQ(extended->code, OutcomeCode::kOk);
}

// A lost acquire's clean-up on a node that timed out: the release goes out then, behind the
// attempt on the same connection, so the node that runs the attempt late deletes what it wrote
// right after (the refused nodes are left alone, the granting ones released at once).
TEST_F(RedlockTest, ALostAcquiresCleanUpReachesANodeThatRunsItLate) {
  auto c = redlockConfig();
  c.command_timeout_ms = 5'000;  // the paused node's link stays up: its queue runs on resume
  c.health_interval_ms = 5'000;
  auto& b = makeBackend(c);
  ASSERT_TRUE(waitAllVoting(b)) << b.health().reason;
  for (int i = 0; i < 2; ++i) servers_[i]->cli({"SET", key("late"), "other", "PX", "20000"});
  servers_[2]->pause();  // past node_timeout_ms: counted as failed
  auto lost = acquire(b, "late", "a", 20'000);
  ASSERT_TRUE(lost.isOk()) << lost.status().toString();
  EXPECT_EQ(lost->code, OutcomeCode::kBusy) << "2 granted, 2 refused, 1 silent";
  for (int i : {3, 4}) EXPECT_EQ(valueOn(i, "late"), "") << "released where it was granted";
  for (int i : {0, 1}) EXPECT_EQ(valueOn(i, "late"), "other") << "the refusers' keys stay";
  servers_[2]->resume();
  // The paused node ran the acquire, then the release queued behind it.
  EXPECT_TRUE(env_.runUntil([&] { return valueOn(2, "late").empty(); }, 2000))
      << "node 2 still holds " << valueOn(2, "late");
  EXPECT_EQ(nodesHolding("late", "other"), 2);
}

TEST_F(RedlockTest, TinyTtlIsRejectedAsInvalid) {
  auto& b = makeReadyBackend();
  auto r = acquire(b, "l", "a", 2);  // drift alone is 3 ms
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(nodesWithKey("l"), 0);
}

// Elections (issue 19): a campaign is a Redlock acquire whose term is the fencing token; after
// the token sync every node of the granting majority records that term in its leader record.
std::string electionRecord(RedisServer& s, const std::string& name, const std::string& field) {
  return s.cli({"HGET", backend::electionLeaderKey("sidelock:", name), field});
}

TEST_F(RedlockTest, ElectionTermsAreTheQuorumsAndStrictlyIncrease) {
  auto& b = makeReadyBackend();
  using backend::LockKind;
  // Counters that drifted apart (failed attempts elsewhere): nodes 3 and 4 ran ahead.
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_EQ(servers_[i]->cli({"SET", backend::electionTokenKey("sidelock:", "e"),
                                i >= 3 ? aboveClockText(500) : aboveClockText(100)}),
              "OK");
  }
  auto first = run(b, Operation::campaign("e", "owner-a", 10'000, "pod-a", "v1"));
  ASSERT_TRUE(first.isOk()) << first.status().toString();
  ASSERT_TRUE(first->ok());
  // The highest counter of the granting nodes: 501 when node 3 or 4 was among the first three
  // to answer, 101 when nodes 0-2 were (the vote is decided at three yes; on a loaded machine
  // that happened, and the late nodes 3 and 4 still take the quorum's term).
  const uint64_t term = first->token;
  EXPECT_TRUE(term == aboveClock(501) || term == aboveClock(101)) << term;
  const std::string term_text = std::to_string(term);
  EXPECT_GT(first->leader.since_ms, 1'700'000'000'000);
  EXPECT_GT(first->validity_ms, 9'000);
  // Every node records the term and since_ms the quorum decided, not its own counter's, and
  // counts at least the term. (The sync is awaited on the granting nodes only: a late node's
  // record may land just after the answer.)
  EXPECT_TRUE(env_.runUntil(
      [&] {
        for (int i = 0; i < kNodes; ++i) {
          if (electionRecord(*servers_[i], "e", "term") != term_text) return false;
        }
        return true;
      },
      3'000));
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_EQ(electionRecord(*servers_[i], "e", "term"), term_text) << "node " << i;
    EXPECT_EQ(electionRecord(*servers_[i], "e", "since_ms"), std::to_string(first->leader.since_ms))
        << "node " << i;
    EXPECT_GE(std::stoull(servers_[i]->cli({"GET", backend::electionTokenKey("sidelock:", "e")})),
              term)
        << "node " << i;
  }
  // The leader read: the record of the majority, the term granted.
  auto leader = run(b, Operation::inspect("e").of(LockKind::kElection));
  ASSERT_TRUE(leader.isOk()) << leader.status().toString();
  ASSERT_TRUE(leader->ok());
  EXPECT_EQ(leader->token, term);
  EXPECT_EQ(leader->leader.candidate, "pod-a");
  EXPECT_EQ(leader->leader.value, "v1");
  EXPECT_EQ(leader->leader.since_ms, first->leader.since_ms);
  EXPECT_TRUE(leader->leader.lease.empty()) << "the lease digest stays in the backend";
  EXPECT_GT(leader->validity_ms, 5'000);  // redis-cli above: a process start each, slow in CI

  // Another candidate is busy; the leader's own second campaign is held by it.
  auto other = run(b, Operation::campaign("e", "owner-b", 10'000, "pod-b", "v2"));
  ASSERT_TRUE(other.isOk());
  EXPECT_EQ(other->code, OutcomeCode::kBusy);
  EXPECT_EQ(electionRecord(*servers_[0], "e", "candidate"), "pod-a");

  // Proclaim: owner-checked on every node, the same term; a stranger is not the leader.
  auto proclaimed = run(b, Operation::proclaim("e", "owner-a", "v3"));
  ASSERT_TRUE(proclaimed.isOk()) << proclaimed.status().toString();
  ASSERT_TRUE(proclaimed->ok());
  EXPECT_EQ(proclaimed->token, term);
  EXPECT_GT(proclaimed->validity_ms, 5'000);
  auto stranger = run(b, Operation::proclaim("e", "owner-b", "x"));
  ASSERT_TRUE(stranger.isOk());
  EXPECT_EQ(stranger->code, OutcomeCode::kNotOwner);
  // A proclaim that reached only a majority (two nodes kept the old value): the majority's value.
  for (int i = 0; i < 2; ++i) {
    servers_[i]->cli({"HSET", backend::electionLeaderKey("sidelock:", "e"), "value", "v1"});
  }
  leader = run(b, Operation::inspect("e").of(LockKind::kElection));
  ASSERT_TRUE(leader.isOk() && leader->ok());
  EXPECT_EQ(leader->leader.value, "v3");
  // Only records the token sync wrote count: a node's own provisional term (before the sync) is
  // never read as the leader's.
  for (int i = 0; i < 2; ++i) {
    servers_[i]->cli({"HDEL", backend::electionLeaderKey("sidelock:", "e"), "quorum"});
  }
  leader = run(b, Operation::inspect("e").of(LockKind::kElection));
  ASSERT_TRUE(leader.isOk() && leader->ok()) << "three of five records still count";
  servers_[2]->cli({"HDEL", backend::electionLeaderKey("sidelock:", "e"), "quorum"});
  leader = run(b, Operation::inspect("e").of(LockKind::kElection));
  ASSERT_TRUE(leader.isOk());
  EXPECT_EQ(leader->code, OutcomeCode::kNotHeld);
  for (int i = 0; i < 3; ++i) {
    servers_[i]->cli({"HSET", backend::electionLeaderKey("sidelock:", "e"), "quorum", "1"});
  }

  // Renew and resign through extend.lua and release.lua on the election's keys.
  auto renewed = run(b, Operation::extend("e", "owner-a", 20'000).of(LockKind::kElection));
  ASSERT_TRUE(renewed.isOk() && renewed->ok()) << renewed.status().toString();
  EXPECT_GT(renewed->validity_ms, 15'000);
  auto resigned = run(b, Operation::release("e", "owner-a").of(LockKind::kElection));
  ASSERT_TRUE(resigned.isOk() && resigned->ok());
  for (auto& srv : servers_) {
    EXPECT_EQ(srv->cli({"EXISTS", backend::electionLeaderKey("sidelock:", "e")}), "0");
  }
  leader = run(b, Operation::inspect("e").of(LockKind::kElection));
  ASSERT_TRUE(leader.isOk());
  EXPECT_EQ(leader->code, OutcomeCode::kNotHeld);
  EXPECT_EQ(leader->token, aboveClock(501))
      << "nobody leads: the highest counter (nodes 3 and 4 count 501)";
  auto lapsed = run(b, Operation::proclaim("e", "owner-a", "late"));
  ASSERT_TRUE(lapsed.isOk());
  EXPECT_EQ(lapsed->code, OutcomeCode::kNotHeld);

  // The next leader's term is higher, also when the majority that elects it excludes the nodes
  // that ran ahead (they are taken by a lease of somebody else).
  for (int i = 3; i < kNodes; ++i) {
    servers_[i]->cli({"SET", backend::electionKey("sidelock:", "e"), "foreign", "PX", "30000"});
  }
  auto next = run(b, Operation::campaign("e", "owner-b", 10'000, "pod-b", "v2"));
  ASSERT_TRUE(next.isOk() && next->ok()) << next.status().toString();
  EXPECT_GT(next->token, first->token);
  leader = run(b, Operation::inspect("e").of(LockKind::kElection));
  ASSERT_TRUE(leader.isOk() && leader->ok());
  EXPECT_EQ(leader->leader.candidate, "pod-b");
  EXPECT_EQ(leader->token, next->token);
}

// Nodes down: two of five still elect (and the leader reads); three down is an outage, never a
// leader nobody can confirm. A node restarted empty re-seeds its counter from its clock, so terms
// never go back.
TEST_F(RedlockTest, ElectionsSurviveAMinorityDownAndTermsNeverGoBackAfterEmptyRestarts) {
  auto& b = makeReadyBackend();
  using backend::LockKind;
  auto first = run(b, Operation::campaign("e", "owner-a", 10'000, "pod-a", "v"));
  ASSERT_TRUE(first.isOk() && first->ok()) << first.status().toString();
  ASSERT_TRUE(run(b, Operation::release("e", "owner-a").of(LockKind::kElection))->ok());

  restartEmpty(b, 0, 3);  // a majority forgot everything
  ASSERT_TRUE(waitAllVoting(b)) << b.health().reason;
  auto second = run(b, Operation::campaign("e", "owner-b", 10'000, "pod-b", "v"));
  ASSERT_TRUE(second.isOk() && second->ok()) << second.status().toString();
  EXPECT_GT(second->token, first->token);
  ASSERT_TRUE(run(b, Operation::release("e", "owner-b").of(LockKind::kElection))->ok());

  servers_[3]->kill();
  servers_[4]->kill();
  ASSERT_TRUE(env_.runUntil([&] { return !b.health().nodes[3].up && !b.health().nodes[4].up; }));
  auto third = run(b, Operation::campaign("e", "owner-c", 10'000, "pod-c", "v"));
  ASSERT_TRUE(third.isOk() && third->ok()) << third.status().toString();
  EXPECT_GT(third->token, second->token);
  auto leader = run(b, Operation::inspect("e").of(LockKind::kElection));
  ASSERT_TRUE(leader.isOk() && leader->ok()) << leader.status().toString();
  EXPECT_EQ(leader->leader.candidate, "pod-c");
  EXPECT_EQ(leader->token, third->token);
  ASSERT_TRUE(run(b, Operation::proclaim("e", "owner-c", "w"))->ok());

  servers_[2]->kill();
  ASSERT_TRUE(env_.runUntil([&] { return !b.health().nodes[2].up; }));
  leader = run(b, Operation::inspect("e").of(LockKind::kElection));
  ASSERT_FALSE(leader.isOk());
  EXPECT_EQ(leader.status().code(), StatusCode::kUnavailable);
  auto proclaim = run(b, Operation::proclaim("e", "owner-c", "x"));
  ASSERT_FALSE(proclaim.isOk());
  EXPECT_EQ(proclaim.status().code(), StatusCode::kUnavailable);
  auto fourth = run(b, Operation::campaign("e", "owner-d", 10'000, "pod-d", "v"));
  EXPECT_FALSE(fourth.isOk() && fourth->ok());
}

// Observers and waiting candidates learn of a grant, a proclaim and a resign from the nodes'
// announcements, coalesced: one wake-up per event, also for events closer together than the
// node timeout (a proclaim right after the grant).
TEST_F(RedlockTest, ElectionAnnouncementsWakeOncePerEventEvenBackToBack) {
  auto& watcher = makeReadyBackend();
  auto& b = makeReadyBackend();
  using backend::LockKind;
  int woken = 0;
  watcher.setReleaseListener(
      [&](std::string_view name, std::string_view) { woken += name == "e" ? 1 : 0; });
  watcher.watchReleases("e");
  env_.runFor(200);  // let SUBSCRIBE reach every node

  // A grant announces twice on every node (the campaign, then the term's sync), a proclaim and
  // a resign once: four events, back to back, within the node timeout.
  ASSERT_TRUE(run(b, Operation::campaign("e", "owner-a", 10'000, "pod-a", "v"))->ok());
  ASSERT_TRUE(run(b, Operation::proclaim("e", "owner-a", "w"))->ok());
  ASSERT_TRUE(run(b, Operation::release("e", "owner-a").of(LockKind::kElection))->ok());
  ASSERT_TRUE(env_.runUntil([&] { return woken >= 4; }, 2000)) << woken << " wake-ups";
  env_.runFor(3 * kNodeTimeoutMs);
  EXPECT_EQ(woken, 4);
}

TEST_F(RedlockTest, ReleaseOutcomes) {
  auto& b = makeReadyBackend();
  auto none = release(b, "l", "a");
  ASSERT_TRUE(none.isOk());
  EXPECT_EQ(*none, OutcomeCode::kNotHeld);

  ASSERT_TRUE(acquire(b, "l", "a", 5'000)->ok());
  auto wrong = release(b, "l", "b");
  ASSERT_TRUE(wrong.isOk());
  EXPECT_EQ(*wrong, OutcomeCode::kNotOwner);
  EXPECT_EQ(nodesHolding("l", "a"), 5);  // untouched

  // Our key survives on a single node only (the rest expired or were lost): still ours to
  // release there, and release reports it.
  for (int i = 1; i < kNodes; ++i) servers_[i]->cli({"DEL", key("l")});
  auto partial = release(b, "l", "a");
  ASSERT_TRUE(partial.isOk());
  EXPECT_EQ(*partial, OutcomeCode::kOk);
  EXPECT_EQ(nodesWithKey("l"), 0);
}

TEST_F(RedlockTest, ExtendOutcomesAndNeverRecreates) {
  auto& b = makeReadyBackend();
  ASSERT_TRUE(acquire(b, "l", "a", 2'000)->ok());
  auto ok = extend(b, "l", "a", 20'000);
  ASSERT_TRUE(ok.isOk()) << ok.status().toString();
  EXPECT_EQ(ok->code, OutcomeCode::kOk);
  EXPECT_LE(ok->validity_ms, 20'000 - backend::quorum::driftMs(20'000, 0.01));
  EXPECT_GT(ok->validity_ms, 19'000);
  EXPECT_GT(std::stoll(servers_[0]->cli({"PTTL", key("l")})), 19'000);

  auto other = extend(b, "l", "b", 20'000);
  ASSERT_TRUE(other.isOk());
  EXPECT_EQ(other->code, OutcomeCode::kNotOwner);
  EXPECT_EQ(nodesHolding("l", "a"), 5);

  // The lease vanished on a majority (expiry, data loss): extend must not re-create it there,
  // the lease is lost, and what is left of it is cleaned up.
  for (int i = 0; i < 3; ++i) servers_[i]->cli({"DEL", key("l")});
  auto lost = extend(b, "l", "a", 20'000);
  ASSERT_TRUE(lost.isOk()) << lost.status().toString();
  EXPECT_EQ(lost->code, OutcomeCode::kNotHeld);
  EXPECT_EQ(nodesWithKey("l"), 0);

  auto gone = extend(b, "l", "a", 20'000);
  ASSERT_TRUE(gone.isOk());
  EXPECT_EQ(gone->code, OutcomeCode::kNotHeld);
  EXPECT_EQ(nodesWithKey("l"), 0);
}

// A lost extend whose unanswered nodes may still hold the lease leaves its keys to expire: with the
// key this extend renewed they can still make a majority, so the lease is valid for the rest of the
// validity its holder was given, and releasing them would hand the lock to a waiter elsewhere
// before the holder hears `lost` (found from outside: granted 40 ms before it, 1.9 s of validity
// left).
TEST_F(RedlockTest, ALostExtendLeavesKeysThatMayStillBeAMajorityToExpire) {
  auto& b = makeReadyBackend();
  ASSERT_TRUE(acquire(b, "l", "a", 20'000)->ok());
  for (int i = 0; i < 2; ++i) servers_[i]->cli({"DEL", key("l")});  // gone on 0, 1
  for (int i = 2; i < 4; ++i) servers_[i]->pause();                 // 2, 3 stall
  auto lost = extend(b, "l", "a", 20'000);
  for (int i = 2; i < 4; ++i) servers_[i]->resume();
  ASSERT_TRUE(lost.isOk()) << lost.status().toString();
  EXPECT_EQ(lost->code, OutcomeCode::kNotHeld) << "lost to its holder";
  EXPECT_EQ(valueOn(4, "l"), "a") << "the key it renewed stays, to expire";
  EXPECT_EQ(nodesHolding("l", "a"), 3) << "still a majority with the stalled nodes' keys";
  // Once no majority can hold it any more, what is left is released at once (as before).
  servers_[2]->cli({"DEL", key("l")});
  auto gone = extend(b, "l", "a", 20'000);
  ASSERT_TRUE(gone.isOk()) << gone.status().toString();
  EXPECT_EQ(gone->code, OutcomeCode::kNotHeld);
  EXPECT_EQ(nodesWithKey("l"), 0);
}

TEST_F(RedlockTest, ExtendNeedsAMajorityOfTheOwnersKeys) {
  auto& b = makeReadyBackend();
  ASSERT_TRUE(acquire(b, "l", "a", 20'000)->ok());
  // Another owner took three nodes (the lease had expired there and was re-granted).
  for (int i = 0; i < 3; ++i) servers_[i]->cli({"SET", key("l"), "thief", "PX", "20000"});
  auto r = extend(b, "l", "a", 20'000);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->code, OutcomeCode::kNotOwner);
  // Our two remaining keys were released; the other owner's are untouched.
  EXPECT_EQ(nodesHolding("l", "a"), 0);
  EXPECT_EQ(nodesHolding("l", "thief"), 3);
}

TEST_F(RedlockTest, InspectReportsMajorityState) {
  auto& b = makeReadyBackend();
  auto free_state = inspect(b, "l");
  ASSERT_TRUE(free_state.isOk()) << free_state.status().toString();
  EXPECT_FALSE(free_state->ok());
  EXPECT_EQ(free_state->token, 0u);

  auto g = acquire(b, "l", "a", 8'000);
  ASSERT_TRUE(g->ok());
  auto held = inspect(b, "l");
  ASSERT_TRUE(held.isOk());
  EXPECT_TRUE(held->ok());
  EXPECT_GT(held->validity_ms, 7'000);
  EXPECT_LE(held->validity_ms, 8'000);
  EXPECT_EQ(held->token, g->token) << "the lease's token, as every holding node records it";

  // Held on two nodes only: not held.
  for (int i = 0; i < 3; ++i) servers_[i]->cli({"DEL", key("l")});
  auto minority = inspect(b, "l");
  ASSERT_TRUE(minority.isOk());
  EXPECT_FALSE(minority->ok());
  EXPECT_EQ(minority->token, held->token);
}

// A read that a quorum answered but that cannot tell: fewer than a majority hold the lease, but
// the nodes that did not answer could make one with them (the lease is valid, its holder relies
// on it, and an acquire elsewhere is refused). It answers unavailable, not "free" (found from
// outside: GET said held:false and the event stream said "released" during a node's stall while
// the holder still extended its lease afterwards).
TEST_F(RedlockTest, AReadThatSilentNodesCouldMakeAMajorityCannotTell) {
  auto& b = makeReadyBackend();
  ASSERT_TRUE(acquire(b, "l", "a", 20'000)->ok());
  for (int i = 0; i < 2; ++i) servers_[i]->cli({"DEL", key("l")});  // free on 0, 1
  for (int i = 2; i < 4; ++i) servers_[i]->pause();                 // 2, 3 hold it, silent
  auto unsure = inspect(b, "l");
  EXPECT_FALSE(unsure.isOk()) << "held on 1 of 3 answering nodes, 2 silent ones may hold it";
  if (!unsure.isOk()) {
    EXPECT_EQ(unsure.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(unsure.status().message().find("may still hold"), std::string::npos)
        << unsure.status().toString();
  }
  for (int i = 2; i < 4; ++i) servers_[i]->resume();
  auto held = inspect(b, "l");
  ASSERT_TRUE(held.isOk()) << held.status().toString();
  EXPECT_TRUE(held->ok()) << "3 of 5 hold it once all answer";
  // Fewer than a majority even with the silent node: free, as before.
  servers_[2]->cli({"DEL", key("l")});
  servers_[3]->pause();
  auto free_state = inspect(b, "l");
  servers_[3]->resume();
  ASSERT_TRUE(free_state.isOk()) << free_state.status().toString();
  EXPECT_FALSE(free_state->ok());

  // An election's leader read alike.
  ASSERT_TRUE(run(b, Operation::campaign("e", "owner-a", 20'000, "pod-a", "v1"))->ok());
  for (int i = 0; i < 2; ++i) {
    servers_[i]->cli({"DEL", backend::electionKey("sidelock:", "e"),
                      backend::electionLeaderKey("sidelock:", "e")});
  }
  for (int i = 2; i < 4; ++i) servers_[i]->pause();
  auto leader = run(b, Operation::inspect("e").of(backend::LockKind::kElection));
  for (int i = 2; i < 4; ++i) servers_[i]->resume();
  EXPECT_FALSE(leader.isOk()) << "one node records the leader, two silent ones may too";
  if (!leader.isOk()) {
    EXPECT_EQ(leader.status().code(), StatusCode::kUnavailable);
  }
  auto after = run(b, Operation::inspect("e").of(backend::LockKind::kElection));
  ASSERT_TRUE(after.isOk()) << after.status().toString();
  EXPECT_TRUE(after->ok());
  EXPECT_EQ(after->leader.candidate, "pod-a");
}

// redsync's quorum matrix: every subset of the five nodes pre-filled with a foreign value.
TEST_F(RedlockTest, QuorumMatrixGrantedIffAtLeastThreeNodesFree) {
  auto& b = makeReadyBackend();
  for (int mask = 0; mask < 32; ++mask) {
    const std::string name = "matrix-" + std::to_string(mask);
    int free_nodes = 0;
    for (int i = 0; i < kNodes; ++i) {
      if (mask & (1 << i)) {
        servers_[i]->cli({"SET", key(name), "foreign", "PX", "30000"});
      } else {
        ++free_nodes;
      }
    }
    auto r = acquire(b, name, "me", 10'000);
    ASSERT_TRUE(r.isOk()) << "mask " << mask << ": " << r.status().toString();
    EXPECT_EQ(r->ok(), free_nodes >= 3) << "mask " << mask;
    if (r->ok()) {
      EXPECT_EQ(nodesHolding(name, "me"), free_nodes) << "mask " << mask;
      EXPECT_EQ(*release(b, name, "me"), OutcomeCode::kOk);
    } else {
      EXPECT_GT(r->holder_ttl_ms, 0) << "mask " << mask;
    }
    // Either way: nothing of ours is left, and the foreign keys are untouched.
    EXPECT_EQ(nodesHolding(name, "me"), 0) << "mask " << mask;
    EXPECT_EQ(nodesHolding(name, "foreign"), kNodes - free_nodes) << "mask " << mask;
  }
  EXPECT_EQ(env_.metrics().redlock_quorum_failures.Value(), 0);
}

// Lock "t" with diverged counters: node 0's ran far ahead (100, the others 50; counters that
// exist are INCRed, not re-seeded), and nodes 3 and 4 are taken by a foreign owner, so the
// granting majority must be {0, 1, 2} whatever order the answers arrive in (the backend decides
// as soon as a majority said yes). The next grant's token is 101.
void divergeCountersAndTakeNodes3And4(std::vector<std::unique_ptr<RedisServer>>& servers,
                                      uint64_t base) {
  servers[0]->cli({"SET", backend::tokenKey("sidelock:", "t"), std::to_string(base + 100)});
  for (size_t i = 1; i < servers.size(); ++i) {
    servers[i]->cli({"SET", backend::tokenKey("sidelock:", "t"), std::to_string(base + 50)});
  }
  for (size_t i = 3; i < servers.size(); ++i) {
    servers[i]->cli({"SET", backend::lockKey("sidelock:", "t"), "foreign", "PX", "30000"});
  }
}

// Failed attempts INCR counters on minority nodes, so the nodes' counters drift apart. The
// winner's token sync keeps "max over a majority" strictly increasing anyway.
TEST_F(RedlockTest, TokensStrictlyIncreaseAcrossDivergedCounters) {
  auto& b = makeReadyBackend();
  divergeCountersAndTakeNodes3And4(servers_, aboveClock(0));
  auto first = acquire(b, "t", "a", 5'000);
  ASSERT_TRUE(first->ok());
  EXPECT_EQ(first->token, aboveClock(101));
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_EQ(servers_[i]->cli({"GET", counterKey("t")}), aboveClockText(101)) << "node " << i;
  }
  ASSERT_EQ(*release(b, "t", "a"), OutcomeCode::kOk);
  servers_[3]->cli({"DEL", key("t")});
  servers_[4]->cli({"DEL", key("t")});
  // The node that ran ahead is now taken by a foreign key: the next majority excludes it.
  servers_[0]->cli({"SET", key("t"), "foreign", "PX", "30000"});
  auto second = acquire(b, "t", "b", 5'000);
  ASSERT_TRUE(second->ok());
  EXPECT_GT(second->token, first->token);
}

// A node that grants after the vote was decided (it answered late) holds the lease too, and counts
// from its own counter: here far ahead, as one seeded from a later clock reading is. Reads name
// the lease's token anyway (the grant record the token sync writes there), and once the lock is
// free the last grant's (the one a majority records), never the late node's counter: a stream of
// lock events would otherwise see the lease change hands, and a later grant that skips the node
// go backwards.
TEST_F(RedlockTest, ReadsNameTheLeasesTokenNotALateNodesCounter) {
  auto& b = makeReadyBackend();
  for (int i = 0; i < 4; ++i) servers_[i]->cli({"SET", counterKey("t"), aboveClockText(50)});
  servers_[4]->cli({"SET", counterKey("t"), aboveClockText(1000000)});
  servers_[4]->pause();
  auto g = acquire(b, "t", "a", 30'000);
  servers_[4]->resume();
  ASSERT_TRUE(g.isOk()) << g.status().toString();
  ASSERT_TRUE(g->ok());
  EXPECT_EQ(g->token, aboveClock(51)) << "decided by nodes 0-3";
  // Node 4 runs the acquire it queued while paused, then the token sync behind it.
  ASSERT_TRUE(env_.runUntil([&] { return valueOn(4, "t") == "a"; }, 5000))
      << "node 4 never granted late";
  ASSERT_TRUE(env_.runUntil(
      [&] {
        return servers_[4]->cli({"GET", backend::grantRecordKey("sidelock:", "t")}) ==
               aboveClockText(51) + " a";
      },
      5000))
      << "node 4's grant record: "
      << servers_[4]->cli({"GET", backend::grantRecordKey("sidelock:", "t")});
  EXPECT_EQ(servers_[4]->cli({"GET", counterKey("t")}), aboveClockText(1000001))
      << "its own counter, unlowered";
  auto held = inspect(b, "t");
  ASSERT_TRUE(held.isOk()) << held.status().toString();
  ASSERT_TRUE(held->ok());
  EXPECT_EQ(held->token, aboveClock(51));
  auto shared_view = run(b, Operation::inspect("t").of(backend::LockKind::kShared));
  ASSERT_TRUE(shared_view.isOk()) << shared_view.status().toString();
  EXPECT_EQ(shared_view->token, aboveClock(51))
      << "as the events stream reads it (a writer holds it)";
  // An extend keeps the records as long as the counters (a lease renewed past the counter's TTL
  // keeps its token).
  const std::string record = backend::grantRecordKey("sidelock:", "t");
  for (auto& s : servers_) s->cli({"PEXPIRE", record, "5000"});
  auto extended = extend(b, "t", "a", 30'000);
  ASSERT_TRUE(extended.isOk()) << extended.status().toString();
  ASSERT_TRUE(extended->ok());
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_GT(std::stoll(servers_[i]->cli({"PTTL", record})), 60'000) << "node " << i;
  }

  ASSERT_EQ(*release(b, "t", "a"), OutcomeCode::kOk);
  auto free_state = inspect(b, "t");
  ASSERT_TRUE(free_state.isOk()) << free_state.status().toString();
  EXPECT_FALSE(free_state->ok());
  EXPECT_EQ(free_state->token, aboveClock(51)) << "the last grant's token, not node 4's counter";

  // The next grant skips node 4 (taken by a foreign owner): 52, and reads say so.
  servers_[4]->cli({"SET", key("t"), "foreign", "PX", "30000"});
  auto second = acquire(b, "t", "b", 30'000);
  ASSERT_TRUE(second.isOk()) << second.status().toString();
  ASSERT_TRUE(second->ok());
  EXPECT_EQ(second->token, aboveClock(52));
  auto held_again = inspect(b, "t");
  ASSERT_TRUE(held_again.isOk()) << held_again.status().toString();
  EXPECT_EQ(held_again->token, aboveClock(52));
  EXPECT_EQ(*release(b, "t", "b"), OutcomeCode::kOk);
}

// A read that lands inside a grant's token sync (a holding node still reports its own token)
// reads again until every holding node reports the same token, for at most 2 x node_timeout_ms;
// then it names the token a majority records, if one does. The state mid-sync is written by
// hand: nodes 0-2 hold the lease of "a" (3 of 5); node 1 granted late, counting from 62, and its
// record is not there yet. The highest token seen (62) is never the answer.
TEST_F(RedlockTest, AReadInsideATokenSyncWaitsForIt) {
  auto& b = makeReadyBackend();
  const std::string record = backend::grantRecordKey("sidelock:", "s");
  for (int i = 0; i < 3; ++i) {
    servers_[i]->cli({"SET", key("s"), "a", "PX", "30000"});
    servers_[i]->cli({"SET", counterKey("s"), i == 1 ? "62" : "61"});
    if (i != 1) servers_[i]->cli({"SET", record, "61 a", "PX", "60000"});
  }
  const auto started = std::chrono::steady_clock::now();
  env_.scheduler().runAfter(100, [&] { servers_[1]->cli({"SET", record, "61 a", "PX", "60000"}); });
  auto settled = inspect(b, "s");
  ASSERT_TRUE(settled.isOk()) << settled.status().toString();
  ASSERT_TRUE(settled->ok());
  EXPECT_EQ(settled->token, 61u);
  EXPECT_GE(msSince(started), 100) << "answered before node 1 recorded the token";
  EXPECT_EQ(env_.metrics().redlock_reads_settled.Value(), 1);

  // A sync that never comes: after the budget, the token most nodes record.
  servers_[1]->cli({"SET", record, "62 a", "PX", "60000"});
  servers_[3]->cli({"SET", key("s"), "a", "PX", "30000"});
  servers_[3]->cli({"SET", record, "61 a", "PX", "60000"});
  const auto again = std::chrono::steady_clock::now();
  auto fallback = inspect(b, "s");
  ASSERT_TRUE(fallback.isOk()) << fallback.status().toString();
  ASSERT_TRUE(fallback->ok());
  EXPECT_EQ(fallback->token, 61u) << "nodes 0, 2 and 3 record 61, node 1 62";
  EXPECT_GE(msSince(again), 2 * kNodeTimeoutMs - 50) << "the read gave up before its budget";
  EXPECT_EQ(env_.metrics().redlock_reads_gave_up.Value(), 1);
  EXPECT_EQ(env_.metrics().redlock_reads_settled.Value(), 1);
}

// A refused acquire says lock_delay when the nodes in their lock-delay are what kept it from a
// majority, even if other nodes still hold the ended lease (a node that granted it late lets it
// expire late); when the lease's holders alone are a majority, it is held.
TEST_F(RedlockTest, LockDelayIsTheReasonWhenTheDelayedNodesWouldHaveMadeAMajority) {
  auto& b = makeReadyBackend();
  const std::string delay = backend::lockDelayKey("sidelock:", "d");
  for (int i = 0; i < 3; ++i) servers_[i]->cli({"SET", delay, "5000", "PX", "5000"});
  for (int i = 3; i < kNodes; ++i) servers_[i]->cli({"SET", key("d"), "a", "PX", "5000"});
  auto refused = acquire(b, "d", "b", 10'000);
  ASSERT_TRUE(refused.isOk()) << refused.status().toString();
  EXPECT_EQ(refused->code, OutcomeCode::kBusy);
  EXPECT_EQ(refused->busy_reason, backend::BusyReason::kLockDelay);
  EXPECT_GT(refused->holder_ttl_ms, 0);

  servers_[2]->cli({"DEL", delay});
  servers_[2]->cli({"SET", key("d"), "a", "PX", "5000"});
  auto held = acquire(b, "d", "b", 10'000);
  ASSERT_TRUE(held.isOk()) << held.status().toString();
  EXPECT_EQ(held->code, OutcomeCode::kBusy);
  EXPECT_EQ(held->busy_reason, backend::BusyReason::kHeld) << "three of five hold the lease";
}

// Issue 10 finding 3: the token must be recorded on every node of the granting majority, not on
// any majority. Node 1 grants but cannot record the token (its user may not GET, which the token
// sync script needs and the acquire script does not); nodes 0 and 2 plus the two non-granting
// nodes would make a majority of confirmations, yet node 1's counter would stay below the token.
TEST_F(RedlockTest, TokenSyncWaitsForEveryGrantingNode) {
  auto& b = makeReadyBackend();
  divergeCountersAndTakeNodes3And4(servers_, aboveClock(0));
  ASSERT_EQ(servers_[1]->cli({"ACL", "SETUSER", "default", "-get"}), "OK");
  auto r = acquire(b, "t", "a", 5'000);
  ASSERT_EQ(servers_[1]->cli({"ACL", "SETUSER", "default", "+get"}), "OK");
  ASSERT_FALSE(r.isOk()) << "granted with token " << r->token
                         << " although node 1 of the granting majority still counts from "
                         << servers_[1]->cli({"GET", counterKey("t")});
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().toString();
  EXPECT_NE(r.status().message().find("token"), std::string::npos) << r.status().toString();
  // The attempt was released where it could be (node 1's release script needs GET too).
  EXPECT_EQ(valueOn(0, "t"), "");
  EXPECT_EQ(valueOn(2, "t"), "");
}

// Issue 10 finding 3: an extend that wins its majority with no validity left must not leave the
// keys extended. Three nodes are paused past the validity (drift_factor 0.5 makes the validity of
// a 1 s TTL ~0.5 s), then resumed: the extend wins, too late, and must roll the keys back.
TEST_F(RedlockTest, ExtendThatWinsWithNoValidityLeftReleasesTheKeys) {
  auto& b = makeSlowVoteBackend();
  auto g = acquire(b, "late", "a", 60'000);
  ASSERT_TRUE(g.isOk() && g->ok()) << g.status().toString();

  constexpr int64_t kTtlMs = 1'000;
  const int64_t no_validity_after_ms = kTtlMs - backend::quorum::driftMs(kTtlMs, 0.5);
  event::ScopedTimer resume;
  pauseFirstNodesFor(3, no_validity_after_ms + 200, resume);
  auto e = extend(b, "late", "a", kTtlMs);
  ASSERT_FALSE(e.isOk()) << "extended with validity " << e->validity_ms;
  EXPECT_EQ(e.status().code(), StatusCode::kDeadlineExceeded) << e.status().toString();
  EXPECT_EQ(nodesWithKey("late"), 0) << "keys extended too late were left behind";
}

// An acquire that wins its majority with no validity left is given up before its token sync: no
// grant was made, so no counter may be raised to its token (a free lock would read as a token
// nobody was granted). Nodes 0-2 count from 500, nodes 3 and 4 from 100; nodes 0-2 are paused
// longer than the whole validity (drift_factor 0.5: a 2 s TTL leaves ~1 s), so nodes 3 and 4
// grant at once (101) and the vote is won, too late, when the paused nodes answer (501). The
// sync would have raised nodes 3 and 4 to 501 before answering (they are granting nodes); given
// up first, they keep their own INCR. No timing is asserted: the pause alone exceeds the validity.
TEST_F(RedlockTest, AcquireThatWinsWithNoValidityLeftRaisesNoCounter) {
  auto& b = makeSlowVoteBackend();
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_EQ(servers_[i]->cli(
                  {"SET", counterKey("nv"), i < 3 ? aboveClockText(500) : aboveClockText(100)}),
              "OK");
  }

  constexpr int64_t kTtlMs = 2'000;
  const int64_t validity_at_most_ms = backend::quorum::validityMs(kTtlMs, 0, 0.5);
  event::ScopedTimer resume;
  pauseFirstNodesFor(3, validity_at_most_ms + 500, resume);
  auto r = acquire(b, "nv", "a", kTtlMs);
  ASSERT_FALSE(r.isOk()) << "granted with validity " << r->validity_ms;
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().toString();
  EXPECT_NE(r.status().message().find("the vote took "), std::string::npos)
      << "given up before any token sync: " << r.status().message();
  env_.runFor(200);  // a sync sent anyway would have landed by now
  for (int i = 3; i < kNodes; ++i) {
    EXPECT_EQ(servers_[i]->cli({"GET", counterKey("nv")}), aboveClockText(101))
        << "node " << i << "'s counter was raised to the token of a grant given up";
  }
  EXPECT_EQ(nodesWithKey("nv"), 0) << "the attempt's keys were left behind";
}

TEST_F(RedlockTest, ReleaseWakesWatchersOncePerRelease) {
  auto& waiter_side = makeReadyBackend();
  auto& holder_side = makeReadyBackend();
  std::vector<std::string> woken;
  waiter_side.setReleaseListener([&](std::string_view name, std::string_view reason) {
    // A grant is announced too (one event, coalesced like the others): waiters wake on releases.
    if (backend::announcement::freesLock(reason)) woken.emplace_back(name);
  });
  waiter_side.watchReleases("w");
  env_.runFor(200);  // let SUBSCRIBE reach every node

  ASSERT_TRUE(acquire(holder_side, "w", "h", 5'000)->ok());
  ASSERT_EQ(*release(holder_side, "w", "h"), OutcomeCode::kOk);  // published on all five nodes
  ASSERT_TRUE(env_.runUntil([&] { return !woken.empty(); }, 2000));
  env_.runFor(3 * kNodeTimeoutMs);
  ASSERT_EQ(woken.size(), 1u);
  EXPECT_EQ(woken[0], "w");

  // After the dedupe window, the next release wakes again.
  ASSERT_TRUE(acquire(holder_side, "w", "h", 5'000)->ok());
  ASSERT_EQ(*release(holder_side, "w", "h"), OutcomeCode::kOk);
  ASSERT_TRUE(env_.runUntil([&] { return woken.size() >= 2; }, 2000));
  env_.runFor(3 * kNodeTimeoutMs);
  EXPECT_EQ(woken.size(), 2u);

  // Unwatched: no more wake-ups.
  waiter_side.unwatchReleases("w");
  env_.runFor(100);
  ASSERT_TRUE(acquire(holder_side, "w", "h", 5'000)->ok());
  ASSERT_EQ(*release(holder_side, "w", "h"), OutcomeCode::kOk);
  env_.runFor(3 * kNodeTimeoutMs);
  EXPECT_EQ(woken.size(), 2u);
}

// Several sidecars (backends with their own connections), several clients each, doing a
// read-modify-write on a shared resource under the lock: no lost update, and the resource sees
// strictly increasing fencing tokens (it would reject a stale one).
TEST_F(RedlockTest, ConcurrentReadModifyWriteLosesNoUpdate) {
  constexpr int kBackends = 3;
  constexpr int kClientsPerBackend = 4;
  constexpr int kIncrementsPerClient = 8;
  std::vector<backend::RedlockBackend*> sidecars;
  for (int i = 0; i < kBackends; ++i) sidecars.push_back(&makeReadyBackend());

  struct Resource {
    int64_t value = 0;
    uint64_t last_token = 0;
    int stale_tokens = 0;
    int in_critical = 0;
    int overlaps = 0;
  } resource;
  int finished_clients = 0;
  int errors = 0;
  auto& sched = env_.scheduler();

  struct Client {
    backend::Backend* b = nullptr;
    std::string owner;
    int done = 0;
    int attempt = 0;
    std::function<void()> step;
  };
  std::vector<std::unique_ptr<Client>> clients;
  for (int s = 0; s < kBackends; ++s) {
    for (int c = 0; c < kClientsPerBackend; ++c) {
      auto client = std::make_unique<Client>();
      client->b = sidecars[s];
      client->owner = randomOwnerId();
      Client* cl = client.get();
      cl->step = [&, cl] {
        cl->b->run(backend::Operation::acquire("counter", cl->owner, 2'000),
                   [&, cl](StatusOr<backend::Outcome> r) {
                     if (!r.isOk() || !r->ok()) {
                       if (!r.isOk()) ++errors;
                       // Randomized backoff so competing clients do not retry in lockstep.
                       const int64_t delay =
                           (int64_t{1} << std::min(cl->attempt++, 4)) + jitterBetween(0, 5);
                       sched.runAfter(delay, cl->step);
                       return;
                     }
                     cl->attempt = 0;
                     const uint64_t token = r->token;
                     if (token <= resource.last_token) ++resource.stale_tokens;
                     resource.last_token = token;
                     if (++resource.in_critical > 1) ++resource.overlaps;
                     const int64_t read = resource.value;
                     // The "write" lands on a later loop turn: an overlapping holder would lose an
                     // update.
                     sched.runAfter(1, [&, cl, read] {
                       resource.value = read + 1;
                       --resource.in_critical;
                       cl->b->run(backend::Operation::release("counter", cl->owner),
                                  [&, cl](StatusOr<backend::Outcome> rel) {
                                    if (!rel.isOk() || rel->code != OutcomeCode::kOk) ++errors;
                                    if (++cl->done == kIncrementsPerClient) {
                                      ++finished_clients;
                                    } else {
                                      cl->step();
                                    }
                                  });
                     });
                   });
      };
      clients.push_back(std::move(client));
    }
  }
  for (auto& c : clients) c->step();
  const int total_clients = kBackends * kClientsPerBackend;
  ASSERT_TRUE(env_.runUntil([&] { return finished_clients == total_clients; }, 60'000))
      << finished_clients << " of " << total_clients << " clients finished";
  EXPECT_EQ(resource.value, total_clients * kIncrementsPerClient);
  EXPECT_EQ(resource.overlaps, 0);
  EXPECT_EQ(resource.stale_tokens, 0);
  EXPECT_EQ(errors, 0);
  EXPECT_GE(resource.last_token, static_cast<uint64_t>(total_clients * kIncrementsPerClient));
  EXPECT_EQ(nodesWithKey("counter"), 0);
}

// Read/write locks on Redlock (issue 22): a queued writer turned away by readers is marked on
// every node and says so; its withdrawal removes the mark from every node, and readers get in.
TEST_F(RedlockTest, AQueuedWritersMarkIsWithdrawnFromEveryNode) {
  auto& b = makeReadyBackend();
  auto reader = run(b, Operation::acquireShared("doc", "r1", 30'000));
  ASSERT_TRUE(reader.isOk() && reader->ok())
      << (reader.isOk() ? "busy" : reader.status().toString());
  Operation writer = Operation::acquire("doc", "w1", 30'000);
  writer.writer_wait_ms = 60'000;
  auto turned_away = run(b, writer);
  ASSERT_TRUE(turned_away.isOk()) << turned_away.status().toString();
  EXPECT_EQ(turned_away->code, OutcomeCode::kBusy);
  EXPECT_TRUE(turned_away->writer_marked);
  const std::string mark = backend::writerMarkKey("sidelock:", "doc");
  for (int i = 0; i < kNodes; ++i) EXPECT_EQ(servers_[i]->cli({"EXISTS", mark}), "1") << i;
  EXPECT_EQ(run(b, Operation::acquireShared("doc", "r2", 30'000))->code, OutcomeCode::kBusy)
      << "the mark keeps new readers out";

  auto withdrawn = run(b, Operation::withdraw("doc", "w1").of(backend::LockKind::kMutex));
  ASSERT_TRUE(withdrawn.isOk()) << withdrawn.status().toString();
  EXPECT_EQ(withdrawn->code, OutcomeCode::kOk);
  for (int i = 0; i < kNodes; ++i) EXPECT_EQ(servers_[i]->cli({"EXISTS", mark}), "0") << i;
  EXPECT_EQ(run(b, Operation::acquireShared("doc", "r2", 30'000))->code, OutcomeCode::kOk);
}

}  // namespace
}  // namespace sidelock::testing
