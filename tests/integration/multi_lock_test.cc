// Multi-locks (issue 13): POST /v1/multilocks/acquire takes every name or none, in one global
// (sorted) order, so overlapping multi-locks never deadlock; /release frees them all. Real
// sidecars on a real redis-server (and Redlock nodes); exclusion is checked by an observer of the
// clients' own grant-to-release intervals.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "support/hold_check.h"
#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/redlock_sidecar.h"
#include "support/sidecar_group.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

bool held(HttpClient& c, const std::string& name) {
  return json::parse(c.get("/v1/locks/" + name).body)["held"].get<bool>();
}

// Two sidecars `a` and `b` on one `redis`, clients `ca` and `cb`; both must stop cleanly.
class MultiLockTwoSidecars : public TwoSidecarsOnOneRedis {};

TEST(MultiLockTest, AllOrNoneInSortedOrder) {
  RedisServer redis;
  auto s = sidecarOnRedis(redis.address());
  HttpClient c = HttpClient::tcp(s->port());

  auto multi =
      c.post("/v1/multilocks/acquire", R"({"names":["inv-2","inv-1","inv-3"],"ttl_ms":20000})");
  ASSERT_EQ(multi.status, 200) << multi.body;
  const json grant = json::parse(multi.body);
  EXPECT_EQ(grant["names"], json({"inv-1", "inv-2", "inv-3"})) << "sorted: the global order";
  ASSERT_EQ(grant["leases"].size(), 3u);
  for (const auto& lease : grant["leases"]) {
    EXPECT_GT(lease["token"].get<uint64_t>(), 0u);
    EXPECT_GT(lease["ttl_ms"].get<int64_t>(), 10'000);
  }
  EXPECT_GT(grant["ttl_ms"].get<int64_t>(), 10'000);
  const std::string owner = grant["owner"];
  for (const char* name : {"inv-1", "inv-2", "inv-3"}) EXPECT_TRUE(held(c, name)) << name;
  EXPECT_EQ(c.post("/v1/locks/inv-2/acquire", "{}").status, 409) << "each name is a plain lock";

  // One name held: none is taken, and the answer says which one blocked.
  auto blocked = c.post("/v1/multilocks/acquire", R"({"names":["free-1","inv-3","free-2"]})");
  EXPECT_EQ(blocked.status, 409) << blocked.body;
  EXPECT_EQ(json::parse(blocked.body)["error"], "locked");
  EXPECT_NE(json::parse(blocked.body)["message"].get<std::string>().find("inv-3"),
            std::string::npos);
  EXPECT_FALSE(held(c, "free-1")) << "nothing was taken";
  EXPECT_FALSE(held(c, "free-2"));
  EXPECT_EQ(redis.cli({"EXISTS", "sidelock:{free-1}:token"}), "0")
      << "one atomic step on a single Redis: free-1 was never granted and given back";

  // Release frees every name; a second release says none is held.
  auto rel = c.post("/v1/multilocks/release",
                    json{{"names", {"inv-1", "inv-2", "inv-3"}}, {"owner", owner}}.dump());
  EXPECT_EQ(rel.status, 200) << rel.body;
  for (const char* name : {"inv-1", "inv-2", "inv-3"}) EXPECT_FALSE(held(c, name)) << name;
  auto again = c.post("/v1/multilocks/release",
                      json{{"names", {"inv-1", "inv-2"}}, {"owner", owner}}.dump());
  EXPECT_EQ(again.status, 404) << again.body;
  EXPECT_NE(again.body.find("(none was released)"), std::string::npos) << again.body;

  // A release naming somebody else's lock frees ours and says which one was not.
  auto mine = c.post("/v1/multilocks/acquire", R"({"names":["p-1","p-2"],"owner":"me-1"})");
  ASSERT_EQ(mine.status, 200) << mine.body;
  auto other = c.post("/v1/locks/p-3/acquire", "{}");
  ASSERT_EQ(other.status, 200);
  auto partial = c.post("/v1/multilocks/release",
                        json{{"names", {"p-1", "p-2", "p-3"}}, {"owner", "me-1"}}.dump());
  EXPECT_EQ(partial.status, 409) << partial.body;
  EXPECT_NE(partial.body.find("p-3"), std::string::npos) << partial.body;
  EXPECT_NE(partial.body.find("(the other names were released)"), std::string::npos)
      << partial.body;
  EXPECT_FALSE(held(c, "p-1"));
  EXPECT_FALSE(held(c, "p-2"));
  EXPECT_TRUE(held(c, "p-3"));

  // Bad input is refused and takes nothing.
  for (const char* bad : {R"({})", R"({"names":[]})", R"({"names":"a"})", R"({"names":["a",1]})",
                          R"({"names":["a","a"]})", R"({"names":["a{b"]})", R"({"names":[["a"]]})",
                          R"({"names":["a"],"mode":"shared"})", R"({"names":["a"],"ttl_ms":0})"}) {
    auto r = c.post("/v1/multilocks/acquire", bad);
    EXPECT_EQ(r.status, 400) << bad << ": " << r.body;
  }
  std::string many = "{\"names\":[";
  for (int i = 0; i < 65; ++i) many += (i ? ",\"n" : "\"n") + std::to_string(i) + "\"";
  EXPECT_EQ(c.post("/v1/multilocks/acquire", many + "]}").status, 400) << "at most 64 names";
  EXPECT_EQ(c.post("/v1/multilocks/release", R"({"names":["a"]})").status, 400) << "owner needed";
  EXPECT_FALSE(held(c, "a"));
  EXPECT_EQ(s->stop(), 0) << s->logs();
}

// Clients on two sidecars take overlapping sets of accounts, each naming them in its own order
// (a transfer a->b and one b->a is the textbook deadlock). Taken in the global order, every
// transfer gets through well within its wait budget, and the observer never sees two holders
// of one account.
TEST_F(MultiLockTwoSidecars, OverlappingMultiLocksNeverDeadlock) {
  const std::vector<std::vector<std::string>> sets = {
      {"acct-a", "acct-b"}, {"acct-b", "acct-a"},           {"acct-b", "acct-c"},
      {"acct-c", "acct-a"}, {"acct-c", "acct-b", "acct-a"}, {"acct-a"}};
  constexpr int kRounds = 10;
  std::mutex mu;
  HoldLog holds;  // each account's grant-to-release interval, per client
  std::atomic<int> failures{0};
  std::string first_failure;
  std::vector<std::thread> clients;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < 2 * sets.size(); ++i) {
    const int port = i % 2 == 0 ? a->port() : b->port();
    const std::vector<std::string>& names = sets[i / 2];
    clients.emplace_back([&, port, names] {
      HttpClient c = HttpClient::tcp(port);
      for (int round = 0; round < kRounds; ++round) {
        HttpResponse r;
        try {
          r = c.post("/v1/multilocks/acquire",
                     json{{"names", names}, {"ttl_ms", 10000}, {"wait_ms", 8000}}.dump());
        } catch (const std::exception& e) {  // a deadlock outlasts the client's own timeout
          std::lock_guard<std::mutex> lock(mu);
          if (failures++ == 0) first_failure = e.what();
          return;
        }
        if (r.status != 200) {
          std::lock_guard<std::mutex> lock(mu);
          if (failures++ == 0) first_failure = std::to_string(r.status) + " " + r.body;
          continue;
        }
        const auto granted = HoldLog::now();
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        const auto releasing = HoldLog::now();
        for (const auto& n : names) holds.record(n, granted, releasing);
        auto rel = c.post("/v1/multilocks/release",
                          json{{"names", names}, {"owner", json::parse(r.body)["owner"]}}.dump());
        if (rel.status != 200) {
          std::lock_guard<std::mutex> lock(mu);
          if (failures++ == 0) first_failure = "release " + rel.body;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(failures.load(), 0) << first_failure;
  EXPECT_LT(seconds, 8.0) << "no transfer waited out its budget";
  const ExclusionReport report = checkExclusion(holds.holds());
  EXPECT_TRUE(report.violations.empty())
      << "the observer saw two holders of one account: " << report.violations.front();
  std::cout << "[multi_lock] " << 2 * sets.size() * kRounds
            << " overlapping multi-locks on 2 sidecars in " << seconds << " s\n";
}

// A lease taken first runs down while the next name is waited for: it is extended before the
// grant is answered, so every lease comes with a useful TTL. A client that leaves while waiting
// gets nothing and keeps nothing.
TEST(MultiLockTest, EarlyLeasesAreExtendedAndALeavingClientKeepsNothing) {
  RedisServer redis;
  auto s = sidecarOnRedis(redis.address());
  HttpClient c = HttpClient::tcp(s->port());
  ASSERT_EQ(c.post("/v1/locks/late-2/acquire", R"({"ttl_ms":1200})").status, 200);
  auto multi = c.post("/v1/multilocks/acquire",
                      R"({"names":["late-1","late-2"],"ttl_ms":1000,"wait_ms":5000})");
  ASSERT_EQ(multi.status, 200) << multi.body;
  EXPECT_GE(json::parse(multi.body)["ttl_ms"].get<int64_t>(), 500)
      << "late-1 waited ~1.2 s with a 1 s TTL: it was extended";
  EXPECT_GT(std::stoll(redis.cli({"PTTL", "sidelock:{late-1}"})), 500);

  auto blocker = c.post("/v1/locks/gone-2/acquire", R"({"ttl_ms":30000})");
  ASSERT_EQ(blocker.status, 200);
  HttpClient leaving = HttpClient::tcp(s->port());
  leaving.sendRequest("POST", "/v1/multilocks/acquire",
                      R"({"names":["gone-1","gone-2"],"wait_ms":20000})");
  ASSERT_TRUE(pollUntil([&] { return held(c, "gone-1"); })) << "gone-1 taken, gone-2 waited for";
  leaving.close();
  ASSERT_TRUE(pollUntil([&] { return !held(c, "gone-1"); }))
      << "the client left: what it had taken was given back";
  EXPECT_EQ(s->stop(), 0) << s->logs();
}

TEST(MultiLockTest, RedlockServesMultiLocks) {
  RedlockSidecar redlock(3);
  SidecarProcess& s = *redlock.sidecar;
  HttpClient c = HttpClient::tcp(s.port());
  // A Redlock grant needs a majority; the last node may answer a moment after the client did.
  auto nodesSaying = [&](const std::vector<std::string>& cmd, const std::string& answer) {
    int n = 0;
    for (auto& node : redlock.nodes) n += node->cli(cmd) == answer ? 1 : 0;
    return n;
  };
  auto multi = c.post("/v1/multilocks/acquire", R"({"names":["r-2","r-1"]})");
  ASSERT_EQ(multi.status, 200) << multi.body;
  EXPECT_GE(nodesSaying({"EXISTS", "sidelock:{r-1}", "sidelock:{r-2}"}, "2"), 2);
  EXPECT_EQ(c.post("/v1/multilocks/acquire", R"({"names":["r-0","r-2"]})").status, 409);
  EXPECT_TRUE(pollUntil([&] {
    return nodesSaying({"EXISTS", "sidelock:{r-0}"}, "0") == 3;
  })) << "r-0 was given back on every node";
  auto rel =
      c.post("/v1/multilocks/release",
             json{{"names", {"r-1", "r-2"}}, {"owner", json::parse(multi.body)["owner"]}}.dump());
  EXPECT_EQ(rel.status, 200) << rel.body;
  EXPECT_TRUE(pollUntil([&] {
    return nodesSaying({"EXISTS", "sidelock:{r-1}", "sidelock:{r-2}"}, "0") == 3;
  }));
  EXPECT_EQ(s.stop(), 0) << s.logs();
}

}  // namespace
}  // namespace sidelock::testing
