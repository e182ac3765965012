#include "event/stream_listener.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace sidelock::event {
namespace {

std::string uvError(int rc) { return std::string(uv_err_name(rc)) + " (" + uv_strerror(rc) + ")"; }

void onConnectionCb(uv_stream_t* server, int status) {
  if (server->data == nullptr) return;
  auto* self = static_cast<StreamListener*>(server->data);
  // A failed accept-side event (EMFILE ...) is not actionable here; the next one may succeed.
  if (status < 0) return;
  self->notifyConnection();
}

std::string parentDirectory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

enum class SocketFileState { kStale, kLive, kUnknown };

// Whether something accepts connections on the Unix socket at `path` right now. Only a refused
// connection (ECONNREFUSED: a socket file nobody listens on) proves the file stale; any other
// failure (EACCES: somebody else's socket, EAGAIN: a full backlog) is kUnknown with `why` set,
// and the file is left alone.
SocketFileState probeUnixSocket(const std::string& path, std::string* why) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *why = std::string("socket: ") + std::strerror(errno);
    return SocketFileState::kUnknown;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int err = errno;
  ::close(fd);
  if (rc == 0) return SocketFileState::kLive;
  if (err == ECONNREFUSED || err == ENOENT) return SocketFileState::kStale;
  *why = std::strerror(err);
  return SocketFileState::kUnknown;
}

}  // namespace

Status parseHostPort(std::string_view host_port, sockaddr_storage* out) {
  size_t colon = host_port.rfind(':');
  if (colon == std::string_view::npos) {
    return invalidArgument("listen address \"" + std::string(host_port) + "\" must be host:port");
  }
  std::string host(host_port.substr(0, colon));
  std::string_view port_text = host_port.substr(colon + 1);
  int port = -1;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port < 0 || port > 65535) {
    return invalidArgument("listen address \"" + std::string(host_port) +
                           "\": port must be 0..65535");
  }
  *out = sockaddr_storage{};
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    if (uv_ip6_addr(host.c_str(), port, reinterpret_cast<sockaddr_in6*>(out)) != 0) {
      return invalidArgument("listen address \"" + std::string(host_port) + "\": bad IPv6 address");
    }
    return Status::ok();
  }
  if (host.empty() || host == "*") host = "0.0.0.0";
  if (host == "localhost") host = "127.0.0.1";
  if (uv_ip4_addr(host.c_str(), port, reinterpret_cast<sockaddr_in*>(out)) != 0) {
    return invalidArgument("listen address \"" + std::string(host_port) +
                           "\": host must be an IPv4 address, [IPv6] or localhost");
  }
  return Status::ok();
}

uv_stream_t* StreamListener::stream() const {
  if (tcp_) return reinterpret_cast<uv_stream_t*>(tcp_.get());
  if (pipe_) return reinterpret_cast<uv_stream_t*>(pipe_.get());
  return nullptr;
}

void StreamListener::notifyConnection() {
  if (on_connection_) on_connection_();
}

Status StreamListener::startListening(int backlog) {
  int rc = uv_listen(stream(), backlog, onConnectionCb);
  if (rc != 0) return unavailable("listen: " + uvError(rc));
  return Status::ok();
}

