// The lifetime helpers (src/event/lifetime.h) and ScopedTimer marking itself fired, as pure logic
// on FakeScheduler.
#include "event/lifetime.h"

#include <gtest/gtest.h>
#include <uv.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "event/fake_scheduler.h"
#include "event/scheduler.h"
#include "event/uv_scheduler.h"

namespace sidelock::event {
namespace {

TEST(LivenessTokenTest, GuardedCallbackRunsOnlyWhileTheOwnerLives) {
  FakeScheduler s;
  std::vector<int> ran;
  auto owner = std::make_unique<LivenessToken>();
  s.post(owner->guarded([&] { ran.push_back(1); }));
  s.post(owner->guarded([&] { ran.push_back(2); }));
  s.runReady();
  EXPECT_EQ(ran, std::vector<int>({1, 2}));

  s.post(owner->guarded([&] { ran.push_back(3); }));
  owner.reset();  // gone before its callback runs
  s.runReady();
  EXPECT_EQ(ran, std::vector<int>({1, 2}));
}

TEST(LivenessTokenTest, GuardedForwardsArgumentsAndKeepsMutableState) {
  LivenessToken token;
  std::string seen;
  auto fn = token.guarded([&seen, calls = 0](const std::string& a, int b) mutable {
    ++calls;
    seen = a + std::to_string(b) + "#" + std::to_string(calls);
  });
  fn(std::string("x"), 1);
  fn(std::string("y"), 2);
  EXPECT_EQ(seen, "y2#2");
  // Fits a std::function of the usual callback types.
  std::function<void(std::string, int)> as_function = std::move(fn);
  as_function("z", 3);
  EXPECT_EQ(seen, "z3#3");
}

TEST(LivenessTokenTest, RefTellsWhetherTheOwnerLives) {
  LivenessToken::Ref ref;
  EXPECT_TRUE(ref.expired());  // a default Ref belongs to nobody
  {
    LivenessToken token;
    ref = token.ref();
    EXPECT_FALSE(ref.expired());
  }
  EXPECT_TRUE(ref.expired());
}

TEST(InFlightGateTest, HoldersTravelWithCallbacksAndCountDownWhenDestroyed) {
  FakeScheduler s;
  InFlightGate gate;
  int drained = 0;
  gate.onDrained([&] { ++drained; });
  EXPECT_TRUE(gate.idle());
  s.post([h = gate.hold()] {});
  s.post([h = gate.hold()] {});
  EXPECT_EQ(gate.inFlight(), 2);
  EXPECT_FALSE(gate.idle());
  s.runReady();  // both callbacks ran and were destroyed
  EXPECT_EQ(gate.inFlight(), 0);
  EXPECT_EQ(drained, 1);  // once, when the count fell to zero
}

TEST(InFlightGateTest, ReleaseIsExplicitIdempotentAndCopiesShareOneCount) {
  InFlightGate gate;
  int drained = 0;
  gate.onDrained([&] { ++drained; });
  InFlightGate::Holder a = gate.hold();
  InFlightGate::Holder b = std::move(a);
  EXPECT_FALSE(a.holds());  // NOLINT(bugprone-use-after-move): moved-from holds nothing
  EXPECT_TRUE(b.holds());
  EXPECT_EQ(gate.inFlight(), 1);
  {
    InFlightGate::Holder copy = b;  // a copied callback: still one piece of work
    EXPECT_EQ(gate.inFlight(), 1);
  }
  EXPECT_EQ(gate.inFlight(), 1);
  InFlightGate::Holder copy = b;
  InFlightGate::Holder c = gate.hold();
  b.release();
  b.release();
  EXPECT_FALSE(copy.holds());  // released through any copy
  copy.release();
  EXPECT_EQ(gate.inFlight(), 1);
  EXPECT_EQ(drained, 0);
  c = gate.hold();  // assigning over a holder gives its count back first
  EXPECT_EQ(gate.inFlight(), 1);
  c.release();
  EXPECT_EQ(drained, 1);
  EXPECT_TRUE(gate.idle());
}

TEST(InFlightGateTest, AHolderMayOutliveItsGate) {
  int drained = 0;
  std::optional<InFlightGate::Holder> late;
  {
    InFlightGate gate;
    gate.onDrained([&] { ++drained; });
    late = gate.hold();
  }
  late.reset();  // touches only the shared count: no hook, no crash (ASan checks)
  EXPECT_EQ(drained, 0);
}

struct Owner {
  ReentryDepth depth;
  std::vector<std::string> log;
  bool destroy_on_settle = false;
};

TEST(ReentryScopeTest, OnlyTheOutermostExitSettles) {
  for (SettleWhen when : {SettleWhen::kBeforeLeaving, SettleWhen::kAfterLeaving}) {
    Owner o;
    auto settle = [&o] { o.log.push_back("settle at depth " + std::to_string(o.depth.depth())); };
    {
      ReentryScope outer(o.depth, when, settle);
      EXPECT_TRUE(o.depth.inside());
      {
        ReentryScope inner(o.depth, when, settle);
        EXPECT_EQ(o.depth.depth(), 2);
      }
      EXPECT_TRUE(o.log.empty());
    }
    EXPECT_FALSE(o.depth.inside());
    EXPECT_EQ(o.log, std::vector<std::string>(
                         {when == SettleWhen::kBeforeLeaving ? "settle at depth 1"
                                                             : "settle at depth 0"}));
  }
}

TEST(ReentryScopeTest, SettlingBeforeLeavingDefersWhatItSetsOff) {
  Owner o;
  int settles = 0;
  std::function<bool()> settle = [&] {
    ++settles;
    // Work the settle sets off opens frames of the owner: they do not settle again.
    ReentryScope nested(o.depth, SettleWhen::kBeforeLeaving, settle);
    return true;
  };
  { ReentryScope scope(o.depth, SettleWhen::kBeforeLeaving, settle); }
  EXPECT_EQ(settles, 1);
  EXPECT_FALSE(o.depth.inside());
}

TEST(ReentryScopeTest, ASettleThatDestroysTheOwnerLeavesItsDepthAlone) {
  auto owner = std::make_unique<Owner>();
  {
    // kBeforeLeaving: false says the owner is gone; the depth it lived in is not touched.
    ReentryScope scope(owner->depth, SettleWhen::kBeforeLeaving, [&owner] {
      owner.reset();
      return false;
    });
  }
  EXPECT_EQ(owner, nullptr);

  owner = std::make_unique<Owner>();
  {
    // kAfterLeaving: counted out first, so the settle may simply delete the owner.
    ReentryScope scope(owner->depth, SettleWhen::kAfterLeaving, [&owner] { owner.reset(); });
  }
  EXPECT_EQ(owner, nullptr);
}

TEST(ScopedTimerTest, MarksItselfFiredBeforeItsCallbackRuns) {
  FakeScheduler s;
  ScopedTimer t;
  std::vector<bool> pending_inside;
  t.start(s, 5, [&] { pending_inside.push_back(t.pending()); });
  EXPECT_TRUE(t.pending());
  s.advanceMs(5);
  EXPECT_EQ(pending_inside, std::vector<bool>({false}));
  EXPECT_FALSE(t.pending());
  t.reset();  // a no-op on a fired timer
  EXPECT_FALSE(t.pending());
}

TEST(ScopedTimerTest, ACallbackMayRestartItsOwnTimer) {
  FakeScheduler s;
  ScopedTimer t;
  int fired = 0;
  std::function<void()> tick = [&] {
    if (++fired < 3) t.start(s, 10, tick);
  };
  t.start(s, 10, tick);
  s.advanceMs(100);
  EXPECT_EQ(fired, 3);
  EXPECT_FALSE(t.pending());
  EXPECT_EQ(s.pendingTimers(), 0u);
}

TEST(ScopedTimerTest, ACallbackMayDestroyItsOwnTimer) {
  FakeScheduler s;
  auto t = std::make_unique<ScopedTimer>();
  int fired = 0;
  t->start(s, 1, [&] {
    ++fired;
    t.reset();
  });
  s.advanceMs(1);
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(t, nullptr);
}

TEST(ScopedTimerTest, MarksItselfFiredOnTheRealLoopToo) {
  uv_loop_t loop;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  {
    UvScheduler s(&loop);
    ScopedTimer t;
    std::vector<bool> pending_inside;
    t.start(s, 1, [&] { pending_inside.push_back(t.pending()); });
    EXPECT_TRUE(t.pending());
    uv_run(&loop, UV_RUN_DEFAULT);
    EXPECT_EQ(pending_inside, std::vector<bool>({false}));
    EXPECT_FALSE(t.pending());
  }
  uv_run(&loop, UV_RUN_DEFAULT);  // drain the close callbacks
  EXPECT_EQ(uv_loop_close(&loop), 0);
}

TEST(ScopedTimerTest, RawTimersAreNotMarked) {
  FakeScheduler s;
  int fired = 0;
  s.runAfter(1, [&] { ++fired; });
  s.advanceMs(1);
  EXPECT_EQ(fired, 1);
}

}  // namespace
}  // namespace sidelock::event
