// The real `sidelock` binary as a child process for integration tests: writes a config file into a
// temp dir (TCP on a free port, Unix socket in the temp dir), starts the binary, waits for
// /healthz, and on stop() sends SIGTERM and waits, returning the exit status. The destructor kills
// what is left, so no process outlives the test.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "support/redis_server.h"

namespace sidelock::testing {

class SidecarProcess {
 public:
  struct Options {
    /// YAML for everything except `listen.tcp` / `listen.unix`, which the fixture fills in.
    /// Example: "backend:\n  type: redis\n  nodes: [\"127.0.0.1:6379\"]\n".
    std::string yaml;
    std::vector<std::string> env;  // extra "K=V" entries
    bool wait_ready = false;       // also wait for /readyz to answer 200
    /// Extra YAML lines under `listen:` (indented two spaces), e.g. "  max_connections: 20000\n".
    std::string listen_yaml = "";
  };

  explicit SidecarProcess(Options options);
  ~SidecarProcess();
  SidecarProcess(const SidecarProcess&) = delete;
  SidecarProcess& operator=(const SidecarProcess&) = delete;

  int port() const { return port_; }
  const std::string& socketPath() const { return socket_path_; }
  const std::string& dir() const { return dir_; }
  pid_t pid() const { return pid_; }
  /// Everything the process wrote to stderr/stdout so far.
  std::string logs() const;

  /// SIGTERM, wait up to timeout_ms; returns the exit code (or 128+signal; -1 on timeout, after
  /// which the process is killed).
  int stop(int timeout_ms = 15000);
  void kill();  // SIGKILL and reap
  /// Starts the binary again with the same config, port and socket (after stop() or kill()).
  void restart();
  /// SIGSTOP / SIGCONT: the process keeps its sockets but answers nothing while stopped.
  void pause();
  void resume();
  bool running() const { return pid_ > 0; }

 private:
  /// Writes the config for port_ and starts the binary; false if it never became healthy (the
  /// reason is in logs()).
  bool start();
  Options options_;
  std::string dir_;
  std::string socket_path_;
  int port_ = 0;
  pid_t pid_ = -1;
  bool paused_ = false;
  // port_ while the process is down, until start(); not the ports listen_yaml names (admin, gRPC)
  PortReservation down_port_;
};

/// Path of the sidelock binary under test: $SIDELOCK_TEST_BINARY when set (tests/run.sh runs the
/// sanitizer build's tests again against the shipped Release binary that way), else the one this
/// build made (the SIDELOCK_BINARY compile definition).
std::string sidelockBinary();
/// True when the sidecar under test is this build's own and this build is ASan+UBSan
/// (SIDELOCK_SANITIZE): several times slower, its RSS is ASan's. Tests relax speed and memory
/// bounds only then, never for the shipped binary named by SIDELOCK_TEST_BINARY.
bool sidecarIsSanitized();

/// Options::yaml for a sidecar on one Redis at `address` ("127.0.0.1:port"), defaults otherwise;
/// `command_timeout_ms` > 0 sets backend.command_timeout_ms (a test whose bursts or pauses are
/// not what it checks gives a loaded machine more than the 500 ms default).
std::string redisBackendYaml(const std::string& address, int64_t command_timeout_ms = 0);
/// Options::yaml for a Redlock sidecar over `addresses`: short node timeout, no delayed restart
/// (fresh test nodes would not vote for max_ttl_ms otherwise).
std::string redlockBackendYaml(const std::vector<std::string>& addresses);
/// A ready sidecar on one Redis at `address` with defaults otherwise.
std::unique_ptr<SidecarProcess> sidecarOnRedis(const std::string& address);

}  // namespace sidelock::testing
