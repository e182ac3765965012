#include "config/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>
#include <vector>

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
  EXPECT_NE(errorOf("locks:\n  default_ttl_ms: abc\n")
                .find("locks.default_ttl_ms: must be milliseconds or a duration"),
            std::string::npos);
  EXPECT_NE(errorOf("locks:\n  max_waiters: abc\n").find("locks.max_waiters: must be an integer"),
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
  // A key given twice: yaml-cpp would keep the first and ignore the later override in silence.
  EXPECT_EQ(errorOf("locks:\n  default_ttl_ms: 1234\nlog:\n  level: info\nlocks:\n  "
                    "default_ttl_ms: 5000\n"),
            "locks: given twice (line 5); give each key once");
  EXPECT_EQ(errorOf("listen:\n  tcp: \"127.0.0.1:1\"\n  tcp: \"127.0.0.1:2\"\n"),
            "listen.tcp: given twice (line 3); give each key once");
  EXPECT_EQ(errorOf("elections:\n  - name: a\n    ttl_ms: 1\n    ttl_ms: 2\n"),
            "elections[0].ttl_ms: given twice (line 4); give each key once");
}

TEST(ConfigTest, MillisecondKeysTakeDurationsWithUnits) {
  auto c = loadConfigFromString(
      "listen:\n  header_timeout_ms: 500ms\nbackend:\n  connect_timeout_ms: \"2s\"\n"
      "locks:\n  default_ttl_ms: 30s\n  max_wait_ms: 5m\n  default_max_hold_ms: 1h\n"
      "  retry_min_ms: 2\nshutdown:\n  grace_ms: 10s\n");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->listen.header_timeout_ms, 500);
  EXPECT_EQ(c->backend.connect_timeout_ms, 2000);
  EXPECT_EQ(c->locks.default_ttl_ms, 30'000);
  EXPECT_EQ(c->locks.max_wait_ms, 300'000);
  EXPECT_EQ(c->locks.default_max_hold_ms, 3'600'000);
  EXPECT_EQ(c->locks.retry_min_ms, 2);
  EXPECT_EQ(c->shutdown.grace_ms, 10'000);

  // Bad input names the key and says what is wrong; a range check shows the milliseconds.
  EXPECT_EQ(errorOf("locks:\n  default_ttl_ms: 30x\n"),
            "locks.default_ttl_ms: must be milliseconds or a duration with a unit (500ms, 30s, "
            "5m, 2h): '30x': unknown unit (use ms, s, m or h)");
  EXPECT_NE(errorOf("locks:\n  default_ttl_ms: 1.5s\n").find("locks.default_ttl_ms: "),
            std::string::npos);
  EXPECT_NE(errorOf("locks:\n  default_ttl_ms: -5s\n").find("not a duration"), std::string::npos);
  EXPECT_EQ(errorOf("locks:\n  default_ttl_ms: 700h\n"),
            "locks.default_ttl_ms: must be between 1 and 604800000, got 700h (2520000000 ms)");
  EXPECT_EQ(errorOf("locks:\n  default_ttl_ms: -5\n"),
            "locks.default_ttl_ms: must be between 1 and 604800000, got -5");
  // Counts are not durations.
  EXPECT_NE(errorOf("listen:\n  max_connections: 5s\n").find("listen.max_connections: must be an "
                                                             "integer"),
            std::string::npos);

  // Every *_ms key of the shipped example takes a unit: its values written as "<N>ms" load.
  std::ifstream in(std::string(SIDELOCK_SOURCE_DIR) + "/config/sidelock.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string with_units;
  int keys = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    size_t colon = line.find(':');
    size_t hash = line.find('#');
    bool ms_key = colon != std::string::npos && (hash == std::string::npos || hash > colon) &&
                  line.find("_ms") != std::string::npos && line.find("_ms") < colon;
    if (ms_key) {
      size_t digits = line.find_first_of("0123456789", colon);
      size_t digits_end = line.find_first_not_of("0123456789", digits);
      if (digits_end == std::string::npos) digits_end = line.size();
      line.insert(digits_end, "ms");
      ++keys;
    }
    with_units += line + "\n";
  }
  EXPECT_GE(keys, 18);
  auto shipped = loadConfigFromString(with_units);
  ASSERT_TRUE(shipped.isOk()) << shipped.status().toString() << "\n" << with_units;
  EXPECT_EQ(shipped->locks.max_hold_ms_limit, 86'400'000);
}

TEST(ConfigTest, DaprSectionParsesAndIsValidated) {
  auto defaults = loadConfigFromString("");
  ASSERT_TRUE(defaults.isOk());
  EXPECT_TRUE(defaults->dapr.enabled);
  EXPECT_EQ(defaults->dapr.stores, std::vector<std::string>{"*"});
  auto c = loadConfigFromString("dapr:\n  enabled: false\n  stores: [lockstore, redisStore]\n");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_FALSE(c->dapr.enabled);
  EXPECT_EQ(c->dapr.stores, (std::vector<std::string>{"lockstore", "redisStore"}));
  EXPECT_EQ(errorOf("dapr:\n  stores: []\n").find("dapr.stores"), 0u);
  EXPECT_EQ(errorOf("dapr:\n  secret: x\n"), "dapr.secret: unknown key");
  EXPECT_EQ(defaults->dapr.app_id, "sidelock");
  auto app = loadConfigFromString("dapr:\n  app_id: orders-svc_2\n");
  ASSERT_TRUE(app.isOk()) << app.status().toString();
  EXPECT_EQ(app->dapr.app_id, "orders-svc_2");
  for (const char* bad : {"\"\"", "orders.svc", "\"a b\"", "x/y"}) {
    EXPECT_EQ(errorOf(std::string("dapr:\n  app_id: ") + bad + "\n").find("dapr.app_id: must be"),
              0u)
        << bad;
  }
  EXPECT_EQ(errorOf("dapr:\n  app_id: " + std::string(64, 'a') + "\n").find("dapr.app_id"), 0u);
  setenv("SIDELOCK_TEST_DAPR_SECRET", "short", 1);
  EXPECT_NE(errorOf("dapr:\n  owner_secret_env: SIDELOCK_TEST_DAPR_SECRET\n")
                .find("at least 16 characters"),
            std::string::npos);
  setenv("SIDELOCK_TEST_DAPR_SECRET", "long-enough-secret-0123", 1);
  auto secret = loadConfigFromString("dapr:\n  owner_secret_env: SIDELOCK_TEST_DAPR_SECRET\n");
  ASSERT_TRUE(secret.isOk());
  EXPECT_EQ(secret->dapr.owner_secret, "long-enough-secret-0123");
  unsetenv("SIDELOCK_TEST_DAPR_SECRET");
}

TEST(ConfigTest, ConnectionBudgetKeysParseAndAreValidated) {
  auto defaults = loadConfigFromString("");
  ASSERT_TRUE(defaults.isOk());
  EXPECT_EQ(defaults->listen.max_connections_per_peer, 0);
  EXPECT_EQ(defaults->listen.max_stream_holds, 16384);
  auto c =
      loadConfigFromString("listen:\n  max_connections_per_peer: 64\n  max_stream_holds: 5000\n");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->listen.max_connections_per_peer, 64);
  EXPECT_EQ(c->listen.max_stream_holds, 5000);
  EXPECT_NE(
      errorOf("listen:\n  max_connections_per_peer: -1\n").find("listen.max_connections_per_peer"),
      std::string::npos);
  EXPECT_NE(errorOf("listen:\n  max_stream_holds: lots\n").find("listen.max_stream_holds"),
            std::string::npos);
}

TEST(ConfigTest, RequestIdByteBoundParsesAndIsValidated) {
  auto defaults = loadConfigFromString("");
  ASSERT_TRUE(defaults.isOk());
  EXPECT_EQ(defaults->locks.max_request_id_bytes, 16 << 20) << "fits under the chart's 128Mi";
  auto c = loadConfigFromString("locks:\n  max_request_id_bytes: 1048576\n");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->locks.max_request_id_bytes, 1 << 20);
  EXPECT_NE(errorOf("locks:\n  max_request_id_bytes: -1\n").find("locks.max_request_id_bytes"),
            std::string::npos);
}

