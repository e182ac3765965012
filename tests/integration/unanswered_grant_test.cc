// An acquire that went out and got no answer may have been granted all the same: Redis, stalled
// past backend.command_timeout_ms, runs the script once it wakes, after the sidecar told the
// caller 503 and dropped the link. Nobody was told of that grant, so nobody would release it:
// the lock (an election's leader) would stay taken for its whole TTL. The sidecar gives such a
// grant back (src/lock/unanswered.cc) when it drew the owner id itself, and tells a caller that
// chose its own owner id that the acquire may have been granted.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Redis stalls this long, past the sidecar's command timeout: the acquire's answer is given up on
// (and the link with it), and Redis runs the acquire when it wakes.
constexpr int kCommandTimeoutMs = 300;
constexpr auto kStall = std::chrono::milliseconds(900);
// Long enough that a grant left behind would still be there when the test looks.
constexpr int64_t kTtlMs = 60'000;

int64_t outcomes(HttpClient& observer, const std::string& outcome) {
  return metricValue(observer.get("/metrics").body,
                     "sidelock_unanswered_acquires_total{outcome=\"" + outcome + "\"}");
}

class UnansweredGrantTest : public ::testing::Test {
 protected:
  UnansweredGrantTest()
      : sidecar({redisBackendYaml(redis.address(), kCommandTimeoutMs), {}, true}),
        observer(HttpClient::tcp(sidecar.port())) {}

  ~UnansweredGrantTest() override { redis.resume(); }

  /// Stalls Redis, runs `during` (which sends what the stall is to swallow), and wakes Redis
  /// kStall after the stall began.
  template <typename F>
  void stallRedis(F during) {
    redis.pause();
    const auto woke_at = Clock::now() + kStall;
    during();
    std::this_thread::sleep_until(woke_at);
    redis.resume();
  }
  bool exists(const std::string& key) { return redis.cli({"EXISTS", key}) == "1"; }

  RedisServer redis;
  SidecarProcess sidecar;
  HttpClient observer;
};

TEST_F(UnansweredGrantTest, ASingleTryThatGotNoAnswerHasItsLateGrantGivenBack) {
  HttpClient client = HttpClient::tcp(sidecar.port());
  HttpResponse answer;
  stallRedis([&] {
    answer = client.post("/v1/locks/stalled/acquire", json{{"ttl_ms", kTtlMs}}.dump());
  });
  ASSERT_EQ(answer.status, 503) << answer.body;
  EXPECT_EQ(answer.body.find("may have been granted"), std::string::npos)
      << "the sidecar drew this owner id: the grant is its own to give back, not the caller's";
  // Redis ran the acquire when it woke; the sidecar gives that grant back once the link is back.
  EXPECT_TRUE(pollUntil([&] { return outcomes(observer, "released") == 1; }))
      << "the late grant was not given back:\n"
      << sidecar.logs();
  EXPECT_FALSE(exists("sidelock:{stalled}")) << "the lock stays taken until its TTL";
  // Free for the next caller at once, not after 60 s.
  HttpResponse next = observer.post("/v1/locks/stalled/acquire", R"({"ttl_ms":5000})");
  EXPECT_EQ(next.status, 200) << next.body;
  EXPECT_EQ(sidecar.stop(), 0);
}

