#include "redis/redlock_backend.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <utility>

#include "common/invariant.h"
#include "common/log.h"
#include "redis/holder_scan.h"
#include "redis/redis_backend.h"
#include "redis/scripts.h"

namespace sidelock::backend {
namespace {

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

// One operation sent to every node: the answers as they come in, and the state of the policy
// that decides what they mean (RedlockBackend::decide).
struct RedlockBackend::QuorumCall {
  Verb verb = Verb::kInspect;
  LockKind kind = LockKind::kMutex;  // a clean-up release frees the same kind of lease
  std::string name;
  std::string owner;
  int64_t ttl_ms = 0;
  ScriptId script = ScriptId::kInspect;
  OutcomeCallback cb;
  int64_t start_us = 0;
  size_t pending = 0;        // nodes that have not answered
  bool decided = false;      // the vote is lost; the policy waits for the remaining answers
  bool done = false;         // the policy answered or started its follow-up: answers are only kept
  std::vector<bool> voting;  // per node, when the call was sent
  std::vector<std::optional<Outcome>> answers;  // per node; nullopt: no answer (yet) or failed
  std::vector<bool> failed;
  std::vector<std::string> errors;
  int out_of_memory = 0;  // nodes that failed at maxmemory (kResourceExhausted)
  // Acquire, once won: the token sync, then the answer (or the cleanup).
  uint64_t token = 0;
  int64_t since_ms = 0;        // elections: the term's start, the latest of the granting nodes'
  std::vector<bool> granting;  // voted for us when the vote was decided
  // Acquire, once lost (or given up): nodes whose clean-up release has not been answered.
  size_t cleanup_pending = 0;
  bool cleaning = false;
  int sync_needed = 0;         // granting nodes
  int sync_acks = 0;           // granting nodes whose counter is known to be >= token
  int sync_failures = 0;       // granting nodes that failed to record it
  bool synced = false;         // the sync is over (answered or cleaning up)
  Status error;                // why a won vote was given up
  // A lock's read (inspect): its script, sent again while the token its holders report settles.
  std::optional<ScriptCall> read_script;
  int rereads = 0;

  bool said(size_t i, OutcomeCode code) const { return answers[i] && answers[i]->code == code; }
  /// Voting nodes that answered `code`.
  int votes(OutcomeCode code) const;
  /// Voting nodes that answered at all.
  int answeredVoting() const;
  /// The vote so far: yes = voting nodes that answered kOk; everything that can no longer be a
  /// yes (non-voting nodes, other answers, failures) is against.
  quorum::Outcome vote() const;
};

// The announcements of one name: one release (grant, proclaim) publishes once on every node that
// carried it out, so the k-th announcement of each node is the same event. Event k fires once a
// majority of nodes published k times, or settle_ms after a node first published it.
struct RedlockBackend::WakeState {
  std::vector<int> published;  // per node: announcements since this state was made
  int fired = 0;               // events fired
  bool settling = false;       // `timer` is the fallback of an event not yet fired
  /// Per event (0-based): its reason (backend::announcement, a constant), as the nodes said.
  std::vector<std::string_view> reasons;
  event::ScopedTimer timer;  // fallback fire, or forgetting the state when quiet

  int latest() const { return *std::max_element(published.begin(), published.end()); }
  /// The reason of events [from, to) fired as one: a force release, else a release, else an
  /// acquire's clean-up (it frees a key, but ends no lease), else the last one's (a grant, a
  /// proclaim).
  std::string_view reasonOf(int from, int to) const {
    std::string_view r = announcement::kReleased;
    bool released = false;
    bool rolled_back = false;
    for (int e = from; e < to && e < static_cast<int>(reasons.size()); ++e) {
      const std::string_view x = reasons[static_cast<size_t>(e)];
      if (x == announcement::kForced) return x;
      if (x == announcement::kRolledBack) {
        rolled_back = true;
      } else if (announcement::freesLock(x)) {
        released = true;
      } else {
        r = x;
      }
    }
    if (released) return announcement::kReleased;
    return rolled_back ? announcement::kRolledBack : r;
  }
  /// Nodes that published event `k` (1-based) or a later one.
  int reached(int k) const {
    return static_cast<int>(
        std::count_if(published.begin(), published.end(), [k](int p) { return p >= k; }));
  }
};

RedlockBackend::RedlockBackend(uv_loop_s* loop, event::Scheduler& scheduler,
                               const config::BackendConfig& config, int64_t max_ttl_ms,
                               metrics::Metrics& metrics)
    : loop_(loop),
      scheduler_(scheduler),
      config_(config),
      max_ttl_ms_(max_ttl_ms),
      scripts_{config.key_prefix, std::to_string(tokenCounterTtlMs(max_ttl_ms)), false, true,
               ScriptContext::TokenFloor::kSecond},
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
    slot->redis->setStateListener(alive_.guarded([this, i](bool up) { onNodeState(i, up); }));
    slot->redis->setMessageListener(
        alive_.guarded([this, i](std::string_view channel, std::string_view payload) {
          onMessage(i, channel, payload);
        }));
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
                   alive_.guarded([this, i, check](StatusOr<RedisValue> r) {
                     if (shutting_down_) return;
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
                   }));
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
      SL_LOG(kInfo, "redlock.node_voting", {"node", nodes_[i]->address},
             {"reason", "delayed restart over"});
      updateReady();
    });
  }
  updateReady();
}

// ---------------------------------------------------------------------------------------------
// Operations: one quorum call per operation (fan out, collect, decide, clean up), with a policy
// per verb deciding what the answers mean.

