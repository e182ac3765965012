// Time and deferred work, behind an interface so the lock service and the memory backend run on a
// real libuv loop in production and on a fake clock in unit tests.
#pragma once

#include <cstdint>
#include <functional>

namespace sidelock::event {

class Scheduler {
 public:
  using TimerId = uint64_t;  // 0 is never a valid id
  using Callback = std::function<void()>;

  virtual ~Scheduler() = default;

  /// Monotonic time. Never goes backwards; unrelated to wall-clock time.
  virtual int64_t nowUs() const = 0;
  int64_t nowMs() const { return nowUs() / 1000; }

  /// Runs `cb` once, `delay_ms` (>= 0) from now, on the loop thread.
  virtual TimerId runAfter(int64_t delay_ms, Callback cb) = 0;
  /// Cancels a timer that has not fired yet. Idempotent; unknown or fired ids are ignored.
  virtual void cancel(TimerId id) = 0;
  /// Runs `cb` on a later loop turn, never inside the current call (src/README.md, rule 4).
  virtual void post(Callback cb) = 0;
};

/// RAII holder for one pending timer: cancels it when reset or destroyed.
class ScopedTimer {
 public:
  ScopedTimer() = default;
  ~ScopedTimer() { reset(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;
  ScopedTimer(ScopedTimer&& o) noexcept : scheduler_(o.scheduler_), id_(o.id_) { o.id_ = 0; }
  ScopedTimer& operator=(ScopedTimer&& o) noexcept {
    if (this != &o) {
      reset();
      scheduler_ = o.scheduler_;
      id_ = o.id_;
      o.id_ = 0;
    }
    return *this;
  }

  /// Replaces any pending timer with a new one.
  void start(Scheduler& scheduler, int64_t delay_ms, Scheduler::Callback cb) {
    reset();
    scheduler_ = &scheduler;
    id_ = scheduler.runAfter(delay_ms, std::move(cb));
  }
  void reset() {
    if (id_ != 0 && scheduler_ != nullptr) scheduler_->cancel(id_);
    id_ = 0;
  }
  /// True between start() and either reset() or (if the callback calls markFired()) firing.
  bool pending() const { return id_ != 0; }
  /// Call first thing inside the callback so that pending() is accurate and reset() is a no-op.
  void markFired() { id_ = 0; }

 private:
  Scheduler* scheduler_ = nullptr;
  Scheduler::TimerId id_ = 0;
};

}  // namespace sidelock::event
