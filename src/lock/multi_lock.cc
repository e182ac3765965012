// Multi-locks: every name or none, built on the one-name acquire. The names are taken in sorted
// order, the same on every sidecar: a multi-lock only ever waits for a name while holding names
// that sort before it, so no two multi-locks (or a multi-lock and plain locks) can wait for each
// other in a cycle. What a failed multi-lock took is given back before it answers.
#include <algorithm>
#include <memory>
#include <utility>

#include "common/log.h"
#include "common/random.h"
#include "event/scheduler.h"
#include "lock/lock_service.h"
#include "lock/lock_service_impl.h"

namespace sidelock::lock {
namespace {

/// One multi-lock acquire in progress. Owned by the callbacks it has handed out (the current
/// one-name acquire, the extends), so it lives exactly as long as something can still answer.
class MultiAcquire : public std::enable_shared_from_this<MultiAcquire> {
 public:
  MultiAcquire(LockService& service, LockService::Impl& impl, MultiAcquireOptions options,
               bool owner_drawn, std::function<void(MultiAcquireResult)> done)
      : service_(service),
        impl_(impl),
        scheduler_(impl.scheduler()),
        options_(std::move(options)),
        owner_drawn_(owner_drawn),
        done_(std::move(done)),
        deadline_us_(scheduler_.nowUs() + options_.wait_ms * 1000) {}

  void start() {
    // One atomic try where the backend keeps every lock on one node; names taken one by one
    // (in the global order) where it does not, or when the try found one held and we may wait.
    // (Not past local waiters of any of the names: like a single try, it must not jump them.)
    if (impl_.acquiresAllAtOnce() && options_.names.size() > 1 &&
        std::none_of(options_.names.begin(), options_.names.end(), [this](const std::string& n) {
          return impl_.hasLocalWaiters(LockId{LockKind::kMutex, n});
        })) {
      impl_.acquireAllAtOnce(options_, [self = shared_from_this()](StatusOr<backend::AllOutcome> r,
                                                                   std::vector<Grant> grants) {
        self->onAllAtOnce(std::move(r), std::move(grants));
      });
      return;
    }
    takeNext();
  }

  /// The client went away: stop, and give back what was taken.
  void cancel() {
    if (finished_) return;
    MultiAcquireResult r;
    r.status = AcquireStatus::kCancelled;
    // Answered on a later turn, like every acquire: never inside the caller's cancel().
    auto done = std::exchange(done_, nullptr);
    fail(std::move(r));
    if (done) {
      scheduler_.post([done = std::move(done)] {
        MultiAcquireResult cancelled;
        cancelled.status = AcquireStatus::kCancelled;
        done(std::move(cancelled));
      });
    }
  }

 private:
  void takeNext() {
    if (next_ == options_.names.size()) return checkValidity();
    AcquireOptions o;
    o.lock = LockId{LockKind::kMutex, options_.names[next_]};
    o.owner = options_.owner;
    o.ttl_ms = options_.ttl_ms;
    // A single try stays a single try for every name; a wait shares one budget.
    o.wait_ms =
        options_.wait_ms > 0 ? std::max<int64_t>(1, ceilMs(deadline_us_ - scheduler_.nowUs())) : 0;
    o.auto_renew = options_.auto_renew;
    o.max_hold_ms = options_.max_hold_ms;
    o.holder = options_.holder;
    o.owner_drawn = owner_drawn_;
    o.unanswered_before = all_at_once_unanswered_;
    started_ = next_ + 1;
    current_ = service_.acquire(std::move(o), [self = shared_from_this()](AcquireResult r) {
      self->onTaken(std::move(r));
    });
  }

