// TLS to Redis: a real redis-server with --tls-port and certificates made by `openssl` for the
// test. Verification is always on: the wrong CA, the wrong host name and an expired certificate
// keep the node down with the reason; mutual TLS works when the server requires it; a reconnect
// resumes the previous session.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "integration/redis_test_env.h"
#include "redis/redis_backend.h"
#include "redis/redis_node.h"
#include "redis/scripts.h"
#include "redis/tls_transport.h"
#include "support/test_pki.h"

namespace sidelock::backend {
namespace {

using testing::LoopEnv;
using testing::RedisServer;
using testing::TestPki;

class RedisTlsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    env_.shutDown(node_);
    env_.close();
  }

  /// A redis-server serving TLS with `cert`/`key` (CA: the test CA).
  std::unique_ptr<RedisServer> tlsServer(const std::string& cert, const std::string& key,
                                         bool require_client_cert = false) {
    tls_port_ = testing::pickFreePort();
    RedisServer::Options o;
    o.extra_args = testing::redisTlsArgs(tls_port_, cert, key, pki_.caCert(), require_client_cert);
    return std::make_unique<RedisServer>(o);
  }

  config::TlsConfig tlsConfig(const std::string& ca) {
    config::TlsConfig t;
    t.enabled = true;
    t.ca_file = ca;
    return t;
  }

  RedisNodeOptions nodeOptions(const config::TlsConfig& tls,
                               const std::string& host = "127.0.0.1") {
    RedisNodeOptions o;
    o.address.host = host;
    o.address.port = tls_port_;
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 1000;
    o.reconnect_min_ms = 20;
    o.reconnect_max_ms = 200;
    o.health_interval_ms = 200;
    o.scripts = sidelockScripts();
    auto context = TlsClientContext::create(tls);
    EXPECT_TRUE(context.isOk()) << context.status().toString();
    if (context.isOk()) o.tls = std::move(*context);
    return o;
  }

  RedisNode& start(RedisNodeOptions o) {
    node_ = std::make_unique<RedisNode>(env_.loop(), env_.scheduler(), std::move(o), nullptr);
    node_->start();
    return *node_;
  }

  /// Waits until the node's down reason contains `text`; the node must never have come up.
  void expectDownWith(RedisNode& n, const std::string& text) {
    ASSERT_TRUE(env_.runUntil([&] { return n.downReason().find(text) != std::string::npos; }))
        << "down reason: " << n.downReason();
    EXPECT_FALSE(n.up());
    std::optional<StatusOr<RedisValue>> r;
    n.command({"PING"}, 0, [&](StatusOr<RedisValue> v) { r.emplace(v); });
    ASSERT_TRUE(env_.runUntil([&] { return r.has_value(); }));
    EXPECT_FALSE(r->isOk()) << "nothing is served over an unverified link";
  }

  StatusOr<RedisValue> run(std::initializer_list<std::string_view> argv) {
    std::optional<StatusOr<RedisValue>> r;
    node_->command(argv, 0, [&](StatusOr<RedisValue> v) { r.emplace(v); });
    if (!env_.runUntil([&] { return r.has_value(); })) return internalError("test: no callback");
    return std::move(*r);
  }

  TestPki pki_;
  int tls_port_ = 0;
  LoopEnv env_;
  std::unique_ptr<RedisNode> node_;
};

TEST_F(RedisTlsTest, VerifiedServerServesCommandsAndResumesItsSession) {
  auto redis = tlsServer(pki_.serverCert(), pki_.serverKey());
  RedisNode& n = start(nodeOptions(tlsConfig(pki_.caCert())));
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); })) << n.downReason();
  auto set = run({"SET", "over-tls", "yes"});
  ASSERT_TRUE(set.isOk()) << set.status().toString();
  EXPECT_EQ(redis->cli({"GET", "over-tls"}), "yes") << "written through the TLS port";
  // More than one TLS record (16 KiB) in one write: every byte must reach the server.
  const std::string big(100'000, 'x');
  ASSERT_TRUE(run({"SET", "big", big}).isOk());
  auto got = run({"GET", "big"});
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  EXPECT_EQ(got->str, big);
  EXPECT_EQ(n.tlsResumptions(), 0);

  // Drop our TLS connections from the server side: the node reconnects and resumes.
  redis->cli({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
  ASSERT_TRUE(env_.runUntil([&] { return n.tlsResumptions() >= 1 && n.up(); }, 5000))
      << "resumptions " << n.tlsResumptions() << ", up " << n.up() << ", " << n.downReason();
  auto get = run({"GET", "over-tls"});
  ASSERT_TRUE(get.isOk());
  EXPECT_EQ(get->str, "yes");
}

// Commands issued from reply callbacks (inside the TLS read loop) fill batches of eight, and
// each batch is written from there (RedisConnectionOptions::flush_every_commands): every command
// is answered, in the order it was issued.
TEST_F(RedisTlsTest, BatchesWrittenFromReplyCallbacksAllArriveInOrder) {
  auto redis = tlsServer(pki_.serverCert(), pki_.serverKey());
  RedisNode& n = start(nodeOptions(tlsConfig(pki_.caCert())));
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); })) << n.downReason();
  constexpr int kPerBurst = 20;  // two early writes and the turn's end
  constexpr int kBursts = 5;
  std::vector<int64_t> seen;
  int bursts = 0;
  std::function<void()> burst = [&] {
    ++bursts;
    for (int i = 0; i < kPerBurst; ++i) {
      n.command({"INCR", "tls-batches"}, 0, [&, i](StatusOr<RedisValue> v) {
        seen.push_back(v.isOk() ? v->integer : -1);
        if (i == kPerBurst - 1 && bursts < kBursts) burst();  // from inside the replies' read
      });
    }
  };
  burst();
  ASSERT_TRUE(env_.runUntil([&] { return seen.size() == kPerBurst * kBursts; }, 10'000))
      << seen.size() << " answered";
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], static_cast<int64_t>(i + 1)) << i;
  EXPECT_EQ(redis->cli({"GET", "tls-batches"}), std::to_string(kPerBurst * kBursts));
}

