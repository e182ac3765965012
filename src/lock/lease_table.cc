#include "lock/lease_table.h"

#include <utility>

namespace sidelock::lock {

Lease* LeaseTable::find(std::string_view name) const {
  auto it = leases_.find(name);
  return it == leases_.end() ? nullptr : it->second.get();
}

Lease* LeaseTable::find(std::string_view name, std::string_view owner) const {
  Lease* lease = find(name);
  return lease != nullptr && lease->owner == owner ? lease : nullptr;
}

std::unique_ptr<Lease> LeaseTable::insert(std::unique_ptr<Lease> lease) {
  auto [it, inserted] = leases_.try_emplace(lease->name, nullptr);
  std::unique_ptr<Lease> previous = inserted ? nullptr : std::move(it->second);
  it->second = std::move(lease);
  return previous;
}

std::unique_ptr<Lease> LeaseTable::remove(std::string_view name) {
  auto it = leases_.find(name);
  if (it == leases_.end()) return nullptr;
  std::unique_ptr<Lease> lease = std::move(it->second);
  leases_.erase(it);
  return lease;
}

std::vector<std::string> LeaseTable::names() const {
  std::vector<std::string> out;
  out.reserve(leases_.size());
  for (const auto& [name, lease] : leases_) out.push_back(name);
  return out;
}

std::string LostLeaseMemory::keyOf(std::string_view name, std::string_view owner) {
  // NUL cannot occur in a valid lock name, so the split is unambiguous.
  std::string key;
  key.reserve(name.size() + 1 + owner.size());
  key.append(name).push_back('\0');
  key.append(owner);
  return key;
}

void LostLeaseMemory::dropExpired(int64_t now_us) {
  while (!order_.empty() && order_.front().expires_us <= now_us) {
    index_.erase(order_.front().key);
    order_.pop_front();
  }
}

void LostLeaseMemory::remember(std::string_view name, std::string_view owner, int64_t now_us) {
  if (capacity_ == 0) return;
  dropExpired(now_us);
  std::string key = keyOf(name, owner);
  if (auto it = index_.find(key); it != index_.end()) {
    order_.erase(it->second);
    index_.erase(it);
  }
  while (index_.size() >= capacity_) {
    index_.erase(order_.front().key);
    order_.pop_front();
  }
  order_.push_back(Entry{key, now_us + retention_us_});
  index_.emplace(std::move(key), std::prev(order_.end()));
}

bool LostLeaseMemory::contains(std::string_view name, std::string_view owner, int64_t now_us) {
  dropExpired(now_us);
  return index_.find(keyOf(name, owner)) != index_.end();
}

void LostLeaseMemory::forget(std::string_view name, std::string_view owner) {
  if (index_.empty()) return;  // the usual case: every grant and release forgets its pair
  auto it = index_.find(keyOf(name, owner));
  if (it == index_.end()) return;
  order_.erase(it->second);
  index_.erase(it);
}

}  // namespace sidelock::lock