TEST_F(UnansweredGrantTest, AWaiterWhoseAttemptGotNoAnswerIsGrantedOnceRedisIsBack) {
  HttpClient client = HttpClient::tcp(sidecar.port());
  stallRedis([&] {
    client.sendRequest("POST", "/v1/locks/queued/acquire",
                       json{{"ttl_ms", kTtlMs}, {"wait_ms", 20'000}}.dump());
  });
  // Its first attempt's answer was given up on, and Redis granted it late. Its next attempt,
  // under the same owner id, would find that grant ("held by you") and wait for its TTL: the
  // grant is given back ahead of it instead.
  std::optional<HttpResponse> answer = client.readResponse(15'000);
  ASSERT_TRUE(answer.has_value());
  ASSERT_EQ(answer->status, 200) << answer->body << sidecar.logs();
  EXPECT_EQ(outcomes(observer, "released"), 1);
  const json grant = json::parse(answer->body);
  EXPECT_EQ(redis.cli({"GET", "sidelock:{queued}"}), grant["owner"].get<std::string>());
  EXPECT_EQ(
      observer.post("/v1/locks/queued/release", json{{"owner", grant["owner"]}}.dump()).status,
      200);
  EXPECT_EQ(sidecar.stop(), 0);
}

// The election case: a candidate whose campaign got no answer was elected all the same. Had the
// grant stayed, every sidecar would report a leader that was never told it leads, its readiness
// probe would pass, and no other candidate could be elected for the whole TTL.
TEST_F(UnansweredGrantTest, ACampaignLeftWhileItsAttemptGotNoAnswerLeavesNoLeader) {
  stallRedis([&] {
    HttpClient candidate = HttpClient::tcp(sidecar.port());
    candidate.sendRequest("POST", "/v1/elections/stalled/campaign",
                          json{{"candidate", "pod-a"}, {"ttl_ms", kTtlMs}}.dump());
    std::this_thread::sleep_for(std::chrono::milliseconds(kCommandTimeoutMs + 200));
    candidate.close();  // the candidate leaves the line before Redis wakes
  });
  EXPECT_TRUE(pollUntil([&] { return outcomes(observer, "released") == 1; })) << sidecar.logs();
  HttpResponse leader = observer.get("/v1/elections/stalled");
  ASSERT_EQ(leader.status, 200) << leader.body;
  EXPECT_TRUE(json::parse(leader.body)["leader"].is_null()) << leader.body;
  EXPECT_EQ(observer.get("/v1/elections/stalled/ready?candidate=pod-a").status, 503);
  EXPECT_FALSE(exists("sidelock:{stalled}:el"));
  EXPECT_EQ(sidecar.stop(), 0);
}

// A multi-lock's one-step try (backend `redis`: every name in one script) swallowed by the stall:
// each name it may have taken is given back once the link is back, not left for the TTL.
TEST_F(UnansweredGrantTest, AMultiLockThatGotNoAnswerHasEveryNameGivenBack) {
  HttpClient client = HttpClient::tcp(sidecar.port());
  HttpResponse answer;
  stallRedis([&] {
    answer = client.post("/v1/multilocks/acquire",
                         json{{"names", {"m-1", "m-2"}}, {"ttl_ms", kTtlMs}}.dump());
  });
  ASSERT_EQ(answer.status, 503) << answer.body;
  EXPECT_EQ(answer.body.find("may have been granted"), std::string::npos) << answer.body;
  EXPECT_TRUE(pollUntil([&] { return outcomes(observer, "released") == 2; })) << sidecar.logs();
  EXPECT_FALSE(exists("sidelock:{m-1}"));
  EXPECT_FALSE(exists("sidelock:{m-2}"));
  HttpResponse next =
      observer.post("/v1/multilocks/acquire", json{{"names", {"m-1", "m-2"}}}.dump());
  EXPECT_EQ(next.status, 200) << next.body;
  EXPECT_EQ(sidecar.stop(), 0);
}

// The same try with time to wait: the multi-lock goes on name by name under the same owner id,
// and each name's possible grant goes back before that name is asked for again.
TEST_F(UnansweredGrantTest, AWaitingMultiLockWhoseTryGotNoAnswerIsGrantedOnceRedisIsBack) {
  HttpClient client = HttpClient::tcp(sidecar.port());
  stallRedis([&] {
    client.sendRequest(
        "POST", "/v1/multilocks/acquire",
        json{{"names", {"w-1", "w-2"}}, {"ttl_ms", kTtlMs}, {"wait_ms", 20'000}}.dump());
  });
  std::optional<HttpResponse> answer = client.readResponse(15'000);
  ASSERT_TRUE(answer.has_value());
  ASSERT_EQ(answer->status, 200) << answer->body << sidecar.logs();
  const json grant = json::parse(answer->body);
  EXPECT_EQ(redis.cli({"GET", "sidelock:{w-1}"}), grant["owner"].get<std::string>());
  EXPECT_EQ(redis.cli({"GET", "sidelock:{w-2}"}), grant["owner"].get<std::string>());
  EXPECT_EQ(outcomes(observer, "left_to_owner"), 0);
  EXPECT_EQ(observer
                .post("/v1/multilocks/release",
                      json{{"names", {"w-1", "w-2"}}, {"owner", grant["owner"]}}.dump())
                .status,
            200);
  EXPECT_EQ(sidecar.stop(), 0);
}

// An owner id the caller chose may have held the lock before (here or through another sidecar):
// releasing "its" grant could free a lease it still relies on. The sidecar leaves it, and the
// error says what the caller can do.
TEST_F(UnansweredGrantTest, ACallersOwnOwnerIdIsToldTheAcquireMayHaveBeenGranted) {
  HttpClient client = HttpClient::tcp(sidecar.port());
  HttpResponse answer;
  stallRedis([&] {
    answer = client.post("/v1/locks/chosen/acquire",
                         json{{"ttl_ms", kTtlMs}, {"owner", "worker-7"}}.dump());
  });
  ASSERT_EQ(answer.status, 503) << answer.body;
  EXPECT_NE(answer.body.find("may have been granted"), std::string::npos) << answer.body;
  EXPECT_EQ(outcomes(observer, "left_to_owner"), 1);
  ASSERT_TRUE(pollUntil([&] { return observer.get("/readyz").status == 200; }));
  EXPECT_EQ(redis.cli({"GET", "sidelock:{chosen}"}), "worker-7") << "Redis ran it late";
  EXPECT_EQ(outcomes(observer, "released"), 0);
  // As the error says: the caller releases it with its owner id.
  HttpResponse released = observer.post("/v1/locks/chosen/release", R"({"owner":"worker-7"})");
  EXPECT_EQ(released.status, 200) << released.body;
  EXPECT_FALSE(exists("sidelock:{chosen}"));
  EXPECT_EQ(sidecar.stop(), 0);
}

}  // namespace
}  // namespace sidelock::testing
