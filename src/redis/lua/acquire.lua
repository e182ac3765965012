-- acquire: grants a mutex (a writer of a read/write lock, the holder of a fair lock).
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- KEYS[3]  p{name}:writer   the queued writers' marks (only with ARGV[6])
-- KEYS[#KEYS-2]  p{name}:granted  Redlock only: the grant record (lib/grant_record.lua), named
--                after the writer's marks (if any) and before the holder record
-- KEYS[#KEYS-1]  p{name}:holder  the holder record (lib/holder_record.lua)
-- KEYS[#KEYS]  p{name}:delay   the lock-delay (lib/lock_delay.lua; the last key)
-- ARGV     owner, ttl_ms, counter_arg, holder label ('' = none), "reentrant" | "-",
--          writer_wait_ms (> 0: a queued writer, which marks itself waiting if readers hold the
--          lock), lock_delay_ms (0: none), channel, reason ("granted")[, "sharded"]: a grant is
--          announced (lib/announce.lua)
-- Replies  {1, token, ttl, holds}  granted (holds > 1: re-entered, the same token)
--          {0, 0, holder PTTL}     held by another owner
--          (a busy reply ends with "<since_ms> <label>" when the holder recorded one)
--          {0, 0, PTTL, 1}         a queued writer: readers hold the lock, the writer is marked
--          {3, 0, PTTL}            held by this owner already (without "reentrant")
--          {5, 0, delay PTTL}      free, but a lock-delay runs (the last lease ended unreleased)
--
-- SET NX PX and the token run in one script so a grant and its fencing token are atomic: no
-- other client can observe the lease without its token, and a failed SET never burns a token.
-- Re-entry (ARGV[5] = 'reentrant') by the holder: one more hold, the same token (the counter's
-- value: only grants move it, and every grant, extend and re-entry keeps it alive as long as the
-- lease), a TTL never shorter than the lease has left.
--! reply: lock
--! include lib/next_token.lua
--! include lib/holder.lua
--! include lib/clock.lua
--! include lib/readers.lua
--! include lib/holder_record.lua
--! include lib/announce.lua
--! include lib/lock_delay.lua
--! include lib/grant_record.lua

local holder_key = KEYS[#KEYS - 1]
local writer_wait = tonumber(ARGV[6]) or 0
-- Without a grant record the keys are the lease, the counter, [the writers' marks,] the holder
-- record and the delay.
local grant_key = nil
if #KEYS > (writer_wait > 0 and 5 or 4) then grant_key = KEYS[#KEYS - 2] end
local delay = delayLeft()
if delay > 0 then
  return {5, 0, delay}
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if writer_wait > 0 then
    redis.call('DEL', KEYS[3])  -- a queued writer got in: readers may queue behind it again
  end
  recordHolder(holder_key, ARGV[1], ARGV[4], ARGV[2])
  startDelay(ARGV[2], ARGV[7])
  local token = nextToken(ARGV[3])
  if grant_key then recordGrant(grant_key, token, ARGV[1], counterTtl(ARGV[3])) end
  announce(ARGV[8], ARGV[9], ARGV[10])
  return {1, token, tonumber(ARGV[2]), 1}
end
-- Busy: who holds it tells a re-entry, and the caller's own lease (code 3) from another's.
local v = redis.call('GET', KEYS[1])
local owner, holds = holderOf(v)
if owner == ARGV[1] then
  if ARGV[5] ~= 'reentrant' then
    return {3, 0, redis.call('PTTL', KEYS[1])}
  end
  local ttl = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[2]))
  setHolds(owner, holds + 1, ttl)
  redis.call('PEXPIRE', holder_key, ttl)
  pushDelay(ttl)
  redis.call('PEXPIRE', KEYS[2], counterTtl(ARGV[3]))
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0'), ttl, holds + 1}
end
if v and writer_wait > 0 and readersHold(v) then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', nowMs())
  markWritersWaiting(writer_wait, ARGV[1])
  return {0, 0, redis.call('PTTL', KEYS[1]), 1}
end
local busy = {0, 0, redis.call('PTTL', KEYS[1])}
busy[#busy + 1] = readHolder(holder_key, v)
return busy
