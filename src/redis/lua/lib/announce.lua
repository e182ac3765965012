-- announce(channel, name, sharded): tells the waiters of every sidecar that a lock (or permit) is
-- free: PUBLISH, or on Redis Cluster (`sharded` = "sharded", kShardedPublish) SPUBLISH: the channel
-- carries the lock's `{name}` hash tag, so it stays in the script's slot and reaches only the
-- subscribers of that shard instead of being broadcast over the cluster bus.

local function announce(channel, name, sharded)
  if sharded == 'sharded' then
    redis.call('SPUBLISH', channel, name)
  else
    redis.call('PUBLISH', channel, name)
  end
end
