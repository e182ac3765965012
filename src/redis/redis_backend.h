// backend.type: redis — one Redis master through one RedisNode. Every operation is one EVALSHA of
// a script from src/redis/scripts.h, so acquire, release and extend are atomic on the server.
//
// Errors: link down -> kUnavailable (fails fast, the reason says why), no reply within
// backend.command_timeout_ms -> kDeadlineExceeded (the link is then reconnected), a Redis error
// reply -> kInternal with Redis's message, after shutdown() -> kCancelled. A timeout, and a link
// lost with the request in flight, say Status::outcomeUnknown(): Redis may have run it (an acquire
// may have been granted; the lock service gives such a grant back, src/lock/unanswered.cc).
#pragma once

#include <uv.h>

#include <memory>
#include <string>

#include "backend/backend.h"
#include "config/config.h"
#include "event/lifetime.h"
#include "event/scheduler.h"
#include "metrics/metrics.h"
#include "redis/redis_node.h"
#include "redis/release_watches.h"
#include "redis/scripts.h"

namespace sidelock::backend {

/// RedisNodeOptions for `address` from the backend config (credentials, db, timeouts).
RedisNodeOptions nodeOptionsFromConfig(const config::BackendConfig& config,
                                       const config::RedisNodeAddress& address);

class RedisBackend final : public Backend {
 public:
  /// Uses config.nodes[0] (127.0.0.1:6379 when the list is empty). `max_ttl_ms` is
  /// locks.max_ttl_ms: fencing counters expire tokenCounterTtlMs(max_ttl_ms) after the last
  /// grant. `metrics` must outlive us.
  RedisBackend(uv_loop_t* loop, event::Scheduler& scheduler, const config::BackendConfig& config,
               int64_t max_ttl_ms, metrics::Metrics& metrics);
  /// The node at `address` with `node_metrics` (type sentinel: the master, which the resolver
  /// points at its real address with node().setAddress() before it starts the node).
  RedisBackend(uv_loop_t* loop, event::Scheduler& scheduler, const config::BackendConfig& config,
               int64_t max_ttl_ms, metrics::Metrics& metrics,
               const config::RedisNodeAddress& address, metrics::NodeMetrics* node_metrics);
  ~RedisBackend() override;

  /// Lets a topology layer (the Sentinel resolver) follow the node: `on_node_state` sees each
  /// up/down transition first, and the backend counts as ready only while `confirmed()` is true.
  struct TopologyHook {
    std::function<void(bool up)> on_node_state;
    std::function<bool()> confirmed;
  };
  void setTopologyHook(TopologyHook hook) { topology_ = std::move(hook); }

  void start() override;
  void run(const Operation& op, OutcomeCallback cb) override;
  bool canHandOff() const override { return true; }
  bool acquiresAllAtOnce() const override { return true; }
  void acquireAll(const std::vector<std::string>& names, std::string_view owner, int64_t ttl_ms,
                  std::string_view holder, AllOutcomeCallback cb) override;

  void scanHolders(const HolderScan& scan, ScanCallback cb) override;

  void setReleaseListener(ReleaseListener listener) override {
    watches_.setListener(std::move(listener));
  }
  void watchReleases(std::string_view name) override;
  void unwatchReleases(std::string_view name) override;
  void setReadyListener(std::function<void()> listener) override {
    ready_listener_ = std::move(listener);
  }

  BackendHealth health() const override;
  void shutdown(std::function<void()> done) override;

  /// The node, for tests and diagnostics.
  RedisNode& node() { return *node_; }

 private:
  metrics::Metrics& metrics_;
  event::Scheduler& scheduler_;
  int64_t timeout_ms_;
  ScriptContext scripts_;
  std::unique_ptr<RedisNode> node_;
  // Captured by reply callbacks instead of `this`: a call made after shutdown() is answered after
  // shutdown's done callback, when the owner may already have destroyed us.
  std::shared_ptr<std::string> address_;  // follows the node's address (setAddress)
  std::function<void()> ready_listener_;
  TopologyHook topology_;
  ReleaseWatches watches_;
  bool shut_down_ = false;
  event::LivenessToken alive_;  // guards scans (scanHolders) still running when destroyed
};

}  // namespace sidelock::backend
