// `sidelock run`: acquires a lock through the local sidecar with hold: "stream", runs a command
// while the lock is held, and releases it when the command exits. See README.md ("sidelock run")
// for the user's view and exit_codes.h for the exit statuses.
//
// A small blocking program (poll(2) over the sidecar socket and a signalfd), deliberately without
// the sidecar's event loop: it must stay simple enough to trust with "never run CMD without the
// lock".
#pragma once

#include "cli/run_options.h"

namespace sidelock::cli {

/// Entry point, called by main() as runCommand(argc - 1, argv + 1) when argv[1] == "run": here
/// argv[0] is "run" and the options start at argv[1]. Returns the process exit status (see
/// exit_codes.h).
int runCommand(int argc, char** argv);

/// The same after parsing: connects, acquires, runs options.command, returns the exit status.
int runWithOptions(const RunOptions& options);

}  // namespace sidelock::cli
