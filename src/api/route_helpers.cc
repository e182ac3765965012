#include "api/route_helpers.h"

#include <algorithm>
#include <chrono>

#include "api/json_object.h"
#include "api/lock_api.h"
#include "common/names.h"
#include "http/path_pattern.h"

namespace sidelock::api {

void sendJson(const http::ResponderPtr& res, int status, const nlohmann::json& body) {
  res->send(status, kJson,
            body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

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
                        int64_t retry_after_ms, std::string_view limit,
                        std::string_view reason, std::string_view holder) {
  JsonObject answer;
  answer.text("error", code);
  if (!limit.empty()) answer.text("limit", limit);
  if (!reason.empty()) answer.text("reason", reason);
  if (!holder.empty()) answer.text("holder", holder);
  return Answer{status,
                answer.text("message", message).integer("retry_after_ms", retry_after_ms).finish(),
                {{"Retry-After", std::to_string((retry_after_ms + 999) / 1000)}},
                {},
                0};
}

/// 409 locked of one lock, saying why: another owner holds it, the caller itself does (and did
/// not ask to re-enter), or readers are held back for a queued writer.
Answer lockedAnswer(lock::BusyReason why, lock::LockKind kind, int64_t retry_after_ms,
                    std::string_view holder) {
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
    case lock::BusyReason::kLockDelay:
      reason = "lock_delay";
      message =
          "nobody holds the lock, but its last lease ended without a release (expired, forced or "
          "given up): its lock_delay_ms runs until retry_after_ms";
      break;
  }
  return retryLaterAnswer(409, "locked", message, retry_after_ms, {}, reason, holder);
}

bool readHolder(RequestBody& b, std::string_view identity, std::string& out) {
  std::string_view holder = identity;
  if (!b.readString(BodyField::kHolder, holder)) return false;
  if (b.has(BodyField::kHolder)) {
    if (std::string problem = holderProblem(holder); !problem.empty()) {
      b.setError(problem);
      return false;
    }
  }
  out.assign(holder);
  return true;
}

std::string holdersJson(const std::vector<backend::LeaseHolder>& holders) {
  std::string out = "[";
  for (const backend::LeaseHolder& h : holders) {
    if (out.size() > 1) out += ',';
    out += JsonObject()
               .text("holder", h.holder)
               .integer("since_ms", h.since_ms)
               .integer("ttl_ms", h.ttl_ms)
               .finishNested();
  }
  out += ']';
  return out;
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

void sendError(const http::ResponderPtr& res, int status, std::string_view code,
               std::string_view message) {
  res->send(status, kJson, errorBody(code, message));
}

void sendRetryLater(const http::ResponderPtr& res, int status, std::string_view code,
                    std::string_view message, int64_t retry_after_ms, std::string_view limit) {
  sendAnswer(res, retryLaterAnswer(status, code, message, retry_after_ms, limit));
}

/// Validates the {name} route parameter (percent-decoded by the router, so "%41bc" is "Abc");
/// answers 400 and returns false if it is bad.
bool checkNameAllowed(const http::Request& req, const http::ResponderPtr& res) {
  if (LockApi::mayUseLock(req.principal.get(), req.param("name"))) return true;
  std::string allowed;
  for (const auto& prefix : req.principal->scopes) {
    allowed += (allowed.empty() ? "\"" : ", \"") + prefix + "\"";
  }
  sendError(res, 403, "lock_not_allowed",
            "this token may use only lock names starting with " + allowed);
  return false;
}

bool checkName(const http::Request& req, const http::ResponderPtr& res, size_t max_bytes) {
  const std::string problem = LockApi::lockNameProblem(req.param("name"), max_bytes);
  if (problem.empty()) return true;
  sendError(res, 400, "invalid_name", problem);
  return false;
}

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

bool queryValue(std::string_view query, std::string_view key, std::string* out) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != key) continue;
    return http::percentDecode(eq == std::string_view::npos ? std::string_view{}
                                                            : pair.substr(eq + 1),
                               out);
  }
  return false;
}

bool queryHas(std::string_view query, std::string_view key) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (pair.substr(0, pair.find('=')) == key) return true;
  }
  return false;
}

bool checkQuery(const http::Request& req, const http::ResponderPtr& res, const QueryKeys& known) {
  std::string_view rest = req.query;
  std::vector<std::string_view> seen;
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view{} : rest.substr(amp + 1);
    if (pair.empty()) continue;
    const std::string_view key = pair.substr(0, pair.find('='));
    std::string problem;
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string names;
      for (std::string_view k : known) names += (names.empty() ? "" : ", ") + std::string(k);
      problem =
          "unknown query parameter '" + std::string(key) + "' (" +
          (known.empty() ? std::string("this route takes none") : "this route takes: " + names) +
          ")";
    } else if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      problem = "query parameter '" + std::string(key) + "' is given more than once";
    } else {
      seen.push_back(key);
      continue;
    }
    sendError(res, 400, "bad_request", problem);
    return false;
  }
  return true;
}

}  // namespace sidelock::api
