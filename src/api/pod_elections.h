// The elections the sidecar runs for its own pod (config `elections:`, README "Elections the
// sidecar runs for its pod"): from start-up it campaigns in each with the configured `identity`
// and value, exactly as POST /v1/elections/{name}/campaign does (campaignOptions()), waits in line
// without a time limit, campaigns again after a loss (after a short jittered backoff, so a
// flapping backend is not hammered), and on SIGTERM resigns before the sidecar drains, so a
// rolling update hands leadership over in one round trip instead of a TTL. The app needs no code:
// it asks GET /v1/elections/{name} or uses .../ready as its readiness probe.
//
// An election with `health` (the app's health endpoint, README "Holds that follow the app's
// health") is probed from start-up for as long as the sidecar runs: after `failures` failed
// probes in a row the pod resigns if it leads (released as unhealthy, as an HTTP campaign's) or
// leaves the line, and campaigns no more until a probe succeeds again; then it is a candidate
// again at once. An app that is sick is never elected; one that recovered needs no restart.
//
// Its gauges, per configured name only (bounded by the config): sidelock_election_leader,
// sidelock_election_leaderless_seconds (from the name's observe group: pushed, not polled) and
// sidelock_election_ttl_seconds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "api/election_observers.h"
#include "config/config.h"
#include "event/lifetime.h"
#include "event/scheduler.h"
#include "health/prober.h"
#include "lock/backoff.h"
#include "lock/lock_service.h"
#include "metrics/metrics.h"

namespace sidelock::api {

class PodElections {
 public:
  /// First campaign again this long after a loss or an error, doubling up to kRetryMaxMs (each
  /// drawn in [half, whole]); back to the minimum once a term lasted a whole TTL.
  static constexpr int64_t kRetryMinMs = 100;
  static constexpr int64_t kRetryMaxMs = 5000;

  PodElections(std::vector<config::ElectionConfig> elections, std::string identity,
               lock::LockService& service, ElectionObservers& observers,
               event::Scheduler& scheduler, metrics::Metrics& metrics,
               health::Prober* prober = nullptr);
  ~PodElections();
  PodElections(const PodElections&) = delete;
  PodElections& operator=(const PodElections&) = delete;

  /// Campaigns in every configured election (once the backend is started).
  void start();
  /// SIGTERM, before anything drains: resigns every election this sidecar leads (the next
  /// candidate, on any sidecar, is elected at once), leaves the lines, and campaigns no more.
  void resignAll();

 private:
  struct Election;

  void campaign(Election& e);
  void onAnswer(Election& e, lock::AcquireResult r);
  void onLeaseEvent(Election& e, lock::LeaseEvent event);
  /// Campaigns again after the backoff (unless stopped).
  void campaignLater(Election& e, std::string_view why);
  void onLeaderRead(Election& e, const LeaderView& view);
  /// The election's health endpoint failed `failures` times in a row / succeeded again.
  void onUnhealthy(Election& e);
  void onHealthy(Election& e);
  void updateLeaderless();

  const std::string identity_;
  lock::LockService& service_;
  ElectionObservers& observers_;
  event::Scheduler& scheduler_;
  metrics::Metrics& metrics_;
  health::Prober* prober_;  // null: no election has health (checked in the constructor)
  std::vector<std::unique_ptr<Election>> elections_;
  bool stopped_ = false;
  // Last member: every callback handed out is guarded by it (src/README.md, rule 5).
  event::LivenessToken alive_;
};

}  // namespace sidelock::api
