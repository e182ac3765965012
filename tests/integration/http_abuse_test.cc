// Issue 11, hostile and careless clients against the real binary and a real redis-server: a flood
// of pipelined requests that are never read, idle connections filling the budget, slow clients.
// Each attack runs while an honest client probes /healthz and holds leases; every bound is
// relative to the configured timings, never an absolute wall-clock figure.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

// The honest client's lease TTL; every bound below is relative to it. Doubled under ASan, which
// slows everything the loop does (the flood included) several times.
int64_t leaseTtlMs() { return sidecarIsSanitized() ? 2000 : 1000; }

std::string yamlFor(const RedisServer& redis) {
  return "backend:\n  type: redis\n  nodes: [\"" + redis.address() +
         "\"]\n  command_timeout_ms: 300\n  reconnect_min_ms: 20\n  reconnect_max_ms: 200\n";
}

/// Raises this process's open-file limit to the hard limit (the attacks open > 1,024 sockets).
void raiseFileLimit() {
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  lim.rlim_cur = lim.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lim), 0);
}

/// A raw client socket the attacker never reads from; closed on destruction.
class RawSocket {
 public:
  static RawSocket tcp(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      fd = -1;
    }
    return RawSocket(fd);
  }
  static RawSocket unix(const std::string& path) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      fd = -1;
    }
    return RawSocket(fd);
  }
  explicit RawSocket(int fd) : fd_(fd) {}
  RawSocket(RawSocket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RawSocket& operator=(RawSocket&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~RawSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void setNonBlocking() { ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK); }
  /// Writes as much of `data` from `offset` as the socket takes now; returns the new offset.
  size_t writeSome(const std::string& data, size_t offset) {
    while (offset < data.size()) {
      ssize_t n = ::send(fd_, data.data() + offset, data.size() - offset, MSG_NOSIGNAL);
      if (n <= 0) break;
      offset += static_cast<size_t>(n);
    }
    return offset;
  }
  bool writeAll(const std::string& data) { return writeSome(data, 0) == data.size(); }
  /// Reads (and keeps) what the server sends until it closes the connection or `timeout_ms`
  /// passes; true if it closed.
  bool readUntilClosed(int timeout_ms, std::string* received = nullptr) {
    auto end = steady_clock::now() + milliseconds(timeout_ms);
    char buf[16 * 1024];
    while (steady_clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return true;
      if (received != nullptr) received->append(buf, static_cast<size_t>(n));
    }
    return false;
  }

 private:
  int fd_;
};

/// The honest client's view while an attack runs: /healthz over fresh connections, timed.
struct ProbeLog {
  int probes = 0;
  int failures = 0;
  int64_t slowest_ms = 0;
};

ProbeLog probeHealthz(int port, int64_t for_ms, int64_t timeout_ms) {
  ProbeLog log;
  auto end = steady_clock::now() + milliseconds(for_ms);
  while (steady_clock::now() < end) {
    auto t0 = steady_clock::now();
    HttpClient c = HttpClient::tcp(port);
    c.sendRequest("GET", "/healthz");
    auto r = c.readResponse(static_cast<int>(timeout_ms));
    const int64_t took = std::chrono::duration_cast<milliseconds>(steady_clock::now() - t0).count();
    ++log.probes;
    if (!r || r->status != 200) ++log.failures;
    log.slowest_ms = std::max(log.slowest_ms, took);
    std::this_thread::sleep_for(milliseconds(50));
  }
  return log;
}

