#include "redis/redis_connection.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"

namespace sidelock::backend {
namespace {

constexpr std::string_view kNoScript = "NOSCRIPT";

void inc(prometheus::Counter* c) {
  if (c != nullptr) c->Increment();
}

// Retained script arguments are compacted once this much has been consumed at the front.
constexpr size_t kRetainedCompactBytes = 64 * 1024;

}  // namespace

RedisConnection::RedisConnection(uv_loop_t* loop, event::Scheduler& scheduler,
                                 RedisConnectionOptions options, Listener* listener)
    : loop_(loop), scheduler_(scheduler), options_(std::move(options)), listener_(listener) {
  if (options_.scripts) shas_.resize(options_.scripts->size());
  uv_prepare_t* prepare = flush_handle_.allocate(this);
  if (uv_prepare_init(loop_, prepare) != 0) abort();  // fails only on a bad loop pointer
}

RedisConnection::~RedisConnection() {
  dead_ = true;
  pending_.clear();
  if (transport_) transport_->close();
}

void RedisConnection::open(const config::RedisNodeAddress& address,
                           std::unique_ptr<RedisTransport> transport) {
  transport_ = std::move(transport);
  transport_->connect(address, this);
}

void RedisConnection::stopIo() {
  dead_ = true;
  connected_ = false;
  if (transport_) transport_->close();
  flush_handle_.close();
  deadline_timer_.reset();
  out_.clear();
  retained_.clear();
  retained_head_ = 0;
  // unwritten_ stays: close() and die() still ask writtenRequests().
}

/// A request the link went down under: it names itself, then why. The reason may name another
/// request (the oldest, unanswered; a health PING), and an unlock told "acquire got no reply" or
/// "PING timed out" reads as the wrong operation.
std::string RedisConnection::unansweredMessage(const Pending& p, std::string_view reason) const {
  return options_.name + ": " + p.what +
         " not answered, the link went down: " + std::string(reason);
}

void RedisConnection::close(StatusCode code, const std::string& reason) {
  if (dead_) return;
  stopIo();
  // Answered on a later turn: close() may be called from inside a caller's own call. A closing
  // node (kCancelled) did not lose its link: its requests are cancelled.
  const size_t written = writtenRequests();
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    if (!p.cb) continue;
    std::string message = code == StatusCode::kCancelled
                              ? options_.name + ": " + p.what + " cancelled: " + reason
                              : unansweredMessage(p, reason);
    Status why(code, std::move(message));
    if (i < written) why.setOutcomeUnknown();
    scheduler_.post([cb = std::move(p.cb), why = std::move(why)] { cb(why); });
  }
  pending_.clear();
  unwritten_ = 0;
}

bool RedisConnection::admit(RedisReplyCallback& cb) {
  if (!dead_) return true;
  if (cb) {
    scheduler_.post(
        [cb = std::move(cb), s = unavailable(options_.name + ": connection lost")] { cb(s); });
  }
  return false;
}

void RedisConnection::command(RedisArgs argv, int64_t timeout_ms, NodeOp op, RedisReplyCallback cb,
                              const char* what) {
  if (!admit(cb)) return;
  appendCommand(out_, argv);
  Pending p;
  p.cb = std::move(cb);
  p.op = op;
  p.what = what;
  enqueue(std::move(p), timeout_ms);
}

void RedisConnection::script(size_t index, RedisArgs keys, RedisArgs args, int64_t timeout_ms,
                             NodeOp op, RedisReplyCallback cb) {
  if (!admit(cb)) return;
  const RedisScript& s = (*options_.scripts)[index];
  const std::string& sha = shas_[index];
  Pending p;
  p.cb = std::move(cb);
  p.op = op;
  p.is_script = true;
  p.what = s.label.c_str();
  p.script = static_cast<uint32_t>(index);
  char numkeys_text[24];
  const auto [end, ec] =
      std::to_chars(numkeys_text, numkeys_text + sizeof(numkeys_text), keys.size());
  const std::string_view numkeys(numkeys_text, static_cast<size_t>(end - numkeys_text));
  // EVAL caches the script itself: no retry needed. EVALSHA keeps its arguments (numkeys, keys,
  // args) for a NOSCRIPT retry.
  const bool by_sha = !sha.empty();
  script_argv_.clear();
  script_argv_.push_back(by_sha ? std::string_view("EVALSHA") : std::string_view("EVAL"));
  script_argv_.push_back(by_sha ? std::string_view(sha) : std::string_view(s.text));
  script_argv_.push_back(numkeys);
  script_argv_.insert(script_argv_.end(), keys.begin(), keys.end());
  script_argv_.insert(script_argv_.end(), args.begin(), args.end());
  appendCommand(out_, script_argv_);
  if (by_sha) {
    const size_t retained_start = retained_.size();
    for (size_t i = 2; i < script_argv_.size(); ++i) retainArgument(script_argv_[i]);
    p.retained_bytes = static_cast<uint32_t>(retained_.size() - retained_start);
  }
  enqueue(std::move(p), timeout_ms);
}

