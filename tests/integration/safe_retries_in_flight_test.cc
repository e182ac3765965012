// request_id while the first request is still running (issue 22; elections' proclaim and resign,
// issue 19): a retry that arrives before the
// first answer waits for that answer and never acts a second time, also when the first request's
// client gave up and hung up. Real sidecars on a real redis-server whose writes are held back
// with CLIENT PAUSE ... WRITE, so that the first request is provably still in flight when its
// copies arrive.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "support/election_streams.h"
#include "support/http_client.h"
#include "support/redis_link.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;

// Long enough for every copy to arrive while the first waits; well under the sidecar's Redis
// command timeout (kCommandTimeoutMs), so the sidecar does not give the link up meanwhile (with
// the default 500 ms, a loaded machine's 150 ms of slack ran out: "release timed out").
constexpr int kPauseMs = 350;
constexpr int kCommandTimeoutMs = 3000;

/// Requests the sidecar received and has not answered, not counting the /metrics request that
/// asks.
int64_t inFlight(HttpClient& c) {
  return metricValue(c.get("/metrics").body, "sidelock_http_in_flight_requests") - 1;
}

/// Holds back Redis writes (the sidecar's acquire and release scripts) for kPauseMs.
void pauseWrites(const RedisServer& redis) {
  ASSERT_EQ(RedisLink(redis.port()).text({"CLIENT", "PAUSE", std::to_string(kPauseMs), "WRITE"}),
            "OK");
}

/// Sends `copies` copies of one POST, each on its own connection, the first alone until it is in
/// flight (so it is the first), and returns the answers. `open` requests were in flight before
/// (a campaign stream).
std::vector<HttpResponse> sendCopies(int port, const std::string& path, const std::string& body,
                                     int copies, int open = 0) {
  HttpClient probe = HttpClient::tcp(port);
  std::vector<HttpClient> clients;
  for (int i = 0; i < copies; ++i) {
    clients.push_back(HttpClient::tcp(port));
    clients.back().sendRequest("POST", path, body);
    if (i == 0) {
      EXPECT_TRUE(pollUntil([&] { return inFlight(probe) == open + 1; }));
    }
  }
  EXPECT_TRUE(pollUntil([&] { return inFlight(probe) == open + copies; }));
  std::vector<HttpResponse> answers;
  for (auto& c : clients) {
    auto answer = c.readResponse();
    EXPECT_TRUE(answer.has_value());
    answers.push_back(answer.value_or(HttpResponse{}));
  }
  return answers;
}

/// Sends a POST whose answer Redis holds back, waits 100 ms for it in vain, and hangs up (a
/// client whose timeout fired, about to retry).
void sendAndGiveUp(int port, const std::string& path, const std::string& body) {
  HttpClient impatient = HttpClient::tcp(port);
  impatient.sendRequest("POST", path, body);
  EXPECT_FALSE(impatient.readResponse(100).has_value()) << "Redis holds " << path << " back";
}

/// Sends a POST whose client gives up while Redis holds it back, then the client's retry on a new
/// connection: the retry's answer.
HttpResponse retryAfterGivingUp(const RedisServer& redis, int port, const std::string& path,
                                const std::string& body) {
  pauseWrites(redis);
  sendAndGiveUp(port, path, body);
  HttpClient retry = HttpClient::tcp(port);
  return retry.post(path, body);
}

class SafeRetriesInFlightTest : public ::testing::Test {
 protected:
  RedisServer redis_;
  std::unique_ptr<SidecarProcess> sidecar_ =
      std::make_unique<SidecarProcess>(SidecarProcess::Options{
          redisBackendYaml(redis_.address(), kCommandTimeoutMs), {}, /*wait_ready=*/true});
  HttpClient c_ = HttpClient::tcp(sidecar_->port());

  void TearDown() override { EXPECT_EQ(sidecar_->stop(), 0) << sidecar_->logs(); }
};

TEST_F(SafeRetriesInFlightTest, CopiesOfAReleaseOfAReentrantHoldReleaseOneHold) {
  const std::string acquire = R"({"owner":"me","reentrant":true,"ttl_ms":30000})";
  ASSERT_EQ(c_.post("/v1/locks/re/acquire", acquire).status, 200);
  ASSERT_EQ(c_.post("/v1/locks/re/acquire", acquire).status, 200);  // two holds

  pauseWrites(redis_);
  auto answers = sendCopies(sidecar_->port(), "/v1/locks/re/release",
                            R"({"owner":"me","request_id":"once"})", 2);
  for (const auto& a : answers) {
    EXPECT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.body, answers[0].body) << "the copy gets the first answer";
  }
  EXPECT_EQ(json::parse(answers[0].body)["held"], true) << answers[0].body;
  EXPECT_EQ(json::parse(c_.get("/v1/locks/re").body)["held"], true)
      << "one release, so one hold is left";
  auto last = c_.post("/v1/locks/re/release", R"({"owner":"me"})");
  EXPECT_EQ(last.status, 200) << last.body;
  EXPECT_FALSE(json::parse(last.body).contains("held")) << "that was the last hold: " << last.body;
}