Status RedlockBackend::refusal(const Operation& op) const {
  if (shutting_down_) return cancelled("backend is shutting down");
  if (nodes_.empty()) return unavailable("redlock: no nodes configured");
  if (op.verb == Verb::kHandOff) {
    return Status(StatusCode::kFailedPrecondition, "redlock cannot hand a lock on in one step");
  }
  // Kinds whose count the nodes would keep each on its own (README says why, per kind).
  if (op.kind == LockKind::kSemaphore) {
    return invalidArgument(
        "semaphores are not served by backend type redlock: every node would count permits on "
        "its own, and majorities of different nodes could grant more permits than the limit "
        "(README, Semaphores)");
  }
  if (op.kind == LockKind::kFair) {
    return invalidArgument(
        "fair locks are not served by backend type redlock: every node would keep its own "
        "queue, and nodes that saw waiters arrive in another order would each let a different "
        "waiter in first (README, Fair locks)");
  }
  if (op.verb == Verb::kAcquire && op.reentrant) {
    return invalidArgument(
        "reentrant acquires are not served by backend type redlock: every node would count "
        "the holds on its own, and a node that missed a re-entry would free the lock one "
        "release early (README, Reentrant locks)");
  }
  const double df = config_.redlock.drift_factor;
  if ((op.verb == Verb::kAcquire || op.verb == Verb::kExtend) &&
      quorum::validityMs(op.ttl_ms, 0, df) <= 0) {
    return invalidArgument("ttl_ms " + std::to_string(op.ttl_ms) +
                           " is too small for redlock: it must exceed the clock drift allowance "
                           "of " +
                           std::to_string(quorum::driftMs(op.ttl_ms, df)) + " ms");
  }
  return Status::ok();
}

void RedlockBackend::run(const Operation& op, OutcomeCallback cb) {
  beginOp();
  if (Status refused = refusal(op); !refused.isOk()) {
    deliver([cb = std::move(cb), refused = std::move(refused)] { cb(refused); });
    return;
  }
  StatusOr<ScriptCall> script = scriptCallFor(op, scripts_);
  if (!script.isOk()) {  // a verb no script serves for this kind
    deliver([cb = std::move(cb), why = script.status()] { cb(why); });
    return;
  }
  auto call = std::make_shared<QuorumCall>();
  const size_t n = nodes_.size();
  call->verb = op.verb;
  call->kind = op.kind;
  call->name = op.name;
  call->owner = op.owner;
  call->ttl_ms = op.ttl_ms;
  call->cb = std::move(cb);
  call->start_us = scheduler_.nowUs();
  beginRound(*call);
  const bool votes_on_grant = op.verb == Verb::kAcquire || op.verb == Verb::kExtend;
  for (size_t i = 0; i < n; ++i) {
    if (votes_on_grant && !call->voting[i] && nodes_[i]->redis->up()) {
      call->errors[i] = "not voting (restarted)";
    }
  }
  call->script = script->script;
  if (op.verb == Verb::kInspect && op.kind != LockKind::kElection) {
    // A lock's read may be read again (finishRead): it keeps its script.
    call->read_script = std::move(*script);
    sendRound(call, *call->read_script);
  } else {
    sendRound(call, *script);
  }
  // Enough nodes may be unable to vote to decide an acquire right away.
  if (op.verb == Verb::kAcquire && !call->done) decide(call);
}

void RedlockBackend::beginRound(QuorumCall& call) const {
  const size_t n = nodes_.size();
  call.pending = n;
  call.answers.assign(n, std::nullopt);
  call.failed.assign(n, false);
  call.errors.assign(n, "");
  call.out_of_memory = 0;
  call.voting.resize(n);
  for (size_t i = 0; i < n; ++i) call.voting[i] = nodeVoting(i);
}

void RedlockBackend::sendRound(const std::shared_ptr<QuorumCall>& call, const ScriptCall& script) {
  // Non-voting nodes get the command too, so their state converges while they wait.
  fanOut(script, [this, call](size_t i, StatusOr<RedisValue> r) {
    StatusOr<Outcome> d = decodeOutcome(r, call->script, nodes_[i]->address);
    if (d.isOk()) {
      call->answers[i] = *d;
    } else {
      call->failed[i] = true;
      call->errors[i] = d.status().toString();
      if (d.status().code() == StatusCode::kResourceExhausted) ++call->out_of_memory;
    }
    --call->pending;
    if (call->cleaning) return cleanUpAfterAcquire(call, i);  // it answered after the loss
    if (!call->done) decide(call);
  });
}

bool RedlockBackend::readAgainSoon(const std::shared_ptr<QuorumCall>& call) {
  // The token sync of a grant is one round trip behind its acquire, and is waited for on every
  // granting node whose counter differed before the grant is answered: twice the node budget
  // covers it (and a read that started a little before the vote was decided), up to 1 s. Rounds
  // back off (node_timeout_ms / 10, 1-10 ms, doubling): a lease whose holders never agree (a
  // node's sync failed, a grant by an older sidecar) costs a handful of rounds, not a stream.
  const int64_t budget_us = std::min<int64_t>(2 * config_.redlock.node_timeout_ms, 1000) * 1000;
  const int64_t left_us = budget_us - (scheduler_.nowUs() - call->start_us);
  if (shutting_down_ || !call->read_script || left_us <= 0) return false;
  const int64_t first_ms = std::clamp<int64_t>(config_.redlock.node_timeout_ms / 10, 1, 10);
  const int64_t delay_ms =
      std::clamp<int64_t>(first_ms << std::min(call->rereads, 10), 1, (left_us + 999) / 1000);
  ++call->rereads;
  scheduler_.runAfter(delay_ms, alive_.guarded([this, call] {
    // Shutting down: this round's answers stand (the next round's would all be cancelled).
    if (shutting_down_) return finishRead(call);
    beginRound(*call);
    sendRound(call, *call->read_script);
  }));
  return true;
}

