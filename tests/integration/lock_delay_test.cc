// Lock-delay (issue 20, Consul's LockDelay): a lease acquired with lock_delay_ms that ends
// without a release (expiry, operator force release) keeps every sidecar out for that long, and a
// queued waiter is granted when it ends; a clean release has no delay; bad values are refused.
// Real redis-server, real sidecars.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/fencing.h"
#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/redlock_sidecar.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kAdminToken = "AdminToken-0123456789abcdefghijklmnop";

std::unique_ptr<SidecarProcess> sidecarWithAdmin(const std::string& backend_yaml, int admin_port) {
  return std::make_unique<SidecarProcess>(SidecarProcess::Options{
      backend_yaml + "auth:\n  admin_tokens_env: SIDELOCK_TEST_ADMIN_TOKENS\n",
      {std::string("SIDELOCK_TEST_ADMIN_TOKENS=") + kAdminToken},
      /*wait_ready=*/true,
      "  admin: \"127.0.0.1:" + std::to_string(admin_port) + "\"\n"});
}

int64_t msSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

class LockDelayTest : public ::testing::Test {
 protected:
  RedisServer redis;
  const int admin_a = pickFreePort();
  std::unique_ptr<SidecarProcess> a = sidecarWithAdmin(redisBackendYaml(redis.address()), admin_a);
  std::unique_ptr<SidecarProcess> b =
      sidecarWithAdmin(redisBackendYaml(redis.address()), pickFreePort());
  HttpClient ca = HttpClient::tcp(a->port());
  HttpClient cb = HttpClient::tcp(b->port());
};

TEST_F(LockDelayTest, AfterAnExpiryNobodyGetsItForTheDelayThenTheWaiterAtOnce) {
  auto held = ca.post("/v1/locks/job/acquire", R"({"ttl_ms":300,"lock_delay_ms":1500})");
  ASSERT_EQ(held.status, 200) << held.body;
  const auto granted_at = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the lease expired unreleased
  for (HttpClient* c : {&ca, &cb}) {
    auto busy = c->post("/v1/locks/job/acquire", R"({"ttl_ms":5000})");
    ASSERT_EQ(busy.status, 409) << busy.body;
    const json j = json::parse(busy.body);
    EXPECT_EQ(j["reason"], "lock_delay") << busy.body;
    EXPECT_GT(j["retry_after_ms"].get<int64_t>(), 0);
    EXPECT_LE(j["retry_after_ms"].get<int64_t>(), 1500);
  }
  EXPECT_EQ(json::parse(cb.get("/v1/locks/job").body)["held"], false);
  EXPECT_NE(cb.get("/metrics").body.find("sidelock_lock_delay_refusals_total 1"),
            std::string::npos);
  // A waiter on B is granted when the delay ends (expiry at ~300 ms + 1500 ms), not later.
  auto waited = cb.post("/v1/locks/job/acquire", R"({"ttl_ms":5000,"wait_ms":5000})");
  const int64_t at = msSince(granted_at);
  ASSERT_EQ(waited.status, 200) << waited.body;
  EXPECT_GE(at, 1700) << "granted inside the delay";
  EXPECT_LT(at, 1800 + 1000) << "the waiter's retry is timed to the delay's end";
  EXPECT_TRUE(isNextToken(json::parse(held.body)["token"].get<uint64_t>(),
                          json::parse(waited.body)["token"].get<uint64_t>(),
                          clockUsOf(redis.cli({"TIME"}))))
      << waited.body;
  EXPECT_EQ(
      metricValue(ca.get("/metrics").body, "sidelock_lock_delays_applied_total{cause=\"expired\"}"),
      1)
      << "A's lease expired with its delay";
  // The new lease asked for no delay: it keeps no delay key (none per held lock).
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{job}:delay"}), "0");
}

