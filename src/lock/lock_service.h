// The lock service: leases, owner ids, fencing, waiter queues, renewal (watchdog), lost-lease
// detection. It sees the Backend interface and a Scheduler, nothing else: it runs on the real loop
// in production and on a FakeScheduler + MemoryBackend in unit tests.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "config/config.h"
#include "event/scheduler.h"
#include "lock/lock_id.h"
#include "metrics/metrics.h"

namespace sidelock::lock {

using BusyReason = backend::BusyReason;

/// The service knows each lock by a LockId (lock_id.h): the readers of a read/write lock wait in
/// a queue of their own ({kShared, name}): all of them contend at once (they share), and a queued
/// writer keeps new ones out through the backend's writer-waiting mark, so local readers and
/// readers of other sidecars meet the same writer preference. A fair lock's waiters ({kFair,
/// name}) queue in the backend in arrival order across sidecars; its lease is the mutex's.

using LeaderRecord = backend::LeaderRecord;

/// What inspect reports of a lock (never its owner).
struct LockState {
  bool held = false;
  int64_t ttl_ms = 0;  // remaining TTL when held
  uint64_t token = 0;  // fencing token of the current (or last) grant; 0 if never granted
  int64_t used = 0;    // semaphores: permits held now; read/write locks: readers holding it
  int64_t limit = 0;   // semaphores: the limit while permits are held
  LeaderRecord leader;  // elections, while held: who leads (`token` is the term)
  /// Locks (mutex, fair), while held: who holds it (the label its acquire recorded) and since
  /// when (Unix ms, the backend's clock); empty / 0 when unknown. The one source of both for
  /// every reader (GET /v1/locks/{name}, events).
  std::string holder;
  int64_t since_ms = 0;
  /// Readers (while readers hold it) and semaphores: each live lease's holder (those that
  /// recorded a label; at most backend::kMaxListedHolders, soonest expiry first).
  std::vector<backend::LeaseHolder> holders;
};

/// One lock the admin listing found held (never its owner).
struct HeldLock {
  std::string name;
  std::string holder;  // the label its acquire recorded
  int64_t since_ms = 0;
  int64_t ttl_ms = 0;
  uint64_t token = 0;
};
/// The admin listing (GET /admin/v1/locks): held locks across the deployment, sorted by name.
struct HeldQuery {
  std::string prefix;      // lock names starting with this ("" = all)
  size_t limit = 100;      // at most this many locks
  int64_t budget_ms = 200; // the backend scan's time budget
};
struct HeldListing {
  std::vector<HeldLock> locks;
  bool truncated = false;
  std::string truncated_reason;  // why, when truncated: limit, time budget, nodes not scanned
};

/// What an operator's force release did.
struct ForcedRelease {
  bool released = false;  // a lease existed and was deleted
  uint64_t token = 0;     // the lock's last token (the freed lease's, normally); 0 if none
};

// The backend's health types, named here so the layers above (api) speak to the lock service only
// and never include the backend.
using BackendHealth = backend::BackendHealth;
using NodeHealth = backend::NodeHealth;

/// The longest wait a kind with KindPolicy::waits_until_cancelled accepts (about 100 years: a
/// campaign waits for as long as its client stays).
inline constexpr int64_t kWaitUntilCancelledMs = 100LL * 365 * 24 * 3600 * 1000;

struct AcquireOptions {
  LockId lock;
  std::string owner;   // empty: the service generates a 128-bit random owner id
  int64_t ttl_ms = 0;  // validated by the API layer: 1..max_ttl_ms (<= 0: default_ttl_ms)
  /// 0 = try once (answered busy without a backend call if local waiters are queued for the
  /// name: a single try never jumps the FIFO); else queue up to this long (clamped to
  /// max_wait_ms). A queued waiter rides out backend outages: it fails with kError only if its
  /// budget ends while the backend is still out. The queue limits (max_waiters_per_lock,
  /// max_waiters) apply only when the caller must wait: with no local queue for the name, a full
  /// limit first makes the acquire a single try, and only a busy answer is refused with
  /// kTooManyWaiters (a free lock is never refused for want of queue room).
  int64_t wait_ms = 0;
  bool auto_renew = false;
  /// auto_renew / stream cap; 0 = config default_max_hold_ms (0 there = no cap). No renewal
  /// starts if it would carry the hold past the cap, so the lease ends at or before it.
  int64_t max_hold_ms = 0;
  bool stream = false;  // hold bound to the client's connection (implies auto_renew)
  /// If `owner` holds the lease already, take one more hold of it (same token) instead of
  /// answering busy; each release gives back one hold, the lock is freed at zero. A re-entry by a
  /// lease this sidecar holds never queues (it would wait on itself): it is one try. Its own
  /// auto_renew / max_hold_ms are ignored: the lease keeps those it was granted with.
  bool reentrant = false;
  /// Semaphores: how many permits may be held at once (1..); `owner` is the permit.
  int64_t limit = 0;
  /// Elections: who campaigns (recorded with the lease when elected) and the value it leads with.
  std::string candidate;
  std::string value;
  /// Locks (mutex, fair, writers): who holds it, a public label recorded with the lease and
  /// shown by inspect on every sidecar (validated by the API: 1..256 printable ASCII). Never the
  /// owner id. Empty: none recorded.
  std::string holder;
  /// Mutex, fair and reentrant locks: after this lease ends without a release (expiry, force
  /// release, an involuntary release) nobody is granted the lock for this many ms (Consul's
  /// LockDelay); 0 = none. Validated by the API layer (0..locks.max_lock_delay_ms).
  int64_t lock_delay_ms = 0;
  /// `owner` was drawn for this acquire alone (a multi-lock's, when its caller gave none): as
  /// with an empty `owner`, nobody else holds leases under it, so a grant an unanswered attempt
  /// may have left is the service's to give back (src/lock/unanswered.cc).
  bool owner_drawn = false;
  /// With owner_drawn: an earlier acquire of this lock under `owner` got no answer (a
  /// multi-lock's all-at-once try); its possible grant is given back before the first attempt.
  bool unanswered_before = false;
};

/// How release() gives a lease up: kClean (the holder is done: the next owner may start at once)
/// or kInvoluntary (taken from a holder that may still be working, e.g. its app failed its health
/// check: the lease's lock_delay_ms applies as after an expiry, and it is never handed on).
enum class ReleaseMode { kClean, kInvoluntary };

struct Grant {
  LockId lock;
  std::string owner;
  uint64_t token = 0;
  int64_t ttl_ms = 0;  // validity granted (Redlock: after elapsed and drift)
  int64_t holds = 0;   // reentrant acquires: the lease's holds now (1, or more once re-entered)
};

enum class AcquireStatus {
  kGranted,
  kBusy,            // not granted within wait_ms (409 locked)
  kTooManyWaiters,  // queue limit (429)
  kCancelled,       // the caller cancelled (client gone) or the service is shutting down
  kError,           // backend error (503); see `error`
  kLimitMismatch,   // semaphores: the semaphore has another limit (409); see `semaphore_limit`
};

/// The queue limit a kTooManyWaiters answer hit.
enum class WaiterLimit {
  kNone,
  kPerLock,  // config max_waiters_per_lock: this name's queue is full
  kSidecar,  // config max_waiters: the waiters of all names together
};

struct AcquireResult {
  AcquireStatus status = AcquireStatus::kError;
  Grant grant;                 // kGranted
  int64_t retry_after_ms = 0;  // kBusy, kTooManyWaiters: a hint (holder's remaining TTL if known)
  /// kBusy: why the waiter's own last attempt was refused (kHeld when it never tried itself).
  BusyReason busy_reason = BusyReason::kHeld;
  std::string holder;  // kBusy: who held it at the last try (its public label); empty: unknown
  WaiterLimit limit = WaiterLimit::kNone;  // kTooManyWaiters
  Status error;                            // kError
  int64_t semaphore_limit = 0;             // kLimitMismatch: the limit the semaphore has
};

/// kLeaseLost: the sidecar had granted this (name, owner) and found it lost (remembered for
/// 10 minutes, up to 4096 pairs); kNotHeld otherwise when no lease exists (e.g. expired).
/// kHoldReleased: one hold of a re-entered lease was given back; the lease stays held (holds()
/// tells how many are left).
enum class ReleaseStatus { kReleased, kNotOwner, kNotHeld, kLeaseLost, kHoldReleased };
enum class ExtendStatus { kExtended, kNotOwner, kNotHeld, kLeaseLost };

struct ExtendResult {
  ExtendStatus status = ExtendStatus::kNotHeld;
  int64_t ttl_ms = 0;
};

/// Elections: how a leader's proclaim came out (kLeaseLost as for release).
enum class ProclaimStatus { kProclaimed, kNotOwner, kNotHeld, kLeaseLost };
struct ProclaimResult {
  ProclaimStatus status = ProclaimStatus::kNotHeld;
  uint64_t term = 0;   // kProclaimed: the leader's term (unchanged by a proclaim)
  int64_t ttl_ms = 0;  // kProclaimed: the lease's TTL left
};

/// What an announced change of a name was (watchChanges): the pub/sub payload, parsed.
enum class ChangeReason {
  kCatchUp,     // not an announcement: the backend (or the name's subscription) came back, so
                // announcements may have been missed
  kReleased,    // a release (or a waiter's withdrawal); also any payload this version does not know
  kForced,      // an operator's force release
  kGranted,     // a grant or a hand-off
  kProclaimed,  // an election leader's new value
  kRolledBack,  // Redlock: an acquire that was not granted deleted its keys (no lease ended)
};

/// Keeps a watch on a name's announced changes (watchChanges) while alive.
class ChangeWatch {
 public:
  ChangeWatch() = default;
  explicit ChangeWatch(std::function<void()> stop) : stop_(std::move(stop)) {}
  ChangeWatch(ChangeWatch&&) noexcept = default;
  ChangeWatch& operator=(ChangeWatch&& o) noexcept {
    if (this != &o) {
      reset();
      stop_ = std::move(o.stop_);
    }
    return *this;
  }
  ~ChangeWatch() { reset(); }
  void reset() {
    if (stop_) std::exchange(stop_, nullptr)();
  }
  explicit operator bool() const { return static_cast<bool>(stop_); }

