// Lock event streams (issue 20): GET /v1/locks/{name}/events on real sidecars over one real
// redis-server (and a lock's life on Sentinel, Cluster and Redlock at the end). Acquire, release,
// expiry and force release on sidecar A are seen in order by watchers on A and B, grants pushed
// (not left to the 1 s re-read; a multi-lock's for each name), with the holder; tokens never go
// back; a killed pub/sub link loses no event for longer than the catch-up re-read; bad input is
// refused.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/http_client.h"
#include "support/redis_cluster.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kAdminToken = "AdminToken-0123456789abcdefghijklmnop";

/// One event stream, read line by line; checks that tokens never go back.
class Watcher {
 public:
  Watcher(int port, const std::string& path) : client_(HttpClient::tcp(port)) {
    client_.sendRequest("GET", path);
    head_ = client_.readStreamHead(10000);
  }
  int status() const { return head_ ? head_->status : 0; }
  std::string contentType() const {
    if (!head_) return "";
    auto it = head_->headers.find("content-type");
    return it == head_->headers.end() ? "" : it->second;
  }
  std::optional<json> next(int timeout_ms = 5000) {
    std::optional<std::string> line = client_.readStreamLine(timeout_ms);
    if (!line) return std::nullopt;
    json e = json::parse(*line);
    const uint64_t token = e["token"];
    EXPECT_GE(token, last_token_) << "a token went back: " << *line;
    last_token_ = std::max(last_token_, token);
    return e;
  }

 private:
  HttpClient client_;
  std::optional<HttpResponse> head_;
  uint64_t last_token_ = 0;
};

HttpResponse adminPost(int port, const std::string& path) {
  HttpClient c = HttpClient::tcp(port);
  c.sendRaw("POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n" +
            "Authorization: Bearer " + kAdminToken + "\r\n\r\n");
  auto r = c.readResponse();
  return r ? *r : HttpResponse{};
}

/// A sidecar on `backend_yaml` with an admin listener on `admin_port`.
std::unique_ptr<SidecarProcess> startSidecar(const std::string& backend_yaml, int admin_port) {
  return std::make_unique<SidecarProcess>(SidecarProcess::Options{
      backend_yaml + "auth:\n  admin_tokens_env: SIDELOCK_TEST_ADMIN_TOKENS\n",
      {std::string("SIDELOCK_TEST_ADMIN_TOKENS=") + kAdminToken},
      /*wait_ready=*/true,
      "  admin: \"127.0.0.1:" + std::to_string(admin_port) + "\"\n"});
}

class LockEventsTest : public ::testing::Test {
 protected:
  std::unique_ptr<SidecarProcess> start(int admin_port) {
    return startSidecar(redisBackendYaml(redis.address()), admin_port);
  }

  /// A watcher of "orders" on b, past its first line, and a 2 s lease of "orders" taken through
  /// a, which it saw as `acquired` (granted_at_: just before the grant): the lease's token (0 if
  /// not granted, reported).
  uint64_t watchATwoSecondLease(std::unique_ptr<Watcher>& watcher);
  static int64_t msSince(Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
  }

  RedisServer redis;
  Clock::time_point granted_at_;
  const int admin_a = pickFreePort();
  std::unique_ptr<SidecarProcess> a = start(admin_a);
  std::unique_ptr<SidecarProcess> b = start(pickFreePort());
  HttpClient ca = HttpClient::tcp(a->port());
};

/// The next event of every watcher in `ws` is `type` with `token`.
void expectEverywhere(std::vector<Watcher*> ws, const std::string& type, uint64_t token,
                      int timeout_ms = 5000) {
  for (Watcher* w : ws) {
    std::optional<json> e = w->next(timeout_ms);
    ASSERT_TRUE(e.has_value()) << "no " << type << " event";
    EXPECT_EQ((*e)["event"], type) << e->dump();
    EXPECT_EQ((*e)["token"], token) << e->dump();
    EXPECT_EQ((*e)["name"], "orders");
  }
}

uint64_t LockEventsTest::watchATwoSecondLease(std::unique_ptr<Watcher>& watcher) {
  watcher = std::make_unique<Watcher>(b->port(), "/v1/locks/orders/events");
  EXPECT_TRUE(watcher->next().has_value());
  granted_at_ = Clock::now();
  HttpResponse r = ca.post("/v1/locks/orders/acquire", R"({"ttl_ms": 2000})");
  EXPECT_EQ(r.status, 200) << r.body;
  if (r.status != 200) return 0;
  const uint64_t token = json::parse(r.body)["token"];
  expectEverywhere({watcher.get()}, "acquired", token);
  return token;
}

/// Acquires "orders" through `ca`, then force-releases it through the admin listener on
/// `admin_port`: every watcher of `ws` sees `acquired`, then `forced`, with the lease's token.
void acquireThenForce(HttpClient& ca, int admin_port, const std::vector<Watcher*>& ws) {
  HttpResponse r = ca.post("/v1/locks/orders/acquire", R"({"ttl_ms": 30000})");
  ASSERT_EQ(r.status, 200) << r.body;
  const uint64_t token = json::parse(r.body)["token"];
  expectEverywhere(ws, "acquired", token);
  ASSERT_EQ(adminPost(admin_port, "/admin/v1/locks/orders/release").status, 200);
  expectEverywhere(ws, "forced", token);
}

