// The storage behind the lock service. One implementation per backend type: memory (in-process),
// redis (one master) and redlock (N independent masters, majority quorum). The lock service sees
// only this interface; nothing above src/backend includes hiredis.
//
// Contract for every asynchronous call:
//  - the callback runs exactly once, on a later loop turn (never inside the call);
//  - after shutdown() starts, pending and new calls complete with kCancelled / kUnavailable;
//  - the Backend outlives all callbacks it has not yet delivered (the owner destroys it only after
//    shutdown()'s done callback ran).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sidelock::backend {

/// What a lock operation does. Every backend serves every verb through Backend::run(), for the
/// kinds that have it: a semaphore or readers are never handed on, force-released or withdrawn
/// (answered kFailedPrecondition).
enum class Verb : uint8_t {
  kAcquire,       // one atomic attempt to grant `name` to `owner` for `ttl_ms`; never waits
  kRelease,       // owner-checked delete; announces the release to waiters everywhere
  kExtend,        // owner-checked: the lease's TTL becomes `ttl_ms`; never re-creates a lease
  kInspect,       // the lock's state, without revealing the owner
  kHandOff,       // owner-checked release that grants `next_owner` for `ttl_ms` in the same step
  kForceRelease,  // operators: delete whoever holds it, announce it; the token counter stays
  /// `owner` stops waiting (gave up, hung up, shutdown): a fair waiter leaves the lock's queue;
  /// a queued writer (kMutex) withdraws its mark, and if no other writer's mark is left on a lock
  /// that no writer holds, the readers kept out are told (announced like a release).
  kWithdraw,
  /// Elections: owner-checked, the leader's value becomes `value` (same term, same TTL), and the
  /// change is announced like a release so that observers everywhere read the leader again.
  kProclaim,
};
/// One more per verb above (src/redis/scripts.cc sizes its script-per-verb table by it).
inline constexpr size_t kVerbCount = 8;

/// The kind of lock an operation works on. Each kind has its own keys (so one name used as two
/// kinds never collides) and its own scripts.
enum class LockKind : uint8_t {
  kMutex,      // one holder (reentrant acquires: one holder, counted holds)
  kSemaphore,  // up to `limit` holders at once, each with its own permit (owner) and TTL
  /// Readers of a read/write lock ("mode": "shared"): any number at once, each with its own
  /// lease and TTL, never together with a writer. A writer is the name's mutex holder: the two
  /// kinds share the lock's keys, so readers and writers of one name exclude each other.
  kShared,
  /// A fair lock: a mutex (the same key: its holder is the mutex holder) granted in the order
  /// its waiters of every sidecar arrived, through a queue in the backend. A waiter holds its
  /// place by a claim that expires unless renewed, so a dead waiter or sidecar drops out.
  kFair,
  /// A leader election: a mutex with keys of its own (an election and a lock of one name never
  /// meet) whose lease also records who leads: the candidate, the value it proclaims and since
  /// when, readable from every sidecar (inspect). A grant, a proclaim and a resign (release) are
  /// announced on the name's release channel, so observers and candidates everywhere learn of
  /// them at once; the grant's fencing token is the election's term.
  kElection,
};
inline constexpr size_t kLockKindCount = 5;

