-- The holder record of a mutex lease (a lock, a fair lock, a writer): who holds it as a public
-- label ("holder", never the owner id) and since when, in a key of its own next to the lease
-- (p{name}:holder, the same hash slot), with the lease's PX: "<owner> <since_ms> <label>".
-- The owner id in it ties the record to one lease: a record left behind by a lease that was
-- handed on, force-released or expired is never read as the holder of a later lease.
-- recordHolder(key, owner, label, ttl) after a grant; readHolder(key, v) -> "<since_ms> <label>"
-- (the reply's last element) or nil. Scripts that record include lib/clock.lua first (nowMs).

local function recordHolder(key, owner, label, ttl)
  if label == nil or label == '' then
    -- No label: no record, not even one a force-released lease of this owner left behind.
    redis.call('DEL', key)
    return
  end
  redis.call('SET', key, owner .. ' ' .. nowMs() .. ' ' .. label, 'PX', math.max(tonumber(ttl), 1))
end
local function readHolder(key, v)
  if not v then return nil end
  local sep = string.find(v, ' ', 1, true)
  local owner = v
  if sep then owner = string.sub(v, 1, sep - 1) end
  local r = redis.call('GET', key)
  if not r or string.sub(r, 1, #owner + 1) ~= owner .. ' ' then return nil end
  return string.sub(r, #owner + 2)
end
