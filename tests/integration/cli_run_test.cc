// `sidelock run` end to end: the real binary as the CLI, the real sidecar, a real redis-server.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.h"
#include "support/http_client.h"
#include "support/redis_link.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// CMD bodies loop until told to stop, but never outlive `sidelock run` (its pid is $PPID) and
// never run longer than ~60 s, so a failing test cannot leave a process behind.
const std::string kWaitForGo =
    "n=0; while [ ! -e go ] && kill -0 $PPID 2>/dev/null && [ $n -lt 1200 ]; do "
    "sleep 0.05; n=$((n+1)); done";

bool fileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool waitFor(const std::function<bool()>& cond, int timeout_ms) {
  auto deadline = Clock::now() + milliseconds(timeout_ms);
  while (Clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return cond();
}

/// Running, i.e. neither gone nor a zombie (orphans are reaped by whoever is pid 1 here, maybe late).
bool processRuns(pid_t pid) {
  std::string stat = readFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

/// The process group of `pid` (from /proc), or -1.
pid_t processGroup(pid_t pid) {
  std::string stat = readFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(paren + 1));
  std::string state;
  pid_t ppid = 0;
  pid_t pgrp = -1;
  fields >> state >> ppid >> pgrp;
  return pgrp;
}

/// The pids a CMD wrote to `file`, one a line.
std::vector<pid_t> readPids(const std::string& file) {
  std::vector<pid_t> pids;
  std::istringstream in(readFile(file));
  for (pid_t p = 0; in >> p;) pids.push_back(p);
  return pids;
}

/// SIGKILLs what a test's CMD started, whatever the outcome (pids[0] leads CMD's process group).
struct KillOnExit {
  const std::vector<pid_t>& pids;
  ~KillOnExit() {
    if (!pids.empty()) kill(-pids[0], SIGKILL);
    for (pid_t p : pids) kill(p, SIGKILL);
  }
};

/// One `sidelock run ...` child process (`sidelock ...` with `subcommand` empty), with its working
/// directory and stderr in `dir`.
class RunProcess {
 public:
  RunProcess(const std::string& dir, const std::vector<std::string>& args,
             const std::string& subcommand = "run")
      : dir_(dir) {
    static int counter = 0;
    stderr_path_ = dir + "/run-" + std::to_string(++counter) + ".err";
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      dieWithParent(parent);
      if (chdir(dir.c_str()) != 0) _exit(120);
      int err = open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (err >= 0) dup2(err, STDERR_FILENO);
      std::string bin = sidelockBinary();
      std::vector<char*> argv;
      argv.push_back(bin.data());
      std::vector<std::string> copy = args;
      if (!subcommand.empty()) copy.insert(copy.begin(), subcommand);
      for (std::string& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(121);
    }
  }
  ~RunProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  std::string stderrText() const { return readFile(stderr_path_); }

  /// Exit code (128+signal if killed), or -1 if still running after timeout_ms.
  int wait(int timeout_ms = 20000) {
    auto deadline = Clock::now() + milliseconds(timeout_ms);
    while (pid_ > 0) {
      int status = 0;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        if (WIFEXITED(status)) return WEXITSTATUS(status);
        if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
        return -2;
      }
      if (Clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(milliseconds(5));
    }
    return -3;
  }

 private:
  std::string dir_;
  std::string stderr_path_;
  pid_t pid_ = -1;
};

class CliRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = std::make_unique<RedisServer>();
    SidecarProcess::Options o;
    o.yaml = "backend:\n  type: redis\n  nodes: [\"" + redis_->address() +
             "\"]\nlocks:\n  renew_fraction: 0.33\n";
    o.wait_ready = true;
    sidecar_ = std::make_unique<SidecarProcess>(o);
    dir_ = makeTempDir("sidelock-cli");
  }
  void TearDown() override {
    if (HasFailure() && sidecar_) std::cerr << "sidecar log:\n" << sidecar_->logs();
    sidecar_.reset();
    redis_.reset();
    removeTree(dir_);
  }

  std::vector<std::string> tcp(std::vector<std::string> args) {
    args.insert(args.begin(), {"--addr", "127.0.0.1:" + std::to_string(sidecar_->port())});
    return args;
  }
  std::vector<std::string> unixSocket(std::vector<std::string> args) {
    args.insert(args.begin(), {"--socket", sidecar_->socketPath()});
    return args;
  }
  /// `sidelock run ... NAME -- sh -c SCRIPT`, waited for.
  int runSh(const std::string& name, const std::string& script, std::vector<std::string> opts = {},
            std::string* err = nullptr) {
    opts.insert(opts.end(), {name, "--", "sh", "-c", script});
    RunProcess p(dir_, tcp(opts));
    int code = p.wait();
    if (err != nullptr) *err = p.stderrText();
    return code;
  }
  std::string path(const std::string& file) const { return dir_ + "/" + file; }
  /// CMD (which handles SIGTERM) runs under `lease` ({"NAME"} or {"--elect", "NAME"}) until the
  /// sidecar is SIGKILLed: CMD gets SIGTERM at once and sidelock run exits 76.
  void expectSidecarLossStops(std::vector<std::string> lease) {
    lease.insert(lease.begin(), {"--grace", "5000"});
    lease.insert(
        lease.end(),
        {"--", "sh", "-c", "trap 'echo term > got; exit 0' TERM; touch started; " + kWaitForGo});
    RunProcess p(dir_, tcp(lease));
    ASSERT_TRUE(waitFor([&] { return fileExists(path("started")); }, 10000)) << p.stderrText();
    sidecar_->kill();
    EXPECT_EQ(p.wait(), 76) << p.stderrText();
    EXPECT_EQ(readFile(path("got")), "term\n");
  }

  std::unique_ptr<RedisServer> redis_;
  std::unique_ptr<SidecarProcess> sidecar_;
  std::string dir_;
};

