#include "lock/backoff.h"

#include <algorithm>

#include "common/random.h"

namespace sidelock::lock {

int64_t backoffCeilingMs(int attempt, int64_t min_ms, int64_t max_ms) {
  const int64_t lo = std::max<int64_t>(1, min_ms);
  const int64_t hi = std::max(lo, max_ms);
  int64_t v = lo;
  // Doubling stops at the cap, so the shift never overflows however many attempts were made.
  for (int i = 0; i < attempt && v < hi; ++i) v *= 2;
  return std::min(v, hi);
}

int64_t clipDelayMs(int64_t delay_ms, int64_t holder_ttl_ms, int64_t remaining_ms) {
  int64_t d = delay_ms;
  // +1: a key is still alive at exactly its PTTL; arrive just after it lapses.
  if (holder_ttl_ms >= 0) d = std::min(d, holder_ttl_ms + 1);
  if (remaining_ms >= 0) d = std::min(d, remaining_ms);
  return std::max<int64_t>(1, d);
}

Backoff::Backoff(int64_t min_ms, int64_t max_ms, JitterFn jitter, int64_t extra_jitter_ms)
    : min_ms_(min_ms),
      max_ms_(max_ms),
      jitter_(jitter != nullptr ? jitter : &jitterBetween),
      extra_jitter_ms_(std::max<int64_t>(0, extra_jitter_ms)) {}

int64_t Backoff::next(int64_t holder_ttl_ms, int64_t remaining_ms) {
  const int64_t ceiling = backoffCeilingMs(attempt_, min_ms_, max_ms_);
  if (attempt_ < 64) ++attempt_;
  int64_t d = jitter_(std::max<int64_t>(1, ceiling / 2), ceiling);
  if (extra_jitter_ms_ > 0) d += jitter_(0, extra_jitter_ms_);
  return clipDelayMs(d, holder_ttl_ms, remaining_ms);
}

}  // namespace sidelock::lock
