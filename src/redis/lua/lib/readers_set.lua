-- The readers' set (KEYS[3] = p{name}:readers), for the readers' own scripts (a writer's acquire
-- needs only lib/readers.lua): keepForReaders(now), readerExpiry(now). Needs lib/clock.lua and
-- lib/readers.lua.

-- The readers' key lives as long as its longest reader: after a reader left or shortened its
-- lease, a writer waits no longer than the readers still there. Frees the lock with the last.
local function keepForReaders(now)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', KEYS[1], KEYS[3])
    return 0
  end
  local keep = math.max(tonumber(last[2]) - now, 1)
  redis.call('PEXPIRE', KEYS[1], keep)
  redis.call('PEXPIRE', KEYS[3], keep)
  return redis.call('ZCARD', KEYS[3])
end
-- The expiry of reader ARGV[1], or nil when it holds no live read lease.
local function readerExpiry(now)
  local v = redis.call('GET', KEYS[1])
  if not v or not readersHold(v) then
    return nil
  end
  local expiry = redis.call('ZSCORE', KEYS[3], ARGV[1])
  if not expiry or tonumber(expiry) <= now then
    return nil
  end
  return tonumber(expiry)
end