TEST(ConfigTest, HolderTopNParsesAndIsValidated) {
  auto defaults = loadConfigFromString("");
  ASSERT_TRUE(defaults.isOk());
  EXPECT_EQ(defaults->metrics.holder_top_n, 10);
  auto c = loadConfigFromString("metrics:\n  holder_top_n: 0\n");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->metrics.holder_top_n, 0) << "0: only holder=\"other\"";
  EXPECT_NE(errorOf("metrics:\n  holder_top_n: 101\n").find("metrics.holder_top_n"),
            std::string::npos);
  EXPECT_NE(errorOf("metrics:\n  holder_top_n: -1\n").find("metrics.holder_top_n"),
            std::string::npos);
  EXPECT_NE(errorOf("metrics:\n  holders: 5\n").find("metrics.holders: unknown key"),
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

TEST(ConfigTest, AccessControlKeys) {
  setenv("SIDELOCK_TEST_API_TOKENS", "abcdefghijklmnopqrstuvwxyz012345 prefixes=orders-", 1);
  auto c = loadConfigFromString(R"(
listen:
  admin: "0.0.0.0:7412"
  unix_group: "0"
  unix_allowed_uids: [1000, "0"]
  allowed_origins: ["HTTP://LocalHost:3000", "https://app.example"]
  allowed_hosts: ["SideLock", "[::1]"]
auth:
  tokens_env: SIDELOCK_TEST_API_TOKENS
  unix_requires_token: true
)");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->listen.unix_gid, 0);
  EXPECT_EQ(c->listen.unix_allowed_uids, (std::vector<uint32_t>{1000, 0}));
  EXPECT_EQ(c->listen.allowed_origins,
            (std::vector<std::string>{"http://localhost:3000", "https://app.example"}));
  EXPECT_EQ(c->listen.allowed_hosts, (std::vector<std::string>{"sidelock", "[::1]"}));
  EXPECT_TRUE(c->auth.unix_requires_token);
  ASSERT_EQ(c->auth.token_entries.size(), 1u);
  EXPECT_EQ(c->auth.token_entries[0].prefixes, std::vector<std::string>{"orders-"});
  EXPECT_TRUE(c->auth.admin_token_entries.empty());

  auto defaults = loadConfigFromString("");
  ASSERT_TRUE(defaults.isOk());
  EXPECT_EQ(defaults->listen.unix_gid, -1);
  EXPECT_TRUE(defaults->auth.token_entries.empty());
  unsetenv("SIDELOCK_TEST_API_TOKENS");
}

TEST(ConfigTest, AccessControlErrorsNameTheKey) {
  EXPECT_NE(errorOf("listen:\n  unix_group: no-such-group-here\n")
                .find("listen.unix_group: no such group"),
            std::string::npos);
  EXPECT_NE(errorOf("listen:\n  unix_allowed_uids: [no-such-user-here]\n")
                .find("listen.unix_allowed_uids[0]"),
            std::string::npos);
  EXPECT_NE(
      errorOf("listen:\n  unix_allowed_uids: 5\n").find("listen.unix_allowed_uids: must be a list"),
      std::string::npos);
  EXPECT_NE(errorOf("listen:\n  unix: \"\"\n  unix_allowed_uids: [5]\n")
                .find("listen.unix_allowed_uids: is set but listen.unix and listen.grpc_unix are "
                      "empty"),
            std::string::npos);
  {
    // The gRPC Unix socket alone is enough for the uid rule (it applies there too).
    auto grpc_only = loadConfigFromString(
        "listen:\n  unix: \"\"\n  grpc_unix: \"/tmp/sl-grpc-only.sock\"\n"
        "  unix_allowed_uids: [5]\n");
    ASSERT_TRUE(grpc_only.isOk()) << grpc_only.status().toString();
    EXPECT_EQ(grpc_only->listen.unix_allowed_uids, (std::vector<uint32_t>{5}));
  }
  for (const char* bad : {"localhost:3000", "http://localhost:3000/", "ftp://x", "http://a b",
                          "http://x:99999x", "*"}) {
    EXPECT_NE(errorOf(std::string("listen:\n  allowed_origins: [\"") + bad + "\"]\n")
                  .find("listen.allowed_origins[0]: must be an origin"),
              std::string::npos)
        << bad;
  }
  for (const char* bad : {"sidelock:7411", "*.example", "a/b", ""}) {
    EXPECT_NE(errorOf(std::string("listen:\n  allowed_hosts: [\"") + bad + "\"]\n")
                  .find("listen.allowed_hosts[0]"),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(errorOf("auth:\n  unix_requires_token: true\n").find("auth.unix_requires_token"),
            std::string::npos);
  EXPECT_NE(
      errorOf("auth:\n  tokens_file: /nonexistent/tokens\n").find("auth.tokens_file: cannot read"),
      std::string::npos);
  EXPECT_NE(errorOf("auth:\n  admin_tokens_env: X\n")
                .find("auth.admin_tokens_env: is set but listen.admin"),
            std::string::npos);
  EXPECT_NE(errorOf("auth:\n  token: abc\n").find("auth.token: unknown key"), std::string::npos);
  setenv("SIDELOCK_TEST_BAD_TOKENS", "short", 1);
  const std::string message = errorOf("auth:\n  tokens_env: SIDELOCK_TEST_BAD_TOKENS\n");
  EXPECT_NE(message.find("auth.tokens_env (SIDELOCK_TEST_BAD_TOKENS) line 1"), std::string::npos)
      << message;
  EXPECT_EQ(message.find("short"), std::string::npos) << "never echo a token";
  unsetenv("SIDELOCK_TEST_BAD_TOKENS");
}

TEST(ConfigTest, GrpcListenKeys) {
  auto c = loadConfigFromString(R"(
listen:
  grpc: "127.0.0.1:50001"
  grpc_unix: /tmp/sidelock-grpc.sock
  grpc_limits:
    max_concurrent_streams: 10
    max_message_bytes: 65536
    max_header_list_bytes: 8192
    idle_timeout_ms: 5s
    write_timeout_ms: 1000
)");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->listen.grpc, "127.0.0.1:50001");
  EXPECT_EQ(c->listen.grpc_unix, "/tmp/sidelock-grpc.sock");
  EXPECT_EQ(c->listen.grpc_limits.max_concurrent_streams, 10);
  EXPECT_EQ(c->listen.grpc_limits.max_message_bytes, 65536);
  EXPECT_EQ(c->listen.grpc_limits.max_header_list_bytes, 8192);
  EXPECT_EQ(c->listen.grpc_limits.idle_timeout_ms, 5000);
  EXPECT_EQ(c->listen.grpc_limits.write_timeout_ms, 1000);

  auto defaults = loadConfigFromString("");
  ASSERT_TRUE(defaults.isOk());
  EXPECT_EQ(defaults->listen.grpc, "");  // off unless configured
  EXPECT_EQ(defaults->listen.grpc_unix, "");
  EXPECT_EQ(defaults->listen.grpc_limits.max_message_bytes, 4 * 1024 * 1024);
  EXPECT_EQ(defaults->listen.grpc_limits.max_concurrent_streams, 100);

  // gRPC alone is a whole sidecar (a Dapr app on a gRPC-only SDK); nothing at all is not.
  auto grpc_only = loadConfigFromString("listen: {tcp: \"\", unix: \"\", grpc: \"127.0.0.1:50001\"}\n");
  ASSERT_TRUE(grpc_only.isOk()) << grpc_only.status().toString();
  EXPECT_TRUE(grpc_only->listen.tcp.empty() && grpc_only->listen.unix_path.empty());
  EXPECT_TRUE(
      loadConfigFromString("listen: {tcp: \"\", unix: \"\", grpc_unix: /tmp/g.sock}\n").isOk());
  EXPECT_NE(errorOf("listen: {tcp: \"\", unix: \"\"}\n").find("listen.grpc_unix"),
            std::string::npos);
  EXPECT_NE(errorOf("listen:\n  grpc: \"nohost\"\n").find("listen.grpc"), std::string::npos);
  EXPECT_NE(errorOf("listen:\n  grpc: \"127.0.0.1:7411\"\n").find("listen.grpc: must differ"),
            std::string::npos);
  EXPECT_NE(errorOf("listen:\n  grpc_unix: relative.sock\n").find("listen.grpc_unix: must be"),
            std::string::npos);
  EXPECT_NE(errorOf("listen:\n  grpc_unix: /run/sidelock/sidelock.sock\n")
                .find("listen.grpc_unix: must differ from listen.unix"),
            std::string::npos);
  EXPECT_NE(errorOf("listen:\n  grpc_limits:\n    max_concurrent_streams: 0\n")
                .find("listen.grpc_limits.max_concurrent_streams"),
            std::string::npos);
  EXPECT_NE(errorOf("listen:\n  grpc_limits:\n    max_message_bytes: 999999999\n")
                .find("listen.grpc_limits.max_message_bytes"),
            std::string::npos);
  EXPECT_NE(errorOf("listen:\n  grpc_limits:\n    streams: 3\n")
                .find("listen.grpc_limits.streams: unknown key"),
            std::string::npos);
}

TEST(ConfigTest, SentinelKeysParse) {
  setenv("SIDELOCK_TEST_SENTINEL_PASS", "s3cret", 1);
  auto c = loadConfigFromString(R"(
backend:
  type: sentinel
  nodes: ["10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"]
  sentinel:
    master_name: locks
    wait_replicas: 1
    password_env: SIDELOCK_TEST_SENTINEL_PASS
)");
  unsetenv("SIDELOCK_TEST_SENTINEL_PASS");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->backend.type, BackendType::kSentinel);
  EXPECT_EQ(c->backend.nodes.size(), 3u);
  EXPECT_EQ(c->backend.sentinel.master_name, "locks");
  EXPECT_EQ(c->backend.sentinel.wait_replicas, 1);
  EXPECT_EQ(c->backend.sentinel.password, "s3cret");
  EXPECT_TRUE(c->backend.sentinel.username.empty());
  EXPECT_TRUE(c->backend.password.empty()) << "sentinel credentials are not the node's";
}

TEST(ConfigTest, SentinelCombinationsAreValidated) {
  const std::string sentinels = "  nodes: [\"127.0.0.1:26379\"]\n";
  EXPECT_NE(errorOf("backend:\n  type: sentinel\n" + sentinels)
                .find("backend.sentinel.master_name: required for backend.type sentinel"),
            std::string::npos);
  EXPECT_NE(errorOf("backend:\n  type: sentinel\n  sentinel: {master_name: m}\n")
                .find("backend.nodes: type sentinel needs the sentinels"),
            std::string::npos);
  EXPECT_NE(errorOf("backend:\n  type: redis\n  sentinel: {master_name: m}\n")
                .find("backend.sentinel.master_name: only applies to backend.type sentinel"),
            std::string::npos);
  EXPECT_NE(errorOf("backend:\n  type: redlock\n  nodes: [\"a:1\", \"b:1\", \"c:1\"]\n"
                    "  sentinel:\n    wait_replicas: 1\n")
                .find("backend.sentinel.wait_replicas: only applies to backend.type sentinel"),
            std::string::npos);
  EXPECT_NE(errorOf("backend:\n  type: sentinel\n" + sentinels +
                    "  sentinel: {master_name: m, wait_replicas: -1}\n")
                .find("backend.sentinel.wait_replicas: must be between 0 and 100"),
            std::string::npos);
  EXPECT_NE(errorOf("backend:\n  type: sentinel\n" + sentinels +
                    "  sentinel: {master_name: m, replicas: 1}\n")
                .find("backend.sentinel.replicas: unknown key"),
            std::string::npos);
  EXPECT_NE(errorOf("backend:\n  type: sentinel\n" + sentinels +
                    "  sentinel: {master_name: m, password_file: /nonexistent/x}\n")
                .find("backend.sentinel.password_file: cannot read"),
            std::string::npos);
  setenv("SIDELOCK_TEST_SENTINEL_USER", "ops", 1);
  EXPECT_NE(errorOf("backend:\n  type: sentinel\n" + sentinels +
                    "  sentinel: {master_name: m, username_env: SIDELOCK_TEST_SENTINEL_USER, "
                    "password_env: SIDELOCK_TEST_UNSET}\n")
                .find("backend.sentinel.password_env: a sentinel username is set but no password"),
            std::string::npos);
  unsetenv("SIDELOCK_TEST_SENTINEL_USER");
  EXPECT_NE(errorOf("backend:\n  type: sentinel\n  nodes: [\"unix:/tmp/s.sock\"]\n"
                    "  sentinel: {master_name: m}\n  tls: {enabled: true}\n")
                .find("backend.tls.enabled: TLS needs host:port nodes"),
            std::string::npos)
      << "TLS reaches the sentinels too";
  EXPECT_NE(errorOf("backend:\n  type: etcd\n").find("sentinel"), std::string::npos);
}

TEST(ConfigTest, IdentityDefaultsToPodNameThenHostName) {
  setenv("POD_NAME", "web-7d9f-abcde", 1);
  auto c = loadConfigFromString("");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->identity, "web-7d9f-abcde");
  EXPECT_TRUE(c->elections.empty());
  c = loadConfigFromString("identity: \"\"\n");  // "" (an unset template value): the default
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->identity, "web-7d9f-abcde");
  c = loadConfigFromString("identity: pod-a\n");  // the key wins
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->identity, "pod-a");
  unsetenv("POD_NAME");
  c = loadConfigFromString("");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_EQ(c->identity, host);
  // A POD_NAME no candidate may have names where it came from.
  setenv("POD_NAME", std::string(300, 'p').c_str(), 1);
  EXPECT_EQ(errorOf(""),
            "identity: candidate is 300 bytes long; the limit is 256 (from $POD_NAME or the host "
            "name: set identity)");
  unsetenv("POD_NAME");
}

