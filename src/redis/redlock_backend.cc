#include "redis/redlock_backend.h"

#include <algorithm>
#include <utility>

#include "common/log.h"
#include "redis/redis_backend.h"
#include "redis/scripts.h"

namespace sidelock::backend {
namespace {

enum class Vote { kPending, kFor, kBusy, kNotOwner, kNotHeld, kFailed };

bool isInt(const RedisValue& v) { return v.type == RedisValue::Type::kInteger; }

Vote voteOf(OwnerCheck c) {
  switch (c) {
    case OwnerCheck::kOk:
      return Vote::kFor;
    case OwnerCheck::kNotOwner:
      return Vote::kNotOwner;
    case OwnerCheck::kNotHeld:
      return Vote::kNotHeld;
  }
  return Vote::kFailed;
}

std::string replyError(const StatusOr<RedisValue>& r) {
  if (!r.isOk()) return r.status().toString();
  if (r->isError()) return "redis error: " + r->str;
  return "unexpected reply";
}

}  // namespace

struct RedlockBackend::NodeSlot {
  std::string address;
  std::unique_ptr<RedisNode> redis;
  quorum::NodeRestartState restart;
  event::ScopedTimer voting_timer;  // fires when a restarted node may vote again
  /// The run whose CONFIG said appendonly yes + appendfsync always: it keeps every write across
  /// a restart, so delayed restarts do not apply to it.
  std::string persistent_run_id;
  std::string not_voting_logged_run_id;  // "log it once" per run, not per reconnect
  std::string persistent_logged_run_id;
  uint64_t persistence_check = 0;  // generation: the answer to an older check is ignored
  bool shut_down = false;
};

// One acquire: vote -> (won) token sync -> answer, or (lost) cleanup on all nodes -> answer.
struct RedlockBackend::AcquireOp {
  enum class Phase { kVote, kSync, kCleanup, kDone };
  std::string name;
  std::string owner;
  int64_t ttl_ms = 0;
  AcquireCallback cb;
  int64_t start_us = 0;
  Phase phase = Phase::kVote;
  std::vector<bool> voting;  // snapshot when the vote was sent
  std::vector<Vote> votes;
  std::vector<uint64_t> tokens;
  std::vector<int64_t> pttls;
  std::vector<std::string> errors;
  uint64_t token = 0;
  std::vector<bool> granting;  // voted for us when the vote was decided (set by startTokenSync)
  int sync_needed = 0;         // granting nodes
  int sync_acks = 0;           // granting nodes whose counter is known to be >= token
  int sync_failures = 0;       // granting nodes that failed to record it
  size_t cleanup_pending = 0;
  Status error;  // set when the attempt failed for a reason other than the vote itself
};

struct RedlockBackend::ExtendOp {
  std::string name;
  std::string owner;
  int64_t ttl_ms = 0;
  ExtendCallback cb;
  int64_t start_us = 0;
  bool decided = false;
  bool done = false;
  size_t pending = 0;
  std::vector<bool> voting;
  std::vector<Vote> votes;
  std::vector<std::string> errors;
};

struct RedlockBackend::ReleaseOp {
  OwnerCheckCallback cb;
  size_t pending = 0;
  std::vector<bool> voting;
  std::vector<Vote> votes;
  std::vector<std::string> errors;
};

struct RedlockBackend::InspectOp {
  InspectCallback cb;
  size_t pending = 0;
  std::vector<bool> voting;
  std::vector<bool> answered;
  std::vector<bool> held;
  std::vector<int64_t> pttls;
  std::vector<uint64_t> tokens;
  std::vector<std::string> errors;
};

struct RedlockBackend::WakeState {
  int64_t first_us = 0;
  std::set<size_t> nodes;
  bool fired = false;
  event::ScopedTimer timer;
};

RedlockBackend::RedlockBackend(uv_loop_s* loop, event::Scheduler& scheduler,
                               const config::BackendConfig& config, int64_t max_ttl_ms,
                               metrics::Metrics& metrics)
    : loop_(loop),
      scheduler_(scheduler),
      config_(config),
      max_ttl_ms_(max_ttl_ms),
      counter_ttl_ms_(std::to_string(tokenCounterTtlMs(max_ttl_ms))),
      metrics_(metrics) {
  for (size_t i = 0; i < config_.nodes.size(); ++i) {
    auto slot = std::make_unique<NodeSlot>();
    slot->address = config_.nodes[i].toString();
    // Same connection settings as the single-master backend; each call then passes
    // redlock.node_timeout_ms as its own deadline.
    slot->redis = std::make_unique<RedisNode>(loop_, scheduler_,
                                              nodeOptionsFromConfig(config_, config_.nodes[i]),
                                              &metrics_.node(slot->address));
    // The node posts state changes to the loop: a post still queued when we are destroyed must
    // not reach us (weak reference).
    slot->redis->setStateListener([this, i, alive = std::weak_ptr<char>(alive_)](bool up) {
      if (!alive.expired()) onNodeState(i, up);
    });
    slot->redis->setMessageListener(
        [this, i, alive = std::weak_ptr<char>(alive_)](std::string_view channel, std::string_view) {
          if (!alive.expired()) onMessage(i, channel);
        });
    nodes_.push_back(std::move(slot));
  }
  metrics_.backend_ready.Set(0);
}

RedlockBackend::~RedlockBackend() = default;

void RedlockBackend::start() {
  if (started_ || shutting_down_) return;
  started_ = true;
  for (auto& n : nodes_) n->redis->start();
}

int RedlockBackend::quorumSize() const { return quorum::majority(static_cast<int>(nodes_.size())); }

quorum::NodeRestartState RedlockBackend::currentRestartState(size_t i) const {
  const NodeSlot& n = *nodes_[i];
  const RedisServerInfo& info = n.redis->serverInfo();
  if (!n.redis->up() || info.run_id.empty() || info.run_id == n.restart.run_id) return n.restart;
  // The node is up with a new run_id but its (posted) state notification has not reached us yet:
  // judge it by what it reports now, never by the previous process' record.
  quorum::NodeRestartState s = n.restart;
  quorum::noteNodeUp(s, info.run_id, info.uptime_ms, info.learned_at_ms);
  return s;
}

bool RedlockBackend::nodeVoting(size_t i) const {
  const NodeSlot& n = *nodes_[i];
  if (!n.redis->up()) return false;
  if (!config_.redlock.delayed_restart) return true;
  const quorum::NodeRestartState state = currentRestartState(i);
  if (!n.persistent_run_id.empty() && n.persistent_run_id == state.run_id) return true;
  return quorum::mayVote(state, scheduler_.nowMs(), max_ttl_ms_);
}

int RedlockBackend::votingUpCount() const {
  int count = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) count += nodeVoting(i) ? 1 : 0;
  return count;
}

