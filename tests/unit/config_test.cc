#include "config/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

namespace sidelock::config {
namespace {

std::string errorOf(const std::string& yaml) {
  auto c = loadConfigFromString(yaml);
  EXPECT_FALSE(c.isOk()) << yaml;
  return c.isOk() ? "" : c.status().message();
}

TEST(ConfigTest, EmptyFileGivesDefaults) {
  auto c = loadConfigFromString("");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->listen.tcp, "127.0.0.1:7411");
  EXPECT_EQ(c->listen.unix_path, "/run/sidelock/sidelock.sock");
  EXPECT_EQ(c->listen.unix_mode, 0660u);
  EXPECT_EQ(c->backend.type, BackendType::kRedis);
  ASSERT_EQ(c->backend.nodes.size(), 1u);
  EXPECT_EQ(c->backend.nodes[0].toString(), "127.0.0.1:6379");
  EXPECT_EQ(c->locks.default_ttl_ms, 30000);
}

TEST(ConfigTest, ShippedExampleIsValid) {
  auto c = loadConfigFromFile(std::string(SIDELOCK_SOURCE_DIR) + "/config/sidelock.yaml");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->backend.redlock.node_timeout_ms, 50);
}

TEST(ConfigTest, ContractKeysParse) {
  auto c = loadConfigFromString(R"(
listen:
  tcp: "127.0.0.1:0"
  unix: ""
  unix_mode: "0600"
backend:
  type: redlock
  nodes: ["127.0.0.1:7001", "127.0.0.1:7002", "unix:/tmp/r.sock"]
locks:
  default_ttl_ms: 5000
log: {level: debug, format: json}
)");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->listen.unix_path, "");
  EXPECT_EQ(c->listen.unix_mode, 0600u);
  EXPECT_EQ(c->backend.type, BackendType::kRedlock);
  EXPECT_EQ(c->backend.nodes[2].toString(), "unix:/tmp/r.sock");
  EXPECT_EQ(c->locks.default_ttl_ms, 5000);
  EXPECT_EQ(c->log.level, LogLevel::kDebug);
  EXPECT_EQ(c->locks.retry_jitter_ms, 50) << "redlock's retry jitter reaches the waiter backoff";
  auto single = loadConfigFromString("backend:\n  type: redis\n");
  ASSERT_TRUE(single.isOk());
  EXPECT_EQ(single->locks.retry_jitter_ms, 0);
}

TEST(ConfigTest, ErrorsNameTheKey) {
  EXPECT_EQ(errorOf("listen:\n  tpc: x\n"), "listen.tpc: unknown key");
  EXPECT_EQ(errorOf("bogus: 1\n"), "bogus: unknown key");
  EXPECT_NE(errorOf("backend:\n  type: etcd\n").find("backend.type:"), std::string::npos);
  EXPECT_NE(errorOf("locks:\n  default_ttl_ms: -5\n").find("locks.default_ttl_ms:"),
            std::string::npos);
  EXPECT_NE(
      errorOf("locks:\n  default_ttl_ms: abc\n").find("locks.default_ttl_ms: must be an integer"),
      std::string::npos);
  EXPECT_NE(errorOf("backend:\n  nodes: [\"nohost\"]\n").find("backend.nodes[0]"),
            std::string::npos);
  EXPECT_NE(
      errorOf("backend:\n  type: redlock\n  nodes: [\"a:1\", \"b:2\"]\n").find("backend.nodes"),
      std::string::npos);
  EXPECT_NE(errorOf("backend:\n  type: redis\n  nodes: [\"a:1\", \"a:1\"]\n").find("duplicate"),
            std::string::npos);
  EXPECT_NE(errorOf("backend:\n  password: hunter2\n").find("backend.password"), std::string::npos);
  EXPECT_NE(errorOf("listen:\n  unix_mode: \"999\"\n").find("listen.unix_mode"), std::string::npos);
  EXPECT_NE(errorOf("listen: {tcp: \"\", unix: \"\"}\n").find("listen"), std::string::npos);
  EXPECT_NE(errorOf("log:\n  level: loud\n").find("log.level"), std::string::npos);
  EXPECT_NE(errorOf("locks: [1, 2]\n").find("locks: must be a mapping"), std::string::npos);
  EXPECT_NE(errorOf("listen: {tcp: \"x\"\n").find("YAML"), std::string::npos);
  EXPECT_NE(errorOf("locks:\n  default_ttl_ms: 900000\n").find("locks.default_ttl_ms"),
            std::string::npos);
}

