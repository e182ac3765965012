// LockService on a FakeScheduler + MemoryBackend (wrapped by TestBackend): pure, fast and
// deterministic. Time only moves when a test moves it.
#include "lock/lock_service.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/rate_limited_log.h"
#include "event/fake_scheduler.h"
#include "lock/lease_table.h"
#include "lock_test_backend.h"
#include "metrics/metrics.h"
#include "support/log_capture.h"

namespace sidelock::lock {
namespace {

using testing::TestBackend;

LockId mutexLock(std::string name) { return LockId{LockKind::kMutex, std::move(name)}; }
LockId sharedLock(std::string name) { return LockId{LockKind::kShared, std::move(name)}; }
LockId fairLock(std::string name) { return LockId{LockKind::kFair, std::move(name)}; }

/// Collects the outcome of one acquire.
struct Outcome {
  std::optional<AcquireResult> result;
  int64_t answered_us = 0;
  std::vector<LeaseEvent> events;
  AcquireTicket ticket;
  bool done() const { return result.has_value(); }
  AcquireStatus status() const { return result->status; }
  const Grant& grant() const { return result->grant; }
};

class LockServiceTest : public ::testing::Test {
 protected:
  LockServiceTest() { make(); }

  void make() {
    cfg.retry_min_ms = 2;
    cfg.retry_max_ms = 500;
    svc.reset();
    svc = std::make_unique<LockService>(cfg, backend, sched, metrics);
  }

  static AcquireOptions opts(std::string name, std::string owner, int64_t ttl_ms,
                             int64_t wait_ms = 0) {
    return opts(mutexLock(std::move(name)), std::move(owner), ttl_ms, wait_ms);
  }
  static AcquireOptions opts(LockId lock, std::string owner, int64_t ttl_ms, int64_t wait_ms = 0) {
    AcquireOptions o;
    o.lock = std::move(lock);
    o.owner = std::move(owner);
    o.ttl_ms = ttl_ms;
    o.wait_ms = wait_ms;
    return o;
  }

  /// Starts an acquire; the outcome fills in as the scheduler runs.
  std::shared_ptr<Outcome> start(AcquireOptions options) {
    auto out = std::make_shared<Outcome>();
    std::weak_ptr<Outcome> w = out;
    out->ticket = svc->acquire(
        std::move(options),
        [w, this](AcquireResult r) {
          if (auto o = w.lock()) {
            EXPECT_FALSE(o->result) << "done ran twice";
            o->result = std::move(r);
            o->answered_us = sched.nowUs();
          }
        },
        [w](LeaseEvent e) {
          if (auto o = w.lock()) o->events.push_back(e);
        });
    EXPECT_FALSE(out->done()) << "done ran inside acquire()";
    return out;
  }
  std::shared_ptr<Outcome> acquireNow(AcquireOptions o) {
    auto out = start(std::move(o));
    sched.runReady();
    EXPECT_TRUE(out->done());
    return out;
  }

  StatusOr<ReleaseStatus> release(std::string_view name, std::string_view owner) {
    return release(mutexLock(std::string(name)), owner);
  }
  StatusOr<ReleaseStatus> release(const LockId& lock, std::string_view owner) {
    std::optional<StatusOr<ReleaseStatus>> r;
    svc->release(lock, owner, [&](StatusOr<ReleaseStatus> v) { r.emplace(std::move(v)); });
    EXPECT_FALSE(r) << "done ran inside release()";
    sched.runReady();
    EXPECT_TRUE(r);
    return std::move(*r);
  }
  StatusOr<ExtendResult> extend(std::string_view name, std::string_view owner, int64_t ttl) {
    std::optional<StatusOr<ExtendResult>> r;
    svc->extend(mutexLock(std::string(name)), owner, ttl,
                [&](StatusOr<ExtendResult> v) { r.emplace(std::move(v)); });
    sched.runReady();
    EXPECT_TRUE(r);
    return std::move(*r);
  }
  LockState inspect(std::string_view name) { return inspect(mutexLock(std::string(name))); }
  LockState inspect(const LockId& lock) {
    std::optional<StatusOr<LockState>> r;
    svc->inspect(lock, [&](StatusOr<LockState> v) { r.emplace(std::move(v)); });
    sched.runReady();
    EXPECT_TRUE(r && r->isOk());
    return r->value();
  }
  /// Advances in small steps so timers interleave the way they would on a real loop.
  void advance(int64_t ms, int64_t step = 1) {
    for (int64_t t = 0; t < ms; t += step) sched.advanceMs(std::min(step, ms - t));
  }

  double held() { return metrics.held_locks.Value(); }
  double waiters() { return metrics.waiters.Value(); }
  static uint64_t samples(prometheus::Histogram& h) { return h.Collect().histogram.sample_count; }

  config::LocksConfig cfg;
  event::FakeScheduler sched;
  TestBackend backend{sched};
  metrics::Metrics metrics;
  std::unique_ptr<LockService> svc;

