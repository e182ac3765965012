-- release_grant: release that hands the mutex to the next waiter in one step.
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- KEYS[3]  p{name}:holder   the holder record (lib/holder_record.lua): the next owner's
-- KEYS[4]  p{name}:delay    the lock-delay (lib/lock_delay.lua; named only when the last or the
--                           next lease has one): the next owner's, the last one's cleared
-- ARGV     owner, next owner, next ttl_ms, counter_arg, next holder label ('' = none),
--          the next owner's lock_delay_ms (0: none), channel, reason ("granted")[, "sharded"]
-- Replies  {1, token, ttl, 1}      released and granted to the next owner
--          {1, 0, PTTL, holds}     a re-entered lease gave back one hold, handed nothing on
--          {0, 0, holder PTTL}     held by another owner
--          {-1, 0, 0}              not held
--
-- Release with hand-off (single master): the next owner's grant replaces ours in the same step,
-- with the next fencing token (as acquire would give it). Announced as a grant, never a release:
-- the lock never became free, so no waiter wakes (event streams see the new holder).
-- A re-entered lease gives back one hold and hands nothing on (token 0).
--! reply: lock
--! include lib/next_token.lua
--! include lib/holder.lua
--! include lib/clock.lua
--! include lib/holder_record.lua
--! include lib/announce.lua
--! include lib/lock_delay.lua

local reply = lastHoldOrReply()
if reply then
  return reply
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('DEL', KEYS[3])
recordHolder(KEYS[3], ARGV[2], ARGV[5], ARGV[3])
if KEYS[4] then
  startDelay(ARGV[3], ARGV[6])
end
local token = nextToken(ARGV[4])
announce(ARGV[7], ARGV[8], ARGV[9])
return {1, token, tonumber(ARGV[3]), 1}
