#include "support/redis_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "support/child_process.h"

namespace sidelock::testing {

int pickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    throw std::runtime_error("bind failed");
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
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

RedisServer::RedisServer(Options options) : RedisServer(std::move(options), Launch{}) {}

RedisServer::RedisServer(Options options, Launch launch)
    : options_(std::move(options)), launch_(std::move(launch)) {
  dir_ = makeTempDir("sidelock-redis");
  // A port picked free can be taken by someone else before redis binds it: try a few.
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = pickFreePort();
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

void RedisServer::start() {
  std::vector<std::string> args = launch_.command_prefix;
  args.insert(args.end(), {"redis-server", "--port", std::to_string(port_), "--bind", launch_.host,
                           "--dir", dir_, "--save", "", "--daemonize", "no", "--loglevel",
                           "warning", "--logfile", dir_ + "/redis.log"});
  if (options_.persistence) {
    args.insert(args.end(), {"--appendonly", "yes", "--appendfsync", "always"});
  } else {
    args.insert(args.end(), {"--appendonly", "no"});
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