void RedisConnection::setScriptSha(size_t index, std::string sha) {
  if (index < shas_.size()) shas_[index] = std::move(sha);
}

void RedisConnection::send(RedisArgs argv) {
  if (dead_) return;
  appendCommand(out_, argv);
  scheduleFlush();
}

void RedisConnection::queued() {
  scheduleFlush();
  if (options_.flush_every_commands == 0 || !connected_ || dead_) return;
  if (++queued_since_flush_ < options_.flush_every_commands) return;
  // Early, within the turn: the commands so far go out now (out_ keeps their order; the turn's
  // end writes the rest).
  queued_since_flush_ = 0;
  writeOut();
}

void RedisConnection::enqueue(Pending p, int64_t timeout_ms) {
  const int64_t now = scheduler_.nowUs();
  p.sent_us = now;
  p.deadline_us = now + std::max<int64_t>(1, timeout_ms) * 1000;
  // The first outstanding request also starts the liveness clock.
  const int64_t check_at = pending_.empty()
                               ? std::min(p.deadline_us, now + options_.liveness_timeout_ms * 1000)
                               : p.deadline_us;
  pending_.push_back(std::move(p));
  ++unwritten_;
  armDeadlineCheck(check_at);
  queued();
}

// ---- writing: one flush per loop turn (and one per flush_every_commands within it) ----

void RedisConnection::scheduleFlush() {
  if (flush_scheduled_ || !connected_) return;  // not connected: flushed when it is
  flush_scheduled_ = true;
  uv_prepare_start(flush_handle_.get(), [](uv_prepare_t* h) {
    if (h->data != nullptr) static_cast<RedisConnection*>(h->data)->flush();
  });
}

void RedisConnection::flush() {
  flush_scheduled_ = false;
  queued_since_flush_ = 0;
  uv_prepare_stop(flush_handle_.get());
  if (dead_ || !connected_) return;
  writeOut();
}

void RedisConnection::writeOut() {
  // A transport that failed (its error not reported yet: that comes on a later turn) takes
  // nothing: those requests stay unwritten, and are not failed as "may have run".
  if (transport_->write(out_)) unwritten_ = 0;
}

// ---- reading ----

void RedisConnection::onTransportConnected() {
  connected_ = true;
  last_read_us_ = scheduler_.nowUs();
  // Requests queued while connecting get their liveness clock from now.
  if (!pending_.empty()) armDeadlineCheck(last_read_us_ + options_.liveness_timeout_ms * 1000);
  scheduleFlush();
  listener_->onConnectionUp(*this);
}

void RedisConnection::onTransportData(const char* data, size_t len) {
  last_read_us_ = scheduler_.nowUs();
  readable_deferrals_ = 0;
  reader_.feed(data, len);
  RedisValue value;
  while (!dead_) {
    switch (reader_.next(&value)) {
      case RespReader::Result::kNeedMore:
        return;
      case RespReader::Result::kProtocolError:
        die("protocol error: " + reader_.error());
        return;
      case RespReader::Result::kReply:
        onReply(value);
        break;
    }
  }
}

