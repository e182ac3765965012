// Issue 4 end to end: watchdog renewal, lost leases, stream holds, pushed wake-ups across sidecar
// processes, queue limits — the real binary against real redis-server processes.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

std::string yamlFor(const RedisServer& redis, const std::string& extra = "") {
  return "backend:\n  type: redis\n  nodes: [\"" + redis.address() +
         "\"]\n  command_timeout_ms: 300\n  reconnect_min_ms: 20\n  reconnect_max_ms: 200\n" +
         extra;
}

json body(const HttpResponse& r) { return json::parse(r.body); }

TEST(LeaseTest, WatchdogKeepsA300msLeaseAliveAndStopsAtRelease) {
  RedisServer redis;
  SidecarProcess sidecar({yamlFor(redis), {}, true});
  HttpClient c = HttpClient::tcp(sidecar.port());
  auto r = c.post("/v1/locks/renewed/acquire", R"({"ttl_ms":300,"auto_renew":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  std::string owner = body(r)["owner"];
  // Ten TTLs later (30 renewals at ttl x renew_fraction 0.333) it is still ours.
  const std::string renewed = "sidelock_renew_total{result=\"renewed\"}";
  EXPECT_TRUE(pollUntil([&] { return metricValue(c.get("/metrics").body, renewed) >= 30; }));
  EXPECT_EQ(redis.cli({"GET", "sidelock:{renewed}"}), owner);
  auto listed = body(c.get("/v1/locks"));
  ASSERT_EQ(listed["leases"].size(), 1u);
  EXPECT_EQ(listed["leases"][0]["auto_renew"], true);
  EXPECT_EQ(listed["leases"][0].dump().find(owner), std::string::npos);

  ASSERT_EQ(c.post("/v1/locks/renewed/release", json{{"owner", owner}}.dump()).status, 200);
  // No renewal may resurrect it afterwards.
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{renewed}"}), "0");
    std::this_thread::sleep_for(milliseconds(60));
  }
  auto metrics = c.get("/metrics").body;
  EXPECT_GE(metricValue(metrics, "sidelock_renew_total{result=\"renewed\"}"), 8);
  EXPECT_EQ(sidecar.stop(), 0);
}

TEST(LeaseTest, LeaseDeletedBehindTheSidecarsBackIsReportedLost) {
  RedisServer redis;
  SidecarProcess sidecar({yamlFor(redis), {}, true});
  HttpClient s = HttpClient::tcp(sidecar.port());
  s.sendRequest("POST", "/v1/locks/stolen/acquire", R"({"ttl_ms":300,"hold":"stream"})");
  auto head = s.readStreamHead();
  ASSERT_TRUE(head.has_value());
  ASSERT_EQ(head->status, 200);
  EXPECT_EQ(head->headers["content-type"], "application/x-ndjson");
  auto first = s.readStreamLine();
  ASSERT_TRUE(first.has_value());
  json acquired = json::parse(*first);
  EXPECT_EQ(acquired["event"], "acquired");
  std::string owner = acquired["owner"];

  // Somebody else takes the key (a pause, a failover that lost data...).
  redis.cli({"SET", "sidelock:{stolen}", "intruder", "PX", "60000"});
  bool lost = false;
  for (int i = 0; i < 20 && !lost; ++i) {
    auto line = s.readStreamLine(2000);
    if (!line) break;
    const json event = json::parse(*line);
    lost = event["event"] == "lost";
    if (lost) {
      EXPECT_FALSE(event.contains("cap_reached")) << event << ": a loss, not the cap";
    }
  }
  EXPECT_TRUE(lost) << "the stream reports the loss";
  EXPECT_EQ(redis.cli({"GET", "sidelock:{stolen}"}), "intruder") << "nobody else's lock renewed";

  HttpClient c = HttpClient::tcp(sidecar.port());
  auto r = c.post("/v1/locks/stolen/release", json{{"owner", owner}}.dump());
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(body(r)["error"], "lease_lost");
  EXPECT_EQ(redis.cli({"GET", "sidelock:{stolen}"}), "intruder") << "nor released";
  auto metrics = c.get("/metrics").body;
  EXPECT_EQ(metricValue(metrics, "sidelock_lease_lost_total"), 1);
  EXPECT_EQ(metricValue(metrics, "sidelock_renew_total{result=\"lost\"}"), 1);
  EXPECT_EQ(sidecar.stop(), 0);
}

TEST(LeaseTest, StreamClientThatDisconnectsFreesTheLock) {
  RedisServer redis;
  SidecarProcess sidecar({yamlFor(redis), {}, true});
  {
    HttpClient s = HttpClient::tcp(sidecar.port());
    s.sendRequest("POST", "/v1/locks/bound/acquire", R"({"ttl_ms":30000,"hold":"stream"})");
    ASSERT_TRUE(s.readStreamHead().has_value());
    ASSERT_TRUE(s.readStreamLine().has_value());
    EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{bound}"}), "1");
  }  // the app "crashes": its connection closes
  EXPECT_TRUE(pollUntil([&] {
    return redis.cli({"EXISTS", "sidelock:{bound}"}) == "0";
  })) << "released long before its 30 s TTL";
  EXPECT_EQ(sidecar.stop(), 0);
}

