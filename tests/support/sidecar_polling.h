// Ordering test steps by observed state, never by sleeping: on a loaded CI machine a sleep that
// "always" suffices is tomorrow's flake. Poll what the sidecar reports (GET /v1/locks, /metrics)
// until it shows the state the next step needs, with a generous deadline that only a real bug
// reaches.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "support/http_client.h"

namespace sidelock::testing {

/// Far above any state change the tests wait for; reached only when something is broken.
inline constexpr int64_t kPollTimeoutMs = 10'000;

/// Calls `condition` every few milliseconds until it returns true (-> true) or `timeout_ms`
/// passed (-> false).
bool pollUntil(const std::function<bool()>& condition, int64_t timeout_ms = kPollTimeoutMs);

/// Waiters queued for lock `name`, as GET /v1/locks lists them.
int queuedWaiters(HttpClient& c, const std::string& name);
/// Polls GET /v1/locks until `name` has exactly `n` queued waiters.
bool waitForWaiters(HttpClient& c, const std::string& name, int n,
                    int64_t timeout_ms = kPollTimeoutMs);

/// Polls GET `path` on 127.0.0.1:`port` every `step_ms` until it answers 200 (true), the child
/// `*pid` exits (false; it is reaped and `*pid` set to -1), or `timeout_ms` passes (false).
bool waitUntilServing(pid_t* pid, int port, const std::string& path, int64_t timeout_ms,
                      int64_t step_ms);

/// Value of one series (`name{labels}` exactly as exposed) in Prometheus text; -1 if absent.
int64_t metricValue(const std::string& text, const std::string& series);

}  // namespace sidelock::testing