int RedlockBackend::QuorumCall::votes(OutcomeCode code) const {
  int count = 0;
  for (size_t i = 0; i < answers.size(); ++i) count += voting[i] && said(i, code) ? 1 : 0;
  return count;
}

int RedlockBackend::QuorumCall::answeredVoting() const {
  int count = 0;
  for (size_t i = 0; i < answers.size(); ++i) count += voting[i] && answers[i] ? 1 : 0;
  return count;
}

quorum::Outcome RedlockBackend::QuorumCall::vote() const {
  int votes_for = 0;
  int against = 0;
  for (size_t i = 0; i < answers.size(); ++i) {
    if (!voting[i]) {
      ++against;  // its answer cannot count, whatever it is
    } else if (said(i, OutcomeCode::kOk)) {
      ++votes_for;
    } else if (answers[i] || failed[i]) {
      ++against;
    }
  }
  return quorum::decide(static_cast<int>(answers.size()), votes_for, against);
}

void RedlockBackend::decide(const std::shared_ptr<QuorumCall>& call) {
  switch (call->verb) {
    case Verb::kAcquire:
      decideAcquire(call);
      return;
    case Verb::kExtend:
      decideExtend(call);
      return;
    case Verb::kRelease:
    case Verb::kWithdraw:  // a writer's marks (fair locks are refused in run())
      if (call->pending == 0) finishRelease(call);
      return;
    case Verb::kInspect:
      if (call->pending != 0) return;
      if (call->kind == LockKind::kElection) return finishLeaderRead(call);
      return finishRead(call);
    case Verb::kForceRelease:
      if (call->pending == 0) finishRead(call);
      return;
    case Verb::kProclaim:  // decided as an extend: owner-checked on a majority
      decideExtend(call);
      return;
    case Verb::kHandOff:  // refused in run()
      return;
  }
}

void RedlockBackend::answer(const std::shared_ptr<QuorumCall>& call, StatusOr<Outcome> result) {
  call->done = true;
  deliver([call, result = std::move(result)]() mutable { call->cb(std::move(result)); });
}

// ---- acquire: vote -> (won) token sync -> answer, or (lost) cleanup on all nodes -> answer.

void RedlockBackend::decideAcquire(const std::shared_ptr<QuorumCall>& call) {
  switch (call->vote()) {
    case quorum::Outcome::kWon:
      call->done = true;
      startTokenSync(call);
      break;
    case quorum::Outcome::kLost:
      call->done = true;
      startAcquireCleanup(call, Status::ok());
      break;
    case quorum::Outcome::kUndecided:
      break;
  }
}

void RedlockBackend::startTokenSync(const std::shared_ptr<QuorumCall>& call) {
  // The vote may have taken the whole validity already (a short TTL, a slow node): given up
  // before the sync, so that a grant nobody gets raises no counter beyond its own INCRs (a free
  // lock would read as its token). call->token stays 0: no sync was sent (its clean-up knows).
  if (!validityLeftOrGiveUp(call)) {
    call->synced = true;
    return;
  }
  std::vector<uint64_t> granting_tokens;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    call->granting.push_back(call->voting[i] && call->said(i, OutcomeCode::kOk));
    if (call->granting[i]) granting_tokens.push_back(call->answers[i]->token);
  }
  call->token = quorum::fencingToken(granting_tokens);
  // An election's term starts when the last granting node granted (each node's campaign wrote
  // its own clock and its own counter into its record: the sync writes the decided ones).
  const bool election = call->kind == LockKind::kElection;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (call->granting[i]) {
      call->since_ms = std::max(call->since_ms, call->answers[i]->leader.since_ms);
    }
  }
  const ScriptCall sync =
      election ? electionSyncCall(call->name, call->owner, call->token, call->since_ms, scripts_)
               : tokenSyncCall(call->name, call->owner, call->token, scripts_);
  const ScriptCall::Views v = sync.views();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (call->granting[i]) ++call->sync_needed;
    // An election's record is rewritten on every granting node, whatever its counter says.
    if (!election && call->granting[i] && call->answers[i]->token == call->token) {
      ++call->sync_acks;  // its counter already equals the token
      continue;
    }
    // Sent to the other nodes too (best effort, not waited for): raising a counter never hurts,
    // and a lagging one is what a later majority could otherwise hand out a smaller token from.
    nodes_[i]->redis->runScriptArgs(
        static_cast<size_t>(sync.script), v.keyArgs(), v.argArgs(), config_.redlock.node_timeout_ms,
        sync.node_op, alive_.guarded([this, call, i, id = sync.script](StatusOr<RedisValue> r) {
          if (call->synced || !call->granting[i]) return;
          StatusOr<Outcome> d = decodeOutcome(r, id, nodes_[i]->address);
          if (d.isOk()) {
            ++call->sync_acks;
          } else {
            ++call->sync_failures;
            call->errors[i] = "token sync: " + d.status().toString();
          }
          evaluateTokenSync(call);
        }));
  }
  evaluateTokenSync(call);
}

void RedlockBackend::evaluateTokenSync(const std::shared_ptr<QuorumCall>& call) {
  // Every granting node must record the token, not just some majority: the next grant's majority
  // is only sure to intersect *this* granting majority, and the node they share must already
  // count from the token, or the next grant could hand out a smaller one.
  if (call->sync_failures > 0) {
    call->synced = true;
    startAcquireCleanup(call, unavailable("redlock: granted but the fencing token could not be "
                                          "recorded on every granting node: " +
                                          nodeErrors(call->errors)));
    return;
  }
  if (call->sync_acks < call->sync_needed) return;
  call->synced = true;
  const std::optional<int64_t> validity = validityLeftOrGiveUp(call);
  if (!validity) return;
  metrics_.redlock_validity_seconds.Observe(static_cast<double>(*validity) / 1000.0);
  Outcome granted;
  granted.code = OutcomeCode::kOk;
  granted.token = call->token;
  granted.validity_ms = *validity;
  if (call->kind == LockKind::kElection) granted.leader.since_ms = call->since_ms;
  answer(call, granted);
}

