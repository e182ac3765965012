-- The mutex lease's value (KEYS[1]) is its owner id, followed by " <holds>" once a reentrant
-- acquire took a second hold (owner ids never contain a space). One key per lease, as before: a
-- hold count kept in a key of its own would be a key that mostly does not exist, and Redis Cluster
-- answers TRYAGAIN to every script naming a missing key while its slot migrates.
-- holderOf(v), setHolds(owner, holds, ttl), ownHolds() (the owner check of ARGV[1]),
-- giveBackHold(holds) and lastHoldOrReply() (the start of release and hand-off).

local function holderOf(v)
  local sep = string.find(v, ' ', 1, true)
  if not sep then return v, 1 end
  return string.sub(v, 1, sep - 1), tonumber(string.sub(v, sep + 1))
end
local function setHolds(owner, holds, ttl)
  local v = owner
  if holds > 1 then v = owner .. ' ' .. holds end
  redis.call('SET', KEYS[1], v, 'PX', math.max(ttl, 1))
end
-- The owner check of release, extend and hand-off: the holds of ARGV[1]'s lease, or nil and the
-- reply for a lease that is not its (not held; held by another owner).
local function ownHolds()
  local v = redis.call('GET', KEYS[1])
  if not v then
    return nil, {-1, 0, 0}
  end
  local owner, holds = holderOf(v)
  if owner ~= ARGV[1] then
    return nil, {0, 0, redis.call('PTTL', KEYS[1])}
  end
  return holds
end
-- One hold of a re-entered lease given back: it stays held.
local function giveBackHold(holds)
  local ttl = redis.call('PTTL', KEYS[1])
  setHolds(ARGV[1], holds - 1, ttl)
  return {1, 0, ttl, holds - 1}
end
-- The start of a release (or hand-off): nil if ARGV[1] holds the lease's last hold (the caller
-- frees or passes it on), else the reply to send now: refused, or one hold of several given back.
local function lastHoldOrReply()
  local holds, refused = ownHolds()
  if not holds then
    return refused
  end
  if holds > 1 then
    return giveBackHold(holds)
  end
  return nil
end
