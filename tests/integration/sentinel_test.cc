// The real binary with `backend.type: sentinel` against a master, a replica and three real
// `redis-server --sentinel` processes: master resolution, a kill -9 failover with waiters queued
// across it, fencing tokens across the failover with wait_replicas, READONLY re-resolution and an
// unknown master name, and grants given back (wait_replicas) released across a dropped link.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <future>
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

constexpr const char* kMasterName = "locks";
// A failover takes the sentinels down-after (1 s) + agreement + election + promotion: a few
// seconds, more on a loaded machine. Polls for it use this bound, far above the usual time.
constexpr int64_t kFailoverPollMs = 60'000;

class SentinelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Full syncs at once (Redis 7 waits 5 s for more replicas before a diskless sync).
    master_ = std::make_unique<RedisServer>(
        RedisServer::Options{false, {"--repl-diskless-sync-delay", "0"}});
    replica_ = RedisServer::startReplica(*master_);
    ASSERT_TRUE(pollUntil([&] {
      return master_->cli({"INFO", "replication"}).find("state=online") != std::string::npos;
    })) << "the replica never finished its first sync";
    for (int i = 0; i < 3; ++i) {
      sentinels_.push_back(RedisServer::startSentinel(*master_, kMasterName));
    }
  }

  void TearDown() override {
    sidecar_.reset();
    sentinels_.clear();
    spares_.clear();
    replica_.reset();
    master_.reset();
  }

  std::string sentinelList() const {
    std::string list;
    for (const auto& s : sentinels_) list += (list.empty() ? "\"" : ", \"") + s->address() + "\"";
    return list;
  }

  void startSidecar(const std::string& master_name, int wait_replicas, bool wait_ready) {
    sidecar_ = std::make_unique<SidecarProcess>(SidecarProcess::Options{
        "backend:\n  type: sentinel\n  nodes: [" + sentinelList() +
            "]\n  reconnect_min_ms: 20\n  reconnect_max_ms: 300\n  health_interval_ms: 100\n"
            "  command_timeout_ms: 1000\n  sentinel:\n    master_name: " +
            master_name + "\n    wait_replicas: " + std::to_string(wait_replicas) + "\n",
        {},
        wait_ready});
  }

  /// sidelock_unreplicated_grants_total{outcome}: given-back grants by what their release found.
  static int64_t unreplicated(HttpClient& c, const std::string& outcome) {
    return metricValue(c.get("/metrics").body,
                       "sidelock_unreplicated_grants_total{outcome=\"" + outcome + "\"}");
  }

  /// True once `key` is gone from the master (a given-back grant released) within `timeout_ms`.
  bool goneFromMaster(const std::string& key, int64_t timeout_ms = kPollTimeoutMs) {
    return pollUntil([&] { return master_->cli({"EXISTS", key}) == "0"; }, timeout_ms);
  }

  // Every sentinel sees the replica and the two other sentinels: a failover can be agreed on.
  bool sentinelsKnowEachOther() {
    for (auto& s : sentinels_) {
      const std::string m = s->cli({"SENTINEL", "master", kMasterName});
      if (m.find("num-other-sentinels\n2") == std::string::npos ||
          m.find("num-slaves\n" + std::to_string(1 + spares_.size())) == std::string::npos) {
        return false;
      }
    }
    return true;
  }

  static json readyMaster(const HttpResponse& readyz) {
    const json body = json::parse(readyz.body);
    for (const auto& n : body["nodes"]) {
      if (n.value("role", "") == "master") return n;
    }
    return json();
  }

  /// An acquire with wait_replicas, retried until granted: on a loaded machine the replica's
  /// first acknowledgement can miss the WAIT's timeout. The last answer.
  static HttpResponse acquireOnceReplicated(HttpClient& c, const std::string& name,
                                            const std::string& body) {
    HttpResponse r;
    pollUntil([&] {
      r = c.post("/v1/locks/" + name + "/acquire", body);
      return r.status == 200;
    });
    return r;
  }

  uint64_t grantAndRelease(HttpClient& c, const std::string& name) {
    auto r = c.post("/v1/locks/" + name + "/acquire", R"({"ttl_ms":10000})");
    EXPECT_EQ(r.status, 200) << r.body;
    if (r.status != 200) return 0;
    json grant = json::parse(r.body);
    EXPECT_EQ(
        c.post("/v1/locks/" + name + "/release", json{{"owner", grant["owner"]}}.dump()).status,
        200);
    return grant["token"].get<uint64_t>();
  }

  std::unique_ptr<RedisServer> master_;
  std::unique_ptr<RedisServer> replica_;
  std::vector<std::unique_ptr<RedisServer>> spares_;  // more replicas, for after a failover
  std::vector<std::unique_ptr<RedisServer>> sentinels_;
  std::unique_ptr<SidecarProcess> sidecar_;
};