void RedlockBackend::updateReady() {
  const bool ready = !shutting_down_ && !nodes_.empty() && votingUpCount() >= quorumSize();
  metrics_.backend_ready.Set(ready ? 1 : 0);
  // Runs from node state notifications and timers (never inside a caller's call).
  if (ready && !std::exchange(ready_, true) && ready_listener_) ready_listener_();
  if (!ready) ready_ = false;
}

void RedlockBackend::onNodeState(size_t i, bool up) {
  NodeSlot& n = *nodes_[i];
  n.voting_timer.reset();
  if (up) {
    const RedisServerInfo& info = n.redis->serverInfo();
    quorum::noteNodeUp(n.restart, info.run_id, info.uptime_ms, info.learned_at_ms);
    if (config_.redlock.delayed_restart) checkPersistence(i);
  } else {
    quorum::noteNodeDown(n.restart, scheduler_.nowMs());
    ++n.persistence_check;  // an answer still on its way belongs to the lost connection
  }
  updateReady();
}

void RedlockBackend::checkPersistence(size_t i) {
  NodeSlot& n = *nodes_[i];
  const uint64_t check = ++n.persistence_check;
  // One pattern, so that Redis < 7 (one parameter per CONFIG GET) answers it too.
  n.redis->command({"CONFIG", "GET", "append*"}, config_.command_timeout_ms,
                   [this, i, check, alive = std::weak_ptr<char>(alive_)](StatusOr<RedisValue> r) {
                     if (alive.expired() || shutting_down_) return;
                     NodeSlot& node = *nodes_[i];
                     if (check != node.persistence_check) return;
                     std::vector<std::string> config;
                     if (r.isOk() && r->type == RedisValue::Type::kArray) {
                       for (const RedisValue& e : r->elements) config.push_back(e.str);
                     } else {
                       // CONFIG refused by an ACL, renamed away, or no answer: assume the worst.
                       SL_LOG(kInfo, "redlock.persistence_unknown", {"node", node.address},
                              {"error", replyError(r)});
                     }
                     if (quorum::persistsEveryWrite(config)) {
                       node.persistent_run_id = node.restart.run_id;
                     } else {
                       node.persistent_run_id.clear();
                     }
                     applyDelayedRestart(i);
                   });
}

void RedlockBackend::applyDelayedRestart(size_t i) {
  NodeSlot& n = *nodes_[i];
  const int64_t now = scheduler_.nowMs();
  const int64_t votes_from = quorum::votingFromMs(n.restart, max_ttl_ms_);
  if (now < votes_from && n.persistent_run_id == n.restart.run_id) {
    if (std::exchange(n.persistent_logged_run_id, n.restart.run_id) != n.restart.run_id) {
      SL_LOG(kInfo, "redlock.node_voting", {"node", n.address}, {"run_id", n.restart.run_id},
             {"reason", "persists every write (appendonly yes, appendfsync always): no delay"});
    }
  } else if (now < votes_from) {
    if (std::exchange(n.not_voting_logged_run_id, n.restart.run_id) != n.restart.run_id) {
      SL_LOG(kWarn, "redlock.node_not_voting", {"node", n.address}, {"run_id", n.restart.run_id},
             {"reason", quorum::notVotingReason(n.restart, now, max_ttl_ms_)},
             {"votes_in_ms", static_cast<long long>(votes_from - now)});
    }
    n.voting_timer.start(scheduler_, votes_from - now, [this, i] {
      nodes_[i]->voting_timer.markFired();
      SL_LOG(kInfo, "redlock.node_voting", {"node", nodes_[i]->address},
             {"reason", "delayed restart over"});
      updateReady();
    });
  }
  updateReady();
}

