#include "redis/sentinel_backend.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "common/log.h"
#include "redis/scripts.h"

namespace sidelock::backend {
namespace {

// Given-back grants whose release is still to be retried. Each is a few short strings; a master
// down for long under a stream of given-back grants drops the oldest (whose TTL ends first).
constexpr size_t kMaxPendingGiveBacks = 1024;
// How often the pending give-backs ask whether the master is back, and the first retry's delay
// after a refusal; each failure doubles it, up to kGiveBackMaxBackoffMs.
constexpr int64_t kGiveBackPollMs = 50;
constexpr int64_t kGiveBackMaxBackoffMs = 1000;

// Whether a release of `kind` can be limited to one grant's fencing token (release.lua checks the
// lock's counter; the permits' and readers' scripts have no per-lease token to check).
bool releaseChecksToken(LockKind kind) {
  const StatusOr<ScriptId> script = scriptFor(kind, Verb::kRelease);
  return script.isOk() && *script == ScriptId::kRelease;
}

// Placeholder until the sentinels name the master: the node is not started before that.
config::RedisNodeAddress unresolvedAddress(const config::BackendConfig& config) {
  config::RedisNodeAddress a;
  a.host = "unresolved-" + config.sentinel.master_name;
  a.port = 6379;
  return a;
}

bool isReadOnly(const Status& s) {
  // decode*() turn a Redis error reply into kInternal "redis <node>: <Redis's message>".
  return s.code() == StatusCode::kInternal && s.message().find(": READONLY ") != std::string::npos;
}

}  // namespace

/// Joins a grant's reply with the reply of the WAIT that covers it (either may come first when
/// the link fails). Holds what it needs to judge the WAIT, so no callback needs `this`.
struct SentinelBackend::GrantCheck {
  int required = 0;
  int64_t wait_timeout_ms = 0;
  uint64_t link = 0;  // the master link its grant went on (RedisNode::linkGeneration)
  std::optional<StatusOr<RedisValue>> wait;
  std::function<void()> then;
  int64_t grant_at_us = 0;  // when the grant's reply came (the scheduler's clock)
  int64_t wait_at_us = 0;   // when the WAIT's did
  /// The WAIT answered before the grant. Redis answers one connection in order, so the grant's
  /// write came after the WAIT (its EVALSHA met NOSCRIPT and was sent again as EVAL, behind
  /// everything queued): the WAIT did not cover it.
  bool wait_came_first = false;

