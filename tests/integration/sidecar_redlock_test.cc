// The real binary with `backend.type: redlock` over five real redis-server processes: the same
// v1 API, survival of a minority of failed nodes, /readyz naming down nodes.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "support/election_streams.h"
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

// Shutdown's step-down on Redlock (three nodes): the sidecar got SIGTERM, its stream holder (or
// elected candidate) was told to step down, did not close the stream in time, and at the deadline
// the sidecar gives the lease back itself. One node has just stalled: the two others free the lock
// at once (a waiter on another sidecar is granted) while the release waits node_timeout_ms for the
// stalled one. The holder must hear its last line (`released`, `resigned`) before anyone else is
// granted; it used to hear it only when the release completed, 1.5 s after the other grant.
class SidecarRedlockStepDownTest : public ::testing::Test {
 protected:
  using Clock = std::chrono::steady_clock;

  std::string yaml() const {
    // No health pings during the test (the stalled node is not marked down, so the release waits
    // for it), a node timeout long enough to tell the orders apart, a step-down deadline of 1 s
    // (half the grace).
    return "backend:\n  type: redlock\n  nodes: [\"" + r1_.address() + "\", \"" + r2_.address() +
           "\", \"" + r3_.address() +
           "\"]\n  health_interval_ms: 30000\n  redlock:\n    node_timeout_ms: 1500\n"
           "    delayed_restart: false\nshutdown:\n  grace_ms: 2000\n";
  }
  /// Waits until sidecar b lists one waiter.
  void expectOneWaiterOnB() {
    HttpClient cb = HttpClient::tcp(b_.port());
    EXPECT_TRUE(pollUntil([&] {
      return cb.get("/v1/locks").body.find("\"waiters\":1") != std::string::npos;
    })) << cb.get("/v1/locks").body;
  }
  /// Runs `read` on another thread, noting when it returned in `at`.
  static std::thread noteWhenDone(std::function<void()> read, Clock::time_point& at) {
    return std::thread([read = std::move(read), &at] {
      read();
      at = Clock::now();
    });
  }
  /// The holder was told (`told_at`) no later than the other sidecar's grant (`granted_at`), with
  /// a little slack for the two reading threads' wake-ups (the old order was the other way, by up
  /// to the node timeout).
  static void expectToldFirst(Clock::time_point told_at, Clock::time_point granted_at) {
    EXPECT_LE(told_at, granted_at + std::chrono::milliseconds(100))
        << "granted elsewhere "
        << std::chrono::duration_cast<std::chrono::milliseconds>(told_at - granted_at).count()
        << " ms before the holder was told";
  }

  RedisServer r1_, r2_, r3_;
  SidecarProcess a_{{yaml(), {}, /*wait_ready=*/true}};
  SidecarProcess b_{{yaml(), {}, /*wait_ready=*/true}};
};

TEST_F(SidecarRedlockStepDownTest, AStreamHoldHearsReleasedBeforeAWaiterElsewhereIsGranted) {
  HttpClient holder = HttpClient::tcp(a_.port());
  holder.sendRequest("POST", "/v1/locks/roll/acquire", R"({"ttl_ms":30000,"hold":"stream"})");
  std::optional<HttpResponse> head = holder.readStreamHead();
  ASSERT_TRUE(head.has_value());
  ASSERT_EQ(head->status, 200) << head->body;
  ASSERT_TRUE(holder.readStreamLine().has_value());  // acquired
  HttpClient waiter = HttpClient::tcp(b_.port());
  waiter.sendRequest("POST", "/v1/locks/roll/acquire", R"({"ttl_ms":30000,"wait_ms":20000})");
  expectOneWaiterOnB();

  ASSERT_EQ(kill(a_.pid(), SIGTERM), 0);
  std::optional<std::string> line = holder.readStreamLine(5000);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(json::parse(*line)["event"], "stepping_down") << *line;
  r3_.pause();
  std::optional<HttpResponse> granted;
  Clock::time_point granted_at;
  std::thread grant_reader =
      noteWhenDone([&] { granted = waiter.readResponse(15000); }, granted_at);
  line = holder.readStreamLine(5000);
  const Clock::time_point told_at = Clock::now();
  grant_reader.join();
  r3_.resume();
  ASSERT_TRUE(line.has_value()) << a_.logs();
  EXPECT_EQ(json::parse(*line)["event"], "released") << *line;
  ASSERT_TRUE(granted.has_value());
  EXPECT_EQ(granted->status, 200) << granted->body;
  expectToldFirst(told_at, granted_at);
  EXPECT_FALSE(holder.readStreamLine(3000).has_value()) << "the stream ends";
}

TEST_F(SidecarRedlockStepDownTest, ALeaderHearsResignedBeforeACandidateElsewhereIsElected) {
  Campaign leader(a_.port(), "roll", "pod-a", 30000);
  std::optional<json> e = leader.elected();
  ASSERT_TRUE(e.has_value());
  ASSERT_EQ((*e)["event"], "elected") << e->dump();
  HttpClient next = HttpClient::tcp(b_.port());
  next.sendRequest("POST", "/v1/elections/roll/campaign",
                   R"({"candidate":"pod-b","ttl_ms":30000})");
  expectOneWaiterOnB();

  ASSERT_EQ(kill(a_.pid(), SIGTERM), 0);
  e = leader.nextNotRenewed(5000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "stepping_down") << e->dump();
  r3_.pause();
  std::optional<HttpResponse> elected;
  Clock::time_point elected_at;
  std::thread head_reader = noteWhenDone([&] { elected = next.readStreamHead(15000); }, elected_at);
  e = leader.nextNotRenewed(5000);
  const Clock::time_point told_at = Clock::now();
  head_reader.join();
  r3_.resume();
  ASSERT_TRUE(e.has_value()) << a_.logs();
  EXPECT_EQ((*e)["event"], "resigned") << e->dump();
  ASSERT_TRUE(elected.has_value());
  EXPECT_EQ(elected->status, 200) << elected->body;
  expectToldFirst(told_at, elected_at);
  EXPECT_FALSE(leader.next(3000).has_value()) << "the stream ends";
}

}  // namespace
}  // namespace sidelock::testing
