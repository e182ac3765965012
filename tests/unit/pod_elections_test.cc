// PodElections (config `elections`) over a real LockService on a FakeScheduler + MemoryBackend:
// it campaigns from start(), waits in line behind another candidate, campaigns again after a
// loss, resigns on resignAll() and campaigns no more; its gauges follow (leader, leaderless
// seconds from the observe group's reads, TTL).
#include "api/pod_elections.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "api/election_api.h"
#include "api/election_observers.h"
#include "backend/memory_backend.h"
#include "event/fake_scheduler.h"
#include "lock/lock_service.h"
#include "metrics/metrics.h"

namespace sidelock::api {
namespace {

constexpr int64_t kTtlMs = 3000;

class PodElectionsTest : public ::testing::Test {
 protected:
  PodElectionsTest() {
    cfg.retry_min_ms = 2;
    cfg.retry_max_ms = 500;
    svc = std::make_unique<lock::LockService>(cfg, backend, sched, metrics);
    observers = std::make_unique<ElectionObservers>(*svc, sched, metrics, 1000);
    pod = std::make_unique<PodElections>(
        std::vector<config::ElectionConfig>{{"scheduler", "10.0.0.7:8080", kTtlMs, std::nullopt}},
        "pod-a", *svc, *observers, sched, metrics);
  }
  ~PodElectionsTest() override {
    pod.reset();
    observers.reset();
    svc.reset();
  }

  /// Advances in small steps so timers interleave the way they would on a real loop.
  void advance(int64_t ms) {
    for (int64_t t = 0; t < ms; ++t) sched.advanceMs(1);
  }
  lock::LockState leader() {
    std::optional<StatusOr<lock::LockState>> r;
    svc->inspect(lock::LockId{lock::LockKind::kElection, "scheduler"},
                 [&](StatusOr<lock::LockState> v) { r.emplace(std::move(v)); });
    sched.runReady();
    EXPECT_TRUE(r && r->isOk());
    return r->value();
  }
  /// Another pod's campaign, elected (the election is free): its grant.
  lock::Grant electOtherPod() {
    std::optional<lock::AcquireResult> r;
    other_ticket = svc->acquire(campaignOptions("scheduler", "pod-b", "", kTtlMs),
                                [&](lock::AcquireResult v) { r.emplace(std::move(v)); });
    sched.runReady();
    EXPECT_TRUE(r && r->status == lock::AcquireStatus::kGranted);
    return r ? r->grant : lock::Grant{};
  }
  double gauge(prometheus::Gauge& g) {
    metrics.render();  // runs the scrape hooks
    return g.Value();
  }

