// sidelock's own command line: which command runs, and the sidecar's config file. Pure (no I/O),
// so it is unit-tested; main.cc acts on the result. `run` and `locks` parse the rest themselves.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace sidelock::cli {

enum class Command {
  kServe,        // --config FILE: run the sidecar
  kCheckConfig,  // --check-config FILE
  kRun,          // sidelock run ...
  kLocks,        // sidelock locks ...
  kVersion,
  kHelp,
};

struct CommandLine {
  Command command = Command::kHelp;
  std::string config_path;  // kServe, kCheckConfig
};

/// `args` are argv[1..]. Errors are kInvalidArgument with a message fit for "sidelock: <message>"
/// (the caller prints the usage after it and exits 64, EX_USAGE, as `run` and `locks` do).
StatusOr<CommandLine> parseCommandLine(const std::vector<std::string>& args);

}  // namespace sidelock::cli
