// Scheduler on a libuv loop: one uv_timer_t drives a heap of deadlines, so scheduling a timer
// allocates no uv handle. post() runs callbacks in the loop's check phase (Node's setImmediate):
// right after the current I/O callbacks, and never in a cycle that starves I/O — callbacks posted
// by posted callbacks wait for the next loop iteration, which polls for I/O first (without
// blocking: an idle handle is active while posts are pending). A 0 ms uv timer would not do: on
// libuv 1.44 a timer re-armed with 0 ms inside the timers phase runs again before any poll.
#pragma once

#include <uv.h>

#include <map>
#include <utility>
#include <vector>

#include "event/scheduler.h"
#include "event/uv_handle.h"

namespace sidelock::event {

class UvScheduler final : public Scheduler {
 public:
  explicit UvScheduler(uv_loop_t* loop);
  ~UvScheduler() override;

  int64_t nowUs() const override;
  TimerId runAfter(int64_t delay_ms, Callback cb) override;
  void cancel(TimerId id) override;
  void post(Callback cb) override;

  /// Drops pending timers and posts and closes the uv handles (call before the loop's final
  /// drain). Callbacks that were due but not yet run are dropped.
  void close();
  size_t pendingTimers() const { return timers_.size() + posted_.size(); }

 private:
  void rearm();
  void onTimer();
  void onCheck();

  uv_loop_t* loop_;
  UvHandle<uv_timer_t> timer_;
  UvHandle<uv_check_t> check_;  // runs posted callbacks after each poll phase
  UvHandle<uv_idle_t> idle_;    // active while posts are pending: keeps the poll from blocking
  std::vector<Callback> posted_;
  std::vector<Callback> running_;  // the generation being run; swapped with posted_ (no churn)
  bool closed_ = false;
  TimerId next_id_ = 0;
  int64_t armed_for_us_ = -1;
  // (deadline_us, id) -> callback; id breaks ties so equal deadlines fire in scheduling order.
  std::map<std::pair<int64_t, TimerId>, Callback> timers_;
  std::map<TimerId, int64_t> deadline_by_id_;
};

}  // namespace sidelock::event
