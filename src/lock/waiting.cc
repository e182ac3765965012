// LockService, acquire and waiting: a single try, FIFO queues per lock with backoff and wake-ups,
// riding out a backend outage, all-at-once multi-lock grants. What a kind changes here comes from
// its KindPolicy (src/lock/kinds/).
#include <algorithm>
#include <utility>

#include "common/invariant.h"
#include "common/log.h"
#include "common/random.h"
#include "lock/kinds/kind_policy.h"
#include "lock/lock_service_impl.h"

namespace sidelock::lock {
namespace {

/// The error a waiter whose acquire got no answer is told: for an owner id the caller chose, that
/// the acquire may have been granted (unanswered.cc leaves that grant to the caller).
Status unansweredHint(const Waiter& w, const Status& error) {
  if (!w.grant_left_to_owner) return error;
  return Status(error.code(), error.message() +
                                  " (no answer came: the acquire may have been granted all the "
                                  "same; release it with this owner id, or its TTL ends it)");
}

/// An outage a queued waiter rides out: the backend could not answer (down, no quorum, no reply
/// in time, an error reply while Redis restarts, Redis out of memory until leases expire or an
/// operator frees some). Not: a bad request, or cancellation.
bool isTransientBackendError(const Status& s) {
  switch (s.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kInternal:
    case StatusCode::kResourceExhausted:
      return true;
    default:
      return false;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Acquire

AcquireTicket LockService::Impl::acquire(AcquireOptions options,
                                         std::function<void(AcquireResult)> done,
                                         std::function<void(LeaseEvent)> on_event) {
  const int64_t now = scheduler_.nowUs();
  auto reject = [&](AcquireStatus status, int64_t retry_after_ms = 0,
                    WaiterLimit limit = WaiterLimit::kNone) {
    AcquireResult r;
    r.status = status;
    r.retry_after_ms = retry_after_ms;
    r.limit = limit;
    metrics::Metrics::AcquireMetrics& m = acquireMetrics(options.lock.kind);
    if (status == AcquireStatus::kCancelled) {
      m.cancelled.Increment();
    } else if (status == AcquireStatus::kTooManyWaiters) {
      m.too_many_waiters.Increment();
    }
    m.wait_seconds.Observe(0);
    if (options.owner_drawn && options.unanswered_before) {
      // No waiter will give back what the earlier unanswered acquire may have left: do it here
      // (a multi-lock refused a name after its one-step try got no answer).
      const int64_t ttl_ms = options.ttl_ms > 0 ? options.ttl_ms : config_.default_ttl_ms;
      giveBackUnansweredGrant(options.lock, options.owner, now + ttl_ms * 1000);
    }
    deliver([done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
    return AcquireTicket();
  };
  if (stopping_) return reject(AcquireStatus::kCancelled);

  const bool owner_drawn = options.owner.empty() || options.owner_drawn;
  if (options.owner.empty()) options.owner = randomOwnerId();
  if (options.stream) options.auto_renew = true;
  if (options.ttl_ms <= 0) options.ttl_ms = config_.default_ttl_ms;
  // The API layer validates; clamping here keeps a direct caller from queueing forever (a kind
  // whose waiters wait until cancelled, as election candidates, is bounded by its caller).
  const int64_t max_wait_ms = policyOf(options.lock.kind).waits_until_cancelled
                                  ? kWaitUntilCancelledMs
                                  : std::max<int64_t>(0, config_.max_wait_ms);
  options.wait_ms = std::clamp<int64_t>(options.wait_ms, 0, max_wait_ms);

  // A re-entry into a lease we hold: one try at once. Queued, it would wait behind waiters that
  // wait for this very lease (and a single try would be answered busy on their account).
  const bool reentry = options.reentrant && policyOf(options.lock.kind).allows_reentry &&
                       leases_.find(options.lock, options.owner) != nullptr;
  if (reentry) options.wait_ms = 0;
  WaiterQueue* q = reentry ? nullptr : queues_.find(options.lock);
  const size_t queued_here = q != nullptr ? q->fifo.size() : 0;
  int64_t wait_if_busy_ms = 0;
  if (options.wait_ms > 0) {
    if (const WaiterLimit full = fullWaiterLimit(queued_here); full != WaiterLimit::kNone) {
      if (queued_here > 0) {
        // Others wait for this name already: the caller would have to queue behind them.
        SL_LOG(kDebug, "lock.too_many_waiters", {"name", options.lock.display()},
               {"queued", static_cast<unsigned long>(queued_here)});
        return reject(AcquireStatus::kTooManyWaiters, retryHintMs(options.lock, -1), full);
      }
      // No local queue: the lock may well be free, and a full queue elsewhere must not refuse
      // it. Try once; queue (or refuse) only if the answer is busy.
      wait_if_busy_ms = std::exchange(options.wait_ms, 0);
    }
  }

  const uint64_t id = ++next_waiter_id_;
  auto owned = std::make_unique<Waiter>();
  Waiter& w = *owned;
  w.id = id;
  w.options = std::move(options);
  w.done = std::move(done);
  w.on_event = std::move(on_event);
  w.started_us = now;
  w.deadline_us = now + w.options.wait_ms * 1000;
  w.wait_if_busy_ms = wait_if_busy_ms;
  w.owner_drawn = owner_drawn;
  w.grant_unsettled = owner_drawn && w.options.unanswered_before;
  waiters_.emplace(id, std::move(owned));
  AcquireTicket ticket(alive_.guarded([this, id] { cancelWaiter(id); }));

  if (w.options.wait_ms == 0) {
    if (queued_here > 0 && !policyOf(w.options.lock.kind).single_try_skips_local_queue) {
      // Local waiters asked first: a single try must not jump the FIFO queue. The lock is
      // contended by definition, so answer busy without a backend round trip (or the outage the
      // queue is riding out: a single try fails fast).
      AcquireResult r;
      if (!q->backend_error.isOk()) {
        r.status = AcquireStatus::kError;
        r.error = q->backend_error;
      } else {
        w.contended = true;
        // Busy for the reason the queue last heard (a lock-delay, not a holder, keeps the
        // waiters out: the 409 must say so, with who held it if anyone).
        const Waiter& head = *q->fifo.front();
        w.busy_reason = head.busy_reason;
        w.busy_holder = head.busy_holder;
        r.status = AcquireStatus::kBusy;
        r.retry_after_ms = retryHintMs(w.options.lock, -1);
      }
      finishWaiter(w, std::move(r));
      return ticket;
    }
    attempt(w);
    return ticket;
  }

  // Behind other waiters: contended, even if it never hears a busy answer itself (readers and
  // permits behind a writer or a full semaphore are let in together).
  if (queued_here > 0) w.contended = true;
  enqueue(w, -1);
  return ticket;
}

WaiterLimit LockService::Impl::fullWaiterLimit(size_t queued_here) const {
  if (queued_here >= static_cast<size_t>(std::max(0, config_.max_waiters_per_lock))) {
    return WaiterLimit::kPerLock;
  }
  if (queues_.total() >= static_cast<size_t>(std::max(0, config_.max_waiters))) {
    return WaiterLimit::kSidecar;
  }
  return WaiterLimit::kNone;
}

void LockService::Impl::enqueue(Waiter& w, int64_t holder_ttl_ms) {
  const uint64_t id = w.id;
  const int64_t wait_ms = std::max<int64_t>(1, ceilMs(w.deadline_us - scheduler_.nowUs()));
  bool created = false;
  WaiterQueue& queue = queues_.getOrCreate(w.options.lock, &created);
  if (created) backend_.watchReleases(w.options.lock.name);
  queues_.push(queue, &w);
  updateWaiterGauge();
  w.deadline_timer.start(scheduler_, wait_ms, guarded([this, id] { onDeadline(id); }));
  const bool queue_in_backend = policyOf(w.options.lock.kind).queue_in_backend;
  if (queue_in_backend && !created) {
    // A fair waiter takes its place in the backend's queue now: the head asks again at once and
    // registers everybody queued here (its answer may still be in flight: then right after it).
    wakeQueue(w.options.lock, /*notified=*/false);
    return;
  }
  if (created && holder_ttl_ms >= 0 && !queue_in_backend) {
    // Just found held: the first attempt waits for the holder's TTL (or its release). (A fair
    // waiter asks at once: that attempt is what puts it in the backend's queue.)
    queue.holder_expiry_us = scheduler_.nowUs() + holder_ttl_ms * 1000;
    planRetry(queue);
    return;
  }
  pumpQueue(w.options.lock);
}

void LockService::Impl::queueAfterBusyTry(Waiter& w, int64_t holder_ttl_ms) {
  const int64_t now = scheduler_.nowUs();
  const WaiterQueue* q = queues_.find(w.options.lock);
  const WaiterLimit full = fullWaiterLimit(q != nullptr ? q->fifo.size() : 0);
  const int64_t deadline_us = w.started_us + w.wait_if_busy_ms * 1000;
  AcquireResult r;
  if (full != WaiterLimit::kNone) {
    SL_LOG(kDebug, "lock.too_many_waiters", {"name", w.options.lock.display()});
    r.status = AcquireStatus::kTooManyWaiters;
    r.limit = full;
    r.retry_after_ms = retryHintMs(w.options.lock, holder_ttl_ms);
    finishWaiter(w, std::move(r));
    return;
  }
  if (deadline_us <= now) {  // the try took the whole budget
    r.status = AcquireStatus::kBusy;
    r.retry_after_ms = retryHintMs(w.options.lock, holder_ttl_ms);
    finishWaiter(w, std::move(r));
    return;
  }
  // Room again (waiters left while we tried): wait as if queued from the start.
  w.options.wait_ms = w.wait_if_busy_ms;
  w.wait_if_busy_ms = 0;
  w.deadline_us = deadline_us;
  enqueue(w, holder_ttl_ms);
}

void LockService::Impl::cancelWaiter(uint64_t id) {
  auto it = waiters_.find(id);
  if (it == waiters_.end() || it->second->abandoned) return;  // already answered
  Waiter& w = *it->second;
  SL_LOG(kDebug, "lock.acquire_cancelled", {"name", w.options.lock.display()},
         {"owner", ownerDigest(w.options.owner)});
  AcquireResult r;
  r.status = AcquireStatus::kCancelled;
  const LockId lock = w.options.lock;
  const bool was_queued = w.queued;
  finishWaiter(w, std::move(r));
  if (was_queued) pumpQueue(lock);
}

void LockService::Impl::attempt(Waiter& w) {
  w.attempting = true;
  const bool queued = w.options.wait_ms > 0;
  WaiterQueue* q = queued ? queues_.find(w.options.lock) : nullptr;
  if (q != nullptr) q->attempt_in_flight = true;
  InFlight in_flight = ops_.hold();
  if (w.grant_unsettled) {
    // First an earlier attempt's possible grant goes back, in this attempt's place; the acquire
    // follows its answer (unanswered.cc).
    giveBackBeforeAttempt(w, std::move(in_flight));
    return;
  }
  const KindPolicy& policy = policyOf(w.options.lock.kind);
  backend::Operation op = backend::Operation::acquire(w.options.lock.name, w.options.owner,
                                                      w.options.ttl_ms, w.options.reentrant);
  op.limit = w.options.limit;
  op.candidate = w.options.candidate;  // elections: recorded with the lease
  op.lock_delay_ms = w.options.lock_delay_ms;
  op.value = w.options.value;
  op.holder = w.options.holder;  // locks: the public label recorded with the lease
  if (queued && policy.marks_writer_waiting) {
    // A queued writer: if readers hold the lock, new readers stay out until our next attempt,
    // never past our own deadline.
    const int64_t left_ms = ceilMs(w.deadline_us - scheduler_.nowUs());
    op.writer_wait_ms = std::clamp<int64_t>(writerMarkMs(), 1, std::max<int64_t>(1, left_ms));
  }
  std::string also_waiting;
  if (queued && policy.queue_in_backend) {
    // A fair waiter joins the backend's queue (or keeps its place), and so do the other waiters
    // queued here behind it, in their order: one call keeps every local claim alive.
    op.claim_ms = fairClaimMs();
    also_waiting = othersQueued(q, &w);
    op.also_waiting = also_waiting;
  }
  runOnBackend(w.options.lock, op,
               guarded([this, id = w.id, in_flight = std::move(in_flight)](
                           StatusOr<backend::Outcome> reply) mutable {
                 onAttemptReply(id, std::move(reply), std::move(in_flight));
               }));
}

void LockService::Impl::retireAbandoned(WaiterMap::iterator it, WaiterQueue* q, bool pump) {
  const LockId lock = it->second->options.lock;
  waiters_.erase(it);
  if (q == nullptr) return;
  if (pump) pumpQueue(lock);
  maybeEraseQueue(lock);
}

void LockService::Impl::onAttemptReply(uint64_t id, StatusOr<backend::Outcome> reply,
                                       InFlight in_flight, bool handed_off) {
  const InFlight settled = std::move(in_flight);  // in flight until this function returns
  auto it = waiters_.find(id);
  if (!SL_INVARIANT(it != waiters_.end(), "lock.attempt_reply_without_waiter")) {
    return;  // attempting waiters are kept (abandoned if need be) until their reply is here
  }
  Waiter& w = *it->second;
  w.attempting = false;
  const LockId lock = w.options.lock;
  const bool queued_attempt = w.options.wait_ms > 0;
  WaiterQueue* q = queued_attempt ? queues_.find(lock) : nullptr;
  bool wake = false;
  bool wake_notified = false;
  if (q != nullptr) {
    q->attempt_in_flight = false;
    wake = std::exchange(q->wake_pending, false);
    wake_notified = std::exchange(q->wake_pending_notified, false);
    if (reply.isOk()) q->backend_error = Status::ok();
  }
  const bool granted = reply.isOk() && reply->ok();
  if (granted) {
    w.grant_unsettled = false;  // no earlier grant of ours can be there: this one would be busy
  } else if (!reply.isOk() && reply.status().outcomeUnknown()) {
    // No answer: it may have been granted all the same (unanswered.cc).
    if (w.owner_drawn) {
      w.grant_unsettled = true;
    } else if (!std::exchange(w.grant_left_to_owner, true)) {
      metrics_.unanswered_left_to_owner.Increment();  // once per acquire, not per attempt
    }
  } else if (reply.isOk() && reply->busy_reason == backend::BusyReason::kHeldByYou &&
             reply->code == backend::OutcomeCode::kBusy && w.owner_drawn) {
    // Only an earlier attempt of this waiter can hold a lease under its drawn owner id: one
    // that ran after its answer was given up on (or on another link).
    w.grant_unsettled = true;
  }
  const KindPolicy& policy = policyOf(lock.kind);
  if (q != nullptr && reply.isOk() && policy.marks_writer_waiting) {
    // Readers turned the writer away and it marked itself; a writer whose acquire got it in
    // removed every mark (those still queued mark themselves again if readers come back first).
    if (reply->writer_marked) q->writers_marked = true;
    if (granted && !handed_off) q->writers_marked = false;
  }

  if (w.abandoned) {
    // Answered already (client gone, deadline, shutdown): a late grant must not linger, nor a
    // mark this late answer set.
    if (reply.isOk() && reply->writer_marked) withdrawFromBackend(w, q);
    if (granted) {
      SL_LOG(kDebug, "lock.late_grant_released", {"name", lock.display()},
             {"owner", ownerDigest(w.options.owner)});
      releaseOrphan(lock, w.options.owner);  // wakes the queue once the backend answered
    }
    settleUnanswered(w);
    retireAbandoned(it, q, /*pump=*/!granted);  // a late grant's release wakes the queue
    return;
  }

  AcquireResult r;
  if (!reply.isOk() && q != nullptr && isTransientBackendError(reply.status())) {
    // A queued waiter rides out the outage: it keeps its place, the head retries with backoff
    // (or as soon as the backend reports ready) and onDeadline answers 503 with this error if
    // the budget runs out first. Logged by the backend, once per state change.
    if (q->backend_error.isOk()) {
      SL_LOG(kDebug, "lock.waiting_out_outage", {"name", lock.display()},
             {"error", reply.status().toString()});
    }
    q->backend_error = reply.status();
    q->holder_expiry_us = -1;
    planRetry(*q);
  } else if (!reply.isOk()) {
    r.status = reply.status().code() == StatusCode::kCancelled ? AcquireStatus::kCancelled
                                                               : AcquireStatus::kError;
    r.error = unansweredHint(w, reply.status());
    finishWaiter(w, std::move(r));
    // The next waiter gets its own attempt (and, with the backend down, its own fast failure).
    if (q != nullptr) pumpQueue(lock);
  } else if (reply->code == backend::OutcomeCode::kLimitMismatch) {
    // Not worth waiting for: the semaphore keeps its limit while permits are held.
    r.status = AcquireStatus::kLimitMismatch;
    r.semaphore_limit = reply->limit;
    finishWaiter(w, std::move(r));
    if (q != nullptr) pumpQueue(lock);
  } else if (granted) {
    recordGrant(w, *reply);
    r.status = AcquireStatus::kGranted;
    r.grant.lock = lock;
    r.grant.owner = w.options.owner;
    r.grant.token = reply->token;
    r.grant.ttl_ms = reply->validity_ms;
    if (w.options.reentrant) r.grant.holds = std::max<int64_t>(1, reply->holds);
    finishWaiter(w, std::move(r));
    if (q != nullptr && (q = queues_.find(lock)) != nullptr) {
      q->backoff.reset();
      if (policy.admits_many) {
        // Admission: a semaphore may have more permits free, readers share; the next waiter
        // asks at once and the queue sleeps only when an attempt is turned away.
        pumpQueue(lock);
      } else {
        // We hold it now: the next waiter sleeps until our release wakes it (or our TTL lapses).
        q->holder_expiry_us = scheduler_.nowUs() + reply->validity_ms * 1000;
        if (wake && policy.queue_in_backend) {
          // A fair waiter joined while this attempt was out: the next head asks now, which
          // registers it in the backend's queue (waiting for our release would let waiters of
          // other sidecars that came later in before it).
          pumpQueue(lock);
        } else {
          planRetry(*q);
        }
      }
    }
  } else {
    w.contended = true;
    w.busy_reason = reply->busy_reason;
    w.busy_holder = reply->holder;
    if (!queued_attempt && w.wait_if_busy_ms > 0) {
      queueAfterBusyTry(w, reply->holder_ttl_ms);
    } else if (!queued_attempt) {
      r.status = AcquireStatus::kBusy;
      r.retry_after_ms = retryHintMs(lock, reply->holder_ttl_ms);
      finishWaiter(w, std::move(r));
    } else if (q != nullptr) {
      q->holder_expiry_us =
          reply->holder_ttl_ms >= 0 ? scheduler_.nowUs() + reply->holder_ttl_ms * 1000 : -1;
      if (wake && !q->fifo.empty()) {
        // A release was announced while we were asking: it may have landed after our attempt.
        if (wake_notified) metrics_.wakeups.Increment();
        q->backoff.reset();
        attempt(*q->fifo.front());
      } else {
        planRetry(*q);
      }
    }
  }
  if (q != nullptr) maybeEraseQueue(lock);
}

void LockService::Impl::onDeadline(uint64_t id) {
  auto it = waiters_.find(id);
  if (it == waiters_.end() || it->second->abandoned) return;
  Waiter& w = *it->second;
  const LockId lock = w.options.lock;
  AcquireResult r;
  const WaiterQueue* q = queues_.find(lock);
  if (q != nullptr && !q->backend_error.isOk()) {
    // The budget ended with the backend still out: that is the answer, not "locked".
    r.status = AcquireStatus::kError;
    r.error = unansweredHint(w, q->backend_error);
  } else {
    r.status = AcquireStatus::kBusy;
    r.retry_after_ms = retryHintMs(lock, -1);
  }
  finishWaiter(w, std::move(r));
  pumpQueue(lock);
}

int64_t LockService::Impl::fairClaimMs() const {
  // Two of the head's retries may pass between renewals (backoff at most retry_max_ms + jitter),
  // plus slack: a waiter that died keeps its place this long at most.
  return 2 * (std::max<int64_t>(0, config_.retry_max_ms) +
              std::max<int64_t>(0, config_.retry_jitter_ms)) +
         kWriterWaitSlackMs;
}

int64_t LockService::Impl::writerMarkMs() const {
  // Until the writer's next attempt (backoff at most retry_max_ms + jitter), with slack.
  return std::max<int64_t>(0, config_.retry_max_ms) +
         std::max<int64_t>(0, config_.retry_jitter_ms) + kWriterWaitSlackMs;
}

std::string LockService::Impl::othersQueued(const WaiterQueue* q, const Waiter* except) {
  std::string owners;
  if (q == nullptr) return owners;
  for (const Waiter* other : q->fifo) {
    if (other == except || other->abandoned) continue;
    if (!owners.empty()) owners.push_back(' ');
    owners.append(other->options.owner);
  }
  return owners;
}

void LockService::Impl::withdrawFromBackend(const Waiter& w, const WaiterQueue* q) {
  InFlight in_flight = ops_.hold();
  backend::Operation op = backend::Operation::withdraw(w.options.lock.name, w.options.owner);
  // A writer's mark passes to the writers still queued here, so that readers stay out until
  // the last of them leaves (or gets in).
  const std::string others =
      policyOf(w.options.lock.kind).marks_writer_waiting ? othersQueued(q, &w) : std::string();
  op.also_waiting = others;
  // As an attempt's mark: until the next attempt, never past the last of their deadlines.
  int64_t last_deadline_us = 0;
  if (q != nullptr) {
    for (const Waiter* other : q->fifo) {
      // As othersQueued(): an abandoned waiter is leaving and keeps no mark alive.
      if (other != &w && !other->abandoned) {
        last_deadline_us = std::max(last_deadline_us, other->deadline_us);
      }
    }
  }
  op.writer_wait_ms = std::clamp<int64_t>(
      writerMarkMs(), 1, std::max<int64_t>(1, ceilMs(last_deadline_us - scheduler_.nowUs())));
  runOnBackend(w.options.lock, op,
               guarded([in_flight = std::move(in_flight)](StatusOr<backend::Outcome>) mutable {
                 in_flight.release();
               }));
}

void LockService::Impl::finishWaiter(Waiter& w, AcquireResult result) {
  w.deadline_timer.reset();
  if (result.status == AcquireStatus::kBusy) {
    result.busy_reason = w.busy_reason;
    result.holder = w.busy_holder;
    if (result.busy_reason == backend::BusyReason::kLockDelay) {
      metrics_.lock_delay_refusals.Increment();
    }
  }
  if (result.status != AcquireStatus::kGranted && w.options.wait_ms > 0) {
    // It may hold a place in the backend's queue (fair), or keep readers out (a writer that
    // readers turned away): give it up now rather than by its claim / mark lapsing (the next
    // waiter, the readers would wait for that).
    const KindPolicy& policy = policyOf(w.options.lock.kind);
    const WaiterQueue* q = queues_.find(w.options.lock);
    if (policy.queue_in_backend ||
        (policy.marks_writer_waiting && q != nullptr && q->writers_marked)) {
      withdrawFromBackend(w, q);
    }
  }
  const int64_t now = scheduler_.nowUs();
  metrics::Metrics::AcquireMetrics& m = acquireMetrics(w.options.lock.kind);
  m.wait_seconds.Observe(static_cast<double>(now - w.started_us) / 1e6);
  if (w.contended) m.contended.Increment();
  switch (result.status) {
    case AcquireStatus::kGranted:
      m.acquired.Increment();
      break;
    case AcquireStatus::kBusy:
      m.busy.Increment();
      break;
    case AcquireStatus::kTooManyWaiters:
      m.too_many_waiters.Increment();
      break;
    case AcquireStatus::kCancelled:
      m.cancelled.Increment();
      break;
    case AcquireStatus::kError:
      m.error.Increment();
      break;
    case AcquireStatus::kLimitMismatch:
      m.limit_mismatch.Increment();
      break;
  }
  detachFromQueue(w);
  std::function<void(AcquireResult)> done = std::move(w.done);
  if (w.attempting) {
    w.abandoned = true;  // kept until its attempt answers
    w.on_event = nullptr;
  } else {
    settleUnanswered(w);
    waiters_.erase(w.id);  // `w` is gone from here on
  }
  if (done)
    deliver([done = std::move(done), result = std::move(result)]() mutable {
      done(std::move(result));
    });
}

void LockService::Impl::detachFromQueue(Waiter& w) {
  if (!w.queued) return;
  if (WaiterQueue* q = queues_.find(w.options.lock)) {
    queues_.remove(*q, &w);
    updateWaiterGauge();
    maybeEraseQueue(w.options.lock);
  }
}

void LockService::Impl::maybeEraseQueue(const LockId& lock) {
  WaiterQueue* q = queues_.find(lock);
  // A queue with an attempt in flight stays until that attempt answers, so that a new queue for
  // the same name can never have two heads contending at once.
  if (q == nullptr || !q->fifo.empty() || q->attempt_in_flight) return;
  queues_.erase(lock);
  backend_.unwatchReleases(lock.name);
}

void LockService::Impl::pumpQueue(const LockId& lock) {
  WaiterQueue* q = queues_.find(lock);
  if (q == nullptr || q->fifo.empty() || q->attempt_in_flight || q->retry_timer.pending()) return;
  attempt(*q->fifo.front());
}

void LockService::Impl::planRetry(WaiterQueue& q) {
  if (q.fifo.empty() || q.attempt_in_flight) return;
  const int64_t now = scheduler_.nowUs();
  const Waiter& head = *q.fifo.front();
  const int64_t holder_ttl_ms = q.holder_expiry_us < 0 ? -1 : ceilMs(q.holder_expiry_us - now);
  const int64_t left_ms = ceilMs(head.deadline_us - now);
  // A lock-delay ends at a known time and nothing announces its end: retry right then.
  const int64_t delay = head.busy_reason == backend::BusyReason::kLockDelay && holder_ttl_ms >= 0
                            ? std::clamp<int64_t>(holder_ttl_ms, 1, std::max<int64_t>(1, left_ms))
                            : q.backoff.next(holder_ttl_ms, left_ms);
  q.retry_timer.start(scheduler_, delay, guarded([this, qp = &q] { onRetryTimer(qp); }));
}

void LockService::Impl::onRetryTimer(WaiterQueue* q) {
  // Safe: the timer lives in the queue, so it cannot fire after the queue was erased.
  if (!q->fifo.empty() && !q->attempt_in_flight) attempt(*q->fifo.front());
}

void LockService::Impl::wakeQueue(const LockId& lock, bool notified) {
  WaiterQueue* q = queues_.find(lock);
  if (q == nullptr || q->fifo.empty()) return;
  if (q->attempt_in_flight) {
    q->wake_pending = true;
    q->wake_pending_notified = q->wake_pending_notified || notified;
    return;
  }
  // Counted only when the notification is what set the head going (our own releases wake it
  // directly, and their echo through the backend then finds the attempt already in flight).
  if (notified) metrics_.wakeups.Increment();
  q->retry_timer.reset();
  q->backoff.reset();
  q->holder_expiry_us = -1;
  attempt(*q->fifo.front());
}

void LockService::Impl::wakeLockQueues(const LockId& lock, bool notified) {
  // Every queue waiting for the same backend lease, writers first: their attempts reach the
  // backend first (one connection, in order), so a queued writer takes a lock freed by its last
  // reader before queued readers start a new group of readers (writer preference; the mark went
  // with the readers' key).
  LockId queue{lock.kind, lock.name};
  for (LockKind kind : policyOf(lock.kind).lease_sharers) {
    queue.kind = kind;
    wakeQueue(queue, notified);
  }
}

void LockService::Impl::wakeAfterRelease(const LockId& lock, const backend::Outcome& released) {
  // Writers, readers and fair waiters of one name wait in their own queues: a writer gone lets
  // any of them in, the last reader gone too (other sidecars hear it from the announcement); a
  // reader that leaves others behind lets nobody in.
  if (policyOf(lock.kind).holders_share_one_lease && released.used > 0) {
    return wakeQueue(lock, false);
  }
  wakeLockQueues(lock, false);
}

metrics::Metrics::AcquireMetrics& LockService::Impl::acquireMetrics(LockKind kind) {
  metrics::Metrics::AcquireMetrics*& m = acquire_metrics_[static_cast<size_t>(kind)];
  if (m == nullptr) m = &metrics_.acquireFor(backend::lockKindName(kind));
  return *m;
}

void LockService::Impl::runOnBackend(const LockId& lock, backend::Operation op,
                                     backend::OutcomeCallback cb) {
  op.kind = lock.kind;
  op.name = lock.name;
  backend_.run(op, std::move(cb));
}

void LockService::Impl::onBackendReady() {
  // Give-backs first: in this turn they go out ahead of the waiters' attempts.
  unanswered_.retryAll();
  for (const LockId& lock : queues_.locks()) {
    const WaiterQueue* q = queues_.find(lock);
    if (q != nullptr && !q->backend_error.isOk()) wakeQueue(lock, /*notified=*/false);
  }
}

void LockService::Impl::releaseOrphan(const LockId& lock, const std::string& owner) {
  runOnBackend(lock, backend::Operation::release(lock.name, owner),
               guarded([in_flight = ops_.hold(), this, lock](StatusOr<backend::Outcome> r) mutable {
                 const InFlight settled = std::move(in_flight);
                 // Either way the queue was paused for this release: get its head going again.
                 if (r.isOk() && r->ok()) {
                   wakeQueue(lock, false);
                 } else {
                   pumpQueue(lock);
                 }
               }));
}

int64_t LockService::Impl::retryHintMs(const LockId& lock, int64_t holder_ttl_ms) {
  if (holder_ttl_ms >= 0) return std::max<int64_t>(1, holder_ttl_ms);
  const int64_t now = scheduler_.nowUs();
  if (WaiterQueue* q = queues_.find(lock); q != nullptr && q->holder_expiry_us >= 0) {
    return std::max<int64_t>(1, ceilMs(q->holder_expiry_us - now));
  }
  if (Lease* lease = leases_.find(lock)) {
    return std::max<int64_t>(1, ceilMs(lease->expiry_us - now));
  }
  return std::max<int64_t>(1, config_.retry_max_ms);
}

void LockService::Impl::acquireAllAtOnce(
    const MultiAcquireOptions& options,
    std::function<void(StatusOr<backend::AllOutcome>, std::vector<Grant>)> done) {
  if (stopping_) {
    deliver([done = std::move(done)] { done(cancelled("the sidecar is shutting down"), {}); });
    return;
  }
  const int64_t started_us = scheduler_.nowUs();
  backend_.acquireAll(
      options.names, options.owner, options.ttl_ms, options.holder,
      guarded([in_flight = ops_.hold(), this, options, started_us,
               done = std::move(done)](StatusOr<backend::AllOutcome> reply) mutable {
        const InFlight settled = std::move(in_flight);
        std::vector<Grant> grants;
        if (reply.isOk() && reply->granted && reply->tokens.size() == options.names.size()) {
          const double waited_s = static_cast<double>(scheduler_.nowUs() - started_us) / 1e6;
          for (size_t i = 0; i < options.names.size(); ++i) {
            // The bookkeeping of a one-name grant: lease, renewal, gauges, metrics.
            Waiter w;
            w.options.lock = LockId{LockKind::kMutex, options.names[i]};
            w.options.owner = options.owner;
            w.options.ttl_ms = options.ttl_ms;
            w.options.auto_renew = options.auto_renew;
            w.options.max_hold_ms = options.max_hold_ms;
            w.options.holder = options.holder;  // the lease counts for it (held_locks_by_holder)
            w.started_us = started_us;
            backend::Outcome one;
            one.code = backend::OutcomeCode::kOk;
            one.token = reply->tokens[i];
            one.validity_ms = reply->validity_ms;
            one.holds = 1;
            recordGrant(w, one);
            metrics::Metrics::AcquireMetrics& m = acquireMetrics(LockKind::kMutex);
            m.acquired.Increment();
            m.wait_seconds.Observe(waited_s);
            grants.push_back({w.options.lock, options.owner, one.token, one.validity_ms, 0});
          }
        }
        deliver(
            [done = std::move(done), reply = std::move(reply),
             grants = std::move(grants)]() mutable { done(std::move(reply), std::move(grants)); });
      }));
}

}  // namespace sidelock::lock
