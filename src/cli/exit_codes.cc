#include "cli/exit_codes.h"

#include <sys/wait.h>

namespace sidelock::cli {

int exitCodeFromWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return kExitSignalBase + WTERMSIG(wait_status);
  // Stopped/continued statuses are not terminal; callers only pass terminal ones.
  return kExitInternal;
}

int exitCodeForRefusal(int http_status, std::string_view error) {
  if (http_status == 409 || error == "locked") return kExitNotAcquired;
  if (http_status == 429 || error == "too_many_waiters") return kExitNotAcquired;
  if (http_status >= 500) return kExitUnavailable;
  // Access control (a missing or wrong $SIDELOCK_AUTH_TOKEN, a name outside the token's prefixes,
  // a peer uid or Host the sidecar does not serve): retrying will not help.
  if (http_status == 401 || http_status == 403 || http_status == 421) return kExitNotPermitted;
  // The request was well-formed HTTP but our arguments were not acceptable (name too long, TTL
  // above the sidecar's maximum, ...): that is a usage error from the user's point of view.
  if (http_status == 400 || http_status == 413 || http_status == 414 || http_status == 422) {
    return kExitUsage;
  }
  return kExitInternal;
}

std::string exitCodeTable() {
  return "Exit status:\n"
         "  N      CMD's own exit status (CMD ran to its end while holding the lock, or leading;\n"
         "         also after a SIGTERM/SIGINT to sidelock run that CMD handled)\n"
         "  128+N  CMD was killed by signal N (or sidelock run was, while still waiting)\n"
         "  64     usage error (bad arguments, or the sidecar rejected them with 400)\n"
         "  69     sidecar unreachable, answered 5xx (backend down; 501: it cannot hold\n"
         "         elections), or hung up before a grant\n"
         "  70     internal error: malformed answer from the sidecar, fork/pipe failure\n"
         "  75     lock not acquired (--elect: not elected) within --wait (409 locked, or 429\n"
         "         too many waiters)\n"
         "  76     lock lost (--elect: leadership lost) while CMD ran (lost or resigned event,\n"
         "         sidecar connection broken or renewal overdue): CMD got SIGTERM, and SIGKILL\n"
         "         after --grace or at the kill deadline, whichever came first\n"
         "  77     not permitted: the sidecar refused the request (401/403/421: token,\n"
         "         lock-name prefixes, peer uid)\n"
         "  124    --max-hold (or the sidecar's cap) reached: CMD got SIGTERM, SIGKILL after "
         "--grace\n"
         "  126    CMD could not be executed (permission denied, ...)\n"
         "  127    CMD not found\n";
}

}  // namespace sidelock::cli
