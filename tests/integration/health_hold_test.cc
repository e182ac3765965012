// Holds that follow the app's health (issue 20), end to end: real sidecar processes on a real
// redis-server, the app's health endpoint a tiny HTTP server in this test process.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_group.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

/// An app's health endpoint on 127.0.0.1 (a free port): answers `status` (0: reads the request
/// and never answers) on a thread of its own, one connection at a time.
class AppHealth {
 public:
  AppHealth() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(listen(fd_, 64), 0);
    socklen_t len = sizeof addr;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~AppHealth() {
    stop_ = true;
    thread_.join();
    for (int c : silent_) ::close(c);
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/healthz"; }
  int port() const { return port_; }
  std::atomic<int> status{200};
  std::atomic<int> requests{0};

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      char buf[2048];
      pollfd r{c, POLLIN, 0};
      if (poll(&r, 1, 1000) > 0 && read(c, buf, sizeof buf) > 0) ++requests;
      const int s = status;
      if (s == 0) {
        silent_.push_back(c);  // accepted, never answered
        continue;
      }
      const std::string answer =
          "HTTP/1.1 " + std::to_string(s) + " X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      (void)!write(c, answer.data(), answer.size());
      ::close(c);
    }
  }
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<int> silent_;
  std::thread thread_;
};

json healthField(const std::string& url, int interval_ms, int failures) {
  return json{{"url", url}, {"interval_ms", interval_ms}, {"failures", failures}};
}

/// The stream's first line that is not a "renewed" event (nullopt: the stream ended or stalled).
std::optional<std::string> firstLineNotRenewed(HttpClient& c) {
  for (int i = 0; i < 10; ++i) {
    std::optional<std::string> line = c.readStreamLine(5000);
    if (!line || json::parse(*line)["event"] != "renewed") return line;
  }
  return std::nullopt;
}

using HealthHoldTest = TwoSidecarsOnOneRedis;

TEST_F(HealthHoldTest, FailingEndpointEndsTheStreamHoldAndAWaiterElsewhereGetsTheLock) {
  AppHealth app;
  ca.sendRequest(
      "POST", "/v1/locks/orders/acquire",
      json{{"ttl_ms", 2000}, {"hold", "stream"}, {"health", healthField(app.url(), 200, 3)}}
          .dump());
  auto head = ca.readStreamHead();
  ASSERT_TRUE(head.has_value());
  ASSERT_EQ(head->status, 200);
  ASSERT_TRUE(ca.readStreamLine().has_value());  // acquired

  HttpClient admin = group.client(0);  // ca carries the stream
  // A waiter on the other sidecar.
  cb.sendRequest("POST", "/v1/locks/orders/acquire", R"({"ttl_ms":5000,"wait_ms":10000})");
  // Healthy for a while: the hold stays.
  ASSERT_TRUE(pollUntil([&] { return app.requests >= 3; }, 5000));
  EXPECT_EQ(metricValue(admin.get("/metrics").body, "sidelock_leases_released_unhealthy_total"), 0)
      << "no release while healthy";

  app.status = 503;
  const auto failing_since = Clock::now();
  const std::optional<std::string> last = firstLineNotRenewed(ca);
  ASSERT_TRUE(last.has_value());
  const json lost = json::parse(*last);
  EXPECT_EQ(lost["event"], "lost");
  EXPECT_EQ(lost["reason"], "unhealthy");
  const auto lost_at = Clock::now();
  auto granted = cb.readResponse(5000);
  const auto now = Clock::now();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(now - failing_since);
  const auto after_lost = std::chrono::duration_cast<std::chrono::milliseconds>(now - lost_at);
  ASSERT_TRUE(granted.has_value());
  EXPECT_EQ(granted->status, 200) << granted->body;
  std::printf(
      "health: the holder heard lost, the waiter was granted %lld ms later (%lld ms after "
      "the endpoint failed)\n",
      static_cast<long long>(after_lost.count()), static_cast<long long>(took.count()));
  // Not released under the holder, which may still be stopping its process (sidelock run's
  // CMD): renewals stop and the lease runs out. Renewed every TTL/3 (667 ms), it had at least
  // 2000 - 667 ms left when the holder heard lost.
  EXPECT_GE(after_lost.count(), 1100) << "granted before the unhealthy holder's lease ran out";
  // failures x interval = 600 ms, a probe in flight, then at most one TTL; asserted loosely.
  EXPECT_LT(took.count(), 4500) << "the lease ended " << took.count() << " ms after failing";
  const std::string metrics = admin.get("/metrics").body;
  EXPECT_EQ(metricValue(metrics, "sidelock_leases_released_unhealthy_total"), 1);
  EXPECT_GE(metricValue(metrics, "sidelock_health_probes_total{result=\"failed\"}"), 3);
  EXPECT_EQ(metricValue(metrics, "sidelock_health_probes"), 0) << "the probe ends with its hold";
}