  void manyClientsNeverOverlapAndEverythingSettles();
};

// --- elections (issue 19) ---------------------------------------------------------------------

LockId election(std::string name) { return LockId{LockKind::kElection, std::move(name)}; }

AcquireOptions campaign(const std::string& name, const std::string& candidate, int64_t ttl_ms,
                        int64_t wait_ms) {
  AcquireOptions o;
  o.lock = election(name);
  o.ttl_ms = ttl_ms;
  o.wait_ms = wait_ms;
  o.stream = true;
  o.candidate = candidate;
  o.value = candidate + "-value";
  return o;
}

TEST_F(LockServiceTest, ACandidateWaitsPastMaxWaitMsAndTheLeaderIsReadable) {
  cfg.max_wait_ms = 1000;
  make();
  auto first = acquireNow(campaign("sched", "pod-a", 5000, 0));
  ASSERT_EQ(first->status(), AcquireStatus::kGranted);
  const LockState state = inspect(election("sched"));
  EXPECT_TRUE(state.held);
  EXPECT_EQ(state.token, first->grant().token);
  EXPECT_EQ(state.leader.candidate, "pod-a");
  EXPECT_EQ(state.leader.value, "pod-a-value");
  // A mutex of the same name is another lock.
  EXPECT_EQ(acquireNow(opts("sched", "m", 1000))->status(), AcquireStatus::kGranted);

  // pod-b waits far longer than max_wait_ms, while pod-a's stream renews its lease.
  auto second = start(campaign("sched", "pod-b", 5000, kWaitUntilCancelledMs));
  advance(20'000, 10);
  EXPECT_FALSE(second->done()) << "a candidate's wait was cut to max_wait_ms";
  ASSERT_TRUE(release(election("sched"), first->grant().owner).isOk());
  advance(10);
  ASSERT_TRUE(second->done());
  EXPECT_EQ(second->status(), AcquireStatus::kGranted);
  EXPECT_GT(second->grant().token, first->grant().token);
  EXPECT_EQ(inspect(election("sched")).leader.candidate, "pod-b");
}

TEST_F(LockServiceTest, ValidityLeftCountsDownFromTheLastConfirmation) {
  // What a campaign's renewed event reports (ttl_ms), so sidelock run --elect can stop CMD in time.
  auto leader = acquireNow(campaign("v", "pod-a", 3000, 0));
  ASSERT_EQ(leader->status(), AcquireStatus::kGranted);
  const std::string owner = leader->grant().owner;
  EXPECT_EQ(svc->validityLeftMs(election("v"), owner), 3000);
  sched.advanceMs(400);
  EXPECT_EQ(svc->validityLeftMs(election("v"), owner), 2600);
  EXPECT_EQ(svc->validityLeftMs(election("v"), "someone-else"), -1);
  EXPECT_EQ(svc->validityLeftMs(mutexLock("v"), owner), -1);  // another lock
  ASSERT_TRUE(release(election("v"), owner).isOk());
  EXPECT_EQ(svc->validityLeftMs(election("v"), owner), -1);
}

TEST_F(LockServiceTest, ProclaimIsOwnerCheckedAndKeepsTheTerm) {
  auto leader = acquireNow(campaign("p", "pod-a", 5000, 0));
  ASSERT_EQ(leader->status(), AcquireStatus::kGranted);
  auto proclaim = [&](std::string_view owner, std::string_view value) {
    std::optional<StatusOr<ProclaimResult>> r;
    svc->proclaim(election("p"), owner, value, [&](StatusOr<ProclaimResult> v) { r.emplace(v); });
    EXPECT_FALSE(r) << "done ran inside proclaim()";
    sched.runReady();
    EXPECT_TRUE(r && r->isOk());
    return r->value();
  };
  const ProclaimResult ok = proclaim(leader->grant().owner, "new");
  EXPECT_EQ(ok.status, ProclaimStatus::kProclaimed);
  EXPECT_EQ(ok.term, leader->grant().token);
  EXPECT_EQ(inspect(election("p")).leader.value, "new");
  EXPECT_EQ(proclaim("somebody-else", "x").status, ProclaimStatus::kNotOwner);
  EXPECT_EQ(inspect(election("p")).leader.value, "new");
  ASSERT_TRUE(release(election("p"), leader->grant().owner).isOk());
  EXPECT_EQ(proclaim(leader->grant().owner, "y").status, ProclaimStatus::kNotHeld);
}

TEST_F(LockServiceTest, ChangeWatchersHearGrantsProclaimsAndResignsUntilTheWatchEnds) {
  int heard = 0;
  ChangeWatch watch = svc->watchChanges("w", [&](ChangeReason) { ++heard; });
  EXPECT_EQ(backend.memory().watchedNames(), 1u);
  auto leader = acquireNow(campaign("w", "pod-a", 5000, 0));
  sched.runReady();
  EXPECT_GE(heard, 1) << "a grant is announced";
  const int after_grant = heard;
  svc->proclaim(election("w"), leader->grant().owner, "v2", [](StatusOr<ProclaimResult>) {});
  sched.runReady();
  EXPECT_GT(heard, after_grant) << "a proclaim is announced";
  const int after_proclaim = heard;
  ASSERT_TRUE(release(election("w"), leader->grant().owner).isOk());
  sched.runReady();
  EXPECT_GT(heard, after_proclaim) << "a resign is announced";
  watch.reset();
  EXPECT_EQ(backend.memory().watchedNames(), 0u) << "the last watch of a name unsubscribes";
  const int before = heard;
  acquireNow(campaign("w", "pod-b", 5000, 0));
  sched.runReady();
  EXPECT_EQ(heard, before) << "a watch that ended still heard a change";
}

// --- single tries ----------------------------------------------------------------------------

TEST_F(LockServiceTest, GrantGeneratesOwnerAndRecordsLease) {
  auto a = acquireNow(opts("orders-42", "", 10'000));
  ASSERT_EQ(a->status(), AcquireStatus::kGranted);
  EXPECT_EQ(a->grant().lock.display(), "orders-42");
  EXPECT_EQ(a->grant().owner.size(), 32u);
  EXPECT_EQ(a->grant().owner.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(a->grant().token, 1u);
  EXPECT_EQ(a->grant().ttl_ms, 10'000);
  EXPECT_EQ(held(), 1);
  sched.advanceMs(2500);
  auto leases = svc->leases();
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0].lock.display(), "orders-42");
  EXPECT_EQ(leases[0].token, 1u);
  EXPECT_EQ(leases[0].age_ms, 2500);
  EXPECT_EQ(leases[0].ttl_remaining_ms, 7500);
  EXPECT_FALSE(leases[0].auto_renew);

  auto b = acquireNow(opts("orders-42", "", 10'000));
  EXPECT_NE(b->grant().owner, a->grant().owner);
  EXPECT_EQ(b->status(), AcquireStatus::kBusy);
  EXPECT_EQ(b->result->retry_after_ms, 7500);
  EXPECT_EQ(metrics.acquireFor("mutex").acquired.Value(), 1);
  EXPECT_EQ(metrics.acquireFor("mutex").busy.Value(), 1);
  EXPECT_EQ(metrics.acquireFor("mutex").contended.Value(), 1);
  EXPECT_EQ(samples(metrics.acquireFor("mutex").wait_seconds), 2u);

  EXPECT_EQ(*release("orders-42", a->grant().owner), ReleaseStatus::kReleased);
  EXPECT_EQ(held(), 0);
  EXPECT_TRUE(svc->leases().empty());
  EXPECT_EQ(metrics.release_released.Value(), 1);
  EXPECT_EQ(samples(metrics.hold_seconds), 1u);
}

// sidelock_oldest_lease_age_seconds is computed when /metrics is rendered: the age of the oldest
// lease still held, so a lock that is never released shows as a rising line (0 with none held).
TEST_F(LockServiceTest, OldestLeaseAgeGaugeFollowsTheOldestHeldLease) {
  auto oldestAge = [&] {
    metrics.render();  // runs the scrape hooks
    return metrics.oldest_lease_age.Value();
  };
  EXPECT_EQ(oldestAge(), 0);
  auto a = acquireNow(opts("stuck", "alice", 600'000));
  ASSERT_EQ(a->status(), AcquireStatus::kGranted);
  sched.advanceMs(4000);
  auto b = acquireNow(opts("fresh", "bob", 600'000));
  ASSERT_EQ(b->status(), AcquireStatus::kGranted);
  sched.advanceMs(1500);
  EXPECT_DOUBLE_EQ(oldestAge(), 5.5);
  EXPECT_NE(metrics.render().find("sidelock_oldest_lease_age_seconds 5.5"), std::string::npos);
  EXPECT_EQ(*release("stuck", "alice"), ReleaseStatus::kReleased);
  EXPECT_DOUBLE_EQ(oldestAge(), 1.5);
  // Grant times are kept per second: a lease granted later in the same second as a released
  // one reads as old as that second's first grant (never younger than it is, at most 1 s older).
  sched.advanceMs(300);
  ASSERT_EQ(sched.nowUs() % 1'000'000, 800'000) << "the fake clock starts on a whole second";
  auto c = acquireNow(opts("carol-lock", "carol", 600'000));  // t = 5.8 s
  ASSERT_EQ(c->status(), AcquireStatus::kGranted);
  sched.advanceMs(100);
  auto d = acquireNow(opts("dave-lock", "dave", 600'000));  // t = 5.9 s, the same second
  ASSERT_EQ(d->status(), AcquireStatus::kGranted);
  EXPECT_EQ(*release("carol-lock", "carol"), ReleaseStatus::kReleased);
  EXPECT_EQ(*release("fresh", "bob"), ReleaseStatus::kReleased);
  EXPECT_NEAR(oldestAge(), 0.1, 1e-9);  // dave's lease, read from carol's grant time
  EXPECT_EQ(*release("dave-lock", "dave"), ReleaseStatus::kReleased);
  EXPECT_EQ(oldestAge(), 0);
}

TEST_F(LockServiceTest, ReleaseAndExtendAnswerOwnerMismatchAndNotHeld) {
  auto a = acquireNow(opts("x", "alice", 1000));
  ASSERT_EQ(a->status(), AcquireStatus::kGranted);
  EXPECT_EQ(*release("x", "bob"), ReleaseStatus::kNotOwner);
  EXPECT_EQ(extend("x", "bob", 1000)->status, ExtendStatus::kNotOwner);
  EXPECT_EQ(*release("nothing", "bob"), ReleaseStatus::kNotHeld);
  EXPECT_EQ(extend("nothing", "bob", 1000)->status, ExtendStatus::kNotHeld);
  EXPECT_EQ(held(), 1);  // a wrong owner changed nothing
  sched.advanceMs(900);
  auto e = extend("x", "alice", 5000);
  ASSERT_TRUE(e.isOk());
  EXPECT_EQ(e->status, ExtendStatus::kExtended);
  EXPECT_EQ(e->ttl_ms, 5000);
  sched.advanceMs(4000);  // past the original TTL: the extension holds
  EXPECT_EQ(svc->leases().size(), 1u);
  EXPECT_EQ(svc->leases()[0].ttl_remaining_ms, 1000);
  EXPECT_EQ(metrics.release_not_owner.Value(), 1);
  EXPECT_EQ(metrics.release_not_held.Value(), 1);
  EXPECT_EQ(metrics.extend_extended.Value(), 1);
  EXPECT_EQ(metrics.extend_not_owner.Value(), 1);
  EXPECT_EQ(metrics.extend_not_held.Value(), 1);
  EXPECT_EQ(*release("x", "alice"), ReleaseStatus::kReleased);
}

// An operator's force release: the holder's lease ends as lost (stream event, lease_lost), the
// queued waiter is granted with the next token, the counter is not bumped, and it is counted.
TEST_F(LockServiceTest, ForceReleaseEndsTheLeaseAsLostAndGrantsTheWaiter) {
  auto holder = acquireNow(opts("stuck", "alice", 60'000));
  ASSERT_EQ(holder->status(), AcquireStatus::kGranted);
  auto waiter = start(opts("stuck", "bob", 10'000, /*wait_ms=*/30'000));
  sched.runReady();
  EXPECT_FALSE(waiter->done());

  std::optional<StatusOr<ForcedRelease>> r;
  svc->forceRelease("stuck", [&](StatusOr<ForcedRelease> v) { r.emplace(std::move(v)); });
  EXPECT_FALSE(r) << "done ran inside forceRelease()";
  advance(10);
  ASSERT_TRUE(r && r->isOk());
  EXPECT_TRUE((*r)->released);
  EXPECT_EQ((*r)->token, holder->grant().token);
  ASSERT_FALSE(holder->events.empty());
  EXPECT_EQ(holder->events.back(), LeaseEvent::kLost);
  ASSERT_TRUE(waiter->done());
  ASSERT_EQ(waiter->status(), AcquireStatus::kGranted);
  EXPECT_EQ(waiter->grant().token, holder->grant().token + 1);
  EXPECT_EQ(*release("stuck", "alice"), ReleaseStatus::kLeaseLost);
  EXPECT_EQ(metrics.forced_releases.Value(), 1);

  r.reset();
  svc->forceRelease("never", [&](StatusOr<ForcedRelease> v) { r.emplace(std::move(v)); });
  sched.runReady();
  ASSERT_TRUE(r && r->isOk());
  EXPECT_FALSE((*r)->released);
  EXPECT_EQ(metrics.forced_releases.Value(), 1) << "nothing freed, nothing counted";
  EXPECT_EQ(*release("stuck", "bob"), ReleaseStatus::kReleased);
}

TEST_F(LockServiceTest, ExpiryIsCountedAndTheNameCanBeGrantedAgain) {
  auto a = acquireNow(opts("x", "alice", 100));
  ASSERT_EQ(a->status(), AcquireStatus::kGranted);
  sched.advanceMs(150);
  EXPECT_EQ(metrics.lease_expired.Value(), 1);
  EXPECT_EQ(metrics.lease_lost.Value(), 0);
  EXPECT_EQ(held(), 0);
  EXPECT_TRUE(svc->leases().empty());
  EXPECT_EQ(*release("x", "alice"), ReleaseStatus::kNotHeld);  // expired, not lost
  EXPECT_EQ(extend("x", "alice", 100)->status, ExtendStatus::kNotHeld);
  auto b = acquireNow(opts("x", "bob", 100));
  ASSERT_EQ(b->status(), AcquireStatus::kGranted);
  EXPECT_GT(b->grant().token, a->grant().token);
  EXPECT_EQ(held(), 1);
}

// The backend lets the name go before the release answers (Redlock: a majority freed it, a slower
// node has not answered) and a waiter here is granted meanwhile: the releasing lease ends as
// released, not expired (a helper's contended Redlock run counted 168 false expiries in 8 s, and
// 318 stream holds ended with `lost` although their release answered 200).
TEST_F(LockServiceTest, ALeaseGrantedAwayWhileItsReleaseIsInFlightEndsReleased) {
  auto o = opts("x", "alice", 5000);
  o.stream = true;
  auto a = acquireNow(o);
  ASSERT_EQ(a->status(), AcquireStatus::kGranted);
  auto b = start(opts("x", "bob", 5000, 5000));
  sched.runReady();
  ASSERT_FALSE(b->done());
  backend.plain_release_reply_delay_ms = 50;
  std::optional<StatusOr<ReleaseStatus>> r;
  svc->release(mutexLock("x"), "alice",
               [&](StatusOr<ReleaseStatus> v) { r.emplace(std::move(v)); });
  advance(20);
  ASSERT_TRUE(b->done()) << "the waiter was not granted before the release answered";
  EXPECT_EQ(b->status(), AcquireStatus::kGranted);
  EXPECT_FALSE(r.has_value());
  advance(60);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(**r, ReleaseStatus::kReleased);
  EXPECT_EQ(a->events, std::vector<LeaseEvent>{LeaseEvent::kReleased});
  EXPECT_EQ(metrics.lease_expired.Value(), 0);
  EXPECT_EQ(metrics.lease_lost.Value(), 0);
  EXPECT_EQ(held(), 1);
}

TEST_F(LockServiceTest, FencingTokensStrictlyIncrease) {
  uint64_t last = 0;
  for (int i = 0; i < 20; ++i) {
    auto a = acquireNow(opts("x", "", 50));
    ASSERT_EQ(a->status(), AcquireStatus::kGranted);
    EXPECT_GT(a->grant().token, last);
    last = a->grant().token;
    if (i % 2 == 0) {
      EXPECT_EQ(*release("x", a->grant().owner), ReleaseStatus::kReleased);
    } else {
      sched.advanceMs(60);
    }
  }
  EXPECT_EQ(inspect("x").token, last);
}

TEST_F(LockServiceTest, BackendErrorIsAnErrorNotAGrant) {
  backend.fail_acquire = unavailable("redis down");
  auto a = acquireNow(opts("x", "alice", 100));
  EXPECT_EQ(a->status(), AcquireStatus::kError);
  EXPECT_EQ(a->result->error.code(), StatusCode::kUnavailable);
  EXPECT_EQ(metrics.acquireFor("mutex").error.Value(), 1);
  EXPECT_EQ(waiters(), 0);
  EXPECT_EQ(held(), 0);
}

TEST_F(LockServiceTest, BadRequestFailsAWaiterAtOnce) {
  backend.fail_acquire = invalidArgument("ttl_ms too small for redlock");
  auto w = start(opts("x", "bob", 1, 5000));
  sched.runReady();
  ASSERT_TRUE(w->done());  // not an outage: waiting cannot help
  EXPECT_EQ(w->status(), AcquireStatus::kError);
  EXPECT_EQ(w->result->error.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(waiters(), 0);
}

// --- backend outages -------------------------------------------------------------------------

TEST_F(LockServiceTest, WaitersRideOutAnOutageShorterThanTheirBudget) {
  backend.fail_acquire = unavailable("redis down");
  auto first = start(opts("x", "w1", 10'000, 5000));
  auto second = start(opts("x", "w2", 10'000, 5000));
  advance(1000, 10);
  EXPECT_FALSE(first->done());
  EXPECT_FALSE(second->done());
  EXPECT_EQ(waiters(), 2);
  // Paced by the backoff (retry_max_ms 500), not one attempt per loop turn.
  const int attempts_during_outage = backend.count("acquire");
  EXPECT_GE(attempts_during_outage, 2);
  EXPECT_LE(attempts_during_outage, 16);

  // A single try does not queue: it fails fast with the outage the queue is riding out.
  auto single = acquireNow(opts("x", "s", 10'000));
  EXPECT_EQ(single->status(), AcquireStatus::kError);
  EXPECT_EQ(single->result->error.code(), StatusCode::kUnavailable);

  backend.fail_acquire.reset();
  backend.announceReady();
  sched.runReady();  // the ready notification retries at once, without waiting out the backoff
  ASSERT_TRUE(first->done());
  EXPECT_EQ(first->status(), AcquireStatus::kGranted);
  EXPECT_FALSE(second->done()) << "still FIFO: the second waits for the first's release";
  EXPECT_EQ(*release("x", "w1"), ReleaseStatus::kReleased);
  sched.runReady();
  ASSERT_TRUE(second->done());
  EXPECT_EQ(second->status(), AcquireStatus::kGranted);
  EXPECT_EQ(metrics.acquireFor("mutex").error.Value(), 1);  // the single try only
}

TEST_F(LockServiceTest, WaiterRetriesWithoutAReadyNotificationToo) {
  backend.fail_acquire = deadlineExceeded("no reply in time");
  auto w = start(opts("x", "w1", 10'000, 5000));
  advance(300, 10);
  backend.fail_acquire.reset();
  advance(cfg.retry_max_ms + 1, 1);
  ASSERT_TRUE(w->done());
  EXPECT_EQ(w->status(), AcquireStatus::kGranted);
}

// --- acquires that got no answer (src/lock/unanswered.cc) -----------------------------------

Status noAnswer() { return deadlineExceeded("acquire timed out after 500 ms").setOutcomeUnknown(); }

TEST_F(LockServiceTest, AWaitersUnansweredGrantIsGivenBackBeforeItsNextAttempt) {
  constexpr int64_t kReleaseAnswerMs = 20;
  backend.plain_release_reply_delay_ms = kReleaseAnswerMs;
  backend.fail_acquire = noAnswer();
  backend.acquire_applied_anyway = true;        // Redis ran it after the sidecar stopped waiting
  auto w = start(opts("x", "", 10'000, 5000));  // the service draws the owner id
  sched.runReady();
  EXPECT_TRUE(inspect("x").held) << "the lost answer's grant";
  backend.fail_acquire.reset();
  backend.announceReady();
  advance(kReleaseAnswerMs + 1);
  ASSERT_TRUE(w->done());
  ASSERT_EQ(w->status(), AcquireStatus::kGranted) << "not held by its own lost grant until its TTL";
  // The give-back went out first, and the attempt only once it had answered: never pipelined
  // behind it (a NOSCRIPT retry of the release would run after the attempt's grant).
  ASSERT_GE(backend.calls.size(), 2u);
  EXPECT_EQ(backend.calls[backend.calls.size() - 2].op, "release");
  EXPECT_EQ(backend.calls.back().op, "acquire");
  EXPECT_GE(backend.calls.back().at_us - backend.calls[backend.calls.size() - 2].at_us,
            kReleaseAnswerMs * 1000)
      << "the attempt did not wait for the release's answer";
  EXPECT_GE(metrics.unanswered_released.Value(), 1);
  EXPECT_EQ(inspect("x").token, w->grant().token);
  backend.plain_release_reply_delay_ms = 0;
  EXPECT_EQ(*release("x", w->grant().owner), ReleaseStatus::kReleased);
}

TEST_F(LockServiceTest, AFinishedAcquiresUnansweredGrantIsGivenBackOnceTheBackendIsBack) {
  backend.fail_acquire = noAnswer();
  backend.acquire_applied_anyway = true;
  backend.fail_release = unavailable("redis down");
  auto single = acquireNow(opts("x", "", 60'000));
  ASSERT_EQ(single->status(), AcquireStatus::kError);
  EXPECT_EQ(single->result->error.message().find("may have been granted"), std::string::npos)
      << "the owner id is the service's own: the caller cannot release it, the service does";
  advance(3000, 10);
  const int tries = backend.count("release");
  EXPECT_GE(tries, 3) << "retried while the backend is out";
  EXPECT_LE(tries, 8) << "with backoff, not every loop turn";
  EXPECT_TRUE(inspect("x").held);
  backend.fail_release.reset();
  backend.announceReady();
  sched.runReady();
  EXPECT_FALSE(inspect("x").held);
  EXPECT_EQ(metrics.unanswered_released.Value(), 1);
  EXPECT_EQ(metrics.unanswered_gave_up.Value(), 0);
  advance(5000, 100);
  EXPECT_EQ(backend.count("release"), tries + 1) << "settled: no more tries";
}

TEST_F(LockServiceTest, AnUnansweredGrantIsNoLongerChasedOnceItsTtlHasEnded) {
  sidelock::testing::LogCapture log;
  ASSERT_TRUE(log.ok());
  backend.fail_acquire = noAnswer();
  backend.fail_release = unavailable("redis down");
  auto single = acquireNow(opts("x", "", 400));
  ASSERT_EQ(single->status(), AcquireStatus::kError);
  advance(600, 10);
  EXPECT_EQ(metrics.unanswered_gave_up.Value(), 1);
  EXPECT_EQ(log.count("event=lock.unanswered_grant_not_given_back"), 1) << log.text();
  EXPECT_EQ(log.count("redis down"), 1) << "the last give-back's refusal: " << log.text();
  const int tries = backend.count("release");
  advance(5000, 100);
  EXPECT_EQ(backend.count("release"), tries);
}

TEST_F(LockServiceTest, ACallersOwnOwnerIdIsToldItsUnansweredAcquireMayHaveBeenGranted) {
  backend.fail_acquire = noAnswer();
  backend.acquire_applied_anyway = true;
  auto single = acquireNow(opts("x", "alice", 60'000));
  ASSERT_EQ(single->status(), AcquireStatus::kError);
  EXPECT_EQ(single->result->error.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(single->result->error.message().find("may have been granted"), std::string::npos)
      << single->result->error.message();
  backend.announceReady();
  sched.runReady();
  advance(2000, 10);
  EXPECT_EQ(backend.count("release"), 0) << "alice may have held it before: not ours to release";
  EXPECT_EQ(metrics.unanswered_left_to_owner.Value(), 1);
  // An error that says nothing of the outcome (the request never went out) adds nothing.
  backend.fail_acquire = unavailable("redis 127.0.0.1:6379 is down");
  auto unsent = acquireNow(opts("y", "bob", 60'000));
  EXPECT_EQ(unsent->result->error.message(), "redis 127.0.0.1:6379 is down");
}

// A hand-off (release + grant of the head waiter in one script) that got no answer: a drawn
// owner's waiter gives back what it may have been granted once, as after any unanswered attempt
// (before its next attempt), not also through a second release of its own.
TEST_F(LockServiceTest, AnUnansweredHandOffIsGivenBackOnceByItsWaiter) {
  backend.hand_off = true;
  auto holder = acquireNow(opts("x", "h", 500));
  ASSERT_EQ(holder->status(), AcquireStatus::kGranted);
  auto w = start(opts("x", "", 60'000, 10'000));
  sched.runReady();
  ASSERT_FALSE(w->done());
  const int releases_before = backend.count("release");
  backend.fail_release = noAnswer();
  EXPECT_FALSE(release("x", "h").isOk());
  ASSERT_EQ(backend.count("release_grant"), 1);
  backend.fail_release.reset();
  advance(1000, 10);  // the holder's lease runs out meanwhile
  ASSERT_TRUE(w->done());
  EXPECT_EQ(w->status(), AcquireStatus::kGranted);
  EXPECT_EQ(backend.count("release") - releases_before, 1) << "one give-back, not two";
  EXPECT_EQ(metrics.unanswered_not_granted.Value(), 1);
  EXPECT_EQ(metrics.unanswered_left_to_owner.Value(), 0);
}

// A caller's owner id is counted left to the caller once per acquire, however many of its
// attempts got no answer.
TEST_F(LockServiceTest, LeftToOwnerCountsEachAcquireOnce) {
  backend.fail_acquire = noAnswer();
  auto w = start(opts("x", "alice", 60'000, 3000));
  advance(3100, 10);
  ASSERT_TRUE(w->done());
  EXPECT_GE(backend.count("acquire"), 3);
  EXPECT_EQ(metrics.unanswered_left_to_owner.Value(), 1);
}

TEST_F(LockServiceTest, BudgetEndingDuringTheOutageAnswersTheBackendError) {
  backend.fail_acquire = unavailable("redis down");
  auto w = start(opts("x", "w1", 10'000, 2000));
  advance(1999, 10);
  EXPECT_FALSE(w->done()) << "answered before its budget ended";
  advance(10, 1);
  ASSERT_TRUE(w->done());
  EXPECT_EQ(w->status(), AcquireStatus::kError) << "503, not 409: nobody holds the lock";
  EXPECT_EQ(w->result->error.code(), StatusCode::kUnavailable);
  EXPECT_EQ(waiters(), 0);
  EXPECT_EQ(metrics.acquireFor("mutex").error.Value(), 1);
}

TEST_F(LockServiceTest, ReleaseFailuresDuringAnOutageLogOneLinePerWindow) {
  sidelock::testing::LogCapture log;
  ASSERT_TRUE(log.ok());
  backend.fail_release = unavailable("redis down");
  for (int i = 0; i < 50; ++i) {
    EXPECT_FALSE(release("x", "o" + std::to_string(i)).isOk());
    sched.advanceMs(100);  // 5 s of one failed release every 100 ms
  }
  sched.advanceMs(RateLimitedLog::kDefaultWindowMs);
  EXPECT_FALSE(release("x", "late").isOk());
  EXPECT_EQ(log.count("event=lock.release_failed"), 2) << log.text();
  EXPECT_EQ(log.count("suppressed=49 "), 1) << log.text();
}

// --- waiting ---------------------------------------------------------------------------------

TEST_F(LockServiceTest, WaitersAreGrantedInFifoOrderOnRelease) {
  auto holder = acquireNow(opts("x", "h", 60'000));
  std::vector<std::shared_ptr<Outcome>> ws;
  for (int i = 0; i < 4; ++i)
    ws.push_back(start(opts("x", "w" + std::to_string(i), 60'000, 30'000)));
  advance(1000, 10);
  EXPECT_EQ(waiters(), 4);
  ASSERT_EQ(svc->waiterCounts().size(), 1u);
  EXPECT_EQ(svc->waiterCounts()[0].waiters, 4);
  std::string prev = "h";
  for (int i = 0; i < 4; ++i) {
    for (int j = i; j < 4; ++j) EXPECT_FALSE(ws[j]->done()) << i << " " << j;
    ASSERT_EQ(*release("x", prev), ReleaseStatus::kReleased);
    sched.runReady();  // no time passes: the head is woken by the release itself
    ASSERT_TRUE(ws[i]->done()) << i;
    EXPECT_EQ(ws[i]->status(), AcquireStatus::kGranted);
    EXPECT_EQ(ws[i]->grant().owner, "w" + std::to_string(i));
    prev = ws[i]->grant().owner;
    advance(100, 10);
  }
  EXPECT_EQ(waiters(), 0);
  EXPECT_TRUE(svc->waiterCounts().empty());
  EXPECT_EQ(backend.memory().watchedNames(), 0u);  // unwatched when the queue emptied
  EXPECT_EQ(metrics.acquireFor("mutex").contended.Value(), 4);
  EXPECT_EQ(samples(metrics.acquireFor("mutex").wait_seconds), 5u);
}

// Reentrant acquires: a re-entry by the holder never queues (even behind a waiter of its own
// lock), keeps the token and counts holds; each release gives one back and the waiter (handed the
// lock with hand-off on) gets it only after the last.
TEST_F(LockServiceTest, ReentryCountsHoldsAndNeverQueuesBehindItsWaiters) {
  backend.hand_off = true;
  AcquireOptions o = opts("x", "h", 1000);
  o.reentrant = true;
  auto first = acquireNow(o);
  ASSERT_EQ(first->status(), AcquireStatus::kGranted);
  EXPECT_EQ(first->grant().holds, 1);
  auto waiter = start(opts("x", "w", 1000, 30'000));
  sched.runReady();
  ASSERT_FALSE(waiter->done());

  o.wait_ms = 10'000;
  auto again = acquireNow(o);
  ASSERT_EQ(again->status(), AcquireStatus::kGranted) << "a re-entry is one try, not queued";
  EXPECT_EQ(again->grant().token, first->grant().token);
  EXPECT_EQ(again->grant().holds, 2);
  EXPECT_EQ(svc->holds(mutexLock("x"), "h"), 2);
  EXPECT_EQ(held(), 1) << "one lease, two holds";

  AcquireOptions plain = opts("x", "h", 1000);
  EXPECT_EQ(acquireNow(plain)->status(), AcquireStatus::kBusy) << "no re-entry unless asked";

  EXPECT_EQ(*release("x", "h"), ReleaseStatus::kHoldReleased);
  EXPECT_EQ(svc->holds(mutexLock("x"), "h"), 1);
  sched.runReady();
  EXPECT_FALSE(waiter->done());
  EXPECT_EQ(*release("x", "h"), ReleaseStatus::kReleased);
  sched.runReady();
  ASSERT_TRUE(waiter->done());
  EXPECT_EQ(waiter->status(), AcquireStatus::kGranted);
  EXPECT_GT(waiter->grant().token, first->grant().token);
  EXPECT_EQ(svc->holds(mutexLock("x"), "h"), 0);
}

// The watchdog keeps renewing a re-entered lease after a hold is given back, and shutdown gives
// back every hold.
TEST_F(LockServiceTest, ReenteredLeaseKeepsRenewingAndShutdownReleasesEveryHold) {
  AcquireOptions o = opts("x", "h", 300);
  o.reentrant = true;
  o.auto_renew = true;
  ASSERT_EQ(acquireNow(o)->status(), AcquireStatus::kGranted);
  ASSERT_EQ(acquireNow(o)->status(), AcquireStatus::kGranted);
  ASSERT_EQ(acquireNow(o)->status(), AcquireStatus::kGranted);
  EXPECT_EQ(*release("x", "h"), ReleaseStatus::kHoldReleased);
  advance(2000, 5);
  EXPECT_EQ(svc->holds(mutexLock("x"), "h"), 2) << "still held, renewed past its 300 ms TTL";
  bool done = false;
  svc->shutdown(true, 1000, [&] { done = true; });
  advance(50);
  EXPECT_TRUE(done);
  EXPECT_EQ(backend.count("release"), 3) << "one hold at a time";
  std::optional<StatusOr<backend::Outcome>> r;
  backend.memory().run(backend::Operation::acquire("x", "someone", 300),
                       [&](StatusOr<backend::Outcome> v) { r.emplace(std::move(v)); });
  sched.runReady();
  ASSERT_TRUE(r && r->isOk());
  EXPECT_TRUE((*r)->ok()) << "the lock is free after shutdown";
}

// With a backend that can hand a lock on (a single Redis), the release itself grants the head
// waiter: one round trip instead of release, wake-up, acquire. Order, tokens and metrics are the
// same as without it.
TEST_F(LockServiceTest, HandOffGrantsTheHeadWaiterInTheReleaseItself) {
  backend.hand_off = true;
  auto holder = acquireNow(opts("x", "h", 60'000));
  std::vector<std::shared_ptr<Outcome>> ws;
  for (int i = 0; i < 3; ++i)
    ws.push_back(start(opts("x", "w" + std::to_string(i), 60'000, 30'000)));
  advance(1000, 10);
  std::string prev = "h";
  uint64_t prev_token = holder->grant().token;
  for (int i = 0; i < 3; ++i) {
    const int acquires_before = backend.count("acquire");
    ASSERT_EQ(*release("x", prev), ReleaseStatus::kReleased);
    ASSERT_TRUE(ws[i]->done()) << "granted by the release's own answer, " << i;
    EXPECT_EQ(ws[i]->status(), AcquireStatus::kGranted);
    EXPECT_EQ(ws[i]->grant().owner, "w" + std::to_string(i));
    EXPECT_EQ(ws[i]->grant().token, prev_token + 1);
    EXPECT_EQ(backend.count("acquire"), acquires_before) << "no second round trip";
    for (int j = i + 1; j < 3; ++j) EXPECT_FALSE(ws[j]->done());
    ASSERT_EQ(svc->leases().size(), 1u);
    EXPECT_EQ(svc->leases()[0].token, ws[i]->grant().token);
    EXPECT_EQ(held(), 1);
    EXPECT_EQ(inspect("x").token, ws[i]->grant().token);
    prev = ws[i]->grant().owner;
    prev_token = ws[i]->grant().token;
    advance(100, 10);
  }
  EXPECT_EQ(backend.count("release_grant"), 3);
  EXPECT_EQ(*release("x", prev), ReleaseStatus::kReleased);
  EXPECT_EQ(backend.count("release"), 1) << "nobody left to hand on to: a plain release";
  EXPECT_EQ(held(), 0);
  EXPECT_EQ(waiters(), 0);
  EXPECT_EQ(metrics.acquireFor("mutex").contended.Value(), 3);
  EXPECT_EQ(samples(metrics.acquireFor("mutex").wait_seconds), 4u);
  EXPECT_EQ(metrics.release_released.Value(), 4);
}

TEST_F(LockServiceTest, HandOffByTheWrongOwnerGrantsNothing) {
  backend.hand_off = true;
  auto holder = acquireNow(opts("x", "h", 60'000));
  auto w = start(opts("x", "w", 60'000, 30'000));
  advance(100, 10);
  EXPECT_EQ(*release("x", "intruder"), ReleaseStatus::kNotOwner);
  advance(100, 10);
  EXPECT_FALSE(w->done()) << "the holder still holds it";
  EXPECT_EQ(inspect("x").token, holder->grant().token);
  ASSERT_EQ(*release("x", "h"), ReleaseStatus::kReleased);
  ASSERT_TRUE(w->done());
  EXPECT_EQ(w->status(), AcquireStatus::kGranted);
  EXPECT_EQ(w->grant().token, holder->grant().token + 1);
}

// A hand-off without an answer may still have run: the grant the waiter never heard of is given
// back (compare-and-delete), and the waiter keeps its place as after any failed attempt.
TEST_F(LockServiceTest, HandOffWithoutAnAnswerGivesTheGrantBackAndTheWaiterStays) {
  backend.hand_off = true;
  auto holder = acquireNow(opts("x", "h", 60'000));
  auto w = start(opts("x", "w", 60'000, 30'000));
  advance(100, 10);
  backend.fail_release = unavailable("link lost");
  const int releases_before = backend.count("release");
  auto r = release("x", "h");
  EXPECT_FALSE(r.isOk());
  EXPECT_GT(backend.count("release"), releases_before) << "the possible grant is given back";
  advance(100, 10);
  EXPECT_FALSE(w->done()) << "the waiter rides out the failed hand-off";
  backend.fail_release.reset();
  ASSERT_EQ(*release("x", "h"), ReleaseStatus::kReleased);
  advance(10, 1);
  ASSERT_TRUE(w->done());
  EXPECT_EQ(w->status(), AcquireStatus::kGranted);
}

TEST_F(LockServiceTest, HandOffToAWaiterWhoLeftIsReleasedAgain) {
  backend.hand_off = true;
  auto holder = acquireNow(opts("x", "h", 60'000));
  auto w = start(opts("x", "w", 60'000, 30'000));
  advance(100, 10);
  backend.release_reply_delay_ms = 5;  // the waiter leaves while the hand-off is in flight
  std::optional<StatusOr<ReleaseStatus>> r;
  svc->release(mutexLock("x"), "h", [&](StatusOr<ReleaseStatus> v) { r.emplace(std::move(v)); });
  sched.runReady();
  w->ticket.cancel();
  advance(50, 1);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(**r, ReleaseStatus::kReleased);
  ASSERT_TRUE(w->done());
  EXPECT_EQ(w->status(), AcquireStatus::kCancelled);
  EXPECT_FALSE(inspect("x").held) << "the late grant to a waiter who left was released";
  EXPECT_EQ(held(), 0);
}

TEST_F(LockServiceTest, ReleaseFromAnotherSidecarWakesTheHeadThroughTheBackend) {
  // The holder is not ours: "another sidecar" releases straight on the backend.
  bool granted = false;
  backend.memory().run(backend::Operation::acquire("x", "other", 60'000),
                       [&](StatusOr<backend::Outcome> r) { granted = r.isOk() && r->ok(); });
  sched.runReady();
  ASSERT_TRUE(granted);
  auto w = start(opts("x", "me", 1000, 30'000));
  advance(2000, 10);  // backoff has grown to its cap by now
  ASSERT_FALSE(w->done());
  int attempts = backend.count("acquire");
  // A hand-off over there is announced as a grant: news to event streams, but nothing became
  // free, so no waiter wakes for it.
  backend.memory().run(backend::Operation::handOff("x", "other", "third", 60'000),
                       [](StatusOr<backend::Outcome>) {});
  sched.runReady();
  EXPECT_EQ(backend.count("acquire"), attempts) << "a grant woke a waiter";
  EXPECT_EQ(metrics.wakeups.Value(), 0);
  attempts = backend.count("acquire");
  backend.memory().run(backend::Operation::release("x", "third"),
                       [](StatusOr<backend::Outcome>) {});
  sched.runReady();
  ASSERT_TRUE(w->done());
  EXPECT_EQ(w->status(), AcquireStatus::kGranted);
  EXPECT_EQ(backend.count("acquire"), attempts + 1);  // woken, not polled
  EXPECT_EQ(metrics.wakeups.Value(), 1);
}

TEST_F(LockServiceTest, BackoffNeverSleepsPastTheHoldersTtl) {
  auto holder = acquireNow(opts("x", "h", 300));
  const int64_t t0 = sched.nowUs();
  auto w = start(opts("x", "w", 1000, 10'000));
  while (!w->done()) sched.advanceMs(1);
  EXPECT_EQ(w->status(), AcquireStatus::kGranted);
  // Granted within a ms of the holder's expiry, even though the lease was never released.
  EXPECT_LE(sched.nowUs() - t0, 302'000);
  EXPECT_GE(sched.nowUs() - t0, 300'000);
  EXPECT_LE(backend.count("acquire"), 1 + 12);  // exponential: a handful of attempts, no spin
}

TEST_F(LockServiceTest, WaiterGivesUpAtItsDeadlineWithoutSpinning) {
  auto holder = acquireNow(opts("x", "h", 60'000));
  const int64_t t0 = sched.nowUs();
  auto w = start(opts("x", "w", 1000, 10'000));
  advance(9'999);
  EXPECT_FALSE(w->done());
  sched.advanceMs(1);
  ASSERT_TRUE(w->done());
  EXPECT_EQ(sched.nowUs() - t0, 10'000'000);  // exactly at the deadline
  EXPECT_EQ(w->status(), AcquireStatus::kBusy);
  EXPECT_GT(w->result->retry_after_ms, 49'000);  // the holder's remaining TTL
  EXPECT_LE(w->result->retry_after_ms, 50'000);
  // 10 s with backoff capped at 500 ms (jittered down to >= 250 ms): at most ~50 attempts.
  const int attempts = backend.count("acquire") - 1;
  EXPECT_GE(attempts, 10);
  EXPECT_LE(attempts, 50);
  EXPECT_EQ(metrics.acquireFor("mutex").busy.Value(), 1);
  EXPECT_EQ(waiters(), 0);
  EXPECT_EQ(sched.pendingTimers(), 1u);  // only the holder's expiry timer remains
}

TEST_F(LockServiceTest, SingleTryDoesNotJumpTheQueue) {
  auto holder = acquireNow(opts("x", "h", 60'000));
  auto w = start(opts("x", "w", 1000, 10'000));
  advance(100);
  const int attempts = backend.count("acquire");
  auto t = acquireNow(opts("x", "t", 1000));
  EXPECT_EQ(t->status(), AcquireStatus::kBusy);
  EXPECT_EQ(backend.count("acquire"), attempts);  // answered locally
  EXPECT_GT(t->result->retry_after_ms, 0);
}

TEST_F(LockServiceTest, CancelRemovesAQueuedWaiter) {
  auto holder = acquireNow(opts("x", "h", 60'000));
  auto a = start(opts("x", "a", 1000, 10'000));
  auto b = start(opts("x", "b", 1000, 10'000));
  advance(100);
  EXPECT_EQ(waiters(), 2);
  b->ticket.cancel();
  EXPECT_FALSE(b->done());  // answered on a later turn
  sched.runReady();
  ASSERT_TRUE(b->done());
  EXPECT_EQ(b->status(), AcquireStatus::kCancelled);
  EXPECT_EQ(waiters(), 1);
  a.reset();  // dropping the ticket (client gone) cancels too
  sched.runReady();
  EXPECT_EQ(waiters(), 0);
  EXPECT_TRUE(svc->waiterCounts().empty());
  EXPECT_EQ(backend.memory().watchedNames(), 0u);
  EXPECT_EQ(metrics.acquireFor("mutex").cancelled.Value(), 2);
  const int attempts = backend.count("acquire");
  advance(5000, 50);
  EXPECT_EQ(backend.count("acquire"), attempts);  // nobody is contending any more
}

TEST_F(LockServiceTest, CancelDuringAnInFlightAttemptReleasesTheLateGrant) {
  auto w = start(opts("x", "w", 1000, 10'000));  // lock free: its attempt is in flight now
  w->ticket.cancel();
  auto t = start(opts("y", "t", 1000));  // a single try, cancelled the same way
  t->ticket.cancel();
  sched.runReady();
  ASSERT_TRUE(w->done());
  EXPECT_EQ(w->status(), AcquireStatus::kCancelled);
  EXPECT_EQ(t->status(), AcquireStatus::kCancelled);
  EXPECT_FALSE(inspect("x").held);
  EXPECT_FALSE(inspect("y").held);
  EXPECT_EQ(held(), 0);
  EXPECT_TRUE(svc->leases().empty());
  EXPECT_EQ(backend.memory().watchedNames(), 0u);
}

TEST_F(LockServiceTest, CancelledHeadLetsTheNextWaiterIn) {
  auto w1 = start(opts("x", "w1", 1000, 10'000));  // in flight, will be granted
  auto w2 = start(opts("x", "w2", 1000, 10'000));
  w1->ticket.cancel();
  sched.runReady();
  EXPECT_EQ(w1->status(), AcquireStatus::kCancelled);
  // w1's late grant is released, which wakes w2 at once.
  sched.runReady();
  ASSERT_TRUE(w2->done());
  EXPECT_EQ(w2->status(), AcquireStatus::kGranted);
  EXPECT_EQ(held(), 1);
}

TEST_F(LockServiceTest, QueueLimitsAnswerTooManyWaiters) {
  cfg.max_waiters_per_lock = 2;
  cfg.max_waiters = 3;
  make();
  auto hx = acquireNow(opts("x", "h", 60'000));
  auto hy = acquireNow(opts("y", "h", 60'000));
  auto hz = acquireNow(opts("z", "h", 60'000));
  auto a = start(opts("x", "a", 1000, 10'000));
  auto b = start(opts("x", "b", 1000, 10'000));
  auto c = acquireNow(opts("x", "c", 1000, 10'000));
  EXPECT_EQ(c->status(), AcquireStatus::kTooManyWaiters);
  EXPECT_EQ(c->result->limit, WaiterLimit::kPerLock);
  EXPECT_GT(c->result->retry_after_ms, 0);
  auto d = start(opts("y", "d", 1000, 10'000));
  auto e = acquireNow(opts("z", "e", 1000, 10'000));  // held, and no room anywhere
  EXPECT_EQ(e->status(), AcquireStatus::kTooManyWaiters);
  EXPECT_EQ(e->result->limit, WaiterLimit::kSidecar);
  EXPECT_GT(e->result->retry_after_ms, 0);
  auto f = acquireNow(opts("free", "f", 1000));  // single tries are not waiters
  EXPECT_EQ(f->status(), AcquireStatus::kGranted);
  EXPECT_EQ(metrics.acquireFor("mutex").too_many_waiters.Value(), 2);
  EXPECT_EQ(waiters(), 3);
  EXPECT_FALSE(a->done());
  EXPECT_FALSE(b->done());
  EXPECT_FALSE(d->done());
}

// Finding 3 of issue 11: the sidecar's waiter budget is for callers that must wait; a free lock
// is granted to a waiting acquire even when every waiter slot is taken elsewhere.
TEST_F(LockServiceTest, FullWaiterBudgetStillGrantsAFreeLock) {
  cfg.max_waiters_per_lock = 2;
  cfg.max_waiters = 2;
  make();
  auto h = acquireNow(opts("x", "h", 60'000));
  auto a = start(opts("x", "a", 1000, 10'000));
  auto b = start(opts("x", "b", 1000, 10'000));
  sched.runReady();
  ASSERT_EQ(waiters(), 2);
  auto free_lock = acquireNow(opts("free", "c", 1000, 10'000));
  EXPECT_EQ(free_lock->status(), AcquireStatus::kGranted);
  EXPECT_EQ(waiters(), 2);
  EXPECT_EQ(metrics.acquireFor("mutex").too_many_waiters.Value(), 0);
  // A per-lock limit of 0 (no waiting at all) also tries first.
  cfg.max_waiters_per_lock = 0;
  make();
  auto g = acquireNow(opts("y", "g", 1000, 10'000));
  EXPECT_EQ(g->status(), AcquireStatus::kGranted);
  auto refused = acquireNow(opts("y", "r", 1000, 10'000));
  EXPECT_EQ(refused->status(), AcquireStatus::kTooManyWaiters);
  EXPECT_EQ(refused->result->limit, WaiterLimit::kPerLock);
}

// A try-first acquire that finds the lock busy queues if a slot came free meanwhile, with the
// rest of its budget, and is granted on the holder's release like any waiter.
TEST_F(LockServiceTest, TryFirstAcquireQueuesWhenRoomAppears) {
  cfg.max_waiters_per_lock = 1;
  cfg.max_waiters = 1;
  make();
  auto hx = acquireNow(opts("x", "h", 60'000));
  auto hy = acquireNow(opts("y", "h", 60'000));
  auto a = start(opts("x", "a", 1000, 10'000));
  sched.runReady();
  ASSERT_EQ(waiters(), 1);
  auto b = start(opts("y", "b", 1000, 10'000));  // tries: the budget is full
  a->ticket.cancel();                            // a slot frees while b's try is in flight
  sched.runReady();
  EXPECT_FALSE(b->done());
  EXPECT_EQ(waiters(), 1);
  ASSERT_TRUE(release("y", "h").isOk());
  sched.runReady();
  advance(10);
  ASSERT_TRUE(b->done());
  EXPECT_EQ(b->status(), AcquireStatus::kGranted);
  EXPECT_EQ(waiters(), 0);
}

// --- renewal (watchdog) ----------------------------------------------------------------------

TEST_F(LockServiceTest, AutoRenewKeepsA300msLeaseAliveForManyTtls) {
  auto o = opts("x", "alice", 300);
  o.auto_renew = true;
  auto a = acquireNow(o);
  ASSERT_EQ(a->status(), AcquireStatus::kGranted);
  for (int i = 0; i < 12; ++i) {
    advance(300);
    EXPECT_TRUE(inspect("x").held) << i;
    EXPECT_EQ(acquireNow(opts("x", "bob", 300))->status(), AcquireStatus::kBusy);
  }
  EXPECT_GE(metrics.renew_renewed.Value(), 30);
  EXPECT_EQ(metrics.lease_expired.Value(), 0);
  EXPECT_EQ(metrics.lease_lost.Value(), 0);
  EXPECT_EQ(a->events.size(), static_cast<size_t>(metrics.renew_renewed.Value()));
  ASSERT_EQ(svc->leases().size(), 1u);
  EXPECT_TRUE(svc->leases()[0].auto_renew);
  EXPECT_GE(svc->leases()[0].age_ms, 3600);
  EXPECT_EQ(*release("x", "alice"), ReleaseStatus::kReleased);
}

TEST_F(LockServiceTest, ReleaseStopsRenewalAndNoExtendIsSentAfterwards) {
  auto o = opts("x", "alice", 300);
  o.auto_renew = true;
  ASSERT_EQ(acquireNow(o)->status(), AcquireStatus::kGranted);
  advance(250);
  ASSERT_EQ(*release("x", "alice"), ReleaseStatus::kReleased);
  const int extends = backend.count("extend");
  EXPECT_GE(extends, 2);
  advance(3000, 10);
  EXPECT_EQ(backend.count("extend"), extends);
  EXPECT_FALSE(inspect("x").held);  // nothing resurrected it
  EXPECT_EQ(sched.pendingTimers(), 0u);
  EXPECT_EQ(held(), 0);
}

TEST_F(LockServiceTest, ReleaseDuringAnInFlightRenewalWaitsForIt) {
  backend.extend_reply_delay_ms = 50;
  auto o = opts("x", "alice", 300);
  o.auto_renew = true;
  ASSERT_EQ(acquireNow(o)->status(), AcquireStatus::kGranted);
  advance(120);  // the renewal went out at 100 ms; its answer comes at 150 ms
  ASSERT_EQ(backend.count("extend"), 1);
  ASSERT_EQ(backend.count("extend_reply"), 0);
  std::optional<StatusOr<ReleaseStatus>> r;
  svc->release(mutexLock("x"), "alice",
               [&](StatusOr<ReleaseStatus> v) { r.emplace(std::move(v)); });
  sched.runReady();
  EXPECT_FALSE(r);  // sequenced behind the renewal
  EXPECT_EQ(backend.count("release"), 0);
  advance(40);
  ASSERT_TRUE(r);
  EXPECT_EQ(**r, ReleaseStatus::kReleased);
  // Order on the wire: the renewal's answer, then the release.
  ASSERT_GE(backend.calls.size(), 3u);
  EXPECT_EQ(backend.calls[backend.calls.size() - 2].op, "extend_reply");
  EXPECT_EQ(backend.calls.back().op, "release");
  advance(2000, 10);
  EXPECT_EQ(backend.count("extend"), 1);
  EXPECT_FALSE(inspect("x").held);
}

TEST_F(LockServiceTest, LeaseDeletedBehindOurBackIsReportedLost) {
  auto o = opts("x", "alice", 300);
  o.stream = true;
  auto a = acquireNow(o);
  ASSERT_EQ(a->status(), AcquireStatus::kGranted);
  EXPECT_TRUE(svc->leases()[0].stream);
  EXPECT_TRUE(svc->leases()[0].auto_renew);
  advance(150);
  backend.memory().forceDelete("x");
  advance(100);  // the next renewal finds it gone
  ASSERT_FALSE(a->events.empty());
  EXPECT_EQ(a->events.back(), LeaseEvent::kLost);
  EXPECT_EQ(metrics.lease_lost.Value(), 1);
  EXPECT_EQ(metrics.renew_lost.Value(), 1);
  EXPECT_EQ(held(), 0);
  EXPECT_TRUE(svc->leases().empty());
  EXPECT_EQ(*release("x", "alice"), ReleaseStatus::kLeaseLost);
  EXPECT_EQ(extend("x", "alice", 300)->status, ExtendStatus::kLeaseLost);
  EXPECT_EQ(metrics.release_lease_lost.Value(), 1);
  const size_t events = a->events.size();
  advance(1000, 10);
  EXPECT_EQ(a->events.size(), events);  // reported once
}

TEST_F(LockServiceTest, LeaseStolenAfterAPauseIsReportedLost) {
  auto o = opts("x", "alice", 300);
  o.auto_renew = true;
  auto a = acquireNow(o);
  advance(50);
  backend.memory().forceOwner("x", "mallory");
  advance(100);
  ASSERT_FALSE(a->events.empty());
  EXPECT_EQ(a->events.back(), LeaseEvent::kLost);
  EXPECT_EQ(*release("x", "alice"), ReleaseStatus::kLeaseLost);
  EXPECT_TRUE(inspect("x").held);  // mallory's lease is untouched
}

TEST_F(LockServiceTest, ClientExtendThatFindsTheLeaseGoneMarksItLost) {
  auto a = acquireNow(opts("x", "alice", 1000));
  backend.memory().forceDelete("x");
  EXPECT_EQ(extend("x", "alice", 1000)->status, ExtendStatus::kLeaseLost);
  EXPECT_EQ(metrics.lease_lost.Value(), 1);
  EXPECT_EQ(metrics.renew_lost.Value(), 0);
  EXPECT_EQ(*release("x", "alice"), ReleaseStatus::kLeaseLost);
  EXPECT_EQ(held(), 0);
}

TEST_F(LockServiceTest, MaxHoldCapStopsRenewingAndTheLeaseThenExpires) {
  auto o = opts("x", "alice", 300);
  o.auto_renew = true;
  o.max_hold_ms = 1000;
  auto a = acquireNow(o);
  const int64_t t0 = sched.nowUs();
  bool capped_seen = false;
  while (inspect("x").held) {
    sched.advanceMs(1);
    for (auto e : a->events) capped_seen |= e == LeaseEvent::kCapped;
    ASSERT_LE(sched.nowUs() - t0, 1'000'000) << "held past max_hold_ms";
  }
  EXPECT_TRUE(capped_seen);
  EXPECT_GE(sched.nowUs() - t0, 700'000);  // renewed until close to the cap
  EXPECT_EQ(metrics.renew_capped.Value(), 1);
  sched.runReady();
  EXPECT_EQ(metrics.lease_expired.Value(), 1);
  EXPECT_EQ(metrics.lease_lost.Value(), 0);
  // The holder learns it no longer holds it, and that this is the cap, not a loss.
  EXPECT_EQ(a->events.back(), LeaseEvent::kCapExpired);
  EXPECT_EQ(std::count(a->events.begin(), a->events.end(), LeaseEvent::kLost), 0);
  EXPECT_EQ(held(), 0);
}

TEST_F(LockServiceTest, DefaultMaxHoldComesFromConfig) {
  cfg.default_max_hold_ms = 600;
  make();
  auto o = opts("x", "alice", 300);
  o.auto_renew = true;
  acquireNow(o);
  advance(2000, 10);
  EXPECT_EQ(metrics.renew_capped.Value(), 1);
  EXPECT_FALSE(inspect("x").held);
}

TEST_F(LockServiceTest, TransientErrorsAreRetriedOnlyWithinValidity) {
  auto o = opts("x", "alice", 300);
  o.auto_renew = true;
  auto a = acquireNow(o);
  advance(110);  // first renewal done at 100 ms: valid until 400 ms
  ASSERT_EQ(metrics.renew_renewed.Value(), 1);
  const int64_t valid_until = sched.nowUs() + 290'000;
  backend.fail_extend = unavailable("redis down");
  const size_t before = backend.calls.size();
  advance(1000);
  EXPECT_GT(metrics.renew_error.Value(), 3);  // retried quickly ...
  for (size_t i = before; i < backend.calls.size(); ++i) {
    if (backend.calls[i].op == "extend") {
      EXPECT_LT(backend.calls[i].at_us, valid_until);  // ... never past validity
    }
  }
  ASSERT_FALSE(a->events.empty());
  EXPECT_EQ(a->events.back(), LeaseEvent::kLost);
  EXPECT_EQ(metrics.lease_lost.Value(), 1);
  EXPECT_EQ(metrics.renew_lost.Value(), 1);
  EXPECT_EQ(held(), 0);
  const int extends = backend.count("extend");
  advance(1000);
  EXPECT_EQ(backend.count("extend"), extends);
  backend.fail_extend.reset();
  EXPECT_EQ(*release("x", "alice"), ReleaseStatus::kLeaseLost);
}

TEST_F(LockServiceTest, TransientErrorsThatClearInTimeLoseNothing) {
  auto o = opts("x", "alice", 300);
  o.auto_renew = true;
  auto a = acquireNow(o);
  advance(90);
  backend.fail_extend = unavailable("blip");
  advance(100);
  backend.fail_extend.reset();
  advance(2000);
  EXPECT_GT(metrics.renew_error.Value(), 0);
  EXPECT_EQ(metrics.lease_lost.Value(), 0);
  EXPECT_TRUE(inspect("x").held);
  for (auto e : a->events) EXPECT_EQ(e, LeaseEvent::kRenewed);
  EXPECT_EQ(*release("x", "alice"), ReleaseStatus::kReleased);
}

// --- shutdown ----------------------------------------------------------------------------------

TEST_F(LockServiceTest, ShutdownFailsWaitersReleasesLeasesAndZeroesGauges) {
  auto o = opts("x", "alice", 300);
  o.auto_renew = true;
  auto a = acquireNow(o);
  auto b = acquireNow(opts("y", "bob", 60'000));
  auto w = start(opts("x", "carol", 300, 10'000));
  advance(50);
  EXPECT_EQ(held(), 2);
  EXPECT_EQ(waiters(), 1);
  bool done = false;
  svc->shutdown(true, 5000, [&] { done = true; });
  EXPECT_FALSE(done);
  sched.runReady();
  EXPECT_TRUE(done);
  ASSERT_TRUE(w->done());
  EXPECT_EQ(w->status(), AcquireStatus::kCancelled);
  EXPECT_FALSE(inspect("x").held);
  EXPECT_FALSE(inspect("y").held);
  EXPECT_EQ(held(), 0);
  EXPECT_EQ(waiters(), 0);
  EXPECT_EQ(backend.memory().watchedNames(), 0u);
  auto late = acquireNow(opts("z", "dave", 300));
  EXPECT_EQ(late->status(), AcquireStatus::kCancelled);
  const int extends = backend.count("extend");
  advance(2000, 10);
  EXPECT_EQ(backend.count("extend"), extends);
  EXPECT_EQ(sched.pendingTimers(), 0u);
}

// SIGTERM answers the waiters at once (cancelWaiters) while campaign leaders step down: the
// leases held stay renewed until shutdown() follows.
TEST_F(LockServiceTest, CancelWaitersAnswersWaitersAndKeepsLeasesRenewed) {
  auto o = opts("x", "alice", 300);
  o.auto_renew = true;
  auto a = acquireNow(o);
  auto w = start(opts("x", "carol", 300, 10'000));
  advance(50);
  EXPECT_EQ(waiters(), 1);
  svc->cancelWaiters();
  sched.runReady();
  ASSERT_TRUE(w->done());
  EXPECT_EQ(w->status(), AcquireStatus::kCancelled);
  EXPECT_EQ(waiters(), 0);
  const int extends = backend.count("extend");
  advance(1000, 10);
  EXPECT_GT(backend.count("extend"), extends) << "the holder's lease is still renewed";
  EXPECT_TRUE(inspect("x").held);
  EXPECT_EQ(held(), 1);
  bool done = false;
  svc->shutdown(true, 5000, [&] { done = true; });
  sched.runReady();
  EXPECT_TRUE(done);
  EXPECT_FALSE(inspect("x").held);
}

TEST_F(LockServiceTest, ShutdownWithoutReleaseLeavesLeasesToExpire) {
  auto o = opts("x", "alice", 300);
  o.auto_renew = true;
  acquireNow(o);
  bool done = false;
  svc->shutdown(false, 5000, [&] { done = true; });
  sched.runReady();
  EXPECT_TRUE(done);
  EXPECT_TRUE(inspect("x").held);
  advance(400, 10);
  EXPECT_FALSE(inspect("x").held);  // renewals stopped
  EXPECT_EQ(held(), 0);
}

TEST_F(LockServiceTest, ShutdownGiveUpAtGraceWhenTheBackendHangs) {
  backend.extend_reply_delay_ms = 60'000;  // a renewal that never answers in time
  auto o = opts("x", "alice", 300);
  o.auto_renew = true;
  acquireNow(o);
  advance(110);  // renewal in flight
  bool done = false;
  svc->shutdown(true, 1000, [&] { done = true; });
  advance(999);
  EXPECT_FALSE(done);
  advance(1);
  EXPECT_TRUE(done);
}

// A hand-off is two calls in flight (the release, and the waiter's attempt, settled once the
// waiter's part of the answer is handled): shutdown waits for both, and for the give-back of the
// grant that reached a waiter the shutdown had cancelled meanwhile.
TEST_F(LockServiceTest, ShutdownWaitsForBothHalvesOfAHandOff) {
  backend.hand_off = true;
  backend.release_reply_delay_ms = 500;
  auto holder = acquireNow(opts("x", "h", 60'000));
  auto w = start(opts("x", "w", 60'000, 30'000));
  advance(100, 10);
  std::optional<StatusOr<ReleaseStatus>> released;
  svc->release(mutexLock("x"), "h",
               [&](StatusOr<ReleaseStatus> v) { released.emplace(std::move(v)); });
  advance(10, 1);
  ASSERT_EQ(backend.count("release_grant"), 1);
  bool done = false;
  svc->shutdown(/*release_held=*/false, 10'000, [&] { done = true; });
  advance(10, 1);
  ASSERT_TRUE(w->done());
  EXPECT_EQ(w->status(), AcquireStatus::kCancelled);
  advance(400, 10);
  EXPECT_FALSE(done) << "the hand-off is still in flight";
  EXPECT_FALSE(released.has_value());
  advance(200, 10);
  ASSERT_TRUE(released.has_value());
  EXPECT_EQ(**released, ReleaseStatus::kReleased);
  EXPECT_EQ(backend.count("release"), 1) << "the cancelled waiter's late grant is given back";
  EXPECT_TRUE(done);
  EXPECT_FALSE(inspect("x").held);
}

TEST_F(LockServiceTest, DestroyingTheServiceWithWorkInFlightIsSafe) {
  auto holder = acquireNow(opts("x", "h", 60'000));
  auto w = start(opts("x", "w", 300, 10'000));
  auto o = opts("y", "alice", 300);
  o.auto_renew = true;
  start(o);
  svc.reset();
  advance(1000, 10);
  EXPECT_FALSE(w->done());  // nothing runs after the service is gone
}

// A holder that destroys the service from its own lost event (the loss reason is readable while
// that event is delivered): nothing touches the service after the event (ASan; found by review).
TEST_F(LockServiceTest, DestroyingTheServiceFromALostEventIsSafe) {
  bool lost = false;
  AcquireTicket ticket = svc->acquire(
      opts("stuck", "alice", 60'000), [](AcquireResult) {},
      [&](LeaseEvent e) {
        if (e != LeaseEvent::kLost) return;
        lost = true;
        EXPECT_STREQ(svc->lossReason(), "force-released by an operator");
        svc.reset();
      });
  sched.runReady();
  svc->forceRelease("stuck", [](StatusOr<ForcedRelease>) {});
  advance(10);
  EXPECT_TRUE(lost);
}

}  // namespace
}  // namespace sidelock::lock

namespace sidelock::lock {
namespace {

TEST_F(LockServiceTest, ClientExtendSetsTheTtlTheWatchdogRenewsWith) {
  auto o = opts("x", "alice", 300);
  o.auto_renew = true;
  acquireNow(o);
  ASSERT_EQ(extend("x", "alice", 3000)->status, ExtendStatus::kExtended);
  advance(2000);
  // The client's extend, then renewals at 100 ms (already with ttl 3000) and 1100 ms.
  EXPECT_EQ(backend.count("extend"), 3);
  EXPECT_EQ(svc->leases()[0].ttl_remaining_ms, 2100);
}

TEST_F(LockServiceTest, ManyClientsNeverOverlapAndEverythingSettles) {
  manyClientsNeverOverlapAndEverythingSettles();
}

TEST_F(LockServiceTest, ManyClientsNeverOverlapWithHandOff) {
  backend.hand_off = true;
  manyClientsNeverOverlapAndEverythingSettles();
  EXPECT_GT(backend.count("release_grant"), 0);
}

void LockServiceTest::manyClientsNeverOverlapAndEverythingSettles() {
  // Randomised (fixed seed) contention on 3 names: no two grants of a name overlap in time,
  // tokens increase, every acquire is answered exactly once, and gauges, timers and watches
  // return to zero.
  std::mt19937 rng(42);
  struct Holder {
    uint64_t token = 0;
    int64_t ends_us = 0;  // release time, or grant + ttl
  };
  std::map<std::string, Holder> last;
  std::set<Outcome*> seen;
  std::vector<std::shared_ptr<Outcome>> all;
  int granted = 0, busy = 0;
  for (int round = 0; round < 300; ++round) {
    const std::string name = "n" + std::to_string(rng() % 3);
    const std::string owner = "c" + std::to_string(round);
    const int64_t wait = rng() % 2 ? 0 : 50 + rng() % 400;
    auto out = start(opts(name, owner, 200 + rng() % 300, wait));
    all.push_back(out);
    if (rng() % 5 == 0) out->ticket.cancel();
    advance(1 + rng() % 20);
    for (auto& o : all) {
      if (!o->done() || o->status() != AcquireStatus::kGranted || !seen.insert(o.get()).second) {
        continue;
      }
      const int64_t at = o->answered_us;
      Holder& h = last[o->grant().lock.display()];
      EXPECT_LE(h.ends_us, at) << "two grants of " << o->grant().lock.display() << " overlap";
      EXPECT_GT(o->grant().token, h.token);
      h.token = o->grant().token;
      h.ends_us = at + o->grant().ttl_ms * 1000;
      ++granted;
      if (rng() % 2 && svc->leases().size() > 0) {
        auto r = release(o->grant().lock, o->grant().owner);
        ASSERT_TRUE(r.isOk());
        if (*r == ReleaseStatus::kReleased) {
          h.ends_us = sched.nowUs();
        } else {
          EXPECT_LE(h.ends_us, sched.nowUs()) << "not held before its TTL ran out";
        }
      }
    }
  }
  advance(3000, 5);
  for (auto& o : all) {
    ASSERT_TRUE(o->done());
    busy += o->status() == AcquireStatus::kBusy;
  }
  EXPECT_GT(granted, 20);
  EXPECT_GT(busy, 5);
  EXPECT_EQ(held(), 0);
  EXPECT_EQ(waiters(), 0);
  EXPECT_TRUE(svc->leases().empty());
  EXPECT_TRUE(svc->waiterCounts().empty());
  EXPECT_EQ(backend.memory().watchedNames(), 0u);
  EXPECT_EQ(sched.pendingTimers(), 0u);
  EXPECT_EQ(metrics.acquireFor("mutex").acquired.Value() +
                metrics.acquireFor("mutex").busy.Value() +
                metrics.acquireFor("mutex").cancelled.Value() +
                metrics.acquireFor("mutex").error.Value() +
                metrics.acquireFor("mutex").too_many_waiters.Value(),
            static_cast<double>(all.size()));
}

// --- read/write locks ------------------------------------------------------------------------

// Readers queued behind a writer are all let in when it releases (they share: the whole run of
// them contends at once, not one per release), each with a lease of its own.
TEST_F(LockServiceTest, QueuedReadersAreAllAdmittedWhenTheWriterReleases) {
  auto writer = acquireNow(opts("doc", "w", 60'000));
  ASSERT_EQ(writer->status(), AcquireStatus::kGranted);
  std::vector<std::shared_ptr<Outcome>> readers;
  for (int i = 0; i < 3; ++i) {
    readers.push_back(start(opts(sharedLock("doc"), "r" + std::to_string(i), 60'000, 30'000)));
  }
  advance(100, 10);
  for (const auto& r : readers) EXPECT_FALSE(r->done());
  ASSERT_EQ(*release("doc", "w"), ReleaseStatus::kReleased);
  sched.runReady();  // no time passes: the release wakes the readers' queue itself
  for (const auto& r : readers) {
    ASSERT_TRUE(r->done());
    EXPECT_EQ(r->status(), AcquireStatus::kGranted);
    EXPECT_GT(r->grant().token, writer->grant().token);
  }
  EXPECT_EQ(held(), 3) << "three readers, three leases";
  EXPECT_EQ(inspect(sharedLock("doc")).used, 3);
  EXPECT_EQ(metrics.acquireFor("shared").acquired.Value(), 3);
  EXPECT_EQ(metrics.acquireFor("shared").contended.Value(), 3);
  // A reader's release leaves the others holding; the last one's lets a writer in.
  auto next_writer = start(opts("doc", "w2", 60'000, 30'000));
  advance(50, 10);
  ASSERT_EQ(*release(sharedLock("doc"), "r0"), ReleaseStatus::kReleased);
  ASSERT_EQ(*release(sharedLock("doc"), "r1"), ReleaseStatus::kReleased);
  sched.runReady();
  EXPECT_FALSE(next_writer->done());
  ASSERT_EQ(*release(sharedLock("doc"), "r2"), ReleaseStatus::kReleased);
  sched.runReady();
  ASSERT_TRUE(next_writer->done()) << "the last reader's release woke the writer at once";
  EXPECT_EQ(next_writer->status(), AcquireStatus::kGranted);
}

// A 409 says why: somebody else holds the lock, or the caller itself does (not re-entering).
TEST_F(LockServiceTest, BusyAnswersSayWhoHoldsTheLock) {
  ASSERT_EQ(acquireNow(opts("x", "alice", 60'000))->status(), AcquireStatus::kGranted);
  auto other = acquireNow(opts("x", "bob", 60'000));
  EXPECT_EQ(other->status(), AcquireStatus::kBusy);
  EXPECT_EQ(other->result->busy_reason, BusyReason::kHeld);
  auto same = acquireNow(opts("x", "alice", 60'000));
  EXPECT_EQ(same->status(), AcquireStatus::kBusy);
  EXPECT_EQ(same->result->busy_reason, BusyReason::kHeldByYou);
  // A waiter that timed out says what its own last try found.
  auto waited = start(opts("x", "alice", 60'000, 50));
  advance(100);
  ASSERT_TRUE(waited->done());
  EXPECT_EQ(waited->status(), AcquireStatus::kBusy);
  EXPECT_EQ(waited->result->busy_reason, BusyReason::kHeldByYou);
  // A reader that holds a read lease already.
  ASSERT_EQ(acquireNow(opts(sharedLock("y"), "r1", 60'000))->status(), AcquireStatus::kGranted);
  EXPECT_EQ(acquireNow(opts(sharedLock("y"), "r1", 60'000))->result->busy_reason,
            BusyReason::kHeldByYou);
  EXPECT_EQ(acquireNow(opts("y", "w", 60'000))->result->busy_reason, BusyReason::kHeld)
      << "a writer refused by readers";
}

// A queued writer turns new readers away while the readers it waits for drain (writer
// preference); a single try of a writer marks nothing.
TEST_F(LockServiceTest, AQueuedWriterTurnsNewReadersAway) {
  ASSERT_EQ(acquireNow(opts(sharedLock("doc"), "r1", 60'000))->status(), AcquireStatus::kGranted);
  EXPECT_EQ(acquireNow(opts("doc", "try", 60'000))->status(), AcquireStatus::kBusy);
  EXPECT_EQ(acquireNow(opts(sharedLock("doc"), "r2", 60'000))->status(), AcquireStatus::kGranted)
      << "a writer's single try does not keep readers out";
  auto writer = start(opts("doc", "w", 60'000, 30'000));
  advance(10);
  auto late_reader = acquireNow(opts(sharedLock("doc"), "r3", 60'000));
  EXPECT_EQ(late_reader->status(), AcquireStatus::kBusy) << "the waiting writer goes first";
  EXPECT_EQ(late_reader->result->busy_reason, BusyReason::kWriterWaiting);
  auto again = acquireNow(opts(sharedLock("doc"), "r1", 60'000));
  EXPECT_EQ(again->result->busy_reason, BusyReason::kWriterWaiting) << "the mark is checked first";
  ASSERT_EQ(*release(sharedLock("doc"), "r1"), ReleaseStatus::kReleased);
  ASSERT_EQ(*release(sharedLock("doc"), "r2"), ReleaseStatus::kReleased);
  sched.runReady();
  ASSERT_TRUE(writer->done());
  EXPECT_EQ(writer->status(), AcquireStatus::kGranted);
  // Once the writer gave up waiting (granted here), readers are welcome again after it.
  ASSERT_EQ(*release("doc", "w"), ReleaseStatus::kReleased);
  EXPECT_EQ(acquireNow(opts(sharedLock("doc"), "r3", 60'000))->status(), AcquireStatus::kGranted);
}

// A queued writer that leaves without the lock withdraws its mark at once, handing it to the
// writer still queued behind it; readers get in as soon as the last one has left, not when the
// mark would have lapsed (retry_max_ms + jitter + 1 s).
TEST_F(LockServiceTest, QueuedWritersThatLeaveWithdrawTheirMarks) {
  ASSERT_EQ(acquireNow(opts(sharedLock("doc"), "r1", 60'000))->status(), AcquireStatus::kGranted);
  auto first = start(opts("doc", "w1", 60'000, 30'000));
  auto second = start(opts("doc", "w2", 60'000, 30'000));
  advance(10);
  EXPECT_EQ(acquireNow(opts(sharedLock("doc"), "r2", 60'000))->status(), AcquireStatus::kBusy);
  first->ticket.cancel();  // w1's client hangs up
  sched.runReady();
  EXPECT_EQ(backend.count("withdraw"), 1);
  EXPECT_EQ(acquireNow(opts(sharedLock("doc"), "r2", 60'000))->status(), AcquireStatus::kBusy)
      << "w2 still waits: its mark keeps readers out";
  second->ticket.cancel();
  sched.runReady();
  EXPECT_EQ(backend.count("withdraw"), 2);
  EXPECT_EQ(acquireNow(opts(sharedLock("doc"), "r2", 60'000))->status(), AcquireStatus::kGranted)
      << "no writer waits any more: readers come in at once";
}

// The last reader out lets the queued writer in, not the readers queued behind it (the writer's
// mark goes with the readers' key, so whoever asks first wins: the writer is woken first).
TEST_F(LockServiceTest, TheLastReadersReleaseLetsTheQueuedWriterInFirst) {
  ASSERT_EQ(acquireNow(opts(sharedLock("doc"), "r1", 60'000))->status(), AcquireStatus::kGranted);
  auto writer = start(opts("doc", "w", 60'000, 30'000));
  advance(5);
  auto reader = start(opts(sharedLock("doc"), "r2", 60'000, 30'000));
  advance(5);
  ASSERT_FALSE(reader->done()) << "held back by the waiting writer";
  for (int cycle = 0; cycle < 3 && !writer->done(); ++cycle) {
    ASSERT_EQ(*release(sharedLock("doc"), cycle == 0 ? "r1" : "r2"), ReleaseStatus::kReleased);
    sched.runReady();
  }
  ASSERT_TRUE(writer->done());
  EXPECT_EQ(writer->status(), AcquireStatus::kGranted);
  EXPECT_FALSE(reader->done()) << "the reader waits for the writer";
  ASSERT_EQ(*release("doc", "w"), ReleaseStatus::kReleased);
  sched.runReady();
  ASSERT_TRUE(reader->done());
  EXPECT_EQ(reader->status(), AcquireStatus::kGranted);
}

// A force release frees readers too (they hold the lock's key): their leases end as lost.
TEST_F(LockServiceTest, ForceReleaseEndsReadersLeasesAsLost) {
  auto r1 = acquireNow(opts(sharedLock("doc"), "r1", 60'000));
  auto r2 = acquireNow(opts(sharedLock("doc"), "r2", 60'000));
  ASSERT_EQ(r2->status(), AcquireStatus::kGranted);
  std::optional<StatusOr<ForcedRelease>> forced;
  svc->forceRelease("doc", [&](StatusOr<ForcedRelease> r) { forced.emplace(std::move(r)); });
  sched.runReady();
  ASSERT_TRUE(forced && forced->isOk());
  EXPECT_TRUE((*forced)->released);
  EXPECT_EQ(held(), 0);
  EXPECT_EQ(r1->events, std::vector<LeaseEvent>{LeaseEvent::kLost});
  EXPECT_TRUE(svc->lostLately(sharedLock("doc"), "r2")) << "what the API routes a release by";
  EXPECT_EQ(*release(sharedLock("doc"), "r2"), ReleaseStatus::kLeaseLost);
  EXPECT_EQ(acquireNow(opts("doc", "w", 60'000))->status(), AcquireStatus::kGranted);
}

// --- fair locks ------------------------------------------------------------------------------

// Fair waiters queued here are registered in the backend's queue as they arrive (through the
// head's attempt) and keep their places; one that gives up withdraws; a single try never jumps
// the queue.
TEST_F(LockServiceTest, FairWaitersRegisterOnArrivalAndWithdrawWhenTheyLeave) {
  ASSERT_EQ(acquireNow(opts(fairLock("q"), "h", 60'000))->status(), AcquireStatus::kGranted);
  auto first = start(opts(fairLock("q"), "w1", 60'000, 30'000));
  sched.runReady();
  auto second = start(opts(fairLock("q"), "w2", 60'000, 30'000));
  sched.runReady();
  auto third = start(opts(fairLock("q"), "w3", 60'000, 30'000));
  sched.runReady();
  advance(5);
  // The backend's queue holds all three: a fair single try of a free lock would be refused.
  ASSERT_EQ(*release(fairLock("q"), "h"), ReleaseStatus::kReleased);
  second->ticket.cancel();  // w2 leaves
  sched.runReady();
  ASSERT_TRUE(first->done());
  EXPECT_EQ(first->status(), AcquireStatus::kGranted);
  EXPECT_EQ(first->grant().owner, "w1");
  EXPECT_GE(backend.count("withdraw"), 1);
  ASSERT_EQ(*release(fairLock("q"), "w1"), ReleaseStatus::kReleased);
  EXPECT_EQ(acquireNow(opts(fairLock("q"), "jumper", 60'000))->status(), AcquireStatus::kBusy)
      << "w3 is queued: a single try waits its turn";
  sched.runReady();
  advance(10);
  ASSERT_TRUE(third->done());
  EXPECT_EQ(third->status(), AcquireStatus::kGranted) << "w2 withdrew: w3 is next";
  EXPECT_EQ(metrics.acquireFor("fair").acquired.Value(), 3);
}

// --- multi-locks -----------------------------------------------------------------------------

// Names are taken in sorted order; the one that is busy makes the multi-lock give back what it
// took, and a multi-lock that waits longer than its TTL keeps its early leases alive.
TEST_F(LockServiceTest, MultiLockTakesAllOrGivesBackAndKeepsEarlyLeasesAlive) {
  auto run = [&](MultiAcquireOptions o) {
    auto out = std::make_shared<std::optional<MultiAcquireResult>>();
    AcquireTicket t = svc->acquireAll(std::move(o), [out](MultiAcquireResult r) { *out = r; });
    t.release();
    return out;
  };
  ASSERT_EQ(acquireNow(opts("m-c", "other", 60'000))->status(), AcquireStatus::kGranted);
  auto busy = run({{"m-c", "m-a", "m-b"}, "me", 60'000, 0, false, 0, ""});
  sched.runReady();
  advance(10);
  ASSERT_TRUE(busy->has_value());
  EXPECT_EQ((*busy)->status, AcquireStatus::kBusy);
  EXPECT_EQ((*busy)->blocked_by, "m-c");
  EXPECT_EQ(svc->holds(mutexLock("m-a"), "me"), 0) << "given back";
  EXPECT_EQ(svc->holds(mutexLock("m-b"), "me"), 0) << "given back";
  EXPECT_EQ(held(), 1);

  // m-c is held for 60 s more; our leases have a 300 ms TTL and we wait up to 2 s.
  ASSERT_EQ(*release("m-c", "other"), ReleaseStatus::kReleased);
  ASSERT_EQ(acquireNow(opts("m-c", "other", 1500))->status(), AcquireStatus::kGranted);
  auto waited = run({{"m-c", "m-a"}, "me", 300, 2000, false, 0, ""});
  advance(1700, 10);
  ASSERT_TRUE(waited->has_value());
  ASSERT_EQ((*waited)->status, AcquireStatus::kGranted);
  ASSERT_EQ((*waited)->grants.size(), 2u);
  EXPECT_EQ((*waited)->grants[0].lock.display(), "m-a");
  EXPECT_GE((*waited)->ttl_ms, 150) << "m-a was kept alive while m-c was waited for";
  EXPECT_EQ(inspect("m-a").held, true);
}

// A keep-alive extend the backend could not answer (an outage a waiting acquire rides out) does
// not end the multi-lock: the next one renews the lease (found from outside on Redis Cluster: a
// master stalled 1.2 s answered a waiting multi-lock 503 with most of its wait_ms left).
TEST_F(LockServiceTest, AWaitingMultiLockRidesOutAKeepAliveTheBackendCouldNotAnswer) {
  ASSERT_EQ(acquireNow(opts("k-c", "other", 1500))->status(), AcquireStatus::kGranted);
  auto out = std::make_shared<std::optional<MultiAcquireResult>>();
  AcquireTicket t = svc->acquireAll({{"k-c", "k-a"}, "me", 300, 2000, false, 0, ""},
                                    [out](MultiAcquireResult r) { *out = r; });
  t.release();
  advance(50, 10);
  ASSERT_EQ(svc->holds(mutexLock("k-a"), "me"), 1) << "k-a taken, k-c waited for";
  backend.fail_extend = unavailable("redis stalled");  // the keep-alive at ~100 ms fails
  advance(80, 10);
  backend.fail_extend.reset();
  EXPECT_FALSE(out->has_value()) << (*out)->error.message();
  advance(1700, 10);
  ASSERT_TRUE(out->has_value());
  ASSERT_EQ((*out)->status, AcquireStatus::kGranted) << (*out)->error.message();
  EXPECT_GE((*out)->ttl_ms, 150) << "k-a renewed by the keep-alives after the failed one";
}

// A multi-lock that ends without every name gives back what it took; when the backend cannot
// answer that release (an outage), the name is given back once it is back, under the owner id the
// service drew (found from outside on Redis Cluster: a name taken just before a master died stayed
// held until its TTL after the 503).
TEST_F(LockServiceTest, AMultiLocksGiveBackTheBackendCouldNotAnswerIsRetried) {
  ASSERT_EQ(acquireNow(opts("g-c", "other", 60'000))->status(), AcquireStatus::kGranted);
  auto out = std::make_shared<std::optional<MultiAcquireResult>>();
  AcquireTicket t = svc->acquireAll({{"g-c", "g-a"}, "", 60'000, 300, false, 0, ""},
                                    [out](MultiAcquireResult r) { *out = r; });
  t.release();
  advance(50, 10);
  ASSERT_TRUE(inspect("g-a").held) << "g-a taken, g-c waited for";
  backend.fail_release = unavailable("redis down");
  advance(400, 10);
  ASSERT_TRUE(out->has_value());
  EXPECT_EQ((*out)->status, AcquireStatus::kBusy);
  EXPECT_TRUE(inspect("g-a").held) << "the give-back failed";
  backend.fail_release.reset();
  backend.announceReady();
  advance(2000, 10);
  EXPECT_FALSE(inspect("g-a").held) << "given back once the backend answered";
  EXPECT_EQ(metrics.unanswered_released.Value(), 1);
}

TEST_F(LockServiceTest, CancelledMultiLockGivesBackWhatItTook) {
  ASSERT_EQ(acquireNow(opts("n-2", "other", 60'000))->status(), AcquireStatus::kGranted);
  bool answered = false;
  MultiAcquireOptions both{{"n-1", "n-2"}, "me", 60'000, 10'000, false, 0, ""};
  AcquireTicket t = svc->acquireAll(std::move(both), [&](MultiAcquireResult r) {
    answered = true;
    EXPECT_EQ(r.status, AcquireStatus::kCancelled);
  });
  advance(50, 10);
  EXPECT_EQ(svc->holds(mutexLock("n-1"), "me"), 1);
  t.cancel();
  EXPECT_FALSE(answered) << "answered on a later turn";
  advance(10);
  EXPECT_TRUE(answered);
  EXPECT_EQ(svc->holds(mutexLock("n-1"), "me"), 0);
  EXPECT_FALSE(inspect("n-1").held);
}

// A multi-lock acquire whose answer was lost (src/lock/unanswered.cc): under the owner id the
// service drew, what it may have been granted is the service's to give back, as for one name.
class UnansweredMultiLockTest : public LockServiceTest {
 protected:
  /// The backend takes multi-locks in one step, and that try runs but its answer is lost.
  void loseTheOneStepTrysAnswer() {
    backend.all_at_once = true;
    backend.fail_acquire_all = noAnswer();
    backend.acquire_applied_anyway = true;
  }
  std::shared_ptr<std::optional<MultiAcquireResult>> multi(std::vector<std::string> names,
                                                           std::string owner, int64_t wait_ms) {
    auto out = std::make_shared<std::optional<MultiAcquireResult>>();
    MultiAcquireOptions o{std::move(names), std::move(owner), 60'000, wait_ms, false, 0, ""};
    AcquireTicket t = svc->acquireAll(std::move(o), [out](MultiAcquireResult r) { *out = r; });
    t.release();
    return out;
  }
};

TEST_F(UnansweredMultiLockTest, AnUnansweredOneStepTryIsGivenBackUntilTheBackendIsBack) {
  loseTheOneStepTrysAnswer();
  backend.fail_release = unavailable("redis down");
  auto r = multi({"ma", "mb"}, "", 0);
  advance(10);
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->status, AcquireStatus::kError);
  EXPECT_EQ((*r)->error.message().find("may have been granted"), std::string::npos);
  EXPECT_TRUE(inspect("ma").held && inspect("mb").held) << "the lost answer's grants";
  advance(2000, 10);
  EXPECT_GE(backend.count("release"), 4) << "retried while the backend is out";
  backend.fail_release.reset();
  backend.announceReady();
  sched.runReady();
  EXPECT_FALSE(inspect("ma").held);
  EXPECT_FALSE(inspect("mb").held);
  EXPECT_EQ(metrics.unanswered_released.Value(), 2);
  EXPECT_EQ(metrics.unanswered_left_to_owner.Value(), 0);
}

TEST_F(UnansweredMultiLockTest, AWaitingMultiLockGivesTheOneStepGrantBackBeforeEachName) {
  loseTheOneStepTrysAnswer();
  backend.fail_release = unavailable("redis down");  // the give-backs are refused at first
  auto r = multi({"wa", "wb"}, "", 5000);
  advance(300, 10);
  EXPECT_FALSE(r->has_value());
  backend.fail_release.reset();
  backend.announceReady();
  advance(2000, 10);
  ASSERT_TRUE(r->has_value());
  ASSERT_EQ((*r)->status, AcquireStatus::kGranted)
      << "not kept out by its own lost grants until their TTL";
  EXPECT_EQ(metrics.unanswered_released.Value(), 2);
  // Each name's give-back answered before that name was asked for again under the same owner.
  std::vector<std::string> order;
  for (const auto& c : backend.calls) {
    if (c.op == "release" || c.op == "acquire") order.push_back(c.op + " " + c.name);
  }
  ASSERT_GE(order.size(), 4u);
  EXPECT_EQ(order[order.size() - 4], "release wa");
  EXPECT_EQ(order[order.size() - 3], "acquire wa");
  EXPECT_EQ(order[order.size() - 2], "release wb");
  EXPECT_EQ(order[order.size() - 1], "acquire wb");
  EXPECT_EQ(inspect("wa").token, (*r)->grants[0].token);
}

// A name refused at the door (its local queue full) after an unanswered one-step try: no waiter
// exists to give it back, so the refusal does.
TEST_F(UnansweredMultiLockTest, ANameRefusedAfterAnUnansweredTryIsGivenBackAllTheSame) {
  cfg.max_waiters_per_lock = 1;
  make();
  loseTheOneStepTrysAnswer();
  backend.plain_release_reply_delay_ms = 50;  // ra's give-back answers later
  auto r = multi({"ra", "rb"}, "", 5000);
  sched.runReady();
  backend.fail_acquire_all.reset();
  ASSERT_TRUE(inspect("rb").held) << "the lost answer's grant";
  auto other = start(opts("rb", "other", 60'000, 10'000));  // fills rb's queue
  sched.runReady();
  ASSERT_FALSE(other->done());
  advance(200, 10);
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->status, AcquireStatus::kTooManyWaiters);
  advance(200, 10);
  EXPECT_EQ(metrics.unanswered_released.Value(), 2) << "ra before its attempt, rb at the refusal";
  ASSERT_TRUE(other->done()) << "rb was left to its TTL";
  EXPECT_EQ(other->status(), AcquireStatus::kGranted);
}

// The caller's own owner id: its one release per name must have answered before the first name
// is asked for again, or a release retried after NOSCRIPT could run after (and free) the grant.
TEST_F(UnansweredMultiLockTest, UnderTheCallersOwnerTheReleasesAnswerBeforeTheNamesAreAskedFor) {
  loseTheOneStepTrysAnswer();
  backend.plain_release_reply_delay_ms = 50;
  auto r = multi({"ca", "cb"}, "alice", 5000);
  sched.runReady();
  backend.fail_acquire_all.reset();
  advance(500, 10);
  ASSERT_TRUE(r->has_value());
  ASSERT_EQ((*r)->status, AcquireStatus::kGranted);
  int64_t last_release_us = -1;
  int64_t first_acquire_us = -1;
  for (const auto& c : backend.calls) {
    if (c.op == "release" && first_acquire_us < 0) last_release_us = c.at_us;
    if (c.op == "acquire" && first_acquire_us < 0) first_acquire_us = c.at_us;
  }
  ASSERT_GE(last_release_us, 0) << "the caller's owner id got its releases";
  ASSERT_GE(first_acquire_us, 0);
  EXPECT_GE(first_acquire_us, last_release_us + 50'000)
      << "the first name was asked for before the releases had answered";
  EXPECT_EQ(inspect("ca").token, (*r)->grants[0].token);
}

// The same for a multi-lock that does not wait: it answers only once the releases have answered,
// so that the caller's immediate retry under the same owner id cannot be overtaken by a release
// retried after NOSCRIPT (found by review).
TEST_F(UnansweredMultiLockTest, UnderTheCallersOwnerATryIsAnsweredOnceItsReleasesHaveRun) {
  loseTheOneStepTrysAnswer();
  backend.plain_release_reply_delay_ms = 50;
  auto r = multi({"ta", "tb"}, "alice", 0);
  advance(20, 10);
  EXPECT_FALSE(r->has_value()) << "answered before its releases had run";
  backend.fail_acquire_all.reset();
  advance(100, 10);
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->status, AcquireStatus::kError);
  EXPECT_FALSE(inspect("ta").held);
  EXPECT_FALSE(inspect("tb").held);
}

TEST_F(UnansweredMultiLockTest, NameByNameUnderADrawnOwnerIsGivenBackNotLeftToTheCaller) {
  backend.fail_acquire = noAnswer();
  backend.acquire_applied_anyway = true;
  auto r = multi({"na", "nb"}, "", 0);
  advance(10);
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->status, AcquireStatus::kError);
  EXPECT_EQ((*r)->error.message().find("may have been granted"), std::string::npos)
      << "the client never saw the owner id: " << (*r)->error.message();
  EXPECT_FALSE(inspect("na").held) << "given back";
  EXPECT_EQ(metrics.unanswered_released.Value(), 1);
  EXPECT_EQ(metrics.unanswered_left_to_owner.Value(), 0);
  // The caller's own owner id: left to the caller, who is told.
  auto mine = multi({"oa", "ob"}, "alice", 0);
  advance(10);
  ASSERT_TRUE(mine->has_value());
  EXPECT_NE((*mine)->error.message().find("may have been granted"), std::string::npos);
  EXPECT_TRUE(inspect("oa").held);
  EXPECT_EQ(metrics.unanswered_left_to_owner.Value(), 1);
}

TEST(LostLeaseMemoryTest, BoundedAndForgetful) {
  LostLeaseMemory lost(2, 1000);
  lost.remember(mutexLock("a"), "o1", 0);
  lost.remember(mutexLock("b"), "o1", 10);
  EXPECT_TRUE(lost.contains(mutexLock("a"), "o1", 20));
  EXPECT_FALSE(lost.contains(mutexLock("a"), "o2", 20));
  EXPECT_FALSE(lost.contains(sharedLock("a"), "o1", 20)) << "another kind, another lock";
  lost.remember(mutexLock("c"), "o1", 30);  // evicts the oldest
  EXPECT_FALSE(lost.contains(mutexLock("a"), "o1", 40));
  EXPECT_TRUE(lost.contains(mutexLock("c"), "o1", 40));
  EXPECT_EQ(lost.size(), 2u);
  EXPECT_FALSE(lost.contains(mutexLock("b"), "o1", 1010));  // retention over
  lost.forget(mutexLock("c"), "o1");
  EXPECT_EQ(lost.size(), 0u);
}

// --- health-bound holds (issue 20) -----------------------------------------------------------

TEST_F(LockServiceTest, AnUnhealthyLeaseIsReleasedOnceAndTheHolderHearsLost) {
  AcquireOptions o = opts("x", "h", 1000);
  o.auto_renew = true;
  auto held = acquireNow(o);
  ASSERT_EQ(held->result->status, AcquireStatus::kGranted);
  svc->releaseUnhealthy(mutexLock("x"), "h");
  svc->releaseUnhealthy(mutexLock("x"), "h");  // a second call while the first runs: nothing
  sched.runReady();
  EXPECT_EQ(metrics.leases_released_unhealthy.Value(), 1);
  ASSERT_EQ(held->events.size(), 1u);
  EXPECT_EQ(held->events.back(), LeaseEvent::kLost);
  EXPECT_FALSE(inspect("x").held);
  // Its owner's own release comes too late: the lease was lost, not released by it.
  auto r = release("x", "h");
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(*r, ReleaseStatus::kLeaseLost);
  // Nothing renews it afterwards.
  advance(3000, 50);
  EXPECT_FALSE(inspect("x").held);
}

TEST_F(LockServiceTest, AClientReleaseInFlightWinsOverAnUnhealthyRelease) {
  AcquireOptions o = opts("x", "h", 1000);
  o.auto_renew = true;
  auto held = acquireNow(o);
  ASSERT_EQ(held->result->status, AcquireStatus::kGranted);
  std::optional<StatusOr<ReleaseStatus>> r;
  svc->release(mutexLock("x"), "h", [&](StatusOr<ReleaseStatus> v) { r.emplace(std::move(v)); });
  svc->releaseUnhealthy(mutexLock("x"), "h");  // the client's release is already under way
  sched.runReady();
  ASSERT_TRUE(r && r->isOk());
  EXPECT_EQ(**r, ReleaseStatus::kReleased);
  EXPECT_EQ(metrics.leases_released_unhealthy.Value(), 0);
  ASSERT_FALSE(held->events.empty());
  EXPECT_EQ(held->events.back(), LeaseEvent::kReleased);
}

// Lock-delay on MemoryBackend (the reference model of src/redis/lua/lib/lock_delay.lua): an
// expired lease keeps the lock for its lock_delay_ms (busy, reason kLockDelay, retry_after_ms =
// what is left), a queued waiter is granted when it ends (its retry timed to the end, not
// polled); a clean release has no delay, an involuntary one (ReleaseMode::kInvoluntary) has.
TEST_F(LockServiceTest, LockDelayKeepsALockAfterAnUnreleasedEndOnly) {
  auto delayed = [](LockId lock, std::string owner, int64_t ttl, int64_t wait, int64_t delay) {
    AcquireOptions o = opts(std::move(lock), std::move(owner), ttl, wait);
    o.lock_delay_ms = delay;
    return o;
  };
  ASSERT_EQ(acquireNow(delayed(mutexLock("d"), "a", 1000, 0, 3000))->status(),
            AcquireStatus::kGranted);
  ASSERT_TRUE(extend("d", "a", 2000).isOk());  // the delay moves with the lease's end
  sched.advanceMs(2500);                       // expired 500 ms ago, unreleased
  auto busy = acquireNow(opts("d", "b", 1000));
  ASSERT_EQ(busy->status(), AcquireStatus::kBusy);
  EXPECT_EQ(busy->result->busy_reason, BusyReason::kLockDelay);
  EXPECT_EQ(busy->result->retry_after_ms, 2500);
  EXPECT_EQ(metrics.lock_delay_refusals.Value(), 1);
  auto waiter = start(opts("d", "b", 1000, 10'000));
  sched.runReady();
  // A single try behind that queued waiter is answered here, for the queue's reason (a helper
  // saw `held` while nobody held it).
  auto behind = acquireNow(opts("d", "c", 1000));
  ASSERT_EQ(behind->status(), AcquireStatus::kBusy);
  EXPECT_EQ(behind->result->busy_reason, BusyReason::kLockDelay);
  EXPECT_GT(behind->result->retry_after_ms, 2000);
  advance(2490, 10);
  EXPECT_FALSE(waiter->done()) << "granted inside the delay";
  advance(20);
  ASSERT_TRUE(waiter->done());
  EXPECT_EQ(waiter->status(), AcquireStatus::kGranted);

  // Reentrant and fair locks take it too; an involuntary release starts it from now.
  ASSERT_EQ(acquireNow(delayed(fairLock("f"), "a", 60'000, 0, 1000))->status(),
            AcquireStatus::kGranted);
  std::optional<StatusOr<ReleaseStatus>> r;
  svc->release(
      fairLock("f"), "a", [&](StatusOr<ReleaseStatus> v) { r.emplace(std::move(v)); },
      ReleaseMode::kInvoluntary);
  sched.runReady();
  ASSERT_TRUE(r && r->isOk());
  auto fair_busy = acquireNow(opts(fairLock("f"), "b", 1000));
  EXPECT_EQ(fair_busy->result->busy_reason, BusyReason::kLockDelay);
  EXPECT_EQ(fair_busy->result->retry_after_ms, 1000);

  AcquireOptions re = delayed(mutexLock("r"), "a", 60'000, 0, 5000);
  re.reentrant = true;
  ASSERT_EQ(acquireNow(re)->status(), AcquireStatus::kGranted);
  EXPECT_EQ(*release("r", "a"), ReleaseStatus::kReleased);  // a clean release: no delay
  EXPECT_EQ(acquireNow(opts("r", "b", 1000))->status(), AcquireStatus::kGranted);
  EXPECT_EQ(metrics.lock_delays_expired.Value(), 1) << "d expired with its delay";
}

// A health-bound lease released as unhealthy is given up involuntarily: its delay applies and
// is counted by cause.
TEST_F(LockServiceTest, AnUnhealthyReleaseAppliesTheLockDelay) {
  AcquireOptions o = opts("u", "h", 60'000);
  o.auto_renew = true;
  o.lock_delay_ms = 2000;
  ASSERT_EQ(acquireNow(o)->status(), AcquireStatus::kGranted);
  svc->releaseUnhealthy(mutexLock("u"), "h");
  sched.runReady();
  EXPECT_EQ(metrics.leases_released_unhealthy.Value(), 1);
  EXPECT_EQ(metrics.lock_delays_unhealthy.Value(), 1);
  auto busy = acquireNow(opts("u", "b", 1000));
  ASSERT_EQ(busy->status(), AcquireStatus::kBusy);
  EXPECT_EQ(busy->result->busy_reason, BusyReason::kLockDelay);
  EXPECT_EQ(busy->result->retry_after_ms, 2000);
  sched.advanceMs(2001);
  EXPECT_EQ(acquireNow(opts("u", "b", 1000))->status(), AcquireStatus::kGranted);
}

}  // namespace
}  // namespace sidelock::lock
