#include "redis/redis_node.h"

#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <uv.h>

#include <algorithm>
#include <map>
#include <unordered_set>
#include <utility>

#include "common/log.h"
#include "common/random.h"
#include "redis/scripts.h"

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

RedisValue toValue(const redisReply* r) {
  RedisValue v;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      v.type = RedisValue::Type::kString;
      v.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      v.type = RedisValue::Type::kStatus;
      v.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      v.type = RedisValue::Type::kError;
      v.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      v.type = RedisValue::Type::kInteger;
      v.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      v.type = RedisValue::Type::kArray;
      v.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) v.elements.push_back(toValue(r->element[i]));
      break;
    default:
      v.type = RedisValue::Type::kNil;
      break;
  }
  return v;
}

bool startsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// One value of an "INFO server" reply ("key:value\r\n" lines).
std::string infoField(std::string_view info, std::string_view key) {
  size_t pos = 0;
  while (pos < info.size()) {
    size_t end = info.find('\n', pos);
    if (end == std::string_view::npos) end = info.size();
    std::string_view line = info.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > key.size() && startsWith(line, key) && line[key.size()] == ':') {
      return std::string(line.substr(key.size() + 1));
    }
    pos = end + 1;
  }
  return {};
}

}  // namespace

class RedisNode::Impl {
 public:
  enum class State { kIdle, kConnecting, kHandshake, kUp, kWaitRetry, kShutdown };
  enum class LinkKind { kCommands, kPubSub };

  // The bridge behind redisAsyncContext::data (STYLE rule 4). hiredis may call into it after the
  // node let go of the connection (a deferred free): `impl` is then null and the callbacks only
  // clean up. Deleted when hiredis is done with the context (disconnect callback, failed connect)
  // or right after we free a context that never connected.
  struct Link {
    Impl* impl = nullptr;
    redisAsyncContext* ac = nullptr;
    LinkKind kind = LinkKind::kCommands;
  };

  // One command in flight (STYLE rule 3): privdata of exactly one hiredis callback, deleted there.
  struct Request {
    Impl* impl = nullptr;   // null once the node is destroyed: the reply only frees us
    RedisReplyCallback cb;  // user callback; empty once answered (e.g. timed out)
    // Internal commands (handshake, PING): run on real replies only. A lost link or a timeout is
    // handled by the link machinery itself.
    std::function<void(const RedisValue&)> internal;
    event::Scheduler::TimerId timer = 0;
    NodeOp op = NodeOp::kOther;
    const char* what = "command";
    int deadline_deferrals = 0;  // see armDeadline()
    int64_t start_us = 0;
    int64_t timeout_ms = 0;
    bool on_pubsub = false;
    // Scripts keep their argv so that a NOSCRIPT reply can be retried once with EVAL.
    bool is_script = false;
    bool retried = false;
    ScriptId script = ScriptId::kAcquire;
    std::vector<std::string> argv;
  };

  struct Channel {
    int refs = 0;
    bool confirmed = false;  // the server said "subscribe" (and not "unsubscribe" since)
    bool in_flight = false;  // a SUBSCRIBE/UNSUBSCRIBE for it is unanswered
  };

  Impl(uv_loop_t* loop, event::Scheduler& scheduler, RedisNodeOptions options,
       metrics::NodeMetrics* metrics)
      : loop_(loop),
        scheduler_(scheduler),
        options_(std::move(options)),
        metrics_(metrics),
        address_(options_.address.toString()) {
    down_reason_ = "not started";
    if (metrics_ != nullptr && metrics_->up != nullptr) metrics_->up->Set(0);
  }

  ~Impl() {
    stopTimers();
    // Orphan every request still owned by hiredis: its reply (or the NULL reply from the frees
    // below) only deletes it.
    for (Request* r : pending_) {
      r->impl = nullptr;
      r->cb = nullptr;
      r->internal = nullptr;
      cancelTimer(r);
    }
    pending_.clear();
    closeLink(sub_);
    closeLink(main_);
    if (metrics_ != nullptr && metrics_->up != nullptr) metrics_->up->Set(0);
  }