TEST_F(SafeRetriesInFlightTest, AReleaseRetriedAfterTheClientGaveUpActsOnce) {
  const std::string acquire = R"({"owner":"me","reentrant":true,"ttl_ms":30000})";
  ASSERT_EQ(c_.post("/v1/locks/re/acquire", acquire).status, 200);
  ASSERT_EQ(c_.post("/v1/locks/re/acquire", acquire).status, 200);
  const std::string release = R"({"owner":"me","request_id":"give-up"})";

  auto answer = retryAfterGivingUp(redis_, sidecar_->port(), "/v1/locks/re/release", release);
  EXPECT_EQ(answer.status, 200) << answer.body;
  EXPECT_EQ(json::parse(answer.body)["held"], true) << answer.body;
  EXPECT_EQ(json::parse(c_.get("/v1/locks/re").body)["held"], true) << "one hold is left";
}

TEST_F(SafeRetriesInFlightTest, AnAcquireRetriedAfterTheClientGaveUpGetsItsGrant) {
  const std::string acquire = R"({"ttl_ms":30000,"request_id":"acq-1"})";
  // Its grant must reach the retry, not be given back.
  auto answer = retryAfterGivingUp(redis_, sidecar_->port(), "/v1/locks/job/acquire", acquire);
  HttpClient retry = HttpClient::tcp(sidecar_->port());
  ASSERT_EQ(answer.status, 200) << answer.body;
  const std::string owner = json::parse(answer.body)["owner"];
  // The grant is the retry's: still held, and its owner releases it.
  EXPECT_EQ(json::parse(c_.get("/v1/locks/job").body)["held"], true);
  EXPECT_EQ(metricValue(c_.get("/metrics").body, "sidelock_grants_undelivered_total"), 0);
  auto again = json::parse(retry.post("/v1/locks/job/acquire", acquire).body);
  EXPECT_EQ(again["owner"], owner) << "a later retry gets the same grant";
  EXPECT_EQ(again["token"], json::parse(answer.body)["token"]);
  EXPECT_EQ(c_.post("/v1/locks/job/release", json{{"owner", owner}}.dump()).status, 200);
}

TEST_F(SafeRetriesInFlightTest, CopiesOfALockAcquireGetOneGrant) {
  pauseWrites(redis_);
  auto answers = sendCopies(sidecar_->port(), "/v1/locks/one/acquire",
                            R"({"ttl_ms":30000,"request_id":"copy"})", 3);
  for (const auto& a : answers) {
    EXPECT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.body, answers[0].body) << "the same grant, not 409";
  }
}

TEST_F(SafeRetriesInFlightTest, EightCopiesOfAPermitAcquireTakeOnePermit) {
  pauseWrites(redis_);
  auto answers = sendCopies(sidecar_->port(), "/v1/semaphores/pool/acquire",
                            R"({"limit":5,"ttl_ms":30000,"request_id":"sale-1"})", 8);
  for (const auto& a : answers) {
    EXPECT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.body, answers[0].body) << "the same permit";
  }
  auto pool = json::parse(c_.get("/v1/semaphores/pool").body);
  EXPECT_EQ(pool["used"], 1) << pool.dump();
}

// A second run of a copy would answer 404 not_held (the permit is gone): the copies get 200.
TEST_F(SafeRetriesInFlightTest, CopiesOfAPermitReleaseReleaseOnce) {
  auto mine = c_.post("/v1/semaphores/pool/acquire", R"({"limit":2,"ttl_ms":30000})");
  ASSERT_EQ(mine.status, 200) << mine.body;
  auto other = c_.post("/v1/semaphores/pool/acquire", R"({"limit":2,"ttl_ms":30000})");
  ASSERT_EQ(other.status, 200) << other.body;
  const std::string permit = json::parse(mine.body)["permit"];

  pauseWrites(redis_);
  auto answers =
      sendCopies(sidecar_->port(), "/v1/semaphores/pool/release",
                 json{{"permit", permit}, {"request_id", "rel-p"}}.dump(), 3);
  for (const auto& a : answers) {
    EXPECT_EQ(a.status, 200) << "the first answer, not 404 not_held: " << a.body;
    EXPECT_EQ(a.body, answers[0].body);
  }
  auto pool = json::parse(c_.get("/v1/semaphores/pool").body);
  EXPECT_EQ(pool["used"], 1) << "the other permit is still held: " << pool.dump();
}