TEST_F(RedisTlsTest, HostNameIsVerifiedAgainstTheCertificate) {
  auto redis = tlsServer(pki_.serverCert(), pki_.serverKey());
  RedisNode& n = start(nodeOptions(tlsConfig(pki_.caCert()), "localhost"));
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); })) << n.downReason();
}

TEST_F(RedisTlsTest, UnknownCaKeepsTheNodeDown) {
  auto redis = tlsServer(pki_.serverCert(), pki_.serverKey());
  RedisNode& n = start(nodeOptions(tlsConfig(pki_.otherCaCert())));
  expectDownWith(n, "TLS certificate verify failed");
  EXPECT_NE(n.downReason().find("sidelock-test-server"), std::string::npos)
      << "names the certificate: " << n.downReason();
}

TEST_F(RedisTlsTest, WrongHostNameKeepsTheNodeDown) {
  auto redis = tlsServer(pki_.namedServerCert(), pki_.namedServerKey());
  RedisNode& n = start(nodeOptions(tlsConfig(pki_.caCert())));
  expectDownWith(n, "IP address mismatch");
  EXPECT_NE(n.downReason().find("expected \"127.0.0.1\""), std::string::npos) << n.downReason();
}

TEST_F(RedisTlsTest, ServerNameOverrideVerifiesAndSendsThatName) {
  auto redis = tlsServer(pki_.namedServerCert(), pki_.namedServerKey());
  config::TlsConfig tls = tlsConfig(pki_.caCert());
  tls.server_name = "redis.internal";
  RedisNode& n = start(nodeOptions(tls));
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); })) << n.downReason();
}

TEST_F(RedisTlsTest, ExpiredCertificateKeepsTheNodeDown) {
  auto redis = tlsServer(pki_.expiredServerCert(), pki_.expiredServerKey());
  RedisNode& n = start(nodeOptions(tlsConfig(pki_.caCert())));
  expectDownWith(n, "certificate has expired");
}

TEST_F(RedisTlsTest, MutualTlsRequiredAndMissingKeepsTheNodeDown) {
  auto redis = tlsServer(pki_.serverCert(), pki_.serverKey(), /*require_client_cert=*/true);
  RedisNode& n = start(nodeOptions(tlsConfig(pki_.caCert())));
  expectDownWith(n, "certificate required");
}

TEST_F(RedisTlsTest, MutualTlsWithAClientCertificate) {
  auto redis = tlsServer(pki_.serverCert(), pki_.serverKey(), /*require_client_cert=*/true);
  config::TlsConfig tls = tlsConfig(pki_.caCert());
  tls.cert_file = pki_.clientCert();
  tls.key_file = pki_.clientKey();
  RedisNode& n = start(nodeOptions(tls));
  ASSERT_TRUE(env_.runUntil([&] { return n.up(); })) << n.downReason();
  auto pong = run({"PING"});
  ASSERT_TRUE(pong.isOk());
  EXPECT_EQ(pong->str, "PONG");
}

TEST_F(RedisTlsTest, BadCertificateFilesAreReportedByName) {
  config::TlsConfig tls = tlsConfig(pki_.caCert());
  tls.cert_file = pki_.caCert();  // a certificate without its key
  tls.key_file = pki_.serverKey();
  auto context = TlsClientContext::create(tls);
  ASSERT_FALSE(context.isOk());
  EXPECT_NE(context.status().message().find("backend.tls.key_file"), std::string::npos)
      << context.status().message();
  config::TlsConfig not_pem = tlsConfig(pki_.dir() + "/server.ext");
  auto bad_ca = TlsClientContext::create(not_pem);
  ASSERT_FALSE(bad_ca.isOk());
  EXPECT_NE(bad_ca.status().message().find("backend.tls.ca_file"), std::string::npos);
}

// The lock scripts end to end over TLS through the redis backend.
TEST_F(RedisTlsTest, LocksOverTls) {
  auto redis = tlsServer(pki_.serverCert(), pki_.serverKey());
  config::BackendConfig c = testing::redisConfig(tls_port_);
  c.tls = tlsConfig(pki_.caCert());
  c.connect_timeout_ms = 1000;
  c.command_timeout_ms = 1000;
  RedisBackend b(env_.loop(), env_.scheduler(), c, 600'000, env_.metrics());
  b.start();
  ASSERT_TRUE(env_.runUntil([&] { return b.health().ready; })) << b.health().reason;
  std::optional<StatusOr<Outcome>> a;
  b.run(Operation::acquire("tls-lock", "alice", 10'000),
        [&](StatusOr<Outcome> r) { a.emplace(r); });
  ASSERT_TRUE(env_.runUntil([&] { return a.has_value(); }));
  ASSERT_TRUE(a->isOk()) << a->status().toString();
  EXPECT_TRUE((*a)->ok());
  EXPECT_EQ(redis->cli({"GET", lockKey("sidelock:", "tls-lock")}), "alice");
  bool done = false;
  b.shutdown([&] { done = true; });
  ASSERT_TRUE(env_.runUntil([&] { return done; }));
}

}  // namespace
}  // namespace sidelock::backend