 private:
  std::function<void()> stop_;
};

/// Events pushed to a holder that passed `on_event` (stream holds), on later loop turns:
///  - kRenewed: a watchdog renewal succeeded;
///  - kCapped: max_hold_ms reached, renewals stopped (the lease runs out by itself);
///  - kLost: the lease is no longer held although it was not released: a renewal or extend found
///    it gone / owned by another, renewals failed until its validity ran out, or it expired.
///    Sent at most once, always last.
///  - kCapExpired: after kCapped, the lease ran out at the cap, as planned (not a failure). Sent
///    instead of kLost, always last.
/// kReleased: the lease was released through release() (by its holder's request or at shutdown);
/// always the last event, like kLost.
enum class LeaseEvent { kRenewed, kLost, kCapped, kReleased, kCapExpired };

/// A lease this sidecar granted and still holds, for GET /v1/locks (no owner ids).
struct LeaseInfo {
  LockId lock;
  uint64_t token = 0;
  int64_t age_ms = 0;
  int64_t ttl_remaining_ms = 0;
  bool auto_renew = false;
  bool stream = false;
};

struct WaiterCount {
  LockId lock;
  int waiters = 0;
};

/// Cancels a queued acquire when destroyed or cancel()ed (the client went away). Harmless after
/// the acquire completed.
class AcquireTicket {
 public:
  AcquireTicket() = default;
  explicit AcquireTicket(std::function<void()> cancel) : cancel_(std::move(cancel)) {}
  AcquireTicket(AcquireTicket&&) noexcept = default;
  AcquireTicket& operator=(AcquireTicket&& o) noexcept {
    if (this != &o) {
      cancel();
      cancel_ = std::move(o.cancel_);
    }
    return *this;
  }
  ~AcquireTicket() { cancel(); }
  void cancel() {
    if (cancel_) std::exchange(cancel_, nullptr)();
  }
  /// Forget the ticket without cancelling (the acquire continues on its own).
  void release() { cancel_ = nullptr; }

