#include "metrics/metrics.h"

#include <gtest/gtest.h>

namespace sidelock::metrics {
namespace {

TEST(MetricsTest, RendersFamiliesWithBoundedLabels) {
  Metrics m("1.2.3");
  m.acquireFor("mutex").acquired.Increment();
  m.acquireFor("semaphore").busy.Increment();
  m.node("127.0.0.1:6379").up->Set(1);
  m.httpRequests("/v1/locks/{name}/acquire", 200).Increment();
  std::string text = m.render();
  EXPECT_NE(text.find("sidelock_acquire_total{kind=\"mutex\",result=\"acquired\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("sidelock_acquire_total{kind=\"semaphore\",result=\"busy\"} 1"),
            std::string::npos)
      << "each lock kind has its own series";
  EXPECT_EQ(&m.acquireFor("semaphore"), &m.acquireFor("semaphore")) << "created once";
  EXPECT_NE(text.find("sidelock_backend_up{node=\"127.0.0.1:6379\"} 1"), std::string::npos);
  EXPECT_NE(text.find("sidelock_build_info{version=\"1.2.3\"} 1"), std::string::npos);
  EXPECT_NE(text.find("process_resident_memory_bytes"), std::string::npos);
  EXPECT_NE(
      text.find("sidelock_http_requests_total{code=\"200\",protocol=\"http\",route=\"/v1/locks/{name}/acquire\"} 1"),
      std::string::npos)
      << text;
}

TEST(MetricsTest, NodeSeriesAreResolvedOnce) {
  Metrics m;
  EXPECT_EQ(&m.node("a:1"), &m.node("a:1"));
  EXPECT_NE(&m.node("a:1"), &m.node("b:2"));
}

TEST(MetricsTest, ConfiguredElectionsHaveTheirOwnSeries) {
  Metrics m;
  EXPECT_EQ(m.render().find("sidelock_election_leader{"), std::string::npos)
      << "no series before an election is configured";
  Metrics::ElectionSeries scheduler = m.electionSeries("scheduler");
  scheduler.leader.Set(1);
  scheduler.leaderless_seconds.Set(2.5);
  scheduler.ttl_seconds.Set(10);
  EXPECT_EQ(&m.electionSeries("scheduler").leader, &scheduler.leader) << "created once";
  const std::string text = m.render();
  EXPECT_NE(text.find("sidelock_election_leader{election=\"scheduler\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("sidelock_election_leaderless_seconds{election=\"scheduler\"} 2.5"),
            std::string::npos);
  EXPECT_NE(text.find("sidelock_election_ttl_seconds{election=\"scheduler\"} 10"),
            std::string::npos);
}

TEST(MetricsTest, CachedRenderIsSharedWithinOneEpochOnly) {
  Metrics m;
  m.wakeups.Increment();
  const std::string first = m.renderCached(7);
  EXPECT_NE(first.find("sidelock_wakeups_total 1"), std::string::npos);
  m.wakeups.Increment();
  EXPECT_EQ(m.renderCached(7), first) << "the same loop turn";
  EXPECT_NE(m.renderCached(8).find("sidelock_wakeups_total 2"), std::string::npos);
  m.wakeups.Increment();
  EXPECT_NE(m.renderCached(0).find("sidelock_wakeups_total 3"), std::string::npos)
      << "epoch 0 always renders";
}

}  // namespace
}  // namespace sidelock::metrics
