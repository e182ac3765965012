-- Lock-delay (Consul's LockDelay): after a lease ends without a release (expiry, force release,
-- an involuntary release) nobody gets the lock for the lease's lock_delay_ms. The delay key
-- (p{name}:delay, the lease's slot) is the script's LAST key. It exists only for a lease acquired
-- with a delay N > 0: its value is N (ms) and it lives N ms longer than the lease, so an expiring
-- lease leaves exactly N ms of it; a clean release deletes it. A lease without a delay keeps no
-- key (no extra key per held lock). While a Cluster slot migrates, a script that names a key the
-- node lacks is answered TRYAGAIN: the cluster backend retries it (src/redis/cluster_backend.cc).
-- delayLeft() (ms left while nobody holds the lease, else 0), startDelay(ttl, n) (a grant),
-- pushDelay(ttl) (the lease's TTL changed), applyDelay() (the lease ended involuntarily: N ms from
-- now), clearDelay() (a clean release).

local function delayKey() return KEYS[#KEYS] end
local function delayMs()
  local n = tonumber(redis.call('GET', delayKey()) or '0') or 0
  return math.max(n, 0)
end
local function delayLeft()
  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
  -- PTTL first: a lock without a delay (no key, -2) costs one PTTL and no GET.
  local left = redis.call('PTTL', delayKey())
  if left <= 0 or delayMs() == 0 then return 0 end
  return left
end
local function startDelay(ttl, n)
  n = tonumber(n or '0') or 0
  if n > 0 then
    redis.call('SET', delayKey(), n, 'PX', tonumber(ttl) + n)
  else
    redis.call('DEL', delayKey())  -- (a hand-off: the last owner's delay ends with its lease)
  end
end
local function pushDelay(ttl)
  local n = delayMs()
  if n > 0 then redis.call('PEXPIRE', delayKey(), tonumber(ttl) + n) end
end
local function applyDelay()
  local n = delayMs()
  if n > 0 then redis.call('SET', delayKey(), n, 'PX', n) end
  return n
end
local function clearDelay() redis.call('DEL', delayKey()) end
