-- sem_inspect: a semaphore's state (permits used, limit, last token).
--
-- KEYS[1]  p{name}:sem        the permits: permit id -> expiry (ms, Redis time)
-- KEYS[2]  p{name}:sem:token  the semaphore's own fencing counter
-- KEYS[3]  p{name}:sem:limit  its limit while permits are held
-- ARGV     (none)
-- Replies  {1, last token, 0, used, limit}   permits are held
--          {-1, last token, 0, 0, 0}         none
--
-- Read-only: live permits are counted, not cleaned up.
--! reply: semaphore
--! include lib/clock.lua

local now = nowMs()
local token = tonumber(redis.call('GET', KEYS[2]) or '0')
local used = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
if used == 0 then
  return {-1, token, 0, 0, 0}
end
return {1, token, 0, used, tonumber(redis.call('GET', KEYS[3]) or '0')}
