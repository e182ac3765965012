// The soak: steady load with a random fault every few seconds, for SIDELOCK_CHAOS_SOAK_MINUTES
// minutes (skipped without it). The sidecars' RSS and open fds must stay flat, and the run must
// end without a violation.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "chaos/cluster.h"
#include "chaos/metrics_watch.h"

namespace sidelock::testing::chaos {
namespace {

void sleepMs(int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

struct ProcessFootprint {
  double rss_bytes = 0;
  double open_fds = 0;
};

ProcessFootprint footprint(int port) {
  auto samples = scrapeMetrics(port);
  return {samples["process_resident_memory_bytes"], samples["process_open_fds"]};
}

TEST(ChaosSoak, RandomFaultsAtSteadyLoad) {
  const char* minutes_env = getenv("SIDELOCK_CHAOS_SOAK_MINUTES");
  if (minutes_env == nullptr) GTEST_SKIP() << "set SIDELOCK_CHAOS_SOAK_MINUTES=N to soak";
  const double minutes = std::atof(minutes_env);
  ClusterOptions options;
  options.proxied = true;
  options.persistence = true;  // a killed Redis comes back with its data: no fault excuses
  Scenario s(options, {"soak-a", "soak-b"}, 6);
  ASSERT_TRUE(s.workload.waitForMoreGrants(20, 4 * Timings::kWaitMs));
  std::vector<ProcessFootprint> before;
  for (int i = 0; i < s.cluster.sidecarCount(); ++i) {
    before.push_back(footprint(s.cluster.sidecar(i).port()));
  }

  std::mt19937 rng(static_cast<unsigned>(nowUs()));
  const int64_t end_us = nowUs() + static_cast<int64_t>(minutes * 60e6);
  const int64_t outage_ms = 3 * Timings::kTtlMs;
  int faults = 0;
  while (nowUs() < end_us) {
    const int kind = std::uniform_int_distribution<int>(0, 4)(rng);
    const int victim = std::uniform_int_distribution<int>(0, 1)(rng);
    const std::vector<std::string> names = {"SIGSTOP of sidecar " + std::to_string(victim),
                                            "SIGSTOP of Redis", "link to Redis blackholed",
                                            "link to Redis: 20 % loss", "kill -9 of Redis (AOF)"};
    const size_t fault =
        s.history.beginFault(names[static_cast<size_t>(kind)], kind == 0 ? victim : -1);
    switch (kind) {
      case 0:
        s.cluster.sidecar(victim).pause();
        sleepMs(outage_ms);
        s.cluster.sidecar(victim).resume();
        break;
      case 1:
        s.cluster.node(0).pause();
        sleepMs(Timings::kTtlMs);
        s.cluster.node(0).resume();
        break;
      case 2:
        s.cluster.proxy(0).setMode(FaultProxy::Mode::kBlackhole);
        sleepMs(Timings::kTtlMs);
        s.cluster.proxy(0).setMode(FaultProxy::Mode::kPass);
        break;
      case 3:
        s.cluster.proxy(0).setMode(FaultProxy::Mode::kLossy, 200, 0.2);
        sleepMs(outage_ms);
        s.cluster.proxy(0).setMode(FaultProxy::Mode::kPass);
        break;
      default:
        s.cluster.node(0).restart();
        break;
    }
    s.history.endFault(fault);
    ++faults;
    EXPECT_TRUE(s.workload.waitForMoreGrants(3, 4 * Timings::kWaitMs)) << names[kind];
    sleepMs(2000);  // steady load between faults
  }
  for (int i = 0; i < s.cluster.sidecarCount(); ++i) {
    const ProcessFootprint after = footprint(s.cluster.sidecar(i).port());
    std::printf(
        "[chaos]   sidecar %d: RSS %.1f -> %.1f MiB, open fds %.0f -> %.0f after %d faults\n", i,
        before[i].rss_bytes / 1048576, after.rss_bytes / 1048576, before[i].open_fds,
        after.open_fds, faults);
    // Flat: a few reconnects may be in flight; growth proportional to the run would not be.
    EXPECT_LE(after.open_fds, before[i].open_fds + 8);
    EXPECT_LT(after.rss_bytes, before[i].rss_bytes + 16.0 * 1048576);
  }
  EXPECT_TRUE(s.verdict("soak: random faults at steady load").empty());
}

}  // namespace
}  // namespace sidelock::testing::chaos
