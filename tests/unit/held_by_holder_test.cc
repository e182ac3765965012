// sidelock_held_locks_by_holder (issue 20): the lease table's count per holder label
// (HolderTally), the bounded series Metrics::publishHeldByHolder keeps from it (top N by count,
// the rest in holder="other", no stale series), and the lock service that ties them together on a
// FakeScheduler + MemoryBackend. The live test with Redis and the sidecar binary is
// tests/integration/holder_gauge_test.cc.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/memory_backend.h"
#include "event/fake_scheduler.h"
#include "lock/lease_table.h"
#include "lock/lock_service.h"
#include "metrics/metrics.h"

namespace sidelock {
namespace {

/// holder -> value of every sidelock_held_locks_by_holder series in the rendered text.
std::map<std::string, double> heldByHolder(metrics::Metrics& m) {
  std::map<std::string, double> out;
  for (const auto& family : m.registry().Collect()) {
    if (family.name != "sidelock_held_locks_by_holder") continue;
    for (const auto& series : family.metric) {
      EXPECT_EQ(series.label.size(), 1u);
      if (series.label.size() == 1) out[series.label[0].value] = series.gauge.value;
    }
  }
  return out;
}

using Counts = std::map<std::string, double>;

TEST(HolderTallyTest, CountsLeasesPerLabelAndReusesSlots) {
  lock::HolderTally tally;
  const uint32_t a1 = tally.add("pod-a");
  const uint32_t a2 = tally.add("pod-a");
  const uint32_t b = tally.add("pod-b");
  const uint32_t none = tally.add("");
  EXPECT_EQ(a1, a2) << "one slot per label";
  EXPECT_NE(a1, b);
  EXPECT_EQ(none, lock::HolderTally::kNoLabel);
  EXPECT_EQ(tally.size(), 2u);
  EXPECT_EQ(tally.unlabelled(), 1);
  std::map<std::string, int64_t> seen;
  tally.forEach([&seen](std::string_view h, int64_t n) { seen[std::string(h)] = n; });
  EXPECT_EQ(seen, (std::map<std::string, int64_t>{{"pod-a", 2}, {"pod-b", 1}}));

  tally.remove(b);
  tally.remove(none);
  tally.remove(a1);
  EXPECT_EQ(tally.size(), 1u) << "pod-a still holds one";
  EXPECT_EQ(tally.unlabelled(), 0);
  const uint32_t c = tally.add("pod-c");
  EXPECT_EQ(c, b) << "pod-b's slot is free again";
  tally.remove(a2);
  tally.remove(c);
  EXPECT_EQ(tally.size(), 0u);
  seen.clear();
  tally.forEach([&seen](std::string_view h, int64_t n) { seen[std::string(h)] = n; });
  EXPECT_TRUE(seen.empty());
}

TEST(HeldByHolderMetricTest, TopHoldersHaveSeriesAndTheRestIsOther) {
  metrics::Metrics m;
  EXPECT_EQ(heldByHolder(m), (Counts{{"other", 0}})) << "holder=\"other\" exists from the start";
  m.setHolderTopN(2);
  m.publishHeldByHolder({{"c", 1}, {"a", 3}, {"b", 2}}, 0);
  EXPECT_EQ(heldByHolder(m), (Counts{{"a", 3}, {"b", 2}, {"other", 1}}));
  // Ties are broken by label, so the series do not flap between scrapes.
  m.publishHeldByHolder({{"z", 2}, {"y", 2}, {"x", 2}}, 1);
  EXPECT_EQ(heldByHolder(m), (Counts{{"x", 2}, {"y", 2}, {"other", 3}}))
      << "a and b left the top: their series are gone, unlabelled leases count in other";
  m.publishHeldByHolder({{"y", 1}}, 0);
  EXPECT_EQ(heldByHolder(m), (Counts{{"y", 1}, {"other", 0}})) << "x holds nothing any more";
  m.publishHeldByHolder({}, 0);
  EXPECT_EQ(heldByHolder(m), (Counts{{"other", 0}}));
}

TEST(HeldByHolderMetricTest, SeriesStayBoundedUnderChurn) {
  metrics::Metrics m;
  m.setHolderTopN(10);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::string> labels;
    for (int i = 0; i < 40; ++i) labels.push_back("pod-" + std::to_string(round * 40 + i));
    std::vector<metrics::Metrics::HolderLeases> counts;
    for (int i = 0; i < 40; ++i) counts.push_back({labels[i], i + 1});
    m.publishHeldByHolder(std::move(counts), 0);
    const Counts now = heldByHolder(m);
    ASSERT_EQ(now.size(), 11u) << "10 holders and other, round " << round;
    // The top ten of this round: counts 31..40; the other 30 sum to 1 + ... + 30.
    EXPECT_EQ(now.at("other"), 465);
    EXPECT_EQ(now.at("pod-" + std::to_string(round * 40 + 39)), 40);
  }
}

TEST(HeldByHolderMetricTest, TopNZeroKeepsOnlyOther) {
  metrics::Metrics m;
  m.setHolderTopN(0);
  m.publishHeldByHolder({{"a", 3}, {"b", 2}}, 4);
  EXPECT_EQ(heldByHolder(m), (Counts{{"other", 9}}));
}

TEST(HeldByHolderMetricTest, AHolderLabelledOtherAddsToOther) {
  metrics::Metrics m;
  m.setHolderTopN(2);
  m.publishHeldByHolder({{"other", 5}, {"a", 1}, {"b", 1}}, 0);
  EXPECT_EQ(heldByHolder(m), (Counts{{"a", 1}, {"other", 6}}))
      << "other took a place in the top; b (a tie, by label after a) is in other";
}

TEST(HeldByHolderMetricTest, LabelValuesAreEscapedInTheExposition) {
  metrics::Metrics m;
  m.publishHeldByHolder({{R"(team "blue" \ night)", 2}}, 0);
  const std::string text = m.render();
  EXPECT_NE(text.find(R"(sidelock_held_locks_by_holder{holder="team \"blue\" \\ night"} 2)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(sidelock_held_locks_by_holder{holder="other"} 0)"), std::string::npos)
      << text;
}

// --- through the lock service -----------------------------------------------------------------

class HeldByHolderServiceTest : public ::testing::Test {
 protected:
  HeldByHolderServiceTest() {
    metrics.setHolderTopN(2);
    svc = std::make_unique<lock::LockService>(cfg, backend, sched, metrics);
  }

