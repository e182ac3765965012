-- shared_release: a reader leaves.
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- KEYS[3]  p{name}:readers
-- KEYS[4]  p{name}:readers:holders  the readers' holders (lib/lease_labels.lua)
-- ARGV     owner, channel, reason[, "sharded"]
-- Replies  {1, 0, 0, readers left}   released
--          {-1, 0, 0, 0}             no live read lease of this owner
--
-- The last reader out frees the lock and announces it (a waiting writer goes next).
--! reply: shared
--! include lib/clock.lua
--! include lib/readers.lua
--! include lib/readers_set.lua
--! include lib/lease_labels.lua
--! include lib/announce.lua

local now = nowMs()
if not readerExpiry(now) then
  return {-1, 0, 0, 0}
end
dropExpiredLabels(KEYS[3], KEYS[4], now)
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
local readers = keepForReaders(now)
if readers == 0 then
  redis.call('DEL', KEYS[4])
  announce(ARGV[2], ARGV[3], ARGV[4])
end
return {1, 0, 0, readers}
