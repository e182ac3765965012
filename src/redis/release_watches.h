// The lock names a backend listens to releases of (Backend::watchReleases), counted, and the
// mapping from a release message back to the waiting lock. Shared by the single-master and
// cluster backends; they differ only in where they (un)subscribe the channel.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "backend/backend.h"

namespace sidelock::backend {

class ReleaseWatches {
 public:
  explicit ReleaseWatches(std::string prefix) : prefix_(std::move(prefix)) {}

  /// Counts one more watch of `name`; true when it is the first (subscribe its channel now).
  bool add(std::string_view name);
  /// Drops one watch of `name`; true when it was the last (unsubscribe its channel now).
  bool remove(std::string_view name);
  void clear() { counts_.clear(); }
  /// The watched names (map keys, sorted), for re-subscribing elsewhere.
  const std::map<std::string, int, std::less<>>& names() const { return counts_; }

  void setListener(ReleaseListener listener) { listener_ = std::move(listener); }
  /// A message arrived on `channel` with `payload` (its reason, backend::announcement): calls
  /// the listener when it announces a watched lock.
  void onMessage(std::string_view channel, std::string_view payload) const;

 private:
  std::string prefix_;
  std::map<std::string, int, std::less<>> counts_;  // lock name -> watch count
  ReleaseListener listener_;
};

}  // namespace sidelock::backend
