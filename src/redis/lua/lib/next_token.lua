-- nextToken(counter_arg) / nextTokenAt(counter, counter_arg): the next fencing token of KEYS[2]
-- (or of `counter`), shared by every script that grants. `counter_arg` is the granting script's
-- counter argument: "<counter_ttl_ms> us" on the one-master backends (single Redis, Sentinel,
-- Cluster), "<counter_ttl_ms>" on Redlock (the floor below, by microseconds or by seconds);
-- counterTtl(counter_arg) is its TTL alone. The counter follows Redis's clock, so that it stays
-- above every token handed out before even when Redis lost its last increments:
--  - a missing counter (first grant of the name, Redis restarted empty, the counter expired)
--    starts at TIME in microseconds;
--  - a counter that would count to below the floor is raised to it. The floor is TIME in
--    microseconds on one master, and the current second of TIME plus one (<seconds>000001) on
--    Redlock. A replica promoted after its master died holds the counter as of the last grant
--    it received: the grants it missed counted on from there, and without the floor the next
--    grant would get a token below theirs (found from outside on Redis Cluster). With it, a new
--    master's first grant gets a token above every grant its old master made earlier by the
--    hosts' clock difference (a second more with Redlock's floor): after a master that crashed,
--    and usually after one a partition cut off, which stops granting between one and one and a
--    half node timeouts after the cut, mostly before its replica is promoted (README "Fencing
--    tokens").
--    Redlock's floor is by whole seconds: its nodes read their own clocks and must agree on a
--    grant's token to skip the token sync; within a second they count on from one synced counter.
-- Every grant then pushes the counter's expiry out to counterTtl(counter_arg). INCR first, then
-- the floor, without a GET: a grant needs no GET right (command ACLs; Redlock's tests revoke it
-- on a node to fail its token sync, whose script reads). The price on one master, where the
-- clock is nearly always above the counter: INCR, SET and PEXPIRE, three replicated writes per
-- grant. INCR's reply reaches Lua as a double: exact below 2^53 (TIME in us is ~1.8e15 in 2026,
-- 2^53 is ~9e15, i.e. the year 2255), and a Lua number goes back to the client as an integer.
-- redis.replicate_commands() lets Redis < 5 write after TIME (a no-op from Redis 5 on).

redis.replicate_commands()
local function counterTtl(counter_arg)
  return string.match(counter_arg, '^%d+')
end
local function nextTokenAt(counter, counter_arg)
  local now = redis.call('TIME')
  local now_us = now[1] .. string.format('%06d', tonumber(now[2]))
  if redis.call('EXISTS', counter) == 0 then
    redis.call('SET', counter, now_us)
  end
  -- The floor is written as a string: a Lua number passed to Redis keeps only 14 digits.
  local token = redis.call('INCR', counter)
  local floor = now[1] .. '000001'
  if string.sub(counter_arg, -3) == ' us' then floor = now_us end
  if token < tonumber(floor) then
    token = tonumber(floor)
    redis.call('SET', counter, floor)
  end
  redis.call('PEXPIRE', counter, counterTtl(counter_arg))
  return token
end
local function nextToken(counter_arg)
  return nextTokenAt(KEYS[2], counter_arg)
end
