#include "support/redis_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "support/child_process.h"
#include "support/redis_link.h"

namespace sidelock::testing {

namespace {

/// 127.0.0.1:`port` (0: any port, for bind).
sockaddr_in loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

bool portFree(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr = loopback(port);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

/// The ports this test process handed out (pickFreePort), each at most once.
struct PortBook {
  std::mutex mutex;
  std::set<int> handed_out;
  std::mt19937 random{static_cast<unsigned>(getpid()) ^ std::random_device{}()};
  const int below = std::min(ephemeralPortLow(), 65536 - 10000);
  static PortBook& get() {
    static PortBook book;
    return book;
  }
};

constexpr int kLowestPort = 10000;

}  // namespace

int ephemeralPortLow() {
  int low = 32768;
  if (FILE* f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (fscanf(f, "%d", &low) != 1) low = 32768;
    fclose(f);
  }
  return low;
}

int pickFreePort() {
  // Two ways a picked port is lost before the process meant to listen on it binds it:
  // - bind(0) may hand a just-closed port out again, and a test often picks two before anything
  //   binds them (CI once got the same port for a sidecar's listen.tcp and listen.admin, and the
  //   config was refused). So a port is handed out at most once per test process.
  // - The kernel takes every outgoing connection's local port from its ephemeral range, and
  //   parallel tests open thousands. So ports come from below that range (10000 up), at random.
  PortBook& book = PortBook::get();
  std::lock_guard<std::mutex> lock(book.mutex);
  for (int attempt = 0; attempt < 1000 && book.below - kLowestPort > 1000; ++attempt) {
    const int port =
        kLowestPort +
        static_cast<int>(book.random() % static_cast<unsigned>(book.below - kLowestPort));
    if (book.handed_out.count(port) == 0 && portFree(port)) {
      book.handed_out.insert(port);
      return port;
    }
  }
  // An unusual ephemeral range: whatever bind(0) gives, still never twice.
  for (int attempt = 0; attempt < 100; ++attempt) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error("socket failed");
    sockaddr_in addr = loopback(0);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      throw std::runtime_error("bind failed");
    }
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    close(fd);
    const int port = ntohs(addr.sin_port);
    if (book.handed_out.insert(port).second) return port;
  }
  throw std::runtime_error("no free port that was not handed out before");
}

int pickFreeClusterPort() {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = pickFreePort();
    PortBook& book = PortBook::get();
    // The bus port below the ephemeral range too, when the range leaves room for both.
    if (port + 10000 >= book.below && book.below - 10000 > kLowestPort + 1000) continue;
    if (port + 10000 > 65535 || !portFree(port + 10000)) continue;
    std::lock_guard<std::mutex> lock(book.mutex);
    if (book.handed_out.insert(port + 10000).second) return port;  // the bus port is taken too
  }
  throw std::runtime_error("no free port with a free cluster bus port (+10000)");
}

void PortReservation::hold(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  const int one = 1;
  // The dead server's connections may linger in TIME_WAIT on this port.
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr = loopback(port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return;
  }
  fds_.push_back(fd);
}

void PortReservation::release() {
  for (int fd : fds_) close(fd);
  fds_.clear();
}

std::string makeTempDir(const std::string& prefix) {
  const char* base = getenv("TMPDIR");
  std::string templ =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" + prefix + "-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return templ;
}

void removeTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

RedisServer::RedisServer() : RedisServer(Options{}) {}

RedisServer::RedisServer(Options options) : RedisServer(std::move(options), Role(), Launch()) {}

RedisServer::RedisServer(Options options, Role role)
    : RedisServer(std::move(options), std::move(role), Launch()) {}

RedisServer::RedisServer(Options options, Launch launch)
    : RedisServer(std::move(options), Role(), std::move(launch)) {}

RedisServer::RedisServer(Options options, Role role, Launch launch)
    : options_(std::move(options)), role_(std::move(role)), launch_(std::move(launch)) {
  dir_ = makeTempDir("sidelock-redis");
  // A port picked free can be taken by someone else before redis binds it: try a few.
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = options_.cluster ? pickFreeClusterPort() : pickFreePort();
    try {
      start();
      return;
    } catch (const std::exception&) {
      if (attempt == 4) throw;
    }
  }
}

RedisServer::~RedisServer() {
  kill();
  removeTree(dir_);
}

std::unique_ptr<RedisServer> RedisServer::startReplica(const RedisServer& master) {
  Role role;
  role.replica_of = master.address();
  return std::make_unique<RedisServer>(Options(), std::move(role));
}