TEST(ConfigTest, ElectionsParseWithDefaultsAndEnvironment) {
  setenv("SIDELOCK_TEST_POD_IP", "10.0.0.7", 1);
  auto c = loadConfigFromString(R"(
identity: pod-a
locks: {default_ttl_ms: 15000}
elections:
  - name: scheduler
    value: "${SIDELOCK_TEST_POD_IP}:8080"
    ttl_ms: 10s
  - {name: "cron.nightly"}
  - {name: costs, value: "$$5 and $HOME and $ alone"}
)");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->identity, "pod-a");
  ASSERT_EQ(c->elections.size(), 3u);
  EXPECT_EQ(c->elections[0].name, "scheduler");
  EXPECT_EQ(c->elections[0].value, "10.0.0.7:8080");
  EXPECT_EQ(c->elections[0].ttl_ms, 10000);
  EXPECT_EQ(c->elections[1].name, "cron.nightly");
  EXPECT_EQ(c->elections[1].value, "");
  EXPECT_EQ(c->elections[1].ttl_ms, 15000);  // locks.default_ttl_ms
  // $$ is one $; a $ before anything but { or $ stays as written.
  EXPECT_EQ(c->elections[2].value, "$5 and $HOME and $ alone");
  unsetenv("SIDELOCK_TEST_POD_IP");
  c = loadConfigFromString("elections: []\n");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_TRUE(c->elections.empty());
}

