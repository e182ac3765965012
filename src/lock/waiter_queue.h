// Acquire requests in progress, and the per-lock FIFO queues of those that wait (wait_ms > 0).
// Only the head of a queue contends with the backend; the queue carries the contention state
// (retry backoff, what we know of the holder's TTL, a wake-up that raced an in-flight attempt).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "event/scheduler.h"
#include "lock/backoff.h"
#include "lock/lease_table.h"
#include "lock/lock_id.h"
#include "lock/lock_service.h"

namespace sidelock::lock {

struct Waiter {
  uint64_t id = 0;
  AcquireOptions options;
  std::function<void(AcquireResult)> done;
  std::function<void(LeaseEvent)> on_event;
  int64_t started_us = 0;
  int64_t deadline_us = 0;  // == started_us for a single try
  bool contended = false;   // the lock was found held at least once
  /// Why its own last attempt was refused (a busy answer tells the caller).
  backend::BusyReason busy_reason = backend::BusyReason::kHeld;
  std::string busy_holder;  // who held the lock at the last busy answer (empty: unknown)
  bool queued = false;      // in its lock's FIFO
  bool attempting = false;  // a backend acquire for it is in flight
  /// Already answered (cancelled, deadline, shutdown) while its attempt was in flight: a late
  /// grant is released at once.
  bool abandoned = false;
  /// A waiting acquire that found the queue limits full: it tries once first, and only if the
  /// lock is busy does it queue (room permitting) with this budget, counted from started_us.
  int64_t wait_if_busy_ms = 0;
  /// The service drew its owner id (the caller gave none): nobody else can hold a lease under it,
  /// so a grant found under it is one of this waiter's own attempts.
  bool owner_drawn = false;
  /// An attempt of it got no answer (Status::outcomeUnknown) and may have been granted: its next
  /// attempt gives that grant back first (src/lock/unanswered.cc). Drawn owner ids only.
  bool grant_unsettled = false;
  /// An attempt of it got no answer under an owner id the caller chose: its error says the
  /// acquire may have been granted (the caller can release it; unanswered.cc leaves it).
  bool grant_left_to_owner = false;
  event::ScopedTimer deadline_timer;
};

struct WaiterQueue {
  WaiterQueue(int64_t retry_min_ms, int64_t retry_max_ms, int64_t retry_jitter_ms)
      : backoff(retry_min_ms, retry_max_ms, nullptr, retry_jitter_ms) {}

  std::deque<Waiter*> fifo;
  bool attempt_in_flight = false;
  /// A release was announced while an attempt was in flight: if it comes back busy, retry at once.
  bool wake_pending = false;
  /// That announcement came from the backend (another sidecar's release), not our own release:
  /// the retry it causes counts as a wake-up.
  bool wake_pending_notified = false;
  Backoff backoff;
  int64_t holder_expiry_us = -1;  // from the last busy reply; -1 unknown
  /// Not OK while the backend is out: the head's last attempt failed with a transient error. The
  /// waiters keep their places and the head retries; a deadline reached in this state answers
  /// this error (503) instead of busy (409).
  Status backend_error;
  /// Writers (mutex queue): readers turned an attempt away and it marked the writer waiting,
  /// and no queued writer got in since. A writer that leaves withdraws its mark then, passing it
  /// to those still queued here, so readers stay out until the last of them is gone.
  bool writers_marked = false;
  event::ScopedTimer retry_timer;
};

class WaiterQueues {
 public:
  WaiterQueues(int64_t retry_min_ms, int64_t retry_max_ms, int64_t retry_jitter_ms = 0)
      : retry_min_ms_(retry_min_ms),
        retry_max_ms_(retry_max_ms),
        retry_jitter_ms_(retry_jitter_ms) {}

  WaiterQueue* find(const LockId& lock);
  /// Returns the queue of `lock`, creating it if needed (`*created` tells which).
  WaiterQueue& getOrCreate(const LockId& lock, bool* created);
  void erase(const LockId& lock);

  void push(WaiterQueue& q, Waiter* w);
  /// Removes `w` from `q` if present; returns whether it was there.
  bool remove(WaiterQueue& q, Waiter* w);

  /// Waiters queued over all locks.
  size_t total() const { return total_; }
  std::vector<WaiterCount> counts() const;
  std::vector<LockId> locks() const;

 private:
  int64_t retry_min_ms_;
  int64_t retry_max_ms_;
  int64_t retry_jitter_ms_;
  size_t total_ = 0;
  std::unordered_map<LockId, std::unique_ptr<WaiterQueue>, LockIdHash> queues_;
};

}  // namespace sidelock::lock
