-- force_release: an operator frees a mutex whoever holds it.
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- KEYS[3]  p{name}:delay    the lock-delay: a deleted lease's delay runs from now
-- ARGV     channel, reason[, "sharded"]
-- Replies  {1, last token, delay}  deleted (and announced); delay: the lock-delay it started (ms,
--                                  0: none)
--          {-1, last token, 0}     not held
--
-- An operator's force release: delete the lease whoever holds it and announce it like a release.
-- The counter is read, never changed (the next grant gets the next token). It frees readers too:
-- they hold the mutex's key.
--! reply: lock
--! include lib/last_token.lua
--! include lib/announce.lua
--! include lib/lock_delay.lua

if redis.call('DEL', KEYS[1]) == 1 then
  local delay = applyDelay()
  announce(ARGV[1], ARGV[2], ARGV[3])
  return {1, lastToken(), delay}
end
return {-1, lastToken(), 0}
