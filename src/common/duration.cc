#include "common/duration.h"

#include <charconv>
#include <string>

namespace sidelock {
namespace {

constexpr int64_t kMaxDurationMs = int64_t{100} * 365 * 24 * 3600 * 1000;

/// "'<text>'<why>". (Appending, not `"'" + std::string(text) + ...`: gcc 12 warns falsely on that.)
Status badDuration(std::string_view text, std::string_view why) {
  std::string message = "'";
  message.append(text).append("'").append(why);
  return invalidArgument(std::move(message));
}

}  // namespace

StatusOr<int64_t> parseDurationMs(std::string_view text) {
  if (text.empty()) return invalidArgument("empty duration");
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data() || value < 0) {
    return badDuration(text, " is not a duration (e.g. 500, 500ms, 30s)");
  }
  std::string_view unit(end, text.data() + text.size() - end);
  int64_t scale = 0;
  if (unit.empty() || unit == "ms") {
    scale = 1;
  } else if (unit == "s") {
    scale = 1000;
  } else if (unit == "m") {
    scale = 60'000;
  } else if (unit == "h") {
    scale = 3'600'000;
  } else {
    return badDuration(text, ": unknown unit (use ms, s, m or h)");
  }
  if (value > kMaxDurationMs / scale) {
    return badDuration(text, " is too long");
  }
  return value * scale;
}

}  // namespace sidelock
