// Semaphores (issue 13): up to `limit` permits at once, each with its own TTL, over
// /v1/semaphores/{name}/... Real sidecars on a real redis-server. The flash-sale test checks the
// limit with an observer of its own (the clients' grant-to-release intervals), never the
// sidecar's counters.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
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

std::string permitOf(const HttpResponse& r) { return json::parse(r.body)["permit"]; }

// Two sidecars `a` and `b` on one `redis`, clients `ca` and `cb`; both must stop cleanly.
class SemaphoreTwoSidecars : public TwoSidecarsOnOneRedis {};

// The flash sale: 3 checkout slots, 24 shoppers on two sidecars, each taking a slot 8 times.
// Nobody may ever see a fourth slot in use, every shopper gets through, and waiting shoppers
// are woken by releases (not a spin loop): the sale ends long before its budget.
TEST_F(SemaphoreTwoSidecars, FlashSaleNeverExceedsTheLimit) {
  constexpr int kLimit = 3;
  constexpr int kShoppersPerSidecar = 12;
  constexpr int kRounds = 8;

  std::mutex mu;
  HoldLog holds;  // each permit as its shopper saw it: grant to release
  std::atomic<int> failures{0};
  std::string first_failure;
  std::vector<std::thread> shoppers;
  const auto t0 = Clock::now();
  for (int s = 0; s < 2 * kShoppersPerSidecar; ++s) {
    const int port = s % 2 == 0 ? a->port() : b->port();
    shoppers.emplace_back([&, port] {
      HttpClient c = HttpClient::tcp(port);
      for (int i = 0; i < kRounds; ++i) {
        auto r = c.post("/v1/semaphores/checkout/acquire",
                        R"({"limit":3,"ttl_ms":10000,"wait_ms":20000})");
        if (r.status != 200) {
          std::lock_guard<std::mutex> lock(mu);
          if (failures++ == 0) first_failure = std::to_string(r.status) + " " + r.body;
          continue;
        }
        const auto granted = HoldLog::now();
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
        holds.record("checkout", granted, HoldLog::now(), HoldMode::kShared);
        auto rel = c.post("/v1/semaphores/checkout/release", json{{"permit", permitOf(r)}}.dump());
        if (rel.status != 200) {
          std::lock_guard<std::mutex> lock(mu);
          if (failures++ == 0) first_failure = "release " + std::to_string(rel.status) + rel.body;
        }
      }
    });
  }
  for (auto& t : shoppers) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(failures.load(), 0) << first_failure;
  ASSERT_EQ(holds.size(), 2u * kShoppersPerSidecar * kRounds);
  const ExclusionReport report = checkExclusion(holds.holds(), {.shared_limit = kLimit, .excused = nullptr});
  EXPECT_TRUE(report.violations.empty())
      << "the observer saw more slots in use than the limit: " << report.violations.front();
  const int most = report.most_at_once;
  EXPECT_GE(most, 2) << "the permits were used side by side at all";
  EXPECT_LT(seconds, 20.0);
  std::cout << "[semaphore] " << 2 * kShoppersPerSidecar * kRounds << " checkouts through "
            << kLimit << " slots on 2 sidecars in " << seconds << " s, at most " << most
            << " in use\n";
  auto state = HttpClient::tcp(a->port()).get("/v1/semaphores/checkout");
  EXPECT_EQ(json::parse(state.body)["used"], 0);
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{checkout}:sem"}), "0") << "an empty semaphore is gone";
}

