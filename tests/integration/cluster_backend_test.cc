// The real binary with `backend.type: cluster` over a real three-master Redis Cluster made by
// `redis-cli --cluster create`, configured with one seed node only: locks spread over every
// master, survive a live reshard, follow MOVED and ASK, and wake waiters on other sidecars
// through sharded pub/sub wherever their slot lives.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "redis/slot_map.h"
#include "support/http_client.h"
#include "support/redis_cluster.h"
#include "support/redis_link.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"
#include "support/test_pki.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;

constexpr int kLocks = 60;

std::string sidecarYaml(const std::string& seed, const std::string& extra = "") {
  // Generous command budget: two cores are shared with other builds and tests.
  return "backend:\n  type: cluster\n  nodes: [\"" + seed +
         "\"]\n  reconnect_min_ms: 20\n  reconnect_max_ms: 200\n  health_interval_ms: 100\n"
         "  command_timeout_ms: 3000\n" +
         extra;
}

/// The sidecar comes to say `reason` in /readyz (503) and refuses to grant.
void expectRefused(SidecarProcess& sidecar, const std::string& reason) {
  HttpClient c = HttpClient::tcp(sidecar.port());
  HttpResponse not_ready;
  EXPECT_TRUE(pollUntil([&] {
    not_ready = c.get("/readyz");
    return not_ready.body.find(reason) != std::string::npos;
  })) << not_ready.body;
  EXPECT_EQ(not_ready.status, 503);
  auto r = c.post("/v1/locks/x/acquire", "{}");
  EXPECT_EQ(r.status, 503) << r.body;
}

class ClusterBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<RedisCluster>(3);
    sidecar_ = std::make_unique<SidecarProcess>(
        SidecarProcess::Options{sidecarYaml(cluster_->address(1)), {}, /*wait_ready=*/true});
  }

  std::string lockKey(const std::string& name) { return "sidelock:{" + name + "}"; }
  /// The value of `key` on the master that serves its slot now.
  std::string valueOnOwner(const std::string& key) {
    const int owner = cluster_->ownerOf(cluster_->keySlot(key));
    return owner < 0 ? "" : cluster_->server(static_cast<size_t>(owner)).cli({"GET", key});
  }
  int64_t metric(const std::string& series) {
    HttpClient c = HttpClient::tcp(sidecar_->port());
    return metricValue(c.get("/metrics").body, series);
  }
  /// Acquires kLocks names and returns name -> owner.
  std::map<std::string, std::string> acquireAll(HttpClient& c, int64_t ttl_ms) {
    std::map<std::string, std::string> owners;
    for (int i = 0; i < kLocks; ++i) {
      const std::string name = "lock-" + std::to_string(i);
      auto r = c.post("/v1/locks/" + name + "/acquire", json{{"ttl_ms", ttl_ms}}.dump());
      EXPECT_EQ(r.status, 200) << name << ": " << r.body;
      if (r.status == 200) owners[name] = json::parse(r.body)["owner"];
    }
    return owners;
  }

  /// A second sidecar on the same cluster whose waiters retry only once a minute: only a
  /// published release can get them a lock within seconds.
  std::unique_ptr<SidecarProcess> slowPollingSidecar(size_t seed) {
    return std::make_unique<SidecarProcess>(SidecarProcess::Options{
        sidecarYaml(cluster_->address(seed),
                    "locks:\n  retry_min_ms: 60000\n  retry_max_ms: 60000\n"),
        {},
        /*wait_ready=*/true});
  }
  /// Acquires `name` through our sidecar (returns the owner) and queues a waiter for it on
  /// `other`, whose connection is left in `waiter`.
  std::string holdWithWaiter(SidecarProcess& other, const std::string& name,
                             std::unique_ptr<HttpClient>* waiter) {
    HttpClient holder = HttpClient::tcp(sidecar_->port());
    auto r = holder.post("/v1/locks/" + name + "/acquire", R"({"ttl_ms":120000})");
    EXPECT_EQ(r.status, 200) << r.body;
    *waiter = std::make_unique<HttpClient>(HttpClient::tcp(other.port()));
    (*waiter)->sendRequest("POST", "/v1/locks/" + name + "/acquire", R"({"wait_ms":100000})");
    HttpClient watcher = HttpClient::tcp(other.port());
    EXPECT_TRUE(waitForWaiters(watcher, name, 1));
    return r.status == 200 ? json::parse(r.body)["owner"].get<std::string>() : "";
  }
  /// Releases through our sidecar; the waiter must get the lock far sooner than its next poll.
  void releaseAndExpectWakeUp(const std::string& name, const std::string& owner,
                              HttpClient& waiter) {
    HttpClient holder = HttpClient::tcp(sidecar_->port());
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(holder.post("/v1/locks/" + name + "/release", json{{"owner", owner}}.dump()).status,
              200);
    auto got = waiter.readResponse(30'000);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->status, 200) << got->body;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20)) << name;
  }
  /// Subscribers of `name`'s release channel on node `n` (PUBSUB SHARDNUMSUB).
  bool subscribedOn(size_t n, const std::string& name) {
    return cluster_->server(n)
        .cli({"PUBSUB", "SHARDNUMSUB", "sidelock:released:{" + name + "}"})
        .ends_with("\n1");
  }

  std::unique_ptr<RedisCluster> cluster_;
  std::unique_ptr<SidecarProcess> sidecar_;
};

