-- token_sync: Redlock raises a node's fencing counter to the token a quorum granted, and records
-- that token as the lease's where the owner holds it.
--
-- KEYS[1]  p{name}:token    the fencing counter
-- KEYS[2]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[3]  p{name}:granted  the grant record (lib/grant_record.lua)
-- ARGV     token, counter_ttl_ms, owner
-- Replies  {1, 0, 0}
--
-- The counter is raised to at least ARGV[1] (never lowered) and its expiry pushed out to ARGV[2]
-- (ms): lib/raise_counter.lua. Where ARGV[3] holds the lease (a granting node, or one that
-- granted after the vote was decided, counting from its own counter), the grant record becomes
-- the decided token: what a read of the lease takes from this node.
--! reply: lock
--! include lib/raise_counter.lua
--! include lib/holder.lua
--! include lib/grant_record.lua

raiseCounter(KEYS[1], ARGV[1], ARGV[2])
local v = redis.call('GET', KEYS[2])
if v and holderOf(v) == ARGV[3] then
  recordGrant(KEYS[3], ARGV[1], ARGV[3], ARGV[2])
end
return {1, 0, 0}