void RedisConnection::onReply(RedisValue& value) {
  if (pending_.empty()) {
    if (push_mode_) {
      listener_->onPush(*this, value);
    } else {
      die("a reply nobody asked for");
    }
    return;
  }
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  unwritten_ = std::min(unwritten_, pending_.size());  // a reply answers a written request
  if (p.is_script && value.isError() && p.retained_bytes > 0 && p.cb &&
      std::string_view(value.str).starts_with(kNoScript) && retryWithEval(p, value)) {
    return;
  }
  consumeRetained(p.retained_bytes);
  if (!p.cb) return;  // answered already (deadline) or dropped
  const int64_t now = scheduler_.nowUs();
  observeLatency(p, now);
  if (value.isError() && options_.metrics != nullptr) inc(options_.metrics->errors_reply);
  if (value.isError() && p.is_script) logScriptError(p, value);
  // Last: the callback may close this connection (onTransportData checks dead_).
  p.cb(std::move(value));
}

void RedisConnection::logScriptError(const Pending& p, const RedisValue& value) {
  const std::string_view error = value.str;
  // Redis Cluster's redirections are its protocol, not errors (the cluster backend follows them).
  for (std::string_view redirect : {"MOVED ", "ASK ", "TRYAGAIN "}) {
    if (error.starts_with(redirect)) return;
  }
  const std::string_view kind = error.substr(0, error.find(' '));
  if (auto suppressed = script_error_log_.admit(scheduler_.nowMs(), kind)) {
    SL_LOG(kWarn, "redis.script_error", {"node", options_.name}, {"script", p.what},
           {"error", error}, {"suppressed", static_cast<unsigned long long>(*suppressed)},
           {"suppressed_window_s", static_cast<long long>(script_error_log_.windowMs() / 1000)});
  }
}

// The server lost its script cache (SCRIPT FLUSH, restart, failover). EVAL runs the script and
// caches it again; the retry keeps the original deadline and goes to the back of the FIFO.
bool RedisConnection::retryWithEval(Pending& p, const RedisValue& /*noscript*/) {
  const RedisScript& s = (*options_.scripts)[p.script];
  if (options_.metrics != nullptr) inc(options_.metrics->noscript_reloads);
  script_argv_.clear();
  script_argv_.push_back("EVAL");
  script_argv_.push_back(s.text);
  appendRetainedArguments(p.retained_bytes, script_argv_);  // those the EVALSHA was sent with
  appendCommand(out_, script_argv_);
  consumeRetained(p.retained_bytes);
  Pending retry = std::move(p);
  retry.retained_bytes = 0;  // one retry only
  pending_.push_back(std::move(retry));
  ++unwritten_;
  scheduleFlush();
  return true;
}

void RedisConnection::retainArgument(std::string_view arg) {
  const auto len = static_cast<uint32_t>(arg.size());
  retained_.append(reinterpret_cast<const char*>(&len), sizeof(len));
  retained_.append(arg);
}

void RedisConnection::appendRetainedArguments(uint32_t bytes,
                                              std::vector<std::string_view>& argv) const {
  const std::string_view kept(retained_.data() + retained_head_, bytes);
  for (size_t at = 0; at + sizeof(uint32_t) <= kept.size();) {
    uint32_t len = 0;
    std::memcpy(&len, kept.data() + at, sizeof(len));
    at += sizeof(len);
    argv.push_back(kept.substr(at, len));
    at += len;
  }
}

void RedisConnection::consumeRetained(uint32_t bytes) {
  if (bytes == 0) return;
  retained_head_ += bytes;
  if (retained_head_ >= retained_.size()) {
    retained_.clear();
    retained_head_ = 0;
  } else if (retained_head_ >= kRetainedCompactBytes) {
    retained_.erase(0, retained_head_);
    retained_head_ = 0;
  }
}

void RedisConnection::onTransportError(std::string reason) { die(reason); }

void RedisConnection::die(const std::string& reason) {
  if (dead_) return;
  stopIo();
  // Only the requests handed to the transport may run on Redis (requests queued by an expired
  // request's callback this turn were not; nor any while the link never came up).
  const size_t written = writtenRequests();
  std::deque<Pending> failed = std::move(pending_);
  pending_.clear();
  unwritten_ = 0;
  // Written now: `what` may point into the script set, which the listener may let go.
  std::vector<std::string> errors;
  errors.reserve(failed.size());
  for (const Pending& p : failed) errors.push_back(p.cb ? unansweredMessage(p, reason) : "");
  metrics::NodeMetrics* metrics = options_.metrics;
  listener_->onConnectionLost(*this, reason);
  // From here on `this` may be closed or retired by the listener: only locals.
  for (size_t i = 0; i < failed.size(); ++i) {
    if (!failed[i].cb) continue;
    if (metrics != nullptr) inc(metrics->errors_disconnected);
    Status why = unavailable(std::move(errors[i]));
    if (i < written) why.setOutcomeUnknown();
    failed[i].cb(std::move(why));
  }
}