TEST_F(CliRunTest, PropagatesTheCommandsExitCode) {
  EXPECT_EQ(runSh("job", "exit 0"), 0);
  EXPECT_EQ(runSh("job", "exit 3"), 3);
  std::string err;
  EXPECT_EQ(runSh("job", "kill -KILL $$", {}, &err), 128 + SIGKILL) << err;
}

TEST_F(CliRunTest, CommandSeesLockOwnerAndToken) {
  ASSERT_EQ(runSh("env-job", "echo \"$SIDELOCK_TOKEN $SIDELOCK_LOCK $SIDELOCK_OWNER\" > out"), 0);
  std::istringstream in(readFile(path("out")));
  std::string token, name, owner;
  in >> token >> name >> owner;
  EXPECT_FALSE(token.empty());
  EXPECT_EQ(token.find_first_not_of("0123456789"), std::string::npos) << token;
  EXPECT_EQ(name, "env-job");
  EXPECT_FALSE(owner.empty());
  // Fencing tokens grow from one holder to the next.
  ASSERT_EQ(runSh("env-job", "echo $SIDELOCK_TOKEN > out2"), 0);
  EXPECT_GT(std::stoull(readFile(path("out2"))), std::stoull(token));
}

TEST_F(CliRunTest, LockIsHeldWhileTheCommandRunsAndFreedAfter) {
  RunProcess holder(dir_, unixSocket({"held", "--", "sh", "-c", "touch started; " + kWaitForGo}));
  ASSERT_TRUE(waitFor([&] { return fileExists(path("started")); }, 10000)) << holder.stderrText();

  std::string err;
  EXPECT_EQ(runSh("held", "touch ran", {"--wait", "0"}, &err), 75);
  EXPECT_FALSE(fileExists(path("ran")));
  EXPECT_NE(err.find("held"), std::string::npos) << err;
  // The sidecar agrees it is held.
  HttpClient c = HttpClient::tcp(sidecar_->port());
  EXPECT_EQ(c.get("/v1/locks/held").status, 200);

  // A waiter gets it once the first command ends.
  RunProcess waiter(dir_, tcp({"--wait", "20000", "held", "--", "sh", "-c", "touch waited"}));
  ASSERT_TRUE(waitForWaiters(c, "held", 1));
  EXPECT_FALSE(fileExists(path("waited")));
  std::ofstream(path("go")).put('x');
  EXPECT_EQ(holder.wait(), 0) << holder.stderrText();
  EXPECT_EQ(waiter.wait(), 0) << waiter.stderrText();
  EXPECT_TRUE(fileExists(path("waited")));
  EXPECT_EQ(runSh("held", "exit 0", {"--wait", "0"}), 0);
}

