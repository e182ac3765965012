#include "redis/redis_node.h"

#include <algorithm>
#include <deque>
#include <map>
#include <utility>

#include "common/log.h"
#include "common/random.h"
#include "event/lifetime.h"
#include "redis/transport.h"

namespace sidelock::backend {

int64_t reconnectDelayMs(int attempt, int64_t min_ms, int64_t max_ms) {
  min_ms = std::max<int64_t>(1, min_ms);
  max_ms = std::max(min_ms, max_ms);
  int64_t delay = min_ms;
  for (int i = 0; i < attempt && delay < max_ms; ++i) delay *= 2;
  delay = std::min(delay, max_ms);
  return jitterBetween(std::max<int64_t>(1, delay / 2), delay);
}

namespace {

// One value of an "INFO server" reply ("key:value\r\n" lines).
std::string infoField(std::string_view info, std::string_view key) {
  size_t pos = 0;
  while (pos < info.size()) {
    size_t end = info.find('\n', pos);
    if (end == std::string_view::npos) end = info.size();
    std::string_view line = info.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == ':') {
      return std::string(line.substr(key.size() + 1));
    }
    pos = end + 1;
  }
  return {};
}

RedisArgs argsOf(std::initializer_list<std::string_view> list) {
  return RedisArgs(list.begin(), list.size());
}

}  // namespace

class RedisNode::Impl final : public RedisConnection::Listener {
 public:
  enum class State { kIdle, kConnecting, kUp, kWaitRetry, kShutdown };

  struct Channel {
    int refs = 0;
    bool confirmed = false;  // the server said "subscribe" (and not "unsubscribe" since)
    bool in_flight = false;  // a SUBSCRIBE/UNSUBSCRIBE for it is unanswered
    bool lost = false;       // confirmed once, then its link dropped: messages may be missed
  };

  Impl(uv_loop_t* loop, event::Scheduler& scheduler, RedisNodeOptions options,
       metrics::NodeMetrics* metrics)
      : loop_(loop),
        scheduler_(scheduler),
        options_(std::move(options)),
        metrics_(metrics),
        address_(options_.address.toString()) {
    down_reason_ = "not started";
    setUpGauge(false);
  }

  ~Impl() {
    stopTimers();
    // Without shutdown(): pending requests are dropped uncalled (their owners go away with us).
    main_.reset();
    sub_.reset();
    retired_.clear();
    setUpGauge(false);
  }

  // ---- public API ----

  void start() {
    if (state_ != State::kIdle) return;
    connect();
  }

  void runScript(size_t script, RedisArgs keys, RedisArgs args, int64_t timeout_ms, NodeOp op,
                 RedisReplyCallback cb) {
    if (!options_.scripts || script >= options_.scripts->size()) {
      post(std::move(cb), invalidArgument("no script #" + std::to_string(script)));
      return;
    }
    if (!admit(cb)) return;
    main_->script(script, keys, args, budget(timeout_ms), op, std::move(cb));
  }

  void command(RedisArgs argv, int64_t timeout_ms, RedisReplyCallback cb) {
    if (!admit(cb)) return;
    if (argv.empty()) {
      post(std::move(cb), invalidArgument("empty redis command"));
      return;
    }
    main_->command(argv, budget(timeout_ms), NodeOp::kOther, std::move(cb));
  }

  bool up() const { return state_ == State::kUp; }
  const std::string& downReason() const {
    static const std::string kEmpty;
    return up() ? kEmpty : down_reason_;
  }
  const std::string& address() const { return address_; }
  const RedisServerInfo& serverInfo() const { return info_; }
  uint64_t linkGeneration() const { return link_generation_; }
  int tlsResumptions() const { return tls_sessions_ ? tls_sessions_->resumed : 0; }
  void setStateListener(std::function<void(bool)> l) { state_listener_ = std::move(l); }
  void setMessageListener(std::function<void(std::string_view, std::string_view)> l) {
    message_listener_ = std::move(l);
  }
  void setSubscribeErrorListener(std::function<void(const std::string&, const std::string&)> l) {
    subscribe_error_listener_ = std::move(l);
  }
  void setResubscribedListener(std::function<void(const std::string&)> l) {
    resubscribed_listener_ = std::move(l);
  }
  size_t pendingRequests() const { return main_ ? main_->pendingRequests() : 0; }
  bool subscribed(const std::string& channel) const {
    auto it = channels_.find(channel);
    return it != channels_.end() && it->second.confirmed;
  }