std::optional<int64_t> RedlockBackend::validityLeftOrGiveUp(
    const std::shared_ptr<QuorumCall>& call) {
  const int64_t elapsed_ms = (scheduler_.nowUs() - call->start_us + 999) / 1000;
  const int64_t validity =
      quorum::validityMs(call->ttl_ms, elapsed_ms, config_.redlock.drift_factor);
  if (validity > 0) return validity;
  // After the token sync, the time named includes the sync's round trip.
  const char* took = call->sync_needed > 0 ? "the vote and its token sync took " : "the vote took ";
  startAcquireCleanup(
      call, deadlineExceeded("redlock: " + std::string(took) + std::to_string(elapsed_ms) +
                             " ms, leaving no validity of the " + std::to_string(call->ttl_ms) +
                             " ms TTL"));
  return std::nullopt;
}

void RedlockBackend::startAcquireCleanup(const std::shared_ptr<QuorumCall>& call, Status error) {
  call->error = std::move(error);
  call->cleaning = true;
  call->cleanup_pending = nodes_.size();
  // Each node once it answered; those still working on the attempt when they do (sendRound).
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (call->answers[i] || call->failed[i]) cleanUpAfterAcquire(call, i);
  }
}

void RedlockBackend::cleanUpAfterAcquire(const std::shared_ptr<QuorumCall>& call, size_t i) {
  // Not on a node that refused the attempt (busy): it wrote no lease there, and the key it
  // found may be its owner's live lease (an acquire answered "held by you" leaves that lease
  // alone, as on one Redis; releasing it everywhere took the lease from its holder). Released
  // where the node granted, and where it failed or did not answer in time: it may still run the
  // attempt, and then runs the release after it (one connection runs commands in order).
  if (call->said(i, OutcomeCode::kBusy)) {
    if (--call->cleanup_pending == 0) finishAcquireLoss(call);
    return;
  }
  auto done = [this, call](StatusOr<RedisValue>) {
    if (--call->cleanup_pending == 0) finishAcquireLoss(call);
  };
  if (call->kind != LockKind::kMutex) return releaseOn(*call, i, std::move(done));
  // A mutex attempt's clean-up is a roll-back, not a release (rollback.lua): announced as such
  // (waiters wake, no lease ended), and only the attempt's lease is deleted, told by the tokens
  // it had on this node: its answer, and the token its sync sent (0: none).
  const uint64_t node_token = call->said(i, OutcomeCode::kOk) ? call->answers[i]->token : 0;
  sendTo(i, rollbackCall(call->name, call->owner, node_token, call->token, scripts_),
         std::move(done));
}

void RedlockBackend::finishAcquireLoss(const std::shared_ptr<QuorumCall>& call) {
  if (!call->error.isOk()) {
    metrics_.redlock_quorum_failures.Increment();
    if (auto suppressed = acquire_failed_log_.admit(
            scheduler_.nowMs(), outageState(call->error.code(), call->errors))) {
      SL_LOG(
          kWarn, "redlock.acquire_failed", {"name", call->name}, {"error", call->error.toString()},
          {"suppressed", static_cast<unsigned long long>(*suppressed)},
          {"suppressed_window_s", static_cast<long long>(acquire_failed_log_.windowMs() / 1000)});
    }
    answer(call, call->error);
    return;
  }
  int votes_for = 0;
  int busy = 0;
  int failed = 0;
  std::vector<int64_t> busy_pttls;
  int busy_held_by_you = 0;
  int busy_lock_delay = 0;
  const Outcome* busy_holder = nullptr;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (call->voting[i] && call->said(i, OutcomeCode::kOk)) {
      ++votes_for;
    } else if (call->voting[i] && call->said(i, OutcomeCode::kBusy)) {
      ++busy;
      busy_pttls.push_back(call->answers[i]->holder_ttl_ms);
      if (call->answers[i]->busy_reason == BusyReason::kHeldByYou) ++busy_held_by_you;
      if (call->answers[i]->busy_reason == BusyReason::kLockDelay) ++busy_lock_delay;
      // The 409's holder: a hint for the caller's log, so the first node that names one.
      if (busy_holder == nullptr && !call->answers[i]->holder.empty()) {
        busy_holder = &*call->answers[i];
      }
    } else {
      ++failed;
      if (!call->answers[i] && call->errors[i].empty()) call->errors[i] = "no answer";
    }
  }
  const int n = static_cast<int>(nodes_.size());
  if (quorum::classifyLoss(n, votes_for, busy, failed) == quorum::LossKind::kNoQuorum) {
    metrics_.redlock_quorum_failures.Increment();
    // Every node that failed is out of memory: that is the answer (503 backend_full), not an
    // outage (the nodes are up and answer; they refuse to write).
    Status s(failed > 0 && failed == call->out_of_memory ? StatusCode::kResourceExhausted
                                                         : StatusCode::kUnavailable,
             "redlock: only " + std::to_string(votes_for + busy) + " of " + std::to_string(n) +
                 " nodes voted, " + std::to_string(quorumSize()) +
                 " needed: " + nodeErrors(call->errors));
    if (auto suppressed =
            no_quorum_log_.admit(scheduler_.nowMs(), outageState(s.code(), call->errors))) {
      SL_LOG(kWarn, "redlock.no_quorum", {"name", call->name}, {"error", s.message()},
             {"suppressed", static_cast<unsigned long long>(*suppressed)},
             {"suppressed_window_s", static_cast<long long>(no_quorum_log_.windowMs() / 1000)});
    }
    answer(call, s);
    return;
  }
  Outcome busy_outcome;
  busy_outcome.code = OutcomeCode::kBusy;
  // A queued writer marked on any node withdraws its marks when it leaves.
  for (const auto& a : call->answers) {
    busy_outcome.writer_marked = busy_outcome.writer_marked || (a && a->writer_marked);
  }
  // The caller's own lease only if every node that refused says so (Redlock serves no readers).
  if (busy > 0 && busy_held_by_you == busy) busy_outcome.busy_reason = BusyReason::kHeldByYou;
  // A lock-delay when the nodes in their delay (each node keeps its own delay key) are what kept
  // the majority out: with their votes the attempt would have won. A node still holding the
  // ended lease does not change that: one that granted it late (after the vote) also lets it
  // expire late.
  if (busy_lock_delay > 0 && votes_for + busy_lock_delay >= quorumSize()) {
    busy_outcome.busy_reason = BusyReason::kLockDelay;
  }
  busy_outcome.holder_ttl_ms = quorum::holderTtlMs(n, votes_for, std::move(busy_pttls));
  if (busy_holder != nullptr) {
    busy_outcome.holder = busy_holder->holder;
    busy_outcome.since_ms = busy_holder->since_ms;
  }
  answer(call, busy_outcome);
}

