#include "lock/lease_table.h"

#include <utility>

namespace sidelock::lock {

Lease* LeaseTable::find(const LockId& lock) const {
  const ByName& leases = byName(lock.kind);
  auto it = leases.find(lock.name);
  return it == leases.end() ? nullptr : it->second.get();
}

Lease* LeaseTable::find(const LockId& lock, std::string_view owner) const {
  for (Lease* l = find(lock); l != nullptr; l = l->next_same_name.get()) {
    if (l->owner == owner) return l;
  }
  return nullptr;
}

LeaseTable::~LeaseTable() {
  for (ByName& leases : by_kind_) {
    for (auto& [name, first] : leases) {
      while (first != nullptr) first = std::move(first->next_same_name);
    }
  }
}

void GrantTimes::add(int64_t granted_us) {
  const int64_t second = granted_us / 1'000'000;
  // Grants come in time order: the bucket is the last one, or a new one after it.
  auto it = buckets_.empty() ? buckets_.end() : std::prev(buckets_.end());
  if (it == buckets_.end() || it->first != second) {
    it = buckets_.emplace_hint(buckets_.end(), second, Bucket{granted_us, 0});
  }
  ++it->second.count;
}

void GrantTimes::remove(int64_t granted_us) {
  auto it = buckets_.find(granted_us / 1'000'000);
  if (it == buckets_.end()) return;
  if (--it->second.count == 0) buckets_.erase(it);
}

uint32_t HolderTally::add(std::string_view holder) {
  if (holder.empty()) {
    ++unlabelled_;
    return kNoLabel;
  }
  if (auto it = index_.find(holder); it != index_.end()) {
    ++slots_[it->second - 1].leases;
    return it->second;
  }
  uint32_t slot = kNoLabel;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else if (slots_.size() < kMaxSlots) {
    slots_.emplace_back();
    slot = static_cast<uint32_t>(slots_.size());
  } else {
    ++unlabelled_;  // 16.7 million distinct labels held at once: counted among the unlabelled
    return kNoLabel;
  }
  // The label is kept once, as the index's key (its node never moves); the slot points at it.
  const auto [it, inserted] = index_.emplace(std::string(holder), slot);
  slots_[slot - 1] = Slot{&it->first, 1};
  return slot;
}

void HolderTally::remove(uint32_t slot) {
  if (slot == kNoLabel) {
    --unlabelled_;
    return;
  }
  Slot& s = slots_[slot - 1];
  if (--s.leases > 0) return;
  index_.erase(index_.find(*s.holder));
  s.holder = nullptr;
  free_.push_back(slot);
}

void LeaseTable::insert(std::unique_ptr<Lease> lease, std::string_view holder) {
  grant_times_.add(lease->granted_us);
  lease->holder_slot = holders_.add(holder);
  auto [it, inserted] = byName(lease->lock.kind).try_emplace(lease->lock.name, nullptr);
  if (!inserted) lease->next_same_name = std::move(it->second);
  it->second = std::move(lease);
  ++size_;
}

std::unique_ptr<Lease> LeaseTable::remove(const LockId& lock, std::string_view owner) {
  ByName& leases = byName(lock.kind);
  auto it = leases.find(lock.name);
  if (it == leases.end()) return nullptr;
  std::unique_ptr<Lease>* slot = &it->second;
  while (*slot != nullptr && (*slot)->owner != owner) slot = &(*slot)->next_same_name;
  if (*slot == nullptr) return nullptr;
  std::unique_ptr<Lease> lease = std::move(*slot);
  *slot = std::move(lease->next_same_name);
  grant_times_.remove(lease->granted_us);
  holders_.remove(lease->holder_slot);
  if (it->second == nullptr) leases.erase(it);
  --size_;
  return lease;
}

std::vector<std::pair<LockId, std::string>> LeaseTable::keys() const {
  std::vector<std::pair<LockId, std::string>> out;
  out.reserve(size_);
  forEach([&out](const Lease& l) { out.emplace_back(l.lock, l.owner); });
  return out;
}

std::string LostLeaseMemory::keyOf(const LockId& lock, std::string_view owner) {
  // The kind in the first byte; NUL cannot occur in a valid lock name, so the split is
  // unambiguous.
  std::string key;
  key.reserve(1 + lock.name.size() + 1 + owner.size());
  key.push_back(static_cast<char>(lock.kind));
  key.append(lock.name).push_back('\0');
  key.append(owner);
  return key;
}

void LostLeaseMemory::dropExpired(int64_t now_us) {
  while (!order_.empty() && order_.front().expires_us <= now_us) {
    index_.erase(order_.front().key);
    order_.pop_front();
  }
}

void LostLeaseMemory::remember(const LockId& lock, std::string_view owner, int64_t now_us) {
  if (capacity_ == 0) return;
  dropExpired(now_us);
  std::string key = keyOf(lock, owner);
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

bool LostLeaseMemory::contains(const LockId& lock, std::string_view owner, int64_t now_us) {
  dropExpired(now_us);
  return index_.find(keyOf(lock, owner)) != index_.end();
}

void LostLeaseMemory::forget(const LockId& lock, std::string_view owner) {
  if (index_.empty()) return;  // the usual case: every grant and release forgets its pair
  auto it = index_.find(keyOf(lock, owner));
  if (it == index_.end()) return;
  order_.erase(it->second);
  index_.erase(it);
}

}  // namespace sidelock::lock
