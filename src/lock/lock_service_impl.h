// Internal: the state and helpers of LockService, shared by lock_service.cc (facade, plumbing,
// shutdown), waiting.cc (acquire, queues), release.cc (release, hand-off, extend, inspect) and
// watchdog.cc (lease lifecycle: grant, renewal, expiry, loss).
//
// Callback discipline: every entry from the outside world that is not a public call (a backend
// reply, a timer, a release notification) runs inside a TurnScope. User callbacks (`done`,
// `on_event`) are never invoked in the middle of our own bookkeeping: deliver() queues them and
// the outermost TurnScope runs them once the service's state is consistent again. Outside a
// TurnScope (inside a public call) deliver() posts them to a later loop turn instead.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "common/rate_limited_log.h"
#include "config/config.h"
#include "event/lifetime.h"
#include "event/retry_queue.h"
#include "event/scheduler.h"
#include "lock/lease_table.h"
#include "lock/lock_service.h"
#include "lock/waiter_queue.h"
#include "metrics/metrics.h"

namespace sidelock::lock {

/// How many lost (lock, owner) pairs are remembered, and for how long, so that a release after
/// a loss answers lease_lost rather than not_held.
inline constexpr size_t kLostLeaseCapacity = 4096;
inline constexpr int64_t kLostLeaseRetentionUs = 10LL * 60 * 1000 * 1000;
/// A queued writer's mark keeps new readers out this much longer than its next retry can be away.
inline constexpr int64_t kWriterWaitSlackMs = 1000;

/// Microseconds to whole milliseconds, rounded up (a wait is never cut short); 0 if none left.
inline int64_t ceilMs(int64_t us) { return us <= 0 ? 0 : (us + 999) / 1000; }

class LockService::Impl {
 public:
  Impl(const config::LocksConfig& config, backend::Backend& backend, event::Scheduler& scheduler,
       metrics::Metrics& metrics);
  ~Impl();

  AcquireTicket acquire(AcquireOptions options, std::function<void(AcquireResult)> done,
                        std::function<void(LeaseEvent)> on_event);
  void releaseUnhealthy(const LockId& lock, std::string_view owner, LockService::UnhealthyEnd how);
  void release(const LockId& lock, std::string_view owner,
               std::function<void(StatusOr<ReleaseStatus>)> done,
               ReleaseMode mode = ReleaseMode::kClean);
  void extend(const LockId& lock, std::string_view owner, int64_t ttl_ms,
              std::function<void(StatusOr<ExtendResult>)> done);
  void inspect(const LockId& lock, std::function<void(StatusOr<LockState>)> done);
  void forceRelease(std::string_view name, std::function<void(StatusOr<ForcedRelease>)> done);
  void proclaim(const LockId& lock, std::string_view owner, std::string_view value,
                std::function<void(StatusOr<ProclaimResult>)> done);
  ChangeWatch watchChanges(std::string_view name, std::function<void(ChangeReason)> on_change);
  std::vector<LeaseInfo> leases() const;
  int64_t holds(const LockId& lock, std::string_view owner) const;
  int64_t validityLeftMs(const LockId& lock, std::string_view owner) const;
  const char* lossReason() const { return delivering_loss_reason_; }
  bool lostLately(const LockId& lock, std::string_view owner) {
    return lost_.contains(lock, owner, scheduler_.nowUs());
  }
  BackendHealth backendHealth() const { return backend_.health(); }
  /// The backend's holder scan, its answer delivered like every other (skipped once destroyed).
  void scanHolders(const backend::HolderScan& scan, backend::ScanCallback done);
  event::Scheduler& scheduler() { return scheduler_; }
  /// Multi-locks: whether the backend grants every name in one atomic step.
  bool acquiresAllAtOnce() const { return backend_.acquiresAllAtOnce(); }
  /// Whether acquires of `lock` are queued here.
  bool hasLocalWaiters(const LockId& lock) {
    const WaiterQueue* q = queues_.find(lock);
    return q != nullptr && !q->fifo.empty();
  }
  /// One atomic try of every name of `options` (never waits). Granted, each name becomes a
  /// lease of this sidecar as if acquired alone, and `done` gets their grants in name order.
  void acquireAllAtOnce(
      const MultiAcquireOptions& options,
      std::function<void(StatusOr<backend::AllOutcome>, std::vector<Grant>)> done);
  /// A multi-lock's all-at-once try under a drawn owner id got no answer and `lock` will not be
  /// tried again under it: the grant it may have left there is given back now, or once the
  /// backend is back, until `until_us` (the try's TTL ended it by then). unanswered.cc.
  void giveBackUnansweredGrant(const LockId& lock, const std::string& owner, int64_t until_us);
  const config::LocksConfig& config() const { return config_; }
  std::vector<WaiterCount> waiterCounts() const;
  void shutdown(bool release_held, int64_t grace_ms, std::function<void()> done);
  /// Answers every waiter kCancelled ("sidelock is shutting down"), in arrival order.
  void cancelWaiters();