  void waitDone(StatusOr<RedisValue> r, int64_t now_us) {
    wait.emplace(std::move(r));
    wait_at_us = now_us;
    if (then) {
      std::exchange(then, nullptr)();
    } else {
      wait_came_first = true;
    }
  }
  void grantDone(int64_t now_us, std::function<void()> next) {
    grant_at_us = now_us;
    if (wait) {
      next();
    } else {
      then = std::move(next);
    }
  }
  /// Replicas that acknowledged (-1 when WAIT itself failed).
  int64_t acked() const {
    if (!wait || !wait->isOk() || (*wait)->type != RedisValue::Type::kInteger) return -1;
    return (*wait)->integer;
  }
  bool enough() const { return !wait_came_first && acked() >= required; }
  /// The part of the grant's validity spent waiting for the WAIT (the script measured it before).
  int64_t waitedMs() const { return std::max<int64_t>(0, (wait_at_us - grant_at_us + 999) / 1000); }
  /// Why a grant was given back.
  Status notReplicated() const {
    const int64_t n = acked();
    std::string why;
    if (wait_came_first && n >= 0) {
      why =
          "the grant was written after the WAIT meant to cover it (its script was sent again "
          "after a script cache miss)";
    } else if (n >= 0) {
      why = std::to_string(n) + " of " + std::to_string(required) +
            " replicas acknowledged it within " + std::to_string(wait_timeout_ms) + " ms";
    } else {
      why = "WAIT failed: " +
            (wait && !wait->isOk() ? wait->status().message() : std::string("unexpected reply"));
    }
    return unavailable("grant given back, not replicated (backend.sentinel.wait_replicas): " + why);
  }
};

SentinelBackend::SentinelBackend(uv_loop_t* loop, event::Scheduler& scheduler,
                                 const config::BackendConfig& config, int64_t max_ttl_ms,
                                 metrics::Metrics& metrics)
    : scheduler_(scheduler),
      metrics_(metrics),
      wait_replicas_(config.sentinel.wait_replicas),
      // WAIT's own reply must come back within the link's liveness bound (command_timeout_ms),
      // after the script's: half of it leaves the other half to the script and the network.
      wait_timeout_ms_(std::max<int64_t>(1, config.command_timeout_ms / 2)),
      command_timeout_ms_(config.command_timeout_ms),
      give_backs_(giveBackRetries()) {
  // The master's errors and latency keep one label across failovers; backend_up{node} names the
  // address in use (updateUpGauges).
  redis_ = std::make_unique<RedisBackend>(
      loop, scheduler, config, max_ttl_ms, metrics, unresolvedAddress(config),
      &metrics.nodeWithoutUpGauge("sentinel-master:" + config.sentinel.master_name));
  resolver_ = std::make_unique<SentinelResolver>(loop, scheduler, config, redis_->node(), metrics);
  redis_->setTopologyHook({[this](bool up) { resolver_->onMasterState(up); },
                           [this] { return resolver_->confirmed(); }});
  resolver_->setConfirmedListener([this] { onConfirmedChanged(); });
  metrics_.addScrapeHook(alive_.guarded([this] { updateUpGauges(); }));
}

SentinelBackend::~SentinelBackend() {
  for (auto& [address, gauge] : up_series_) metrics_.backend_up.Remove(gauge);
}

void SentinelBackend::start() { resolver_->start(); }

bool SentinelBackend::ready() const {
  return !shut_down_ && redis_->node().up() && resolver_->confirmed();
}

void SentinelBackend::onConfirmedChanged() {
  if (shut_down_) return;
  metrics_.backend_ready.Set(ready() ? 1 : 0);
  if (ready() && ready_listener_) ready_listener_();
}

void SentinelBackend::setReadyListener(std::function<void()> listener) {
  ready_listener_ = std::move(listener);
  // RedisBackend's own readiness (node up while confirmed) ends in the same listener.
  redis_->setReadyListener(ready_listener_);
}

void SentinelBackend::updateUpGauges() {
  const std::string& current = resolver_->resolvedAddress();
  for (auto it = up_series_.begin(); it != up_series_.end();) {
    if (it->first == current) {
      ++it;
    } else {
      metrics_.backend_up.Remove(it->second);  // a former master: not ours any more
      it = up_series_.erase(it);
    }
  }
  if (current.empty()) return;
  auto [it, added] = up_series_.emplace(current, nullptr);
  if (added) it->second = &metrics_.backend_up.Add({{"node", current}});
  it->second->Set(ready() ? 1 : 0);
}

StatusOr<Outcome> SentinelBackend::watchReadOnly(StatusOr<Outcome> reply,
                                                 const event::LivenessToken::Ref& alive) {
  if (reply.isOk() || !isReadOnly(reply.status())) return reply;
  if (!alive.expired()) resolver_->onReadOnly();
  return unavailable(reply.status().message());
}

void SentinelBackend::run(const Operation& op, OutcomeCallback cb) {
  if ((op.verb == Verb::kAcquire || op.verb == Verb::kHandOff) && wait_replicas_ > 0) {
    grantThenWait(op, std::move(cb));
    return;
  }
  // Inspect reads; nothing to re-resolve for. Everything else writes.
  if (op.verb == Verb::kInspect) {
    redis_->run(op, std::move(cb));
    return;
  }
  redis_->run(op, [this, alive = alive_.ref(), cb = std::move(cb)](StatusOr<Outcome> r) mutable {
    cb(watchReadOnly(std::move(r), alive));
  });
}

void SentinelBackend::grantThenWait(const Operation& op, OutcomeCallback cb) {
  auto check = std::make_shared<GrantCheck>();
  check->required = wait_replicas_;
  check->wait_timeout_ms = wait_timeout_ms_;
  check->link = redis_->node().linkGeneration();
  // Who holds the grant if it has to be taken back: the acquirer, or the hand-off's next owner.
  const bool hand_off = op.verb == Verb::kHandOff;
  auto finish = [this, name = std::string(op.name), kind = op.kind,
                 grantee = std::string(hand_off ? op.next_owner : op.owner), hand_off,
                 cb = std::move(cb)](StatusOr<Outcome> r, const GrantCheck& replication,
                                     const event::LivenessToken::Ref& alive) mutable {
    const bool granted = r.isOk() && r->ok() && (!hand_off || r->token != 0);
    if (!granted) {
      cb(std::move(r));
      return;
    }
    // The script set the lease's TTL before its reply came: by this time it is gone on its own.
    const int64_t lease_end_us = replication.grant_at_us + r->validity_ms * 1000;
    if (replication.enough()) {
      // The script measured the validity before the WAIT: what the wait took is spent (the
      // holder counts from this answer). Normally well under one WAIT timeout.
      r->validity_ms -= replication.waitedMs();
      if (r->validity_ms > 0) {
        cb(std::move(r));
        return;
      }
    }
    const Status why =
        replication.enough()
            ? unavailable(
                  "grant given back: its replication (backend.sentinel.wait_replicas) "
                  "took " +
                  std::to_string(replication.waitedMs()) + " ms, its whole validity")
            : replication.notReplicated();
    // Give the grant back: nobody will be told of it, so nobody may be left holding it.
    if (!alive.expired()) {
      GiveBack grant;
      grant.name = name;
      grant.kind = kind;
      grant.owner = grantee;
      grant.token = r->token;
      grant.until_us = lease_end_us;
      giveBack(std::move(grant));
    }
    if (!hand_off) {
      cb(std::move(why));
      return;
    }
    // The release stands (losing it in a failover only keeps the lock held until its TTL); the
    // next owner retries as after a busy attempt.
    SL_LOG(kWarn, "sentinel.handoff_not_replicated", {"name", name}, {"error", why.message()});
    r->token = 0;
    r->validity_ms = 0;
    r->holds = 0;  // the holds were the next owner's; ours are all given back (not "one left")
    cb(std::move(r));
  };
  redis_->run(op, [this, alive = alive_.ref(), check, scheduler = &scheduler_,
                   finish = std::move(finish)](StatusOr<Outcome> r) mutable {
    r = watchReadOnly(std::move(r), alive);
    // A raw pointer: the continuation is stored in *check (a shared_ptr would be a cycle); it
    // runs either right here or from the WAIT's callback, both of which hold `check`.
    check->grantDone(scheduler->nowUs(),
                     [raw = check.get(), alive, r = std::move(r),
                      finish = std::move(finish)]() mutable { finish(std::move(r), *raw, alive); });
  });
  waitFor(std::move(check));
}

void SentinelBackend::giveBack(GiveBack grant) {
  ++grant.attempts;
  // The operation's views must not point into `grant`, which the callback takes over before
  // run() reads them (run() copies what it keeps).
  const std::string name = grant.name;
  const std::string owner = grant.owner;
  Operation release = Operation::release(name, owner).of(grant.kind);
  release.only_token = grant.token;  // scriptCallFor passes it on where the script checks it
  redis_->run(release,
              [this, alive = alive_.ref(), grant = std::move(grant)](StatusOr<Outcome> r) mutable {
                // Destroyed: nothing is left to retry it (its TTL ends it).
                if (alive.expired()) return;
                r = watchReadOnly(std::move(r), alive);
                if (!r.isOk()) {
                  onGiveBackFailed(std::move(grant), r.status());
                  return;
                }
                // Released, or nothing of it left to release: not held (expired, released by its
                // owner, or a later grant moved the token on) or held by another owner.
                (r->ok() ? metrics_.unreplicated_released : metrics_.unreplicated_not_held)
                    .Increment();
                if (grant.attempts > 1) {
                  SL_LOG(kInfo, "sentinel.giveback_retried", {"name", grant.name},
                         {"kind", lockKindName(grant.kind)}, {"token", grant.token},
                         {"attempts", grant.attempts}, {"outcome", outcomeName(r->code)});
                }
              });
}

void SentinelBackend::onGiveBackFailed(GiveBack grant, const Status& why) {
  const int64_t now_us = scheduler_.nowUs();
  // Without a token to check, a retry could release a later grant to the same owner: such a
  // release (permits, readers) is tried once, as the lease's own release would be.
  const char* gave_up = nullptr;
  if (shut_down_) {
    gave_up = "the backend is shutting down";
  } else if (grant.token == 0 || !releaseChecksToken(grant.kind)) {
    gave_up = "its release cannot be limited to the grant's token";
  } else if (now_us >= grant.until_us) {
    gave_up = "its TTL ended";
  }
  if (gave_up != nullptr) {
    metrics_.unreplicated_gave_up.Increment();
    SL_LOG(kWarn, "sentinel.giveback_failed", {"name", grant.name},
           {"kind", lockKindName(grant.kind)}, {"attempts", grant.attempts},
           {"error", why.message()}, {"gave_up", gave_up},
           {"ttl_left_ms", std::max<int64_t>(0, (grant.until_us - now_us) / 1000)});
    return;
  }
  SL_LOG(kDebug, "sentinel.giveback_retry", {"name", grant.name},
         {"kind", lockKindName(grant.kind)}, {"attempts", grant.attempts},
         {"error", why.message()});
  give_backs_.later(std::move(grant));
}

event::RetryQueue<SentinelBackend::GiveBack> SentinelBackend::giveBackRetries() {
  using Retries = event::RetryQueue<GiveBack>;
  return Retries(
      scheduler_, {kMaxPendingGiveBacks, kGiveBackPollMs, kGiveBackMaxBackoffMs},
      // A failure queues it again (a later loop turn, rule 4).
      [this](GiveBack grant) { giveBack(std::move(grant)); },
      [this](const GiveBack& grant, Retries::Dropped why) {
        if (why == Retries::Dropped::kFull) {
          metrics_.unreplicated_dropped.Increment();
          SL_LOG(
              kWarn, "sentinel.giveback_dropped", {"name", grant.name},
              {"kind", lockKindName(grant.kind)}, {"pending", give_backs_.size()},
              {"ttl_left_ms", std::max<int64_t>(0, (grant.until_us - scheduler_.nowUs()) / 1000)});
          return;
        }
        metrics_.unreplicated_gave_up.Increment();
        SL_LOG(kWarn, "sentinel.giveback_failed", {"name", grant.name},
               {"kind", lockKindName(grant.kind)}, {"attempts", grant.attempts},
               {"gave_up", "its TTL ended before the master was back"});
      },
      [this] { return ready(); });
}

void SentinelBackend::waitFor(std::shared_ptr<GrantCheck> check) {
  next_wait_.push_back(std::move(check));
  // In the same write as the script, right behind it on the same link; or, while a WAIT is in
  // flight, the next one, sent when it returns. After shutdown at once (no WAIT goes out).
  if (!wait_in_flight_ || shut_down_) sendWait();
}

void SentinelBackend::sendWait() {
  auto batch = std::make_shared<std::vector<std::shared_ptr<GrantCheck>>>(std::move(next_wait_));
  next_wait_.clear();
  if (shut_down_) {
    // No WAIT after shutdown: its answer would come after shutdown's done. The grants waiting
    // for one are given back (if they came; those cancelled with the link are on their way).
    const int64_t now_us = scheduler_.nowUs();
    for (const auto& check : *batch) check->waitDone(cancelled("backend is shutting down"), now_us);
    return;
  }
  wait_in_flight_ = true;
  const uint64_t link = redis_->node().linkGeneration();
  redis_->node().command(
      {"WAIT", std::to_string(wait_replicas_), std::to_string(wait_timeout_ms_)},
      command_timeout_ms_,
      [this, alive = alive_.ref(), batch, link, scheduler = &scheduler_](StatusOr<RedisValue> r) {
        const int64_t now_us = scheduler->nowUs();
        for (const auto& check : *batch) {
          // A WAIT vouches only for its own connection's writes: a grant sent on a link that went
          // down since is not covered by one sent on the next.
          if (check->link != link) {
            check->waitDone(unavailable("the link to the master was re-established between the "
                                        "grant and its WAIT"),
                            now_us);
          } else {
            check->waitDone(r, now_us);
          }
        }
        if (alive.expired()) return;
        wait_in_flight_ = false;
        if (!next_wait_.empty()) sendWait();
      });
}

void SentinelBackend::setReleaseListener(ReleaseListener listener) {
  redis_->setReleaseListener(std::move(listener));
}
void SentinelBackend::watchReleases(std::string_view name) { redis_->watchReleases(name); }
void SentinelBackend::unwatchReleases(std::string_view name) { redis_->unwatchReleases(name); }

BackendHealth SentinelBackend::health() const {
  BackendHealth h;
  NodeHealth master;
  master.address =
      resolver_->resolvedAddress().empty() ? "(unresolved)" : resolver_->resolvedAddress();
  master.up = ready();
  master.role = "master";
  if (!master.up) {
    master.reason = resolver_->confirmed() ? redis_->node().downReason() : resolver_->reason();
  }
  h.ready = master.up;
  if (!h.ready) h.reason = "sentinel master is not available: " + master.reason;
  h.nodes.push_back(std::move(master));
  for (NodeHealth& s : resolver_->sentinelHealth()) h.nodes.push_back(std::move(s));
  return h;
}

void SentinelBackend::shutdown(std::function<void()> done) {
  // The pending give-backs are tried once more if the master is up (they go out before the link
  // closes), else dropped: their keys expire at their TTL, and the sidecar retrying past its own
  // shutdown is what the TTL is for.
  const bool can_send = ready();
  std::deque<GiveBack> pending = give_backs_.takeAll();
  shut_down_ = true;
  if (!pending.empty()) {
    SL_LOG(kInfo, "sentinel.giveback_at_shutdown", {"pending", pending.size()}, {"sent", can_send});
  }
  if (can_send) {
    for (GiveBack& grant : pending) giveBack(std::move(grant));
  } else {
    metrics_.unreplicated_gave_up.Increment(static_cast<double>(pending.size()));
  }
  metrics_.backend_ready.Set(0);
  resolver_->shutdown(alive_.guarded(
      [this, done = std::move(done)]() mutable { redis_->shutdown(std::move(done)); }));
}

}  // namespace sidelock::backend
