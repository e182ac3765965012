// The real binary with `backend.type: redlock` over five real redis-server processes: the same
// v1 API, survival of a minority of failed nodes, /readyz naming down nodes.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;

class SidecarRedlockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string nodes;
    for (int i = 0; i < 5; ++i) {
      redis_.push_back(std::make_unique<RedisServer>());
      nodes += (i ? ", \"" : "\"") + redis_.back()->address() + "\"";
    }
    // Fresh nodes would not vote for max_ttl_ms (delayed restarts): keep it short so start-up
    // does not wait long, and turn the delay off for this wiring test (covered in redlock tests).
    sidecar_ = std::make_unique<SidecarProcess>(SidecarProcess::Options{
        "backend:\n  type: redlock\n  nodes: [" + nodes +
            "]\n  reconnect_min_ms: 20\n  reconnect_max_ms: 200\n  health_interval_ms: 100\n"
            "  redlock:\n    node_timeout_ms: 50\n    delayed_restart: false\n",
        {},
        /*wait_ready=*/true});
  }

  int keysHolding(const std::string& key, const std::string& owner) {
    int n = 0;
    for (auto& r : redis_) {
      if (r->running() && r->cli({"GET", key}) == owner) ++n;
    }
    return n;
  }

  std::vector<std::unique_ptr<RedisServer>> redis_;
  std::unique_ptr<SidecarProcess> sidecar_;
};

TEST_F(SidecarRedlockTest, GrantsOnAMajoritySurvivesAMinorityAndReportsDownNodes) {
  HttpClient c = HttpClient::tcp(sidecar_->port());
  auto r = c.post("/v1/locks/jobs/acquire", R"({"ttl_ms":10000})");
  ASSERT_EQ(r.status, 200) << r.body;
  json grant = json::parse(r.body);
  std::string owner = grant["owner"];
  int64_t validity = grant["ttl_ms"];
  EXPECT_LT(validity, 10000) << "Redlock answers the validity left after elapsed and drift";
  EXPECT_GT(validity, 9000);
  EXPECT_GE(keysHolding("sidelock:{jobs}", owner), 3);
  ASSERT_EQ(c.post("/v1/locks/jobs/release", json{{"owner", owner}}.dump()).status, 200);
  EXPECT_EQ(keysHolding("sidelock:{jobs}", owner), 0);

  redis_[0]->kill();
  redis_[1]->kill();
  r = c.post("/v1/locks/jobs/acquire", R"({"ttl_ms":10000})");
  ASSERT_EQ(r.status, 200) << "two of five down: still a majority";
  EXPECT_GT(json::parse(r.body)["token"].get<uint64_t>(), grant["token"].get<uint64_t>());
  EXPECT_TRUE(pollUntil([&] { return c.get("/readyz").status == 200; }));

  redis_[2]->kill();
  auto t0 = std::chrono::steady_clock::now();
  r = c.post("/v1/locks/other/acquire", "{}");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"], "backend_unavailable");
  // Fails fast: the three dead nodes fail at once, at worst after node_timeout_ms (50 ms).
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50 * 20));
  EXPECT_EQ(redis_[3]->cli({"EXISTS", "sidelock:{other}"}), "0") << "no stale key on live nodes";
  EXPECT_EQ(redis_[4]->cli({"EXISTS", "sidelock:{other}"}), "0");
  HttpResponse not_ready;
  ASSERT_TRUE(pollUntil([&] {
    not_ready = c.get("/readyz");
    return not_ready.status == 503;
  }));
  json nodes = json::parse(not_ready.body)["nodes"];
  int down = 0;
  for (const auto& n : nodes) down += n["state"] == "down";
  EXPECT_EQ(down, 3) << not_ready.body;

  auto metrics = c.get("/metrics").body;
  EXPECT_NE(metrics.find("sidelock_redlock_quorum_failures_total 1"), std::string::npos);
  EXPECT_NE(metrics.find("sidelock_backend_up{node=\"" + redis_[0]->address() + "\"} 0"),
            std::string::npos);

  for (int i = 0; i < 3; ++i) redis_[i]->restart();
  ASSERT_TRUE(pollUntil([&] { return c.get("/readyz").status == 200; })) << sidecar_->logs();
  EXPECT_EQ(c.post("/v1/locks/other/acquire", "{}").status, 200);
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

// Issue 4 on Redlock: the watchdog renews on a majority, and a stream hold is released on every
// node when its client goes away.
TEST_F(SidecarRedlockTest, RenewalAndStreamHoldsWorkOnRedlock) {
  HttpClient c = HttpClient::tcp(sidecar_->port());
  auto r = c.post("/v1/locks/renewed/acquire", R"({"ttl_ms":300,"auto_renew":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  std::string owner = json::parse(r.body)["owner"];
  // Five TTLs (15 renewals at ttl x renew_fraction 0.333) later it is still held by a majority.
  const std::string renewed = "sidelock_renew_total{result=\"renewed\"}";
  EXPECT_TRUE(pollUntil([&] { return metricValue(c.get("/metrics").body, renewed) >= 15; }));
  EXPECT_GE(keysHolding("sidelock:{renewed}", owner), 3) << sidecar_->logs();
  ASSERT_EQ(c.post("/v1/locks/renewed/release", json{{"owner", owner}}.dump()).status, 200);
  EXPECT_EQ(keysHolding("sidelock:{renewed}", owner), 0);

  std::string stream_owner;
  {
    HttpClient s = HttpClient::tcp(sidecar_->port());
    s.sendRequest("POST", "/v1/locks/bound/acquire", R"({"ttl_ms":30000,"hold":"stream"})");
    auto head = s.readStreamHead();
    ASSERT_TRUE(head.has_value());
    ASSERT_EQ(head->status, 200);
    auto first = s.readStreamLine();
    ASSERT_TRUE(first.has_value());
    stream_owner = json::parse(*first)["owner"];
    EXPECT_EQ(keysHolding("sidelock:{bound}", stream_owner), 5);
  }  // the holder goes away
  EXPECT_TRUE(pollUntil([&] { return keysHolding("sidelock:{bound}", stream_owner) == 0; }))
      << "released on every node long before the 30 s TTL";
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

}  // namespace
}  // namespace sidelock::testing
