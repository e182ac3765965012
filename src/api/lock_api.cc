#include "api/lock_api.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "api/json_object.h"
#include "api/openapi_document.h"
#include "common/log.h"

namespace sidelock::api {
namespace {

using nlohmann::json;

constexpr std::string_view kJson = "application/json";

void sendJson(const http::ResponderPtr& res, int status, const json& body) {
  res->send(status, kJson, body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
}

/// Reads "owner": 1..max_bytes printable ASCII without spaces. Absent is an error only if
/// `required`; returns false (with the body error set) on a bad value.
constexpr size_t kMaxRequestIdBytes = 128;
constexpr std::string_view kAcquireRoute = "acquire";
constexpr std::string_view kReleaseRoute = "release";
constexpr std::string_view kMultiAcquireRoute = "multilocks/acquire";
constexpr std::string_view kMultiReleaseRoute = "multilocks/release";

int64_t monotonicUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// request_id: optional, 1..128 printable ASCII characters.
bool readRequestId(RequestBody& b, std::string_view& out) {
  if (!b.readString(BodyField::kRequestId, out)) return false;
  if (!b.has(BodyField::kRequestId)) return true;
  bool printable = !out.empty() && out.size() <= kMaxRequestIdBytes;
  for (unsigned char c : out) printable = printable && c >= 0x21 && c <= 0x7e;
  if (!printable) {
    b.setError("request_id must be 1.." + std::to_string(kMaxRequestIdBytes) +
               " printable ASCII characters without spaces");
  }
  return b.ok();
}

/// What a remembered answer is filed under besides route and request_id: the lock, the owner id
/// the client sent (if any) and its token's label. A retry must repeat all of them, so a guessed
/// request_id alone never yields somebody else's answer (or owner id).
std::string retryScope(std::string_view name, std::string_view owner,
                       const http::Principal* principal) {
  std::string scope(name);
  scope.append(1, '\0').append(owner).append(1, '\0');
  if (principal != nullptr) scope.append(principal->label);
  return scope;
}

/// Where a request's answer is filed under its request_id; empty without one.
std::string replayKey(std::string_view route, std::string_view scope, std::string_view request_id) {
  return request_id.empty() ? std::string() : IdempotencyCache::keyOf(route, scope, request_id);
}

using Answer = IdempotencyCache::Answer;

/// Sends a remembered (or just computed) answer.
void sendAnswer(const http::ResponderPtr& res, const Answer& a) {
  res->send(a.status, "application/json", a.body, a.headers);
}

/// The body of every v1 error: {"error": code, "message": message}.
std::string errorBody(std::string_view code, std::string_view message) {
  return JsonObject().text("error", code).text("message", message).finish();
}

Answer errorAnswer(int status, std::string_view code, std::string_view message) {
  return Answer{status, errorBody(code, message), {}, {}, 0};
}

/// 409 and 429: come back later, with the hint in the body and as Retry-After (whole seconds).
/// `limit` (429 only) names the config key of the queue limit that was hit.
Answer retryLaterAnswer(int status, std::string_view code, std::string_view message,
                        int64_t retry_after_ms, std::string_view limit = {},
                        std::string_view reason = {}) {
  JsonObject answer;
  answer.text("error", code);
  if (!limit.empty()) answer.text("limit", limit);
  if (!reason.empty()) answer.text("reason", reason);
  return Answer{status,
                answer.text("message", message).integer("retry_after_ms", retry_after_ms).finish(),
                {{"Retry-After", std::to_string((retry_after_ms + 999) / 1000)}},
                {},
                0};
}

/// 409 locked of one lock, saying why: another owner holds it, the caller itself does (and did
/// not ask to re-enter), or readers are held back for a queued writer.
Answer lockedAnswer(lock::BusyReason why, lock::LockKind kind, int64_t retry_after_ms) {
  std::string_view reason = "held";
  std::string_view message = "the lock is held by another owner";
  switch (why) {
    case lock::BusyReason::kHeld:
      break;
    case lock::BusyReason::kHeldByYou:
      reason = "held_by_you";
      message = kind == lock::LockKind::kShared
                    ? "this owner holds a read lease of the lock already (a reader holds one "
                      "lease: release it, or read with another owner id)"
                    : "this owner holds the lock already; acquire with \"reentrant\": true to "
                      "take one more hold of it, or release it first";
      break;
    case lock::BusyReason::kWriterWaiting:
      reason = "writer_waiting";
      message =
          "a writer is waiting for the lock: new readers are turned away until it got in and out";
      break;
  }
  return retryLaterAnswer(409, "locked", message, retry_after_ms, {}, reason);
}

/// An owner id in `field` ("owner", or a semaphore's "permit"): 1..max_bytes printable ASCII.
bool readOwnerId(RequestBody& b, BodyField field, std::string_view what, size_t max_bytes,
                 bool required, std::string_view& out) {
  if (!b.has(field)) {
    if (!required) return true;
    b.setError(std::string(what) + " is required");
    return false;
  }
  if (!b.readString(field, out)) return false;
  if (LockApi::validOwner(out, max_bytes)) return true;
  b.setError(std::string(what) + " must be 1.." + std::to_string(max_bytes) +
             " printable ASCII characters without spaces");
  return false;
}

bool readOwner(RequestBody& b, size_t max_bytes, bool required, std::string_view& out) {
  return readOwnerId(b, BodyField::kOwner, "owner", max_bytes, required, out);
}

/// hold: "stream" binds the lease (lock or permit) to the connection: renewed while it is open.
/// A stream hold proves its holder alive by the open connection, so it is capped by the largest
/// allowed hold rather than the default for fire-and-forget auto_renew leases (a `sidelock run`
/// job of two hours must not be killed at one), unless the request set max_hold_ms.
void applyHold(const RequestBody& b, std::string_view hold, int64_t max_hold_ms_limit,
               lock::AcquireOptions& opts) {
  opts.stream = hold == "stream";
  if (!opts.stream) return;
  opts.auto_renew = true;
  if (!b.has(BodyField::kMaxHoldMs)) opts.max_hold_ms = max_hold_ms_limit;
}

/// The "hold" field of an acquire (lock or permit): "stream", "none" or absent.
void checkHold(RequestBody& b, std::string_view hold) {
  if (b.ok() && !hold.empty() && hold != "stream" && hold != "none") {
    b.setError("hold must be \"stream\" or \"none\"");
  }
}

/// Answers the first problem RequestBody found: 415 for a non-JSON body, else 400.
void sendBodyError(const http::ResponderPtr& res, const RequestBody& b) {
  sendError(res, b.errorCode() == "unsupported_media_type" ? 415 : 400, b.errorCode(), b.error());
}

/// Maps a backend Status to the API's error answer.
Answer backendErrorAnswer(const Status& status) {
  switch (status.code()) {
    case StatusCode::kCancelled:
      return errorAnswer(503, "shutting_down", "the sidecar is shutting down");
    case StatusCode::kInvalidArgument:  // e.g. a Redlock TTL no larger than its own drift
      return errorAnswer(400, "bad_request", status.message());
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return errorAnswer(503, "backend_unavailable", status.message());
    case StatusCode::kResourceExhausted:  // Redis at maxmemory (backend::scriptErrorStatus)
      return errorAnswer(503, "backend_full", status.message());
    default:  // an error reply or an answer of the wrong shape: logged by the backend
      return errorAnswer(503, "backend_error", status.message());
  }
}

void sendBackendError(const http::ResponderPtr& res, const Status& status) {
  sendAnswer(res, backendErrorAnswer(status));
}

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

void sendError(const http::ResponderPtr& res, int status, std::string_view code,
               std::string_view message) {
  res->send(status, kJson, errorBody(code, message));
}

void sendRetryLater(const http::ResponderPtr& res, int status, std::string_view code,
                    std::string_view message, int64_t retry_after_ms, std::string_view limit = {}) {
  sendAnswer(res, retryLaterAnswer(status, code, message, retry_after_ms, limit));
}

std::string LockApi::lockNameProblem(std::string_view name, size_t max_bytes) {
  if (name.empty()) return "the lock name is empty";
  if (name.size() > max_bytes) {
    return "the lock name is " + std::to_string(name.size()) + " bytes long; the limit is " +
           std::to_string(max_bytes);
  }
  if (name == "." || name == "..") {
    return "\"" + std::string(name) + "\" is not a lock name (HTTP clients rewrite it as a path)";
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == ':' || c == '@' || c == '~';
    if (ok) continue;
    char shown[8];
    std::snprintf(shown, sizeof(shown), c >= 0x21 && c <= 0x7e ? "'%c'" : "0x%02X", c);
    return "the lock name has " + std::string(shown) + " at byte " + std::to_string(i + 1) +
           "; lock names are A-Z a-z 0-9 and - _ . : @ ~";
  }
  return "";
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
          static_cast<size_t>(locks.max_request_id_bytes))) {
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
  // Routes on one lock: a token limited to prefixes gets 403 outside them, before anything else
  // (a scoped token learns nothing about other locks, not even whether a name is valid).
  auto bindNamed = [this](void (LockApi::*fn)(http::Request&, http::ResponderPtr)) {
    return [this, fn](http::Request& req, http::ResponderPtr res) {
      if (!mayUseLock(req.principal.get(), req.param("name"))) {
        std::string allowed;
        for (const auto& prefix : req.principal->scopes) {
          allowed += (allowed.empty() ? "\"" : ", \"") + prefix + "\"";
        }
        return sendError(res, 403, "lock_not_allowed",
                         "this token may use only lock names starting with " + allowed);
      }
      (this->*fn)(req, std::move(res));
    };
  };
  return {
      {"POST", "/v1/locks/{name}/acquire", bindNamed(&LockApi::acquire)},
      {"POST", "/v1/locks/{name}/release", bindNamed(&LockApi::release)},
      {"POST", "/v1/locks/{name}/extend", bindNamed(&LockApi::extend)},
      {"GET", "/v1/locks/{name}", bindNamed(&LockApi::inspect)},
      {"GET", "/v1/locks", bind(&LockApi::list)},
      {"POST", "/v1/semaphores/{name}/acquire", bindNamed(&LockApi::semaphoreAcquire)},
      {"POST", "/v1/semaphores/{name}/release", bindNamed(&LockApi::semaphoreRelease)},
      {"POST", "/v1/semaphores/{name}/extend", bindNamed(&LockApi::semaphoreExtend)},
      {"GET", "/v1/semaphores/{name}", bindNamed(&LockApi::semaphoreInspect)},
      {"POST", "/v1/multilocks/acquire", bind(&LockApi::multiAcquire)},
      {"POST", "/v1/multilocks/release", bind(&LockApi::multiRelease)},
      {"GET", "/healthz", bind(&LockApi::healthz)},
      {"GET", "/readyz", bind(&LockApi::readyz)},
      {"GET", "/metrics", bind(&LockApi::metricsText)},
      {"GET", "/v1/openapi.json", bind(&LockApi::openapi)},
  };
}

std::vector<Route> LockApi::adminRoutes() {
  return {
      {"POST", "/admin/v1/locks/{name}/release",
       [this](http::Request& req, http::ResponderPtr res) { forceRelease(req, std::move(res)); }},
      {"GET", "/v1/openapi.json",
       [this](http::Request& req, http::ResponderPtr res) { openapi(req, std::move(res)); }},
  };
}

namespace {

/// Validates the {name} route parameter (percent-decoded by the router, so "%41bc" is "Abc");
/// answers 400 and returns false if it is bad.
bool checkName(const http::Request& req, const http::ResponderPtr& res, size_t max_bytes) {
  const std::string problem = LockApi::lockNameProblem(req.param("name"), max_bytes);
  if (problem.empty()) return true;
  sendError(res, 400, "invalid_name", problem);
  return false;
}

/// The grant's fields, after `event` when it is a stream's first event.
std::string grantAnswer(const lock::Grant& g, std::string_view event = {}) {
  JsonObject answer;
  if (!event.empty()) answer.text("event", event);
  const lock::LockRef ref = lock::lockRefOf(g.name);
  if (ref.kind == lock::LockKind::kSemaphore) {
    // A permit under the semaphore's own name.
    return answer.text("name", ref.name)
        .text("permit", g.owner)
        .unsignedInteger("token", g.token)
        .integer("ttl_ms", g.ttl_ms)
        .finish();
  }
  answer.text("name", ref.name)
      .text("owner", g.owner)
      .unsignedInteger("token", g.token)
      .integer("ttl_ms", g.ttl_ms);
  if (g.holds > 0) answer.integer("holds", g.holds);  // reentrant acquires only
  if (ref.kind == lock::LockKind::kShared) answer.text("mode", "shared");
  if (ref.kind == lock::LockKind::kFair) answer.boolean("fair", true);
  return answer.finish();
}

/// The "mode" of a lock request: "exclusive" (the default) or "shared" (a reader of a read/write
/// lock). Sets `shared`; false with the body's error set otherwise.
bool readMode(RequestBody& b, bool& shared) {
  std::string_view mode;
  if (!b.readString(BodyField::kMode, mode)) return false;
  if (!mode.empty() && mode != "shared" && mode != "exclusive") {
    b.setError("mode must be \"shared\" or \"exclusive\"");
    return false;
  }
  shared = mode == "shared";
  return true;
}

/// A request's claim on its request_id in the IdempotencyCache, ended once by whoever answers:
/// the retries that attached to it meanwhile are answered with the same answer.
struct RequestClaim {
  std::shared_ptr<IdempotencyCache> replies;
  std::string key;              // empty without a request_id
  IdempotencyCache::Id id = 0;  // 0: none (no request_id, replays off, or finished)

