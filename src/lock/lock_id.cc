#include "lock/lock_id.h"

namespace sidelock::lock {

std::string LockId::display() const {
  if (kind == LockKind::kMutex) return name;
  std::string shown = backend::lockKindName(kind);
  shown.push_back('/');
  shown.append(name);
  return shown;
}

}  // namespace sidelock::lock
