// A Scheduler driven by hand, for unit tests of pure logic (lock service on the memory backend).
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "event/scheduler.h"

namespace sidelock::event {

class FakeScheduler final : public Scheduler {
 public:
  int64_t nowUs() const override { return now_us_; }
  /// A fixed date (2026-09-01T00:00:00Z) plus the time the fake clock has moved since it started.
  int64_t wallClockMs() const override { return kWallClockStartMs + (now_us_ - kStartUs) / 1000; }

  TimerId schedule(int64_t delay_ms, Callback cb, TimerId* fired_id) override {
    TimerId id = ++next_id_;
    timers_.emplace(std::make_pair(now_us_ + std::max<int64_t>(0, delay_ms) * 1000, id),
                    Timer{std::move(cb), fired_id});
    return id;
  }
  void cancel(TimerId id) override {
    for (auto it = timers_.begin(); it != timers_.end(); ++it) {
      if (it->first.second == id) {
        timers_.erase(it);
        return;
      }
    }
  }
  void post(Callback cb) override { runAfter(0, std::move(cb)); }

  /// Runs everything due now (including work posted by what runs), without moving time.
  void runReady() { advanceUs(0); }
  /// Moves time forward by `ms`, firing timers in deadline order as time passes them.
  void advanceMs(int64_t ms) { advanceUs(ms * 1000); }
  void advanceUs(int64_t us) {
    const int64_t target = now_us_ + us;
    while (!timers_.empty() && timers_.begin()->first.first <= target) {
      auto it = timers_.begin();
      now_us_ = std::max(now_us_, it->first.first);
      Callback cb = std::move(it->second.cb);
      TimerId* fired_id = it->second.fired_id;
      timers_.erase(it);
      if (fired_id != nullptr) *fired_id = 0;
      cb();
    }
    now_us_ = target;
  }
  size_t pendingTimers() const { return timers_.size(); }

 private:
  static constexpr int64_t kStartUs = 1'000'000'000;  // arbitrary non-zero start
  static constexpr int64_t kWallClockStartMs = 1'788'220'800'000;
  int64_t now_us_ = kStartUs;
  TimerId next_id_ = 0;
  struct Timer {
    Callback cb;
    TimerId* fired_id;
  };
  std::map<std::pair<int64_t, TimerId>, Timer> timers_;
};

}  // namespace sidelock::event
