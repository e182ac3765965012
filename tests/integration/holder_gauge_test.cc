// sidelock_held_locks_by_holder (issue 20: "held locks by holder", a bounded label set): the real
// sidecar binary on a real redis-server with metrics.holder_top_n: 2. Leases of every kind taken
// through the HTTP API (locks, a multi-lock, a reader, a semaphore permit, the configured
// election) count for their holder label; the two holders with the most have a series each, the
// rest is holder="other"; a holder whose leases end loses its series (no stale series); a label
// with quotes and backslashes comes out escaped; the owner ids never appear.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;
using Series = std::map<std::string, int64_t>;  // the holder label as exposed (escaped) -> value

/// Every sidelock_held_locks_by_holder series of a /metrics text.
Series heldByHolder(const std::string& text) {
  const std::string prefix = "sidelock_held_locks_by_holder{holder=\"";
  Series out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t end = line.rfind("\"} ");
    if (end == std::string::npos || end < prefix.size()) continue;
    out[line.substr(prefix.size(), end - prefix.size())] = std::stoll(line.substr(end + 3));
  }
  return out;
}

std::string ownerOf(const HttpResponse& r, const char* field = "owner") {
  const json body = json::parse(r.body, nullptr, false);
  return body.is_object() ? body.value(field, "") : "";
}

TEST(HolderGaugeTest, TopHoldersHaveSeriesTheRestIsOtherAndEndedHoldersLeave) {
  RedisServer redis;
  SidecarProcess sidecar({redisBackendYaml(redis.address()) +
                              "identity: pod-x\n"
                              "elections: [{name: gauge-election, ttl_ms: 5000}]\n"
                              "metrics:\n  holder_top_n: 2\n",
                          {},
                          /*wait_ready=*/true});
  HttpClient c = HttpClient::tcp(sidecar.port());
  Series seen;
  auto expectSeries = [&](const Series& want) {
    EXPECT_TRUE(pollUntil([&] {
      seen = heldByHolder(c.get("/metrics").body);
      return seen == want;
    })) << "last seen: "
        << json(seen).dump() << ", wanted " << json(want).dump();
  };
  // The configured election's lease counts for its candidate, the sidecar's identity.
  expectSeries({{"pod-x", 1}, {"other", 0}});

  std::vector<std::string> owners;
  auto post = [&](const std::string& path, const json& body, const char* field = "owner") {
    const HttpResponse r = c.post(path, body.dump());
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    owners.push_back(ownerOf(r, field));
    return owners.back();
  };
  // a: a lock and a multi-lock of two names (three leases); b: a reader and a permit; c: a lock.
  const std::string a_lock = post("/v1/locks/g-a1/acquire", {{"ttl_ms", 20000}, {"holder", "a"}});
  const std::string a_multi = post("/v1/multilocks/acquire",
                                   {{"names", {"g-a2", "g-a3"}}, {"ttl_ms", 20000}, {"holder", "a"}});
  const std::string b_reader = post("/v1/locks/g-b1/acquire",
                                    {{"ttl_ms", 20000}, {"mode", "shared"}, {"holder", "b"}});
  const std::string b_permit = post("/v1/semaphores/g-b2/acquire",
                                    {{"limit", 3}, {"ttl_ms", 20000}, {"holder", "b"}}, "permit");
  const std::string c_lock = post("/v1/locks/g-c1/acquire", {{"ttl_ms", 20000}, {"holder", "c"}});
  expectSeries({{"a", 3}, {"b", 2}, {"other", 2}});  // other: c and pod-x
  const std::string text = c.get("/metrics").body;
  EXPECT_NE(text.find("sidelock_held_locks 7"), std::string::npos) << "the gauge sums to it";
  for (const std::string& owner : owners) {
    ASSERT_FALSE(owner.empty());
    EXPECT_EQ(text.find(owner), std::string::npos) << "an owner id in /metrics";
  }

  // a releases everything: its series goes; c and pod-x tie for the second place (by label).
  EXPECT_EQ(c.post("/v1/locks/g-a1/release", json{{"owner", a_lock}}.dump()).status, 200);
  EXPECT_EQ(c.post("/v1/multilocks/release",
                   json{{"names", {"g-a2", "g-a3"}}, {"owner", a_multi}}.dump())
                .status,
            200);
  expectSeries({{"b", 2}, {"c", 1}, {"other", 1}});

  // b leaves; a holder label with quotes and a backslash takes two locks: escaped in the text.
  EXPECT_EQ(c.post("/v1/locks/g-b1/release", json{{"owner", b_reader}}.dump()).status, 200);
  EXPECT_EQ(c.post("/v1/semaphores/g-b2/release", json{{"permit", b_permit}}.dump()).status, 200);
  const std::string odd = R"(team "q" \ night)";
  const std::string q1 = post("/v1/locks/g-q1/acquire", {{"ttl_ms", 20000}, {"holder", odd}});
  const std::string q2 = post("/v1/locks/g-q2/acquire", {{"ttl_ms", 20000}, {"holder", odd}});
  expectSeries({{R"(team \"q\" \\ night)", 2}, {"c", 1}, {"other", 1}});

  EXPECT_EQ(c.post("/v1/locks/g-q1/release", json{{"owner", q1}}.dump()).status, 200);
  EXPECT_EQ(c.post("/v1/locks/g-q2/release", json{{"owner", q2}}.dump()).status, 200);
  EXPECT_EQ(c.post("/v1/locks/g-c1/release", json{{"owner", c_lock}}.dump()).status, 200);
  expectSeries({{"pod-x", 1}, {"other", 0}});
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();
}

TEST(HolderGaugeTest, TopNZeroCountsEveryLeaseInOther) {
  RedisServer redis;
  SidecarProcess sidecar({redisBackendYaml(redis.address()) + "metrics:\n  holder_top_n: 0\n",
                          {},
                          /*wait_ready=*/true});
  HttpClient c = HttpClient::tcp(sidecar.port());
  const HttpResponse r = c.post("/v1/locks/g-z/acquire", R"({"ttl_ms":20000,"holder":"z"})");
  ASSERT_EQ(r.status, 200) << r.body;
  Series seen;
  EXPECT_TRUE(pollUntil([&] {
    seen = heldByHolder(c.get("/metrics").body);
    return seen == Series{{"other", 1}};
  })) << json(seen).dump();
  EXPECT_EQ(sidecar.stop(), 0) << sidecar.logs();
}

}  // namespace
}  // namespace sidelock::testing
