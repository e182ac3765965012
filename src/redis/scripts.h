// sidelock's Lua scripts and the Redis key / channel names they work on.
//
// Keys of lock `name` under prefix `p` (default "sidelock:"):
//   KEYS[1]  p{name}          the lease: value = owner id, PX = remaining TTL
//   KEYS[2]  p{name}:token    the fencing counter: INCR on every grant; expires
//                             tokenCounterTtlMs(locks.max_ttl_ms) after the last grant or extend
// The `{name}` hash tag keeps both keys of one lock in the same Redis Cluster slot. A lock key
// always ends with '}' and a counter key with ":token", so no name's lock key can equal another
// name's counter key. The lease's value is the owner id, then " <holds>" once a reentrant acquire
// took a second hold (owner ids have no spaces). Sidecars of versions before reentrant locks
// compare the whole value: mixed versions must not use reentrant acquires on the same names.
//
// Release channel: p + "released:{" + name + "}". Scripts PUBLISH what changed on it
// (backend::announcement: "released", "forced", "granted", "proclaimed", "rolled_back";
// lib/announce.lua); sidecars wake their local waiters on a release, a force release and a
// Redlock acquire's clean-up ("rolled_back", rollback.lua: a key was freed, no lease ended)
// (issue 4) and feed event streams on all. A payload from an older sidecar (the lock name), or
// one this version does not know, counts as a release.
//
// Fencing counters follow the clock (lib/next_token.lua). A missing counter (first grant of a
// name, Redis restarted without its data, the counter expired) is created at Redis's TIME in
// microseconds, and every grant raises a counter below the clock's floor to it: TIME in
// microseconds on one master (single Redis, Sentinel, Cluster), TIME's current second (in
// microseconds, plus one) on Redlock (ScriptContext::TokenFloor). A recreated counter therefore
// starts above every token handed out before, and a replica promoted after missing its master's
// last increments hands out tokens above theirs when its first grant comes later than the last
// lost one by more than the hosts' clock difference (Redlock: a second more), under these
// assumptions:
//  1. Redis's clock does not go back (across restarts and failovers) by more than the counter's
//     expiry margin: run NTP, slewing.
//  2. A counter never runs ahead of the clock: a name is granted fewer than once per microsecond
//     on average since its counter was seeded (Redis runs far fewer scripts than that).
//  3. Redlock: the nodes' clocks agree within the same margin (a token synced from a node whose
//     clock is ahead lands on the others; their counters expire no sooner than
//     tokenCounterTtlMs after that, so the margin covers the difference).
// Tokens are ~1.8e15 in 2026: below 2^53, so exact in Lua's doubles and in JavaScript numbers.
// Counters expire tokenCounterTtlMs after the last grant (extend, token sync), so one key per lock
// name no longer stays in Redis for good. A counter created before this scheme is raised to the
// floor and gets the expiry at its next grant.
//
// One reply contract for every script: {code, token, ttl[, holds]}, integers, decoded by
// decodeOutcome() into a backend::Outcome:
//   code  1 done (granted, released, extended, handed on; inspect: held; force release: deleted)
//         0 held by another owner (acquire: busy; release, extend, hand-off: not the owner)
//         3 acquire (mutex, reader, fair): busy, held by this owner already (a mutex acquire
//           without "reentrant"; a reader that holds a read lease)
//         4 reader acquire: busy, a queued writer's mark turns readers away
//         5 acquire (mutex, fair, reader): busy, nobody holds it but its lock-delay runs (ttl:
//           what is left of it; lib/lock_delay.lua)
//        -1 not held (no lease: expired, released, never granted)
//   token the grant's fencing token (acquire, hand-off); the lock's last token (inspect, force
//         release: the counter, 0 if none); 0 otherwise
//   ttl   code 1: the lease's TTL (acquire, hand-off: as granted; extend, inspect: PTTL);
//         code 0: the holder's PTTL (-1: a key without expiry, unknown); force release: the
//         lock-delay it started (ms, 0: none); 0 otherwise
//   holds code 1 of acquire, extend, hand-off: the lease's holds (1 unless re-entered); release:
//         the holds left (0: freed; a hand-off with holds left hands nothing on, token 0)
//
// Each script's KEYS, ARGV and replies are stated in the header of its file,
// src/redis/lua/<name>.lua (one script per file; the pieces several scripts share are in
// src/redis/lua/lib/). src/redis/lua/embed.cmake compiles them in: ScriptId (generated
// redis/script_id.h, one id per file) and scriptSource() (name, reply shape, text).
//
// Semaphores (KEYS: p{name}:sem, p{name}:sem:token, p{name}:sem:limit). A permit is a member of the
// sorted set scored with its expiry (Redis TIME, ms); expired members are dropped by the writing
// scripts, both keys live as long as the longest permit and vanish with the last one. Replies
// carry two more fields, {code, token, ttl, used, limit}, and code 2: another limit while
// permits are held (ScriptReply::kSemaphore).
//
// Read/write locks' readers (shared_*.lua) answer their count as the 4th field
// (ScriptReply::kShared); acquire_all.lua has a reply of its own (decodeAllOutcome()).
//
// Elections (KEYS: p{name}:el, p{name}:el:token, p{name}:el:leader): a mutex lease under keys of
// their own, whose grant's token is the term, plus a hash recording who leads (candidate, value,
// since_ms, term). Renew and resign are extend.lua and release.lua (given the record as KEYS[3]);
// campaign, proclaim and inspect are election_*.lua, whose replies may carry the record
// (ScriptReply::kLeader): campaign {1, term, ttl, 1, since_ms}, proclaim {1, term, PTTL, 1},
// inspect {1, term, PTTL, candidate, value, since_ms, lease} (bulk strings for the three texts;
// lease: the SHA-1 of the leader's owner id once Redlock's token sync wrote the quorum's term into
// the record, else empty; Redlock compares it across nodes). Redlock's
// token sync of an election is election_sync.lua (the record's term and since_ms as decided).
//
// Kinds and keys: a lock kind owns its keys. The mutex keeps the layout above (`p{name}`,
// `p{name}:token`) so that sidecars of older versions and this one, run side by side during a
// rolling upgrade, still exclude each other; a kind added later puts its kind in its keys
// (`p{name}:<kind>...`), so one name used as two kinds never meets WRONGTYPE.
//
// The scripts are handed to every RedisNode as its script set (sidelockScripts(), indexed by
// ScriptId), loaded with SCRIPT LOAD when a node connects and run with EVALSHA; a NOSCRIPT reply
// (SCRIPT FLUSH, failover to a replica without the script) is retried once with EVAL, which runs
// the script and caches it again (RedisConnection does this transparently).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "redis/redis_node.h"
#include "redis/script_id.h"  // generated from src/redis/lua/*.lua

