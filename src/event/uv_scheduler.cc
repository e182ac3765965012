#include "event/uv_scheduler.h"

#include <algorithm>
#include <cstdlib>

namespace sidelock::event {

UvScheduler::UvScheduler(uv_loop_t* loop) : loop_(loop) {
  // These inits only fail on a bad loop pointer.
  if (uv_timer_init(loop_, timer_.allocate(this)) != 0) abort();
  if (uv_check_init(loop_, check_.allocate(this)) != 0) abort();
  if (uv_idle_init(loop_, idle_.allocate(this)) != 0) abort();
  // Neither the timer nor the check handle keeps the loop alive on its own (the final drain must
  // end); pending work does: the timer is ref'd while armed, the idle handle while posts wait.
  uv_unref(timer_.raw());
  uv_check_start(check_.get(), [](uv_check_t* h) {
    if (h->data != nullptr) static_cast<UvScheduler*>(h->data)->onCheck();
  });
  uv_unref(check_.raw());
}

UvScheduler::~UvScheduler() { close(); }

void UvScheduler::close() {
  closed_ = true;
  timers_.clear();
  deadline_by_id_.clear();
  posted_.clear();
  timer_.close();
  check_.close();
  idle_.close();
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
  // With nothing left to wait for, the armed uv timer must not keep the loop alive; otherwise
  // leaving it armed for an earlier deadline is harmless: onTimer re-arms.
  if (timers_.empty() && timer_) {
    uv_timer_stop(timer_.get());
    uv_unref(timer_.raw());
    armed_for_us_ = -1;
  }
}

void UvScheduler::post(Callback cb) {
  if (closed_) return;
  posted_.push_back(std::move(cb));
  if (posted_.size() == 1) uv_idle_start(idle_.get(), [](uv_idle_t*) {});
}

void UvScheduler::onCheck() {
  if (posted_.empty()) return;
  // This generation only: what these callbacks post runs in the next iteration, after a poll.
  running_.swap(posted_);
  for (auto& cb : running_) {
    cb();
    if (closed_) break;  // a callback closed the scheduler: the rest is dropped, as timers are
  }
  running_.clear();
  if (!closed_ && posted_.empty()) uv_idle_stop(idle_.get());
}

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
  uv_timer_start(
      timer_.get(),
      [](uv_timer_t* t) {
        if (t->data != nullptr) static_cast<UvScheduler*>(t->data)->onTimer();
      },
      delay_ms, 0);
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
