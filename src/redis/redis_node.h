// One Redis master: a hiredis async connection on the libuv loop (hiredis/adapters/libuv.h), with
// connect timeout, per-command timeout (hiredis 0.14 has none for async: a uv-driven deadline per
// request; a timed-out link is treated as broken and reconnected), reconnect with backoff, AUTH
// (ACL user + password), SELECT, and sidelock's Lua scripts called by EVALSHA with transparent
// NOSCRIPT reload. A second connection carries pub/sub (release wake-ups).
//
// Used by RedisBackend (one node) and RedlockBackend (N nodes). Ownership rules (STYLE 3, 4):
// each command is one heap request object passed as privdata and deleted in its reply callback;
// redisAsyncContext::data points to a small bridge whose back pointer the node clears on
// destruction. A request whose deadline passes completes with kDeadlineExceeded at once; the late
// hiredis reply is then dropped.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "event/scheduler.h"
#include "metrics/metrics.h"

struct uv_loop_s;

namespace sidelock::backend {

/// An owned copy of a redisReply (the hiredis reply is freed inside the callback).
/// A Redis error reply ("ERR ...", "WRONGTYPE ...") is delivered as an OK StatusOr holding a
/// kError value; a non-OK Status means no reply: kUnavailable (link down / lost), kDeadlineExceeded
/// (no reply in time), kCancelled (shutdown).
struct RedisValue {
  enum class Type { kNil, kInteger, kString, kStatus, kError, kArray };
  Type type = Type::kNil;
  int64_t integer = 0;
  std::string str;  // kString, kStatus, kError
  std::vector<RedisValue> elements;

  bool isError() const { return type == Type::kError; }
};

using RedisReplyCallback = std::function<void(StatusOr<RedisValue>)>;

/// The Lua scripts (src/redis/scripts.h holds their text; each node keeps the SHA1s that SCRIPT
/// LOAD returned during its handshake).
enum class ScriptId { kAcquire, kRelease, kExtend, kInspect };

/// Which metric latency series an operation counts in.
enum class NodeOp { kAcquire, kRelease, kExtend, kInspect, kOther };

struct RedisNodeOptions {
  config::RedisNodeAddress address;
  std::string username;  // empty: AUTH password only (or no AUTH when password empty too)
  std::string password;
  int db = 0;
  int64_t connect_timeout_ms = 1000;
  int64_t reconnect_min_ms = 100;
  int64_t reconnect_max_ms = 5000;
  int64_t health_interval_ms = 1000;  // PING period while idle; INFO server after each connect
  /// Deadline for PING and for calls made with timeout_ms <= 0. Handshake commands (AUTH,
  /// SELECT, INFO, SCRIPT LOAD) use connect_timeout_ms.
  int64_t command_timeout_ms = 500;
};

/// Reconnect delay after `attempt` consecutive failures (0-based): min * 2^attempt capped at max,
/// then jittered uniformly into [delay/2, delay] so many sidecars do not reconnect in lockstep.
int64_t reconnectDelayMs(int attempt, int64_t min_ms, int64_t max_ms);

/// What the node said about itself at the last (re)connect: used by Redlock's delayed restarts.
struct RedisServerInfo {
  std::string run_id;
  int64_t uptime_ms = 0;      // server uptime when we asked
  int64_t learned_at_ms = 0;  // Scheduler::nowMs() when we asked
};

class RedisNode {
 public:
  RedisNode(uv_loop_s* loop, event::Scheduler& scheduler, RedisNodeOptions options,
            metrics::NodeMetrics* metrics);
  ~RedisNode();
  RedisNode(const RedisNode&) = delete;
  RedisNode& operator=(const RedisNode&) = delete;

  /// Starts connecting; reconnects with backoff forever until shutdown().
  void start();

  /// Runs a sidelock script (EVALSHA, loading it on NOSCRIPT). While the link is down it fails
  /// fast with kUnavailable; after `timeout_ms` with kDeadlineExceeded. The callback runs exactly
  /// once, never inside this call.
  void runScript(ScriptId script, std::vector<std::string> keys, std::vector<std::string> args,
                 int64_t timeout_ms, NodeOp op, RedisReplyCallback cb);
  /// Any command (argv form), same rules.
  void command(std::vector<std::string> argv, int64_t timeout_ms, RedisReplyCallback cb);

  bool up() const;
  /// Why the node is down ("connect: Connection refused", "timeout"), empty when up.
  const std::string& downReason() const;
  const std::string& address() const;
  const RedisServerInfo& serverInfo() const;

  /// Called on every transition up (after AUTH/SELECT/INFO/SCRIPT LOAD succeeded) or down, on a
  /// later loop turn (posted), in transition order. The argument is the transition's value;
  /// up() tells the state at the time the listener runs (it may have moved on).
  void setStateListener(std::function<void(bool up)> listener);

  /// Pub/sub on a dedicated connection: subscriptions are re-established after reconnects.
  /// Counted: each subscribe(c) needs one unsubscribe(c); the channel is dropped at zero. The
  /// connection is opened while the command link is up and some channel is wanted. Messages
  /// published while it is down are lost (callers keep a polling fallback).
  void subscribe(const std::string& channel);
  void unsubscribe(const std::string& channel);
  /// Called from the hiredis read callback (never inside subscribe()).
  void setMessageListener(
      std::function<void(std::string_view channel, std::string_view message)> l);
  /// True once the server confirmed the subscription to `channel` (tests, diagnostics).
  bool subscribed(const std::string& channel) const;

  /// Commands sent and not yet answered by hiredis (including ones already timed out).
  size_t pendingRequests() const;

  /// Fails every pending request with kCancelled, closes both connections, then calls `done` on a
  /// later loop turn once hiredis and libuv have let go of everything.
  void shutdown(std::function<void()> done);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sidelock::backend