// ---------------------------------------------------------------------------------------------
// Acquire

void RedlockBackend::acquire(std::string_view name, std::string_view owner, int64_t ttl_ms,
                             AcquireCallback cb) {
  beginOp();
  if (shutting_down_) {
    deliver([cb = std::move(cb)] { cb(cancelled("backend is shutting down")); });
    return;
  }
  const double df = config_.redlock.drift_factor;
  if (nodes_.empty() || quorum::validityMs(ttl_ms, 0, df) <= 0) {
    Status s = nodes_.empty()
                   ? unavailable("redlock: no nodes configured")
                   : invalidArgument("ttl_ms " + std::to_string(ttl_ms) +
                                     " is too small for redlock: it must exceed the "
                                     "clock drift allowance of " +
                                     std::to_string(quorum::driftMs(ttl_ms, df)) + " ms");
    deliver([cb = std::move(cb), s = std::move(s)] { cb(s); });
    return;
  }
  auto op = std::make_shared<AcquireOp>();
  const size_t n = nodes_.size();
  op->name = name;
  op->owner = owner;
  op->ttl_ms = ttl_ms;
  op->cb = std::move(cb);
  op->start_us = scheduler_.nowUs();
  op->votes.assign(n, Vote::kPending);
  op->tokens.assign(n, 0);
  op->pttls.assign(n, -1);
  op->errors.assign(n, "");
  for (size_t i = 0; i < n; ++i) {
    op->voting.push_back(nodeVoting(i));
    if (!op->voting[i]) op->errors[i] = nodes_[i]->redis->up() ? "not voting (restarted)" : "";
  }
  const std::string key = lockKey(config_.key_prefix, op->name);
  const std::string counter = tokenKey(config_.key_prefix, op->name);
  for (size_t i = 0; i < n; ++i) {
    // Non-voting nodes get the command too, so their state converges while they wait.
    nodes_[i]->redis->runScript(
        ScriptId::kAcquire, {key, counter}, {op->owner, std::to_string(ttl_ms), counter_ttl_ms_},
        config_.redlock.node_timeout_ms, NodeOp::kAcquire,
        [this, op, i](StatusOr<RedisValue> r) { onAcquireReply(op, i, std::move(r)); });
  }
  evaluateAcquire(op);  // enough nodes may be unable to vote to decide right away
}

void RedlockBackend::onAcquireReply(const std::shared_ptr<AcquireOp>& op, size_t i,
                                    StatusOr<RedisValue> r) {
  StatusOr<AcquireReply> d = decodeAcquire(r, nodes_[i]->address);
  if (!d.isOk()) {
    op->votes[i] = Vote::kFailed;
    op->errors[i] = d.status().toString();
  } else if (d->granted) {
    op->votes[i] = Vote::kFor;
    op->tokens[i] = d->token;
  } else {
    op->votes[i] = Vote::kBusy;
    op->pttls[i] = d->holder_ttl_ms;
  }
  if (op->phase == AcquireOp::Phase::kVote) evaluateAcquire(op);
}

void RedlockBackend::evaluateAcquire(const std::shared_ptr<AcquireOp>& op) {
  int votes_for = 0;
  int against = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!op->voting[i]) {
      ++against;  // its answer cannot count, whatever it is
    } else if (op->votes[i] == Vote::kFor) {
      ++votes_for;
    } else if (op->votes[i] != Vote::kPending) {
      ++against;
    }
  }
  switch (quorum::decide(static_cast<int>(nodes_.size()), votes_for, against)) {
    case quorum::Outcome::kWon:
      startTokenSync(op);
      break;
    case quorum::Outcome::kLost:
      startAcquireCleanup(op, Status::ok());
      break;
    case quorum::Outcome::kUndecided:
      break;
  }
}

void RedlockBackend::startTokenSync(const std::shared_ptr<AcquireOp>& op) {
  op->phase = AcquireOp::Phase::kSync;
  std::vector<uint64_t> granting_tokens;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    op->granting.push_back(op->voting[i] && op->votes[i] == Vote::kFor);
    if (op->granting[i]) granting_tokens.push_back(op->tokens[i]);
  }
  op->token = quorum::fencingToken(granting_tokens);
  const std::string counter = tokenKey(config_.key_prefix, op->name);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (op->granting[i]) ++op->sync_needed;
    if (op->granting[i] && op->tokens[i] == op->token) {
      ++op->sync_acks;  // its counter already equals the token
      continue;
    }
    // Sent to the other nodes too (best effort, not waited for): raising a counter never hurts,
    // and a lagging one is what a later majority could otherwise hand out a smaller token from.
    nodes_[i]->redis->runScript(
        ScriptId::kTokenSync, {counter}, {std::to_string(op->token), counter_ttl_ms_},
        config_.redlock.node_timeout_ms, NodeOp::kOther,
        [this, op, i, alive = std::weak_ptr<char>(alive_)](StatusOr<RedisValue> r) {
          if (alive.expired() || op->phase != AcquireOp::Phase::kSync || !op->granting[i]) return;
          if (r.isOk() && isInt(*r)) {
            ++op->sync_acks;
          } else {
            ++op->sync_failures;
            op->errors[i] = "token sync: " + replyError(r);
          }
          evaluateTokenSync(op);
        });
  }
  evaluateTokenSync(op);
}