TEST(HttpAbuseTest, PipelinedMetricsFloodDoesNotFreezeTheLoop) {
  raiseFileLimit();
  RedisServer redis;
  SidecarProcess sidecar({yamlFor(redis), {}, true});
  HttpClient c = HttpClient::tcp(sidecar.port());
  // An honest client's auto-renewed lease and stream hold, both with a short TTL.
  auto r = c.post("/v1/locks/flood-lease/acquire",
                  json{{"ttl_ms", leaseTtlMs()}, {"auto_renew", true}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string lease_owner = json::parse(r.body)["owner"];
  HttpClient stream = HttpClient::tcp(sidecar.port());
  stream.sendRequest("POST", "/v1/locks/flood-stream/acquire",
                     json{{"ttl_ms", leaseTtlMs()}, {"hold", "stream"}}.dump());
  ASSERT_TRUE(stream.readStreamHead().has_value());
  auto first = stream.readStreamLine();
  ASSERT_TRUE(first.has_value());
  const std::string stream_owner = json::parse(*first)["owner"];

  // 200 connections, each writing ~68 KB of pipelined GET /metrics and never reading.
  std::string pipeline;
  while (pipeline.size() < 68 * 1024) pipeline += "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
  std::vector<RawSocket> attackers;
  for (int i = 0; i < 200; ++i) {
    attackers.push_back(RawSocket::tcp(sidecar.port()));
    ASSERT_TRUE(attackers.back().ok());
    attackers.back().setNonBlocking();
  }
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    std::vector<size_t> sent(attackers.size(), 0);
    while (!stop) {
      bool all_sent = true;
      for (size_t i = 0; i < attackers.size(); ++i) {
        sent[i] = attackers[i].writeSome(pipeline, sent[i]);
        all_sent = all_sent && sent[i] == pipeline.size();
      }
      if (all_sent) break;
      std::this_thread::sleep_for(milliseconds(5));
    }
  });

  // Three TTLs of probing while the flood is served.
  ProbeLog log = probeHealthz(sidecar.port(), 3 * leaseTtlMs(), 5 * leaseTtlMs());
  stop = true;
  writer.join();
  EXPECT_EQ(log.failures, 0);
  EXPECT_GE(log.probes, 3);
  std::cerr << "probes: " << log.probes << ", slowest " << log.slowest_ms << " ms\n";
  EXPECT_LT(log.slowest_ms, leaseTtlMs() / 2) << "a /healthz took half a lease TTL or more";
  // Neither hold was lost: Redis still has both owners, and the renewals never failed.
  EXPECT_EQ(redis.cli({"GET", "sidelock:{flood-lease}"}), lease_owner);
  EXPECT_EQ(redis.cli({"GET", "sidelock:{flood-stream}"}), stream_owner);
  attackers.clear();
  auto metrics = c.get("/metrics").body;
  EXPECT_LE(metricValue(metrics, "sidelock_renew_total{result=\"lost\"}"), 0) << metrics;
  EXPECT_EQ(metricValue(metrics, "sidelock_lease_lost_total"), 0);
  // The stream reports each renewal; nothing else (a "lost" event) may have come.
  int renewals = 0;
  while (auto line = stream.readStreamLine(200)) {
    auto event = json::parse(*line)["event"];
    EXPECT_EQ(event, "renewed") << *line;
    renewals += event == "renewed";
  }
  EXPECT_GE(renewals, 1);
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();
}

TEST(HttpAbuseTest, IdleKeepAliveConnectionsAtTheCapDoNotLockOutNewClients) {
  raiseFileLimit();
  RedisServer redis;
  SidecarProcess sidecar({yamlFor(redis), {}, true});
  EXPECT_NE(sidecar.logs().find("open_files_limit"), std::string::npos) << sidecar.logs();
  // The default listen.max_connections (1,024) keep-alive connections, each after one request,
  // on both the TCP listener and the Unix socket.
  std::vector<RawSocket> idle;
  const std::string request = "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";
  for (int i = 0; i < 1024; ++i) {
    idle.push_back(RawSocket::tcp(sidecar.port()));
    ASSERT_TRUE(idle.back().ok()) << i;
    ASSERT_TRUE(idle.back().writeAll(request));
    idle.push_back(RawSocket::unix(sidecar.socketPath()));
    ASSERT_TRUE(idle.back().ok()) << i;
    ASSERT_TRUE(idle.back().writeAll(request));
  }
  ASSERT_TRUE(pollUntil([&] {
    HttpClient probe = HttpClient::unix(sidecar.socketPath());
    return metricValue(probe.get("/metrics").body, "sidelock_http_connections") >= 2048;
  })) << "every idle connection was admitted";
  // New clients on either listener are served at once: the longest-idle connections make room.
  HttpClient tcp = HttpClient::tcp(sidecar.port());
  EXPECT_EQ(tcp.get("/healthz").status, 200);
  HttpClient unix_client = HttpClient::unix(sidecar.socketPath());
  EXPECT_EQ(unix_client.get("/healthz").status, 200);
  auto r = tcp.post("/v1/locks/after-idle/acquire", "{}");
  EXPECT_EQ(r.status, 200) << r.body;
  // (The probe connections of this test are evicted too, so count at least the two above.)
  EXPECT_TRUE(pollUntil([&] {
    return metricValue(tcp.get("/metrics").body, "sidelock_http_connections_evicted_total") >= 2;
  }));
  idle.clear();
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();
}

