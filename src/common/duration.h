// Durations as people write them, shared by the command line (`sidelock run --ttl 30s`) and the
// configuration (`locks.default_ttl_ms: 30s`), so both accept the same spellings.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace sidelock {

/// "1500", "1500ms", "30s", "5m", "2h" -> milliseconds (no unit: milliseconds). Non-negative
/// whole numbers only, at most ~100 years; anything else is kInvalidArgument with a message that
/// quotes `text`.
StatusOr<int64_t> parseDurationMs(std::string_view text);

}  // namespace sidelock
