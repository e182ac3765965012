// Chaos scenarios below the sidecar: a Redlock node whose clock jumps forward (libfaketime), which
// reproduces the double grant Martin Kleppmann described, and real packet loss on the link to
// Redis (a network namespace with an iptables chain of our own). Each prints its operations,
// faults and violations; README.md in this directory has the figures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chaos/cluster.h"
#include "chaos/fenced_register.h"
#include "chaos/net_namespace.h"
#include "chaos/shell.h"
#include "support/http_client.h"

namespace sidelock::testing::chaos {
namespace {

using nlohmann::json;

constexpr int64_t kProgressTimeoutMs = 4 * Timings::kWaitMs;

void sleepMs(int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

/// The installed file of Debian package `package` whose name ends with `suffix` ("" if none).
std::string packageFile(const std::string& package, const std::string& suffix) {
  const std::string out = runShell("dpkg -L " + package).output;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.ends_with(suffix)) return line;
  }
  return "";
}

/// One client's acquire, logged in `history` as client `client` of sidecar `process`.
json acquireLogged(History& history, HttpClient& http, int process, int client,
                   const std::string& lock, int64_t ttl_ms, int64_t wait_ms) {
  Operation op{.process = process, .client = client, .kind = OpKind::kAcquire, .lock = lock};
  op.deadline_ms = wait_ms;
  op.invoke_us = nowUs();
  const auto r = http.post("/v1/locks/" + lock + "/acquire",
                           json{{"ttl_ms", ttl_ms}, {"wait_ms", wait_ms}}.dump());
  op.complete_us = nowUs();
  op.status = r.status;
  const json answer = json::parse(r.body, nullptr, false);
  if (r.status == 200) {
    op.token = answer.value("token", uint64_t{0});
    op.validity_ms = answer.value("ttl_ms", int64_t{0});
  }
  history.add(op);
  return answer;
}

/// Kleppmann, "How to do distributed locking" (2016): client 1 holds a lock on nodes A, B, C of
/// five (D and E were unreachable for it); C's clock jumps forward and C expires the key early;
/// client 2 gets C, D and E, a majority too, while client 1 still believes it holds the lock.
/// Both then do read-modify-write on the resource: the fenced register refuses the late write of
/// the lower token, the unfenced control loses an update.
TEST(ChaosClockAndNetwork, RedlockNodeClockJumpsForwardDoubleGrantFencingHolds) {
  const std::string faketime = packageFile("libfaketime", "/libfaketime.so.1");
  const std::string tcmalloc = packageFile("libtcmalloc-minimal4", "/libtcmalloc_minimal.so.4");
  if (faketime.empty() || tcmalloc.empty()) {
    GTEST_SKIP() << "needs Debian packages libfaketime and libtcmalloc-minimal4 "
                    "(deploy/scripts/install-deps.sh)";
  }
  const std::string dir = makeTempDir("sidelock-faketime");
  const std::string clock_file = dir + "/node-c-offset";
  std::ofstream(clock_file) << "+0\n";
  constexpr int kJumpingNode = 2;  // C
  constexpr int64_t kHoldTtlMs = 10000;
  ClusterOptions options;
  options.backend_nodes = 5;
  options.max_ttl_ms = kHoldTtlMs;
  // redis-server is linked with jemalloc, which libfaketime's own allocations trip over unless a
  // malloc it can call early (tcmalloc) is preloaded first.
  options.node_setup = [&](int i, RedisServer::Launch& launch) {
    if (i != kJumpingNode) return;
    launch.env = {"LD_PRELOAD=" + tcmalloc + ":" + faketime,
                  "FAKETIME_TIMESTAMP_FILE=" + clock_file, "FAKETIME_NO_CACHE=1"};
  };
  Cluster cluster(options);
  History history;
  const std::string lock = "kleppmann";
  ASSERT_EQ(cluster.node(kJumpingNode).cli({"PING"}), "PONG");

  // 1. D and E are unreachable while client 1 acquires: it gets A, B and C, a bare majority.
  const size_t partition = history.beginFault("Redlock: nodes D, E down while client 1 acquires");
  cluster.node(3).kill();
  cluster.node(4).kill();
  HttpClient client1 = HttpClient::tcp(cluster.sidecar(0).port());
  const json grant1 = acquireLogged(history, client1, 0, 1, lock, kHoldTtlMs, 0);
  ASSERT_TRUE(grant1.contains("token")) << grant1.dump();
  const uint64_t token1 = grant1["token"].get<uint64_t>();
  cluster.node(3).restart();  // empty: they never saw client 1
  cluster.node(4).restart();
  history.endFault(partition);

  // 2. C's clock jumps an hour forward: its copy of client 1's key expires at once.
  const size_t jump = history.beginFault("Redlock: clock of node C jumped 1 h forward");
  std::ofstream(clock_file) << "+3600\n";
  ASSERT_TRUE(pollUntil(2000, [&] {
    return cluster.node(kJumpingNode).cli({"EXISTS", "sidelock:{" + lock + "}"}) == "0";
  })) << "the jumped node did not expire the key";
  history.endFault(jump);

  // 3. Client 2, on the other sidecar, gets C, D and E: a second majority.
  HttpClient client2 = HttpClient::tcp(cluster.sidecar(1).port());
  const json grant2 = acquireLogged(history, client2, 1, 2, lock, Timings::kTtlMs * 4, 5000);
  ASSERT_TRUE(grant2.contains("token")) << grant2.dump();
  const uint64_t token2 = grant2["token"].get<uint64_t>();
  const auto ops = history.operations();
  ASSERT_LT(ops.back().complete_us, ops.front().invoke_us + kHoldTtlMs * 1000)
      << "client 2 was granted only after client 1's validity ended: no double grant to show";
  EXPECT_GT(token2, token1) << "the later grant must carry the higher token";

  // 4. Both holders do read-modify-write, interleaved as a pause of client 1 would do it.
  FencedRegister resource(cluster.resource().port());
  auto logResource = [&](int client, OpKind kind, uint64_t token, bool fenced, bool accepted) {
    Operation op{.process = client - 1, .client = client, .kind = kind, .lock = lock};
    op.token = token;
    op.invoke_us = op.complete_us = nowUs();
    op.status = accepted ? kResourceAccepted : kResourceRejected;
    op.fenced = fenced;
    history.add(op);
  };
  bool late_fenced_write_accepted = false;
  for (const bool fenced : {true, false}) {
    const std::string key = fenced ? "register:" + lock : "register:" + lock + "-unfenced";
    const auto read1 = resource.read(key, token1, fenced);
    logResource(1, OpKind::kRead, token1, fenced, read1.accepted);
    const auto read2 = resource.read(key, token2, fenced);
    logResource(2, OpKind::kRead, token2, fenced, read2.accepted);
    const auto write2 = resource.write(key, token2, read2.value + 1, fenced);
    logResource(2, OpKind::kWrite, token2, fenced, write2.accepted);
    EXPECT_TRUE(write2.accepted);
    const auto write1 = resource.write(key, token1, read1.value + 1, fenced);
    logResource(1, OpKind::kWrite, token1, fenced, write1.accepted);
    if (fenced) late_fenced_write_accepted = write1.accepted;
  }
  EXPECT_FALSE(late_fenced_write_accepted) << "the fenced register took the stale holder's write";
  EXPECT_TRUE(resource.check("register:" + lock, /*fenced=*/true).empty());
  const auto control = resource.check("register:" + lock + "-unfenced", /*fenced=*/false);
  EXPECT_FALSE(control.empty()) << "the unfenced control must lose client 2's update";

  // The checkers see the double grant (mutual exclusion broken, as the clock fault allows) and
  // nothing else: tokens still increase in grant order.
  const auto overlap = checkMutualExclusion(history);
  EXPECT_FALSE(overlap.empty()) << "the checker must see the double grant";
  EXPECT_TRUE(checkTokenOrder(history).empty());
  std::vector<std::string> expected = overlap;
  expected.insert(expected.end(), control.begin(), control.end());
  report(
      "Redlock node clock jumped forward (expected: the double grant, the control's lost update)",
      history, expected);

  for (auto* http : {&client1, &client2}) {
    const json& grant = http == &client1 ? grant1 : grant2;
    http->post("/v1/locks/" + lock + "/release", json{{"owner", grant["owner"]}}.dump());
  }
  removeTree(dir);
}

/// Real loss, not a model of it: the Redis node runs in a network namespace and an iptables chain
/// there drops 10, 20, then 30 % of the packets both ways while the workload runs.
TEST(ChaosClockAndNetwork, RealPacketLossToRedis) {
  const std::string why = LossyNamespace::unavailableReason();
  if (!why.empty()) GTEST_SKIP() << why;
  LossyNamespace net;
  ClusterOptions options;
  // Reached over the veth pair, not loopback; only this host can reach the namespace.
  options.redis_args = {"--protected-mode", "no"};
  options.node_setup = [&](int, RedisServer::Launch& launch) {
    launch.command_prefix = net.commandPrefix();
    launch.host = net.insideAddress();
  };
  Scenario s(options, {"lossy"});
  ASSERT_TRUE(s.workload.waitForMoreGrants(10, kProgressTimeoutMs));
  constexpr int64_t kPhaseMs = 3000;
  auto grantsOver = [&](int64_t ms) {
    const int64_t before = s.workload.grants();
    sleepMs(ms);
    return s.workload.grants() - before;
  };
  std::printf("[chaos]   no loss: %lld grants in %lld ms\n",
              static_cast<long long>(grantsOver(kPhaseMs)), static_cast<long long>(kPhaseMs));
  for (int round = 0; round < chaosRounds(); ++round) {
    for (const int percent : {10, 20, 30}) {
      const std::string what = std::to_string(percent) +
                               " % of packets to and from Redis dropped (iptables), " +
                               std::to_string(kPhaseMs) + " ms";
      const size_t fault = s.history.beginFault(what);
      net.setLoss(percent / 100.0);
      const int64_t grants = grantsOver(kPhaseMs);
      net.setLoss(0);
      s.history.endFault(fault);
      std::printf("[chaos]   %d %% loss: %lld grants in %lld ms\n", percent,
                  static_cast<long long>(grants), static_cast<long long>(kPhaseMs));
      EXPECT_TRUE(s.workload.waitForMoreGrants(3, kProgressTimeoutMs))
          << "no progress after " << what;
    }
  }
  EXPECT_TRUE(s.verdict("real packet loss to Redis (network namespace, 10/20/30 %)").empty());
}

}  // namespace
}  // namespace sidelock::testing::chaos
