#include "common/rate_limited_log.h"

namespace sidelock {

std::optional<uint64_t> RateLimitedLog::admit(int64_t now_ms, std::string_view state) {
  const bool changed = !logged_any_ || state != state_;
  if (!changed && now_ms - last_logged_ms_ < window_ms_) {
    ++suppressed_;
    return std::nullopt;
  }
  logged_any_ = true;
  if (changed) state_.assign(state);
  last_logged_ms_ = now_ms;
  const uint64_t held_back = suppressed_;
  suppressed_ = 0;
  return held_back;
}

}  // namespace sidelock
