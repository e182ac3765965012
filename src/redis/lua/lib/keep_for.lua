-- keepFor(ttl): a semaphore's permits (KEYS[1]) live as long as its longest permit; returns that
-- expiry (ms from now).

local function keepFor(ttl)
  local keep = math.max(redis.call('PTTL', KEYS[1]), ttl)
  redis.call('PEXPIRE', KEYS[1], keep)
  return keep
end
