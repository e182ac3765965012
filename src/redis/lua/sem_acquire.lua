-- sem_acquire: takes a permit of a semaphore.
--
-- KEYS[1]  p{name}:sem        the permits: permit id -> expiry (ms, Redis time)
-- KEYS[2]  p{name}:sem:token  the semaphore's own fencing counter
-- KEYS[3]  p{name}:sem:limit  its limit while permits are held
-- KEYS[4]  p{name}:sem:holders  the permits' holders (lib/lease_labels.lua)
-- ARGV     permit, ttl_ms, limit, counter_arg, holder (a public label; empty: none)
-- Replies  {1, token, ttl, used, limit}   granted
--          {0, 0, ms until the first permit expires, used, limit}   all permits taken
--          {2, 0, 0, used, limit of the semaphore}   another limit while permits are held
--
-- Expired permits go first; a limit other than the semaphore's is refused while permits are held
-- (an empty semaphore takes the new one); a full one answers when its first permit expires.
--! reply: semaphore
--! include lib/next_token.lua
--! include lib/clock.lua
--! include lib/keep_for.lua
--! include lib/lease_labels.lua

local now = nowMs()
dropExpiredLabels(KEYS[1], KEYS[4], now)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local used = redis.call('ZCARD', KEYS[1])
local limit = tonumber(ARGV[3])
if used > 0 then
  -- A limit key lost while permits are held (evicted) proves nothing: refuse rather than
  -- let another limit in.
  local current = tonumber(redis.call('GET', KEYS[3]) or '0')
  if current ~= limit then
    return {2, 0, 0, used, current}
  end
end
if used >= limit then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, 0, math.max(tonumber(first[2]) - now, 1), used, limit}
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('SET', KEYS[3], limit, 'PX', keepFor(ttl))
recordLabel(KEYS[4], ARGV[1], ARGV[5], ttl)
return {1, nextToken(ARGV[4]), ttl, used + 1, limit}