TEST(HttpAbuseTest, BusyConnectionsBeyondTheCapGetA503NotAReset) {
  RedisServer redis;
  SidecarProcess sidecar({yamlFor(redis), {}, true, "  max_connections: 8\n"});
  HttpClient holder = HttpClient::tcp(sidecar.port());
  auto held = holder.post("/v1/locks/busy/acquire", R"({"ttl_ms":30000})");
  ASSERT_EQ(held.status, 200) << held.body;
  holder.close();
  // Eight waiters fill the TCP listener's budget; none may be evicted.
  std::vector<HttpClient> waiters;
  for (int i = 0; i < 8; ++i) {
    waiters.push_back(HttpClient::tcp(sidecar.port()));
    waiters.back().sendRequest("POST", "/v1/locks/busy/acquire", R"({"wait_ms":30000})");
  }
  HttpClient observer = HttpClient::unix(sidecar.socketPath());
  ASSERT_TRUE(waitForWaiters(observer, "busy", 8));
  HttpClient late = HttpClient::tcp(sidecar.port());
  late.sendRequest("GET", "/healthz");
  auto refused = late.readResponse(5000);
  ASSERT_TRUE(refused.has_value()) << "an answer, not a reset";
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(json::parse(refused->body)["error"], "too_many_connections");
  EXPECT_EQ(queuedWaiters(observer, "busy"), 8) << "no waiter was dropped";
  auto metrics = observer.get("/metrics").body;
  EXPECT_EQ(metricValue(metrics, "sidelock_http_connections_rejected_total"), 1);
  EXPECT_EQ(metricValue(metrics, "sidelock_http_connections_evicted_total"), 0);
  waiters.clear();
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();
}

// Short timeouts, so each slow attack is cut off within the test; the probes must meanwhile be
// answered within a fraction of them.
constexpr int64_t kHeaderTimeoutMs = 600;
constexpr int64_t kIdleTimeoutMs = 800;
constexpr int64_t kWriteTimeoutMs = 800;
const std::string kSlowListen = "  header_timeout_ms: " + std::to_string(kHeaderTimeoutMs) +
                                "\n  idle_timeout_ms: " + std::to_string(kIdleTimeoutMs) +
                                "\n  write_timeout_ms: " + std::to_string(kWriteTimeoutMs) + "\n";

/// Runs `attack_step` on every attacker every 50 ms while /healthz is probed for `for_ms`.
ProbeLog probeWhile(int port, int64_t for_ms, const std::function<void()>& attack_step) {
  std::atomic<bool> stop{false};
  std::thread attacker([&] {
    while (!stop) {
      attack_step();
      std::this_thread::sleep_for(milliseconds(50));
    }
  });
  ProbeLog log = probeHealthz(port, for_ms, 5 * for_ms);
  stop = true;
  attacker.join();
  return log;
}

class SlowAttackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = std::make_unique<RedisServer>();
    sidecar_ = std::make_unique<SidecarProcess>(
        SidecarProcess::Options{yamlFor(*redis_), {}, true, kSlowListen});
  }
  void TearDown() override { EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs(); }

  std::vector<RawSocket> connectAttackers(int n) {
    std::vector<RawSocket> sockets;
    for (int i = 0; i < n; ++i) {
      sockets.push_back(RawSocket::tcp(sidecar_->port()));
      EXPECT_TRUE(sockets.back().ok());
    }
    return sockets;
  }
  void expectProbesServed(const ProbeLog& log, int64_t timeout_ms) {
    EXPECT_GE(log.probes, 3);
    EXPECT_EQ(log.failures, 0);
    EXPECT_LT(log.slowest_ms, timeout_ms) << "a probe waited as long as the attack's timeout";
  }

  std::unique_ptr<RedisServer> redis_;
  std::unique_ptr<SidecarProcess> sidecar_;
};