 private:
  std::function<void()> cancel_;
};

/// A multi-lock: every name or none, with one owner id (README "Multi-locks").
struct MultiAcquireOptions {
  std::vector<std::string> names;  // mutex names, distinct; taken in sorted (global) order
  std::string owner;               // empty: the service generates one
  int64_t ttl_ms = 0;              // each lease's TTL (<= 0: default_ttl_ms)
  int64_t wait_ms = 0;             // the budget for all names together
  bool auto_renew = false;
  int64_t max_hold_ms = 0;
  std::string holder;  // each lease's public label (AcquireOptions::holder)
};

struct MultiAcquireResult {
  AcquireStatus status = AcquireStatus::kError;
  std::string owner;           // kGranted
  std::vector<Grant> grants;   // kGranted: one per name, in sorted name order
  int64_t ttl_ms = 0;          // kGranted: the shortest validity of the leases
  std::string blocked_by;      // kBusy, kTooManyWaiters, kError: the name that was not granted
  int64_t retry_after_ms = 0;  // kBusy, kTooManyWaiters
  WaiterLimit limit = WaiterLimit::kNone;
  Status error;  // kError
};

class LockService {
 public:
  LockService(const config::LocksConfig& config, backend::Backend& backend,
              event::Scheduler& scheduler, metrics::Metrics& metrics);
  ~LockService();
  LockService(const LockService&) = delete;
  LockService& operator=(const LockService&) = delete;