  void setAddress(const config::RedisNodeAddress& address) {
    const std::string text = address.toString();
    if (text == address_) return;
    SL_LOG(kInfo, "redis.address_changed", {"from", address_}, {"to", text});
    options_.address = address;
    address_ = text;
    if (state_ == State::kConnecting || state_ == State::kUp) {
      failLink("moved to " + text);
    } else if (state_ == State::kWaitRetry) {
      attempt_ = 0;
      retry_timer_.reset();
      connect();
    }
  }

  void subscribe(const std::string& channel) {
    if (state_ == State::kShutdown) return;
    Channel& c = channels_[channel];
    if (++c.refs > 1) return;
    if (sub_ready_) {
      syncChannel(channel);
    } else {
      maybeConnectPubSub();
    }
  }

  void unsubscribe(const std::string& channel) {
    auto it = channels_.find(channel);
    if (it == channels_.end() || it->second.refs == 0) return;  // unbalanced: ignore
    if (--it->second.refs > 0) return;
    if (sub_ready_) {
      syncChannel(channel);
    } else if (!it->second.confirmed && !it->second.in_flight) {
      channels_.erase(it);
    }
  }

  void shutdown(std::function<void()> done) {
    if (state_ != State::kShutdown) {
      state_ = State::kShutdown;
      down_reason_ = "shutting down";
      stopTimers();
      // Pending requests are answered kCancelled on a later turn, before `done` (posted after).
      retire(main_, StatusCode::kCancelled, "redis node shutting down");
      retire(sub_, StatusCode::kCancelled, "redis node shutting down");
      sub_ready_ = false;
      channels_.clear();
      setUpGauge(false);
    }
    if (done) scheduler_.post(std::move(done));
  }

 private:
  // Every timer the node arms (destruction and shutdown stop them all).
  void stopTimers() {
    connect_timer_.reset();
    retry_timer_.reset();
    ping_timer_.reset();
    sub_connect_timer_.reset();
    sub_retry_timer_.reset();
  }

  int64_t budget(int64_t timeout_ms) const {
    return timeout_ms > 0 ? timeout_ms : options_.command_timeout_ms;
  }

  // Fails fast (on a later turn) when the node cannot take commands.
  bool admit(RedisReplyCallback& cb) {
    if (state_ == State::kShutdown) {
      post(std::move(cb), cancelled("redis node shutting down"));
      return false;
    }
    if (state_ != State::kUp || !main_) {
      post(std::move(cb), unavailable("redis " + address_ + " is down: " + down_reason_));
      return false;
    }
    return true;
  }

  void post(RedisReplyCallback cb, Status status) {
    if (!cb) return;
    scheduler_.post([cb = std::move(cb), status = std::move(status)]() { cb(status); });
  }

  static void inc(prometheus::Counter* c) {
    if (c != nullptr) c->Increment();
  }

  // ---- connections ----

  std::unique_ptr<RedisConnection> openConnection() {
    RedisConnectionOptions o;
    o.name = "redis " + address_;
    o.liveness_timeout_ms = options_.command_timeout_ms;
    o.scripts = options_.scripts;
    o.metrics = metrics_;
    auto c = std::make_unique<RedisConnection>(loop_, scheduler_, std::move(o), this);
    std::unique_ptr<RedisTransport> transport = makeSocketTransport(loop_, scheduler_);
    if (options_.tls) {
      if (!tls_sessions_) tls_sessions_ = std::make_shared<TlsSessionCache>();
      transport = makeTlsTransport(std::move(transport), scheduler_, options_.tls, tls_sessions_);
    }
    c->open(options_.address, std::move(transport));
    return c;
  }

