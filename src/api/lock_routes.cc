// The lock routes (/v1/locks/{name}/acquire, release, extend, GET /v1/locks/{name}) and the
// admin force release: mutexes, reentrant holds, readers and writers, fair locks; plain and
// stream holds; safe retries by request_id.
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
#include "lock/kinds/kind_policy.h"

namespace sidelock::api {
namespace {

using nlohmann::json;

/// The grant's fields, after `event` when it is a stream's first event.
std::string grantAnswer(const lock::Grant& g, std::string_view event = {}) {
  JsonObject answer;
  if (!event.empty()) answer.text("event", event);
  const lock::KindPolicy& policy = lock::policyOf(g.lock.kind);
  answer.text("name", g.lock.name)
      .text(policy.owner_field, g.owner)  // a semaphore's: "permit"
      .unsignedInteger("token", g.token)
      .integer("ttl_ms", g.ttl_ms);
  if (g.holds > 0) answer.integer("holds", g.holds);  // reentrant acquires only
  if (const lock::AnswerTag& tag = policy.answer_tag; !tag.key.empty()) {
    if (tag.text.empty()) {
      answer.boolean(tag.key, true);
    } else {
      answer.text(tag.key, tag.text);
    }
  }
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

}  // namespace

/// The stream holds stepping down at shutdown (LockApi::stepDownStreamHolds): each holds
/// `stepping` until its lease is given back; `done` runs once they all have, or at the backstop.
struct StepDownGroup {
  explicit StepDownGroup(std::function<void()> on_done) : done(std::move(on_done)) {}
  event::InFlightGate stepping;
  std::function<void()> done;
  event::ScopedTimer backstop;
  void finish() {
    backstop.reset();
    if (done) std::exchange(done, nullptr)();
  }
};

/// State shared by the callbacks of one acquire request.
/// Its callbacks capture nothing but a shared or weak pointer to it: 16 bytes, which
/// std::function stores without a heap allocation.
struct AcquireCall {
  LockApi* api = nullptr;
  event::Scheduler* scheduler = nullptr;
  lock::LockService* service = nullptr;
  const config::LocksConfig* locks = nullptr;  // the limits a 429 names
  metrics::Metrics* metrics = nullptr;
  lock::AcquireTicket ticket;
  http::ResponderPtr responder;
  bool granted = false;
  // Stream holds only: the lease to release when the client leaves.
  lock::LockId lock;
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
  std::shared_ptr<HealthHold> health;  // a health-bound hold (health_binding.h)
  health::Prober* health_prober = nullptr;
  // Shutdown's step-down (stream holds): the group to leave once the lease is given back, and
  // the deadline that releases it if the client has not closed the stream by then.
  event::InFlightGate::Holder step_down;
  event::ScopedTimer step_down_deadline;

  /// The stream hold has ended (released, lost, run out): a step-down in progress is over.
  void leaveStepDown() {
    step_down_deadline.reset();
    step_down.release();
  }