void RedlockBackend::evaluateTokenSync(const std::shared_ptr<AcquireOp>& op) {
  // Every granting node must record the token, not just some majority: the next grant's majority
  // is only sure to intersect *this* granting majority, and the node they share must already
  // count from the token, or the next grant could hand out a smaller one.
  if (op->sync_failures > 0) {
    startAcquireCleanup(op, unavailable("redlock: granted but the fencing token could not be "
                                        "recorded on every granting node: " +
                                        nodeErrors(op->errors)));
    return;
  }
  if (op->sync_acks < op->sync_needed) return;
  const int64_t elapsed_ms = (scheduler_.nowUs() - op->start_us + 999) / 1000;
  const int64_t validity = quorum::validityMs(op->ttl_ms, elapsed_ms, config_.redlock.drift_factor);
  if (validity <= 0) {
    startAcquireCleanup(
        op, deadlineExceeded("redlock: the vote took " + std::to_string(elapsed_ms) +
                             " ms, leaving no validity of the " + std::to_string(op->ttl_ms) +
                             " ms TTL"));
    return;
  }
  op->phase = AcquireOp::Phase::kDone;
  metrics_.redlock_validity_seconds.Observe(static_cast<double>(validity) / 1000.0);
  AcquireReply reply;
  reply.granted = true;
  reply.token = op->token;
  reply.validity_ms = validity;
  deliver([op, reply] { op->cb(reply); });
}

void RedlockBackend::startAcquireCleanup(const std::shared_ptr<AcquireOp>& op, Status error) {
  op->phase = AcquireOp::Phase::kCleanup;
  op->error = std::move(error);
  op->cleanup_pending = nodes_.size();
  // Every node, also those that have not answered: commands on one connection run in order, so
  // a node still working on our acquire deletes the key right after setting it.
  releaseOnAll(op->name, op->owner, [this, op](size_t, StatusOr<RedisValue>) {
    if (--op->cleanup_pending == 0) finishAcquireLoss(op);
  });
}

void RedlockBackend::finishAcquireLoss(const std::shared_ptr<AcquireOp>& op) {
  op->phase = AcquireOp::Phase::kDone;
  if (!op->error.isOk()) {
    metrics_.redlock_quorum_failures.Increment();
    if (auto suppressed = acquire_failed_log_.admit(scheduler_.nowMs(),
                                                    outageState(op->error.code(), op->errors))) {
      SL_LOG(
          kWarn, "redlock.acquire_failed", {"name", op->name}, {"error", op->error.toString()},
          {"suppressed", static_cast<unsigned long long>(*suppressed)},
          {"suppressed_window_s", static_cast<long long>(acquire_failed_log_.windowMs() / 1000)});
    }
    deliver([op] { op->cb(op->error); });
    return;
  }
  int votes_for = 0;
  int busy = 0;
  int failed = 0;
  std::vector<int64_t> busy_pttls;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (op->voting[i] && op->votes[i] == Vote::kFor) {
      ++votes_for;
    } else if (op->voting[i] && op->votes[i] == Vote::kBusy) {
      ++busy;
      busy_pttls.push_back(op->pttls[i]);
    } else {
      ++failed;
      if (op->votes[i] == Vote::kPending && op->errors[i].empty()) op->errors[i] = "no answer";
    }
  }
  const int n = static_cast<int>(nodes_.size());
  if (quorum::classifyLoss(n, votes_for, busy, failed) == quorum::LossKind::kNoQuorum) {
    metrics_.redlock_quorum_failures.Increment();
    Status s = unavailable("redlock: only " + std::to_string(votes_for + busy) + " of " +
                           std::to_string(n) + " nodes voted, " + std::to_string(quorumSize()) +
                           " needed: " + nodeErrors(op->errors));
    if (auto suppressed =
            no_quorum_log_.admit(scheduler_.nowMs(), outageState(s.code(), op->errors))) {
      SL_LOG(kWarn, "redlock.no_quorum", {"name", op->name}, {"error", s.message()},
             {"suppressed", static_cast<unsigned long long>(*suppressed)},
             {"suppressed_window_s", static_cast<long long>(no_quorum_log_.windowMs() / 1000)});
    }
    deliver([op, s = std::move(s)] { op->cb(s); });
    return;
  }
  AcquireReply reply;
  reply.granted = false;
  reply.holder_ttl_ms = quorum::holderTtlMs(n, votes_for, std::move(busy_pttls));
  deliver([op, reply] { op->cb(reply); });
}

// ---------------------------------------------------------------------------------------------
// Release (also the cleanup of failed acquires and lost extends)

void RedlockBackend::releaseOnAll(const std::string& name, const std::string& owner,
                                  std::function<void(size_t, StatusOr<RedisValue>)> each) {
  const std::string key = lockKey(config_.key_prefix, name);
  const std::string channel = releaseChannel(config_.key_prefix, name);
  runOnAll(ScriptId::kRelease, {key}, {owner, channel, name}, NodeOp::kRelease, std::move(each));
}

