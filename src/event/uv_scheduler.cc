#include "event/uv_scheduler.h"

#include <algorithm>
#include <chrono>
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
  slots_.clear();
  free_slots_.clear();
  heap_.clear();
  live_timers_ = 0;
  posted_.clear();
  timer_.close();
  check_.close();
  idle_.close();
}

int64_t UvScheduler::nowUs() const {
  // uv_hrtime is monotonic nanoseconds; uv_now is cached per loop turn at ms precision.
  return static_cast<int64_t>(uv_hrtime() / 1000);
}

int64_t UvScheduler::wallClockMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

// Min-heap order on (deadline, seq): std::push_heap/pop_heap build a max-heap, so "less" is later.
struct Later {
  template <typename E>
  bool operator()(const E& a, const E& b) const {
    return a.deadline_us != b.deadline_us ? a.deadline_us > b.deadline_us : a.seq > b.seq;
  }
};

}  // namespace

bool UvScheduler::stale(const HeapEntry& e) const {
  const Slot& s = slots_[e.slot];
  return !s.armed || s.generation != e.generation;
}

void UvScheduler::popHeap() {
  std::pop_heap(heap_.begin(), heap_.end(), Later{});
  heap_.pop_back();
}

void UvScheduler::dropStaleTop() {
  while (!heap_.empty() && stale(heap_.front())) popHeap();
}

void UvScheduler::releaseSlot(uint32_t slot) {
  Slot& s = slots_[slot];
  s.cb = nullptr;  // captured state goes now, not when the stale entry surfaces
  s.fired_id = nullptr;
  s.armed = false;
  ++s.generation;
  free_slots_.push_back(slot);
  --live_timers_;
}

Scheduler::TimerId UvScheduler::schedule(int64_t delay_ms, Callback cb, TimerId* fired_id) {
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& s = slots_[slot];
  s.cb = std::move(cb);
  s.fired_id = fired_id;
  s.armed = true;
  ++live_timers_;
  const int64_t deadline = nowUs() + std::max<int64_t>(0, delay_ms) * 1000;
  heap_.push_back(HeapEntry{deadline, ++next_seq_, slot, s.generation});
  std::push_heap(heap_.begin(), heap_.end(), Later{});
  if (armed_for_us_ < 0 || deadline < armed_for_us_) rearm();
  // Slot + 1, so that 0 stays invalid.
  return (static_cast<TimerId>(s.generation) << 32) | (static_cast<TimerId>(slot) + 1);
}

void UvScheduler::cancel(TimerId id) {
  const uint64_t low = id & 0xffffffffu;
  if (low == 0 || low > slots_.size()) return;
  const auto slot = static_cast<uint32_t>(low - 1);
  const Slot& s = slots_[slot];
  if (!s.armed || s.generation != static_cast<uint32_t>(id >> 32)) return;
  releaseSlot(slot);
  if (live_timers_ == 0) {
    // Nothing left to wait for: the armed uv timer must not keep the loop alive.
    heap_.clear();
    if (timer_) {
      uv_timer_stop(timer_.get());
      uv_unref(timer_.raw());
    }
    armed_for_us_ = -1;
  } else if (heap_.size() > 2 * live_timers_ + 64) {
    // Mostly stale (leases re-arm their timers at every renewal): rebuild from the live entries.
    std::erase_if(heap_, [this](const HeapEntry& e) { return stale(e); });
    std::make_heap(heap_.begin(), heap_.end(), Later{});
  }
  // Leaving the uv timer armed for an earlier, now cancelled deadline is harmless: onTimer
  // re-arms.
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

void UvScheduler::rearm(uint64_t min_delay_ms) {
  if (!timer_) return;
  dropStaleTop();
  if (heap_.empty()) {
    uv_timer_stop(timer_.get());
    armed_for_us_ = -1;
    return;
  }
  const int64_t deadline = heap_.front().deadline_us;
  const int64_t delay_us = deadline - nowUs();
  // Round up so we never wake before the deadline and spin.
  const uint64_t delay_ms = std::max<uint64_t>(
      min_delay_ms, delay_us <= 0 ? 0 : static_cast<uint64_t>((delay_us + 999) / 1000));
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
  const uint64_t last_seq = next_seq_;
  while (true) {
    dropStaleTop();
    if (heap_.empty()) break;
    const HeapEntry top = heap_.front();
    if (top.deadline_us > now) break;
    if (top.seq > last_seq) {
      break;  // a due timer scheduled by this run waits for the next loop iteration
    }
    popHeap();
    Callback cb = std::move(slots_[top.slot].cb);
    TimerId* fired_id = slots_[top.slot].fired_id;
    releaseSlot(top.slot);
    if (fired_id != nullptr) *fired_id = 0;
    cb();
    if (!timer_) return;  // closed by the callback
  }
  if (live_timers_ == 0) {
    heap_.clear();
    uv_timer_stop(timer_.get());
    uv_unref(timer_.raw());
  } else {
    // Never 0 ms from here: libuv compares timers with the loop time cached when this phase
    // began, so a timer restarted with 0 runs again in the same phase, before any poll. That is
    // true of a callback scheduled by this run and of a timer whose deadline passed
    // while the callbacks ran: when every run takes longer than the gap to the next deadline (a
    // loaded machine, a sanitizer build), the loop would never leave the timers phase, read a
    // socket or write an answer (seen: pipelined requests unanswered, 100 % CPU). 1 ms lets the
    // poll and check phases run between two runs.
    rearm(/*min_delay_ms=*/1);
  }
}

}  // namespace sidelock::event