TEST_F(SlowAttackTest, SlowlorisHeadersAreCutOffWhileProbesSucceed) {
  std::vector<RawSocket> attackers = connectAttackers(50);
  for (auto& a : attackers) ASSERT_TRUE(a.writeAll("GET /healthz HTTP/1.1\r\nHost: localhost\r\n"));
  ProbeLog log = probeWhile(sidecar_->port(), 2 * kHeaderTimeoutMs, [&] {
    for (auto& a : attackers) a.writeAll("X-Slow: 1\r\n");  // a header line, never the end
  });
  expectProbesServed(log, kHeaderTimeoutMs);
  for (auto& a : attackers) {
    std::string answer;
    EXPECT_TRUE(a.readUntilClosed(static_cast<int>(4 * kHeaderTimeoutMs), &answer));
    EXPECT_EQ(answer.rfind("HTTP/1.1 408", 0), 0u) << answer;
  }
}

TEST_F(SlowAttackTest, SlowBodyIsCutOffWhileProbesSucceed) {
  std::vector<RawSocket> attackers = connectAttackers(50);
  for (auto& a : attackers) {
    ASSERT_TRUE(a.writeAll(
        "POST /v1/locks/slow/acquire HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        "Content-Length: 4000\r\n\r\n{"));
  }
  ProbeLog log = probeWhile(sidecar_->port(), 2 * kHeaderTimeoutMs, [&] {
    for (auto& a : attackers) a.writeAll(" ");  // one byte of body at a time
  });
  expectProbesServed(log, kHeaderTimeoutMs);
  for (auto& a : attackers) {
    std::string answer;
    EXPECT_TRUE(a.readUntilClosed(static_cast<int>(4 * kHeaderTimeoutMs), &answer));
    EXPECT_EQ(answer.rfind("HTTP/1.1 408", 0), 0u) << answer;
  }
  EXPECT_EQ(redis_->cli({"EXISTS", "sidelock:{slow}"}), "0") << "nothing was acquired";
}

TEST_F(SlowAttackTest, SlowReaderIsDroppedWhileProbesSucceed) {
  // Pipelined requests for large answers that the attackers never read.
  std::string pipeline;
  while (pipeline.size() < 32 * 1024) pipeline += "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
  std::vector<RawSocket> attackers = connectAttackers(20);
  for (auto& a : attackers) a.setNonBlocking();
  std::vector<size_t> sent(attackers.size(), 0);
  ProbeLog log = probeWhile(sidecar_->port(), 2 * kWriteTimeoutMs, [&] {
    for (size_t i = 0; i < attackers.size(); ++i)
      sent[i] = attackers[i].writeSome(pipeline, sent[i]);
  });
  expectProbesServed(log, kWriteTimeoutMs);
  // The server gives up on them after the write timeout: only the probe's connection is left.
  HttpClient c = HttpClient::tcp(sidecar_->port());
  EXPECT_TRUE(pollUntil(
      [&] { return metricValue(c.get("/metrics").body, "sidelock_http_connections") == 1; }));
}

TEST_F(SlowAttackTest, IdleKeepAliveConnectionsAreClosedWhileProbesSucceed) {
  std::vector<RawSocket> attackers = connectAttackers(50);
  for (auto& a : attackers) ASSERT_TRUE(a.writeAll("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  ProbeLog log = probeWhile(sidecar_->port(), 2 * kIdleTimeoutMs, [] {});
  expectProbesServed(log, kIdleTimeoutMs);
  for (auto& a : attackers) {
    std::string answer;
    EXPECT_TRUE(a.readUntilClosed(static_cast<int>(4 * kIdleTimeoutMs), &answer));
    EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  }
}

}  // namespace
}  // namespace sidelock::testing