TEST_F(LockEventsTest, AcquireReleaseExpireAndForceAreSeenInOrderOnEverySidecar) {
  Watcher on_a(a->port(), "/v1/locks/orders/events");
  Watcher on_b(b->port(), "/v1/locks/orders/events");
  ASSERT_EQ(on_a.status(), 200);
  ASSERT_EQ(on_b.status(), 200);
  EXPECT_EQ(on_a.contentType(), "application/x-ndjson");
  for (Watcher* w : {&on_a, &on_b}) {
    std::optional<json> e = w->next();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ((*e)["event"], "state");
    EXPECT_EQ((*e)["held"], false);
  }

  // Acquire and release on A: the acquired event names the holder and since when.
  HttpResponse r =
      ca.post("/v1/locks/orders/acquire", R"({"ttl_ms": 30000, "holder": "worker-7"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const uint64_t t1 = json::parse(r.body)["token"];
  for (Watcher* w : {&on_a, &on_b}) {
    std::optional<json> e = w->next();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ((*e)["event"], "acquired") << e->dump();
    EXPECT_EQ((*e)["token"], t1);
    EXPECT_EQ((*e)["holder"], "worker-7") << e->dump();
    EXPECT_GT((*e)["since_ms"].get<int64_t>(), 1'600'000'000'000) << e->dump();
  }
  const auto released_at = Clock::now();
  ASSERT_EQ(
      ca.post("/v1/locks/orders/release", json{{"owner", json::parse(r.body)["owner"]}}.dump())
          .status,
      200);
  expectEverywhere({&on_a, &on_b}, "released", t1);
  std::printf("[events] release seen on both sidecars after %lld ms\n",
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - released_at)
                      .count()));

  // A lease that runs out: expired, at its TTL.
  r = ca.post("/v1/locks/orders/acquire", R"({"ttl_ms": 1500})");
  ASSERT_EQ(r.status, 200) << r.body;
  const uint64_t t2 = json::parse(r.body)["token"];
  expectEverywhere({&on_a, &on_b}, "acquired", t2);
  expectEverywhere({&on_a, &on_b}, "expired", t2);

  // An operator's force release: `forced` on every sidecar (the announcement says so).
  acquireThenForce(ca, admin_a, {&on_a, &on_b});

  // Grants are pushed: B sees them well before its 1 s re-read would (the median of five, so
  // that one slow turn of a loaded machine does not decide).
  std::vector<int64_t> seen_ms;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    r = ca.post("/v1/locks/orders/acquire", R"({"ttl_ms": 30000})");
    ASSERT_EQ(r.status, 200) << r.body;
    const json grant = json::parse(r.body);
    expectEverywhere({&on_b}, "acquired", grant["token"]);
    seen_ms.push_back(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
    ASSERT_EQ(ca.post("/v1/locks/orders/release", json{{"owner", grant["owner"]}}.dump()).status,
              200);
    expectEverywhere({&on_a}, "acquired", grant["token"]);
    expectEverywhere({&on_a, &on_b}, "released", grant["token"]);
  }
  std::sort(seen_ms.begin(), seen_ms.end());
  std::printf("[events] acquire -> acquired on the other sidecar: median %lld ms\n",
              static_cast<long long>(seen_ms[2]));
  EXPECT_LT(seen_ms[2], 400) << "grants are not pushed";

  // A late watcher starts with the current state (with its holder); the gauge counts the open
  // streams.
  r = ca.post("/v1/locks/orders/acquire", R"({"ttl_ms": 30000})");
  ASSERT_EQ(r.status, 200) << r.body;
  const uint64_t t4 = json::parse(r.body)["token"];
  expectEverywhere({&on_a, &on_b}, "acquired", t4);
  Watcher late(b->port(), "/v1/locks/orders/events");
  std::optional<json> e = late.next();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "state");
  EXPECT_EQ((*e)["token"], t4);
  EXPECT_TRUE(e->contains("holder")) << e->dump();
  const std::string metrics = HttpClient::tcp(b->port()).get("/metrics").body;
  EXPECT_NE(metrics.find("sidelock_lock_event_streams 2"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("sidelock_lock_events_sent_total{type=\"expired\"} 1"), std::string::npos)
      << metrics;
}

