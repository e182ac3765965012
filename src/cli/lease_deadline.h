// When `sidelock run` must stop CMD so that nothing of it runs once the lease behind it (a lock,
// or with --elect the leadership) could have expired at the backend: the kill deadline is counted
// from the last renewal sidelock run *received* -- never from when a loss is noticed, which may be
// much later (README "sidelock run", "The kill deadline"). Pure arithmetic on one millisecond
// clock, unit-tested.
#pragma once

#include <cstdint>

namespace sidelock::cli {

class LeaseDeadline {
 public:
  /// `grace_ms`: the SIGTERM -> SIGKILL delay the user asked for (--grace).
  explicit LeaseDeadline(int64_t grace_ms) : grace_ms_(grace_ms) {}

  /// The sidecar confirmed the lease: a grant or renewal event received at `now_ms`, saying the
  /// lease is valid for `ttl_ms` more (< 0: unknown, and nothing is scheduled until one is known).
  void confirmed(int64_t now_ms, int64_t ttl_ms);
  bool known() const { return ttl_ms_ >= 0; }

  /// The lease's end as the last confirmation says (last confirmation + ttl), for messages: an
  /// upper bound, not a time to act on. -1 while unknown.
  int64_t expiresAt() const { return known() ? confirmed_at_ms_ + ttl_ms_ : -1; }
  /// By when CMD's process group must be dead: last confirmation + ttl - safetyMarginMs(ttl).
  /// -1 while unknown.
  int64_t killBy() const;
  /// When CMD gets SIGTERM if no renewal arrives: half a TTL after the last one (renewals come
  /// every TTL x locks.renew_fraction, 1/3 by default), or later if the whole grace still fits
  /// before killBy() then -- a late renewal (the sidecar retrying Redis) gets every chance that
  /// leaves CMD its grace. Never after killBy(). -1 while unknown.
  int64_t overdueAt() const;
  /// When CMD's group gets SIGKILL for a stop (SIGTERM) sent at `stop_ms`: after the grace, but
  /// never after killBy().
  int64_t sigkillAt(int64_t stop_ms) const;

  /// --elect, `stepping_down` received at `now_ms` (the sidecar shuts down and resigns
  /// `resign_in_ms` from then, or when the stream closes): the SIGKILL time `kill_at_ms` (a
  /// sigkillAt()) brought forward so that CMD is dead before the resignation, less
  /// safetyMarginMs(resign_in_ms); never before `now_ms`. resign_in_ms < 0 (not said) or
  /// kill_at_ms < 0 (none pending) leave kill_at_ms.
  static int64_t killBeforeResign(int64_t now_ms, int64_t kill_at_ms, int64_t resign_in_ms);

  /// What the deadline keeps back from a TTL for what a receipt time cannot see: the renewal's
  /// Redis round trip (the sidecar counts the validity from its reply), the event's way to us,
  /// our own wake-up and the kernel's SIGKILL, and clock-rate drift. A tenth of the TTL, at most
  /// one second.
  static int64_t safetyMarginMs(int64_t ttl_ms);

 private:
  int64_t grace_ms_;
  int64_t confirmed_at_ms_ = 0;
  int64_t ttl_ms_ = -1;
};

}  // namespace sidelock::cli