// ---- deadlines ----

void RedisConnection::armDeadlineCheck(int64_t at_us) {
  if (deadline_timer_.pending() && deadline_armed_us_ <= at_us) return;
  deadline_armed_us_ = at_us;
  const int64_t delay_us = std::max<int64_t>(0, at_us - scheduler_.nowUs());
  deadline_timer_.start(scheduler_, (delay_us + 999) / 1000, [this] {
    onDeadlineCheck();
  });
}

void RedisConnection::onDeadlineCheck() {
  if (dead_ || pending_.empty()) return;
  const int64_t now = scheduler_.nowUs();
  const int64_t liveness_us = options_.liveness_timeout_ms * 1000;
  // Silent: the oldest request waited the liveness bound and nothing was read for as long (the
  // connect counts as a read). Only once connected: until then connect_timeout_ms bounds it.
  const int64_t quiet_since = std::max(pending_.front().sent_us, last_read_us_);
  const bool silent = connected_ && now - quiet_since >= liveness_us;
  bool any_due = silent;
  for (const Pending& p : pending_) any_due = any_due || (p.cb && p.deadline_us <= now);
  // libuv runs timers before it polls: after a loop stall the reply may already wait in the
  // socket. Let the poll phase read it (a few times at most) before failing anything.
  if (any_due && readable_deferrals_ < 3 && transport_ && transport_->readable()) {
    ++readable_deferrals_;
    armDeadlineCheck(now + 1000);
    return;
  }
  // Answer the requests whose budget ended; their slots stay for the late replies.
  std::vector<std::pair<RedisReplyCallback, std::string>> expired;
  int64_t next = connected_ ? quiet_since + liveness_us : std::numeric_limits<int64_t>::max();
  for (Pending& p : pending_) {
    if (!p.cb) continue;
    if (p.deadline_us > now) {
      next = std::min(next, p.deadline_us);
      continue;
    }
    const int64_t budget_ms = (p.deadline_us - p.sent_us) / 1000;
    // exchange, not move: the slot must read as answered when the late reply comes.
    expired.emplace_back(std::exchange(p.cb, nullptr), std::string(p.what) + " timed out after " +
                                                           std::to_string(budget_ms) + " ms");
  }
  // The oldest request's name, before its callback may go away with the connection.
  const std::string silent_reason =
      silent ? "the oldest request (" + std::string(pending_.front().what) + ") got no reply for " +
                   std::to_string(options_.liveness_timeout_ms) + " ms"
             : std::string();
  if (!silent && next != std::numeric_limits<int64_t>::max()) {
    armDeadlineCheck(std::max(next, now + 1000));
  }
  for (auto& [cb, message] : expired) {
    if (options_.metrics != nullptr) inc(options_.metrics->errors_timeout);
    // Redis may still run it: the reply is dropped when it comes, not waited for. So may a request
    // still in out_ (the link not up yet): it is written once the link comes up.
    cb(deadlineExceeded(options_.name + ": " + message).setOutcomeUnknown());
  }
  // Callers first hear that their budget ended; then the silent link is torn down (a callback may
  // already have closed it).
  if (silent) die(silent_reason);
}

void RedisConnection::observeLatency(const Pending& p, int64_t now_us) {
  metrics::NodeMetrics* m = options_.metrics;
  if (m == nullptr) return;
  prometheus::Histogram* h = nullptr;
  switch (p.op) {
    case NodeOp::kAcquire:
      h = m->latency_acquire;
      break;
    case NodeOp::kRelease:
      h = m->latency_release;
      break;
    case NodeOp::kExtend:
      h = m->latency_extend;
      break;
    case NodeOp::kInspect:
      h = m->latency_inspect;
      break;
    case NodeOp::kOther:
      h = m->latency_other;
      break;
  }
  if (h != nullptr) h->Observe(static_cast<double>(now_us - p.sent_us) / 1e6);
}

}  // namespace sidelock::backend