// A multi-lock's grant (one step on one Redis: acquire_all.lua) is announced for each of its
// names: B's watchers of both names see `acquired` one pub/sub hop later, not at the 1 s re-read
// (the median of three), and `released` when it is given back.
TEST_F(LockEventsTest, AMultiLockGrantIsPushedForEachName) {
  Watcher first(b->port(), "/v1/locks/acct-42/events");
  Watcher second(b->port(), "/v1/locks/acct-7/events");
  for (Watcher* w : {&first, &second}) ASSERT_TRUE(w->next().has_value());  // the state
  std::vector<int64_t> seen_ms;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    HttpResponse r = ca.post("/v1/multilocks/acquire",
                             R"({"names":["acct-42","acct-7"],"ttl_ms":30000,"holder":"mover"})");
    ASSERT_EQ(r.status, 200) << r.body;
    const json grant = json::parse(r.body);
    ASSERT_EQ(grant["leases"].size(), 2u) << r.body;
    for (Watcher* w : {&first, &second}) {
      std::optional<json> e = w->next();
      ASSERT_TRUE(e.has_value()) << "no acquired event";
      EXPECT_EQ((*e)["event"], "acquired") << e->dump();
      EXPECT_EQ((*e)["holder"], "mover") << e->dump();
      const uint64_t token = (*e)["token"];
      EXPECT_TRUE(token == grant["leases"][0]["token"] || token == grant["leases"][1]["token"])
          << e->dump();
    }
    seen_ms.push_back(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
    ASSERT_EQ(ca.post("/v1/multilocks/release",
                      json{{"names", {"acct-42", "acct-7"}}, {"owner", grant["owner"]}}.dump())
                  .status,
              200);
    for (Watcher* w : {&first, &second}) {
      std::optional<json> e = w->next();
      ASSERT_TRUE(e.has_value()) << "no released event";
      EXPECT_EQ((*e)["event"], "released") << e->dump();
    }
  }
  std::sort(seen_ms.begin(), seen_ms.end());
  std::printf("[events] multi-lock acquire -> acquired for both names on B: median %lld ms\n",
              static_cast<long long>(seen_ms[1]));
  EXPECT_LT(seen_ms[1], 400) << "multi-lock grants are not pushed";
}

TEST_F(LockEventsTest, ExtendedOnlyWhenAskedAndAKilledPubSubLinkIsCaughtUp) {
  Watcher plain(b->port(), "/v1/locks/orders/events");
  Watcher with_ext(b->port(), "/v1/locks/orders/events?extended=true");
  for (Watcher* w : {&plain, &with_ext}) ASSERT_TRUE(w->next().has_value());
  HttpResponse r = ca.post("/v1/locks/orders/acquire", R"({"ttl_ms": 5000})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json grant = json::parse(r.body);
  const uint64_t t1 = grant["token"];
  expectEverywhere({&plain, &with_ext}, "acquired", t1);
  ASSERT_EQ(
      ca.post("/v1/locks/orders/extend", json{{"owner", grant["owner"]}, {"ttl_ms", 20000}}.dump())
          .status,
      200);
  expectEverywhere({&with_ext}, "extended", t1);

  // Extended to a shorter TTL and left to run out: `expired` at the new end, not `released`.
  HttpResponse shorter = ca.post("/v1/locks/short/acquire", R"({"ttl_ms": 30000})");
  ASSERT_EQ(shorter.status, 200) << shorter.body;
  {
    Watcher on_short(b->port(), "/v1/locks/short/events");
    ASSERT_TRUE(on_short.next().has_value());  // state: held
    ASSERT_EQ(ca.post("/v1/locks/short/extend",
                      json{{"owner", json::parse(shorter.body)["owner"]}, {"ttl_ms", 1500}}.dump())
                  .status,
              200);
    std::optional<json> e = on_short.next(6000);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ((*e)["event"], "expired") << e->dump();
  }

  // Every subscription link dropped: the release is still seen, by the catch-up re-read (1 s).
  redis.cli({"CLIENT", "KILL", "TYPE", "pubsub"});
  const auto released_at = Clock::now();
  ASSERT_EQ(ca.post("/v1/locks/orders/release", json{{"owner", grant["owner"]}}.dump()).status,
            200);
  expectEverywhere({&plain, &with_ext}, "released", t1, 3000);
  EXPECT_LT(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - released_at).count(),
      2500);
}

