-- election_leader: who leads an election (inspect): term, TTL and record; the owner id is never
-- revealed.
--
-- KEYS[1]  p{name}:el          the leader's lease: owner id, PX = its TTL
-- KEYS[2]  p{name}:el:token    the election's fencing counter (the term)
-- KEYS[3]  p{name}:el:leader   who leads: a hash {candidate, value, since_ms, term}
-- ARGV     (none)
-- Replies  {1, term, PTTL, candidate, value, since_ms}   a leader leads
--          {-1, last term, 0}                           nobody leads (0 if never elected)
--
-- The lease decides: a record a lapsed leader left behind is not read. A record missing under a
-- live lease (deleted by hand) reads as empty strings and since_ms 0.
--! reply: leader
--! include lib/last_token.lua

local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then
  return {-1, lastToken(), 0}
end
local record = redis.call('HMGET', KEYS[3], 'candidate', 'value', 'since_ms')
return {1, lastToken(), ttl, record[1] or '', record[2] or '', tonumber(record[3] or '0')}
