// Elections the sidecar runs for its pod (config `identity` + `elections`, issue 19): two real
// sidecars on a real redis-server, each configured with the same election and its own identity,
// campaign from start-up with no app at all. Exactly one leads, with its configured value (${VAR}
// expanded); `ready` without a candidate and the leader gauge tell the two pods apart; after a
// loss (the election's keys deleted) the loser campaigns again; SIGTERM of the leader's sidecar
// resigns before it drains, so the other pod leads within a fraction of the TTL ([pod-election]
// line: the hand-over time).
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "support/http_client.h"
#include "support/redis_server.h"
#include "support/sidecar_polling.h"
#include "support/sidecar_process.h"

namespace sidelock::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int64_t kTtlMs = 4000;

std::unique_ptr<SidecarProcess> podSidecar(const RedisServer& redis, const std::string& identity,
                                           const std::string& pod_ip) {
  return std::make_unique<SidecarProcess>(SidecarProcess::Options{
      // release_held: false, so only the resign of the pod's elections hands over at once.
      redisBackendYaml(redis.address()) + "shutdown: {release_held: false}\nidentity: " +
          identity +
          "\n"
          "elections:\n"
          "  - name: scheduler\n"
          "    value: \"${POD_IP}:8080\"\n"
          "    ttl_ms: " +
          std::to_string(kTtlMs) + "\n",
      {"POD_IP=" + pod_ip},
      /*wait_ready=*/true});
}

/// The leader of "scheduler" as `c`'s sidecar reads it (null if none).
json leaderOf(HttpClient& c) {
  const HttpResponse r = c.get("/v1/elections/scheduler");
  EXPECT_EQ(r.status, 200) << r.body;
  return json::parse(r.body)["leader"];
}

int64_t leaderGauge(HttpClient& c) {
  return metricValue(c.get("/metrics").body, "sidelock_election_leader{election=\"scheduler\"}");
}

