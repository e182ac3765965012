// backend.type: cluster — locks on a Redis Cluster. The same scripts as the single-node backend
// (scripts.h), each routed to the master serving the hash slot of its `{name}` keys.
//
//  - Topology: CLUSTER SLOTS from a seed node (backend.nodes) builds the slot map; one RedisNode
//    per master. The map is refreshed when a node goes down, on MOVED, on a refused shard-channel
//    subscription, and periodically (at most once per kMinRefreshGapMs).
//  - Redirections: MOVED patches the map, counts a topology change and retries on the named node;
//    ASK sends ASKING and the script pipelined on the target's connection (one-shot, the map is
//    not changed); TRYAGAIN (a multi-key script during a slot migration) is retried after a short
//    delay within the command budget. At most kMaxRedirects hops in a row; redirects that go
//    round in circles (a slot's new owner not yet known to both masters) are retried like
//    TRYAGAIN. A script is re-sent only when the reply proves it did not run (MOVED, ASK,
//    TRYAGAIN), never after a timeout or a lost link. What is still refused past the budget, and
//    CLUSTERDOWN, is answered kUnavailable (an outage), not as an error of the request.
//  - Wake-ups: sharded pub/sub. The release script SPUBLISHes on the lock's channel (same hash
//    tag, same slot) and we SSUBSCRIBE on the master serving that slot; subscriptions follow
//    their slot when the map changes.
//  - Ready when every slot has a master and every master is up.
#pragma once

#include <uv.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/rate_limited_log.h"
#include "config/config.h"
#include "event/lifetime.h"
#include "event/scheduler.h"
#include "metrics/metrics.h"
#include "redis/redis_node.h"
#include "redis/release_watches.h"
#include "redis/scripts.h"
#include "redis/slot_map.h"

namespace sidelock::backend {

class ClusterBackend final : public Backend {
 public:
  /// Hops (MOVED / ASK) one call may follow before its error reply is returned.
  static constexpr int kMaxRedirects = 5;
  /// Slot-map refreshes are at least this far apart, however many MOVED replies ask for one.
  static constexpr int64_t kMinRefreshGapMs = 250;
  /// Periodic refresh while every slot is served by an up master / while not.
  static constexpr int64_t kRefreshIntervalMs = 10'000;
  static constexpr int64_t kDegradedRefreshIntervalMs = 1'000;
  /// Delay before retrying a script answered TRYAGAIN (its slot is being migrated).
  static constexpr int64_t kTryAgainDelayMs = 20;

  /// `config.nodes` are the seeds. `max_ttl_ms` as for RedisBackend. `metrics` must outlive us.
  ClusterBackend(uv_loop_t* loop, event::Scheduler& scheduler, const config::BackendConfig& config,
                 int64_t max_ttl_ms, metrics::Metrics& metrics);
  ~ClusterBackend() override;

  void start() override;
  void run(const Operation& op, OutcomeCallback cb) override;
  bool canHandOff() const override { return true; }

  /// Every master of the slot map, one after another.
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

  /// For tests and diagnostics.
  const SlotMap& slotMap() const { return map_; }
  /// The node at `address` ("host:port"), or nullptr when we have none there.
  RedisNode* node(const std::string& address);
  /// Address of the master the release channel of `name` is subscribed on ("" when none).
  std::string subscriptionHome(std::string_view name) const;

 private:
  struct Call;
  struct Node {
    config::RedisNodeAddress address;
    std::unique_ptr<RedisNode> redis;
  };

  void route(std::shared_ptr<Call> call);
  void send(std::shared_ptr<Call> call, const config::RedisNodeAddress& target, bool asking);
  void onReply(std::shared_ptr<Call> call, const std::string& address, StatusOr<RedisValue> r);
  void retryLater(std::shared_ptr<Call> call);

  void applyMoved(ClusterRedirect* redirect, const std::string& from);
  static bool supported(const RedisNode& node, std::string* reason);
  std::string hostOf(const std::string& address) const;

  Node& nodeFor(const config::RedisNodeAddress& address);
  void retireNode(const std::string& address);
  void ensureSeeds();

  void scheduleRefresh();
  void refreshNow();
  void onClusterSlots(const config::RedisNodeAddress& asked, const StatusOr<RedisValue>& reply);
  void applyMap();
  void armPeriodicRefresh();

  void subscribeHome(const std::string& name);
  void rehomeWatches();
  void updateReady();
  bool computeReady(std::string* reason) const;

  uv_loop_t* loop_;
  event::Scheduler& scheduler_;
  metrics::Metrics& metrics_;
  RedisNodeOptions base_options_;  // per node: a copy with its address
  std::vector<config::RedisNodeAddress> seeds_;
  ScriptContext scripts_;
  int64_t timeout_ms_;

  std::map<std::string, Node> nodes_;                 // by "host:port"
  std::vector<std::unique_ptr<RedisNode>> retiring_;  // shut down, freed when done
  SlotMap map_;
  bool refresh_in_flight_ = false;
  bool refresh_again_ = false;
  int64_t last_refresh_ms_ = -kMinRefreshGapMs;
  size_t refresh_cursor_ = 0;  // rotates the node asked for CLUSTER SLOTS
  std::string refresh_error_;  // why the last CLUSTER SLOTS failed ("" after a success)
  RateLimitedLog refresh_log_;
  event::ScopedTimer refresh_timer_;
  event::ScopedTimer periodic_timer_;
  std::map<event::Scheduler::TimerId, std::shared_ptr<Call>> delayed_;  // TRYAGAIN retries

  std::function<void()> ready_listener_;
  ReleaseWatches watches_;
  std::map<std::string, std::string, std::less<>> homes_;  // lock name -> subscribed master
  bool ready_ = false;
  bool shut_down_ = false;
  // Guards callbacks that outlive us (a node's reply posted after our destruction).
  event::LivenessToken alive_;
};

}  // namespace sidelock::backend
