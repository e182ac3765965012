// Operator force release (issue 13): POST /admin/v1/locks/{name}/release on the admin listener,
// with an admin token, frees a stuck lock whoever holds it, wakes the waiters of every sidecar,
// bumps no token, is counted and logged, and its holder learns the lease is lost. Real
// redis-server processes and real sidecars.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "support/fencing.h"
#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;

constexpr const char* kAdminToken = "AdminToken-0123456789abcdefghijklmnop";
constexpr const char* kReleasePath = "/admin/v1/locks/stuck/release";

/// POST to the admin listener with an optional bearer token.
HttpResponse adminPost(int port, const std::string& path, const char* token) {
  HttpClient c = HttpClient::tcp(port);
  std::string raw = "POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n";
  if (token != nullptr) raw += std::string("Authorization: Bearer ") + token + "\r\n";
  c.sendRaw(raw + "\r\n");
  auto r = c.readResponse();
  return r ? *r : HttpResponse{};
}

/// A sidecar on `backend_yaml` with an admin listener; admin tokens unless `with_tokens` is false.
std::unique_ptr<SidecarProcess> startSidecar(const std::string& backend_yaml, int admin_port,
                                             bool with_tokens = true) {
  std::string yaml = backend_yaml;
  std::vector<std::string> env;
  if (with_tokens) {
    yaml += "auth:\n  admin_tokens_env: SIDELOCK_TEST_ADMIN_TOKENS\n";
    env.push_back(std::string("SIDELOCK_TEST_ADMIN_TOKENS=") + kAdminToken);
  }
  return std::make_unique<SidecarProcess>(
      SidecarProcess::Options{yaml, env, /*wait_ready=*/true,
                              "  admin: \"127.0.0.1:" + std::to_string(admin_port) + "\"\n"});
}

