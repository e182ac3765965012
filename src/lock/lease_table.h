// The leases this sidecar granted and still believes held, plus a bounded memory of leases it
// found lost (so that a later release can answer "lease_lost" instead of a bare "not_held").
#pragma once

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "event/scheduler.h"
#include "lock/backoff.h"
#include "lock/lock_id.h"
#include "lock/lock_service.h"

namespace sidelock::lock {

/// A hold count as a Lease keeps it (the backend's count is 64-bit; nobody re-enters 2^31 times).
inline int32_t clampHolds(int64_t holds) {
  return static_cast<int32_t>(std::clamp<int64_t>(holds, 0, INT32_MAX));
}

/// Work queued behind a lease's renewal in flight (a release, a shutdown's releases). Rare: a
/// lease pays one pointer for it, not an empty vector's three (RSS budget).
class AfterRenewal {
 public:
  void push_back(std::function<void()> fn) {
    if (list_ == nullptr) list_ = std::make_unique<std::vector<std::function<void()>>>();
    list_->push_back(std::move(fn));
  }
  bool empty() const { return list_ == nullptr || list_->empty(); }
  /// The work queued so far, in order; none is left queued.
  std::vector<std::function<void()>> take() {
    std::unique_ptr<std::vector<std::function<void()>>> taken = std::move(list_);
    return taken != nullptr ? std::move(*taken) : std::vector<std::function<void()>>();
  }

 private:
  std::unique_ptr<std::vector<std::function<void()>>> list_;
};

struct Lease {
  Lease(int64_t retry_min_ms, int64_t retry_max_ms) : renew_backoff(retry_min_ms, retry_max_ms) {}

  uint64_t id = 0;  // unique per grant: callbacks find "their" lease by (lock, id)
  LockId lock;
  std::string owner;
  uint64_t token = 0;
  int64_t ttl_ms = 0;  // as requested: what every renewal extends by
  int64_t granted_us = 0;
  int64_t expiry_us = 0;  // end of validity as last confirmed by the backend
  // Flags as bits next to `holds`, in what would be padding: 100k leases must stay within the RSS
  // budget (8 bytes less a lease puts it in a smaller allocator bin).
  bool auto_renew : 1 = false;
  bool stream : 1 = false;
  // Watchdog state.
  bool renewing : 1 = false;         // renewals still planned (auto_renew, not capped or released)
  bool renew_in_flight : 1 = false;  // a backend extend for a renewal has not answered yet
  bool releasing : 1 = false;        // release started: renewals are over for good
  bool capped : 1 = false;           // renewals stopped at max_hold_ms: it runs out at the cap
  bool unhealthy : 1 = false;        // released because its app is unhealthy: never renewed again
  bool lock_delay : 1 = false;       // acquired with lock_delay_ms > 0 (its backend keeps a delay)
  // Its holder label's slot in the table's HolderTally (0: none recorded), in the rest of the
  // flags' 32 bits: the label itself is kept once per holder there, not once per lease.
  uint32_t holder_slot : 24 = 0;
  int32_t holds = 1;                 // reentrant acquires: holds taken and not yet given back
  int64_t hold_deadline_us = 0;  // auto_renew: no renewal starts at or after this (0 = no cap)
  std::function<void(LeaseEvent)> on_event;

  /// Work that must wait until the in-flight renewal answered (release sequencing).
  AfterRenewal after_renewal;
  Backoff renew_backoff;  // pacing of retries after transient errors
  event::ScopedTimer expiry_timer;
  event::ScopedTimer renew_timer;

  /// The next lease of the same lock (semaphore permits held through this sidecar); owned here so
  /// that a mutex's single lease costs no list of its own.
  std::unique_ptr<Lease> next_same_name;
};

/// When the leases still held were granted, in one-second buckets, so that the oldest one is known
/// without walking the table (a scrape must not walk 100k leases: ~80 ms on the loop) and without
/// a field in every Lease (RSS budget). Grants arrive in time order, so a bucket is appended at
/// the end; the buckets in use are the distinct seconds of the live leases' grants, a few hundred
/// when leases live up to locks.max_ttl_ms.
class GrantTimes {
 public:
  void add(int64_t granted_us);
  void remove(int64_t granted_us);
  /// Grant time of the oldest lease, to within the second it was granted in (the bucket keeps
  /// its first grant's time even after that lease is gone); -1 when none is held.
  int64_t oldestUs() const { return buckets_.empty() ? -1 : buckets_.begin()->second.first_us; }

