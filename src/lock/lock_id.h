// A lock's identity inside the lock service: its kind and its own name. Waiters, queues, leases,
// lost-lease memory and the API layer carry it as it is; nothing re-parses a string to learn the
// kind.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "backend/backend.h"

namespace sidelock::lock {

using LockKind = backend::LockKind;

/// One lock as the service knows it. The readers of a read/write lock are {kShared, name}, its
/// writers {kMutex, name}: two queues and two kinds of lease of one backend lock. A fair lock's
/// lease is the mutex's, but its waiters queue apart ({kFair, name}).
struct LockId {
  LockKind kind = LockKind::kMutex;
  std::string name;

  bool operator==(const LockId&) const = default;

  /// The printable form that logs and GET /v1/locks show: the name for a mutex (and writers),
  /// "<kind>/<name>" for the others ('/' never occurs in a lock name, so it reads unambiguously).
  std::string display() const;
};

struct LockIdHash {
  size_t operator()(const LockId& id) const {
    return std::hash<std::string>{}(id.name) ^ static_cast<size_t>(id.kind);
  }
};

}  // namespace sidelock::lock
