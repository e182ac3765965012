#include "redis/quorum.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace sidelock::backend::quorum {

namespace {
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

int64_t saturatingAdd(int64_t a, int64_t b) {
  if (b > 0 && a > kMax - b) return kMax;
  if (b < 0 && a < kMin - b) return kMin;
  return a + b;
}
}  // namespace

int majority(int n) { return n / 2 + 1; }

int64_t driftMs(int64_t ttl_ms, double drift_factor) {
  return static_cast<int64_t>(std::ceil(static_cast<double>(ttl_ms) * drift_factor)) + 2;
}

int64_t validityMs(int64_t ttl_ms, int64_t elapsed_ms, double drift_factor) {
  return ttl_ms - elapsed_ms - driftMs(ttl_ms, drift_factor);
}

bool granted(int n, int votes_for, int64_t validity_ms) {
  return n > 0 && votes_for >= majority(n) && validity_ms > 0;
}

Outcome decide(int n, int votes_for, int votes_against) {
  if (votes_for >= majority(n)) return Outcome::kWon;
  if (votes_against > n - majority(n)) return Outcome::kLost;
  return Outcome::kUndecided;
}

LossKind classifyLoss(int n, int votes_for, int busy, int failed) {
  (void)failed;
  return votes_for + busy >= majority(n) ? LossKind::kBusy : LossKind::kNoQuorum;
}

uint64_t fencingToken(const std::vector<uint64_t>& granting_tokens) {
  uint64_t best = 0;
  for (uint64_t t : granting_tokens) best = std::max(best, t);
  return best;
}

std::optional<uint64_t> agreedToken(const std::vector<uint64_t>& holders_tokens) {
  if (holders_tokens.empty()) return std::nullopt;
  for (uint64_t t : holders_tokens) {
    if (t != holders_tokens.front()) return std::nullopt;
  }
  return holders_tokens.front();
}

std::optional<uint64_t> quorumToken(std::vector<uint64_t> tokens, int quorum) {
  std::erase(tokens, 0);
  if (quorum < 1 || tokens.size() < static_cast<size_t>(quorum)) return std::nullopt;
  std::sort(tokens.begin(), tokens.end(), std::greater<>());
  // Sorted high to low, a value named `quorum` times spans indexes [i, i + quorum - 1].
  for (size_t i = 0; i + static_cast<size_t>(quorum) <= tokens.size(); ++i) {
    if (tokens[i] == tokens[i + static_cast<size_t>(quorum) - 1]) return tokens[i];
  }
  return std::nullopt;
}

uint64_t majorityFloorToken(std::vector<uint64_t> tokens, int quorum) {
  std::erase(tokens, 0);
  if (tokens.empty()) return 0;
  std::sort(tokens.begin(), tokens.end(), std::greater<>());
  const size_t k = std::clamp<size_t>(static_cast<size_t>(std::max(quorum, 1)), 1, tokens.size());
  return tokens[k - 1];
}

uint64_t majorityToken(const std::vector<uint64_t>& tokens, int quorum) {
  if (std::optional<uint64_t> shared = quorumToken(tokens, quorum)) return *shared;
  return majorityFloorToken(tokens, quorum);
}

int64_t holderTtlMs(int n, int free_nodes, std::vector<int64_t> busy_pttls) {
  // A PTTL of -1 (no expiry) or -2 (gone) says nothing about when the lock frees up.
  std::erase_if(busy_pttls, [](int64_t v) { return v < 0; });
  if (busy_pttls.empty()) return -1;
  std::sort(busy_pttls.begin(), busy_pttls.end());
  int k = majority(n) - free_nodes;
  k = std::clamp(k, 1, static_cast<int>(busy_pttls.size()));
  return busy_pttls[static_cast<size_t>(k - 1)];
}

int64_t heldTtlMs(int n, std::vector<int64_t> held_pttls) {
  if (static_cast<int>(held_pttls.size()) < majority(n)) return -1;
  std::sort(held_pttls.begin(), held_pttls.end(), std::greater<>());
  return held_pttls[static_cast<size_t>(majority(n) - 1)];
}

void noteNodeUp(NodeRestartState& state, const std::string& run_id, int64_t uptime_ms,
                int64_t learned_at_ms) {
  int64_t restart_at = learned_at_ms - std::max<int64_t>(uptime_ms, 0);
  if (!state.run_id.empty() && state.run_id != run_id) {
    // The process behind this address changed. If it claims to have started before we last saw
    // the old one, it is another server (failover, DNS): other sidecars may have used the old one
    // until just now, so its lock data is unrelated from the moment we noticed.
    if (restart_at < state.last_seen_up_ms) restart_at = learned_at_ms;
  } else if (!state.run_id.empty()) {
    // Same process as before (a mere reconnect): keep the earlier, already-known restart time.
    restart_at = std::min(restart_at, state.restart_at_ms);
  }
  if (!state.run_id.empty() && state.run_id != run_id) state.restarted = true;
  state.run_id = run_id;
  state.restart_at_ms = restart_at;
  state.last_seen_up_ms = learned_at_ms;
}

void noteNodeDown(NodeRestartState& state, int64_t now_ms) {
  if (!state.run_id.empty()) state.last_seen_up_ms = std::max(state.last_seen_up_ms, now_ms);
}

bool mayVote(const NodeRestartState& state, int64_t now_ms, int64_t max_ttl_ms) {
  if (state.run_id.empty()) return false;
  return now_ms >= votingFromMs(state, max_ttl_ms);
}

int64_t votingFromMs(const NodeRestartState& state, int64_t max_ttl_ms) {
  if (state.restart_at_ms == kMin) return kMax;
  return saturatingAdd(state.restart_at_ms, max_ttl_ms);
}

std::string notVotingReason(const NodeRestartState& state, int64_t now_ms, int64_t max_ttl_ms) {
  if (state.restart_at_ms == kMin) return "not voting: never seen up";
  const int64_t left_ms = std::max<int64_t>(0, votingFromMs(state, max_ttl_ms) - now_ms);
  const int64_t left_s = (left_ms + 999) / 1000;
  const int64_t up_s = std::max<int64_t>(0, now_ms - state.restart_at_ms) / 1000;
  const std::string max_s = std::to_string(max_ttl_ms / 1000);
  std::string why = state.restarted ? "restarted " + std::to_string(up_s) + " s ago (new run_id)"
                                    : "node up " + std::to_string(up_s) + " s";
  // The operator reading this (readyz, log) gets the two ways out, not only the wait.
  return "not voting for another " + std::to_string(left_s) + " s: " + why + " < max ttl " + max_s +
         " s (delayed restart; to vote at once: appendonly yes + appendfsync always on the node, "
         "or backend.redlock.delayed_restart: false)";
}

bool persistsEveryWrite(const std::vector<std::string>& config) {
  bool appendonly = false;
  bool fsync_always = false;
  for (size_t i = 0; i + 1 < config.size(); i += 2) {
    if (config[i] == "appendonly") appendonly = config[i + 1] == "yes";
    if (config[i] == "appendfsync") fsync_always = config[i + 1] == "always";
  }
  return appendonly && fsync_always;
}

}  // namespace sidelock::backend::quorum