// ---- extend: decided early when won; when lost, every node is waited for (bounded by the node
// timeout) to tell an outage from a lost lease.

void RedlockBackend::decideExtend(const std::shared_ptr<QuorumCall>& call) {
  if (!call->decided) {
    switch (call->vote()) {
      case quorum::Outcome::kUndecided:
        return;
      case quorum::Outcome::kWon:
        call->decided = true;
        call->done = true;
        return call->verb == Verb::kProclaim ? answerProclaimed(call) : answerExtended(call);
      case quorum::Outcome::kLost:
        call->decided = true;
        break;
    }
  }
  if (call->pending == 0) finishExtendLoss(call);
}

void RedlockBackend::answerExtended(const std::shared_ptr<QuorumCall>& call) {
  const int64_t elapsed_ms = (scheduler_.nowUs() - call->start_us + 999) / 1000;
  const int64_t validity =
      quorum::validityMs(call->ttl_ms, elapsed_ms, config_.redlock.drift_factor);
  if (validity <= 0) {
    // Nobody may rely on keys that were extended too late: roll them back (release on
    // every node) rather than leave a lease that blocks others and that its holder was
    // told it does not have.
    releaseOnAll(*call, [this, call, elapsed_ms, pending = std::make_shared<size_t>(nodes_.size())](
                            size_t, StatusOr<RedisValue>) {
      if (--*pending != 0) return;
      answer(call, deadlineExceeded("redlock: extend took " + std::to_string(elapsed_ms) +
                                    " ms, leaving no validity; the lease "
                                    "was released"));
    });
    return;
  }
  Outcome extended;
  extended.code = OutcomeCode::kOk;
  extended.validity_ms = validity;
  answer(call, extended);
}

void RedlockBackend::finishExtendLoss(const std::shared_ptr<QuorumCall>& call) {
  call->done = true;
  const int answered = call->answeredVoting();
  if (answered < quorumSize()) {
    // Outage: we cannot tell whether the lease survives; leave it alone so a retry can still
    // extend it within its previous validity.
    metrics_.redlock_quorum_failures.Increment();
    answer(call, unavailable(std::string("redlock: ") + verbName(call->verb) + " answered by " +
                             std::to_string(answered) + " of " + std::to_string(nodes_.size()) +
                             " nodes, " + std::to_string(quorumSize()) +
                             " needed: " + nodeErrors(call->errors)));
    return;
  }
  Outcome lost;
  lost.code = call->votes(OutcomeCode::kNotOwner) >= quorumSize() ? OutcomeCode::kNotOwner
                                                                  : OutcomeCode::kNotHeld;
  // The lease is lost to its holder (it could not be extended). Its keys on the nodes that did
  // not answer (stalled, down) may still be alive, though, and with the keys this extend renewed
  // still make a majority: the lease stays valid for the rest of the validity its holder was
  // given, and the holder has not been told yet. Releasing what is left now would hand the lock
  // to a waiter elsewhere while the holder still works (seen: granted 40 ms before the holder's
  // `lost`, with 1.9 s of its validity left). Then the keys are left to expire (one TTL at most);
  // only a lease no majority can still hold has its leftovers released at once.
  int may_hold = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    may_hold += !call->answers[i] || call->said(i, OutcomeCode::kOk) ? 1 : 0;
  }
  if (may_hold >= quorumSize()) {
    SL_LOG(kWarn, "redlock.lost_lease_left_to_expire", {"name", call->name},
           {"may_hold", static_cast<long long>(may_hold)}, {"errors", nodeErrors(call->errors)});
    answer(call, lost);
    return;
  }
  // Drop what is left of it so it does not block others until it expires.
  releaseOnAll(*call, [this, call, lost, pending = std::make_shared<size_t>(nodes_.size())](
                          size_t, StatusOr<RedisValue>) {
    if (--*pending == 0) answer(call, lost);
  });
}

// ---- proclaim: owner-checked on every node, decided as an extend (decideExtend): won once a
// majority of voting nodes took the value (the term and TTL are the lease's); lost, every node is
// waited for, to tell an outage (kUnavailable, the lease untouched) from a lost lease (kNotOwner /
// kNotHeld, what is left of it released, as a lost extend).

