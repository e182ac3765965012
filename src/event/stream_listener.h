// Listening sockets (TCP "host:port" and Unix socket paths) and the client streams they accept,
// with every uv handle held by UvHandle (src/README.md, rule 3). The HTTP layer builds on these;
// nothing here knows about HTTP.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "event/uv_handle.h"

namespace sidelock::event {

/// One accepted client connection, TCP or Unix. Owns its handle; close() is idempotent and the
/// handle's memory is freed in the uv close callback.
class ClientStream {
 public:
  ClientStream() = default;
  ClientStream(const ClientStream&) = delete;
  ClientStream& operator=(const ClientStream&) = delete;

  uv_stream_t* get() const {
    if (tcp_) return reinterpret_cast<uv_stream_t*>(tcp_.get());
    if (pipe_) return reinterpret_cast<uv_stream_t*>(pipe_.get());
    return nullptr;
  }
  explicit operator bool() const { return get() != nullptr; }
  void close() {
    tcp_.close();
    pipe_.close();
  }

 private:
  friend class StreamListener;
  UvHandle<uv_tcp_t> tcp_;
  UvHandle<uv_pipe_t> pipe_;
};

/// Splits "host:port" / "[v6]:port" into a socket address. "localhost" means 127.0.0.1, an empty
/// host or "*" means all IPv4 interfaces. Port 0 asks the kernel for a free port.
Status parseHostPort(std::string_view host_port, sockaddr_storage* out);

/// Whether a Unix socket could be created at `path` as far as its directory goes: "" when it can,
/// else what is wrong with the parent directory (missing, not a directory, and with
/// `need_writable` also not writable by this process), with what to do about it. bind() would
/// fail on each with an errno (EACCES, ENOENT) that does not name the directory.
std::string unixSocketDirectoryProblem(const std::string& path, bool need_writable);

/// One listening socket. Not copyable; closes (and unlinks its Unix socket file) on destruction.
class StreamListener {
 public:
  /// Called on the loop for each pending connection; call accept() from it.
  using OnConnection = std::function<void()>;

  explicit StreamListener(uv_loop_t* loop) : loop_(loop) {}
  ~StreamListener() { close(); }
  StreamListener(const StreamListener&) = delete;
  StreamListener& operator=(const StreamListener&) = delete;

  /// Binds and listens on "host:port".
  Status listenTcp(std::string_view host_port, int backlog, OnConnection on_connection);
  /// Binds and listens on a Unix socket path. A stale socket file (a connection to it is
  /// refused) is removed first; a live one, one that cannot be probed, or a path that exists and
  /// is not a socket, is an error. The file is created private (umask 0177), given group `gid`
  /// (-1: unchanged) and mode `mode` before listening, and unlinked by close().
  Status listenUnix(const std::string& path, uint32_t mode, int backlog, OnConnection on_connection,
                    int64_t gid = -1);

  /// Accepts one pending connection into `out` (replacing what it held) and sets the new
  /// handle's data to `data`. TCP connections get TCP_NODELAY (small request/response traffic).
  Status accept(ClientStream& out, void* data);

  /// The bound TCP port (useful with port 0), or 0 when not listening on TCP.
  int port() const { return port_; }
  /// The Unix socket path, or "" when not listening on one.
  const std::string& unixPath() const { return unix_path_; }
  bool listening() const { return tcp_ || pipe_; }

  /// Stops listening. Idempotent.
  void close();

  /// Runs the connection callback; called by the uv listen callback.
  void notifyConnection();

 private:
  uv_stream_t* stream() const;
  Status startListening(int backlog);

  uv_loop_t* loop_;
  UvHandle<uv_tcp_t> tcp_;
  UvHandle<uv_pipe_t> pipe_;
  OnConnection on_connection_;
  int port_ = 0;
  std::string unix_path_;
};

}  // namespace sidelock::event