namespace sidelock::backend {

/// What a script's reply carries besides {code, token, ttl[, holds]} (its file's "--! reply:"
/// line), for decodeOutcome().
enum class ScriptReply : uint8_t {
  kLock,        // {code, token, ttl[, holds]}: the contract above
  kSemaphore,   // {code, token, ttl[, used[, limit]]}
  kShared,      // {code, token, ttl[, readers]}
  kLeader,      // elections: {code, term, ttl[, 1[, since_ms]]} or the record (decodeOutcome())
  kAcquireAll,  // decodeAllOutcome()'s
};

/// One script as src/redis/lua/embed.cmake compiled it in from src/redis/lua/<name>.lua.
struct ScriptSource {
  std::string_view name;  // the file name without ".lua": logs, errors, SCRIPT LOAD failures
  ScriptReply reply;
  std::string_view text;  // the Lua sent to Redis: the pieces included, the header left out
};
/// Generated (build/src/generated/redis/script_table.cc).
const ScriptSource& scriptSource(ScriptId id);

/// Lua source of one script.
std::string_view scriptText(ScriptId id);

/// How long a fencing counter outlives the last grant of its name: locks.max_ttl_ms (every lease
/// granted from it has expired by then, unless renewed) plus a margin for clock differences
/// between Redis servers and clock steps (see the assumptions above).
inline constexpr int64_t kTokenCounterMarginMs = 60'000;
int64_t tokenCounterTtlMs(int64_t max_ttl_ms);

/// Short name for logs and errors ("acquire"): its file's name.
const char* scriptName(ScriptId id);
/// Whether the script works on a semaphore (its 4th and 5th reply fields: used, limit).
bool isSemaphoreScript(ScriptId id);
/// Whether the script works on the readers of a read/write lock (its 4th field: readers).
bool isSharedScript(ScriptId id);
/// The script set for RedisNodeOptions::scripts (one shared instance).
std::shared_ptr<const RedisScriptSet> sidelockScripts();

/// KEYS[1]: `<prefix>{<name>}`.
std::string lockKey(std::string_view prefix, std::string_view name);
/// KEYS[2]: `<prefix>{<name>}:token`.
std::string tokenKey(std::string_view prefix, std::string_view name);
/// Semaphore keys: `<prefix>{<name>}:sem` (permits: a sorted set of permit id -> expiry in ms of
/// Redis time), `<prefix>{<name>}:sem:token` (its own fencing counter: the mutex of the same name
/// keeps "the counter is the holder's token while held", which re-entries rely on) and
/// `<prefix>{<name>}:sem:limit`.
std::string semaphoreKey(std::string_view prefix, std::string_view name);
std::string semaphoreTokenKey(std::string_view prefix, std::string_view name);
std::string semaphoreLimitKey(std::string_view prefix, std::string_view name);
/// Readers of a read/write lock: `<prefix>{<name>}:readers` (a sorted set of reader owner id ->
/// expiry in ms of Redis time). The readers also hold KEYS[1] (see src/redis/lua/lib/readers.lua).
std::string readersKey(std::string_view prefix, std::string_view name);
/// The holders of the leases in a sorted set (`<prefix>{<name>}:readers:holders`,
/// `<prefix>{<name>}:sem:holders`): a hash owner id -> "<since_ms> <label>", as long as its
/// longest lease lives (src/redis/lua/lib/lease_labels.lua). Inspect answers the labels only.
std::string readerHoldersKey(std::string_view prefix, std::string_view name);
std::string permitHoldersKey(std::string_view prefix, std::string_view name);
/// `<prefix>{<name>}:writer`: queued writers wait for readers to leave (a sorted set: writer
/// owner id -> until when it turns new readers away, ms of Redis time); deleted when a queued
/// writer gets in, a writer's own entry removed when it leaves without the lock.
std::string writerMarkKey(std::string_view prefix, std::string_view name);
/// Fair locks: `<prefix>{<name>}:fair` (the queue: waiter owner id -> arrival in us of Redis
/// time) and `<prefix>{<name>}:fair:claims` (waiter -> until when it keeps its place, ms).
std::string fairQueueKey(std::string_view prefix, std::string_view name);
std::string fairClaimsKey(std::string_view prefix, std::string_view name);
/// Elections: `<prefix>{<name>}:el` (the leader's lease: owner id, PX = its TTL),
/// `<prefix>{<name>}:el:token` (the election's own fencing counter: the term) and
/// `<prefix>{<name>}:el:leader` (a hash: candidate, value, since_ms, term; expires with the
/// counter, deleted on resign). A lock of the same name never meets them.
std::string electionKey(std::string_view prefix, std::string_view name);
std::string electionTokenKey(std::string_view prefix, std::string_view name);
std::string electionLeaderKey(std::string_view prefix, std::string_view name);
/// `<prefix>{<name>}:holder`: a mutex lease's holder record ("<owner> <since_ms> <label>", the
/// lease's PX; src/redis/lua/lib/holder_record.lua): who holds it, as a public label, readable by
/// every sidecar (inspect, a busy acquire) without the owner id ever leaving Redis.
std::string holderRecordKey(std::string_view prefix, std::string_view name);
/// Redlock only: `<prefix>{<name>}:granted`, a node's grant record ("<token> <owner>", PX = the
/// counter's TTL; src/redis/lua/lib/grant_record.lua): the token of the lease the node holds (or
/// of the last grant), which its counter may not be (RedlockBackend, inspect).
std::string grantRecordKey(std::string_view prefix, std::string_view name);
/// ARGV[4] of the mutex extend script: the holder record (KEYS[3]) follows the lease's new TTL.
inline constexpr std::string_view kHolderFollowsLeaseArg = "lease";
/// ARGV[5] of the mutex extend script on Redlock: KEYS[4] is the grant record (grantRecordKey),
/// whose expiry is pushed out with the counter's.
inline constexpr std::string_view kGrantRecordArg = "granted";
/// The lock-delay of a mutex's lease (src/redis/lua/lib/lock_delay.lua): `<prefix>{<name>}:delay`,
/// its value the lease's lock_delay_ms, living that much longer than the lease; it exists only
/// for a lease acquired with lock_delay_ms > 0. Elections have none.
std::string lockDelayKey(std::string_view prefix, std::string_view name);
/// ARGV[5] of the release script: the lease ends involuntarily, its lock-delay applies.
inline constexpr std::string_view kInvoluntaryArg = "involuntary";
/// ARGV[5] of the acquire script: take one more hold if the owner holds the lease already.
inline constexpr std::string_view kReentrantArg = "reentrant";
/// ARGV[5] of the acquire script when ARGV[6] (writer_wait_ms) follows without re-entry.
inline constexpr std::string_view kNotReentrantArg = "-";
/// ARGV[4] of the release script on Redis Cluster: announce with SPUBLISH (sharded pub/sub).
inline constexpr std::string_view kShardedPublish = "sharded";
/// Pub/sub channel announcing releases of `name`: `<prefix>released:{<name>}`.
std::string releaseChannel(std::string_view prefix, std::string_view name);
/// Inverse of releaseChannel(); false if `channel` is not a release channel under `prefix`.
bool lockNameFromChannel(std::string_view prefix, std::string_view channel, std::string* name);

/// What a client may read of an error reply Redis gave a script: Redis's message without the
/// script's SHA and line ("... script: <sha>, on @user_script:12."; Redis 6: "Error running
/// script (call to f_<sha>): @user_script:12: ..."), which say nothing to a client and are logged
/// by the connection instead.
std::string clientVisibleRedisError(std::string_view redis_error);

/// The Status of an error reply to a script: kResourceExhausted "redis <node> is out of memory
/// (maxmemory reached): ..." for OOM (nothing was written: Redis refuses a script's first write),
/// else kInternal "redis <node>: <message>"; the message is clientVisibleRedisError()'s.
Status scriptErrorStatus(std::string_view node, std::string_view redis_error);

/// The one decoder of every script's reply (the contract above), shared by every Redis-speaking
/// backend. A non-OK input status is passed through; a Redis error reply becomes
/// scriptErrorStatus(); a reply of the wrong shape becomes kInternal.
StatusOr<Outcome> decodeOutcome(const StatusOr<RedisValue>& reply, ScriptId script,
                                std::string_view node);

/// The reply of the acquire_all script (multi-lock in one step; KEYS: lock, counter, holder record
/// and lock-delay key of each of `names` names, ARGV: owner, ttl_ms, counter argument, holder):
/// {1, 0, ttl, token...} granted, one token per name; {0, 0, ms, 1-based index of the first held
/// name} (ms: its holder's PTTL, or what is left of its lock-delay).
StatusOr<AllOutcome> decodeAllOutcome(const StatusOr<RedisValue>& reply, size_t names,
                                      std::string_view node);

/// What a backend needs to turn operations into script calls.
struct ScriptContext {
  std::string prefix;            // backend.key_prefix
  std::string counter_ttl_ms;    // tokenCounterTtlMs(locks.max_ttl_ms), as ARGV
  bool sharded_publish = false;  // Redis Cluster: announce releases with SPUBLISH
  /// Redlock: a mutex (writer) acquire and an inspect name the grant record (grantRecordKey).
  bool grant_records = false;
  /// The clock floor of a grant's token (lib/next_token.lua): Redis's TIME in microseconds on
  /// the one-master backends; its current second on Redlock, whose nodes read their own clocks
  /// and must agree on a grant's token to skip the token sync.
  enum class TokenFloor { kMicrosecond, kSecond };
  TokenFloor token_floor = TokenFloor::kMicrosecond;
};

/// The counter argument of the scripts that grant (lib/next_token.lua): counter_ttl_ms, then
/// " us" for the microsecond floor.
std::string grantCounterArg(const ScriptContext& ctx);

/// One operation as one script call: the script, its KEYS and ARGV, and the metric op. Kept in
/// fixed arrays (no allocation beyond the strings): every lock operation goes through here.
struct ScriptCall {
  ScriptId script = ScriptId::kInspect;
  NodeOp node_op = NodeOp::kOther;
  std::array<std::string, 6> keys;
  /// The most: a queued writer's acquire on Redis Cluster (owner, ttl, counter ttl, holder,
  /// re-entry, writer wait, lock-delay, channel, reason, "sharded") and a fair waiter's likewise.
  std::array<std::string, 10> args;
  uint8_t key_count = 0;
  uint8_t arg_count = 0;

