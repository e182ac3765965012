// TLS to Redis with OpenSSL, non-blocking on the event loop: the TLS engine sits between two memory
// BIOs, the socket transport underneath carries the ciphertext, and the RESP connection above sees
// plaintext only (the pattern of h2o's and Node's TLS wraps). Certificate and host-name
// verification are always on; SNI is sent for host names; a node's last session is offered again
// on reconnect (resumption).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "config/config.h"
#include "event/scheduler.h"
#include "redis/transport.h"

struct ssl_ctx_st;
struct ssl_session_st;

namespace sidelock::backend {

/// The client-side TLS settings shared by every node: an SSL_CTX with the CA bundle (or the
/// system store) and the optional client certificate, loaded once.
class TlsClientContext {
 public:
  /// Fails with a message naming the file and OpenSSL's reason.
  static StatusOr<std::shared_ptr<TlsClientContext>> create(const config::TlsConfig& config);
  ~TlsClientContext();
  TlsClientContext(const TlsClientContext&) = delete;
  TlsClientContext& operator=(const TlsClientContext&) = delete;

  ssl_ctx_st* raw() const { return ctx_; }
  /// The name to verify and send as SNI for a node at `host` ("" config value: the host).
  const std::string& serverNameOverride() const { return server_name_; }

 private:
  TlsClientContext(ssl_ctx_st* ctx, std::string server_name)
      : ctx_(ctx), server_name_(std::move(server_name)) {}
  ssl_ctx_st* ctx_;
  std::string server_name_;
};

/// One node's resumable session, kept across its reconnects.
class TlsSessionCache {
 public:
  TlsSessionCache() = default;
  ~TlsSessionCache();
  TlsSessionCache(const TlsSessionCache&) = delete;
  TlsSessionCache& operator=(const TlsSessionCache&) = delete;

  /// Takes ownership of one reference.
  void store(ssl_session_st* session);
  ssl_session_st* get() const { return session_; }
  /// Handshakes that resumed the stored session (tests, diagnostics).
  int resumed = 0;

 private:
  ssl_session_st* session_ = nullptr;
};

/// Wraps `inner` (a socket transport) in TLS.
std::unique_ptr<RedisTransport> makeTlsTransport(std::unique_ptr<RedisTransport> inner,
                                                 event::Scheduler& scheduler,
                                                 std::shared_ptr<TlsClientContext> context,
                                                 std::shared_ptr<TlsSessionCache> sessions);

}  // namespace sidelock::backend
