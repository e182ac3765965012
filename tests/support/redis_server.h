// A real redis-server process for tests: started on a free port in its own temp dir, no
// persistence unless asked, killed (and waited for) in the destructor so no process is left.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace sidelock::testing {

/// A TCP port that was free a moment ago (bind to port 0, read it back, close).
int pickFreePort();
/// Creates a fresh directory under $TMPDIR (or /tmp); removed by removeTree().
std::string makeTempDir(const std::string& prefix);
void removeTree(const std::string& path);

class RedisServer {
 public:
  struct Options {
    bool persistence = false;             // appendonly yes + fsync always, so restart() keeps data
    std::vector<std::string> extra_args;  // e.g. {"--requirepass", "secret"}
  };
  /// How and where the process runs, for fault tests (kept apart from Options so that existing
  /// `Options{persistence, args}` initializers stay complete).
  struct Launch {
    /// Extra "K=V" environment entries (e.g. LD_PRELOAD of libfaketime: a node whose clock jumps).
    std::vector<std::string> env;
    /// Words run before redis-server (e.g. {"ip", "netns", "exec", "ns"}: a server in a network
    /// namespace).
    std::vector<std::string> command_prefix;
    /// The address it binds to and is reached at (a veth address for a server in a namespace).
    std::string host = "127.0.0.1";
  };

  RedisServer();  // default options
  explicit RedisServer(Options options);
  RedisServer(Options options, Launch launch);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string address() const { return launch_.host + ":" + std::to_string(port_); }
  const std::string& host() const { return launch_.host; }
  bool running() const { return pid_ > 0; }
  /// The process id while running (benchmarks read its CPU time and pin it to a core).
  pid_t pid() const { return pid_; }

  /// SIGKILL and wait. Data is lost unless persistence is on.
  void kill();
  /// Starts again on the same port (waits until it answers PING).
  void restart();
  /// SIGSTOP / SIGCONT: the process stays connected but answers nothing.
  void pause();
  void resume();

  /// Runs redis-cli against this server and returns its trimmed stdout ("" on failure).
  std::string cli(const std::vector<std::string>& args) const;

 private:
  void start();
  Options options_;
  Launch launch_;
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
  bool paused_ = false;
};

}  // namespace sidelock::testing
