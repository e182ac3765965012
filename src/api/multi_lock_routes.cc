// The multi-lock routes (/v1/multilocks/acquire, release): every name or none, one owner
// (README "Multi-locks"), with safe retries by request_id.
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

using nlohmann::json;

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
    names.push_back(g.lock.name);
    leases.push_back(json{{"name", g.lock.name}, {"token", g.token}, {"ttl_ms", g.ttl_ms}});
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
  for (const lock::Grant& g : grant.grants) names.push_back(g.lock.name);
  const std::string owner = grant.owner;
  forEachName<StatusOr<lock::ExtendResult>>(
      names,
      [&service, owner, ttl_ms](const std::string& name,
                                std::function<void(StatusOr<lock::ExtendResult>)> cb) {
        service.extend(lock::LockId{lock::LockKind::kMutex, name}, owner, ttl_ms, std::move(cb));
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
  for (std::string& name : names) {
    own.grants.push_back({lock::LockId{lock::LockKind::kMutex, name}, own.owner, 0, 0});
  }
  extendGrant(
      *call->service, std::move(own), call->ttl_ms,
      [call, names = std::move(names), busy = std::move(busy)](
          StatusOr<lock::MultiAcquireResult> held, bool extended) {
        if (!held.isOk() || !extended) return call->claim.answerAll(call->responder, busy);
        lock::LockService* service = call->service;
        forEachName<StatusOr<lock::LockState>>(
            names,
            [service](const std::string& name, std::function<void(StatusOr<lock::LockState>)> cb) {
              service->inspect(lock::LockId{lock::LockKind::kMutex, name}, std::move(cb));
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
              BodyField::kAutoRenew, BodyField::kMaxHoldMs, BodyField::kRequestId,
              BodyField::kHolder});
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
        readRequestId(body, request_id) && readHolder(body, identity_, opts.holder);
  }
  if (!readLockNames(body, req, res, static_cast<size_t>(locks_.max_name_bytes), opts.names)) {
    return;
  }
  if (draining_) return sendError(res, 503, "shutting_down", "the sidecar is shutting down");
  opts.owner = owner;
  const std::string retry_scope = multiRetryScope(opts.names, owner, req.principal.get());
  beginMultiAcquire(std::move(opts), replayKey(kMultiAcquireRoute, retry_scope, request_id),
                    body.fingerprint(), std::move(res));
}

void LockApi::beginMultiAcquire(lock::MultiAcquireOptions opts, std::string replay_key,
                                uint64_t fingerprint, http::ResponderPtr res) {
  const IdempotencyCache::Lookup found = claimRequest(replay_key, fingerprint, res);
  if (found.kind == IdempotencyCache::Lookup::Kind::kAttached) return;  // answered with it
  if (found.kind == IdempotencyCache::Lookup::Kind::kMismatch) return;  // answered 422
  if (found.kind == IdempotencyCache::Lookup::Kind::kReplay) {
    return retryMultiGrant(std::move(opts), std::move(replay_key), fingerprint, found.id,
                           found.answer->owner, found.answer->body, std::move(res));
  }
  startMultiAcquire(std::move(opts), std::move(replay_key), found.id, std::move(res));
}

// A retry of a multi-lock that was granted: the same grant (owner and tokens), if every lease is
// still its owner's (owner-checked extends prove it and set the TTLs anew), as retryGrant does
// for one lock. If any is gone, what is left of the grant is given back (all or none) and the
// retry is a new acquire.
void LockApi::retryMultiGrant(lock::MultiAcquireOptions opts, std::string replay_key,
                              uint64_t fingerprint, IdempotencyCache::Id answer_id,
                              std::string owner, std::string answer, http::ResponderPtr res) {
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
          {lock::LockId{lock::LockKind::kMutex, lease["name"].get<std::string>()}, owner,
           lease["token"].get<uint64_t>(), 0});
    }
  }
  if (!SL_INVARIANT(readable, "api.remembered_multi_grant_unreadable")) {
    replies_->forget(replay_key, answer_id);
    return beginMultiAcquire(std::move(opts), std::move(replay_key), fingerprint, std::move(res));
  }
  const int64_t ttl_ms = opts.ttl_ms;
  extendGrant(
      service_, std::move(remembered_grant), ttl_ms,
      [this, opts = std::move(opts), replay_key = std::move(replay_key), fingerprint, answer_id,
       res = std::move(res)](StatusOr<lock::MultiAcquireResult> grant, bool extended) mutable {
        if (!grant.isOk()) return sendBackendError(res, grant.status());
        if (extended) return res->send(200, kJson, multiGrantAnswer(*grant));
        // A lease is gone: what is left is given back, and the retry acquires anew.
        // (Another retry may have claimed the key anew meanwhile: then this one waits.)
        replies_->forget(replay_key, answer_id);
        std::vector<std::string> names = opts.names;
        service_.releaseAll(
            std::move(names), grant->owner,
            [this, opts = std::move(opts), replay_key = std::move(replay_key), fingerprint,
             res = std::move(res)](std::vector<StatusOr<lock::ReleaseStatus>>) mutable {
              beginMultiAcquire(std::move(opts), std::move(replay_key), fingerprint,
                                std::move(res));
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
        for (const lock::Grant& g : r.grants) names.push_back(g.lock.name);
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
              return call->service->holds(lock::LockId{lock::LockKind::kMutex, name},
                                          call->given_owner) > 0;
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
  answerOnce(
      replayKey(kMultiReleaseRoute, retry_scope, request_id), body.fingerprint(), std::move(res),
      [this, names = std::move(names), owner = std::string(owner)](const AnswerFn& answer_with) {
        service_.releaseAll(
            names, owner, [names, answer_with](std::vector<StatusOr<lock::ReleaseStatus>> results) {
              // Every name is released that can be; the answer names those that were not.
              std::string not_owner;
              std::string not_held;
              size_t released = 0;
              const Status* error = nullptr;
              for (size_t i = 0; i < results.size(); ++i) {
                if (!results[i].isOk()) {
                  if (error == nullptr) error = &results[i].status();
                  continue;
                }
                switch (*results[i]) {
                  case lock::ReleaseStatus::kReleased:
                  case lock::ReleaseStatus::kHoldReleased:
                    ++released;
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
              const std::string others =
                  released > 0 ? " (the other names were released)" : " (none was released)";
              if (!not_owner.empty()) {
                return answer_with(
                    errorAnswer(409, "not_owner",
                                "held by another owner: " + not_owner +
                                    (not_held.empty() ? "" : "; not held: " + not_held) + others),
                    true);
              }
              if (!not_held.empty()) {
                return answer_with(
                    errorAnswer(404, "not_held",
                                "not held (expired, released or lost): " + not_held + others),
                    true);
              }
              answer_with(Answer{200, JsonObject().boolean("released", true).finish(), {}, {}, 0},
                          true);
            });
      });
}

}  // namespace sidelock::api