TEST(ConfigTest, ElectionErrorsNameTheKey) {
  unsetenv("SIDELOCK_TEST_UNSET");
  setenv("SIDELOCK_TEST_BIG", std::string(4000, 'v').c_str(), 1);
  const std::string big(4097, 'v');
  // {the YAML under `identity: pod-a`, the error}
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"elections: {name: a}",
       "elections: must be a list of {name, value, ttl_ms} (e.g. [{name: scheduler}])"},
      {"elections: [scheduler]", "elections[0]: must be a mapping {name, value, ttl_ms}"},
      {"elections: [{value: x}]", "elections[0].name: required: the election's name"},
      {"elections: [{name: \"a b\"}]",
       "elections[0].name: the lock name has 0x20 at byte 2; lock names are A-Z a-z 0-9 and - _ "
       ". : @ ~ (elections are named like locks)"},
      {"elections: [{name: a}, {name: b}, {name: a}]", "elections[2].name: \"a\" is listed twice"},
      {"elections: [{name: a, wait_ms: 5}]", "elections[0].wait_ms: unknown key"},
      {"elections: [{name: a, ttl_ms: 0}]",
       "elections[0].ttl_ms: must be between 1 and 600000, got 0"},
      {"locks: {max_ttl_ms: 20000, default_ttl_ms: 5000}\nelections: [{name: a, ttl_ms: 30s}]",
       "elections[0].ttl_ms: must be between 1 and 20000, got 30s (30000 ms)"},
      {"elections: [{name: a, value: \"${SIDELOCK_TEST_UNSET}:8080\"}]",
       "elections[0].value: the environment variable SIDELOCK_TEST_UNSET is not set"},
      {"elections: [{name: a, value: \"${POD_IP\"}]",
       "elections[0].value: \"${\" without its \"}\" (write $$ for a literal $)"},
      {"elections: [{name: a, value: \"${1X}\"}]",
       "elections[0].value: \"${1X}\" is not an environment variable name (letters, digits and "
       "_)"},
      {"elections: [{name: a, value: \"" + big + "\"}]",
       "elections[0].value: is 4097 bytes long (after ${VAR} expansion); the limit is 4096"},
      {"elections: [{name: a, value: \"${SIDELOCK_TEST_BIG}${SIDELOCK_TEST_BIG}\"}]",
       "elections[0].value: is 8000 bytes long (after ${VAR} expansion); the limit is 4096"},
  };
  for (const auto& [yaml, error] : cases) EXPECT_EQ(errorOf("identity: pod-a\n" + yaml), error);
  unsetenv("SIDELOCK_TEST_BIG");
  EXPECT_EQ(errorOf("identity: \"pod\\ta\"\n"),
            "identity: candidate must be printable ASCII (0x20..0x7e)");
}

