// The semaphore routes (/v1/semaphores/{name}/...): up to `limit` permits at once, each with
// its own TTL (README "Semaphores"). Acquires run on the lock routes' path (beginAcquire).
#include "api/lock_api.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "api/json_object.h"
#include "api/route_helpers.h"
#include "common/invariant.h"
#include "common/log.h"

namespace sidelock::api {

// ---- Semaphores: up to `limit` permits at once, each with its own TTL (README "Semaphores").
// The lock service knows a semaphore as {kSemaphore, name}; permits are owner ids it makes.

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
              BodyField::kMaxHoldMs, BodyField::kHold, BodyField::kRequestId, BodyField::kHolder});
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
        body.readString(BodyField::kHold, hold) && readRequestId(body, request_id) &&
        readHolder(body, identity_, opts.holder);
  }
  checkHold(body, hold);
  if (body.ok() && hold == "stream" && !request_id.empty()) {
    body.setError("request_id cannot be used with hold: stream (the stream is the lease's answer)");
  }
  if (!body.ok()) return sendBodyError(res, body);
  if (draining_) return sendError(res, 503, "shutting_down", "the sidecar is shutting down");
  opts.lock = lock::LockId{lock::LockKind::kSemaphore, std::string(req.param("name"))};
  applyHold(body, hold, locks_.max_hold_ms_limit, opts);
  // Permits are made by the sidecar: a retry is recognised by its request_id alone.
  const std::string retry_scope = retryScope(opts.lock.display(), {}, req.principal.get());
  beginAcquire(std::move(opts), replayKey(kAcquireRoute, retry_scope, request_id),
               body.fingerprint(), std::move(res));
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
  const lock::LockId semaphore{lock::LockKind::kSemaphore, std::string(req.param("name"))};
  const std::string retry_scope = retryScope(semaphore.display(), permit, req.principal.get());
  answerOnce(replayKey(kReleaseRoute, retry_scope, request_id), body.fingerprint(), std::move(res),
             [this, semaphore, permit = std::string(permit)](const AnswerFn& answer_with) {
               service_.release(semaphore, permit, [answer_with](StatusOr<lock::ReleaseStatus> r) {
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
                     answer.body =
                         errorBody("lease_lost", "the permit was lost before release (it expired)");
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
  service_.extend(lock::LockId{lock::LockKind::kSemaphore, std::string(req.param("name"))}, permit,
                  ttl_ms, [res](StatusOr<lock::ExtendResult> r) {
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
  const lock::LockId semaphore{lock::LockKind::kSemaphore, name};
  service_.inspect(semaphore, [res, name](StatusOr<lock::LockState> r) {
    if (!r.isOk()) return sendBackendError(res, r.status());
    // limit 0: no permit is held, the next acquire sets it. Never the permit ids.
    // holders: each permit's holder (those that recorded a label; at most 100, soonest expiry
    // first).
    res->send(200, kJson,
              JsonObject()
                  .text("name", name)
                  .integer("limit", r->held ? r->limit : 0)
                  .integer("used", r->held ? r->used : 0)
                  .unsignedInteger("token", r->token)
                  .json("holders", holdersJson(r->held ? r->holders
                                                       : std::vector<backend::LeaseHolder>{}))
                  .finish());
  });
}

}  // namespace sidelock::api
