-- election_sync: Redlock's token sync of an election: the counter raised to the term the quorum
-- decided, and that term (and since when) written into the leader's record, then announced.
--
-- KEYS[1]  p{name}:el          the leader's lease: owner id, PX = its TTL
-- KEYS[2]  p{name}:el:token    the election's fencing counter
-- KEYS[3]  p{name}:el:leader   who leads: a hash {candidate, value, since_ms, term[, quorum]}
-- ARGV     owner, term, since_ms, counter_ttl_ms, channel, reason
-- Replies  {1, 0, 0}
--
-- Each node's campaign wrote its own counter's value as the term; the quorum's term is the
-- highest of the granting nodes' (redlock_backend.h). The counter is raised as token_sync.lua
-- does (lib/raise_counter.lua: never lowered). The record is rewritten only
-- while ARGV[1] still holds the lease here (owner-checked: a record of somebody else's lease is
-- never touched), so every node of the lease records the same term and since_ms, marked as the
-- quorum's (`quorum` = 1): a leader read counts only such records (election_leader.lua), never a
-- node's own provisional term from before the sync. The rewrite is announced: observers that
-- read the leader at the campaign's own announcement, before the sync, read it again.
--! reply: lock
--! include lib/raise_counter.lua
--! include lib/announce.lua

raiseCounter(KEYS[2], ARGV[2], ARGV[4])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('HSET', KEYS[3], 'term', ARGV[2], 'since_ms', ARGV[3], 'quorum', '1')
  if redis.call('PTTL', KEYS[3]) < 0 then  -- a record deleted by hand: never a key that stays
    redis.call('PEXPIRE', KEYS[3], ARGV[4])
  end
  announce(ARGV[5], ARGV[6])
end
return {1, 0, 0}
