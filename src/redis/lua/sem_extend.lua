-- sem_extend: a permit gets a new TTL.
--
-- KEYS[1]  p{name}:sem        the permits: permit id -> expiry (ms, Redis time)
-- KEYS[2]  p{name}:sem:token  the semaphore's own fencing counter
-- KEYS[3]  p{name}:sem:limit  its limit while permits are held
-- KEYS[4]  p{name}:sem:holders  the permits' holders (lib/lease_labels.lua)
-- ARGV     permit, ttl_ms, counter_ttl_ms
-- Replies  {1, 0, ttl, used}       extended
--          {-1, 0, 0}              no such live permit
--! reply: semaphore
--! include lib/clock.lua
--! include lib/keep_for.lua
--! include lib/lease_labels.lua

local now = nowMs()
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) <= now then
  return {-1, 0, 0}
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[3], keepFor(ttl))
if redis.call('HMGET', KEYS[4], ARGV[1])[1] then followLeases(KEYS[4], ttl) end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {1, 0, ttl, redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')}
