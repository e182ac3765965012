// sidelock's Lua scripts and the Redis key / channel names they work on.
//
// Keys of lock `name` under prefix `p` (default "sidelock:"):
//   KEYS[1]  p{name}          the lease: value = owner id, PX = remaining TTL
//   KEYS[2]  p{name}:token    the fencing counter: INCR on every grant; expires
//                             tokenCounterTtlMs(locks.max_ttl_ms) after the last grant
// The `{name}` hash tag keeps both keys of one lock in the same Redis Cluster slot. A lock key
// always ends with '}' and a counter key with ":token", so no name's lock key can equal another
// name's counter key.
//
// Release channel: p + "released:{" + name + "}". The release script PUBLISHes the lock name on it
// after a successful DEL; sidecars subscribed to it wake their local waiters (issue 4).
//
// Fencing counters are seeded from the clock. A missing counter (first grant of a name, Redis
// restarted without its data, a failover to a replica that missed the last increments, the
// counter expired) is created at Redis's TIME in microseconds and INCRed from there. A recreated
// counter therefore starts above every token handed out before, under these assumptions:
//  1. Redis's clock does not go back (across restarts and failovers) by more than the counter's
//     expiry margin: run NTP, slewing.
//  2. A counter never runs ahead of the clock: a name is granted fewer than once per microsecond
//     on average since its counter was seeded (Redis runs far fewer scripts than that).
//  3. Redlock: the nodes' clocks agree within the same margin (a token synced from a node whose
//     clock is ahead lands on the others; their counters expire no sooner than
//     tokenCounterTtlMs after that, so the margin covers the difference).
// Tokens are ~1.8e15 in 2026: below 2^53, so exact in Lua's doubles and in JavaScript numbers.
// Counters expire tokenCounterTtlMs after the last grant (or token sync), so one key per lock
// name no longer stays in Redis for good. A counter created before this scheme keeps counting
// from its old value and gets the expiry at its next grant.
//
// Replies (all integers unless stated):
//   acquire  ARGV owner, ttl_ms, counter_ttl_ms
//                                        -> {1, token, ttl_ms} granted | {0, 0, holder PTTL}
//   release  ARGV owner, channel, name[, "sharded"]
//                                        -> 1 released | 0 held by another owner | -1 not held;
//                                           "sharded" (Redis Cluster) announces with SPUBLISH
//   extend   ARGV owner, ttl_ms          -> {1, PTTL} | {0, holder PTTL} | {-1, -2}; never
//   re-creates
//                                           a missing key (that would silently re-acquire)
//   inspect  (no ARGV)                   -> {exists 0|1, PTTL, token counter as bulk string or nil}
//   token sync (Redlock; KEYS[1] = the counter) ARGV token, counter_ttl_ms -> 1; raises the
//                                           counter to `token`, never lowers it
//   release_grant ARGV owner, next owner, next ttl_ms, counter_ttl_ms
//                                        -> {1, token, ttl_ms} handed on | {0, 0, holder PTTL} held
//                                           by another owner | {-1, 0, 0} not held (single master)
//   force_release (operators) ARGV channel, name[, "sharded"]
//                                        -> {deleted 0|1, 0, token counter or nil} (inspect's
//                                           shape); deletes whoever holds it, announces it
//
// The scripts are handed to every RedisNode as its script set (sidelockScripts(), indexed by
// ScriptId), loaded with SCRIPT LOAD when a node connects and run with EVALSHA; a NOSCRIPT reply
// (SCRIPT FLUSH, failover to a replica without the script) is retried once with EVAL, which runs
// the script and caches it again (RedisConnection does this transparently).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "redis/redis_node.h"

namespace sidelock::backend {

/// sidelock's scripts; the value is the script's index in sidelockScripts().
enum class ScriptId : size_t {
  kAcquire,
  kRelease,
  kExtend,
  kInspect,
  kTokenSync,
  kReleaseGrant,
  kForceRelease,
};

/// Lua source of one script.
std::string_view scriptText(ScriptId id);

/// How long a fencing counter outlives the last grant of its name: locks.max_ttl_ms (every lease
/// granted from it has expired by then, unless renewed) plus a margin for clock differences
/// between Redis servers and clock steps (see the assumptions above).
inline constexpr int64_t kTokenCounterMarginMs = 60'000;
int64_t tokenCounterTtlMs(int64_t max_ttl_ms);

/// Short name for logs and errors ("acquire").
const char* scriptName(ScriptId id);
/// All script ids, in index order.
inline constexpr ScriptId kAllScripts[] = {
    ScriptId::kAcquire,   ScriptId::kRelease,      ScriptId::kExtend,      ScriptId::kInspect,
    ScriptId::kTokenSync, ScriptId::kReleaseGrant, ScriptId::kForceRelease};
/// The script set for RedisNodeOptions::scripts (one shared instance).
std::shared_ptr<const RedisScriptSet> sidelockScripts();

/// KEYS[1]: `<prefix>{<name>}`.
std::string lockKey(std::string_view prefix, std::string_view name);
/// KEYS[2]: `<prefix>{<name>}:token`.
std::string tokenKey(std::string_view prefix, std::string_view name);
/// ARGV[4] of the release script on Redis Cluster: announce with SPUBLISH (sharded pub/sub).
inline constexpr std::string_view kShardedPublish = "sharded";
/// Pub/sub channel announcing releases of `name`: `<prefix>released:{<name>}`.
std::string releaseChannel(std::string_view prefix, std::string_view name);
/// Inverse of releaseChannel(); false if `channel` is not a release channel under `prefix`.
bool lockNameFromChannel(std::string_view prefix, std::string_view channel, std::string* name);

/// Decoding of the scripts' replies, shared by RedisBackend and RedlockBackend. A non-OK input
/// status is passed through; a Redis error reply becomes kInternal "redis <node>: <message>"; a
/// reply of the wrong shape becomes kInternal too.
StatusOr<AcquireReply> decodeAcquire(const StatusOr<RedisValue>& reply, std::string_view node);
StatusOr<OwnerCheck> decodeRelease(const StatusOr<RedisValue>& reply, std::string_view node);
/// kOk: validity_ms = the key's PTTL after PEXPIRE.
StatusOr<ExtendReply> decodeExtend(const StatusOr<RedisValue>& reply, std::string_view node);
StatusOr<HandOffReply> decodeReleaseGrant(const StatusOr<RedisValue>& reply, std::string_view node);
StatusOr<LockState> decodeInspect(const StatusOr<RedisValue>& reply, std::string_view node);
StatusOr<ForcedRelease> decodeForceRelease(const StatusOr<RedisValue>& reply,
                                           std::string_view node);

}  // namespace sidelock::backend
