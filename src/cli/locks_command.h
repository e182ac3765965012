// `sidelock locks`: what a sidecar holds and who waits, for operators. Asks GET /v1/locks (the
// leases this sidecar granted and the waiters queued in it, never owner ids) and prints a table,
// or the sidecar's JSON with --json. Blocking and loop-free like `sidelock run`.
//
//   sidelock locks [--socket PATH | --addr HOST:PORT] [--json]
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

std::string locksUsage();

/// Entry point: main() calls locksCommand(argc - 1, argv + 1) when argv[1] == "locks".
int locksCommand(int argc, char** argv);

}  // namespace sidelock::cli
