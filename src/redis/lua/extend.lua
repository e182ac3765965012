-- extend: the owner's mutex lease gets a new TTL (an election's leader renews its term).
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- KEYS[3]  p{name}:el:leader  elections only (KEYS[1..2] are then p{name}:el, p{name}:el:token):
--                           the leader's record, which lives as long as the counter; locks
--                           (mutex, fair): p{name}:holder, the holder record, which lives as
--                           long as the lease (ARGV[4] = 'lease')
-- KEYS[4]  p{name}:granted  Redlock locks only (ARGV[5] = 'granted'): the grant record
--                           (lib/grant_record.lua), which lives as long as the counter
-- KEYS[#KEYS]  p{name}:delay  locks only, and only for a lease that may have a lock-delay
--                           (lib/lock_delay.lua): it follows the lease's new TTL
-- ARGV     owner, ttl_ms, counter_ttl_ms[, "lease"[, "granted"]]
-- Replies  {1, 0, PTTL, holds}     extended
--          {0, 0, holder PTTL}     held by another owner
--          {-1, 0, 0}              not held
--
-- PEXPIRE only an existing key we own: re-creating a missing key would silently re-acquire a lock
-- that expired and may since have been granted to (and released by) someone else. The counter's
-- expiry (ARGV[3]) is pushed out too, so it outlives a lease renewed past locks.max_ttl_ms; so are
-- an election's record (election_campaign.lua writes it) and a Redlock node's grant record.
--! reply: lock
--! include lib/holder.lua
--! include lib/lock_delay.lua

local holds, refused = ownHolds()
if not holds then
  return refused
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if KEYS[3] then
  redis.call('PEXPIRE', KEYS[3], ARGV[4] == 'lease' and ARGV[2] or ARGV[3])
end
local fixed_keys = 3  -- without the delay: the lease, the counter, the holder (or leader) record
if ARGV[5] == 'granted' then
  redis.call('PEXPIRE', KEYS[4], ARGV[3])
  fixed_keys = 4
end
if #KEYS > fixed_keys then
  pushDelay(ARGV[2])
end
return {1, 0, redis.call('PTTL', KEYS[1]), holds}
