// Scheduler on a libuv loop: one uv_timer_t drives a heap of deadlines, so scheduling a timer
// allocates no uv handle.
#pragma once

#include <uv.h>

#include <map>
#include <utility>

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

  /// Drops pending timers and closes the uv timer (call before the loop's final drain).
  void close();
  size_t pendingTimers() const { return timers_.size(); }

 private:
  void rearm();
  void onTimer();

  uv_loop_t* loop_;
  UvHandle<uv_timer_t> timer_;
  TimerId next_id_ = 0;
  int64_t armed_for_us_ = -1;
  // (deadline_us, id) -> callback; id breaks ties so equal deadlines fire in scheduling order.
  std::map<std::pair<int64_t, TimerId>, Callback> timers_;
  std::map<TimerId, int64_t> deadline_by_id_;
};

}  // namespace sidelock::event
