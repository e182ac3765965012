// Redlock arithmetic, kept free of I/O so it is unit-tested without a loop
// (src/README.md, rule 15).
//
// The rules come from the Redis distlock spec ("Redlock"): a lock is granted by a majority of N
// independent masters, its usable validity is the TTL minus the time the vote took minus a clock
// drift allowance, and a node that restarted (possibly empty) must not vote until every lease it
// might have forgotten has expired ("delayed restarts").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sidelock::backend::quorum {

/// Votes needed out of `n` nodes: n/2 + 1 (3 of 5, 2 of 3, 3 of 4, 1 of 1).
int majority(int n);

/// Clock drift allowance for a lease of `ttl_ms`: ttl * drift_factor + 2 ms (the 2 ms cover
/// Redis' own millisecond expiry granularity), rounded up.
int64_t driftMs(int64_t ttl_ms, double drift_factor);

/// Usable lease time after a vote that took `elapsed_ms`: ttl - elapsed - drift (may be <= 0).
int64_t validityMs(int64_t ttl_ms, int64_t elapsed_ms, double drift_factor);

/// Granted iff a majority voted for it and some validity is left.
bool granted(int n, int votes_for, int64_t validity_ms);

/// State of a vote in progress.
enum class Outcome {
  kUndecided,  // more answers could still change the result
  kWon,        // votes_for reached the majority
  kLost,       // so many nodes said no (or failed) that a majority is out of reach
};

/// Fail-fast decision: `votes_against` counts every node that cannot vote for us (busy, error,
/// timed out, down, not allowed to vote). Won once votes_for >= majority; lost once
/// votes_against > n - majority. Lets the caller answer without waiting for the slowest node.
Outcome decide(int n, int votes_for, int votes_against);

/// Why a lost vote was lost, for the reply: the lock is held or the vote split (a conflict the
/// caller may wait out and retry), or the cluster could not vote (an outage, counted as a quorum
/// failure). `votes_for` and `busy` are nodes that answered (yes / held by someone else); `failed`
/// is every other node (error, timeout, down, not allowed to vote). If fewer than a majority
/// answered at all, it is an outage; otherwise the lock is busy.
enum class LossKind { kBusy, kNoQuorum };
LossKind classifyLoss(int n, int votes_for, int busy, int failed);

/// Fencing token of a grant: the maximum counter over the granting nodes (0 for none).
uint64_t fencingToken(const std::vector<uint64_t>& granting_tokens);

/// Reads (inspect). Each node reports a token: for a lease it holds, its grant record's (Redlock:
/// lua/lib/grant_record.lua), else its counter. A node that granted after the vote and a granting
/// node that awaits its token sync report their own token, which may differ from the lease's.
///
/// The lease's token, from the tokens its holding nodes report: settled when they all agree,
/// nullopt while any differs (a token sync still on its way, a node whose sync failed).
std::optional<uint64_t> agreedToken(const std::vector<uint64_t>& holders_tokens);
/// The highest token that at least `quorum` of `tokens` name (0s, nodes without a counter, left
/// out), nullopt if none does: a grant's token is on its granting majority, a node's own
/// (a counter seeded later, or INCRed by an attempt that lost its vote) usually on fewer.
std::optional<uint64_t> quorumToken(std::vector<uint64_t> tokens, int quorum);
/// When no token has a majority: the quorum-th highest of `tokens` (0s left out; the lowest when
/// fewer are left), 0 if none. A majority of the nodes count at least that far, so the next
/// grant's token (its majority includes one of them) is higher.
uint64_t majorityFloorToken(std::vector<uint64_t> tokens, int quorum);
/// A read's token when the nodes' tokens do not settle it: quorumToken, else majorityFloorToken.
uint64_t majorityToken(const std::vector<uint64_t>& tokens, int quorum);

/// Remaining TTL to report for a busy lock: the lock becomes grantable once enough busy nodes
/// have expired for `free_nodes` + expired to reach a majority, i.e. the k-th smallest busy PTTL
/// with k = majority - free_nodes (clamped to the list). -1 when no PTTL is known.
int64_t holderTtlMs(int n, int free_nodes, std::vector<int64_t> busy_pttls);

/// Remaining TTL of a lock held on a majority: the time until fewer than a majority still hold
/// it, i.e. the majority-th largest PTTL. -1 when fewer than a majority hold it.
int64_t heldTtlMs(int n, std::vector<int64_t> held_pttls);

/// What a node said about itself at its last (re)connect, plus what we remember across
/// reconnects, for delayed restarts.
struct NodeRestartState {
  std::string run_id;                 // empty before the first successful connect
  int64_t restart_at_ms = INT64_MIN;  // scheduler time of the node's last (re)start; MIN = unknown
  int64_t last_seen_up_ms = INT64_MIN;  // last scheduler time we knew the previous run_id was up
  bool restarted = false;  // we saw another run_id at this address before (not a fresh start)
};

/// Updates `state` for a node that just came up reporting `run_id` and `uptime_ms`, learned at
/// scheduler time `learned_at_ms`. The restart time is learned_at - uptime; if the run_id
/// changed although the new process claims to be older than our last sight of the old one (a
/// different server behind the same address, e.g. after a failover), other sidecars may have
/// used the old one until just now, so the restart counts from learned_at.
void noteNodeUp(NodeRestartState& state, const std::string& run_id, int64_t uptime_ms,
                int64_t learned_at_ms);
/// Records that the node was last known up at `now_ms` (call on the down transition).
void noteNodeDown(NodeRestartState& state, int64_t now_ms);

/// Delayed restarts: a node may vote iff now >= restart_at + max_ttl (every lease it may have
/// forgotten has expired by then). A node never seen up does not vote.
bool mayVote(const NodeRestartState& state, int64_t now_ms, int64_t max_ttl_ms);
/// Scheduler time from which the node may vote (restart_at + max_ttl, saturating).
int64_t votingFromMs(const NodeRestartState& state, int64_t max_ttl_ms);

/// Why a node does not vote yet, and until when, for /readyz and the log:
/// "not voting for another 587 s: node up 13 s < max ttl 600 s" (a fresh start) or
/// "not voting for another 587 s: restarted 13 s ago (new run_id) < max ttl 600 s".
/// Seconds left are rounded up, seconds up rounded down.
std::string notVotingReason(const NodeRestartState& state, int64_t now_ms, int64_t max_ttl_ms);

/// What CONFIG GET append* says about a node's durability. Only `appendonly yes` with
/// `appendfsync always` keeps every acknowledged write across a crash, so only then may a node
/// that (re)started recently vote at once. `config` is the flat name/value list of the reply.
bool persistsEveryWrite(const std::vector<std::string>& config);

}  // namespace sidelock::backend::quorum
