#include "api/lock_api.h"

#include <memory>
#include <nlohmann/json.hpp>

#include "common/log.h"

namespace sidelock::api {
namespace {

using nlohmann::json;

constexpr std::string_view kJson = "application/json";

void sendJson(const http::ResponderPtr& res, int status, const json& body) {
  res->send(status, kJson, body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
}

/// A validated request body: the JSON object plus the first problem found.
struct Body {
  json value = json::object();
  std::string error_code;
  std::string error;
  bool ok() const { return error.empty(); }
};

Body parseBody(const http::Request& req, std::initializer_list<std::string_view> allowed) {
  Body b;
  std::string_view content_type = req.header("content-type");
  if (!req.body.empty() && !content_type.empty() &&
      content_type.substr(0, 16) != "application/json" &&
      content_type.substr(0, 10) != "text/plain" &&
      content_type.substr(0, 33) != "application/x-www-form-urlencoded") {
    // curl -d sends x-www-form-urlencoded by default; we accept it and parse the body as JSON.
    b.error_code = "unsupported_media_type";
    b.error = "request body must be JSON (Content-Type: application/json)";
    return b;
  }
  bool blank = req.body.find_first_not_of(" \t\r\n") == std::string::npos;
  if (blank) return b;
  b.value = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (b.value.is_discarded()) {
    b.error_code = "bad_request";
    b.error = "request body is not valid JSON";
    return b;
  }
  if (!b.value.is_object()) {
    b.error_code = "bad_request";
    b.error = "request body must be a JSON object";
    return b;
  }
  for (const auto& [key, _] : b.value.items()) {
    bool known = false;
    for (auto a : allowed) known = known || key == a;
    if (!known) {
      b.error_code = "bad_request";
      b.error = "unknown field \"" + key + "\"";
      return b;
    }
  }
  return b;
}

/// Reads an optional integer field within [min, max]; returns false (and sets body error) if bad.
bool readInt(Body& b, const char* field, int64_t min, int64_t max, int64_t& out) {
  if (!b.value.contains(field)) return true;
  const json& v = b.value[field];
  if (!v.is_number_integer()) {
    b.error_code = "bad_request";
    b.error = std::string(field) + " must be an integer";
    return false;
  }
  // Compare as signed/unsigned correctly: huge unsigned values are out of range.
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    b.error_code = "bad_request";
    b.error = std::string(field) + " must be between " + std::to_string(min) + " and " +
              std::to_string(max);
    return false;
  }
  int64_t x = v.get<int64_t>();
  if (x < min || x > max) {
    b.error_code = "bad_request";
    b.error = std::string(field) + " must be between " + std::to_string(min) + " and " +
              std::to_string(max);
    return false;
  }
  out = x;
  return true;
}

bool readBool(Body& b, const char* field, bool& out) {
  if (!b.value.contains(field)) return true;
  const json& v = b.value[field];
  if (!v.is_boolean()) {
    b.error_code = "bad_request";
    b.error = std::string(field) + " must be true or false";
    return false;
  }
  out = v.get<bool>();
  return true;
}

bool readString(Body& b, const char* field, std::string& out) {
  if (!b.value.contains(field)) return true;
  const json& v = b.value[field];
  if (!v.is_string()) {
    b.error_code = "bad_request";
    b.error = std::string(field) + " must be a string";
    return false;
  }
  out = v.get<std::string>();
  return true;
}

/// Reads "owner": 1..max_bytes printable ASCII without spaces. Absent is an error only if
/// `required`; returns false (with the body error set) on a bad value.
bool readOwner(Body& b, size_t max_bytes, bool required, std::string& out) {
  if (!b.value.contains("owner")) {
    if (!required) return true;
    b.error_code = "bad_request";
    b.error = "owner is required";
    return false;
  }
  if (!readString(b, "owner", out)) return false;
  if (LockApi::validOwner(out, max_bytes)) return true;
  b.error_code = "bad_request";
  b.error = "owner must be 1.." + std::to_string(max_bytes) +
            " printable ASCII characters without spaces";
  return false;
}

/// Answers the first problem parseBody() or a read*() found: 415 for a non-JSON body, else 400.
void sendBodyError(const http::ResponderPtr& res, const Body& b) {
  sendError(res, b.error_code == "unsupported_media_type" ? 415 : 400, b.error_code, b.error);
}

/// Maps a backend Status to the API's error answer.
void sendBackendError(const http::ResponderPtr& res, const Status& status) {
  switch (status.code()) {
    case StatusCode::kCancelled:
      sendError(res, 503, "shutting_down", "the sidecar is shutting down");
      return;
    case StatusCode::kInvalidArgument:  // e.g. a Redlock TTL no larger than its own drift
      sendError(res, 400, "bad_request", status.message());
      return;
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      sendError(res, 503, "backend_unavailable", status.message());
      return;
    default:
      sendError(res, 503, "backend_error", status.message());
      return;
  }
}

const char* nodeState(const backend::NodeHealth& n) {
  if (!n.up) return "down";
  return n.voting ? "up" : "not_voting";
}

json healthJson(const backend::BackendHealth& h) {
  json nodes = json::array();
  for (const auto& n : h.nodes) {
    json node = {{"node", n.address}, {"state", nodeState(n)}};
    if (!n.reason.empty()) node["reason"] = n.reason;
    nodes.push_back(std::move(node));
  }
  return nodes;
}

}  // namespace

void sendError(const http::ResponderPtr& res, int status, std::string_view code,
               std::string_view message) {
  sendJson(res, status, json{{"error", std::string(code)}, {"message", std::string(message)}});
}

bool LockApi::validLockName(std::string_view name, size_t max_bytes) {
  if (name.empty() || name.size() > max_bytes) return false;
  for (unsigned char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == ':' || c == '@';
    if (!ok) return false;
  }
  return true;
}

bool LockApi::validOwner(std::string_view owner, size_t max_bytes) {
  if (owner.empty() || owner.size() > max_bytes) return false;
  for (unsigned char c : owner) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

LockApi::LockApi(const config::LocksConfig& locks, lock::LockService& service,
                 backend::Backend& backend, metrics::Metrics& metrics)
    : locks_(locks), service_(service), backend_(backend), metrics_(metrics) {}

std::vector<Route> LockApi::routes() {
  auto bind = [this](void (LockApi::*fn)(http::Request&, http::ResponderPtr)) {
    return [this, fn](http::Request& req, http::ResponderPtr res) {
      (this->*fn)(req, std::move(res));
    };
  };
  return {
      {"POST", "/v1/locks/{name}/acquire", bind(&LockApi::acquire)},
      {"POST", "/v1/locks/{name}/release", bind(&LockApi::release)},
      {"POST", "/v1/locks/{name}/extend", bind(&LockApi::extend)},
      {"GET", "/v1/locks/{name}", bind(&LockApi::inspect)},
      {"GET", "/v1/locks", bind(&LockApi::list)},
      {"GET", "/healthz", bind(&LockApi::healthz)},
      {"GET", "/readyz", bind(&LockApi::readyz)},
      {"GET", "/metrics", bind(&LockApi::metricsText)},
  };
}

namespace {

/// Validates the {name} route parameter; answers 400 and returns false if it is bad.
bool checkName(const http::Request& req, const http::ResponderPtr& res, size_t max_bytes) {
  if (LockApi::validLockName(req.param("name"), max_bytes)) return true;
  sendError(res, 400, "invalid_name",
            "lock names are 1.." + std::to_string(max_bytes) +
                " characters of A-Z a-z 0-9 and - _ . : @");
  return false;
}

json grantJson(const lock::Grant& g) {
  return json{{"name", g.name}, {"owner", g.owner}, {"token", g.token}, {"ttl_ms", g.ttl_ms}};
}

/// State shared by the callbacks of one acquire request.
struct AcquireCall {
  lock::AcquireTicket ticket;
  http::ResponderPtr responder;
  std::string name;
  std::string owner;
  bool stream = false;
  bool finished = false;  // stream ended or plain response sent
};

const char* leaseEventName(lock::LeaseEvent e) {
  switch (e) {
    case lock::LeaseEvent::kRenewed:
      return "renewed";
    case lock::LeaseEvent::kLost:
      return "lost";
    case lock::LeaseEvent::kCapped:
      return "capped";
    case lock::LeaseEvent::kReleased:
      return "released";
  }
  return "unknown";
}

}  // namespace

void LockApi::acquire(http::Request& req, http::ResponderPtr res) {
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  Body body = parseBody(req, {"ttl_ms", "wait_ms", "owner", "auto_renew", "max_hold_ms", "hold"});
  lock::AcquireOptions opts;
  opts.name = std::string(req.param("name"));
  opts.ttl_ms = locks_.default_ttl_ms;
  std::string hold;
  if (body.ok()) {
    readInt(body, "ttl_ms", 1, locks_.max_ttl_ms, opts.ttl_ms) &&
        readInt(body, "wait_ms", 0, locks_.max_wait_ms, opts.wait_ms) &&
        readOwner(body, static_cast<size_t>(locks_.max_owner_bytes), false, opts.owner) &&
        readBool(body, "auto_renew", opts.auto_renew) &&
        readInt(body, "max_hold_ms", 1, locks_.max_hold_ms_limit, opts.max_hold_ms) &&
        readString(body, "hold", hold);
  }
  if (body.ok() && !hold.empty() && hold != "stream" && hold != "none") {
    body.error_code = "bad_request";
    body.error = "hold must be \"stream\" or \"none\"";
  }
  if (!body.ok()) return sendBodyError(res, body);
  if (draining_) {
    sendError(res, 503, "shutting_down", "the sidecar is shutting down");
    return;
  }
  opts.stream = hold == "stream";
  if (opts.stream) {
    opts.auto_renew = true;
    // A stream hold proves its holder alive by the open connection, so it is capped by the
    // largest allowed hold rather than the default for fire-and-forget auto_renew leases
    // (a `sidelock run` job of two hours must not be killed at one).
    if (!body.value.contains("max_hold_ms")) opts.max_hold_ms = locks_.max_hold_ms_limit;
  }

  auto call = std::make_shared<AcquireCall>();
  call->responder = res;
  call->name = opts.name;
  call->stream = opts.stream;

  std::function<void(lock::LeaseEvent)> on_event;
  if (opts.stream) {
    on_event = [call](lock::LeaseEvent e) {
      if (call->finished) return;
      json ev = {{"event", leaseEventName(e)}};
      if (e == lock::LeaseEvent::kLost)
        ev["reason"] = "the lease expired or is held by another owner";
      call->responder->writeChunk(ev.dump() + "\n");
      // Both end the lease for good: close the stream so the connection can serve what the
      // client pipelined behind it (a release through the API would otherwise leave it open).
      if (e == lock::LeaseEvent::kLost || e == lock::LeaseEvent::kReleased) {
        call->finished = true;
        call->responder->endStream();
      }
    };
  }

  lock::LockService* service = &service_;
  auto done = [call, service](lock::AcquireResult r) {
    const http::ResponderPtr& out = call->responder;
    switch (r.status) {
      case lock::AcquireStatus::kGranted:
        call->owner = r.grant.owner;
        if (!out->clientConnected()) {
          // The client left between grant and answer (its client-gone callback may still be
          // queued): nobody will learn of this lease, so give the lock back now — a plain or
          // auto_renew lease would otherwise be held (and renewed) for nobody.
          service->release(r.grant.name, r.grant.owner, [](StatusOr<lock::ReleaseStatus>) {});
          call->finished = true;
          return;
        }
        if (call->stream) {
          out->startStream(200, "application/x-ndjson");
          json ev = grantJson(r.grant);
          ev["event"] = "acquired";
          out->writeChunk(ev.dump() + "\n");
        } else {
          call->finished = true;
          sendJson(out, 200, grantJson(r.grant));
        }
        return;
      case lock::AcquireStatus::kBusy: {
        call->finished = true;
        json body = {{"error", "locked"},
                     {"message", "the lock is held by another owner"},
                     {"retry_after_ms", r.retry_after_ms}};
        out->send(409, kJson, body.dump() + "\n",
                  {{"Retry-After", std::to_string((r.retry_after_ms + 999) / 1000)}});
        return;
      }
      case lock::AcquireStatus::kTooManyWaiters:
        call->finished = true;
        sendError(out, 429, "too_many_waiters", "too many waiters queued for this lock");
        return;
      case lock::AcquireStatus::kCancelled:
        call->finished = true;
        if (out->clientConnected())
          sendError(out, 503, "shutting_down", "the sidecar is shutting down");
        return;
      case lock::AcquireStatus::kError:
        call->finished = true;
        sendBackendError(out, r.error);
        return;
    }
  };

  call->ticket = service_.acquire(std::move(opts), std::move(done), std::move(on_event));
  // A client that goes away while queued leaves the queue; a stream client that goes away while
  // holding releases its lock (the lock a crashed app cannot leak).
  std::weak_ptr<AcquireCall> weak = call;
  res->onClientGone([weak, service] {
    auto c = weak.lock();
    if (!c) return;
    if (c->owner.empty()) {
      c->ticket.cancel();
      return;
    }
    if (c->stream && !c->finished) {
      c->finished = true;
      service->release(c->name, c->owner, [](StatusOr<lock::ReleaseStatus>) {});
    }
  });
  // Keep the call alive until the response completes: the responder holds it via onClientGone's
  // weak pointer only, so the done/on_event closures (held by the service) own it.
}

void LockApi::release(http::Request& req, http::ResponderPtr res) {
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  Body body = parseBody(req, {"owner"});
  std::string owner;
  if (body.ok()) readOwner(body, static_cast<size_t>(locks_.max_owner_bytes), true, owner);
  if (!body.ok()) return sendBodyError(res, body);
  service_.release(req.param("name"), owner, [res](StatusOr<lock::ReleaseStatus> r) {
    if (!r.isOk()) return sendBackendError(res, r.status());
    switch (*r) {
      case lock::ReleaseStatus::kReleased:
        return sendJson(res, 200, json{{"released", true}});
      case lock::ReleaseStatus::kNotOwner:
        return sendError(res, 409, "not_owner", "the lock is held by another owner");
      case lock::ReleaseStatus::kNotHeld:
        return sendError(res, 404, "not_held", "no such lease (it expired or was released)");
      case lock::ReleaseStatus::kLeaseLost:
        return sendError(res, 404, "lease_lost",
                         "the lease was lost before release (expired or taken by another owner)");
    }
  });
}

void LockApi::extend(http::Request& req, http::ResponderPtr res) {
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  Body body = parseBody(req, {"owner", "ttl_ms"});
  std::string owner;
  int64_t ttl_ms = locks_.default_ttl_ms;
  if (body.ok()) {
    readOwner(body, static_cast<size_t>(locks_.max_owner_bytes), true, owner) &&
        readInt(body, "ttl_ms", 1, locks_.max_ttl_ms, ttl_ms);
  }
  if (!body.ok()) return sendBodyError(res, body);
  service_.extend(req.param("name"), owner, ttl_ms, [res](StatusOr<lock::ExtendResult> r) {
    if (!r.isOk()) return sendBackendError(res, r.status());
    switch (r->status) {
      case lock::ExtendStatus::kExtended:
        return sendJson(res, 200, json{{"ttl_ms", r->ttl_ms}});
      case lock::ExtendStatus::kNotOwner:
        return sendError(res, 409, "not_owner", "the lock is held by another owner");
      case lock::ExtendStatus::kNotHeld:
        return sendError(res, 404, "not_held", "no such lease (it expired or was released)");
      case lock::ExtendStatus::kLeaseLost:
        return sendError(res, 404, "lease_lost", "the lease was lost (expired or taken)");
    }
  });
}

void LockApi::inspect(http::Request& req, http::ResponderPtr res) {
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  std::string name(req.param("name"));
  service_.inspect(name, [res, name](StatusOr<backend::LockState> r) {
    if (!r.isOk()) return sendBackendError(res, r.status());
    // Never the owner id: it is the capability to release.
    sendJson(res, 200,
             json{{"name", name},
                  {"held", r->held},
                  {"ttl_ms", r->held ? r->ttl_ms : 0},
                  {"token", r->token}});
  });
}

void LockApi::list(http::Request&, http::ResponderPtr res) {
  json leases = json::array();
  for (const auto& l : service_.leases()) {
    leases.push_back(json{{"name", l.name},
                          {"token", l.token},
                          {"age_ms", l.age_ms},
                          {"ttl_remaining_ms", l.ttl_remaining_ms},
                          {"auto_renew", l.auto_renew},
                          {"stream", l.stream}});
  }
  json waiters = json::array();
  for (const auto& w : service_.waiterCounts()) {
    waiters.push_back(json{{"name", w.name}, {"waiters", w.waiters}});
  }
  sendJson(res, 200, json{{"leases", std::move(leases)}, {"waiters", std::move(waiters)}});
}

void LockApi::healthz(http::Request&, http::ResponderPtr res) {
  sendJson(res, 200, json{{"status", "ok"}});
}

void LockApi::readyz(http::Request&, http::ResponderPtr res) {
  backend::BackendHealth h = backend_.health();
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

void LockApi::metricsText(http::Request&, http::ResponderPtr res) {
  res->send(200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render());
}

}  // namespace sidelock::api
