-- acquire_all: a multi-lock: every named mutex at once, or none.
--
-- KEYS     p{name}, p{name}:token of each name, in pairs
-- ARGV     owner, ttl_ms, counter_ttl_ms
-- Replies  {1, 0, ttl, token...}   every lock granted, one token per name (decodeAllOutcome())
--          {0, 0, holder PTTL, i}  the i-th name (1-based) is held; nothing changed
--
-- A multi-lock in one step: every lock is free, and then all are granted with a token each; or
-- the first held one is named and nothing changes.
--! reply: acquire_all
--! include lib/next_token.lua

for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return {0, 0, redis.call('PTTL', KEYS[i]), (i + 1) / 2}
  end
end
local reply = {1, 0, tonumber(ARGV[2])}
for i = 1, #KEYS, 2 do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  reply[#reply + 1] = nextTokenAt(KEYS[i + 1], ARGV[3])
end
return reply