  // Closes a connection and keeps it until a later turn: we may be inside one of its callbacks.
  void retire(std::unique_ptr<RedisConnection>& slot, StatusCode code, const std::string& reason) {
    if (!slot) return;
    slot->close(code, reason);
    retired_.push_back(std::move(slot));
    if (retired_.size() == 1) {
      scheduler_.post(alive_.guarded([this] { retired_.clear(); }));
    }
  }

  // Handshake and internal replies: act only if `conn` is still the current link, and only on a
  // real reply or a deadline (a lost link is handled by onConnectionLost).
  template <typename OnValue>
  RedisReplyCallback internalReply(RedisConnection* conn, std::string what, int64_t timeout_ms,
                                   OnValue on_value) {
    // Guarded: a retired connection answers its requests on a later turn, when the node may be
    // gone (destroyed without shutdown()).
    return alive_.guarded([this, conn, generation = generation_, what = std::move(what), timeout_ms,
                           on_value = std::move(on_value)](StatusOr<RedisValue> r) mutable {
      if (generation != generation_ || conn != main_.get()) return;
      if (r.isOk()) {
        on_value(*r);
      } else if (r.status().code() == StatusCode::kDeadlineExceeded) {
        failLink(what + " timed out after " + std::to_string(timeout_ms) + " ms");
      }
    });
  }

  void onConnectionUp(RedisConnection& c) override {
    if (&c == main_.get()) {
      connect_timer_.reset();
    } else if (&c == sub_.get()) {
      sub_connect_timer_.reset();
    }
  }

  void onConnectionLost(RedisConnection& c, const std::string& reason) override {
    if (&c == main_.get()) {
      retire(main_, StatusCode::kUnavailable, reason);
      goDown(reason);
    } else if (&c == sub_.get()) {
      retire(sub_, StatusCode::kUnavailable, reason);
      onPubSubLost(reason);
    }
  }

  void onPush(RedisConnection& c, RedisValue& value) override {
    if (&c == sub_.get()) onPubSubReply(value);
  }

  // ---- command link state machine ----

  void connect() {
    if (state_ == State::kShutdown) return;
    if (!options_.tls_error.empty()) {
      state_ = State::kWaitRetry;
      down_reason_ = options_.tls_error;
      return;  // nothing to retry: the configuration must change
    }
    if (connected_before_) inc(metrics_ != nullptr ? metrics_->reconnects : nullptr);
    connected_before_ = true;
    ++generation_;
    state_ = State::kConnecting;
    if (down_reason_ == "not started") down_reason_ = "connecting";
    main_ = openConnection();
    connect_timer_.start(scheduler_, options_.connect_timeout_ms, [this] {
      failLink("connect timed out after " + std::to_string(options_.connect_timeout_ms) + " ms");
    });
    startHandshake();
  }

