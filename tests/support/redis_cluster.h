// A real Redis Cluster for tests: N cluster-enabled redis-server processes (RedisServer with
// Options::cluster, so each one's bus port + 10000 is free too) joined as N masters by
// `redis-cli --cluster create`. Every process is killed by the servers' destructors.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "support/redis_server.h"

namespace sidelock::testing {

class RedisCluster {
 public:
  /// Starts `masters` * (1 + `replicas`) nodes, creates the cluster (nodes 0 .. masters-1 are
  /// the masters, the rest their replicas) and waits until every node reports cluster_state:ok
  /// with all 16384 slots served, and every replica has finished its first sync. Throws on
  /// failure.
  /// `extra_args`, when set, is called once per node (in index order) for more redis-server
  /// arguments, e.g. a TLS port of its own.
  explicit RedisCluster(int masters = 3, int replicas = 0,
                        const std::function<std::vector<std::string>()>& extra_args = {});

  size_t size() const { return servers_.size(); }
  RedisServer& server(size_t i) { return *servers_[i]; }
  /// "127.0.0.1:port" of node i.
  std::string address(size_t i) const { return servers_[i]->address(); }
  /// CLUSTER MYID of node i.
  const std::string& nodeId(size_t i) const { return ids_[i]; }
  /// `CLUSTER KEYSLOT key`, asked of node 0.
  int keySlot(const std::string& key);
  /// Index of the node that serves `slot` as node `asker` sees it now; -1 if none.
  int ownerOf(int slot, size_t asker = 0);
  /// Slots node i serves (CLUSTER SLOTS as node i sees it).
  int slotCount(size_t i);
  /// `redis-cli --cluster reshard` of `slots` slots from node `from` to node `to`. Returns
  /// redis-cli's exit status; its output goes to lastOutput().
  int reshard(size_t from, size_t to, int slots);
  /// First half of moving `slot` from node `from` to node `to` by hand: marks it importing and
  /// migrating, then MIGRATEs `keys`. Clients now get ASK for those keys. False on any error.
  bool startMigration(int slot, size_t from, size_t to, const std::vector<std::string>& keys);
  /// Second half: tells every node that `to` serves `slot` (clients now get MOVED).
  bool finishMigration(int slot, size_t to);
  /// Waits until every node reports cluster_state:ok and all agree on the slot owners
  /// (`redis-cli --cluster check` passes). False on timeout.
  bool waitConsistent(int timeout_ms = 30'000);
  /// Waits until every replica's link to its master is up and its first sync has ended.
  bool waitReplicasInSync(int timeout_ms = 30'000);
  const std::string& lastOutput() const { return last_output_; }

 private:
  int runCli(const std::string& args);
  std::vector<std::unique_ptr<RedisServer>> servers_;
  std::vector<std::string> ids_;
  std::string last_output_;
};

}  // namespace sidelock::testing
