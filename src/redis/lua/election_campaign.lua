-- election_campaign: a candidate campaigns; elected, it leads for ttl_ms, recorded and announced.
--
-- KEYS[1]  p{name}:el          the leader's lease: owner id, PX = its TTL (no holds: no re-entry)
-- KEYS[2]  p{name}:el:token    the election's fencing counter: the last grant's token is the term
-- KEYS[3]  p{name}:el:leader   who leads: a hash {candidate, value, since_ms, term}
-- ARGV     owner, ttl_ms, counter_arg, candidate, value, channel, reason[, "sharded"]
-- Replies  {1, term, ttl, 1, since_ms}   elected (since_ms: Redis TIME, Unix ms)
--          {0, 0, holder PTTL}           another candidate leads
--          {3, 0, PTTL}                  this owner leads already
--
-- The lease, the term and the record are written in one script, so nobody reads a leader without
-- its record, and a lost campaign burns no term. The term comes from lib/next_token.lua: seeded
-- from Redis TIME in us, so it never goes back, even after Redis restarted empty. The record
-- replaces whatever a lapsed leader left there and expires with the counter (extend.lua pushes
-- both out, release.lua deletes it). The numbers are written as strings with all their digits (a
-- Lua number passed to Redis keeps 14). A grant is announced on the release channel: observers
-- and waiting candidates everywhere read the new leader at once.
--! reply: leader
--! include lib/next_token.lua
--! include lib/clock.lua
--! include lib/announce.lua

if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local term = nextToken(ARGV[3])
  local since = nowMs()
  redis.call('DEL', KEYS[3])
  redis.call('HSET', KEYS[3], 'candidate', ARGV[4], 'value', ARGV[5],
             'since_ms', string.format('%.0f', since), 'term', string.format('%.0f', term))
  redis.call('PEXPIRE', KEYS[3], counterTtl(ARGV[3]))
  announce(ARGV[6], ARGV[7], ARGV[8])
  return {1, term, tonumber(ARGV[2]), 1, since}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return {3, 0, redis.call('PTTL', KEYS[1])}
end
return {0, 0, redis.call('PTTL', KEYS[1])}
