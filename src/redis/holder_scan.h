// The admin listing's scan of Redis masters (Backend::scanHolders): finds the lock names that
// have a holder record (`<key_prefix>{name}:holder`, lua/lib/holder_record.lua) with
// SCAN <cursor> MATCH <pattern> COUNT <batch>, node after node, never KEYS: each step is one
// short command, so the scan cannot stall Redis. Stops when the time budget is spent; keeps the
// `keep` smallest names (a bounded set, whatever the keyspace holds). The values (owner ids) are
// never read here.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "event/scheduler.h"
#include "redis/redis_node.h"

namespace sidelock::backend {

/// The SCAN MATCH pattern of the holder records of names starting with `name_prefix` (glob
/// characters of the key prefix escaped).
std::string holderRecordPattern(std::string_view key_prefix, std::string_view name_prefix);
/// The lock name of a holder record key, or "" when `key` is not one.
std::string lockNameOfHolderRecord(std::string_view key_prefix, std::string_view key);

/// Finds a node by address now (nullptr: gone, e.g. a cluster master that left the map).
using NodeFinder = std::function<RedisNode*(const std::string& address)>;

/// Scans `addresses` one after another, then calls `cb` (on a later loop turn). A node that
/// fails is listed in node_errors and the scan goes on; kUnavailable when no node could be
/// scanned at all. The backend that calls it outlives the scan (Backend contract).
void scanHolderRecords(event::Scheduler& scheduler, std::vector<std::string> addresses,
                       NodeFinder find, std::string_view key_prefix, const HolderScan& scan,
                       int64_t timeout_ms, ScanCallback cb);

}  // namespace sidelock::backend
