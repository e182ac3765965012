-- nowMs(): Redis's clock (TIME, in ms) for semaphore permits, readers, writers' marks and fair
-- claims, so sidecars never compare their own clocks; replicate_commands() lets Redis < 5 write
-- after TIME.

redis.replicate_commands()
local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
