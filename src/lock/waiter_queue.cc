#include "lock/waiter_queue.h"

#include <algorithm>

namespace sidelock::lock {

WaiterQueue* WaiterQueues::find(std::string_view name) {
  auto it = queues_.find(name);
  return it == queues_.end() ? nullptr : it->second.get();
}

WaiterQueue& WaiterQueues::getOrCreate(std::string_view name, bool* created) {
  auto it = queues_.find(name);
  *created = it == queues_.end();
  if (*created) {
    it = queues_
             .emplace(std::string(name),
                      std::make_unique<WaiterQueue>(retry_min_ms_, retry_max_ms_, retry_jitter_ms_))
             .first;
  }
  return *it->second;
}

void WaiterQueues::erase(std::string_view name) {
  auto it = queues_.find(name);
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
  for (const auto& [name, q] : queues_) {
    if (!q->fifo.empty()) out.push_back(WaiterCount{name, static_cast<int>(q->fifo.size())});
  }
  std::sort(out.begin(), out.end(),
            [](const WaiterCount& a, const WaiterCount& b) { return a.name < b.name; });
  return out;
}

std::vector<std::string> WaiterQueues::names() const {
  std::vector<std::string> out;
  out.reserve(queues_.size());
  for (const auto& [name, q] : queues_) out.push_back(name);
  return out;
}

}  // namespace sidelock::lock
