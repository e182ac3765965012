-- acquire_all: a multi-lock: every named mutex at once, or none.
--
-- KEYS     p{name}, p{name}:token, p{name}:holder, p{name}:delay of each name, in fours
-- ARGV     owner, ttl_ms, counter_arg, holder (a public label; empty: none), reason
--          ("granted"), then each name's channel in the keys' order: every grant is announced
--          (lib/announce.lua), as a single acquire's is. (Only single-master backends run this
--          script, never Redis Cluster: plain PUBLISH.)
-- Replies  {1, 0, ttl, token...}   every lock granted, one token per name (decodeAllOutcome())
--          {0, 0, ms, i}           the i-th name (1-based) is held (ms: its PTTL) or in its
--                                  lock-delay (ms: what is left of it); nothing changed
--
-- A multi-lock in one step: every lock is free, and then all are granted with a token each (and
-- each records its holder as a single acquire does, lib/holder_record.lua); or the first held
-- one is named and nothing changes. A lock whose last lease ended unreleased less than its
-- lock_delay_ms ago is not free (lib/lock_delay.lua; the members take no delay of their own, so a
-- grant writes no delay key).
--! reply: acquire_all
--! include lib/next_token.lua
--! include lib/clock.lua
--! include lib/holder_record.lua
--! include lib/announce.lua

for i = 1, #KEYS, 4 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    return {0, 0, redis.call('PTTL', KEYS[i]), (i + 3) / 4}
  end
  if (tonumber(redis.call('GET', KEYS[i + 3]) or '0') or 0) > 0 then
    local left = redis.call('PTTL', KEYS[i + 3])
    if left > 0 then
      return {0, 0, left, (i + 3) / 4}
    end
  end
end
local reply = {1, 0, tonumber(ARGV[2])}
for i = 1, #KEYS, 4 do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  reply[#reply + 1] = nextTokenAt(KEYS[i + 1], ARGV[3])
  recordHolder(KEYS[i + 2], ARGV[1], ARGV[4], ARGV[2])
  announce(ARGV[6 + (i - 1) / 4], ARGV[5])
end
return reply
