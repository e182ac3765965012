-- inspect: a mutex's state (held, TTL, last token), owner not revealed.
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- ARGV     (none)
-- Replies  {1, last token, PTTL}   held
--          {-1, last token, 0}     not held (last token: the counter, 0 if none)
--! reply: lock
--! include lib/last_token.lua

if redis.call('EXISTS', KEYS[1]) == 1 then
  return {1, lastToken(), redis.call('PTTL', KEYS[1])}
end
return {-1, lastToken(), 0}
