// One Redis server as sidelock uses it: a command connection (RedisConnection: our own socket,
// pipelined, hiredis as the codec) with connect timeout, reconnect with backoff, a handshake
// (AUTH with ACL user + password, SELECT, INFO server, SCRIPT LOAD of the script set), an idle
// PING, and scripts run by index with transparent NOSCRIPT reload. A second connection carries
// pub/sub (release wake-ups) while some channel is wanted.
//
// Used by RedisBackend (one node) and RedlockBackend (N nodes). The node knows no lock semantics:
// its owner hands it the script set. Its address may change at run time (setAddress), so nothing
// outside caches it.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "event/scheduler.h"
#include "metrics/metrics.h"
#include "redis/redis_connection.h"
#include "redis/resp.h"
#include "redis/tls_transport.h"

namespace sidelock::backend {

struct RedisNodeOptions {
  config::RedisNodeAddress address;
  std::string username;  // empty: AUTH password only (or no AUTH when password empty too)
  std::string password;
  int db = 0;
  int64_t connect_timeout_ms = 1000;
  int64_t reconnect_min_ms = 100;
  int64_t reconnect_max_ms = 5000;
  int64_t health_interval_ms = 1000;  // PING period while idle
  /// Budget for PING and for calls made with timeout_ms <= 0, and the link's liveness bound: a
  /// link whose oldest request waited this long with nothing read meanwhile is torn down.
  /// Handshake commands (AUTH, SELECT, INFO, SCRIPT LOAD) use connect_timeout_ms.
  int64_t command_timeout_ms = 500;
  /// Loaded during every handshake; runScript() takes an index into it. May be null.
  std::shared_ptr<const RedisScriptSet> scripts;
  /// Set: every connection speaks TLS with this context (verification always on).
  std::shared_ptr<TlsClientContext> tls;
  /// Why TLS could not be set up (bad certificate file): the node stays down with this reason.
  std::string tls_error;
  /// Pub/sub with SSUBSCRIBE / SUNSUBSCRIBE (Redis Cluster's sharded pub/sub, Redis >= 7): each
  /// channel must hash to a slot this node serves.
  bool sharded_pubsub = false;
};

/// Reconnect delay after `attempt` consecutive failures (0-based): min * 2^attempt capped at max,
/// then jittered uniformly into [delay/2, delay] so many sidecars do not reconnect in lockstep.
int64_t reconnectDelayMs(int attempt, int64_t min_ms, int64_t max_ms);

/// What the node said about itself at the last (re)connect: used by Redlock's delayed restarts.
struct RedisServerInfo {
  std::string run_id;
  std::string version;        // redis_version, e.g. "7.0.15"
  int64_t uptime_ms = 0;      // server uptime when we asked
  int64_t learned_at_ms = 0;  // Scheduler::nowMs() when we asked
};

class RedisNode {
 public:
  RedisNode(uv_loop_t* loop, event::Scheduler& scheduler, RedisNodeOptions options,
            metrics::NodeMetrics* metrics);
  ~RedisNode();
  RedisNode(const RedisNode&) = delete;
  RedisNode& operator=(const RedisNode&) = delete;

  /// Starts connecting; reconnects with backoff forever until shutdown().
  void start();

  /// Runs script `script` of the set (EVALSHA, EVAL on NOSCRIPT). While the link is down it fails
  /// fast with kUnavailable; after `timeout_ms` (<= 0: command_timeout_ms) with
  /// kDeadlineExceeded, leaving the link up. The callback runs exactly once, never inside this
  /// call. The arguments are copied before this returns.
  void runScript(size_t script, std::initializer_list<std::string_view> keys,
                 std::initializer_list<std::string_view> args, int64_t timeout_ms, NodeOp op,
                 RedisReplyCallback cb);
  /// The same with arguments the caller keeps (a call retried after a cluster redirection).
  void runScriptArgs(size_t script, RedisArgs keys, RedisArgs args, int64_t timeout_ms, NodeOp op,
                     RedisReplyCallback cb);
  /// The same with the owner's enum of script indexes (scripts.h: ScriptId).
  template <typename ScriptEnum>
  requires std::is_enum_v<ScriptEnum>
  void runScript(ScriptEnum script, std::initializer_list<std::string_view> keys,
                 std::initializer_list<std::string_view> args, int64_t timeout_ms, NodeOp op,
                 RedisReplyCallback cb) {
    runScript(static_cast<size_t>(script), keys, args, timeout_ms, op, std::move(cb));
  }
  /// Any command, same rules.
  void command(std::initializer_list<std::string_view> argv, int64_t timeout_ms,
               RedisReplyCallback cb);
  void commandArgv(RedisArgs argv, int64_t timeout_ms, RedisReplyCallback cb);

  bool up() const;
  /// Why the node is down ("connect 10.0.0.1:6379: connection refused"), empty when up.
  const std::string& downReason() const;
  /// The address in use: "host:port" or "unix:/path".
  const std::string& address() const;
  const RedisServerInfo& serverInfo() const;
  /// Counts the command links that came up: two requests sent under the same value went on the
  /// same connection, in order (what a WAIT needs of the writes it vouches for).
  uint64_t linkGeneration() const;

  /// Points the node at another server (a Sentinel failover, a Cluster slot move): an open link to
  /// the old address is dropped and the node reconnects to the new one. No-op when unchanged.
  void setAddress(const config::RedisNodeAddress& address);

  /// Called on every transition up (after the handshake succeeded) or down, on a later loop turn
  /// (posted), in transition order. up() tells the state at the time the listener runs.
  void setStateListener(std::function<void(bool up)> listener);

  /// Pub/sub on a dedicated connection: subscriptions are re-established after reconnects.
  /// Counted: each subscribe(c) needs one unsubscribe(c); the channel is dropped at zero. The
  /// connection is opened while the command link is up and some channel is wanted. Messages
  /// published while it is down are lost (callers keep a polling fallback).
  void subscribe(const std::string& channel);
  void unsubscribe(const std::string& channel);
  /// Called from the read path (never inside subscribe()).
  void setMessageListener(
      std::function<void(std::string_view channel, std::string_view message)> l);
  /// Called when the server refused a (S)SUBSCRIBE, e.g. a cluster node answering MOVED for a
  /// shard channel whose slot moved away. The channel stays wanted but unconfirmed until the
  /// owner moves it (unsubscribe here, subscribe elsewhere) or the pub/sub link reconnects.
  void setSubscribeErrorListener(
      std::function<void(const std::string& channel, const std::string& error)> l);
  /// Called when the server confirmed `channel` again after the pub/sub link it was confirmed on
  /// dropped: messages published in between were missed (the owner reads what they would have
  /// said). Not for a first subscription, nor after the owner moved the channel elsewhere.
  void setResubscribedListener(std::function<void(const std::string& channel)> l);
  /// True once the server confirmed the subscription to `channel` (tests, diagnostics).
  bool subscribed(const std::string& channel) const;

  /// Commands sent and not yet answered (including ones whose caller was already answered).
  size_t pendingRequests() const;
  /// TLS handshakes that resumed the node's previous session (diagnostics, tests).
  int tlsResumptions() const;

  /// Fails every pending request with kCancelled, closes both connections, then calls `done` on a
  /// later loop turn.
  void shutdown(std::function<void()> done);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sidelock::backend