/// One lock operation: a verb on one lock of one kind, as `owner`. The strings are views: the
/// backend copies what it keeps before run() returns.
struct Operation {
  Verb verb = Verb::kInspect;
  LockKind kind = LockKind::kMutex;
  std::string_view name;
  std::string_view owner;       // acquire, release, extend, hand-off (the current holder)
  int64_t ttl_ms = 0;           // acquire, extend; hand-off: the next owner's TTL
  std::string_view next_owner;  // hand-off only
  /// Acquire: if `owner` holds the lease already, take one more hold of it (same token, TTL at
  /// least `ttl_ms`) instead of answering busy. Release then gives back one hold at a time.
  bool reentrant = false;
  /// Semaphore acquire: how many permits may be held at once (the semaphore's limit while it has
  /// permits; another limit is answered kLimitMismatch).
  int64_t limit = 0;
  /// Mutex acquire by a waiter that will try again: if readers hold the lock, `owner` marks
  /// itself waiting for this long, and new readers are turned away while any writer's mark lives
  /// (writer preference, across sidecars) so the readers drain. 0: a single try marks nothing.
  /// A writer's withdraw (kWithdraw of kMutex) removes its own mark and marks the writers in
  /// `also_waiting` (still queued on its sidecar) for this long instead.
  int64_t writer_wait_ms = 0;
  /// Fair acquire by a waiter that will try again: `owner` joins the queue (or keeps its place)
  /// with a claim of this many ms; the owner ids in `also_waiting` (space-separated, in their
  /// local order) are the sidecar's other waiters, registered and renewed in the same step.
  /// 0: a single try, which never joins the queue (and is granted only if nobody waits).
  /// (For a writer's withdraw: the writers who take its mark over.)
  int64_t claim_ms = 0;
  std::string_view also_waiting;
  /// Elections: acquire (campaign) records `candidate` and `value` with the lease; proclaim sets
  /// `value`. Both are opaque text (validated above: candidate 1..256 printable, value <= 4 KiB).
  std::string_view candidate;
  std::string_view value;
  /// Mutex and fair acquire (hand-off: the next owner's): who holds the lease, as a public label
  /// (validated above: 1..256 printable ASCII; the sidecar's identity by default), recorded with
  /// the lease and read back by inspect and busy acquires on every sidecar. Never the owner id.
  /// Empty: none recorded.
  std::string_view holder;
  /// Lock-delay (mutex and fair acquire; hand-off: the next owner's): after this lease ends
  /// without a release (expiry, force release, an involuntary release) nobody is granted the lock
  /// for this many ms. 0: none. Extends keep it (the backend remembers it with the lease).
  int64_t lock_delay_ms = 0;
  /// Release: the lease is given up involuntarily (e.g. its app failed its health check): its
  /// lock-delay applies as after an expiry, where a clean release clears it.
  bool involuntary = false;
  /// Extend, release, hand-off of a mutex lease: it may have a lock-delay (acquired with
  /// lock_delay_ms > 0, or this sidecar does not know: the default). false lets the Redis scripts
  /// leave the delay key out (a lease without a delay keeps none).
  bool lease_may_delay = true;
  /// Release of a mutex, fair or election lease: release it only while the lock's fencing counter
  /// is still at this token, i.e. no grant came after the one being released (a grant given back,
  /// whose release may be retried after its owner was granted the lock again). 0: any token.
  uint64_t only_token = 0;

  // Each factory sets the fields its verb reads, by name; every other field keeps its default
  // (no positional initializer of a dozen unrelated fields to get wrong).
  static Operation acquire(std::string_view name, std::string_view owner, int64_t ttl_ms,
                           bool reentrant = false) {
    Operation op = make(Verb::kAcquire, LockKind::kMutex, name, owner);
    op.ttl_ms = ttl_ms;
    op.reentrant = reentrant;
    return op;
  }
  /// Readers (read/write locks): `owner` is this reader's own lease.
  static Operation acquireShared(std::string_view name, std::string_view owner, int64_t ttl_ms) {
    Operation op = make(Verb::kAcquire, LockKind::kShared, name, owner);
    op.ttl_ms = ttl_ms;
    return op;
  }
  /// Semaphores: `permit` is the owner id of one permit.
  static Operation acquirePermit(std::string_view name, std::string_view permit, int64_t ttl_ms,
                                 int64_t limit) {
    Operation op = make(Verb::kAcquire, LockKind::kSemaphore, name, permit);
    op.ttl_ms = ttl_ms;
    op.limit = limit;
    return op;
  }
  /// The same verb on another kind (release, extend, inspect of a semaphore).
  Operation of(LockKind k) const {
    Operation op = *this;
    op.kind = k;
    return op;
  }
  /// Elections: `owner` campaigns as `candidate`; granted, it leads with `value`.
  static Operation campaign(std::string_view name, std::string_view owner, int64_t ttl_ms,
                            std::string_view candidate, std::string_view value) {
    Operation op = make(Verb::kAcquire, LockKind::kElection, name, owner);
    op.ttl_ms = ttl_ms;
    op.candidate = candidate;
    op.value = value;
    return op;
  }
  /// Elections: the leader `owner` proclaims a new `value`.
  static Operation proclaim(std::string_view name, std::string_view owner, std::string_view value) {
    Operation op = make(Verb::kProclaim, LockKind::kElection, name, owner);
    op.value = value;
    return op;
  }
  static Operation release(std::string_view name, std::string_view owner) {
    return make(Verb::kRelease, LockKind::kMutex, name, owner);
  }
  static Operation extend(std::string_view name, std::string_view owner, int64_t ttl_ms) {
    Operation op = make(Verb::kExtend, LockKind::kMutex, name, owner);
    op.ttl_ms = ttl_ms;
    return op;
  }
  static Operation inspect(std::string_view name) {
    return make(Verb::kInspect, LockKind::kMutex, name, {});
  }
  static Operation handOff(std::string_view name, std::string_view owner,
                           std::string_view next_owner, int64_t next_ttl_ms) {
    Operation op = make(Verb::kHandOff, LockKind::kMutex, name, owner);
    op.ttl_ms = next_ttl_ms;
    op.next_owner = next_owner;
    return op;
  }
  /// A waiter that gave up leaves the fair queue (a no-op when it is not in it); `.of(kMutex)`:
  /// a queued writer withdraws its mark.
  static Operation withdraw(std::string_view name, std::string_view owner) {
    return make(Verb::kWithdraw, LockKind::kFair, name, owner);
  }
  static Operation forceRelease(std::string_view name) {
    return make(Verb::kForceRelease, LockKind::kMutex, name, {});
  }

