-- The holders of the leases kept in a sorted set (a read/write lock's readers, a semaphore's
-- permits: owner id -> expiry): a hash next to the set (p{name}:readers:holders,
-- p{name}:sem:holders; the same hash slot), owner id -> "<since_ms> <label>", living as long as
-- its longest lease. The owner id stays inside Redis: listLabels() answers labels, never ids.
-- Needs lib/clock.lua.
--   recordLabel(h, owner, label, ttl)  after a grant (no label: none, nor an older one's)
--   dropExpiredLabels(z, h, now)       before the set's expired members are removed
--   followLeases(h, ttl)               after an extend: the hash lives as long as the lease
--   listLabels(z, h, now, max)         up to max "<since_ms> <ttl_ms> <label>", soonest expiry
--                                      first (live leases that recorded a label)

local function followLeases(h, ttl)
  if redis.call('PTTL', h) < ttl then
    redis.call('PEXPIRE', h, ttl)
  end
end
local function recordLabel(h, owner, label, ttl)
  if label == nil or label == '' then
    redis.call('HDEL', h, owner)
    return
  end
  redis.call('HSET', h, owner, nowMs() .. ' ' .. label)
  followLeases(h, math.max(tonumber(ttl), 1))
end
local function dropExpiredLabels(z, h, now)
  for _, owner in ipairs(redis.call('ZRANGEBYSCORE', z, '-inf', now)) do
    redis.call('HDEL', h, owner)
  end
end
local function listLabels(z, h, now, max)
  local out = {}
  local live = redis.call('ZRANGEBYSCORE', z, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, max)
  for i = 1, #live, 2 do
    local r = redis.call('HMGET', h, live[i])[1]
    local sep = r and string.find(r, ' ', 1, true)
    if sep then
      out[#out + 1] = string.sub(r, 1, sep - 1) .. ' ' ..
          string.format('%.0f', math.max(tonumber(live[i + 1]) - now, 1)) .. ' ' ..
          string.sub(r, sep + 1)
    end
  end
  return out
end