TEST(ForceReleaseTest, FreesAStuckLockWakesWaitersEverywhereAndTheHolderLearnsItIsLost) {
  RedisServer redis;
  const int admin_a = pickFreePort();
  auto a = startSidecar(redisBackendYaml(redis.address()), admin_a);
  auto b = startSidecar(redisBackendYaml(redis.address()), pickFreePort());

  // The stuck holder: a stream hold on sidecar A (its app hangs but keeps the connection).
  HttpClient holder = HttpClient::tcp(a->port());
  holder.sendRequest("POST", "/v1/locks/stuck/acquire", R"({"ttl_ms":30000,"hold":"stream"})");
  auto head = holder.readStreamHead();
  ASSERT_TRUE(head.has_value());
  ASSERT_EQ(head->status, 200);
  auto first = holder.readStreamLine();
  ASSERT_TRUE(first.has_value());
  const json acquired = json::parse(*first);
  const uint64_t held_token = acquired["token"];

  // A waiter on the other sidecar, woken by the release announcement.
  const int port_b = b->port();
  auto waiter = std::async(std::launch::async, [port_b] {
    HttpClient w = HttpClient::tcp(port_b);
    return w.request("POST", "/v1/locks/stuck/acquire", R"({"ttl_ms":10000,"wait_ms":25000})",
                     30'000);
  });
  ASSERT_TRUE(pollUntil([&] {
    HttpClient c = HttpClient::tcp(port_b);
    return c.get("/v1/locks").body.find("\"stuck\"") != std::string::npos;
  }));

  // Not served on the lock listener, and not without the admin token.
  HttpClient c = HttpClient::tcp(a->port());
  EXPECT_EQ(c.post(kReleasePath, "").status, 404);
  auto refused = adminPost(admin_a, kReleasePath, nullptr);
  EXPECT_EQ(refused.status, 401) << refused.body;
  EXPECT_EQ(json::parse(c.get("/v1/locks/stuck").body)["held"], true) << "refusals change nothing";

  auto r = adminPost(admin_a, kReleasePath, kAdminToken);
  ASSERT_EQ(r.status, 200) << r.body;
  const json freed = json::parse(r.body);
  EXPECT_EQ(freed["name"], "stuck");
  EXPECT_EQ(freed["released"], true);
  EXPECT_EQ(freed["token"].get<uint64_t>(), held_token) << "the freed lease's token";
  EXPECT_EQ(r.body.find(acquired["owner"].get<std::string>()), std::string::npos)
      << "the owner id never leaves the sidecar";

  // The waiter on B is granted at once (pushed wake-up), with the next token: nothing was bumped.
  ASSERT_EQ(waiter.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  auto granted = waiter.get();
  ASSERT_EQ(granted.status, 200) << granted.body;
  EXPECT_TRUE(isNextToken(held_token, json::parse(granted.body)["token"].get<uint64_t>(),
                          clockUsOf(redis.cli({"TIME"}))))
      << granted.body;

  // The stuck holder's stream says lost; its release answers lease_lost and frees nothing.
  bool lost = false;
  std::string reason;
  for (int i = 0; i < 10 && !lost; ++i) {
    auto line = holder.readStreamLine(2000);
    if (!line) break;
    lost = json::parse(*line)["event"] == "lost";
    if (lost) reason = json::parse(*line).value("reason", "");
  }
  EXPECT_TRUE(lost) << a->logs();
  // Why, as the sidecar's log says it (it used to be one text for every loss).
  EXPECT_NE(reason.find("force-released by an operator"), std::string::npos) << reason;
  auto late = c.post("/v1/locks/stuck/release", json{{"owner", acquired["owner"]}}.dump());
  EXPECT_EQ(late.status, 404) << late.body;
  EXPECT_EQ(json::parse(late.body)["error"], "lease_lost");
  EXPECT_EQ(json::parse(c.get("/v1/locks/stuck").body)["held"], true) << "B's grant stands";

  // Nothing held: 404 not_held, nothing counted. Bad names: 400.
  r = adminPost(admin_a, "/admin/v1/locks/never-held/release", kAdminToken);
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"], "not_held");
  r = adminPost(admin_a, "/admin/v1/locks/a%7Bb/release", kAdminToken);
  EXPECT_EQ(r.status, 400) << r.body;

  HttpClient admin = HttpClient::tcp(admin_a);
  std::string raw = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ";
  admin.sendRaw(raw + kAdminToken + "\r\n\r\n");
  auto metrics = admin.readResponse();
  ASSERT_TRUE(metrics.has_value());
  EXPECT_EQ(metricValue(metrics->body, "sidelock_forced_releases_total"), 1) << metrics->body;
  const std::string logs = a->logs();
  EXPECT_NE(logs.find("lock.force_released"), std::string::npos) << logs;
  EXPECT_NE(logs.find("SIDELOCK_TEST_ADMIN_TOKENS"), std::string::npos)
      << "the log says which admin token was used: " << logs;
  EXPECT_EQ(logs.find(kAdminToken), std::string::npos) << "never the token itself";
  EXPECT_EQ(a->stop(), 0) << a->logs();
  EXPECT_EQ(b->stop(), 0) << b->logs();
}

/// The lease names GET /v1/locks lists on the sidecar at `port`.
std::vector<std::string> listedLeases(int port) {
  HttpClient c = HttpClient::tcp(port);
  std::vector<std::string> names;
  const json listing = json::parse(c.get("/v1/locks").body);
  for (const json& lease : listing["leases"]) {
    names.push_back(lease["name"]);
  }
  return names;
}

// Issue 22: every kind of lease of the lock's key ends at once on the sidecar that granted it,
// not at its next renewal. A TTL of 60 s puts the first renewal 20 s away, so an event within
// 2 s can only come from the force release.
TEST(ForceReleaseTest, EveryKindOfHolderLearnsAtOnceAndIsNoLongerListed) {
  RedisServer redis;
  const int admin_port = pickFreePort();
  auto sidecar = startSidecar(redisBackendYaml(redis.address()), admin_port);
  const int port = sidecar->port();

  // Stream holds: an exclusive lock, a fair lock, and two readers of a read/write lock.
  struct StreamHold {
    std::string lock;
    std::string body;
  };
  const std::vector<StreamHold> streams = {
      {"plain", R"({"ttl_ms":60000,"hold":"stream"})"},
      {"fair", R"({"ttl_ms":60000,"hold":"stream","fair":true})"},
      {"rw", R"({"ttl_ms":60000,"hold":"stream","mode":"shared"})"},
      {"rw", R"({"ttl_ms":60000,"hold":"stream","mode":"shared"})"},
  };
  std::vector<HttpClient> holders;
  for (const StreamHold& s : streams) {
    holders.push_back(HttpClient::tcp(port));
    holders.back().sendRequest("POST", "/v1/locks/" + s.lock + "/acquire", s.body);
    auto head = holders.back().readStreamHead();
    ASSERT_TRUE(head.has_value()) << s.lock;
    ASSERT_EQ(head->status, 200) << s.lock << " " << head->body;
    ASSERT_TRUE(holders.back().readStreamLine().has_value()) << s.lock;
  }
  // Plain leases: a re-entered one (two holds) and the members of a multi-lock.
  HttpClient c = HttpClient::tcp(port);
  auto reentrant = c.post("/v1/locks/again/acquire", R"({"ttl_ms":60000,"reentrant":true})");
  ASSERT_EQ(reentrant.status, 200) << reentrant.body;
  const std::string reentrant_owner = json::parse(reentrant.body)["owner"];
  ASSERT_EQ(c.post("/v1/locks/again/acquire",
                   json{{"owner", reentrant_owner}, {"reentrant", true}}.dump())
                .status,
            200);
  auto multi =
      c.post("/v1/multilocks/acquire", R"({"names":["m1","m2"],"ttl_ms":60000,"auto_renew":true})");
  ASSERT_EQ(multi.status, 200) << multi.body;
  const std::string multi_owner = json::parse(multi.body)["owner"];
  ASSERT_EQ(listedLeases(port).size(), 7u) << c.get("/v1/locks").body;

  for (const char* lock : {"plain", "fair", "rw", "again", "m1", "m2"}) {
    auto r =
        adminPost(admin_port, std::string("/admin/v1/locks/") + lock + "/release", kAdminToken);
    ASSERT_EQ(r.status, 200) << lock << " " << r.body;
  }
  for (size_t i = 0; i < holders.size(); ++i) {
    std::optional<std::string> line = holders[i].readStreamLine(2000);
    ASSERT_TRUE(line.has_value()) << streams[i].body << " got no event within 2 s";
    EXPECT_EQ(json::parse(*line)["event"], "lost") << streams[i].body << ": " << *line;
    EXPECT_FALSE(holders[i].readStreamLine(2000).has_value()) << "lost ends the stream";
  }
  EXPECT_TRUE(listedLeases(port).empty()) << c.get("/v1/locks").body;
  for (const auto& [lock, owner] : std::vector<std::pair<std::string, std::string>>{
           {"again", reentrant_owner}, {"m1", multi_owner}, {"m2", multi_owner}}) {
    auto late = c.post("/v1/locks/" + lock + "/release", json{{"owner", owner}}.dump());
    EXPECT_EQ(late.status, 404) << lock << " " << late.body;
    EXPECT_EQ(json::parse(late.body)["error"], "lease_lost") << lock;
  }
  EXPECT_EQ(sidecar->stop(), 0) << sidecar->logs();
}

TEST(ForceReleaseTest, RefusedWithoutAdminTokensConfigured) {
  RedisServer redis;
  const int admin_port = pickFreePort();
  auto sidecar = startSidecar(redisBackendYaml(redis.address()), admin_port, /*with_tokens=*/false);
  HttpClient c = HttpClient::tcp(sidecar->port());
  ASSERT_EQ(c.post("/v1/locks/stuck/acquire", "{}").status, 200);
  auto r = adminPost(admin_port, kReleasePath, nullptr);
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"], "admin_token_required");
  EXPECT_EQ(json::parse(c.get("/v1/locks/stuck").body)["held"], true);
  EXPECT_EQ(sidecar->stop(), 0) << sidecar->logs();
}

TEST(ForceReleaseTest, RedlockDeletesTheKeyOnEveryNode) {
  std::vector<std::unique_ptr<RedisServer>> nodes;
  std::string list;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(std::make_unique<RedisServer>());
    list += (i ? ", \"" : "\"") + nodes.back()->address() + "\"";
  }
  const int admin_port = pickFreePort();
  auto sidecar = startSidecar("backend:\n  type: redlock\n  nodes: [" + list +
                                  "]\n  redlock:\n    delayed_restart: false\n",
                              admin_port);
  HttpClient c = HttpClient::tcp(sidecar->port());
  auto held = c.post("/v1/locks/stuck/acquire", R"({"ttl_ms":60000})");
  ASSERT_EQ(held.status, 200) << held.body;
  auto r = adminPost(admin_port, kReleasePath, kAdminToken);
  ASSERT_EQ(r.status, 200) << r.body;
  // The highest counter among the nodes: a node whose late vote was not counted may be ahead.
  EXPECT_GE(json::parse(r.body)["token"].get<uint64_t>(),
            json::parse(held.body)["token"].get<uint64_t>());
  for (auto& node : nodes) EXPECT_EQ(node->cli({"EXISTS", "sidelock:{stuck}"}), "0");
  EXPECT_EQ(c.post("/v1/locks/stuck/acquire", "{}").status, 200) << "free again";
  EXPECT_EQ(sidecar->stop(), 0) << sidecar->logs();
}

}  // namespace
}  // namespace sidelock::testing
