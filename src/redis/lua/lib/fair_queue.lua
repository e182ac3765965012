-- Fair locks. KEYS[3] (p{name}:fair) is the queue: waiter owner id -> arrival (Redis time in us,
-- kept from the first time it joined); KEYS[4] (p{name}:fair:claims) each waiter's claim: until
-- when (Redis time in ms) it keeps its place without being renewed. Every fair script first drops
-- the waiters whose claim lapsed (dropLapsed(now)), so a waiter that died, or whose sidecar did,
-- stalls the queue for one claim at most. The lock itself is the mutex's key: the holder is a
-- mutex holder.

local function dropLapsed(now)
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
  for _, w in ipairs(lapsed) do
    redis.call('ZREM', KEYS[3], w)
  end
  if #lapsed > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  end
end
