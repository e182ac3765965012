// Runs the sidelock binary's subcommands as a user would (a shell, a clean environment) and
// collects what they print: for the CLI tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "support/sidecar_process.h"

namespace sidelock::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

/// `sidelock <subcommand> <args>` under `env -i <env>`.
inline CliResult runSidelockCli(const std::string& subcommand, const std::string& args,
                                const std::string& env = "") {
  const std::string cmd =
      "env -i " + env + " '" + sidelockBinary() + "' " + subcommand + " " + args + " 2>&1";
  CliResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace sidelock::testing