TEST_F(SafeRetriesInFlightTest, APermitAcquireRetriedAfterTheClientGaveUpGetsItsPermit) {
  const std::string acquire = R"({"limit":3,"ttl_ms":30000,"request_id":"acq-p"})";
  // Its permit must reach the retry, not be given back, and no second permit be taken.
  auto answer =
      retryAfterGivingUp(redis_, sidecar_->port(), "/v1/semaphores/pool/acquire", acquire);
  HttpClient retry = HttpClient::tcp(sidecar_->port());
  ASSERT_EQ(answer.status, 200) << answer.body;
  const json grant = json::parse(answer.body);
  auto pool = json::parse(c_.get("/v1/semaphores/pool").body);
  EXPECT_EQ(pool["used"], 1) << pool.dump();
  EXPECT_EQ(metricValue(c_.get("/metrics").body, "sidelock_grants_undelivered_total"), 0);
  auto again = json::parse(retry.post("/v1/semaphores/pool/acquire", acquire).body);
  EXPECT_EQ(again["permit"], grant["permit"]) << "a later retry gets the same permit";
  EXPECT_EQ(c_.post("/v1/semaphores/pool/release", json{{"permit", grant["permit"]}}.dump()).status,
            200);
}

// Multi-locks: the same claim. A second run of a copy would answer 409 (the names are held by
// the first run's owner) and a second release 404 (nothing left to release).
TEST_F(SafeRetriesInFlightTest, CopiesOfAMultiLockAcquireGetOneGrant) {
  pauseWrites(redis_);
  auto answers = sendCopies(sidecar_->port(), "/v1/multilocks/acquire",
                            R"({"names":["to","from"],"ttl_ms":30000,"request_id":"xfer-1"})", 3);
  for (const auto& a : answers) {
    EXPECT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.body, answers[0].body) << "the same owner and tokens, not 409";
  }
  // Each lease is the one the answer names.
  // (Named: a range-for over a member of a temporary json would read freed memory.)
  const json grant = json::parse(answers[0].body);
  for (const auto& lease : grant["leases"]) {
    EXPECT_EQ(json::parse(c_.get("/v1/locks/" + lease["name"].get<std::string>()).body)["token"],
              lease["token"]);
  }
}

TEST_F(SafeRetriesInFlightTest, CopiesOfAMultiLockReleaseReleaseOnce) {
  auto grant = c_.post("/v1/multilocks/acquire", R"({"names":["a","b"],"owner":"me"})");
  ASSERT_EQ(grant.status, 200) << grant.body;

  pauseWrites(redis_);
  auto answers = sendCopies(sidecar_->port(), "/v1/multilocks/release",
                            R"({"names":["b","a"],"owner":"me","request_id":"rel-1"})", 3);
  for (const auto& a : answers) {
    EXPECT_EQ(a.status, 200) << "the first answer, not 404 not_held: " << a.body;
    EXPECT_EQ(a.body, answers[0].body);
  }
  EXPECT_EQ(json::parse(c_.get("/v1/locks/a").body)["held"], false);
  // Without the request id a release is a release again: nothing is left.
  EXPECT_EQ(c_.post("/v1/multilocks/release", R"({"names":["a","b"],"owner":"me"})").status, 404);
}

TEST_F(SafeRetriesInFlightTest, AMultiLockAcquireRetriedAfterTheClientGaveUpGetsItsGrant) {
  const std::string acquire = R"({"names":["x","y"],"ttl_ms":30000,"request_id":"acq-m"})";
  // Its grant must reach the retry, not be given back.
  auto answer = retryAfterGivingUp(redis_, sidecar_->port(), "/v1/multilocks/acquire", acquire);
  HttpClient retry = HttpClient::tcp(sidecar_->port());
  ASSERT_EQ(answer.status, 200) << answer.body;
  const json grant = json::parse(answer.body);
  // The grant is the retry's: the leases it names are held, and none was given back.
  for (const auto& lease : grant["leases"]) {
    EXPECT_EQ(json::parse(c_.get("/v1/locks/" + lease["name"].get<std::string>()).body)["token"],
              lease["token"]);
  }
  EXPECT_EQ(metricValue(c_.get("/metrics").body, "sidelock_grants_undelivered_total"), 0);
  auto again = json::parse(retry.post("/v1/multilocks/acquire", acquire).body);
  EXPECT_EQ(again["owner"], grant["owner"]) << "a later retry gets the same grant";
  // The same leases and tokens (ttl_ms is what is left now, and may read a millisecond less).
  ASSERT_EQ(again["leases"].size(), grant["leases"].size()) << again;
  for (size_t i = 0; i < grant["leases"].size(); ++i) {
    EXPECT_EQ(again["leases"][i]["name"], grant["leases"][i]["name"]);
    EXPECT_EQ(again["leases"][i]["token"], grant["leases"][i]["token"]);
  }
  EXPECT_EQ(c_.post("/v1/multilocks/release",
                    json{{"names", {"x", "y"}}, {"owner", grant["owner"]}}.dump())
                .status,
            200);
}

