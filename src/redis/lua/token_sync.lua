-- token_sync: Redlock raises a node's fencing counter to the token a quorum granted.
--
-- KEYS[1]  p{name}:token    the fencing counter (not the lease)
-- ARGV     token, counter_ttl_ms
-- Replies  {1, 0, 0}
--
-- Redlock's token sync: raises a node's fencing counter to at least ARGV[1] (never lowers it) and
-- pushes its expiry out to ARGV[2] (ms): lib/raise_counter.lua.
--! reply: lock
--! include lib/raise_counter.lua

raiseCounter(KEYS[1], ARGV[1], ARGV[2])
return {1, 0, 0}
