-- token_sync: Redlock raises a node's fencing counter to the token a quorum granted.
--
-- KEYS[1]  p{name}:token    the fencing counter (not the lease)
-- ARGV     token, counter_ttl_ms
-- Replies  {1, 0, 0}
--
-- Redlock's token sync: raises a node's fencing counter to at least ARGV[1] (never lowers it) and
-- pushes its expiry out to ARGV[2] (ms). Comparing as Lua doubles is exact for counters below
-- 2^53; the value written is ARGV[1] itself (a string), never a formatted double.
--! reply: lock

local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return {1, 0, 0}
