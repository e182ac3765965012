#include "cli/command_line.h"

#include <optional>

#include "cli/sidecar_socket.h"

namespace sidelock::cli {

StatusOr<CommandLine> parseCommandLine(const std::vector<std::string>& args) {
  CommandLine line;
  if (args.empty()) return invalidArgument("missing --config FILE (or a command)");
  const std::string& first = args[0];
  if (first == "run" || first == "locks") {
    line.command = first == "run" ? Command::kRun : Command::kLocks;
    return line;
  }
  size_t i = 0;
  std::optional<std::string> config;
  std::optional<std::string> check_config;
  Status error;
  if (first == "--version" || first == "-V") {
    line.command = Command::kVersion;
  } else if (first == "--help" || first == "-h") {
    line.command = Command::kHelp;
  } else if (takeFlagValue(args, &i, "--config", &config, &error) ||
             takeFlagValue(args, &i, "--check-config", &check_config, &error)) {
    if (!error.isOk()) return error;
    line.command = config ? Command::kServe : Command::kCheckConfig;
    line.config_path = config ? *config : *check_config;
    if (line.config_path.empty()) {
      return invalidArgument(std::string(config ? "--config" : "--check-config") +
                             " needs a value");
    }
  } else if (first.size() > 1 && first[0] == '-') {
    return invalidArgument("unknown option " + first);
  } else {
    return invalidArgument("unknown command '" + first + "'");
  }
  if (i + 1 < args.size()) return invalidArgument("unexpected argument '" + args[i + 1] + "'");
  return line;
}

}  // namespace sidelock::cli