TEST(PodElectionsTest, ConfiguredElectionsNeedNoAppAndHandOverOnSigterm) {
  RedisServer redis;
  std::unique_ptr<SidecarProcess> a = podSidecar(redis, "pod-a", "10.0.0.1");
  std::unique_ptr<SidecarProcess> b = podSidecar(redis, "pod-b", "10.0.0.2");
  HttpClient ca = HttpClient::tcp(a->port());
  HttpClient cb = HttpClient::tcp(b->port());

  // Exactly one leads, with its own ${POD_IP} in its value; every sidecar says the same.
  json leader;
  ASSERT_TRUE(pollUntil([&] { return (leader = leaderOf(ca)).is_object(); })) << a->logs();
  const bool a_leads = leader["candidate"] == "pod-a";
  EXPECT_TRUE(a_leads || leader["candidate"] == "pod-b") << leader.dump();
  EXPECT_EQ(leader["value"], a_leads ? "10.0.0.1:8080" : "10.0.0.2:8080");
  const json on_b = leaderOf(cb);
  for (const char* field : {"candidate", "value", "term", "since_ms"}) {
    EXPECT_EQ(on_b[field], leader[field]) << field;  // ttl_ms: what was left at each read
  }
  HttpClient& c_leader = a_leads ? ca : cb;
  HttpClient& c_other = a_leads ? cb : ca;
  std::unique_ptr<SidecarProcess>& leading = a_leads ? a : b;

  // `ready` without a candidate asks about the sidecar's own identity.
  EXPECT_EQ(c_leader.get("/v1/elections/scheduler/ready").status, 200);
  const HttpResponse not_ready = c_other.get("/v1/elections/scheduler/ready");
  EXPECT_EQ(not_ready.status, 503) << not_ready.body;
  EXPECT_EQ(json::parse(not_ready.body)["error"], "not_leader");

  // The gauges: the leader is 1 on one pod and 0 on the other; nobody has been leaderless.
  EXPECT_TRUE(pollUntil([&] { return leaderGauge(c_leader) == 1; }));
  EXPECT_EQ(leaderGauge(c_other), 0);
  for (HttpClient* c : {&ca, &cb}) {
    const std::string m = c->get("/metrics").body;
    EXPECT_EQ(metricValue(m, "sidelock_election_ttl_seconds{election=\"scheduler\"}"),
              kTtlMs / 1000);
    EXPECT_EQ(metricValue(m, "sidelock_election_leaderless_seconds{election=\"scheduler\"}"), 0)
        << m;
  }
  // The other pod waits in line.
  EXPECT_TRUE(pollUntil([&] {
    return json::parse(c_other.get("/v1/locks").body)["waiters"].dump().find(
               "election/scheduler") != std::string::npos;
  }));

  // A loss (the election's lease deleted behind the sidecars' backs): a new term, one leader,
  // and the pod that lost campaigns again (it leads again or waits in line).
  const uint64_t first_term = leader["term"];
  ASSERT_EQ(redis.cli({"DEL", "sidelock:{scheduler}:el", "sidelock:{scheduler}:el:leader"}), "2");
  const auto deleted_at = Clock::now();
  ASSERT_TRUE(pollUntil([&] {
    const json now = leaderOf(ca);
    return now.is_object() && now["term"].get<uint64_t>() > first_term &&
           leaderGauge(ca) + leaderGauge(cb) == 1;
  })) << a->logs() << b->logs();
  EXPECT_TRUE(pollUntil([&] { return leading->logs().find("pod_election.campaign_again") !=
                                     std::string::npos; }))
      << leading->logs();
  EXPECT_TRUE(pollUntil([&] {
    if (leaderGauge(c_leader) == 1) return true;
    return json::parse(c_leader.get("/v1/locks").body)["waiters"].dump().find(
               "election/scheduler") != std::string::npos;
  })) << "the pod that lost did not campaign again\n"
      << leading->logs();
  std::printf("[pod-election] a new leader %lld ms after the lease was deleted (TTL %lld ms)\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         Clock::now() - deleted_at)
                                         .count()),
              static_cast<long long>(kTtlMs));

  // SIGTERM of the current leader's sidecar: it resigns before draining; the other pod leads
  // at once, not after the TTL.
  const bool a_leads_now = leaderOf(ca)["candidate"] == "pod-a";
  std::unique_ptr<SidecarProcess>& stopping = a_leads_now ? a : b;
  std::unique_ptr<SidecarProcess>& staying = a_leads_now ? b : a;
  HttpClient& c_staying = a_leads_now ? cb : ca;
  const std::string successor = a_leads_now ? "pod-b" : "pod-a";
  ASSERT_TRUE(pollUntil([&] {
    return json::parse(c_staying.get("/v1/locks").body)["waiters"].dump().find(
               "election/scheduler") != std::string::npos;
  })) << "the other pod is not in line";
  // stop() sends SIGTERM and waits for the exit: on a thread of its own, while this one watches.
  const auto sigterm_at = Clock::now();
  std::future<int> exit_code = std::async(std::launch::async, [&] { return stopping->stop(); });
  ASSERT_TRUE(pollUntil(
      [&] {
        const json now = leaderOf(c_staying);
        return now.is_object() && now["candidate"] == successor;
      },
      kTtlMs * 3))
      << staying->logs();
  const int64_t handover_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - sigterm_at).count();
  std::printf("[pod-election] hand-over on SIGTERM of the leader's sidecar: %lld ms (TTL %lld ms)\n",
              static_cast<long long>(handover_ms), static_cast<long long>(kTtlMs));
  EXPECT_LT(handover_ms, kTtlMs / 2) << "the leader did not resign before draining";
  EXPECT_EQ(leaderOf(c_staying)["value"], a_leads_now ? "10.0.0.2:8080" : "10.0.0.1:8080");
  EXPECT_EQ(exit_code.get(), 0) << stopping->logs();
  EXPECT_NE(stopping->logs().find("pod_election.resign_on_shutdown"), std::string::npos)
      << stopping->logs();
  EXPECT_TRUE(pollUntil([&] { return leaderGauge(c_staying) == 1; }));
  EXPECT_EQ(c_staying.get("/v1/elections/scheduler/ready").status, 200);
  EXPECT_EQ(staying->stop(), 0) << staying->logs();
}

}  // namespace
}  // namespace sidelock::testing