  // ---- public API ----

  void start() {
    if (state_ != State::kIdle) return;
    connect();
  }

  void runScript(ScriptId script, std::vector<std::string> keys, std::vector<std::string> args,
                 int64_t timeout_ms, NodeOp op, RedisReplyCallback cb) {
    if (!admit(cb)) return;
    auto* r = new Request();
    r->cb = std::move(cb);
    r->op = op;
    r->what = scriptName(script);
    r->is_script = true;
    r->script = script;
    r->argv.reserve(3 + keys.size() + args.size());
    const std::string& sha = shas_[static_cast<int>(script)];
    if (sha.empty()) {
      r->retried = true;  // EVAL caches the script itself
      r->argv.emplace_back("EVAL");
      r->argv.emplace_back(scriptText(script));
    } else {
      r->argv.emplace_back("EVALSHA");
      r->argv.push_back(sha);
    }
    r->argv.push_back(std::to_string(keys.size()));
    for (auto& k : keys) r->argv.push_back(std::move(k));
    for (auto& a : args) r->argv.push_back(std::move(a));
    send(main_, r, r->argv, timeout_ms);
  }

  void command(std::vector<std::string> argv, int64_t timeout_ms, RedisReplyCallback cb) {
    if (!admit(cb)) return;
    if (argv.empty()) {
      post(std::move(cb), invalidArgument("empty redis command"));
      return;
    }
    auto* r = new Request();
    r->cb = std::move(cb);
    r->what = "command";
    send(main_, r, argv, timeout_ms);
  }

