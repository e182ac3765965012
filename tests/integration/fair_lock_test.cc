// Fair locks (issue 13): "fair": true grants a lock in the order its waiters arrived, across
// sidecars, through a queue in Redis whose places are held by claims that lapse unless renewed,
// so a waiter that left or a sidecar that died cannot stall the queue (Redisson's FairLock gets
// stuck exactly there). Real sidecars on a real redis-server.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/hold_check.h"
#include "support/http_client.h"
#include "support/lock_answers.h"
#include "support/redis_server.h"
#include "support/redlock_sidecar.h"
#include "support/sidecar_group.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

/// Waiters registered in the lock's queue in Redis.
int queued(RedisServer& redis, const std::string& name) {
  return std::stoi(redis.cli({"ZCARD", "sidelock:{" + name + "}:fair"}));
}

// Two sidecars `a` and `b` on one `redis`, clients `ca` and `cb`; both must stop cleanly.
class FairLockTwoSidecars : public TwoSidecarsOnOneRedis {};

// Eight waiters arrive one after the other, alternating between two sidecars; when the holder
// releases, they get the lock exactly in their order of arrival.
TEST_F(FairLockTwoSidecars, WaitersOfTwoSidecarsAreGrantedInArrivalOrder) {
  auto holder = ca.post("/v1/locks/line/acquire", R"({"fair":true,"ttl_ms":30000})");
  ASSERT_EQ(holder.status, 200) << holder.body;
  EXPECT_EQ(json::parse(holder.body)["fair"], true);

  const auto holder_granted = HoldLog::now();
  constexpr int kWaiters = 8;
  std::mutex mu;
  HoldLog holds;  // every holder's grant-to-release interval, as its client saw it
  std::vector<int> granted_order;
  std::vector<std::string> failures;
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    const int port = i % 2 == 0 ? a->port() : b->port();
    waiters.emplace_back([&, i, port] {
      HttpClient c = HttpClient::tcp(port);
      auto r = c.post("/v1/locks/line/acquire", R"({"fair":true,"ttl_ms":10000,"wait_ms":25000})");
      std::lock_guard<std::mutex> lock(mu);
      if (r.status != 200) {
        failures.push_back(std::to_string(i) + ": " + std::to_string(r.status) + " " + r.body);
        return;
      }
      const auto granted = HoldLog::now();
      granted_order.push_back(i);
      holds.record("line", granted, HoldLog::now(), HoldMode::kExclusive,
                   "waiter " + std::to_string(i));
      // Released under the mutex: the next grant cannot be recorded before this one.
      auto rel = c.post("/v1/locks/line/release", json{{"owner", ownerOf(r)}}.dump());
      if (rel.status != 200) failures.push_back("release " + rel.body);
    });
    // The next one arrives only once this one has its place in Redis.
    ASSERT_TRUE(pollUntil([&] { return queued(redis, "line") == i + 1; })) << "waiter " << i;
  }
  // A single try does not jump the queue, even on a sidecar with no local waiters left.
  EXPECT_EQ(ca.post("/v1/locks/line/acquire", R"({"fair":true})").status, 409);
  holds.record("line", holder_granted, HoldLog::now(), HoldMode::kExclusive, "the first holder");
  EXPECT_EQ(ca.post("/v1/locks/line/release", json{{"owner", ownerOf(holder)}}.dump()).status, 200);
  for (auto& t : waiters) t.join();
  EXPECT_TRUE(failures.empty()) << failures.front();
  const ExclusionReport report = checkExclusion(holds.holds());
  EXPECT_TRUE(report.violations.empty()) << report.violations.front();
  std::vector<int> expected;
  for (int i = 0; i < kWaiters; ++i) expected.push_back(i);
  EXPECT_EQ(granted_order, expected) << "granted in arrival order across both sidecars";
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{line}:fair", "sidelock:{line}:fair:claims"}), "0")
      << "an empty queue leaves no keys";
}

