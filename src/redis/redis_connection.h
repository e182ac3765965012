// One connection to one Redis server: our transport underneath, hiredis' reader as the codec, and
// pipelining on top (src/README.md, rule 6; after redis-plus-plus and Dragonfly's facade
// connection).
//
//  - Commands issued during a loop turn are appended to one buffer and flushed right before the
//    loop polls again (a uv_prepare handle), and every flush_every_commands within the turn: many
//    callers' commands become a few writes, and Redis starts on them while the turn goes on.
//  - Replies complete requests in FIFO order. Every request completes exactly once: with its
//    reply, with kDeadlineExceeded when its own budget ends (the late reply is dropped when it
//    comes; the link stays), or with kUnavailable when the link dies. The last two say
//    Status::outcomeUnknown() when the request may have been written (Redis may run it yet): the
//    caller decides what a possibly carried-out request needs (LockService gives back a grant).
//    A request whose caller gave up keeps its FIFO slot with the callback cleared.
//  - Two deadlines: a request's budget only answers its caller; the link is declared dead only
//    when the oldest outstanding request is older than `liveness_timeout_ms` and nothing was read
//    for as long (a 60 ms fork stall must not reconnect every node of a Redlock set).
//  - Scripts are served by index into the script set it was handed: EVALSHA with the SHA its owner
//    set after SCRIPT LOAD, retried once with EVAL on NOSCRIPT. It knows nothing of locks.
//  - In push mode (pub/sub) replies that no request waits for go to the listener.
//
// A connection is used once: opened, up, then dead (closed or lost). Reconnecting means a new
// RedisConnection. Destroy it only outside its own callbacks; close() is safe anywhere.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/rate_limited_log.h"
#include "config/config.h"
#include "event/scheduler.h"
#include "event/uv_handle.h"
#include "metrics/metrics.h"
#include "redis/resp.h"
#include "redis/transport.h"

namespace sidelock::backend {

/// Which latency series a request is counted in.
enum class NodeOp { kAcquire, kRelease, kExtend, kInspect, kOther };

/// A Lua script a connection can run by index: `label` for logs and errors, `text` for SCRIPT
/// LOAD and the EVAL fallback.
struct RedisScript {
  std::string label;
  std::string text;
};
using RedisScriptSet = std::vector<RedisScript>;

using RedisArgs = std::span<const std::string_view>;

struct RedisConnectionOptions {
  /// "redis 127.0.0.1:6379": the start of every error message.
  std::string name;
  int64_t liveness_timeout_ms = 500;
  std::shared_ptr<const RedisScriptSet> scripts;  // may be null: no scripts
  metrics::NodeMetrics* metrics = nullptr;        // may be null
  /// Commands queued in one loop turn go out every this many, and the rest when the turn ends
  /// (0: all at the turn's end). Redis then starts on the first ones while the loop still takes
  /// requests (a gRPC connection's calls arrive in one read, many HTTP connections in one poll)
  /// instead of the two taking turns: measured in lock_bench's gRPC scenario
  /// (tests/bench/README.md).
  size_t flush_every_commands = 8;
};

class RedisConnection final : private RedisTransport::Handler {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    /// The transport is connected (commands queued before this are being written now).
    virtual void onConnectionUp(RedisConnection& c) = 0;
    /// The link died (connect failure, I/O error, protocol error, liveness). Pending requests are
    /// failed right after this returns. Called once; never after close().
    virtual void onConnectionLost(RedisConnection& c, const std::string& reason) = 0;
    /// Push mode: a reply no request waits for (pub/sub messages and (un)subscribe confirmations).
    virtual void onPush(RedisConnection& c, RedisValue& value) = 0;
  };

  RedisConnection(uv_loop_t* loop, event::Scheduler& scheduler, RedisConnectionOptions options,
                  Listener* listener);
  /// Drops pending requests without calling them (their owner is going away too).
  ~RedisConnection() override;
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  /// Connects through `transport`. Commands may be issued right away; they go out once connected.
  void open(const config::RedisNodeAddress& address, std::unique_ptr<RedisTransport> transport);

  /// Queues one command. `timeout_ms` > 0 is this request's budget. The callback never runs inside
  /// this call. After close() or loss it fails (on a later turn) with kUnavailable.
  /// `what` names the command in errors ("PING timed out after 500 ms"); it must be a literal.
  void command(RedisArgs argv, int64_t timeout_ms, NodeOp op, RedisReplyCallback cb,
               const char* what = "command");
  /// EVALSHA of script `index` with `keys` and `args` (EVAL when its SHA is not known yet).
  void script(size_t index, RedisArgs keys, RedisArgs args, int64_t timeout_ms, NodeOp op,
              RedisReplyCallback cb);
  /// Records the SHA1 that SCRIPT LOAD returned for script `index`.
  void setScriptSha(size_t index, std::string sha);
  /// Queues a command whose answer arrives as a push (SUBSCRIBE / UNSUBSCRIBE in push mode).
  void send(RedisArgs argv);
  void setPushMode(bool on) { push_mode_ = on; }

