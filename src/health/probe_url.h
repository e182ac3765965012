// The URL of an app's health endpoint, as a hold names it (README "Holds that follow the app's
// health"): the loopback-only parser shared with the configuration (common/health_spec.h), under
// the name the health layer has always used.
#pragma once

#include <string_view>

#include "common/health_spec.h"

namespace sidelock::health {

using ProbeUrl = LoopbackUrl;

/// Longest URL accepted.
inline constexpr size_t kMaxProbeUrlBytes = kMaxLoopbackUrlBytes;

/// parseLoopbackUrl() of a request's "health.url".
inline StatusOr<ProbeUrl> parseProbeUrl(std::string_view text) {
  return parseLoopbackUrl(text, "health.url");
}

}  // namespace sidelock::health