TEST_F(ClusterBackendTest, HashSlotsMatchClusterKeyslot) {
  RedisLink link(cluster_->server(0).port());
  for (int i = 0; i < 300; ++i) {
    for (const std::string& key :
         {"sidelock:{lock-" + std::to_string(i) + "}", "plain-" + std::to_string(i * 7919),
          "sidelock:released:{x" + std::to_string(i) + "}", "{}" + std::to_string(i)}) {
      auto slot = link.command({"CLUSTER", "KEYSLOT", key});
      ASSERT_EQ(slot.size(), 1u);
      EXPECT_EQ(backend::clusterKeySlot(key), slot[0]) << key;
    }
  }
}

TEST_F(ClusterBackendTest, LocksThroughOneSeedLandOnEveryMaster) {
  HttpClient c = HttpClient::tcp(sidecar_->port());
  auto ready = c.get("/readyz");
  ASSERT_EQ(ready.status, 200) << ready.body;
  json nodes = json::parse(ready.body)["nodes"];
  ASSERT_EQ(nodes.size(), 3u) << ready.body;
  std::set<std::string> shown;
  for (const auto& n : nodes) {
    EXPECT_EQ(n["state"], "up") << ready.body;
    shown.insert(n["node"].get<std::string>());
  }
  for (size_t i = 0; i < cluster_->size(); ++i) {
    EXPECT_EQ(shown.count(cluster_->address(i)), 1u) << "every master is listed: " << ready.body;
    EXPECT_EQ(metric("sidelock_backend_up{node=\"" + cluster_->address(i) + "\"}"), 1);
  }

  auto owners = acquireAll(c, 60'000);
  ASSERT_EQ(owners.size(), static_cast<size_t>(kLocks));
  std::map<int, int> per_master;
  for (const auto& [name, owner] : owners) {
    const int slot = cluster_->keySlot(lockKey(name));
    EXPECT_EQ(cluster_->keySlot(lockKey(name) + ":token"), slot);
    const int master = cluster_->ownerOf(slot);
    ASSERT_GE(master, 0);
    ++per_master[master];
    EXPECT_EQ(cluster_->server(static_cast<size_t>(master)).cli({"GET", lockKey(name)}), owner)
        << name << " is on the master of slot " << slot;
  }
  EXPECT_EQ(per_master.size(), 3u) << "60 names spread over all three masters";

  // Busy, inspect, extend and release all reach the right master too.
  EXPECT_EQ(c.post("/v1/locks/lock-0/acquire", "{}").status, 409);
  auto inspected = c.get("/v1/locks/lock-1");
  ASSERT_EQ(inspected.status, 200) << inspected.body;
  EXPECT_EQ(json::parse(inspected.body)["held"], true) << inspected.body;
  EXPECT_EQ(c.post("/v1/locks/lock-1/extend",
                   json{{"owner", owners["lock-1"]}, {"ttl_ms", 90'000}}.dump())
                .status,
            200);
  for (const auto& [name, owner] : owners) {
    EXPECT_EQ(c.post("/v1/locks/" + name + "/release", json{{"owner", owner}}.dump()).status, 200)
        << name;
    EXPECT_EQ(valueOnOwner(lockKey(name)), "") << name;
  }
  EXPECT_EQ(metric("sidelock_backend_cluster_redirects_total{kind=\"moved\"}"), -1)
      << "no redirection without a topology change";
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

TEST_F(ClusterBackendTest, LiveReshardLosesNoLockAndEveryReleaseSucceeds) {
  HttpClient c = HttpClient::tcp(sidecar_->port());
  auto owners = acquireAll(c, 300'000);
  ASSERT_EQ(owners.size(), static_cast<size_t>(kLocks));
  const int before0 = cluster_->slotCount(0);

  // Keep the sidecar busy with every lock while thousands of slots move underneath.
  std::atomic<bool> resharding{true};
  std::atomic<int> extended{0};
  std::atomic<int> failed{0};
  std::string first_failure;
  std::thread traffic([&] {
    HttpClient t = HttpClient::tcp(sidecar_->port());
    while (resharding) {
      for (const auto& [name, owner] : owners) {
        auto r = t.post("/v1/locks/" + name + "/extend",
                        json{{"owner", owner}, {"ttl_ms", 300'000}}.dump());
        if (r.status == 200) {
          ++extended;
        } else if (failed++ == 0) {
          first_failure = name + ": " + std::to_string(r.status) + " " + r.body;
        }
      }
    }
  });
  const int rc = cluster_->reshard(0, 2, 3000);
  const std::string reshard_output = cluster_->lastOutput();
  const bool consistent = cluster_->waitConsistent();
  resharding = false;
  traffic.join();
  ASSERT_EQ(rc, 0) << reshard_output;
  ASSERT_TRUE(consistent) << cluster_->lastOutput();
  EXPECT_EQ(cluster_->slotCount(0), before0 - 3000);
  EXPECT_GT(extended.load(), 0);
  EXPECT_EQ(failed.load(), 0) << "first failure: " << first_failure;

  for (const auto& [name, owner] : owners) {
    EXPECT_EQ(valueOnOwner(lockKey(name)), owner) << name << " survived the reshard";
  }
  for (const auto& [name, owner] : owners) {
    auto r = c.post("/v1/locks/" + name + "/release", json{{"owner", owner}}.dump());
    EXPECT_EQ(r.status, 200) << name << ": " << r.body;
    EXPECT_EQ(valueOnOwner(lockKey(name)), "") << name;
  }
  const int64_t moved = metric("sidelock_backend_cluster_redirects_total{kind=\"moved\"}");
  const int64_t ask = metric("sidelock_backend_cluster_redirects_total{kind=\"ask\"}");
  const int64_t changes =
      metric("sidelock_backend_topology_changes_total{reason=\"slots_refresh\"}") +
      std::max<int64_t>(0, metric("sidelock_backend_topology_changes_total{reason=\"moved\"}"));
  std::cout << "reshard of 3000 slots: " << extended.load() << " extends, MOVED " << moved
            << ", ASK " << ask << ", topology changes " << changes << "\n";
  EXPECT_GT(changes, 0) << "the sidecar noticed the new slot owners";
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

// A slot migrated by hand, one step at a time, so both redirections happen for sure: ASK while
// the keys already live on the importing node, MOVED once the slot belongs to it.
TEST_F(ClusterBackendTest, FollowsAskDuringMigrationAndMovedAfterIt) {
  HttpClient c = HttpClient::tcp(sidecar_->port());
  const std::string name = "migrating";
  auto r = c.post("/v1/locks/" + name + "/acquire", R"({"ttl_ms":300000})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string owner = json::parse(r.body)["owner"];
  const uint64_t token = json::parse(r.body)["token"];
  const int slot = cluster_->keySlot(lockKey(name));
  const size_t from = static_cast<size_t>(cluster_->ownerOf(slot));
  const size_t to = (from + 1) % cluster_->size();
  ASSERT_TRUE(cluster_->startMigration(
      slot, from, to, {lockKey(name), lockKey(name) + ":token", lockKey(name) + ":holder"}));

  // The keys left the source: it answers ASK, the sidecar asks the importing node.
  r = c.post("/v1/locks/" + name + "/extend", json{{"owner", owner}, {"ttl_ms", 300'000}}.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(metric("sidelock_backend_cluster_redirects_total{kind=\"ask\"}"), 1);
  EXPECT_EQ(metric("sidelock_backend_cluster_redirects_total{kind=\"moved\"}"), -1)
      << "ASK does not change the map";

  ASSERT_TRUE(cluster_->finishMigration(slot, to));
  ASSERT_TRUE(cluster_->waitConsistent());
  // The source now answers MOVED: the map is patched and the call lands on the new owner.
  r = c.post("/v1/locks/" + name + "/acquire", "{}");
  EXPECT_EQ(r.status, 409) << "still held after the move: " << r.body;
  EXPECT_GE(metric("sidelock_backend_cluster_redirects_total{kind=\"moved\"}"), 1);
  EXPECT_GE(metric("sidelock_backend_topology_changes_total{reason=\"moved\"}"), 1);
  ASSERT_EQ(c.post("/v1/locks/" + name + "/release", json{{"owner", owner}}.dump()).status, 200);
  EXPECT_EQ(cluster_->server(to).cli({"EXISTS", lockKey(name)}), "0");
  // The counter moved with the lock: the next token is above the first.
  r = c.post("/v1/locks/" + name + "/acquire", "{}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_GT(json::parse(r.body)["token"].get<uint64_t>(), token);
  // A lease without a lock-delay keeps no delay key (extend and release above named none, so
  // the hand migration met no TRYAGAIN); one with a delay keeps it in its slot, on its master,
  // and after its expiry the lock stays out of reach for the delay (README "Lock-delay").
  EXPECT_EQ(cluster_->server(to).cli({"EXISTS", lockKey(name) + ":delay"}), "0");
  r = c.post("/v1/locks/delayed/acquire", R"({"ttl_ms":200,"lock_delay_ms":700})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(valueOnOwner(lockKey("delayed") + ":delay"), "700");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  r = c.post("/v1/locks/delayed/acquire", "{}");
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_EQ(json::parse(r.body)["reason"], "lock_delay") << r.body;
  // Readers too: their script names the delay key, in the same slot (a CROSSSLOT error otherwise).
  r = c.post("/v1/locks/delayed/acquire", R"({"mode":"shared"})");
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_EQ(json::parse(r.body)["reason"], "lock_delay") << r.body;
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

// While a slot's new owner is known to the old master but not yet to the new one, the two name
// each other (MOVED back and forth). The sidecar waits for the move to settle within the command
// budget, then goes where it settled: it used to stop after five hops and answer the raw MOVED
// as 503 backend_error in a millisecond (found from outside).
TEST_F(ClusterBackendTest, RedirectsInACircleAreWaitedOutNotAnswered) {
  HttpClient c = HttpClient::tcp(sidecar_->port());
  const std::string name = "pingpong";
  const int slot = cluster_->keySlot(lockKey(name));
  const size_t from = static_cast<size_t>(cluster_->ownerOf(slot));
  const size_t to = (from + 1) % cluster_->size();
  ASSERT_EQ(cluster_->server(from).cli(
                {"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", cluster_->nodeId(to)}),
            "OK");
  std::thread settle([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cluster_->finishMigration(slot, to);
  });
  auto r = c.post("/v1/locks/" + name + "/acquire", "{}");
  settle.join();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(cluster_->server(to).cli({"EXISTS", lockKey(name)}), "1") << "granted where it settled";
  ASSERT_TRUE(cluster_->waitConsistent());
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

// A waiter on one sidecar wakes as soon as another sidecar releases, for a lock on each master:
// its subscription sits on the master serving the lock's slot, wherever that is.
TEST_F(ClusterBackendTest, WakeUpsReachWaitersOnEveryShard) {
  auto waiter_side = slowPollingSidecar(2);
  // One lock name per master.
  std::map<int, std::string> names;
  for (int i = 0; names.size() < 3 && i < 1000; ++i) {
    const std::string name = "wake-" + std::to_string(i);
    names.emplace(cluster_->ownerOf(cluster_->keySlot(lockKey(name))), name);
  }
  ASSERT_EQ(names.size(), 3u);
  for (const auto& [master, name] : names) {
    std::unique_ptr<HttpClient> waiter;
    const std::string owner = holdWithWaiter(*waiter_side, name, &waiter);
    // The release channel is subscribed on the master of the lock's slot (sharded pub/sub).
    // Captured by copy: a lambda may not capture a structured binding before C++20's P1091
    // (clang 14 refuses it).
    ASSERT_TRUE(pollUntil(
        [&, m = master, n = name] { return subscribedOn(static_cast<size_t>(m), n); }))
        << name << " on master " << master;
    releaseAndExpectWakeUp(name, owner, *waiter);
  }
  HttpClient m = HttpClient::tcp(waiter_side->port());
  EXPECT_GE(metricValue(m.get("/metrics").body, "sidelock_wakeups_total"), 3);
  EXPECT_EQ(waiter_side->stop(), 0) << waiter_side->logs();
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

TEST_F(ClusterBackendTest, HandOffToALocalWaiterWorksAsOnSingleRedis) {
  HttpClient holder = HttpClient::tcp(sidecar_->port());
  auto r = holder.post("/v1/locks/handed/acquire", R"({"ttl_ms":120000})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string owner = json::parse(r.body)["owner"];
  const uint64_t token = json::parse(r.body)["token"];
  HttpClient waiter = HttpClient::tcp(sidecar_->port());
  waiter.sendRequest("POST", "/v1/locks/handed/acquire", R"({"wait_ms":100000})");
  ASSERT_TRUE(waitForWaiters(holder, "handed", 1));
  ASSERT_EQ(holder.post("/v1/locks/handed/release", json{{"owner", owner}}.dump()).status, 200);
  auto got = waiter.readResponse(30'000);
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ(got->status, 200) << got->body;
  const json grant = json::parse(got->body);
  EXPECT_GT(grant["token"].get<uint64_t>(), token);
  EXPECT_EQ(valueOnOwner(lockKey("handed")), grant["owner"].get<std::string>());
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

TEST_F(ClusterBackendTest, AMasterDownShowsInReadyzAndMetricsUntilItIsBack) {
  HttpClient c = HttpClient::tcp(sidecar_->port());
  const std::string dead = cluster_->address(0);
  cluster_->server(0).kill();
  HttpResponse not_ready;
  ASSERT_TRUE(pollUntil([&] {
    not_ready = c.get("/readyz");
    return not_ready.status == 503;
  })) << not_ready.body;
  EXPECT_NE(not_ready.body.find("redis cluster master " + dead + " is down"), std::string::npos)
      << not_ready.body;
  EXPECT_EQ(json::parse(not_ready.body)["nodes"].size(), 3u) << not_ready.body;
  EXPECT_TRUE(pollUntil([&] {
    return metricValue(c.get("/metrics").body, "sidelock_backend_up{node=\"" + dead + "\"}") == 0;
  }));
  // Back with its nodes.conf: it rejoins as the same master and the sidecar reconnects.
  cluster_->server(0).restart();
  ASSERT_TRUE(cluster_->waitConsistent()) << cluster_->lastOutput();
  EXPECT_TRUE(pollUntil([&] { return c.get("/readyz").status == 200; }, 30'000))
      << sidecar_->logs();
  EXPECT_EQ(c.post("/v1/locks/after-restart/acquire", "{}").status, 200);
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

// The waiter's subscription follows its lock's slot: moved to another master while a waiter
// waits, the release still wakes it at once.
TEST_F(ClusterBackendTest, SubscriptionFollowsItsSlotToAnotherMaster) {
  auto waiter_side = slowPollingSidecar(0);
  const std::string name = "wanderer";
  std::unique_ptr<HttpClient> waiter;
  const std::string owner = holdWithWaiter(*waiter_side, name, &waiter);
  const int slot = cluster_->keySlot(lockKey(name));
  const size_t from = static_cast<size_t>(cluster_->ownerOf(slot));
  const size_t to = (from + 1) % cluster_->size();
  ASSERT_TRUE(pollUntil([&] { return subscribedOn(from, name); }));

  // Move the slot with its keys, as redis-cli --cluster reshard does for each slot.
  ASSERT_TRUE(cluster_->startMigration(
      slot, from, to, {lockKey(name), lockKey(name) + ":token", lockKey(name) + ":holder"}));
  ASSERT_TRUE(cluster_->finishMigration(slot, to));
  ASSERT_TRUE(cluster_->waitConsistent()) << cluster_->lastOutput();
  EXPECT_TRUE(pollUntil([&] { return subscribedOn(to, name); }))
      << "the waiter's sidecar re-subscribed on the new owner: " << waiter_side->logs();
  EXPECT_FALSE(subscribedOn(from, name));

  releaseAndExpectWakeUp(name, owner, *waiter);
  EXPECT_EQ(waiter_side->stop(), 0) << waiter_side->logs();
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

// A master with a replica fails: the replica is promoted, the sidecar finds it in the slot map,
// the held lock is still held there, and tokens keep increasing.
TEST(ClusterFailoverTest, GrantsResumeOnThePromotedReplica) {
  RedisCluster cluster(3, 1);
  SidecarProcess sidecar(
      SidecarProcess::Options{sidecarYaml(cluster.address(0)), {}, /*wait_ready=*/true});
  HttpClient c = HttpClient::tcp(sidecar.port());
  // A lock whose master is not the seed (node 0), so the seed keeps answering.
  std::string name;
  int master = -1;
  for (int i = 0; name.empty() && i < 1000; ++i) {
    const std::string candidate = "failover-" + std::to_string(i);
    master = cluster.ownerOf(cluster.keySlot("sidelock:{" + candidate + "}"));
    if (master == 1) name = candidate;
  }
  ASSERT_FALSE(name.empty());
  auto r = c.post("/v1/locks/" + name + "/acquire", R"({"ttl_ms":120000})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string owner = json::parse(r.body)["owner"];
  const uint64_t token = json::parse(r.body)["token"];
  // The grant reached the replica before the master dies (else it could be lost: README).
  ASSERT_EQ(cluster.server(1).cli({"WAIT", "1", "10000"}), "1");
  const std::string old_master = cluster.address(1);
  cluster.server(1).kill();

  // The replica takes over the slots (cluster-node-timeout 3 s) and the sidecar follows.
  int promoted = -1;
  ASSERT_TRUE(pollUntil(
      [&] {
        promoted = cluster.ownerOf(cluster.keySlot("sidelock:{" + name + "}"));
        return promoted >= 3;
      },
      60'000))
      << "no replica was promoted";
  HttpResponse ready;
  ASSERT_TRUE(pollUntil(
      [&] {
        ready = c.get("/readyz");
        return ready.status == 200;
      },
      60'000))
      << ready.body << sidecar.logs();
  EXPECT_NE(ready.body.find(cluster.address(static_cast<size_t>(promoted))), std::string::npos)
      << ready.body;
  EXPECT_EQ(ready.body.find(old_master), std::string::npos) << ready.body;
  // The old master left the topology: its series are gone rather than "down" forever.
  EXPECT_TRUE(pollUntil([&] {
    return metricValue(c.get("/metrics").body,
                       "sidelock_backend_up{node=\"" + old_master + "\"}") == -1;
  }));
  EXPECT_GE(metricValue(c.get("/metrics").body,
                        "sidelock_backend_topology_changes_total{reason=\"slots_refresh\"}"),
            1);

  // Where a failure lies: the key gone from the promoted master (the failover lost it) or still
  // there while the sidecar granted the name anyway (the sidecar asked another node).
  const std::string key = "sidelock:{" + name + "}";
  const std::string pttl = cluster.server(static_cast<size_t>(promoted)).cli({"PTTL", key});
  EXPECT_GT(std::atoll(pttl.c_str()), 0) << "PTTL " << key << " on the promoted master: " << pttl;
  EXPECT_EQ(c.post("/v1/locks/" + name + "/acquire", "{}").status, 409)
      << "still held; PTTL on the promoted master: " << pttl << "\n"
      << cluster.server(static_cast<size_t>(promoted)).cli({"CLUSTER", "NODES"}) << "\n"
      << sidecar.logs();
  ASSERT_EQ(c.post("/v1/locks/" + name + "/release", json{{"owner", owner}}.dump()).status, 200);
  r = c.post("/v1/locks/" + name + "/acquire", "{}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_GT(json::parse(r.body)["token"].get<uint64_t>(), token);
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();
}

// TLS to every node: the seed and the masters discovered from the slot map (which announces
// the nodes' TLS ports with tls-cluster), all verified against the configured server_name.
TEST(ClusterTlsTest, EveryMasterSpeaksTlsVerifiedAgainstServerName) {
  TestPki pki;
  std::vector<int> tls_ports;
  RedisCluster cluster(3, 0, [&] {
    auto args = redisTlsArgs(pickFreePort(), pki.namedServerCert(), pki.namedServerKey(),
                             pki.caCert(), /*require_client_cert=*/false);
    args.insert(args.end(), {"--tls-cluster", "yes"});
    return args;
  });
  const std::string tls = "  tls:\n    enabled: true\n    ca_file: \"" + pki.caCert() + "\"\n";
  for (size_t i = 0; i < cluster.size(); ++i) {
    const std::string reply = cluster.server(i).cli({"CONFIG", "GET", "tls-port"});  // name\nport
    tls_ports.push_back(std::atoi(reply.substr(reply.find('\n') + 1).c_str()));
  }
  const std::string seed = "127.0.0.1:" + std::to_string(tls_ports[0]);
  SidecarProcess sidecar(SidecarProcess::Options{
      sidecarYaml(seed, tls + "    server_name: redis.internal\n"), {}, /*wait_ready=*/true});
  HttpClient c = HttpClient::tcp(sidecar.port());
  auto ready = c.get("/readyz");
  ASSERT_EQ(ready.status, 200) << ready.body;
  for (int port : tls_ports) {
    EXPECT_NE(ready.body.find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << "every master on its TLS port: " << ready.body;
  }
  for (int i = 0; i < 30; ++i) {
    const std::string name = "tls-" + std::to_string(i);
    auto r = c.post("/v1/locks/" + name + "/acquire", "{}");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(c.post("/v1/locks/" + name + "/release",
                     json{{"owner", json::parse(r.body)["owner"]}}.dump())
                  .status,
              200);
  }
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();

  // The same cluster with the host name left to default: the certificates name redis.internal,
  // not 127.0.0.1, so no node is trusted and nothing is granted.
  SidecarProcess wrong_name(SidecarProcess::Options{sidecarYaml(seed, tls), {}, false});
  expectRefused(wrong_name, "IP address mismatch");
  EXPECT_EQ(wrong_name.stop(), 0) << wrong_name.logs();
}

// Pointed at a Redis that is not a cluster node, the sidecar says so instead of granting.
TEST(ClusterConfigTest, APlainRedisAsSeedKeepsItNotReadyWithTheReason) {
  RedisServer plain;
  SidecarProcess sidecar(SidecarProcess::Options{sidecarYaml(plain.address()), {}, false});
  expectRefused(sidecar, "cluster support disabled");
  EXPECT_EQ(plain.cli({"EXISTS", "sidelock:{x}"}), "0");
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();
}

}  // namespace
}  // namespace sidelock::testing
