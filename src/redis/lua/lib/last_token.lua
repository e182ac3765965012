-- lastToken(): the fencing counter KEYS[2] as it is (0 if none). The counter goes back as a Lua
-- number (a double): exact below 2^53 (see lib/next_token.lua).

local function lastToken()
  return tonumber(redis.call('GET', KEYS[2]) or '0')
end
