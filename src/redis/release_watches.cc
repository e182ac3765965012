#include "redis/release_watches.h"

#include "redis/scripts.h"

namespace sidelock::backend {

bool ReleaseWatches::add(std::string_view name) {
  auto it = counts_.find(name);
  if (it == counts_.end()) it = counts_.emplace(std::string(name), 0).first;
  return ++it->second == 1;
}

bool ReleaseWatches::remove(std::string_view name) {
  auto it = counts_.find(name);
  if (it == counts_.end()) return false;  // unbalanced, or cleared by shutdown
  if (--it->second > 0) return false;
  counts_.erase(it);
  return true;
}

void ReleaseWatches::onMessage(std::string_view channel, std::string_view payload) const {
  std::string name;
  if (!lockNameFromChannel(prefix_, channel, &name)) return;
  if (counts_.find(name) == counts_.end() || !listener_) return;
  auto listener = listener_;  // it may replace itself
  listener(name, payload);
}

}  // namespace sidelock::backend
