// The in-process backend: one map of lock name -> lease, for single-process deployments
// (`backend.type: memory`) and for fast, deterministic lock-service tests on a FakeScheduler.
//
// Semantics mirror the Redis scripts (it is their reference model: differential_test runs both on
// the same random operations; elections included): SET NX PX + a per-name fencing counter that
// never resets (so tokens strictly increase per name even across releases and expiries),
// owner-checked release and extend, and lazy expiry against the Scheduler's monotonic clock. Every
// callback is posted to a later loop turn (Backend contract).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "event/lifetime.h"
#include "event/scheduler.h"

namespace sidelock::backend {

class MemoryBackend final : public Backend {
 public:
  explicit MemoryBackend(event::Scheduler& scheduler);
  ~MemoryBackend() override;
  MemoryBackend(const MemoryBackend&) = delete;
  MemoryBackend& operator=(const MemoryBackend&) = delete;

  void start() override {}
  void run(const Operation& op, OutcomeCallback cb) override;
  bool canHandOff() const override { return true; }
  bool acquiresAllAtOnce() const override { return true; }
  void acquireAll(const std::vector<std::string>& names, std::string_view owner, int64_t ttl_ms,
                  std::string_view holder, AllOutcomeCallback cb) override;

  /// The live mutex and fair leases that have a holder label (no time budget: in memory).
  void scanHolders(const HolderScan& scan, ScanCallback cb) override;
  void setReleaseListener(ReleaseListener listener) override { listener_ = std::move(listener); }
  void watchReleases(std::string_view name) override;
  void unwatchReleases(std::string_view name) override;

  BackendHealth health() const override;
  void shutdown(std::function<void()> done) override;

  // --- test hooks (pure logic; not part of the Backend interface) ---
  /// Deletes a lease behind everybody's back (simulates data loss / an admin DEL). No
  /// notification is published, as with a key that silently vanished. `kind` kElection: the
  /// election's lease (its own keys), else the lock's.
  void forceDelete(std::string_view name, LockKind kind = LockKind::kMutex);
  /// Replaces the holder (simulates a lease stolen after a pause). Keeps the expiry.
  void forceOwner(std::string_view name, std::string_view owner);
  /// Number of names with an active watch (for tests of watch/unwatch balance).
  size_t watchedNames() const { return watches_.size(); }

 private:
  /// The holders of the leases in a readers' or permits' map: owner -> label and since_ms (the
  /// LeaseHolder's ttl_ms unused: the lease's own map has the expiry), as lease_labels.lua keeps.
  using Labels = std::map<std::string, LeaseHolder, std::less<>>;
  struct Entry {
    std::string owner;      // empty when free
    int64_t expiry_us = 0;  // Scheduler time; meaningful while owner is non-empty
    uint64_t token = 0;     // last fencing token granted for this name; never reset
    int64_t holds = 1;      // reentrant acquires: holds of the current lease
    std::string holder;     // the lease's public label (Operation::holder); empty if none
    int64_t since_ms = 0;   // when the lease was granted, Unix ms (system clock)
    /// Lock-delay (as src/redis/lua/lib/lock_delay.lua): the lease's lock_delay_ms, and until
    /// when (Scheduler time) nobody is granted the lock once the lease is gone: its expiry + the
    /// delay while held, now + the delay after a force or involuntary release, 0 after a release.
    int64_t delay_ms = 0;
    int64_t delay_until_us = 0;
    /// Readers of a read/write lock (owner -> expiry, Scheduler time), held while no writer
    /// (`owner`) is; and the queued writers' marks (writer -> until when it turns new readers
    /// away; kept after the readers left, cleared when a queued writer gets in, one removed when
    /// its writer withdraws).
    std::map<std::string, int64_t, std::less<>> readers;
    std::map<std::string, int64_t, std::less<>> writer_marks;
    Labels reader_labels;  // the readers' holders
    /// Fair locks: the waiters in arrival order, each with the end of its claim.
    struct FairWaiter {
      std::string owner;
      int64_t claim_until_us = 0;
    };
    std::vector<FairWaiter> fair_queue;
  };

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  /// The entry if the name is currently held (expired leases are cleared on the way).
  Entry* liveEntry(std::string_view name);
  /// One verb, synchronously (the Redis scripts' semantics); errors for bad arguments.
  StatusOr<Outcome> apply(const Operation& op);
  StatusOr<Outcome> applySemaphore(const Operation& op);
  StatusOr<Outcome> applyShared(const Operation& op);
  /// Fair acquire and withdraw (a fair lock's other verbs are the mutex's). Sets
  /// `announce_withdraw_` when a withdrawal left a free lock to the next waiter.
  StatusOr<Outcome> applyFair(const Operation& op);
  /// Elections: a mutex of their own (never the lock of the same name) recording who leads.
  StatusOr<Outcome> applyElection(const Operation& op);
  /// The live readers of `name` (expired ones dropped).
  Entry* liveReaders(std::string_view name);
  /// Until when (Scheduler time) queued writers keep readers of `e` out; 0 if no mark lives
  /// (expired marks dropped).
  static int64_t writerMarksUntilUs(Entry& e, int64_t now_us);
  /// A queued writer leaves: its mark goes (kOk if it had one). Sets `announce_withdraw_` when
  /// that let readers in.
  StatusOr<Outcome> withdrawWriter(const Operation& op);
  /// When the holder of a lock lets go (Scheduler time): the writer's expiry, else the last
  /// reader's; 0 when the lock is free (both null).
  static int64_t holderExpiryUs(const Entry* writer, const Entry* readers);
  /// Posts `fn` unless this backend has been destroyed by then.
  void deliver(std::function<void()> fn);
  /// Announces a change of `name` (`reason`: backend::announcement, a string literal) to the
  /// listener on a later turn, while it is watched.
  void notifyReleased(std::string_view name, std::string_view reason);

  event::Scheduler& scheduler_;
  std::unordered_map<std::string, Entry, StringHash, std::equal_to<>> locks_;
  /// A semaphore: live permits (permit -> expiry, Scheduler time), its limit and its own fencing
  /// counter (never reset: the entry stays when the last permit goes).
  struct Semaphore {
    std::map<std::string, int64_t, std::less<>> permits;
    Labels labels;  // the permits' holders
    int64_t limit = 0;
    uint64_t token = 0;
  };
  std::unordered_map<std::string, Semaphore, StringHash, std::equal_to<>> semaphores_;
  /// An election: the leader's lease (owner, expiry in Scheduler time; owner empty when nobody
  /// leads), its own fencing counter (the term; never reset) and the leader's record (since_ms:
  /// the scheduler's wall clock at the grant).
  struct Election {
    std::string owner;
    int64_t expiry_us = 0;
    uint64_t token = 0;
    LeaderRecord leader;
  };
  std::unordered_map<std::string, Election, StringHash, std::equal_to<>> elections_;
  std::unordered_map<std::string, int, StringHash, std::equal_to<>> watches_;
  ReleaseListener listener_;
  bool shut_down_ = false;
  bool announce_withdraw_ = false;
  // Posted callbacks hold a weak reference: a callback still queued on the loop when the backend
  // is destroyed must not touch it.
  event::LivenessToken alive_;
};

}  // namespace sidelock::backend
