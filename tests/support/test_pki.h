// Certificates for TLS tests, made by the `openssl` command in a temp dir: a CA, server
// certificates for 127.0.0.1 (good, for another name, expired, signed by another CA) and a client
// certificate for mutual TLS. EC P-256 keys, so making them takes milliseconds.
#pragma once

#include <string>
#include <vector>

namespace sidelock::testing {

class TestPki {
 public:
  TestPki();  // throws std::runtime_error if openssl fails
  ~TestPki();
  TestPki(const TestPki&) = delete;
  TestPki& operator=(const TestPki&) = delete;

  const std::string& dir() const { return dir_; }
  std::string caCert() const { return dir_ + "/ca.crt"; }
  std::string otherCaCert() const { return dir_ + "/other-ca.crt"; }
  /// Server certificate (+ .key) valid for IP 127.0.0.1 and DNS localhost.
  std::string serverCert() const { return dir_ + "/server.crt"; }
  std::string serverKey() const { return dir_ + "/server.key"; }
  /// Valid only for DNS redis.internal (no IP address).
  std::string namedServerCert() const { return dir_ + "/named.crt"; }
  std::string namedServerKey() const { return dir_ + "/named.key"; }
  /// For 127.0.0.1, but expired yesterday.
  std::string expiredServerCert() const { return dir_ + "/expired.crt"; }
  std::string expiredServerKey() const { return dir_ + "/expired.key"; }
  /// A client certificate from the same CA (mutual TLS).
  std::string clientCert() const { return dir_ + "/client.crt"; }
  std::string clientKey() const { return dir_ + "/client.key"; }

 private:
  void run(const std::string& command) const;
  void makeCa(const std::string& name) const;
  void makeLeaf(const std::string& name, const std::string& ca, const std::string& extensions,
                int days) const;
  std::string dir_;
};

/// redis-server arguments serving TLS on `tls_port` with `cert`/`key`, trusting `ca` for client
/// certificates, which are required when `require_client_cert`. The plain port stays open for
/// the fixture's own checks.
std::vector<std::string> redisTlsArgs(int tls_port, const std::string& cert, const std::string& key,
                                      const std::string& ca, bool require_client_cert);

}  // namespace sidelock::testing