void RedlockBackend::runOnAll(ScriptId script, std::initializer_list<std::string_view> keys,
                              std::initializer_list<std::string_view> args, NodeOp op,
                              std::function<void(size_t, StatusOr<RedisValue>)> each) {
  auto shared_each =
      std::make_shared<std::function<void(size_t, StatusOr<RedisValue>)>>(std::move(each));
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (shutting_down_) {
      // No new commands once the nodes are closing; answer for them on a later turn.
      scheduler_.post([shared_each, i, alive = std::weak_ptr<char>(alive_)] {
        if (!alive.expired()) (*shared_each)(i, cancelled("backend is shutting down"));
      });
      continue;
    }
    nodes_[i]->redis->runScript(
        static_cast<size_t>(script), keys, args, config_.redlock.node_timeout_ms, op,
        [shared_each, i](StatusOr<RedisValue> r) { (*shared_each)(i, std::move(r)); });
  }
}

void RedlockBackend::releaseAndGrant(std::string_view, std::string_view, std::string_view, int64_t,
                                     HandOffCallback cb) {
  deliver([cb = std::move(cb)] {
    cb(Status(StatusCode::kFailedPrecondition, "redlock cannot hand a lock on in one step"));
  });
}

void RedlockBackend::release(std::string_view name, std::string_view owner, OwnerCheckCallback cb) {
  beginOp();
  if (shutting_down_ || nodes_.empty()) {
    deliver([cb = std::move(cb), down = shutting_down_] {
      cb(down ? cancelled("backend is shutting down") : unavailable("redlock: no nodes"));
    });
    return;
  }
  auto op = std::make_shared<ReleaseOp>();
  const size_t n = nodes_.size();
  op->cb = std::move(cb);
  op->pending = n;
  op->votes.assign(n, Vote::kPending);
  op->errors.assign(n, "");
  for (size_t i = 0; i < n; ++i) op->voting.push_back(nodeVoting(i));
  releaseOnAll(std::string(name), std::string(owner), [this, op](size_t i, StatusOr<RedisValue> r) {
    StatusOr<OwnerCheck> d = decodeRelease(r, nodes_[i]->address);
    if (!d.isOk()) {
      op->votes[i] = Vote::kFailed;
      op->errors[i] = d.status().toString();
    } else {
      op->votes[i] = voteOf(*d);
    }
    if (--op->pending != 0) return;
    int released = 0;
    int answered = 0;
    int not_owner = 0;
    for (size_t j = 0; j < nodes_.size(); ++j) {
      // Any node that deleted our key counts, voting or not: the key is gone there.
      if (op->votes[j] == Vote::kFor) ++released;
      if (!op->voting[j]) continue;
      if (op->votes[j] != Vote::kFailed) ++answered;
      if (op->votes[j] == Vote::kNotOwner) ++not_owner;
    }
    StatusOr<OwnerCheck> result = OwnerCheck::kNotHeld;
    if (released > 0) {
      result = OwnerCheck::kOk;
    } else if (answered < quorumSize()) {
      result = unavailable("redlock: release answered by " + std::to_string(answered) + " of " +
                           std::to_string(nodes_.size()) + " nodes: " + nodeErrors(op->errors));
    } else if (not_owner >= quorumSize()) {
      result = OwnerCheck::kNotOwner;
    }
    deliver([op, result = std::move(result)] { op->cb(result); });
  });
}

// ---------------------------------------------------------------------------------------------
// Extend

void RedlockBackend::extend(std::string_view name, std::string_view owner, int64_t ttl_ms,
                            ExtendCallback cb) {
  beginOp();
  if (shutting_down_ || nodes_.empty()) {
    deliver([cb = std::move(cb), down = shutting_down_] {
      cb(down ? cancelled("backend is shutting down") : unavailable("redlock: no nodes"));
    });
    return;
  }
  const double df = config_.redlock.drift_factor;
  if (quorum::validityMs(ttl_ms, 0, df) <= 0) {
    deliver([cb = std::move(cb), ttl_ms, df] {
      cb(invalidArgument("ttl_ms " + std::to_string(ttl_ms) +
                         " is too small for redlock: it must exceed the clock drift allowance of " +
                         std::to_string(quorum::driftMs(ttl_ms, df)) + " ms"));
    });
    return;
  }
  auto op = std::make_shared<ExtendOp>();
  const size_t n = nodes_.size();
  op->name = name;
  op->owner = owner;
  op->ttl_ms = ttl_ms;
  op->cb = std::move(cb);
  op->start_us = scheduler_.nowUs();
  op->pending = n;
  op->votes.assign(n, Vote::kPending);
  op->errors.assign(n, "");
  for (size_t i = 0; i < n; ++i) {
    op->voting.push_back(nodeVoting(i));
    if (!op->voting[i] && nodes_[i]->redis->up()) op->errors[i] = "not voting (restarted)";
  }
  const std::string key = lockKey(config_.key_prefix, op->name);
  for (size_t i = 0; i < n; ++i) {
    nodes_[i]->redis->runScript(
        ScriptId::kExtend, {key}, {op->owner, std::to_string(ttl_ms)},
        config_.redlock.node_timeout_ms, NodeOp::kExtend,
        [this, op, i](StatusOr<RedisValue> r) { onExtendReply(op, i, std::move(r)); });
  }
}

