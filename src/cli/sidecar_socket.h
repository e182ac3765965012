// The client side of a sidecar connection for the blocking CLI commands (`sidelock run`,
// `sidelock locks`): where the sidecar is (flags, then environment, then defaults), an owning file
// descriptor, and a connect with a timeout.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sidelock::cli {

inline constexpr const char* kDefaultSocketPath = "/run/sidelock/sidelock.sock";
inline constexpr const char* kDefaultAddr = "127.0.0.1:7411";

/// Where the sidecar listens: a Unix socket path, or host + port (exactly one is set).
struct SidecarEndpoint {
  std::string socket_path;
  std::string host;
  int port = 0;
  /// "unix:/run/sidelock/sidelock.sock" or "127.0.0.1:7411", for messages.
  std::string describe() const;
};

/// What parsing may look at besides argv, injectable for tests.
struct RunEnvironment {
  std::function<std::optional<std::string>(const char* name)> getenv;
  std::function<bool(const std::string& path)> socket_exists;
  /// gethostname(); "" if unknown. May be left empty (then nothing is known).
  std::function<std::string()> host_name;
  /// The process environment and the real filesystem.
  static RunEnvironment system();
};

/// --socket / --addr flags win over $SIDELOCK_SOCKET / $SIDELOCK_ADDR, which win over the default
/// socket (if it exists) and then the default address. Errors are kInvalidArgument.
StatusOr<SidecarEndpoint> resolveEndpoint(std::optional<std::string> socket_flag,
                                          std::optional<std::string> addr_flag,
                                          const RunEnvironment& env);

/// For options that take a value: "--ttl 500" or "--ttl=500". True if args[*i] is `flag` (then
/// *value is set, *i advanced past a separate value, or *error set when the value is missing).
bool takeFlagValue(const std::vector<std::string>& args, size_t* i, std::string_view flag,
                   std::optional<std::string>* value, Status* error);

/// The --socket / --addr / $SIDELOCK_AUTH_TOKEN lines of a command's --help.
std::string endpointUsage();

/// "HOST:PORT" or "[V6]:PORT" -> host, port.
Status parseHostPort(std::string_view text, std::string* host, int* port);

/// An owned file descriptor, closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

/// A non-blocking socket connected to `endpoint` within `timeout_ms` (per address tried);
/// kUnavailable with the reason otherwise.
StatusOr<Fd> connectSidecar(const SidecarEndpoint& endpoint, int64_t timeout_ms);

}  // namespace sidelock::cli