  /// Fails pending requests (on a later turn) with `code` and a message naming each request and
  /// `reason` (unansweredMessage), and stops all I/O. No listener call follows. Idempotent.
  void close(StatusCode code, const std::string& reason);

  bool dead() const { return dead_; }
  size_t pendingRequests() const { return pending_.size(); }
  const std::string& name() const { return options_.name; }

 private:
  struct Pending {
    RedisReplyCallback cb;  // empty once answered early (deadline) or dropped
    int64_t sent_us = 0;
    int64_t deadline_us = 0;
    uint32_t retained_bytes = 0;  // scripts: their arguments, kept for a NOSCRIPT retry
    uint32_t script = 0;
    const char* what = "command";  // a literal, or the label of a script in the set
    NodeOp op = NodeOp::kOther;
    bool is_script = false;
  };
  /// "<name>: <p's request> not answered, the link went down: <reason>".
  std::string unansweredMessage(const Pending& p, std::string_view reason) const;

  // RedisTransport::Handler
  void onTransportConnected() override;
  void onTransportData(const char* data, size_t len) override;
  void onTransportError(std::string reason) override;

  bool admit(RedisReplyCallback& cb);
  void enqueue(Pending p, int64_t timeout_ms);
  /// A command was appended to out_: flush at the turn's end, or now (flush_every_commands).
  void queued();
  void scheduleFlush();
  void flush();
  /// Hands out_ to the transport: every pending request may now be run by Redis.
  void writeOut();
  /// How many of pending_, from the front, may have been written (Redis may run them yet).
  size_t writtenRequests() const { return pending_.size() - unwritten_; }
  void onReply(RedisValue& value);
  bool retryWithEval(Pending& p, const RedisValue& value);
  /// Keeps one argument of an EVALSHA for its NOSCRIPT retry: its length (4 bytes, host order)
  /// and its bytes, at the back of retained_.
  void retainArgument(std::string_view arg);
  /// The oldest request's retained arguments (its `bytes` at the front of retained_), read as
  /// retainArgument() framed them, appended to `argv` (views into retained_).
  void appendRetainedArguments(uint32_t bytes, std::vector<std::string_view>& argv) const;
  void consumeRetained(uint32_t bytes);
  void armDeadlineCheck(int64_t at_us);
  void onDeadlineCheck();
  void observeLatency(const Pending& p, int64_t now_us);
  /// Logs a script's error reply as Redis sent it (its SHA and line included: clients get
  /// scriptErrorStatus()'s text), once per kind of error and then at most every 10 s.
  void logScriptError(const Pending& p, const RedisValue& value);
  /// Marks the connection dead and stops every kind of I/O (close() and die() share it).
  void stopIo();
  /// The link is dead: stop I/O, tell the listener, fail what was pending. Last thing a caller
  /// does (the listener may close or retire us).
  void die(const std::string& reason);

  uv_loop_t* loop_;
  event::Scheduler& scheduler_;
  RedisConnectionOptions options_;
  Listener* listener_;
  std::unique_ptr<RedisTransport> transport_;
  event::UvHandle<uv_prepare_t> flush_handle_;
  RespReader reader_;
  std::string out_;       // commands not yet handed to the transport
  std::string retained_;  // FIFO of the scripts' arguments (retainArgument), parallel to pending_
  std::vector<std::string_view> script_argv_;  // scratch: a script call's arguments
  size_t retained_head_ = 0;
  std::deque<Pending> pending_;
  std::vector<std::string> shas_;
  event::ScopedTimer deadline_timer_;
  RateLimitedLog script_error_log_;
  int64_t deadline_armed_us_ = 0;
  int64_t last_read_us_ = 0;
  int readable_deferrals_ = 0;
  bool connected_ = false;
  bool flush_scheduled_ = false;
  size_t queued_since_flush_ = 0;  // commands queued since the last write
  // The newest `unwritten_` requests of pending_ are still in out_: never handed to the transport,
  // so Redis cannot run them (their failures do not carry outcomeUnknown). Never more than
  // pending_.size() (onReply clamps it as it pops).
  size_t unwritten_ = 0;
  bool push_mode_ = false;
  bool dead_ = false;
};

}  // namespace sidelock::backend