TEST(ConfigTest, ElectionHealthAndHealthLimits) {
  auto c = loadConfigFromString(R"(identity: pod-a
health: {allowed_ports: [8080, 9090], max_probes: 3}
elections:
  - name: scheduler
    health: {url: "http://127.0.0.1:8080/healthz", interval_ms: 1s, failures: 2, grace_ms: 30s}
  - name: cron
    health: {url: "http://localhost:9090"}
  - name: plain
)");
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->health.allowed_ports, (std::vector<int>{8080, 9090}));
  EXPECT_EQ(c->health.max_probes, 3u);
  ASSERT_TRUE(c->elections[0].health.has_value());
  EXPECT_EQ(c->elections[0].health->url.text, "http://127.0.0.1:8080/healthz");
  EXPECT_EQ(c->elections[0].health->url.port, 8080);
  EXPECT_EQ(c->elections[0].health->url.target, "/healthz");
  EXPECT_EQ(c->elections[0].health->interval_ms, 1000);
  EXPECT_EQ(c->elections[0].health->failures, 2);
  EXPECT_EQ(c->elections[0].health->grace_ms, 30000);
  ASSERT_TRUE(c->elections[1].health.has_value());
  EXPECT_EQ(c->elections[1].health->url.host, "localhost:9090");
  EXPECT_EQ(c->elections[1].health->interval_ms, 1000);  // the defaults of an acquire's health
  EXPECT_EQ(c->elections[1].health->failures, 3);
  EXPECT_FALSE(c->elections[2].health.has_value());

  c = loadConfigFromString("{}");
  ASSERT_TRUE(c.isOk());
  EXPECT_TRUE(c->health.allowed_ports.empty());  // any port
  EXPECT_EQ(c->health.max_probes, kDefaultMaxHealthProbes);
  // A URL without a port is port 80 for allowed_ports.
  EXPECT_TRUE(loadConfigFromString("identity: pod-a\nhealth: {allowed_ports: [80]}\n"
                                   "elections: [{name: a, health: {url: \"http://127.0.0.1/\"}}]")
                  .isOk());

  // {the YAML under `identity: pod-a`, the error}
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"elections: [{name: a, health: {url: \"http://10.0.0.1:8080/\"}}]",
       "elections[0].health.url: the URL names a host outside 127.0.0.0/8 (only "
       "http://127.0.0.0/8, http://[::1] or http://localhost)"},
      {"elections: [{name: a, health: {url: \"https://127.0.0.1/\"}}]",
       "elections[0].health.url: the URL must start with http:// (only http://127.0.0.0/8, "
       "http://[::1] or http://localhost)"},
      {"elections: [{name: a, health: {url: \"http://example.com/\"}}]",
       "elections[0].health.url: the URL names a host that is not a loopback address (only "
       "http://127.0.0.0/8, http://[::1] or http://localhost)"},
      {"elections: [{name: a, health: {interval_ms: 500}}]",
       "elections[0].health.url: required: the app's health endpoint, e.g. "
       "http://127.0.0.1:8080/healthz"},
      {"elections: [{name: a, health: {url: \"http://[::1]/\", interval_ms: 50}}]",
       "elections[0].health.interval_ms: must be between 100 and 60000, got 50"},
      {"elections: [{name: a, health: {url: \"http://[::1]/\", failures: 0}}]",
       "elections[0].health.failures: must be between 1 and 100, got 0"},
      {"elections: [{name: a, health: {url: \"http://[::1]/\", timeout_ms: 5}}]",
       "elections[0].health.timeout_ms: unknown key"},
      {"elections: [{name: a, health: \"http://127.0.0.1/\"}]",
       "elections[0].health: must be a mapping"},
      {"health: {allowed_ports: [8080]}\nelections: [{name: a, health: {url: "
       "\"http://127.0.0.1:22/\"}}]",
       "elections[0].health.url: the URL names port 22, which health.allowed_ports does not "
       "allow (8080)"},
      {"health: {allowed_ports: [0]}",
       "health.allowed_ports[0]: must be a port 1..65535, got \"0\""},
      {"health: {allowed_ports: 8080}", "health.allowed_ports: must be a list"},
      {"health: {max_probes: 0}", "health.max_probes: must be between 1 and 100000, got 0"},
      {"health: {probes: 1}", "health.probes: unknown key"},
      {"health: {max_probes: 1}\nelections: [{name: a, health: {url: \"http://127.0.0.1/\"}}, "
       "{name: b, health: {url: \"http://127.0.0.1/\"}}, {name: c, health: {url: "
       "\"http://127.0.0.1/\", interval_ms: 2000}}]",
       "health.max_probes: is 1 but elections[] name 2 distinct health probes (URL and "
       "interval_ms)"},
  };
  for (const auto& [yaml, error] : cases) {
    EXPECT_EQ(errorOf("identity: pod-a\n" + yaml), error) << yaml;
  }
}

}  // namespace
}  // namespace sidelock::config
