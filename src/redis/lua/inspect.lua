-- inspect: a mutex's state (held, TTL, last token), owner not revealed.
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- KEYS[3]  p{name}:holder   the holder record (lib/holder_record.lua)
-- ARGV     (none)
-- Replies  {1, last token, PTTL[, "<since_ms> <label>"]}   held (who holds it, when recorded)
--          {-1, last token, 0}     not held (last token: the counter, 0 if none)
--! reply: lock
--! include lib/last_token.lua
--! include lib/holder_record.lua

local v = redis.call('GET', KEYS[1])
if v then
  local held = {1, lastToken(), redis.call('PTTL', KEYS[1])}
  held[#held + 1] = readHolder(KEYS[3], v)
  return held
end
return {-1, lastToken(), 0}
