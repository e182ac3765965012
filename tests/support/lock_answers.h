// Small readers of the sidecar's answers that many tests need, in one place.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "support/http_client.h"

namespace sidelock::testing {

/// The "owner" of an acquire's answer; "" when the body has none or is not JSON (a helper that
/// throws would hide the status and body the test's own failure message shows).
std::string ownerOf(const HttpResponse& r);
/// Milliseconds of the steady clock since `t0`.
int64_t msSince(std::chrono::steady_clock::time_point t0);

}  // namespace sidelock::testing
