// Shell commands for the fault scenarios that set up the machine around the processes (network
// namespaces, iptables, package file lists).
#pragma once

#include <string>

namespace sidelock::testing::chaos {

struct ShellResult {
  int status = -1;     // as pclose() returns it: 0 on success
  std::string output;  // stdout and stderr together
};

/// Runs `command` with /bin/sh and waits for it.
ShellResult runShell(const std::string& command);

}  // namespace sidelock::testing::chaos