TEST_F(LockDelayTest, ACleanReleaseHasNoDelayAndExtendsKeepIt) {
  auto held = ca.post("/v1/locks/job/acquire", R"({"ttl_ms":400,"lock_delay_ms":5000})");
  ASSERT_EQ(held.status, 200) << held.body;
  const std::string owner = json::parse(held.body)["owner"];
  // Extended past its first TTL, the lease still holds and the delay moves with it.
  auto ext = ca.post("/v1/locks/job/extend", json{{"owner", owner}, {"ttl_ms", 2000}}.dump());
  ASSERT_EQ(ext.status, 200) << ext.body;
  const int port_b = b->port();
  auto waiter = std::async(std::launch::async, [port_b] {
    HttpClient w = HttpClient::tcp(port_b);
    return w.request("POST", "/v1/locks/job/acquire", R"({"ttl_ms":5000,"wait_ms":8000})", 10'000);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // past the first TTL: still held
  EXPECT_EQ(json::parse(cb.get("/v1/locks/job").body)["held"], true);
  const auto released_at = Clock::now();
  auto rel = ca.post("/v1/locks/job/release", json{{"owner", owner}}.dump());
  ASSERT_EQ(rel.status, 200) << rel.body;
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(9)), std::future_status::ready);
  auto granted = waiter.get();
  ASSERT_EQ(granted.status, 200) << granted.body;
  EXPECT_LT(msSince(released_at), 1000) << "a clean release wakes the next waiter at once";
}

TEST_F(LockDelayTest, AForceReleaseStartsTheDelay) {
  auto held = ca.post("/v1/locks/job/acquire", R"({"ttl_ms":30000,"lock_delay_ms":1200})");
  ASSERT_EQ(held.status, 200) << held.body;
  HttpClient admin = HttpClient::tcp(admin_a);
  admin.sendRaw(std::string("POST /admin/v1/locks/job/release HTTP/1.1\r\nHost: localhost\r\n") +
                "Content-Length: 0\r\nAuthorization: Bearer " + kAdminToken + "\r\n\r\n");
  auto forced = admin.readResponse();
  ASSERT_TRUE(forced.has_value());
  ASSERT_EQ(forced->status, 200) << forced->body;
  const auto forced_at = Clock::now();
  auto busy = cb.post("/v1/locks/job/acquire", R"({"ttl_ms":5000})");
  ASSERT_EQ(busy.status, 409) << busy.body;
  EXPECT_EQ(json::parse(busy.body)["reason"], "lock_delay");
  auto waited = cb.post("/v1/locks/job/acquire", R"({"ttl_ms":5000,"wait_ms":5000})");
  ASSERT_EQ(waited.status, 200) << waited.body;
  EXPECT_GE(msSince(forced_at), 1100);
  EXPECT_EQ(
      metricValue(ca.get("/metrics").body, "sidelock_lock_delays_applied_total{cause=\"forced\"}"),
      1);
}

// Readers (mode: shared) are held back by a writer's lock-delay like writers: a writer's lease
// that expired unreleased keeps readers out for its delay (409 lock_delay), a waiting reader is
// granted when it ends; after a clean release a reader gets in at once. `writer_side` takes the
// writer's lease, `reader_side` (another sidecar where the backend has one) asks as a reader.
void readerWaitsOutTheDelay(HttpClient& writer_side, HttpClient& reader_side) {
  ASSERT_EQ(writer_side.post("/v1/locks/rw/acquire", R"({"ttl_ms":300,"lock_delay_ms":1200})").status,
            200);
  const auto granted_at = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(450));  // expired unreleased
  auto busy = reader_side.post("/v1/locks/rw/acquire", R"({"mode":"shared","ttl_ms":5000})");
  ASSERT_EQ(busy.status, 409) << busy.body;
  EXPECT_EQ(json::parse(busy.body)["reason"], "lock_delay") << busy.body;
  const int64_t left = json::parse(busy.body)["retry_after_ms"].get<int64_t>();
  EXPECT_GT(left, 0) << busy.body;
  EXPECT_LE(left, 1200) << busy.body;
  auto waited =
      reader_side.post("/v1/locks/rw/acquire", R"({"mode":"shared","ttl_ms":5000,"wait_ms":5000})");
  const int64_t at = msSince(granted_at);
  ASSERT_EQ(waited.status, 200) << waited.body;
  EXPECT_GE(at, 1400) << "a reader granted inside the delay";
  EXPECT_LT(at, 1500 + 1000) << "the reader's retry is timed to the delay's end";

  auto clean = writer_side.post("/v1/locks/rc/acquire", R"({"ttl_ms":30000,"lock_delay_ms":5000})");
  ASSERT_EQ(clean.status, 200) << clean.body;
  const std::string owner = json::parse(clean.body)["owner"];
  ASSERT_EQ(writer_side.post("/v1/locks/rc/release", json{{"owner", owner}}.dump()).status, 200);
  auto reader = reader_side.post("/v1/locks/rc/acquire", R"({"mode":"shared","ttl_ms":5000})");
  EXPECT_EQ(reader.status, 200) << "a clean release has no delay: " << reader.body;
}

TEST_F(LockDelayTest, AReaderWaitsOutAWritersDelay) { readerWaitsOutTheDelay(ca, cb); }

