#include "cli/sidecar_socket.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "common/pod_identity.h"

namespace sidelock::cli {

std::string SidecarEndpoint::describe() const {
  if (!socket_path.empty()) return "unix:" + socket_path;
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

RunEnvironment RunEnvironment::system() {
  RunEnvironment env;
  env.getenv = systemGetenv;
  env.socket_exists = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
  };
  env.host_name = systemHostName;
  return env;
}

std::string endpointUsage() {
  return std::string(
             "  --socket PATH    sidecar Unix socket (env SIDELOCK_SOCKET; default:\n"
             "                   ") +
         kDefaultSocketPath + " if it exists, else --addr " + kDefaultAddr +
         ")\n"
         "  --addr HOST:PORT sidecar TCP address (env SIDELOCK_ADDR)\n"
         "  (env SIDELOCK_AUTH_TOKEN: bearer token when the sidecar has auth.tokens)\n";
}

StatusOr<SidecarEndpoint> resolveEndpoint(std::optional<std::string> socket_flag,
                                          std::optional<std::string> addr_flag,
                                          const RunEnvironment& env) {
  if (socket_flag && addr_flag) return invalidArgument("give either --socket or --addr, not both");
  if (socket_flag && socket_flag->empty()) return invalidArgument("--socket needs a path");
  // Flags win over the environment, which wins over the defaults.
  if (!socket_flag && !addr_flag) {
    if (auto s = env.getenv("SIDELOCK_SOCKET")) {
      socket_flag = *s;
    } else if (auto a = env.getenv("SIDELOCK_ADDR")) {
      addr_flag = *a;
    } else if (env.socket_exists(kDefaultSocketPath)) {
      socket_flag = kDefaultSocketPath;
    } else {
      addr_flag = kDefaultAddr;
    }
  }
  SidecarEndpoint endpoint;
  if (socket_flag) {
    endpoint.socket_path = *socket_flag;
  } else {
    Status s = parseHostPort(*addr_flag, &endpoint.host, &endpoint.port);
    if (!s.isOk()) return invalidArgument("address: " + s.message());
  }
  return endpoint;
}

bool takeFlagValue(const std::vector<std::string>& args, size_t* i, std::string_view flag,
                   std::optional<std::string>* value, Status* error) {
  const std::string& arg = args[*i];
  if (arg == flag) {
    if (*i + 1 >= args.size()) {
      *error = invalidArgument(std::string(flag) + " needs a value");
      return true;
    }
    *value = args[++*i];
    return true;
  }
  if (arg.size() > flag.size() && arg.compare(0, flag.size(), flag) == 0 &&
      arg[flag.size()] == '=') {
    *value = arg.substr(flag.size() + 1);
    return true;
  }
  return false;
}

Status parseHostPort(std::string_view text, std::string* host, int* port) {
  std::string_view h;
  std::string_view p;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return invalidArgument("'" + std::string(text) + "' is not [IPV6]:PORT");
    }
    h = text.substr(1, close - 1);
    p = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return invalidArgument("'" + std::string(text) + "' is not HOST:PORT");
    }
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
    if (h.find(':') != std::string_view::npos) {
      return invalidArgument("'" + std::string(text) + "': write IPv6 addresses as [ADDR]:PORT");
    }
  }
  int value = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
  if (h.empty() || p.empty() || ec != std::errc() || end != p.data() + p.size() || value < 1 ||
      value > 65535) {
    return invalidArgument("'" + std::string(text) + "' is not HOST:PORT (port 1-65535)");
  }
  *host = std::string(h);
  *port = value;
  return Status::ok();
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

StatusOr<Fd> connectSidecar(const SidecarEndpoint& endpoint, int64_t timeout_ms) {
  auto connectOne = [timeout_ms](int family, const sockaddr* addr, socklen_t len) -> StatusOr<Fd> {
    Fd fd(socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return unavailable(std::string("socket: ") + strerror(errno));
    if (connect(fd.get(), addr, len) != 0) {
      if (errno != EINPROGRESS && errno != EAGAIN) return unavailable(strerror(errno));
      pollfd p{fd.get(), POLLOUT, 0};
      int r = poll(&p, 1, static_cast<int>(timeout_ms));
      if (r == 0) return unavailable("connect timed out");
      int err = 0;
      socklen_t err_len = sizeof(err);
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &err_len);
      if (r < 0 || err != 0) return unavailable(strerror(r < 0 ? errno : err));
    }
    return fd;
  };

  if (!endpoint.socket_path.empty()) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (endpoint.socket_path.size() >= sizeof(addr.sun_path)) {
      return unavailable("socket path too long");
    }
    memcpy(addr.sun_path, endpoint.socket_path.c_str(), endpoint.socket_path.size() + 1);
    return connectOne(AF_UNIX, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(endpoint.port);
  int gai = getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &res);
  if (gai != 0) return unavailable(gai_strerror(gai));
  Status last = unavailable("no address");
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    StatusOr<Fd> fd = connectOne(ai->ai_family, ai->ai_addr, ai->ai_addrlen);
    if (fd.isOk()) {
      freeaddrinfo(res);
      return fd;
    }
    last = fd.status();
  }
  freeaddrinfo(res);
  return last;
}

}  // namespace sidelock::cli