// The queue is: a client that will hang up, a waiter on a sidecar that will be killed, and a
// live waiter. The client that leaves withdraws at once; the dead sidecar's waiter keeps its
// place only until its claim lapses (about two retry intervals and a second); the live waiter
// then gets the lock, instead of waiting forever.
TEST_F(FairLockTwoSidecars, ALeavingWaiterAndADeadSidecarDoNotStallTheQueue) {
  auto& doomed = b;
  auto holder = ca.post("/v1/locks/till/acquire", R"({"ttl_ms":30000})");
  ASSERT_EQ(holder.status, 200) << holder.body;

  HttpClient leaving = HttpClient::tcp(a->port());
  leaving.sendRequest("POST", "/v1/locks/till/acquire", R"({"fair":true,"wait_ms":30000})");
  ASSERT_TRUE(pollUntil([&] { return queued(redis, "till") == 1; }));
  HttpClient on_doomed = HttpClient::tcp(doomed->port());
  on_doomed.sendRequest("POST", "/v1/locks/till/acquire", R"({"fair":true,"wait_ms":30000})");
  ASSERT_TRUE(pollUntil([&] { return queued(redis, "till") == 2; }));
  std::atomic<int> live_status{0};
  std::atomic<int64_t> live_granted_ms{-1};
  const auto t0 = Clock::now();
  std::thread live([&] {
    HttpClient c = HttpClient::tcp(a->port());
    auto r = c.post("/v1/locks/till/acquire", R"({"fair":true,"ttl_ms":5000,"wait_ms":20000})");
    live_granted_ms = msSince(t0);
    live_status = r.status;
  });
  ASSERT_TRUE(pollUntil([&] { return queued(redis, "till") == 3; }));

  leaving.close();
  EXPECT_TRUE(pollUntil([&] { return queued(redis, "till") == 2; }))
      << "the client that left withdrew its place at once";
  doomed->kill();  // SIGKILL: its waiter's place is never given up, only not renewed
  const auto released_at = Clock::now();
  EXPECT_EQ(ca.post("/v1/locks/till/release", json{{"owner", ownerOf(holder)}}.dump()).status, 200);
  live.join();
  ASSERT_EQ(live_status.load(), 200);
  const int64_t stalled_ms = msSince(released_at);
  EXPECT_LT(stalled_ms, 6000) << "the dead sidecar's waiter dropped out when its claim lapsed";
  std::cout << "[fair_lock] the live waiter got the lock " << stalled_ms
            << " ms after the release, behind a dead sidecar's waiter\n";
  EXPECT_EQ(a->stop(), 0) << a->logs();
}

TEST(FairLockTest, SemanticsAndRefusals) {
  RedisServer redis;
  auto s = sidecarOnRedis(redis.address());
  HttpClient c = HttpClient::tcp(s->port());
  auto g = c.post("/v1/locks/f/acquire", R"({"fair":true,"ttl_ms":20000})");
  ASSERT_EQ(g.status, 200) << g.body;
  EXPECT_EQ(c.post("/v1/locks/f/acquire", "{}").status, 409) << "the fair holder holds the mutex";
  auto ext = c.post("/v1/locks/f/extend", json{{"owner", ownerOf(g)}, {"ttl_ms", 30000}}.dump());
  EXPECT_EQ(ext.status, 200) << ext.body;
  auto listed = json::parse(c.get("/v1/locks").body);
  ASSERT_EQ(listed["leases"].size(), 1u);
  EXPECT_EQ(listed["leases"][0]["name"], "fair/f");
  EXPECT_EQ(c.post("/v1/locks/f/release", json{{"owner", ownerOf(g)}}.dump()).status, 200);
  EXPECT_TRUE(json::parse(c.get("/v1/locks").body)["leases"].empty());
  for (const char* bad :
       {R"({"fair":1})", R"({"fair":true,"mode":"shared"})", R"({"fair":true,"reentrant":true})"}) {
    auto r = c.post("/v1/locks/f/acquire", bad);
    EXPECT_EQ(r.status, 400) << bad << ": " << r.body;
  }
  EXPECT_EQ(s->stop(), 0) << s->logs();

  RedlockSidecar redlock(3);
  HttpClient rc = HttpClient::tcp(redlock.sidecar->port());
  auto refused = rc.post("/v1/locks/f/acquire", R"({"fair":true})");
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_NE(refused.body.find("redlock"), std::string::npos) << refused.body;
  EXPECT_EQ(redlock.sidecar->stop(), 0) << redlock.sidecar->logs();
}

}  // namespace
}  // namespace sidelock::testing
