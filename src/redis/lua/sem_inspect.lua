-- sem_inspect: a semaphore's state (permits used, limit, last token).
--
-- KEYS[1]  p{name}:sem        the permits: permit id -> expiry (ms, Redis time)
-- KEYS[2]  p{name}:sem:token  the semaphore's own fencing counter
-- KEYS[3]  p{name}:sem:limit  its limit while permits are held
-- KEYS[4]  p{name}:sem:holders  the permits' holders (lib/lease_labels.lua)
-- ARGV     max_holders
-- Replies  {1, last token, 0, used, limit, holders}   permits are held; holders: up to
--          max_holders "<since_ms> <ttl_ms> <label>" of the live permits that recorded one
--          {-1, last token, 0, 0, 0}         none
--
-- Read-only: live permits are counted, not cleaned up.
--! reply: semaphore
--! include lib/clock.lua
--! include lib/lease_labels.lua

local now = nowMs()
local token = tonumber(redis.call('GET', KEYS[2]) or '0')
local used = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
if used == 0 then
  return {-1, token, 0, 0, 0}
end
return {1, token, 0, used, tonumber(redis.call('GET', KEYS[3]) or '0'),
        listLabels(KEYS[1], KEYS[4], now, tonumber(ARGV[1]))}
