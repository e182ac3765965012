-- nextToken(counter_ttl_ms) / nextTokenAt(counter, counter_ttl_ms): the next fencing token of
-- KEYS[2] (or of `counter`), shared by every script that grants. The counter follows Redis's
-- clock, so that it stays above every token handed out before even when Redis lost its last
-- increments:
--  - a missing counter (first grant of the name, Redis restarted empty, the counter expired)
--    starts at TIME in microseconds;
--  - a counter that would count to the current second of TIME (in microseconds:
--    <seconds>000000) or below is raised to one above it. A replica promoted after its master
--    died holds the counter as of the last grant it received: the grants it missed counted on
--    from there, and without the floor the next grant would get a token below theirs (found from
--    outside on Redis Cluster). With it, a new master whose first grant comes more than a
--    second (plus the clocks' difference) after the last lost one hands out tokens above all of
--    them: after a master that crashed (a node timeout, then an election). Not when a master cut
--    off by a partition granted until about its replica's election (README "Fencing tokens").
--    Whole seconds, not microseconds: Redlock's nodes read their own clocks and must agree on a
--    grant's token to skip the token sync; within a second they count on from one synced
--    counter, as before. (A microsecond floor for the one-master backends would narrow the gap
--    to the clocks' difference; it needs the scripts to know which backend calls them.)
-- Every grant then pushes the counter's expiry out to `counter_ttl_ms`.
-- INCR's reply reaches Lua as a double: exact below 2^53 (TIME in us is ~1.8e15 in 2026, 2^53 is
-- ~9e15, i.e. the year 2255), and a Lua number goes back to the client as an integer.
-- redis.replicate_commands() lets Redis < 5 write after TIME (a no-op from Redis 5 on).

redis.replicate_commands()
local function nextTokenAt(counter, counter_ttl_ms)
  local now = redis.call('TIME')
  if redis.call('EXISTS', counter) == 0 then
    redis.call('SET', counter, now[1] .. string.format('%06d', tonumber(now[2])))
  end
  -- INCR first, then the floor: no GET (a grant needs no read right on the counter).
  local token = redis.call('INCR', counter)
  local second_us = tonumber(now[1]) * 1000000
  if token <= second_us then
    token = second_us + 1
    redis.call('SET', counter, now[1] .. '000001')
  end
  redis.call('PEXPIRE', counter, counter_ttl_ms)
  return token
end
local function nextToken(counter_ttl_ms)
  return nextTokenAt(KEYS[2], counter_ttl_ms)
end
