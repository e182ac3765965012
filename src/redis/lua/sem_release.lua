-- sem_release: gives a permit back.
--
-- KEYS[1]  p{name}:sem        the permits: permit id -> expiry (ms, Redis time)
-- KEYS[2]  p{name}:sem:token  the semaphore's own fencing counter
-- KEYS[3]  p{name}:sem:limit  its limit while permits are held
-- KEYS[4]  p{name}:sem:holders  the permits' holders (lib/lease_labels.lua)
-- ARGV     permit, channel, reason[, "sharded"]
-- Replies  {1, 0, 0, used}         released (announced like a release)
--          {-1, 0, 0}              no such live permit
--! reply: semaphore
--! include lib/clock.lua
--! include lib/announce.lua
--! include lib/lease_labels.lua

local now = nowMs()
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
dropExpiredLabels(KEYS[1], KEYS[4], now)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not expiry or tonumber(expiry) <= now then
  return {-1, 0, 0}
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
local used = redis.call('ZCARD', KEYS[1])
if used == 0 then
  redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
end
announce(ARGV[2], ARGV[3], ARGV[4])
return {1, 0, 0, used}