TEST(SemaphoreTest, LimitsPermitsInspectAndBadInput) {
  RedisServer redis;
  auto s = sidecarOnRedis(redis.address());
  HttpClient c = HttpClient::tcp(s->port());
  auto p1 = c.post("/v1/semaphores/pool/acquire", R"({"limit":2,"ttl_ms":20000})");
  ASSERT_EQ(p1.status, 200) << p1.body;
  const json g1 = json::parse(p1.body);
  EXPECT_EQ(g1["name"], "pool");
  EXPECT_FALSE(g1.contains("owner"));
  auto p2 = c.post("/v1/semaphores/pool/acquire", R"({"limit":2,"ttl_ms":20000})");
  ASSERT_EQ(p2.status, 200) << p2.body;
  EXPECT_GT(json::parse(p2.body)["token"].get<uint64_t>(), g1["token"].get<uint64_t>());
  EXPECT_NE(permitOf(p2), permitOf(p1));

  auto full = c.post("/v1/semaphores/pool/acquire", R"({"limit":2})");
  EXPECT_EQ(full.status, 409) << full.body;
  EXPECT_EQ(json::parse(full.body)["error"], "no_permits");
  EXPECT_GT(json::parse(full.body)["retry_after_ms"].get<int64_t>(), 10'000);
  auto mismatch = c.post("/v1/semaphores/pool/acquire", R"({"limit":5})");
  EXPECT_EQ(mismatch.status, 409) << mismatch.body;
  EXPECT_EQ(json::parse(mismatch.body)["error"], "limit_mismatch");

  auto state = c.get("/v1/semaphores/pool");
  ASSERT_EQ(state.status, 200) << state.body;
  EXPECT_EQ(json::parse(state.body)["limit"], 2);
  EXPECT_EQ(json::parse(state.body)["used"], 2);
  EXPECT_EQ(state.body.find(permitOf(p1)), std::string::npos) << "permits are never shown";

  // A mutex of the same name is another lock.
  EXPECT_EQ(c.post("/v1/locks/pool/acquire", "{}").status, 200);

  auto extended = c.post("/v1/semaphores/pool/extend",
                         json{{"permit", permitOf(p1)}, {"ttl_ms", 30'000}}.dump());
  EXPECT_EQ(extended.status, 200) << extended.body;
  EXPECT_EQ(c.post("/v1/semaphores/pool/release", json{{"permit", permitOf(p1)}}.dump()).status,
            200);
  EXPECT_EQ(c.post("/v1/semaphores/pool/release", json{{"permit", permitOf(p1)}}.dump()).status,
            404);
  EXPECT_EQ(c.post("/v1/semaphores/pool/extend", json{{"permit", permitOf(p1)}}.dump()).status,
            404);
  EXPECT_EQ(json::parse(c.get("/v1/semaphores/pool").body)["used"], 1);
  EXPECT_EQ(c.post("/v1/semaphores/pool/release", json{{"permit", permitOf(p2)}}.dump()).status,
            200);
  // Empty: the next acquire may choose another limit.
  EXPECT_EQ(json::parse(c.get("/v1/semaphores/pool").body)["limit"], 0);
  EXPECT_EQ(c.post("/v1/semaphores/pool/acquire", R"({"limit":5})").status, 200);

  for (const char* bad : {R"({})", R"({"limit":0})", R"({"limit":"2"})",
                          R"({"limit":2,"owner":"x"})", R"({"limit":2,"hold":"forever"})"}) {
    auto r = c.post("/v1/semaphores/other/acquire", bad);
    EXPECT_EQ(r.status, 400) << bad << ": " << r.body;
  }
  EXPECT_EQ(c.post("/v1/semaphores/other/release", "{}").status, 400);
  EXPECT_EQ(c.post("/v1/semaphores/other/release", R"({"permit":"has space"})").status, 400);
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{other}:sem"}), "0") << "bad input changes nothing";
  EXPECT_EQ(s->stop(), 0) << s->logs();
}

// A holder that crashes (SIGKILL: nothing released) blocks its permit only until the permit's
// TTL; a waiter on another sidecar gets it then. A stream hold gives its permit back when the
// client hangs up.
TEST_F(SemaphoreTwoSidecars, CrashedHoldersPermitExpiresAndStreamsGiveBack) {
  auto& crashing = a;
  auto& other = b;
  HttpClient c = HttpClient::tcp(crashing->port());
  ASSERT_EQ(c.post("/v1/semaphores/one/acquire", R"({"limit":1,"ttl_ms":600})").status, 200);
  crashing->kill();
  HttpClient o = HttpClient::tcp(other->port());
  const auto t0 = Clock::now();
  auto next = o.post("/v1/semaphores/one/acquire", R"({"limit":1,"ttl_ms":5000,"wait_ms":5000})");
  const int64_t waited_ms = msSince(t0);
  ASSERT_EQ(next.status, 200) << next.body;
  EXPECT_LT(waited_ms, 3000) << "granted once the crashed holder's permit expired";
  EXPECT_EQ(o.post("/v1/semaphores/one/release", json{{"permit", permitOf(next)}}.dump()).status,
            200);

  HttpClient stream = HttpClient::tcp(other->port());
  stream.sendRequest("POST", "/v1/semaphores/one/acquire",
                     R"({"limit":1,"ttl_ms":2000,"hold":"stream"})");
  auto head = stream.readStreamHead();
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(o.post("/v1/semaphores/one/acquire", R"({"limit":1})").status, 409);
  stream.close();
  ASSERT_TRUE(pollUntil([&] { return json::parse(o.get("/v1/semaphores/one").body)["used"] == 0; }))
      << "the stream's permit came back when its client left";
  EXPECT_EQ(other->stop(), 0) << other->logs();
}

// Safe retries: a retried acquire (same request_id) gets the same permit, not a second one; a
// retried release gets the first answer.
TEST(SemaphoreTest, RequestIdRetriesGetTheSamePermitAndTheFirstAnswer) {
  RedisServer redis;
  auto s = sidecarOnRedis(redis.address());
  HttpClient c = HttpClient::tcp(s->port());
  const std::string body = R"({"limit":2,"ttl_ms":20000,"request_id":"sale-7f3a"})";
  auto first = c.post("/v1/semaphores/pool/acquire", body);
  ASSERT_EQ(first.status, 200) << first.body;
  auto retry = c.post("/v1/semaphores/pool/acquire", body);
  ASSERT_EQ(retry.status, 200) << retry.body;
  EXPECT_EQ(permitOf(retry), permitOf(first));
  EXPECT_EQ(json::parse(retry.body)["token"], json::parse(first.body)["token"]);
  EXPECT_EQ(json::parse(c.get("/v1/semaphores/pool").body)["used"], 1) << "one permit, not two";
  auto other = c.post("/v1/semaphores/pool/acquire", R"({"limit":2,"request_id":"sale-other"})");
  EXPECT_NE(permitOf(other), permitOf(first)) << "another request_id is another permit";

  const std::string release = json{{"permit", permitOf(first)}, {"request_id", "rel-1"}}.dump();
  EXPECT_EQ(c.post("/v1/semaphores/pool/release", release).status, 200);
  auto again = c.post("/v1/semaphores/pool/release", release);
  EXPECT_EQ(again.status, 200) << "the retry gets the first answer: " << again.body;
  EXPECT_EQ(c.post("/v1/semaphores/pool/release", json{{"permit", permitOf(first)}}.dump()).status,
            404)
      << "without request_id a second release finds nothing";
  // After the release, the acquire's retry is a new acquire (the remembered permit is gone).
  auto after = c.post("/v1/semaphores/pool/acquire", body);
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_NE(permitOf(after), permitOf(first));
  EXPECT_EQ(c.post("/v1/semaphores/pool/acquire", R"({"limit":2,"hold":"stream","request_id":"x"})")
                .status,
            400);
  EXPECT_EQ(s->stop(), 0) << s->logs();
}

TEST(SemaphoreTest, RedlockRefusesSemaphores) {
  RedlockSidecar redlock(3);
  SidecarProcess& s = *redlock.sidecar;
  HttpClient c = HttpClient::tcp(s.port());
  auto r = c.post("/v1/semaphores/x/acquire", R"({"limit":2})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("redlock"), std::string::npos) << r.body;
  for (auto& n : redlock.nodes) EXPECT_EQ(n->cli({"EXISTS", "sidelock:{x}:sem"}), "0");
  EXPECT_EQ(s.stop(), 0) << s.logs();
}

}  // namespace
}  // namespace sidelock::testing
