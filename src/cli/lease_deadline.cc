#include "cli/lease_deadline.h"

#include <algorithm>

namespace sidelock::cli {

void LeaseDeadline::confirmed(int64_t now_ms, int64_t ttl_ms) {
  if (ttl_ms < 0) return;
  confirmed_at_ms_ = now_ms;
  ttl_ms_ = ttl_ms;
}

int64_t LeaseDeadline::safetyMarginMs(int64_t ttl_ms) {
  return std::clamp<int64_t>(ttl_ms / 10, 0, 1000);
}

int64_t LeaseDeadline::killBy() const {
  if (!known()) return -1;
  return confirmed_at_ms_ + ttl_ms_ - safetyMarginMs(ttl_ms_);
}

int64_t LeaseDeadline::overdueAt() const {
  if (!known()) return -1;
  const int64_t kill_by = killBy();
  return std::min(kill_by, std::max(confirmed_at_ms_ + ttl_ms_ / 2, kill_by - grace_ms_));
}

int64_t LeaseDeadline::sigkillAt(int64_t stop_ms) const {
  const int64_t after_grace = stop_ms + grace_ms_;
  return known() ? std::min(after_grace, killBy()) : after_grace;
}

int64_t LeaseDeadline::killBeforeResign(int64_t now_ms, int64_t kill_at_ms, int64_t resign_in_ms) {
  if (resign_in_ms < 0 || kill_at_ms < 0) return kill_at_ms;
  const int64_t resign_by = now_ms + resign_in_ms - safetyMarginMs(resign_in_ms);
  return std::max(now_ms, std::min(kill_at_ms, resign_by));
}

}  // namespace sidelock::cli