// Elections (issue 19): a resign acts once. A second run of a copy would answer 409 not_leader
// (the leader is gone), so every copy answering 200 proves the copies waited for the first.
TEST_F(SafeRetriesInFlightTest, CopiesOfAnElectionResignResignOnce) {
  Campaign leader(sidecar_->port(), "boss", "pod-a", 30000);
  std::optional<json> elected = leader.elected();
  ASSERT_TRUE(elected.has_value());
  const std::string resign = json{{"owner", (*elected)["owner"]}, {"request_id", "rs-1"}}.dump();

  pauseWrites(redis_);
  auto answers = sendCopies(sidecar_->port(), "/v1/elections/boss/resign", resign, 3, 1);
  for (const auto& a : answers) {
    EXPECT_EQ(a.status, 200) << "the first answer, not 409 not_leader: " << a.body;
    EXPECT_EQ(a.body, answers[0].body);
  }
  std::optional<json> end = leader.nextNotRenewed();
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ((*end)["event"], "resigned");
  // A later retry is answered from memory; without the request id a resign runs again.
  auto later = c_.post("/v1/elections/boss/resign", resign);
  EXPECT_EQ(later.status, 200) << later.body;
  EXPECT_EQ(later.body, answers[0].body);
  EXPECT_EQ(
      c_.post("/v1/elections/boss/resign", json{{"owner", (*elected)["owner"]}}.dump()).status,
      409);
}

// A proclaim acts once too: its copies get the first answer, and so does a retry after the leader
// resigned (a second run would answer 409 not_leader).
TEST_F(SafeRetriesInFlightTest, CopiesOfAProclaimGetTheFirstAnswer) {
  Campaign leader(sidecar_->port(), "boss", "pod-a", 30000, "v0");
  std::optional<json> elected = leader.elected();
  ASSERT_TRUE(elected.has_value());
  const json owner = (*elected)["owner"];
  const std::string proclaim =
      json{{"owner", owner}, {"value", "v1"}, {"request_id", "pr-1"}}.dump();

  pauseWrites(redis_);
  auto answers = sendCopies(sidecar_->port(), "/v1/elections/boss/proclaim", proclaim, 3, 1);
  for (const auto& a : answers) {
    EXPECT_EQ(a.status, 200) << a.body;
    EXPECT_EQ(a.body, answers[0].body);
  }
  EXPECT_EQ(json::parse(c_.get("/v1/elections/boss").body)["leader"]["value"], "v1");
  ASSERT_EQ(c_.post("/v1/elections/boss/resign", json{{"owner", owner}}.dump()).status, 200);
  auto retry = c_.post("/v1/elections/boss/proclaim", proclaim);
  EXPECT_EQ(retry.status, 200) << "answered from memory, not run again: " << retry.body;
  EXPECT_EQ(retry.body, answers[0].body);
  auto fresh = c_.post("/v1/elections/boss/proclaim",
                       json{{"owner", owner}, {"value", "v1"}, {"request_id", "pr-2"}}.dump());
  EXPECT_EQ(fresh.status, 409) << "a new request id runs: " << fresh.body;
}

// Bad request ids are refused before anything runs, as on the lock routes.
TEST_F(SafeRetriesInFlightTest, ElectionRoutesRefuseBadRequestIds) {
  const std::string long_id(129, 'x');
  for (const json& body :
       {json{{"owner", "o"}, {"request_id", ""}}, json{{"owner", "o"}, {"request_id", long_id}},
        json{{"owner", "o"}, {"request_id", 7}}}) {
    auto resign = c_.post("/v1/elections/boss/resign", body.dump());
    EXPECT_EQ(resign.status, 400) << body.dump() << " " << resign.body;
    json with_value = body;
    with_value["value"] = "v";
    auto proclaim = c_.post("/v1/elections/boss/proclaim", with_value.dump());
    EXPECT_EQ(proclaim.status, 400) << with_value.dump() << " " << proclaim.body;
    EXPECT_NE(proclaim.body.find("request_id"), std::string::npos) << proclaim.body;
  }
}

}  // namespace
}  // namespace sidelock::testing