TEST_F(CliRunTest, ForwardsSignalsToTheCommand) {
  RunProcess p(dir_, tcp({"sig", "--", "sh", "-c",
                          "trap 'echo term > got; exit 42' TERM; touch started; " + kWaitForGo}));
  ASSERT_TRUE(waitFor([&] { return fileExists(path("started")); }, 10000)) << p.stderrText();
  kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.wait(), 42) << p.stderrText();
  EXPECT_EQ(readFile(path("got")), "term\n");
  // Its end released the lock.
  EXPECT_EQ(runSh("sig", "exit 0", {"--wait", "0"}), 0);

  RunProcess q(dir_, tcp({"sig", "--", "sh", "-c", "touch started2; exec sleep 30"}));
  ASSERT_TRUE(waitFor([&] { return fileExists(path("started2")); }, 10000)) << q.stderrText();
  kill(q.pid(), SIGINT);
  EXPECT_EQ(q.wait(), 128 + SIGINT) << q.stderrText();
}

TEST_F(CliRunTest, AKilledRunLeavesNoLockBehind) {
  RunProcess p(dir_, tcp({"crash", "--", "sh", "-c", "touch started; " + kWaitForGo}));
  ASSERT_TRUE(waitFor([&] { return fileExists(path("started")); }, 10000)) << p.stderrText();
  kill(p.pid(), SIGKILL);
  EXPECT_EQ(p.wait(), 128 + SIGKILL);
  // The sidecar saw the connection close and released: the next run gets the lock at once.
  EXPECT_EQ(runSh("crash", "exit 0", {"--wait", "5000"}), 0);
}

TEST_F(CliRunTest, AKilledRunKeepsTheLockUntilNothingOfTheCommandRuns) {
  // CMD ignores SIGTERM and starts children (a subshell with children of its own among them) that
  // do not watch for sidelock run's death. Each lives at most ~20 s.
  const std::string child_loop =
      "( trap '' TERM; n=0; while [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done ) & "
      "echo $! >> pids; ";
  RunProcess first(dir_, tcp({"crit", "--", "sh", "-c",
                              "trap '' TERM; echo $$ >> pids; " + child_loop + child_loop +
                                  "sleep 20 & echo $! >> pids; touch started; wait"}));
  ASSERT_TRUE(waitFor([&] { return fileExists(path("started")); }, 10000)) << first.stderrText();
  const std::vector<pid_t> pids = readPids(path("pids"));
  KillOnExit cleanup{pids};
  ASSERT_EQ(pids.size(), 4u);
  auto anyRuns = [&] {
    for (pid_t p : pids) {
      if (processRuns(p)) return true;
    }
    return false;
  };
  for (pid_t p : pids) ASSERT_TRUE(processRuns(p)) << p;

  kill(first.pid(), SIGKILL);
  EXPECT_EQ(first.wait(), 128 + SIGKILL);
  RunProcess second(dir_, tcp({"--wait", "20000", "crit", "--", "sh", "-c", "touch second"}));
  // Whenever the second run holds the lock, nothing of the first CMD may still run.
  bool overlapped = false;
  ASSERT_TRUE(waitFor(
      [&] {
        if (!fileExists(path("second"))) return false;
        overlapped = anyRuns();
        return true;
      },
      15000))
      << second.stderrText();
  EXPECT_FALSE(overlapped) << "the second run got the lock while the first CMD still ran";
  EXPECT_EQ(second.wait(), 0) << second.stderrText();
  // And nothing of the first CMD is left behind.
  EXPECT_TRUE(waitFor([&] { return !anyRuns(); }, 5000));
}

