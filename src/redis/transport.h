// The byte pipe under a Redis connection. The connection speaks RESP into write() and gets bytes
// back through Handler::onTransportData; it never sees the socket. SocketTransport carries the
// bytes on a libuv TCP or Unix stream; a TLS transport (OpenSSL memory BIOs between the socket and
// the codec) slots in under the same interface.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "config/config.h"
#include "event/scheduler.h"

struct uv_loop_s;

namespace sidelock::backend {

class RedisTransport {
 public:
  /// Callbacks from the transport; never called from inside connect()/write()/close().
  class Handler {
   public:
    virtual ~Handler() = default;
    virtual void onTransportConnected() = 0;
    virtual void onTransportData(const char* data, size_t len) = 0;
    /// Connect failure or a broken link ("connect 127.0.0.1:6379: connection refused"). The
    /// transport is dead afterwards: close() it and make a new one to reconnect.
    virtual void onTransportError(std::string reason) = 0;
  };

  virtual ~RedisTransport() = default;

  /// Resolves the address (off the loop thread for host names) and connects.
  virtual void connect(const config::RedisNodeAddress& address, Handler* handler) = 0;
  /// Sends every byte of `bytes` in order and leaves `bytes` empty (its capacity may be kept for
  /// reuse). Bytes written before the connection is up are an error (the caller waits).
  /// Answers whether it took them: false when none of them can reach the server (closed, failed,
  /// not connected, or the write failed before a byte went out), so the caller knows those
  /// requests cannot have run. Bytes held for later (TLS before its handshake) count as taken.
  /// A failure found here is reported on a later turn all the same.
  [[nodiscard]] virtual bool write(std::string& bytes) = 0;
  /// Bytes are waiting to be read right now (a reply may sit in the socket while a timer fires
  /// first: libuv runs timers before it polls).
  virtual bool readable() const = 0;
  /// Stops all I/O at once; no handler call follows. Idempotent; the destructor closes too.
  virtual void close() = 0;
};

/// Plain TCP (TCP_NODELAY, keepalive) or Unix-socket transport on the libuv loop.
std::unique_ptr<RedisTransport> makeSocketTransport(uv_loop_s* loop, event::Scheduler& scheduler);

}  // namespace sidelock::backend
