#include <gtest/gtest.h>
#include <uv.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/random.h"
#include "event/fake_scheduler.h"
#include "event/uv_scheduler.h"

namespace sidelock::event {
namespace {

TEST(FakeSchedulerTest, FiresInDeadlineOrderAndHonoursCancel) {
  FakeScheduler s;
  std::vector<int> fired;
  s.runAfter(30, [&] { fired.push_back(30); });
  auto id = s.runAfter(20, [&] { fired.push_back(20); });
  s.runAfter(10, [&] { fired.push_back(10); });
  s.cancel(id);
  s.advanceMs(15);
  EXPECT_EQ(fired, std::vector<int>({10}));
  s.advanceMs(100);
  EXPECT_EQ(fired, std::vector<int>({10, 30}));
}

TEST(FakeSchedulerTest, ScopedTimerCancelsOnDestruction) {
  FakeScheduler s;
  int fired = 0;
  {
    ScopedTimer t;
    t.start(s, 5, [&] { ++fired; });
    EXPECT_TRUE(t.pending());
  }
  s.advanceMs(10);
  EXPECT_EQ(fired, 0);
}

TEST(UvSchedulerTest, RunsTimersAndPostsOnTheLoopThenClosesCleanly) {
  uv_loop_t loop;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  {
    UvScheduler s(&loop);
    std::vector<int> order;
    s.runAfter(20, [&] { order.push_back(2); });
    auto cancelled = s.runAfter(5, [&] { order.push_back(99); });
    s.post([&] { order.push_back(1); });
    s.cancel(cancelled);
    int64_t start = s.nowMs();
    uv_run(&loop, UV_RUN_DEFAULT);
    EXPECT_EQ(order, std::vector<int>({1, 2}));
    EXPECT_GE(s.nowMs() - start, 19);
  }
  uv_run(&loop, UV_RUN_DEFAULT);  // drain the close callbacks
  EXPECT_EQ(uv_loop_close(&loop), 0);
}

// Timer ids name a reused slot plus its generation: a stale id (fired or cancelled) must never
// cancel the timer that now occupies the same slot. Equal deadlines fire in scheduling order, and
// a heap full of cancelled entries (leases re-arm at every renewal) still fires the live ones.
TEST(UvSchedulerTest, StaleIdsNeverCancelNewTimersAndManyCancellationsAreCheap) {
  uv_loop_t loop;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  {
    UvScheduler s(&loop);
    std::vector<int> order;
    auto first = s.runAfter(1000, [&] { order.push_back(-1); });
    s.cancel(first);
    auto reused = s.runAfter(2, [&] { order.push_back(1); });  // takes the freed slot
    s.cancel(first);                                           // stale: must not touch `reused`
    EXPECT_NE(first, reused);
    for (int i = 0; i < 5000; ++i) s.cancel(s.runAfter(1000 + i, [&] { order.push_back(-2); }));
    for (int i = 2; i <= 4; ++i) s.runAfter(3, [&order, i] { order.push_back(i); });
    EXPECT_EQ(s.pendingTimers(), 4u);
    uv_run(&loop, UV_RUN_DEFAULT);
    EXPECT_EQ(order, std::vector<int>({1, 2, 3, 4}));
    EXPECT_EQ(s.pendingTimers(), 0u);
    s.cancel(reused);  // fired: ignored
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT_EQ(uv_loop_close(&loop), 0);
}

// A callback that keeps re-posting itself must not starve I/O: each generation of posts runs
// after a poll phase. A uv_async wake-up (delivered through the poll phase) must get through
// while the loop is flooded with posts.
TEST(UvSchedulerTest, SelfRepostingCallbackDoesNotStarveIo) {
  uv_loop_t loop;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  {
    UvScheduler s(&loop);
    int posts = 0;
    bool io_ran = false;
    UvHandle<uv_async_t> async;
    ASSERT_EQ(uv_async_init(&loop, async.allocate(&io_ran),
                            [](uv_async_t* h) { *static_cast<bool*>(h->data) = true; }),
              0);
    std::function<void()> again = [&] {
      ++posts;
      if (!io_ran && posts < 100'000) {
        s.post(again);
      } else {
        async.close();
      }
    };
    s.post(again);
    uv_async_send(async.get());
    uv_run(&loop, UV_RUN_DEFAULT);
    EXPECT_TRUE(io_ran);
    EXPECT_LT(posts, 100) << "the I/O callback waited behind the posts";
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT_EQ(uv_loop_close(&loop), 0);
}

// Timers whose callbacks take longer than the gap to the next deadline (a loaded machine, a
// sanitizer build) must not keep the loop in its timers phase: libuv compares with the loop time
// cached when the phase began, so a timer restarted with 0 ms ran again at once, and sockets went
// unread (pipelined requests unanswered at 100 % CPU under ASan).
TEST(UvSchedulerTest, SlowTimerCallbacksDoNotStarveIo) {
  uv_loop_t loop;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  {
    UvScheduler s(&loop);
    int runs = 0;
    bool io_ran = false;
    UvHandle<uv_async_t> async;
    ASSERT_EQ(uv_async_init(&loop, async.allocate(&io_ran),
                            [](uv_async_t* h) { *static_cast<bool*>(h->data) = true; }),
              0);
    // Two chains, each busy for 3 ms and then due again 1 ms later: every run ends after the
    // other chain's deadline has passed.
    std::function<void()> chain = [&] {
      ++runs;
      const uint64_t until = uv_hrtime() + 3'000'000;
      while (uv_hrtime() < until) {
      }
      if (!io_ran && runs < 400) {
        s.runAfter(1, chain);
      } else if (async.get() != nullptr) {
        async.close();
      }
    };
    s.runAfter(0, chain);
    s.runAfter(0, chain);
    uv_async_send(async.get());
    uv_run(&loop, UV_RUN_DEFAULT);
    EXPECT_TRUE(io_ran);
    EXPECT_LT(runs, 40) << "the I/O callback waited behind the timers";
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT_EQ(uv_loop_close(&loop), 0);
}

TEST(UvSchedulerTest, PostNeverRunsInsideTheCallAndCancelledTimersLetTheLoopEnd) {
  uv_loop_t loop;
  ASSERT_EQ(uv_loop_init(&loop), 0);
  {
    UvScheduler s(&loop);
    bool ran = false;
    s.post([&] { ran = true; });
    EXPECT_FALSE(ran);
    auto id = s.runAfter(60'000, [] {});
    s.cancel(id);  // nothing left to wait for: uv_run must return at once, not in a minute
    int64_t start = s.nowMs();
    uv_run(&loop, UV_RUN_DEFAULT);
    EXPECT_TRUE(ran);
    EXPECT_LT(s.nowMs() - start, 5'000);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT_EQ(uv_loop_close(&loop), 0);
}

TEST(RandomTest, OwnerIdsStayDistinctAcrossPoolRefills) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(seen.insert(randomOwnerId()).second);
}

TEST(RandomTest, OwnerIdsAre128BitHexAndDistinct) {
  std::string a = randomOwnerId(), b = randomOwnerId();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  for (int i = 0; i < 100; ++i) {
    int64_t j = jitterBetween(5, 10);
    EXPECT_GE(j, 5);
    EXPECT_LE(j, 10);
  }
}

}  // namespace
}  // namespace sidelock::event
