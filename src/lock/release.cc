// LockService, release and what follows it: the hand-off to the next waiter in the same round
// trip, lost-lease answers, extend, inspect, force release, and the lease listings.
#include <algorithm>
#include <utility>

#include "common/log.h"
#include "lock/kinds/kind_policy.h"
#include "lock/lock_service_impl.h"

namespace sidelock::lock {
namespace {

/// Counts a refused release or extend under its result label (lease_lost, not_owner, not_held).
template <typename RefusedStatus>
void countRefusal(RefusedStatus status, prometheus::Counter& lease_lost,
                  prometheus::Counter& not_owner, prometheus::Counter& not_held) {
  if (status == RefusedStatus::kLeaseLost) return lease_lost.Increment();
  (status == RefusedStatus::kNotOwner ? not_owner : not_held).Increment();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Release, extend, inspect

void LockService::Impl::release(const LockId& lock, std::string_view owner,
                                std::function<void(StatusOr<ReleaseStatus>)> done,
                                ReleaseMode mode) {
  LockId n = lock;
  std::string o(owner);
  if (Lease* lease = leases_.find(lock, owner)) {
    // Renewal ends before the release is even sent, so none can run after it is answered. (A
    // re-entered lease gives back one hold and stays held: its renewal goes on.) Either way the
    // release waits for a renewal in flight: our count of holds may be behind the backend's.
    if (lease->holds <= 1) stopRenewal(*lease);
    if (lease->renew_in_flight) {
      // Sequenced: the renewal's answer comes first, then the release goes out.
      lease->after_renewal.push_back([this, n, o, done = std::move(done), mode]() mutable {
        sendRelease(std::move(n), std::move(o), std::move(done), true, mode);
      });
      return;
    }
  }
  sendRelease(std::move(n), std::move(o), std::move(done), true, mode);
}

void LockService::Impl::releaseUnhealthy(const LockId& lock, std::string_view owner,
                                         LockService::UnhealthyEnd how) {
  Lease* lease = leases_.find(lock, owner);
  // A release already under way (the client's own, or an earlier unhealthy one) ends the lease:
  // its holder hears that answer, and the lease is not remembered as lost.
  if (lease == nullptr || lease->releasing || lease->unhealthy) return;
  lease->unhealthy = true;
  SL_LOG(kWarn, "lease.unhealthy", {"name", lock.display()}, {"owner", ownerDigest(owner)},
         {"token", static_cast<unsigned long long>(lease->token)});
  // The holder hears kLost, not kReleased: it did not ask for this. The release's own bookkeeping
  // forgets the lease; it is remembered as lost after, so its owner's release answers lease_lost.
  std::function<void(LeaseEvent)> on_event = std::move(lease->on_event);
  lease->on_event = nullptr;
  if (lease->stream && how == LockService::UnhealthyEnd::kRunOut) {
    // A holder that listens may have a process working under the lease (sidelock run's CMD): it
    // hears kLost now and stops it before the lease's validity ends (its kill deadline counts
    // from the last renewal it heard). Released now, the lock would go to the next holder
    // while that process still runs. So renewals stop and the lease runs out within one TTL;
    // the expiry wakes the waiters (after the lease's lock-delay, if it has one).
    lease->renewing = false;
    lease->renew_timer.reset();
    metrics_.leases_released_unhealthy.Increment();
    if (on_event) deliver([on_event = std::move(on_event)] { on_event(LeaseEvent::kLost); });
    return;
  }
  // Renewal stops whatever the holds: a re-entered lease gives back one hold in the backend and
  // the rest run out with the TTL, never renewed for an unhealthy app.
  lease->holds = 1;
  const bool delayed = lease->lock_delay;
  // Involuntary: the app may still be working, so the lease's lock-delay applies (README
  // "Lock-delay"), and the lock is not handed on.
  release(
      lock, owner,
      [this, lock, o = std::string(owner), delayed,
       on_event = std::move(on_event)](StatusOr<ReleaseStatus> released) {
        // Counted once the backend gave the lease (or its hold) back, not when asked.
        if (released.isOk() &&
            (*released == ReleaseStatus::kReleased || *released == ReleaseStatus::kHoldReleased)) {
          metrics_.leases_released_unhealthy.Increment();
        }
        if (delayed && released.isOk() && *released == ReleaseStatus::kReleased) {
          metrics_.lock_delays_unhealthy.Increment();
        }
        lost_.remember(lock, o, scheduler_.nowUs());
        if (on_event) on_event(LeaseEvent::kLost);
      },
      ReleaseMode::kInvoluntary);
}

void LockService::Impl::sendRelease(LockId lock, std::string owner,
                                    std::function<void(StatusOr<ReleaseStatus>)> done,
                                    bool client_request, ReleaseMode mode) {
  // An involuntary release is never handed on: its lock-delay keeps the next owner out.
  if (client_request && mode == ReleaseMode::kClean && !stopping_ && backend_.canHandOff() &&
      policyOf(lock.kind).hands_off) {
    if (Waiter* next = handOffCandidate(lock)) {
      sendReleaseWithHandOff(std::move(lock), std::move(owner), *next, std::move(done));
      return;
    }
  }
  backend::Operation op = backend::Operation::release(lock.name, owner);
  op.involuntary = mode == ReleaseMode::kInvoluntary;
  if (const Lease* held = leases_.find(lock, owner)) op.lease_may_delay = held->lock_delay;
  runOnBackend(lock, op,
               guarded([in_flight = ops_.hold(), this, lock, owner, done = std::move(done),
                        client_request](StatusOr<backend::Outcome> reply) mutable {
                 const InFlight settled = std::move(in_flight);
                 onReleaseReply(lock, owner, std::move(reply), std::move(done), client_request,
                                /*wake=*/true);
               }));
}

Waiter* LockService::Impl::handOffCandidate(const LockId& lock) {
  WaiterQueue* q = queues_.find(lock);
  if (q == nullptr || q->fifo.empty() || q->attempt_in_flight) return nullptr;
  Waiter* head = q->fifo.front();
  return head->abandoned ? nullptr : head;
}

// The release's answer is also the next waiter's grant: it goes out as soon as Redis answers,
// instead of after a second round trip (release, wake-up, acquire). To the waiter this is its
// attempt: fairness, fencing and metrics follow the acquire path.
void LockService::Impl::sendReleaseWithHandOff(LockId lock, std::string owner, Waiter& next,
                                               std::function<void(StatusOr<ReleaseStatus>)> done) {
  WaiterQueue* q = queues_.find(lock);
  q->retry_timer.reset();
  q->attempt_in_flight = true;
  next.attempting = true;
  // Two calls in flight until they are settled: the release (until this reply is handled) and the
  // waiter's attempt (until onAttemptReply has handled its part).
  InFlight release_hold = ops_.hold();
  InFlight attempt_hold = ops_.hold();
  backend::Operation hand_off =
      backend::Operation::handOff(lock.name, owner, next.options.owner, next.options.ttl_ms);
  hand_off.holder = next.options.holder;  // recorded for the next owner
  hand_off.lock_delay_ms = next.options.lock_delay_ms;
  if (const Lease* held = leases_.find(lock, owner)) hand_off.lease_may_delay = held->lock_delay;
  runOnBackend(
      lock, hand_off,
      guarded([this, lock, owner, id = next.id, next_owner = next.options.owner,
               next_owner_drawn = next.owner_drawn, done = std::move(done),
               release_hold = std::move(release_hold),
               attempt_hold = std::move(attempt_hold)](StatusOr<backend::Outcome> reply) mutable {
        const InFlight settled = std::move(release_hold);
        // kOk released our lease; a token means the lock went on to the waiter (a hand-off
        // whose grant had to be taken back answers kOk without one).
        const bool handed_on = reply.isOk() && reply->ok() && reply->token != 0;
        // The old lease leaves the table before the new one enters it (keyed by
        // lock). Handed on, the reply's holds are the next owner's: ours are all gone.
        StatusOr<backend::Outcome> released = reply;
        if (handed_on) released->holds = 0;
        onReleaseReply(lock, owner, std::move(released), std::move(done), true,
                       /*wake=*/false);
        if (handed_on) {
          // A hand-off removes no writer's mark (an acquire does): the writer that got
          // in withdraws its own, or readers would wait for it after its release.
          const WaiterQueue* queue = queues_.find(lock);
          auto next_waiter = waiters_.find(id);
          if (queue != nullptr && queue->writers_marked && next_waiter != waiters_.end()) {
            withdrawFromBackend(*next_waiter->second, queue);
          }
          onAttemptReply(id, reply, std::move(attempt_hold), /*handed_off=*/true);
        } else if (!reply.isOk()) {
          // No answer (timeout, lost link): the script may still have run. A drawn owner's
          // waiter gives that grant back itself, as after any unanswered attempt (unanswered.cc:
          // before its next attempt, or retried once it is done). For the caller's owner id,
          // give it back once here (compare-and-delete: harmless if it never happened; the
          // lock was held by us, so that owner held nothing of it). Then the waiter's own error
          // handling decides, as for a failed acquire.
          if (!next_owner_drawn) releaseOrphan(lock, next_owner);
          onAttemptReply(id, reply.status(), std::move(attempt_hold));
        } else {
          // Nothing was handed on: to the waiter this was a busy attempt; it retries with
          // its backoff (a lock found not held is tried again at the shortest one).
          backend::Outcome busy;
          busy.code = backend::OutcomeCode::kBusy;
          // Still held: by another owner, or by us with holds left.
          busy.holder_ttl_ms = reply->ok() ? reply->validity_ms : reply->holder_ttl_ms;
          onAttemptReply(id, busy, std::move(attempt_hold));
        }
      }));
}

void LockService::Impl::onReleaseReply(const LockId& lock, const std::string& owner,
                                       StatusOr<backend::Outcome> reply,
                                       std::function<void(StatusOr<ReleaseStatus>)> done,
                                       bool client_request, bool wake) {
  StatusOr<ReleaseStatus> result = ReleaseStatus::kNotHeld;
  if (!reply.isOk()) {
    // The lease (if ours) keeps its stopped renewal and simply expires.
    if (client_request) metrics_.release_error.Increment();
    if (auto suppressed = release_failed_log_.admit(
            scheduler_.nowMs(), std::to_string(static_cast<int>(reply.status().code())))) {
      SL_LOG(
          kWarn, "lock.release_failed", {"name", lock.display()},
          {"error", reply.status().toString()},
          {"suppressed", static_cast<unsigned long long>(*suppressed)},
          {"suppressed_window_s", static_cast<long long>(release_failed_log_.windowMs() / 1000)});
    }
    result = reply.status();
  } else if (reply->ok() && reply->holds > 0) {
    // A re-entered lease gave back one hold and stays held.
    if (Lease* lease = leases_.find(lock, owner)) {
      lease->holds = clampHolds(reply->holds);
      if (!stopping_ && lease->releasing && !lease->unhealthy && lease->after_renewal.empty()) {
        // Our count said this was the last hold (another sidecar took one for this owner):
        // the lease lives on, not being released, and so does its renewal.
        lease->releasing = false;
        if (lease->auto_renew) {
          lease->renewing = true;
          scheduleRenewal(*lease,
                          renewIntervalMs(*lease, ceilMs(lease->expiry_us - scheduler_.nowUs())));
        }
      }
    }
    if (client_request) metrics_.release_released.Increment();
    result = ReleaseStatus::kHoldReleased;
  } else if (reply->ok()) {
    if (Lease* lease = leases_.find(lock, owner)) endReleasedLease(*lease);
    lost_.forget(lock, owner);
    if (client_request) metrics_.release_released.Increment();
    result = ReleaseStatus::kReleased;
    if (wake) wakeAfterRelease(lock, *reply);
  } else {
    const bool not_owner = reply->code == backend::OutcomeCode::kNotOwner;
    if (refusedOwnLease(leases_.find(lock, owner), lock, owner,
                        not_owner ? "release found another owner" : "release found no lease",
                        wake)) {
      result = ReleaseStatus::kLeaseLost;
    } else {
      result = not_owner ? ReleaseStatus::kNotOwner : ReleaseStatus::kNotHeld;
    }
    if (client_request) {
      countRefusal(*result, metrics_.release_lease_lost, metrics_.release_not_owner,
                   metrics_.release_not_held);
    }
  }
  if (done) {
    deliver([done = std::move(done), result = std::move(result)]() mutable {
      done(std::move(result));
    });
  }
}

bool LockService::Impl::refusedOwnLease(Lease* lease, const LockId& lock,
                                        const std::string& owner, const char* reason,
                                        bool wake) {
  if (lease != nullptr) {
    // We granted it and believed it held: it vanished or was taken behind our back. The holder
    // (its stream) learns now, not at its next renewal.
    markLost(*lease, reason, /*by_renewal=*/false, wake);
    return true;
  }
  return lost_.contains(lock, owner, scheduler_.nowUs());
}

void LockService::Impl::extend(const LockId& lock, std::string_view owner, int64_t ttl_ms,
                               std::function<void(StatusOr<ExtendResult>)> done) {
  const Lease* held = leases_.find(lock, owner);
  const uint64_t lease_id = held != nullptr ? held->id : 0;
  LockId n = lock;
  std::string o(owner);
  backend::Operation op = backend::Operation::extend(lock.name, owner, ttl_ms);
  if (held != nullptr) op.lease_may_delay = held->lock_delay;
  runOnBackend(
      lock, op,
      guarded([in_flight = ops_.hold(), this, n = std::move(n), o = std::move(o), lease_id, ttl_ms,
               done = std::move(done)](StatusOr<backend::Outcome> reply) mutable {
        const InFlight settled = std::move(in_flight);
        StatusOr<ExtendResult> result = ExtendResult{};
        Lease* lease = leases_.find(n, o);
        if (lease != nullptr && lease->id != lease_id) lease = nullptr;  // a different grant
        if (!reply.isOk()) {
          metrics_.extend_error.Increment();
          result = reply.status();
        } else if (reply->ok()) {
          metrics_.extend_extended.Increment();
          if (lease != nullptr) {
            // The client chose a new TTL: the watchdog (if any) renews with it from now on.
            lease->ttl_ms = ttl_ms;
            lease->expiry_us = scheduler_.nowUs() + reply->validity_ms * 1000;
            armExpiry(*lease);
          }
          lost_.forget(n, o);
          result = ExtendResult{ExtendStatus::kExtended, reply->validity_ms};
        } else {
          const bool not_owner = reply->code == backend::OutcomeCode::kNotOwner;
          ExtendStatus status = not_owner ? ExtendStatus::kNotOwner : ExtendStatus::kNotHeld;
          if (refusedOwnLease(lease, n, o,
                              not_owner ? "extend found another owner" : "extend found no lease")) {
            status = ExtendStatus::kLeaseLost;
          }
          countRefusal(status, metrics_.extend_lease_lost, metrics_.extend_not_owner,
                       metrics_.extend_not_held);
          result = ExtendResult{status, 0};
        }
        if (done) {
          deliver([done = std::move(done), result = std::move(result)]() mutable {
            done(std::move(result));
          });
        }
      }));
}

void LockService::Impl::proclaim(const LockId& lock, std::string_view owner,
                                 std::string_view value,
                                 std::function<void(StatusOr<ProclaimResult>)> done) {
  runOnBackend(
      lock, backend::Operation::proclaim(lock.name, owner, value),
      guarded([in_flight = ops_.hold(), this, n = lock, o = std::string(owner),
               done = std::move(done)](StatusOr<backend::Outcome> reply) mutable {
        const InFlight settled = std::move(in_flight);
        StatusOr<ProclaimResult> result = ProclaimResult{};
        if (!reply.isOk()) {
          result = reply.status();
        } else if (reply->ok()) {
          result = ProclaimResult{ProclaimStatus::kProclaimed, reply->token, reply->validity_ms};
        } else {
          const bool not_owner = reply->code == backend::OutcomeCode::kNotOwner;
          ProclaimStatus status = not_owner ? ProclaimStatus::kNotOwner : ProclaimStatus::kNotHeld;
          if (refusedOwnLease(leases_.find(n, o), n, o,
                              not_owner ? "proclaim found another owner"
                                        : "proclaim found no lease")) {
            status = ProclaimStatus::kLeaseLost;
          }
          result = ProclaimResult{status, 0, 0};
        }
        if (done) {
          deliver([done = std::move(done), result = std::move(result)]() mutable {
            done(std::move(result));
          });
        }
      }));
}

void LockService::Impl::inspect(const LockId& lock, std::function<void(StatusOr<LockState>)> done) {
  runOnBackend(lock, backend::Operation::inspect(lock.name),
               guarded([in_flight = ops_.hold(), this,
                        done = std::move(done)](StatusOr<backend::Outcome> reply) mutable {
                 const InFlight settled = std::move(in_flight);
                 StatusOr<LockState> state =
                     reply.isOk()
                         ? StatusOr<LockState>(LockState{
                               reply->ok(), reply->ok() ? reply->validity_ms : 0, reply->token,
                               reply->used, reply->limit, std::move(reply->leader),
                               std::move(reply->holder), reply->since_ms,
                               std::move(reply->holders)})
                         : StatusOr<LockState>(reply.status());
                 if (done) {
                   deliver([done = std::move(done), state = std::move(state)]() mutable {
                     done(std::move(state));
                   });
                 }
               }));
}

void LockService::Impl::forceRelease(std::string_view name,
                                     std::function<void(StatusOr<ForcedRelease>)> done) {
  runOnBackend(
      LockId{LockKind::kMutex, std::string(name)}, backend::Operation::forceRelease(name),
      guarded([in_flight = ops_.hold(), this, n = std::string(name),
               done = std::move(done)](StatusOr<backend::Outcome> reply) mutable {
        const InFlight settled = std::move(in_flight);
        StatusOr<ForcedRelease> result =
            reply.isOk() ? StatusOr<ForcedRelease>(ForcedRelease{reply->ok(), reply->token})
                         : StatusOr<ForcedRelease>(reply.status());
        if (reply.isOk() && reply->ok()) {
          metrics_.forced_releases.Increment();
          // validity_ms: the lock-delay the freed lease's backend started (0: none).
          if (reply->validity_ms > 0) metrics_.lock_delays_forced.Increment();
          // Our own holder learns it now rather than at its next renewal; a lease already
          // being released by its holder is left to that release (it will find the key
          // gone).
          // Fair holders and readers hold the lock's key too: a force release frees them all.
          // (Semaphores have keys of their own, and no force release.)
          LockId holder_lock{LockKind::kMutex, n};
          for (LockKind kind : kMutexLeaseSharers) {
            holder_lock.kind = kind;
            std::vector<std::string> owners;
            for (const Lease* l = leases_.find(holder_lock); l != nullptr;
                 l = l->next_same_name.get()) {
              if (!l->releasing) owners.push_back(l->owner);
            }
            for (const std::string& owner : owners) {
              if (Lease* lease = leases_.find(holder_lock, owner)) {
                markLost(*lease, "force-released by an operator", /*by_renewal=*/false,
                         /*wake=*/false);
              }
            }
          }
          wakeLockQueues(LockId{LockKind::kMutex, n}, /*notified=*/true);
        }
        if (done) {
          deliver([done = std::move(done), result = std::move(result)]() mutable {
            done(std::move(result));
          });
        }
      }));
}

int64_t LockService::Impl::holds(const LockId& lock, std::string_view owner) const {
  const Lease* lease = leases_.find(lock, owner);
  return lease != nullptr ? lease->holds : 0;
}

int64_t LockService::Impl::validityLeftMs(const LockId& lock, std::string_view owner) const {
  const Lease* lease = leases_.find(lock, owner);
  if (lease == nullptr) return -1;
  return std::max<int64_t>(0, (lease->expiry_us - scheduler_.nowUs()) / 1000);
}

std::vector<LeaseInfo> LockService::Impl::leases() const {
  const int64_t now = scheduler_.nowUs();
  std::vector<LeaseInfo> out;
  out.reserve(leases_.size());
  leases_.forEach([&](const Lease& l) {
    LeaseInfo info;
    info.lock = l.lock;
    info.token = l.token;
    info.age_ms = (now - l.granted_us) / 1000;
    info.ttl_remaining_ms = std::max<int64_t>(0, ceilMs(l.expiry_us - now));
    info.auto_renew = l.auto_renew;
    info.stream = l.stream;
    out.push_back(std::move(info));
  });
  // In the order of the printed form GET /v1/locks shows (a listing, not a hot path).
  std::sort(out.begin(), out.end(), [](const LeaseInfo& a, const LeaseInfo& b) {
    return a.lock.display() < b.lock.display();
  });
  return out;
}

std::vector<WaiterCount> LockService::Impl::waiterCounts() const { return queues_.counts(); }

}  // namespace sidelock::lock
