// event::RetryQueue, the schedule of the give-backs that must get through once the backend is
// back (src/lock/unanswered.cc, the Sentinel backend): pure logic on the fake scheduler.
#include "event/retry_queue.h"

#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "event/fake_scheduler.h"

namespace sidelock::event {
namespace {

struct Item {
  std::string name;
  int64_t until_us = 0;
  int64_t next_try_us = 0;
  int64_t backoff_ms = 0;
};

class RetryQueueTest : public ::testing::Test {
 protected:
  using Queue = RetryQueue<Item>;

  Queue& make(size_t capacity = 1024, Queue::CanSend can_send = nullptr) {
    queue_ = std::make_unique<Queue>(
        sched_, Queue::Limits{capacity, 50, 1000},
        [this](Item item) {
          sent_.push_back({item.name, sched_.nowUs() - start_us_, item});
        },
        [this](const Item& item, Queue::Dropped why) {
          dropped_.push_back({item.name, why});
        },
        std::move(can_send));
    return *queue_;
  }
  Item item(std::string name, int64_t lives_ms = 60'000) {
    return Item{std::move(name), sched_.nowUs() + lives_ms * 1000, 0, 0};
  }

  struct Sent {
    std::string name;
    int64_t at_us;  // since the test started
    Item item;
  };
  FakeScheduler sched_;
  const int64_t start_us_ = sched_.nowUs();
  std::unique_ptr<Queue> queue_;
  std::vector<Sent> sent_;
  std::vector<std::pair<std::string, Queue::Dropped>> dropped_;
};

// Each refusal doubles the wait, from the first backoff up to the maximum.
TEST_F(RetryQueueTest, EachRefusalDoublesTheWaitUpToTheMaximum) {
  Queue& q = make();
  Item it = item("a");
  std::vector<int64_t> backoffs;
  for (int i = 0; i < 7; ++i) {
    const int64_t refused_at = sched_.nowUs();
    q.later(it);
    sched_.advanceMs(2000);
    ASSERT_EQ(sent_.size(), 1u);
    backoffs.push_back((sent_.back().at_us + start_us_ - refused_at) / 1000);
    it = sent_.back().item;
    sent_.clear();
  }
  EXPECT_EQ(backoffs, (std::vector<int64_t>{50, 100, 200, 400, 800, 1000, 1000}));
}

TEST_F(RetryQueueTest, AnItemPastItsDeadlineIsDroppedNotSent) {
  Queue& q = make();
  q.later(item("short", 120));  // sent at 50 ms, refused, next wait 100 ms: past its end
  sched_.advanceMs(60);
  ASSERT_EQ(sent_.size(), 1u);
  q.later(sent_.back().item);
  sched_.advanceMs(1000);
  EXPECT_EQ(sent_.size(), 1u);
  ASSERT_EQ(dropped_.size(), 1u);
  EXPECT_EQ(dropped_[0].first, "short");
  EXPECT_EQ(dropped_[0].second, Queue::Dropped::kDeadline);
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(sched_.pendingTimers(), 0u) << "nothing left to wait for";
}

TEST_F(RetryQueueTest, WhenFullTheOldestGoes) {
  Queue& q = make(/*capacity=*/2);
  q.later(item("a"));
  q.later(item("b"));
  q.later(item("c"));
  ASSERT_EQ(dropped_.size(), 1u);
  EXPECT_EQ(dropped_[0].first, "a");
  EXPECT_EQ(dropped_[0].second, Queue::Dropped::kFull);
  EXPECT_EQ(q.size(), 2u);
}

TEST_F(RetryQueueTest, RetryAllSendsEveryItemAtOnce) {
  Queue& q = make();
  q.later(item("a"));
  q.later(item("b"));
  q.retryAll();
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[0].at_us, 0) << "no time passed";
  EXPECT_EQ(sent_[0].name, "a");
  EXPECT_EQ(sent_[1].name, "b");
  EXPECT_EQ(q.size(), 0u);
}

TEST_F(RetryQueueTest, HeldWhileTheOtherSideIsNotReadyAndSentOnceItIs) {
  bool ready = false;
  Queue& q = make(1024, [&ready] { return ready; });
  q.later(item("a", 10'000));
  q.later(item("gone-soon", 300));
  sched_.advanceMs(2000);
  EXPECT_TRUE(sent_.empty()) << "held while not ready";
  ASSERT_EQ(dropped_.size(), 1u) << "a deadline passes all the same";
  EXPECT_EQ(dropped_[0].first, "gone-soon");
  EXPECT_EQ(sched_.pendingTimers(), 1u) << "asks again";
  ready = true;
  sched_.advanceMs(50);
  ASSERT_EQ(sent_.size(), 1u) << "sent within one poll of being ready";
  EXPECT_EQ(sent_[0].name, "a");
}

// A later refusal due sooner than the timer planned for the others moves the timer up.
TEST_F(RetryQueueTest, AnItemDueSoonerThanThePlannedTimerIsNotKeptWaiting) {
  Queue& q = make();
  Item slow = item("slow");
  slow.backoff_ms = 800;  // refused often already: next wait 1 s
  q.later(slow);
  sched_.advanceMs(10);
  q.later(item("fresh"));  // first refusal: 50 ms
  sched_.advanceMs(60);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].name, "fresh");
  EXPECT_EQ(sent_[0].at_us, 60'000);
  sched_.advanceMs(1000);
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[1].name, "slow");
  EXPECT_EQ(sent_[1].at_us, 1'000'000);
}

TEST_F(RetryQueueTest, TakeAllEmptiesAndStops) {
  Queue& q = make();
  q.later(item("a"));
  std::deque<Item> all = q.takeAll();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].name, "a");
  sched_.advanceMs(5000);
  EXPECT_TRUE(sent_.empty());
  EXPECT_EQ(sched_.pendingTimers(), 0u);
}

}  // namespace
}  // namespace sidelock::event