 private:
  using InFlight = event::InFlightGate::Holder;

  /// One frame of the service on the stack (event::ReentryScope): the outermost one drains
  /// deferred_ while still counted as inside, so what the drained callbacks deliver joins the
  /// queue instead of re-entering; a user callback may destroy the service meanwhile.
  class TurnScope {
   public:
    explicit TurnScope(Impl& impl)
        : scope_(impl.depth_, event::SettleWhen::kBeforeLeaving, DrainDeferred{&impl}) {}

   private:
    struct DrainDeferred {
      Impl* impl;
      bool operator()() const { return impl->drain(); }  // false: the service was destroyed
    };
    event::ReentryScope<DrainDeferred> scope_;
  };

  /// Wraps a callback from the backend or a timer: skipped if the service is gone, run inside a
  /// TurnScope otherwise.
  template <typename F>
  auto guarded(F f) {
    return alive_.guarded([this, f = std::move(f)](auto&&... args) mutable {
      TurnScope scope(*this);
      f(std::forward<decltype(args)>(args)...);
    });
  }
  void deliver(std::function<void()> fn);
  /// Delivers a lease's last event (kLost, kCapExpired) with `reason` readable through
  /// LockService::lossReason() while it runs. `reason` must be a literal.
  void deliverEnd(std::function<void(LeaseEvent)> on_event, LeaseEvent e, const char* reason);
  bool drain();  // false if the service was destroyed while draining

  using WaiterMap = std::unordered_map<uint64_t, std::unique_ptr<Waiter>>;

  // --- acquire and waiting (waiting.cc) ---
  void cancelWaiter(uint64_t id);
  void attempt(Waiter& w);
  /// `handed_off`: the grant came with a release's hand-off, which leaves writers' marks alone.
  /// `in_flight`: the attempt's count in ops_, given back when this reply is settled.
  void onAttemptReply(uint64_t id, StatusOr<backend::Outcome> reply, InFlight in_flight,
                      bool handed_off = false);
  void onDeadline(uint64_t id);
  /// An abandoned waiter whose last attempt is settled leaves (`q`: its queue, whose attempt is no
  /// longer in flight, or nullptr); with `pump`, the queue's next head may go now.
  void retireAbandoned(WaiterMap::iterator it, WaiterQueue* q, bool pump);
  /// The queue limit a waiter on a lock would exceed by queueing now, or kNone if there is room.
  WaiterLimit fullWaiterLimit(size_t queued_here) const;
  /// Puts `w` at the back of its lock's queue with its remaining budget (a new queue waits out
  /// `holder_ttl_ms` / backoff before its first attempt; an existing one keeps its schedule).
  void enqueue(Waiter& w, int64_t holder_ttl_ms);
  /// A try-first acquire (wait_if_busy_ms) found the lock busy: queue it or refuse with 429.
  void queueAfterBusyTry(Waiter& w, int64_t holder_ttl_ms);
  /// Answers the waiter, detaches it from its queue and forgets it (or, if an attempt of it is in
  /// flight, marks it abandoned until that attempt answers).
  void finishWaiter(Waiter& w, AcquireResult result);
  void detachFromQueue(Waiter& w);
  void maybeEraseQueue(const LockId& lock);
  /// Lets the head of `lock`'s queue contend now unless an attempt or a retry is already planned.
  void pumpQueue(const LockId& lock);
  void planRetry(WaiterQueue& q);
  void onRetryTimer(WaiterQueue* q);
  /// The lock is probably free (released here, released elsewhere, expired): head tries now.
  /// How long a fair waiter keeps its place in the backend's queue without being renewed.
  int64_t fairClaimMs() const;
  /// `w` gave up, failed or was cancelled: a fair waiter leaves the backend's queue, a queued
  /// writer withdraws its mark (passing it to the writers still in `q`), rather than keeping the
  /// next waiter / readers out until it lapses.
  void withdrawFromBackend(const Waiter& w, const WaiterQueue* q);
  /// How long a queued writer's mark keeps new readers out when nothing renews it.
  int64_t writerMarkMs() const;
  /// The owner ids queued in `q` but `except` (abandoned ones left out), space-separated.
  static std::string othersQueued(const WaiterQueue* q, const Waiter* except);
  /// Wakes `lock`'s queue and, for a read/write lock, the queue of the other mode (a lease that
  /// ended without a release: expired, lost, force-released).
  void wakeLockQueues(const LockId& lock, bool notified);
  /// After our own release freed `lock`: wakes its queue, and the other queue of a read/write
  /// lock that the release let in.
  void wakeAfterRelease(const LockId& lock, const backend::Outcome& released);
  void wakeQueue(const LockId& lock, bool notified);
  /// The backend can grant again: queues riding out the outage retry at once.
  void onBackendReady();
  void releaseOrphan(const LockId& lock, const std::string& owner);

