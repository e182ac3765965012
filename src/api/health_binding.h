// Holds that follow the app's health (README "Holds that follow the app's health"): the "health"
// field of an acquire, and the binding of a granted lease to a health::Prober watch. After the
// endpoint failed `failures` times in a row the lease is released as unhealthy
// (LockService::releaseUnhealthy) and a stream holder reads {"event":"lost","reason":"unhealthy"}.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "api/request_body.h"
#include "api/route_helpers.h"
#include "health/prober.h"
#include "lock/lock_service.h"

namespace sidelock::api {

/// Reads the "health" field ({"url", "interval_ms", "failures"}; url required, interval_ms
/// 100..60000 (default 1000), failures 1..100 (default 3)). Absent: `out` stays empty. A problem
/// is recorded in `body` (a 400 naming the member).
void readHealth(RequestBody& body, std::optional<health::HealthSpec>& out);

/// Whether a hold naming `spec` may start watching now under the prober's limits (config
/// `health`): nothing if so; else the answer: 400 bad_request (a port not in
/// health.allowed_ports) or 429 too_many_probes (`limit`: health.max_probes). Checked when the
/// request arrives and again at the grant (a waiter's probe starts only then): a grant refused
/// there is given back before anybody hears of it.
std::optional<Answer> healthRefusal(const health::Prober& prober, const health::HealthSpec& spec);

/// One hold's binding: created with the acquire, watching from its grant until the lease ends.
struct HealthHold {
  health::HealthSpec spec;
  health::HealthWatch watch;
  bool unhealthy = false;  // the lease was released because the endpoint failed
  /// The holder listens on a stream (a stream hold, a campaign): its lease runs out rather than
  /// being released at once, so that its process is stopped before anyone else holds the lock
  /// (LockService::UnhealthyEnd::kRunOut).
  bool holder_listens = false;
};

/// `on_event` wrapped so that the hold's watch ends with the lease (released, lost, run out).
std::function<void(lock::LeaseEvent)> endWatchWithLease(
    std::shared_ptr<HealthHold> hold, std::function<void(lock::LeaseEvent)> on_event);

/// Starts watching for the lease `grant` of `service` (at its grant).
void watchHealth(const std::shared_ptr<HealthHold>& hold, health::Prober& prober,
                 lock::LockService& service, const lock::Grant& grant);

}  // namespace sidelock::api
