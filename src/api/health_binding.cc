#include "api/health_binding.h"

#include <string>
#include <utility>

namespace sidelock::api {

void readHealth(RequestBody& body, std::optional<health::HealthSpec>& out) {
  std::vector<BodyMember> members;
  if (!body.ok() || !body.has(BodyField::kHealth) ||
      !body.readObject(BodyField::kHealth, members)) {
    return;
  }
  health::HealthSpec spec;
  bool has_url = false;
  std::vector<std::string_view> seen;
  for (const BodyMember& m : members) {
    for (std::string_view name : seen) {
      if (name == m.name) return body.setError("health." + m.name + " is given twice");
    }
    seen.push_back(m.name);
    if (m.name == "url") {
      if (m.type != BodyMember::Type::kString) return body.setError("health.url must be a string");
      StatusOr<health::ProbeUrl> url = health::parseProbeUrl(m.text);
      if (!url.isOk()) return body.setError(url.status().message());
      spec.url = std::move(*url);
      has_url = true;
    } else if (m.name == "interval_ms") {
      if (m.type != BodyMember::Type::kInteger || m.integer < health::kMinIntervalMs ||
          m.integer > health::kMaxIntervalMs) {
        return body.setError("health.interval_ms must be an integer between " +
                             std::to_string(health::kMinIntervalMs) + " and " +
                             std::to_string(health::kMaxIntervalMs));
      }
      spec.interval_ms = m.integer;
    } else if (m.name == "failures") {
      if (m.type != BodyMember::Type::kInteger || m.integer < 1 ||
          m.integer > health::kMaxFailures) {
        return body.setError("health.failures must be an integer between 1 and " +
                             std::to_string(health::kMaxFailures));
      }
      spec.failures = static_cast<int>(m.integer);
    } else if (m.name == "grace_ms") {
      if (m.type != BodyMember::Type::kInteger || m.integer < 0 ||
          m.integer > health::kMaxGraceMs) {
        return body.setError("health.grace_ms must be an integer between 0 and " +
                             std::to_string(health::kMaxGraceMs));
      }
      spec.grace_ms = m.integer;
    } else {
      return body.setError("unknown field \"health." + m.name + "\"");
    }
  }
  if (!has_url) return body.setError("health.url is required");
  out = std::move(spec);
}

std::optional<Answer> healthRefusal(const health::Prober& prober, const health::HealthSpec& spec) {
  const Status admitted = prober.admit(spec);
  if (admitted.isOk()) return std::nullopt;
  if (admitted.code() == StatusCode::kResourceExhausted) {
    // A probe ends with its last hold: come back after about one interval.
    return retryLaterAnswer(429, "too_many_probes", admitted.message(), spec.interval_ms,
                            "health.max_probes");
  }
  return errorAnswer(400, "bad_request", admitted.message());
}

std::function<void(lock::LeaseEvent)> endWatchWithLease(
    std::shared_ptr<HealthHold> hold, std::function<void(lock::LeaseEvent)> on_event) {
  return [hold = std::move(hold), on_event = std::move(on_event)](lock::LeaseEvent e) {
    if (e == lock::LeaseEvent::kLost || e == lock::LeaseEvent::kReleased ||
        e == lock::LeaseEvent::kCapExpired) {
      hold->watch.reset();
    }
    if (on_event) on_event(e);
  };
}

void watchHealth(const std::shared_ptr<HealthHold>& hold, health::Prober& prober,
                 lock::LockService& service, const lock::Grant& grant) {
  // The watch lives in the hold, which the lease's event callback keeps: the callback holds the
  // hold weakly (no cycle), and the prober never calls it once the watch is gone.
  hold->watch =
      prober.watch(hold->spec, [weak = std::weak_ptr<HealthHold>(hold), service = &service,
                                lock = grant.lock, owner = grant.owner] {
        auto alive = weak.lock();
        if (alive == nullptr) return;
        alive->unhealthy = true;
        service->releaseUnhealthy(lock, owner,
                                  alive->holder_listens
                                      ? lock::LockService::UnhealthyEnd::kRunOut
                                      : lock::LockService::UnhealthyEnd::kRelease);
      });
}

}  // namespace sidelock::api