void RedlockBackend::onExtendReply(const std::shared_ptr<ExtendOp>& op, size_t i,
                                   StatusOr<RedisValue> r) {
  StatusOr<ExtendReply> d = decodeExtend(r, nodes_[i]->address);
  if (!d.isOk()) {
    op->votes[i] = Vote::kFailed;
    op->errors[i] = d.status().toString();
  } else {
    op->votes[i] = voteOf(d->result);
  }
  --op->pending;
  if (op->done) return;
  if (!op->decided) {
    int votes_for = 0;
    int against = 0;
    for (size_t j = 0; j < nodes_.size(); ++j) {
      if (!op->voting[j]) {
        ++against;
      } else if (op->votes[j] == Vote::kFor) {
        ++votes_for;
      } else if (op->votes[j] != Vote::kPending) {
        ++against;
      }
    }
    switch (quorum::decide(static_cast<int>(nodes_.size()), votes_for, against)) {
      case quorum::Outcome::kUndecided:
        return;
      case quorum::Outcome::kWon: {
        op->decided = true;
        op->done = true;
        const int64_t elapsed_ms = (scheduler_.nowUs() - op->start_us + 999) / 1000;
        const int64_t validity =
            quorum::validityMs(op->ttl_ms, elapsed_ms, config_.redlock.drift_factor);
        if (validity <= 0) {
          // Nobody may rely on keys that were extended too late: roll them back (release on
          // every node) rather than leave a lease that blocks others and that its holder was
          // told it does not have.
          releaseOnAll(
              op->name, op->owner,
              [this, op, elapsed_ms, pending = std::make_shared<size_t>(nodes_.size())](
                  size_t, StatusOr<RedisValue>) {
                if (--*pending != 0) return;
                deliver([op, elapsed_ms] {
                  op->cb(deadlineExceeded("redlock: extend took " + std::to_string(elapsed_ms) +
                                          " ms, leaving no validity; the lease was released"));
                });
              });
          return;
        }
        ExtendReply reply;
        reply.result = OwnerCheck::kOk;
        reply.validity_ms = validity;
        deliver([op, reply] { op->cb(reply); });
        return;
      }
      case quorum::Outcome::kLost:
        op->decided = true;
        break;
    }
  }
  // Lost: wait for every node (bounded by the node timeout) to tell an outage from a lost lease.
  if (op->pending == 0) finishExtendLoss(op);
}

void RedlockBackend::finishExtendLoss(const std::shared_ptr<ExtendOp>& op) {
  op->done = true;
  int answered = 0;
  int not_owner = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!op->voting[i]) continue;
    if (op->votes[i] != Vote::kFailed && op->votes[i] != Vote::kPending) ++answered;
    if (op->votes[i] == Vote::kNotOwner) ++not_owner;
  }
  if (answered < quorumSize()) {
    // Outage: we cannot tell whether the lease survives; leave it alone so a retry can still
    // extend it within its previous validity.
    metrics_.redlock_quorum_failures.Increment();
    Status s = unavailable("redlock: extend answered by " + std::to_string(answered) + " of " +
                           std::to_string(nodes_.size()) + " nodes, " +
                           std::to_string(quorumSize()) + " needed: " + nodeErrors(op->errors));
    deliver([op, s = std::move(s)] { op->cb(s); });
    return;
  }
  // The lease is lost: drop what is left of it so it does not block others until it expires.
  const OwnerCheck result =
      not_owner >= quorumSize() ? OwnerCheck::kNotOwner : OwnerCheck::kNotHeld;
  auto pending = std::make_shared<size_t>(nodes_.size());
  releaseOnAll(op->name, op->owner, [this, op, pending, result](size_t, StatusOr<RedisValue>) {
    if (--*pending != 0) return;
    ExtendReply reply;
    reply.result = result;
    deliver([op, reply] { op->cb(reply); });
  });
}

// ---------------------------------------------------------------------------------------------
// Inspect

// Deletes the key on every node it can reach, whoever holds it. Freed when at least one node
// deleted it and a quorum of voting nodes answered (the others may still hold it, but fewer than
// a majority); with fewer answers the operator gets 503 and retries: the lock may still be held.
void RedlockBackend::forceRelease(std::string_view name, ForceReleaseCallback cb) {
  beginOp();
  if (shutting_down_ || nodes_.empty()) {
    deliver([cb = std::move(cb), down = shutting_down_] {
      cb(down ? cancelled("backend is shutting down") : unavailable("redlock: no nodes"));
    });
    return;
  }
  struct ForceOp {
    ForceReleaseCallback cb;
    size_t pending = 0;
    std::vector<bool> voting;  // per node, when the call was sent
    int answered = 0;          // voting nodes
    ForcedRelease result;
    std::vector<std::string> errors;
  };
  auto op = std::make_shared<ForceOp>();
  op->cb = std::move(cb);
  op->pending = nodes_.size();
  op->errors.assign(nodes_.size(), "");
  const std::string key = lockKey(config_.key_prefix, name);
  const std::string counter = tokenKey(config_.key_prefix, name);
  const std::string channel = releaseChannel(config_.key_prefix, name);
  for (size_t i = 0; i < nodes_.size(); ++i) op->voting.push_back(nodeVoting(i));
  runOnAll(ScriptId::kForceRelease, {key, counter}, {channel, name}, NodeOp::kRelease,
           [this, op](size_t i, StatusOr<RedisValue> r) {
             StatusOr<ForcedRelease> d = decodeForceRelease(r, nodes_[i]->address);
             if (d.isOk()) {
               if (op->voting[i]) ++op->answered;
               op->result.released = op->result.released || d->released;
               op->result.token = std::max(op->result.token, d->token);
             } else {
               op->errors[i] = d.status().toString();
             }
             if (--op->pending != 0) return;
             StatusOr<ForcedRelease> result = op->result;
             if (op->answered < quorumSize()) {
               result = unavailable(
                   "redlock: force release answered by " + std::to_string(op->answered) + " of " +
                   std::to_string(nodes_.size()) +
                   " nodes (the lock may still be held): " + nodeErrors(op->errors));
             }
             deliver([op, result = std::move(result)] { op->cb(result); });
           });
}

