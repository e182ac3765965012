// A grant the client never read is given back (Responder::onUndelivered): the client hung up
// after the answer was on the wire, or before it went out. And a grant the client did read is
// never given back, whatever the client does with its connection afterwards.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;

const std::string kUndelivered = "sidelock_grants_undelivered_total";
const std::string kConnections = "sidelock_http_connections";

class UndeliveredGrantTest : public ::testing::TestWithParam<bool> {
 protected:
  UndeliveredGrantTest()
      : sidecar({"backend:\n  type: redis\n  nodes: [\"" + redis.address() + "\"]\n", {}, true}),
        observer(HttpClient::tcp(sidecar.port())) {}

  /// The client under test: TCP, or the Unix socket (the parameter).
  HttpClient connect() {
    return GetParam() ? HttpClient::unix(sidecar.socketPath()) : HttpClient::tcp(sidecar.port());
  }
  int64_t metric(const std::string& series) {
    return metricValue(observer.get("/metrics").body, series);
  }
  bool held(const std::string& name) {
    return json::parse(observer.get("/v1/locks/" + name).body).value("held", false);
  }
  /// Sends an auto_renew acquire of a free lock (granted at once) on `client`.
  static void sendAcquire(HttpClient& client, const std::string& name) {
    client.sendRequest("POST", "/v1/locks/" + name + "/acquire",
                       R"({"ttl_ms":60000,"wait_ms":0,"auto_renew":true})");
  }
  /// Waits until the answer is readable on `client`'s socket, without reading it.
  static bool answerArrived(HttpClient& client) {
    pollfd pfd{client.fd(), POLLIN, 0};
    return ::poll(&pfd, 1, static_cast<int>(kPollTimeoutMs)) == 1;
  }

  RedisServer redis;
  SidecarProcess sidecar;
  HttpClient observer;  // TCP, for /metrics and GET /v1/locks
};

TEST_P(UndeliveredGrantTest, ClosedWithTheGrantUnreadGivesItBack) {
  HttpClient client = connect();
  sendAcquire(client, "unread");
  ASSERT_TRUE(answerArrived(client));
  ASSERT_TRUE(held("unread"));
  // Closing with the answer unread resets the connection (TCP RST; ECONNRESET on a Unix socket).
  client.close();
  EXPECT_TRUE(pollUntil([&] { return !held("unread"); })) << "the unread grant is still held";
  EXPECT_EQ(metric(kUndelivered), 1);
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{unread}"}), "0");
  EXPECT_EQ(sidecar.stop(), 0);
}

TEST_P(UndeliveredGrantTest, HalfClosedBeforeReadingThenClosedGivesItBack) {
  HttpClient client = connect();
  sendAcquire(client, "half-closed");
  ::shutdown(client.fd(), SHUT_WR);  // the request is all we send
  ASSERT_TRUE(answerArrived(client));
  client.close();
  EXPECT_TRUE(pollUntil([&] { return !held("half-closed"); }))
      << "the unread grant is still held";
  // Given back either as undelivered, or (the EOF read before the grant) as a cancelled waiter.
  EXPECT_GE(metric(kUndelivered) +
                metric("sidelock_acquire_total{kind=\"mutex\",result=\"cancelled\"}"),
            1);
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{half-closed}"}), "0");
  EXPECT_EQ(sidecar.stop(), 0);
}

// The order the previous test leaves to the scheduler, made certain: the answer is written before
// the sidecar sees the EOF, so only the reset that follows within the watch window can tell it was
// never read (a Unix socket reports it as ECONNRESET, TCP as a reset connection).
TEST_P(UndeliveredGrantTest, HalfClosedAfterTheAnswerArrivedThenClosedUnreadGivesItBack) {
  HttpClient client = connect();
  sendAcquire(client, "late-eof");
  ASSERT_TRUE(answerArrived(client));
  ::shutdown(client.fd(), SHUT_WR);
  client.close();
  EXPECT_TRUE(pollUntil([&] { return !held("late-eof"); })) << "the unread grant is still held";
  EXPECT_EQ(metric(kUndelivered), 1);
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{late-eof}"}), "0");
  EXPECT_EQ(sidecar.stop(), 0);
}

TEST_P(UndeliveredGrantTest, ReadGrantStaysHeldAfterACleanClose) {
  const int64_t connections_before = metric(kConnections);
  HttpClient client = connect();
  sendAcquire(client, "read");
  auto answer = client.readResponse();
  ASSERT_TRUE(answer.has_value());
  ASSERT_EQ(answer->status, 200) << answer->body;
  client.close();  // a clean FIN after reading: the client may use its lease
  // Once the sidecar closed its side (after looking for a reset), the verdict is in.
  ASSERT_TRUE(pollUntil([&] { return metric(kConnections) == connections_before; }));
  EXPECT_TRUE(held("read"));
  EXPECT_EQ(metric(kUndelivered), 0);
  const std::string owner = json::parse(answer->body)["owner"];
  EXPECT_EQ(observer.post("/v1/locks/read/release", json{{"owner", owner}}.dump()).status, 200);
  EXPECT_EQ(sidecar.stop(), 0);
}

INSTANTIATE_TEST_SUITE_P(Transports, UndeliveredGrantTest, ::testing::Values(false, true),
                         [](const auto& test) { return test.param ? "Unix" : "Tcp"; });

}  // namespace
}  // namespace sidelock::testing
