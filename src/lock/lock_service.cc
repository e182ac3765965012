// LockService: the public facade, the service's plumbing (deferred callbacks) and shutdown.
// Acquire and waiting live in waiting.cc; release, hand-off, extend and inspect in release.cc;
// the lease lifecycle (grant bookkeeping, watchdog renewal, expiry, loss) in watchdog.cc.
#include "lock/lock_service.h"

#include <algorithm>
#include <utility>

#include "common/log.h"
#include "lock/kinds/kind_policy.h"
#include "lock/lock_service_impl.h"

namespace sidelock::lock {

namespace {

ChangeReason changeReasonOf(std::string_view payload) {
  namespace a = backend::announcement;
  if (payload == a::kForced) return ChangeReason::kForced;
  if (payload == a::kGranted) return ChangeReason::kGranted;
  if (payload == a::kProclaimed) return ChangeReason::kProclaimed;
  if (payload == a::kRolledBack) return ChangeReason::kRolledBack;
  if (payload == a::kResubscribed) return ChangeReason::kCatchUp;
  return ChangeReason::kReleased;  // "released", or an older sidecar's payload (the lock's name)
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Facade

LockService::LockService(const config::LocksConfig& config, backend::Backend& backend,
                         event::Scheduler& scheduler, metrics::Metrics& metrics)
    : impl_(std::make_unique<Impl>(config, backend, scheduler, metrics)) {}

LockService::~LockService() = default;

AcquireTicket LockService::acquire(AcquireOptions options, std::function<void(AcquireResult)> done,
                                   std::function<void(LeaseEvent)> on_event) {
  return impl_->acquire(std::move(options), std::move(done), std::move(on_event));
}

void LockService::release(const LockId& lock, std::string_view owner,
                          std::function<void(StatusOr<ReleaseStatus>)> done, ReleaseMode mode) {
  impl_->release(lock, owner, std::move(done), mode);
}

void LockService::releaseUnhealthy(const LockId& lock, std::string_view owner, UnhealthyEnd how) {
  impl_->releaseUnhealthy(lock, owner, how);
}

void LockService::extend(const LockId& lock, std::string_view owner, int64_t ttl_ms,
                         std::function<void(StatusOr<ExtendResult>)> done) {
  impl_->extend(lock, owner, ttl_ms, std::move(done));
}

void LockService::inspect(const LockId& lock, std::function<void(StatusOr<LockState>)> done) {
  impl_->inspect(lock, std::move(done));
}

void LockService::proclaim(const LockId& lock, std::string_view owner, std::string_view value,
                           std::function<void(StatusOr<ProclaimResult>)> done) {
  impl_->proclaim(lock, owner, value, std::move(done));
}

ChangeWatch LockService::watchChanges(std::string_view name,
                                      std::function<void(ChangeReason)> on_change) {
  return impl_->watchChanges(name, std::move(on_change));
}

void LockService::forceRelease(std::string_view name,
                               std::function<void(StatusOr<ForcedRelease>)> done) {
  impl_->forceRelease(name, std::move(done));
}

std::vector<LeaseInfo> LockService::leases() const { return impl_->leases(); }
int64_t LockService::holds(const LockId& lock, std::string_view owner) const {
  return impl_->holds(lock, owner);
}
int64_t LockService::validityLeftMs(const LockId& lock, std::string_view owner) const {
  return impl_->validityLeftMs(lock, owner);
}
std::vector<WaiterCount> LockService::waiterCounts() const { return impl_->waiterCounts(); }
bool LockService::lostLately(const LockId& lock, std::string_view owner) {
  return impl_->lostLately(lock, owner);
}
const char* LockService::lossReason() const { return impl_->lossReason(); }

BackendHealth LockService::backendHealth() const { return impl_->backendHealth(); }

void LockService::shutdown(bool release_held, int64_t grace_ms, std::function<void()> done) {
  impl_->shutdown(release_held, grace_ms, std::move(done));
}

void LockService::cancelWaiters() { impl_->cancelWaiters(); }

// ---------------------------------------------------------------------------------------------
// Plumbing

LockService::Impl::Impl(const config::LocksConfig& config, backend::Backend& backend,
                        event::Scheduler& scheduler, metrics::Metrics& metrics)
    : config_(config),
      backend_(backend),
      scheduler_(scheduler),
      metrics_(metrics),
      queues_(config.retry_min_ms, config.retry_max_ms, config.retry_jitter_ms),
      lost_(kLostLeaseCapacity, kLostLeaseRetentionUs),
      unanswered_(unansweredRetries()) {
  backend_.setReleaseListener(guarded([this](std::string_view name, std::string_view payload) {
    const ChangeReason reason = changeReasonOf(payload);
    if (backend::announcement::freesLock(payload)) {
      // A release of any kind of lock of that name (a freed permit, a freed mutex: writers and
      // readers wait for that one, the last reader gone). Writers first
      // (KindPolicy::lease_sharers). A grant frees nothing: no waiter wakes for it.
      // A resubscription (announcements may have been missed) wakes them too, but is no
      // release notification (sidelock_wakeups_total counts those).
      const bool notified = payload != backend::announcement::kResubscribed;
      LockId lock{LockKind::kMutex, std::string(name)};
      for (LockKind kind : kindsInWakeOrder()) {
        lock.kind = kind;
        wakeQueue(lock, notified);
      }
    }
    notifyChangeWatchers(name, reason);
  }));
  backend_.setReadyListener(guarded([this] {
    onBackendReady();
    // Announcements made while the backend was out were missed: every watcher reads again.
    for (const auto& [name, watchers] : change_watchers_) {
      notifyChangeWatchers(name, ChangeReason::kCatchUp);
    }
  }));
  // A shutdown waits for the backend calls in flight (or its grace period).
  ops_.onDrained([this] { maybeFinishShutdown(); });
  // The hook outlives this service inside Metrics: `alive_` tells it the service is gone.
  metrics_.addScrapeHook(alive_.guarded([this] {
    updateOldestLeaseAge();
    updateHeldByHolder();
  }));
}

// Timers die with their owners (ScopedTimer); backend replies and posted callbacks still queued
// see `alive_` expired and do nothing. The backend is not touched here: it may already be gone.
LockService::Impl::~Impl() = default;

ChangeWatch LockService::Impl::watchChanges(std::string_view name,
                                            std::function<void(ChangeReason)> on_change) {
  auto [it, created] = change_watchers_.try_emplace(std::string(name));
  if (created) backend_.watchReleases(name);
  const uint64_t id = ++next_change_watch_id_;
  it->second.emplace_back(id, std::move(on_change));
  return ChangeWatch(alive_.guarded([this, n = it->first, id] { unwatchChanges(n, id); }));
}

void LockService::Impl::unwatchChanges(const std::string& name, uint64_t id) {
  auto it = change_watchers_.find(name);
  if (it == change_watchers_.end()) return;
  std::erase_if(it->second, [id](const auto& w) { return w.first == id; });
  if (!it->second.empty()) return;
  change_watchers_.erase(it);
  backend_.unwatchReleases(name);
}

void LockService::Impl::notifyChangeWatchers(std::string_view name, ChangeReason reason) {
  auto it = change_watchers_.find(std::string(name));
  if (it == change_watchers_.end()) return;
  // Delivered after this turn's bookkeeping, by id: a watcher removed meanwhile is skipped.
  for (const auto& [id, fn] : it->second) {
    deliver([this, n = it->first, watch_id = id, reason] {
      auto found = change_watchers_.find(n);
      if (found == change_watchers_.end()) return;
      for (auto& [other_id, callback] : found->second) {
        if (other_id == watch_id) return callback(reason);
      }
    });
  }
}

void LockService::Impl::deliver(std::function<void()> fn) {
  if (depth_.inside()) {
    deferred_.push_back(std::move(fn));
    return;
  }
  scheduler_.post(alive_.guarded(std::move(fn)));
}

bool LockService::Impl::drain() {
  const event::LivenessToken::Ref alive = alive_.ref();
  while (!deferred_.empty()) {
    std::function<void()> fn = std::move(deferred_.front());
    deferred_.pop_front();
    fn();
    if (alive.expired()) return false;
  }
  return true;
}

void LockService::Impl::updateWaiterGauge() {
  metrics_.waiters.Set(static_cast<double>(queues_.total()));
}

// ---------------------------------------------------------------------------------------------
// Shutdown

void LockService::Impl::cancelWaiters() {
  std::vector<uint64_t> ids;
  ids.reserve(waiters_.size());
  for (const auto& [id, w] : waiters_) {
    if (!w->abandoned) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());  // answer in arrival order
  for (uint64_t id : ids) {
    auto it = waiters_.find(id);
    if (it == waiters_.end()) continue;
    AcquireResult r;
    r.status = AcquireStatus::kCancelled;
    r.error = cancelled("sidelock is shutting down");
    finishWaiter(*it->second, std::move(r));
  }
}

void LockService::Impl::shutdown(bool release_held, int64_t grace_ms, std::function<void()> done) {
  if (stopping_) {  // a second call just waits for the first to finish
    if (done) deliver(std::move(done));
    return;
  }
  stopping_ = true;
  shutdown_done_ = std::move(done);
  SL_LOG(kInfo, "lock.shutdown", {"leases", static_cast<unsigned long>(leases_.size())},
         {"waiters", static_cast<unsigned long>(queues_.total())}, {"release_held", release_held});

  cancelWaiters();
  // Unanswered grants still to give back: one last try each (the backend may be back; a
  // refusal now gives up, giveBackUnanswered).
  unanswered_.retryAll();

  for (const auto& key : leases_.keys()) {
    Lease* lease = leases_.find(key.first, key.second);
    if (lease == nullptr) continue;
    stopRenewal(*lease);
    if (!release_held) continue;
    // Given up for its app's health: released already, or running out under a holder that may
    // still be stopping its process (releaseUnhealthy, kRunOut), which a release now would hand
    // the lock on under.
    if (lease->unhealthy) continue;
    // Every hold of a re-entered lease (pipelined in order: the last one frees the lock).
    auto send = [this, lock = key.first, owner = lease->owner,
                 holds = std::max<int64_t>(1, lease->holds)] {
      for (int64_t i = 0; i < holds; ++i) {
        sendRelease(lock, owner, nullptr, /*client_request=*/false);
      }
    };
    if (lease->renew_in_flight) {
      lease->after_renewal.push_back(std::move(send));
    } else {
      send();
    }
  }

  grace_timer_.start(scheduler_, std::max<int64_t>(0, grace_ms), guarded([this] {
                       if (!shutdown_done_) return;
                       SL_LOG(kWarn, "lock.shutdown_grace_expired",
                              {"pending_ops", static_cast<long long>(ops_.inFlight())});
                       deliver(std::exchange(shutdown_done_, nullptr));
                     }));
  maybeFinishShutdown();
}

void LockService::Impl::maybeFinishShutdown() {
  if (!stopping_ || !shutdown_done_ || !ops_.idle()) return;
  grace_timer_.reset();
  deliver(std::exchange(shutdown_done_, nullptr));
}

}  // namespace sidelock::lock