void RedlockBackend::inspect(std::string_view name, InspectCallback cb) {
  beginOp();
  if (shutting_down_ || nodes_.empty()) {
    deliver([cb = std::move(cb), down = shutting_down_] {
      cb(down ? cancelled("backend is shutting down") : unavailable("redlock: no nodes"));
    });
    return;
  }
  auto op = std::make_shared<InspectOp>();
  const size_t n = nodes_.size();
  op->cb = std::move(cb);
  op->pending = n;
  op->answered.assign(n, false);
  op->held.assign(n, false);
  op->pttls.assign(n, -2);
  op->tokens.assign(n, 0);
  op->errors.assign(n, "");
  for (size_t i = 0; i < n; ++i) op->voting.push_back(nodeVoting(i));
  const std::string key = lockKey(config_.key_prefix, name);
  const std::string counter = tokenKey(config_.key_prefix, name);
  for (size_t i = 0; i < n; ++i) {
    nodes_[i]->redis->runScript(
        ScriptId::kInspect, {key, counter}, {}, config_.redlock.node_timeout_ms, NodeOp::kInspect,
        [this, op, i](StatusOr<RedisValue> r) {
          StatusOr<LockState> d = decodeInspect(r, nodes_[i]->address);
          if (d.isOk()) {
            op->answered[i] = true;
            op->held[i] = d->held;
            op->pttls[i] = d->ttl_ms;
            op->tokens[i] = d->token;
          } else {
            op->errors[i] = d.status().toString();
          }
          if (--op->pending != 0) return;
          int answered = 0;
          std::vector<int64_t> held_pttls;
          uint64_t token = 0;
          for (size_t j = 0; j < nodes_.size(); ++j) {
            if (!op->answered[j]) continue;
            token = std::max(token, op->tokens[j]);  // a counter is data, voting or not
            if (!op->voting[j]) continue;
            ++answered;
            if (op->held[j]) held_pttls.push_back(op->pttls[j]);
          }
          if (answered < quorumSize()) {
            Status s =
                unavailable("redlock: inspect answered by " + std::to_string(answered) + " of " +
                            std::to_string(nodes_.size()) + " nodes: " + nodeErrors(op->errors));
            deliver([op, s = std::move(s)] { op->cb(s); });
            return;
          }
          LockState state;
          const int64_t ttl = quorum::heldTtlMs(static_cast<int>(nodes_.size()), held_pttls);
          state.held = ttl >= 0;
          state.ttl_ms = state.held ? ttl : 0;
          state.token = token;
          deliver([op, state] { op->cb(state); });
        });
  }
}

// ---------------------------------------------------------------------------------------------
// Wake-ups

void RedlockBackend::watchReleases(std::string_view name) {
  auto it = watches_.find(name);
  if (it != watches_.end()) {
    ++it->second;
    return;
  }
  watches_.emplace(std::string(name), 1);
  if (shutting_down_) return;
  const std::string channel = releaseChannel(config_.key_prefix, name);
  for (auto& n : nodes_) n->redis->subscribe(channel);
}

void RedlockBackend::unwatchReleases(std::string_view name) {
  auto it = watches_.find(name);
  if (it == watches_.end()) return;
  if (--it->second > 0) return;
  watches_.erase(it);
  wakes_.erase(std::string(name));
  if (shutting_down_) return;
  const std::string channel = releaseChannel(config_.key_prefix, name);
  for (auto& n : nodes_) n->redis->unsubscribe(channel);
}