  /// Ends the claim (remembering `remember`, if given): the retries waiting for this answer.
  std::vector<http::ResponderPtr> finish(const Answer* remember) {
    if (id == 0) return {};
    return replies->finish(key, std::exchange(id, 0), remember, monotonicUs());
  }
  /// Answers `first` and every retry of it with an answer that is not remembered.
  void answerAll(const http::ResponderPtr& first, const Answer& answer) {
    sendAnswer(first, answer);
    for (const auto& retry : finish(nullptr)) sendAnswer(retry, answer);
  }
};

/// A plain (not stream) grant, `answer`: sent to `first` and to every retry waiting for it (the
/// answer is remembered for later retries under the claim). Given back (`give_back`) at once when
/// none of them is still connected. Given back later when every answer provably went unread,
/// unless it is a plain grant remembered for a retry (the retry claims it, or its TTL ends it); an
/// auto_renew grant is renewed until released, so it is always given back then, and forgotten with
/// it: a retry must not be handed a lease that was given back.
void deliverGrantAnswer(RequestClaim& claim, const http::ResponderPtr& first, const Answer& answer,
                        bool auto_renew, metrics::Metrics* metrics,
                        std::function<void()> give_back) {
  const IdempotencyCache::Id remembered_as = claim.id;
  std::vector<http::ResponderPtr> readers = claim.finish(&answer);
  readers.push_back(first);
  std::erase_if(readers, [](const http::ResponderPtr& r) { return !r->clientConnected(); });
  auto undelivered = [metrics, replies = claim.replies, key = claim.key, remembered_as,
                      give_back = std::move(give_back)] {
    // A retry that came while the unread answers were being watched was handed this grant (a
    // replay): it holds the lease now, so it is not given back under it.
    if (remembered_as != 0 && replies->replayed(key, remembered_as)) return;
    metrics->grants_undelivered.Increment();
    if (remembered_as != 0) replies->forget(key, remembered_as);
    give_back();
  };
  if (readers.empty()) return undelivered();
  if (remembered_as == 0 || auto_renew) {
    auto unread = std::make_shared<size_t>(readers.size());
    for (const auto& reader : readers) {
      reader->onUndelivered([unread, undelivered] {
        if (--*unread == 0) undelivered();
      });
    }
  }
  for (const auto& reader : readers) sendAnswer(reader, answer);
}

/// State shared by the callbacks of one acquire request.
/// Its callbacks capture nothing but a shared or weak pointer to it: 16 bytes, which
/// std::function stores without a heap allocation.
struct AcquireCall {
  lock::LockService* service = nullptr;
  const config::LocksConfig* locks = nullptr;  // the limits a 429 names
  metrics::Metrics* metrics = nullptr;
  lock::AcquireTicket ticket;
  http::ResponderPtr responder;
  bool granted = false;
  // Stream holds only: the lease to release when the client leaves.
  std::string name;
  std::string owner;
  bool stream = false;
  bool finished = false;  // stream ended or plain response sent
  // request_id (plain leases only): the answer is remembered under the claim's key, and retries
  // that arrive while this call runs are attached to the claim and answered with it.
  RequestClaim claim;
  std::string given_owner;  // the client's own owner id, if it chose one
  bool auto_renew = false;
  int64_t ttl_ms = 0;
  bool semaphore = false;  // answers name the permit, not the owner

