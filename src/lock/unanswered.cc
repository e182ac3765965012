// LockService, grants nobody was told of. An acquire that went out and got no answer (its budget
// ended, or the link went down under it: Status::outcomeUnknown) may have been carried out all
// the same: Redis ran the script after the sidecar stopped waiting, and the lease then sits there
// for its whole TTL with nobody holding it (for an election: a leader nobody was told was
// elected, whom every sidecar reports and nobody can replace). Redlock takes its own back (a lost
// vote releases every node); the backends of one master (redis, sentinel, cluster) leave the
// doubt to this file.
//
// Under an owner id the service drew, nobody else can hold a lease, so an owner-checked release
// takes back exactly such a grant, or finds nothing:
//  - a waiter that goes on waiting sends it in place of its next attempt, and sends that attempt
//    only once the release has answered: the release can never free the attempt's grant (not
//    pipelined behind it, where a NOSCRIPT retry or a cluster redirect could reorder the two);
//  - a waiter that is done (answered with the error, cancelled, out of time) sends it at once,
//    and if the backend is out, again once it is back (with backoff) until the TTL would have
//    ended that grant anyway.
// A multi-lock under a drawn owner id (multi_lock.cc) is one such owner for all its names: its
// one-name acquires are waiters like any other (AcquireOptions::owner_drawn), and after a one-step
// try that got no answer each name's give-back comes first (AcquireOptions::unanswered_before), or,
// for names it will not ask for again, at once (giveBackUnansweredGrant()).
// Under an owner id the caller chose, the same release could free a lease that owner held before,
// here or through another sidecar: that one is left to the caller, whose error says so.
#include "common/invariant.h"
#include "common/log.h"
#include "lock/lock_service_impl.h"

namespace sidelock::lock {
namespace {

// Give-backs kept while the backend is out. Each is a few short strings; a long outage under a
// stream of unanswered acquires drops the oldest (whose TTL ends first).
constexpr size_t kMaxUnansweredGrants = 1024;
// The first retry's delay after the backend refused a give-back; each refusal doubles it, up to
// the maximum. The backend coming back sends them all at once (onBackendReady).
constexpr int64_t kUnansweredFirstRetryMs = 50;
constexpr int64_t kUnansweredMaxBackoffMs = 1000;

}  // namespace

LockService::Impl::UnansweredGrant LockService::Impl::unansweredGrantOf(const Waiter& w) const {
  return UnansweredGrant(w.options.lock, w.options.owner,
                         scheduler_.nowUs() + w.options.ttl_ms * 1000);
}

void LockService::Impl::giveBackBeforeAttempt(Waiter& w, InFlight in_flight) {
  // In flight as the waiter's attempt (attempt() marked it): its queue starts no other attempt
  // meanwhile, and a waiter answered meanwhile is kept (abandoned) until this reply is settled.
  UnansweredGrant grant = unansweredGrantOf(w);
  grant.attempts = 1;
  const LockId& lock = w.options.lock;
  runOnBackend(lock, backend::Operation::release(lock.name, w.options.owner),
               guarded([this, in_flight = std::move(in_flight), id = w.id,
                        grant = std::move(grant)](StatusOr<backend::Outcome> r) mutable {
                 if (!r.isOk()) {
                   // Not reached: still in doubt (grant_unsettled stays). To the waiter this was a
                   // failed attempt: it rides out the outage (or is answered) as after one.
                   onAttemptReply(id, r.status(), std::move(in_flight));
                   return;
                 }
                 const InFlight settled = std::move(in_flight);
                 noteGiveBack(grant, *r);
                 auto it = waiters_.find(id);
                 if (!SL_INVARIANT(it != waiters_.end(), "lock.giveback_without_waiter")) return;
                 Waiter& waiter = *it->second;
                 waiter.grant_unsettled = false;
                 if (!waiter.abandoned) {
                   attempt(waiter);  // the acquire, now that the release has run
                   return;
                 }
                 // Answered meanwhile: no acquire follows, and the queue's next head may go.
                 WaiterQueue* queue =
                     waiter.options.wait_ms > 0 ? queues_.find(waiter.options.lock) : nullptr;
                 if (queue != nullptr) queue->attempt_in_flight = false;
                 retireAbandoned(it, queue, /*pump=*/true);
               }));
}

void LockService::Impl::settleUnanswered(Waiter& w) {
  if (!w.grant_unsettled) return;
  w.grant_unsettled = false;
  giveBackUnanswered(unansweredGrantOf(w));
}

void LockService::Impl::giveBackUnansweredGrant(const LockId& lock, const std::string& owner,
                                                int64_t until_us) {
  if (scheduler_.nowUs() >= until_us) return;
  giveBackUnanswered(UnansweredGrant(lock, owner, until_us));
}

bool LockService::Impl::noteGiveBack(const UnansweredGrant& grant, const backend::Outcome& r) {
  if (!r.ok()) {
    metrics_.unanswered_not_granted.Increment();  // it never ran, or its TTL ended it
    return false;
  }
  metrics_.unanswered_released.Increment();
  SL_LOG(kInfo, "lock.unanswered_grant_released", {"name", grant.lock.display()},
         {"owner", ownerDigest(grant.owner)}, {"attempts", grant.attempts});
  return true;
}

void LockService::Impl::giveUpUnanswered(const UnansweredGrant& grant, const char* why,
                                         const std::string& error) {
  metrics_.unanswered_gave_up.Increment();
  SL_LOG(kWarn, "lock.unanswered_grant_not_given_back", {"name", grant.lock.display()},
         {"owner", ownerDigest(grant.owner)}, {"attempts", grant.attempts}, {"error", error},
         {"gave_up", why});
}

void LockService::Impl::giveBackUnanswered(UnansweredGrant grant) {
  ++grant.attempts;
  // The operation's views must not point into `grant`, which the callback takes over.
  const LockId lock = grant.lock;
  const std::string owner = grant.owner;
  runOnBackend(
      lock, backend::Operation::release(lock.name, owner),
      guarded([this, in_flight = ops_.hold(),
               grant = std::move(grant)](StatusOr<backend::Outcome> r) mutable {
        const InFlight settled = std::move(in_flight);
        if (r.isOk()) {
          if (noteGiveBack(grant, *r)) wakeQueue(grant.lock, /*notified=*/false);
          return;
        }
        if (stopping_ || scheduler_.nowUs() >= grant.until_us) {
          giveUpUnanswered(grant, stopping_ ? "the sidecar is shutting down" : "its TTL has ended",
                           r.status().toString());
          return;
        }
        grant.last_error = r.status().toString();
        unanswered_.later(std::move(grant));
      }));
}

event::RetryQueue<LockService::Impl::UnansweredGrant> LockService::Impl::unansweredRetries() {
  using Retries = event::RetryQueue<UnansweredGrant>;
  return Retries(
      scheduler_, {kMaxUnansweredGrants, kUnansweredFirstRetryMs, kUnansweredMaxBackoffMs},
      [this](UnansweredGrant grant) { giveBackUnanswered(std::move(grant)); },
      [this](const UnansweredGrant& grant, Retries::Dropped why) {
        giveUpUnanswered(grant,
                         why == Retries::Dropped::kFull
                             ? "too many waiting for the backend"
                             : "its TTL ended before the backend was back",
                         grant.last_error);  // every queued give-back was sent and refused once
      });
}

}  // namespace sidelock::lock