  /// Acquires (once or waiting in the per-name FIFO queue). `done` runs exactly once, on a later
  /// loop turn, unless the ticket was cancelled first (then it runs with kCancelled, also later).
  /// If a grant arrives after cancellation, the lease is released at once.
  /// `on_event`, when set, receives lease events (lost / capped / renewed) for the granted lease
  /// until it is released; used by stream holds.
  AcquireTicket acquire(AcquireOptions options, std::function<void(AcquireResult)> done,
                        std::function<void(LeaseEvent)> on_event = nullptr);

  /// Releases the lease: stops its renewal first (no renewal ever runs after this is answered;
  /// a renewal already in flight is answered before the release is sent). A backend error
  /// answers the error status; the lease then keeps no watchdog and simply expires.
  void release(const LockId& lock, std::string_view owner,
               std::function<void(StatusOr<ReleaseStatus>)> done,
               ReleaseMode mode = ReleaseMode::kClean);
  /// How releaseUnhealthy ends a lease. kRelease: released in the backend at once. kRunOut
  /// (a holder that listens on a stream and may have a process working under the lease, as
  /// sidelock run's CMD): the holder hears kLost now, renewals stop, and the lease runs out
  /// within one TTL, so that nobody else is granted the lock before the holder could stop.
  enum class UnhealthyEnd { kRelease, kRunOut };
  /// Ends the lease (lock, owner) this sidecar holds because its holder is unhealthy (README
  /// "Holds that follow the app's health"): renewal stops, the lease is released in the backend
  /// (waiters anywhere are woken) or, with kRunOut on a stream lease, left to run out; its
  /// holder's stream gets kLost. A later release / extend by its owner answers lease_lost (once
  /// released). Counted in sidelock_leases_released_unhealthy_total.
  /// Nothing happens if this sidecar holds no such lease.
  void releaseUnhealthy(const LockId& lock, std::string_view owner,
                        UnhealthyEnd how = UnhealthyEnd::kRelease);
  /// Owner-checked extend; on success a watchdog (auto_renew) renews with `ttl_ms` from then on.
  void extend(const LockId& lock, std::string_view owner, int64_t ttl_ms,
              std::function<void(StatusOr<ExtendResult>)> done);
  void inspect(const LockId& lock, std::function<void(StatusOr<LockState>)> done);
  /// Elections: the leader (`owner`, owner-checked) proclaims a new `value`; every sidecar's
  /// observers hear of it (the change is announced).
  void proclaim(const LockId& lock, std::string_view owner, std::string_view value,
                std::function<void(StatusOr<ProclaimResult>)> done);
  /// Calls `on_change` (on a later loop turn) with what changed whenever a change of `name` is
  /// announced by any sidecar (a release, a force release, a grant or hand-off; an election's
  /// grant, proclaim or resign), and with kCatchUp once each time the backend, or the name's
  /// subscription, comes back after an outage (announcements may have been missed meanwhile),
  /// until the returned watch is destroyed. Lease expiries are not announced: a watcher that must
  /// see them reads again when the TTL it read runs out. Watches of one name share one backend
  /// subscription. Only releases (and resubscriptions) wake waiters; grants are news to watchers
  /// only.
  ChangeWatch watchChanges(std::string_view name, std::function<void(ChangeReason)> on_change);
  /// Operators only: frees the lock whoever holds it (no owner check, no new token), wakes the
  /// waiters, and if this sidecar granted the lease, ends it as lost (its holder's stream gets
  /// `lost`; its release / extend answer lease_lost).
  /// By name, not LockId: the mutex, its fair holders and its readers share the one lease freed.
  void forceRelease(std::string_view name, std::function<void(StatusOr<ForcedRelease>)> done);
  /// Operators: the locks held anywhere in the deployment (held_listing.cc): the backend scans
  /// for holder records (Backend::scanHolders: bounded, SCAN in small batches within the
  /// budget), then each name found is inspected (Redlock: a quorum read), so a lock is listed
  /// only while its lease lives. The `limit` smallest names; truncated says when more exist
  /// or the scan was cut short.
  void listHeld(const HeldQuery& query, std::function<void(StatusOr<HeldListing>)> done);