  // AUTH, SELECT, INFO server and the scripts, pipelined (they go out once the socket connects).
  // Replies come in order, so the last one succeeding means all did; the first error fails the
  // link.
  void startHandshake() {
    RedisConnection* c = main_.get();
    const int64_t t = options_.connect_timeout_ms;
    if (!options_.password.empty()) {
      std::vector<std::string_view> auth = {"AUTH"};
      if (!options_.username.empty()) auth.push_back(options_.username);
      auth.push_back(options_.password);
      c->command(auth, t, NodeOp::kOther,
                 internalReply(c, "AUTH", t,
                               [this](const RedisValue& v) {
                                 if (v.isError()) failLink("AUTH failed: " + v.str);
                               }),
                 "AUTH");
    }
    if (options_.db != 0) {
      const std::string db = std::to_string(options_.db);
      c->command(
          argsOf({"SELECT", db}), t, NodeOp::kOther,
          internalReply(c, "SELECT", t,
                        [this](const RedisValue& v) {
                          if (v.isError()) {
                            failLink("SELECT " + std::to_string(options_.db) + " failed: " + v.str);
                          }
                        }),
          "SELECT");
    }
    c->command(argsOf({"INFO", "server"}), t, NodeOp::kOther,
               internalReply(c, "INFO", t, [this](const RedisValue& v) { onServerInfo(v); }),
               "INFO");
    const size_t scripts = options_.scripts ? options_.scripts->size() : 0;
    for (size_t i = 0; i < scripts; ++i) {
      const RedisScript& s = (*options_.scripts)[i];
      c->command(argsOf({"SCRIPT", "LOAD", s.text}), t, NodeOp::kOther,
                 internalReply(c, "SCRIPT LOAD", t,
                               [this, c, i](const RedisValue& v) {
                                 if (v.isError() || v.type != RedisValue::Type::kString) {
                                   failLink("SCRIPT LOAD " + (*options_.scripts)[i].label +
                                            " failed: " + v.str);
                                   return;
                                 }
                                 c->setScriptSha(i, v.str);
                               }),
                 "SCRIPT LOAD");
    }
    // A PING closes the handshake, so "up" needs no knowledge of which step came last.
    c->command(argsOf({"PING"}), t, NodeOp::kOther,
               internalReply(c, "handshake PING", t,
                             [this](const RedisValue& v) {
                               if (v.isError()) {
                                 failLink("PING failed: " + v.str);
                               } else if (state_ == State::kConnecting) {
                                 markUp();
                               }
                             }),
               "PING");
  }

  void onServerInfo(const RedisValue& v) {
    if (v.isError()) {
      failLink("INFO failed: " + v.str);
      return;
    }
    RedisServerInfo info;
    info.run_id = infoField(v.str, "run_id");
    info.version = infoField(v.str, "redis_version");
    info.uptime_ms = std::atoll(infoField(v.str, "uptime_in_seconds").c_str()) * 1000;
    info.learned_at_ms = scheduler_.nowMs();
    if (!info_.run_id.empty() && info.run_id != info_.run_id) {
      SL_LOG(kWarn, "redis.restarted", {"node", address_}, {"run_id", info.run_id});
    }
    info_ = std::move(info);
  }

  void markUp() {
    state_ = State::kUp;
    ++link_generation_;
    down_reason_.clear();
    attempt_ = 0;
    connect_timer_.reset();
    setUpGauge(true);
    SL_LOG(kInfo, "redis.up", {"node", address_}, {"run_id", info_.run_id},
           {"uptime_ms", static_cast<long long>(info_.uptime_ms)});
    notifyState(true);
    armPing();
    maybeConnectPubSub();
  }

  // The command link is gone (or never came up): go down and retry with backoff.
  void goDown(const std::string& reason) {
    if (state_ == State::kShutdown) return;
    const bool was_up = state_ == State::kUp;
    const bool changed = reason != down_reason_;
    state_ = State::kWaitRetry;
    down_reason_ = reason;
    ping_timer_.reset();
    ping_in_flight_ = false;
    connect_timer_.reset();
    setUpGauge(false);
    // Pub/sub rides on the command link's health (a paused server only shows up there).
    sub_connect_timer_.reset();
    sub_retry_timer_.reset();
    retire(sub_, StatusCode::kUnavailable, reason);
    sub_ready_ = false;
    resetChannels();
    if (was_up || changed) SL_LOG(kWarn, "redis.down", {"node", address_}, {"reason", reason});
    if (was_up) notifyState(false);
    const int64_t delay =
        reconnectDelayMs(attempt_++, options_.reconnect_min_ms, options_.reconnect_max_ms);
    retry_timer_.start(scheduler_, delay, [this] {
      connect();
    });
  }

  void failLink(const std::string& reason) {
    if (!main_) return;
    retire(main_, StatusCode::kUnavailable, reason);
    goDown(reason);
  }

