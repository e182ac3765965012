-- announce(channel, reason, sharded): tells every sidecar that a lock (or permit) changed. The
-- payload is the reason (backend::announcement: "released", "forced", "granted", "proclaimed";
-- waiters wake on the first two only, event streams on all). PUBLISH, or on Redis Cluster
-- (`sharded` = "sharded", kShardedPublish) SPUBLISH: the channel carries the lock's `{name}`
-- hash tag, so it stays in the script's slot and reaches only the subscribers of that shard
-- instead of being broadcast over the cluster bus.

local function announce(channel, reason, sharded)
  if not channel then
    return  -- a caller that names no channel (a test's hand-made call) announces nothing
  end
  if sharded == 'sharded' then
    redis.call('SPUBLISH', channel, reason)
  else
    redis.call('PUBLISH', channel, reason)
  end
end
