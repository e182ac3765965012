// What makes each lock kind different, as data the lock service and the API read instead of
// testing `LockId::kind`. One policy per kind, each in its own file beside this one.
//
// Adding a lock kind (the whole list; src/README.md, "A lock kind", says each step in detail):
//   1. src/backend/backend.h: its `LockKind` enumerator (+ kLockKindCount), an `Operation`
//      factory if its acquire has parameters of its own; src/backend/backend.cc: lockKindName()
//      (the metrics' `kind` label and the display prefix).
//   2. Its behaviour in each backend: src/redis/lua/<kind>_*.lua + its row of `kScript`
//      (src/redis/scripts.cc, keys and ARGV in scriptCallFor()); src/backend/memory_backend.cc
//      (apply<Kind>()); src/redis/redlock_backend.cc refuses it or says how its quorum combines.
//   3. Here: a `<kind>.cc` with its KindPolicy, declared below and listed in kind_policy.cc.
//   4. Its routes (src/api/<kind>_routes.cc or lock_routes.cc), request fields, openapi.json.
//   5. Docs (README.md) and tests (policy table: tests/unit/kind_policy_test.cc; its own
//      integration test; the differential test).
// Nothing in lock_service.cc, waiting.cc, release.cc, watchdog.cc or the API's answers changes.
#pragma once

#include <array>
#include <span>
#include <string_view>

#include "backend/backend.h"

namespace sidelock::lock {

using LockKind = backend::LockKind;

/// A word the grant's answer adds after name/owner/token/ttl_ms: `"mode": "shared"`, or
/// `"fair": true` when `text` is empty. No key: nothing.
struct AnswerTag {
  std::string_view key;
  std::string_view text;
};

struct KindPolicy {
  LockKind kind = LockKind::kMutex;

  // --- the lease and who waits for it ---

  /// The kinds whose queues wait for the same backend lease as this kind (itself included), in
  /// the order they are woken when a lease of the name ends without a release (expired, lost,
  /// force-released). A mutex, its fair waiters and its readers share one key: writers come first
  /// (their attempts reach the backend first, so a writer gets a lock its last reader freed before
  /// the queued readers start a new group). A kind with keys of its own lists itself only.
  std::span<const LockKind> lease_sharers{};
  /// Several leases of this kind share the backend lease (readers): releasing one that leaves
  /// others behind lets no other kind in, so only this kind's queue is woken.
  bool holders_share_one_lease = false;
  /// A grant may leave room for the next waiter (free permits, readers let in together): after a
  /// grant the queue's next head asks at once instead of sleeping until a release.
  bool admits_many = false;
  /// A second grant of the lock to this sidecar means its earlier lease lapsed unnoticed: the
  /// watchdog ends that one first (semaphore permits and readers live side by side).
  bool new_grant_ends_earlier_lease = false;

  // --- waiting ---

  /// A single try (no wait) contends even when waiters are queued here (readers are let in
  /// together, so a reader's single try asks too); otherwise it answers busy without asking.
  bool single_try_skips_local_queue = false;
  /// Waiters keep places in a queue the backend keeps, across sidecars (fair): a waiter asks at
  /// once when it queues (that attempt is its place), the head's attempt renews the claims of
  /// everyone queued here behind it, and a waiter that gives up withdraws its place.
  bool queue_in_backend = false;
  /// A queued waiter that readers turn away marks the lock so new readers stay out until its next
  /// attempt (writer preference); giving up, it withdraws the mark, passing it on to the
  /// writers still queued here.
  bool marks_writer_waiting = false;
  /// A queued waiter waits until it is granted or cancelled (its client leaves): the service does
  /// not cut its wait to locks.max_wait_ms (election candidates wait in line for as long as their
  /// campaign stream is open). The queue limits still apply.
  bool waits_until_cancelled = false;

  // --- release ---

  /// Re-entry by the holder's owner id counts holds (one lease, one release per hold).
  bool allows_reentry = false;
  /// A client's release may hand the lock to the head of the queue in the same backend round trip
  /// (if the backend can).
  bool hands_off = false;

  // --- answers (API layer) ---

  /// The grant answer's name for the owner id ("permit" for a semaphore's).
  std::string_view owner_field = "owner";
  AnswerTag answer_tag{};
  /// A busy answer to a retried request id may be the caller's own earlier grant, read back from
  /// the backend (a reader's token moves with every reader, so it cannot).
  bool grant_readable_back = true;
};

/// The kinds sharing the mutex's lease of a name (its key `<prefix>{name}`): the mutex (writers,
/// re-entered holds, multi-lock members), its fair holders and its readers, writers first.
inline constexpr std::array<LockKind, 3> kMutexLeaseSharers = {LockKind::kMutex, LockKind::kFair,
                                                               LockKind::kShared};

/// The policy of `kind`. Every LockKind has one (tests/unit/kind_policy_test.cc).
const KindPolicy& policyOf(LockKind kind);

/// Every kind, in the order a release announced by the backend wakes their queues (mutex and
/// fair waiters first: see KindPolicy::lease_sharers).
std::span<const LockKind> kindsInWakeOrder();

// One per file (src/lock/kinds/<kind>.cc); use policyOf().
const KindPolicy& mutexPolicy();
const KindPolicy& fairPolicy();
const KindPolicy& sharedPolicy();
const KindPolicy& semaphorePolicy();
const KindPolicy& electionPolicy();

}  // namespace sidelock::lock