TEST_F(CliRunTest, CommandDiesWithSidelockRunEvenWithoutTheKeeper) {
  // sidelock run and its keeper both SIGKILLed: the kernel's parent-death signal still stops CMD.
  RunProcess first(dir_, tcp({"orphan", "--", "sh", "-c",
                              "trap '' TERM; echo $$ > pids; touch started; n=0; "
                              "while [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done"}));
  ASSERT_TRUE(waitFor([&] { return fileExists(path("started")); }, 10000)) << first.stderrText();
  const std::vector<pid_t> pids = readPids(path("pids"));
  KillOnExit cleanup{pids};
  ASSERT_EQ(pids.size(), 1u);
  const std::string self = std::to_string(first.pid());
  std::vector<pid_t> children = readPids("/proc/" + self + "/task/" + self + "/children");
  ASSERT_EQ(children.size(), 2u) << "CMD and the keeper";
  for (pid_t child : children) {
    if (child != pids[0]) kill(child, SIGKILL);
  }
  kill(first.pid(), SIGKILL);
  EXPECT_EQ(first.wait(), 128 + SIGKILL);
  EXPECT_TRUE(waitFor([&] { return !processRuns(pids[0]); }, 3000));
  EXPECT_EQ(runSh("orphan", "exit 0", {"--wait", "5000"}), 0);
}

TEST_F(CliRunTest, AProcessThatLeftTheCommandsGroupKeepsTheLockWhileItRuns) {
  // setsid takes `sleep` out of CMD's process group, so neither sidelock run nor its keeper stops
  // it; the lease's connection it inherited keeps the lock for as long as it runs.
  RunProcess first(dir_, tcp({"escaped", "--", "sh", "-c",
                              "echo $$ > pids; setsid sleep 20 & echo $! >> pids; "
                              "touch started; wait"}));
  ASSERT_TRUE(waitFor([&] { return fileExists(path("started")); }, 10000)) << first.stderrText();
  const std::vector<pid_t> pids = readPids(path("pids"));
  KillOnExit cleanup{pids};
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_TRUE(waitFor([&] { return processGroup(pids[1]) == pids[1]; }, 5000));
  kill(first.pid(), SIGKILL);
  EXPECT_EQ(first.wait(), 128 + SIGKILL);
  ASSERT_TRUE(waitFor([&] { return !processRuns(pids[0]); }, 5000)) << "the keeper did not act";
  ASSERT_TRUE(processRuns(pids[1]));
  std::string err;
  EXPECT_EQ(runSh("escaped", "exit 0", {"--wait", "0"}, &err), 75) << err;
  kill(pids[1], SIGKILL);
  EXPECT_EQ(runSh("escaped", "exit 0", {"--wait", "5000"}, &err), 0) << err;
}

TEST_F(CliRunTest, WhatTheCommandLeftRunningDiesBeforeTheLockIsReleased) {
  RunProcess p(dir_, tcp({"left", "--", "sh", "-c",
                          "trap '' TERM; echo $$ > pids; sleep 20 & echo $! >> pids; exit 7"}));
  EXPECT_EQ(p.wait(), 7) << p.stderrText();
  const std::vector<pid_t> pids = readPids(path("pids"));
  KillOnExit cleanup{pids};
  ASSERT_EQ(pids.size(), 2u);
  // Gone by the time sidelock run exits: it reaped them (they were re-parented to it).
  EXPECT_FALSE(processRuns(pids[1])) << "CMD's background child outlived sidelock run";
  EXPECT_EQ(runSh("left", "exit 0", {"--wait", "0"}), 0);
}

TEST_F(CliRunTest, StopsTheCommandWhenTheLockIsLost) {
  // Short TTL: the sidecar renews every ~100 ms, so the deletion is noticed almost at once.
  RunProcess p(dir_, tcp({"--ttl", "300", "--grace", "5000", "lost", "--", "sh", "-c",
                          "trap 'echo term > got; exit 0' TERM; touch started; " + kWaitForGo}));
  ASSERT_TRUE(waitFor([&] { return fileExists(path("started")); }, 10000)) << p.stderrText();
  ASSERT_EQ(redis_->cli({"DEL", "sidelock:{lost}"}), "1");
  auto deleted_at = Clock::now();
  EXPECT_EQ(p.wait(), 76) << p.stderrText();
  // "At once", not after a TTL-sized timeout: generous deadline for slow machines.
  EXPECT_LT(Clock::now() - deleted_at, milliseconds(3000));
  EXPECT_EQ(readFile(path("got")), "term\n");
  EXPECT_NE(p.stderrText().find("lost"), std::string::npos) << p.stderrText();
}