// SIGTERM to the holder's sidecar while the unhealthy hold runs out: the shutdown does not
// release that lease either (it used to: the waiter was granted at the SIGTERM, beside a holder
// still stopping its process).
TEST_F(HealthHoldTest, ShutdownDoesNotReleaseAnUnhealthyHoldThatRunsOut) {
  AppHealth app;
  ca.sendRequest(
      "POST", "/v1/locks/orders/acquire",
      json{{"ttl_ms", 3000}, {"hold", "stream"}, {"health", healthField(app.url(), 200, 2)}}
          .dump());
  auto head = ca.readStreamHead();
  ASSERT_TRUE(head.has_value());
  ASSERT_EQ(head->status, 200);
  ASSERT_TRUE(ca.readStreamLine().has_value());  // acquired
  cb.sendRequest("POST", "/v1/locks/orders/acquire", R"({"ttl_ms":3000,"wait_ms":15000})");
  ASSERT_TRUE(pollUntil([&] { return app.requests >= 2; }, 5000));
  app.status = 503;
  const std::optional<std::string> last = firstLineNotRenewed(ca);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(json::parse(*last)["reason"], "unhealthy") << *last;
  const auto lost_at = Clock::now();
  EXPECT_EQ(a->stop(), 0) << a->logs();
  auto granted = cb.readResponse(10000);
  const auto after_lost =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - lost_at);
  ASSERT_TRUE(granted.has_value());
  EXPECT_EQ(granted->status, 200) << granted->body;
  // Renewed every second (TTL/3), the lease had at least 2 s left when the holder heard lost.
  EXPECT_GE(after_lost.count(), 1500) << "released at shutdown under the unhealthy holder";
}

