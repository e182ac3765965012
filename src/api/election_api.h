// Leader election over HTTP (README "Leader election"): campaign as an NDJSON stream, the leader
// read from the backend by any sidecar, observe streams pushed on every change, proclaim, resign,
// and a readiness route that answers 200 only while a given candidate leads. An election is a
// lock of kind kElection (backend.h): the lock service queues candidates, renews the leader's
// lease and tells it when the lease is lost; its fencing token is the election's term.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "api/election_observers.h"
#include "api/lock_api.h"
#include "api/request_body.h"
#include "common/names.h"
#include "config/config.h"
#include "event/lifetime.h"
#include "event/scheduler.h"
#include "health/prober.h"
#include "http/http_types.h"
#include "lock/lock_service.h"
#include "metrics/metrics.h"

namespace sidelock::api {

/// The acquire of a campaign for election `name` (shared by the campaign route and PodElections):
/// in line until elected or cancelled (no time limit), then leading with the lease renewed until
/// it is released or lost (a stream hold without max_hold_ms: a leader stays while it is alive).
lock::AcquireOptions campaignOptions(std::string_view name, std::string_view candidate,
                                     std::string_view value, int64_t ttl_ms);
/// Counts a campaign's lease event in the election metrics (resignations, leadership lost).
void countCampaignEvent(metrics::Metrics& metrics, lock::LeaseEvent event);

class ElectionApi {
 public:
  struct Options {
    /// This sidecar's pod: whom GET /v1/elections/{name}/ready asks about without `candidate`.
    std::string identity;
    /// Observers read the leader again at least this often (a missed announcement's bound).
    int64_t observe_reread_ms = 1000;
    /// Campaigns' "health" (README "Holds that follow the app's health"): after `failures`
    /// failed probes the leader resigns and its stream reads lost, reason unhealthy. Null: a
    /// campaign naming health is refused (400).
    health::Prober* health_prober = nullptr;
  };
  /// Candidates: 1..kMaxCandidateBytes printable ASCII (space included); values: up to
  /// kMaxValueBytes of any text (common/names.h, shared with the configuration).
  static constexpr size_t kMaxCandidateBytes = sidelock::kMaxCandidateBytes;
  static constexpr size_t kMaxValueBytes = kMaxLeaderValueBytes;
  /// The readiness route, also served on the admin listener (a kubelet probe reaches it there).
  static constexpr const char* kReadyPattern = "/v1/elections/{name}/ready";

  /// `lock_api` answers proclaim and resign once per request_id (its remembered answers).
  ElectionApi(const config::LocksConfig& locks, lock::LockService& service, LockApi& lock_api,
              metrics::Metrics& metrics, event::Scheduler& scheduler, Options options);
  ~ElectionApi();
  ElectionApi(const ElectionApi&) = delete;
  ElectionApi& operator=(const ElectionApi&) = delete;

  std::vector<Route> routes();
  /// The observe groups of this sidecar (PodElections listens to its names' groups).
  ElectionObservers& observers() { return observers_; }
  /// SIGTERM: every leader elected through this sidecar steps down: its stream gets
  /// `stepping_down` with resign_in_ms = step_down_ms, its lease keeps being renewed, and it
  /// resigns when the client closes the stream or step_down_ms have passed (then the stream ends
  /// with `resigned`). The client's process can so stop before the next candidate, anywhere, is
  /// elected (one round trip after the resignation, not a TTL). step_down_ms <= 0 resigns at
  /// once. Candidates leave the line, observe streams end, and new campaigns are refused (503
  /// shutting_down) at once. on_stepped_down runs once every step-down is done (resigned, lost,
  /// or its release answered): the lock service must not release those leases before.
  void setDraining(bool draining, int64_t step_down_ms = 0,
                   std::function<void()> on_stepped_down = {});

  /// What is wrong with a candidate name ("" if fine).
  static std::string candidateProblem(std::string_view candidate) {
    return sidelock::candidateProblem(candidate);
  }

 private:
  struct Campaign;

  void campaign(http::Request& req, http::ResponderPtr res);
  void leader(http::Request& req, http::ResponderPtr res);
  void observe(http::Request& req, http::ResponderPtr res);
  void proclaim(http::Request& req, http::ResponderPtr res);
  void resign(http::Request& req, http::ResponderPtr res);
  void ready(http::Request& req, http::ResponderPtr res);
  /// Resigns a stepping-down campaign (client gone or deadline) and counts the release in flight.
  void stepDownRelease(const std::shared_ptr<Campaign>& c);
  /// The campaign's stream is over (its last line written, or its client gone): it leaves the
  /// list, and a step-down in progress is checked.
  void finishCampaign(const std::shared_ptr<Campaign>& c);
  /// {"event":"resigned","name","term"}: the last line of a campaign that gave up its lease.
  static std::string resignedLine(const Campaign& c);
  /// Runs on_stepped_down_ (on a later turn) once no step-down is pending.
  void checkSteppedDown();

  const config::LocksConfig& locks_;
  lock::LockService& service_;
  LockApi& lock_api_;
  metrics::Metrics& metrics_;
  event::Scheduler& scheduler_;
  Options options_;
  bool draining_ = false;
  /// Step-down releases sent and not yet answered.
  int step_down_releases_ = 0;
  std::function<void()> on_stepped_down_;
  ElectionObservers observers_;
  /// Campaigns in progress (waiting or leading), so that draining can end them.
  std::unordered_set<std::shared_ptr<Campaign>> campaigns_;
  RequestBody body_;
  // Last member: callbacks handed to the lock service and the HTTP server are guarded by it
  // (src/README.md, rule 5), so none runs after this API is gone, whatever the teardown order.
  event::LivenessToken alive_;
};

}  // namespace sidelock::api
