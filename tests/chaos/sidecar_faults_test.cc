// Chaos scenarios where the clients and the sidecars fail: crashed holders, killed and stopped
// sidecars, a client paused inside its critical section (and the unfenced control that must lose
// an update there), disconnect storms, a crowd of waiters. Each prints its operations, faults and
// violations; README.md in this directory has the figures.
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "chaos/cluster.h"
#include "chaos/metrics_watch.h"
#include "chaos/workload.h"
#include "support/http_client.h"

namespace sidelock::testing::chaos {
namespace {

using nlohmann::json;

/// Grants by clients of sidecar `process` completed after `after_us`.
int64_t grantsOf(const History& history, int process, int64_t after_us) {
  const auto ops = history.operations();
  return std::count_if(ops.begin(), ops.end(), [&](const Operation& op) {
    return op.kind == OpKind::kAcquire && op.status == 200 && op.process == process &&
           op.complete_us > after_us;
  });
}

bool anyLostUpdate(const std::vector<std::string>& violations) {
  return std::any_of(violations.begin(), violations.end(),
                     [](const std::string& v) { return v.starts_with("lost updates"); });
}

constexpr int64_t kProgressTimeoutMs = 4 * Timings::kWaitMs;

TEST(ChaosSidecarFaults, HolderCrashWithQueuedWaiters) {
  Cluster cluster({});
  History history;
  MetricsWatch metrics(cluster.sidecarPorts());
  const std::vector<std::string> locks = {"crash"};
  int holder_id = 100;
  for (const bool stream : {true, false}) {
    // The crashing holder takes the longest TTL allowed, so the waiters are sure to queue.
    HolderProcess holder(history, cluster.sidecar(0).port(), 0, holder_id++, "crash",
                         Timings::kMaxTtlMs, stream);
    Workload workload(history, cluster.workload(locks, 4));
    ASSERT_TRUE(pollUntil(Timings::kMaxTtlMs, [&] {
      return queuedWaiters(cluster.sidecar(0).port(), "crash") > 0 &&
             queuedWaiters(cluster.sidecar(1).port(), "crash") > 0;
    })) << "waiters did not queue on both sidecars";
    const int64_t grants_before = workload.grants();
    const size_t fault = history.beginFault(std::string("kill -9 of a holder process (") +
                                            (stream ? "stream hold" : "plain lease") +
                                            ") with waiters queued on both sidecars");
    holder.crash();
    history.endFault(fault);
    // A dropped stream is released at once; a plain lease only when its TTL runs out.
    const int64_t bound_ms = (stream ? 0 : Timings::kMaxTtlMs) + Timings::kLivenessSlackMs;
    EXPECT_TRUE(pollUntil(bound_ms, [&] { return workload.grants() > grants_before; }))
        << "no waiter got the lock within " << bound_ms << " ms of the crash";
    EXPECT_TRUE(workload.waitForMoreGrants(20, kProgressTimeoutMs));
    workload.stop();
  }
  EXPECT_TRUE(cluster.verdict("holder crash", history, metrics, locks).empty());
}

TEST(ChaosSidecarFaults, SidecarKilledAndRestarted) {
  Scenario s({}, {"restart"});
  ASSERT_TRUE(s.workload.waitForMoreGrants(10, kProgressTimeoutMs));
  for (int round = 0; round < 2 * chaosRounds(); ++round) {
    const int victim = round % 2;  // each sidecar in turn
    const int survivor = 1 - victim;
    const size_t fault = s.history.beginFault(
        "kill -9 of sidecar " + std::to_string(victim) + ", restarted", victim);
    s.metrics.forget(victim);
    s.cluster.sidecar(victim).kill();
    const int64_t killed_us = nowUs();
    // Down for at least a TTL, so the dead sidecar's leases expire; the survivor's clients go
    // on, at the latest once they did.
    EXPECT_TRUE(pollUntil(Timings::kTtlMs + Timings::kWaitMs + Timings::kLivenessSlackMs, [&] {
      return nowUs() - killed_us > Timings::kTtlMs * 1000 &&
             grantsOf(s.history, survivor, killed_us) >= 3;
    }));
    s.metrics.forget(victim);
    s.cluster.sidecar(victim).restart();
    s.history.endFault(fault);
    const int64_t restarted_us = nowUs();
    EXPECT_TRUE(pollUntil(kProgressTimeoutMs, [&] {
      return grantsOf(s.history, victim, restarted_us) >= 3;
    })) << "the restarted sidecar's clients got no lock";
  }
  EXPECT_TRUE(s.verdict("sidecar kill -9 and restart").empty());
}

TEST(ChaosSidecarFaults, SidecarStoppedForThreeTtls) {
  Scenario s({}, {"stopped"});
  ASSERT_TRUE(s.workload.waitForMoreGrants(10, kProgressTimeoutMs));
  for (int round = 0; round < chaosRounds(); ++round) {
    const int victim = round % 2;
    const int survivor = 1 - victim;
    const size_t fault = s.history.beginFault(
        "SIGSTOP of sidecar " + std::to_string(victim) + " for 3 x TTL", victim);
    const int64_t stopped_us = nowUs();
    s.cluster.sidecar(victim).pause();
    // The fault lasts a fixed 3 x TTL; meanwhile the other sidecar grants once the stopped
    // one's leases expired.
    std::this_thread::sleep_for(std::chrono::milliseconds(3 * Timings::kTtlMs));
    EXPECT_GE(grantsOf(s.history, survivor, stopped_us), 1) << "the other sidecar made no progress";
    s.cluster.sidecar(victim).resume();
    s.history.endFault(fault);
    const int64_t resumed_us = nowUs();
    EXPECT_TRUE(pollUntil(kProgressTimeoutMs,
                          [&] { return grantsOf(s.history, victim, resumed_us) >= 3; }));
  }
  EXPECT_TRUE(s.verdict("sidecar SIGSTOP for 3 x TTL").empty());
}

TEST(ChaosSidecarFaults, ClientPausedInsideItsCriticalSection) {
  Cluster cluster({});
  {
    History history;
    MetricsWatch metrics(cluster.sidecarPorts());
    const std::vector<std::string> locks = {"paused"};
    Workload workload(history, cluster.workload(locks, 4));
    ASSERT_TRUE(workload.waitForMoreGrants(5, kProgressTimeoutMs));
    for (int i = 0; i < 2 * chaosRounds(); ++i) {
      auto late =
          workload.pauseOneClientInCriticalSection(kProgressTimeoutMs + 20 * Timings::kTtlMs);
      ASSERT_TRUE(late.has_value()) << "no client paused";
      EXPECT_FALSE(late->accepted)
          << "the late write of token " << late->token << " must be refused by the resource";
    }
    EXPECT_TRUE(workload.waitForMoreGrants(5, kProgressTimeoutMs));
    workload.stop();
    EXPECT_TRUE(
        cluster.verdict("client paused in its critical section", history, metrics, locks).empty());
  }
  // The control: the same pause against a resource that ignores tokens must lose an update, or
  // the checker would be blind to the very failure fencing prevents.
  History history;
  MetricsWatch metrics(cluster.sidecarPorts());
  const std::vector<std::string> locks = {"control"};
  WorkloadOptions control = cluster.workload(locks, 2, /*fenced=*/false);
  control.register_prefix = "control:";
  Workload workload(history, control);
  ASSERT_TRUE(workload.waitForMoreGrants(5, kProgressTimeoutMs));
  auto late = workload.pauseOneClientInCriticalSection(kProgressTimeoutMs + 20 * Timings::kTtlMs);
  ASSERT_TRUE(late.has_value());
  EXPECT_TRUE(late->accepted) << "an unfenced resource takes the late write";
  workload.stop();
  const auto violations = cluster.verdict("unfenced control (client paused)", history, metrics,
                                          locks, "control:", /*fenced=*/false);
  EXPECT_TRUE(anyLostUpdate(violations)) << "the checker must see the control's lost update";
}

TEST(ChaosSidecarFaults, CpuStarvationDuringLongAutoRenewedHolds) {
  Cluster cluster({});
  History history;
  MetricsWatch metrics(cluster.sidecarPorts());
  const std::vector<std::string> locks = {"starved-a", "starved-b"};
  WorkloadOptions options = cluster.workload(locks, 4);
  options.auto_renew_hold_ms = 2 * Timings::kTtlMs;  // every hold needs renewals
  Workload workload(history, options);
  ASSERT_TRUE(workload.waitForMoreGrants(2, kProgressTimeoutMs));
  SidecarProcess& victim = cluster.sidecar(0);
  // Starvation as the scheduler would inflict it, only harder: sidecar 0 runs in short slices
  // between long stops. Its watchdog renews late or not at all; its clients keep working.
  auto starve = [&](int64_t stopped_ms, int64_t running_ms, int64_t total_ms) {
    const size_t fault =
        history.beginFault("sidecar 0 starved: stopped " + std::to_string(stopped_ms) +
                               " ms of every " + std::to_string(stopped_ms + running_ms) +
                               " ms, for " + std::to_string(total_ms) + " ms",
                           0);
    const int64_t end_us = nowUs() + total_ms * 1000;
    while (nowUs() < end_us) {
      victim.pause();
      std::this_thread::sleep_for(std::chrono::milliseconds(stopped_ms));
      victim.resume();
      std::this_thread::sleep_for(std::chrono::milliseconds(running_ms));
    }
    history.endFault(fault);
  };
  // Leases sidecar 0 is renewing now (GET /v1/locks).
  auto renewing = [&] {
    try {
      HttpClient http = HttpClient::tcp(victim.port());
      const json list = json::parse(http.get("/v1/locks").body, nullptr, false);
      return list.is_object() ? list.value("leases", json::array()).size() : size_t{0};
    } catch (const std::exception&) {
      return size_t{0};
    }
  };
  for (int round = 0; round < chaosRounds(); ++round) {
    starve(150, 50, 3000);  // 75 % of the CPU gone, each stop shorter than a TTL / 4
    // Stops of 2 x TTL while it renews a lease: the lease lapses, a waiter on sidecar 1 takes
    // the lock, and sidecar 0 must report the loss once it runs again.
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(pollUntil(kProgressTimeoutMs, [&] { return renewing() > 0; }));
      starve(2 * Timings::kTtlMs, 200, 2 * Timings::kTtlMs);  // one stop
    }
  }
  EXPECT_TRUE(workload.waitForMoreGrants(2, kProgressTimeoutMs));
  workload.stop();
  const HoldOutcomes outcomes = workload.holdOutcomes();
  std::printf(
      "[chaos]   holds: %lld held through, %lld losses reported, %lld unanswered releases, %lld "
      "stale holders refused by the register, %zu silent losses\n",
      static_cast<long long>(outcomes.held_through), static_cast<long long>(outcomes.loss_reported),
      static_cast<long long>(outcomes.unanswered),
      static_cast<long long>(outcomes.refused_accesses), outcomes.silent_losses.size());
  EXPECT_GT(outcomes.held_through, 0);
  EXPECT_GT(outcomes.loss_reported, 0) << "stops longer than a TTL must cost some leases";
  auto violations =
      cluster.verdict("CPU starvation during long auto_renew holds", history, metrics, locks);
  violations.insert(violations.end(), outcomes.silent_losses.begin(), outcomes.silent_losses.end());
  for (const auto& v : outcomes.silent_losses) std::printf("[chaos]   VIOLATION %s\n", v.c_str());
  EXPECT_TRUE(violations.empty());
}

/// Sends an acquire on a fresh connection without reading the answer.
HttpClient sendAcquire(int port, const std::string& lock, const json& body) {
  HttpClient c = HttpClient::tcp(port);
  c.sendRequest("POST", "/v1/locks/" + lock + "/acquire", body.dump());
  return c;
}

TEST(ChaosSidecarFaults, DisconnectAndCancelStormsLeaveNoRenewals) {
  Scenario s({}, {"storm-work"});
  Cluster& cluster = s.cluster;
  std::vector<std::string> storm_locks = {"storm"};
  constexpr int kQueuedPerSidecar = 100;
  constexpr int kStreams = 50;
  for (int i = 0; i < kStreams; ++i) storm_locks.push_back("storm-stream-" + std::to_string(i));
  const json queued_body = {
      {"ttl_ms", Timings::kTtlMs}, {"wait_ms", 5 * Timings::kWaitMs}, {"auto_renew", true}};

  for (const bool cancel_at_release : {false, true}) {
    HttpClient holder = HttpClient::tcp(cluster.sidecar(0).port());
    auto grant =
        holder.post("/v1/locks/storm/acquire", json{{"ttl_ms", Timings::kMaxTtlMs}}.dump());
    ASSERT_EQ(grant.status, 200) << grant.body;
    const std::string owner = json::parse(grant.body)["owner"];
    const size_t fault = s.history.beginFault(
        std::string("disconnect storm: ") + std::to_string(2 * kQueuedPerSidecar) +
        " queued auto_renew acquires dropped " +
        (cancel_at_release ? "as the holder releases" : "while queued"));
    std::vector<HttpClient> queued;
    for (int sidecar = 0; sidecar < cluster.sidecarCount(); ++sidecar) {
      for (int i = 0; i < kQueuedPerSidecar; ++i) {
        queued.push_back(sendAcquire(cluster.sidecar(sidecar).port(), "storm", queued_body));
      }
    }
    ASSERT_TRUE(pollUntil(Timings::kWaitMs, [&] {
      return queuedWaiters(cluster.sidecar(0).port(), "storm") == kQueuedPerSidecar &&
             queuedWaiters(cluster.sidecar(1).port(), "storm") == kQueuedPerSidecar;
    }));
    if (cancel_at_release) {
      // Release and hang up at once: grants may race the hang-ups and reach departed clients.
      holder.sendRequest("POST", "/v1/locks/storm/release", json{{"owner", owner}}.dump());
      queued.clear();
      auto released = holder.readResponse();
      ASSERT_TRUE(released.has_value());
      EXPECT_EQ(released->status, 200);
    } else {
      queued.clear();
      EXPECT_TRUE(pollUntil(Timings::kWaitMs, [&] {
        return queuedWaiters(cluster.sidecar(0).port(), "storm") == 0 &&
               queuedWaiters(cluster.sidecar(1).port(), "storm") == 0;
      })) << "waiters that hung up are still queued";
      EXPECT_EQ(holder.post("/v1/locks/storm/release", json{{"owner", owner}}.dump()).status, 200);
    }
    s.history.endFault(fault);
  }

  // Stream holds dropped right after their grant: each must be released, none renewed on.
  const size_t fault = s.history.beginFault(std::to_string(kStreams) +
                                            " stream holds dropped right after their grant");
  for (int i = 0; i < kStreams; ++i) {
    HttpClient c = sendAcquire(cluster.sidecar(i % 2).port(), "storm-stream-" + std::to_string(i),
                               {{"ttl_ms", Timings::kTtlMs}, {"hold", "stream"}});
    if (i % 2 == 0) {  // half of them hang up before the answer
      ASSERT_TRUE(c.readStreamHead().has_value());
    }
  }
  s.history.endFault(fault);
  EXPECT_TRUE(s.workload.waitForMoreGrants(5, kProgressTimeoutMs));
  const auto violations = s.verdict("disconnect and cancel storms", storm_locks);
  // A grant that raced its client's hang-up must have been given back (never renewed for nobody
  // until max_hold_ms): no lease key of `storm` may be left.
  EXPECT_TRUE(violations.empty());
}

TEST(ChaosSidecarFaults, TwoThousandWaitersOnOneLock) {
  constexpr int kWaiters = 2000;
  constexpr int kQueueLimit = 1000;
  ClusterOptions options;
  options.sidecars = 1;
  options.extra_locks_yaml = "  max_waiters_per_lock: " + std::to_string(kQueueLimit) + "\n";
  options.extra_listen_yaml = "  max_connections: 4096\n";
  Cluster cluster(options);
  History history;
  MetricsWatch metrics(cluster.sidecarPorts(), 500);
  const int port = cluster.sidecar(0).port();
  HttpClient holder = HttpClient::tcp(port);
  holder.sendRequest("POST", "/v1/locks/crowd/acquire",
                     json{{"ttl_ms", Timings::kTtlMs}, {"hold", "stream"}}.dump());
  ASSERT_TRUE(holder.readStreamHead().has_value());
  const double rss_before = scrapeMetrics(port)["process_resident_memory_bytes"];

  const size_t fault = history.beginFault(std::to_string(kWaiters) + " waiters on one lock");
  struct Waiter {
    HttpClient http;
    Operation op;
  };
  std::vector<Waiter> waiters;
  waiters.reserve(kWaiters);
  for (int i = 0; i < kWaiters; ++i) {
    Operation op{.client = i,
                 .kind = OpKind::kAcquire,
                 .lock = "crowd",
                 .deadline_ms = 5 * Timings::kWaitMs};
    op.invoke_us = nowUs();
    waiters.push_back(
        {sendAcquire(port, "crowd", {{"ttl_ms", Timings::kTtlMs}, {"wait_ms", op.deadline_ms}}),
         op});
  }
  // The ones past the limit are answered 429 at once; read them as they come.
  int rejected = 0;
  int without_retry_after = 0;
  std::vector<bool> answered(kWaiters, false);
  pollUntil(Timings::kWaitMs, [&] {
    std::vector<pollfd> fds;
    for (auto& w : waiters) fds.push_back({w.http.fd(), POLLIN, 0});
    poll(fds.data(), fds.size(), 50);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (answered[i] || (fds[i].revents & POLLIN) == 0) continue;
      auto r = waiters[i].http.readResponse(1000);
      answered[i] = true;
      waiters[i].op.complete_us = nowUs();
      waiters[i].op.status = r ? r->status : kNoAnswer;
      history.add(waiters[i].op);
      if (r && r->status == 429) {
        ++rejected;
        if (!r->headers.contains("retry-after")) ++without_retry_after;
      }
    }
    return rejected >= kWaiters - kQueueLimit;
  });
  EXPECT_EQ(rejected, kWaiters - kQueueLimit);
  EXPECT_EQ(queuedWaiters(port, "crowd"), kQueueLimit);
  const double rss_queued = scrapeMetrics(port)["process_resident_memory_bytes"];
  // Bounded: well under 32 KiB per connection (sanitizer builds included).
  EXPECT_LT(rss_queued - rss_before, kWaiters * 32.0 * 1024)
      << "RSS grew from " << rss_before << " to " << rss_queued;
  std::printf("[chaos]   RSS %.1f MiB before, %.1f MiB with %d waiters queued\n",
              rss_before / 1048576, rss_queued / 1048576, kQueueLimit);

  // The queued ones hang up (they are cancelled), then the holder goes.
  for (size_t i = 0; i < waiters.size(); ++i) {
    if (answered[i]) continue;
    waiters[i].http.close();
    waiters[i].op.complete_us = nowUs();
    waiters[i].op.status = kNoAnswer;
    history.add(waiters[i].op);
  }
  EXPECT_TRUE(pollUntil(Timings::kWaitMs, [&] { return queuedWaiters(port, "crowd") == 0; }));
  holder.close();
  history.endFault(fault);
  EXPECT_TRUE(cluster.verdict("2,000 waiters on one lock", history, metrics, {"crowd"}).empty());
  EXPECT_EQ(without_retry_after, 0)
      << "of " << rejected << " answers 429 too_many_waiters, some carry no Retry-After";
}

}  // namespace
}  // namespace sidelock::testing::chaos