  config::LocksConfig cfg;
  event::FakeScheduler sched;
  backend::MemoryBackend backend{sched};
  metrics::Metrics metrics;
  std::unique_ptr<lock::LockService> svc;
  std::unique_ptr<ElectionObservers> observers;
  std::unique_ptr<PodElections> pod;
  lock::AcquireTicket other_ticket;
  metrics::Metrics::ElectionSeries series = metrics.electionSeries("scheduler");
};

TEST_F(PodElectionsTest, CampaignsFromStartAndResignsOnceStopped) {
  EXPECT_EQ(gauge(series.ttl_seconds), 3.0);
  EXPECT_EQ(gauge(series.leader), 0);
  pod->start();
  advance(10);
  lock::LockState state = leader();
  ASSERT_TRUE(state.held);
  EXPECT_EQ(state.leader.candidate, "pod-a");
  EXPECT_EQ(state.leader.value, "10.0.0.7:8080");
  EXPECT_GT(state.ttl_ms, kTtlMs - 100);
  EXPECT_EQ(gauge(series.leader), 1);
  EXPECT_EQ(gauge(series.leaderless_seconds), 0);
  advance(kTtlMs * 3);  // renewed, still leading
  EXPECT_TRUE(leader().held);
  EXPECT_EQ(gauge(series.leader), 1);

  pod->resignAll();
  advance(10);
  EXPECT_FALSE(leader().held) << "resigned at once, not after the TTL";
  EXPECT_EQ(gauge(series.leader), 0);
  EXPECT_EQ(metrics.election_resignations.Value(), 1);
  // Nobody leads from now on: the leaderless gauge counts from the read that saw it.
  advance(5000);
  EXPECT_FALSE(leader().held) << "campaigned again after resigning";
  EXPECT_GE(gauge(series.leaderless_seconds), 4.0);
  EXPECT_LE(gauge(series.leaderless_seconds), 5.1);
}

TEST_F(PodElectionsTest, WaitsInLineAndCampaignsAgainAfterALoss) {
  // Another pod leads first.
  const lock::Grant other = electOtherPod();
  pod->start();
  advance(1500);
  EXPECT_EQ(leader().leader.candidate, "pod-b");
  EXPECT_EQ(gauge(series.leader), 0);
  EXPECT_EQ(gauge(series.leaderless_seconds), 0) << "pod-b leads: not leaderless";
  ASSERT_EQ(svc->waiterCounts().size(), 1u);

  // pod-b resigns: pod-a, in line, is elected.
  svc->release(other.lock, other.owner, [](StatusOr<lock::ReleaseStatus>) {});
  advance(50);
  lock::LockState state = leader();
  EXPECT_EQ(state.leader.candidate, "pod-a");
  EXPECT_EQ(gauge(series.leader), 1);
  const uint64_t first_term = state.token;

  // A loss (the lease vanished: its next renewal finds it gone): pod-a campaigns again after a
  // short jittered backoff; -1 if it did not within kRetryMaxMs.
  auto loseAndCampaignAgain = [&]() -> int64_t {
    backend.forceDelete("scheduler", lock::LockKind::kElection);
    for (int64_t waited_ms = 0; series.leader.Value() == 1 && waited_ms < kTtlMs; ++waited_ms) {
      advance(1);  // until the renewal finds it gone
    }
    if (series.leader.Value() != 0) return -1;
    int64_t gap_ms = 0;
    while (series.leader.Value() == 0 && gap_ms++ < PodElections::kRetryMaxMs + 100) advance(1);
    return series.leader.Value() == 1 ? gap_ms : -1;
  };
  std::vector<int64_t> gaps_ms = {loseAndCampaignAgain()};
  EXPECT_EQ(metrics.election_lost.Value(), 1);
  state = leader();
  EXPECT_EQ(state.leader.candidate, "pod-a");
  EXPECT_GT(state.token, first_term);
  EXPECT_EQ(metrics.elections_won.Value(), 2);

  // Quick losses (terms shorter than a TTL): the backoff grows, up to kRetryMaxMs.
  for (int i = 0; i < 7; ++i) gaps_ms.push_back(loseAndCampaignAgain());
  for (int64_t gap_ms : gaps_ms) ASSERT_GT(gap_ms, 0) << "no campaign again after a loss";
  // Each draw is in [ceiling / 2, ceiling], the ceiling doubling from kRetryMinMs.
  EXPECT_LE(gaps_ms[0], 2 * PodElections::kRetryMinMs + 10);
  EXPECT_GE(gaps_ms[7], PodElections::kRetryMaxMs / 2) << "the backoff never grew";
  EXPECT_EQ(metrics.election_lost.Value(), 8);
}

TEST_F(PodElectionsTest, StoppedWhileInLineLeavesTheLine) {
  const lock::Grant other = electOtherPod();
  pod->start();
  advance(20);
  ASSERT_EQ(svc->waiterCounts().size(), 1u);
  pod->resignAll();
  advance(20);
  EXPECT_TRUE(svc->waiterCounts().empty());
  svc->release(other.lock, other.owner, [](StatusOr<lock::ReleaseStatus>) {});
  advance(kTtlMs);
  EXPECT_FALSE(leader().held);
}

}  // namespace
}  // namespace sidelock::api
