#include "event/uv_scheduler.h"

#include <algorithm>
#include <cstdlib>

namespace sidelock::event {

UvScheduler::UvScheduler(uv_loop_t* loop) : loop_(loop) {
  uv_timer_t* t = timer_.allocate(this);
  if (uv_timer_init(loop_, t) != 0) abort();  // only fails on a bad loop pointer
  // The timer must not keep the loop alive on its own during the final drain.
  uv_unref(timer_.raw());
}

UvScheduler::~UvScheduler() { close(); }

void UvScheduler::close() {
  timers_.clear();
  deadline_by_id_.clear();
  timer_.close();
}

int64_t UvScheduler::nowUs() const {
  // uv_hrtime is monotonic nanoseconds; uv_now is cached per loop turn at ms precision.
  return static_cast<int64_t>(uv_hrtime() / 1000);
}

Scheduler::TimerId UvScheduler::runAfter(int64_t delay_ms, Callback cb) {
  TimerId id = ++next_id_;
  int64_t deadline = nowUs() + std::max<int64_t>(0, delay_ms) * 1000;
  timers_.emplace(std::make_pair(deadline, id), std::move(cb));
  deadline_by_id_.emplace(id, deadline);
  if (armed_for_us_ < 0 || deadline < armed_for_us_) rearm();
  return id;
}

void UvScheduler::cancel(TimerId id) {
  auto it = deadline_by_id_.find(id);
  if (it == deadline_by_id_.end()) return;
  timers_.erase({it->second, id});
  deadline_by_id_.erase(it);
  // Leaving the uv timer armed for an earlier deadline is harmless: onTimer re-arms.
}

void UvScheduler::post(Callback cb) { runAfter(0, std::move(cb)); }

void UvScheduler::rearm() {
  if (!timer_) return;
  if (timers_.empty()) {
    uv_timer_stop(timer_.get());
    armed_for_us_ = -1;
    return;
  }
  int64_t deadline = timers_.begin()->first.first;
  int64_t delay_us = deadline - nowUs();
  // Round up so we never wake before the deadline and spin.
  uint64_t delay_ms = delay_us <= 0 ? 0 : static_cast<uint64_t>((delay_us + 999) / 1000);
  armed_for_us_ = deadline;
  uv_ref(timer_.raw());
  uv_timer_start(timer_.get(), [](uv_timer_t* t) {
    if (t->data != nullptr) static_cast<UvScheduler*>(t->data)->onTimer();
  }, delay_ms, 0);
}

void UvScheduler::onTimer() {
  armed_for_us_ = -1;
  // Fire everything due now; callbacks scheduled while we run with delay 0 wait for the next turn
  // so a callback that re-posts itself cannot starve I/O.
  const int64_t now = nowUs();
  const TimerId last_id = next_id_;
  while (!timers_.empty()) {
    auto it = timers_.begin();
    if (it->first.first > now || it->first.second > last_id) break;
    TimerId id = it->first.second;
    Callback cb = std::move(it->second);
    timers_.erase(it);
    deadline_by_id_.erase(id);
    cb();
    if (!timer_) return;  // closed by the callback
  }
  if (timers_.empty()) {
    uv_timer_stop(timer_.get());
    uv_unref(timer_.raw());
  } else {
    rearm();
  }
}

}  // namespace sidelock::event
