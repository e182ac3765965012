// "Cannot happen" checks that are kept in the build we ship.
//
//   auto it = waiters_.find(id);
//   if (!SL_INVARIANT(it != waiters_.end(), "lock.attempt_reply_without_waiter")) return;
//
// SL_INVARIANT(cond, event) evaluates `cond` once and yields it, so the branch that follows is
// the recovery path the code takes when the impossible happens (drop the reply, answer 500, keep
// the lock table as it is: never crash a sidecar that holds other apps' locks).
//   - Debug and sanitizer builds (no NDEBUG): log and abort, so the test that got there fails at
//     the spot, with the stack.
//   - Release: log the first violation of each event at error level (later ones are counted, not
//     logged: a loop of them must not flood the log) and count every one in
//     internalErrorCount(), exported as sidelock_internal_errors_total. Any rise of that counter
//     is a bug to report, which the dashboard's Status row and an alert make visible.
// `event` is a string literal naming the broken expectation ("<layer>.<what>"), as log events do.
#pragma once

#include <cstdint>

namespace sidelock {

/// Violations seen since start-up (Release builds; Debug builds abort at the first).
uint64_t internalErrorCount();

namespace detail {
/// Logs (or aborts, without NDEBUG) and counts one violation; always returns false.
bool invariantFailed(const char* event, const char* condition, const char* file, int line);
}  // namespace detail

}  // namespace sidelock

#define SL_INVARIANT(cond, event) \
  (static_cast<bool>(cond) ? true : ::sidelock::detail::invariantFailed(event, #cond, __FILE__, __LINE__))