TEST(LeaseTest, ReleasingAStreamHoldThroughTheApiEndsTheStream) {
  RedisServer redis;
  SidecarProcess sidecar({yamlFor(redis), {}, true});
  HttpClient s = HttpClient::tcp(sidecar.port());
  s.sendRequest("POST", "/v1/locks/ended/acquire", R"({"ttl_ms":30000,"hold":"stream"})");
  ASSERT_TRUE(s.readStreamHead().has_value());
  auto first = s.readStreamLine();
  ASSERT_TRUE(first.has_value());
  std::string owner = json::parse(*first)["owner"];
  HttpClient c = HttpClient::tcp(sidecar.port());
  ASSERT_EQ(c.post("/v1/locks/ended/release", json{{"owner", owner}}.dump()).status, 200);
  bool released = false;
  for (int i = 0; i < 5 && !released; ++i) {
    auto line = s.readStreamLine(2000);
    if (!line) break;
    released = json::parse(*line)["event"] == "released";
  }
  EXPECT_TRUE(released);
  // The chunked response is complete: the same connection serves the next request.
  auto stream_message = s.readResponse();
  ASSERT_TRUE(stream_message.has_value()) << "the stream's chunked message ended";
  s.sendRequest("GET", "/healthz");
  auto next = s.readResponse();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->status, 200);
  EXPECT_EQ(json::parse(next->body)["status"], "ok");
  EXPECT_EQ(sidecar.stop(), 0);
}

TEST(LeaseTest, WaiterOnAnotherSidecarIsWokenByPubSub) {
  RedisServer redis;
  // retry_max_ms is large so a fallback poll could not explain a fast hand-off.
  SidecarProcess a(
      {yamlFor(redis, "locks:\n  retry_min_ms: 5000\n  retry_max_ms: 10000\n"), {}, true});
  SidecarProcess b(
      {yamlFor(redis, "locks:\n  retry_min_ms: 5000\n  retry_max_ms: 10000\n"), {}, true});
  HttpClient holder = HttpClient::tcp(a.port());
  auto r = holder.post("/v1/locks/shared/acquire", R"({"ttl_ms":30000})");
  ASSERT_EQ(r.status, 200);
  std::string owner = body(r)["owner"];

  HttpClient waiter = HttpClient::tcp(b.port());
  waiter.sendRequest("POST", "/v1/locks/shared/acquire", R"({"ttl_ms":5000,"wait_ms":20000})");
  // Queued on b, and b's first attempt has answered (found it held): the release below must be
  // what wakes it, not race with that attempt.
  HttpClient observer = HttpClient::tcp(b.port());
  ASSERT_TRUE(waitForWaiters(observer, "shared", 1));
  const std::string b_acquires =
      "sidelock_backend_request_seconds_count{node=\"" + redis.address() + "\",op=\"acquire\"}";
  ASSERT_TRUE(
      pollUntil([&] { return metricValue(observer.get("/metrics").body, b_acquires) >= 1; }));
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(holder.post("/v1/locks/shared/release", json{{"owner", owner}}.dump()).status, 200);
  auto got = waiter.readResponse(20000);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->status, 200) << got->body;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(2500))
      << "woken by the release notification, not by a 5 s backoff";
  auto metrics = HttpClient::tcp(b.port()).get("/metrics").body;
  EXPECT_GE(metricValue(metrics, "sidelock_wakeups_total"), 1);
  EXPECT_EQ(a.stop(), 0);
  EXPECT_EQ(b.stop(), 0);
}