  /// Answers the request and every retry of it with an answer that is not remembered.
  void answerAll(const Answer& answer) { claim.answerAll(responder, answer); }
};

/// A retried acquire (request_id) of a client that chose its owner id, answered busy: if the
/// lease is the client's own (its first attempt was granted, but the answer was lost or the
/// sidecar restarted since), it is granted again in place: TTL set anew, same token.
void reclaimOwnGrant(const std::shared_ptr<AcquireCall>& call, const std::string& name,
                     int64_t retry_after_ms) {
  call->service->extend(
      name, call->given_owner, call->ttl_ms,
      [call, name, retry_after_ms](StatusOr<lock::ExtendResult> extended) {
        if (!extended.isOk() || extended->status != lock::ExtendStatus::kExtended) {
          return call->answerAll(
              lockedAnswer(lock::BusyReason::kHeld, lock::lockRefOf(name).kind, retry_after_ms));
        }
        const int64_t ttl_ms = extended->ttl_ms;
        call->service->inspect(name, [call, name, ttl_ms](StatusOr<lock::LockState> state) {
          if (!state.isOk()) return call->answerAll(backendErrorAnswer(state.status()));
          const Answer answer{200,
                              grantAnswer({name, call->given_owner, state->token, ttl_ms}),
                              {},
                              call->given_owner,
                              state->token};
          sendAnswer(call->responder, answer);
          for (const auto& retry : call->claim.finish(&answer)) sendAnswer(retry, answer);
        });
      });
}

/// A plain (not stream) lease's grant: answered to the request and to every retry of it.
void deliverGrant(const std::shared_ptr<AcquireCall>& call, const lock::Grant& grant) {
  deliverGrantAnswer(call->claim, call->responder,
                     Answer{200, grantAnswer(grant), {}, grant.owner, grant.token},
                     call->auto_renew, call->metrics,
                     [service = call->service, name = grant.name, owner = grant.owner] {
                       service->release(name, owner, [](StatusOr<lock::ReleaseStatus>) {});
                     });
}

const char* leaseEventName(lock::LeaseEvent e) {
  switch (e) {
    case lock::LeaseEvent::kRenewed:
      return "renewed";
    case lock::LeaseEvent::kLost:
    case lock::LeaseEvent::kCapExpired:  // the last event, as a loss is: the lock is not held
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
  RequestBody& body = body_;
  body.parse(req.header("content-type"), req.body,
             {BodyField::kTtlMs, BodyField::kWaitMs, BodyField::kOwner, BodyField::kAutoRenew,
              BodyField::kMaxHoldMs, BodyField::kHold, BodyField::kRequestId, BodyField::kReentrant,
              BodyField::kMode, BodyField::kFair});
  lock::AcquireOptions opts;
  bool shared = false;
  bool fair = false;
  opts.name = std::string(req.param("name"));
  opts.ttl_ms = locks_.default_ttl_ms;
  std::string_view owner;
  std::string_view hold;
  std::string_view request_id;
  if (body.ok()) {
    body.readInt(BodyField::kTtlMs, 1, locks_.max_ttl_ms, opts.ttl_ms) &&
        body.readInt(BodyField::kWaitMs, 0, locks_.max_wait_ms, opts.wait_ms) &&
        readOwner(body, static_cast<size_t>(locks_.max_owner_bytes), false, owner) &&
        body.readBool(BodyField::kAutoRenew, opts.auto_renew) &&
        body.readInt(BodyField::kMaxHoldMs, 1, locks_.max_hold_ms_limit, opts.max_hold_ms) &&
        body.readString(BodyField::kHold, hold) && readRequestId(body, request_id) &&
        body.readBool(BodyField::kReentrant, opts.reentrant) && readMode(body, shared) &&
        body.readBool(BodyField::kFair, fair);
  }
  checkHold(body, hold);
  if (body.ok() && shared && opts.reentrant) {
    body.setError("reentrant applies to exclusive locks only (a reader holds one shared lease)");
  }
  if (body.ok() && fair && (shared || opts.reentrant)) {
    body.setError("fair applies to exclusive, non-reentrant locks");
  }
  if (shared) opts.name = lock::sharedLockKey(opts.name);
  if (fair) opts.name = lock::fairLockKey(opts.name);
  if (body.ok() && hold == "stream" && opts.reentrant) {
    // A stream is one hold bound to one connection; a re-entry has no stream of its own.
    body.setError("reentrant cannot be used with hold: stream");
  }
  if (body.ok() && hold == "stream" && !request_id.empty()) {
    body.setError("request_id cannot be used with hold: stream (the stream is the lease's answer)");
  }
  if (!body.ok()) return sendBodyError(res, body);
  const std::string retry_scope = retryScope(opts.name, owner, req.principal.get());
  opts.owner = owner;
  if (draining_) {
    sendError(res, 503, "shutting_down", "the sidecar is shutting down");
    return;
  }
  applyHold(body, hold, locks_.max_hold_ms_limit, opts);
  beginAcquire(std::move(opts), replayKey(kAcquireRoute, retry_scope, request_id), std::move(res));
}

IdempotencyCache::Lookup LockApi::claimRequest(const std::string& replay_key,
                                               const http::ResponderPtr& res) {
  if (replay_key.empty()) return {};
  const IdempotencyCache::Lookup found = replies_->begin(replay_key, res, monotonicUs());
  if (found.kind == IdempotencyCache::Lookup::Kind::kRun) scheduleSweep();
  return found;
}

void LockApi::beginAcquire(lock::AcquireOptions opts, std::string replay_key,
                           http::ResponderPtr res) {
  const IdempotencyCache::Lookup found = claimRequest(replay_key, res);
  switch (found.kind) {
    case IdempotencyCache::Lookup::Kind::kAttached:
      return;  // answered when the first attempt is (RequestClaim::finish)
    case IdempotencyCache::Lookup::Kind::kReplay:
      return retryGrant(std::move(opts), std::move(replay_key), found.id, found.answer->owner,
                        found.answer->token, std::move(res));
    case IdempotencyCache::Lookup::Kind::kRun:
    case IdempotencyCache::Lookup::Kind::kOff:
      break;
  }
  startAcquire(std::move(opts), std::move(replay_key), found.id, std::move(res));
}

// A retry of an acquire that was granted: the same grant, if that lease is still its owner's
// (an owner-checked extend proves it and sets the TTL anew; a replayed answer alone could hand
// out a lease that expired or was released since). Otherwise the retry is a new acquire.
void LockApi::retryGrant(lock::AcquireOptions opts, std::string replay_key,
                         IdempotencyCache::Id answer_id, std::string owner, uint64_t token,
                         http::ResponderPtr res) {
  const std::string name = opts.name;
  const int64_t ttl_ms = opts.ttl_ms;
  service_.extend(
      name, owner, ttl_ms,
      [this, opts = std::move(opts), replay_key = std::move(replay_key), answer_id, owner, token,
       res = std::move(res)](StatusOr<lock::ExtendResult> r) mutable {
        if (!r.isOk()) return sendBackendError(res, r.status());
        if (r->status == lock::ExtendStatus::kExtended) {
          return res->send(200, kJson, grantAnswer({opts.name, owner, token, r->ttl_ms}));
        }
        // (Another retry may have claimed the key anew meanwhile: then this one waits for it.)
        replies_->forget(replay_key, answer_id);
        beginAcquire(std::move(opts), std::move(replay_key), std::move(res));
      });
}

void LockApi::startAcquire(lock::AcquireOptions opts, std::string replay_key,
                           IdempotencyCache::Id claim, http::ResponderPtr res) {
  auto call = std::make_shared<AcquireCall>();
  call->responder = res;
  call->name = opts.name;
  call->stream = opts.stream;

  std::function<void(lock::LeaseEvent)> on_event;
  if (opts.stream) {
    on_event = [call](lock::LeaseEvent e) {
      if (call->finished) return;
      JsonObject event;
      event.text("event", leaseEventName(e));
      if (e == lock::LeaseEvent::kLost) {
        event.text("reason", "the lease expired or is held by another owner");
      } else if (e == lock::LeaseEvent::kCapExpired) {
        event.text("reason",
                   "max_hold_ms reached: renewals stopped at the cap (the capped event) and "
                   "the lease ran out");
        event.boolean("cap_reached", true);
      }
      call->responder->writeChunk(event.finish());
      // These end the lease for good: close the stream so the connection can serve what the
      // client pipelined behind it (a release through the API would otherwise leave it open).
      if (e == lock::LeaseEvent::kLost || e == lock::LeaseEvent::kCapExpired ||
          e == lock::LeaseEvent::kReleased) {
        call->finished = true;
        call->responder->endStream();
      }
    };
  }

  call->service = &service_;
  call->locks = &locks_;
  call->metrics = &metrics_;
  call->claim = RequestClaim{replies_, std::move(replay_key), claim};
  call->given_owner = opts.owner;  // empty: the service generates one
  call->auto_renew = opts.auto_renew;
  call->ttl_ms = opts.ttl_ms;
  call->semaphore = opts.limit > 0;
  auto done = [call](lock::AcquireResult r) {
    const http::ResponderPtr& out = call->responder;
    switch (r.status) {
      case lock::AcquireStatus::kGranted:
        call->granted = true;
        if (!call->stream) {
          call->finished = true;
          return deliverGrant(call, r.grant);
        }
        call->owner = r.grant.owner;
        if (!out->clientConnected()) {
          // The client left between grant and answer (its client-gone callback may still be
          // queued): nobody will learn of this lease, so give the lock back now — it would
          // otherwise be renewed for nobody.
          call->metrics->grants_undelivered.Increment();
          call->service->release(r.grant.name, r.grant.owner, [](StatusOr<lock::ReleaseStatus>) {});
          call->finished = true;
          return;
        }
        // A dropped stream releases its lease through onClientGone.
        out->startStream(200, "application/x-ndjson");
        out->writeChunk(grantAnswer(r.grant, "acquired"));
        return;
      case lock::AcquireStatus::kBusy: {
        call->finished = true;
        // Only a lease this sidecar does not know of (granted before a restart, or by another
        // sidecar): one it holds was granted in this life under another request id (its own
        // answer would have been replayed), e.g. a second thread sharing the owner id, which
        // gets 409 held_by_you rather than the lease (and the TTL it did not ask for).
        if (!call->claim.key.empty() && !call->given_owner.empty() && !call->auto_renew &&
            lock::lockRefOf(call->name).kind != lock::LockKind::kShared &&
            call->service->holds(call->name, call->given_owner) == 0) {
          // (A reader's token cannot be read back: the counter moves with every reader.)
          return reclaimOwnGrant(call, call->name, r.retry_after_ms);
        }
        if (call->semaphore) {
          return call->answerAll(retryLaterAnswer(
              409, "no_permits", "every permit of the semaphore is taken", r.retry_after_ms));
        }
        return call->answerAll(
            lockedAnswer(r.busy_reason, lock::lockRefOf(call->name).kind, r.retry_after_ms));
      }
      case lock::AcquireStatus::kLimitMismatch:
        call->finished = true;
        return call->answerAll(
            errorAnswer(409, "limit_mismatch",
                        "the semaphore has limit " + std::to_string(r.semaphore_limit) +
                            " while its permits are held; acquire with that limit"));
      case lock::AcquireStatus::kTooManyWaiters:
        call->finished = true;
        if (r.limit == lock::WaiterLimit::kSidecar) {
          return call->answerAll(
              retryLaterAnswer(429, "too_many_waiters",
                               "the lock is held and the sidecar's waiter budget (max_waiters " +
                                   std::to_string(call->locks->max_waiters) + ") is used up",
                               r.retry_after_ms, "max_waiters"));
        }
        return call->answerAll(
            retryLaterAnswer(429, "too_many_waiters",
                             "too many waiters queued for this lock (max_waiters_per_lock " +
                                 std::to_string(call->locks->max_waiters_per_lock) + ")",
                             r.retry_after_ms, "max_waiters_per_lock"));
      case lock::AcquireStatus::kCancelled:
        call->finished = true;
        return call->answerAll(errorAnswer(503, "shutting_down", "the sidecar is shutting down"));
      case lock::AcquireStatus::kError:
        call->finished = true;
        return call->answerAll(backendErrorAnswer(r.error));
    }
  };

  call->ticket = service_.acquire(std::move(opts), std::move(done), std::move(on_event));
  // A client that goes away while queued leaves the queue; a stream client that goes away while
  // holding releases its lock (the lock a crashed app cannot leak).
  std::weak_ptr<AcquireCall> weak = call;
  res->onClientGone([weak] {
    auto c = weak.lock();
    if (!c) return;
    if (!c->granted) {
      // With a request_id the acquire runs on: its client's retry (attached now or later) gets
      // its answer rather than running a second time. Granted with nobody left to read it, the
      // lease is given back (deliverGrant).
      if (c->claim.id == 0) c->ticket.cancel();
      return;
    }
    if (c->stream && !c->finished) {
      c->finished = true;
      c->service->release(c->name, c->owner, [](StatusOr<lock::ReleaseStatus>) {});
    }
  });
  // Keep the call alive until the response completes: the responder holds it via onClientGone's
  // weak pointer only, so the done/on_event closures (held by the service) own it.
}

std::string LockApi::leaseKey(std::string_view name, std::string_view owner, bool shared,
                              bool mode_given) const {
  // Without a mode, a reader's lease this sidecar granted is found by its owner id; through
  // another sidecar (or after a restart) a reader says "mode": "shared".
  // (A reader's lease this sidecar saw lost counts too: its release then answers lease_lost.)
  const std::string shared_key = lock::sharedLockKey(name);
  if (shared || (!mode_given && (service_.holds(shared_key, owner) > 0 ||
                                 service_.lostLately(shared_key, owner)))) {
    return shared_key;
  }
  // A fair lease is the mutex's lease: any sidecar releases it by name; the one that granted it
  // does so through its fair key, which ends its own bookkeeping of the lease.
  if (service_.holds(lock::fairLockKey(name), owner) > 0) return lock::fairLockKey(name);
  return std::string(name);
}

void LockApi::release(http::Request& req, http::ResponderPtr res) {
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  RequestBody& body = body_;
  body.parse(req.header("content-type"), req.body,
             {BodyField::kOwner, BodyField::kRequestId, BodyField::kMode});
  std::string_view owner;
  std::string_view request_id;
  bool shared = false;
  if (body.ok()) {
    readOwner(body, static_cast<size_t>(locks_.max_owner_bytes), true, owner) &&
        readRequestId(body, request_id) && readMode(body, shared);
  }
  if (!body.ok()) return sendBodyError(res, body);
  const std::string name = leaseKey(req.param("name"), owner, shared, body.has(BodyField::kMode));
  // Filed under the lock's own name: a retry finds the first answer whatever mode it resolves to.
  const std::string retry_scope = retryScope(req.param("name"), owner, req.principal.get());
  releaseOnce(
      replayKey(kReleaseRoute, retry_scope, request_id), std::move(res),
      [this, name, owner = std::string(owner)](const AnswerFn& answer_with) {
        service_.release(
            name, owner,
            [service = &service_, name, owner, answer_with](StatusOr<lock::ReleaseStatus> r) {
              // Not remembered: a later retry runs for real.
              if (!r.isOk()) return answer_with(backendErrorAnswer(r.status()), false);
              Answer answer;
              switch (*r) {
                case lock::ReleaseStatus::kReleased:
                  answer.status = 200;
                  answer.body = JsonObject().boolean("released", true).finish();
                  break;
                case lock::ReleaseStatus::kHoldReleased: {
                  // One hold of a re-entered lease: it stays held. The holds left are known here
                  // when this sidecar holds the lease (holds taken through another sidecar count
                  // too).
                  answer.status = 200;
                  JsonObject held;
                  held.boolean("released", true).boolean("held", true);
                  if (const int64_t left = service->holds(name, owner); left > 0) {
                    held.integer("holds", left);
                  }
                  answer.body = held.finish();
                  break;
                }
                case lock::ReleaseStatus::kNotOwner:
                  answer = errorAnswer(409, "not_owner", "the lock is held by another owner");
                  break;
                case lock::ReleaseStatus::kNotHeld:
                  answer =
                      errorAnswer(404, "not_held", "no such lease (it expired or was released)");
                  break;
                case lock::ReleaseStatus::kLeaseLost:
                  answer = errorAnswer(
                      404, "lease_lost",
                      "the lease was lost before release (expired or taken by another owner)");
                  break;
              }
              answer_with(answer, true);
            });
      });
}

void LockApi::releaseOnce(std::string replay_key, http::ResponderPtr res,
                          const std::function<void(AnswerFn)>& run) {
  const IdempotencyCache::Lookup found = claimRequest(replay_key, res);
  if (found.kind == IdempotencyCache::Lookup::Kind::kReplay) {
    return sendAnswer(res, *found.answer);  // a retried release gets the first answer
  }
  if (found.kind == IdempotencyCache::Lookup::Kind::kAttached) return;  // answered with it
  run([res = std::move(res), claim = RequestClaim{replies_, std::move(replay_key), found.id}](
          const Answer& answer, bool remember) mutable {
    std::vector<http::ResponderPtr> retries = claim.finish(remember ? &answer : nullptr);
    sendAnswer(res, answer);
    for (const auto& retry : retries) sendAnswer(retry, answer);
  });
}

// Frees a stuck lock whoever holds it. Only with an admin token: the admin listener is often
// bound to the pod IP for probes and Prometheus, and without tokens anybody who reaches it could
// take every lock away from its holder.
void LockApi::forceRelease(http::Request& req, http::ResponderPtr res) {
  if (req.principal == nullptr) {
    return sendError(res, 403, "admin_token_required",
                     "force release needs an admin token: configure auth.admin_tokens_file or "
                     "auth.admin_tokens_env and send it as 'Authorization: Bearer <token>'");
  }
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  RequestBody& body = body_;
  body.parse(req.header("content-type"), req.body, {});
  if (!body.ok()) return sendBodyError(res, body);
  std::string who = req.principal->label;
  if (req.peer != nullptr && !req.peer->key().empty()) who += " from " + req.peer->key();
  std::string name(req.param("name"));
  service_.forceRelease(name, [res, name, who](StatusOr<lock::ForcedRelease> r) {
    if (!r.isOk()) return sendBackendError(res, r.status());
    if (!r->released) {
      return sendError(res, 404, "not_held", "the lock is not held (it expired or was released)");
    }
    SL_LOG(kWarn, "lock.force_released", {"name", name},
           {"token", static_cast<unsigned long long>(r->token)}, {"by", who});
    res->send(200, kJson,
              JsonObject()
                  .text("name", name)
                  .boolean("released", true)
                  .unsignedInteger("token", r->token)
                  .finish());
  });
}

void LockApi::extend(http::Request& req, http::ResponderPtr res) {
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  RequestBody& body = body_;
  body.parse(req.header("content-type"), req.body,
             {BodyField::kOwner, BodyField::kTtlMs, BodyField::kMode});
  std::string_view owner;
  int64_t ttl_ms = locks_.default_ttl_ms;
  bool shared = false;
  if (body.ok()) {
    readOwner(body, static_cast<size_t>(locks_.max_owner_bytes), true, owner) &&
        body.readInt(BodyField::kTtlMs, 1, locks_.max_ttl_ms, ttl_ms) && readMode(body, shared);
  }
  if (!body.ok()) return sendBodyError(res, body);
  service_.extend(
      leaseKey(req.param("name"), owner, shared, body.has(BodyField::kMode)), owner, ttl_ms,
      [res](StatusOr<lock::ExtendResult> r) {
        if (!r.isOk()) return sendBackendError(res, r.status());
        switch (r->status) {
          case lock::ExtendStatus::kExtended:
            return res->send(200, kJson, JsonObject().integer("ttl_ms", r->ttl_ms).finish());
          case lock::ExtendStatus::kNotOwner:
            return sendError(res, 409, "not_owner", "the lock is held by another owner");
          case lock::ExtendStatus::kNotHeld:
            return sendError(res, 404, "not_held", "no such lease (it expired or was released)");
          case lock::ExtendStatus::kLeaseLost:
            return sendError(res, 404, "lease_lost", "the lease was lost (expired or taken)");
        }
      });
}

// ---- Semaphores: up to `limit` permits at once, each with its own TTL (README "Semaphores").
// The lock service knows a semaphore by semaphoreLockKey(name); permits are owner ids it makes.

namespace {
constexpr int64_t kMaxSemaphoreLimit = 1'000'000;

bool readPermit(RequestBody& b, size_t max_bytes, std::string_view& out) {
  return readOwnerId(b, BodyField::kPermit, "permit", max_bytes, /*required=*/true, out);
}
}  // namespace

void LockApi::semaphoreAcquire(http::Request& req, http::ResponderPtr res) {
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  RequestBody& body = body_;
  body.parse(req.header("content-type"), req.body,
             {BodyField::kLimit, BodyField::kTtlMs, BodyField::kWaitMs, BodyField::kAutoRenew,
              BodyField::kMaxHoldMs, BodyField::kHold, BodyField::kRequestId});
  lock::AcquireOptions opts;
  opts.ttl_ms = locks_.default_ttl_ms;
  std::string_view hold;
  std::string_view request_id;
  if (body.ok() && !body.has(BodyField::kLimit)) body.setError("limit is required");
  if (body.ok()) {
    body.readInt(BodyField::kLimit, 1, kMaxSemaphoreLimit, opts.limit) &&
        body.readInt(BodyField::kTtlMs, 1, locks_.max_ttl_ms, opts.ttl_ms) &&
        body.readInt(BodyField::kWaitMs, 0, locks_.max_wait_ms, opts.wait_ms) &&
        body.readBool(BodyField::kAutoRenew, opts.auto_renew) &&
        body.readInt(BodyField::kMaxHoldMs, 1, locks_.max_hold_ms_limit, opts.max_hold_ms) &&
        body.readString(BodyField::kHold, hold) && readRequestId(body, request_id);
  }
  checkHold(body, hold);
  if (body.ok() && hold == "stream" && !request_id.empty()) {
    body.setError("request_id cannot be used with hold: stream (the stream is the lease's answer)");
  }
  if (!body.ok()) return sendBodyError(res, body);
  if (draining_) return sendError(res, 503, "shutting_down", "the sidecar is shutting down");
  opts.name = lock::semaphoreLockKey(req.param("name"));
  applyHold(body, hold, locks_.max_hold_ms_limit, opts);
  // Permits are made by the sidecar: a retry is recognised by its request_id alone.
  const std::string retry_scope = retryScope(opts.name, {}, req.principal.get());
  beginAcquire(std::move(opts), replayKey(kAcquireRoute, retry_scope, request_id), std::move(res));
}

void LockApi::semaphoreRelease(http::Request& req, http::ResponderPtr res) {
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  RequestBody& body = body_;
  body.parse(req.header("content-type"), req.body, {BodyField::kPermit, BodyField::kRequestId});
  std::string_view permit;
  std::string_view request_id;
  if (body.ok()) {
    readPermit(body, static_cast<size_t>(locks_.max_owner_bytes), permit) &&
        readRequestId(body, request_id);
  }
  if (!body.ok()) return sendBodyError(res, body);
  const std::string key = lock::semaphoreLockKey(req.param("name"));
  const std::string retry_scope = retryScope(key, permit, req.principal.get());
  releaseOnce(replayKey(kReleaseRoute, retry_scope, request_id), std::move(res),
              [this, key, permit = std::string(permit)](const AnswerFn& answer_with) {
                service_.release(key, permit, [answer_with](StatusOr<lock::ReleaseStatus> r) {
                  if (!r.isOk()) return answer_with(backendErrorAnswer(r.status()), false);
                  Answer answer;
                  switch (*r) {
                    case lock::ReleaseStatus::kReleased:
                    case lock::ReleaseStatus::kHoldReleased:
                      answer.status = 200;
                      answer.body = JsonObject().boolean("released", true).finish();
                      break;
                    case lock::ReleaseStatus::kLeaseLost:
                      answer.status = 404;
                      answer.body = errorBody("lease_lost",
                                              "the permit was lost before release (it expired)");
                      break;
                    case lock::ReleaseStatus::kNotOwner:
                    case lock::ReleaseStatus::kNotHeld:
                      answer.status = 404;
                      answer.body =
                          errorBody("not_held", "no such permit (it expired or was released)");
                      break;
                  }
                  answer_with(answer, true);
                });
              });
}

void LockApi::semaphoreExtend(http::Request& req, http::ResponderPtr res) {
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  RequestBody& body = body_;
  body.parse(req.header("content-type"), req.body, {BodyField::kPermit, BodyField::kTtlMs});
  std::string_view permit;
  int64_t ttl_ms = locks_.default_ttl_ms;
  if (body.ok()) {
    readPermit(body, static_cast<size_t>(locks_.max_owner_bytes), permit) &&
        body.readInt(BodyField::kTtlMs, 1, locks_.max_ttl_ms, ttl_ms);
  }
  if (!body.ok()) return sendBodyError(res, body);
  service_.extend(lock::semaphoreLockKey(req.param("name")), permit, ttl_ms,
                  [res](StatusOr<lock::ExtendResult> r) {
                    if (!r.isOk()) return sendBackendError(res, r.status());
                    if (r->status == lock::ExtendStatus::kExtended) {
                      return res->send(200, kJson,
                                       JsonObject().integer("ttl_ms", r->ttl_ms).finish());
                    }
                    if (r->status == lock::ExtendStatus::kLeaseLost) {
                      return sendError(res, 404, "lease_lost", "the permit was lost (expired)");
                    }
                    sendError(res, 404, "not_held", "no such permit (it expired or was released)");
                  });
}

void LockApi::semaphoreInspect(http::Request& req, http::ResponderPtr res) {
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  std::string name(req.param("name"));
  service_.inspect(lock::semaphoreLockKey(name), [res, name](StatusOr<lock::LockState> r) {
    if (!r.isOk()) return sendBackendError(res, r.status());
    // limit 0: no permit is held, the next acquire sets it. Never the permit ids.
    res->send(200, kJson,
              JsonObject()
                  .text("name", name)
                  .integer("limit", r->held ? r->limit : 0)
                  .integer("used", r->held ? r->used : 0)
                  .unsignedInteger("token", r->token)
                  .finish());
  });
}

void LockApi::inspect(http::Request& req, http::ResponderPtr res) {
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  std::string name(req.param("name"));
  // Asked as the readers' kind: it also tells readers from a writer.
  service_.inspect(lock::sharedLockKey(name), [res, name](StatusOr<lock::LockState> r) {
    if (!r.isOk()) return sendBackendError(res, r.status());
    // Never the owner id: it is the capability to release.
    JsonObject answer;
    answer.boolean("held", r->held)
        .text("name", name)
        .unsignedInteger("token", r->token)
        .integer("ttl_ms", r->held ? r->ttl_ms : 0);
    if (r->held) answer.text("mode", r->used > 0 ? "shared" : "exclusive");
    if (r->held && r->used > 0) answer.integer("readers", r->used);
    res->send(200, kJson, answer.finish());
  });
}

void LockApi::list(http::Request& req, http::ResponderPtr res) {
  // A token limited to prefixes sees only the names it may use (filtered, not refused: the
  // listing stays useful to a scoped app and reveals nothing beyond its own names).
  const http::Principal* principal = req.principal.get();
  json leases = json::array();
  for (const auto& l : service_.leases()) {
    if (!mayUseLock(principal, lock::lockRefOf(l.name).name)) continue;
    leases.push_back(json{{"name", l.name},
                          {"token", l.token},
                          {"age_ms", l.age_ms},
                          {"ttl_remaining_ms", l.ttl_remaining_ms},
                          {"auto_renew", l.auto_renew},
                          {"stream", l.stream}});
  }
  json waiters = json::array();
  for (const auto& w : service_.waiterCounts()) {
    if (!mayUseLock(principal, lock::lockRefOf(w.name).name)) continue;
    waiters.push_back(json{{"name", w.name}, {"waiters", w.waiters}});
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

void LockApi::openapi(http::Request& /*req*/, http::ResponderPtr res) {
  res->send(200, kJson, std::string(openApiDocument()));
}

void LockApi::metricsText(http::Request& req, http::ResponderPtr res) {
  // Rendering walks every series (about a millisecond): a client pipelining thousands of scrapes
  // must not buy thousands of renders. The requests of one loop turn share one render.
  res->send(200, "text/plain; version=0.0.4; charset=utf-8", metrics_.renderCached(req.loop_turn));
}

// ---- Multi-locks: every name or none, one owner (README "Multi-locks").

namespace {

constexpr size_t kMaxMultiLockNames = 64;

/// The "names" of a multi-lock request: 1..kMaxMultiLockNames valid, distinct lock names that the
/// caller may use. Answers 400 / 403 itself and returns false when they are not.
bool readLockNames(RequestBody& body, const http::Request& req, const http::ResponderPtr& res,
                   size_t max_name_bytes, std::vector<std::string>& out) {
  std::vector<std::string_view> names;
  if (body.ok() && !body.has(BodyField::kNames)) body.setError("names is required");
  if (body.ok()) body.readStrings(BodyField::kNames, kMaxMultiLockNames, names);
  if (!body.ok()) {
    sendBodyError(res, body);
    return false;
  }
  for (std::string_view name : names) {
    if (const std::string problem = LockApi::lockNameProblem(name, max_name_bytes);
        !problem.empty()) {
      sendError(res, 400, "invalid_name", "names: " + problem);
      return false;
    }
    if (!LockApi::mayUseLock(req.principal.get(), name)) {
      sendError(res, 403, "lock_not_allowed", "this token may not use lock " + std::string(name));
      return false;
    }
    if (std::find(out.begin(), out.end(), name) != out.end()) {
      sendError(res, 400, "bad_request", "names: " + std::string(name) + " is given twice");
      return false;
    }
    out.emplace_back(name);
  }
  return true;
}

std::string multiGrantAnswer(const lock::MultiAcquireResult& r) {
  json names = json::array();
  json leases = json::array();
  for (const lock::Grant& g : r.grants) {
    names.push_back(g.name);
    leases.push_back(json{{"name", g.name}, {"token", g.token}, {"ttl_ms", g.ttl_ms}});
  }
  return json{{"names", std::move(names)},
              {"owner", r.owner},
              {"ttl_ms", r.ttl_ms},
              {"leases", std::move(leases)}}
      .dump();
}

/// What a multi-lock's remembered answer is filed under besides route and request_id: its names
/// (as a set: the order they are sent in does not matter), the owner id sent and the token's
/// label, as retryScope for one lock.
std::string multiRetryScope(std::vector<std::string> names, std::string_view owner,
                            const http::Principal* principal) {
  std::sort(names.begin(), names.end());
  std::string joined;
  for (const std::string& name : names) joined.append(name).append(1, '\n');
  return retryScope(joined, owner, principal);
}

/// Runs `op(name, callback)` for every name at once; `done` gets the results in `names` order.
template <typename Result>
void forEachName(const std::vector<std::string>& names,
                 const std::function<void(const std::string&, std::function<void(Result)>)>& op,
                 std::function<void(std::vector<Result>)> done) {
  struct Pending {
    std::vector<std::optional<Result>> results;
    size_t left;
    std::function<void(std::vector<Result>)> done;
  };
  auto pending = std::make_shared<Pending>(
      Pending{std::vector<std::optional<Result>>(names.size()), names.size(), std::move(done)});
  for (size_t i = 0; i < names.size(); ++i) {
    op(names[i], [pending, i](Result r) {
      pending->results[i] = std::move(r);
      if (--pending->left > 0) return;
      std::vector<Result> results;
      for (auto& result : pending->results) results.push_back(std::move(*result));
      pending->done(std::move(results));
    });
  }
}

/// Owner-checked extends of every name of `grant` at once (its owner's leases): `done` gets
/// whether every lease was still that owner's, then extended to `ttl_ms` and its TTLs set in
/// `grant`; or the first backend error.
void extendGrant(lock::LockService& service, lock::MultiAcquireResult grant, int64_t ttl_ms,
                 std::function<void(StatusOr<lock::MultiAcquireResult>, bool extended)> done) {
  std::vector<std::string> names;
  for (const lock::Grant& g : grant.grants) names.push_back(g.name);
  const std::string owner = grant.owner;
  forEachName<StatusOr<lock::ExtendResult>>(
      names,
      [&service, owner, ttl_ms](const std::string& name,
                                std::function<void(StatusOr<lock::ExtendResult>)> cb) {
        service.extend(name, owner, ttl_ms, std::move(cb));
      },
      [grant = std::move(grant),
       done = std::move(done)](std::vector<StatusOr<lock::ExtendResult>> extended) mutable {
        for (size_t i = 0; i < extended.size(); ++i) {
          if (!extended[i].isOk()) return done(extended[i].status(), false);
          if (extended[i]->status != lock::ExtendStatus::kExtended) return done(grant, false);
          grant.grants[i].ttl_ms = extended[i]->ttl_ms;
          grant.ttl_ms = i == 0 ? extended[i]->ttl_ms : std::min(grant.ttl_ms, extended[i]->ttl_ms);
        }
        done(std::move(grant), true);
      });
}

/// The state of one multi-lock request, shared by its callbacks.
struct MultiCall {
  lock::LockService* service = nullptr;
  lock::AcquireTicket ticket;
  http::ResponderPtr responder;
  bool granted = false;
  bool auto_renew = false;
  RequestClaim claim;  // request_id: as AcquireCall's
  std::vector<std::string> names;
  std::string given_owner;  // the client's own owner id, if it chose one
  int64_t ttl_ms = 0;
};

/// A retried multi-lock acquire (request_id) of a client that chose its owner id, answered busy:
/// as reclaimOwnGrant for one lock, if every lease is the client's own (its first attempt was
/// granted, but the sidecar restarted since), the grant is made again in place: TTLs set anew,
/// same tokens. Otherwise the retry gets `busy`.
void reclaimOwnMultiGrant(const std::shared_ptr<MultiCall>& call, Answer busy) {
  lock::MultiAcquireResult own;
  own.owner = call->given_owner;
  std::vector<std::string> names = call->names;
  std::sort(names.begin(), names.end());  // the order of every grant's leases
  for (std::string& name : names) own.grants.push_back({name, own.owner, 0, 0});
  extendGrant(
      *call->service, std::move(own), call->ttl_ms,
      [call, names = std::move(names), busy = std::move(busy)](
          StatusOr<lock::MultiAcquireResult> held, bool extended) {
        if (!held.isOk() || !extended) return call->claim.answerAll(call->responder, busy);
        lock::LockService* service = call->service;
        forEachName<StatusOr<lock::LockState>>(
            names,
            [service](const std::string& name, std::function<void(StatusOr<lock::LockState>)> cb) {
              service->inspect(name, std::move(cb));
            },
            [call, own = std::move(*held)](std::vector<StatusOr<lock::LockState>> states) mutable {
              for (size_t i = 0; i < states.size(); ++i) {
                if (!states[i].isOk()) {
                  return call->claim.answerAll(call->responder,
                                               backendErrorAnswer(states[i].status()));
                }
                own.grants[i].token = states[i]->token;
              }
              const Answer answer{200, multiGrantAnswer(own), {}, own.owner, 0};
              sendAnswer(call->responder, answer);
              for (const auto& retry : call->claim.finish(&answer)) sendAnswer(retry, answer);
            });
      });
}

}  // namespace

void LockApi::multiAcquire(http::Request& req, http::ResponderPtr res) {
  RequestBody& body = body_;
  body.parse(req.header("content-type"), req.body,
             {BodyField::kNames, BodyField::kTtlMs, BodyField::kWaitMs, BodyField::kOwner,
              BodyField::kAutoRenew, BodyField::kMaxHoldMs, BodyField::kRequestId});
  lock::MultiAcquireOptions opts;
  opts.ttl_ms = locks_.default_ttl_ms;
  std::string_view owner;
  std::string_view request_id;
  if (body.ok()) {
    body.readInt(BodyField::kTtlMs, 1, locks_.max_ttl_ms, opts.ttl_ms) &&
        body.readInt(BodyField::kWaitMs, 0, locks_.max_wait_ms, opts.wait_ms) &&
        readOwner(body, static_cast<size_t>(locks_.max_owner_bytes), false, owner) &&
        body.readBool(BodyField::kAutoRenew, opts.auto_renew) &&
        body.readInt(BodyField::kMaxHoldMs, 1, locks_.max_hold_ms_limit, opts.max_hold_ms) &&
        readRequestId(body, request_id);
  }
  if (!readLockNames(body, req, res, static_cast<size_t>(locks_.max_name_bytes), opts.names)) {
    return;
  }
  if (draining_) return sendError(res, 503, "shutting_down", "the sidecar is shutting down");
  opts.owner = owner;
  const std::string retry_scope = multiRetryScope(opts.names, owner, req.principal.get());
  beginMultiAcquire(std::move(opts), replayKey(kMultiAcquireRoute, retry_scope, request_id),
                    std::move(res));
}

void LockApi::beginMultiAcquire(lock::MultiAcquireOptions opts, std::string replay_key,
                                http::ResponderPtr res) {
  const IdempotencyCache::Lookup found = claimRequest(replay_key, res);
  if (found.kind == IdempotencyCache::Lookup::Kind::kAttached) return;  // answered with it
  if (found.kind == IdempotencyCache::Lookup::Kind::kReplay) {
    return retryMultiGrant(std::move(opts), std::move(replay_key), found.id, found.answer->owner,
                           found.answer->body, std::move(res));
  }
  startMultiAcquire(std::move(opts), std::move(replay_key), found.id, std::move(res));
}

// A retry of a multi-lock that was granted: the same grant (owner and tokens), if every lease is
// still its owner's (owner-checked extends prove it and set the TTLs anew), as retryGrant does
// for one lock. If any is gone, what is left of the grant is given back (all or none) and the
// retry is a new acquire.
void LockApi::retryMultiGrant(lock::MultiAcquireOptions opts, std::string replay_key,
                              IdempotencyCache::Id answer_id, std::string owner,
                              std::string answer, http::ResponderPtr res) {
  // Copies, not references into the cache: the entry may go (forget(), eviction) meanwhile.
  // The remembered grant is our own JSON: its leases in sorted name order, with their tokens.
  lock::MultiAcquireResult remembered_grant;
  remembered_grant.owner = owner;
  // Parsed without exceptions (none on the data path): an answer that does not read back as a
  // grant cannot happen, but if it did, the retry would be a new acquire rather than a crash.
  const json remembered = json::parse(answer, nullptr, /*allow_exceptions=*/false);
  const json* leases = remembered.is_object() && remembered.contains("leases")
                           ? &remembered["leases"]
                           : nullptr;
  bool readable = leases != nullptr && leases->is_array();
  for (size_t i = 0; readable && i < leases->size(); ++i) {
    const json& lease = (*leases)[i];
    readable = lease.is_object() && lease.contains("name") && lease["name"].is_string() &&
               lease.contains("token") && lease["token"].is_number_unsigned();
    if (readable) {
      remembered_grant.grants.push_back(
          {lease["name"].get<std::string>(), owner, lease["token"].get<uint64_t>(), 0});
    }
  }
  if (!readable) {
    replies_->forget(replay_key, answer_id);
    return beginMultiAcquire(std::move(opts), std::move(replay_key), std::move(res));
  }
  const int64_t ttl_ms = opts.ttl_ms;
  extendGrant(
      service_, std::move(remembered_grant), ttl_ms,
      [this, opts = std::move(opts), replay_key = std::move(replay_key), answer_id,
       res = std::move(res)](StatusOr<lock::MultiAcquireResult> grant, bool extended) mutable {
        if (!grant.isOk()) return sendBackendError(res, grant.status());
        if (extended) return res->send(200, kJson, multiGrantAnswer(*grant));
        // A lease is gone: what is left is given back, and the retry acquires anew.
        // (Another retry may have claimed the key anew meanwhile: then this one waits.)
        replies_->forget(replay_key, answer_id);
        std::vector<std::string> names = opts.names;
        service_.releaseAll(
            std::move(names), grant->owner,
            [this, opts = std::move(opts), replay_key = std::move(replay_key),
             res = std::move(res)](std::vector<StatusOr<lock::ReleaseStatus>>) mutable {
              beginMultiAcquire(std::move(opts), std::move(replay_key), std::move(res));
            });
      });
}

void LockApi::startMultiAcquire(lock::MultiAcquireOptions opts, std::string replay_key,
                                IdempotencyCache::Id claim, http::ResponderPtr res) {
  auto call = std::make_shared<MultiCall>();
  call->responder = res;
  call->auto_renew = opts.auto_renew;
  call->claim = RequestClaim{replies_, std::move(replay_key), claim};
  call->service = &service_;
  call->names = opts.names;
  call->given_owner = opts.owner;  // empty: the service generates one
  call->ttl_ms = opts.ttl_ms;
  lock::LockService* service = &service_;
  metrics::Metrics* metrics = &metrics_;
  call->ticket = service_.acquireAll(std::move(opts), [call, service,
                                                       metrics](lock::MultiAcquireResult r) {
    switch (r.status) {
      case lock::AcquireStatus::kGranted: {
        call->granted = true;
        std::vector<std::string> names;
        for (const lock::Grant& g : r.grants) names.push_back(g.name);
        // Nobody would learn of these leases: give them back (as for one lock).
        return deliverGrantAnswer(
            call->claim, call->responder, Answer{200, multiGrantAnswer(r), {}, r.owner, 0},
            call->auto_renew, metrics, [service, names = std::move(names), owner = r.owner] {
              service->releaseAll(names, owner, [](std::vector<StatusOr<lock::ReleaseStatus>>) {});
            });
      }
      case lock::AcquireStatus::kBusy:
      case lock::AcquireStatus::kLimitMismatch: {
        Answer busy = retryLaterAnswer(
            409, "locked",
            // (Held by whom is not known: a multi-lock's names are tried in one step.)
            "lock " + r.blocked_by + " is held; none of the names was taken", r.retry_after_ms);
        // As for one lock: only leases this sidecar does not know of (granted before a restart).
        const bool known_here =
            std::any_of(call->names.begin(), call->names.end(), [&](const std::string& name) {
              return call->service->holds(name, call->given_owner) > 0;
            });
        if (!call->claim.key.empty() && !call->given_owner.empty() && !call->auto_renew &&
            !known_here) {
          return reclaimOwnMultiGrant(call, std::move(busy));
        }
        return call->claim.answerAll(call->responder, busy);
      }
      case lock::AcquireStatus::kTooManyWaiters:
        return call->claim.answerAll(
            call->responder,
            retryLaterAnswer(
                429, "too_many_waiters",
                "too many waiters queued for lock " + r.blocked_by +
                    "; none of the names was taken",
                r.retry_after_ms,
                r.limit == lock::WaiterLimit::kSidecar ? "max_waiters" : "max_waiters_per_lock"));
      case lock::AcquireStatus::kCancelled:
        return call->claim.answerAll(
            call->responder, errorAnswer(503, "shutting_down", "the sidecar is shutting down"));
      case lock::AcquireStatus::kError:
        return call->claim.answerAll(call->responder, backendErrorAnswer(r.error));
    }
  });
  // With a request_id the acquire runs on when its client hangs up (as for one lock).
  std::weak_ptr<MultiCall> weak = call;
  res->onClientGone([weak] {
    if (auto c = weak.lock(); c && !c->granted && c->claim.id == 0) c->ticket.cancel();
  });
}

void LockApi::multiRelease(http::Request& req, http::ResponderPtr res) {
  RequestBody& body = body_;
  body.parse(req.header("content-type"), req.body,
             {BodyField::kNames, BodyField::kOwner, BodyField::kRequestId});
  std::string_view owner;
  std::string_view request_id;
  if (body.ok()) {
    readOwner(body, static_cast<size_t>(locks_.max_owner_bytes), true, owner) &&
        readRequestId(body, request_id);
  }
  std::vector<std::string> names;
  if (!readLockNames(body, req, res, static_cast<size_t>(locks_.max_name_bytes), names)) return;
  const std::string retry_scope = multiRetryScope(names, owner, req.principal.get());
  releaseOnce(
      replayKey(kMultiReleaseRoute, retry_scope, request_id), std::move(res),
      [this, names = std::move(names), owner = std::string(owner)](const AnswerFn& answer_with) {
        service_.releaseAll(
            names, owner, [names, answer_with](std::vector<StatusOr<lock::ReleaseStatus>> results) {
              // Every name is released that can be; the answer names those that were not.
              std::string not_owner;
              std::string not_held;
              const Status* error = nullptr;
              for (size_t i = 0; i < results.size(); ++i) {
                if (!results[i].isOk()) {
                  if (error == nullptr) error = &results[i].status();
                  continue;
                }
                switch (*results[i]) {
                  case lock::ReleaseStatus::kReleased:
                  case lock::ReleaseStatus::kHoldReleased:
                    break;
                  case lock::ReleaseStatus::kNotOwner:
                    not_owner += (not_owner.empty() ? "" : ", ") + names[i];
                    break;
                  case lock::ReleaseStatus::kNotHeld:
                  case lock::ReleaseStatus::kLeaseLost:
                    not_held += (not_held.empty() ? "" : ", ") + names[i];
                    break;
                }
              }
              // Not remembered: a later retry runs for real.
              if (error != nullptr) return answer_with(backendErrorAnswer(*error), false);
              if (!not_owner.empty()) {
                return answer_with(
                    errorAnswer(409, "not_owner",
                                "held by another owner: " + not_owner +
                                    (not_held.empty() ? "" : "; not held: " + not_held) +
                                    " (the other names were released)"),
                    true);
              }
              if (!not_held.empty()) {
                return answer_with(errorAnswer(404, "not_held",
                                               "not held (expired, released or lost): " + not_held +
                                                   " (the other names were released)"),
                                   true);
              }
              answer_with(Answer{200, JsonObject().boolean("released", true).finish(), {}, {}, 0},
                          true);
            });
      });
}

}  // namespace sidelock::api
