-- The grant record of a Redlock node (p{name}:granted; only the Redlock backend names the key):
-- "<token> <owner>", PX = the fencing counter's TTL (pushed out with it by extend.lua). It tells a
-- read which token the lease this node holds has. The node's counter cannot: a node that granted
-- after the vote was decided (it answered late) counts from its own counter, which may be far
-- above the token the majority decided (a counter seeded from a later clock reading, or INCRed
-- by attempts that lost their vote). Written at a grant (acquire.lua: the node's own token, the
-- lease's unless the granting nodes' counters disagreed), then by the token sync (token_sync.lua:
-- the decided token, wherever the owner holds the lease). A record never exceeds its node's
-- counter (both are written together, and a counter never goes down).
-- recordGrant(key, token, owner, counter_ttl_ms); leaseToken(key, owner): the token recorded for
-- `owner`'s lease, or nil.

local function recordGrant(key, token, owner, counter_ttl_ms)
  if type(token) == 'number' then
    token = string.format('%.0f', token)  -- INCR's reply as a double: '..' would write 1.79e+15
  end
  redis.call('SET', key, token .. ' ' .. owner, 'PX', counter_ttl_ms)
end
local function leaseToken(key, owner)
  local r = redis.call('GET', key)
  if not r then return nil end
  local sep = string.find(r, ' ', 1, true)
  if not sep or string.sub(r, sep + 1) ~= owner then return nil end
  return tonumber(string.sub(r, 1, sep - 1))
end
