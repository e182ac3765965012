#include "backend/memory_backend.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "event/fake_scheduler.h"

namespace sidelock::backend {
namespace {

class MemoryBackendTest : public ::testing::Test {
 protected:
  template <typename T>
  struct Slot {
    std::optional<T> value;
    auto cb() {
      return [this](T v) { value.emplace(std::move(v)); };
    }
  };

  StatusOr<Outcome> acquire(std::string_view name, std::string_view owner, int64_t ttl) {
    Slot<StatusOr<Outcome>> s;
    backend.run(Operation::acquire(name, owner, ttl), s.cb());
    EXPECT_FALSE(s.value) << "callback ran inside the call";
    sched.runReady();
    return std::move(*s.value);
  }
  /// Just the code: what release tests compare.
  StatusOr<OutcomeCode> release(std::string_view name, std::string_view owner) {
    Slot<StatusOr<Outcome>> s;
    backend.run(Operation::release(name, owner), s.cb());
    EXPECT_FALSE(s.value);
    sched.runReady();
    if (!s.value->isOk()) return s.value->status();
    return (*s.value)->code;
  }
  StatusOr<Outcome> extend(std::string_view name, std::string_view owner, int64_t ttl) {
    Slot<StatusOr<Outcome>> s;
    backend.run(Operation::extend(name, owner, ttl), s.cb());
    EXPECT_FALSE(s.value);
    sched.runReady();
    return std::move(*s.value);
  }
  StatusOr<Outcome> inspect(std::string_view name) {
    Slot<StatusOr<Outcome>> s;
    backend.run(Operation::inspect(name), s.cb());
    EXPECT_FALSE(s.value);
    sched.runReady();
    return std::move(*s.value);
  }

  StatusOr<Outcome> run(const Operation& op) {
    Slot<StatusOr<Outcome>> s;
    backend.run(op, s.cb());
    EXPECT_FALSE(s.value) << "callback ran inside the call";
    sched.runReady();
    return std::move(*s.value);
  }

