#include "redis/scripts.h"

#include <algorithm>
#include <cstdlib>

namespace sidelock::backend {
namespace {

// The next fencing token of KEYS[2], shared by every script that grants. A missing counter (first
// grant of the name, Redis restarted empty, the counter expired) starts at Redis's TIME in
// microseconds, built as a string: above every token handed out before as long as the assumptions
// in scripts.h hold. Every grant then pushes the counter's expiry out to `counter_ttl_ms`. INCR's
// reply reaches Lua as a double: exact below 2^53 (TIME in us is ~1.8e15 in 2026, 2^53 is ~9e15,
// i.e. the year 2255), and a Lua number goes back to the client as an integer.
// redis.replicate_commands() lets Redis < 5 write after TIME (a no-op from Redis 5 on).
constexpr std::string_view kNextTokenLua = R"lua(
redis.replicate_commands()
local function nextTokenAt(counter, counter_ttl_ms)
  if redis.call('EXISTS', counter) == 0 then
    local now = redis.call('TIME')
    redis.call('SET', counter, now[1] .. string.format('%06d', tonumber(now[2])))
  end
  local token = redis.call('INCR', counter)
  redis.call('PEXPIRE', counter, counter_ttl_ms)
  return token
end
local function nextToken(counter_ttl_ms)
  return nextTokenAt(KEYS[2], counter_ttl_ms)
end
)lua";

// The lease's value is its owner id, followed by " <holds>" once a reentrant acquire took a
// second hold (owner ids never contain a space). One key per lease, as before: a hold count kept
// in a key of its own would be a key that mostly does not exist, and Redis Cluster answers
// TRYAGAIN to every script naming a missing key while its slot migrates.
constexpr std::string_view kHolderLua = R"lua(
local function holderOf(v)
  local sep = string.find(v, ' ', 1, true)
  if not sep then return v, 1 end
  return string.sub(v, 1, sep - 1), tonumber(string.sub(v, sep + 1))
end
local function setHolds(owner, holds, ttl)
  local v = owner
  if holds > 1 then v = owner .. ' ' .. holds end
  redis.call('SET', KEYS[1], v, 'PX', math.max(ttl, 1))
end
-- The owner check of release, extend and hand-off: the holds of ARGV[1]'s lease, or nil and the
-- reply for a lease that is not its (not held; held by another owner).
local function ownHolds()
  local v = redis.call('GET', KEYS[1])
  if not v then
    return nil, {-1, 0, 0}
  end
  local owner, holds = holderOf(v)
  if owner ~= ARGV[1] then
    return nil, {0, 0, redis.call('PTTL', KEYS[1])}
  end
  return holds
end
-- One hold of a re-entered lease given back: it stays held.
local function giveBackHold(holds)
  local ttl = redis.call('PTTL', KEYS[1])
  setHolds(ARGV[1], holds - 1, ttl)
  return {1, 0, ttl, holds - 1}
end
)lua";

// Announces a freed lock (or permit) to the waiters of every sidecar: PUBLISH, or on Redis Cluster
// (`sharded` = kShardedPublish) SPUBLISH: the channel carries the lock's `{name}` hash tag, so it
// stays in the script's slot and reaches only the subscribers of that shard instead of being
// broadcast over the cluster bus.
constexpr std::string_view kAnnounceLua = R"lua(
local function announce(channel, name, sharded)
  if sharded == 'sharded' then
    redis.call('SPUBLISH', channel, name)
  else
    redis.call('PUBLISH', channel, name)
  end
end
)lua";

// SET NX PX and the token run in one script so a grant and its fencing token are atomic: no other
// client can observe the lease without its token, and a failed SET never burns a token.
// Re-entry (ARGV[4] = 'reentrant') by the holder: one more hold, the same token (the counter's
// value: only grants move it, and every grant, extend and re-entry keeps it alive as long as the
// lease), a TTL never shorter than the lease has left.
constexpr std::string_view kAcquireBodyLua = R"lua(
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[5] then
    redis.call('DEL', KEYS[3])  -- a queued writer got in: readers may queue behind it again
  end
  return {1, nextToken(ARGV[3]), tonumber(ARGV[2]), 1}
end
-- Busy: who holds it tells a re-entry, and the caller's own lease (code 3) from another's.
local v = redis.call('GET', KEYS[1])
local owner, holds = holderOf(v)
if owner == ARGV[1] then
  if ARGV[4] ~= 'reentrant' then
    return {3, 0, redis.call('PTTL', KEYS[1])}
  end
  local ttl = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[2]))
  setHolds(owner, holds + 1, ttl)
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0'), ttl, holds + 1}
end
if v and ARGV[5] and readersHold(v) then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', nowMs())
  markWritersWaiting(tonumber(ARGV[5]), ARGV[1])
  return {0, 0, redis.call('PTTL', KEYS[1]), 1}
end
return {0, 0, redis.call('PTTL', KEYS[1])}
)lua";

// Compare-and-delete: never GET then DEL from the client (another owner may win in between).
// A re-entered lease gives back one hold and stays held (nothing announced).
constexpr std::string_view kReleaseBodyLua = R"lua(
local holds, refused = ownHolds()
if not holds then
  return refused
end
if holds > 1 then
  return giveBackHold(holds)
end
redis.call('DEL', KEYS[1])
announce(ARGV[2], ARGV[3], ARGV[4])
return {1, 0, 0, 0}
)lua";

