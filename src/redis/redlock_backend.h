// Redlock: one lock over N independent Redis masters (`backend.type: redlock`), granted by a
// majority. The Redis distlock algorithm, with what client libraries usually leave out:
//
//  - All N nodes are asked in parallel, each with `redlock.node_timeout_ms`; the answer comes as
//    soon as the outcome is decided (fail fast: a down node costs nothing, a paused one at most
//    its timeout).
//  - Granted iff a majority of *voting* nodes granted and validity = ttl - elapsed - drift > 0;
//    the reply's validity_ms is that validity, not the requested TTL.
//  - Fencing token = max of the granting nodes' counters. Because failed attempts bump counters
//    on minority nodes, the counters drift apart; before answering, the winner raises the counter
//    of every node to that token ("token sync", one more parallel round trip, skipped on nodes
//    that already reported it) and needs every node of the granting majority to confirm (the
//    others are raised best effort; a vote won with no validity left is given up before the
//    sync, so it raises no counter). The next grant's majority intersects the granting majority,
//    so it INCRs a counter that is >= this token: tokens strictly increase per name (a counter a
//    node lost is re-seeded from its clock, see scripts.h).
//  - A failed attempt releases on all nodes (also those that did not answer in time) before
//    answering, so no stale key stays on a live node; not on a node that refused it (busy): it
//    wrote nothing there, and the key there may be its owner's live lease (held by you). A
//    mutex attempt's clean-up is rollback.lua, not release.lua: announced "rolled_back" (waiters
//    wake; event streams end no lease for it), and where the node answered, it deletes the
//    owner's lease only while the node's grant record names one of the attempt's tokens (a later
//    grant to the same owner id is left alone). It changes no counter and no grant record.
//  - Delayed restarts: a node whose run_id changed or whose uptime is below locks.max_ttl_ms
//    still receives every command (so it converges) but casts no vote, for grants and extends,
//    until max_ttl has passed since its restart (quorum::mayVote). health() says why and for how
//    long; the log says it once per node run. A node whose CONFIG GET (after each connect) shows
//    appendonly yes + appendfsync always keeps every write across restarts and votes at once;
//    CONFIG refused (ACL) counts as not persistent.
//
// Outcomes (precise definitions, see also README.md, "Redlock"):
//  acquire: granted (majority + validity) | busy {granted=false, holder_ttl_ms} when a majority
//    of nodes answered but not enough said yes (held elsewhere or a split vote) |
//    kUnavailable when fewer than a majority of voting nodes answered at all (counted in
//    redlock_quorum_failures) | kDeadlineExceeded when the vote took the whole TTL |
//    kInvalidArgument when ttl_ms <= drift (could never be valid).
//  extend: kOk with validity when a majority of voting nodes extended within the new validity;
//    a majority reached with no validity left releases the keys and answers kDeadlineExceeded.
//    Otherwise, if fewer than a majority answered: kUnavailable (the lease is not touched; it may
//    still be valid until its previous validity). Otherwise the lease is lost: our remaining keys
//    are released everywhere and the result is kNotOwner if a majority answered "held by another
//    owner", else kNotHeld. Never re-creates a missing key.
//  release: on all nodes, waiting for each (bounded by the node timeout). kOk if at least one
//    node deleted our key (the lease is then gone from every reachable node); else kUnavailable
//    if fewer than a majority answered; else kNotOwner if a majority answered "another owner";
//    else kNotHeld.
//  inspect: held iff a majority of voting nodes hold the key; ttl_ms = the time until fewer than a
//    majority hold it. token, held by one lease (a mutex, a writer): each holding node reports
//    its grant record for the lease's owner (p{name}:granted, written by the acquire and
//    rewritten by the token sync: lua/lib/grant_record.lua), or its counter where it has none;
//    the answer is the token they all report. While they differ (a token sync on its way: a
//    granting node still reports its own token, a node that granted after the vote its own
//    counter) the same read is sent again (node_timeout_ms / 10, 1-10 ms, doubling) for up to
//    2 x node_timeout_ms (at most 1 s) from its start, then the token a majority of the holders
//    report, else the quorum-th highest (sidelock_redlock_unsettled_reads_total counts both).
//    Free, or held by readers: the counter a majority of the answering nodes report (the last
//    grant's: a node's own seed or a lost attempt's INCR is on fewer, except a vote split so
//    evenly that every attempt lost), else the quorum-th highest, never a lone node's counter,
//    which may be far above the lease's token. kUnavailable if fewer than a majority of voting
//    nodes answered.
//  wake-ups: subscribed on every node; one release (or an election's grant, term record or
//    proclaim) publishes on every node that carried it out, so each node's k-th publication of a
//    name is the same event k. The listener fires once per event: when a majority of nodes has
//    published it (the lock is free at a majority; the leader readable there) or node_timeout_ms
//    after the first node published it, whichever is first (that fallback counts every event
//    any node announced so far as one, and every node as caught up). Back-to-back events (a
//    proclaim right after a grant) each fire. The count is forgotten 2 x node_timeout_ms after
//    the last event, so a node that missed one (down, or without the key) counts along with the
//    others again.
//
// Elections (LockKind::kElection, keys p{name}:el, :el:token, :el:leader; README "Leader
// election" and "Fencing tokens with Redlock"):
//  campaign (acquire): as acquire: election_campaign.lua on every node, elected iff a majority
//    of voting nodes granted with validity left; busy / kUnavailable / kDeadlineExceeded as
//    acquire, a lost attempt released everywhere. Term = the fencing token. The token sync is
//    election_sync.lua, sent to every node and waited for on every granting node (also when the
//    counters agree): counter raised to the term, and the record of every node where the
//    candidate still holds the lease rewritten with the decided term and since_ms (the latest
//    of the granting nodes' clocks), then announced. The grant carries that since_ms.
//  renew (extend) and resign (release): as extend and release (extend.lua / release.lua with the
//    record as KEYS[3]).
//  proclaim: election_proclaim.lua on every node, decided as extend: kOk (term, TTL at a majority
//    less elapsed and drift) once a majority of voting nodes took the value; otherwise, once
//    every node answered: kUnavailable if fewer than a majority answered (the lease untouched),
//    else the lease is lost: released everywhere, kNotOwner if a majority said "another owner",
//    else kNotHeld.
//  inspect (leader read): kOk iff a majority of voting nodes hold one lease with the same record
//    term written by the token sync (election_leader.lua answers the record, and a digest of the
//    owner id only for a record the sync wrote: a node's provisional term is never counted, so
//    nobody leads until the grant is answered, and a leader's term is always the decided one;
//    that also covers a proclaim: its term is the one most nodes that took it record); token = that
//    term, validity_ms = until fewer than a majority hold it, since_ms the latest of theirs,
//    value the one most of them record (ties: the value that got there first in node order);
//    else kNotHeld with the highest counter seen; kUnavailable if fewer than a majority of
//    voting nodes answered.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "common/rate_limited_log.h"
#include "config/config.h"
#include "event/lifetime.h"
#include "event/scheduler.h"
#include "metrics/metrics.h"
#include "redis/quorum.h"
#include "redis/redis_node.h"
#include "redis/scripts.h"

