#include "redis/tls_transport.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <utility>

#include "event/lifetime.h"

namespace sidelock::backend {
namespace {

// The oldest error OpenSSL queued (the root cause), or `fallback`; the queue is cleared.
std::string opensslError(const std::string& fallback) {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return fallback;
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  return buf;
}

bool isIpLiteral(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// Where OpenSSL's new-session callback finds the node's cache.
int sessionCacheIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// Where the verify callback leaves the subject of a certificate it refused (for the error).
int failedSubjectIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// Verification stays OpenSSL's; this only remembers which server certificate failed, since the
// handshake error alone does not say.
int onVerify(int ok, X509_STORE_CTX* store) {
  if (ok == 1) return ok;
  auto* ssl =
      static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  auto* subject = ssl != nullptr
                      ? static_cast<std::string*>(SSL_get_ex_data(ssl, failedSubjectIndex()))
                      : nullptr;
  if (subject != nullptr && subject->empty()) {
    if (X509* leaf = X509_STORE_CTX_get0_cert(store)) {
      char buf[256];
      X509_NAME_oneline(X509_get_subject_name(leaf), buf, sizeof(buf));
      *subject = buf;
    }
  }
  return ok;
}

// TLS 1.3 sends session tickets after the handshake: keep each new one for the next connect. A
// copy, because OpenSSL marks the connection's own session object unusable when that connection
// ends without a TLS shutdown (the server closed it, the link broke): just when we reconnect.
int onNewSession(SSL* ssl, SSL_SESSION* session) {
  auto* cache = static_cast<TlsSessionCache*>(SSL_get_ex_data(ssl, sessionCacheIndex()));
  if (cache != nullptr) {
    if (SSL_SESSION* copy = SSL_SESSION_dup(session)) cache->store(copy);
  }
  return 0;  // OpenSSL keeps its reference
}

class TlsTransport final : public RedisTransport, private RedisTransport::Handler {
 public:
  TlsTransport(std::unique_ptr<RedisTransport> inner, event::Scheduler& scheduler,
               std::shared_ptr<TlsClientContext> context, std::shared_ptr<TlsSessionCache> sessions)
      : inner_(std::move(inner)),
        scheduler_(scheduler),
        context_(std::move(context)),
        sessions_(std::move(sessions)) {}
  ~TlsTransport() override {
    close();
    if (ssl_ != nullptr) SSL_free(ssl_);  // frees both BIOs
  }

  void connect(const config::RedisNodeAddress& address, RedisTransport::Handler* handler) override {
    handler_ = handler;
    name_ = context_->serverNameOverride().empty() ? address.host : context_->serverNameOverride();
    inner_->connect(address, this);
  }

  bool write(std::string& bytes) override {
    if (closed_ || failed_) {
      bytes.clear();
      return false;
    }
    if (!established_) {  // the RESP layer does not wait for us: hold its bytes until then
      pending_plain_.append(bytes);
      bytes.clear();
      return true;
    }
    const bool ok = encrypt(bytes);  // false: nothing of it was flushed
    bytes.clear();
    return ok && flushNetwork();
  }

  bool readable() const override {
    return inner_->readable() || (ssl_ != nullptr && SSL_pending(ssl_) > 0);
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    inner_->close();
  }

 private:
  // ---- RedisTransport::Handler (the socket underneath) ----

  void onTransportConnected() override {
    if (!setUp()) return;
    handshake();
  }

  void onTransportData(const char* data, size_t len) override {
    if (closed_ || failed_) return;
    BIO_write(network_in_, data, static_cast<int>(len));
    if (!established_) {
      handshake();
      if (!established_ || closed_ || failed_) return;
    }
    decrypt();
  }

  void onTransportError(std::string reason) override { fail(std::move(reason)); }

  // ---- TLS ----

  bool setUp() {
    ssl_ = SSL_new(context_->raw());
    if (ssl_ == nullptr) {
      fail("TLS: " + opensslError("cannot create a session"));
      return false;
    }
    network_in_ = BIO_new(BIO_s_mem());
    network_out_ = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl_, network_in_, network_out_);
    SSL_set_connect_state(ssl_);
    SSL_set_ex_data(ssl_, sessionCacheIndex(), sessions_.get());
    SSL_set_ex_data(ssl_, failedSubjectIndex(), &failed_subject_);
    // Verify the name: DNS names against the certificate's names, IP literals against its IP
    // addresses. SNI only carries DNS names.
    bool ok = true;
    if (isIpLiteral(name_)) {
      ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), name_.c_str()) == 1;
    } else {
      ok = SSL_set1_host(ssl_, name_.c_str()) == 1 &&
           SSL_set_tlsext_host_name(ssl_, name_.c_str()) == 1;
    }
    if (!ok) {
      fail("TLS: cannot verify against \"" + name_ + "\": " + opensslError("bad name"));
      return false;
    }
    // A copy again: with TLS 1.2 the session offered becomes this connection's own, and OpenSSL
    // spoils it if the link ends without a TLS shutdown.
    if (sessions_ && sessions_->get() != nullptr) {
      if (SSL_SESSION* copy = SSL_SESSION_dup(sessions_->get())) {
        SSL_set_session(ssl_, copy);
        SSL_SESSION_free(copy);  // SSL_set_session took its own reference
      }
    }
    return true;
  }

  void handshake() {
    const int rc = SSL_do_handshake(ssl_);
    flushNetwork();
    if (rc == 1) {
      established_ = true;
      if (SSL_session_reused(ssl_) == 1 && sessions_) ++sessions_->resumed;
      if (!pending_plain_.empty()) {
        const bool ok = encrypt(pending_plain_);
        pending_plain_.clear();
        if (!ok) return;
        flushNetwork();
      }
      handler_->onTransportConnected();
      return;
    }
    const int err = SSL_get_error(ssl_, rc);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return;
    fail(handshakeFailure());
  }

