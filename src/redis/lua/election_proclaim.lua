-- election_proclaim: the leader proclaims a new value: same term, same TTL; announced.
--
-- KEYS[1]  p{name}:el          the leader's lease: owner id, PX = its TTL
-- KEYS[2]  p{name}:el:token    the election's fencing counter (the term)
-- KEYS[3]  p{name}:el:leader   who leads: a hash {candidate, value, since_ms, term}
-- ARGV     owner, value, channel, reason[, "sharded"]
-- Replies  {1, term, PTTL, 1}    proclaimed (and announced); the term is the record's (the counter
--                                if the record lost it), as election_leader.lua reads it
--          {0, 0, holder PTTL}   another candidate leads
--          {-1, 0, 0}            nobody leads
--
-- Owner-checked like extend.lua, and the lease is left as it is. A record gone while its lease
-- lives (deleted by hand) gets the value again and the lease's expiry, never a key that stays.
--! reply: leader
--! include lib/holder.lua
--! include lib/last_token.lua
--! include lib/announce.lua

local holds, refused = ownHolds()
if not holds then
  return refused
end
local ttl = redis.call('PTTL', KEYS[1])
redis.call('HSET', KEYS[3], 'value', ARGV[2])
if redis.call('PTTL', KEYS[3]) < 0 then
  redis.call('PEXPIRE', KEYS[3], math.max(ttl, 1))
end
announce(ARGV[3], ARGV[4], ARGV[5])
local term = tonumber(redis.call('HMGET', KEYS[3], 'term')[1] or '0')
if term == 0 then
  term = lastToken()
end
return {1, term, ttl, 1}
