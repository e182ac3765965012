-- election_leader: who leads an election (inspect): term, TTL and record; the owner id is never
-- revealed.
--
-- KEYS[1]  p{name}:el          the leader's lease: owner id, PX = its TTL
-- KEYS[2]  p{name}:el:token    the election's fencing counter (the term)
-- KEYS[3]  p{name}:el:leader   who leads: a hash {candidate, value, since_ms, term[, quorum]}
-- ARGV     (none)
-- Replies  {1, term, PTTL, candidate, value, since_ms, lease}   a leader leads
--          {-1, last term, 0}                                  nobody leads (0 if never elected)
--
-- The lease decides: a record a lapsed leader left behind is not read. A record missing under a
-- live lease (deleted by hand) reads as empty strings, since_ms 0 and the counter as the term.
-- The term is the record's (Redlock's token sync writes the term the quorum decided there; on one
-- master it is the counter, which nothing moves while the lease lives). `lease` is the SHA-1 of
-- the leader's owner id once Redlock's token sync recorded the quorum's term here (the record's
-- `quorum` field, election_sync.lua), else empty (always on one master): Redlock counts the nodes
-- that hold the same lease with the decided term, and never a node's own provisional term,
-- without the owner id ever leaving the sidecar.
--! reply: leader
--! include lib/last_token.lua

local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then
  return {-1, lastToken(), 0}
end
local record = redis.call('HMGET', KEYS[3], 'candidate', 'value', 'since_ms', 'term', 'quorum')
local term = tonumber(record[4] or '0')
if term == 0 then
  term = lastToken()
end
local lease = ''
if record[5] then
  lease = redis.sha1hex(redis.call('GET', KEYS[1]))
end
return {1, term, ttl, record[1] or '', record[2] or '', tonumber(record[3] or '0'), lease}
