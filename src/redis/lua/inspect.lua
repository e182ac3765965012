-- inspect: a mutex's state (held, TTL, token), owner not revealed.
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- KEYS[3]  p{name}:holder   the holder record (lib/holder_record.lua)
-- KEYS[4]  p{name}:granted  Redlock only: the grant record (lib/grant_record.lua)
-- ARGV     (none)
-- Replies  {1, token, PTTL[, "<since_ms> <label>"]}   held (who holds it, when recorded)
--          {-1, token, 0}     not held
--
-- The token: the counter (0 if none), which is the lease's token while held and the last one
-- granted otherwise. With a grant record (Redlock), a held lease's token is what the record says
-- for its owner, the counter where it records none (a grant by a sidecar older than the record).
--! reply: lock
--! include lib/last_token.lua
--! include lib/holder_record.lua
--! include lib/holder.lua
--! include lib/grant_record.lua

local v = redis.call('GET', KEYS[1])
if v then
  local token = KEYS[4] and leaseToken(KEYS[4], (holderOf(v))) or nil
  local held = {1, token or lastToken(), redis.call('PTTL', KEYS[1])}
  held[#held + 1] = readHolder(KEYS[3], v)
  return held
end
return {-1, lastToken(), 0}