 private:
  static Operation make(Verb verb, LockKind kind, std::string_view name, std::string_view owner) {
    Operation op;
    op.verb = verb;
    op.kind = kind;
    op.name = name;
    op.owner = owner;
    return op;
  }
};

/// How an operation came out (when it ran at all: a backend failure is the StatusOr's error).
enum class OutcomeCode : uint8_t {
  kOk,             // done: granted / released / extended / handed on / held (inspect)
  kBusy,           // acquire: held by somebody else
  kNotOwner,       // release, extend, hand-off: held by somebody else; nothing changed
  kNotHeld,        // no lease exists (expired, released, never granted); inspect: free
  kLimitMismatch,  // semaphore acquire with another limit than the semaphore's (see `limit`)
};

/// Why an acquire was answered kBusy (what the 409 tells the caller).
enum class BusyReason : uint8_t {
  kHeld,           // held by another owner (readers, a writer, or waiters of a fair lock first)
  kHeldByYou,      // held by the same owner, and the acquire did not ask to re-enter (reentrant)
  kWriterWaiting,  // readers: nobody may hold it, but a queued writer's mark turns readers away
  kLockDelay,      // nobody holds it, but the last lease ended without a release less than its
                   // lock_delay_ms ago (holder_ttl_ms: what is left of the delay)
};

/// Who leads an election (inspect of kElection while held): as its campaign recorded it.
struct LeaderRecord {
  std::string candidate;
  std::string value;
  int64_t since_ms = 0;  // when this term began: the backend's clock (Redis TIME), Unix ms
  /// Redlock: which lease the record belongs to (a digest of the leader's owner id, never the
  /// id), once the quorum's term is recorded in it; empty before that and on other backends.
  /// Backend-internal: never shown to clients.
  std::string lease;
};

/// One lease among many (a reader of a read/write lock, a semaphore's permit): who holds it (the
/// public label its acquire recorded, never the owner id), since when (the backend's clock, Unix
/// ms) and the TTL it has left.
struct LeaseHolder {
  std::string holder;
  int64_t since_ms = 0;
  int64_t ttl_ms = 0;
};
/// At most this many LeaseHolder entries per inspect (soonest expiry first): an inspect of a
/// semaphore with thousands of permits stays one bounded answer.
inline constexpr int64_t kMaxListedHolders = 100;

