// The v1 HTTP API: JSON <-> LockService. Validates every input before it reaches the lock service
// (bad input changes nothing) and maps results to status codes and JSON error bodies:
//   {"error": "<code>", "message": "..."}
// The HTTP layer knows nothing of locks; this layer knows nothing of Redis, and speaks to the lock
// service only (never to the backend).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/health_binding.h"
#include "api/idempotency_cache.h"
#include "api/lock_events.h"
#include "api/request_body.h"
#include "config/config.h"
#include "event/lifetime.h"
#include "event/scheduler.h"
#include "http/http_types.h"
#include "lock/lock_service.h"
#include "metrics/metrics.h"

namespace sidelock::api {

struct Route {
  std::string method;
  std::string pattern;  // "/v1/locks/{name}/acquire"
  http::Handler handler;
};

struct AcquireCall;    // one acquire request's state (lock_routes.cc)
struct StepDownGroup;  // the stream holds stepping down at shutdown (lock_routes.cc)

class LockApi {
 public:
  /// `scheduler` times the sweeps that drop request_id answers once their window is over.
  LockApi(const config::LocksConfig& locks, lock::LockService& service, metrics::Metrics& metrics,
          event::Scheduler& scheduler);

  /// Every route this API serves; main registers them with the HTTP router.
  std::vector<Route> routes();
  /// Routes for the admin listener only (listen.admin): POST /admin/v1/locks/{name}/release
  /// (answers only requests that carried an admin token) and GET /v1/openapi.json.
  std::vector<Route> adminRoutes();

  /// Answers a request that acts once (a release of a lock or permit, an election's proclaim or
  /// resign) under `replay_key` (empty without a request_id): a retry gets the first answer, or
  /// waits for it while the first runs. `run` performs the action and calls the function it is
  /// given with the answer (and whether to remember it) exactly once.
  using AnswerFn = std::function<void(const IdempotencyCache::Answer&, bool remember)>;
  /// `fingerprint`: the request's fields (RequestBody::fingerprint); another request under the
  /// same request id is answered 422 `request_id_reused` and nothing runs.
  void answerOnce(std::string replay_key, uint64_t fingerprint, http::ResponderPtr res,
                  const std::function<void(AnswerFn)>& run);
  /// The sidecar's identity (config `identity`): the "holder" of an acquire that names none.
  void setIdentity(std::string identity) { identity_ = std::move(identity); }

  /// While draining (SIGTERM), /readyz answers 503 and new acquires 503 shutting_down.
  /// Draining also ends the lock event streams (new ones get 503).
  void setDraining(bool draining) {
    draining_ = draining;
    if (draining) events_->endAll();
  }
  /// Shutdown's step-down for stream holds (locks and permits; campaigns step down in
  /// ElectionApi): each open one reads `{"event":"stepping_down","release_in_ms":N}` and its
  /// lease stays renewed; it is released when its client closes the stream (its process stopped
  /// first: sidelock run) or `step_down_ms` later (`release_at_deadline` false, as with
  /// shutdown.release_held false: left to the lock service's shutdown, which stops renewing).
  /// `done` runs once every one has ended (or step_down_ms + 1 s later at most); only then may
  /// the lock service release what is left. Without this, a release at shutdown handed the lock
  /// to the next holder while the first holder's process still ran.
  void stepDownStreamHolds(int64_t step_down_ms, bool release_at_deadline,
                           std::function<void()> done);
  /// Why /readyz answers 503 ("shutting down", the backend's reason), or "" when it answers 200.
  std::string notReadyReason() const;
  /// The prober of health-bound holds (README "Holds that follow the app's health"); without
  /// one, an acquire naming "health" is refused.
  void setHealthProber(health::Prober* prober) { health_prober_ = prober; }

  /// The admin listing: `limit` by default and at most; the backend scan's time budget.
  static constexpr int64_t kListDefaultLimit = 100;
  static constexpr int64_t kListMaxLimit = 1000;
  static constexpr int64_t kListBudgetMs = 200;

  /// Lock names (and election names): the rules of common/names.h, lockNameProblem().
  static bool validLockName(std::string_view name, size_t max_bytes) {
    return lockNameProblem(name, max_bytes).empty();
  }
  /// What is wrong with `name` (for the 400 answer), "" if it is a valid lock name.
  static std::string lockNameProblem(std::string_view name, size_t max_bytes);
  /// Owner ids: 1..max_owner_bytes printable ASCII (0x21..0x7e).
  static bool validOwner(std::string_view owner, size_t max_bytes);
  /// Whether the caller may use lock `name`: no token (none configured on its listener), a token
  /// without prefixes, or a token with a prefix `name` starts with (README "Access control").
  static bool mayUseLock(const http::Principal* principal, std::string_view name);

