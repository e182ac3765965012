// Shutdown of a real sidecar with many stream holds (issue 22): after SIGTERM every stream gets
// its last event, {"event":"released"}, and the end of its chunked body before the connection
// closes, never a bare EOF (`sidelock run` would take that for a lost lock). Real redis-server,
// real sidecar process, real sockets.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using Clock = std::chrono::steady_clock;

/// Everything the server sends on `fd` until it closes the connection (or `deadline`).
std::string readUntilClosed(int fd, Clock::time_point deadline) {
  std::string bytes;
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left))) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;  // closed (or reset)
    bytes.append(buf, static_cast<size_t>(n));
  }
  return bytes;
}

TEST(ShutdownTest, EveryStreamGetsItsReleasedEventAndTheEndOfItsBody) {
  constexpr int kStreams = 400;
  RedisServer redis;
  // 400 acquires at once: an ASan sidecar on a loaded machine read the 44th reply 500 ms (the
  // default command timeout) after sending it. What is checked here is the shutdown, not that.
  SidecarProcess sidecar({redisBackendYaml(redis.address(), 5000), {}, /*wait_ready=*/true});
  std::vector<HttpClient> holders;
  holders.reserve(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    holders.push_back(HttpClient::tcp(sidecar.port()));
    holders.back().sendRequest("POST", "/v1/locks/job-" + std::to_string(i) + "/acquire",
                               R"({"ttl_ms":60000,"hold":"stream"})");
  }
  for (int i = 0; i < kStreams; ++i) {
    auto head = holders[i].readStreamHead();
    ASSERT_TRUE(head.has_value()) << i;
    ASSERT_EQ(head->status, 200) << i << " " << head->body;
    auto acquired = holders[i].readStreamLine();
    ASSERT_TRUE(acquired.has_value()) << i;
    ASSERT_NE(acquired->find("\"token\""), std::string::npos) << *acquired;
  }

  // One SIGTERM (stop() sends it and waits for the exit) while the clients read.
  auto exit_code = std::async(std::launch::async, [&sidecar] { return sidecar.stop(); });
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  int released = 0;
  int bare_eof = 0;
  std::string first_bad;
  for (int i = 0; i < kStreams; ++i) {
    const std::string rest = readUntilClosed(holders[i].fd(), deadline);
    // The released event's chunk, then the last chunk (size 0) and the end of the body.
    const bool ok = rest.find("{\"event\":\"released\"}") != std::string::npos &&
                    rest.ends_with("\n\r\n0\r\n\r\n");
    released += ok ? 1 : 0;
    if (!ok) {
      ++bare_eof;
      if (first_bad.empty()) first_bad = "stream " + std::to_string(i) + ": [" + rest + "]";
    }
  }
  EXPECT_EQ(released, kStreams) << bare_eof << " streams ended without their last event; "
                                << first_bad;
  EXPECT_EQ(exit_code.get(), 0) << sidecar.logs();
  EXPECT_EQ(sidecar.logs().find("shutdown.output_not_drained"), std::string::npos)
      << "every stream's output left within the drain time: " << sidecar.logs();
  for (int i = 0; i < kStreams; i += 50) {
    EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{job-" + std::to_string(i) + "}"}), "0")
        << "the lease was released";
  }
}

}  // namespace
}  // namespace sidelock::testing
