#include "redis/sentinel_resolver.h"

#include <cstdlib>
#include <utility>

#include "common/log.h"
#include "redis/redis_backend.h"

namespace sidelock::backend {
namespace {

// A sentinel speaks RESP like any Redis server; it runs no scripts and has its own credentials.
RedisNodeOptions sentinelOptions(const config::BackendConfig& config,
                                 const config::RedisNodeAddress& address) {
  RedisNodeOptions o = nodeOptionsFromConfig(config, address);
  o.username = config.sentinel.username;
  o.password = config.sentinel.password;
  o.db = 0;
  o.scripts = nullptr;
  return o;
}

}  // namespace

// The `reason` label of sidelock_backend_topology_changes_total.
const char* SentinelResolver::triggerLabel(Trigger trigger) {
  switch (trigger) {
    case Trigger::kSwitchMaster:
      return "switch_master";
    case Trigger::kReadOnly:
      return "readonly";
    case Trigger::kReresolve:
      return "reresolve";
  }
  return "reresolve";
}

SentinelResolver::SentinelResolver(uv_loop_t* loop, event::Scheduler& scheduler,
                                   const config::BackendConfig& config, RedisNode& master,
                                   metrics::Metrics& metrics)
    : scheduler_(scheduler),
      master_(master),
      metrics_(metrics),
      master_name_(config.sentinel.master_name),
      timeout_ms_(config.command_timeout_ms),
      backoff_min_ms_(config.reconnect_min_ms),
      backoff_max_ms_(config.reconnect_max_ms) {
  for (const auto& address : config.nodes) {
    auto node = std::make_unique<RedisNode>(loop, scheduler, sentinelOptions(config, address),
                                            &metrics.node(address.toString()));
    node->setStateListener([this](bool up) {
      if (up && !shut_down_ && !confirmed_ && !resolving_ && !retry_timer_.pending()) resolve();
    });
    node->setMessageListener([this](std::string_view channel, std::string_view message) {
      onSentinelMessage(channel, message);
    });
    sentinels_.push_back(std::move(node));
  }
}

SentinelResolver::~SentinelResolver() = default;

void SentinelResolver::start() {
  for (auto& s : sentinels_) {
    s->subscribe(std::string(kSwitchMasterChannel));
    s->start();
  }
}

std::vector<NodeHealth> SentinelResolver::sentinelHealth() const {
  std::vector<NodeHealth> out;
  for (const auto& s : sentinels_) {
    NodeHealth n;
    n.address = s->address();
    n.up = s->up();
    n.reason = s->downReason();
    n.role = "sentinel";
    out.push_back(std::move(n));
  }
  return out;
}

void SentinelResolver::onMasterState(bool up) {
  if (shut_down_) return;
  if (up) {
    if (master_.address() == resolved_) checkRole();
    return;
  }
  setConfirmed(false, "master " + master_.address() + " is down: " + master_.downReason());
  resolve();  // the sentinels may already name its successor
}

void SentinelResolver::onReadOnly() {
  if (shut_down_ || !confirmed_) return;  // already re-resolving
  countChange(Trigger::kReadOnly);
  setConfirmed(false, "master " + master_.address() + " answered READONLY (it is a replica now)");
  resolve();
}

void SentinelResolver::onSentinelMessage(std::string_view channel, std::string_view message) {
  if (shut_down_ || channel != kSwitchMasterChannel) return;
  // "<master name> <old ip> <old port> <new ip> <new port>"
  const size_t space = message.find(' ');
  if (space == std::string_view::npos || message.substr(0, space) != master_name_) return;
  const size_t new_at = message.find(' ', message.find(' ', space + 1) + 1);
  const std::string to(new_at == std::string_view::npos ? message : message.substr(new_at + 1));
  if (to == last_switch_to_) return;  // every sentinel announces the same failover
  last_switch_to_ = to;
  SL_LOG(kInfo, "sentinel.switch_master", {"master", master_name_}, {"event", message});
  countChange(Trigger::kSwitchMaster);
  setConfirmed(false, "the sentinels switched master " + master_name_ + " to " + to);
  resolve();
}

void SentinelResolver::countChange(Trigger trigger) {
  if (change_counted_) return;
  change_counted_ = true;
  metrics_.backend_topology_changes_total.Add({{"reason", triggerLabel(trigger)}}).Increment();
}

void SentinelResolver::resolve() {
  if (shut_down_) return;
  if (resolving_) {
    resolve_again_ = true;
    return;
  }
  resolving_ = true;
  resolve_again_ = false;
  retry_timer_.reset();
  ask(0, "");
}

// Asks sentinel number `tried` (counting from the preferred one); `errors` collects why the
// earlier ones did not answer.
void SentinelResolver::ask(size_t tried, std::string errors) {
  if (tried == sentinels_.size()) {
    resolving_ = false;
    retryLater("no sentinel named master " + master_name_ + ": " + errors);
    return;
  }
  const size_t index = (preferred_ + tried) % sentinels_.size();
  RedisNode& sentinel = *sentinels_[index];
  if (!errors.empty()) errors += "; ";
  if (!sentinel.up()) {
    ask(tried + 1, errors + sentinel.address() + " is down (" + sentinel.downReason() + ")");
    return;
  }
  sentinel.command({"SENTINEL", "get-master-addr-by-name", master_name_}, timeout_ms_,
                   alive_.guarded([this, tried, index, errors,
                                   who = sentinel.address()](StatusOr<RedisValue> r) {
                     if (shut_down_) return;
                     if (!r.isOk()) {
                       ask(tried + 1, errors + who + ": " + r.status().message());
                     } else if (r->isError()) {
                       ask(tried + 1, errors + who + " answered " + r->str);
                     } else if (r->type != RedisValue::Type::kArray || r->elements.size() != 2 ||
                                r->elements[0].type != RedisValue::Type::kString ||
                                r->elements[1].type != RedisValue::Type::kString) {
                       ask(tried + 1, errors + who + " knows no master named " + master_name_);
                     } else {
                       preferred_ = index;
                       resolving_ = false;
                       if (resolve_again_) {  // a failover was announced while we asked: ask again
                         resolve();
                         return;
                       }
                       onAddress(r->elements[0].str, r->elements[1].str);
                     }
                   }));
}

void SentinelResolver::onAddress(const std::string& host, const std::string& port) {
  config::RedisNodeAddress address;
  address.host = host;
  address.port = std::atoi(port.c_str());
  if (address.port <= 0 || address.port > 65535) {
    retryLater("the sentinels named master " + master_name_ + " at a bad port \"" + port + "\"");
    return;
  }
  const std::string text = address.toString();
  const bool moved = !master_started_ || text != master_.address();
  if (moved && master_started_) countChange(Trigger::kReresolve);
  if (moved) {
    SL_LOG(kInfo, "sentinel.master_resolved", {"master", master_name_}, {"address", text},
           {"previous", master_started_ ? master_.address() : std::string("none")});
  }
  resolved_ = text;
  master_.setAddress(address);
  if (!master_started_) {
    master_started_ = true;
    master_.start();
  }
  if (moved || !master_.up()) {
    // The node reconnects by itself; onMasterState(true) checks ROLE. If it does not come up, the
    // sentinels are asked again (they may name another master by then).
    const std::string& why = master_.downReason();
    retryLater("master " + text + " named by the sentinels is not up yet" +
               (why.empty() ? std::string() : ": " + why));
    return;
  }
  checkRole();
}

void SentinelResolver::checkRole() {
  const uint64_t check = ++role_check_;
  master_.command({"ROLE"}, timeout_ms_,
                  alive_.guarded([this, check](StatusOr<RedisValue> r) {
                    if (shut_down_ || check != role_check_) return;
                    std::string role;
                    if (r.isOk() && r->type == RedisValue::Type::kArray && !r->elements.empty() &&
                        r->elements[0].type == RedisValue::Type::kString) {
                      role = r->elements[0].str;
                    }
                    if (role == "master" && master_.address() == resolved_) {
                      retry_timer_.reset();
                      attempt_ = 0;
                      change_counted_ = false;
                      setConfirmed(true, "");
                      return;
                    }
                    const std::string why = !r.isOk() ? "ROLE failed: " + r.status().message()
                                                      : (role.empty() ? "ROLE answered " + r->str
                                                                      : "ROLE says " + role);
                    retryLater("master " + master_.address() +
                               " named by the sentinels is not a master: " + why);
                  }));
}

void SentinelResolver::retryLater(std::string reason) {
  if (shut_down_) return;
  setConfirmed(false, std::move(reason));
  if (retry_timer_.pending()) return;
  const int64_t delay = reconnectDelayMs(attempt_++, backoff_min_ms_, backoff_max_ms_);
  retry_timer_.start(scheduler_, delay, [this] {
    if (!confirmed_) resolve();
  });
}

void SentinelResolver::setConfirmed(bool confirmed, std::string reason) {
  if (confirmed != confirmed_) {
    if (confirmed) {
      SL_LOG(kInfo, "sentinel.master_confirmed", {"master", master_name_},
             {"address", master_.address()});
    } else {
      SL_LOG(kWarn, "sentinel.master_unconfirmed", {"master", master_name_}, {"reason", reason});
    }
    if (listener_) {
      scheduler_.post(alive_.guarded([l = listener_] { l(); }));
    }
  }
  confirmed_ = confirmed;
  reason_ = std::move(reason);
}

void SentinelResolver::shutdown(std::function<void()> done) {
  shut_down_ = true;
  retry_timer_.reset();
  auto remaining = std::make_shared<size_t>(sentinels_.size());
  if (sentinels_.empty()) {
    if (done) scheduler_.post(std::move(done));
    return;
  }
  auto shared_done = std::make_shared<std::function<void()>>(std::move(done));
  for (auto& s : sentinels_) {
    s->shutdown([remaining, shared_done] {
      if (--*remaining == 0 && *shared_done) (*shared_done)();
    });
  }
}

}  // namespace sidelock::backend