  /// Acquires every name of `options` or none. Where the backend keeps every lock on one node
  /// (Backend::acquiresAllAtOnce) the first try is one atomic step. Otherwise, and to wait after
  /// that try found a name held, the names are taken one by one in sorted order,
  /// the same on every sidecar, so two multi-locks with overlapping names never wait for each
  /// other in a cycle (no deadlock); each waits with what is left of the common `wait_ms`. A name
  /// that is not granted gives back those taken before it. Leases taken early whose validity
  /// fell below half their TTL while later names were waited for are extended to `ttl_ms`
  /// before the grant is answered (one that was lost meanwhile fails the whole acquire).
  /// `done` runs once, on a later turn; the ticket cancels (and gives back what was taken).
  AcquireTicket acquireAll(MultiAcquireOptions options,
                           std::function<void(MultiAcquireResult)> done);
  /// Releases each of `names` held by `owner`; `done` gets one answer per name, in order.
  void releaseAll(std::vector<std::string> names, std::string owner,
                  std::function<void(std::vector<StatusOr<ReleaseStatus>>)> done);

  std::vector<LeaseInfo> leases() const;
  /// Holds of the lease (lock, owner) this sidecar holds; 0 if it holds none.
  int64_t holds(const LockId& lock, std::string_view owner) const;
  /// What is left of the validity of the lease (lock, owner) this sidecar holds, as last
  /// confirmed by the backend, in whole milliseconds rounded down (a holder may count on it);
  /// -1 if it holds none.
  int64_t validityLeftMs(const LockId& lock, std::string_view owner) const;
  /// Whether this sidecar granted (lock, owner) and saw it lost lately (what lease_lost answers).
  bool lostLately(const LockId& lock, std::string_view owner);
  /// While a LeaseEvent::kLost (or kCapExpired) is being delivered: why the lease ended, in words
  /// (what the lease.lost log line says, e.g. "force-released by an operator"); nullptr otherwise
  /// (and for a health-bound lease ended unhealthy). For the streams that tell their client; the
  /// event itself stays a plain enum.
  const char* lossReason() const;
  std::vector<WaiterCount> waiterCounts() const;
  /// The backend's health, for /readyz.
  BackendHealth backendHealth() const;

  /// Stops accepting work, fails waiters with kCancelled, stops renewals, releases held leases
  /// if `release_held`, then calls `done` (on a later turn) once every backend call it made has
  /// answered — or after `grace_ms` at the latest. release/extend/inspect keep working. Leases
  /// not released stay in leases() until they expire.
  /// Destroying the service is safe at any time: pending callbacks are then never called.
  void shutdown(bool release_held, int64_t grace_ms, std::function<void()> done);
  /// SIGTERM, before shutdown(): answers every waiter kCancelled now, while the leases held stay
  /// renewed (campaign leaders stepping down keep theirs until shutdown()). Callers refuse new
  /// acquires themselves meanwhile (LockApi::setDraining); shutdown() cancels any waiter left.
  void cancelWaiters();

  /// The implementation (lock_service_impl.h), named here for the service's own parts
  /// (multi_lock.cc); nothing outside src/lock uses it.
  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sidelock::lock
