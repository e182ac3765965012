// LockApi: construction, the route table, name and owner checks, and the routes that are not
// one lock kind's: GET /v1/locks, health, readiness, /metrics, the OpenAPI document. The routes
// of each kind live in lock_routes.cc, semaphore_routes.cc and multi_lock_routes.cc; what they
// share, in route_helpers.h.
#include "api/lock_api.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "api/json_object.h"
#include "api/openapi_document.h"
#include "api/route_helpers.h"
#include "common/invariant.h"
#include "common/log.h"
#include "common/names.h"

namespace sidelock::api {
namespace {

using nlohmann::json;

/// Lock event streams read each watched lock at least this often: the catch-up of a missed
/// announcement (README "Lock events").
constexpr int64_t kEventRereadMs = 1000;

const char* nodeState(const lock::NodeHealth& n) {
  if (!n.up) return "down";
  return n.voting ? "up" : "not_voting";
}

json healthJson(const lock::BackendHealth& h) {
  json nodes = json::array();
  for (const auto& n : h.nodes) {
    json node = {{"node", n.address}, {"state", nodeState(n)}};
    if (!n.reason.empty()) node["reason"] = n.reason;
    if (!n.role.empty()) node["role"] = n.role;
    nodes.push_back(std::move(node));
  }
  return nodes;
}

}  // namespace

std::string LockApi::lockNameProblem(std::string_view name, size_t max_bytes) {
  return sidelock::lockNameProblem(name, max_bytes);
}

bool LockApi::validOwner(std::string_view owner, size_t max_bytes) {
  if (owner.empty() || owner.size() > max_bytes) return false;
  for (unsigned char c : owner) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

bool LockApi::mayUseLock(const http::Principal* principal, std::string_view name) {
  if (principal == nullptr || principal->scopes.empty()) return true;
  for (const auto& prefix : principal->scopes) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

LockApi::LockApi(const config::LocksConfig& locks, lock::LockService& service,
                 metrics::Metrics& metrics, event::Scheduler& scheduler)
    : locks_(locks),
      service_(service),
      metrics_(metrics),
      scheduler_(scheduler),
      replies_(std::make_shared<IdempotencyCache>(
          locks.request_id_window_ms, static_cast<size_t>(locks.max_request_ids),
          static_cast<size_t>(locks.max_request_id_bytes))),
      events_(std::make_shared<LockEvents>(service, scheduler, metrics, kEventRereadMs)) {
  metrics_.addScrapeHook([replies = std::weak_ptr<IdempotencyCache>(replies_), m = &metrics] {
    if (auto r = replies.lock()) m->request_id_bytes.Set(static_cast<double>(r->bytes()));
  });
}

void LockApi::scheduleSweep() {
  if (sweep_timer_.pending()) return;
  const int64_t next_us = replies_->nextExpiryUs();
  // Nothing remembered yet (a claim is in flight): its answer expires a window from now at the
  // earliest. A second's slack batches the answers of one burst into one sweep.
  const int64_t delay_ms =
      next_us == 0 ? locks_.request_id_window_ms : (next_us - monotonicUs()) / 1000 + 1;
  sweep_timer_.start(scheduler_, std::max<int64_t>(delay_ms, 1000), [this] {
    replies_->sweep(monotonicUs());
    if (replies_->size() > 0) scheduleSweep();
  });
}

std::vector<Route> LockApi::routes() {
  auto bind = [this](void (LockApi::*fn)(http::Request&, http::ResponderPtr)) {
    return [this, fn](http::Request& req, http::ResponderPtr res) {
      (this->*fn)(req, std::move(res));
    };
  };
  // v1 routes read their query strictly (checkQuery): a key the route does not know is refused,
  // not ignored. Checked after the name's access (below) and before the route runs.
  auto bindV1 = [this](void (LockApi::*fn)(http::Request&, http::ResponderPtr),
                       QueryKeys keys = {}) {
    return [this, fn, keys = std::move(keys)](http::Request& req, http::ResponderPtr res) {
      if (!checkQuery(req, res, keys)) return;
      (this->*fn)(req, std::move(res));
    };
  };
  // Routes on one lock: a token limited to prefixes gets 403 outside them, before anything else
  // (a scoped token learns nothing about other locks, not even whether a name is valid).
  auto bindNamed = [this](void (LockApi::*fn)(http::Request&, http::ResponderPtr),
                          QueryKeys keys = {}) {
    return [this, fn, keys = std::move(keys)](http::Request& req, http::ResponderPtr res) {
      if (!checkNameAllowed(req, res)) return;
      if (!checkQuery(req, res, keys)) return;
      (this->*fn)(req, std::move(res));
    };
  };
  return {
      {"POST", "/v1/locks/{name}/acquire", bindNamed(&LockApi::acquire)},
      {"POST", "/v1/locks/{name}/release", bindNamed(&LockApi::release)},
      {"POST", "/v1/locks/{name}/extend", bindNamed(&LockApi::extend)},
      {"GET", "/v1/locks/{name}", bindNamed(&LockApi::inspect)},
      {"GET", "/v1/locks/{name}/events", bindNamed(&LockApi::events, {"extended"})},
      {"GET", "/v1/locks", bindV1(&LockApi::list)},
      {"POST", "/v1/semaphores/{name}/acquire", bindNamed(&LockApi::semaphoreAcquire)},
      {"POST", "/v1/semaphores/{name}/release", bindNamed(&LockApi::semaphoreRelease)},
      {"POST", "/v1/semaphores/{name}/extend", bindNamed(&LockApi::semaphoreExtend)},
      {"GET", "/v1/semaphores/{name}", bindNamed(&LockApi::semaphoreInspect)},
      {"POST", "/v1/multilocks/acquire", bindV1(&LockApi::multiAcquire)},
      {"POST", "/v1/multilocks/release", bindV1(&LockApi::multiRelease)},
      // Probes, metrics and the document: a query is ignored (probes and scrapers may add one).
      {"GET", "/healthz", bind(&LockApi::healthz)},
      {"GET", "/readyz", bind(&LockApi::readyz)},
      {"GET", "/metrics", bind(&LockApi::metricsText)},
      {"GET", "/v1/openapi.json", bind(&LockApi::openapi)},
  };
}

std::vector<Route> LockApi::adminRoutes() {
  return {
      {"POST", "/admin/v1/locks/{name}/release",
       [this](http::Request& req, http::ResponderPtr res) {
         if (checkQuery(req, res, {})) forceRelease(req, std::move(res));
       }},
      {"GET", "/admin/v1/locks",
       [this](http::Request& req, http::ResponderPtr res) {
         if (checkQuery(req, res, {"prefix", "limit"})) listHeld(req, std::move(res));
       }},
      {"GET", "/v1/openapi.json",
       [this](http::Request& req, http::ResponderPtr res) { openapi(req, std::move(res)); }},
  };
}

void LockApi::list(http::Request& req, http::ResponderPtr res) {
  // A token limited to prefixes sees only the names it may use (filtered, not refused: the
  // listing stays useful to a scoped app and reveals nothing beyond its own names).
  const http::Principal* principal = req.principal.get();
  json leases = json::array();
  for (const auto& l : service_.leases()) {
    if (!mayUseLock(principal, l.lock.name)) continue;
    // The printed form ("shared/doc", "fair/q", "semaphore/s"): what the listing always showed.
    leases.push_back(json{{"name", l.lock.display()},
                          {"token", l.token},
                          {"age_ms", l.age_ms},
                          {"ttl_remaining_ms", l.ttl_remaining_ms},
                          {"auto_renew", l.auto_renew},
                          {"stream", l.stream}});
  }
  json waiters = json::array();
  for (const auto& w : service_.waiterCounts()) {
    if (!mayUseLock(principal, w.lock.name)) continue;
    waiters.push_back(json{{"name", w.lock.display()}, {"waiters", w.waiters}});
  }
  sendJson(res, 200, json{{"leases", std::move(leases)}, {"waiters", std::move(waiters)}});
}

void LockApi::healthz(http::Request&, http::ResponderPtr res) {
  sendJson(res, 200, json{{"status", "ok"}});
}

void LockApi::readyz(http::Request&, http::ResponderPtr res) {
  lock::BackendHealth h = service_.backendHealth();
  if (draining_) {
    json body = {{"error", "not_ready"}, {"message", "shutting down"}, {"nodes", healthJson(h)}};
    return sendJson(res, 503, body);
  }
  if (!h.ready) {
    json body = {{"error", "not_ready"}, {"message", h.reason}, {"nodes", healthJson(h)}};
    return sendJson(res, 503, body);
  }
  sendJson(res, 200, json{{"ready", true}, {"nodes", healthJson(h)}});
}

std::string LockApi::notReadyReason() const {
  if (draining_) return "shutting down";
  lock::BackendHealth h = service_.backendHealth();
  return h.ready ? "" : (h.reason.empty() ? "the backend is not ready" : h.reason);
}

void LockApi::openapi(http::Request& /*req*/, http::ResponderPtr res) {
  res->send(200, kJson, std::string(openApiDocument()));
}

void LockApi::metricsText(http::Request& req, http::ResponderPtr res) {
  // Rendering walks every series (about a millisecond): a client pipelining thousands of scrapes
  // must not buy thousands of renders. The requests of one loop turn share one render.
  res->send(200, "text/plain; version=0.0.4; charset=utf-8", metrics_.renderCached(req.loop_turn));
}

}  // namespace sidelock::api