 private:
  struct Bucket {
    int64_t first_us;  // grant time of the first lease put in this second
    int64_t count;
  };
  std::map<int64_t, Bucket> buckets_;  // by granted_us / 1'000'000
};

/// How many leases of the table each holder label holds (sidelock_held_locks_by_holder), kept on
/// every insert and remove (one hash lookup of the label), so a scrape reads one count per
/// holder and never walks the leases. Each distinct label is stored once, in a numbered slot that
/// its leases name (Lease::holder_slot); a slot is reused once its last lease is gone.
class HolderTally {
 public:
  /// The slot of a lease without a label (and, past kMaxSlots distinct labels, of any lease).
  static constexpr uint32_t kNoLabel = 0;
  static constexpr uint32_t kMaxSlots = (1u << 24) - 1;  // what Lease::holder_slot holds

  /// Counts one more lease of `holder` ("" = none recorded); returns its slot.
  uint32_t add(std::string_view holder);
  /// Counts one lease of `slot` less (the slot add() returned).
  void remove(uint32_t slot);
  /// Leases without a label.
  int64_t unlabelled() const { return unlabelled_; }
  /// Distinct labels held now.
  size_t size() const { return index_.size(); }
  /// f(holder, leases) for every label held now, in no particular order.
  template <typename F>
  void forEach(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.leases > 0) f(std::string_view(*s.holder), s.leases);
    }
  }

 private:
  struct Slot {
    const std::string* holder = nullptr;  // its key in index_ while leases > 0
    int64_t leases = 0;
  };
  struct LabelHash {
    using is_transparent = void;  // find a label by string_view, without a copy per grant
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<Slot> slots_;     // slot i is slots_[i - 1]
  std::vector<uint32_t> free_;  // slots whose label is no longer held
  std::unordered_map<std::string, uint32_t, LabelHash, std::equal_to<>> index_;  // label -> slot
  int64_t unlabelled_ = 0;
};

/// Leases by (lock, owner): a mutex has at most one per lock, a semaphore one per permit.
class LeaseTable {
 public:
  /// A lease of `lock` (a mutex's only one), or nullptr.
  Lease* find(const LockId& lock) const;
  /// The lease of `lock` that `owner` holds.
  Lease* find(const LockId& lock, std::string_view owner) const;
  LeaseTable() = default;
  LeaseTable(const LeaseTable&) = delete;
  LeaseTable& operator=(const LeaseTable&) = delete;
  /// Unlinks each chain first: thousands of permits must not end in a recursion as deep.
  ~LeaseTable();
  /// Inserts a lease no other lease of the table has the (lock, owner) of, at its grant
  /// (granted_us set, and not before that of any lease inserted earlier), counted for `holder`
  /// (its public label, "" = none).
  void insert(std::unique_ptr<Lease> lease, std::string_view holder = {});
  std::unique_ptr<Lease> remove(const LockId& lock, std::string_view owner);
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  /// Grant time of the oldest lease held (to the second), -1 with none.
  int64_t oldestGrantedUs() const { return grant_times_.oldestUs(); }
  /// The leases held by each holder label.
  const HolderTally& holders() const { return holders_; }
  template <typename F>
  void forEach(F&& f) const {
    for (const ByName& leases : by_kind_) {
      for (const auto& [name, first] : leases) {
        for (const Lease* l = first.get(); l != nullptr; l = l->next_same_name.get()) f(*l);
      }
    }
  }
  /// (lock, owner) of every lease, for loops that end leases as they go.
  std::vector<std::pair<LockId, std::string>> keys() const;

 private:
  // One map per kind, keyed by the name alone: a LockId key would cost every lease 16 bytes more
  // (the kind's padding in the key, and the next allocator bin for the node): 1.6 MB at 100k.
  // Lookups come with the LockId's own std::string name, so the key needs no transparent hash.
  using ByName = std::unordered_map<std::string, std::unique_ptr<Lease>>;
  ByName& byName(LockKind kind) { return by_kind_[static_cast<size_t>(kind)]; }
  const ByName& byName(LockKind kind) const { return by_kind_[static_cast<size_t>(kind)]; }

  std::array<ByName, backend::kLockKindCount> by_kind_;
  size_t size_ = 0;
  GrantTimes grant_times_;
  HolderTally holders_;
};

/// Recently lost (lock, owner) pairs: least-recently-lost evicted beyond `capacity`, entries
/// forgotten after `retention_us`. Owner ids are kept only in memory, never logged.
class LostLeaseMemory {
 public:
  LostLeaseMemory(size_t capacity, int64_t retention_us)
      : capacity_(capacity), retention_us_(retention_us) {}

  void remember(const LockId& lock, std::string_view owner, int64_t now_us);
  bool contains(const LockId& lock, std::string_view owner, int64_t now_us);
  void forget(const LockId& lock, std::string_view owner);
  size_t size() const { return index_.size(); }

 private:
  struct Entry {
    std::string key;
    int64_t expires_us;
  };
  static std::string keyOf(const LockId& lock, std::string_view owner);
  void dropExpired(int64_t now_us);

  size_t capacity_;
  int64_t retention_us_;
  std::list<Entry> order_;  // oldest first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace sidelock::lock
