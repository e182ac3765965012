// A real redis-server process for tests: started on a free port in its own temp dir, no
// persistence unless asked, killed (and waited for) in the destructor so no process is left.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace sidelock::testing {

/// A TCP port on 127.0.0.1 that was free a moment ago (a plain bind succeeded), never the same
/// one twice in one test process, at random from 10000 up to ephemeralPortLow() (bind(0) when
/// that range is too small).
int pickFreePort();
/// The first port of the kernel's ephemeral range (ip_local_port_range), 32768 if unreadable:
/// outgoing connections' local ports come from there, so pickFreePort stays below it.
int ephemeralPortLow();
/// A free TCP port whose port + 10000 is free too (a Redis Cluster node binds both).
int pickFreeClusterPort();
/// Creates a fresh directory under $TMPDIR (or /tmp); removed by removeTree().
std::string makeTempDir(const std::string& prefix);
void removeTree(const std::string& path);

/// Keeps TCP ports on 127.0.0.1 bound but not listening while the server meant for them is down
/// (killed, about to restart): connections are refused as by a dead server, and no other test
/// process picks the port meanwhile. One could, and a replica reconnecting to its killed master's
/// port would then full-sync from a stranger, dropping its data.
class PortReservation {
 public:
  PortReservation() = default;
  ~PortReservation() { release(); }
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  /// Best effort: a port something else holds stays with it.
  void hold(int port);
  void release();

 private:
  std::vector<int> fds_;
};

class RedisServer {
 public:
  struct Options {
    bool persistence = false;             // appendonly yes + fsync always, so restart() keeps data
    std::vector<std::string> extra_args;  // e.g. {"--requirepass", "secret"}
    /// Cluster mode (--cluster-enabled yes, its nodes.conf in the temp dir). The port is picked so
    /// that port + 10000 (the cluster bus) is free too.
    bool cluster = false;
  };
  /// What else the process is besides a plain server (kept apart from Options, which callers
  /// brace-initialize).
  struct Role {
    /// "127.0.0.1:port": start as a replica of that server (--replicaof).
    std::string replica_of;
    /// Lines of a config file written into the server's dir and passed first (a sentinel needs
    /// its monitor lines in a writable file; it rewrites it).
    std::vector<std::string> config_lines;
    bool sentinel = false;  // run as `redis-server <conf> --sentinel`
  };

  /// A replica of `master` (--replicaof).
  static std::unique_ptr<RedisServer> startReplica(const RedisServer& master);
  /// A sentinel monitoring `master` as `master_name` with `quorum`, quick to react (failure
  /// detected after `down_after_ms`; a failed election retried after 2 x `failover_timeout_ms`).
  static std::unique_ptr<RedisServer> startSentinel(const RedisServer& master,
                                                    const std::string& master_name,
                                                    int quorum = 2, int down_after_ms = 1000,
                                                    int failover_timeout_ms = 3000);

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
  RedisServer(Options options, Role role);
  RedisServer(Options options, Launch launch);
  RedisServer(Options options, Role role, Launch launch);
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

  /// The trimmed output `redis-cli` would print for this command against this server ("" on
  /// failure), from a connection of its own (no process is started). Arguments may start with
  /// redis-cli's own options ("-n 3", "--user u --pass p"); then redis-cli itself is run.
  std::string cli(const std::vector<std::string>& args) const;

 private:
  /// cli() by running redis-cli (for its options).
  std::string spawnCli(const std::vector<std::string>& args) const;
  void start();
  Options options_;
  Role role_;
  Launch launch_;
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
  bool paused_ = false;
  PortReservation down_ports_;  // while killed: port_ (and the cluster bus port)
};

}  // namespace sidelock::testing
