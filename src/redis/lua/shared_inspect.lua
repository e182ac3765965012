-- shared_inspect: a read/write lock's state.
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- KEYS[3]  p{name}:readers
-- KEYS[4]  p{name}:holder   the writer's holder record (lib/holder_record.lua)
-- KEYS[5]  p{name}:readers:holders  the readers' holders (lib/lease_labels.lua)
-- KEYS[6]  p{name}:granted  Redlock only: the grant record (lib/grant_record.lua)
-- ARGV     max_holders
-- Replies  {1, token, PTTL, readers, holders}     held by readers: their count and up to
--                                           max_holders "<since_ms> <ttl_ms> <label>"
--          {1, token, PTTL, 0[, "<since_ms> <label>"]}   held by a writer (who, when it
--                                           recorded it)
--          {-1, token, 0, 0}                free
--
-- The token as inspect.lua's: the counter, or with a grant record (Redlock) while a writer holds
-- the lock, what the record says for the writer (readers hold many leases, each of its own token:
-- the counter is the last one's).
-- Read-only.
--! reply: shared
--! include lib/clock.lua
--! include lib/readers.lua
--! include lib/holder_record.lua
--! include lib/lease_labels.lua
--! include lib/holder.lua
--! include lib/grant_record.lua

local token = tonumber(redis.call('GET', KEYS[2]) or '0')
local v = redis.call('GET', KEYS[1])
if KEYS[6] and v and not readersHold(v) then
  token = leaseToken(KEYS[6], (holderOf(v))) or token
end
if not v then
  return {-1, token, 0, 0}
end
local readers = 0
if readersHold(v) then
  local now = nowMs()
  readers = redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf')
  if readers == 0 then
    -- The readers' key outlives the last reader's score by up to the millisecond between TIME
    -- and its PEXPIRE: nobody holds the lock (not a holder without readers, an exclusive one).
    return {-1, token, 0, 0}
  end
  return {1, token, redis.call('PTTL', KEYS[1]), readers,
          listLabels(KEYS[3], KEYS[5], now, tonumber(ARGV[1]))}
end
local held = {1, token, redis.call('PTTL', KEYS[1]), readers}
held[#held + 1] = readHolder(KEYS[4], v)
return held
