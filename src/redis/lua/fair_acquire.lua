-- fair_acquire: a fair lock's acquire: joins (or keeps a place in) the queue, granted in turn.
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- KEYS[3]  p{name}:fair         the queue: waiter -> arrival (us, Redis time)
-- KEYS[4]  p{name}:fair:claims  waiter -> until when it keeps its place (ms, Redis time)
-- KEYS[5]  p{name}:holder        the holder record (lib/holder_record.lua)
-- KEYS[6]  p{name}:delay         the lock-delay (lib/lock_delay.lua)
-- ARGV     owner, ttl_ms, counter_arg, claim_ms, holder label ('' = none), other waiters
--          of this sidecar ('' = none), lock_delay_ms (0: none), channel, reason ("granted")[,
--          "sharded"]: a grant is announced (lib/announce.lua)
-- Replies  {1, token, ttl, 1}      granted
--          {0, 0, ms}              busy: the holder's PTTL, or the first waiter's claim
--          {3, 0, ms}              busy: this owner holds the lock already
--          {5, 0, ms}              busy: free, but a lock-delay runs (ms: what is left of it)
--          (a busy reply ends with "<since_ms> <label>" when the holder recorded one)
--
-- A waiter (ARGV[4] = claim_ms > 0) joins the queue or keeps its place, with the sidecar's other
-- waiters (ARGV[6], space-separated, in their local order) in the same step; a single try (claim
-- 0) never joins. The lock goes to the first of the queue only (to anybody while nobody waits).
-- Busy answers the holder's TTL, or, while the lock waits for the first waiter to take it, that
-- waiter's claim.
--! reply: lock
--! include lib/next_token.lua
--! include lib/clock.lua
--! include lib/fair_queue.lua
--! include lib/holder_record.lua
--! include lib/announce.lua
--! include lib/lock_delay.lua

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
  for w in string.gmatch(ARGV[6] or '', '%S+') do
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
local function withHolder(busy)
  busy[#busy + 1] = readHolder(KEYS[5], redis.call('GET', KEYS[1]))
  return busy
end
local delay = delayLeft()
if delay > 0 then
  return {5, 0, delay}  -- (after joining: a waiter keeps its place through the delay)
end
local first = redis.call('ZRANGE', KEYS[3], 0, 0)
if #first == 0 or first[1] == ARGV[1] then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.call('ZREM', KEYS[4], ARGV[1])
    recordHolder(KEYS[5], ARGV[1], ARGV[5], ARGV[2])
    startDelay(ARGV[2], ARGV[7])
    local token = nextToken(ARGV[3])
    announce(ARGV[8], ARGV[9], ARGV[10])
    return {1, token, tonumber(ARGV[2]), 1}
  end
  return withHolder({busyCode(), 0, redis.call('PTTL', KEYS[1])})
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  local until_first = tonumber(redis.call('ZSCORE', KEYS[4], first[1]) or now)
  pttl = math.max(until_first - now, 1)
end
return withHolder({busyCode(), 0, pttl})
