// `sidelock locks`: what a sidecar holds and who waits, for operators. Asks GET /v1/locks (the
// leases this sidecar granted and the waiters queued in it, never owner ids) and prints a table,
// or the sidecar's JSON with --json. Blocking and loop-free like `sidelock run`.
//
//   sidelock locks [--socket PATH | --addr HOST:PORT] [--json]
//   sidelock locks --all [--prefix P] [--limit N] [--addr ADMIN_HOST:PORT] [--json]
//     held locks across the deployment: GET /admin/v1/locks on the admin listener
//     (SIDELOCK_AUTH_TOKEN: an admin token when the admin listener has admin tokens)
//
// Exit codes (exit_codes.h): 0 shown; 64 bad arguments; 69 sidecar unreachable, no answer or 5xx;
// 70 an answer that is not the expected JSON; 77 refused (401/403/421: token, Host).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/sidecar_socket.h"
#include "common/status.h"

namespace sidelock::cli {

struct LocksOptions {
  bool help = false;
  bool json = false;
  bool all = false;     // --all: the admin listing (GET /admin/v1/locks)
  std::string prefix;   // --prefix (with --all)
  int64_t limit = 0;    // --limit (with --all); 0: the sidecar's default

  SidecarEndpoint endpoint;
  std::string token;  // $SIDELOCK_AUTH_TOKEN
};

/// Parses the arguments after `sidelock locks`. Errors are kInvalidArgument.
StatusOr<LocksOptions> parseLocksArgs(const std::vector<std::string>& args,
                                      const RunEnvironment& env);

/// The table for a GET /v1/locks answer: one row per lock name that is held here or has waiters
/// here, sorted by name, then a summary line. kInternal if `list` does not have the documented
/// shape.
StatusOr<std::string> formatLocksTable(const nlohmann::json& list);

/// The table for a GET /admin/v1/locks answer: lock, holder, since (age), TTL left, token,
/// sorted by name, then a summary line (saying when the listing was cut short).
StatusOr<std::string> formatHeldTable(const nlohmann::json& listing, int64_t now_unix_ms);

/// The request path of the options: /v1/locks, or /admin/v1/locks?... with --all.
std::string locksRequestPath(const LocksOptions& opts);

std::string locksUsage();

/// Entry point: main() calls locksCommand(argc - 1, argv + 1) when argv[1] == "locks".
int locksCommand(int argc, char** argv);

}  // namespace sidelock::cli
