-- fair_withdraw: a fair waiter that gave up leaves the queue.
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- KEYS[3]  p{name}:fair
-- KEYS[4]  p{name}:fair:claims
-- ARGV     owner, channel, reason[, "sharded"]
-- Replies  {1, 0, 0}               left the queue
--          {-1, 0, 0}              was not queued
--
-- A waiter that gave up leaves the queue. If it was first and the lock is free, the next waiter
-- (of any sidecar) is told at once rather than when its claim's wait runs out.
--! reply: lock
--! include lib/clock.lua
--! include lib/fair_queue.lua
--! include lib/announce.lua

local now = nowMs()
dropLapsed(now)
local first = redis.call('ZRANGE', KEYS[3], 0, 0)
if redis.call('ZREM', KEYS[3], ARGV[1]) == 0 then
  return {-1, 0, 0}
end
redis.call('ZREM', KEYS[4], ARGV[1])
if first[1] == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 0 then
  announce(ARGV[2], ARGV[3], ARGV[4])
end
return {1, 0, 0}