// Redlock: every node publishes, a majority's announcement passes the event on (the other
// nodes' copies collapse into it), the read is the Redlock inspect. The same events, in order, on
// both sidecars; `forced` everywhere; each with its grant's token (the nodes' grant records, not
// their counters, which a node that granted after the vote may have far above it).
TEST(LockEventsRedlockTest, EventsFollowTheMajorityOnEverySidecar) {
  RedisServer r1, r2, r3;
  const std::string yaml = redlockBackendYaml({r1.address(), r2.address(), r3.address()});
  const int admin_a = pickFreePort();
  auto a = startSidecar(yaml, admin_a);
  auto b = startSidecar(yaml, pickFreePort());
  HttpClient ca = HttpClient::tcp(a->port());
  Watcher on_a(a->port(), "/v1/locks/orders/events");
  Watcher on_b(b->port(), "/v1/locks/orders/events");
  auto expectNext = [&](const std::string& type, uint64_t token) {
    for (Watcher* w : {&on_a, &on_b}) {
      std::optional<json> e = w->next();
      ASSERT_TRUE(e.has_value()) << "no " << type << " event";
      EXPECT_EQ((*e)["event"], type) << e->dump();
      if (type != "state") {
        EXPECT_EQ((*e)["token"].get<uint64_t>(), token) << e->dump();
      }
      if (type == "acquired") {
        EXPECT_EQ((*e)["holder"], "rl-1") << e->dump();
      }
    }
  };
  expectNext("state", 0);
  HttpResponse r = ca.post("/v1/locks/orders/acquire", R"({"ttl_ms": 30000, "holder": "rl-1"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json grant = json::parse(r.body);
  expectNext("acquired", grant["token"]);
  ASSERT_EQ(ca.post("/v1/locks/orders/release", json{{"owner", grant["owner"]}}.dump()).status,
            200);
  expectNext("released", grant["token"]);
  r = ca.post("/v1/locks/orders/acquire", R"({"ttl_ms": 30000, "holder": "rl-1"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const uint64_t t2 = json::parse(r.body)["token"];
  expectNext("acquired", t2);
  ASSERT_EQ(adminPost(admin_a, "/admin/v1/locks/orders/release").status, 200);
  expectNext("forced", t2);
}

// Redlock: the clean-up of an acquire that lost its vote is announced `rolled_back`, which wakes
// waiters but ends no lease, so a lease that runs out after one is `expired`, not `released`.
// a's lease is on all three nodes; node 3 loses its key (deleted here) and node 2 is stalled
// across the lease's end, so b's acquire is granted on node 3 alone (node 1 busy, node 2 silent:
// 409) and its clean-up deletes its key there and announces it. The stream's reads fail while
// node 1 and the silent node 2 could still be a majority holding the lease; the first that
// answers, once node 1's key ran out, shows the lease ended. Before, the clean-up was announced
// as a release, which the stream credited to the lease: `released`. The stalled node is never
// declared down (command_timeout_ms): a down node casts no vote, and reads would then show the
// lease gone before its end, which is `released` whatever was announced.
TEST(LockEventsRedlockTest, ALostAttemptsCleanUpIsNoRelease) {
  RedisServer r1, r2, r3;
  const std::string yaml = redlockBackendYaml({r1.address(), r2.address(), r3.address()}) +
                           "  command_timeout_ms: 10000\n";
  auto a = startSidecar(yaml, pickFreePort());
  auto b = startSidecar(yaml, pickFreePort());
  HttpClient ca = HttpClient::tcp(a->port());
  HttpClient cb = HttpClient::tcp(b->port());
  Watcher w(a->port(), "/v1/locks/ex/events");
  ASSERT_TRUE(w.next().has_value()) << "no state line";
  // Long enough that b's attempt, its clean-up and the announcement come well before its end.
  constexpr int kTtlMs = 2000;
  HttpResponse r =
      ca.post("/v1/locks/ex/acquire", json{{"ttl_ms", kTtlMs}, {"holder", "pod-a"}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const auto granted_at = Clock::now();
  const uint64_t token = json::parse(r.body)["token"];
  std::optional<json> e = w.next();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "acquired") << e->dump();
  ASSERT_EQ(r3.cli({"DEL", "sidelock:{ex}"}), "1");
  r2.pause();
  r = cb.post("/v1/locks/ex/acquire", R"({"ttl_ms": 5000})");
  EXPECT_EQ(r.status, 409) << r.body;
  // Node 2 stays silent until the lease ran out everywhere (not a timing assertion: it only
  // keeps the reads from answering before the lease's end).
  std::this_thread::sleep_until(granted_at + std::chrono::milliseconds(kTtlMs + 400));
  r2.resume();
  for (e = w.next(3000); e && (*e)["event"] == "unknown"; e = w.next(3000)) {
  }
  ASSERT_TRUE(e.has_value()) << "no end of the lease";
  EXPECT_EQ((*e)["event"], "expired") << e->dump();
  EXPECT_EQ((*e)["token"].get<uint64_t>(), token) << e->dump();
  EXPECT_EQ(a->stop(), 0) << a->logs();
  EXPECT_EQ(b->stop(), 0) << b->logs();
}

/// One lock's life on a shared backend through two sidecars, A (admin listener) and B, as B's
/// watcher sees it: the holder seen from B; a lease acquired with a lock-delay expires (`expired`),
/// B is refused for the delay (409 lock_delay) and its waiting acquire is granted when the delay
/// ends; a clean release leaves no delay (B gets it at once); an operator's force release is
/// `forced` and starts the delay, which holds back a reader too. Every event carries the token of
/// the grant it is about, on Redlock too (where nodes' counters differ: the grant records).
void lifeOfALockOn(const std::string& yaml) {
  const int admin_a = pickFreePort();
  auto a = startSidecar(yaml, admin_a);
  auto b = startSidecar(yaml, pickFreePort());
  HttpClient ca = HttpClient::tcp(a->port());
  HttpClient cb = HttpClient::tcp(b->port());
  Watcher on_b(b->port(), "/v1/locks/life/events");
  ASSERT_EQ(on_b.status(), 200);
  ASSERT_TRUE(on_b.next().has_value()) << "no state line";
  auto expectNext = [&](const std::string& type, uint64_t token) {
    std::optional<json> e = on_b.next();
    ASSERT_TRUE(e.has_value()) << "no " << type << " event";
    EXPECT_EQ((*e)["event"], type) << e->dump();
    EXPECT_EQ((*e)["token"], token) << e->dump();
  };
  auto tokenOf = [](const HttpResponse& r) { return json::parse(r.body)["token"].get<uint64_t>(); };

  // Expiry -> the delay: nobody gets it for 1.5 s, then B's waiter does. The TTL leaves room to
  // see the holder from B first on a loaded machine (500 ms did not, under ASan at ctest -j4).
  constexpr int64_t kTtlMs = 1500;
  constexpr int64_t kDelayMs = 1500;
  HttpResponse r =
      ca.post("/v1/locks/life/acquire",
              json{{"ttl_ms", kTtlMs}, {"lock_delay_ms", kDelayMs}, {"holder", "pod-a"}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const auto granted_at = Clock::now();
  expectNext("acquired", tokenOf(r));
  const json seen = json::parse(cb.get("/v1/locks/life").body);
  EXPECT_EQ(seen.value("holder", json()), "pod-a")
      << "the holder, from another sidecar: " << seen.dump();
  EXPECT_EQ(seen.dump().find(json::parse(r.body)["owner"].get<std::string>()), std::string::npos);
  expectNext("expired", tokenOf(r));
  HttpResponse busy = cb.post("/v1/locks/life/acquire", R"({"ttl_ms":30000})");
  ASSERT_EQ(busy.status, 409) << busy.body;
  EXPECT_EQ(json::parse(busy.body)["reason"], "lock_delay") << busy.body;
  r = cb.post("/v1/locks/life/acquire", R"({"ttl_ms":30000,"wait_ms":5000})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_GE(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - granted_at).count(),
      kTtlMs + kDelayMs - 200)
      << "granted inside the delay";
  expectNext("acquired", tokenOf(r));
  ASSERT_EQ(cb.post("/v1/locks/life/release", json{{"owner", json::parse(r.body)["owner"]}}.dump())
                .status,
            200);
  expectNext("released", tokenOf(r));

  // A clean release: no delay, B gets it at once; then an operator's force release.
  r = ca.post("/v1/locks/life/acquire", R"({"ttl_ms":30000,"lock_delay_ms":5000})");
  ASSERT_EQ(r.status, 200) << r.body;
  expectNext("acquired", tokenOf(r));
  ASSERT_EQ(ca.post("/v1/locks/life/release", json{{"owner", json::parse(r.body)["owner"]}}.dump())
                .status,
            200);
  expectNext("released", tokenOf(r));
  r = cb.post("/v1/locks/life/acquire", R"({"ttl_ms":30000,"lock_delay_ms":1000})");
  ASSERT_EQ(r.status, 200) << "a clean release has no delay: " << r.body;
  expectNext("acquired", tokenOf(r));
  ASSERT_EQ(adminPost(admin_a, "/admin/v1/locks/life/release").status, 200);
  const auto forced_at = Clock::now();
  expectNext("forced", tokenOf(r));

  // A force release is involuntary: its delay holds back a reader too, until it ends.
  busy = ca.post("/v1/locks/life/acquire", R"({"ttl_ms":30000,"mode":"shared"})");
  ASSERT_EQ(busy.status, 409) << busy.body;
  EXPECT_EQ(json::parse(busy.body)["reason"], "lock_delay") << busy.body;
  r = ca.post("/v1/locks/life/acquire", R"({"ttl_ms":30000,"mode":"shared","wait_ms":5000})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_GE(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - forced_at).count(),
            900)
      << "a reader granted inside the delay";
  ASSERT_EQ(ca.post("/v1/locks/life/release",
                    json{{"owner", json::parse(r.body)["owner"]}, {"mode", "shared"}}.dump())
                .status,
            200);
  EXPECT_EQ(a->stop(), 0) << a->logs();
  EXPECT_EQ(b->stop(), 0) << b->logs();
}

TEST(LockEventsBackendsTest, LifeOfALockOnSentinel) {
  RedisServer master;
  auto sentinel = RedisServer::startSentinel(master, "locks", /*quorum=*/1);
  lifeOfALockOn("backend:\n  type: sentinel\n  nodes: [\"" + sentinel->address() +
                "\"]\n  sentinel:\n    master_name: locks\n");
}

TEST(LockEventsBackendsTest, LifeOfALockOnCluster) {
  RedisCluster cluster(3);
  lifeOfALockOn("backend:\n  type: cluster\n  nodes: [\"" + cluster.address(0) +
                "\"]\n  command_timeout_ms: 3000\n");
}

TEST(LockEventsBackendsTest, LifeOfALockOnRedlock) {
  RedisServer r1, r2, r3;
  // A per-node budget of 500 ms, not the fixtures' 50 ms: under ASan at ctest -j4 a node's reply
  // took longer, the grant missed its majority and was released everywhere, and the stream
  // showed that attempt's events ("released" where the expiry was awaited). What is checked here
  // is the life of a lock, not the node timeout.
  std::string yaml = redlockBackendYaml({r1.address(), r2.address(), r3.address()});
  const std::string fast = "node_timeout_ms: 50";
  yaml.replace(yaml.find(fast), fast.size(), "node_timeout_ms: 500");
  lifeOfALockOn(yaml);
}

// Redis restarted empty under a held lease: the lease is gone with the data, and reads name token
// 0 (no counter), below the lease's. The stream ends the lease at its TTL as `expired`, under its
// own token (tokens never go back), and shows the next grant (its token from Redis's clock, above
// every earlier one) as `acquired`. Before, the stale-read rule ignored the lower token and the
// stream showed the lost lease held until the next grant, then `released`.
TEST_F(LockEventsTest, ALeaseLostWithRedissDataExpiresOnTheStream) {
  std::unique_ptr<Watcher> watcher;
  const uint64_t t1 = watchATwoSecondLease(watcher);
  ASSERT_NE(t1, 0u);
  Watcher& on_b = *watcher;

  redis.kill();
  redis.restart();
  // No later than the TTL and a catch-up re-read (1 s) after the end the stream saw.
  expectEverywhere({&on_b}, "expired", t1, 6000);
  EXPECT_GE(msSince(granted_at_), 1900) << "ended at its TTL, not at once";

  HttpResponse again;
  ASSERT_TRUE(pollUntil([&] {
    again = ca.post("/v1/locks/orders/acquire", R"({"ttl_ms": 30000})");
    return again.status == 200;
  })) << again.body;
  const uint64_t t2 = json::parse(again.body)["token"];
  EXPECT_GT(t2, t1);
  expectEverywhere({&on_b}, "acquired", t2);
}

// A lease that came and went between two reads of the stream's sidecar (b stopped while a takes
// and releases it; both announcements then reach b at once, and its read shows the lock free at
// the lease's higher token) is `acquired` and then its end, in token order. Its `acquired` line
// says held, as every `acquired` line does (before: `"held": false`, read as no lease at all).
TEST_F(LockEventsTest, ALeaseThatCameAndWentBetweenReadsIsAcquiredHeld) {
  Watcher on_b(b->port(), "/v1/locks/orders/events");
  std::optional<json> e = on_b.next();
  ASSERT_TRUE(e.has_value());
  ASSERT_EQ((*e)["event"], "state") << e->dump();
  b->pause();
  HttpResponse r = ca.post("/v1/locks/orders/acquire", R"({"ttl_ms": 30000})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json grant = json::parse(r.body);
  const uint64_t token = grant["token"];
  EXPECT_EQ(ca.post("/v1/locks/orders/release", json{{"owner", grant["owner"]}}.dump()).status,
            200);
  b->resume();
  e = on_b.next();
  ASSERT_TRUE(e.has_value()) << "the lease was not shown";
  EXPECT_EQ((*e)["event"], "acquired") << e->dump();
  EXPECT_EQ((*e)["held"], true) << e->dump();
  EXPECT_EQ((*e)["token"], token) << e->dump();
  e = on_b.next();
  ASSERT_TRUE(e.has_value()) << "the lease's end was not shown";
  EXPECT_EQ((*e)["held"], false) << e->dump();
  EXPECT_EQ((*e)["token"], token) << e->dump();
}

// A grant given back while the watching sidecar could not hear (found from outside on Redis
// Cluster: an acquire answered 503 during a stall of Redis ran once Redis went on, its sidecar gave
// the grant back, and two sidecars' streams called that lease `expired`). The watcher missed both
// announcements: it cannot tell a release from an expiry, and says `ended` if it saw the lease only
// after its end (it came and went between two reads), `released` if it saw it held. Never
// `expired`: the lease did not run out.
TEST_F(LockEventsTest, AGrantGivenBackWhileTheStreamCouldNotHearIsNoExpiry) {
  auto quick_a = startSidecar(redisBackendYaml(redis.address(), 300), pickFreePort());
  auto quick_b = startSidecar(redisBackendYaml(redis.address(), 300), pickFreePort());
  Watcher on_b(quick_b->port(), "/v1/locks/orders/events");
  std::optional<json> e = on_b.next();
  ASSERT_TRUE(e.has_value());
  ASSERT_EQ((*e)["event"], "state") << e->dump();
  redis.pause();
  HttpClient c = HttpClient::tcp(quick_a->port());
  HttpResponse r = c.post("/v1/locks/orders/acquire", R"({"ttl_ms": 8000})");
  EXPECT_EQ(r.status, 503) << r.body;
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // b's reads fail meanwhile
  const auto resumed_at = Clock::now();
  redis.resume();
  e = on_b.next(5000);
  ASSERT_TRUE(e.has_value());
  if ((*e)["event"] == "unknown") e = on_b.next(5000);  // reads failed past the next re-read
  ASSERT_TRUE(e.has_value()) << "the given-back grant was not shown";
  EXPECT_EQ((*e)["event"], "acquired") << e->dump();
  const uint64_t token = (*e)["token"];
  e = on_b.next(5000);
  if (e.has_value() && (*e)["event"] == "state") e = on_b.next(5000);  // after `unknown`
  ASSERT_TRUE(e.has_value()) << "its end was not shown";
  EXPECT_TRUE((*e)["event"] == "ended" || (*e)["event"] == "released") << e->dump();
  EXPECT_EQ((*e)["token"], token) << e->dump();
  EXPECT_LT(msSince(resumed_at), 6000) << "shown before the lease could have run out";
  // The give-back's answer is counted when it arrives, which may be after b's read.
  const std::string given_back = R"(sidelock_unanswered_acquires_total{outcome="released"} 1)";
  std::string metrics_a;
  for (int i = 0; i < 40; ++i) {
    metrics_a = HttpClient::tcp(quick_a->port()).get("/metrics").body;
    if (metrics_a.find(given_back) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(metrics_a.find(given_back), std::string::npos)
      << "the grant was given back: "
      << metrics_a.substr(std::min(metrics_a.size(), metrics_a.find("sidelock_unanswered")), 400);
}

// While the backend is out, a stream does not go on saying `held` past the lease's end, nor free
// forever: `unknown` once (under the last token), and once Redis answers again the events its read
// shows (the lease ended: `expired`), then `state`.
TEST_F(LockEventsTest, AStreamSaysUnknownWhileTheBackendIsOut) {
  std::unique_ptr<Watcher> watcher;
  const uint64_t t1 = watchATwoSecondLease(watcher);
  ASSERT_NE(t1, 0u);
  Watcher& on_b = *watcher;

  redis.kill();
  std::optional<json> e = on_b.next(6000);
  ASSERT_TRUE(e.has_value()) << "still `held` long after the lease's end";
  EXPECT_EQ((*e)["event"], "unknown") << e->dump();
  EXPECT_EQ((*e)["token"], t1);
  EXPECT_EQ((*e)["name"], "orders");
  EXPECT_GE(msSince(granted_at_), 1900) << "vouched for until the lease's end";
  EXPECT_FALSE(on_b.next(1500).has_value()) << "once";
  {
    // A watcher that comes meanwhile is told `unknown` too, not the `held` state last read.
    Watcher late(b->port(), "/v1/locks/orders/events");
    e = late.next(5000);
    ASSERT_TRUE(e.has_value()) << "no first line while Redis is away";
    EXPECT_EQ((*e)["event"], "unknown") << e->dump();
    EXPECT_EQ((*e)["token"], t1);
  }

  redis.restart();  // empty
  expectEverywhere({&on_b}, "expired", t1, 10000);
  e = on_b.next(3000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "state") << e->dump();
  EXPECT_EQ((*e)["held"], false);

  // A free lock is vouched for until the next re-read (1 s): then `unknown` too, and `state` back.
  redis.kill();
  e = on_b.next(5000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "unknown") << e->dump();
  redis.restart();
  e = on_b.next(10000);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "state") << e->dump();
  EXPECT_EQ((*e)["held"], false);
  const std::string metrics_b = HttpClient::tcp(b->port()).get("/metrics").body;
  EXPECT_NE(metrics_b.find(R"(sidelock_lock_events_sent_total{type="unknown"} 3)"),
            std::string::npos)
      << metrics_b;
}

// A watcher that comes while a lease is held is told what is left of it, not the TTL the group's
// last read saw (up to a re-read ago; found by review).
TEST_F(LockEventsTest, ANewcomersStateSaysWhatIsLeftOfTheLease) {
  std::unique_ptr<Watcher> first;
  ASSERT_NE(watchATwoSecondLease(first), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  const int64_t into_lease_ms = msSince(granted_at_);  // at least this much is spent
  Watcher late(b->port(), "/v1/locks/orders/events");
  std::optional<json> e = late.next();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "state") << e->dump();
  EXPECT_EQ((*e)["held"], true) << e->dump();
  // (150 ms of slack for the grant's own round trip on a loaded machine; stale, it said 2000.)
  EXPECT_LE((*e)["ttl_ms"].get<int64_t>(), 2000 - into_lease_ms + 150) << e->dump();
}

// A watcher that comes after the shown lease's end, while the read that would tell what became of
// it is stuck (Redis paused), is not told `held`: its first line waits for that read, then says
// the state it shows (free) or `unknown` if it failed (found by review).
TEST_F(LockEventsTest, ANewcomerAfterTheLeasesEndWaitsForTheReadThatEndsIt) {
  std::unique_ptr<Watcher> first;
  ASSERT_NE(watchATwoSecondLease(first), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(1800) -
                              std::chrono::milliseconds(msSince(granted_at_)));
  redis.pause();
  std::this_thread::sleep_for(std::chrono::milliseconds(2200) -
                              std::chrono::milliseconds(msSince(granted_at_)));
  Watcher late(b->port(), "/v1/locks/orders/events");
  std::optional<json> e = late.next(150);
  redis.resume();
  if (!e.has_value()) e = late.next(5000);
  ASSERT_TRUE(e.has_value()) << "no first line after Redis came back";
  EXPECT_TRUE(((*e)["event"] == "state" && (*e)["held"] == false) || (*e)["event"] == "unknown")
      << "told a lease held past its end: " << e->dump();
  std::optional<json> ended = first->next(5000);
  ASSERT_TRUE(ended.has_value());
  EXPECT_TRUE((*ended)["event"] == "expired" || (*ended)["event"] == "unknown") << ended->dump();
}

// A read/write lock's readers are one shared hold on the stream: `acquired` with the first reader,
// nothing while readers come and go with others still in (each draws a token, and only the first
// is announced; the stream used to end the hold at the next read that named a later reader's token,
// `released` then `acquired`, while the lock was never free), the end with the last one out:
// `released`, or `expired` when the last runs out (the end moved earlier with the longest reader).
TEST_F(LockEventsTest, ReadersComingAndGoingAreOneSharedHold) {
  Watcher on_a(a->port(), "/v1/locks/orders/events");
  Watcher on_b(b->port(), "/v1/locks/orders/events");
  for (Watcher* w : {&on_a, &on_b}) ASSERT_TRUE(w->next().has_value());  // the state
  auto read = [&](const std::string& ttl_ms) {
    HttpResponse r =
        ca.post("/v1/locks/orders/acquire", R"({"mode":"shared","ttl_ms":)" + ttl_ms + "}");
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body);
  };
  auto leave = [&](const json& reader) {
    ASSERT_EQ(ca.post("/v1/locks/orders/release", json{{"owner", reader["owner"]}}.dump()).status,
              200);
  };

  const json r1 = read("30000");
  for (Watcher* w : {&on_a, &on_b}) {
    std::optional<json> e = w->next();
    ASSERT_TRUE(e.has_value()) << "no acquired event";
    EXPECT_EQ((*e)["event"], "acquired") << e->dump();
    EXPECT_EQ((*e)["token"], r1["token"]) << e->dump();
    EXPECT_EQ((*e)["mode"], "shared") << e->dump();
  }
  const json r2 = read("30000");
  ASSERT_GT(r2["token"].get<uint64_t>(), r1["token"].get<uint64_t>());
  leave(r1);
  // Past two catch-up re-reads (1 s): the readers' latest token is read, and nothing is sent.
  for (Watcher* w : {&on_a, &on_b}) {
    std::optional<json> e = w->next(w == &on_a ? 2200 : 100);
    EXPECT_FALSE(e.has_value()) << "the lock stayed held by readers: " << e->dump();
  }
  EXPECT_EQ(json::parse(ca.get("/v1/locks/orders").body)["held"], true);
  Watcher late(b->port(), "/v1/locks/orders/events");
  std::optional<json> e = late.next();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ((*e)["event"], "state");
  EXPECT_EQ((*e)["held"], true) << e->dump();
  EXPECT_EQ((*e)["readers"], 1) << e->dump();
  EXPECT_EQ((*e)["token"], r2["token"]) << e->dump();
  leave(r2);
  expectEverywhere({&on_a, &on_b, &late}, "released", r2["token"]);

  // The longest reader leaves, the other runs out: expired, at its TTL.
  const json r3 = read("30000");
  expectEverywhere({&on_a, &on_b, &late}, "acquired", r3["token"]);
  const json r4 = read("2500");
  const auto granted_at = Clock::now();
  leave(r3);
  expectEverywhere({&on_a, &on_b, &late}, "expired", r4["token"]);
  EXPECT_GE(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - granted_at).count(),
      2000)
      << "ended at the last reader's TTL";
}

// HEAD gets the head a GET gets and ends there: the request behind it is answered, and no
// stream is left open for nobody (it used to hold an event-stream slot and the connection).
TEST_F(LockEventsTest, HeadAnswersTheHeadAndOpensNoStream) {
  HttpClient c = HttpClient::tcp(a->port());
  c.sendRaw(
      "HEAD /v1/locks/orders/events HTTP/1.1\r\nHost: localhost\r\n\r\n"
      "HEAD /v1/elections/orders/observe HTTP/1.1\r\nHost: localhost\r\n\r\n"
      "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
  // Raw bytes: the test client's parser does not know which answers are to a HEAD.
  std::string raw;
  const auto give_up = Clock::now() + std::chrono::seconds(5);
  while (raw.find("{\"status\":\"ok\"}") == std::string::npos && Clock::now() < give_up) {
    pollfd p{c.fd(), POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(c.fd(), buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  ASSERT_NE(raw.find("{\"status\":\"ok\"}"), std::string::npos)
      << "the request behind the HEADs was not answered: " << raw;
  const size_t first = raw.find("\r\n\r\n");
  const size_t second = raw.find("\r\n\r\n", first + 4);
  ASSERT_NE(second, std::string::npos) << raw;
  EXPECT_EQ(raw.compare(0, 12, "HTTP/1.1 200"), 0) << raw;
  EXPECT_EQ(raw.compare(first + 4, 12, "HTTP/1.1 200"), 0) << raw;
  EXPECT_EQ(raw.compare(second + 4, 12, "HTTP/1.1 200"), 0) << raw;
  EXPECT_NE(raw.find("application/x-ndjson"), std::string::npos) << raw;
  const std::string metrics = ca.get("/metrics").body;
  EXPECT_NE(metrics.find("\nsidelock_lock_event_streams 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\nsidelock_election_observers 0\n"), std::string::npos) << metrics;
}

TEST_F(LockEventsTest, BadInputIsRefused) {
  EXPECT_EQ(ca.get("/v1/locks/orders/events?extended=maybe").status, 400);
  EXPECT_EQ(ca.get("/v1/locks/orders/events?since=3").status, 400);
  HttpResponse bad = ca.get("/v1/locks/" + std::string(300, 'x') + "/events");
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(ca.get("/v1/locks/orders/eventz").status, 404);
  EXPECT_EQ(ca.post("/v1/locks/orders/events", "{}").status, 405);
}

}  // namespace
}  // namespace sidelock::testing
