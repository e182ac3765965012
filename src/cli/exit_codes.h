// Exit codes of `sidelock run`. CMD's own exit code passes through unchanged; the codes below are
// what `sidelock run` itself answers with when CMD did not run to its own end. They follow
// sysexits(3) where a code fits, and timeout(1) / POSIX shells for the rest, so scripts can tell
// "the lock was busy" from "the job failed".
#pragma once

#include <string>
#include <string_view>

namespace sidelock::cli {

inline constexpr int kExitUsage = 64;           // EX_USAGE: bad arguments, or the sidecar said 400
inline constexpr int kExitUnavailable = 69;     // EX_UNAVAILABLE: sidecar unreachable, 5xx, hung up
inline constexpr int kExitInternal = 70;        // EX_SOFTWARE: malformed answer, fork/pipe failure
inline constexpr int kExitNotAcquired = 75;     // EX_TEMPFAIL: lock busy for --wait (409), or 429;
                                                // --elect: not elected within --wait
inline constexpr int kExitLockLost = 76;        // the lease was lost while CMD ran; CMD was stopped
// --elect: the leadership was lost (lost or resigned event, stream broken, no renewal) while CMD
// ran; CMD was stopped. The lock's code: in both modes the lease behind CMD ended under it.
inline constexpr int kExitLeadershipLost = kExitLockLost;
inline constexpr int kExitNotPermitted = 77;    // EX_NOPERM: 401/403/421 (token, prefixes, origin)
inline constexpr int kExitMaxHold = 124;        // --max-hold reached (like timeout(1)); CMD stopped
inline constexpr int kExitCannotExecute = 126;  // CMD found but not executable (like shells)
inline constexpr int kExitNotFound = 127;       // CMD not found (like shells)
inline constexpr int kExitSignalBase = 128;     // CMD (or, while waiting, sidelock) killed by N

/// The exit code a shell would report for a child's waitpid() status: the exit code, or
/// 128 + signal number when it was killed by a signal.
int exitCodeFromWaitStatus(int wait_status);

/// The exit code for a non-stream (refusal) answer to the acquire request.
/// `error` is the JSON "error" field ("locked", "too_many_waiters", ...), possibly empty.
int exitCodeForRefusal(int http_status, std::string_view error);

/// The exit-code table printed by `sidelock run --help` (and kept in README.md).
std::string exitCodeTable();

}  // namespace sidelock::cli
