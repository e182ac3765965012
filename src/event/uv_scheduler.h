// Scheduler on a libuv loop: one uv_timer_t drives a heap of deadlines, so scheduling a timer
// allocates no uv handle. post() runs callbacks in the loop's check phase (Node's setImmediate):
// right after the current I/O callbacks, and never in a cycle that starves I/O — callbacks posted
// by posted callbacks wait for the next loop iteration, which polls for I/O first (without
// blocking: an idle handle is active while posts are pending). A 0 ms uv timer would not do: on
// libuv 1.44 a timer re-armed with 0 ms inside the timers phase runs again before any poll.
#pragma once

#include <uv.h>

#include <cstdint>
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
  int64_t wallClockMs() const override;
  TimerId schedule(int64_t delay_ms, Callback cb, TimerId* fired_id) override;
  void cancel(TimerId id) override;
  void post(Callback cb) override;

  /// Drops pending timers and posts and closes the uv handles (call before the loop's final
  /// drain). Callbacks that were due but not yet run are dropped.
  void close();
  size_t pendingTimers() const { return live_timers_ + posted_.size(); }

 private:
  void rearm(uint64_t min_delay_ms = 0);
  void onTimer();
  void onCheck();

  uv_loop_t* loop_;
  UvHandle<uv_timer_t> timer_;
  UvHandle<uv_check_t> check_;  // runs posted callbacks after each poll phase
  UvHandle<uv_idle_t> idle_;    // active while posts are pending: keeps the poll from blocking
  std::vector<Callback> posted_;
  std::vector<Callback> running_;  // the generation being run; swapped with posted_ (no churn)
  bool closed_ = false;
  int64_t armed_for_us_ = -1;
  // Timers: callbacks in a slab (a TimerId names a slot and its generation), deadlines in a binary
  // min-heap. Cancelling frees the slot at once and leaves the heap entry behind as stale, skipped
  // when it surfaces; the heap is rebuilt when stale entries outnumber live ones. No allocation per
  // timer (a lease holds two), unlike one map node per deadline and per id.
  struct Slot {
    Callback cb;
    TimerId* fired_id = nullptr;  // cleared just before cb runs (ScopedTimer)
    uint32_t generation = 0;
    bool armed = false;
  };
  struct HeapEntry {
    int64_t deadline_us;
    uint64_t seq;  // scheduling order: equal deadlines fire in it
    uint32_t slot;
    uint32_t generation;
  };
  bool stale(const HeapEntry& e) const;
  void popHeap();
  void dropStaleTop();
  void releaseSlot(uint32_t slot);
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<HeapEntry> heap_;
  size_t live_timers_ = 0;
  uint64_t next_seq_ = 0;
};

}  // namespace sidelock::event