TEST(LockDelayMemoryTest, AReaderWaitsOutAWritersDelay) {
  SidecarProcess sidecar({"backend:\n  type: memory\n", {}, /*wait_ready=*/true});
  HttpClient c = HttpClient::tcp(sidecar.port());
  readerWaitsOutTheDelay(c, c);
}

// A multi-lock's one-step grant (acquire_all.lua) honours a running delay like an acquire: its
// members take no delay of their own.
TEST_F(LockDelayTest, AMultiLockWaitsForAMembersDelay) {
  ASSERT_EQ(ca.post("/v1/locks/m2/acquire", R"({"ttl_ms":200,"lock_delay_ms":1200})").status, 200);
  const auto granted_at = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(350));  // expired, its delay runs
  auto busy = cb.post("/v1/multilocks/acquire", R"({"names":["m1","m2"],"ttl_ms":5000})");
  ASSERT_EQ(busy.status, 409) << busy.body;
  EXPECT_GT(json::parse(busy.body)["retry_after_ms"].get<int64_t>(), 0) << busy.body;
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{m1}"}), "0") << "all or none";
  auto waited =
      cb.post("/v1/multilocks/acquire", R"({"names":["m1","m2"],"ttl_ms":5000,"wait_ms":5000})");
  ASSERT_EQ(waited.status, 200) << waited.body;
  EXPECT_GE(msSince(granted_at), 1300) << "granted inside the delay";
}

// Redlock: every node keeps its own delay key (the same scripts); a majority of nodes in their
// delay refuses the grant, and the 409 says lock_delay.
TEST(LockDelayRedlockTest, AMajorityOfNodesInTheirDelayRefusesTheGrant) {
  RedlockSidecar set(3);
  HttpClient c = HttpClient::tcp(set.sidecar->port());
  ASSERT_EQ(c.post("/v1/locks/job/acquire", R"({"ttl_ms":300,"lock_delay_ms":1200})").status, 200);
  const auto granted_at = Clock::now();
  // A delay key on each node that granted: at least a majority (the grant answers once a
  // majority granted; under load a node still connecting may miss it).
  auto delayed_nodes = [&] {
    size_t n = 0;
    for (const auto& node : set.nodes) n += node->cli({"GET", "sidelock:{job}:delay"}) == "1200";
    return n;
  };
  EXPECT_GE(delayed_nodes(), set.nodes.size() / 2 + 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  auto busy = c.post("/v1/locks/job/acquire", R"({"ttl_ms":1000})");
  ASSERT_EQ(busy.status, 409) << busy.body;
  EXPECT_EQ(json::parse(busy.body)["reason"], "lock_delay") << busy.body;
  auto waited = c.post("/v1/locks/job/acquire", R"({"ttl_ms":1000,"wait_ms":5000})");
  ASSERT_EQ(waited.status, 200) << waited.body;
  EXPECT_GE(msSince(granted_at), 1400) << "granted inside the delay";
  EXPECT_EQ(set.sidecar->stop(), 0) << set.sidecar->logs();
}

TEST(LockDelayRedlockTest, AReaderWaitsOutAWritersDelay) {
  RedlockSidecar set(3);
  HttpClient c = HttpClient::tcp(set.sidecar->port());
  readerWaitsOutTheDelay(c, c);
  EXPECT_EQ(set.sidecar->stop(), 0) << set.sidecar->logs();
}

TEST_F(LockDelayTest, BadValuesAreRefusedAndChangeNothing) {
  for (const char* body : {R"({"lock_delay_ms":-1})", R"({"lock_delay_ms":60001})",
                           R"({"lock_delay_ms":"5"})", R"({"lock_delay_ms":10,"mode":"shared"})"}) {
    auto r = ca.post("/v1/locks/job/acquire", body);
    EXPECT_EQ(r.status, 400) << body << " " << r.body;
    EXPECT_NE(r.body.find("lock_delay_ms"), std::string::npos) << r.body;
  }
  EXPECT_EQ(json::parse(ca.get("/v1/locks/job").body)["held"], false);
  EXPECT_EQ(redis.cli({"DBSIZE"}), "0") << "nothing written";
  // 0 is the default: no delay after an expiry.
  ASSERT_EQ(ca.post("/v1/locks/job/acquire", R"({"ttl_ms":200,"lock_delay_ms":0})").status, 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  EXPECT_EQ(cb.post("/v1/locks/job/acquire", R"({"ttl_ms":1000})").status, 200);
}

}  // namespace
}  // namespace sidelock::testing