TEST_F(SentinelTest, FailoverResumesGrantsForQueuedWaitersAndTokensKeepGoingUp) {
  // wait_replicas: 1 needs a replica after the failover too: the sentinels attach this one to the
  // promoted master.
  spares_.push_back(RedisServer::startReplica(*master_));
  ASSERT_TRUE(pollUntil([&] {
    return master_->cli({"INFO", "replication"}).find("connected_slaves:2") != std::string::npos;
  }));
  ASSERT_TRUE(pollUntil([&] { return sentinelsKnowEachOther(); }, kFailoverPollMs));
  startSidecar(kMasterName, /*wait_replicas=*/1, /*wait_ready=*/true);
  HttpClient c = HttpClient::tcp(sidecar_->port());

  auto ready = c.get("/readyz");
  ASSERT_EQ(ready.status, 200) << ready.body;
  EXPECT_EQ(readyMaster(ready)["node"], master_->address()) << ready.body;
  int sentinels_up = 0;
  const json ready_body = json::parse(ready.body);
  for (const auto& n : ready_body["nodes"]) {
    sentinels_up += n.value("role", "") == "sentinel" && n["state"] == "up";
  }
  EXPECT_EQ(sentinels_up, 3) << ready.body;
  std::string metrics = c.get("/metrics").body;
  EXPECT_EQ(metricValue(metrics, "sidelock_backend_up{node=\"" + master_->address() + "\"}"), 1);
  EXPECT_EQ(metricValue(metrics, "sidelock_backend_up{node=\"" + sentinels_[0]->address() + "\"}"),
            1);

  uint64_t last_before = 0;
  for (int i = 0; i < 5; ++i) last_before = grantAndRelease(c, "tokens");
  ASSERT_GT(last_before, 0u);
  // With wait_replicas: 1 every grant reached a replica before the client saw it.
  const std::string counter = "sidelock:{tokens}:token";
  EXPECT_TRUE(replica_->cli({"GET", counter}) == std::to_string(last_before) ||
              spares_[0]->cli({"GET", counter}) == std::to_string(last_before));

  // A release hands the lock on to a queued waiter (release_grant), WAITed for like an acquire.
  auto first = c.post("/v1/locks/handoff/acquire", R"({"ttl_ms":10000})");
  ASSERT_EQ(first.status, 200) << first.body;
  const int sidecar_port = sidecar_->port();
  auto next = std::async(std::launch::async, [sidecar_port] {
    HttpClient w = HttpClient::tcp(sidecar_port);
    return w.post("/v1/locks/handoff/acquire", R"({"ttl_ms":10000,"wait_ms":8000})");
  });
  ASSERT_TRUE(waitForWaiters(c, "handoff", 1));
  ASSERT_EQ(
      c.post("/v1/locks/handoff/release", json{{"owner", json::parse(first.body)["owner"]}}.dump())
          .status,
      200);
  auto handed = next.get();
  ASSERT_EQ(handed.status, 200) << handed.body;
  EXPECT_GT(json::parse(handed.body)["token"].get<uint64_t>(),
            json::parse(first.body)["token"].get<uint64_t>());

  // A holder, and a waiter queued behind it that rides out the failover.
  auto held = c.post("/v1/locks/queue/acquire", R"({"ttl_ms":4000})");
  ASSERT_EQ(held.status, 200) << held.body;
  const uint64_t held_token = json::parse(held.body)["token"].get<uint64_t>();
  const int port = sidecar_->port();
  auto waiter = std::async(std::launch::async, [port] {
    HttpClient w = HttpClient::tcp(port);
    return w.request("POST", "/v1/locks/queue/acquire", R"({"ttl_ms":10000,"wait_ms":90000})",
                     100'000);
  });
  ASSERT_TRUE(waitForWaiters(c, "queue", 1));

  master_->kill();
  const auto killed_at = std::chrono::steady_clock::now();
  HttpResponse moved;
  std::string promoted;
  ASSERT_TRUE(pollUntil(
      [&] {
        moved = c.get("/readyz");
        promoted = moved.status == 200 ? readyMaster(moved)["node"].get<std::string>() : "";
        return promoted == replica_->address() || promoted == spares_[0]->address();
      },
      kFailoverPollMs))
      << moved.body << sidecar_->logs();
  RedisServer& new_master = promoted == replica_->address() ? *replica_ : *spares_[0];
  const auto failover_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now() - killed_at)
                               .count();
  EXPECT_EQ(new_master.cli({"ROLE"}).substr(0, 6), "master");

  // The queued waiter is granted on the new master once the old holder's lease (replicated)
  // expires, with a token above the holder's.
  auto granted = waiter.get();
  ASSERT_EQ(granted.status, 200) << granted.body << sidecar_->logs();
  EXPECT_GT(json::parse(granted.body)["token"].get<uint64_t>(), held_token);

  // wait_replicas: 1 answers 503 (the grant given back, not replicated) until the sentinels have
  // pointed the other replica at the promoted master and it has synced and acknowledges writes:
  // that takes a moment more than the failover itself (under two ASan passes at ctest -j4 on 2
  // cores, over 500 ms), and under that load the sentinels may move the master once more (the
  // promoted one missed its down-after; CI saw both: a replica online by INFO whose WAIT still
  // answered 0 within 500 ms, and a second promotion). So ask for grants until one is given: each
  // 503 gave its grant back, and the first grant's token is what the check is about.
  uint64_t first_after = 0;
  HttpResponse attempt;
  ASSERT_TRUE(pollUntil(
      [&] {
        attempt = c.post("/v1/locks/tokens/acquire", R"({"ttl_ms":10000})");
        if (attempt.status != 200) return false;
        const json grant = json::parse(attempt.body);
        first_after = grant["token"].get<uint64_t>();
        EXPECT_EQ(c.post("/v1/locks/tokens/release", json{{"owner", grant["owner"]}}.dump()).status,
                  200);
        return true;
      },
      kFailoverPollMs))
      << attempt.status << " " << attempt.body << sidecar_->logs();
  EXPECT_GT(first_after, last_before) << "fencing tokens never go backwards across a failover";

  metrics = c.get("/metrics").body;
  EXPECT_GE(
      metricValue(metrics, "sidelock_backend_topology_changes_total{reason=\"switch_master\"}") +
          metricValue(metrics, "sidelock_backend_topology_changes_total{reason=\"reresolve\"}"),
      1)
      << metrics;
  // backend_up names the master in use now. Under load (ASan on 2 cores) the sentinels may move
  // the master once more after the first promotion, so ask /readyz which one that is.
  std::string in_use;
  EXPECT_TRUE(pollUntil([&] {
    moved = c.get("/readyz");
    if (moved.status != 200) return false;
    in_use = readyMaster(moved)["node"].get<std::string>();
    metrics = c.get("/metrics").body;
    return metricValue(metrics, "sidelock_backend_up{node=\"" + in_use + "\"}") == 1;
  })) << moved.body << metrics;
  EXPECT_EQ(metricValue(metrics, "sidelock_backend_up{node=\"" + master_->address() + "\"}"), -1)
      << "the former master is no longer shown";
  RecordProperty("failover_ms", std::to_string(failover_ms));
  std::printf("kill -9 of the master -> /readyz ready on the promoted master after %lld ms\n",
              static_cast<long long>(failover_ms));
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

TEST_F(SentinelTest, ReadOnlyReplyReresolvesAndRecoversWhenTheMasterIsBack) {
  sentinels_[0]->kill();  // the next sentinel answers instead
  startSidecar(kMasterName, /*wait_replicas=*/0, /*wait_ready=*/true);
  HttpClient c = HttpClient::tcp(sidecar_->port());
  const std::string ready = c.get("/readyz").body;
  EXPECT_NE(ready.find("{\"node\":\"" + sentinels_[0]->address() + "\",\"reason\""),
            std::string::npos)
      << ready;
  ASSERT_GT(grantAndRelease(c, "ro"), 0u);

  // Demoted by hand behind the sentinels' back: it keeps its data but refuses writes.
  const int nowhere = pickFreePort();
  ASSERT_EQ(master_->cli({"REPLICAOF", "127.0.0.1", std::to_string(nowhere)}), "OK");
  auto refused = c.post("/v1/locks/ro/acquire", "{}");
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(json::parse(refused.body)["error"], "backend_unavailable") << refused.body;

  HttpResponse not_ready;
  ASSERT_TRUE(pollUntil([&] {
    not_ready = c.get("/readyz");
    return not_ready.status == 503 && not_ready.body.find("is not a master") != std::string::npos;
  })) << not_ready.body;
  EXPECT_NE(not_ready.body.find("ROLE says slave"), std::string::npos) << not_ready.body;
  std::string metrics = c.get("/metrics").body;
  EXPECT_EQ(metricValue(metrics, "sidelock_backend_topology_changes_total{reason=\"readonly\"}"), 1)
      << metrics;

  // A waiter queued meanwhile is granted once the master is a master again.
  const int port = sidecar_->port();
  auto waiter = std::async(std::launch::async, [port] {
    HttpClient w = HttpClient::tcp(port);
    return w.request("POST", "/v1/locks/ro/acquire", R"({"ttl_ms":5000,"wait_ms":30000})", 40'000);
  });
  ASSERT_TRUE(waitForWaiters(c, "ro", 1));
  ASSERT_EQ(master_->cli({"REPLICAOF", "NO", "ONE"}), "OK");
  EXPECT_TRUE(pollUntil([&] { return c.get("/readyz").status == 200; })) << sidecar_->logs();
  auto granted = waiter.get();
  EXPECT_EQ(granted.status, 200) << granted.body;
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

TEST_F(SentinelTest, UnknownMasterNameStaysNotReadyWithTheReason) {
  startSidecar("no-such-master", /*wait_replicas=*/0, /*wait_ready=*/false);
  HttpClient c = HttpClient::tcp(sidecar_->port());
  HttpResponse r;
  ASSERT_TRUE(pollUntil([&] {
    r = c.get("/readyz");
    return r.status == 503 &&
           r.body.find("knows no master named no-such-master") != std::string::npos;
  })) << r.body;
  json body = json::parse(r.body);
  EXPECT_EQ(readyMaster(r)["state"], "down") << r.body;
  EXPECT_NE(body["message"].get<std::string>().find("sentinel"), std::string::npos);
  auto refused = c.post("/v1/locks/x/acquire", "{}");
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(master_->cli({"EXISTS", "sidelock:{x}"}), "0");
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

TEST_F(SentinelTest, GrantNotAcknowledgedByEnoughReplicasIsGivenBack) {
  startSidecar(kMasterName, /*wait_replicas=*/2, /*wait_ready=*/true);  // only one replica exists
  HttpClient c = HttpClient::tcp(sidecar_->port());
  auto r = c.post("/v1/locks/lonely/acquire", "{}");
  EXPECT_EQ(r.status, 503) << r.body;
  // "1 of 2" normally; "0 of 2" when the one replica is slow to ack on a loaded machine.
  EXPECT_NE(r.body.find(" of 2 replicas acknowledged"), std::string::npos) << r.body;
  EXPECT_TRUE(goneFromMaster("sidelock:{lonely}")) << "the unacknowledged grant was released";
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

// A stalled replica makes every grant's WAIT last its whole timeout (500 ms here), and Redis
// answers nothing behind a WAIT on that link until it returns. One WAIT per grant, sent back to
// back, held the renewals of the leases already granted behind their sum, past the command timeout:
// the renewals failed and the leases were lost (found from outside). One WAIT at a time, shared by
// the grants sent meanwhile, keeps a renewal's wait under one WAIT.
TEST_F(SentinelTest, AStalledReplicaCostsNoLeaseItsRenewals) {
  startSidecar(kMasterName, /*wait_replicas=*/1, /*wait_ready=*/true);
  HttpClient c = HttpClient::tcp(sidecar_->port());
  HttpResponse kept = acquireOnceReplicated(c, "kept", R"({"ttl_ms":1500,"auto_renew":true})");
  ASSERT_EQ(kept.status, 200) << kept.body;
  const std::string owner = json::parse(kept.body)["owner"];

  replica_->pause();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  std::vector<std::thread> clients;
  std::vector<int> refused(6, 0);
  std::vector<int> given_back(6, 0);
  for (size_t i = 0; i < refused.size(); ++i) {
    clients.emplace_back([&, i] {
      HttpClient ci = HttpClient::tcp(sidecar_->port());
      while (std::chrono::steady_clock::now() < until) {
        auto r = ci.post("/v1/locks/busy-" + std::to_string(i) + "/acquire", "{}");
        if (r.status == 503) ++refused[i];
        if (r.status == 503 && r.body.find("given back") != std::string::npos) ++given_back[i];
      }
    });
  }
  for (auto& t : clients) t.join();
  replica_->resume();

  int refused_total = 0;
  int given_back_total = 0;
  for (int n : refused) refused_total += n;
  for (int n : given_back) given_back_total += n;
  EXPECT_GT(refused_total, 6) << "the grants were not replicated: given back";
  // Each given back, and its release ran once the replica was back (nothing left to give up on).
  EXPECT_TRUE(pollUntil([&] { return unreplicated(c, "released") >= given_back_total; }))
      << unreplicated(c, "released") << " of " << given_back_total;
  EXPECT_EQ(unreplicated(c, "gave_up") + unreplicated(c, "dropped"), 0);
  const std::string metrics = c.get("/metrics").body;
  EXPECT_EQ(metricValue(metrics, "sidelock_lease_lost_total"), 0) << sidecar_->logs();
  auto state = c.get("/v1/locks/kept");
  EXPECT_EQ(json::parse(state.body)["held"], true) << state.body;
  EXPECT_EQ(c.post("/v1/locks/kept/release", json{{"owner", owner}}.dump()).status, 200);
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

// A grant whose script had to be sent again (NOSCRIPT: the master's script cache was flushed) is
// written after the WAIT queued behind its first attempt, which then vouches for nothing: Redis
// answers the WAIT first, at once. Such a grant is given back, not answered as replicated (it
// was, with a token only the master held; found by review).
TEST_F(SentinelTest, AGrantWrittenAfterItsWaitIsGivenBack) {
  startSidecar(kMasterName, /*wait_replicas=*/1, /*wait_ready=*/true);
  HttpClient c = HttpClient::tcp(sidecar_->port());
  ASSERT_EQ(acquireOnceReplicated(c, "warm", "{}").status, 200);
  replica_->pause();
  ASSERT_EQ(master_->cli({"SCRIPT", "FLUSH"}), "OK");
  auto r = c.post("/v1/locks/b/acquire", "{}");
  replica_->resume();
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("written after the WAIT"), std::string::npos) << r.body;
  EXPECT_TRUE(goneFromMaster("sidelock:{b}")) << "given back";
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

// A grant whose WAIT fails because the master link drops is given back by a release sent while
// that link is down: the node refuses it at once. It used to be sent once and forgotten, so the
// given-back grant stayed on the master for its whole TTL (15 s in the fault test): reads named a
// holder that was told 503, and nobody, its own owner included, got the lock meanwhile (found from
// outside, /tmp/faults17/sen/repro_giveback_linkdrop.sh). The release is retried once the link is
// back, for the grant's fencing token only.
TEST_F(SentinelTest, AGrantGivenBackWhileTheLinkIsDownIsReleasedOnceItIsBack) {
  startSidecar(kMasterName, /*wait_replicas=*/1, /*wait_ready=*/true);
  HttpClient c = HttpClient::tcp(sidecar_->port());
  ASSERT_EQ(acquireOnceReplicated(c, "warm", "{}").status, 200);
  const int64_t released_before = unreplicated(c, "released");
  replica_->pause();  // the WAIT waits its whole timeout (500 ms)
  std::thread link_drop([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    master_->cli({"CLIENT", "KILL", "TYPE", "normal"});  // mid-WAIT: the sidecar's link resets
  });
  auto r = c.post("/v1/locks/dropped/acquire", R"({"ttl_ms":15000})");
  link_drop.join();
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("given back"), std::string::npos) << r.body;
  const auto told = std::chrono::steady_clock::now();
  const bool released = goneFromMaster("sidelock:{dropped}", 2'000);
  const int64_t took_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - told)
          .count();
  replica_->resume();
  EXPECT_TRUE(released) << "the given-back grant is still on the master, PTTL "
                        << master_->cli({"PTTL", "sidelock:{dropped}"}) << ", token "
                        << master_->cli({"GET", "sidelock:{dropped}:token"}) << "\n"
                        << sidecar_->logs();
  if (released) {
    std::printf("given-back grant gone from the master %lld ms after the 503 (%s)\n",
                static_cast<long long>(took_ms),
                sidecar_->logs().find("sentinel.giveback_retried") != std::string::npos
                    ? "its release was retried"
                    : "its first release ran");
  }
  EXPECT_EQ(unreplicated(c, "released"), released_before + 1) << "counted once, when it ran";
  EXPECT_EQ(acquireOnceReplicated(c, "dropped", "{}").status, 200) << "the lock is free again";
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

// The same for an election: a campaign's term given back while the link is down used to stay on
// the master for the whole TTL, GET and observe naming a leader that was never told, and
// ready?candidate= answering 200 (found from outside, repro_giveback_election.sh). The candidate
// hangs up right after the link drop, so no later campaign of its own refills the key.
TEST_F(SentinelTest, ACampaignGivenBackWhileTheLinkIsDownIsReleasedOnceItIsBack) {
  startSidecar(kMasterName, /*wait_replicas=*/1, /*wait_ready=*/true);
  HttpClient c = HttpClient::tcp(sidecar_->port());
  ASSERT_EQ(acquireOnceReplicated(c, "warm", "{}").status, 200);
  replica_->pause();
  {
    HttpClient candidate = HttpClient::tcp(sidecar_->port());
    candidate.sendRequest("POST", "/v1/elections/voted/campaign",
                          R"({"candidate":"cand-a","ttl_ms":15000})");
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    master_->cli({"CLIENT", "KILL", "TYPE", "normal"});
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }  // hung up: the campaign ends
  const bool released = goneFromMaster("sidelock:{voted}:el", 2'000);
  EXPECT_TRUE(released) << "the given-back term is still on the master, PTTL "
                        << master_->cli({"PTTL", "sidelock:{voted}:el"}) << "\n"
                        << sidecar_->logs();
  EXPECT_NE(c.get("/v1/elections/voted/ready?candidate=cand-a").status, 200);
  replica_->resume();
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

// The script measures a grant's validity before its WAIT; the time the WAIT took is spent: the
// answer's ttl_ms leaves it out, since the holder counts from the answer (it used to say the whole
// TTL after a 400 ms wait, while Redis had 1.6 s left; found by review).
TEST_F(SentinelTest, AGrantsValidityLeavesOutTheWaitForReplicas) {
  startSidecar(kMasterName, /*wait_replicas=*/1, /*wait_ready=*/true);
  HttpClient c = HttpClient::tcp(sidecar_->port());
  ASSERT_EQ(acquireOnceReplicated(c, "warm", "{}").status, 200);
  replica_->pause();
  std::thread resume([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    replica_->resume();
  });
  const auto sent = std::chrono::steady_clock::now();
  auto r = c.post("/v1/locks/late/acquire", R"({"ttl_ms":2000})");
  const int64_t took_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - sent)
          .count();
  resume.join();
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_GE(took_ms, 250) << "the WAIT did not wait for the paused replica";
  // What the WAIT took (at least took_ms less the request's own round trips) is not in ttl_ms.
  EXPECT_LE(json::parse(r.body)["ttl_ms"].get<int64_t>(), 2000 - (took_ms - 150)) << r.body;
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();
}

}  // namespace
}  // namespace sidelock::testing
