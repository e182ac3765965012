// Redis Cluster's key space as sidelock sees it: the hash slot of a key (CRC16 of the key or of
// its `{hash tag}`, modulo 16384, per the cluster specification) and which master serves each
// slot, read from a CLUSTER SLOTS reply and patched by MOVED redirections.
//
// Pure data: no sockets, no loop. ClusterBackend owns one and asks it where to send a script.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "redis/resp.h"

namespace sidelock::backend {

inline constexpr int kClusterSlots = 16384;

/// The hash slot of `key`: CRC16-XMODEM of the part between the first '{' and the next '}' when
/// that part is not empty, else of the whole key; then mod 16384. Equals `CLUSTER KEYSLOT key`.
uint16_t clusterKeySlot(std::string_view key);

/// A MOVED or ASK error reply ("MOVED 3999 127.0.0.1:6381"), parsed.
struct ClusterRedirect {
  enum class Kind { kMoved, kAsk };
  Kind kind = Kind::kMoved;
  uint16_t slot = 0;
  /// The node to ask instead. An empty host ("MOVED 1 :6380", an unknown endpoint) means the host
  /// of the node that answered; the caller fills it in.
  config::RedisNodeAddress target;
};
/// False when `error` is not a well-formed MOVED / ASK reply.
bool parseClusterRedirect(std::string_view error, ClusterRedirect* out);

class SlotMap {
 public:
  SlotMap();

  /// Builds the map from a CLUSTER SLOTS reply got from `asked` (its host stands in for masters
  /// announced without an endpoint). Slots the reply leaves out stay unassigned.
  static StatusOr<SlotMap> fromClusterSlots(const RedisValue& reply,
                                            const config::RedisNodeAddress& asked);

  /// The master serving `slot`, or nullptr when no master is known for it.
  const config::RedisNodeAddress* masterOf(uint16_t slot) const;
  /// Points one slot at `master` (a MOVED reply said so). True when that changed the map.
  bool assign(uint16_t slot, const config::RedisNodeAddress& master);
  /// Every master serving at least one slot, in order of their first slot.
  std::vector<config::RedisNodeAddress> masters() const;
  /// Slots that have a master.
  int assignedSlots() const;
  bool empty() const { return assignedSlots() == 0; }
  /// Same master for every slot (addresses compared as text).
  bool sameAs(const SlotMap& other) const;

 private:
  int indexOf(const config::RedisNodeAddress& master);
  std::vector<int16_t> owner_;  // per slot: index into masters_, -1 when unassigned
  std::vector<config::RedisNodeAddress> masters_;  // may hold masters no longer owning a slot
};

}  // namespace sidelock::backend