TEST_F(CliRunTest, KillsACommandThatIgnoresSigtermAfterTheGrace) {
  RunProcess p(dir_, tcp({"--ttl", "300", "--grace", "300", "stubborn", "--", "sh", "-c",
                          "trap '' TERM; touch started; " + kWaitForGo}));
  ASSERT_TRUE(waitFor([&] { return fileExists(path("started")); }, 10000)) << p.stderrText();
  ASSERT_EQ(redis_->cli({"DEL", "sidelock:{stubborn}"}), "1");
  EXPECT_EQ(p.wait(), 76) << p.stderrText();
  EXPECT_NE(p.stderrText().find("SIGKILL"), std::string::npos) << p.stderrText();
}

TEST_F(CliRunTest, SidecarGoneWhileRunningStopsTheCommand) { expectSidecarLossStops({"gone"}); }

TEST_F(CliRunTest, UnreachableSidecarAndBadUsage) {
  RunProcess tcp_gone(dir_, {"--addr", "127.0.0.1:" + std::to_string(pickFreePort()), "x", "--",
                             "sh", "-c", "touch ran"});
  EXPECT_EQ(tcp_gone.wait(), 69);
  RunProcess unix_gone(dir_, {"--socket", dir_ + "/no.sock", "x", "--", "sh", "-c", "touch ran"});
  EXPECT_EQ(unix_gone.wait(), 69);
  EXPECT_FALSE(fileExists(path("ran")));

  RunProcess usage(dir_, {"--ttl", "soon", "x", "--", "true"});
  EXPECT_EQ(usage.wait(), 64);
  EXPECT_NE(usage.stderrText().find("--ttl"), std::string::npos);
  // The sidecar's own validation (bad name) is a usage error too, and runs nothing.
  std::string err;
  EXPECT_EQ(runSh("bad/name", "touch ran", {}, &err), 64) << err;
  EXPECT_FALSE(fileExists(path("ran")));
  // CMD not found: 127, and the lock is not left behind.
  RunProcess missing(dir_, tcp({"nf", "--", "/nonexistent/cmd"}));
  EXPECT_EQ(missing.wait(), 127);
  EXPECT_EQ(runSh("nf", "exit 0", {"--wait", "0"}), 0);
}

TEST_F(CliRunTest, OptionsAfterTheNameAreOptions) {
  // This used to take the lock and then try to run "--wait" (exit 127).
  RunProcess p(dir_, tcp({"after", "--wait", "0", "--", "sh", "-c", "exit 5"}));
  EXPECT_EQ(p.wait(), 5) << p.stderrText();
  RunProcess refused(dir_, tcp({"after", "-x", "--", "sh", "-c", "touch ran"}));
  EXPECT_EQ(refused.wait(), 64);
  EXPECT_NE(refused.stderrText().find("unknown option '-x'"), std::string::npos)
      << refused.stderrText();
  EXPECT_FALSE(fileExists(path("ran")));
}

TEST_F(CliRunTest, TopLevelUsageErrorsSayWhatWasWrong) {
  RunProcess bogus(dir_, {"--bogus"}, "");
  EXPECT_EQ(bogus.wait(), 64);
  EXPECT_EQ(bogus.stderrText().rfind("sidelock: unknown option --bogus\n", 0), 0u)
      << bogus.stderrText();
  EXPECT_NE(bogus.stderrText().find("Usage:"), std::string::npos);
  RunProcess no_file(dir_, {"--config"}, "");
  EXPECT_EQ(no_file.wait(), 64);
  EXPECT_EQ(no_file.stderrText().rfind("sidelock: --config needs a value\n", 0), 0u)
      << no_file.stderrText();
}