  /// Answers the request and every retry of it with an answer that is not remembered.
  void answerAll(const Answer& answer) { claim.answerAll(responder, answer); }
};

namespace {

/// Shutdown's step-down of one stream hold (LockApi::stepDownStreamHolds): the client reads
/// stepping_down and has `step_down_ms` to stop what works under the lock and close the stream
/// (which releases it, as ever); the lease stays renewed until then. At the deadline the sidecar
/// releases it itself.
void stepDownStreamHold(const std::shared_ptr<AcquireCall>& c,
                        const std::shared_ptr<StepDownGroup>& group, int64_t step_down_ms,
                        bool release_at_deadline) {
  if (!c->granted || !c->stream || c->finished || c->step_down.holds()) return;
  c->step_down = group->stepping.hold();
  SL_LOG(kInfo, "lock.step_down_on_shutdown", {"name", c->lock.display()},
         {"release_in_ms", static_cast<long long>(step_down_ms)});
  c->responder->writeChunk(
      JsonObject().text("event", "stepping_down").integer("release_in_ms", step_down_ms).finish());
  std::weak_ptr<AcquireCall> weak = c;
  c->step_down_deadline.start(*c->scheduler, step_down_ms, [weak, release_at_deadline] {
    auto live = weak.lock();
    if (!live || live->finished) return;
    SL_LOG(kInfo, "lock.step_down_deadline", {"name", live->lock.display()},
           {"release", release_at_deadline});
    // Not released (shutdown.release_held false): the lock service's shutdown stops renewing,
    // and the lease runs out after the client's kill deadline.
    if (!release_at_deadline) return live->leaveStepDown();
    // Released as at shutdown. The holder hears `released` and the stream ends before the
    // release goes out, not when it completes: the nodes that answer first free the lock for a
    // waiter elsewhere while a stalled one (Redlock) is still waited for, and the holder must
    // have been told by then.
    live->finished = true;
    live->responder->writeChunk(JsonObject().text("event", "released").finish());
    live->responder->endStream();
    live->service->release(live->lock, live->owner,
                           [live](StatusOr<lock::ReleaseStatus>) { live->leaveStepDown(); });
  });
}

/// A retried acquire (request_id) of a client that chose its owner id, answered busy: if the
/// lease is the client's own (its first attempt was granted, but the answer was lost or the
/// sidecar restarted since), it is granted again in place: TTL set anew, same token.
void reclaimOwnGrant(const std::shared_ptr<AcquireCall>& call, const lock::LockId& lock,
                     int64_t retry_after_ms) {
  call->service->extend(
      lock, call->given_owner, call->ttl_ms,
      [call, lock, retry_after_ms](StatusOr<lock::ExtendResult> extended) {
        if (!extended.isOk() || extended->status != lock::ExtendStatus::kExtended) {
          return call->answerAll(lockedAnswer(lock::BusyReason::kHeld, lock.kind, retry_after_ms));
        }
        const int64_t ttl_ms = extended->ttl_ms;
        call->service->inspect(lock, [call, lock, ttl_ms](StatusOr<lock::LockState> state) {
          if (!state.isOk()) return call->answerAll(backendErrorAnswer(state.status()));
          const Answer answer{200,
                              grantAnswer({lock, call->given_owner, state->token, ttl_ms}),
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
                     [service = call->service, lock = grant.lock, owner = grant.owner] {
                       service->release(lock, owner, [](StatusOr<lock::ReleaseStatus>) {});
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
  body.parse(req, {BodyField::kTtlMs, BodyField::kWaitMs, BodyField::kOwner, BodyField::kAutoRenew,
                   BodyField::kMaxHoldMs, BodyField::kHold, BodyField::kRequestId,
                   BodyField::kReentrant, BodyField::kMode, BodyField::kFair, BodyField::kHealth,
                   BodyField::kHolder, BodyField::kLockDelayMs});
  lock::AcquireOptions opts;
  bool shared = false;
  bool fair = false;
  opts.lock.name = std::string(req.param("name"));
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
        body.readBool(BodyField::kFair, fair) && readHolder(body, identity_, opts.holder) &&
        body.readInt(BodyField::kLockDelayMs, 0, locks_.max_lock_delay_ms, opts.lock_delay_ms);
  }
  checkHold(body, hold);
  if (body.ok() && shared && opts.lock_delay_ms > 0) {
    // Readers share the lease: a reader's loss leaves the others holding it (no delay to run).
    body.setError("lock_delay_ms applies to exclusive locks only (mutex, fair, reentrant)");
  }
  if (body.ok() && shared && opts.reentrant) {
    body.setError("reentrant applies to exclusive locks only (a reader holds one shared lease)");
  }
  if (body.ok() && fair && (shared || opts.reentrant)) {
    body.setError("fair applies to exclusive, non-reentrant locks");
  }
  if (shared) opts.lock.kind = lock::LockKind::kShared;
  if (fair) opts.lock.kind = lock::LockKind::kFair;
  if (body.ok() && hold == "stream" && opts.reentrant) {
    // A stream is one hold bound to one connection; a re-entry has no stream of its own.
    body.setError("reentrant cannot be used with hold: stream");
  }
  if (body.ok() && hold == "stream" && !request_id.empty()) {
    body.setError("request_id cannot be used with hold: stream (the stream is the lease's answer)");
  }
  std::optional<health::HealthSpec> health_spec;
  readHealth(body, health_spec);
  if (body.ok() && health_spec) {
    // Checked before applyHold: a stream hold renews (auto_renew) by itself.
    if (!opts.auto_renew && hold != "stream") {
      body.setError("health needs auto_renew: true or hold: \"stream\" (a lease nobody renews "
                    "ends by itself)");
    } else if (opts.reentrant || !request_id.empty()) {
      body.setError("health cannot be used with reentrant or request_id");
    } else if (health_prober_ == nullptr) {
      body.setError("health probes are not available on this sidecar");
    }
  }
  if (!body.ok()) return sendBodyError(res, body);
  if (health_spec) {
    if (std::optional<Answer> refused = healthRefusal(*health_prober_, *health_spec)) {
      return sendAnswer(res, *refused);
    }
  }
  // Filed under the lock's printed form: a reader's retry never meets a writer's answer.
  const std::string retry_scope = retryScope(opts.lock.display(), owner, req.principal.get());
  opts.owner = owner;
  if (draining_) {
    sendError(res, 503, "shutting_down", "the sidecar is shutting down");
    return;
  }
  applyHold(body, hold, locks_.max_hold_ms_limit, opts);
  if (health_spec) {
    auto health = std::make_shared<HealthHold>();
    health->spec = std::move(*health_spec);
    health->holder_listens = opts.stream;  // a stream hold (sidelock run --health)
    return startAcquire(std::move(opts), {}, IdempotencyCache::Id{}, std::move(res),
                        std::move(health));
  }
  beginAcquire(std::move(opts), replayKey(kAcquireRoute, retry_scope, request_id),
               body.fingerprint(), std::move(res));
}

IdempotencyCache::Lookup LockApi::claimRequest(const std::string& replay_key, uint64_t fingerprint,
                                               const http::ResponderPtr& res) {
  if (replay_key.empty()) return {};
  const IdempotencyCache::Lookup found =
      replies_->begin(replay_key, res, monotonicUs(), fingerprint);
  if (found.kind == IdempotencyCache::Lookup::Kind::kRun) scheduleSweep();
  if (found.kind == IdempotencyCache::Lookup::Kind::kMismatch) {
    sendError(res, 422, "request_id_reused",
              "this request_id was used for a different request (other fields, same lock and "
              "owner): a retry must repeat the first request; use a new request_id for a new one");
  }
  return found;
}

void LockApi::beginAcquire(lock::AcquireOptions opts, std::string replay_key, uint64_t fingerprint,
                           http::ResponderPtr res) {
  const IdempotencyCache::Lookup found = claimRequest(replay_key, fingerprint, res);
  switch (found.kind) {
    case IdempotencyCache::Lookup::Kind::kAttached:
      return;  // answered when the first attempt is (RequestClaim::finish)
    case IdempotencyCache::Lookup::Kind::kMismatch:
      return;  // answered 422
    case IdempotencyCache::Lookup::Kind::kReplay:
      return retryGrant(std::move(opts), std::move(replay_key), fingerprint, found.id,
                        found.answer->owner, found.answer->token, std::move(res));
    case IdempotencyCache::Lookup::Kind::kRun:
    case IdempotencyCache::Lookup::Kind::kOff:
      break;
  }
  startAcquire(std::move(opts), std::move(replay_key), found.id, std::move(res));
}

// A retry of an acquire that was granted: the same grant, if that lease is still its owner's
// (an owner-checked extend proves it and sets the TTL anew; a replayed answer alone could hand
// out a lease that expired or was released since). Otherwise the retry is a new acquire.
void LockApi::retryGrant(lock::AcquireOptions opts, std::string replay_key, uint64_t fingerprint,
                         IdempotencyCache::Id answer_id, std::string owner, uint64_t token,
                         http::ResponderPtr res) {
  const lock::LockId lock = opts.lock;
  const int64_t ttl_ms = opts.ttl_ms;
  service_.extend(
      lock, owner, ttl_ms,
      [this, opts = std::move(opts), replay_key = std::move(replay_key), fingerprint, answer_id,
       owner, token, res = std::move(res)](StatusOr<lock::ExtendResult> r) mutable {
        if (!r.isOk()) return sendBackendError(res, r.status());
        if (r->status == lock::ExtendStatus::kExtended) {
          return res->send(200, kJson, grantAnswer({opts.lock, owner, token, r->ttl_ms}));
        }
        // (Another retry may have claimed the key anew meanwhile: then this one waits for it.)
        replies_->forget(replay_key, answer_id);
        beginAcquire(std::move(opts), std::move(replay_key), fingerprint, std::move(res));
      });
}

void LockApi::startAcquire(lock::AcquireOptions opts, std::string replay_key,
                           IdempotencyCache::Id claim, http::ResponderPtr res,
                           std::shared_ptr<HealthHold> health) {
  auto call = std::make_shared<AcquireCall>();
  call->responder = res;
  call->lock = opts.lock;
  call->stream = opts.stream;

  std::function<void(lock::LeaseEvent)> on_event;
  if (opts.stream) {
    on_event = [call](lock::LeaseEvent e) {
      const bool last = e == lock::LeaseEvent::kLost || e == lock::LeaseEvent::kCapExpired ||
                        e == lock::LeaseEvent::kReleased;
      if (last) call->leaveStepDown();
      if (call->finished) return;
      JsonObject event;
      event.text("event", leaseEventName(e));
      if (e == lock::LeaseEvent::kRenewed) {
        // The validity left now (Redlock: after the round trip and drift), so a holder can stop
        // before the lease could expire even if its sidecar then stops renewing or answering.
        event.integer("ttl_ms",
                      std::max<int64_t>(0, call->service->validityLeftMs(call->lock, call->owner)));
      } else if (e == lock::LeaseEvent::kLost && call->health && call->health->unhealthy) {
        event.text("reason", "unhealthy");
      } else if (e == lock::LeaseEvent::kLost) {
        const char* why = call->service->lossReason();
        event.text("reason",
                   why != nullptr ? why : "the lease expired or is held by another owner");
      } else if (e == lock::LeaseEvent::kCapExpired) {
        event.text("reason",
                   "max_hold_ms reached: renewals stopped at the cap (the capped event) and "
                   "the lease ran out");
        event.boolean("cap_reached", true);
      }
      call->responder->writeChunk(event.finish());
      // These end the lease for good: close the stream so the connection can serve what the
      // client pipelined behind it (a release through the API would otherwise leave it open).
      if (last) {
        call->finished = true;
        call->responder->endStream();
      }
    };
  }

  if (health) on_event = endWatchWithLease(health, std::move(on_event));
  call->health = std::move(health);
  call->health_prober = health_prober_;
  call->api = this;
  call->scheduler = &scheduler_;
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
        if (call->health) {
          if (std::optional<Answer> refused =
                  healthRefusal(*call->health_prober, call->health->spec)) {
            // The limit filled up while this caller waited: give the lease back unseen.
            call->service->release(r.grant.lock, r.grant.owner,
                                   [](StatusOr<lock::ReleaseStatus>) {});
            call->finished = true;
            return call->answerAll(*refused);
          }
          watchHealth(call->health, *call->health_prober, *call->service, r.grant);
        }
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
          call->service->release(r.grant.lock, r.grant.owner, [](StatusOr<lock::ReleaseStatus>) {});
          call->finished = true;
          return;
        }
        // A dropped stream releases its lease through onClientGone.
        out->startStream(200, "application/x-ndjson");
        out->writeChunk(grantAnswer(r.grant, "acquired"));
        call->api->addStreamHold(call);
        return;
      case lock::AcquireStatus::kBusy: {
        call->finished = true;
        // Only a lease this sidecar does not know of (granted before a restart, or by another
        // sidecar): one it holds was granted in this life under another request id (its own
        // answer would have been replayed), e.g. a second thread sharing the owner id, which
        // gets 409 held_by_you rather than the lease (and the TTL it did not ask for).
        if (!call->claim.key.empty() && !call->given_owner.empty() && !call->auto_renew &&
            lock::policyOf(call->lock.kind).grant_readable_back &&
            call->service->holds(call->lock, call->given_owner) == 0) {
          // (A reader's token cannot be read back: the counter moves with every reader.)
          return reclaimOwnGrant(call, call->lock, r.retry_after_ms);
        }
        if (call->semaphore) {
          return call->answerAll(retryLaterAnswer(
              409, "no_permits", "every permit of the semaphore is taken", r.retry_after_ms));
        }
        return call->answerAll(
            lockedAnswer(r.busy_reason, call->lock.kind, r.retry_after_ms, r.holder));
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
      c->service->release(c->lock, c->owner,
                          [c](StatusOr<lock::ReleaseStatus>) { c->leaveStepDown(); });
    }
  });
  // Keep the call alive until the response completes: the responder holds it via onClientGone's
  // weak pointer only, so the done/on_event closures (held by the service) own it.
}

lock::LockId LockApi::leaseOf(std::string_view name, std::string_view owner, bool shared,
                              bool mode_given) const {
  // Without a mode, a reader's lease this sidecar granted is found by its owner id; through
  // another sidecar (or after a restart) a reader says "mode": "shared".
  // (A reader's lease this sidecar saw lost counts too: its release then answers lease_lost.)
  lock::LockId readers{lock::LockKind::kShared, std::string(name)};
  if (shared || (!mode_given &&
                 (service_.holds(readers, owner) > 0 || service_.lostLately(readers, owner)))) {
    return readers;
  }
  // A fair lease is the mutex's lease: any sidecar releases it by name; the one that granted it
  // does so as a fair lock, which ends its own bookkeeping of the lease (and, once it saw the
  // lease lost, answers lease_lost rather than not_held, as for readers).
  lock::LockId fair{lock::LockKind::kFair, std::move(readers.name)};
  if (service_.holds(fair, owner) > 0 || service_.lostLately(fair, owner)) return fair;
  return lock::LockId{lock::LockKind::kMutex, std::move(fair.name)};
}

void LockApi::release(http::Request& req, http::ResponderPtr res) {
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  RequestBody& body = body_;
  body.parse(req, {BodyField::kOwner, BodyField::kRequestId, BodyField::kMode});
  std::string_view owner;
  std::string_view request_id;
  bool shared = false;
  if (body.ok()) {
    readOwner(body, static_cast<size_t>(locks_.max_owner_bytes), true, owner) &&
        readRequestId(body, request_id) && readMode(body, shared);
  }
  if (!body.ok()) return sendBodyError(res, body);
  const lock::LockId lock = leaseOf(req.param("name"), owner, shared, body.has(BodyField::kMode));
  // Filed under the lock's own name: a retry finds the first answer whatever mode it resolves to.
  const std::string retry_scope = retryScope(req.param("name"), owner, req.principal.get());
  answerOnce(
      replayKey(kReleaseRoute, retry_scope, request_id), body.fingerprint(), std::move(res),
      [this, lock, owner = std::string(owner)](const AnswerFn& answer_with) {
        service_.release(
            lock, owner,
            [service = &service_, lock, owner, answer_with](StatusOr<lock::ReleaseStatus> r) {
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
                  if (const int64_t left = service->holds(lock, owner); left > 0) {
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

void LockApi::answerOnce(std::string replay_key, uint64_t fingerprint, http::ResponderPtr res,
                         const std::function<void(AnswerFn)>& run) {
  const IdempotencyCache::Lookup found = claimRequest(replay_key, fingerprint, res);
  if (found.kind == IdempotencyCache::Lookup::Kind::kMismatch) return;  // answered 422
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

void LockApi::listHeld(http::Request& req, http::ResponderPtr res) {
  // Only prefix and limit, each once: checked by the route (adminRoutes, checkQuery).
  lock::HeldQuery query;
  query.budget_ms = kListBudgetMs;
  if (queryHas(req.query, "prefix")) {
    if (!queryValue(req.query, "prefix", &query.prefix)) {
      return sendError(res, 400, "bad_request", "prefix: bad percent-encoding");
    }
    // A prefix is the start of a lock name: the same characters ("." alone is a fine start).
    const std::string& p = query.prefix;
    if (!p.empty() && p != "." && p != "..") {
      const std::string why = lockNameProblem(p, static_cast<size_t>(locks_.max_name_bytes));
      if (!why.empty()) return sendError(res, 400, "bad_request", "prefix: " + why);
    }
  }
  int64_t limit = kListDefaultLimit;
  if (queryHas(req.query, "limit")) {
    std::string text;
    const bool digits = queryValue(req.query, "limit", &text) && !text.empty() &&
                        text.size() <= 6 && text.find_first_not_of("0123456789") == std::string::npos;
    const int64_t v = digits ? std::stoll(text) : -1;
    if (v < 1 || v > kListMaxLimit) {
      return sendError(res, 400, "bad_request",
                       "limit: an integer 1.." + std::to_string(kListMaxLimit));
    }
    limit = v;
  }
  query.limit = static_cast<size_t>(limit);
  service_.listHeld(query, [res](StatusOr<lock::HeldListing> r) {
    if (!r.isOk()) return sendBackendError(res, r.status());
    json locks = json::array();
    for (const lock::HeldLock& l : r->locks) {
      locks.push_back(json{{"name", l.name},
                           {"holder", l.holder},
                           {"since_ms", l.since_ms},
                           {"ttl_ms", l.ttl_ms},
                           {"token", l.token}});
    }
    json body = {{"locks", std::move(locks)}, {"truncated", r->truncated}};
    if (r->truncated) body["truncated_reason"] = r->truncated_reason;
    sendJson(res, 200, body);
  });
}

void LockApi::extend(http::Request& req, http::ResponderPtr res) {
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  RequestBody& body = body_;
  body.parse(req, {BodyField::kOwner, BodyField::kTtlMs, BodyField::kMode});
  std::string_view owner;
  int64_t ttl_ms = locks_.default_ttl_ms;
  bool shared = false;
  if (body.ok()) {
    readOwner(body, static_cast<size_t>(locks_.max_owner_bytes), true, owner) &&
        body.readInt(BodyField::kTtlMs, 1, locks_.max_ttl_ms, ttl_ms) && readMode(body, shared);
  }
  if (!body.ok()) return sendBodyError(res, body);
  service_.extend(
      leaseOf(req.param("name"), owner, shared, body.has(BodyField::kMode)), owner, ttl_ms,
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

void LockApi::inspect(http::Request& req, http::ResponderPtr res) {
  if (!checkName(req, res, static_cast<size_t>(locks_.max_name_bytes))) return;
  std::string name(req.param("name"));
  // Asked as the readers' kind: it also tells readers from a writer.
  const lock::LockId readers{lock::LockKind::kShared, name};
  service_.inspect(readers, [res, name](StatusOr<lock::LockState> r) {
    if (!r.isOk()) return sendBackendError(res, r.status());
    // Never the owner id: it is the capability to release.
    JsonObject answer;
    answer.boolean("held", r->held)
        .text("name", name)
        .unsignedInteger("token", r->token)
        .integer("ttl_ms", r->held ? r->ttl_ms : 0);
    if (r->held) answer.text("mode", r->used > 0 ? "shared" : "exclusive");
    if (r->held && r->used > 0) answer.integer("readers", r->used);
    // Who holds it (the label its acquire recorded, from the backend: the same on every
    // sidecar) and since when; absent when the lease recorded none.
    if (r->held && r->used == 0 && !r->holder.empty()) {
      answer.text("holder", r->holder).integer("since_ms", r->since_ms);
    }
    // Readers: each one's holder (those that recorded a label; at most 100, soonest expiry first).
    if (r->held && r->used > 0) answer.json("holders", holdersJson(r->holders));
    res->send(200, kJson, answer.finish());
  });
}

void LockApi::addStreamHold(const std::shared_ptr<AcquireCall>& call) {
  if (stream_holds_.size() >= stream_holds_pruned_at_) {
    std::erase_if(stream_holds_, [](const std::weak_ptr<AcquireCall>& c) { return c.expired(); });
    stream_holds_pruned_at_ = std::max<size_t>(64, stream_holds_.size() * 2);
  }
  stream_holds_.push_back(call);
}

void LockApi::stepDownStreamHolds(int64_t step_down_ms, bool release_at_deadline,
                                  std::function<void()> done) {
  auto group = std::make_shared<StepDownGroup>(std::move(done));
  step_down_ = group;  // alive until done, whatever becomes of the calls
  for (const std::weak_ptr<AcquireCall>& weak : std::exchange(stream_holds_, {})) {
    if (auto c = weak.lock()) {
      stepDownStreamHold(c, group, std::max<int64_t>(0, step_down_ms), release_at_deadline);
    }
  }
  if (group->stepping.idle()) return group->finish();
  group->stepping.onDrained([weak = std::weak_ptr<StepDownGroup>(group)] {
    if (auto g = weak.lock()) g->finish();
  });
  // A release the backend never answers does not hold the shutdown past its step-down.
  group->backstop.start(scheduler_, std::max<int64_t>(0, step_down_ms) + 1000,
                        [weak = std::weak_ptr<StepDownGroup>(group)] {
                          if (auto g = weak.lock()) g->finish();
                        });
}

}  // namespace sidelock::api