// PEXPIRE only an existing key we own: re-creating a missing key would silently re-acquire a lock
// that expired and may since have been granted to (and released by) someone else. The counter's
// expiry (ARGV[3]) is pushed out too, so it outlives a lease renewed past locks.max_ttl_ms.
constexpr std::string_view kExtendBodyLua = R"lua(
local holds, refused = ownHolds()
if not holds then
  return refused
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {1, 0, redis.call('PTTL', KEYS[1]), holds}
)lua";

// Redlock's token sync: raises a node's fencing counter to at least ARGV[1] (never lowers it) and
// pushes its expiry out to ARGV[2] (ms). Comparing as Lua doubles is exact for counters below
// 2^53; the value written is ARGV[1] itself (a string), never a formatted double.
constexpr std::string_view kTokenSyncLua = R"lua(
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return {1, 0, 0}
)lua";

// The counter goes back as a Lua number (a double): exact below 2^53 (see nextToken).
constexpr std::string_view kLastTokenLua = R"lua(
local function lastToken()
  return tonumber(redis.call('GET', KEYS[2]) or '0')
end
)lua";

constexpr std::string_view kInspectBodyLua = R"lua(
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {1, lastToken(), redis.call('PTTL', KEYS[1])}
end
return {-1, lastToken(), 0}
)lua";

// Release with hand-off: the next owner's grant replaces ours in the same step, with the next
// fencing token (as acquire would give it). No PUBLISH: the lock never became free. A re-entered
// lease gives back one hold and hands nothing on (token 0).
constexpr std::string_view kReleaseGrantBodyLua = R"lua(
local holds, refused = ownHolds()
if not holds then
  return refused
end
if holds > 1 then
  return giveBackHold(holds)
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {1, nextToken(ARGV[4]), tonumber(ARGV[3]), 1}
)lua";

// An operator's force release: delete the lease whoever holds it and announce it like a release.
// The counter is read, never changed (the next grant gets the next token).
constexpr std::string_view kForceReleaseBodyLua = R"lua(
if redis.call('DEL', KEYS[1]) == 1 then
  announce(ARGV[1], ARGV[2], ARGV[3])
  return {1, lastToken(), 0}
end
return {-1, lastToken(), 0}
)lua";

// Redis's clock (TIME, in ms) for semaphore permits, readers and the writer-waiting mark, so
// sidecars never compare their own clocks; replicate_commands() lets Redis < 5 write after TIME.
constexpr std::string_view kClockLua = R"lua(
redis.replicate_commands()
local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
)lua";

// Semaphores: the permits' key lives as long as its longest permit.
constexpr std::string_view kKeepForLua = R"lua(
local function keepFor(ttl)
  local keep = math.max(redis.call('PTTL', KEYS[1]), ttl)
  redis.call('PEXPIRE', KEYS[1], keep)
  return keep
end
)lua";

// Read/write locks. Readers hold the lock's own key (KEYS[1], where a writer's owner id would be)
// with a value no owner id can have: "\tshared" (owner ids are printable ASCII), expiring with the
// last reader; so every mutex script, of this version or an older one, sees a lock held by
// somebody else and a writer simply is the mutex holder. The readers themselves are members of
// p{name}:readers, scored with their expiry. A queued writer that readers turn away marks itself
// in p{name}:writer (a sorted set: writer owner id -> until when its mark lasts, Redis time in
// ms); the set is deleted when a queued writer gets in, and a writer that leaves without the lock
// removes its own mark (marking the writers still queued on its sidecar instead). While a mark
// lives, new readers are turned away, even from a free lock, so neither a steady stream of
// readers nor readers queued on other sidecars (who may hear the last reader's release first)
// can starve it.
constexpr std::string_view kReadersLua = R"lua(
local kReaders = '\tshared'
local function readersHold(v)
  return string.sub(v, 1, #kReaders) == kReaders
end
-- How long (ms) the writers' marks KEYS[k] keep readers out; 0 if none lives.
local function writerMarkMs(k, now)
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', now)
  local last = redis.call('ZRANGE', KEYS[k], -1, -1, 'WITHSCORES')
  if #last == 0 then
    return 0
  end
  return math.max(tonumber(last[2]) - now, 1)
end
-- A writer's acquire and withdraw: KEYS[3] is the writers' marks; `writers` space-separated
-- owner ids, each marked waiting for `ms` from now.
local function markWritersWaiting(ms, writers)
  local now = nowMs()
  local until_ms = string.format('%.0f', now + ms)
  for w in string.gmatch(writers, '%S+') do
    redis.call('ZADD', KEYS[3], until_ms, w)
  end
  if redis.call('PTTL', KEYS[3]) < ms then
    redis.call('PEXPIRE', KEYS[3], ms)
  end
end
)lua";

// The readers' set, for the readers' own scripts (a writer's acquire needs only the mark above).
constexpr std::string_view kReadersSetLua = R"lua(
-- The readers' key lives as long as its longest reader: after a reader left or shortened its
-- lease, a writer waits no longer than the readers still there. Frees the lock with the last.
local function keepForReaders(now)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', KEYS[1], KEYS[3])
    return 0
  end
  local keep = math.max(tonumber(last[2]) - now, 1)
  redis.call('PEXPIRE', KEYS[1], keep)
  redis.call('PEXPIRE', KEYS[3], keep)
  return redis.call('ZCARD', KEYS[3])
