-- writer_withdraw: a queued writer that gave up removes its mark.
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- KEYS[3]  p{name}:writer   the queued writers' marks
-- ARGV     owner, writer_wait_ms, other writers queued (space-separated), channel, reason[,
--          "sharded"]
-- Replies  {1, 0, 0}               its mark removed, the others marked
--          {-1, 0, 0}              it had no mark
--
-- A queued writer that leaves without the lock removes its mark (KEYS[3]); the writers still
-- queued on its sidecar (ARGV[3]) are marked for ARGV[2] ms in its place. If no mark is left,
-- readers turned away for it may come in: announced like a release, unless a writer holds the
-- lock.
--! reply: lock
--! include lib/clock.lua
--! include lib/readers.lua
--! include lib/announce.lua

redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', nowMs())
if redis.call('ZREM', KEYS[3], ARGV[1]) == 0 then
  return {-1, 0, 0}
end
markWritersWaiting(tonumber(ARGV[2]), ARGV[3])
if redis.call('EXISTS', KEYS[3]) == 0 then
  local v = redis.call('GET', KEYS[1])
  if not v or readersHold(v) then
    announce(ARGV[4], ARGV[5], ARGV[6])
  end
end
return {1, 0, 0}