/// The one reply shape of every verb and every backend.
struct Outcome {
  OutcomeCode code = OutcomeCode::kNotHeld;
  BusyReason busy_reason = BusyReason::kHeld;  // kBusy of an acquire
  /// Fencing token. Acquire / hand-off kOk: this grant's token (strictly increasing per lock).
  /// Inspect, force release: the lock's last token (0 if never granted). Otherwise 0.
  uint64_t token = 0;
  /// kOk of acquire, hand-off, extend: the usable lease time from now (Redlock: ttl - elapsed -
  /// drift; single Redis: the TTL). Inspect kOk: the lease's remaining TTL.
  int64_t validity_ms = 0;
  /// kBusy / kNotOwner: the holder's remaining TTL, -1 when unknown. Waiters never sleep past it.
  int64_t holder_ttl_ms = -1;
  /// Holds of the lease after the operation (reentrant acquires). Acquire, hand-off, extend kOk:
  /// 1, or more once re-entered. Release kOk: the holds left, 0 when the lock was freed. Hand-off
  /// kOk: token set = handed on (holds: the next owner's); token 0 and holds > 0 = one hold given
  /// back, nothing handed on; token 0 and holds 0 = released, the grant taken back (Sentinel).
  int64_t holds = 0;
  /// Semaphores: permits in use after the operation, and the semaphore's limit (acquire, inspect;
  /// kLimitMismatch: the limit it has). Readers (kShared): the readers holding the lock after the
  /// operation (inspect: 0 while a writer holds it).
  int64_t used = 0;
  int64_t limit = 0;
  /// Mutex acquire kBusy with writer_wait_ms: readers held the lock, so the writers marked
  /// themselves waiting (and must withdraw their marks if they leave without the lock).
  bool writer_marked = false;
  /// Elections: inspect kOk: who leads (`token` is the term, `validity_ms` the TTL left);
  /// acquire kOk: `since_ms` of the new term. Empty otherwise.
  LeaderRecord leader;
  /// Mutex and fair locks: who holds the lease (the label its acquire recorded) and since when
  /// (the backend's clock, Unix ms): inspect kOk and acquire kBusy. Empty / 0 when unknown (a
  /// lease granted without a label, or by a sidecar older than the holder record).
  std::string holder;
  int64_t since_ms = 0;
  /// Readers (kShared) and semaphores, inspect kOk: the holders of the live leases that recorded
  /// a label (at most kMaxListedHolders). Empty otherwise.
  std::vector<LeaseHolder> holders;

  bool ok() const { return code == OutcomeCode::kOk; }
};

/// Short name for logs and metrics ("acquire").
const char* verbName(Verb verb);
const char* lockKindName(LockKind kind);
const char* outcomeName(OutcomeCode code);

struct NodeHealth {
  std::string address;  // "127.0.0.1:6379" or "unix:/path"
  bool up = false;
  /// Up but not allowed to vote yet (Redlock delayed restart).
  bool voting = true;
  std::string reason;  // why down / not voting; empty when fine
  /// What the node is to the backend when that is not obvious: "master" or "sentinel" for type
  /// sentinel; empty otherwise.
  std::string role;
};

struct BackendHealth {
  bool ready = false;
  std::string reason;  // why not ready
  std::vector<NodeHealth> nodes;
};

using OutcomeCallback = std::function<void(StatusOr<Outcome>)>;

/// How a multi-lock's one-step try came out (Backend::acquireAll).
struct AllOutcome {
  bool granted = false;
  std::vector<uint64_t> tokens;  // granted: one fencing token per name, in the order given
  int64_t validity_ms = 0;       // granted: every lease's usable time from now
  size_t busy_index = 0;         // not granted: the first name found held
  int64_t holder_ttl_ms = -1;    // not granted: its holder's remaining TTL, -1 when unknown
};
using AllOutcomeCallback = std::function<void(StatusOr<AllOutcome>)>;
/// What an announcement on a lock's release channel says changed: the pub/sub payload. Any other
/// payload (a sidecar of an older version sent the lock's name; an older one hearing a newer
/// one's kRolledBack) counts as a release.
namespace announcement {
inline constexpr std::string_view kReleased = "released";      // released, or a waiter withdrew
inline constexpr std::string_view kForced = "forced";          // an operator's force release
inline constexpr std::string_view kGranted = "granted";        // a grant or a hand-off
inline constexpr std::string_view kProclaimed = "proclaimed";  // an election leader's new value
/// Redlock: the clean-up of an acquire that was not granted deleted its lease on a node (its
/// vote lost or given up: src/redis/lua/rollback.lua). Waiters wake (a key is gone), but no
/// lease anybody was granted ended. A sidecar that does not know it takes it for a release.
inline constexpr std::string_view kRolledBack = "rolled_back";
/// Published by no script: the backend's subscription to the name's channel came back after its
/// pub/sub link dropped, so announcements made meanwhile were missed. Waiters try again (a
/// release may be among them); event streams read the lock, and cannot tell how a lease whose
/// announcements they missed ended.
inline constexpr std::string_view kResubscribed = "(resubscribed)";
/// Whether waiters should try again: only when something may have become free.
inline bool freesLock(std::string_view reason) {
  return reason != kGranted && reason != kProclaimed;
}
}  // namespace announcement