void RedlockBackend::onMessage(size_t i, std::string_view channel) {
  std::string name;
  if (!lockNameFromChannel(config_.key_prefix, channel, &name)) return;
  if (watches_.find(name) == watches_.end()) return;  // a late message after unwatch
  const int64_t now_us = scheduler_.nowUs();
  const int64_t settle_ms = std::max<int64_t>(config_.redlock.node_timeout_ms, 1);
  auto it = wakes_.find(name);
  if (it != wakes_.end() && now_us - it->second->first_us >= 2 * settle_ms * 1000) {
    wakes_.erase(it);
    it = wakes_.end();
  }
  if (it == wakes_.end()) {
    auto w = std::make_unique<WakeState>();
    w->first_us = now_us;
    // Fires after settle_ms if a majority never publishes, then forgets the name after another
    // settle_ms so that the next release wakes again.
    w->timer.start(scheduler_, settle_ms, [this, name, settle_ms] {
      auto found = wakes_.find(name);
      if (found == wakes_.end()) return;
      found->second->timer.markFired();
      if (!found->second->fired) fireWake(name);
      found = wakes_.find(name);  // the listener may have unwatched it
      if (found == wakes_.end()) return;
      found->second->timer.start(scheduler_, settle_ms, [this, name] {
        auto f = wakes_.find(name);
        if (f == wakes_.end()) return;
        f->second->timer.markFired();
        wakes_.erase(f);
      });
    });
    it = wakes_.emplace(name, std::move(w)).first;
  }
  WakeState& w = *it->second;
  w.nodes.insert(i);
  if (!w.fired && static_cast<int>(w.nodes.size()) >= quorumSize()) fireWake(name);
}

void RedlockBackend::fireWake(const std::string& name) {
  auto it = wakes_.find(name);
  if (it != wakes_.end()) it->second->fired = true;
  if (listener_) {
    const std::string copy = name;  // the listener may unwatch and erase our state
    listener_(copy);
  }
}

// ---------------------------------------------------------------------------------------------
// Health, shutdown, helpers

BackendHealth RedlockBackend::health() const {
  BackendHealth h;
  const int64_t now = scheduler_.nowMs();
  std::string down;
  std::string not_voting;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const NodeSlot& n = *nodes_[i];
    NodeHealth nh;
    nh.address = n.address;
    nh.up = n.redis->up();
    nh.voting = nodeVoting(i);
    if (!nh.up) {
      nh.reason = n.redis->downReason().empty() ? "down" : n.redis->downReason();
      down += (down.empty() ? "" : ", ") + n.address + " (" + nh.reason + ")";
    } else if (!nh.voting) {
      nh.reason =
          quorum::notVotingReason(currentRestartState(i), now, max_ttl_ms_) + " (delayed restart)";
      not_voting += (not_voting.empty() ? "" : ", ") + n.address + " (" + nh.reason + ")";
    }
    h.nodes.push_back(std::move(nh));
  }
  const int voting = votingUpCount();
  h.ready = !shutting_down_ && !nodes_.empty() && voting >= quorumSize();
  if (shutting_down_) {
    h.reason = "shutting down";
  } else if (!h.ready) {
    h.reason = "redlock: " + std::to_string(voting) + " of " + std::to_string(nodes_.size()) +
               " nodes up and voting, " + std::to_string(quorumSize()) + " needed";
    if (!down.empty()) h.reason += "; down: " + down;
    if (!not_voting.empty()) h.reason += "; not voting yet: " + not_voting;
  }
  return h;
}

void RedlockBackend::shutdown(std::function<void()> done) {
  if (shutting_down_) {
    // A second call: chain it after the first.
    auto first = std::move(shutdown_done_);
    shutdown_done_ = [first = std::move(first), done = std::move(done)] {
      if (first) first();
      if (done) done();
    };
    maybeFinishShutdown();
    return;
  }
  shutting_down_ = true;
  shutdown_done_ = std::move(done);
  metrics_.backend_ready.Set(0);
  wakes_.clear();
  for (auto& n : nodes_) n->voting_timer.reset();
  nodes_shutting_ = nodes_.size();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    nodes_[i]->redis->shutdown([this, i] {
      nodes_[i]->shut_down = true;
      --nodes_shutting_;
      maybeFinishShutdown();
    });
  }
  maybeFinishShutdown();
}

void RedlockBackend::maybeFinishShutdown() {
  if (!shutting_down_ || nodes_shutting_ != 0 || in_flight_ != 0 || !shutdown_done_) return;
  auto done = std::move(shutdown_done_);
  shutdown_done_ = nullptr;
  // Captures nothing of ours: the owner may destroy the backend inside `done`.
  scheduler_.post([done = std::move(done)] { done(); });
}

void RedlockBackend::deliver(std::function<void()> fn) {
  scheduler_.post([this, fn = std::move(fn), alive = std::weak_ptr<char>(alive_)] {
    if (alive.expired()) return;
    fn();
    --in_flight_;
    maybeFinishShutdown();
  });
}

std::string RedlockBackend::outageState(StatusCode code,
                                        const std::vector<std::string>& errors) const {
  std::string state = std::to_string(static_cast<int>(code)) + ":";
  for (size_t i = 0; i < errors.size() && i < nodes_.size(); ++i) {
    if (!errors[i].empty()) state += nodes_[i]->address + ",";
  }
  return state;
}

std::string RedlockBackend::nodeErrors(const std::vector<std::string>& errors) const {
  std::string out;
  for (size_t i = 0; i < errors.size() && i < nodes_.size(); ++i) {
    if (errors[i].empty()) continue;
    if (!out.empty()) out += "; ";
    out += nodes_[i]->address + ": " + errors[i];
  }
  return out.empty() ? "no details" : out;
}

}  // namespace sidelock::backend
