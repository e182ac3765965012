-- shared_inspect: a read/write lock's state.
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- KEYS[3]  p{name}:readers
-- KEYS[4]  p{name}:holder   the writer's holder record (lib/holder_record.lua)
-- KEYS[5]  p{name}:readers:holders  the readers' holders (lib/lease_labels.lua)
-- ARGV     max_holders
-- Replies  {1, last token, PTTL, readers, holders}   held by readers: their count and up to
--                                           max_holders "<since_ms> <ttl_ms> <label>"
--          {1, last token, PTTL, 0[, "<since_ms> <label>"]}   held by a writer (who, when it
--                                           recorded it)
--          {-1, last token, 0, 0}           free
--
-- Read-only.
--! reply: shared
--! include lib/clock.lua
--! include lib/readers.lua
--! include lib/holder_record.lua
--! include lib/lease_labels.lua

local token = tonumber(redis.call('GET', KEYS[2]) or '0')
local v = redis.call('GET', KEYS[1])
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
