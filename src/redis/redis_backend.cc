#include "redis/redis_backend.h"

#include <vector>

#include "common/log.h"
#include "redis/holder_scan.h"
#include "redis/scripts.h"

namespace sidelock::backend {

RedisNodeOptions nodeOptionsFromConfig(const config::BackendConfig& config,
                                       const config::RedisNodeAddress& address) {
  RedisNodeOptions o;
  o.address = address;
  o.username = config.username;
  o.password = config.password;
  o.db = config.db;
  o.connect_timeout_ms = config.connect_timeout_ms;
  o.reconnect_min_ms = config.reconnect_min_ms;
  o.reconnect_max_ms = config.reconnect_max_ms;
  o.health_interval_ms = config.health_interval_ms;
  o.command_timeout_ms = config.command_timeout_ms;
  o.scripts = sidelockScripts();
  if (config.tls.enabled) {
    auto tls = TlsClientContext::create(config.tls);
    if (tls.isOk()) {
      o.tls = std::move(*tls);
    } else {
      o.tls_error = tls.status().message();
    }
  }
  return o;
}

namespace {

config::RedisNodeAddress firstNode(const config::BackendConfig& config) {
  if (!config.nodes.empty()) return config.nodes.front();
  config::RedisNodeAddress a;
  a.host = "127.0.0.1";
  a.port = 6379;
  return a;
}

}  // namespace

RedisBackend::RedisBackend(uv_loop_t* loop, event::Scheduler& scheduler,
                           const config::BackendConfig& config, int64_t max_ttl_ms,
                           metrics::Metrics& metrics)
    : RedisBackend(loop, scheduler, config, max_ttl_ms, metrics, firstNode(config),
                   &metrics.node(firstNode(config).toString())) {
  if (config.nodes.size() > 1) {
    SL_LOG(kWarn, "redis.extra_nodes_ignored", {"node", node_->address()},
           {"configured", static_cast<unsigned long>(config.nodes.size())});
  }
}

RedisBackend::RedisBackend(uv_loop_t* loop, event::Scheduler& scheduler,
                           const config::BackendConfig& config, int64_t max_ttl_ms,
                           metrics::Metrics& metrics, const config::RedisNodeAddress& address,
                           metrics::NodeMetrics* node_metrics)
    : metrics_(metrics),
      scheduler_(scheduler),
      timeout_ms_(config.command_timeout_ms),
      scripts_{config.key_prefix, std::to_string(tokenCounterTtlMs(max_ttl_ms)), false},
      watches_(config.key_prefix) {
  node_ = std::make_unique<RedisNode>(loop, scheduler, nodeOptionsFromConfig(config, address),
                                      node_metrics);
  address_ = std::make_shared<std::string>(node_->address());
  metrics_.backend_ready.Set(0);
  node_->setStateListener([this](bool) {
    // Posted by the node; read the current state rather than the (possibly stale) transition.
    if (shut_down_) return;
    *address_ = node_->address();
    if (topology_.on_node_state) topology_.on_node_state(node_->up());
    const bool ready = node_->up() && (!topology_.confirmed || topology_.confirmed());
    metrics_.backend_ready.Set(ready ? 1 : 0);
    if (ready && ready_listener_) ready_listener_();
  });
  node_->setMessageListener([this](std::string_view channel, std::string_view payload) {
    watches_.onMessage(channel, payload);
  });
  node_->setResubscribedListener([this](const std::string& channel) {
    watches_.onMessage(channel, announcement::kResubscribed);
  });
}

RedisBackend::~RedisBackend() = default;

void RedisBackend::start() { node_->start(); }

void RedisBackend::run(const Operation& op, OutcomeCallback cb) {
  StatusOr<ScriptCall> script = scriptCallFor(op, scripts_);
  if (!script.isOk()) {
    // A verb no script serves for this kind: answered on a later loop turn (src/README.md,
    // rule 4); the callback may outlive us, so it captures nothing of ours.
    scheduler_.post([cb = std::move(cb), why = script.status()] { cb(why); });
    return;
  }
  const ScriptCall& call = *script;
  const ScriptCall::Views v = call.views();
  node_->runScriptArgs(
      static_cast<size_t>(call.script), v.keyArgs(), v.argArgs(), timeout_ms_, call.node_op,
      [address = address_, script = call.script, cb = std::move(cb)](StatusOr<RedisValue> r) {
        cb(decodeOutcome(r, script, *address));
      });
}

void RedisBackend::acquireAll(const std::vector<std::string>& names, std::string_view owner,
                              int64_t ttl_ms, std::string_view holder, AllOutcomeCallback cb) {
  std::vector<std::string> keys;
  keys.reserve(4 * names.size());
  for (const std::string& name : names) {
    keys.push_back(lockKey(scripts_.prefix, name));
    keys.push_back(tokenKey(scripts_.prefix, name));
    keys.push_back(holderRecordKey(scripts_.prefix, name));  // as a single acquire records it
    keys.push_back(lockDelayKey(scripts_.prefix, name));     // a running delay keeps it busy
  }
  const std::vector<std::string_view> key_views(keys.begin(), keys.end());
  const std::string ttl = std::to_string(ttl_ms);
  // Each grant is news to the name's event streams (acquire_all.lua announces it per name).
  std::vector<std::string> channels;
  channels.reserve(names.size());
  for (const std::string& name : names) channels.push_back(releaseChannel(scripts_.prefix, name));
  const std::string counter = grantCounterArg(scripts_);
  std::vector<std::string_view> args = {owner, ttl, counter, holder, announcement::kGranted};
  args.insert(args.end(), channels.begin(), channels.end());
  node_->runScriptArgs(
      static_cast<size_t>(ScriptId::kAcquireAll), key_views, args, timeout_ms_, NodeOp::kAcquire,
      [address = address_, count = names.size(), cb = std::move(cb)](StatusOr<RedisValue> r) {
        cb(decodeAllOutcome(r, count, *address));
      });
}

void RedisBackend::scanHolders(const HolderScan& scan, ScanCallback cb) {
  scanHolderRecords(
      scheduler_, {node_->address()},
      [this, alive = alive_.ref()](const std::string&) -> RedisNode* {
        return alive.expired() || shut_down_ ? nullptr : node_.get();
      },
      scripts_.prefix, scan, timeout_ms_, std::move(cb));
}

void RedisBackend::watchReleases(std::string_view name) {
  if (shut_down_) return;
  if (watches_.add(name)) node_->subscribe(releaseChannel(scripts_.prefix, name));
}

void RedisBackend::unwatchReleases(std::string_view name) {
  if (watches_.remove(name)) node_->unsubscribe(releaseChannel(scripts_.prefix, name));
}

BackendHealth RedisBackend::health() const {
  BackendHealth h;
  NodeHealth n;
  n.address = node_->address();
  n.up = node_->up();
  n.reason = node_->downReason();
  h.ready = n.up;
  if (!h.ready) h.reason = "redis " + n.address + " is down: " + n.reason;
  h.nodes.push_back(std::move(n));
  return h;
}

void RedisBackend::shutdown(std::function<void()> done) {
  shut_down_ = true;
  watches_.clear();
  metrics_.backend_ready.Set(0);
  node_->shutdown(std::move(done));
}

}  // namespace sidelock::backend
