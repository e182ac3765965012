// backend.type: sentinel — keeps one RedisNode pointed at the master that Redis Sentinel names.
//
// The sentinels (backend.nodes) are RedisNodes of their own (no scripts, the sentinel
// credentials). Resolution asks them in turn, starting with the last one that answered,
// `SENTINEL get-master-addr-by-name <master_name>`, points the master node there (setAddress) and,
// once it is up, confirms with `ROLE` that it really is a master; anything else (no sentinel
// answered, the name is unknown, the address is down, ROLE says replica) is retried after a
// backoff (reconnect_min_ms .. reconnect_max_ms) until it works.
//
// Re-resolution is triggered by:
//  - `+switch-master` for our master on any sentinel (every sentinel is subscribed, so one live
//    sentinel is enough to hear of a failover);
//  - the link to the master dropping (the node reconnects by itself; the sentinels may name a new
//    master meanwhile);
//  - a write refused with READONLY (the master was demoted behind the sentinels' back, or their
//    failover has not reached us yet).
// While unconfirmed the backend is not ready; acquires with a wait budget ride it out queued and
// resume on the confirmed master (the backend's ready listener fires then).
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "event/lifetime.h"
#include "event/scheduler.h"
#include "metrics/metrics.h"
#include "redis/redis_node.h"

namespace sidelock::backend {

class SentinelResolver {
 public:
  /// `master` is the backend's node; not started until the first resolution names its address.
  /// `config.nodes` are the sentinels. `master` and `metrics` must outlive us.
  SentinelResolver(uv_loop_t* loop, event::Scheduler& scheduler,
                   const config::BackendConfig& config, RedisNode& master,
                   metrics::Metrics& metrics);
  ~SentinelResolver();
  SentinelResolver(const SentinelResolver&) = delete;
  SentinelResolver& operator=(const SentinelResolver&) = delete;

  /// Connects to the sentinels; the first one up starts the first resolution.
  void start();

  /// Called on every transition of `master` (RedisBackend's topology hook).
  void onMasterState(bool up);
  /// A write on `master` was answered READONLY: it is no longer the master.
  void onReadOnly();

  /// The master node is up and ROLE confirmed it is the master.
  bool confirmed() const { return confirmed_; }
  /// Why not confirmed (empty when confirmed).
  const std::string& reason() const { return reason_; }
  /// The master address the sentinels gave last ("" before the first answer).
  const std::string& resolvedAddress() const { return resolved_; }
  /// The sentinels' links, for /readyz (role "sentinel").
  std::vector<NodeHealth> sentinelHealth() const;

  /// Called (on a later loop turn) whenever confirmed() changes.
  void setConfirmedListener(std::function<void()> listener) { listener_ = std::move(listener); }

  /// Closes the sentinel links, then calls `done` on a later loop turn.
  void shutdown(std::function<void()> done);

  /// The +switch-master channel every sentinel publishes a failover on.
  static constexpr std::string_view kSwitchMasterChannel = "+switch-master";

 private:
  enum class Trigger { kSwitchMaster, kReadOnly, kReresolve };

  static const char* triggerLabel(Trigger trigger);
  void resolve();
  void ask(size_t tried, std::string errors);
  void onAddress(const std::string& host, const std::string& port);
  void checkRole();
  void setConfirmed(bool confirmed, std::string reason);
  void retryLater(std::string reason);
  void countChange(Trigger trigger);
  void onSentinelMessage(std::string_view channel, std::string_view message);

  event::Scheduler& scheduler_;
  RedisNode& master_;
  metrics::Metrics& metrics_;
  std::string master_name_;
  int64_t timeout_ms_;
  int64_t backoff_min_ms_;
  int64_t backoff_max_ms_;
  std::vector<std::unique_ptr<RedisNode>> sentinels_;
  event::LivenessToken alive_;  // guards reply callbacks

  bool master_started_ = false;
  bool confirmed_ = false;
  bool resolving_ = false;
  bool resolve_again_ = false;   // a trigger arrived while a resolution was in flight
  bool change_counted_ = false;  // this episode (confirmed -> confirmed) was counted already
  bool shut_down_ = false;
  size_t preferred_ = 0;     // the sentinel that answered last is asked first
  int attempt_ = 0;          // consecutive failed resolutions (backoff)
  uint64_t role_check_ = 0;  // ROLE replies of older checks are ignored
  std::string resolved_;
  std::string last_switch_to_;  // +switch-master target already acted on (every sentinel sends it)
  std::string reason_ = "asking the sentinels for the master";
  std::function<void()> listener_;
  event::ScopedTimer retry_timer_;
};

}  // namespace sidelock::backend
