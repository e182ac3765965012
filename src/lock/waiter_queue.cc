#include "lock/waiter_queue.h"

#include <algorithm>

namespace sidelock::lock {

WaiterQueue* WaiterQueues::find(const LockId& lock) {
  auto it = queues_.find(lock);
  return it == queues_.end() ? nullptr : it->second.get();
}

WaiterQueue& WaiterQueues::getOrCreate(const LockId& lock, bool* created) {
  auto it = queues_.find(lock);
  *created = it == queues_.end();
  if (*created) {
    it = queues_
             .emplace(lock,
                      std::make_unique<WaiterQueue>(retry_min_ms_, retry_max_ms_, retry_jitter_ms_))
             .first;
  }
  return *it->second;
}

void WaiterQueues::erase(const LockId& lock) {
  auto it = queues_.find(lock);
  if (it == queues_.end()) return;
  total_ -= it->second->fifo.size();
  queues_.erase(it);
}

void WaiterQueues::push(WaiterQueue& q, Waiter* w) {
  q.fifo.push_back(w);
  w->queued = true;
  ++total_;
}

bool WaiterQueues::remove(WaiterQueue& q, Waiter* w) {
  auto it = std::find(q.fifo.begin(), q.fifo.end(), w);
  if (it == q.fifo.end()) return false;
  q.fifo.erase(it);
  w->queued = false;
  --total_;
  return true;
}

std::vector<WaiterCount> WaiterQueues::counts() const {
  std::vector<WaiterCount> out;
  out.reserve(queues_.size());
  for (const auto& [lock, q] : queues_) {
    if (!q->fifo.empty()) out.push_back(WaiterCount{lock, static_cast<int>(q->fifo.size())});
  }
  // In the order of the printed form GET /v1/locks shows (a listing, not a hot path).
  std::sort(out.begin(), out.end(), [](const WaiterCount& a, const WaiterCount& b) {
    return a.lock.display() < b.lock.display();
  });
  return out;
}

std::vector<LockId> WaiterQueues::locks() const {
  std::vector<LockId> out;
  out.reserve(queues_.size());
  for (const auto& [lock, q] : queues_) out.push_back(lock);
  return out;
}

}  // namespace sidelock::lock
