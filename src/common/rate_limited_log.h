// Keeps a recurring per-request warning to a few lines during an outage (src/README.md, rule 12):
// the first occurrence and every change of state are logged at once; repeats of the same state
// are logged at most once per window, carrying the count of the repeats that were held back.
//
//   if (auto suppressed = no_quorum_log_.admit(scheduler_.nowMs(), failed_nodes)) {
//     SL_LOG(kWarn, "redlock.no_quorum", {"error", msg}, {"suppressed", *suppressed});
//   }
//
// Pure bookkeeping: the caller passes the time (any monotonic clock in ms), so tests use a fake
// clock and the class needs neither a loop nor a timer. A count held back when the outage ends is
// reported with the next line (the next outage, or the recovery the caller logs itself).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sidelock {

class RateLimitedLog {
 public:
  static constexpr int64_t kDefaultWindowMs = 10'000;

  explicit RateLimitedLog(int64_t window_ms = kDefaultWindowMs) : window_ms_(window_ms) {}

  /// One occurrence at `now_ms` in `state` (what tells one situation from another: an error
  /// code, the set of failing nodes; not a lock name or a timing). Returns the number of
  /// occurrences suppressed since the last logged one when this one is to be logged, and
  /// nullopt when it is to be suppressed (and counted).
  std::optional<uint64_t> admit(int64_t now_ms, std::string_view state);

  /// Forget the state (the condition ended): the next occurrence is logged at once.
  void reset() { logged_any_ = false; }

  int64_t windowMs() const { return window_ms_; }
  /// Occurrences held back since the last logged one.
  uint64_t suppressed() const { return suppressed_; }

 private:
  int64_t window_ms_;
  bool logged_any_ = false;
  std::string state_;
  int64_t last_logged_ms_ = 0;
  uint64_t suppressed_ = 0;
};

}  // namespace sidelock