struct uv_loop_s;

namespace sidelock::backend {

class RedlockBackend final : public Backend {
 public:
  /// `config.nodes` are the N masters (N >= 1; odd recommended). `max_ttl_ms` is
  /// locks.max_ttl_ms: the delayed-restart quarantine.
  RedlockBackend(uv_loop_s* loop, event::Scheduler& scheduler, const config::BackendConfig& config,
                 int64_t max_ttl_ms, metrics::Metrics& metrics);
  ~RedlockBackend() override;
  RedlockBackend(const RedlockBackend&) = delete;
  RedlockBackend& operator=(const RedlockBackend&) = delete;

  void start() override;
  /// Acquire, release, extend, inspect, force release and proclaim as described above; hand-off
  /// is not served (canHandOff() stays false: the next owner needs a quorum vote of its own).
  void run(const Operation& op, OutcomeCallback cb) override;

  void setReleaseListener(ReleaseListener listener) override { listener_ = std::move(listener); }
  void watchReleases(std::string_view name) override;
  void unwatchReleases(std::string_view name) override;
  void setReadyListener(std::function<void()> listener) override {
    ready_listener_ = std::move(listener);
  }

  BackendHealth health() const override;
  void shutdown(std::function<void()> done) override;

  /// Number of nodes, and whether node `i` (config order) is up and allowed to vote now.
  size_t nodeCount() const { return nodes_.size(); }
  /// Every node, one after another, the names merged: a name some node records is a candidate;
  /// the listing's inspect (a quorum read) decides whether it is held.
  void scanHolders(const HolderScan& scan, ScanCallback cb) override;
  bool nodeVoting(size_t i) const;

 private:
  struct NodeSlot;
  struct QuorumCall;
  struct WakeState;

  int quorumSize() const;
  /// The node's restart record, including a restart it reported that onNodeState has not
  /// processed yet.
  quorum::NodeRestartState currentRestartState(size_t i) const;
  int votingUpCount() const;
  void onNodeState(size_t i, bool up);
  /// Asks a node that came up whether it persists every write (CONFIG GET append*), then
  /// applyDelayedRestart().
  void checkPersistence(size_t i);
  /// Logs (once per run) and times the end of a node's delayed restart, unless it persists every
  /// write.
  void applyDelayedRestart(size_t i);
  void updateReady();
  void onMessage(size_t i, std::string_view channel, std::string_view payload);
  /// Fires the events of `name` a majority announced, or arms the fallback / forget timer.
  void settleWake(const std::string& name);
  void fireWake(const std::string& name, std::string_view reason);