TEST_F(HealthHoldTest, AutoRenewHoldIsReleasedAndItsOwnerHearsLeaseLost) {
  AppHealth app;
  app.status = 500;
  auto r = ca.post(
      "/v1/locks/jobs/acquire",
      json{{"ttl_ms", 5000}, {"auto_renew", true}, {"health", healthField(app.url(), 100, 2)}}
          .dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string owner = json::parse(r.body)["owner"];
  ASSERT_TRUE(pollUntil(
      [&] {
        return metricValue(ca.get("/metrics").body, "sidelock_leases_released_unhealthy_total") ==
               1;
      },
      5000));
  EXPECT_EQ(cb.post("/v1/locks/jobs/acquire", R"({"ttl_ms":1000})").status, 200);
  auto release = ca.post("/v1/locks/jobs/release", json{{"owner", owner}}.dump());
  EXPECT_EQ(release.status, 404) << release.body;
  EXPECT_EQ(json::parse(release.body)["error"], "lease_lost") << release.body;
}

// A lease lost through its health binding is given up involuntarily: its lock_delay_ms applies
// (README "Lock-delay"), so a sidecar elsewhere waits the delay out before it gets the lock.
TEST_F(HealthHoldTest, AnUnhealthyReleaseStartsTheLockDelay) {
  AppHealth app;
  app.status = 500;
  auto r = ca.post("/v1/locks/delayed/acquire", json{{"ttl_ms", 30'000},
                                                     {"auto_renew", true},
                                                     {"lock_delay_ms", 1500},
                                                     {"health", healthField(app.url(), 100, 2)}}
                                                    .dump());
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE(pollUntil(
      [&] {
        return metricValue(ca.get("/metrics").body, "sidelock_leases_released_unhealthy_total") ==
               1;
      },
      5000));
  const auto released_at = Clock::now();
  auto busy = cb.post("/v1/locks/delayed/acquire", R"({"ttl_ms":1000})");
  ASSERT_EQ(busy.status, 409) << "the delay keeps the lock: " << busy.body;
  EXPECT_EQ(json::parse(busy.body)["reason"], "lock_delay") << busy.body;
  EXPECT_GT(json::parse(busy.body)["retry_after_ms"].get<int64_t>(), 0) << busy.body;
  auto waited = cb.post("/v1/locks/delayed/acquire", R"({"ttl_ms":1000,"wait_ms":5000})");
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - released_at);
  ASSERT_EQ(waited.status, 200) << waited.body;
  EXPECT_GE(took.count(), 1000) << "granted inside the delay";
  EXPECT_EQ(metricValue(ca.get("/metrics").body,
                        "sidelock_lock_delays_applied_total{cause=\"unhealthy\"}"),
            1);
}

TEST_F(HealthHoldTest, HoldsNamingOneUrlShareOneProbeAndASilentEndpointBlocksNothing) {
  AppHealth app;
  std::vector<std::string> owners;
  for (int i = 0; i < 4; ++i) {
    auto r = ca.post(
        "/v1/locks/shared-" + std::to_string(i) + "/acquire",
        json{{"ttl_ms", 5000}, {"auto_renew", true}, {"health", healthField(app.url(), 300, 3)}}
            .dump());
    ASSERT_EQ(r.status, 200) << r.body;
    owners.push_back(json::parse(r.body)["owner"]);
  }
  EXPECT_EQ(metricValue(ca.get("/metrics").body, "sidelock_health_probes"), 1);
  // Another endpoint that accepts and never answers: its probes time out meanwhile, and the
  // sidecar keeps answering quickly.
  AppHealth silent;
  silent.status = 0;
  auto r = ca.post(
      "/v1/locks/silent/acquire",
      json{{"ttl_ms", 5000}, {"auto_renew", true}, {"health", healthField(silent.url(), 500, 100)}}
          .dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(metricValue(ca.get("/metrics").body, "sidelock_health_probes"), 2);
  ASSERT_TRUE(pollUntil(
      [&] {
        const auto start = Clock::now();
        const bool fast = ca.get("/healthz").status == 200 &&
                          Clock::now() - start < std::chrono::milliseconds(300);
        EXPECT_TRUE(fast);
        return metricValue(ca.get("/metrics").body,
                           "sidelock_health_probes_total{result=\"timeout\"}") >= 2;
      },
      5000));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ca.post("/v1/locks/shared-" + std::to_string(i) + "/release",
                      json{{"owner", owners[i]}}.dump())
                  .status,
              200);
  }
  EXPECT_EQ(metricValue(ca.get("/metrics").body, "sidelock_health_probes"), 1) << "shared one ends";
  // 4 holds, one probe every 300 ms.
  EXPECT_LT(app.requests.load(), 20);
}

// A campaign with "health": the leader resigns after `failures` failed probes, its stream reads
// lost (reason unhealthy), and a candidate on the other sidecar is elected.
TEST_F(HealthHoldTest, FailingEndpointMakesTheLeaderResignAndAnotherCandidateLeads) {
  AppHealth app;
  ca.sendRequest(
      "POST", "/v1/elections/primary/campaign",
      json{{"candidate", "pod-a"}, {"ttl_ms", 2000}, {"health", healthField(app.url(), 200, 2)}}
          .dump());
  auto head = ca.readStreamHead();
  ASSERT_TRUE(head.has_value());
  ASSERT_EQ(head->status, 200) << head->body;
  auto elected = ca.readStreamLine();
  ASSERT_TRUE(elected.has_value());
  EXPECT_EQ(json::parse(*elected)["event"], "elected");
  cb.sendRequest("POST", "/v1/elections/primary/campaign",
                 json{{"candidate", "pod-b"}, {"ttl_ms", 5000}}.dump());
  ASSERT_TRUE(pollUntil([&] { return app.requests >= 2; }, 5000));

  app.status = 503;
  const auto failing_since = Clock::now();
  const std::optional<std::string> last = firstLineNotRenewed(ca);
  ASSERT_TRUE(last.has_value());
  const json lost = json::parse(*last);
  EXPECT_EQ(lost["event"], "lost") << *last;
  EXPECT_EQ(lost["reason"], "unhealthy") << *last;
  const auto lost_at = Clock::now();
  auto b_head = cb.readStreamHead(5000);
  ASSERT_TRUE(b_head.has_value());
  EXPECT_EQ(b_head->status, 200) << b_head->body;
  auto b_elected = cb.readStreamLine(5000);
  ASSERT_TRUE(b_elected.has_value());
  EXPECT_EQ(json::parse(*b_elected)["candidate"], "pod-b") << *b_elected;
  const auto now = Clock::now();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(now - failing_since);
  const auto after_lost = std::chrono::duration_cast<std::chrono::milliseconds>(now - lost_at);
  // The unhealthy leader's lease runs out (no new leader under a process still acting as one):
  // renewed every TTL/3, it had at least 2000 - 667 ms left when its stream read lost.
  EXPECT_GE(after_lost.count(), 1100) << "a new leader before the old lease ran out";
  EXPECT_LT(took.count(), 4500) << "the leader's lease ended " << took.count()
                                << " ms after failing";
  HttpClient admin = group.client(0);
  EXPECT_EQ(metricValue(admin.get("/metrics").body, "sidelock_leases_released_unhealthy_total"),
            1);
  // A non-loopback URL is refused for a campaign as for a lock.
  auto refused = admin.post(
      "/v1/elections/primary/campaign",
      json{{"candidate", "pod-c"}, {"health", healthField("http://10.0.0.1/healthz", 1000, 3)}}
          .dump());
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_NE(refused.body.find("health.url"), std::string::npos) << refused.body;
  cb.close();  // B resigns now, not at its sidecar's shutdown (stepping_down waits for it)
}