  void onAllAtOnce(StatusOr<backend::AllOutcome> r, std::vector<Grant> grants) {
    // No answer (timeout, lost link): the script may have run and granted every name.
    const bool unanswered = !r.isOk() && r.status().outcomeUnknown();
    // Under a drawn owner id, nothing else of ours can be there: each name's possible grant is
    // given back by the service, with retries while the backend is out (unanswered.cc), before
    // the name is tried again under that owner, or after the last try. See giveBackUntried().
    all_at_once_unanswered_ = unanswered && owner_drawn_;
    if (finished_) {  // cancelled meanwhile: what was granted goes back
      const int64_t now = scheduler_.nowUs();
      for (const Grant& g : grants) giveBack(g, now);
      giveBackUntried();
      return;
    }
    if (!grants.empty()) {
      grants_ = std::move(grants);
      granted_us_.assign(grants_.size(), scheduler_.nowUs());
      next_ = options_.names.size();
      return succeed();
    }
    if (unanswered && !owner_drawn_) {
      // The caller's owner id: give them back once (owner-checked), and go on (ask for the first
      // name, or answer) only once those releases have answered. Sent together with the next
      // acquire under that owner (ours, or the caller's retry after our answer), a release that
      // must be retried (NOSCRIPT: the script cache was flushed) would run after the new grant
      // and free it.
      service_.releaseAll(
          options_.names, options_.owner,
          [self = shared_from_this(), r = std::move(r)](std::vector<StatusOr<ReleaseStatus>>) {
            if (!self->finished_) self->afterTry(r);
          });
      return;
    }
    afterTry(r);
  }

  /// After a one-step try that granted nothing: answer (no wait) or take the names one by one.
  void afterTry(const StatusOr<backend::AllOutcome>& r) {
    if (options_.wait_ms == 0) {
      MultiAcquireResult failed;
      if (r.isOk()) {
        failed.status = AcquireStatus::kBusy;
        failed.blocked_by = options_.names[std::min(r->busy_index, options_.names.size() - 1)];
        failed.retry_after_ms = std::max<int64_t>(1, r->holder_ttl_ms >= 0 ? r->holder_ttl_ms : 1);
      } else {
        failed.status = r.status().code() == StatusCode::kCancelled ? AcquireStatus::kCancelled
                                                                    : AcquireStatus::kError;
        failed.error = r.status();
      }
      return fail(std::move(failed));
    }
    takeNext();  // wait for them name by name, in the global order
  }

  void onTaken(AcquireResult r) {
    current_.release();
    if (finished_) {
      // Cancelled or failed while this grant was on its way to us (the service gives back only
      // a grant that is still in flight when cancelled): nobody will hold it, give it back.
      if (r.status == AcquireStatus::kGranted) giveBack(r.grant, scheduler_.nowUs());
      return;
    }
    if (r.status != AcquireStatus::kGranted) {
      MultiAcquireResult failed;
      failed.status = r.status;
      failed.blocked_by = options_.names[next_];
      failed.retry_after_ms = r.retry_after_ms;
      failed.limit = r.limit;
      failed.error = r.error;
      return fail(std::move(failed));
    }
    grants_.push_back(std::move(r.grant));
    granted_us_.push_back(scheduler_.nowUs());
    ++next_;
    if (next_ < options_.names.size() && options_.wait_ms > 0 && !options_.auto_renew &&
        !keep_alive_.pending()) {
      planKeepAlive();
    }
    takeNext();
  }

  /// While later names are waited for, the leases already taken are extended every third of
  /// their TTL (auto_renew leases have their own watchdog), so waiting longer than a TTL loses
  /// nothing. One that turns out lost fails the whole acquire.
  void planKeepAlive() {
    keep_alive_.start(scheduler_, std::max<int64_t>(1, options_.ttl_ms / 3),
                      [weak = weak_from_this()] {
                        if (auto self = weak.lock()) self->keepAlive();
                      });
  }

  void keepAlive() {
    if (finished_ || next_ == options_.names.size()) return;
    for (size_t i = 0; i < grants_.size(); ++i) extendGrant(i, /*final=*/false);
    planKeepAlive();
  }

  /// Extends grant `i` to the multi-lock's TTL (owner-checked); answered in onExtended, always
  /// on a later turn, so counting it here before the next one is sent is safe.
  void extendGrant(size_t i, bool final) {
    ++extends_pending_;
    service_.extend(grants_[i].lock, options_.owner, options_.ttl_ms,
                    [self = shared_from_this(), i, final](StatusOr<ExtendResult> r) {
                      self->onExtended(i, std::move(r), final);
                    });
  }

