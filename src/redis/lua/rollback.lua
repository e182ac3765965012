-- rollback: Redlock's clean-up of a mutex acquire that was not granted (its vote lost, won with
-- no validity left, or its token sync failed): the attempt's own lease deleted where this node
-- holds it, announced as a roll-back, not a release.
--
-- KEYS[1]  p{name}          the lease: owner id, PX = its TTL
-- KEYS[2]  p{name}:holder   the holder record (lib/holder_record.lua), deleted with the lease
-- KEYS[3]  p{name}:granted  the grant record (lib/grant_record.lua): read, never written
-- KEYS[4]  p{name}:delay    the attempt's lock-delay (lib/lock_delay.lua; the last key), cleared
-- ARGV     owner, the token this node answered the attempt with ("0": no answer), the token the
--          won vote synced ("0": no sync was sent), channel, reason ("rolled_back")[, "sharded"]
-- Replies  {1, 0, 0, 0}   the attempt's lease deleted (and announced)
--          {0, 0, PTTL}   held by another owner (nothing deleted)
--          {-1, 0, 0}     the attempt holds nothing here: not held, or held by its owner id under
--                         another grant (the grant record names a token the attempt never had)
--
-- Where the node answered, the owner's lease is the attempt's only while the grant record names
-- the owner with one of the attempt's tokens: acquire.lua wrote the node's own, token_sync.lua
-- the synced one. A later grant to the same owner id (Dapr's fixed lockOwner) made here after the
-- attempt's key ran out has a token of its own and is left alone. Where the node's answer is
-- unknown (timed out, failed) no token is known, and the owner's lease is deleted as release.lua
-- did (the clean-up runs right after the late attempt, on the same connection). Nothing else
-- changes: the counter keeps the attempt's INCR (tokens only go up) and the grant record stays,
-- so reads answer as before. The reason tells event streams that no lease ended (a lease that
-- runs out after it is `expired`); waiters still wake, and an older sidecar, which does not know
-- the reason, takes it for a release.
--! reply: lock
--! include lib/holder.lua
--! include lib/announce.lua
--! include lib/lock_delay.lua
--! include lib/grant_record.lua

local v = redis.call('GET', KEYS[1])
if not v then
  return {-1, 0, 0}
end
if holderOf(v) ~= ARGV[1] then
  return {0, 0, redis.call('PTTL', KEYS[1])}
end
if ARGV[2] ~= '0' or ARGV[3] ~= '0' then
  local recorded = leaseToken(KEYS[3], ARGV[1])
  if not recorded or (recorded ~= tonumber(ARGV[2]) and recorded ~= tonumber(ARGV[3])) then
    return {-1, 0, 0}
  end
end
redis.call('DEL', KEYS[1], KEYS[2])
clearDelay()
announce(ARGV[4], ARGV[5], ARGV[6])
return {1, 0, 0, 0}
