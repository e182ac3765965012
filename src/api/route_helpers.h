// What the v1 routes share (lock_api.cc, lock_routes.cc, semaphore_routes.cc,
// multi_lock_routes.cc): reading request fields, building and sending answers, and the claim a
// request with a request_id holds in the IdempotencyCache. Internal to the api layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/idempotency_cache.h"
#include "api/request_body.h"
#include "common/status.h"
#include "http/http_types.h"
#include "lock/lock_service.h"
#include "metrics/metrics.h"

namespace sidelock::api {

inline constexpr std::string_view kJson = "application/json";

// --- request fields -------------------------------------------------------------------------

/// request_id: optional, 1..kMaxRequestIdBytes printable ASCII characters.
inline constexpr size_t kMaxRequestIdBytes = 128;
bool readRequestId(RequestBody& b, std::string_view& out);
/// An owner id in `field` ("owner", or a semaphore's "permit"): 1..max_bytes printable ASCII;
/// absent is an error only if `required`. False (with the body's error set) on a bad value.
bool readOwnerId(RequestBody& b, BodyField field, std::string_view what, size_t max_bytes,
                 bool required, std::string_view& out);
bool readOwner(RequestBody& b, size_t max_bytes, bool required, std::string_view& out);
/// "holder": who holds the lock, a public label (common/names.h, holderProblem()); absent:
/// `identity` (the sidecar's, config `identity`; empty: none recorded). False with the body's
/// error set on a bad label.
bool readHolder(RequestBody& b, std::string_view identity, std::string& out);
/// The JSON array of the "holders" field (GET of a lock held by readers, of a semaphore):
/// [{"holder","since_ms","ttl_ms"}, ...], labels only, never owner ids.
std::string holdersJson(const std::vector<backend::LeaseHolder>& holders);
/// "hold": "stream" binds the lease to the connection (see the definition for the cap).
void applyHold(const RequestBody& b, std::string_view hold, int64_t max_hold_ms_limit,
               lock::AcquireOptions& opts);
/// The "hold" field of an acquire (lock or permit): "stream", "none" or absent.
void checkHold(RequestBody& b, std::string_view hold);
/// Whether the caller's token may use the {name} of the route (its prefixes, README "Access
/// control"); answers 403 lock_not_allowed and returns false if not. Checked before anything else:
/// a scoped token learns nothing about other names, not even whether one is valid.
bool checkNameAllowed(const http::Request& req, const http::ResponderPtr& res);
/// Validates the {name} route parameter; answers 400 and returns false if it is bad.
bool checkName(const http::Request& req, const http::ResponderPtr& res, size_t max_bytes);
/// The value of `key` in a raw query string ("candidate=a&x=y"), percent-decoded; false if absent
/// or badly encoded.
bool queryValue(std::string_view query, std::string_view key, std::string* out);
/// Whether `key` appears in a raw query string at all (with or without a value).
bool queryHas(std::string_view query, std::string_view key);
/// The query keys a v1 route reads (string literals). Every v1 route is bound with its list, so
/// that no route ignores a parameter it does not know.
using QueryKeys = std::vector<std::string_view>;
/// Checks the request's query string against the route's `known` keys: a key outside them, or
/// one given twice, answers 400 bad_request naming it (a misspelled `?extended=true`, or two
/// `limit`s, would otherwise be ignored or read first-wins) and returns false, before the route
/// runs. Keys are compared as sent (not percent-decoded); empty pairs ("a=1&&b=2") are skipped.
bool checkQuery(const http::Request& req, const http::ResponderPtr& res, const QueryKeys& known);

// --- answers --------------------------------------------------------------------------------

using Answer = IdempotencyCache::Answer;
void sendJson(const http::ResponderPtr& res, int status, const nlohmann::json& body);
void sendAnswer(const http::ResponderPtr& res, const Answer& a);
/// The body of every v1 error: {"error": code, "message": message}.
std::string errorBody(std::string_view code, std::string_view message);
Answer errorAnswer(int status, std::string_view code, std::string_view message);
/// 409 and 429: come back later, with the hint in the body and as Retry-After (whole seconds).
/// `limit` (429 only) names the config key of the queue limit that was hit; `holder` (409
/// locked) who holds the lock, when its lease recorded a label.
Answer retryLaterAnswer(int status, std::string_view code, std::string_view message,
                        int64_t retry_after_ms, std::string_view limit = {},
                        std::string_view reason = {}, std::string_view holder = {});
void sendRetryLater(const http::ResponderPtr& res, int status, std::string_view code,
                    std::string_view message, int64_t retry_after_ms, std::string_view limit = {});
/// 409 locked of one lock, saying why (reason held / held_by_you / writer_waiting) and, when
/// known, who holds it (its public label, never the owner id).
Answer lockedAnswer(lock::BusyReason why, lock::LockKind kind, int64_t retry_after_ms,
                    std::string_view holder = {});
/// Answers the first problem RequestBody found: 415 for a non-JSON body, else 400.
void sendBodyError(const http::ResponderPtr& res, const RequestBody& b);
/// Maps a backend Status to the API's error answer (503 backend_unavailable, ...).
Answer backendErrorAnswer(const Status& status);
void sendBackendError(const http::ResponderPtr& res, const Status& status);

// --- safe retries (request_id) --------------------------------------------------------------

// Route names in request_id keys: a retry must repeat the route.
inline constexpr std::string_view kAcquireRoute = "acquire";
inline constexpr std::string_view kReleaseRoute = "release";
inline constexpr std::string_view kMultiAcquireRoute = "multilocks/acquire";
inline constexpr std::string_view kMultiReleaseRoute = "multilocks/release";
inline constexpr std::string_view kProclaimRoute = "elections/proclaim";
inline constexpr std::string_view kResignRoute = "elections/resign";

/// Microseconds of the steady clock: the IdempotencyCache's time.
int64_t monotonicUs();
/// What a remembered answer is filed under besides route and request_id (see the definition).
std::string retryScope(std::string_view name, std::string_view owner,
                       const http::Principal* principal);
/// Where a request's answer is filed under its request_id; empty without one.
std::string replayKey(std::string_view route, std::string_view scope, std::string_view request_id);

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
                        std::function<void()> give_back);

}  // namespace sidelock::api
