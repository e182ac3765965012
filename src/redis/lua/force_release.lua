-- force_release: an operator frees a mutex whoever holds it.
--
-- KEYS[1]  p{name}          the lease: owner id[, " <holds>"], PX = its TTL
-- KEYS[2]  p{name}:token    the fencing counter
-- ARGV     channel, reason[, "sharded"]
-- Replies  {1, last token, 0}      deleted (and announced)
--          {-1, last token, 0}     not held
--
-- An operator's force release: delete the lease whoever holds it and announce it like a release.
-- The counter is read, never changed (the next grant gets the next token). It frees readers too:
-- they hold the mutex's key.
--! reply: lock
--! include lib/last_token.lua
--! include lib/announce.lua

if redis.call('DEL', KEYS[1]) == 1 then
  announce(ARGV[1], ARGV[2], ARGV[3])
  return {1, lastToken(), 0}
end
return {-1, lastToken(), 0}