end
-- The expiry of reader ARGV[1], or nil when it holds no live read lease.
local function readerExpiry(now)
  local v = redis.call('GET', KEYS[1])
  if not v or not readersHold(v) then
    return nil
  end
  local expiry = redis.call('ZSCORE', KEYS[3], ARGV[1])
  if not expiry or tonumber(expiry) <= now then
    return nil
  end
  return tonumber(expiry)
end
)lua";

// A reader joins unless a writer holds the lock or waits for it. The first reader of a free lock
// starts a new readers' set (members left over from an earlier one, e.g. after a force release,
// are gone with it). A reader already holding a read lease is busy, as a mutex holder would be.
constexpr std::string_view kSharedAcquireBodyLua = R"lua(
local now = nowMs()
local v = redis.call('GET', KEYS[1])
if v and not readersHold(v) then
  return {0, 0, redis.call('PTTL', KEYS[1]), 0}
end
local mark = writerMarkMs(4, now)
if mark > 0 then
  -- A writer waits (code 4): no new reader, until it got in (and out) or its mark ran out.
  if not v then
    return {4, 0, mark, 0}
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  return {4, 0, math.max(math.min(mark, redis.call('PTTL', KEYS[1])), 1),
          redis.call('ZCARD', KEYS[3])}
end
if v then
  local pttl = redis.call('PTTL', KEYS[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
    return {3, 0, pttl, redis.call('ZCARD', KEYS[3])}  -- this reader holds a read lease
  end
else
  redis.call('DEL', KEYS[3])
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[3], now + ttl, ARGV[1])
local keep = math.max(redis.call('PTTL', KEYS[1]), ttl)
redis.call('SET', KEYS[1], v or kReaders, 'PX', keep)
redis.call('PEXPIRE', KEYS[3], keep)
return {1, nextToken(ARGV[3]), ttl, redis.call('ZCARD', KEYS[3])}
)lua";

// The last reader out frees the lock and announces it (a waiting writer goes next).
constexpr std::string_view kSharedReleaseBodyLua = R"lua(
local now = nowMs()
if not readerExpiry(now) then
  return {-1, 0, 0, 0}
end
redis.call('ZREM', KEYS[3], ARGV[1])
local readers = keepForReaders(now)
if readers == 0 then
  announce(ARGV[2], ARGV[3], ARGV[4])
end
return {1, 0, 0, readers}
)lua";

constexpr std::string_view kSharedExtendBodyLua = R"lua(
local now = nowMs()
if not readerExpiry(now) then
  return {-1, 0, 0, 0}
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[3], 'XX', now + ttl, ARGV[1])
local readers = keepForReaders(now)
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {1, 0, ttl, readers}
)lua";

// Read-only: held by readers (their count) or by a writer (0 readers), or free.
constexpr std::string_view kSharedInspectBodyLua = R"lua(
local token = tonumber(redis.call('GET', KEYS[2]) or '0')
local v = redis.call('GET', KEYS[1])
if not v then
  return {-1, token, 0, 0}
end
local readers = 0
if readersHold(v) then
  readers = redis.call('ZCOUNT', KEYS[3], '(' .. nowMs(), '+inf')
end
return {1, token, redis.call('PTTL', KEYS[1]), readers}
)lua";

// Expired permits go first; a limit other than the semaphore's is refused while permits are held
// (an empty semaphore takes the new one); a full one answers when its first permit expires.
constexpr std::string_view kSemAcquireBodyLua = R"lua(
local now = nowMs()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local used = redis.call('ZCARD', KEYS[1])
local limit = tonumber(ARGV[3])
if used > 0 then
  -- A limit key lost while permits are held (evicted) proves nothing: refuse rather than
  -- let another limit in.
  local current = tonumber(redis.call('GET', KEYS[3]) or '0')
  if current ~= limit then
    return {2, 0, 0, used, current}
  end
end
if used >= limit then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, 0, math.max(tonumber(first[2]) - now, 1), used, limit}
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('SET', KEYS[3], limit, 'PX', keepFor(ttl))
return {1, nextToken(ARGV[4]), ttl, used + 1, limit}
)lua";

constexpr std::string_view kSemReleaseBodyLua = R"lua(
local now = nowMs()
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not expiry or tonumber(expiry) <= now then
  return {-1, 0, 0}
end
redis.call('ZREM', KEYS[1], ARGV[1])
local used = redis.call('ZCARD', KEYS[1])
if used == 0 then
  redis.call('DEL', KEYS[1], KEYS[3])
end
announce(ARGV[2], ARGV[3], ARGV[4])
return {1, 0, 0, used}
)lua";

constexpr std::string_view kSemExtendBodyLua = R"lua(
local now = nowMs()
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) <= now then
  return {-1, 0, 0}
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[3], keepFor(ttl))
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {1, 0, ttl, redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')}
)lua";

// Read-only: live permits are counted, not cleaned up.
constexpr std::string_view kSemInspectBodyLua = R"lua(
local now = nowMs()
local token = tonumber(redis.call('GET', KEYS[2]) or '0')
local used = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
if used == 0 then
  return {-1, token, 0, 0, 0}
end
return {1, token, 0, used, tonumber(redis.call('GET', KEYS[3]) or '0')}
)lua";