  event::FakeScheduler sched;
  MemoryBackend backend{sched};
};

TEST_F(MemoryBackendTest, GrantsOnceAndReportsHolderTtlToOthers) {
  auto a = acquire("x", "alice", 1000);
  ASSERT_TRUE(a.isOk());
  EXPECT_TRUE(a->ok());
  EXPECT_EQ(a->token, 1u);
  EXPECT_EQ(a->validity_ms, 1000);
  sched.advanceMs(400);
  auto b = acquire("x", "bob", 1000);
  ASSERT_TRUE(b.isOk());
  EXPECT_FALSE(b->ok());
  EXPECT_EQ(b->holder_ttl_ms, 600);
  // Same owner again is not re-entrant: SET NX semantics.
  EXPECT_FALSE(acquire("x", "alice", 1000)->ok());
  EXPECT_TRUE(acquire("y", "bob", 1000)->ok());
}

TEST_F(MemoryBackendTest, TokensStrictlyIncreaseAcrossReleaseAndExpiry) {
  uint64_t last = 0;
  for (int i = 0; i < 5; ++i) {
    auto a = acquire("x", "o" + std::to_string(i), 100);
    ASSERT_TRUE(a->ok());
    EXPECT_GT(a->token, last);
    last = a->token;
    if (i % 2 == 0) {
      EXPECT_EQ(*release("x", "o" + std::to_string(i)), OutcomeCode::kOk);
    } else {
      sched.advanceMs(100);  // expires exactly at its TTL
    }
  }
  EXPECT_EQ(inspect("x")->token, last);
  EXPECT_FALSE(inspect("x")->ok());
}

TEST_F(MemoryBackendTest, ReleaseAndExtendAreOwnerChecked) {
  ASSERT_TRUE(acquire("x", "alice", 1000)->ok());
  EXPECT_EQ(*release("x", "bob"), OutcomeCode::kNotOwner);
  EXPECT_EQ(extend("x", "bob", 5000)->code, OutcomeCode::kNotOwner);
  EXPECT_EQ(*release("nope", "alice"), OutcomeCode::kNotHeld);
  sched.advanceMs(900);
  auto e = extend("x", "alice", 5000);
  EXPECT_EQ(e->code, OutcomeCode::kOk);
  EXPECT_EQ(e->validity_ms, 5000);
  sched.advanceMs(4000);
  EXPECT_TRUE(inspect("x")->ok());
  EXPECT_EQ(inspect("x")->validity_ms, 1000);
  EXPECT_EQ(*release("x", "alice"), OutcomeCode::kOk);
  EXPECT_EQ(*release("x", "alice"), OutcomeCode::kNotHeld);
}

TEST_F(MemoryBackendTest, ExtendNeverResurrectsAnExpiredLease) {
  ASSERT_TRUE(acquire("x", "alice", 100)->ok());
  sched.advanceMs(100);
  EXPECT_EQ(extend("x", "alice", 1000)->code, OutcomeCode::kNotHeld);
  EXPECT_FALSE(inspect("x")->ok());
}

TEST_F(MemoryBackendTest, BadArgumentsAreErrorsNotGrants) {
  auto a = acquire("x", "", 100);
  ASSERT_FALSE(a.isOk());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(acquire("x", "alice", 0).isOk());
  EXPECT_FALSE(inspect("x")->ok());
}

TEST_F(MemoryBackendTest, ReleaseNotifiesOnlyWatchedNamesOnALaterTurn) {
  std::vector<std::string> heard;
  backend.setReleaseListener([&](std::string_view n, std::string_view) { heard.emplace_back(n); });
  ASSERT_TRUE(acquire("x", "a", 1000)->ok());
  ASSERT_TRUE(acquire("y", "a", 1000)->ok());
  backend.watchReleases("x");
  backend.watchReleases("x");
  EXPECT_EQ(backend.watchedNames(), 1u);
  EXPECT_EQ(*release("y", "a"), OutcomeCode::kOk);
  EXPECT_EQ(*release("x", "a"), OutcomeCode::kOk);
  EXPECT_EQ(heard, std::vector<std::string>({"x"}));
  backend.unwatchReleases("x");
  EXPECT_EQ(backend.watchedNames(), 1u);  // counted watches
  backend.unwatchReleases("x");
  EXPECT_EQ(backend.watchedNames(), 0u);
  ASSERT_TRUE(acquire("x", "a", 1000)->ok());
  EXPECT_EQ(*release("x", "a"), OutcomeCode::kOk);
  EXPECT_EQ(heard.size(), 1u);
}

// An election (the reference model of election_*.lua): one leader, whose campaign records the
// candidate, value and since; the term is its own counter's; a proclaim keeps the term and TTL.
TEST_F(MemoryBackendTest, ElectionLeadsOneAtATimeAndRecordsWhoLeads) {
  const auto election = LockKind::kElection;
  auto leader = run(Operation::inspect("e").of(election));
  ASSERT_TRUE(leader.isOk());
  EXPECT_EQ(leader->code, OutcomeCode::kNotHeld);
  EXPECT_EQ(leader->token, 0u) << "never elected";

  const int64_t wall_before = sched.wallClockMs();
  auto a = run(Operation::campaign("e", "owner-a", 1000, "node-a", "10.0.0.1:80"));
  ASSERT_TRUE(a.isOk()) << a.status().toString();
  EXPECT_TRUE(a->ok());
  EXPECT_EQ(a->token, 1u);
  EXPECT_EQ(a->validity_ms, 1000);
  EXPECT_EQ(a->holds, 1);
  EXPECT_EQ(a->leader.since_ms, wall_before) << "the scheduler's wall clock at the grant";

  // Busy for another candidate, and for the leader itself (no re-entry).
  sched.advanceMs(300);
  auto b = run(Operation::campaign("e", "owner-b", 1000, "node-b", ""));
  EXPECT_EQ(b->code, OutcomeCode::kBusy);
  EXPECT_EQ(b->busy_reason, BusyReason::kHeld);
  EXPECT_EQ(b->holder_ttl_ms, 700);
  auto again = run(Operation::campaign("e", "owner-a", 1000, "node-a", ""));
  EXPECT_EQ(again->code, OutcomeCode::kBusy);
  EXPECT_EQ(again->busy_reason, BusyReason::kHeldByYou);

  // Its own keys: the mutex and the election of one name never meet.
  ASSERT_TRUE(acquire("e", "owner-m", 1000)->ok());
  EXPECT_EQ(inspect("e")->token, 1u) << "the mutex's own counter";

  leader = run(Operation::inspect("e").of(election));
  ASSERT_TRUE(leader->ok());
  EXPECT_EQ(leader->token, 1u) << "the term";
  EXPECT_EQ(leader->validity_ms, 700);
  EXPECT_EQ(leader->leader.candidate, "node-a");
  EXPECT_EQ(leader->leader.value, "10.0.0.1:80");
  EXPECT_EQ(leader->leader.since_ms, wall_before);

  // Proclaim: owner-checked; the value changes, the term and the TTL stay.
  EXPECT_EQ(run(Operation::proclaim("e", "owner-b", "x"))->code, OutcomeCode::kNotOwner);
  auto proclaimed = run(Operation::proclaim("e", "owner-a", "10.0.0.1:81"));
  ASSERT_TRUE(proclaimed->ok());
  EXPECT_EQ(proclaimed->token, 1u);
  EXPECT_EQ(proclaimed->validity_ms, 700);
  leader = run(Operation::inspect("e").of(election));
  EXPECT_EQ(leader->leader.value, "10.0.0.1:81");
  EXPECT_EQ(leader->leader.since_ms, wall_before) << "the same term began then";

  // Renew: owner-checked, never re-creates.
  EXPECT_EQ(run(Operation::extend("e", "owner-b", 5000).of(election))->code,
            OutcomeCode::kNotOwner);
  auto renewed = run(Operation::extend("e", "owner-a", 5000).of(election));
  ASSERT_TRUE(renewed->ok());
  EXPECT_EQ(renewed->validity_ms, 5000);
  EXPECT_EQ(renewed->holds, 1);

  // Resign: owner-checked; nobody leads after it, the term stays readable; the next term is
  // above it, with its own record.
  EXPECT_EQ(run(Operation::release("e", "owner-b").of(election))->code, OutcomeCode::kNotOwner);
  auto resigned = run(Operation::release("e", "owner-a").of(election));
  ASSERT_TRUE(resigned->ok());
  EXPECT_EQ(resigned->holds, 0);
  EXPECT_EQ(run(Operation::release("e", "owner-a").of(election))->code, OutcomeCode::kNotHeld);
  EXPECT_EQ(run(Operation::proclaim("e", "owner-a", "x"))->code, OutcomeCode::kNotHeld);
  EXPECT_EQ(run(Operation::extend("e", "owner-a", 1).of(election))->code, OutcomeCode::kNotHeld);
  leader = run(Operation::inspect("e").of(election));
  EXPECT_EQ(leader->code, OutcomeCode::kNotHeld);
  EXPECT_EQ(leader->token, 1u);
  EXPECT_TRUE(leader->leader.candidate.empty()) << "the record went with the lease";
  sched.advanceMs(50);
  auto b2 = run(Operation::campaign("e", "owner-b", 1000, "node-b", ""));
  ASSERT_TRUE(b2->ok());
  EXPECT_EQ(b2->token, 2u) << "a new term";
  EXPECT_EQ(b2->leader.since_ms, wall_before + 350);
  leader = run(Operation::inspect("e").of(election));
  EXPECT_EQ(leader->leader.candidate, "node-b");
  EXPECT_EQ(leader->leader.value, "");

  // A lapsed term: nobody leads; the next campaign wins a term above.
  sched.advanceMs(1000);
  EXPECT_EQ(run(Operation::inspect("e").of(election))->code, OutcomeCode::kNotHeld);
  EXPECT_EQ(run(Operation::proclaim("e", "owner-b", "late"))->code, OutcomeCode::kNotHeld);
  EXPECT_EQ(run(Operation::campaign("e", "owner-a", 1000, "node-a", ""))->token, 3u);
}

TEST_F(MemoryBackendTest, ElectionServesNoHandOffForceReleaseOrWithdrawAndOthersNoProclaim) {
  ASSERT_TRUE(run(Operation::campaign("e", "owner-a", 1000, "node-a", ""))->ok());
  for (const Operation& op : {Operation::handOff("e", "owner-a", "owner-b", 1000),
                              Operation::forceRelease("e"), Operation::withdraw("e", "owner-a")}) {
    auto refused = run(op.of(LockKind::kElection));
    ASSERT_FALSE(refused.isOk()) << verbName(op.verb);
    EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(run(Operation::inspect("e").of(LockKind::kElection))->leader.candidate, "node-a");
  for (LockKind kind :
       {LockKind::kMutex, LockKind::kFair, LockKind::kShared, LockKind::kSemaphore}) {
    auto refused = run(Operation::proclaim("e", "owner-a", "v").of(kind));
    ASSERT_FALSE(refused.isOk()) << lockKindName(kind);
    EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(run(Operation::campaign("e", "", 1000, "c", "")).status().code(),
            StatusCode::kInvalidArgument);
}

// Each announcement says what changed (the Redis scripts' pub/sub payload): a grant wakes no
// waiter, a release and a force release do.
TEST_F(MemoryBackendTest, AnnouncementsCarryTheirReason) {
  std::vector<std::string> heard;
  backend.setReleaseListener([&](std::string_view n, std::string_view reason) {
    heard.emplace_back(std::string(n) + " " + std::string(reason));
  });
  backend.watchReleases("g");
  ASSERT_TRUE(acquire("g", "a", 1000)->ok());
  EXPECT_EQ(*release("g", "a"), OutcomeCode::kOk);
  ASSERT_TRUE(acquire("g", "b", 1000)->ok());
  ASSERT_TRUE(run(Operation::forceRelease("g"))->ok());
  EXPECT_EQ(heard, std::vector<std::string>({"g granted", "g released", "g granted", "g forced"}));
  // A multi-lock's one-step grant is announced for each watched name (as acquire_all.lua).
  backend.watchReleases("h");
  Slot<StatusOr<AllOutcome>> all;
  backend.acquireAll({"g", "h"}, "c", 1000, "", all.cb());
  sched.runReady();
  ASSERT_TRUE(all.value && all.value->isOk() && (*all.value)->granted);
  EXPECT_EQ(heard, std::vector<std::string>({"g granted", "g released", "g granted", "g forced",
                                             "g granted", "h granted"}));
  EXPECT_FALSE(announcement::freesLock(announcement::kGranted));
  EXPECT_TRUE(announcement::freesLock(announcement::kForced));
  EXPECT_TRUE(announcement::freesLock("g")) << "an older sidecar's payload: the lock's name";
}

// A grant, a proclaim and a resign are news to observers (announced like a release); a refused
// one is not.
TEST_F(MemoryBackendTest, ElectionNewsIsAnnounced) {
  std::vector<std::string> heard;
  backend.setReleaseListener([&](std::string_view n, std::string_view) { heard.emplace_back(n); });
  backend.watchReleases("e");
  ASSERT_TRUE(run(Operation::campaign("e", "owner-a", 1000, "node-a", ""))->ok());
  EXPECT_EQ(heard.size(), 1u) << "elected";
  EXPECT_FALSE(run(Operation::campaign("e", "owner-b", 1000, "node-b", ""))->ok());
  EXPECT_EQ(run(Operation::proclaim("e", "owner-b", "x"))->code, OutcomeCode::kNotOwner);
  EXPECT_TRUE(run(Operation::extend("e", "owner-a", 1000).of(LockKind::kElection))->ok());
  EXPECT_EQ(heard.size(), 1u) << "nothing changed for observers";
  ASSERT_TRUE(run(Operation::proclaim("e", "owner-a", "v2"))->ok());
  EXPECT_EQ(heard.size(), 2u) << "proclaimed";
  ASSERT_TRUE(run(Operation::release("e", "owner-a").of(LockKind::kElection))->ok());
  EXPECT_EQ(heard, std::vector<std::string>({"e", "e", "e"})) << "resigned";
}

TEST_F(MemoryBackendTest, TestHooksDeleteAndStealBehindTheHoldersBack) {
  ASSERT_TRUE(acquire("x", "alice", 1000)->ok());
  backend.forceOwner("x", "mallory");
  EXPECT_EQ(extend("x", "alice", 1000)->code, OutcomeCode::kNotOwner);
  backend.forceDelete("x");
  EXPECT_EQ(*release("x", "mallory"), OutcomeCode::kNotHeld);
}

TEST_F(MemoryBackendTest, HealthAndShutdown) {
  auto h = backend.health();
  EXPECT_TRUE(h.ready);
  ASSERT_EQ(h.nodes.size(), 1u);
  EXPECT_EQ(h.nodes[0].address, "memory");
  bool done = false;
  backend.shutdown([&] { done = true; });
  EXPECT_FALSE(done);
  sched.runReady();
  EXPECT_TRUE(done);
  EXPECT_FALSE(backend.health().ready);
  auto a = acquire("x", "alice", 100);
  ASSERT_FALSE(a.isOk());
  EXPECT_EQ(a.status().code(), StatusCode::kCancelled);
}

TEST_F(MemoryBackendTest, CallbacksQueuedAtDestructionNeverRun) {
  bool ran = false;
  {
    MemoryBackend b(sched);
    b.run(Operation::acquire("x", "a", 100), [&](StatusOr<Outcome>) { ran = true; });
  }
  sched.runReady();
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace sidelock::backend
