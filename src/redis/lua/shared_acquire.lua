-- shared_acquire: a reader joins a read/write lock.
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- KEYS[3]  p{name}:readers  the readers: owner id -> expiry (ms, Redis time)
-- KEYS[4]  p{name}:writer   the queued writers' marks
-- KEYS[5]  p{name}:readers:holders  the readers' holders (lib/lease_labels.lua)
-- KEYS[6]  p{name}:delay    a writer's lock-delay (lib/lock_delay.lua; readers wait it out too)
-- ARGV     owner, ttl_ms, counter_arg, holder (a public label; empty: none), channel,
--          reason ("granted")[, "sharded"]: the first reader of a free lock is announced
--          (lib/announce.lua); later readers are not
-- Replies  {1, token, ttl, readers}   granted
--          {0, 0, holder PTTL, 0}     a writer holds the lock
--          {3, 0, PTTL, readers}      this reader holds a read lease already
--          {4, 0, ms, readers}        a queued writer's mark turns readers away
--          {5, 0, delay PTTL}         free, but a writer's lock-delay runs (its lease ended
--                                     unreleased): readers are held back as writers are
--
-- A reader joins unless a writer holds the lock or waits for it. The first reader of a free lock
-- starts a new readers' set (members left over from an earlier one, e.g. after a force release,
-- are gone with it). A reader already holding a read lease is busy, as a mutex holder would be.
--! reply: shared
--! include lib/next_token.lua
--! include lib/clock.lua
--! include lib/readers.lua
--! include lib/lease_labels.lua
--! include lib/announce.lua
--! include lib/lock_delay.lua

local now = nowMs()
local v = redis.call('GET', KEYS[1])
if v and not readersHold(v) then
  return {0, 0, redis.call('PTTL', KEYS[1]), 0}
end
local delay = delayLeft()  -- (0 while anybody holds the lease: readers or a writer)
if delay > 0 then
  return {5, 0, delay}
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
  dropExpiredLabels(KEYS[3], KEYS[5], now)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
    return {3, 0, pttl, redis.call('ZCARD', KEYS[3])}  -- this reader holds a read lease
  end
else
  redis.call('DEL', KEYS[3], KEYS[5])
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[3], now + ttl, ARGV[1])
local keep = math.max(redis.call('PTTL', KEYS[1]), ttl)
redis.call('SET', KEYS[1], v or kReaders, 'PX', keep)
redis.call('PEXPIRE', KEYS[3], keep)
recordLabel(KEYS[5], ARGV[1], ARGV[4], keep)
local token = nextToken(ARGV[3])
if not v then
  announce(ARGV[5], ARGV[6], ARGV[7])
end
return {1, token, ttl, redis.call('ZCARD', KEYS[3])}
