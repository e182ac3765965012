// Time and deferred work, behind an interface so the lock service and the memory backend run on a
// real libuv loop in production and on a fake clock in unit tests.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

namespace sidelock::event {

class Scheduler {
 public:
  using TimerId = uint64_t;  // 0 is never a valid id
  using Callback = std::function<void()>;

  virtual ~Scheduler() = default;

  /// Monotonic time. Never goes backwards; unrelated to wall-clock time.
  virtual int64_t nowUs() const = 0;
  int64_t nowMs() const { return nowUs() / 1000; }
  /// Wall-clock time, Unix ms: only for what is shown as a date (an election's leader "since"),
  /// never to measure a duration (it may step). FakeScheduler's moves with its monotonic time.
  virtual int64_t wallClockMs() const = 0;

  /// Runs `cb` once, `delay_ms` (>= 0) from now, on the loop thread.
  TimerId runAfter(int64_t delay_ms, Callback cb) {
    return schedule(delay_ms, std::move(cb), nullptr);
  }
  /// As runAfter; if `fired_id` is given, `*fired_id` is set to 0 just before `cb` runs (how a
  /// ScopedTimer knows it fired without a wrapper around every callback: a wrapper would not fit
  /// std::function's inline buffer, and each of a lease's two timers would allocate). `*fired_id`
  /// must stay valid until the timer fires or is cancelled.
  virtual TimerId schedule(int64_t delay_ms, Callback cb, TimerId* fired_id) = 0;
  /// Cancels a timer that has not fired yet. Idempotent; unknown or fired ids are ignored.
  virtual void cancel(TimerId id) = 0;
  /// Runs `cb` on a later loop turn, never inside the current call (src/README.md, rule 4).
  virtual void post(Callback cb) = 0;
};

/// RAII holder for one pending timer: cancels it when reset or destroyed. It marks itself fired
/// before its callback runs (the scheduler clears its id), so that inside the callback and after
/// it pending() is false and reset() is a no-op. Not movable: the scheduler keeps its address
/// while the timer is pending (owners that move hold it through a unique_ptr).
class ScopedTimer {
 public:
  ScopedTimer() = default;
  ~ScopedTimer() { reset(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

  /// Replaces any pending timer with a new one.
  void start(Scheduler& scheduler, int64_t delay_ms, Scheduler::Callback cb) {
    reset();
    scheduler_ = &scheduler;
    id_ = scheduler.schedule(delay_ms, std::move(cb), &id_);
  }
  void reset() {
    if (id_ != 0 && scheduler_ != nullptr) scheduler_->cancel(id_);
    id_ = 0;
  }
  /// True between start() and either reset() or firing.
  bool pending() const { return id_ != 0; }

 private:
  Scheduler* scheduler_ = nullptr;
  Scheduler::TimerId id_ = 0;
};

}  // namespace sidelock::event