TEST_F(HealthHoldTest, BadHealthFieldsAreRefusedWith400AndChangeNothing) {
  AppHealth app;
  const std::vector<std::pair<json, std::string>> cases = {
      {healthField("http://10.0.0.1:80/healthz", 1000, 3), "health.url"},
      {healthField("http://127.0.0.1@evil.example/", 1000, 3), "health.url"},
      {healthField("https://127.0.0.1/", 1000, 3), "health.url"},
      {healthField("http://example.com/", 1000, 3), "health.url"},
      {healthField("http://[::2]/", 1000, 3), "health.url"},
      {healthField(app.url(), 50, 3), "health.interval_ms"},
      {healthField(app.url(), 1000, 0), "health.failures"},
      {healthField(app.url(), 1000, 101), "health.failures"},
      {json{{"interval_ms", 1000}}, "health.url"},
      {json{{"url", app.url()}, {"extra", 1}}, "health.extra"},
      {json("http://127.0.0.1/"), "health"},
  };
  for (const auto& [health, names] : cases) {
    auto r =
        ca.post("/v1/locks/bad/acquire", json{{"auto_renew", true}, {"health", health}}.dump());
    EXPECT_EQ(r.status, 400) << health;
    EXPECT_NE(r.body.find(names), std::string::npos) << r.body;
  }
  // A lease nobody renews cannot follow health.
  auto plain =
      ca.post("/v1/locks/bad/acquire", json{{"health", healthField(app.url(), 1000, 3)}}.dump());
  EXPECT_EQ(plain.status, 400) << plain.body;
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{bad}"}), "0");
  EXPECT_EQ(metricValue(ca.get("/metrics").body, "sidelock_health_probes"), 0);
  EXPECT_EQ(app.requests.load(), 0);
}

