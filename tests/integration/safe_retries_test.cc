// request_id (issue 13, "Safe retries over HTTP"): a retried acquire whose first attempt was
// granted gets the same grant instead of 409; a retried release gets the first answer; with the
// client's own owner id, a retry after a sidecar restart still gets its grant. Real sidecars on a
// real redis-server.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;

std::unique_ptr<SidecarProcess> sidecarOn(const RedisServer& redis) {
  return sidecarOnRedis(redis.address());
}

/// A grant answer (a lock's or a multi-lock's) without its TTLs, which it checks are those of a
/// 30 s grant: a retry extends the lease(s) again and answers the validity that extend measured
/// (the TTL less the time the extend took), so under load it may say 29999 where the first
/// said 30000. What must be the same is the owner, the name(s) and the token(s).
json grantOf(const HttpResponse& answer) {
  json grant = json::parse(answer.body);
  EXPECT_GT(grant["ttl_ms"].get<int64_t>(), 25'000) << grant;
  EXPECT_LE(grant["ttl_ms"].get<int64_t>(), 30'000) << grant;
  grant.erase("ttl_ms");
  if (!grant.contains("leases")) return grant;
  for (json& lease : grant["leases"]) {
    EXPECT_GT(lease["ttl_ms"].get<int64_t>(), 25'000) << lease;
    lease.erase("ttl_ms");
  }
  return grant;
}

TEST(SafeRetriesTest, RetriedAcquireAndReleaseGetTheFirstAnswers) {
  RedisServer redis;
  auto s = sidecarOn(redis);
  HttpClient c = HttpClient::tcp(s->port());
  const std::string acquire = R"({"ttl_ms":30000,"request_id":"job-17-try"})";
  auto first = c.post("/v1/locks/orders-1/acquire", acquire);
  ASSERT_EQ(first.status, 200) << first.body;
  auto retry = c.post("/v1/locks/orders-1/acquire", acquire);
  ASSERT_EQ(retry.status, 200) << retry.body;
  EXPECT_EQ(grantOf(retry), grantOf(first)) << "same owner, same token";
  // Another request id is another acquire: the lock is held.
  EXPECT_EQ(c.post("/v1/locks/orders-1/acquire", R"({"request_id":"other"})").status, 409);
  // The same request id on another lock is another request.
  EXPECT_EQ(c.post("/v1/locks/orders-2/acquire", acquire).status, 200);

  const std::string owner = json::parse(first.body)["owner"];
  const std::string release = json{{"owner", owner}, {"request_id", "rel-1"}}.dump();
  auto released = c.post("/v1/locks/orders-1/release", release);
  EXPECT_EQ(released.status, 200) << released.body;
  auto again = c.post("/v1/locks/orders-1/release", release);
  EXPECT_EQ(again.status, 200) << "the first answer, not 404: " << again.body;
  EXPECT_EQ(again.body, released.body);
  EXPECT_EQ(c.post("/v1/locks/orders-1/release", json{{"owner", owner}}.dump()).status, 404)
      << "without request_id a release is a release";
  // The first grant is gone (released): a retry of its acquire is a new acquire, never a replay
  // of a lease that no longer exists.
  auto after_release = c.post("/v1/locks/orders-1/acquire", acquire);
  ASSERT_EQ(after_release.status, 200) << after_release.body;
  EXPECT_GT(json::parse(after_release.body)["token"].get<uint64_t>(),
            json::parse(first.body)["token"].get<uint64_t>());
  // Expired too: the retry gets a fresh lease.
  const std::string short_acquire = R"({"ttl_ms":200,"request_id":"short-1"})";
  auto short_first = c.post("/v1/locks/orders-4/acquire", short_acquire);
  ASSERT_EQ(short_first.status, 200);
  ASSERT_TRUE(pollUntil(
      [&] { return json::parse(c.get("/v1/locks/orders-4").body)["held"] == false; }, 5000));
  auto short_retry = c.post("/v1/locks/orders-4/acquire", short_acquire);
  ASSERT_EQ(short_retry.status, 200);
  EXPECT_NE(json::parse(short_retry.body)["owner"], json::parse(short_first.body)["owner"]);

  // A request id names one request: a "retry" that changed its fields (here asking for renewals
  // the first did not) is refused, and the first grant stays as it was (a helper's run got a
  // silent 200 with the first, unrenewed lease).
  const std::string plain = R"({"ttl_ms":30000,"request_id":"job-18"})";
  auto granted = c.post("/v1/locks/orders-5/acquire", plain);
  ASSERT_EQ(granted.status, 200) << granted.body;
  auto changed = c.post("/v1/locks/orders-5/acquire",
                        R"({"ttl_ms":30000,"auto_renew":true,"request_id":"job-18"})");
  EXPECT_EQ(changed.status, 422) << changed.body;
  EXPECT_EQ(json::parse(changed.body)["error"], "request_id_reused") << changed.body;
  // The same fields in another order and spacing are the same request.
  auto same =
      c.post("/v1/locks/orders-5/acquire", R"({ "request_id": "job-18", "ttl_ms": 30000 })");
  ASSERT_EQ(same.status, 200) << same.body;
  EXPECT_EQ(json::parse(same.body)["token"], json::parse(granted.body)["token"]);
  const std::string owner5 = json::parse(granted.body)["owner"];
  const std::string release5 = json{{"owner", owner5}, {"request_id", "rel-5"}}.dump();
  ASSERT_EQ(c.post("/v1/locks/orders-5/release", release5).status, 200);
  auto release_changed =
      c.post("/v1/locks/orders-5/release",
             json{{"owner", owner5}, {"mode", "shared"}, {"request_id", "rel-5"}}.dump());
  EXPECT_EQ(release_changed.status, 422) << release_changed.body;

  // Bad request ids and streams are refused and change nothing.
  for (const char* bad : {R"({"request_id":""})", R"({"request_id":"has space"})",
                          R"({"request_id":7})", R"({"request_id":"x","hold":"stream"})"}) {
    auto r = c.post("/v1/locks/orders-3/acquire", bad);
    EXPECT_EQ(r.status, 400) << bad << " -> " << r.body;
  }
  EXPECT_EQ(json::parse(c.get("/v1/locks/orders-3").body)["held"], false);
  EXPECT_EQ(s->stop(), 0) << s->logs();
}

/// POSTs `body` to `path`, kills the sidecar `s` (the answer may never have reached the client)
/// and starts it anew on `redis`, without memory; returns the first answer, and the retry's on the
/// new sidecar.
std::pair<HttpResponse, HttpResponse> retryAcrossARestart(const RedisServer& redis,
                                                          std::unique_ptr<SidecarProcess>& s,
                                                          const std::string& path,
                                                          const std::string& body) {
  auto first = HttpClient::tcp(s->port()).post(path, body);
  EXPECT_EQ(first.status, 200) << first.body;
  s->kill();
  s = sidecarOn(redis);
  auto retry = HttpClient::tcp(s->port()).post(path, body);
  EXPECT_EQ(retry.status, 200) << retry.body;
  return {first, retry};
}

TEST(SafeRetriesTest, WithItsOwnOwnerIdARetryAfterASidecarRestartGetsItsGrant) {
  RedisServer redis;
  auto s = sidecarOn(redis);
  const std::string acquire = R"({"ttl_ms":30000,"owner":"worker-7-lease","request_id":"r-1"})";
  const auto [first, retry] = retryAcrossARestart(redis, s, "/v1/locks/report/acquire", acquire);
  ASSERT_EQ(retry.status, 200) << retry.body;
  HttpClient c2 = HttpClient::tcp(s->port());
  EXPECT_EQ(json::parse(retry.body)["token"], json::parse(first.body)["token"]);
  EXPECT_EQ(json::parse(retry.body)["owner"], "worker-7-lease");
  // Somebody else's retry with the same request id is not the owner: 409.
  EXPECT_EQ(c2.post("/v1/locks/report/acquire", R"({"owner":"worker-8-lease","request_id":"r-1"})")
                .status,
            409);
  EXPECT_EQ(s->stop(), 0) << s->logs();
}

// A retry is recognised by its request id; the owner id alone proves nothing about the request
// (review finding): a second request of an owner that holds the lock through this sidecar, under
// another request id, is refused 409 held_by_you. It gets neither the lease nor sets its TTL.
TEST(SafeRetriesTest, AnotherRequestOfTheSameOwnerIsNotARetry) {
  RedisServer redis;
  auto s = sidecarOn(redis);
  HttpClient c = HttpClient::tcp(s->port());
  auto first = c.post("/v1/locks/report/acquire",
                      R"({"ttl_ms":60000,"owner":"shared-by-threads","request_id":"thread-a"})");
  ASSERT_EQ(first.status, 200) << first.body;
  auto second = c.post("/v1/locks/report/acquire",
                       R"({"ttl_ms":1000,"owner":"shared-by-threads","request_id":"thread-b"})");
  EXPECT_EQ(second.status, 409) << second.body;
  EXPECT_EQ(json::parse(second.body).value("reason", ""), "held_by_you") << second.body;
  // The holder's TTL is the one it asked for, not the second request's 1 s.
  EXPECT_GT(std::stoll(redis.cli({"PTTL", "sidelock:{report}"})), 30'000);
  auto multi_first = c.post("/v1/multilocks/acquire",
                            R"({"names":["m-1","m-2"],"ttl_ms":60000,"owner":"shared-multi",)"
                            R"("request_id":"thread-a"})");
  ASSERT_EQ(multi_first.status, 200) << multi_first.body;
  auto multi_second = c.post("/v1/multilocks/acquire",
                             R"({"names":["m-1","m-2"],"ttl_ms":1000,"owner":"shared-multi",)"
                             R"("request_id":"thread-b"})");
  EXPECT_EQ(multi_second.status, 409) << multi_second.body;
  EXPECT_GT(std::stoll(redis.cli({"PTTL", "sidelock:{m-1}"})), 30'000);
  EXPECT_EQ(s->stop(), 0) << s->logs();
}

// Multi-locks: a retried acquire gets the same grant while every lease is still its owner's; a
// grant that is partly gone is given back and the retry is a new acquire; a retried release gets
// the first answer.
TEST(SafeRetriesTest, RetriedMultiLockAcquireAndReleaseGetTheFirstAnswers) {
  RedisServer redis;
  auto s = sidecarOn(redis);
  HttpClient c = HttpClient::tcp(s->port());
  const std::string acquire = R"({"names":["acct-1","acct-2"],"ttl_ms":30000,"request_id":"t-1"})";
  auto first = c.post("/v1/multilocks/acquire", acquire);
  ASSERT_EQ(first.status, 200) << first.body;
  auto retry = c.post("/v1/multilocks/acquire", acquire);
  ASSERT_EQ(retry.status, 200) << retry.body;
  EXPECT_EQ(grantOf(retry), grantOf(first)) << "same owner, same tokens";
  // The names are a set: the retry may list them in another order.
  auto reordered = c.post("/v1/multilocks/acquire",
                          R"({"names":["acct-2","acct-1"],"ttl_ms":30000,"request_id":"t-1"})");
  EXPECT_EQ(grantOf(reordered), grantOf(first)) << reordered.body;
  // Another set of names, or another owner, is another request: the names are held.
  EXPECT_EQ(c.post("/v1/multilocks/acquire", R"({"names":["acct-1"],"request_id":"t-1"})").status,
            409);
  EXPECT_EQ(c.post("/v1/multilocks/acquire",
                   R"({"names":["acct-1","acct-2"],"owner":"o","request_id":"t-1"})")
                .status,
            409);

  // One of the leases is gone: the retry gives back what is left and acquires anew.
  const json grant = json::parse(first.body);
  const std::string owner = grant["owner"];
  ASSERT_EQ(c.post("/v1/locks/acct-2/release", json{{"owner", owner}}.dump()).status, 200);
  auto after_loss = c.post("/v1/multilocks/acquire", acquire);
  ASSERT_EQ(after_loss.status, 200)
      << "not 409 against its own leftover lease: " << after_loss.body;
  const json renewed = json::parse(after_loss.body);
  EXPECT_NE(renewed["owner"], owner) << "a new grant, never a replay of a lease that is gone";
  EXPECT_GT(renewed["leases"][0]["token"].get<uint64_t>(),
            grant["leases"][0]["token"].get<uint64_t>());

  const std::string release = json{
      {"names", {"acct-1", "acct-2"}},
      {"owner", renewed["owner"]},
      {"request_id", "r-1"}}.dump();
  auto released = c.post("/v1/multilocks/release", release);
  EXPECT_EQ(released.status, 200) << released.body;
  auto again = c.post("/v1/multilocks/release", release);
  EXPECT_EQ(again.status, 200) << "the first answer, not 404: " << again.body;
  EXPECT_EQ(again.body, released.body);

  // Bad request ids are refused and change nothing.
  for (const char* bad : {R"({"names":["acct-3"],"request_id":""})",
                          R"({"names":["acct-3"],"request_id":"has space"})",
                          R"({"names":["acct-3"],"request_id":7})"}) {
    auto r = c.post("/v1/multilocks/acquire", bad);
    EXPECT_EQ(r.status, 400) << bad << " -> " << r.body;
  }
  EXPECT_EQ(json::parse(c.get("/v1/locks/acct-3").body)["held"], false);
  EXPECT_EQ(s->stop(), 0) << s->logs();
}

TEST(SafeRetriesTest, WithItsOwnOwnerIdARetriedMultiLockAfterASidecarRestartGetsItsGrant) {
  RedisServer redis;
  auto s = sidecarOn(redis);
  const std::string acquire =
      R"({"names":["ledger-b","ledger-a"],"ttl_ms":30000,"owner":"xfer-9","request_id":"m-1"})";
  const auto [first, retry] = retryAcrossARestart(redis, s, "/v1/multilocks/acquire", acquire);
  ASSERT_EQ(retry.status, 200) << retry.body;
  EXPECT_EQ(grantOf(retry), grantOf(first)) << "same owner, same tokens";
  HttpClient c2 = HttpClient::tcp(s->port());
  // Somebody else's retry with the same request id is not the owner: 409.
  EXPECT_EQ(c2.post("/v1/multilocks/acquire",
                    R"({"names":["ledger-a","ledger-b"],"owner":"xfer-10","request_id":"m-1"})")
                .status,
            409);
  // A set of which only part is the client's own is not its grant: 409, and nothing is taken.
  EXPECT_EQ(c2.post("/v1/multilocks/acquire",
                    R"({"names":["ledger-a","ledger-c"],"owner":"xfer-9","request_id":"m-2"})")
                .status,
            409);
  EXPECT_EQ(json::parse(c2.get("/v1/locks/ledger-c").body)["held"], false);
  EXPECT_EQ(s->stop(), 0) << s->logs();
}

}  // namespace
}  // namespace sidelock::testing
