// Lifetimes in one place (src/README.md, rule 5). Everything on the loop is single-threaded, but a
// callback can still outlive the object that handed it out (a Redis reply, a posted task, a
// scrape hook), and an object's own callbacks can re-enter it or destroy it. These helpers are the
// only ways the code deals with that:
//
//   LivenessToken   a weak token; `guarded(fn)` runs `fn` only while the owner lives
//                   (Dragonfly's ConnectionRef idea).
//   InFlightGate    counts work in flight; `hold()` returns a holder that travels with the
//                   callback and gives its count back when released or destroyed (Seastar's gate).
//   ReentryScope    one frame of an object on the stack; the outermost frame's exit settles
//                   deferred work (and may destroy the object) once nothing of it is running.
//
// Timers that mark themselves fired are event::ScopedTimer (src/event/scheduler.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace sidelock::event {

/// Tells callbacks whether their owner still lives. The owner keeps one as a member: it expires
/// with the owner. Neither copyable nor movable (the callbacks it guards point at the owner).
class LivenessToken {
 public:
  /// A weak view of the token: cheap to copy into a callback, asks whether the owner lives.
  class Ref {
   public:
    Ref() = default;
    /// True once the owner is gone (and for a default Ref, which belongs to nobody).
    bool expired() const { return weak_.expired(); }

   private:
    friend class LivenessToken;
    explicit Ref(const std::shared_ptr<char>& strong) : weak_(strong) {}
    std::weak_ptr<char> weak_;
  };

  LivenessToken() = default;
  LivenessToken(const LivenessToken&) = delete;
  LivenessToken& operator=(const LivenessToken&) = delete;

  Ref ref() const { return Ref(alive_); }

  /// `fn` wrapped so that it does nothing once the owner is gone (for a callback that may be
  /// called after its owner was destroyed). `fn`'s result, if any, is dropped.
  template <typename F>
  auto guarded(F fn) const {
    return [alive = ref(), fn = std::move(fn)](auto&&... args) mutable {
      if (!alive.expired()) fn(std::forward<decltype(args)>(args)...);
    };
  }

 private:
  std::shared_ptr<char> alive_ = std::make_shared<char>();
};

/// Counts work in flight (backend calls not yet answered). `hold()` counts one; the holder travels
/// with the work's callback and gives the count back when it is released or destroyed, so no
/// path can forget to. When the count falls to zero, the drained hook runs (if set). A holder may
/// outlive the gate (a callback the owner's backend still keeps): it then touches nothing.
///
/// Unlike Seastar's move-only holder, copies of a holder share its one count (std::function
/// needs copyable callbacks, and a backend that copies a callback must not make the work count
/// twice): release() on any copy gives it back, or the last copy's destruction does.
class InFlightGate {
  struct State {
    int64_t count = 0;
    std::function<void()> on_drained;
  };
  struct Ticket {
    explicit Ticket(std::shared_ptr<State> s) : state(std::move(s)) { ++state->count; }
    ~Ticket() { release(); }
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    void release() {
      if (state == nullptr) return;
      std::shared_ptr<State> s = std::move(state);
      if (--s->count == 0 && s->on_drained) s->on_drained();
    }
    std::shared_ptr<State> state;  // null once released
  };

 public:
  class Holder {
   public:
    Holder() = default;

    bool holds() const { return ticket_ != nullptr && ticket_->state != nullptr; }
    /// Gives the count back now (idempotent, for every copy); runs the drained hook if it was
    /// the last one in flight.
    void release() {
      if (ticket_ != nullptr) ticket_->release();
      ticket_.reset();
    }

   private:
    friend class InFlightGate;
    explicit Holder(std::shared_ptr<Ticket> ticket) : ticket_(std::move(ticket)) {}
    std::shared_ptr<Ticket> ticket_;
  };

  InFlightGate() = default;
  /// Holders still out (kept by callbacks of a longer-lived object) must not call back into the
  /// owner that is going away.
  ~InFlightGate() { state_->on_drained = nullptr; }
  InFlightGate(const InFlightGate&) = delete;
  InFlightGate& operator=(const InFlightGate&) = delete;

  [[nodiscard]] Holder hold() { return Holder(std::make_shared<Ticket>(state_)); }
  int64_t inFlight() const { return state_->count; }
  bool idle() const { return state_->count == 0; }
  /// Runs each time the count falls to zero (never from hold(), never once the gate is gone).
  void onDrained(std::function<void()> fn) { state_->on_drained = std::move(fn); }

 private:
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

/// How deep an object's own frames are nested on the stack. Counted by ReentryScope only.
class ReentryDepth {
 public:
  bool inside() const { return depth_ > 0; }
  int depth() const { return depth_; }

 private:
  template <typename>
  friend class ReentryScope;
  int depth_ = 0;
};

/// When the outermost frame's settle hook runs.
enum class SettleWhen {
  /// Still counted as inside: whatever the hook sets off is deferred to the hook (it never
  /// re-enters it). The hook returns false if it destroyed the owner (the depth is not touched).
  kBeforeLeaving,
  /// After the frame is counted out: the hook may destroy the owner; a frame it opens settles
  /// on its own.
  kAfterLeaving,
};

/// RAII: one frame of an object whose callbacks may re-enter it or destroy it. Every entry point
/// (a uv callback, a timer, a backend reply) opens one; only the outermost exit settles (runs
/// deferred work, re-arms timers, destroys a closed object), so nothing deletes the object while
/// one of its frames is on the stack.
template <typename Settle>
class ReentryScope {
 public:
  ReentryScope(ReentryDepth& depth, SettleWhen when, Settle settle)
      : depth_(depth), when_(when), settle_(std::move(settle)) {
    ++depth_.depth_;
  }
  ~ReentryScope() {
    if (depth_.depth_ != 1) {
      --depth_.depth_;
    } else if (when_ == SettleWhen::kBeforeLeaving) {
      if constexpr (std::is_void_v<std::invoke_result_t<Settle&>>) {
        settle_();
        --depth_.depth_;
      } else if (settle_()) {
        --depth_.depth_;  // false: the owner (and `depth_`) is gone
      }
    } else {
      --depth_.depth_;
      settle_();  // may destroy the owner
    }
  }
  ReentryScope(const ReentryScope&) = delete;
  ReentryScope& operator=(const ReentryScope&) = delete;

 private:
  ReentryDepth& depth_;
  const SettleWhen when_;
  Settle settle_;
};

}  // namespace sidelock::event