  // While up, a PING every health_interval_ms proves the server alive when no traffic does.
  void armPing() {
    ping_timer_.start(scheduler_, options_.health_interval_ms, [this] {
      onPingTimer();
    });
  }

  void onPingTimer() {
    if (state_ != State::kUp) return;
    if (!ping_in_flight_) {
      ping_in_flight_ = true;
      RedisConnection* c = main_.get();
      c->command(argsOf({"PING"}), options_.command_timeout_ms, NodeOp::kOther,
                 internalReply(c, "PING", options_.command_timeout_ms,
                               [this](const RedisValue& v) {
                                 ping_in_flight_ = false;
                                 if (v.isError()) failLink("PING failed: " + v.str);
                               }),
                 "PING");
    }
    armPing();
  }

  void setUpGauge(bool up) {
    if (metrics_ != nullptr && metrics_->up != nullptr) metrics_->up->Set(up ? 1 : 0);
  }

  void notifyState(bool up) {
    if (!state_listener_) return;
    scheduler_.post([l = state_listener_, up] { l(up); });
  }

  // ---- pub/sub link ----

  bool anyChannelWanted() const {
    for (const auto& [name, c] : channels_) {
      if (c.refs > 0) return true;
    }
    return false;
  }

  void maybeConnectPubSub() {
    if (state_ != State::kUp || sub_ || sub_retry_timer_.pending()) return;
    if (!anyChannelWanted()) return;
    sub_ = openConnection();
    sub_connect_timer_.start(scheduler_, options_.connect_timeout_ms, [this] {
      failPubSub("pubsub connect timed out");
    });
    RedisConnection* c = sub_.get();
    if (options_.password.empty()) {
      c->setPushMode(true);
      onPubSubReady();
      return;
    }
    std::vector<std::string_view> auth = {"AUTH"};
    if (!options_.username.empty()) auth.push_back(options_.username);
    auth.push_back(options_.password);
    c->command(auth, options_.connect_timeout_ms, NodeOp::kOther,
               alive_.guarded([this, c](StatusOr<RedisValue> r) {
                 if (c != sub_.get()) return;
                 if (!r.isOk()) {
                   if (r.status().code() == StatusCode::kDeadlineExceeded) {
                     failPubSub("pubsub AUTH timed out");
                   }
                 } else if (r->isError()) {
                   failPubSub("pubsub AUTH failed: " + r->str);
                 } else {
                   c->setPushMode(true);
                   onPubSubReady();
                 }
               }));
  }

  void onPubSubReady() {
    sub_ready_ = true;
    sub_sent_.clear();
    sub_attempt_ = 0;
    std::vector<std::string> names;
    names.reserve(channels_.size());
    for (const auto& [name, c] : channels_) names.push_back(name);
    for (const auto& name : names) syncChannel(name);
  }

  void failPubSub(const std::string& reason) {
    if (!sub_) return;
    retire(sub_, StatusCode::kUnavailable, reason);
    onPubSubLost(reason);
  }

  void onPubSubLost(const std::string& reason) {
    sub_ready_ = false;
    sub_connect_timer_.reset();
    resetChannels();
    if (state_ != State::kUp) return;  // reconnected together with the command link
    SL_LOG(kWarn, "redis.pubsub_down", {"node", address_}, {"reason", reason});
    const int64_t delay =
        reconnectDelayMs(sub_attempt_++, options_.reconnect_min_ms, options_.reconnect_max_ms);
    sub_retry_timer_.start(scheduler_, delay, [this] {
      maybeConnectPubSub();
    });
  }