 private:
  void acquire(http::Request& req, http::ResponderPtr res);
  // Semaphores: /v1/semaphores/{name}/...
  /// GET /admin/v1/locks?prefix=&limit=: held locks across the deployment (LockService::listHeld).
  void listHeld(http::Request& req, http::ResponderPtr res);
  void semaphoreAcquire(http::Request& req, http::ResponderPtr res);
  void semaphoreRelease(http::Request& req, http::ResponderPtr res);
  void semaphoreExtend(http::Request& req, http::ResponderPtr res);
  void semaphoreInspect(http::Request& req, http::ResponderPtr res);
  /// Claims `replay_key` (empty: no request_id, nothing claimed) for the request `res` answers,
  /// or finds its first attempt's answer, or attaches `res` to that attempt (IdempotencyCache).
  /// A request whose `fingerprint` differs from the first's under the same key is answered 422
  /// `request_id_reused` here (kMismatch: nothing more to do).
  IdempotencyCache::Lookup claimRequest(const std::string& replay_key, uint64_t fingerprint,
                                        const http::ResponderPtr& res);
  /// The acquire after its request is read (locks and permits): under `replay_key` (empty
  /// without a request_id) a retry gets the first attempt's grant, or waits for its answer.
  void beginAcquire(lock::AcquireOptions opts, std::string replay_key, uint64_t fingerprint,
                    http::ResponderPtr res);
  /// Runs the acquire; `claim` (0: none) is its request_id's claim in replies_.
  /// `health`, if set, binds the granted lease to its app's health (health_binding.h).
  void startAcquire(lock::AcquireOptions opts, std::string replay_key, IdempotencyCache::Id claim,
                    http::ResponderPtr res, std::shared_ptr<HealthHold> health = nullptr);
  void retryGrant(lock::AcquireOptions opts, std::string replay_key, uint64_t fingerprint,
                  IdempotencyCache::Id answer_id, std::string owner, uint64_t token,
                  http::ResponderPtr res);
  /// Keeps a timer armed while answers are remembered, to drop each when its window ends.
  void scheduleSweep();
  void release(http::Request& req, http::ResponderPtr res);
  void extend(http::Request& req, http::ResponderPtr res);
  // Multi-locks: /v1/multilocks/acquire and /release.
  void multiAcquire(http::Request& req, http::ResponderPtr res);
  void multiRelease(http::Request& req, http::ResponderPtr res);
  /// As beginAcquire / startAcquire / retryGrant, for a multi-lock: `answer` is the remembered
  /// grant of every name.
  void beginMultiAcquire(lock::MultiAcquireOptions opts, std::string replay_key,
                         uint64_t fingerprint, http::ResponderPtr res);
  void startMultiAcquire(lock::MultiAcquireOptions opts, std::string replay_key,
                         IdempotencyCache::Id claim, http::ResponderPtr res);
  void retryMultiGrant(lock::MultiAcquireOptions opts, std::string replay_key, uint64_t fingerprint,
                       IdempotencyCache::Id answer_id, std::string owner, std::string answer,
                       http::ResponderPtr res);
  /// The lock of the lease `owner` names on lock `name`: the readers' with "mode": "shared", or
  /// without a mode when this sidecar granted `owner` a read lease.
  lock::LockId leaseOf(std::string_view name, std::string_view owner, bool shared,
                       bool mode_given) const;
  void inspect(http::Request& req, http::ResponderPtr res);
  /// GET /v1/locks/{name}/events (lock_event_routes.cc).
  void events(http::Request& req, http::ResponderPtr res);
  void list(http::Request& req, http::ResponderPtr res);
  void healthz(http::Request& req, http::ResponderPtr res);
  void readyz(http::Request& req, http::ResponderPtr res);
  void metricsText(http::Request& req, http::ResponderPtr res);
  void forceRelease(http::Request& req, http::ResponderPtr res);
  void openapi(http::Request& req, http::ResponderPtr res);

  const config::LocksConfig& locks_;
  lock::LockService& service_;
  metrics::Metrics& metrics_;
  event::Scheduler& scheduler_;
  bool draining_ = false;
  health::Prober* health_prober_ = nullptr;
  std::string identity_;  // setIdentity()
  // Answers by request_id (safe retries); shared with the callbacks that fill it in.
  std::shared_ptr<IdempotencyCache> replies_;
  event::ScopedTimer sweep_timer_;
  // The event streams; shared so that a force release's answer can still find them (weakly).
  std::shared_ptr<LockEvents> events_;
  // The body of the request being handled: reused so that parsing allocates nothing once warm.
  RequestBody body_;
  /// The stream holds started, for stepDownStreamHolds (ended ones are pruned as the list
  /// grows: addStreamHold).
  std::vector<std::weak_ptr<AcquireCall>> stream_holds_;
  size_t stream_holds_pruned_at_ = 64;
  std::shared_ptr<StepDownGroup> step_down_;  // the shutdown's, kept until it is done
  void addStreamHold(const std::shared_ptr<AcquireCall>& call);
};

/// Writes `{"error": code, "message": message}` (plus `extra` fields) with `status`.
void sendError(const http::ResponderPtr& res, int status, std::string_view code,
               std::string_view message);

}  // namespace sidelock::api
