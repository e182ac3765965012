// Sends that must get through once the other side answers again, kept while it refuses: the
// give-back of a grant nobody was told of (src/lock/unanswered.cc; the Sentinel backend's grants
// that did not reach their replicas). The owner sends and reads the answers; a RetryQueue keeps
// only the schedule, one for both, so the two give-backs cannot drift apart:
//  - a refused item waits out a backoff that doubles per refusal, from first_backoff_ms up to
//    max_backoff_ms, then is sent again (send); a refusal comes back through later();
//  - retryAll() sends every waiting item at once (the other side reported it is back);
//  - an item is dropped once its deadline (until_us) has passed: what it was to undo is gone by
//    then (a TTL ended it); and when `capacity` wait and another is refused, the oldest goes
//    (its deadline is the nearest);
//  - with a can_send() predicate, due items are held while it says no, and it is asked again
//    every first_backoff_ms (the Sentinel master is not confirmed yet).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <utility>

#include "event/scheduler.h"

namespace sidelock::event {

/// What a RetryQueue schedules by: the item's own fields, so that it can be sent (and refused
/// again) by its owner between two stays in the queue without losing its backoff.
template <typename T>
concept Retriable = requires(T item) {
  { item.until_us } -> std::convertible_to<int64_t>;     // dropped from then on
  { item.next_try_us } -> std::convertible_to<int64_t>;  // sent again from then on
  { item.backoff_ms } -> std::convertible_to<int64_t>;   // the last wait (0: never refused)
};

template <Retriable Item>
class RetryQueue {
 public:
  enum class Dropped { kDeadline, kFull };
  struct Limits {
    size_t capacity = 1024;
    int64_t first_backoff_ms = 50;
    int64_t max_backoff_ms = 1000;
  };
  using Send = std::function<void(Item)>;
  using OnDropped = std::function<void(const Item&, Dropped)>;
  using CanSend = std::function<bool()>;

  /// `send` must not answer inside the call (a refusal comes back on a later loop turn).
  RetryQueue(Scheduler& scheduler, Limits limits, Send send, OnDropped dropped,
             CanSend can_send = nullptr)
      : scheduler_(scheduler),
        limits_(limits),
        send_(std::move(send)),
        dropped_(std::move(dropped)),
        can_send_(std::move(can_send)) {}
  RetryQueue(const RetryQueue&) = delete;
  RetryQueue& operator=(const RetryQueue&) = delete;

  /// `item` was refused: it is sent again after its backoff (doubled from the last one).
  void later(Item item) {
    item.backoff_ms =
        std::min(limits_.max_backoff_ms,
                 item.backoff_ms == 0 ? limits_.first_backoff_ms : item.backoff_ms * 2);
    item.next_try_us = scheduler_.nowUs() + item.backoff_ms * 1000;
    if (items_.size() >= limits_.capacity) {
      dropped_(items_.front(), Dropped::kFull);  // told while it still counts among the waiting
      items_.pop_front();
    }
    const int64_t due_us = std::min(item.next_try_us, item.until_us);
    items_.push_back(std::move(item));
    // The timer planned already comes first (or polls while held): no walk over the queue per
    // refusal, which a backend coming back to refuse them all would make quadratic.
    if (timer_.pending() && (held_ || due_us >= planned_us_)) return;
    plan();
  }

  /// Sends every waiting item now (those past their deadline are dropped).
  void retryAll() { retry(/*all=*/true); }

  /// Takes every waiting item out and stops (shutdown: the owner decides what becomes of them).
  std::deque<Item> takeAll() {
    timer_.reset();
    return std::exchange(items_, {});
  }

  size_t size() const { return items_.size(); }

 private:
  void retry(bool all) {
    timer_.reset();
    const int64_t now_us = scheduler_.nowUs();
    held_ = can_send_ && !can_send_();
    // Over a copy: a send is answered on a later turn, but a misbehaving one must not invalidate
    // this loop.
    for (Item& item : std::exchange(items_, {})) {
      if (now_us >= item.until_us) {
        dropped_(item, Dropped::kDeadline);
      } else if (!held_ && (all || now_us >= item.next_try_us)) {
        send_(std::move(item));
      } else {
        items_.push_back(std::move(item));
      }
    }
    plan();
  }

  /// The timer for the next item due (or dropped), or, while can_send() said no, the next poll.
  void plan() {
    if (items_.empty()) {
      timer_.reset();
      return;
    }
    const int64_t now_us = scheduler_.nowUs();
    int64_t delay_ms = limits_.first_backoff_ms;
    if (!held_) {
      int64_t next_us = std::numeric_limits<int64_t>::max();
      for (const Item& item : items_) {
        next_us = std::min({next_us, item.next_try_us, item.until_us});
      }
      delay_ms = std::max<int64_t>(1, (next_us - now_us + 999) / 1000);
    }
    planned_us_ = now_us + delay_ms * 1000;
    timer_.start(scheduler_, delay_ms, [this] { retry(/*all=*/false); });  // replaces the last
  }

  Scheduler& scheduler_;
  const Limits limits_;
  Send send_;
  OnDropped dropped_;
  CanSend can_send_;
  std::deque<Item> items_;  // oldest first
  bool held_ = false;       // the last retry found can_send() false
  int64_t planned_us_ = 0;  // when the pending timer fires
  ScopedTimer timer_;
};

}  // namespace sidelock::event