  /// Why `op` is answered without asking the nodes (shutting down, a verb or kind Redlock does
  /// not serve, a TTL within the drift allowance); OK when it goes out.
  Status refusal(const Operation& op) const;
  /// The policy of the call's verb, after each answer until it is done.
  void decide(const std::shared_ptr<QuorumCall>& call);
  void answer(const std::shared_ptr<QuorumCall>& call, StatusOr<Outcome> result);
  void decideAcquire(const std::shared_ptr<QuorumCall>& call);
  void startTokenSync(const std::shared_ptr<QuorumCall>& call);
  void evaluateTokenSync(const std::shared_ptr<QuorumCall>& call);
  /// What is left of a won acquire's validity (ms) now; none: the attempt is given up
  /// (startAcquireCleanup, kDeadlineExceeded) and nullopt returned.
  std::optional<int64_t> validityLeftOrGiveUp(const std::shared_ptr<QuorumCall>& call);
  void startAcquireCleanup(const std::shared_ptr<QuorumCall>& call, Status error);
  /// A lost (or given up) acquire's clean-up on node `i`, once it answered the attempt.
  void cleanUpAfterAcquire(const std::shared_ptr<QuorumCall>& call, size_t i);
  void finishAcquireLoss(const std::shared_ptr<QuorumCall>& call);
  /// Extend and proclaim: both owner-checked on a majority.
  void decideExtend(const std::shared_ptr<QuorumCall>& call);
  void answerExtended(const std::shared_ptr<QuorumCall>& call);
  void answerProclaimed(const std::shared_ptr<QuorumCall>& call);
  /// A lost extend or proclaim: kUnavailable, or the lease's leftovers released and kNotOwner /
  /// kNotHeld.
  void finishExtendLoss(const std::shared_ptr<QuorumCall>& call);
  /// Inspect of an election: the lease a majority records (see the comment above it).
  void finishLeaderRead(const std::shared_ptr<QuorumCall>& call);
  void finishRelease(const std::shared_ptr<QuorumCall>& call);
  /// Inspect and force release.
  void finishRead(const std::shared_ptr<QuorumCall>& call);
  /// Resets `call`'s per-round state (answers, errors, pending, who votes) before a round.
  void beginRound(QuorumCall& call) const;
  /// Sends `call`'s script (this round's) to every node; each answer goes to decide().
  void sendRound(const std::shared_ptr<QuorumCall>& call, const ScriptCall& script);
  /// A read whose holders do not agree on the lease's token yet (its token sync is on the way):
  /// schedules the same read again and returns true, while its budget lasts.
  bool readAgainSoon(const std::shared_ptr<QuorumCall>& call);
  /// A read of a lock nobody (or readers) holds: the counter a majority of the answering voting
  /// nodes report (the last grant's), else the one a majority reach (quorum::majorityFloorToken).
  uint64_t lastGrantedToken(const QuorumCall& call) const;
  /// For a read a quorum answered where `holding` voting nodes hold the lease, fewer than a
  /// majority: kUnavailable when the voting nodes that did not answer could make a majority with
  /// them (the lease may be valid), nullopt when it is free.
  std::optional<Status> cannotTellFree(const QuorumCall& call, size_t holding) const;

  /// Sends the release script of `call`'s lease (its name, owner and kind) to every node; `each`
  /// runs once per node.
  void releaseOnAll(const QuorumCall& call, std::function<void(size_t, StatusOr<RedisValue>)> each);
  /// The same release, to node `i` alone; `done` runs once.
  void releaseOn(const QuorumCall& call, size_t i, std::function<void(StatusOr<RedisValue>)> done);
  /// Sends `script` to every node; `each` runs once per node, with the node's index.
  void fanOut(const ScriptCall& script, std::function<void(size_t, StatusOr<RedisValue>)> each);
  /// Sends `script` to node `i` (answered kCancelled once shutting down); `done` runs once.
  void sendTo(size_t i, const ScriptCall& script, std::function<void(StatusOr<RedisValue>)> done);

  /// Runs `fn` on a later loop turn (Backend contract), counted as in flight until then.
  void deliver(std::function<void()> fn);
  void beginOp() { ++in_flight_; }
  void maybeFinishShutdown();
  std::string nodeErrors(const std::vector<std::string>& errors) const;
  /// What tells one outage from another in the rate-limited warnings: the error code and the
  /// nodes that failed (not timings, not lock names).
  std::string outageState(StatusCode code, const std::vector<std::string>& errors) const;

  uv_loop_s* loop_;
  event::Scheduler& scheduler_;
  config::BackendConfig config_;
  int64_t max_ttl_ms_;
  ScriptContext scripts_;
  metrics::Metrics& metrics_;
  std::vector<std::unique_ptr<NodeSlot>> nodes_;

  std::map<std::string, int, std::less<>> watches_;
  std::map<std::string, std::unique_ptr<WakeState>, std::less<>> wakes_;
  ReleaseListener listener_;
  // Per-request warnings during an outage: one line per change, then a count every 10 s.
  RateLimitedLog no_quorum_log_;
  RateLimitedLog acquire_failed_log_;
  std::function<void()> ready_listener_;
  bool ready_ = false;  // last value of updateReady(), to call ready_listener_ on transitions

  bool started_ = false;
  bool shutting_down_ = false;
  size_t nodes_shutting_ = 0;
  int64_t in_flight_ = 0;  // operations whose user callback has not run yet
  std::function<void()> shutdown_done_;
  // Callbacks posted to the loop hold a weak reference and do nothing once the backend is gone.
  event::LivenessToken alive_;
};

}  // namespace sidelock::backend