/// Called with a lock name and the announcement's reason (announcement::k*) when some sidecar
/// changed that lock (pub/sub).
using ReleaseListener = std::function<void(std::string_view name, std::string_view reason)>;

/// Backend::scanHolders: which locks have a holder record (admin listing, README "List held locks").
struct HolderScan {
  std::string prefix;      // lock names starting with this (plain text, not a pattern)
  size_t keep = 101;       // keep at most this many names: the smallest by name
  int64_t budget_ms = 200; // stop scanning once this long has passed (the names so far count)
  size_t batch = 100;      // names asked for per SCAN step (COUNT): small, never KEYS
};
/// What a holder scan found: candidates only (a record may outlive its lease for a moment;
/// inspect tells). Never owner ids.
struct ScannedNames {
  std::vector<std::string> names;  // sorted, distinct, at most `keep`
  bool overflow = false;           // more names than `keep` were seen (the largest dropped)
  bool out_of_time = false;        // the budget ran out before every node was scanned through
  std::vector<std::string> node_errors;  // "host:port: why" for nodes not scanned through
};
using ScanCallback = std::function<void(StatusOr<ScannedNames>)>;
/// Adds `name` to `out` (sorted, distinct), keeping at most `keep` names: a larger one is
/// dropped and out->overflow set.
void keepScannedName(ScannedNames* out, std::string name, size_t keep);

class Backend {
 public:
  virtual ~Backend() = default;

  /// Connects (asynchronously); health() reports progress. Errors are retried with backoff.
  virtual void start() = 0;

  /// Runs one operation (see Verb for what each does). Atomic on the server: one script per
  /// node. Operations the backend cannot serve are answered kFailedPrecondition.
  virtual void run(const Operation& op, OutcomeCallback cb) = 0;
  /// Whether Verb::kHandOff is served. A single master can hand a lock on in one atomic step;
  /// Redlock cannot (the next owner needs a quorum vote of its own).
  virtual bool canHandOff() const { return false; }
  /// Whether acquireAll() is served: a backend that keeps every lock on one node can grant a
  /// multi-lock in one atomic step. The others take its names one by one (LockService).
  virtual bool acquiresAllAtOnce() const { return false; }
  /// Grants every mutex of `names` (distinct) to `owner` for `ttl_ms`, or none, in one atomic
  /// step; never waits. Each lease records `holder` (Operation::holder) as a single acquire does.
  /// Only called when acquiresAllAtOnce(); the default answers (at once) kFailedPrecondition.
  virtual void acquireAll(const std::vector<std::string>& names, std::string_view owner,
                          int64_t ttl_ms, std::string_view holder, AllOutcomeCallback cb) {
    (void)names, (void)owner, (void)ttl_ms, (void)holder;
    cb(Status(StatusCode::kFailedPrecondition, "this backend takes a multi-lock name by name"));
  }

  /// Lock names that have a holder record (mutex and fair leases granted with a "holder"),
  /// found without blocking the server: SCAN MATCH in small batches on every master (Redlock:
  /// every node, the names merged), within `scan.budget_ms`. The default answers (at once)
  /// kFailedPrecondition.
  virtual void scanHolders(const HolderScan& scan, ScanCallback cb) {
    (void)scan;
    cb(Status(StatusCode::kFailedPrecondition, "this backend cannot list its locks"));
  }

  /// Wake-ups: while at least one watch on `name` is active the backend listens for its releases
  /// and calls the listener. Watches are counted; each watchReleases needs one unwatchReleases.
  virtual void setReleaseListener(ReleaseListener listener) = 0;
  virtual void watchReleases(std::string_view name) = 0;
  virtual void unwatchReleases(std::string_view name) = 0;

  virtual BackendHealth health() const = 0;
  /// Called (on a loop turn of its own, never inside a call) each time the backend becomes able
  /// to grant locks again after it was not: waiters that are riding out an outage retry at once
  /// instead of at their next backoff. Backends that cannot go down keep the default (never).
  virtual void setReadyListener(std::function<void()> listener) { (void)listener; }

  /// Fails pending calls, closes connections, then calls `done` on a later loop turn.
  virtual void shutdown(std::function<void()> done) = 0;
};

}  // namespace sidelock::backend
