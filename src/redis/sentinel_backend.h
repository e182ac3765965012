// backend.type: sentinel — the single-master backend (RedisBackend: same scripts, same hand-off)
// on the master that Redis Sentinel names, kept there by a SentinelResolver.
//
// What this adds to RedisBackend:
//  - the master's address comes from the sentinels and follows failovers; the backend is ready
//    only while ROLE confirms the node is the master; a READONLY reply re-resolves and is answered
//    kUnavailable (queued waiters ride it out like any outage);
//  - backend.sentinel.wait_replicas = N > 0: every grant (acquire, release-and-grant hand-off) is
//    followed, pipelined on the same link, by `WAIT N <timeout>` (one at a time: grants sent while
//    one is in flight share the next, see waitFor). A grant that fewer than N
//    replicas acknowledged is given back (the release script's compare-and-delete) and answered
//    kUnavailable (acquire) or as not handed on (hand-off): the client never sees a grant or a
//    fencing token that only the master holds. The release of a given-back mutex, fair or
//    election grant is retried while it fails (the link to the master is down: a WAIT failed
//    because it dropped), checked against the grant's fencing token, until the grant's TTL ends
//    (see GiveBack). Extends are not WAITed for (an extension cannot be
//    taken back; losing one in a failover only shortens the lease to its previous expiry).
//  - /readyz and sidelock_backend_up{node}: the resolved master's address and every sentinel.
#pragma once

#include <uv.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "event/lifetime.h"
#include "event/retry_queue.h"
#include "event/scheduler.h"
#include "metrics/metrics.h"
#include "redis/redis_backend.h"
#include "redis/sentinel_resolver.h"

namespace sidelock::backend {

class SentinelBackend final : public Backend {
 public:
  /// config.nodes are the sentinels; config.sentinel names the master. `metrics` must outlive us.
  SentinelBackend(uv_loop_t* loop, event::Scheduler& scheduler, const config::BackendConfig& config,
                  int64_t max_ttl_ms, metrics::Metrics& metrics);
  ~SentinelBackend() override;

  void start() override;
  /// Acquire and hand-off grants wait for backend.sentinel.wait_replicas (WAIT); a grant that
  /// did not reach them is taken back. A hand-off whose grant was taken back answers kOk with
  /// token 0 (released; the next owner retries).
  void run(const Operation& op, OutcomeCallback cb) override;
  bool canHandOff() const override { return true; }

  void scanHolders(const HolderScan& scan, ScanCallback cb) override {
    redis_->scanHolders(scan, std::move(cb));
  }
  void setReleaseListener(ReleaseListener listener) override;
  void watchReleases(std::string_view name) override;
  void unwatchReleases(std::string_view name) override;
  void setReadyListener(std::function<void()> listener) override;

  BackendHealth health() const override;
  void shutdown(std::function<void()> done) override;

  /// For tests and diagnostics.
  RedisNode& master() { return redis_->node(); }
  SentinelResolver& resolver() { return *resolver_; }

 private:
  struct GrantCheck;
  /// Runs a granting operation (acquire, hand-off) and, with wait_replicas, a WAIT right behind
  /// it on the same link; answers once both replies are in.
  void grantThenWait(const Operation& op, OutcomeCallback cb);
  /// One WAIT at a time. Redis answers nothing behind a WAIT until it returns, so WAITs sent back
  /// to back (one per grant) held every renewal and PING behind them for their sum, past
  /// command_timeout_ms with a stalled replica: the link was torn down and leases were lost. A
  /// WAIT vouches for every write its connection sent before it, so the grants sent while one is
  /// in flight share the next, sent when it returns.
  void waitFor(std::shared_ptr<GrantCheck> check);
  void sendWait();
  /// A READONLY answer means the node was demoted: re-resolve (while we are alive) and tell the
  /// caller "unavailable" so queued waiters ride it out.
  StatusOr<Outcome> watchReadOnly(StatusOr<Outcome> reply, const event::LivenessToken::Ref& alive);
  /// A grant given back whose release has not run yet. Its release carries the grant's fencing
  /// token (Operation::only_token), so a retry never releases a later grant, even one to the
  /// same owner (who may have been granted the lock again meanwhile): it answers "not held" once
  /// anything was granted after it.
  struct GiveBack {
    std::string name;
    LockKind kind = LockKind::kMutex;
    std::string owner;         // the grantee: the acquirer, or a hand-off's next owner
    uint64_t token = 0;        // the grant's fencing token (an election's term)
    int64_t until_us = 0;      // the grant's TTL is over by then (scheduler clock): the key is gone
    int64_t next_try_us = 0;   // retries back off while the master refuses or times out
    int64_t backoff_ms = 0;
    int attempts = 0;
  };
  /// Sends a given-back grant's release. Sent at once after the failed WAIT: while the link is up
  /// it runs right behind the grant. If it fails (and can be limited to the grant's token),
  /// onGiveBackFailed keeps it in give_backs_, which sends it again once the master is ready,
  /// until it ran or the grant's TTL ended.
  void giveBack(GiveBack grant);
  void onGiveBackFailed(GiveBack grant, const Status& why);
  /// give_backs_: retried with backoff while the master is ready (asked every first backoff while
  /// it is not), until their TTL ends; the oldest dropped when too many wait.
  event::RetryQueue<GiveBack> giveBackRetries();
  bool ready() const;
  void onConfirmedChanged();
  void updateUpGauges();

  event::Scheduler& scheduler_;
  metrics::Metrics& metrics_;
  int wait_replicas_;
  int64_t wait_timeout_ms_;
  int64_t command_timeout_ms_;
  std::unique_ptr<RedisBackend> redis_;
  std::unique_ptr<SentinelResolver> resolver_;
  std::function<void()> ready_listener_;
  std::map<std::string, prometheus::Gauge*> up_series_;  // backend_up{node} of the master
  // Reply callbacks check it before touching `this`: a call made after shutdown() is answered
  // after shutdown's done callback, when the owner may already have destroyed us.
  bool wait_in_flight_ = false;
  std::vector<std::shared_ptr<GrantCheck>> next_wait_;  // grants sent since the WAIT in flight
  // Given-back grants whose release failed (giveBackRetries()).
  event::RetryQueue<GiveBack> give_backs_;
  event::LivenessToken alive_;
  bool shut_down_ = false;
};

}  // namespace sidelock::backend