  // --- grants nobody was told of: acquires that got no answer (unanswered.cc) ---
  /// The give-back of one possible grant.
  struct UnansweredGrant {
    UnansweredGrant(LockId lock_, std::string owner_, int64_t until_us_)
        : lock(std::move(lock_)), owner(std::move(owner_)), until_us(until_us_) {}
    LockId lock;
    std::string owner;
    int64_t until_us = 0;  // its TTL has ended by then: nothing left to give back
    int64_t next_try_us = 0;
    int64_t backoff_ms = 0;
    int attempts = 0;
    std::string last_error;  // what the last give-back was refused with ("" if none was sent)
  };
  /// Instead of `w`'s next attempt (attempt() marked it in flight, `in_flight` its count): the
  /// release of what an unanswered attempt of it may have been granted; the attempt is sent once
  /// that release has answered (never pipelined behind it: a NOSCRIPT retry or a cluster
  /// redirect of the release could run after the attempt's grant). A release that fails counts
  /// as a failed attempt (onAttemptReply).
  void giveBackBeforeAttempt(Waiter& w, InFlight in_flight);
  /// What an unanswered attempt of `w` may have been granted, to give back until its TTL.
  UnansweredGrant unansweredGrantOf(const Waiter& w) const;
  /// After `w`'s last attempt: its unanswered attempt's possible grant is given back now, or,
  /// with the backend out, as soon as it is back (until `ttl_ms` would have ended it). For an
  /// owner id the caller chose, only counted (the caller holds the means to release it).
  void settleUnanswered(Waiter& w);
  /// Sends the give-back (owner-checked release); a refusal keeps it for a retry.
  void giveBackUnanswered(UnansweredGrant grant);
  /// Counts what a give-back found; true when it released a grant.
  bool noteGiveBack(const UnansweredGrant& grant, const backend::Outcome& r);
  /// Counts and logs a give-back that will not be sent again (`why`: a literal).
  void giveUpUnanswered(const UnansweredGrant& grant, const char* why, const std::string& error);
  /// The give-backs the backend refused, sent again with backoff, or all at once when it is
  /// back (onBackendReady, shutdown), until their TTL ends.
  event::RetryQueue<UnansweredGrant> unansweredRetries();
  int64_t retryHintMs(const LockId& lock, int64_t holder_ttl_ms);
  void updateWaiterGauge();

  // --- release / extend (release.cc) ---
  void sendRelease(LockId lock, std::string owner,
                   std::function<void(StatusOr<ReleaseStatus>)> done, bool client_request,
                   ReleaseMode mode = ReleaseMode::kClean);
  /// The head of `lock`'s queue, if a release may hand the lock straight to it.
  Waiter* handOffCandidate(const LockId& lock);
  /// Release and grant to `next` in one backend round trip (Verb::kHandOff).
  void sendReleaseWithHandOff(LockId lock, std::string owner, Waiter& next,
                              std::function<void(StatusOr<ReleaseStatus>)> done);
  /// An owner-checked verb (release, extend, proclaim) was refused for (lock, owner): `lease` (this
  /// sidecar's lease of that grant, or null) is lost now. True when the refusal is of a lease this
  /// sidecar granted (lost now or lately): the caller answers lease_lost.
  bool refusedOwnLease(Lease* lease, const LockId& lock, const std::string& owner,
                       const char* reason, bool wake = true);
  /// Settles a release's answer: lease table, metrics, the caller's answer and (if `wake`) the
  /// queue's head.
  void onReleaseReply(const LockId& lock, const std::string& owner,
                      StatusOr<backend::Outcome> reply,
                      std::function<void(StatusOr<ReleaseStatus>)> done, bool client_request,
                      bool wake);