Status StreamListener::listenTcp(std::string_view host_port, int backlog,
                                 OnConnection on_connection) {
  if (listening()) return invalidArgument("listener already listening");
  sockaddr_storage addr;
  SIDELOCK_RETURN_IF_ERROR(parseHostPort(host_port, &addr));
  uv_tcp_t* t = tcp_.allocate(this);
  if (int rc = uv_tcp_init(loop_, t); rc != 0) {
    tcp_.discardUninitialised();
    return internalError("uv_tcp_init: " + uvError(rc));
  }
  if (int rc = uv_tcp_bind(t, reinterpret_cast<const sockaddr*>(&addr), 0); rc != 0) {
    tcp_.close();
    return unavailable("cannot bind " + std::string(host_port) + ": " + uvError(rc));
  }
  on_connection_ = std::move(on_connection);
  if (Status s = startListening(backlog); !s.isOk()) {
    tcp_.close();
    return Status(s.code(), std::string(host_port) + ": " + s.message());
  }
  sockaddr_storage bound{};
  int len = sizeof(bound);
  if (uv_tcp_getsockname(t, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
    port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  return Status::ok();
}

Status StreamListener::listenUnix(const std::string& path, uint32_t mode, int backlog,
                                  OnConnection on_connection, int64_t gid) {
  if (listening()) return invalidArgument("listener already listening");
  if (path.empty() || path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return invalidArgument("unix socket path \"" + path + "\" is empty or too long");
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return invalidArgument("unix socket path " + path + " exists and is not a socket");
    }
    std::string why;
    switch (probeUnixSocket(path, &why)) {
      case SocketFileState::kLive:
        return unavailable("unix socket " + path +
                           " is in use: another process accepts connections on it");
      case SocketFileState::kUnknown:
        return unavailable("unix socket " + path + " exists and cannot be probed (" + why +
                           "); not removing it: remove it by hand if nothing uses it");
      case SocketFileState::kStale:
        // A socket file left by a process that died: bind would fail with EADDRINUSE.
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
          return unavailable("cannot remove stale socket " + path + ": " + std::strerror(errno));
        }
        break;
    }
  }
  uv_pipe_t* p = pipe_.allocate(this);
  if (int rc = uv_pipe_init(loop_, p, 0); rc != 0) {
    pipe_.discardUninitialised();
    return internalError("uv_pipe_init: " + uvError(rc));
  }
  // bind() creates the file with 0777 & ~umask. Under umask 0177 it is 0600 (this user only)
  // until chown and chmod below give it the configured group and mode, so nobody is let in by a
  // lax umask in between. The umask is process-wide: this runs at start-up on the loop thread,
  // and nothing else creates files meanwhile (libuv's thread pool has no work queued).
  const mode_t old_umask = ::umask(0177);
  const int bind_rc = uv_pipe_bind(p, path.c_str());
  ::umask(old_umask);
  if (bind_rc != 0) {
    pipe_.close();
    // libuv's EACCES / ENOENT does not say that the directory is the problem.
    std::string why = unixSocketDirectoryProblem(path, /*need_writable=*/true);
    if (why.empty()) why = uvError(bind_rc);
    return unavailable("cannot bind unix socket " + path + ": " + why);
  }
  unix_path_ = path;
  if (gid >= 0 && ::chown(path.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(gid)) != 0) {
    int err = errno;
    close();
    return unavailable("cannot give unix socket " + path + " group " + std::to_string(gid) + ": " +
                       std::strerror(err));
  }
  if (::chmod(path.c_str(), static_cast<mode_t>(mode)) != 0) {
    int err = errno;
    close();
    return unavailable("cannot chmod unix socket " + path + ": " + std::strerror(err));
  }
  on_connection_ = std::move(on_connection);
  if (Status s = startListening(backlog); !s.isOk()) {
    close();
    return Status(s.code(), path + ": " + s.message());
  }
  return Status::ok();
}

std::string unixSocketDirectoryProblem(const std::string& path, bool need_writable) {
  const std::string dir = parentDirectory(path);
  const std::string what_to_do =
      " (create it, or set listen.unix to a path in an existing directory, or to \"\" to "
      "disable the Unix socket)";
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return "directory " + dir + " does not exist" + what_to_do;
    return "directory " + dir + " cannot be read: " + std::strerror(err);
  }
  if (!S_ISDIR(st.st_mode)) return dir + " is not a directory" + what_to_do;
  if (need_writable && ::access(dir.c_str(), W_OK | X_OK) != 0) {
    return "directory " + dir + " is not writable by this user (uid " +
           std::to_string(::geteuid()) + "): the socket cannot be created in it";
  }
  return "";
}

Status StreamListener::accept(ClientStream& out, void* data) {
  if (!listening()) return unavailable("not listening");
  out.close();
  int rc = 0;
  if (tcp_) {
    uv_tcp_t* t = out.tcp_.allocate(data);
    if (rc = uv_tcp_init(loop_, t); rc != 0) {
      out.tcp_.discardUninitialised();
      return internalError("uv_tcp_init: " + uvError(rc));
    }
    if (rc = uv_accept(stream(), reinterpret_cast<uv_stream_t*>(t)); rc != 0) {
      out.close();
      return unavailable("accept: " + uvError(rc));
    }
    uv_tcp_nodelay(t, 1);
    return Status::ok();
  }
  uv_pipe_t* p = out.pipe_.allocate(data);
  if (rc = uv_pipe_init(loop_, p, 0); rc != 0) {
    out.pipe_.discardUninitialised();
    return internalError("uv_pipe_init: " + uvError(rc));
  }
  if (rc = uv_accept(stream(), reinterpret_cast<uv_stream_t*>(p)); rc != 0) {
    out.close();
    return unavailable("accept: " + uvError(rc));
  }
  return Status::ok();
}

void StreamListener::close() {
  tcp_.close();
  if (pipe_) {
    pipe_.close();
    // Only remove the file we bound; it is a socket we created.
    if (!unix_path_.empty()) ::unlink(unix_path_.c_str());
  }
  unix_path_.clear();
  port_ = 0;
  // on_connection_ is kept: close() may run inside it, and the closed handle cannot call it again.
}

}  // namespace sidelock::event
