// Retry pacing for waiters (and for watchdog retries after transient errors): exponential growth
// from min to max with jitter, then clipped by what we know about the world — never sleep past
// the holder's remaining TTL (the lock is likely free then) nor past the caller's deadline.
#pragma once

#include <cstdint>

namespace sidelock::lock {

/// Uniform draw in [lo, hi]; injectable so tests can pin the jitter.
using JitterFn = int64_t (*)(int64_t lo, int64_t hi);

/// The un-jittered ceiling of retry `attempt` (0-based): min(max_ms, min_ms * 2^attempt), and at
/// least 1 ms so that a zero minimum can never turn into a busy loop.
int64_t backoffCeilingMs(int attempt, int64_t min_ms, int64_t max_ms);

/// Clips a sleep so it ends no later than just after the holder's lease runs out
/// (`holder_ttl_ms` < 0: unknown) and no later than the caller's deadline (`remaining_ms` < 0:
/// none). Never below 1 ms.
int64_t clipDelayMs(int64_t delay_ms, int64_t holder_ttl_ms, int64_t remaining_ms);

class Backoff {
 public:
  /// `extra_jitter_ms`: a uniform [0, extra] added to every sleep (Redlock split votes).
  Backoff(int64_t min_ms, int64_t max_ms, JitterFn jitter = nullptr, int64_t extra_jitter_ms = 0);

  /// Next sleep: "equal jitter" in [ceiling/2, ceiling] (keeps the exponential shape while
  /// de-synchronising competing sidecars) plus the extra jitter, then clipDelayMs().
  int64_t next(int64_t holder_ttl_ms = -1, int64_t remaining_ms = -1);
  /// After a wake-up or a grant: start again from the minimum.
  void reset() { attempt_ = 0; }
  int attempt() const { return attempt_; }

 private:
  int64_t min_ms_;
  int64_t max_ms_;
  JitterFn jitter_;
  int64_t extra_jitter_ms_;
  int attempt_ = 0;
};

}  // namespace sidelock::lock