TEST(ConfigTest, ConnectionBudgetKeysParseAndAreValidated) {
  auto defaults = loadConfigFromString("");
  ASSERT_TRUE(defaults.isOk());
  EXPECT_EQ(defaults->listen.max_connections_per_peer, 0);
  EXPECT_EQ(defaults->listen.max_stream_holds, 16384);
  auto c = loadConfigFromString("listen:\n  max_connections_per_peer: 64\n  max_stream_holds: 5000\n");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->listen.max_connections_per_peer, 64);
  EXPECT_EQ(c->listen.max_stream_holds, 5000);
  EXPECT_NE(errorOf("listen:\n  max_connections_per_peer: -1\n").find("listen.max_connections_per_peer"),
            std::string::npos);
  EXPECT_NE(errorOf("listen:\n  max_stream_holds: lots\n").find("listen.max_stream_holds"),
            std::string::npos);
}

TEST(ConfigTest, TlsKeysAreValidated) {
  auto c = loadConfigFromString(
      "backend:\n  tls:\n    enabled: true\n    server_name: redis.internal\n");
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_TRUE(c->backend.tls.enabled);
  EXPECT_TRUE(c->backend.tls.ca_file.empty()) << "default: the system store";
  EXPECT_EQ(c->backend.tls.server_name, "redis.internal");
  EXPECT_FALSE(loadConfigFromString("")->backend.tls.enabled);

  EXPECT_EQ(errorOf("backend:\n  tls:\n    verify: false\n"), "backend.tls.verify: unknown key")
      << "there is no switch to turn verification off";
  EXPECT_NE(errorOf("backend:\n  tls: {enabled: true, cert_file: /etc/hosts}\n")
                .find("backend.tls.key_file: cert_file and key_file go together"),
            std::string::npos);
  EXPECT_NE(errorOf("backend:\n  tls: {enabled: true, ca_file: /nonexistent/ca.pem}\n")
                .find("backend.tls.ca_file: cannot read \"/nonexistent/ca.pem\""),
            std::string::npos);
  EXPECT_NE(errorOf("backend:\n  tls: {ca_file: /etc/hosts}\n")
                .find("backend.tls.enabled: TLS settings are given but tls.enabled is false"),
            std::string::npos);
  EXPECT_NE(errorOf("backend:\n  nodes: [\"unix:/tmp/r.sock\"]\n  tls: {enabled: true}\n")
                .find("backend.tls.enabled: TLS needs host:port nodes"),
            std::string::npos);
}

TEST(ConfigTest, CredentialsComeFromEnvironmentOrFile) {
  setenv("SIDELOCK_TEST_USER", "app", 1);
  setenv("SIDELOCK_TEST_PASS", "from-env", 1);
  auto c = loadConfigFromString(
      "backend:\n  username_env: SIDELOCK_TEST_USER\n  password_env: SIDELOCK_TEST_PASS\n");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->backend.username, "app");
  EXPECT_EQ(c->backend.password, "from-env");

  std::string path = testing::TempDir() + "/sidelock-pass";
  std::ofstream(path) << "from-file\n";
  c = loadConfigFromString(
      "backend:\n  password_env: SIDELOCK_TEST_PASS\n  password_file: " + path + "\n");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->backend.password, "from-file");
  EXPECT_NE(errorOf("backend:\n  password_file: /nonexistent/x\n").find("backend.password_file"),
            std::string::npos);
  unsetenv("SIDELOCK_TEST_USER");
  unsetenv("SIDELOCK_TEST_PASS");
}

}  // namespace
}  // namespace sidelock::config
