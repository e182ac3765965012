-- token_sync: Redlock brings a node's fencing counter to the token a quorum granted.
--
-- KEYS[1]  p{name}:token    the fencing counter (not the lease)
-- KEYS[2]  p{name}          the lease (only with ARGV[3]): owner id[, " <holds>"]
-- KEYS[3]  p{name}:readers  the readers (only with ARGV[3]): owner id -> expiry
-- ARGV     token, counter_ttl_ms[, expected, owner]
-- Replies  {1, 0, 0}
--
-- Without `expected`: raises the counter to at least ARGV[1] (never lowers it) and pushes its
-- expiry out to ARGV[2] (ms): lib/raise_counter.lua.
-- With `expected` (ARGV[3]) and `owner` (ARGV[4]): a node that granted `owner` its lease after
-- the vote was decided, its counter seeded above the token from its own clock, is set back to the
-- token, but only while it still holds that owner's lease (as the writer or a reader) and its
-- counter is still `expected`, the value its grant took. No other grant came through it since
-- (one would have replaced the lease, or INCRed the counter: Redlock serves no re-entry, which
-- answers the counter without INCR), so no token above the granted one ever came from it, and
-- every later majority still meets a node of the granting one, which counts from the token:
-- fencing tokens keep increasing. The lease is then counted alike on every node that holds it.
--! reply: lock
--! include lib/raise_counter.lua

if ARGV[3] then
  local owner = ARGV[4]
  local lease = redis.call('GET', KEYS[2])
  local holds = lease == owner or
      (lease and string.sub(lease, 1, #owner + 1) == owner .. ' ') or
      redis.call('ZSCORE', KEYS[3], owner) ~= false
  if holds and redis.call('GET', KEYS[1]) == ARGV[3] then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  end
  return {1, 0, 0}
end
raiseCounter(KEYS[1], ARGV[1], ARGV[2])
return {1, 0, 0}