// Health on an election the sidecar runs for its pod (config `elections[].health`): the leader's
// app starts failing, its sidecar resigns within failures x interval (+ a round trip) and the
// other pod leads; the app recovers and its pod is a candidate again (in line, then leader once
// the other pod's sidecar stops).
TEST(PodElectionHealthTest, AnUnhealthyPodResignsAndCampaignsAgainOnceHealthy) {
  constexpr int kIntervalMs = 200;
  constexpr int kFailures = 2;
  RedisServer redis;
  AppHealth app_a;
  AppHealth app_b;
  auto pod = [&](const std::string& identity, const AppHealth& app) {
    return std::make_unique<SidecarProcess>(
        SidecarProcess::Options{redisBackendYaml(redis.address()) +
                                    "shutdown: {release_held: false}\nidentity: " + identity +
                                    "\n"
                                    "elections:\n"
                                    "  - name: scheduler\n"
                                    "    ttl_ms: 4000\n"
                                    "    health: {url: \"" +
                                    app.url() + "\", interval_ms: " + std::to_string(kIntervalMs) +
                                    ", failures: " + std::to_string(kFailures) + "}\n",
                                {},
                                /*wait_ready=*/true});
  };
  auto leaderOf = [](HttpClient& c) {
    return json::parse(c.get("/v1/elections/scheduler").body)["leader"];
  };
  auto waitsInLine = [](HttpClient& c) {
    return json::parse(c.get("/v1/locks").body)["waiters"].dump().find("election/scheduler") !=
           std::string::npos;
  };
  std::unique_ptr<SidecarProcess> a = pod("pod-a", app_a);
  HttpClient ca = HttpClient::tcp(a->port());
  ASSERT_TRUE(pollUntil([&] { return leaderOf(ca).is_object(); })) << a->logs();
  ASSERT_EQ(leaderOf(ca)["candidate"], "pod-a");
  std::unique_ptr<SidecarProcess> b = pod("pod-b", app_b);
  HttpClient cb = HttpClient::tcp(b->port());
  ASSERT_TRUE(pollUntil([&] { return waitsInLine(cb); })) << b->logs();
  EXPECT_GE(app_a.requests.load(), 1) << "the pod's probe runs from start-up";

  app_a.status = 503;
  const auto failing_since = Clock::now();
  ASSERT_TRUE(pollUntil(
      [&] {
        const json now = leaderOf(cb);
        return now.is_object() && now["candidate"] == "pod-b";
      },
      5000))
      << a->logs();
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - failing_since);
  std::printf("[pod-election-health] pod-b leads %lld ms after pod-a's app failed (%d x %d ms)\n",
              static_cast<long long>(took.count()), kFailures, kIntervalMs);
  // failures x interval = 400 ms, plus a probe in flight, a round trip and the polling.
  EXPECT_LT(took.count(), 3000) << "resigned " << took.count() << " ms after failing";
  EXPECT_NE(a->logs().find("pod_election.unhealthy"), std::string::npos) << a->logs();
  EXPECT_EQ(metricValue(ca.get("/metrics").body, "sidelock_leases_released_unhealthy_total"), 1);
  // The sidecar gave the leadership up: a resignation, not a loss.
  EXPECT_NE(a->logs().find("pod_election.resigned"), std::string::npos) << a->logs();
  EXPECT_EQ(metricValue(ca.get("/metrics").body, "sidelock_election_resignations_total"), 1);
  EXPECT_EQ(metricValue(ca.get("/metrics").body,
                        "sidelock_election_leadership_lost_total{reason=\"lost\"}"),
            0);
  // Sick: pod-a neither leads nor waits in line, however long.
  std::this_thread::sleep_for(std::chrono::milliseconds(kIntervalMs * 3));
  EXPECT_FALSE(waitsInLine(ca)) << "an unhealthy pod stays out of the election";
  EXPECT_EQ(
      metricValue(ca.get("/metrics").body, "sidelock_election_leader{election=\"scheduler\"}"), 0);

  // Healthy again: a candidate again (in line behind pod-b), and the leader once pod-b leaves.
  app_a.status = 200;
  ASSERT_TRUE(pollUntil([&] { return waitsInLine(ca); }, 5000)) << a->logs();
  EXPECT_NE(a->logs().find("pod_election.healthy_again"), std::string::npos);
  EXPECT_EQ(b->stop(), 0) << b->logs();  // resigns on SIGTERM
  ASSERT_TRUE(pollUntil(
      [&] {
        const json now = leaderOf(ca);
        return now.is_object() && now["candidate"] == "pod-a";
      },
      5000))
      << a->logs();
  EXPECT_EQ(a->stop(), 0) << a->logs();
}