void RedlockBackend::answerProclaimed(const std::shared_ptr<QuorumCall>& call) {
  Outcome proclaimed;
  proclaimed.code = OutcomeCode::kOk;
  std::vector<int64_t> pttls;
  std::map<uint64_t, int> terms;  // the record's term -> nodes
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!call->voting[i] || !call->said(i, OutcomeCode::kOk)) continue;
    pttls.push_back(call->answers[i]->validity_ms);
    ++terms[call->answers[i]->token];
  }
  // Every node that got the campaign got the token sync after it, on the same connection, so all
  // record the decided term; one whose sync failed still holds its own: the term most say wins
  // (ties: the higher).
  int most = 0;
  for (const auto& [term, count] : terms) {
    if (count >= most) {
      most = count;
      proclaimed.token = term;
    }
  }
  // The lease's TTL at a majority, less the time the vote took and the drift of that TTL.
  const int64_t ttl = quorum::heldTtlMs(static_cast<int>(nodes_.size()), pttls);
  const int64_t elapsed_ms = (scheduler_.nowUs() - call->start_us + 999) / 1000;
  proclaimed.validity_ms =
      std::max<int64_t>(0, quorum::validityMs(ttl, elapsed_ms, config_.redlock.drift_factor));
  proclaimed.holds = 1;
  answer(call, proclaimed);
}

// ---- leader read (inspect of an election): the leader is the lease whose records a majority
// of voting nodes hold with the same term, as the token sync wrote them (election_leader.lua
// answers a digest of the owner id only for a record the sync wrote; before the sync a node's
// record holds its own counter's value, which may be below the decided term, and is not counted:
// nobody leads until the grant is answered). The value is
// the one most of those nodes record (a proclaim answered OK reached a majority of them); a tie,
// only left by a proclaim that failed, goes to the first node in config order. ttl_ms: until
// fewer than a majority hold the lease. Nobody leads: the highest counter seen is the last term.

void RedlockBackend::finishLeaderRead(const std::shared_ptr<QuorumCall>& call) {
  if (const int answered = call->answeredVoting(); answered < quorumSize()) {
    return finishRead(call);  // kUnavailable, worded as for every read
  }
  std::map<std::pair<std::string, uint64_t>, std::vector<size_t>> leases;
  Outcome o;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!call->answers[i]) continue;
    const Outcome& a = *call->answers[i];
    o.token = std::max(o.token, a.token);
    // A record without a lease digest holds its node's own provisional term (no token sync yet).
    if (call->voting[i] && a.ok() && !a.leader.lease.empty()) {
      leases[{a.leader.lease, a.token}].push_back(i);
    }
  }
  for (const auto& [lease, holders] : leases) {
    if (static_cast<int>(holders.size()) < quorumSize()) continue;
    // Two majorities would share a node, which records one lease: this is the only one.
    std::vector<int64_t> pttls;
    std::map<std::string_view, size_t> votes;  // value -> nodes recording it
    const std::string* value = nullptr;
    size_t value_votes = 0;
    o.leader = call->answers[holders.front()]->leader;
    for (size_t i : holders) {
      const Outcome& a = *call->answers[i];
      pttls.push_back(a.validity_ms);
      o.leader.since_ms = std::max(o.leader.since_ms, a.leader.since_ms);
      // Strictly more: of two values recorded as often, the one that got there first in config
      // order.
      if (const size_t count = ++votes[a.leader.value]; count > value_votes) {
        value_votes = count;
        value = &a.leader.value;
      }
    }
    o.leader.value = *value;
    o.code = OutcomeCode::kOk;
    o.token = lease.second;
    o.validity_ms = std::max<int64_t>(0, quorum::heldTtlMs(static_cast<int>(nodes_.size()), pttls));
    break;
  }
  if (!o.ok()) {
    size_t largest = 0;  // nodes recording the same lease, the most of any
    for (const auto& [lease, holders] : leases) largest = std::max(largest, holders.size());
    if (std::optional<Status> unsure = cannotTellFree(*call, largest)) {
      return answer(call, std::move(*unsure));
    }
    o.leader = LeaderRecord{};
  }
  o.leader.lease.clear();  // compared here, never passed on
  answer(call, o);
}

// ---- release: on all nodes, waiting for each. Any node that deleted our key counts, voting or
// not: the key is gone there (and from every reachable node).

void RedlockBackend::finishRelease(const std::shared_ptr<QuorumCall>& call) {
  bool released = false;
  for (const auto& a : call->answers) released = released || (a && a->ok());
  Outcome o;
  if (released) {
    o.code = OutcomeCode::kOk;
  } else if (const int answered = call->answeredVoting(); answered < quorumSize()) {
    answer(call,
           unavailable("redlock: release answered by " + std::to_string(answered) + " of " +
                       std::to_string(nodes_.size()) + " nodes: " + nodeErrors(call->errors)));
    return;
  } else if (call->votes(OutcomeCode::kNotOwner) >= quorumSize()) {
    o.code = OutcomeCode::kNotOwner;
  }
  answer(call, o);
}

// ---- inspect and force release: every node's answer. Inspect: held iff a majority of voting
// nodes hold the key, for as long as a majority still will. Force release deleted the key on
// every node it reached; freed when at least one node deleted it and a quorum of voting nodes
// answered (the others may still hold it, but fewer than a majority); with fewer answers the
// operator gets 503 and retries: the lock may still be held. Token (redlock_backend.h, inspect):
// a held lease's, as its holding nodes' grant records agree on it (read again while they do
// not); otherwise the counter a majority reports. Force release: the highest counter seen,
// voting or not (a counter is data).