  /// Leases taken first may have run down while later names were waited for: those below half
  /// their TTL are extended (owner-checked) before the grant is answered, so the caller gets
  /// every lease with a useful validity, or none.
  void checkValidity() {
    keep_alive_.reset();
    if (extends_pending_ > 0) {
      // Keep-alive extends still out: decide once they are back (they refresh the TTLs).
      check_after_extends_ = true;
      return;
    }
    for (const Grant& g : grants_) {
      if (service_.holds(g.lock, options_.owner) == 0) {
        // This sidecar saw it lost while the later names were waited for (renewal found it
        // gone, force release): the multi-lock does not hold every name.
        MultiAcquireResult lost;
        lost.status = AcquireStatus::kBusy;
        lost.blocked_by = g.lock.name;
        return fail(std::move(lost));
      }
    }
    const int64_t now = scheduler_.nowUs();
    for (size_t i = 0; i < grants_.size(); ++i) {
      const int64_t left_ms = grants_[i].ttl_ms - (now - granted_us_[i]) / 1000;
      if (left_ms * 2 < options_.ttl_ms) extendGrant(i, /*final=*/true);
    }
    if (extends_pending_ == 0) succeed();
  }

  /// `final`: the extends before the answer (succeed once all are back); else a keep-alive.
  void onExtended(size_t i, StatusOr<ExtendResult> r, bool final) {
    --extends_pending_;
    if (finished_) return;
    if (r.isOk() && r->status == ExtendStatus::kExtended) {
      grants_[i].ttl_ms = r->ttl_ms;
      granted_us_[i] = scheduler_.nowUs();
    } else if (!final && !r.isOk() &&
               (r.status().code() == StatusCode::kUnavailable ||
                r.status().code() == StatusCode::kDeadlineExceeded)) {
      // A keep-alive the backend could not answer (down, no reply in time: an outage, which a
      // waiting acquire rides out; not an error reply, which would fail every keep-alive): the
      // lease is not known lost. The next keep-alive tries again; one that runs out
      // meanwhile is lost to the lease table, and checkValidity() fails the multi-lock then.
      SL_LOG(kDebug, "lock.multi_keep_alive_failed", {"name", grants_[i].lock.name},
             {"error", r.status().message()});
    } else if (extend_failure_.blocked_by.empty()) {
      // Lost while the later names were waited for: the whole acquire fails.
      extend_failure_.status = r.isOk() ? AcquireStatus::kBusy : AcquireStatus::kError;
      extend_failure_.blocked_by = grants_[i].lock.name;
      if (!r.isOk()) extend_failure_.error = r.status();
    }
    if (!extend_failure_.blocked_by.empty()) return fail(std::move(extend_failure_));
    if (extends_pending_ > 0) return;
    if (final) return succeed();
    if (std::exchange(check_after_extends_, false)) checkValidity();
  }

  void succeed() {
    finished_ = true;
    keep_alive_.reset();
    const int64_t now = scheduler_.nowUs();
    MultiAcquireResult r;
    r.status = AcquireStatus::kGranted;
    r.owner = options_.owner;
    r.ttl_ms = INT64_MAX;
    for (size_t i = 0; i < grants_.size(); ++i) {
      r.ttl_ms = std::min(r.ttl_ms, grants_[i].ttl_ms - (now - granted_us_[i]) / 1000);
    }
    r.ttl_ms = std::max<int64_t>(1, r.ttl_ms);
    r.grants = std::move(grants_);
    if (done_) std::exchange(done_, nullptr)(std::move(r));
  }

  /// After an unanswered all-at-once try under a drawn owner id: the names no one-name acquire
  /// was started for (those give back their own) may hold that try's grant. Nothing of this
  /// multi-lock will ask for them again, so the service's retried give-back cannot free a newer
  /// grant of ours.
  void giveBackUntried() {
    if (!all_at_once_unanswered_) return;
    // Its TTL counted from now, not from the try: a try held up in a stalled Redis (or unsent
    // until the link came up) grants for a whole TTL from when it ran. Retries past its real end
    // only cost a release that finds nothing.
    const int64_t until_us = scheduler_.nowUs() + options_.ttl_ms * 1000;
    for (size_t i = started_; i < options_.names.size(); ++i) {
      impl_.giveBackUnansweredGrant(LockId{LockKind::kMutex, options_.names[i]}, options_.owner,
                                    until_us);
    }
    all_at_once_unanswered_ = false;
  }