std::unique_ptr<RedisServer> RedisServer::startSentinel(const RedisServer& master,
                                                        const std::string& master_name,
                                                        int quorum, int down_after_ms,
                                                        int failover_timeout_ms) {
  Role role;
  role.sentinel = true;
  role.config_lines = {
      "sentinel monitor " + master_name + " 127.0.0.1 " + std::to_string(master.port()) + " " +
          std::to_string(quorum),
      "sentinel down-after-milliseconds " + master_name + " " + std::to_string(down_after_ms),
      "sentinel failover-timeout " + master_name + " " + std::to_string(failover_timeout_ms),
      "sentinel parallel-syncs " + master_name + " 1"};
  return std::make_unique<RedisServer>(Options(), std::move(role));
}

void RedisServer::start() {
  down_ports_.release();
  std::vector<std::string> args = launch_.command_prefix;
  args.push_back("redis-server");
  if (role_.sentinel || !role_.config_lines.empty()) {
    const std::string conf = dir_ + "/redis.conf";
    if (!std::filesystem::exists(conf)) {  // a restarted sentinel keeps what it rewrote
      std::ofstream out(conf);
      for (const auto& line : role_.config_lines) out << line << "\n";
    }
    args.push_back(conf);
    if (role_.sentinel) args.push_back("--sentinel");
  }
  args.insert(args.end(),
              {"--port", std::to_string(port_), "--bind", launch_.host, "--dir", dir_, "--save", "",
               "--daemonize", "no", "--loglevel", "warning", "--logfile", dir_ + "/redis.log"});
  if (options_.persistence) {
    args.insert(args.end(), {"--appendonly", "yes", "--appendfsync", "always"});
  } else {
    args.insert(args.end(), {"--appendonly", "no"});
  }
  if (!role_.replica_of.empty()) {
    const size_t colon = role_.replica_of.rfind(':');
    args.insert(args.end(), {"--replicaof", role_.replica_of.substr(0, colon),
                             role_.replica_of.substr(colon + 1)});
  }
  if (options_.cluster) {
    args.insert(args.end(), {"--cluster-enabled", "yes", "--cluster-config-file",
                             dir_ + "/nodes.conf", "--cluster-node-timeout", "3000"});
  }
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());

  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dieWithParent(parent);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, STDIN_FILENO);
      dup2(devnull, STDOUT_FILENO);
    }
    for (auto& entry : launch_.env) putenv(entry.data());
    execvp(argv[0], argv.data());
    _exit(127);
  }
  pid_ = pid;
  paused_ = false;
  // Wait for it to answer.
  for (int i = 0; i < 500; ++i) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("redis-server exited at start (port " + std::to_string(port_) + ")");
    }
    if (cli({"PING"}) == "PONG") return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill();
  throw std::runtime_error("redis-server did not answer PING");
}

void RedisServer::kill() {
  if (pid_ <= 0) return;
  if (paused_) ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  paused_ = false;
  down_ports_.hold(port_);
  if (options_.cluster) down_ports_.hold(port_ + 10000);
}

void RedisServer::restart() {
  kill();
  start();
}

void RedisServer::pause() {
  if (pid_ > 0 && !paused_) {
    ::kill(pid_, SIGSTOP);
    paused_ = true;
  }
}

void RedisServer::resume() {
  if (pid_ > 0 && paused_) {
    ::kill(pid_, SIGCONT);
    paused_ = false;
  }
}

std::string RedisServer::cli(const std::vector<std::string>& args) const {
  // redis-cli's own options first ("-n 3", "--user u --pass p"): run redis-cli itself.
  if (!args.empty() && args.front().starts_with("-")) return spawnCli(args);
  // Otherwise what `redis-cli -h host -p port args...` prints, without spawning it: tests call
  // this hundreds of times, and two process starts per call (sh + redis-cli) cost seconds per
  // test on a loaded machine. A connection per call, like redis-cli's: no state carries over,
  // and a server restarted between calls is simply reconnected to. No command timeout, as
  // redis-cli has none.
  try {
    return RedisLink(launch_.host, port_, /*command_timeout_ms=*/0).output(args);
  } catch (const std::exception&) {
    return "";
  }
}

std::string RedisServer::spawnCli(const std::vector<std::string>& args) const {
  std::string cmd = "redis-cli -h " + launch_.host + " -p " + std::to_string(port_);
  for (const auto& a : args) {
    cmd += " '";
    for (char c : a) {
      if (c == '\'')
        cmd += "'\\''";
      else
        cmd += c;
    }
    cmd += "'";
  }
  cmd += " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

}  // namespace sidelock::testing
