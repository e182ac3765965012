// The sidecar under the minimal Redis ACL that README.md gives ("Access control", "Redis ACL"):
// the test reads the ACL SETUSER line from the README itself, so the documented ACL is the one
// proven here. Every lock operation works end to end (acquire, wait + pub/sub wake-up, extend,
// inspect, release, list) and the ACL is shown to be in force (commands and keys outside it are
// refused for the same user). The Cluster line is proven on a three-master cluster.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "support/http_client.h"
#include "support/redis_cluster.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;

constexpr const char* kPassword = "acl-test-password";

/// The words of README's `index`-th `ACL SETUSER sidelock ...` line (0: the base ACL; 2: the
/// Cluster commands), with its placeholder password replaced.
std::vector<std::string> readmeAcl(int index = 0) {
  std::ifstream in(std::string(SIDELOCK_SOURCE_DIR) + "/README.md");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("ACL SETUSER sidelock ", 0) != 0 || index-- > 0) continue;
    std::vector<std::string> words;
    std::istringstream split(line);
    for (std::string w; split >> w;)
      words.push_back(w == ">CHANGE-ME" ? std::string(">") + kPassword : w);
    return words;
  }
  return {};
}

class RedisAclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    acl_ = readmeAcl();
    ASSERT_GT(acl_.size(), 5u) << "README.md has no \"ACL SETUSER sidelock\" line";
    ASSERT_EQ(redis_.cli(acl_), "OK") << "README's ACL does not parse";
    sidecar_ = startSidecar();
  }
  void TearDown() override {
    for (auto* s : {&sidecar_, &other_sidecar_}) {
      if (*s) {
        EXPECT_EQ((*s)->stop(), 0) << (*s)->logs();
      }
    }
  }
  std::unique_ptr<SidecarProcess> startSidecar(const std::string& extra_yaml = "") {
    return std::make_unique<SidecarProcess>(SidecarProcess::Options{
        "backend:\n  type: redis\n  nodes: [\"" + redis_.address() +
            "\"]\n  username_env: SIDELOCK_ACL_TEST_USER\n  password_env: SIDELOCK_ACL_TEST_PASS\n" +
            extra_yaml,
        {"SIDELOCK_ACL_TEST_USER=sidelock", std::string("SIDELOCK_ACL_TEST_PASS=") + kPassword},
        /*wait_ready=*/true});
  }
  /// redis-cli as the sidecar's ACL user.
  std::string asSidecarUser(std::vector<std::string> args) {
    std::vector<std::string> full = {"--user", "sidelock", "--pass", kPassword,
                                     "--no-auth-warning"};
    full.insert(full.end(), args.begin(), args.end());
    return redis_.cli(full);
  }

  RedisServer redis_;
  std::vector<std::string> acl_;
  std::unique_ptr<SidecarProcess> sidecar_;
  std::unique_ptr<SidecarProcess> other_sidecar_;
};

