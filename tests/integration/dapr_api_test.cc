// Dapr's lock API served by sidelock (issue 13): conformance with Dapr's request and response
// shapes and status values, against real sidecars on real redis-server processes (and Redlock).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;

constexpr const char* kSecretEnv = "SIDELOCK_DAPR_OWNER_SECRET=shared-secret-0123456789abcdef";

std::unique_ptr<SidecarProcess> sidecarOn(const std::string& backend_yaml,
                                          const std::string& extra_yaml = "",
                                          bool with_secret = true) {
  std::vector<std::string> env;
  if (with_secret) env.push_back(kSecretEnv);
  return std::make_unique<SidecarProcess>(
      SidecarProcess::Options{backend_yaml + extra_yaml, env, /*wait_ready=*/true});
}

json lock(SidecarProcess& s, const std::string& resource, const std::string& owner,
          int expiry_s = 60, const std::string& store = "lockstore") {
  HttpClient c = HttpClient::tcp(s.port());
  auto r = c.post(
      "/v1.0-alpha1/lock/" + store,
      json{{"resourceId", resource}, {"lockOwner", owner}, {"expiryInSeconds", expiry_s}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  return json::parse(r.body);
}

json unlock(SidecarProcess& s, const std::string& resource, const std::string& owner) {
  HttpClient c = HttpClient::tcp(s.port());
  auto r = c.post("/v1.0-alpha1/unlock/lockstore",
                  json{{"resourceId", resource}, {"lockOwner", owner}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  return json::parse(r.body);
}

TEST(DaprApiTest, LockAndUnlockAnswerLikeDaprAcrossSidecarsSharingTheSecret) {
  RedisServer redis;
  auto a = sidecarOn(redisBackendYaml(redis.address()));
  auto b = sidecarOn(redisBackendYaml(redis.address()));

  EXPECT_EQ(lock(*a, "lock1", "vader"), json({{"success", true}}));
  EXPECT_EQ(lock(*b, "lock1", "luke"), json({{"success", false}})) << "held by vader";
  EXPECT_EQ(lock(*a, "lock1", "vader"), json({{"success", false}})) << "a try-lock, not reentrant";

  // The same lock as the v1 API's lock1: v1 clients see it held and cannot take it.
  HttpClient v1 = HttpClient::tcp(a->port());
  auto inspect = json::parse(v1.get("/v1/locks/lock1").body);
  EXPECT_EQ(inspect["held"], true);
  EXPECT_GT(inspect["token"].get<uint64_t>(), 0u);
  // Who holds it: the sidecar's identity, as for a v1 acquire naming no holder (was none).
  EXPECT_TRUE(inspect.contains("holder") && !inspect["holder"].get<std::string>().empty())
      << inspect;
  EXPECT_GT(inspect.value("since_ms", int64_t{0}), 0) << inspect;
  EXPECT_EQ(v1.post("/v1/locks/lock1/acquire", "{}").status, 409);

  EXPECT_EQ(unlock(*b, "lock1", "luke"), json({{"status", 2}})) << "belongs to others";
  EXPECT_EQ(unlock(*b, "lock1", "vader"), json({{"status", 0}})) << "the other sidecar, same owner";
  EXPECT_EQ(unlock(*a, "lock1", "vader"), json({{"status", 1}})) << "does not exist any more";
  EXPECT_EQ(lock(*b, "lock1", "luke"), json({{"success", true}}));

  // The lease expires after expiryInSeconds.
  EXPECT_EQ(lock(*a, "short", "vader", 1), json({{"success", true}}));
  EXPECT_TRUE(pollUntil([&] { return lock(*b, "short", "luke")["success"] == true; }, 5000));
  EXPECT_EQ(a->stop(), 0) << a->logs();
  EXPECT_EQ(b->stop(), 0) << b->logs();
}

TEST(DaprApiTest, UnlockWorksAfterASidecarRestartWhenTheSecretIsConfigured) {
  RedisServer redis;
  auto a = sidecarOn(redisBackendYaml(redis.address()));
  EXPECT_EQ(lock(*a, "job-7", "worker-1"), json({{"success", true}}));
  a->kill();  // a crash: nothing is released on the way out
  a = sidecarOn(redisBackendYaml(redis.address()));
  EXPECT_EQ(unlock(*a, "job-7", "worker-2"), json({{"status", 2}}));
  EXPECT_EQ(unlock(*a, "job-7", "worker-1"), json({{"status", 0}}));
  EXPECT_EQ(a->stop(), 0) << a->logs();

  // Without a configured secret the owner ids change with the process: the lock only expires.
  auto c = sidecarOn(redisBackendYaml(redis.address()), "", /*with_secret=*/false);
  EXPECT_EQ(lock(*c, "job-8", "worker-1"), json({{"success", true}}));
  EXPECT_NE(c->logs().find("dapr.owner_secret"), std::string::npos) << c->logs();
  c->kill();
  c = sidecarOn(redisBackendYaml(redis.address()), "", /*with_secret=*/false);
  EXPECT_EQ(unlock(*c, "job-8", "worker-1"), json({{"status", 2}}));
  EXPECT_EQ(c->stop(), 0) << c->logs();
}

TEST(DaprApiTest, BadRequestsGetDaprErrorsAndChangeNothing) {
  RedisServer redis;
  auto s = sidecarOn(redisBackendYaml(redis.address()), "dapr:\n  stores: [\"lockstore\"]\n");
  HttpClient c = HttpClient::tcp(s->port());
  struct Case {
    std::string path;
    std::string body;
    int status;
    std::string code;
  };
  const std::vector<Case> cases = {
      {"/v1.0-alpha1/lock/other", R"({"resourceId":"r","lockOwner":"o","expiryInSeconds":5})", 400,
       "ERR_LOCK_STORE_NOT_FOUND"},
      {"/v1.0-alpha1/lock/lockstore", R"({"resourceId":"","lockOwner":"o","expiryInSeconds":5})",
       400, "ERR_MALFORMED_REQUEST"},
      {"/v1.0-alpha1/lock/lockstore", R"({"resourceId":"r","lockOwner":"","expiryInSeconds":5})",
       400, "ERR_MALFORMED_REQUEST"},
      {"/v1.0-alpha1/lock/lockstore", R"({"resourceId":"r","lockOwner":"o"})", 400,
       "ERR_MALFORMED_REQUEST"},
      {"/v1.0-alpha1/lock/lockstore", R"({"resourceId":"r","lockOwner":"o","expiryInSeconds":0})",
       400, "ERR_MALFORMED_REQUEST"},
      {"/v1.0-alpha1/lock/lockstore", R"({"resourceId":"r","lockOwner":"o","expiryInSeconds":"5"})",
       400, "ERR_MALFORMED_REQUEST"},
      {"/v1.0-alpha1/lock/lockstore", R"({"resourceId":"a{b","lockOwner":"o","expiryInSeconds":5})",
       400, "ERR_MALFORMED_REQUEST"},
      {"/v1.0-alpha1/lock/lockstore",
       R"({"resourceId":"r","lockOwner":"o","expiryInSeconds":5,"resourceId":"s"})", 400,
       "ERR_MALFORMED_REQUEST"},
      {"/v1.0-alpha1/lock/lockstore", R"({"resourceId":"r","lockOwner":"o","expiryInSeconds":5)",
       400, "ERR_MALFORMED_REQUEST"},
      {"/v1.0-alpha1/unlock/lockstore", R"({"resourceId":"r"})", 400, "ERR_MALFORMED_REQUEST"},
      // A field Dapr does not know is skipped, as Dapr's runtime does, not a malformed request.
      {"/v1.0-alpha1/lock/lockstore",
       R"({"resourceId":"r","lockOwner":"o","expiryInSeconds":0,"extra":{"x":[1]}})", 400,
       "ERR_MALFORMED_REQUEST"},
  };
  for (const Case& k : cases) {
    auto r = c.post(k.path, k.body);
    EXPECT_EQ(r.status, k.status) << k.body << " -> " << r.body;
    auto body = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << r.body;
    EXPECT_EQ(body["errorCode"], k.code) << k.body;
    EXPECT_FALSE(body.value("message", "").empty()) << k.body;
  }
  EXPECT_EQ(json::parse(c.get("/v1/locks/r").body)["held"], false) << "nothing was locked";
  EXPECT_EQ(c.post("/v1.0-alpha1/lock/lockstore", "{}").status, 400);
  // Unknown fields are skipped (Dapr's runtime ignores them, as the Dapr gRPC methods here do).
  auto extra = c.post("/v1.0-alpha1/lock/lockstore",
                      R"({"resourceId":"x1","lockOwner":"o","expiryInSeconds":5,"extra":1})");
  EXPECT_EQ(extra.status, 200) << extra.body;
  EXPECT_EQ(json::parse(extra.body)["success"], true) << extra.body;
  auto unlock = c.post("/v1.0-alpha1/unlock/lockstore",
                       R"({"resourceId":"x1","lockOwner":"o","metadata":{"k":"v"}})");
  EXPECT_EQ(unlock.status, 200) << unlock.body;
  EXPECT_EQ(json::parse(unlock.body)["status"], 0) << unlock.body;
  EXPECT_EQ(s->stop(), 0) << s->logs();
}

TEST(DaprApiTest, ResourceIdsWithSlashesNameTheLockWithTildes) {
  auto s = sidecarOn("backend:\n  type: memory\n");
  EXPECT_EQ(lock(*s, "orders/42", "vader"), json({{"success", true}}));
  EXPECT_EQ(lock(*s, "orders/42", "luke"), json({{"success", false}})) << "held by vader";
  EXPECT_EQ(lock(*s, "orders-42", "luke"), json({{"success", true}})) << "another lock";
  EXPECT_EQ(lock(*s, "a/b/c", "luke"), json({{"success", true}}));
  EXPECT_EQ(lock(*s, "/", "luke"), json({{"success", true}}));

  // The documented lock name: v1 clients and operators reach the same lock.
  HttpClient v1 = HttpClient::tcp(s->port());
  EXPECT_EQ(json::parse(v1.get("/v1/locks/orders~42").body)["held"], true);
  EXPECT_EQ(json::parse(v1.get("/v1/locks/a~b~c").body)["held"], true);
  EXPECT_EQ(v1.post("/v1/locks/orders~42/acquire", "{}").status, 409);

  // '~' itself is refused in a resourceId: "orders~42" would be the lock of "orders/42".
  auto r = v1.post("/v1.0-alpha1/lock/lockstore",
                   R"({"resourceId":"orders~42","lockOwner":"luke","expiryInSeconds":5})");
  EXPECT_EQ(r.status, 400) << r.body;
  auto body = json::parse(r.body, nullptr, false);
  EXPECT_EQ(body.value("errorCode", ""), "ERR_MALFORMED_REQUEST") << r.body;
  EXPECT_NE(body.value("message", "").find("'~' at byte 7 is not allowed"), std::string::npos)
      << r.body;
  r = v1.post("/v1.0-alpha1/lock/lockstore",
              R"({"resourceId":"a b/c","lockOwner":"luke","expiryInSeconds":5})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("0x20 at byte 2"), std::string::npos) << r.body;

  EXPECT_EQ(unlock(*s, "orders/42", "luke"), json({{"status", 2}})) << "belongs to others";
  EXPECT_EQ(unlock(*s, "orders/42", "vader"), json({{"status", 0}}));
  EXPECT_EQ(json::parse(v1.get("/v1/locks/orders~42").body)["held"], false);
  EXPECT_EQ(s->stop(), 0) << s->logs();
}

// What Dapr SDKs poll before their first call (tests/integration/dapr-sdk/ runs the real JS SDK).
TEST(DaprApiTest, MetadataAndHealthRoutesAnswerInDaprsShape) {
  auto s = sidecarOn("backend:\n  type: memory\n");  // dapr.stores ["*"], dapr.app_id default
  HttpClient c = HttpClient::tcp(s->port());
  auto r = c.get("/v1.0/metadata");
  ASSERT_EQ(r.status, 200) << r.body;
  auto meta = json::parse(r.body);
  EXPECT_EQ(meta["id"], "sidelock");
  EXPECT_FALSE(meta.value("runtimeVersion", "").empty()) << meta;
  EXPECT_EQ(meta["components"], json::array()) << "\"*\" names no store";
  EXPECT_EQ(meta["enabledFeatures"], json::array());
  for (const char* probe : {"/v1.0/healthz", "/v1.0/healthz/outbound"}) {
    r = c.get(probe);
    EXPECT_EQ(r.status, 204) << probe;
    EXPECT_EQ(r.body, "") << probe;
    EXPECT_EQ(r.headers.count("content-length"), 0u) << probe;
  }
  EXPECT_EQ(c.post("/v1.0/metadata", "{}").status, 405);
  EXPECT_EQ(s->stop(), 0) << s->logs();

  s = sidecarOn("backend:\n  type: memory\ndapr:\n  app_id: orders\n  stores: [a, b]\n");
  meta = json::parse(HttpClient::tcp(s->port()).get("/v1.0/metadata").body);
  EXPECT_EQ(meta["id"], "orders");
  ASSERT_EQ(meta["components"].size(), 2u) << meta;
  EXPECT_EQ(meta["components"][1], json({{"name", "b"},
                                         {"type", "lock.redis"},
                                         {"version", "v1"},
                                         {"capabilities", json::array()}}));
  EXPECT_EQ(s->stop(), 0) << s->logs();

  s = sidecarOn("backend:\n  type: memory\ndapr:\n  enabled: false\n");
  EXPECT_EQ(HttpClient::tcp(s->port()).get("/v1.0/metadata").status, 404);
  EXPECT_EQ(HttpClient::tcp(s->port()).get("/v1.0/healthz").status, 404);
  EXPECT_EQ(s->stop(), 0) << s->logs();
}

TEST(DaprApiTest, WorksOnRedlock) {
  std::vector<std::unique_ptr<RedisServer>> nodes;
  std::string list;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(std::make_unique<RedisServer>());
    list += (i ? ", \"" : "\"") + nodes.back()->address() + "\"";
  }
  auto s = sidecarOn("backend:\n  type: redlock\n  nodes: [" + list +
                     "]\n  redlock:\n    delayed_restart: false\n");
  EXPECT_EQ(lock(*s, "lock1", "vader"), json({{"success", true}}));
  EXPECT_EQ(lock(*s, "lock1", "luke"), json({{"success", false}}));
  EXPECT_EQ(unlock(*s, "lock1", "luke"), json({{"status", 2}}));
  EXPECT_EQ(unlock(*s, "lock1", "vader"), json({{"status", 0}}));
  for (auto& node : nodes) EXPECT_EQ(node->cli({"EXISTS", "sidelock:{lock1}"}), "0");
  EXPECT_EQ(s->stop(), 0) << s->logs();
}

}  // namespace
}  // namespace sidelock::testing