  // The server forgot our subscriptions with the connection.
  void resetChannels() {
    for (auto it = channels_.begin(); it != channels_.end();) {
      if (it->second.confirmed) it->second.lost = true;
      it->second.confirmed = false;
      it->second.in_flight = false;
      if (it->second.refs == 0) {
        it = channels_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // At most one SUBSCRIBE/UNSUBSCRIBE per channel in flight, so a confirmation always answers
  // the latest wish for its channel.
  void syncChannel(const std::string& name) {
    auto it = channels_.find(name);
    if (it == channels_.end() || !sub_ready_ || !sub_) return;
    Channel& c = it->second;
    if (c.in_flight) return;
    const bool want = c.refs > 0;
    if (want == c.confirmed) {
      if (!want) channels_.erase(it);
      return;
    }
    const bool sharded = options_.sharded_pubsub;
    const char* verb =
        want ? (sharded ? "SSUBSCRIBE" : "SUBSCRIBE") : (sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE");
    sub_->send(argsOf({verb, name}));
    sub_sent_.push_back(name);
    c.in_flight = true;
  }

  // An error reply answers the oldest (un)subscribe still unanswered: replies come in order.
  void onPubSubError(const std::string& error) {
    if (sub_sent_.empty()) return;
    const std::string name = std::move(sub_sent_.front());
    sub_sent_.pop_front();
    auto it = channels_.find(name);
    if (it != channels_.end()) {
      it->second.in_flight = false;
      it->second.confirmed = false;
      // Not re-sent here: the same server would refuse again. Dropped if nobody wants it.
      if (it->second.refs == 0) channels_.erase(it);
    }
    SL_LOG(kDebug, "redis.subscribe_refused", {"node", address_}, {"channel", name},
           {"error", error});
    if (subscribe_error_listener_) {
      auto listener = subscribe_error_listener_;
      listener(name, error);
    }
  }

  void onPubSubReply(const RedisValue& reply) {
    if (reply.isError()) {
      onPubSubError(reply.str);
      return;
    }
    if (reply.type != RedisValue::Type::kArray || reply.elements.size() < 3) return;
    const RedisValue& kind = reply.elements[0];
    const RedisValue& chan = reply.elements[1];
    if (kind.type != RedisValue::Type::kString || chan.type != RedisValue::Type::kString) return;
    if (kind.str == "message" || kind.str == "smessage") {
      const RedisValue& msg = reply.elements[2];
      if (!message_listener_ || msg.type != RedisValue::Type::kString) return;
      auto listener = message_listener_;  // the listener may replace itself
      listener(chan.str, msg.str);
      return;
    }
    const bool subscribed = kind.str == "subscribe" || kind.str == "ssubscribe";
    if (!subscribed && kind.str != "unsubscribe" && kind.str != "sunsubscribe") return;
    // A confirmation the server sent unasked (a cluster node that lost the channel's slot says
    // "sunsubscribe") matches nothing in sub_sent_.
    auto sent = std::find(sub_sent_.begin(), sub_sent_.end(), chan.str);
    if (sent != sub_sent_.end()) sub_sent_.erase(sent);
    auto it = channels_.find(chan.str);
    if (it == channels_.end()) return;
    it->second.in_flight = false;
    it->second.confirmed = subscribed;
    const bool resubscribed = subscribed && std::exchange(it->second.lost, false);
    syncChannel(chan.str);
    if (resubscribed && resubscribed_listener_) {
      auto listener = resubscribed_listener_;  // the listener may replace itself
      listener(chan.str);
    }
  }

  uv_loop_t* loop_;
  event::Scheduler& scheduler_;
  RedisNodeOptions options_;
  metrics::NodeMetrics* metrics_;
  std::string address_;
  event::LivenessToken alive_;  // guards posted callbacks

  State state_ = State::kIdle;
  std::string down_reason_;
  RedisServerInfo info_;
  std::unique_ptr<RedisConnection> main_;
  std::unique_ptr<RedisConnection> sub_;
  std::vector<std::unique_ptr<RedisConnection>> retired_;  // closed, freed on a later turn
  std::shared_ptr<TlsSessionCache> tls_sessions_;          // this node's resumable TLS session
  uint64_t generation_ = 0;  // bumped per command connection: stale handshake replies are ignored
  bool sub_ready_ = false;
  bool connected_before_ = false;
  bool ping_in_flight_ = false;
  int attempt_ = 0;
  int sub_attempt_ = 0;
  std::map<std::string, Channel, std::less<>> channels_;
  std::deque<std::string> sub_sent_;  // channels of unanswered (un)subscribes, oldest first
  std::function<void(bool)> state_listener_;
  uint64_t link_generation_ = 0;  // command links that came up (linkGeneration)
  std::function<void(const std::string&, const std::string&)> subscribe_error_listener_;
  std::function<void(const std::string&)> resubscribed_listener_;
  std::function<void(std::string_view, std::string_view)> message_listener_;

  event::ScopedTimer connect_timer_;
  event::ScopedTimer retry_timer_;
  event::ScopedTimer ping_timer_;
  event::ScopedTimer sub_connect_timer_;
  event::ScopedTimer sub_retry_timer_;
};

RedisNode::RedisNode(uv_loop_t* loop, event::Scheduler& scheduler, RedisNodeOptions options,
                     metrics::NodeMetrics* metrics)
    : impl_(std::make_unique<Impl>(loop, scheduler, std::move(options), metrics)) {}

RedisNode::~RedisNode() = default;

void RedisNode::start() { impl_->start(); }

void RedisNode::runScript(size_t script, std::initializer_list<std::string_view> keys,
                          std::initializer_list<std::string_view> args, int64_t timeout_ms,
                          NodeOp op, RedisReplyCallback cb) {
  impl_->runScript(script, argsOf(keys), argsOf(args), timeout_ms, op, std::move(cb));
}

void RedisNode::runScriptArgs(size_t script, RedisArgs keys, RedisArgs args, int64_t timeout_ms,
                              NodeOp op, RedisReplyCallback cb) {
  impl_->runScript(script, keys, args, timeout_ms, op, std::move(cb));
}

void RedisNode::command(std::initializer_list<std::string_view> argv, int64_t timeout_ms,
                        RedisReplyCallback cb) {
  impl_->command(argsOf(argv), timeout_ms, std::move(cb));
}

void RedisNode::commandArgv(RedisArgs argv, int64_t timeout_ms, RedisReplyCallback cb) {
  impl_->command(argv, timeout_ms, std::move(cb));
}

bool RedisNode::up() const { return impl_->up(); }
const std::string& RedisNode::downReason() const { return impl_->downReason(); }
const std::string& RedisNode::address() const { return impl_->address(); }
const RedisServerInfo& RedisNode::serverInfo() const { return impl_->serverInfo(); }
uint64_t RedisNode::linkGeneration() const { return impl_->linkGeneration(); }
void RedisNode::setAddress(const config::RedisNodeAddress& address) { impl_->setAddress(address); }
void RedisNode::setStateListener(std::function<void(bool up)> listener) {
  impl_->setStateListener(std::move(listener));
}
void RedisNode::subscribe(const std::string& channel) { impl_->subscribe(channel); }
void RedisNode::unsubscribe(const std::string& channel) { impl_->unsubscribe(channel); }
void RedisNode::setMessageListener(
    std::function<void(std::string_view channel, std::string_view message)> l) {
  impl_->setMessageListener(std::move(l));
}
void RedisNode::setSubscribeErrorListener(
    std::function<void(const std::string& channel, const std::string& error)> l) {
  impl_->setSubscribeErrorListener(std::move(l));
}
void RedisNode::setResubscribedListener(std::function<void(const std::string& channel)> l) {
  impl_->setResubscribedListener(std::move(l));
}
bool RedisNode::subscribed(const std::string& channel) const { return impl_->subscribed(channel); }
size_t RedisNode::pendingRequests() const { return impl_->pendingRequests(); }
int RedisNode::tlsResumptions() const { return impl_->tlsResumptions(); }
void RedisNode::shutdown(std::function<void()> done) { impl_->shutdown(std::move(done)); }

}  // namespace sidelock::backend