TEST_F(RedisAclTest, EveryLockOperationWorksUnderTheReadmeAcl) {
  HttpClient c = HttpClient::tcp(sidecar_->port());
  auto r = c.post("/v1/locks/acl-lock/acquire", R"({"ttl_ms":30000})");
  ASSERT_EQ(r.status, 200) << r.body << sidecar_->logs();
  const std::string owner = json::parse(r.body)["owner"];

  // A waiter on another sidecar queues (SUBSCRIBE on the release channel) and is woken by the
  // release script's PUBLISH. (A waiter on the same sidecar would be handed the lock in the
  // release's own round trip, without pub/sub.) Its backoff is set far beyond the test so that
  // only the notification can get it going: a backoff retry landing just after the release would
  // be granted without a wake-up.
  other_sidecar_ = startSidecar("locks:\n  retry_min_ms: 60000\n  retry_max_ms: 60000\n");
  HttpClient other = HttpClient::tcp(other_sidecar_->port());
  HttpClient waiter = HttpClient::tcp(other_sidecar_->port());
  waiter.sendRequest("POST", "/v1/locks/acl-lock/acquire", R"({"ttl_ms":5000,"wait_ms":20000})");
  ASSERT_TRUE(waitForWaiters(other, "acl-lock", 1));
  ASSERT_TRUE(pollUntil([&] {
    return redis_.cli({"PUBSUB", "NUMSUB", "sidelock:released:{acl-lock}"}).find("\n1") !=
           std::string::npos;
  })) << "the waiter's SUBSCRIBE was refused:\n"
      << other_sidecar_->logs();

  r = c.post("/v1/locks/acl-lock/extend", json{{"owner", owner}, {"ttl_ms", 30000}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  r = c.get("/v1/locks/acl-lock");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["held"], true);
  EXPECT_GT(json::parse(r.body)["token"].get<uint64_t>(), 0u);

  r = c.post("/v1/locks/acl-lock/release", json{{"owner", owner}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  auto woken = waiter.readResponse(25000);
  ASSERT_TRUE(woken);
  EXPECT_EQ(woken->status, 200) << woken->body;
  const std::string woken_owner = json::parse(woken->body)["owner"];
  EXPECT_GE(metricValue(other.get("/metrics").body, "sidelock_wakeups_total"), 1)
      << "granted, but not woken by the release's PUBLISH";

  // A waiter on the same sidecar is handed the lock by the release script itself.
  HttpClient local_waiter = HttpClient::tcp(sidecar_->port());
  local_waiter.sendRequest("POST", "/v1/locks/acl-lock/acquire", R"({"wait_ms":20000})");
  ASSERT_TRUE(waitForWaiters(c, "acl-lock", 1));
  r = other.post("/v1/locks/acl-lock/release", json{{"owner", woken_owner}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  auto handed = local_waiter.readResponse(25000);
  ASSERT_TRUE(handed);
  EXPECT_EQ(handed->status, 200) << handed->body;

  // The other kinds' scripts (sorted sets): a permit, a reader and a fair lock, the whole way.
  r = c.post("/v1/semaphores/acl-sem/acquire", R"({"limit":2})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string permit = json::parse(r.body)["permit"];
  EXPECT_EQ(c.post("/v1/semaphores/acl-sem/extend", json{{"permit", permit}}.dump()).status, 200);
  EXPECT_EQ(c.get("/v1/semaphores/acl-sem").status, 200);
  EXPECT_EQ(c.post("/v1/semaphores/acl-sem/release", json{{"permit", permit}}.dump()).status, 200);
  r = c.post("/v1/locks/acl-rw/acquire", R"({"mode":"shared"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string reader = json::parse(r.body)["owner"];
  EXPECT_EQ(c.post("/v1/locks/acl-rw/acquire", R"({"wait_ms":50})").status, 409)
      << "a queued writer marks itself waiting";
  EXPECT_EQ(c.post("/v1/locks/acl-rw/extend", json{{"owner", reader}}.dump()).status, 200);
  EXPECT_EQ(c.get("/v1/locks/acl-rw").status, 200);
  EXPECT_EQ(c.post("/v1/locks/acl-rw/release", json{{"owner", reader}}.dump()).status, 200);
  // A fair holder, and a fair waiter that joins the queue and gives up (withdraws).
  r = c.post("/v1/locks/acl-fair/acquire", R"({"fair":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(c.post("/v1/locks/acl-fair/acquire", R"({"fair":true,"wait_ms":50})").status, 409);
  EXPECT_EQ(
      c.post("/v1/locks/acl-fair/release", json{{"owner", json::parse(r.body)["owner"]}}.dump())
          .status,
      200);

  for (auto* s : {sidecar_.get(), other_sidecar_.get()}) {
    HttpClient m = HttpClient::tcp(s->port());
    EXPECT_EQ(
        metricValue(m.get("/metrics").body, "sidelock_backend_errors_total{kind=\"reply\",node=\"" +
                                                redis_.address() + "\"}"),
        0)
        << "Redis refused something the sidecar sent:\n"
        << s->logs();
    EXPECT_EQ(s->logs().find("NOPERM"), std::string::npos) << s->logs();
  }
  r = c.get("/v1/locks");
  EXPECT_EQ(r.status, 200);
}

TEST_F(RedisAclTest, TheAclIsInForce) {
  // Commands the sidecar never sends, and keys and channels outside its prefix, are refused.
  EXPECT_NE(asSidecarUser({"FLUSHALL"}).find("NOPERM"), std::string::npos);
  EXPECT_NE(asSidecarUser({"KEYS", "*"}).find("NOPERM"), std::string::npos);
  EXPECT_NE(asSidecarUser({"CONFIG", "SET", "appendonly", "yes"}).find("NOPERM"),
            std::string::npos);
  EXPECT_NE(asSidecarUser({"SET", "other-app:key", "1"}).find("NOPERM"), std::string::npos);
  EXPECT_NE(asSidecarUser({"EVAL", "return redis.call('SET', KEYS[1], 1)", "1", "other-app:key"})
                .find("NOPERM"),
            std::string::npos);
  EXPECT_NE(asSidecarUser({"PUBLISH", "other-app:channel", "x"}).find("NOPERM"), std::string::npos);
  // ... while its own keys are reachable (the control: the user and password are right).
  EXPECT_EQ(asSidecarUser({"SET", "sidelock:probe", "1"}), "OK");
  EXPECT_EQ(asSidecarUser({"PING"}), "PONG");
}

// The elections' scripts (src/redis/lua/election_*.lua) also write and read the leader's record,
// a hash: HSET and HMGET are in the ACL, on the prefix only. (Their routes come with the lock
// service; until then, the commands the scripts call, under the same ACL check.)
TEST_F(RedisAclTest, TheElectionsRecordIsReachable) {
  EXPECT_EQ(asSidecarUser({"HSET", "sidelock:{e}:el:leader", "candidate", "c", "value", "v"}), "2");
  EXPECT_EQ(asSidecarUser({"HMGET", "sidelock:{e}:el:leader", "candidate", "value"}), "c\nv");
  EXPECT_NE(asSidecarUser({"HSET", "other-app:hash", "f", "v"}).find("NOPERM"), std::string::npos);
}

// Redis Cluster under README's ACL plus its Cluster line, on every node: the slot map, a waiter
// on another sidecar woken by the release's SPUBLISH (SSUBSCRIBE), and a lock event stream.
TEST(RedisAclClusterTest, TwoSidecarsWorkUnderTheReadmeClusterAcl) {
  const std::vector<std::string> cluster_acl = readmeAcl(2);
  ASSERT_NE(std::find(cluster_acl.begin(), cluster_acl.end(), "+spublish"), cluster_acl.end())
      << "README's third ACL line is not the Cluster one";
  RedisCluster cluster(3);
  for (size_t i = 0; i < cluster.size(); ++i) {
    ASSERT_EQ(cluster.server(i).cli(readmeAcl()), "OK");
    ASSERT_EQ(cluster.server(i).cli(cluster_acl), "OK") << "README's Cluster ACL does not parse";
  }
  auto start = [&](const std::string& extra_yaml) {
    return std::make_unique<SidecarProcess>(SidecarProcess::Options{
        "backend:\n  type: cluster\n  nodes: [\"" + cluster.address(0) +
            "\"]\n  command_timeout_ms: 3000\n  username_env: SIDELOCK_ACL_TEST_USER\n"
            "  password_env: SIDELOCK_ACL_TEST_PASS\n" +
            extra_yaml,
        {"SIDELOCK_ACL_TEST_USER=sidelock", std::string("SIDELOCK_ACL_TEST_PASS=") + kPassword},
        /*wait_ready=*/true});
  };
  auto a = start("");
  // Only the wake-up can get B's waiter going: its backoff is far beyond the test.
  auto b = start("locks:\n  retry_min_ms: 60000\n  retry_max_ms: 60000\n");
  HttpClient ca = HttpClient::tcp(a->port());
  HttpClient cb = HttpClient::tcp(b->port());
  HttpClient events = HttpClient::tcp(b->port());
  events.sendRequest("GET", "/v1/locks/acl-lock/events");
  ASSERT_TRUE(events.readStreamHead(10000).has_value());
  ASSERT_TRUE(events.readStreamLine(5000).has_value()) << "no state line";
  auto r = ca.post("/v1/locks/acl-lock/acquire", R"({"ttl_ms":30000})");
  ASSERT_EQ(r.status, 200) << r.body << a->logs();
  const std::optional<std::string> acquired = events.readStreamLine(5000);
  ASSERT_TRUE(acquired.has_value());
  EXPECT_EQ(json::parse(*acquired)["event"], "acquired") << *acquired;
  HttpClient waiter = HttpClient::tcp(b->port());
  waiter.sendRequest("POST", "/v1/locks/acl-lock/acquire", R"({"ttl_ms":5000,"wait_ms":20000})");
  ASSERT_TRUE(waitForWaiters(cb, "acl-lock", 1));
  r = ca.post("/v1/locks/acl-lock/release", json{{"owner", json::parse(r.body)["owner"]}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  auto woken = waiter.readResponse(25000);
  ASSERT_TRUE(woken);
  EXPECT_EQ(woken->status, 200) << woken->body;
  EXPECT_GE(metricValue(cb.get("/metrics").body, "sidelock_wakeups_total"), 1)
      << "granted, but not woken by the release's SPUBLISH:\n"
      << b->logs();
  for (auto* s : {a.get(), b.get()}) {
    EXPECT_EQ(s->logs().find("NOPERM"), std::string::npos) << s->logs();
    EXPECT_EQ(s->stop(), 0) << s->logs();
  }
}

}  // namespace
}  // namespace sidelock::testing
