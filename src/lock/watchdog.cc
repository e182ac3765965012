// The lease lifecycle of LockService: grant bookkeeping, the watchdog that renews auto_renew and
// stream leases, local expiry, and lost-lease detection.
//
// Invariants:
//  - a renewal is sent only while `renewing && !releasing` and only inside the lease's validity;
//  - at most one renewal per lease is in flight; a release that arrives meanwhile waits for its
//    answer (Lease::after_renewal), so no renewal can land after a release was answered;
//  - a lease leaves the table exactly once (release, expiry, loss), settling gauge and hold time.
#include <algorithm>
#include <utility>

#include "common/log.h"
#include "lock/kinds/kind_policy.h"
#include "lock/lock_service_impl.h"

namespace sidelock::lock {
void LockService::Impl::updateHeldGauge() {
  metrics_.held_locks.Set(static_cast<double>(leases_.size()));
}

void LockService::Impl::updateOldestLeaseAge() {
  const int64_t granted_us = leases_.oldestGrantedUs();
  const int64_t age_us = granted_us < 0 ? 0 : std::max<int64_t>(0, scheduler_.nowUs() - granted_us);
  metrics_.oldest_lease_age.Set(static_cast<double>(age_us) / 1e6);
}

void LockService::Impl::updateHeldByHolder() {
  const HolderTally& tally = leases_.holders();
  std::vector<metrics::Metrics::HolderLeases> counts;
  counts.reserve(tally.size());
  tally.forEach([&counts](std::string_view holder, int64_t leases) {
    counts.push_back({holder, leases});
  });
  metrics_.publishHeldByHolder(std::move(counts), tally.unlabelled());
}

void LockService::Impl::recordGrant(Waiter& w, const backend::Outcome& grant) {
  const int64_t now = scheduler_.nowUs();
  const LockId& lock = w.options.lock;
  // A re-entry is told by the backend's count, not by the token: a grant of holds > 1 to the
  // owner of a lease we hold is that lease (its token is the lease's; the scripts keep it).
  if (Lease* held = leases_.find(lock, w.options.owner);
      held != nullptr && w.options.reentrant && grant.holds > 1) {
    if (grant.token != held->token) {
      SL_LOG(kWarn, "lock.reentry_token_differs", {"name", lock.display()},
             {"lease_token", static_cast<unsigned long long>(held->token)},
             {"reentry_token", static_cast<unsigned long long>(grant.token)});
    }
    // A re-entry: the same lease with one more hold. It keeps its renewal and its events (this
    // acquire's own auto_renew / stream options do not apply to a lease it did not start).
    held->holds =
        clampHolds(grant.holds > 0 ? grant.holds : held->holds + 1);  // the backend counts
    held->expiry_us = std::max(held->expiry_us, now + grant.validity_ms * 1000);
    armExpiry(*held);
    lost_.forget(lock, held->owner);
    SL_LOG(kDebug, "lock.reentered", {"name", lock.display()}, {"owner", ownerDigest(held->owner)},
           {"holds", static_cast<long long>(held->holds)});
    return;
  }
  if (Lease* old =
          policyOf(lock.kind).new_grant_ends_earlier_lease ? leases_.find(lock) : nullptr) {
    // A mutex has one holder: the backend granted the name again, so our earlier lease lapsed
    // before its timer told us, or its owner's release is under way and the backend let the
    // name go before the release answered (Redlock: a majority freed it, a slower node has not
    // answered, and a waiter here was granted meanwhile). (A semaphore's permits live side by
    // side.)
    if (old->releasing) {
      // Ended as its release will answer (released), not counted or told as expired / lost.
      endReleasedLease(*old);
    } else if (old->renewing) {
      markLost(*old, "lease lapsed before renewal (granted again)", /*by_renewal=*/true,
               /*wake=*/false);
    } else {
      expireLease(*old, /*wake=*/false);
    }
  }
  auto owned = std::make_unique<Lease>(config_.retry_min_ms, config_.retry_max_ms);
  Lease& lease = *owned;
  lease.id = ++next_lease_id_;
  lease.lock = lock;
  lease.owner = w.options.owner;
  lease.token = grant.token;
  lease.ttl_ms = w.options.ttl_ms;
  lease.granted_us = now;
  lease.expiry_us = now + grant.validity_ms * 1000;
  lease.auto_renew = w.options.auto_renew || w.options.stream;
  lease.stream = w.options.stream;
  lease.lock_delay = w.options.lock_delay_ms > 0;
  if (lease.auto_renew) {
    const int64_t max_hold =
        w.options.max_hold_ms > 0 ? w.options.max_hold_ms : config_.default_max_hold_ms;
    lease.hold_deadline_us = max_hold > 0 ? now + max_hold * 1000 : 0;
  }
  lease.on_event = std::move(w.on_event);
  // Counted by its public label (an election's is its candidate), never by its owner id.
  leases_.insert(std::move(owned),
                 !w.options.holder.empty() ? w.options.holder : w.options.candidate);
  lost_.forget(lease.lock, lease.owner);
  updateHeldGauge();
  armExpiry(lease);
  if (lease.auto_renew) {
    lease.renewing = true;
    scheduleRenewal(lease, renewIntervalMs(lease, grant.validity_ms));
  }
  SL_LOG(kDebug, "lock.granted", {"name", lease.lock.display()},
         {"owner", ownerDigest(lease.owner)},
         {"token", static_cast<unsigned long long>(lease.token)},
         {"ttl_ms", static_cast<long long>(grant.validity_ms)}, {"auto_renew", lease.auto_renew},
         {"stream", lease.stream});
}

void LockService::Impl::armExpiry(Lease& lease) {
  const int64_t delay = ceilMs(lease.expiry_us - scheduler_.nowUs());
  // The timer lives in the lease: it cannot fire once the lease (or the service) is gone, so it
  // needs no liveness guard, and [this, lp] fits std::function's inline buffer: no allocation
  // per timer, with two timers per lease and 100k leases.
  lease.expiry_timer.start(scheduler_, delay, [this, lp = &lease] {
    TurnScope scope(*this);
    onLeaseExpiry(*lp);
  });
}

void LockService::Impl::onLeaseExpiry(Lease& lease) {
  if (lease.renewing && !lease.releasing) {
    // The watchdog was supposed to keep it alive: every renewal failed until validity ran out.
    markLost(lease, "validity ran out before a renewal succeeded", /*by_renewal=*/true);
  } else {
    expireLease(lease, /*wake=*/true);
  }
}

void LockService::Impl::expireLease(Lease& lease, bool wake) {
  if (lease.unhealthy) {
    // Left to run out by releaseUnhealthy (kRunOut): already counted as ended unhealthy, and
    // its delay's cause is the health binding.
    if (lease.lock_delay) metrics_.lock_delays_unhealthy.Increment();
  } else {
    metrics_.lease_expired.Increment();
    if (lease.lock_delay) metrics_.lock_delays_expired.Increment();  // its delay runs from now
  }
  SL_LOG(kInfo, "lease.expired", {"name", lease.lock.display()},
         {"owner", ownerDigest(lease.owner)},
         {"token", static_cast<unsigned long long>(lease.token)},
         {"held_ms", static_cast<long long>((scheduler_.nowUs() - lease.granted_us) / 1000)});
  // A holder that listens (stream) learns that it no longer holds the lock, whatever the reason.
  std::function<void(LeaseEvent)> on_event = std::move(lease.on_event);
  const LeaseEvent last = lease.capped ? LeaseEvent::kCapExpired : LeaseEvent::kLost;
  const LockId lock = lease.lock;
  endLease(lock, lease.owner);
  deliverEnd(std::move(on_event), last, "the lease's TTL ran out without a renewal");
  if (wake) wakeLockQueues(lock, false);
}

void LockService::Impl::deliverEnd(std::function<void(LeaseEvent)> on_event, LeaseEvent e,
                                   const char* reason) {
  if (!on_event) return;
  deliver([this, on_event = std::move(on_event), e, reason] {
    delivering_loss_reason_ = reason;  // lossReason(), while the event is delivered
    // The holder may destroy the service from its event (drain() allows it): then nothing of
    // ours may be touched after.
    const event::LivenessToken::Ref alive = alive_.ref();
    on_event(e);
    if (!alive.expired()) delivering_loss_reason_ = nullptr;
  });
}

int64_t LockService::Impl::renewIntervalMs(const Lease& lease, int64_t validity_ms) const {
  // Paced on what the backend actually confirmed (Redlock validity < ttl), never below 1 ms.
  const double base = static_cast<double>(std::min(lease.ttl_ms, validity_ms));
  return std::max<int64_t>(1, static_cast<int64_t>(base * config_.renew_fraction));
}

void LockService::Impl::scheduleRenewal(Lease& lease, int64_t delay_ms) {
  // Owned by the lease, like the expiry timer (see armExpiry).
  lease.renew_timer.start(scheduler_, delay_ms, [this, lp = &lease] {
    TurnScope scope(*this);
    renew(*lp);
  });
}

void LockService::Impl::renew(Lease& lease) {
  if (!lease.renewing || lease.releasing || lease.renew_in_flight) return;
  const int64_t now = scheduler_.nowUs();
  if (lease.hold_deadline_us != 0 && now + lease.ttl_ms * 1000 > lease.hold_deadline_us) {
    // One more renewal would carry the hold past max_hold_ms: stop; the lease runs out by itself
    // (at most ttl * (1 - renew_fraction) from now, so the hold never exceeds the cap).
    lease.renewing = false;
    lease.capped = true;
    metrics_.renew_capped.Increment();
    SL_LOG(kInfo, "lease.renew_capped", {"name", lease.lock.display()},
           {"owner", ownerDigest(lease.owner)},
           {"token", static_cast<unsigned long long>(lease.token)},
           {"held_ms", static_cast<long long>((now - lease.granted_us) / 1000)});
    if (lease.on_event) {
      deliver([on_event = lease.on_event] { on_event(LeaseEvent::kCapped); });
    }
    return;
  }
  if (now >= lease.expiry_us) return;  // too late to renew: the expiry timer declares it lost
  lease.renew_in_flight = true;
  InFlight in_flight = ops_.hold();
  backend::Operation op = backend::Operation::extend(lease.lock.name, lease.owner, lease.ttl_ms);
  op.lease_may_delay = lease.lock_delay;
  runOnBackend(
      lease.lock, op,
      guarded([this, lock = lease.lock, owner = lease.owner, id = lease.id,
               in_flight = std::move(in_flight)](StatusOr<backend::Outcome> reply) mutable {
        onRenewReply(lock, owner, id, std::move(reply), std::move(in_flight));
      }));
}

void LockService::Impl::onRenewReply(const LockId& lock, const std::string& owner,
                                     uint64_t lease_id, StatusOr<backend::Outcome> reply,
                                     InFlight in_flight) {
  const InFlight settled = std::move(in_flight);  // in flight until this function returns
  Lease* lease = leases_.find(lock, owner);
  if (lease == nullptr || lease->id != lease_id) {
    // The lease ended while this renewal was in flight (declared lost when its validity ran
    // out). If the renewal did land, the key is alive for nobody: take it back.
    if (reply.isOk() && reply->ok()) releaseOrphan(lock, owner);
    return;
  }
  lease->renew_in_flight = false;
  std::vector<std::function<void()>> after = lease->after_renewal.take();
  const bool active = lease->renewing && !lease->releasing;
  const int64_t now = scheduler_.nowUs();

  if (!reply.isOk()) {
    metrics_.renew_error.Increment();
    if (active) {
      const int64_t remaining_ms = (lease->expiry_us - now) / 1000;
      if (remaining_ms <= 0) {
        markLost(*lease, "backend unavailable until validity ran out", /*by_renewal=*/true);
      } else {
        // The first error of a lease's streak only, and across leases (an outage hits them
        // all) one line per kind of error, then a count every 10 s.
        if (lease->renew_backoff.attempt() == 0) {
          if (auto suppressed = renew_error_log_.admit(
                  scheduler_.nowMs(), std::to_string(static_cast<int>(reply.status().code())))) {
            SL_LOG(kWarn, "lease.renew_error", {"name", lock.display()},
                   {"owner", ownerDigest(owner)}, {"error", reply.status().toString()},
                   {"validity_ms", static_cast<long long>(remaining_ms)},
                   {"suppressed", static_cast<unsigned long long>(*suppressed)},
                   {"suppressed_window_s",
                    static_cast<long long>(renew_error_log_.windowMs() / 1000)});
          }
        }
        // Retry quickly and never past the validity we still have: at most half of what is
        // left, so attempts get denser (not sparser) as the end nears and the last one still
        // lands inside the validity.
        scheduleRenewal(*lease,
                        lease->renew_backoff.next(-1, std::max<int64_t>(1, remaining_ms / 2)));
      }
    }
  } else if (reply->ok()) {
    metrics_.renew_renewed.Increment();
    lease->expiry_us = now + reply->validity_ms * 1000;
    armExpiry(*lease);
    lease->renew_backoff.reset();
    if (active) {
      scheduleRenewal(*lease, renewIntervalMs(*lease, reply->validity_ms));
      if (lease->on_event) {
        deliver([on_event = lease->on_event] { on_event(LeaseEvent::kRenewed); });
      }
    }
  } else {
    markLost(*lease,
             reply->code == backend::OutcomeCode::kNotOwner ? "renewal found another owner"
                                                            : "renewal found the lease gone",
             /*by_renewal=*/true);
  }
  for (auto& fn : after) fn();
}

void LockService::Impl::stopRenewal(Lease& lease) {
  lease.renewing = false;
  lease.releasing = true;
  lease.renew_timer.reset();
}

void LockService::Impl::markLost(Lease& lease, const char* reason, bool by_renewal, bool wake) {
  const int64_t now = scheduler_.nowUs();
  metrics_.lease_lost.Increment();
  // Issue 4 counts lost leases among the expired ones too: lease_expired_total is every lease
  // that ended without a release; lease_lost_total is the subset the sidecar found lost.
  metrics_.lease_expired.Increment();
  if (by_renewal) metrics_.renew_lost.Increment();
  lost_.remember(lease.lock, lease.owner, now);
  SL_LOG(kWarn, "lease.lost", {"name", lease.lock.display()}, {"owner", ownerDigest(lease.owner)},
         {"token", static_cast<unsigned long long>(lease.token)}, {"reason", reason},
         {"held_ms", static_cast<long long>((now - lease.granted_us) / 1000)});
  std::function<void(LeaseEvent)> on_event = std::move(lease.on_event);
  const LockId lock = lease.lock;
  endLease(lock, lease.owner);
  deliverEnd(std::move(on_event), LeaseEvent::kLost, reason);
  if (wake) wakeLockQueues(lock, false);
}

void LockService::Impl::endReleasedLease(Lease& lease) {
  SL_LOG(kDebug, "lock.released", {"name", lease.lock.display()},
         {"owner", ownerDigest(lease.owner)});
  if (lease.on_event) {
    deliver([on_event = std::move(lease.on_event)] { on_event(LeaseEvent::kReleased); });
  }
  // Copies: endLease destroys the lease they are read from.
  const LockId lock = lease.lock;
  const std::string owner = lease.owner;
  endLease(lock, owner);
}

void LockService::Impl::endLease(const LockId& lock, std::string_view owner) {
  std::unique_ptr<Lease> lease = leases_.remove(lock, owner);
  if (lease == nullptr) return;
  metrics_.hold_seconds.Observe(static_cast<double>(scheduler_.nowUs() - lease->granted_us) / 1e6);
  updateHeldGauge();
  // A release still waiting for this lease's renewal goes out now (it will find the lease gone).
  std::vector<std::function<void()>> after = lease->after_renewal.take();
  lease.reset();
  for (auto& fn : after) fn();
}

}  // namespace sidelock::lock
