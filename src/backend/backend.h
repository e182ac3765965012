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

struct AcquireReply {
  bool granted = false;
  /// Fencing token of this grant (granted only); strictly increasing per lock name.
  uint64_t token = 0;
  /// Granted: the usable lease time in ms (Redlock: ttl - elapsed - drift; single redis: ttl).
  int64_t validity_ms = 0;
  /// Not granted: the current holder's remaining TTL in ms, or -1 when unknown. Waiters never
  /// sleep past it.
  int64_t holder_ttl_ms = -1;
};

/// Result of an owner-checked operation (release, extend).
enum class OwnerCheck {
  kOk,        // the owner held the lease; the action was done
  kNotOwner,  // the lock is held by somebody else (nothing changed)
  kNotHeld,   // no lease exists (it expired or was released)
};

struct ExtendReply {
  OwnerCheck result = OwnerCheck::kNotHeld;
  /// kOk: the lease's usable time from now (Redlock: new ttl - elapsed - drift).
  int64_t validity_ms = 0;
};

/// Result of a release with hand-off (Backend::releaseAndGrant).
struct HandOffReply {
  /// What the release found; only kOk handed the lock on.
  OwnerCheck released = OwnerCheck::kNotHeld;
  /// released == kOk: the grant to the next owner (granted, token, validity_ms).
  AcquireReply next;
};

/// Result of an operator's force release (Backend::forceRelease).
struct ForcedRelease {
  bool released = false;  // a lease existed and was deleted
  /// Fencing token of the freed lease (the counter's value: the last grant's token); 0 if none.
  uint64_t token = 0;
};

struct LockState {
  bool held = false;
  int64_t ttl_ms = 0;  // remaining TTL when held
  uint64_t token = 0;  // fencing token of the current (or last) grant; 0 if never granted
};

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

using AcquireCallback = std::function<void(StatusOr<AcquireReply>)>;
using OwnerCheckCallback = std::function<void(StatusOr<OwnerCheck>)>;
using ExtendCallback = std::function<void(StatusOr<ExtendReply>)>;
using InspectCallback = std::function<void(StatusOr<LockState>)>;
using HandOffCallback = std::function<void(StatusOr<HandOffReply>)>;
using ForceReleaseCallback = std::function<void(StatusOr<ForcedRelease>)>;
/// Called with a lock name when some sidecar released that lock (pub/sub wake-up).
using ReleaseListener = std::function<void(std::string_view name)>;

class Backend {
 public:
  virtual ~Backend() = default;

  /// Connects (asynchronously); health() reports progress. Errors are retried with backoff.
  virtual void start() = 0;

  /// One atomic attempt to grant `name` to `owner` for `ttl_ms`. Never waits for the lock.
  virtual void acquire(std::string_view name, std::string_view owner, int64_t ttl_ms,
                       AcquireCallback cb) = 0;
  /// Deletes the lease only if `owner` holds it; announces the release to waiters everywhere.
  virtual void release(std::string_view name, std::string_view owner, OwnerCheckCallback cb) = 0;
  /// Whether releaseAndGrant() is served. A single master can hand a lock on in one atomic step;
  /// Redlock cannot (the next owner needs a quorum vote of its own).
  virtual bool canHandOff() const { return false; }
  /// Hand-off in one round trip: if `owner` holds the lease it is replaced, atomically, by a
  /// grant to `next_owner` for `next_ttl_ms` with the next fencing token. Nothing is announced to
  /// other sidecars' waiters (the lock stays held). Called only when canHandOff().
  virtual void releaseAndGrant(std::string_view name, std::string_view owner,
                               std::string_view next_owner, int64_t next_ttl_ms,
                               HandOffCallback cb) = 0;
  /// Sets the lease's TTL to `ttl_ms` only if `owner` holds it. Never re-creates a missing lease.
  virtual void extend(std::string_view name, std::string_view owner, int64_t ttl_ms,
                      ExtendCallback cb) = 0;
  /// Reads the lock's state without revealing the owner.
  virtual void inspect(std::string_view name, InspectCallback cb) = 0;
  /// Operators only (the admin listener): deletes the lease whoever holds it and announces the
  /// release to waiters everywhere, as release() does. The fencing counter is left alone: the
  /// next grant gets the next token, the freed holder's renew/extend finds its lease gone.
  virtual void forceRelease(std::string_view name, ForceReleaseCallback cb) = 0;

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
