// Command-line parsing for `sidelock run` (pure: no I/O, so it is unit-tested directly).
//
//   sidelock run [--socket PATH | --addr HOST:PORT] [--ttl MS] [--wait MS] [--max-hold MS]
//                [--grace MS] [--quiet] NAME [--] CMD [ARGS...]
//   sidelock run [--socket PATH | --addr HOST:PORT] [--ttl MS] [--wait MS] [--grace MS] [--quiet]
//                --elect NAME [--candidate ID] [--value V] [--] CMD [ARGS...]
// (the options may also follow NAME; CMD starts at the first word after NAME that is no option)
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/sidecar_socket.h"
#include "common/status.h"

namespace sidelock::cli {

inline constexpr int64_t kDefaultGraceMs = 10'000;
/// --health-grace: failed probes in the first 30 s do not count (CMD starts after the grant, and
/// its health endpoint answers only once it is up).
inline constexpr int64_t kDefaultHealthGraceMs = 30000;

struct RunOptions {
  bool help = false;  // --help: print usage, exit 0; nothing else is filled in

  // Exactly one of these is set: a Unix socket path, or host + port.
  std::string socket_path;
  std::string host;
  int port = 0;

  std::string name;                  // lock name, or the election's with --elect
  std::vector<std::string> command;  // CMD ARGS..., never empty

  // --elect NAME: campaign in election NAME and run CMD only while leading.
  bool elect = false;
  std::string candidate;             // --candidate, else $POD_NAME, else the host name
  std::optional<std::string> value;  // --value: what the leader publishes (an address)

  std::optional<int64_t> ttl_ms;       // unset: the sidecar's locks.default_ttl_ms
  std::optional<int64_t> wait_ms;      // unset: wait as long as it takes (to be elected, too)
  std::optional<int64_t> max_hold_ms;  // unset: the sidecar's locks.max_hold_ms_limit
  std::optional<std::string> health_url;  // --health: the hold follows the app's health
  int64_t health_grace_ms = kDefaultHealthGraceMs;  // --health-grace: CMD's start-up time
  int64_t grace_ms = kDefaultGraceMs;  // SIGTERM -> SIGKILL delay after a loss
  bool quiet = false;                  // no diagnostics on stderr (usage errors still print)
  std::string token;                   // $SIDELOCK_AUTH_TOKEN: bearer token for auth.tokens

  /// "unix:/run/sidelock/sidelock.sock" or "127.0.0.1:7411", for messages.
  std::string endpoint() const;
};

/// Parses the arguments after `sidelock run`. Errors are kInvalidArgument with a message fit for
/// "sidelock run: <message>" (the caller prints usage and exits 64).
StatusOr<RunOptions> parseRunArgs(const std::vector<std::string>& args, const RunEnvironment& env);

/// The usage text, exit-code table included.
std::string runUsage();

}  // namespace sidelock::cli
