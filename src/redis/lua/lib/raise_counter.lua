-- raiseCounter(counter, token, counter_ttl_ms): Redlock's token sync of one fencing counter:
-- raised to at least `token` (never lowered) and its expiry pushed out to `counter_ttl_ms`.
-- Comparing as Lua doubles is exact for counters below 2^53; the value written is `token` itself
-- (the string the sidecar sent), never a formatted double.

local function raiseCounter(counter, token, counter_ttl_ms)
  local c = tonumber(redis.call('GET', counter) or '0')
  if c < tonumber(token) then
    redis.call('SET', counter, token, 'PX', counter_ttl_ms)
  else
    redis.call('PEXPIRE', counter, counter_ttl_ms)
  end
end