TEST_F(CliRunTest, MaxHoldStopsTheCommand) {
  RunProcess p(dir_, tcp({"--ttl", "300", "--max-hold", "500", "capped", "--", "sh", "-c",
                          "trap 'exit 0' TERM; touch started; " + kWaitForGo}));
  ASSERT_TRUE(waitFor([&] { return fileExists(path("started")); }, 10000)) << p.stderrText();
  // The sidecar stops renewing at the cap and says so; CMD gets SIGTERM while the last lease is
  // still valid.
  EXPECT_EQ(p.wait(), 124) << p.stderrText();
  EXPECT_NE(p.stderrText().find("held for --max-hold 500 ms"), std::string::npos) << p.stderrText();
  EXPECT_EQ(runSh("capped", "exit 0", {"--wait", "2000"}), 0);

  // Without --max-hold the cap is the sidecar's, and the message says so (not "--max-hold").
  SidecarProcess::Options o;
  o.yaml = "backend:\n  type: redis\n  nodes: [\"" + redis_->address() +
           "\"]\nlocks:\n  default_max_hold_ms: 600\n  max_hold_ms_limit: 600\n";
  o.wait_ready = true;
  SidecarProcess capping(o);
  RunProcess q(dir_, {"--addr", "127.0.0.1:" + std::to_string(capping.port()), "--ttl", "300",
                      "capped-by-sidecar", "--", "sh", "-c", "trap 'exit 0' TERM; " + kWaitForGo});
  EXPECT_EQ(q.wait(), 124) << q.stderrText();
  EXPECT_NE(q.stderrText().find("held for the sidecar's maximum hold (locks.max_hold_ms_limit)"),
            std::string::npos)
      << q.stderrText();
  EXPECT_EQ(capping.stop(), 0) << capping.logs();
}

// --- sidelock run --elect -----------------------------------------------------------------------

TEST_F(CliRunTest, ElectStopsCommandAndGrandchildBeforeTheLeaseCanExpire) {
  // CMD and its child (a subshell: sidelock run's grandchild) both ignore SIGTERM; --grace is far
  // longer than the TTL, so only the kill deadline can stop them in time.
  RunProcess p(dir_, tcp({"--elect", "lead", "--candidate", "a", "--ttl", "2000", "--grace", "10s",
                          "--", "sh", "-c",
                          "trap '' TERM; echo $$ >> pids; "
                          "( trap '' TERM; n=0; while [ $n -lt 400 ]; do sleep 0.05; "
                          "n=$((n+1)); done ) & echo $! >> pids; touch started; wait"}));
  ASSERT_TRUE(waitFor([&] { return fileExists(path("started")); }, 10000)) << p.stderrText();
  const std::vector<pid_t> pids = readPids(path("pids"));
  KillOnExit cleanup{pids};
  ASSERT_EQ(pids.size(), 2u);
  // The sidecar stops renewing (and telling). The lease's real end is Redis's: its PTTL read
  // after the pause, counted from the earliest instant the answer can describe.
  RedisLink redis(redis_->port());
  sidecar_->pause();
  const auto asked = Clock::now();
  const std::vector<int64_t> pttl = redis.command({"PTTL", "sidelock:{lead}:el"});
  ASSERT_EQ(pttl.size(), 1u);
  ASSERT_GT(pttl[0], 0);
  const auto expiry = asked + milliseconds(pttl[0]);
  auto anyRuns = [&] { return processRuns(pids[0]) || processRuns(pids[1]); };
  ASSERT_TRUE(waitFor([&] { return !anyRuns(); }, 5000)) << p.stderrText();
  const auto dead = Clock::now();
  EXPECT_LT(dead, expiry) << "CMD's group outlived the lease by "
                          << std::chrono::duration_cast<milliseconds>(dead - expiry).count()
                          << " ms\n"
                          << p.stderrText();
  std::cerr << "[run --elect] CMD's group dead "
            << std::chrono::duration_cast<milliseconds>(expiry - dead).count()
            << " ms before the lease's expiry (TTL 2000 ms, grace 10 s)\n";
  EXPECT_EQ(p.wait(), 76) << p.stderrText();
  EXPECT_NE(p.stderrText().find("kill deadline"), std::string::npos) << p.stderrText();
  sidecar_->resume();
}