TEST(LeaseTest, QueueLimitsAnswer429) {
  RedisServer redis;
  SidecarProcess sidecar(
      {yamlFor(redis, "locks:\n  max_waiters_per_lock: 2\n  max_waiters: 3\n"), {}, true});
  HttpClient holder = HttpClient::tcp(sidecar.port());
  ASSERT_EQ(holder.post("/v1/locks/q/acquire", "{}").status, 200);
  ASSERT_EQ(holder.post("/v1/locks/q2/acquire", "{}").status, 200);
  std::vector<HttpClient> waiting;
  for (int i = 0; i < 2; ++i) {
    waiting.push_back(HttpClient::tcp(sidecar.port()));
    waiting.back().sendRequest("POST", "/v1/locks/q/acquire", R"({"wait_ms":10000})");
  }
  ASSERT_TRUE(waitForWaiters(holder, "q", 2));
  auto r = HttpClient::tcp(sidecar.port()).post("/v1/locks/q/acquire", R"({"wait_ms":10000})");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(body(r)["error"], "too_many_waiters");
  EXPECT_GE(body(r)["retry_after_ms"].get<int64_t>(), 1);
  EXPECT_EQ(r.headers.count("retry-after"), 1u) << "a 429 says when to come back, as a 409 does";
  EXPECT_EQ(body(r)["limit"], "max_waiters_per_lock");
  waiting.push_back(HttpClient::tcp(sidecar.port()));
  waiting.back().sendRequest("POST", "/v1/locks/q2/acquire", R"({"wait_ms":10000})");
  ASSERT_TRUE(waitForWaiters(holder, "q2", 1));
  r = HttpClient::tcp(sidecar.port()).post("/v1/locks/q2/acquire", R"({"wait_ms":10000})");
  EXPECT_EQ(r.status, 429) << "global limit";
  EXPECT_EQ(body(r)["limit"], "max_waiters");
  EXPECT_EQ(r.headers.count("retry-after"), 1u);
  // The budget is used up, but a free lock is not a wait: a waiting acquire gets it at once.
  r = HttpClient::tcp(sidecar.port()).post("/v1/locks/free/acquire", R"({"wait_ms":10000})");
  EXPECT_EQ(r.status, 200) << r.body;
  // A held lock with nobody queued locally is tried first, then refused for want of room.
  ASSERT_EQ(holder.post("/v1/locks/q3/acquire", "{}").status, 200);
  r = HttpClient::tcp(sidecar.port()).post("/v1/locks/q3/acquire", R"({"wait_ms":10000})");
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(body(r)["limit"], "max_waiters");
  EXPECT_GE(body(r)["retry_after_ms"].get<int64_t>(), 1);
  // A try-once acquire is not a waiter and is never refused for queue limits.
  EXPECT_EQ(HttpClient::tcp(sidecar.port()).post("/v1/locks/q/acquire", "{}").status, 409);
  EXPECT_EQ(sidecar.stop(), 0);
}

TEST(LeaseTest, MaxHoldCapsRenewal) {
  RedisServer redis;
  SidecarProcess sidecar({yamlFor(redis), {}, true});
  HttpClient c = HttpClient::tcp(sidecar.port());
  auto r =
      c.post("/v1/locks/capped/acquire", R"({"ttl_ms":200,"auto_renew":true,"max_hold_ms":500})");
  ASSERT_EQ(r.status, 200);
  // Gone after max_hold_ms + one TTL; a lease renewed forever would reach the poll deadline.
  EXPECT_TRUE(pollUntil([&] {
    return redis.cli({"EXISTS", "sidelock:{capped}"}) == "0";
  })) << "never renewed forever";
  auto metrics = c.get("/metrics").body;
  EXPECT_EQ(metricValue(metrics, "sidelock_renew_total{result=\"capped\"}"), 1);
  EXPECT_EQ(sidecar.stop(), 0);
}

TEST(LeaseTest, ACappedStreamEndsSayingTheCapWasReached) {
  RedisServer redis;
  SidecarProcess sidecar({yamlFor(redis), {}, true});
  HttpClient s = HttpClient::tcp(sidecar.port());
  // A 400 ms TTL is renewed every ~133 ms: a loop that a loaded machine stalls for 200 ms does not
  // lose the lease before its cap (200 ms did, at ctest -j4 beside a build).
  s.sendRequest("POST", "/v1/locks/capped-stream/acquire",
                R"({"ttl_ms":400,"hold":"stream","max_hold_ms":1000})");
  auto head = s.readStreamHead();
  ASSERT_TRUE(head.has_value());
  ASSERT_EQ(head->status, 200);
  std::vector<json> events;
  while (auto line = s.readStreamLine(3000)) {
    events.push_back(json::parse(*line));
    if (events.back()["event"] == "lost") break;
  }
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front()["event"], "acquired");
  EXPECT_EQ(events[events.size() - 2]["event"], "capped");
  // Each renewal says what is left of the lease (its holder stops by then if nothing more comes).
  int renewals = 0;
  for (const json& e : events) {
    if (e["event"] != "renewed") continue;
    ++renewals;
    ASSERT_TRUE(e.contains("ttl_ms")) << e;
    EXPECT_GT(e["ttl_ms"].get<int64_t>(), 0) << e;
    EXPECT_LE(e["ttl_ms"].get<int64_t>(), 400) << e;
  }
  EXPECT_GE(renewals, 1);
  const json& last = events.back();
  EXPECT_EQ(last["event"], "lost") << last;
  EXPECT_EQ(last.value("cap_reached", false), true) << last;
  const std::string reason = last.value("reason", "");
  EXPECT_NE(reason.find("max_hold_ms reached"), std::string::npos) << last;
  EXPECT_EQ(reason.find("held by another owner"), std::string::npos) << last;
  EXPECT_FALSE(s.readStreamLine(1000).has_value()) << "the stream ended with it";
  EXPECT_EQ(sidecar.stop(), 0);
}

}  // namespace
}  // namespace sidelock::testing
