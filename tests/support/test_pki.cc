#include "support/test_pki.h"

#include <fstream>
#include <stdexcept>

#include "support/redis_server.h"

namespace sidelock::testing {

TestPki::TestPki() : dir_(makeTempDir("sidelock-pki")) {
  makeCa("ca");
  makeCa("other-ca");
  makeLeaf("server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost", 3);
  makeLeaf("named", "ca", "subjectAltName=DNS:redis.internal", 3);
  makeLeaf("expired", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost", -1);
  makeLeaf("client", "ca", "extendedKeyUsage=clientAuth", 3);
}

TestPki::~TestPki() { removeTree(dir_); }

void TestPki::run(const std::string& command) const {
  const std::string full = "cd '" + dir_ + "' && " + command + " >/dev/null 2>&1";
  if (std::system(full.c_str()) != 0) throw std::runtime_error("test PKI: failed: " + command);
}

void TestPki::makeCa(const std::string& name) const {
  run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout " + name +
      ".key -out " + name + ".crt -days 3 -subj /CN=sidelock-test-" + name);
}

// `days` -1 makes a certificate whose validity ended a day ago.
void TestPki::makeLeaf(const std::string& name, const std::string& ca,
                       const std::string& extensions, int days) const {
  std::ofstream(dir_ + "/" + name + ".ext") << extensions << "\n";
  run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout " + name +
      ".key -out " + name + ".csr -subj /CN=sidelock-test-" + name);
  run("openssl x509 -req -in " + name + ".csr -CA " + ca + ".crt -CAkey " + ca +
      ".key -CAcreateserial -days " + std::to_string(days) + " -extfile " + name + ".ext -out " +
      name + ".crt");
}

std::vector<std::string> redisTlsArgs(int tls_port, const std::string& cert, const std::string& key,
                                      const std::string& ca, bool require_client_cert) {
  return {"--tls-port",         std::to_string(tls_port),
          "--tls-cert-file",    cert,
          "--tls-key-file",     key,
          "--tls-ca-cert-file", ca,
          "--tls-auth-clients", require_client_cert ? "yes" : "no"};
}

}  // namespace sidelock::testing
