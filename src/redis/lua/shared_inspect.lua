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
-- The token as inspect.lua's: the counter, or with a grant record (Redlock) the writer's lease's
-- recorded token while a writer holds the lock and the last recorded token otherwise (readers
-- hold many leases, each of its own token).
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
if KEYS[6] then
  if v and not readersHold(v) then
    token = leaseToken(KEYS[6], (holderOf(v))) or token
  else
    token = lastGranted(KEYS[6]) or token
  end
end
if not v then
  return {-1, token, 0, 0}
end
local readers = 0
if readersHold(v) then
  local now = nowMs()
  readers = redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf')
  return {1, token, redis.call('PTTL', KEYS[1]), readers,
          listLabels(KEYS[3], KEYS[5], now, tonumber(ARGV[1]))}
end
local held = {1, token, redis.call('PTTL', KEYS[1]), readers}
held[#held + 1] = readHolder(KEYS[4], v)
return held