// Fair locks. KEYS[3] (p{name}:fair) is the queue: waiter owner id -> arrival (Redis time in us,
// kept from the first time it joined); KEYS[4] (p{name}:fair:claims) each waiter's claim: until
// when (Redis time in ms) it keeps its place without being renewed. Every fair script first
// drops the waiters whose claim lapsed, so a waiter that died, or whose sidecar did, stalls the
// queue for one claim at most. The lock itself is the mutex's key: the holder is a mutex holder.
constexpr std::string_view kFairQueueLua = R"lua(
local function dropLapsed(now)
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
  for _, w in ipairs(lapsed) do
    redis.call('ZREM', KEYS[3], w)
  end
  if #lapsed > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  end
end
)lua";

// A waiter (ARGV[4] = claim_ms > 0) joins the queue or keeps its place, with the sidecar's other
// waiters (ARGV[5], in their local order) in the same step; a single try (claim 0) never joins.
// The lock goes to the first of the queue only (to anybody while nobody waits). Busy answers the
// holder's TTL, or, while the lock waits for the first waiter to take it, that waiter's claim.
constexpr std::string_view kFairAcquireBodyLua = R"lua(
local now = nowMs()
dropLapsed(now)
local claim = tonumber(ARGV[4])
if claim > 0 then
  local t = redis.call('TIME')
  local arrival = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local until_ms = string.format('%.0f', now + claim)
  local function join(w)
    redis.call('ZADD', KEYS[3], 'NX', string.format('%.0f', arrival), w)
    redis.call('ZADD', KEYS[4], until_ms, w)
    arrival = arrival + 1
  end
  join(ARGV[1])
  for w in string.gmatch(ARGV[5] or '', '%S+') do
    join(w)
  end
  -- The queue lives as long as its longest claim (sidecars may use other claim lengths).
  local keep = math.max(redis.call('PTTL', KEYS[4]), claim)
  redis.call('PEXPIRE', KEYS[3], keep)
  redis.call('PEXPIRE', KEYS[4], keep)
end
-- Busy: code 3 when this owner holds the lock already (fair acquires never re-enter; the lease
-- may be a re-entered mutex lease, "<owner> <holds>"), else 0.
local function busyCode()
  local v = redis.call('GET', KEYS[1])
  if v and (v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ' ') then
    return 3
  end
  return 0
end
local first = redis.call('ZRANGE', KEYS[3], 0, 0)
if #first == 0 or first[1] == ARGV[1] then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.call('ZREM', KEYS[4], ARGV[1])
    return {1, nextToken(ARGV[3]), tonumber(ARGV[2]), 1}
  end
  return {busyCode(), 0, redis.call('PTTL', KEYS[1])}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  local until_first = tonumber(redis.call('ZSCORE', KEYS[4], first[1]) or now)
  pttl = math.max(until_first - now, 1)
end
return {busyCode(), 0, pttl}
)lua";

// A waiter that gave up leaves the queue. If it was first and the lock is free, the next waiter
// (of any sidecar) is told at once rather than when its claim's wait runs out.
constexpr std::string_view kFairWithdrawBodyLua = R"lua(
local now = nowMs()
dropLapsed(now)
local first = redis.call('ZRANGE', KEYS[3], 0, 0)
if redis.call('ZREM', KEYS[3], ARGV[1]) == 0 then
  return {-1, 0, 0}
end
redis.call('ZREM', KEYS[4], ARGV[1])
if first[1] == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 0 then
  announce(ARGV[2], ARGV[3], ARGV[4])
end
return {1, 0, 0}
)lua";

// A queued writer that leaves without the lock removes its mark (KEYS[3]); the writers still
// queued on its sidecar (ARGV[3]) are marked for ARGV[2] ms in its place. If no mark is left,
// readers turned away for it may come in: announced like a release, unless a writer holds the
// lock.
constexpr std::string_view kWriterWithdrawBodyLua = R"lua(
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', nowMs())
if redis.call('ZREM', KEYS[3], ARGV[1]) == 0 then
  return {-1, 0, 0}
end
markWritersWaiting(tonumber(ARGV[2]), ARGV[3])
if redis.call('EXISTS', KEYS[3]) == 0 then
  local v = redis.call('GET', KEYS[1])
  if not v or readersHold(v) then
    announce(ARGV[4], ARGV[5], ARGV[6])
  end
end
return {1, 0, 0}
)lua";

// A multi-lock in one step (KEYS: lock and counter of each name, in pairs): every lock is free,
// and then all are granted with a token each; or the first held one is named (1-based) and
// nothing changes.
constexpr std::string_view kAcquireAllBodyLua = R"lua(
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return {0, 0, redis.call('PTTL', KEYS[i]), (i + 1) / 2}
  end
end
local reply = {1, 0, tonumber(ARGV[2])}
for i = 1, #KEYS, 2 do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  reply[#reply + 1] = nextTokenAt(KEYS[i + 1], ARGV[3])
end
return reply
)lua";

constexpr std::string_view kChannelInfix = "released:{";

}  // namespace