TEST_F(CliRunTest, ElectASecondCandidateTakesOverWithAHigherTerm) {
  HttpClient c = HttpClient::tcp(sidecar_->port());
  RunProcess first(
      dir_, tcp({"--elect", "job", "--candidate", "a", "--ttl", "5s", "--", "sh", "-c",
                 "echo $SIDELOCK_TERM > term-a; touch a-started; " + kWaitForGo + "; exit 3"}));
  ASSERT_TRUE(waitFor([&] { return fileExists(path("a-started")); }, 10000)) << first.stderrText();
  RunProcess second(
      dir_, tcp({"--elect", "job", "--candidate", "b", "--ttl", "5s", "--", "sh", "-c",
                 "trap 'exit 42' TERM; echo \"$SIDELOCK_TERM $SIDELOCK_CANDIDATE\" > term-b; "
                 "n=0; while kill -0 $PPID 2>/dev/null && [ $n -lt 1200 ]; do sleep 0.05; "
                 "n=$((n+1)); done"}));
  ASSERT_TRUE(waitForWaiters(c, "election/job", 1)) << second.stderrText();
  // A third gives up after --wait: not elected, 75, and nothing ran.
  RunProcess third(dir_, tcp({"--elect", "job", "--candidate", "c", "--wait", "300", "--", "sh",
                              "-c", "touch c-ran"}));
  EXPECT_EQ(third.wait(), 75) << third.stderrText();
  EXPECT_FALSE(fileExists(path("c-ran")));
  EXPECT_FALSE(fileExists(path("term-b")));

  // The leader's CMD ends on its own: its code passes through, it resigns, the next one leads.
  std::ofstream(path("go")).put('x');
  EXPECT_EQ(first.wait(), 3) << first.stderrText();
  ASSERT_TRUE(
      waitFor([&] { return readFile(path("term-b")).find('\n') != std::string::npos; }, 10000))
      << second.stderrText();
  std::istringstream b(readFile(path("term-b")));
  std::string term_b, candidate_b;
  b >> term_b >> candidate_b;
  EXPECT_GT(std::stoull(term_b), std::stoull(readFile(path("term-a"))));
  EXPECT_EQ(candidate_b, "b");
  EXPECT_NE(c.get("/v1/elections/job").body.find("\"candidate\":\"b\""), std::string::npos);

  // SIGTERM to sidelock run: CMD gets it, its status is ours, and the leadership is given up.
  kill(second.pid(), SIGTERM);
  EXPECT_EQ(second.wait(), 42) << second.stderrText();
  EXPECT_NE(c.get("/v1/elections/job").body.find("\"leader\":null"), std::string::npos);
}

// The leader's sidecar gets SIGTERM (a rolling update: the app container gets it too): the
// sidecar steps down rather than resigning, `run --elect` stops CMD, then resigns, so the next
// candidate (on another sidecar) is elected only once CMD has exited: never two acting leaders.
TEST_F(CliRunTest, ElectSidecarSigtermElectsTheNextOnlyAfterCommandExited) {
  SidecarProcess::Options o;
  o.yaml = "backend:\n  type: redis\n  nodes: [\"" + redis_->address() + "\"]\n";
  o.wait_ready = true;
  SidecarProcess other(o);
  RunProcess leader(dir_, tcp({"--elect", "roll", "--candidate", "a", "--ttl", "3s", "--grace",
                               "4000", "--", "sh", "-c",
                               "trap 'sleep 1; date +%s%3N > exited; exit 0' TERM; touch started; "
                               "while :; do sleep 0.05; done"}));
  ASSERT_TRUE(waitFor([&] { return fileExists(path("started")); }, 10000)) << leader.stderrText();
  HttpClient next = HttpClient::tcp(other.port());
  next.sendRequest("POST", "/v1/elections/roll/campaign", R"({"candidate":"b","ttl_ms":3000})");
  HttpClient co = HttpClient::tcp(other.port());
  ASSERT_TRUE(pollUntil([&] {
    return co.get("/v1/locks").body.find("election/roll") != std::string::npos;
  }));
  ASSERT_EQ(kill(sidecar_->pid(), SIGTERM), 0);
  std::optional<HttpResponse> head = next.readStreamHead(15000);
  const int64_t elected_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(leader.wait(), 76) << leader.stderrText();  // leadership lost: stepped down
  ASSERT_TRUE(fileExists(path("exited"))) << leader.stderrText();
  const int64_t exited_ms = std::stoll(readFile(path("exited")));
  EXPECT_GE(elected_ms, exited_ms);  // b was elected only after a's CMD had exited
  // The sidecar then drains and exits 0 within its grace (10 s by default).
  const auto term_at = std::chrono::steady_clock::now();
  EXPECT_TRUE(pollUntil([&] { return !processRuns(sidecar_->pid()); }));
  EXPECT_LT(std::chrono::steady_clock::now() - term_at, std::chrono::seconds(10));
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();  // already exited: this only reaps it
}