  bool up() const { return state_ == State::kUp; }
  const std::string& downReason() const {
    static const std::string kEmpty;
    return up() ? kEmpty : down_reason_;
  }
  const std::string& address() const { return address_; }
  const RedisServerInfo& serverInfo() const { return info_; }
  void setStateListener(std::function<void(bool)> l) { state_listener_ = std::move(l); }
  void setMessageListener(std::function<void(std::string_view, std::string_view)> l) {
    message_listener_ = std::move(l);
  }
  size_t pendingRequests() const { return pending_.size(); }
  bool subscribed(const std::string& channel) const {
    auto it = channels_.find(channel);
    return it != channels_.end() && it->second.confirmed;
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
      // Answer everything now; the NULL replies caused by the frees below only delete requests.
      for (Request* r : pending_) {
        cancelTimer(r);
        r->internal = nullptr;
        if (r->cb) post(std::exchange(r->cb, nullptr), cancelled("redis node shutting down"));
      }
      closeLink(sub_);
      closeLink(main_);
      sub_ready_ = false;
      channels_.clear();
      setUpGauge(false);
    }
    // Posted after the cancellations above, so they are delivered first. The uv_poll handles of
    // the freed contexts close on the next loop iterations; the owner's final drain reaps them.
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
    deferred_fail_.reset();
  }

  // ---- requests ----

  // Fails fast (on a later turn) when the node cannot take commands.
  bool admit(RedisReplyCallback& cb) {
    if (state_ == State::kShutdown) {
      post(std::move(cb), cancelled("redis node shutting down"));
      return false;
    }
    if (state_ != State::kUp || main_ == nullptr) {
      post(std::move(cb), unavailable("redis " + address_ + " is down: " + down_reason_));
      return false;
    }
    return true;
  }

  void post(RedisReplyCallback cb, Status status) {
    if (!cb) return;
    scheduler_.post([cb = std::move(cb), status = std::move(status)]() { cb(status); });
  }

  void cancelTimer(Request* r) {
    if (r->timer != 0) {
      scheduler_.cancel(r->timer);
      r->timer = 0;
    }
  }

  // Hands `r` to hiredis on `link` with a deadline. On failure `r` is answered and deleted.
  void send(Link* link, Request* r, const std::vector<std::string>& argv, int64_t timeout_ms) {
    r->impl = this;
    r->on_pubsub = link != nullptr && link->kind == LinkKind::kPubSub;
    if (r->start_us == 0) r->start_us = scheduler_.nowUs();
    if (timeout_ms <= 0) timeout_ms = options_.command_timeout_ms;
    r->timeout_ms = timeout_ms;
    if (!sendArgv(link, r, argv)) {
      if (r->cb) post(std::move(r->cb), unavailable("redis " + address_ + ": connection lost"));
      const bool internal = static_cast<bool>(r->internal);
      const bool pubsub = r->on_pubsub;
      delete r;
      // A context refuses commands only while it is being torn down; make sure the link is
      // treated as broken, but never from inside a hiredis callback (we may be in one).
      if (internal) {
        deferred_fail_.start(scheduler_, 0, [this, pubsub] {
          deferred_fail_.markFired();
          if (pubsub) {
            failPubSub("send failed");
          } else {
            failLink("send failed");
          }
        });
      }
      return;
    }
    pending_.insert(r);
    armDeadline(r, timeout_ms);
  }

  // libuv runs timers before it polls for I/O, so after a long loop stall (a busy machine, a slow
  // callback) a deadline can fire while the reply already waits in the socket. Tearing down a
  // healthy link then would mark a live node down. So when the deadline fires with the socket
  // readable, give the poll phase one more turn (a few times at most) before timing out. The
  // re-check waits 1 ms, not 0: libuv before 1.45 (Debian 12 ships 1.44) runs a timer restarted
  // with 0 inside a timer callback again in the same timers phase, before any poll.
  void armDeadline(Request* r, int64_t delay_ms) {
    r->timer = scheduler_.runAfter(delay_ms, [this, r] {
      r->timer = 0;
      Link* link = r->on_pubsub ? sub_ : main_;
      if (r->deadline_deferrals < 3 && link != nullptr && link->ac != nullptr &&
          socketReadable(link->ac->c.fd)) {
        ++r->deadline_deferrals;
        armDeadline(r, 1);
        return;
      }
      onRequestTimeout(r);
    });
  }

  static bool socketReadable(int fd) {
    if (fd < 0) return false;
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
  }

  bool sendArgv(Link* link, Request* r, const std::vector<std::string>& argv) {
    if (link == nullptr || link->ac == nullptr) return false;
    // Small commands use stack arrays; hiredis copies the arguments into its output buffer.
    constexpr size_t kInline = 16;
    const char* inline_ptrs[kInline];
    size_t inline_lens[kInline];
    std::vector<const char*> heap_ptrs;
    std::vector<size_t> heap_lens;
    const char** ptrs = inline_ptrs;
    size_t* lens = inline_lens;
    if (argv.size() > kInline) {
      heap_ptrs.resize(argv.size());
      heap_lens.resize(argv.size());
      ptrs = heap_ptrs.data();
      lens = heap_lens.data();
    }
    for (size_t i = 0; i < argv.size(); ++i) {
      ptrs[i] = argv[i].data();
      lens[i] = argv[i].size();
    }
    return redisAsyncCommandArgv(link->ac, &Impl::onReplyCb, r, static_cast<int>(argv.size()), ptrs,
                                 lens) == REDIS_OK;
  }

  static void onReplyCb(redisAsyncContext* /*ac*/, void* reply, void* privdata) {
    auto* r = static_cast<Request*>(privdata);
    if (r->impl == nullptr) {
      delete r;
      return;
    }
    r->impl->onReply(r, static_cast<redisReply*>(reply));
  }

  void onReply(Request* r, redisReply* reply) {
    pending_.erase(r);
    cancelTimer(r);
    if (reply == nullptr) {
      // The context is being freed (link lost, timed out elsewhere, shutdown). We may be inside
      // one of our own calls: deliver on a later turn.
      if (r->cb) {
        if (metrics_ != nullptr) inc(metrics_->errors_disconnected);
        post(std::move(r->cb), unavailable("redis " + address_ + ": connection lost"));
      }
      delete r;
      return;
    }
    last_reply_us_ = scheduler_.nowUs();
    if (reply->type == REDIS_REPLY_ERROR && r->is_script && !r->retried && r->cb &&
        startsWith(std::string_view(reply->str, reply->len), "NOSCRIPT")) {
      // The server lost its script cache (SCRIPT FLUSH, restart, failover). EVAL runs the script
      // and caches it again; the retry keeps the original deadline.
      if (metrics_ != nullptr) inc(metrics_->noscript_reloads);
      SL_LOG(kInfo, "redis.noscript", {"node", address_}, {"script", scriptName(r->script)});
      r->retried = true;
      r->argv[0] = "EVAL";
      r->argv[1] = std::string(scriptText(r->script));
      if (sendArgv(main_, r, r->argv)) {
        pending_.insert(r);
        const int64_t left_ms =
            std::max<int64_t>(1, r->timeout_ms - (scheduler_.nowUs() - r->start_us) / 1000);
        armDeadline(r, left_ms);
        return;
      }
      post(std::move(r->cb), unavailable("redis " + address_ + ": connection lost"));
      delete r;
      return;
    }
    observeLatency(r);
    RedisValue value = toValue(reply);
    if (value.isError() && r->cb && metrics_ != nullptr) inc(metrics_->errors_reply);
    auto internal = std::move(r->internal);
    auto cb = std::move(r->cb);
    delete r;
    // Last: a callback may shut the node down or destroy it.
    if (internal) {
      internal(value);
    } else if (cb) {
      cb(std::move(value));
    }
  }

  // The deadline passed: answer now, and treat the link as broken. Redis answers in order, so a
  // reply that is this late means a dead, partitioned or paused server; everything queued behind
  // it would wait as long.
  void onRequestTimeout(Request* r) {
    if (metrics_ != nullptr) inc(metrics_->errors_timeout);
    auto cb = std::move(r->cb);
    r->internal = nullptr;
    const std::string reason =
        std::string(r->what) + " timed out after " + std::to_string(r->timeout_ms) + " ms";
    // The request stays owned by hiredis; the free below hands it back with a NULL reply.
    if (r->on_pubsub) {
      failPubSub(reason);
    } else {
      failLink(reason);
    }
    if (cb) cb(deadlineExceeded("redis " + address_ + ": " + reason));
  }

  void observeLatency(const Request* r) {
    if (metrics_ == nullptr) return;
    prometheus::Histogram* h = nullptr;
    switch (r->op) {
      case NodeOp::kAcquire:
        h = metrics_->latency_acquire;
        break;
      case NodeOp::kRelease:
        h = metrics_->latency_release;
        break;
      case NodeOp::kExtend:
        h = metrics_->latency_extend;
        break;
      case NodeOp::kInspect:
        h = metrics_->latency_inspect;
        break;
      case NodeOp::kOther:
        h = metrics_->latency_other;
        break;
    }
    if (h != nullptr) h->Observe(static_cast<double>(scheduler_.nowUs() - r->start_us) / 1e6);
  }

  static void inc(prometheus::Counter* c) {
    if (c != nullptr) c->Increment();
  }

  void sendInternal(Link* link, std::vector<std::string> argv, const char* what, int64_t timeout_ms,
                    std::function<void(const RedisValue&)> on_reply) {
    auto* r = new Request();
    r->internal = std::move(on_reply);
    r->what = what;
    send(link, r, argv, timeout_ms);
  }

  // ---- links ----

  Link* openLink(LinkKind kind, std::string* error) {
    const config::RedisNodeAddress& a = options_.address;
    redisAsyncContext* ac = a.unix_path.empty() ? redisAsyncConnect(a.host.c_str(), a.port)
                                                : redisAsyncConnectUnix(a.unix_path.c_str());
    if (ac == nullptr) {
      *error = "connect: out of memory";
      return nullptr;
    }
    if (ac->err != 0) {
      *error = std::string("connect: ") + ac->errstr;
      redisAsyncFree(ac);
      return nullptr;
    }
    if (redisLibuvAttach(ac, loop_) != REDIS_OK) {
      // The adapter installs its cleanup hook before it can fail; with no event data that hook
      // would dereference NULL inside redisAsyncFree.
      ac->ev.cleanup = nullptr;
      *error = "connect: cannot attach to the event loop";
      redisAsyncFree(ac);
      return nullptr;
    }
    auto* link = new Link();
    link->impl = this;
    link->ac = ac;
    link->kind = kind;
    ac->data = link;
    redisAsyncSetConnectCallback(ac, &Impl::onConnectCb);
    redisAsyncSetDisconnectCallback(ac, &Impl::onDisconnectCb);
    return link;
  }

  // Lets go of a connection. Its pending requests get NULL replies (now, or right after the
  // current hiredis callback returns when we are inside one: hiredis defers the free).
  // Never called from inside a connect/disconnect callback of the same context.
  void closeLink(Link*& slot) {
    Link* link = std::exchange(slot, nullptr);
    if (link == nullptr) return;
    if (link->kind == LinkKind::kPubSub) sub_ready_ = false;
    link->impl = nullptr;
    redisAsyncContext* ac = std::exchange(link->ac, nullptr);
    if (ac == nullptr) {
      delete link;
      return;
    }
    if ((ac->c.flags & REDIS_CONNECTED) != 0) {
      // hiredis calls the disconnect callback, which deletes the link.
      ac->data = link;
      redisAsyncFree(ac);
    } else {
      // No callback comes for a context that never connected.
      ac->data = nullptr;
      redisAsyncFree(ac);
      delete link;
    }
  }

  static void onConnectCb(const redisAsyncContext* ac, int status) {
    auto* link = static_cast<Link*>(ac->data);
    if (link == nullptr) return;
    if (link->impl == nullptr) {
      if (status != REDIS_OK) delete link;  // hiredis frees the context after we return
      return;
    }
    link->impl->onLinkConnected(link, status == REDIS_OK, ac->errstr);
  }

  static void onDisconnectCb(const redisAsyncContext* ac, int /*status*/) {
    auto* link = static_cast<Link*>(ac->data);
    if (link == nullptr) return;
    link->ac = nullptr;
    Impl* impl = link->impl;
    if (impl != nullptr) {
      impl->onLinkLost(
          link, std::string("connection lost: ") + (ac->errstr[0] != '\0' ? ac->errstr : "closed"));
    }
    delete link;
  }

  // Inside hiredis's connect callback: do not free this context here (hiredis keeps using it).
  void onLinkConnected(Link* link, bool ok, const char* errstr) {
    if (!ok) {
      link->ac = nullptr;  // hiredis frees it after we return
      std::string reason = std::string("connect: ") + errstr;
      if (link == main_) {
        main_ = nullptr;
        connect_timer_.reset();
        delete link;
        goDown(reason);
      } else {
        sub_ = nullptr;
        sub_connect_timer_.reset();
        delete link;
        onPubSubLost(reason);
      }
      return;
    }
    if (link == main_) {
      connect_timer_.reset();
      startHandshake();
    } else {
      sub_connect_timer_.reset();
      startPubSubHandshake();
    }
  }

  void onLinkLost(Link* link, const std::string& reason) {
    if (link == main_) {
      main_ = nullptr;
      goDown(reason);
    } else if (link == sub_) {
      sub_ = nullptr;
      sub_ready_ = false;
      onPubSubLost(reason);
    }
  }

  // ---- command link state machine ----

  void connect() {
    if (state_ == State::kShutdown) return;
    if (connected_before_ && metrics_ != nullptr) inc(metrics_->reconnects);
    connected_before_ = true;
    std::string error;
    main_ = openLink(LinkKind::kCommands, &error);
    if (main_ == nullptr) {
      goDown(error);
      return;
    }
    state_ = State::kConnecting;
    if (down_reason_ == "not started") down_reason_ = "connecting";
    connect_timer_.start(scheduler_, options_.connect_timeout_ms, [this] {
      connect_timer_.markFired();
      failLink("connect timed out after " + std::to_string(options_.connect_timeout_ms) + " ms");
    });
  }

  // AUTH, SELECT, INFO server and the scripts, pipelined. Replies come in order, so the last one
  // succeeding means all did; the first error fails the link and the rest get NULL replies.
  void startHandshake() {
    state_ = State::kHandshake;
    const int64_t t = options_.connect_timeout_ms;
    if (!options_.password.empty()) {
      std::vector<std::string> auth = {"AUTH"};
      if (!options_.username.empty()) auth.push_back(options_.username);
      auth.push_back(options_.password);
      sendInternal(main_, std::move(auth), "AUTH", t, [this](const RedisValue& v) {
        if (v.isError()) failLink("AUTH failed: " + v.str);
      });
    }
    if (options_.db != 0) {
      sendInternal(main_, {"SELECT", std::to_string(options_.db)}, "SELECT", t,
                   [this](const RedisValue& v) {
                     if (v.isError())
                       failLink("SELECT " + std::to_string(options_.db) + " failed: " + v.str);
                   });
    }
    sendInternal(main_, {"INFO", "server"}, "INFO", t, [this](const RedisValue& v) {
      if (v.isError()) {
        failLink("INFO failed: " + v.str);
        return;
      }
      RedisServerInfo info;
      info.run_id = infoField(v.str, "run_id");
      info.uptime_ms = std::atoll(infoField(v.str, "uptime_in_seconds").c_str()) * 1000;
      info.learned_at_ms = scheduler_.nowMs();
      if (!info_.run_id.empty() && info.run_id != info_.run_id) {
        SL_LOG(kWarn, "redis.restarted", {"node", address_}, {"run_id", info.run_id});
      }
      info_ = std::move(info);
    });
    for (size_t i = 0; i < std::size(kAllScripts); ++i) {
      const ScriptId id = kAllScripts[i];
      const bool last = i + 1 == std::size(kAllScripts);
      sendInternal(main_, {"SCRIPT", "LOAD", std::string(scriptText(id))}, "SCRIPT LOAD", t,
                   [this, id, last](const RedisValue& v) {
                     if (v.isError() || v.type != RedisValue::Type::kString) {
                       failLink(std::string("SCRIPT LOAD ") + scriptName(id) + " failed: " + v.str);
                       return;
                     }
                     shas_[static_cast<int>(id)] = v.str;
                     if (last && main_ != nullptr && state_ == State::kHandshake) markUp();
                   });
    }
  }

  void markUp() {
    state_ = State::kUp;
    down_reason_.clear();
    attempt_ = 0;
    last_reply_us_ = scheduler_.nowUs();
    setUpGauge(true);
    SL_LOG(kInfo, "redis.up", {"node", address_}, {"run_id", info_.run_id},
           {"uptime_ms", static_cast<long long>(info_.uptime_ms)});
    notifyState(true);
    armPing();
    maybeConnectPubSub();
  }

  // The command link is gone (or never came up): fail over to "down" and retry with backoff.
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
    closeLink(sub_);
    resetChannels();
    if (was_up || changed) SL_LOG(kWarn, "redis.down", {"node", address_}, {"reason", reason});
    if (was_up) notifyState(false);
    const int64_t delay =
        reconnectDelayMs(attempt_++, options_.reconnect_min_ms, options_.reconnect_max_ms);
    retry_timer_.start(scheduler_, delay, [this] {
      retry_timer_.markFired();
      connect();
    });
  }

  void failLink(const std::string& reason) {
    if (main_ == nullptr) return;
    closeLink(main_);
    goDown(reason);
  }

  void armPing() {
    ping_timer_.start(scheduler_, options_.health_interval_ms, [this] {
      ping_timer_.markFired();
      onPingTimer();
    });
  }

  void onPingTimer() {
    if (state_ != State::kUp) return;
    const int64_t idle_ms = (scheduler_.nowUs() - last_reply_us_) / 1000;
    if (idle_ms >= options_.health_interval_ms && !ping_in_flight_) {
      ping_in_flight_ = true;
      sendInternal(main_, {"PING"}, "PING", options_.command_timeout_ms,
                   [this](const RedisValue& v) {
                     ping_in_flight_ = false;
                     if (v.isError()) failLink("PING failed: " + v.str);
                   });
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
    if (state_ != State::kUp || sub_ != nullptr || sub_retry_timer_.pending()) return;
    if (!anyChannelWanted()) return;
    std::string error;
    sub_ = openLink(LinkKind::kPubSub, &error);
    if (sub_ == nullptr) {
      onPubSubLost(error);
      return;
    }
    sub_connect_timer_.start(scheduler_, options_.connect_timeout_ms, [this] {
      sub_connect_timer_.markFired();
      failPubSub("pubsub connect timed out");
    });
  }

  void startPubSubHandshake() {
    if (options_.password.empty()) {
      onPubSubReady();
      return;
    }
    std::vector<std::string> auth = {"AUTH"};
    if (!options_.username.empty()) auth.push_back(options_.username);
    auth.push_back(options_.password);
    sendInternal(sub_, std::move(auth), "pubsub AUTH", options_.connect_timeout_ms,
                 [this](const RedisValue& v) {
                   if (v.isError()) {
                     failPubSub("pubsub AUTH failed: " + v.str);
                   } else {
                     onPubSubReady();
                   }
                 });
  }

  void onPubSubReady() {
    sub_ready_ = true;
    sub_attempt_ = 0;
    std::vector<std::string> names;
    names.reserve(channels_.size());
    for (const auto& [name, c] : channels_) names.push_back(name);
    for (const auto& name : names) syncChannel(name);
  }

  void failPubSub(const std::string& reason) {
    if (sub_ == nullptr) return;
    closeLink(sub_);
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
      sub_retry_timer_.markFired();
      maybeConnectPubSub();
    });
  }

  // The server forgot our subscriptions with the connection.
  void resetChannels() {
    for (auto it = channels_.begin(); it != channels_.end();) {
      it->second.confirmed = false;
      it->second.in_flight = false;
      if (it->second.refs == 0) {
        it = channels_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // At most one SUBSCRIBE/UNSUBSCRIBE per channel in flight: hiredis 0.14 keys its pub/sub
  // callbacks by channel, and an UNSUBSCRIBE reply arriving after a newer SUBSCRIBE would drop
  // the new callback (messages then vanish silently).
  void syncChannel(const std::string& name) {
    auto it = channels_.find(name);
    if (it == channels_.end() || !sub_ready_ || sub_ == nullptr || sub_->ac == nullptr) return;
    Channel& c = it->second;
    if (c.in_flight) return;
    const bool want = c.refs > 0;
    if (want == c.confirmed) {
      if (!want) channels_.erase(it);
      return;
    }
    const char* argv[2] = {want ? "SUBSCRIBE" : "UNSUBSCRIBE", name.c_str()};
    const size_t lens[2] = {want ? sizeof("SUBSCRIBE") - 1 : sizeof("UNSUBSCRIBE") - 1,
                            name.size()};
    // The channel callback's privdata stays NULL: messages are routed through the bridge.
    if (redisAsyncCommandArgv(sub_->ac, &Impl::onPubSubCb, nullptr, 2, argv, lens) == REDIS_OK) {
      c.in_flight = true;
    }
  }

  static void onPubSubCb(redisAsyncContext* ac, void* reply, void* /*privdata*/) {
    auto* link = static_cast<Link*>(ac->data);
    if (link == nullptr || link->impl == nullptr || reply == nullptr) return;
    link->impl->onPubSubReply(static_cast<redisReply*>(reply));
  }

  void onPubSubReply(const redisReply* reply) {
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 3) return;
    const redisReply* kind = reply->element[0];
    const redisReply* chan = reply->element[1];
    if (kind->type != REDIS_REPLY_STRING || chan->type != REDIS_REPLY_STRING) return;
    std::string_view k(kind->str, kind->len);
    std::string_view channel(chan->str, chan->len);
    if (k == "message") {
      const redisReply* msg = reply->element[2];
      if (!message_listener_ || msg->type != REDIS_REPLY_STRING) return;
      auto listener = message_listener_;  // the listener may replace itself or destroy us
      listener(channel, std::string_view(msg->str, msg->len));
      return;
    }
    if (k != "subscribe" && k != "unsubscribe") return;
    std::string name(channel);
    auto it = channels_.find(name);
    if (it == channels_.end()) return;
    it->second.in_flight = false;
    it->second.confirmed = k == "subscribe";
    syncChannel(name);
  }

  uv_loop_t* loop_;
  event::Scheduler& scheduler_;
  RedisNodeOptions options_;
  metrics::NodeMetrics* metrics_;
  std::string address_;

  State state_ = State::kIdle;
  std::string down_reason_;
  RedisServerInfo info_;
  std::string shas_[std::size(kAllScripts)];
  Link* main_ = nullptr;
  Link* sub_ = nullptr;
  bool sub_ready_ = false;
  bool connected_before_ = false;
  bool ping_in_flight_ = false;
  int attempt_ = 0;
  int sub_attempt_ = 0;
  int64_t last_reply_us_ = 0;
  std::unordered_set<Request*> pending_;
  std::map<std::string, Channel> channels_;
  std::function<void(bool)> state_listener_;
  std::function<void(std::string_view, std::string_view)> message_listener_;

  event::ScopedTimer connect_timer_;
  event::ScopedTimer retry_timer_;
  event::ScopedTimer ping_timer_;
  event::ScopedTimer sub_connect_timer_;
  event::ScopedTimer sub_retry_timer_;
  event::ScopedTimer deferred_fail_;
};

RedisNode::RedisNode(uv_loop_s* loop, event::Scheduler& scheduler, RedisNodeOptions options,
                     metrics::NodeMetrics* metrics)
    : impl_(std::make_unique<Impl>(loop, scheduler, std::move(options), metrics)) {}

RedisNode::~RedisNode() = default;

void RedisNode::start() { impl_->start(); }

void RedisNode::runScript(ScriptId script, std::vector<std::string> keys,
                          std::vector<std::string> args, int64_t timeout_ms, NodeOp op,
                          RedisReplyCallback cb) {
  impl_->runScript(script, std::move(keys), std::move(args), timeout_ms, op, std::move(cb));
}

void RedisNode::command(std::vector<std::string> argv, int64_t timeout_ms, RedisReplyCallback cb) {
  impl_->command(std::move(argv), timeout_ms, std::move(cb));
}

bool RedisNode::up() const { return impl_->up(); }
const std::string& RedisNode::downReason() const { return impl_->downReason(); }
const std::string& RedisNode::address() const { return impl_->address(); }
const RedisServerInfo& RedisNode::serverInfo() const { return impl_->serverInfo(); }
void RedisNode::setStateListener(std::function<void(bool up)> listener) {
  impl_->setStateListener(std::move(listener));
}
void RedisNode::subscribe(const std::string& channel) { impl_->subscribe(channel); }
void RedisNode::unsubscribe(const std::string& channel) { impl_->unsubscribe(channel); }
void RedisNode::setMessageListener(
    std::function<void(std::string_view channel, std::string_view message)> l) {
  impl_->setMessageListener(std::move(l));
}
bool RedisNode::subscribed(const std::string& channel) const { return impl_->subscribed(channel); }
size_t RedisNode::pendingRequests() const { return impl_->pendingRequests(); }
void RedisNode::shutdown(std::function<void()> done) { impl_->shutdown(std::move(done)); }

}  // namespace sidelock::backend
