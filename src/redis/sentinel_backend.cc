#include "redis/sentinel_backend.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "common/log.h"

namespace sidelock::backend {
namespace {

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

/// Joins a grant's reply with the reply of the WAIT sent right behind it (either may come first
/// when the link fails). Holds what it needs to judge the WAIT, so no callback needs `this`.
struct SentinelBackend::GrantCheck {
  int required = 0;
  int64_t wait_timeout_ms = 0;
  std::optional<StatusOr<RedisValue>> wait;
  std::function<void()> then;

  void waitDone(StatusOr<RedisValue> r) {
    wait.emplace(std::move(r));
    if (then) std::exchange(then, nullptr)();
  }
  void grantDone(std::function<void()> next) {
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
  bool enough() const { return acked() >= required; }
  /// Why a grant was given back.
  Status notReplicated() const {
    const int64_t n = acked();
    const std::string why =
        n >= 0 ? std::to_string(n) + " of " + std::to_string(required) +
                     " replicas acknowledged it within " + std::to_string(wait_timeout_ms) + " ms"
               : "WAIT failed: " + (wait && !wait->isOk() ? wait->status().message()
                                                          : std::string("unexpected reply"));
    return unavailable("grant given back, not replicated (backend.sentinel.wait_replicas): " + why);
  }
};

SentinelBackend::SentinelBackend(uv_loop_t* loop, event::Scheduler& scheduler,
                                 const config::BackendConfig& config, int64_t max_ttl_ms,
                                 metrics::Metrics& metrics)
    : metrics_(metrics),
      wait_replicas_(config.sentinel.wait_replicas),
      // WAIT's own reply must come back within the link's liveness bound (command_timeout_ms),
      // after the script's: half of it leaves the other half to the script and the network.
      wait_timeout_ms_(std::max<int64_t>(1, config.command_timeout_ms / 2)),
      command_timeout_ms_(config.command_timeout_ms) {
  // The master's errors and latency keep one label across failovers; backend_up{node} names the
  // address in use (updateUpGauges).
  redis_ = std::make_unique<RedisBackend>(
      loop, scheduler, config, max_ttl_ms, metrics, unresolvedAddress(config),
      &metrics.nodeWithoutUpGauge("sentinel-master:" + config.sentinel.master_name));
  resolver_ = std::make_unique<SentinelResolver>(loop, scheduler, config, redis_->node(), metrics);
  redis_->setTopologyHook({[this](bool up) { resolver_->onMasterState(up); },
                           [this] { return resolver_->confirmed(); }});
  resolver_->setConfirmedListener([this] { onConfirmedChanged(); });
  metrics_.addScrapeHook([this, alive = std::weak_ptr<char>(alive_)] {
    if (!alive.expired()) updateUpGauges();
  });
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

template <typename T>
StatusOr<T> SentinelBackend::watchReadOnly(StatusOr<T> reply, const std::weak_ptr<char>& alive) {
  if (reply.isOk() || !isReadOnly(reply.status())) return reply;
  if (!alive.expired()) resolver_->onReadOnly();
  return unavailable(reply.status().message());
}

template <typename Reply, typename Send, typename Finish>
void SentinelBackend::grantThenWait(Send send, Finish finish) {
  auto check = std::make_shared<GrantCheck>();
  check->required = wait_replicas_;
  check->wait_timeout_ms = wait_timeout_ms_;
  send([this, alive = std::weak_ptr<char>(alive_), check, wait = wait_replicas_ > 0,
        finish = std::move(finish)](StatusOr<Reply> r) mutable {
    r = watchReadOnly(std::move(r), alive);
    if (!wait) {
      finish(std::move(r), nullptr, alive);
      return;
    }
    // A raw pointer: the continuation is stored in *check (a shared_ptr would be a cycle); it
    // runs either right here or from the WAIT's callback, both of which hold `check`.
    check->grantDone([raw = check.get(), alive, r = std::move(r),
                      finish = std::move(finish)]() mutable { finish(std::move(r), raw, alive); });
  });
  if (wait_replicas_ == 0) return;
  // In the same write as the script, right behind it on the same link.
  redis_->node().command({"WAIT", std::to_string(wait_replicas_), std::to_string(wait_timeout_ms_)},
                         command_timeout_ms_,
                         [check](StatusOr<RedisValue> r) { check->waitDone(std::move(r)); });
}

void SentinelBackend::acquire(std::string_view name, std::string_view owner, int64_t ttl_ms,
                              AcquireCallback cb) {
  grantThenWait<AcquireReply>(
      [&](AcquireCallback done) { redis_->acquire(name, owner, ttl_ms, std::move(done)); },
      [redis = redis_.get(), name = std::string(name), owner = std::string(owner),
       cb = std::move(cb)](StatusOr<AcquireReply> r, const GrantCheck* check,
                           const std::weak_ptr<char>& alive) mutable {
        if (check == nullptr || !r.isOk() || !r->granted || check->enough()) {
          cb(std::move(r));
          return;
        }
        // Give the grant back: nobody will be told of it, so nobody may be left holding it.
        if (!alive.expired()) redis->release(name, owner, [](StatusOr<OwnerCheck>) {});
        cb(check->notReplicated());
      });
}

void SentinelBackend::releaseAndGrant(std::string_view name, std::string_view owner,
                                      std::string_view next_owner, int64_t next_ttl_ms,
                                      HandOffCallback cb) {
  grantThenWait<HandOffReply>(
      [&](HandOffCallback done) {
        redis_->releaseAndGrant(name, owner, next_owner, next_ttl_ms, std::move(done));
      },
      [redis = redis_.get(), name = std::string(name), next_owner = std::string(next_owner),
       cb = std::move(cb)](StatusOr<HandOffReply> r, const GrantCheck* check,
                           const std::weak_ptr<char>& alive) mutable {
        if (check == nullptr || !r.isOk() || r->released != OwnerCheck::kOk || !r->next.granted ||
            check->enough()) {
          cb(std::move(r));
          return;
        }
        // The release stands (losing it in a failover only keeps the lock held until its TTL);
        // the grant to the next owner is taken back and it retries as after a busy attempt.
        if (!alive.expired()) redis->release(name, next_owner, [](StatusOr<OwnerCheck>) {});
        SL_LOG(kWarn, "sentinel.handoff_not_replicated", {"name", name},
               {"error", check->notReplicated().message()});
        r->next = AcquireReply{};
        cb(std::move(r));
      });
}

void SentinelBackend::release(std::string_view name, std::string_view owner,
                              OwnerCheckCallback cb) {
  redis_->release(name, owner,
                  [this, alive = std::weak_ptr<char>(alive_), cb = std::move(cb)](
                      StatusOr<OwnerCheck> r) mutable { cb(watchReadOnly(std::move(r), alive)); });
}

void SentinelBackend::extend(std::string_view name, std::string_view owner, int64_t ttl_ms,
                             ExtendCallback cb) {
  redis_->extend(name, owner, ttl_ms,
                 [this, alive = std::weak_ptr<char>(alive_), cb = std::move(cb)](
                     StatusOr<ExtendReply> r) mutable { cb(watchReadOnly(std::move(r), alive)); });
}

void SentinelBackend::inspect(std::string_view name, InspectCallback cb) {
  redis_->inspect(name, std::move(cb));
}

void SentinelBackend::forceRelease(std::string_view name, ForceReleaseCallback cb) {
  redis_->forceRelease(
      name, [this, alive = std::weak_ptr<char>(alive_), cb = std::move(cb)](
                StatusOr<ForcedRelease> r) mutable { cb(watchReadOnly(std::move(r), alive)); });
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
  shut_down_ = true;
  metrics_.backend_ready.Set(0);
  resolver_->shutdown(
      [this, alive = std::weak_ptr<char>(alive_), done = std::move(done)]() mutable {
        if (alive.expired()) return;
        redis_->shutdown(std::move(done));
      });
}

}  // namespace sidelock::backend
