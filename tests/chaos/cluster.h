// A scenario's processes: the backend Redis node(s), the resource Redis holding the registers, and
// two or more real sidecar processes, all on loopback and free ports; plus the end-of-scenario
// verdict every scenario shares.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chaos/fault_proxy.h"
#include "chaos/history.h"
#include "chaos/metrics_watch.h"
#include "chaos/workload.h"
#include "support/redis_server.h"
#include "support/sidecar_process.h"

namespace sidelock::testing::chaos {

/// Timings every scenario is configured with; every bound a checker applies derives from these.
struct Timings {
  static constexpr int64_t kTtlMs = 800;             // workload lease TTL
  static constexpr int64_t kWaitMs = 3000;           // workload wait budget
  static constexpr int64_t kCommandTimeoutMs = 300;  // backend.command_timeout_ms
  static constexpr int64_t kConnectTimeoutMs = 300;  // backend.connect_timeout_ms
  static constexpr int64_t kReconnectMaxMs = 200;    // backend.reconnect_max_ms
  static constexpr int64_t kNodeTimeoutMs = 50;      // backend.redlock.node_timeout_ms
  static constexpr int64_t kMaxTtlMs = 2000;         // locks.max_ttl_ms (Redlock quarantine)
  /// How late beyond its own budget a request may end: a connect and a command attempt, twice,
  /// plus a second for a loaded 2-core machine (sanitizer builds run several times slower).
  static constexpr int64_t kLivenessSlackMs = 2 * (kConnectTimeoutMs + kCommandTimeoutMs) + 1000;
};

/// How many times the scenarios repeat their faults: 1, or 5 with SIDELOCK_CHAOS_LONG=1.
int chaosRounds();

struct ClusterOptions {
  int sidecars = 2;
  int backend_nodes = 1;  // 1: backend.type redis; an odd N >= 3: redlock
  bool persistence = false;
  std::vector<std::string> redis_args;
  bool delayed_restart = false;   // Redlock
  bool proxied = false;           // sidecars reach each node through a FaultProxy
  std::string extra_locks_yaml;   // more keys under `locks:` (each line indented by 2)
  std::string extra_listen_yaml;  // more keys under `listen:`
  /// Adjusts node i's server options before it starts (a faked clock, a network namespace).
  std::function<void(int, RedisServer::Launch&)> node_setup;
  int64_t max_ttl_ms = Timings::kMaxTtlMs;  // locks.max_ttl_ms
};

class Cluster {
 public:
  explicit Cluster(ClusterOptions options);

  RedisServer& node(int i) { return *nodes_.at(static_cast<size_t>(i)); }
  int nodeCount() const { return static_cast<int>(nodes_.size()); }
  SidecarProcess& sidecar(int i) { return *sidecars_.at(static_cast<size_t>(i)); }
  int sidecarCount() const { return static_cast<int>(sidecars_.size()); }
  RedisServer& resource() { return resource_; }
  /// The proxy in front of node i (ClusterOptions::proxied).
  FaultProxy& proxy(int i) { return *proxies_.at(static_cast<size_t>(i)); }
  std::vector<int> sidecarPorts() const;

  /// Workload options for these sidecars and this resource, with the standard timings.
  WorkloadOptions workload(std::vector<std::string> locks, int clients, bool fenced = true) const;

  /// Stops the workload, then applies every checker: mutual exclusion, token order, liveness,
  /// the registers of `locks` (lost updates, accepted tokens), counter monotonicity, gauges back
  /// to 0 and no lease key left after 3 x TTL. Prints the figures and returns the violations.
  std::vector<std::string> verdict(const std::string& scenario, History& history,
                                   MetricsWatch& metrics, const std::vector<std::string>& locks,
                                   const std::string& register_prefix = "register:",
                                   bool fenced = true);

  /// Polls until no lease key of `locks` exists on a running node; a violation per key still
  /// there after timeout_ms.
  std::vector<std::string> checkLeasesGone(const std::vector<std::string>& locks,
                                           int64_t timeout_ms);

 private:
  ClusterOptions options_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
  std::vector<std::unique_ptr<FaultProxy>> proxies_;
  RedisServer resource_;
  std::vector<std::unique_ptr<SidecarProcess>> sidecars_;
};

/// What most scenarios start from: a cluster, its log, a metrics watch and a fenced workload of
/// `clients` clients on `locks`.
struct Scenario {
  Scenario(ClusterOptions options, std::vector<std::string> locks, int clients = 4);
  /// Stops the workload and judges the run (Cluster::verdict) over the workload's locks and
  /// `more_locks` the scenario used itself.
  std::vector<std::string> verdict(const std::string& name,
                                   const std::vector<std::string>& more_locks = {});

  Cluster cluster;
  History history;
  MetricsWatch metrics;
  std::vector<std::string> locks;
  Workload workload;
};

/// A lock holder in a process of its own, so that it can be killed -9 like a crashed
/// application: plain lease (expires after its TTL) or stream hold (released when its connection
/// drops). The grant is logged in `history` as client `client`.
class HolderProcess {
 public:
  HolderProcess(History& history, int port, int process, int client, const std::string& lock,
                int64_t ttl_ms, bool stream);
  ~HolderProcess();
  HolderProcess(const HolderProcess&) = delete;
  HolderProcess& operator=(const HolderProcess&) = delete;

  uint64_t token() const { return token_; }
  /// SIGKILL and reap; logs the end of its grant window (a dead holder cannot act any more).
  void crash();

 private:
  History& history_;
  int process_;
  int client_;
  std::string lock_;
  pid_t pid_ = -1;
  uint64_t token_ = 0;
};

/// Number of waiters the sidecar on `port` reports queued for `lock` (GET /v1/locks).
int queuedWaiters(int port, const std::string& lock);
/// Polls until `predicate` holds; false after timeout_ms.
template <typename Predicate>
bool pollUntil(int64_t timeout_ms, Predicate predicate) {
  const int64_t deadline = nowUs() + timeout_ms * 1000;
  while (!predicate()) {
    if (nowUs() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}
}  // namespace sidelock::testing::chaos
