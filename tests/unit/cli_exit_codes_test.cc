#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>

#include "cli/exit_codes.h"

namespace sidelock::cli {
namespace {

// Real wait statuses from real children, not hand-built bit patterns.
int statusOf(void (*body)()) {
  pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(99);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(ExitCodesTest, WaitStatusLikeShells) {
  EXPECT_EQ(exitCodeFromWaitStatus(statusOf([] { _exit(0); })), 0);
  EXPECT_EQ(exitCodeFromWaitStatus(statusOf([] { _exit(3); })), 3);
  EXPECT_EQ(exitCodeFromWaitStatus(statusOf([] { _exit(255); })), 255);
  EXPECT_EQ(exitCodeFromWaitStatus(statusOf([] { raise(SIGKILL); })), 128 + SIGKILL);
  EXPECT_EQ(exitCodeFromWaitStatus(statusOf([] {
              signal(SIGTERM, SIG_DFL);
              raise(SIGTERM);
            })),
            128 + SIGTERM);
}

TEST(ExitCodesTest, RefusalMapping) {
  EXPECT_EQ(exitCodeForRefusal(409, "locked"), kExitNotAcquired);
  EXPECT_EQ(exitCodeForRefusal(409, ""), kExitNotAcquired);
  EXPECT_EQ(exitCodeForRefusal(429, "too_many_waiters"), kExitNotAcquired);
  EXPECT_EQ(exitCodeForRefusal(503, "unavailable"), kExitUnavailable);
  EXPECT_EQ(exitCodeForRefusal(500, ""), kExitUnavailable);
  EXPECT_EQ(exitCodeForRefusal(400, "invalid_argument"), kExitUsage);
  EXPECT_EQ(exitCodeForRefusal(413, ""), kExitUsage);
  EXPECT_EQ(exitCodeForRefusal(401, "token_required"), kExitNotPermitted);
  EXPECT_EQ(exitCodeForRefusal(403, "lock_not_allowed"), kExitNotPermitted);
  EXPECT_EQ(exitCodeForRefusal(421, "host_not_allowed"), kExitNotPermitted);
  EXPECT_EQ(exitCodeForRefusal(404, "not_found"), kExitInternal);
  EXPECT_EQ(exitCodeForRefusal(302, ""), kExitInternal);
}

TEST(ExitCodesTest, OwnCodesAreDistinctAndDocumented) {
  std::set<int> codes = {kExitUsage,    kExitUnavailable, kExitInternal,      kExitNotAcquired,
                         kExitLockLost, kExitMaxHold,     kExitCannotExecute, kExitNotFound};
  EXPECT_EQ(codes.size(), 8u);
  std::string table = exitCodeTable();
  for (int c : codes) {
    EXPECT_NE(table.find("  " + std::to_string(c) + " "), std::string::npos) << c;
  }
  // None collides with "killed by a signal" codes.
  for (int c : codes) EXPECT_LT(c, kExitSignalBase);
}

}  // namespace
}  // namespace sidelock::cli
