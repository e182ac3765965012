-- nextToken(counter_ttl_ms) / nextTokenAt(counter, counter_ttl_ms): the next fencing token of
-- KEYS[2] (or of `counter`), shared by every script that grants. A missing counter (first grant of
-- the name, Redis restarted empty, the counter expired) starts at Redis's TIME in microseconds,
-- built as a string: above every token handed out before as long as the assumptions in
-- src/redis/scripts.h hold. Every grant then pushes the counter's expiry out to `counter_ttl_ms`.
-- INCR's reply reaches Lua as a double: exact below 2^53 (TIME in us is ~1.8e15 in 2026, 2^53 is
-- ~9e15, i.e. the year 2255), and a Lua number goes back to the client as an integer.
-- redis.replicate_commands() lets Redis < 5 write after TIME (a no-op from Redis 5 on).

redis.replicate_commands()
local function nextTokenAt(counter, counter_ttl_ms)
  if redis.call('EXISTS', counter) == 0 then
    local now = redis.call('TIME')
    redis.call('SET', counter, now[1] .. string.format('%06d', tonumber(now[2])))
  end
  local token = redis.call('INCR', counter)
  redis.call('PEXPIRE', counter, counter_ttl_ms)
  return token
end
local function nextToken(counter_ttl_ms)
  return nextTokenAt(KEYS[2], counter_ttl_ms)
end