// The operator's limits on probes (config `health`), for acquires and campaigns alike: a port
// not in allowed_ports is a 400, a probe beyond max_probes a 429 naming the limit; neither
// changes anything. A hold sharing a running probe (same URL and interval) is not a new probe.
TEST(HealthLimitsTest, AllowedPortsAndMaxProbesAreEnforcedForEverySource) {
  RedisServer redis;
  AppHealth app;
  AppHealth other;
  SidecarProcess sidecar(SidecarProcess::Options{redisBackendYaml(redis.address()) +
                                                     "identity: pod-a\nhealth: {allowed_ports: [" +
                                                     std::to_string(app.port()) +
                                                     "], max_probes: 2}\n"
                                                     "elections:\n"
                                                     "  - name: scheduler\n"
                                                     "    health: {url: \"" +
                                                     app.url() + "\", interval_ms: 1000}\n",
                                                 {},
                                                 /*wait_ready=*/true});
  HttpClient c = HttpClient::tcp(sidecar.port());
  ASSERT_TRUE(pollUntil([&] {
    return metricValue(c.get("/metrics").body, "sidelock_health_probes") == 1;
  })) << "the configured election's probe";

  auto acquire = [&](const std::string& name, const std::string& url, int interval_ms) {
    return c.post(
        "/v1/locks/" + name + "/acquire",
        json{{"ttl_ms", 5000}, {"auto_renew", true}, {"health", healthField(url, interval_ms, 3)}}
            .dump());
  };
  // A port the operator did not allow: 400, nothing probed or written.
  const int other_requests = other.requests.load();
  auto port = acquire("limited", other.url(), 1000);
  EXPECT_EQ(port.status, 400) << port.body;
  EXPECT_NE(port.body.find("health.allowed_ports"), std::string::npos) << port.body;
  auto port_campaign =
      c.post("/v1/elections/other/campaign",
             json{{"candidate", "x"}, {"health", healthField(other.url(), 1000, 3)}}.dump());
  EXPECT_EQ(port_campaign.status, 400) << port_campaign.body;

  // The shared probe (the election's URL and interval) is no new probe; one more distinct probe
  // fits, the next does not.
  auto shared = acquire("shared", app.url(), 1000);
  EXPECT_EQ(shared.status, 200) << shared.body;
  auto second = acquire("second", app.url(), 500);
  EXPECT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(metricValue(c.get("/metrics").body, "sidelock_health_probes"), 2);
  auto over = acquire("over", app.url() + "?x=1", 500);
  EXPECT_EQ(over.status, 429) << over.body;
  const json over_body = json::parse(over.body);
  EXPECT_EQ(over_body["error"], "too_many_probes");
  EXPECT_EQ(over_body["limit"], "health.max_probes");
  EXPECT_GT(over_body["retry_after_ms"].get<int64_t>(), 0);
  auto over_campaign =
      c.post("/v1/elections/other/campaign",
             json{{"candidate", "x"}, {"health", healthField(app.url(), 300, 3)}}.dump());
  EXPECT_EQ(over_campaign.status, 429) << over_campaign.body;
  EXPECT_EQ(json::parse(over_campaign.body)["error"], "too_many_probes");
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{limited}", "sidelock:{over}", "sidelock:{other}:el"}),
            "0");
  EXPECT_EQ(metricValue(c.get("/metrics").body, "sidelock_health_probes"), 2);
  EXPECT_EQ(other.requests.load(), other_requests) << "a refused port is never probed";

  // A probe that ends makes room.
  EXPECT_EQ(
      c.post("/v1/locks/second/release", json{{"owner", json::parse(second.body)["owner"]}}.dump())
          .status,
      200);
  EXPECT_EQ(metricValue(c.get("/metrics").body, "sidelock_health_probes"), 1);

  // Checked again at the grant: a waiter admitted while there was room, granted once the room is
  // gone, is refused (429) and the lease given back unseen.
  auto held = c.post("/v1/locks/held/acquire", R"({"ttl_ms":5000})");
  ASSERT_EQ(held.status, 200) << held.body;
  HttpClient waiter = HttpClient::tcp(sidecar.port());
  waiter.sendRequest("POST", "/v1/locks/held/acquire",
                     json{{"ttl_ms", 5000},
                          {"wait_ms", 5000},
                          {"auto_renew", true},
                          {"health", healthField(app.url() + "?waiter", 1000, 3)}}
                         .dump());
  ASSERT_TRUE(pollUntil([&] {
    return json::parse(c.get("/v1/locks").body)["waiters"].dump().find("held") != std::string::npos;
  })) << "the waiter is not in line";
  EXPECT_EQ(acquire("room", app.url() + "?room", 500).status, 200);  // the last probe
  EXPECT_EQ(
      c.post("/v1/locks/held/release", json{{"owner", json::parse(held.body)["owner"]}}.dump())
          .status,
      200);
  auto refused = waiter.readResponse(5000);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 429) << refused->body;
  EXPECT_EQ(json::parse(refused->body)["error"], "too_many_probes") << refused->body;
  EXPECT_TRUE(pollUntil([&] {
    return redis.cli({"EXISTS", "sidelock:{held}"}) == "0";
  })) << "the refused grant was not given back";
  EXPECT_EQ(metricValue(c.get("/metrics").body, "sidelock_health_probes"), 2);
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();
}

}  // namespace
}  // namespace sidelock::testing