  // Why the handshake failed, in words an operator can act on.
  std::string handshakeFailure() {
    const long verify = SSL_get_verify_result(ssl_);
    if (verify != X509_V_OK) {
      std::string reason =
          std::string("TLS certificate verify failed: ") + X509_verify_cert_error_string(verify);
      if (!failed_subject_.empty()) reason += " (server certificate " + failed_subject_ + ")";
      if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH) {
        reason += "; expected \"" + name_ + "\"";
      }
      ERR_clear_error();
      return reason;
    }
    return "TLS handshake failed: " + opensslError("connection closed during the handshake");
  }

  // Memory BIOs grow as needed, so every record is accepted; SSL_write_ex still writes one record
  // (16 KiB) at a time, hence the loop.
  bool encrypt(const std::string& plain) {
    size_t done = 0;
    while (done < plain.size()) {
      size_t written = 0;
      if (SSL_write_ex(ssl_, plain.data() + done, plain.size() - done, &written) != 1) {
        failLater("TLS write: " + opensslError("failed"));
        return false;
      }
      done += written;
    }
    return true;
  }

  void decrypt() {
    char buf[16 * 1024];
    while (!closed_ && !failed_) {
      const int n = SSL_read(ssl_, buf, sizeof(buf));
      if (n > 0) {
        handler_->onTransportData(buf, static_cast<size_t>(n));
        continue;
      }
      const int err = SSL_get_error(ssl_, n);
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) break;
      fail(err == SSL_ERROR_ZERO_RETURN ? "connection closed by the server (TLS close_notify)"
                                        : "TLS read: " + opensslError("failed"));
      return;
    }
    flushNetwork();  // TLS may answer on its own (key updates)
  }

  // Hands whatever TLS produced to the socket.
  /// Hands the encrypted bytes to the socket; false when it did not take them.
  bool flushNetwork() {
    if (closed_ || failed_) return false;
    const size_t pending = BIO_ctrl_pending(network_out_);
    if (pending == 0) return true;
    cipher_out_.resize(pending);
    const int n = BIO_read(network_out_, cipher_out_.data(), static_cast<int>(pending));
    cipher_out_.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return inner_->write(cipher_out_);
  }

  void fail(std::string reason) {
    if (closed_ || failed_) return;
    failed_ = true;
    inner_->close();
    handler_->onTransportError(std::move(reason));  // last: the handler may close us
  }

  // From inside write(): tell the handler on a later turn (RedisTransport contract).
  void failLater(std::string reason) {
    if (closed_ || failed_) return;
    failed_ = true;
    inner_->close();
    scheduler_.post(alive_.guarded([this, reason = std::move(reason)] {
      if (!closed_) handler_->onTransportError(reason);
    }));
  }

  std::unique_ptr<RedisTransport> inner_;
  event::Scheduler& scheduler_;
  event::LivenessToken alive_;  // guards posted callbacks
  std::shared_ptr<TlsClientContext> context_;
  std::shared_ptr<TlsSessionCache> sessions_;
  RedisTransport::Handler* handler_ = nullptr;  // the RESP connection above
  std::string name_;
  SSL* ssl_ = nullptr;
  BIO* network_in_ = nullptr;   // ciphertext from the server, owned by ssl_
  BIO* network_out_ = nullptr;  // ciphertext to the server, owned by ssl_
  std::string pending_plain_;   // written before the handshake finished
  std::string cipher_out_;
  std::string failed_subject_;  // filled by onVerify
  bool established_ = false;
  bool failed_ = false;
  bool closed_ = false;
};

}  // namespace

StatusOr<std::shared_ptr<TlsClientContext>> TlsClientContext::create(
    const config::TlsConfig& config) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return internalError("TLS: " + opensslError("cannot create a context"));
  auto owned = std::shared_ptr<TlsClientContext>(new TlsClientContext(ctx, config.server_name));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, onVerify);
  SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  const int loaded = config.ca_file.empty()
                         ? SSL_CTX_set_default_verify_paths(ctx)
                         : SSL_CTX_load_verify_locations(ctx, config.ca_file.c_str(), nullptr);
  if (loaded != 1) {
    return invalidArgument("backend.tls.ca_file: cannot load \"" + config.ca_file +
                           "\": " + opensslError("no certificates"));
  }
  if (!config.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, config.cert_file.c_str()) != 1) {
      return invalidArgument("backend.tls.cert_file: cannot load \"" + config.cert_file +
                             "\": " + opensslError("bad certificate"));
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, config.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
      return invalidArgument("backend.tls.key_file: cannot load \"" + config.key_file +
                             "\" (or it does not match cert_file): " + opensslError("bad key"));
    }
  }
  // Client-side session cache with our own store: one resumable session per node.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, onNewSession);
  return owned;
}

TlsClientContext::~TlsClientContext() { SSL_CTX_free(ctx_); }

TlsSessionCache::~TlsSessionCache() {
  if (session_ != nullptr) SSL_SESSION_free(session_);
}

void TlsSessionCache::store(ssl_session_st* session) {
  if (session_ != nullptr) SSL_SESSION_free(session_);
  session_ = session;
}

std::unique_ptr<RedisTransport> makeTlsTransport(std::unique_ptr<RedisTransport> inner,
                                                 event::Scheduler& scheduler,
                                                 std::shared_ptr<TlsClientContext> context,
                                                 std::shared_ptr<TlsSessionCache> sessions) {
  return std::make_unique<TlsTransport>(std::move(inner), scheduler, std::move(context),
                                        std::move(sessions));
}

}  // namespace sidelock::backend
