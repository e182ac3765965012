-- release: the owner gives its mutex lease back (one hold of a re-entered one); an election's
-- leader resigns.
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- KEYS[3]  p{name}:el:leader  elections only (KEYS[1..2] are then p{name}:el, p{name}:el:token):
--                           the leader's record, deleted with the lease; locks (mutex, fair):
--                           p{name}:holder, the holder record (lib/holder_record.lua)
-- KEYS[4]  p{name}:delay    locks only, and only for a lease that may have a lock-delay
--                           (lib/lock_delay.lua): cleared, or started by an involuntary release
-- ARGV     owner, channel, reason[, "sharded" | "-"[, "involuntary" | "-"[, token]]]
--          ("sharded": Redis Cluster, SPUBLISH; "involuntary": the lease is given up, not
--          released: its lock-delay applies; token: release only the grant of this fencing token,
--          answered "not held" once the counter moved past it: a later grant, perhaps to the same
--          owner, is never released by a retry meant for an earlier one)
-- Replies  {1, 0, 0, holds left}   released (0: freed and announced; more: one hold given back)
--          {0, 0, holder PTTL}     held by another owner
--          {-1, 0, 0}              not held
--
-- Compare-and-delete: never GET then DEL from the client (another owner may win in between).
-- A re-entered lease gives back one hold and stays held (nothing announced).
--! reply: lock
--! include lib/holder.lua
--! include lib/announce.lua
--! include lib/lock_delay.lua
--! include lib/last_token.lua

if ARGV[6] and lastToken() ~= tonumber(ARGV[6]) then
  return {-1, 0, 0}
end
local reply = lastHoldOrReply()
if reply then
  return reply
end
redis.call('DEL', KEYS[1])
if KEYS[3] then
  redis.call('DEL', KEYS[3])
end
if KEYS[4] then
  if ARGV[5] == 'involuntary' then
    applyDelay()
  else
    clearDelay()
  end
end
announce(ARGV[2], ARGV[3], ARGV[4])
return {1, 0, 0, 0}