std::string_view scriptText(ScriptId id) {
  auto join = [](std::initializer_list<std::string_view> parts) {
    std::string text;
    for (std::string_view p : parts) text.append(p);
    return text;
  };
  static const std::string kAcquireLua =
      join({kNextTokenLua, kHolderLua, kClockLua, kReadersLua, kAcquireBodyLua});
  static const std::string kReleaseLua = join({kHolderLua, kAnnounceLua, kReleaseBodyLua});
  static const std::string kExtendLua = join({kHolderLua, kExtendBodyLua});
  static const std::string kReleaseGrantLua =
      join({kNextTokenLua, kHolderLua, kReleaseGrantBodyLua});
  static const std::string kInspectLua = join({kLastTokenLua, kInspectBodyLua});
  static const std::string kSemAcquireLua =
      join({kNextTokenLua, kClockLua, kKeepForLua, kSemAcquireBodyLua});
  static const std::string kSemReleaseLua = join({kClockLua, kAnnounceLua, kSemReleaseBodyLua});
  static const std::string kSemExtendLua = join({kClockLua, kKeepForLua, kSemExtendBodyLua});
  static const std::string kSemInspectLua = join({kClockLua, kSemInspectBodyLua});
  static const std::string kForceReleaseLua =
      join({kLastTokenLua, kAnnounceLua, kForceReleaseBodyLua});
  static const std::string kSharedAcquireLua =
      join({kNextTokenLua, kClockLua, kReadersLua, kSharedAcquireBodyLua});
  static const std::string kSharedReleaseLua =
      join({kClockLua, kReadersLua, kReadersSetLua, kAnnounceLua, kSharedReleaseBodyLua});
  static const std::string kSharedExtendLua =
      join({kClockLua, kReadersLua, kReadersSetLua, kSharedExtendBodyLua});
  static const std::string kSharedInspectLua =
      join({kClockLua, kReadersLua, kSharedInspectBodyLua});
  static const std::string kFairAcquireLua =
      join({kNextTokenLua, kClockLua, kFairQueueLua, kFairAcquireBodyLua});
  static const std::string kAcquireAllLua = join({kNextTokenLua, kAcquireAllBodyLua});
  static const std::string kWriterWithdrawLua =
      join({kClockLua, kReadersLua, kAnnounceLua, kWriterWithdrawBodyLua});
  static const std::string kFairWithdrawLua =
      join({kClockLua, kFairQueueLua, kAnnounceLua, kFairWithdrawBodyLua});
  switch (id) {
    case ScriptId::kAcquire:
      return kAcquireLua;
    case ScriptId::kRelease:
      return kReleaseLua;
    case ScriptId::kExtend:
      return kExtendLua;
    case ScriptId::kInspect:
      return kInspectLua;
    case ScriptId::kTokenSync:
      return kTokenSyncLua;
    case ScriptId::kReleaseGrant:
      return kReleaseGrantLua;
    case ScriptId::kForceRelease:
      return kForceReleaseLua;
    case ScriptId::kSemAcquire:
      return kSemAcquireLua;
    case ScriptId::kSemRelease:
      return kSemReleaseLua;
    case ScriptId::kSemExtend:
      return kSemExtendLua;
    case ScriptId::kSemInspect:
      return kSemInspectLua;
    case ScriptId::kSharedAcquire:
      return kSharedAcquireLua;
    case ScriptId::kSharedRelease:
      return kSharedReleaseLua;
    case ScriptId::kSharedExtend:
      return kSharedExtendLua;
    case ScriptId::kSharedInspect:
      return kSharedInspectLua;
    case ScriptId::kFairAcquire:
      return kFairAcquireLua;
    case ScriptId::kFairWithdraw:
      return kFairWithdrawLua;
    case ScriptId::kWriterWithdraw:
      return kWriterWithdrawLua;
    case ScriptId::kAcquireAll:
      return kAcquireAllLua;
  }
  return {};
}

int64_t tokenCounterTtlMs(int64_t max_ttl_ms) {
  return std::max<int64_t>(max_ttl_ms, 0) + kTokenCounterMarginMs;
}

const char* scriptName(ScriptId id) {
  switch (id) {
    case ScriptId::kAcquire:
      return "acquire";
    case ScriptId::kRelease:
      return "release";
    case ScriptId::kExtend:
      return "extend";
    case ScriptId::kInspect:
      return "inspect";
    case ScriptId::kTokenSync:
      return "token_sync";
    case ScriptId::kReleaseGrant:
      return "release_grant";
    case ScriptId::kForceRelease:
      return "force_release";
    case ScriptId::kSemAcquire:
      return "sem_acquire";
    case ScriptId::kSemRelease:
      return "sem_release";
    case ScriptId::kSemExtend:
      return "sem_extend";
    case ScriptId::kSemInspect:
      return "sem_inspect";
    case ScriptId::kSharedAcquire:
      return "shared_acquire";
    case ScriptId::kSharedRelease:
      return "shared_release";
    case ScriptId::kSharedExtend:
      return "shared_extend";
    case ScriptId::kSharedInspect:
      return "shared_inspect";
    case ScriptId::kFairAcquire:
      return "fair_acquire";
    case ScriptId::kFairWithdraw:
      return "fair_withdraw";
    case ScriptId::kWriterWithdraw:
      return "writer_withdraw";
    case ScriptId::kAcquireAll:
      return "acquire_all";
  }
  return "unknown";
}

std::shared_ptr<const RedisScriptSet> sidelockScripts() {
  static const auto kSet = [] {
    auto set = std::make_shared<RedisScriptSet>();
    for (ScriptId id : kAllScripts) set->push_back({scriptName(id), std::string(scriptText(id))});
    return set;
  }();
  return kSet;
}

std::string lockKey(std::string_view prefix, std::string_view name) {
  std::string k;
  k.reserve(prefix.size() + name.size() + 2);
  k.append(prefix).append("{").append(name).append("}");
  return k;
}

std::string tokenKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":token";
}

std::string semaphoreKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":sem";
}

std::string semaphoreTokenKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":sem:token";
}

