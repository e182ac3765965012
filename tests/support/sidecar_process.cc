#include "support/sidecar_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "support/child_process.h"
#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"

namespace sidelock::testing {

std::string redisBackendYaml(const std::string& address, int64_t command_timeout_ms) {
  std::string yaml = "backend:\n  type: redis\n  nodes: [\"" + address + "\"]\n";
  if (command_timeout_ms > 0) {
    yaml += "  command_timeout_ms: " + std::to_string(command_timeout_ms) + "\n";
  }
  return yaml;
}

std::string redlockBackendYaml(const std::vector<std::string>& addresses) {
  std::string list;
  for (const auto& a : addresses) list += (list.empty() ? "\"" : ", \"") + a + "\"";
  return "backend:\n  type: redlock\n  nodes: [" + list +
         "]\n  redlock:\n    node_timeout_ms: 50\n    delayed_restart: false\n";
}

std::unique_ptr<SidecarProcess> sidecarOnRedis(const std::string& address) {
  return std::make_unique<SidecarProcess>(
      SidecarProcess::Options{redisBackendYaml(address), {}, /*wait_ready=*/true});
}

std::string sidelockBinary() {
  // tests/run.sh's shipped pass runs these test binaries again against the Release build.
  if (const char* under_test = getenv("SIDELOCK_TEST_BINARY"); under_test && *under_test) {
    return under_test;
  }
#ifdef SIDELOCK_BINARY
  return SIDELOCK_BINARY;
#else
  const char* env = getenv("SIDELOCK_BINARY");
  return env != nullptr ? env : "sidelock";
#endif
}

bool sidecarIsSanitized() {
#if defined(SIDELOCK_ASAN)  // CMakeLists.txt: gcc or clang with SIDELOCK_SANITIZE
  // This build's own sidecar is sanitized; one named by SIDELOCK_TEST_BINARY is the shipped one.
  const char* under_test = getenv("SIDELOCK_TEST_BINARY");
  return under_test == nullptr || *under_test == '\0';
#else
  return false;
#endif
}

SidecarProcess::SidecarProcess(Options options) : options_(std::move(options)) {
  dir_ = makeTempDir("sidelock-sidecar");
  socket_path_ = dir_ + "/sidelock.sock";
  for (int attempt = 0;; ++attempt) {
    port_ = pickFreePort();
    if (start()) return;
    // The port may have been taken between picking and binding: try again a few times.
    if (attempt >= 3 || logs().find("address already in use") == std::string::npos) {
      const std::string log = logs();
      removeTree(dir_);  // a throwing constructor gets no destructor to do it
      throw std::runtime_error("sidelock did not become " +
                               std::string(options_.wait_ready ? "ready" : "healthy") + ":\n" +
                               log);
    }
  }
}

bool SidecarProcess::start() {
  down_port_.release();
  const std::string config_path = dir_ + "/sidelock.yaml";
  {
    std::ofstream out(config_path);
    out << "listen:\n  tcp: \"127.0.0.1:" << port_ << "\"\n  unix: \"" << socket_path_ << "\"\n";
    out << options_.listen_yaml;
    out << options_.yaml << "\n";
  }
  const std::string log_path = dir_ + "/sidelock.log";
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dieWithParent(parent);
    int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    for (const auto& kv : options_.env) putenv(const_cast<char*>(kv.c_str()));
    std::string bin = sidelockBinary();
    execl(bin.c_str(), bin.c_str(), "--config", config_path.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  pid_ = pid;
  paused_ = false;
  // Wait until it serves /healthz (and /readyz if asked); ASan builds start slower.
  if (waitUntilServing(&pid_, port_, options_.wait_ready ? "/readyz" : "/healthz", 15'000, 10)) {
    return true;
  }
  kill();
  return false;
}

void SidecarProcess::restart() {
  kill();
  if (!start()) throw std::runtime_error("sidelock did not come back after a restart:\n" + logs());
}

void SidecarProcess::pause() {
  if (pid_ > 0 && !paused_) {
    ::kill(pid_, SIGSTOP);
    paused_ = true;
  }
}

void SidecarProcess::resume() {
  if (pid_ > 0 && paused_) {
    ::kill(pid_, SIGCONT);
    paused_ = false;
  }
}

SidecarProcess::~SidecarProcess() {
  kill();
  removeTree(dir_);
}

std::string SidecarProcess::logs() const {
  std::ifstream in(dir_ + "/sidelock.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int SidecarProcess::stop(int timeout_ms) {
  if (pid_ <= 0) return -1;
  resume();  // a stopped process would not act on SIGTERM
  ::kill(pid_, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      down_port_.hold(port_);
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill();
  return -1;
}

void SidecarProcess::kill() {
  if (pid_ <= 0) return;
  if (paused_) ::kill(pid_, SIGCONT);
  paused_ = false;
  ::kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  down_port_.hold(port_);
}

}  // namespace sidelock::testing