  // --- lease lifecycle (watchdog.cc) ---
  void recordGrant(Waiter& w, const backend::Outcome& grant);
  void armExpiry(Lease& lease);
  void onLeaseExpiry(Lease& lease);
  /// The lease ran out without a release (or renewals had stopped): count, tell, drop it.
  void expireLease(Lease& lease, bool wake);
  int64_t renewIntervalMs(const Lease& lease, int64_t validity_ms) const;
  void scheduleRenewal(Lease& lease, int64_t delay_ms);
  void renew(Lease& lease);
  void onRenewReply(const LockId& lock, const std::string& owner, uint64_t lease_id,
                    StatusOr<backend::Outcome> reply, InFlight in_flight);
  /// Stops renewals for good (release or shutdown); the lease itself stays until answered.
  void stopRenewal(Lease& lease);
  /// The lease is gone behind our back: count, log once, remember, tell the holder, drop it.
  void markLost(Lease& lease, const char* reason, bool by_renewal, bool wake = true);
  /// Drops the lease from the table and settles the gauges / hold time.
  void endLease(const LockId& lock, std::string_view owner);
  /// Its owner's release freed it: tell the holder `released`, then endLease.
  void endReleasedLease(Lease& lease);
  /// Sends `op` to the backend as `lock`'s kind and name.
  void runOnBackend(const LockId& lock, backend::Operation op, backend::OutcomeCallback cb);
  /// The acquire metrics of `kind` ({kind=...}), looked up once per kind.
  metrics::Metrics::AcquireMetrics& acquireMetrics(LockKind kind);
  void updateHeldGauge();
  /// Scrape hook: sidelock_oldest_lease_age_seconds from the lease table's grant-time index.
  void updateOldestLeaseAge();
  /// Scrape hook: sidelock_held_locks_by_holder from the lease table's count per holder label.
  void updateHeldByHolder();

  // --- change watches (lock_service.cc) ---
  void unwatchChanges(const std::string& name, uint64_t id);
  /// Tells every watcher of `name` (on deliver()), e.g. after its release channel spoke.
  void notifyChangeWatchers(std::string_view name, ChangeReason reason);

  // --- shutdown accounting ---
  void maybeFinishShutdown();

  const config::LocksConfig config_;
  std::array<metrics::Metrics::AcquireMetrics*, backend::kLockKindCount> acquire_metrics_{};
  backend::Backend& backend_;
  event::Scheduler& scheduler_;
  metrics::Metrics& metrics_;

  WaiterQueues queues_;
  WaiterMap waiters_;  // every unanswered acquire, by id
  LeaseTable leases_;
  LostLeaseMemory lost_;
  /// markLost's reason (a literal) while its kLost event is delivered (LockService::lossReason).
  const char* delivering_loss_reason_ = nullptr;
  // Watchers of announced changes, by name; each name holds one backend watch while watched.
  std::unordered_map<std::string,
                     std::vector<std::pair<uint64_t, std::function<void(ChangeReason)>>>>
      change_watchers_;
  uint64_t next_change_watch_id_ = 0;
  uint64_t next_waiter_id_ = 0;
  uint64_t next_lease_id_ = 0;

  /// Give-backs of unanswered grants the backend was out for (unansweredRetries()).
  event::RetryQueue<UnansweredGrant> unanswered_;

  bool stopping_ = false;
  std::function<void()> shutdown_done_;
  event::ScopedTimer grace_timer_;
  // Backend calls not yet answered (and settled). Each call's callback carries a holder and moves
  // it into a local first thing (`const InFlight settled = std::move(in_flight);`), so the call
  // counts until its reply is fully handled, whichever way it returns. A hand-off holds two:
  // the release and the waiter's attempt (settled by onAttemptReply).
  event::InFlightGate ops_;

  // Per-request warnings during an outage: one line per change, then a count every 10 s.
  RateLimitedLog release_failed_log_;
  RateLimitedLog renew_error_log_;

  event::ReentryDepth depth_;  // frames of the service on the stack (TurnScope)
  std::deque<std::function<void()>> deferred_;
  event::LivenessToken alive_;
};

}  // namespace sidelock::lock