  /// Releases a name this multi-lock was granted (at `granted_us`) and will not keep. A release
  /// the backend could not answer (an outage) would leave the name held by nobody until its TTL
  /// (found from outside on Redis Cluster: a name taken just before a master died stayed held
  /// 5 s after the 503). Under an owner id the service drew, it is given back as an unanswered
  /// grant: retried until the backend is back, or the lease's TTL has ended it. The caller's own
  /// owner id is not: the caller may already hold that name again under it, and a late release
  /// would free that grant.
  void giveBack(const Grant& g, int64_t granted_us) {
    const int64_t until_us = granted_us + g.ttl_ms * 1000;
    service_.release(g.lock, options_.owner,
                     [&impl = impl_, lock = g.lock, owner = options_.owner, drawn = owner_drawn_,
                      until_us](StatusOr<ReleaseStatus> released) {
                       if (drawn && !released.isOk()) {
                         impl.giveBackUnansweredGrant(lock, owner, until_us);
                       }
                     });
  }

  void fail(MultiAcquireResult r) {
    finished_ = true;
    keep_alive_.reset();
    current_.cancel();
    giveBackUntried();
    if (!grants_.empty()) {
      SL_LOG(kDebug, "lock.multi_given_back", {"blocked_by", r.blocked_by},
             {"given_back", static_cast<unsigned long>(grants_.size())});
    }
    for (size_t i = 0; i < grants_.size(); ++i) giveBack(grants_[i], granted_us_[i]);
    grants_.clear();
    if (done_) std::exchange(done_, nullptr)(std::move(r));
  }

  LockService& service_;
  LockService::Impl& impl_;
  event::Scheduler& scheduler_;
  MultiAcquireOptions options_;
  const bool owner_drawn_;  // the service drew options_.owner: no caller knows it
  std::function<void(MultiAcquireResult)> done_;
  const int64_t deadline_us_;
  size_t next_ = 0;
  size_t started_ = 0;  // names a one-name acquire was started for (0..started_-1)
  // The all-at-once try got no answer under a drawn owner id (onAllAtOnce).
  bool all_at_once_unanswered_ = false;
  AcquireTicket current_;
  std::vector<Grant> grants_;
  std::vector<int64_t> granted_us_;
  int extends_pending_ = 0;
  bool check_after_extends_ = false;  // all names taken while keep-alive extends were out
  event::ScopedTimer keep_alive_;
  MultiAcquireResult extend_failure_;
  bool finished_ = false;
};

}  // namespace

AcquireTicket LockService::acquireAll(MultiAcquireOptions options,
                                      std::function<void(MultiAcquireResult)> done) {
  std::sort(options.names.begin(), options.names.end());
  options.names.erase(std::unique(options.names.begin(), options.names.end()), options.names.end());
  if (options.names.empty()) {
    impl_->scheduler().post([done = std::move(done)] {
      MultiAcquireResult r;
      r.status = AcquireStatus::kError;
      r.error = invalidArgument("a multi-lock needs at least one name");
      done(std::move(r));
    });
    return AcquireTicket();
  }
  const bool owner_drawn = options.owner.empty();
  if (owner_drawn) options.owner = randomOwnerId();
  if (options.ttl_ms <= 0) options.ttl_ms = impl_->config().default_ttl_ms;
  options.wait_ms =
      std::clamp<int64_t>(options.wait_ms, 0, std::max<int64_t>(0, impl_->config().max_wait_ms));
  auto multi = std::make_shared<MultiAcquire>(*this, *impl_, std::move(options), owner_drawn,
                                              std::move(done));
  multi->start();
  return AcquireTicket([weak = std::weak_ptr<MultiAcquire>(multi)] {
    if (auto m = weak.lock()) m->cancel();
  });
}

void LockService::releaseAll(std::vector<std::string> names, std::string owner,
                             std::function<void(std::vector<StatusOr<ReleaseStatus>>)> done) {
  struct Collect {
    std::vector<StatusOr<ReleaseStatus>> results;
    size_t pending = 0;
    std::function<void(std::vector<StatusOr<ReleaseStatus>>)> done;
  };
  auto c = std::make_shared<Collect>();
  c->results.assign(names.size(), StatusOr<ReleaseStatus>(ReleaseStatus::kNotHeld));
  c->pending = names.size();
  c->done = std::move(done);
  if (names.empty()) {
    impl_->scheduler().post([c] { c->done({}); });
    return;
  }
  for (size_t i = 0; i < names.size(); ++i) {
    release(LockId{LockKind::kMutex, std::move(names[i])}, owner,
            [c, i](StatusOr<ReleaseStatus> r) {
              c->results[i] = std::move(r);
              if (--c->pending == 0) c->done(std::move(c->results));
            });
  }
}

}  // namespace sidelock::lock