  /// Views of keys / args for RedisNode::runScriptArgs; valid while this call is neither
  /// changed nor moved.
  struct Views {
    std::array<std::string_view, 6> keys;
    std::array<std::string_view, 10> args;
    RedisArgs keyArgs() const { return {keys.data(), key_count}; }
    RedisArgs argArgs() const { return {args.data(), arg_count}; }
    size_t key_count = 0;
    size_t arg_count = 0;
  };
  Views views() const;
};

/// The script that carries out `verb` on a lock of `kind` (src/redis/scripts.cc, kScript);
/// kFailedPrecondition for a pair no script serves (a semaphore's hand-off, say), never
/// another script in its place.
StatusOr<ScriptId> scriptFor(LockKind kind, Verb verb);
/// The script call that carries out `op`: scriptFor(op.kind, op.verb) with its KEYS and ARGV;
/// scriptFor()'s error for a pair no script serves.
StatusOr<ScriptCall> scriptCallFor(const Operation& op, const ScriptContext& ctx);
/// Redlock's token sync (token_sync.lua): `name`'s counter raised to at least `token`, and
/// `token` recorded as the lease's where `owner` holds it (as the last grant's elsewhere).
ScriptCall tokenSyncCall(std::string_view name, std::string_view owner, uint64_t token,
                         const ScriptContext& ctx);
/// Redlock's clean-up of a mutex acquire of `owner` on `name` that was not granted (rollback.lua):
/// the attempt's lease deleted where the node's grant record names the owner with `node_token`
/// (the node's answer) or `synced_token` (the won vote's sync); with both 0 (no answer, no sync)
/// wherever `owner` holds it. Announced backend::announcement::kRolledBack.
ScriptCall rollbackCall(std::string_view name, std::string_view owner, uint64_t node_token,
                        uint64_t synced_token, const ScriptContext& ctx);
/// Redlock's token sync of election `name` (election_sync.lua): its counter raised to `term`, and
/// `term` and `since_ms` written into the leader's record where `owner` still holds the lease
/// (announced there).
ScriptCall electionSyncCall(std::string_view name, std::string_view owner, uint64_t term,
                            int64_t since_ms, const ScriptContext& ctx);

}  // namespace sidelock::backend