void RedlockBackend::finishRead(const std::shared_ptr<QuorumCall>& call) {
  const int answered = call->answeredVoting();
  if (answered < quorumSize()) {
    answer(call, unavailable(
                     std::string("redlock: ") + verbName(call->verb) + " answered by " +
                     std::to_string(answered) + " of " + std::to_string(nodes_.size()) + " nodes" +
                     (call->verb == Verb::kForceRelease ? " (the lock may still be held)" : "") +
                     ": " + nodeErrors(call->errors)));
    return;
  }
  Outcome o;
  std::vector<int64_t> held_pttls;
  std::vector<int64_t> readers;         // per voting node that holds it (read/write locks)
  std::vector<const Outcome*> holding;  // the voting nodes that hold it (their holder records)
  bool deleted_somewhere = false;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!call->answers[i]) continue;
    o.token = std::max(o.token, call->answers[i]->token);
    deleted_somewhere = deleted_somewhere || call->answers[i]->ok();
    if (call->voting[i] && call->answers[i]->ok()) {
      held_pttls.push_back(call->answers[i]->validity_ms);
      readers.push_back(call->answers[i]->used);
      holding.push_back(&*call->answers[i]);
    }
  }
  if (call->verb == Verb::kForceRelease) {
    if (deleted_somewhere) o.code = OutcomeCode::kOk;
    for (const auto& a : call->answers) {  // the lock-delay a node started (force_release.lua)
      if (a && a->ok()) o.validity_ms = std::max(o.validity_ms, a->validity_ms);
    }
  } else if (const int64_t ttl = quorum::heldTtlMs(static_cast<int>(nodes_.size()), held_pttls);
             ttl >= 0) {
    o.code = OutcomeCode::kOk;
    o.validity_ms = ttl;
    // Readers: as many as a majority of nodes count (a reader is one where its quorum holds).
    const size_t quorum = static_cast<size_t>(quorumSize());
    if (readers.size() >= quorum) {
      std::sort(readers.begin(), readers.end(), std::greater<>());
      o.used = readers[quorum - 1];
    }
    if (o.used == 0) {
      // One lease (a mutex, a writer): its token, once every node holding it reports the same.
      std::vector<uint64_t> holders_tokens;
      for (const Outcome* node : holding) holders_tokens.push_back(node->token);
      if (std::optional<uint64_t> agreed = quorum::agreedToken(holders_tokens)) {
        o.token = *agreed;
        if (call->rereads > 0) {
          metrics_.redlock_reads_settled.Increment();
        }
      } else if (readAgainSoon(call)) {
        return;
      } else {
        // Still apart after the budget (a node whose token sync failed, a lease granted by an
        // older sidecar): the token a majority of the holders report, else the quorum-th highest.
        if (!shutting_down_) {
          SL_LOG(kDebug, "redlock.read_token_unsettled", {"name", call->name},
                 {"rereads", call->rereads});
          metrics_.redlock_reads_gave_up.Increment();
        }
        o.token = quorum::majorityToken(holders_tokens, quorumSize());
      }
    } else {
      o.token = lastGrantedToken(*call);
    }
    // Who holds it: the holder a majority of nodes recorded (each node stamped since_ms with its
    // own clock: the earliest of them), else unknown.
    for (const Outcome* candidate : holding) {
      if (candidate->holder.empty()) continue;
      size_t agree = 0;
      int64_t since = candidate->since_ms;
      for (const Outcome* other : holding) {
        if (other->holder != candidate->holder) continue;
        ++agree;
        since = std::min(since, other->since_ms);
      }
      if (agree >= quorum) {
        o.holder = candidate->holder;
        o.since_ms = since;
        break;
      }
    }
    // The readers' holders: one node's list (each node stamps its own since/TTL), the first
    // node in configured order that counts the readers the majority counts.
    for (const Outcome* node : holding) {
      if (o.used > 0 && node->used == o.used) {
        o.holders = node->holders;
        break;
      }
    }
  } else if (std::optional<Status> unsure = cannotTellFree(*call, held_pttls.size())) {
    return answer(call, std::move(*unsure));
  } else {
    o.token = lastGrantedToken(*call);
  }
  answer(call, o);
}

std::optional<Status> RedlockBackend::cannotTellFree(const QuorumCall& call, size_t holding) const {
  // Free means no majority holds it, counting the voting nodes that did not answer (stalled,
  // timed out) as holders: any of them may still hold the lease, and with the nodes that said so
  // make a majority. The lease is then valid for its holder (extend counts such nodes the same
  // way: finishExtendLoss), and "free" would be a lie a waiter or an event stream acts on.
  if (holding == 0) return std::nullopt;  // the silent nodes alone are fewer than a quorum
  int silent = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) silent += call.voting[i] && !call.answers[i] ? 1 : 0;
  if (static_cast<int>(holding) + silent < quorumSize()) return std::nullopt;
  return unavailable("redlock: " + std::string(verbName(call.verb)) + ": " +
                     std::to_string(holding) + " of " + std::to_string(nodes_.size()) +
                     " nodes hold the lock and " + std::to_string(silent) +
                     " that did not answer may still hold it: " + nodeErrors(call.errors));
}

uint64_t RedlockBackend::lastGrantedToken(const QuorumCall& call) const {
  std::vector<uint64_t> tokens;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (call.voting[i] && call.answers[i]) tokens.push_back(call.answers[i]->token);
  }
  return quorum::majorityToken(tokens, quorumSize());
}

// ---- fan-out

void RedlockBackend::releaseOnAll(const QuorumCall& call,
                                  std::function<void(size_t, StatusOr<RedisValue>)> each) {
  auto shared_each =
      std::make_shared<std::function<void(size_t, StatusOr<RedisValue>)>>(std::move(each));
  for (size_t i = 0; i < nodes_.size(); ++i) {
    releaseOn(call, i,
              [shared_each, i](StatusOr<RedisValue> r) { (*shared_each)(i, std::move(r)); });
  }
}

void RedlockBackend::releaseOn(const QuorumCall& call, size_t i,
                               std::function<void(StatusOr<RedisValue>)> done) {
  StatusOr<ScriptCall> release =
      scriptCallFor(Operation::release(call.name, call.owner).of(call.kind), scripts_);
  if (SL_INVARIANT(release.isOk(), "redlock.release_script_missing")) {
    return sendTo(i, *release, std::move(done));
  }
  // Every kind has a release script (kScript) and run() refused the others. Were one missing,
  // the node answers the error on a later turn all the same, so the call still completes.
  scheduler_.post(alive_.guarded([done = std::move(done), why = release.status()] { done(why); }));
}

