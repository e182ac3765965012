-- The grant record of a Redlock node (p{name}:granted; only the Redlock backend names the key):
-- "<token> <owner>", PX = the fencing counter's TTL. It tells a read which token a lease holds.
-- A node's counter cannot: a node that granted after the vote was decided (it answered late)
-- counts from its own value, which may be far above the token the majority decided (a counter
-- seeded from a later clock reading, or INCRed by attempts that lost their vote).
--   written at a grant (acquire.lua): the node's own token, which is the lease's token unless the
--   granting nodes' counters disagreed; then by the token sync (token_sync.lua): the decided token
--   wherever the owner holds the lease, and on the other nodes the decided token as the last one
--   granted (never lowered there, owner left empty: no lease of an empty owner exists).
-- recordGrant(key, token, owner, counter_ttl_ms); leaseToken(key, owner): the token recorded for
-- `owner`'s lease, or nil; lastGranted(key): the last recorded token, or nil.

local function recordGrant(key, token, owner, counter_ttl_ms)
  if type(token) == 'number' then
    token = string.format('%.0f', token)  -- INCR's reply as a double: '..' would write 1.79e+15
  end
  redis.call('SET', key, token .. ' ' .. owner, 'PX', counter_ttl_ms)
end
local function grantRecordOf(key)
  local r = redis.call('GET', key)
  if not r then return nil, nil end
  local sep = string.find(r, ' ', 1, true)
  if not sep then return nil, nil end
  return tonumber(string.sub(r, 1, sep - 1)), string.sub(r, sep + 1)
end
local function leaseToken(key, owner)
  local token, recorded_owner = grantRecordOf(key)
  if recorded_owner == owner then return token end
  return nil
end
local function lastGranted(key)
  local token = grantRecordOf(key)
  return token
end
