// For test fixtures that fork helper processes (redis-server, the sidecar, prometheus).
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace sidelock::testing {

/// Call in the child right after fork(): the child gets SIGKILL when the test process dies, even
/// when the test is killed by a CTest timeout or crashes before its destructors run, so no
/// server outlives its test. `parent` is getpid() of the test, read before fork().
inline void dieWithParent(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
}

}  // namespace sidelock::testing