void RedlockBackend::fanOut(const ScriptCall& script,
                            std::function<void(size_t, StatusOr<RedisValue>)> each) {
  auto shared_each =
      std::make_shared<std::function<void(size_t, StatusOr<RedisValue>)>>(std::move(each));
  for (size_t i = 0; i < nodes_.size(); ++i) {
    sendTo(i, script,
           [shared_each, i](StatusOr<RedisValue> r) { (*shared_each)(i, std::move(r)); });
  }
}

void RedlockBackend::sendTo(size_t i, const ScriptCall& script,
                            std::function<void(StatusOr<RedisValue>)> done) {
  if (shutting_down_) {
    // No new commands once the nodes are closing; answer for the node on a later turn.
    scheduler_.post(
        alive_.guarded([done = std::move(done)] { done(cancelled("backend is shutting down")); }));
    return;
  }
  const ScriptCall::Views v = script.views();
  nodes_[i]->redis->runScriptArgs(static_cast<size_t>(script.script), v.keyArgs(), v.argArgs(),
                                  config_.redlock.node_timeout_ms, script.node_op, std::move(done));
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

void RedlockBackend::onMessage(size_t i, std::string_view channel, std::string_view payload) {
  std::string name;
  if (!lockNameFromChannel(config_.key_prefix, channel, &name)) return;
  if (watches_.find(name) == watches_.end()) return;  // a late message after unwatch
  auto it = wakes_.find(name);
  if (it == wakes_.end()) {
    auto w = std::make_unique<WakeState>();
    w->published.assign(nodes_.size(), 0);
    it = wakes_.emplace(name, std::move(w)).first;
  }
  WakeState& w = *it->second;
  const int k = ++w.published[i];  // this node's k-th event; its reason if it is the first
  // The reason of event k: the first node's, but a force release seen anywhere wins.
  const std::string_view reason = payload == announcement::kForced       ? announcement::kForced
                                  : payload == announcement::kGranted    ? announcement::kGranted
                                  : payload == announcement::kProclaimed ? announcement::kProclaimed
                                  : payload == announcement::kRolledBack ? announcement::kRolledBack
                                                                         : announcement::kReleased;
  if (static_cast<int>(w.reasons.size()) < k) {
    w.reasons.resize(static_cast<size_t>(k), reason);
  } else if (reason == announcement::kForced) {
    w.reasons[static_cast<size_t>(k - 1)] = reason;
  }
  settleWake(name);
}

void RedlockBackend::settleWake(const std::string& name) {
  const int64_t settle_ms = std::max<int64_t>(config_.redlock.node_timeout_ms, 1);
  auto it = wakes_.find(name);
  if (it == wakes_.end()) return;
  WakeState& w = *it->second;
  if (w.reached(w.fired + 1) >= quorumSize()) {
    // Announced at a majority: a release is free there, a grant or proclaim readable there.
    ++w.fired;
    w.settling = false;
    fireWake(name, w.reasonOf(w.fired - 1, w.fired));
    return settleWake(name);  // the listener may have unwatched it; a later event may be ready
  }
  if (w.latest() > w.fired) {
    // Some node announced an event that a majority has not (yet): fire anyway after settle_ms
    // (nodes down or without the key never publish), counting every event known by then as one
    // (a straggler's announcement after that counts as a new event: one spare wake-up).
    if (w.settling) return;
    w.settling = true;
    w.timer.start(scheduler_, settle_ms, [this, name] {
      auto found = wakes_.find(name);
      if (found == wakes_.end()) return;
      WakeState& late = *found->second;
      late.settling = false;
      const std::string_view reason = late.reasonOf(late.fired, late.latest());
      late.fired = late.latest();
      // Every node counts as caught up: a node that announced one more (a failed attempt's clean
      // up on it alone) must not hold every later event back to this fallback.
      for (int& p : late.published) p = late.fired;
      fireWake(name, reason);
      settleWake(name);
    });
    return;
  }
  // Every event fired: forget the name once quiet (2 x settle_ms after its last event), so that
  // a node that missed one (down, or without the key) counts along again with the others.
  w.timer.start(scheduler_, 2 * settle_ms, [this, name] { wakes_.erase(name); });
}

void RedlockBackend::fireWake(const std::string& name, std::string_view reason) {
  if (listener_) {
    const std::string copy = name;  // the listener may unwatch and erase our state
    listener_(copy, reason);
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
      nh.reason = quorum::notVotingReason(currentRestartState(i), now, max_ttl_ms_);
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

void RedlockBackend::scanHolders(const HolderScan& scan, ScanCallback cb) {
  std::vector<std::string> addresses;
  for (const auto& n : nodes_) addresses.push_back(n->address);
  beginOp();  // in flight until delivered: shutdown waits for the scan's answer
  scanHolderRecords(
      scheduler_, std::move(addresses),
      [this](const std::string& address) -> RedisNode* {
        if (shutting_down_) return nullptr;
        for (const auto& n : nodes_) {
          if (n->address == address && !n->shut_down) return n->redis.get();
        }
        return nullptr;
      },
      scripts_.prefix, scan, config_.command_timeout_ms,
      [this, cb = std::move(cb)](StatusOr<ScannedNames> r) mutable {
        deliver([cb = std::move(cb), r = std::move(r)]() mutable { cb(std::move(r)); });
      });
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
  scheduler_.post(alive_.guarded([this, fn = std::move(fn)] {
    fn();
    --in_flight_;
    maybeFinishShutdown();
  }));
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