std::string semaphoreLimitKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":sem:limit";
}

std::string writerMarkKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":writer";
}

std::string readersKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":readers";
}

std::string fairQueueKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":fair";
}

std::string fairClaimsKey(std::string_view prefix, std::string_view name) {
  return lockKey(prefix, name) + ":fair:claims";
}

std::string releaseChannel(std::string_view prefix, std::string_view name) {
  std::string c;
  c.reserve(prefix.size() + kChannelInfix.size() + name.size() + 1);
  c.append(prefix).append(kChannelInfix).append(name).append("}");
  return c;
}

bool lockNameFromChannel(std::string_view prefix, std::string_view channel, std::string* name) {
  const size_t head = prefix.size() + kChannelInfix.size();
  if (channel.size() < head + 1 || channel.substr(0, prefix.size()) != prefix ||
      channel.substr(prefix.size(), kChannelInfix.size()) != kChannelInfix ||
      channel.back() != '}') {
    return false;
  }
  name->assign(channel.substr(head, channel.size() - head - 1));
  return true;
}

namespace {

bool isHexSha(std::string_view s) {
  return s.size() >= 40 && std::all_of(s.begin(), s.begin() + 40, [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// Removes every "<marker><40 hex digits><rest>" from `text`, where `rest` runs up to and
// including `end` (or to the end of the text).
void eraseShaClauses(std::string& text, std::string_view marker, std::string_view end) {
  for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at)) {
    const size_t sha = at + marker.size();
    if (!isHexSha(std::string_view(text).substr(sha))) {
      at = sha;
      continue;
    }
    const size_t stop = text.find(end, sha + 40);
    text.erase(at, stop == std::string::npos ? std::string::npos : stop + end.size() - at);
  }
}

// Removes the script's line numbers: "user_script:12: " (a Lua runtime error) and Redis 6's
// "@user_script:12: " / "@user_script: 12: ".
void eraseScriptLines(std::string& text) {
  static constexpr std::string_view kMarker = "user_script:";
  for (size_t at = text.find(kMarker); at != std::string::npos; at = text.find(kMarker, at)) {
    size_t i = at + kMarker.size();
    if (at > 0 && text[at - 1] == '@') --at;
    if (i < text.size() && text[i] == ' ') ++i;
    const size_t digits = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    if (i == digits || i + 1 >= text.size() || text[i] != ':' || text[i + 1] != ' ') {
      at = i;
      continue;
    }
    text.erase(at, i + 2 - at);
  }
}

Status badShape(std::string_view node, ScriptId script) {
  return internalError("redis " + std::string(node) + ": unexpected reply to the " +
                       scriptName(script) + " script");
}

}  // namespace

std::string clientVisibleRedisError(std::string_view redis_error) {
  std::string text(redis_error);
  // Redis 7: "<message> script: <sha>, on @user_script:<line>." appended to every error.
  eraseShaClauses(text, " script: ", ".");
  // Redis 6: "ERR Error running script (call to f_<sha>): @user_script:12: <message>".
  eraseShaClauses(text, "Error running script (call to f_", "): ");
  eraseScriptLines(text);
  while (!text.empty() && text.back() == ' ') text.pop_back();
  if (text.starts_with("ERR ") && text.size() > 4 && text[4] == '-') text.erase(0, 5);  // "-OOM"
  return text;
}

Status scriptErrorStatus(std::string_view node, std::string_view redis_error) {
  std::string message = clientVisibleRedisError(redis_error);
  if (message.starts_with("OOM ") || message.starts_with("-OOM ")) {
    if (message.front() == '-') message.erase(0, 1);
    return resourceExhausted("redis " + std::string(node) +
                             " is out of memory (maxmemory reached): " + message +
                             " Nothing was written; free memory on Redis or raise its maxmemory");
  }
  return internalError("redis " + std::string(node) + ": " + message);
}

bool isSharedScript(ScriptId id) {
  return id == ScriptId::kSharedAcquire || id == ScriptId::kSharedRelease ||
         id == ScriptId::kSharedExtend || id == ScriptId::kSharedInspect;
}

bool isSemaphoreScript(ScriptId id) {
  return id == ScriptId::kSemAcquire || id == ScriptId::kSemRelease || id == ScriptId::kSemExtend ||
         id == ScriptId::kSemInspect;
}

StatusOr<Outcome> decodeOutcome(const StatusOr<RedisValue>& reply, ScriptId script,
                                std::string_view node) {
  if (!reply.isOk()) return reply.status();
  const RedisValue& v = *reply;
  if (v.isError()) return scriptErrorStatus(node, v.str);
  if (script == ScriptId::kAcquireAll) return badShape(node, script);  // decodeAllOutcome's
  const bool semaphore = isSemaphoreScript(script);
  const bool shared = isSharedScript(script);
  const size_t max_fields = semaphore ? 5 : 4;
  if (v.type != RedisValue::Type::kArray || v.elements.size() < 3 ||
      v.elements.size() > max_fields) {
    return badShape(node, script);
  }
  for (const RedisValue& e : v.elements) {
    if (e.type != RedisValue::Type::kInteger || e.integer < -2) return badShape(node, script);
  }
  const int64_t code = v.elements[0].integer;
  const int64_t token = v.elements[1].integer;
  const int64_t ttl = v.elements[2].integer;
  const int64_t count = v.elements.size() >= 4 ? v.elements[3].integer : 0;
  const int64_t limit = v.elements.size() >= 5 ? v.elements[4].integer : 0;
  if (count < 0 || limit < 0) return badShape(node, script);
  const bool acquires = script == ScriptId::kAcquire || script == ScriptId::kSemAcquire ||
                        script == ScriptId::kSharedAcquire || script == ScriptId::kFairAcquire;
  Outcome o;
  if (semaphore || shared) {
    o.used = count;
    o.limit = limit;
  } else {
    o.holds = count;
  }
  switch (code) {
    case 1:
      o.code = OutcomeCode::kOk;
      // A grant always carries its token (and a mutex grant its holds); a hand-off without a
      // token only gave back a hold.
      if (acquires && token <= 0) return badShape(node, script);
      if ((script == ScriptId::kAcquire || script == ScriptId::kFairAcquire) && o.holds < 1) {
        return badShape(node, script);
      }
      if (script == ScriptId::kReleaseGrant && token <= 0 && o.holds < 1) {
        return badShape(node, script);
      }
      o.token = static_cast<uint64_t>(std::max<int64_t>(0, token));
      // PTTL -1 (no expiry: not a key of ours) reads as 0 left.
      o.validity_ms = std::max<int64_t>(0, ttl);
      return o;
    case 0:
      if (script == ScriptId::kInspect || script == ScriptId::kForceRelease ||
          script == ScriptId::kTokenSync || script == ScriptId::kFairWithdraw ||
          script == ScriptId::kWriterWithdraw || (semaphore && script != ScriptId::kSemAcquire) ||
          (shared && script != ScriptId::kSharedAcquire)) {
        return badShape(node, script);
      }
      o.code = acquires ? OutcomeCode::kBusy : OutcomeCode::kNotOwner;
      if (script == ScriptId::kAcquire) {  // its 4th field: the writers marked themselves
        o.writer_marked = o.holds == 1;
        o.holds = 0;
      }
      // PTTL -1: a key without expiry (not ours); unknown, so waiters fall back to their backoff.
      o.holder_ttl_ms = ttl >= 0 ? ttl : -1;
      return o;
    case -1:
      o.code = OutcomeCode::kNotHeld;
      o.token = static_cast<uint64_t>(std::max<int64_t>(0, token));
      return o;
    case 2:
      if (script != ScriptId::kSemAcquire) return badShape(node, script);
      o.code = OutcomeCode::kLimitMismatch;
      return o;
    case 3:
    case 4:
      if (script != ScriptId::kAcquire && script != ScriptId::kSharedAcquire &&
          script != ScriptId::kFairAcquire) {
        return badShape(node, script);
      }
      if (code == 4 && script != ScriptId::kSharedAcquire) return badShape(node, script);
      o.code = OutcomeCode::kBusy;
      o.busy_reason = code == 3 ? BusyReason::kHeldByYou : BusyReason::kWriterWaiting;
      o.holder_ttl_ms = ttl >= 0 ? ttl : -1;
      return o;
    default:
      return badShape(node, script);
  }
}

StatusOr<AllOutcome> decodeAllOutcome(const StatusOr<RedisValue>& reply, size_t names,
                                      std::string_view node) {
  if (!reply.isOk()) return reply.status();
  const RedisValue& v = *reply;
  if (v.isError()) return scriptErrorStatus(node, v.str);
  const Status bad = badShape(node, ScriptId::kAcquireAll);
  if (v.type != RedisValue::Type::kArray || v.elements.size() < 3) return bad;
  for (const RedisValue& e : v.elements) {
    if (e.type != RedisValue::Type::kInteger) return bad;
  }
  AllOutcome o;
  if (v.elements[0].integer == 1) {
    if (v.elements.size() != 3 + names) return bad;
    o.granted = true;
    o.validity_ms = std::max<int64_t>(0, v.elements[2].integer);
    for (size_t i = 3; i < v.elements.size(); ++i) {
      if (v.elements[i].integer <= 0) return bad;
      o.tokens.push_back(static_cast<uint64_t>(v.elements[i].integer));
    }
    return o;
  }
  if (v.elements[0].integer != 0 || v.elements.size() != 4 || v.elements[3].integer < 1 ||
      static_cast<size_t>(v.elements[3].integer) > names) {
    return bad;
  }
  o.holder_ttl_ms = v.elements[2].integer >= 0 ? v.elements[2].integer : -1;
  o.busy_index = static_cast<size_t>(v.elements[3].integer - 1);
  return o;
}

ScriptCall::Views ScriptCall::views() const {
  Views v;
  for (size_t i = 0; i < key_count; ++i) v.keys[i] = keys[i];
  for (size_t i = 0; i < arg_count; ++i) v.args[i] = args[i];
  v.key_count = key_count;
  v.arg_count = arg_count;
  return v;
}

ScriptCall scriptCallFor(const Operation& op, const ScriptContext& ctx) {
  const bool semaphore = op.kind == LockKind::kSemaphore;
  const bool shared = op.kind == LockKind::kShared;
  // A fair lock's acquire and withdraw work on its queue; its other verbs are the mutex's (the
  // same lease).
  const bool fair_queue =
      op.kind == LockKind::kFair && (op.verb == Verb::kAcquire || op.verb == Verb::kWithdraw);
  ScriptCall c;
  auto key = [&c](std::string k) { c.keys[c.key_count++] = std::move(k); };
  if (semaphore) {
    key(semaphoreKey(ctx.prefix, op.name));
    key(semaphoreTokenKey(ctx.prefix, op.name));
    key(semaphoreLimitKey(ctx.prefix, op.name));
  } else {
    key(lockKey(ctx.prefix, op.name));
    key(tokenKey(ctx.prefix, op.name));
    if (shared) {
      key(readersKey(ctx.prefix, op.name));
      if (op.verb == Verb::kAcquire) key(writerMarkKey(ctx.prefix, op.name));
    } else if (fair_queue) {
      key(fairQueueKey(ctx.prefix, op.name));
      key(fairClaimsKey(ctx.prefix, op.name));
    } else if ((op.verb == Verb::kAcquire && op.writer_wait_ms > 0) || op.verb == Verb::kWithdraw) {
      key(writerMarkKey(ctx.prefix, op.name));  // the queued writers' marks
    }
  }
  // The script of each verb per kind: mutex (and fair), semaphore, shared (readers).
  auto pick = [&](ScriptId mutex, ScriptId sem, ScriptId readers) {
    return semaphore ? sem : shared ? readers : mutex;
  };
  auto arg = [&c](std::string_view a) { c.args[c.arg_count++].assign(a); };
  // What a script that frees a lock needs to announce it: channel, name[, "sharded"].
  auto announceArgs = [&] {
    arg(releaseChannel(ctx.prefix, op.name));
    arg(op.name);
    if (ctx.sharded_publish) arg(kShardedPublish);
  };
  switch (op.verb) {
    case Verb::kAcquire:
      c.script = fair_queue
                     ? ScriptId::kFairAcquire
                     : pick(ScriptId::kAcquire, ScriptId::kSemAcquire, ScriptId::kSharedAcquire);
      c.node_op = NodeOp::kAcquire;
      arg(op.owner);
      arg(std::to_string(op.ttl_ms));
      if (semaphore) arg(std::to_string(op.limit));
      arg(ctx.counter_ttl_ms);
      if (fair_queue) {
        arg(std::to_string(std::max<int64_t>(0, op.claim_ms)));
        if (!op.also_waiting.empty()) arg(op.also_waiting);
        break;
      }
      if (semaphore || shared) break;
      if (op.reentrant) {
        arg(kReentrantArg);
      } else if (op.writer_wait_ms > 0) {
        arg(kNotReentrantArg);
      }
      if (op.writer_wait_ms > 0) arg(std::to_string(op.writer_wait_ms));
      break;
    case Verb::kRelease:
      c.script = pick(ScriptId::kRelease, ScriptId::kSemRelease, ScriptId::kSharedRelease);
      c.node_op = NodeOp::kRelease;
      arg(op.owner);
      announceArgs();
      break;
    case Verb::kExtend:
      c.script = pick(ScriptId::kExtend, ScriptId::kSemExtend, ScriptId::kSharedExtend);
      c.node_op = NodeOp::kExtend;
      arg(op.owner);
      arg(std::to_string(op.ttl_ms));
      arg(ctx.counter_ttl_ms);
      break;
    case Verb::kInspect:
      c.script = pick(ScriptId::kInspect, ScriptId::kSemInspect, ScriptId::kSharedInspect);
      c.node_op = NodeOp::kInspect;
      break;
    // Mutex verbs: the lock service hands off and force-releases mutexes only (another kind's
    // would be answered by its inspect script, changing nothing). A mutex force release frees
    // readers too: they hold the mutex's key.
    case Verb::kHandOff:
      c.script = pick(ScriptId::kReleaseGrant, ScriptId::kSemInspect, ScriptId::kSharedInspect);
      c.node_op = NodeOp::kRelease;
      if (semaphore || shared) break;
      arg(op.owner);
      arg(op.next_owner);
      arg(std::to_string(op.ttl_ms));
      arg(ctx.counter_ttl_ms);
      break;
    case Verb::kWithdraw:
      if (fair_queue) {
        c.script = ScriptId::kFairWithdraw;
        c.node_op = NodeOp::kRelease;
        arg(op.owner);
        announceArgs();
        break;
      }
      if (!semaphore && !shared) {  // a queued writer withdraws its mark
        c.script = ScriptId::kWriterWithdraw;
        c.node_op = NodeOp::kRelease;
        arg(op.owner);
        arg(std::to_string(std::max<int64_t>(1, op.writer_wait_ms)));
        arg(op.also_waiting);
        announceArgs();
        break;
      }
      // Readers and permits have nothing to leave: changes nothing here.
      c.script = pick(ScriptId::kInspect, ScriptId::kSemInspect, ScriptId::kSharedInspect);
      c.node_op = NodeOp::kInspect;
      break;
    case Verb::kForceRelease:
      c.script = pick(ScriptId::kForceRelease, ScriptId::kSemInspect, ScriptId::kSharedInspect);
      c.node_op = NodeOp::kRelease;
      if (semaphore || shared) break;
      announceArgs();
      break;
  }
  return c;
}

ScriptCall tokenSyncCall(std::string_view name, uint64_t token, const ScriptContext& ctx) {
  ScriptCall c;
  c.script = ScriptId::kTokenSync;
  c.node_op = NodeOp::kOther;
  c.keys[0] = tokenKey(ctx.prefix, name);
  c.key_count = 1;
  c.args[0] = std::to_string(token);
  c.args[1] = ctx.counter_ttl_ms;
  c.arg_count = 2;
  return c;
}

}  // namespace sidelock::backend
