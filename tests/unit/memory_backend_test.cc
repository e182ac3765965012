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
  backend.setReleaseListener([&](std::string_view n) { heard.emplace_back(n); });
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
