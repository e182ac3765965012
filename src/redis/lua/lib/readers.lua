-- Read/write locks. Readers hold the lock's own key (KEYS[1], where a writer's owner id would be)
-- with a value no owner id can have: "\tshared" (owner ids are printable ASCII), expiring with the
-- last reader; so every mutex script, of this version or an older one, sees a lock held by
-- somebody else and a writer simply is the mutex holder. The readers themselves are members of
-- p{name}:readers, scored with their expiry. A queued writer that readers turn away marks itself
-- in p{name}:writer (a sorted set: writer owner id -> until when its mark lasts, Redis time in
-- ms); the set is deleted when a queued writer gets in, and a writer that leaves without the lock
-- removes its own mark (marking the writers still queued on its sidecar instead). While a mark
-- lives, new readers are turned away, even from a free lock, so neither a steady stream of
-- readers nor readers queued on other sidecars (who may hear the last reader's release first)
-- can starve it.
-- readersHold(v), writerMarkMs(k, now), markWritersWaiting(ms, writers). Needs lib/clock.lua.

local kReaders = '\tshared'
local function readersHold(v)
  return string.sub(v, 1, #kReaders) == kReaders
end
-- How long (ms) the writers' marks KEYS[k] keep readers out; 0 if none lives.
local function writerMarkMs(k, now)
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', now)
  local last = redis.call('ZRANGE', KEYS[k], -1, -1, 'WITHSCORES')
  if #last == 0 then
    return 0
  end
  return math.max(tonumber(last[2]) - now, 1)
end
-- A writer's acquire and withdraw: KEYS[3] is the writers' marks; `writers` space-separated
-- owner ids, each marked waiting for `ms` from now.
local function markWritersWaiting(ms, writers)
  local now = nowMs()
  local until_ms = string.format('%.0f', now + ms)
  for w in string.gmatch(writers, '%S+') do
    redis.call('ZADD', KEYS[3], until_ms, w)
  end
  if redis.call('PTTL', KEYS[3]) < ms then
    redis.call('PEXPIRE', KEYS[3], ms)
  end
end
