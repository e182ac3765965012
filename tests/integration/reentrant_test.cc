// Reentrant locks (issue 13): `"reentrant": true` on acquire by the owner of a lease it holds takes
// one more hold (same token, TTL never shortened); each release gives back one hold and the lock is
// freed at zero; a plain re-acquire by the same owner stays 409. Real sidecars on a real
// redis-server, checked from outside: the HTTP answers, what Redis holds, and another sidecar's
// view (it must not get the lock until the last hold is given back).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/redlock_sidecar.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;

std::unique_ptr<SidecarProcess> sidecarOn(const RedisServer& redis) {
  return sidecarOnRedis(redis.address());
}

std::string ownerBody(const std::string& owner, std::string extra = "") {
  return R"({"owner":")" + owner + "\"" + extra + "}";
}

TEST(ReentrantTest, HoldsAreCountedAndTheLockIsFreedAtZero) {
  RedisServer redis;
  auto s = sidecarOn(redis);
  auto other = sidecarOn(redis);
  HttpClient c = HttpClient::tcp(s->port());
  HttpClient o = HttpClient::tcp(other->port());

  auto first = c.post("/v1/locks/tree/acquire", R"({"ttl_ms":20000,"reentrant":true})");
  ASSERT_EQ(first.status, 200) << first.body;
  const json grant = json::parse(first.body);
  const std::string owner = grant["owner"];
  EXPECT_EQ(grant["holds"], 1);

  // Without "reentrant" the holder itself is refused: a mutex does not re-enter by accident. The
  // 409 says so, rather than "held by another owner" (issue 22).
  auto plain = c.post("/v1/locks/tree/acquire", ownerBody(owner));
  EXPECT_EQ(plain.status, 409);
  EXPECT_EQ(json::parse(plain.body).value("reason", ""), "held_by_you") << plain.body;
  EXPECT_NE(json::parse(plain.body)
                .value("message", "")
                .find(R"(this owner holds the lock already; acquire with "reentrant": true)"),
            std::string::npos)
      << plain.body;

  // Re-entered twice, with a shorter TTL the second time: same token, TTL never shortened.
  auto second = c.post("/v1/locks/tree/acquire",
                       ownerBody(owner, R"(,"ttl_ms":30000,"reentrant":true,"wait_ms":5000)"));
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(json::parse(second.body)["token"], grant["token"]);
  EXPECT_EQ(json::parse(second.body)["holds"], 2);
  auto third =
      c.post("/v1/locks/tree/acquire", ownerBody(owner, R"(,"ttl_ms":1000,"reentrant":true)"));
  ASSERT_EQ(third.status, 200) << third.body;
  EXPECT_EQ(json::parse(third.body)["holds"], 3);
  EXPECT_GT(json::parse(third.body)["ttl_ms"].get<int64_t>(), 20'000);
  EXPECT_GT(std::stoll(redis.cli({"PTTL", "sidelock:{tree}"})), 20'000);

  // A semaphore of the same name grants from its own counter: the re-entry's token stays the
  // lease's (review finding: a shared counter handed the re-entry the semaphore's token).
  ASSERT_EQ(o.post("/v1/semaphores/tree/acquire", R"({"limit":1})").status, 200);
  auto after_sem =
      c.post("/v1/locks/tree/acquire", ownerBody(owner, R"(,"ttl_ms":20000,"reentrant":true)"));
  ASSERT_EQ(after_sem.status, 200) << after_sem.body;
  EXPECT_EQ(json::parse(after_sem.body)["token"], grant["token"]);
  ASSERT_EQ(c.post("/v1/locks/tree/release", ownerBody(owner)).status, 200);

  // Re-entry through the other sidecar counts in the same lease (the count lives in Redis).
  auto elsewhere =
      o.post("/v1/locks/tree/acquire", ownerBody(owner, R"(,"reentrant":true,"ttl_ms":20000)"));
  ASSERT_EQ(elsewhere.status, 200) << elsewhere.body;
  EXPECT_EQ(json::parse(elsewhere.body)["holds"], 4);
  EXPECT_EQ(json::parse(elsewhere.body)["token"], grant["token"]);
  // Somebody else is still refused, by both sidecars; the holder without "reentrant" too.
  auto intruder = o.post("/v1/locks/tree/acquire", R"({"reentrant":true})");
  EXPECT_EQ(intruder.status, 409);
  EXPECT_EQ(json::parse(intruder.body).value("reason", ""), "held") << intruder.body;
  EXPECT_NE(intruder.body.find("held by another owner"), std::string::npos) << intruder.body;
  EXPECT_EQ(
      json::parse(o.post("/v1/locks/tree/acquire", ownerBody(owner)).body).value("reason", ""),
      "held_by_you")
      << "a re-entered lease (\"owner holds\" in Redis) is still told apart";
  EXPECT_EQ(c.post("/v1/locks/tree/acquire", R"({"owner":"intruder","reentrant":true})").status,
            409);

  // A hold given back through the other sidecar (which recorded the lease with its re-entry):
  // still held, with the backend's count. (Taken again right after: the count below stays.)
  auto through_other = o.post("/v1/locks/tree/release", ownerBody(owner));
  ASSERT_EQ(through_other.status, 200) << through_other.body;
  EXPECT_EQ(json::parse(through_other.body),
            json::parse(R"({"released":true,"held":true,"holds":3})"));
  ASSERT_EQ(o.post("/v1/locks/tree/acquire", ownerBody(owner, R"(,"reentrant":true)")).status, 200);

  // Extend keeps the holds.
  auto extended = c.post("/v1/locks/tree/extend", ownerBody(owner, R"(,"ttl_ms":25000)"));
  ASSERT_EQ(extended.status, 200) << extended.body;

  // Holds come back one at a time; the lock stays held until the last.
  for (int left = 3; left >= 1; --left) {
    auto r = c.post("/v1/locks/tree/release", ownerBody(owner));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["holds"], left) << r.body;
    EXPECT_EQ(json::parse(r.body)["held"], true) << r.body;
    auto state = o.get("/v1/locks/tree");
    EXPECT_EQ(json::parse(state.body)["held"], true) << "held with " << left << " holds left";
    EXPECT_EQ(o.post("/v1/locks/tree/acquire", R"({})").status, 409);
  }
  auto last = c.post("/v1/locks/tree/release", ownerBody(owner));
  ASSERT_EQ(last.status, 200) << last.body;
  EXPECT_EQ(json::parse(last.body), json::parse(R"({"released":true})"));
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{tree}"}), "0");
  EXPECT_EQ(c.post("/v1/locks/tree/release", ownerBody(owner)).status, 404);

  // Free: the next grant gets the next token.
  auto next = o.post("/v1/locks/tree/acquire", R"({})");
  ASSERT_EQ(next.status, 200) << next.body;
  EXPECT_GT(json::parse(next.body)["token"].get<uint64_t>(), grant["token"].get<uint64_t>());
  EXPECT_EQ(s->stop(), 0) << s->logs();
  EXPECT_EQ(other->stop(), 0) << other->logs();
}

// A waiter queued on the lock is not overtaken by the holder's re-entries and gets the lock once
// every hold is back (through the hand-off of the last release); a re-entry by the holder never
// queues behind it (it would wait for itself).
TEST(ReentrantTest, ReentryNeverWaitsBehindItsOwnWaiters) {
  RedisServer redis;
  auto s = sidecarOn(redis);
  HttpClient c = HttpClient::tcp(s->port());
  auto first = c.post("/v1/locks/q/acquire", R"({"ttl_ms":20000,"reentrant":true})");
  ASSERT_EQ(first.status, 200) << first.body;
  const std::string owner = json::parse(first.body)["owner"];

  HttpClient waiter = HttpClient::tcp(s->port());
  waiter.sendRequest("POST", "/v1/locks/q/acquire", R"({"wait_ms":20000})");
  ASSERT_TRUE(waitForWaiters(c, "q", 1));

  auto again =
      c.post("/v1/locks/q/acquire", ownerBody(owner, R"(,"reentrant":true,"wait_ms":10000)"));
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(json::parse(again.body)["holds"], 2);

  auto one = c.post("/v1/locks/q/release", ownerBody(owner));
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(json::parse(one.body)["holds"], 1);
  EXPECT_FALSE(waiter.readResponse(300)) << "the waiter must wait for the last hold";
  auto last = c.post("/v1/locks/q/release", ownerBody(owner));
  ASSERT_EQ(last.status, 200) << last.body;
  auto granted = waiter.readResponse(10'000);
  ASSERT_TRUE(granted);
  EXPECT_EQ(granted->status, 200) << granted->body;
  EXPECT_GT(json::parse(granted->body)["token"].get<uint64_t>(),
            json::parse(first.body)["token"].get<uint64_t>());
  EXPECT_EQ(s->stop(), 0) << s->logs();
}

// A sidecar that shuts down gives back every hold of the leases it holds (the lock is free at
// once, not at its TTL); auto_renew leases keep renewing while holds remain.
TEST(ReentrantTest, ShutdownGivesBackEveryHoldAndRenewalOutlivesAHold) {
  RedisServer redis;
  auto s = sidecarOn(redis);
  HttpClient c = HttpClient::tcp(s->port());
  auto first =
      c.post("/v1/locks/r/acquire", R"({"ttl_ms":600,"auto_renew":true,"reentrant":true})");
  ASSERT_EQ(first.status, 200) << first.body;
  const std::string owner = json::parse(first.body)["owner"];
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(
        c.post("/v1/locks/r/acquire", ownerBody(owner, R"(,"reentrant":true,"ttl_ms":600)")).status,
        200);
  }
  ASSERT_EQ(c.post("/v1/locks/r/release", ownerBody(owner)).status, 200);
  // Several TTLs later the lease (2 holds left) is still held: renewal went on.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(json::parse(c.get("/v1/locks/r").body)["held"], true);
  EXPECT_EQ(s->stop(), 0) << s->logs();
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{r}"}), "0") << "shutdown gave back both holds";
}

TEST(ReentrantTest, BadCombinationsAreRefused) {
  RedisServer redis;
  auto s = sidecarOn(redis);
  HttpClient c = HttpClient::tcp(s->port());
  auto stream = c.post("/v1/locks/x/acquire", R"({"reentrant":true,"hold":"stream"})");
  EXPECT_EQ(stream.status, 400) << stream.body;
  EXPECT_NE(stream.body.find("reentrant"), std::string::npos);
  auto not_bool = c.post("/v1/locks/x/acquire", R"({"reentrant":"yes"})");
  EXPECT_EQ(not_bool.status, 400) << not_bool.body;
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{x}"}), "0") << "a refused request changes nothing";
  EXPECT_EQ(s->stop(), 0) << s->logs();
}

// Redlock: every node would count holds on its own; refused with a clear 400, nothing held.
TEST(ReentrantTest, RedlockRefusesReentrantAcquires) {
  RedlockSidecar redlock(3);
  SidecarProcess& s = *redlock.sidecar;
  HttpClient c = HttpClient::tcp(s.port());
  auto r = c.post("/v1/locks/x/acquire", R"({"reentrant":true})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("redlock"), std::string::npos) << r.body;
  for (auto& n : redlock.nodes) EXPECT_EQ(n->cli({"EXISTS", "sidelock:{x}"}), "0");
  EXPECT_EQ(c.post("/v1/locks/x/acquire", R"({})").status, 200) << "plain locks still work";
  EXPECT_EQ(s.stop(), 0) << s.logs();
}

}  // namespace
}  // namespace sidelock::testing