// The same for a lock: the holder's sidecar gets SIGTERM while a waiter queues on another sidecar.
// The stream hold steps down (stepping_down, release_in_ms) instead of being released at once,
// `sidelock run` stops CMD, then closes the stream, which releases the lock: the waiter is
// granted only once CMD has exited (it used to be granted ~10 ms after the SIGTERM, beside a
// CMD still running).
TEST_F(CliRunTest, LockSidecarSigtermGrantsTheNextOnlyAfterCommandExited) {
  SidecarProcess::Options o;
  o.yaml = "backend:\n  type: redis\n  nodes: [\"" + redis_->address() + "\"]\n";
  o.wait_ready = true;
  SidecarProcess other(o);
  RunProcess holder(dir_, tcp({"--ttl", "3s", "--grace", "4000", "roll-lock", "--", "sh", "-c",
                               "trap 'sleep 1; date +%s%3N > exited; exit 0' TERM; touch started; "
                               "while :; do sleep 0.05; done"}));
  ASSERT_TRUE(waitFor([&] { return fileExists(path("started")); }, 10000)) << holder.stderrText();
  HttpClient next = HttpClient::tcp(other.port());
  next.sendRequest("POST", "/v1/locks/roll-lock/acquire", R"({"ttl_ms":3000,"wait_ms":20000})");
  HttpClient co = HttpClient::tcp(other.port());
  ASSERT_TRUE(pollUntil([&] {
    return co.get("/v1/locks").body.find("\"waiters\":1") != std::string::npos;
  })) << co.get("/v1/locks").body;
  ASSERT_EQ(kill(sidecar_->pid(), SIGTERM), 0);
  std::optional<HttpResponse> granted = next.readResponse(15000);
  const int64_t granted_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  ASSERT_TRUE(granted.has_value());
  EXPECT_EQ(granted->status, 200) << granted->body;
  EXPECT_NE(holder.wait(), 0) << holder.stderrText();  // the lock was lost to the shutdown
  EXPECT_NE(holder.stderrText().find("steps down"), std::string::npos) << holder.stderrText();
  ASSERT_TRUE(fileExists(path("exited"))) << holder.stderrText();
  const int64_t exited_ms = std::stoll(readFile(path("exited")));
  EXPECT_GE(granted_ms, exited_ms);  // granted only after the first CMD had exited
  // The sidecar then drains and exits 0 within its grace (10 s by default).
  EXPECT_TRUE(pollUntil([&] { return !processRuns(sidecar_->pid()); }));
  EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs();  // already exited: this only reaps it
}

TEST_F(CliRunTest, ElectLosingTheSidecarStopsTheCommand) {
  expectSidecarLossStops({"--elect", "gone"});
}

TEST_F(CliRunTest, ElectUsageErrors) {
  const std::vector<std::vector<std::string>> bad = {
      {"--elect"},                                                 // no NAME
      {"--elect", "x"},                                            // no CMD
      {"--candidate", "a", "job", "--", "sh", "-c", "touch ran"},  // --candidate without --elect
      {"job", "--elect", "x", "--", "sh", "-c", "touch ran"},      // a lock NAME and --elect
      {"--elect", "x", "--max-hold", "5s", "--", "sh", "-c", "touch ran"},
      {"--elect", "x", "--wait", "0", "--", "sh", "-c", "touch ran"},
  };
  for (const auto& args : bad) {
    RunProcess p(dir_, tcp(args));
    EXPECT_EQ(p.wait(), 64) << args[0] << " " << (args.size() > 1 ? args[1] : "") << "\n"
                            << p.stderrText();
  }
  // The sidecar's own checks (a candidate must be printable) are usage errors too.
  RunProcess unprintable(
      dir_, tcp({"--elect", "x", "--candidate", "a\tb", "--", "sh", "-c", "touch ran"}));
  EXPECT_EQ(unprintable.wait(), 64) << unprintable.stderrText();
  EXPECT_NE(unprintable.stderrText().find("printable"), std::string::npos)
      << unprintable.stderrText();
  EXPECT_FALSE(fileExists(path("ran")));
}

}  // namespace
}  // namespace sidelock::testing