  /// Acquires `name` of `kind` as `holder`; the grant's owner.
  std::string grant(lock::LockKind kind, const std::string& name, const std::string& holder,
                    int64_t ttl_ms = 10'000) {
    lock::AcquireOptions o;
    o.lock = lock::LockId{kind, name};
    o.ttl_ms = ttl_ms;
    o.limit = kind == lock::LockKind::kSemaphore ? 5 : 0;
    if (kind == lock::LockKind::kElection) {
      o.candidate = holder;
      o.stream = true;
    } else {
      o.holder = holder;
    }
    std::optional<lock::AcquireResult> r;
    // (Dropping the ticket would cancel the acquire.)
    const lock::AcquireTicket ticket =
        svc->acquire(std::move(o), [&r](lock::AcquireResult v) { r = std::move(v); });
    sched.runReady();
    EXPECT_TRUE(r && r->status == lock::AcquireStatus::kGranted) << name;
    return r ? r->grant.owner : "";
  }
  /// A multi-lock of `names` as `holder`; its owner.
  std::string grantAll(std::vector<std::string> names, const std::string& holder) {
    lock::MultiAcquireOptions o;
    o.names = std::move(names);
    o.ttl_ms = 10'000;
    o.holder = holder;
    std::optional<lock::MultiAcquireResult> r;
    const lock::AcquireTicket ticket =
        svc->acquireAll(std::move(o), [&r](lock::MultiAcquireResult v) { r = std::move(v); });
    sched.runReady();
    EXPECT_TRUE(r && r->status == lock::AcquireStatus::kGranted);
    return r ? r->owner : "";
  }
  void release(lock::LockKind kind, const std::string& name, const std::string& owner) {
    bool answered = false;
    svc->release(lock::LockId{kind, name}, owner,
                 [&answered](StatusOr<lock::ReleaseStatus> s) { answered = s.isOk(); });
    sched.runReady();
    EXPECT_TRUE(answered) << name;
  }
  Counts scrape() {
    metrics.render();  // runs the scrape hooks
    return heldByHolder(metrics);
  }

  config::LocksConfig cfg;
  event::FakeScheduler sched;
  backend::MemoryBackend backend{sched};  // grants a multi-lock in one step
  metrics::Metrics metrics;
  std::unique_ptr<lock::LockService> svc;
};

TEST_F(HeldByHolderServiceTest, EveryKindOfLeaseCountsForItsHolderUntilItEnds) {
  using lock::LockKind;
  const std::string a1 = grant(LockKind::kMutex, "m1", "a");
  const std::string a2 = grant(LockKind::kShared, "r1", "a");
  const std::string a3 = grant(LockKind::kSemaphore, "s1", "a");
  const std::string a4 = grantAll({"x1", "x2"}, "a");  // one lease per name
  const std::string b1 = grant(LockKind::kElection, "e1", "b");  // the candidate is its holder
  const std::string b2 = grant(LockKind::kFair, "f1", "b");
  grant(LockKind::kMutex, "m2", "c", /*ttl_ms=*/500);
  EXPECT_EQ(scrape(), (Counts{{"a", 5}, {"b", 2}, {"other", 1}}));
  EXPECT_EQ(metrics.held_locks.Value(), 8);

  // c's lease expires: other drops to 0.
  for (int i = 0; i < 60; ++i) sched.advanceMs(10);
  EXPECT_EQ(scrape(), (Counts{{"a", 5}, {"b", 2}, {"other", 0}}));
  release(LockKind::kMutex, "m1", a1);
  release(LockKind::kShared, "r1", a2);
  release(LockKind::kMutex, "x1", a4);
  release(LockKind::kMutex, "x2", a4);
  EXPECT_EQ(scrape(), (Counts{{"b", 2}, {"a", 1}, {"other", 0}}));
  release(LockKind::kElection, "e1", b1);
  release(LockKind::kFair, "f1", b2);
  release(LockKind::kSemaphore, "s1", a3);
  EXPECT_EQ(scrape(), (Counts{{"other", 0}})) << "no series left for holders that hold nothing";
  EXPECT_EQ(metrics.held_locks.Value(), 0);
}

}  // namespace
}  // namespace sidelock
