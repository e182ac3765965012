-- shared_extend: a reader's lease gets a new TTL.
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- KEYS[3]  p{name}:readers
-- KEYS[4]  p{name}:readers:holders  the readers' holders (lib/lease_labels.lua)
-- ARGV     owner, ttl_ms, counter_ttl_ms
-- Replies  {1, 0, ttl, readers}      extended
--          {-1, 0, 0, 0}             no live read lease of this owner
--! reply: shared
--! include lib/clock.lua
--! include lib/readers.lua
--! include lib/readers_set.lua
--! include lib/lease_labels.lua

local now = nowMs()
if not readerExpiry(now) then
  return {-1, 0, 0, 0}
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[3], 'XX', now + ttl, ARGV[1])
local readers = keepForReaders(now)
followLeases(KEYS[4], ttl)
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {1, 0, ttl, readers}
