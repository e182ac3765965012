// Metrics::forgetNode: a node that left the topology leaves /metrics; one made again later gets
// fresh series.
#include <gtest/gtest.h>

#include "metrics/metrics.h"

namespace sidelock::metrics {
namespace {

TEST(MetricsForgetNodeTest, RemovesEverySeriesOfTheNodeOnly) {
  Metrics m;
  m.node("10.0.0.1:6379").up->Set(1);
  m.node("10.0.0.2:6379").up->Set(1);
  m.forgetNode("10.0.0.1:6379");
  const std::string text = m.render();
  EXPECT_EQ(text.find("10.0.0.1:6379"), std::string::npos) << text;
  EXPECT_NE(text.find("sidelock_backend_up{node=\"10.0.0.2:6379\"} 1"), std::string::npos) << text;
  m.forgetNode("10.0.0.9:6379");  // unknown: nothing happens

  NodeMetrics& again = m.node("10.0.0.1:6379");
  again.up->Set(0);
  EXPECT_NE(m.render().find("sidelock_backend_up{node=\"10.0.0.1:6379\"} 0"), std::string::npos);
}

}  // namespace
}  // namespace sidelock::metrics
