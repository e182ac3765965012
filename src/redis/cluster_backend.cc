#include "redis/cluster_backend.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <set>

#include "common/log.h"
#include "redis/holder_scan.h"
#include "redis/redis_backend.h"

namespace sidelock::backend {

/// One script call on its way through the cluster: kept until answered, so a redirection can send
/// the same arguments elsewhere.
// One operation on its way through redirections and TRYAGAIN retries: the script call is kept
// so that it can be sent again as it was.
struct ClusterBackend::Call {
  ScriptCall script;
  uint16_t slot = 0;
  int redirects = 0;
  int tries_left = 0;  // TRYAGAIN retries still allowed
  OutcomeCallback cb;

  void done(const StatusOr<RedisValue>& reply, const std::string& node) {
    cb(decodeOutcome(reply, script.script, node));
  }
};

namespace {

const char* kReasonMoved = "moved";
const char* kReasonSlotsRefresh = "slots_refresh";

}  // namespace

ClusterBackend::ClusterBackend(uv_loop_t* loop, event::Scheduler& scheduler,
                               const config::BackendConfig& config, int64_t max_ttl_ms,
                               metrics::Metrics& metrics)
    : loop_(loop),
      scheduler_(scheduler),
      metrics_(metrics),
      seeds_(config.nodes),
      scripts_{config.key_prefix, std::to_string(tokenCounterTtlMs(max_ttl_ms)), true},
      timeout_ms_(config.command_timeout_ms),
      watches_(config.key_prefix) {
  // One TLS context (and one set of credentials) for every node: discovered masters are verified
  // against backend.tls.server_name, or against the host the cluster announces for them.
  config::RedisNodeAddress any = seeds_.empty() ? config::RedisNodeAddress{} : seeds_.front();
  base_options_ = nodeOptionsFromConfig(config, any);
  base_options_.sharded_pubsub = true;
  metrics_.backend_ready.Set(0);
}

ClusterBackend::~ClusterBackend() = default;

void ClusterBackend::start() {
  ensureSeeds();
  armPeriodicRefresh();
}

// ---- script calls ----

void ClusterBackend::run(const Operation& op, OutcomeCallback cb) {
  StatusOr<ScriptCall> script = scriptCallFor(op, scripts_);
  if (!script.isOk()) {  // a verb no script serves for this kind (src/README.md, rule 4)
    scheduler_.post([cb = std::move(cb), why = script.status()] { cb(why); });
    return;
  }
  auto call = std::make_shared<Call>();
  call->script = std::move(*script);
  call->slot = clusterKeySlot(call->script.keys[0]);
  call->tries_left = static_cast<int>(std::max<int64_t>(4, timeout_ms_ / kTryAgainDelayMs));
  call->cb = std::move(cb);
  route(std::move(call));
}

void ClusterBackend::route(std::shared_ptr<Call> call) {
  const config::RedisNodeAddress* master = shut_down_ ? nullptr : map_.masterOf(call->slot);
  if (master == nullptr) {
    const Status why = shut_down_ ? cancelled("redis cluster backend shutting down")
                                  : unavailable("redis cluster: no master known for slot " +
                                                std::to_string(call->slot) +
                                                (map_.empty() ? " (no slot map yet)" : ""));
    if (!shut_down_) scheduleRefresh();
    scheduler_.post([call, why] { call->done(why, "cluster"); });
    return;
  }
  send(std::move(call), *master, false);
}

void ClusterBackend::send(std::shared_ptr<Call> call, const config::RedisNodeAddress& target,
                          bool asking) {
  Node& node = nodeFor(target);
  const std::string address = node.redis->address();
  if (std::string why; node.redis->up() && !supported(*node.redis, &why)) {
    scheduler_.post([call, why, address] { call->done(unavailable(why), address); });
    return;
  }
  if (asking) {
    // Same connection, same turn: ASKING and the script leave in this order (in one write, or
    // in two back to back when ASKING fills a batch: RedisConnectionOptions::flush_every_commands).
    node.redis->command({"ASKING"}, timeout_ms_, [](StatusOr<RedisValue>) {});
  }
  const ScriptCall::Views v = call->script.views();
  node.redis->runScriptArgs(static_cast<size_t>(call->script.script), v.keyArgs(), v.argArgs(),
                            timeout_ms_, call->script.node_op,
                            [this, alive = alive_.ref(), call, address](StatusOr<RedisValue> r) {
                              if (alive.expired()) {
                                call->done(cancelled("redis cluster backend destroyed"), address);
                                return;
                              }
                              onReply(call, address, std::move(r));
                            });
}

void ClusterBackend::onReply(std::shared_ptr<Call> call, const std::string& address,
                             StatusOr<RedisValue> r) {
  if (!shut_down_ && r.isOk() && r->isError()) {
    ClusterRedirect redirect;
    const bool redirected = parseClusterRedirect(r->str, &redirect);
    const bool try_again = std::string_view(r->str).starts_with("TRYAGAIN");
    if (redirected && call->redirects < kMaxRedirects) {
      ++call->redirects;
      const bool ask = redirect.kind == ClusterRedirect::Kind::kAsk;
      metrics_.backend_cluster_redirects_total.Add({{"kind", ask ? "ask" : "moved"}}).Increment();
      if (!ask) applyMoved(&redirect, address);
      if (redirect.target.host.empty()) redirect.target.host = hostOf(address);
      send(std::move(call), redirect.target, ask);
      return;
    }
    // The script did not run (the reply says so), so it may be sent again, after a short delay
    // within the command budget: TRYAGAIN (a multi-key script while its slot migrates), and
    // redirects that go round in circles (two masters naming each other while a slot's new
    // owner is not yet known to both: the map is read again meanwhile).
    if ((redirected || try_again) && call->tries_left > 0) {
      --call->tries_left;
      if (redirected) {
        call->redirects = kMaxRedirects - 1;  // one hop per round from here: no storm of sends
        scheduleRefresh();
      }
      retryLater(std::move(call));
      return;
    }
    // Not run, and the cluster cannot serve it now (CLUSTERDOWN: slots without a master; a slot
    // still moving past the budget): an outage callers ride out (waiters keep their place; a
    // client is told 503 backend_unavailable and may retry), not an error of the request.
    if (redirected || try_again || std::string_view(r->str).starts_with("CLUSTERDOWN")) {
      scheduleRefresh();
      call->done(unavailable("redis " + address + ": " + r->str), address);
      return;
    }
  } else if (!shut_down_ && !r.isOk()) {
    if (r.status().code() == StatusCode::kCancelled) {
      // The node left the slot map while the script was in flight. It may or may not have run
      // there, so it is not run again elsewhere (a hand-off run twice would lose its grant): a
      // transient failure, as for a node that went down. Whether it may have run is the
      // connection's to say (written to the node or not).
      Status why = unavailable("redis " + address + " left the cluster's slot map");
      if (r.status().outcomeUnknown()) why.setOutcomeUnknown();
      call->done(std::move(why), address);
      return;
    }
    if (r.status().code() == StatusCode::kUnavailable) scheduleRefresh();
  }
  call->done(r, address);
}

void ClusterBackend::retryLater(std::shared_ptr<Call> call) {
  auto id = std::make_shared<event::Scheduler::TimerId>(0);
  *id = scheduler_.runAfter(kTryAgainDelayMs, alive_.guarded([this, id] {
    auto it = delayed_.find(*id);
    if (it == delayed_.end()) return;
    std::shared_ptr<Call> c = std::move(it->second);
    delayed_.erase(it);
    route(std::move(c));
  }));
  delayed_.emplace(*id, std::move(call));
}

// The release script SPUBLISHes: on Redis 6 every release would fail, so such a master is
// refused as a whole (not ready, every call unavailable) with a reason that says why.
bool ClusterBackend::supported(const RedisNode& node, std::string* reason) {
  const std::string& version = node.serverInfo().version;
  if (std::atoi(version.c_str()) >= 7) return true;
  *reason = "redis cluster master " + node.address() + " runs Redis " + version +
            "; type cluster needs Redis 7.0 or later (sharded pub/sub)";
  return false;
}

// ---- nodes ----

ClusterBackend::Node& ClusterBackend::nodeFor(const config::RedisNodeAddress& address) {
  const std::string key = address.toString();
  auto it = nodes_.find(key);
  if (it != nodes_.end()) return it->second;
  RedisNodeOptions options = base_options_;
  options.address = address;
  Node node;
  node.address = address;
  node.redis =
      std::make_unique<RedisNode>(loop_, scheduler_, std::move(options), &metrics_.node(key));
  RedisNode* raw = node.redis.get();
  raw->setStateListener([this, key](bool) {
    auto entry = nodes_.find(key);
    if (shut_down_ || entry == nodes_.end()) return;  // retired meanwhile
    // A master went down (maybe failing over) or a node came up (maybe the first we can ask).
    if (!entry->second.redis->up() || map_.empty()) scheduleRefresh();
    updateReady();
  });
  raw->setMessageListener([this](std::string_view channel, std::string_view payload) {
    watches_.onMessage(channel, payload);
  });
  raw->setResubscribedListener([this](const std::string& channel) {
    watches_.onMessage(channel, announcement::kResubscribed);
  });
  raw->setSubscribeErrorListener([this, key](const std::string&, const std::string& error) {
    // A shard channel's slot moved away from the node we subscribed on (the node said
    // "sunsubscribe", our SSUBSCRIBE again got MOVED): follow it now, before the other nodes
    // may even know.
    ClusterRedirect redirect;
    if (!shut_down_ && parseClusterRedirect(error, &redirect) &&
        redirect.kind == ClusterRedirect::Kind::kMoved) {
      applyMoved(&redirect, key);
    } else {
      scheduleRefresh();
    }
  });
  it = nodes_.emplace(key, std::move(node)).first;
  if (!shut_down_) raw->start();
  return it->second;
}

void ClusterBackend::retireNode(const std::string& address) {
  auto it = nodes_.find(address);
  if (it == nodes_.end()) return;
  SL_LOG(kInfo, "redis.cluster_node_dropped", {"node", address});
  std::unique_ptr<RedisNode> redis = std::move(it->second.redis);
  nodes_.erase(it);
  RedisNode* raw = redis.get();
  retiring_.push_back(std::move(redis));
  raw->shutdown(alive_.guarded([this, raw, address] {
    if (shut_down_) return;  // shutdown() waits for it and frees it
    std::erase_if(retiring_, [raw](const std::unique_ptr<RedisNode>& n) { return n.get() == raw; });
    // Its series go too (a node that left is not "down"), unless a node at the same address was
    // made again meanwhile and shares them.
    if (nodes_.count(address) == 0) metrics_.forgetNode(address);
  }));
}

std::string ClusterBackend::hostOf(const std::string& address) const {
  auto it = nodes_.find(address);
  return it != nodes_.end() ? it->second.address.host : std::string("127.0.0.1");
}

// A node said a slot is served elsewhere now: patch the map, move the slot's subscriptions and
// have the whole map re-read (other slots probably moved too).
void ClusterBackend::applyMoved(ClusterRedirect* redirect, const std::string& from) {
  // An empty host ("MOVED 1 :6380") is the host of the node that answered.
  if (redirect->target.host.empty()) redirect->target.host = hostOf(from);
  if (map_.assign(redirect->slot, redirect->target)) {
    metrics_.backend_topology_changes_total.Add({{"reason", kReasonMoved}}).Increment();
    SL_LOG(kDebug, "redis.cluster_moved", {"slot", static_cast<int>(redirect->slot)},
           {"from", from}, {"to", redirect->target.toString()});
    rehomeWatches();
    updateReady();
  }
  scheduleRefresh();
}

// Seeds are only needed to find the cluster: they stay as nodes until the first map says which
// of them are masters, and come back when no node at all is up.
void ClusterBackend::ensureSeeds() {
  for (const auto& seed : seeds_) nodeFor(seed);
}

// ---- slot map ----

void ClusterBackend::scheduleRefresh() {
  if (shut_down_) return;
  if (refresh_in_flight_) {
    refresh_again_ = true;
    return;
  }
  if (refresh_timer_.pending()) return;
  const int64_t delay =
      std::max<int64_t>(0, last_refresh_ms_ + kMinRefreshGapMs - scheduler_.nowMs());
  refresh_timer_.start(scheduler_, delay, [this] { refreshNow(); });
}

void ClusterBackend::armPeriodicRefresh() {
  if (shut_down_) return;
  periodic_timer_.start(scheduler_, ready_ ? kRefreshIntervalMs : kDegradedRefreshIntervalMs,
                        [this] {
                          scheduleRefresh();
                          armPeriodicRefresh();
                        });
}

void ClusterBackend::refreshNow() {
  if (shut_down_ || refresh_in_flight_) return;
  // Ask the up nodes in turn, so one node with a stale view does not pin ours.
  std::vector<Node*> up;
  for (auto& [address, node] : nodes_) {
    if (node.redis->up()) up.push_back(&node);
  }
  if (up.empty()) {
    ensureSeeds();  // a node coming up calls scheduleRefresh()
    return;
  }
  Node* asked = up[refresh_cursor_++ % up.size()];
  refresh_in_flight_ = true;
  last_refresh_ms_ = scheduler_.nowMs();
  asked->redis->command({"CLUSTER", "SLOTS"}, timeout_ms_,
                        alive_.guarded([this, address = asked->address](StatusOr<RedisValue> r) {
                          if (shut_down_) return;
                          refresh_in_flight_ = false;
                          onClusterSlots(address, r);
                          if (refresh_again_) {
                            refresh_again_ = false;
                            scheduleRefresh();
                          }
                        }));
}

void ClusterBackend::onClusterSlots(const config::RedisNodeAddress& asked,
                                    const StatusOr<RedisValue>& reply) {
  StatusOr<SlotMap> map =
      reply.isOk() ? SlotMap::fromClusterSlots(*reply, asked) : StatusOr<SlotMap>(reply.status());
  if (map.isOk() && map->empty()) map = unavailable("the cluster has no slots assigned");
  if (!map.isOk()) {
    // Retried by the periodic refresh (every second while not ready), asking the next node.
    refresh_error_ = asked.toString() + ": " + map.status().message();
    if (auto suppressed = refresh_log_.admit(scheduler_.nowMs(), map.status().message())) {
      SL_LOG(kWarn, "redis.cluster_slots_failed", {"node", asked.toString()},
             {"reason", map.status().message()}, {"suppressed", *suppressed});
    }
    updateReady();
    return;
  }
  refresh_error_.clear();
  refresh_log_.reset();
  if (map->sameAs(map_)) return;
  const bool first = map_.empty();
  map_ = std::move(*map);
  if (!first) {
    metrics_.backend_topology_changes_total.Add({{"reason", kReasonSlotsRefresh}}).Increment();
  }
  const auto masters = map_.masters();
  SL_LOG(kInfo, "redis.cluster_slots", {"asked", asked.toString()},
         {"masters", static_cast<int>(masters.size())}, {"slots", map_.assignedSlots()});
  applyMap();
}

void ClusterBackend::applyMap() {
  std::set<std::string> wanted;
  for (const auto& master : map_.masters()) {
    wanted.insert(master.toString());
    nodeFor(master);
  }
  rehomeWatches();
  std::vector<std::string> drop;
  for (const auto& [address, node] : nodes_) {
    if (wanted.count(address) == 0) drop.push_back(address);
  }
  for (const auto& address : drop) retireNode(address);
  updateReady();
}

// ---- wake-ups ----

void ClusterBackend::watchReleases(std::string_view name) {
  if (shut_down_) return;
  if (watches_.add(name)) subscribeHome(std::string(name));
}

void ClusterBackend::unwatchReleases(std::string_view name) {
  if (!watches_.remove(name)) return;
  auto home = homes_.find(name);
  if (home == homes_.end()) return;
  auto node = nodes_.find(home->second);
  if (node != nodes_.end()) node->second.redis->unsubscribe(releaseChannel(scripts_.prefix, name));
  homes_.erase(home);
}

void ClusterBackend::subscribeHome(const std::string& name) {
  const std::string channel = releaseChannel(scripts_.prefix, name);
  const config::RedisNodeAddress* master = map_.masterOf(clusterKeySlot(channel));
  if (master == nullptr) return;  // subscribed when a map arrives (rehomeWatches)
  Node& node = nodeFor(*master);
  node.redis->subscribe(channel);
  homes_[name] = master->toString();
}

// Moves every watched channel to the master now serving its slot.
void ClusterBackend::rehomeWatches() {
  for (const auto& [name, count] : watches_.names()) {
    const std::string channel = releaseChannel(scripts_.prefix, name);
    const config::RedisNodeAddress* master = map_.masterOf(clusterKeySlot(channel));
    auto home = homes_.find(name);
    const std::string want = master != nullptr ? master->toString() : std::string();
    if (home != homes_.end() && home->second == want) continue;
    if (home != homes_.end()) {
      auto old = nodes_.find(home->second);
      if (old != nodes_.end()) old->second.redis->unsubscribe(channel);
      homes_.erase(home);
    }
    if (master != nullptr) subscribeHome(name);
  }
}

std::string ClusterBackend::subscriptionHome(std::string_view name) const {
  auto it = homes_.find(name);
  return it == homes_.end() ? std::string() : it->second;
}

void ClusterBackend::scanHolders(const HolderScan& scan, ScanCallback cb) {
  std::vector<std::string> masters;
  for (const config::RedisNodeAddress& m : map_.masters()) masters.push_back(m.toString());
  if (masters.empty()) {
    scheduler_.post([cb = std::move(cb)] {
      cb(Status(StatusCode::kUnavailable, "redis cluster: no slot map yet"));
    });
    return;
  }
  scanHolderRecords(
      scheduler_, std::move(masters),
      [this, alive = alive_.ref()](const std::string& address) -> RedisNode* {
        return alive.expired() || shut_down_ ? nullptr : node(address);
      },
      scripts_.prefix, scan, timeout_ms_, std::move(cb));
}

RedisNode* ClusterBackend::node(const std::string& address) {
  auto it = nodes_.find(address);
  return it == nodes_.end() ? nullptr : it->second.redis.get();
}

// ---- health ----

bool ClusterBackend::computeReady(std::string* reason) const {
  if (map_.empty()) {
    std::string why = "redis cluster: no slot map yet";
    if (!refresh_error_.empty()) why += "; CLUSTER SLOTS from " + refresh_error_;
    for (const auto& [address, node] : nodes_) {
      if (!node.redis->up()) why += "; " + address + ": " + node.redis->downReason();
    }
    *reason = why;
    return false;
  }
  const int missing = kClusterSlots - map_.assignedSlots();
  if (missing > 0) {
    *reason = "redis cluster: " + std::to_string(missing) + " of " + std::to_string(kClusterSlots) +
              " slots have no master";
    return false;
  }
  for (const auto& master : map_.masters()) {
    auto it = nodes_.find(master.toString());
    if (it == nodes_.end() || !it->second.redis->up()) {
      *reason = "redis cluster master " + master.toString() + " is down" +
                (it != nodes_.end() ? ": " + it->second.redis->downReason() : std::string());
      return false;
    }
    if (!supported(*it->second.redis, reason)) return false;
  }
  return true;
}

void ClusterBackend::updateReady() {
  if (shut_down_) return;
  std::string reason;
  const bool ready = computeReady(&reason);
  metrics_.backend_ready.Set(ready ? 1 : 0);
  if (ready == ready_) return;
  ready_ = ready;
  armPeriodicRefresh();  // the period depends on readiness
  if (ready && ready_listener_) {
    scheduler_.post(alive_.guarded([this] {
      if (!shut_down_ && ready_ && ready_listener_) ready_listener_();
    }));
  }
}

BackendHealth ClusterBackend::health() const {
  BackendHealth h;
  h.ready = computeReady(&h.reason);
  if (h.ready) h.reason.clear();
  // Every shard's master; before the first map, the seeds.
  std::vector<std::string> shown;
  if (!map_.empty()) {
    for (const auto& master : map_.masters()) shown.push_back(master.toString());
  } else {
    for (const auto& [address, node] : nodes_) shown.push_back(address);
  }
  for (const auto& address : shown) {
    NodeHealth n;
    n.address = address;
    auto it = nodes_.find(address);
    n.up = it != nodes_.end() && it->second.redis->up();
    n.reason = it != nodes_.end() ? it->second.redis->downReason() : "not connected";
    h.nodes.push_back(std::move(n));
  }
  return h;
}

void ClusterBackend::shutdown(std::function<void()> done) {
  if (!shut_down_) {
    shut_down_ = true;
    metrics_.backend_ready.Set(0);
    refresh_timer_.reset();
    periodic_timer_.reset();
    watches_.clear();
    homes_.clear();
    for (auto& entry : delayed_) {
      scheduler_.cancel(entry.first);
      // (Not a structured binding: clang before 16 cannot capture one.)
      scheduler_.post([call = entry.second] {
        call->done(cancelled("redis cluster backend shutting down"), "cluster");
      });
    }
    delayed_.clear();
  }
  std::vector<RedisNode*> all;
  for (auto& [address, node] : nodes_) all.push_back(node.redis.get());
  for (auto& node : retiring_) all.push_back(node.get());
  auto left = std::make_shared<size_t>(all.size());
  auto finish = std::make_shared<std::function<void()>>(std::move(done));
  if (all.empty()) {
    if (*finish) scheduler_.post(std::move(*finish));
    return;
  }
  for (RedisNode* node : all) {
    node->shutdown([left, finish] {
      if (--*left == 0 && *finish) (*finish)();
    });
  }
}

}  // namespace sidelock::backend
